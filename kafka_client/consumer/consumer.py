"""``Consumer``: confluent-kafka's consumer API on our own I/O thread and codec.

    from kafka_client import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": "localhost:9092", "group.id": "g"})
    c.assign([TopicPartition("topic", 0, 0)])
    for msg in c.consume(1000, timeout=1.0):
        if msg.error() is None:
            handle(msg.value())
    c.close()

The I/O thread fetches (see :mod:`kafka_client.consumer.fetcher`) and queues raw record
batches; :meth:`Consumer.poll` and :meth:`Consumer.consume` decode them into
:class:`~kafka_client.types.Message` objects on the calling thread (see
:mod:`kafka_client.consumer.decode`), and run the callbacks (errors, statistics,
rebalances, commit results) there, as librdkafka does.
"""
from __future__ import annotations

import functools
import operator
import threading
import time
from collections import deque
from itertools import islice
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Iterator,
    List,
    Optional,
    Protocol,
    Sequence,
    Set,
    Tuple,
    cast,
)

from kafka_client._cluster.telemetry import Sample, interval_samples
from kafka_client._common import CALLBACKS_WAIT_S, ClientBase, deadline_after, wait_limit
from kafka_client._stats import (
    CONSUMER_REQUESTS, empty_window, partition_stats, topic_stats,
)
from kafka_client.consumer.arrow import drop_rows, schema as arrow_schema, to_record_batch
from kafka_client.consumer.decode import BudgetSpent, ColumnsFull, decode_chunk, decode_columns
from kafka_client.consumer.fetcher import (
    OFFSET_TAIL_BASE,
    Chunk,
    Event,
    Fetcher,
    OffsetLookup,
    PartitionState,
)
from kafka_client.consumer.group import (
    JOINING,
    STABLE,
    SYNCING,
    UNJOINED,
    WAIT_REVOKE,
    ErrorDeliverer,
    GroupCoordinator,
    GroupMetadata,
    auto_commit_list,
)
from kafka_client.consumer.consumer_protocol import ConsumerProtocolGroup
from kafka_client.errors import KafkaError, KafkaException, client_error
from kafka_client.types import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    ConsumedRecord,
    Message,
    TopicPartition,
    check_topic_name,
    error_event,
)
from kafka_proto.enums import IsolationLevel, ListOffsetsTimestamp
from kafka_proto.errors import DecompressionLimitError, KafkaProtocolError
from kafka_proto.records import ColumnBuilder

__all__ = ["Consumer"]

_MAX_CONSUME = 1000000  # librdkafka's limit for one consume() call
#: the most a consumer never closed spends committing and leaving its group when it is
#: collected or left open at exit (Consumer._unclosed)
UNCLOSED_FAREWELL_S = 5.0


#: ``on_assign`` / ``on_revoke`` / ``on_lost``: called as ``cb(consumer, partitions)``.
OnRebalance = Callable[["Consumer", List[TopicPartition]], Any]


