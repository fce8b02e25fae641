"""Replication in the test cluster: followers copy the leader's segments byte for byte by
Fetch, the high watermark is what every in-sync replica has, acks=all waits for the ISR,
min.insync.replicas is enforced, a stopped broker leaves the ISRs and catches up when it
is back, and a replica that diverged from a new leader truncates to it (leader epochs)."""
from __future__ import annotations

import time

import pytest

from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    DeleteRecordsRequest,
    FetchRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
)
from kafka_proto.records import RecordBatchBuilder, read_batches

from kafka_client import Consumer, Producer, TopicPartition
from kafka_client.testing import Cluster

from rawclient import RawClient  # tests/testing/rawclient.py

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def batch(values):
    b = RecordBatchBuilder()
    now = int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(v, key=b"k", timestamp=now + i)
    return b.build()


def produce(client, topic, values, acks=-1, partition=0, timeout_ms=5000):
    resp = client.request(ProduceRequest(acks=acks, timeout_ms=timeout_ms, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=batch(values))])]), 9)
    p = resp.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def segment_bytes(cluster, topic, partition, broker):
    out = b""
    for path in cluster.segment_files(topic, partition, broker):
        with open(path, "rb") as f:
            out += f.read()
    return out


def test_followers_hold_the_leaders_segments_byte_for_byte(kafka_cluster):
    c = kafka_cluster
    c.create_topic("copies", partitions=2, replication_factor=3,
                   config={"segment.bytes": 1500})
    for p in (0, 1):
        with RawClient(c.address(c.leader("copies", p))) as client:
            for i in range(40):
                assert produce(client, "copies", [b"m%d-%d" % (i, j) for j in range(5)],
                               partition=p) == (ErrorCode.NONE, i * 5)
    state = c.wait_in_sync("copies")
    for p in (0, 1):
        part = state.partitions[p]
        assert part.high_watermark == 200
        leader_bytes = segment_bytes(c, "copies", p, part.leader)
        assert len(c.segment_files("copies", p, part.leader)) > 2   # rolled
        for broker in part.replicas:
            assert segment_bytes(c, "copies", p, broker) == leader_bytes
            assert part.replica_logs[broker].segments == part.replica_logs[part.leader].segments
        offsets = [b.base_offset for b in read_batches(leader_bytes)]
        assert offsets == list(range(0, 200, 5))
        assert {b.partition_leader_epoch for b in read_batches(leader_bytes)} == \
            {part.leader_epoch}


def test_acks_all_min_insync_and_a_broker_that_comes_back(kafka_cluster):
    c = kafka_cluster
    c.create_topic("isr", partitions=1, replication_factor=3,
                   config={"min.insync.replicas": 2})
    leader = c.leader("isr", 0)
    followers = [b for b in (1, 2, 3) if b != leader]
    with RawClient(c.address(leader)) as client:
        assert produce(client, "isr", [b"a"]) == (ErrorCode.NONE, 0)
        c.stop_broker(followers[0])
        state = c.describe_topic("isr").partitions[0]
        assert sorted(state.isr) == sorted([leader, followers[1]])
        # Two in-sync replicas: acks=all still works.
        assert produce(client, "isr", [b"b"]) == (ErrorCode.NONE, 1)
        c.stop_broker(followers[1])
        assert c.describe_topic("isr").partitions[0].isr == [leader]
        # Below min.insync.replicas: acks=all refused before the append; acks=1 accepted.
        assert produce(client, "isr", [b"c"]) == (ErrorCode.NOT_ENOUGH_REPLICAS, -1)
        assert produce(client, "isr", [b"d"], acks=1) == (ErrorCode.NONE, 2)
        c.start_broker(followers[0])
        c.start_broker(followers[1])
        state = c.wait_in_sync("isr")
        assert produce(client, "isr", [b"e"]) == (ErrorCode.NONE, 3)
    state = c.wait_in_sync("isr")
    leader_bytes = segment_bytes(c, "isr", 0, leader)
    for broker in followers:
        assert segment_bytes(c, "isr", 0, broker) == leader_bytes
    values = [r.value for b in read_batches(leader_bytes) for r in b]
    assert values == [b"a", b"b", b"d", b"e"]


