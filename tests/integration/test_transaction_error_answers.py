"""The transaction coordinator's error answers on the test cluster, each injected once
(EndTxn for a commit and an abort, AddOffsetsToTxn, TxnOffsetCommit, and a Produce
answered while an abort is under way): the error the application gets (fatal,
abortable, or none when the producer recovers by itself), what the producer can do
next, and what a read_committed consumer or the group's committed offsets then show.
The injected answers are refused requests: the coordinator did nothing of them.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import List

import pytest

from kafka_client import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from kafka_client.testing import Cluster

    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("cluster"))) as c:
        yield c


def _producer(cluster, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": tid,
                  "linger.ms": 5, "retry.backoff.ms": 20, "retry.backoff.max.ms": 200})
    p.init_transactions(30)
    return p


def _committed_values(cluster, topic: str, expect: int, timeout: float = 20.0) -> List[int]:
    """The values a read_committed consumer reads, once ``expect`` arrived and 1 s more
    passed without any (so a message that should not be there has time to show)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": f"check-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "fetch.wait.max.ms": 50})
    out: List[int] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        quiet_since = None
        while time.monotonic() < deadline:
            msgs = consumer.consume(1000, 0.2)
            for m in msgs:
                assert m.error() is None, m.error()
                out.append(int(m.value()))
            if msgs or len(out) < expect:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > 1.0:
                break
    finally:
        consumer.close()
    return out


