"""Share groups (KIP-932, "queues for Kafka"): membership, beside the classic and the
KIP-848 consumer groups, in the same registry (``GroupCoordinator.groups``: a group id is
one kind).

A member speaks ShareGroupHeartbeat: it joins with epoch 0 (from version 1 with a member
id of its own; an empty one gets one from the coordinator at version 0), names the topics
it subscribes to, heartbeats within ``group.share.session.timeout.ms`` and leaves with
epoch -1. Every change of membership or subscription moves the group epoch on and the
coordinator assigns again at once: share groups have no revocation, several members may
hold one partition (the records, not the partitions, are shared out, by ShareFetch: see
``_share_fetch``), so a member's epoch goes to the group epoch with its next heartbeat.

The assignment is a fair spread in the manner of Kafka's ``simple`` assignor: per topic,
with M subscribers and P partitions, partition p goes to subscriber p mod M and, when
there are more subscribers than partitions, subscriber i also gets partition i mod P, so
every partition has a member and every member a partition.

A member that leaves, or whose session expires, gives up the records it had acquired
(``ShareFetchState.member_gone``).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Dict, Iterable, List, Optional, Set, Tuple

from kafka_proto.enums import GroupType, MemberEpoch
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import ApiKey, ShareGroupDescribeResponse, ShareGroupHeartbeatResponse

from ._api import RequestContext, error_answer, handles
from ._assigned_groups import (
    AssignedGroup, AssignedGroupCoordinator, HeartbeatError, TopicPartition, by_topic,
    describe_error_for, describe_groups, new_member_id, refused_heartbeat,
)

if TYPE_CHECKING:  # pragma: no cover
    from ._server import ClusterServer

__all__ = ["ShareGroupCoordinator", "ShareGroup", "ShareMember", "assign_simple",
           "SHARE_GROUP_CONFIGS"]

#: ShareGroupHeartbeat versions from which the client brings its own member id.
CLIENT_MEMBER_ID_VERSION = 1

#: Kafka's share group states (ListGroups, ShareGroupDescribe).
EMPTY = "Empty"
STABLE = "Stable"

#: The group configs (IncrementalAlterConfigs on a GROUP resource) a share group reads,
#: with the broker property that gives the default (None: Kafka's fixed default).
SHARE_GROUP_CONFIGS: Dict[str, Tuple[Optional[str], Any]] = {
    "share.auto.offset.reset": (None, "latest"),
    "share.record.lock.duration.ms": ("group.share.record.lock.duration.ms", None),
    "share.heartbeat.interval.ms": ("group.share.heartbeat.interval.ms", None),
    "share.session.timeout.ms": ("group.share.session.timeout.ms", None),
    "share.delivery.count.limit": ("group.share.delivery.count.limit", None),
}

@dataclass(eq=False)
class ShareMember:
    member_id: str
    rack_id: Optional[str] = None
    client_id: str = ""
    client_host: str = ""
    topic_names: Tuple[str, ...] = ()
    epoch: int = 0
    previous_epoch: int = 0
    assigned: Set[TopicPartition] = field(default_factory=set)
    session_timer: Any = None


@dataclass(eq=False)
class ShareGroup(AssignedGroup):
    """A share group: its members are ``ShareMember``s. It commits no offsets; its
    (empty) ``offsets`` are for the registry's other users."""

    kind: ClassVar[str] = GroupType.SHARE
    protocol_type: ClassVar[str] = "share"

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY


def assign_simple(order: List[str], subscriptions: Dict[str, Set[uuid.UUID]],
                  partitions: Dict[uuid.UUID, int]) -> Dict[str, Set[TopicPartition]]:
    """Per topic, partition p to subscriber p mod M, and subscriber i also partition
    i mod P when there are more subscribers (M) than partitions (P)."""
    result: Dict[str, Set[TopicPartition]] = {m: set() for m in order}
    for tid in sorted({t for m in order for t in subscriptions[m]}, key=str):
        count = partitions.get(tid, 0)
        members = [m for m in order if tid in subscriptions[m]]
        if count == 0 or not members:
            continue
        for p in range(count):
            result[members[p % len(members)]].add((tid, p))
        for i, m in enumerate(members[count:], start=count):
            result[m].add((tid, i % count))
    return result


