"""Small value types of the public API, under confluent-kafka's names (exported from
``kafka_client``): cluster nodes, topic collections, partition facts, group and isolation
enums, throttle events and Kafka's UUIDs."""
from __future__ import annotations

import base64
import enum
import operator
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Sequence, Union, overload

from kafka_proto import enums as wire

if TYPE_CHECKING:  # pragma: no cover - for the hints only
    from kafka_client.types import Message

__all__ = [
    "AcknowledgeType",
    "Messages",
    "Node",
    "TopicCollection",
    "TopicPartitionInfo",
    "ConsumerGroupTopicPartitions",
    "IsolationLevel",
    "ConsumerGroupState",
    "ConsumerGroupType",
    "ElectionType",
    "ThrottleEvent",
    "Uuid",
]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class _OrderedEnum(enum.Enum):
    """An enum whose members order by value (confluent-kafka's enums compare with ``<``)."""

    def __lt__(self, other: Any) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.value < other.value


class IsolationLevel(_OrderedEnum):
    """Which records a consumer or a ListOffsets query sees (``isolation.level``)."""

    READ_UNCOMMITTED = wire.IsolationLevel.READ_UNCOMMITTED.value
    READ_COMMITTED = wire.IsolationLevel.READ_COMMITTED.value


class ConsumerGroupState(_OrderedEnum):
    """A consumer group's state as the coordinator reports it."""

    UNKNOWN = 0
    UNKOWN = 0  # the misspelling confluent-kafka keeps for compatibility (an alias)
    PREPARING_REBALANCING = 1
    COMPLETING_REBALANCING = 2
    STABLE = 3
    DEAD = 4
    EMPTY = 5


class ConsumerGroupType(_OrderedEnum):
    """The protocol a group uses: classic or the KIP-848 consumer protocol, or a KIP-932
    share group's (listed only when ``list_consumer_groups(types=...)`` names it)."""

    UNKNOWN = 0
    CONSUMER = 1
    CLASSIC = 2
    SHARE = 3


class ElectionType(_OrderedEnum):
    """Leader election kind for an elect-leaders request."""

    PREFERRED = wire.ElectionType.PREFERRED.value
    UNCLEAN = wire.ElectionType.UNCLEAN.value


class Node:
    """A broker: ``id``, ``host``, ``port`` and optional ``rack`` (a broker only known
    by its id, one that is down, has host None and port 0)."""

    def __init__(self, id: int, host: Optional[str], port: int,
                 rack: Optional[str] = None) -> None:
        self.id = id
        self.id_string = str(id)
        self.host = host
        self.port = port
        self.rack = rack

    def __str__(self) -> str:
        rack = f"(Rack - {self.rack})" if self.rack else ""
        return f"({self.id}) {self.host}:{self.port} {rack}"

    def __repr__(self) -> str:
        return f"Node(id={self.id}, host={self.host!r}, port={self.port}, rack={self.rack!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return (self.id, self.host, self.port, self.rack) == \
            (other.id, other.host, other.port, other.rack)

    def __hash__(self) -> int:
        return hash((self.id, self.host, self.port, self.rack))


class TopicCollection:
    """A collection of topics named by ``topic_names``."""

    def __init__(self, topic_names: List[str]) -> None:
        self.topic_names = topic_names

    def __repr__(self) -> str:
        return f"TopicCollection({self.topic_names!r})"


class TopicPartitionInfo:
    """One partition of a described topic: ``id``, ``leader`` (a :class:`Node` or None),
    ``replicas`` and ``isr`` (lists of :class:`Node`)."""

    def __init__(self, id: int, leader: Optional[Node], replicas: List[Node],
                 isr: List[Node]) -> None:
        self.id = id
        self.leader = leader
        self.replicas = replicas
        self.isr = isr

    def __repr__(self) -> str:
        return (f"TopicPartitionInfo(id={self.id}, leader={self.leader!r}, "
                f"replicas={self.replicas!r}, isr={self.isr!r})")


class ConsumerGroupTopicPartitions:
    """A group id with a list of :class:`~kafka_client.TopicPartition` (or None for all)."""

    def __init__(self, group_id: str, topic_partitions: Optional[List[Any]] = None) -> None:
        self.group_id = group_id
        self.topic_partitions = topic_partitions

    def __repr__(self) -> str:
        return (f"ConsumerGroupTopicPartitions(group_id={self.group_id!r}, "
                f"topic_partitions={self.topic_partitions!r})")


