"""Partition logs in Kafka's on-disk format (the formats are kafka_proto.logdir's).

A partition replica is a directory (``<topic>-<partition>``) of segments. A segment is
three files named by its base offset as 20 digits:

* ``<base>.log``: record batches back to back, exactly as on the wire;
* ``<base>.index``: (relative offset, position) entries, one per ``index.interval.bytes``
  of log (the offset is the indexed batch's last offset, as Kafka writes it);
* ``<base>.timeindex``: (timestamp, relative offset) entries, appended when an index
  entry is due and the largest timestamp so far grew.

Beside them, ``leader-epoch-checkpoint`` holds the leader epochs and their start offsets.
The index files are written for Kafka's tools and ``dump-log``; lookups use an in-memory
table of every batch (offsets, position, largest timestamp), rebuilt by scanning the log
files when a replica is opened, which also recovers a log cut short by a crash.

The newest segment is the active one (appended to); it rolls when it would pass
``segment.bytes`` or is older than ``segment.ms``. Retention deletes whole inactive
segments below the high watermark (by time: the segment's largest timestamp; by size:
oldest first while the log stays at least ``retention.bytes``). Compaction rewrites
inactive segments below the high watermark and the last stable offset keeping the latest
record of each key; a tombstone (null value) is dropped once it has stayed cleaned for
``delete.retention.ms``. Offsets never change: records keep theirs, batches whose records
all survive are kept byte for byte, the survivors of the others are re-batched in runs of
consecutive offsets with their original producer id, epoch and sequences.
"""
from __future__ import annotations

import bisect
import os
import shutil
import time
from typing import BinaryIO, Dict, Iterator, List, NamedTuple, Optional, Tuple

from kafka_proto.errors import KafkaProtocolError
from kafka_proto.logdir import (
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    OFFSET_INDEX_ENTRY_SIZE,
    TIME_INDEX_ENTRY_SIZE,
    TIME_INDEX_SUFFIX,
    EpochEntry,
    decode_leader_epoch_checkpoint,
    encode_leader_epoch_checkpoint,
    encode_offset_index_entry,
    encode_time_index_entry,
    segment_base_offset,
    segment_file_name,
)
from kafka_proto.records import (
    BatchHeader,
    RecordBatchBuilder,
    increment_sequence,
    iter_batch_headers,
    read_batch_header,
    read_batches,
)

from ._config import TopicSettings
from ._producer_state import ProducerStateTable

__all__ = [
    "LogReadResult",
    "Segment",
    "PartitionLog",
    "read_file",
    "replace_file",
]


def _now_ms() -> int:
    return int(time.time() * 1000)


def read_file(path: str) -> Optional[bytes]:
    """A whole file's bytes, or None if there is no such file."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def replace_file(path: str, data: bytes) -> None:
    """Replace a file atomically (written beside it, then renamed), as Kafka writes its
    checkpoints."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class LogReadResult(NamedTuple):
    """Whole batches of one segment file: send ``size`` bytes from ``position``."""

    file: BinaryIO          # the segment's open file (kept alive while the bytes are sent)
    position: int
    size: int
    first_offset: int       # base offset of the first batch
    next_offset: int        # offset after the last batch


