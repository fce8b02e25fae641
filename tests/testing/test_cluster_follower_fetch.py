"""Fetching from the closest replica (KIP-392) in the test cluster: brokers in racks,
Metadata carrying them, a leader with the rack-aware replica selector pointing a consumer
at the in-sync follower in its rack, followers serving consumers up to their own high
watermark (and last stable offset) with Kafka's errors, and librdkafka's ``client.rack``
consumer reading a whole partition from a follower."""
from __future__ import annotations

import time
import uuid

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


def test_the_leader_points_a_client_at_the_in_sync_follower_in_its_rack(cluster):
    cluster.create_topic("near", assignments=[[1, 2, 3]])     # leader 1 in rack a
    with RawClient(cluster.address(1)) as c:
        produce(c, "near", [b"m%d" % i for i in range(10)])
        wait_in_sync(cluster, "near")
        since = cluster.clear_request_log()
        for rack, replica in (("b", 2), ("c", 3)):
            # Answered at once, whatever the wait and size asked for (20 s: the bound,
            # well under it, is out of a loaded machine's reach).
            start = time.monotonic()
            d = fetch(c, "near", 0, rack=rack, max_wait_ms=20000, min_bytes=1 << 20)
            assert time.monotonic() - start < 8
            assert (d.error_code, d.preferred_read_replica, len(d.records or b"")) == \
                (ErrorCode.NONE, replica, 0)
            assert (d.high_watermark, d.last_stable_offset, d.log_start_offset) == (10, 10, 0)
        # The leader's own rack, an unknown rack, no rack, Fetch before v11: the leader
        # serves, and names no preferred replica.
        for rack, version in (("a", 12), ("x", 12), ("", 12), ("b", 10)):
            d = fetch(c, "near", 0, version=version, rack=rack if version >= 11 else "")
            assert d.preferred_read_replica == -1
            assert offsets(d) == list(range(10))
        # Topic ids (v13+) work the same.
        topic_id = cluster.describe_topic("near").topic_id
        req = fetch_request("near", 0, rack="b")
        req.topics[0].topic = ""
        req.topics[0].topic_id = uuid.UUID(topic_id)
        resp = c.request(req, 17)
        assert resp.responses[0].partitions[0].preferred_read_replica == 2
        # The epoch check applies before the choice; an offset no follower has is the
        # leader's to answer (out of range here).
        epoch = cluster.partition("near", 0).leader_epoch
        d = fetch(c, "near", 0, rack="b", epoch=epoch + 1)
        assert (d.error_code, d.preferred_read_replica) == (ErrorCode.UNKNOWN_LEADER_EPOCH, -1)
        d = fetch(c, "near", 0, rack="b", epoch=epoch)
        assert (d.error_code, d.preferred_read_replica) == (ErrorCode.NONE, 2)
        d = fetch(c, "near", 11, rack="b")
        assert (d.error_code, d.preferred_read_replica) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    log = cluster.request_log(since, api="Fetch")
    first = log[0]
    assert first.broker == 1 and first.details["rack_id"] == "b"
    assert first.details["partitions"] == [{
        "topic": "near", "partition": 0, "fetch_offset": 0, "error": 0, "replica": "leader",
        "high_watermark": 10, "bytes": 0, "preferred_read_replica": 2}]


def test_only_an_in_sync_follower_is_preferred(cluster):
    cluster.create_topic("near-isr", assignments=[[1, 2, 3]])
    with RawClient(cluster.address(1)) as c:
        produce(c, "near-isr", [b"x"])
        wait_in_sync(cluster, "near-isr")
        cluster.stop_broker(2)
        try:
            assert 2 not in cluster.partition("near-isr", 0).isr
            d = fetch(c, "near-isr", 0, rack="b")
            assert (d.preferred_read_replica, offsets(d)) == (-1, [0])
        finally:
            cluster.start_broker(2)
        wait_in_sync(cluster, "near-isr")
        assert fetch(c, "near-isr", 0, rack="b").preferred_read_replica == 2


def test_a_follower_serves_records_up_to_its_own_high_watermark(cluster):
    cluster.create_topic("far", assignments=[[1, 2, 3]])
    with RawClient(cluster.address(1)) as leader, RawClient(cluster.address(2)) as follower:
        produce(leader, "far", [b"a%d" % i for i in range(10)])
        wait_in_sync(cluster, "far")
        since = cluster.clear_request_log()
        d = fetch(follower, "far", 0, rack="b")
        assert (d.error_code, offsets(d), d.high_watermark, d.preferred_read_replica) == \
            (ErrorCode.NONE, list(range(10)), 10, -1)
        entry = cluster.request_log(since, api="Fetch")[0]
        assert entry.broker == 2 and entry.details["partitions"][0]["replica"] == "follower"
        assert entry.details["bytes"] > 0

        # The follower gets records before it learns the high watermark that covers
        # them: slow the leader's Fetch answers (the followers' too) and catch it there.
        cluster.set_latency(1.0, broker=1, apis=["Fetch"])
        try:
            produce(leader, "far", [b"b%d" % i for i in range(5)], acks=1)

            def follower_ahead_of_its_hw():
                r = cluster.describe_topic("far").partitions[0].replica_logs[2]
                return r.log_end_offset == 15 and r.high_watermark == 10
            cluster.wait_for(follower_ahead_of_its_hw, 5, "the follower's records")
            d = fetch(follower, "far", 0)
            assert (d.high_watermark, offsets(d)) == (10, list(range(10)))
            # Between its high watermark and its log end: no records, no error.
            for offset in (10, 12, 15):
                d = fetch(follower, "far", offset)
                assert (d.error_code, d.records or b"", d.high_watermark) == \
                    (ErrorCode.NONE, b"", 10)
            # Beyond its log end: out of range (the client goes back to the leader).
            d = fetch(follower, "far", 16)
            assert d.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
            assert (d.high_watermark, d.log_start_offset) == (10, 0)
        finally:
            cluster.clear_faults()
        wait_in_sync(cluster, "far")
        assert offsets(fetch(follower, "far", 10)) == list(range(10, 15))


