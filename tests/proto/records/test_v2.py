"""RecordBatch v2: golden bytes, round trips, header fields, peers (aiokafka, kafka-python)."""
from __future__ import annotations

import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import v2_reference as ref
from kafka_proto.errors import ProtocolEncodeError, UnsupportedCompressionError
from kafka_proto.records import (
    Compression,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    read_batches,
)

try:
    import kafka_proto.compression  # noqa: F401

    CODECS = list(Compression)
except ImportError:  # pragma: no cover - compression.py not there yet
    CODECS = [Compression.NONE]


def one_batch(data, **kw) -> RecordBatch:
    batches = list(read_batches(data, **kw))
    assert len(batches) == 1
    return batches[0]


# --------------------------------------------------------------------------- golden bytes

# One record: key b"k", value b"hello", one header ("h", b"1"), timestamp 1000 = base,
# base offset 5, producer id 7, epoch 1, base sequence 3, partition leader epoch 2.
GOLDEN_RECORD = bytes([
    0x20,                          # record length 16 (zigzag 32)
    0x00,                          # attributes
    0x00,                          # timestampDelta 0
    0x00,                          # offsetDelta 0
    0x02, 0x6B,                    # key length 1, "k"
    0x0A, 0x68, 0x65, 0x6C, 0x6C, 0x6F,  # value length 5, "hello"
    0x02,                          # 1 header
    0x02, 0x68,                    # header key length 1, "h"
    0x02, 0x31,                    # header value length 1, "1"
])
GOLDEN_AFTER_CRC = bytes.fromhex(
    "0000"              # attributes
    "00000000"          # lastOffsetDelta 0
    "00000000000003e8"  # baseTimestamp 1000
    "00000000000003e8"  # maxTimestamp 1000
    "0000000000000007"  # producerId 7
    "0001"              # producerEpoch 1
    "00000003"          # baseSequence 3
    "00000001"          # recordsCount 1
) + GOLDEN_RECORD


def golden_batch() -> bytes:
    import crc32c

    crc = crc32c.crc32c(GOLDEN_AFTER_CRC)
    return (bytes.fromhex("0000000000000005")                       # baseOffset 5
            + struct.pack(">i", 9 + len(GOLDEN_AFTER_CRC))          # batchLength
            + bytes.fromhex("00000002")                             # partitionLeaderEpoch 2
            + b"\x02"                                               # magic
            + struct.pack(">I", crc)
            + GOLDEN_AFTER_CRC)


def test_builder_produces_golden_bytes():
    b = RecordBatchBuilder(producer_id=7, producer_epoch=1, base_sequence=3,
                           partition_leader_epoch=2)
    b.append(b"hello", key=b"k", timestamp=1000, headers=[("h", b"1")])
    assert len(b) == 1
    assert b.size_in_bytes == len(golden_batch())
    assert b.build(base_offset=5) == golden_batch()


def test_reader_reads_golden_bytes():
    batch = one_batch(golden_batch())
    assert (batch.base_offset, batch.last_offset, batch.records_count, batch.magic) == (5, 5, 1, 2)
    assert batch.partition_leader_epoch == 2
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 1, 3)
    assert (batch.base_timestamp, batch.max_timestamp) == (1000, 1000)
    assert batch.compression is Compression.NONE
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert not batch.is_transactional and not batch.is_control
    assert batch.delete_horizon is None
    assert batch.size == len(golden_batch())
    assert batch.crc == struct.unpack(">I", golden_batch()[17:21])[0]
    (rec,) = list(batch)
    assert isinstance(rec, Record)
    assert (rec.offset, rec.timestamp, rec.key, rec.value) == (5, 1000, b"k", b"hello")
    assert rec.headers == [("h", b"1")]
    assert rec.timestamp_type is TimestampType.CREATE_TIME


def test_reference_encoder_agrees_with_golden():
    # The helper used by the hostile tests builds the same bytes as the hand-written ones.
    data = ref.batch(ref.record(0, 0, b"k", b"hello", [("h", b"1")]), 1, base_offset=5, ple=2,
                     base_ts=1000, max_ts=1000, producer_id=7, producer_epoch=1, base_sequence=3)
    assert data == golden_batch()


