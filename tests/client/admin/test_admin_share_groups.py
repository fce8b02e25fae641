"""The admin client's share group calls (KIP-932) against scripted fake brokers
(tests/client/admin/fake_cluster.py): the requests' bytes, where they go (the group's
coordinator, followed when it moves), what the answers become, and the input refused
before anything is sent."""
from __future__ import annotations

import struct
import uuid

import pytest
from fake_cluster import FakeCluster, admins, error_of  # noqa: F401 (a fixture)

from kafka_client import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
from kafka_client._model import ConsumerGroupType
from kafka_client.admin import ShareGroupDescription
from kafka_client.errors import KafkaError
from kafka_client.types import OFFSET_INVALID
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    AlterShareGroupOffsetsResponse,
    ApiKey,
    DeleteGroupsResponse,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponse,
    ListGroupsResponse,
    ShareGroupDescribeResponse,
)

TID = uuid.UUID(int=7)


def i32(v):
    return struct.pack(">i", v)


def i64(v):
    return struct.pack(">q", v)


def compact(text):
    return bytes([len(text) + 1]) + text.encode()


# --------------------------------------------------------------------------- describe


def share_described(group, code=0, members=()):
    R = ShareGroupDescribeResponse
    return R(groups=[R.DescribedGroup(
        error_code=code, group_id=group, group_state="Stable", group_epoch=5,
        assignment_epoch=5, assignor_name="simple", members=list(members),
        authorized_operations=-(2 ** 31))])


def share_member(member_id, partitions):
    R = ShareGroupDescribeResponse
    return R.Member(member_id=member_id, rack_id="r1", member_epoch=5, client_id="c-" + member_id,
                    client_host="/127.0.0.1", subscribed_topic_names=["t"],
                    assignment=R.Assignment(topic_partitions=[R.TopicPartitions(
                        topic_id=TID, topic_name="t", partitions=partitions)]))


def test_describe_share_groups_follows_the_coordinator_and_decodes_the_members(admins):
    with FakeCluster(nodes=(1, 2)) as cluster:
        cluster.coordinator = 1

        def describe(node, req, version):
            if node == 1:
                cluster.coordinator = 2
                return share_described(req.group_ids[0], code=ErrorCode.NOT_COORDINATOR)
            return share_described(req.group_ids[0], members=[
                share_member("a", [2, 0]), share_member("b", [1])])

        cluster.handle(ApiKey.SHARE_GROUP_DESCRIBE, describe)
        desc = admins(cluster).describe_share_groups(["g"])["g"].result(10)
        assert isinstance(desc, ShareGroupDescription)
        assert desc.state == ConsumerGroupState.STABLE and desc.type == ConsumerGroupType.SHARE
        assert (desc.group_epoch, desc.target_assignment_epoch, desc.partition_assignor) == \
            (5, 5, "simple")
        assert desc.coordinator.id == 2 and desc.authorized_operations is None
        assert [(m.member_id, m.client_id, m.host, m.member_epoch, m.rack_id,
                 [(tp.topic, tp.partition) for tp in m.assignment.topic_partitions])
                for m in desc.members] == [
            ("a", "c-a", "/127.0.0.1", 5, "r1", [("t", 0), ("t", 2)]),
            ("b", "c-b", "/127.0.0.1", 5, "r1", [("t", 1)])]
        sent = cluster.requests(ApiKey.SHARE_GROUP_DESCRIBE)
        assert [n for n, _ in sent] == [1, 2]
        # KIP-932's stable version 1: the group ids and the authorized-operations flag
        assert [v for _n, _k, v, _r in cluster.seen if _k == ApiKey.SHARE_GROUP_DESCRIBE] \
            == [1, 1]
        assert sent[1][1].encode(1) == b"\x02" + compact("g") + b"\x00" + b"\x00"


