"""Client telemetry payloads (KIP-714): OpenTelemetry's ``MetricsData`` (metrics v1) in
protobuf, as PushTelemetry carries it.

Only what KIP-714 clients send is modelled: resource attributes, one instrumentation
scope per block, and metrics that are gauges or sums of number data points. Decoding
skips fields and metric kinds it does not model (histograms, exemplars, ...) the way
protobuf readers do, and checks every length it reads against the buffer, so a hostile
payload gives :class:`~kafka_proto.errors.ProtocolDecodeError`, never an unbounded read.

Field numbers are those of ``opentelemetry/proto/metrics/v1/metrics.proto``,
``common/v1/common.proto`` and ``resource/v1/resource.proto``.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Tuple, Union

from kafka_proto.errors import ProtocolDecodeError, ProtocolEncodeError, TruncatedDataError

__all__ = [
    "AttributeValue", "DataPoint", "Metric", "ScopeMetrics", "ResourceMetrics",
    "GAUGE", "SUM", "TEMPORALITY_DELTA", "TEMPORALITY_CUMULATIVE",
    "encode_metrics_data", "decode_metrics_data",
]

AttributeValue = Union[str, bool, int, float, bytes]

GAUGE = "gauge"
SUM = "sum"
#: AggregationTemporality of a sum (0 is "unspecified").
TEMPORALITY_DELTA = 1
TEMPORALITY_CUMULATIVE = 2

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1

# protobuf wire types
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5

# Metric.data's oneof members (only gauge and sum are modelled; the others are skipped
# on decoding and reported by their kind with no points).
_METRIC_KINDS = {5: GAUGE, 7: SUM, 9: "histogram", 10: "exponential_histogram",
                 11: "summary"}
_KIND_FIELD = {GAUGE: 5, SUM: 7}


@dataclass(frozen=True)
class DataPoint:
    """One NumberDataPoint: an int (``as_int``) or float (``as_double``) value at
    ``time_unix_nano``, counted since ``start_time_unix_nano`` (sums), with
    attributes (labels)."""
    value: Union[int, float]
    time_unix_nano: int
    start_time_unix_nano: int = 0
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True)
class Metric:
    """A gauge or a sum (``kind``: :data:`GAUGE` or :data:`SUM`) and its points."""
    name: str
    kind: str
    points: Tuple[DataPoint, ...]
    description: str = ""
    unit: str = ""
    monotonic: bool = False  # sums only
    temporality: int = TEMPORALITY_CUMULATIVE  # sums only


@dataclass(frozen=True)
class ScopeMetrics:
    """The metrics of one instrumentation scope (the client library)."""
    metrics: Tuple[Metric, ...]
    scope_name: str = ""
    scope_version: str = ""


@dataclass(frozen=True)
class ResourceMetrics:
    """The metrics of one resource (the client instance, described by attributes)."""
    scopes: Tuple[ScopeMetrics, ...]
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)


# -- encoding ---------------------------------------------------------------------------

def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 as protobuf writes it: ten bytes, two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _len_field(number: int, payload: bytes) -> bytes:
    return _tag(number, _LEN) + _varint(len(payload)) + payload


def _string(number: int, text: str) -> bytes:
    return _len_field(number, text.encode("utf-8")) if text else b""


def _any_value(value: AttributeValue) -> bytes:
    if isinstance(value, bool):
        return _tag(2, _VARINT) + _varint(int(value))
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ProtocolEncodeError(f"attribute value {value}: outside int64")
        return _tag(3, _VARINT) + _varint(value)
    if isinstance(value, float):
        return _tag(4, _I64) + struct.pack("<d", value)
    if isinstance(value, str):
        return _len_field(1, value.encode("utf-8"))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _len_field(7, bytes(value))
    raise ProtocolEncodeError(
        f"attribute value {value!r}: must be str, bool, int, float or bytes")


def _attributes(number: int, attributes: Mapping[str, AttributeValue]) -> bytes:
    out = []
    for key, value in attributes.items():
        if not isinstance(key, str):
            raise ProtocolEncodeError(f"attribute key {key!r}: must be str")
        out.append(_len_field(number, _string(1, key) + _len_field(2, _any_value(value))))
    return b"".join(out)


def _data_point(point: DataPoint) -> bytes:
    for what, nanos in (("start time", point.start_time_unix_nano),
                        ("time", point.time_unix_nano)):
        if isinstance(nanos, bool) or not isinstance(nanos, int) \
                or not 0 <= nanos <= _UINT64_MAX:
            raise ProtocolEncodeError(f"data point {what} {nanos!r}: must be an int in "
                                      "0..2**64-1 (nanoseconds since the epoch)")
    out = [struct.pack("<BQBQ", 2 << 3 | _I64, point.start_time_unix_nano,
                       3 << 3 | _I64, point.time_unix_nano)]
    value = point.value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolEncodeError(f"data point value {value!r}: must be int or float")
    if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
        raise ProtocolEncodeError(f"data point value {value}: outside int64")
    if isinstance(value, float):
        out.append(_tag(4, _I64) + struct.pack("<d", value))
    else:
        out.append(_tag(6, _I64) + struct.pack("<q", value))
    out.append(_attributes(7, point.attributes))
    return b"".join(out)


def _metric(metric: Metric) -> bytes:
    number = _KIND_FIELD.get(metric.kind)
    if number is None:
        raise ProtocolEncodeError(f"metric {metric.name!r}: kind {metric.kind!r} is not "
                                  f"{GAUGE!r} or {SUM!r}")
    body = b"".join(_len_field(1, _data_point(p)) for p in metric.points)
    if metric.kind == SUM:
        body += _tag(2, _VARINT) + _varint(metric.temporality)
        if metric.monotonic:
            body += _tag(3, _VARINT) + b"\x01"
    return (_string(1, metric.name) + _string(2, metric.description)
            + _string(3, metric.unit) + _len_field(number, body))


def encode_metrics_data(resources: List[ResourceMetrics]) -> bytes:
    """A ``MetricsData`` message holding ``resources``."""
    out = []
    for resource in resources:
        body = [_len_field(1, _attributes(1, resource.attributes))]
        for scope in resource.scopes:
            scope_body = _string(1, scope.scope_name) + _string(2, scope.scope_version)
            body.append(_len_field(2, _len_field(1, scope_body) + b"".join(
                _len_field(2, _metric(m)) for m in scope.metrics)))
        out.append(_len_field(1, b"".join(body)))
    return b"".join(out)


# -- decoding ---------------------------------------------------------------------------

def _read_varint(buf: memoryview, pos: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise TruncatedDataError("protobuf varint runs past the end of the message")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise ProtocolDecodeError("protobuf varint longer than ten bytes")


def _fields(buf: memoryview):
    """(field number, wire type, value) of each field of one message: an int for
    varints and fixed-width fields (raw little-endian bits), a memoryview for
    length-delimited ones."""
    pos = 0
    end = len(buf)
    value: Union[int, memoryview]
    while pos < end:
        key, pos = _read_varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise ProtocolDecodeError("protobuf field number 0")
        if wire_type == _VARINT:
            value, pos = _read_varint(buf, pos)
        elif wire_type in (_I64, _I32):
            size = 8 if wire_type == _I64 else 4
            if pos + size > end:
                raise TruncatedDataError(f"protobuf field {number} runs past the end")
            value = int.from_bytes(buf[pos:pos + size], "little")
            pos += size
        elif wire_type == _LEN:
            size, pos = _read_varint(buf, pos)
            if size > end - pos:
                raise TruncatedDataError(
                    f"protobuf field {number} claims {size} bytes, {end - pos} remain")
            value = buf[pos:pos + size]
            pos += size
        else:
            raise ProtocolDecodeError(f"protobuf wire type {wire_type} (field {number}) "
                                      "is not one OTLP uses")
        yield number, wire_type, value


def _text(value: memoryview) -> str:
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolDecodeError(f"protobuf string is not UTF-8: {exc}") from None


def _signed64(value: int) -> int:
    value &= _UINT64_MAX  # a ten-byte varint's bits above 64 are dropped, as protobuf does
    return value - (1 << 64) if value >= 1 << 63 else value


def _decode_any(buf: memoryview) -> AttributeValue:
    value: AttributeValue = ""
    for number, wire_type, raw in _fields(buf):
        if number == 1 and wire_type == _LEN:
            value = _text(raw)
        elif number == 2 and wire_type == _VARINT:
            value = bool(raw)
        elif number == 3 and wire_type == _VARINT:
            value = _signed64(raw)
        elif number == 4 and wire_type == _I64:
            value = struct.unpack("<d", raw.to_bytes(8, "little"))[0]
        elif number == 7 and wire_type == _LEN:
            value = bytes(raw)
    return value


def _decode_key_value(buf: memoryview) -> Tuple[str, AttributeValue]:
    key = ""
    value: AttributeValue = ""
    for number, wire_type, raw in _fields(buf):
        if number == 1 and wire_type == _LEN:
            key = _text(raw)
        elif number == 2 and wire_type == _LEN:
            value = _decode_any(raw)
    return key, value


def _decode_point(buf: memoryview) -> DataPoint:
    value: Union[int, float] = 0
    start = time = 0
    attributes: Dict[str, AttributeValue] = {}
    for number, wire_type, raw in _fields(buf):
        if number == 2 and wire_type == _I64:
            start = raw
        elif number == 3 and wire_type == _I64:
            time = raw
        elif number == 4 and wire_type == _I64:
            value = struct.unpack("<d", raw.to_bytes(8, "little"))[0]
        elif number == 6 and wire_type == _I64:
            value = _signed64(raw)
        elif number == 7 and wire_type == _LEN:
            key, attr = _decode_key_value(raw)
            attributes[key] = attr
    return DataPoint(value, time, start, attributes)


def _decode_metric(buf: memoryview) -> Metric:
    name = description = unit = ""
    kind = ""
    points: List[DataPoint] = []
    monotonic = False
    temporality = 0
    for number, wire_type, raw in _fields(buf):
        if number == 1 and wire_type == _LEN:
            name = _text(raw)
        elif number == 2 and wire_type == _LEN:
            description = _text(raw)
        elif number == 3 and wire_type == _LEN:
            unit = _text(raw)
        elif number in _METRIC_KINDS and wire_type == _LEN:
            kind = _METRIC_KINDS[number]
            if kind not in _KIND_FIELD:
                continue  # not modelled: its kind is reported, its points are not
            for inner, inner_type, value in _fields(raw):
                if inner == 1 and inner_type == _LEN:
                    points.append(_decode_point(value))
                elif inner == 2 and inner_type == _VARINT and kind == SUM:
                    temporality = value
                elif inner == 3 and inner_type == _VARINT and kind == SUM:
                    monotonic = bool(value)
    if kind != SUM:
        temporality = TEMPORALITY_CUMULATIVE  # a gauge has none: the dataclass default
    return Metric(name, kind, tuple(points), description, unit, monotonic, temporality)


def _decode_attributes(buf: memoryview) -> Dict[str, AttributeValue]:
    out: Dict[str, AttributeValue] = {}
    for number, wire_type, raw in _fields(buf):
        if number == 1 and wire_type == _LEN:
            key, value = _decode_key_value(raw)
            out[key] = value
    return out


def _decode_scope(buf: memoryview) -> ScopeMetrics:
    name = version = ""
    metrics: List[Metric] = []
    for number, wire_type, raw in _fields(buf):
        if number == 1 and wire_type == _LEN:
            for inner, inner_type, value in _fields(raw):
                if inner == 1 and inner_type == _LEN:
                    name = _text(value)
                elif inner == 2 and inner_type == _LEN:
                    version = _text(value)
        elif number == 2 and wire_type == _LEN:
            metrics.append(_decode_metric(raw))
    return ScopeMetrics(tuple(metrics), name, version)


def decode_metrics_data(data: Union[bytes, bytearray, memoryview]) -> List[ResourceMetrics]:
    """The resources of a ``MetricsData`` message (see the module's docstring for what
    is modelled)."""
    out = []
    for number, wire_type, raw in _fields(memoryview(data).cast("B")):
        if number != 1 or wire_type != _LEN:
            continue
        attributes: Dict[str, AttributeValue] = {}
        scopes: List[ScopeMetrics] = []
        for inner, inner_type, value in _fields(raw):
            if inner == 1 and inner_type == _LEN:
                attributes = _decode_attributes(value)
            elif inner == 2 and inner_type == _LEN:
                scopes.append(_decode_scope(value))
        out.append(ResourceMetrics(tuple(scopes), attributes))
    return out
