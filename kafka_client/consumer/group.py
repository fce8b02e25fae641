"""Consumer group membership (the classic protocol) and offset storage, on the I/O thread.

:class:`GroupCoordinator` finds the group's coordinator, joins the group for a
subscription (JoinGroup, SyncGroup; the leader runs the assignor), keeps the membership
alive with heartbeats independent of the application, leaves it, and commits and fetches
offsets (also for consumers that assign partitions themselves).

The application thread sees the group only through :meth:`GroupCoordinator.serve`, which
``poll()``/``consume()`` call: it runs the rebalance callbacks and applies assignments,
then tells the I/O thread the application is done, so an eager rejoin waits for the
revocation as librdkafka's does.

The group and the consumer meet at two explicit interfaces: :class:`GroupMember`, what
the consumer gives the group for each application-thread call (the assignment, stored
offsets, assign/unassign; the group keeps none, because the I/O thread holds the group
and must not hold the consumer), and :class:`OffsetStore`, the fetcher's positions as the
I/O thread's auto-commit sees them.

Rebalance protocols:

* eager (range, roundrobin): on every rebalance the whole assignment is revoked first,
  then the group is joined again and the new assignment handed out;
* cooperative (cooperative-sticky, KIP-429): the member keeps its partitions while it
  rejoins (it reports them as owned); after SyncGroup only the partitions that move away
  are revoked, and a member that revoked any joins once more so the group can hand them
  to their new owner. Partitions that stay are never revoked.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from typing import (Any, Callable, Deque, Dict, Iterable, List, Optional, Protocol, Set,
                    Tuple)

from kafka_client._backoff import retry_backoff, retry_delay
from kafka_client._cluster.metadata import coordinator_answer
from kafka_client._cluster.telemetry import Sample, interval_samples
from kafka_client._interval import IntervalStat
from kafka_client._net.connection import NO_ANSWER
from kafka_client.consumer.assignors import (
    MemberSubscription,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    get_assignor,
)
from kafka_client.errors import KafkaError, KafkaException, broker_code, client_error
from kafka_client.types import (OFFSET_INVALID, TopicPartition, committed_metadata,
                                metadata_to_commit)
from kafka_proto.enums import CoordinatorType
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    ApiKey,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

__all__ = ["GroupCoordinator", "GroupMetadata", "GroupMember", "OffsetStore"]

_log = logging.getLogger("kafka_client.consumer.group")

class ErrorDeliverer(Protocol):
    """Hands a client-level error (about ``topic``, if given) to the application's
    poll()/consume()."""

    def __call__(self, err: KafkaError, topic: Optional[str] = None) -> None: ...


PROTOCOL_TYPE = "consumer"
#: How often the coordinator lookup looks for a ready connection when none comes up (one
#: becoming ready wakes it at once: Cluster.retry_when_ready)
FIND_POLL_S = 0.05
#: How long the leader waits for the metadata of other members' topics before it assigns
#: with what it knows (the answer that brings them wakes it at once)
LEAD_METADATA_WAIT_S = 5.0
#: How often a commit made during the member's join looks for its connection to come up
SIDE_COMMIT_POLL_S = 0.01


def _first_version_with(request: Any, field: str) -> int:
    """The first version of ``request`` (a generated class) that has ``field``."""
    return next(spec.min_version for spec in request.FIELDS if spec.name == field)


#: What a static member (group.instance.id, KIP-345) needs of the coordinator: the
#: requests that carry the instance id, from the version that has the field (Apache
#: Kafka 2.3); older versions cannot say it.
_STATIC_MEMBER_NEEDS = tuple((request.API_KEY, request.API_NAME,
                              _first_version_with(request, "group_instance_id"))
                             for request in (JoinGroupRequest, SyncGroupRequest,
                                             HeartbeatRequest))

#: errors that mean "find the coordinator again"
COORDINATOR_ERRORS = frozenset((ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                ErrorCode.NOT_COORDINATOR))
#: ... and the local errors of a request that met no coordinator: look it up again
COORDINATOR_LOST = COORDINATOR_ERRORS | NO_ANSWER

#: The coordinator's refusals (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) of the member's
#: joins and heartbeats in a row, each after a lookup that named it, from which the
#: application is told (once): one or two follow a move, the lookups answered by a broker
#: that has not heard of it yet.
COORDINATOR_REFUSALS_TOLD = 5

#: How long a leave keeps trying to reach the group's coordinator (close() waits 3 s):
#: a member whose leave is lost keeps its partitions from the others until its session
#: times out (45 s by default).
LEAVE_BUDGET_S = 2.5

# Membership states.
UNJOINED = "UNJOINED"          # not a member (or must join again)
WAIT_REVOKE = "WAIT_REVOKE"    # eager: the application revokes before we rejoin
JOINING = "JOINING"            # JoinGroup in flight
SYNCING = "SYNCING"            # SyncGroup in flight (or the leader's assignment pending)
STABLE = "STABLE"              # member with an assignment; heartbeating

#: how long a join waits for the first metadata of a subscription's named topics
_JOIN_LOOKUP_WAIT = 2.0

# The callbacks queued when max.poll.interval.ms passed wait for the call after the one
# that returns the error.
_HOLD_NEW = 1
_HOLD_ARMED = 2

Key = Tuple[str, int]


class GroupMember(Protocol):
    """What the group needs from its consumer on the application thread. The consumer
    hands one to :meth:`GroupCoordinator.serve`, ``unsubscribe()`` and ``close()`` for
    that call only."""

    #: the first argument of the rebalance callbacks (the application's Consumer)
    consumer: Any

    def assigned(self) -> Set[Key]:
        """The partitions assigned now."""
        ...

    def assignment_changes(self) -> int:
        """How many assign()-family calls were made so far: a rebalance callback that
        changed the assignment itself is not overridden."""
        ...

    def stored_offsets(self, leaving: bool = False) -> List[TopicPartition]:
        """Stored offsets beyond the last commit; with ``leaving``, every stored one
        (the partitions leave the assignment)."""
        ...

    def hold(self, partitions: List[TopicPartition]) -> None:
        """Stop fetching and handing out these partitions' messages: their revocation
        begins, and no other thread may get them while it runs."""
        ...

    def assign(self, partitions: List[TopicPartition]) -> None: ...

    def unassign(self) -> None: ...

    def incremental_assign(self, partitions: List[TopicPartition]) -> None: ...

    def incremental_unassign(self, partitions: List[TopicPartition]) -> None: ...


class OffsetStore(Protocol):
    """The positions the group commits from and records commits into (the fetcher;
    any thread)."""

    read_committed: bool

    def stored_offsets(self, leaving: bool = False) -> List[TopicPartition]:
        """Stored offsets beyond the last commit; with ``leaving``, every stored one
        (the partitions leave the assignment)."""
        ...

    def set_committed(self, offsets: Dict[Key, int]) -> None:
        """These offsets are committed now."""
        ...

    def assigned_keys(self) -> Set[Key]:
        """The partitions assigned now."""
        ...


def _first_error(tps: List[TopicPartition]) -> Optional[KafkaError]:
    return next((tp.error for tp in tps if tp.error is not None), None)


class GroupMetadata:
    """What a transactional producer needs to commit offsets for this group
    (``consumer_group_metadata()``)."""

    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id")

    def __init__(self, group_id: str, generation_id: int, member_id: str,
                 group_instance_id: Optional[str]) -> None:
        self.group_id = group_id
        self.generation_id = generation_id
        self.member_id = member_id
        self.group_instance_id = group_instance_id

    def __repr__(self) -> str:
        return (f"GroupMetadata(group_id={self.group_id!r}, generation_id="
                f"{self.generation_id}, member_id={self.member_id!r})")


class _Pending:
    """A request waiting for the coordinator to be known and connected."""

    __slots__ = ("send", "fail", "deadline")

    def __init__(self, send: Callable[[Any], None], fail: Callable[[KafkaError], None],
                 deadline: float) -> None:
        self.send = send
        self.fail = fail
        self.deadline = deadline


class GroupCoordinator:
    """Group membership and offsets for one consumer (I/O thread unless noted)."""

    def __init__(self, config: Any, cluster: Any, io: Any, offsets: OffsetStore,
                 wake_app: Callable[[], None],
                 deliver_error: ErrorDeliverer) -> None:
        self.config = config
        self.cluster = cluster
        self.io = io
        self.offsets = offsets
        self.wake_app = wake_app
        self.deliver_error = deliver_error
        self.log = config.logger_for(_log.name)
        self.group_id: str = config["group.id"]
        self.instance_id: Optional[str] = config["group.instance.id"]
        self.session_timeout_ms = int(config["session.timeout.ms"])
        self.heartbeat_interval = config["heartbeat.interval.ms"] / 1000.0
        self.max_poll_interval = config["max.poll.interval.ms"] / 1000.0
        self.retry_backoff = config["retry.backoff.ms"] / 1000.0
        self.retry_backoff_max = config["retry.backoff.max.ms"] / 1000.0
        self.request_timeout = cluster.settings.request_timeout
        self.auto_commit = bool(config["enable.auto.commit"])
        interval = config["auto.commit.interval.ms"]
        self.auto_commit_interval = interval / 1000.0 if interval > 0 else 0.0
        self.rack: Optional[str] = config["client.rack"] or None
        self.assignors = [get_assignor(n) for n in config["partition.assignment.strategy"]]
        self.cooperative = self.assignors[0].rebalance_protocol == "COOPERATIVE"
        # coordinator
        self.coord_id: Optional[int] = None
        #: when the coordinator was last found or lost (the statistics' cgrp stateage)
        self.coord_since = time.monotonic()
        #: how often the coordinator is asked for again while one is known, and when next
        self.coord_query_interval = config["coordinator.query.interval.ms"] / 1000.0
        self._next_coord_query = float("inf")
        self._finding = False
        self._find_after = 0.0
        #: KIP-580: the waits between failed coordinator lookups, and between failed
        #: joins, double up to retry.backoff.max.ms; each starts over on a success
        self._find_backoff = retry_backoff(config)
        self._join_backoff = retry_backoff(config)
        #: ... and so do the rejoins after a lost membership, until it lasts: a successful
        #: heartbeat starts them over (a join that succeeds may be lost at once again)
        self._rejoin_backoff = retry_backoff(config)
        #: ... and so do the lookups after the coordinator refused joins or heartbeats,
        #: until it accepts one: a lookup that names it again is no success (its
        #: failures: the refusals in a row, see COORDINATOR_REFUSALS_TOLD)
        self._refusal_backoff = retry_backoff(config)
        self._pending: List[_Pending] = []
        # membership
        self.state = UNJOINED
        self.member_id = ""
        self.generation = -1
        self._assigned_in = GroupMetadata(self.group_id, -1, "", self.instance_id)
        self.protocol_name: Optional[str] = None
        self.patterns: Optional[List[str]] = None   # the subscription (None: not subscribed)
        self._regexes: List[Any] = []
        self.joined_topics: List[str] = []           # topic names we joined with
        self._joined_counts: Dict[str, int] = {}     # their partition counts at the join
        self.owned: Set[Key] = set()                 # partitions this member holds
        #: I/O thread: each commit's number (retries keep theirs), and per partition the
        #: latest commit made of it: a retry never overwrites a later commit's offset
        self._commits_made = 0
        self._latest_commit: Dict[Key, int] = {}
        self._rejoin_after = 0.0
        #: until when a join waits for the metadata of subscribed topics never looked up
        self._lookup_until = 0.0
        #: the error code of the last join failure told to the application: the same
        #: failure again is not told again until the member joins (or fails otherwise)
        self._join_error_told: Optional[int] = None
        #: the coordinator lookup's and the committed offsets' error last reported (each
        #: told once while it lasts, as librdkafka does, not at every retry)
        self._find_error_told: Optional[int] = None
        self._offset_fetch_error_told: Optional[int] = None
        self._rejoin_reason = ""
        self._rejoin_pending = False   # a rejoin was asked for while joining
        self._next_heartbeat = 0.0
        self._heartbeat_in_flight = False
        self._last_heartbeat_ok = 0.0
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval
        refresh = config["topic.metadata.refresh.interval.ms"]
        #: how often a pattern subscription asks for every topic (seconds)
        self.pattern_refresh = (refresh if refresh > 0
                                else config["metadata.max.age.ms"]) / 1000.0
        self._next_pattern_refresh = 0.0
        #: the coordinator matches the patterns to topics itself (KIP-848 regex): no
        #: periodic look at every topic
        self._broker_resolves_regex = False
        self._app_pending = 0          # rebalance events the application has not run yet
        #: the JoinGroup answer we lead with while the metadata of members' topics is
        #: asked for (None: not waiting)
        self._leading: Any = None
        #: as the leader: the topics of every member's subscription at the last
        #: assignment (their metadata is kept fresh, see topics_in_use)
        self._group_topics: Set[str] = set()
        self._op_token = 0             # bumped on every membership reset
        #: the membership (``_op_token``) the application's assignment came in: once the
        #: membership is lost or left, what it still has is not its own to commit
        #: (librdkafka's assignment_lost; see :attr:`assignment_lost`)
        self._app_token = 0
        self._poll_exceeded = False
        #: _HOLD_NEW once max.poll.interval.ms passed, _HOLD_ARMED once a poll call saw it
        self._held_for_poll_error = 0
        self.on_assign: Optional[Callable] = None
        self.on_revoke: Optional[Callable] = None
        self.on_lost: Optional[Callable] = None
        self.closed = False
        #: set by the application thread on every poll()/consume() (max.poll.interval.ms)
        self.last_poll = time.monotonic()
        # application-thread events: ("revoke", [tp], lost, op token), ("assign", [tp],
        # op token), ("commit", err, [tp])
        self.app_events: Deque[Tuple[Any, ...]] = deque()
        self._app_lock = threading.Lock()
        #: asynchronous commits not answered yet (_app_lock), and set when there are none:
        #: close() waits for them and serves their on_commit, as librdkafka's close does
        self._async_commits = 0
        self._async_commits_done = threading.Event()
        self._async_commits_done.set()
        #: held while a revocation runs on some application thread: close() from another
        #: waits for it, then revokes what is still assigned (it revoked the same
        #: partitions a second time, both on_revoke calls at once)
        self._revoking = threading.RLock()
        #: during a revocation callback: stored offsets of what it unassigned itself
        self._leaving_in_revoke: Optional[List[TopicPartition]] = None
        #: since the last metrics push (KIP-714): commit round trips, and rebalances
        #: from the first JoinGroup to the assignment; all rebalances' time, ever (s)
        self.commit_latency = IntervalStat()
        self.rebalance_latency = IntervalStat()
        self.rebalance_total = 0.0
        self._rebalance_started: Optional[float] = None
        #: assignments and revocations handed to the application (empty ones too; the
        #: statistics' cgrp rebalance_cnt, as librdkafka counts its rebalance events),
        #: and when the last rebalance completed
        self.rebalance_callbacks = 0
        self.rebalanced_at: Optional[float] = None
        #: subscribed topic -> the metadata error last reported for it (once each)
        self._topic_errors: Dict[str, int] = {}
        cluster.on_metadata.append(self._metadata_arrived)
        cluster.on_broker_state.append(self._on_broker_state)
        io.add_tick(self.tick)

    # ================================================================ application thread
    @property
    def rebalance_protocol(self) -> Optional[str]:
        """Any thread: ``"EAGER"`` or ``"COOPERATIVE"`` once a JoinGroup answer chose the
        assignor (for the consumer's life, as librdkafka's), None before: the assignment
        calls that do not fit it are refused (see Consumer.assign)."""
        if self.protocol_name is None:
            return None
        return "COOPERATIVE" if self.cooperative else "EAGER"

    def subscribe(self, topics: List[str], on_assign: Optional[Callable],
                  on_revoke: Optional[Callable], on_lost: Optional[Callable]) -> None:
        regexes = []
        for t in topics:
            if t.startswith("^"):
                try:
                    regexes.append(re.compile(t))
                except re.error as exc:
                    raise KafkaException(KafkaError(
                        KafkaError._INVALID_ARG, f"subscribe(): bad pattern {t!r}: {exc}"))
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.on_lost = on_lost
        self.io.call_soon(self._set_subscription, list(topics), regexes)

    def unsubscribe(self, member: GroupMember) -> None:
        """Revoke (callback, commit with enable.auto.commit, unassign) on this thread,
        then leave the group."""
        assigned = member.assigned()
        try:
            if self.patterns is not None and assigned:
                tps = [TopicPartition(t, p) for (t, p) in sorted(assigned)]
                self._run_revoke(member, tps, False)
        finally:  # a callback that raised does not keep the member in the group
            done = threading.Event()
            self.io.call_soon(self._set_subscription, None, [], done)
            self.cluster.wait_for(done, time.monotonic() + 5)

    def idle_poll(self) -> bool:
        """poll()'s fast path: note the poll; True when serve() has nothing to run."""
        self.last_poll = time.monotonic()
        return not self.app_events and not self._poll_exceeded

    def serve(self, member: GroupMember, first: bool = True) -> None:
        """Run pending rebalance and commit callbacks (from poll()/consume(); ``first``:
        the call's first serve, not one after a wait within it)."""
        self.last_poll = time.monotonic()
        if self._poll_exceeded:
            self._poll_exceeded = False
            self.io.call_soon(self._poll_resumed)
        if self._held_for_poll_error:
            # As librdkafka's queue: the call that returns _MAX_POLL_EXCEEDED runs no
            # callback; the lost partitions' (and what came after) run in the next one.
            if not (first and self._held_for_poll_error == _HOLD_ARMED):
                self._held_for_poll_error = _HOLD_ARMED
                return
            self._held_for_poll_error = 0
        events = self.app_events
        while events:
            with self._app_lock:
                if not events:
                    break
                ev = events.popleft()
            kind = ev[0]
            if kind == "commit":
                cb = self.config["on_commit"]
                if cb is not None:
                    cb(ev[1], ev[2])  # an exception goes to the caller; the rest wait
            elif kind == "revoke":
                # A revocation the membership was lost (or left) after: the partitions
                # are not ours to commit any more; lost, as confluent-kafka calls on_lost
                # when librdkafka's assignment is lost by the time its callback runs.
                self._run_revoke(member, ev[1], ev[2] or ev[3] != self._op_token)
            elif kind == "assign":
                self._run_assign(member, ev[1], ev[2])

    @property
    def assignment_lost(self) -> bool:
        """The membership the application's assignment came in is gone (lost: past
        max.poll.interval.ms, a session expired, fenced): until a poll runs the lost
        revocation, the partitions it still has are not its own to commit."""
        return self.patterns is not None and self._app_token != self._op_token

    def _serve_commit_results(self) -> None:
        """Application thread, closing: on_commit for the commit results queued (the
        rebalance events are not run any more)."""
        cb = self.config["on_commit"]
        with self._app_lock:
            results = [ev for ev in self.app_events if ev[0] == "commit"]
            self.app_events.clear()
        for _kind, err, result in results:
            if cb is not None:
                cb(err, result)

    def _run_revoke(self, member: GroupMember, tps: List[TopicPartition], lost: bool) -> None:
        """The revocation on the application thread: the callback, the commit
        (enable.auto.commit), the unassignment. The commit, the unassignment and the news
        to the I/O thread happen even if a callback raises; then the exception goes on."""
        with self._revoking:
            with self._app_lock:
                self.rebalance_callbacks += 1
            self._revoke(member, tps, lost)

    def _revoke(self, member: GroupMember, tps: List[TopicPartition], lost: bool) -> None:
        cb = self.on_lost if lost and self.on_lost is not None else self.on_revoke
        # As librdkafka pauses them when the rebalance starts: threads polling meanwhile
        # got these partitions' messages while the commit and on_revoke ran, and their
        # offsets then came after the revocation's commit (read again by the next owner).
        member.hold(tps)
        before = member.assignment_changes()
        failure: Optional[Exception] = None
        # With enable.auto.commit the stored offsets are committed as the partitions go,
        # after the callback, as librdkafka commits what leaves the assignment: offsets
        # the callback stored count (they were lost when the commit came first). What the
        # callback unassigned itself is kept for this commit (keep_leaving()).
        self._leaving_in_revoke = [] if not lost and self.auto_commit else None
        try:
            if cb is not None:
                cb(member.consumer, tps)
        finally:
            try:
                failure = self._commit_revoked(member, tps)
                if member.assignment_changes() == before:
                    if self.cooperative:
                        assigned = member.assigned()
                        keep = [tp for tp in tps if (tp.topic, tp.partition) in assigned]
                        if keep:
                            member.incremental_unassign(keep)
                    else:
                        member.unassign()
            finally:     # whatever happened, the group goes on
                self.io.call_soon(self._revoke_done)
        if failure is not None:
            raise failure

    def keep_leaving(self, stored: List[TopicPartition]) -> None:
        """Application thread: the stored offsets of partitions a revocation callback
        unassigns itself, for the commit that follows it (none outside a callback: a
        subscription's partitions are committed as the group revokes them)."""
        if self._leaving_in_revoke is not None:
            self._leaving_in_revoke.extend(stored)

    def _commit_revoked(self, member: GroupMember,
                        tps: List[TopicPartition]) -> Optional[Exception]:
        """After the revocation callback: commit the stored offsets of the revoked
        partitions (enable.auto.commit). Returns what on_commit raised, if it did."""
        kept, self._leaving_in_revoke = self._leaving_in_revoke, None
        if kept is None:
            return None
        going = {(t.topic, t.partition) for t in tps}
        stored = kept + [tp for tp in member.stored_offsets(leaving=True)
                         if (tp.topic, tp.partition) in going]
        if not stored:
            return None
        try:
            self.commit(auto_commit_list(going, stored), asynchronous=False, timeout=5.0,
                        auto=True)
        except KafkaException as exc:
            self.log.info("commit of the revoked partitions failed: %s", exc)
        except Exception as exc:  # on_commit raised: the revocation still runs
            return exc
        return None

    def _run_assign(self, member: GroupMember, tps: List[TopicPartition], token: int) -> None:
        """The assignment on the application thread: the callback, then the assignment
        itself unless the callback made one (also when it raises). What the group gave is
        assigned then, whatever the callback changed in its list without assigning it
        (offsets set and not passed to assign()), as in confluent-kafka."""
        with self._app_lock:
            self.rebalance_callbacks += 1
        before = member.assignment_changes()
        given = [TopicPartition(tp.topic, tp.partition, tp.offset, tp.metadata,
                                tp.leader_epoch) for tp in tps]
        cb = self.on_assign
        try:
            if cb is not None:
                cb(member.consumer, tps)
        finally:
            try:
                if token == self._op_token:
                    self._app_token = token
                if member.assignment_changes() == before and token == self._op_token:
                    if self.cooperative:
                        assigned = member.assigned()
                        new = [tp for tp in given
                               if (tp.topic, tp.partition) not in assigned]
                        if new:
                            member.incremental_assign(new)
                    else:
                        member.assign(given)
            finally:     # whatever happened, the group goes on (it waits for this)
                self.io.call_soon(self._assign_done)

    def commit(self, tps: List[TopicPartition], asynchronous: bool,
               timeout: Optional[float] = None, auto: bool = False,
               assignment: bool = False) -> Optional[List[TopicPartition]]:
        """Commit offsets; see Consumer.commit. Entries with a negative (logical or
        invalid) offset are left out, as librdkafka does; with none left the result is
        _NO_OFFSET. on_commit hears asynchronous commits and the client's own (``auto``:
        before a revocation, at close), not the application's synchronous ones, which
        return their result (librdkafka's offset_commit_cb is not called for them).
        ``assignment``: ``tps`` are the stored offsets of the assignment, refused with
        _ASSIGNMENT_LOST while it is lost (see :attr:`assignment_lost`), as librdkafka
        refuses them: sent without a membership, Kafka takes them from a group with no
        members left, behind what the partitions' next owners committed."""
        if assignment and self.assignment_lost and any(tp.offset >= 0 for tp in tps):
            err = client_error(KafkaError._ASSIGNMENT_LOST,
                               "Commit failed: Local: Group partition assignment lost")
            if asynchronous:
                self._queue_commit_result(err, list(tps))
                return None
            raise KafkaException(err)
        offsets = [e for e in _commit_entries(tps) if e[2] >= 0]
        if not offsets:
            if asynchronous:
                self._queue_commit_result(KafkaError(KafkaError._NO_OFFSET), list(tps))
                return None
            raise KafkaException(KafkaError(KafkaError._NO_OFFSET,
                                            "Commit failed: Local: No offset stored"))
        if asynchronous:
            with self._app_lock:
                self._async_commits += 1
                self._async_commits_done.clear()
            self.io.call_soon(
                self._commit, offsets,
                lambda err, result: self._async_commit_done(err, _with_left_out(tps, result)),
                time.monotonic() + self.request_timeout)
            return None
        box: List[Any] = []
        done = threading.Event()

        def finished(err: Optional[KafkaError], result: List[TopicPartition]) -> None:
            box.append((err, result))
            done.set()

        wait = self.request_timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        self.io.call_soon(self._commit, offsets, finished, deadline)
        if not self.cluster.wait_for(done, deadline + 0.5):
            raise KafkaException(client_error(KafkaError._TIMED_OUT,
                                              f"commit timed out after {wait:g}s"))
        err, result = box[0]
        result = _with_left_out(tps, result)
        cb = self.config["on_commit"]
        if auto and cb is not None:
            cb(err, result)
        if err is not None:
            raise KafkaException(err)
        return result

    def _async_commit_done(self, err: Optional[KafkaError],
                           result: List[TopicPartition]) -> None:
        """I/O thread: an asynchronous commit() of the application answered."""
        with self._app_lock:
            self._async_commits -= 1
            if not self._async_commits:
                self._async_commits_done.set()
        self._queue_commit_result(err, result)

    def _queue_commit_result(self, err: Optional[KafkaError],
                             result: List[TopicPartition]) -> None:
        """Any thread: an asynchronous commit's result, for on_commit from the next
        poll()/consume()."""
        with self._app_lock:
            self.app_events.append(("commit", err, result))
        self.wake_app()

    def committed(self, tps: List[TopicPartition],
                  timeout: Optional[float]) -> List[TopicPartition]:
        box: List[Any] = []
        done = threading.Event()
        wait = self.request_timeout if timeout is None or timeout < 0 else timeout
        deadline = time.monotonic() + wait
        keys = [(tp.topic, tp.partition) for tp in tps]

        def finished(result: Optional[Dict[Key, Tuple[int, Optional[str], int]]],
                     err: Optional[KafkaError] = None) -> None:
            box.append((result, err))
            done.set()

        self.io.call_soon(self._offset_fetch, keys, finished, deadline)
        if not self.cluster.wait_for(done, deadline + 0.5):
            raise KafkaException(client_error(KafkaError._TIMED_OUT,
                                              f"committed() timed out after {wait:g}s"))
        result, err = box[0]
        if result is None:
            raise KafkaException(err or client_error(KafkaError._TIMED_OUT))
        out = []
        for topic, p in keys:
            off, meta, epoch = result.get((topic, p), (-1, None, -1))
            out.append(TopicPartition(topic, p, off if off >= 0 else OFFSET_INVALID, meta,
                                      epoch if epoch >= 0 else None))
        return out

    def metadata(self) -> GroupMetadata:
        """The membership the member last had an assignment in: kept when it is lost
        (max.poll.interval.ms, a session expired) until the member joins again, as the
        Java client keeps it. A transactional producer sends it with the offsets, and the
        coordinator refuses them from a member that has lost its place (KIP-447: a
        zombie's output goes with its aborted transaction); the generation -1 of a member
        that has left asked for no check, which Kafka grants when the group has no
        members left (a consumer group: as well) and for a classic group's
        transactional commit without a member id."""
        return self._assigned_in

    def _note_assigned_in(self) -> None:
        """The membership an assignment came in (see :meth:`metadata`)."""
        self._assigned_in = GroupMetadata(self.group_id, self.generation, self.member_id,
                                          self.instance_id)

    def close(self, member: GroupMember) -> None:
        """Final commit, revoke callback, the asynchronous commits made before (waited
        for, up to 5 s, and their on_commit run), LeaveGroup (not for static members).
        The group is left even if a callback raises (the exception goes on afterwards)."""
        try:
            with self._revoking:     # a revocation running on another thread ends first
                assigned = member.assigned()
                revoking = self.patterns is not None and bool(assigned)
                if revoking:
                    tps = [TopicPartition(t, p) for (t, p) in sorted(assigned)]
                    self._run_revoke(member, tps, self.assignment_lost)
            if not revoking and self.auto_commit and not self.assignment_lost:
                stored = member.stored_offsets(leaving=True)
                if stored:
                    try:
                        self.commit(auto_commit_list(assigned, stored), asynchronous=False,
                                    timeout=5.0, auto=True)
                    except KafkaException as exc:
                        self.log.info("final commit failed: %s", exc)
            # A commit() just before close() is not lost with the I/O thread, and the
            # application hears its result, as librdkafka's close() serves them.
            if not self.cluster.wait_for(self._async_commits_done, time.monotonic() + 5.0):
                self.log.warning("consumer closing with %d asynchronous commit(s) not "
                                 "answered in 5 s", self._async_commits)
            self._serve_commit_results()
        finally:
            done = threading.Event()
            self.io.call_soon(self._leave_for_good, "consumer closing", done)
            done.wait(3)

    def farewell(self, timeout: float) -> None:
        """Application thread, for a consumer the application never closed (collected,
        or still open at interpreter exit), as librdkafka's destroy does for it: commit
        the stored offsets (with enable.auto.commit) and leave the group, in at most
        ``timeout`` seconds and without callbacks (no on_revoke, no on_commit)."""
        if self.closed or self.patterns is None:
            return
        done = threading.Event()
        deadline = time.monotonic() + timeout

        def leave(*_commit_result: Any) -> None:
            self._leave_for_good("consumer dropped without close()", done)

        def start() -> None:
            stored = (self.offsets.stored_offsets(leaving=True)
                      if self.auto_commit and not self.assignment_lost else [])
            if stored:   # half the time for the commit, the rest for LeaveGroup
                self._commit(_commit_entries(stored), leave,
                             time.monotonic() + timeout / 2)
            else:
                leave()

        self.io.call_soon(start)
        done.wait(max(0.0, deadline - time.monotonic()))

    # ======================================================================= I/O thread
    def tick(self, now: float) -> Optional[float]:
        if self.closed and not self._pending:   # a closing member's leave may wait
            return None
        nxt: Optional[float] = None

        def at(t: float) -> None:
            nonlocal nxt
            if nxt is None or t < nxt:
                nxt = t

        need_coord = self.patterns is not None or self._pending
        if need_coord and self.coord_id is None:
            if not self._finding and now >= self._find_after:
                self._find_coordinator()
            elif not self._finding:
                at(self._find_after)
        elif self.patterns is not None and self.coord_id is not None and not self._finding:
            # coordinator.query.interval.ms: has the group moved to another broker?
            if now >= self._next_coord_query:
                self._find_coordinator()
            else:
                at(self._next_coord_query)
        if self._pending:
            conn = self._coord_conn()
            if conn is not None and conn.ready:
                pending, self._pending = self._pending, []
                for op in pending:
                    op.send(conn)
            else:
                for op in list(self._pending):
                    if now >= op.deadline:
                        self._pending.remove(op)
                        op.fail(client_error(KafkaError._TIMED_OUT,
                                             "group coordinator not available"))
                at(now + 0.05)
        if self.closed:
            return nxt
        if self.patterns is not None and self.coord_id is not None:
            self._membership_tick(now, at)
        if self._regexes and self.patterns is not None and not self._broker_resolves_regex:
            # Patterns match topics created later: look at every topic now and then.
            if now >= self._next_pattern_refresh:
                self._next_pattern_refresh = now + self.pattern_refresh
                self.cluster.metadata.request(None)
            at(self._next_pattern_refresh)
        if self.auto_commit and self.auto_commit_interval > 0:
            if now >= self._next_auto_commit:
                self._next_auto_commit = now + self.auto_commit_interval
                self._auto_commit()
            at(self._next_auto_commit)
        return nxt

    def _membership_tick(self, now: float, at: Callable[[float], None]) -> None:
        """Join, heartbeat and the max.poll.interval.ms check, while subscribed with a
        known coordinator; ``at(t)``: look again at ``t`` at the latest."""
        if self.state == UNJOINED and self._app_pending == 0:
            if now >= self._rejoin_after:
                self._start_join(now)
            else:
                at(self._rejoin_after)
        elif self.state == STABLE or self._member_awaiting_application():
            if now - self.last_poll > self.max_poll_interval and not self._poll_exceeded:
                self._max_poll_exceeded()
            elif not self._heartbeat_in_flight:
                if now >= self._next_heartbeat:
                    self._send_heartbeat(now)
                else:
                    at(self._next_heartbeat)
            if (self.state == STABLE or self._member_awaiting_application()) and \
                    self._last_heartbeat_ok and \
                    now - self._last_heartbeat_ok > self.session_timeout_ms / 1000.0:
                self._lose("no successful heartbeat within session.timeout.ms",
                           reset_member=False)

    def _member_awaiting_application(self) -> bool:
        """Still a member of its generation while the application has a revocation to
        run before the member joins again (cooperative: the partitions the last
        assignment took away; eager: all of them). It heartbeats meanwhile, as librdkafka
        and the Java client do (silent, its session expired and its partitions went to
        others while the application, polling well within max.poll.interval.ms, still
        held them), and max.poll.interval.ms is watched."""
        waiting = self.state == WAIT_REVOKE or (self.state == UNJOINED
                                                and self._app_pending > 0)
        return waiting and self.generation >= 0 and bool(self.member_id)

    # -- coordinator -----------------------------------------------------------------------
    def _coord_conn(self) -> Any:
        if self.coord_id is None:
            return None
        return self.cluster.coordinator_connection(self.coord_id)

    def _find_coordinator(self) -> None:
        conn = self.cluster.ready_connection(time.monotonic())  # connects when none is up
        if conn is None:
            # Looked for again as soon as a connection is up (the next tick), at the
            # latest in FIND_POLL_S.
            self._find_after = time.monotonic() + FIND_POLL_S
            self.cluster.retry_when_ready(self, FIND_POLL_S, self._find_soon)
            return
        version = conn.versions.get(ApiKey.FIND_COORDINATOR)
        if version is None:
            self._fail_all(KafkaError(KafkaError._UNSUPPORTED_FEATURE,
                                      "broker does not support FindCoordinator"))
            return
        if version >= 4:
            req = FindCoordinatorRequest(key_type=CoordinatorType.GROUP,
                                         coordinator_keys=[self.group_id])
        else:
            req = FindCoordinatorRequest(key=self.group_id, key_type=CoordinatorType.GROUP)
        self._finding = True
        conn.send(req, self._on_find_coordinator)

    def _find_soon(self) -> None:
        self._find_after = 0.0

    def _on_find_coordinator(self, resp: Any, err: Optional[KafkaError]) -> None:
        self._finding = False
        if err is None:
            code, message, node, host, port = coordinator_answer(resp, self.group_id)
            code = broker_code(code)
            if code:
                err = client_error(code, message or f"FindCoordinator({self.group_id})")
        if err is not None:
            delay = self._find_backoff.next_delay()
            self.log.debug("coordinator lookup failed (again in %.3g s): %s", delay,
                           err.str())
            self._find_after = self._next_coord_query = time.monotonic() + delay
            if not err.retriable() and err.code() not in NO_ANSWER \
                    and err.code() != self._find_error_told:
                self._find_error_told = err.code()
                self.deliver_error(err)
            return
        now = time.monotonic()
        self._find_backoff.reset()
        self._find_error_told = None
        self.cluster.metadata.broker_named(node, host, port, now)
        self._next_coord_query = now + self.coord_query_interval
        if node == self.coord_id:
            return      # the periodic question: still the same broker
        if self.coord_id is not None:
            self.log.info("group %s: coordinator moved from broker %d to %d", self.group_id,
                          self.coord_id, node)
        self.coord_id = node
        self.coord_since = now
        self.log.debug("group %s: coordinator is broker %d (%s:%d)", self.group_id, node, host,
                       port)
        self.cluster.coordinator_connection(node)

    def _on_broker_state(self, conn: Any, state: str, error: Optional[KafkaError]) -> None:
        """A connection to the coordinator failed (lost, or refused when connecting):
        look the coordinator up again at once. Else requests waiting for that connection
        (commits, committed offsets) would wait for a broker that is gone, and the
        member's heartbeat for its timeout, before the group moves on to the broker
        that coordinates it now."""
        coord = self.coord_id
        if error is not None and coord is not None and self.cluster.broker_id(conn) == coord:
            self._coordinator_lost(f"connection failed: {error.str()}")
            self.io.wake()

    def _coordinator_lost(self, why: str, delay: Optional[float] = None) -> None:
        if self.coord_id is not None:
            self.log.info("group %s: coordinator %s lost (%s)", self.group_id,
                          self.coord_id, why)
        self.coord_id = None
        self.coord_since = time.monotonic()
        self._find_after = time.monotonic() + (self.retry_backoff if delay is None
                                               else delay)

    def _membership_refused(self, code: int, what: str) -> None:
        """The coordinator answered a join or heartbeat with ``code`` (NOT_COORDINATOR,
        COORDINATOR_NOT_AVAILABLE): look it up again, after a wait that doubles while
        the broker named refuses again (KIP-580; the lookups followed each other at the
        heartbeat's pace, the lookup answering at once), and tell the application once
        when it lasts (it was never told)."""
        broker = self.coord_id
        self._coordinator_lost(f"{what}: {KafkaError(code).name()}",
                               self._refusal_backoff.next_delay())
        refusals = self._refusal_backoff.failures
        if refusals == COORDINATOR_REFUSALS_TOLD:
            self.deliver_error(client_error(
                code, f"group {self.group_id}: the coordinator (broker {broker}) keeps "
                f"answering {KafkaError(code).name()} though the lookups name it: "
                f"{refusals} times in a row; still trying"))

    def _membership_answered(self) -> None:
        """The coordinator answered a join or heartbeat without refusing it."""
        self._refusal_backoff.reset()

    def _send(self, api_key: ApiKey, make: Callable[[int], Any],
              callback: Callable[[Any, Optional[KafkaError]], None],
              deadline: Optional[float] = None, max_version: int = 1 << 15,
              conn: Any = None, timeout: Optional[float] = None) -> None:
        """Send ``make(version)`` to the coordinator now (on ``conn``, a ready connection
        to it, if given), or once it is known and connected (failing at ``deadline``).
        ``version`` is the negotiated one, capped at ``max_version``: requests whose
        fields depend on it are built for it. ``timeout``: the request's own (default
        the request timeout)."""
        def send(conn: Any) -> None:
            neg = conn.versions.get(api_key)
            if neg is None:
                callback(None, KafkaError(KafkaError._UNSUPPORTED_FEATURE,
                                          f"the coordinator does not support "
                                          f"{api_key.name}"))
                return
            v = min(neg, max_version)
            conn.send(make(v), callback, version=v, timeout=timeout)

        if conn is None:
            conn = self._coord_conn()
        if conn is not None and conn.ready:
            send(conn)
            return
        self._pending.append(_Pending(send, lambda e: callback(None, e),
                                      deadline or time.monotonic() + self.request_timeout))
        self.io.wake()

    def _fail_all(self, err: KafkaError) -> None:
        pending, self._pending = self._pending, []
        for op in pending:
            op.fail(err)

    # -- subscription and joining ------------------------------------------------------------
    def _set_subscription(self, topics: Optional[List[str]], regexes: List[Any],
                          done: Optional[threading.Event] = None) -> None:
        if topics is None:
            # The application revoked already (unsubscribe()); rebalance events it has not
            # run yet are void.
            self.patterns = None
            self._regexes = []
            self._group_topics = set()
            self.owned = set()
            with self._app_lock:
                kept = [ev for ev in self.app_events if ev[0] == "commit"]
                self.app_events.clear()
                self.app_events.extend(kept)
            self._app_pending = 0
            self._leave("unsubscribed")
            self.state = UNJOINED
            if done is not None:
                done.set()
            return
        self.patterns = topics
        self._regexes = regexes
        names = [t for t in topics if not t.startswith("^")]
        if names:
            self.cluster.want_topics(names)
            self._lookup_until = time.monotonic() + _JOIN_LOOKUP_WAIT
        if regexes:
            self.cluster.metadata.request(None)
        self._request_rejoin("subscription changed")

    def topics_in_use(self, candidates: Set[str]) -> Set[str]:
        """I/O thread: which of ``candidates`` the membership needs metadata for: the
        subscription's names and the topics its patterns match, and as the leader every
        member's topics (the Java consumer's group subscription)."""
        if self.patterns is None:
            return set()
        used = {t for t in self.patterns if not t.startswith("^")} | self._group_topics
        if self._regexes:
            # Matched topics as _subscribed_topics() counts them: a deleted one (its
            # refresh said it is unknown) no longer is.
            known = self.cluster.metadata.topics
            used.update(t for t in candidates
                        if t in known and not known[t].error
                        and any(r.match(t) for r in self._regexes))
        return used & candidates

    def _subscribed_topics(self) -> Optional[List[str]]:
        """Topic names the subscription covers now; None while a pattern still waits for
        the first full metadata."""
        names = {t for t in self.patterns or () if not t.startswith("^")}
        if self._regexes:
            md = self.cluster.metadata
            if not md.updates:
                return None
            for t, info in md.topics.items():
                if t.startswith("__") or info.error:
                    continue
                if any(r.match(t) for r in self._regexes):
                    names.add(t)
        return sorted(names)

    def _request_rejoin(self, reason: str) -> None:
        if self.patterns is None:
            return
        self._rejoin_reason = reason
        if self.state in (JOINING, SYNCING):
            self._rejoin_pending = True
            return
        if self.state == WAIT_REVOKE:
            return
        if not self.cooperative and self.owned:
            # Eager: hand everything back first; the join follows the application's revoke.
            self.state = WAIT_REVOKE
            owned = sorted(self.owned)
            self.owned = set()
            self._queue_revoke(owned, lost=False)
            return
        self.state = UNJOINED
        self.io.wake()

    def _queue_revoke(self, keys: List[Key], lost: bool) -> None:
        self._app_pending += 1
        tps = [TopicPartition(t, p) for t, p in keys]
        with self._app_lock:
            self.app_events.append(("revoke", tps, lost, self._op_token))
        self.wake_app()

    def _revoke_done(self) -> None:
        self._app_pending = max(0, self._app_pending - 1)
        if self.state == WAIT_REVOKE:
            self.state = UNJOINED
        self.io.wake()

    def _assign_done(self) -> None:
        self._app_pending = max(0, self._app_pending - 1)
        self.io.wake()

    def _start_join(self, now: float) -> None:
        topics = self._subscribed_topics()
        if topics is None:
            self.cluster.metadata.request(None)
            self._rejoin_after = now + 0.05
            return
        md = self.cluster.metadata
        unknown = [t for t in topics if t not in md.topics]
        if unknown and now < self._lookup_until:
            # As librdkafka: the subscription's topics are looked up before the JoinGroup
            # (joined without, their answer made a second rebalance right after it).
            md.request(unknown)
            self._rejoin_after = now + 0.02
            return
        conn = self._coord_conn()
        if conn is None:
            return
        if self.instance_id is not None:
            if not conn.ready:
                # The versions the coordinator speaks are known once it is connected.
                self._rejoin_after = now + 0.02
                return
            if not self._static_membership_supported(conn):
                return
        self._rejoin_pending = False
        self.joined_topics = topics
        self._joined_counts = {t: md.topics[t].partition_count for t in topics
                               if t in md.topics}
        owned = sorted(self.owned) if self.cooperative else []
        protocols = []
        for a in self.assignors:
            sub = Subscription(topics=topics,
                               user_data=a.subscription_user_data(topics, owned),
                               owned_partitions=owned, generation_id=self.generation,
                               rack_id=self.rack)
            protocols.append(JoinGroupRequest.JoinGroupRequestProtocol(
                name=a.name, metadata=encode_subscription(sub, a.version)))
        req = JoinGroupRequest(
            group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=int(self.max_poll_interval * 1000),
            member_id=self.member_id, group_instance_id=self.instance_id,
            protocol_type=PROTOCOL_TYPE, protocols=protocols,
            reason=self._rejoin_reason or None)
        self.state = JOINING
        if self._rebalance_started is None:
            self._rebalance_started = time.monotonic()
        token = self._op_token
        self.log.debug("group %s: joining (%s) with %s", self.group_id,
                       self._rejoin_reason, topics)
        # The broker holds JoinGroup for up to the rebalance timeout.
        conn.send(req, lambda resp, err: self._on_join(resp, err, token),
                  timeout=self.max_poll_interval + self.request_timeout)

    def _static_membership_supported(self, conn: Any) -> bool:
        """Whether the coordinator speaks the versions that carry group.instance.id; if
        not, the application gets a fatal _UNSUPPORTED_FEATURE naming what is missing
        and the member stops joining (as the Java client refuses; sending the requests
        without the id would silently make it a dynamic member)."""
        missing = []
        for api, name, need in _STATIC_MEMBER_NEEDS:
            have = conn.versions.get(api)
            if have is None or have < need:
                missing.append(f"{name} v{need}+ (it has "
                               f"{'none' if have is None else f'v{have}'})")
        if not missing:
            return True
        self.deliver_error(client_error(
            KafkaError._UNSUPPORTED_FEATURE,
            f"group {self.group_id}: group.instance.id {self.instance_id!r} (static "
            f"membership, KIP-345) needs a coordinator with {', '.join(missing)}: Apache "
            f"Kafka 2.3 or later", fatal=True))
        self.patterns = None
        self.state = UNJOINED
        return False

    def _on_join(self, resp: Any, err: Optional[KafkaError], token: int) -> None:
        self.log.debug("group %s: JoinGroup answered: %s", self.group_id,
                       err.str() if err is not None else
                       f"error {resp.error_code}, generation {resp.generation_id}, "
                       f"member {resp.member_id}, leader {resp.leader}")
        if token != self._op_token or self.state != JOINING:
            return
        code = broker_code(resp.error_code) if err is None else None
        if err is None and code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = resp.member_id  # KIP-394: join again with the id we were given
            self.state = UNJOINED
            self._rejoin_after = 0.0
            self.io.wake()
            return
        if err is None and code == ErrorCode.NONE:
            offered = [a.name for a in self.assignors]
            if resp.protocol_name not in offered:
                # The coordinator may only choose a protocol every member offered: one
                # we did not is a broken answer (librdkafka refuses it the same way).
                self._join_failed(client_error(
                    KafkaError._UNKNOWN_PROTOCOL,
                    f"the coordinator chose protocol {resp.protocol_name!r}, which this "
                    f"member did not offer ({', '.join(offered)})"))
                return
            if resp.generation_id < 0:
                # A member of no generation: SyncGroup would be refused (ILLEGAL_GENERATION)
                # and the join asked again for ever without a word (librdkafka does that,
                # thousands of times a second). The id stands: we rejoin with it.
                self.member_id = resp.member_id
                self._join_failed(client_error(
                    KafkaError._BAD_MSG,
                    f"the coordinator answered generation {resp.generation_id} with no "
                    f"error"))
                return
            self.generation = resp.generation_id
            self.member_id = resp.member_id
            self.protocol_name = resp.protocol_name
            self.state = SYNCING
            if resp.leader == resp.member_id and not getattr(resp, "skip_assignment", False):
                self._lead(resp, token)
            else:
                self._sync([], token)
            return
        self._join_failed(err if err is not None
                          else client_error(broker_code(resp.error_code)))

    def _join_failed(self, err: KafkaError) -> None:
        code = err.code()
        self.state = UNJOINED
        delay = self._join_backoff.next_delay()
        self._rejoin_after = time.monotonic() + delay
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            if self.owned:
                # A cooperative member rejoins holding its partitions; the group no longer
                # knows it, so they are lost, not revoked (KIP-429).
                self._lose(err.str(), reset_member=code == ErrorCode.UNKNOWN_MEMBER_ID)
            else:
                self._reset_member(code == ErrorCode.UNKNOWN_MEMBER_ID)
        elif code in COORDINATOR_ERRORS:
            self._membership_refused(code, "join")
        elif code in COORDINATOR_LOST:
            self._coordinator_lost(err.str())
        elif code == ErrorCode.FENCED_INSTANCE_ID:
            self.deliver_error(client_error(code, f"group {self.group_id}: another member uses "
                                            f"group.instance.id {self.instance_id!r}",
                                            fatal=True))
            self.patterns = None
            return
        elif code not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                          ErrorCode.REBALANCE_IN_PROGRESS):
            detail = err.str()
            if code == ErrorCode.INVALID_SESSION_TIMEOUT:
                detail += (f": session.timeout.ms ({self.session_timeout_ms}) is outside the "
                           f"broker's group.min.session.timeout.ms .. "
                           f"group.max.session.timeout.ms")
            if code != self._join_error_told:
                # Once per error while it lasts, not at every rejoin.
                self._join_error_told = code
                self.deliver_error(client_error(code, f"JoinGroup {self.group_id}: {detail}"))
            self._rejoin_after = time.monotonic() + max(1.0, delay)
        self.log.debug("group %s: join failed: %s", self.group_id, err.str())
        self.io.wake()

    def _reset_member(self, forget_id: bool) -> None:
        if forget_id:
            self.member_id = ""
        self.generation = -1

    def _lead(self, resp: Any, token: int, last_chance: bool = False) -> None:
        """We lead: once the metadata covers every member's topics (the metadata answer
        that brings them calls us again, see _on_metadata; ``last_chance``: after
        LEAD_METADATA_WAIT_S, assign with what is known), run the assignor."""
        members = []
        topics: Set[str] = set()
        for m in resp.members:
            try:
                sub = decode_subscription(m.metadata)
            except Exception as exc:  # a member's bytes are not ours to trust
                self.log.warning("group %s: member %s sent an undecodable subscription: %s",
                                 self.group_id, m.member_id, exc)
                sub = Subscription(topics=[], user_data=None, owned_partitions=[])
            members.append(MemberSubscription(m.member_id, m.group_instance_id, sub))
            topics.update(sub.topics)
        md = self.cluster.metadata
        missing = [t for t in topics if t not in md.topics]
        if missing and not last_chance:
            self.cluster.want_topics(missing)
            md.request(missing, fast=True)
            if self._leading is not resp:
                self._leading = resp
                self.io.call_later(LEAD_METADATA_WAIT_S, self._lead_again, resp, token, True)
            return
        self._leading = None
        self._group_topics = topics
        counts = {t: md.topics[t].partition_count for t in topics
                  if t in md.topics and md.topics[t].partition_count > 0}
        assignor = next((a for a in self.assignors if a.name == resp.protocol_name),
                        self.assignors[0])
        try:
            plan = assignor.assign({m.member_id: m for m in members}, counts)
        except Exception as exc:
            # An empty plan would leave every partition unread until a rebalance that a
            # stable group may never have: no SyncGroup, join again after the backoff
            # (told once while it lasts), as librdkafka rejoins ("assignor failed").
            self.log.exception("group %s: assignor %s failed", self.group_id, assignor.name)
            self._join_failed(KafkaError(
                KafkaError._FAIL, f"assignor {assignor.name} failed ({exc}): joining again"))
            return
        assignments = [SyncGroupRequest.SyncGroupRequestAssignment(
            member_id=mid, assignment=encode_assignment(parts))
            for mid, parts in plan.items()]
        self._sync(assignments, token)

    def _lead_again(self, resp: Any, token: int, last_chance: bool = False) -> None:
        if self._leading is resp and token == self._op_token and self.state == SYNCING:
            self._lead(resp, token, last_chance)

    def _sync(self, assignments: List[Any], token: int) -> None:
        req = SyncGroupRequest(group_id=self.group_id, generation_id=self.generation,
                               member_id=self.member_id, group_instance_id=self.instance_id,
                               protocol_type=PROTOCOL_TYPE, protocol_name=self.protocol_name,
                               assignments=assignments)
        conn = self._coord_conn()
        if conn is None:
            self._join_failed(client_error(KafkaError._TRANSPORT, "coordinator gone"))
            return
        # Every member has joined by now, so the answer waits only for the leader's
        # assignment: a broker that starts another rebalance and forgets this request
        # (Tansu does) costs at most the session timeout, not the rebalance timeout.
        conn.send(req, lambda resp, err: self._on_sync(resp, err, token),
                  timeout=self.session_timeout_ms / 1000.0)

    def _on_sync(self, resp: Any, err: Optional[KafkaError], token: int) -> None:
        self.log.debug("group %s: SyncGroup answered: %s", self.group_id,
                       err.str() if err is not None else f"error {resp.error_code}")
        if token != self._op_token or self.state != SYNCING:
            return
        if err is None and resp.error_code:
            err = client_error(broker_code(resp.error_code), "SyncGroup")
        if err is not None:
            self._join_failed(err)
            return
        try:
            keys = decode_assignment(resp.assignment).partitions if resp.assignment else []
        except Exception as exc:
            # Taking nothing would leave what the leader gave this member unread until a
            # rebalance that a stable group may never have: join again after the backoff,
            # told once while it lasts, as librdkafka rejoins ("synchronization failed").
            self._join_failed(KafkaError(
                KafkaError._BAD_MSG, f"SyncGroup {self.group_id}: the leader's assignment "
                f"cannot be read ({exc}): joining again"))
            return
        wanted = set(self.joined_topics)
        new = {(t, p) for t, p in keys if t in wanted}
        bad = sorted((t, p) for t, p in new if p < 0)
        if bad:
            # The leader's assignor (another member's code) named partitions no topic
            # has: the rest of the assignment stands.
            self.deliver_error(KafkaError(
                KafkaError._BAD_MSG, f"group {self.group_id}: the leader's assignment "
                f"names negative partitions, left out: {bad}"))
            new.difference_update(bad)
        self._note_assigned_in()
        now = time.monotonic()
        self.state = STABLE
        self._join_error_told = None
        self._join_backoff.reset()
        self._membership_answered()
        self.rebalanced(now)
        self._last_heartbeat_ok = now
        self._next_heartbeat = now + self.heartbeat_interval
        self.log.debug("group %s: generation %d, assigned %s", self.group_id, self.generation,
                       sorted(new))
        if self.cooperative:
            revoked = self.owned - new
            added = new - self.owned
            self.owned = (self.owned - revoked) | added
            if revoked:
                self._queue_revoke(sorted(revoked), lost=False)
                # KIP-429: join again so the revoked partitions reach their new owner.
                self.state = UNJOINED
                self._rejoin_reason = "revoked partitions"
                # Not at once: noida-db and Tansu drop their answers to the other members
                # of the generation just completed when a new JoinGroup arrives within
                # milliseconds (seen here: the others then wait out their timeouts).
                self._rejoin_after = now + min(self.heartbeat_interval, 0.5)
            self._queue_assign(sorted(added))
        else:
            self.owned = new
            self._queue_assign(sorted(new))
        if self._rejoin_pending and self.state == STABLE:
            self._request_rejoin(self._rejoin_reason)

    def rebalanced(self, now: float) -> None:
        """I/O thread: the rebalance under way (if any) ended with an assignment."""
        started = self._rebalance_started
        if started is not None:
            self._rebalance_started = None
            self.rebalance_latency.add(now - started)
            self.rebalance_total += now - started
            self.rebalanced_at = now

    @property
    def rebalance_reason(self) -> str:
        """Why the member is rebalancing now ("" when it is not), as librdkafka's
        statistics say it."""
        return self._rejoin_reason if self._rebalance_started is not None else ""

    def telemetry_samples(self, elapsed: float) -> List[Sample]:
        """I/O thread, for a metrics push (KIP-714): partitions held, and since the
        last push commit and rebalance latencies (ms), with all rebalances' time."""
        return ([Sample("coordinator.assigned.partitions", len(self.owned))]
                + interval_samples("coordinator.commit.latency", self.commit_latency)
                + interval_samples("coordinator.rebalance.latency", self.rebalance_latency)
                + [Sample("coordinator.rebalance.latency.total",
                          int(round(self.rebalance_total * 1000)), counter=True)])

    def _queue_assign(self, keys: List[Key]) -> None:
        self._app_pending += 1
        tps = [TopicPartition(t, p) for t, p in keys]
        with self._app_lock:
            self.app_events.append(("assign", tps, self._op_token))
        self.wake_app()

    def _metadata_arrived(self, changed: Any) -> None:
        self._report_topic_errors()
        self._on_metadata(changed)

    def _report_topic_errors(self) -> None:
        """A topic the subscription names (not a pattern) that the metadata says is
        not there, or not ours to read: one error event per topic and error, as
        librdkafka's "Subscribed topic not available" (the group waits for it
        meanwhile; a misspelt name was never said)."""
        if self.patterns is None:
            if self._topic_errors:
                self._topic_errors.clear()
            return
        topics = self.cluster.metadata.topics
        for name in self.patterns:
            if name.startswith("^"):
                continue
            info = topics.get(name)
            code = 0 if info is None else info.error
            if code in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE):
                self._topic_errors.pop(name, None)
            elif self._topic_errors.get(name) != code:
                self._topic_errors[name] = code
                self.deliver_error(KafkaError(
                    code, f"Subscribed topic not available: {name}: "
                    f"{KafkaError(code).str()}"), name)

    def _on_metadata(self, changed: Any) -> None:
        if self._leading is not None:
            self._lead_again(self._leading, self._op_token)   # the topics may be known now
        if self.patterns is None or self.state != STABLE:
            return
        topics = self._subscribed_topics()
        if topics is None:
            return
        md = self.cluster.metadata
        counts = {t: md.topics[t].partition_count for t in topics if t in md.topics}
        if topics != self.joined_topics or counts != self._joined_counts:
            self._request_rejoin("subscribed topics changed")

    # -- heartbeats and losing the membership ------------------------------------------------
    def _send_heartbeat(self, now: float) -> None:
        conn = self._coord_conn()
        if conn is None:
            return
        self._heartbeat_in_flight = True
        self._next_heartbeat = now + self.heartbeat_interval
        token = self._op_token
        req = HeartbeatRequest(group_id=self.group_id, generation_id=self.generation,
                               member_id=self.member_id, group_instance_id=self.instance_id)
        conn.send(req, lambda resp, err: self._on_heartbeat(resp, err, token),
                  timeout=self.session_timeout_ms / 1000.0)

    def _on_heartbeat(self, resp: Any, err: Optional[KafkaError], token: int) -> None:
        self._heartbeat_in_flight = False
        if token != self._op_token or not (self.state == STABLE
                                           or self._member_awaiting_application()):
            return
        code = broker_code(resp.error_code) if err is None else err.code()
        if code == ErrorCode.NONE:
            self._last_heartbeat_ok = time.monotonic()
            self._rejoin_backoff.reset()
            self._membership_answered()
            return
        self.log.debug("group %s: heartbeat in %s: %s", self.group_id, self.state,
                       KafkaError(code).name())
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            # The coordinator keeps the member for the rebalance (as the Java client
            # counts it): a member whose application owes a revocation hears this until
            # it rejoins, and would otherwise give itself up after session.timeout.ms.
            self._last_heartbeat_ok = time.monotonic()
            self._request_rejoin("group is rebalancing")
        elif code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                      ErrorCode.FENCED_INSTANCE_ID):
            self._lose(KafkaError(code).str(), reset_member=code == ErrorCode.UNKNOWN_MEMBER_ID)
            if code == ErrorCode.FENCED_INSTANCE_ID:
                self.deliver_error(client_error(code, f"group {self.group_id}: fenced by "
                                                f"another member with group.instance.id "
                                                f"{self.instance_id!r}", fatal=True))
                self.patterns = None
        elif code in COORDINATOR_ERRORS:
            self._membership_refused(code, "heartbeat")
        elif code in COORDINATOR_LOST:
            self._coordinator_lost(f"heartbeat: {KafkaError(code).str()}")
        self.io.wake()

    def _lose(self, why: str, reset_member: bool) -> None:
        """The membership is gone: the partitions are lost (not revoked cleanly)."""
        self.log.info("group %s: assignment lost (%s)", self.group_id, why)
        self._op_token += 1
        self._reset_member(reset_member)
        if self.owned:
            owned = sorted(self.owned)
            self.owned = set()
            self._queue_revoke(owned, lost=True)
        self.state = UNJOINED
        self._rejoin_reason = why
        # KIP-580: a membership lost again and again (a coordinator that refuses every
        # heartbeat) was rejoined every retry.backoff.ms; a later wait already set (a
        # failed join's) stands.
        self._rejoin_after = max(self._rejoin_after,
                                 time.monotonic() + self._rejoin_backoff.next_delay())

    def _poll_resumed(self) -> None:
        self._rejoin_after = 0.0
        self._request_rejoin("application polled again after max.poll.interval.ms")

    def _max_poll_exceeded(self) -> None:
        self._held_for_poll_error = _HOLD_NEW
        self._poll_exceeded = True
        self.deliver_error(KafkaError(
            KafkaError._MAX_POLL_EXCEEDED,
            f"Application maximum poll interval ({int(self.max_poll_interval * 1000)}ms) "
            f"exceeded: leaving group"))
        self._leave("max.poll.interval.ms exceeded")
        self._lose("max.poll.interval.ms exceeded", reset_member=True)
        # Stay out until the application polls again (serve() asks for the rejoin).
        self._rejoin_after = float("inf")

    def _leave_for_good(self, reason: str, done: threading.Event) -> None:
        """Leave the group, never to join again: the consumer is going away."""
        self.patterns = None
        self._leave(reason, done)
        self.closed = True

    def _leave(self, reason: str, done: Optional[threading.Event] = None) -> None:
        if not self.member_id or self.instance_id is not None:
            # Static members keep their place until session.timeout.ms (KIP-345).
            if done is not None:
                done.set()
            return
        member_id, group_id = self.member_id, self.group_id

        def make(version: int) -> Any:
            if version >= 3:   # v3+ names the members leaving; older versions one member id
                return LeaveGroupRequest(group_id=group_id, members=[
                    LeaveGroupRequest.MemberIdentity(member_id=member_id,
                                                     group_instance_id=None, reason=reason)])
            return LeaveGroupRequest(group_id=group_id, member_id=member_id)

        # Beside a held join, the LeaveGroup would wait for the rebalance it is meant to
        # let go on without us (the group then waited for our session to expire); the
        # other connection queues it until it is up.
        beside = self._beside_join()
        self.log.debug("group %s: leaving (%s)", self.group_id, reason)
        self._op_token += 1
        self.member_id = ""
        self.generation = -1
        self.state = UNJOINED
        self._send_leave(ApiKey.LEAVE_GROUP, make, done, beside)

    def _send_leave(self, api_key: ApiKey, make: Callable[[int], Any],
                    done: Optional[threading.Event], beside: Any = None) -> None:
        """Send a leave built by ``make(version)`` to the coordinator: at once when it is
        connected (on ``beside``, the broker's other connection, when given), else once it
        is found and connected. A coordinator that moved, or could not be reached, is
        looked up again and the leave sent again, for LEAVE_BUDGET_S. ``done`` is set when
        it is answered or given up."""
        deadline = time.monotonic() + LEAVE_BUDGET_S
        name = api_key.name

        def left(resp: Any, err: Optional[KafkaError]) -> None:
            code = err.code() if err is not None else broker_code(resp.error_code)
            if (code in COORDINATOR_LOST or code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) \
                    and time.monotonic() < deadline:
                if code in COORDINATOR_LOST:
                    self._coordinator_lost(f"{name} (leaving): {KafkaError(code).name()}")
                self.log.debug("group %s: leaving again after %s", self.group_id,
                               KafkaError(code).name())
                self._send(api_key, make, left, deadline, timeout=LEAVE_BUDGET_S)
                return
            self.log.debug("group %s: leave answered: %s", self.group_id,
                           KafkaError(code).name())
            if done is not None:
                done.set()

        coord = self._coord_conn()
        if beside is not None and coord is not None and coord.ready:
            version = coord.versions.get(api_key, 0)
            beside.send(make(version), left, version=version, timeout=LEAVE_BUDGET_S)
            return
        self._send(api_key, make, left, deadline, timeout=LEAVE_BUDGET_S)

    # -- offsets -----------------------------------------------------------------------------
    def _join_at_coordinator(self) -> bool:
        """Whether a JoinGroup or SyncGroup of this member waits at the coordinator."""
        return self.state in (JOINING, SYNCING)

    def _beside_join(self) -> Any:
        """While our JoinGroup (or SyncGroup) waits at the coordinator, which answers a
        connection's requests in order until every member has joined, the broker's other
        connection (connecting it if down): a request on the coordinator's own would
        wait for the whole rebalance. None when no join is held (or no coordinator)."""
        if self.coord_id is None or not self._join_at_coordinator():
            return None
        return self.cluster.ensure_connected(self.coord_id)

    def _auto_commit(self) -> None:
        if self.assignment_lost:   # not ours to commit (see commit())
            return
        stored = self.offsets.stored_offsets()
        if not stored:
            return
        offsets = _commit_entries(stored)
        named = auto_commit_list(self.offsets.assigned_keys(), stored) \
            if self.config["on_commit"] is not None else stored

        def done(err: Optional[KafkaError], result: List[TopicPartition]) -> None:
            if self.config["on_commit"] is not None:
                self._queue_commit_result(err, _with_left_out(named, result))
            elif err is not None:
                self.log.info("auto commit failed: %s", err.str())

        self._commit(offsets, done, time.monotonic() + self.request_timeout)

    def _commit(self, offsets: List[Tuple[str, int, int, Optional[str], int]],
                done: Callable[[Optional[KafkaError], List[TopicPartition]], None],
                deadline: float, number: int = 0,
                settled: Optional[List[TopicPartition]] = None,
                last: Optional[List[TopicPartition]] = None, tries: int = 0) -> None:
        """OffsetCommit of ``offsets``, retried on coordinator and transport errors until
        ``deadline``, the waits doubling (KIP-580); ``done(first error, a TopicPartition
        per entry)``. A retry carries the commit's ``number``, the entries ``settled``
        before, the ``last`` attempt's results (the entries :meth:`_may_retry` refuses
        now end with those) and the number of ``tries`` that failed."""
        if not number:
            self._commits_made += 1
            number = self._commits_made
            keys = [(topic, p) for topic, p, *_rest in offsets]
            for key in keys:
                self._latest_commit[key] = number
            reply = done

            def done(err: Optional[KafkaError], result: List[TopicPartition]) -> None:
                # Finished: no retry of this commit follows, so its marks can go (the
                # table would otherwise hold every partition ever committed).
                for key in keys:
                    if self._latest_commit.get(key) == number:
                        del self._latest_commit[key]
                reply(err, result)
        settled = settled or []
        if last is not None:
            again = [o for o in offsets if self._may_retry(o[0], o[1], number)]
            settled = settled + [tp for o, tp in zip(offsets, last) if o not in again]
            if not again:
                done(_first_error(settled), settled)
                return
            offsets = again
        by_topic: Dict[str, List[Any]] = {}
        for topic, p, off, meta, epoch in offsets:
            by_topic.setdefault(topic, []).append(OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=off, committed_leader_epoch=epoch,
                commit_timestamp=-1, committed_metadata=metadata_to_commit(meta) or ""))
        # As a member, with the last generation joined (also while rejoining: the
        # broker then answers REBALANCE_IN_PROGRESS rather than taking a non-member commit).
        member = self.patterns is not None and self.generation >= 0 and bool(self.member_id)
        # Beside a held join (see _beside_join) the commit would wait for the whole
        # rebalance (a commit() for up to its timeout, while a member driven by the same
        # thread cannot rejoin) and then fail on a generation that is gone; on the other
        # connection it is answered at once: Apache Kafka takes a commit of the current
        # generation while the group prepares its rebalance (the commits of on_revoke)
        # and refuses one while the assignment is being made.
        side = self._beside_join() if self.patterns is not None else None
        if side is not None and not side.ready:
            if time.monotonic() + SIDE_COMMIT_POLL_S < deadline:
                self.io.call_later(SIDE_COMMIT_POLL_S, self._commit, offsets, done,
                                   deadline, number, settled)
                return
            side = None     # out of time: the coordinator's connection it is
        carried: List[int] = []  # the generation the request carries
        sent_at = time.monotonic()

        def make(version: int) -> Any:
            carried.append(self.generation if member else -1)
            return OffsetCommitRequest(
                group_id=self.group_id,
                generation_id_or_member_epoch=carried[-1],
                member_id=self.member_id if member else "",
                group_instance_id=self.instance_id if member and version >= 7 else None,
                retention_time_ms=-1,
                topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                        for t, ps in by_topic.items()])

        def answered(resp: Any, err: Optional[KafkaError]) -> None:
            if err is None:
                self.commit_latency.add(time.monotonic() - sent_at)
            result = []
            first_err: Optional[KafkaError] = err
            codes: Dict[Key, int] = {}
            if err is None:
                for t in resp.topics:
                    for pr in t.partitions:
                        codes[(t.name, pr.partition_index)] = broker_code(pr.error_code)
            retry = err is not None and err.code() in NO_ANSWER
            for topic, p, off, meta, epoch in offsets:
                # A partition the answer leaves out is not committed.
                code = codes.get((topic, p), ErrorCode.UNKNOWN_SERVER_ERROR) \
                    if err is None else err.code()
                tp = TopicPartition(topic, p, off, meta or None,
                                    epoch if epoch >= 0 else None)
                if code:
                    e = err if err is not None else client_error(
                        code, f"OffsetCommit {topic} [{p}]" + (
                            "" if (topic, p) in codes else ": not in the answer"))
                    tp._set_error(e)
                    if first_err is None:
                        first_err = e
                    if code in COORDINATOR_ERRORS or code in (
                            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                            # KIP-848: the member's epoch moved on; the next try carries
                            # the one its heartbeat has brought meanwhile
                            ErrorCode.STALE_MEMBER_EPOCH):
                        retry = True
                result.append(tp)
            delay = retry_delay(self.retry_backoff, self.retry_backoff_max, tries + 1)
            if retry and time.monotonic() + delay < deadline:
                if (err is not None and side is None) or any(c in COORDINATOR_ERRORS
                                                             for c in codes.values()):
                    self._coordinator_lost("commit failed")
                # What was committed is; what failed goes again.
                failed = [(o, tp) for o, tp in zip(offsets, result) if tp.error is not None]
                ok = [tp for tp in result if tp.error is None]
                self.offsets.set_committed({(tp.topic, tp.partition): tp.offset for tp in ok})
                self.io.call_later(delay, self._commit, [o for o, _ in failed],
                                   done, deadline, number, settled + ok,
                                   [tp for _, tp in failed], tries + 1)
                return
            self.offsets.set_committed({(topic, p): off for (topic, p, off, _m, _e), tp
                                        in zip(offsets, result) if tp.error is None})
            if settled:     # entries of earlier attempts this one did not send
                result = settled + result
                if first_err is None:
                    first_err = _first_error(settled)
            if first_err is not None and first_err.code() in (
                    ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION,
                    ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH,
                    ErrorCode.STALE_MEMBER_EPOCH) and \
                    not self._join_at_coordinator() and carried[-1:] == [self.generation]:
                # Refused on the generation the member still has, and no join under way
                # that brings the next one: the group moved on without it.
                self._request_rejoin("commit was rejected by the group")
            done(first_err, result)

        self._send(ApiKey.OFFSET_COMMIT, make, answered, deadline=deadline, max_version=9,
                   conn=side)

    def _may_retry(self, topic: str, partition: int, number: int) -> bool:
        """Whether commit ``number`` may send its offset of a partition again: no later
        commit of it was made meanwhile (the retry would take the group's offset back),
        and, for a subscription, the partition is still this consumer's (else the retry,
        carrying the new generation, would overwrite what its new owner commits)."""
        if self._latest_commit.get((topic, partition)) != number:
            return False
        return self.patterns is None or (topic, partition) in self.offsets.assigned_keys()

    def lookup_committed(self, parts: List[Any],
                         done: Callable[[Optional[Dict[Key, Tuple[int, int]]]], None]
                         ) -> None:
        """Fetcher hook: committed offsets of ``parts`` with their leader epochs (-1:
        none) (OFFSET_STORED resolution)."""
        keys = [p.key for p in parts]

        def finished(result: Optional[Dict[Key, Tuple[int, Optional[str], int]]],
                     err: Optional[KafkaError] = None) -> None:
            if result is None:
                if err is not None and not err.retriable() and err.code() not in NO_ANSWER \
                        and err.code() != self._offset_fetch_error_told:
                    self._offset_fetch_error_told = err.code()
                    self.deliver_error(err)
                done(None)
                return
            self._offset_fetch_error_told = None
            done({k: (v[0], v[2] if v[2] is not None else -1) for k, v in result.items()})

        self._offset_fetch(keys, finished, time.monotonic() + self.request_timeout)

    def _offset_fetch(self, keys: List[Key], done: Callable[..., None], deadline: float,
                      tries: int = 0) -> None:
        """OffsetFetch of ``keys``, retried on coordinator, loading and transport
        errors until ``deadline``, the waits doubling (KIP-580)."""
        asked = set(keys)
        by_topic: Dict[str, List[int]] = {}
        for t, p in keys:
            by_topic.setdefault(t, []).append(p)

        def make(version: int) -> Any:
            return OffsetFetchRequest(
                group_id=self.group_id,
                topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=t,
                                                                   partition_indexes=ps)
                        for t, ps in by_topic.items()],
                require_stable=self.offsets.read_committed and version >= 7)

        def answered(resp: Any, err: Optional[KafkaError]) -> None:
            code = ErrorCode.NONE if err is None else err.code()
            if err is None and getattr(resp, "error_code", ErrorCode.NONE) != ErrorCode.NONE:
                code = broker_code(resp.error_code)
            result: Dict[Key, Tuple[int, Optional[str], int]] = {}
            if code == ErrorCode.NONE:
                for t in resp.topics:
                    for pr in t.partitions:
                        if (t.name, pr.partition_index) not in asked:
                            continue  # not asked: not this answer's to give
                        if pr.error_code and not code:
                            code = broker_code(pr.error_code)
                        result[(t.name, pr.partition_index)] = (
                            pr.committed_offset, committed_metadata(pr.metadata),
                            getattr(pr, "committed_leader_epoch", -1))
            if code == ErrorCode.NONE:
                done(result)
                return
            if code in COORDINATOR_LOST:
                self._coordinator_lost("offset fetch failed")
            retriable = code in COORDINATOR_ERRORS or code in (
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.UNSTABLE_OFFSET_COMMIT,
                KafkaError._TRANSPORT)
            delay = retry_delay(self.retry_backoff, self.retry_backoff_max, tries + 1)
            if retriable and time.monotonic() + delay < deadline:
                self.io.call_later(delay, self._offset_fetch, keys, done, deadline,
                                   tries + 1)
                return
            done(None, err if err is not None else client_error(code, "OffsetFetch"))

        # v8+ asks for several groups at once, in another layout: v7 is all we need.
        self._send(ApiKey.OFFSET_FETCH, make, answered, deadline=deadline, max_version=7)


