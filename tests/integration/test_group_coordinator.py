"""Group requests do not wait behind fetches: the coordinator has a connection of its
own (brokers answer one request per connection at a time, in order)."""
from __future__ import annotations

import statistics
import time
import uuid

import pytest

from kafka_client import Consumer, Producer, TopicPartition

pytestmark = pytest.mark.integration

pytest.importorskip("confluent_kafka")  # brokers' create_topic uses its admin client


def test_commit_does_not_wait_for_a_long_polling_fetch(broker, topic_name):
    """At the end of the log the consumer always has a Fetch parked at the broker for
    fetch.wait.max.ms (Tansu holds it; noida-db answers at once). A synchronous commit
    sharing that connection waited for it: 360-500 ms each on Tansu with the default
    500 ms. On a connection of its own it takes a round trip."""
    broker.create_topic(topic_name, partitions=1)
    with Producer({"bootstrap.servers": broker.bootstrap}) as p:
        for i in range(10):
            p.produce(topic_name, b"%d" % i, partition=0)
        assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "fetch.wait.max.ms": 500,
                  "group.id": f"coord-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            got += [m for m in c.consume(10, 0.5) if m.error() is None]
        assert [m.offset() for m in got] == list(range(10))
        # coordinator found and connected
        c.commit(offsets=[TopicPartition(topic_name, 0, 1)], asynchronous=False)
        times = []
        for k in range(7):
            time.sleep(0.13)  # somewhere in the middle of a parked Fetch
            t0 = time.monotonic()
            c.commit(offsets=[TopicPartition(topic_name, 0, 2 + k)], asynchronous=False)
            times.append(time.monotonic() - t0)
        assert c.committed([TopicPartition(topic_name, 0)], timeout=10)[0].offset == 8
    finally:
        c.close()
    assert statistics.median(times) < 0.15, [round(t, 3) for t in times]


@pytest.mark.timeout(120)
def test_a_dead_coordinator_is_replaced_at_once(tmp_path):
    """The coordinator's broker goes down: the member looks the coordinator up again as
    soon as its connection fails, so a commit reaches the new one within a second or two
    (it waited for the dead broker before, and failed with "group coordinator not
    available" after its timeout)."""
    from kafka_client.testing import Cluster
    with Cluster(brokers=3, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("dead-coord", partitions=1, replication_factor=3)
        with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as p:
            for i in range(10):
                p.produce("dead-coord", b"%d" % i, partition=0)
            assert p.flush(10) == 0
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                      "group.id": "dead-coord-group", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50})
        try:
            c.assign([TopicPartition("dead-coord", 0)])
            seen = 0
            deadline = time.monotonic() + 30
            while seen < 10:
                assert time.monotonic() < deadline
                seen += len([m for m in c.consume(10, 0.2) if m.error() is None])
            c.commit(asynchronous=False)
            old = cluster.coordinator(group="dead-coord-group")
            cluster.stop_broker(old)
            assert cluster.coordinator(group="dead-coord-group") not in (old, -1)
            start = time.monotonic()
            c.commit(offsets=[TopicPartition("dead-coord", 0, 5)], asynchronous=False)
            assert time.monotonic() - start < 5
            assert c.committed([TopicPartition("dead-coord", 0)], timeout=10)[0].offset == 5
        finally:
            c.close()