def test_acks_all_waits_for_the_in_sync_followers(kafka_cluster):
    c = kafka_cluster
    c.create_topic("wait", partitions=1, replication_factor=3)
    leader = c.leader("wait", 0)
    # Followers' fetch answers from the leader are delayed: acks=all must wait for them.
    # 1.5 s (was 0.6 s): far from a plain answer, which a loaded machine can stretch
    # past 0.5 s.
    c.set_latency(1.5, broker=leader, apis=["Fetch"])
    with RawClient(c.address(leader)) as client:
        start = time.monotonic()
        assert produce(client, "wait", [b"x"], acks=1) == (ErrorCode.NONE, 0)
        fast = time.monotonic() - start
        start = time.monotonic()
        assert produce(client, "wait", [b"y"], acks=-1) == (ErrorCode.NONE, 1)
        slow = time.monotonic() - start
        assert fast < 1.4 <= slow, (fast, slow)
        # A produce timeout shorter than the replication: REQUEST_TIMED_OUT (but appended).
        c.set_latency(2.0, broker=leader, apis=["Fetch"])
        time.sleep(1.6)    # the fetches delayed by 1.5 s are answered by now
        assert produce(client, "wait", [b"z"], acks=-1, timeout_ms=200) == \
            (ErrorCode.REQUEST_TIMED_OUT, -1)
    c.clear_faults()
    state = c.wait_in_sync("wait", timeout=15)
    assert state.partitions[0].high_watermark == 3


def test_a_diverged_replica_truncates_to_the_new_leader(kafka_cluster):
    c = kafka_cluster
    c.create_topic("diverge", partitions=1, replication_factor=3)
    old_leader = c.leader("diverge", 0)
    with RawClient(c.address(old_leader)) as client:
        assert produce(client, "diverge", [b"committed"]) == (ErrorCode.NONE, 0)
        c.wait_in_sync("diverge")
        # Followers stop receiving: the next acks=1 write stays on the old leader only.
        c.set_latency(30, broker=old_leader, apis=["Fetch"])
        time.sleep(0.3)
        assert produce(client, "diverge", [b"lost-1", b"lost-2"], acks=1) == (ErrorCode.NONE, 1)
    c.stop_broker(old_leader)
    c.clear_faults()
    new_leader = c.leader("diverge", 0)
    assert new_leader != old_leader
    with RawClient(c.address(new_leader)) as client:
        assert produce(client, "diverge", [b"new-1"]) == (ErrorCode.NONE, 1)
        # OffsetForLeaderEpoch: epoch 0 ended at offset 1 on the new leader.
        resp = client.request(OffsetForLeaderEpochRequest(topics=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic="diverge", partitions=[
                OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                    partition=0, current_leader_epoch=-1, leader_epoch=0)])]), 4)
        p = resp.topics[0].partitions[0]
        assert (p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 1)
    c.start_broker(old_leader)
    state = c.wait_in_sync("diverge", timeout=15)
    reference = segment_bytes(c, "diverge", 0, new_leader)
    for broker in (1, 2, 3):
        assert segment_bytes(c, "diverge", 0, broker) == reference
    values = [r.value for b in read_batches(reference) for r in b]
    assert values == [b"committed", b"new-1"]
    assert state.partitions[0].leader_epoch >= 1


def test_a_diverged_followers_fetch_offset_does_not_count_as_replicated(kafka_cluster):
    # A follower whose log diverged from the new leader fetches from past the leader's
    # log (its own end, in the old epoch). As in Kafka, that fetch is answered with the
    # diverging epoch and does not count as the follower having those offsets: else an
    # acks=all write at those offsets is acknowledged before the follower has it, and lost
    # when the follower leads next (found by a soak run: 3,000 acknowledged messages gone
    # from every replica).
    c = kafka_cluster
    old, new = 1, 2
    c.create_topic("stale-fetch", assignments=[[old, new]],
                   config={"min.insync.replicas": 2})
    with RawClient(c.address(old)) as client:
        assert produce(client, "stale-fetch", [b"committed"]) == (ErrorCode.NONE, 0)
        c.wait_in_sync("stale-fetch")
        c.set_latency(30, broker=old, apis=["Fetch"])   # the follower gets nothing more
        time.sleep(0.3)
        assert produce(client, "stale-fetch", [b"lost-1", b"lost-2"], acks=1) == \
            (ErrorCode.NONE, 1)
    c.clear_faults()
    # The new leader's answers to the old one (now its follower) take 2 s: its first
    # fetch, from offset 3 in epoch 0, arrives at once; the truncation comes 2 s later.
    c.set_latency(2, broker=new, apis=["Fetch"])
    c.move_leader("stale-fetch", 0, to=new)
    time.sleep(0.5)
    with RawClient(c.address(new)) as client:
        started = time.monotonic()
        code, _ = produce(client, "stale-fetch", [b"new-1"], timeout_ms=1000)
        # Not acknowledged while the follower does not have it.
        assert code == ErrorCode.REQUEST_TIMED_OUT, (code, time.monotonic() - started)
    c.clear_faults()
    state = c.wait_in_sync("stale-fetch", timeout=15)
    assert state.partitions[0].high_watermark == 2
    for broker in (old, new):
        values = [r.value for b in read_batches(segment_bytes(c, "stale-fetch", 0, broker))
                  for r in b]
        assert values == [b"committed", b"new-1"], (broker, values)