# --------------------------------------------------------------------------- builder basics

def test_empty_builder_builds_empty_batch():
    b = RecordBatchBuilder()
    assert len(b) == 0 and b.size_in_bytes == 61
    data = b.build()
    assert len(data) == 61
    batch = one_batch(data)
    assert batch.records_count == 0 and list(batch) == []
    assert batch.base_timestamp == -1 and batch.max_timestamp == -1


def test_offsets_timestamps_and_deltas():
    b = RecordBatchBuilder()
    for i, ts in enumerate([5000, 4000, 9000, 7000]):
        b.append(b"v%d" % i, timestamp=ts)
    batch = one_batch(b.build(base_offset=100))
    assert batch.base_timestamp == 5000 and batch.max_timestamp == 9000
    assert [(r.offset, r.timestamp) for r in batch] == [
        (100, 5000), (101, 4000), (102, 9000), (103, 7000)]
    assert batch.last_offset == 103 and batch.next_offset == 104


def test_default_timestamp_is_now():
    before = int(time.time() * 1000)
    b = RecordBatchBuilder()
    b.append(b"x")
    b.append_many([b"y", b"z"])
    after = int(time.time() * 1000)
    for rec in one_batch(b.build()):
        assert before <= rec.timestamp <= after


def test_bytes_like_inputs_and_nulls():
    b = RecordBatchBuilder()
    b.append(bytearray(b"ba"), key=memoryview(b"mv"))
    b.append(None, key=None)
    b.append(b"", key=b"")
    b.append(memoryview(b"xyz")[1:], key=bytearray())
    recs = list(one_batch(b.build()))
    assert [(r.key, r.value) for r in recs] == [
        (b"mv", b"ba"), (None, None), (b"", b""), (b"", b"yz")]
    assert all(type(r.value) is bytes for r in recs if r.value is not None)


@pytest.mark.parametrize("bad", ["text", 12, 1.5, object()])
def test_append_rejects_non_bytes(bad):
    b = RecordBatchBuilder()
    with pytest.raises(TypeError):
        b.append(bad)
    with pytest.raises(TypeError):
        b.append(b"v", key=bad)
    assert len(b) == 0 and b.size_in_bytes == 61


def test_headers_variants():
    headers = [("", b""), ("ключ", None), ("k", b"\x00" * 300), ("k", b"dup")]
    b = RecordBatchBuilder()
    b.append(b"v", headers=headers)
    b.append(b"w", headers=[(b"raw", bytearray(b"x"))])
    recs = list(one_batch(b.build()))
    assert recs[0].headers == headers
    assert recs[1].headers == [("raw", b"x")]
    with pytest.raises(TypeError):
        b.append(b"v", headers=[("k", "str value")])
    with pytest.raises(TypeError):
        b.append(b"v", headers=[(1, b"x")])


def test_append_many_matches_append():
    values = [b"a", None, b"ccc"]
    keys = [b"1", b"2", None]
    b1 = RecordBatchBuilder()
    b1.append_many(values, keys, timestamp=42)
    b2 = RecordBatchBuilder()
    for v, k in zip(values, keys):
        b2.append(v, k, 42)
    assert b1.build() == b2.build()
    b3 = RecordBatchBuilder()
    b3.append_many(iter(values), timestamp=1)
    assert [r.value for r in one_batch(b3.build())] == values
    with pytest.raises(ValueError):
        RecordBatchBuilder().append_many([b"a"], [b"k", b"l"])


def test_size_in_bytes_tracks_the_encoding_and_upper_bound():
    b = RecordBatchBuilder()
    for i in range(50):
        before = b.size_in_bytes
        value, key, headers = b"v" * i, b"k" * (i % 7), [("h", b"x" * i)] if i % 3 else None
        b.append(value, key, 10_000 + i * 1000, headers)
        assert b.size_in_bytes - before <= RecordBatchBuilder.record_size_upper_bound(
            value, key, headers)
    assert b.size_in_bytes == len(b.build())


