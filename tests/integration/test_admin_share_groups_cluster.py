"""The admin client's share group calls (KIP-932) against the test cluster: listing by
type, describing a group with live members, its share-partitions' start offsets after
records were consumed and acknowledged, setting them for an empty group (a new member
then reads from there), deleting a topic's, deleting the group, and the errors Kafka
answers (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, an unknown topic).

The share consumers run in a child process with a hard timeout (a hang fails the test) and
print what they read as JSON; the cluster's own share-partition state
(``Cluster.share_state``) is the independent check of what the admin calls did.
"""
from __future__ import annotations

import json

import pytest

from kafka_client import ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer
from kafka_client import TopicPartition
from kafka_client._model import ConsumerGroupState, ConsumerGroupType
from kafka_client.admin import AdminClient, ShareGroupDescription
from kafka_client.types import OFFSET_INVALID

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 10
#: far longer than any test: a record is given again only because the client said so
LOCK_MS = 120_000
#: every admin call's bound (generous: a loaded 2-core machine)
CALL_S = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from kafka_client.testing import Cluster
    with Cluster(brokers=2, data_dir=str(tmp_path_factory.mktemp("share-admin")),
                 broker_config={"group.share.heartbeat.interval.ms": 200,
                                "group.share.record.lock.duration.ms": LOCK_MS}) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster):
    a = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    yield a
    a.close()


@pytest.fixture
def topic(cluster, topic_name):
    """A topic with PER_PARTITION records in each of its partitions; its share group (of
    the same name) reads from the earliest."""
    cluster.create_topic(topic_name, partitions=PARTITIONS, replication_factor=1)
    cluster.set_group_config(topic_name, {"share.auto.offset.reset": "earliest"})
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 2}) as p:
        for i in range(PARTITIONS * PER_PARTITION):
            p.produce(topic_name, b"m%d" % i, partition=i % PARTITIONS)
        assert p.flush(30) == 0
    return topic_name


CHILD_PRELUDE = """
import json, sys, time
from kafka_client import ShareConsumer
from kafka_client.admin import AdminClient

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]

def consumer():
    c = ShareConsumer({"bootstrap.servers": BOOTSTRAP, "group.id": TOPIC,
                       "client.id": "member-%d" % len(made)})
    made.append(c)
    c.subscribe([TOPIC])
    return c

made = []

def settled(c):
    mine = set(c._fetcher.assigned)
    return bool(mine) and all(s.partitions <= mine for s in c._fetcher.sessions.values())

def wait_settled(*cs):
    deadline = time.monotonic() + 30
    while not all(settled(c) for c in cs) and time.monotonic() < deadline:
        for c in cs:
            c.poll(0.1)
    assert all(settled(c) for c in cs), "members assigned in 30 s"

def read_all(c, want, seconds=40):
    out = []
    deadline = time.monotonic() + seconds
    while len(out) < want and time.monotonic() < deadline:
        for m in c.poll(0.2):
            assert m.error() is None, m.error()
            out.append([m.partition(), m.offset()])
    out += [[m.partition(), m.offset()] for m in c.poll(1.0)]  # nothing more expected
    return out

def code(future):
    try:
        future.result(30)
        return None
    except Exception as exc:
        return exc.args[0].name()

admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
"""


