"""The consumer's I/O-thread side: partition positions, offset lookups and fetches.

One :class:`PartitionState` per assigned partition. The application thread changes the
assignment and positions (assign, seek, pause) under :attr:`Fetcher.lock` and bumps the
partition's ``version``; the I/O thread reads them under the same lock when it builds a
request and drops any answer whose version is stale. Fetched data goes to the
application as :class:`Chunk` objects carrying the raw record batches (only their headers
are parsed here); the records themselves are decoded on the application thread when it
consumes them, so memory holds compact wire bytes, not Python objects.

Rules (librdkafka's, where the issue is silent):

* one Fetch in flight per broker, carrying every fetchable partition it leads;
* a partition is fetchable when it has a position, is not paused, has no fetch in flight,
  is past its error backoff, and its local queue holds less than
  ``queued.max.messages.kbytes`` and ``queued.min.messages``;
* logical offsets (BEGINNING, END, tail, STORED) are resolved with ListOffsets (and the
  group's committed offsets for STORED); OFFSET_OUT_OF_RANGE applies ``auto.offset.reset``;
* leader errors refresh the metadata and back off ``fetch.error.backoff.ms``;
* ``enable.partition.eof``: one _PARTITION_EOF event each time the fetch position reaches
  the end of the partition (the high watermark, or the last stable offset for
  read_committed) at an offset where none was reported yet; a seek re-arms it.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Set, Tuple

from kafka_client._backoff import retry_delay
from kafka_client._interval import IntervalStat
from kafka_client._net.connection import DISCONNECTED, NO_ANSWER
from kafka_client.consumer.fetch_session import FetchPlan, FetchSession, SessionPartition
from kafka_client.errors import KafkaError, broker_code, client_error
from kafka_client.types import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    Message,
    TopicPartition,
    error_event,
)
from kafka_proto.enums import IsolationLevel, ListOffsetsTimestamp, ReplicaId
from kafka_proto.errors import ErrorCode, KafkaProtocolError
from kafka_proto.messages import (
    ApiKey,
    FetchRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
)
from kafka_proto.records import DEFAULT_MAX_DECOMPRESSED_SIZE, read_batches

__all__ = ["Fetcher", "PartitionState", "Chunk", "AbortedTransaction", "Event",
           "OffsetLookup", "OFFSET_TAIL_BASE"]

_log = logging.getLogger("kafka_client.consumer.fetcher")

#: librdkafka's logical "N messages before the end": OFFSET_TAIL_BASE - N
OFFSET_TAIL_BASE = -2000

#: The first wait after a Fetch answered at once with nothing (see Fetcher._node_hold)
EMPTY_HOLD_FIRST_S = 0.001

#: errors that mean "the metadata is stale: find the leader again, then retry"
LEADER_ERRORS = frozenset((
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.INCONSISTENT_TOPIC_ID))

TopicPartitionKey = Tuple[str, int]


def _earliest(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if b is None:
        return a
    return b if a is None or b < a else a


def _fetch_topics(partitions: List[SessionPartition]) -> List[Any]:
    """A Fetch's topics for ``partitions`` (by id when they carry one: Fetch v13+)."""
    topics: Dict[Any, Any] = {}
    for p in partitions:
        ft = topics.get(p.topic)
        if ft is None:
            ft = topics[p.topic] = FetchRequest.FetchTopic(topic=p.topic, partitions=[]) \
                if p.topic_id is None else FetchRequest.FetchTopic(topic_id=p.topic_id,
                                                                   partitions=[])
        ft.partitions.append(FetchRequest.FetchPartition(
            partition=p.partition, current_leader_epoch=p.current_leader_epoch,
            fetch_offset=p.fetch_offset, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=p.max_bytes))
    return list(topics.values())


def _forgotten_topics(partitions: List[SessionPartition]) -> List[Any]:
    """An incremental Fetch's partitions to drop from the session, by topic."""
    topics: Dict[Any, Any] = {}
    for p in partitions:
        key = p.topic if p.topic_id is None else p.topic_id
        ft = topics.get(key)
        if ft is None:
            ft = topics[key] = FetchRequest.ForgottenTopic(
                topic=p.topic, partitions=[]) if p.topic_id is None \
                else FetchRequest.ForgottenTopic(topic_id=p.topic_id, partitions=[])
        ft.partitions.append(p.partition)
    return list(topics.values())


class PartitionState:
    """One assigned partition. Fields marked (app) are written by the application thread,
    (io) by the I/O thread; both under the fetcher's lock when they are shared."""

    __slots__ = ("topic", "partition", "key", "fetch_pos", "reset", "resolving",
                 "version", "assigned", "paused", "fetching", "backoff_until", "hw", "lso",
                 "log_start", "eof_offset", "queued_bytes", "queued_msgs", "max_bytes",
                 "app_pos", "stored", "stored_metadata", "stored_epoch", "committed",
                 "last_error", "end_check", "fetch_epoch", "validated_epoch", "validating",
                 "read_replica", "read_replica_until", "held", "kept", "rx_msgs", "rx_bytes",
                 "assigned_offset", "topic_id", "old_topic_id", "last_error_logged",
                 "stale_answers", "lookup_failures")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.key: TopicPartitionKey = (topic, partition)
        self.fetch_pos = -1          # next offset to fetch; -1: none (see reset)
        self.reset: Optional[int] = None  # a logical offset waiting to be resolved
        self.resolving = False       # (io) a lookup for ``reset`` is in flight
        self.version = 0             # (app) bumped by every seek/assign/unassign
        self.assigned = True
        self.paused = False
        #: (io) the version whose position a Fetch in flight asks for (-1: none); an
        #: answer for an older one is stale, and a newer one may be fetched meanwhile
        self.fetching = -1
        self.backoff_until = 0.0     # (io) no fetch or lookup before this time
        self.hw = -1                 # (io) high watermark from the last fetch
        self.lso = -1                # (io) last stable offset from the last fetch
        self.log_start = -1          # (io) log start offset from the last fetch
        self.eof_offset = -1         # offset where _PARTITION_EOF was last reported
        self.queued_bytes = 0        # wire bytes of chunks waiting for the application
        self.queued_msgs = 0         # records (batch counts) waiting for the application
        self.max_bytes = 0           # (io) per-partition fetch size; grows for huge batches
        self.app_pos = -1            # (app) offset of the next message the app gets
        self.stored = -1             # (app) offset stored for the next commit (-1: none)
        #: (app) the first offset of messages a consume() call holds while it waits for
        #: more (-1: none): nothing from it on is committed before they are returned
        self.held = -1
        #: (app) the first offset of messages the asyncio consumer keeps for a next read
        #: (-1: none): nothing from it on is committed before they are handed out
        self.kept = -1
        self.stored_metadata: Optional[str] = None
        self.stored_epoch = -1
        self.committed = -1          # last offset committed (or fetched from the group)
        self.last_error: Optional[int] = None  # (io) last error reported (no repeats)
        #: (io) after resolving END/tail: how many messages before the end (see
        #: _fix_end); None when the position did not come from ListOffsets(latest)
        self.end_check: Optional[int] = None
        #: (io) leader epoch of the record before fetch_pos (the last batch fetched, or
        #: what came with the position: a committed offset's, a seek's); -1: not known
        self.fetch_epoch = -1
        #: (io) the leader epoch under which fetch_pos is known to be in the leader's
        #: log; another leader epoch in the metadata means: validate it first (KIP-320)
        self.validated_epoch = -1
        self.validating = False      # (io) an OffsetForLeaderEpoch in flight
        #: (io) the replica the leader said to fetch from (KIP-392), until when; -1: the
        #: leader
        self.read_replica = -1
        self.read_replica_until = 0.0
        #: (io) records (batch counts) and record-batch bytes fetched, ever
        self.rx_msgs = 0
        self.rx_bytes = 0
        #: (app) the offset the application assigned the partition with, as given but
        #: OFFSET_INVALID as OFFSET_STORED (what ``assignment()`` reports, as librdkafka's)
        self.assigned_offset = OFFSET_INVALID
        #: (io) the id of the topic the position belongs to (None: not known yet, or a
        #: broker without ids), and the id before, when the topic was created again
        self.topic_id: Any = None
        self.old_topic_id: Any = None
        self.last_error_logged: Optional[int] = None   # (io) a repeated error said once
        #: (io) answers in a row whose records all ended before the position
        self.stale_answers = 0
        #: (io) offset lookups (ListOffsets, committed offsets) failed in a row: their
        #: retries' waits double (KIP-580)
        self.lookup_failures = 0

    def seek(self, offset: int, epoch: int = -1) -> None:
        """Set the next offset (absolute, or logical to be resolved), with the leader
        epoch of the record before it when known; caller holds the lock."""
        self.fetch_epoch = epoch if offset >= 0 else -1
        self.validated_epoch = -1
        self.reposition(offset)

    def reposition(self, offset: int) -> None:
        """seek() to an offset of the same log, read before (fetch again from there):
        its epoch and validation stand. Caller holds the lock."""
        self.version += 1
        self.eof_offset = -1
        self.resolving = False
        self.backoff_until = 0.0
        self.lookup_failures = 0
        self.last_error = None
        self.end_check = None
        if offset >= 0:
            self.fetch_pos = offset
            self.app_pos = offset
            self.reset = None
        else:
            # Not known until the lookup answers: position() says OFFSET_INVALID, and a
            # pause() meanwhile keeps the lookup instead of going back to the old position.
            self.fetch_pos = -1
            self.app_pos = -1
            self.reset = offset

    def commit_due(self) -> bool:
        """A stored offset beyond the last committed one waits to be committed. Only
        greater offsets are committed (librdkafka's rule): after a seek backwards the
        reprocessed messages do not move the group's offset back."""
        return self.assigned and self.committable() > self.committed

    def committable(self) -> int:
        """The stored offset, or the first offset held by a consume() still waiting, or
        kept by the asyncio consumer for a next read, when that is lower (taken is not
        returned: see Consumer._hold and Consumer._hold_kept)."""
        out = self.stored
        for first in (self.held, self.kept):
            if 0 <= first < out:
                out = first
        return out

    def __repr__(self) -> str:
        return (f"PartitionState({self.topic}[{self.partition}] fetch={self.fetch_pos} "
                f"reset={self.reset} app={self.app_pos} v{self.version})")


