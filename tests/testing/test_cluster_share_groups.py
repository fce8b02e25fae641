"""KIP-932 share groups in the test cluster: ShareGroupHeartbeat, ShareGroupDescribe,
ShareFetch and ShareAcknowledge on the wire with a bare client (assignment, sessions and
their epochs, acquisition, acknowledgement, lock expiry, the delivery limit, the errors);
then librdkafka's ShareConsumer (confluent-kafka 2.16), written against real Kafka
brokers, reading from the cluster: two consumers share a topic's records, explicit
RELEASE and REJECT, a consumer closing without acknowledging."""
from __future__ import annotations

import threading
import time
import uuid
from types import SimpleNamespace

import pytest

from kafka_proto.enums import (
    AcknowledgeType, AlterConfigOp, ConfigResourceType, FetchSessionEpoch, GroupType, MemberEpoch,
)
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    ApiKey,
    ApiVersionsRequest,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
)

from kafka_client import Producer
from kafka_client.testing import Cluster
from kafka_client.testing._share_fetch import _ShareFetchOperation

from rawclient import RawClient  # tests/testing/rawclient.py

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

V = 1
SESSION_MS = 3000
HEARTBEAT_MS = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(brokers=2, data_dir=str(tmp_path_factory.mktemp("share-groups")),
                 broker_config={"group.share.session.timeout.ms": SESSION_MS,
                                "group.share.heartbeat.interval.ms": HEARTBEAT_MS}) as c:
        yield c


def topic_id(cluster, name):
    return uuid.UUID(cluster.describe_topic(name).topic_id)


def make_topic(cluster, name, partitions=1, values=()):
    cluster.create_topic(name, partitions=partitions, replication_factor=1)
    if values:
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
        for i, v in enumerate(values):
            p.produce(name, v, partition=i % partitions)
        assert p.flush(30) == 0
    return topic_id(cluster, name)


def coordinator(cluster, group):
    return RawClient(cluster.address(cluster.coordinator(group=group)))


def leader(cluster, topic, partition=0):
    return RawClient(cluster.address(cluster.leader(topic, partition)))


def heartbeat(client, group, member_id, epoch, topics=None):
    return client.request(ShareGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=epoch,
        subscribed_topic_names=topics), V)


def assigned(response):
    return {(t.topic_id, p) for t in response.assignment.topic_partitions
            for p in t.partitions}


class Fetcher:
    """One member's share session with one partition leader, over a bare connection."""

    def __init__(self, cluster, group, topic, tid, partition=0, member_id=None):
        self.client = leader(cluster, topic, partition)
        self.group = group
        self.tid = tid
        self.partition = partition
        self.member_id = member_id or str(uuid.uuid4())
        self.epoch = FetchSessionEpoch.INITIAL

    def close(self):
        self.client.close()

    def fetch(self, acks=(), max_records=100, max_wait_ms=0, epoch=None):
        R = ShareFetchRequest
        batches = [R.AcknowledgementBatch(first_offset=first, last_offset=last,
                                          acknowledge_types=list(types))
                   for first, last, types in acks]
        resp = self.client.request(R(
            group_id=self.group, member_id=self.member_id,
            share_session_epoch=self.epoch if epoch is None else epoch,
            max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, max_records=max_records,
            batch_size=max_records,
            topics=[R.FetchTopic(topic_id=self.tid, partitions=[R.FetchPartition(
                partition_index=self.partition, acknowledgement_batches=batches)])]), V)
        if epoch is None and resp.error_code == ErrorCode.NONE:
            self.epoch += 1
        return resp

    def acknowledge(self, acks, epoch=None):
        R = ShareAcknowledgeRequest
        resp = self.client.request(R(
            group_id=self.group, member_id=self.member_id,
            share_session_epoch=self.epoch if epoch is None else epoch,
            topics=[R.AcknowledgeTopic(topic_id=self.tid, partitions=[R.AcknowledgePartition(
                partition_index=self.partition, acknowledgement_batches=[
                    R.AcknowledgementBatch(first_offset=first, last_offset=last,
                                           acknowledge_types=list(types))
                    for first, last, types in acks])])]), V)
        if epoch is None and resp.error_code == ErrorCode.NONE:
            self.epoch += 1
        return resp


def acquired(resp):
    """[(first, last, delivery count)] of the answer's one partition."""
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in resp.responses for p in t.partitions for a in p.acquired_records]


def partition_data(resp):
    (topic,) = resp.responses
    (data,) = topic.partitions
    return data


def state(cluster, group, topic):
    (sp,) = [s for s in cluster.share_state(group) if s["topic"] == topic]
    return sp


# --------------------------------------------------------------------------- membership


def test_api_versions_advertise_the_share_apis_at_version_1(cluster):
    with RawClient(cluster.bootstrap_servers.split(",")[0]) as c:
        resp = c.request(ApiVersionsRequest(client_software_name="raw",
                                            client_software_version="1"), 3)
    assert resp.error_code == ErrorCode.NONE
    served = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    for key in (ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.SHARE_FETCH,
                ApiKey.SHARE_ACKNOWLEDGE):
        assert served[key] == (1, 1), key


