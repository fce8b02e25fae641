"""Legacy message sets (magic 0 and 1): golden bytes, wrappers, peers, hostile input."""
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafka_proto.compression import compress
from kafka_proto.errors import (
    CorruptRecordError,
    CrcMismatchError,
    DecompressionError,
    DecompressionLimitError,
    KafkaProtocolError,
    UnsupportedCompressionError,
    UnsupportedMagicError,
)
from kafka_proto.records._legacy import LegacyBatch, read_legacy_entry, read_legacy_message_set

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
LOG_APPEND = 0x08


def _lenbytes(b):
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


def msg(offset, value, key=None, magic=1, attrs=0, ts=-1, crc=None):
    """One log entry (offset, size, crc, message) built field by field."""
    body = struct.pack(">bB", magic, attrs)
    if magic == 1:
        body += struct.pack(">q", ts)
    body += _lenbytes(key) + _lenbytes(value)
    c = zlib.crc32(body) if crc is None else crc
    return struct.pack(">qiI", offset, len(body) + 4, c) + body


def wrapper(codec, inner, offset, magic=1, ts=-1, extra_attrs=0):
    payload = compress(codec, b"".join(inner), legacy_lz4_header=(magic == 0))
    return msg(offset, payload, None, magic, codec | extra_attrs, ts)


def records_of(batches):
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value)
            for b in batches for r in b]


# --- golden bytes ------------------------------------------------------------------------

GOLDEN_V0 = bytes.fromhex("0000000000000005" "00000014" "a4cdab3a"
                          "00" "00" "00000001" "6b" "00000005" "68656c6c6f")
GOLDEN_V1 = bytes.fromhex("0000000000000007" "0000001b" "a584f508" "01" "00"
                          "0000018bcfe56800" "ffffffff" "00000005" "76616c7565")


def test_golden_v0_message():
    assert msg(5, b"hello", b"k", magic=0) == GOLDEN_V0  # the test's builder is exact
    batch, nxt = read_legacy_entry(GOLDEN_V0, 0, len(GOLDEN_V0), True)
    assert nxt == len(GOLDEN_V0) == 32
    assert isinstance(batch, LegacyBatch)
    assert (batch.base_offset, batch.last_offset, batch.records_count, batch.magic) == (5, 5, 1, 0)
    assert batch.crc == 0xA4CDAB3A and batch.size == 32 and batch.compression == 0
    assert (batch.timestamp_type, batch.base_timestamp, batch.max_timestamp) == (-1, -1, -1)
    assert (batch.is_transactional, batch.is_control, batch.partition_leader_epoch,
            batch.producer_id, batch.producer_epoch, batch.base_sequence,
            batch.delete_horizon) == (False, False, -1, -1, -1, -1, None)
    (rec,) = list(batch)
    assert (rec.offset, rec.timestamp, rec.timestamp_type, rec.key, rec.value, rec.headers) == \
        (5, -1, -1, b"k", b"hello", [])
    assert len(batch) == 1


def test_golden_v1_message():
    assert msg(7, b"value", None, magic=1, ts=1700000000000) == GOLDEN_V1
    batch, nxt = read_legacy_entry(GOLDEN_V1, 0, len(GOLDEN_V1), True)
    assert nxt == 39
    assert (batch.magic, batch.crc, batch.timestamp_type) == (1, 0xA584F508, 0)
    assert (batch.base_timestamp, batch.max_timestamp) == (1700000000000, 1700000000000)
    assert records_of([batch]) == [(7, 1700000000000, 0, None, b"value")]


def test_golden_bytes_match_kafka_python_builder():
    b = LegacyRecordBatchBuilder(0, 0, 1000)
    b.append(5, None, b"k", b"hello")
    assert bytes(b.build()) == GOLDEN_V0
    b = LegacyRecordBatchBuilder(1, 0, 1000)
    b.append(7, 1700000000000, None, b"value")
    assert bytes(b.build()) == GOLDEN_V1


def test_plain_message_set_and_null_empty_fields():
    data = (msg(0, b"a", magic=0) + msg(1, None, b"key", magic=0) + msg(2, b"", b"", magic=0))
    batches = read_legacy_message_set(data)
    assert [b.records_count for b in batches] == [1, 1, 1]
    assert records_of(batches) == [(0, -1, -1, None, b"a"), (1, -1, -1, b"key", None),
                                   (2, -1, -1, b"", b"")]
    assert sum(b.size for b in batches) == len(data)


