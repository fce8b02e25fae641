"""The fault-injection API of the test cluster, checked on the wire with a bare client:
injected errors, latency, cut connections, broker stop and start, coordinator moves,
the request log, sendfile counters, retention and compaction through the cluster, and
``python -m kafka_client.testing`` with ``Cluster.attach``."""
from __future__ import annotations

import os
import re
import signal
import time

import pytest

from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    FetchRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    MetadataRequest,
    ProduceRequest,
)
from kafka_proto.records import RecordBatchBuilder, read_batches

from kafka_client.testing import Cluster, ClusterError

from cli_cluster import start_cli_cluster  # tests/testing/cli_cluster.py
from rawclient import RawClient  # tests/testing/rawclient.py

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def produce(client, topic, values, keys=None, timestamp=None, partition=0):
    b = RecordBatchBuilder()
    ts = timestamp if timestamp is not None else int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(v, key=keys[i] if keys else None, timestamp=ts + i)
    resp = client.request(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=b.build())])]), 9)
    p = resp.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def fetch_all(client, topic, partition=0, offset=0):
    """Every record from ``offset`` to the high watermark (a fetch answers from one
    segment at most, so this loops)."""
    out = []
    while True:
        resp = client.request(FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20,
            topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                partition=partition, fetch_offset=offset, partition_max_bytes=50 << 20)])]), 12)
        p = resp.responses[0].partitions[0]
        assert p.error_code == 0
        batches = list(read_batches(p.records))
        out.extend((r.offset, r.key, r.value) for b in batches for r in b if r.offset >= offset)
        if not batches:
            return out
        offset = batches[-1].next_offset


def test_injected_errors_answer_the_next_requests_then_stop(kafka_cluster):
    c = kafka_cluster
    c.create_topic("inject", partitions=1, replication_factor=3)
    leader = c.leader("inject", 0)
    c.inject_errors("Produce", ["NOT_ENOUGH_REPLICAS", ErrorCode.KAFKA_STORAGE_ERROR],
                    broker=leader)
    c.inject_errors("FindCoordinator", ["COORDINATOR_NOT_AVAILABLE"])   # any broker
    assert {e["api_key"] for e in c.pending_errors()} == {0, 10}
    with RawClient(c.address(leader)) as client:
        assert produce(client, "inject", [b"a"]) == (ErrorCode.NOT_ENOUGH_REPLICAS, -1)
        assert produce(client, "inject", [b"b"]) == (ErrorCode.KAFKA_STORAGE_ERROR, -1)
        assert produce(client, "inject", [b"c"]) == (ErrorCode.NONE, 0)
        # The refused batches were not written.
        assert fetch_all(client, "inject") == [(0, None, b"c")]
    other = [b for b in (1, 2, 3) if b != leader][0]
    with RawClient(c.address(other)) as client:
        first = client.request(FindCoordinatorRequest(key="g", key_type=0), 3)
        second = client.request(FindCoordinatorRequest(key="g", key_type=0), 3)
        assert first.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert second.error_code == ErrorCode.NONE and second.node_id in (1, 2, 3)
    assert c.pending_errors() == []
    log = c.request_log(api="Produce")
    assert [e.injected_error for e in log] == ["NOT_ENOUGH_REPLICAS", "KAFKA_STORAGE_ERROR", None]
    with pytest.raises(ClusterError):
        c.inject_errors("NoSuchApi", ["NONE"])
    with pytest.raises(ClusterError):
        c.inject_errors("Produce", ["NO_SUCH_ERROR"])


def test_executed_requests_with_replaced_answers(kafka_cluster):
    c = kafka_cluster
    c.create_topic("lost-ack", partitions=1, replication_factor=3)
    leader = c.leader("lost-ack", 0)
    c.inject_errors("Produce", ["REQUEST_TIMED_OUT"], broker=leader, executed=True)
    with RawClient(c.address(leader)) as client:
        assert produce(client, "lost-ack", [b"x"]) == (ErrorCode.REQUEST_TIMED_OUT, -1)
        assert fetch_all(client, "lost-ack") == [(0, None, b"x")]   # written all the same