def test_members_join_share_partitions_and_leave(cluster):
    group = "hb-group"
    three = make_topic(cluster, "hb-three", partitions=3)
    one = make_topic(cluster, "hb-one", partitions=1)
    with coordinator(cluster, group) as c:
        a, b, d = (str(uuid.uuid4()) for _ in range(3))
        ra = heartbeat(c, group, a, MemberEpoch.JOIN, ["hb-three", "hb-one"])
        assert ra.error_code == ErrorCode.NONE and ra.member_id == a
        assert ra.heartbeat_interval_ms == HEARTBEAT_MS
        assert assigned(ra) == {(three, 0), (three, 1), (three, 2), (one, 0)}
        rb = heartbeat(c, group, b, MemberEpoch.JOIN, ["hb-three", "hb-one"])
        rd = heartbeat(c, group, d, MemberEpoch.JOIN, ["hb-one"])
        assert rd.member_epoch == rb.member_epoch + 1 == ra.member_epoch + 2
        # a's next heartbeat brings the group epoch and its share of the spread
        ra2 = heartbeat(c, group, a, ra.member_epoch)
        assert ra2.member_epoch == rd.member_epoch
        rb2 = heartbeat(c, group, b, rb.member_epoch)
        mine = {a: assigned(ra2), b: assigned(rb2), d: assigned(rd)}
        # every partition has a member, every member a partition; the one partition of
        # hb-one is shared by its three subscribers (records, not partitions, are shared)
        assert set().union(*mine.values()) == {(three, 0), (three, 1), (three, 2), (one, 0)}
        assert all(mine.values())
        assert all((one, 0) in parts for parts in mine.values())
        assert {p for m in (a, b) for t, p in mine[m] if t == three} == {0, 1, 2}

        desc = c.request(ShareGroupDescribeRequest(group_ids=[group]), V)
        (g,) = desc.groups
        assert g.error_code == ErrorCode.NONE and g.group_state == "Stable"
        assert g.group_epoch == rd.member_epoch and g.assignor_name == "simple"
        assert {m.member_id: m.subscribed_topic_names for m in g.members} == {
            a: ["hb-three", "hb-one"], b: ["hb-three", "hb-one"], d: ["hb-one"]}
        with coordinator(cluster, "no-such-group") as other:
            (missing,) = other.request(ShareGroupDescribeRequest(
                group_ids=["no-such-group"]), V).groups
        assert (missing.error_code, missing.error_message) == \
            (ErrorCode.GROUP_ID_NOT_FOUND, "Group no-such-group not found.")

        listed = c.request(ListGroupsRequest(types_filter=[GroupType.SHARE]), 5)
        assert [(x.group_id, x.group_type, x.protocol_type) for x in listed.groups
                if x.group_id == group] == [(group, GroupType.SHARE, "share")]

        left = heartbeat(c, group, d, MemberEpoch.LEAVE)
        assert (left.error_code, left.member_epoch) == (ErrorCode.NONE, MemberEpoch.LEAVE)
        assert heartbeat(c, group, d, rd.member_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        # a stale epoch is fenced; the previous one passes (its answer may have been lost)
        ra3 = heartbeat(c, group, a, ra2.member_epoch)
        assert ra3.member_epoch == ra2.member_epoch + 1
        assert heartbeat(c, group, a, ra2.member_epoch).error_code == ErrorCode.NONE
        assert heartbeat(c, group, a, ra.member_epoch).error_code == \
            ErrorCode.FENCED_MEMBER_EPOCH


def test_heartbeat_errors(cluster):
    group = "hb-errors"
    with coordinator(cluster, group) as c:
        # v1: the member brings its own id
        assert heartbeat(c, group, "", MemberEpoch.JOIN, ["x"]).error_code == \
            ErrorCode.INVALID_REQUEST
        assert heartbeat(c, group, "m", MemberEpoch.JOIN, None).error_code == \
            ErrorCode.INVALID_REQUEST
        assert heartbeat(c, group, "m", 3).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        # a consumer group's id is not a share group's
        c.request(ConsumerGroupHeartbeatRequest(
            group_id="kip848-group", member_id=str(uuid.uuid4()), member_epoch=0,
            rebalance_timeout_ms=30000, subscribed_topic_names=["x"], topic_partitions=[]), 1)
    with coordinator(cluster, "kip848-group") as c:
        assert heartbeat(c, "kip848-group", "m", MemberEpoch.JOIN, ["x"]).error_code == \
            ErrorCode.GROUP_ID_NOT_FOUND
        (other_kind,) = c.request(ShareGroupDescribeRequest(
            group_ids=["kip848-group"]), V).groups
        assert (other_kind.error_code, other_kind.error_message) == \
            (ErrorCode.GROUP_ID_NOT_FOUND, "Group kip848-group is not a share group.")
    elsewhere = next(b for b in (1, 2) if b != cluster.coordinator(group=group))
    with RawClient(cluster.address(elsewhere)) as c:
        assert heartbeat(c, group, "m", MemberEpoch.JOIN, ["x"]).error_code == \
            ErrorCode.NOT_COORDINATOR
        (not_here,) = c.request(ShareGroupDescribeRequest(group_ids=[group]), V).groups
        assert not_here.error_code == ErrorCode.NOT_COORDINATOR


def test_a_silent_member_is_removed_after_its_session(cluster):
    group = "hb-session"
    make_topic(cluster, "hb-session-topic")
    with coordinator(cluster, group) as c:
        a, b = str(uuid.uuid4()), str(uuid.uuid4())
        heartbeat(c, group, a, MemberEpoch.JOIN, ["hb-session-topic"])
        rb = heartbeat(c, group, b, MemberEpoch.JOIN, ["hb-session-topic"])
        epoch = rb.member_epoch
        deadline = time.monotonic() + SESSION_MS / 1000 * 5
        while True:   # b heartbeats, a stays silent until its session ends
            assert time.monotonic() < deadline, "the silent member was never removed"
            rb = heartbeat(c, group, b, epoch)
            epoch = rb.member_epoch
            desc = c.request(ShareGroupDescribeRequest(group_ids=[group]), V)
            if [m.member_id for m in desc.groups[0].members] == [b]:
                break
            time.sleep(HEARTBEAT_MS / 1000)
        assert heartbeat(c, group, a, 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID


# --------------------------------------------------------------------------- fetching


def test_fetch_acquires_acknowledges_and_releases(cluster):
    group = "sf-basic"
    tid = make_topic(cluster, "sf-basic", values=[b"%d" % i for i in range(10)])
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    a = Fetcher(cluster, group, "sf-basic", tid)
    b = Fetcher(cluster, group, "sf-basic", tid)
    try:
        first = a.fetch(max_records=4)
        assert first.error_code == ErrorCode.NONE
        assert first.acquisition_lock_timeout_ms == 30000
        assert acquired(first) == [(0, 3, 1)]
        assert partition_data(first).records   # the batches holding them
        # b gets the next ones, never a's
        assert acquired(b.fetch(max_records=100)) == [(4, 9, 1)]
        # a accepts 0, releases 1, rejects 2, leaves 3 (piggy-backed on its next fetch):
        # the released record comes again, with its delivery count up
        G, ACC, REL, REJ = (AcknowledgeType.GAP, AcknowledgeType.ACCEPT,
                            AcknowledgeType.RELEASE, AcknowledgeType.REJECT)
        again = a.fetch(acks=[(0, 2, [ACC, REL, REJ])])
        assert partition_data(again).acknowledge_error_code == ErrorCode.NONE
        assert acquired(again) == [(1, 1, 2)]
        records = {o: (s, n) for o, s, n, _ in state(cluster, group, "sf-basic")["records"]}
        assert records[2] == ("archived", 1) and records[3] == ("acquired", 1)
        assert state(cluster, group, "sf-basic")["start_offset"] == 0 + 1  # 0 is done
        # a record acquired by a cannot be acknowledged by b
        resp = b.acknowledge([(3, 3, [ACC])])
        assert resp.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
        # nor twice, nor beyond what was fetched
        resp = a.acknowledge([(0, 0, [ACC])])
        assert resp.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
        resp = a.acknowledge([(50, 50, [ACC])])
        assert resp.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
        # ShareAcknowledge with types per offset, a GAP among them
        resp = a.acknowledge([(1, 1, [ACC]), (3, 3, [G])])
        assert resp.error_code == ErrorCode.NONE
        assert resp.responses[0].partitions[0].error_code == ErrorCode.NONE
        assert b.acknowledge([(4, 9, [ACC])]).error_code == ErrorCode.NONE
        sp = state(cluster, group, "sf-basic")
        assert (sp["start_offset"], sp["end_offset"], sp["records"]) == (10, 10, [])
        assert acquired(a.fetch()) == []
    finally:
        a.close()
        b.close()


def test_session_epochs_and_their_errors(cluster):
    group = "sf-sessions"
    tid = make_topic(cluster, "sf-sessions", values=[b"x"] * 3)
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    a = Fetcher(cluster, group, "sf-sessions", tid)
    try:
        ACC = AcknowledgeType.ACCEPT
        # no session yet
        assert a.fetch(epoch=4).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        assert a.acknowledge([(0, 0, [ACC])], epoch=1).error_code == \
            ErrorCode.SHARE_SESSION_NOT_FOUND
        # a ShareAcknowledge does not open one; acknowledgements do not go with the opening
        assert a.acknowledge([(0, 0, [ACC])], epoch=0).error_code == \
            ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert a.fetch(acks=[(0, 0, [ACC])], epoch=0).error_code == ErrorCode.INVALID_REQUEST
        assert acquired(a.fetch(max_records=1)) == [(0, 0, 1)]     # epoch 0: opened
        assert a.fetch(epoch=2).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert acquired(a.fetch(max_records=1)) == [(1, 1, 1)]     # epoch 1
        assert a.acknowledge([(0, 1, [ACC])]).error_code == ErrorCode.NONE   # epoch 2
        assert a.fetch(epoch=2).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        # closing (-1) releases what the member still holds in the session
        assert acquired(a.fetch(max_records=1)) == [(2, 2, 1)]     # epoch 3
        assert a.fetch(epoch=FetchSessionEpoch.FINAL).error_code == ErrorCode.NONE
        assert a.fetch(epoch=4).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        records = state(cluster, group, "sf-sessions")["records"]
        assert [(o, s, n) for o, s, n, _ in records] == [(2, "available", 1)]
        # a request to a broker that does not lead the partition
        other = next(b for b in (1, 2) if b != cluster.leader("sf-sessions", 0))
        with RawClient(cluster.address(other)) as c:
            wrong = Fetcher.__new__(Fetcher)
            wrong.__dict__.update(a.__dict__, client=c, epoch=0)
            resp = wrong.fetch()
        data = partition_data(resp)
        assert data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert data.current_leader.leader_id == cluster.leader("sf-sessions", 0)
        assert [e.node_id for e in resp.node_endpoints] == [data.current_leader.leader_id]
    finally:
        a.close()


def test_a_lock_expires_and_the_delivery_limit_archives(cluster):
    group = "sf-locks"
    tid = make_topic(cluster, "sf-locks", values=[b"x"] * 2)
    lock_ms = 600
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest",
                                     "share.record.lock.duration.ms": lock_ms,
                                     "share.delivery.count.limit": 2})
    a = Fetcher(cluster, group, "sf-locks", tid)
    b = Fetcher(cluster, group, "sf-locks", tid)
    try:
        assert acquired(a.fetch()) == [(0, 1, 1)]
        assert acquired(b.fetch()) == []
        # b's own lock is long: a loaded machine cannot let it expire before b's release
        cluster.set_group_config(group, {"share.record.lock.duration.ms": 30000})
        # b waits (long poll) until a's lock expires, then gets them at count 2
        started = time.monotonic()
        resp = b.fetch(max_wait_ms=20000)
        assert acquired(resp) == [(0, 1, 2)]
        assert time.monotonic() - started < 15   # woken by the expiry, not the wait's end
        # b releases them: at the limit (2 deliveries), archived rather than available
        assert b.acknowledge([(0, 1, [AcknowledgeType.RELEASE])]).error_code == ErrorCode.NONE
        sp = state(cluster, group, "sf-locks")
        assert (sp["start_offset"], sp["records"]) == (2, [])
        assert acquired(a.fetch()) == []
    finally:
        a.close()
        b.close()


