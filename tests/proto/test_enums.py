"""kafka_proto.enums: every member's number as the protocol has it, so a typo cannot pass.

The table below is typed from Kafka's own enums (ResourceType, PatternType, AclOperation,
AclPermissionType, CoordinatorType, ConfigResource.Type, ConfigSource, AlterConfigOp,
IsolationLevel, ListOffsetsRequest's timestamps, ScramMechanism, ElectionType,
EndpointType, FetchMetadata's epochs, the requests' CONSUMER_REPLICA_ID); where a schema's
documentation states the numbers, they are also read from ../shared/kafka-protocol, and
every value must fit the width of the schema fields that carry it.
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Iterator, Tuple

import pytest

from kafka_proto import enums

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = ROOT.parent / "shared" / "kafka-protocol" / "messages"

EXPECTED: Dict[type, Dict[str, int]] = {
    enums.AclResourceType: dict(UNKNOWN=0, ANY=1, TOPIC=2, GROUP=3, CLUSTER=4,
                                TRANSACTIONAL_ID=5, DELEGATION_TOKEN=6, USER=7),
    enums.AclPatternType: dict(UNKNOWN=0, ANY=1, MATCH=2, LITERAL=3, PREFIXED=4),
    enums.AclOperation: dict(UNKNOWN=0, ANY=1, ALL=2, READ=3, WRITE=4, CREATE=5, DELETE=6,
                             ALTER=7, DESCRIBE=8, CLUSTER_ACTION=9, DESCRIBE_CONFIGS=10,
                             ALTER_CONFIGS=11, IDEMPOTENT_WRITE=12, CREATE_TOKENS=13,
                             DESCRIBE_TOKENS=14),
    enums.AclPermissionType: dict(UNKNOWN=0, ANY=1, DENY=2, ALLOW=3),
    enums.CoordinatorType: dict(GROUP=0, TRANSACTION=1, SHARE=2),
    enums.ConfigResourceType: dict(UNKNOWN=0, TOPIC=2, BROKER=4, BROKER_LOGGER=8,
                                   CLIENT_METRICS=16, GROUP=32),
    enums.ConfigSource: dict(UNKNOWN=0, TOPIC_CONFIG=1, DYNAMIC_BROKER_CONFIG=2,
                             DYNAMIC_DEFAULT_BROKER_CONFIG=3, STATIC_BROKER_CONFIG=4,
                             DEFAULT_CONFIG=5, DYNAMIC_BROKER_LOGGER_CONFIG=6,
                             CLIENT_METRICS_CONFIG=7, GROUP_CONFIG=8),
    enums.AlterConfigOp: dict(SET=0, DELETE=1, APPEND=2, SUBTRACT=3),
    enums.IsolationLevel: dict(READ_UNCOMMITTED=0, READ_COMMITTED=1),
    enums.ListOffsetsTimestamp: dict(LATEST=-1, EARLIEST=-2, MAX_TIMESTAMP=-3,
                                     EARLIEST_LOCAL=-4, LATEST_TIERED=-5),
    enums.ScramMechanism: dict(UNKNOWN=0, SCRAM_SHA_256=1, SCRAM_SHA_512=2),
    enums.ElectionType: dict(PREFERRED=0, UNCLEAN=1),
    enums.EndpointType: dict(UNKNOWN=0, BROKER=1, CONTROLLER=2),
    enums.MemberEpoch: dict(JOIN=0, LEAVE=-1, STATIC_LEAVE=-2),
    enums.FetchSessionEpoch: dict(INITIAL=0, FINAL=-1),
    enums.AcknowledgeType: dict(GAP=0, ACCEPT=1, RELEASE=2, REJECT=3),
    enums.ReplicaId: dict(CONSUMER=-1),
}

#: (schema file, field name) of every field that carries each enum.
CARRIED_BY: Dict[type, Tuple[Tuple[str, str], ...]] = {
    enums.AclResourceType: (("CreateAclsRequest", "ResourceType"),
                            ("DescribeAclsRequest", "ResourceTypeFilter"),
                            ("DeleteAclsRequest", "ResourceTypeFilter"),
                            ("DescribeAclsResponse", "ResourceType")),
    enums.AclPatternType: (("CreateAclsRequest", "ResourcePatternType"),
                           ("DescribeAclsRequest", "PatternTypeFilter"),
                           ("DeleteAclsRequest", "PatternTypeFilter")),
    enums.AclOperation: (("CreateAclsRequest", "Operation"),
                         ("DescribeAclsRequest", "Operation")),
    enums.AclPermissionType: (("CreateAclsRequest", "PermissionType"),
                              ("DeleteAclsRequest", "PermissionType")),
    enums.CoordinatorType: (("FindCoordinatorRequest", "KeyType"),),
    enums.ConfigResourceType: (("DescribeConfigsRequest", "ResourceType"),
                               ("AlterConfigsRequest", "ResourceType"),
                               ("IncrementalAlterConfigsRequest", "ResourceType")),
    enums.ConfigSource: (("DescribeConfigsResponse", "ConfigSource"),
                         ("DescribeConfigsResponse", "Source")),
    enums.AlterConfigOp: (("IncrementalAlterConfigsRequest", "ConfigOperation"),),
    enums.IsolationLevel: (("FetchRequest", "IsolationLevel"),
                           ("ListOffsetsRequest", "IsolationLevel")),
    enums.ListOffsetsTimestamp: (("ListOffsetsRequest", "Timestamp"),),
    enums.ScramMechanism: (("AlterUserScramCredentialsRequest", "Mechanism"),
                           ("DescribeUserScramCredentialsResponse", "Mechanism")),
    enums.ElectionType: (("ElectLeadersRequest", "ElectionType"),),
    enums.EndpointType: (("DescribeClusterRequest", "EndpointType"),
                         ("DescribeClusterResponse", "EndpointType")),
    enums.MemberEpoch: (("ConsumerGroupHeartbeatRequest", "MemberEpoch"),
                        ("ShareGroupHeartbeatRequest", "MemberEpoch")),
    enums.FetchSessionEpoch: (("FetchRequest", "SessionEpoch"),
                              ("ShareFetchRequest", "ShareSessionEpoch"),
                              ("ShareAcknowledgeRequest", "ShareSessionEpoch")),
    enums.AcknowledgeType: (("ShareFetchRequest", "AcknowledgeTypes"),
                            ("ShareAcknowledgeRequest", "AcknowledgeTypes")),
    enums.ReplicaId: (("FetchRequest", "ReplicaId"), ("ListOffsetsRequest", "ReplicaId"),
                      ("OffsetForLeaderEpochRequest", "ReplicaId")),
}

WIDTH = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}

#: The string spellings (Kafka's GroupState, ConsumerGroupState, GroupType and
#: TransactionState toString), with the fields that carry them.
SPELLINGS: Dict[type, Dict[str, str]] = {
    enums.ClassicGroupState: dict(EMPTY="Empty", PREPARING_REBALANCE="PreparingRebalance",
                                  COMPLETING_REBALANCE="CompletingRebalance",
                                  STABLE="Stable", DEAD="Dead"),
    enums.ConsumerProtocolGroupState: dict(EMPTY="Empty", ASSIGNING="Assigning",
                                           RECONCILING="Reconciling", STABLE="Stable",
                                           DEAD="Dead"),
    enums.GroupType: dict(CLASSIC="classic", CONSUMER="consumer", SHARE="share"),
    enums.TransactionState: dict(EMPTY="Empty", ONGOING="Ongoing",
                                 PREPARE_COMMIT="PrepareCommit", PREPARE_ABORT="PrepareAbort",
                                 COMPLETE_COMMIT="CompleteCommit",
                                 COMPLETE_ABORT="CompleteAbort", DEAD="Dead",
                                 PREPARE_EPOCH_FENCE="PrepareEpochFence"),
}
SPELLED_IN: Dict[type, Tuple[Tuple[str, str], ...]] = {
    enums.ClassicGroupState: (("DescribeGroupsResponse", "GroupState"),
                              ("ListGroupsResponse", "GroupState"),
                              ("ListGroupsRequest", "StatesFilter")),
    enums.ConsumerProtocolGroupState: (("ConsumerGroupDescribeResponse", "GroupState"),),
    enums.GroupType: (("ListGroupsResponse", "GroupType"), ("ListGroupsRequest", "TypesFilter")),
    enums.TransactionState: (("ListTransactionsResponse", "TransactionState"),
                             ("ListTransactionsRequest", "StateFilters"),
                             ("DescribeTransactionsResponse", "TransactionState")),
}


def test_every_enum_is_pinned():
    public = {getattr(enums, name) for name in enums.__all__}
    assert public == set(EXPECTED) | set(SPELLINGS)
    assert set(EXPECTED) == set(CARRIED_BY) and set(SPELLINGS) == set(SPELLED_IN)


@pytest.mark.parametrize("cls", list(SPELLINGS), ids=lambda c: c.__name__)
def test_spellings(cls):
    spelled = {n: v for n, v in vars(cls).items() if not n.startswith("_")}
    assert spelled == SPELLINGS[cls]
    assert all(type(v) is str for v in spelled.values())   # print as they are sent


@pytest.mark.parametrize("cls", list(EXPECTED), ids=lambda c: c.__name__)
def test_members_and_numbers(cls):
    # Aliases would hide a repeated number: list every name, aliases included.
    assert {name: int(m) for name, m in cls.__members__.items()} == EXPECTED[cls]


needs_schemas = pytest.mark.skipif(not MESSAGES.is_dir(),
                                   reason=f"protocol schemas not found at {MESSAGES}")


def _strip_comments(text: str) -> str:
    spec = importlib.util.spec_from_file_location("_tool_gen_messages",
                                                  ROOT / "tools" / "gen_messages.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod.strip_comments(text)


def _fields(fields: Any) -> Iterator[Dict[str, Any]]:
    for field in fields or ():
        yield field
        yield from _fields(field.get("fields"))


@lru_cache(maxsize=None)
def schema_fields(message: str, name: str) -> Tuple[Tuple[str, str], ...]:
    """(type, about) of each field named ``name`` in ``message``'s schema (at least one)."""
    schema = json.loads(_strip_comments((MESSAGES / f"{message}.json").read_text()))
    found = tuple((f["type"], f.get("about", "")) for f in _fields(schema["fields"])
                  if f["name"] == name)
    assert found, (message, name)
    return found


