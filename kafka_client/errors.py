"""Client-facing error values: :class:`KafkaError` and :class:`KafkaException`.

The shapes follow confluent-kafka-python so application code can switch clients by changing
an import:

* broker error codes (0 and up, plus -1) come from the protocol's error table, generated into
  ``kafka_proto.errors`` (``ERRORS_BY_CODE``); each is a class constant under its Kafka
  protocol name, and also under librdkafka's older spelling where that differs (for example
  ``NOT_LEADER_OR_FOLLOWER`` and ``NOT_LEADER_FOR_PARTITION`` are both 6);
* client-side ("local") codes are negative and use librdkafka's numbers and names, with a
  leading underscore (``_MSG_TIMED_OUT`` = -192, ``_PARTITION_EOF`` = -191, ...).

The same module is importable as ``kafka_client.error`` (confluent-kafka's name), with the
exceptions the serializing clients raise: :class:`ConsumeError`, :class:`ProduceError`,
:class:`SerializationError` and its key/value (de)serialization subclasses.

``KafkaError(code, reason)`` is not fatal, not retriable and does not require a transaction
abort unless told so, as in confluent-kafka. The errors the client builds itself go through
:func:`client_error`, which takes the retriable flag from the broker table (or a short list
of transient local codes): the client decides its retries on that flag, and the errors it
hands to the application carry it.
"""
from __future__ import annotations

import builtins
import operator
from typing import Any, Dict, Optional, Tuple, Type, Union

from kafka_client._error_codes import ErrorCodeConstants
from kafka_proto.errors import ERRORS_BY_CODE, ErrorCode

__all__ = [
    "KafkaError",
    "KafkaException",
    "ConsumeError",
    "ProduceError",
    "SerializationError",
    "KeySerializationError",
    "ValueSerializationError",
    "KeyDeserializationError",
    "ValueDeserializationError",
    "ConcurrentModificationException",
    "IllegalStateException",
]

