"""The legacy message-set writer (``build_message_set``): exact bytes against kafka-python's
builder, and every codec and magic read back by kafka-python and by our reader."""
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafka_proto.compression import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD
from kafka_proto.errors import UnsupportedCompressionError, UnsupportedMagicError
from kafka_proto.records import LegacyMessage, build_message_set, read_batches

CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4]


def sample(first: int = 40, count: int = 30):
    return [LegacyMessage(first + i, 1_600_000_000_000 + 7 * i,
                          None if i % 4 == 0 else b"key-%d" % i,
                          None if i % 5 == 3 else b"value-%d" % i * (i % 6))
            for i in range(count)]


def peer_read(data: bytes):
    out, records = [], MemoryRecords(data)
    while records.has_next():
        out.extend((r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value)
                   for r in records.next_batch())
    return out


def ours_read(data: bytes):
    return [(r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value)
            for batch in read_batches(data) for r in batch]


@pytest.mark.parametrize("magic", [0, 1])
def test_uncompressed_bytes_are_kafka_pythons(magic):
    messages = sample()
    peer = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
    for m in messages:
        peer.append(m.offset, m.timestamp, m.key, m.value)
    assert build_message_set(messages, magic) == bytes(peer.build())


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_every_codec_reads_back_in_kafka_python_and_here(magic, codec):
    messages = sample()
    data = build_message_set(messages, magic, codec)
    stamp = (lambda t: t) if magic else (lambda t: -1)
    if not (magic == 0 and codec == CODEC_LZ4):    # kafka-python needs `xxhash` for that
        assert peer_read(data) == [(m.offset, stamp(m.timestamp), m.key, m.value)
                                   for m in messages]
    assert ours_read(data) == [(m.offset, stamp(m.timestamp), 0 if magic else -1, m.key,
                                m.value) for m in messages]
    batches = list(read_batches(data))
    assert len(batches) == (1 if codec else len(messages))
    assert all(b.validate_crc() and b.magic == magic for b in batches)
    if codec:
        wrapper_offset, = struct.unpack_from(">q", data, 0)
        assert wrapper_offset == messages[-1].offset   # the wrapper names the last offset
        if magic:
            assert batches[0].max_timestamp == max(m.timestamp for m in messages)


@pytest.mark.parametrize("codec", CODECS)
def test_log_append_time_stamps_every_message(codec):
    data = build_message_set(sample(count=5), 1, codec, log_append_time=1_700_000_000_123)
    assert {(ts, kind) for _o, ts, kind, _k, _v in ours_read(data)} == {(1_700_000_000_123, 1)}
    assert {ts for _o, ts, _k, _v in peer_read(data)} == {1_700_000_000_123}


def test_gaps_in_offsets_survive_a_v1_wrapper():
    """Records of a compacted batch are not contiguous: relative offsets keep the gaps."""
    messages = [LegacyMessage(o, 5, b"k", b"v%d" % o) for o in (100, 103, 104, 110)]
    data = build_message_set(messages, 1, CODEC_GZIP)
    assert [r[0] for r in ours_read(data)] == [100, 103, 104, 110]
    assert [r[0] for r in peer_read(data)] == [100, 103, 104, 110]


def test_refusals():
    assert build_message_set([], 1) == b""
    with pytest.raises(UnsupportedMagicError):
        build_message_set(sample(), 2)
    with pytest.raises(UnsupportedCompressionError):
        build_message_set(sample(), 1, CODEC_ZSTD)
    with pytest.raises(UnsupportedCompressionError):
        build_message_set(sample(), 1, 7)


INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
MAX_OFFSET = (1 << 63) - 2     # the last offset that leaves a next offset in int64


@st.composite
def legacy_messages(draw):
    """Records as a producer or a compacted log could hold them: increasing offsets with
    gaps, anywhere in 0..2^63-2, any timestamps, keys and values null, empty or not."""
    first = draw(st.integers(0, MAX_OFFSET))
    gaps = draw(st.lists(st.integers(1, 1 << 40), max_size=7))
    offsets = [first]
    for gap in gaps:
        if offsets[-1] + gap > MAX_OFFSET:
            break
        offsets.append(offsets[-1] + gap)
    field = st.none() | st.binary(max_size=40)
    return [LegacyMessage(o, draw(INT64), draw(field), draw(field)) for o in offsets]


@settings(max_examples=300, deadline=None)
@given(messages=legacy_messages(), magic=st.sampled_from([0, 1]),
       codec=st.sampled_from(CODECS), append_time=st.none() | INT64)
def test_what_is_built_reads_back_the_same(messages, magic, codec, append_time):
    data = build_message_set(messages, magic, codec, append_time)
    got = [(r.offset, r.timestamp, r.key, r.value)
           for batch in read_batches(data, check_crc=True) for r in batch]
    stamp = -1 if magic == 0 else append_time

    def timestamp(m):
        return m.timestamp if stamp is None else stamp

    assert got == [(m.offset, timestamp(m), m.key, m.value) for m in messages]


@pytest.mark.parametrize("offsets", [[-1], [5, 5], [7, 6], [(1 << 63) - 1], [0, 1 << 63]])
@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP])
def test_offsets_no_reader_takes_back_are_refused(offsets, codec):
    """Offsets that do not increase or leave no next offset in int64 were written, and
    the reader then refused the bytes (or read the wrapper's records as corrupt): Kafka's
    builder refuses them."""
    messages = [LegacyMessage(o, 0, None, b"v") for o in offsets]
    with pytest.raises(ValueError):
        build_message_set(messages, 1, codec)