class Consumer(ClientBase):
    """A Kafka consumer configured with librdkafka property names.

    ``Consumer(config)``; ``config`` may also be given as keyword arguments with
    underscores. Invalid configuration raises :class:`KafkaException` (``_INVALID_ARG``)
    naming the property. ``group.id`` is needed for subscribe() and offset commits, not
    for manual assignment.
    """

    _role = "consumer"
    _work = "consumed"
    _closed_text = "Consumer closed"

    def __init__(self, config: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        cfg = self._init_client(config, kwargs)
        self._queue: Deque[Any] = deque()
        self._ready = threading.Event()
        # The I/O thread's callbacks hold the queue and the event, never the Consumer: an
        # unclosed consumer the application drops is then garbage (__del__ stops it).
        self._deliver = deliver = _deliverer(self._queue, self._ready)
        self._fetcher = Fetcher(cfg, self._cluster, self._io, deliver)
        self._lock = self._fetcher.lock
        #: Held by the thread taking chunks off the queue and decoding them: any number
        #: of threads may call poll()/consume(); each message goes to one of them, and a
        #: batch keeps each partition's order. Taken before self._lock, never while
        #: waiting or running callbacks.
        self._hand = threading.Lock()
        #: Held by the one consume()/consume_arrow() call filling its batch (waiting for
        #: data included); the others wait for their turn on it. Batches are thus filled
        #: one after the other: messages never sit in several partly filled batches, each
        #: waiting out its timeout for more (the last ones would come out a timeout late),
        #: and only the thread whose turn it is waits on _ready (no herd of wake-ups per
        #: chunk). Never held by assign()/seek()/pause(), which take only _hand.
        #: Re-entrant: a callback that consume() serves may itself consume.
        self._turn = threading.RLock()
        #: the decoded chunk being handed out; its positions are settled lazily (see
        #: Handout), so poll()'s fast path takes no lock and writes nothing
        self._handout = Handout(self._lock, bool(cfg["enable.auto.offset.store"]))
        self._fetcher.settle = self._handout.settle
        self._columns: Optional[ColumnBuilder] = None  # reused by consume_arrow()
        #: raised by a callback while a consume() had messages to return: raised next
        self._deferred: Optional[Exception] = None
        self._auto_store = bool(cfg["enable.auto.offset.store"])
        self._consume_cb: Optional[Callable[[Message], Any]] = cfg["consume_cb"]
        self._assign_ops = 0  # assign()-family calls (rebalance callbacks are checked for them)
        #: topics of every partition ever assigned: librdkafka keeps a handle for each,
        #: and a partition of one that is not assigned is _STATE to seek() and
        #: store_offsets(), one of any other topic _UNKNOWN_PARTITION
        self._topics_seen: Set[str] = set()
        #: topics whose leader an offset lookup of this consumer has asked (librdkafka
        #: keeps their leaders: a lookup after the topic is deleted asks that leader)
        self._topics_looked_up: Set[str] = set()
        #: partitions the application paused and did not resume: one assigned again
        #: (assign(), a rebalance) starts paused, as in librdkafka, whose pause stays on
        #: the partition across unassignments until resume()
        self._app_paused: Set[Tuple[str, int]] = set()
        self._group_id: Optional[str] = cfg["group.id"]
        self._group: Any = None
        if self._group_id:
            membership = (ConsumerProtocolGroup if cfg["group.protocol"] == "consumer"
                          else GroupCoordinator)
            self._group = membership(cfg, self._cluster, self._io, self._fetcher,
                                     self._ready.set, _error_deliverer(self._lock, deliver))
            self._fetcher.committed_lookup = self._group.lookup_committed
        #: topics of offset lookups under way (offsets_for_times(), watermarks): their
        #: metadata is kept while they last (the Java consumer's transient topics)
        self._lookups: Dict[str, int] = {}
        self._lookups_lock = threading.Lock()
        self._cluster.metadata.in_use = _topics_in_use(self._fetcher, self._group,
                                                       self._lookups, self._lookups_lock)
        #: time consume() calls spent waiting for data (KIP-714's poll idle ratio)
        self._idle = _IdleClock()
        self._start_telemetry(cfg)
        self._start_client()

    def _start_telemetry(self, cfg: Any) -> None:
        """The consumer's metrics for a broker that subscribes to them (KIP-714):
        librdkafka's set, from the parts that observe them (never the Consumer itself:
        the I/O thread must not keep it alive)."""
        fetcher, group, idle = self._fetcher, self._group, self._idle
        instance_id = cfg["group.instance.id"]

        def samples(elapsed: float) -> List[Sample]:
            out = interval_samples("fetch.manager.fetch.latency", fetcher.fetch_latency)
            out.append(Sample("poll.idle.ratio.avg", idle.take(elapsed)))
            return out

        def resource() -> Dict[str, Any]:
            if group is None:
                return {}
            return {"group_id": group.group_id, "member_id": group.member_id or None,
                    "group_instance_id": instance_id}

        sources = [samples] if group is None else [group.telemetry_samples, samples]
        self._cluster.start_telemetry("consumer", self._io.name, sources, resource)

    # -- plumbing ----------------------------------------------------------------------
    def _part(self, tp: TopicPartition) -> PartitionState:
        part = self._assigned(tp)
        if part is None:
            raise KafkaException(self._not_assigned(tp, ""))
        return part

    def _not_assigned(self, tp: TopicPartition, what: str) -> KafkaError:
        """The error of seek()/store_offsets() for a partition not assigned, with
        librdkafka's codes: _STATE when its topic had a partition assigned before (now or
        earlier), _UNKNOWN_PARTITION for a topic this consumer never had."""
        code = (KafkaError._STATE if tp.topic in self._topics_seen
                else KafkaError._UNKNOWN_PARTITION)
        return KafkaError(code, f"{what}{tp.topic} [{tp.partition}] is not assigned to this "
                                f"consumer")

    def _assigned(self, tp: TopicPartition) -> Optional[PartitionState]:
        """Lock held: the partition's state if it is assigned, else None."""
        part = self._fetcher.parts.get((tp.topic, tp.partition))
        return part if part is not None and part.assigned else None

    # -- assignment ----------------------------------------------------------------------
    def _check_rebalance_protocol(self, incremental: bool, what: str) -> None:
        """Once the group chose its assignor, the assignment changes only by the calls of
        its rebalance protocol (assign()/unassign() for an eager one, the incremental
        ones for a cooperative one): the other kind is _STATE, as in librdkafka (an
        assign() of the partitions a cooperative rebalance adds replaced the
        assignment: the partitions the member kept were read by nobody). Counted as an
        assignment made, as confluent-kafka counts the attempt: the group does not
        assign in its place."""
        group = self._group
        protocol = group.rebalance_protocol if group is not None else None
        if protocol is None or (protocol == "COOPERATIVE") == incremental:
            return
        if incremental:
            raise KafkaException(KafkaError(
                KafkaError._STATE, "Changes to the current assignment must be made using "
                "assign() when rebalance protocol type is EAGER"))
        raise KafkaException(KafkaError(
            KafkaError._STATE, f"Failed to {what} assignment: Local: Erroneous state "
            f"(the group's rebalance protocol is COOPERATIVE: use "
            f"incremental_{'assign' if what == 'set' else 'unassign'}())"))

    def assign(self, partitions: List[TopicPartition]) -> None:
        """Consume exactly these partitions (replacing the current assignment). Each
        starts at its ``offset``: an absolute offset, OFFSET_BEGINNING, OFFSET_END,
        OFFSET_STORED/OFFSET_INVALID (the committed offset, else ``auto.offset.reset``),
        or ``OFFSET_TAIL(n)`` (n messages before the end)."""
        self._check_open()
        self._assign_ops += 1
        self._check_rebalance_protocol(False, "set")
        parts = _check_partitions(partitions, "assign")
        _check_start_offsets(parts, "assign")
        with self._hand, self._lock:
            self._commit_leaving(self._fetcher.assigned_keys())
            for part in self._fetcher.parts.values():
                self._drop(part)
            self._fetcher.parts = {}
            self._add(parts)
        self._fetcher.kick()

    def unassign(self) -> None:
        """Stop consuming every assigned partition."""
        self._check_open()
        self._assign_ops += 1
        self._check_rebalance_protocol(False, "remove")
        with self._hand, self._lock:
            self._commit_leaving(self._fetcher.assigned_keys())
            for part in self._fetcher.parts.values():
                self._drop(part)
            self._fetcher.parts = {}

    def incremental_assign(self, partitions: List[TopicPartition]) -> None:
        """Add partitions to the assignment (each starting as in :meth:`assign`); adding
        one already assigned is an error (_CONFLICT)."""
        self._check_open()
        self._assign_ops += 1
        self._check_rebalance_protocol(True, "set")
        parts = _check_partitions(partitions, "incremental_assign")
        _check_start_offsets(parts, "incremental_assign")
        with self._lock:
            for tp in parts:
                part = self._fetcher.parts.get((tp.topic, tp.partition))
                if part is not None and part.assigned:
                    raise KafkaException(KafkaError(
                        KafkaError._CONFLICT, f"{tp.topic} [{tp.partition}] is already "
                        f"assigned"))
            self._add(parts)
        self._fetcher.kick()

    def incremental_unassign(self, partitions: List[TopicPartition]) -> None:
        """Remove partitions from the assignment; removing one not assigned is an error
        (_INVALID_ARG, as librdkafka's)."""
        self._check_open()
        self._assign_ops += 1
        self._check_rebalance_protocol(True, "remove")
        parts = _check_partitions(partitions, "incremental_unassign")
        with self._hand, self._lock:
            for tp in parts:
                part = self._fetcher.parts.get((tp.topic, tp.partition))
                if part is None or not part.assigned:
                    raise KafkaException(KafkaError(
                        KafkaError._INVALID_ARG, f"{tp.topic} [{tp.partition}] can't be "
                        f"unassigned since it is not in the current assignment"))
            self._commit_leaving({(tp.topic, tp.partition) for tp in parts})
            for tp in parts:
                part = self._fetcher.parts.pop((tp.topic, tp.partition))
                self._drop(part)

    def assignment(self) -> List[TopicPartition]:
        """The assigned partitions, each with the offset it was assigned with
        (OFFSET_STORED when none was given: OFFSET_INVALID is taken as OFFSET_STORED), as
        librdkafka reports them: not the position (see :meth:`position`)."""
        self._check_open()
        with self._lock:
            return [TopicPartition(p.topic, p.partition, p.assigned_offset)
                    for p in self._fetcher.parts.values() if p.assigned]

    def _add(self, parts: Sequence[TopicPartition]) -> None:
        """Lock held: new PartitionStates for ``parts``."""
        topics = set()
        for tp in parts:
            part = PartitionState(tp.topic, tp.partition)
            offset = tp.offset
            # librdkafka's assignment() says OFFSET_STORED for it, what it means here
            part.assigned_offset = OFFSET_STORED if offset == OFFSET_INVALID else offset
            part.seek(OFFSET_STORED if offset == OFFSET_INVALID else offset,
                      tp.leader_epoch if tp.leader_epoch is not None else -1)
            part.paused = part.key in self._app_paused
            self._fetcher.parts[part.key] = part
            topics.add(tp.topic)
        self._topics_seen |= topics
        if topics:
            self._io.call_soon(self._cluster.want_topics, sorted(topics))

    def _commit_leaving(self, keys: Set[Tuple[str, int]]) -> None:
        """Locks held. Manual assignment with enable.auto.commit: the stored offsets of partitions
        leaving the assignment are committed (asynchronously, the result to on_commit),
        as librdkafka commits what it unassigns (lower than the committed ones too);
        they were dropped, and read again by the next consumer. A subscription's
        partitions are committed by the group after their revocation callback (and never
        when lost), this unassignment's among them when the callback makes it."""
        group = self._group
        if group is None or not group.auto_commit or not keys:
            return
        leaving = [tp for tp in self._fetcher.stored_offsets(leaving=True)
                   if (tp.topic, tp.partition) in keys]
        if group.patterns is not None:
            group.keep_leaving(leaving)
            return
        if leaving:
            group.commit(auto_commit_list(keys, leaving), asynchronous=True)

    def _drop(self, part: PartitionState) -> None:
        """Locks held: forget a partition; its queued data is dropped as it is met."""
        self._handout.drop(part)
        part.assigned = False
        part.version += 1

    # -- positions -----------------------------------------------------------------------
    def seek(self, partition: TopicPartition) -> None:
        """Make ``partition.offset`` the next offset consumed from an assigned partition
        (absolute or logical). Messages fetched before the seek are not returned; works
        right after assign(), before any poll(). OFFSET_INVALID, as OFFSET_STORED, goes
        back to the committed offset (else ``auto.offset.reset``), as librdkafka does."""
        self._check_open()
        if not isinstance(partition, TopicPartition):
            raise TypeError("seek() takes a TopicPartition")
        _check_start_offsets([partition], "seek")
        offset = partition.offset
        if offset == OFFSET_INVALID:
            offset = OFFSET_STORED
        with self._hand, self._lock:
            part = self._part(partition)
            self._handout.drop(part)  # settles what poll() took first: the seek wins
            # With the leader epoch of the record before it, the position is checked
            # against the leader's log before it is fetched (KIP-320).
            part.seek(offset, partition.leader_epoch
                      if partition.leader_epoch is not None else -1)
        self._fetcher.kick()

    def position(self, partitions: List[TopicPartition]) -> List[TopicPartition]:
        """The offset of the next message the application gets from each partition
        (OFFSET_INVALID when not known yet)."""
        self._check_open()
        out = []
        with self._lock:
            self._handout.settle()
            for tp in _check_partitions(partitions, "position"):
                part = self._fetcher.parts.get((tp.topic, tp.partition))
                # Not known either while a position looked up at the end waits for its
                # check against the first Fetch answer (PartitionState.end_check): Tansu
                # answers an offset inside the last batch, corrected there.
                pos, epoch = OFFSET_INVALID, None
                if part is not None and part.app_pos >= 0 and part.end_check is None:
                    pos = part.app_pos
                    # With the leader epoch of the record before it, when known (the
                    # stored one, at the same offset), as librdkafka's: a position saved
                    # and given to seek() or commit() keeps its truncation check (KIP-320).
                    if part.stored == pos and part.stored_epoch >= 0:
                        epoch = part.stored_epoch
                out.append(TopicPartition(tp.topic, tp.partition, pos, leader_epoch=epoch))
        return out

    def pause(self, partitions: List[TopicPartition]) -> None:
        """Stop fetching and returning messages from these assigned partitions; messages
        already fetched are fetched again after resume(). As in librdkafka, a pause lasts
        until resume(): a paused partition unassigned and assigned again (by assign() or
        a rebalance) starts paused, and so does one of a topic the consumer had a
        partition of, paused while not assigned."""
        self._check_open()
        tps = _check_partitions(partitions, "pause")
        with self._lock:
            for tp in tps:
                if self._assigned(tp) is not None or tp.topic in self._topics_seen:
                    self._app_paused.add((tp.topic, tp.partition))
        self._pause_parts(tps)

    def _pause_parts(self, partitions: Sequence[TopicPartition]) -> None:
        """pause() of checked partitions (also a revocation's start, during close())."""
        with self._hand, self._lock:
            for tp in partitions:
                part = self._assigned(tp)
                if part is None or part.paused:
                    continue  # not assigned: nothing to pause (librdkafka's answer too)
                part.paused = True
                self._handout.drop(part)
                if part.app_pos >= 0:
                    # Fetched again from where the application is. The end is reported
                    # again after resume() (librdkafka's too: its pause restarts the
                    # fetch); a position just looked up at the end keeps its check
                    # against the first answer (PartitionState.end_check): nothing was
                    # fetched for it yet.
                    end_check = part.end_check
                    part.reposition(part.app_pos)
                    part.end_check = end_check
                else:
                    part.version += 1  # drop what is queued; the lookup continues

    def resume(self, partitions: List[TopicPartition]) -> None:
        """Fetch paused partitions again, from where the application left off."""
        self._check_open()
        with self._lock:
            for tp in _check_partitions(partitions, "resume"):
                self._app_paused.discard((tp.topic, tp.partition))
                part = self._assigned(tp)
                if part is not None:
                    part.paused = False
        self._fetcher.kick()

    # -- consuming -------------------------------------------------------------------------
    def poll(self, timeout: Optional[float] = None) -> Optional[Message]:
        """One message or event (``msg.error()`` set), or None after ``timeout`` seconds
        (None or -1: wait forever). Runs pending callbacks."""
        msg = self._poll_ready()
        if msg is not None:
            return msg
        msgs = self.consume(1, -1 if timeout is None else timeout)
        return msgs[0] if msgs else None

    def _consume_ready(self, num_messages: int) -> Optional[List[Message]]:
        """consume()'s answer when it needs no wait and no callback: ``num_messages``
        messages taken from the chunk being handed out, if it holds that many and nothing
        waits for the calling thread; None otherwise (then consume() must be called).
        ``list(islice(...))`` over the chunk's iterator runs in C under the GIL: no other
        thread takes the same message. For the asyncio consumer's loop thread."""
        if self._closed:
            self._refuse()
        if num_messages < 1 or not self._nothing_due():
            return None
        handout = self._handout
        if handout.rest.__length_hint__() < num_messages:
            return None
        out: List[Message] = list(islice(handout.rest, num_messages))
        if not out:
            return None
        handout.settle()
        if self._consume_cb is not None:
            self._run_consume_cb(out)
        return out

    def _nothing_due(self) -> bool:
        """No callback, deferred exception or group work waits for the calling thread:
        messages already decoded may be handed out without serving anything first."""
        group = self._group
        # Nor anything for _serve_client_events (client events, a statistics document;
        # tested inline: poll() asks for every message): a consumer reading a backlog
        # through the fast paths never ran stats_cb.
        return self._deferred is None and not self._cluster.events_waiting \
            and (group is None or group.idle_poll()) \
            and not (self._stats_on and time.monotonic() >= self._next_stats)

    def _poll_ready(self) -> Optional[Message]:
        """poll()'s fast path alone: the next message of the chunk being handed out when
        no callback or group work is waiting for the calling thread; None otherwise (then
        poll() must be called, which may wait and run callbacks). next() on the chunk's
        iterator is one step under the GIL: each message goes to one thread. The asyncio
        consumer calls it on its loop's thread before sending poll() to its executor."""
        if self._closed:
            self._refuse()
        if self._nothing_due():
            msg = next(self._handout.rest, None)
            if msg is not None:
                if self._consume_cb is not None:
                    self._run_consume_cb([msg])
                return msg
        return None

    def consume(self, num_messages: int = 1, timeout: Optional[float] = -1) -> List[Message]:
        """Up to ``num_messages`` messages and events, returned as soon as that many are
        there or ``timeout`` seconds passed (-1 or None: no limit)."""
        return self._consume_until(num_messages, timeout, None)

    def _consume_until(self, num_messages: int, timeout: Optional[float],
                       stop: Optional[threading.Event]) -> List[Message]:
        """consume(), also returning what it has once ``stop`` is set and
        :meth:`_wake_readers` called (the asyncio consumer's cancelled reads)."""
        out = self._consume(num_messages, timeout, stop)
        if self._consume_cb is not None and out:
            self._run_consume_cb(out)
        return out

    def _assignment_token(self, topic: str, partition: int) -> Optional[object]:
        """The assignment a partition's messages now belong to: an opaque object, a new
        one each time the partition is assigned; None when it is not assigned. For the
        asyncio consumer's kept messages."""
        part = self._fetcher.parts.get((topic, partition))
        return part if part is not None and part.assigned else None

    def _wake_readers(self) -> None:
        """Any thread: calls waiting for data look at their ``stop`` now (the ones
        waiting for their turn within 0.2 s)."""
        self._ready.set()

    def _run_consume_cb(self, msgs: Sequence[Message]) -> None:
        """``consume_cb(msg)`` for each message about to be returned; if it raises, the
        messages are returned all the same and the exception comes from the next call
        (the policy for a callback raising while messages are in hand)."""
        cb = self._consume_cb
        assert cb is not None    # called only when there is one
        try:
            with self._gate:
                for msg in msgs:
                    cb(msg)
        except Exception as exc:
            if self._deferred is None:
                self._deferred = exc

    def _consume(self, num_messages: int, timeout: Optional[float],
                 stop: Optional[threading.Event] = None) -> List[Message]:
        self._check_open()
        num_messages = _count(num_messages, "num_messages")
        deadline = deadline_after(timeout)
        self._raise_deferred()
        out: List[Message] = []
        hand = InHand()
        my_turn = False
        first = True
        try:
            while True:
                try:
                    self._serve(first)
                    first = False
                except Exception as exc:
                    if not out:
                        raise
                    # A callback raised with messages in hand (their positions moved
                    # on): return them, and the exception from the next call.
                    self._deferred = exc
                    return out
                if not num_messages:
                    return out
                if my_turn or self._turn.acquire(blocking=False):
                    my_turn = True
                    with self._hand:
                        self._fill(out, num_messages, hand)
                    if len(out) >= num_messages:
                        return out
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return out
                if hand.firsts:
                    self._hold(hand)
                my_turn = self._wait(my_turn, remaining)
                if self._closed:  # by another thread: what is in hand, the next call raises
                    return out
                if stop is not None and stop.is_set():
                    return out
        except BaseException:
            # Ctrl-C (or another exception) while waiting: what is in hand is read
            # again by the next call, not committed.
            if hand.firsts:
                self._put_back(hand)
            raise
        finally:
            # the hold goes before the turn: the next call's hold (set once it has the
            # turn) is not taken away with it
            if stop is not None and stop.is_set() and hand.firsts:
                self._unstore(hand)
            if hand.held:
                self._unhold(hand)
                for start, end in reversed(hand.gone(self._closed)):
                    del out[start:end]      # in place: ``out`` is the list being returned
            if my_turn:
                self._turn.release()

    def consume_arrow(self, max_records: int = 10000, timeout: Optional[float] = -1) -> Any:
        """Up to ``max_records`` messages as one ``pyarrow.RecordBatch`` (columns topic,
        partition, offset, timestamp, timestamp_type, key, value, headers; see
        :func:`kafka_client.consumer.arrow.schema`), returned as soon as that many are
        there or ``timeout`` seconds passed (-1 or None: no limit). The codec writes the
        records straight into Arrow buffers: no Python object per message. Positions and
        stored offsets advance as with consume(). Error events that consume() would return
        are raised as KafkaException (after the rows before them were returned);
        _PARTITION_EOF events are not reported here. Needs pyarrow."""
        return self._consume_arrow(max_records, timeout, None)

    def _consume_arrow(self, max_records: int, timeout: Optional[float],
                       stop: Optional[threading.Event]) -> Any:
        """consume_arrow(), also returning what it has once ``stop`` is set (see
        :meth:`_consume_until`)."""
        self._check_open()
        max_records = _count(max_records, "max_records")
        if not max_records:
            raise ValueError(f"max_records must be between 1 and {_MAX_CONSUME}")
        deadline = deadline_after(timeout)
        arrow_schema()  # ImportError without pyarrow, before any message is taken
        self._raise_deferred()
        with self._hand:  # one builder per call: threads may call this at once
            cols = self._columns
            self._columns = None
        if cols is None:
            cols = ColumnBuilder(TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME)
        error: Optional[KafkaError] = None
        hand = InHand()
        my_turn = False
        try:
            while True:
                try:
                    self._serve()
                except Exception as exc:
                    if not len(cols):
                        self._columns = cols
                        raise
                    self._deferred = exc  # rows in hand: returned now, the exception next
                    break
                if my_turn or self._turn.acquire(blocking=False):
                    my_turn = True
                    with self._hand:
                        error = self._fill_columns(cols, max_records, hand)
                    if error is not None or len(cols) >= max_records or hand.full:
                        break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                if hand.firsts:
                    self._hold(hand)
                my_turn = self._wait(my_turn, remaining)
                if self._closed:  # by another thread: what is in hand, the next call raises
                    break
                if stop is not None and stop.is_set():
                    break
            # Built here: a failure puts the rows back as any other would
            batch = None if error is not None and not len(cols) else \
                to_record_batch(cols.finish())
        except BaseException:
            if hand.firsts:     # as in consume(): read again, not committed
                self._put_back(hand)
            raise
        finally:
            if stop is not None and stop.is_set() and hand.firsts:
                self._unstore(hand)
            if hand.held:
                self._unhold(hand)
            if my_turn:                 # after the hold, as in _consume()
                self._turn.release()
        self._columns = cols  # empty again: the next call reuses it
        if batch is None:
            raise KafkaException(error)
        gone = hand.gone(self._closed and hand.waited) if hand.spans else None
        if gone:
            batch = drop_rows(batch, gone)
        return batch

    def _wait(self, my_turn: bool, remaining: float) -> bool:
        """Wait up to ``remaining`` seconds, in slices of 0.2 s (Ctrl-C gets through,
        callbacks keep flowing): for data when it is this call's turn to fill its batch,
        else for the turn. Returns whether the call has the turn now."""
        started = time.monotonic()
        try:
            if my_turn:
                self._ready.wait(min(remaining, 0.2))
                return True
            return self._turn.acquire(timeout=min(remaining, 0.2))
        finally:
            self._idle.waited += time.monotonic() - started

    # -- messages in hand while a call waits ----------------------------------------------
    def _hold(self, hand: "InHand") -> None:
        """Before a call waits with messages in hand: their positions have moved on, but
        no commit (auto-commit, another thread's commit()) goes past the first of them
        until they are returned."""
        hand.held = hand.waited = True
        with self._lock:
            for part, (first, _version) in hand.firsts.items():
                if part.held < 0 or first < part.held:
                    part.held = first

    def _unhold(self, hand: "InHand") -> None:
        """The call's messages are returned (or put back): its hold goes. Called before
        the call gives up its turn: the only hold there is, is this call's."""
        hand.held = False
        with self._lock:
            for part in hand.firsts:
                part.held = -1

    def _unstore(self, hand: "InHand") -> None:
        """A call told to ``stop`` (an asyncio read whose coroutine was cancelled) returns
        what it holds to be kept for a later read, which stores their offsets when it
        hands them out: until then no commit counts them, also before the event loop
        takes them over (the stored offsets stay at the first of them, and the commit
        does with offsets the application stores: another read may store past them)."""
        with self._lock:
            for part, (first, version) in hand.firsts.items():
                if not part.assigned or part.version != version:
                    continue
                if part.kept < 0 or first < part.kept:
                    part.kept = first
                if self._auto_store and part.stored > first:
                    part.stored = first
                    part.stored_epoch = -1

    def _hold_kept(self, firsts: Dict[Tuple[str, int], int], exact: bool) -> None:
        """The asyncio consumer's kept messages: no commit goes past ``firsts`` (each
        partition's first kept offset) before they are handed out, as for a waiting
        call's messages in hand (:meth:`_hold`). ``exact``: the other partitions keep
        nothing (else calls told to stop may still be returning theirs: holds only go
        down)."""
        with self._lock:
            for key, part in self._fetcher.parts.items():
                first = firsts.get(key, -1)
                if exact:
                    part.kept = first
                elif first >= 0 and (part.kept < 0 or first < part.kept):
                    part.kept = first

    def _put_back(self, hand: "InHand") -> None:
        """A call ends with an exception (Ctrl-C while it waits) holding messages: each
        partition goes back to its first one (read again by the next call; its stored
        offset not past it), unless it was moved meanwhile (seek, rebalance)."""
        hand.held = False
        with self._hand, self._lock:
            for part, (first, version) in hand.firsts.items():
                part.held = -1
                if not part.assigned or part.version != version:
                    continue
                self._handout.drop(part)
                part.reposition(first)
                if self._auto_store and part.stored > first:
                    part.stored = first
                    part.stored_epoch = -1
        self._fetcher.kick()

    def _fill_columns(self, cols: ColumnBuilder, n: int,
                      hand: "InHand") -> Optional[KafkaError]:
        """Move up to ``n - len(cols)`` messages from the queue into ``cols``; returns an
        error event met on the way (left in the queue if rows were added before it).
        ``hand`` records where the rows of each chunk came from."""
        auto_store = self._auto_store
        queue = self._queue
        handout = self._handout
        part = handout.part
        if part is not None:
            # Messages decoded by an earlier consume()/poll() go first, in order.
            cols.set_source(part.topic, part.partition)
            had = len(cols)
            # Taken in one C call (atomic under the GIL), as _fill() takes them: one next()
            # per row let poll()/consume() on other threads take rows in between, and this
            # batch was no run of consecutive offsets.
            taken = list(islice(handout.rest, n - had))
            for m in taken:
                ts = m._timestamp
                cols.append_row(m._offset, ts[1], ts[0], m._key, m._value, m._headers)
            if taken:
                hand.took(part, taken[0]._offset, had, len(cols))
            if len(cols) < n:
                handout.drop()  # used up: the rows below move the positions themselves
            else:
                handout.settle()
        while len(cols) < n:
            with self._lock:
                if not queue:
                    self._ready.clear()
                    return None
                item = queue[0]
                part = item.part
                stale = part is not None and (item.version != part.version
                                              or not part.assigned)
                if type(item) is Event:
                    if stale:
                        queue.popleft()
                        continue
                    err = item.message.error()
                    if err is not None and err.code() == KafkaError._PARTITION_EOF:
                        queue.popleft()
                        continue
                    if len(cols):
                        return err  # returned next time, after these rows
                    queue.popleft()
                    return err
                if stale or part.paused:
                    queue.popleft()
                    self._fetcher.taken(item)
                    continue
            before = len(cols)
            start = part.app_pos        # where its rows start (or before, past a gap)
            try:
                done = decode_columns(item, cols, n - before)
            except ColumnsFull:
                if not len(cols):
                    raise KafkaException(KafkaError(
                        KafkaError.MSG_SIZE_TOO_LARGE,
                        f"{part.topic} [{part.partition}]: the record at offset "
                        f"{item.start} is too large for consume_arrow()'s columns (2 GiB "
                        f"each); read it with consume()")) from None
                done = False       # the call returns the rows it has; the rest stays queued
                hand.full = True
            except (KafkaProtocolError, BudgetSpent) as exc:
                with self._lock:
                    if queue and queue[0] is item:
                        queue.popleft()
                        self._fetcher.taken(item)
                if isinstance(exc, BudgetSpent):
                    self._refetch(item, exc.offset)
                else:
                    self._decode_failed(item, cols.last_offset + 1 if len(cols) > before
                                        else item.start, exc)
                done = False
            if done:
                # All of it: the position goes past its end (control records too).
                end, end_epoch = item.end()
                if end > part.app_pos:
                    part.app_pos = end
                    if auto_store:
                        part.stored = end
                        part.stored_epoch = end_epoch
            elif len(cols) > before:
                part.app_pos = cols.last_offset + 1
                if auto_store:
                    part.stored = part.app_pos
                    part.stored_epoch = item.last_epoch
            if len(cols) > before and start >= 0:
                hand.took(part, start, before, len(cols))
            if hand.full:
                return None
            if done:
                with self._lock:
                    if queue and queue[0] is item:
                        queue.popleft()
                        self._fetcher.taken(item)
        return None

    def _fill(self, out: List[Message], n: int, hand: "InHand") -> None:
        """_hand held: move up to ``n - len(out)`` messages from the chunk being handed
        out, then from the queue, to ``out``; their positions are settled on return.
        ``hand`` records where the messages of each chunk came from.

        Only the chunk being handed out is shared with poll()'s fast path, and it is
        taken from by single C calls (``extend`` draining its iterator, or ``islice``
        when less than all of it is wanted). A chunk decoded here is taken from by
        plain slicing before it is published (nobody else can see it yet): the common
        case costs a list copy, not an iterator step, per message."""
        queue = self._queue
        handout = self._handout
        rest = handout.rest
        had = len(out)
        need = n - had
        if need >= rest.__length_hint__():
            out.extend(rest)  # what is left (other threads only ever take, never add)
        else:
            out.extend(islice(rest, need))
        part = handout.part
        if len(out) > had and part is not None:   # out[had] came from the chunk: a record
            hand.took(part, cast(ConsumedRecord, out[had])._offset, had, len(out))
        while len(out) < n:
            # The chunk being handed out is used up: the next item from the queue.
            if not queue:
                with self._lock:
                    if not queue:
                        self._ready.clear()
                        break
            with self._lock:
                item = queue.popleft()
                part = item.part
                stale = part is not None and (item.version != part.version
                                              or not part.assigned)
                if type(item) is Chunk:
                    self._fetcher.taken(item)
                    if stale or part.paused:
                        continue
                elif stale:
                    continue
            if type(item) is Event:
                out.append(item.message)
                continue
            msgs: List[ConsumedRecord] = []
            end = item.end()
            try:
                decode_chunk(item, msgs)
            except KafkaProtocolError as exc:
                end = (-1, -1)
                self._decode_failed(item, msgs[-1]._offset + 1 if msgs else item.start, exc)
            except BudgetSpent as cut:
                end = (-1, -1)
                self._refetch(item, cut.offset)
            had = len(out)
            need = n - had
            if len(msgs) <= need:
                out.extend(msgs)
                handout.start(msgs, part, len(msgs), end)
            else:
                out.extend(msgs[:need])
                handout.start(msgs, part, need, end)
            if len(out) > had:
                hand.took(part, msgs[0]._offset, had, len(out))
        handout.settle()

    def _refetch(self, chunk: Chunk, offset: int) -> None:
        """The rest of ``chunk`` from ``offset`` on is fetched again (its decompressed
        size went past CHUNK_DECOMPRESSED_BUDGET)."""
        part = chunk.part
        with self._lock:
            if chunk.version != part.version or not part.assigned:
                return
            eof = part.eof_offset
            part.reposition(offset)
            part.eof_offset = eof  # the same end is not reported twice
        self._fetcher.kick()

    def _decode_failed(self, chunk: Chunk, offset: int, exc: Exception) -> None:
        """A record of ``chunk`` at ``offset`` does not decode (hostile or corrupt bytes):
        the records before it are handed out, then a _BAD_MSG event; the partition is
        fetched again from that offset after fetch.error.backoff.ms (so nothing after it
        is skipped silently; seek past it to go on), as the Java client does."""
        part = chunk.part
        hint = ""
        if isinstance(exc, DecompressionLimitError):
            hint = (f" (a batch may decompress to {self._fetcher.decompressed_floor} bytes, "
                    f"or 64 times its compressed size: raise receive.message.max.bytes to "
                    f"read larger ones)")
        with self._lock:
            if chunk.version != part.version or not part.assigned:
                return
            part.reposition(offset)
            part.backoff_until = time.monotonic() + self._fetcher.error_backoff
            self._queue.appendleft(Event(part, part.version, error_event(
                KafkaError(KafkaError._BAD_MSG, f"{part.topic} [{part.partition}] at offset "
                           f"{offset}: {exc}{hint}"),
                part.topic, part.partition, offset)))
        self._fetcher.kick()

    # -- callbacks ---------------------------------------------------------------------
    def _raise_deferred(self) -> None:
        """Raise what a callback raised during an earlier call that had messages to
        return (see consume())."""
        failure = self._deferred
        if failure is not None:
            self._deferred = None
            raise failure

    def _serve(self, first: bool = True) -> None:
        self._serve_client_events()
        if self._group is not None:
            with self._gate:
                self._group.serve(_Member(self), first)

    _stats_type = "consumer"

    _stats_requests = CONSUMER_REQUESTS

    def _stats_toppars(self) -> Dict[int, List[Tuple[str, int]]]:
        metadata = self._cluster.metadata
        out: Dict[int, List[Tuple[str, int]]] = {}
        with self._lock:
            for part in self._fetcher.parts.values():
                if part.assigned:
                    leader = metadata.leader(part.topic, part.partition)
                    out.setdefault(leader, []).append((part.topic, part.partition))
        return out

    def _stats_doc(self) -> Dict[str, Any]:
        """Statistics in librdkafka's JSON shape (every field of librdkafka's consumer
        document): the client, its brokers, each assigned partition's offsets, queue,
        lag and counts of what was fetched, and the group."""
        fetcher = self._fetcher
        metadata = self._cluster.metadata
        now = time.monotonic()
        age_ms = int((now - self._started) * 1000)
        topics: Dict[str, Any] = {}
        rx_msgs = rx_bytes = 0
        with self._lock:
            self._handout.settle()
            # a chunk poll() hands out is still waiting for the application, as queued
            held_part, held_cnt, held_size = self._handout.waiting()
            queued = len(self._queue) + held_cnt
            for part in fetcher.parts.values():
                rx_msgs += part.rx_msgs
                rx_bytes += part.rx_bytes
                if not part.assigned:
                    continue
                end = part.lso if fetcher.read_committed else part.hw
                info = metadata.topics.get(part.topic)
                if part.topic not in topics:
                    topics[part.topic] = topic_stats(
                        part.topic, age_ms,
                        int((now - info.updated) * 1000) if info is not None else age_ms,
                        empty_window(), empty_window(), {})
                epochs = info.epochs if info is not None else ()
                leader = metadata.leader(part.topic, part.partition)
                topics[part.topic]["partitions"][str(part.partition)] = partition_stats(
                    partition=part.partition, broker=leader, leader=leader, desired=True,
                    fetchq_cnt=part.queued_msgs + (held_cnt if part is held_part else 0),
                    fetchq_size=part.queued_bytes
                    + (held_size if part is held_part else 0),
                    # librdkafka's states (a paused partition stays "active" there)
                    fetch_state="offset-query" if part.fetch_pos < 0 else "active",
                    query_offset=part.reset if part.reset is not None else OFFSET_INVALID,
                    next_offset=part.fetch_pos, app_offset=part.app_pos,
                    stored_offset=part.stored, stored_leader_epoch=part.stored_epoch,
                    # librdkafka's OFFSET_INVALID for "none" (the group had no
                    # offset, no end reached yet), where ours keep -1
                    committed_offset=part.committed if part.committed >= 0
                    else OFFSET_INVALID,
                    eof_offset=part.eof_offset if part.eof_offset >= 0 else OFFSET_INVALID,
                    lo_offset=part.log_start, hi_offset=part.hw, ls_offset=part.lso,
                    consumer_lag=end - part.committed
                    if end >= 0 and part.committed >= 0 else -1,
                    consumer_lag_stored=end - part.stored
                    if end >= 0 and part.stored >= 0 else -1,
                    leader_epoch=epochs[part.partition]
                    if part.partition < len(epochs) else -1,
                    rxmsgs=part.rx_msgs, rxbytes=part.rx_bytes, msgs=part.rx_msgs)
        for topic in topics.values():
            topic["partitions"]["-1"] = partition_stats()   # librdkafka's unassigned one
        doc = super()._stats_doc()
        doc.update(replyq=queued, topics=topics, rxmsgs=rx_msgs, rxmsg_bytes=rx_bytes)
        group = self._group
        if group is not None:
            rebalanced = group.rebalanced_at
            doc["cgrp"] = {
                "state": "up" if group.coord_id is not None else "wait-coord",
                "stateage": int((now - group.coord_since) * 1000),
                "join_state": _LIBRDKAFKA_JOIN_STATE.get(group.state, "init"),
                "rebalance_age": int((now - rebalanced) * 1000) if rebalanced else 0,
                "rebalance_cnt": group.rebalance_callbacks,
                "rebalance_reason": group.rebalance_reason,
                # what the group gave (librdkafka's group assignment), not assign()'s
                "assignment_size": len(group.owned)}
        return doc

    # -- offsets and metadata ------------------------------------------------------------
    def get_watermark_offsets(self, partition: TopicPartition, timeout: Optional[float] = None,
                              cached: bool = False) -> Tuple[int, int]:
        """``(low, high)`` offsets of a partition: asked from its leader, or with
        ``cached`` the values of the last fetch (OFFSET_INVALID when none)."""
        self._check_open()
        tp = _check_partitions([partition], "get_watermark_offsets")[0]
        if cached:
            with self._lock:
                part = self._fetcher.parts.get((tp.topic, tp.partition))
                if part is None or part.hw < 0:
                    return OFFSET_INVALID, OFFSET_INVALID
                return (part.log_start if part.log_start >= 0 else OFFSET_INVALID), part.hw
        key = (tp.topic, tp.partition)
        started = time.monotonic()    # the timeout is for both lookups
        low = self._list_offsets({key: ListOffsetsTimestamp.EARLIEST}, timeout,
                                 IsolationLevel.READ_UNCOMMITTED, started)[key]
        high = self._list_offsets({key: ListOffsetsTimestamp.LATEST}, timeout,
                                  self._fetcher.isolation_level, started)[key]
        return low.offset, high.offset

    def _readable_end(self, partition: TopicPartition) -> int:
        """From the last Fetch answer, the end a read of this consumer reaches: the last
        stable offset under read_committed (no message at or past it is returned while
        a transaction before it is open), else the high watermark; -1 before an answer.
        (The Spark planner ends its ranges there.)"""
        with self._lock:
            part = self._fetcher.parts.get((partition.topic, partition.partition))
            if part is None or part.hw < 0:
                return -1
            if self._fetcher.read_committed and part.lso >= 0:
                return min(part.lso, part.hw)
            return part.hw

    def offsets_for_times(self, partitions: List[TopicPartition],
                          timeout: Optional[float] = None) -> List[TopicPartition]:
        """For each partition, the earliest offset whose timestamp is at or after
        ``partition.offset`` (a time in ms); -1 (OFFSET_END) when there is none."""
        self._check_open()
        tps = _check_partitions(partitions, "offsets_for_times")
        if not tps:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG,
                                            "offsets_for_times(): no partitions given"))
        want = {(tp.topic, tp.partition): tp.offset for tp in tps}
        got = self._list_offsets(want, timeout, self._fetcher.isolation_level)
        out = []
        for tp in tps:
            found = got[(tp.topic, tp.partition)]
            res = TopicPartition(tp.topic, tp.partition, found.offset, None,
                                 found.leader_epoch if found.leader_epoch >= 0 else None)
            if found.error is not None:
                res._set_error(found.error)
            out.append(res)
        return out

    def _list_offsets(self, want: Dict[Tuple[str, int], int], timeout: Optional[float],
                      isolation: int, started: Optional[float] = None
                      ) -> Dict[Tuple[str, int], OffsetLookup]:
        """ListOffsets from the application thread, retried on leader errors until
        ``timeout`` (None: socket.timeout.ms) after ``started`` (default: now); raises on
        failure."""
        limit = wait_limit(timeout)
        timeout = self._cluster.settings.request_timeout if limit is None else limit
        began = time.monotonic() if started is None else started
        deadline = began + timeout
        results: Dict[Tuple[str, int], OffsetLookup] = {}
        asked: Set[Tuple[str, int]] = set()
        pending = dict(want)
        topics = sorted({k[0] for k in want})
        with self._lookups_lock:
            for t in topics:
                self._lookups[t] = self._lookups.get(t, 0) + 1
        try:
            self._io.call_soon(self._cluster.want_topics, topics)
            pending = self._look_up_offsets(pending, results, deadline, began, isolation,
                                            asked)
        finally:
            with self._lookups_lock:
                for t in topics:
                    left = self._lookups.pop(t) - 1
                    if left:
                        self._lookups[t] = left
        known = self._topics_seen | self._topics_looked_up
        self._topics_looked_up.update(t for t, _ in asked)
        if results and len(results) == len(want) and not asked and \
                all(found.no_partition for found in results.values()) and \
                not any(t in known for t in topics):
            # No partition asked for exists, and no leader of these topics was known: the
            # call fails as a whole with _UNKNOWN_PARTITION, as librdkafka's lookups that
            # find no leader at all (for a topic never known too). A topic this consumer
            # had partitions of or looked up, deleted since, keeps UNKNOWN_TOPIC_OR_PART:
            # librdkafka still asks its old leader, who answers that. Beside existing
            # partitions, each keeps its own error, as there.
            first = next(iter(results.values())).error
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION,
                                            first.str() if first is not None else None))
        if len(results) < len(want) or pending:
            missing = [k for k in want if k not in results or k in pending]
            last = results.get(missing[0]) if missing else None
            if last is not None and last.error is not None:
                raise self._lookup_failure(last.error)
            raise self._lookup_failure(client_error(
                KafkaError._TIMED_OUT, f"ListOffsets timed out after {timeout:g}s"))
        for found in results.values():
            if found.error is not None and len(want) == 1:
                raise self._lookup_failure(found.error)
        return results

    def _lookup_failure(self, error: KafkaError) -> KafkaException:
        """What a failed offset lookup raises: ``error``, unless it may pass (no leader
        known, a timeout) and no broker could be reached at all: then _ALL_BROKERS_DOWN,
        as librdkafka's lookups (confluent-kafka's get_watermark_offsets() and
        offsets_for_times()) raise against a dead cluster."""
        if error.retriable() and self._cluster.all_brokers_down():
            return KafkaException(client_error(KafkaError._ALL_BROKERS_DOWN,
                                               f"{error.str()} (all brokers are down)"))
        return KafkaException(error)

    def _look_up_offsets(self, pending: Dict[Tuple[str, int], int],
                         results: Dict[Tuple[str, int], OffsetLookup], deadline: float,
                         began: float, isolation: int,
                         asked: Set[Tuple[str, int]]) -> Dict[Tuple[str, int], int]:
        """_list_offsets()'s attempts: fills ``results`` and ``asked`` (the partitions a
        leader was asked about), returns what is still pending (retriable errors) when
        the deadline came."""
        while True:
            done = threading.Event()
            box: List[Any] = []

            def finished(res: Any) -> None:
                box.append(res)
                done.set()

            remaining = deadline - time.monotonic()
            self._io.call_soon(functools.partial(
                self._fetcher.list_offsets, pending, finished, max(0.01, remaining),
                isolation, fresh_after=began))
            if not self._cluster.wait_for(done, deadline):
                return pending
            res = box[0]
            results.update(res)
            asked.update(key for key, found in res.items() if not found.no_leader)
            pending = {key: pending[key] for key, found in res.items()
                       if found.error is not None and found.error.retriable()}
            if not pending:
                return pending
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
            if time.monotonic() >= deadline:
                return pending

    # -- group API (needs group.id) ------------------------------------------------------
    def _need_group(self, what: str) -> Any:
        self._check_open()
        if self._group is None:
            raise KafkaException(KafkaError(
                KafkaError._INVALID_ARG, f"{what} requires \"group.id\" to be configured"))
        return self._group

    def subscribe(self, topics: List[str], on_assign: Optional[OnRebalance] = None,
                  on_revoke: Optional[OnRebalance] = None,
                  on_lost: Optional[OnRebalance] = None) -> None:
        """Join the group and consume the partitions it assigns from ``topics`` (names,
        or regular expressions starting with ``^``). The callbacks run from poll()/
        consume() as ``cb(consumer, partitions)``; when none is given, the ``rebalance_cb``
        property's ``rebalance_cb(consumer, err, partitions)`` runs instead, if set."""
        group = self._need_group("subscribe()")
        if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
            raise TypeError("subscribe() requires a list of topic names (str)")
        for name in topics:
            check_topic_name(name)
        if not topics or not all(topics):
            raise KafkaException(KafkaError(
                KafkaError._INVALID_ARG, "subscribe(): the list of topics is empty or "
                "holds an empty name"))
        for name, cb in (("on_assign", on_assign), ("on_revoke", on_revoke),
                         ("on_lost", on_lost)):
            if cb is not None and not callable(cb):
                raise TypeError(f"{name} expects a callable, not {type(cb).__name__}")
        rebalance_cb = self._config["rebalance_cb"]
        if rebalance_cb is not None and on_assign is None and on_revoke is None \
                and on_lost is None:
            on_assign, on_revoke = _rebalance_callbacks(rebalance_cb)
        group.subscribe(list(topics), on_assign, on_revoke, on_lost)

    def unsubscribe(self) -> None:
        """Leave the group's subscription (partitions are revoked)."""
        group = self._need_group("unsubscribe()")
        with self._gate:
            group.unsubscribe(_Member(self))

    def store_offsets(self, message: Optional[Message] = None,
                      offsets: Optional[List[TopicPartition]] = None) -> None:
        """Store ``message.offset() + 1`` (or each ``offsets`` entry as given) to be
        committed by the next commit (auto-commit or commit() without arguments).

        As librdkafka: exactly one of the two (ValueError otherwise); partitions not
        assigned are skipped, and when none of them is assigned the call fails with the
        last one's error: _STATE for a partition of a topic assigned before, else
        _UNKNOWN_PARTITION. A logical (negative) offset is accepted and clears the
        partition's stored offset: nothing is committed for it until another is stored."""
        self._check_open()
        if message is not None and offsets is not None:
            raise ValueError("message and offsets are mutually exclusive")
        if message is None and offsets is None:
            raise ValueError("expected either message or offsets")
        if message is not None:
            entries = [_offset_after(message, "store")]
        else:
            entries = _check_partitions(offsets, "store_offsets", any_partition=True)
        if not entries:
            return
        stored = 0
        failure: Optional[KafkaError] = None
        with self._lock:
            for tp in entries:
                part = self._assigned(tp)
                if part is None:
                    failure = self._not_assigned(tp, "StoreOffsets failed: ")
                    continue
                if tp.offset < 0:
                    # librdkafka stores a logical offset, which no commit sends: the
                    # offset stored before is not committed any more.
                    part.stored, part.stored_metadata, part.stored_epoch = -1, None, -1
                else:
                    part.stored = tp.offset
                    part.stored_metadata = tp.metadata
                    part.stored_epoch = (tp.leader_epoch if tp.leader_epoch is not None
                                         else -1)
                stored += 1
        if not stored and failure is not None:
            raise KafkaException(failure)

    def commit(self, message: Optional[Message] = None,
               offsets: Optional[List[TopicPartition]] = None,
               asynchronous: bool = True, **legacy: Any) -> Optional[List[TopicPartition]]:
        """Commit ``message.offset() + 1``, or ``offsets`` (each entry's offset as
        given), or with neither the stored offsets beyond the last commit.

        ``asynchronous=True`` (the default) returns None and hands the result to
        ``on_commit(err, partitions)`` from a later poll()/consume(); ``False`` waits,
        returns the result and raises KafkaException on failure (without calling
        ``on_commit``, as librdkafka). As librdkafka, entries with a negative offset are
        not committed but stay in the result as given (with the stored offsets: every
        assigned partition, OFFSET_INVALID where nothing new is stored), and nothing left
        to commit is _NO_OFFSET (raised, or given to ``on_commit``). While this member
        rejoins its group (its JoinGroup or SyncGroup waiting at the coordinator) the
        commit is answered at once, not after the rebalance; one the broker refuses then
        (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION): poll() to complete the rebalance,
        then commit again. The stored offsets of an assignment lost (past
        max.poll.interval.ms, a session expired) are _ASSIGNMENT_LOST until a poll()
        runs the revocation, as librdkafka.
        ``async=`` is accepted as the old name of ``asynchronous``."""
        if legacy:
            if set(legacy) != {"async"}:
                raise TypeError(f"commit() got an unexpected keyword argument "
                                f"{next(k for k in legacy if k != 'async')!r}")
            asynchronous = legacy["async"]
        group = self._need_group("commit()")
        if message is not None and offsets is not None:
            raise ValueError("message and offsets are mutually exclusive")
        if message is not None:
            tps = [_offset_after(message, "commit")]
        elif offsets is not None:
            tps = _check_partitions(offsets, "commit")
        else:
            # every assigned partition, OFFSET_INVALID where nothing new is stored: the
            # result names them all, as librdkafka's does (committed or _NO_OFFSET)
            tps = list(self._fetcher.stored_offsets())
            stored = {(tp.topic, tp.partition) for tp in tps}
            tps += [TopicPartition(t, p, OFFSET_INVALID)
                    for t, p in sorted(self._fetcher.assigned_keys()) if (t, p) not in stored]
        return group.commit(tps, bool(asynchronous),
                            assignment=message is None and offsets is None)

    def committed(self, partitions: List[TopicPartition],
                  timeout: Optional[float] = None) -> List[TopicPartition]:
        """The group's committed offsets of ``partitions`` (OFFSET_INVALID when none).
        Waits up to ``timeout`` seconds (None or negative: ``request.timeout.ms``); a
        timeout under a millisecond, 0 included, is _TIMED_OUT at once, as confluent-kafka
        waits whole milliseconds for the answer (none for 0)."""
        group = self._need_group("committed()")
        tps = _check_partitions(partitions, "committed")
        limit = wait_limit(timeout)    # None: no limit given; NaN: 0, at once
        if limit is not None and limit < 0.001:
            raise KafkaException(client_error(
                KafkaError._TIMED_OUT, f"committed() timed out after {timeout:g}s (a timeout "
                f"under 1 ms waits for no answer)"))
        return group.committed(tps, limit)

    def memberid(self) -> Optional[str]:
        """This member's id in the group (None before joining or without a group)."""
        self._check_open()
        return (self._group.member_id or None) if self._group is not None else None

    def consumer_group_metadata(self) -> GroupMetadata:
        """The group metadata a transactional producer's send_offsets_to_transaction()
        needs: the generation and member id the member's last assignment came in, kept
        when the membership is lost until the member joins again, so that the
        coordinator refuses the offsets of a member that has lost its place (KIP-447)."""
        return self._need_group("consumer_group_metadata()").metadata()

    # -- closing -------------------------------------------------------------------------
    def close(self) -> None:
        """Commit stored offsets (with enable.auto.commit), leave the group, stop the I/O
        thread and close connections. Calls after close raise RuntimeError. Once it
        returns, no callback of this consumer runs any more: it waits for those other
        threads' calls are running (at most 30 s), and a close() from another thread
        meanwhile returns once this one has finished."""
        if self._closed:
            if self._forked:
                self._refuse()
            if "_gate" in vars(self):       # (not when __init__ never ran)
                self._gate.wait_for_close(float("inf"))  # closed, but still finishing
            return
        gate = self._gate
        if not gate.begin_close(lambda: self._closed, float("inf")):
            return    # another thread's close() closed it (or this thread's is running)
        failure: Optional[Exception] = None
        try:
            if self._group is not None:
                try:
                    self._group.close(_Member(self))
                except Exception as exc:  # a callback raised: close first, raise after
                    failure = exc
            self._shutdown()   # other threads' calls waiting for data return now
            with self._lock:
                # What was fetched and not handed out goes now: a closed consumer that
                # the application still refers to held it (up to
                # queued.max.messages.kbytes).
                self._queue.clear()
                self._fetcher.queued_bytes = self._fetcher.queued_msgs = 0
                self._columns = None
            if not gate.wait_for_others(time.monotonic() + CALLBACKS_WAIT_S):
                self._log.warning("consumer closed while a callback of another thread "
                                  "still runs (waited %g s)", CALLBACKS_WAIT_S)
        finally:
            gate.end_close()
        if failure is not None:
            raise failure

    def _on_shutdown(self) -> Callable[[], None]:
        self._ready.set()  # a consume() of another thread waiting for data returns
        return self._fetcher.close

    def _unclosed(self) -> None:
        # Collected or left open at exit without close(): as librdkafka's destroy, the
        # stored offsets are committed (enable.auto.commit) and the group left, without
        # callbacks and in bounded time.
        if self._group is not None:
            self._group.farewell(UNCLOSED_FAREWELL_S)

    def _at_exit(self) -> None:
        self._stop_unclosed()


