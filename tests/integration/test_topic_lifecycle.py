"""Topics deleted and created again under running clients, on the test cluster with
automatic topic creation off: every message gets one delivery report, in the time
librdkafka takes; nothing waits for message.timeout.ms; an idempotent producer goes on
into the new topic."""
from __future__ import annotations

import collections
import time

import pytest

from kafka_client import Consumer, KafkaError, KafkaException, Producer, TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def cluster(tmp_path):
    from kafka_client.testing import Cluster
    with Cluster(brokers=3, data_dir=str(tmp_path),
                 broker_config={"auto.create.topics.enable": False}) as c:
        yield c


def code_name(err):
    return None if err is None else err.name()


def test_messages_for_a_deleted_topic_fail_after_the_propagation_time(cluster):
    cluster.create_topic("gone", partitions=3, replication_factor=3)
    reports = collections.Counter()
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                  "topic.metadata.propagation.max.ms": 2000,
                  "topic.metadata.refresh.interval.ms": 500})
    try:
        for i in range(30):
            p.produce("gone", b"%d" % i, on_delivery=lambda e, m: reports.update([code_name(e)]))
        assert p.flush(10) == 0 and reports == {None: 30}
        cluster.delete_topic("gone")
        reports.clear()
        for i in range(100):
            p.produce("gone", b"%d" % i, on_delivery=lambda e, m: reports.update([code_name(e)]))
        started = time.monotonic()
        assert p.flush(30) == 0                      # waited message.timeout.ms (300 s)
        assert time.monotonic() - started < 8
        assert reports == {"UNKNOWN_TOPIC_OR_PART": 100}
        with pytest.raises(KafkaException) as ei:   # known not to exist: at once
            p.produce("gone", b"later")
        assert ei.value.args[0].code() == KafkaError._UNKNOWN_TOPIC
    finally:
        p.close(5)


def test_an_idempotent_producer_goes_on_into_a_topic_created_again_with_fewer_partitions(
        cluster):
    cluster.create_topic("again", partitions=3, replication_factor=3)
    reports = []
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
                  "linger.ms": 5, "topic.metadata.refresh.interval.ms": 500})
    try:
        def on_delivery(err, msg):
            reports.append((code_name(err), msg.partition(), msg.value()))

        for i in range(30):
            p.produce("again", b"before-%d" % i, partition=i % 3, on_delivery=on_delivery)
        assert p.flush(10) == 0
        cluster.delete_topic("again")
        for i in range(30):                          # queued while it is gone
            p.produce("again", b"queued-%d" % i, partition=2, on_delivery=on_delivery)
        p.poll(1.0)
        cluster.create_topic("again", partitions=1, replication_factor=3)
        for i in range(30):     # (keyless ones could still be placed in 1 or 2 here)
            p.produce("again", b"after-%d" % i, partition=0, on_delivery=on_delivery)
        assert p.flush(20) == 0
        outcome = collections.Counter((err, value.split(b"-")[0]) for err, _, value in reports)
        # The partition that is gone: librdkafka's "partition count changed from 3 to 1"
        # at once (they waited for message.timeout.ms); the new topic takes the rest: its
        # partitions have no state of this producer, which Kafka accepts at any sequence.
        assert outcome == {(None, b"before"): 30, ("_UNKNOWN_PARTITION", b"queued"): 30,
                           (None, b"after"): 30}, outcome
    finally:
        p.close(5)
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        c.assign([TopicPartition("again", 0, 0)])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 30 and time.monotonic() < deadline:
            got.extend(m.value() for m in c.consume(100, 0.2) if m.error() is None)
        assert got == [b"after-%d" % i for i in range(30)]   # once each, in order
    finally:
        c.close()


