"""What the two kinds of group whose coordinator assigns have in common: the KIP-848
consumer groups (``_consumer_groups``) and the KIP-932 share groups (``_share_groups``).

Both keep a group epoch, an assignment epoch and a target assignment per member, live in
the one registry of groups (``GroupCoordinator.groups``), check a heartbeat's ACLs alike
and answer their Describe requests in one shape; what differs (members, assignors,
reconciliation, what a describe says of a group) stays in each module.
"""
from __future__ import annotations

import base64
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING, Any, Callable, ClassVar, Dict, Iterable, List, Optional, Set, Tuple, Type,
)

from kafka_proto.enums import AclOperation, AclResourceType
from kafka_proto.errors import ErrorCode

from ._api import RequestContext
from ._groups import CommittedOffset

if TYPE_CHECKING:  # pragma: no cover
    from ._server import ClusterServer

__all__ = ["TopicPartition", "HeartbeatError", "AssignedGroup", "AssignedGroupCoordinator",
           "new_member_id", "by_topic", "describe_groups", "describe_error_for",
           "refused_heartbeat"]

TopicPartition = Tuple[uuid.UUID, int]


class HeartbeatError(Exception):
    """A ConsumerGroupHeartbeat or ShareGroupHeartbeat refused: the error code and Kafka's
    kind of message."""

    def __init__(self, code: int, message: Optional[str] = None) -> None:
        super().__init__(message or ErrorCode(code).name)
        self.code = code
        self.message = message


@dataclass(eq=False)
class AssignedGroup:
    """The epochs, members and target assignment of a group its coordinator assigns, and
    the offsets every group of the registry keeps."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    #: member id -> member, in the order they joined
    members: "OrderedDict[str, Any]" = field(default_factory=OrderedDict)
    #: member id -> the partitions the group epoch's assignment gives it
    target: Dict[str, Set[TopicPartition]] = field(default_factory=dict)
    #: The subscribed topics as the group epoch last saw them: name -> (id, partitions).
    topic_metadata: Dict[str, Tuple[uuid.UUID, int]] = field(default_factory=dict)
    offsets: Dict[Tuple[str, int], CommittedOffset] = field(default_factory=dict)
    #: producer id -> offsets committed in its open transaction
    pending_txn_offsets: Dict[int, Dict[Tuple[str, int], CommittedOffset]] = \
        field(default_factory=dict)

    #: The kind (ListGroups) and protocol type ("consumer", "share") of the subclass.
    kind: ClassVar[str]
    protocol_type: ClassVar[str]


class AssignedGroupCoordinator:
    """The coordinator of one kind of assigned group, on the cluster's group registry."""

    def __init__(self, server: "ClusterServer") -> None:
        self.server = server

    @property
    def groups(self) -> Dict[str, Any]:
        """The one registry of groups of every kind (``GroupCoordinator.groups``)."""
        return self.server.groups.groups

    @property
    def settings(self):
        return self.server.settings

    def owns(self, ctx: RequestContext, group_id: str) -> bool:
        return self.server.groups.owns(ctx, group_id)


def new_member_id() -> str:
    """A member id as Kafka's ``Uuid.toString()`` writes one (URL-safe base64, 22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def by_topic(partitions: Iterable[TopicPartition]) -> List[Tuple[uuid.UUID, List[int]]]:
    """The partitions by topic id, both in order, as the answers list them."""
    grouped: Dict[uuid.UUID, List[int]] = {}
    for tid, p in partitions:
        grouped.setdefault(tid, []).append(p)
    return [(tid, sorted(ps)) for tid, ps in sorted(grouped.items(), key=lambda i: str(i[0]))]


def describe_groups(ctx: RequestContext, coordinator: AssignedGroupCoordinator,
                    response: Any, kind: Type[AssignedGroup],
                    described: Callable[[Any], Any]) -> None:
    """Answer a ConsumerGroupDescribe or a ShareGroupDescribe (one shape): per group id,
    GROUP_AUTHORIZATION_FAILED without DESCRIBE on it, NOT_COORDINATOR where this broker
    is not its coordinator, GROUP_ID_NOT_FOUND where it is no group of ``kind``, else
    ``described(group)``."""
    R = response
    out = []
    for group_id in ctx.request.group_ids:
        if not ctx.allowed(AclOperation.DESCRIBE, AclResourceType.GROUP, group_id):
            out.append(R.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                        group_id=group_id))
            continue
        if not coordinator.owns(ctx, group_id):
            out.append(R.DescribedGroup(error_code=ErrorCode.NOT_COORDINATOR,
                                        group_id=group_id))
            continue
        group = coordinator.groups.get(group_id)
        if not isinstance(group, kind):
            # Kafka names the kind as the protocol type does: "consumer", "share".
            out.append(R.DescribedGroup(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND, group_id=group_id,
                error_message=f"Group {group_id} not found." if group is None else
                f"Group {group_id} is not a {kind.protocol_type} group."))
            continue
        out.append(described(group))
    if ctx.request.include_authorized_operations:
        # KIP-430: what the principal may do with each group described.
        for answer in out:
            if answer.error_code == ErrorCode.NONE:
                answer.authorized_operations = ctx.authorized_operations(
                    AclResourceType.GROUP, answer.group_id)
    ctx.note(groups=list(ctx.request.group_ids))
    ctx.respond(R(groups=out))


def describe_error_for(response: Any, request: Any, code: int) -> Any:
    """The error answer of a ConsumerGroupDescribe or ShareGroupDescribe: ``code`` for
    every group asked for."""
    R = response
    return R(groups=[R.DescribedGroup(error_code=code, group_id=g) for g in request.group_ids])


def refused_heartbeat(ctx: RequestContext, heartbeat_error: Callable[..., Any]) -> bool:
    """Kafka 4's checks of a ConsumerGroupHeartbeat or ShareGroupHeartbeat: READ on the
    group, DESCRIBE on every topic named in the subscription; else the answer is
    ``heartbeat_error``'s (True: answered)."""
    req = ctx.request
    if not ctx.allowed(AclOperation.READ, AclResourceType.GROUP, req.group_id):
        ctx.respond(heartbeat_error(req, ctx.version, ErrorCode.GROUP_AUTHORIZATION_FAILED))
        return True
    refused = sorted(t for t in req.subscribed_topic_names or ()
                     if not ctx.allowed(AclOperation.DESCRIBE, AclResourceType.TOPIC, t))
    if refused:
        ctx.respond(heartbeat_error(req, ctx.version, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                    f"Topics not authorized: {', '.join(refused)}"))
        return True
    return False
