"""Every API the client uses in a flow, capped at each version from v0 (the test cluster
serves the versions Kafka 4 removed, KIP-896, with ``legacy.api.versions.enable``: Fetch
below v4 gets down-converted message sets) up to the highest: the broker's ApiVersions
answer is rewritten on its way through the fault proxy, so the client negotiates exactly
that version, and a flow that depends on it runs end to end; an ApiVersions request newer
than the cap is refused as a broker of that version refuses it, so the client asks again
(in v0 before KIP-511). Then whole-broker profiles: every API capped at once at the
versions of a Kafka 0.11, 1.0, 1.1, 2.0, 2.1, 2.8 and 3.0 broker, and Kafka 0.10.0 and
0.10.2 brokers, before record batches v2 (our producer writes message sets there).

The flows, each counted on the broker's side (offsets, values, committed positions):

* ``data``: an idempotent producer writes keyed messages to two partitions; a group
  consumer reads them exactly once and in order and commits; a second member of the group
  resumes from the commit and reads exactly what was written after it.
* ``txn``: a transactional producer commits one transaction (with consumer offsets sent
  to it) and aborts another; a read_committed consumer sees only the committed messages
  and the group's committed offset is the one sent.
* ``admin``: create a topic, describe its configuration, delete it.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import time
import uuid
from typing import AbstractSet, Dict, List, Mapping, Tuple

import pytest

from kafka_client import (ConsumerGroupTopicPartitions, Consumer, ElectionType, KafkaError,
                          KafkaException, Producer, TopicCollection, TopicPartition)
from kafka_client.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                NewPartitions, NewTopic)
from kafka_client.testing._api import supported_versions
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import API_KEYS, ApiKey, ApiVersionsResponse

pytestmark = pytest.mark.integration

#: The flows that exercise each API.
FLOWS_OF: Dict[int, Tuple[str, ...]] = {
    # the transaction flow reads back read_committed: aborted transactions at each version
    ApiKey.PRODUCE: ("data", "txn", "plain"), ApiKey.FETCH: ("data", "txn"),
    ApiKey.METADATA: ("data",), ApiKey.LIST_OFFSETS: ("data", "txn"),
    ApiKey.FIND_COORDINATOR: ("data",),
    ApiKey.JOIN_GROUP: ("data",), ApiKey.SYNC_GROUP: ("data",), ApiKey.HEARTBEAT: ("data",),
    ApiKey.LEAVE_GROUP: ("data",), ApiKey.OFFSET_COMMIT: ("data",),
    ApiKey.OFFSET_FETCH: ("data", "groups"), ApiKey.OFFSET_FOR_LEADER_EPOCH: ("data",),
    ApiKey.INIT_PRODUCER_ID: ("data", "txn"), ApiKey.ADD_PARTITIONS_TO_TXN: ("txn",),
    ApiKey.ADD_OFFSETS_TO_TXN: ("txn",), ApiKey.TXN_OFFSET_COMMIT: ("txn",),
    ApiKey.END_TXN: ("txn",),
    ApiKey.CREATE_TOPICS: ("admin",), ApiKey.DELETE_TOPICS: ("admin",),
    ApiKey.DESCRIBE_CONFIGS: ("admin", "configs"), ApiKey.CREATE_PARTITIONS: ("partitions",),
    ApiKey.ALTER_CONFIGS: ("configs",), ApiKey.INCREMENTAL_ALTER_CONFIGS: ("configs",),
    ApiKey.DELETE_RECORDS: ("partitions",), ApiKey.DESCRIBE_CLUSTER: ("partitions",),
    ApiKey.ELECT_LEADERS: ("partitions",),
    ApiKey.LIST_GROUPS: ("groups",), ApiKey.DESCRIBE_GROUPS: ("groups",),
    ApiKey.DELETE_GROUPS: ("groups",),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: ("kip848",), ApiKey.CONSUMER_GROUP_DESCRIBE: ("kip848",),
    # capped: the broker refuses newer ones as a broker of that version would (see capped)
    ApiKey.API_VERSIONS: ("data",),
}

#: The highest version a flow sends although the broker offers more: the group consumer
#: reads its offsets with OffsetFetch v7 at most (v8+ is the layout for several groups;
#: the admin client's list_consumer_group_offsets() uses them).
FLOW_CAP: Dict[Tuple[int, str], int] = {(ApiKey.OFFSET_FETCH, "data"): 7}


def expected(key: int, flow: str, version: int) -> int:
    return min(version, FLOW_CAP.get((key, flow), version))


def served_range(key: int) -> Tuple[int, int]:
    """The versions both the client's codec and the test cluster speak (with the versions
    Kafka 4 removed: ``legacy.api.versions.enable``)."""
    lo, hi = supported_versions(legacy=True)[key]
    return max(lo, API_KEYS[key].min_version), min(hi, API_KEYS[key].max_version)


def runs(key: int, flow: str, version: int) -> bool:
    """Whether the flow means something at that version: a Fetch below v4 has no
    read_committed (and down-conversion drops the transaction markers, so a consumer's
    position never passes the last one); Kafka brought transactions and Fetch v4 together
    (0.11), so no broker serves those Fetch versions and transactions."""
    if key == ApiKey.PRODUCE and version < 3 and flow != "plain":
        return False    # idempotence and transactions need record batches v2 (Produce v3)
    return not (key == ApiKey.FETCH and flow == "txn" and version < 4)


MATRIX = [pytest.param(key, flow, version, id=f"{ApiKey(key).name}-v{version}-{flow}")
          for key, flows in FLOWS_OF.items() for flow in flows
          for version in range(served_range(key)[0], served_range(key)[1] + 1)
          if runs(key, flow, version)]


@pytest.fixture(scope="module")
def capped_cluster(tmp_path_factory):
    """``(cluster, proxy)``: one broker behind a fault proxy that the client reaches for
    every connection (the broker advertises the proxy's port)."""
    from kafka_client._testing.brokers import free_port
    from kafka_client._testing.proxy import FaultProxy
    from kafka_client.testing import Cluster

    broker_port, proxy_port = free_port(), free_port()
    data_dir = str(tmp_path_factory.mktemp("matrix") / "cluster")
    with FaultProxy("127.0.0.1", broker_port, port=proxy_port, follow_frames=True) as proxy:
        with Cluster(brokers=1, data_dir=data_dir, ports=[broker_port],
                     advertised_ports=[proxy_port],
                     broker_config={"group.consumer.heartbeat.interval.ms": 200,
                                    "legacy.api.versions.enable": True}) as cluster:
            yield cluster, proxy


@pytest.fixture
def capped(capped_cluster):
    """``cap({api_key: version}, only=False)``: from now on the broker's ApiVersions
    answers top out at ``version`` for each API given (its minimum lowered to it if need
    be); with ``only``, the APIs not given are left out of the answers."""
    cluster, proxy = capped_cluster

    def cap(caps: Mapping[int, int], only: bool = False) -> None:
        def lower(response, version):
            if only:        # a broker that predates the other APIs does not list them
                response.api_keys = [e for e in response.api_keys if e.api_key in caps]
            for entry in response.api_keys:
                top = caps.get(entry.api_key)
                if top is not None:
                    entry.max_version = min(entry.max_version, top)
                    entry.min_version = min(entry.min_version, entry.max_version)
            own = caps.get(ApiKey.API_VERSIONS)
            if own is not None and version > own:
                # An ApiVersions the broker does not know: answered in v0 with
                # UNSUPPORTED_VERSION, with the ranges from KIP-511 (Kafka 2.4,
                # ApiVersions v3) on, with none before; the client asks again.
                return ApiVersionsResponse(
                    error_code=ErrorCode.UNSUPPORTED_VERSION,
                    api_keys=response.api_keys if own >= 3 else []).encode(0)
            return None
        proxy.rewrite_responses(ApiKey.API_VERSIONS, lower, count=None)

    yield cap
    proxy.clear_faults()
    assert not proxy.rewrite_errors


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def drain(consumer: Consumer, want: int, seconds: float = 15.0) -> List:
    """Messages (no errors allowed) until ``want`` came or ``seconds`` passed."""
    out: List = []
    deadline = time.monotonic() + seconds
    while len(out) < want and time.monotonic() < deadline:
        for msg in consumer.consume(want - len(out), 0.2):
            assert not msg.error(), msg.error()
            out.append(msg)
    return out


def by_partition(messages) -> Dict[int, List[Tuple[int, bytes]]]:
    out: Dict[int, List[Tuple[int, bytes]]] = {}
    for m in messages:
        out.setdefault(m.partition(), []).append((m.offset(), m.value()))
    return out


def read_to_the_end(consumer: Consumer, topic: str, seconds: float = 10.0,
                    partitions: Tuple[int, ...] = (0, 1)) -> List:
    """Whatever is still delivered until each partition's position reaches its end (the
    high watermark; the last stable offset for read_committed): nothing may be left
    unseen, so a repeat or an aborted message would show."""
    out: List = []
    deadline = time.monotonic() + seconds
    parts = [TopicPartition(topic, p) for p in partitions]
    ends = {tp.partition: consumer.get_watermark_offsets(tp, 10)[1] for tp in parts}
    while time.monotonic() < deadline:
        positions = {tp.partition: tp.offset for tp in consumer.position(parts)}
        if all(positions[p] >= ends[p] or (ends[p] == 0 and positions[p] < 0)
               for p in ends):
            return out
        out += [m for m in consumer.consume(10, 0.05) if not m.error()]
    raise AssertionError(f"positions {positions} never reached the ends {ends}")


def data_flow(cluster, bootstrap: str, key: int, since: int, count: int = 20) -> None:
    topic, group = unique("data"), unique("group")
    cluster.create_topic(topic, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 2})
    keys = [b"k%d" % (i % 5) for i in range(count)]
    for i, message_key in enumerate(keys):
        producer.produce(topic, b"%d" % i, key=message_key)
    assert producer.flush(20) == 0
    group_conf = {"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "heartbeat.interval.ms": 100, "session.timeout.ms": 6000}
    first = Consumer(group_conf)
    try:
        first.subscribe([topic])
        got = drain(first, count)
        got += read_to_the_end(first, topic)
        assert sorted(int(m.value()) for m in got) == list(range(count))
        for part in by_partition(got).values():         # per key, in order
            offsets = [o for o, _ in part]
            assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        for message_key in set(keys):
            values = [int(m.value()) for m in got if m.key() == message_key]
            assert values == sorted(values)
        if key == ApiKey.HEARTBEAT:   # one goes out in the generation before the commit
            cluster.wait_for(lambda: cluster.request_log(since, api=key), timeout=5)
        first.commit(asynchronous=False)
        committed = first.committed([TopicPartition(topic, p) for p in (0, 1)], 10)
        ends = {p: max(o for o, _ in msgs) + 1 for p, msgs in by_partition(got).items()}
        assert {tp.partition: tp.offset for tp in committed} == {p: ends.get(p, 0)
                                                                 for p in (0, 1)}
    finally:
        first.close()
    for i in range(count, count + 6):
        producer.produce(topic, b"%d" % i, key=b"k%d" % (i % 5))
    assert producer.flush(20) == 0
    producer.close()
    second = Consumer(group_conf)
    try:
        second.subscribe([topic])
        more = drain(second, 6)
        more += read_to_the_end(second, topic)
        assert sorted(int(m.value()) for m in more) == list(range(count, count + 6))
    finally:
        second.close()


def txn_flow(cluster, bootstrap: str, key: int, since: int) -> None:
    topic, source, group = unique("txn"), unique("src"), unique("txgroup")
    cluster.create_topic(topic, partitions=2)
    cluster.create_topic(source, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": unique("tx"), "linger.ms": 2})
    # a member of its group: from TxnOffsetCommit v3 the coordinator checks its
    # generation and member id (KIP-447)
    meta_source = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "enable.auto.commit": False})
    try:
        meta_source.subscribe([source])
        deadline = time.monotonic() + 10
        while not meta_source.assignment() and time.monotonic() < deadline:
            meta_source.poll(0.05)
        assert meta_source.assignment(), "the group member got no assignment"
        producer.init_transactions(20)
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, b"c%d" % i, partition=i % 2)
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 42)],
                                             meta_source.consumer_group_metadata(), 20)
        producer.commit_transaction(20)
        producer.begin_transaction()
        for i in range(4):
            producer.produce(topic, b"a%d" % i, partition=i % 2)
        producer.flush(20)
        producer.abort_transaction(20)
        committed = meta_source.committed([TopicPartition(source, 0)], 10)
        assert [tp.offset for tp in committed] == [42]
    finally:
        meta_source.close()
        producer.close()
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"),
                       "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        reader.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
        got = drain(reader, 10)
        got += read_to_the_end(reader, topic)
        assert sorted(m.value() for m in got) == sorted(b"c%d" % i for i in range(10))
    finally:
        reader.close()


