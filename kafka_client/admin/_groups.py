"""Group value types: what ``list_consumer_groups()``, ``describe_consumer_groups()``,
``describe_share_groups()`` and the legacy ``list_groups()`` return."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Union

from kafka_client._cluster.metadata import BrokerMetadata
from kafka_client._model import ConsumerGroupState, ConsumerGroupType, Node
from kafka_client.admin._acl import AclOperation, to_operations
from kafka_client.admin._resource import to_enum
from kafka_client.errors import KafkaError
from kafka_client.types import TopicPartition

__all__ = [
    "ConsumerGroupListing",
    "ListConsumerGroupsResult",
    "MemberAssignment",
    "MemberDescription",
    "ConsumerGroupDescription",
    "GroupMember",
    "GroupMetadata",
    "ShareMemberDescription",
    "ShareGroupDescription",
]


def _optional(value: Union[None, str, int, object], cls: type) -> Optional[object]:
    return None if value is None else to_enum(value, cls)


class ConsumerGroupListing:
    """One group of ``list_consumer_groups()``: ``group_id``, ``is_simple_consumer_group``
    (no members ever joined: offsets only), ``state`` and ``type``."""

    def __init__(self, group_id: str, is_simple_consumer_group: bool,
                 state: Union[ConsumerGroupState, str, int, None] = None,
                 type: Union[ConsumerGroupType, str, int, None] = None) -> None:
        self.group_id = group_id
        self.is_simple_consumer_group = is_simple_consumer_group
        self.state = _optional(state, ConsumerGroupState)
        self.type = _optional(type, ConsumerGroupType)

    def __repr__(self) -> str:
        return (f"ConsumerGroupListing(group_id={self.group_id!r}, state={self.state}, "
                f"type={self.type})")


class ListConsumerGroupsResult:
    """``list_consumer_groups()``'s answer: ``valid`` listings and the ``errors``
    (KafkaError, as confluent-kafka's hold) of the brokers that could not be asked."""

    def __init__(self, valid: Optional[List[ConsumerGroupListing]] = None,
                 errors: Optional[List[Any]] = None) -> None:
        self.valid = valid
        self.errors = errors

    def __repr__(self) -> str:
        return f"ListConsumerGroupsResult(valid={self.valid!r}, errors={self.errors!r})"


class MemberAssignment:
    """The partitions assigned to one group member (``topic_partitions``)."""

    def __init__(self, topic_partitions: Optional[List[TopicPartition]]) -> None:
        self.topic_partitions = topic_partitions or []

    def __repr__(self) -> str:
        return f"MemberAssignment({self.topic_partitions!r})"


class MemberDescription:
    """One member of a described group: ``member_id``, ``client_id``, ``host``,
    ``assignment``, ``group_instance_id`` and ``target_assignment`` (KIP-848 groups)."""

    def __init__(self, member_id: str, client_id: str, host: str,
                 assignment: MemberAssignment, group_instance_id: Optional[str] = None,
                 target_assignment: Optional[MemberAssignment] = None) -> None:
        self.member_id = member_id
        self.client_id = client_id
        self.host = host
        self.assignment = assignment
        self.target_assignment = target_assignment
        self.group_instance_id = group_instance_id

    def __repr__(self) -> str:
        return f"MemberDescription(member_id={self.member_id!r}, client_id={self.client_id!r})"


class ConsumerGroupDescription:
    """``describe_consumer_groups()``'s answer for one group: ``group_id``,
    ``is_simple_consumer_group``, ``members``, ``partition_assignor``, ``state``,
    ``coordinator`` (a :class:`~kafka_client.Node`), ``authorized_operations`` (when
    asked for) and ``type``."""

    def __init__(self, group_id: str, is_simple_consumer_group: bool,
                 members: List[MemberDescription], partition_assignor: str,
                 state: Union[ConsumerGroupState, str, int, None], coordinator: Node,
                 authorized_operations: Optional[Sequence[Union[AclOperation, str, int]]] = None,
                 type: Union[ConsumerGroupType, str, int] = ConsumerGroupType.UNKNOWN) -> None:
        self.group_id = group_id
        self.is_simple_consumer_group = is_simple_consumer_group
        self.members = members
        self.authorized_operations = to_operations(authorized_operations)
        self.partition_assignor = partition_assignor
        self.state = _optional(state, ConsumerGroupState)
        self.type = _optional(type, ConsumerGroupType)
        self.coordinator = coordinator

    def __repr__(self) -> str:
        return (f"ConsumerGroupDescription(group_id={self.group_id!r}, state={self.state}, "
                f"members={len(self.members)})")


class ShareMemberDescription:
    """One member of a described share group (KIP-932): ``member_id``, ``client_id``,
    ``host``, ``assignment`` (the partitions whose records it is given: several members
    may share one), ``member_epoch`` and ``rack_id``."""

    def __init__(self, member_id: str, client_id: str, host: str,
                 assignment: MemberAssignment, member_epoch: int = -1,
                 rack_id: Optional[str] = None) -> None:
        self.member_id = member_id
        self.client_id = client_id
        self.host = host
        self.assignment = assignment
        self.member_epoch = member_epoch
        self.rack_id = rack_id

    def __repr__(self) -> str:
        return (f"ShareMemberDescription(member_id={self.member_id!r}, "
                f"client_id={self.client_id!r})")


class ShareGroupDescription:
    """``describe_share_groups()``'s answer for one share group: ``group_id``,
    ``members`` (:class:`ShareMemberDescription`), ``state`` (EMPTY or STABLE),
    ``coordinator`` (a :class:`~kafka_client.Node`), ``group_epoch``,
    ``target_assignment_epoch``, ``partition_assignor`` and ``authorized_operations``
    (when asked for)."""

    def __init__(self, group_id: str, members: List[ShareMemberDescription],
                 state: Union[ConsumerGroupState, str, int, None], coordinator: Node,
                 group_epoch: int = -1, target_assignment_epoch: int = -1,
                 partition_assignor: str = "",
                 authorized_operations: Optional[Sequence[Union[AclOperation, str, int]]] = None
                 ) -> None:
        self.group_id = group_id
        self.members = members
        self.state = _optional(state, ConsumerGroupState)
        self.coordinator = coordinator
        self.group_epoch = group_epoch
        self.target_assignment_epoch = target_assignment_epoch
        self.partition_assignor = partition_assignor
        self.authorized_operations = to_operations(authorized_operations)
        self.type = ConsumerGroupType.SHARE

    def __repr__(self) -> str:
        return (f"ShareGroupDescription(group_id={self.group_id!r}, state={self.state}, "
                f"members={len(self.members)})")


class GroupMember:
    """One member of a group in ``list_groups()``: ``id``, ``client_id``,
    ``client_host``, and the ``metadata`` and ``assignment`` bytes as the group's protocol
    encodes them."""

    def __init__(self) -> None:
        self.id: Optional[str] = None
        self.client_id: Optional[str] = None
        self.client_host: Optional[str] = None
        self.metadata: Optional[bytes] = None
        self.assignment: Optional[bytes] = None


class GroupMetadata:
    """One group of the legacy ``list_groups()``: ``broker`` (the coordinator, a
    :class:`~kafka_client.admin.BrokerMetadata`), ``id``, ``error`` (a KafkaError or
    None), ``state``, ``protocol_type`` and ``protocol`` (as the broker spells them) and
    ``members`` (:class:`GroupMember`)."""

    def __init__(self) -> None:
        self.broker: Optional[BrokerMetadata] = None
        self.id: Optional[str] = None
        self.error: Optional[KafkaError] = None
        self.state: Optional[str] = None
        self.protocol_type: Optional[str] = None
        self.protocol: Optional[str] = None
        self.members: List[GroupMember] = []

    def __repr__(self) -> str:
        if self.error is not None:
            return f"GroupMetadata({self.id}, {self.error})"
        return f"GroupMetadata({self.id})"

    def __str__(self) -> str:
        return str(self.id)