def test_the_state_outlives_a_leader_move(cluster):
    group = "sf-move"
    cluster.create_topic("sf-move", partitions=1, replication_factor=2)
    tid = topic_id(cluster, "sf-move")
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(4):
        p.produce("sf-move", b"%d" % i, partition=0)
    assert p.flush(30) == 0
    cluster.wait_in_sync("sf-move")
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    member = str(uuid.uuid4())
    a = Fetcher(cluster, group, "sf-move", tid, member_id=member)
    try:
        assert acquired(a.fetch(max_records=2)) == [(0, 1, 1)]
        old = cluster.leader("sf-move", 0)
        new = cluster.move_leader("sf-move", 0)
        assert new != old
        moved = a.fetch(max_wait_ms=10000)
        data = partition_data(moved)
        assert data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert data.current_leader.leader_id == new
        # empty records, not null, as Kafka's (librdkafka drops an answer with null ones)
        assert data.records is not None and len(data.records) == 0
    finally:
        a.close()
    # the acquisitions were the old leader's memory (Kafka persists acknowledgements and
    # delivery counts, never acquisitions): the new leader gives them out again
    b = Fetcher(cluster, group, "sf-move", tid, member_id=member)
    try:
        assert acquired(b.fetch()) == [(0, 1, 2), (2, 3, 1)]
        ack = b.acknowledge([(0, 3, [AcknowledgeType.ACCEPT])])
        assert ack.responses[0].partitions[0].error_code == ErrorCode.NONE
        assert state(cluster, group, "sf-move")["start_offset"] == 4
    finally:
        b.close()


