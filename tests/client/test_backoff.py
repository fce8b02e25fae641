"""kafka_client._backoff: KIP-580's retry waits (retry.backoff.ms doubling up to
retry.backoff.max.ms, +-20% jitter, starting over after a success)."""
from __future__ import annotations

import random

from kafka_client._backoff import RETRY_JITTER, retry_backoff, retry_delay


def test_retry_waits_double_with_jitter_up_to_the_maximum():
    rng = random.Random(3)
    waits = [retry_delay(0.1, 1.0, n, rng) for n in range(1, 9)]
    for n, wait in enumerate(waits[:4]):
        nominal = 0.1 * 2 ** n
        assert RETRY_JITTER[0] * nominal - 1e-9 <= wait <= RETRY_JITTER[1] * nominal + 1e-9
    assert all(wait <= 1.0 for wait in waits)
    assert min(waits[5:]) >= 0.8 * 1.0 - 1e-9       # at the maximum, jittered below it


def test_a_retry_backoff_starts_over_after_a_success():
    backoff = retry_backoff({"retry.backoff.ms": 50, "retry.backoff.max.ms": 400},
                            random.Random(5))
    first = [backoff.next_delay() for _ in range(6)]
    assert first[0] <= 0.06 and first[-1] >= 0.32
    backoff.reset()
    assert backoff.next_delay() <= 0.06


def test_a_maximum_below_the_base_is_a_constant_wait():
    assert 0.8 * 0.5 <= retry_delay(0.5, 0.1, 4, random.Random(1)) <= 0.5
    assert retry_delay(0.0, 1.0, 3) == 0.0
