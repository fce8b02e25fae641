"""Client-facing error values: :class:`KafkaError` and :class:`KafkaException`.

The shapes follow confluent-kafka-python so application code can switch clients by changing
an import:

* broker error codes (0 and up, plus -1) come from the protocol's error table, generated into
  ``kafka_proto._error_table`` (``ERRORS_BY_CODE``); each is a class constant under its Kafka
  protocol name, and also under librdkafka's older spelling where that differs (for example
  ``NOT_LEADER_OR_FOLLOWER`` and ``NOT_LEADER_FOR_PARTITION`` are both 6);
* client-side ("local") codes are negative and use librdkafka's numbers and names, with a
  leading underscore (``_MSG_TIMED_OUT`` = -192, ``_PARTITION_EOF`` = -191, ...).

Differences from confluent-kafka, on purpose: ``KafkaException(code)`` wraps a bare code into a
:class:`KafkaError`, so ``exc.args[0]`` is always a :class:`KafkaError`; and when ``retriable``
is not given, it is taken from the broker table (or a short list of transient local codes)
instead of defaulting to ``False``.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Union

from kafka_proto.errors import ERRORS_BY_CODE

__all__ = ["KafkaError", "KafkaException"]

# librdkafka's local error codes: name -> (code, short description in our words).
_LOCAL_ERRORS: Dict[str, Tuple[int, str]] = {
    "_BAD_MSG": (-199, "Local: malformed message received"),
    "_BAD_COMPRESSION": (-198, "Local: compressed data is invalid"),
    "_DESTROY": (-197, "Local: client is shutting down"),
    "_FAIL": (-196, "Local: broker communication failed"),
    "_TRANSPORT": (-195, "Local: broker connection failed"),
    "_CRIT_SYS_RESOURCE": (-194, "Local: a critical system resource is exhausted"),
    "_RESOLVE": (-193, "Local: broker host name could not be resolved"),
    "_MSG_TIMED_OUT": (-192, "Local: message was not delivered before message.timeout.ms"),
    "_PARTITION_EOF": (-191, "Broker: reached the end of the partition"),
    "_UNKNOWN_PARTITION": (-190, "Local: partition does not exist"),
    "_FS": (-189, "Local: file system error"),
    "_UNKNOWN_TOPIC": (-188, "Local: topic does not exist"),
    "_ALL_BROKERS_DOWN": (-187, "Local: no broker connection is up"),
    "_INVALID_ARG": (-186, "Local: invalid argument or configuration"),
    "_TIMED_OUT": (-185, "Local: operation timed out"),
    "_QUEUE_FULL": (-184, "Local: producer queue is full"),
    "_ISR_INSUFF": (-183, "Local: not enough in-sync replicas"),
    "_NODE_UPDATE": (-182, "Local: broker address changed"),
    "_SSL": (-181, "Local: TLS error"),
    "_WAIT_COORD": (-180, "Local: group coordinator not known yet"),
    "_UNKNOWN_GROUP": (-179, "Local: consumer group is not known"),
    "_IN_PROGRESS": (-178, "Local: operation already in progress"),
    "_PREV_IN_PROGRESS": (-177, "Local: an earlier operation is still in progress"),
    "_EXISTING_SUBSCRIPTION": (-176, "Local: a subscription already exists"),
    "_ASSIGN_PARTITIONS": (-175, "Local: partitions assigned (rebalance)"),
    "_REVOKE_PARTITIONS": (-174, "Local: partitions revoked (rebalance)"),
    "_CONFLICT": (-173, "Local: conflicting use of the client"),
    "_STATE": (-172, "Local: operation not allowed in the current state"),
    "_UNKNOWN_PROTOCOL": (-171, "Local: protocol not known"),
    "_NOT_IMPLEMENTED": (-170, "Local: not implemented"),
    "_AUTHENTICATION": (-169, "Local: authentication failed"),
    "_NO_OFFSET": (-168, "Local: no stored offset"),
    "_OUTDATED": (-167, "Local: outdated"),
    "_TIMED_OUT_QUEUE": (-166, "Local: timed out while queued"),
    "_UNSUPPORTED_FEATURE": (-165, "Local: the broker does not support a needed feature"),
    "_WAIT_CACHE": (-164, "Local: waiting for a metadata cache update"),
    "_INTR": (-163, "Local: operation interrupted"),
    "_KEY_SERIALIZATION": (-162, "Local: key serialization failed"),
    "_VALUE_SERIALIZATION": (-161, "Local: value serialization failed"),
    "_KEY_DESERIALIZATION": (-160, "Local: key deserialization failed"),
    "_VALUE_DESERIALIZATION": (-159, "Local: value deserialization failed"),
    "_PARTIAL": (-158, "Local: partial response"),
    "_READ_ONLY": (-157, "Local: object is read-only"),
    "_NOENT": (-156, "Local: no such entry"),
    "_UNDERFLOW": (-155, "Local: read past the end of the data"),
    "_INVALID_TYPE": (-154, "Local: wrong type"),
    "_RETRY": (-153, "Local: will be retried"),
    "_PURGE_QUEUE": (-152, "Local: purged from the producer queue"),
    "_PURGE_INFLIGHT": (-151, "Local: purged while in flight"),
    "_FATAL": (-150, "Local: a fatal error occurred"),
    "_INCONSISTENT": (-149, "Local: inconsistent state"),
    "_GAPLESS_GUARANTEE": (-148, "Local: gapless delivery guarantee cannot be kept"),
    "_MAX_POLL_EXCEEDED": (-147, "Local: max.poll.interval.ms exceeded"),
    "_UNKNOWN_BROKER": (-146, "Local: broker not known"),
    "_NOT_CONFIGURED": (-145, "Local: functionality not configured"),
    "_FENCED": (-144, "Local: this instance has been fenced"),
    "_APPLICATION": (-143, "Local: error raised by the application"),
    "_ASSIGNMENT_LOST": (-142, "Local: group assignment lost"),
    "_NOOP": (-141, "Local: nothing to do"),
    "_AUTO_OFFSET_RESET": (-140, "Local: no offset to start from and auto.offset.reset=error"),
    "_LOG_TRUNCATION": (-139, "Local: partition log was truncated"),
    "_INVALID_DIFFERENT_RECORD": (-138, "Local: a different record was expected"),
    "_DESTROY_BROKER": (-137, "Local: broker handle is being removed"),
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
    row = _BROKER_BY_CODE.get(code)
    if row is not None:
        return "Broker: " + row.name.replace("_", " ").capitalize()
    if code == 0:
        return "Success"
    return f"Unknown error {code}"


def _default_retriable(code: int) -> bool:
    row = _BROKER_BY_CODE.get(code)
    if row is not None:
        return bool(row.retriable)
    return code in _RETRIABLE_LOCAL


class KafkaError:
    """An error (or event) code with an optional reason and flags.

    ``KafkaError(error, reason=None, fatal=False, retriable=None, txn_requires_abort=False)``:
    *error* is a code (int) or another :class:`KafkaError` (whose code is taken). Compares
    equal to other :class:`KafkaError` values and to ints by code only, so
    ``err == KafkaError._PARTITION_EOF`` works; hashes like its code.
    """

    __slots__ = ("_code", "_reason", "_fatal", "_retriable", "_txn_requires_abort")

    # Populated below from _LOCAL_ERRORS and the broker table; declared here for type checkers.
    NO_ERROR: int = 0
    UNKNOWN: int = -1

    def __init__(
        self,
        error: Union[int, "KafkaError"],
        reason: Optional[str] = None,
        fatal: bool = False,
        retriable: Optional[bool] = None,
        txn_requires_abort: bool = False,
    ) -> None:
        if isinstance(error, KafkaError):
            code = error._code
        elif isinstance(error, int) and not isinstance(error, bool):
            code = int(error)
        else:
            raise TypeError(f"KafkaError code must be an int, not {type(error).__name__}")
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"KafkaError reason must be a str, not {type(reason).__name__}")
        self._code = code
        self._reason = reason
        self._fatal = bool(fatal)
        self._retriable = _default_retriable(code) if retriable is None else bool(retriable)
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

    def __repr__(self) -> str:
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


class KafkaException(Exception):
    """Exception carrying a :class:`KafkaError` as ``args[0]``.

    ``KafkaException(error, *more)``: *error* is a :class:`KafkaError`, or a code (int) which is
    wrapped into one (with the next argument, if it is a str, as the reason).
    """

    def __init__(self, error: Union[KafkaError, int], *args: Any) -> None:
        if not isinstance(error, KafkaError):
            reason = args[0] if args and isinstance(args[0], str) else None
            error = KafkaError(error, reason)
        super().__init__(error, *args)

    @property
    def error(self) -> KafkaError:
        """The wrapped :class:`KafkaError` (same as ``args[0]``)."""
        return self.args[0]

    def __str__(self) -> str:
        return str(self.args[0])
