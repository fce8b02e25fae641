"""Bounded smoke run of every fuzz harness (part of the normal suite, no atheris needed).

Each harness replays its committed corpus and then runs the built-in deterministic mutator
(fixed seed) for ``KAFKA_FUZZ_SMOKE_SECONDS`` seconds (default 4, about a minute for the
fifteen harnesses: with the seed fixed, a longer budget repeats the same first inputs in
every run and only adds a tail). Long runs: ``tools/fuzz_run.py`` (see docs/fuzzing.md).
"""
from __future__ import annotations

import os
import random
import time

import pytest

import fuzz_driver as driver
import fuzz_harnesses as harnesses

SMOKE_SECONDS = float(os.environ.get("KAFKA_FUZZ_SMOKE_SECONDS", "4"))
SEED = int(os.environ.get("KAFKA_FUZZ_SEED", "20261122"))


@pytest.fixture(autouse=True)
def live_clusters(request):
    """The ``cluster`` harness' test clusters: started before its inputs are timed,
    stopped after each test."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("name") == "cluster":
        harnesses.start_live_clusters()
    yield
    harnesses.stop_live_clusters()


@pytest.mark.parametrize("name", sorted(harnesses.HARNESSES))
def test_corpus_present_and_clean(name):
    corpus = driver.load_corpus(name)
    assert len(corpus) >= 5, f"seed corpus of {name} is missing (tools/fuzz_capture.py)"
    for data in corpus:
        driver.run_one(name, harnesses.HARNESSES[name], data, input_seconds=2.0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(harnesses.HARNESSES))
def test_smoke(name):
    # The corpus plus a real number of mutations, however slow a loaded machine makes
    # the harness (the cluster's ran 138 inputs in its 4 s at a load of 14), then more
    # while the time lasts.
    least = len(driver.load_corpus(name)) + 100
    stats = driver.run(name, harnesses.HARNESSES[name], SMOKE_SECONDS, seed=SEED,
                       min_inputs=least, input_seconds=2.0, rss_limit_mb=1024)
    assert stats.inputs >= least


def test_run_reaches_its_least_inputs_past_its_time():
    seen = []
    stats = driver.run("count", seen.append, 0.0, min_inputs=50, corpus=[b"a", b"b"])
    assert stats.inputs == len(seen) == 50 and seen[:2] == [b"a", b"b"]
    assert driver.run("count", seen.append, 0.0, corpus=[b"a"]).inputs == 1


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

    runs = []

    def slow_once(data):                # a machine that was busy for the first run only
        runs.append(data)
        if len(runs) == 1:
            time.sleep(0.5)

    assert driver.run_one("slow once", slow_once, b"x", input_seconds=0.3) < 0.3
    assert runs == [b"x", b"x"]


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


def _txn_fetch_input(aborted, flags=0x01):
    """A consumer-harness input: Fetch v12 answer for topic t: producer 7's transaction
    (offsets 0-2) aborted by the marker at 3, producer 8's (4-6, gzip) committed at 7,
    producer 7 again (8-10) committed at 11, a plain zstd record at 12."""
    from kafka_proto.messages import FetchResponse
    from kafka_proto.records import RecordBatchBuilder
    from kafka_proto.records.control import build_control_batch

    log = b""
    off = 0
    for pid, commit, codec in ((7, False, 0), (8, True, 1), (7, True, 0)):
        b = RecordBatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=0,
                               transactional=True, compression=codec)
        for i in range(3):
            b.append(b"p%d-%d" % (pid, i), b"k", 1_700_000_000_000 + i, [("h", b"x")])
        log += b.build(off)
        log += build_control_batch(1 if commit else 0, pid, 0, base_offset=off + 3)
        off += 4
    b = RecordBatchBuilder(compression=4)
    b.append(b"plain", None, 1_700_000_000_100)
    log += b.build(off)
    pd = FetchResponse.PartitionData(
        partition_index=0, high_watermark=13, last_stable_offset=13, records=log,
        aborted_transactions=[FetchResponse.AbortedTransaction(producer_id=p, first_offset=f)
                              for p, f in aborted])
    resp = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[pd])])
    return bytes([12 - 4, flags, 0x30, 0]) + resp.encode(12)


def test_consumer_reference_model_drops_the_aborted_transaction():
    from kafka_client.consumer.fetcher import PartitionState
    from kafka_proto.messages import FetchResponse
    from kafka_proto.records import read_batches

    data = _txn_fetch_input([(7, 0)])
    pd = FetchResponse.decode(data[4:], 12).responses[0].partitions[0]
    batches = list(read_batches(pd.records))
    part = PartitionState("t", 0)
    rows, complete = harnesses._expected_rows(part, batches, 0, True, pd.aborted_transactions)
    assert complete and [r[2] for r in rows] == [4, 5, 6, 8, 9, 10, 12]
    rows, _ = harnesses._expected_rows(part, batches, 5, False, pd.aborted_transactions)
    assert [r[2] for r in rows] == [5, 6, 8, 9, 10, 12]
    # The harness runs clean on it, read_committed or not.
    harnesses.check_consumer(data)
    harnesses.check_consumer(_txn_fetch_input([(7, 0)], flags=0x00))


def test_consumer_harness_catches_a_consumer_that_keeps_aborted_records(monkeypatch):
    from kafka_client.consumer import decode

    real = decode.data_batches

    def leaky(chunk):
        chunk.aborted = None  # forgets the aborted-transactions list
        return real(chunk)

    monkeypatch.setattr(decode, "data_batches", leaky)
    with pytest.raises(harnesses.InvariantViolation, match="reference model"):
        harnesses.check_consumer(_txn_fetch_input([(7, 0)]))


def test_consumer_harness_accepts_a_batch_whose_offsets_decrease():
    from kafka_proto.messages import FetchResponse

    import test_regressions

    pd = FetchResponse.PartitionData(partition_index=0, high_watermark=16,
                                     records=test_regressions.DECREASING_OFFSETS)
    data = bytes([0, 0, 0, 0]) + FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[pd])]).encode(4)
    # Fixed (d3c29fd): the batch is corrupt now (CorruptRecordError after offset 10: delta
    # 5 reaches lastOffsetDelta before the last record) and the consumer hands out offsets
    # that only go up; the harness runs clean on it.
    harnesses.check_consumer(data)
