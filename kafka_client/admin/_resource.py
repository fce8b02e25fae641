"""Resource kinds and pattern types shared by configs and ACLs, and the enum conversion
the admin value types use (enum member, its name as a string, or its number)."""
from __future__ import annotations

import enum
from typing import Any, Type, TypeVar

from kafka_client._model import _OrderedEnum
from kafka_proto.enums import AclPatternType, AclResourceType

__all__ = ["ResourceType", "ResourcePatternType", "to_enum"]

E = TypeVar("E", bound=enum.Enum)


class ResourceType(_OrderedEnum):
    """A kind of Kafka resource (the numbers are the ACL resource types on the wire;
    BROKER is the cluster resource there)."""

    UNKNOWN = AclResourceType.UNKNOWN.value
    ANY = AclResourceType.ANY.value
    TOPIC = AclResourceType.TOPIC.value
    GROUP = AclResourceType.GROUP.value
    BROKER = AclResourceType.CLUSTER.value
    TRANSACTIONAL_ID = AclResourceType.TRANSACTIONAL_ID.value


class ResourcePatternType(_OrderedEnum):
    """How an ACL's resource name matches: exactly (LITERAL), as a prefix (PREFIXED); in
    filters also ANY (any pattern) and MATCH (every binding that would apply to the
    name)."""

    UNKNOWN = AclPatternType.UNKNOWN.value
    ANY = AclPatternType.ANY.value
    MATCH = AclPatternType.MATCH.value
    LITERAL = AclPatternType.LITERAL.value
    PREFIXED = AclPatternType.PREFIXED.value


def to_enum(value: Any, enum_cls: Type[E]) -> E:
    """``value`` as a member of ``enum_cls``: a member, a member name (any case) or a
    member value. ValueError for a name or number that is not one; TypeError for anything
    else."""
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, str):
        try:
            return enum_cls[value.upper()]
        except KeyError:
            raise ValueError(f"Unknown value \"{value}\": should be a {enum_cls.__name__}")
    if isinstance(value, int) and not isinstance(value, bool):
        return enum_cls(value)  # ValueError for a number that is not a member
    raise TypeError(f"Unknown value \"{value}\": should be a {enum_cls.__name__}")


def enum_or_unknown(enum_cls: Type[E], value: int) -> E:
    """The member numbered ``value`` (as a broker sent it), else the UNKNOWN member."""
    try:
        return enum_cls(value)
    except ValueError:
        return enum_cls["UNKNOWN"]  # type: ignore[misc]