def test_latest_is_the_default_start(cluster):
    group = "sf-latest"
    tid = make_topic(cluster, "sf-latest", values=[b"old"] * 3)
    a = Fetcher(cluster, group, "sf-latest", tid)
    try:
        assert acquired(a.fetch()) == []
        assert state(cluster, group, "sf-latest")["start_offset"] == 3
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        p.produce("sf-latest", b"new", partition=0)
        assert p.flush(30) == 0
        assert acquired(a.fetch(max_wait_ms=10000)) == [(3, 3, 1)]
    finally:
        a.close()


def alter_group_configs(cluster, group, configs, validate_only=False):
    R = IncrementalAlterConfigsRequest
    with RawClient(cluster.bootstrap_servers.split(",")[0]) as c:
        (answer,) = c.request(R(validate_only=validate_only, resources=[R.AlterConfigsResource(
            resource_type=ConfigResourceType.GROUP, resource_name=group,
            configs=[R.AlterableConfig(name=n, config_operation=op, value=v)
                     for n, op, v in configs])]), 1).responses
    return answer.error_code


def test_deleting_the_group_or_the_topic_deletes_its_share_partitions(cluster):
    group = "sf-delete"
    tid = make_topic(cluster, "sf-delete", values=[b"x"] * 2)
    make_topic(cluster, "sf-delete-other", values=[b"x"])
    other_tid = topic_id(cluster, "sf-delete-other")
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    member = str(uuid.uuid4())
    with coordinator(cluster, group) as c:
        r = heartbeat(c, group, member, MemberEpoch.JOIN, ["sf-delete", "sf-delete-other"])
        for name, t in (("sf-delete", tid), ("sf-delete-other", other_tid)):
            f = Fetcher(cluster, group, name, t, member_id=member)
            try:
                assert acquired(f.fetch())
            finally:
                f.close()
        assert [s["topic"] for s in cluster.share_state(group)] == \
            ["sf-delete", "sf-delete-other"]
        cluster.delete_topic("sf-delete-other")
        assert [s["topic"] for s in cluster.share_state(group)] == ["sf-delete"]
        # a group with members is not deleted; an empty one is, with its share-partitions
        (res,) = c.request(DeleteGroupsRequest(groups_names=[group]), 2).results
        assert res.error_code == ErrorCode.NON_EMPTY_GROUP
        assert heartbeat(c, group, member, MemberEpoch.LEAVE).error_code == ErrorCode.NONE
        (res,) = c.request(DeleteGroupsRequest(groups_names=[group]), 2).results
        assert res.error_code == ErrorCode.NONE
        assert r.error_code == ErrorCode.NONE
    assert cluster.share_state(group) == []