class AbortedTransaction(NamedTuple):
    """read_committed: a transaction a Fetch answer lists as aborted, from its producer's
    first offset in the log (its records are skipped until that producer's ABORT)."""

    first_offset: int
    producer_id: int


class OffsetLookup(NamedTuple):
    """One partition's ListOffsets answer: the offset, its record's timestamp and leader
    epoch (-1: not known; v4+), or the error (offset and timestamp -1); ``no_leader``:
    failed before asking, no leader being known, and ``no_partition``: because the
    metadata says the partition does not exist."""

    offset: int
    timestamp: int
    error: Optional[KafkaError]
    leader_epoch: int = -1
    no_leader: bool = False
    no_partition: bool = False


def _lookup_failed(error: KafkaError) -> OffsetLookup:
    return OffsetLookup(-1, -1, error)


def _leaderless(error: KafkaError, no_partition: bool = False) -> OffsetLookup:
    return OffsetLookup(-1, -1, error, no_leader=True, no_partition=no_partition)


class Chunk:
    """Record batches fetched for one partition, queued for the application."""

    __slots__ = ("part", "version", "batches", "start", "aborted", "nbytes", "count",
                 "last_epoch")

    def __init__(self, part: PartitionState, version: int, batches: List[Any], start: int,
                 aborted: Optional[List[AbortedTransaction]], nbytes: int,
                 count: int) -> None:
        self.part = part
        self.version = version
        self.batches = batches   # RecordBatch / LegacyBatch objects (headers parsed)
        self.start = start       # skip records before this offset
        self.aborted = aborted   # read_committed: sorted by first offset
        self.nbytes = nbytes
        self.count = count
        #: the leader epoch of the batch the last row taken as a column came from
        self.last_epoch = -1

    def end(self) -> Tuple[int, int]:
        """(offset after the chunk's last batch, that batch's leader epoch): the position
        once all of the chunk was handed out, also past control records and aborted
        transactions at its end, which are never handed out (librdkafka and the Java
        client move the position past them too: a read_committed consumer at the end of
        a transactional partition is at the high watermark, not one short of it)."""
        last = self.batches[-1]
        return last.last_offset + 1, last.partition_leader_epoch


class Event:
    """An error or EOF for the application, in order with the partition's data."""

    __slots__ = ("part", "version", "message")

    def __init__(self, part: Optional[PartitionState], version: int, message: Message) -> None:
        self.part = part
        self.version = version
        self.message = message