class _HandoutIterator(Protocol):
    """A list iterator: handed out by next() and islice (atomic under the GIL), what is
    left told by __length_hint__, moved on by __setstate__."""

    def __iter__(self) -> Iterator[ConsumedRecord]: ...
    def __next__(self) -> ConsumedRecord: ...
    def __length_hint__(self) -> int: ...
    def __setstate__(self, state: int) -> None: ...


_USED_UP = cast(_HandoutIterator, iter(()))


class InHand:
    """What one consume()/consume_arrow() call has taken and not returned yet: for each
    partition (its state object: a re-assigned partition is another one) the offset of
    the first message and the partition's version then, and the span of the call's
    messages (or rows) each chunk filled."""

    __slots__ = ("firsts", "spans", "held", "waited", "full")

    def __init__(self) -> None:
        self.firsts: Dict[PartitionState, Tuple[int, int]] = {}
        self.spans: List[Tuple[PartitionState, int, int]] = []
        self.held = False           # the partitions' ``held`` offsets are set
        self.waited = False         # they were, during a wait
        self.full = False           # consume_arrow(): its columns take no more

    def took(self, part: PartitionState, first: int, start: int, end: int) -> None:
        """Messages ``start:end`` of the call's list (or rows) came from ``part``, the
        first at offset ``first``."""
        if part not in self.firsts:
            self.firsts[part] = (first, part.version)
        self.spans.append((part, start, end))

    def gone(self, closed: bool) -> List[Tuple[int, int]]:
        """The spans not to return: those of partitions no longer assigned (revoked or
        unassigned while the call waited), or all of them once the consumer was closed
        under the call: the commit made then stopped before them, and the partition's
        next owner reads them."""
        if closed:
            return [(start, end) for _part, start, end in self.spans]
        return [(start, end) for part, start, end in self.spans if not part.assigned]

