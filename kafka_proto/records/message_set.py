"""Writer of legacy message sets (magic 0 and 1), the format of Kafka before 0.11.

A producer writes them to a broker without Produce v3 (before Kafka 0.11), and a broker
when it down-converts stored v2 batches for a Fetch below v4 (message format v1) or below
v2 (format v0). :func:`build_message_set` writes one v2 batch's records as Kafka's
``MemoryRecordsBuilder`` does for those formats:

* uncompressed: one message per record, at its own absolute offset;
* compressed (gzip, snappy, lz4; zstd has no legacy form): one wrapper message whose
  value is the compressed inner message set and whose offset is the last inner one's. The
  inner offsets are absolute in v0 and relative to the first record's in v1; the
  wrapper's timestamp (v1) is the largest inner timestamp, or the log-append time.

With ``log_append_time`` (v1 only) every message says LogAppendTime (attribute bit 3) and
carries that time, as Kafka writes batches of a LogAppendTime topic. v0 has no timestamps.
The layout is in docs/record-formats.md; :mod:`kafka_proto.records` reads it back
(``read_batches`` yields a ``LegacyBatch`` per top-level message).
"""
from __future__ import annotations

import struct
import zlib
from typing import Iterable, List, NamedTuple, Optional, Sequence

from kafka_proto.compression import CODEC_LZ4, CODEC_NONE, CODEC_ZSTD, compress
from kafka_proto.errors import UnsupportedCompressionError, UnsupportedMagicError

__all__ = ["LegacyMessage", "build_message_set"]

_ENTRY_HEAD = struct.Struct(">qiI")        # offset, message size, CRC-32
_MAGIC_ATTRS = struct.Struct(">bB")
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_LOG_APPEND_TIME = 0x08
_NO_TIMESTAMP = -1
#: The largest offset a message may have: the log's next offset must still fit in int64.
_MAX_OFFSET = (1 << 63) - 2


class LegacyMessage(NamedTuple):
    """One record to write: its absolute offset, timestamp (ignored in v0), key, value."""

    offset: int
    timestamp: int
    key: Optional[bytes]
    value: Optional[bytes]


def _sized(data: Optional[bytes]) -> bytes:
    if data is None:
        return _LENGTH.pack(-1)
    return _LENGTH.pack(len(data)) + bytes(data)


def _message(offset: int, magic: int, attributes: int, timestamp: int,
             key: Optional[bytes], value: Optional[bytes]) -> bytes:
    body = _MAGIC_ATTRS.pack(magic, attributes)
    if magic == 1:
        body += _TIMESTAMP.pack(timestamp)
    body += _sized(key) + _sized(value)
    # the CRC-32 covers the magic byte to the end of the message
    return _ENTRY_HEAD.pack(offset, len(body) + 4, zlib.crc32(body)) + body


def _check_offsets(items: Sequence[LegacyMessage]) -> None:
    previous = -1
    for r in items:
        if not 0 <= r.offset <= _MAX_OFFSET:
            raise ValueError(f"offset {r.offset} outside 0..{_MAX_OFFSET}")
        if r.offset <= previous:
            raise ValueError(f"offset {r.offset} following offset {previous}: offsets must "
                             "increase")
        previous = r.offset


def build_message_set(records: Iterable[LegacyMessage], magic: int,
                      compression: int = CODEC_NONE,
                      log_append_time: Optional[int] = None) -> bytes:
    """The message set (magic ``magic``, 0 or 1) holding ``records`` (``LegacyMessage``
    or ``(offset, timestamp, key, value)`` tuples, offsets increasing): one message per
    record, or for ``compression`` (a codec id: 1 gzip, 2 snappy, 3 lz4) one wrapper
    message holding them all. ``log_append_time`` (v1): every message takes that timestamp
    and says LogAppendTime. No records: empty bytes.

    Raises :class:`UnsupportedMagicError` for another magic,
    :class:`UnsupportedCompressionError` for zstd (Kafka never writes it in magic 0/1) or an
    unknown codec, and ``ValueError`` for offsets that do not increase or lie outside
    0..2^63-2 (no reader takes them back: Kafka's builder refuses them too)."""
    if magic not in (0, 1):
        raise UnsupportedMagicError(f"magic {magic} is not a legacy message format (0 or 1)")
    if compression == CODEC_ZSTD:
        raise UnsupportedCompressionError("zstd has no legacy (magic 0/1) form")
    if not 0 <= compression <= CODEC_LZ4:
        raise UnsupportedCompressionError(f"unknown compression codec id {compression}")
    items: Sequence[LegacyMessage] = [LegacyMessage(*r) for r in records]
    if not items:
        return b""
    _check_offsets(items)
    if magic == 0:
        type_bit, stamp = 0, None
    elif log_append_time is not None:
        type_bit, stamp = _LOG_APPEND_TIME, log_append_time
    else:
        type_bit, stamp = 0, None

    def timestamp_of(r: LegacyMessage) -> int:
        if magic == 0:
            return _NO_TIMESTAMP
        return stamp if stamp is not None else r.timestamp

    if compression == CODEC_NONE:
        return b"".join(_message(r.offset, magic, type_bit, timestamp_of(r), r.key, r.value)
                        for r in items)
    first = items[0].offset
    inner: List[bytes] = []
    for r in items:
        # v1 inner offsets count from the first record; v0's stay absolute
        offset = r.offset - first if magic == 1 else r.offset
        inner.append(_message(offset, magic, type_bit, timestamp_of(r), r.key, r.value))
    # Kafka before 0.10 wrote a wrong lz4 frame header checksum, which magic-0 readers expect
    payload = compress(compression, b"".join(inner), legacy_lz4_header=magic == 0)
    wrapper_time = max(timestamp_of(r) for r in items)
    return _message(items[-1].offset, magic, compression | type_bit, wrapper_time, None,
                    payload)