def admin_flow(cluster, bootstrap: str, key: int, since: int) -> None:
    topic = unique("admin")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(topic, 3, 1, config={"retention.ms": "123456"})],
                            request_timeout=15)[topic].result(20)
        assert len(cluster.describe_topic(topic).partitions) == 3
        resource = ConfigResource("topic", topic)
        configs = admin.describe_configs([resource])[resource].result(20)
        assert configs["retention.ms"].value == "123456"
        admin.delete_topics([topic], request_timeout=15)[topic].result(20)
        cluster.wait_for(lambda: topic not in cluster.topics())
    finally:
        admin.close()


def partitions_flow(cluster, bootstrap: str, key: int, since: int,
                    absent: AbstractSet[int] = frozenset()) -> None:
    """Admin calls on a topic's partitions and the cluster: add partitions, delete
    records, describe the cluster, elect the preferred leaders (CreatePartitions or
    ElectLeaders in ``absent``: a broker before Kafka 1.0 or 2.2 has no API for it, the
    call fails saying so)."""
    topic = unique("parts")
    cluster.create_topic(topic, partitions=1)
    fill(bootstrap, topic, 5)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        added = admin.create_partitions([NewPartitions(topic, 3)],
                                        request_timeout=15)[topic]
        if ApiKey.CREATE_PARTITIONS in absent:      # before Kafka 1.0
            with pytest.raises(KafkaException) as refused:
                added.result(20)
            assert refused.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
            assert len(cluster.describe_topic(topic).partitions) == 1
        else:
            added.result(20)
            assert len(cluster.describe_topic(topic).partitions) == 3
        tp = TopicPartition(topic, 0, 3)
        deleted = admin.delete_records([tp], request_timeout=15)[tp].result(20)
        state = cluster.partition(topic, 0)
        assert deleted.low_watermark == 3 == state.replica_logs[state.leader].log_start_offset
        described = admin.describe_cluster(request_timeout=15).result(20)
        assert [n.id for n in described.nodes] == cluster.broker_ids
        election = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)],
                                       request_timeout=15)
        if ApiKey.ELECT_LEADERS in absent:
            with pytest.raises(KafkaException) as refused:
                election.result(20)
            assert refused.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
            return
        elected = election.result(20)
        # the preferred leader leads already: nothing to elect, per partition
        assert list(elected) == [TopicPartition(topic, 0)]
        assert elected[TopicPartition(topic, 0)].code() == KafkaError.ELECTION_NOT_NEEDED
    finally:
        admin.close()


