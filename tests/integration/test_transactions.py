"""Transactions against Tansu and noida-db: commit and abort as the log records them, the
exactly-once consume-transform-produce loop (aborts, a process killed in the middle of a
transaction and restarted with the same transactional.id), fencing, and the coordinator's
retriable errors injected through the fault proxy.

What a broker serves decides what is checked where. Both write the COMMIT/ABORT control
records, so the log itself is read and each transaction's outcome taken from its marker
(:func:`log_view`); both keep the transactional offsets. Only noida-db sends the
aborted-transactions list in Fetch answers, so ``read_committed`` consumers (ours and
confluent-kafka's) are checked on noida-db; on Tansu 0.6 they see aborted messages too.
"""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Dict, List, NamedTuple

import pytest

from kafka_client import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka_client._testing.proxy import FaultProxy
from kafka_client._testing.simple import fetch_all
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import ApiKey
from kafka_proto.records import parse_control_record

LOOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "txn_loop.py")


class LogView(NamedTuple):
    """One partition's log as transactions left it: the values of records in committed
    transactions (or written without one), of aborted ones, and of those still open,
    each in offset order; and the markers seen."""

    committed: List[bytes]
    aborted: List[bytes]
    open: List[bytes]
    markers: collections.Counter


def log_view(broker, topic: str, partition: int) -> LogView:
    """Read the partition to its high watermark directly from the broker and sort its
    records by the COMMIT/ABORT marker of their producer's transaction."""
    conn = broker.connect()
    try:
        res = fetch_all(conn, topic, partition)
    finally:
        conn.close()
    committed, aborted = [], []
    pending: Dict[int, List[bytes]] = collections.defaultdict(list)
    markers: collections.Counter = collections.Counter()
    for batch in res.batches:
        if batch.is_control:
            for record in batch:
                marker = parse_control_record(record.key, record.value)
                if marker.is_commit:
                    markers["commit"] += 1
                    committed.extend(pending.pop(batch.producer_id, []))
                elif marker.is_abort:
                    markers["abort"] += 1
                    aborted.extend(pending.pop(batch.producer_id, []))
        elif batch.is_transactional:
            pending[batch.producer_id].extend(r.value for r in batch)
        else:
            committed.extend(r.value for r in batch)
    still_open = [v for values in pending.values() for v in values]
    return LogView(committed, aborted, still_open, markers)


def consume_values(consumer_conf: dict, topic: str, partitions: int, expect: int,
                   idle: float = 3.0, limit: float = 60.0, confluent: bool = False
                   ) -> Dict[int, List[bytes]]:
    """Every value of ``topic`` a consumer with ``consumer_conf`` returns, by partition
    (reads until ``expect`` came and nothing more for ``idle`` seconds)."""
    if confluent:
        from confluent_kafka import Consumer as CConsumer
        from confluent_kafka import TopicPartition as CTP
        c = CConsumer(dict(consumer_conf, **{"enable.auto.commit": False,
                                             "auto.offset.reset": "earliest",
                                             "fetch.wait.max.ms": 50}))
        c.assign([CTP(topic, p, 0) for p in range(partitions)])
    else:
        c = Consumer(dict(consumer_conf, **{"enable.auto.commit": False,
                                            "auto.offset.reset": "earliest"}))
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: Dict[int, List[bytes]] = collections.defaultdict(list)
    n = 0
    last = time.monotonic()
    deadline = last + limit
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(10000, 0.5)
            for m in msgs:
                if m.error() is None:
                    out[m.partition()].append(m.value())
                    n += 1
            if msgs:
                last = time.monotonic()
            elif n >= expect and time.monotonic() - last > idle:
                break
    finally:
        c.close()
    return out


