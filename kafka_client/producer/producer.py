"""``Producer``: confluent-kafka's producer API on our own I/O thread and codec.

    from kafka_client import Producer

    with Producer({"bootstrap.servers": "localhost:9092"}) as p:
        p.produce("topic", b"value", key=b"key", on_delivery=report)
        p.poll(0)
    # leaving the block flushes

``produce()`` encodes the message into its partition's batch and returns; the I/O
thread sends batches and queues delivery reports, which ``poll()`` and ``flush()`` hand
to the callbacks on the calling thread, as librdkafka does.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
)

from kafka_client._cluster.cluster import Cluster
from kafka_client._common import ClientBase, deadline_after
from kafka_client._net.io_thread import IOThread
from kafka_client._stats import empty_window, partition_stats, topic_stats
from kafka_client.errors import KafkaError, KafkaException
from kafka_client.producer._core import Batch, DeliveryRange, not_callable
from kafka_client.producer.accumulator import Accumulator
from kafka_client.producer.idempotence import Idempotence
from kafka_client.producer.sender import Report, Sender
from kafka_client.producer.transactions import TransactionManager, TxnState
from kafka_client.types import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Message,
    TopicPartition,
)

__all__ = ["Producer", "DeliveredMessage", "PURGE_QUEUE", "PURGE_INFLIGHT",
           "PURGE_NON_BLOCKING"]

# purge() flags, as librdkafka's RD_KAFKA_PURGE_F_*
PURGE_QUEUE = 1
PURGE_INFLIGHT = 2
PURGE_NON_BLOCKING = 4


class DeliveredMessage(Message):
    """A delivery-report message: a :class:`~kafka_client.types.Message` plus the
    persistence status librdkafka reports (``status()``: 0 NOT_PERSISTED,
    1 POSSIBLY_PERSISTED, 2 PERSISTED). Made once per reported message, so its
    constructor stores what the producer gives it without Message's checks."""

    __slots__ = ("_status",)

    def __init__(self, topic: str, partition: Optional[int], offset: Optional[int], key: Any,
                 value: Any, headers: Any, error: Optional[KafkaError],
                 timestamp: Tuple[int, int], latency: Optional[float], status: int) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = headers
        self._error = error
        self._timestamp = timestamp
        self._latency = latency
        self._leader_epoch = None
        self._delivery_count = None
        self._delivery_tag = None
        self._status = status

    def status(self) -> int:
        return self._status

    def __reduce__(self) -> Any:
        return (DeliveredMessage, (self._topic, self._partition, self._offset, self._key,
                                   self._value, self._headers, self._error, self._timestamp,
                                   self._latency, self._status))


#: ``on_delivery(err, msg)``: err None when delivered; msg a DeliveredMessage (status()).
OnDelivery = Callable[[Optional[KafkaError], DeliveredMessage], Any]


class _Unserved(NamedTuple):
    """The delivery callbacks of ``report`` from its ``start``-th message on (the
    position in the batch, or in the list of messages that never had one), left over
    when an earlier one raised (its bookkeeping is done: they only wait to be called)."""

    report: Report
    start: int


