"""Share sessions, ShareFetch and ShareAcknowledge for :class:`~kafka_client.ShareConsumer`
(KIP-932; I/O thread unless noted).

Each partition leader the member has assigned partitions on holds one share session for
it: the first ShareFetch (epoch 0) names every partition to fetch from that broker, the
next ones (epoch 1, 2, ...) only the partitions to add and those whose records they
acknowledge, plus the ones to forget; a ShareAcknowledge (epoch -1 at close) steps the
epoch too. One request per session is in flight at a time, so the epochs go in order.

A ShareFetch answer carries record batches and the offset ranges acquired for this member
(only those go to the application: a batch may hold records other members hold). Chunks
wait for the application's poll(); the next ShareFetch to a broker goes once the
application has taken every chunk, so a member holds the locks of one fetch's records at
a time. Acknowledgements (:class:`AckBatch`) ride on the next ShareFetch to the broker the
records came from, or go in a ShareAcknowledge when no fetch is due there or a commit
asks for them now. Lock expiry is the broker's business: an unacknowledged record comes
back to the group by itself.

A share session ends with the connection that opened it, and with the broker (a request
lost with its connection is never sent again: the next request opens a new session):
the records it acquired for the member went back to the group, so their
acknowledgements fail (INVALID_RECORD_STATE, or the error that ended the session) and
the records come again. A request refused whole while the session goes on
(INVALID_SHARE_SESSION_EPOCH, or any retriable error) has its acknowledgements sent
again, in a new session, until ``request.timeout.ms`` has passed since their first
refusal (Kafka's Java share consumer retries them until its timer expires): the member
still holds their records, and acknowledgements given up on would leave those acquired
until their lock expired.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Set, Tuple

from kafka_client._cluster.calls import Broker, Call, CallRunner, broker_error
from kafka_client.consumer.fetcher import PartitionState
from kafka_client.consumer.share_group import ShareAssignment, ShareMember
from kafka_client.errors import KafkaError, broker_code, client_error
from kafka_proto.enums import AcknowledgeType, FetchSessionEpoch
from kafka_proto.errors import ErrorCode, KafkaProtocolError
from kafka_proto.messages import (
    ApiKey,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
)
from kafka_proto.records import DEFAULT_MAX_DECOMPRESSED_SIZE, read_batches

__all__ = ["AckBatch", "AckOutcome", "AckRange", "CommitWaiter", "ShareChunk",
           "ShareFetcher", "ack_batches", "next_epoch"]

Key = Tuple[str, int]

#: Answers that end a share session: the next request to that broker opens a new one.
SESSION_ERRORS = frozenset((ErrorCode.SHARE_SESSION_NOT_FOUND,
                            ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                            ErrorCode.UNKNOWN_MEMBER_ID))
#: Answers that refuse the whole request for its share session (nothing in it applied)
#: while the session goes on: its acknowledgements may go again in a new session (as
#: do those of a request refused whole with any retriable error: NOT_LEADER_OR_FOLLOWER,
#: REQUEST_TIMED_OUT, ...; the new session keeps the member's records).
REFUSED_SESSION = frozenset((ErrorCode.INVALID_SHARE_SESSION_EPOCH,))
#: Answers that say the broker's session ended (the connection that opened it closed,
#: the member left or was fenced): the records it acquired for this member went back
#: to the group, and acknowledging them would be refused.
GIVEN_BACK = frozenset((ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.UNKNOWN_MEMBER_ID))
#: Request failures the application is not told of as errors (the session is opened
#: again; the acknowledgements' waiters and callback get them).
QUIET_ERRORS = frozenset((KafkaError._TIMED_OUT, KafkaError._TRANSPORT))
#: Partition errors that mean "the leader moved": ask for metadata again.
LEADER_MOVED = frozenset((ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                          ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
                          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID))
#: the highest share session epoch; the one after it is 1 (0 would open a new session)
MAX_EPOCH = 2**31 - 1
#: The most offsets one ShareFetch answer may acquire for the member, all partitions
#: together. Kafka's brokers hold a few thousand records in flight per partition
#: (group.share.partition.max.record.locks) and acquire about max.poll.records per fetch;
#: the member keeps acquired offsets one by one, so an answer past this (2^40 offsets of a
#: partition) spent the I/O thread's memory and time for ever. Its partitions past the
#: budget are refused as malformed (_BAD_MSG); the broker's locks on them expire.
MAX_ACQUIRED_OFFSETS = 1 << 20


def next_epoch(epoch: int) -> int:
    """The share session epoch after ``epoch``."""
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(frozen=True)
class AckRange:
    """Offsets ``first``..``last`` (inclusive) of one partition, all acknowledged with
    ``kind`` (an :class:`~kafka_proto.enums.AcknowledgeType` value)."""

    first: int
    last: int
    kind: int


class CommitWaiter:
    """A commit_sync()/close() waiting for the answers to its acknowledgements: each
    partition's outcome (None: accepted by the broker), then ``done`` is set."""

    def __init__(self, partitions: int) -> None:
        self.results: Dict[Key, Optional[KafkaError]] = {}
        #: the partitions of the acknowledgements waited for (application thread)
        self.keys: Set[Key] = set()
        self.pending = partitions
        self.done = threading.Event()
        if partitions == 0:
            self.done.set()

    def settle(self, key: Key, error: Optional[KafkaError]) -> None:
        """One partition's outcome (the first error of a partition stays)."""
        if self.results.get(key) is None:
            self.results[key] = error
        self.pending -= 1
        if self.pending <= 0:
            self.done.set()


