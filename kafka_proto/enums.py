"""The values that enumerated request and response fields carry, named as Kafka names them.

Each enum says which fields hold it. The client's public (confluent-kafka-shaped) enums
and the test cluster take their numbers from here, so a value is typed once. The fields
that hold a state or a type as a string have their spellings here too, as plain ``str``
class attributes (an Enum of strings would print differently on Python 3.9 to 3.12).
"""
from __future__ import annotations

from enum import IntEnum

__all__ = [
    "AclResourceType",
    "AclPatternType",
    "AclOperation",
    "AclPermissionType",
    "CoordinatorType",
    "ConfigResourceType",
    "ConfigSource",
    "AlterConfigOp",
    "IsolationLevel",
    "ListOffsetsTimestamp",
    "ScramMechanism",
    "ElectionType",
    "EndpointType",
    "MemberEpoch",
    "FetchSessionEpoch",
    "AcknowledgeType",
    "ReplicaId",
    "ClassicGroupState",
    "ConsumerProtocolGroupState",
    "GroupType",
    "TransactionState",
]


class AclResourceType(IntEnum):
    """An ACL's resource type: CreateAcls' ResourceType, DescribeAcls' and DeleteAcls'
    ResourceTypeFilter, and the resources their answers list (ANY in filters only).
    USER is version 3 of these APIs on."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclPatternType(IntEnum):
    """How an ACL's resource name matches: CreateAcls' ResourcePatternType, the filters'
    PatternTypeFilter (version 1 on; ANY and MATCH in filters only)."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    """An ACL's Operation (ANY in filters only). The authorized-operations bit fields of
    Metadata, DescribeCluster and DescribeGroups set bit ``n`` for operation ``n``."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    """An ACL's PermissionType (ANY in filters only)."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class CoordinatorType(IntEnum):
    """FindCoordinator's KeyType (version 1 on; version 0 asks for a group's): whose
    coordinator is asked for. SHARE is version 6 on (KIP-932)."""

    GROUP = 0
    TRANSACTION = 1
    SHARE = 2


class ConfigResourceType(IntEnum):
    """The ResourceType of DescribeConfigs, AlterConfigs and IncrementalAlterConfigs
    (not the ACL numbering: a group is 32 here, 3 there)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(IntEnum):
    """Where a described value comes from: DescribeConfigs' ConfigSource (version 1 on)
    and its synonyms' Source."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs' ConfigOperation."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class IsolationLevel(IntEnum):
    """The IsolationLevel of Fetch (version 4 on) and ListOffsets (version 2 on)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class ListOffsetsTimestamp(IntEnum):
    """The Timestamp values of a ListOffsets partition that ask for an offset other than
    the first at or after a time. MAX_TIMESTAMP is version 7 on (KIP-734),
    EARLIEST_LOCAL version 8 on (KIP-405), LATEST_TIERED version 9 on (KIP-1005)."""

    LATEST = -1
    EARLIEST = -2
    MAX_TIMESTAMP = -3
    EARLIEST_LOCAL = -4
    LATEST_TIERED = -5


class ScramMechanism(IntEnum):
    """The Mechanism of AlterUserScramCredentials and DescribeUserScramCredentials."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2


class ElectionType(IntEnum):
    """ElectLeaders' ElectionType (version 1 on; version 0 elects the preferred)."""

    PREFERRED = 0
    UNCLEAN = 1


class EndpointType(IntEnum):
    """DescribeCluster's EndpointType (version 1 on, KIP-919)."""

    UNKNOWN = 0
    BROKER = 1
    CONTROLLER = 2


class MemberEpoch(IntEnum):
    """The MemberEpoch values of ConsumerGroupHeartbeat (KIP-848) that are not an epoch."""

    JOIN = 0
    LEAVE = -1
    #: a static member leaving that will come back with its instance id
    STATIC_LEAVE = -2


class FetchSessionEpoch(IntEnum):
    """The SessionEpoch values of Fetch (version 7 on, KIP-227) that are not a step of a
    session: INITIAL opens a new session, FINAL closes it (or fetches without one)."""

    INITIAL = 0
    FINAL = -1


class AcknowledgeType(IntEnum):
    """The AcknowledgeTypes of ShareFetch and ShareAcknowledge (KIP-932): what becomes of
    each acquired record acknowledged."""

    #: not a record (an offset compaction or a control batch left): archived
    GAP = 0
    #: processed: acknowledged, never delivered again
    ACCEPT = 1
    #: given back: available again (archived once the delivery count limit is reached)
    RELEASE = 2
    #: not processable: archived, never delivered again
    REJECT = 3


class ReplicaId(IntEnum):
    """The ReplicaId of Fetch, ListOffsets and OffsetForLeaderEpoch when it is not a
    follower's broker id."""

    CONSUMER = -1


class ClassicGroupState:
    """A classic group's GroupState: DescribeGroups, ListGroups and its StatesFilter
    (version 4 on; Kafka matches the filter without regard to case)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class ConsumerProtocolGroupState:
    """A KIP-848 consumer group's GroupState: ConsumerGroupDescribe and ListGroups."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupType:
    """ListGroups' GroupType and TypesFilter (version 5 on, KIP-848; case-insensitive in
    the filter)."""

    CLASSIC = "classic"
    CONSUMER = "consumer"
    SHARE = "share"


class TransactionState:
    """A transaction's state: ListTransactions' TransactionState and StateFilters,
    DescribeTransactions' TransactionState."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
