"""A broker's view of stored v2 batches: read_batch_header / iter_batch_headers (the
61-byte header without the records), stamp_batch (base offset and partition leader epoch
in place, outside the CRC; with a log-append time, also the timestamp type, max timestamp
and CRC) and increment_sequence."""
from __future__ import annotations

import struct

import pytest

from kafka_proto.errors import (
    InvalidLengthError,
    TruncatedDataError,
    UnsupportedCompressionError,
    UnsupportedMagicError,
)
from kafka_proto.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Compression,
    ControlRecordType,
    RecordBatchBuilder,
    TimestampType,
    build_control_batch,
    increment_sequence,
    iter_batch_headers,
    read_batch_header,
    read_batches,
    stamp_batch,
)

FIELDS = ("base_offset", "partition_leader_epoch", "crc", "attributes", "last_offset_delta",
          "base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence",
          "records_count", "last_offset", "next_offset", "compression", "timestamp_type",
          "is_transactional", "is_control", "delete_horizon", "last_sequence", "size", "magic")


def batches():
    """Batches of every kind a broker stores, with the base offsets they were built at."""
    out = []
    plain = RecordBatchBuilder()
    for i in range(5):
        plain.append(b"value-%d" % i, key=b"k%d" % i, timestamp=1_700_000_000_000 + i * 7)
    out.append(plain.build(10))
    idem = RecordBatchBuilder(compression=Compression.GZIP, producer_id=77, producer_epoch=3,
                              base_sequence=2**31 - 2, partition_leader_epoch=9)
    for i in range(4):
        idem.append(b"x" * 100, timestamp=1_700_000_000_000)
    out.append(idem.build(1000))
    txn = RecordBatchBuilder(producer_id=5, producer_epoch=0, base_sequence=0,
                             transactional=True, timestamp_type=TimestampType.LOG_APPEND_TIME)
    txn.append(b"t", timestamp=5)
    out.append(txn.build(2**40))
    out.append(build_control_batch(ControlRecordType.COMMIT, producer_id=5, producer_epoch=0,
                                   base_offset=2**40 + 1, coordinator_epoch=2,
                                   timestamp=1_700_000_000_123))
    return out


def test_header_matches_the_full_reader_for_every_kind_of_batch():
    for data in batches():
        (full,) = read_batches(data)
        header = read_batch_header(data)
        assert isinstance(header, BatchHeader) and header.position == 0
        for name in FIELDS:
            assert getattr(header, name) == getattr(full, name), name
        assert header.batch_length == len(data) - 12 and header.end == len(data)


