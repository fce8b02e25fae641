"""Fetching from the closest replica (KIP-392) on the test cluster: brokers in racks a, b
and c, the leaders with Kafka's rack-aware replica selector. Our consumer with
``client.rack=b`` reads from the follower in rack b, as the leader tells it, and goes
back to the leader when that follower goes away, reading every message once."""
from __future__ import annotations

import time

import pytest

from kafka_client import Consumer, KafkaError, Producer, TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@pytest.fixture
def cluster(tmp_path):
    from kafka_client.testing import Cluster
    with Cluster(brokers=3, racks=["a", "b", "c"], data_dir=str(tmp_path),
                 broker_config={"replica.selector.class": SELECTOR}) as c:
        c.create_topic("near", assignments=[[1, 2, 3]])     # leader 1, in rack a
        yield c


def produce(cluster, start, count):
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                   "linger.ms": 5}) as p:
        for i in range(start, start + count):
            p.produce("near", b"v%d" % i, partition=0)
        assert p.flush(30) == 0


def served_by(cluster, since, client_id):
    """Broker -> bytes of records it served that client's Fetch requests."""
    fetches = [e for e in cluster.request_log(since, api="Fetch")
               if e.client_id == client_id and "partitions" in e.details]
    return {b: sum(e.details["bytes"] for e in fetches if e.broker == b) for b in (1, 2, 3)}


def read(consumer, values, until, timeout=30):
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, f"{len(values)} messages read"
        for m in consumer.consume(500, 0.1):
            if m.error() is not None:
                assert m.error().code() in (KafkaError._TRANSPORT,), m.error()
                continue
            values.append(m.value())


def test_a_consumer_reads_from_the_replica_in_its_rack(cluster):
    produce(cluster, 0, 2000)
    since = cluster.clear_request_log()
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "rack-b",
                  "client.rack": "b", "fetch.wait.max.ms": 100})
    got = []
    try:
        c.assign([TopicPartition("near", 0, 0)])
        read(c, got, lambda: len(got) >= 2000)
        produce(cluster, 2000, 500)          # the follower's waiting fetch wakes for these
        read(c, got, lambda: len(got) >= 2500)
    finally:
        c.close()
    assert got == [b"v%d" % i for i in range(2500)]
    served = served_by(cluster, since, "rack-b")
    assert served[1] == 0 and served[3] == 0 and served[2] > 0, served
    fetches = [e for e in cluster.request_log(since, api="Fetch") if e.client_id == "rack-b"]
    assert all(e.details.get("rack_id") == "b" for e in fetches)


def test_without_a_rack_or_in_the_leaders_rack_the_leader_serves(cluster):
    produce(cluster, 0, 500)
    for client_id, rack in (("no-rack", None), ("rack-a", "a")):
        since = cluster.clear_request_log()
        conf = {"bootstrap.servers": cluster.bootstrap_servers, "client.id": client_id,
                "fetch.wait.max.ms": 100}
        if rack:
            conf["client.rack"] = rack
        c = Consumer(conf)
        got = []
        try:
            c.assign([TopicPartition("near", 0, 0)])
            read(c, got, lambda: len(got) >= 500)
        finally:
            c.close()
        assert got == [b"v%d" % i for i in range(500)]
        served = served_by(cluster, since, client_id)
        assert served[2] == 0 and served[3] == 0 and served[1] > 0, (client_id, served)


def test_when_the_replica_goes_away_the_leader_takes_over(cluster):
    produce(cluster, 0, 1000)
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "rack-b2",
                  "client.rack": "b", "fetch.wait.max.ms": 100})
    got = []
    try:
        c.assign([TopicPartition("near", 0, 0)])
        read(c, got, lambda: len(got) >= 1000)
        # Counted from before the stop: a Fetch the consumer sends the leader as soon as
        # the replica goes away can be logged before a later mark.
        since = cluster.clear_request_log()
        cluster.stop_broker(2)
        produce(cluster, 1000, 1000)
        read(c, got, lambda: len(got) >= 2000)
        served = served_by(cluster, since, "rack-b2")
        assert served[1] > 0 and served[2] == 0, served
        cluster.start_broker(2)
        cluster.wait_in_sync("near")
        produce(cluster, 2000, 500)
        read(c, got, lambda: len(got) >= 2500)
    finally:
        c.close()
    assert got == [b"v%d" % i for i in range(2500)]


def test_a_replica_gone_while_no_fetch_waits_there_is_left_for_the_leader(cluster):
    """With no Fetch in flight to the replica when it stops (the partition paused), no
    failed answer sends the consumer back to the leader: a failed connection attempt to
    the replica must (it used to wait for the metadata's refresh, minutes)."""
    produce(cluster, 0, 500)
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "rack-b3",
                  "client.rack": "b", "fetch.wait.max.ms": 100})
    got = []
    tp = TopicPartition("near", 0)
    try:
        c.assign([TopicPartition("near", 0, 0)])
        read(c, got, lambda: len(got) >= 500)
        c.pause([tp])
        time.sleep(0.5)          # the Fetch waiting at the replica comes back empty
        since = cluster.clear_request_log()
        cluster.stop_broker(2)
        produce(cluster, 500, 500)
        c.resume([tp])
        read(c, got, lambda: len(got) >= 1000, timeout=15)
        served = served_by(cluster, since, "rack-b3")
        assert served[1] > 0 and served[2] == 0, served
    finally:
        c.close()
    assert got == [b"v%d" % i for i in range(1000)]
