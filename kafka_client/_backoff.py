"""Exponential backoff with jitter, the one computation every retry loop uses.

KIP-580's rule, as the Java client and librdkafka 2.x apply it to ``retry.backoff.ms``:
the wait doubles with each failure in a row from ``retry.backoff.ms`` up to
``retry.backoff.max.ms``, each wait jittered by +-20%, and starts over after a success.
The reconnect backoff is the same shape with librdkafka's -25%..+50% jitter."""
from __future__ import annotations

import random
from typing import Any, Optional, Tuple

__all__ = ["Backoff", "RETRY_JITTER", "RECONNECT_JITTER", "retry_backoff", "retry_delay"]

#: KIP-580's jitter (the Java client's and librdkafka's retries): +-20%
RETRY_JITTER: Tuple[float, float] = (0.8, 1.2)
#: librdkafka's reconnect jitter: -25%..+50%
RECONNECT_JITTER: Tuple[float, float] = (0.75, 1.5)


def retry_delay(base: float, maximum: float, failures: int,
                rng: Optional[random.Random] = None,
                jitter: Tuple[float, float] = RETRY_JITTER) -> float:
    """The wait (seconds) after ``failures`` failures in a row (1: the first), ``base``
    doubling up to ``maximum`` (seconds), jittered, never above ``maximum``: for a loop
    that counts its own tries (a request retried with its arguments)."""
    if base <= 0:
        return 0.0
    raw = base * (2 ** min(max(failures - 1, 0), 30))
    return min(raw * (rng or random).uniform(*jitter), max(maximum, base))


class Backoff:
    """The waits of one retry loop: ``next_delay()`` after each failure (seconds, doubling
    from ``base_ms`` up to ``max_ms``, jittered, never above ``max_ms``), ``reset()``
    after a success."""

    __slots__ = ("base", "maximum", "failures", "rng", "jitter")

    def __init__(self, base_ms: float, max_ms: float, rng: Optional[random.Random] = None,
                 jitter: Tuple[float, float] = RECONNECT_JITTER) -> None:
        self.base = base_ms / 1000.0
        self.maximum = max(max_ms, base_ms) / 1000.0
        self.failures = 0
        self.rng = rng or random.Random()
        self.jitter = jitter

    def next_delay(self) -> float:
        """The wait before the next attempt (seconds); counts one more failure."""
        self.failures += 1
        return retry_delay(self.base, self.maximum, self.failures, self.rng, self.jitter)

    def reset(self) -> None:
        """A success: the next failure waits ``base_ms`` again."""
        self.failures = 0


def retry_backoff(config: Any, rng: Optional[random.Random] = None) -> Backoff:
    """KIP-580's backoff for a client's ``retry.backoff.ms`` / ``retry.backoff.max.ms``."""
    return Backoff(config["retry.backoff.ms"], config["retry.backoff.max.ms"], rng,
                   jitter=RETRY_JITTER)
