"""Topic, partition, offset and cluster value types: what ``create_topics()``,
``create_partitions()``, ``list_offsets()``, ``delete_records()``, ``describe_topics()``
and ``describe_cluster()`` take and return."""
from __future__ import annotations

import functools
import operator
from typing import Any, Dict, List, Optional, Sequence, Union

from kafka_client._model import Node, TopicPartitionInfo, Uuid
from kafka_client.admin._acl import AclOperation, to_operations
from kafka_proto.enums import ListOffsetsTimestamp

__all__ = [
    "NewTopic",
    "NewPartitions",
    "OffsetSpec",
    "TimestampSpec",
    "MaxTimestampSpec",
    "LatestSpec",
    "EarliestSpec",
    "ListOffsetsResultInfo",
    "DeletedRecords",
    "TopicDescription",
    "DescribeClusterResult",
]

ReplicaAssignment = List[List[int]]


def _check_int(value: Any, what: str) -> int:
    # Any integer Python can index with (numpy integers, IntEnum, bool), as
    # confluent-kafka's C argument parsing takes; a plain int comes back.
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, not {type(value).__name__}") from None


def _check_topic(topic: Any) -> str:
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, not {type(topic).__name__}")
    return topic


@functools.total_ordering
class NewTopic:
    """A topic to create: ``NewTopic(topic, num_partitions=-1, replication_factor=-1,
    replica_assignment=None, config=None)``.

    -1 leaves the count to the broker's defaults (``num.partitions``,
    ``default.replication.factor``). ``replica_assignment`` lists the broker ids of each
    partition's replicas (then leave ``replication_factor`` at -1). ``config`` is the
    topic configuration, ``{name: value}``. Ranges are checked by ``create_topics()``.
    """

    def __init__(self, topic: str, num_partitions: int = -1, replication_factor: int = -1,
                 replica_assignment: Optional[ReplicaAssignment] = None,
                 config: Optional[Dict[str, str]] = None) -> None:
        self.topic = _check_topic(topic)
        self.num_partitions = _check_int(num_partitions, "num_partitions")
        self.replication_factor = _check_int(replication_factor, "replication_factor")
        self.replica_assignment = replica_assignment
        self.config = config

    def __repr__(self) -> str:
        return f"NewTopic(topic={self.topic},num_partitions={self.num_partitions})"

    __str__ = __repr__

    def _key(self) -> Any:
        return (self.topic, self.num_partitions, self.replication_factor,
                repr(self.replica_assignment), repr(self.config))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NewTopic):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, NewTopic):
            return NotImplemented
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@functools.total_ordering
class NewPartitions:
    """Grow a topic to ``new_total_count`` partitions: ``NewPartitions(topic,
    new_total_count, replica_assignment=None)``; ``replica_assignment`` lists the replica
    broker ids of each *new* partition."""

    def __init__(self, topic: str, new_total_count: int,
                 replica_assignment: Optional[ReplicaAssignment] = None) -> None:
        self.topic = _check_topic(topic)
        self.new_total_count = _check_int(new_total_count, "new_total_count")
        self.replica_assignment = replica_assignment

    def __repr__(self) -> str:
        return f"NewPartitions(topic={self.topic},new_total_count={self.new_total_count})"

    __str__ = __repr__

    def _key(self) -> Any:
        return (self.topic, self.new_total_count, repr(self.replica_assignment))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NewPartitions):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, NewPartitions):
            return NotImplemented
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())


# ListOffsets timestamps with a meaning of their own (librdkafka's OFFSET_SPEC_* values
# too); plain ints, as the specs' repr shows them.
_LATEST = ListOffsetsTimestamp.LATEST.value
_EARLIEST = ListOffsetsTimestamp.EARLIEST.value
_MAX_TIMESTAMP = ListOffsetsTimestamp.MAX_TIMESTAMP.value


