"""Malformed and hostile v2 batches: each raises its documented exception, never crashes."""
from __future__ import annotations

import struct


import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import v2_reference as ref
from kafka_proto.errors import (
    CorruptRecordError,
    CrcMismatchError,
    DecompressionError,
    DecompressionLimitError,
    InvalidLengthError,
    InvalidVarintError,
    KafkaProtocolError,
    ProtocolDecodeError,
    TruncatedDataError,
    UnsupportedCompressionError,
    UnsupportedMagicError,
)
from kafka_proto.records import Compression, RecordBatchBuilder, read_batches

try:
    from kafka_proto import compression as _compression
except ImportError:  # pragma: no cover
    _compression = None

needs_compression = pytest.mark.skipif(_compression is None, reason="compression.py missing")


def read_all(data, **kw):
    """Read every batch and every record (that is where record-level errors surface)."""
    out = []
    for batch in read_batches(data, **kw):
        out.append((batch, list(batch)))
    return out


def valid_batch(n=3, **kw) -> bytes:
    b = RecordBatchBuilder(**kw)
    for i in range(n):
        b.append(b"value-%d" % i, key=b"key-%d" % i, timestamp=1000 + i,
                 headers=[("h", b"%d" % i)])
    return b.build(base_offset=50)


def with_header(data: bytes, fmt: str, offset: int, value, fix_crc=True) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    out = bytes(out)
    return ref.recrc(out) if fix_crc and offset >= 21 else out


# --------------------------------------------------------------------------- batch framing

@pytest.mark.parametrize("cut", [1, 11, 12, 16, 17, 30, 60, 61, 70])
def test_truncated_batch_is_ignored_or_strict_error(cut):
    data = valid_batch()[:cut]
    assert read_all(data) == []
    with pytest.raises(TruncatedDataError):
        read_all(data, allow_truncated=False)


def test_batch_length_beyond_buffer_is_a_truncated_tail():
    data = with_header(valid_batch(), ">i", 8, 10_000_000)
    assert read_all(data) == []
    with pytest.raises(TruncatedDataError):
        read_all(data, allow_truncated=False)
    # Even the largest length allocates nothing and just ends the iteration.
    assert read_all(with_header(valid_batch(), ">i", 8, 2**31 - 1)) == []


@pytest.mark.parametrize("length", [-1, -2**31, 0, 5, 13])
def test_batch_length_negative_or_below_any_minimum(length):
    with pytest.raises(InvalidLengthError):
        read_all(with_header(valid_batch(), ">i", 8, length))


@pytest.mark.parametrize("length", [14, 30, 48])
def test_batch_length_below_v2_minimum(length):
    data = with_header(valid_batch(), ">i", 8, length)
    with pytest.raises(InvalidLengthError):
        read_all(data)


@pytest.mark.parametrize("magic", [3, 4, 127, -1, -128])
def test_unsupported_magic(magic):
    with pytest.raises(UnsupportedMagicError):
        read_all(with_header(valid_batch(), ">b", 16, magic))


def test_corrupt_crc():
    data = bytearray(valid_batch())
    data[-1] ^= 0x01  # flip a bit in the last header value byte
    with pytest.raises(CrcMismatchError):
        read_all(bytes(data))
    recs = read_all(bytes(data), check_crc=False)[0][1]
    assert recs[-1].headers == [("h", b"3")]  # b"2" with its low bit flipped
    bad_crc = with_header(valid_batch(), ">I", 17, 0xDEADBEEF)
    with pytest.raises(CrcMismatchError):
        read_all(bad_crc)
    assert not next(read_batches(bad_crc, check_crc=False)).validate_crc()


def test_partition_leader_epoch_is_outside_the_crc():
    data = with_header(valid_batch(), ">i", 12, 99, fix_crc=False)
    ((batch, recs),) = read_all(data)
    assert batch.partition_leader_epoch == 99 and len(recs) == 3


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_compression_codec(codec):
    with pytest.raises(UnsupportedCompressionError):
        read_all(with_header(valid_batch(), ">h", 21, codec))


def test_iteration_stops_after_an_error():
    data = valid_batch() + with_header(valid_batch(), ">b", 16, 9) + valid_batch()
    it = read_batches(data)
    next(it)
    with pytest.raises(UnsupportedMagicError):
        next(it)
    assert list(it) == []


# --------------------------------------------------------------------------- records count

@pytest.mark.parametrize("count", [-1, -2**31])
def test_negative_records_count(count):
    with pytest.raises(InvalidLengthError):
        read_all(with_header(valid_batch(), ">i", 57, count))


@pytest.mark.parametrize("count", [1000, 2**31 - 1])
def test_records_count_larger_than_bytes_can_hold(count):
    with pytest.raises(InvalidLengthError):
        read_all(with_header(valid_batch(), ">i", 57, count))


