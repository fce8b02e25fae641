"""The asyncio producer: confluent-kafka's ``confluent_kafka.aio.AIOProducer`` API on our
Producer."""
from __future__ import annotations

import asyncio
import concurrent.futures
import time
import weakref
from collections import deque
from typing import Any, Callable, Deque, List, Optional

from kafka_client._common import deadline_after, wait_limit
from kafka_client.aio._bridge import LoopBridge
from kafka_client.errors import KafkaError, KafkaException
from kafka_client.producer.producer import OnDelivery, Producer
from kafka_client.types import Message, TopicPartition

__all__ = ["AIOProducer"]

#: how often the producer looks for client events (errors, statistics) when no
#: delivery report wakes it
_EVENT_INTERVAL_S = 0.1


class _Waker:
    """Wakes the event loop from the I/O thread when delivery reports are queued: one
    ``call_soon_threadsafe`` until the loop has looked, however many reports come."""

    __slots__ = ("loop", "event", "pending", "revive")

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 revive: "weakref.WeakMethod[Callable[[], None]]") -> None:
        self.loop = loop
        self.event = asyncio.Event()
        self.pending = False
        self.revive = revive          # the producer's _revive_pump, weakly

    def __call__(self) -> None:      # I/O thread
        if not self.pending:
            self.pending = True
            try:
                self.loop.call_soon_threadsafe(self._set)
            except RuntimeError:     # the loop is closed: nobody to wake
                pass

    def _set(self) -> None:          # loop thread
        self.pending = False
        revive = self.revive()
        if revive is not None:
            revive()
        self.event.set()


async def _pump(producer_ref: "weakref.ref[AIOProducer]", waker: _Waker) -> None:
    """The task serving an AIOProducer's reports on the loop as the I/O thread says they
    come (and at least every _EVENT_INTERVAL_S). It holds the producer weakly: one the
    application drops without close() is collected (its Producer's own finalizer then
    stops the I/O thread and warns about what was not delivered), and the task ends."""
    while True:
        try:
            await asyncio.wait_for(waker.event.wait(), _EVENT_INTERVAL_S)
        except asyncio.TimeoutError:
            pass
        waker.event.clear()
        producer = producer_ref()
        if producer is None:
            return
        producer._serve()
        del producer


