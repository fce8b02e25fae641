"""One partition replica on one broker: its log, and its part in replication.

As leader it assigns offsets, checks producer sequences, tracks what each follower has
(the offset of its last Fetch), keeps the in-sync replica set (a follower joins once it
reaches the high watermark and leaves after ``replica.lag.time.max.ms`` without catching
up to the log end) and moves the high watermark to what every in-sync replica has, which
completes the produce requests waiting for acks=all. As follower it is fed by the
broker's replica fetcher.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, NamedTuple, Optional, Tuple

from kafka_proto.errors import (
    CompressionError,
    CrcMismatchError,
    ErrorCode,
    KafkaProtocolError,
    TruncatedDataError,
)
from kafka_proto.records import (
    BatchHeader,
    ColumnBuilder,
    RecordBatch,
    RecordBatchBuilder,
    iter_batch_headers,
    read_batch_header,
    read_batches,
    stamp_batch,
)
from ._controller import PartitionInfo, TopicInfo
from .storage import PartitionLog

if TYPE_CHECKING:  # pragma: no cover
    from ._broker import Broker

__all__ = ["Replica", "AppendResult"]


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class FollowerState:
    """What the leader knows of one follower, from its Fetch requests."""

    log_end_offset: int = -1          # its fetch offset; -1 until it fetched
    log_start_offset: int = -1        # its log start, as its last Fetch gave it
    last_caught_up_ms: int = 0        # last time it had everything the leader had
    leader_end_at_last_fetch: int = -1
    last_fetch_ms: int = 0
    #: The high watermark the last Fetch answer gave it (-1: none yet), KIP-392.
    last_sent_high_watermark: int = -1


class AppendResult(NamedTuple):
    error: int
    base_offset: int = -1
    log_append_time: int = -1
    message: Optional[str] = None
    #: The offset the high watermark must reach for acks=all (-1: nothing to wait for).
    required_offset: int = -1


#: A start offset above every record's: decode_columns then parses (checks) every record
#: and keeps none.
_PAST_EVERY_OFFSET = (1 << 63) - 1


def _recompressed(batch: RecordBatch, header: BatchHeader, codec: int,
                  level: Optional[int]) -> bytes:
    """A produced batch as Kafka's LogValidator writes it when the topic's compression.type
    names another codec: its records in a new batch of that codec at the topic's level
    for it (KIP-390), with the producer's id, epoch, base sequence, transactional flag,
    timestamp type and record timestamps."""
    builder = RecordBatchBuilder(compression=codec, compression_level=level,
                                 producer_id=header.producer_id,
                                 producer_epoch=header.producer_epoch,
                                 base_sequence=header.base_sequence,
                                 transactional=batch.is_transactional,
                                 timestamp_type=int(batch.timestamp_type))
    for record in batch:
        builder.append(record.value, key=record.key, timestamp=record.timestamp,
                       headers=record.headers)
    return builder.build()


def _unreadable_batch(view: memoryview, exc: KafkaProtocolError) -> "AppendResult":
    """The answer to a produced batch that read_batches refused, as Kafka answers it."""
    if isinstance(exc, (CrcMismatchError, TruncatedDataError)):
        return AppendResult(ErrorCode.CORRUPT_MESSAGE, message=str(exc))
    if isinstance(exc, CompressionError):   # an unknown codec id
        return AppendResult(ErrorCode.UNKNOWN_SERVER_ERROR, message=str(exc))
    try:
        header = read_batch_header(view)
    except KafkaProtocolError:
        return AppendResult(ErrorCode.CORRUPT_MESSAGE, message=str(exc))
    if header.size != len(view):
        return AppendResult(ErrorCode.CORRUPT_MESSAGE, message=str(exc))
    # One whole v2 batch whose CRC matched (read_batches checks it first): its header lies
    # about its records, which Kafka's LogValidator refuses with INVALID_RECORD.
    return AppendResult(ErrorCode.INVALID_RECORD, message=str(exc))


def _unreadable_records(batch) -> Optional["AppendResult"]:
    """Kafka's checks of a produced batch's records (LogValidator): the count against the
    offsets, then every record parsed. A record that does not parse, or records left over,
    are INVALID_RECORD; a payload that does not decompress is Kafka's "Failed to decompress
    record stream", a KafkaException its ReplicaManager answers UNKNOWN_SERVER_ERROR."""
    count = batch.records_count
    if count <= 0 or count != batch.last_offset_delta + 1:
        return AppendResult(ErrorCode.INVALID_RECORD,
                            message=f"Inconsistent batch offset range [0, "
                                    f"{batch.last_offset_delta}] and count of records {count}")
    try:
        batch.decode_columns(ColumnBuilder(), _PAST_EVERY_OFFSET)
    except CompressionError as exc:
        return AppendResult(ErrorCode.UNKNOWN_SERVER_ERROR,
                            message=f"Failed to decompress record stream: {exc}")
    except KafkaProtocolError as exc:
        return AppendResult(ErrorCode.INVALID_RECORD, message=str(exc))
    return None