def test_followers_catch_up_with_an_empty_log_led_again_by_its_first_leader(kafka_cluster):
    # The first leader of an empty partition stops, the leadership moves on twice, and it
    # leads again: its followers (each of which led an epoch meanwhile) used to be told
    # on every fetch that their log diverged at offset 0, never caught up, and acks=all
    # writes timed out (found by a Spark soak run: a write task stuck for minutes).
    c = kafka_cluster
    c.create_topic("led-again", partitions=1, replication_factor=3,
                   config={"min.insync.replicas": 2})
    first = c.leader("led-again", 0)
    c.stop_broker(first)
    c.move_leader("led-again", 0, to=next(b for b in (1, 2, 3)
                                          if b not in (first, c.leader("led-again", 0))))
    c.start_broker(first)
    c.wait_in_sync("led-again", timeout=15)
    c.move_leader("led-again", 0, to=first)
    with RawClient(c.address(first)) as client:
        assert produce(client, "led-again", [b"a", b"b"]) == (ErrorCode.NONE, 0)
    state = c.wait_in_sync("led-again", timeout=15)
    p = state.partitions[0]
    assert p.leader == first and sorted(p.isr) == [1, 2, 3]
    assert {b: r.log_end_offset for b, r in p.replica_logs.items()} == {1: 2, 2: 2, 3: 2}


def test_a_follower_that_led_an_epoch_without_records_catches_up_with_the_next_leader(
        kafka_cluster):
    # A broker leads briefly and writes nothing (its epoch starts at its log end), then the
    # leadership moves on: the new leader never had that epoch and answers the follower's
    # fetches with a divergence at the follower's own log end. Truncating there cut no
    # record, the empty epoch stayed its latest, the same answer came on every fetch: the
    # follower never caught up, left the ISR, and acks=all writes stopped once another
    # broker went down (found by tools/soak.py eos seed 88: a transaction stuck 60 s).
    c = kafka_cluster
    c.create_topic("empty-epoch", partitions=1, replication_factor=3,
                   config={"min.insync.replicas": 2})
    first = c.leader("empty-epoch", 0)
    with RawClient(c.address(first)) as client:
        assert produce(client, "empty-epoch", [b"a", b"b"]) == (ErrorCode.NONE, 0)
    c.wait_in_sync("empty-epoch")
    brief, last = [b for b in (1, 2, 3) if b != first]
    c.move_leader("empty-epoch", 0, to=brief)
    c.move_leader("empty-epoch", 0, to=last)
    with RawClient(c.address(last)) as client:
        assert produce(client, "empty-epoch", [b"c"]) == (ErrorCode.NONE, 2)
    state = c.wait_in_sync("empty-epoch", timeout=15)
    p = state.partitions[0]
    assert p.leader == last and sorted(p.isr) == [1, 2, 3]
    assert {b: r.log_end_offset for b, r in p.replica_logs.items()} == {1: 3, 2: 3, 3: 3}


def test_an_empty_follower_starting_inside_a_batch_takes_the_whole_batch(kafka_cluster):
    # A follower that was down while a batch of 10 was written and DeleteRecords moved
    # the log start to 5 comes back empty: out of range at 0, it starts its log at 5, and
    # the leader answers its fetch with the batch 0-9. As Kafka's follower does, it starts
    # the log at the batch instead (it refused the batch on every fetch and never caught
    # up: found by an admin soak probe).
    c = kafka_cluster
    c.create_topic("inside", partitions=1, replication_factor=3)
    leader = c.leader("inside", 0)
    down = next(b for b in (1, 2, 3) if b != leader)
    c.stop_broker(down)
    with RawClient(c.address(leader)) as client:
        assert produce(client, "inside", [b"%d" % i for i in range(10)], acks=1) == \
            (ErrorCode.NONE, 0)
        # below the high watermark only: once the stopped replica has left the ISR
        c.wait_for(lambda: c.partition("inside", 0).high_watermark == 10, timeout=30)
        resp = client.request(DeleteRecordsRequest(timeout_ms=5000, topics=[
            DeleteRecordsRequest.DeleteRecordsTopic(name="inside", partitions=[
                DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0,
                                                            offset=5)])]), 2)
        assert resp.topics[0].partitions[0].error_code == ErrorCode.NONE
    c.start_broker(down)
    state = c.wait_in_sync("inside", timeout=15)
    logs = state.partitions[0].replica_logs
    assert logs[down].log_end_offset == logs[leader].log_end_offset == 10
    assert logs[down].log_start_offset == 5