def test_records_count_larger_than_records_present():
    # 4 claimed, 3 present, and the bytes could hold 4 minimal records: found when reading.
    recs = ref.record(0, 0, None, b"x" * 30) * 1
    data = ref.batch(recs, 4)
    with pytest.raises(TruncatedDataError):
        read_all(data)


def test_records_count_smaller_than_records_present():
    recs = ref.record(0, 0, None, b"a") + ref.record(1, 0, None, b"b")
    with pytest.raises(CorruptRecordError):
        read_all(ref.batch(recs, 1))
    with pytest.raises(CorruptRecordError):
        read_all(ref.batch(recs, 0))


# --------------------------------------------------------------------------- records

def one_record_batch(rec: bytes) -> bytes:
    return ref.batch(rec, 1)


def test_record_length_larger_than_its_fields():
    body = ref.record_body(0, 0, b"k", b"v") + b"\x00\x00"
    with pytest.raises(CorruptRecordError):
        read_all(one_record_batch(ref.varint(len(body)) + body))


def test_record_length_smaller_than_its_fields():
    body = ref.record_body(0, 0, b"k", b"value")
    short = ref.varint(len(body) - 3) + body
    with pytest.raises(ProtocolDecodeError):
        read_all(ref.batch(short, 1))


@pytest.mark.parametrize("length", [-1, 0, 5])
def test_record_length_too_small(length):
    data = one_record_batch(ref.varint(length) + b"\x00" * 10)
    with pytest.raises(InvalidLengthError):
        read_all(data)


def test_record_length_beyond_batch():
    body = ref.record_body(0, 0, b"k", b"v")
    with pytest.raises(InvalidLengthError):
        read_all(one_record_batch(ref.varint(len(body) + 100) + body))


@pytest.mark.parametrize("field", ["key", "value"])
def test_key_or_value_length_beyond_record(field):
    body = bytearray(b"\x00\x00\x00")
    if field == "key":
        body += ref.varint(50) + b"abc" + ref.varint(-1) + ref.varint(0)
    else:
        body += ref.varint(-1) + ref.varint(1000) + b"abc" + ref.varint(0)
    with pytest.raises(InvalidLengthError):
        read_all(one_record_batch(ref.varint(len(body)) + bytes(body)))


@pytest.mark.parametrize("n", [-2, -1000, -2**31])
def test_negative_key_length_other_than_null(n):
    body = b"\x00\x00\x00" + ref.varint(n) + ref.varint(-1) + ref.varint(0)
    with pytest.raises(InvalidLengthError):
        read_all(one_record_batch(ref.varint(len(body)) + body))


@pytest.mark.parametrize("count", [-1, -2**31, 2**31 - 1, 50])
def test_bad_header_count(count):
    body = b"\x00\x00\x00" + ref.varint(-1) + ref.varint(-1) + ref.varint(count) + b"\x02h\x00"
    with pytest.raises(InvalidLengthError):
        read_all(one_record_batch(ref.varint(len(body)) + body))


def test_null_header_key():
    body = b"\x00\x00\x00" + ref.varint(-1) + ref.varint(-1) + ref.varint(1) \
        + ref.varint(-1) + ref.varint(-1)
    with pytest.raises(InvalidLengthError):
        read_all(one_record_batch(ref.varint(len(body)) + body))


def test_header_lengths_beyond_record():
    for header in (ref.varint(40) + b"k" + ref.varint(-1), ref.varint(1) + b"k" + ref.varint(40)):
        body = b"\x00\x00\x00" + ref.varint(-1) + ref.varint(-1) + ref.varint(1) + header
        with pytest.raises(InvalidLengthError):
            read_all(one_record_batch(ref.varint(len(body)) + body))


def test_invalid_utf8_header_key_is_replaced():
    body = b"\x00\x00\x00" + ref.varint(-1) + ref.varint(-1) + ref.varint(1) \
        + ref.varint(2) + b"\xff\xfe" + ref.varint(0)
    ((_, (rec,)),) = read_all(one_record_batch(ref.varint(len(body)) + body))
    assert rec.headers == [("\ufffd\ufffd", b"")]


def test_overlong_varints():
    too_long32 = b"\x80\x80\x80\x80\x80\x01"       # 6 bytes: too long for a varint
    too_long64 = b"\x80" * 10 + b"\x01"           # 11 bytes: too long for a varlong
    # record length
    with pytest.raises(InvalidVarintError):
        read_all(one_record_batch(too_long32 + b"\x00" * 20))
    # timestamp delta
    body = b"\x00" + too_long64 + b"\x00" + ref.varint(-1) + ref.varint(-1) + ref.varint(0)
    with pytest.raises(InvalidVarintError):
        read_all(one_record_batch(ref.varint(len(body)) + body))
    # key length
    body = b"\x00\x00\x00" + too_long32 + ref.varint(-1) + ref.varint(0)
    with pytest.raises(InvalidVarintError):
        read_all(one_record_batch(ref.varint(len(body)) + body))


