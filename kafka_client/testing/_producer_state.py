"""Idempotent and transactional producer state of one partition replica.

For each producer id: its epoch, the sequence ranges and offsets of its last five batches
(a retried batch that matches one of them is a duplicate, answered with the offsets it
got the first time), and the first offset of its open transaction. Every replica keeps
this table from the batches it appends, leader or follower, so a new leader already knows
the sequences its predecessor accepted; after a truncation the table is rebuilt from the
log's batch headers.

The rules are Kafka's: a lower epoch is fenced (INVALID_PRODUCER_EPOCH); a new epoch must
start at sequence 0; within an epoch each batch must start right after the last one
(sequences wrap from 2**31-1 to 0), anything else is OUT_OF_ORDER_SEQUENCE_NUMBER; a
producer the replica has no entry for is accepted at any sequence (Kafka 2.5+: its state
may be gone with the batches retention or DeleteRecords removed, or the topic was
deleted and created again under a producer that goes on).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, Iterable, List, NamedTuple, Optional, Tuple

from kafka_proto.errors import ErrorCode
from kafka_proto.records import BatchHeader, increment_sequence

__all__ = ["ProducerBatch", "ProducerEntry", "ProducerStateTable", "AbortedTxn"]

#: Batches remembered per producer for duplicate detection (the most a client keeps in
#: flight with idempotence on).
BATCHES_KEPT = 5


class ProducerBatch(NamedTuple):
    """What is remembered of an appended batch."""

    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int
    max_timestamp: int


class AbortedTxn(NamedTuple):
    """An aborted transaction, as Fetch reports it to read_committed consumers."""

    producer_id: int
    first_offset: int
    last_offset: int     # offset of the ABORT marker


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: Deque[ProducerBatch] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    #: First offset of the producer's open transaction in this partition, or None.
    txn_first_offset: Optional[int] = None
    coordinator_epoch: int = -1
    last_timestamp: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


class ProducerStateTable:
    """Producer entries of one partition replica, kept from the batches it appends."""

    def __init__(self) -> None:
        self.producers: Dict[int, ProducerEntry] = {}
        self.aborted: List[AbortedTxn] = []
        #: transactions whose marker is written but maybe not replicated yet: (first
        #: offset, marker offset). Kafka keeps them unstable until the high watermark
        #: passes the marker, so the last stable offset never stops at a marker.
        self.completing: List[Tuple[int, int]] = []

    def clear(self) -> None:
        self.producers.clear()
        self.aborted.clear()
        self.completing.clear()

    def check(self, header: BatchHeader) -> Tuple[int, Optional[ProducerBatch]]:
        """Whether a leader may append this batch: ``(error code, duplicate)``. A
        duplicate of a remembered batch gives ``(NONE, that batch)``: answer with its
        offsets and append nothing."""
        pid = header.producer_id
        if pid < 0:
            return ErrorCode.NONE, None
        entry = self.producers.get(pid)
        seq = header.base_sequence
        if entry is None:
            return ErrorCode.NONE, None
        if header.producer_epoch < entry.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, None
        if header.producer_epoch > entry.epoch:
            if seq != 0:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None
            return ErrorCode.NONE, None
        for batch in entry.batches:
            if batch.first_sequence == seq and batch.last_sequence == header.last_sequence:
                return ErrorCode.NONE, batch
        if not entry.batches:
            if seq != 0:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None
            return ErrorCode.NONE, None
        if seq != increment_sequence(entry.last_sequence, 1):
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return ErrorCode.NONE, None

    def update(self, header: BatchHeader, control_type: Optional[int] = None) -> None:
        """Account for a batch appended at ``header.base_offset`` (leader, follower or
        log load). ``control_type`` is the control record's type for a control batch
        (0 ABORT, 1 COMMIT)."""
        pid = header.producer_id
        if pid < 0:
            return
        entry = self.producers.get(pid)
        if entry is None or header.producer_epoch != entry.epoch:
            old = entry
            entry = ProducerEntry(pid, header.producer_epoch)
            if old is not None:
                entry.txn_first_offset = old.txn_first_offset
                entry.coordinator_epoch = old.coordinator_epoch
            self.producers[pid] = entry
        entry.last_timestamp = header.max_timestamp
        if header.is_control:
            if control_type is not None and entry.txn_first_offset is not None:
                if control_type == 0:
                    self.aborted.append(AbortedTxn(pid, entry.txn_first_offset,
                                                   header.base_offset))
                self.completing.append((entry.txn_first_offset, header.base_offset))
            entry.txn_first_offset = None
            return
        if header.base_sequence >= 0:
            entry.batches.append(ProducerBatch(header.base_sequence, header.last_sequence,
                                               header.base_offset, header.last_offset,
                                               header.max_timestamp))
        if header.is_transactional and entry.txn_first_offset is None:
            entry.txn_first_offset = header.base_offset

    def first_unstable_offset(self, high_watermark: int) -> Optional[int]:
        """Lowest first offset of a transaction still open, or ended by a marker the high
        watermark has not passed yet (the last stable offset's bound)."""
        if self.completing:
            self.completing = [c for c in self.completing if c[1] >= high_watermark]
        offsets = [e.txn_first_offset for e in self.producers.values()
                   if e.txn_first_offset is not None]
        offsets.extend(first for first, _marker in self.completing)
        return min(offsets) if offsets else None

    def aborted_between(self, start: int, end: int) -> List[AbortedTxn]:
        """Aborted transactions overlapping the offsets ``[start, end)``."""
        return [a for a in self.aborted if a.last_offset >= start and a.first_offset < end]

    def open_transactions(self) -> Dict[int, int]:
        """producer id -> first offset, for the producers with an open transaction."""
        return {pid: e.txn_first_offset for pid, e in self.producers.items()
                if e.txn_first_offset is not None}

    def drop_aborted_before(self, offset: int) -> None:
        """Forget aborted transactions wholly below ``offset`` (deleted by retention)."""
        self.aborted = [a for a in self.aborted if a.last_offset >= offset]

    def describe(self) -> Iterable[ProducerEntry]:
        return self.producers.values()