def test_buffer_growth_large_values():
    b = RecordBatchBuilder(initial_capacity=16)
    big = bytes(range(256)) * 4096  # 1 MiB
    b.append(big, key=b"k")
    b.append(b"small")
    recs = list(one_batch(b.build()))
    assert recs[0].value == big and recs[1].value == b"small"


def test_builder_reusable_after_build():
    b = RecordBatchBuilder()
    b.append(b"a", timestamp=1)
    first = b.build()
    b.append(b"b", timestamp=2)
    second = b.build(base_offset=10)
    assert [r.value for r in one_batch(first)] == [b"a"]
    assert [(r.offset, r.value) for r in one_batch(second)] == [(10, b"a"), (11, b"b")]


def test_producer_state_is_writable_until_build():
    b = RecordBatchBuilder(producer_id=1, producer_epoch=0, base_sequence=0)
    b.append(b"x")
    b.producer_id, b.producer_epoch, b.base_sequence = 99, 3, 77
    b.partition_leader_epoch = 12
    batch = one_batch(b.build())
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (99, 3, 77)
    assert batch.partition_leader_epoch == 12


def test_builder_rejects_bad_arguments():
    with pytest.raises(UnsupportedCompressionError):
        RecordBatchBuilder(compression=5)
    with pytest.raises(ValueError):
        RecordBatchBuilder(timestamp_type=2)
    with pytest.raises(OverflowError):
        RecordBatchBuilder(producer_epoch=1 << 15)
    b = RecordBatchBuilder()
    with pytest.raises(OverflowError):
        b.append(b"v", timestamp=1 << 63)
    assert issubclass(ProtocolEncodeError, ValueError)


def test_flags_and_timestamp_type():
    b = RecordBatchBuilder(transactional=True, timestamp_type=TimestampType.LOG_APPEND_TIME,
                           producer_id=5, producer_epoch=0, base_sequence=0)
    b.append(b"a", timestamp=10)
    b.append(b"b", timestamp=30)
    batch = one_batch(b.build())
    assert batch.is_transactional and not batch.is_control
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    # LogAppendTime: every record reports the batch's max timestamp.
    assert [r.timestamp for r in batch] == [30, 30]
    assert all(r.timestamp_type is TimestampType.LOG_APPEND_TIME for r in batch)
    assert batch.attributes == 0x08 | 0x10


def test_log_append_time_set_by_broker_overrides_deltas():
    # A broker stamps maxTimestamp and the LogAppendTime bit; record deltas keep the old values.
    recs = ref.record(0, 0, None, b"a") + ref.record(1, 5, None, b"b")
    data = ref.batch(recs, 2, attributes=0x08, base_ts=100, max_ts=777)
    assert [r.timestamp for r in one_batch(data)] == [777, 777]


def test_delete_horizon():
    recs = ref.record(0, -50, b"k", None) + ref.record(3, 25, b"j", b"v")
    data = ref.batch(recs, 2, attributes=0x40, last_offset_delta=3, base_ts=2_000_000,
                     max_ts=2_000_025)
    batch = one_batch(data)
    assert batch.delete_horizon == 2_000_000 and batch.base_timestamp == 2_000_000
    # base + delta still gives each record's own timestamp; compaction left an offset gap.
    assert [(r.offset, r.timestamp, r.key, r.value) for r in batch] == [
        (0, 1_999_950, b"k", None), (3, 2_000_025, b"j", b"v")]
    assert batch.last_offset == 3 and batch.records_count == 2


def test_compacted_empty_batch_keeps_offsets_and_sequences():
    data = ref.batch(b"", 0, base_offset=40, last_offset_delta=9, base_ts=-1, max_ts=12345,
                     producer_id=8, producer_epoch=2, base_sequence=100)
    batch = one_batch(data)
    assert list(batch) == [] and batch.records_count == 0
    assert (batch.base_offset, batch.last_offset, batch.next_offset) == (40, 49, 50)
    assert batch.max_timestamp == 12345
    assert (batch.base_sequence, batch.last_sequence) == (100, 109)