class Fetcher:
    """Fetches for the assigned partitions on the client's I/O thread.

    ``deliver(item)`` queues a :class:`Chunk` or :class:`Event` for the application (called
    with the lock held). ``committed_lookup(parts, done)``, when set, resolves
    OFFSET_STORED: it must eventually call ``done({key: (offset or -1, leader epoch or
    -1)})`` on the I/O thread (or ``done(None)`` to retry later).

    Positions are validated as KIP-320 has it: when the metadata shows a partition's
    leader epoch other than the one its position was read (or checked) under, and the
    position's own epoch is known, OffsetForLeaderEpoch asks the leader where that epoch
    ends in its log before the partition is fetched again. A position beyond it was
    truncated away (an unclean leader election): the partition moves back to where the
    logs part and the application gets a ``_LOG_TRUNCATION`` event, as from librdkafka
    (with ``auto.offset.reset=error`` it stops there instead, until a seek).
    """

    def __init__(self, config: Any, cluster: Any, io: Any,
                 deliver: Callable[[Any], None]) -> None:
        self.cluster = cluster
        self.io = io
        self.deliver = deliver
        self.lock = threading.RLock()
        #: Fetch round trips since the last metrics push (KIP-714)
        self.fetch_latency = IntervalStat()
        self.parts: Dict[TopicPartitionKey, PartitionState] = {}
        self.committed_lookup: Optional[Callable[[List[PartitionState],
                                                  Callable[[Optional[Dict]], None]],
                                                 None]] = None
        self.log = config.logger_for(_log.name)
        self.read_committed = config["isolation.level"] == "read_committed"
        self.isolation_level = (IsolationLevel.READ_COMMITTED if self.read_committed
                                else IsolationLevel.READ_UNCOMMITTED)
        self.partition_eof = bool(config["enable.partition.eof"])
        self.reset_policy = config["auto.offset.reset"]
        self.max_wait_ms = int(config["fetch.wait.max.ms"])
        self.min_bytes = int(config["fetch.min.bytes"])
        self.max_bytes = int(config["fetch.max.bytes"])
        self.partition_max_bytes = int(config["max.partition.fetch.bytes"])
        self.message_max_bytes = int(config["message.max.bytes"])
        self.error_backoff = config["fetch.error.backoff.ms"] / 1000.0
        self.queue_max_bytes = int(config["queued.max.messages.kbytes"]) * 1024
        #: a batch may decompress to at least this much (beyond, 64 times its compressed
        #: size): as large as anything the configuration lets a Fetch carry (a batch a
        #: producer wrote with a raised message.max.bytes is no bomb; the codec's 64 MiB
        #: floor refused those)
        self.decompressed_floor = max(DEFAULT_MAX_DECOMPRESSED_SIZE,
                                      int(config["receive.message.max.bytes"]),
                                      int(config["fetch.max.bytes"]),
                                      int(config["message.max.bytes"]))
        self.queue_min_msgs = int(config["queued.min.messages"])
        #: wire bytes and records of every partition's chunks waiting for the
        #: application: the two limits above bound these consumer-wide, as librdkafka's
        #: one consumer queue does (per partition, a slow application's consumer of N
        #: partitions held N times the limit). Changed under the lock.
        self.queued_bytes = 0
        self.queued_msgs = 0
        self.check_crcs = bool(config["check.crcs"])
        self.retry_backoff = config["retry.backoff.ms"] / 1000.0
        self.retry_backoff_max = config["retry.backoff.max.ms"] / 1000.0
        #: sent with each Fetch (v11+): a leader with a rack-aware replica selector
        #: names a replica in the same rack to fetch from (KIP-392)
        self.rack: str = config["client.rack"] or ""
        #: how long such a replica is used before the leader is asked again (the Java
        #: client's rule: metadata.max.age.ms)
        self.read_replica_ttl = config["metadata.max.age.ms"] / 1000.0
        #: (node, lane) with a Fetch in flight (Cluster.fetch_lane_connection): lane 1 is
        #: used while lane 0 holds a Fetch
        self._busy: Set[Tuple[int, int]] = set()
        #: node id -> no Fetch before this time: the broker answered a Fetch at once with
        #: no data instead of holding it for fetch.wait.max.ms (noida-db does), so a wait
        #: is made here rather than sending thousands of empty fetches a second. It starts
        #: at EMPTY_HOLD_FIRST_S and doubles with each such answer in a row, up to the
        #: wait the broker skipped: data that keeps coming is fetched within a few ms (a
        #: broker that holds would answer as soon as it comes), an idle partition costs
        #: one Fetch per fetch.wait.max.ms.
        self._node_hold: Dict[int, float] = {}
        #: (node, lane) -> that connection's fetch session (KIP-227)
        self._sessions: Dict[Tuple[int, int], FetchSession] = {}
        #: (node, lane) -> the connection its last Fetch went on
        self._lane_conns: Dict[Tuple[int, int], Any] = {}
        #: node id -> how many Fetch answers in a row came at once with nothing
        self._empty_streak: Dict[int, int] = {}
        #: broker -> the top-level error of its last Fetch answer, while it refuses them
        self._refusals: Dict[int, int] = {}
        #: (node, lane) of the connections whose last Fetch was cut off by their loss
        self._fetch_lost: Set[Tuple[int, int]] = set()
        #: node id -> since when a Fetch to it is put off: every partition it would
        #: carry is at the end of its log while others of that node wait for the
        #: application to take from their full queues (see tick())
        self._deferred: Dict[int, float] = {}
        self.fetch_requests = 0
        self.closed = False
        #: the metadata version whose topic ids the positions were checked against
        self._ids_checked = -1
        #: the consumer's Handout.settle: brings the stored offsets up to what the
        #: application was handed, before they are read for a commit
        self.settle: Optional[Callable[[], None]] = None
        # No metadata or connection listeners: tick() runs after every loop turn and
        # picks up new leaders and READY connections.
        io.add_tick(self.tick)

    # -- wake-ups ----------------------------------------------------------------------
    def kick(self) -> None:
        """Any thread: look at the partitions again soon (an assignment or position
        changed: fetch at once)."""
        self._node_hold.clear()
        self._empty_streak.clear()
        self._ids_checked = -1     # new partitions learn their topic's id
        self.io.wake()

    # -- the loop --------------------------------------------------------------------------
    def tick(self, now: float) -> Optional[float]:
        if self.closed or not self.parts:
            return None
        nxt: Optional[float] = None
        by_node: Dict[int, List[PartitionState]] = {}
        #: leader -> partitions whose positions it must confirm first (KIP-320)
        to_check: Dict[int, List[PartitionState]] = {}
        held_back: Set[int] = set()   # nodes serving a partition whose queue is full
        lookups: List[PartitionState] = []
        stored: List[PartitionState] = []
        need_md: List[str] = []
        md = self.cluster.metadata
        with self.lock:
            if md.version != self._ids_checked:
                self._ids_checked = md.version
                self._check_topic_ids(md)
            full = self._queue_full()
            for part in self.parts.values():
                if not part.assigned or part.fetching == part.version or part.resolving \
                        or part.validating:
                    continue
                if part.backoff_until > now:
                    if nxt is None or part.backoff_until < nxt:
                        nxt = part.backoff_until
                    continue
                if part.reset is not None:
                    if part.reset == OFFSET_STORED:
                        stored.append(part)
                    elif md.leader(part.topic, part.partition) < 0:
                        # No leader to ask yet (a topic just assigned): the metadata
                        # answer's loop turn brings us back, rather than a lookup that
                        # fails and waits retry.backoff.ms.
                        need_md.append(part.topic)
                    else:
                        lookups.append(part)
                    continue
                if part.fetch_pos < 0 or part.paused:
                    continue
                leader = md.leader(part.topic, part.partition)
                node = self._read_from(part, leader, now)
                if full:
                    held_back.add(node)
                    continue  # the application's consumption wakes us (see taken())
                if leader < 0:
                    need_md.append(part.topic)
                    continue
                epoch = md.leader_epoch(part.topic, part.partition)
                if 0 <= epoch != part.validated_epoch:
                    if part.fetch_epoch >= 0:
                        to_check.setdefault(leader, []).append(part)
                        continue
                    part.validated_epoch = epoch    # nothing to check it with
                by_node.setdefault(node, []).append(part)
        if need_md:
            self.cluster.want_topics(need_md)
            nxt = _earliest(nxt, md.request(need_md, fast=True, now=now))
        if stored:
            self._resolve_stored(stored)
        if lookups:
            self._resolve_logical(lookups)
        for leader, parts in to_check.items():
            conn = self.cluster.ensure_connected(leader)
            if conn is None:
                continue
            if conn.ready:
                self._validate_positions(conn, parts)
            elif conn.state == DISCONNECTED and conn.next_attempt > now:
                # The leader to confirm the positions with cannot be reached.
                nxt = _earliest(nxt, self._ask_for_leaders(parts, conn, now))
        for node, parts in by_node.items():
            # What became fetchable while a Fetch waits at the broker on the first
            # connection (a seek, an assignment, a queue emptied) goes on the second.
            lane = 0 if (node, 0) not in self._busy else 1
            if (node, lane) in self._busy:
                continue
            max_wait_ms = self.max_wait_ms
            if node in held_back and all(self._at_end(p) for p in parts):
                # A Fetch of these alone would wait fetch.wait.max.ms at the broker for
                # new data, and the partitions with full queues could not be fetched
                # once the application has emptied them (one Fetch in flight per node):
                # put it off until they can go along (taken() wakes us), or at most
                # fetch.wait.max.ms, and then ask without waiting.
                since = self._deferred.setdefault(node, now)
                until = since + self.max_wait_ms / 1000.0
                if now < until:
                    nxt = _earliest(nxt, until)
                    continue
                max_wait_ms = 0
            self._deferred.pop(node, None)
            hold = self._node_hold.get(node)
            if hold is not None:
                if hold > now:
                    nxt = _earliest(nxt, hold)
                    continue
                del self._node_hold[node]
            conn = self.cluster.fetch_lane_connection(node, lane)
            if conn is None:
                continue
            if not conn.ready:
                if conn.state == DISCONNECTED and conn.next_attempt > now:
                    # Its last connection attempt failed, and with no Fetch in flight
                    # when the broker went away (partitions paused, queues full, a
                    # Fetch just answered) no failed answer tells us so.
                    if self._leave_unreachable_replica(node, parts):
                        nxt = now        # to the leaders at the next turn
                        continue
                    nxt = _earliest(nxt, self._ask_for_leaders(parts, conn, now))
                continue
            self._send_fetch(conn, node, lane, parts, max_wait_ms)
            if (node, lane) not in self._busy:
                # The Fetch failed before send() returned (a write error on a
                # connection closed under us): its partitions are in their error
                # backoff, set after we looked at them above.
                for part in parts:
                    if part.backoff_until > now:
                        nxt = _earliest(nxt, part.backoff_until)
        return nxt

    def _check_topic_ids(self, md: Any) -> None:
        """Lock held: a topic deleted and created again under its name has another id,
        and the positions (and offsets stored for a commit) of its assigned partitions
        belong to the old log: those partitions start again from the committed offset,
        else ``auto.offset.reset``. (librdkafka keeps the old positions and so skips as
        many records of the new log, or reads from its end.)"""
        for part in self.parts.values():
            info = md.topic(part.topic)
            tid = None if info is None else info.topic_id
            if tid is None or tid == part.topic_id or not part.assigned:
                continue
            if part.topic_id is None:
                part.topic_id = tid
                continue
            if tid == part.old_topic_id:
                continue     # a broker whose metadata lags still names the old topic
            self.log.warning(
                "%s [%d]: the topic was deleted and created again (topic id %s, was %s): "
                "reading the new one from the committed offset, else auto.offset.reset=%s "
                "(position %d and stored offset %d were the old one's)", part.topic,
                part.partition, tid, part.topic_id, self.reset_policy, part.fetch_pos,
                part.stored)
            part.old_topic_id, part.topic_id = part.topic_id, tid
            part.seek(OFFSET_STORED)
            part.stored = part.committed = -1
            part.stored_metadata = None
            part.stored_epoch = -1
            part.hw = part.lso = part.log_start = -1

    # -- offsets -------------------------------------------------------------------------
    def _resolve_stored(self, parts: List[PartitionState]) -> None:
        lookup = self.committed_lookup
        if lookup is None:
            # No group: nothing stored; fall back on auto.offset.reset at once.
            with self.lock:
                for part in parts:
                    self._apply_reset_policy(part, "no committed offset (no group.id)")
            return
        versions = {part.key: part.version for part in parts}
        for part in parts:
            part.resolving = True

        def done(offsets: Optional[Dict[TopicPartitionKey, Tuple[int, int]]]) -> None:
            with self.lock:
                for part in parts:
                    # Answered: no lookup in flight any more, whatever its version (a
                    # pause() meanwhile bumped it: left set, the partition was never
                    # looked up again nor fetched).
                    part.resolving = False
                    if part.version != versions[part.key] or not part.assigned:
                        continue
                    if offsets is None:
                        part.backoff_until = time.monotonic() + self._lookup_delay(part)
                        continue
                    part.lookup_failures = 0
                    off, epoch = offsets.get(part.key, (-1, -1))
                    if off >= 0:
                        part.committed = off
                        part.reset = None
                        part.fetch_pos = off
                        part.app_pos = off
                        part.fetch_epoch = epoch  # validated before the first fetch
                    else:
                        self._apply_reset_policy(part, "no committed offset")
            self.kick()

        lookup(parts, done)

    def _lookup_delay(self, part: PartitionState) -> float:
        """Lock held: the wait before the partition's offset lookup is tried again after
        one more failure: retry.backoff.ms doubling up to retry.backoff.max.ms (KIP-580;
        a flat retry.backoff.ms asked ten times a second for as long as it failed)."""
        part.lookup_failures += 1
        return retry_delay(self.retry_backoff, self.retry_backoff_max, part.lookup_failures)

    def _apply_reset_policy(self, part: PartitionState, why: str) -> None:
        """Lock held: ``auto.offset.reset`` for a partition without a usable offset."""
        policy = self.reset_policy
        part.app_pos = -1  # unknown until the reset is resolved
        part.fetch_epoch = part.validated_epoch = -1
        if policy == "earliest":
            part.reset = OFFSET_BEGINNING
        elif policy == "latest":
            part.reset = OFFSET_END
        else:
            part.reset = None
            offending, part.fetch_pos = part.fetch_pos, -1
            err = KafkaError(KafkaError._AUTO_OFFSET_RESET,
                             f"{part.topic} [{part.partition}]: {why} and "
                             f"auto.offset.reset=error")
            # offset(): the offset that had no message (librdkafka's), when there was one
            self.deliver(Event(part, part.version, error_event(
                err, part.topic, part.partition, offending)))

    def _resolve_logical(self, parts: List[PartitionState]) -> None:
        """ListOffsets for partitions waiting on BEGINNING/END/tail."""
        want: Dict[TopicPartitionKey, int] = {}
        versions = {}
        with self.lock:
            for part in parts:
                ts = (ListOffsetsTimestamp.EARLIEST if part.reset == OFFSET_BEGINNING
                      else ListOffsetsTimestamp.LATEST)
                want[part.key] = ts
                versions[part.key] = part.version
                part.resolving = True

        def done(results: Dict[TopicPartitionKey, OffsetLookup]) -> None:
            # One leader's answer (or the partitions with none): the others come apart.
            t = time.monotonic()
            with self.lock:
                for part in parts:
                    found = results.get(part.key)
                    if found is None:
                        continue          # another leader's partition: its answer comes apart
                    part.resolving = False   # answered, whatever its version (see above)
                    if part.version != versions[part.key] or not part.assigned:
                        continue
                    off, err = found.offset, found.error
                    if err is None and off < 0:
                        # No error and no offset: a broken answer, said like any other
                        # error (it was retried for ever without a word).
                        which = ("earliest" if want[part.key] == ListOffsetsTimestamp.EARLIEST
                                 else "latest")
                        err = KafkaError(KafkaError._BAD_MSG, (
                            f"ListOffsets {part.topic} [{part.partition}]: the leader "
                            f"answered offset {off} for the {which} offset, with no error"))
                    if err is not None:
                        part.backoff_until = t + self._lookup_delay(part)
                        if not err.retriable():
                            # Once per error, not at every retry (a broker without a
                            # usable ListOffsets made 10 events a second per partition).
                            if part.last_error != err.code():
                                self._report(part, err)
                            part.last_error = err.code()
                        continue
                    part.lookup_failures = 0
                    tail = 0
                    if part.reset is not None and part.reset <= OFFSET_TAIL_BASE:
                        tail = OFFSET_TAIL_BASE - part.reset  # applied by _fix_end
                    part.end_check = tail if part.reset != OFFSET_BEGINNING else None
                    part.reset = None
                    part.fetch_pos = off
                    part.app_pos = off
                    # The leader's answer is a position in its log now: checked again
                    # only when the leader changes (KIP-320).
                    part.fetch_epoch = found.leader_epoch
                    part.validated_epoch = md.leader_epoch(part.topic, part.partition)
            self.kick()

        md = self.cluster.metadata
        self.list_offsets(want, done, timeout=None, isolation=self.isolation_level,
                          each_broker=True)

    def list_offsets(self, want: Dict[TopicPartitionKey, int],
                     done: Callable[[Dict[TopicPartitionKey, OffsetLookup]], None],
                     timeout: Optional[float],
                     isolation: int = IsolationLevel.READ_UNCOMMITTED, *,
                     each_broker: bool = False, fresh_after: Optional[float] = None) -> None:
        """I/O thread: ListOffsets for ``{(topic, partition): timestamp}``
        (ListOffsetsTimestamp.EARLIEST or LATEST, else a time in ms), sent to each
        partition's leader; ``done`` gets ``{key: OffsetLookup}`` once every leader
        answered or failed, or with ``each_broker`` once per leader as it answers (and
        once for the partitions without a known leader), so that a broker that is slow
        or down holds up only its own partitions. A request to a leader that cannot be
        reached fails with its first failed connection attempt, and the metadata of its
        topics is asked again: the partitions may have a new leader (a stopped broker's
        leaderships move), which the next lookup goes to, rather than waiting for that
        broker until the request times out. A partition without a leader whose topic a
        metadata answer received after ``fresh_after`` says does not exist, or has fewer
        partitions, fails for good (UNKNOWN_TOPIC_OR_PART, _UNKNOWN_PARTITION), as
        librdkafka's lookups do, rather than as a leader to wait for."""
        md = self.cluster.metadata
        results: Dict[TopicPartitionKey, OffsetLookup] = {}
        by_node: Dict[int, Dict[str, List[Tuple[int, int]]]] = {}
        for (topic, p), ts in want.items():
            leader = md.leader(topic, p)
            if leader < 0:
                info = md.topic(topic)
                if fresh_after is not None and info is not None and \
                        info.updated >= fresh_after:
                    if info.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        results[(topic, p)] = _leaderless(KafkaError(
                            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"{topic} [{p}]: the topic does not exist"), no_partition=True)
                        continue
                    if not info.error and p >= info.partition_count:
                        results[(topic, p)] = _leaderless(KafkaError(
                            KafkaError._UNKNOWN_PARTITION, f"{topic} [{p}]: the topic has "
                            f"{info.partition_count} partitions"), no_partition=True)
                        continue
                results[(topic, p)] = _leaderless(client_error(
                    KafkaError.LEADER_NOT_AVAILABLE, f"{topic} [{p}]: leader not known"))
                self.cluster.want_topics([topic])
                md.request([topic], fast=True)
                continue
            by_node.setdefault(leader, {}).setdefault(topic, []).append((p, ts))
        pending = [len(by_node)]
        if not by_node or (each_broker and results):
            done(results)   # with each_broker: the partitions without a leader, now
        if not by_node:
            return

        def answered(node_parts: Dict[str, List[Tuple[int, int]]], resp: Any,
                     err: Optional[KafkaError]) -> None:
            got = {} if each_broker else results
            if err is not None:
                for topic, plist in node_parts.items():
                    if err.code() in NO_ANSWER:
                        md.mark_stale(topic)
                    for p, _ in plist:
                        got[(topic, p)] = _lookup_failed(err)
            else:
                asked = {(topic, p) for topic, plist in node_parts.items() for p, _ in plist}
                seen = set()
                for t in resp.topics:
                    for pr in t.partitions:
                        key = (t.name, pr.partition_index)
                        if key not in asked:
                            continue  # not asked of this broker: not its answer to give
                        seen.add(key)
                        if pr.error_code:
                            code = broker_code(pr.error_code)
                            e = client_error(code, f"ListOffsets {t.name} "
                                             f"[{pr.partition_index}]")
                            if code in LEADER_ERRORS:
                                md.mark_stale(t.name)
                            got[key] = _lookup_failed(e)
                        elif pr.old_style_offsets:    # v0: a list, newest first
                            got[key] = OffsetLookup(pr.old_style_offsets[0], -1, None, -1)
                        else:
                            got[key] = OffsetLookup(
                                pr.offset, pr.timestamp, None,
                                getattr(pr, "leader_epoch", -1))
                for topic, p in asked - seen:
                    got[(topic, p)] = _lookup_failed(KafkaError(
                        KafkaError._BAD_MSG, f"ListOffsets: no answer for {topic} [{p}]"))
            pending[0] -= 1
            if each_broker:
                done(got)
            elif pending[0] == 0:
                done(results)

        for node, topics in by_node.items():
            conn = self.cluster.ensure_connected(node)
            if conn is None:
                answered(topics, None, client_error(KafkaError._TRANSPORT,
                                                    f"broker {node} unknown"))
                continue
            version = conn.versions.get(ApiKey.LIST_OFFSETS)
            if version is not None and version < 1 and any(
                    ts >= 0 for plist in topics.values() for _p, ts in plist):
                # v0 (Kafka 0.10.0) finds the start and the end of a log, not the offset
                # of a time: what it answers for one (a segment's base) is not that
                answered(topics, None, KafkaError(
                    KafkaError._UNSUPPORTED_FEATURE, "offsets for times need ListOffsets "
                    "v1 (Kafka 0.10.1); the broker has only v0"))
                continue
            req = ListOffsetsRequest(
                replica_id=ReplicaId.CONSUMER,
                topics=[ListOffsetsRequest.ListOffsetsTopic(
                    name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(
                        partition_index=p, timestamp=ts, current_leader_epoch=-1,
                        max_num_offsets=1)
                        for p, ts in plist])
                    for topic, plist in topics.items()])
            conn.send(req, lambda resp, err, t=topics: answered(t, resp, err),
                      timeout=timeout, fail_unreachable=True,
                      for_version=functools.partial(_set_isolation, isolation))

    # -- fetching ------------------------------------------------------------------------
    def _at_end(self, part: PartitionState) -> bool:
        """Lock held: the last Fetch answer showed nothing past the partition's position
        (what read_committed may read ends at the last stable offset)."""
        end = part.lso if self.read_committed else part.hw
        return 0 <= end <= part.fetch_pos

    # -- where to fetch from (KIP-392) -----------------------------------------------------
    def _read_from(self, part: PartitionState, leader: int, now: float) -> int:
        """Lock held: the broker to fetch the partition from: the replica its leader
        named while that holds (not expired, still a broker of the cluster), else the
        leader."""
        replica = part.read_replica
        if replica < 0:
            return leader
        if now < part.read_replica_until and replica in self.cluster.metadata.brokers \
                and leader >= 0:
            return replica
        part.read_replica = -1
        return leader

    def _ask_for_leaders(self, parts: List[PartitionState], conn: Any,
                         now: float) -> Optional[float]:
        """``conn``, to the leader of ``parts``, is in its reconnect backoff: the leadership
        may have moved, so their topics' metadata is asked for (as the producer, librdkafka
        and the Java client ask on a broker's failure). When the loop must turn again:
        when that request goes out (this tick runs after the cluster's) or, with no
        request queued to wake it, when the backoff ends."""
        asked = self.cluster.metadata.request(sorted({p.topic for p in parts}), fast=True,
                                              now=now)
        return _earliest(asked, conn.next_attempt)

    def _leave_unreachable_replica(self, node: int, parts: List[PartitionState]) -> bool:
        """The partitions fetched from ``node`` as the replica their leader named, while
        the last connection attempt to it failed, go back to their leaders (as the Java
        consumer does). True if any did."""
        moved = False
        with self.lock:
            for part in parts:
                if part.read_replica == node:
                    self._back_to_leader(part, "its connection failed")
                    moved = True
        return moved

    def _back_to_leader(self, part: PartitionState, why: str) -> None:
        """Lock held: fetch from the leader again (it may name a replica anew)."""
        self.log.debug("%s [%d]: fetching from the leader again instead of broker %d "
                       "(%s)", part.topic, part.partition, part.read_replica, why)
        part.read_replica = -1

    # -- validating positions (KIP-320) ------------------------------------------------
    def _validate_positions(self, conn: Any, parts: List[PartitionState]) -> None:
        """Check the positions of ``parts`` against their leader's (``conn``) log in one
        OffsetForLeaderEpoch (v2+: it carries the current leader epoch, so a stale
        leader says so). A leader without it takes them as they are (fetched at the
        next look)."""
        md = self.cluster.metadata
        version = conn.versions.get(ApiKey.OFFSET_FOR_LEADER_EPOCH)
        check: List[Tuple[PartitionState, int, int]] = []   # (part, leader epoch, version)
        with self.lock:
            for part in parts:
                epoch = md.leader_epoch(part.topic, part.partition)
                if version is None or version < 2:
                    part.validated_epoch = epoch
                else:
                    part.validating = True
                    check.append((part, epoch, part.version))
        if check:
            self._send_validation(conn, version, check)
        else:
            self.io.wake()

    def _send_validation(self, conn: Any, version: int,
                         check: List[Tuple[PartitionState, int, int]]) -> None:
        topics: Dict[str, Any] = {}
        for part, epoch, _v in check:
            t = topics.get(part.topic)
            if t is None:
                t = topics[part.topic] = OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
                    topic=part.topic, partitions=[])
            t.partitions.append(OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                partition=part.partition, current_leader_epoch=epoch,
                leader_epoch=part.fetch_epoch))
        req = OffsetForLeaderEpochRequest(replica_id=ReplicaId.CONSUMER,
                                          topics=list(topics.values()))
        conn.send(req, lambda resp, err: self._on_validated(check, resp, err),
                  version=version)

    def _on_validated(self, check: List[Tuple[PartitionState, int, int]], resp: Any,
                      err: Optional[KafkaError]) -> None:
        now = time.monotonic()
        md = self.cluster.metadata
        answers: Dict[TopicPartitionKey, Any] = {}
        if err is None:
            for t in resp.topics:
                for pr in t.partitions:
                    answers[(t.topic, pr.partition)] = pr
        with self.lock:
            for part, epoch, version in check:
                part.validating = False
                if part.version != version or not part.assigned:
                    continue          # seeked meanwhile: that position is another's
                pr = answers.get(part.key)
                if err is not None:
                    failure: Optional[KafkaError] = err
                elif pr is None:
                    failure = KafkaError(KafkaError._BAD_MSG, (
                        f"OffsetForLeaderEpoch {part.topic} [{part.partition}]: the "
                        f"leader's answer left the partition out"))
                else:
                    code = broker_code(pr.error_code)
                    failure = client_error(code, (
                        f"OffsetForLeaderEpoch {part.topic} [{part.partition}]")) \
                        if code else None
                if failure is not None:
                    # Checked again after the backoff (and new metadata, if stale).
                    code = failure.code()
                    part.backoff_until = now + self.error_backoff
                    if code in LEADER_ERRORS:
                        md.mark_stale(part.topic, now)
                    elif code not in NO_ANSWER and code != KafkaError._DESTROY:
                        if part.last_error != code:
                            # Once per partition and error, not at every retry: the
                            # partition is not fetched until its position is checked.
                            self.log.warning("%s [%d]: validating the position after a "
                                             "leader change failed (retrying every %g s): "
                                             "%s", part.topic, part.partition,
                                             self.error_backoff, failure.str())
                            self._report(part, failure)
                        part.last_error = code
                    continue
                assert pr is not None    # no failure: the leader answered for it
                self._position_checked(part, epoch, pr.leader_epoch, pr.end_offset)
        self.kick()

    def _position_checked(self, part: PartitionState, epoch: int, end_epoch: int,
                          end_offset: int) -> None:
        """Lock held: the leader (at ``epoch``) says the position's epoch ends at
        ``end_offset`` in its log (as epoch ``end_epoch``)."""
        pos = part.fetch_pos
        if end_offset < 0 or end_epoch < 0:
            # The leader knows no epoch this old: nothing of the position's log is left.
            self.log.warning("%s [%d]: the leader has no log for leader epoch %d (position "
                             "%d): applying auto.offset.reset=%s", part.topic,
                             part.partition, part.fetch_epoch, pos, self.reset_policy)
            part.version += 1
            self._apply_reset_policy(part, f"log truncation detected at offset {pos}")
            return
        if end_offset >= pos:
            part.validated_epoch = epoch
            return
        what = (f"{part.topic} [{part.partition}]: log truncation detected at offset {pos} "
                f"(leader epoch {part.fetch_epoch}): the leader's log ends at offset "
                f"{end_offset} for it")
        self.log.warning("%s; %s", what, "stopping (auto.offset.reset=error): seek to go on"
                         if self.reset_policy not in ("earliest", "latest")
                         else f"reading on from {end_offset}")
        if self.reset_policy not in ("earliest", "latest"):
            part.version += 1
            part.fetch_pos = -1
            self._report(part, KafkaError(KafkaError._LOG_TRUNCATION,
                                          f"{what}; auto.offset.reset=error"), pos)
            return
        # What was fetched beyond the parting point is dropped; what the application
        # was given of it stays given, and the offsets from there on are read again,
        # as the leader now has them.
        part.seek(end_offset, end_epoch)
        part.validated_epoch = epoch
        part.committed = min(part.committed, end_offset)
        self._report(part, KafkaError(KafkaError._LOG_TRUNCATION,
                                      f"{what}: reading on from there"), end_offset)

    def _send_fetch(self, conn: Any, node: int, lane: int, parts: List[PartitionState],
                    max_wait_ms: int) -> None:
        md = self.cluster.metadata
        version = conn.versions.get(ApiKey.FETCH)
        if version is None:
            self.cluster.report_missing_api(conn, ApiKey.FETCH)
            return
        infos = {part.topic: md.topic(part.topic) for part in parts}
        if version >= 13 and any(info is None or info.topic_id is None
                                 for info in infos.values()):
            # Fetch v13+ names topics by id; some brokers (noida-db) advertise v13 but
            # report no ids: then stay on v12, which names them.
            version = 12
        wanted: List[SessionPartition] = []
        sent: List[Tuple[PartitionState, int, int]] = []
        unknown: List[TopicPartitionKey] = []   # no answer since assigned: see plan()
        with self.lock:
            for part in parts:
                if not part.assigned or part.fetch_pos < 0 or part.paused \
                        or part.fetching == part.version:
                    continue
                if part.max_bytes <= 0:
                    part.max_bytes = self.partition_max_bytes
                wanted.append(SessionPartition(
                    part.topic, infos[part.topic].topic_id if version >= 13 else None,
                    part.partition, part.fetch_pos,
                    md.leader_epoch(part.topic, part.partition), part.max_bytes))
                part.fetching = part.version
                sent.append((part, part.version, part.fetch_pos))
                if part.hw < 0:
                    unknown.append(part.key)
        if not sent:
            return
        session = self._sessions.get((node, lane))
        if session is None:
            session = self._sessions[(node, lane)] = FetchSession()
        self._lane_conns[(node, lane)] = conn
        plan = session.plan(wanted, version, unknown)
        req = FetchRequest(
            replica_id=ReplicaId.CONSUMER, max_wait_ms=max_wait_ms, min_bytes=self.min_bytes,
            max_bytes=self.max_bytes, isolation_level=self.isolation_level,
            session_id=plan.session_id, session_epoch=plan.epoch,
            topics=_fetch_topics(plan.send), forgotten_topics_data=_forgotten_topics(plan.forget),
            rack_id=self.rack)
        self._busy.add((node, lane))
        self.fetch_requests += 1
        wait = max_wait_ms / 1000.0
        timeout = conn.settings.request_timeout + wait
        sent_at = time.monotonic()
        conn.send(req, lambda resp, err: self._on_fetch(node, sent, resp, err, sent_at, wait,
                                                        lane, session, plan),
                  version=version, timeout=timeout)

    def _on_fetch(self, node: int, sent: List[Tuple[PartitionState, int, int]], resp: Any,
                  err: Optional[KafkaError], sent_at: float = 0.0,
                  wait: Optional[float] = None, lane: int = 0,
                  session: Optional[FetchSession] = None,
                  plan: Optional[FetchPlan] = None) -> None:
        self._busy.discard((node, lane))
        now = time.monotonic()
        if err is None and sent_at:
            self.fetch_latency.add(now - sent_at)
        md = self.cluster.metadata
        code = ErrorCode.NONE if err is not None else getattr(resp, "error_code", ErrorCode.NONE)
        if session is not None and plan is not None:
            if err is not None:
                session.failed()
            elif not session.answered(plan, resp.session_id, code):
                # The session's own trouble (evicted, out of step): not the partitions'.
                # Fetch them again at once, with a full Fetch.
                self.log.debug("Fetch session %d on broker %d dropped: %s; fetching in "
                               "full", plan.session_id, node, KafkaError(code).name())
                with self.lock:
                    for part, version, _pos in sent:
                        if part.fetching == version:
                            part.fetching = -1
                self.io.wake()
                return
        if code:
            self._refused_whole(node, broker_code(code), sent, now)
            return
        self._refusals.pop(node, None)
        if err is None:
            self._fetch_lost.discard((node, lane))
        else:
            # A lost connection is paced by its reconnect backoff: the partitions are
            # fetched again as soon as it (or the metadata's new leader) is up, as
            # librdkafka and the Java client do, not after fetch.error.backoff.ms too.
            # Lost again before any answer (a broker that drops every Fetch), they wait.
            first_loss = err.code() == KafkaError._TRANSPORT and \
                (node, lane) not in self._fetch_lost
            if err.code() == KafkaError._TRANSPORT:
                self._fetch_lost.add((node, lane))
            with self.lock:
                for part, version, _pos in sent:
                    if part.fetching != version:
                        continue  # seeked meanwhile: this was not the position's Fetch
                    part.fetching = -1
                    if not first_loss:
                        part.backoff_until = now + self.error_backoff
                    if part.read_replica == node:
                        self._back_to_leader(part, err.str())
            if first_loss:
                self.io.wake()   # to wait for the reconnect (it may fail inside tick())
            if err.code() not in NO_ANSWER and err.code() != KafkaError._DESTROY:
                self.log.warning("Fetch from broker %d failed: %s", node, err.str())
            md.request([p.topic for p, _, _ in sent], fast=True, now=now)
            return
        answers: Dict[TopicPartitionKey, Any] = {}
        names_by_id = None
        for t in resp.responses:
            name = t.topic
            if not name and getattr(t, "topic_id", None) is not None:
                if names_by_id is None:
                    names_by_id = {info.topic_id: n for n, info in md.topics.items()
                                   if info.topic_id is not None}
                name = names_by_id.get(t.topic_id)
            for pd in t.partitions:
                answers[(name, pd.partition_index)] = pd
        incremental = plan is not None and plan.answer_is_incremental(resp.session_id)
        if wait is None:
            wait = self.max_wait_ms / 1000.0
        if now - sent_at < wait / 2 and not any(
                pd.error_code or (pd.records is not None and len(pd.records))
                or getattr(pd, "preferred_read_replica", -1) >= 0   # "fetch there"
                for pd in answers.values()):
            streak = self._empty_streak.get(node, 0)
            self._empty_streak[node] = streak + 1
            self._node_hold[node] = sent_at + min(wait,
                                                  EMPTY_HOLD_FIRST_S * 2.0 ** min(streak, 30))
        else:
            self._empty_streak.pop(node, None)
        with self.lock:
            for part, version, pos in sent:
                if part.fetching == version:
                    part.fetching = -1
                if part.version != version or not part.assigned:
                    continue  # seeked or unassigned meanwhile: the answer is stale
                pd = answers.get(part.key)
                if pd is None and not incremental:
                    continue
                # Left out of an incremental answer: nothing new since the session last
                # told us (no records at the position, the same offsets).
                self._handle_partition(part, version, pos, pd, now, node)

    def _refused_whole(self, node: int, code: int, sent: List[Tuple[PartitionState, int, int]],
                       now: float) -> None:
        """Broker ``node`` answered a Fetch with a top-level error (and, from v13, no
        partitions): the error of every partition it was for, as a Kafka broker repeats it
        in each partition before v13 and librdkafka takes it. Each partition is fetched
        again after fetch.error.backoff.ms and gets one error event per error while it
        lasts (leader errors: none, the metadata is asked again), in its order."""
        if self._refusals.get(node) != code:
            self._refusals[node] = code
            self.log.warning("Fetch from broker %d refused: %s (%s); fetching again every "
                             "%g s", node, KafkaError(code).name(), KafkaError(code).str(),
                             self.error_backoff)
        with self.lock:
            for part, version, _pos in sent:
                if part.fetching != version:
                    continue  # seeked meanwhile: this was not the position's Fetch
                part.fetching = -1
                part.backoff_until = now + self.error_backoff
                if part.read_replica == node:
                    self._back_to_leader(part, KafkaError(code).name())
                elif code not in LEADER_ERRORS and part.last_error != code and \
                        part.assigned and part.version == version:
                    # Not OFFSET_OUT_OF_RANGE's reset: the answer names no partition.
                    self._report(part, client_error(
                        code, f"{part.topic} [{part.partition}]: Fetch from broker {node} "
                        f"failed at offset {part.fetch_pos}: the broker refused the whole "
                        f"request: {KafkaError(code).str()}"))
                part.last_error = code
        if code in LEADER_ERRORS:
            self.cluster.metadata.request([p.topic for p, _, _ in sent], fast=True, now=now)

    def _handle_partition(self, part: PartitionState, version: int, pos: int, pd: Any,
                          now: float, node: int = -1) -> None:
        """Lock held: one partition's answer from broker ``node``; ``pd`` None: left out
        of an incremental answer (nothing new: no records, the offsets last told)."""
        if pd is None:
            part.last_error = None
            if part.end_check is None or not self._fix_end(part, None):
                self._report_eof(part, version, node)
            return
        code = broker_code(pd.error_code)
        from_replica = part.read_replica >= 0 and part.read_replica == node
        if code:
            if from_replica:
                # Whatever a replica refuses (even OFFSET_OUT_OF_RANGE: it may lag the
                # leader) goes to the leader, which decides.
                self._back_to_leader(part, KafkaError(code).name())
                return
            self._partition_error(part, code, now, getattr(pd, "current_leader", None), node)
            return
        replica = getattr(pd, "preferred_read_replica", -1)
        if replica >= 0 and replica != node and not from_replica:
            # The leader names a replica closer to us: fetch there from now on (the
            # answer carries no records for the partition).
            part.read_replica = replica
            part.read_replica_until = now + self.read_replica_ttl
            self.log.debug("%s [%d]: the leader says to fetch from broker %d",
                           part.topic, part.partition, replica)
        if part.last_error is not None:
            part.last_error = part.last_error_logged = None
        part.hw = pd.high_watermark
        lso = getattr(pd, "last_stable_offset", -1)
        part.lso = lso if lso is not None else -1
        ls = getattr(pd, "log_start_offset", -1)
        part.log_start = ls if ls is not None else -1
        data = pd.records
        new_pos = pos
        batches: List[Any] = []
        count = 0
        before = 0
        if data is not None and len(data):
            try:
                for batch in read_batches(data, self.check_crcs,
                                          decompressed_floor=self.decompressed_floor):
                    if batch.last_offset < new_pos:
                        before += 1
                        continue  # before the position (a compacted or legacy wrapper)
                    batches.append(batch)
                    count += batch.records_count
                    new_pos = batch.last_offset + 1
            except KafkaProtocolError as exc:
                # Deliver what came before the bad batch, then the error; the position
                # stays on the bad batch, so a retry after the backoff sees it again.
                if batches:
                    self._queue_chunk(part, version, batches, pos, pd, count, new_pos)
                part.backoff_until = now + self.error_backoff
                self._report(part, KafkaError(
                    KafkaError._BAD_MSG, f"{part.topic} [{part.partition}] at offset "
                    f"{new_pos}: {exc}"), new_pos)
                return
            if not batches and before:
                # Only batches that end before the position: a broker answers from the
                # batch holding the offset asked for, so this one replays old data.
                # Asking again at once would spin (librdkafka does): back off.
                part.backoff_until = now + self.error_backoff
                part.stale_answers += 1
                if part.stale_answers == 1:
                    self.log.warning("%s [%d]: broker %d answered a Fetch at offset %d "
                                     "with only records before it; fetching again every "
                                     "%g s", part.topic, part.partition, node, pos,
                                     self.error_backoff)
                return
            if batches:
                part.stale_answers = 0
            if not batches and part.max_bytes < max(self.max_bytes, self.message_max_bytes):
                # Only part of one batch came back (larger than partition_max_bytes on a
                # broker that does not return oversized first batches): ask for more.
                part.max_bytes = min(part.max_bytes * 2, max(self.max_bytes,
                                                             self.message_max_bytes))
        if part.end_check is not None and self._fix_end(part, batches[0] if batches else None):
            return
        if batches:
            self._queue_chunk(part, version, batches, pos, pd, count, new_pos)
        self._report_eof(part, version, node)

    def _report_eof(self, part: PartitionState, version: int, node: int) -> None:
        """Lock held: after an answer for the partition from broker ``node``,
        _PARTITION_EOF if its position is the end and none was reported there yet
        (enable.partition.eof), in librdkafka's words (naming the broker). A position
        past the end (a seek there, on a broker that does not answer it out of range,
        as Tansu) is not the end, as in librdkafka: no EOF until the log reaches it.
        The end reached is kept without enable.partition.eof too (the statistics'
        ``eof_offset``, as librdkafka's)."""
        end = part.lso if self.read_committed and part.lso >= 0 else part.hw
        if part.fetch_pos == end >= 0 and part.eof_offset != part.fetch_pos:
            part.eof_offset = part.fetch_pos
            if self.partition_eof:
                self.deliver(Event(part, version, error_event(
                    KafkaError(KafkaError._PARTITION_EOF,
                               f"Fetch from broker {node} reached end of partition at "
                               f"offset {part.fetch_pos} (HighwaterMark {part.hw})"),
                    part.topic, part.partition, part.fetch_pos)))

    def _fix_end(self, part: PartitionState, first: Any) -> bool:
        """Lock held: the first answer for a position that came from ListOffsets(latest)
        (END, or a tail, not yet subtracted). The end of a log is always a batch
        boundary, so a first batch that starts before the position means the broker
        answered with an offset inside the last batch (Tansu 0.6 answers the last batch's
        base offset + 1): the real end is that batch's end. Moves to the end minus the
        tail and returns True (fetch again, this answer is dropped), or returns False
        when the position stands."""
        pos = part.fetch_pos
        tail = part.end_check or 0
        part.end_check = None
        end = pos
        if first is not None and first.base_offset < pos:
            end = first.last_offset + 1
            self.log.debug("%s [%d]: ListOffsets(latest) said %d but a batch runs to %d",
                           part.topic, part.partition, pos, end - 1)
        target = max(0, end - tail)
        if target == pos:
            return False
        part.fetch_pos = part.app_pos = target
        return True

    def _queue_chunk(self, part: PartitionState, version: int, batches: List[Any], pos: int,
                     pd: Any, count: int, new_pos: int) -> None:
        aborted = None
        if self.read_committed:
            txns = getattr(pd, "aborted_transactions", None)
            if txns:
                aborted = sorted(AbortedTransaction(a.first_offset, a.producer_id)
                                 for a in txns)
        nbytes = sum(b.size for b in batches)
        part.fetch_pos = new_pos
        epoch = batches[-1].partition_leader_epoch
        if epoch >= 0:
            part.fetch_epoch = epoch
        part.queued_bytes += nbytes
        part.queued_msgs += count
        self.queued_bytes += nbytes
        self.queued_msgs += count
        part.rx_msgs += count
        part.rx_bytes += nbytes
        self.deliver(Chunk(part, version, batches, pos, aborted, nbytes, count))

    def _partition_error(self, part: PartitionState, code: int, now: float,
                         current_leader: Any = None, node: int = -1) -> None:
        md = self.cluster.metadata
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if part.last_error == code:
                # Out of range again, at the offset the reset just looked up, with no
                # data in between: the broker's ListOffsets and Fetch disagree. Reset
                # again after the backoff, not at once (that made thousands of requests
                # a second), and say so once.
                part.backoff_until = now + self.error_backoff
                if part.last_error_logged != code:
                    part.last_error_logged = code
                    self.log.warning("%s [%d]: offset %d, found by auto.offset.reset=%s, "
                                     "is out of range too; trying again every %g s",
                                     part.topic, part.partition, part.fetch_pos,
                                     self.reset_policy, self.error_backoff)
            else:
                self.log.info("%s [%d]: offset %d out of range; applying "
                              "auto.offset.reset=%s", part.topic, part.partition,
                              part.fetch_pos, self.reset_policy)
            part.last_error = code
            self._apply_reset_policy(part, f"fetch offset {part.fetch_pos} is out of range")
            return
        if code in LEADER_ERRORS and current_leader is not None and md.learn_leader(
                part.topic, part.partition, current_leader.leader_id,
                current_leader.leader_epoch):
            # The answer names the new leader (KIP-951): fetch there now, no backoff and
            # no wait for the metadata (still refreshed, for everything else).
            md.mark_stale(part.topic, now)
            part.last_error = code
            return
        part.backoff_until = now + self.error_backoff
        if code in LEADER_ERRORS:
            md.mark_stale(part.topic, now)
            if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and part.last_error != code:
                self._report(part, client_error(code, f"{part.topic} [{part.partition}]"))
            part.last_error = code
            return
        if part.last_error != code:
            # librdkafka's wording: where, from whom, and the broker's error in words.
            self._report(part, client_error(
                code, f"{part.topic} [{part.partition}]: Fetch from broker {node} failed at "
                f"offset {part.fetch_pos} (leader epoch {part.fetch_epoch}): "
                f"{KafkaError(code).str()}"))
        part.last_error = code

    def _report(self, part: PartitionState, err: KafkaError, offset: int = -1) -> None:
        """Lock held: an error event for the application, in the partition's order."""
        self.deliver(Event(part, part.version, error_event(
            err, part.topic, part.partition, offset if offset >= 0 else part.fetch_pos)))

    def taken(self, chunk: Chunk) -> None:
        """Application thread, lock held: a chunk left the queue (consumed or dropped)."""
        part = chunk.part
        was_full = self._queue_full()
        part.queued_bytes -= chunk.nbytes
        part.queued_msgs -= chunk.count
        self.queued_bytes -= chunk.nbytes
        self.queued_msgs -= chunk.count
        if was_full and not self._queue_full():
            self.io.wake()

    def _queue_full(self) -> bool:
        """The local queue (every partition's chunks) is at queued.max.messages.kbytes
        or queued.min.messages: nothing is fetched until the application takes some
        (one Fetch may overshoot, as librdkafka's)."""
        return self.queued_bytes >= self.queue_max_bytes \
            or self.queued_msgs >= self.queue_min_msgs

    # -- offsets for the group (any thread) -------------------------------------------
    def assigned_keys(self) -> Set[TopicPartitionKey]:
        """The partitions assigned now."""
        with self.lock:
            return {key for key, part in self.parts.items() if part.assigned}

    def stored_offsets(self, leaving: bool = False) -> List[TopicPartition]:
        """Stored offsets beyond the last commit (see PartitionState.commit_due); with
        ``leaving`` (the partitions leave the assignment: unassigned, revoked, the
        consumer closing), every stored offset, lower or equal to the committed one too,
        as librdkafka commits what it unassigns: the group is left where the application
        stored, after a seek backwards or an explicit store_offsets() as well."""
        with self.lock:
            if self.settle is not None:
                self.settle()
            out = []
            for part in self.parts.values():
                if part.commit_due() if not leaving else (
                        part.assigned and part.committable() >= 0):
                    offset = part.committable()
                    held = offset != part.stored   # the epoch before it is not known
                    out.append(TopicPartition(
                        part.topic, part.partition, offset, part.stored_metadata,
                        None if held or part.stored_epoch < 0 else part.stored_epoch))
            return out

    def set_committed(self, offsets: Dict[TopicPartitionKey, int]) -> None:
        """These offsets are committed now (by the group)."""
        with self.lock:
            for key, offset in offsets.items():
                part = self.parts.get(key)
                if part is not None:
                    part.committed = offset

    def close(self) -> None:
        """I/O thread (the client's shutdown): stop fetching, and end the fetch sessions
        so that their slots on the brokers are free at once rather than when evicted: a
        Fetch of the session's id with the final epoch, not waited for, on a connection
        to the broker with no Fetch in flight. (A broker reads a connection's requests
        one at a time: one sent behind a Fetch waiting there would be read after the
        connection is gone. Such a session is left to the broker's eviction.)"""
        self.closed = True
        self.io.remove_tick(self.tick)
        for (node, lane), session in self._sessions.items():
            closing = session.closing_epoch()
            if closing is None:
                continue
            for other in (lane, 1 - lane):     # sessions belong to the broker
                conn = self._lane_conns.get((node, other))
                if conn is not None and conn.ready and (node, other) not in self._busy:
                    session_id, epoch = closing
                    conn.send(FetchRequest(
                        replica_id=ReplicaId.CONSUMER, max_wait_ms=0, min_bytes=1,
                        max_bytes=self.max_bytes,
                        isolation_level=self.isolation_level, session_id=session_id,
                        session_epoch=epoch, topics=[], forgotten_topics_data=[],
                        rack_id=self.rack), lambda resp, err: None)
                    break


def _set_isolation(isolation: int, req: Any, version: int) -> None:
    """A ListOffsets request's isolation level, for the version it goes out at: a broker
    without ListOffsets v2 predates transactions (Kafka 0.11), its logs hold no
    transactional data, so read_committed asks nothing more (and v0-v1 have no field)."""
    req.isolation_level = isolation if version >= 2 else IsolationLevel.READ_UNCOMMITTED
