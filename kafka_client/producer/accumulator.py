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

import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from kafka_client.errors import KafkaError, KafkaException
from kafka_client.producer._core import (AccumulatorCore, Batch, PartitionState,
                                         TopicState)
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


class Accumulator(AccumulatorCore):
    """Open and ready batches for every partition. ``produce()``, the hot path, is
    :meth:`AccumulatorCore.produce` (compiled, in ``_core.pyx``)."""

    def __init__(self, config: Any, wake: Callable[[float], None],
                 want_topic: Callable[[str], None]) -> None:
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

    def assign_pending(self, t: TopicState, leaders: List[int]) -> List[tuple]:
        """I/O thread: the topic's partitions are known. Set them and place the messages
        that waited, in one hold of the lock, so no newer message overtakes them.
        Returns the ``(message, error)`` pairs that could not be placed."""
        with self.lock:
            self.set_partitions(t, leaders)
            pending, t.pending = t.pending, []
            self.pending_topics.discard(t)
            return self.place_pending(t, pending)

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
        if not b.count:
            return  # its only append failed: nothing to send
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