def test_sequence_wraps():
    data = ref.batch(ref.record(0, 0, None, b"a") + ref.record(1, 0, None, b"b")
                     + ref.record(2, 0, None, b"c"), 3,
                     producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    batch = one_batch(data)
    assert batch.base_sequence == 2**31 - 2
    assert batch.last_sequence == 0  # 2**31-2, 2**31-1, 0
    assert one_batch(ref.batch(ref.record(0, 0, None, b"a"), 1)).last_sequence == -1


def test_several_batches_and_truncated_tail():
    parts = []
    for i in range(3):
        b = RecordBatchBuilder()
        b.append(b"value-%d" % i, timestamp=i)
        parts.append(b.build(base_offset=i * 10))
    data = b"".join(parts)
    assert [b.base_offset for b in read_batches(data)] == [0, 10, 20]
    # A fetch response may end inside a batch: every cut keeps the complete batches only.
    for cut in range(len(data)):
        got = [b.base_offset for b in read_batches(data[:cut])]
        complete = sum(1 for k in range(1, 4) if len(b"".join(parts[:k])) <= cut)
        assert got == [0, 10, 20][:complete]


def test_reader_accepts_any_bytes_like_and_offsets_in_memoryview():
    b = RecordBatchBuilder()
    b.append(b"v", key=b"k", timestamp=7)
    data = b.build()
    for buf in (bytearray(data), memoryview(data), memoryview(b"xx" + data)[2:]):
        recs = list(one_batch(buf))
        assert [(r.key, r.value) for r in recs] == [(b"k", b"v")]
    batch = one_batch(data)
    assert bytes(batch.raw) == data
    assert list(read_batches(b"")) == []


def test_records_list_and_iteration_agree():
    b = RecordBatchBuilder()
    for i in range(20):
        b.append(b"%d" % i, timestamp=i)
    batch = one_batch(b.build())
    it = list(batch)
    lst = batch.records_list()
    assert lst == it and batch.records_list() is lst
    assert list(batch) == lst and len(batch) == 20
    assert batch.validate_crc()


def test_record_repr_and_equality():
    b = RecordBatchBuilder()
    b.append(b"v", key=b"k", timestamp=3, headers=[("a", None)])
    (r1,) = one_batch(b.build())
    (r2,) = one_batch(b.build())
    assert r1 == r2 and r1 is not r2
    assert "key=b'k'" in repr(r1) and "offset=0" in repr(r1)
    assert r1.checksum is None
    with pytest.raises(AttributeError):
        r1.key = b"x"


# --------------------------------------------------------------------------- compression

@pytest.mark.parametrize("codec", CODECS)
def test_compressed_round_trip(codec):
    b = RecordBatchBuilder(compression=codec)
    values = [b"value %d " % i * (i % 13) for i in range(500)]
    for i, v in enumerate(values):
        b.append(v, key=b"key-%d" % i, timestamp=1_700_000_000_000 + i,
                 headers=[("i", b"%d" % i)] if i % 50 == 0 else None)
    data = b.build(base_offset=1000)
    if codec != Compression.NONE:
        assert len(data) < b.size_in_bytes
    batch = one_batch(data)
    assert batch.compression is codec and batch.records_count == 500
    recs = list(batch)
    assert [r.value for r in recs] == values
    assert [r.offset for r in recs] == list(range(1000, 1500))
    assert recs[50].headers == [("i", b"50")]
    assert list(batch) == recs  # decompressed once, iterated twice


@pytest.mark.parametrize("codec", [c for c in CODECS
                                   if c not in (Compression.NONE, Compression.SNAPPY)])
def test_compression_level_is_accepted(codec):
    b = RecordBatchBuilder(compression=codec, compression_level=1)
    b.append(b"abc" * 1000, timestamp=0)
    assert [r.value for r in one_batch(b.build())] == [b"abc" * 1000]


# --------------------------------------------------------------------------- round trip (hypothesis)

keys_values = st.one_of(st.none(), st.binary(max_size=64), st.binary(min_size=200, max_size=600))
headers_st = st.lists(
    st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=4)
record_st = st.tuples(keys_values, keys_values, headers_st,
                      st.integers(min_value=-1, max_value=2**63 - 1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(record_st, max_size=25),
       base_offset=st.integers(min_value=0, max_value=2**62),
       producer_id=st.integers(min_value=-1, max_value=2**63 - 1),
       producer_epoch=st.integers(min_value=-1, max_value=2**15 - 1),
       base_sequence=st.integers(min_value=-1, max_value=2**31 - 1),
       ple=st.integers(min_value=-1, max_value=2**31 - 1),
       transactional=st.booleans(),
       ts_type=st.sampled_from(list(TimestampType)),
       codec=st.sampled_from(CODECS))
def test_round_trip_property(records, base_offset, producer_id, producer_epoch, base_sequence,
                             ple, transactional, ts_type, codec):
    b = RecordBatchBuilder(compression=codec, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=base_sequence,
                           transactional=transactional, partition_leader_epoch=ple,
                           timestamp_type=ts_type)
    for key, value, headers, ts in records:
        b.append(value, key, ts, headers)
    data = b.build(base_offset)
    if codec == Compression.NONE:
        assert len(data) == b.size_in_bytes
    batch = one_batch(data)
    assert batch.base_offset == base_offset and batch.records_count == len(records)
    assert batch.last_offset == base_offset + len(records) - 1
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        producer_id, producer_epoch, base_sequence)
    assert batch.partition_leader_epoch == ple
    assert batch.is_transactional == transactional and not batch.is_control
    # Without records, the header alone (as Kafka writes an empty batch).
    assert batch.compression is (codec if records else Compression.NONE)
    assert batch.timestamp_type is ts_type
    assert batch.size == len(data)
    recs = list(batch)
    assert len(recs) == len(records)
    max_ts = max((r[3] for r in records), default=-1)
    assert batch.max_timestamp == max_ts
    for i, (rec, (key, value, headers, ts)) in enumerate(zip(recs, records)):
        assert rec.offset == base_offset + i
        assert rec.key == key and rec.value == value
        assert rec.headers == headers
        assert rec.timestamp == (ts if ts_type == TimestampType.CREATE_TIME else max_ts)


# --------------------------------------------------------------------------- peers

aiokafka_records = pytest.importorskip("aiokafka.record.default_records")
kafka_records = pytest.importorskip("kafka.record.default_records")

PEER_CODECS = {
    Compression.NONE: 0, Compression.GZIP: 1, Compression.SNAPPY: 2, Compression.LZ4: 3,
    Compression.ZSTD: 4,
}
PEERS = {
    "aiokafka": (aiokafka_records.DefaultRecordBatchBuilder,
                 aiokafka_records.DefaultRecordBatch),
    "kafka-python": (kafka_records.DefaultRecordBatchBuilder,
                     kafka_records.DefaultRecordBatch),
}

SAMPLE = [
    (b"k0", b"v0", [], 1_700_000_000_000),
    (None, b"tombstone-less", [("h1", b"x"), ("h2", None)], 1_700_000_000_005),
    (b"k2", None, [], 1_699_999_999_000),
    (b"", b"", [("", b"")], 1_700_000_000_010),
    (b"k4", bytes(range(256)) * 8, [], 1_700_000_000_001),
]


@pytest.mark.parametrize("peer", sorted(PEERS))
@pytest.mark.parametrize("codec", CODECS)
def test_peer_batches_read_by_us(peer, codec):
    builder_cls, _ = PEERS[peer]
    pb = builder_cls(2, PEER_CODECS[codec], 0, 1234, 5, 17, 1 << 20)
    for i, (key, value, headers, ts) in enumerate(SAMPLE):
        pb.append(i, ts, key, value, headers)
    data = bytes(pb.build())
    batch = one_batch(data)
    assert batch.compression is codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1234, 5, 17)
    assert batch.max_timestamp == max(s[3] for s in SAMPLE)
    got = [(r.key, r.value, r.headers, r.timestamp, r.offset) for r in batch]
    assert got == [(k, v, h, ts, i) for i, (k, v, h, ts) in enumerate(SAMPLE)]


