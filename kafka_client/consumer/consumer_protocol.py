"""Consumer group membership with KIP-848's consumer protocol (``group.protocol=consumer``).

The group coordinator assigns the partitions (a server-side assignor); the member sends
ConsumerGroupHeartbeat requests and reconciles the assignment each answer brings: it
revokes the partitions the assignment no longer holds (on_revoke, with the commit of
enable.auto.commit), assigns the new ones (on_assign), both incrementally, and reports
what it then owns in its next heartbeat, sent at once. The coordinator hands a partition
to a member only after its previous owner has reported it gone, so a partition is never
consumed by two members at a time; no JoinGroup/SyncGroup round, no rebalance barrier.

What stays as in the classic protocol (:class:`~kafka_client.consumer.group.GroupCoordinator`,
which this class extends): finding the coordinator, the application-thread side of the
rebalance callbacks (cooperative: incremental), offset commits (the member epoch is sent
where the classic protocol sends the generation), auto-commit, close() and the farewell of
a consumer never closed.

The member id is the member's own (KIP-1082), a UUID made when the consumer is created and
kept for its lifetime, also when it joins again after being fenced.
"""
from __future__ import annotations

import time
import uuid
from collections import deque
from typing import Any, Callable, Deque, Dict, FrozenSet, List, Optional, Set, Tuple

from kafka_client._backoff import retry_backoff
from kafka_client.consumer.group import (
    COORDINATOR_ERRORS,
    COORDINATOR_LOST,
    JOINING,
    ErrorDeliverer,
    STABLE,
    UNJOINED,
    GroupCoordinator,
    Key,
)
from kafka_client.errors import KafkaError, broker_code, client_error
from kafka_proto.enums import MemberEpoch
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    ApiKey,
    ConsumerGroupHeartbeatRequest,
)

__all__ = ["ConsumerProtocolGroup"]

#: The longest heartbeat interval taken from the coordinator: a broker allows at most
#: group.consumer.max.heartbeat.interval.ms (15 s by default, under the 45 s least session
#: it allows). A longer one (a broken answer: 2^31-1 ms) would let the session expire
#: while the member goes on reading partitions the group gave to another.
MAX_HEARTBEAT_INTERVAL_S = 15.0

#: Answers after which the member joins again as a new member of the group (epoch 0,
#: same member id): its partitions are lost, not revoked.
FENCED_ERRORS = frozenset((ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH))
#: Answers that end the membership with an error for the application: the member stops
#: (subscribe() again once the cause is fixed). Not TOPIC_AUTHORIZATION_FAILED (a
#: subscribed topic the ACLs refuse): told once, the member heartbeats on and gets its
#: partitions once the ACL is granted, as the Java client (KAFKA-18813) and librdkafka do.
STOPPING_ERRORS = frozenset((
    ErrorCode.UNSUPPORTED_ASSIGNOR, ErrorCode.INVALID_REQUEST,
    ErrorCode.GROUP_MAX_SIZE_REACHED, ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
    ErrorCode.UNSUPPORTED_VERSION, ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.INVALID_REGULAR_EXPRESSION))
#: Answers that fence a static member for good (another process has its instance id).
FATAL_ERRORS = frozenset((ErrorCode.FENCED_INSTANCE_ID, ErrorCode.UNRELEASED_INSTANCE_ID))


class _Sent:
    """The fields the coordinator has from this member (None: send all next time):
    ``regex`` is the SubscribedTopicRegex it resolves (None: the client resolves its
    patterns and sends names, as before ConsumerGroupHeartbeat v1)."""

    __slots__ = ("topics", "owned", "assignor", "regex")

    def __init__(self, topics: Optional[Tuple[str, ...]], owned: Optional[FrozenSet[Key]],
                 assignor: Optional[str], regex: Optional[str] = None) -> None:
        self.topics = topics
        self.owned = owned
        self.assignor = assignor
        self.regex = regex


class _Step:
    """One rebalance event handed to the application thread, in the order handed."""

    __slots__ = ("keys", "adds", "token")

    def __init__(self, keys: List[Key], adds: bool, token: int) -> None:
        self.keys = keys
        self.adds = adds
        self.token = token


