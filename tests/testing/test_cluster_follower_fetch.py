"""Fetching from the closest replica (KIP-392) in the test cluster: brokers in racks,
Metadata carrying them, a leader with the rack-aware replica selector pointing a consumer
at the in-sync follower in its rack, followers serving consumers up to their own high
watermark (and last stable offset) with Kafka's errors, and librdkafka's ``client.rack``
consumer reading a whole partition from a follower."""
from __future__ import annotations

import time

import pytest

from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    DescribeConfigsRequest,
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
)
from kafka_proto.records import RecordBatchBuilder, read_batches

from kafka_client.testing import Cluster

from rawclient import RawClient  # tests/testing/rawclient.py

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
RACKS = ["a", "b", "c"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(brokers=3, racks=RACKS, data_dir=str(tmp_path_factory.mktemp("near")),
                 broker_config={"replica.selector.class": SELECTOR}) as c:
        yield c


def batch(values):
    b = RecordBatchBuilder()
    now = int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(v, key=b"k", timestamp=now + i)
    return b.build()


def produce(client, topic, values, acks=-1, partition=0):
    resp = client.request(ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=batch(values))])]), 9)
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.NONE, ErrorCode(p.error_code).name
    return p.base_offset


def fetch_request(topic, offset, rack="", epoch=-1, isolation=0, max_wait_ms=0,
                  min_bytes=1, partition=0):
    return FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20,
        isolation_level=isolation, session_id=0, session_epoch=-1, rack_id=rack,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
            partition=partition, current_leader_epoch=epoch, fetch_offset=offset,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[])


def fetch(client, topic, offset, version=12, **kw):
    resp = client.request(fetch_request(topic, offset, **kw), version)
    assert resp.error_code == ErrorCode.NONE
    return resp.responses[0].partitions[0]


def offsets(data):
    return [o for b in read_batches(data.records) for o in range(b.base_offset,
                                                                  b.last_offset + 1)]


def wait_in_sync(cluster, topic):
    state = cluster.wait_in_sync(topic)
    # Every follower also knows the leader's high watermark (it comes with the next
    # fetch answer after the one that made it advance).
    return cluster.wait_for(lambda: all(
        r.high_watermark == r.log_end_offset
        for r in cluster.describe_topic(topic).partitions[0].replica_logs.values()) and state,
        what=f"{topic}: every replica knows the high watermark")


def test_metadata_and_describe_configs_carry_each_brokers_rack(cluster):
    assert [b.rack for b in cluster.brokers] == RACKS
    assert cluster.rack(2) == "b"
    with RawClient(cluster.address(1)) as c:
        for version in (1, 12):
            resp = c.request(MetadataRequest(topics=[]), version)
            assert {b.node_id: b.rack for b in resp.brokers} == {1: "a", 2: "b", 3: "c"}
        resp = c.request(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=4, resource_name="3",
            configuration_keys=["broker.rack", "replica.selector.class"])],
            include_synonyms=False, include_documentation=False), 4)
        values = {e.name: e.value for e in resp.results[0].configs}
        assert values == {"broker.rack": "c", "replica.selector.class": SELECTOR}


def test_racks_must_match_the_brokers():
    with pytest.raises(ValueError):
        Cluster(brokers=3, racks=["a", "b"], start=False)


def test_confluent_consumer_in_a_followers_rack_reads_from_the_follower(cluster):
    ck = pytest.importorskip("confluent_kafka")
    cluster.create_topic("cf-near", assignments=[[1, 2, 3]])   # leader 1 in rack a
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                     "linger.ms": 5})
    for i in range(2000):
        p.produce("cf-near", b"v%d" % i, partition=0)
    assert p.flush(30) == 0
    since = cluster.clear_request_log()
    consumer = ck.Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                            "group.id": "cf-near", "client.id": "rack-b-consumer",
                            "client.rack": "b", "enable.auto.commit": False,
                            "fetch.wait.max.ms": 100})
    got = []
    try:
        consumer.assign([ck.TopicPartition("cf-near", 0, 0)])
        deadline = time.monotonic() + 20
        while len(got) < 2500:
            assert time.monotonic() < deadline, f"{len(got)} messages"
            for m in consumer.consume(500, 0.2):
                assert m.error() is None, m.error()
                got.append(m.value())
            if len(got) == 2000:
                # More while it reads: the follower's waiting fetch is woken by its high
                # watermark moving.
                for i in range(2000, 2500):
                    p.produce("cf-near", b"v%d" % i, partition=0)
                assert p.flush(30) == 0
    finally:
        consumer.close()
    assert got == [b"v%d" % i for i in range(2500)]
    fetches = [e for e in cluster.request_log(since, api="Fetch")
               if e.client_id == "rack-b-consumer" and "partitions" in e.details]
    served = {b: sum(e.details["bytes"] for e in fetches if e.broker == b) for b in (1, 2, 3)}
    assert served[1] == 0 and served[3] == 0 and served[2] > 0, served
    pointed = [e for e in fetches if e.broker == 1]
    assert pointed and all(d["preferred_read_replica"] == 2 and d["replica"] == "leader"
                           for e in pointed for d in e.details["partitions"])
    assert all(e.details["rack_id"] == "b" for e in fetches)
    assert {d["replica"] for e in fetches if e.broker == 2 for d in e.details["partitions"]} \
        == {"follower"}
    del p