def _produce(p: Producer, topic: str, numbers: range) -> List[KafkaError]:
    """Produce ``numbers`` in the open transaction, flushed; the delivery errors."""
    errors: List[KafkaError] = []
    for n in numbers:
        p.produce(topic, b"%d" % n, partition=0,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(30) == 0
    return errors


def test_commit_answered_fenced_is_fatal(cluster):
    """PRODUCER_FENCED for the commit: commit_transaction() raises the fatal _FENCED
    error, once, without sending EndTxn again; produce() and the transactional calls
    then refuse with the fatal error."""
    topic = "end-txn-fenced"
    cluster.create_topic(topic, partitions=1)
    p = _producer(cluster, "end-txn-fenced")
    try:
        p.begin_transaction()
        assert _produce(p, topic, range(10)) == []
        since = cluster.clear_request_log()
        cluster.inject_errors("EndTxn", ["PRODUCER_FENCED"])
        with pytest.raises(KafkaException) as raised:
            p.commit_transaction(30)
        err = raised.value.args[0]
        assert err.fatal() and err.code() == KafkaError._FENCED, err
        assert not err.retriable() and not err.txn_requires_abort()
        assert len(cluster.request_log(since, api="EndTxn")) == 1
        with pytest.raises(KafkaException) as again:
            p.begin_transaction()
        assert again.value.args[0].fatal()
        with pytest.raises(KafkaException) as produced:   # _FATAL, as confluent-kafka's
            p.produce(topic, b"late", partition=0)
        assert produced.value.args[0].code() == KafkaError._FATAL
        # As confluent-kafka: the next poll()/flush() raises the fatal error once more
        # (docs/reliability.md, the row of a producer fenced at commit)
        with pytest.raises(KafkaException) as served:
            p.poll(0)
        assert served.value.args[0].code() == KafkaError._FENCED
        assert p.poll(0) == 0
    finally:
        p.close(5)
    assert _committed_values(cluster, topic, 0) == []


def test_commit_answered_abortable_error_then_abort_and_next_transaction(cluster):
    """TRANSACTION_ABORTABLE for the commit: commit_transaction() raises an error that
    requires an abort (not fatal, not retriable); abort_transaction() then ends it and
    the next transaction commits. A read_committed consumer reads only the second
    transaction's messages."""
    topic = "end-txn-abortable"
    cluster.create_topic(topic, partitions=1)
    p = _producer(cluster, "end-txn-abortable")
    try:
        p.begin_transaction()
        assert _produce(p, topic, range(10)) == []
        cluster.inject_errors("EndTxn", ["TRANSACTION_ABORTABLE"])
        with pytest.raises(KafkaException) as raised:
            p.commit_transaction(30)
        err = raised.value.args[0]
        assert err.txn_requires_abort() and not err.fatal() and not err.retriable(), err
        assert err.code() == KafkaError.TRANSACTION_ABORTABLE, err
        p.abort_transaction(30)
        p.begin_transaction()
        assert _produce(p, topic, range(100, 105)) == []
        p.commit_transaction(30)
    finally:
        p.close(5)
    assert _committed_values(cluster, topic, 5) == list(range(100, 105))


def test_abort_answered_unknown_producer_id_bumps_the_epoch(cluster):
    """UNKNOWN_PRODUCER_ID for the abort (the coordinator lost the producer id): the
    producer bumps its epoch (InitProducerId with its id and epoch, KIP-360), which
    aborts the transaction; abort_transaction() succeeds and the next transaction, under
    the new epoch, commits. Nothing of the aborted one is read."""
    topic = "end-txn-bump"
    cluster.create_topic(topic, partitions=1)
    p = _producer(cluster, "end-txn-bump")
    try:
        p.begin_transaction()
        assert _produce(p, topic, range(10)) == []
        since = cluster.clear_request_log()
        cluster.inject_errors("EndTxn", ["UNKNOWN_PRODUCER_ID"])
        p.abort_transaction(30)
        inits = cluster.request_log(since, api="InitProducerId")
        assert len(inits) == 1 and inits[0].errors in ([], ["NONE"]), inits
        p.begin_transaction()
        assert _produce(p, topic, range(200, 207)) == []
        p.commit_transaction(30)
        epochs = {part["producer_epoch"] for e in cluster.request_log(since, api="Produce")
                  for part in e.details["partitions"]}
        before = {part["producer_epoch"] for e in cluster.request_log(0, api="Produce")
                  for part in e.details["partitions"]} - epochs
        assert len(epochs) == 1 and all(b < min(epochs) for b in before), (before, epochs)
    finally:
        p.close(5)
    assert _committed_values(cluster, topic, 7) == list(range(200, 207))


def test_abort_answered_error_can_be_called_again(cluster):
    """A non-retriable, non-fatal error for the abort (UNKNOWN_SERVER_ERROR): the
    abort_transaction() call raises it, and calling it again ends the transaction; the
    next transaction commits and only it is read."""
    topic = "end-txn-abort-again"
    cluster.create_topic(topic, partitions=1)
    p = _producer(cluster, "end-txn-abort-again")
    try:
        p.begin_transaction()
        assert _produce(p, topic, range(10)) == []
        cluster.inject_errors("EndTxn", ["UNKNOWN_SERVER_ERROR"])
        with pytest.raises(KafkaException) as raised:
            p.abort_transaction(30)
        err = raised.value.args[0]
        assert err.code() == KafkaError.UNKNOWN and not err.fatal(), err
        p.abort_transaction(30)
        p.begin_transaction()
        assert _produce(p, topic, range(300, 303)) == []
        p.commit_transaction(30)
    finally:
        p.close(5)
    assert _committed_values(cluster, topic, 3) == list(range(300, 303))


def test_abort_while_a_produce_retry_is_due_purges_it(cluster):
    """A Produce answered with a retriable error (NOT_LEADER_OR_FOLLOWER) after
    abort_transaction() began: the batch is not queued again for a transaction being
    aborted (the abort waits for nothing to be in flight, and nothing of it will be
    sent); its messages fail with _PURGE_QUEUE, the abort returns well before its
    timeout, and the next transaction commits."""
    topic = "end-txn-retry-during-abort"
    cluster.create_topic(topic, partitions=1)
    p = _producer(cluster, "end-txn-retry-during-abort")
    reports: List[KafkaError] = []
    try:
        p.begin_transaction()
        cluster.set_latency(1.0, apis=["Produce"])
        cluster.inject_errors("Produce", ["NOT_LEADER_OR_FOLLOWER"])
        since = cluster.clear_request_log()
        for n in range(5):
            p.produce(topic, b"%d" % n, partition=0,
                      on_delivery=lambda err, msg: reports.append(err))
        p.poll(0.3)       # the Produce is in flight, its answer 0.7 s away
        start = time.monotonic()
        p.abort_transaction(20)
        took = time.monotonic() - start
        cluster.set_latency(0, apis=["Produce"])
        assert took < 5, took
        p.poll(0)
        assert [e.code() if e else None for e in reports] == [KafkaError._PURGE_QUEUE] * 5
        produced = cluster.request_log(since, api="Produce")
        assert [e.injected_error for e in produced] == ["NOT_LEADER_OR_FOLLOWER"], produced
        p.begin_transaction()
        assert _produce(p, topic, range(400, 404)) == []
        p.commit_transaction(30)
    finally:
        cluster.set_latency(0)
        p.close(5)
    assert _committed_values(cluster, topic, 4) == list(range(400, 404))


def test_abort_while_add_partitions_is_answered_concurrent_transactions_sends_no_end_txn(
        cluster):
    """abort_transaction() begins while the transaction's AddPartitionsToTxn is out, and
    it is answered CONCURRENT_TRANSACTIONS (the coordinator still writing the last
    transaction's markers, usual right after a commit): nothing was added, the
    coordinator knows of no transaction, and the abort ends without an EndTxn (one sent
    was answered INVALID_TXN_STATE, fatal: found once the test cluster answered so until
    the markers are replicated, as Kafka does). The next transaction commits."""
    topic = "abort-while-registering"
    cluster.create_topic(topic, partitions=1)
    p = _producer(cluster, "abort-while-registering")
    try:
        p.begin_transaction()
        cluster.set_latency(5.0, apis=["AddPartitionsToTxn"])
        cluster.inject_errors("AddPartitionsToTxn", ["CONCURRENT_TRANSACTIONS"])
        since = cluster.clear_request_log()
        p.produce(topic, b"1", partition=0)
        deadline = time.monotonic() + 10     # the AddPartitionsToTxn is out, its answer held
        while not cluster.request_log(since, api="AddPartitionsToTxn"):
            assert time.monotonic() < deadline, "no AddPartitionsToTxn went out"
            p.poll(0.05)
        p.abort_transaction(30)
        cluster.set_latency(0, apis=["AddPartitionsToTxn"])
        log = cluster.request_log(since)
        assert [e.injected_error for e in log if e.api == "AddPartitionsToTxn"] == \
            ["CONCURRENT_TRANSACTIONS"], log
        assert [e for e in log if e.api == "EndTxn"] == [], log
        p.begin_transaction()
        assert _produce(p, topic, range(500, 503)) == []
        p.commit_transaction(30)
    finally:
        cluster.set_latency(0)
        p.close(5)
    assert _committed_values(cluster, topic, 3) == list(range(500, 503))


def test_abort_after_offsets_added_while_add_partitions_was_refused_sends_end_txn(cluster):
    """AddPartitionsToTxn refused (COORDINATOR_NOT_AVAILABLE, twice) while
    send_offsets_to_transaction()'s AddOffsetsToTxn, out at the same time, is accepted: the
    coordinator holds the transaction open with the group's offsets, so the abort must end
    it with an EndTxn. Without one (the refusal made the producer forget the offsets: seen
    once in a soak run), the group's committed offsets stayed unstable until the
    coordinator timed the transaction out and fenced the producer."""
    topic = "abort-offsets-while-registering-refused"
    cluster.create_topic(topic, partitions=1)
    group = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                      "group.id": topic, "enable.auto.commit": False})
    p = _producer(cluster, topic)
    try:
        p.begin_transaction()
        cluster.set_latency(1.0, apis=["AddPartitionsToTxn"])
        cluster.inject_errors("AddPartitionsToTxn", ["COORDINATOR_NOT_AVAILABLE"] * 2)
        since = cluster.clear_request_log()
        p.produce(topic, b"1", partition=0)
        deadline = time.monotonic() + 10     # the AddPartitionsToTxn is out, its answer held
        while not cluster.request_log(since, api="AddPartitionsToTxn"):
            assert time.monotonic() < deadline, "no AddPartitionsToTxn went out"
            p.poll(0.05)
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 1)],
                                      group.consumer_group_metadata(), 30)
        # the first refusal is answered, the second attempt is out when the abort begins
        deadline = time.monotonic() + 10
        while len(cluster.request_log(since, api="AddPartitionsToTxn")) < 2:
            assert time.monotonic() < deadline, "AddPartitionsToTxn was not tried again"
            p.poll(0.05)
        p.abort_transaction(30)
        cluster.set_latency(0, apis=["AddPartitionsToTxn"])
        log = cluster.request_log(since)
        assert [e.api for e in log if e.api in ("AddOffsetsToTxn", "EndTxn")] == \
            ["AddOffsetsToTxn", "EndTxn"], log
        # ended: the group's offsets are stable (no UNSTABLE_OFFSET_COMMIT until the
        # transaction times out)
        _next_transaction_commits_its_offsets(p, group, topic, range(600, 602))
    finally:
        cluster.set_latency(0)
        p.close(5)
        group.close()
    assert _committed_values(cluster, topic, 2) == [600, 601]


