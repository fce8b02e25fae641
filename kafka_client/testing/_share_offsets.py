"""A share group's start offsets for the admin client (KIP-932, Kafka 4.1): read them
(DescribeShareGroupOffsets), set them (AlterShareGroupOffsets) and drop a topic's
(DeleteShareGroupOffsets), on the share-partition state of ``_share_fetch``.

As Kafka's group coordinator: the group's coordinator answers, a group id that is no
share group is GROUP_ID_NOT_FOUND, and setting or dropping start offsets needs a group
without members (NON_EMPTY_GROUP otherwise: a member's in-flight records hang on them).
A share-partition no member has read yet has no start offset (-1). Setting one forgets
the partition's in-flight records, so the next ShareFetch acquires from there; dropping a
topic's forgets its share-partitions, so the next ShareFetch starts it afresh from
``share.auto.offset.reset``.
"""
from __future__ import annotations

import uuid
from typing import Any, Dict, List, Optional, Tuple

from kafka_proto.enums import AclOperation, AclResourceType
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    AlterShareGroupOffsetsResponse,
    ApiKey,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponse,
)

from ._api import RequestContext, error_answer, handles
from ._share_groups import ShareGroup

__all__ = ["describe_share_group_offsets", "alter_share_group_offsets",
           "delete_share_group_offsets"]

#: The start offset of a share-partition nobody has read yet (and no leader epoch).
UNINITIALIZED = -1
#: The topic id of a topic the cluster does not know.
NO_TOPIC_ID = uuid.UUID(int=0)