# librdkafka's local error codes: name -> (code, description). The descriptions are
# librdkafka's own wording: applications match on str(err), so they must not drift.
_LOCAL_ERRORS: Dict[str, Tuple[int, str]] = {
    "_BAD_MSG": (-199, "Local: Bad message format"),
    "_BAD_COMPRESSION": (-198, "Local: Invalid compressed data"),
    "_DESTROY": (-197, "Local: Broker handle destroyed for termination"),
    "_FAIL": (-196, "Local: Communication failure with broker"),
    "_TRANSPORT": (-195, "Local: Broker transport failure"),
    "_CRIT_SYS_RESOURCE": (-194, "Local: Critical system resource failure"),
    "_RESOLVE": (-193, "Local: Host resolution failure"),
    "_MSG_TIMED_OUT": (-192, "Local: Message timed out"),
    "_PARTITION_EOF": (-191, "Broker: No more messages"),
    "_UNKNOWN_PARTITION": (-190, "Local: Unknown partition"),
    "_FS": (-189, "Local: File or filesystem error"),
    "_UNKNOWN_TOPIC": (-188, "Local: Unknown topic"),
    "_ALL_BROKERS_DOWN": (-187, "Local: All broker connections are down"),
    "_INVALID_ARG": (-186, "Local: Invalid argument or configuration"),
    "_TIMED_OUT": (-185, "Local: Timed out"),
    "_QUEUE_FULL": (-184, "Local: Queue full"),
    "_ISR_INSUFF": (-183, "Local: ISR count insufficient"),
    "_NODE_UPDATE": (-182, "Local: Broker node update"),
    "_SSL": (-181, "Local: SSL error"),
    "_WAIT_COORD": (-180, "Local: Waiting for coordinator"),
    "_UNKNOWN_GROUP": (-179, "Local: Unknown group"),
    "_IN_PROGRESS": (-178, "Local: Operation in progress"),
    "_PREV_IN_PROGRESS": (-177, "Local: Previous operation in progress"),
    "_EXISTING_SUBSCRIPTION": (-176, "Local: Existing subscription"),
    "_ASSIGN_PARTITIONS": (-175, "Local: Assign partitions"),
    "_REVOKE_PARTITIONS": (-174, "Local: Revoke partitions"),
    "_CONFLICT": (-173, "Local: Conflicting use"),
    "_STATE": (-172, "Local: Erroneous state"),
    "_UNKNOWN_PROTOCOL": (-171, "Local: Unknown protocol"),
    "_NOT_IMPLEMENTED": (-170, "Local: Not implemented"),
    "_AUTHENTICATION": (-169, "Local: Authentication failure"),
    "_NO_OFFSET": (-168, "Local: No offset stored"),
    "_OUTDATED": (-167, "Local: Outdated"),
    "_TIMED_OUT_QUEUE": (-166, "Local: Timed out in queue"),
    "_UNSUPPORTED_FEATURE": (-165, "Local: Required feature not supported by broker"),
    "_WAIT_CACHE": (-164, "Local: Awaiting cache update"),
    "_INTR": (-163, "Local: Operation interrupted"),
    "_KEY_SERIALIZATION": (-162, "Local: Key serialization error"),
    "_VALUE_SERIALIZATION": (-161, "Local: Value serialization error"),
    "_KEY_DESERIALIZATION": (-160, "Local: Key deserialization error"),
    "_VALUE_DESERIALIZATION": (-159, "Local: Value deserialization error"),
    "_PARTIAL": (-158, "Local: Partial response"),
    "_READ_ONLY": (-157, "Local: Read-only object"),
    "_NOENT": (-156, "Local: No such entry"),
    "_UNDERFLOW": (-155, "Local: Read underflow"),
    "_INVALID_TYPE": (-154, "Local: Invalid type"),
    "_RETRY": (-153, "Local: Retry operation"),
    "_PURGE_QUEUE": (-152, "Local: Purged in queue"),
    "_PURGE_INFLIGHT": (-151, "Local: Purged in flight"),
    "_FATAL": (-150, "Local: Fatal error"),
    "_INCONSISTENT": (-149, "Local: Inconsistent state"),
    "_GAPLESS_GUARANTEE": (-148, "Local: Gap-less ordering would not be guaranteed if proceeding"),
    "_MAX_POLL_EXCEEDED": (-147, "Local: Maximum application poll interval "
                                 "(max.poll.interval.ms) exceeded"),
    "_UNKNOWN_BROKER": (-146, "Local: Unknown broker"),
    "_NOT_CONFIGURED": (-145, "Local: Functionality not configured"),
    "_FENCED": (-144, "Local: This instance has been fenced by a newer instance"),
    "_APPLICATION": (-143, "Local: Application generated error"),
    "_ASSIGNMENT_LOST": (-142, "Local: Group partition assignment lost"),
    "_NOOP": (-141, "Local: No operation performed"),
    "_AUTO_OFFSET_RESET": (-140, "Local: No offset to automatically reset to"),
    "_LOG_TRUNCATION": (-139, "Local: Partition log truncation detected"),
    "_INVALID_DIFFERENT_RECORD": (-138, "Local: an invalid record in the same batch caused "
                                        "the failure of this message too"),
    "_DESTROY_BROKER": (-137, "Local: Broker handle destroyed without termination"),
}