def test_group_configs_through_incremental_alter_configs(cluster):
    group = "sf-configs"
    tid = make_topic(cluster, "sf-configs", values=[b"x"] * 2)
    SET, DELETE = AlterConfigOp.SET, AlterConfigOp.DELETE
    assert alter_group_configs(cluster, group, [("share.auto.offset.reset", SET, "sometimes")]) \
        == ErrorCode.INVALID_CONFIG
    assert alter_group_configs(cluster, group, [("share.colour", SET, "blue")]) == \
        ErrorCode.INVALID_CONFIG
    assert alter_group_configs(cluster, group, [("share.auto.offset.reset", SET, "earliest")],
                               validate_only=True) == ErrorCode.NONE
    assert alter_group_configs(cluster, group, [
        ("share.auto.offset.reset", SET, "earliest"),
        ("share.record.lock.duration.ms", SET, "7000")]) == ErrorCode.NONE
    a = Fetcher(cluster, group, "sf-configs", tid)
    try:
        resp = a.fetch()
        assert acquired(resp) == [(0, 1, 1)]    # earliest: the records there before
        assert resp.acquisition_lock_timeout_ms == 7000
        assert alter_group_configs(cluster, group, [
            ("share.record.lock.duration.ms", DELETE, None)]) == ErrorCode.NONE
        assert a.fetch().acquisition_lock_timeout_ms == 30000   # the broker's default
    finally:
        a.close()


def test_leaving_the_group_releases_the_members_records(cluster):
    group = "sf-leave"
    tid = make_topic(cluster, "sf-leave", values=[b"x"] * 4)
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    with coordinator(cluster, group) as c:
        member = str(uuid.uuid4())
        assert heartbeat(c, group, member, MemberEpoch.JOIN, ["sf-leave"]).error_code == 0
        a = Fetcher(cluster, group, "sf-leave", tid, member_id=member)
        try:
            assert acquired(a.fetch()) == [(0, 3, 1)]
            assert heartbeat(c, group, member, MemberEpoch.LEAVE).error_code == 0
        finally:
            a.close()
    records = state(cluster, group, "sf-leave")["records"]
    assert [(o, s) for o, s, _, _ in records] == [(o, "available") for o in range(4)]


# --------------------------------------------------------------------------- librdkafka


@pytest.fixture(scope="module")
def ck():
    return pytest.importorskip("confluent_kafka")


def share_consumer(ck, cluster, group, **config):
    c = ck.ShareConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                          **config})
    return c


def poll_until(consumers, want, seconds=40, on_message=None):
    """Poll the consumers in turn until ``want(got)``; every message as (consumer index,
    partition, offset, value, delivery count)."""
    got = []
    deadline = time.monotonic() + seconds
    while not want(got):
        assert time.monotonic() < deadline, f"{len(got)} messages: {got[-5:]}"
        for i, c in enumerate(consumers):
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                entry = (i, m.partition(), m.offset(), m.value(), m.delivery_count())
                got.append(entry)
                if on_message is not None:
                    on_message(c, m)
    return got