#: the group's states as librdkafka's statistics name them (cgrp.join_state)
_LIBRDKAFKA_JOIN_STATE = {UNJOINED: "init", WAIT_REVOKE: "wait-unassign-call",
                          JOINING: "wait-join", SYNCING: "wait-sync", STABLE: "steady"}


class Handout:
    """The messages decoded from one chunk, handed out one by one or in slices by any
    number of application threads, and the positions they move.

    Handing out is ``next()``/``islice`` on one list iterator, atomic under the GIL, so
    poll()'s fast path takes no lock and each message goes to exactly one caller. The
    partition's position (``app_pos``) and, with enable.auto.offset.store, its stored
    offset follow what was taken from the iterator, written by :meth:`settle`: at the
    end of each consume(), before position()/pause(), and from the fetcher before any
    commit reads the stored offsets (the I/O thread's auto-commit too). Holds no
    reference to the Consumer (the fetcher holds :meth:`settle`)."""

    __slots__ = ("lock", "auto_store", "messages", "rest", "part", "version", "settled",
                 "end", "end_epoch")

    def __init__(self, lock: Any, auto_store: bool) -> None:
        self.lock = lock                  # the fetcher's (re-entrant)
        self.auto_store = auto_store
        self.messages: List[ConsumedRecord] = []
        self.rest: _HandoutIterator = _USED_UP
        self.part: Optional[PartitionState] = None
        self.version = 0                  # the partition's version the chunk is of
        self.settled = 0                  # messages whose positions are written
        #: the position once every message is taken (Chunk.end), -1 when written or
        #: when the chunk was not decoded to its end
        self.end = -1
        self.end_epoch = -1

    def start(self, messages: List[ConsumedRecord], part: PartitionState, taken: int = 0,
              end: Tuple[int, int] = (-1, -1)) -> None:
        """The consumer's _hand held: hand out a newly decoded chunk whose first
        ``taken`` messages the caller took already (the previous chunk is used up: its
        positions are settled first); ``end``: the chunk's :meth:`Chunk.end` when it was
        decoded to its end."""
        rest = cast(_HandoutIterator, iter(messages))
        if taken:
            rest.__setstate__(taken)  # before anyone else can see it
        with self.lock:
            self.settle()
            self.messages = messages
            self.part = part
            self.version = part.version
            self.settled = 0
            self.end, self.end_epoch = end
            self.rest = rest

    def settle(self) -> None:
        """Any thread: write the position (and stored offset) after the last message
        taken from the chunk, or the chunk's end once all were taken; only forward. Not
        once the I/O thread has moved the partition elsewhere (log truncation): its
        position is the new one."""
        with self.lock:
            part = self.part
            if part is None or part.version != self.version:
                return
            count = len(self.messages)
            taken = count - self.rest.__length_hint__()
            pos = epoch = -1
            if taken > self.settled:
                self.settled = taken
                last = self.messages[taken - 1]
                pos = last._offset + 1
                epoch = last._leader_epoch if last._leader_epoch is not None else -1
            if taken == count and self.end > max(pos, part.app_pos):
                pos, epoch = self.end, self.end_epoch
                self.end = -1
            if pos < 0:
                return
            part.app_pos = pos
            if self.auto_store:
                part.stored = pos
                # committed with the offset, so the next reader can validate it
                part.stored_epoch = epoch

    def waiting(self) -> Tuple[Optional[PartitionState], int, int]:
        """Any thread: the partition of the chunk being handed out, how many of its
        messages no caller has taken yet and their key and value bytes (the statistics'
        fetch queue: librdkafka counts fetched messages until the application has them)."""
        with self.lock:
            part = self.part
            if part is None or part.version != self.version:
                return None, 0, 0
            messages = self.messages
            left = self.rest.__length_hint__()
        rest = islice(messages, len(messages) - left, None)
        return part, left, sum(len(m._value or b"") + len(m._key or b"") for m in rest)

    def drop(self, part: Optional[PartitionState] = None) -> None:
        """Locks held: stop handing out the chunk (of ``part``, if given): its partition
        was seeked, paused or unassigned, or it is used up. What was taken from it keeps
        its positions (settled first)."""
        if part is None or self.part is part:
            self.settle()
            self.messages = []
            self.rest = _USED_UP
            self.part = None
            self.settled = 0