def groups_flow(cluster, bootstrap: str, key: int, since: int,
                absent: AbstractSet[int] = frozenset(), old_broker: int = 0) -> None:
    """Admin calls on consumer groups: a group that committed offsets is listed,
    described, its offsets read, then it is deleted (DeleteGroups in ``absent``: a
    broker before Kafka 2.0 has no API for it, the call fails saying so; with
    ``old_broker``, only that broker lacks the APIs in ``absent``)."""
    topic, group = unique("grouped"), unique("admin-group")
    cluster.create_topic(topic, partitions=2)
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        member.commit(offsets=[TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 9)],
                      asynchronous=False)
    finally:
        member.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        listed = admin.list_consumer_groups(request_timeout=15).result(20)
        assert group in {g.group_id for g in listed.valid}
        description = admin.describe_consumer_groups([group],
                                                     request_timeout=15)[group].result(20)
        assert description.group_id == group and not description.members
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0),
                                                        TopicPartition(topic, 1)])]
        offsets = admin.list_consumer_group_offsets(request,
                                                    request_timeout=15)[group].result(20)
        assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {0: 7, 1: 9}
        deletion = admin.delete_consumer_groups([group], request_timeout=15)[group]
        if ApiKey.DELETE_GROUPS in absent and old_broker in (0, cluster.coordinator(group)):
            with pytest.raises(KafkaException) as refused:
                deletion.result(20)
            assert refused.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
            return
        deletion.result(20)
        listed = admin.list_consumer_groups(request_timeout=15).result(20)
        assert group not in {g.group_id for g in listed.valid}
    finally:
        admin.close()


def kip848_flow(cluster, bootstrap: str, key: int, since: int,
                absent: AbstractSet[int] = frozenset()) -> None:
    """A KIP-848 group (group.protocol=consumer): a member reads everything once and
    commits, the admin client describes the group, a second member resumes from the
    commit (ConsumerGroupHeartbeat in ``absent``, a broker before Kafka 4.0: the member
    gets _UNSUPPORTED_FEATURE saying so)."""
    topic, group = unique("kip848"), unique("kip848-group")
    cluster.create_topic(topic, partitions=2)
    fill(bootstrap, topic, 10)
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    first = Consumer(conf)
    try:
        first.subscribe([topic])
        if ApiKey.CONSUMER_GROUP_HEARTBEAT in absent:
            refused = first.poll(10)
            assert refused is not None and refused.error() is not None
            assert refused.error().code() == KafkaError._UNSUPPORTED_FEATURE
            return
        got = drain(first, 10)
        got += read_to_the_end(first, topic)
        assert sorted(int(m.value()) for m in got) == list(range(10))
        first.commit(asynchronous=False)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            described = admin.describe_consumer_groups([group],
                                                       request_timeout=15)[group].result(20)
            assert [len(m.assignment.topic_partitions) for m in described.members] == [2]
        finally:
            admin.close()
    finally:
        first.close()
    fill(bootstrap, topic, 3)
    second = Consumer(conf)
    try:
        second.subscribe([topic])
        more = drain(second, 3)
        more += read_to_the_end(second, topic)
        assert sorted(int(m.value()) for m in more) == [0, 1, 2]
    finally:
        second.close()


def plain_flow(cluster, bootstrap: str, key: int, since: int) -> None:
    """A producer without idempotence writes keyed messages with timestamps and headers
    to two partitions; a consumer reads each once, in order, with its key and timestamp.
    Below Produce v3 they go as legacy message sets: no headers, and below v2 no
    timestamps (the log says -1)."""
    topic = unique("plain")
    cluster.create_topic(topic, partitions=2)
    stamp = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "compression.type": "gzip"})
    for i in range(30):
        producer.produce(topic, b"%d" % i, key=b"k%d" % (i % 3), partition=i % 2,
                         timestamp=stamp + i, headers=[("n", b"%d" % i)])
    assert producer.flush(20) == 0
    producer.close()
    version = {e.version for e in cluster.request_log(since, api=ApiKey.PRODUCE)}.pop()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("plain"),
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
        got = drain(consumer, 30)
    finally:
        consumer.close()
    for p in (0, 1):
        assert [(m.offset(), m.value()) for m in got if m.partition() == p] == \
            [(n, b"%d" % i) for n, i in enumerate(range(p, 30, 2))]
    for m in got:
        i = int(m.value())
        assert m.key() == b"k%d" % (i % 3)
        assert m.timestamp()[1] == (stamp + i if version >= 2 else -1)
        assert m.headers() == ([("n", b"%d" % i)] if version >= 3 else None)