@pytest.mark.parametrize("partitions, config", [
    (2, {}),
    # one partition both consumers read at once, a few records at a time
    (1, {"max.poll.records": 5}),
], ids=["two-partitions", "one-shared-partition"])
def test_two_share_consumers_read_every_message_once(cluster, ck, partitions, config):
    group = topic = f"ck-implicit-{partitions}"
    n = 300
    make_topic(cluster, topic, partitions=partitions)
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    consumers = [share_consumer(ck, cluster, group, **config) for _ in range(2)]
    try:
        for c in consumers:
            c.subscribe([topic])
        # Both are members with the assignment of the last group epoch before the records
        # come (else the first alone may read them all, as it would from Kafka), and no
        # ShareFetch sent before still waits with a share session naming a partition its
        # member no longer has (librdkafka neither forgets it nor closes that session:
        # such a fetch would take that partition's records too).
        with coordinator(cluster, group) as raw:
            def settled(_got):
                (g,) = raw.request(ShareGroupDescribeRequest(group_ids=[group]), V).groups
                if len(g.members) != 2 or \
                        any(m.member_epoch != g.group_epoch for m in g.members):
                    return False
                mine = {m.member_id: {p for t in m.assignment.topic_partitions
                                      for p in t.partitions} for m in g.members}
                return not any(
                    not e.details.get("answered") and
                    any(p not in mine.get(e.details["member_id"], ())
                        for _, p in e.details.get("session_partitions") or ())
                    for e in cluster.request_log(api="ShareFetch")
                    if e.details.get("group_id") == group and
                    e.details.get("member_id") in mine)
            assert poll_until(consumers, settled) == []
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        for i in range(n):
            p.produce(topic, b"%d" % i, partition=i % partitions)
        assert p.flush(30) == 0
        got = poll_until(consumers, lambda got: len(got) >= n)
        # one more poll each: implicit mode acknowledges the last records with it
        for c in consumers:
            c.poll(0.5)
    finally:
        for c in consumers:
            c.close()
    values = sorted(int(v) for _, _, _, v, _ in got)
    assert values == list(range(n))    # every message, none twice
    assert {i for i, *_ in got} == {0, 1}    # both consumers had a share
    assert all(count == 1 for *_, count in got)
    states = cluster.share_state(group)
    assert len(states) == partitions
    for sp in states:
        # everything acknowledged: the start offset is past every record
        each = n // partitions
        assert (sp["start_offset"], sp["end_offset"], sp["records"]) == (each, each, [])


def test_explicit_release_redelivers_and_reject_does_not(cluster, ck):
    group, topic = "ck-explicit", "ck-explicit"
    make_topic(cluster, topic, values=[b"release", b"reject", b"accept"])
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    c = share_consumer(ck, cluster, group, **{"share.acknowledgement.mode": "explicit"})
    kinds = {b"release": ck.AcknowledgeType.RELEASE, b"reject": ck.AcknowledgeType.REJECT,
             b"accept": ck.AcknowledgeType.ACCEPT}
    try:
        c.subscribe([topic])

        def ack(consumer, m):
            kind = kinds[m.value()] if m.delivery_count() == 1 else ck.AcknowledgeType.ACCEPT
            consumer.acknowledge(m, kind)

        got = poll_until([c], lambda got: len(got) >= 4, on_message=ack)
        c.commit_sync(10)
        # a while longer: the rejected record must not come back
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            for m in c.poll(0.2):
                got.append((0, m.partition(), m.offset(), m.value(), m.delivery_count()))
                c.acknowledge(m)
    finally:
        c.close()
    assert [(o, v, n) for _, _, o, v, n in got] == [
        (0, b"release", 1), (1, b"reject", 1), (2, b"accept", 1), (0, b"release", 2)]
    sp = state(cluster, group, topic)
    assert (sp["start_offset"], sp["records"]) == (3, [])


def test_a_consumer_closing_without_acknowledging_hands_its_records_over(cluster, ck):
    group, topic, n = "ck-close", "ck-close", 20
    make_topic(cluster, topic, values=[b"%d" % i for i in range(n)])
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    explicit = {"share.acknowledgement.mode": "explicit"}
    first = share_consumer(ck, cluster, group, **explicit)
    second = None
    try:
        first.subscribe([topic])
        got_first = poll_until([first], lambda got: len(got) >= n)
        held = [(o, s, c) for o, s, c, _ in state(cluster, group, topic)["records"]]
        assert held == [(o, "acquired", 1) for o in range(n)]
        second = share_consumer(ck, cluster, group)
        second.subscribe([topic])
        # all of them are the first's: the second gets nothing while it holds them
        assert poll_until([second], lambda got: True) == []
        first.close()    # nothing acknowledged: its records go back
        first = None
        got_second = poll_until([second], lambda got: len(got) >= n)
        second.poll(0.5)   # implicit: acknowledges them
    finally:
        for c in (first, second):
            if c is not None:
                c.close()
    assert sorted(o for _, _, o, _, _ in got_first) == list(range(n))
    assert sorted((o, count) for _, _, o, _, count in got_second) == \
        [(o, 2) for o in range(n)]
    sp = state(cluster, group, topic)
    assert (sp["start_offset"], sp["records"]) == (n, [])