class Producer(ClientBase):
    """A Kafka producer configured with librdkafka property names.

    ``Producer(config)``; ``config`` may also be given as keyword arguments with
    underscores or as a dict plus keyword overrides. Invalid configuration raises
    :class:`KafkaException` (``_INVALID_ARG``) naming the property.
    """

    _role = "producer"
    _work = "delivered"
    _closed_text = "Producer has been closed"
    _connects_at_start = True

    def __init__(self, config: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        cfg = self._init_client(config, kwargs)
        #: close() is under way: the calls of other threads are refused as once closed
        self._closing = False
        self._reports: Deque[Any] = deque()  # Report, or _Unserved first
        self._report_event = threading.Event()
        # What the I/O thread calls back holds the parts it needs, never the Producer
        # itself: an unclosed producer the application drops is then garbage (__del__
        # stops the thread) instead of living on with its thread and sockets.
        #: [listener]: called on the I/O thread after each report is queued (see
        #: _set_report_listener)
        self._report_listener: List[Optional[Callable[[], None]]] = [None]
        wake_for, want_topic, on_report = _io_callbacks(
            self._io, self._cluster, self._reports, self._report_event,
            self._report_listener)
        self._acc = Accumulator(cfg, wake_for, want_topic,
                                self._cluster.metadata.known_leaders)
        self._idem = Idempotence(cfg)
        self._txn = (TransactionManager(cfg, self._io, self._cluster, self._idem, self._acc)
                     if cfg["transactional.id"] is not None else None)
        self._sender = Sender(cfg, self._acc, self._cluster, self._idem, on_report,
                              self._txn)
        self._io.add_tick(self._sender.tick)
        transactional_id = cfg["transactional.id"]
        self._cluster.start_telemetry(
            "producer", self._io.name, [self._sender.telemetry_samples],
            lambda: {"transactional_id": transactional_id}, overall_latency=True)
        self._report_only_error = cfg["delivery.report.only.error"]
        self._acc.io_check = self._io.let_run
        # Hot path: produce is the accumulator's method, no extra call per message (what
        # may refuse it, a fatal error or the transaction's state, is one field it tests:
        # Accumulator.refuse_produce). (Checkers take produce() as the method below says.)
        # Not for a subclass that overrides produce(): bound here, the accumulator's
        # method hid the override, which then never ran.
        if type(self).produce is Producer.produce:
            self.produce = self._acc.produce  # type: ignore[method-assign]
        self._start_client()

    # -- the API -------------------------------------------------------------------------
    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: Optional[OnDelivery] = None, timestamp: int = 0,
                headers: Any = None, *, callback: Optional[OnDelivery] = None) -> None:
        """Queue one message: encoded into its partition's batch at once.

        ``value``/``key``: bytes, str (UTF-8 encoded) or None. ``partition`` -1 lets the
        ``partitioner`` choose. ``on_delivery(err, msg)`` (alias ``callback``) runs from
        :meth:`poll`/:meth:`flush` once the message is delivered or failed.
        ``timestamp``: milliseconds since the epoch, 0 = now. ``headers``: dict or list of
        ``(str, bytes|str|None)`` tuples (a key not a str is sent as ``str(key)``, as
        confluent-kafka does). Raises ``BufferError`` when
        ``queue.buffering.max.messages``/``kbytes`` is reached (call :meth:`poll`) and
        :class:`KafkaException` for a message over ``message.max.bytes``
        (MSG_SIZE_TOO_LARGE) or a partition that does not exist (_UNKNOWN_PARTITION).
        """
        # Replaced per instance in __init__; kept for documentation and subclasses.
        self._check_open()
        self._acc.produce(topic, value, key, partition, on_delivery, timestamp, headers,
                          callback=callback)

    def produce_batch(self, topic: str, values: Sequence[Any],
                      keys: Optional[Sequence[Any]] = None, partition: Any = -1,
                      on_delivery: Optional[OnDelivery] = None, timestamp: int = 0, *,
                      callback: Optional[OnDelivery] = None) -> int:
        """Queue many messages in one call; returns how many were queued. Two forms:

        ``produce_batch(topic, values, keys=None, partition=-1, on_delivery=None,
        timestamp=0)``, the columnar form: ``values`` (and ``keys``, of the same length)
        are bytes, str (UTF-8 encoded) or None, or each a pyarrow binary or string array
        (``Array`` or ``ChunkedArray``; nulls are None), whose buffers are encoded in
        place with no Python object per message. All are queued or none: TypeError,
        ValueError, KafkaException (``MSG_SIZE_TOO_LARGE``, ``_UNKNOWN_PARTITION``,
        ``_INVALID_ARG``) or ``BufferError`` (they do not all fit) before any is queued.
        For a topic whose partitions are known they are encoded in bulk; each gets a
        delivery report through ``on_delivery`` (or the ``on_delivery`` property) as
        with :meth:`produce`.

        ``produce_batch(topic, messages, partition=-1, on_delivery=None)``,
        confluent-kafka's form: ``messages`` is a list of dicts with ``value``, ``key``,
        ``partition``, ``timestamp``, ``callback`` and ``headers`` (each optional; other
        keys are ignored, as there). A malformed message raises before any is queued, as
        confluent-kafka's does and naming its index: TypeError, ValueError for its
        headers. A message that cannot be queued gets its KafkaError under ``"_error"`` in
        its dict (``_QUEUE_FULL`` for it and those after it when the producer is full;
        the refusal for all of them outside a transaction or after a fatal error; a
        partition out of range, ``_INVALID_ARG``; ``_APPLICATION`` when
        ``partitioner_cb`` raised for it) and the others are queued.

        In both forms ``callback`` wins over ``on_delivery`` when both are given, as in
        confluent-kafka."""
        self._check_open()
        self._refuse_while_closing()
        dict_form = isinstance(values, list) and len(values) > 0 and \
            isinstance(values[0], dict)
        if dict_form and keys is not None:
            # confluent-kafka's positional order: (topic, messages, partition, callback);
            # keys have no place in this form.
            if isinstance(keys, (list, tuple)):
                raise TypeError("keys are for the columnar form: in a list of message "
                                "dicts, each dict has its own 'key'")
            if partition != -1:
                if callback is not None:
                    raise TypeError("callback given twice")
                callback = partition
            partition = keys
        if callback is not None:   # wins over on_delivery, as in confluent-kafka
            if not callable(callback):
                raise not_callable("callback", callback)
            on_delivery = callback
        if dict_form:
            if type(values) is not list:   # a subclass: a copy holds the caller's dicts
                values = list(values)
            queued = self._acc.produce_messages(topic, values, partition, on_delivery,
                                                timestamp)
        else:
            self._acc.check_refusal()
            queued = self._acc.produce_batch(topic, values, keys, partition, on_delivery,
                                             timestamp)
        self._io.let_run()   # as produce() does: the I/O thread may be waiting for the GIL
        return queued

    def poll(self, timeout: Optional[float] = None) -> int:
        """Serve delivery reports (and error/stats callbacks), waiting up to ``timeout``
        seconds (None or -1: until one arrives) for the first. Returns the number of
        events served, counted as librdkafka does: a delivery report event per batch of
        messages (not per message), and one per error or statistics callback."""
        if self._closed:
            self._refuse()
        deadline = deadline_after(timeout)  # TypeError before anything is served
        n = self._serve()
        if n or timeout == 0:
            return n
        ev = self._report_event
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._serve()
            # Short slices: Ctrl-C gets through, stats and errors keep flowing.
            ev.wait(min(remaining, 0.2))
            if self._closed:   # by another thread meanwhile
                return 0
            n = self._serve()
            if n:
                return n

    def flush(self, timeout: Optional[float] = None) -> int:
        """Send everything now (linger cut short), wait up to ``timeout`` seconds (None:
        no limit) until every message got its delivery report; returns how many are still
        in the producer (0 = all delivered)."""
        self._check_open()
        deadline = deadline_after(timeout)
        acc = self._acc
        with self._flushing():
            while True:
                if self._closed:  # by another thread: these will never be delivered
                    return acc.msg_count
                self._serve()
                if acc.msg_count <= 0:
                    return 0
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return acc.msg_count
                self._report_event.wait(min(remaining, 0.1))

    @contextlib.contextmanager
    def _flushing(self) -> Iterator[None]:
        """While inside, batches go out at once instead of waiting for ``linger.ms``
        (what flush() does while it waits; the asyncio producer's flush too)."""
        acc = self._acc
        with acc.lock:  # other threads may flush at the same time
            acc.flushing += 1
        self._io.wake()
        try:
            yield
        finally:
            with acc.lock:
                acc.flushing -= 1

    def purge(self, in_queue: bool = True, in_flight: bool = True,
              blocking: bool = True) -> None:
        """Fail queued messages (``_PURGE_QUEUE``) and/or those in flight
        (``_PURGE_INFLIGHT``); their reports come from the next :meth:`poll`/:meth:`flush`.
        Late answers to purged requests are ignored."""
        self._check_open()
        done = threading.Event()

        def run() -> None:
            try:
                self._sender.purge(
                    KafkaError(KafkaError._PURGE_QUEUE) if in_queue else None,
                    KafkaError(KafkaError._PURGE_INFLIGHT) if in_flight else None,
                    in_flight)
            finally:
                done.set()

        self._io.call_soon(run)
        if blocking:
            deadline = time.monotonic() + 30
            # Never past the I/O thread's life: it is what sets ``done``.
            while not self._cluster.wait_for(done, min(deadline, time.monotonic() + 0.5)):
                if not self._io.alive or time.monotonic() >= deadline:
                    break

    def __len__(self) -> int:
        """Messages in the producer: queued, in flight, or waiting for poll() to serve
        their delivery report (0 once closed)."""
        if self._closed:
            if self._forked:
                self._refuse()
            return 0
        return self._acc.msg_count

    def __bool__(self) -> bool:
        """Always true (``if producer:`` must not depend on the queue being empty)."""
        return True

    def close(self, timeout: Optional[float] = None) -> bool:
        """Flush (up to ``timeout`` s; None: no limit), then stop the I/O thread and close
        the connections; returns True, as confluent-kafka's ``close()``. A delivery
        callback that raises meanwhile does not stop it: the others still run (until the
        timeout), the producer closes, and then the first exception is raised. Calling it
        again does nothing."""
        if self._closed:
            if self._forked:
                self._refuse()
            return True
        deadline = deadline_after(timeout)
        gate = self._gate
        if not gate.begin_close(lambda: self._closed, deadline):
            return True     # another thread's close() closed it (or this thread's runs)
        failure: Optional[BaseException] = None
        # From here the producing and transactional calls of other threads are refused as
        # once closed (RuntimeError), as confluent-kafka's close() refuses them from its
        # start: they kept the flush going (a thread producing in a loop filled the queue
        # until BufferError) and met the abort's _STATE.
        self._closing = True
        self.produce = self._produce_while_closing  # type: ignore[method-assign]
        try:
            if self._txn is not None:
                try:
                    self._txn.end_for_close(deadline, self.flush)
                except Exception as exc:  # a delivery callback raised in the abort's flush
                    failure = exc
            while True:
                try:
                    self.flush(max(0.0, deadline - time.monotonic()))
                    break
                except Exception as exc:  # a delivery callback raised
                    if failure is None:
                        failure = exc
                    if time.monotonic() >= deadline:
                        break
            # Every callback has returned once close() has, as confluent-kafka's close()
            # waits for the calls under way.
            gate.wait_for_others(deadline)
        finally:
            try:
                self._shutdown()
            finally:
                gate.end_close()    # after: a close() waiting for this one finds it closed
        if failure is not None:
            raise failure
        return True

    def _refuse_while_closing(self) -> None:
        """RuntimeError for a thread other than one in close() while close() runs (a
        delivery callback close() runs may still produce: flushed with the rest)."""
        if self._closing and not self._gate.closing_here():
            raise RuntimeError(self._closed_text)

    def _produce_while_closing(self, *args: Any, **kwargs: Any) -> None:
        # produce() while close() runs (an attribute of the instance only then)
        self._refuse_while_closing()
        type(self).produce(self, *args, **kwargs)

    def _on_shutdown(self) -> None:
        self.produce = _closed_produce  # type: ignore[method-assign]
        self._report_event.set()  # a flush() of another thread returns
        left = self._acc.msg_count
        if left > 0:
            # librdkafka's words; logged once, through the client's logger (stderr
            # by default, by logging's last-resort handler)
            self._log.warning(
                "Producer terminating with %d messages (%d bytes) still in queue or "
                "transit: use flush() to wait for outstanding message delivery",
                left, self._acc.queued_bytes())

    def _at_exit(self) -> None:
        # the warning above, the connections closed, then the serdes a SerializingProducer
        # built (nothing to do before stopping: an unclosed producer does not flush)
        self._stop_unclosed()

    def _on_fork(self) -> None:
        super()._on_fork()
        self.produce = self._refused_produce  # type: ignore[method-assign]

    def _refused_produce(self, *args: Any, **kwargs: Any) -> None:
        self._refuse()

    # -- transactions (kafka_client/producer/transactions.py) ------------------------------
    def init_transactions(self, timeout: Optional[float] = None) -> None:
        """Initialize the transactional producer: find the transaction coordinator of
        ``transactional.id`` and get the producer id and epoch, which fences older
        instances with the same id and completes (aborts) what they left open. Call once,
        before any other transactional call. ``timeout`` in seconds (None or -1: twice
        ``transaction.timeout.ms``); on a retriable error (``_TIMED_OUT``) the work goes
        on in the background and calling again resumes it. Raises
        :class:`KafkaException` (``_NOT_CONFIGURED`` without ``transactional.id``,
        ``_STATE`` when already initialized, a fatal error when fenced)."""
        self._transactions("init_transactions").init_transactions(timeout)

    def begin_transaction(self) -> None:
        """Start a transaction: from here to commit or abort, ``produce()`` is allowed and
        its messages belong to the transaction. Raises :class:`KafkaException`
        (``_STATE`` outside the Ready state: before ``init_transactions()``, or with a
        transaction already open)."""
        self._transactions("begin_transaction").begin_transaction()

    def send_offsets_to_transaction(self, offsets: List[TopicPartition],
                                    group_metadata: Any,
                                    timeout: Optional[float] = None) -> None:
        """Commit a consumer's ``offsets`` (the next offsets to read: last processed + 1)
        as part of the transaction, for ``group_metadata`` (the consumer's
        ``consumer_group_metadata()``): they count only if the transaction commits.
        Offsets below 0 are skipped. ``timeout`` in seconds, at most (and by default)
        ``transaction.timeout.ms``. Raises :class:`KafkaException`: retriable,
        ``txn_requires_abort()`` (abort and go on) or fatal; TypeError for arguments of
        the wrong type."""
        self._transactions("send_offsets_to_transaction").send_offsets_to_transaction(
            offsets, group_metadata, timeout)

    def commit_transaction(self, timeout: Optional[float] = None) -> None:
        """Flush every message of the transaction, then commit it. ``timeout`` in seconds
        (None or -1: no limit); a retriable error (``_TIMED_OUT``) means call again to
        resume; ``txn_requires_abort()`` means a message or request failed: call
        :meth:`abort_transaction`; ``fatal()``: the producer is fenced or unusable."""
        self._transactions("commit_transaction").commit_transaction(timeout, self.flush)

    def abort_transaction(self, timeout: Optional[float] = None) -> None:
        """Abort the transaction: queued messages fail with ``_PURGE_QUEUE``, those in
        flight are waited for, then the coordinator aborts it (``read_committed``
        consumers never see its messages). Also the way out of an abortable error.
        ``timeout`` as for :meth:`commit_transaction`."""
        self._transactions("abort_transaction").abort_transaction(timeout, self.flush)

    def _transactions(self, api: str) -> TransactionManager:
        self._check_open()     # closed comes first, as confluent-kafka's (no transactional.id)
        if self._txn is None:
            raise KafkaException(KafkaError(
                KafkaError._NOT_CONFIGURED,
                f"{api}(): the transactional API requires transactional.id to be "
                f"configured"))
        self._refuse_while_closing()
        return self._txn

    # -- reports -------------------------------------------------------------------------
    def _set_report_listener(self, listener: Optional[Callable[[], None]]) -> None:
        """Have ``listener()`` called on the I/O thread each time a delivery report is
        queued for poll()/flush() (the asyncio producer wakes its event loop so). It must
        be quick, must not raise, and must not refer to this Producer."""
        self._report_listener[0] = listener

    def _serve(self) -> int:
        served = 0
        reports = self._reports
        # Cleared before looking, every time: the I/O thread appends a report and then
        # sets the event, so a report taken between those two steps left it set with
        # nothing to serve, and poll()/flush() spun on it (a busy loop that also starved
        # the I/O thread of the GIL: seen as ~1 s stalls at 100% CPU).
        self._report_event.clear()
        if reports:
            with self._gate:  # counted from before it takes a report: close() waits
                served = self._serve_reports(reports)
        return served + self._serve_client_events()

    def _serve_reports(self, reports: Deque[Any]) -> int:
        """Run the delivery callbacks of the queued reports. Each report's messages leave
        the producer (``len()``, queue room) before its callbacks run, so a callback that
        raises loses nothing: the exception goes to the caller of poll()/flush(), and the
        callbacks not run yet stay first in the queue for the next call. Returns the
        number of reports served: one per batch (or per group of messages that failed
        before being batched), as librdkafka counts its delivery report events."""
        served = 0
        acc = self._acc
        only_err = self._report_only_error
        while True:
            try:
                r = reports.popleft()  # other threads may serve too: one pop each
            except IndexError:
                return served
            served += 1
            if type(r) is _Unserved:
                self._run_callbacks(r.report, r.start)
                continue
            batch = r.batch
            if batch is not None:
                acc.reported(batch.count, batch.counted)
                if batch.cbs and not (only_err and r.error is None):
                    self._run_callbacks(r, 0)
            else:
                acc.reported(len(r.messages), sum(pm.size for pm in r.messages))
                self._run_callbacks(r, 0)

    def _run_callbacks(self, r: Report, start: int) -> None:
        """The delivery callbacks of one report, from its ``start``-th message on. If one
        raises, the rest are queued first for the next poll()/flush() and the exception
        goes on to the caller."""
        if r.batch is not None:
            self._call_batch(r, r.batch, start)
        else:
            self._call_unplaced(r, start)

    def _call_batch(self, r: Report, batch: Batch, start: int) -> None:
        """The callbacks of a batch's messages (``r.batch``) from its ``start``-th message
        on."""
        cbs = batch.cbs
        assert cbs is not None    # called for a batch with callbacks only
        topic, err, base, status = r.topic, r.error, r.base_offset, r.status
        partition = batch.part.index
        latency = time.monotonic() - batch.created
        if r.append_time is not None and r.append_time >= 0:
            tstamp = (TIMESTAMP_LOG_APPEND_TIME, r.append_time)
        else:
            tstamp = None
        wall = batch.wall_ms
        # No offset from the broker (a failure, or acks=0): None, as confluent-kafka's.
        i = start
        try:
            for d in cbs:
                if type(d) is DeliveryRange:
                    first = d.index
                    if first + d.count <= start:
                        continue
                    values, keys, cb = d.values, d.keys, d.callback
                    ts = tstamp or (TIMESTAMP_CREATE_TIME, d.timestamp or wall)
                    for j in range(max(start - first, 0), d.count):
                        i = first + j
                        m = DeliveredMessage(topic, partition,
                                             base + i if base >= 0 else None,
                                             None if keys is None else keys[j], values[j],
                                             None, err, ts, latency, status)
                        _call(cb, err, m)
                    continue
                i = d.index
                if i < start:
                    continue
                # Messages stamped "now" got the clock of their append: the batch's
                # opening time is within linger.ms of it (no per-message time is kept).
                m = DeliveredMessage(topic, partition,
                                     base + i if base >= 0 else None,
                                     d.key, d.value, d.headers, err,
                                     tstamp or (TIMESTAMP_CREATE_TIME, d.timestamp or wall),
                                     latency, status)
                _call(d.callback, err, m)
        except BaseException:
            self._later(r, i + 1, batch.count)
            raise

    def _call_unplaced(self, r: Report, start: int) -> None:
        messages = r.messages
        assert messages is not None    # a report without a batch is of these
        i = start
        try:
            for i in range(start, len(messages)):
                pm = messages[i]
                if pm.on_delivery is not None:
                    m = DeliveredMessage(r.topic, pm.partition if pm.partition >= 0 else None,
                                         None, pm.key, pm.value, pm.headers, r.error,
                                         (TIMESTAMP_CREATE_TIME, pm.timestamp), None,
                                         r.status)
                    _call(pm.on_delivery, r.error, m)
        except BaseException:
            self._later(r, i + 1, len(messages))
            raise

    def _later(self, r: Report, start: int, end: int) -> None:
        """A callback raised: the callbacks of ``r`` from ``start`` on run first at the
        next poll()/flush()."""
        if start < end:
            self._reports.appendleft(_Unserved(r, start))

    def _stats_toppars(self) -> Dict[int, List[Tuple[str, int]]]:
        out: Dict[int, List[Tuple[str, int]]] = {}
        for name, t in list(self._acc.topics.items()):
            for p in list(t.parts or ()):
                if p.leader >= 0:
                    out.setdefault(p.leader, []).append((name, p.index))
        return out

    def _stats_doc(self) -> Dict[str, Any]:
        """Statistics in librdkafka's JSON shape (every field of librdkafka's producer
        document): the client, its brokers (with the time batches waited in the
        producer and the messages waiting for answers), the message counts, per topic
        its batch sizes and partitions (queued, in flight, acknowledged), and with
        idempotence the producer id's state (``eos``)."""
        doc = super()._stats_doc()
        s = self._sender
        now = time.monotonic()
        metadata = self._cluster.metadata
        inflight: Dict[Any, int] = {}
        for b in list(s.inflight):
            inflight[b.part] = inflight.get(b.part, 0) + b.count
        waiting_by_node: Dict[int, int] = {}
        age_ms = doc["age"] // 1000
        topics = {}
        tx_bytes = 0
        for name, t in list(self._acc.topics.items()):
            info = metadata.topics.get(name)
            partitions = {}
            for p in list(t.parts or ()):
                queued = list(p.ready)
                ready_msgs = sum(b.count for b in queued)
                ready_bytes = sum(b.nbytes or 0 for b in queued)
                open_batch = p.open
                open_msgs = open_batch.count if open_batch is not None else 0
                sent, sent_bytes = s.partition_tx.get((name, p.index), (0, 0))
                tx_bytes += sent_bytes
                flying = inflight.get(p, 0)
                waiting_by_node[p.leader] = waiting_by_node.get(p.leader, 0) + flying
                epochs = info.epochs if info is not None else ()
                partitions[str(p.index)] = partition_stats(
                    partition=p.index, broker=p.leader, leader=p.leader,
                    msgq_cnt=open_msgs + ready_msgs, msgq_bytes=ready_bytes,
                    xmit_msgq_cnt=ready_msgs, xmit_msgq_bytes=ready_bytes,
                    leader_epoch=epochs[p.index] if p.index < len(epochs) else -1,
                    txmsgs=sent, txbytes=sent_bytes,
                    msgs=sent + open_msgs + ready_msgs + flying, msgs_inflight=flying,
                    next_ack_seq=p.next_seq if s.idempotent else 0,
                    next_err_seq=p.next_seq if s.idempotent else 0,
                    # librdkafka tracks it for idempotence only (0 without)
                    acked_msgid=sent if s.idempotent else 0)
            partitions["-1"] = partition_stats(msgq_cnt=len(t.pending),
                                               msgs=len(t.pending))
            windows = s.batch_windows.get(name)
            topics[name] = topic_stats(
                name, age_ms,
                int((now - info.updated) * 1000) if info is not None else age_ms,
                windows[0].roll() if windows else empty_window(),
                windows[1].roll() if windows else empty_window(), partitions)
        for broker in doc["brokers"].values():
            node = broker["nodeid"]
            if broker["name"].endswith("/coordinator"):
                continue
            window = s.int_latency.get(node)
            broker["int_latency"] = window.roll(1e6) if window is not None else empty_window()
            broker["txretries"] = s.retries_by_node.get(node, 0)
            broker["waitresp_msg_cnt"] = waiting_by_node.get(node, 0)
        doc.update({
            "replyq": len(self._reports),
            "msg_cnt": self._acc.msg_count, "msg_size": self._acc.msg_bytes,
            "msg_max": self._acc.max_msgs, "msg_size_max": self._acc.max_bytes,
            "topics": topics, "txmsgs": s.tx_msgs, "txmsg_bytes": tx_bytes,
        })
        if s.idempotent:
            doc["eos"] = self._eos_stats(now)
        return doc

    def _eos_stats(self, now: float) -> Dict[str, Any]:
        """librdkafka's ``eos`` object: the producer id's state and the transaction's."""
        idem, txn = self._idem, self._txn
        if idem.fatal is not None:
            idemp_state = "FatalError"
        elif idem.producer_id >= 0:
            idemp_state = "Assigned"
        elif txn is not None and txn.state == TxnState.INIT:
            idemp_state = "Init"   # a transactional producer asks at init_transactions()
        else:
            idemp_state = "WaitPID" if idem.init_in_flight else "RequestPID"
        return {
            "idemp_state": idemp_state,
            "idemp_stateage": int((now - idem.assigned_at) * 1000),
            "txn_state": txn.state.value if txn is not None else "Init",
            "txn_stateage": int((now - (txn.state_since if txn is not None
                                        else self._started)) * 1000),
            "txn_may_enq": bool(txn is not None and txn.may_produce),
            "producer_id": idem.producer_id, "producer_epoch": idem.epoch,
            "epoch_cnt": idem.assignments,
        }


def _io_callbacks(io: IOThread, cluster: Cluster, reports: Deque[Report],
                  event: threading.Event, listener: List[Optional[Callable[[], None]]]
                  ) -> Tuple[Callable[[float], None], Callable[[str], None],
                             Callable[[Report], None]]:
    """The accumulator's and the sender's ways to reach the I/O thread and the application
    (wake the loop for a deadline, ask for a topic's metadata, queue a delivery report)."""
    def wake_for(deadline: float) -> None:
        if deadline <= 0.0:
            io.wake()
        else:
            io.wake_if_sleeping_past(deadline)

    def want_topic(name: str) -> None:
        io.call_soon(cluster.want_topics, [name])

    def on_report(report: Report) -> None:
        reports.append(report)
        event.set()
        notify = listener[0]
        if notify is not None:
            notify()

    return wake_for, want_topic, on_report


def _closed_produce(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError(Producer._closed_text)


def _call(cb: Callable, err: Optional[KafkaError], msg: Message) -> None:
    cb(err, msg)
