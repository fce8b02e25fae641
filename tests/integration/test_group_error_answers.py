"""The classic group's answers and timeouts that end a member's hold on its partitions,
on the test cluster: FENCED_INSTANCE_ID for a static member's JoinGroup and Heartbeat
(fatal, as librdkafka makes it: another process has its group.instance.id), heartbeats
that stop being answered within session.timeout.ms (the assignment is lost, as the
coordinator has given it away), and a synchronous commit the coordinator does not
answer in time (raised as _TIMED_OUT within the call's timeout, not a hang); and the
commit before a revocation failing (told to on_commit; the next owner reads again); a
member slow to run a revocation keeps its session; a member past its poll interval cannot
commit its transaction's offsets (either protocol).
"""
from __future__ import annotations

import time
import uuid
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

    # short sessions, so that a lost one is seen in seconds
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("cluster")),
                 broker_config={"group.min.session.timeout.ms": 1000}) as c:
        yield c


def _topic_with_messages(cluster, name: str, count: int) -> str:
    cluster.create_topic(name, partitions=1)
    with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as p:
        for i in range(count):
            p.produce(name, b"%d" % i, partition=0)
        assert p.flush(10) == 0
    return name


class Member:
    """A classic-protocol consumer of ``topic`` and what its callbacks and poll() saw."""

    def __init__(self, cluster, topic: str, **conf) -> None:
        self.assigned: List[List[int]] = []
        self.revoked: List[List[int]] = []
        self.lost: List[List[int]] = []
        self.errors: List[KafkaError] = []
        self.values: List[int] = []
        self.consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                                  "group.id": f"grp-{uuid.uuid4().hex[:8]}",
                                  "auto.offset.reset": "earliest",
                                  "fetch.wait.max.ms": 50, **conf})
        self.consumer.subscribe(
            [topic],
            on_assign=lambda c, tps: self.assigned.append([tp.partition for tp in tps]),
            on_revoke=lambda c, tps: self.revoked.append([tp.partition for tp in tps]),
            on_lost=lambda c, tps: self.lost.append([tp.partition for tp in tps]))

    def poll_until(self, done, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            for m in self.consumer.consume(100, 0.1):
                if m.error() is not None:
                    self.errors.append(m.error())
                else:
                    self.values.append(int(m.value()))
        assert done(), (self.assigned, self.revoked, self.lost, self.errors)


def test_join_answered_fenced_instance_id_is_fatal(cluster):
    """A static member whose JoinGroup is answered FENCED_INSTANCE_ID: poll() returns a
    fatal error of that code, and the member does not join again (no further JoinGroup)
    nor get an assignment."""
    topic = _topic_with_messages(cluster, "join-fenced", 3)
    since = cluster.clear_request_log()
    cluster.inject_errors("JoinGroup", ["FENCED_INSTANCE_ID"])
    m = Member(cluster, topic, **{"group.instance.id": "static-1"})
    try:
        m.poll_until(lambda: m.errors)
        err = m.errors[0]
        assert err.code() == KafkaError.FENCED_INSTANCE_ID and err.fatal(), err
        for _ in range(10):
            m.consumer.consume(100, 0.1)
        joins = cluster.request_log(since, api="JoinGroup")
        assert [e.injected_error for e in joins] == ["FENCED_INSTANCE_ID"], joins
        assert m.assigned == [] and m.values == []
    finally:
        m.consumer.close()


def test_heartbeat_answered_fenced_instance_id_is_fatal(cluster):
    """A static member in a stable group whose Heartbeat is answered FENCED_INSTANCE_ID:
    its partitions are lost (on_lost), poll() returns the fatal error, and it does not
    join again."""
    topic = _topic_with_messages(cluster, "heartbeat-fenced", 3)
    m = Member(cluster, topic, **{"group.instance.id": "static-2",
                                  "heartbeat.interval.ms": 100})
    try:
        m.poll_until(lambda: m.assigned and len(m.values) == 3)
        since = cluster.clear_request_log()
        cluster.inject_errors("Heartbeat", ["FENCED_INSTANCE_ID"])
        m.poll_until(lambda: m.errors)
        err = m.errors[0]
        assert err.code() == KafkaError.FENCED_INSTANCE_ID and err.fatal(), err
        for _ in range(10):
            m.consumer.consume(100, 0.1)
        assert m.lost == [[0]], (m.lost, m.revoked)
        assert cluster.request_log(since, api="JoinGroup") == []
    finally:
        m.consumer.close()


def test_heartbeats_unanswered_for_the_session_timeout_lose_the_assignment(cluster):
    """Heartbeat answers delayed past session.timeout.ms: the member gives its partitions
    up as lost (on_lost, not on_revoke: another member may own them by now) once that
    long passed without a successful heartbeat, rather than consume on; when answers are
    quick again it rejoins, gets the partition back and reads on from the committed
    offset (no message read twice, none skipped)."""
    topic = _topic_with_messages(cluster, "heartbeat-silent", 5)
    m = Member(cluster, topic, **{"session.timeout.ms": 2000, "heartbeat.interval.ms": 200})
    try:
        m.poll_until(lambda: len(m.values) == 5)
        m.consumer.commit(asynchronous=False)
        cluster.set_latency(4.0, apis=["Heartbeat"])
        start = time.monotonic()
        m.poll_until(lambda: m.lost, timeout=10)
        took = time.monotonic() - start
        assert m.lost == [[0]] and m.revoked == [], (m.lost, m.revoked)
        assert 1.5 < took < 6, took
        cluster.set_latency(0, apis=["Heartbeat"])
        with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as p:
            for i in range(5, 8):
                p.produce(topic, b"%d" % i, partition=0)
            assert p.flush(10) == 0
        m.poll_until(lambda: len(m.values) == 8, timeout=30)
        assert m.values == list(range(8)) and len(m.assigned) == 2, (m.values, m.assigned)
    finally:
        cluster.set_latency(0)
        m.consumer.close()


def test_commit_not_answered_in_time_raises_timed_out(cluster):
    """A synchronous commit whose OffsetCommit answer is late: commit() raises
    _TIMED_OUT after about its timeout (the group's request timeout), not later, and
    a commit once answers are quick again succeeds (committed() reads it back)."""
    topic = _topic_with_messages(cluster, "commit-late", 3)
    m = Member(cluster, topic, **{"socket.timeout.ms": 1500})
    try:
        m.poll_until(lambda: len(m.values) == 3)
        cluster.set_latency(5.0, apis=["OffsetCommit"])
        start = time.monotonic()
        with pytest.raises(KafkaException) as raised:
            m.consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        took = time.monotonic() - start
        assert raised.value.args[0].code() == KafkaError._TIMED_OUT, raised.value
        assert took < 4, took
        cluster.set_latency(0, apis=["OffsetCommit"])
        m.consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        assert m.consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 3
    finally:
        cluster.set_latency(0)
        m.consumer.close()


@pytest.mark.parametrize("error, read_again", [("UNKNOWN_SERVER_ERROR", 20),
                                               ("NOT_COORDINATOR", 0)])
def test_commit_before_revocation_failing_is_told_and_reread_once(cluster, error, read_again):
    """enable.auto.commit: the commit made before a revocation is answered ``error``. A
    coordinator error is retried within the rebalance (committed: nothing read twice);
    any other is not (librdkafka neither): on_commit hears it with the offset that was
    not committed, the revocation goes on, and the partition's next owner reads again
    exactly what was read since the last commit (here all 20), once."""
    topic = _topic_with_messages(cluster, f"revoke-commit-{error.lower()}", 20)
    group = f"grp-{uuid.uuid4().hex[:8]}"
    heard: List[tuple] = []

    def member(name: str) -> Member:
        return Member(cluster, topic, **{
            "group.id": group, "auto.commit.interval.ms": 600_000,  # the revocation's only
            "on_commit": lambda err, tps: heard.append(
                (name, err, [(tp.partition, tp.offset) for tp in tps]))})

    a = member("a")
    b = None
    try:
        a.poll_until(lambda: len(a.values) == 20)
        read_before = len(a.values)
        since = cluster.clear_request_log()
        cluster.inject_errors("OffsetCommit", [error])
        b = member("b")
        deadline = time.monotonic() + 30
        # both poll until the rebalance is over and the partition's owner has read it all
        while time.monotonic() < deadline and not (
                len(a.assigned) == 2 and b.assigned
                and len(a.values) + len(b.values) >= read_before + read_again):
            for m in (a, b):
                for msg in m.consumer.consume(100, 0.1):
                    assert msg.error() is None, msg.error()
                    m.values.append(int(msg.value()))
        time.sleep(0.5)   # and nothing more comes
        for m in (a, b):
            for msg in m.consumer.consume(100, 0.2):
                m.values.append(int(msg.value()))
        assert a.revoked == [[0]], (a.revoked, b.revoked)
        again = a.values[read_before:] + b.values
        assert again == list(range(read_again)), again
        commits = cluster.request_log(since, api="OffsetCommit")
        if read_again:
            assert [e.errors for e in commits] == [[error]]   # not retried
            assert len(heard) == 1 and heard[0][0] == "a", heard
            err = heard[0][1]
            assert err is not None and err.code() == getattr(KafkaError, error), heard
            assert heard[0][2] == [(0, 20)]
        else:
            assert [e.errors for e in commits] == [[error], []]   # retried, committed
            assert heard == [("a", None, [(0, 20)])]
    finally:
        cluster.clear_faults()
        a.consumer.close()
        if b is not None:
            b.consumer.close()


def test_a_member_slow_to_run_a_revocation_keeps_its_session(cluster):
    """Cooperative: b joins while a's application is busy (not polling, well within
    max.poll.interval.ms); a's I/O thread rejoins and is told to give a partition up,
    which waits for a's next poll. a heartbeats meanwhile, as librdkafka and the Java
    client do: its session held for three times session.timeout.ms, b got nothing a
    still held, and at a's next poll the partition is revoked (not lost), its commit
    taken. (a went silent instead: its session expired, b got both partitions while a
    still held them, then a's revocation's commit was refused: soak seed 134.)"""
    topic = f"slow-revoke-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=2)
    conf = {"group.id": f"grp-{topic}", "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": 3000, "heartbeat.interval.ms": 200,
            "max.poll.interval.ms": 60000, "enable.auto.commit": False}
    a = Member(cluster, topic, **conf)
    commits: List[str] = []

    def revoke_and_commit(c, tps):
        a.revoked.append([tp.partition for tp in tps])
        try:
            c.commit(offsets=[TopicPartition(topic, tp.partition, 0) for tp in tps],
                     asynchronous=False)
            commits.append("ok")
        except KafkaException as exc:
            commits.append(exc.args[0].name())

    a.consumer.subscribe(
        [topic], on_assign=lambda c, tps: a.assigned.append([tp.partition for tp in tps]),
        on_revoke=revoke_and_commit, on_lost=lambda c, tps: a.lost.append(
            [tp.partition for tp in tps]))
    b = None
    try:
        a.poll_until(lambda: sorted(tp.partition for tp in a.consumer.assignment()) == [0, 1])
        b = Member(cluster, topic, **conf)
        busy_until = time.monotonic() + 9.0     # a's application is busy
        while time.monotonic() < busy_until:
            b.consumer.consume(100, 0.1)
        assert all(parts == [] for parts in b.assigned) and b.lost == [], b.assigned
        a.poll_until(lambda: a.revoked)
        assert len(a.revoked) == 1 and len(a.revoked[0]) == 1, a.revoked
        assert a.lost == [] and commits == ["ok"], (a.lost, commits, a.errors)
        b.poll_until(lambda: any(b.assigned))
        assert [p for parts in b.assigned for p in parts] == a.revoked[0], b.assigned
        assert [tp.partition for tp in a.consumer.assignment()] == \
            [p for p in (0, 1) if p not in a.revoked[0]]
    finally:
        a.consumer.close()
        if b is not None:
            b.consumer.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_member_past_its_poll_interval_cannot_commit_its_transaction(cluster, protocol):
    """KIP-447's fencing of a zombie: a consume-transform-produce member whose processing
    outlasts max.poll.interval.ms is out of the group by the time it sends its offsets.
    consumer_group_metadata() still names the generation and member its records were
    read in, so the coordinator refuses them (UNKNOWN_MEMBER_ID, abortable) and the
    output goes with the aborted transaction. It named generation -1 once the member had
    left, which asks for no check: the zombie's offsets and output were committed, and
    its partitions' next owner wrote the same output again (soak eos --stall, seed 140:
    375 inputs twice in the read_committed output)."""
    topic = f"zombie-{protocol}-{uuid.uuid4().hex[:8]}"
    out = topic + "-out"
    _topic_with_messages(cluster, topic, 20)
    cluster.create_topic(out, partitions=1)
    conf = {"group.id": f"grp-{topic}", "group.protocol": protocol,
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "max.poll.interval.ms": 1500}
    if protocol == "classic":
        conf.update({"session.timeout.ms": 1500, "heartbeat.interval.ms": 200})
    m = Member(cluster, topic, **conf)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                  "transactional.id": f"txn-{topic}"})
    try:
        p.init_transactions(30)
        m.poll_until(lambda: len(m.values) == 20)
        read_in = m.consumer.consumer_group_metadata()
        assert read_in.generation_id > 0 and read_in.member_id
        p.begin_transaction()
        for v in m.values:
            p.produce(out, b"%d" % v, partition=0)
        time.sleep(4.5)       # processing: three times max.poll.interval.ms
        meta = m.consumer.consumer_group_metadata()
        assert (meta.generation_id, meta.member_id) == (read_in.generation_id,
                                                        read_in.member_id)
        with pytest.raises(KafkaException) as refused:
            p.send_offsets_to_transaction(
                m.consumer.position([TopicPartition(topic, 0)]), meta, 30)
            p.commit_transaction(30)
        err = refused.value.args[0]
        assert err.code() in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION) \
            and err.txn_requires_abort(), err
        p.abort_transaction(30)
        reader = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                           "isolation.level": "read_committed",
                           "enable.partition.eof": True})
        reader.assign([TopicPartition(out, 0, 0)])
        got = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got = reader.consume(100, 0.5)
        reader.close()
        assert [msg.error().code() for msg in got] == [KafkaError._PARTITION_EOF], got
        (committed,) = m.consumer.committed([TopicPartition(topic, 0)], 10)
        assert committed.offset == OFFSET_INVALID, committed
    finally:
        p.close()
        m.consumer.close()