def auto_commit_list(keys: Iterable[Key], stored: List[TopicPartition]
                     ) -> List[TopicPartition]:
    """The entries of a commit the client makes itself (periodic, at a revocation, of
    partitions leaving the assignment, at close): the ``stored`` offsets, and
    OFFSET_INVALID for each of the partitions ``keys`` it covers with nothing to commit,
    in partition order. The commit leaves those out and its result names them as given
    (see :func:`_with_left_out`): librdkafka's automatic commits name every partition
    they cover, and a program counting partitions in on_commit counts them all."""
    entries = {(tp.topic, tp.partition): tp for tp in stored}
    for topic, partition in keys:
        if (topic, partition) not in entries:
            entries[(topic, partition)] = TopicPartition(topic, partition, OFFSET_INVALID)
    return [entries[key] for key in sorted(entries)]


def _with_left_out(given: List[TopicPartition], result: List[TopicPartition]
                   ) -> List[TopicPartition]:
    """A commit's ``result`` with the partitions of ``given`` it left out (a negative
    offset) back in their place, as given and without an error: librdkafka's commit
    result names every partition it was given."""
    if len(result) >= len(given):
        return result
    answered = {(tp.topic, tp.partition): tp for tp in result}
    merged: List[TopicPartition] = []
    for tp in given:
        found = answered.pop((tp.topic, tp.partition), None)
        merged.append(found or TopicPartition(tp.topic, tp.partition, tp.offset, tp.metadata,
                                              tp.leader_epoch))
    return merged + list(answered.values())


def _commit_entries(tps: List[TopicPartition]
                    ) -> List[Tuple[str, int, int, Optional[str], int]]:
    """(topic, partition, offset, metadata, leader epoch or -1) of each partition, as
    OffsetCommit takes them."""
    return [(tp.topic, tp.partition, tp.offset, tp.metadata,
             tp.leader_epoch if tp.leader_epoch is not None else -1) for tp in tps]
