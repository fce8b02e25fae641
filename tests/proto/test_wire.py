"""Tests for kafka_proto._wire: Reader/Writer primitives and the varint helpers."""
from __future__ import annotations

import math
import mmap
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_proto._wire import (
    Reader,
    Writer,
    decode_uvarint,
    decode_varint,
    decode_varlong,
    encode_uvarint,
    encode_varint,
    encode_varlong,
)
from kafka_proto.errors import (
    InvalidLengthError,
    InvalidVarintError,
    ProtocolDecodeError,
    ProtocolEncodeError,
    TruncatedDataError,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
UINT32 = st.integers(0, 2**32 - 1)


# ---- independent reference encoders (plain Python, written from the format rules) ----


def ref_uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def ref_zigzag(v: int, bits: int) -> int:
    return (v << 1) ^ (v >> (bits - 1)) if v < 0 else v << 1


def written(fn_name: str, *args) -> bytes:
    w = Writer()
    getattr(w, fn_name)(*args)
    return w.getvalue()


# ---- fixed-width integers ----------------------------------------------------------------


@pytest.mark.parametrize(
    "method,fmt,lo,hi",
    [
        ("int8", ">b", -(2**7), 2**7 - 1),
        ("int16", ">h", -(2**15), 2**15 - 1),
        ("int32", ">i", -(2**31), 2**31 - 1),
        ("int64", ">q", -(2**63), 2**63 - 1),
        ("uint16", ">H", 0, 2**16 - 1),
        ("uint32", ">I", 0, 2**32 - 1),
    ],
)
def test_fixed_ints_match_struct_and_bounds(method, fmt, lo, hi):
    for v in (lo, lo + 1, -1 if lo < 0 else 1, 0, hi - 1, hi):
        data = written("write_" + method, v)
        assert data == struct.pack(fmt, v)
        r = Reader(data)
        assert getattr(r, "read_" + method)() == v
        assert r.remaining == 0
    for bad in (lo - 1, hi + 1, 2**70, -(2**70)):
        with pytest.raises(ProtocolEncodeError, match=method):
            written("write_" + method, bad)
    for bad in (1.0, "1", None, b"\x01"):
        with pytest.raises(ProtocolEncodeError):
            written("write_" + method, bad)


def test_int_accepts_index_objects_and_bool():
    class Idx:
        def __index__(self):
            return 7

    assert written("write_int32", Idx()) == b"\x00\x00\x00\x07"
    assert written("write_int8", True) == b"\x01"


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(["int8", "int16", "int32", "int64"]), INT64), max_size=30))
def test_mixed_int_roundtrip(items):
    bounds = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}
    items = [(k, max(-(2**bounds[k]), min(2**bounds[k] - 1, v))) for k, v in items]
    w = Writer(initial_capacity=1)  # forces many regrowths
    for k, v in items:
        getattr(w, "write_" + k)(v)
    data = w.getvalue()
    assert len(w) == len(data) == sum({"int8": 1, "int16": 2, "int32": 4, "int64": 8}[k] for k, _ in items)
    r = Reader(data)
    assert [getattr(r, "read_" + k)() for k, _ in items] == [v for _, v in items]


# ---- float64, bool, uuid ---------------------------------------------------------------


@settings(max_examples=100)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_float64_roundtrip(x):
    data = written("write_float64", x)
    assert data == struct.pack(">d", x)
    y = Reader(data).read_float64()
    assert (math.isnan(x) and math.isnan(y)) or x == y


def test_float64_errors_and_ints():
    assert written("write_float64", 2) == struct.pack(">d", 2.0)
    with pytest.raises(ProtocolEncodeError):
        written("write_float64", "1.0")
    with pytest.raises(ProtocolEncodeError):
        written("write_float64", 10**400)


def test_bool():
    assert written("write_bool", True) == b"\x01"
    assert written("write_bool", False) == b"\x00"
    assert written("write_bool", 1) == b"\x01"
    for bad in (2, None, "x", 1.0):
        with pytest.raises(ProtocolEncodeError):
            written("write_bool", bad)
    r = Reader(b"\x00\x01\x7f\xff")
    assert [r.read_bool() for _ in range(4)] == [False, True, True, True]