# librdkafka spells a few broker codes differently from the protocol's error table; both
# spellings become class constants, and name() returns librdkafka's (as confluent-kafka does).
_RDKAFKA_BROKER_NAMES: Dict[int, str] = {
    -1: "UNKNOWN",
    0: "NO_ERROR",
    2: "INVALID_MSG",
    3: "UNKNOWN_TOPIC_OR_PART",
    4: "INVALID_MSG_SIZE",
    6: "NOT_LEADER_FOR_PARTITION",
    10: "MSG_SIZE_TOO_LARGE",
    11: "STALE_CTRL_EPOCH",
    17: "TOPIC_EXCEPTION",
    # Newer than the protocol error table in ../shared; librdkafka knows them.
    129: "REBOOTSTRAP_REQUIRED",
    130: "STREAMS_INVALID_TOPOLOGY",
    131: "STREAMS_INVALID_TOPOLOGY_EPOCH",
    132: "STREAMS_TOPOLOGY_FENCED",
    133: "SHARE_SESSION_LIMIT_REACHED",
}

# Local codes that describe a transient condition: a retry may succeed.
_RETRIABLE_LOCAL = frozenset((-195, -185, -166, -187, -180))


_BROKER_BY_CODE: Dict[int, Any] = dict(ERRORS_BY_CODE)
_LOCAL_BY_CODE: Dict[int, Tuple[str, str]] = {c: (n, d) for n, (c, d) in _LOCAL_ERRORS.items()}


def _code_name(code: int) -> str:
    alias = _RDKAFKA_BROKER_NAMES.get(code)
    if alias is not None:
        return alias
    local = _LOCAL_BY_CODE.get(code)
    if local is not None:
        return local[0]
    row = _BROKER_BY_CODE.get(code)
    if row is not None:
        return row.name
    return f"ERR_{code}?"


def _code_description(code: int) -> str:
    local = _LOCAL_BY_CODE.get(code)
    if local is not None:
        return local[1]
    if code == ErrorCode.NONE:  # librdkafka's wording for these two
        return "Success"
    if code == ErrorCode.UNKNOWN_SERVER_ERROR:
        return "Unknown broker error"
    row = _BROKER_BY_CODE.get(code)
    name = row.name if row is not None else _RDKAFKA_BROKER_NAMES.get(code)
    if name is not None:
        return "Broker: " + name.replace("_", " ").capitalize()
    return f"Err-{code}?"  # librdkafka's words for a code it does not know


def _table_retriable(code: int) -> bool:
    row = _BROKER_BY_CODE.get(code)
    if row is not None:
        return bool(row.retriable)
    return code in _RETRIABLE_LOCAL


