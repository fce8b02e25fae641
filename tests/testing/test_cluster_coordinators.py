"""The group and transaction coordinators of the test cluster, on the wire with a bare
client: the join/sync protocol, rebalances on join and on session expiry, static members,
committed offsets, transactional ids with fencing and the transaction timeout."""
from __future__ import annotations

import time

import pytest

from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    ApiKey,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    EndTxnRequest,
    FetchRequest,
    HeartbeatRequest,
    InitProducerIdRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from kafka_proto.records import read_batches

from kafka_client import Producer
from kafka_client.testing import Cluster

from rawclient import RawClient  # tests/testing/rawclient.py

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

JOIN_V = 5
SYNC_V = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(brokers=2, data_dir=str(tmp_path_factory.mktemp("coordinators")),
                 broker_config={"group.min.session.timeout.ms": 100}) as c:
        c.create_topic("t", partitions=2, replication_factor=2)
        yield c


def join_request(group, member_id="", session_ms=6000, instance=None, metadata=b"m",
                 rebalance_ms=3000):
    return JoinGroupRequest(group_id=group, session_timeout_ms=session_ms,
                            rebalance_timeout_ms=rebalance_ms, member_id=member_id,
                            group_instance_id=instance, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                                name="range", metadata=metadata)])


def coordinator_client(cluster, group):
    return RawClient(cluster.address(cluster.coordinator(group=group)))


def join_alone(client, group, **kwargs):
    """MEMBER_ID_REQUIRED, then the join with the given id."""
    first = client.request(join_request(group, **kwargs), JOIN_V)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    return client.request(join_request(group, member_id=first.member_id, **kwargs), JOIN_V)


def sync(client, group, generation, member_id, assignments=(), instance=None):
    return client.request(SyncGroupRequest(
        group_id=group, generation_id=generation, member_id=member_id,
        group_instance_id=instance,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                     for m, a in assignments]), SYNC_V)


def heartbeat(client, group, generation, member_id, instance=None):
    return client.request(HeartbeatRequest(group_id=group, generation_id=generation,
                                           member_id=member_id, group_instance_id=instance),
                          4).error_code


def test_join_sync_and_a_rebalance_when_a_member_joins(cluster):
    group = "g-join"
    with coordinator_client(cluster, group) as a, coordinator_client(cluster, group) as b:
        ja = join_alone(a, group, metadata=b"meta-a")
        assert ja.error_code == 0 and ja.generation_id == 1 and ja.leader == ja.member_id
        assert [(m.member_id, m.metadata) for m in ja.members] == [(ja.member_id, b"meta-a")]
        sa = sync(a, group, 1, ja.member_id, [(ja.member_id, b"all")])
        assert (sa.error_code, sa.assignment) == (0, b"all")
        assert heartbeat(a, group, 1, ja.member_id) == 0
        # b joins: a is told to rejoin; the join completes when both are in.
        first = b.request(join_request(group), JOIN_V)
        b.send(join_request(group, member_id=first.member_id, metadata=b"meta-b"), JOIN_V)
        time.sleep(0.1)
        assert heartbeat(a, group, 1, ja.member_id) == ErrorCode.REBALANCE_IN_PROGRESS
        ja2 = a.request(join_request(group, member_id=ja.member_id, metadata=b"meta-a"), JOIN_V)
        jb = b.receive(ApiKey.JOIN_GROUP, JOIN_V)
        assert ja2.generation_id == jb.generation_id == 2
        assert ja2.leader == ja.member_id == jb.leader
        assert sorted(m.metadata for m in ja2.members) == [b"meta-a", b"meta-b"]
        assert jb.members == []
        b.send(SyncGroupRequest(group_id=group, generation_id=2, member_id=jb.member_id,
                                assignments=[]), SYNC_V)
        sa = sync(a, group, 2, ja.member_id, [(ja.member_id, b"p0"), (jb.member_id, b"p1")])
        sb = b.receive(ApiKey.SYNC_GROUP, SYNC_V)
        assert (sa.assignment, sb.assignment) == (b"p0", b"p1")
        assert heartbeat(b, group, 1, jb.member_id) == ErrorCode.ILLEGAL_GENERATION
        assert heartbeat(b, group, 2, "nobody") == ErrorCode.UNKNOWN_MEMBER_ID
        described = a.request(DescribeGroupsRequest(groups=[group]), 5).groups[0]
        assert described.group_state == "Stable" and len(described.members) == 2
        assert a.request(DeleteGroupsRequest(groups_names=[group]), 2).results[0].error_code \
            == ErrorCode.NON_EMPTY_GROUP


