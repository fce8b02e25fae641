"""Messages the asyncio consumer keeps for its next read.

``asyncio.wait_for(consumer.poll(10), 1)`` and a task cancelled at shutdown cancel the
awaiting coroutine, not the Consumer call running on the executor. That call is told to
return at once, but it may already hold messages (a ``consume(100)`` with 40 in hand) or
take some before it notices; nobody would receive them while their positions (and, with
enable.auto.offset.store, the offsets committed) moved past them: lost without a word
(confluent-kafka's AIOConsumer loses them so). Likewise the rest of a batch whose
deserialization failed part-way (AsyncDeserializingConsumer.consume()). Such messages are
kept and handed out, in order, by the next read of the same kind; until then the stored
offsets of their partitions stay at the first of them, so no commit counts them as read,
also when a read running at the same time returns later messages of those partitions (it
stores past them); once they are handed out, the stored offset goes past those later
messages too, not back to the end of the kept ones. With offsets the application stores
(enable.auto.offset.store=false) it may store past them after such a later read: the
commit stays at the first of them all the same (Consumer._hold_kept), as for messages a
waiting call holds, until they are handed out.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any, Deque, Dict, Iterable, List, Optional, Set, Tuple, cast

from kafka_client._common import wait_limit
from kafka_client.consumer.arrow import keep_partitions, rows_of
from kafka_client.errors import KafkaException
from kafka_client.types import ConsumedRecord, Message, TopicPartition

__all__ = ["KeptReads"]

_Key = Tuple[str, int]


class KeptReads:
    """The reads (poll/consume/consume_arrow on the executor) whose awaiting coroutine was
    cancelled, and the messages and record batches kept for the next read (what those
    reads returned; the rest of a batch whose deserialization failed) that no read has
    handed out yet. Loop thread only."""

    def __init__(self, consumer: Any, auto_store: bool) -> None:
        self._consumer = consumer              # the synchronous Consumer
        self._auto_store = auto_store
        #: exceptions for the next read to raise, before it takes anything, each with
        #: the message it is about (handed out with it) or None
        self._failures: List[Tuple[BaseException, Optional[Message]]] = []
        self._messages: Deque[Message] = deque()
        self._batches: Deque[Any] = deque()    # pyarrow.RecordBatch
        self._running: Set["asyncio.Future[Any]"] = set()
        #: for each partition with something kept, the assignment it was kept under (the
        #: Consumer's token): a partition assigned again since reads from its new
        #: position, and what was kept of the old assignment is not handed out
        self._tokens: Dict[_Key, Any] = {}
        #: for each partition with something kept, the consumer's position past it: where
        #: reads at the same time handed out messages after the kept ones up to, stored
        #: again once those are handed out
        self._ahead: Dict[_Key, Tuple[int, Optional[int]]] = {}
        #: reads still running, or kept results not handed out (a plain attribute: the
        #: asyncio consumer's fast paths test it on every call)
        self.pending = False
        #: the consumer may hold commits back for what is kept (Consumer._hold_kept)
        self._holding = False

    def loop_moved(self) -> None:
        """The consumer moved to another event loop (the one it was made in closed): the
        cancelled reads of the closed loop can never hand over what they return."""
        self._running.clear()
        self._update()

    # -- keeping ---------------------------------------------------------------------------
    def watch(self, call: "asyncio.Future[Any]", arrow: bool) -> None:
        """``call``'s awaiting coroutine was cancelled: keep what it returns."""
        self._running.add(call)
        self.pending = True
        call.add_done_callback(lambda done: self._returned(done, arrow))

    def _returned(self, call: "asyncio.Future[Any]", arrow: bool) -> None:
        if call.cancelled():
            self._running.discard(call)
            self._update()
            return
        exc = call.exception()
        if exc is not None:
            self._running.discard(call)
            self._failures.append((exc, None))     # the next read raises it
            self._update()
            return
        result = call.result()
        if arrow:
            if result is not None and result.num_rows:
                self._note({(t, p) for t, p, _o in rows_of(result)})
                self._batches.append(result)
        elif result is not None:
            got = [result] if isinstance(result, Message) else result
            self._note({(m.topic(), m.partition()) for m in _records(got)})
            self._messages.extend(got)
        # running until what it returned is kept: the holds its call set
        # (Consumer._unstore) stay until those of the kept messages replace them
        self._running.discard(call)
        self._update()
        self._rewind()

    def keep(self, messages: List[Message], failure: Optional[BaseException] = None,
             failed: Optional[Message] = None) -> None:
        """Hand ``messages`` out by the next reads, after ``failure`` (raised by the next
        read) if given, which hands out the message ``failed`` (not committed before)."""
        if failure is not None:
            self._failures.append((failure, failed))
        self._note({(m.topic(), m.partition()) for m in _records(messages)})
        self._messages.extendleft(reversed(messages))   # they come before what is kept
        self._update()
        self._rewind()

    def _note(self, keys: Set[_Key]) -> None:
        """Messages of ``keys`` are about to be kept: record the assignment they belong
        to, dropping what was kept of a partition under an earlier one."""
        for key in keys:
            token = self._consumer._assignment_token(*key)
            if key in self._tokens and self._tokens[key] is not token:
                self.forget(*key)
            self._tokens[key] = token

    def _stale(self) -> None:
        """Forget what was kept under an assignment that is over (the partition not
        assigned any more, or assigned again since)."""
        stale = [key for key, token in self._tokens.items()
                 if token is None or self._consumer._assignment_token(*key) is not token]
        for key in stale:
            self.forget(*key)

    def _update(self) -> None:
        # failures too: the next read raises them before taking a waiting message
        self.pending = bool(self._running or self._messages or self._batches
                            or self._failures)
        self._hold()

    def _hold(self) -> None:
        """No commit past the first kept message of each partition; the holds of what
        was handed out or dropped go, unless reads told to stop are still returning
        (their calls hold what they return until it is kept here)."""
        first = {key: offset for key, (offset, _epoch)
                 in _first_per_partition(self._kept_rows()).items()}
        if not first and not self._running and not self._holding:
            return
        try:
            self._consumer._hold_kept(first, exact=not self._running)
        except RuntimeError:
            pass     # the consumer closed
        self._holding = bool(first or self._running)

    def read_returned(self) -> None:
        """A read that was not cancelled returned: its call stored the offsets past what
        it hands out, which may be past messages still kept (taken before by a read
        cancelled since); theirs go back to the first kept."""
        if self._messages or self._batches or self._failures:
            self._rewind()

    def _kept_rows(self) -> List[Tuple[str, int, int, Optional[int]]]:
        kept = [m for _f, m in self._failures if m is not None]
        kept.extend(self._messages)
        rows = [(m.topic(), m.partition(), m.offset(), m.leader_epoch())
                for m in _records(kept)]
        for batch in self._batches:
            rows.extend((t, p, o, None) for t, p, o in rows_of(batch))
        return rows

    def _rewind(self) -> None:
        """Stored offsets back to the first message kept of each partition, the position
        past them remembered first (:attr:`_ahead`)."""
        first = _first_per_partition(self._kept_rows())
        if not self._auto_store or not first:
            return
        try:
            positions = self._consumer.position([TopicPartition(t, p) for t, p in first])
        except (KafkaException, RuntimeError):
            positions = []    # the consumer closed
        for tp in positions:
            key = (tp.topic, tp.partition)
            if tp.offset > max(first[key][0], self._ahead.get(key, (-1, None))[0]):
                self._ahead[key] = (tp.offset, tp.leader_epoch)
        self._store(first)

    def _handed_out(self, rows: List[Tuple[str, int, int, Optional[int]]]) -> None:
        """Kept ``rows`` were handed out: each partition's stored offset goes past them,
        or, once none of it is kept any more, past what other reads handed out after them
        meanwhile (:attr:`_ahead`); what is still kept stays uncommitted."""
        after = _after_last_per_partition(rows)
        still = {(t, p) for t, p, _o, _e in self._kept_rows()}
        for key in after:
            if key not in still:
                ahead = self._ahead.pop(key, None)
                if ahead is not None and ahead[0] > after[key][0]:
                    after[key] = ahead
        self._store(after)
        self._rewind()

    # -- handing out -----------------------------------------------------------------------
    def raise_failure(self) -> None:
        """Raise the oldest exception kept for the next read, if any (once)."""
        if self._failures:
            failure, failed = self._failures.pop(0)
            if failed is not None and failed.error() is None:
                record = cast(ConsumedRecord, failed)
                self._handed_out([(record.topic(), record.partition(), record.offset(),
                                   record.leader_epoch())])
            self._update()
            raise failure

    async def wait(self, timeout: Optional[float]) -> Optional[float]:
        """Wait for the cancelled reads still running, at most ``timeout`` seconds (-1 or
        None: no limit): what is left of ``timeout``, or None when it ran out first (then
        the caller returns nothing: a new read would overtake them)."""
        if not self._running:
            return timeout
        limit = wait_limit(timeout)
        start = time.monotonic()
        await asyncio.wait(set(self._running), timeout=limit)
        if self._running:
            return None
        if limit is None:
            return timeout
        return max(0.0, limit - (time.monotonic() - start))

    def take_messages(self, n: int) -> List[Message]:
        """Up to ``n`` kept messages and events, oldest first; those of an assignment
        that is over are dropped (their offsets were not committed: the partition's next
        reader, or this consumer from its new position, reads them)."""
        if not self._messages:
            return []
        self._stale()
        out: List[Message] = []
        while self._messages and len(out) < n:
            out.append(self._messages.popleft())
        self._handed_out([(m.topic(), m.partition(), m.offset(), m.leader_epoch())
                          for m in _records(out)])
        self._update()
        return out

    def take_batch(self) -> Optional[Any]:
        """The oldest kept record batch, without the rows of an assignment that is over;
        None when there is none."""
        self._stale()
        while self._batches:
            batch = self._batches.popleft()
            if batch.num_rows:
                self._handed_out([(t, p, o, None) for t, p, o in rows_of(batch)])
                self._update()
                return batch
        self._update()
        return None

    def forget(self, topic: str, partition: int) -> None:
        """The application moved the partition's position (seek): what was kept of it
        is not handed out."""
        key = (topic, partition)
        self._tokens.pop(key, None)
        self._ahead.pop(key, None)
        self._messages = deque(m for m in self._messages
                               if m.error() is not None or (m.topic(), m.partition()) != key)
        batches = (keep_partitions(b, lambda t, p: (t, p) != key) for b in self._batches)
        self._batches = deque(b for b in batches if b.num_rows)
        self._update()

    def unclaimed(self) -> int:
        """Kept messages and rows no read has handed out."""
        return sum(1 for m in self._messages if m.error() is None) + \
            sum(b.num_rows for b in self._batches)

    # -- stored offsets --------------------------------------------------------------------
    def _store(self, offsets: Dict[_Key, Tuple[int, Optional[int]]]) -> None:
        """With enable.auto.offset.store, store ``offsets`` (partitions not assigned any
        more are skipped)."""
        if not self._auto_store or not offsets:
            return
        try:
            self._consumer.store_offsets(offsets=[
                TopicPartition(topic, partition, offset, leader_epoch=epoch)
                for (topic, partition), (offset, epoch) in offsets.items()])
        except (KafkaException, RuntimeError):
            pass     # none of them assigned any more, or the consumer closed


def _records(messages: Iterable[Message]) -> List[ConsumedRecord]:
    """The records among a consumer's ``messages`` (its error events left out)."""
    return cast(List[ConsumedRecord], [m for m in messages if m.error() is None])


def _first_per_partition(rows: Iterable[Tuple[str, int, int, Optional[int]]]
                         ) -> Dict[_Key, Tuple[int, Optional[int]]]:
    first: Dict[_Key, Tuple[int, Optional[int]]] = {}
    for topic, partition, offset, epoch in rows:
        seen = first.get((topic, partition))
        if seen is None or offset < seen[0]:
            first[(topic, partition)] = (offset, epoch)
    return first


def _after_last_per_partition(rows: Iterable[Tuple[str, int, int, Optional[int]]]
                              ) -> Dict[_Key, Tuple[int, Optional[int]]]:
    after: Dict[_Key, Tuple[int, Optional[int]]] = {}
    for topic, partition, offset, epoch in rows:
        after[(topic, partition)] = (offset + 1, epoch)
    return after