@pytest.mark.parametrize("peer", sorted(PEERS))
@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_read_by_peer(peer, codec):
    _, batch_cls = PEERS[peer]
    b = RecordBatchBuilder(compression=codec, producer_id=99, producer_epoch=1,
                           base_sequence=5, transactional=True)
    for key, value, headers, ts in SAMPLE:
        b.append(value, key, ts, headers)
    data = b.build(base_offset=300)
    pbatch = batch_cls(bytearray(data) if peer == "aiokafka" else data)
    assert pbatch.validate_crc()
    assert pbatch.base_offset == 300 and pbatch.is_transactional
    assert (pbatch.producer_id, pbatch.producer_epoch, pbatch.base_sequence) == (99, 1, 5)
    got = [(r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp, r.offset)
           for r in pbatch]
    assert got == [(k, v, h, ts, 300 + i) for i, (k, v, h, ts) in enumerate(SAMPLE)]


@pytest.mark.parametrize("peer", sorted(PEERS))
@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_without_records_read_by_peer(peer, codec):
    # Written as Kafka's log cleaner writes an emptied batch: the header alone, codec bits 0
    # (a 16-byte xerial header, say, is not snappy data to kafka-python or librdkafka).
    _, batch_cls = PEERS[peer]
    data = RecordBatchBuilder(compression=codec, producer_id=3, producer_epoch=0,
                              base_sequence=0).build(base_offset=7)
    assert len(data) == 61
    pbatch = batch_cls(bytearray(data) if peer == "aiokafka" else data)
    assert pbatch.validate_crc() and pbatch.compression_type == 0
    assert list(pbatch) == []
    batch = one_batch(data)
    assert batch.compression is Compression.NONE and list(batch) == []
    assert (batch.base_offset, batch.producer_id, batch.base_timestamp) == (7, 3, -1)