def test_a_transaction_marker_its_leader_alone_had_is_written_to_the_next_leader(
        kafka_cluster):
    # The ABORT marker reaches the leader, whose follower gets nothing more (its fetches
    # held), and the leader stops: the coordinator writes the marker again to the new
    # leader, as Kafka's retries a marker write answered NOT_LEADER_OR_FOLLOWER. (It was
    # lost: the aborted record was then read as part of the producer's next transaction,
    # committed with it; soak eos seed 139: aborted output read twice, committed output
    # read as aborted.)
    c = kafka_cluster
    leader, follower, tid = 1, 2, "marker-moves"
    c.create_topic("markers", assignments=[[leader, follower]])
    c.move_coordinator(3, transactional_id=tid)
    p = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": tid})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("markers", b"aborted", partition=0)
        assert p.flush(30) == 0
        c.wait_in_sync("markers")
        c.set_latency(30, broker=leader, apis=["Fetch"])   # the follower gets nothing more
        time.sleep(0.3)
        p.abort_transaction(30)
        c.stop_broker(leader)
        c.clear_faults()
        assert c.leader("markers", 0) == follower
        p.begin_transaction()
        p.produce("markers", b"committed", partition=0)
        p.commit_transaction(30)
    finally:
        p.close()
    reader = Consumer({"bootstrap.servers": c.bootstrap_servers,
                       "isolation.level": "read_committed", "enable.partition.eof": True})
    reader.assign([TopicPartition("markers", 0, 0)])
    values, deadline = [], time.monotonic() + 20
    while time.monotonic() < deadline:
        got = reader.consume(100, 0.5)
        values += [m.value() for m in got if m.error() is None]
        if any(m.error() is not None for m in got) and values:
            break
    reader.close()
    assert values == [b"committed"], values


def test_leader_moves_fence_the_old_leader(kafka_cluster):
    c = kafka_cluster
    c.create_topic("moves", partitions=1, replication_factor=3)
    first = c.partition("moves", 0)
    new = c.move_leader("moves", 0)
    moved = c.partition("moves", 0)
    assert new != first.leader and moved.leader == new
    assert moved.leader_epoch == first.leader_epoch + 1
    assert c.move_leader("moves", 0, to=first.leader) == first.leader
    with RawClient(c.address(new)) as client:
        assert produce(client, "moves", [b"x"]) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
    with RawClient(c.address(first.leader)) as client:
        resp = client.request(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1,
                                           max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
                                               topic="moves", partitions=[
                                                   FetchRequest.FetchPartition(
                                                       partition=0, fetch_offset=0,
                                                       current_leader_epoch=moved.leader_epoch,
                                                       partition_max_bytes=1 << 20)])]), 12)
        assert resp.responses[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    with pytest.raises(Exception) as info:
        c.move_leader("moves", 0, to=99)
    assert info.value.code == "ELIGIBLE_LEADERS_NOT_AVAILABLE"


def test_a_restarted_broker_reloads_its_logs_from_disk(tmp_path):
    with Cluster(brokers=1, data_dir=str(tmp_path / "c")) as c:
        c.create_topic("persist", partitions=1, replication_factor=1,
                       config={"segment.bytes": 500})
        with RawClient(c.address(1)) as client:
            for i in range(20):
                assert produce(client, "persist", [b"r%02d" % i]) == (ErrorCode.NONE, i)
        before = segment_bytes(c, "persist", 0, 1)
        c.restart_broker(1)
        state = c.describe_topic("persist").partitions[0]
        assert state.replica_logs[1].log_end_offset == 20
        assert state.high_watermark == 20
        with RawClient(c.address(1)) as client:
            assert produce(client, "persist", [b"after"]) == (ErrorCode.NONE, 20)
        assert segment_bytes(c, "persist", 0, 1).startswith(before)