def _committed_offset(consumer: Consumer, topic: str) -> int:
    return consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset


def _next_transaction_commits_its_offsets(p: Producer, group: Consumer, topic: str,
                                          numbers: range) -> None:
    """After an abort: the group has no committed offset; a transaction producing
    ``numbers`` and sending an offset (their count) commits both."""
    assert _committed_offset(group, topic) == OFFSET_INVALID
    p.begin_transaction()
    assert _produce(p, topic, numbers) == []
    p.send_offsets_to_transaction([TopicPartition(topic, 0, len(numbers))],
                                  group.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    assert _committed_offset(group, topic) == len(numbers)


def test_txn_offset_commit_refused_requires_abort(cluster):
    """TxnOffsetCommit answered GROUP_AUTHORIZATION_FAILED: send_offsets_to_transaction()
    raises an error that requires an abort; after the abort the group has no committed
    offset, and the next transaction commits its offsets with its messages."""
    topic = "txn-offsets-refused"
    cluster.create_topic(topic, partitions=1)
    group = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                      "group.id": "txn-offsets-refused", "enable.auto.commit": False})
    p = _producer(cluster, "txn-offsets-refused")
    try:
        p.begin_transaction()
        assert _produce(p, topic, range(3)) == []
        cluster.inject_errors("TxnOffsetCommit", ["GROUP_AUTHORIZATION_FAILED"])
        with pytest.raises(KafkaException) as raised:
            p.send_offsets_to_transaction([TopicPartition(topic, 0, 3)],
                                          group.consumer_group_metadata(), 30)
        err = raised.value.args[0]
        assert err.txn_requires_abort() and not err.fatal(), err
        assert err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, err
        p.abort_transaction(30)
        _next_transaction_commits_its_offsets(p, group, topic, range(500, 502))
    finally:
        p.close(5)
        group.close()
    assert _committed_values(cluster, topic, 2) == [500, 501]