def configs_flow(cluster, bootstrap: str, key: int, since: int,
                 absent: AbstractSet[int] = frozenset()) -> None:
    """A topic's configuration replaced whole (AlterConfigs), then changed entry by entry
    (IncrementalAlterConfigs: SET and DELETE), each read back with DescribeConfigs
    (IncrementalAlterConfigs in ``absent``: a broker before Kafka 2.3, the call fails
    saying so)."""
    topic = unique("configs")
    cluster.create_topic(topic, partitions=1)
    resource = ConfigResource("topic", topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        def described() -> Dict[str, str]:
            entries = admin.describe_configs([resource])[resource].result(20)
            return {name: entries[name].value for name in ("retention.ms", "segment.ms")}

        with pytest.warns(DeprecationWarning):
            whole = admin.alter_configs([ConfigResource("topic", topic, set_config={
                "retention.ms": "111111", "segment.ms": "222222"})], request_timeout=15)
        whole[resource].result(20)
        assert described() == {"retention.ms": "111111", "segment.ms": "222222"}
        changed = admin.incremental_alter_configs([ConfigResource(
            "topic", topic, incremental_configs=[
                ConfigEntry("retention.ms", "333333",
                            incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ])], request_timeout=15)[resource]
        if ApiKey.INCREMENTAL_ALTER_CONFIGS in absent:
            with pytest.raises(KafkaException) as refused:
                changed.result(20)
            assert refused.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
            assert described() == {"retention.ms": "111111", "segment.ms": "222222"}
            return
        changed.result(20)
        assert described() == {"retention.ms": "333333", "segment.ms": str(7 * 24 * 3600000)}
    finally:
        admin.close()


def fill(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i in range(count):
        producer.produce(topic, b"%d" % i, partition=0)
    assert producer.flush(20) == 0
    producer.close()


FLOWS = {"data": data_flow, "txn": txn_flow, "plain": plain_flow, "admin": admin_flow,
         "configs": configs_flow,
         "partitions": partitions_flow, "groups": groups_flow, "kip848": kip848_flow}


def sent_versions(cluster, since: int, key: int) -> List[Tuple[int, List[str]]]:
    return [(e.version, e.errors) for e in cluster.request_log(since, api=key)]


@pytest.mark.parametrize("key, flow, version", MATRIX)
def test_each_api_at_each_version(capped_cluster, capped, key, flow, version):
    cluster, proxy = capped_cluster
    capped({key: version})
    since = cluster.clear_request_log()
    FLOWS[flow](cluster, proxy.bootstrap, key, since)
    sent = sent_versions(cluster, since, key)
    if key == ApiKey.OFFSET_FOR_LEADER_EPOCH and version < 2:
        # before v2 (Kafka 2.1) it carries no leader epoch to check: never sent
        assert not sent, sent
        return
    if key == ApiKey.API_VERSIONS:
        assert_asked_api_versions_again({key: {v for v, _ in sent}}, {key: version})
        return
    assert sent, f"no {ApiKey(key).name} request was sent"
    assert {v for v, _ in sent} == {expected(key, flow, version)}


#: The highest version of each API a broker of that Kafka release serves (APIs it does not
#: list are left out). From the schemas' version notes (kafka-protocol/messages/*.json:
#: which KIP each version came with) and the releases of those KIPs: Kafka 1.1 is the
#: oldest broker whose versions all lie within the test cluster's (KIP-896) floors but
#: OffsetForLeaderEpoch v0 (the client does not check epochs with it); 2.0 brought
#: KIP-229 (DeleteGroups) and the throttle-first versions of KIP-219; Kafka 2.1 brought
#: KIP-110 (zstd: Produce v7, Fetch v10) and KIP-320 (leader epochs: ListOffsets v4,
#: Metadata v7, OffsetCommit v6, OffsetFetch v5, TxnOffsetCommit v2, OffsetForLeaderEpoch
#: v2); 2.2-2.8 the rest below 3.0 (KIP-394 JoinGroup v4 in 2.2, KIP-345 static members in
#: 2.3, KIP-482 flexible versions in 2.4, KIP-447 TxnOffsetCommit v3 in 2.5, KIP-588
#: InitProducerId v4 in 2.7, KIP-516 topic ids in CreateTopics v7 / DeleteTopics v6 /
#: Metadata v10 and KIP-700 Metadata v11 / DescribeCluster v0 in 2.8); Kafka 3.0 added
#: KIP-734 (ListOffsets v7), KIP-699 (FindCoordinator v4) and KIP-709 (OffsetFetch v8);
#: Fetch v13 and Metadata v12 (KIP-516) came with 3.1. AlterConfigs: v0 from 0.11, v1
#: (KIP-219) from 2.0; IncrementalAlterConfigs (KIP-339) from 2.3, v1 (flexible) from 2.4.
BROKER_PROFILES: Dict[str, Dict[int, int]] = {
    "kafka-1.1": {
        ApiKey.PRODUCE: 5, ApiKey.FETCH: 7, ApiKey.LIST_OFFSETS: 2, ApiKey.METADATA: 5,
        ApiKey.OFFSET_COMMIT: 3, ApiKey.OFFSET_FETCH: 3, ApiKey.FIND_COORDINATOR: 1,
        ApiKey.JOIN_GROUP: 2, ApiKey.HEARTBEAT: 1, ApiKey.LEAVE_GROUP: 1,
        ApiKey.SYNC_GROUP: 1, ApiKey.DESCRIBE_GROUPS: 1, ApiKey.LIST_GROUPS: 1,
        ApiKey.SASL_HANDSHAKE: 1, ApiKey.API_VERSIONS: 1, ApiKey.CREATE_TOPICS: 2,
        ApiKey.DELETE_TOPICS: 1, ApiKey.DELETE_RECORDS: 0, ApiKey.INIT_PRODUCER_ID: 0,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: 0, ApiKey.ADD_PARTITIONS_TO_TXN: 0,
        ApiKey.ADD_OFFSETS_TO_TXN: 0, ApiKey.END_TXN: 0, ApiKey.TXN_OFFSET_COMMIT: 0,
        ApiKey.DESCRIBE_CONFIGS: 1, ApiKey.SASL_AUTHENTICATE: 0,
        ApiKey.CREATE_PARTITIONS: 0, ApiKey.ALTER_CONFIGS: 0,
    },
    "kafka-2.0": {
        ApiKey.PRODUCE: 6, ApiKey.FETCH: 8, ApiKey.LIST_OFFSETS: 3, ApiKey.METADATA: 6,
        ApiKey.OFFSET_COMMIT: 4, ApiKey.OFFSET_FETCH: 4, ApiKey.FIND_COORDINATOR: 2,
        ApiKey.JOIN_GROUP: 3, ApiKey.HEARTBEAT: 2, ApiKey.LEAVE_GROUP: 2,
        ApiKey.SYNC_GROUP: 2, ApiKey.DESCRIBE_GROUPS: 2, ApiKey.LIST_GROUPS: 2,
        ApiKey.SASL_HANDSHAKE: 1, ApiKey.API_VERSIONS: 2, ApiKey.CREATE_TOPICS: 3,
        ApiKey.DELETE_TOPICS: 2, ApiKey.DELETE_RECORDS: 1, ApiKey.INIT_PRODUCER_ID: 1,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: 1, ApiKey.ADD_PARTITIONS_TO_TXN: 1,
        ApiKey.ADD_OFFSETS_TO_TXN: 1, ApiKey.END_TXN: 1, ApiKey.TXN_OFFSET_COMMIT: 1,
        ApiKey.DESCRIBE_CONFIGS: 2, ApiKey.SASL_AUTHENTICATE: 0,
        ApiKey.CREATE_PARTITIONS: 1, ApiKey.DELETE_GROUPS: 1, ApiKey.ALTER_CONFIGS: 1,
    },
    "kafka-2.1": {
        ApiKey.PRODUCE: 7, ApiKey.FETCH: 10, ApiKey.LIST_OFFSETS: 4, ApiKey.METADATA: 7,
        ApiKey.OFFSET_COMMIT: 6, ApiKey.OFFSET_FETCH: 5, ApiKey.FIND_COORDINATOR: 2,
        ApiKey.JOIN_GROUP: 3, ApiKey.HEARTBEAT: 2, ApiKey.LEAVE_GROUP: 2,
        ApiKey.SYNC_GROUP: 2, ApiKey.DESCRIBE_GROUPS: 2, ApiKey.LIST_GROUPS: 2,
        ApiKey.SASL_HANDSHAKE: 1, ApiKey.API_VERSIONS: 2, ApiKey.CREATE_TOPICS: 3,
        ApiKey.DELETE_TOPICS: 3, ApiKey.DELETE_RECORDS: 1, ApiKey.INIT_PRODUCER_ID: 1,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: 2, ApiKey.ADD_PARTITIONS_TO_TXN: 1,
        ApiKey.ADD_OFFSETS_TO_TXN: 1, ApiKey.END_TXN: 1, ApiKey.TXN_OFFSET_COMMIT: 2,
        ApiKey.DESCRIBE_CONFIGS: 2, ApiKey.SASL_AUTHENTICATE: 0,
        ApiKey.CREATE_PARTITIONS: 1, ApiKey.DELETE_GROUPS: 1, ApiKey.ALTER_CONFIGS: 1,
    },
    "kafka-2.8": {
        ApiKey.PRODUCE: 9, ApiKey.FETCH: 12, ApiKey.LIST_OFFSETS: 6, ApiKey.METADATA: 11,
        ApiKey.OFFSET_COMMIT: 8, ApiKey.OFFSET_FETCH: 7, ApiKey.FIND_COORDINATOR: 3,
        ApiKey.JOIN_GROUP: 7, ApiKey.HEARTBEAT: 4, ApiKey.LEAVE_GROUP: 4,
        ApiKey.SYNC_GROUP: 5, ApiKey.DESCRIBE_GROUPS: 5, ApiKey.LIST_GROUPS: 4,
        ApiKey.SASL_HANDSHAKE: 1, ApiKey.API_VERSIONS: 3, ApiKey.CREATE_TOPICS: 7,
        ApiKey.DELETE_TOPICS: 6, ApiKey.DELETE_RECORDS: 2, ApiKey.INIT_PRODUCER_ID: 4,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 3,
        ApiKey.ADD_OFFSETS_TO_TXN: 3, ApiKey.END_TXN: 3, ApiKey.TXN_OFFSET_COMMIT: 3,
        ApiKey.DESCRIBE_CONFIGS: 4, ApiKey.SASL_AUTHENTICATE: 2,
        ApiKey.CREATE_PARTITIONS: 3, ApiKey.DELETE_GROUPS: 2, ApiKey.ELECT_LEADERS: 2,
        ApiKey.DESCRIBE_CLUSTER: 0, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0, ApiKey.ALTER_CONFIGS: 1,
        ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    },
}
#: Kafka 0.11 brought record batches v2 (Produce v3, Fetch v4 and v5: KIP-98, KIP-107),
#: transactions, DescribeConfigs v0 and OffsetForLeaderEpoch v0; 1.0 KIP-112's Produce v4-5
#: and Fetch v6, SaslHandshake v1 with SaslAuthenticate (KIP-152), CreatePartitions (KIP-195).
BROKER_PROFILES["kafka-0.11"] = {
    ApiKey.PRODUCE: 3, ApiKey.FETCH: 5, ApiKey.LIST_OFFSETS: 2, ApiKey.METADATA: 4,
    ApiKey.OFFSET_COMMIT: 3, ApiKey.OFFSET_FETCH: 3, ApiKey.FIND_COORDINATOR: 1,
    ApiKey.JOIN_GROUP: 2, ApiKey.HEARTBEAT: 1, ApiKey.LEAVE_GROUP: 1, ApiKey.SYNC_GROUP: 1,
    ApiKey.DESCRIBE_GROUPS: 1, ApiKey.LIST_GROUPS: 1, ApiKey.SASL_HANDSHAKE: 0,
    ApiKey.API_VERSIONS: 1, ApiKey.CREATE_TOPICS: 2, ApiKey.DELETE_TOPICS: 1,
    ApiKey.DELETE_RECORDS: 0, ApiKey.INIT_PRODUCER_ID: 0, ApiKey.OFFSET_FOR_LEADER_EPOCH: 0,
    ApiKey.ADD_PARTITIONS_TO_TXN: 0, ApiKey.ADD_OFFSETS_TO_TXN: 0, ApiKey.END_TXN: 0,
    ApiKey.TXN_OFFSET_COMMIT: 0, ApiKey.DESCRIBE_CONFIGS: 0, ApiKey.ALTER_CONFIGS: 0,
}
BROKER_PROFILES["kafka-1.0"] = dict(BROKER_PROFILES["kafka-0.11"])
BROKER_PROFILES["kafka-1.0"].update({ApiKey.PRODUCE: 5, ApiKey.FETCH: 6, ApiKey.METADATA: 5,
                                     ApiKey.SASL_HANDSHAKE: 1, ApiKey.SASL_AUTHENTICATE: 0,
                                     ApiKey.CREATE_PARTITIONS: 0})
BROKER_PROFILES["kafka-3.0"] = dict(BROKER_PROFILES["kafka-2.8"])
BROKER_PROFILES["kafka-3.0"].update({ApiKey.LIST_OFFSETS: 7, ApiKey.FIND_COORDINATOR: 4,
                                     ApiKey.OFFSET_FETCH: 8})


def assert_asked_api_versions_again(used: Mapping[int, AbstractSet[int]],
                                    caps: Mapping[int, int]) -> None:
    """Each connection asked in the newest ApiVersions, was refused, and asked again: in
    the broker's version (KIP-511 told it) or, from a broker before KIP-511, in v0."""
    own = caps[ApiKey.API_VERSIONS]
    newest = API_KEYS[ApiKey.API_VERSIONS].max_version
    again = own if own >= 3 else 0
    assert used[ApiKey.API_VERSIONS] == ({newest, again} if own < newest else {newest})


@pytest.mark.parametrize("profile", sorted(BROKER_PROFILES))
def test_a_whole_broker_of_an_older_release(capped_cluster, capped, profile):
    """Every API at once at the versions of an older Kafka: all the flows run, each API
    they use goes out at the release's version, and none the release lacks is sent."""
    cluster, proxy = capped_cluster
    caps = BROKER_PROFILES[profile]
    capped(caps, only=True)
    since = cluster.clear_request_log()
    absent = frozenset(FLOWS_OF) - set(caps)
    for name, flow in FLOWS.items():
        if name in ("partitions", "groups", "kip848", "configs"):
            flow = functools.partial(flow, absent=absent)
        flow(cluster, proxy.bootstrap, ApiKey.HEARTBEAT, since)
    used = {}
    for entry in cluster.request_log(since):
        used.setdefault(entry.api_key, set()).add(entry.version)
    assert set(used) <= set(caps), {ApiKey(k).name for k in set(used) - set(caps)}
    assert_asked_api_versions_again(used, caps)
    for key, flows in FLOWS_OF.items():
        if key == ApiKey.API_VERSIONS:
            continue        # checked just above
        if key not in caps:
            assert key not in used, ApiKey(key).name
            continue
        want = {expected(key, flow, caps[key]) for flow in flows}
        if key == ApiKey.OFFSET_FOR_LEADER_EPOCH and caps[key] < 2:
            want = set()   # before v2 (Kafka 2.1) it carries no leader epoch to check
        assert used.get(key, set()) == want, (ApiKey(key).name, used.get(key))


#: Brokers before record batches v2 (Produce v3, Kafka 0.11): 0.10.2 and 0.10.0.
PRE_RECORD_BATCH_PROFILES: Dict[str, Dict[int, int]] = {
    "kafka-0.10.2": {
        ApiKey.PRODUCE: 2, ApiKey.FETCH: 3, ApiKey.LIST_OFFSETS: 1, ApiKey.METADATA: 2,
        ApiKey.OFFSET_COMMIT: 2, ApiKey.OFFSET_FETCH: 2, ApiKey.FIND_COORDINATOR: 0,
        ApiKey.JOIN_GROUP: 1, ApiKey.HEARTBEAT: 0, ApiKey.LEAVE_GROUP: 0,
        ApiKey.SYNC_GROUP: 0, ApiKey.DESCRIBE_GROUPS: 0, ApiKey.LIST_GROUPS: 0,
        ApiKey.SASL_HANDSHAKE: 0, ApiKey.API_VERSIONS: 0, ApiKey.CREATE_TOPICS: 1,
        ApiKey.DELETE_TOPICS: 0,
    },
    "kafka-0.10.0": {
        ApiKey.PRODUCE: 2, ApiKey.FETCH: 2, ApiKey.LIST_OFFSETS: 0, ApiKey.METADATA: 1,
        ApiKey.OFFSET_COMMIT: 2, ApiKey.OFFSET_FETCH: 1, ApiKey.FIND_COORDINATOR: 0,
        ApiKey.JOIN_GROUP: 0, ApiKey.HEARTBEAT: 0, ApiKey.LEAVE_GROUP: 0,
        ApiKey.SYNC_GROUP: 0, ApiKey.DESCRIBE_GROUPS: 0, ApiKey.LIST_GROUPS: 0,
        ApiKey.SASL_HANDSHAKE: 0, ApiKey.API_VERSIONS: 0,
    },
}


@pytest.mark.parametrize("profile", sorted(PRE_RECORD_BATCH_PROFILES))
def test_a_broker_before_record_batches(capped_cluster, capped, profile):
    """A Kafka 0.10 broker: our producer writes message sets v1 with Produce v2 (as
    librdkafka does); an idempotent one cannot (no producer ids before 0.11) and fails
    saying so. A group consumer reads everything (some written before, through the full
    versions) from the message sets the broker down-converts, with offsets, keys, values
    and timestamps, commits and resumes; the admin client creates and deletes topics where
    the broker can (0.10.1+) and says _UNSUPPORTED_FEATURE where it cannot
    (describe_configs: 0.11+); groups are listed and described (deleted from 2.0 on), the
    plain producer's flow runs."""
    cluster, proxy = capped_cluster
    caps = PRE_RECORD_BATCH_PROFILES[profile]
    topic, group = unique("old"), unique("old-group")
    cluster.create_topic(topic, partitions=2)
    stamp = int(time.time() * 1000) - 60_000
    before = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 2})
    for i in range(20):
        before.produce(topic, b"%d" % i, key=b"k%d" % (i % 5), timestamp=stamp + i)
    assert before.flush(20) == 0
    before.close()
    capped(caps, only=True)
    since = cluster.clear_request_log()
    reports: List = []
    # message sets v1 with Produce v2, as librdkafka writes them
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 5})
    try:
        for i in range(20, 25):
            producer.produce(topic, b"%d" % i, key=b"k%d" % (i % 5), timestamp=stamp + i,
                             on_delivery=lambda e, m: reports.append(e))
        assert producer.flush(10) == 0
    finally:
        producer.close()
    assert reports == [None] * 5
    # an idempotent producer needs record batches v2 (and InitProducerId)
    idempotent = Producer({"bootstrap.servers": proxy.bootstrap, "enable.idempotence": True,
                           "message.timeout.ms": 5000})
    try:
        idempotent.produce(topic, b"never", on_delivery=lambda e, m: reports.append(e))
        idempotent.flush(10)
    except KafkaException as exc:       # fatal: raised by the calls after it
        reports.append(exc.args[0])
    finally:
        with contextlib.suppress(KafkaException):   # its fatal error, raised once more
            idempotent.close()
    # its message is purged on the fatal error (or the call raises it), never written
    assert "_UNSUPPORTED_FEATURE" in reports[5].str() and "InitProducerId" in reports[5].str()
    conf = {"bootstrap.servers": proxy.bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "heartbeat.interval.ms": 100, "session.timeout.ms": 6000}
    first = Consumer(conf)
    try:
        first.subscribe([topic])
        got = drain(first, 25)
        got += read_to_the_end(first, topic)
        assert sorted(int(m.value()) for m in got) == list(range(25))
        for m in got:
            assert m.key() == b"k%d" % (int(m.value()) % 5)
            # message format v1 from Fetch v2 on: the producer's timestamps
            assert m.timestamp() == (1, stamp + int(m.value()))
        first.commit(asynchronous=False)
        committed = first.committed([TopicPartition(topic, p) for p in (0, 1)], 10)
        ends = {p: max(o for o, _ in msgs) + 1 for p, msgs in by_partition(got).items()}
        assert {tp.partition: tp.offset for tp in committed} == {p: ends.get(p, 0)
                                                                 for p in (0, 1)}
        # the start and end of a log: ListOffsets v0 (0.10.0) tells them too
        assert first.get_watermark_offsets(TopicPartition(topic, 0), 10) == (0, ends.get(0, 0))
        asked = [TopicPartition(topic, 0, stamp)]
        if caps[ApiKey.LIST_OFFSETS] >= 1:
            found = min((m.offset() for m in got if m.partition() == 0), default=-1)
            assert [tp.offset for tp in first.offsets_for_times(asked, 10)] == [found]
        else:    # v0 cannot look up a time (Java refuses too)
            with pytest.raises(KafkaException) as refused:
                first.offsets_for_times(asked, 10)
            assert refused.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
    finally:
        first.close()
    second = Consumer(conf)
    try:
        second.subscribe([topic])
        deadline = time.monotonic() + 10
        while not second.assignment() and time.monotonic() < deadline:
            second.poll(0.1)
        assert read_to_the_end(second, topic) == []     # resumed at the commit
    finally:
        second.close()
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    try:
        # Metadata before v4: no allow_auto_topic_creation to send (the broker decides)
        described = admin.describe_topics(TopicCollection([topic]), request_timeout=15)
        assert len(described[topic].result(20).partitions) == 2
        assert [n.id for n in admin.describe_cluster(request_timeout=15).result(20).nodes] \
            == cluster.broker_ids
        named = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p)
                                                      for p in (0, 1)])]
        listed = admin.list_consumer_group_offsets(named, request_timeout=15)[group]
        assert {tp.partition: tp.offset for tp in listed.result(20).topic_partitions} == \
            {p: ends.get(p, 0) for p in (0, 1)}
        every = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                  request_timeout=15)[group]
        if caps[ApiKey.OFFSET_FETCH] >= 2:
            assert {tp.partition: tp.offset for tp in every.result(20).topic_partitions} == \
                {p: ends.get(p, 0) for p in (0, 1)}
        else:   # v0-1 cannot ask for all of a group's offsets (null topics came with v2)
            with pytest.raises(KafkaException) as refused:
                every.result(20)
            assert refused.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
            assert "OffsetFetch v2" in refused.value.args[0].str()
        created = unique("old-admin")
        future = admin.create_topics([NewTopic(created, 2, 1)], request_timeout=15)[created]
        resource = ConfigResource("topic", topic)
        described = admin.describe_configs([resource])[resource]
        with pytest.raises(KafkaException) as refused:
            described.result(20)
        assert refused.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
        if ApiKey.CREATE_TOPICS not in caps:
            with pytest.raises(KafkaException) as refused:
                future.result(20)
            assert refused.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
        else:
            future.result(20)
            assert len(cluster.describe_topic(created).partitions) == 2
            admin.delete_topics([created], request_timeout=15)[created].result(20)
            cluster.wait_for(lambda: created not in cluster.topics())
    finally:
        admin.close()
    absent = frozenset(FLOWS_OF) - set(caps)
    groups_flow(cluster, proxy.bootstrap, ApiKey.HEARTBEAT, since, absent=absent)
    plain_flow(cluster, proxy.bootstrap, ApiKey.PRODUCE, since)
    used: Dict[int, set] = {}
    for entry in cluster.request_log(since):
        used.setdefault(entry.api_key, set()).add(entry.version)
    assert set(used) <= set(caps), {ApiKey(k).name for k in set(used) - set(caps)}
    assert_asked_api_versions_again(used, caps)
    for key in (ApiKey.FETCH, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.JOIN_GROUP,
                ApiKey.LIST_OFFSETS, ApiKey.METADATA):
        assert used.get(key) == {caps[key]}, (ApiKey(key).name, used.get(key))
    assert used[ApiKey.PRODUCE] == {caps[ApiKey.PRODUCE]}


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
@pytest.mark.parametrize("fetch_version", [1, 3])
def test_confluent_kafka_reads_the_down_converted_message_sets_as_we_do(
        capped_cluster, capped, fetch_version, codec):
    """The peer's reading of the cluster's down-conversion: confluent-kafka (librdkafka)
    and our consumer, both at Fetch v1 (message format v0) or v3 (v1), read the same
    offsets, keys and values, the producer's timestamps from format v1 on, no headers.
    Format v0 has no timestamps: librdkafka reports (TIMESTAMP_NOT_AVAILABLE, 0), and now
    so do we (it was -1)."""
    ck = pytest.importorskip("confluent_kafka")
    cluster, proxy = capped_cluster
    topic = unique("peer")
    cluster.create_topic(topic, partitions=1)
    stamp = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 20,
                         "compression.type": codec})
    for i in range(200):
        producer.produce(topic, b"value-%d" % i * (i % 7), key=None if i % 9 == 0 else
                         b"k%d" % i, timestamp=stamp + i, headers=[("h", b"%d" % i)])
    assert producer.flush(20) == 0
    producer.close()
    capped({ApiKey.FETCH: fetch_version})
    since = cluster.clear_request_log()
    readers = {"ours": Consumer, "confluent-kafka": ck.Consumer}
    seen = {}
    for name, make in readers.items():
        consumer = make({"bootstrap.servers": proxy.bootstrap, "group.id": unique("peer"),
                         "enable.auto.commit": False,
                         # small fetches: answers cut inside a message set
                         "max.partition.fetch.bytes": 1000})
        got = []
        try:
            consumer.assign([(TopicPartition if name == "ours" else ck.TopicPartition)(
                topic, 0, 0)])
            deadline = time.monotonic() + 20
            while len(got) < 200 and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                assert msg.error() is None, (name, msg.error())
                got.append((msg.offset(), msg.key(), msg.value(), msg.timestamp(),
                            msg.headers()))
        finally:
            consumer.close()
        seen[name] = got
    no_time = (ck.TIMESTAMP_NOT_AVAILABLE, 0)     # librdkafka's for a message of format v0
    assert seen["ours"] == seen["confluent-kafka"]
    assert seen["ours"] == [
        (i, None if i % 9 == 0 else b"k%d" % i, b"value-%d" % i * (i % 7),
         (ck.TIMESTAMP_CREATE_TIME, stamp + i) if fetch_version >= 2 else no_time, None)
        for i in range(200)]
    assert {e.version for e in cluster.request_log(since, api=ApiKey.FETCH)} == \
        {fetch_version}


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_confluent_kafka_produces_message_sets_to_a_kafka_0_10_broker(capped_cluster, capped,
                                                                      codec):
    """librdkafka writes message sets v1 with Produce v2 to a Kafka 0.10.2 broker; the
    cluster stores them as v2 batches, as Kafka 3 does: our consumer reads every message
    with its offset, key, value and the producer's timestamp (headers: librdkafka drops
    them for message sets)."""
    ck = pytest.importorskip("confluent_kafka")
    cluster, proxy = capped_cluster
    topic = unique("from-librdkafka")
    cluster.create_topic(topic, partitions=1)
    capped(PRE_RECORD_BATCH_PROFILES["kafka-0.10.2"], only=True)
    since = cluster.clear_request_log()
    stamp = int(time.time() * 1000) - 60_000
    reports: List = []
    producer = ck.Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 20,
                            "compression.type": codec})
    for i in range(100):
        producer.produce(topic, b"value-%d" % i * (i % 5), key=None if i % 7 == 0 else
                         b"k%d" % i, timestamp=stamp + i, headers=[("h", b"x")],
                         on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert producer.flush(20) == 0
    assert sorted(reports) == [(None, i) for i in range(100)]
    assert {e.version for e in cluster.request_log(since, api=ApiKey.PRODUCE)} == {2}
    proxy.clear_faults()
    consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": unique("r"),
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = drain(consumer, 100)
    finally:
        consumer.close()
    assert [(m.offset(), m.key(), m.value(), m.timestamp(), m.headers()) for m in got] == [
        (i, None if i % 7 == 0 else b"k%d" % i, b"value-%d" % i * (i % 5),
         (1, stamp + i), None) for i in range(100)]


@pytest.mark.parametrize("fetch_version", [1, 2])
def test_batches_above_the_fetch_size_are_read_from_a_broker_before_kip_74(
        capped_cluster, capped, fetch_version):
    """Before Fetch v3 (KIP-74) a broker cuts a batch larger than max.partition.fetch.bytes,
    and the consumer sees only an incomplete message: it asks again for twice as much
    until the batch fits, as librdkafka does, and reads everything."""
    ck = pytest.importorskip("confluent_kafka")
    cluster, proxy = capped_cluster
    topic = unique("big-batches")
    cluster.create_topic(topic, partitions=1)
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 50})
    for i in range(60):
        producer.produce(topic, b"%03d" % i * 40)
    assert producer.flush(20) == 0
    producer.close()
    capped({ApiKey.FETCH: fetch_version})
    for make, tp in ((Consumer, TopicPartition), (ck.Consumer, ck.TopicPartition)):
        since = cluster.clear_request_log()
        consumer = make({"bootstrap.servers": proxy.bootstrap, "group.id": unique("big"),
                         "enable.auto.commit": False, "max.partition.fetch.bytes": 300})
        values = []
        try:
            consumer.assign([tp(topic, 0, 0)])
            deadline = time.monotonic() + 20
            while len(values) < 60 and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None:
                    assert msg.error() is None, (make, msg.error())
                    values.append(msg.value())
        finally:
            consumer.close()
        assert values == [b"%03d" % i * 40 for i in range(60)], make
        answered = [p["bytes"] for e in cluster.request_log(since, api=ApiKey.FETCH)
                    for p in e.details.get("partitions", ())]
        assert 300 in answered and max(answered) > 300    # cut, then asked for more


