"""confluent-kafka drop-in: top-level names, partitioner functions and small value types."""
from __future__ import annotations

import importlib.util
import inspect
import os
import pickle
import random

import pytest

import kafka_client
import kafka_proto
from kafka_client import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    ElectionType,
    IsolationLevel,
    Node,
    ThrottleEvent,
    TopicCollection,
    TopicPartition,
    TopicPartitionInfo,
    Uuid,
    consistent,
    fnv1a,
    murmur2,
)

ck = pytest.importorskip("confluent_kafka")

# Out of scope of the drop-in promise (docs/migrating.md): the Schema Registry and legacy
# Avro submodules (attributes once another test imported them), whose serdes are used from
# confluent-kafka itself with our clients (test_compat_schema_registry.py); the rest of
# confluent-kafka's top level must be here.
NOT_YET = {"cimpl", "os", "schema_registry", "avro"}


def test_every_top_level_name_exists():
    public = {n for n in dir(ck) if not n.startswith("_")} - NOT_YET
    # A submodule is an attribute once something imported it (confluent_kafka.aio after
    # another test's import): for those, ours must be importable too.
    missing = sorted(n for n in public if not hasattr(kafka_client, n) and not (
        inspect.ismodule(getattr(ck, n)) and importlib.util.find_spec(f"kafka_client.{n}")))
    assert missing == []


def test_the_asyncio_module_has_every_name_and_method():
    import inspect

    import kafka_client.aio as ours_aio
    theirs_aio = pytest.importorskip("confluent_kafka.aio")
    public = {n for n in dir(theirs_aio) if not n.startswith("_")} - {"producer"}
    assert sorted(n for n in public if not hasattr(ours_aio, n)) == []
    from kafka_client.aio.producer import AIOProducer   # confluent_kafka.aio.producer's
    assert AIOProducer is ours_aio.AIOProducer
    for name in public:
        theirs_cls, ours_cls = getattr(theirs_aio, name), getattr(ours_aio, name)
        methods = {n for n, f in inspect.getmembers(theirs_cls) if callable(f)
                   and (not n.startswith("_") or n in ("__aenter__", "__aexit__", "__len__"))}
        missing = sorted(m for m in methods if not hasattr(ours_cls, m))
        assert missing == [], (name, missing)
        for m in methods - {"__len__", "__init__"}:
            if inspect.iscoroutinefunction(getattr(theirs_cls, m)):
                assert inspect.iscoroutinefunction(getattr(ours_cls, m)), (name, m)


def test_dir_lists_the_lazy_names():
    # Producer, Consumer, ... load on first use; dir() (and so completion) lists them anyway.
    public = {n for n in dir(ck) if not n.startswith("_")} - NOT_YET
    assert sorted(public - set(dir(kafka_client))) == []


@pytest.mark.parametrize("ours, theirs", [(murmur2, ck.murmur2), (fnv1a, ck.fnv1a),
                                          (consistent, ck.consistent)])
def test_partitioner_functions_match_confluent(ours, theirs):
    rng = random.Random(7)
    for i in range(3000):
        key = os.urandom(rng.randrange(0, 64))
        n = rng.randrange(1, 500)
        assert ours(key, n) == theirs(key, n)
    assert ours(bytearray(b"abc"), 7) == theirs(b"abc", 7)
    for bad_key in (None, "str", 5):
        with pytest.raises(TypeError):
            ours(bad_key, 3)
        with pytest.raises(TypeError):
            theirs(bad_key, 3)
    for bad_n in (0, -1):
        with pytest.raises(ValueError, match="partition_count must be > 0"):
            ours(b"k", bad_n)
    with pytest.raises(TypeError):
        ours(b"k", "3")


def test_version_functions():
    assert isinstance(kafka_client.version(), str)
    assert kafka_client.version() == kafka_client.__version__
    text, number = kafka_client.libversion()
    major, minor, patch = (int(p) for p in text.split("."))
    assert number == (major << 24) | (minor << 16) | (patch << 8) | 0xFF
    # the librdkafka release followed, not the codec's 0.1.0: programs gate features on
    # this number (confluent-kafka's own tests gate the Admin API on >= 0x000b0500)
    assert number >= 0x021000FF and text != kafka_proto.__version__