def test_add_offsets_answered_fenced_is_fatal(cluster):
    """AddOffsetsToTxn answered PRODUCER_FENCED: send_offsets_to_transaction() raises the
    fatal _FENCED error; no TxnOffsetCommit is sent and nothing is committed."""
    topic = "txn-offsets-fenced"
    cluster.create_topic(topic, partitions=1)
    group = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                      "group.id": "txn-offsets-fenced", "enable.auto.commit": False})
    p = _producer(cluster, "txn-offsets-fenced")
    try:
        p.begin_transaction()
        assert _produce(p, topic, range(3)) == []
        since = cluster.clear_request_log()
        cluster.inject_errors("AddOffsetsToTxn", ["PRODUCER_FENCED"])
        with pytest.raises(KafkaException) as raised:
            p.send_offsets_to_transaction([TopicPartition(topic, 0, 3)],
                                          group.consumer_group_metadata(), 30)
        err = raised.value.args[0]
        assert err.fatal() and err.code() == KafkaError._FENCED, err
        assert cluster.request_log(since, api="TxnOffsetCommit") == []
        with pytest.raises(KafkaException):
            p.poll(0)          # the fatal event, served once (see the EndTxn case)
        assert _committed_offset(group, topic) == OFFSET_INVALID
    finally:
        p.close(5)
        group.close()


