"""The server side of the Kafka conversation, on top of ``kafka_proto``'s public API:
splitting a request frame into header and body, framing responses, the version ranges
the cluster advertises, and fitting a response object to the version it is sent in.

``split_request`` (the request-header decoder a broker needs) and ``conform`` are meant
to move into ``kafka_proto.framing`` / ``kafka_proto.messages``; they live here until then.
"""
from __future__ import annotations

import re
import struct
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from kafka_proto.errors import ProtocolDecodeError, TruncatedDataError
from kafka_proto.messages import (  # noqa: I001
    API_KEYS,
    ApiKey,
    ResponseHeader,
    request_header_version,
    response_header_version,
)

from ._net import FileRegion

__all__ = [
    "SUPPORTED_VERSIONS",
    "decode_request",
    "RequestHead",
    "peek_api",
    "split_request",
    "encode_response",
    "conform",
]

_HEAD = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
_SIZE = struct.Struct(">i")

#: API key -> (lowest, highest) version the cluster serves (Kafka 4.0's floors: the
#: versions Kafka 4 removed are answered as Kafka 4 answers them).
SUPPORTED_VERSIONS: Dict[int, Tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 11),
    ApiKey.FETCH: (4, 17),
    ApiKey.LIST_OFFSETS: (1, 10),
    ApiKey.METADATA: (0, 12),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
}