class _Member:
    """The consumer as its group sees it (:class:`~kafka_client.consumer.group.GroupMember`),
    made for each call into the group: the group never keeps the consumer."""

    __slots__ = ("consumer",)

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer

    def hold(self, partitions: List[TopicPartition]) -> None:
        self.consumer._pause_parts(partitions)

    def assigned(self) -> Set[Tuple[str, int]]:
        return self.consumer._fetcher.assigned_keys()

    def assignment_changes(self) -> int:
        return self.consumer._assign_ops

    def stored_offsets(self, leaving: bool = False) -> List[TopicPartition]:
        return self.consumer._fetcher.stored_offsets(leaving)

    def assign(self, partitions: List[TopicPartition]) -> None:
        self.consumer.assign(partitions)

    def unassign(self) -> None:
        self.consumer.unassign()

    def incremental_assign(self, partitions: List[TopicPartition]) -> None:
        self.consumer.incremental_assign(partitions)

    def incremental_unassign(self, partitions: List[TopicPartition]) -> None:
        self.consumer.incremental_unassign(partitions)


def _rebalance_callbacks(rebalance_cb: Callable[[Any, KafkaError, List[TopicPartition]], Any]
                         ) -> Tuple[Callable, Callable]:
    """on_assign and on_revoke made of librdkafka's one ``rebalance_cb(consumer, err,
    partitions)``; a lost assignment goes to on_revoke (_REVOKE_PARTITIONS), as
    there."""
    def on_assign(consumer: Any, partitions: List[TopicPartition]) -> None:
        rebalance_cb(consumer, KafkaError(KafkaError._ASSIGN_PARTITIONS), partitions)

    def on_revoke(consumer: Any, partitions: List[TopicPartition]) -> None:
        rebalance_cb(consumer, KafkaError(KafkaError._REVOKE_PARTITIONS), partitions)

    return on_assign, on_revoke


