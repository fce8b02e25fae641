"""Public value types: :class:`TopicPartition`, :class:`Message` and their constants.

Shaped like confluent-kafka-python's classes of the same names, so application code can move
between the two by changing an import.
"""
from __future__ import annotations

import operator
import re
from typing import TYPE_CHECKING, Any, List, Optional, Tuple, overload

from kafka_proto.errors import ErrorCode

from .errors import KafkaError, client_error

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_STORED",
    "OFFSET_INVALID",
    "TIMESTAMP_NOT_AVAILABLE",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TopicPartition",
    "Message",
]

# Logical offsets (librdkafka's values).
OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001

# Timestamp types returned first by Message.timestamp().
TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

#: Kafka's own limit on topic names, and the characters allowed in them.
_MAX_TOPIC_NAME = 249
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]+\Z")

# Kafka headers: ordered (key, value) pairs; keys may repeat.
Headers = List[Tuple[str, Optional[bytes]]]


def check_topic_name(name: str) -> None:
    """A topic name the wire can carry: UTF-8 (UnicodeEncodeError otherwise) without NUL
    (ValueError), as confluent-kafka's producer refuses them. Taken, such a name made
    every later Metadata request, which names each topic wanted, impossible to encode:
    nothing was produced or read any more, for any topic."""
    name.encode("utf-8")
    if "\x00" in name:
        raise ValueError(f"topic {name!r} contains a NUL character")


def topic_name_error(name: str) -> Optional[KafkaError]:
    """Kafka's rules for a topic's name (some brokers, Tansu for one, accept any): None
    when ``name`` keeps them, else INVALID_TOPIC_EXCEPTION saying why."""
    problem = None
    if not name:
        problem = "it is empty"
    elif name in (".", ".."):
        problem = "'.' and '..' are not allowed"
    elif len(name) > _MAX_TOPIC_NAME:
        problem = f"it is {len(name)} characters long, the limit is {_MAX_TOPIC_NAME}"
    elif not _TOPIC_NAME.match(name):
        problem = "only ASCII letters, digits, '.', '_' and '-' are allowed"
    if problem is None:
        return None
    return client_error(ErrorCode.INVALID_TOPIC_EXCEPTION,
                      f"Invalid topic name {name!r}: {problem}")


def _check_int(value: Any, what: str, lo: int, hi: int) -> int:
    # Whatever Python takes as an integer (operator.index: numpy integers, IntEnum, bool),
    # as confluent-kafka's C argument parsing does; a plain int comes back.
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, not {type(value).__name__}") from None
    if not lo <= number <= hi:
        raise OverflowError(f"{what} {number} is outside {lo}..{hi}")
    return number


