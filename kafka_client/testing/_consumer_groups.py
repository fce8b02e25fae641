"""Consumer groups of the KIP-848 protocol ("consumer" groups), beside the classic ones.

A member speaks one request, ConsumerGroupHeartbeat: it joins with epoch 0 (its member id
is its own, a UUID it generated (KIP-1082); an empty one gets one from the coordinator, as
Kafka 3.7 gave it), says what it subscribes to and which partitions it owns, and leaves
with epoch -1 (-2 for a static member that will come back). The coordinator assigns.

Epochs, as Kafka 4's group coordinator keeps them:

* the group epoch counts the changes that need a new assignment: a member joining or
  leaving (or fenced), a subscription changing, the subscribed topics' metadata changing
  (created, deleted, partitions added);
* the assignment epoch is the group epoch the target assignment was computed for: the
  next heartbeat of any member after a bump computes it with the group's server-side
  assignor (the one most members ask for, else the first of ``group.consumer.assignors``):
  ``uniform`` (balanced, and sticky: members keep what they had where balance allows) or
  ``range`` (per topic, ranges of partitions, also sticky);
* a member's epoch moves to the assignment epoch when its heartbeat reconciles it: it
  first keeps only the partitions of its target it already has; if it must give some up,
  it keeps its epoch (state ``unrevoked_partitions``) until a heartbeat lists them no
  longer owned, within its rebalance timeout or it is fenced; then it moves to the new
  epoch and gets the rest of its target, except partitions another member still owns
  (state ``unreleased_partitions``, they come with a later heartbeat once released).

Committed offsets live with the group object (the classic ``Group`` and ``ConsumerGroup``
share one registry, ``GroupCoordinator.groups``: a group id is either kind). An empty
classic group becomes a consumer group on a join, and an empty consumer group a classic
one on a JoinGroup, offsets kept; a group with members never changes protocol (Kafka's
``group.consumer.migration.policy=disabled``).
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Iterable, List, Optional, Set, Tuple

from kafka_proto.enums import ConsumerProtocolGroupState, GroupType, MemberEpoch
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    ApiKey,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
)

from ._api import RequestContext, error_answer, handles
from ._assigned_groups import (
    AssignedGroup, AssignedGroupCoordinator, HeartbeatError, TopicPartition, by_topic,
    describe_error_for, describe_groups, new_member_id, refused_heartbeat,
)

__all__ = ["ConsumerGroupCoordinator", "ConsumerGroup", "ConsumerMember", "assign_uniform",
           "assign_range"]

# Member states.
MEMBER_STABLE = "stable"
UNREVOKED = "unrevoked_partitions"
UNRELEASED = "unreleased_partitions"

#: ConsumerGroupHeartbeat versions from which the client must bring its member id (KIP-1082).
CLIENT_MEMBER_ID_VERSION = 1

@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: Optional[str] = None
    rack_id: Optional[str] = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    topic_names: Tuple[str, ...] = ()
    topic_regex: Optional[str] = None
    assignor: Optional[str] = None
    epoch: int = 0
    previous_epoch: int = 0
    state: str = MEMBER_STABLE
    #: The partitions the member is given (it may use them).
    assigned: Set[TopicPartition] = field(default_factory=set)
    #: The partitions it was told to give up and has not reported given up yet.
    revoking: Set[TopicPartition] = field(default_factory=set)
    session_timer: Any = None
    rebalance_timer: Any = None

    def move_to_epoch(self, epoch: int) -> None:
        self.previous_epoch, self.epoch = self.epoch, epoch

    def reconciled_to(self, epoch: int) -> bool:
        return self.epoch == epoch and self.state == MEMBER_STABLE

    def snapshot(self) -> Tuple[Any, ...]:
        return (self.epoch, self.previous_epoch, self.state, frozenset(self.assigned),
                frozenset(self.revoking))

    def cancel_timers(self) -> None:
        for name in ("session_timer", "rebalance_timer"):
            timer = getattr(self, name)
            if timer is not None:
                timer.cancel()
                setattr(self, name, None)


@dataclass(eq=False)
class ConsumerGroup(AssignedGroup):
    """A consumer group: its members are ``ConsumerMember``s."""

    static_members: Dict[str, str] = field(default_factory=dict)   # instance id -> member id

    kind: ClassVar[str] = GroupType.CONSUMER
    protocol_type: ClassVar[str] = "consumer"

    @property
    def state(self) -> str:
        if not self.members:
            return ConsumerProtocolGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerProtocolGroupState.ASSIGNING
        if any(not m.reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerProtocolGroupState.RECONCILING
        return ConsumerProtocolGroupState.STABLE

    def static_member(self, instance_id: str) -> Optional[ConsumerMember]:
        member_id = self.static_members.get(instance_id)
        return self.members.get(member_id) if member_id is not None else None

    def owners(self) -> Dict[TopicPartition, str]:
        """Who holds each partition now (given it or still giving it up)."""
        out: Dict[TopicPartition, str] = {}
        for m in self.members.values():
            for tp in m.assigned:
                out[tp] = m.member_id
            for tp in m.revoking:
                out[tp] = m.member_id
        return out


# --------------------------------------------------------------------------- assignors


def assign_uniform(order: List[str], subscriptions: Dict[str, Set[uuid.UUID]],
                   partitions: Dict[uuid.UUID, int],
                   previous: Dict[str, Set[TopicPartition]]) -> Dict[str, Set[TopicPartition]]:
    """Every subscribed partition to one member, the counts as even as the subscriptions
    allow; members keep the partitions they had unless balance needs them elsewhere."""
    result: Dict[str, Set[TopicPartition]] = {m: set() for m in order}
    owner: Dict[TopicPartition, str] = {}
    for m in order:
        for tp in sorted(previous.get(m, ()), key=_tp_key):
            tid, p = tp
            if tid in subscriptions[m] and 0 <= p < partitions.get(tid, 0) and tp not in owner:
                result[m].add(tp)
                owner[tp] = m
    eligible: Dict[uuid.UUID, List[str]] = {}
    for m in order:
        for tid in subscriptions[m]:
            if tid in partitions:
                eligible.setdefault(tid, []).append(m)
    # Partitions nobody keeps go to the eligible member holding the fewest.
    for tid in sorted(eligible, key=str):
        for p in range(partitions[tid]):
            tp = (tid, p)
            if tp not in owner:
                m = min(eligible[tid], key=lambda x: (len(result[x]), order.index(x)))
                result[m].add(tp)
                owner[tp] = m
    # Balance: move a partition from a member with two or more above another member that
    # may take it, until no such pair remains.
    moved = True
    while moved:
        moved = False
        for giver in sorted(order, key=lambda x: -len(result[x])):
            for tp in sorted(result[giver], key=_tp_key, reverse=True):
                takers = [m for m in eligible.get(tp[0], ())
                          if len(result[m]) + 2 <= len(result[giver])]
                if takers:
                    taker = min(takers, key=lambda x: (len(result[x]), order.index(x)))
                    result[giver].discard(tp)
                    result[taker].add(tp)
                    moved = True
                    break
            if moved:
                break
    return result


def assign_range(order: List[str], subscriptions: Dict[str, Set[uuid.UUID]],
                 partitions: Dict[uuid.UUID, int],
                 previous: Dict[str, Set[TopicPartition]]) -> Dict[str, Set[TopicPartition]]:
    """Per topic, its subscribers share its partitions in ranges (n // members each, the
    first n % members one more); a member keeps the lowest of the partitions it had up to
    its share, the rest are handed out in order."""
    result: Dict[str, Set[TopicPartition]] = {m: set() for m in order}
    for tid in sorted({t for m in order for t in subscriptions[m] if t in partitions}, key=str):
        n = partitions[tid]
        members = [m for m in order if tid in subscriptions[m]]
        quota, extra = divmod(n, len(members))
        kept: Set[int] = set()
        short: List[Tuple[str, int]] = []
        for m in members:
            had = sorted(p for t, p in previous.get(m, ()) if t == tid and p < n)
            keep = had[:quota]
            if len(had) > quota and extra > 0:
                keep.append(had[quota])
                extra -= 1
            else:
                short.append((m, quota - len(had)))
            kept.update(keep)
            result[m].update((tid, p) for p in keep)
        free = [p for p in range(n) if p not in kept]
        at = 0
        for m, need in short:
            if extra > 0:
                need += 1
                extra -= 1
            if need > 0:
                result[m].update((tid, p) for p in free[at:at + need])
                at += need
    return result


ASSIGNORS = {"uniform": assign_uniform, "range": assign_range}


def _tp_key(tp: TopicPartition) -> Tuple[str, int]:
    return str(tp[0]), tp[1]


# --------------------------------------------------------------------------- coordinator


class ConsumerGroupCoordinator(AssignedGroupCoordinator):
    """ConsumerGroupHeartbeat and ConsumerGroupDescribe; the consumer-group side of the
    offset APIs (``check_commit``, ``check_fetch``) for ``GroupCoordinator``."""

    # -- topics ----------------------------------------------------------------------
    def _topics(self) -> Dict[str, Any]:
        return self.server.controller.topics

    def _resolve(self, regex: str) -> List[str]:
        pattern = re.compile(regex)
        return sorted(name for name, info in self._topics().items()
                      if not info.internal and pattern.fullmatch(name))

    def _member_topics(self, member: ConsumerMember) -> Set[str]:
        names = set(member.topic_names)
        if member.topic_regex:
            try:
                names.update(self._resolve(member.topic_regex))
            except re.error:
                pass
        return names

    def _member_topic_ids(self, member: ConsumerMember) -> Set[uuid.UUID]:
        topics = self._topics()
        return {topics[n].topic_id for n in self._member_topics(member) if n in topics}

    def _topic_metadata(self, members: Iterable[ConsumerMember]
                        ) -> Dict[str, Tuple[uuid.UUID, int]]:
        topics = self._topics()
        out = {}
        for m in members:
            for name in self._member_topics(m):
                info = topics.get(name)
                if info is not None:
                    out[name] = (info.topic_id, len(info.partitions))
        return out

    def metadata_changed(self) -> None:
        """Topics were created or deleted, or got partitions: every consumer group whose
        subscribed topics look different now needs a new assignment."""
        for group in list(self.groups.values()):
            if not isinstance(group, ConsumerGroup) or not group.members:
                continue
            metadata = self._topic_metadata(group.members.values())
            if metadata != group.topic_metadata:
                group.topic_metadata = metadata
                group.group_epoch += 1

    # -- ConsumerGroupHeartbeat ----------------------------------------------------------
    def heartbeat(self, ctx: RequestContext) -> None:
        req = ctx.request
        ctx.note(group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
                 subscribed_topic_names=req.subscribed_topic_names,
                 subscribed_topic_regex=req.subscribed_topic_regex
                 if ctx.version >= 1 else None)
        try:
            self._validate(req, ctx.version)
            if not self.owns(ctx, req.group_id):
                raise HeartbeatError(ErrorCode.NOT_COORDINATOR)
            if req.member_epoch in (MemberEpoch.LEAVE, MemberEpoch.STATIC_LEAVE):
                response = self._leave(req)
            else:
                response = self._heartbeat(ctx)
        except HeartbeatError as exc:
            response = heartbeat_error(req, ctx.version, exc.code, exc.message)
        ctx.respond(response)

    def _validate(self, req: Any, version: int) -> None:
        def invalid(message: str) -> HeartbeatError:
            return HeartbeatError(ErrorCode.INVALID_REQUEST, message)

        if (version >= CLIENT_MEMBER_ID_VERSION or req.member_epoch > 0 or
                req.member_epoch == MemberEpoch.LEAVE) and req.member_id == "":
            raise invalid("MemberId can't be empty.")
        if req.group_id == "":
            raise invalid("GroupId can't be empty.")
        if req.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if req.rack_id == "":
            raise invalid("RackId can't be empty.")
        regex = req.subscribed_topic_regex if version >= 1 else None
        if req.member_epoch == MemberEpoch.JOIN:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.topic_partitions is None or len(req.topic_partitions) > 0:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and regex is None:
                raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be "
                              "non-null when (re-)joining.")
        elif req.member_epoch == MemberEpoch.STATIC_LEAVE:
            if req.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif req.member_epoch < MemberEpoch.STATIC_LEAVE:
            raise invalid("MemberEpoch is invalid.")
        assignors = self.settings.consumer_assignors
        if req.server_assignor is not None and req.server_assignor not in assignors:
            raise HeartbeatError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                                 f"ServerAssignor {req.server_assignor} is not supported. "
                                 f"Supported assignors: {', '.join(assignors)}.")
        if regex:
            try:
                re.compile(regex)
            except re.error as exc:
                raise HeartbeatError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                                     f"SubscribedTopicRegex `{regex}` is not a valid regular "
                                     f"expression: {exc}.") from None

    def _group_for_join(self, group_id: str, epoch: int) -> Tuple[ConsumerGroup, bool]:
        """The consumer group, a new one (not registered yet) for a join, or an error."""
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return group, False
        if group is None:
            if epoch != MemberEpoch.JOIN:
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                     f"Consumer group {group_id} not found.")
            return ConsumerGroup(group_id), True
        if epoch != MemberEpoch.JOIN:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                 f"Group {group_id} is not a consumer group.")
        if not self.server.groups.is_empty_classic(group):
            raise HeartbeatError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade classic group {group_id} to consumer group because online "
                "upgrade is disabled.")
        # An empty classic group (offsets only) becomes a consumer group.
        return ConsumerGroup(group_id, offsets=group.offsets,
                             pending_txn_offsets=group.pending_txn_offsets), True

    def _check_epoch(self, member: ConsumerMember, epoch: int,
                     owned: Optional[Set[TopicPartition]]) -> None:
        if epoch == MemberEpoch.JOIN:
            return   # a (re)join of a member the coordinator still knows
        if epoch > member.epoch:
            raise HeartbeatError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({epoch}) than the "
                f"one known by the group coordinator ({member.epoch}). The member must "
                "abandon all its partitions and rejoin.")
        if epoch < member.epoch:
            # The previous epoch is accepted while the member owns nothing it was not
            # given: the answer that moved it on may have been lost.
            if epoch != member.previous_epoch or owned is None or not owned <= member.assigned:
                raise HeartbeatError(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The consumer group member has a smaller member epoch ({epoch}) than "
                    f"the one known by the group coordinator ({member.epoch}). The member "
                    "must abandon all its partitions and rejoin.")

    def _heartbeat(self, ctx: RequestContext) -> Any:
        req = ctx.request
        group_id, epoch, instance_id = req.group_id, req.member_epoch, req.instance_id
        regex = req.subscribed_topic_regex if ctx.version >= 1 else None
        owned = None if req.topic_partitions is None else \
            {(t.topic_id, p) for t in req.topic_partitions for p in t.partitions}
        group, new_group = self._group_for_join(group_id, epoch)
        member_id = req.member_id
        max_size = self.settings["group.consumer.max.size"]
        # A new member is refused by a full group; an instance taking its own place back
        # is not (as Kafka 4.2 has it).
        if len(group.members) >= max_size and member_id not in group.members and \
                (instance_id is None or group.static_member(instance_id) is None):
            raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 "The consumer group has reached its maximum capacity of "
                                 f"{max_size} members.")
        if not member_id:
            member_id = new_member_id()
        replaced: Optional[ConsumerMember] = None
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if epoch != MemberEpoch.JOIN:
                    raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                         f"Member {member_id} is not a member of group "
                                         f"{group_id}.")
                member = ConsumerMember(member_id)
            else:
                self._check_epoch(member, epoch, owned)
        else:
            existing = group.static_member(instance_id)
            if epoch == MemberEpoch.JOIN:
                if existing is None:
                    member = group.members.get(member_id) or ConsumerMember(member_id)
                else:
                    if existing.epoch != MemberEpoch.STATIC_LEAVE:
                        raise HeartbeatError(
                            ErrorCode.UNRELEASED_INSTANCE_ID,
                            f"Static member {member_id} with instance id {instance_id} "
                            "cannot join the group because the instance id is owned by "
                            f"{existing.member_id} member.")
                    # The new incarnation takes the place and the assignment of the old.
                    replaced = existing
                    member = ConsumerMember(
                        member_id, instance_id, existing.rack_id,
                        existing.rebalance_timeout_ms, existing.client_id,
                        existing.client_host, existing.topic_names, existing.topic_regex,
                        existing.assignor, epoch=0, previous_epoch=0, state=existing.state,
                        assigned=set(existing.assigned), revoking=set(existing.revoking))
            else:
                if existing is None:
                    raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                         f"Instance id {instance_id} is unknown.")
                if existing.member_id != member_id:
                    raise HeartbeatError(
                        ErrorCode.FENCED_INSTANCE_ID,
                        f"Static member {member_id} with instance id {instance_id} was "
                        f"fenced by member {existing.member_id}.")
                self._check_epoch(existing, epoch, owned)
                member = existing

        # Nothing refused: the request changes the group from here on.
        if new_group:
            self.server.groups.replace_group(group_id, group)
        before = member.snapshot()
        old_names, old_regex = set(member.topic_names), member.topic_regex
        if instance_id is not None:
            member.instance_id = instance_id
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.server_assignor is not None:
            member.assignor = req.server_assignor
        if req.subscribed_topic_names is not None:
            member.topic_names = tuple(req.subscribed_topic_names)
        if regex is not None:
            member.topic_regex = regex or None
        member.client_id = ctx.head.client_id or ""
        member.client_host = ctx.conn.peer[0] if ctx.conn.peer else ""
        names_changed = set(member.topic_names) != old_names
        regex_changed = member.topic_regex != old_regex
        subscription_changed = names_changed or regex_changed

        if replaced is not None:
            self._drop(group, replaced)
            group.target[member_id] = group.target.pop(replaced.member_id, set())
        group.members[member_id] = member
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member_id

        metadata = self._topic_metadata(group.members.values())
        if group.group_epoch == 0 or subscription_changed or metadata != group.topic_metadata:
            group.topic_metadata = metadata
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._assign(group)
        self._reconcile(group, member, owned, subscription_changed)
        self._touch(group, member)

        response = ConsumerGroupHeartbeatResponse(
            error_code=ErrorCode.NONE, member_id=member_id, member_epoch=member.epoch,
            heartbeat_interval_ms=self.settings["group.consumer.heartbeat.interval.ms"])
        full = req.rebalance_timeout_ms != -1 and req.topic_partitions is not None and \
            (req.subscribed_topic_names is not None or regex is not None)
        if epoch == MemberEpoch.JOIN or full or frozenset(member.assigned) != before[3]:
            response.assignment = ConsumerGroupHeartbeatResponse.Assignment(
                topic_partitions=_topic_partitions(member.assigned,
                                                   ConsumerGroupHeartbeatResponse))
        ctx.note(group_epoch=group.group_epoch, member_epoch_given=member.epoch)
        return response

    # -- assignment --------------------------------------------------------------------
    def _assignor(self, group: ConsumerGroup) -> str:
        configured = self.settings.consumer_assignors
        counts: Dict[str, int] = {}
        for m in group.members.values():
            if m.assignor is not None:
                counts[m.assignor] = counts.get(m.assignor, 0) + 1
        if not counts:
            return configured[0]
        return max(counts, key=lambda a: (counts[a], -configured.index(a)
                                          if a in configured else -len(configured)))

    def _assign(self, group: ConsumerGroup) -> None:
        """The target assignment of the group epoch."""
        topics = self._topics()
        partitions = {info.topic_id: len(info.partitions) for info in topics.values()}
        order = list(group.members)
        subscriptions = {m: self._member_topic_ids(group.members[m]) for m in order}
        assign = ASSIGNORS[self._assignor(group)]
        group.target = assign(order, subscriptions, partitions, group.target)
        group.assignment_epoch = group.group_epoch

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember,
                   owned: Optional[Set[TopicPartition]], subscription_changed: bool) -> None:
        """Move the member toward its target assignment as far as the partitions it still
        owns and the ones others still own allow."""
        target_epoch = group.assignment_epoch
        if not subscription_changed and member.reconciled_to(target_epoch):
            return
        before = member.snapshot()

        def still_owns(revoking: Set[TopicPartition]) -> bool:
            return owned is None or bool(owned & revoking)

        subscribed = self._member_topic_ids(member)

        def next_assignment(epoch: int) -> None:
            target = {tp for tp in group.target.get(member.member_id, ())
                      if tp[0] in subscribed}
            keep = member.assigned & target
            revoke = member.assigned - keep
            owners = group.owners()
            wanted = target - keep
            unreleased = {tp for tp in wanted
                          if owners.get(tp, member.member_id) != member.member_id}
            wanted -= unreleased
            if revoke and still_owns(revoke):
                member.state = UNREVOKED
                member.move_to_epoch(epoch)
                member.assigned = keep
                member.revoking = revoke
                return
            member.state = UNRELEASED if unreleased else MEMBER_STABLE
            member.move_to_epoch(target_epoch)
            member.assigned = keep | wanted
            member.revoking = set()

        def drop_unsubscribed() -> None:
            gone = {tp for tp in member.assigned if tp[0] not in subscribed}
            if not gone:
                return
            member.assigned -= gone
            member.revoking |= gone
            if still_owns(member.revoking):
                member.state = UNREVOKED
            else:
                member.revoking = set()
            member.move_to_epoch(member.epoch)

        if member.state == MEMBER_STABLE:
            if member.epoch != target_epoch:
                next_assignment(member.epoch)
            elif subscription_changed:
                drop_unsubscribed()
        elif member.state == UNREVOKED:
            if still_owns(member.revoking):
                if subscription_changed:
                    drop_unsubscribed()
            else:
                next_assignment(member.epoch)
        else:
            next_assignment(member.epoch)

        if member.snapshot() != before:
            if member.rebalance_timer is not None:
                member.rebalance_timer.cancel()
                member.rebalance_timer = None
            if member.state == UNREVOKED:
                member.rebalance_timer = self.server.loop.call_later(
                    max(member.rebalance_timeout_ms, 0) / 1000, self._revocation_deadline,
                    group, member, member.epoch)

    # -- timers ------------------------------------------------------------------------
    def _touch(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self.server.loop.call_later(
            self.settings["group.consumer.session.timeout.ms"] / 1000,
            self._session_expired, group, member)

    def _alive(self, group: ConsumerGroup, member: ConsumerMember) -> bool:
        return self.groups.get(group.group_id) is group and \
            group.members.get(member.member_id) is member

    def _session_expired(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        member.session_timer = None
        if self._alive(group, member):
            self._fence(group, member)

    def _revocation_deadline(self, group: ConsumerGroup, member: ConsumerMember,
                             epoch: int) -> None:
        member.rebalance_timer = None
        if self._alive(group, member) and member.epoch == epoch and member.state == UNREVOKED:
            self._fence(group, member)

    # -- leaving -----------------------------------------------------------------------
    def _drop(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        member.cancel_timers()
        group.members.pop(member.member_id, None)
        if member.instance_id is not None and \
                group.static_members.get(member.instance_id) == member.member_id:
            del group.static_members[member.instance_id]

    def _fence(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """The member is out: its partitions are free and the group epoch moves on."""
        self._drop(group, member)
        group.target.pop(member.member_id, None)
        group.topic_metadata = self._topic_metadata(group.members.values())
        group.group_epoch += 1

    def _leave(self, req: Any) -> Any:
        group = self.groups.get(req.group_id)
        if not isinstance(group, ConsumerGroup):
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                 f"Group {req.group_id} not found." if group is None else
                                 f"Group {req.group_id} is not a consumer group.")
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {req.member_id} is not a member of group "
                                     f"{req.group_id}.")
            self._fence(group, member)
            epoch = req.member_epoch
        else:
            member = group.static_member(req.instance_id)
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Instance id {req.instance_id} is unknown.")
            if member.member_id != req.member_id:
                raise HeartbeatError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"Static member {req.member_id} with instance id {req.instance_id} was "
                    f"fenced by member {member.member_id}.")
            if req.member_epoch == MemberEpoch.STATIC_LEAVE:
                # Away for now: the place and the partitions wait for the same instance
                # until the session times out.
                member.epoch = MemberEpoch.STATIC_LEAVE
                member.revoking = set()
                epoch = MemberEpoch.STATIC_LEAVE
            else:
                self._fence(group, member)
                epoch = MemberEpoch.LEAVE
        return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.NONE,
                                              member_id=req.member_id, member_epoch=epoch)

    # -- offsets -----------------------------------------------------------------------
    def check_commit(self, group: ConsumerGroup, member_id: str, epoch: int, version: int,
                     instance_id: Optional[str] = None, transactional: bool = False) -> int:
        """The error of an OffsetCommit (or TxnOffsetCommit) to a consumer group."""
        if epoch < 0 and not group.members:
            return ErrorCode.NONE   # an admin's or a manually assigned consumer's commit
        if transactional and epoch == -1 and member_id == "" and instance_id is None:
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        if epoch != member.epoch:
            # TxnOffsetCommit has no STALE_MEMBER_EPOCH; Kafka answers ILLEGAL_GENERATION.
            return ErrorCode.ILLEGAL_GENERATION if transactional else \
                ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    @staticmethod
    def check_fetch(group: ConsumerGroup, member_id: Optional[str], epoch: int) -> int:
        """The error of an OffsetFetch v9+ naming a member of a consumer group."""
        if member_id is None and epoch < 0:
            return ErrorCode.NONE
        member = group.members.get(member_id) if member_id is not None else None
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch != member.epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    # -- ConsumerGroupDescribe -----------------------------------------------------------
    def describe(self, ctx: RequestContext) -> None:
        describe_groups(ctx, self, ConsumerGroupDescribeResponse, ConsumerGroup,
                        self._described_group)

    def _described_group(self, group: ConsumerGroup) -> Any:
        R = ConsumerGroupDescribeResponse
        return R.DescribedGroup(
            error_code=ErrorCode.NONE, group_id=group.group_id, group_state=group.state,
            group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
            assignor_name=self._assignor(group),
            members=[R.Member(
                member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                member_epoch=m.epoch, client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=list(m.topic_names),
                subscribed_topic_regex=m.topic_regex,
                assignment=R.Assignment(topic_partitions=self._described(m.assigned)),
                target_assignment=R.Assignment(topic_partitions=self._described(
                    group.target.get(m.member_id, set()))))
                for m in group.members.values()])

    def _described(self, partitions: Set[TopicPartition]) -> List[Any]:
        by_id = self.server.controller.topics_by_id
        R = ConsumerGroupDescribeResponse
        return [R.TopicPartitions(topic_id=tid, topic_name=by_id[tid].name if tid in by_id
                                  else "", partitions=parts)
                for tid, parts in by_topic(partitions)]


def _topic_partitions(partitions: Iterable[TopicPartition], R: Any) -> List[Any]:
    return [R.TopicPartitions(topic_id=tid, partitions=parts)
            for tid, parts in by_topic(partitions)]


def _coordinator(ctx: RequestContext) -> ConsumerGroupCoordinator:
    return ctx.server.consumer_groups


# --------------------------------------------------------------------------- handlers


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT)
def consumer_group_heartbeat(ctx: RequestContext) -> None:
    if not refused_heartbeat(ctx, heartbeat_error):
        _coordinator(ctx).heartbeat(ctx)


@error_answer(ApiKey.CONSUMER_GROUP_HEARTBEAT)
def heartbeat_error(request: Any, version: int, code: int,
                    message: Optional[str] = None) -> Any:
    return ConsumerGroupHeartbeatResponse(error_code=code, error_message=message,
                                          member_id=None, member_epoch=0,
                                          heartbeat_interval_ms=0)


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE)
def consumer_group_describe(ctx: RequestContext) -> None:
    _coordinator(ctx).describe(ctx)


@error_answer(ApiKey.CONSUMER_GROUP_DESCRIBE)
def describe_error(request: Any, version: int, code: int) -> Any:
    return describe_error_for(ConsumerGroupDescribeResponse, request, code)