def test_log_append_time_plain_v1():
    (batch,) = read_legacy_message_set(msg(3, b"v", attrs=LOG_APPEND, ts=42))
    assert batch.timestamp_type == 1
    assert records_of([batch]) == [(3, 42, 1, None, b"v")]


# --- compressed wrappers -----------------------------------------------------------------


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
def test_v0_wrapper_absolute_offsets(codec):
    inner = [msg(10 + i, b"v%d" % i, b"k%d" % i, magic=0) for i in range(3)]
    data = wrapper(codec, inner, offset=12, magic=0)
    (batch,) = read_legacy_message_set(data)
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (10, 12, 3)
    assert batch.compression == codec and batch.magic == 0 and batch.size == len(data)
    assert batch.crc == struct.unpack_from(">I", data, 12)[0]
    assert records_of([batch]) == [(10 + i, -1, -1, b"k%d" % i, b"v%d" % i) for i in range(3)]


def test_v0_lz4_wrapper_with_correct_header_checksum_too():
    inner = [msg(4, b"x", magic=0)]
    payload = compress(LZ4, b"".join(inner))  # 0.10+ style HC in a magic-0 wrapper
    (batch,) = read_legacy_message_set(msg(4, payload, magic=0, attrs=LZ4))
    assert records_of([batch]) == [(4, -1, -1, None, b"x")]


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
def test_v1_wrapper_relative_offsets(codec):
    inner = [msg(i, b"v%d" % i, magic=1, ts=1000 + i) for i in range(3)]
    data = wrapper(codec, inner, offset=102, magic=1, ts=1002)
    (batch,) = read_legacy_message_set(data)
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (100, 102, 3)
    assert (batch.timestamp_type, batch.base_timestamp, batch.max_timestamp) == (0, 1000, 1002)
    assert records_of([batch]) == [(100 + i, 1000 + i, 0, None, b"v%d" % i) for i in range(3)]


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
def test_v1_wrapper_offset_zero_uses_inner_offsets(codec):
    inner = [msg(i, b"v%d" % i, magic=1, ts=5) for i in range(4)]
    (batch,) = read_legacy_message_set(wrapper(codec, inner, offset=0, magic=1, ts=5))
    assert [r.offset for r in batch] == [0, 1, 2, 3]
    assert (batch.base_offset, batch.last_offset) == (0, 3)


def test_v1_wrapper_non_contiguous_relative_offsets():
    # Compacted topics leave gaps; absolute = wrapper - last_relative + relative.
    inner = [msg(o, b"v", magic=1, ts=1) for o in (0, 2, 7)]
    (batch,) = read_legacy_message_set(wrapper(GZIP, inner, offset=50, magic=1, ts=1))
    assert [r.offset for r in batch] == [43, 45, 50]


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
def test_v1_log_append_time_wrapper_overrides_inner(codec):
    inner = [msg(i, b"v", magic=1, ts=1000 + i) for i in range(3)]
    data = wrapper(codec, inner, offset=2, magic=1, ts=777, extra_attrs=LOG_APPEND)
    (batch,) = read_legacy_message_set(data)
    assert batch.timestamp_type == 1 and batch.max_timestamp == 777
    assert [(r.timestamp, r.timestamp_type) for r in batch] == [(777, 1)] * 3


def test_mixed_set_of_plain_and_wrapper_entries():
    data = (msg(0, b"a") + wrapper(GZIP, [msg(0, b"b"), msg(1, b"c")], offset=2)
            + msg(3, b"d"))
    batches = read_legacy_message_set(data)
    assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 0), (1, 2), (3, 3)]
    assert [r.value for b in batches for r in b] == [b"a", b"b", b"c", b"d"]


# --- truncation and positions ------------------------------------------------------------


def test_truncated_final_entry_ignored_at_every_cut():
    first = msg(0, b"a" * 10) + wrapper(SNAPPY, [msg(0, b"x"), msg(1, b"y")], offset=2)
    last = msg(3, b"z" * 30, b"key")
    for cut in range(len(last)):
        data = first + last[:cut]
        batches = read_legacy_message_set(data)
        assert [b.last_offset for b in batches] == [0, 2]
        assert read_legacy_entry(data, len(first), len(data), True) == (None, len(first))


