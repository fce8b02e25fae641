"""KIP-848 consumer groups in the test cluster: ConsumerGroupHeartbeat on the wire with a
bare client (joins, the uniform and range assignors, revocation before a partition moves,
epochs, leaving, static members, session and revocation timeouts, the errors), offsets
with member epochs, ConsumerGroupDescribe and the classic APIs' view of consumer groups;
then confluent-kafka consumers with ``group.protocol=consumer`` sharing a topic."""
from __future__ import annotations

import time
import uuid

import pytest

from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CreatePartitionsRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)

from kafka_client.testing import Cluster
from kafka_client.testing._consumer_groups import assign_range, assign_uniform

from rawclient import RawClient  # tests/testing/rawclient.py

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

HB_V = 1
SESSION_MS = 1500
HEARTBEAT_MS = 250
MAX_SIZE = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(brokers=3, data_dir=str(tmp_path_factory.mktemp("consumer-groups")),
                 broker_config={"group.consumer.session.timeout.ms": SESSION_MS,
                                "group.consumer.heartbeat.interval.ms": HEARTBEAT_MS,
                                "group.consumer.max.size": MAX_SIZE}) as c:
        c.create_topic("six", partitions=6, replication_factor=1)
        c.create_topic("three-a", partitions=3, replication_factor=1)
        c.create_topic("three-b", partitions=3, replication_factor=1)
        yield c


def topic_id(cluster, name):
    return uuid.UUID(cluster.describe_topic(name).topic_id)


class Member:
    """One consumer-protocol member on its own connection to the group's coordinator."""

    def __init__(self, cluster, group, topics=("six",), instance=None, assignor=None,
                 rebalance_ms=30000, member_id=None, regex=None):
        self.cluster = cluster
        self.group = group
        self.client = coordinator_client(cluster, group)
        self.member_id = member_id if member_id is not None else str(uuid.uuid4())
        self.topics = list(topics) if topics is not None else None
        self.regex = regex
        self.instance = instance
        self.assignor = assignor
        self.rebalance_ms = rebalance_ms
        self.epoch = 0
        self.assigned = set()

    def close(self):
        self.client.close()

    def request(self, version=HB_V, **fields):
        req = ConsumerGroupHeartbeatRequest(group_id=self.group, member_id=self.member_id,
                                            member_epoch=self.epoch, instance_id=self.instance)
        for name, value in fields.items():
            setattr(req, name, value)
        return self.client.request(req, version)

    def join(self, **fields):
        args = dict(member_epoch=0, rebalance_timeout_ms=self.rebalance_ms,
                    subscribed_topic_names=self.topics, server_assignor=self.assignor,
                    topic_partitions=[])
        if self.regex is not None:
            args["subscribed_topic_regex"] = self.regex
        args.update(fields)
        resp = self.request(**args)
        if resp.error_code == 0:
            self.member_id = resp.member_id
            self.epoch = resp.member_epoch
            self.assigned = partitions_of(resp)
        return resp

    def beat(self, owned=None, **fields):
        """A heartbeat reporting ``owned`` (default: what it was given) as owned."""
        owned = self.assigned if owned is None else owned
        resp = self.request(topic_partitions=wire_partitions(owned), **fields)
        if resp.error_code == 0:
            self.epoch = resp.member_epoch
            if resp.assignment is not None:
                self.assigned = partitions_of(resp)
        return resp

    def leave(self, epoch=-1):
        return self.request(member_epoch=epoch)


def partitions_of(resp):
    return {(t.topic_id, p) for t in resp.assignment.topic_partitions for p in t.partitions}


def wire_partitions(parts):
    by_topic = {}
    for tid, p in parts:
        by_topic.setdefault(tid, []).append(p)
    return [ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=tid, partitions=sorted(ps))
            for tid, ps in by_topic.items()]


def numbers(parts, tid=None):
    return sorted(p for t, p in parts if tid is None or t == tid)


def coordinator_client(cluster, group):
    return RawClient(cluster.address(cluster.coordinator(group=group)))