def test_zstd_data_is_refused_to_a_fetch_below_v4_and_served_from_v4(capped_cluster, capped):
    """zstd batches cannot be down-converted: a consumer at Fetch v3 gets the partition's
    UNSUPPORTED_COMPRESSION_TYPE as an error event (confluent-kafka too) and no message,
    its position staying there; Kafka serves the stored batches as they are to Fetch v4-9
    (it refuses those only for a topic whose compression.type is zstd, which the cluster
    does not take), and a consumer at Fetch v4 reads them."""
    ck = pytest.importorskip("confluent_kafka")
    cluster, proxy = capped_cluster
    topic = unique("zstd-old")
    cluster.create_topic(topic, partitions=1)
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "compression.type": "zstd",
                         "linger.ms": 5})
    for i in range(10):
        producer.produce(topic, b"%d" % i * 20)
    assert producer.flush(20) == 0
    producer.close()
    for version in (3, 4):
        capped({ApiKey.FETCH: version})
        for make, tp in ((Consumer, TopicPartition), (ck.Consumer, ck.TopicPartition)):
            consumer = make({"bootstrap.servers": proxy.bootstrap, "group.id": unique("z"),
                             "enable.auto.commit": False})
            values, errors = [], []
            try:
                consumer.assign([tp(topic, 0, 0)])
                deadline = time.monotonic() + (3 if version < 4 else 15)
                while time.monotonic() < deadline and len(values) < 10:
                    msg = consumer.poll(0.2)
                    if msg is None:
                        continue
                    if msg.error():
                        errors.append(msg.error().code())
                    else:
                        values.append(msg.value())
                position = consumer.position([tp(topic, 0)])[0].offset
            finally:
                consumer.close()
            if version < 4:
                assert values == [] and errors
                assert set(errors) == {KafkaError.UNSUPPORTED_COMPRESSION_TYPE}
                assert position in (0, -1001)       # never moved (-1001: nothing read)
            else:
                assert values == [b"%d" % i * 20 for i in range(10)] and not errors
        proxy.clear_faults()


