"""Kafka's on-disk log directory formats, sans-I/O: bytes in, entries out, and back.

A partition's directory (``<topic>-<partition>``) holds its segments, each three files
named by the segment's base offset in 20 digits (:func:`segment_file_name`):

* ``<base>.log``: record batches back to back, exactly as on the wire (read them with
  :func:`kafka_proto.records.read_batches` or :func:`kafka_proto.records.iter_batch_headers`);
* ``<base>.index``: 8-byte entries, ``int32`` offset relative to the base and ``int32``
  byte position in the ``.log`` (:func:`encode_offset_index_entry`,
  :func:`decode_offset_index`);
* ``<base>.timeindex``: 12-byte entries, ``int64`` timestamp and ``int32`` relative offset
  (:func:`encode_time_index_entry`, :func:`decode_time_index`).

Beside them the text checkpoint files: ``leader-epoch-checkpoint`` in each partition
directory (:func:`encode_leader_epoch_checkpoint`), ``replication-offset-checkpoint`` and
``log-start-offset-checkpoint`` per log directory (:func:`encode_offsets_checkpoint`). A
checkpoint is a version line (``0``), a count line, then one entry per line, its fields
separated by single spaces.

Reading and writing the files (and making a write atomic) is the caller's business.
"""
from __future__ import annotations

import struct
from typing import Iterable, List, NamedTuple, Union

__all__ = [
    "SEGMENT_NAME_DIGITS",
    "LOG_SUFFIX",
    "INDEX_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "LEADER_EPOCH_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "OFFSET_INDEX_ENTRY_SIZE",
    "TIME_INDEX_ENTRY_SIZE",
    "OffsetIndexEntry",
    "TimeIndexEntry",
    "EpochEntry",
    "PartitionOffset",
    "segment_file_name",
    "segment_base_offset",
    "encode_offset_index_entry",
    "decode_offset_index",
    "encode_time_index_entry",
    "decode_time_index",
    "encode_leader_epoch_checkpoint",
    "decode_leader_epoch_checkpoint",
    "encode_offsets_checkpoint",
    "decode_offsets_checkpoint",
]

BytesLike = Union[bytes, bytearray, memoryview]

#: Digits of the base offset in a segment file's name, zero padded.
SEGMENT_NAME_DIGITS = 20
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
#: File names of the checkpoints (the first in each partition directory, the others per
#: log directory).
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"

_OFFSET_INDEX_ENTRY = struct.Struct(">ii")
_TIME_INDEX_ENTRY = struct.Struct(">qi")
OFFSET_INDEX_ENTRY_SIZE = _OFFSET_INDEX_ENTRY.size
TIME_INDEX_ENTRY_SIZE = _TIME_INDEX_ENTRY.size
_INT32_MAX = (1 << 31) - 1
_CHECKPOINT_VERSION = 0


class OffsetIndexEntry(NamedTuple):
    """An ``.index`` entry: the batch holding ``offset`` starts at ``position`` of the log."""

    offset: int
    position: int


class TimeIndexEntry(NamedTuple):
    """A ``.timeindex`` entry: records up to ``offset`` have timestamps up to ``timestamp``."""

    timestamp: int
    offset: int


class EpochEntry(NamedTuple):
    """A ``leader-epoch-checkpoint`` entry: leader ``epoch`` starts at ``start_offset``."""

    epoch: int
    start_offset: int


class PartitionOffset(NamedTuple):
    """A ``replication-offset-checkpoint`` (high watermark) or ``log-start-offset-checkpoint``
    entry."""

    topic: str
    partition: int
    offset: int


# --------------------------------------------------------------------------- file names


def segment_file_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    """``00000000000000001234.log`` for base offset 1234 (``suffix`` ``.index``,
    ``.timeindex``, ...)."""
    if base_offset < 0:
        raise ValueError(f"segment base offset {base_offset} is negative")
    return f"{base_offset:0{SEGMENT_NAME_DIGITS}d}{suffix}"