@pytest.mark.parametrize("codec", [c for c in CODECS if c])
@pytest.mark.parametrize("payload", [b"", b"not compressed data at all"])
def test_batch_without_records_is_not_decompressed(codec, payload):
    # Kafka's reader returns no records for a zero count without reading the payload; an
    # emptied batch may keep its codec bits with nothing after the header.
    data = ref.batch(payload, 0, attributes=int(codec), last_offset_delta=4)
    batch = one_batch(data)
    assert list(batch) == [] and batch.records_list() == [] and batch.decompressed_size == 0
    assert batch.next_offset == 5


def test_builder_refuses_timestamps_below_minus_one():
    # As Kafka's MemoryRecordsBuilder: -1 means "no timestamp", anything lower is an error,
    # raised before anything of the record is written.
    b = RecordBatchBuilder()
    b.append(b"a", timestamp=5)
    for append in (lambda ts: b.append(b"v", timestamp=ts),
                   lambda ts: b.append(b"v", None, ts),
                   lambda ts: b.append(b"v", headers=[("h", b"x")], timestamp=ts),
                   lambda ts: b.append(bytearray(b"v"), timestamp=ts),
                   lambda ts: b.append_many([b"v"], timestamp=ts)):
        for ts in (-2, -1000, -(1 << 63)):
            with pytest.raises(ProtocolEncodeError, match=f"invalid record timestamp {ts}"):
                append(ts)
    first = RecordBatchBuilder()
    with pytest.raises(ProtocolEncodeError):
        first.append(b"v", timestamp=-2)
    assert len(first) == 0 and first.size_in_bytes == 61
    b.append(b"b", timestamp=-1)
    assert [(r.value, r.timestamp) for r in one_batch(b.build())] == [(b"a", 5), (b"b", -1)]


def test_first_timestamp_minus_one_is_the_base_timestamp():
    # Kafka's builder takes the first record's timestamp as the base, -1 included (aiokafka
    # writes 0 there); max timestamp is the largest one appended.
    b = RecordBatchBuilder()
    b.append(b"a", timestamp=-1)
    b.append(b"b", timestamp=1000)
    data = b.build()
    batch = one_batch(data)
    assert (batch.base_timestamp, batch.max_timestamp) == (-1, 1000)
    assert [r.timestamp for r in batch] == [-1, 1000]
    assert data == ref.batch(ref.record(0, 0, None, b"a") + ref.record(1, 1001, None, b"b"),
                             2, base_ts=-1, max_ts=1000)


# --------------------------------------------------------------------------- legacy dispatch

def _legacy_available() -> bool:
    try:
        import kafka_proto.records._legacy  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _legacy_available(), reason="legacy reader not built")