def test_session_expiry_removes_a_member(cluster):
    group = "g-expiry"
    with coordinator_client(cluster, group) as a, coordinator_client(cluster, group) as b:
        ja = join_alone(a, group, session_ms=3000)
        sync(a, group, 1, ja.member_id, [(ja.member_id, b"x")])
        first = b.request(join_request(group, session_ms=300), JOIN_V)
        b.send(join_request(group, member_id=first.member_id, session_ms=300), JOIN_V)
        a.request(join_request(group, member_id=ja.member_id, session_ms=3000), JOIN_V)
        jb = b.receive(ApiKey.JOIN_GROUP, JOIN_V)
        assert jb.generation_id == 2
        b.send(SyncGroupRequest(group_id=group, generation_id=2, member_id=jb.member_id,
                                assignments=[]), SYNC_V)
        sync(a, group, 2, ja.member_id, [(ja.member_id, b"x"), (jb.member_id, b"y")])
        b.receive(ApiKey.SYNC_GROUP, SYNC_V)
        # b stops heartbeating: after its 300 ms session, a is asked to rebalance alone.
        deadline = time.monotonic() + 5
        while heartbeat(a, group, 2, ja.member_id) != ErrorCode.REBALANCE_IN_PROGRESS:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        ja3 = a.request(join_request(group, member_id=ja.member_id, session_ms=3000), JOIN_V)
        assert ja3.generation_id == 3 and [m.member_id for m in ja3.members] == [ja.member_id]


def test_a_pending_member_that_never_joins_is_forgotten_after_its_session(cluster):
    """KIP-394: a member told MEMBER_ID_REQUIRED that never joins with its id (it closed)
    is forgotten after its session timeout, as Kafka's coordinator does: the join goes on
    without it, long before the 30 s rebalance timeout (it waited for that: a soak group
    sat 90 s with every live member in JoinGroup, tools/soak.py group --seed 22)."""
    group = "g-pending"
    with coordinator_client(cluster, group) as a, coordinator_client(cluster, group) as b:
        gone = b.request(join_request(group, session_ms=300), JOIN_V)
        assert gone.error_code == ErrorCode.MEMBER_ID_REQUIRED    # and b never comes back
        start = time.monotonic()
        ja = join_alone(a, group, rebalance_ms=30000)
        assert ja.generation_id == 1 and [m.member_id for m in ja.members] == [ja.member_id]
        assert time.monotonic() - start < 15


def test_a_static_member_rejoins_without_a_rebalance(cluster):
    group = "g-static"
    with coordinator_client(cluster, group) as a:
        j1 = a.request(join_request(group, instance="host-1"), JOIN_V)
        assert j1.error_code == 0 and j1.generation_id == 1   # no MEMBER_ID_REQUIRED
        sync(a, group, 1, j1.member_id, [(j1.member_id, b"mine")], instance="host-1")
    with coordinator_client(cluster, group) as restarted:
        j2 = restarted.request(join_request(group, instance="host-1"), JOIN_V)
        assert j2.error_code == 0 and j2.generation_id == 1
        assert j2.member_id != j1.member_id
        s2 = sync(restarted, group, 1, j2.member_id, instance="host-1")
        assert s2.assignment == b"mine"
        # The old incarnation is fenced.
        assert heartbeat(restarted, group, 1, j1.member_id, instance="host-1") == \
            ErrorCode.FENCED_INSTANCE_ID
        assert heartbeat(restarted, group, 1, j2.member_id, instance="host-1") == 0


def test_committed_offsets(cluster):
    group = "g-offsets"
    with coordinator_client(cluster, group) as c:
        def commit(generation=-1, member="", partition=0, offset=5, topic="t"):
            resp = c.request(OffsetCommitRequest(
                group_id=group, generation_id_or_member_epoch=generation, member_id=member,
                topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=partition, committed_offset=offset,
                        committed_metadata="meta")])]), 8)
            return resp.topics[0].partitions[0].error_code

        assert commit(offset=5) == 0                       # a simple (memberless) commit
        assert commit(topic="missing") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        j = join_alone(c, group)
        # Between the join and the sync the assignment is not known yet.
        assert commit(generation=1, member=j.member_id) == ErrorCode.REBALANCE_IN_PROGRESS
        sync(c, group, 1, j.member_id, [(j.member_id, b"a")])
        assert commit(generation=1, member=j.member_id, partition=1, offset=9) == 0
        assert commit(generation=7, member=j.member_id) == ErrorCode.ILLEGAL_GENERATION
        # a simple commit to a live group: from a member Kafka does not know
        assert commit() == ErrorCode.UNKNOWN_MEMBER_ID
        fetched = c.request(OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=group, topics=[OffsetFetchRequest.OffsetFetchRequestTopics(
                name="t", partition_indexes=[0, 1])])]), 9)
        parts = fetched.groups[0].topics[0].partitions
        assert [(p.partition_index, p.committed_offset, p.metadata) for p in parts] == \
            [(0, 5, "meta"), (1, 9, "meta")]