class Segment:
    """One ``<base>.log`` with its two index files, open for appending and reading."""

    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int,
                 suffix: str = "") -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = os.path.join(directory, segment_file_name(base_offset) + suffix)
        self.index_path = os.path.join(directory,
                                       segment_file_name(base_offset, INDEX_SUFFIX) + suffix)
        self.timeindex_path = os.path.join(
            directory, segment_file_name(base_offset, TIME_INDEX_SUFFIX) + suffix)
        # Unbuffered files opened for appending: what is written is in the page cache at
        # once, where os.sendfile and os.pread see it.
        self.file = open(self.log_path, "a+b", buffering=0)
        self._index = open(self.index_path, "a+b", buffering=0)
        self._timeindex = open(self.timeindex_path, "a+b", buffering=0)
        self.size = 0
        # One row per batch, in file order.
        self.batch_bases: List[int] = []
        self.batch_lasts: List[int] = []
        self.batch_positions: List[int] = []
        self.batch_max_ts: List[int] = []
        self._index_offsets: List[int] = []     # absolute offsets of the index entries
        self._timeindex_offsets: List[int] = []
        self._timeindex_last_ts = -1
        self._bytes_since_index = 0
        self.max_timestamp = -1
        self._offset_of_max_timestamp = -1
        self.created_ms = _now_ms()
        #: When a cleaning pass first wrote this segment (tombstones expire from then).
        self.cleaned_ms: Optional[int] = None

    # -- appending -------------------------------------------------------------------
    def append(self, data, headers: List[BatchHeader]) -> None:
        """Append whole batches (``headers`` give their positions within ``data``)."""
        start = self.size
        _write_all(self.file.fileno(), data)
        for h in headers:
            self._account(h, start + h.position)
        self.size = start + len(data)

    def _account(self, h: BatchHeader, position: int) -> None:
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self._offset_of_max_timestamp = h.last_offset
        if self._bytes_since_index > self.index_interval_bytes:
            self._add_index_entry(h.last_offset, position)
            self._maybe_add_time_entry()
            self._bytes_since_index = 0
        self._bytes_since_index += h.size
        self.batch_bases.append(h.base_offset)
        self.batch_lasts.append(h.last_offset)
        self.batch_positions.append(position)
        self.batch_max_ts.append(h.max_timestamp)

    def _add_index_entry(self, offset: int, position: int) -> None:
        _write_all(self._index.fileno(),
                   encode_offset_index_entry(offset, position, self.base_offset))
        self._index_offsets.append(offset)

    def _maybe_add_time_entry(self) -> None:
        if self.max_timestamp > self._timeindex_last_ts and self._offset_of_max_timestamp >= 0:
            _write_all(self._timeindex.fileno(), encode_time_index_entry(
                self.max_timestamp, self._offset_of_max_timestamp, self.base_offset))
            self._timeindex_offsets.append(self._offset_of_max_timestamp)
            self._timeindex_last_ts = self.max_timestamp

    def seal(self) -> None:
        """The segment stops being active: its last time-index entry is written."""
        self._maybe_add_time_entry()

    # -- reading ---------------------------------------------------------------------
    @property
    def next_offset(self) -> int:
        return self.batch_lasts[-1] + 1 if self.batch_lasts else self.base_offset

    @property
    def is_empty(self) -> bool:
        return not self.batch_bases

    def batch_end(self, i: int) -> int:
        return self.batch_positions[i + 1] if i + 1 < len(self.batch_positions) else self.size

    def read(self, offset: int, max_bytes: int, upper: int,
             min_one: bool) -> Optional[LogReadResult]:
        """Whole batches from the one holding ``offset`` (or the next one after it), each
        wholly below ``upper``, within ``max_bytes`` (the first batch always, if
        ``min_one``). None if there is no such batch here."""
        lasts = self.batch_lasts
        positions = self.batch_positions
        i = bisect.bisect_left(lasts, offset)
        n = len(lasts)
        if i >= n or lasts[i] >= upper:
            return None
        position = positions[i]
        # Batches i..j-1 are sent: wholly below upper, and ending within max_bytes.
        below_upper = bisect.bisect_left(lasts, upper, i)
        limit = position + max_bytes
        starts_within = bisect.bisect_right(positions, limit, i)
        if starts_within < n:
            fit = starts_within - 1     # the batch starting last within ends after limit
        else:
            fit = n if self.size <= limit else n - 1
        j = min(fit, below_upper)
        if j <= i:
            if not min_one:
                return None
            j = i + 1
        end = self.batch_end(j - 1)
        return LogReadResult(self.file, position, end - position, self.batch_bases[i],
                             lasts[j - 1] + 1)

    def read_bytes(self, position: int = 0, size: int = -1) -> bytes:
        if size < 0:
            size = self.size - position
        return os.pread(self.file.fileno(), size, position)

    def offset_for_timestamp(self, timestamp: int,
                             start: int = 0) -> Optional[Tuple[int, int]]:
        """``(offset, timestamp)`` of the first record at or after ``timestamp``, among
        those at or after offset ``start`` (the log start)."""
        for i, ts in enumerate(self.batch_max_ts):
            if ts < timestamp or self.batch_lasts[i] < start:
                continue
            position = self.batch_positions[i]
            data = self.read_bytes(position, self.batch_end(i) - position)
            for batch in read_batches(data, check_crc=False):
                if batch.is_control:
                    continue
                for record in batch:
                    if record.timestamp >= timestamp and record.offset >= start:
                        return record.offset, record.timestamp
        return None

    def offset_of_max_timestamp(self) -> int:
        """The offset of the first record carrying this segment's largest timestamp, or -1:
        Kafka looks the record up inside its batch (since 3.7.1, KAFKA-16310), so a batch
        whose later records are older does not answer with its last offset."""
        if self._offset_of_max_timestamp < 0:
            return -1
        i = bisect.bisect_left(self.batch_lasts, self._offset_of_max_timestamp)
        position = self.batch_positions[i]
        data = self.read_bytes(position, self.batch_end(i) - position)
        for batch in read_batches(data, check_crc=False):
            for record in batch:
                if record.timestamp == self.max_timestamp:
                    return record.offset
        return self._offset_of_max_timestamp

    # -- truncation and life cycle ---------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Drop the batches whose last offset is at or after ``offset``."""
        i = bisect.bisect_left(self.batch_lasts, offset)
        if i >= len(self.batch_lasts):
            return
        self.size = self.batch_positions[i]
        os.ftruncate(self.file.fileno(), self.size)
        del self.batch_bases[i:], self.batch_lasts[i:], self.batch_positions[i:]
        del self.batch_max_ts[i:]
        keep = bisect.bisect_left(self._index_offsets, self.next_offset)
        del self._index_offsets[keep:]
        os.ftruncate(self._index.fileno(), keep * OFFSET_INDEX_ENTRY_SIZE)
        keep = bisect.bisect_left(self._timeindex_offsets, self.next_offset)
        del self._timeindex_offsets[keep:]
        os.ftruncate(self._timeindex.fileno(), keep * TIME_INDEX_ENTRY_SIZE)
        self.max_timestamp = max(self.batch_max_ts, default=-1)
        self._timeindex_last_ts = -1
        self._offset_of_max_timestamp = -1
        for last, ts in zip(self.batch_lasts, self.batch_max_ts):
            if ts == self.max_timestamp > -1:   # its first batch, as _account keeps
                self._offset_of_max_timestamp = last
                break
        self._bytes_since_index = 0

    def close(self) -> None:
        # The log file itself stays open while a fetch still sends from it: it closes
        # when the last reference goes.
        self._index.close()
        self._timeindex.close()

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path, self.timeindex_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def rename_to_final(self) -> None:
        """Move a segment written under a suffix (``.cleaned``) over the final names."""
        for attr in ("log_path", "index_path", "timeindex_path"):
            path = getattr(self, attr)
            final = path.rsplit(".", 1)[0]
            os.replace(path, final)
            setattr(self, attr, final)

    @classmethod
    def load(cls, directory: str, base_offset: int,
             index_interval_bytes: int) -> "Segment":
        """Open an existing segment: scan its batches (a torn tail is cut off) and write
        its index files afresh."""
        seg = cls(directory, base_offset, index_interval_bytes)
        data = seg.read_bytes(0, os.fstat(seg.file.fileno()).st_size)
        good = 0
        headers: List[BatchHeader] = []
        for h in iter_batch_headers(data):
            try:
                next(read_batches(memoryview(data)[h.position:h.position + h.size],
                                  check_crc=True, allow_truncated=False))
            except KafkaProtocolError:
                break
            headers.append(h)
            good = h.position + h.size
        if good < len(data):
            os.ftruncate(seg.file.fileno(), good)
        os.ftruncate(seg._index.fileno(), 0)
        os.ftruncate(seg._timeindex.fileno(), 0)
        for h in headers:
            seg._account(h, h.position)
        seg.size = good
        seg.created_ms = int(os.stat(seg.log_path).st_mtime * 1000)
        return seg