def test_latency_delays_the_answers_of_one_broker(kafka_cluster):
    c = kafka_cluster
    # 1 s: far from a plain answer, which a loaded machine can stretch past 0.3 s
    c.set_latency(1.0, broker=2, apis=["Metadata"])
    with RawClient(c.address(2)) as slow, RawClient(c.address(1)) as fast:
        start = time.monotonic()
        slow.request(MetadataRequest(topics=None), 12)
        slow_time = time.monotonic() - start
        start = time.monotonic()
        fast.request(MetadataRequest(topics=None), 12)
        fast_time = time.monotonic() - start
        from kafka_proto.messages import ApiVersionsRequest

        start = time.monotonic()
        slow.request(ApiVersionsRequest(), 3)      # another API: not delayed
        other_api = time.monotonic() - start
    assert slow_time >= 1.0 > fast_time and other_api < 1.0
    c.set_latency(0, broker=2)
    with RawClient(c.address(2)) as client:
        start = time.monotonic()
        client.request(MetadataRequest(topics=None), 12)
        assert time.monotonic() - start < 1.0


def test_cut_connections_and_broker_stop_start(kafka_cluster):
    c = kafka_cluster
    with RawClient(c.address(3), timeout=5) as client:
        client.request(MetadataRequest(topics=None), 12)
        assert c.cut_connections(broker=3) >= 1
        assert client.closed_by_broker()
    c.create_topic("down", partitions=3, replication_factor=3)
    led_by_3 = [p.partition for p in c.describe_topic("down").partitions if p.leader == 3]
    address = c.address(3)
    c.stop_broker(3)
    assert [b.up for b in c.brokers] == [True, True, False]
    with pytest.raises(ConnectionRefusedError):
        RawClient(address, timeout=2)
    with RawClient(c.address(1)) as client:
        md = client.request(MetadataRequest(topics=None), 12)
        assert sorted(b.node_id for b in md.brokers) == [1, 2]
        topic = [t for t in md.topics if t.name == "down"][0]
        for p in topic.partitions:
            assert p.leader_id in (1, 2) and 3 not in p.isr_nodes
            assert p.offline_replicas == [3]
            if p.partition_index in led_by_3:
                assert p.leader_epoch == 1
    c.start_broker(3)
    assert c.address(3) == address
    c.wait_in_sync("down")
    with RawClient(address) as client:
        assert client.request(MetadataRequest(topics=None), 12).brokers


def test_coordinator_move(kafka_cluster):
    c = kafka_cluster
    old = c.coordinator(group="moved-group")
    new = [b for b in (1, 2, 3) if b != old][0]
    c.move_coordinator(new, group="moved-group")
    assert c.coordinator(group="moved-group") == new
    with RawClient(c.address(old)) as client:
        found = client.request(FindCoordinatorRequest(key="moved-group", key_type=0), 3)
        assert found.node_id == new
        hb = client.request(HeartbeatRequest(group_id="moved-group", generation_id=1,
                                             member_id="m"), 4)
        assert hb.error_code == ErrorCode.NOT_COORDINATOR
    with RawClient(c.address(new)) as client:
        hb = client.request(HeartbeatRequest(group_id="moved-group", generation_id=1,
                                             member_id="m"), 4)
        assert hb.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        found = client.request(FindCoordinatorRequest(coordinator_keys=["moved-group", "x"],
                                                      key_type=0), 4)
        assert found.coordinators[0].node_id == new
    # When the coordinator goes down, another broker takes over.
    c.stop_broker(new)
    assert c.coordinator(group="moved-group") not in (new, -1)
    c.start_broker(new)


def test_request_log_entries(kafka_cluster):
    c = kafka_cluster
    since = c.clear_request_log()
    with RawClient(c.address(2), client_id="log-test") as client:
        client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name="not-there")], allow_auto_topic_creation=False), 12)
    entries = c.request_log(since=since)
    assert len(entries) == 1
    e = entries[0]
    assert (e.broker, e.api, e.version, e.client_id) == (2, "Metadata", 12, "log-test")
    assert e.errors == ["UNKNOWN_TOPIC_OR_PARTITION"] and e.seq >= since
    assert c.request_log(since=e.seq + 1) == []