@needs_schemas
@pytest.mark.parametrize("cls", list(CARRIED_BY), ids=lambda c: c.__name__)
def test_numbers_fit_the_fields_that_carry_them(cls):
    for message, name in CARRIED_BY[cls]:
        for field_type, _ in schema_fields(message, name):
            bits = WIDTH[field_type.replace("[]", "")]   # an array: its elements
            assert all(-2 ** (bits - 1) <= m < 2 ** (bits - 1) for m in cls), (message, name)


@needs_schemas
@pytest.mark.parametrize("cls", list(SPELLED_IN), ids=lambda c: c.__name__)
def test_spellings_go_in_string_fields(cls):
    for message, name in SPELLED_IN[cls]:
        assert {t for t, _ in schema_fields(message, name)} <= {"string", "[]string"}


@needs_schemas
def test_the_numbers_the_schemas_state():
    def about(message: str, name: str) -> str:
        (found,) = schema_fields(message, name)
        return found[1]

    for message in ("FetchRequest", "ListOffsetsRequest"):
        stated = dict(re.findall(r"(READ_\w+) \(isolation_level = (\d)\)",
                                 about(message, "IsolationLevel")))
        assert stated == {m.name: str(m.value) for m in enums.IsolationLevel}, message
    election = about("ElectLeadersRequest", "ElectionType")
    assert f"'{enums.ElectionType.PREFERRED.value}' elects the preferred" in election
    assert f"'{enums.ElectionType.UNCLEAN.value}' elects the first live" in election
    assert (f"{enums.EndpointType.BROKER.value}=brokers, "
            f"{enums.EndpointType.CONTROLLER.value}=controllers"
            ) in about("DescribeClusterRequest", "EndpointType")
    assert (f"; {enums.MemberEpoch.JOIN.value} to join the group; "
            f"{enums.MemberEpoch.LEAVE.value} to leave the group; "
            f"{enums.MemberEpoch.STATIC_LEAVE.value} to indicate that the static member "
            f"will rejoin") in about("ConsumerGroupHeartbeatRequest", "MemberEpoch")
    for message in ("FetchRequest", "ListOffsetsRequest", "OffsetForLeaderEpochRequest"):
        # Fetch's ReplicaState has a ReplicaId too; "of -1" is the schemas' own typo.
        stated = [a.replace(", of ", ", or ") for _, a in schema_fields(message, "ReplicaId")]
        assert all(f"or {enums.ReplicaId.CONSUMER.value} if this request is" in a
                   for a in stated), message
    # FindCoordinator v0 has no KeyType: its default is the group's.
    schema = json.loads(_strip_comments((MESSAGES / "FindCoordinatorRequest.json").read_text()))
    key_type = next(f for f in schema["fields"] if f["name"] == "KeyType")
    for message in ("ShareFetchRequest", "ShareAcknowledgeRequest"):
        stated = dict(re.findall(r"(\d):(\w+)", about(message, "AcknowledgeTypes")))
        assert stated == {str(m.value): m.name.title() for m in enums.AcknowledgeType}
        assert (f"{enums.FetchSessionEpoch.INITIAL.value} to open a share session; "
                f"{enums.FetchSessionEpoch.FINAL.value} to close it") in \
            about(message, "ShareSessionEpoch")
    assert int(key_type["default"]) == enums.CoordinatorType.GROUP