@pytest.mark.parametrize("magic", [0, 1])
def test_mixed_legacy_and_v2_buffer(magic):
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    from kafka_proto.records import LegacyBatch

    lb = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
    lb.append(0, 1_700_000_000_000 if magic else None, b"lk", b"legacy-0")
    lb.append(1, 1_700_000_000_001 if magic else None, None, b"legacy-1")
    legacy = bytes(lb.build())
    b = RecordBatchBuilder()
    b.append(b"v2-value", key=b"v2-key", timestamp=5)
    v2 = b.build(base_offset=2)
    # The second copy of the legacy set is cut inside its last message: ignored tail.
    batches = list(read_batches(legacy + v2 + legacy[:-3]))
    kinds = [type(x) for x in batches]
    assert kinds == [LegacyBatch, LegacyBatch, RecordBatch, LegacyBatch]
    values = [r.value for batch in batches for r in batch]
    assert values == [b"legacy-0", b"legacy-1", b"v2-value", b"legacy-0"]
    assert [batch.magic for batch in batches] == [magic, magic, 2, magic]


def test_append_argument_handling():
    b = RecordBatchBuilder()
    b.append(b"v1", b"k1", 5, [("a", None)])
    b.append(value=b"v2", key=b"k2", timestamp=6, headers=None)
    b.append(b"v3", timestamp=7)
    b.append(b"v4", b"k4", headers=[("h", b"x")], timestamp=8)
    recs = list(one_batch(b.build()))
    assert [(r.key, r.value, r.timestamp, r.headers) for r in recs] == [
        (b"k1", b"v1", 5, [("a", None)]), (b"k2", b"v2", 6, []), (None, b"v3", 7, []),
        (b"k4", b"v4", 8, [("h", b"x")])]
    for call in (lambda: b.append(), lambda: b.append(b"x", foo=1),
                 lambda: b.append(b"x", value=b"y"), lambda: b.append(b"1", b"2", 3, None, 5),
                 lambda: b.append(b"x", timestamp="now"),
                 lambda: RecordBatchBuilder.append(object(), b"x")):
        with pytest.raises(TypeError):
            call()
    assert len(b) == 4
    # A keyword name built at run time (not interned) is matched too.
    b.append(b"v5", **{"".join(["ke", "y"]): b"k5"})
    assert list(one_batch(b.build()))[-1].key == b"k5"


def test_many_records_alive_and_recycled():
    # More records alive at once than the reader's free list holds, then recycled.
    import gc
    import pickle

    b = RecordBatchBuilder()
    for i in range(3000):
        b.append(b"v%d" % i, key=b"k%d" % i, timestamp=i, headers=[("i", b"%d" % i)] if i % 7 == 0 else None)
    data = b.build()
    for _ in range(3):
        recs = one_batch(data).records_list()
        assert [r.value for r in recs[::500]] == [b"v%d" % i for i in range(0, 3000, 500)]
        kept = recs[1234]
        del recs
        gc.collect()
        assert (kept.key, kept.value, kept.offset, kept.timestamp) == (b"k1234", b"v1234", 1234, 1234)
        assert kept.headers == [] and one_batch(data).records_list()[7].headers == [("i", b"7")]
        assert pickle.loads(pickle.dumps(kept)) == kept


def test_concurrent_append_during_big_build_is_refused_or_safe():
    # build() releases the GIL for the CRC of a big batch; an append from another thread in
    # that window must not move the buffer under it (it raises RuntimeError instead).
    import threading

    b = RecordBatchBuilder()
    for i in range(800):  # > 64 KiB: the CRC runs without the GIL
        b.append(b"x" * 100, timestamp=i)
    errors, stop = [], threading.Event()

    def appender():
        while not stop.is_set():
            try:
                b.append(b"y", timestamp=1)
            except RuntimeError as exc:
                errors.append(exc)

    t = threading.Thread(target=appender)
    t.start()
    try:
        for _ in range(10):
            batch = one_batch(b.build())
            assert batch.validate_crc()
            assert sum(1 for _ in batch) == batch.records_count
    finally:
        stop.set()
        t.join()
    assert all("build" in str(e) for e in errors)