def run(run_child, cluster, topic, body, timeout=120):
    code = (f"import sys; sys.argv[1:] = {[cluster.bootstrap_servers, topic]!r}\n"
            + CHILD_PRELUDE + body)
    out = run_child(code, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def consume_all(run_child, cluster, topic):
    """One member reads and accepts every record, then leaves: the group is empty."""
    got = run(run_child, cluster, topic, f"""
c = consumer()
seen = read_all(c, {PARTITIONS * PER_PARTITION})
results = c.commit_sync(30)
c.close()
print(json.dumps({{"seen": seen, "errors": [str(v) for v in results.values() if v]}}))
""")
    assert got["errors"] == []
    assert sorted(map(tuple, got["seen"])) == [
        (p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]


def start_offsets(admin, group, partitions=None):
    request = ConsumerGroupTopicPartitions(group, partitions)
    result = admin.list_share_group_offsets([request])[group].result(CALL_S)
    assert result.group_id == group
    return {(tp.topic, tp.partition): (tp.offset, tp.error and tp.error.code())
            for tp in result.topic_partitions}


def error_of(future):
    with pytest.raises(KafkaException) as info:
        future.result(CALL_S)
    return info.value.args[0].code()


def test_describe_and_list_a_share_group_with_two_live_members(cluster, admin, topic,
                                                               run_child):
    got = run(run_child, cluster, topic, """
from kafka_client._model import ConsumerGroupType
a, b = consumer(), consumer()
wait_settled(a, b)

def held():
    return {c._member.member_id: sorted(p for _t, p in c._fetcher.assigned) for c in (a, b)}

def described(d):
    return {m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
            for m in d.members}

# A member settled on the assignment it had alone hears of the new one with its next
# heartbeat: wait until both hold what the coordinator describes.
deadline = time.monotonic() + 30
while True:
    d = admin.describe_share_groups([TOPIC])[TOPIC].result(30)
    if described(d) == held() or time.monotonic() > deadline:
        break
    for c in (a, b):
        c.poll(0.1)
shares = admin.list_consumer_groups(types={ConsumerGroupType.SHARE}).result(30)
plain = admin.list_consumer_groups().result(30)
print(json.dumps({
    "ids": held(),
    "state": d.state.name, "type": d.type.name, "coordinator": d.coordinator.id,
    "epoch": d.group_epoch, "assignor": d.partition_assignor,
    "members": {m.member_id: [m.client_id, m.member_epoch,
                              sorted([tp.topic, tp.partition]
                                     for tp in m.assignment.topic_partitions)]
                for m in d.members},
    "shares": [[g.group_id, g.type.name, g.state.name, g.is_simple_consumer_group]
               for g in shares.valid if g.group_id == TOPIC],
    "plain": [g.group_id for g in plain.valid],
}))
a.close(); b.close()
""")
    assert got["state"] == "STABLE" and got["type"] == "SHARE"
    assert got["coordinator"] == cluster.coordinator(group=topic)
    assert got["epoch"] >= 2 and got["assignor"] == "simple"
    # the two members the consumers are, with what the coordinator assigned each
    assert set(got["members"]) == set(got["ids"])
    assert sorted(m[0] for m in got["members"].values()) == ["member-0", "member-1"]
    for member_id, (_client, epoch, parts) in got["members"].items():
        assert epoch >= 1
        assert parts == [[topic, p] for p in got["ids"][member_id]]
    # every partition has a member
    assert {p for _c, _e, parts in got["members"].values() for _t, p in parts} == \
        set(range(PARTITIONS))
    # listed by type only: a share group is no consumer group
    assert got["shares"] == [[topic, "SHARE", "STABLE", False]]
    assert topic not in got["plain"]
    # both members gone: empty, and still a share group
    empty = admin.describe_share_groups([topic])[topic].result(CALL_S)
    assert isinstance(empty, ShareGroupDescription)
    assert empty.state == ConsumerGroupState.EMPTY and empty.members == []
    listed = admin.list_consumer_groups(types={ConsumerGroupType.SHARE},
                                        states={ConsumerGroupState.EMPTY}).result(CALL_S)
    assert [g.group_id for g in listed.valid if g.group_id == topic] == [topic]


def test_start_offsets_after_records_were_consumed_and_acknowledged(cluster, admin, topic,
                                                                    run_child):
    group = topic
    # no member has joined yet: there is no such group
    assert error_of(admin.list_share_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group]) == KafkaError.GROUP_ID_NOT_FOUND
    consume_all(run_child, cluster, topic)
    everything = start_offsets(admin, group)
    assert everything == {(topic, p): (PER_PARTITION, None) for p in range(PARTITIONS)}
    # the cluster's own state says the same
    assert {(s["topic"], s["partition"]): s["start_offset"]
            for s in cluster.share_state(group)} == {k: v[0] for k, v in everything.items()}
    # named partitions: one of them of a topic the cluster does not know
    named = start_offsets(admin, group, [TopicPartition(topic, 1),
                                         TopicPartition("no-such-topic", 0)])
    assert named == {(topic, 1): (PER_PARTITION, None),
                     ("no-such-topic", 0): (OFFSET_INVALID,
                                            KafkaError.UNKNOWN_TOPIC_OR_PART)}


def test_alter_start_offsets_of_an_empty_group_a_new_member_reads_from_there(
        cluster, admin, topic, run_child):
    group = topic
    consume_all(run_child, cluster, topic)
    result = admin.alter_share_group_offsets([ConsumerGroupTopicPartitions(group, [
        TopicPartition(topic, 0, 4), TopicPartition(topic, 2, 0),
        TopicPartition("no-such-topic", 0, 1)])])[group].result(CALL_S)
    assert [(tp.topic, tp.partition, tp.offset, tp.error and tp.error.code())
            for tp in result.topic_partitions] == [
        ("no-such-topic", 0, 1, KafkaError.UNKNOWN_TOPIC_OR_PART),
        (topic, 0, 4, None), (topic, 2, 0, None)]
    assert start_offsets(admin, group) == {(topic, 0): (4, None),
                                           (topic, 1): (PER_PARTITION, None),
                                           (topic, 2): (0, None)}
    want = (PER_PARTITION - 4) + PER_PARTITION
    got = run(run_child, cluster, topic, f"""
c = consumer()
seen = read_all(c, {want})
results = c.commit_sync(30)
c.close()
print(json.dumps({{"seen": seen, "errors": [str(v) for v in results.values() if v]}}))
""")
    assert got["errors"] == []
    assert sorted(map(tuple, got["seen"])) == \
        [(0, o) for o in range(4, PER_PARTITION)] + [(2, o) for o in range(PER_PARTITION)]
    assert start_offsets(admin, group) == {(topic, p): (PER_PARTITION, None)
                                           for p in range(PARTITIONS)}


def test_delete_a_topics_start_offsets_then_the_group(cluster, admin, topic, run_child):
    group = topic
    consume_all(run_child, cluster, topic)
    futures = admin.delete_share_group_offsets(group, [topic, "no-such-topic"])
    assert futures[topic].result(CALL_S) is None
    assert error_of(futures["no-such-topic"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert cluster.share_state(group) == []
    assert start_offsets(admin, group) == {}
    assert start_offsets(admin, group, [TopicPartition(topic, 0)]) == \
        {(topic, 0): (OFFSET_INVALID, None)}
    # the group is still there, empty; deleting it takes it
    assert admin.describe_share_groups([group])[group].result(CALL_S).state == \
        ConsumerGroupState.EMPTY
    assert admin.delete_share_groups([group])[group].result(CALL_S) is None
    assert error_of(admin.describe_share_groups([group])[group]) == \
        KafkaError.GROUP_ID_NOT_FOUND
    listed = admin.list_consumer_groups(types={ConsumerGroupType.SHARE}).result(CALL_S)
    assert group not in [g.group_id for g in listed.valid]
    assert error_of(admin.delete_share_groups([group])[group]) == \
        KafkaError.GROUP_ID_NOT_FOUND


def test_a_group_with_a_member_refuses_changes_of_its_start_offsets(cluster, admin, topic,
                                                                    run_child):
    got = run(run_child, cluster, topic, """
from kafka_client import ConsumerGroupTopicPartitions, TopicPartition
c = consumer()
wait_settled(c)
alter = admin.alter_share_group_offsets([ConsumerGroupTopicPartitions(
    TOPIC, [TopicPartition(TOPIC, 0, 0)])])[TOPIC]
out = {"alter": code(alter),
       "delete_offsets": code(admin.delete_share_group_offsets(TOPIC, [TOPIC])[TOPIC]),
       "delete_group": code(admin.delete_share_groups([TOPIC])[TOPIC]),
       "describe": code(admin.describe_share_groups([TOPIC])[TOPIC])}
c.close()
print(json.dumps(out))
""")
    assert got == {"alter": "NON_EMPTY_GROUP", "delete_offsets": "NON_EMPTY_GROUP",
                   "delete_group": "NON_EMPTY_GROUP", "describe": None}


def test_groups_that_are_no_share_groups(cluster, admin, topic):
    missing = "no-such-share-group"
    assert error_of(admin.describe_share_groups([missing])[missing]) == \
        KafkaError.GROUP_ID_NOT_FOUND
    assert error_of(admin.list_share_group_offsets(
        [ConsumerGroupTopicPartitions(missing)])[missing]) == KafkaError.GROUP_ID_NOT_FOUND
    assert error_of(admin.alter_share_group_offsets([ConsumerGroupTopicPartitions(
        missing, [TopicPartition(topic, 0, 1)])])[missing]) == KafkaError.GROUP_ID_NOT_FOUND
    assert error_of(admin.delete_share_group_offsets(missing, [topic])[topic]) == \
        KafkaError.GROUP_ID_NOT_FOUND
    # a classic consumer group's id is no share group's
    classic = topic + "-classic"
    assert admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        classic, [TopicPartition(topic, 0, 3)])])[classic].result(CALL_S)
    assert error_of(admin.describe_share_groups([classic])[classic]) == \
        KafkaError.GROUP_ID_NOT_FOUND
    assert error_of(admin.alter_share_group_offsets([ConsumerGroupTopicPartitions(
        classic, [TopicPartition(topic, 0, 1)])])[classic]) == KafkaError.GROUP_ID_NOT_FOUND