class AIOProducer:
    """A producer for asyncio code: ``await producer.produce(...)`` queues a message and
    returns a future that resolves to the delivered :class:`~kafka_client.Message` (or
    raises :class:`~kafka_client.KafkaException` when the delivery fails).

    Made inside a running event loop. ``producer_conf`` is a :class:`~kafka_client.Producer`
    configuration; ``error_cb``, ``stats_cb`` and ``throttle_cb`` in it may be coroutine
    functions or plain functions, and run on the event loop. The blocking calls (flush,
    transactions, metadata, close) run on ``executor`` (by default a pool of
    ``max_workers`` threads) and are awaited.

    ``produce()`` itself never blocks: the message is encoded into its batch at once, on
    the loop's thread, and the delivery reports are served on the loop as they come (the
    client's I/O thread wakes it). ``batch_size`` and ``buffer_timeout``, which size
    confluent-kafka's local buffer in front of librdkafka, are accepted and have nothing to
    size here (batching is ``linger.ms``, ``batch.size`` and ``batch.num.messages``)."""

    def __init__(self, producer_conf: dict, max_workers: int = 4,
                 executor: Optional[concurrent.futures.Executor] = None,
                 batch_size: int = 1000, buffer_timeout: float = 1.0) -> None:
        if not isinstance(producer_conf, dict):
            raise TypeError(f"producer_conf must be a dict, not "
                            f"{type(producer_conf).__name__}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int of at least 1, not {batch_size!r}")
        if not isinstance(buffer_timeout, (int, float)) or buffer_timeout < 0:
            raise ValueError(f"buffer_timeout must be a number of seconds >= 0, not "
                             f"{buffer_timeout!r}")
        self._bridge = bridge = LoopBridge(max_workers, executor, "AIOProducer")
        self._closed = False
        self._producer = Producer(bridge.wrap_config(producer_conf))
        self._served_total = 0     # reports and events served on the loop so far
        self._pump_task: Optional["asyncio.Task[None]"] = None
        self._bind_loop()

    # -- serving reports on the loop -------------------------------------------------------

    def _serve(self) -> int:
        """Loop thread: run what poll() serves (the futures' delivery callbacks, error and
        statistics callbacks); what a user callback raised waits for the next awaited
        call."""
        try:
            served = self._producer.poll(0)
        except Exception as exc:
            if self._closed:        # closed under us (close() from another task)
                served = 0
            else:
                self._bridge.add_failure(exc)
                served = 1
        if served:
            self._served_total += served
            self._served.set()
            self._served.clear()
            self._pass_turn()        # reports served: room for the first in line
        return served

    # -- the API -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Producer has been closed")
        if self._bridge.follow_loop():
            self._bind_loop()

    def _bind_loop(self) -> None:
        """The loop-bound parts, on the bridge's loop: the waker the I/O thread calls, the
        event produce() waits on for room, and the task serving the reports."""
        loop = self._bridge.loop
        self._waker = _Waker(loop, weakref.WeakMethod(self._revive_pump))
        self._producer._set_report_listener(self._waker)
        #: set (and cleared) each time reports were served (poll() waits on it)
        self._served = asyncio.Event()
        #: produce() calls waiting for room, in the order they came
        self._room_waiters: Deque["asyncio.Future[None]"] = deque()
        self._pump_task = None
        self._revive_pump()

    def _revive_pump(self) -> None:
        """Loop thread: (re)start the task serving the reports. An application that
        cancels every task but its own at shutdown cancels it too; then a delivery's
        future was never resolved (``await future`` hung)."""
        if not self._closed and (self._pump_task is None or self._pump_task.done()):
            self._pump_task = self._bridge.loop.create_task(
                _pump(weakref.ref(self), self._waker))

    async def produce(self, topic: str, value: Any = None, key: Any = None,
                      partition: int = -1, timestamp: int = 0, headers: Any = None,
                      on_delivery: Optional[OnDelivery] = None, *,
                      callback: Optional[OnDelivery] = None
                      ) -> "asyncio.Future[Message]":
        """Queue one message; returns a future resolving to the delivered message (its
        offset set) or raising KafkaException with the delivery error. Arguments as
        :meth:`kafka_client.Producer.produce` (``headers`` included, which
        confluent-kafka's AIOProducer refuses); ``on_delivery(err, msg)``, a function or
        coroutine function, also runs on the loop. When the producer is full
        (``queue.buffering.max.messages``/``kbytes``) this waits for room instead of
        raising BufferError (a message that could not fit in an empty producer fails its
        future with ``_QUEUE_FULL``). A message refused before it is queued (over
        ``message.max.bytes``, no such partition) fails its future with that
        KafkaException, as in confluent-kafka; arguments of the wrong type raise
        TypeError here."""
        self._check_open()
        self._bridge.raise_failure()
        if callback is not None:
            if on_delivery is not None:
                raise TypeError("give on_delivery or its alias callback, not both")
            on_delivery = callback
        if on_delivery is not None and not callable(on_delivery):
            raise TypeError(f"on_delivery must be callable, not "
                            f"{type(on_delivery).__name__}")
        future = _Delivery(self, on_delivery)
        if self._room_waiters:
            # Others wait for room: behind them, first come first served (whoever asked
            # last took the room the reports made: one call waited 12 s while others
            # produced 60,000 messages, and messages of one key could change order).
            await self._take_turn(first=False)
            self._check_open()
        try:
            while True:
                try:
                    self._producer.produce(topic, value, key, partition, future, timestamp,
                                           headers)
                    return future
                except KafkaException as exc:
                    # Refused before queueing (too large, no such partition): through the
                    # future, where confluent-kafka's AIOProducer reports it too.
                    future.set_exception(exc)
                    return future
                except BufferError as exc:
                    if len(self._producer) == 0:
                        # Refused with nothing in the producer: no report can make room
                        # (the message alone is over queue.buffering.max.kbytes). Failed
                        # as confluent-kafka's AIOProducer fails it, never waited for.
                        future.set_exception(KafkaException(KafkaError(
                            KafkaError._QUEUE_FULL, f"{exc} (the message alone does not "
                            f"fit in queue.buffering.max.kbytes)")))
                        return future
                    await self._take_turn(first=True)   # at the head: it was first
                    self._check_open()
        finally:
            self._pass_turn()       # room may be left: the next in line tries

    async def _take_turn(self, first: bool) -> None:
        """Wait in line for room (at the head when ``first``), until served reports make
        some (``_serve``) or the call before in line is done."""
        turn = self._bridge.loop.create_future()
        if first:
            self._room_waiters.appendleft(turn)
        else:
            self._room_waiters.append(turn)
        try:
            await turn
        except BaseException:
            if turn.done() and not turn.cancelled():
                self._pass_turn()             # woken, then cancelled: the next one goes
            else:
                try:
                    self._room_waiters.remove(turn)
                except ValueError:
                    pass
            raise

    def _pass_turn(self) -> None:
        """Wake the first call waiting in line for room, if any."""
        waiters = self._room_waiters
        while waiters:
            turn = waiters.popleft()
            if not turn.done():
                turn.set_result(None)
                return

    async def poll(self, timeout: Optional[float] = 0) -> int:
        """Serve the delivery reports and client events waiting (they are served on the
        loop as they come anyway); with ``timeout`` > 0 (None or -1: no limit) wait that
        long for the first. Returns how many were served."""
        self._check_open()
        self._bridge.raise_failure()
        served = self._serve()
        if served or timeout == 0:
            self._bridge.raise_failure()
            return served
        # Until something is served, here or by the task serving them as they come.
        loop = self._bridge.loop
        start = self._served_total
        limit = wait_limit(timeout)
        deadline = None if limit is None else loop.time() + limit
        while self._served_total == start:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                break
            try:
                await asyncio.wait_for(self._served.wait(), left)
            except asyncio.TimeoutError:
                break
        self._serve()
        self._bridge.raise_failure()
        return self._served_total - start

    async def flush(self, timeout: Optional[float] = None) -> int:
        """Send everything now and wait up to ``timeout`` seconds (None or -1: no limit)
        until every message has its delivery report and its future is resolved; returns
        how many are still in the producer."""
        self._check_open()
        self._bridge.raise_failure()
        loop = self._bridge.loop
        limit = wait_limit(timeout)
        deadline = None if limit is None else loop.time() + limit
        producer = self._producer
        with producer._flushing():
            while True:
                self._serve()
                self._bridge.raise_failure()
                if self._closed or len(producer) == 0:
                    return len(producer) if not self._closed else 0
                wait = _EVENT_INTERVAL_S if deadline is None \
                    else min(deadline - loop.time(), _EVENT_INTERVAL_S)
                if wait <= 0:
                    return len(producer)
                try:
                    await asyncio.wait_for(self._served.wait(), wait)
                except asyncio.TimeoutError:
                    pass

    async def purge(self, in_queue: bool = True, in_flight: bool = True,
                    blocking: bool = True) -> None:
        """Fail queued and/or in-flight messages: their futures raise KafkaException
        (``_PURGE_QUEUE``, ``_PURGE_INFLIGHT``)."""
        self._check_open()
        await self._bridge.call(self._producer.purge, in_queue, in_flight, blocking)
        self._serve()

    def __len__(self) -> int:
        """Messages queued, in flight or whose future is not yet resolved (0 once
        closed)."""
        return 0 if self._closed else len(self._producer)

    async def list_topics(self, topic: Optional[str] = None,
                          timeout: Optional[float] = -1) -> Any:
        self._check_open()
        return await self._bridge.call(self._producer.list_topics, topic, timeout)

    async def cluster_id(self, timeout: Optional[float] = -1) -> Optional[str]:
        self._check_open()
        return await self._bridge.call(self._producer.cluster_id, timeout)

    async def set_sasl_credentials(self, username: str, password: str) -> None:
        self._check_open()
        return await self._bridge.call(self._producer.set_sasl_credentials, username,
                                       password)

    # -- transactions --------------------------------------------------------------------
    async def init_transactions(self, timeout: Optional[float] = None) -> None:
        self._check_open()
        await self._bridge.call(self._producer.init_transactions, timeout)

    async def begin_transaction(self) -> None:
        self._check_open()
        await self._bridge.call(self._producer.begin_transaction)

    async def send_offsets_to_transaction(self, offsets: List[TopicPartition],
                                          group_metadata: Any,
                                          timeout: Optional[float] = None) -> None:
        self._check_open()
        await self._bridge.call(self._producer.send_offsets_to_transaction, offsets,
                                group_metadata, timeout)

    async def commit_transaction(self, timeout: Optional[float] = None) -> None:
        """Deliver every message of the transaction (their futures resolve), then commit
        it."""
        self._check_open()
        deadline = deadline_after(timeout)
        await self.flush(timeout)   # the reports served here, not on an executor thread
        try:
            await self._bridge.call(self._producer.commit_transaction, _left(deadline))
        finally:
            self._serve()

    async def abort_transaction(self, timeout: Optional[float] = None) -> None:
        """Abort the transaction. As confluent-kafka's AIOProducer does, the messages
        produced so far are delivered first (their futures resolve; the abort then keeps
        them from read_committed consumers)."""
        self._check_open()
        deadline = deadline_after(timeout)
        await self.flush(timeout)
        try:
            await self._bridge.call(self._producer.abort_transaction, _left(deadline))
        finally:
            self._serve()

    # -- closing ---------------------------------------------------------------------------
    async def close(self) -> None:
        """Deliver everything (waiting as long as it takes, as flush()), then close the
        producer and the executor it made. Calling it again does nothing. A callback
        raising meanwhile does not stop the flush; the first exception is raised once
        closed. Cut short (cancelled, ``asyncio.wait_for`` timing out), it still closes:
        the futures of the messages not delivered fail with ``_PURGE_QUEUE`` or
        ``_PURGE_INFLIGHT``."""
        if self._closed:
            return
        if self._bridge.follow_loop():
            self._bind_loop()
        failure: Optional[BaseException] = None
        while True:
            try:
                await self.flush()
                break
            except Exception as exc:
                # A callback's exception: the other reports still run and everything is
                # still delivered (as the synchronous close()); the first is raised after.
                if failure is None:
                    failure = exc
            except BaseException as exc:    # cancelled: close now, dropping what is left
                failure = exc
                break
        self._closed = True
        while self._room_waiters:        # calls waiting for room: closed, they raise
            self._pass_turn()
        if self._pump_task is not None:
            self._pump_task.cancel()
            self._pump_task = None
        if len(self._producer):
            # Given up on (close() cancelled or timed out, a callback raised): what is
            # left fails its future now (_PURGE_QUEUE, _PURGE_INFLIGHT) rather than
            # leaving whoever awaits it waiting forever.
            await self._bridge.run_alone(self._producer.purge, True, True, True)
            self._serve()
        self._producer._set_report_listener(None)
        await self._bridge.run_alone(self._producer.close, 0)
        await self._bridge.settle_tasks()
        await self._bridge.close_executor()
        if failure is not None:
            raise failure
        self._bridge.raise_failure()

    async def __aenter__(self) -> "AIOProducer":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()


