"""confluent-kafka drop-in: timestamps of a LogAppendTime topic (``message.timestamp.type``),
side by side with confluent-kafka on the test cluster, which stamps each batch it appends
with its own clock as Kafka does. Delivery reports and consumed messages report
``TIMESTAMP_LOG_APPEND_TIME`` with the broker's time, never the producer's create time."""
from __future__ import annotations

import time

import pytest

import kafka_client
from kafka_client import TIMESTAMP_LOG_APPEND_TIME

ck = pytest.importorskip("confluent_kafka")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CREATE_TIME = 1_000_000_000_000   # 2001: far from any clock the broker can have


def produce(module, bootstrap, topic, count):
    """``count`` messages (over partitions 0 and 1) with an explicit create time; the
    delivery reports as (partition, offset, timestamp) and the clock's window around it."""
    producer = module.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    reports = []

    def report(err, msg):
        assert err is None, err
        reports.append((msg.partition(), msg.offset(), msg.timestamp()))

    before = int(time.time() * 1000)
    for i in range(count):
        producer.produce(topic, b"%d" % i, partition=i % 2, timestamp=CREATE_TIME + i,
                         on_delivery=report)
    assert producer.flush(30) == 0
    after = int(time.time() * 1000)
    return reports, (before, after)


def consume(module, bootstrap, topic, count):
    consumer = module.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{module.__name__}",
                                "auto.offset.reset": "earliest"})
    consumer.assign([module.TopicPartition(topic, p, 0) for p in (0, 1)])
    got = {}
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got[(msg.partition(), msg.offset())] = msg.timestamp()
    consumer.close()
    return got


def test_log_append_time_topic_reports_the_brokers_time_like_confluent(kafka_cluster):
    topic = "log-append-time"
    kafka_cluster.create_topic(topic, partitions=2, replication_factor=3,
                               config={"message.timestamp.type": "LogAppendTime"})
    bootstrap = kafka_cluster.bootstrap_servers
    written = {}
    for module in (ck, kafka_client):
        reports, (before, after) = produce(module, bootstrap, topic, 20)
        assert len(reports) == 20, module.__name__
        for partition, offset, (ts_type, ts) in reports:
            assert ts_type == TIMESTAMP_LOG_APPEND_TIME, (module.__name__, ts_type)
            assert before - 5 <= ts <= after + 5, (module.__name__, ts, before, after)
            written[(partition, offset)] = (ts_type, ts)
    assert len(written) == 40
    # Both consumers see every message with the time its delivery report gave.
    assert consume(ck, bootstrap, topic, 40) == written
    assert consume(kafka_client, bootstrap, topic, 40) == written
    # The followers hold the stamped batches: read from the next leaders, the same.
    for partition in (0, 1):
        kafka_cluster.move_leader(topic, partition)
    assert consume(kafka_client, bootstrap, topic, 40) == written


def test_consume_arrow_reports_log_append_time(kafka_cluster):
    pytest.importorskip("pyarrow")
    topic = "log-append-time-arrow"
    kafka_cluster.create_topic(topic, partitions=2,
                               config={"message.timestamp.type": "LogAppendTime"})
    bootstrap = kafka_cluster.bootstrap_servers
    reports, _ = produce(kafka_client, bootstrap, topic, 10)
    consumer = kafka_client.Consumer({"bootstrap.servers": bootstrap, "group.id": "g-arrow"})
    consumer.assign([kafka_client.TopicPartition(topic, p, 0) for p in (0, 1)])
    rows = []
    deadline = time.monotonic() + 30
    while len(rows) < 10 and time.monotonic() < deadline:
        rows.extend(consumer.consume_arrow(10, 0.5).to_pylist())
    consumer.close()
    assert sorted((r["partition"], r["offset"], (r["timestamp_type"], r["timestamp"]))
                  for r in rows) == sorted(reports)