def test_share_group_calls_follow_the_coordinator_when_it_moves(cluster, admin, topic,
                                                                run_child):
    group = topic
    consume_all(run_child, cluster, topic)
    described = admin.describe_share_groups([group], include_authorized_operations=True)
    first = described[group].result(CALL_S)
    old = cluster.coordinator(group=group)
    assert first.coordinator.id == old
    # no authorizer: every operation on a group
    assert {op.name for op in first.authorized_operations} >= {"READ", "DESCRIBE", "DELETE"}
    new = next(b for b in cluster.broker_ids if b != old)
    since = cluster.clear_request_log()
    cluster.move_coordinator(new, group=group)
    assert start_offsets(admin, group) == {(topic, p): (PER_PARTITION, None)
                                           for p in range(PARTITIONS)}
    result = admin.alter_share_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, 1, 3)])])[group].result(CALL_S)
    assert [tp.error for tp in result.topic_partitions] == [None]
    assert admin.describe_share_groups([group])[group].result(CALL_S).coordinator.id == new
    asked = [(e.api, e.broker) for e in cluster.request_log(since)
             if e.api in ("DescribeShareGroupOffsets", "AlterShareGroupOffsets",
                          "ShareGroupDescribe")]
    # the old coordinator once (NOT_COORDINATOR), then the new one for every call
    assert asked == [("DescribeShareGroupOffsets", old), ("DescribeShareGroupOffsets", new),
                     ("AlterShareGroupOffsets", new), ("ShareGroupDescribe", new)]
    assert [s["start_offset"] for s in cluster.share_state(group)] == [PER_PARTITION, 3,
                                                                       PER_PARTITION]
