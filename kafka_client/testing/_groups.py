"""Consumer groups (the classic protocol) and committed offsets.

One coordinator object holds every group of the cluster, classic ``Group`` objects and the
KIP-848 ``ConsumerGroup`` objects of ``_consumer_groups`` in one registry (a group id is
one kind or the other; each keeps its committed offsets); a broker serves a group's
requests only while it is that group's coordinator (``Controller.coordinator``), and
answers NOT_COORDINATOR otherwise, so moving a coordinator is a change of who answers,
with the group's members, generation and offsets kept (as Kafka's new coordinator
loads them from ``__consumer_offsets``).

States follow Kafka's GroupCoordinator: Empty -> PreparingRebalance (members (re)join;
ends when every known member has rejoined or the rebalance timeout passes, after
``group.initial.rebalance.delay.ms`` for a group that was empty) -> CompletingRebalance
(the leader's SyncGroup hands out the assignment) -> Stable. A member whose session
times out is removed and the group rebalances. JoinGroup v4+ without a member id gets
MEMBER_ID_REQUIRED with the id to use. A static member (``group.instance.id``) that
rejoins a stable group with the same protocols takes its old place and assignment
without a rebalance.
"""
from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from kafka_proto.enums import (
    AclOperation, AclResourceType, ClassicGroupState, CoordinatorType, GroupType,
)
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    ApiKey,
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    FindCoordinatorResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)

from ._acls import CLUSTER_NAME
from ._api import RequestContext, error_answer, handles

if TYPE_CHECKING:  # pragma: no cover
    from ._server import ClusterServer

__all__ = ["GroupCoordinator", "Group", "Member", "CommittedOffset"]

#: The states in which a member's join starts a rebalance.
_A_JOIN_REBALANCES = (ClassicGroupState.EMPTY, ClassicGroupState.STABLE,
                      ClassicGroupState.COMPLETING_REBALANCE)


@dataclass
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: Optional[str]
    commit_time: float


@dataclass
class Member:
    member_id: str
    group_instance_id: Optional[str]
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: List[Tuple[str, bytes]]
    assignment: bytes = b""
    join: Optional[RequestContext] = None
    sync: Optional[RequestContext] = None
    session_timer: Any = None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""


@dataclass
class Group:
    group_id: str
    state: str = ClassicGroupState.EMPTY
    generation: int = 0
    protocol_type: Optional[str] = None
    protocol_name: Optional[str] = None
    leader_id: Optional[str] = None
    members: "OrderedDict[str, Member]" = field(default_factory=OrderedDict)
    pending_members: Dict[str, float] = field(default_factory=dict)
    static_members: Dict[str, str] = field(default_factory=dict)   # instance id -> member id
    offsets: Dict[Tuple[str, int], CommittedOffset] = field(default_factory=dict)
    #: producer id -> offsets committed in its open transaction
    pending_txn_offsets: Dict[int, Dict[Tuple[str, int], CommittedOffset]] = \
        field(default_factory=dict)
    join_timer: Any = None
    #: The first rebalance of an empty group waits group.initial.rebalance.delay.ms.
    initial_delay: bool = False