class TopicPartition:
    """A topic partition, with an offset and optional commit metadata and leader epoch.

    ``TopicPartition(topic, partition=-1, offset=OFFSET_INVALID, metadata=None,
    leader_epoch=None)``. ``partition`` and ``offset`` can be assigned; ``topic``,
    ``metadata``, ``leader_epoch`` and ``error`` are read-only, as in confluent-kafka.
    Equality, hashing and ordering use (topic, partition) only.
    """

    __slots__ = ("_topic", "partition", "offset", "_metadata", "_leader_epoch", "_error")

    def __init__(
        self,
        topic: str,
        partition: int = -1,
        offset: int = OFFSET_INVALID,
        metadata: Optional[str] = None,
        leader_epoch: Optional[int] = None,
    ) -> None:
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        if metadata is not None and not isinstance(metadata, str):
            raise TypeError(f"metadata must be a str, not {type(metadata).__name__}")
        if "\x00" in topic or (metadata is not None and "\x00" in metadata):
            # confluent-kafka's C strings hold no NUL: Python's own error for them (a NUL
            # in metadata was sent and read back cut there)
            raise ValueError("embedded null character")
        self._topic = topic
        self.partition = _check_int(partition, "partition", _INT32_MIN, _INT32_MAX)
        self.offset = _check_int(offset, "offset", _INT64_MIN, _INT64_MAX)
        self._metadata = metadata
        if leader_epoch is not None:
            leader_epoch = _check_int(leader_epoch, "leader_epoch", _INT32_MIN, _INT32_MAX)
            if leader_epoch < 0:  # librdkafka: a negative epoch means "not known"
                leader_epoch = None
        self._leader_epoch = leader_epoch
        self._error: Optional[KafkaError] = None

    @property
    def topic(self) -> str:
        """Topic name."""
        return self._topic

    @property
    def metadata(self) -> Optional[str]:
        """Offset commit metadata, or None."""
        return self._metadata

    @property
    def leader_epoch(self) -> Optional[int]:
        """Leader epoch of the offset, or None when not known."""
        return self._leader_epoch

    @property
    def error(self) -> Optional[KafkaError]:
        """Per-partition error of the operation that returned this object, or None."""
        return self._error

    def _set_error(self, error: Optional[KafkaError]) -> "TopicPartition":
        """Attach a per-partition result error (for the client's own use); returns self."""
        self._error = error
        return self

    def __repr__(self) -> str:
        return (
            f"TopicPartition{{topic={self._topic},partition={self.partition},"
            f"offset={self.offset},leader_epoch={self._leader_epoch},error={self._error}}}"
        )

    __str__ = __repr__

    def _key(self) -> Tuple[str, int]:
        return (self._topic, self.partition)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self._topic == other._topic and self.partition == other.partition

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self._topic != other._topic or self.partition != other.partition

    def __lt__(self, other: "TopicPartition") -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self._key() < other._key()

    def __le__(self, other: "TopicPartition") -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self._key() <= other._key()

    def __gt__(self, other: "TopicPartition") -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self._key() > other._key()

    def __ge__(self, other: "TopicPartition") -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self._key() >= other._key()

    def __hash__(self) -> int:
        return hash((self._topic, self.partition))

    def __reduce__(self) -> Any:
        return (_rebuild_tp, (self._topic, self.partition, self.offset, self._metadata,
                              self._leader_epoch, self._error))


def _rebuild_tp(topic: str, partition: int, offset: int, metadata: Optional[str],
                leader_epoch: Optional[int], error: Optional[KafkaError]) -> TopicPartition:
    return TopicPartition(topic, partition, offset, metadata, leader_epoch)._set_error(error)


def metadata_to_commit(metadata: Optional[str]) -> Optional[str]:
    """Commit metadata as it is sent: the text with a NUL after it, as confluent-kafka
    sends it (its readers stop at that NUL, and read past the end of metadata without
    one: garbage, or a UnicodeDecodeError); "" is a lone NUL there too, so it reads back
    as "", not as None; None as given. :func:`committed_metadata` takes the NUL off."""
    return metadata + "\x00" if metadata is not None else None


def committed_metadata(raw: Optional[str]) -> Optional[str]:
    """Commit metadata as an OffsetFetch answer gives it back: None for none, and cut at
    the first NUL. librdkafka stores the NUL after its text and its readers
    (confluent-kafka's) stop there, so offsets a librdkafka client committed read here as
    they read there."""
    if not raw:
        return None
    end = raw.find("\x00")
    return raw if end < 0 else raw[:end]