class _IdleClock:
    """Seconds consume() calls spent waiting for data or for their turn, for the poll
    idle ratio pushed to the brokers (KIP-714): added to by application threads, taken
    on the I/O thread (a float kept under the GIL; a metric, not a count)."""

    __slots__ = ("waited",)

    def __init__(self) -> None:
        self.waited = 0.0

    def take(self, elapsed: float) -> float:
        """The fraction of the last ``elapsed`` seconds spent waiting (at most 1)."""
        waited, self.waited = self.waited, 0.0
        return min(1.0, waited / elapsed) if elapsed > 0 else 0.0


def _topics_in_use(fetcher: Fetcher, group: Any, lookups: Dict[str, int],
                   lookups_lock: threading.Lock) -> Callable[[Set[str]], Set[str]]:
    """The metadata cache's question (I/O thread, at each periodic refresh): which of
    these topics the consumer uses now: a partition assigned, the group's subscription
    (names, pattern matches, as the leader every member's topics), an offset lookup under
    way. The others are forgotten, as the Java consumer forgets them (librdkafka refreshes
    every topic it ever had for the client's life). A closure over the parts, never the
    Consumer (the I/O thread must not keep it alive)."""
    def in_use(candidates: Set[str]) -> Set[str]:
        with fetcher.lock:
            used = {topic for topic, _partition in fetcher.parts}
        with lookups_lock:
            used.update(lookups)
        if group is not None:
            used |= group.topics_in_use(candidates)
        return used & candidates

    return in_use