def _group_error(ctx: RequestContext, group_id: str, operation: AclOperation,
                 empty: bool) -> Tuple[int, Optional[str]]:
    """The error (and message) of the group as a whole: authorization, coordinator,
    existence and, with ``empty``, membership."""
    if not ctx.allowed(operation, AclResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    if not ctx.server.groups.owns(ctx, group_id):
        return ErrorCode.NOT_COORDINATOR, None
    group = ctx.server.groups.groups.get(group_id)
    if not isinstance(group, ShareGroup):
        return ErrorCode.GROUP_ID_NOT_FOUND, (
            f"Group {group_id} not found." if group is None
            else f"Group {group_id} is not a share group.")
    if empty and group.members:
        return ErrorCode.NON_EMPTY_GROUP, (
            f"Share group {group_id} has {len(group.members)} member(s): only an empty "
            f"group's start offsets can change.")
    return ErrorCode.NONE, None


def _topic_error(ctx: RequestContext, topic: str, operation: AclOperation,
                 index: Optional[int] = None) -> int:
    if not ctx.allowed(operation, AclResourceType.TOPIC, topic):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    info = ctx.server.controller.topics.get(topic)
    if info is None or (index is not None and not 0 <= index < len(info.partitions)):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


# --------------------------------------------------------------------------- describe


@handles(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
def describe_share_group_offsets(ctx: RequestContext) -> None:
    R = DescribeShareGroupOffsetsResponse
    out = []
    for asked in ctx.request.groups:
        code, message = _group_error(ctx, asked.group_id, AclOperation.DESCRIBE, empty=False)
        if code:
            out.append(R.DescribeShareGroupOffsetsResponseGroup(
                group_id=asked.group_id, topics=[], error_code=code, error_message=message))
            continue
        out.append(R.DescribeShareGroupOffsetsResponseGroup(
            group_id=asked.group_id, topics=_described_topics(ctx, asked),
            error_code=ErrorCode.NONE))
    ctx.note(groups=[g.group_id for g in ctx.request.groups])
    ctx.respond(R(groups=out))


def _described_topics(ctx: RequestContext, asked: Any) -> List[Any]:
    R = DescribeShareGroupOffsetsResponse
    controller = ctx.server.controller
    state = ctx.server.share_fetch
    group_id = asked.group_id
    if asked.topics is None:  # every share-partition of the group with a start offset
        wanted: Dict[str, List[int]] = {}
        for (gid, _tid, index), sp in sorted(state.partitions.items(),
                                             key=lambda kv: (kv[1].topic, kv[1].partition)):
            if gid == group_id and sp.start_offset is not None and \
                    ctx.allowed(AclOperation.DESCRIBE, AclResourceType.TOPIC, sp.topic):
                wanted.setdefault(sp.topic, []).append(index)
    else:
        wanted = {t.topic_name: list(t.partitions) for t in asked.topics}
    topics = []
    for name, indexes in wanted.items():
        info = controller.topics.get(name)
        parts = []
        for index in indexes:
            error = _topic_error(ctx, name, AclOperation.DESCRIBE, index)
            sp = None if error or info is None else \
                state.partitions.get((group_id, info.topic_id, index))
            start = sp.start_offset if sp is not None and sp.start_offset is not None \
                else UNINITIALIZED
            part = controller.partition(name, index)
            parts.append(R.DescribeShareGroupOffsetsResponsePartition(
                partition_index=index, start_offset=start,
                leader_epoch=part.leader_epoch
                if part is not None and start != UNINITIALIZED else -1,
                error_code=error))
        topics.append(R.DescribeShareGroupOffsetsResponseTopic(
            topic_name=name, topic_id=info.topic_id if info is not None else NO_TOPIC_ID,
            partitions=parts))
    return topics


@error_answer(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
def describe_offsets_error(request: Any, version: int, code: int) -> Any:
    R = DescribeShareGroupOffsetsResponse
    return R(groups=[R.DescribeShareGroupOffsetsResponseGroup(
        group_id=g.group_id, topics=[], error_code=code) for g in request.groups])


# --------------------------------------------------------------------------- alter


@handles(ApiKey.ALTER_SHARE_GROUP_OFFSETS)
def alter_share_group_offsets(ctx: RequestContext) -> None:
    R = AlterShareGroupOffsetsResponse
    req = ctx.request
    code, message = _group_error(ctx, req.group_id, AclOperation.READ, empty=True)
    ctx.note(group=req.group_id)
    if code:
        ctx.respond(R(error_code=code, error_message=message, responses=[]))
        return
    controller = ctx.server.controller
    state = ctx.server.share_fetch
    out = []
    for topic in req.topics:
        info = controller.topics.get(topic.topic_name)
        parts = []
        for p in topic.partitions:
            error = _topic_error(ctx, topic.topic_name, AclOperation.READ, p.partition_index)
            if not error and p.start_offset < 0:
                error = ErrorCode.INVALID_REQUEST
            if not error:
                sp = state.partition(req.group_id, topic.topic_name, info.topic_id,
                                     p.partition_index)
                # No member holds a record (the group is empty): the in-flight records
                # before and after the new start are forgotten, all available from it.
                sp.start_offset = sp.end_offset = p.start_offset
                sp.records.clear()
            parts.append(R.AlterShareGroupOffsetsResponsePartition(
                partition_index=p.partition_index, error_code=error))
        out.append(R.AlterShareGroupOffsetsResponseTopic(
            topic_name=topic.topic_name,
            topic_id=info.topic_id if info is not None else NO_TOPIC_ID,
            partitions=parts))
    ctx.respond(R(error_code=ErrorCode.NONE, responses=out))


@error_answer(ApiKey.ALTER_SHARE_GROUP_OFFSETS)
def alter_offsets_error(request: Any, version: int, code: int) -> Any:
    return AlterShareGroupOffsetsResponse(error_code=code, responses=[])


# --------------------------------------------------------------------------- delete


@handles(ApiKey.DELETE_SHARE_GROUP_OFFSETS)
def delete_share_group_offsets(ctx: RequestContext) -> None:
    R = DeleteShareGroupOffsetsResponse
    req = ctx.request
    code, message = _group_error(ctx, req.group_id, AclOperation.DELETE, empty=True)
    ctx.note(group=req.group_id)
    if code:
        ctx.respond(R(error_code=code, error_message=message, responses=[]))
        return
    controller = ctx.server.controller
    state = ctx.server.share_fetch
    out = []
    for topic in req.topics:
        info = controller.topics.get(topic.topic_name)
        error = _topic_error(ctx, topic.topic_name, AclOperation.READ)
        if not error:
            for key in [k for k in state.partitions
                        if k[0] == req.group_id and k[1] == info.topic_id]:
                del state.partitions[key]
        out.append(R.DeleteShareGroupOffsetsResponseTopic(
            topic_name=topic.topic_name,
            topic_id=info.topic_id if info is not None else NO_TOPIC_ID,
            error_code=error))
    ctx.respond(R(error_code=ErrorCode.NONE, responses=out))


@error_answer(ApiKey.DELETE_SHARE_GROUP_OFFSETS)
def delete_offsets_error(request: Any, version: int, code: int) -> Any:
    return DeleteShareGroupOffsetsResponse(error_code=code, responses=[])
