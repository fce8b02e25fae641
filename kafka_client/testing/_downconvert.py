"""Message format conversion, as Kafka does it: stored v2 batches down-converted for a
consumer's Fetch below v4 (its RecordsUtil.downConvert and LazyDownConversionRecords), and
the legacy message sets of a Produce below v3 up-converted to the v2 batch that is stored
(its LogValidator), see :func:`up_convert`.

Fetch v0-1 get message format v0, v2-3 format v1 (the legacy message sets of
``kafka_proto.records.build_message_set``). Per stored batch: a control batch is dropped
(transaction markers have no legacy form; a fetcher this old reads uncommitted anyway, so
aborted records go out like the others), records keep their offsets, keys, values and
timestamps (v1), headers are dropped; an uncompressed batch loses its records below the
fetch offset, a compressed one becomes one wrapper of all its records. zstd has no legacy
form: a first batch in zstd makes the partition's answer UNSUPPORTED_COMPRESSION_TYPE, a
later one ends the answer before it.

Kafka converts lazily (streams), so it never holds a set's decompressed records: here they
are in memory, so the work is bounded. A Produce's message set may expand to
``UP_CONVERT_BUDGET`` decompressed bytes, above which it is refused as a v2 batch of that
size is (UNKNOWN_SERVER_ERROR, "Failed to decompress record stream").

The answer holds as many bytes as the stored batches read (or the first converted batch,
if that is longer): converted data that is longer is cut there, the last message left
incomplete, and shorter data is padded with an "overflow" entry longer than what remains,
as Kafka sends them. The fetcher ignores the incomplete tail and fetches again from there.
"""
from __future__ import annotations

import struct
from typing import List, Tuple

from kafka_proto.errors import DecompressionLimitError, ErrorCode, KafkaProtocolError
from kafka_proto.records import (Compression, LegacyMessage, RecordBatchBuilder, TimestampType,
                                 build_message_set, read_batches)

__all__ = ["down_convert", "magic_for_fetch", "overflow_entry", "up_convert",
           "UP_CONVERT_BUDGET"]

#: The decompressed bytes (keys and values) a Produce's legacy message set may expand to
#: before it is refused: its records are rebuilt in memory as one v2 batch, whose append
#: would refuse it anyway (read_batches' cap: 64 MiB for a batch below 1 MiB).
UP_CONVERT_BUDGET = 64 << 20

#: Kafka's overflow entry: offset -1 and a length past the end of the answer.
_OVERFLOW_HEAD = struct.Struct(">qi")
_MIN_OVERFLOW_LENGTH = 61     # a v2 batch header's size, Kafka's floor for the length


def magic_for_fetch(version: int) -> int:
    """The message format a consumer's Fetch of ``version`` reads (2: no conversion)."""
    if version <= 1:
        return 0
    if version <= 3:
        return 1
    return 2


def overflow_entry(size: int) -> bytes:
    """``size`` bytes that read as the start of an entry longer than they are (Kafka's
    overflow batch): the fetcher sees an incomplete message and nothing else."""
    head = _OVERFLOW_HEAD.pack(-1, max(size + 1, _MIN_OVERFLOW_LENGTH))
    return (head + bytes(max(size - len(head), 0)))[:size]


def down_convert(stored: bytes, magic: int, fetch_offset: int) -> Tuple[bytes, int]:
    """``(records, error)``: the stored v2 batches ``stored`` (whole batches, as a log read
    returns them) as a message set of ``magic`` for a fetch from ``fetch_offset``, sized
    as Kafka sizes it; or ``(b"", UNSUPPORTED_COMPRESSION_TYPE)``."""
    converted: List[bytes] = []
    for batch in read_batches(stored):
        if batch.is_control:
            continue
        codec = int(batch.compression)
        if codec == Compression.ZSTD:
            if not converted:
                return b"", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
            break
        records = [LegacyMessage(r.offset, r.timestamp, r.key, r.value) for r in batch
                   if codec != Compression.NONE or r.offset >= fetch_offset]
        if not records:
            continue
        append_time = batch.max_timestamp \
            if batch.timestamp_type == TimestampType.LOG_APPEND_TIME else None
        converted.append(build_message_set(records, magic, codec, append_time))
    if not converted:
        return b"", ErrorCode.NONE
    size = max(len(stored), len(converted[0]))
    data = b"".join(converted)
    if len(data) >= size:
        return data[:size], ErrorCode.NONE
    return data + overflow_entry(size - len(data)), ErrorCode.NONE


def up_convert(records: bytes) -> Tuple[bytes, int, str]:
    """``(batch, error, message)``: the legacy message set of a Produce below v3 as the one
    v2 batch Kafka stores for it (offsets assigned on append; the producer's timestamps,
    -1 for magic 0 messages; the codec of its wrappers; no producer id), or an error:
    CORRUPT_MESSAGE for a message that does not read (CRC, lengths, a cut message),
    INVALID_RECORD for a v2 batch or an empty set, UNKNOWN_SERVER_ERROR for a set whose
    records expand beyond ``UP_CONVERT_BUDGET`` (as the v2 batch they would make)."""
    batches = []
    expanded = 0
    try:
        for batch in read_batches(records, check_crc=True, allow_truncated=False,
                                  max_decompressed_size=UP_CONVERT_BUDGET):
            batches.append(batch)
            if batch.magic < 2:
                expanded += sum(len(r.key or b"") + len(r.value or b"") for r in batch)
            if expanded > UP_CONVERT_BUDGET:
                raise DecompressionLimitError(f"the records expand beyond "
                                              f"{UP_CONVERT_BUDGET} bytes")
    except DecompressionLimitError as exc:
        return b"", ErrorCode.UNKNOWN_SERVER_ERROR, f"Failed to decompress record stream: {exc}"
    except KafkaProtocolError as exc:
        return b"", ErrorCode.CORRUPT_MESSAGE, str(exc)
    if not batches:
        return b"", ErrorCode.INVALID_RECORD, "no message"
    if any(b.magic >= 2 for b in batches):
        return b"", ErrorCode.INVALID_RECORD, \
            "Produce before v3 carries message sets of magic 0 or 1"
    # Kafka keeps the codec of the (first) compressed wrapper, else none
    codec = next((int(b.compression) for b in batches
                  if b.compression != Compression.NONE), Compression.NONE)
    builder = RecordBatchBuilder(compression=codec)
    for batch in batches:
        for r in batch:
            builder.append(r.value, key=r.key, timestamp=r.timestamp if r.timestamp >= 0
                           else -1)
    return builder.build(), ErrorCode.NONE, ""
