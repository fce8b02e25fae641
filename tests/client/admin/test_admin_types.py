"""kafka_client.admin against confluent_kafka.admin: the same public names, enum values,
constants and value-type behaviour, so code moves over by changing its imports."""
from __future__ import annotations

import enum
import inspect

import pytest

import kafka_client
import kafka_client.admin as ours

theirs = pytest.importorskip("confluent_kafka.admin")

def public_names(module):
    return {n for n, v in vars(module).items()
            if not n.startswith("_") and not inspect.ismodule(v)
            and getattr(v, "__module__", module.__name__) != "typing"
            and n not in ("string_type", "concurrent", "warnings")}


def test_every_public_name_of_confluent_kafka_admin_exists():
    missing = sorted(public_names(theirs) - set(dir(ours)))
    assert missing == []
    assert kafka_client.admin is ours and kafka_client.AdminClient is ours.AdminClient


def test_every_admin_client_method_exists():
    theirs_methods = {n for n in dir(theirs.AdminClient) if not n.startswith("_")}
    missing = sorted(theirs_methods - set(dir(ours.AdminClient)))
    assert missing == []


@pytest.mark.parametrize("name", ["ResourceType", "ResourcePatternType", "AclOperation",
                                  "AclPermissionType", "ConfigSource", "AlterConfigOpType",
                                  "ScramMechanism"])
def test_enums_have_confluent_kafkas_members_and_values(name):
    mine, peer = getattr(ours, name), getattr(theirs, name)
    assert issubclass(mine, enum.Enum)
    assert [(m.name, m.value) for m in mine] == [(m.name, m.value) for m in peer]
    first, last = list(mine)[0], list(mine)[-1]
    assert first < last and str(first) == str(list(peer)[0])


def test_module_constants_match():
    for name in public_names(theirs):
        value = getattr(theirs, name)
        if isinstance(value, int) and not isinstance(value, bool):
            assert getattr(ours, name) == value, name


def test_group_metadata_and_scram_classes_behave_like_confluent_kafkas():
    for m in (ours, theirs):
        g = m.GroupMetadata()
        g.id = "g"
        assert (str(g), repr(g), g.members) == ("g", "GroupMetadata(g)", [])
        assert issubclass(m.UserScramCredentialUpsertion, m.UserScramCredentialAlteration)
        assert issubclass(m.UserScramCredentialDeletion, m.UserScramCredentialAlteration)
        assert m.ScramMechanism.SCRAM_SHA_256 < m.ScramMechanism.SCRAM_SHA_512


def test_shared_types_are_the_top_level_ones():
    """Defined once: kafka_client's Node, Uuid, TopicCollection, ... serve the admin API."""
    from kafka_client.admin._operations import TopicPartitionInfo, Uuid

    assert TopicPartitionInfo is kafka_client.TopicPartitionInfo and Uuid is kafka_client.Uuid
    assert ours.ClusterMetadata is kafka_client._cluster.metadata.ClusterMetadata


def test_new_topic_and_new_partitions():
    for m in (ours, theirs):
        t = m.NewTopic("orders", 3)
        assert (t.topic, t.num_partitions, t.replication_factor, t.replica_assignment,
                t.config) == ("orders", 3, -1, None, None)
        assert m.NewTopic("orders").num_partitions == -1
        assert m.NewPartitions("orders", 5).replica_assignment is None
    assert str(ours.NewTopic("a", 1)) == str(theirs.NewTopic("a", 1))
    assert repr(ours.NewPartitions("a", 3)) == repr(theirs.NewPartitions("a", 3))


def test_config_resource_and_entry():
    for m in (ours, theirs):
        r = m.ConfigResource("TOPIC", "t", set_config={"a": "1"})
        assert r.restype == m.ResourceType.TOPIC and r.restype_int == 2 and len(r) == 1
        assert r == m.ConfigResource(m.ResourceType.TOPIC, "t")
        assert hash(r) == hash(m.ConfigResource(2, "t"))
        assert r != m.ConfigResource("broker", "t")
        r.set_config("a", "2", overwrite=False)
        assert r.set_config_dict == {"a": "1"}
        r.add_incremental_config(m.ConfigEntry("b", "1"))
        assert [e.name for e in r.incremental_configs] == ["b"]
        assert m.ConfigResource.Type is m.ResourceType
    assert repr(ours.ConfigResource("broker", "1")) == repr(theirs.ConfigResource("broker", "1"))
    mine, peer = vars(ours.ConfigEntry("a", "b")), vars(theirs.ConfigEntry("a", "b"))
    assert mine.keys() == peer.keys()
    assert {k: str(v) for k, v in mine.items()} == {k: str(v) for k, v in peer.items()}
    assert str(ours.ConfigEntry("a", "b")) == str(theirs.ConfigEntry("a", "b"))


