"""Per-partition accumulation of produced messages into record batches: the one owner of
the producer's queues.

``produce()`` appends each record, encoded at once, into its partition's open
:class:`~kafka_proto.records.RecordBatchBuilder`; nothing per message is kept except the
delivery callback (and the key/value it reports back) when there is one. A batch closes
when it reaches ``batch.num.messages`` or ``batch.size``, when ``linger.ms`` has passed
since its first message, or on ``flush()``; closed batches wait in their partition's
``ready`` queue for the sender, in order.

Messages for a topic whose metadata is not known yet wait in the topic's ``pending``
list (librdkafka's unassigned queue) and are partitioned once the metadata arrives.

Backpressure (``BufferError``): ``queue.buffering.max.messages`` counts every message
until its delivery report is served; ``queue.buffering.max.kbytes`` counts the key and
value bytes of the same messages, from ``produce()`` on (open batches included: a wide
topic with a long ``linger.ms`` holds no more than the limit, as with librdkafka).

Ownership: this module and its compiled core (``_core.pyx``: the records and
``produce()``) are the only code that takes :attr:`Accumulator.lock` or changes the
queues (open batches, ``ready``, ``pending``, the linger order, the sets of partitions
and topics with work). The sender asks through the methods below which nodes have
batches to send, drains a node's batches into a request, hands back a batch to retry,
and collects what expired or was purged; it chooses and sends, nothing more.

Threads: ``produce()``/``produce_batch()`` run on application threads, everything else
on the I/O thread; both take the lock.
"""
from __future__ import annotations

import time
from collections import deque
from operator import index as _index
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

from kafka_client.errors import KafkaError, KafkaException, client_error
from kafka_client.producer._core import (
    AccumulatorCore,
    Batch,
    DeliveryRange,
    PartitionState,
    PendingMessage,
    TopicState,
    check_timestamp,
    invalid_partition,
    not_callable,
    to_columns,
    too_large,
)
from kafka_client.producer.partitioners import TopicPartitioner, callback_partitioner
from kafka_client.types import check_topic_name
from kafka_proto.compression import MAX_COMPRESSION_LEVEL
from kafka_proto.errors import ErrorCode
from kafka_proto.records import BinaryColumn, RecordBatchBuilder

__all__ = ["Accumulator", "Batch", "PartitionState", "PendingMessage", "TopicState",
           "Unplaced", "Vanished", "Removed", "Readiness", "COMPRESSION_IDS"]

COMPRESSION_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _codec_level(codec: int, level: int) -> Optional[int]:
    """``compression.level`` as the codec takes it, as librdkafka translates it: -1 is the
    codec's default (None), a level above the codec's highest is its highest (gzip 10-12
    are 9: refused by zlib, they failed every batch on the I/O thread), and a codec
    without levels (snappy, none) has none."""
    highest = MAX_COMPRESSION_LEVEL.get(codec)
    if level < 0 or highest is None:
        return None
    return min(level, highest)

#: A produce_batch() column as the codec takes it: bytes or None items.
Column = Union[List[Optional[bytes]], BinaryColumn]


def _as_list(column: Column) -> List[Optional[bytes]]:
    """A column as a list (a BinaryColumn's items copied out)."""
    return column.to_list() if isinstance(column, BinaryColumn) else column


#: Requests in flight per partition without idempotence (with it: at most 5, Kafka's
#: limit). More do not make a partition faster (each carries up to batch.size), and with a
#: broker slower than the application they multiplied small batches (1,600 requests in
#: flight per connection, the producer's memory growing).
PARTITION_IN_FLIGHT = 5

#: Bytes a record adds beyond its key and value (varints, attributes; generous).
RECORD_OVERHEAD = 24
#: Bytes of a batch header (v2).
BATCH_OVERHEAD = 61

#: Partitioners whose choice depends on the key alone: no sticky batch for keyless
#: messages (librdkafka's "consistent" family).
_KEYED_ONLY = ("consistent", "murmur2", "fnv1a")


def message_timed_out(detail: Optional[str] = None) -> KafkaError:
    """A delivery report's ``_MSG_TIMED_OUT``: librdkafka's words first ("Local: Message
    timed out", what applications match), then what it waited for."""
    text = KafkaError(KafkaError._MSG_TIMED_OUT).str()
    return KafkaError(KafkaError._MSG_TIMED_OUT,
                      f"{text} ({detail})" if detail else text)


class Unplaced(NamedTuple):
    """Messages that waited for their topic's metadata and fail with ``error`` (the topic
    does not exist, they timed out, the partition they named is not there, a purge)."""

    topic: str
    error: KafkaError
    messages: List[PendingMessage]


class Vanished(NamedTuple):
    """Queued batches of partitions that no longer exist (their topic was deleted, or
    re-created with fewer partitions), and the error they fail with."""

    error: KafkaError
    batches: List[Batch]