class Message:
    """One consumed or produced message, or an event/error (then :meth:`error` is not None).

    ``Message(topic=None, partition=None, offset=None, key=None, value=None, headers=None,
    error=None, timestamp=None, latency=None, leader_epoch=None, delivery_count=None)``,
    positional or keyword, as confluent-kafka's (for tests and mocks; the clients make
    their messages without this constructor). ``partition``, ``offset``,
    ``leader_epoch`` and ``delivery_count`` must be ints, ``latency`` a real number and
    ``timestamp`` a ``(type, milliseconds)`` tuple of ints (TypeError otherwise); a
    negative partition, offset, latency or leader epoch, and a delivery count below 1,
    mean "not known" and read back as None, as in confluent-kafka. Accessors are methods:
    ``msg.value()``, ``msg.offset()``, ... Messages compare equal when topic, partition,
    offset, key, value, headers, error, timestamp (milliseconds) and leader epoch are
    equal (not by latency or delivery count), and are not hashable.
    """

    # The consumer fills these slots straight from the record bytes (RecordFactory in
    # consumer/decode.py, which must name every slot); the producer's delivery reports
    # use an unvalidated constructor (DeliveredMessage): no validation per message.
    # _delivery_tag: which ShareConsumer.poll() handed the record out (an acknowledgement
    # names that delivery, not a later one of the same offset); None elsewhere.
    __slots__ = (
        "_topic", "_partition", "_offset", "_key", "_value", "_headers", "_error",
        "_timestamp", "_latency", "_leader_epoch", "_delivery_count", "_delivery_tag",
    )

    def __init__(
        self,
        topic: Optional[str] = None,
        partition: Optional[int] = None,
        offset: Optional[int] = None,
        key: Any = None,
        value: Any = None,
        headers: Optional[Headers] = None,
        error: Optional[KafkaError] = None,
        timestamp: Optional[Tuple[int, int]] = None,
        latency: Optional[float] = None,
        leader_epoch: Optional[int] = None,
        delivery_count: Optional[int] = None,
    ) -> None:
        self._topic = topic
        self._partition = _known(_c_int(partition, _INT32_MIN, _INT32_MAX, "signed integer"))
        self._offset = _known(_c_int(offset, _INT64_MIN, _INT64_MAX, None))
        self._key = key
        self._value = value
        self._headers = headers
        self._error = error
        self._timestamp = (TIMESTAMP_NOT_AVAILABLE, 0) if timestamp is None else \
            _timestamp_pair(timestamp)
        if latency is not None:
            if isinstance(latency, (str, bytes)) or not hasattr(latency, "__float__"):
                raise TypeError(f"must be real number, not {type(latency).__name__}")
            latency = float(latency)
            if latency < 0:
                latency = None
        self._latency = latency
        self._leader_epoch = _known(_c_int(leader_epoch, _INT32_MIN, _INT32_MAX,
                                           "signed integer"))
        count = _c_int(delivery_count, -(2**15), 2**15 - 1, "signed short integer")
        self._delivery_count = count if count is not None and count > 0 else None
        self._delivery_tag: Optional[int] = None

    def topic(self) -> Optional[str]:
        """Topic name, or None."""
        return self._topic

    def partition(self) -> Optional[int]:
        """Partition id, or None."""
        return self._partition

    def offset(self) -> Optional[int]:
        """Offset in the partition, or None when not known (a delivery that failed)."""
        return self._offset

    def key(self) -> Any:
        """Key (bytes, or whatever a deserializer produced), or None."""
        return self._key

    def value(self) -> Any:
        """Value (bytes, or whatever a deserializer produced), or None."""
        return self._value

    def deserialized_key(self) -> Any:
        """The key (confluent-kafka's experimental name for what a deserializer made of
        it; the same object as :meth:`key`)."""
        return self._key

    def deserialized_value(self) -> Any:
        """The value (the same object as :meth:`value`)."""
        return self._value

    def headers(self) -> Optional[Headers]:
        """Headers as a list of ``(str, bytes or None)`` pairs (keys may repeat), or None."""
        return self._headers

    def error(self) -> Optional[KafkaError]:
        """The error or event this object stands for, or None for a proper message."""
        return self._error

    def timestamp(self) -> Tuple[int, int]:
        """``(timestamp type, milliseconds since the epoch)``; ignore the time if the type is
        ``TIMESTAMP_NOT_AVAILABLE``."""
        return self._timestamp

    def latency(self) -> Optional[float]:
        """Seconds from produce() to the broker's acknowledgement, or None."""
        return self._latency

    def leader_epoch(self) -> Optional[int]:
        """Leader epoch of the partition when the message was fetched, or None."""
        epoch = self._leader_epoch
        return None if epoch is None or epoch < 0 else epoch

    def delivery_count(self) -> Optional[int]:
        """How many times the message was delivered (share groups, KIP-932), or None:
        this client has no share consumer, so only a constructed message has one."""
        return self._delivery_count

    def set_topic(self, value: Optional[str]) -> None:
        """Replace the topic."""
        self._topic = value

    def set_key(self, value: Any) -> None:
        """Replace the key (serializers and deserializers use this)."""
        self._key = value

    def set_value(self, value: Any) -> None:
        """Replace the value (serializers and deserializers use this)."""
        self._value = value

    def set_headers(self, value: Optional[Headers]) -> None:
        """Replace the headers."""
        self._headers = value

    def set_error(self, value: Optional[KafkaError]) -> None:
        """Replace the error."""
        self._error = value

    def __len__(self) -> int:
        """Size of the value (0 when there is none)."""
        value = self._value
        return 0 if value is None else len(value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self._topic == other._topic and self._partition == other._partition
                and self._offset == other._offset and self._key == other._key
                and self._value == other._value and self._headers == other._headers
                and self._error == other._error
                and self._timestamp[1] == other._timestamp[1]
                and self.leader_epoch() == other.leader_epoch())

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]  # mutable (set_*), as confluent's

    def __repr__(self) -> str:
        if self._error is not None:
            return f"Message{{error={self._error}}}"
        return (
            f"Message{{topic={self._topic},partition={self._partition},offset={self._offset},"
            f"len={len(self)}}}"
        )

    def __reduce__(self) -> Any:
        return (Message, (self._topic, self._partition, self._offset, self._key, self._value,
                          self._headers, self._error, self._timestamp, self._latency,
                          self.leader_epoch(), self._delivery_count))


