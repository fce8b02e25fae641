"""Transactions on the multi-broker test cluster (kafka_client.testing), under what a
single-node broker cannot do: the transaction coordinator moving to another broker (the
old one answers NOT_COORDINATOR), leaders moving, and the coordinator's answers refused
with retriable errors. Checked on the broker side: the cluster filters aborted
transactions for read_committed fetches, and its request log shows where each
transactional request went."""
from __future__ import annotations

import time
from typing import Dict, List

import pytest

from kafka_client import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka_proto.errors import ErrorCode

pytestmark = [pytest.mark.integration]

PARTITIONS = 3
PER_TXN = 500


def read_committed(cluster, topic: str, expect: int, timeout: float = 30.0
                   ) -> Dict[int, List[int]]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "check",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "fetch.wait.max.ms": 50})
    out: Dict[int, List[int]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + timeout
        idle_since = None
        while time.monotonic() < deadline:
            msgs = consumer.consume(10_000, 0.2)
            for m in msgs:
                assert m.error() is None, m.error()
                out[m.partition()].append(int(m.value()))
            n = sum(map(len, out.values()))
            if msgs or n < expect:
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > 1.0:
                break
    finally:
        consumer.close()
    return out


@pytest.mark.timeout(120)
def test_transactions_follow_coordinator_and_leader_moves(kafka_cluster):
    c = kafka_cluster
    c.create_topic("txn-moves", partitions=PARTITIONS, replication_factor=3)
    tid = "mover"
    since = c.clear_request_log()
    p = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": tid,
                  "linger.ms": 5, "retry.backoff.ms": 20, "retry.backoff.max.ms": 200})
    committed: List[int] = []
    coordinators = [c.coordinator(transactional_id=tid)]
    try:
        p.init_transactions(30)
        for txn in range(20):
            if txn in (4, 9, 14):      # the coordinator moves between transactions
                to = next(b.id for b in c.brokers if b.id != coordinators[-1])
                c.move_coordinator(to, transactional_id=tid)
                coordinators.append(to)
            if txn in (2, 11):
                c.move_leader("txn-moves", txn % PARTITIONS)
            if txn == 17:              # refused (not executed), retried
                c.inject_errors("EndTxn", ["CONCURRENT_TRANSACTIONS"])
                c.inject_errors("AddPartitionsToTxn", ["COORDINATOR_LOAD_IN_PROGRESS"])
            p.begin_transaction()
            numbers = range(txn * PER_TXN, (txn + 1) * PER_TXN)
            for n in numbers:
                p.produce("txn-moves", b"%08d" % n, partition=n % PARTITIONS)
                if txn == 6 and n == numbers[PER_TXN // 2]:
                    # ... and in the middle of one: its partitions are registered at the
                    # old coordinator, its EndTxn goes to the new one
                    assert p.flush(30) == 0
                    to = next(b.id for b in c.brokers if b.id != coordinators[-1])
                    c.move_coordinator(to, transactional_id=tid)
                    coordinators.append(to)
            if txn % 5 == 3:
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
                committed.extend(numbers)
    finally:
        p.close(10)
    got = read_committed(c, "txn-moves", len(committed))
    assert sorted(n for values in got.values() for n in values) == committed
    for part, values in got.items():
        assert values == sorted(values), f"partition {part} out of order"
    # The requests followed the coordinator: NOT_COORDINATOR from an old one, then the
    # EndTxn of the last transactions at the last coordinator.
    log = c.request_log(since=since)
    end_txn = [e for e in log if e.api == "EndTxn"]
    assert {e.broker for e in end_txn} == set(coordinators)
    assert any("NOT_COORDINATOR" in e.errors for e in log
               if e.api in ("AddPartitionsToTxn", "EndTxn"))
    assert [e for e in end_txn if e.injected_error == "CONCURRENT_TRANSACTIONS"]
    assert end_txn[-1].broker == coordinators[-1] and not end_txn[-1].errors


@pytest.mark.timeout(120)
def test_a_transaction_finds_its_new_coordinator_when_the_old_ones_broker_stops(
        kafka_cluster):
    # The coordinator's broker goes down in the middle of a transaction (its role moves
    # with it): the requests still to be sent ask FindCoordinator again as soon as the
    # connection to the old broker is refused, instead of waiting for that broker until
    # they time out (found by a soak run: AddOffsetsToTxn timed out after 30 s).
    c = kafka_cluster
    c.create_topic("txn-down", partitions=PARTITIONS, replication_factor=3)
    c.create_topic("txn-down-in", partitions=1, replication_factor=3)
    tid = "orphan"
    p = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": tid,
                  "linger.ms": 5})
    group = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "down-group"})
    try:
        p.init_transactions(30)
        old = c.coordinator(transactional_id=tid)
        p.begin_transaction()
        for n in range(PER_TXN):
            p.produce("txn-down", b"%08d" % n, partition=n % PARTITIONS)
        assert p.flush(30) == 0
        c.stop_broker(old)
        new = c.coordinator(transactional_id=tid)
        assert new != old
        since = c.clear_request_log()
        started = time.monotonic()
        p.send_offsets_to_transaction([TopicPartition("txn-down-in", 0, 7)],
                                      group.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        elapsed = time.monotonic() - started
    finally:
        group.close()
        p.close(10)
    # Well below socket.timeout.ms (60 s) and the calls' own 30 s.
    assert elapsed < 10, elapsed
    log = c.request_log(since=since)
    assert [e.broker for e in log if e.api in ("AddOffsetsToTxn", "EndTxn")
            and not e.errors] == [new, new]
    assert any(e.api == "FindCoordinator" for e in log)
    c.start_broker(old)
    got = read_committed(c, "txn-down", PER_TXN)
    assert sorted(n for values in got.values() for n in values) == list(range(PER_TXN))


@pytest.mark.timeout(120)
def test_init_transactions_retries_invalid_txn_state_as_librdkafka_does(kafka_cluster):
    # The coordinator answers InitProducerId INVALID_TXN_STATE while it is still ending a
    # transaction the previous instance of this transactional.id left: librdkafka asks
    # again (confluent-kafka 2.16.1 on this cluster: init_transactions() returns), where
    # this producer used to die of a fatal error.
    c = kafka_cluster
    c.create_topic("txn-init-retry", partitions=PARTITIONS, replication_factor=3)
    c.inject_errors("InitProducerId", ["INVALID_TXN_STATE", "INVALID_TXN_STATE"])
    since = c.clear_request_log()
    p = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": "init-retry",
                  "linger.ms": 5})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        for n in range(PER_TXN):
            p.produce("txn-init-retry", b"%08d" % n, partition=n % PARTITIONS)
        p.commit_transaction(30)
    finally:
        p.close(10)
    init = [e for e in c.request_log(since=since) if e.api == "InitProducerId"]
    assert [e.injected_error for e in init] == ["INVALID_TXN_STATE", "INVALID_TXN_STATE", None]
    got = read_committed(c, "txn-init-retry", PER_TXN)
    assert sorted(n for values in got.values() for n in values) == list(range(PER_TXN))


