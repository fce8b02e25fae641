"""``ShareConsumer``: confluent-kafka's share consumer (KIP-932 share groups) on our own I/O
thread and codec.

    from kafka_client import ShareConsumer

    with ShareConsumer({"bootstrap.servers": "localhost:9092", "group.id": "g"}) as c:
        c.subscribe(["jobs"])
        while running:
            for msg in c.poll(1.0):
                if msg.error() is None:
                    handle(msg.value())

Members of a share group read the same partitions; each record goes to one member at a
time, acquired for it by the partition's leader until the member acknowledges it (ACCEPT,
RELEASE or REJECT) or its lock expires. The membership is
:mod:`kafka_client.consumer.share_group`, the share sessions, fetches and acknowledgements
:mod:`kafka_client.consumer.share_fetcher`; this module is the application's side: it
decodes what was fetched on the calling thread, tracks the records handed out, and turns
the application's acknowledgements into :class:`AckBatch` objects for the I/O thread.
"""
from __future__ import annotations

import bisect
import itertools
import threading
import time
from contextlib import contextmanager
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    NamedTuple,
    NoReturn,
    Optional,
    Set,
    Tuple,
    cast,
)

from kafka_client._cluster.calls import CallRunner
from kafka_client._common import ClientBase, deadline_after
from kafka_client._model import AcknowledgeType, Messages
from kafka_client._stats import CONSUMER_REQUESTS
from kafka_client.config import describe
from kafka_client.consumer.decode import BudgetSpent, decode_chunk
from kafka_client.consumer.fetcher import Chunk
from kafka_client.consumer.share_fetcher import (
    AckBatch,
    AckRange,
    ShareChunk,
    ShareFetcher,
)
from kafka_client.consumer.share_group import ShareMember
from kafka_client.errors import (
    ConcurrentModificationException,
    IllegalStateException,
    KafkaError,
    KafkaException,
    client_error,
)
from kafka_client.types import (
    ConsumedRecord,
    Message,
    TopicPartition,
    check_topic_name,
    error_event,
    topic_name_error,
)
from kafka_proto.enums import AcknowledgeType as WireAckType

__all__ = ["ShareConsumer", "AckCommitCallback", "NOT_APPLICABLE"]

#: ``callback(offsets, exception)``: the outcome of acknowledgements the broker answered.
AckCommitCallback = Callable[[Dict[TopicPartition, Set[int]], Optional[KafkaException]], Any]

#: Consumer properties a share consumer refuses when set (librdkafka's list): the broker
#: decides them, or they belong to the consumer group protocols.
NOT_APPLICABLE = ("group.protocol", "enable.auto.commit", "auto.offset.reset",
                  "isolation.level", "partition.assignment.strategy", "group.instance.id",
                  "group.remote.assignor", "session.timeout.ms", "heartbeat.interval.ms",
                  "queued.min.messages", "queued.max.messages.kbytes",
                  "fetch.queue.backoff.ms", "rebalance_cb", "offset_commit_cb",
                  "on_commit", "consume_cb")

#: The longest close() waits for the answers to its last acknowledgements and the
#: closing of the share sessions (the Consumer's final commit waits 5 s), then for
#: leaving the group (its LeaveGroup 3 s): stalled brokers held it 30 s for each.
CLOSE_ACK_WAIT_S = 5.0
CLOSE_LEAVE_WAIT_S = 3.0
#: The longest close() from another thread waits for the call that thread is inside to
#: end (a callback it runs).
CLOSE_WAIT_S = 30.0
#: The longest a share consumer collected, or left open at exit, without close() waits
#: for its releases and for leaving the group, together (as the Consumer's farewell).
UNCLOSED_WAIT_S = 5.0

Key = Tuple[str, int]

#: Serials of the poll()s that hand records out, process-wide (a message of another share
#: consumer never names a delivery of this one): a record's delivery tag.
_DELIVERIES = itertools.count(1)


class Held(NamedTuple):
    """A record handed out and not acknowledged yet."""
    node: int          # the broker it was acquired from
    delivery: int      # the delivery tag of the poll() that handed it out


class Given(NamedTuple):
    """An acknowledgement given and not handed to the I/O thread yet."""
    node: int
    kind: int          # AcknowledgeType value
    delivery: int


