"""kafka_proto.logdir: Kafka's log directory formats (segment names, .index, .timeindex,
checkpoint files), byte for byte."""
from __future__ import annotations

import struct

import pytest

from kafka_proto.logdir import (
    OFFSET_INDEX_ENTRY_SIZE,
    TIME_INDEX_ENTRY_SIZE,
    EpochEntry,
    OffsetIndexEntry,
    PartitionOffset,
    TimeIndexEntry,
    decode_leader_epoch_checkpoint,
    decode_offset_index,
    decode_offsets_checkpoint,
    decode_time_index,
    encode_leader_epoch_checkpoint,
    encode_offset_index_entry,
    encode_offsets_checkpoint,
    encode_time_index_entry,
    segment_base_offset,
    segment_file_name,
)


def test_segment_file_names():
    assert segment_file_name(0) == "00000000000000000000.log"
    assert segment_file_name(1234, ".index") == "00000000000000001234.index"
    assert segment_file_name(2**63 - 1, ".timeindex") == "09223372036854775807.timeindex"
    assert segment_base_offset("00000000000000001234.log") == 1234
    assert segment_base_offset("/data/t-0/00000000000000000042.timeindex") == 42
    assert segment_base_offset("00000000000000000007.log.cleaned") == 7
    for bad in ("leader-epoch-checkpoint", "abc.log", "123", ".log", "１２.log"):
        with pytest.raises(ValueError, match="segment file name"):
            segment_base_offset(bad)
    with pytest.raises(ValueError):
        segment_file_name(-1)


def test_offset_index_entries_are_relative_offset_and_position_big_endian():
    entry = encode_offset_index_entry(1000 + 0x01020304, 0x0A0B0C0D, base_offset=1000)
    assert entry == b"\x01\x02\x03\x04\x0a\x0b\x0c\x0d" and len(entry) == OFFSET_INDEX_ENTRY_SIZE
    data = b"".join(encode_offset_index_entry(1000 + i * 10, i * 4096, 1000) for i in range(5))
    assert decode_offset_index(data, 1000) == [OffsetIndexEntry(1000 + i * 10, i * 4096)
                                               for i in range(5)]
    # A write cut short leaves a partial last entry: it is not an entry.
    assert decode_offset_index(data + b"\x00\x01\x02", 1000) == decode_offset_index(data, 1000)
    assert decode_offset_index(memoryview(bytearray(data)), 1000)[4].position == 4 * 4096


def test_time_index_entries_are_timestamp_and_relative_offset_big_endian():
    entry = encode_time_index_entry(1_700_000_000_000, 5 + 3, base_offset=5)
    assert entry == struct.pack(">qi", 1_700_000_000_000, 3) and len(entry) == TIME_INDEX_ENTRY_SIZE
    data = entry + encode_time_index_entry(1_700_000_000_100, 20, 5)
    assert decode_time_index(data + b"\xff" * 11, 5) == [TimeIndexEntry(1_700_000_000_000, 8),
                                                         TimeIndexEntry(1_700_000_000_100, 20)]


def test_index_entries_refuse_what_the_format_cannot_hold():
    with pytest.raises(ValueError, match="base offset 10"):
        encode_offset_index_entry(9, 0, base_offset=10)
    with pytest.raises(ValueError):
        encode_offset_index_entry(10 + 2**31, 0, base_offset=10)
    with pytest.raises(ValueError, match="position"):
        encode_offset_index_entry(10, 2**31, base_offset=10)
    with pytest.raises(ValueError):
        encode_time_index_entry(0, 3, base_offset=4)


def test_checkpoints_in_kafkas_text_format():
    epochs = encode_leader_epoch_checkpoint([EpochEntry(0, 0), EpochEntry(3, 1500)])
    assert epochs == b"0\n2\n0 0\n3 1500\n"
    assert decode_leader_epoch_checkpoint(epochs) == [(0, 0), (3, 1500)]
    assert encode_leader_epoch_checkpoint([]) == b"0\n0\n"
    assert decode_leader_epoch_checkpoint(b"0\n0\n") == []
    offsets = encode_offsets_checkpoint([PartitionOffset("orders", 0, 42),
                                         PartitionOffset("my_topic.v2-x", 11, 0)])
    assert offsets == b"0\n2\norders 0 42\nmy_topic.v2-x 11 0\n"
    assert decode_offsets_checkpoint(offsets) == [("orders", 0, 42), ("my_topic.v2-x", 11, 0)]
    assert decode_offsets_checkpoint(offsets)[0].offset == 42


@pytest.mark.parametrize("data, why", [
    (b"", "version-0"),
    (b"1\n0\n", "version-0"),
    (b"0\nx\n", "count"),
    (b"0\n2\n0 0\n", "2 entries announced, 1"),
    (b"0\n1\n0 0 0\n", "fields"),
    (b"0\n1\nzero 0\n", "number"),
    (b"0\n1\n\xff 0\n", "UTF-8"),
])
def test_malformed_checkpoints_are_refused_with_the_reason(data, why):
    with pytest.raises(ValueError, match=why):
        decode_leader_epoch_checkpoint(data)


def test_offsets_checkpoint_refuses_unwritable_topic_names():
    for name in ("a b", "", "a\nb"):
        with pytest.raises(ValueError, match="topic name"):
            encode_offsets_checkpoint([PartitionOffset(name, 0, 0)])