def _c_int(value: Any, lo: int, hi: int, c_name: Optional[str]) -> Optional[int]:
    """``value`` as a C integer of range lo..hi, with the TypeError/OverflowError texts
    of confluent-kafka's argument parsing; None stays None."""
    if value is None:
        return None
    number = operator.index(value)  # TypeError: '...' object cannot be interpreted as ...
    if number > hi:
        raise OverflowError(f"{c_name} is greater than maximum" if c_name
                            else "int too big to convert")
    if number < lo:
        raise OverflowError(f"{c_name} is less than minimum" if c_name
                            else "int too big to convert")
    return number


def _known(number: Optional[int]) -> Optional[int]:
    return None if number is None or number < 0 else number


def _timestamp_pair(timestamp: Any) -> Tuple[int, int]:
    if type(timestamp) is not tuple or len(timestamp) != 2:
        raise TypeError("timestamp must be a tuple of (int, int)")
    return (operator.index(timestamp[0]), operator.index(timestamp[1]))


if TYPE_CHECKING:
    class ConsumedRecord(Message):
        """For type checkers only (a :class:`Message` at run time): a message a consumer
        decoded from a record, whose topic, partition and offset are known (a Message's
        are Optional for error events and failed deliveries)."""

        _topic: str
        _partition: int
        _offset: int

        def topic(self) -> str: ...
        def partition(self) -> int: ...
        def offset(self) -> int: ...
else:
    ConsumedRecord = Message


_new_message = object.__new__


@overload
def unchecked_message(topic: str, partition: int, offset: int, key: Any, value: Any,
                      headers: Optional[Headers], error: None, timestamp: Tuple[int, int],
                      latency: Optional[float], leader_epoch: Optional[int]
                      ) -> ConsumedRecord: ...
@overload
def unchecked_message(topic: Optional[str], partition: Optional[int], offset: Optional[int],
                      key: Any, value: Any, headers: Optional[Headers],
                      error: Optional[KafkaError], timestamp: Tuple[int, int],
                      latency: Optional[float], leader_epoch: Optional[int]) -> Message: ...
def unchecked_message(topic: Optional[str], partition: Optional[int], offset: Optional[int],
                      key: Any, value: Any, headers: Optional[Headers],
                      error: Optional[KafkaError], timestamp: Tuple[int, int],
                      latency: Optional[float], leader_epoch: Optional[int]) -> Message:
    """A :class:`Message` made without the constructor's checks, for the client's own use
    (values it made itself: nothing to validate)."""
    m = _new_message(Message)
    m._topic = topic
    m._partition = partition
    m._offset = offset
    m._key = key
    m._value = value
    m._headers = headers
    m._error = error
    m._timestamp = timestamp
    m._latency = latency
    m._leader_epoch = leader_epoch
    m._delivery_count = None
    m._delivery_tag = None
    return m


def error_event(err: KafkaError, topic: Optional[str] = None, partition: Optional[int] = None,
                offset: Optional[int] = None) -> Message:
    """A consumer's error event as librdkafka makes it: the error's text is also the
    message's value (applications print or parse ``msg.value()`` of an error event, e.g.
    for "Subscribed topic not available"), and the timestamp is not available (-1)."""
    return unchecked_message(topic, partition, offset if offset is None or offset >= 0
                             else None, None, err.str().encode(), None, err,
                             (TIMESTAMP_NOT_AVAILABLE, -1), None, None)