class KafkaError(ErrorCodeConstants):
    """An error (or event) code with an optional reason and flags.

    ``KafkaError(error, reason=None, fatal=False, retriable=False, txn_requires_abort=False)``:
    *error* is a code (int) or another :class:`KafkaError` (whose code is taken). Compares
    equal to other :class:`KafkaError` values and to ints by code only, so
    ``err == KafkaError._PARTITION_EOF`` works; hashes like its code. (The client's own
    errors come from :func:`client_error`, with the retriable flag of the error table.)
    """

    __slots__ = ("_code", "_reason", "_fatal", "_retriable", "_txn_requires_abort")

    # Populated below from _LOCAL_ERRORS and the broker table; ErrorCodeConstants declares
    # every name for type checkers.

    def __init__(
        self,
        error: Union[int, "KafkaError"],
        reason: Optional[str] = None,
        fatal: bool = False,
        retriable: bool = False,
        txn_requires_abort: bool = False,
    ) -> None:
        if isinstance(error, KafkaError):
            code = error._code
        else:
            try:  # any integer (numpy, IntEnum, bool), as confluent-kafka's parsing takes
                code = operator.index(error)
            except TypeError:
                raise TypeError(f"KafkaError code must be an int, not "
                                f"{type(error).__name__}") from None
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"KafkaError reason must be a str, not {type(reason).__name__}")
        self._code: int = code
        self._reason = reason
        self._fatal = bool(fatal)
        self._retriable = bool(retriable)
        self._txn_requires_abort = bool(txn_requires_abort)

    def code(self) -> int:
        """The numeric error code."""
        return self._code

    def name(self) -> str:
        """The code's symbolic name (librdkafka's spelling), e.g. ``"_PARTITION_EOF"``."""
        return _code_name(self._code)

    def str(self) -> str:
        """The reason given at construction, else a short description of the code."""
        return self._reason if self._reason is not None else _code_description(self._code)

    def fatal(self) -> bool:
        """True if the client instance cannot be used any more."""
        return self._fatal

    def retriable(self) -> bool:
        """True if retrying the failed operation may succeed."""
        return self._retriable

    def txn_requires_abort(self) -> bool:
        """True if the current transaction must be aborted (the producer stays usable)."""
        return self._txn_requires_abort

    # builtins.str: in this class body below the str() method, `str` names that method
    def __repr__(self) -> builtins.str:
        flag = "FATAL," if self._fatal else ""
        return f'KafkaError{{{flag}code={self.name()},val={self._code},str="{self.str()}"}}'

    __str__ = __repr__

    def _other_code(self, other: object) -> Optional[int]:
        if isinstance(other, KafkaError):
            return other._code
        if isinstance(other, int) and not isinstance(other, bool):
            return int(other)
        return None

    def __eq__(self, other: object) -> bool:
        code = self._other_code(other)
        if code is None:
            return NotImplemented
        return self._code == code

    def __ne__(self, other: object) -> bool:
        code = self._other_code(other)
        if code is None:
            return NotImplemented
        return self._code != code

    def __lt__(self, other: object) -> bool:
        code = self._other_code(other)
        if code is None:
            return NotImplemented
        return self._code < code

    def __le__(self, other: object) -> bool:
        code = self._other_code(other)
        if code is None:
            return NotImplemented
        return self._code <= code

    def __gt__(self, other: object) -> bool:
        code = self._other_code(other)
        if code is None:
            return NotImplemented
        return self._code > code

    def __ge__(self, other: object) -> bool:
        code = self._other_code(other)
        if code is None:
            return NotImplemented
        return self._code >= code

    def __hash__(self) -> int:
        return hash(self._code)

    def __reduce__(self) -> Any:
        return (
            KafkaError,
            (self._code, self._reason, self._fatal, self._retriable, self._txn_requires_abort),
        )


def _install_constants() -> None:
    for name, (code, _desc) in _LOCAL_ERRORS.items():
        setattr(KafkaError, name, code)
    for code, row in _BROKER_BY_CODE.items():
        setattr(KafkaError, row.name, code)
    for code, name in _RDKAFKA_BROKER_NAMES.items():
        setattr(KafkaError, name, code)


_install_constants()


def broker_code(code: int) -> int:
    """An error code as read from a broker's answer. Codes below UNKNOWN_SERVER_ERROR (-1)
    are the client's local ones (_PARTITION_EOF is -191, _TRANSPORT -195), never a
    broker's: such a code is taken as UNKNOWN_SERVER_ERROR (the Java client takes any code
    it does not know so) instead of reading as a local event."""
    return code if code >= ErrorCode.UNKNOWN_SERVER_ERROR else ErrorCode.UNKNOWN_SERVER_ERROR


def client_error(code: int, reason: Optional[str] = None, *, fatal: bool = False,
                 txn_requires_abort: bool = False) -> KafkaError:
    """An error the client itself raises or reports, for a broker or local ``code``: its
    ``retriable()`` is the error table's flag (broker codes), or true for the transient
    local codes (_TRANSPORT, _TIMED_OUT, _TIMED_OUT_QUEUE, _ALL_BROKERS_DOWN,
    _WAIT_COORD). The client decides its retries on that flag."""
    return KafkaError(code, reason, fatal, _table_retriable(code), txn_requires_abort)


class KafkaException(Exception):
    """The exception the client raises; ``args[0]`` is a :class:`KafkaError` when the client
    raises it.

    Constructed like any exception, as in confluent-kafka: ``KafkaException(KafkaError(...))``,
    ``KafkaException("text")`` or no arguments; the arguments are kept as given.
    """

    @property
    def error(self) -> Optional[KafkaError]:
        """The :class:`KafkaError` in ``args[0]``, or None if the first argument is not one."""
        first = self.args[0] if self.args else None
        return first if isinstance(first, KafkaError) else None