class RequestHead(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: Optional[str]
    header_version: int


def peek_api(frame: memoryview) -> Tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)``: the first fields of every request
    header version, readable before the version is known to be supported."""
    if len(frame) < _HEAD.size:
        raise TruncatedDataError(f"request frame of {len(frame)} bytes has no header")
    return _HEAD.unpack_from(frame, 0)


def _uvarint(frame: memoryview, pos: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(frame):
            raise TruncatedDataError("request header: truncated tagged fields")
        b = frame[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ProtocolDecodeError("request header: varint longer than 5 bytes")


def split_request(frame: memoryview) -> Tuple[RequestHead, memoryview]:
    """The header of a request frame (a known API key and version) and its body."""
    api_key, api_version, correlation_id = peek_api(frame)
    header_version = request_header_version(api_key, api_version)
    pos = _HEAD.size
    client_id: Optional[str] = None
    if header_version >= 1:
        if len(frame) < pos + 2:
            raise TruncatedDataError("request header: truncated client_id")
        (n,) = _INT16.unpack_from(frame, pos)
        pos += 2
        if n >= 0:
            if len(frame) < pos + n:
                raise TruncatedDataError("request header: truncated client_id")
            try:
                client_id = bytes(frame[pos:pos + n]).decode("utf-8")
            except UnicodeDecodeError:
                raise ProtocolDecodeError("request header: client_id is not UTF-8") from None
            pos += n
        elif n != -1:
            raise ProtocolDecodeError(f"request header: client_id length {n}")
    if header_version >= 2:
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            if size > len(frame) - pos:
                raise TruncatedDataError("request header: truncated tagged field")
            pos += size
    head = RequestHead(api_key, api_version, correlation_id, client_id, header_version)
    return head, frame[pos:]


_TRAILING = re.compile(r"^(\d+) trailing bytes after ")


def decode_request(cls: Any, body: memoryview, version: int) -> Tuple[Any, int]:
    """Decode a request body as Kafka does: bytes left after the request are ignored
    (librdkafka 2.16's admin Metadata v12 carries three). Returns the request and how
    many bytes were ignored.

    kafka_proto has no public "decode, allowing trailing bytes" yet, so the strict
    decode's error names the count and the body is decoded again without them; to be
    replaced by such a function when the codec has one."""
    try:
        return cls.decode(body, version), 0
    except ProtocolDecodeError as exc:
        found = _TRAILING.match(str(exc))
        if found is None:
            raise
        extra = int(found.group(1))
        if not 0 < extra <= len(body):
            raise
        return cls.decode(body[:len(body) - extra], version), extra


def encode_response(api_key: int, api_version: int, correlation_id: int,
                    body_parts: List[Any]) -> List[Any]:
    """``[size + response header, *body_parts]``; the parts may include file regions,
    whose ``size`` counts toward the frame size."""
    header = ResponseHeader(correlation_id=correlation_id).encode(
        response_header_version(api_key, api_version))
    size = len(header) + sum(p.size if isinstance(p, FileRegion) else memoryview(p).nbytes
                             for p in body_parts)
    return [_SIZE.pack(size) + header, *body_parts]


def api_versions_table(served: Any = None) -> List[Tuple[int, int, int]]:
    """``(api_key, min, max)`` rows for the ApiVersions response: the APIs in ``served``
    (the keys of the handler registry)."""
    return [(key, lo, min(hi, API_KEYS[key].max_version))
            for key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
            if served is None or key in served]


# --------------------------------------------------------------------------- conform

_Plan = Tuple[List[str], List[str], List[Tuple[str, bool]]]
_PLANS: Dict[Tuple[type, int], _Plan] = {}
#: Field types that can hold None (the others are numbers and booleans).
_MAY_BE_NONE = ("string", "bytes", "records", "struct", "uuid")


def _present(f: Any, version: int) -> bool:
    return f.min_version is not None and f.min_version <= version and \
        (f.max_version is None or version <= f.max_version)


def _plan(cls: type, version: int) -> _Plan:
    """What conform() must do for ``cls`` in ``version``: fields to reset, fields that
    may not be None, and struct fields whose own plan is not empty."""
    key = (cls, version)
    plan = _PLANS.get(key)
    if plan is None:
        absent = []
        not_null = []
        nested = []
        for f in cls.FIELDS:  # type: ignore[attr-defined]
            if not _present(f, version):
                if not f.ignorable:
                    absent.append(f.name)
                continue
            nullable = f.nullable_min is not None and f.nullable_min <= version and \
                (f.nullable_max is None or version <= f.nullable_max)
            if not nullable and (f.type.startswith("[]") or f.type in _MAY_BE_NONE):
                not_null.append(f.name)
            if f.struct is not None and any(_plan(f.struct, version)):
                nested.append((f.name, f.type.startswith("[]")))
        plan = (absent, not_null, nested)
        _PLANS[key] = plan
    return plan


_ERROR_PATHS: Dict[type, Tuple[bool, List[Tuple[str, bool]]]] = {}


def _error_path(cls: type) -> Tuple[bool, List[Tuple[str, bool]]]:
    """Whether ``cls`` has an error_code, and its struct fields that may hold one."""
    path = _ERROR_PATHS.get(cls)
    if path is None:
        own = any(f.name == "error_code" for f in cls.FIELDS)  # type: ignore[attr-defined]
        nested = []
        for f in cls.FIELDS:  # type: ignore[attr-defined]
            if f.struct is not None:
                sub_own, sub_nested = _error_path(f.struct)
                if sub_own or sub_nested:
                    nested.append((f.name, f.type.startswith("[]")))
        path = (own, nested)
        _ERROR_PATHS[cls] = path
    return path


def error_codes(obj: Any, found: Optional[set] = None) -> set:
    """Every non-zero ``error_code`` in a response and the structs inside it."""
    if found is None:
        found = set()
    own, nested = _error_path(type(obj))
    if own and obj.error_code:
        found.add(obj.error_code)
    for name, is_list in nested:
        value = getattr(obj, name)
        if value is None:
            continue
        if is_list:
            for element in value:
                error_codes(element, found)
        else:
            error_codes(value, found)
    return found


def conform(obj: Any, version: int) -> Any:
    """Fit a response object to ``version``: fields the version does not have (and whose
    encoder would refuse a non-default value) go back to their defaults, and None in a
    field the version does not let be null becomes the field's default, in ``obj`` and the
    structs inside it. So a handler may fill every field and let the version decide what
    goes on the wire."""
    absent, not_null, nested = _plan(type(obj), version)
    fresh = None
    for name in absent:
        fresh = fresh or type(obj)()
        setattr(obj, name, getattr(fresh, name))
    for name in not_null:
        if getattr(obj, name) is None:
            fresh = fresh or type(obj)()
            setattr(obj, name, getattr(fresh, name))
    for name, is_list in nested:
        value = getattr(obj, name)
        if value is None:
            continue
        if is_list:
            for element in value:
                conform(element, version)
        else:
            conform(value, version)
    return obj