class _Delivery(asyncio.Future):
    """A message's future and, called as ``(err, msg)``, the delivery callback that
    resolves it: one object per message (a future plus a closure were five, and what a
    message leaves alive until its report sets the pace of the garbage collector, which
    took half of the producer's time)."""

    __slots__ = ("_bridge", "_on_delivery", "_producer")

    def __init__(self, producer: AIOProducer, on_delivery: Optional[Callable[..., Any]]
                 ) -> None:
        bridge = producer._bridge
        super().__init__(loop=bridge.loop)
        self._bridge = bridge
        self._on_delivery = on_delivery
        # The producer stays alive while one of its messages waits for its report (the
        # client holds this future until then), even if the application dropped it.
        self._producer: Optional[AIOProducer] = producer

    def __call__(self, err: Optional[KafkaError], msg: Message) -> None:
        bridge = self._bridge
        if bridge.on_loop():
            _settle(self, err, msg)
        else:   # served by a blocking call on an executor thread (flush, commit)
            bridge.loop.call_soon_threadsafe(_settle, self, err, msg)


def _left(deadline: float) -> Optional[float]:
    """What is left until ``deadline`` (``deadline_after``'s) for the second step of a
    call (flush first: the two steps share the call's timeout, it took up to twice as
    long); None for no limit."""
    return None if deadline == float("inf") else max(0.0, deadline - time.monotonic())


def _settle(future: _Delivery, err: Optional[KafkaError], msg: Message) -> None:
    """Loop thread: a message's delivery report."""
    future._producer = None     # reported: no longer keeps its producer alive
    # Not cancelled by the application, and of a loop still open (the producer may have
    # moved on from the loop it was made in: see LoopBridge.follow_loop).
    if not future.done() and not future.get_loop().is_closed():
        if err is not None:
            future.set_exception(KafkaException(err))
        else:
            future.set_result(msg)
    on_delivery = future._on_delivery
    if on_delivery is not None:
        bridge = future._bridge
        try:
            result = on_delivery(err, msg)
            if asyncio.iscoroutine(result) or asyncio.isfuture(result):
                bridge.spawn(result)
        except Exception as exc:
            bridge.add_failure(exc)
