"""From fetched chunks to what the application gets (application thread): Message objects
for ``poll()``/``consume()``, Arrow columns for ``consume_arrow()``.

A :class:`~kafka_client.consumer.fetcher.Chunk` holds the raw record batches of one
partition's fetch. Both paths walk it through :func:`data_batches`, which leaves out
control batches and, with ``isolation.level=read_committed``, the batches of aborted
transactions (the fetch's aborted-transactions list, closed by each producer's ABORT
marker), and hold decoding to :data:`CHUNK_DECOMPRESSED_BUDGET`. Offsets handed out only
go up, within a batch and across batches (the Java client's rule for hostile input).
"""
from __future__ import annotations

from typing import Any, Iterator, List, Tuple

from kafka_client.consumer.fetcher import Chunk
from kafka_client.types import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    ConsumedRecord,
    Message,
    unchecked_message,
)
from kafka_proto.records import ColumnBuilder, ControlRecordType, RecordFactory, TimestampType

__all__ = ["MESSAGES", "CHUNK_DECOMPRESSED_BUDGET", "BudgetSpent", "ColumnsFull",
           "data_batches", "decode_chunk", "decode_columns"]

#: the codec fills Message objects straight from the record bytes (no Record in between)
MESSAGES = RecordFactory(
    Message, offset="_offset", key="_key", value="_value", headers="_headers",
    timestamp="_timestamp", topic="_topic", partition="_partition",
    leader_epoch="_leader_epoch",
    timestamp_types=(TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME),
    constants={"_error": None, "_latency": None, "_delivery_count": None,
               "_delivery_tag": None})

#: Decompressed bytes one fetched chunk may take while it is decoded: past them (its
#: first batch is always decoded) the rest of the chunk is fetched again, so memory follows
#: what the application takes, not what a response can expand to (a hostile 2 kB zstd
#: batch holds 60 MiB, and a 1 MiB fetch holds 500 of them).
CHUNK_DECOMPRESSED_BUDGET = 64 << 20


class ColumnsFull(Exception):
    """The Arrow columns being filled cannot take the next record (a binary column holds
    at most 2 GiB): the call returns the rows it has; ``chunk.start`` is past them."""


class BudgetSpent(Exception):
    """A chunk's decompressed size passed CHUNK_DECOMPRESSED_BUDGET: fetch again from
    ``offset`` (nothing before it is lost: those records were decoded)."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


def data_batches(chunk: Chunk) -> Iterator[Any]:
    """The batches of a chunk whose records go to the application, in order: control
    batches and (read_committed) aborted transactions left out, and batches that end
    before the chunk's start. Always walks the chunk from its first batch, so the abort
    markers are seen in order however often a chunk is resumed."""
    start = chunk.start
    aborted = chunk.aborted
    ai = 0
    aborting: set = set()
    for batch in chunk.batches:
        if aborted is not None:
            last = batch.last_offset
            while ai < len(aborted) and aborted[ai].first_offset <= last:
                aborting.add(aborted[ai].producer_id)
                ai += 1
        if batch.is_control:
            if aborting:
                ctrl = batch.control_record()
                if ctrl is not None and ctrl.type == ControlRecordType.ABORT:
                    aborting.discard(batch.producer_id)
            continue
        if aborting and batch.is_transactional and batch.producer_id in aborting:
            continue
        if batch.last_offset >= start:
            yield batch


def _legacy_rows(batch: Any, start: int) -> Iterator[Tuple[int, Any, Any, Tuple[int, int]]]:
    """(offset, key, value, timestamp) of a legacy (magic 0/1) batch's records."""
    for r in batch:
        off = r.offset
        if off < start:
            continue  # before the start, or not above the record before (hostile)
        start = off + 1
        tt = r.timestamp_type
        # magic 0 has no timestamp: (NOT_AVAILABLE, 0), as librdkafka reports it
        ts = (TIMESTAMP_NOT_AVAILABLE, 0) if tt < 0 else \
            (TIMESTAMP_LOG_APPEND_TIME if tt == TimestampType.LOG_APPEND_TIME
             else TIMESTAMP_CREATE_TIME, r.timestamp)
        yield off, r.key, r.value, ts


def decode_chunk(chunk: Chunk, out: List[ConsumedRecord]) -> None:
    """Append the messages of a chunk to ``out``, in offset order (see data_batches); on
    a malformed record, raises with the messages before it in ``out``."""
    part = chunk.part
    topic = part.topic
    partition = part.partition
    start = chunk.start
    used = 0
    for batch in data_batches(chunk):
        if used > CHUNK_DECOMPRESSED_BUDGET:
            raise BudgetSpent(start)
        before = len(out)
        if batch.magic >= 2:
            batch.decode_into(out, MESSAGES, topic, partition, start,
                              batch.partition_leader_epoch)
        else:
            for off, key, value, ts in _legacy_rows(batch, start):
                out.append(unchecked_message(topic, partition, off, key, value, None, None,
                                             ts, None, -1))
        if len(out) > before:
            # Offsets only go up, across batches too: a record at or below one already
            # handed out is skipped (hostile input; the Java client's rule).
            start = out[-1]._offset + 1
        used += batch.decompressed_size if batch.magic >= 2 else 0


def decode_columns(chunk: Chunk, cols: ColumnBuilder, limit: int) -> bool:
    """Add up to ``limit`` rows of a chunk to ``cols``; True when the chunk is used up
    (else ``chunk.start`` moved past what was added)."""
    part = chunk.part
    start = chunk.start
    cols.set_source(part.topic, part.partition)
    left = limit
    used = 0
    for batch in data_batches(chunk):
        if used > CHUNK_DECOMPRESSED_BUDGET:
            raise BudgetSpent(start)
        before = left
        rows = len(cols)
        try:
            if batch.magic >= 2:
                left -= batch.decode_columns(cols, start, left)
            else:
                for off, key, value, ts in _legacy_rows(batch, start):
                    if left <= 0:
                        break
                    cols.append_row(off, ts[1], ts[0], key, value)
                    left -= 1
        except OverflowError:
            # Full: the rows added stand (never half a row); resume after them.
            if len(cols) > rows:
                start = cols.last_offset + 1
                chunk.last_epoch = batch.partition_leader_epoch
            chunk.start = start
            raise ColumnsFull() from None
        if left < before:
            start = cols.last_offset + 1  # offsets only go up (see decode_chunk)
            chunk.last_epoch = batch.partition_leader_epoch
        used += batch.decompressed_size if batch.magic >= 2 else 0
        if left <= 0:
            # Full: resume after the last row next time (even if this batch looks done,
            # its remaining records, if any, are still to be read, or to fail).
            chunk.start = start
            return False
    return True