def test_describe_share_groups_fails_a_group_that_is_none_with_the_brokers_error(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.SHARE_GROUP_DESCRIBE, lambda node, req, v: share_described(
            req.group_ids[0], code=ErrorCode.GROUP_ID_NOT_FOUND))
        err = error_of(admins(cluster).describe_share_groups(["g"])["g"])
        assert err.code() == KafkaError.GROUP_ID_NOT_FOUND and not err.retriable()


# --------------------------------------------------------------------------- offsets


def described_offsets(req, partitions, code=0):
    R = DescribeShareGroupOffsetsResponse
    return R(groups=[R.DescribeShareGroupOffsetsResponseGroup(
        group_id=g.group_id, error_code=code, topics=[] if code else [
            R.DescribeShareGroupOffsetsResponseTopic(topic_name="t", topic_id=TID, partitions=[
                R.DescribeShareGroupOffsetsResponsePartition(
                    partition_index=p, start_offset=start, leader_epoch=epoch,
                    error_code=err) for p, start, epoch, err in partitions])])
        for g in req.groups])


def test_list_share_group_offsets_sends_the_partitions_and_reads_the_start_offsets(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        codes = iter([ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, 0, 0])
        cluster.handle(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, lambda node, req, v: (
            described_offsets(req, [(1, 40, 3, 0), (0, -1, -1, 0),
                                     (2, -1, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)],
                              code=next(codes))))
        admin = admins(cluster)
        named = admin.list_share_group_offsets([ConsumerGroupTopicPartitions(
            "g", [TopicPartition("t", 2), TopicPartition("t", 0), TopicPartition("t", 1)])])
        parts = named["g"].result(10).topic_partitions
        # sorted; -1 (no member read it yet) is OFFSET_INVALID; the partition's own error
        assert [(tp.partition, tp.offset, tp.leader_epoch, tp.error and tp.error.code())
                for tp in parts] == [(0, OFFSET_INVALID, None, None), (1, 40, 3, None),
                                     (2, OFFSET_INVALID, None,
                                      KafkaError.UNKNOWN_TOPIC_OR_PART)]
        every = admin.list_share_group_offsets([ConsumerGroupTopicPartitions("g")])
        assert [tp.partition for tp in every["g"].result(10).topic_partitions] == [0, 1, 2]
        sent = [r for _n, r in cluster.requests(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)]
        assert len(sent) == 3  # the loading coordinator was asked again
        assert sent[0].encode(0) == (b"\x02" + compact("g") + b"\x02" + compact("t") + b"\x04"
                                     + i32(2) + i32(0) + i32(1) + b"\x00" + b"\x00" + b"\x00")
        # null topics: every share-partition of the group
        assert sent[2].encode(0) == b"\x02" + compact("g") + b"\x00" + b"\x00" + b"\x00"
        assert len(cluster.requests(ApiKey.FIND_COORDINATOR)) == 1


def test_list_share_group_offsets_of_two_groups_a_future_each(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, lambda node, req, v: (
            described_offsets(req, [(0, 9, 1, 0)],
                              code=ErrorCode.GROUP_ID_NOT_FOUND
                              if req.groups[0].group_id == "gone" else 0)))
        futures = admins(cluster).list_share_group_offsets(
            [ConsumerGroupTopicPartitions("g"), ConsumerGroupTopicPartitions("gone")])
        assert [tp.offset for tp in futures["g"].result(10).topic_partitions] == [9]
        assert error_of(futures["gone"]).code() == KafkaError.GROUP_ID_NOT_FOUND


def altered(req, code=0, partition_code=lambda p: 0):
    R = AlterShareGroupOffsetsResponse
    return R(error_code=code, responses=[] if code else [
        R.AlterShareGroupOffsetsResponseTopic(topic_name=t.topic_name, topic_id=TID,
                                              partitions=[
            R.AlterShareGroupOffsetsResponsePartition(
                partition_index=p.partition_index, error_code=partition_code(p))
            for p in t.partitions]) for t in req.topics])


def test_alter_share_group_offsets_sends_the_start_offsets(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.ALTER_SHARE_GROUP_OFFSETS, lambda node, req, v: altered(
            req, partition_code=lambda p: ErrorCode.TOPIC_AUTHORIZATION_FAILED
            if p.partition_index == 3 else 0))
        res = admins(cluster).alter_share_group_offsets([ConsumerGroupTopicPartitions(
            "g", [TopicPartition("t", 3, 0), TopicPartition("t", 1, 7)])])["g"].result(10)
        assert [(tp.partition, tp.offset, tp.error and tp.error.code())
                for tp in res.topic_partitions] == [
            (1, 7, None), (3, 0, KafkaError.TOPIC_AUTHORIZATION_FAILED)]
        (_n, req), = cluster.requests(ApiKey.ALTER_SHARE_GROUP_OFFSETS)
        assert req.encode(0) == (compact("g") + b"\x02" + compact("t") + b"\x03"
                                 + i32(3) + i64(0) + b"\x00" + i32(1) + i64(7) + b"\x00"
                                 + b"\x00" + b"\x00")


def test_alter_share_group_offsets_of_a_group_with_members_fails(admins):
    with FakeCluster(nodes=(1, 2)) as cluster:
        cluster.coordinator = 1

        def alter(node, req, version):
            if node == 1:
                cluster.coordinator = 2
                return altered(req, code=ErrorCode.NOT_COORDINATOR)
            return altered(req, code=ErrorCode.NON_EMPTY_GROUP)

        cluster.handle(ApiKey.ALTER_SHARE_GROUP_OFFSETS, alter)
        err = error_of(admins(cluster).alter_share_group_offsets([ConsumerGroupTopicPartitions(
            "g", [TopicPartition("t", 0, 1)])])["g"])
        assert err.code() == KafkaError.NON_EMPTY_GROUP
        assert [n for n, _ in cluster.requests(ApiKey.ALTER_SHARE_GROUP_OFFSETS)] == [1, 2]


def deleted_offsets(req, code=0, topic_code=lambda t: 0):
    R = DeleteShareGroupOffsetsResponse
    return R(error_code=code, responses=[] if code else [
        R.DeleteShareGroupOffsetsResponseTopic(topic_name=t.topic_name, topic_id=TID,
                                               error_code=topic_code(t.topic_name))
        for t in req.topics])


def test_delete_share_group_offsets_a_future_per_topic(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        codes = iter([ErrorCode.COORDINATOR_NOT_AVAILABLE, 0, ErrorCode.NON_EMPTY_GROUP])
        cluster.handle(ApiKey.DELETE_SHARE_GROUP_OFFSETS, lambda node, req, v: deleted_offsets(
            req, code=next(codes), topic_code=lambda t: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if t == "x" else 0))
        admin = admins(cluster)
        futures = admin.delete_share_group_offsets("g", ["t", "x"])
        assert futures["t"].result(10) is None
        assert error_of(futures["x"]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        sent = cluster.requests(ApiKey.DELETE_SHARE_GROUP_OFFSETS)
        assert sent[0][1].encode(0) == (compact("g") + b"\x03" + compact("t") + b"\x00"
                                        + compact("x") + b"\x00" + b"\x00")
        # a refusal of the whole request fails every topic's future
        again = admin.delete_share_group_offsets("g", ["t", "u"])
        assert [error_of(again[t]).code() for t in ("t", "u")] == \
            [KafkaError.NON_EMPTY_GROUP] * 2


def test_delete_share_groups_sends_delete_groups(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        R = DeleteGroupsResponse
        cluster.handle(ApiKey.DELETE_GROUPS, lambda node, req, v: R(results=[
            R.DeletableGroupResult(group_id=g, error_code=ErrorCode.NON_EMPTY_GROUP
                                   if g == "busy" else 0) for g in req.groups_names]))
        futures = admins(cluster).delete_share_groups(["g", "busy"])
        assert futures["g"].result(10) is None
        assert error_of(futures["busy"]).code() == KafkaError.NON_EMPTY_GROUP
        assert sorted(g for _n, r in cluster.requests(ApiKey.DELETE_GROUPS)
                      for g in r.groups_names) == ["busy", "g"]


# --------------------------------------------------------------------------- listing


def test_share_groups_are_listed_only_when_their_type_is_asked_for(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        R = ListGroupsResponse
        cluster.handle(ApiKey.LIST_GROUPS, lambda node, req, v: R(groups=[
            R.ListedGroup(group_id="c", protocol_type="consumer", group_state="Stable",
                          group_type="classic"),
            R.ListedGroup(group_id="s", protocol_type="share", group_state="Empty",
                          group_type="share")]))
        admin = admins(cluster)
        plain = admin.list_consumer_groups().result(10)
        assert [g.group_id for g in plain.valid] == ["c"]
        shares = admin.list_consumer_groups(types={ConsumerGroupType.SHARE}).result(10)
        assert [(g.group_id, g.type, g.state, g.is_simple_consumer_group)
                for g in shares.valid if g.group_id == "s"] == [
            ("s", ConsumerGroupType.SHARE, ConsumerGroupState.EMPTY, False)]
        sent = cluster.seen
        assert [(v, r.types_filter) for _n, k, v, r in sent if k == ApiKey.LIST_GROUPS] == \
            [(5, []), (5, ["share"])]


# --------------------------------------------------------------------------- input


def test_bad_input_is_refused_before_anything_is_sent(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        admin = admins(cluster)
        with pytest.raises(ValueError):
            admin.describe_share_groups([])
        with pytest.raises(ValueError):
            admin.describe_share_groups([5])
        with pytest.raises(TypeError):
            admin.describe_share_groups("g")
        with pytest.raises(ValueError, match="cannot be empty"):
            admin.list_share_group_offsets([ConsumerGroupTopicPartitions("")])
        with pytest.raises(TypeError):
            admin.list_share_group_offsets([TopicPartition("t", 0)])
        with pytest.raises(ValueError, match="must not have 'offset'"):
            admin.list_share_group_offsets([ConsumerGroupTopicPartitions(
                "g", [TopicPartition("t", 0, 5)])])
        with pytest.raises(ValueError, match="negative"):
            admin.alter_share_group_offsets([ConsumerGroupTopicPartitions(
                "g", [TopicPartition("t", 0, -1)])])
        with pytest.raises(ValueError, match="cannot be null"):
            admin.alter_share_group_offsets([ConsumerGroupTopicPartitions("g")])
        with pytest.raises(ValueError, match="single"):
            admin.alter_share_group_offsets([ConsumerGroupTopicPartitions(
                g, [TopicPartition("t", 0, 1)]) for g in ("a", "b")])
        with pytest.raises(ValueError, match="cannot be empty"):
            admin.delete_share_group_offsets("", ["t"])
        with pytest.raises(TypeError):
            admin.delete_share_group_offsets(None, ["t"])
        with pytest.raises(ValueError):
            admin.delete_share_group_offsets("g", [])
        with pytest.raises(ValueError, match="cannot be empty"):
            admin.delete_share_group_offsets("g", [""])
        with pytest.raises(TypeError):
            admin.delete_share_group_offsets("g", [3])
        with pytest.raises(TypeError):
            admin.delete_share_groups("g")
        # named twice: failed, not sent
        twice = admin.describe_share_groups(["g", "g"])
        assert error_of(twice["g"]).code() == KafkaError._INVALID_ARG
        topics = admin.delete_share_group_offsets("g", ["t", "t"])
        assert error_of(topics["t"]).code() == KafkaError._INVALID_ARG
        sent = {k for _n, k, _v, _r in cluster.seen}
        assert not sent & {ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
                           ApiKey.ALTER_SHARE_GROUP_OFFSETS,
                           ApiKey.DELETE_SHARE_GROUP_OFFSETS, ApiKey.DELETE_GROUPS}
