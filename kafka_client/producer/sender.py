"""The sender: moves closed batches to their leaders and turns answers into delivery
reports (I/O thread).

On every loop turn :meth:`Sender.tick` has the accumulator close the batches whose
``linger.ms`` is over and expire what timed out, asks it which leader brokers have a
batch ready, and for each one with a connection that has in-flight room drains the
accumulator into ProduceRequests: one batch of each ready partition the broker leads
(Kafka and noida-db accept one batch per partition per request), up to
``message.max.bytes`` per request (librdkafka's meaning: the largest request; one batch
always goes). The batch buffers go to ``socket.sendmsg`` as they are. The queues
belong to the accumulator (:mod:`kafka_client.producer.accumulator`); the sender only
chooses and sends.

Answers: success queues a delivery report with the base offset; DUPLICATE_SEQUENCE_NUMBER
(idempotence) counts as success; retriable errors put the batch back in its place in the
partition's queue after ``retry.backoff.ms`` (doubling to ``retry.backoff.max.ms``), and
the partition sends nothing newer until what is in flight has drained, so retries keep
the partition's order; leader errors also ask for a metadata refresh. Whatever exceeds
``retries`` or ``message.timeout.ms`` fails.

Idempotence (librdkafka's rules, KIP-360): a batch that had its sequence number and fails
leaves a gap in its partition's sequence, so the producer bumps its epoch once nothing is
in flight and numbers again from 0 (``enable.gapless.guarantee``: a fatal error instead).
UNKNOWN_PRODUCER_ID for a batch sent once (the broker forgot the producer) and
OUT_OF_ORDER_SEQUENCE_NUMBER caused by an earlier batch that is resent or failed are
recovered: the refused batches are not in the log, so they wait, keep their place, and
are sent again (renumbered under the new epoch if there is one). The other sequence
errors are fatal. A transactional producer (``txn``) does the same inside a transaction,
except that a failure makes the transaction abortable (the epoch is bumped when it is
aborted) and fencing (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED) is fatal.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from kafka_client._cluster.metadata import REFRESH_ERRORS
from kafka_client._cluster.telemetry import Sample, producer_samples
from kafka_client._interval import IntervalStat
from kafka_client._stats import StatsWindow
from kafka_client._net.connection import DISCONNECTED, NEVER_SENT
from kafka_client.errors import KafkaError, broker_code, client_error
from kafka_client.producer.accumulator import (
    Accumulator,
    Batch,
    PendingMessage,
    Unplaced,
    Vanished,
    message_timed_out,
)
from kafka_client.producer.idempotence import (
    NOT_PERSISTED,
    PERSISTED,
    POSSIBLY_PERSISTED,
    Idempotence,
    restamp,
)
from kafka_client.producer.transactions import (
    TransactionManager,
    fatal_produce_error,
    fenced_error,
)
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import ApiKey, ProduceRequest
from kafka_proto.records import (Compression, LegacyMessage, RecordBatchBuilder,
                                 build_message_set, read_batch_header, read_batches)

__all__ = ["Sender", "Report"]

_log = logging.getLogger("kafka_client.producer.sender")

#: Record batches v2 (Kafka 0.11): below, a Produce carries a legacy message set (magic 1
#: from v2, Kafka 0.10; 0 before), with no producer id, sequence or headers
BATCH_V2_PRODUCE_VERSION = 3
#: Least time between two looks for idle topics to forget (metadata.max.idle.ms)
IDLE_CHECK_S = 1.0
#: zstd batches: a broker refuses them in an older Produce version (KIP-110)
ZSTD_MIN_PRODUCE_VERSION = 7

#: Produce errors that say the broker refused the batch without appending it: a batch
#: refused on every attempt is not in the log, so it may be renumbered after an epoch bump
_REFUSALS = frozenset((ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID,
                       ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                       ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                       ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH))
#: A transactional producer fenced by a newer instance
_FENCING = (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED)
#: Produce errors for which the broker appends nothing (the request is refused, or its
#: batch fails validation, before anything is written): a batch failed so, every attempt
#: of it refused, leaves no gap. CLUSTER_AUTHORIZATION_FAILED: a broker before Kafka 3.0
#: refusing an idempotent producer without IDEMPOTENT_WRITE; the others are Kafka's
#: validation of a batch (a null key on a compacted topic, a timestamp out of range, a
#: batch too large, ...), which refuses the batch whole.
_NEVER_APPENDED = frozenset((ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                             ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                             ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE,
                             ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                             ErrorCode.INVALID_TIMESTAMP,
                             ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                             ErrorCode.INVALID_REQUIRED_ACKS,
                             ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT))
#: InitProducerId answers that refuse the idempotent producer an id for good: the
#: principal lacks the ACL (IDEMPOTENT_WRITE on the cluster before Kafka 3.0)
_INIT_REFUSALS = frozenset((ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))


class Report(NamedTuple):
    """A delivery report, queued for the application thread: the outcome of a batch, or
    of messages that never had one (``batch`` None, ``messages`` set).

    ``base_offset`` is the batch's first offset (-1 when not known), ``append_time`` the
    broker's log-append time (-1: the messages' create time stands), ``status``
    librdkafka's persistence status (NOT_PERSISTED, POSSIBLY_PERSISTED, PERSISTED)."""

    batch: Optional[Batch]
    error: Optional[KafkaError]
    base_offset: int
    append_time: int
    status: int
    messages: Optional[List[PendingMessage]]
    topic: str