class ShareGroupCoordinator(AssignedGroupCoordinator):
    """ShareGroupHeartbeat and ShareGroupDescribe, and the group configs of share groups."""

    def __init__(self, server: "ClusterServer") -> None:
        super().__init__(server)
        #: group id -> the group configs set for it (kept whether or not the group exists)
        self.group_configs: Dict[str, Dict[str, Any]] = {}

    def config(self, group_id: str, name: str) -> Any:
        """A share group config: the group's own value, else the broker's default."""
        own = self.group_configs.get(group_id, {})
        if name in own:
            return own[name]
        broker_name, fixed = SHARE_GROUP_CONFIGS[name]
        return self.settings[broker_name] if broker_name is not None else fixed

    @staticmethod
    def check_config(name: str, value: Any) -> Any:
        """The value of a group config as kept (None: back to the default); ValueError
        for an unknown name or a bad value."""
        if name not in SHARE_GROUP_CONFIGS:
            raise ValueError(f"Unknown group config name: {name}")
        if value is None:
            return None
        if name == "share.auto.offset.reset":
            if str(value).lower() not in ("latest", "earliest"):
                raise ValueError(f"Invalid value {value} for configuration {name}: "
                                 "String must be one of: latest, earliest")
            return str(value).lower()
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ValueError(f"Invalid value {value} for configuration {name}: "
                             "Not a number of type INT") from None
        if number < 1:
            raise ValueError(f"Invalid value {value} for configuration {name}: "
                             "Value must be at least 1")
        return number

    def set_config(self, group_id: str, name: str, value: Any) -> None:
        """Set (or with None delete) a group config."""
        value = self.check_config(name, value)
        own = self.group_configs.setdefault(group_id, {})
        if value is None:
            own.pop(name, None)
        else:
            own[name] = value

    # -- topics ------------------------------------------------------------------------
    def _topic_metadata(self, members: Iterable[ShareMember]
                        ) -> Dict[str, Tuple[uuid.UUID, int]]:
        topics = self.server.controller.topics
        out = {}
        for m in members:
            for name in m.topic_names:
                info = topics.get(name)
                if info is not None:
                    out[name] = (info.topic_id, len(info.partitions))
        return out

    def metadata_changed(self) -> None:
        """Topics were created, deleted or got partitions: the share groups subscribed to
        them are assigned again."""
        for group in list(self.groups.values()):
            if not isinstance(group, ShareGroup) or not group.members:
                continue
            metadata = self._topic_metadata(group.members.values())
            if metadata != group.topic_metadata:
                self._bump(group)

    def _bump(self, group: ShareGroup) -> None:
        """A new group epoch and its assignment (share groups assign at once)."""
        group.topic_metadata = self._topic_metadata(group.members.values())
        group.group_epoch += 1
        partitions = {tid: n for tid, n in group.topic_metadata.values()}
        subscriptions = {m.member_id: {group.topic_metadata[n][0] for n in m.topic_names
                                       if n in group.topic_metadata}
                         for m in group.members.values()}
        group.target = assign_simple(list(group.members), subscriptions, partitions)
        group.assignment_epoch = group.group_epoch

    # -- ShareGroupHeartbeat -----------------------------------------------------------
    def heartbeat(self, ctx: RequestContext) -> None:
        req = ctx.request
        ctx.note(group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
                 subscribed_topic_names=req.subscribed_topic_names)
        try:
            self._validate(req, ctx.version)
            if not self.owns(ctx, req.group_id):
                raise HeartbeatError(ErrorCode.NOT_COORDINATOR)
            if req.member_epoch == MemberEpoch.LEAVE:
                response = self._leave(req)
            else:
                response = self._heartbeat(ctx)
        except HeartbeatError as exc:
            response = heartbeat_error(req, ctx.version, exc.code, exc.message)
        ctx.respond(response)

    @staticmethod
    def _validate(req: Any, version: int) -> None:
        def invalid(message: str) -> HeartbeatError:
            return HeartbeatError(ErrorCode.INVALID_REQUEST, message)

        if (version >= CLIENT_MEMBER_ID_VERSION or req.member_epoch != MemberEpoch.JOIN) \
                and req.member_id == "":
            raise invalid("MemberId can't be empty.")
        if req.group_id == "":
            raise invalid("GroupId can't be empty.")
        if req.rack_id == "":
            raise invalid("RackId can't be empty.")
        if req.member_epoch == MemberEpoch.JOIN:
            if not req.subscribed_topic_names:
                raise invalid("SubscribedTopicNames must be set in first request.")
        elif req.member_epoch < MemberEpoch.LEAVE:
            raise invalid(f"MemberEpoch is {req.member_epoch}, should be -1, 0 or greater.")

    def _group(self, group_id: str, join: bool) -> Tuple[ShareGroup, bool]:
        """The share group, a new one (not registered yet) for a join, or an error."""
        group = self.groups.get(group_id)
        if isinstance(group, ShareGroup):
            return group, False
        if group is not None:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                 f"Group {group_id} is not a share group.")
        if not join:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                 f"Share group {group_id} not found.")
        return ShareGroup(group_id), True

    def _heartbeat(self, ctx: RequestContext) -> Any:
        req = ctx.request
        epoch = req.member_epoch
        group, new_group = self._group(req.group_id, epoch == MemberEpoch.JOIN)
        member_id = req.member_id or new_member_id()
        member = group.members.get(member_id)
        if member is None:
            if epoch != MemberEpoch.JOIN:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {member_id} is not a member of group "
                                     f"{req.group_id}.")
            max_size = self.settings["group.share.max.size"]
            if len(group.members) >= max_size:
                raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                     "The share group has reached its maximum capacity of "
                                     f"{max_size} members.")
            member = ShareMember(member_id)
        elif epoch != MemberEpoch.JOIN and epoch != member.epoch and \
                epoch != member.previous_epoch:
            # The previous epoch passes: the answer that moved the member on may be lost.
            raise HeartbeatError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The share group member has a {'greater' if epoch > member.epoch else 'smaller'}"
                f" member epoch ({epoch}) than the one known by the group coordinator "
                f"({member.epoch}). The member must abandon all its partitions and rejoin.")

        # Nothing refused: the request changes the group from here on.
        if new_group:
            self.server.groups.replace_group(group.group_id, group)
        before = (member.epoch, frozenset(member.assigned))
        old_names = set(member.topic_names)
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.subscribed_topic_names is not None:
            member.topic_names = tuple(req.subscribed_topic_names)
        member.client_id = ctx.head.client_id or ""
        member.client_host = ctx.conn.peer[0] if ctx.conn.peer else ""
        joined = member_id not in group.members
        group.members[member_id] = member
        metadata = self._topic_metadata(group.members.values())
        if joined or set(member.topic_names) != old_names or metadata != group.topic_metadata:
            self._bump(group)
        if member.epoch != group.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
            member.assigned = set(group.target.get(member_id, ()))
        self._touch(group, member)

        response = ShareGroupHeartbeatResponse(
            error_code=ErrorCode.NONE, member_id=member_id, member_epoch=member.epoch,
            heartbeat_interval_ms=self.config(group.group_id, "share.heartbeat.interval.ms"))
        if epoch == MemberEpoch.JOIN or (member.epoch, frozenset(member.assigned)) != before:
            R = ShareGroupHeartbeatResponse
            response.assignment = R.Assignment(topic_partitions=[
                R.TopicPartitions(topic_id=tid, partitions=parts)
                for tid, parts in by_topic(member.assigned)])
        ctx.note(group_epoch=group.group_epoch, member_epoch_given=member.epoch,
                 assigned=sorted((str(t), p) for t, p in member.assigned))
        return response

    # -- sessions and leaving ----------------------------------------------------------
    def _touch(self, group: ShareGroup, member: ShareMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self.server.loop.call_later(
            self.config(group.group_id, "share.session.timeout.ms") / 1000,
            self._session_expired, group, member)

    def _session_expired(self, group: ShareGroup, member: ShareMember) -> None:
        member.session_timer = None
        if self.groups.get(group.group_id) is group and \
                group.members.get(member.member_id) is member:
            self._remove(group, member)

    def _remove(self, group: ShareGroup, member: ShareMember) -> None:
        """The member is out: its acquired records are released, the others reassigned."""
        if member.session_timer is not None:
            member.session_timer.cancel()
            member.session_timer = None
        del group.members[member.member_id]
        self._bump(group)
        self.server.share_fetch.member_gone(group.group_id, member.member_id)

    def _leave(self, req: Any) -> Any:
        group, _ = self._group(req.group_id, join=False)
        member = group.members.get(req.member_id)
        if member is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group "
                                 f"{req.group_id}.")
        self._remove(group, member)
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.NONE, member_id=req.member_id,
                                           member_epoch=MemberEpoch.LEAVE)

    # -- ShareGroupDescribe ------------------------------------------------------------
    def describe(self, ctx: RequestContext) -> None:
        describe_groups(ctx, self, ShareGroupDescribeResponse, ShareGroup,
                        self._described_group)

    def _described_group(self, group: ShareGroup) -> Any:
        R = ShareGroupDescribeResponse
        by_id = self.server.controller.topics_by_id
        return R.DescribedGroup(
            error_code=ErrorCode.NONE, group_id=group.group_id, group_state=group.state,
            group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
            assignor_name="simple",
            members=[R.Member(
                member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.epoch,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=list(m.topic_names),
                assignment=R.Assignment(topic_partitions=[
                    R.TopicPartitions(topic_id=tid, partitions=parts,
                                      topic_name=by_id[tid].name if tid in by_id else "")
                    for tid, parts in by_topic(m.assigned)]))
                for m in group.members.values()])


# --------------------------------------------------------------------------- handlers


@handles(ApiKey.SHARE_GROUP_HEARTBEAT)
def share_group_heartbeat(ctx: RequestContext) -> None:
    if not refused_heartbeat(ctx, heartbeat_error):
        ctx.server.share_groups.heartbeat(ctx)


@error_answer(ApiKey.SHARE_GROUP_HEARTBEAT)
def heartbeat_error(request: Any, version: int, code: int,
                    message: Optional[str] = None) -> Any:
    return ShareGroupHeartbeatResponse(error_code=code, error_message=message, member_id=None,
                                       member_epoch=0, heartbeat_interval_ms=0)


@handles(ApiKey.SHARE_GROUP_DESCRIBE)
def share_group_describe(ctx: RequestContext) -> None:
    ctx.server.share_groups.describe(ctx)


@error_answer(ApiKey.SHARE_GROUP_DESCRIBE)
def describe_error(request: Any, version: int, code: int) -> Any:
    return describe_error_for(ShareGroupDescribeResponse, request, code)