def test_a_waiting_fetch_at_a_follower_gets_records_once_its_high_watermark_moves(tmp_path):
    # Followers' fetches wait 5 s at their leader when there is nothing new: a follower
    # learns a new high watermark within a round trip only because the leader answers
    # at once when its high watermark passed the one it last sent that follower.
    with Cluster(brokers=3, racks=RACKS, data_dir=str(tmp_path),
                 broker_config={"replica.selector.class": "rack",
                                "replica.fetch.wait.max.ms": 5000}) as cluster:
        cluster.create_topic("wake", assignments=[[1, 2, 3]])
        with RawClient(cluster.address(1)) as leader, \
                RawClient(cluster.address(2)) as follower:
            produce(leader, "wake", [b"a"])
            wait_in_sync(cluster, "wake")
            follower.send(fetch_request("wake", 1, max_wait_ms=10_000), 12)
            time.sleep(0.2)
            start = time.monotonic()
            produce(leader, "wake", [b"b"])
            d = follower.receive(FetchRequest.API_KEY, 12).responses[0].partitions[0]
            assert offsets(d) == [1] and d.high_watermark == 2
            assert time.monotonic() - start < 2.5


def test_follower_errors_as_kafka_answers_them(cluster):
    cluster.create_topic("pair", assignments=[[1, 2]])        # broker 3 holds no replica
    with RawClient(cluster.address(1)) as c:
        produce(c, "pair", [b"p%d" % i for i in range(3)])
    cluster.move_leader("pair", 0, to=2)
    cluster.move_leader("pair", 0, to=1)
    epoch = cluster.partition("pair", 0).leader_epoch
    assert epoch == 2
    wait_in_sync(cluster, "pair")
    with RawClient(cluster.address(3)) as other:
        d = fetch(other, "pair", 0, rack="c")
        assert d.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (d.current_leader.leader_id, d.current_leader.leader_epoch) == (1, 2)
        d = fetch(other, "no-such-topic", 0)
        assert d.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with RawClient(cluster.address(2)) as f:
        assert offsets(fetch(f, "pair", 0, epoch=epoch)) == [0, 1, 2]
        assert fetch(f, "pair", 0, epoch=epoch - 1).error_code == ErrorCode.FENCED_LEADER_EPOCH
        assert fetch(f, "pair", 0, epoch=epoch + 1).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
        # Before v11 only the leader serves consumers.
        assert fetch(f, "pair", 0, version=10).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # ListOffsets stays with the leader.
        resp = f.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name="pair", partitions=[
                ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1,
                                                        current_leader_epoch=-1)])]), 7)
        assert resp.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_read_committed_from_a_follower_stops_at_its_last_stable_offset(cluster):
    ck = pytest.importorskip("confluent_kafka")
    cluster.create_topic("near-txn", assignments=[[1, 2, 3]])
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                     "transactional.id": "near-txn"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce("near-txn", b"committed-%d" % i, partition=0)
    p.commit_transaction(30)                                   # 0-2, marker at 3
    p.begin_transaction()
    for i in range(2):
        p.produce("near-txn", b"open-%d" % i, partition=0)    # 4-5, open
    assert p.flush(30) == 0
    wait_in_sync(cluster, "near-txn")
    with RawClient(cluster.address(3)) as f:
        d = fetch(f, "near-txn", 0, isolation=1)
        assert (d.high_watermark, d.last_stable_offset) == (6, 4)
        assert offsets(d) == [0, 1, 2, 3]
        assert offsets(fetch(f, "near-txn", 0)) == list(range(6))
        p.abort_transaction(30)                                # marker at 6
        wait_in_sync(cluster, "near-txn")
        d = fetch(f, "near-txn", 4, isolation=1)
        assert (d.high_watermark, d.last_stable_offset) == (7, 7)
        assert offsets(d) == [4, 5, 6]
        assert [a.first_offset for a in d.aborted_transactions] == [4]
    del p


def test_without_a_selector_the_leader_serves_and_names_no_replica(tmp_path):
    with Cluster(brokers=3, racks=RACKS, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("plain", assignments=[[1, 2, 3]])
        with RawClient(cluster.address(1)) as c:
            produce(c, "plain", [b"x", b"y"])
            wait_in_sync(cluster, "plain")
            d = fetch(c, "plain", 0, rack="b", max_wait_ms=5000)
            assert (d.preferred_read_replica, offsets(d)) == (-1, [0, 1])
        # A follower still serves a consumer's Fetch v11+, as Kafka's do.
        with RawClient(cluster.address(2)) as f:
            assert offsets(fetch(f, "plain", 0, rack="b")) == [0, 1]