class ThrottleEvent:
    """A broker throttled this client: ``broker_name``, ``broker_id`` and ``throttle_time``
    in seconds (given to ``throttle_cb``)."""

    def __init__(self, broker_name: str, broker_id: int, throttle_time: float) -> None:
        self.broker_name = broker_name
        self.broker_id = broker_id
        self.throttle_time = throttle_time

    def __str__(self) -> str:
        return f"{self.broker_name}/{self.broker_id} throttled for " \
               f"{int(self.throttle_time * 1000)} ms"

    def __repr__(self) -> str:
        return (f"ThrottleEvent(broker_name={self.broker_name!r}, "
                f"broker_id={self.broker_id}, throttle_time={self.throttle_time})")


class Uuid:
    """A Kafka UUID (topic ids, ...) from its two 64-bit halves. ``str()`` is base64 without
    padding in the standard alphabet, as librdkafka writes it (Java's ``Uuid.toString`` uses
    the URL-safe one). Unlike confluent-kafka's, equal UUIDs compare equal."""

    __slots__ = ("_msb", "_lsb")

    def __init__(self, most_significant_bits: int, least_significant_bits: int) -> None:
        bits = []
        for name, v in (("most_significant_bits", most_significant_bits),
                        ("least_significant_bits", least_significant_bits)):
            try:  # any integer (numpy, IntEnum, bool), as confluent-kafka's parsing takes
                v = operator.index(v)
            except TypeError:
                raise TypeError(f"Uuid {name} must be an int, not {type(v).__name__}") from None
            if not _INT64_MIN <= v <= _INT64_MAX:
                raise OverflowError(f"Uuid {name} {v} is outside the signed 64-bit range")
            bits.append(v)
        self._msb, self._lsb = bits

    def get_most_significant_bits(self) -> int:
        """The high 64 bits, signed (as Java's ``Uuid`` gives them)."""
        return self._msb

    def get_least_significant_bits(self) -> int:
        """The low 64 bits, signed."""
        return self._lsb

    def bytes(self) -> bytes:
        """The 16 bytes, big-endian."""
        return (self._msb & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big") + \
            (self._lsb & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")

    def __str__(self) -> str:
        return base64.b64encode(self.bytes()).decode("ascii").rstrip("=")

    def __repr__(self) -> str:
        return str(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Uuid):
            return NotImplemented
        return self._msb == other._msb and self._lsb == other._lsb

    def __hash__(self) -> int:
        return hash((self._msb, self._lsb))

    def __reduce__(self) -> Any:
        return (Uuid, (self._msb, self._lsb))


class AcknowledgeType(enum.IntEnum):
    """How a :class:`~kafka_client.ShareConsumer` in explicit acknowledgement mode tells
    the broker to treat a record it polled (KIP-932): ACCEPT (processed), RELEASE (deliver
    it again, possibly to another member), REJECT (never deliver it again)."""

    ACCEPT = wire.AcknowledgeType.ACCEPT.value
    RELEASE = wire.AcknowledgeType.RELEASE.value
    REJECT = wire.AcknowledgeType.REJECT.value


class Messages(Sequence["Message"]):
    """Batch of messages returned by :meth:`ShareConsumer.poll
    <kafka_client.ShareConsumer.poll>`: a read-only sequence (iteration, ``len()``,
    indexing, slicing, which gives a Messages) with ``count()``, ``is_empty()`` and
    ``records()``, as confluent-kafka's."""

    __slots__ = ("_messages",)

    def __init__(self, messages: Optional[List["Message"]] = None) -> None:
        self._messages: List["Message"] = list(messages) if messages is not None else []

    def count(self) -> int:  # type: ignore[override]
        """Number of messages in this batch."""
        return len(self._messages)

    def is_empty(self) -> bool:
        """Whether this batch contains no messages."""
        return not self._messages

    def records(self) -> List["Message"]:
        """A copy of the messages in this batch, as a list."""
        return list(self._messages)

    def __len__(self) -> int:
        return len(self._messages)

    @overload
    def __getitem__(self, index: int) -> "Message": ...

    @overload
    def __getitem__(self, index: slice) -> "Messages": ...

    def __getitem__(self, index: Union[int, slice]) -> Any:
        if isinstance(index, slice):
            return Messages(self._messages[index])
        return self._messages[index]

    def __iter__(self) -> Iterator["Message"]:
        return iter(self._messages)

    def __bool__(self) -> bool:
        return bool(self._messages)

    def __repr__(self) -> str:
        return f"Messages({self._messages!r})"
