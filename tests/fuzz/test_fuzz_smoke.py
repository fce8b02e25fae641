"""Bounded smoke run of every fuzz harness (part of the normal suite, no atheris needed).

Each harness replays its committed corpus and then runs the built-in deterministic mutator
(fixed seed) for ``KAFKA_FUZZ_SMOKE_SECONDS`` seconds (default 9, so about a minute for
the six harnesses). Long runs: ``tools/fuzz_run.py`` (see docs/fuzzing.md).
"""
from __future__ import annotations

import os
import random

import pytest

import fuzz_driver as driver
import fuzz_harnesses as harnesses

SMOKE_SECONDS = float(os.environ.get("KAFKA_FUZZ_SMOKE_SECONDS", "9"))
SEED = int(os.environ.get("KAFKA_FUZZ_SEED", "20261122"))


@pytest.mark.parametrize("name", sorted(harnesses.HARNESSES))
def test_corpus_present_and_clean(name):
    corpus = driver.load_corpus(name)
    assert len(corpus) >= 5, f"seed corpus of {name} is missing (tools/fuzz_capture.py)"
    for data in corpus:
        driver.run_one(name, harnesses.HARNESSES[name], data, input_seconds=2.0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(harnesses.HARNESSES))
def test_smoke(name):
    stats = driver.run(name, harnesses.HARNESSES[name], SMOKE_SECONDS, seed=SEED,
                       input_seconds=2.0, rss_limit_mb=1024)
    # The corpus plus a real number of mutations went through (a harness that rejects
    # everything in its first line would still be fast, hence the corpus check above).
    assert stats.inputs > len(driver.load_corpus(name)) + 100


def test_mutator_is_deterministic():
    corpus = driver.load_corpus("records")
    a = [driver.mutate(corpus[0], random.Random(5), corpus) for _ in range(20)]
    b = [driver.mutate(corpus[0], random.Random(5), corpus) for _ in range(20)]
    assert a == b
    assert any(x != corpus[0] for x in a)


def test_driver_reports_undocumented_exception_and_slow_input():
    def bad(data):
        if len(data) > 3:
            raise TypeError("boom")

    with pytest.raises(driver.FuzzFailure, match="TypeError: boom"):
        driver.run("bad", bad, 1.0, corpus=[b"\x00" * 8])

    def slow(data):
        import time

        time.sleep(0.05)

    with pytest.raises(driver.FuzzFailure, match="took"):
        driver.run_one("slow", slow, b"x", input_seconds=0.01)


def test_harnesses_accept_documented_errors_only():
    # A truncated v2 batch header with CRC checking: a documented error, swallowed.
    harnesses.check_records(b"\x01" + b"\x00" * 8 + b"\x00\x00\x00\x40" + b"\x00" * 10)
    # A frame size of -1 is rejected by the parser and by the reference model alike.
    harnesses.check_framing(b"\x00" + b"\x00" * 4 + b"\xff\xff\xff\xff")
    # A response body that does not fit its schema: documented error, swallowed.
    harnesses.check_responses(b"\x00\x03\x00" + b"\xff" * 3)


def test_roundtrip_check_catches_a_lossy_encoder():
    from kafka_proto.messages import MetadataResponse

    resp = MetadataResponse(throttle_time_ms=5)

    class Lossy(MetadataResponse):
        def encode(self, version):
            return MetadataResponse(throttle_time_ms=0).encode(version)

    lossy = Lossy(throttle_time_ms=5)
    harnesses.roundtrip_message(MetadataResponse, resp, 9)
    with pytest.raises(harnesses.InvariantViolation):
        harnesses.roundtrip_message(MetadataResponse, lossy, 9)