def test_a_lock_expiry_hands_records_to_the_other_consumer(cluster, ck):
    group, topic, n = "ck-expiry", "ck-expiry", 10
    tid = make_topic(cluster, topic, values=[b"%d" % i for i in range(n)])
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest",
                                     "share.record.lock.duration.ms": 1000})
    stalled = Fetcher(cluster, group, topic, tid)   # acquires and never acknowledges
    c = share_consumer(ck, cluster, group)
    try:
        assert acquired(stalled.fetch()) == [(0, n - 1, 1)]
        # the consumer's own locks are long: a loaded machine cannot let them expire
        cluster.set_group_config(group, {"share.record.lock.duration.ms": 30000})
        c.subscribe([topic])
        got = poll_until([c], lambda got: len(got) >= n)
        c.poll(0.5)
    finally:
        c.close()
        stalled.close()
    assert sorted((o, count) for _, _, o, _, count in got) == [(o, 2) for o in range(n)]
    sp = state(cluster, group, topic)
    assert (sp["start_offset"], sp["records"]) == (n, [])


def test_a_share_consumer_follows_a_leader_move(cluster, ck):
    group, topic = "ck-move", "ck-move"
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers})

    def produce(first, last):
        for i in range(first, last):
            p.produce(topic, b"%d" % i, partition=0)
        assert p.flush(30) == 0

    produce(0, 50)
    cluster.wait_in_sync(topic)
    c = share_consumer(ck, cluster, group, **{"max.poll.records": 10})
    try:
        c.subscribe([topic])
        got = poll_until([c], lambda got: len(got) >= 20)
        old = cluster.leader(topic, 0)
        before = cluster.request_log()[-1].seq + 1
        new = cluster.move_leader(topic, 0)
        after = cluster.request_log()[-1].seq + 1
        produce(50, 100)
        # records delivered before the move whose acknowledgement went to the old leader
        # come again (at least once), so this waits for every value, not for 100 messages
        got += poll_until([c], lambda more: {int(v) for *_, v, _ in got + more} >=
                          set(range(100)))
    finally:
        c.close()
    fetches = cluster.request_log(since=before, api="ShareFetch")
    at_old = [e for e in fetches if e.broker == old]
    assert any(e.errors == ["NOT_LEADER_OR_FOLLOWER"] for e in at_old)
    assert not any(e.details.get("acquired") for e in at_old if e.seq >= after)
    assert len(at_old) < 50   # the answer sent it on, no loop against the old leader
    assert any(e.broker == new and e.details.get("acquired") for e in fetches)


def test_a_share_fetch_woken_after_its_answer_reads_nothing():
    """The broker wakes waiting fetches once per loop turn from a set filled by data
    notifications; a fetch its timer answered in between must not read again: records it
    acquired then would go in an answer never sent, kept from every member until their
    lock expired (5 records missing for 35 s in a two-member run under load)."""
    ctx = SimpleNamespace(server=SimpleNamespace(share_fetch=None),
                          conn=SimpleNamespace(closed=False))
    fetch = _ShareFetchOperation(ctx)
    fetch.done = True
    fetch._read = lambda: pytest.fail("a finished fetch read records")
    fetch._wake()


def test_a_share_fetch_waiting_when_its_session_ends_acquires_nothing(cluster):
    """A ShareFetch long-polls; meanwhile its member's session ends (opened again and
    closed elsewhere); then records come: the waiting fetch is answered without them
    (acquired for a session that no longer exists, they were nobody's until their lock
    expired: a partition's last records stuck in a share consumer fault run)."""
    group = "sf-ended"
    tid = make_topic(cluster, "sf-ended")
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    member = str(uuid.uuid4())
    a = Fetcher(cluster, group, "sf-ended", tid, member_id=member)
    other = Fetcher(cluster, group, "sf-ended", tid, member_id=member)
    answers = []
    try:
        assert acquired(a.fetch()) == []                       # a's session, epoch 0
        waiting = threading.Thread(target=lambda: answers.append(a.fetch(max_wait_ms=5000)))
        waiting.start()
        time.sleep(0.5)                                        # a's fetch waits
        assert acquired(other.fetch()) == []                   # the session opened again
        assert other.fetch(epoch=FetchSessionEpoch.FINAL).error_code == ErrorCode.NONE
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
        p.produce("sf-ended", b"late")
        assert p.flush(30) == 0
        waiting.join(30)
        assert len(answers) == 1 and acquired(answers[0]) == []
        # the record is there for the next session, at its first delivery
        assert acquired(other.fetch(epoch=FetchSessionEpoch.INITIAL)) == [(0, 0, 1)]
    finally:
        a.close()
        other.close()