def test_close_aborts_an_open_transaction_within_its_timeout_when_end_txn_hangs(cluster):
    """close(2) with a transaction open and EndTxn answers held back 30 s: the abort
    close() makes fails at its deadline (logged), and close() returns about then,
    not when the coordinator answers; close() without a timeout is bounded the same way
    by transaction.timeout.ms."""
    topic = "txn-close-hung"
    cluster.create_topic(topic, partitions=1)
    try:
        # (close timeout, transaction.timeout.ms, the most close() may take)
        for tid, close_timeout, txn_timeout_ms, bound in (
                ("close-hung-2s", 2.0, 20_000, 5.0), ("close-hung-none", None, 3000, 6.0)):
            p = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                          "transactional.id": tid, "transaction.timeout.ms": txn_timeout_ms})
            p.init_transactions(30)
            p.begin_transaction()
            assert _produce(p, topic, range(3)) == []
            cluster.set_latency(30.0, apis=["EndTxn"])
            start = time.monotonic()
            assert p.close(close_timeout) is True
            took = time.monotonic() - start
            cluster.set_latency(0, apis=["EndTxn"])
            assert took < bound, (tid, took)
    finally:
        cluster.set_latency(0)


def test_produce_while_close_aborts_the_open_transaction_raises_closed(cluster):
    """Another thread produces while close() aborts the open transaction (EndTxn held
    back 1 s): its produce() and produce_batch() raise RuntimeError("Producer has been
    closed"), as confluent-kafka's closing producer (test_concurrency.py's
    test_close_races_open_transaction); they raised the abort's _STATE, telling it to
    call abort_transaction(). No message of the transaction is committed."""
    topic = "txn-close-racing-produce"
    cluster.create_topic(topic, partitions=1)
    p = _producer(cluster, "close-racing-produce")
    p.begin_transaction()
    assert _produce(p, topic, range(3)) == []
    raised: List[BaseException] = []
    closing = threading.Event()

    def produce_until_refused() -> None:
        calls = [lambda: p.produce(topic, b"-1", partition=0),
                 lambda: p.produce_batch(topic, [{"value": b"-1", "partition": 0}])]
        n = 0
        while True:
            try:
                calls[n % 2]()
            except BaseException as exc:  # what it raises is the subject
                raised.append(exc)
                if isinstance(exc, RuntimeError) or len(raised) > 10:
                    return
            if closing.is_set():
                n += 1     # both calls, once close() is under way
            time.sleep(0.005)

    cluster.set_latency(1.0, apis=["EndTxn"])
    try:
        worker = threading.Thread(target=produce_until_refused, daemon=True)
        worker.start()
        time.sleep(0.1)
        closing.set()
        assert p.close(10) is True
        worker.join(10)
    finally:
        cluster.set_latency(0)
    assert not worker.is_alive()
    assert [type(e) for e in raised] == [RuntimeError], raised
    assert str(raised[0]) == "Producer has been closed"
    assert _committed_values(cluster, topic, 0, timeout=3.0) == []