@pytest.mark.parametrize("init_version", [0, 2, 3])
def test_a_producer_id_lost_in_a_transaction_never_fences_the_instance_that_took_over(
        capped_cluster, capped, init_version):
    """A transaction gets UNKNOWN_PRODUCER_ID (the partition leader lost the producer id):
    it is aborted, then the epoch must be bumped (KIP-360). Before the old instance's bump
    reaches the coordinator (its first attempt is answered COORDINATOR_LOAD_IN_PROGRESS),
    a new instance with the same transactional.id takes over. From InitProducerId v3 the
    bump names the current epoch, which the coordinator refuses once another instance
    bumped it: the old instance is fenced. Before v3 (Kafka < 2.5) the request has no
    epoch to check, and the plain InitProducerId the client sent instead bumped the epoch
    for whoever asked: the old instance fenced the new one and carried on. Now, as
    librdkafka does, a bump the coordinator cannot check is not asked for: the abort fails
    with a fatal _UNSUPPORTED_FEATURE. In both cases the new instance commits."""
    cluster, proxy = capped_cluster
    capped({ApiKey.INIT_PRODUCER_ID: init_version})
    topic, txn_id = unique("lost-pid"), unique("tx")
    cluster.create_topic(topic, partitions=1)
    conf = {"bootstrap.servers": proxy.bootstrap, "transactional.id": txn_id,
            "linger.ms": 2}
    old = Producer(dict(conf, **{"retry.backoff.ms": 1500, "retry.backoff.max.ms": 1500}))
    new = Producer(conf)
    aborted: List = []
    try:
        old.init_transactions(20)
        old.begin_transaction()
        cluster.inject_errors("Produce", ["UNKNOWN_PRODUCER_ID"])
        old.produce(topic, b"old")
        with pytest.raises(KafkaException) as failed:
            old.commit_transaction(20)
        assert failed.value.args[0].txn_requires_abort()
        cluster.inject_errors("InitProducerId", ["COORDINATOR_LOAD_IN_PROGRESS"])

        def abort() -> None:
            try:
                old.abort_transaction(20)
                aborted.append(None)
            except KafkaException as exc:
                aborted.append(exc.args[0])

        aborting = threading.Thread(target=abort)
        aborting.start()
        # the old instance's bump, refused once, waits out its backoff (if it was sent)
        cluster.wait_for(lambda: not cluster.pending_errors() or not aborting.is_alive(),
                         timeout=10)
        cluster.clear_faults()
        new.init_transactions(20)
        aborting.join(20)
        assert len(aborted) == 1 and aborted[0] is not None and aborted[0].fatal(), aborted
        if init_version < 3:
            assert aborted[0].code() == KafkaError._UNSUPPORTED_FEATURE
        else:
            assert aborted[0].code() == KafkaError._FENCED
        new.begin_transaction()
        new.produce(topic, b"new")
        new.commit_transaction(20)
    finally:
        with contextlib.suppress(KafkaException):   # its fatal error, raised once more
            old.close()
        new.close()
    reader = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": unique("r"),
                       "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        got = drain(reader, 1)
        got += read_to_the_end(reader, topic, partitions=(0,))
        assert [m.value() for m in got] == [b"new"]
    finally:
        reader.close()