def test_transactional_ids_fencing_and_timeout(cluster):
    tid = "txn-raw"
    coordinator = cluster.coordinator(transactional_id=tid)
    with RawClient(cluster.address(coordinator)) as c:
        init = c.request(InitProducerIdRequest(transactional_id=tid,
                                               transaction_timeout_ms=300), 4)
        assert init.error_code == 0 and init.producer_epoch == 0
        again = c.request(InitProducerIdRequest(transactional_id=tid,
                                                transaction_timeout_ms=300), 4)
        assert (again.producer_id, again.producer_epoch) == (init.producer_id, 1)

        def add(epoch):
            resp = c.request(AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=tid, v3_and_below_producer_id=init.producer_id,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                    name="t", partitions=[0])]), 3)
            return resp.results_by_topic_v3_and_below[0].results_by_partition[0] \
                .partition_error_code

        assert add(0) == ErrorCode.PRODUCER_FENCED          # the first incarnation
        assert add(1) == 0
        time.sleep(0.8)                                     # past the 300 ms timeout
        end = c.request(EndTxnRequest(transactional_id=tid, producer_id=init.producer_id,
                                      producer_epoch=1, committed=True), 3)
        assert end.error_code == ErrorCode.PRODUCER_FENCED   # aborted and bumped
        other = cluster.brokers[0].id if coordinator != 1 else 2
        with RawClient(cluster.address(other)) as wrong:
            resp = wrong.request(InitProducerIdRequest(transactional_id=tid,
                                                       transaction_timeout_ms=1000), 4)
            assert resp.error_code == ErrorCode.NOT_COORDINATOR
    # The timed-out transaction left an ABORT marker in partition 0.
    leader = cluster.leader("t", 0)
    with RawClient(cluster.address(leader)) as c:
        resp = c.request(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1,
                                      max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
                                          topic="t", partitions=[FetchRequest.FetchPartition(
                                              partition=0, fetch_offset=0,
                                              partition_max_bytes=1 << 20)])]), 12)
        markers = [b.control_record() for b in read_batches(resp.responses[0].partitions[0].records)
                   if b.is_control and b.producer_id == init.producer_id]
        assert [m.is_abort for m in markers] == [True]


def test_a_transactional_commit_naming_a_member_is_checked_at_any_generation(cluster):
    """TxnOffsetCommit v3+ as Kafka's ClassicGroup.validateOffsetCommit checks it: with
    generation -1 a member id is still checked while the group has members (a member
    that has left is refused UNKNOWN_MEMBER_ID, not taken for a simple commit); without a
    member id, or once the group is empty, nothing is checked. (Generation -1 skipped
    every check: the commit of a member past max.poll.interval.ms went through.)"""
    group, tid = "g-txn-check", "txn-check"
    with coordinator_client(cluster, group) as g, \
            RawClient(cluster.address(cluster.coordinator(transactional_id=tid))) as t:
        joined = join_alone(g, group)
        assert sync(g, group, 1, joined.member_id, [(joined.member_id, b"all")]) \
            .error_code == 0
        init = t.request(InitProducerIdRequest(transactional_id=tid,
                                               transaction_timeout_ms=30000), 4)
        assert t.request(AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=init.producer_id,
            producer_epoch=init.producer_epoch, group_id=group), 3).error_code == 0

        def commit(generation, member_id):
            resp = g.request(TxnOffsetCommitRequest(
                transactional_id=tid, group_id=group, producer_id=init.producer_id,
                producer_epoch=init.producer_epoch, generation_id=generation,
                member_id=member_id, group_instance_id=None,
                topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                    name="t", partitions=[
                        TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=5,
                            committed_leader_epoch=-1, committed_metadata="")])]), 3)
            return resp.topics[0].partitions[0].error_code

        assert commit(-1, "member-that-left") == ErrorCode.UNKNOWN_MEMBER_ID
        assert commit(-1, joined.member_id) == ErrorCode.ILLEGAL_GENERATION
        assert commit(1, "member-that-left") == ErrorCode.UNKNOWN_MEMBER_ID
        assert commit(1, joined.member_id) == 0
        assert commit(-1, "") == 0            # no member named: not checked
        g.request(LeaveGroupRequest(group_id=group, members=[
            LeaveGroupRequest.MemberIdentity(member_id=joined.member_id)]), 3)
        assert commit(-1, "member-that-left") == 0   # an empty group: not checked