def test_header_fields_at_their_byte_positions():
    b = RecordBatchBuilder(producer_id=0x0102030405060708, producer_epoch=0x0A0B,
                           base_sequence=0x0C0D0E0F, partition_leader_epoch=0x11121314)
    b.append(b"v", timestamp=0x2122232425262728)
    data = b.build(0x3132333435363738)
    h = read_batch_header(data)
    (base, length, ple, magic, crc, attrs, delta, base_ts, max_ts, pid, epoch, seq,
     count) = struct.unpack_from(">qiibIhiqqqhii", data)
    assert (h.base_offset, h.batch_length, h.partition_leader_epoch, h.magic, h.crc,
            h.attributes, h.last_offset_delta, h.base_timestamp, h.max_timestamp,
            h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == \
        (base, length, ple, magic, crc, attrs, delta, base_ts, max_ts, pid, epoch, seq, count)
    assert BATCH_HEADER_SIZE == 61 == struct.calcsize(">qiibIhiqqqhii")


def test_iter_batch_headers_walks_back_to_back_batches_and_stops_at_a_torn_tail():
    parts = batches()
    data = b"".join(parts)
    headers = list(iter_batch_headers(data))
    assert [h.position for h in headers] == [sum(map(len, parts[:i])) for i in range(len(parts))]
    assert [h.base_offset for h in headers] == [b.base_offset for b in read_batches(data)]
    assert headers[-1].end == len(data)
    for cut in range(len(data) - len(parts[-1]), len(data)):
        assert len(list(iter_batch_headers(data[:cut]))) == len(parts) - 1
    # A range: the middle two batches only.
    start, end = len(parts[0]), len(parts[0]) + len(parts[1]) + len(parts[2])
    assert [h.position for h in iter_batch_headers(data, start, end)] == \
        [start, start + len(parts[1])]
    assert list(iter_batch_headers(b"")) == []


def test_iter_batch_headers_stops_at_what_is_not_a_v2_batch():
    good = batches()[0]
    legacy_magic = bytearray(good)
    legacy_magic[16] = 1
    assert list(iter_batch_headers(good + bytes(legacy_magic))) == [read_batch_header(good)]
    tiny_length = bytearray(good)
    struct.pack_into(">i", tiny_length, 8, 10)
    assert [h.position for h in iter_batch_headers(good + bytes(tiny_length) + good)] == [0]
    assert list(iter_batch_headers(b"\x00" * 200)) == []  # magic 0: stop


def test_stamp_batch_rewrites_offset_and_epoch_and_keeps_the_crc_valid():
    parts = batches()
    data = bytearray(b"".join(parts))
    second = len(parts[0])
    before = read_batch_header(data, second)
    stamp_batch(data, second, 123_456_789_012, 42)
    after = read_batch_header(data, second)
    assert (after.base_offset, after.partition_leader_epoch) == (123_456_789_012, 42)
    assert after.crc == before.crc and after.producer_id == before.producer_id
    batch = list(read_batches(bytes(data), check_crc=True))[1]
    assert batch.validate_crc()
    assert [r.offset for r in batch] == [123_456_789_012 + i for i in range(4)]
    assert bytes(data[:second]) == parts[0]  # the batch before is untouched


def test_stamp_batch_with_a_log_append_time_retypes_the_batch_and_checksums_it_again():
    """A LogAppendTime topic's leader: the timestamp type and max timestamp change (both
    inside the CRC), every record then reports the append time, and the CRC is valid
    again; the other attributes (compression, transactional) and the records stay."""
    parts = batches()
    data = bytearray(b"".join(parts))
    second = len(parts[0])
    before = read_batch_header(data, second)
    assert before.timestamp_type == TimestampType.CREATE_TIME
    stamp_batch(data, second, 77, 3, 1_700_000_000_123)
    after = read_batch_header(data, second)
    assert after.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert after.max_timestamp == 1_700_000_000_123 and after.crc != before.crc
    assert (after.base_offset, after.partition_leader_epoch) == (77, 3)
    assert (after.compression, after.is_transactional, after.base_timestamp) == \
        (before.compression, before.is_transactional, before.base_timestamp)
    batch = list(read_batches(bytes(data), check_crc=True))[1]
    assert batch.validate_crc()
    assert [(r.timestamp, r.timestamp_type) for r in batch] == \
        [(1_700_000_000_123, TimestampType.LOG_APPEND_TIME)] * before.records_count
    assert bytes(data[:second]) == parts[0]
    # The CRC covers the whole batch: a buffer holding only its header is refused, unchanged.
    header_only = bytearray(parts[0][:BATCH_HEADER_SIZE])
    with pytest.raises(TruncatedDataError, match="CRC"):
        stamp_batch(header_only, 0, 1, 1, 5)
    assert header_only == parts[0][:BATCH_HEADER_SIZE]


def test_at_moves_a_header_to_another_position():
    h = read_batch_header(batches()[0])
    moved = h.at(500)
    assert moved.position == 500 and moved.end == 500 + h.size
    assert moved != h and moved.at(0) == h
    assert all(getattr(moved, n) == getattr(h, n) for n in FIELDS)
    with pytest.raises(TypeError):
        BatchHeader()
    with pytest.raises(TypeError):
        hash(h)


def test_bad_input_gets_a_clear_error():
    data = batches()[0]
    with pytest.raises(TruncatedDataError, match="61 needed"):
        read_batch_header(data[:60])
    with pytest.raises(TruncatedDataError):
        read_batch_header(data, len(data) - 10)
    with pytest.raises(ValueError):
        read_batch_header(data, len(data) + 1)
    legacy = bytearray(data)
    legacy[16] = 1
    with pytest.raises(UnsupportedMagicError, match="magic 1"):
        read_batch_header(legacy)
    short = bytearray(data)
    struct.pack_into(">i", short, 8, 48)
    with pytest.raises(InvalidLengthError, match="batchLength 48"):
        read_batch_header(short)
    codec = bytearray(data)
    codec[22] |= 0x07
    with pytest.raises(UnsupportedCompressionError):
        read_batch_header(codec).compression
    with pytest.raises((TypeError, BufferError)):
        stamp_batch(data, 0, 1, 1)  # bytes are read-only
    with pytest.raises(TruncatedDataError):
        stamp_batch(bytearray(data[:60]), 0, 1, 1)
    with pytest.raises(UnsupportedMagicError):
        stamp_batch(legacy, 0, 1, 1)
    assert legacy[:8] == data[:8]  # refused: nothing written


def test_increment_sequence_wraps_like_kafka():
    assert increment_sequence(0, 1) == 1
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 2, 5) == 3
    assert increment_sequence(2**31 - 1, 2**31 - 1) == 2**31 - 2
    h = read_batch_header(batches()[1])  # base sequence 2**31-2, 4 records
    assert h.last_sequence == increment_sequence(h.base_sequence, h.last_offset_delta) == 1
    with pytest.raises(ValueError):
        increment_sequence(-1, 1)
    with pytest.raises(ValueError):
        increment_sequence(0, -1)


def test_stamp_batch_stub_declares_every_parameter_the_function_takes():
    """The .pyi is what a type checker sees of the Cython function: a parameter missing
    there (``log_append_time``) refuses a call the function takes."""
    import ast
    import pathlib

    import kafka_proto.records._v2 as v2

    tree = ast.parse(pathlib.Path(v2.__file__).with_name("_v2.pyi").read_text())
    stub = next(n for n in tree.body if isinstance(n, ast.FunctionDef)
                and n.name == "stamp_batch")
    declared = [a.arg for a in stub.args.args]
    assert declared == ["buffer", "position", "base_offset", "partition_leader_epoch",
                        "log_append_time"]
    # every declared name is one the function takes by keyword, with the stub's meaning
    data = bytearray(batches()[0])
    stamp_batch(**dict(zip(declared, (data, 0, 5, 2, 1_700_000_000_000))))
    header = read_batch_header(data)
    assert (header.base_offset, header.partition_leader_epoch, header.max_timestamp,
            header.timestamp_type) == (5, 2, 1_700_000_000_000, TimestampType.LOG_APPEND_TIME)