def _message_set(batch: bytes, version: int) -> bytes:
    """The built v2 ``batch`` as the legacy message set a Produce of ``version`` (below
    v3) carries, as librdkafka writes it for a broker before Kafka 0.11: magic 1 from
    Produce v2 (0 before: no timestamps), the same codec, the headers left out."""
    source = next(iter(read_batches(batch)))
    return build_message_set(
        [LegacyMessage(r.offset, r.timestamp, r.key, r.value) for r in source],
        1 if version >= 2 else 0, int(source.compression))


def _uncompressed(batch: bytes) -> bytes:
    """The built v2 ``batch`` again without compression: same records (keys, values,
    headers, timestamps), producer id, epoch, base sequence and transactional bit."""
    source = next(iter(read_batches(batch)))
    builder = RecordBatchBuilder(Compression.NONE, producer_id=source.producer_id,
                                 producer_epoch=source.producer_epoch,
                                 base_sequence=source.base_sequence,
                                 transactional=source.is_transactional,
                                 timestamp_type=source.timestamp_type,
                                 initial_capacity=source.decompressed_size)
    for record in source:
        builder.append(record.value, record.key, record.timestamp, record.headers)
    return builder.build()


class Sender:
    """Owns the path from ready batches to delivery reports (I/O thread only): asks the
    accumulator what is ready, drains it node by node into requests, and reads the
    answers."""

    def __init__(self, config: Any, acc: Accumulator, cluster: Any, idem: Idempotence,
                 report: Callable[[Report], None],
                 txn: Optional[TransactionManager] = None) -> None:
        self.config = config
        self.log = config.logger_for(_log.name)
        #: zstd batches were sent uncompressed to a broker without Produce v7 (said once)
        self._zstd_refused = False
        self._compression_warned = False
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
        self.txn = txn
        self.transactional_id: Optional[str] = config["transactional.id"]
        if txn is not None:
            txn.attach(self)
        #: batches waiting to be resent that the broker refused on every attempt: not in
        #: the log, so an epoch bump renumbers them instead of failing them
        self.refused: set = set()
        #: per partition, the sequence range ``[start, end)`` of its failed batches the
        #: broker never appended (refused by the ACLs) while later ones of it were
        #: numbered: closed when those fail so too, else an epoch bump (see
        #: :meth:`_unappended`)
        self.unappended: Dict[Any, Tuple[int, int]] = {}
        #: librdkafka's message.max.bytes: the largest request this client sends (one
        #: batch always goes, however big)
        self.max_request_bytes = config["message.max.bytes"]
        self._next_expiry_check = 0.0
        #: next look for idle topics to forget (metadata.max.idle.ms), at a metadata answer
        self._next_idle_check = time.monotonic() + IDLE_CHECK_S
        #: earliest retry_at of the batches requeued since the last tick() returned: a
        #: request that fails inside tick() (a write error) requeues its batches after
        #: tick() looked at the queues, and the I/O thread must still wake for them
        self._requeued_at: Optional[float] = None
        self.inflight: set = set()  # batches sent and not answered
        # statistics
        self.tx_msgs = 0
        self.tx_batches = 0
        #: per topic, the sizes (bytes) and message counts of the batches built since
        #: the last statistics document
        self.batch_windows: Dict[str, Tuple[StatsWindow, StatsWindow]] = {}
        #: per (topic, partition): [messages, bytes] the brokers acknowledged
        self.partition_tx: Dict[Tuple[str, int], List[int]] = {}
        #: per node id: requests with batches sent again
        self.retries_by_node: Dict[int, int] = {}
        #: node id -> the time batches waited in the producer before their request was
        #: written (librdkafka's int_latency), seconds, since the last statistics document
        self.int_latency: Dict[int, StatsWindow] = {}
        #: the windows keep samples for percentiles only when documents are built
        self.stats_samples = config["statistics.interval.ms"] > 0
        #: since the last metrics push (KIP-714): the same waits, any broker, and the
        #: throttle times (ms) of Produce answers
        self.queue_time = IntervalStat()
        self.produce_throttle = IntervalStat()
        cluster.on_metadata.append(self.on_metadata)
        cluster.on_broker_state.append(self._on_broker_state)

    # -- metadata ----------------------------------------------------------------------
    def on_metadata(self, changed: Any) -> None:
        now = time.monotonic()
        removed = self.acc.apply_metadata(self.cluster.metadata.topics, now, changed)
        for unplaced in removed.unplaced:
            self._report_unplaced(unplaced)
        self._report_vanished(removed.vanished)
        if now >= self._next_idle_check:
            # At a metadata answer, as the Java producer does (the periodic refresh
            # brings one at least every topic.metadata.refresh.interval.ms): an idle
            # producer's loop is not woken for it.
            self._next_idle_check = now + IDLE_CHECK_S
            self.forget_idle(now)

    def forget_idle(self, now: float) -> List[str]:
        """Forget the topics idle for metadata.max.idle.ms (see
        Accumulator.forget_idle): their metadata is no longer asked for or kept, and
        their statistics go. Returns their names."""
        names = self.acc.forget_idle(now)
        if names:
            self.cluster.metadata.forget(names)
            gone = set(names)
            for name in names:
                self.batch_windows.pop(name, None)
            for key in [k for k in self.partition_tx if k[0] in gone]:
                del self.partition_tx[key]
            self.log.debug("forgot %d topics idle for metadata.max.idle.ms", len(names))
        return names

    def _report_vanished(self, vanished: List[Vanished]) -> None:
        """Queued batches of partitions that no longer exist fail (librdkafka's
        "partition count changed")."""
        for gone in vanished:
            self.log.warning("%s: %d queued batches fail", gone.error.str(),
                             len(gone.batches))
            for b in gone.batches:
                self._deliver(b, gone.error, -1, -1,
                              POSSIBLY_PERSISTED if b.sent else NOT_PERSISTED)

    def _on_broker_state(self, conn: Any, state: str, error: Optional[KafkaError]) -> None:
        if error is not None:
            # The leaders on that broker may have moved: check soon.
            topics = self.acc.topics_led_by(conn.node_id)
            if topics:
                self.cluster.metadata.request(topics, fast=True)

    # -- the loop ----------------------------------------------------------------------
    def tick(self, now: float) -> Optional[float]:
        nxt = self._tick(now)
        if self._requeued_at is not None:
            nxt = _earliest(nxt, self._requeued_at)
            self._requeued_at = None
        return nxt

    def _tick(self, now: float) -> Optional[float]:
        acc = self.acc
        nxt = acc.close_lingered(now)
        if now >= self._next_expiry_check:
            self._expire(now)
            self._next_expiry_check = now + 0.1
        if acc.msg_count or acc.pending_topics or acc.vanishing:
            # Something may expire: look again soon. An idle producer's loop sleeps
            # (it woke ten times a second; produce() wakes it).
            nxt = _earliest(nxt, self._next_expiry_check)
        if self.idem.fatal is not None:
            return nxt
        if self.txn is not None:
            if not self.idem.ready:
                return nxt  # the transaction manager gets the producer id and epoch
            nxt = _earliest(nxt, self.txn.tick(now))
        elif self.idempotent and not self.idem.ready:
            return _earliest(nxt, self._ensure_producer_id(now))
        ready = acc.ready(now)
        nxt = _earliest(nxt, ready.next_retry)
        md = self.cluster.metadata
        if ready.no_leader:
            md.request(sorted(ready.no_leader), fast=True)
        for node in ready.nodes:
            conn = self.cluster.ensure_connected(node)
            if conn is None:
                md.request(acc.topics_led_by(node), fast=True)
                continue
            if not conn.can_send():
                if conn.state == DISCONNECTED and conn.next_attempt > now:
                    # In its reconnect backoff: nothing else wakes the loop when it ends
                    # (the connection has no request queued), so look again then.
                    nxt = _earliest(nxt, conn.next_attempt)
                elif conn.muted_until:
                    # Throttled by the broker (KIP-219): the batches wait here, where
                    # they still expire, and go when the throttle is over.
                    nxt = _earliest(nxt, conn.muted_until)
                continue
            self._send_to(conn, now)
        return nxt

    def _send_to(self, conn: Any, now: float) -> None:
        """Requests to ``conn`` while it has room and the accumulator has batches for it."""
        version = conn.version_for(ApiKey.PRODUCE)
        if version is None or (version < BATCH_V2_PRODUCE_VERSION and (
                self.idempotent or self.transactional_id is not None)):
            # producer ids, sequences and transactions live in record batches v2
            err = KafkaError(KafkaError._UNSUPPORTED_FEATURE,
                             f"broker {conn.host}:{conn.port} has no Produce v3+ (record "
                             f"batches v2), which idempotence and transactions need"
                             if version is not None else
                             f"broker {conn.host}:{conn.port} has no Produce API")
            for b in self.acc.take_ready(conn.node_id):
                self._deliver(b, err, -1, -1, NOT_PERSISTED)
            return
        while conn.can_send():
            batches = self.acc.drain(conn.node_id, now, self.max_request_bytes)
            if not batches:
                return
            self._send_request(conn, version, batches)

    def _prepare(self, b: Batch, version: int) -> bytes:
        """The batch's bytes, built on first send (producer id, epoch and the sequence
        the accumulator gave it stamped) for a Produce of ``version``."""
        idem = self.idem
        if b.data is None:
            builder = b.builder
            assert builder is not None    # dropped only once built (data)
            if version < ZSTD_MIN_PRODUCE_VERSION and builder.compression == Compression.ZSTD:
                # The broker would refuse zstd (UNSUPPORTED_COMPRESSION_TYPE; before Kafka
                # 2.1 it knows none): sent uncompressed, as librdkafka does.
                builder.compression = Compression.NONE
                self._no_zstd(b, version)
            if self.idempotent:
                builder.producer_id = b.pid = idem.producer_id
                builder.producer_epoch = b.epoch = idem.epoch
                builder.base_sequence = b.base_sequence
            try:
                b.data = builder.build()
            except Exception as e:
                if builder.compression == Compression.NONE:
                    raise
                # A codec failing (its library, memory): sent uncompressed, as librdkafka
                # does, rather than never.
                self._compression_failed(b, e)
                builder.compression = Compression.NONE
                b.data = builder.build()
            b.builder = None  # the encoded records now live in b.data only
            self.tx_batches += 1
            windows = self.batch_windows.get(b.part.topic.name)
            if windows is None:
                keep = self.stats_samples
                windows = self.batch_windows[b.part.topic.name] = (StatsWindow(keep),
                                                                   StatsWindow(keep))
            windows[0].add(len(b.data))
            windows[1].add(b.count)
        else:
            if version < ZSTD_MIN_PRODUCE_VERSION and \
                    read_batch_header(b.data).compression == Compression.ZSTD:
                # Built for a broker with Produce v7+, resent to an older one (its leader
                # moved, mid-upgrade): the same records, uncompressed.
                b.data = _uncompressed(b.data)
                self._no_zstd(b, version)
            if self.idempotent and (b.pid != idem.producer_id or b.epoch != idem.epoch):
                b.pid, b.epoch = idem.producer_id, idem.epoch
                b.data = restamp(b.data, b.pid, b.epoch, b.base_sequence)
        return b.data

    def _compression_failed(self, b: Batch, e: Exception) -> None:
        if not self._compression_warned:      # said once per producer
            self._compression_warned = True
            self.log.warning("%s: compressing failed (%s: %s): sending it, and any other "
                             "batch compression fails for, uncompressed", b,
                             type(e).__name__, e)

    def _no_zstd(self, b: Batch, version: int) -> None:
        if not self._zstd_refused:      # said once per producer
            self._zstd_refused = True
            self.log.warning("%s: the broker has no Produce v%d (it has v%d): zstd needs "
                             "Kafka 2.1 (KIP-110); not compressing batches for it", b,
                             ZSTD_MIN_PRODUCE_VERSION, version)

    def _send_request(self, conn: Any, version: int, batches: List[Batch]) -> None:
        topics: Dict[str, list] = {}
        now = time.monotonic()
        lat = self.int_latency.get(conn.node_id)
        if lat is None:
            lat = self.int_latency[conn.node_id] = StatsWindow(self.stats_samples)
        resent = False
        built: List[Batch] = []
        for b in batches:
            try:
                records = self._prepare(b, version)
            except Exception as e:
                self._unbuildable(b, e)
                continue
            built.append(b)
            if not b.sent:
                waited = now - b.created
                lat.add(waited)
                self.queue_time.add(waited)
            else:
                resent = True
            b.attempts += 1
            # (Still in ``refused`` while in flight: its answer is judged by whether every
            # attempt before was refused. Nothing is in flight when a bump renumbers.)
            b.sent = True
            if version < BATCH_V2_PRODUCE_VERSION:
                records = _message_set(records, version)
            topics.setdefault(b.part.topic.name, []).append(
                ProduceRequest.PartitionProduceData(index=b.part.index, records=records))
        if not built:
            return
        batches = built
        req = ProduceRequest(
            transactional_id=self.transactional_id, acks=self.acks,
            timeout_ms=self.request_timeout_ms,
            topic_data=[ProduceRequest.TopicProduceData(name=name, partition_data=pd)
                        for name, pd in topics.items()])
        self.inflight.update(batches)
        node = conn.node_id
        if resent:
            self.retries_by_node[node] = self.retries_by_node.get(node, 0) + 1
        if self.acks == 0:
            conn.send(req, lambda resp, err: self._on_sent_acks0(batches, err, node),
                      expect_response=False)
        else:
            conn.send(req, lambda resp, err: self._on_response(batches, resp, err, node))

    def _unbuildable(self, b: Batch, e: Exception) -> None:
        """``b``'s bytes could not be made (even uncompressed): it fails alone, and its
        partition goes on with the next batch (an idempotent producer's after a bump: the
        failed batch had its sequence)."""
        self.acc.completed(b)
        self.log.error("%s: could not be encoded (%s: %s): its messages fail", b,
                       type(e).__name__, e)
        self._deliver(b, client_error(KafkaError._BAD_MSG, f"the batch could not be "
                                      f"encoded: {type(e).__name__}: {e}"), -1, -1,
                      POSSIBLY_PERSISTED if b.sent else NOT_PERSISTED)

    def telemetry_samples(self, elapsed: float) -> List[Sample]:
        """I/O thread, for a metrics push (KIP-714): since the last push, the time
        batches waited before their request was written and the throttle times of
        Produce answers, in ms."""
        return producer_samples(self.produce_throttle, self.queue_time)

    # -- answers -------------------------------------------------------------------------
    def _on_sent_acks0(self, batches: List[Batch], err: Optional[KafkaError],
                       node: int) -> None:
        now = time.monotonic()
        for b in batches:
            self.acc.completed(b)
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
            self.produce_throttle.add(resp.throttle_time_ms)
            for t in resp.responses or ():
                for pr in t.partition_responses or ():
                    by_tp[(t.name, pr.index)] = pr
        for b in batches:
            p = b.part
            self.acc.completed(b)
            self.inflight.discard(b)
            if b.done:
                continue
            if err is not None:
                if err.code() in NEVER_SENT and err.retriable():
                    # Never written (it timed out in the connection's queue): the attempt
                    # did not happen, and a batch never written is not in the log
                    # (renumbered, not failed, by an epoch bump). A lost answer or one
                    # timed out in flight may have appended it.
                    b.attempts -= 1
                    self._retry_or_fail(b, err, now,
                                        refused=b.attempts == 0 or b in self.refused)
                else:
                    self._retry_or_fail(b, err, now)
                continue
            pr = by_tp.get((p.topic.name, p.index))
            if pr is None:
                # The answer says nothing of this batch, as if it were lost. Idempotent:
                # sent again with its sequence (a copy in the log is answered
                # DUPLICATE_SEQUENCE_NUMBER, delivered once). Else failed: sent again, it
                # could be written twice.
                self._retry_or_fail(b, KafkaError(KafkaError._BAD_MSG,
                                                  "partition missing from Produce answer",
                                                  retriable=self.idempotent),
                                    now)
                continue
            code = broker_code(pr.error_code)
            if code == ErrorCode.NONE:
                self._deliver(b, None, pr.base_offset, getattr(pr, "log_append_time_ms", -1),
                              PERSISTED)
                continue
            if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER and self.idempotent:
                self._deliver(b, None, -1, -1, PERSISTED)
                continue
            msg = getattr(pr, "error_message", None)
            error = client_error(code, f"{p.topic.name}[{p.index}]: {KafkaError(code).name()}"
                                 + (f": {msg}" if msg else ""))
            moved = False
            if code in REFRESH_ERRORS:
                self.cluster.metadata.mark_stale(p.topic.name)
                current = getattr(pr, "current_leader", None)
                leader = getattr(current, "leader_id", -1)
                if current is not None and leader is not None and leader >= 0 \
                        and leader != p.leader:
                    self.acc.move_leader(p, leader)
                    # Resent at once when the leader is newer than what the metadata
                    # knew (an answer naming an old one waits out the backoff: no
                    # ping-pong between brokers that disagree).
                    moved = self.cluster.metadata.learn_leader(
                        p.topic.name, p.index, leader, current.leader_epoch)
            if self.idempotent and self._sequence_error(b, code, error, now):
                continue
            self._retry_or_fail(b, error, now, refused=code in _REFUSALS and (
                b.attempts == 1 or b in self.refused), at_once=moved)

    def _sequence_error(self, b: Batch, code: int, error: KafkaError, now: float) -> bool:
        """The idempotence errors (librdkafka's handling, KIP-360); False for the
        others."""
        txn = self.txn
        if txn is not None and code in _FENCING:
            p = b.part
            txn.fatal_error(fenced_error(code, f"Produce to {p.topic.name}[{p.index}]"))
            self._deliver(b, self.idem.fatal, -1, -1, NOT_PERSISTED)
            return True
        if code == ErrorCode.UNKNOWN_PRODUCER_ID:
            if txn is not None:
                # The transaction fails (abortable); its abort bumps the epoch.
                self._deliver(b, error, -1, -1, NOT_PERSISTED)
                return True
            if b.attempts == 1 or b in self.refused:
                # The broker forgot the producer (its records were deleted) and never had
                # this batch: bump the epoch and send it again, renumbered.
                self.log.info("%s: %s: bumping the epoch and resending", b, error.str())
                self.idem.request_bump("unknown producer id")
                self._refused(b, error, now)
                return True
            self._fail_fatally(b, error, "the batch was sent before and may be in the log: "
                                         "sending it again could duplicate it")
            return True
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            if self.acc.earlier_retry(b) or self._earlier_in_flight(b):
                # Caused by an earlier batch not yet acknowledged, waiting to be resent or
                # in flight (to another broker, after a leader change): it fills the gap
                # first (librdkafka's and the Java client's rule: only an error for the
                # batch right after the last acknowledged one says the broker lost data).
                self._refused(b, error, now)
                return True
            if self.unappended.pop(b.part, None) is not None:
                # Behind batches the ACLs refused (granted since): the gap they leave is
                # closed by an epoch bump, as any other
                self.idem.request_bump("a sequence gap behind refused batches")
            if self.idem.bump_wanted:
                # Caused by an earlier batch that failed under this epoch: the bump
                # renumbers this one (a transaction fails and is bumped when aborted).
                if txn is None:
                    self._refused(b, error, now)
                else:
                    self._deliver(b, error, -1, -1, NOT_PERSISTED)
                return True
            self._fail_fatally(b, error, "the broker's sequence for this partition is not "
                                         "the producer's (it lost acknowledged messages?)")
            return True
        return False

    def _earlier_in_flight(self, b: Batch) -> bool:
        """Whether an earlier batch of ``b``'s partition, numbered under the same
        producer id and epoch, is in flight (only asked after a sequence error)."""
        return any(o.part is b.part and o.seq < b.seq and o.pid == b.pid
                   and o.epoch == b.epoch for o in self.inflight)

    def _fail_fatally(self, b: Batch, error: KafkaError, why: str) -> None:
        """``error`` for ``b`` breaks the guarantee: the producer stops, ``b`` fails."""
        self._fatal(KafkaError(error.code(), f"{error.str()}: {why}", fatal=True))
        self._deliver(b, self.idem.fatal, -1, -1, POSSIBLY_PERSISTED)

    def _refused(self, b: Batch, error: KafkaError, now: float) -> None:
        """The broker refused ``b`` without appending it: it waits in its place to be
        sent again (after the earlier batches, or the epoch bump)."""
        b.last_error = error
        self.refused.add(b)
        self._requeue(b, now)

    def _retry_or_fail(self, b: Batch, err: KafkaError, now: float,
                       refused: bool = False, at_once: bool = False) -> None:
        """Send ``b`` again if ``err`` is retriable and retries and time allow, else fail
        it. ``refused``: the broker refused every attempt (``b`` is not in the log);
        ``at_once``: without the retry backoff (the answer named the new leader,
        KIP-951, as the Java client does)."""
        if b.done:
            return
        if err.retriable() and b.attempts <= self.retries and now < b.deadline:
            self.log.info("%s: retrying after %s (attempt %d)", b, err.str(), b.attempts)
            b.last_error = err
            if refused:
                self.refused.add(b)
            else:
                self.refused.discard(b)   # it may have been appended this time
            self._requeue(b, now, at_once)
            return
        if err.retriable() and now >= b.deadline:
            err = message_timed_out(f"last error: {err.str()}")
        self._deliver(b, err, -1, -1, POSSIBLY_PERSISTED if b.sent else NOT_PERSISTED)

    def _requeue(self, b: Batch, now: float, at_once: bool = False) -> None:
        """Back to the accumulator, to be resent after the retry backoff (doubling per
        attempt up to retry.backoff.max.ms); failed instead when its transaction is
        being aborted or must be (nothing of it will be sent, and a commit or abort
        waiting for the producer to drain must not wait for it)."""
        txn = self.txn
        if txn is not None and not txn.sending:
            self._deliver(b, KafkaError(KafkaError._PURGE_QUEUE, "purged: the transaction "
                                        "is aborted or must be"), -1, -1,
                          POSSIBLY_PERSISTED if b.sent else NOT_PERSISTED)
            return
        delay = 0.0 if at_once else min(self.backoff * (2 ** max(b.attempts - 1, 0)),
                                        self.backoff_max)
        retry_at = now + delay
        gone = self.acc.requeue(b, retry_at)
        if gone is not None:      # its partition no longer exists
            self._deliver(b, gone, -1, -1, POSSIBLY_PERSISTED if b.sent else NOT_PERSISTED)
            return
        self._requeued_at = _earliest(self._requeued_at, retry_at)

    def _deliver(self, b: Batch, err: Optional[KafkaError], base_offset: int,
                 append_time: int, status: int) -> None:
        if b.done:
            return
        b.done = True
        every_attempt_refused = b.attempts <= 1 or b in self.refused
        self.refused.discard(b)
        if err is None:
            self.tx_msgs += b.count
            tx = self.partition_tx.get((b.part.topic.name, b.part.index))
            if tx is None:
                tx = self.partition_tx[(b.part.topic.name, b.part.index)] = [0, 0]
            tx[0] += b.count
            tx[1] += b.nbytes or 0
        self.report(Report(b, err, base_offset, append_time, status, None,
                           b.part.topic.name))
        if err is not None:
            if self.txn is not None:
                self.txn.delivery_failed(b.count)
            idem = self.idem
            if self.idempotent and b.base_sequence >= 0 and idem.fatal is None \
                    and b.pid == idem.producer_id and b.epoch == idem.epoch \
                    and self.acc.gone(b.part) is None:   # no gap in a partition gone
                # (enable.gapless.guarantee is about the messages: a refused batch is a
                # gap in them all the same)
                if self.txn is None and every_attempt_refused and not idem.gapless \
                        and err.code() in _NEVER_APPENDED and self._unappended(b):
                    return
                self.unappended.pop(b.part, None)     # the bump renumbers everything
                self._sequence_gap(b, err)

    def _unappended(self, b: Batch) -> bool:
        """``b`` failed and is not in the log (refused on every attempt by the ACLs): no
        gap when its partition's next batch can take its sequence, at once if no later
        batch is numbered, else once those fail so too (True). False when it does not
        follow the partition's earlier such failures: a gap. (An epoch bump per refused
        batch made one InitProducerId per Produce of a topic the ACLs refuse, each a new
        producer id on Kafka's brokers.)"""
        p = b.part
        start = b.base_sequence
        end = (start + b.count) & 0x7FFFFFFF
        hole = self.unappended.get(p)
        if hole is not None:
            if hole[1] != start:
                return False
            start = hole[0]
        if self.acc.rewind_sequence(p, start, end):
            self.unappended.pop(p, None)
        else:
            # Later batches are numbered: refused too, they close the hole; any other
            # outcome of theirs (out of order, a failure) bumps the epoch.
            self.unappended[p] = (start, end)
        return True

    def _sequence_gap(self, b: Batch, err: KafkaError) -> None:
        """``b`` had its sequence number and failed: the partition's sequence has a gap
        that the broker would answer with OUT_OF_ORDER_SEQUENCE_NUMBER. The epoch is
        bumped once nothing is in flight (a transaction must be aborted first), or,
        with ``enable.gapless.guarantee``, the producer stops."""
        if self.idem.gapless and self.txn is None:
            self._fatal(KafkaError(KafkaError._GAPLESS_GUARANTEE,
                                   f"{b} failed ({err.str()}): unable to satisfy the "
                                   f"gap-less guarantee", fatal=True))
            return
        self.idem.request_bump(f"{b} failed: {err.str()}")
        if self.txn is not None:
            if err.code() == KafkaError._MSG_TIMED_OUT:
                # librdkafka's words for the transaction's error (confluent-kafka 2.16.1:
                # commit_transaction() raises _TIMED_OUT, abortable), the reports keep
                # _MSG_TIMED_OUT
                err = client_error(KafkaError._TIMED_OUT, f"{b.count} message(s) timed out "
                                   f"on {b.part.topic.name} [{b.part.index}]")
            self.txn.abortable_error(err, bump=True)

    def _report_unplaced(self, unplaced: Unplaced) -> None:
        if self.txn is not None:
            self.txn.delivery_failed(len(unplaced.messages))
        self.report(Report(None, unplaced.error, -1, -1, NOT_PERSISTED, unplaced.messages,
                           unplaced.topic))

    def _fatal(self, err: KafkaError) -> None:
        if self.txn is not None:
            self.txn.fatal_error(err)    # its state, then fatal() below
        else:
            self.fatal(self.idem.set_fatal(err))

    def fatal(self, fatal: KafkaError) -> None:
        """The producer stops: ``fatal`` (a fatal KafkaError) is latched and reported
        (raised once by the poll()/flush() that serves it); what is queued fails with
        _PURGE_QUEUE, as librdkafka purges it, and what is in flight with ``fatal``."""
        latched = self.idem.set_fatal(fatal, wrap=False)
        self.acc.refuse_produce(lambda: fatal_produce_error(latched))
        self.cluster.report_error(fatal)
        self.purge(client_error(KafkaError._PURGE_QUEUE, f"purged: {fatal.str()}"), fatal,
                   include_in_flight=True)

    # -- time ----------------------------------------------------------------------------
    def _expire(self, now: float) -> None:
        """Fail what waited longer than message.timeout.ms without being in flight, and
        messages of topics that do not exist."""
        removed = self.acc.expire(now)
        for unplaced in removed.unplaced:
            self._report_unplaced(unplaced)
        self._report_vanished(removed.vanished)
        for b in removed.batches:
            self._deliver(b, message_timed_out(), -1, -1,
                          POSSIBLY_PERSISTED if b.sent else NOT_PERSISTED)

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
        version = conn.version_for(ApiKey.INIT_PRODUCER_ID)
        if version is None:
            self._fatal(KafkaError(KafkaError._UNSUPPORTED_FEATURE,
                                   "broker does not support InitProducerId (idempotence)"))
            return None
        req = idem.init_request()
        if version < 3:
            req.producer_id, req.producer_epoch = -1, -1
        bump = idem.bump_wanted

        def done(resp: Any, err: Optional[KafkaError]) -> None:
            code = broker_code(resp.error_code) if err is None else None
            if code in _INIT_REFUSALS:
                # Fatal, as librdkafka and the Java client make it: retried, the
                # messages waited for message.timeout.ms and nothing told why.
                idem.init_in_flight = False
                self._fatal(client_error(code, "failed to acquire a producer id: the "
                                         "broker's authorizer refused InitProducerId"))
                return
            if idem.on_init(resp, err, time.monotonic(), self.backoff) and bump:
                # New epoch: every partition's sequence restarts at 0, queued batches
                # that were already numbered get renumbered in order.
                self.restart_sequences()

        idem.init_in_flight = True
        conn.send(req, done, version=version)
        return None

    def restart_sequences(self) -> None:
        """New epoch: the accumulator restarts every partition's sequence at 0.

        A batch the broker refused on every attempt is not in the log: it keeps its
        place and is numbered again, as if never sent. A batch sent under the old epoch
        that waits to be resent for another reason (its answer was lost) may be in the
        log already: under the new epoch, with a new sequence, the broker could not
        recognise it and would append it again. So it fails instead, as
        POSSIBLY_PERSISTED, with the error that made it wait (nothing is in flight
        here: the bump waited for that)."""
        for b in self.refused:
            b.sent = False
            b.base_sequence = -1
            b.attempts = 0
            b.pid = -1        # stamped again when it goes out
        self.refused.clear()
        self.unappended.clear()
        for b in self.acc.restart_sequences():
            cause = b.last_error
            self._deliver(b, KafkaError(
                cause.code() if cause is not None else KafkaError._MSG_TIMED_OUT,
                "not resent after the producer epoch was bumped: it may be in the log "
                "already" + (f" ({cause.str()})" if cause is not None else "")),
                -1, -1, POSSIBLY_PERSISTED)

    # -- purge ---------------------------------------------------------------------------
    def purge_queued(self, error: KafkaError) -> None:
        """Fail everything queued (not what is in flight) with ``error``: a transaction
        is aborted."""
        self.purge(error, None, include_in_flight=False)

    def purge(self, queue_err: Optional[KafkaError], inflight_err: Optional[KafkaError],
              include_in_flight: bool) -> None:
        """Fail queued messages with ``queue_err`` (if given); with ``include_in_flight``
        mark in-flight batches failed with ``inflight_err`` (late answers are ignored)."""
        if queue_err is not None:
            removed = self.acc.purge(queue_err)
            for b in removed.batches:
                self._deliver(b, queue_err, -1, -1,
                              POSSIBLY_PERSISTED if b.sent else NOT_PERSISTED)
            for unplaced in removed.unplaced:
                self._report_unplaced(unplaced)
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