def test_a_partition_named_and_forgotten_in_one_share_fetch_leaves_the_session(cluster):
    """As Kafka's share session update (the named partitions added, then the forgotten
    ones removed): a ShareFetch acknowledging a partition's records and forgetting it
    applies the acknowledgements and acquires nothing more there, now or later (the
    forgotten were dropped first, and the partition, named again, stayed in the session:
    its records went to a member that no longer had it assigned)."""
    group = "sf-forget"
    tid = make_topic(cluster, "sf-forget", values=[b"m0", b"m1", b"m2"])
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    a = Fetcher(cluster, group, "sf-forget", tid)
    try:
        assert acquired(a.fetch(max_records=1)) == [(0, 0, 1)]
        R = ShareFetchRequest
        resp = a.client.request(R(
            group_id=group, member_id=a.member_id, share_session_epoch=1, max_wait_ms=0,
            min_bytes=1, max_bytes=1 << 20, max_records=1, batch_size=1,
            topics=[R.FetchTopic(topic_id=tid, partitions=[R.FetchPartition(
                partition_index=0, acknowledgement_batches=[R.AcknowledgementBatch(
                    first_offset=0, last_offset=0,
                    acknowledge_types=[int(AcknowledgeType.ACCEPT)])])])],
            forgotten_topics_data=[R.ForgottenTopic(topic_id=tid, partitions=[0])]), V)
        assert resp.error_code == ErrorCode.NONE
        assert partition_data(resp).acknowledge_error_code == ErrorCode.NONE
        assert acquired(resp) == []
        resp = a.client.request(R(
            group_id=group, member_id=a.member_id, share_session_epoch=2, max_wait_ms=0,
            min_bytes=1, max_bytes=1 << 20, max_records=1, batch_size=1), V)
        assert resp.error_code == ErrorCode.NONE and acquired(resp) == []
        sp = state(cluster, group, "sf-forget")
        assert sp["start_offset"] == 1
        assert [r for r in sp["records"] if r[1] != "available"] == []
    finally:
        a.close()


def test_a_share_session_end_releases_the_members_records_of_its_partitions_only(cluster):
    """As Kafka (the session's end releases the member's records of the session's
    partitions): a record of a partition the ended session did not name, acquired under
    an earlier session of the member that this one replaced, stays the member's, and its
    acknowledgement in the next session is accepted."""
    group = "sf-only"
    broker = cluster.broker_ids[0]
    cluster.create_topic("sf-only", partitions=2, replication_factor=1,
                         assignments=[[broker], [broker]])
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
    for partition in (0, 1):
        p.produce("sf-only", b"v%d" % partition, partition=partition)
    assert p.flush(30) == 0
    tid = topic_id(cluster, "sf-only")
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    member = str(uuid.uuid4())

    def kinds(partition):
        (sp,) = [s for s in cluster.share_state(group) if s["partition"] == partition]
        return [r[1] for r in sp["records"]]

    first = Fetcher(cluster, group, "sf-only", tid, partition=0, member_id=member)
    second = Fetcher(cluster, group, "sf-only", tid, partition=1, member_id=member)
    third = Fetcher(cluster, group, "sf-only", tid, partition=0, member_id=member)
    try:
        assert acquired(first.fetch()) == [(0, 0, 1)]
        # opened on another connection, naming partition 1 only: it replaces the first
        assert acquired(second.fetch()) == [(0, 0, 1)]
        second.close()
        cluster.wait_for(lambda: kinds(1) == ["available"], 10, "partition 1 given back")
        assert kinds(0) == ["acquired"]
        # the member's record of partition 0 is still its own: not delivered again, and
        # its acknowledgement is accepted
        assert acquired(third.fetch()) == []
        ack = third.acknowledge([(0, 0, [AcknowledgeType.ACCEPT])])
        assert ack.error_code == ErrorCode.NONE
        assert ack.responses[0].partitions[0].error_code == ErrorCode.NONE
        assert kinds(0) == [] or kinds(0) == ["acknowledged"]
    finally:
        first.close()
        second.close()
        third.close()


def test_a_share_session_ends_with_the_connection_that_opened_it(cluster):
    """As Kafka's share session cache, which listens for disconnections: the session
    opened on a connection ends when it closes, and the member's records of it go back
    to the group (a new session of the same member elsewhere is left alone)."""
    group = "sf-conn"
    tid = make_topic(cluster, "sf-conn", values=[b"a", b"b", b"c"])
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    member = str(uuid.uuid4())
    a = Fetcher(cluster, group, "sf-conn", tid, member_id=member)
    assert acquired(a.fetch(max_records=2)) == [(0, 1, 1)]
    kinds = lambda: [r[1] for r in state(cluster, group, "sf-conn")["records"]]  # noqa: E731
    assert kinds()[:2] == ["acquired"] * 2
    b = Fetcher(cluster, group, "sf-conn", tid, member_id=member)
    try:
        a.close()
        cluster.wait_for(lambda: kinds()[:2] == ["available"] * 2, 10,
                         "the records given back")
        # the same member opens a session again: it gets them again, one delivery more
        assert acquired(b.fetch()) == [(0, 1, 2), (2, 2, 1)]
        c = Fetcher(cluster, group, "sf-conn", tid, member_id=member)
        try:
            # a session opened again on another connection replaces b's: b's close
            # must not end it
            assert acquired(c.fetch()) == []
            b.close()
            time.sleep(0.3)
            assert kinds() == ["acquired"] * 3
            ack = c.acknowledge([(0, 2, [AcknowledgeType.ACCEPT])])
            assert ack.responses[0].partitions[0].error_code == ErrorCode.NONE
            assert state(cluster, group, "sf-conn")["start_offset"] == 3
        finally:
            c.close()
    finally:
        b.close()