class ConcurrentModificationException(RuntimeError):
    """A :class:`~kafka_client.ShareConsumer` method was called while another thread was
    inside one of its methods (a share consumer belongs to one thread at a time)."""


class IllegalStateException(RuntimeError):
    """A :class:`~kafka_client.ShareConsumer` call that its state does not allow: poll()
    before subscribe(), an acknowledgement of a record not in flight (or of an earlier
    delivery of one) or outside explicit acknowledgement mode, a call from the
    acknowledgement commit callback, a call after close()."""


class _KafkaClientError(KafkaException):
    """A :class:`KafkaError` with the exception that caused it and the message concerned."""

    def __init__(self, kafka_error: KafkaError, exception: Optional[BaseException] = None,
                 kafka_message: Any = None) -> None:
        super().__init__(kafka_error)
        self.exception = exception
        self.kafka_message = kafka_message

    def __reduce__(self) -> Any:
        # The subclasses' constructors differ; rebuild from the state instead.
        return (_rebuild_client_error,
                (type(self), self.args, self.exception, self.kafka_message))

    @property
    def code(self) -> int:
        """The error code of the wrapped :class:`KafkaError`."""
        return self.args[0].code()

    @property
    def name(self) -> str:
        """The error name of the wrapped :class:`KafkaError`."""
        return self.args[0].name()


def _rebuild_client_error(cls: Type["_KafkaClientError"], args: Tuple[Any, ...],
                          exception: Any, kafka_message: Any) -> "_KafkaClientError":
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.exception = exception
    error.kafka_message = kafka_message
    return error


class ConsumeError(_KafkaClientError):
    """Raised by a :class:`~kafka_client.DeserializingConsumer` for an error it consumed;
    ``kafka_message`` is the message or event concerned."""


class ProduceError(_KafkaClientError):
    """Raised by a :class:`~kafka_client.SerializingProducer` when a message cannot be
    produced."""

    def __init__(self, kafka_error: KafkaError, exception: Optional[BaseException] = None
                 ) -> None:
        super().__init__(kafka_error, exception)


class SerializationError(KafkaException):
    """A serializer or deserializer failed; raise it from your own (de)serializers too."""


def _serde_error(code: int, exception: Optional[BaseException]) -> KafkaError:
    return KafkaError(code, str(exception))


class KeySerializationError(ProduceError, SerializationError):
    """A message key could not be serialized; ``exception`` is what the serializer raised."""

    def __init__(self, exception: Optional[BaseException] = None) -> None:
        super().__init__(_serde_error(KafkaError._KEY_SERIALIZATION, exception), exception)


class ValueSerializationError(ProduceError, SerializationError):
    """A message value could not be serialized; ``exception`` is what the serializer raised."""

    def __init__(self, exception: Optional[BaseException] = None) -> None:
        super().__init__(_serde_error(KafkaError._VALUE_SERIALIZATION, exception), exception)


class KeyDeserializationError(ConsumeError, SerializationError):
    """A message key could not be deserialized; ``kafka_message`` is the message."""

    def __init__(self, exception: Optional[BaseException] = None,
                 kafka_message: Any = None) -> None:
        super().__init__(_serde_error(KafkaError._KEY_DESERIALIZATION, exception), exception,
                         kafka_message)


class ValueDeserializationError(ConsumeError, SerializationError):
    """A message value could not be deserialized; ``kafka_message`` is the message."""

    def __init__(self, exception: Optional[BaseException] = None,
                 kafka_message: Any = None) -> None:
        super().__init__(_serde_error(KafkaError._VALUE_DESERIALIZATION, exception), exception,
                         kafka_message)
