"""ACL bindings and filters (``create_acls()``, ``describe_acls()``, ``delete_acls()``)."""
from __future__ import annotations

import enum
import functools
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

from kafka_client._model import _OrderedEnum
from kafka_client.admin._resource import ResourcePatternType, ResourceType, to_enum
from kafka_proto import enums as wire

__all__ = ["AclOperation", "AclPermissionType", "AclBinding", "AclBindingFilter", "to_operations"]


class AclOperation(_OrderedEnum):
    """An operation an ACL allows or denies (ANY only in filters)."""

    UNKNOWN = wire.AclOperation.UNKNOWN.value
    ANY = wire.AclOperation.ANY.value
    ALL = wire.AclOperation.ALL.value
    READ = wire.AclOperation.READ.value
    WRITE = wire.AclOperation.WRITE.value
    CREATE = wire.AclOperation.CREATE.value
    DELETE = wire.AclOperation.DELETE.value
    ALTER = wire.AclOperation.ALTER.value
    DESCRIBE = wire.AclOperation.DESCRIBE.value
    CLUSTER_ACTION = wire.AclOperation.CLUSTER_ACTION.value
    DESCRIBE_CONFIGS = wire.AclOperation.DESCRIBE_CONFIGS.value
    ALTER_CONFIGS = wire.AclOperation.ALTER_CONFIGS.value
    IDEMPOTENT_WRITE = wire.AclOperation.IDEMPOTENT_WRITE.value


class AclPermissionType(_OrderedEnum):
    """Whether an ACL allows or denies (ANY only in filters)."""

    UNKNOWN = wire.AclPermissionType.UNKNOWN.value
    ANY = wire.AclPermissionType.ANY.value
    DENY = wire.AclPermissionType.DENY.value
    ALLOW = wire.AclPermissionType.ALLOW.value


def to_operations(ops: Optional[Sequence[Union[AclOperation, str, int]]]
                  ) -> Optional[List[AclOperation]]:
    """Authorized operations as :class:`AclOperation` members (None when not given)."""
    return [to_enum(op, AclOperation) for op in ops] if ops else None


_FIELDS = ("restype", "name", "resource_pattern_type", "principal", "host", "operation",
           "permission_type")
_ENUMS = {"restype": ResourceType, "resource_pattern_type": ResourcePatternType,
          "operation": AclOperation, "permission_type": AclPermissionType}


@functools.total_ordering
class AclBinding:
    """One ACL: ``AclBinding(restype, name, resource_pattern_type, principal, host,
    operation, permission_type)``, e.g. ``AclBinding(ResourceType.TOPIC, "orders",
    ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
    AclPermissionType.ALLOW)``.

    The enum arguments also accept their names or numbers. ValueError for a missing
    value or a filter-only enum (ANY, MATCH); TypeError for a non-string name, principal
    or host.
    """

    #: arguments that may not be None
    _required: Tuple[str, ...] = _FIELDS
    #: enum values refused in this class
    _forbidden: Dict[str, Tuple[enum.Enum, ...]] = {
        "restype": (ResourceType.ANY,),
        "resource_pattern_type": (ResourcePatternType.ANY, ResourcePatternType.MATCH),
        "operation": (AclOperation.ANY,),
        "permission_type": (AclPermissionType.ANY,),
    }

    def __init__(self, restype: Union[ResourceType, str, int], name: str,
                 resource_pattern_type: Union[ResourcePatternType, str, int],
                 principal: str, host: str, operation: Union[AclOperation, str, int],
                 permission_type: Union[AclPermissionType, str, int]) -> None:
        given: Dict[str, Any] = dict(
            restype=restype, name=name, resource_pattern_type=resource_pattern_type,
            principal=principal, host=host, operation=operation,
            permission_type=permission_type)
        for field in self._required:
            if given[field] is None:
                raise ValueError(f"Expected {field} to be not None")
        for field in ("name", "principal", "host"):
            if given[field] is not None and not isinstance(given[field], str):
                raise TypeError(f"Expected {field} to be a string")
        for field, cls in _ENUMS.items():
            given[field] = to_enum(given[field], cls)
            if given[field] in self._forbidden[field]:
                raise ValueError(f"Cannot use enum {field}, value {given[field].name} in "
                                 f"this class")
        self.restype: ResourceType = given["restype"]
        self.name = name
        self.resource_pattern_type: ResourcePatternType = given["resource_pattern_type"]
        self.principal = principal
        self.host = host
        self.operation: AclOperation = given["operation"]
        self.permission_type: AclPermissionType = given["permission_type"]
        self.restype_int = self.restype.value
        self.resource_pattern_type_int = self.resource_pattern_type.value
        self.operation_int = self.operation.value
        self.permission_type_int = self.permission_type.value

    def _to_tuple(self) -> Tuple[Any, ...]:
        return tuple(getattr(self, f) for f in _FIELDS)

    def _sort_key(self) -> Tuple[Any, ...]:
        return tuple((getattr(v, "value", v) if v is not None else "") for v in
                     self._to_tuple())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({','.join(str(v) for v in self._to_tuple())})"

    def __hash__(self) -> int:
        return hash(self._to_tuple())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AclBinding):
            return NotImplemented
        return self._to_tuple() == other._to_tuple()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, AclBinding):
            return NotImplemented
        return self._sort_key() < other._sort_key()


class AclBindingFilter(AclBinding):
    """A pattern over ACL bindings, for ``describe_acls()`` and ``delete_acls()``: None
    strings match anything, as do the ANY enum values; ResourcePatternType.MATCH matches
    every binding that applies to the name (literal, wildcard and prefixed)."""

    _required = ("restype", "resource_pattern_type", "operation", "permission_type")
    _forbidden = {
        "restype": (ResourceType.UNKNOWN,),
        "resource_pattern_type": (ResourcePatternType.UNKNOWN,),
        "operation": (AclOperation.UNKNOWN,),
        "permission_type": (AclPermissionType.UNKNOWN,),
    }

    if TYPE_CHECKING:
        # AclBinding's constructor, with the None strings a filter takes, for checkers
        def __init__(self, restype: Union[ResourceType, str, int], name: Optional[str],
                     resource_pattern_type: Union[ResourcePatternType, str, int],
                     principal: Optional[str], host: Optional[str],
                     operation: Union[AclOperation, str, int],
                     permission_type: Union[AclPermissionType, str, int]) -> None: ...