@pytest.mark.parametrize("version", [2, 3, 4])
def test_topics_with_the_brokers_default_counts_need_createtopics_v4(
        capped_cluster, capped, version):
    """A NewTopic that leaves the partition count or the replication factor to the broker
    (-1, KIP-464) needs CreateTopics v4 (Kafka 2.4): an older broker refuses -1 as an
    invalid count. Below v4 such a topic fails at once with _UNSUPPORTED_FEATURE, as in
    librdkafka (the Java client raises UnsupportedVersionException), and is not created;
    the other topics of the call are."""
    cluster, proxy = capped_cluster
    capped({ApiKey.CREATE_TOPICS: version})
    defaults = {t.topic: t for t in (NewTopic(unique("no-count"), replication_factor=1),
                                     NewTopic(unique("no-factor"), 2))}
    explicit = NewTopic(unique("counted"), 2, 1)
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    try:
        futures = admin.create_topics(list(defaults.values()) + [explicit],
                                      request_timeout=15)
        futures[explicit.topic].result(20)
        for name in defaults:
            if version >= 4:
                futures[name].result(20)
            else:
                with pytest.raises(KafkaException) as refused:
                    futures[name].result(20)
                assert refused.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
                assert "KIP-464" in refused.value.args[0].str()
        alone = NewTopic(unique("alone"))      # the only topic of its call
        defaults[alone.topic] = alone
        future = admin.create_topics([alone], request_timeout=15)[alone.topic]
        if version >= 4:
            future.result(20)
        else:
            with pytest.raises(KafkaException) as refused:
                future.result(20)
            assert "KIP-464" in refused.value.args[0].str()
    finally:
        admin.close()
    created = set(cluster.topics())
    assert explicit.topic in created
    assert all((name in created) == (version >= 4) for name in defaults)