class ShareConsumer(ClientBase):
    """A KIP-932 share group member configured with librdkafka property names.

    ``ShareConsumer(config)``: ``group.id`` is required; ``share.acknowledgement.mode``
    is ``implicit`` (default: the records of a poll() are accepted by the next poll(),
    commit_sync(), commit_async() or close()) or ``explicit`` (each record is given
    its :class:`AcknowledgeType` with :meth:`acknowledge`). Consumer-group properties
    that do not apply to a share group (``group.protocol``, ``enable.auto.commit``,
    ``auto.offset.reset``, ``isolation.level``, ``session.timeout.ms``, ...) raise
    ValueError, as in confluent-kafka. Any thread may use it, one at a time: a call while
    another thread is inside one raises :class:`ConcurrentModificationException`, except
    :meth:`acknowledge` and :meth:`acknowledge_offset` (worker threads acknowledge while
    the polling thread is inside a call), and :meth:`close`, which ends that call (a
    waiting poll() returns an empty batch).
    """

    _role = "consumer"
    _work = "consumed"
    _closed_text = "Share consumer closed"
    #: librdkafka's share consumer is a consumer handle (statistics "type")
    _stats_type = "consumer"
    _stats_requests = CONSUMER_REQUESTS + ("ShareGroupHeartbeat", "ShareFetch",
                                           "ShareAcknowledge")

    def __init__(self, config: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        if config is not None and not isinstance(config, Mapping):
            raise TypeError(f"expected configuration dict, not {type(config).__name__}")
        if config is None and not kwargs:   # as confluent-kafka's, and the other clients
            raise TypeError("expected configuration dict")
        given = {_canonical(k): v for k, v in (config or {}).items()}
        given.update((_canonical(k, keyword=True), v) for k, v in kwargs.items())
        if not given.get("group.id"):
            raise ValueError("Failed to create consumer: group.id must be set")
        for name in NOT_APPLICABLE:
            if name in given:
                raise ValueError(f"Failed to create share consumer: `{name}` is not "
                                 f"applicable for share consumer")
        # A share group's membership is the broker's, as with KIP-848's protocol: the
        # classic protocol's rules (max.poll.interval.ms >= session.timeout.ms) are not
        # for it.
        cfg = self._init_client({**(config or {}), "group.protocol": "consumer"}, kwargs)
        self._explicit_mode = cfg["share.acknowledgement.mode"] == "explicit"
        self._max_records: int = cfg["max.poll.records"]
        self._ready = threading.Event()
        runner = CallRunner(self._cluster)
        self._member = member = ShareMember(cfg, runner, lambda a: None, lambda e: None)
        self._fetcher = fetcher = ShareFetcher(cfg, runner, member, self._ready.set)
        member.on_assignment = fetcher.set_assignment
        member.report = fetcher.report
        self._io.add_tick(member.tick)
        self._io.add_tick(fetcher.tick)
        self._subscribed: Set[str] = set()
        subscribed = self._subscribed
        self._cluster.metadata.in_use = lambda topics: topics & subscribed
        self._subscription: List[str] = []
        #: records the last poll()s handed out with no acknowledgement yet: by partition,
        #: offset -> where it came from and which poll() handed it out
        self._in_flight: Dict[Key, Dict[int, Held]] = {}
        #: explicit mode: records acknowledged, not yet handed to the I/O thread: by
        #: partition, offset -> the acknowledgement
        self._acked: Dict[Key, Dict[int, Given]] = {}
        #: decoded messages fetched but not handed out yet (over max.poll.records), with
        #: the broker each came from
        self._backlog: List[Tuple[int, ConsumedRecord]] = []
        #: GAP acknowledgements (offsets acquired with no record) for the next send
        self._gaps: List[AckBatch] = []
        self._ack_cb: Optional[AckCommitCallback] = None
        self._guard = threading.Lock()
        #: the records in flight and the acknowledgements given (acknowledge() needs no
        #: guard: a worker thread acknowledges while another thread polls or commits)
        self._book = threading.Lock()
        self._owner: Optional[int] = None
        self._in_callback = False
        #: close() has begun (any thread): a call inside returns at once, none may start
        self._closing = False
        #: set by __exit__ for an exception: close() releases what it would accept
        self._failed = False
        self._start_client()

    # -- plumbing ----------------------------------------------------------------------
    def _refuse(self) -> NoReturn:
        if self._forked or "_io" not in vars(self):
            super()._refuse()
        raise IllegalStateException(self._closed_text)

    @contextmanager
    def _using(self) -> Iterator[None]:
        """One thread's call: IllegalStateException once closed or from the
        acknowledgement commit callback; ConcurrentModificationException while another
        thread is inside a call."""
        me = threading.get_ident()
        self._check_usable(me)
        if not self._guard.acquire(blocking=False):
            raise ConcurrentModificationException(
                f"Share consumer is not safe for multi-threaded access: "
                f"currentThread(id: {me}) otherThread(id: {self._owner})")
        self._owner = me
        try:
            yield
        finally:
            self._owner = None
            self._guard.release()

    def _serve_outcomes(self) -> None:
        """Run the acknowledgement commit callback for each answered acknowledgement
        (application thread); an exception it raises goes on to the caller."""
        outcomes = self._fetcher.take_outcomes()
        cb = self._ack_cb
        if cb is None:
            return
        for i, outcome in enumerate(outcomes):
            offsets = {TopicPartition(t, p): set(o) for (t, p), o in outcome.offsets.items()}
            exc = None if outcome.error is None else KafkaException(outcome.error)
            self._in_callback = True
            try:
                cb(offsets, exc)
            except Exception:
                with self._fetcher.lock:   # the rest are served by the next call
                    self._fetcher.outcomes.extendleft(reversed(outcomes[i + 1:]))
                raise
            finally:
                self._in_callback = False

    def _take_acks(self, closing: bool = False, dropped: bool = False) -> List[AckBatch]:
        """The acknowledgements to send: in implicit mode every record handed out is
        accepted; in explicit mode those the application acknowledged (``closing``:
        the others released; ``dropped``, never closed: the others released in both
        modes). The GAP acknowledgements go with them."""
        chosen: Dict[Tuple[int, Key], List[Tuple[int, int]]] = {}
        with self._book:
            given, self._acked = self._acked, {}
            handed: Dict[Key, Dict[int, Held]] = {}
            if not self._explicit_mode or closing or dropped:
                handed, self._in_flight = self._in_flight, {}
        for key, acked in given.items():
            for offset, ack in acked.items():
                chosen.setdefault((ack.node, key), []).append((offset, ack.kind))
        kind = int(WireAckType.RELEASE if self._explicit_mode or dropped
                   else WireAckType.ACCEPT)
        for key, offsets in handed.items():
            for offset, held in offsets.items():
                chosen.setdefault((held.node, key), []).append((offset, kind))
        batches = [AckBatch(node, key, _ranges(offsets))
                   for (node, key), offsets in chosen.items()]
        batches.extend(self._gaps)
        self._gaps = []
        return batches

    def _decode(self, chunk: ShareChunk) -> List[ConsumedRecord]:
        """The acquired records of a chunk, each with its delivery count; the acquired
        offsets that hold no record become GAP acknowledgements (RELEASE past what was
        decoded)."""
        acquired = sorted(chunk.acquired)
        firsts = [a[0] for a in acquired]
        out: List[ConsumedRecord] = []
        decoded_to = -1
        try:
            decode_chunk(Chunk(chunk.part, 0, chunk.batches, acquired[0][0], None, 0, 0), out)
            if chunk.batches:
                decoded_to = chunk.batches[-1].last_offset
        except BudgetSpent as spent:
            decoded_to = spent.offset - 1
        except Exception as exc:   # a malformed record: what came before it is kept
            self._fetcher.report(KafkaError(KafkaError._BAD_MSG, f"{chunk.part.topic} "
                                            f"[{chunk.part.partition}]: {exc}"))
            decoded_to = out[-1]._offset if out else -1
        kept: List[ConsumedRecord] = []
        if len(acquired) == 1:       # the usual answer: one range, one delivery count
            first, last, count = acquired[0]
            delivered = count if count > 0 else None
            for msg in out:
                if msg._offset <= last:
                    msg._delivery_count = delivered
                    kept.append(msg)
        else:
            for msg in out:
                i = bisect.bisect_right(firsts, msg._offset) - 1
                if i >= 0 and msg._offset <= acquired[i][1]:
                    msg._delivery_count = acquired[i][2] if acquired[i][2] > 0 else None
                    kept.append(msg)
        offsets = [m._offset for m in kept]
        gaps: List[AckRange] = []
        for first, last, _count in acquired:
            lo = bisect.bisect_left(offsets, first)
            hi = bisect.bisect_right(offsets, last)
            if hi - lo == last - first + 1:
                continue             # a record at every offset (offsets only go up)
            at = first
            for off in offsets[lo:hi] + [last + 1]:
                if off > at:
                    gaps.extend(_holes(at, off - 1, decoded_to))
                at = off + 1
        if gaps:
            self._gaps.append(AckBatch(chunk.node, chunk.part.key, gaps, reported=False))
        return kept

    # -- subscription --------------------------------------------------------------------
    def subscribe(self, topics: List[str]) -> None:
        """Set the subscription to ``topics`` (not incremental: it replaces the current
        one; an empty list unsubscribes). ValueError for an empty or duplicate name, a
        regular expression (``^...``: share groups have no pattern subscription), or a
        name outside Kafka's rules for topic names (ASCII letters, digits, ``.``, ``_``
        and ``-``, at most 249)."""
        with self._using():
            if isinstance(topics, (str, bytes)) or not hasattr(topics, "__iter__"):
                raise TypeError("topics must be a list of str")
            names = list(topics)
            for name in names:
                if not isinstance(name, str):
                    raise TypeError("topics must be a list of str")
                if not name:
                    raise ValueError("Failed to subscribe: Local: Invalid argument or "
                                     "configuration (empty topic name)")
                if name.startswith("^"):
                    # A share group subscribes to names only (ShareGroupHeartbeat has
                    # no pattern): taken as a name, it never matched a topic.
                    raise ValueError(f"Failed to subscribe: Local: Invalid argument or "
                                     f"configuration (share groups take topic names, "
                                     f"not regular expressions: {name!r})")
                check_topic_name(name)
                # Share groups are Kafka's (4.1 on) and the test cluster's, whose topics
                # keep these rules: another name never matched a topic.
                invalid = topic_name_error(name)
                if invalid is not None:
                    raise ValueError(f"Failed to subscribe: Local: Invalid argument or "
                                     f"configuration ({invalid.str()})")
            if len(set(names)) != len(names):
                raise ValueError("Failed to subscribe: Local: Invalid argument or "
                                 "configuration (duplicate topic names)")
            if not names:
                self._unsubscribe()
                return
            self._subscription = names
            self._subscribed.clear()
            self._subscribed.update(names)
            self._io.call_soon(self._cluster.want_topics, list(names))
            self._member.subscribe(sorted(names))

    def unsubscribe(self) -> None:
        """Drop the subscription and leave the share group."""
        with self._using():
            self._unsubscribe()

    def _unsubscribe(self) -> None:
        self._subscription = []
        self._subscribed.clear()
        self._member.subscribe(None)

    def subscription(self) -> List[str]:
        """The subscribed topics, as given to subscribe()."""
        with self._using():
            return list(self._subscription)

    # -- consuming -----------------------------------------------------------------------
    def poll(self, timeout: Optional[float] = -1) -> Messages:
        """A batch of up to ``max.poll.records`` messages, waiting at most ``timeout``
        seconds (-1: until some come) for the first; an empty Messages when none came.

        The acknowledgements of the previous poll() go first (implicit mode: all of its
        records accepted). Error events come as messages whose ``error()`` is set.
        IllegalStateException when not subscribed, or in explicit mode while a record
        of the previous poll() has no acknowledgement."""
        deadline = deadline_after(timeout)
        with self._using():
            if not self._subscription:
                raise IllegalStateException("Consumer is not subscribed to any topics")
            if self._explicit_mode and self._holding():
                raise IllegalStateException(
                    "All records of the previous poll() must be acknowledged before the "
                    "next poll() in explicit acknowledgement mode")
            self._member.polled(inside=True)
            try:
                out = self._poll(deadline)
                try:
                    self._prepare(out)
                except BaseException:
                    # Ctrl-C in a deserializer, say: the batch goes back whole to the
                    # next call (kept as handed out, the next poll() accepted it unseen)
                    self._put_back(out)
                    raise
                return out
            finally:
                self._member.polled(inside=False)

    def _holding(self) -> int:
        """How many records handed out have no acknowledgement yet."""
        with self._book:
            return sum(len(offsets) for offsets in self._in_flight.values())

    def _prepare(self, messages: Messages) -> None:
        """A subclass's work on a batch before poll() returns it (under the call's
        guard); what it raises puts the batch back for the next call."""

    def _put_back(self, messages: Messages) -> None:
        """Undo handing ``messages`` out: their records first in line for the next
        poll(), their error events first among the errors."""
        back: List[Tuple[int, ConsumedRecord]] = []
        errors: List[KafkaError] = []
        with self._book:
            for msg in messages:
                record = cast(ConsumedRecord, msg)    # or an error event: in no book
                offsets = self._in_flight.get((record._topic, record._partition))
                if offsets is not None and record._offset in offsets:
                    back.append((offsets.pop(record._offset).node, record))
                else:
                    error = msg.error()
                    if msg._offset is None and error is not None:
                        errors.append(error)
            self._in_flight = {key: offsets for key, offsets in self._in_flight.items()
                               if offsets}
        self._backlog[:0] = back
        with self._fetcher.lock:
            self._fetcher.errors.extendleft(reversed(errors))

    def _poll(self, deadline: float) -> Messages:
        """poll()'s work, once its checks passed."""
        acks = self._take_acks()
        if acks:
            self._fetcher.acknowledge(acks, now=False)
        out: List[Message] = []
        room = self._max_records
        delivery: Optional[int] = None     # this call's tag, once it hands out a record
        while True:
            self._ready.clear()
            if self._closing:        # close() from another thread: what was fetched
                return Messages()    # stays to be released
            # The callbacks run while this call holds no record yet: what one raises
            # leaves every fetched record to the next call (taken, and accepted by the
            # next poll() unseen, they were lost)
            self._serve_client_events()
            self._serve_outcomes()
            if self._closing:        # close() began while a callback of this call ran
                return Messages()
            for error in self._fetcher.take_errors():
                out.append(error_event(error))
            while room > 0 and (self._backlog or self._fetcher.chunks):
                if not self._backlog:
                    chunk = self._fetcher.take_chunk()
                    if chunk is None:
                        break
                    node = chunk.node
                    self._backlog.extend((node, m) for m in self._decode(chunk))
                    continue
                taken, self._backlog = self._backlog[:room], self._backlog[room:]
                if delivery is None:
                    delivery = next(_DELIVERIES)
                with self._book:
                    in_flight = self._in_flight
                    for node, msg in taken:
                        key = (msg._topic, msg._partition)
                        offsets = in_flight.get(key)
                        if offsets is None:
                            offsets = in_flight[key] = {}
                        offsets[msg._offset] = Held(node, delivery)
                        msg._delivery_tag = delivery
                        out.append(msg)
                room -= len(taken)
            if self._gaps:
                self._fetcher.acknowledge(self._take_gaps(), now=False)
            if out or time.monotonic() >= deadline:
                break
            try:
                self._cluster.wait_for(self._ready, min(deadline, time.monotonic() + 0.5))
            except KafkaException:
                if self._closing:    # _DESTROY: closed without waiting for this call
                    return Messages()
                raise
        return Messages(out)

    def _take_gaps(self) -> List[AckBatch]:
        gaps, self._gaps = self._gaps, []
        return gaps

    # -- acknowledging -------------------------------------------------------------------
    def acknowledge(self, message: Message,
                    ack_type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Explicit mode: record how the broker is to treat a message poll() returned
        (sent with the next poll(), commit_sync() or commit_async()).
        IllegalStateException outside explicit mode, for a message not in flight, and for
        a message of an earlier delivery of a record the last poll() delivered again
        (nothing is sent for it). A message poll() did not return (built, or a pickled
        copy) is taken by its topic, partition and offset, as :meth:`acknowledge_offset`."""
        if not isinstance(message, Message):
            raise TypeError("message must be a Message")
        with self._acknowledging():
            kind = _ack_kind(ack_type)
            topic, partition, offset = message._topic, message._partition, \
                message._offset
            if topic is None or partition is None or offset is None:
                raise ValueError("Failed to acknowledge message: Local: Invalid argument "
                                 "or configuration")
            self._mark(topic, partition, offset, kind, "message", message._delivery_tag)

    def acknowledge_offset(self, topic: str, partition: int, offset: int,
                           ack_type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """:meth:`acknowledge` by topic, partition and offset."""
        if not isinstance(topic, str):
            raise TypeError("topic must be a str")
        if isinstance(partition, bool) or isinstance(offset, bool) or \
                not isinstance(partition, int) or not isinstance(offset, int):
            raise TypeError("partition and offset must be integers")
        with self._acknowledging():
            kind = _ack_kind(ack_type)
            if partition < 0 or offset < 0:
                raise ValueError("Failed to acknowledge offset: Local: Invalid argument "
                                 "or configuration")
            self._mark(topic, partition, offset, kind, "offset")

    @contextmanager
    def _acknowledging(self) -> Iterator[None]:
        """acknowledge()'s rules: any thread, even while another is inside a call
        (IllegalStateException from the acknowledgement commit callback, once closed or
        closing)."""
        self._check_usable(threading.get_ident())
        with self._book:
            yield

    def _check_usable(self, me: int) -> None:
        """IllegalStateException from the acknowledgement commit callback (thread ``me``
        inside it) and once closed or closing."""
        if self._in_callback and self._owner == me:
            raise IllegalStateException(
                "Share consumer methods are not accessible from user-defined "
                "acknowledgement commit callback")
        self._check_open()
        if self._closing:
            raise IllegalStateException(self._closed_text)

    def _mark(self, topic: str, partition: int, offset: int, kind: int, what: str,
              delivery: Optional[int] = None) -> None:
        """Note an acknowledgement of the record in flight at ``offset``; ``delivery``:
        the tag of the message acknowledged (None: whichever delivery is in flight)."""
        def refused(reason: str) -> IllegalStateException:
            return IllegalStateException(f"Failed to acknowledge {what}: Local: Erroneous "
                                         f"state ({reason})")

        if not self._explicit_mode:
            raise refused("not in explicit acknowledgement mode")
        key = (topic, partition)
        waiting = self._in_flight.get(key, {})
        # in flight, or acknowledged again before it was sent: this one counts
        current = waiting.get(offset) or self._acked.get(key, {}).get(offset)
        if current is None:
            raise refused(f"{topic} [{partition}] offset {offset} is not in flight")
        if delivery is not None and delivery != current.delivery:
            # Sent, it would settle the delivery in flight, which the application has
            # not seen processed (Kafka's client: only the last poll()'s records).
            raise refused(f"{topic} [{partition}] offset {offset}: the message is of "
                          f"another delivery of the record (poll() #{delivery}) than the "
                          f"one in flight (poll() #{current.delivery}): acknowledge the "
                          f"message that poll() returned")
        if waiting.pop(offset, None) is not None and not waiting:
            del self._in_flight[key]
        self._acked.setdefault(key, {})[offset] = Given(current.node, kind, current.delivery)

    def commit_sync(self, timeout: float = 60) -> Dict[TopicPartition,
                                                        Optional[KafkaException]]:
        """Send the pending acknowledgements now and wait (at most ``timeout`` seconds,
        -1: no limit) for the brokers' answers: ``{TopicPartition: None or
        KafkaException}``, empty when there were none."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(f"must be real number, not {type(timeout).__name__}")
        deadline = deadline_after(timeout)
        with self._using():
            waiter = self._fetcher.wait_for_all(self._take_acks())
            # in slices: close() from another thread ends the wait
            while not self._cluster.wait_for(waiter.done,
                                             min(deadline, time.monotonic() + 0.2)):
                if self._closing or time.monotonic() >= deadline:
                    break
            self._serve_outcomes()
            results: Dict[TopicPartition, Optional[KafkaException]] = {}
            for key in waiter.keys:
                tp = TopicPartition(*key)
                if key in waiter.results:
                    error = waiter.results[key]
                    results[tp] = None if error is None else KafkaException(error)
                elif self._closing:
                    results[tp] = KafkaException(client_error(
                        KafkaError._DESTROY, "the share consumer was closed while "
                        "commit_sync() waited for the answer"))
                else:
                    results[tp] = KafkaException(client_error(
                        KafkaError._TIMED_OUT, "no answer to the acknowledgement in time"))
            return results

    def commit_async(self) -> None:
        """Send the pending acknowledgements now; their outcome goes to the callback of
        :meth:`set_acknowledgement_commit_callback`."""
        with self._using():
            acks = self._take_acks()
            if acks:
                self._fetcher.acknowledge(acks, now=True)
            self._serve_outcomes()

    def set_acknowledgement_commit_callback(
            self, callback: Optional[AckCommitCallback]) -> None:
        """Run ``callback(offsets, exception)`` (offsets: ``{TopicPartition: set of
        offsets}``; exception: KafkaException or None) on the application thread, from
        poll(), commit_sync(), commit_async() or close(), for each acknowledgement the
        brokers answer. None clears it."""
        if callback is not None and not callable(callback):
            raise TypeError("callback must be callable or None")
        with self._using():
            self._ack_cb = callback

    # -- closing -------------------------------------------------------------------------
    def close(self) -> None:
        """Send the pending acknowledgements (implicit mode: the last poll()'s records
        accepted; explicit mode: records without an acknowledgement released, as are
        records fetched and not handed out), close the share sessions, leave the group,
        then stop the I/O thread, waiting at most 5 s for the brokers' answers to the
        first two and 3 s for the leave, as the Consumer's close(). A second close()
        does nothing. From another thread
        than one inside a call, it ends that call first (a waiting poll() returns an
        empty batch, commit_sync() its answers so far), waiting at most 30 s for a
        callback that call runs."""
        if self._closed:
            if self._forked:
                self._refuse()
            return
        me = threading.get_ident()
        if self._owner == me:        # from a callback run by a call of this thread
            raise IllegalStateException(
                "Share consumer methods are not accessible from user-defined "
                "acknowledgement commit callback" if self._in_callback else
                "close() cannot be called from a callback of a call on this consumer")
        self._closing = True
        self._ready.set()            # a poll() waiting in another thread sees it now
        if not self._guard.acquire(timeout=CLOSE_WAIT_S):
            # Still inside a callback of another thread's call: stop without the last
            # acknowledgements (the brokers release the records with the sessions).
            self._shutdown()
            return
        failure: Optional[Exception] = None
        try:
            if self._closed:         # another thread's close() came first
                return
            self._owner = me
            acks = self._take_acks(closing=True, dropped=self._failed)
            acks.extend(self._unhanded())
            self._finish(acks, CLOSE_ACK_WAIT_S, CLOSE_LEAVE_WAIT_S)
            try:
                self._serve_outcomes()
            except Exception as exc:  # close first, raise after
                failure = exc
            self._shutdown()
        finally:
            self._owner = None
            self._guard.release()
        if failure is not None:
            raise failure

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        """close(); left by an exception, the records of the last poll() without an
        acknowledgement are released, not accepted (their processing may be what
        failed): they are delivered again."""
        if exc_type is not None:
            self._failed = True
        self.close()

    def _finish(self, acks: List[AckBatch], sessions_s: float, leave_s: float,
                total_s: Optional[float] = None) -> None:
        """Send ``acks`` with the closing of the share sessions, then leave the group,
        waiting at most ``sessions_s`` seconds for the first, ``leave_s`` for the second
        and ``total_s`` (default: their sum) for both."""
        fetcher, member, io = self._fetcher, self._member, self._io
        closed = threading.Event()
        left = threading.Event()

        def close_sessions() -> None:
            # The last acknowledgements and the closing together: none may go in a
            # request of its own first, and no fetch may go after them.
            if acks:
                fetcher.acknowledge(acks, now=True)
            fetcher.close_sessions(closed.set)

        io.call_soon(close_sessions)
        end = time.monotonic() + (sessions_s + leave_s if total_s is None else total_s)
        self._cluster.wait_for(closed, min(end, time.monotonic() + sessions_s))
        member.leave(left.set)
        self._cluster.wait_for(left, min(end, time.monotonic() + leave_s))

    def _unhanded(self) -> List[AckBatch]:
        """RELEASE for every record acquired for this member and never handed out."""
        out: List[AckBatch] = []
        for node, msg in self._backlog:
            out.append(AckBatch(node, (msg._topic, msg._partition), [
                AckRange(msg._offset, msg._offset, WireAckType.RELEASE)], reported=False))
        self._backlog = []
        for chunk in self._fetcher.take_all_chunks():
            out.append(AckBatch(chunk.node, chunk.part.key, [
                AckRange(f, last, WireAckType.RELEASE) for f, last, _n in chunk.acquired],
                reported=False))
        return out

    def _on_shutdown(self) -> Callable[[], None]:
        self._ready.set()
        io, member, fetcher = self._io, self._member, self._fetcher

        def stop() -> None:
            io.remove_tick(member.tick)
            io.remove_tick(fetcher.tick)
        return stop

    def _unclosed(self) -> None:
        # Collected or left open at exit without close(), maybe on an exception's way
        # out: the acknowledgements the application gave are sent, every other record
        # it holds is released (librdkafka holds them until their locks expire: the same
        # redelivery, later); the sessions closed and the group left in bounded time,
        # without callbacks; one warning says how many records come again.
        handed = self._holding()
        unhanded = self._unhanded()
        fetched = sum(r.last - r.first + 1 for batch in unhanded for r in batch.ranges)
        acks = self._take_acks(dropped=True) + unhanded
        if handed or fetched:
            self._log.warning(
                "ShareConsumer dropped without close(): %d acquired records released "
                "for redelivery (%d returned by poll() and not acknowledged, %d fetched "
                "and not returned): use close() to acknowledge them", handed + fetched,
                handed, fetched)
        self._finish(acks, UNCLOSED_WAIT_S, UNCLOSED_WAIT_S, UNCLOSED_WAIT_S)

    def _at_exit(self) -> None:
        self._stop_unclosed()


def _canonical(name: Any, keyword: bool = False) -> Any:
    """A configuration key's property name (an alias's too; a keyword argument's
    underscores as dots when that names one); as given when it names none (the
    configuration's own parsing then says so)."""
    candidates = [name, name.replace("_", ".")] if keyword and isinstance(name, str) \
        else [name]
    for candidate in candidates:
        try:
            return describe(candidate).name
        except (KafkaException, TypeError, AttributeError):
            continue
    return name


def _ack_kind(ack_type: Any) -> int:
    """An AcknowledgeType argument's value (TypeError for what is not an int, ValueError
    for an int that is not ACCEPT, RELEASE or REJECT)."""
    if isinstance(ack_type, bool) or not isinstance(ack_type, int):
        raise TypeError("ack_type must be an AcknowledgeType")
    if ack_type not in (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE,
                        AcknowledgeType.REJECT):
        raise ValueError(f"Invalid ack_type {ack_type}: ACCEPT, RELEASE or REJECT")
    return int(ack_type)


def _ranges(offsets: List[Tuple[int, int]]) -> List[AckRange]:
    """Runs of consecutive offsets with the same acknowledgement, as ranges."""
    out: List[AckRange] = []
    first = last = kind = -1
    for offset, this in sorted(offsets):
        if offset == last + 1 and this == kind:
            last = offset
            continue
        if first >= 0:
            out.append(AckRange(first, last, kind))
        first = last = offset
        kind = this
    if first >= 0:
        out.append(AckRange(first, last, kind))
    return out


def _holes(first: int, last: int, decoded_to: int) -> List[AckRange]:
    """Acquired offsets ``first..last`` that brought no record: GAP up to
    ``decoded_to`` (the batches held nothing there), RELEASE past it (not read: they go
    back to the group)."""
    out: List[AckRange] = []
    if first <= min(last, decoded_to):
        out.append(AckRange(first, min(last, decoded_to), WireAckType.GAP))
    if last > decoded_to:
        out.append(AckRange(max(first, decoded_to + 1), last, WireAckType.RELEASE))
    return out