class Removed(NamedTuple):
    """What :meth:`Accumulator.apply_metadata`, :meth:`Accumulator.expire` or
    :meth:`Accumulator.purge` took out of the queues, for the sender to report: whole
    batches (expired or purged), messages that never had one, and batches of partitions
    that vanished."""

    batches: List[Batch]
    unplaced: List[Unplaced]
    vanished: List[Vanished]


class Readiness(NamedTuple):
    """The answer of :meth:`Accumulator.ready`: the nodes that lead a partition with a
    batch to send now, the earliest time a waiting retry becomes sendable, and the
    topics with a ready partition whose leader is not known."""

    nodes: Set[int]
    next_retry: Optional[float]
    no_leader: Set[str]


class Accumulator(AccumulatorCore):
    """Open and ready batches for every partition. ``produce()``, the hot path, is
    :meth:`AccumulatorCore.produce` (compiled, in ``_core.pyx``)."""

    def __init__(self, config: Any, wake: Callable[[float], None],
                 want_topic: Callable[[str], None],
                 known_leaders: Optional[Callable[[str], Optional[List[int]]]] = None
                 ) -> None:
        self.config = config
        self.linger = config["linger.ms"] / 1000.0
        self.batch_num = config["batch.num.messages"]
        self.batch_size = config["batch.size"]
        self.max_msgs = config["queue.buffering.max.messages"] or (1 << 62)
        self.max_bytes = config["queue.buffering.max.kbytes"] * 1024
        self.message_max = config["message.max.bytes"]
        self.timeout = config["message.timeout.ms"] / 1000.0
        self.compression = COMPRESSION_IDS[config["compression.type"]]
        self.compression_level = _codec_level(self.compression, config["compression.level"])
        self.partitioner_name = config["partitioner"]
        self.partitioner_cb = config["partitioner_cb"]
        self.sticky_ms = config["sticky.partitioning.linger.ms"]
        self.default_cb = config["on_delivery"]
        self.idempotent = bool(config["enable.idempotence"])
        #: transactional producer: batches carry the transactional flag, and a partition
        #: sends only once registered in the open transaction (AddPartitionsToTxn); the
        #: transaction manager replaces this set per transaction (None: no transactions)
        self.transactional = config["transactional.id"] is not None
        self.txn_partitions: Optional[Set[PartitionState]] = set() if self.transactional \
            else None
        #: a batch opened for a partition outside txn_partitions since unregistered()
        self.txn_new_partition = False
        #: batches of one partition in flight at once: the idempotent producer keeps at
        #: most max.in.flight (<= 5) so the broker can check sequences; otherwise at most
        #: PARTITION_IN_FLIGHT as well (and the connection's own limit): beyond, a slow
        #: broker's partition only multiplied small batches (every linger.ms one more
        #: request), each costing its own memory, where waiting ones grow (_reopen)
        self.part_max_in_flight = min(config["max.in.flight.requests.per.connection"],
                                      5 if self.idempotent else PARTITION_IN_FLIGHT)
        #: how long a topic may stay unknown before its messages fail (the broker did
        #: not create it, or it was deleted)
        self.propagation = config["topic.metadata.propagation.max.ms"] / 1000.0
        #: metadata.max.idle.ms: a topic not used for this long is forgotten (forget_idle)
        self.max_idle = config["metadata.max.idle.ms"] / 1000.0
        self.topics: Dict[str, TopicState] = {}
        #: idempotent producer: the next sequence of each partition of a forgotten topic
        #: (the broker expects it under this producer id and epoch if the topic is used
        #: again); emptied when the sequences restart (a new epoch)
        self.forgotten_sequences: Dict[Tuple[str, int], int] = {}
        #: topics whose partition leader a Produce answer moved (KIP-951) since the last
        #: metadata answer: that answer looks at them, changed or not
        self._moved: Set[str] = set()
        #: topics with partitions that the metadata now says do not exist (deleted?):
        #: their queued messages fail once that lasted topic.metadata.propagation.max.ms
        self.vanishing: Set[TopicState] = set()
        self.msg_count = 0        # messages in the producer (until their report is served)
        self.msg_bytes = 0
        self._ready_parts: Set[PartitionState] = set()
        self._open_order: Deque[Tuple[float, Batch]] = deque()  # (linger deadline, batch)
        self.pending_topics: Set[TopicState] = set()  # topics with messages in pending
        #: flush() calls under way (any thread): while there is one, every batch closes
        #: at once, linger or not
        self.flushing = 0
        self._wake = wake                # wake(deadline): tell the I/O thread
        self._want_topic = want_topic    # ask the I/O thread for a topic's metadata
        #: the partitions' leaders the metadata cache knows for a topic (None: unknown),
        #: asked from the application thread when a topic is first produced to
        self._known_leaders = known_leaders
        self.initial_capacity = max(4096, min(self.batch_size, 256 * 1024))
        #: the oldest a closed batch may be and still take more records (see _reopen):
        #: they expire with it, at most this much before their own timeout
        self._reopen_age = min(1.0, self.timeout / 10) if self.timeout > 0 else 1.0
        # A batch takes another record only while it stays within batch.size.
        self.batch_limit = self.batch_size - RECORD_OVERHEAD
        self.sticky_cache = self.sticky_ms > 0 and self.partitioner_name not in _KEYED_ONLY \
            and self.partitioner_cb is None
        self.refusal = None       # produce() may queue (see refuse_produce)

    def refuse_produce(self, why: Optional[Callable[[], KafkaError]]) -> None:
        """From now on produce() and produce_batch() raise ``KafkaException(why())``;
        ``None`` lets them queue again. The owners of the conditions call it (the
        transaction manager at each state change, the sender on a fatal error), so the
        compiled produce() tests one field per message instead of a Python wrapper asking
        them (about 90 ns a call)."""
        self.refusal = why

    def check_refusal(self) -> None:
        """Raise what produce() would raise now, if anything (for produce_batch())."""
        why = self.refusal
        if why is not None:
            raise KafkaException(why())

    # ================================================================ application thread
    def produce_batch(self, topic: str, values: Sequence[Any],
                      keys: Optional[Sequence[Any]] = None, partition: int = -1,
                      on_delivery: Optional[Callable] = None, timestamp: int = 0) -> int:
        """Queue many messages in one call, all or none (see ``Producer.produce_batch``):
        checked first (TypeError, KafkaException), then queued under one hold of the
        lock (BufferError, KafkaException before any is queued). For a topic whose
        partitions are known they are appended in bulk, a delivery callback kept once
        per bulk append (:class:`DeliveryRange`); otherwise they wait for the metadata
        as produce()'s messages do."""
        partition = _index(partition)
        if partition < -1:
            raise invalid_partition(partition)
        timestamp = check_timestamp(timestamp)
        if on_delivery is None:
            on_delivery = self.default_cb
        elif not callable(on_delivery):
            raise not_callable("on_delivery", on_delivery)
        cols = to_columns(values, keys)
        col_values, col_keys = cols.values, cols.keys
        n = len(col_values)
        if cols.biggest > self.message_max:
            raise too_large(cols.biggest, self.message_max)
        ts = timestamp or None
        avg = cols.total // n + RECORD_OVERHEAD if n else 0
        with self.lock:
            self.check_refusal()    # refused while waiting for the lock: see _enqueue
            if self.msg_count + n > self.max_msgs or \
                    self.msg_bytes + cols.total > self.max_bytes:
                raise BufferError("Local: Queue full")
            t = self.topics.get(topic)
            if t is None:
                t = self._new_topic(topic)
            if t.parts is None:     # they wait as produce()'s messages do
                self.wait_for_metadata_many(
                    t, _as_list(col_values), None if col_keys is None else _as_list(col_keys),
                    partition, on_delivery, timestamp)
                return n
            count = t.count
            if partition >= count:
                raise KafkaException(KafkaError(
                    KafkaError._UNKNOWN_PARTITION,
                    f"{topic} has no partition {partition} ({count} partitions)"))
            if partition >= 0 or col_keys is None:
                if partition < 0:
                    partition = t.choose(None, count, t.available)
                self._append_bulk(t.parts[partition], col_values, col_keys, ts, avg,
                                  on_delivery, timestamp)
            else:
                # Keys: partition each, then append each partition's share in bulk,
                # keeping the order within every partition.
                choose, avail = t.choose, t.available
                groups: Dict[int, Tuple[List[Any], List[Any]]] = {}
                for i in range(n):
                    k = col_keys[i]
                    part = choose(k, count, avail)
                    g = groups.get(part)
                    if g is None:
                        g = groups[part] = ([], [])
                    g[0].append(col_values[i])
                    g[1].append(k)
                for part, (vs, ks) in groups.items():
                    self._append_bulk(t.parts[part], vs, ks, ts, avg, on_delivery,
                                      timestamp)
            self.msg_count += n
        return n

    def reported(self, count: int, nbytes: int) -> None:
        """Delivery reports for ``count`` messages (``nbytes`` counted against
        ``queue.buffering.max.kbytes``) were served: they leave the producer."""
        with self.lock:
            self.msg_count -= count
            self.msg_bytes -= nbytes

    def queued_bytes(self) -> int:
        """Bytes of the messages still in the producer (until their reports are
        served), open batches included."""
        return self.msg_bytes

    # ======================================================================= I/O thread
    # -- metadata ----------------------------------------------------------------------
    def apply_metadata(self, topics: Mapping[str, Any], now: float,
                       changed: Optional[Set[str]] = None) -> Removed:
        """New metadata (``{name: TopicInfo}``) for the topics produced to: partitions
        and leaders are set, messages that waited for them are placed in order, and
        topics reported unknown or refused are noted. Returns the messages that cannot
        be placed (a topic the broker refuses, a partition it does not have) and the
        queued batches of partitions that are gone (a topic re-created with fewer).

        ``changed``: the topics whose entries changed (the metadata listeners' set);
        then only those are looked at, with the topics waiting for metadata, vanishing,
        or whose leader a Produce answer moved. Going through every topic on every
        answer, the I/O thread's time grew with the topics produced to (3.4 ms per answer
        at 3,000)."""
        failed: List[Unplaced] = []
        vanished: List[Vanished] = []
        if changed is None:
            selected = list(self.topics.items())
        else:
            with self.lock:   # produce() adds to pending_topics meanwhile
                names = set(changed)
                names.update(t.name for t in self.pending_topics)
            names.update(t.name for t in self.vanishing)
            names.update(self._moved)
            self._moved.clear()
            selected = [(n, self.topics[n]) for n in names if n in self.topics]
        for name, t in selected:
            info = topics.get(name)
            if info is None:
                continue
            if t.applied is info and t.applied_leaders is info.leaders and not t.pending:
                # Applied already, and nothing moved since (a leader taken from a Produce
                # answer clears it, see move_leader): every answer went through every
                # topic, the I/O thread's time growing with the topics produced to.
                continue
            t.applied, t.applied_leaders = info, info.leaders
            code = info.error
            if info.leaders and code in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE):
                if t.parts is None or t.pending:
                    failed.extend(self._assign_pending(t, info.leaders, vanished))
                elif len(t.parts) != len(info.leaders) or any(
                        p.leader != info.leaders[i] for i, p in enumerate(t.parts)):
                    with self.lock:
                        self._set_partitions(t, info.leaders, vanished)
                else:
                    t.unknown_since = None       # back as it was
                    self.vanishing.discard(t)
            elif code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or (code == ErrorCode.NONE
                                                                  and not info.leaders):
                if t.unknown_since is None:
                    t.unknown_since = now
                if t.parts is not None:
                    self.vanishing.add(t)
            elif client_error(code).retriable():
                # LEADER_NOT_AVAILABLE without partitions (Kafka's answer for a topic it
                # is creating), ...: the metadata is asked again; the messages wait, up
                # to message.timeout.ms, as librdkafka's do.
                continue
            elif code:
                # Authorization failure, invalid topic name, ...: not going to change.
                err = client_error(code, f"topic {name}: {KafkaError(code).name()}")
                if t.parts is None:
                    t.error = err
                    with self.lock:
                        gone = self._take_pending(t)
                    if gone:
                        failed.append(Unplaced(name, err, gone))
        return Removed([], failed, vanished)

    def topics_led_by(self, node: int) -> List[str]:
        """Names of the topics with a partition led by ``node``."""
        return [t.name for t in list(self.topics.values())
                if t.parts and any(p.leader == node for p in t.parts)]

    def move_leader(self, p: PartitionState, leader: int) -> None:
        """A Produce answer named the partition's new leader (KIP-951): send there
        without waiting for the metadata."""
        p.leader = leader
        p.topic.applied = None    # the next metadata answer sets it again
        self._moved.add(p.topic.name)

    def _set_partitions(self, t: TopicState, leaders: List[int],
                        vanished: List[Vanished]) -> None:
        """Under the lock: the topic's partition count and leaders. Partitions beyond a
        smaller count (the topic was re-created with fewer) are dropped, their queued
        batches added to ``vanished``; their batches in flight fail when answered."""
        n = len(leaders)
        parts = t.parts or []
        if len(parts) > n:
            batches = self._take_batches(parts[n:])
            if batches:
                vanished.append(Vanished(KafkaError(
                    KafkaError._UNKNOWN_PARTITION, f"topic {t.name} partition count "
                    f"changed from {len(parts)} to {n}"), batches))
            parts = parts[:n]
        elif len(parts) < n:
            parts = parts + [self._new_partition(t, i) for i in range(len(parts), n)]
        for i in range(n):
            parts[i].leader = leaders[i]
        t.parts = parts
        t.count = n
        self.vanishing.discard(t)
        avail = [i for i, leader in enumerate(leaders) if leader >= 0]
        t.available = avail if len(avail) < n else None
        t.error = None
        t.unknown_since = None
        t.sticky = None

    def _new_partition(self, t: TopicState, index: int) -> PartitionState:
        p = PartitionState(t, index)
        if self.forgotten_sequences:
            p.next_seq = self.forgotten_sequences.pop((t.name, index), 0)
        return p

    def forget_idle(self, now: float) -> List[str]:
        """Forget the topics not used for ``metadata.max.idle.ms`` (no batch opened or
        closed, no message waiting for metadata since) that hold nothing: no message
        waiting, no batch open, queued or in flight, no partition in the open
        transaction. Returns their names (the caller forgets their metadata); a later
        ``produce()`` to one starts it afresh and asks for its metadata, as the Java
        producer does. An idempotent producer keeps their partitions' next sequence
        numbers (:attr:`forgotten_sequences`)."""
        limit = now - self.max_idle
        # Looked at without the lock first (most topics are in use or recent).
        candidates = [t for t in list(self.topics.values()) if t.last_used <= limit]
        if not candidates:
            return []
        forgotten: List[str] = []
        txn = self.txn_partitions
        with self.lock:   # produce() may be using one of them right now
            for t in candidates:
                if t.last_used > limit or t.pending or self.topics.get(t.name) is not t:
                    continue
                parts = t.parts or ()
                if any(p.open is not None or p.ready or p.in_flight
                       or (txn is not None and p in txn) for p in parts):
                    continue
                del self.topics[t.name]
                self.vanishing.discard(t)
                self.pending_topics.discard(t)
                if self.idempotent:
                    for p in parts:
                        if p.next_seq:
                            self.forgotten_sequences[(t.name, p.index)] = p.next_seq
                forgotten.append(t.name)
        return forgotten

    def _assign_pending(self, t: TopicState, leaders: List[int],
                        vanished: List[Vanished]) -> List[Unplaced]:
        """The topic's partitions are known: set them and place the messages that
        waited, in one hold of the lock, so no newer message overtakes them."""
        failed = []
        with self.lock:
            self._set_partitions(t, leaders, vanished)
            for m in self._take_pending(t):
                try:
                    self.place_waiting(t, m)
                except KafkaException as exc:
                    failed.append(Unplaced(t.name, exc.args[0], [m]))
                except Exception as exc:  # partitioner_cb raised: that message fails
                    failed.append(Unplaced(t.name, KafkaError(
                        KafkaError._APPLICATION, f"partitioner_cb raised {exc!r}"), [m]))
        return failed

    def _take_pending(self, t: TopicState, before: Optional[float] = None
                      ) -> List[PendingMessage]:
        """Under the lock: the topic's waiting messages (those queued at or before
        ``before``, when given), out of the queue."""
        pending = t.pending
        if before is None:
            taken, t.pending = pending, []
        else:
            taken = [m for m in pending if m.queued_at <= before]
            t.pending = [m for m in pending if m.queued_at > before]
        if not t.pending:
            self.pending_topics.discard(t)
        return taken

    def _take_batches(self, parts: List[PartitionState]) -> List[Batch]:
        """Under the lock: the queued and open batches of ``parts`` (not those in
        flight), out of the queues, in order."""
        batches: List[Batch] = []
        for p in parts:
            batches.extend(p.ready)
            p.ready.clear()
            self._ready_parts.discard(p)
            if p.open is not None:
                batches.append(p.open)
                p.open = None
            p.retrying = False
        return batches

    # -- batches (under the lock) -----------------------------------------------------
    def _append_bulk(self, p: PartitionState, values: Column, keys: Optional[Column],
                     ts: Optional[int], avg: int, on_delivery: Optional[Callable],
                     timestamp: int) -> None:
        """Under the lock: append records (bytes or None, checked) to one partition, batch
        by batch; with ``on_delivery``, one :class:`DeliveryRange` per batch for the
        records appended to it."""
        n = len(values)
        pos = 0
        while pos < n:
            b = p.open
            if b is None:
                b = self._open(p, avg)
            builder = b.builder
            assert builder is not None    # an open batch: not built yet
            room_n = self.batch_num - b.count
            room_b = (self.batch_size - builder.size_in_bytes) // max(avg, 1)
            take = min(n - pos, room_n, max(room_b, 1 if b.count == 0 else 0))
            if take <= 0:
                self._close(p, b)
                continue
            if on_delivery is not None:
                # Copies: the caller may reuse its lists; the reports need what was sent.
                chunk = values[pos:pos + take]
                kchunk = None if keys is None else keys[pos:pos + take]
                if b.cbs is None:
                    b.cbs = []
                b.cbs.append(DeliveryRange(b.count, on_delivery, chunk, kchunk, timestamp))
            elif pos == 0 and take == n:
                chunk, kchunk = values, keys
            else:
                chunk = values[pos:pos + take]
                kchunk = None if keys is None else keys[pos:pos + take]
            before = builder.size_in_bytes
            builder.append_many(chunk, kchunk, ts)
            added = builder.size_in_bytes - before
            b.counted += added
            self.msg_bytes += added
            b.count += take
            pos += take
            if b.count >= self.batch_num or builder.size_in_bytes >= self.batch_size:
                self._close(p, b)

    def _partitioner(self) -> Callable[..., int]:
        if self.partitioner_cb is not None:
            return callback_partitioner(self.partitioner_cb)
        return TopicPartitioner(self.partitioner_name, self.sticky_ms).choose

    def _new_topic(self, name: str) -> TopicState:
        if not isinstance(name, str):
            raise TypeError(f"topic must be a str, not {type(name).__name__}")
        if not name:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG,
                                            "topic must be a non-empty str"))
        check_topic_name(name)
        t = TopicState(name, self._partitioner())
        self.topics[name] = t
        leaders = None if self._known_leaders is None else self._known_leaders(name)
        if leaders:
            # Partitions the cache has from a list_topics() answer: a partition the topic
            # does not have is refused by this produce(), as librdkafka's topic made from
            # its cache refuses it, instead of failing in a delivery report.
            self._set_partitions(t, leaders, [])
        self._want_topic(name)
        return t

    def _open(self, p: PartitionState, size: int = 0) -> Batch:
        """Under the lock: the batch the next record (``size`` bytes of key and value)
        of ``p`` goes into, which becomes the partition's open batch: the last closed
        batch again while it waits for room to be sent (see _reopen), else a new one."""
        now = time.monotonic()
        p.topic.last_used = now
        tail = self._reopen(p, size, now)
        if tail is not None:
            return tail
        builder = RecordBatchBuilder(self.compression, self.compression_level,
                                     transactional=self.transactional,
                                     initial_capacity=self.initial_capacity)
        b = Batch(p, builder, now, self.timeout, p.batch_seq)
        p.batch_seq += 1
        p.open = b
        deadline = now + self.linger
        self._open_order.append((deadline, b))
        txn = self.txn_partitions
        if txn is not None and p not in txn:
            # A partition new to the transaction: registering it starts now, while the
            # batch fills, not when its linger ends.
            self.txn_new_partition = True
            self._wake(0.0)
        elif self.flushing:
            self._wake(0.0)
        else:
            self._wake(deadline)
        return b

    def _reopen(self, p: PartitionState, size: int, now: float) -> Optional[Batch]:
        """Under the lock: the partition's last closed batch, made its open batch again,
        when it waits to be sent (behind other batches, or the partition is at its limit
        of requests in flight) and takes the record: with a broker slower than the
        application, batches grow while they wait, as librdkafka builds its batches when
        a request can go (closed at linger.ms, each would stay small, and as few of them
        go per round trip, the queue grew until messages timed out). It closes again at
        its old linger deadline, at the latest when the other open batches' do. A batch
        older than ``_reopen_age`` takes nothing more: its messages share its delivery
        timeout."""
        ready = p.ready
        if not ready:
            return None
        tail = ready[-1]
        # Never one that went out, or was built or numbered for it (a batch the broker
        # refused is resent as it was built).
        if tail.sent or tail.attempts or tail.builder is None or tail.base_sequence >= 0 \
                or tail.count >= self.batch_num or \
                tail.builder.size_in_bytes + size > self.batch_limit or \
                now - tail.created > self._reopen_age or \
                (len(ready) == 1 and self._sendable(p, now)):
            return None
        ready.pop()
        if not ready:
            self._ready_parts.discard(p)
        p.open = tail
        self._open_order.append((tail.created + self.linger, tail))
        return tail

    def _close(self, p: PartitionState, b: Batch) -> None:
        if p.open is b:
            p.open = None
        if not b.count:
            return  # its only append failed: nothing to send
        # after the batch's last record: metadata.max.idle.ms counts from the last use
        p.topic.last_used = time.monotonic()
        builder = b.builder
        assert builder is not None    # closed while open: not built yet
        b.nbytes = builder.size_in_bytes   # its messages' bytes were counted as added
        p.ready.append(b)
        self._ready_parts.add(p)
        self._wake(0.0)

    def close_lingered(self, now: float, everything: bool = False) -> Optional[float]:
        """Close the batches whose linger is over (all with ``everything`` or while
        flushing). Returns the next linger deadline."""
        q = self._open_order
        if not q:
            return None
        with self.lock:
            while q:
                deadline, b = q[0]
                p = b.part
                if p.open is not b:
                    q.popleft()
                    continue
                if deadline > now and not everything and not self.flushing:
                    return deadline
                q.popleft()
                self._close(p, b)
        return None

    # -- sending -----------------------------------------------------------------------
    def _sendable(self, p: PartitionState, now: float) -> bool:
        """Under the lock: the partition's head batch may go out now (past its retry
        backoff; a retry goes only once nothing of the partition is in flight, so the
        order holds; within the partition's in-flight limit; registered in the open
        transaction, for a transactional producer)."""
        return (p.ready[0].retry_at <= now and not (p.retrying and p.in_flight)
                and p.in_flight < self.part_max_in_flight
                and (self.txn_partitions is None or p in self.txn_partitions))

    def unregistered(self) -> List[PartitionState]:
        """Transactional producer: the partitions with a batch (open or closed) that are
        not registered in the open transaction yet. Looks only when a batch was opened
        for such a partition since the last call (the caller keeps those it could not
        register)."""
        txn = self.txn_partitions
        if txn is None or not self.txn_new_partition:
            return []
        with self.lock:
            self.txn_new_partition = False
            parts = {p for p in self._ready_parts if p.ready and p not in txn}
            parts.update(b.part for _deadline, b in self._open_order
                         if b.part.open is b and b.part not in txn)
        return list(parts)

    def ready(self, now: float) -> Readiness:
        """Which nodes lead a partition whose head batch may be sent now."""
        nodes: Set[int] = set()
        no_leader: Set[str] = set()
        next_retry: Optional[float] = None
        if not self._ready_parts:
            return Readiness(nodes, next_retry, no_leader)
        with self.lock:
            for p in list(self._ready_parts):
                ready = p.ready
                if not ready:
                    self._ready_parts.discard(p)
                    continue
                retry_at = ready[0].retry_at
                if retry_at > now:
                    if next_retry is None or retry_at < next_retry:
                        next_retry = retry_at
                    continue
                if not self._sendable(p, now):
                    continue
                if p.leader < 0:
                    no_leader.add(p.topic.name)
                else:
                    nodes.add(p.leader)
        return Readiness(nodes, next_retry, no_leader)

    def drain(self, node: int, now: float, max_bytes: int) -> List[Batch]:
        """Take the head batch of every sendable partition ``node`` leads, for one
        ProduceRequest (brokers take one batch per partition per request), while their
        sizes add up to at most ``max_bytes`` (the first always goes). Each batch taken
        counts as in flight until :meth:`completed`; an idempotent producer's batch gets
        its partition's next sequence number the first time it leaves."""
        batches: List[Batch] = []
        total = 0
        with self.lock:
            for p in list(self._ready_parts):
                if p.leader != node:
                    continue
                ready = p.ready
                if not ready:
                    self._ready_parts.discard(p)
                    continue
                if not self._sendable(p, now):
                    continue
                head = ready[0]
                if batches and total + head.nbytes > max_bytes:
                    continue  # the next request takes it
                ready.popleft()
                if not ready:
                    self._ready_parts.discard(p)
                if self.idempotent and head.base_sequence < 0:
                    head.base_sequence = p.next_seq
                    p.next_seq = (p.next_seq + head.count) & 0x7FFFFFFF
                p.retrying = False
                p.in_flight += 1
                total += head.nbytes
                batches.append(head)
        return batches

    def take_ready(self, node: int) -> List[Batch]:
        """Every queued batch of the partitions ``node`` leads, out of the queues (the
        broker cannot take them)."""
        batches: List[Batch] = []
        with self.lock:
            for p in list(self._ready_parts):
                if p.leader == node:
                    batches.extend(p.ready)
                    p.ready.clear()
                    self._ready_parts.discard(p)
        return batches

    def completed(self, b: Batch) -> None:
        """A batch :meth:`drain` gave out was answered, or its request failed."""
        b.part.in_flight -= 1

    def requeue(self, b: Batch, retry_at: float) -> Optional[KafkaError]:
        """Put a batch back in its place (by batch order) at the head of its partition's
        queue, to be resent at ``retry_at``; the partition sends nothing newer until
        what it has in flight drained. Returns the error the batch fails with instead
        when its partition no longer exists."""
        b.retry_at = retry_at
        p = b.part
        with self.lock:
            gone = self.gone(p)
            if gone is not None:
                return gone
            ready = p.ready
            i = 0
            for other in ready:
                if other.seq > b.seq:
                    break
                i += 1
            ready.insert(i, b)
            p.retrying = True
            self._ready_parts.add(p)
        return None

    def gone(self, p: PartitionState) -> Optional[KafkaError]:
        """The error for a partition that no longer exists (its topic was deleted, or
        re-created with fewer partitions or as new partitions), else None."""
        parts = p.topic.parts
        if parts is not None and p.index < len(parts) and parts[p.index] is p:
            return None
        return KafkaError(KafkaError._UNKNOWN_PARTITION if parts else
                          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                          f"topic {p.topic.name} partition {p.index} no longer exists")

    def earlier_retry(self, b: Batch) -> bool:
        """True if an older batch of the same partition waits to be resent."""
        with self.lock:
            for other in b.part.ready:
                if other.sent and other.seq < b.seq:
                    return True
                if other.seq > b.seq:
                    break
        return False

    def rewind_sequence(self, p: PartitionState, start: int, end: int) -> bool:
        """The batches of ``p`` numbered ``start`` to ``end`` (excluded) failed and the
        broker never appended them: if no later batch has a sequence number yet, ``p``'s
        next batch takes ``start``, leaving no gap in the broker's sequence (True); else
        False."""
        with self.lock:   # drain() numbers batches under it
            if p.next_seq != end:
                return False
            p.next_seq = start
            return True

    def restart_sequences(self) -> List[Batch]:
        """New producer epoch: every partition's sequence restarts at 0; batches never
        sent get their numbers when they first go out. Batches sent under the old epoch
        that wait to be resent leave the queues and are returned (they may be in the log
        already: resent under the new epoch they would be appended again)."""
        gone: List[Batch] = []
        with self.lock:
            self.forgotten_sequences.clear()
            for t in self.topics.values():
                for p in t.parts or ():
                    if any(b.sent for b in p.ready):
                        keep = [b for b in p.ready if not b.sent]
                        gone.extend(b for b in p.ready if b.sent)
                        p.ready.clear()
                        p.ready.extend(keep)
                        if not keep:
                            self._ready_parts.discard(p)
                    p.retrying = False
                    p.next_seq = 0
        return gone

    # -- time and purge ----------------------------------------------------------------
    def expire(self, now: float) -> Removed:
        """Take out what waited longer than ``message.timeout.ms`` without being in
        flight (queued and open batches, messages waiting for metadata) and the messages
        of topics that stayed unknown past ``topic.metadata.propagation.max.ms`` (never
        created, or deleted), as librdkafka does: those fail with the broker's
        UNKNOWN_TOPIC_OR_PART, and later ``produce()`` calls raise ``_UNKNOWN_TOPIC``."""
        timeout = self.timeout
        unplaced: List[Unplaced] = []
        vanished: List[Vanished] = []
        # Not shortened by message.timeout.ms: messages that time out first fail with
        # _MSG_TIMED_OUT and the topic stays produce-able, as in librdkafka
        wait = self.propagation
        for t in list(self.vanishing):
            assert t.unknown_since is not None    # set before it joins vanishing
            if now - t.unknown_since < wait:
                continue
            self.vanishing.discard(t)
            with self.lock:
                count = t.count
                batches = self._take_batches(t.parts or [])
                t.parts = None
                t.count = 0
                t.sticky = None
                t.available = None
                t.error = KafkaError(KafkaError._UNKNOWN_TOPIC,
                                     f"topic {t.name} does not exist")
            if batches:
                vanished.append(Vanished(KafkaError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"topic {t.name} no longer exists (partition count changed from "
                    f"{count} to 0)"), batches))
        with self.lock:  # produce() adds to the set meanwhile
            waiting = list(self.pending_topics)
        for t in waiting:
            if t.unknown_since is not None and t.pending and now - t.unknown_since >= wait:
                t.error = KafkaError(KafkaError._UNKNOWN_TOPIC,
                                     f"topic {t.name} does not exist")
                with self.lock:
                    gone = self._take_pending(t)
                if gone:
                    unplaced.append(Unplaced(t.name, KafkaError(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"topic {t.name} does not exist"), gone))
                continue
            if timeout > 0 and t.pending and t.pending[0].queued_at + timeout <= now:
                with self.lock:
                    gone = self._take_pending(t, before=now - timeout)
                if gone:
                    unplaced.append(Unplaced(t.name, message_timed_out(
                        f"waiting for metadata of topic {t.name}"), gone))
        batches = []
        if timeout > 0:
            with self.lock:
                for p in list(self._ready_parts):
                    while p.ready and p.ready[0].deadline <= now:
                        batches.append(p.ready.popleft())
                    if not p.ready:
                        self._ready_parts.discard(p)
                for _deadline, b in self._open_order:
                    if b.deadline <= now and b.part.open is b:
                        b.part.open = None
                        batches.append(b)
        return Removed(batches, unplaced, vanished)

    def purge(self, error: KafkaError) -> Removed:
        """Take every queued message out (open and ready batches, messages waiting for
        metadata); those waiting for metadata fail with ``error``."""
        batches: List[Batch] = []
        unplaced: List[Unplaced] = []
        with self.lock:
            for t in self.topics.values():
                if t.pending:
                    unplaced.append(Unplaced(t.name, error, t.pending))
                    t.pending = []
                for p in t.parts or ():
                    batches.extend(p.ready)
                    p.ready.clear()
                    if p.open is not None:
                        batches.append(p.open)
                        p.open = None
            self._ready_parts.clear()
            self.pending_topics.clear()
            self._open_order.clear()
        return Removed(batches, unplaced, [])