def produce_input(bootstrap: str, topic: str, n: int, partitions: int) -> List[int]:
    """``n`` messages b"%06d" % i to partition i % partitions (confluent-kafka, plain);
    returns each partition's end offset."""
    from confluent_kafka import Producer as CProducer

    p = CProducer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(n):
        while True:
            try:
                p.produce(topic, b"%06d" % i, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0
    return [len(range(q, n, partitions)) for q in range(partitions)]


def run_loop(broker, args: List[str], pause: bool, timeout: float) -> str:
    """The loop in a child process: with ``pause``, until it is paused mid-transaction
    (then SIGKILL); else to its end. A hard timeout either way."""
    cmd = [sys.executable, LOOP, broker.bootstrap] + args
    if not pause:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, done.stderr[-4000:]
        (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("DONE ")]
        return line
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline and child.poll() is None:
            line = child.stdout.readline()
            if line.startswith("PAUSED"):
                break
        assert line.startswith("PAUSED"), (line, child.poll(), child.stderr.read()[-4000:]
                                           if child.poll() is not None else "")
        os.kill(child.pid, signal.SIGKILL)   # in the middle of a transaction
        child.wait(10)
        return line
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)


# -- commit and abort --------------------------------------------------------------------

def test_commit_and_abort_as_the_log_and_consumers_see_them(broker, topic_name):
    broker.create_topic(topic_name, partitions=2)
    p = Producer({"bootstrap.servers": broker.bootstrap,
                  "transactional.id": f"tx-{topic_name}"})
    try:
        p.init_transactions(30)
        for txn, end in (("a", "commit"), ("b", "abort"), ("c", "commit"), ("d", "abort")):
            p.begin_transaction()
            for i in range(10):
                p.produce(topic_name, b"%s%d" % (txn.encode(), i), partition=i % 2)
            if txn == "d":
                assert p.flush(30) == 0          # in the log before the abort
            getattr(p, f"{end}_transaction")(30)
        p.begin_transaction()                    # left open: neither committed nor aborted
        p.produce(topic_name, b"open", partition=0)
        assert p.flush(30) == 0
        views = [log_view(broker, topic_name, q) for q in range(2)]
        committed = sorted(v for view in views for v in view.committed)
        assert committed == sorted(b"%s%d" % (t, i) for t in (b"a", b"c") for i in range(10))
        # d was flushed before its abort; b's messages are in the log only if they left
        # before the abort purged what was queued.
        aborted = {v for view in views for v in view.aborted}
        assert {b"d%d" % i for i in range(10)} <= aborted
        assert aborted <= {b"%s%d" % (t, i) for t in (b"b", b"d") for i in range(10)}
        assert [v for view in views for v in view.open] == [b"open"]
        assert sum(view.markers["commit"] for view in views) == 4   # 2 txns x 2 partitions
        p.abort_transaction(30)
    finally:
        p.close(10)
    assert log_view(broker, topic_name, 0).aborted[-1] == b"open"
    if broker.kind == "noida":
        expect = sorted(b"%s%d" % (t, i) for t in (b"a", b"c") for i in range(10))
        for confluent in (False, True):
            got = consume_values({"bootstrap.servers": broker.bootstrap,
                                  "group.id": f"g-{uuid.uuid4().hex[:6]}",
                                  "isolation.level": "read_committed"},
                                 topic_name, 2, len(expect), idle=1.5, confluent=confluent)
            assert sorted(v for vs in got.values() for v in vs) == expect, confluent


def test_close_with_a_transaction_open_aborts_it(broker, topic_name):
    """close() in the middle of a transaction: the messages still queued are purged, not
    sent, and the transaction is aborted at once (an abort marker in the log), as
    librdkafka's and the Java client's close() do; it was left open for
    transaction.timeout.ms, holding read_committed readers back."""
    broker.create_topic(topic_name, partitions=1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000,
                  "transactional.id": f"tx-{topic_name}"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic_name, b"sent", partition=0)
    assert p.flush(30) == 0
    for i in range(10):
        p.produce(topic_name, b"queued-%d" % i, partition=0)   # waiting for linger.ms
    p.close(10)
    view = log_view(broker, topic_name, 0)
    assert view.aborted == [b"sent"] and view.open == [] and view.markers["abort"] == 1
    assert not any(v.startswith(b"queued") for v in view.committed + view.aborted)


# -- the exactly-once loop -------------------------------------------------------------------

N_INPUT = 100_000
PARTITIONS = 3