def _deliverer(queue: Deque[Any], ready: threading.Event) -> Callable[[Any], None]:
    def deliver(item: Any) -> None:
        """I/O thread, fetcher lock held: data or an event for the application."""
        queue.append(item)
        ready.set()
    return deliver


def _error_deliverer(lock: Any, deliver: Callable[[Any], None]) -> ErrorDeliverer:
    def deliver_error(err: KafkaError, topic: Optional[str] = None) -> None:
        """I/O thread: a client-level error (about ``topic``, if given) for
        poll()/consume() to return. Its partition() is 0, as librdkafka leaves an error
        of no partition (confluent-kafka's None stands for RD_KAFKA_PARTITION_UA only)."""
        with lock:
            deliver(Event(None, 0, error_event(err, topic, 0)))
    return deliver_error


def _count(n: Any, what: str) -> int:
    """A message count argument: an int in 0..1,000,000 (confluent-kafka's errors)."""
    n = operator.index(n)
    if not 0 <= n <= _MAX_CONSUME:
        raise ValueError(f"{what} must be between 0 and {_MAX_CONSUME} (1M)")
    return n


def OFFSET_TAIL(n: int) -> int:
    """The logical offset ``n`` messages before the end of a partition."""
    if n < 0:
        raise ValueError("OFFSET_TAIL(n) needs n >= 0")
    return OFFSET_TAIL_BASE - n