def test_enums_match_confluent_values_and_order():
    # Ours only (confluent-kafka 2.16 has no share group admin): KIP-932's share groups,
    # after confluent-kafka's members, for list_consumer_groups(types=...).
    extra = {ConsumerGroupType: ["SHARE"]}
    for ours, theirs in [(IsolationLevel, ck.IsolationLevel),
                         (ConsumerGroupState, ck.ConsumerGroupState),
                         (ConsumerGroupType, ck.ConsumerGroupType),
                         (ElectionType, ck.ElectionType)]:
        added = extra.get(ours, [])
        assert {m.name: m.value for m in ours if m.name not in added} == \
            {m.name: m.value for m in theirs}
        assert list(ours.__members__) == list(theirs.__members__) + added
    assert ConsumerGroupType.SHARE.value == max(m.value for m in ck.ConsumerGroupType) + 1
    assert ConsumerGroupState.STABLE < ConsumerGroupState.DEAD
    assert ConsumerGroupState.UNKOWN is ConsumerGroupState.UNKNOWN
    assert IsolationLevel(1) is IsolationLevel.READ_COMMITTED


def test_admin_enums_match_confluent():
    # Their numbers come from kafka_proto.enums; names, numbers, order, text and
    # comparisons stay confluent-kafka's.
    import confluent_kafka.admin as theirs_admin

    import kafka_client.admin as ours_admin
    for name in ("AclOperation", "AclPermissionType", "ResourceType", "ResourcePatternType",
                 "ConfigSource", "AlterConfigOpType", "ScramMechanism"):
        ours, theirs = getattr(ours_admin, name), getattr(theirs_admin, name)
        assert [(m.name, m.value) for m in ours] == [(m.name, m.value) for m in theirs], name
        assert all(type(m.value) is int for m in ours), name
        assert [(repr(m), str(m)) for m in ours] == [(repr(m), str(m)) for m in theirs], name
        first, last = list(ours)[0], list(ours)[-1]
        assert first < last and not last < first and first != first.value, name


def test_node_and_throttle_event_text_match():
    for args in [(1, "h", 9), (2, "host", 9092, "r1")]:
        assert str(Node(*args)) == str(ck.Node(*args))
        assert vars(Node(*args)) == vars(ck.Node(*args))
    assert Node(1, "h", 9) == Node(1, "h", 9) and Node(1, "h", 9) != Node(2, "h", 9)
    ev, theirs = ThrottleEvent("b", 1, 0.5), ck.ThrottleEvent("b", 1, 0.5)
    assert str(ev) == str(theirs) and vars(ev) == vars(theirs)


def test_container_types_keep_their_fields():
    n = Node(1, "h", 9)
    info = TopicPartitionInfo(0, n, [n], [n])
    assert (info.id, info.leader, info.replicas, info.isr) == (0, n, [n], [n])
    assert TopicCollection(["a", "b"]).topic_names == ["a", "b"]
    g = ConsumerGroupTopicPartitions("g", [TopicPartition("t", 0)])
    assert (g.group_id, g.topic_partitions) == ("g", [TopicPartition("t", 0)])
    assert ConsumerGroupTopicPartitions("g").topic_partitions is None


def test_uuid_text_matches_confluent_and_compares_by_value():
    for msb, lsb in [(1, 2), (0, 0), (-1, -1), (2**63 - 1, -2**63), (123456789, -987654321)]:
        u = Uuid(msb, lsb)
        assert str(u) == str(ck.Uuid(msb, lsb))
        assert (u.get_most_significant_bits(), u.get_least_significant_bits()) == (msb, lsb)
        assert u == Uuid(msb, lsb) and hash(u) == hash(Uuid(msb, lsb))
        assert pickle.loads(pickle.dumps(u)) == u
    assert Uuid(1, 2) != Uuid(2, 1)
    with pytest.raises(TypeError):
        Uuid("x", 1)
    with pytest.raises(OverflowError):
        Uuid(2**63, 0)


def test_the_share_consumer_names_match_confluent():
    """KIP-932's classes: every public method of confluent-kafka's ShareConsumer,
    DeserializingShareConsumer and Messages, the AcknowledgeType values, and the two
    exceptions as RuntimeErrors."""
    for name in ("ShareConsumer", "DeserializingShareConsumer", "Messages"):
        theirs, ours = getattr(ck, name), getattr(kafka_client, name)
        methods = {n for n, _f in inspect.getmembers(theirs, callable)
                   if not n.startswith("_")}
        assert sorted(m for m in methods if not hasattr(ours, m)) == [], name
    assert {m.name: m.value for m in kafka_client.AcknowledgeType} == \
        {m.name: m.value for m in ck.AcknowledgeType}
    for name in ("ConcurrentModificationException", "IllegalStateException"):
        assert issubclass(getattr(kafka_client, name), RuntimeError)
        assert issubclass(getattr(ck, name), RuntimeError)