class PartitionLog:
    """The segments of one partition replica, its offsets, epochs and producer state.

    ``on_change`` is called whenever the log start offset moves (retention, DeleteRecords)
    so the broker can write its checkpoint.
    """

    def __init__(self, directory: str, topic: str, partition: int, settings: TopicSettings,
                 log_start_offset: int = 0) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.settings = settings
        os.makedirs(directory, exist_ok=True)
        self.producer_state = ProducerStateTable()
        self.high_watermark = 0
        self.epochs: List[EpochEntry] = []
        #: Offsets below this were already cleaned by compaction.
        self.cleaned_offset = 0
        self.segments: List[Segment] = []
        self._load(log_start_offset)

    # -- opening ---------------------------------------------------------------------
    def _load(self, log_start_offset: int) -> None:
        names = sorted(os.listdir(self.directory))
        for name in names:
            path = os.path.join(self.directory, name)
            if name.endswith((".cleaned", ".deleted", ".tmp")):
                os.unlink(path)   # an interrupted cleaning or deletion: redo it later
            elif name.endswith(".swap"):
                os.replace(path, path[:-len(".swap")])
        for name in sorted(os.listdir(self.directory)):
            if name.endswith(LOG_SUFFIX) and name[:-len(LOG_SUFFIX)].isdigit():
                self.segments.append(Segment.load(self.directory, segment_base_offset(name),
                                                  self.settings.index_interval_bytes))
        self.segments = [s for s in self.segments if not s.is_empty] or self.segments[-1:]
        if not self.segments:
            self.segments.append(Segment(self.directory, max(log_start_offset, 0),
                                         self.settings.index_interval_bytes))
        for seg in self.segments[:-1]:
            seg.seal()
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        data = read_file(os.path.join(self.directory, LEADER_EPOCH_CHECKPOINT))
        self.epochs = [] if data is None else decode_leader_epoch_checkpoint(data)
        self._truncate_epochs_after(self.end_offset)
        self.rebuild_producer_state()

    def rebuild_producer_state(self) -> None:
        """Replay every batch header (after a load or a truncation)."""
        self.producer_state.clear()
        for seg in self.segments:
            data = seg.read_bytes()
            for h in iter_batch_headers(data):
                self.producer_state.update(h, _control_type(data, h))
        self.producer_state.drop_aborted_before(self.log_start_offset)

    # -- offsets ---------------------------------------------------------------------
    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def end_offset(self) -> int:
        """The log end offset: the offset the next record gets."""
        return self.active.next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def last_stable_offset(self) -> int:
        unstable = self.producer_state.first_unstable_offset(self.high_watermark)
        if unstable is None:
            return self.high_watermark
        return min(unstable, self.high_watermark)

    # -- appending -------------------------------------------------------------------
    def append(self, data, headers: List[BatchHeader], now_ms: Optional[int] = None) -> None:
        """Append batches whose offsets are already stamped (``headers`` give their
        positions in ``data``). The roll decision is made batch by batch, so a follower
        appending a whole fetch response rolls where its leader rolled."""
        if not headers:
            return
        if now_ms is None:
            now_ms = _now_ms()
        first = headers[0].base_offset
        if first < self.end_offset:
            raise ValueError(f"{self.topic}-{self.partition}: append at {first} below the "
                             f"log end offset {self.end_offset}")
        view = memoryview(data)
        run: List[BatchHeader] = []
        run_size = 0
        for h in headers:
            if self._must_roll(run_size + h.size, now_ms):
                self._write_run(view, run)
                run, run_size = [], 0
                self.roll(h.base_offset)
            elif self.active.is_empty and not run and self.active.base_offset != h.base_offset:
                self._restart_active(h.base_offset)
            run.append(h)
            run_size += h.size
        self._write_run(view, run)
        for h in headers:
            self.producer_state.update(h, _control_type(data, h))
            if h.partition_leader_epoch >= 0 and (
                    not self.epochs or h.partition_leader_epoch > self.epochs[-1][0]):
                self.assign_epoch(h.partition_leader_epoch, h.base_offset)

    def _write_run(self, view: memoryview, run: List[BatchHeader]) -> None:
        if not run:
            return
        start = run[0].position
        end = run[-1].position + run[-1].size
        self.active.append(view[start:end], [h.at(h.position - start) for h in run])

    def _must_roll(self, incoming: int, now_ms: int) -> bool:
        active = self.active
        if active.is_empty:
            return False
        return active.size + incoming > self.settings.segment_bytes or \
            now_ms - active.created_ms >= self.settings.segment_ms

    def _restart_active(self, base_offset: int) -> None:
        # An empty active segment whose base no longer matches (the log start moved or
        # offsets skip ahead): start it afresh at the right offset.
        self.active.delete()
        self.segments[-1] = Segment(self.directory, base_offset,
                                    self.settings.index_interval_bytes)

    def roll(self, next_offset: Optional[int] = None) -> None:
        """Start a new active segment (no-op if the active one is empty)."""
        if self.active.is_empty:
            return
        self.active.seal()
        base = self.end_offset if next_offset is None else next_offset
        self.segments.append(Segment(self.directory, base, self.settings.index_interval_bytes))

    # -- reading ---------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, upper: int,
             min_one: bool = True) -> Optional[LogReadResult]:
        """Whole batches from ``offset`` (one segment's worth at most) below ``upper``."""
        segments = self.segments
        i = len(segments) - 1
        while i > 0 and segments[i].base_offset > offset:
            i -= 1   # from the newest: consumers mostly read the active segment
        for seg in segments[i:]:
            result = seg.read(offset, max_bytes, upper, min_one)
            if result is not None:
                return result
            if seg.batch_lasts and seg.batch_lasts[-1] >= offset:
                return None   # the next batch is at or above upper, or too big
        return None

    def read_all_bytes(self) -> Iterator[Tuple[Segment, bytes]]:
        for seg in self.segments:
            yield seg, seg.read_bytes()

    def offset_for_timestamp(self, timestamp: int) -> Optional[Tuple[int, int]]:
        for seg in self.segments:
            if seg.max_timestamp >= timestamp:
                found = seg.offset_for_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return found
        return None

    def max_timestamp_offset(self) -> Tuple[int, int]:
        """``(offset, timestamp)`` of the record with the largest timestamp (ListOffsets
        MAX_TIMESTAMP), or ``(-1, -1)``."""
        best = (-1, -1)
        for seg in self.segments:
            if seg.max_timestamp > best[1]:
                best = (seg.offset_of_max_timestamp(), seg.max_timestamp)
        return best

    # -- leader epochs ----------------------------------------------------------------
    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (a new leader's log end).
        Earlier epochs that start there too are dropped, as Kafka's epoch cache does:
        they hold no record, and kept, an empty log led again answered a follower's
        fetch in such an epoch with a divergence at offset 0 forever (the follower,
        with nothing to truncate, asked the same again; acks=all writes never
        completed)."""
        if self.epochs and epoch <= self.epochs[-1][0]:
            return
        while self.epochs and self.epochs[-1][1] >= start_offset:
            self.epochs.pop()
        self.epochs.append(EpochEntry(epoch, start_offset))
        self._write_epochs()

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1][0] if self.epochs else -1

    def end_offset_for_epoch(self, epoch: int) -> Tuple[int, int]:
        """OffsetForLeaderEpoch: ``(largest epoch <= epoch, its end offset)``; the end
        offset of the latest epoch is the log end. ``(-1, -1)`` when no epoch is known.
        An epoch older than every epoch known ends where the first known one starts, as
        Kafka answers it (``(epoch, that start)``): a replica that was a follower of an
        empty log knows only the epoch it leads since, and a consumer at the start of
        that log, positioned in an older epoch, has lost nothing."""
        if not self.epochs:
            return -1, -1
        if epoch < self.epochs[0][0]:
            return epoch, self.epochs[0][1]
        for i in range(len(self.epochs) - 1, -1, -1):
            e, _start = self.epochs[i]
            if e <= epoch:
                if i == len(self.epochs) - 1:
                    return e, self.end_offset
                return e, self.epochs[i + 1][1]
        return -1, -1

    def _truncate_epochs_after(self, offset: int) -> None:
        before = len(self.epochs)
        while self.epochs and self.epochs[-1][1] >= offset and len(self.epochs) > 1:
            self.epochs.pop()
        if self.epochs and self.epochs[-1][1] > offset:
            self.epochs.pop()
        if len(self.epochs) != before:
            self._write_epochs()

    def _write_epochs(self) -> None:
        replace_file(os.path.join(self.directory, LEADER_EPOCH_CHECKPOINT),
                     encode_leader_epoch_checkpoint(self.epochs))

    # -- truncation ------------------------------------------------------------------
    def truncate_for_divergence(self, epoch: int, end_offset: int) -> bool:
        """A leader answered this follower's fetch with a diverging epoch: its ``epoch``
        (the largest it has at or below the one fetched in) ends at ``end_offset``
        (-1, -1: it knows no epoch; what is below the high watermark stays). As Kafka's
        follower does, cut at the smaller of that and this log's own end of ``epoch``: a
        log holding epochs the leader never had (it led them alone) keeps none of
        them, where cutting at the leader's end alone could leave them in place and
        the same divergence answered on every fetch. Whether the log changed."""
        before = (self.end_offset, self.latest_epoch)
        if epoch < 0 or end_offset < 0:
            cut = self.high_watermark
        else:
            own_epoch, own_end = self.end_offset_for_epoch(epoch)
            cut = end_offset if own_epoch < 0 else min(end_offset, own_end)
        cut = min(cut, self.end_offset)
        self.truncate_to(cut)
        # An epoch this replica led without writing starts at its log end: no record cut
        # drops it, and kept as the latest it was named by every fetch, answered with the
        # same divergence (the follower never caught up). Kafka's truncation drops the
        # epochs starting at or after the cut too.
        self._truncate_epochs_after(cut)
        return (self.end_offset, self.latest_epoch) != before

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and after ``offset`` (a follower diverged from its leader)."""
        if offset >= self.end_offset:
            return
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
        if self.segments[-1].base_offset >= offset:
            seg = self.segments.pop()
            seg.delete()
            self.segments.append(Segment(self.directory, max(offset, self.log_start_offset),
                                         self.settings.index_interval_bytes))
        else:
            self.active.truncate_to(offset)
        self.high_watermark = min(self.high_watermark, self.end_offset)
        self._truncate_epochs_after(self.end_offset)
        self.rebuild_producer_state()

    def reset_to(self, offset: int) -> None:
        """Drop the whole log and start it empty at ``offset`` (a follower whose fetch
        offset is below its leader's log start)."""
        for seg in self.segments:
            seg.delete()
        self.segments = [Segment(self.directory, offset, self.settings.index_interval_bytes)]
        self.log_start_offset = offset
        self.high_watermark = max(self.high_watermark, offset)
        self.epochs = []
        self._write_epochs()
        self.producer_state.clear()

    def delete_records(self, offset: int) -> bool:
        """Move the log start offset up to ``offset`` (DeleteRecords), deleting the
        segments wholly below it. True if it moved."""
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
            self.segments.pop(0).delete()
        if self.segments[0].is_empty and self.segments[0].base_offset < offset:
            self.segments[0].delete()
            self.segments[0] = Segment(self.directory, offset, self.settings.index_interval_bytes)
        self.producer_state.drop_aborted_before(offset)
        return True

    def follow_log_start(self, leader_log_start: int) -> bool:
        """A follower moves its log start with its leader's (retention, DeleteRecords)."""
        return self.delete_records(min(leader_log_start, self.high_watermark))

    # -- retention -------------------------------------------------------------------
    def apply_retention(self, now_ms: Optional[int] = None) -> int:
        """Delete the inactive segments retention allows; returns how many."""
        if not self.settings.cleanup_delete:
            return 0
        if now_ms is None:
            now_ms = _now_ms()
        s = self.settings
        deleted = 0
        total = self.size_bytes

        def deletable() -> bool:
            # Inactive and wholly below the high watermark.
            return len(self.segments) > 1 and self.segments[1].base_offset <= self.high_watermark

        while deletable():
            seg = self.segments[0]
            expired = s.retention_ms >= 0 and seg.max_timestamp >= 0 and \
                now_ms - seg.max_timestamp > s.retention_ms
            oversized = s.retention_bytes >= 0 and total - seg.size >= s.retention_bytes
            if not (expired or oversized):
                break
            total -= seg.size
            self.segments.pop(0).delete()
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            deleted += 1
        if deleted:
            self.producer_state.drop_aborted_before(self.log_start_offset)
        return deleted

    # -- compaction ------------------------------------------------------------------
    def cleanable_segments(self, now_ms: int) -> List[Segment]:
        """Inactive segments below the high watermark and the last stable offset, older
        than ``min.compaction.lag.ms``."""
        bound = self.last_stable_offset()
        out = []
        for seg, nxt in zip(self.segments, self.segments[1:]):
            if nxt.base_offset > bound:
                break
            lag = self.settings.min_compaction_lag_ms
            if lag > 0 and seg.max_timestamp >= 0 and now_ms - seg.max_timestamp < lag:
                break
            out.append(seg)
        return out

    def dirty_ratio(self, now_ms: int) -> float:
        segs = self.cleanable_segments(now_ms)
        total = sum(s.size for s in segs)
        if not total:
            return 0.0
        dirty = sum(s.size for s in segs if s.next_offset > self.cleaned_offset)
        return dirty / total

    def compact(self, now_ms: Optional[int] = None, force: bool = False) -> int:
        """One cleaning pass (``cleanup.policy`` with compact); returns records removed.

        Runs when the dirty part reaches ``min.cleanable.dirty.ratio`` (always if
        ``force``)."""
        if not self.settings.cleanup_compact:
            return 0
        if now_ms is None:
            now_ms = _now_ms()
        segs = self.cleanable_segments(now_ms)
        if not segs:
            return 0
        if not force and self.dirty_ratio(now_ms) < self.settings.min_cleanable_dirty_ratio:
            # Tombstones may still be due to go: a pass for them alone.
            if not any(s.cleaned_ms is not None and
                       now_ms - s.cleaned_ms >= self.settings.delete_retention_ms
                       for s in segs):
                return 0
        # The latest offset of every key in the cleanable range. Records of aborted
        # transactions are no value of their key (Kafka's cleaner leaves them out of its
        # map and discards them): counted, they made the committed value before them go.
        aborted = self.producer_state.aborted

        def is_aborted(batch) -> bool:
            return batch.is_transactional and not batch.is_control and any(
                a.producer_id == batch.producer_id
                and a.first_offset <= batch.base_offset <= a.last_offset for a in aborted)

        latest: Dict[bytes, int] = {}
        contents = []
        for seg in segs:
            data = seg.read_bytes()
            contents.append(data)
            for batch in read_batches(data, check_crc=False):
                if batch.is_control or is_aborted(batch):
                    continue
                for record in batch:
                    if record.key is not None:
                        latest[record.key] = record.offset
        removed = 0
        replaced: Dict[int, Optional[Segment]] = {}
        for seg, data in zip(segs, contents):
            tombstones_expire = seg.cleaned_ms is not None and \
                now_ms - seg.cleaned_ms >= self.settings.delete_retention_ms
            out = bytearray()
            headers: List[BatchHeader] = []
            changed = False
            pieces: List[bytes]
            for batch in read_batches(data, check_crc=False):
                if is_aborted(batch):
                    pieces, dropped = [], batch.last_offset - batch.base_offset + 1
                else:
                    pieces, dropped = _clean_batch(batch, latest, tombstones_expire)
                removed += dropped
                changed = changed or dropped > 0
                for piece in pieces:
                    headers.append(read_batch_header(piece).at(len(out)))
                    out += piece
            if not changed:
                if seg.cleaned_ms is None:
                    seg.cleaned_ms = now_ms
                continue
            if not headers:
                replaced[seg.base_offset] = None
                continue
            new = Segment(self.directory, seg.base_offset, self.settings.index_interval_bytes,
                          suffix=".cleaned")
            new.append(out, headers)
            new.seal()
            new.created_ms = seg.created_ms
            new.cleaned_ms = seg.cleaned_ms if seg.cleaned_ms is not None else now_ms
            replaced[seg.base_offset] = new
        self.cleaned_offset = max(self.cleaned_offset, segs[-1].next_offset)
        if not replaced:
            return removed
        kept: List[Segment] = []
        for seg in self.segments:
            if seg.base_offset not in replaced:
                kept.append(seg)
                continue
            replacement = replaced[seg.base_offset]
            seg.delete()
            if replacement is not None:
                replacement.rename_to_final()
                kept.append(replacement)
        self.segments = kept
        return removed

    # -- life cycle ------------------------------------------------------------------
    def close(self) -> None:
        for seg in self.segments:
            seg.close()

    def delete(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def _control_type(data, h: BatchHeader) -> Optional[int]:
    """The control record type of a control batch (ABORT 0, COMMIT 1), else None."""
    if not h.is_control:
        return None
    try:
        batch = next(read_batches(memoryview(data)[h.position:h.position + h.size],
                                  check_crc=False))
        record = batch.control_record()
    except (KafkaProtocolError, StopIteration):
        return None
    return None if record is None else record.type


def _clean_batch(batch, latest: Dict[bytes, int],
                 tombstones_expire: bool) -> Tuple[List[bytes], int]:
    """The bytes that replace one batch after cleaning, and how many records it lost."""
    if batch.is_control:
        return [bytes(batch.raw)], 0
    records = batch.records_list()
    keep = [r for r in records
            if r.key is not None and latest.get(r.key) == r.offset
            and not (r.value is None and tombstones_expire)]
    dropped = len(records) - len(keep)
    if not dropped:
        return [bytes(batch.raw)], 0
    # Survivors in runs of consecutive offsets: one batch per run keeps every offset.
    runs: List[list] = []
    for r in keep:
        if runs and runs[-1][-1].offset + 1 == r.offset:
            runs[-1].append(r)
        else:
            runs.append([r])
    pieces = []
    for run in runs:
        delta = run[0].offset - batch.base_offset
        seq = batch.base_sequence
        builder = RecordBatchBuilder(
            compression=batch.compression,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=-1 if seq < 0 else increment_sequence(seq, delta),
            transactional=batch.is_transactional,
            partition_leader_epoch=batch.partition_leader_epoch,
            timestamp_type=batch.timestamp_type)
        for r in run:
            builder.append(r.value, key=r.key, timestamp=r.timestamp, headers=r.headers)
        pieces.append(builder.build(run[0].offset))
    return pieces, dropped