def test_consume_transform_produce_exactly_once(broker, topic_name):
    """100,000 inputs through a transactional loop that aborts every 7th transaction and
    is killed in the middle of its 20th, then restarted with the same transactional.id:
    the committed output holds each input's output exactly once, in the input's order;
    aborted outputs (the aborts and the killed transaction) are in the log, marked; the
    group's committed input offsets are the input's end."""
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    broker.create_topic(source, partitions=PARTITIONS)
    broker.create_topic(sink, partitions=PARTITIONS)
    ends = produce_input(broker.bootstrap, source, N_INPUT, PARTITIONS)
    group, txn_id = f"g-{topic_name}", f"tx-{topic_name}"
    args = [source, sink, group, txn_id, "--ends", ",".join(map(str, ends)),
            "--batch", "500", "--abort-every", "7"]
    run_loop(broker, args + ["--pause-at", "20"], pause=True, timeout=180)
    done = run_loop(broker, args, pause=False, timeout=400)
    stats = json.loads(done[len("DONE "):])
    # The restart went on from what the first run committed (not from the start).
    assert sum(stats["start"].values()) > 0, stats
    assert stats["aborted"] >= 1 and stats["committed"] >= 1

    views = [log_view(broker, sink, q) for q in range(PARTITIONS)]
    for q, view in enumerate(views):
        expect = [b"out:%06d" % i for i in range(q, N_INPUT, PARTITIONS)]
        assert view.committed == expect, f"partition {q}: committed output"
        assert not view.open, f"partition {q}: transactions left open"
    aborted = [v for view in views for v in view.aborted]
    # Aborted: at least the 7th and 14th transactions of the first run and the killed
    # 20th's flushed half.
    assert len(aborted) >= 2 * 500 + 250, len(aborted)
    assert set(aborted) <= {b"out:%06d" % i for i in range(N_INPUT)}

    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committed = check.committed([TopicPartition(source, q) for q in range(PARTITIONS)], 30)
    finally:
        check.close()
    assert [tp.offset for tp in committed] == ends

    every = N_INPUT + len(aborted)
    uncommitted = consume_values({"bootstrap.servers": broker.bootstrap, "group.id": "x",
                                  "isolation.level": "read_uncommitted"},
                                 sink, PARTITIONS, every)
    assert sum(map(len, uncommitted.values())) == every
    assert collections.Counter(v for vs in uncommitted.values() for v in vs) == \
        collections.Counter([b"out:%06d" % i for i in range(N_INPUT)] + aborted)
    if broker.kind == "noida":   # the broker that filters aborted transactions in Fetch
        for confluent in (False, True):
            got = consume_values({"bootstrap.servers": broker.bootstrap, "group.id": "x",
                                  "isolation.level": "read_committed"},
                                 sink, PARTITIONS, N_INPUT, confluent=confluent)
            for q in range(PARTITIONS):
                assert got[q] == views[q].committed, (confluent, q)


# -- fencing -------------------------------------------------------------------------------

def test_a_second_producer_fences_the_first(broker, topic_name):
    broker.create_topic(topic_name, partitions=1)
    conf = {"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic_name}"}
    first, second = Producer(conf), Producer(conf)
    reports = []
    try:
        first.init_transactions(30)
        first.begin_transaction()
        first.produce(topic_name, b"first-1", partition=0)
        assert first.flush(30) == 0
        second.init_transactions(30)        # fences the first, aborts its transaction
        first.produce(topic_name, b"first-2", partition=0,
                      on_delivery=lambda err, msg: reports.append(err))
        with pytest.raises(KafkaException) as exc:
            first.commit_transaction(30)
        err = exc.value.args[0]
        assert err.fatal() and err.code() == KafkaError._FENCED, err
        assert not err.txn_requires_abort() and not err.retriable()
        first.poll(1)
        assert [e.code() for e in reports] == [KafkaError._FENCED]
        for call in (first.begin_transaction, lambda: first.abort_transaction(5)):
            with pytest.raises(KafkaException) as exc:
                call()
            assert exc.value.args[0].fatal() and exc.value.args[0].code() == KafkaError._FENCED
        with pytest.raises(KafkaException) as exc:       # _FATAL, as confluent-kafka's
            first.produce(topic_name, b"first-3", partition=0)
        assert exc.value.args[0].code() == KafkaError._FATAL
        second.begin_transaction()
        second.produce(topic_name, b"second", partition=0)
        second.commit_transaction(30)
    finally:
        first.close(5)
        second.close(10)
    view = log_view(broker, topic_name, 0)
    assert view.committed == [b"second"]
    assert view.aborted == [b"first-1"] and not view.open