@dataclass
class AckBatch:
    """The acknowledgements of one partition's records that came from broker ``node``
    (they go to that broker's share session), and who waits for their outcome."""

    node: int
    key: Key
    ranges: List[AckRange]
    waiter: Optional[CommitWaiter] = None
    #: (monotonic) refused whole, sent again until then; None: not refused yet
    retry_until: Optional[float] = None
    #: the application's (its records' acknowledgements) and reported to its
    #: acknowledgement commit callback; False: the client's own, for records it never
    #: handed out (released at close, or acquired as it closed; unread past a gap):
    #: reported, their offsets read as answers to the application's acknowledgements of
    #: earlier deliveries of those records
    reported: bool = True

    def offsets(self) -> Set[int]:
        """Every record offset acknowledged (GAP ranges are not records)."""
        return {o for r in self.ranges if r.kind != AcknowledgeType.GAP
                for o in range(r.first, r.last + 1)}

    def named(self) -> Set[int]:
        """Every offset the batch names, GAP ranges included."""
        return {o for r in self.ranges for o in range(r.first, r.last + 1)}


@dataclass
class AckOutcome:
    """The broker's answer to acknowledgements, for the acknowledgement commit callback:
    offsets by partition, and the error (None: accepted)."""

    offsets: Dict[Key, Set[int]]
    error: Optional[KafkaError]


def _acquired_offsets(acquired: Iterable[Tuple[int, int, int]]) -> Set[int]:
    """Every offset of acquired ranges ``[(first, last, delivery_count)]``."""
    return {o for first, last, _count in acquired for o in range(first, last + 1)}


@dataclass
class ShareChunk:
    """Record batches one ShareFetch answer brought for a partition, with the offset
    ranges acquired for this member: ``[(first, last, delivery_count)]``."""

    node: int
    part: PartitionState
    batches: List[Any]
    acquired: List[Tuple[int, int, int]]


@dataclass
class _Session:
    """One broker's share session for this member."""

    epoch: int = int(FetchSessionEpoch.INITIAL)
    #: the partitions the broker's session holds
    partitions: Set[Key] = field(default_factory=set)
    #: the partitions the broker's session may hold: those above, those a request in
    #: flight names (it may have reached the broker or not), and those of a session
    #: refused and not yet replaced (the broker keeps it). Its end gives back the
    #: member's records of these only (Kafka releases the ended session's partitions).
    maybe_held: Set[Key] = field(default_factory=set)
    in_flight: bool = False
    backoff_until: float = 0.0


def ack_batches(ranges: List[AckRange]) -> List[Tuple[int, int, List[int]]]:
    """Acknowledgement ranges as the wire's batches ``(first, last, types)``: sorted,
    adjacent ranges of one type merged, one type per batch (it applies to every offset)."""
    out: List[Tuple[int, int, List[int]]] = []
    for r in sorted(ranges, key=lambda r: r.first):
        if out and out[-1][1] + 1 == r.first and out[-1][2][0] == r.kind:
            out[-1] = (out[-1][0], r.last, out[-1][2])
        else:
            out.append((r.first, r.last, [int(r.kind)]))
    return out


