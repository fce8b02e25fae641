"""The Spark writer's producers, one Python worker's tasks after one another (what Spark
does when it reuses a worker), called directly on the Tansu fixture: a task that succeeded
leaves its producer open and flushed for the next task with the same options; a task that
failed closes its producer; beyond the pool's size the oldest idle producer is closed.
"""
from __future__ import annotations

import time

import pytest

pytest.importorskip("pyspark")

import pyarrow as pa  # noqa: E402

from kafka_client import Consumer, KafkaError, TopicPartition  # noqa: E402
from kafka_client.spark import writer  # noqa: E402
from kafka_client.spark.options import WriteOptions  # noqa: E402
from kafka_client.spark.writer import KafkaWriteError, WriteLayout, write_batches  # noqa: E402

VALUES_ONLY = WriteLayout(key=False, topic=False, partition=False, headers=False)
WITH_PARTITION = WriteLayout(key=False, topic=False, partition=True, headers=False)


@pytest.fixture
def created(monkeypatch):
    """A fresh pool of 2 for the test, and every producer the writer creates, in order."""
    monkeypatch.setattr(writer, "_POOL", writer._ProducerPool(2))
    made = []

    class Recorded(writer._PooledProducer):
        def __init__(self, conf):
            super().__init__(conf)
            made.append(self.producer)

    monkeypatch.setattr(writer, "_PooledProducer", Recorded)
    yield made
    for producer in made:
        producer.close(0)


def values(first, n):
    return pa.record_batch([pa.array([b"v%d" % i for i in range(first, first + n)])],
                           names=["value"])


def read_values(bootstrap, topic, partition=0):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.time_ns()}",
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        out = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = c.poll(1)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(msg.error())
            out.append(msg.value())
        return out
    finally:
        c.close()


def test_next_task_reuses_the_producer(tansu_broker, created):
    topic = f"pool-reuse-{time.time_ns()}"
    tansu_broker.create_topic(topic, 1)
    opts = WriteOptions({"bootstrap.servers": tansu_broker.bootstrap}, topic)
    assert write_batches(iter([values(0, 30_000)]), opts, VALUES_ONLY).messages == 30_000
    assert write_batches(iter([values(30_000, 5), values(30_005, 5)]), opts,
                         VALUES_ONLY).messages == 10
    assert len(created) == 1
    assert read_values(tansu_broker.bootstrap, topic) == [b"v%d" % i for i in range(30_010)]
    # Other options: another producer.
    other = WriteOptions({"bootstrap.servers": tansu_broker.bootstrap, "linger.ms": 1}, topic)
    write_batches(iter([values(30_010, 1)]), other, VALUES_ONLY)
    assert len(created) == 2 and created[1] is not created[0]


def test_failed_task_closes_its_producer(tansu_broker, created):
    topic = f"pool-fail-{time.time_ns()}"
    tansu_broker.create_topic(topic, 2)
    opts = WriteOptions({"bootstrap.servers": tansu_broker.bootstrap}, topic)
    bad = pa.record_batch([pa.array([b"x"]), pa.array([5], pa.int32())],
                          names=["value", "partition"])
    with pytest.raises(KafkaWriteError, match="_UNKNOWN_PARTITION"):
        write_batches(iter([bad]), opts, WITH_PARTITION)
    with pytest.raises(RuntimeError, match="closed"):
        created[0].produce(topic, b"y")
    # The next task gets a new producer, which works.
    assert write_batches(iter([values(0, 3)]), opts, VALUES_ONLY).messages == 3
    assert len(created) == 2
    got = read_values(tansu_broker.bootstrap, topic, 0) + \
        read_values(tansu_broker.bootstrap, topic, 1)
    assert sorted(got) == [b"v0", b"v1", b"v2"]


def test_oldest_idle_producer_closes_beyond_the_pool_size(tansu_broker, created):
    topic = f"pool-evict-{time.time_ns()}"
    tansu_broker.create_topic(topic, 1)
    for n in range(3):
        opts = WriteOptions({"bootstrap.servers": tansu_broker.bootstrap,
                             "client.id": f"task-{n}"}, topic)
        write_batches(iter([values(n, 1)]), opts, VALUES_ONLY)
    assert len(created) == 3
    with pytest.raises(RuntimeError, match="closed"):
        created[0].produce(topic, b"y")
    for kept in created[1:]:
        kept.produce(topic, b"kept")
        assert kept.flush(10) == 0
    assert read_values(tansu_broker.bootstrap, topic) == [b"v0", b"v1", b"v2", b"kept",
                                                         b"kept"]
