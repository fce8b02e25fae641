"""KIP-320 on the test cluster: a consumer whose position an unclean leader election cut
off the log moves back to where the logs part, says so (_LOG_TRUNCATION), and reads
every record the new leader writes from there: without the check it would go on at its
old position and skip them without a word.

The scene, on two brokers and one partition with replicas [1, 2]: 50 records reach both;
broker 2 stops; 50 more reach broker 1 only (the ISR is [1]) and the consumer reads
all 100; broker 1 stops, broker 2 comes back and is elected uncleanly (its log ends at
50); 80 new records are written there, at offsets 50-129.
"""
from __future__ import annotations

import time

import pytest

from kafka_client import Consumer, ElectionType, KafkaError, Producer, TopicPartition
from kafka_client.admin import AdminClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def truncated(tmp_path):
    """The cluster after the scene above, with a consumer that read the first 100."""
    from kafka_client.testing import Cluster
    with Cluster(brokers=2, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("trunc", partitions=1, replication_factor=2,
                             assignments=[[1, 2]])
        tp = TopicPartition("trunc", 0)

        def produce(values):
            with Producer({"bootstrap.servers": cluster.bootstrap_servers,
                           "linger.ms": 0, "acks": "all"}) as p:
                for v in values:
                    p.produce("trunc", v, partition=0)
                assert p.flush(30) == 0

        produce([b"old-%d" % i for i in range(50)])
        cluster.wait_in_sync("trunc")
        cluster.stop_broker(2)
        produce([b"old-%d" % i for i in range(50, 100)])
        yield cluster, tp, produce


def read(consumer, want, timeout=30):
    got = []
    deadline = time.monotonic() + timeout
    while len([m for m in got if m.error() is None]) < want:
        assert time.monotonic() < deadline, f"read {len(got)} of {want}: {got[-3:]}"
        for m in consumer.consume(100, 0.1):
            if m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF:
                continue
            got.append(m)
    return got


def elect_broker_2(cluster, tp):
    cluster.stop_broker(1)
    cluster.start_broker(2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    result = admin.elect_leaders(ElectionType.UNCLEAN, [tp]).result(30)
    assert result[tp] is None, result
    assert cluster.leader("trunc", 0) == 2


@pytest.mark.parametrize("how", ["assign", "group"])
def test_a_truncated_position_reads_on_from_where_the_logs_part(truncated, how):
    cluster, tp, produce = truncated
    conf = {"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50, "topic.metadata.refresh.interval.ms": 500}
    if how == "group":
        conf.update({"group.id": "trunc-group", "auto.commit.interval.ms": 100})
    c = Consumer(conf)
    try:
        if how == "group":
            c.subscribe(["trunc"])
        else:
            c.assign([TopicPartition("trunc", 0, 0)])
        first = read(c, 100)
        assert [m.value() for m in first] == [b"old-%d" % i for i in range(100)]
        epochs = {m.leader_epoch() for m in first}
        assert len(epochs) == 1 and None not in epochs
        elect_broker_2(cluster, tp)
        produce([b"new-%d" % i for i in range(80)])
        then = read(c, 80)
        errors = [m for m in then if m.error() is not None]
        assert [m.error().code() for m in errors] == [KafkaError._LOG_TRUNCATION], errors
        assert errors[0].offset() == 50 and "offset 100" in errors[0].error().str()
        data = [m for m in then if m.error() is None]
        assert [(m.offset(), m.value()) for m in data] == \
            [(50 + i, b"new-%d" % i) for i in range(80)]
        if how == "group":   # the group's offset follows, back at the parting point
            deadline = time.monotonic() + 10
            while c.committed([tp], timeout=10)[0].offset != 130:
                assert time.monotonic() < deadline
                c.poll(0.1)
    finally:
        c.close()


def test_with_auto_offset_reset_error_the_partition_stops_until_a_seek(truncated):
    cluster, tp, produce = truncated
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                  "auto.offset.reset": "error", "fetch.wait.max.ms": 50,
                  "topic.metadata.refresh.interval.ms": 500})
    try:
        c.assign([TopicPartition("trunc", 0, 0)])
        read(c, 100)
        elect_broker_2(cluster, tp)
        produce([b"new-%d" % i for i in range(80)])
        deadline = time.monotonic() + 30
        got = []
        while not got:
            assert time.monotonic() < deadline
            got = [m for m in c.consume(100, 0.1) if m.error() is not None]
        assert got[0].error().code() == KafkaError._LOG_TRUNCATION
        assert "auto.offset.reset=error" in got[0].error().str()
        assert c.consume(100, 1.0) == []          # stopped: nothing more, no error again
        c.seek(TopicPartition("trunc", 0, 50))
        assert [m.value() for m in read(c, 80)] == [b"new-%d" % i for i in range(80)]
    finally:
        c.close()


def test_consume_arrow_raises_the_truncation_then_reads_on(truncated):
    """consume_arrow() raises error events (after the rows before them): the
    _LOG_TRUNCATION one too, and the rows after it are the new leader's."""
    pytest.importorskip("pyarrow")
    from kafka_client import KafkaException
    cluster, tp, produce = truncated
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 50, "group.id": "trunc-arrow",
                  "auto.commit.interval.ms": 100})
    try:
        c.assign([TopicPartition("trunc", 0, 0)])
        rows = []
        deadline = time.monotonic() + 30
        while len(rows) < 100:
            assert time.monotonic() < deadline
            batch = c.consume_arrow(100, 0.1)
            if batch is not None:
                rows.extend(batch.column("value").to_pylist())
        assert rows == [b"old-%d" % i for i in range(100)]
        elect_broker_2(cluster, tp)
        produce([b"new-%d" % i for i in range(80)])
        errors, offsets, values = [], [], []
        deadline = time.monotonic() + 30
        while len(values) < 80:
            assert time.monotonic() < deadline
            try:
                batch = c.consume_arrow(100, 0.1)
            except KafkaException as exc:
                errors.append(exc.args[0].code())
                continue
            if batch is not None:
                offsets.extend(batch.column("offset").to_pylist())
                values.extend(batch.column("value").to_pylist())
        assert errors == [KafkaError._LOG_TRUNCATION]
        assert list(zip(offsets, values)) == [(50 + i, b"new-%d" % i) for i in range(80)]
        # committed with the records' leader epoch, back at the parting point's new end
        deadline = time.monotonic() + 10
        while True:
            committed = c.committed([tp], timeout=10)[0]
            if committed.offset == 130:
                break
            assert time.monotonic() < deadline, committed
            c.poll(0.1)
        assert committed.leader_epoch is not None and committed.leader_epoch >= 1
    finally:
        c.close()