def segment_base_offset(name: str) -> int:
    """The base offset in a segment file's name (a path's last component is used), or
    ``ValueError`` when the name is not ``<digits>.<kind>``."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    stem, dot, _kind = base.partition(".")
    if not dot or not stem.isdigit() or not stem.isascii():
        raise ValueError(f"{name}: not a segment file name (<20-digit base offset>.<kind>)")
    return int(stem)


# --------------------------------------------------------------------------- indexes


def _relative(offset: int, base_offset: int) -> int:
    relative = offset - base_offset
    if not 0 <= relative <= _INT32_MAX:
        raise ValueError(f"offset {offset} is not within 2**31-1 after the segment's base "
                         f"offset {base_offset}")
    return relative


def encode_offset_index_entry(offset: int, position: int, base_offset: int) -> bytes:
    """The 8 bytes of an ``.index`` entry for ``offset`` (absolute) at ``position`` of the
    segment starting at ``base_offset``."""
    if not 0 <= position <= _INT32_MAX:
        raise ValueError(f"index position {position} is outside 0..2**31-1")
    return _OFFSET_INDEX_ENTRY.pack(_relative(offset, base_offset), position)


def decode_offset_index(data: BytesLike, base_offset: int) -> List[OffsetIndexEntry]:
    """The entries of an ``.index`` file's bytes, offsets made absolute. A partial entry at
    the end (a write cut short) is ignored."""
    usable = len(data) - len(data) % OFFSET_INDEX_ENTRY_SIZE
    return [OffsetIndexEntry(base_offset + rel, pos)
            for rel, pos in _OFFSET_INDEX_ENTRY.iter_unpack(memoryview(data)[:usable])]


def encode_time_index_entry(timestamp: int, offset: int, base_offset: int) -> bytes:
    """The 12 bytes of a ``.timeindex`` entry: records up to ``offset`` (absolute) of the
    segment starting at ``base_offset`` have timestamps up to ``timestamp``."""
    return _TIME_INDEX_ENTRY.pack(timestamp, _relative(offset, base_offset))


def decode_time_index(data: BytesLike, base_offset: int) -> List[TimeIndexEntry]:
    """The entries of a ``.timeindex`` file's bytes, offsets made absolute. A partial entry
    at the end is ignored."""
    usable = len(data) - len(data) % TIME_INDEX_ENTRY_SIZE
    return [TimeIndexEntry(ts, base_offset + rel)
            for ts, rel in _TIME_INDEX_ENTRY.iter_unpack(memoryview(data)[:usable])]


# --------------------------------------------------------------------------- checkpoints


def _encode_checkpoint(lines: List[str]) -> bytes:
    return (f"{_CHECKPOINT_VERSION}\n{len(lines)}\n" + "".join(
        line + "\n" for line in lines)).encode("utf-8")


def _decode_checkpoint(data: BytesLike, fields: int, what: str) -> List[List[str]]:
    try:
        lines = bytes(data).decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise ValueError(f"{what}: not UTF-8 text") from None
    if len(lines) < 2 or lines[0].strip() != str(_CHECKPOINT_VERSION):
        raise ValueError(f"{what}: not a version-{_CHECKPOINT_VERSION} checkpoint")
    try:
        count = int(lines[1])
    except ValueError:
        raise ValueError(f"{what}: entry count {lines[1]!r} is not a number") from None
    entries = [line.split(" ") for line in lines[2:2 + count]]
    if len(entries) != count:
        raise ValueError(f"{what}: {count} entries announced, {len(entries)} present")
    for entry in entries:
        if len(entry) != fields:
            raise ValueError(f"{what}: entry {' '.join(entry)!r} does not have {fields} fields")
    return entries


def _number(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a number") from None


def encode_leader_epoch_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    """A ``leader-epoch-checkpoint`` file's bytes."""
    return _encode_checkpoint([f"{int(e)} {int(o)}" for e, o in entries])


def decode_leader_epoch_checkpoint(data: BytesLike) -> List[EpochEntry]:
    """The entries of a ``leader-epoch-checkpoint`` file; ``ValueError`` if malformed."""
    what = LEADER_EPOCH_CHECKPOINT
    return [EpochEntry(_number(e, what), _number(o, what))
            for e, o in _decode_checkpoint(data, 2, what)]


def encode_offsets_checkpoint(entries: Iterable[PartitionOffset]) -> bytes:
    """A ``replication-offset-checkpoint`` or ``log-start-offset-checkpoint`` file's bytes
    (topic names never hold spaces: Kafka allows ``[a-zA-Z0-9._-]`` only)."""
    lines = []
    for topic, partition, offset in entries:
        if not topic or " " in topic or "\n" in topic:
            raise ValueError(f"topic name {topic!r} cannot be written in a checkpoint")
        lines.append(f"{topic} {int(partition)} {int(offset)}")
    return _encode_checkpoint(lines)


def decode_offsets_checkpoint(data: BytesLike) -> List[PartitionOffset]:
    """The entries of an offsets checkpoint file; ``ValueError`` if malformed."""
    what = "offsets checkpoint"
    return [PartitionOffset(t, _number(p, what), _number(o, what))
            for t, p, o in _decode_checkpoint(data, 3, what)]
