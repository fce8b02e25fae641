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
