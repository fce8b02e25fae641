"""The test cluster's share group offset APIs (KIP-932, Kafka 4.1) on the wire with a bare
client: DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets,
served by the group's coordinator, changing start offsets only of an empty share group."""
from __future__ import annotations

import uuid

import pytest

from kafka_proto.enums import MemberEpoch
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    AlterShareGroupOffsetsRequest,
    ApiKey,
    ApiVersionsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
    ShareGroupHeartbeatRequest,
)

from kafka_client.testing import Cluster

from rawclient import RawClient  # tests/testing/rawclient.py

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

A = AlterShareGroupOffsetsRequest
D = DescribeShareGroupOffsetsRequest
X = DeleteShareGroupOffsetsRequest


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(brokers=2, data_dir=str(tmp_path_factory.mktemp("share-offsets"))) as c:
        yield c


def coordinator(cluster, group):
    return RawClient(cluster.address(cluster.coordinator(group=group)))


def describe(client, group, topics):
    resp = client.request(D(groups=[D.DescribeShareGroupOffsetsRequestGroup(
        group_id=group, topics=None if topics is None else [
            D.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
            for t, ps in topics.items()])]), 0)
    (g,) = resp.groups
    return g.error_code, {(t.topic_name, p.partition_index): (p.start_offset, p.leader_epoch,
                                                               p.error_code)
                          for t in g.topics for p in t.partitions}


def alter(client, group, offsets):
    by_topic = {}
    for (t, p), start in offsets.items():
        by_topic.setdefault(t, []).append(A.AlterShareGroupOffsetsRequestPartition(
            partition_index=p, start_offset=start))
    resp = client.request(A(group_id=group, topics=[
        A.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
        for t, ps in by_topic.items()]), 0)
    return resp.error_code, {(t.topic_name, p.partition_index): p.error_code
                             for t in resp.responses for p in t.partitions}


def delete(client, group, topics):
    resp = client.request(X(group_id=group, topics=[
        X.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics]), 0)
    return resp.error_code, {r.topic_name: r.error_code for r in resp.responses}


def test_api_versions_advertise_the_share_offset_apis_at_version_0(cluster):
    with RawClient(cluster.bootstrap_servers.split(",")[0]) as c:
        resp = c.request(ApiVersionsRequest(client_software_name="raw",
                                            client_software_version="1"), 3)
    served = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    for key in (ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ApiKey.ALTER_SHARE_GROUP_OFFSETS,
                ApiKey.DELETE_SHARE_GROUP_OFFSETS):
        assert served[key] == (0, 0), key


def test_start_offsets_change_only_in_an_empty_share_group(cluster):
    group, topic = "offsets-group", "offsets-topic"
    cluster.create_topic(topic, partitions=2, replication_factor=1)
    member = str(uuid.uuid4())
    with coordinator(cluster, group) as c:
        # no such group yet
        assert describe(c, group, None) == (ErrorCode.GROUP_ID_NOT_FOUND, {})
        assert alter(c, group, {(topic, 0): 1})[0] == ErrorCode.GROUP_ID_NOT_FOUND
        joined = c.request(ShareGroupHeartbeatRequest(
            group_id=group, member_id=member, member_epoch=MemberEpoch.JOIN,
            subscribed_topic_names=[topic]), 1)
        assert joined.error_code == ErrorCode.NONE
        # nobody read a partition yet: no start offset
        assert describe(c, group, None) == (ErrorCode.NONE, {})
        assert describe(c, group, {topic: [0], "nope": [0]}) == (ErrorCode.NONE, {
            (topic, 0): (-1, -1, ErrorCode.NONE),
            ("nope", 0): (-1, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)})
        # a member: neither set nor dropped
        assert alter(c, group, {(topic, 0): 1}) == (ErrorCode.NON_EMPTY_GROUP, {})
        assert delete(c, group, [topic]) == (ErrorCode.NON_EMPTY_GROUP, {})
        left = c.request(ShareGroupHeartbeatRequest(
            group_id=group, member_id=member, member_epoch=MemberEpoch.LEAVE), 1)
        assert left.error_code == ErrorCode.NONE
        assert alter(c, group, {(topic, 0): 2, (topic, 5): 1, ("nope", 0): 1}) == (
            ErrorCode.NONE, {(topic, 0): ErrorCode.NONE,
                             (topic, 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
        code, offsets = describe(c, group, None)
        assert code == ErrorCode.NONE and list(offsets) == [(topic, 0)]
        start, epoch, error = offsets[(topic, 0)]
        assert (start, error) == (2, ErrorCode.NONE) and epoch >= 0
        assert [(s["partition"], s["start_offset"], s["records"])
                for s in cluster.share_state(group)] == [(0, 2, [])]
        assert delete(c, group, [topic, "nope"]) == (
            ErrorCode.NONE, {topic: ErrorCode.NONE,
                             "nope": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
        assert cluster.share_state(group) == []
        assert describe(c, group, None) == (ErrorCode.NONE, {})
    other = next(b for b in cluster.broker_ids if b != cluster.coordinator(group=group))
    with RawClient(cluster.address(other)) as c:
        assert describe(c, group, None)[0] == ErrorCode.NOT_COORDINATOR
        assert alter(c, group, {(topic, 0): 1})[0] == ErrorCode.NOT_COORDINATOR
        assert delete(c, group, [topic])[0] == ErrorCode.NOT_COORDINATOR