class ConsumerProtocolGroup(GroupCoordinator):
    """Membership of one consumer by ConsumerGroupHeartbeat (I/O thread unless noted).
    States: UNJOINED (to join), JOINING (the heartbeat with epoch 0 in flight), STABLE
    (a member; reconciling or not)."""

    def __init__(self, config: Any, cluster: Any, io: Any, offsets: Any,
                 wake_app: Callable[[], None],
                 deliver_error: ErrorDeliverer) -> None:
        super().__init__(config, cluster, io, offsets, wake_app, deliver_error)
        self.cooperative = True           # the application thread revokes incrementally
        self.assignors = []               # the coordinator assigns
        self.remote_assignor: Optional[str] = config["group.remote.assignor"] or None
        self.member_id = str(uuid.uuid4())
        #: the coordinator's heartbeat interval (its answers set it)
        self.heartbeat_interval = 1.0
        self._sent: Optional[_Sent] = None
        self._heartbeat_soon = False
        #: the newest assignment the coordinator sent, not yet reconciled:
        #: [(topic id, [partition])]
        self._target: Optional[List[Tuple[uuid.UUID, List[int]]]] = None
        #: rebalance events with the application thread, oldest first
        self._steps: Deque[_Step] = deque()
        #: while the assignment names topic ids (or partitions) no metadata shows: when
        #: the metadata is asked again, the waits doubling as KIP-580 has it
        self._ask_unresolved_at: Optional[float] = None
        self._unresolved_backoff = retry_backoff(config)
        self._subscribed_once = False

    @property
    def rebalance_protocol(self) -> Optional[str]:
        """``"COOPERATIVE"`` once the consumer has subscribed (as librdkafka's KIP-848
        consumer), None before."""
        return "COOPERATIVE" if self._subscribed_once else None

    def subscribe(self, topics: List[str], on_assign: Optional[Callable],
                  on_revoke: Optional[Callable], on_lost: Optional[Callable]) -> None:
        super().subscribe(topics, on_assign, on_revoke, on_lost)
        self._subscribed_once = True

    # ======================================================================= I/O thread
    def _membership_tick(self, now: float, at: Callable[[float], None]) -> None:
        if self.state == UNJOINED:
            if self._app_pending == 0:
                if now >= self._rejoin_after:
                    self._send_heartbeat(now)
                else:
                    at(self._rejoin_after)
            return
        if self.state != STABLE:
            return
        if now - self.last_poll > self.max_poll_interval and not self._poll_exceeded:
            self._max_poll_exceeded()
            return
        if self._ask_unresolved_at is not None and self._target is not None \
                and not self._steps:
            if now >= self._ask_unresolved_at:
                self._reconcile()
            else:
                at(self._ask_unresolved_at)
        if self._heartbeat_in_flight:
            return
        if self._heartbeat_soon or now >= self._next_heartbeat:
            self._send_heartbeat(now)
        else:
            at(self._next_heartbeat)

    def _request_rejoin(self, reason: str) -> None:
        """The subscription or the topics changed, or a commit was refused: tell the
        coordinator now (there is no rejoining in this protocol)."""
        if self.patterns is None:
            return
        self._rejoin_reason = reason
        self._beat_soon()

    def _join_at_coordinator(self) -> bool:
        return False  # heartbeats are answered at once: nothing of ours is held there

    def _beat_soon(self) -> None:
        self._heartbeat_soon = True
        self.io.wake()

    def _set_subscription(self, topics: Optional[List[str]], regexes: List[Any],
                          done: Any = None) -> None:
        if topics is None:
            self._steps.clear()      # the application's events are dropped with them
            self._target = None
        super()._set_subscription(topics, regexes, done)

    def _on_metadata(self, changed: Any) -> None:
        if self.patterns is None:
            return
        if self._target is not None:
            self._reconcile()        # topic ids the last answer named may be known now
        if self.state == STABLE and self._regexes and self._sent is not None \
                and self._sent.regex is None:
            topics = self._subscribed_topics()
            if topics is not None and tuple(topics) != self._sent.topics:
                self._beat_soon()

    # -- heartbeats ----------------------------------------------------------------------
    def _regex_version(self) -> Optional[bool]:
        """Whether the coordinator resolves the subscription's patterns itself
        (ConsumerGroupHeartbeat v1, KIP-848's SubscribedTopicRegex, as librdkafka sends
        them); None while its connection is not up (the versions are not known)."""
        conn = self._coord_conn()
        if conn is None or not conn.ready:
            return None
        version = conn.versions.get(ApiKey.CONSUMER_GROUP_HEARTBEAT)
        return version is not None and version >= 1

    def _send_heartbeat(self, now: float) -> None:
        on_broker = self._regex_version() if self._regexes else False
        if on_broker is None:
            # A pattern: how to send it depends on the coordinator's versions.
            self._rejoin_after = self._next_heartbeat = now + 0.02
            return
        self._broker_resolves_regex = on_broker
        regex: Optional[str] = None
        topics: Optional[List[str]]
        if on_broker:
            # Names as names, the patterns as one RE2/J expression the coordinator
            # matches whole topic names against (librdkafka's "(^a.*)|(^b.*)"); "" says
            # there is none.
            topics = sorted(
                {t for t in self.patterns or () if not t.startswith("^")})
            regex = "|".join(f"({t})" for t in self.patterns or () if t.startswith("^"))
        else:
            topics = self._subscribed_topics()
            if topics is None:       # a pattern waits for the first full metadata
                self.cluster.metadata.request(None)
                self._rejoin_after = now + 0.05
                return
        joining = self.state == UNJOINED
        epoch = MemberEpoch.JOIN if joining else self.generation
        if joining:
            self._sent = None
            self.state = JOINING
            if self._rebalance_started is None:
                self._rebalance_started = time.monotonic()
            self.log.debug("group %s: joining as %s with %s", self.group_id,
                           self.member_id, topics)
        sent = self._sent
        owned = frozenset(self.owned)
        topic_ids = self._topic_ids()
        if any(t not in topic_ids for t, _p in owned):
            # A partition whose topic id is unknown cannot be reported: say nothing
            # about the owned partitions this time.
            owned_field = None
            report_owned: Optional[FrozenSet[Key]] = sent.owned if sent else None
        elif sent is None or sent.owned != owned:
            by_topic: Dict[str, List[int]] = {}
            for t, p in sorted(owned):
                by_topic.setdefault(t, []).append(p)
            owned_field = [ConsumerGroupHeartbeatRequest.TopicPartitions(
                topic_id=topic_ids[t], partitions=ps) for t, ps in by_topic.items()]
            report_owned = owned
        else:
            owned_field = None
            report_owned = owned
        full = sent is None
        new_topics = tuple(topics)
        req = ConsumerGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=epoch,
            instance_id=self.instance_id,
            rack_id=self.rack if full else None,
            rebalance_timeout_ms=int(self.max_poll_interval * 1000) if full else -1,
            subscribed_topic_names=list(new_topics)
            if sent is None or sent.topics != new_topics else None,
            subscribed_topic_regex=regex if sent is None or sent.regex != regex else None,
            server_assignor=self.remote_assignor
            if sent is None or sent.assignor != self.remote_assignor else None,
            topic_partitions=owned_field)
        will_have = _Sent(new_topics, report_owned, self.remote_assignor, regex)
        self._heartbeat_in_flight = True
        self._heartbeat_soon = False
        self._next_heartbeat = now + self.heartbeat_interval
        token = self._op_token
        self._send(ApiKey.CONSUMER_GROUP_HEARTBEAT, lambda v: req,
                   lambda resp, err: self._on_heartbeat_answer(resp, err, token, will_have),
                   deadline=now + self.request_timeout)

    def _topic_ids(self) -> Dict[str, uuid.UUID]:
        return {name: info.topic_id for name, info in self.cluster.metadata.topics.items()
                if info.topic_id is not None}

    def _on_heartbeat_answer(self, resp: Any, err: Optional[KafkaError], token: int,
                             sent: _Sent) -> None:
        self._heartbeat_in_flight = False
        if token != self._op_token or self.patterns is None:
            self.io.wake()
            return
        if err is not None:
            code = err.code()
            reason = err.str()
        else:
            code = broker_code(resp.error_code)
            reason = KafkaError(code).str() + (f": {resp.error_message}"
                                               if resp.error_message else "")
            if code == ErrorCode.NONE and resp.member_epoch < 1:
                # A member's epoch is 1 or more: sent back, this one would make the
                # broker refuse the next heartbeat (INVALID_REQUEST, which ends the
                # membership). Keep ours and ask again after the backoff.
                code = KafkaError._BAD_MSG
                reason = (f"answered without an error but with member epoch "
                          f"{resp.member_epoch}: ignored")
        if code == ErrorCode.NONE:
            self._answered(resp, sent)
        else:
            self._heartbeat_failed(code, reason)
        self.io.wake()

    def _answered(self, resp: Any, sent: _Sent) -> None:
        now = time.monotonic()
        self._join_backoff.reset()
        self._membership_answered()
        if self.state == STABLE:
            self._rejoin_backoff.reset()   # a member's heartbeat, not only its join
        self._join_error_told = None
        if resp.member_id:
            self.member_id = resp.member_id
        if resp.heartbeat_interval_ms > 0:
            self.heartbeat_interval = min(resp.heartbeat_interval_ms / 1000.0,
                                          MAX_HEARTBEAT_INTERVAL_S)
            self._next_heartbeat = min(self._next_heartbeat, now + self.heartbeat_interval)
        if self.state == JOINING:
            self.log.debug("group %s: joined as %s, epoch %d", self.group_id,
                           self.member_id, resp.member_epoch)
        self.state = STABLE
        self.generation = resp.member_epoch
        self._note_assigned_in()
        self._last_heartbeat_ok = now
        self._sent = sent
        if resp.assignment is not None:
            self._target = [(tp.topic_id, list(tp.partitions))
                            for tp in resp.assignment.topic_partitions]
            for tid, parts in self._target:
                if any(p < 0 for p in parts):
                    self.log.warning("group %s: the coordinator assigned partitions %s of "
                                     "topic %s: negative ones ignored", self.group_id, parts,
                                     tid)
            if self._rebalance_started is None:
                self._rebalance_started = now
            self._reconcile()

    def _heartbeat_failed(self, code: int, reason: str) -> None:
        self.log.debug("group %s: heartbeat (%s) failed: %s", self.group_id, self.state,
                       reason)
        self._sent = None            # say everything again next time
        if code in FENCED_ERRORS:
            # At once, as a new member (same member id), after the first fencing; fenced
            # again before a heartbeat succeeds, after a wait that doubles (KIP-580): a
            # coordinator fencing every join was asked thousands of times a second.
            at_once = self._rejoin_backoff.failures == 0
            self._lose(reason, reset_member=False)
            if at_once:
                self._rejoin_after = 0.0
        elif code in FATAL_ERRORS:
            self._stop(client_error(code, f"group {self.group_id}: group.instance.id "
                                    f"{self.instance_id!r} is in use by another member: "
                                    f"{reason}", fatal=True))
        elif code == KafkaError._UNSUPPORTED_FEATURE:
            self._stop(client_error(code, (
                f"group {self.group_id}: group.protocol=consumer needs a group coordinator "
                f"with ConsumerGroupHeartbeat (KIP-848: Apache Kafka 4.0 or later); "
                f"this one has none: use group.protocol=classic")))
        elif code in STOPPING_ERRORS:
            self._stop(client_error(code, f"ConsumerGroupHeartbeat {self.group_id}: "
                                    f"{reason}"))
        else:
            if code in COORDINATOR_ERRORS:
                self._membership_refused(code, "heartbeat")
            elif code in COORDINATOR_LOST:
                self._coordinator_lost(f"heartbeat: {reason}")
            elif code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and \
                    code != self._join_error_told:
                # Once per error while it lasts, not at every retry.
                self._join_error_told = code
                self.deliver_error(client_error(code, f"ConsumerGroupHeartbeat "
                                                f"{self.group_id}: {reason}"))
            # Try again after the backoff (doubling, KIP-580, as the Java client's
            # heartbeat does); a join in flight is a join still to make.
            retry_at = time.monotonic() + self._join_backoff.next_delay()
            if self.state == JOINING:
                self.state = UNJOINED
                self._rejoin_after = retry_at
            else:
                self._next_heartbeat = retry_at

    def _stop(self, err: KafkaError) -> None:
        """Out of the group with an error for the application; no more joining."""
        self._lose(err.str(), reset_member=False)
        self.deliver_error(err)
        self.patterns = None
        self._target = None

    # -- reconciliation --------------------------------------------------------------------
    def _reconcile(self) -> None:
        """Hand the newest assignment to the application thread (revoke, then assign),
        once the events of the one before are done and its topics' names are known."""
        if self._steps or self._target is None:
            return
        topics = self.cluster.metadata.topics
        names = {tid: name for name, tid in self._topic_ids().items()}
        target: Set[Key] = set()
        unresolved = False
        for tid, parts in self._target:
            name = names.get(tid)
            known = topics[name].partition_count if name is not None else 0
            if name is None or any(p >= known for p in parts):
                # A new topic or new partitions: the metadata will show them. The rest
                # is taken now (as the Java client and librdkafka do); this waits, and
                # the metadata is asked again after a backoff that doubles (asked at
                # once, each answer asked again: thousands of requests a second for a
                # topic id no metadata names; at a fast refresh's pace, ten a second).
                self.log.debug("group %s: assigned %s %s beyond the metadata yet",
                               self.group_id, name or tid, parts)
                unresolved = True
                if name is None:
                    continue
            target.update((name, p) for p in parts if 0 <= p < known)
        if unresolved:
            now = time.monotonic()
            if self._ask_unresolved_at is None or now >= self._ask_unresolved_at:
                self.cluster.metadata.request(None, fast=True)
                self._ask_unresolved_at = now + self._unresolved_backoff.next_delay()
            # Kept as the newest assignment, reconciled again when the metadata answers.
            if target == self.owned:
                return
        else:
            self._target = None
            self._ask_unresolved_at = None
            self._unresolved_backoff.reset()
            self.rebalanced(time.monotonic())
        revoked = sorted(self.owned - target)
        added = sorted(target - self.owned)
        if revoked or added:
            self.log.debug("group %s: epoch %d: revoking %s, assigning %s", self.group_id,
                           self.generation, revoked, added)
        if revoked:
            self._steps.append(_Step(revoked, False, self._op_token))
            self._queue_revoke(revoked, lost=False)
        if added:
            self._steps.append(_Step(added, True, self._op_token))
            self._queue_assign(added)

    def _step_done(self) -> None:
        self._app_pending = max(0, self._app_pending - 1)
        if self._steps:
            step = self._steps.popleft()
            if step.token == self._op_token:
                if step.adds:
                    self.owned.update(step.keys)
                else:
                    self.owned.difference_update(step.keys)
                if not self._steps:
                    self._beat_soon()      # report what is owned now
        self._reconcile()
        self.io.wake()

    def _revoke_done(self) -> None:
        self._step_done()

    def _assign_done(self) -> None:
        self._step_done()

    def _queue_lost(self, keys: List[Key]) -> None:
        self._steps.append(_Step(keys, False, self._op_token))
        self._queue_revoke(keys, lost=True)

    def _lose(self, why: str, reset_member: bool) -> None:
        """The membership is gone: every partition is lost (on_lost), and the member
        joins again as a new one (with its own member id)."""
        self.log.info("group %s: assignment lost (%s)", self.group_id, why)
        self._op_token += 1
        self._target = None
        self.generation = -1
        # What the application holds once it has run the events it has not run yet: a
        # revocation among them runs as a loss (its token is old), an assignment adds
        # partitions that are lost with the rest (each partition released once).
        held = set(self.owned)
        for step in self._steps:
            if step.adds:
                held.update(step.keys)
            else:
                held.difference_update(step.keys)
        self.owned = set()
        if held:
            self._queue_lost(sorted(held))
        self.state = UNJOINED
        self._sent = None
        self._rejoin_reason = why
        self._rejoin_after = time.monotonic() + self._rejoin_backoff.next_delay()

    # -- leaving -----------------------------------------------------------------------------
    def _leave(self, reason: str, done: Any = None) -> None:
        """Leave with epoch -1, or -2 for a static member (it keeps its assignment until
        its session times out, for its instance id's next member, KIP-848)."""
        if self.state == UNJOINED:
            if done is not None:
                done.set()
            return
        epoch = MemberEpoch.STATIC_LEAVE if self.instance_id is not None else MemberEpoch.LEAVE
        req = ConsumerGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=epoch,
            instance_id=self.instance_id, rebalance_timeout_ms=-1)
        self.log.debug("group %s: leaving (%s)", self.group_id, reason)
        self._op_token += 1
        self.generation = -1
        self.state = UNJOINED
        self._sent = None
        self._send_leave(ApiKey.CONSUMER_GROUP_HEARTBEAT, lambda version: req, done)