def describe(cluster, group):
    with coordinator_client(cluster, group) as c:
        return c.request(ConsumerGroupDescribeRequest(group_ids=[group]), 0).groups[0]


def members_of(described):
    return {m.member_id: m for m in described.members}


def target_of(member):
    return {(t.topic_id, p) for t in member.target_assignment.topic_partitions
            for p in t.partitions}


def commit(client, group, member_id, epoch, version=9, offset=10, partition=0):
    resp = client.request(OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="six", partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset)])]), version)
    return resp.topics[0].partitions[0].error_code


def fetch_offsets(client, group, member_id=None, epoch=-1):
    resp = client.request(OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id=group, member_id=member_id, member_epoch=epoch,
        topics=[OffsetFetchRequest.OffsetFetchRequestTopics(
            name="six", partition_indexes=[0, 1])])]), 9)
    g = resp.groups[0]
    return g.error_code, [(p.partition_index, p.committed_offset)
                          for t in g.topics for p in t.partitions]


def test_join_spread_and_revocation_before_reassignment(cluster):
    six = topic_id(cluster, "six")
    a, b = Member(cluster, "g-spread"), Member(cluster, "g-spread")
    try:
        ja = a.join()
        assert (ja.error_code, ja.member_id, ja.member_epoch) == (0, a.member_id, 1)
        assert ja.heartbeat_interval_ms == HEARTBEAT_MS
        assert numbers(a.assigned, six) == [0, 1, 2, 3, 4, 5]
        # b joins: the group epoch is 2, b's target is 3-5 but a still owns them.
        jb = b.join()
        assert jb.member_epoch == 2 and b.assigned == set()
        d = describe(cluster, "g-spread")
        assert (d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == \
            ("Reconciling", 2, 2, "uniform")
        assert numbers(target_of(members_of(d)[b.member_id])) == [3, 4, 5]
        # a is told to give up 3-5 and keeps epoch 1 until it reports them given up.
        ra = a.beat()
        assert ra.member_epoch == 1 and numbers(a.assigned) == [0, 1, 2]
        assert a.beat(owned={(six, p) for p in range(6)}).member_epoch == 1   # still owned
        rb = b.beat()
        assert rb.member_epoch == 2 and rb.assignment is None    # nothing released yet
        ra = a.beat()                                            # owns 0-2 only now
        assert ra.member_epoch == 2 and ra.assignment is None    # same partitions
        rb = b.beat()
        assert rb.member_epoch == 2 and numbers(b.assigned) == [3, 4, 5]
        d = describe(cluster, "g-spread")
        assert d.group_state == "Stable"
        assert {m.member_epoch for m in d.members} == {2}
        # A heartbeat with nothing changed carries no assignment; a full one does.
        assert a.beat().assignment is None
        full = a.beat(rebalance_timeout_ms=30000, subscribed_topic_names=["six"])
        assert numbers(partitions_of(full)) == [0, 1, 2]
        # Epochs: the previous one is accepted while a owns only what it was given ...
        assert a.request(member_epoch=1, topic_partitions=wire_partitions(a.assigned)) \
            .member_epoch == 2
        # ... not with partitions it was not given, nor a future or unknown epoch.
        assert a.request(member_epoch=1, topic_partitions=wire_partitions({(six, 3)})) \
            .error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert a.request(member_epoch=1).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert a.request(member_epoch=7).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        # A member that left gives its partitions up at once.
        left = b.leave()
        assert (left.error_code, left.member_id, left.member_epoch) == (0, b.member_id, -1)
        ra = a.beat()
        assert ra.member_epoch == 3 and numbers(a.assigned) == [0, 1, 2, 3, 4, 5]
        assert b.request(member_epoch=2).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    finally:
        a.close()
        b.close()


def test_uniform_assignor_is_sticky_and_balanced(cluster):
    six = topic_id(cluster, "six")
    members = [Member(cluster, "g-sticky") for _ in range(3)]
    try:
        for m in members[:2]:
            m.join()
        for _ in range(3):
            for m in members[:2]:
                m.beat()
        before = {m.member_id: numbers(m.assigned) for m in members[:2]}
        assert sorted(len(v) for v in before.values()) == [3, 3]
        members[2].join()
        d = describe(cluster, "g-sticky")
        targets = {mid: numbers(target_of(m)) for mid, m in members_of(d).items()}
        assert sorted(len(v) for v in targets.values()) == [2, 2, 2]
        for m in members[:2]:   # each keeps two of its three
            assert set(targets[m.member_id]) <= set(before[m.member_id])
        assert sorted(p for v in targets.values() for p in v) == list(range(6))
        assert {t for m in d.members for t, _ in target_of(m)} == {six}
    finally:
        for m in members:
            m.close()


def test_assignors_with_different_subscriptions():
    t1, t2 = uuid.UUID(int=1), uuid.UUID(int=2)
    partitions = {t1: 2, t2: 4}
    subscriptions = {"a": {t1, t2}, "b": {t2}}
    out = assign_uniform(["a", "b"], subscriptions, partitions, {})
    assert numbers(out["a"], t1) == [0, 1] and len(out["a"]) == len(out["b"]) == 3
    assert sorted(numbers(out["a"], t2) + numbers(out["b"], t2)) == [0, 1, 2, 3]
    # Sticky: with b gone and back, a keeps what it had as far as balance allows.
    alone = assign_uniform(["a"], {"a": {t1, t2}}, partitions, out)
    assert len(alone["a"]) == 6
    again = assign_uniform(["a", "b"], subscriptions, partitions, alone)
    assert len(again["a"]) == 3 and again["a"] >= {(t1, 0), (t1, 1)}
    ranged = assign_range(["a", "b"], subscriptions, partitions, {})
    assert numbers(ranged["a"], t1) == [0, 1] and numbers(ranged["a"], t2) == [0, 1]
    assert numbers(ranged["b"]) == [2, 3]


def test_range_assignor(cluster):
    ta, tb = topic_id(cluster, "three-a"), topic_id(cluster, "three-b")
    a = Member(cluster, "g-range", topics=["three-a", "three-b"], assignor="range")
    b = Member(cluster, "g-range", topics=["three-a", "three-b"], assignor="range")
    try:
        a.join()
        assert numbers(a.assigned, ta) == numbers(a.assigned, tb) == [0, 1, 2]
        b.join()
        d = describe(cluster, "g-range")
        assert d.assignor_name == "range"
        targets = {mid: target_of(m) for mid, m in members_of(d).items()}
        # Per topic: a keeps a range of two (the lowest it had), b gets the last one.
        assert numbers(targets[a.member_id], ta) == numbers(targets[a.member_id], tb) == [0, 1]
        assert numbers(targets[b.member_id], ta) == numbers(targets[b.member_id], tb) == [2]
        bad = Member(cluster, "g-range", assignor="sticky")
        resp = bad.join()
        assert resp.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR and "uniform" in resp.error_message
        bad.close()
    finally:
        a.close()
        b.close()


def test_static_member_leaves_and_comes_back(cluster):
    six = topic_id(cluster, "six")
    first = Member(cluster, "g-static", instance="host-1")
    other = Member(cluster, "g-static")
    try:
        first.join()
        other.join()
        first.beat()
        first.beat()
        other.beat()
        kept = set(first.assigned)
        assert numbers(kept, six) == [0, 1, 2]
        epoch = describe(cluster, "g-static").group_epoch
        # A second live member with the same instance id is refused.
        clash = Member(cluster, "g-static", instance="host-1")
        assert clash.join().error_code == ErrorCode.UNRELEASED_INSTANCE_ID
        # A temporary leave: epoch -2, the place and partitions kept, no new group epoch.
        left = first.leave(epoch=-2)
        assert (left.error_code, left.member_epoch) == (0, -2)
        d = describe(cluster, "g-static")
        assert d.group_epoch == epoch
        assert members_of(d)[first.member_id].member_epoch == -2
        # The next incarnation takes over the assignment at the current epoch.
        back = clash.join()
        assert back.error_code == 0 and back.member_id == clash.member_id != first.member_id
        assert back.member_epoch == epoch and clash.assigned == kept
        d = describe(cluster, "g-static")
        assert d.group_epoch == epoch and set(members_of(d)) == {clash.member_id,
                                                                 other.member_id}
        # The old incarnation is fenced by the new one.
        first.epoch = epoch
        assert first.beat().error_code == ErrorCode.FENCED_INSTANCE_ID
        # Leaving for good (-1) frees the partitions.
        assert clash.leave(epoch=-1).member_epoch == -1
        other.beat()
        assert numbers(other.assigned) == [0, 1, 2, 3, 4, 5]
        clash.close()
    finally:
        first.close()
        other.close()


def test_session_timeout_removes_a_member(cluster):
    a, b = Member(cluster, "g-session"), Member(cluster, "g-session")
    try:
        a.join()
        b.join()
        a.beat()
        a.beat()
        # b goes silent; a keeps heartbeating and gets everything after b's session.
        deadline = time.monotonic() + 10
        while len(a.assigned) < 6:
            assert time.monotonic() < deadline
            time.sleep(HEARTBEAT_MS / 1000)
            assert a.beat().error_code == 0
        assert time.monotonic() - (deadline - 10) >= SESSION_MS / 1000 - 0.3
        assert list(members_of(describe(cluster, "g-session"))) == [a.member_id]
        assert b.beat().error_code == ErrorCode.UNKNOWN_MEMBER_ID
        # It rejoins with its own member id and epoch 0.
        assert b.join().error_code == 0
    finally:
        a.close()
        b.close()


def test_member_that_does_not_revoke_in_time_is_fenced(cluster):
    slow = Member(cluster, "g-revoke", rebalance_ms=400)
    other = Member(cluster, "g-revoke")
    try:
        slow.join()
        everything = set(slow.assigned)
        other.join()
        assert slow.beat().member_epoch == 1            # told to give up half
        time.sleep(0.6)
        # Still owning them after its rebalance timeout: fenced, its partitions freed.
        resp = slow.beat(owned=everything)
        assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        other.beat()
        assert len(other.assigned) == 6
    finally:
        slow.close()
        other.close()


def test_heartbeat_errors(cluster):
    group = "g-errors"
    m = Member(cluster, group)
    try:
        def invalid(version=HB_V, **fields):
            resp = m.request(version=version, **fields)
            assert resp.error_code == ErrorCode.INVALID_REQUEST, resp
            return resp.error_message

        join = dict(member_epoch=0, rebalance_timeout_ms=1000, subscribed_topic_names=["six"],
                    topic_partitions=[])
        assert "RebalanceTimeoutMs" in invalid(**dict(join, rebalance_timeout_ms=-1))
        assert "TopicPartitions" in invalid(**dict(join, topic_partitions=None))
        assert "SubscribedTopic" in invalid(**dict(join, subscribed_topic_names=None))
        assert "MemberId" in invalid(**dict(join, member_id=""))         # v1: client's id
        assert "MemberEpoch" in invalid(member_epoch=-3)
        assert "InstanceId" in invalid(member_epoch=-2)                  # static leave only
        # Version 0 still takes a join without a member id and gives one (Kafka's form).
        v0 = m.request(version=0, **dict(join, member_id=""))
        assert v0.error_code == 0 and len(v0.member_id) == 22
        # Unknown member, unknown group.
        assert m.request(member_epoch=3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        other = Member(cluster, "g-errors-none")
        assert other.request(member_epoch=3).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert other.leave().error_code == ErrorCode.GROUP_ID_NOT_FOUND
        other.close()
        bad = m.request(**dict(join, subscribed_topic_regex="(unclosed"))
        assert bad.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
        # The group is full at group.consumer.max.size members.
        extra = [Member(cluster, group) for _ in range(MAX_SIZE)]
        codes = [e.join().error_code for e in extra]
        assert codes == [0] * (MAX_SIZE - 1) + [ErrorCode.GROUP_MAX_SIZE_REACHED]
        for e in extra:
            e.close()
        # Another broker is not the coordinator; a moved coordinator keeps the group.
        coordinator = cluster.coordinator(group=group)
        elsewhere = next(b for b in cluster.broker_ids if b != coordinator)
        with RawClient(cluster.address(elsewhere)) as c:
            resp = c.request(ConsumerGroupHeartbeatRequest(
                group_id=group, member_id=m.member_id, member_epoch=v0.member_epoch), HB_V)
            assert resp.error_code == ErrorCode.NOT_COORDINATOR
        cluster.move_coordinator(elsewhere, group=group)
        try:
            assert m.request(member_epoch=v0.member_epoch, member_id=v0.member_id) \
                .error_code == ErrorCode.NOT_COORDINATOR
            with RawClient(cluster.address(elsewhere)) as c:
                resp = c.request(ConsumerGroupHeartbeatRequest(
                    group_id=group, member_id=v0.member_id, member_epoch=v0.member_epoch),
                    HB_V)
                assert resp.error_code == 0 and resp.member_epoch >= v0.member_epoch
        finally:
            cluster.move_coordinator(coordinator, group=group)
        # Injected errors.
        cluster.inject_errors("ConsumerGroupHeartbeat", ["COORDINATOR_LOAD_IN_PROGRESS"],
                              broker=coordinator)
        assert m.join().error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        cluster.inject_errors("ConsumerGroupDescribe", ["COORDINATOR_NOT_AVAILABLE"],
                              broker=coordinator)
        assert describe(cluster, group).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    finally:
        m.close()


def test_topic_changes_start_a_new_assignment(cluster):
    m = Member(cluster, "g-topics", topics=["later"])
    r = Member(cluster, "g-topics-regex", topics=None, regex=r"rx\.[0-9]+")
    try:
        m.join()
        r.join()
        assert m.assigned == set() and r.assigned == set()
        epoch = describe(cluster, "g-topics").group_epoch
        cluster.create_topic("later", partitions=2, replication_factor=1)
        cluster.create_topic("rx.1", partitions=2, replication_factor=1)
        assert describe(cluster, "g-topics").group_epoch == epoch + 1
        m.beat()
        r.beat()
        assert numbers(m.assigned) == [0, 1]
        assert numbers(r.assigned, topic_id(cluster, "rx.1")) == [0, 1]
        d = describe(cluster, "g-topics-regex")
        assert d.members[0].subscribed_topic_regex == r"rx\.[0-9]+"
        with RawClient(cluster.address(cluster.broker_ids[0])) as c:
            resp = c.request(CreatePartitionsRequest(topics=[
                CreatePartitionsRequest.CreatePartitionsTopic(name="later", count=3)],
                timeout_ms=5000), 3)
            assert resp.results[0].error_code == 0
        m.beat()
        assert numbers(m.assigned) == [0, 1, 2]
        cluster.delete_topic("later")
        resp = m.beat()
        assert resp.member_epoch == m.epoch and m.assigned == set()
    finally:
        m.close()
        r.close()


def test_offsets_with_member_epochs(cluster):
    group = "g-offsets"
    m = Member(cluster, group)
    with coordinator_client(cluster, group) as c:
        try:
            # A group with only offsets (a simple commit) is classic and empty: a join
            # turns it into a consumer group and the offsets stay.
            assert commit(c, group, "", -1, offset=3) == 0
            m.join()
            assert fetch_offsets(c, group)[1] == [(0, 3), (1, -1)]
            assert commit(c, group, m.member_id, m.epoch, offset=11) == 0
            assert commit(c, group, m.member_id, m.epoch + 1) == ErrorCode.STALE_MEMBER_EPOCH
            assert commit(c, group, m.member_id, m.epoch - 1) == ErrorCode.STALE_MEMBER_EPOCH
            assert commit(c, group, "nobody", m.epoch) == ErrorCode.UNKNOWN_MEMBER_ID
            assert commit(c, group, "", -1) == ErrorCode.UNKNOWN_MEMBER_ID   # group has members
            assert commit(c, group, m.member_id, m.epoch, version=8) == \
                ErrorCode.UNSUPPORTED_VERSION
            assert fetch_offsets(c, group, m.member_id, m.epoch) == (0, [(0, 11), (1, -1)])
            assert fetch_offsets(c, group, m.member_id, m.epoch + 1)[0] == \
                ErrorCode.STALE_MEMBER_EPOCH
            assert fetch_offsets(c, group, "nobody", 1)[0] == ErrorCode.UNKNOWN_MEMBER_ID
            # No group at all: v9 says so, older versions ILLEGAL_GENERATION.
            with coordinator_client(cluster, "g-offsets-none") as other:
                assert commit(other, "g-offsets-none", "x", 1) == ErrorCode.GROUP_ID_NOT_FOUND
                assert commit(other, "g-offsets-none", "x", 1, version=8) == \
                    ErrorCode.ILLEGAL_GENERATION
            m.leave()
            assert commit(c, group, "", -1, offset=12) == 0                   # empty again
            assert fetch_offsets(c, group)[1] == [(0, 12), (1, -1)]
        finally:
            m.close()


def test_classic_apis_and_consumer_groups(cluster):
    group = "g-kinds"
    m = Member(cluster, group)
    with coordinator_client(cluster, group) as c:
        try:
            m.join()

            def classic_join(group_id):
                with coordinator_client(cluster, group_id) as j:
                    return j.request(JoinGroupRequest(
                        group_id=group_id, session_timeout_ms=6000, rebalance_timeout_ms=3000,
                        member_id="", group_instance_id="static", protocol_type="consumer",
                        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                            name="range", metadata=b"")]), 5)

            assert classic_join(group).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
            # A classic group with a member refuses consumer-protocol members.
            assert classic_join("g-kinds-classic").error_code == 0
            newcomer = Member(cluster, "g-kinds-classic")
            resp = newcomer.join()
            assert resp.error_code == ErrorCode.GROUP_ID_NOT_FOUND and \
                "upgrade" in resp.error_message
            newcomer.close()
            # DescribeGroups knows classic groups only (Kafka 4: Dead before v6).
            described = c.request(DescribeGroupsRequest(groups=[group]), 5).groups[0]
            assert (described.error_code, described.group_state, described.members) == \
                (0, "Dead", [])
            def list_groups(request, version=5):   # each broker lists its own groups
                out = []
                for broker in cluster.broker_ids:
                    with RawClient(cluster.address(broker)) as b:
                        out += b.request(request, version).groups
                return out

            kinds = {g.group_id: (g.group_type, g.protocol_type, g.group_state)
                     for g in list_groups(ListGroupsRequest())}
            assert kinds[group] == ("consumer", "consumer", "Stable")
            assert kinds["g-kinds-classic"][0] == "classic"
            only = {g.group_id for g in list_groups(ListGroupsRequest(
                types_filter=["Consumer"], states_filter=["stable"]))}
            assert group in only and "g-kinds-classic" not in only
            assert group in {g.group_id for g in list_groups(ListGroupsRequest(), 4)}
            # ConsumerGroupDescribe: consumer groups only.
            groups = [describe(cluster, g) for g in (group, "g-kinds-classic", "g-kinds-none")]
            assert [g.error_code for g in groups] == \
                [0, ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.GROUP_ID_NOT_FOUND]
            assert groups[1].error_message == "Group g-kinds-classic is not a consumer group."
            member = groups[0].members[0]
            assert (member.member_id, member.client_id, member.subscribed_topic_names) == \
                (m.member_id, "raw-test", ["six"])
            assert member.assignment.topic_partitions[0].topic_name == "six"
            # DeleteGroups: not while it has members.
            delete = DeleteGroupsRequest(groups_names=[group])
            assert c.request(delete, 2).results[0].error_code == ErrorCode.NON_EMPTY_GROUP
            m.leave()
            assert c.request(delete, 2).results[0].error_code == 0
            assert m.request(member_epoch=5).error_code == ErrorCode.GROUP_ID_NOT_FOUND
            # An empty consumer group becomes classic on a JoinGroup.
            m.join()
            m.leave()
            assert classic_join(group).error_code == 0
        finally:
            m.close()