@pytest.mark.parametrize("version", [6, 7])
def test_zstd_is_sent_uncompressed_to_a_broker_before_produce_v7(
        capped_cluster, capped, version):
    """zstd batches need Produce v7 (KIP-110, Kafka 2.1): a broker refuses them in an older
    version with UNSUPPORTED_COMPRESSION_TYPE, and one before 2.1 knows no zstd at all.
    There the batches go uncompressed, as librdkafka sends them ("Broker does not support
    compression type zstd: not compressing batch"): every message is delivered once."""
    cluster, proxy = capped_cluster
    capped({ApiKey.PRODUCE: version})
    topic = unique("zstd")
    cluster.create_topic(topic, partitions=1)
    since = cluster.clear_request_log()
    reports: List = []
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "compression.type": "zstd",
                         "linger.ms": 2, "message.timeout.ms": 10000})
    try:
        for i in range(20):
            producer.produce(topic, b"%d" % i * 50, on_delivery=lambda e, m: reports.append(e))
        assert producer.flush(20) == 0
    finally:
        producer.close()
    assert reports == [None] * 20
    sent = cluster.request_log(since, api=ApiKey.PRODUCE)
    assert {e.version for e in sent} == {version} and not any(e.errors for e in sent)
    reader = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": unique("r"),
                       "enable.auto.commit": False})
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        got = drain(reader, 20)
        got += read_to_the_end(reader, topic, partitions=(0,))
        assert [m.value() for m in got] == [b"%d" % i * 50 for i in range(20)]
    finally:
        reader.close()


@pytest.fixture(scope="module")
def half_upgraded_cluster(tmp_path_factory):
    """``(cluster, new_proxy, old_proxy)``: two brokers, each behind its own fault proxy
    (which the cluster advertises); the test caps the second one's versions."""
    from kafka_client._testing.brokers import free_port
    from kafka_client._testing.proxy import FaultProxy
    from kafka_client.testing import Cluster

    ports = [free_port() for _ in range(4)]
    data_dir = str(tmp_path_factory.mktemp("half") / "cluster")
    with FaultProxy("127.0.0.1", ports[0], port=ports[2], follow_frames=True) as new, \
            FaultProxy("127.0.0.1", ports[1], port=ports[3], follow_frames=True) as old:
        with Cluster(brokers=2, data_dir=data_dir, ports=ports[:2],
                     advertised_ports=ports[2:],
                     broker_config={"legacy.api.versions.enable": True}) as cluster:
            yield cluster, new, old


class _SpreadLeaders:
    """The cluster, its create_topic() placing partition i on broker 1 + i % 2."""

    def __init__(self, cluster) -> None:
        self._cluster = cluster

    def __getattr__(self, name: str):
        return getattr(self._cluster, name)

    def create_topic(self, name: str, partitions: int = 1):
        return self._cluster.create_topic(
            name, partitions=partitions, replication_factor=1,
            assignments=[[1 + i % 2] for i in range(partitions)])


@pytest.mark.parametrize("profile", ["kafka-0.11", "kafka-2.1", "kafka-2.8"])
def test_a_cluster_half_way_through_an_upgrade(half_upgraded_cluster, profile):
    """A rolling upgrade: one broker speaks the newest versions, the other those of an
    older release, and partitions lead on both. Every flow runs, bootstrapped through
    either broker: each connection speaks its broker's versions (topic ids to the new
    one, names to the old, fetch sessions, zstd-free batches...)."""
    cluster, new, old = half_upgraded_cluster
    caps = BROKER_PROFILES[profile]

    def lower(response, _version):
        response.api_keys = [e for e in response.api_keys if e.api_key in caps]
        for entry in response.api_keys:
            entry.max_version = min(entry.max_version, caps[entry.api_key])
            entry.min_version = min(entry.min_version, entry.max_version)

    old.rewrite_responses(ApiKey.API_VERSIONS, lower, count=None)
    try:
        admin = AdminClient({"bootstrap.servers": new.bootstrap})
        try:
            controller = admin.describe_cluster(request_timeout=15).result(20).controller.id
        finally:
            admin.close()
        # the calls routed to the old broker meet its missing APIs
        missing = frozenset(FLOWS_OF) - set(caps)
        absent = missing if controller == 2 else frozenset()
        spread = _SpreadLeaders(cluster)
        for bootstrap in (new.bootstrap, old.bootstrap):
            for name, flow in FLOWS.items():
                if name in ("kip848", "configs"):
                    # before Kafka 4.0 (either broker may coordinate); config changes go to
                    # any broker, the old one's missing APIs unforeseeably
                    continue
                if name == "partitions":
                    flow = functools.partial(flow, absent=absent)
                elif name == "groups":     # the group's coordinator may be the old one
                    flow = functools.partial(flow, absent=missing, old_broker=2)
                since = cluster.clear_request_log()
                flow(spread, bootstrap, ApiKey.HEARTBEAT, since)
                for entry in cluster.request_log(since):
                    # ApiVersions is asked at the newest version first (the answer says)
                    if entry.broker == 2 and entry.api_key != ApiKey.API_VERSIONS:
                        assert entry.api_key in caps, entry.api
                        assert entry.version <= caps[entry.api_key], (entry.api, entry.version)
    finally:
        old.clear_faults()


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_zstd_batch_resent_to_a_broker_before_produce_v7_goes_uncompressed(
        half_upgraded_cluster, idempotent):
    """A batch compressed with zstd for a broker with Produce v7+ has to be sent again
    after its leader moved to a broker without v7 (a rolling upgrade): it goes
    uncompressed, same records, same sequence, as librdkafka sends it (which builds each
    request anew). It was resent as built and refused: every message failed with
    UNSUPPORTED_COMPRESSION_TYPE."""
    cluster, new, old = half_upgraded_cluster

    def no_v7(response, _version):
        for entry in response.api_keys:
            if entry.api_key == ApiKey.PRODUCE:
                entry.max_version = 6

    old.rewrite_responses(ApiKey.API_VERSIONS, no_v7, count=None)
    topic = unique("zstd-moved")
    try:
        cluster.create_topic(topic, partitions=1, replication_factor=2, assignments=[[1, 2]])
        cluster.wait_in_sync(topic)
        reports: List = []
        producer = Producer({"bootstrap.servers": new.bootstrap, "compression.type": "zstd",
                             "enable.idempotence": idempotent, "linger.ms": 5})
        try:
            producer.list_topics(topic, timeout=10)     # the leader is broker 1 (v7+)
            cluster.inject_errors("Produce", ["NOT_LEADER_OR_FOLLOWER"], broker=1)
            cluster.move_leader(topic, 0, to=2)
            since = cluster.clear_request_log()
            values = [b"%d" % i * 20 for i in range(50)]
            for value in values:
                producer.produce(topic, value, on_delivery=lambda e, m: reports.append(e))
            assert producer.flush(20) == 0
        finally:
            producer.close()
        assert reports == [None] * 50
        sent = [(e.broker, e.errors) for e in cluster.request_log(since, api=ApiKey.PRODUCE)]
        assert sent[0] == (1, ["NOT_LEADER_OR_FOLLOWER"]) and (2, []) in sent, sent
    finally:
        old.clear_faults()
    reader = Consumer({"bootstrap.servers": new.bootstrap, "group.id": unique("r"),
                       "enable.auto.commit": False})
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        got = drain(reader, 50)
        got += read_to_the_end(reader, topic, partitions=(0,))
        assert [m.value() for m in got] == values
    finally:
        reader.close()