def test_uuid():
    u = uuid.UUID("0123456789abcdef0011223344556677")
    assert written("write_uuid", u) == u.bytes
    assert written("write_uuid", u.bytes) == u.bytes
    assert written("write_uuid", bytearray(u.bytes)) == u.bytes
    r = Reader(u.bytes + uuid.UUID(int=0).bytes)
    got = r.read_uuid()
    assert type(got) is uuid.UUID and got == u and hash(got) == hash(u) and str(got) == str(u)
    assert got.is_safe is uuid.SafeUUID.unknown
    with pytest.raises(TypeError):
        got.int = 5  # still immutable
    assert r.read_uuid() == uuid.UUID(int=0)
    w = Writer()
    w.write_int8(1)
    for bad in (b"short", None, str(u), 5):
        with pytest.raises(ProtocolEncodeError):
            w.write_uuid(bad)
    assert w.getvalue() == b"\x01"  # a failed write leaves nothing behind
    with pytest.raises(TruncatedDataError, match="uuid"):
        Reader(b"\x00" * 15).read_uuid()


# ---- varints ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,encoded",
    [(0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"),
     (-65, "8101"), (2**31 - 1, "feffffff0f"), (-(2**31), "ffffffff0f")],
)
def test_varint_known_vectors(value, encoded):
    assert encode_varint(value).hex() == encoded
    assert written("write_varint", value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


def test_uvarint_known_vectors():
    assert encode_uvarint(0) == b"\x00"
    assert encode_uvarint(300) == b"\xac\x02"
    assert encode_uvarint(2**32 - 1) == b"\xff\xff\xff\xff\x0f"
    assert decode_uvarint(b"\x00\xac\x02", 1) == (300, 3)
    assert encode_varlong(-(2**63)).hex() == "ff" * 9 + "01"
    assert decode_varlong(bytes.fromhex("ff" * 9 + "01")) == (-(2**63), 10)


@settings(max_examples=300)
@given(INT32, INT64, UINT32)
def test_varints_match_reference(a, b, c):
    assert encode_varint(a) == ref_uvarint(ref_zigzag(a, 32))
    assert encode_varlong(b) == ref_uvarint(ref_zigzag(b, 64))
    assert encode_uvarint(c) == ref_uvarint(c)
    w = Writer()
    w.write_varint(a)
    w.write_varlong(b)
    w.write_uvarint(c)
    r = Reader(w.getvalue())
    assert (r.read_varint(), r.read_varlong(), r.read_uvarint()) == (a, b, c)
    assert r.remaining == 0


def test_varint_range_errors():
    for fn, bad in ((encode_varint, 2**31), (encode_varint, -(2**31) - 1),
                    (encode_varlong, 2**63), (encode_uvarint, -1), (encode_uvarint, 2**32)):
        with pytest.raises(ProtocolEncodeError):
            fn(bad)
    with pytest.raises(ProtocolEncodeError):
        written("write_uvarint", 2**32)


def test_varint_decode_errors():
    with pytest.raises(TruncatedDataError):
        Reader(b"").read_varint()
    with pytest.raises(TruncatedDataError, match="position 0"):
        Reader(b"\x80\x80").read_varint()
    with pytest.raises(InvalidVarintError):
        Reader(b"\x80\x80\x80\x80\x80\x00").read_varint()  # 6 bytes
    with pytest.raises(InvalidVarintError):
        Reader(b"\xff\xff\xff\xff\x1f").read_uvarint()  # 5 bytes but > 2**32 - 1
    with pytest.raises(InvalidVarintError):
        Reader(b"\xff\xff\xff\xff\x10").read_varint()
    with pytest.raises(InvalidVarintError):
        Reader(b"\x80" * 10 + b"\x00").read_varlong()  # 11 bytes
    with pytest.raises(InvalidVarintError):
        Reader(b"\xff" * 9 + b"\x02").read_varlong()  # bit 64 set
    # A failed read does not move the position.
    r = Reader(b"\x80")
    with pytest.raises(TruncatedDataError):
        r.read_uvarint()
    assert r.position == 0


# ---- strings ---------------------------------------------------------------------------

TEXT = st.text(max_size=60)


@settings(max_examples=200)
@given(TEXT, st.one_of(st.none(), TEXT))
def test_string_encodings(s, ns):
    raw = s.encode("utf-8")
    assert written("write_string", s) == struct.pack(">h", len(raw)) + raw
    assert written("write_compact_string", s) == ref_uvarint(len(raw) + 1) + raw
    w = Writer()
    w.write_string(s)
    w.write_nullable_string(ns)
    w.write_compact_string(s)
    w.write_compact_nullable_string(ns)
    r = Reader(w.getvalue())
    assert r.read_string() == s
    assert r.read_nullable_string() == ns
    assert r.read_compact_string() == s
    assert r.read_compact_nullable_string() == ns
    assert r.remaining == 0


def test_null_strings_and_limits():
    assert written("write_nullable_string", None) == b"\xff\xff"
    assert written("write_compact_nullable_string", None) == b"\x00"
    for m in ("write_string", "write_compact_string"):
        with pytest.raises(ProtocolEncodeError, match="None"):
            written(m, None)
        with pytest.raises(ProtocolEncodeError):
            written(m, b"bytes are not str")
        with pytest.raises(ProtocolEncodeError):
            written(m, "\ud800")  # lone surrogate: not UTF-8 encodable
        assert len(written(m, "x" * 32767)) >= 32767
        with pytest.raises(ProtocolEncodeError, match="32767"):
            written(m, "x" * 32768)
        with pytest.raises(ProtocolEncodeError):
            written(m, "é" * 16384)  # 32768 UTF-8 bytes


def _uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


@pytest.mark.parametrize("method", ["read_compact_string", "read_compact_nullable_string"])
def test_a_compact_string_above_32767_bytes_is_refused_as_kafka_refuses_it(method):
    """A compact length can declare more than a classic int16 one: Kafka's generated
    readers refuse a string above 32767 bytes ("string field had invalid length"), as its
    writers (and ours) never write one; the reader took it."""
    assert getattr(Reader(_uvarint(32768) + b"x" * 32767), method)() == "x" * 32767
    data = _uvarint(32769) + b"x" * 32768 + b"after"
    reader = Reader(data)
    with pytest.raises(InvalidLengthError, match="32767"):
        getattr(reader, method)()
    assert reader.position == 0


def test_string_decode_errors():
    with pytest.raises(InvalidLengthError, match="null"):
        Reader(b"\xff\xff").read_string()
    with pytest.raises(InvalidLengthError, match="negative"):
        Reader(b"\xff\xfe").read_nullable_string()
    with pytest.raises(InvalidLengthError, match="remain"):
        Reader(b"\x00\x05abc").read_string()
    with pytest.raises(InvalidLengthError, match="null"):
        Reader(b"\x00").read_compact_string()
    with pytest.raises(InvalidLengthError):
        Reader(b"\x05ab").read_compact_nullable_string()
    with pytest.raises(TruncatedDataError, match="string length at position 2"):
        r = Reader(b"\x00\x00\x00")
        r.read_string()
        r.read_string()
    # A failed read leaves the position at the start of the field.
    r = Reader(b"\x00\x00\x00\x09abc")
    r.skip(2)
    with pytest.raises(InvalidLengthError, match="position 2 declares 9 bytes but only 3"):
        r.read_string()
    assert r.position == 2
    assert Reader(b"\xff\xff").read_nullable_string() is None
    assert Reader(b"\x00\x00").read_string() == ""


# ---- bytes -----------------------------------------------------------------------------

BLOBS = st.binary(max_size=80)


@settings(max_examples=200)
@given(BLOBS, st.one_of(st.none(), BLOBS))
def test_bytes_encodings(b, nb):
    assert written("write_bytes", b) == struct.pack(">i", len(b)) + b
    assert written("write_compact_bytes", b) == ref_uvarint(len(b) + 1) + b
    for kind in (bytes, bytearray, memoryview):
        assert written("write_bytes", kind(b)) == struct.pack(">i", len(b)) + b
    w = Writer()
    w.write_bytes(b)
    w.write_nullable_bytes(nb)
    w.write_compact_bytes(b)
    w.write_compact_nullable_bytes(nb)
    w.write_nullable_bytes(nb)
    w.write_compact_nullable_bytes(nb)
    r = Reader(w.getvalue())
    assert r.read_bytes() == b
    assert r.read_nullable_bytes() == nb
    assert r.read_compact_bytes() == b
    assert r.read_compact_nullable_bytes() == nb
    v1 = r.read_nullable_bytes_view()
    v2 = r.read_compact_nullable_bytes_view()
    assert (None if v1 is None else bytes(v1)) == nb
    assert (None if v2 is None else bytes(v2)) == nb
    assert r.remaining == 0


def test_bytes_null_and_errors():
    assert written("write_nullable_bytes", None) == b"\xff\xff\xff\xff"
    assert written("write_compact_nullable_bytes", None) == b"\x00"
    for m in ("write_bytes", "write_compact_bytes"):
        with pytest.raises(ProtocolEncodeError):
            written(m, None)
        with pytest.raises(ProtocolEncodeError):
            written(m, "str is not bytes")
    # Non-contiguous memoryview is still accepted (compacted once).
    assert written("write_raw", memoryview(b"abcdef")[::2]) == b"ace"
    with pytest.raises(InvalidLengthError, match="null"):
        Reader(b"\xff\xff\xff\xff").read_bytes()
    with pytest.raises(InvalidLengthError, match="negative"):
        Reader(b"\xff\xff\xff\xfe").read_nullable_bytes()
    with pytest.raises(InvalidLengthError, match="remain"):
        Reader(b"\x7f\xff\xff\xff" + b"x" * 10).read_nullable_bytes_view()
    with pytest.raises(InvalidLengthError):
        Reader(b"\xff\xff\xff\xff\x0f").read_compact_bytes()
    with pytest.raises(TruncatedDataError):
        Reader(b"\x00\x00").read_bytes()


def test_views_are_zero_copy():
    buf = bytearray(b"\x00\x00\x00\x03abc\x04xyz")
    r = Reader(buf)
    v = r.read_nullable_bytes_view()
    c = r.read_compact_nullable_bytes_view()
    assert bytes(v) == b"abc" and bytes(c) == b"xyz"
    buf[4] = ord("Z")
    assert bytes(v) == b"Zbc"  # shares memory with the original buffer
    r2 = Reader(buf, 4)
    rv = r2.read_raw_view(3)
    buf[5] = ord("Y")
    assert bytes(rv) == b"ZYc"
    with pytest.raises(BufferError):
        buf.append(0)  # the Reader keeps the buffer exported: no resize under it


# ---- arrays, raw, positions ------------------------------------------------------------


def test_array_lengths():
    assert written("write_array_length", 3) == b"\x00\x00\x00\x03"
    assert written("write_array_length", None) == b"\xff\xff\xff\xff"
    assert written("write_compact_array_length", 3) == b"\x04"
    assert written("write_compact_array_length", None) == b"\x00"
    for m in ("write_array_length", "write_compact_array_length"):
        with pytest.raises(ProtocolEncodeError):
            written(m, -1)
        with pytest.raises(ProtocolEncodeError):
            written(m, [1, 2])
    assert Reader(b"\xff\xff\xff\xff").read_array_length() == -1
    assert Reader(b"\x00").read_compact_array_length() == -1
    assert Reader(b"\x00\x00\x00\x02ab").read_array_length() == 2
    assert Reader(b"\x03ab").read_compact_array_length() == 2
    # A count larger than the remaining bytes is rejected (each element takes >= 1 byte).
    with pytest.raises(InvalidLengthError):
        Reader(b"\x00\x00\x00\x03ab").read_array_length()
    with pytest.raises(InvalidLengthError):
        Reader(b"\x7f\xff\xff\xff").read_array_length()
    with pytest.raises(InvalidLengthError):
        Reader(b"\x04ab").read_compact_array_length()
    with pytest.raises(InvalidLengthError):
        Reader(b"\xff\xff\xff\xfe").read_array_length()


def test_raw_skip_and_position():
    r = Reader(b"0123456789", 2, 8)
    assert (r.start, r.position, r.end, r.remaining) == (2, 2, 8, 6)
    assert r.read_raw(2) == b"23"
    r.skip(1)
    assert r.position == 5
    assert bytes(r.read_raw_view(3)) == b"567"
    assert r.remaining == 0
    with pytest.raises(TruncatedDataError, match="position 8"):
        r.read_int8()
    with pytest.raises(TruncatedDataError):
        r.skip(1)
    with pytest.raises(TruncatedDataError):
        r.read_raw(1)
    with pytest.raises(InvalidLengthError):
        r.skip(-1)
    r.position = 3
    assert r.read_raw(0) == b"" and r.read_int8() == ord("3")
    with pytest.raises(ValueError):
        r.position = 9
    with pytest.raises(ValueError):
        r.position = 1
    with pytest.raises(ValueError):
        Reader(b"abc", 2, 1)
    with pytest.raises(ValueError):
        Reader(b"abc", 0, 4)
    with pytest.raises(TypeError):
        Reader("not a buffer")


@pytest.mark.parametrize(
    "method,size",
    [("int8", 1), ("int16", 2), ("int32", 4), ("int64", 8), ("uint16", 2), ("uint32", 4),
     ("float64", 8), ("bool", 1), ("uuid", 16)],
)
def test_truncation_names_field_and_position(method, size):
    r = Reader(b"\x00" * (size + 2), 0, size + 1)
    r.skip(2)
    with pytest.raises(TruncatedDataError, match=rf"{method} at position 2: need {size}"):
        getattr(r, "read_" + method)()
    assert r.position == 2


def test_reader_over_other_buffers(tmp_path):
    payload = b"\x00\x00\x00\x05hello" + b"\x00\x01"
    path = tmp_path / "f.bin"
    path.write_bytes(payload)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        r = Reader(mm)
        assert bytes(r.read_bytes_view()) == b"hello"
        assert r.read_int16() == 1
        del r
        mm.close()
    import array

    arr = array.array("I", [1, 2])
    r = Reader(arr)
    assert r.remaining == 8
    r.skip(4)
    assert len(r.read_raw_view(4)) == 4  # multi-byte item format is viewed as bytes
    assert Reader(memoryview(payload)[4:9]).read_raw(5) == b"hello"


def test_reserve_patch_clear():
    w = Writer(initial_capacity=0)
    w.write_int16(7)
    pos = w.reserve(4)
    assert pos == 2
    w.write_raw(b"body")
    w.patch_int32(pos, len(w) - pos - 4)
    assert w.getvalue() == b"\x00\x07\x00\x00\x00\x04body"
    with pytest.raises(ProtocolEncodeError):
        w.patch_int32(len(w) - 3, 1)
    with pytest.raises(ProtocolEncodeError):
        w.patch_int32(-1, 1)
    with pytest.raises(ProtocolEncodeError):
        w.patch_int32(0, 2**31)
    with pytest.raises(ProtocolEncodeError):
        w.reserve(-1)
    w.clear()
    assert len(w) == 0 and w.getvalue() == b""
    w.write_raw(bytearray(b"x" * 100_000))
    assert w.getvalue() == b"x" * 100_000


READ_METHODS = [
    "read_int8", "read_int16", "read_int32", "read_int64", "read_uint16", "read_uint32",
    "read_float64", "read_bool", "read_uuid", "read_varint", "read_varlong", "read_uvarint",
    "read_string", "read_nullable_string", "read_compact_string",
    "read_compact_nullable_string", "read_bytes", "read_nullable_bytes", "read_compact_bytes",
    "read_compact_nullable_bytes", "read_bytes_view", "read_nullable_bytes_view",
    "read_compact_bytes_view", "read_compact_nullable_bytes_view", "read_array_length",
    "read_compact_array_length",
]


@settings(max_examples=300)
@given(st.binary(max_size=64), st.lists(st.sampled_from(READ_METHODS), max_size=20),
       st.integers(0, 8))
def test_hostile_input_only_raises_decode_errors(data, methods, start):
    start = min(start, len(data))
    r = Reader(data, start)
    for name in methods:
        before = r.position
        try:
            getattr(r, name)()
        except ProtocolDecodeError:
            assert r.position == before  # a failed read consumes nothing
            break
        assert before < r.position <= r.end
    assert start <= r.position <= len(data)


def _stub_names(module):
    """Top-level and class-level names declared in a module's .pyi stub."""
    import ast
    import pathlib

    stub_path = pathlib.Path(module.__file__).with_name(module.__name__.rsplit(".", 1)[1] + ".pyi")
    tree = ast.parse(stub_path.read_text())
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = None
        elif isinstance(node, ast.AnnAssign):
            names[node.target.id] = None
    return names


def test_stub_matches_module():
    import kafka_proto._wire as wire

    stub = _stub_names(wire)
    public = {n for n in dir(wire) if not n.startswith("_") and n not in ("Optional", "Union")}
    runtime = {n for n in public
               if callable(getattr(wire, n)) and getattr(wire, n).__module__ == wire.__name__}
    assert runtime == {n for n in stub if not n.startswith("_")}
    assert {"Reader", "Writer", "encode_varint", "decode_uvarint"} <= runtime
    for cls in ("Reader", "Writer"):
        methods = {n for n in dir(getattr(wire, cls)) if not n.startswith("_")}
        assert methods == {n for n in stub[cls] if not n.startswith("_")}, cls


def test_strings_not_utf8_read_with_replacement_characters_as_kafka_reads_them():
    """Kafka's readers (Java's String decoding) replace each bad sequence with U+FFFD;
    so do ours, and the position moves past the whole field."""
    r = Reader(b"\x00\x02\xc3\x28" + b"\x02\xff" + b"\x00\x03ok\xed" + b"\x03a\xc3")
    assert r.read_string() == "\ufffd("
    assert r.read_compact_string() == "\ufffd"
    assert r.read_nullable_string() == "ok\ufffd"
    assert r.read_compact_nullable_string() == "a\ufffd"
    assert r.remaining == 0