def test_acl_bindings_convert_and_compare_like_confluent_kafkas():
    args = ("topic", "t", "prefixed", "User:a", "*", "write", "allow")
    mine, peer = ours.AclBinding(*args), theirs.AclBinding(*args)
    assert repr(mine) == repr(peer)
    assert mine == ours.AclBinding(ours.ResourceType.TOPIC, "t", 4, "User:a", "*", 4, 3)
    assert len({mine, ours.AclBinding(*args)}) == 1
    flt = ("any", None, "match", None, None, "any", "any")
    assert repr(ours.AclBindingFilter(*flt)) == repr(theirs.AclBindingFilter(*flt))
    assert (mine.restype_int, mine.resource_pattern_type_int, mine.operation_int,
            mine.permission_type_int) == (2, 4, 4, 3)
    assert sorted([ours.AclBinding("topic", "z", *args[2:]), mine])[0] is mine


def test_offset_spec():
    for m in (ours, theirs):
        assert m.OffsetSpec(-1) is m.OffsetSpec.latest()
        assert m.OffsetSpec(-2) is m.OffsetSpec.earliest()
        assert m.OffsetSpec(-3) is m.OffsetSpec.max_timestamp()
        ts = m.OffsetSpec(1234)
        assert ts.timestamp == 1234 and ts._value == 1234
        assert type(ts).__name__ == "TimestampSpec"
        assert m.OffsetSpec.for_timestamp(5)._value == 5
        assert m.OffsetSpec.max_timestamp() < m.OffsetSpec.earliest() < m.OffsetSpec.latest()
    info = ours.ListOffsetsResultInfo(5, -1, -1)
    assert vars(info) == vars(theirs.ListOffsetsResultInfo(5, -1, -1))


@pytest.mark.parametrize("build", [
    lambda m, k: m.DeletedRecords(7),
    lambda m, k: m.MemberAssignment(None),
    lambda m, k: m.ListConsumerGroupsResult([], []),
    lambda m, k: m.ConsumerGroupListing("g", True, k.ConsumerGroupState.STABLE,
                                        k.ConsumerGroupType.CLASSIC),
    lambda m, k: m.MemberDescription("m", "c", "h", m.MemberAssignment([])),
    lambda m, k: m.ConsumerGroupDescription("g", False, [], "range", "STABLE",
                                            k.Node(1, "h", 9), ["read"], "classic"),
    lambda m, k: m.TopicDescription("t", k.Uuid(1, 2), False, [], [3]),
    lambda m, k: m.DescribeClusterResult(k.Node(1, "h", 9), [k.Node(1, "h", 9)], "c", None),
    lambda m, k: m.UserScramCredentialsDescription("u", [m.ScramCredentialInfo(
        m.ScramMechanism.SCRAM_SHA_512, 8192)]),
    lambda m, k: m.UserScramCredentialUpsertion("u", m.ScramCredentialInfo(
        m.ScramMechanism.SCRAM_SHA_256, 4096), b"pw", b"salt"),
    lambda m, k: m.UserScramCredentialUpsertion("u", m.ScramCredentialInfo(
        m.ScramMechanism.SCRAM_SHA_256, 4096), b"pw"),
    lambda m, k: m.UserScramCredentialDeletion("u", m.ScramMechanism.SCRAM_SHA_256),
    lambda m, k: m.GroupMetadata(),
    lambda m, k: m.GroupMember(),
])
def test_result_types_have_the_same_attributes(build):
    import confluent_kafka as ck

    mine, peer = vars(build(ours, kafka_client)), vars(build(theirs, ck))
    assert mine.keys() == peer.keys()
    assert {k: plain(v) for k, v in mine.items()} == {k: plain(v) for k, v in peer.items()}


def plain(value):
    """A value for comparison: objects by their attributes (some of confluent-kafka's
    have no repr of their own)."""
    if isinstance(value, list):
        return [plain(v) for v in value]
    if hasattr(value, "__dict__") and not isinstance(value, enum.Enum):
        return {k: plain(v) for k, v in vars(value).items() if k != "id_string"}
    return str(value)
