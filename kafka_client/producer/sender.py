"""The sender: moves closed batches to their leaders and turns answers into delivery
reports (I/O thread).

On every loop turn :meth:`Sender.tick` closes batches whose ``linger.ms`` is over,
groups the partitions with a batch ready by leader broker, and sends one
ProduceRequest per broker carrying one batch of each of its ready partitions (Kafka
and noida-db accept one batch per partition per request), as long as the connection
has in-flight room. The batch buffers go to ``socket.sendmsg`` as they are.

Answers: success queues a delivery report with the base offset; DUPLICATE_SEQUENCE_NUMBER
(idempotence) counts as success; retriable errors put the batch back in its place in the
partition's queue after ``retry.backoff.ms`` (doubling to ``retry.backoff.max.ms``), and
the partition sends nothing newer until what is in flight has drained, so retries keep
the partition's order; leader errors also ask for a metadata refresh. Whatever exceeds
``retries`` or ``message.timeout.ms`` fails.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from kafka_client._cluster.metadata import REFRESH_ERRORS, UNKNOWN_TOPIC_OR_PARTITION
from kafka_client._net.connection import DISCONNECTED
from kafka_client.errors import KafkaError
from kafka_client.producer.accumulator import Accumulator, Batch, PartitionState, TopicState
from kafka_client.producer.idempotence import (
    DUPLICATE_SEQUENCE_NUMBER,
    INVALID_PRODUCER_EPOCH,
    NOT_PERSISTED,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    PERSISTED,
    POSSIBLY_PERSISTED,
    UNKNOWN_PRODUCER_ID,
    Idempotence,
    restamp,
)

__all__ = ["Sender", "Report"]

_log = logging.getLogger("kafka_client.producer.sender")

PRODUCE_KEY = 0
INIT_PRODUCER_ID_KEY = 22
MIN_PRODUCE_VERSION = 3  # record batches v2

#: A delivery report: (batch or None, error, base offset, log-append time (-1: create
#: time), persistence status, pending messages (for batchless failures), topic)
Report = Tuple[Optional[Batch], Optional[KafkaError], int, int, int, Optional[list], str]


class Sender:
    """Owns the path from ready batches to delivery reports (I/O thread only)."""

    def __init__(self, config: Any, acc: Accumulator, cluster: Any, idem: Idempotence,
                 report: Callable[[Report], None]) -> None:
        self.config = config
        self.acc = acc
        self.cluster = cluster
        self.idem = idem
        self.report = report
        self.acks = config["acks"]
        self.request_timeout_ms = config["request.timeout.ms"]
        self.retries = config["retries"]
        self.backoff = config["retry.backoff.ms"] / 1000.0
        self.backoff_max = config["retry.backoff.max.ms"] / 1000.0
        self.idempotent = idem.enabled
        self.part_max_in_flight = (config["max.in.flight.requests.per.connection"]
                                   if self.idempotent else 1 << 30)
        self.propagation = config["topic.metadata.propagation.max.ms"] / 1000.0
        self.auto_create = bool(config["allow.auto.create.topics"])
        self._next_expiry_check = 0.0
        #: earliest retry_at of the batches requeued since the last tick() returned: a
        #: request that fails inside tick() (a write error) requeues its batches after
        #: tick() looked at the queues, and the I/O thread must still wake for them
        self._requeued_at: Optional[float] = None
        self.inflight: set = set()  # batches sent and not answered
        # statistics
        self.tx_msgs = 0
        self.tx_batches = 0
        self.tx_requests = 0
        self.batch_sizes: Deque[int] = deque(maxlen=1000)
        self.batch_counts: Deque[int] = deque(maxlen=1000)
        #: node id -> [sum, count, max] of the time batches waited in the producer
        #: before their request was written (librdkafka's int_latency), seconds
        self.int_latency: Dict[int, List[float]] = {}
        cluster.on_metadata.append(self.on_metadata)
        cluster.on_broker_state.append(self._on_broker_state)

    # -- metadata ----------------------------------------------------------------------
    def on_metadata(self, changed: Any) -> None:
        md = self.cluster.metadata
        now = time.monotonic()
        for name, t in list(self.acc.topics.items()):
            info = md.topics.get(name)
            if info is None:
                continue
            if info.leaders and info.error in (0, 5):
                if t.parts is None or t.pending:
                    self._assign_pending(t, info.leaders)
                elif len(t.parts) != len(info.leaders) or any(
                        p.leader != info.leaders[i] for i, p in enumerate(t.parts)):
                    with self.acc.lock:
                        self.acc.set_partitions(t, info.leaders)
            elif info.error == UNKNOWN_TOPIC_OR_PARTITION or (info.error == 0
                                                              and not info.leaders):
                if t.unknown_since is None:
                    t.unknown_since = now
            elif info.error:
                # Authorization failure, invalid topic name, ...: not going to change.
                err = KafkaError(info.error, f"topic {name}: {KafkaError(info.error).name()}")
                if t.parts is None:
                    t.error = err
                    self._fail_pending(t, err)

    def _assign_pending(self, t: TopicState, leaders: List[int]) -> None:
        """The topic's partitions are known: place the messages that waited for them."""
        for m, err in self.acc.assign_pending(t, leaders):
            self.report((None, err, -1, -1, NOT_PERSISTED, [m], t.name))

    def _fail_pending(self, t: TopicState, err: KafkaError,
                      before: Optional[float] = None) -> None:
        with self.acc.lock:
            if before is None:
                failed, t.pending = t.pending, []
            else:
                failed = [m for m in t.pending if m[6] <= before]
                t.pending = [m for m in t.pending if m[6] > before]
            if not t.pending:
                self.acc.pending_topics.discard(t)
        if failed:
            self.report((None, err, -1, -1, NOT_PERSISTED, failed, t.name))

    def _on_broker_state(self, conn: Any, state: str, error: Optional[KafkaError]) -> None:
        if error is not None:
            # The leaders on that broker may have moved: check soon.
            md = self.cluster.metadata
            for t in self.acc.topics.values():
                if t.parts and any(p.leader == conn.node_id for p in t.parts):
                    md.request([t.name], fast=True)

    # -- the loop ----------------------------------------------------------------------
    def tick(self, now: float) -> Optional[float]:
        nxt = self._tick(now)
        if self._requeued_at is not None:
            nxt = _earliest(nxt, self._requeued_at)
            self._requeued_at = None
        return nxt

    def _tick(self, now: float) -> Optional[float]:
        acc = self.acc
        nxt = acc.close_expired(now)
        if now >= self._next_expiry_check:
            self._expire(now)
            self._next_expiry_check = now + 0.1
            nxt = _earliest(nxt, self._next_expiry_check)
        if self.idem.fatal is not None:
            return nxt
        if self.idempotent and not self.idem.ready:
            return _earliest(nxt, self._ensure_producer_id(now))
        if not acc.ready_parts:
            return nxt
        by_conn: Dict[Any, List[PartitionState]] = {}
        with acc.lock:
            parts = list(acc.ready_parts)
        cluster = self.cluster
        for p in parts:
            ready = p.ready
            if not ready:
                with acc.lock:
                    if not p.ready:
                        acc.ready_parts.discard(p)
                continue
            head = ready[0]
            if head.retry_at > now:
                nxt = _earliest(nxt, head.retry_at)
                continue
            if p.retrying and p.in_flight:
                continue
            if p.in_flight >= self.part_max_in_flight:
                continue
            leader = p.leader
            if leader < 0:
                cluster.metadata.request([p.topic.name], fast=True)
                continue
            conn = cluster.ensure_connected(leader)
            if conn is None:
                cluster.metadata.request([p.topic.name], fast=True)
                continue
            if not conn.can_send():
                if conn.state == DISCONNECTED and conn.next_attempt > now:
                    # In its reconnect backoff: nothing else wakes the loop when it ends
                    # (the connection has no request queued), so look again then.
                    nxt = _earliest(nxt, conn.next_attempt)
                continue
            by_conn.setdefault(conn, []).append(p)
        for conn, plist in by_conn.items():
            self._send_to(conn, plist, now)
        return nxt

    def _send_to(self, conn: Any, plist: List[PartitionState], now: float) -> None:
        version = conn.version_for(PRODUCE_KEY)
        if version is None or version < MIN_PRODUCE_VERSION:
            err = KafkaError(KafkaError._UNSUPPORTED_FEATURE,
                             f"broker {conn.host}:{conn.port} has no Produce v3+ (record "
                             f"batches v2)")
            for p in plist:
                with self.acc.lock:
                    batches = list(p.ready)
                    p.ready.clear()
                for b in batches:
                    self._deliver(b, err, -1, -1, NOT_PERSISTED)
            return
        while plist and conn.can_send():
            batches: List[Batch] = []
            rest: List[PartitionState] = []
            with self.acc.lock:
                for p in plist:
                    if not p.ready:
                        self.acc.ready_parts.discard(p)
                        continue
                    head = p.ready[0]
                    if head.retry_at > now or (p.retrying and p.in_flight) \
                            or p.in_flight >= self.part_max_in_flight:
                        continue
                    p.ready.popleft()
                    if not p.ready:
                        self.acc.ready_parts.discard(p)
                    p.retrying = False
                    p.in_flight += 1
                    batches.append(head)
                    if p.ready:
                        rest.append(p)
            if not batches:
                return
            self._send_request(conn, version, batches)
            plist = rest

    def _prepare(self, b: Batch) -> bytes:
        """The batch's bytes, built on first send (producer id and sequence stamped)."""
        idem = self.idem
        if b.data is None:
            builder = b.builder
            if self.idempotent:
                p = b.part
                b.base_sequence = p.next_seq
                p.next_seq = (p.next_seq + b.count) & 0x7FFFFFFF
                builder.producer_id = b.pid = idem.producer_id
                builder.producer_epoch = b.epoch = idem.epoch
                builder.base_sequence = b.base_sequence
            b.data = builder.build()
            b.builder = None  # the encoded records now live in b.data only
            self.tx_batches += 1
            self.batch_sizes.append(len(b.data))
            self.batch_counts.append(b.count)
        elif self.idempotent and (b.pid != idem.producer_id or b.epoch != idem.epoch):
            b.pid, b.epoch = idem.producer_id, idem.epoch
            b.data = restamp(b.data, b.pid, b.epoch, b.base_sequence)
        return b.data

    def _send_request(self, conn: Any, version: int, batches: List[Batch]) -> None:
        from kafka_proto.messages import ProduceRequest

        topics: Dict[str, list] = {}
        now = time.monotonic()
        lat = self.int_latency.get(conn.node_id)
        if lat is None:
            lat = self.int_latency[conn.node_id] = [0.0, 0, 0.0]
        for b in batches:
            if not b.sent:
                waited = now - b.created
                lat[0] += waited
                lat[1] += 1
                if waited > lat[2]:
                    lat[2] = waited
            b.attempts += 1
            b.sent = True
            topics.setdefault(b.part.topic.name, []).append(
                ProduceRequest.PartitionProduceData(index=b.part.index, records=self._prepare(b)))
        req = ProduceRequest(
            transactional_id=None, acks=self.acks, timeout_ms=self.request_timeout_ms,
            topic_data=[ProduceRequest.TopicProduceData(name=name, partition_data=pd)
                        for name, pd in topics.items()])
        self.inflight.update(batches)
        self.tx_requests += 1
        node = conn.node_id
        if self.acks == 0:
            conn.send(req, lambda resp, err: self._on_sent_acks0(batches, err, node),
                      expect_response=False)
        else:
            conn.send(req, lambda resp, err: self._on_response(batches, resp, err, node))

    # -- answers -------------------------------------------------------------------------
    def _on_sent_acks0(self, batches: List[Batch], err: Optional[KafkaError],
                       node: int) -> None:
        now = time.monotonic()
        for b in batches:
            b.part.in_flight -= 1
            self.inflight.discard(b)
            if err is None:
                self._deliver(b, None, -1, -1, POSSIBLY_PERSISTED)
            else:
                self._retry_or_fail(b, err, now)

    def _on_response(self, batches: List[Batch], resp: Any, err: Optional[KafkaError],
                     node: int) -> None:
        now = time.monotonic()
        by_tp: Dict[Tuple[str, int], Any] = {}
        if err is None:
            for t in resp.responses or ():
                for pr in t.partition_responses or ():
                    by_tp[(t.name, pr.index)] = pr
        for b in batches:
            p = b.part
            p.in_flight -= 1
            self.inflight.discard(b)
            if b.done:
                continue
            if err is not None:
                self._retry_or_fail(b, err, now)
                continue
            pr = by_tp.get((p.topic.name, p.index))
            if pr is None:
                self._retry_or_fail(b, KafkaError(KafkaError._BAD_MSG,
                                                  "partition missing from Produce answer"),
                                    now)
                continue
            code = pr.error_code
            if code == 0:
                self._deliver(b, None, pr.base_offset, getattr(pr, "log_append_time_ms", -1),
                              PERSISTED)
                continue
            if code == DUPLICATE_SEQUENCE_NUMBER and self.idempotent:
                self._deliver(b, None, -1, -1, PERSISTED)
                continue
            msg = getattr(pr, "error_message", None)
            error = KafkaError(code, f"{p.topic.name}[{p.index}]: {KafkaError(code).name()}"
                               + (f": {msg}" if msg else ""))
            if code in REFRESH_ERRORS:
                self.cluster.metadata.mark_stale(p.topic.name)
                leader = getattr(getattr(pr, "current_leader", None), "leader_id", -1)
                if leader is not None and leader >= 0 and leader != p.leader:
                    p.leader = leader  # KIP-951: the new leader, without waiting for metadata
            if self.idempotent and code in (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID,
                                            INVALID_PRODUCER_EPOCH):
                if code == OUT_OF_ORDER_SEQUENCE_NUMBER and self._earlier_retry(b):
                    b.last_error = error
                    self._requeue(b, now)  # caused by the earlier batch's failure
                    continue
                self._fatal(KafkaError(code, error.str(), fatal=True))
                self._deliver(b, self.idem.fatal, -1, -1, POSSIBLY_PERSISTED)
                continue
            self._retry_or_fail(b, error, now)

    def _earlier_retry(self, b: Batch) -> bool:
        """True if an older batch of the same partition is waiting to be resent."""
        for other in b.part.ready:
            if other.sent and other.seq < b.seq:
                return True
            if other.seq > b.seq:
                break
        return False

    def _retry_or_fail(self, b: Batch, err: KafkaError, now: float) -> None:
        if b.done:
            return
        if err.retriable() and b.attempts <= self.retries and now < b.deadline:
            _log.info("%s: retrying after %s (attempt %d)", b, err.str(), b.attempts)
            b.last_error = err
            self._requeue(b, now)
            return
        if err.retriable() and now >= b.deadline:
            err = KafkaError(KafkaError._MSG_TIMED_OUT, f"message timed out ({err.str()})")
            if self.idempotent and b.sent:
                self.idem.request_bump("a sent batch timed out")
        self._deliver(b, err, -1, -1, POSSIBLY_PERSISTED if b.sent else NOT_PERSISTED)

    def _requeue(self, b: Batch, now: float) -> None:
        """Put a batch back in its place (by batch order) in its partition's queue."""
        delay = min(self.backoff * (2 ** max(b.attempts - 1, 0)), self.backoff_max)
        b.retry_at = now + delay
        self._requeued_at = _earliest(self._requeued_at, b.retry_at)
        p = b.part
        with self.acc.lock:
            ready = p.ready
            i = 0
            for other in ready:
                if other.seq > b.seq:
                    break
                i += 1
            ready.insert(i, b)
            p.retrying = True
            self.acc.ready_parts.add(p)

    def _deliver(self, b: Batch, err: Optional[KafkaError], base_offset: int,
                 append_time: int, status: int) -> None:
        if b.done:
            return
        b.done = True
        if err is None:
            self.tx_msgs += b.count
        self.report((b, err, base_offset, append_time, status, None, b.part.topic.name))

    def _fatal(self, err: KafkaError) -> None:
        fatal = self.idem.set_fatal(err)
        self.cluster.report_error(fatal)
        self.purge(fatal, fatal, include_in_flight=True)

    # -- time ----------------------------------------------------------------------------
    def _expire(self, now: float) -> None:
        """Fail what waited longer than message.timeout.ms without being in flight, and
        messages of topics that do not exist."""
        acc = self.acc
        for t in list(acc.pending_topics):
            if t.unknown_since is not None and not self.auto_create and t.pending and \
                    now - t.unknown_since >= min(self.propagation, acc.timeout or 1e9):
                err = KafkaError(KafkaError._UNKNOWN_TOPIC,
                                 f"topic {t.name} does not exist")
                t.error = err
                self._fail_pending(t, err)
                continue
            if acc.timeout > 0 and t.pending and t.pending[0][6] + acc.timeout <= now:
                code = (KafkaError._UNKNOWN_TOPIC if t.unknown_since is not None
                        else KafkaError._MSG_TIMED_OUT)
                self._fail_pending(t, KafkaError(
                    code, f"message for {t.name} timed out waiting for metadata"),
                    before=now - acc.timeout)
        if acc.timeout <= 0:
            return
        expired: List[Batch] = []
        with acc.lock:
            for p in list(acc.ready_parts):
                while p.ready and p.ready[0].deadline <= now:
                    expired.append(p.ready.popleft())
                if not p.ready:
                    acc.ready_parts.discard(p)
            for _deadline, b in acc.open_order:
                if b.deadline <= now and b.part.open is b:
                    b.part.open = None
                    expired.append(b)
        for b in expired:
            if self.idempotent and b.sent:
                self.idem.request_bump("a queued batch timed out")
            self._deliver(b, KafkaError(KafkaError._MSG_TIMED_OUT,
                                        "message timed out before it was delivered"),
                          -1, -1, POSSIBLY_PERSISTED if b.sent else NOT_PERSISTED)

    # -- idempotence ---------------------------------------------------------------------
    def _ensure_producer_id(self, now: float) -> Optional[float]:
        idem = self.idem
        if idem.init_in_flight:
            return None
        if self.inflight:
            return None  # drain first: sequences restart only with nothing in flight
        if now < idem.init_retry_at:
            return idem.init_retry_at
        conn = self.cluster._ready_conn()
        if conn is None:
            self.cluster._kick_connect(now)
            return now + 0.05
        version = conn.version_for(INIT_PRODUCER_ID_KEY)
        if version is None:
            self._fatal(KafkaError(KafkaError._UNSUPPORTED_FEATURE,
                                   "broker does not support InitProducerId (idempotence)"))
            return None
        req = idem.init_request()
        if version < 3:
            req.producer_id, req.producer_epoch = -1, -1
        bump = idem.bump_wanted

        def done(resp: Any, err: Optional[KafkaError]) -> None:
            if idem.on_init(resp, err, time.monotonic(), self.backoff) and bump:
                # New epoch: every partition's sequence restarts at 0, queued batches
                # that were already numbered get renumbered in order.
                self._resequence()

        idem.init_in_flight = True
        conn.send(req, done, version=version)
        return None

    def _resequence(self) -> None:
        """New epoch: every partition's sequence restarts at 0; batches never sent get
        their numbers when they first go out.

        A batch sent under the old epoch that waits to be resent (its answer was lost)
        may be in the log already: under the new epoch, with a new sequence, the broker
        could not recognise it and would append it again. So it fails instead, as
        POSSIBLY_PERSISTED, with the error that made it wait (nothing is in flight
        here: the bump waited for that)."""
        failed: List[Batch] = []
        with self.acc.lock:
            for t in self.acc.topics.values():
                for p in t.parts or ():
                    if any(b.sent for b in p.ready):
                        keep = [b for b in p.ready if not b.sent]
                        failed.extend(b for b in p.ready if b.sent)
                        p.ready.clear()
                        p.ready.extend(keep)
                        if not keep:
                            self.acc.ready_parts.discard(p)
                    p.retrying = False
                    p.next_seq = 0
        for b in failed:
            cause = b.last_error
            self._deliver(b, KafkaError(
                cause.code() if cause is not None else KafkaError._MSG_TIMED_OUT,
                "not resent after the producer epoch was bumped: it may be in the log "
                "already" + (f" ({cause.str()})" if cause is not None else "")),
                -1, -1, POSSIBLY_PERSISTED)

    # -- purge ---------------------------------------------------------------------------
    def purge(self, queue_err: Optional[KafkaError], inflight_err: Optional[KafkaError],
              include_in_flight: bool) -> None:
        """Fail queued messages with ``queue_err`` (if given); with ``include_in_flight``
        mark in-flight batches failed with ``inflight_err`` (late answers are ignored)."""
        acc = self.acc
        failed: List[Batch] = []
        pending: List[Tuple[TopicState, list]] = []
        if queue_err is not None:
            with acc.lock:
                for t in acc.topics.values():
                    if t.pending:
                        pending.append((t, t.pending))
                        t.pending = []
                    for p in t.parts or ():
                        failed.extend(p.ready)
                        p.ready.clear()
                        if p.open is not None:
                            failed.append(p.open)
                            p.open = None
                acc.ready_parts.clear()
                acc.pending_topics.clear()
                acc.open_order.clear()
            for b in failed:
                self._deliver(b, queue_err, -1, -1,
                              POSSIBLY_PERSISTED if b.sent else NOT_PERSISTED)
            for t, msgs in pending:
                self.report((None, queue_err, -1, -1, NOT_PERSISTED, msgs, t.name))
        if include_in_flight and inflight_err is not None:
            for b in list(self.inflight):
                # Reported now; the answer, when it comes, finds the batch done.
                self._deliver(b, inflight_err, -1, -1, POSSIBLY_PERSISTED)


def _earliest(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None:
        return b
    if b is None:
        return a
    return a if a < b else b