@pytest.mark.timeout(120)
def test_a_producer_fenced_at_commit_raises_the_fatal_error_from_flush_once(kafka_cluster):
    # confluent-kafka 2.16.1, same steps on this cluster: the commit raises _FENCED, the
    # next flush() (or poll()) raises it once more (the fatal error event, which error_cb
    # never gets), later ones return 0, produce() raises _FATAL (not flagged fatal) and the
    # transactional calls _FENCED. flush() used to return 0 and error_cb got the event.
    c = kafka_cluster
    c.create_topic("txn-fenced", partitions=PARTITIONS, replication_factor=3)
    conf = {"bootstrap.servers": c.bootstrap_servers, "transactional.id": "fenced"}
    errors: List = []
    first = Producer(dict(conf, error_cb=errors.append))
    second = Producer(conf)
    try:
        first.init_transactions(30)
        first.begin_transaction()
        first.produce("txn-fenced", b"1", partition=0)
        assert first.flush(30) == 0
        second.init_transactions(30)                 # fences the first
        with pytest.raises(KafkaException) as committed:
            first.commit_transaction(30)
        fenced = committed.value.args[0]
        assert fenced.fatal() and fenced.code() == KafkaError._FENCED
        with pytest.raises(KafkaException) as flushed:
            first.flush(5)
        assert flushed.value.args[0] == fenced and flushed.value.args[0].fatal()
        assert first.flush(0) == 0 and first.poll(0.2) == 0 and errors == []
        with pytest.raises(KafkaException) as produced:
            first.produce("txn-fenced", b"3", partition=0)
        refused = produced.value.args[0]
        assert refused.code() == KafkaError._FATAL and not refused.fatal()
        with pytest.raises(KafkaException) as began:
            first.begin_transaction()
        assert began.value.args[0].code() == KafkaError._FENCED
        second.begin_transaction()
        second.produce("txn-fenced", b"2", partition=0)
        second.commit_transaction(30)
    finally:
        first.close(5)
        second.close(10)
    got = read_committed(c, "txn-fenced", 1)
    assert got == {0: [2], 1: [], 2: []}


def test_the_fenced_instance_cannot_write_to_a_partition_of_its_transaction(kafka_cluster):
    """A second instance's InitProducerId aborts the first's open transaction; the abort
    markers carry the bumped epoch (as Kafka's coordinator writes them), so a batch the
    first instance sends afterwards to a partition it had registered is refused with
    INVALID_PRODUCER_EPOCH at the leader. The test cluster wrote the markers with the old
    epoch and appended that batch."""
    c = kafka_cluster
    c.create_topic("txn-fence-leader", partitions=1, replication_factor=3)
    conf = {"bootstrap.servers": c.bootstrap_servers, "transactional.id": "fence-leader"}
    first, second = Producer(conf), Producer(conf)
    reports: List = []
    try:
        first.init_transactions(30)
        first.begin_transaction()
        first.produce("txn-fence-leader", b"a", partition=0)
        assert first.flush(30) == 0
        second.init_transactions(30)                 # aborts the first's transaction
        first.produce("txn-fence-leader", b"b", partition=0,
                      on_delivery=lambda err, msg: reports.append(err))
        try:
            first.flush(30)
        except KafkaException:
            pass                                     # the fatal error, raised once
    finally:
        first.close(5)
        second.close(10)
    assert len(reports) == 1 and reports[0] is not None
    produced = [e for e in c.request_log(api="Produce")
                if any(p["producer_epoch"] == 0 for p in e.details.get("partitions", []))]
    assert [p["error"] for e in produced for p in e.details["partitions"]][-1] == \
        ErrorCode.INVALID_PRODUCER_EPOCH
