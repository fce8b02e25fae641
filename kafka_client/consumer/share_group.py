"""Share group membership (KIP-932) for :class:`~kafka_client.ShareConsumer`: the member's
ShareGroupHeartbeat requests to the group coordinator (I/O thread).

The coordinator assigns the partitions; several members may be given the same partition
(records, not partitions, are handed out one member at a time, by the partition leaders'
ShareFetch answers). The member joins with epoch 0, then heartbeats every interval the
coordinator gives, with the epoch of its last answer; it sends its subscription when it
changed since the last heartbeat, and leaves with epoch -1. There is no reconciliation and
no rebalance callback: an assignment takes effect as it comes. A fenced member
(UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH) joins again with epoch 0.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from kafka_client._backoff import retry_backoff
from kafka_client._cluster.calls import Call, CallRunner, Coordinator, broker_error
from kafka_client.errors import KafkaError, broker_code
from kafka_proto.enums import CoordinatorType, MemberEpoch
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import ApiKey, ShareGroupHeartbeatRequest

__all__ = ["ShareMember", "ShareAssignment", "MAX_HEARTBEAT_INTERVAL_S"]

#: The longest heartbeat interval taken from the coordinator (as the consumer protocol's
#: member: a broken answer's 2^31-1 ms would let the session expire).
MAX_HEARTBEAT_INTERVAL_S = 15.0

#: Answers after which the member joins again with epoch 0: what it was assigned is gone.
FENCED_ERRORS = frozenset((ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH))
#: Answers that mean "ask the coordinator's broker again" (the call runner looks it up).
COORDINATOR_MOVED = frozenset((ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))


@dataclass(frozen=True)
class ShareAssignment:
    """What the coordinator assigned, by topic id: ``{topic_id: (partition, ...)}``."""

    partitions: Dict[uuid.UUID, Tuple[int, ...]]


class ShareMember:
    """One share consumer's membership (I/O thread, except :meth:`subscribe`,
    :meth:`polled` and :meth:`leave`, which queue their work on it).

    ``on_assignment(assignment)`` runs on the I/O thread with each assignment the
    coordinator sends (an empty one once the member is fenced or leaves);
    ``report(error)`` with errors the application should see (authorization, a group of
    another type)."""

    def __init__(self, config: Any, runner: CallRunner,
                 on_assignment: Callable[[ShareAssignment], None],
                 report: Callable[[KafkaError], None]) -> None:
        self.runner = runner
        self.io = runner.io
        self.log = config.logger_for("kafka_client.consumer.share")
        self.group_id: str = config["group.id"]
        self.rack: Optional[str] = config["client.rack"] or None
        self.request_timeout = runner.request_timeout
        self.max_poll_interval = config["max.poll.interval.ms"] / 1000.0
        #: the coordinator makes the member id (version 0), a later one may take ours
        self.member_id = str(uuid.uuid4())
        self.epoch = int(MemberEpoch.JOIN)
        self.topics: Optional[List[str]] = None
        self._sent_topics: Optional[List[str]] = None
        self.heartbeat_interval = 1.0
        self._next_heartbeat = 0.0
        self._in_flight = False
        self._soon = False
        self._backoff = retry_backoff(config)
        self.on_assignment = on_assignment
        self.report = report
        self.last_poll = time.monotonic()
        #: the application is inside poll() (waiting for records is not "not polling")
        self.in_poll = False
        #: left for not polling within max.poll.interval.ms; joins again at the next poll
        self.poll_exceeded = False
        self._leaving: Optional[Callable[[], None]] = None
        #: a join went out since the member last left or was fenced: the coordinator may
        #: have the member (and give it partitions) before its answer comes, if it comes
        self._join_sent = False
        self._target = Coordinator(CoordinatorType.GROUP, self.group_id)

    @property
    def joined(self) -> bool:
        """Whether the coordinator has answered this member's join (its epoch is one)."""
        return self.epoch > 0

    # ======================================================================= any thread
    def subscribe(self, topics: Optional[List[str]]) -> None:
        """Change the subscription (None: unsubscribe, which leaves the group)."""
        self.io.call_soon(self._set_topics, topics)

    def polled(self, inside: bool) -> None:
        """The application entered poll() (``inside``) or left it: a member that left for
        exceeding max.poll.interval.ms joins again. Time spent inside poll() waiting
        for records never counts against max.poll.interval.ms."""
        self.last_poll = time.monotonic()
        self.in_poll = inside
        if self.poll_exceeded:
            self.io.call_soon(self._rejoin_after_poll)

    def leave(self, done: Callable[[], None]) -> None:
        """Leave the group (heartbeat with epoch -1); ``done()`` runs on the I/O thread
        once it is answered or failed (at once if the member never joined)."""
        self.io.call_soon(self._leave, done)

    # ======================================================================= I/O thread
    def _set_topics(self, topics: Optional[List[str]]) -> None:
        if topics is None:
            self._leave(lambda: None)
            self.on_assignment(ShareAssignment({}))
            return
        self.topics = topics
        self._soon = True
        self.io.wake()

    def _rejoin_after_poll(self) -> None:
        self.poll_exceeded = False
        self._soon = True

    def tick(self, now: float) -> Optional[float]:
        """Send the heartbeat that is due; returns when the next one is."""
        if self.topics is None or self._leaving is not None or self.poll_exceeded:
            return None
        if self.joined and not self.in_poll and now - self.last_poll > self.max_poll_interval:
            self.log.warning("share group %s: no poll() for %.0f s (max.poll.interval.ms): "
                             "leaving the group until the next poll()", self.group_id,
                             now - self.last_poll)
            self.poll_exceeded = True
            self._leave(lambda: None, rejoin=True)
            return None
        if self._in_flight:
            return None
        if self._soon or now >= self._next_heartbeat:
            self._send(now)
            return None
        return self._next_heartbeat

    def _send(self, now: float) -> None:
        joining = not self.joined
        self._join_sent = self._join_sent or joining
        topics = self.topics
        changed = joining or topics != self._sent_topics
        req = ShareGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch,
            rack_id=self.rack if joining else None,
            subscribed_topic_names=list(topics or ()) if changed else None)
        self._in_flight = True
        self._soon = False
        self._next_heartbeat = now + self.heartbeat_interval
        epoch = self.epoch

        def answered(resp: Any, conn: Any) -> Optional[KafkaError]:
            code = broker_code(resp.error_code)
            if code in COORDINATOR_MOVED:
                return broker_error(code, resp.error_message, "ShareGroupHeartbeat")
            self._in_flight = False
            self._answered(resp, code, topics, epoch)
            self.io.wake()
            return None

        def failed(error: KafkaError) -> None:
            self._in_flight = False
            self._next_heartbeat = time.monotonic() + self._backoff.next_delay()
            self.log.debug("share group %s: heartbeat failed: %s", self.group_id,
                           error.str())
            if error.code() == KafkaError._UNSUPPORTED_FEATURE and self.topics is not None:
                self._join_sent = False    # never sent: no member to leave
                # A broker without share groups (Kafka before 4.1, Tansu, noida-db): told
                # once, and the member stops (subscribe() again tries again).
                self.topics = None
                self.report(KafkaError(error.code(), f"{error.str()}: the broker has no "
                                       f"share groups (KIP-932, Apache Kafka 4.1 or later)"))
            self.io.wake()

        self.runner.submit(Call("ShareGroupHeartbeat", ApiKey.SHARE_GROUP_HEARTBEAT,
                                self._target, now + self.request_timeout,
                                lambda v: req, answered, failed))

    def _answered(self, resp: Any, code: int, topics: Optional[List[str]],
                  epoch: int) -> None:
        if self._leaving is not None or self.topics is None or epoch != self.epoch:
            return                       # left (or joined again) meanwhile
        if code in FENCED_ERRORS:
            self.log.info("share group %s: member %s fenced (%s): joining again",
                          self.group_id, self.member_id, KafkaError(code).name())
            self.epoch = int(MemberEpoch.JOIN)
            self._sent_topics = None
            self._join_sent = False    # the coordinator no longer has it
            self._soon = True
            self.on_assignment(ShareAssignment({}))
            return
        if code != ErrorCode.NONE:
            if not self.joined:
                self._join_sent = False    # a join refused: no member to leave
            error = broker_error(code, resp.error_message,
                                 f"ShareGroupHeartbeat of group {self.group_id!r}")
            if not error.retriable():
                # (a retriable one, REQUEST_TIMED_OUT say, is only retried: no event)
                self.report(error)
            self._next_heartbeat = time.monotonic() + self._backoff.next_delay()
            return
        self._backoff.reset()
        if resp.member_id:
            self.member_id = resp.member_id
        if resp.member_epoch > 0:
            self.epoch = resp.member_epoch
        if resp.heartbeat_interval_ms > 0:
            self.heartbeat_interval = min(resp.heartbeat_interval_ms / 1000.0,
                                          MAX_HEARTBEAT_INTERVAL_S)
            self._next_heartbeat = time.monotonic() + self.heartbeat_interval
        self._sent_topics = topics
        if resp.assignment is not None:
            self.on_assignment(ShareAssignment({
                tp.topic_id: tuple(p for p in tp.partitions if p >= 0)
                for tp in resp.assignment.topic_partitions}))

    def _leave(self, done: Callable[[], None], rejoin: bool = False) -> None:
        """Leave with epoch -1; ``rejoin``: keep the subscription (the next poll() joins
        again), else the member stays out."""
        if not rejoin:
            self.topics = None
        if not self.joined and not self._join_sent:
            done()
            return
        # (also while a join's answer is awaited: the coordinator may have the member)
        self._join_sent = False
        self._leaving = done
        req = ShareGroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id,
                                         member_epoch=int(MemberEpoch.LEAVE))
        self.epoch = int(MemberEpoch.JOIN)
        self._sent_topics = None

        def finished(_error: Optional[KafkaError] = None) -> None:
            left, self._leaving = self._leaving, None
            self._in_flight = False
            if left is not None:
                left()
            self.io.wake()

        def answered(resp: Any, conn: Any) -> Optional[KafkaError]:
            code = broker_code(resp.error_code)
            if code in COORDINATOR_MOVED:
                # The old coordinator's refusal: the leave goes to the new one. Taken as
                # done, it left the member in the group, holding its partitions (no other
                # member fetched them) until its session expired.
                return broker_error(code, resp.error_message, "ShareGroupHeartbeat (leave)")
            finished()
            return None

        self.runner.submit(Call("ShareGroupHeartbeat", ApiKey.SHARE_GROUP_HEARTBEAT,
                                self._target, time.monotonic() + self.request_timeout,
                                lambda v: req, answered, finished))