class _Waiter(NamedTuple):
    required_offset: int
    callback: Callable[[int], None]


class Replica:
    """A partition replica hosted by ``broker``."""

    def __init__(self, broker: "Broker", topic: TopicInfo, part: PartitionInfo,
                 log: PartitionLog) -> None:
        self.broker = broker
        self.topic = topic
        self.part = part
        self.log = log
        self.is_leader = False
        self.leader_epoch = -1
        self.followers: Dict[int, FollowerState] = {}
        self._waiters: List[_Waiter] = []

    @property
    def key(self) -> Tuple[str, int]:
        return self.part.key

    # -- role changes ----------------------------------------------------------------
    def apply(self, part: PartitionInfo) -> None:
        """Act on the controller's current state of the partition."""
        self.part = part
        me = self.broker.broker_id
        if part.leader == me:
            if not self.is_leader or self.leader_epoch != part.leader_epoch:
                self._become_leader()
            else:
                self._isr_changed()
        else:
            self._become_follower()

    def _become_leader(self) -> None:
        part = self.part
        self.is_leader = True
        self.leader_epoch = part.leader_epoch
        log = self.log
        log.assign_epoch(part.leader_epoch, log.end_offset)
        # What the previous leader had committed, every ISR member has.
        log.high_watermark = max(log.high_watermark, min(part.high_watermark, log.end_offset))
        now = _now_ms()
        self.followers = {
            r: FollowerState(last_caught_up_ms=now if r in part.isr else 0)
            for r in part.replicas if r != self.broker.broker_id}
        self.broker.fetchers.remove_partition(self.key)
        self._advance_high_watermark()
        self.broker.notify_data(self.key)

    def _become_follower(self) -> None:
        if self.is_leader:
            self._fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.is_leader = False
        self.leader_epoch = self.part.leader_epoch
        self.followers = {}
        if self.part.leader >= 0:
            self.broker.fetchers.add_partition(self.key, self.part.leader)
        else:
            self.broker.fetchers.remove_partition(self.key)
        self.broker.notify_data(self.key)

    def _isr_changed(self) -> None:
        self._advance_high_watermark()
        self._complete_waiters()

    def close(self) -> None:
        self._fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.log.close()

    # -- leader: epochs --------------------------------------------------------------
    def check_leader(self, current_leader_epoch: int = -1) -> int:
        """NONE if this replica leads the partition in the epoch the client knows."""
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return self.check_epoch(current_leader_epoch)

    def check_epoch(self, current_leader_epoch: int) -> int:
        if current_leader_epoch < 0:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > self.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.NONE

    # -- leader: produce -------------------------------------------------------------
    def append_records(self, records, acks: int) -> AppendResult:
        """Validate a produced batch and append it (Produce v3+: exactly one v2 batch)."""
        settings = self.topic.settings
        if records is None or len(records) == 0:
            return AppendResult(ErrorCode.INVALID_RECORD, message="no record batch")
        view = memoryview(records)
        try:
            batches = list(read_batches(view, check_crc=True, allow_truncated=False))
        except KafkaProtocolError as exc:
            return _unreadable_batch(view, exc)
        if len(batches) != 1 or batches[0].magic != 2:
            return AppendResult(ErrorCode.INVALID_RECORD,
                                message="Produce v3 and later carry exactly one v2 record batch")
        batch = batches[0]
        if batch.size > settings.max_message_bytes:
            return AppendResult(ErrorCode.MESSAGE_TOO_LARGE,
                                message=f"batch of {batch.size} bytes is above "
                                        f"max.message.bytes {settings.max_message_bytes}")
        if batch.is_control:
            return AppendResult(ErrorCode.INVALID_RECORD,
                                message="producers may not write control batches")
        refused = _unreadable_records(batch)
        if refused is not None:
            return refused
        if settings.cleanup_compact:
            try:
                if any(r.key is None for r in batch):
                    return AppendResult(ErrorCode.INVALID_RECORD,
                                        message="a compacted topic needs a key on every record")
            except KafkaProtocolError as exc:
                return AppendResult(ErrorCode.CORRUPT_MESSAGE, message=str(exc))
        header = read_batch_header(view)
        if header.producer_id >= 0 and header.base_sequence < 0:
            return AppendResult(ErrorCode.INVALID_RECORD,
                                message="an idempotent batch needs a base sequence")
        error, duplicate = self.log.producer_state.check(header)
        if error:
            return AppendResult(error, message=f"producer {header.producer_id} epoch "
                                f"{header.producer_epoch} sequence {header.base_sequence}")
        if duplicate is not None:
            # The batch is already in the log: answer with its offsets, append nothing.
            return AppendResult(ErrorCode.NONE, duplicate.base_offset,
                                duplicate.max_timestamp if settings.log_append_time else -1,
                                required_offset=duplicate.last_offset + 1)
        isr = len(self.part.isr)
        if acks == -1 and isr < settings.min_insync_replicas:
            return AppendResult(ErrorCode.NOT_ENOUGH_REPLICAS,
                                message=f"{isr} in-sync replicas, min.insync.replicas is "
                                        f"{settings.min_insync_replicas}")
        if settings.compression is not None and batch.compression != settings.compression:
            data = bytearray(_recompressed(batch, header, settings.compression,
                                           settings.compression_level))
            if len(data) > settings.max_message_bytes:
                return AppendResult(ErrorCode.MESSAGE_TOO_LARGE,
                                    message=f"batch of {len(data)} bytes once compressed "
                                            f"with the topic's codec is above "
                                            f"max.message.bytes {settings.max_message_bytes}")
        else:
            data = bytearray(view)
        base = self.log.end_offset
        append_time = _now_ms() if settings.log_append_time else -1
        stamp_batch(data, 0, base, self.leader_epoch, append_time)
        header = read_batch_header(data)
        try:
            self.log.append(data, [header])
        except OSError as exc:
            # Out of descriptors or disk when rolling a segment: Kafka's IOException on
            # append is a KafkaStorageException, which producers retry.
            return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR,
                                message=f"cannot append to the log: {exc}")
        self._leader_appended()
        return AppendResult(ErrorCode.NONE, base, append_time,
                            required_offset=header.next_offset)

    def append_control(self, data: bytes) -> int:
        """Append a transaction marker batch (built with base offset 0); its offset."""
        buf = bytearray(data)
        base = self.log.end_offset
        stamp_batch(buf, 0, base, self.leader_epoch)
        header = read_batch_header(buf)
        self.log.append(buf, [header])
        self._leader_appended()
        return base

    def _leader_appended(self) -> None:
        self._advance_high_watermark()   # a leader alone in its ISR commits at once
        self.broker.notify_data(self.key)

    def wait_for_replicas(self, required_offset: int, callback: Callable[[int], None]) -> None:
        """Call ``callback(error)`` once the high watermark reaches ``required_offset``
        (NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR is then below min.insync.replicas),
        or with NOT_LEADER_OR_FOLLOWER if leadership is lost first."""
        if self.log.high_watermark >= required_offset:
            callback(self._after_append_error())
            return
        self._waiters.append(_Waiter(required_offset, callback))

    def cancel_wait(self, callback: Callable[[int], None]) -> None:
        self._waiters = [w for w in self._waiters if w.callback is not callback]

    def _after_append_error(self) -> int:
        if len(self.part.isr) < self.topic.settings.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def _complete_waiters(self) -> None:
        if not self._waiters:
            return
        hw = self.log.high_watermark
        done = [w for w in self._waiters if w.required_offset <= hw]
        if not done:
            return
        self._waiters = [w for w in self._waiters if w.required_offset > hw]
        error = self._after_append_error()
        for w in done:
            w.callback(error)

    def _fail_waiters(self, error: int) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            w.callback(error)

    # -- leader: followers -----------------------------------------------------------
    def on_follower_fetch(self, follower: int, fetch_offset: int,
                          log_start_offset: int = -1) -> None:
        """A follower fetched from ``fetch_offset``: it has everything below it."""
        state = self.followers.get(follower)
        peer = self.broker.server.brokers.get(follower)
        if state is None or peer is None or not peer.up:
            return   # a fetch that left a broker before it stopped: fenced
        now = _now_ms()
        end = self.log.end_offset
        if fetch_offset >= end:
            state.last_caught_up_ms = now
        elif fetch_offset >= state.leader_end_at_last_fetch >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.leader_end_at_last_fetch = end
        state.last_fetch_ms = now
        state.log_end_offset = fetch_offset
        state.log_start_offset = log_start_offset
        part = self.part
        if follower not in part.isr and fetch_offset >= self.log.high_watermark and \
                self._epoch_start() <= fetch_offset:
            self.broker.controller.change_isr(part, part.isr + [follower], self.leader_epoch)
        self._advance_high_watermark()

    def preferred_read_replica(self, client_rack: str, fetch_offset: int) -> int:
        """KIP-392, as Kafka's ``RackAwareReplicaSelector`` chooses: among the leader and
        the in-sync followers known to hold ``fetch_offset``, those in the client's rack;
        the leader if it is one of them (or none is), else the most caught-up of them
        (largest log end, then most recently caught up). The leader is answered as -1,
        as Kafka sends no preferred replica when it would be the leader."""
        if not client_rack or not self.is_leader:
            return -1
        brokers = self.broker.server.brokers
        if brokers[self.broker.broker_id].rack == client_rack:
            return -1
        now = _now_ms()
        best, best_key = -1, None
        for r in self.part.isr:
            state = self.followers.get(r)
            peer = brokers.get(r)
            if state is None or peer is None or not peer.up or peer.rack != client_rack:
                continue
            if not state.log_start_offset <= fetch_offset <= state.log_end_offset:
                continue
            key = (state.log_end_offset, -(now - state.last_caught_up_ms), -r)
            if best_key is None or key > best_key:
                best, best_key = r, key
        return best

    def follower_needs_high_watermark(self, follower: int) -> bool:
        """The leader's high watermark moved past the one last sent to ``follower``."""
        state = self.followers.get(follower)
        return state is not None and state.last_sent_high_watermark < self.log.high_watermark

    def high_watermark_sent(self, follower: int, high_watermark: int) -> None:
        state = self.followers.get(follower)
        if state is not None:
            state.last_sent_high_watermark = high_watermark

    def _epoch_start(self) -> int:
        for epoch, start in reversed(self.log.epochs):
            if epoch == self.leader_epoch:
                return start
        return 0

    def check_isr_lag(self) -> None:
        """Drop followers that have not caught up for replica.lag.time.max.ms."""
        if not self.is_leader:
            return
        lag_max = self.broker.settings["replica.lag.time.max.ms"]
        now = _now_ms()
        me = self.broker.broker_id
        lagging = [r for r in self.part.isr if r != me and
                   now - self.followers.get(r, FollowerState()).last_caught_up_ms > lag_max]
        if lagging:
            isr = [r for r in self.part.isr if r not in lagging]
            self.broker.controller.change_isr(self.part, isr, self.leader_epoch)

    def _advance_high_watermark(self) -> None:
        if not self.is_leader:
            return
        me = self.broker.broker_id
        ends = [self.log.end_offset]
        for r in self.part.isr:
            if r == me:
                continue
            state = self.followers.get(r)
            if state is None or state.log_end_offset < 0:
                return   # an in-sync follower that has not fetched yet holds it back
            ends.append(state.log_end_offset)
        hw = min(ends)
        if hw > self.log.high_watermark:
            self.log.high_watermark = hw
            if hw > self.part.high_watermark:
                self.part.high_watermark = hw
            self._complete_waiters()
            self.broker.notify_data(self.key)

    # -- follower --------------------------------------------------------------------
    def append_as_follower(self, records, leader_high_watermark: int,
                           leader_log_start: int) -> None:
        """Append what the leader sent (offsets already assigned) and follow its high
        watermark and log start."""
        log = self.log
        if records is not None and len(records):
            view = memoryview(records)
            end = log.end_offset
            headers = [h for h in iter_batch_headers(view) if h.next_offset > end]
            if headers:
                # Offsets may skip ahead (a compacted leader log), never go back.
                first = headers[0]
                if first.base_offset < end:
                    if log.log_start_offset < end:   # records of ours it would overlap
                        raise ValueError(f"{self.key}: leader sent a batch from offset "
                                         f"{first.base_offset} across our log end {end}")
                    # An empty log that starts inside the batch (the leader's log start
                    # moved there: DeleteRecords): start it at the batch, as Kafka's
                    # follower does (truncateFullyAndStartAt); the log start follows the
                    # leader's again below.
                    log.reset_to(first.base_offset)
                start = first.position
                stop = headers[-1].position + headers[-1].size
                data = bytes(view[start:stop])
                log.append(data, [h.at(h.position - start) for h in headers])
        hw = min(leader_high_watermark, log.end_offset)
        changed = False
        if hw > log.high_watermark:
            log.high_watermark = hw
            changed = True
        if leader_log_start > log.log_start_offset:
            if log.follow_log_start(leader_log_start):
                self.broker.log_start_changed()
                changed = True
        if changed:
            # Consumers fetching from this follower (KIP-392) see up to its high
            # watermark: wake the ones waiting.
            self.broker.notify_data(self.key)

    def truncate_for_divergence(self, epoch: int, end_offset: int) -> bool:
        """The leader answered that our log diverges after ``end_offset`` of ``epoch``;
        whether the log changed (if not, fetching again at once gets the same answer)."""
        changed = self.log.truncate_for_divergence(epoch, end_offset)
        self.broker.notify_data(self.key)
        return changed