def test_init_transactions_without_a_timeout_ends_when_the_coordinator_does_not_answer(
        cluster):
    """init_transactions() with no timeout and InitProducerId answers held back: it
    raises a retriable _TIMED_OUT after twice transaction.timeout.ms (librdkafka's cap),
    rather than waiting for ever, and called again once answers come it completes."""
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                  "transactional.id": "init-hung", "transaction.timeout.ms": 1000})
    try:
        cluster.set_latency(30.0, apis=["InitProducerId"])
        start = time.monotonic()
        with pytest.raises(KafkaException) as raised:
            p.init_transactions()
        took = time.monotonic() - start
        cluster.set_latency(0, apis=["InitProducerId"])
        err = raised.value.args[0]
        assert err.code() == KafkaError._TIMED_OUT and err.retriable(), err
        assert 1.5 < took < 5, took
        p.init_transactions(60)
        p.begin_transaction()
        p.commit_transaction(30)
    finally:
        cluster.set_latency(0)
        p.close(5)


@dataclass
class _RaisingTransaction:
    """An open transaction of a fresh topic with three messages queued (linger), whose
    delivery callback records the error code and raises."""

    producer: Producer
    topic: str
    #: the error codes the callback was given, in order
    reports: List[int]
    #: the request log's sequence number before the messages were produced
    since: int


def _raising_transaction(cluster, transactional_id: str) -> _RaisingTransaction:
    topic = f"txn-{transactional_id}"
    cluster.create_topic(topic, partitions=1)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                  "transactional.id": transactional_id, "linger.ms": 30_000})
    p.init_transactions(30)
    p.begin_transaction()
    reports: List[int] = []

    def raising(err, msg):
        reports.append(err.code())
        raise ValueError(f"callback for {msg.value()!r}")

    since = cluster.clear_request_log()
    for i in range(3):
        p.produce(topic, b"%d" % i, partition=0, on_delivery=raising)
    return _RaisingTransaction(p, topic, reports, since)


def test_close_ends_a_registered_transaction_whose_purged_reports_raise(cluster):
    """As the next test (close with an open transaction whose reports raise), with the
    partition registered before close() (AddPartitionsToTxn answered): the callbacks
    raising in the abort's flush must not stop the abort before its EndTxn, which left
    the transaction open at the coordinator (read_committed readers held back) until
    transaction.timeout.ms."""
    txn = _raising_transaction(cluster, "close-raising-registered")
    p, since = txn.producer, txn.since
    deadline = time.monotonic() + 20
    while not [e for e in cluster.request_log(since, api="AddPartitionsToTxn")
               if e.details.get("answered")]:
        assert time.monotonic() < deadline, "the partition was never registered"
        time.sleep(0.01)
    time.sleep(0.2)     # the answer reaches the producer
    with pytest.raises(ValueError, match="callback for b'0'"):
        p.close(10)
    assert txn.reports == [KafkaError._PURGE_QUEUE] * 3
    assert cluster.request_log(since, api="Produce") == []
    assert len(cluster.request_log(since, api="EndTxn")) == 1


def test_close_with_an_open_transaction_whose_purged_reports_raise(cluster):
    """close() with a transaction open and its messages still queued (linger), whose
    delivery callback raises: the abort close() makes purges them (_PURGE_QUEUE), every
    callback runs although each raises, nothing of the transaction is sent, the
    producer is closed, and close() then raises the first exception."""
    txn = _raising_transaction(cluster, "close-raising")
    p, since, topic = txn.producer, txn.since, txn.topic
    with pytest.raises(ValueError, match="callback for b'0'"):
        p.close(10)
    assert txn.reports == [KafkaError._PURGE_QUEUE] * 3
    assert len(p) == 0
    with pytest.raises(RuntimeError):
        p.produce(topic, b"late")
    # Nothing of it was sent; the coordinator is told of the abort only if the
    # partition was registered (else it never knew of the transaction)
    assert cluster.request_log(since, api="Produce") == []
    adds = cluster.request_log(since, api="AddPartitionsToTxn")
    assert len(cluster.request_log(since, api="EndTxn")) == len(adds) <= 1
    assert _committed_values(cluster, topic, 0) == []