class OffsetSpec:
    """Which offset ``list_offsets()`` asks for: :meth:`earliest`, :meth:`latest`,
    :meth:`max_timestamp` (the offset of the record with the largest timestamp) or
    :meth:`for_timestamp` (the first offset whose timestamp is at or after it, in ms).
    ``OffsetSpec(n)`` is ``for_timestamp(n)`` for n >= 0, else the special spec numbered
    n (-1 latest, -2 earliest, -3 max timestamp)."""

    _specials: Dict[int, "OffsetSpec"] = {}

    def __new__(cls, index: int) -> "OffsetSpec":  # type: ignore[misc]
        if cls is not OffsetSpec:
            return object.__new__(cls)
        if index < 0:
            return cls._specials[index]
        return TimestampSpec(index)

    @property
    def _value(self) -> int:
        raise NotImplementedError

    @classmethod
    def earliest(cls) -> "OffsetSpec":
        return cls._specials[_EARLIEST]

    @classmethod
    def latest(cls) -> "OffsetSpec":
        return cls._specials[_LATEST]

    @classmethod
    def max_timestamp(cls) -> "OffsetSpec":
        return cls._specials[_MAX_TIMESTAMP]

    @classmethod
    def for_timestamp(cls, timestamp: int) -> "OffsetSpec":
        return TimestampSpec(timestamp)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, OffsetSpec):
            return NotImplemented
        return self._value < other._value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._value})"


class TimestampSpec(OffsetSpec):
    """The first offset whose timestamp is at or after ``timestamp`` (ms)."""

    def __init__(self, timestamp: int) -> None:
        self.timestamp = timestamp

    @property
    def _value(self) -> int:
        return self.timestamp


class MaxTimestampSpec(OffsetSpec):
    """The offset of the record with the largest timestamp (not always the last)."""

    def __init__(self, index: int = _MAX_TIMESTAMP) -> None:
        pass

    @property
    def _value(self) -> int:
        return _MAX_TIMESTAMP


class LatestSpec(OffsetSpec):
    """The end of the partition (the next offset to be written)."""

    def __init__(self, index: int = _LATEST) -> None:
        pass

    @property
    def _value(self) -> int:
        return _LATEST


class EarliestSpec(OffsetSpec):
    """The first offset still in the partition."""

    def __init__(self, index: int = _EARLIEST) -> None:
        pass

    @property
    def _value(self) -> int:
        return _EARLIEST


OffsetSpec._specials.update({_LATEST: LatestSpec(_LATEST), _EARLIEST: EarliestSpec(_EARLIEST),
                             _MAX_TIMESTAMP: MaxTimestampSpec(_MAX_TIMESTAMP)})


class ListOffsetsResultInfo:
    """One partition's ``list_offsets()`` answer: ``offset``, ``timestamp`` (ms; -1 for
    earliest and latest) and ``leader_epoch`` (None when unknown)."""

    def __init__(self, offset: int, timestamp: int, leader_epoch: int) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.leader_epoch: Optional[int] = leader_epoch if leader_epoch >= 0 else None

    def __repr__(self) -> str:
        return (f"ListOffsetsResultInfo(offset={self.offset}, timestamp={self.timestamp}, "
                f"leader_epoch={self.leader_epoch})")


class DeletedRecords:
    """One partition's ``delete_records()`` answer: its new ``low_watermark`` (the first
    offset left)."""

    def __init__(self, low_watermark: int) -> None:
        self.low_watermark = low_watermark

    def __repr__(self) -> str:
        return f"DeletedRecords(low_watermark={self.low_watermark})"


class TopicDescription:
    """``describe_topics()``'s answer for one topic: ``name``, ``topic_id`` (a
    :class:`~kafka_client.Uuid`), ``is_internal``, ``partitions`` (a list of
    :class:`~kafka_client.TopicPartitionInfo`) and ``authorized_operations`` (a list of
    :class:`AclOperation`, when asked for)."""

    def __init__(self, name: str, topic_id: Uuid, is_internal: bool,
                 partitions: List[TopicPartitionInfo],
                 authorized_operations: Optional[Sequence[Union[AclOperation, str, int]]] = None
                 ) -> None:
        self.name = name
        self.topic_id = topic_id
        self.is_internal = is_internal
        self.partitions = partitions
        self.authorized_operations = to_operations(authorized_operations)

    def __repr__(self) -> str:
        return (f"TopicDescription(name={self.name!r}, topic_id={self.topic_id}, "
                f"partitions={len(self.partitions)})")


class DescribeClusterResult:
    """``describe_cluster()``'s answer: ``controller`` (a :class:`~kafka_client.Node`,
    None when there is none), ``nodes``, ``cluster_id`` and ``authorized_operations``."""

    def __init__(self, controller: Optional[Node], nodes: List[Node],
                 cluster_id: Optional[str] = None,
                 authorized_operations: Optional[Sequence[Union[AclOperation, str, int]]] = None
                 ) -> None:
        self.cluster_id = cluster_id
        self.controller = controller
        self.nodes = nodes
        self.authorized_operations = to_operations(authorized_operations)

    def __repr__(self) -> str:
        return f"DescribeClusterResult(cluster_id={self.cluster_id!r}, nodes={self.nodes!r})"