# -- the coordinator's retriable errors, injected -------------------------------------------

def test_retriable_coordinator_errors_are_retried(broker, topic_name):
    """Through the fault proxy, each coordinator request's first answer is replaced by a
    retriable error (the broker did act on AddPartitionsToTxn and InitProducerId, which
    are idempotent): the transactions still commit, each message once."""
    broker.create_topic(topic_name, partitions=2)
    with FaultProxy("127.0.0.1", broker.port, rewrite_addresses=True) as proxy:
        p = Producer({"bootstrap.servers": proxy.bootstrap,
                      "transactional.id": f"tx-{topic_name}", "retry.backoff.ms": 20})
        try:
            proxy.fail_requests(ApiKey.FIND_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            proxy.fail_requests(ApiKey.INIT_PRODUCER_ID, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            p.init_transactions(30)
            for txn in range(3):
                proxy.fail_requests(ApiKey.ADD_PARTITIONS_TO_TXN,
                                    ErrorCode.CONCURRENT_TRANSACTIONS)
                p.begin_transaction()
                for i in range(20):
                    p.produce(topic_name, b"%d-%02d" % (txn, i), partition=i % 2)
                p.commit_transaction(30)
            assert proxy.injected == 2 + 3 and not proxy.faults_pending
        finally:
            p.close(10)
    committed = sorted(v for q in range(2) for v in log_view(broker, topic_name, q).committed)
    assert committed == sorted(b"%d-%02d" % (t, i) for t in range(3) for i in range(20))


@pytest.mark.parametrize("api", ["consume", "consume_arrow"])
def test_the_position_passes_the_transaction_markers_at_the_end(broker, topic_name, api):
    """A read_committed consumer that read every message of a committed transaction is
    at the high watermark, past the COMMIT marker that follows them (librdkafka and the
    Java client are too): it commits that, so the group's lag is 0, not 1 forever. An
    aborted transaction at the end is passed the same way (noida-db, which tells its
    consumers what was aborted)."""
    p = Producer({"bootstrap.servers": broker.bootstrap,
                  "transactional.id": f"marker-{topic_name}"})
    try:
        p.init_transactions(10)
        p.begin_transaction()
        for i in range(6):
            p.produce(topic_name, b"%d" % i, partition=0)
        p.commit_transaction(10)          # offsets 0-5, the marker at 6
        if broker.kind == "noida":
            p.begin_transaction()
            p.produce(topic_name, b"aborted", partition=0)
            assert p.flush(10) == 0       # written (abort would drop it unsent)
            p.abort_transaction(10)       # offset 7, its marker at 8
    finally:
        p.close()
    end = 9 if broker.kind == "noida" else 7
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic_name}",
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    tp = TopicPartition(topic_name, 0)
    try:
        c.assign([tp])
        got, eof, deadline = [], None, time.monotonic() + 20
        while eof is None:
            assert time.monotonic() < deadline, got
            if api == "consume":
                for m in c.consume(100, 0.2):
                    if m.error() is None:
                        got.append(m.value())
                    elif m.error().code() == KafkaError._PARTITION_EOF:
                        eof = m.offset()
            else:
                batch = c.consume_arrow(100, 0.2)
                if batch is not None:
                    got.extend(batch.column("value").to_pylist())
                if got and c.get_watermark_offsets(tp, 5)[1] == end:
                    eof = end
        assert got == [b"%d" % i for i in range(6)]
        assert eof == end
        (pos,) = c.position([tp])
        assert pos.offset == end
        c.commit(asynchronous=False)
        (committed,) = c.committed([tp], 10)
        assert committed.offset == end
    finally:
        c.close()