def test_varint_running_past_record_end():
    body = b"\x00\x00\x00" + ref.varint(-1) + ref.varint(-1) + b"\x80\x80"
    with pytest.raises(TruncatedDataError):
        read_all(one_record_batch(ref.varint(len(body)) + body))
    with pytest.raises(TruncatedDataError):
        read_all(ref.batch(ref.record(0, 0, None, b"x" * 10) + b"\x80\x80", 2))


# --------------------------------------------------------------------------- compression

@needs_compression
@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
                                   Compression.ZSTD])
def test_corrupt_compressed_payload(codec):
    records = b"".join(ref.record(i, 0, None, b"payload %d" % i * 5) for i in range(20))
    payload = bytearray(_compression.compress(int(codec), records))
    payload = bytes(b ^ 0x5A for b in payload[: len(payload) // 2]) + bytes(payload[len(payload) // 2:])
    data = ref.batch(payload, 20, attributes=int(codec))
    with pytest.raises(DecompressionError):
        read_all(data)


@needs_compression
@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
                                   Compression.ZSTD])
def test_decompression_bomb_is_capped(codec):
    b = RecordBatchBuilder(compression=codec)
    b.append(bytes(2_000_000), timestamp=0)
    data = b.build()
    assert len(data) < 200_000
    with pytest.raises(DecompressionLimitError):
        read_all(data, max_decompressed_size=500_000)
    assert [len(r.value) for _, rs in read_all(data) for r in rs] == [2_000_000]


@needs_compression
def test_default_decompression_limit():
    # ~72 MiB of zeros compress to a few KiB: above the 64 MiB floor, and far above 64x.
    b = RecordBatchBuilder(compression=Compression.ZSTD)
    b.append(bytes(72 * 1024 * 1024), timestamp=0)
    data = b.build()
    del b
    assert len(data) < 1_000_000
    with pytest.raises(DecompressionLimitError):
        read_all(data)
    # A reader that knows larger batches are legitimate (a consumer whose configuration
    # lets a Fetch carry them) raises the floor.
    (_, records), = read_all(data, decompressed_floor=80 * 1024 * 1024)
    assert [len(r.value) for r in records] == [72 * 1024 * 1024]


@needs_compression
def test_the_decompressed_floor_replaces_the_default_under_the_ratio_rule():
    b = RecordBatchBuilder(compression=Compression.ZSTD)
    b.append(bytes(2_000_000), timestamp=0)
    data = b.build()
    assert 64 * len(data) < 2_000_000
    with pytest.raises(DecompressionLimitError):
        read_all(data, decompressed_floor=1_000_000)
    assert [len(r.value) for _, rs in read_all(data, decompressed_floor=3_000_000)
            for r in rs] == [2_000_000]
    with pytest.raises(ValueError):
        read_batches(b"", decompressed_floor=0)


@needs_compression
def test_compressed_records_count_larger_than_decompressed_bytes():
    payload = _compression.compress(int(Compression.GZIP), ref.record(0, 0, None, b"x"))
    with pytest.raises(InvalidLengthError):
        read_all(ref.batch(payload, 500, attributes=int(Compression.GZIP)))


def test_max_decompressed_size_must_be_positive():
    with pytest.raises(ValueError):
        read_batches(b"", max_decompressed_size=0)


# --------------------------------------------------------------------------- control batches

def test_control_batch_with_short_key():
    data = ref.batch(ref.record(0, 0, b"\x00", struct.pack(">hi", 0, 1)), 1,
                     attributes=0x30)
    ((batch, _),) = read_all(data)
    with pytest.raises(CorruptRecordError):
        batch.control_record()


def test_control_batch_with_null_key_and_short_value():
    with pytest.raises(CorruptRecordError):
        next(read_batches(ref.batch(ref.record(0, 0, None, b""), 1,
                                    attributes=0x20))).control_record()
    with pytest.raises(CorruptRecordError):
        next(read_batches(ref.batch(ref.record(0, 0, b"\x00\x00\x00\x01", b"\x00\x00"), 1,
                                    attributes=0x20))).control_record()


# --------------------------------------------------------------------------- fuzz

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255)),
                      min_size=1, max_size=4),
       cut=st.integers(min_value=0, max_value=400))
def test_mutated_batches_raise_only_protocol_errors(flips, cut):
    data = bytearray(valid_batch(4) + valid_batch(2))
    for pos, x in flips:
        data[pos % len(data)] ^= x
    data = bytes(data[: len(data) - cut % 40])
    try:
        for batch in read_batches(data, check_crc=False):
            for rec in batch:
                assert rec.value is None or isinstance(rec.value, bytes)
            batch.control_record() if batch.is_control else None
    except KafkaProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_protocol_errors(data):
    try:
        read_all(data, check_crc=False)
    except KafkaProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=200))
def test_random_records_section_raises_only_protocol_errors(records):
    for count in (0, 1, 3):
        try:
            read_all(ref.batch(records, count))
        except KafkaProtocolError:
            pass