def test_a_consumer_reads_a_topic_created_again_from_its_start(cluster):
    """The positions of a deleted topic's partitions belong to the old log: in the new
    one (another topic id) the consumer starts from auto.offset.reset (librdkafka keeps
    the old position and skips that many records of the new topic)."""
    cluster.create_topic("reborn", partitions=2, replication_factor=3)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 1})
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "reborn-g",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "topic.metadata.refresh.interval.ms": 300})
    try:
        for i in range(50):
            p.produce("reborn", b"old-%d" % i, partition=i % 2)
        assert p.flush(10) == 0
        c.assign([TopicPartition("reborn", 0), TopicPartition("reborn", 1)])
        old = []
        deadline = time.monotonic() + 10
        while len(old) < 50 and time.monotonic() < deadline:
            old.extend(m.value() for m in c.consume(100, 0.1) if m.error() is None)
        assert len(old) == 50
        c.commit(asynchronous=False)
        # Paused meanwhile, so that no Fetch meets the new partitions while they are
        # shorter than the old positions (OFFSET_OUT_OF_RANGE would reset them).
        c.pause(c.assignment())
        cluster.delete_topic("reborn")
        cluster.create_topic("reborn", partitions=2, replication_factor=3)
        for i in range(80):                  # more than the old positions (25 each)
            p.produce("reborn", b"new-%d" % i, partition=i % 2)
        assert p.flush(10) == 0
        time.sleep(1.0)                      # the consumer's metadata has the new topic
        c.resume(c.assignment())
        new = []
        deadline = time.monotonic() + 15
        while len(new) < 80 and time.monotonic() < deadline:
            new.extend(m.value() for m in c.consume(100, 0.1) if m.error() is None)
        assert sorted(new) == sorted(b"new-%d" % i for i in range(80))
        # The group's offsets of the deleted topic went with it (Kafka's rule, which the
        # test cluster follows): nothing committed for the new topic yet.
        committed = c.committed([TopicPartition("reborn", 0), TopicPartition("reborn", 1)],
                                timeout=10)
        assert [tp.offset for tp in committed] == [-1001, -1001]
    finally:
        p.close(5)
        c.close()


def test_offset_lookups_for_a_topic_or_partition_that_does_not_exist_fail_at_once(cluster):
    """As librdkafka's: once a metadata answer asked for by the call says so (they
    waited for their whole timeout, then raised a retriable LEADER_NOT_AVAILABLE). A
    topic looked up before its deletion: its leader's UNKNOWN_TOPIC_OR_PART; one never
    known: _UNKNOWN_PARTITION, the call finding no leader at all (as librdkafka's,
    compat/test_compat_programs.py)."""
    cluster.create_topic("gone", partitions=2, replication_factor=3)
    cluster.create_topic("two", partitions=2, replication_factor=3)
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        assert c.get_watermark_offsets(TopicPartition("gone", 0), 10) == (0, 0)
        cluster.delete_topic("gone")
        cases = [(TopicPartition("gone", 0), KafkaError.UNKNOWN_TOPIC_OR_PART),
                 (TopicPartition("never-made", 0), KafkaError._UNKNOWN_PARTITION),
                 (TopicPartition("two", 7), KafkaError._UNKNOWN_PARTITION)]
        for tp, code in cases:
            for lookup in (lambda: c.get_watermark_offsets(tp, 10),
                           lambda: c.offsets_for_times([TopicPartition(tp.topic,
                                                                       tp.partition, 0)], 10)):
                started = time.monotonic()
                with pytest.raises(KafkaException) as ei:
                    lookup()
                assert time.monotonic() - started < 5, tp
                assert ei.value.args[0].code() == code, (tp, ei.value.args[0])
                assert not ei.value.args[0].retriable()
    finally:
        c.close()


def test_partitions_added_under_a_producer_and_a_group_are_used_and_read(cluster):
    cluster.create_topic("grows", partitions=2, replication_factor=3)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 1,
                  "topic.metadata.refresh.interval.ms": 500})
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "grows-g",
                  "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 500})
    try:
        c.subscribe(["grows"])
        for i in range(20):
            p.produce("grows", b"before-%d" % i)
        assert p.flush(10) == 0
        state = cluster.create_partitions("grows", 4)
        assert len(state.partitions) == 4
        seen = collections.Counter()
        sent = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (seen[2] and seen[3]):
            p.produce("grows", b"after-%d" % sent)   # keyless: spread over what is known
            sent += 1
            p.poll(0)
            for m in c.consume(100, 0.05):
                if m.error() is None:
                    seen[m.partition()] += 1
        assert seen[2] and seen[3], seen       # written to, and read from, by the group
        assert {tp.partition for tp in c.assignment()} == {0, 1, 2, 3}
        assert p.flush(10) == 0
    finally:
        p.close(5)
        c.close()