def test_fetch_records_leave_by_sendfile(kafka_cluster):
    c = kafka_cluster
    c.create_topic("zero-copy", partitions=1, replication_factor=1)
    leader = c.leader("zero-copy", 0)
    with RawClient(c.address(leader)) as client:
        for i in range(20):
            produce(client, "zero-copy", [b"%d-" % i + bytes(4000)])
        before = c.stats()
        records = fetch_all(client, "zero-copy")
        after = c.stats()
        assert len(records) == 20
        sent_by_sendfile = after["sendfile_bytes"] - before["sendfile_bytes"]
        assert sent_by_sendfile > 20 * 4000
        assert after["send_bytes"] - before["send_bytes"] < 1000   # the header only
        c.set_fetch_mode(sendfile=False)
        try:
            before = c.stats()
            assert fetch_all(client, "zero-copy") == records
            after = c.stats()
            assert after["sendfile_bytes"] == before["sendfile_bytes"]
            assert after["send_bytes"] - before["send_bytes"] > 20 * 4000
        finally:
            c.set_fetch_mode(sendfile=True)


def test_retention_and_compaction_through_the_cluster(tmp_path):
    with Cluster(brokers=2, data_dir=str(tmp_path / "c"),
                 broker_config={"log.retention.check.interval.ms": 3_600_000,
                                "log.cleaner.backoff.ms": 3_600_000}) as c:
        c.create_topic("expiring", partitions=1, replication_factor=2,
                       config={"retention.ms": 60_000})
        c.create_topic("compacted", partitions=1, replication_factor=2,
                       config={"cleanup.policy": "compact", "delete.retention.ms": 500,
                               "min.cleanable.dirty.ratio": 0.01})
        old = int(time.time() * 1000) - 3_600_000
        with RawClient(c.address(c.leader("expiring", 0))) as client:
            produce(client, "expiring", [b"old-1", b"old-2"], timestamp=old)
            c.roll_segments("expiring")
            produce(client, "expiring", [b"new"])
            c.wait_in_sync("expiring")
            assert c.run_retention() == 2          # one segment on each replica
            assert fetch_all(client, "expiring", offset=2) == [(2, None, b"new")]
        state = c.describe_topic("expiring").partitions[0]
        assert {r.log_start_offset for r in state.replica_logs.values()} == {2}
        with RawClient(c.address(c.leader("compacted", 0))) as client:
            produce(client, "compacted", [b"a1", b"b1", b"a2"], keys=[b"a", b"b", b"a"])
            produce(client, "compacted", [None], keys=[b"b"])          # tombstone
            c.roll_segments("compacted")
            produce(client, "compacted", [b"c1"], keys=[b"c"])
            c.wait_in_sync("compacted")
            c.run_cleaner()
            assert fetch_all(client, "compacted") == [(2, b"a", b"a2"), (3, b"b", None),
                                                      (4, b"c", b"c1")]
            time.sleep(0.6)                         # past delete.retention.ms
            c.run_cleaner()
            assert fetch_all(client, "compacted") == [(2, b"a", b"a2"), (4, b"c", b"c1")]
        state = c.describe_topic("compacted").partitions[0]
        assert {r.log_end_offset for r in state.replica_logs.values()} == {5}


def test_python_m_kafka_client_testing(tmp_path):
    proc, lines = start_cli_cluster(
        ["--brokers", "2", "--topic", "cli:2:2", "--control-port", "0",
         "--data-dir", str(tmp_path / "d"), "--log-level", "WARNING"])
    try:
        bootstrap, control = lines["bootstrap.servers"], lines["control"]
        assert re.fullmatch(r"127\.0\.0\.1:\d+,127\.0\.0\.1:\d+", bootstrap)
        attached = Cluster.attach(control)
        try:
            assert attached.bootstrap_servers == bootstrap
            assert attached.topics() == ["cli"]
            leader = attached.leader("cli", 0)
            with RawClient(attached.address(leader)) as client:
                assert produce(client, "cli", [b"hello"]) == (0, 0)
            assert attached.move_leader("cli", 0) != leader
        finally:
            attached.stop()   # detaches only
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert os.path.exists(tmp_path / "d" / "broker-1" / "cli-0" /
                              "00000000000000000000.log")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