# --------------------------------------------------------------------------- confluent-kafka


def test_confluent_kafka_consumers_share_a_topic(cluster):
    ck = pytest.importorskip("confluent_kafka")
    topic = "ck-shared"
    cluster.create_topic(topic, partitions=6, replication_factor=3)
    producer = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers})

    def produce(first, n):
        for i in range(first, first + n):
            producer.produce(topic, value=b"%d" % i, partition=i % 6)
        assert producer.flush(30) == 0

    produce(0, 300)
    config = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "ck-group",
              "group.protocol": "consumer", "auto.offset.reset": "earliest",
              "enable.auto.commit": False}
    owned = {}
    problems = []

    def consumer(i):
        def on_assign(_c, parts):
            for tp in parts:
                holder = next((j for j, ps in owned.items() if tp.partition in ps), None)
                if holder is not None:
                    problems.append(f"{tp.partition} given to {i} while {holder} has it")
            owned.setdefault(i, set()).update(tp.partition for tp in parts)

        def on_revoke(_c, parts):
            owned[i].difference_update(tp.partition for tp in parts)

        c = ck.Consumer(dict(config, **{"client.id": f"ck-{i}"}))
        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        return c

    consumers = {i: consumer(i) for i in range(3)}
    values = []

    def commit(c, m):
        # A commit sent just before the member's heartbeat brought a new epoch is
        # STALE_MEMBER_EPOCH (Kafka 4 checks the epoch; librdkafka does not retry it):
        # the application commits again, with the epoch it has now.
        for _attempt in range(20):
            try:
                c.commit(m, asynchronous=False)
                return
            except ck.KafkaException as exc:
                if exc.args[0].code() != ck.KafkaError.STALE_MEMBER_EPOCH:
                    raise
                time.sleep(0.05)
        raise AssertionError("the commit stayed STALE_MEMBER_EPOCH")

    def consume_until(count, seconds=30):
        deadline = time.monotonic() + seconds
        while len(values) < count:
            assert time.monotonic() < deadline, f"{len(values)} of {count} consumed"
            for i, c in list(consumers.items()):
                m = c.poll(0.02)
                if m is None:
                    continue
                assert m.error() is None, m.error()
                assert m.partition() in owned.get(i, ()), (i, m.partition(), owned)
                values.append(int(m.value()))
                commit(c, m)

    def settle(predicate, seconds=15):
        deadline = time.monotonic() + seconds
        while not predicate():
            assert time.monotonic() < deadline, owned
            for c in consumers.values():
                assert c.poll(0.02) is None   # everything produced is consumed already

    try:
        consume_until(300)
        # The first member may have had everything for a moment; uniform spreads it 2/2/2.
        settle(lambda: sorted(len(ps) for ps in owned.values()) == [2, 2, 2] and
               describe(cluster, "ck-group").group_state == "Stable")
        assert len(describe(cluster, "ck-group").members) == 3
        # One closes: the others take its partitions over.
        gone = consumers.pop(0)
        gone.close()
        owned.pop(0, None)
        produce(300, 300)
        consume_until(600)
        assert sorted(p for ps in owned.values() for p in ps) == list(range(6))
        assert sorted(values) == list(range(600))           # each exactly once
        committed = consumers[1].committed([ck.TopicPartition(topic, p) for p in range(6)], 10)
        assert [tp.offset for tp in committed] == [100] * 6
        assert not problems, problems
    finally:
        for c in consumers.values():
            c.close()