class GroupCoordinator:
    def __init__(self, server: "ClusterServer") -> None:
        self.server = server
        self.groups: Dict[str, Group] = {}

    @property
    def settings(self):
        return self.server.settings

    def owns(self, ctx: RequestContext, group_id: str) -> bool:
        return (self.server.controller.coordinator(CoordinatorType.GROUP, group_id)
                == ctx.broker.broker_id)

    def group(self, group_id: str, create: bool = False) -> Any:
        """The group of either kind (a new classic one with ``create``), or None."""
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups[group_id] = Group(group_id)
        return group

    def _classic(self, group_id: str) -> Optional[Group]:
        group = self.groups.get(group_id)
        return group if isinstance(group, Group) else None

    @staticmethod
    def is_empty_classic(group: Any) -> bool:
        """A classic group with no members (offsets at most): it may change protocol."""
        return (isinstance(group, Group) and group.state == ClassicGroupState.EMPTY
                and not group.members)

    def replace_group(self, group_id: str, group: Any) -> None:
        """Register ``group`` under its id, in place of an empty group of the other kind."""
        old = self.groups.get(group_id)
        if isinstance(old, Group) and old.join_timer is not None:
            old.join_timer.cancel()
        self.groups[group_id] = group

    def topic_deleted(self, topic: str) -> None:
        """Every group's committed offsets (and offsets pending in open transactions) of
        a deleted topic go, as Kafka's coordinator deletes them: a topic created again
        under that name starts from the groups' ``auto.offset.reset``."""
        for group in self.groups.values():
            for offsets in (group.offsets, *group.pending_txn_offsets.values()):
                for key in [k for k in offsets if k[0] == topic]:
                    del offsets[key]

    # -- coordinator moves -----------------------------------------------------------
    def coordinator_moved(self, group_id: Optional[str] = None) -> None:
        """Requests waiting at a former coordinator fail with NOT_COORDINATOR."""
        for group in list(self.groups.values()):
            if not isinstance(group, Group):
                continue   # a consumer group has no requests waiting
            if group_id is not None and group.group_id != group_id:
                continue
            for member in group.members.values():
                for attr in ("join", "sync"):
                    ctx = getattr(member, attr)
                    if ctx is None:
                        continue
                    owner = self.server.controller.coordinator(CoordinatorType.GROUP,
                                                               group.group_id)
                    if ctx.broker.broker_id != owner or not ctx.broker.up:
                        setattr(member, attr, None)
                        if attr == "join":
                            ctx.respond(_join_error(ErrorCode.NOT_COORDINATOR))
                        else:
                            ctx.respond(SyncGroupResponse(error_code=ErrorCode.NOT_COORDINATOR))

    # -- sessions --------------------------------------------------------------------
    def _touch(self, group: Group, member: Member) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self.server.loop.call_later(
            member.session_timeout_ms / 1000, self._expire, group.group_id, member.member_id)

    def _expire(self, group_id: str, member_id: str) -> None:
        group = self._classic(group_id)
        if group is None:
            return
        member = group.members.get(member_id)
        if member is None or member.join is not None:
            return   # a member waiting in JoinGroup is alive
        self._remove_member(group, member, "session timeout")

    def _expire_pending(self, group_id: str, member_id: str) -> None:
        """A member told MEMBER_ID_REQUIRED that did not join with its id within its
        session timeout (it closed, or its answer was lost) is forgotten, as Kafka's
        coordinator forgets it: a join waiting for the pending members goes on (it
        waited for the rebalance timeout, max.poll.interval.ms)."""
        group = self._classic(group_id)
        if group is None or group.pending_members.pop(member_id, None) is None:
            return
        self._maybe_complete_join(group)

    def _remove_member(self, group: Group, member: Member, reason: str) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        group.members.pop(member.member_id, None)
        if member.group_instance_id is not None and \
                group.static_members.get(member.group_instance_id) == member.member_id:
            del group.static_members[member.group_instance_id]
        if member.sync is not None:
            member.sync.respond(SyncGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID))
            member.sync = None
        if group.state in (ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        elif group.state == ClassicGroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        if not group.members and group.state != ClassicGroupState.PREPARING_REBALANCE:
            group.state = ClassicGroupState.EMPTY

    # -- rebalancing -----------------------------------------------------------------
    def _prepare_rebalance(self, group: Group) -> None:
        if group.state == ClassicGroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                if member.sync is not None:
                    member.sync.respond(
                        SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS))
                    member.sync = None
        was_empty = group.state == ClassicGroupState.EMPTY
        group.state = ClassicGroupState.PREPARING_REBALANCE
        if group.join_timer is not None:
            group.join_timer.cancel()
        delay = self.settings["group.initial.rebalance.delay.ms"]
        group.initial_delay = was_empty and delay > 0
        if group.initial_delay:
            group.join_timer = self.server.loop.call_later(
                delay / 1000, self._initial_delay_over, group.group_id)
        else:
            group.join_timer = self.server.loop.call_later(
                self._rebalance_timeout(group) / 1000, self._join_deadline, group.group_id)

    @staticmethod
    def _rebalance_timeout(group: Group) -> int:
        return max((m.rebalance_timeout_ms for m in group.members.values()), default=0)

    def _initial_delay_over(self, group_id: str) -> None:
        group = self._classic(group_id)
        if group is None or group.state != ClassicGroupState.PREPARING_REBALANCE:
            return
        group.initial_delay = False
        group.join_timer = self.server.loop.call_later(
            self._rebalance_timeout(group) / 1000, self._join_deadline, group_id)
        self._maybe_complete_join(group)

    def _join_deadline(self, group_id: str) -> None:
        group = self._classic(group_id)
        if group is None or group.state != ClassicGroupState.PREPARING_REBALANCE:
            return
        group.join_timer = None
        # Members that did not rejoin in time are out.
        for member in list(group.members.values()):
            if member.join is None:
                if member.session_timer is not None:
                    member.session_timer.cancel()
                del group.members[member.member_id]
                if member.group_instance_id is not None:
                    group.static_members.pop(member.group_instance_id, None)
        self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state != ClassicGroupState.PREPARING_REBALANCE:
            return
        if group.initial_delay:
            return   # the initial delay lets more members arrive
        if group.members and all(m.join is not None for m in group.members.values()) \
                and not group.pending_members:
            if group.join_timer is not None:
                group.join_timer.cancel()
                group.join_timer = None
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        members = [m for m in group.members.values() if m.join is not None]
        if not members:
            group.state = ClassicGroupState.EMPTY
            group.generation += 1
            group.protocol_name = None
            group.leader_id = None
            return
        group.generation += 1
        group.protocol_type = members[0].protocol_type
        group.protocol_name = _choose_protocol(members)
        leader_id = group.leader_id
        if leader_id is None or leader_id not in group.members:
            leader_id = group.leader_id = members[0].member_id
        group.state = ClassicGroupState.COMPLETING_REBALANCE
        for member in members:
            ctx = member.join
            assert ctx is not None  # members: those whose JoinGroup waits
            member.join = None
            member.assignment = b""
            is_leader = member.member_id == leader_id
            response = JoinGroupResponse(
                error_code=ErrorCode.NONE, generation_id=group.generation,
                protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                leader=leader_id, member_id=member.member_id,
                members=[JoinGroupResponse.JoinGroupResponseMember(
                    member_id=m.member_id, group_instance_id=m.group_instance_id,
                    metadata=m.metadata_for(group.protocol_name))
                    for m in group.members.values()] if is_leader else [])
            ctx.respond(response)
            self._touch(group, member)

    # -- JoinGroup -------------------------------------------------------------------
    def join(self, ctx: RequestContext) -> None:
        req = ctx.request
        group_id = req.group_id
        if not group_id:
            ctx.respond(_join_error(ErrorCode.INVALID_GROUP_ID))
            return
        if not self.owns(ctx, group_id):
            ctx.respond(_join_error(ErrorCode.NOT_COORDINATOR))
            return
        lo = self.settings["group.min.session.timeout.ms"]
        hi = self.settings["group.max.session.timeout.ms"]
        if not lo <= req.session_timeout_ms <= hi:
            ctx.respond(_join_error(ErrorCode.INVALID_SESSION_TIMEOUT))
            return
        protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
        if not req.protocol_type or not protocols:
            ctx.respond(_join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        group = self.group(group_id, create=True)
        if not isinstance(group, Group):
            if group.members:
                # A consumer group with members takes no classic member (the group never
                # changes protocol while it has members).
                ctx.respond(_join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
                return
            group = Group(group_id, offsets=group.offsets,
                          pending_txn_offsets=group.pending_txn_offsets)
            self.replace_group(group_id, group)
        if group.members and (group.protocol_type not in (None, req.protocol_type) or
                              not _common_protocol(group, protocols)):
            ctx.respond(_join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        rebalance_timeout = req.rebalance_timeout_ms if ctx.version >= 1 and \
            req.rebalance_timeout_ms > 0 else req.session_timeout_ms
        instance_id = req.group_instance_id if ctx.version >= 5 else None
        member_id = req.member_id
        client_host = ctx.conn.peer[0] if ctx.conn.peer else ""
        if not member_id:
            if instance_id is not None and instance_id in group.static_members:
                self._static_rejoin(ctx, group, instance_id, protocols, rebalance_timeout)
                return
            member_id = f"{ctx.head.client_id or 'member'}-{uuid.uuid4()}"
            if ctx.version >= 4 and instance_id is None:
                group.pending_members[member_id] = time.monotonic()
                self.server.loop.call_later(req.session_timeout_ms / 1000,
                                            self._expire_pending, group.group_id,
                                            member_id)
                response = _join_error(ErrorCode.MEMBER_ID_REQUIRED)
                response.member_id = member_id
                ctx.respond(response)
                return
        elif member_id not in group.members and member_id not in group.pending_members:
            if instance_id is None or group.static_members.get(instance_id) != member_id:
                response = _join_error(ErrorCode.UNKNOWN_MEMBER_ID)
                response.member_id = member_id
                ctx.respond(response)
                return
        elif instance_id is not None and group.static_members.get(instance_id, member_id) \
                != member_id:
            ctx.respond(_join_error(ErrorCode.FENCED_INSTANCE_ID))
            return
        group.pending_members.pop(member_id, None)
        member = group.members.get(member_id)
        if member is None:
            member = Member(member_id, instance_id, ctx.head.client_id or "", client_host,
                            req.session_timeout_ms, rebalance_timeout, req.protocol_type,
                            protocols)
            group.members[member_id] = member
            if instance_id is not None:
                group.static_members[instance_id] = member_id
        else:
            if member.join is not None and member.join is not ctx:
                member.join.respond(_join_error(ErrorCode.REBALANCE_IN_PROGRESS))
            member.protocols = protocols
            member.session_timeout_ms = req.session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout
        member.join = ctx
        if member.session_timer is not None:
            member.session_timer.cancel()
            member.session_timer = None
        if group.state in _A_JOIN_REBALANCES:
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)

    def _static_rejoin(self, ctx: RequestContext, group: Group, instance_id: str,
                       protocols: List[Tuple[str, bytes]], rebalance_timeout: int) -> None:
        old_id = group.static_members[instance_id]
        old = group.members.get(old_id)
        req = ctx.request
        new_id = f"{ctx.head.client_id or 'member'}-{uuid.uuid4()}"
        if old is None:
            del group.static_members[instance_id]
            ctx.respond(_join_error(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        # The old instance is fenced: its id is replaced, its place and assignment kept.
        if old.join is not None:
            old.join.respond(_join_error(ErrorCode.FENCED_INSTANCE_ID))
            old.join = None
        if old.sync is not None:
            old.sync.respond(SyncGroupResponse(error_code=ErrorCode.FENCED_INSTANCE_ID))
            old.sync = None
        del group.members[old_id]
        old.member_id = new_id
        old.client_id = ctx.head.client_id or ""
        old.session_timeout_ms = req.session_timeout_ms
        old.rebalance_timeout_ms = rebalance_timeout
        group.members[new_id] = old
        group.static_members[instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        same_protocols = old.protocols == protocols
        old.protocols = protocols
        if group.state == ClassicGroupState.STABLE and same_protocols:
            # A stable group has a leader: only an emptied group's leader_id is None.
            assert group.leader_id is not None
            ctx.respond(JoinGroupResponse(
                error_code=ErrorCode.NONE, generation_id=group.generation,
                protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                leader=group.leader_id, member_id=new_id, members=[],
                skip_assignment=False))
            self._touch(group, old)
            return
        old.join = ctx
        if group.state in _A_JOIN_REBALANCES:
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)

    # -- SyncGroup -------------------------------------------------------------------
    def sync(self, ctx: RequestContext) -> None:
        req = ctx.request
        if not self.owns(ctx, req.group_id):
            ctx.respond(SyncGroupResponse(error_code=ErrorCode.NOT_COORDINATOR))
            return
        group = self._classic(req.group_id)
        member = group.members.get(req.member_id) if group is not None else None
        error = self.check_member(group, member, req.generation_id,
                                   req.group_instance_id if ctx.version >= 3 else None)
        if error:
            ctx.respond(SyncGroupResponse(error_code=error))
            return
        assert group is not None and member is not None  # else check_member() refused
        if group.state == ClassicGroupState.PREPARING_REBALANCE:
            ctx.respond(SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS))
            return
        self._touch(group, member)
        if group.state == ClassicGroupState.STABLE:
            ctx.respond(self._sync_answer(group, member))
            return
        member.sync = ctx
        if member.member_id == group.leader_id:
            given = {a.member_id: bytes(a.assignment) for a in req.assignments}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            group.state = ClassicGroupState.STABLE
            for m in group.members.values():
                if m.sync is not None:
                    waiting, m.sync = m.sync, None
                    waiting.respond(self._sync_answer(group, m))

    @staticmethod
    def _sync_answer(group: Group, member: Member) -> Any:
        return SyncGroupResponse(error_code=ErrorCode.NONE, protocol_type=group.protocol_type,
                                 protocol_name=group.protocol_name,
                                 assignment=member.assignment)

    def check_member(self, group: Optional[Group], member: Optional[Member], generation: int,
                      instance_id: Optional[str] = None) -> int:
        if group is None or member is None:
            if group is not None and instance_id is not None and \
                    instance_id in group.static_members:
                return ErrorCode.FENCED_INSTANCE_ID
            return ErrorCode.UNKNOWN_MEMBER_ID
        if instance_id is not None and member.group_instance_id not in (None, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def check_txn_commit(self, group_id: str, member_id: str, generation: int,
                         instance_id: Optional[str]) -> int:
        """The membership error of a TxnOffsetCommit v3+ (checked when it names a
        generation, or for a consumer group a member)."""
        group = self.groups.get(group_id)
        if group is not None and not isinstance(group, Group):
            return self.server.consumer_groups.check_commit(
                group, member_id, generation, 9, instance_id, transactional=True)
        # As Kafka's ClassicGroup.validateOffsetCommit: generation -1 asks for no check
        # when the group has no members, or when nothing names a member (older versions
        # carried none); a member id or an instance id is checked whatever the generation
        # (a member that has left the group is refused, not taken for a simple commit).
        if generation < 0 and (group is None or not group.members
                               or (not member_id and instance_id is None)):
            return ErrorCode.NONE
        member = group.members.get(member_id) if group is not None else None
        return self.check_member(group, member, generation, instance_id)

    # -- Heartbeat / LeaveGroup ------------------------------------------------------
    def heartbeat(self, ctx: RequestContext) -> None:
        req = ctx.request
        if not self.owns(ctx, req.group_id):
            ctx.respond(HeartbeatResponse(error_code=ErrorCode.NOT_COORDINATOR))
            return
        group = self._classic(req.group_id)
        member = group.members.get(req.member_id) if group is not None else None
        error = self.check_member(group, member, req.generation_id,
                                   req.group_instance_id if ctx.version >= 3 else None)
        if error == ErrorCode.NONE:
            assert group is not None and member is not None  # else check_member() refused
            self._touch(group, member)
            if group.state == ClassicGroupState.PREPARING_REBALANCE:
                error = ErrorCode.REBALANCE_IN_PROGRESS
        ctx.respond(HeartbeatResponse(error_code=error))

    def leave(self, ctx: RequestContext) -> None:
        req = ctx.request
        if not self.owns(ctx, req.group_id):
            ctx.respond(LeaveGroupResponse(error_code=ErrorCode.NOT_COORDINATOR))
            return
        group = self._classic(req.group_id)
        if ctx.version < 3:
            leaving = [(req.member_id, None)]
        else:
            leaving = [(m.member_id, m.group_instance_id) for m in req.members]
        results = []
        for member_id, instance_id in leaving:
            error = ErrorCode.NONE
            member = None
            if group is not None:
                if not member_id and instance_id is not None:
                    member_id = group.static_members.get(instance_id, "")
                member = group.members.get(member_id)
            if member is None or group is None:  # (no group: no member)
                error = ErrorCode.UNKNOWN_MEMBER_ID
            elif instance_id is not None and member.group_instance_id != instance_id:
                error = ErrorCode.FENCED_INSTANCE_ID
            else:
                self._remove_member(group, member, "left")
            results.append(LeaveGroupResponse.MemberResponse(
                member_id=member_id, group_instance_id=instance_id, error_code=error))
        if ctx.version < 3:
            ctx.respond(LeaveGroupResponse(error_code=results[0].error_code))
        else:
            ctx.respond(LeaveGroupResponse(error_code=ErrorCode.NONE, members=results))

    # -- offsets ---------------------------------------------------------------------
    def commit(self, ctx: RequestContext) -> None:
        req = ctx.request
        R = OffsetCommitResponse
        error: int = ErrorCode.NONE
        # Kafka: READ on the group (or every partition is refused), and on each topic.
        group_allowed = _may_group(ctx, AclOperation.READ, req.group_id)
        if not self.owns(ctx, req.group_id):
            error = ErrorCode.NOT_COORDINATOR
        group = self.groups.get(req.group_id)
        if error == ErrorCode.NONE:
            generation = req.generation_id_or_member_epoch if ctx.version >= 1 else -1
            member_id = req.member_id if ctx.version >= 1 else ""
            if ctx.version == 0:
                # Kafka wrote v0 commits to ZooKeeper without looking at the group
                pass
            elif group is not None and not isinstance(group, Group):
                error = self.server.consumer_groups.check_commit(
                    group, member_id, generation, ctx.version)
            elif group is None and generation >= 0:
                # Kafka 4: no such group, for either protocol (ILLEGAL_GENERATION before v9).
                error = ErrorCode.GROUP_ID_NOT_FOUND if ctx.version >= 9 else \
                    ErrorCode.ILLEGAL_GENERATION
            elif generation < 0 and (group is None or self.is_empty_classic(group)):
                # As Kafka's ClassicGroup.validateOffsetCommit: generation -1 to an empty
                # group (or none: Kafka makes it) is taken unchecked, a member id named or
                # not (a consumer that left its group, the admin client); it was refused
                # UNKNOWN_MEMBER_ID when it named a member.
                pass
            elif generation >= 0 or member_id:
                member = group.members.get(member_id) if group is not None else None
                error = self.check_member(group, member, generation,
                                           req.group_instance_id if ctx.version >= 7 else None)
                if error == ErrorCode.NONE and group is not None and \
                        group.state == ClassicGroupState.COMPLETING_REBALANCE:
                    error = ErrorCode.REBALANCE_IN_PROGRESS
            elif group is not None and group.members:
                # A simple (memberless) commit to a group with members is refused as from
                # a member Kafka does not know (its ClassicGroup.validateOffsetCommit).
                error = ErrorCode.UNKNOWN_MEMBER_ID
        controller = self.server.controller
        topics = []
        now = time.time()
        for t in req.topics:
            parts = []
            topic_allowed = ctx.allowed(AclOperation.READ, AclResourceType.TOPIC, t.name)
            for p in t.partitions:
                code = error
                if not group_allowed:
                    code = ErrorCode.GROUP_AUTHORIZATION_FAILED
                elif not topic_allowed:
                    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif code == ErrorCode.NONE:
                    if controller.partition(t.name, p.partition_index) is None:
                        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    elif p.committed_metadata is not None and len(p.committed_metadata) > 4096:
                        code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                    else:
                        group = self.group(req.group_id, create=True)
                        group.offsets[(t.name, p.partition_index)] = CommittedOffset(
                            p.committed_offset, p.committed_leader_epoch, p.committed_metadata,
                            now)
                parts.append(R.OffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=code))
            topics.append(R.OffsetCommitResponseTopic(name=t.name, partitions=parts))
        ctx.note(group_id=req.group_id)
        ctx.respond(R(topics=topics))

    def fetch_offsets(self, ctx: RequestContext) -> None:
        req = ctx.request
        R = OffsetFetchResponse
        if ctx.version >= 8:
            groups = []
            for g in req.groups:
                wanted = None if g.topics is None else [(t.name, list(t.partition_indexes))
                                                        for t in g.topics]
                error, rows = self._offsets_for(
                    ctx, g.group_id, wanted, req.require_stable,
                    (g.member_id, g.member_epoch) if ctx.version >= 9 else None)
                groups.append(R.OffsetFetchResponseGroup(
                    group_id=g.group_id, error_code=error, topics=[
                        R.OffsetFetchResponseTopics(name=name, partitions=[
                            R.OffsetFetchResponsePartitions(
                                partition_index=p, committed_offset=o.offset,
                                committed_leader_epoch=o.leader_epoch, metadata=o.metadata,
                                error_code=code) for p, o, code in parts])
                        for name, parts in rows]))
            ctx.respond(R(groups=groups))
            return
        wanted = None if req.topics is None else [(t.name, list(t.partition_indexes))
                                                  for t in req.topics]
        error, rows = self._offsets_for(ctx, req.group_id, wanted,
                                        req.require_stable if ctx.version >= 7 else False)
        topics = [R.OffsetFetchResponseTopic(name=name, partitions=[
            R.OffsetFetchResponsePartition(partition_index=p, committed_offset=o.offset,
                                           committed_leader_epoch=o.leader_epoch,
                                           metadata=o.metadata,
                                           error_code=code if code else error)
            for p, o, code in parts]) for name, parts in rows]
        ctx.respond(R(topics=topics, error_code=error))

    def _offsets_for(self, ctx: RequestContext, group_id: str,
                     wanted: Optional[List[Tuple[str, List[int]]]],
                     require_stable: bool,
                     member: Optional[Tuple[Optional[str], int]] = None
                     ) -> Tuple[int, List[Tuple[str, List[Any]]]]:
        none = CommittedOffset(-1, -1, "", 0.0)
        if not _may_group(ctx, AclOperation.DESCRIBE, group_id):
            rows = [(name, [(p, none, ErrorCode.GROUP_AUTHORIZATION_FAILED) for p in parts])
                    for name, parts in (wanted or [])]
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, rows
        if not self.owns(ctx, group_id):
            rows = [(name, [(p, none, ErrorCode.NOT_COORDINATOR) for p in parts])
                    for name, parts in (wanted or [])]
            return ErrorCode.NOT_COORDINATOR, rows
        group = self.groups.get(group_id)
        if member is not None and group is not None and not isinstance(group, Group):
            error = self.server.consumer_groups.check_fetch(group, *member)
            if error:
                return error, []
        offsets = group.offsets if group is not None else {}
        pending: Set[Tuple[str, int]] = set()
        if group is not None and require_stable:
            for txn in group.pending_txn_offsets.values():
                pending.update(txn)
        if wanted is None:
            # Every committed offset: Kafka leaves out the topics the principal may not
            # describe.
            by_topic: Dict[str, List[int]] = {}
            for (topic, p) in sorted(offsets):
                by_topic.setdefault(topic, []).append(p)
            wanted = [(name, parts) for name, parts in by_topic.items()
                      if ctx.allowed(AclOperation.DESCRIBE, AclResourceType.TOPIC, name)]
        rows = []
        for name, parts in wanted:
            out = []
            if not ctx.allowed(AclOperation.DESCRIBE, AclResourceType.TOPIC, name):
                rows.append((name, [(p, none, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                    for p in parts]))
                continue
            for p in parts:
                code = ErrorCode.UNSTABLE_OFFSET_COMMIT if (name, p) in pending \
                    else ErrorCode.NONE
                out.append((p, offsets.get((name, p), none), code))
            rows.append((name, out))
        return ErrorCode.NONE, rows

    # -- describe / list / delete ----------------------------------------------------
    def describe(self, ctx: RequestContext) -> None:
        R = DescribeGroupsResponse
        out = []
        for group_id in ctx.request.groups:
            if not ctx.allowed(AclOperation.DESCRIBE, AclResourceType.GROUP, group_id):
                out.append(R.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                            group_id=group_id, group_state="",
                                            protocol_type="", protocol_data=""))
                continue
            if not self.owns(ctx, group_id):
                out.append(R.DescribedGroup(error_code=ErrorCode.NOT_COORDINATOR,
                                            group_id=group_id))
                continue
            group = self._classic(group_id)
            if group is None:
                # Unknown, or a consumer group (ConsumerGroupDescribe describes those):
                # Kafka 4 answers Dead before v6.
                out.append(R.DescribedGroup(error_code=ErrorCode.NONE, group_id=group_id,
                                            group_state=ClassicGroupState.DEAD, protocol_type="",
                                            protocol_data=""))
                continue
            stable = group.state == ClassicGroupState.STABLE
            out.append(R.DescribedGroup(
                error_code=ErrorCode.NONE, group_id=group_id, group_state=group.state,
                protocol_type=group.protocol_type or "",
                protocol_data=group.protocol_name or "",
                members=[R.DescribedGroupMember(
                    member_id=m.member_id, group_instance_id=m.group_instance_id,
                    client_id=m.client_id, client_host=m.client_host,
                    member_metadata=m.metadata_for(group.protocol_name or ""),
                    member_assignment=m.assignment if stable else b"")
                    for m in group.members.values()]))
        if ctx.version >= 3 and ctx.request.include_authorized_operations:
            # KIP-430: what the principal may do with each group described.
            for described in out:
                if described.error_code == ErrorCode.NONE:
                    described.authorized_operations = ctx.authorized_operations(
                        AclResourceType.GROUP, described.group_id)
        ctx.respond(R(groups=out))

    def list_groups(self, ctx: RequestContext) -> None:
        R = ListGroupsResponse
        req = ctx.request
        # Both filters ignore case, as Kafka 4's do.
        states = {s.strip().lower() for s in req.states_filter} \
            if ctx.version >= 4 and req.states_filter else None
        types = {t.strip().lower() for t in req.types_filter} \
            if ctx.version >= 5 and req.types_filter else None
        out = []
        # Kafka: DESCRIBE on the cluster lists every group, else those the principal may
        # describe.
        every = ctx.allowed(AclOperation.DESCRIBE, AclResourceType.CLUSTER, CLUSTER_NAME)
        for group in self.groups.values():
            if not self.owns(ctx, group.group_id):
                continue
            if not every and not ctx.allowed(AclOperation.DESCRIBE, AclResourceType.GROUP,
                                             group.group_id):
                continue
            kind = GroupType.CLASSIC if isinstance(group, Group) else group.kind
            if states is not None and group.state.lower() not in states:
                continue
            if types is not None and kind not in types:
                continue
            out.append(R.ListedGroup(group_id=group.group_id,
                                     protocol_type=group.protocol_type or "",
                                     group_state=group.state, group_type=kind))
        ctx.respond(R(error_code=ErrorCode.NONE, groups=out))

    def delete_groups(self, ctx: RequestContext) -> None:
        R = DeleteGroupsResponse
        out = []
        for group_id in ctx.request.groups_names:
            error = ErrorCode.NONE
            if not ctx.allowed(AclOperation.DELETE, AclResourceType.GROUP, group_id):
                error = ErrorCode.GROUP_AUTHORIZATION_FAILED
            elif not self.owns(ctx, group_id):
                error = ErrorCode.NOT_COORDINATOR
            else:
                group = self.groups.get(group_id)
                if group is None:
                    error = ErrorCode.GROUP_ID_NOT_FOUND
                elif group.members:
                    error = ErrorCode.NON_EMPTY_GROUP
                else:
                    del self.groups[group_id]
                    # A share group's share-partitions go with it, as Kafka deletes them.
                    self.server.share_fetch.forget(group_id=group_id)
            out.append(R.DeletableGroupResult(group_id=group_id, error_code=error))
        ctx.respond(R(results=out))


def _join_error(code: int) -> Any:
    return JoinGroupResponse(error_code=code, generation_id=-1, protocol_name=None,
                             leader="", member_id="", members=[])


def _common_protocol(group: Group, protocols: List[Tuple[str, bytes]]) -> bool:
    names = {n for n, _ in protocols}
    for member in group.members.values():
        names &= {n for n, _ in member.protocols}
    return bool(names)


def _choose_protocol(members: List[Member]) -> str:
    """The protocol every member supports that most members list first (Kafka's vote)."""
    common = None
    for m in members:
        names = {n for n, _ in m.protocols}
        common = names if common is None else common & names
    candidates = [n for n, _ in members[0].protocols if n in (common or set())]
    if not candidates:
        return members[0].protocols[0][0]
    votes = {n: 0 for n in candidates}
    for m in members:
        for n, _ in m.protocols:
            if n in votes:
                votes[n] += 1
                break
    return max(candidates, key=lambda n: votes[n])


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    return ctx.server.groups


def _may_group(ctx: RequestContext, operation: AclOperation, group_id: str) -> bool:
    return ctx.allowed(operation, AclResourceType.GROUP, group_id)


def _refused_group(ctx: RequestContext, error_answer: Any) -> bool:
    """Kafka's check of the membership APIs: READ on the group, else the answer is
    GROUP_AUTHORIZATION_FAILED (True: answered)."""
    if _may_group(ctx, AclOperation.READ, ctx.request.group_id):
        return False
    ctx.respond(error_answer(ctx.request, ctx.version, ErrorCode.GROUP_AUTHORIZATION_FAILED))
    return True


# --------------------------------------------------------------------------- handlers


@handles(ApiKey.FIND_COORDINATOR)
def find_coordinator(ctx: RequestContext) -> None:
    req = ctx.request
    server = ctx.server
    if ctx.version >= 4:
        keys = list(req.coordinator_keys)
    else:
        keys = [req.key]
    key_type = req.key_type if ctx.version >= 1 else CoordinatorType.GROUP
    found = []
    for key in keys:
        if key_type not in (CoordinatorType.GROUP, CoordinatorType.TRANSACTION):
            found.append((key, ErrorCode.INVALID_REQUEST, -1, "", -1))
            continue
        # Kafka: DESCRIBE on the group or transactional id.
        for_group = key_type == CoordinatorType.GROUP
        if not ctx.allowed(AclOperation.DESCRIBE, AclResourceType.GROUP if for_group
                           else AclResourceType.TRANSACTIONAL_ID, key):
            found.append((key, ErrorCode.GROUP_AUTHORIZATION_FAILED if for_group
                          else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, "", -1))
            continue
        broker_id = server.controller.coordinator(key_type, key)
        broker = server.brokers.get(broker_id)
        if broker is None or not broker.up:
            found.append((key, ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1))
        else:
            found.append((key, ErrorCode.NONE, broker.broker_id, broker.host,
                          broker.client_port))
    ctx.note(keys=keys, key_type=key_type, coordinators=[f[2] for f in found])
    if ctx.version >= 4:
        ctx.respond(FindCoordinatorResponse(coordinators=[
            FindCoordinatorResponse.Coordinator(key=k, node_id=n, host=h, port=p, error_code=e)
            for k, e, n, h, p in found]))
    else:
        _k, e, n, h, p = found[0]
        ctx.respond(FindCoordinatorResponse(error_code=e, node_id=n, host=h, port=p))


@error_answer(ApiKey.FIND_COORDINATOR)
def find_coordinator_error(request: Any, version: int, code: int) -> Any:
    if version >= 4:
        return FindCoordinatorResponse(coordinators=[
            FindCoordinatorResponse.Coordinator(key=k, node_id=-1, host="", port=-1,
                                                error_code=code)
            for k in request.coordinator_keys])
    return FindCoordinatorResponse(error_code=code, node_id=-1, host="", port=-1)


@handles(ApiKey.JOIN_GROUP)
def join_group(ctx: RequestContext) -> None:
    ctx.note(group_id=ctx.request.group_id)
    if not _refused_group(ctx, join_group_error):
        _coordinator(ctx).join(ctx)


@error_answer(ApiKey.JOIN_GROUP)
def join_group_error(request: Any, version: int, code: int) -> Any:
    return _join_error(code)


@handles(ApiKey.SYNC_GROUP)
def sync_group(ctx: RequestContext) -> None:
    ctx.note(group_id=ctx.request.group_id)
    if not _refused_group(ctx, sync_group_error):
        _coordinator(ctx).sync(ctx)


@error_answer(ApiKey.SYNC_GROUP)
def sync_group_error(request: Any, version: int, code: int) -> Any:
    return SyncGroupResponse(error_code=code)


@handles(ApiKey.HEARTBEAT)
def heartbeat(ctx: RequestContext) -> None:
    if not _refused_group(ctx, heartbeat_error):
        _coordinator(ctx).heartbeat(ctx)


@error_answer(ApiKey.HEARTBEAT)
def heartbeat_error(request: Any, version: int, code: int) -> Any:
    return HeartbeatResponse(error_code=code)


@handles(ApiKey.LEAVE_GROUP)
def leave_group(ctx: RequestContext) -> None:
    if not _refused_group(ctx, leave_group_error):
        _coordinator(ctx).leave(ctx)


@error_answer(ApiKey.LEAVE_GROUP)
def leave_group_error(request: Any, version: int, code: int) -> Any:
    return LeaveGroupResponse(error_code=code)


@handles(ApiKey.OFFSET_COMMIT)
def offset_commit(ctx: RequestContext) -> None:
    _coordinator(ctx).commit(ctx)


@error_answer(ApiKey.OFFSET_COMMIT)
def offset_commit_error(request: Any, version: int, code: int) -> Any:
    R = OffsetCommitResponse
    return R(topics=[R.OffsetCommitResponseTopic(name=t.name, partitions=[
        R.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
        for p in t.partitions]) for t in request.topics])


@handles(ApiKey.OFFSET_FETCH)
def offset_fetch(ctx: RequestContext) -> None:
    _coordinator(ctx).fetch_offsets(ctx)


@error_answer(ApiKey.OFFSET_FETCH)
def offset_fetch_error(request: Any, version: int, code: int) -> Any:
    R = OffsetFetchResponse
    if version >= 8:
        return R(groups=[R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code)
                         for g in request.groups])
    return R(error_code=code, topics=[R.OffsetFetchResponseTopic(name=t.name, partitions=[
        R.OffsetFetchResponsePartition(partition_index=p, committed_offset=-1, metadata="",
                                       error_code=code) for p in t.partition_indexes])
        for t in (request.topics or [])])


@handles(ApiKey.DESCRIBE_GROUPS)
def describe_groups(ctx: RequestContext) -> None:
    _coordinator(ctx).describe(ctx)


@handles(ApiKey.LIST_GROUPS)
def list_groups(ctx: RequestContext) -> None:
    _coordinator(ctx).list_groups(ctx)


@handles(ApiKey.DELETE_GROUPS)
def delete_groups(ctx: RequestContext) -> None:
    _coordinator(ctx).delete_groups(ctx)