class ShareFetcher:
    """The share sessions of one member, what they fetched, and the acknowledgements
    still to send. The application thread uses :meth:`take_chunk`, :meth:`acknowledge`,
    :meth:`take_outcomes` and :meth:`take_errors` (under :attr:`lock`); the rest runs on
    the I/O thread."""

    def __init__(self, config: Any, runner: CallRunner, member: ShareMember,
                 wake_app: Callable[[], None]) -> None:
        self.runner = runner
        self.cluster = runner.cluster
        self.io = runner.io
        self.member = member
        self.log = config.logger_for("kafka_client.consumer.share")
        self.lock = threading.Lock()
        self.wake_app = wake_app
        self.max_wait_ms = config["fetch.wait.max.ms"]
        self.min_bytes = config["fetch.min.bytes"]
        self.max_bytes = config["fetch.max.bytes"]
        self.partition_max_bytes = config["max.partition.fetch.bytes"]
        self.max_records = config["max.poll.records"]
        self.check_crcs = bool(config["check.crcs"])
        self.error_backoff = config["fetch.error.backoff.ms"] / 1000.0
        self.request_timeout = runner.request_timeout
        #: how long acknowledgements refused whole go again after their first refusal
        self.ack_retry_time = self.request_timeout
        #: (io) the coordinator's assignment, by topic id, and as partitions named
        self._target = ShareAssignment({})
        self._target_version = -1
        self.assigned: Dict[Key, uuid.UUID] = {}
        #: (io) topic ids of every topic this member fetched or acknowledged
        self.topic_ids: Dict[str, uuid.UUID] = {}
        self.sessions: Dict[int, _Session] = {}
        #: (io) by broker: offsets acquired in its current share session, not yet
        #: acknowledged; and those the broker gave back when that session ended (an
        #: acknowledgement of one is dropped with an error, not sent: it would be
        #: refused, and refuse the partition's other acknowledgements with it)
        self._holding: Dict[int, Dict[Key, Set[int]]] = {}
        self._given_back: Dict[int, Dict[Key, Set[int]]] = {}
        #: (self.lock) by broker and partition: offsets acquired whose chunk poll() has
        #: not taken yet. An acknowledgement of one is of an earlier delivery (the record
        #: came back and was acquired again): dropped, not sent, where it would accept
        #: the new delivery before the application saw it, and the application's own
        #: acknowledgement of it would then have the partition's others refused whole.
        self._unhanded: Dict[Tuple[int, Key], Set[int]] = {}
        # -- shared with the application thread (self.lock) --
        self.chunks: Deque[ShareChunk] = deque()
        self.acks: List[AckBatch] = []
        self.outcomes: Deque[AckOutcome] = deque()
        self.errors: Deque[KafkaError] = deque()
        #: acknowledgements to send now, not with the next fetch (commit, close)
        self.flush_acks = False
        #: (io) close(): the sessions are closed, then ``closing()`` runs
        self.closing: Optional[Callable[[], None]] = None
        #: (io) from close() on: no fetch (a new session would acquire records again)
        self.closed = False

    # ============================================================ application thread
    def _handed(self, chunk: ShareChunk) -> None:
        """(under self.lock) ``chunk`` leaves for the application."""
        waiting = self._unhanded.get((chunk.node, chunk.part.key))
        if waiting:
            waiting.difference_update(_acquired_offsets(chunk.acquired))

    def take_chunk(self) -> Optional[ShareChunk]:
        with self.lock:
            chunk = self.chunks.popleft() if self.chunks else None
            if chunk is not None:
                self._handed(chunk)
        if chunk is not None and not self.chunks:
            self.io.wake()        # the next fetch may go
        return chunk

    def acknowledge(self, batches: List[AckBatch], now: bool) -> None:
        """Hand acknowledgements over (``now``: send them at once, not with the next
        fetch)."""
        with self.lock:
            self.acks.extend(batches)
            if now:
                self.flush_acks = True
        self.io.wake()

    def wait_for_all(self, batches: List[AckBatch]) -> CommitWaiter:
        """Hand ``batches`` over to be sent now, and a waiter for them and for every
        acknowledgement handed over before and not sent yet (a commit covers what the
        last poll() handed over too)."""
        with self.lock:
            pending = [b for b in self.acks if b.waiter is None]
            waiter = CommitWaiter(len(batches) + len(pending))
            for batch in pending + batches:
                batch.waiter = waiter
                waiter.keys.add(batch.key)
            self.acks.extend(batches)
            self.flush_acks = True
        self.io.wake()
        return waiter

    def take_outcomes(self) -> List[AckOutcome]:
        with self.lock:
            out = list(self.outcomes)
            self.outcomes.clear()
        return out

    def take_errors(self) -> List[KafkaError]:
        with self.lock:
            out = list(self.errors)
            self.errors.clear()
        return out

    def take_all_chunks(self) -> List[ShareChunk]:
        with self.lock:
            out = list(self.chunks)
            self.chunks.clear()
            for chunk in out:
                self._handed(chunk)
        return out

    # ==================================================================== I/O thread
    def set_assignment(self, assignment: ShareAssignment) -> None:
        self._target = assignment
        self._target_version = -1
        self.io.wake()

    def report(self, error: KafkaError) -> None:
        with self.lock:
            self.errors.append(error)
        self.wake_app()

    def _resolve(self) -> None:
        """The assignment's topic ids as names, once the metadata knows them."""
        md = self.cluster.metadata
        if md.version == self._target_version:
            return
        self._target_version = md.version
        names = {info.topic_id: name for name, info in md.topics.items()
                 if info.topic_id is not None}
        assigned: Dict[Key, uuid.UUID] = {}
        unknown = False
        for topic_id, parts in self._target.partitions.items():
            name = names.get(topic_id)
            if name is None:
                unknown = True
                continue
            self.topic_ids[name] = topic_id
            for p in parts:
                assigned[(name, p)] = topic_id
        if unknown:
            md.request(None)     # a topic id no metadata names yet (a new topic)
        if assigned != self.assigned:
            self.log.debug("share group %s: assigned %s", self.member.group_id,
                           sorted(assigned))
        self.assigned = assigned

    def tick(self, now: float) -> Optional[float]:
        self._resolve()
        md = self.cluster.metadata
        by_node: Dict[int, List[Key]] = {}
        for key in self.assigned:
            leader = md.leader(*key)
            if leader >= 0:
                by_node.setdefault(leader, []).append(key)
            else:
                md.request([key[0]])
        with self.lock:
            acks_by_node: Dict[int, List[AckBatch]] = {}
            for batch in self.acks:
                acks_by_node.setdefault(batch.node, []).append(batch)
            flush = self.flush_acks
            queued = bool(self.chunks)
        closing = self.closing is not None
        fetching = self.member.joined and not queued and not self.closed
        nodes = set(acks_by_node) | set(self.sessions)
        if fetching:
            nodes |= set(by_node)
        wake_at: Optional[float] = None
        for node in nodes:
            session = self.sessions.setdefault(node, _Session())
            if session.in_flight:
                continue
            if now < session.backoff_until:
                wake_at = min(wake_at or session.backoff_until, session.backoff_until)
                continue
            acks = self._sendable(node, acks_by_node.get(node, []))
            keys = by_node.get(node, [])
            opening = False
            if acks and session.epoch == FetchSessionEpoch.INITIAL:
                if closing or self.closed or not keys or not self.member.joined:
                    # No session to carry them, and none is to be opened now.
                    self._take(acks)
                    self._settle(acks, client_error(
                        ErrorCode.SHARE_SESSION_NOT_FOUND,
                        f"broker {node}: no share session for these acknowledgements"))
                else:
                    # The session opens first (an opening ShareFetch carries none), even
                    # with fetched records queued: they go with the next request.
                    opening = True
                acks = []
            if closing:
                if session.epoch != FetchSessionEpoch.INITIAL:
                    self._send_acknowledge(node, session, acks, final=True)
            elif (fetching or opening) and (keys or session.partitions) and \
                    not (flush and acks):
                # (no partition of this broker assigned any more: this one forgets the
                # session's, so that no fetch of it takes records for this member)
                self._send_fetch(node, session, keys, acks)
            elif acks:
                self._send_acknowledge(node, session, acks, final=False)
        if closing and not any(s.in_flight or s.epoch != FetchSessionEpoch.INITIAL
                               for s in self.sessions.values()):
            done, self.closing = self.closing, None
            if done is not None:
                done()
        with self.lock:
            if not any(b for b in self.acks):
                self.flush_acks = False
        return wake_at

    def close_sessions(self, done: Callable[[], None]) -> None:
        """Close every share session (a ShareAcknowledge with epoch -1, carrying the
        acknowledgements still to send), then ``done()`` (I/O thread)."""
        self.closing = done
        self.closed = True
        self.io.wake()

    # -- requests ------------------------------------------------------------------------
    def _take(self, acks: List[AckBatch]) -> None:
        with self.lock:
            taken = {id(b) for b in acks}
            self.acks = [b for b in self.acks if id(b) not in taken]
        holding = self._holding
        for batch in acks:
            held = holding.get(batch.node, {}).get(batch.key)
            if held:
                held.difference_update(batch.named())

    def _sendable(self, node: int, acks: List[AckBatch]) -> List[AckBatch]:
        """The acknowledgements for ``node`` that may go in one request: those of
        records the broker gave back (see ``_given_back``) are dropped with an error,
        and a batch naming an offset an earlier one names waits for the next request
        (the broker refuses a partition's acknowledgements whole when two name one
        offset)."""
        given_back = self._given_back.get(node)
        out: List[AckBatch] = []
        named: Dict[Key, Set[int]] = {}
        for batch in acks:
            gone = given_back.get(batch.key) if given_back else None
            if gone and not gone.isdisjoint(batch.named()):
                kept = self._drop_given_back(batch, gone)
                if kept is None:
                    continue
                batch = kept
            with self.lock:
                unhanded = set(self._unhanded.get((node, batch.key), ()))
            if unhanded and not unhanded.isdisjoint(batch.named()):
                kept = self._drop_given_back(batch, unhanded)
                if kept is None:
                    continue
                batch = kept
            offsets = batch.named()
            seen = named.setdefault(batch.key, set())
            if offsets & seen:
                continue
            seen |= offsets
            out.append(batch)
        return out

    def _drop_given_back(self, batch: AckBatch, gone: Set[int]) -> Optional[AckBatch]:
        """Settle the part of ``batch`` whose records the broker gave back with an
        error; the rest, to send (None if nothing is left)."""
        keep: List[AckRange] = []
        drop: List[AckRange] = []
        for r in batch.ranges:
            for o in range(r.first, r.last + 1):
                (drop if o in gone else keep).append(AckRange(o, o, r.kind))
        for r in drop:
            gone.discard(r.first)
        lost = AckBatch(batch.node, batch.key, drop, batch.waiter, reported=batch.reported)
        with self.lock:
            i = next(i for i, b in enumerate(self.acks) if b is batch)
            if keep:
                rest = AckBatch(batch.node, batch.key, keep, None, batch.retry_until,
                                batch.reported)
                self.acks[i] = rest
            else:
                del self.acks[i]
        if keep and batch.waiter is not None:
            # one partition's outcome each: the waiter counts the two parts as two
            rest.waiter = batch.waiter
            batch.waiter.pending += 1
        self._settle([lost], client_error(
            ErrorCode.INVALID_RECORD_STATE,
            f"{batch.key[0]} [{batch.key[1]}]: not acknowledged: the broker gave these "
            f"records back when their share session ended (they come again)"))
        return rest if keep else None

    def _ack_wire(self, acks: List[AckBatch]) -> Dict[Key, List[Tuple[int, int, List[int]]]]:
        ranges: Dict[Key, List[AckRange]] = {}
        for batch in acks:
            ranges.setdefault(batch.key, []).extend(batch.ranges)
        return {key: ack_batches(r) for key, r in ranges.items()}

    def _topic_id(self, topic: str) -> Optional[uuid.UUID]:
        tid = self.topic_ids.get(topic)
        if tid is None:
            info = self.cluster.metadata.topic(topic)
            tid = info.topic_id if info is not None else None
        return tid

    def _send_fetch(self, node: int, session: _Session, keys: List[Key],
                    acks: List[AckBatch]) -> None:
        epoch = session.epoch
        wanted = set(keys)
        wire_acks = self._ack_wire(acks)
        adds = wanted if epoch == FetchSessionEpoch.INITIAL else wanted - session.partitions
        forgets = set() if epoch == FetchSessionEpoch.INITIAL else session.partitions - wanted
        # A partition named for its acknowledgements only is forgotten in the same request
        # (as Kafka's Java share consumer does): a broker adds every partition a ShareFetch
        # names to the session, then drops the forgotten ones, and would otherwise fetch
        # from it for this member, which no longer has it assigned.
        forgets |= set(wire_acks) - wanted
        named = adds | set(wire_acks)
        forgotten: Dict[uuid.UUID, List[int]] = {}
        for key in sorted(forgets):
            tid = self._topic_id(key[0])
            if tid is not None:
                forgotten.setdefault(tid, []).append(key[1])
        group_id, member_id = self.member.group_id, self.member.member_id

        def build(version: int) -> Any:
            # Version 0 sizes each partition; version 1 counts records instead (KIP-932
            # as released: MaxRecords, BatchSize).
            topics: Dict[uuid.UUID, List[Any]] = {}
            for key in sorted(named):
                tid = self._topic_id(key[0])
                if tid is None:
                    continue
                sized: Dict[str, Any] = {"partition_max_bytes": self.partition_max_bytes
                                         if key in wanted else 0} if version == 0 else {}
                topics.setdefault(tid, []).append(ShareFetchRequest.FetchPartition(
                    partition_index=key[1],
                    acknowledgement_batches=[
                        ShareFetchRequest.AcknowledgementBatch(
                            first_offset=f, last_offset=last, acknowledge_types=t)
                        for f, last, t in wire_acks.get(key, ())], **sized))
            counted = {"max_records": self.max_records,
                       "batch_size": self.max_records} if version >= 1 else {}
            return ShareFetchRequest(
                group_id=group_id, member_id=member_id, share_session_epoch=epoch,
                max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes,
                max_bytes=self.max_bytes,
                topics=[ShareFetchRequest.FetchTopic(topic_id=t, partitions=ps)
                        for t, ps in topics.items()],
                forgotten_topics_data=[
                    ShareFetchRequest.ForgottenTopic(topic_id=t, partitions=ps)
                    for t, ps in forgotten.items()], **counted)

        self._take(acks)
        session.in_flight = True
        session.maybe_held |= named
        after = (session.partitions | adds | (set(wire_acks) & wanted)) - forgets
        if self.log.isEnabledFor(logging.DEBUG):
            self.log.debug("share group %s: ShareFetch to broker %d, epoch %d, adding %s, "
                           "forgetting %s, acknowledging %s", self.member.group_id, node,
                           epoch, sorted(adds), sorted(forgets), wire_acks)

        def answered(resp: Any, conn: Any) -> Optional[KafkaError]:
            session.in_flight = False
            self._on_fetch(node, session, epoch, after, resp, acks)
            self.io.wake()
            return None

        def failed(error: KafkaError) -> None:
            session.in_flight = False
            self._session_lost(node, session, error, acks)

        self.runner.submit(Call(
            "ShareFetch", ApiKey.SHARE_FETCH, Broker(node),
            time.monotonic() + self.request_timeout + self.max_wait_ms / 1000.0,
            build, answered, failed,
            reroute=lambda error, lost: self._unreachable(node, session, error, lost, acks)))

    def _send_acknowledge(self, node: int, session: _Session, acks: List[AckBatch],
                          final: bool) -> None:
        epoch = int(FetchSessionEpoch.FINAL) if final else session.epoch
        self.log.debug("share group %s: ShareAcknowledge to broker %d, epoch %d: %s",
                       self.member.group_id, node, epoch,
                       [(b.key, b.ranges) for b in acks])
        topics: Dict[uuid.UUID, List[Any]] = {}
        for key, batches in sorted(self._ack_wire(acks).items()):
            tid = self._topic_id(key[0])
            if tid is None:
                continue
            topics.setdefault(tid, []).append(ShareAcknowledgeRequest.AcknowledgePartition(
                partition_index=key[1],
                acknowledgement_batches=[
                    ShareAcknowledgeRequest.AcknowledgementBatch(
                        first_offset=f, last_offset=last, acknowledge_types=t)
                    for f, last, t in batches]))
        req = ShareAcknowledgeRequest(
            group_id=self.member.group_id, member_id=self.member.member_id,
            share_session_epoch=epoch,
            topics=[ShareAcknowledgeRequest.AcknowledgeTopic(topic_id=t, partitions=ps)
                    for t, ps in topics.items()])
        self._take(acks)
        session.in_flight = True

        def answered(resp: Any, conn: Any) -> Optional[KafkaError]:
            session.in_flight = False
            code = broker_code(resp.error_code)
            if code != ErrorCode.NONE:
                self._session_lost(node, session, broker_error(
                    code, resp.error_message, f"ShareAcknowledge to broker {node}"), acks,
                    refused=True)
                return None
            if final:
                session.epoch = int(FetchSessionEpoch.INITIAL)
                session.partitions = set()
                session.maybe_held = set()
            else:
                session.epoch = next_epoch(epoch)
            self._ack_answers(resp.responses, acks, "error_code", "error_message")
            self.io.wake()
            return None

        def failed(error: KafkaError) -> None:
            session.in_flight = False
            self._session_lost(node, session, error, acks)

        self.runner.submit(Call(
            "ShareAcknowledge", ApiKey.SHARE_ACKNOWLEDGE, Broker(node),
            time.monotonic() + self.request_timeout, lambda v: req, answered, failed,
            reroute=lambda error, lost: self._unreachable(node, session, error, lost, acks)))

    # -- answers -------------------------------------------------------------------------
    def _unreachable(self, node: int, session: _Session, error: KafkaError, lost: bool,
                     acks: List[AckBatch]) -> None:
        """The broker could not be reached (``lost``: the request went out and its
        connection closed). Never sent again on a new connection: the broker ends a share
        session with the connection that opened it, giving the member's records back,
        and may have applied the request before (a copy would then meet the next epoch
        with this one). The session is gone; the acknowledgements' outcome is unknown
        (applied, or their records come again), and the leaders are asked for again."""
        session.in_flight = False
        why = ("the connection closed with the request: applied or not, unknown; "
               "records not acknowledged come again") if lost else "not sent"
        # The session ended with the connection (or with the broker): the records it
        # acquired for this member went back to the group.
        self._give_back(node, session)
        self.cluster.metadata.request(sorted({k[0] for k in self.assigned}) or None)
        self._session_lost(node, session, KafkaError(
            error.code(), f"{error.str()} ({why})", retriable=True), acks)

    def _give_back(self, node: int, session: Optional[_Session]) -> None:
        """The broker's share session ended: the member's records of its partitions went
        back to the group (an acknowledgement of one is not sent any more). Those of
        other partitions (acquired under an earlier session it replaced, or of a partition
        it forgot) are still the member's: their acknowledgements go in the next session.
        ``session`` None: the member's records of every partition went back."""
        back = self._given_back.setdefault(node, {})
        holding = self._holding.get(node, {})
        ended = set(holding) if session is None else \
            session.partitions | session.maybe_held
        for key in ended & set(holding):
            back.setdefault(key, set()).update(holding.pop(key))
        if session is not None:
            session.partitions, session.maybe_held = set(), set()

    def _session_lost(self, node: int, session: _Session, error: KafkaError,
                      acks: List[AckBatch], refused: bool = False) -> None:
        """A request of the session failed: the broker's session state is unknown (or
        gone); the next request opens a new one."""
        self.log.debug("share session on broker %d: %s", node, error.str())
        given_back = error.code() in GIVEN_BACK
        if given_back:
            # (UNKNOWN_MEMBER_ID: the member is gone, and all its records with it)
            member_gone = error.code() == ErrorCode.UNKNOWN_MEMBER_ID
            self._give_back(node, None if member_gone else session)
        # (otherwise the broker's session, if any, is still there with its partitions
        # until an opening ShareFetch replaces it: maybe_held keeps them)
        session.epoch = int(FetchSessionEpoch.INITIAL)
        session.partitions = set()
        session.backoff_until = time.monotonic() + self.error_backoff
        if not given_back and (error.code() in REFUSED_SESSION or
                               (refused and error.retriable())):
            # Refused whole, nothing applied, and the session is still there: the
            # records are still acquired by this member, so their acknowledgements go
            # again in the new session, once it is open, until their time is up (given
            # up after one more try, two refusals in a row left the records acquired
            # until their lock expired).
            now = time.monotonic()
            again: List[AckBatch] = []
            expired: List[AckBatch] = []
            for batch in acks:
                if batch.retry_until is None:
                    batch.retry_until = now + self.ack_retry_time
                (again if now < batch.retry_until else expired).append(batch)
            acks = expired
            held = self._holding.setdefault(node, {})
            for batch in again:
                # still the member's until sent: given back with the session if it ends
                held.setdefault(batch.key, set()).update(batch.named())
            with self.lock:
                self.acks.extend(again)
        self._settle(acks, error)
        if error.code() not in SESSION_ERRORS and error.code() not in QUIET_ERRORS and \
                not (refused and error.retriable()):
            # (a retriable refusal is the waiters' and the callback's: the next request
            # goes on, and the application needs no error event for it)
            self.report(error)
        self.io.wake()

    def _on_fetch(self, node: int, session: _Session, epoch: int, after: Set[Key],
                  resp: Any, acks: List[AckBatch]) -> None:
        code = broker_code(resp.error_code)
        if code != ErrorCode.NONE:
            self._session_lost(node, session, broker_error(
                code, resp.error_message, f"ShareFetch to broker {node}"), acks,
                refused=True)
            return
        session.epoch = next_epoch(epoch)
        session.partitions = after
        # the broker's session is this one now (an opening one replaced any other)
        session.maybe_held = set(after)
        self._ack_answers(resp.responses, acks, "acknowledge_error_code",
                          "acknowledge_error_message")
        names = {tid: name for name, tid in self.topic_ids.items()}
        chunks: List[ShareChunk] = []
        release: List[AckBatch] = []
        budget = MAX_ACQUIRED_OFFSETS
        for topic in resp.responses or ():
            name = names.get(topic.topic_id)
            if name is None:
                continue
            for pd in topic.partitions or ():
                key = (name, pd.partition_index)
                perr = broker_code(pd.error_code)
                if perr != ErrorCode.NONE:
                    if perr in LEADER_MOVED:
                        self.cluster.metadata.request([name])
                    else:
                        self.report(broker_error(perr, pd.error_message,
                                                 f"ShareFetch of {name} [{key[1]}]"))
                    continue
                acquired = [(a.first_offset, a.last_offset, a.delivery_count)
                            for a in pd.acquired_records or ()
                            if a.first_offset <= a.last_offset]
                if not acquired:
                    continue
                count = sum(last - first + 1 for first, last, _n in acquired)
                if count > budget:
                    self.report(KafkaError(KafkaError._BAD_MSG, f"{name} [{key[1]}]: the "
                                           f"ShareFetch answer acquires {count} offsets "
                                           f"(at most {MAX_ACQUIRED_OFFSETS} an answer)"))
                    continue
                budget -= count
                self.log.debug("share group %s: %s [%d] acquired %s from broker %d",
                               self.member.group_id, name, key[1], acquired, node)
                offsets = _acquired_offsets(acquired)
                self._holding.setdefault(node, {}).setdefault(key, set()).update(offsets)
                gone = self._given_back.get(node, {}).get(key)
                if gone:
                    gone.difference_update(offsets)
                if self.closed:
                    # Acquired as the member closes: given back at once rather than held
                    # until the locks expire. (Records of a partition no longer assigned
                    # are handed out still: they are this member's until acknowledged.)
                    release.append(AckBatch(node, key, [
                        AckRange(f, last, AcknowledgeType.RELEASE)
                        for f, last, _n in acquired], reported=False))
                    continue
                batches = self._batches(key, pd.records)
                if batches is None:
                    continue
                part = PartitionState(*key)
                chunks.append(ShareChunk(node, part, batches, acquired))
        if release:
            with self.lock:
                self.acks.extend(release)
                self.flush_acks = True
        if chunks:
            with self.lock:
                self.chunks.extend(chunks)
                for chunk in chunks:
                    self._unhanded.setdefault((chunk.node, chunk.part.key), set()).update(
                        _acquired_offsets(chunk.acquired))
            self.wake_app()

    def _batches(self, key: Key, data: Any) -> Optional[List[Any]]:
        if data is None or not len(data):
            return []
        try:
            return list(read_batches(data, self.check_crcs,
                                     decompressed_floor=DEFAULT_MAX_DECOMPRESSED_SIZE))
        except KafkaProtocolError as exc:
            self.report(KafkaError(KafkaError._BAD_MSG, f"{key[0]} [{key[1]}]: {exc}"))
            return None

    def _ack_answers(self, responses: Any, acks: List[AckBatch], code_field: str,
                     message_field: str) -> None:
        """Settle acknowledgements by the answer's per-partition codes (a partition the
        answer leaves out: accepted)."""
        if not acks:
            return
        names = {tid: name for name, tid in self.topic_ids.items()}
        codes: Dict[Key, Optional[KafkaError]] = {}
        for topic in responses or ():
            name = names.get(topic.topic_id)
            if name is None:
                continue
            for pd in topic.partitions or ():
                code = broker_code(getattr(pd, code_field))
                codes[(name, pd.partition_index)] = None if code == ErrorCode.NONE else \
                    broker_error(code, getattr(pd, message_field),
                                 f"acknowledgement of {name} [{pd.partition_index}]")
        by_error: Dict[Optional[int], List[AckBatch]] = {}
        errors: Dict[Optional[int], Optional[KafkaError]] = {}
        for batch in acks:
            error = codes.get(batch.key)
            which = None if error is None else error.code()
            by_error.setdefault(which, []).append(batch)
            errors[which] = error
        for which, batches in by_error.items():
            self._settle(batches, errors[which])

    def _settle(self, acks: List[AckBatch], error: Optional[KafkaError]) -> None:
        """Record the outcome of ``acks``: for their waiters and the application's
        acknowledgement commit callback."""
        if not acks:
            return
        offsets: Dict[Key, Set[int]] = {}
        for batch in acks:
            if batch.reported:
                offsets.setdefault(batch.key, set()).update(batch.offsets())
            if batch.waiter is not None:
                batch.waiter.settle(batch.key, error)
        if offsets:
            with self.lock:
                self.outcomes.append(AckOutcome(offsets, error))
        self.wake_app()