def test_read_legacy_entry_respects_pos_and_end():
    entry = msg(9, b"value")
    data = b"\xee" * 7 + entry + entry
    batch, nxt = read_legacy_entry(data, 7, len(data), True)
    assert batch.base_offset == 9 and nxt == 7 + len(entry)
    # end cuts the second entry short: reported as truncated, not read past end
    assert read_legacy_entry(data, nxt, len(data) - 1, True) == (None, nxt)
    batch, _ = read_legacy_entry(memoryview(data), nxt, len(data), True)
    assert batch.base_offset == 9
    assert read_legacy_entry(bytearray(data), 7, 7, True) == (None, 7)
    for pos, end in ((-1, 5), (0, len(data) + 1), (10, 5)):
        with pytest.raises(ValueError):
            read_legacy_entry(data, pos, end, True)


# --- kafka-python as an independent peer -------------------------------------------------

PEER_CASES = [(m, c) for m in (0, 1) for c in (0, GZIP, SNAPPY, LZ4)
              if not (m == 0 and c == LZ4)]  # kafka-python needs `xxhash` for that one


def _peer_build(magic, codec, msgs):
    b = LegacyRecordBatchBuilder(magic, codec, 1 << 24)
    for off, ts, key, value in msgs:
        assert b.append(off, ts, key, value) is not None
    return bytes(b.build())


def _peer_read(data):
    out, mr = [], MemoryRecords(data)
    while mr.has_next():
        batch = mr.next_batch()
        # kafka-python reports "no timestamp" as None, we as -1 (like the Java client)
        out.extend((r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value)
                   for r in batch)
    return out


@pytest.mark.parametrize("magic,codec", PEER_CASES)
def test_cross_check_kafka_python_builder(magic, codec):
    msgs = [(i, 1_600_000_000_000 + i * 3, None if i % 3 == 0 else b"key-%d" % i,
             None if i % 5 == 4 else b"value-%d" % i * (i % 7)) for i in range(50)]
    data = _peer_build(magic, codec, msgs)
    batches = read_legacy_message_set(data)
    got = [(r.offset, r.timestamp, r.key, r.value) for b in batches for r in b]
    assert got == _peer_read(data)
    expect_ts = (lambda t: -1) if magic == 0 else (lambda t: t)
    assert got == [(o, expect_ts(t), k, v) for o, t, k, v in msgs]
    assert len(batches) == (1 if codec else 50)
    assert sum(b.size for b in batches) == len(data)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY])
def test_peer_reads_our_golden_wrappers(codec):
    # kafka-python applies the same relative-offset rule to a wrapper at offset 102.
    inner = [msg(i, b"v%d" % i, magic=1, ts=1000 + i) for i in range(3)]
    data = wrapper(codec, inner, offset=102, magic=1, ts=1002)
    assert _peer_read(data) == [(100 + i, 1000 + i, None, b"v%d" % i) for i in range(3)]


@settings(max_examples=40, deadline=None)
@given(
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from([0, GZIP, SNAPPY]),
    values=st.lists(st.tuples(st.none() | st.binary(max_size=50),
                              st.none() | st.binary(max_size=300),
                              st.integers(0, 2**40)), min_size=1, max_size=20),
)
def test_cross_check_property(magic, codec, values):
    msgs = [(i, ts, k, v) for i, (k, v, ts) in enumerate(values)]
    data = _peer_build(magic, codec, msgs)
    got = [(r.offset, r.timestamp, r.key, r.value) for b in read_legacy_message_set(data)
           for r in b]
    assert got == [(o, t if magic else -1, k, v) for o, t, k, v in msgs]


# --- hostile input -----------------------------------------------------------------------


def _resign(entry):
    """Recompute an entry's CRC after a deliberate edit."""
    e = bytearray(entry)
    struct.pack_into(">I", e, 12, zlib.crc32(bytes(e[16:])))
    return bytes(e)


@pytest.mark.parametrize("magic", [2, 3, 255])
def test_wrong_magic(magic):
    e = bytearray(msg(0, b"v"))
    e[16] = magic
    with pytest.raises(UnsupportedMagicError):
        read_legacy_message_set(_resign(e))


def test_bad_crc_and_check_crc_off():
    e = bytearray(msg(0, b"value"))
    e[-1] ^= 1
    with pytest.raises(CrcMismatchError):
        read_legacy_message_set(bytes(e))
    (batch,) = read_legacy_message_set(bytes(e), check_crc=False)
    assert next(iter(batch)).value == b"valud"


