"""The asyncio consumer: confluent-kafka's ``confluent_kafka.aio.AIOConsumer`` API on our
Consumer."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Callable, List, Optional, Tuple

from kafka_client.aio._bridge import LoopBridge, callback_waiter, in_callback
from kafka_client.aio._kept import KeptReads
from kafka_client.consumer.arrow import empty_record_batch
from kafka_client.consumer.consumer import Consumer
from kafka_client.consumer.group import GroupMetadata
from kafka_client.types import Message, TopicPartition

__all__ = ["AIOConsumer"]


#: ``on_assign`` / ``on_revoke`` / ``on_lost``: ``cb(consumer, partitions)``, a function or a
#: coroutine function.
OnAIORebalance = Callable[["AIOConsumer", List[TopicPartition]], Any]


class AIOConsumer:
    """A consumer for asyncio code: every method of :class:`~kafka_client.Consumer` as a
    coroutine, run on ``executor`` (by default a pool of ``max_workers`` threads) so that
    the event loop never waits.

    Made inside a running event loop. The callbacks (``error_cb``, ``stats_cb``,
    ``throttle_cb``, ``on_commit`` in the configuration; ``on_assign``, ``on_revoke``,
    ``on_lost`` given to :meth:`subscribe`) may be coroutine functions or plain functions;
    they run on the event loop, and the rebalance callbacks get this AIOConsumer as their
    first argument. The call that triggered a callback (a ``consume()`` running a
    rebalance) waits for it, so ``await consumer.assign(...)`` or ``await
    consumer.seek(...)`` inside ``on_assign`` takes effect before any message of the new
    assignment is returned, as with the synchronous consumer.

    Several tasks may await ``consume()``/``poll()`` on one AIOConsumer at the same time:
    each gets distinct messages (the Consumer's threading model, docs/consumer.md).

    A read whose task is cancelled while its call runs on the executor
    (``asyncio.wait_for(consumer.poll(5), 1)``, a task cancelled at shutdown) loses
    nothing: what that call still returns is handed out first by the next read of the
    same kind, and until then the stored offsets stay before it (docs/asyncio.md)."""

    #: how long close() and seek() wait for cancelled reads to return what they hold
    _CANCELLED_READS_WAIT = 5.0

    def __init__(self, consumer_conf: dict, max_workers: int = 100,
                 executor: Optional[concurrent.futures.Executor] = None) -> None:
        if not isinstance(consumer_conf, dict):
            raise TypeError(f"consumer_conf must be a dict, not "
                            f"{type(consumer_conf).__name__}")
        self._bridge = bridge = LoopBridge(max_workers, executor, "AIOConsumer")
        self._closed = False
        self._consumer = consumer = Consumer(bridge.wrap_config(consumer_conf))
        self._kept = KeptReads(consumer, consumer._auto_store)

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise RuntimeError("Consumer closed")
        self._follow_loop()
        return await self._bridge.call(fn, *args, **kwargs)

    def _follow_loop(self) -> None:
        if self._bridge.follow_loop():
            self._kept.loop_moved()

    def _as_self(self, args: Tuple[Any, ...]) -> Tuple[Any, ...]:
        return (self,) + tuple(args[1:])

    # -- reading ---------------------------------------------------------------------------
    async def _read(self, fn: Callable[..., Any], *args: Any, arrow: bool = False) -> Any:
        """A read (``fn(*args, stop)``) on the executor. If this coroutine is cancelled,
        the call is told to return what it has, and that is kept for the next read."""
        self._follow_loop()
        stop = threading.Event()
        call = self._bridge.start(fn, *args, stop)
        try:
            result = await asyncio.shield(call)
        except asyncio.CancelledError:
            stop.set()
            self._consumer._wake_readers()
            self._kept.watch(call, arrow)
            raise
        self._kept.read_returned()
        return result

    def _poll_until(self, timeout: Optional[float], stop: threading.Event) -> Optional[Message]:
        msgs = self._consumer._consume_until(1, -1 if timeout is None else timeout, stop)
        return msgs[0] if msgs else None

    async def _before_read(self, timeout: Optional[float]) -> Optional[float]:
        """What is left of ``timeout`` once earlier cancelled reads have returned; None
        when it ran out first (the read then returns nothing)."""
        if self._closed:
            raise RuntimeError("Consumer closed")
        self._follow_loop()
        self._bridge.raise_failure()
        self._kept.raise_failure()
        return await self._kept.wait(timeout)

    async def poll(self, timeout: Optional[float] = -1) -> Optional[Message]:
        """The next message or event, or None after ``timeout`` seconds (-1 or None: no
        limit). A message already decoded and waiting is taken on the loop's thread
        (when no callback is due); otherwise the call goes to the executor, where it
        may wait."""
        if self._kept.pending:
            left = await self._before_read(timeout)
            if left is None:
                return None
            kept = self._kept.take_messages(1)
            if kept:
                return kept[0]
            timeout = left
        elif self._closed:
            raise RuntimeError("Consumer closed")
        msg = self._consumer._poll_ready()
        if msg is not None:
            return msg
        self._bridge.raise_failure()
        return await self._read(self._poll_until, timeout)

    async def consume(self, num_messages: int = 1,
                      timeout: Optional[float] = -1) -> List[Message]:
        """Up to ``num_messages`` messages, returned when that many are there or after
        ``timeout`` seconds. When that many are already decoded and waiting (and no
        callback is due) they are taken on the loop's thread, with no executor hop."""
        if self._kept.pending and type(num_messages) is int and num_messages > 0:
            left = await self._before_read(timeout)
            if left is None:
                return []
            kept = self._kept.take_messages(num_messages)
            if kept:
                return kept
            timeout = left
        elif self._closed:
            raise RuntimeError("Consumer closed")
        if type(num_messages) is int:       # anything else: the Consumer's own error
            ready = self._consumer._consume_ready(num_messages)
            if ready is not None:
                return ready
        self._bridge.raise_failure()
        return await self._read(self._consumer._consume_until, num_messages, timeout)

    async def consume_arrow(self, max_records: int = 10000,
                            timeout: Optional[float] = -1) -> Any:
        """:meth:`kafka_client.Consumer.consume_arrow`, awaited (an addition)."""
        if self._kept.pending:
            left = await self._before_read(timeout)
            if left is None:
                return empty_record_batch()
            kept = self._kept.take_batch()
            if kept is not None:
                return kept
            timeout = left
        elif self._closed:
            raise RuntimeError("Consumer closed")
        self._bridge.raise_failure()
        return await self._read(self._consumer._consume_arrow, max_records, timeout,
                                arrow=True)

    # -- assignment and subscription --------------------------------------------------------
    async def subscribe(self, topics: List[str], on_assign: Optional[OnAIORebalance] = None,
                        on_revoke: Optional[OnAIORebalance] = None,
                        on_lost: Optional[OnAIORebalance] = None) -> None:
        """Subscribe to ``topics`` (names or ``^`` patterns); the callbacks, functions or
        coroutine functions ``(consumer, partitions)``, run on the event loop with this
        AIOConsumer."""
        wrapped = [None if cb is None or not callable(cb) else
                   self._bridge.wrap(cb, self._as_self)
                   for cb in (on_assign, on_revoke, on_lost)]
        # A non-callable callback goes through as it is, for the Consumer's TypeError.
        on_assign, on_revoke, on_lost = [w if w is not None else cb for w, cb in
                                         zip(wrapped, (on_assign, on_revoke, on_lost))]
        await self._call(self._consumer.subscribe, topics, on_assign=on_assign,
                         on_revoke=on_revoke, on_lost=on_lost)

    async def unsubscribe(self) -> None:
        await self._call(self._consumer.unsubscribe)

    async def assign(self, partitions: List[TopicPartition]) -> None:
        await self._call(self._consumer.assign, partitions)

    async def unassign(self) -> None:
        await self._call(self._consumer.unassign)

    async def incremental_assign(self, partitions: List[TopicPartition]) -> None:
        await self._call(self._consumer.incremental_assign, partitions)

    async def incremental_unassign(self, partitions: List[TopicPartition]) -> None:
        await self._call(self._consumer.incremental_unassign, partitions)

    async def assignment(self) -> List[TopicPartition]:
        return await self._call(self._consumer.assignment)

    # -- positions and offsets ---------------------------------------------------------------
    async def seek(self, partition: TopicPartition) -> None:
        if isinstance(partition, TopicPartition):   # anything else: the Consumer's error
            await self._kept.wait(self._CANCELLED_READS_WAIT)
            self._kept.forget(partition.topic, partition.partition)
        await self._call(self._consumer.seek, partition)

    async def pause(self, partitions: List[TopicPartition]) -> None:
        await self._call(self._consumer.pause, partitions)

    async def resume(self, partitions: List[TopicPartition]) -> None:
        await self._call(self._consumer.resume, partitions)

    async def position(self, partitions: List[TopicPartition]) -> List[TopicPartition]:
        return await self._call(self._consumer.position, partitions)

    async def store_offsets(self, *args: Any, **kwargs: Any) -> None:
        """:meth:`kafka_client.Consumer.store_offsets` (``message=`` or ``offsets=``)."""
        await self._call(self._consumer.store_offsets, *args, **kwargs)

    async def commit(self, *args: Any, **kwargs: Any) -> Optional[List[TopicPartition]]:
        """:meth:`kafka_client.Consumer.commit` (``message=``, ``offsets=``,
        ``asynchronous=``)."""
        return await self._call(self._consumer.commit, *args, **kwargs)

    async def committed(self, partitions: List[TopicPartition],
                        timeout: Optional[float] = None) -> List[TopicPartition]:
        return await self._call(self._consumer.committed, partitions, timeout)

    async def get_watermark_offsets(self, partition: TopicPartition,
                                    timeout: Optional[float] = None,
                                    cached: bool = False) -> Any:
        return await self._call(self._consumer.get_watermark_offsets, partition, timeout,
                                cached)

    async def offsets_for_times(self, partitions: List[TopicPartition],
                                timeout: Optional[float] = None) -> List[TopicPartition]:
        return await self._call(self._consumer.offsets_for_times, partitions, timeout)

    # -- the group and the cluster -----------------------------------------------------------
    async def consumer_group_metadata(self) -> GroupMetadata:
        return await self._call(self._consumer.consumer_group_metadata)

    async def memberid(self) -> Optional[str]:
        return await self._call(self._consumer.memberid)

    async def list_topics(self, topic: Optional[str] = None,
                          timeout: Optional[float] = -1) -> Any:
        return await self._call(self._consumer.list_topics, topic, timeout)

    async def cluster_id(self, timeout: Optional[float] = -1) -> Optional[str]:
        return await self._call(self._consumer.cluster_id, timeout)

    async def set_sasl_credentials(self, username: str, password: str) -> None:
        await self._call(self._consumer.set_sasl_credentials, username, password)

    # -- closing ---------------------------------------------------------------------------
    async def close(self) -> None:
        """Commit (with enable.auto.commit), leave the group, close the consumer and the
        executor it made. Calling it again does nothing. Messages kept for a next read
        (see :class:`~kafka_client.aio._kept.KeptReads`) that no read handed out are not
        committed and are counted in a warning."""
        if self._closed:
            return
        self._follow_loop()
        kept = self._kept
        # Cancelled reads return what they hold first (told to when cancelled), so that
        # the final commit leaves out what no read handed out. Not from a callback: the
        # read that runs it cannot return before it.
        reads_wait = 0.0 if in_callback() else self._CANCELLED_READS_WAIT
        await kept.wait(reads_wait)
        uncommitted = kept.unclaimed()
        try:
            await self._bridge.run_alone(self._consumer._close_for_callback_of,
                                         callback_waiter())
        finally:
            self._closed = True
            await kept.wait(reads_wait)   # any left: closed now
            unclaimed = kept.unclaimed()
            if unclaimed:
                self._consumer._log.warning(
                    "AIOConsumer closed with %d message(s) kept for a next read that never "
                    "came (taken by reads cancelled while they waited, or left after a "
                    "failed deserialization); %d of them not committed (the group's next "
                    "reader gets them)", unclaimed, uncommitted)
            await self._bridge.settle_tasks()
            await self._bridge.close_executor()
        self._bridge.raise_failure()

    async def __aenter__(self) -> "AIOConsumer":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()
