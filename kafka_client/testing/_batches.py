"""Broker-side byte work on stored v2 record batches that ``kafka_proto`` has no public
name for yet: reading the fixed batch header without parsing records, re-stamping the
base offset and the partition leader epoch in place, and the checkpoint text files.

Both stamps lie outside the batch CRC (which covers attributes to the end), so a leader
assigns offsets by rewriting 12 bytes of the producer's batch, never re-checksumming it.

These helpers are meant to move into ``kafka_proto.records`` (named in the issue notes);
until then they live here, used by the test cluster only.
"""
from __future__ import annotations

import os
import struct
from typing import Iterator, List, NamedTuple, Tuple

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "BatchHeader",
    "read_batch_header",
    "iter_batch_headers",
    "stamp_batch",
    "read_checkpoint",
    "write_checkpoint",
]

#: Fixed part of a v2 batch, base offset to records count.
BATCH_HEADER_SIZE = 61
#: base offset (int64) + batch length (int32): the part of the header outside batchLength.
LOG_OVERHEAD = 12
#: The magic byte's position, the same for v2 batches and legacy entries.
MAGIC_POSITION = 16

_HEADER = struct.Struct(">qiibIhiqqqhii")
_STAMP = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_PARTITION_LEADER_EPOCH_POSITION = 12

_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ATTR_CODEC = 0x07


class BatchHeader(NamedTuple):
    """The 61-byte header of a v2 record batch, plus where the batch lies."""

    position: int            # of the batch in its buffer or file
    base_offset: int
    batch_length: int        # bytes after the length field; the batch is this + 12
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _ATTR_CONTROL)

    @property
    def compression(self) -> int:
        return self.attributes & _ATTR_CODEC

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_batch_header(buf, position: int = 0) -> BatchHeader:
    """The header of the v2 batch at ``position`` of a bytes-like object (not validated
    beyond its size; run the batch through ``kafka_proto.records.read_batches`` for that)."""
    if len(buf) - position < BATCH_HEADER_SIZE:
        raise ValueError(f"batch header at {position}: {len(buf) - position} bytes left, "
                         f"{BATCH_HEADER_SIZE} needed")
    return BatchHeader(position, *_HEADER.unpack_from(buf, position))


def iter_batch_headers(buf, start: int = 0, end: int = -1) -> Iterator[BatchHeader]:
    """Headers of the batches back to back in ``buf[start:end]``; stops before a batch that
    is cut short or whose header is not a v2 header of a plausible size."""
    if end < 0:
        end = len(buf)
    pos = start
    while end - pos >= BATCH_HEADER_SIZE:
        header = BatchHeader(pos, *_HEADER.unpack_from(buf, pos))
        if header.magic != 2 or header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
            return
        if pos + header.size > end:
            return
        yield header
        pos += header.size


def stamp_batch(buf: bytearray, position: int, base_offset: int,
                partition_leader_epoch: int) -> None:
    """Write the base offset and partition leader epoch of the batch at ``position`` in
    place. Neither field is covered by the CRC."""
    _STAMP.pack_into(buf, position, base_offset)
    _EPOCH.pack_into(buf, position + _PARTITION_LEADER_EPOCH_POSITION, partition_leader_epoch)


# --------------------------------------------------------------------------- checkpoints
# Kafka's checkpoint files are text: a version line (0), a count line, then one entry per
# line, its fields separated by single spaces.


def read_checkpoint(path: str) -> List[Tuple[str, ...]]:
    """Entries of a checkpoint file (each a tuple of its fields); [] if there is none."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    if len(lines) < 2 or lines[0].strip() != "0":
        raise ValueError(f"{path}: not a version-0 checkpoint file")
    count = int(lines[1])
    entries = [tuple(line.split(" ")) for line in lines[2:2 + count]]
    if len(entries) != count:
        raise ValueError(f"{path}: {count} entries announced, {len(entries)} present")
    return entries


def write_checkpoint(path: str, entries: List[Tuple[object, ...]]) -> None:
    """Replace a checkpoint file atomically (written beside it, then renamed)."""
    text = "0\n%d\n" % len(entries) + "".join(
        " ".join(str(field) for field in entry) + "\n" for entry in entries)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