def _check_start_offsets(parts: Sequence[TopicPartition], what: str) -> None:
    """A negative offset that is no logical one (OFFSET_BEGINNING, OFFSET_END,
    OFFSET_STORED, OFFSET_INVALID, OFFSET_TAIL(n)) is _INVALID_ARG, as librdkafka's
    assign() says (it used to be taken as OFFSET_END: the backlog skipped silently); so
    is a partition listed twice (its last entry's offset was taken silently)."""
    seen: Set[Tuple[str, int]] = set()
    for tp in parts:
        key = (tp.topic, tp.partition)
        if key in seen:
            raise KafkaException(KafkaError(
                KafkaError._INVALID_ARG, f"{what}(): duplicate partition {tp.topic} "
                f"[{tp.partition}] in the list"))
        seen.add(key)
    for tp in parts:
        off = tp.offset
        if OFFSET_TAIL_BASE < off < 0 and off not in _LOGICAL_OFFSETS:
            raise KafkaException(KafkaError(
                KafkaError._INVALID_ARG, f"{what}(): {tp.topic} [{tp.partition}]: offset "
                f"{off} is neither an offset nor a logical one (OFFSET_BEGINNING, "
                f"OFFSET_END, OFFSET_STORED, OFFSET_INVALID, OFFSET_TAIL(n))"))


_LOGICAL_OFFSETS = frozenset((OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, OFFSET_INVALID))


def _check_partitions(partitions: Any, what: str,
                      any_partition: bool = False) -> List[TopicPartition]:
    """``partitions`` as a list of TopicPartition (TypeError otherwise); a negative
    partition number is _INVALID_ARG unless ``any_partition``."""
    if not isinstance(partitions, list):
        raise TypeError(f"{what}() requires list of TopicPartition, not "
                        f"{type(partitions).__name__}")
    for tp in partitions:
        if not isinstance(tp, TopicPartition):
            raise TypeError(f"{what}() requires list of TopicPartition, got "
                            f"{type(tp).__name__}")
        if tp.partition < 0 and not any_partition:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG,
                                            f"{what}(): {tp.topic} has no partition number"))
        check_topic_name(tp.topic)
    return list(partitions)


def _offset_after(message: Any, what: str) -> TopicPartition:
    """commit()/store_offsets() of a message: its partition at ``offset() + 1`` (with
    its leader epoch); an event cannot be committed or stored."""
    if not isinstance(message, Message):
        raise TypeError(f"{what}: message must be a Message, not {type(message).__name__}")
    err = message.error()
    if err is not None:
        raise KafkaException(KafkaError(
            KafkaError._INVALID_ARG, f"Cannot {what} offsets for message with error: "
            f"'{err.str()}'"))
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    if not isinstance(topic, str) or partition is None or offset is None:
        if what == "commit":
            # Nothing to commit (librdkafka leaves the entry out: _NO_OFFSET).
            return TopicPartition(topic if isinstance(topic, str) else "",
                                  -1 if partition is None else partition, OFFSET_INVALID)
        raise KafkaException(KafkaError(
            KafkaError._INVALID_ARG, f"Cannot {what} offsets for a message without a "
            f"topic, partition and offset"))
    return TopicPartition(topic, partition, offset + 1, leader_epoch=message.leader_epoch())