def add_partition(client, tid, init, topic, partition):
    resp = client.request(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=init.producer_id,
        v3_and_below_producer_epoch=init.producer_epoch,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
            name=topic, partitions=[partition])]), 3)
    return resp.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def test_init_producer_id_waits_until_the_last_markers_are_replicated(cluster):
    """InitProducerId while the last transaction's markers are not on every in-sync
    replica yet is answered CONCURRENT_TRANSACTIONS, as Kafka's coordinator answers while
    that transaction is PREPARE_COMMIT (clients retry), then bumps the epoch once they
    are. (It was answered at once, whatever the markers.)"""
    tid = "txn-markers-pending"
    leader = cluster.leader("t", 1)
    with RawClient(cluster.address(cluster.coordinator(transactional_id=tid))) as c:
        init = c.request(InitProducerIdRequest(transactional_id=tid,
                                               transaction_timeout_ms=30000), 4)
        assert init.error_code == 0
        assert add_partition(c, tid, init, "t", 1) == 0
        cluster.wait_in_sync("t")
        cluster.set_latency(5, broker=leader, apis=["Fetch"])   # the follower lags behind
        try:
            assert c.request(EndTxnRequest(transactional_id=tid, producer_id=init.producer_id,
                                           producer_epoch=init.producer_epoch,
                                           committed=True), 3).error_code == 0
            again = c.request(InitProducerIdRequest(transactional_id=tid,
                                                    transaction_timeout_ms=30000), 4)
            assert again.error_code == ErrorCode.CONCURRENT_TRANSACTIONS
            deadline = time.monotonic() + 40
            while again.error_code == ErrorCode.CONCURRENT_TRANSACTIONS and \
                    time.monotonic() < deadline:
                time.sleep(0.1)
                again = c.request(InitProducerIdRequest(transactional_id=tid,
                                                        transaction_timeout_ms=30000), 4)
        finally:
            cluster.clear_faults()
        assert (again.error_code, again.producer_id, again.producer_epoch) == \
            (0, init.producer_id, init.producer_epoch + 1)


def test_a_producer_retries_init_producer_id_until_the_last_markers_are_replicated(
        cluster):
    """Our transactional producer taking over a transactional id just after its last
    commit: the coordinator answers CONCURRENT_TRANSACTIONS until that commit's markers
    are replicated, and init_transactions() retries until it gets its epoch."""
    tid = "txn-takeover"
    leader = cluster.leader("t", 1)
    conf = {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": tid}
    first = Producer(conf)
    try:
        first.init_transactions(30)
        first.begin_transaction()
        first.produce("t", b"committed", partition=1)
        assert first.flush(30) == 0
        cluster.wait_in_sync("t")
        # The follower lags behind: held 10 s, the markers outlast the second producer's
        # start on a loaded machine (its first InitProducerId must meet them).
        cluster.set_latency(10, broker=leader, apis=["Fetch"])
        since = cluster.clear_request_log()
        first.commit_transaction(30)
    finally:
        first.close()
    second = Producer(conf)
    try:
        second.init_transactions(60)
    finally:
        cluster.clear_faults()
        second.close()
    answers = [e.errors for e in cluster.request_log(since, api="InitProducerId")]
    assert answers[0] == ["CONCURRENT_TRANSACTIONS"] and answers[-1] == [], answers


def test_a_commit_at_generation_minus_one_naming_a_member_to_an_empty_group_is_taken(
        cluster):
    """OffsetCommit with generation -1 and a member id to a classic group without members
    (or to no group yet) is taken unchecked, as Kafka's ClassicGroup.validateOffsetCommit
    takes it (it was refused UNKNOWN_MEMBER_ID); while the group has members, the member
    named is checked."""
    group = "g-empty-commit"
    with coordinator_client(cluster, group) as c:
        def commit(member_id, offset):
            resp = c.request(OffsetCommitRequest(
                group_id=group, generation_id_or_member_epoch=-1, member_id=member_id,
                topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset)])]), 8)
            return resp.topics[0].partitions[0].error_code

        def committed():
            resp = c.request(OffsetFetchRequest(groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=[
                    OffsetFetchRequest.OffsetFetchRequestTopics(
                        name="t", partition_indexes=[0])])]), 9)
            return resp.groups[0].topics[0].partitions[0].committed_offset

        assert commit("never-joined", 3) == 0                 # no group yet
        assert committed() == 3
        joined = join_alone(c, group)
        assert sync(c, group, 1, joined.member_id, [(joined.member_id, b"all")]) \
            .error_code == 0
        assert commit("never-joined", 4) == ErrorCode.UNKNOWN_MEMBER_ID   # members: checked
        c.request(LeaveGroupRequest(group_id=group, members=[
            LeaveGroupRequest.MemberIdentity(member_id=joined.member_id)]), 3)
        assert commit(joined.member_id, 5) == 0               # empty again: taken
        assert committed() == 5