def test_bad_crc_of_inner_message():
    inner = bytearray(msg(0, b"value"))
    inner[-1] ^= 1
    data = wrapper(GZIP, [bytes(inner)], offset=0)
    with pytest.raises(CrcMismatchError):
        read_legacy_message_set(data)
    assert records_of(read_legacy_message_set(data, check_crc=False))[0][4] == b"valud"


def test_large_message_crc_checked():
    e = bytearray(msg(0, bytes(range(256)) * 100))  # long enough for the nogil path
    read_legacy_message_set(bytes(e))
    e[5000] ^= 0x10
    with pytest.raises(CrcMismatchError):
        read_legacy_message_set(bytes(e))


@pytest.mark.parametrize("size", [-1, -2**31, 0, 5, 13])
def test_message_size_below_minimum(size):
    e = bytearray(msg(0, b"v", magic=0))
    struct.pack_into(">i", e, 8, size)
    with pytest.raises(CorruptRecordError):
        read_legacy_message_set(bytes(e))


def test_v1_size_below_v1_minimum():
    e = bytearray(msg(0, b"", magic=1))[:12 + 20]
    struct.pack_into(">i", e, 8, 20)
    with pytest.raises(CorruptRecordError):
        read_legacy_message_set(_resign(e))


def test_huge_message_size_is_truncation_not_allocation():
    e = bytearray(msg(0, b"v"))
    struct.pack_into(">i", e, 8, 2**31 - 1)
    assert read_legacy_message_set(bytes(e)) == []


@pytest.mark.parametrize("field,value", [
    ("key", -2), ("key", -2**31), ("key", 2**31 - 1), ("key", 30),
    ("value", -2), ("value", 2**31 - 1), ("value", 6),
])
def test_bad_key_value_lengths(field, value):
    e = bytearray(msg(0, b"abcde", b"key", magic=1))
    key_len_at = 12 + 4 + 2 + 8
    at = key_len_at if field == "key" else key_len_at + 4 + 3
    struct.pack_into(">i", e, at, value)
    with pytest.raises(CorruptRecordError):
        read_legacy_message_set(_resign(e))


def test_bytes_after_value_rejected():
    e = bytearray(msg(0, b"abc", magic=0))
    struct.pack_into(">i", e, 12 + 4 + 2 + 4, 2)  # value length 2 of 3 bytes present
    with pytest.raises(CorruptRecordError, match="unaccounted"):
        read_legacy_message_set(_resign(e))


def test_nested_wrapper_rejected():
    inner_wrapper = wrapper(GZIP, [msg(0, b"x")], offset=0)
    with pytest.raises(CorruptRecordError, match="compressed inner"):
        read_legacy_message_set(wrapper(SNAPPY, [inner_wrapper], offset=0))


def test_empty_and_null_wrapper_rejected():
    with pytest.raises(CorruptRecordError, match="no message"):
        read_legacy_message_set(wrapper(GZIP, [], offset=0))
    with pytest.raises(CorruptRecordError, match="null value"):
        read_legacy_message_set(msg(0, None, attrs=GZIP))


@pytest.mark.parametrize("codec", [ZSTD, 5, 7])
def test_zstd_and_unknown_codecs_rejected(codec):
    data = msg(0, compress(ZSTD, msg(0, b"x")), attrs=codec)
    with pytest.raises(UnsupportedCompressionError):
        read_legacy_message_set(data)


def test_wrapper_bomb():
    inner = msg(0, bytes(8 * 1024 * 1024))
    data = wrapper(GZIP, [inner], offset=0)
    assert len(data) < 64 * 1024
    with pytest.raises(DecompressionLimitError):
        read_legacy_entry(data, 0, len(data), True, 1024 * 1024)
    batch, _ = read_legacy_entry(data, 0, len(data), True, 9 * 1024 * 1024)
    assert len(next(iter(batch)).value) == 8 * 1024 * 1024


def test_corrupt_compressed_value():
    data = bytearray(wrapper(GZIP, [msg(0, b"x" * 100)], offset=0))
    data[-8] ^= 0xFF
    with pytest.raises(DecompressionError) as info:
        read_legacy_message_set(_resign(data))
    assert isinstance(info.value, CorruptRecordError)


