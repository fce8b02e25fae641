"""Per-partition accumulation of produced messages into record batches.

``produce()`` appends each record, encoded at once, into its partition's open
:class:`~kafka_proto.records.RecordBatchBuilder`; nothing per message is kept except the
delivery callback (and the key/value it reports back) when there is one. A batch closes
when it reaches ``batch.num.messages`` or ``batch.size``, when ``linger.ms`` has passed
since its first message, or on ``flush()``; closed batches wait in their partition's
``ready`` queue for the sender, in order.

Messages for a topic whose metadata is not known yet wait in the topic's ``pending``
list (librdkafka's unassigned queue) and are partitioned once the metadata arrives.

Backpressure (``BufferError``): ``queue.buffering.max.messages`` counts every message
until its delivery report is served; ``queue.buffering.max.kbytes`` counts the encoded
size of closed batches not yet reported plus messages waiting for metadata (the open
batches, at most ``batch.size`` each, come on top: counting bytes per batch instead of
per message keeps ``produce()`` short).

Threads: ``produce()`` runs on application threads, the linger check and the sender on
the I/O thread; both take :attr:`Accumulator.lock`.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from kafka_client.errors import KafkaError, KafkaException
from kafka_proto.records import RecordBatchBuilder

try:
    from kafka_client.producer.partitioners import TopicPartitioner
except ImportError:  # pragma: no cover - placeholder until the partitioners land
    TopicPartitioner = None  # type: ignore[assignment,misc]

__all__ = ["Accumulator", "Batch", "PartitionState", "TopicState", "COMPRESSION_IDS"]

COMPRESSION_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

#: Bytes a record adds beyond its key and value (varints, attributes; generous).
RECORD_OVERHEAD = 24
#: Bytes of a batch header (v2).
BATCH_OVERHEAD = 61


class Batch:
    """One record batch of one partition, from its first message to its delivery report.

    ``cbs`` holds ``(index, callback, key, value, headers, timestamp)`` for the messages
    that have a delivery callback (None when none has).
    """

    __slots__ = ("part", "builder", "append", "created", "deadline", "cbs", "count", "nbytes",
                 "data", "base_sequence", "attempts", "retry_at", "seq", "sent", "done",
                 "pid", "epoch", "wall_ms", "last_error")

    def __init__(self, part: "PartitionState", builder: RecordBatchBuilder, now: float,
                 timeout: float, seq: int) -> None:
        self.part = part
        self.builder = builder
        self.created = now
        self.deadline = now + timeout if timeout > 0 else float("inf")
        self.cbs: Optional[List[tuple]] = None
        self.count = 0
        self.nbytes = 0           # encoded size, counted in msg_bytes once closed
        self.append = builder.append
        self.data: Optional[bytes] = None  # the built batch, once sent
        self.base_sequence = -1
        self.attempts = 0
        self.retry_at = 0.0
        self.seq = seq            # order of the batch within its partition
        self.sent = False         # went out at least once (POSSIBLY_PERSISTED if lost)
        self.done = False         # delivery report queued (late answers are ignored)
        self.pid = -1
        self.epoch = -1
        self.wall_ms = int(time.time() * 1000)  # for reports of messages stamped "now"
        self.last_error: Optional[KafkaError] = None  # why it waits to be resent

    def __repr__(self) -> str:
        p = self.part
        return f"<Batch {p.topic.name}[{p.index}] #{self.seq} {self.count} msgs>"


class PartitionState:
    """One partition's open batch, closed batches waiting to be sent, and the counters
    the sender keeps (in flight, idempotence sequence)."""

    __slots__ = ("topic", "index", "open", "ready", "in_flight", "next_seq", "batch_seq",
                 "leader", "retrying")

    def __init__(self, topic: "TopicState", index: int) -> None:
        self.topic = topic
        self.index = index
        self.open: Optional[Batch] = None
        self.ready: Deque[Batch] = deque()
        self.in_flight = 0        # batches sent and not answered
        self.next_seq = 0         # idempotence: sequence of the next new batch
        self.batch_seq = 0        # counts batches, to keep retries in their place
        self.leader = -1
        self.retrying = False     # a batch waits to be resent: send nothing newer

    def __repr__(self) -> str:
        return f"<PartitionState {self.topic.name}[{self.index}]>"


class TopicState:
    """One topic: its partitions (None until metadata is known), the partitioner, and
    messages waiting for the first metadata."""

    __slots__ = ("name", "parts", "count", "choose", "pending", "unknown_since", "error",
                 "available", "sticky")

    def __init__(self, name: str, choose: Callable[..., int]) -> None:
        self.name = name
        self.parts: Optional[List[PartitionState]] = None
        self.count = 0
        self.choose = choose
        self.pending: List[tuple] = []
        self.unknown_since: Optional[float] = None
        self.error: Optional[KafkaError] = None   # set when the topic is known not to exist
        self.available: Optional[List[int]] = None
        self.sticky: Optional[PartitionState] = None  # keyless messages' partition


class Accumulator:
    """Open and ready batches for every partition; the producer's hot path."""

    def __init__(self, config: Any, wake: Callable[[float], None],
                 want_topic: Callable[[str], None]) -> None:
        self.lock = threading.Lock()
        self.config = config
        self.linger = config["linger.ms"] / 1000.0
        self.batch_num = config["batch.num.messages"]
        self.batch_size = config["batch.size"]
        self.max_msgs = config["queue.buffering.max.messages"] or (1 << 62)
        self.max_bytes = config["queue.buffering.max.kbytes"] * 1024
        self.message_max = config["message.max.bytes"]
        self.timeout = config["message.timeout.ms"] / 1000.0
        self.compression = COMPRESSION_IDS[config["compression.type"]]
        level = config["compression.level"]
        self.compression_level = None if level < 0 else level
        self.partitioner_name = config["partitioner"]
        self.sticky_ms = config["sticky.partitioning.linger.ms"]
        self.default_cb = config["on_delivery"]
        self.report_only_error = config["delivery.report.only.error"]
        self.topics: Dict[str, TopicState] = {}
        self.msg_count = 0        # messages in the producer (until their report is served)
        self.msg_bytes = 0
        self.ready_parts: Set[PartitionState] = set()
        self.open_order: Deque[Tuple[float, Batch]] = deque()  # (linger deadline, batch)
        self.pending_topics: Set[TopicState] = set()
        self.flushing = False
        self._wake = wake                # wake(deadline): tell the I/O thread
        self._want_topic = want_topic    # ask the I/O thread for a topic's metadata
        self.initial_capacity = max(4096, min(self.batch_size, 256 * 1024))
        # A batch takes another record only while it stays within batch.size.
        self.batch_limit = self.batch_size - RECORD_OVERHEAD
        self.sticky_cache = (TopicPartitioner is not None and self.sticky_ms > 0
                             and self.partitioner_name not in ("consistent", "murmur2",
                                                               "fnv1a"))
        self._produce = self.produce = self._make_produce()  # type: ignore[method-assign]

    # -- topics ------------------------------------------------------------------------
    def _partitioner(self) -> Callable[..., int]:
        if TopicPartitioner is not None:
            return TopicPartitioner(self.partitioner_name, self.sticky_ms).choose
        import random  # placeholder: spread everything at random

        return lambda key, n, available=None: random.randrange(n)

    def _new_topic(self, name: str) -> TopicState:
        if not isinstance(name, str) or not name:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG,
                                            f"topic must be a non-empty str, not {name!r}"))
        t = TopicState(name, self._partitioner())
        self.topics[name] = t
        self._want_topic(name)
        return t

    def set_partitions(self, t: TopicState, leaders: List[int]) -> None:
        """I/O thread, under the lock: the topic's partition count and leaders."""
        n = len(leaders)
        parts = t.parts or []
        if len(parts) < n:
            parts = parts + [PartitionState(t, i) for i in range(len(parts), n)]
        for i in range(n):
            parts[i].leader = leaders[i]
        t.parts = parts
        t.count = n  # a shrunk partition count is ignored for queued batches (rare)
        avail = [i for i, leader in enumerate(leaders) if leader >= 0]
        t.available = avail if len(avail) < n else None
        t.error = None
        t.unknown_since = None
        t.sticky = None

    # -- the hot path ----------------------------------------------------------------
    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: Optional[Callable] = None, timestamp: int = 0,
                headers: Any = None, *, callback: Optional[Callable] = None) -> None:
        """Encode one message into its partition's batch (see ``Producer.produce``).

        Replaced in ``__init__`` by the closure from :meth:`_make_produce` (same
        signature, same behaviour): this body is the readable reference.
        """
        self._produce(topic, value, key, partition, on_delivery, timestamp, headers,
                      callback=callback)

    def _make_produce(self) -> Callable[..., None]:
        """The hot path as a closure: settings are cell variables rather than attribute
        lookups, and nothing is counted per message that can be counted per batch
        (bytes are added when a batch closes). Every Python-level operation here costs
        about as much as encoding the record, so the function is written out flat."""
        acc = self
        lock = self.lock
        topics = self.topics
        message_max = self.message_max
        default_cb = self.default_cb
        max_msgs = self.max_msgs
        max_bytes = self.max_bytes
        batch_limit = self.batch_limit
        batch_num = self.batch_num
        sticky_cache = self.sticky_cache
        open_batch = self._open
        close_batch = self._close

        def produce(topic: str, value: Any = None, key: Any = None, partition: int = -1,
                    on_delivery: Optional[Callable] = None, timestamp: int = 0,
                    headers: Any = None, *, callback: Optional[Callable] = None) -> None:
            if value.__class__ is bytes:
                size = len(value)
            elif value is None:
                size = 0
            else:
                value = _as_bytes(value, "value")
                size = len(value)
            if key is not None:
                if key.__class__ is not bytes:
                    key = _as_bytes(key, "key")
                size += len(key)
            if size > message_max:
                raise KafkaException(KafkaError(
                    KafkaError.MSG_SIZE_TOO_LARGE,
                    f"Message of {size} bytes is larger than message.max.bytes "
                    f"({message_max})"))
            if callback is not None:
                on_delivery = callback
            elif on_delivery is None:
                on_delivery = default_cb
            if headers is not None:
                headers = _headers(headers)
            with lock:
                if acc.msg_count >= max_msgs or acc.msg_bytes + size > max_bytes:
                    raise BufferError("Local: Queue full")
                t = topics.get(topic)
                if t is None or t.parts is None:
                    acc._unassigned(t, topic, value, key, partition, on_delivery, timestamp,
                                    headers, size)
                    return
                if partition < 0:
                    if key is None and sticky_cache:
                        # Keyless: the sticky partition while its batch is open; the
                        # partitioner (time-based stickiness) is asked when it closed.
                        p = t.sticky
                        if p is None or p.open is None:
                            p = t.sticky = t.parts[t.choose(None, t.count, t.available)]
                    else:
                        p = t.parts[t.choose(key, t.count, t.available)]
                elif partition < t.count:
                    p = t.parts[partition]
                else:
                    raise KafkaException(KafkaError(
                        KafkaError._UNKNOWN_PARTITION,
                        f"{topic} has no partition {partition} ({t.count} partitions)"))
                b = p.open
                if b is None:
                    b = open_batch(p)
                elif b.builder.size_in_bytes + size > batch_limit:
                    close_batch(p, b)
                    b = open_batch(p)
                b.append(value, key, timestamp or None, headers)
                if on_delivery is not None:
                    cbs = b.cbs
                    if cbs is None:
                        cbs = b.cbs = []
                    cbs.append((b.count, on_delivery, key, value, headers, timestamp))
                b.count += 1
                if b.count >= batch_num:
                    close_batch(p, b)
                acc.msg_count += 1

        return produce

    def _unassigned(self, t: Optional[TopicState], topic: str, value: Any, key: Any,
                    partition: int, on_delivery: Optional[Callable], timestamp: int,
                    headers: Any, size: int) -> None:
        """Under the lock: a message for a topic whose partitions are not known yet."""
        if t is None:
            t = self._new_topic(topic)
        if t.error is not None:
            raise KafkaException(t.error)
        if not isinstance(partition, int) or partition < -1:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG,
                                            f"invalid partition {partition!r}"))
        t.pending.append((value, key, partition, on_delivery, timestamp, headers,
                          time.monotonic()))
        self.pending_topics.add(t)
        self.msg_count += 1
        self.msg_bytes += size

    def _place(self, t: TopicState, parts: List[PartitionState], value: Any, key: Any,
               partition: int, on_delivery: Optional[Callable], timestamp: int, headers: Any,
               size: int) -> None:
        """Under the lock: append one message to its partition's open batch."""
        if partition < 0:
            partition = t.choose(key, t.count, t.available)
        elif partition >= t.count:
            raise KafkaException(KafkaError(
                KafkaError._UNKNOWN_PARTITION,
                f"{t.name} has no partition {partition} ({t.count} partitions)"))
        p = parts[partition]
        b = p.open
        if b is None or (b.count and b.builder.size_in_bytes + size > self.batch_limit):
            if b is not None:
                self._close(p, b)
            b = self._open(p)
        b.append(value, key, timestamp or None, headers)
        if on_delivery is not None:
            cbs = b.cbs
            if cbs is None:
                cbs = b.cbs = []
            cbs.append((b.count, on_delivery, key, value, headers, timestamp))
        b.count += 1
        if b.count >= self.batch_num:
            self._close(p, b)

    def assign_pending(self, t: TopicState, leaders: List[int]) -> List[tuple]:
        """I/O thread: the topic's partitions are known. Set them and place the messages
        that waited, in one hold of the lock, so no newer message overtakes them.
        Returns the ``(message, error)`` pairs that could not be placed."""
        failed = []
        with self.lock:
            self.set_partitions(t, leaders)
            pending, t.pending = t.pending, []
            self.pending_topics.discard(t)
            for m in pending:
                value, key, partition, cb, ts, headers, _at = m
                size = ((len(value) if value is not None else 0)
                        + (len(key) if key is not None else 0))
                try:
                    self._place(t, t.parts, value, key, partition, cb, ts, headers, size)
                except KafkaException as exc:
                    failed.append((m, exc.args[0]))
                else:
                    self.msg_bytes -= size  # counted again with its batch, when it closes
        return failed

    def produce_batch(self, topic: str, values: List[Any], keys: Optional[List[Any]] = None,
                      partition: int = -1, on_delivery: Optional[Callable] = None,
                      timestamp: int = 0) -> int:
        """Append many messages in one call (see ``Producer.produce_batch``)."""
        if not isinstance(values, (list, tuple)):
            values = list(values)
        n = len(values)
        if keys is not None:
            if not isinstance(keys, (list, tuple)):
                keys = list(keys)
            if len(keys) != n:
                raise ValueError("keys and values differ in length")
        if on_delivery is None:
            on_delivery = self.default_cb
        t = self.topics.get(topic)
        known = t is not None and t.parts is not None
        if not known or on_delivery is not None:
            # General path: one produce() per message (metadata wait, callbacks).
            done = 0
            for i in range(n):
                self.produce(topic, values[i], None if keys is None else keys[i], partition,
                             on_delivery, timestamp)
                done += 1
            return done
        msg_max = self.message_max
        sizes = _total_len(values)
        biggest = _max_len(values)
        if keys is not None:
            sizes += _total_len(keys)
            biggest += _max_len(keys)
        if biggest > msg_max:
            raise KafkaException(KafkaError(
                KafkaError.MSG_SIZE_TOO_LARGE,
                f"A message of up to {biggest} bytes is larger than message.max.bytes "
                f"({msg_max})"))
        ts = timestamp or None
        avg = sizes // n + RECORD_OVERHEAD if n else 0
        with self.lock:
            if self.msg_count + n > self.max_msgs or self.msg_bytes + sizes > self.max_bytes:
                raise BufferError("Local: Queue full")
            count = t.count
            if partition >= count:
                raise KafkaException(KafkaError(
                    KafkaError._UNKNOWN_PARTITION,
                    f"{topic} has no partition {partition} ({count} partitions)"))
            if partition >= 0 or keys is None:
                if partition < 0:
                    partition = t.choose(None, count, t.available)
                self._append_bulk(t.parts[partition], values, keys, ts, avg)
            else:
                # Keys: partition each, then append each partition's share in bulk,
                # keeping the order within every partition.
                choose, avail = t.choose, t.available
                groups: Dict[int, Tuple[List[Any], List[Any]]] = {}
                for i in range(n):
                    k = keys[i]
                    part = choose(k, count, avail)
                    g = groups.get(part)
                    if g is None:
                        g = groups[part] = ([], [])
                    g[0].append(values[i])
                    g[1].append(k)
                for part, (vs, ks) in groups.items():
                    self._append_bulk(t.parts[part], vs, ks, ts, avg)
            self.msg_count += n
        return n

    def _append_bulk(self, p: PartitionState, values: List[Any], keys: Optional[List[Any]],
                     ts: Optional[int], avg: int) -> None:
        """Under the lock: append a list of records to one partition, batch by batch."""
        n = len(values)
        pos = 0
        while pos < n:
            b = p.open
            if b is None:
                b = self._open(p)
            room_n = self.batch_num - b.count
            room_b = (self.batch_size - b.builder.size_in_bytes) // max(avg, 1)
            take = min(n - pos, room_n, max(room_b, 1 if b.count == 0 else 0))
            if take <= 0:
                self._close(p, b)
                continue
            whole = pos == 0 and take == n
            chunk = values if whole else values[pos:pos + take]
            kchunk = None if keys is None else (keys if whole else keys[pos:pos + take])
            b.builder.append_many(chunk, kchunk, ts)
            b.count += take
            pos += take
            if b.count >= self.batch_num or b.builder.size_in_bytes >= self.batch_size:
                self._close(p, b)

    # -- batches (under the lock) -----------------------------------------------------
    def _open(self, p: PartitionState) -> Batch:
        now = time.monotonic()
        builder = RecordBatchBuilder(self.compression, self.compression_level,
                                     initial_capacity=self.initial_capacity)
        b = Batch(p, builder, now, self.timeout, p.batch_seq)
        b.append = builder.append
        p.batch_seq += 1
        p.open = b
        deadline = now + self.linger
        self.open_order.append((deadline, b))
        if self.flushing:
            self._wake(0.0)
        else:
            self._wake(deadline)
        return b

    def _close(self, p: PartitionState, b: Batch) -> None:
        if p.open is b:
            p.open = None
        # Bytes are counted per closed batch (its encoded size), not per message.
        b.nbytes = b.builder.size_in_bytes
        self.msg_bytes += b.nbytes
        p.ready.append(b)
        self.ready_parts.add(p)
        self._wake(0.0)

    def close_expired(self, now: float, everything: bool = False) -> Optional[float]:
        """I/O thread: close the batches whose linger is over (all with ``everything``).
        Returns the next linger deadline."""
        q = self.open_order
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

    def take_pending(self, t: TopicState) -> List[tuple]:
        with self.lock:
            out, t.pending = t.pending, []
            self.pending_topics.discard(t)
            return out

    def total_queued(self) -> int:
        return self.msg_count


def _total_len(items: Any) -> int:
    try:
        return sum(map(len, items))  # C loop; a None in the list makes it fall back
    except TypeError:
        return sum(len(x) for x in items if x is not None)


def _max_len(items: Any) -> int:
    if not items:
        return 0
    try:
        return max(map(len, items))
    except TypeError:
        return max((len(x) for x in items if x is not None), default=0)


def _as_bytes(obj: Any, what: str) -> Any:
    if isinstance(obj, str):
        return obj.encode("utf-8")
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    raise TypeError(f"{what} must be bytes, str or None, not {type(obj).__name__}")


def _headers(headers: Any) -> Optional[List[Tuple[str, Optional[bytes]]]]:
    """confluent-kafka accepts a dict or a list of (key, value) pairs; values str, bytes or
    None."""
    items = headers.items() if isinstance(headers, dict) else headers
    out = []
    for item in items:
        try:
            k, v = item
        except (TypeError, ValueError):
            raise TypeError("headers must be a dict or a list of (key, value) pairs") from None
        if not isinstance(k, str):
            raise TypeError(f"header key must be str, not {type(k).__name__}")
        if v is not None and not isinstance(v, bytes):
            v = _as_bytes(v, "header value")
        out.append((k, v))
    return out or None