def test_inner_magic_mismatch_and_truncated_inner():
    with pytest.raises(CorruptRecordError, match="magic"):
        read_legacy_message_set(wrapper(GZIP, [msg(0, b"x", magic=0)], offset=0, magic=1))
    with pytest.raises(CorruptRecordError, match="truncated inner"):
        read_legacy_message_set(wrapper(GZIP, [msg(0, b"x"), msg(1, b"y")[:-3]], offset=1))


def test_wrapper_offset_below_last_inner_offset():
    inner = [msg(i, b"x") for i in range(5)]
    with pytest.raises(CorruptRecordError, match="below its last inner"):
        read_legacy_message_set(wrapper(GZIP, inner, offset=3))


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_mutated_sets_raise_only_codec_errors(data):
    base = bytearray(msg(0, b"a" * 20, b"k") + wrapper(
        data.draw(st.sampled_from([GZIP, SNAPPY, LZ4])),
        [msg(i, b"v%d" % i, ts=i) for i in range(4)], offset=4) + msg(5, None, magic=0))
    for _ in range(data.draw(st.integers(1, 6))):
        base[data.draw(st.integers(0, len(base) - 1))] = data.draw(st.integers(0, 255))
    check_crc = data.draw(st.booleans())
    try:
        batches = read_legacy_message_set(bytes(base), check_crc=check_crc)
    except KafkaProtocolError:
        return
    total = sum(b.size for b in batches)
    assert total <= len(base)
    for b in batches:
        assert b.records_count == len(list(b)) >= 1


# --- the records package's dispatcher uses this reader -----------------------------------


def test_enum_types_shared_with_v2_batches():
    from kafka_proto.records import Compression, TimestampType

    (batch,) = read_legacy_message_set(wrapper(SNAPPY, [msg(0, b"x", ts=3)], offset=0, ts=3))
    assert type(batch.compression) is Compression and batch.compression is Compression.SNAPPY
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert next(iter(batch)).timestamp_type is TimestampType.CREATE_TIME
    (batch,) = read_legacy_message_set(msg(0, b"x", attrs=LOG_APPEND, ts=3))
    assert next(iter(batch)).timestamp_type is TimestampType.LOG_APPEND_TIME
    (batch,) = read_legacy_message_set(msg(0, b"x", magic=0))
    assert batch.timestamp_type == -1 and batch.compression is Compression.NONE


def test_read_batches_dispatches_legacy_entries():
    from kafka_proto.records import RecordBatchBuilder, read_batches

    legacy = _peer_build(1, GZIP, [(i, 10 + i, None, b"v%d" % i) for i in range(3)])
    v2 = RecordBatchBuilder()
    v2.append(b"new", timestamp=99)
    data = legacy + msg(3, b"plain", magic=0) + v2.build(base_offset=4) + legacy[:-1]
    batches = list(read_batches(data))
    assert [(b.magic, b.base_offset, b.last_offset) for b in batches] == \
        [(1, 0, 2), (0, 3, 3), (2, 4, 4)]
    assert [r.value for b in batches for r in b] == [b"v0", b"v1", b"v2", b"plain", b"new"]


def test_batch_extras_match_v2_api():
    data = msg(0, b"a", magic=0) + wrapper(SNAPPY, [msg(0, b"x"), msg(1, b"y")], offset=9)
    plain, wrapped = read_legacy_message_set(memoryview(data))
    assert bytes(plain.raw) == data[:plain.size] and bytes(wrapped.raw) == data[plain.size:]
    assert (wrapped.next_offset, wrapped.last_offset_delta, wrapped.last_sequence) == (10, 1, -1)
    assert wrapped.attributes == SNAPPY and plain.attributes == 0
    assert plain.validate_crc() and wrapped.validate_crc()
    assert plain.control_record() is None
    assert wrapped.records_list() == list(wrapped)
    assert [r.checksum for r in wrapped] == [zlib.crc32(msg(0, b"x")[16:]),
                                             zlib.crc32(msg(1, b"y")[16:])]
    assert next(iter(plain)).checksum == plain.crc
    bad = bytearray(data)
    bad[-1] ^= 1  # inside the compressed value of the wrapper
    _, wrapped_bad = read_legacy_message_set(bytes(bad), check_crc=False)
    assert not wrapped_bad.validate_crc()
