"""ACLs: the cluster's ACL store (owned by the controller), Kafka's authorizer rules, and
the CreateAcls, DescribeAcls and DeleteAcls handlers.

The rules are those of Kafka's StandardAuthorizer: super users pass; with the broker
property ``allow.everyone.if.no.acl.found`` true (default false) a resource no ACL
applies to (to any principal) passes; an ACL applies to a resource when its pattern
does (a LITERAL name equal to the resource's, the LITERAL wildcard ``*``, or a PREFIXED
name the resource's name starts with), to a principal when it names it or ``User:*``, and to a
host when it names the client's address or ``*``. A DENY of the operation (or of ALL)
wins; otherwise an ALLOW of it, of ALL, or of an operation that implies it (READ, WRITE,
DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) lets the
request through; with neither, it is refused.

Without an authorizer (the default) every request passes and the ACL APIs answer
SECURITY_DISABLED, as a Kafka broker without ``authorizer.class.name`` does.
"""
from __future__ import annotations

from typing import (
    TYPE_CHECKING, Any, Dict, FrozenSet, Iterable, Iterator, List, NamedTuple, Optional,
    Sequence, Tuple,
)

from kafka_proto.enums import AclOperation, AclPatternType, AclPermissionType, AclResourceType
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    ApiKey,
    CreateAclsResponse,
    DeleteAclsResponse,
    DescribeAclsResponse,
)

from ._api import RequestContext, error_answer, handles, validates

if TYPE_CHECKING:  # pragma: no cover
    from ._broker import ClientConnection

__all__ = ["Acl", "AclFilter", "AclStore", "Authorizer", "CLUSTER_NAME", "ANONYMOUS",
           "SUPPORTED_OPERATIONS"]


#: The only name of the CLUSTER resource.
CLUSTER_NAME = "kafka-cluster"
#: The principal of a connection without SASL.
ANONYMOUS = "User:ANONYMOUS"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

_T, _O = AclResourceType, AclOperation
#: The operations Kafka's ACLs know per resource type (AclEntry.supportedOperations):
#: what KIP-430's authorized operations are computed over.
SUPPORTED_OPERATIONS: Dict[AclResourceType, Tuple[AclOperation, ...]] = {
    _T.TOPIC: (_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
               _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    _T.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    _T.CLUSTER: (_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                 _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE),
    _T.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE),
    _T.DELEGATION_TOKEN: (_O.DESCRIBE,),
    _T.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}

#: An ALLOW of one of these allows the key too (Kafka's implied operations).
_ALLOWED_BY: Dict[AclOperation, FrozenSet[AclOperation]] = {
    _O.DESCRIBE: frozenset((_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER)),
    _O.DESCRIBE_CONFIGS: frozenset((_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS)),
}


def _enum(cls: Any, value: int) -> Any:
    try:
        return cls(value)
    except ValueError:
        return cls.UNKNOWN


class Acl(NamedTuple):
    """One stored ACL binding."""

    resource_type: AclResourceType
    name: str
    pattern_type: AclPatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def applies_to(self, resource_type: AclResourceType, name: str) -> bool:
        """Whether this ACL's pattern covers the resource."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == AclPatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        return name.startswith(self.name)   # PREFIXED

    def as_dict(self) -> Dict[str, Any]:
        return {"resource_type": self.resource_type.name, "name": self.name,
                "pattern_type": self.pattern_type.name, "principal": self.principal,
                "host": self.host, "operation": self.operation.name,
                "permission": self.permission.name}


class AclFilter(NamedTuple):
    """A DescribeAcls/DeleteAcls filter: None strings and the ANY values match anything;
    the MATCH pattern type matches every ACL that applies to the name."""

    resource_type: AclResourceType
    name: Optional[str]
    pattern_type: AclPatternType
    principal: Optional[str]
    host: Optional[str]
    operation: AclOperation
    permission: AclPermissionType

    def unknown_part(self) -> Optional[str]:
        """What Kafka refuses a filter for (INVALID_REQUEST), if anything."""
        if self.resource_type == AclResourceType.UNKNOWN or \
                self.pattern_type == AclPatternType.UNKNOWN:
            return "Unknown patternFilter."
        if self.operation == AclOperation.UNKNOWN or \
                self.permission == AclPermissionType.UNKNOWN:
            return "Unknown entryFilter."
        return None

    def matches(self, acl: Acl) -> bool:
        if self.resource_type != AclResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        if self.pattern_type not in (AclPatternType.ANY, AclPatternType.MATCH) and \
                self.pattern_type != acl.pattern_type:
            return False
        if self.name is not None:
            if self.pattern_type in (AclPatternType.ANY, acl.pattern_type):
                if self.name != acl.name:
                    return False
            elif acl.pattern_type == AclPatternType.LITERAL:   # MATCH
                if acl.name not in (self.name, WILDCARD):
                    return False
            elif not self.name.startswith(acl.name):          # MATCH, PREFIXED
                return False
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and self.operation in (AclOperation.ANY, acl.operation)
                and self.permission in (AclPermissionType.ANY, acl.permission))


class AclError(Exception):
    """An ACL creation or a filter refused: its Kafka error code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _check_new_acl(acl: Acl) -> None:
    """Kafka's checks of a binding to create, each refused with INVALID_REQUEST: the
    broker's (the cluster's name, an empty name), then the controller's."""
    if acl.resource_type == AclResourceType.CLUSTER and acl.name != CLUSTER_NAME:
        raise AclError(ErrorCode.INVALID_REQUEST,
                       f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not acl.name:
        raise AclError(ErrorCode.INVALID_REQUEST, "Invalid empty resource name")
    if acl.resource_type in (AclResourceType.UNKNOWN, AclResourceType.ANY):
        raise AclError(ErrorCode.INVALID_REQUEST,
                       f"Invalid resourceType {acl.resource_type.name}")
    if acl.pattern_type not in (AclPatternType.LITERAL, AclPatternType.PREFIXED):
        raise AclError(ErrorCode.INVALID_REQUEST, f"Invalid patternType {acl.pattern_type.name}")
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise AclError(ErrorCode.INVALID_REQUEST, f"Invalid operation {acl.operation.name}")
    if acl.permission not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        raise AclError(ErrorCode.INVALID_REQUEST,
                       f"Invalid permissionType {acl.permission.name}")
    if ":" not in acl.principal:
        raise AclError(ErrorCode.INVALID_REQUEST,
                       f"Could not parse principal from `{acl.principal}` (no colon is "
                       "present separating the principal type from the principal name)")


class AclStore:
    """Every ACL of the cluster, in creation order (the controller's; it survives broker
    stops as the cluster's metadata does)."""

    def __init__(self) -> None:
        self._acls: Dict[Acl, None] = {}

    def __len__(self) -> int:
        return len(self._acls)

    def __iter__(self) -> Iterator[Acl]:
        return iter(list(self._acls))   # a copy: callers may create or delete meanwhile

    def create(self, acl: Acl) -> None:
        """Store a binding (AclError if Kafka would refuse it); one stored already is
        left as it is, as Kafka does."""
        _check_new_acl(acl)
        self._acls.setdefault(acl, None)

    def matching(self, acl_filter: AclFilter) -> List[Acl]:
        unknown = acl_filter.unknown_part()
        if unknown is not None:
            raise AclError(ErrorCode.INVALID_REQUEST, unknown)
        return [acl for acl in self._acls if acl_filter.matches(acl)]

    def delete(self, filters: Sequence[AclFilter]) -> List[Any]:
        """Per filter, the ACLs it matched (all deleted), or the AclError refusing it."""
        results: List[Any] = []
        for acl_filter in filters:
            try:
                results.append(self.matching(acl_filter))
            except AclError as exc:
                results.append(exc)
        for found in results:
            if not isinstance(found, AclError):
                for acl in found:
                    self._acls.pop(acl, None)
        return results

    def applicable(self, resource_type: AclResourceType, name: str) -> List[Acl]:
        return [acl for acl in self._acls if acl.applies_to(resource_type, name)]


class Authorizer:
    """Kafka's authorization decision over an :class:`AclStore` (see the module
    docstring). ``enabled`` False: everything passes."""

    def __init__(self, store: AclStore, enabled: bool = False,
                 super_users: Iterable[str] = (), allow_everyone: bool = False) -> None:
        self.store = store
        self.enabled = enabled
        self.super_users = frozenset(super_users)
        #: allow.everyone.if.no.acl.found: a resource no ACL applies to is everyone's
        self.allow_everyone = allow_everyone

    @staticmethod
    def principal(conn: "ClientConnection") -> str:
        return conn.principal or ANONYMOUS

    def authorize(self, conn: "ClientConnection", operation: AclOperation,
                  resource_type: AclResourceType, name: str) -> bool:
        if not self.enabled or conn.internal:
            return True   # followers' connections are the brokers' own
        return self.decide(self.principal(conn), conn.peer[0], operation, resource_type, name)

    def decide(self, principal: str, host: str, operation: AclOperation,
               resource_type: AclResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        applicable = self.store.applicable(resource_type, name)
        if not applicable and self.allow_everyone:
            return True
        allowing = _ALLOWED_BY.get(operation, frozenset((operation,)))
        allowed = False
        for acl in applicable:
            if acl.principal not in (principal, WILDCARD_PRINCIPAL) or \
                    acl.host not in (host, WILDCARD):
                continue
            if acl.permission == AclPermissionType.DENY:
                if acl.operation in (operation, AclOperation.ALL):
                    return False
            elif acl.operation == AclOperation.ALL or acl.operation in allowing:
                allowed = True
        return allowed

    def authorize_any(self, conn: "ClientConnection", operation: AclOperation,
                      resource_type: AclResourceType) -> bool:
        """Kafka's authorizeByResourceType: whether some resource of the type allows the
        operation. The principal's ACLs of the operation (or ALL) count, no implied
        operations: a DENY of the wildcard refuses; an ALLOW of the wildcard allows; else
        an ALLOWed literal name that no DENY names and no DENYed prefix covers, or an
        ALLOWed prefix that no DENYed prefix covers, allows."""
        if not self.enabled or conn.internal:
            return True
        principal, host = self.principal(conn), conn.peer[0]
        if principal in self.super_users:
            return True
        # Kafka's first check: the operation on a resource of the type named "hardcode"
        # (so allow.everyone.if.no.acl.found lets through when no ACL covers that name).
        if self.allow_everyone and not self.store.applicable(resource_type, "hardcode"):
            return True
        allowed: List[Acl] = []
        denied_names, denied_prefixes = set(), []
        for acl in self.store:
            if acl.resource_type != resource_type or \
                    acl.principal not in (principal, WILDCARD_PRINCIPAL) or \
                    acl.host not in (host, WILDCARD) or \
                    acl.operation not in (operation, AclOperation.ALL):
                continue
            literal = acl.pattern_type == AclPatternType.LITERAL
            if acl.permission == AclPermissionType.DENY:
                if literal and acl.name == WILDCARD:
                    return False
                if literal:
                    denied_names.add(acl.name)
                else:
                    denied_prefixes.append(acl.name)
            else:
                allowed.append(acl)
        if any(a.pattern_type == AclPatternType.LITERAL and a.name == WILDCARD
               for a in allowed):
            return True
        return any(not (a.pattern_type == AclPatternType.LITERAL and a.name in denied_names)
                   and not any(a.name.startswith(prefix) for prefix in denied_prefixes)
                   for a in allowed)

    def authorized_operations(self, conn: "ClientConnection",
                              resource_type: AclResourceType, name: str) -> int:
        """KIP-430: the bit field of the resource type's operations this connection may
        perform on the resource (all of them without an authorizer)."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[resource_type]:
            if self.authorize(conn, op, resource_type, name):
                bits |= 1 << op
        return bits


# --------------------------------------------------------------------------- the ACL APIs

NO_AUTHORIZER = "No Authorizer is configured."


def _authorizer(ctx: RequestContext) -> Authorizer:
    return ctx.server.authorizer


def _refusal(ctx: RequestContext, operation: AclOperation) -> Optional[Tuple[int, str]]:
    """Why the ACL call is refused as a whole, if it is: no authorizer, or the
    principal may not ``operation`` the cluster."""
    authorizer = _authorizer(ctx)
    if not authorizer.enabled:
        return ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER
    if not authorizer.authorize(ctx.conn, operation, AclResourceType.CLUSTER, CLUSTER_NAME):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    return None


def _pattern_type(ctx: RequestContext, value: int) -> AclPatternType:
    # Before v1 every ACL is literal (the field is not on the wire).
    return _enum(AclPatternType, value) if ctx.version >= 1 else AclPatternType.LITERAL


def _unknown(resource_type: int, pattern_type: int, operation: int, permission: int) -> bool:
    """Whether a binding or filter has an UNKNOWN part (a code Kafka does not know reads
    as UNKNOWN)."""
    return (_enum(AclResourceType, resource_type) == AclResourceType.UNKNOWN
            or _enum(AclPatternType, pattern_type) == AclPatternType.UNKNOWN
            or _enum(AclOperation, operation) == AclOperation.UNKNOWN
            or _enum(AclPermissionType, permission) == AclPermissionType.UNKNOWN)


@validates(ApiKey.CREATE_ACLS)
def check_create_acls(request: Any, version: int) -> Optional[str]:
    """Kafka's CreateAclsRequest refuses, while it parses, a creation with an UNKNOWN
    part (ANY and MATCH are the controller's to refuse, creation by creation)."""
    if any(_unknown(c.resource_type, c.resource_pattern_type, c.operation, c.permission_type)
           for c in request.creations):
        return "CreatableAcls contain unknown elements"
    return None


@validates(ApiKey.DESCRIBE_ACLS)
def check_describe_acls(request: Any, version: int) -> Optional[str]:
    if _unknown(request.resource_type_filter, request.pattern_type_filter, request.operation,
                request.permission_type):
        return "DescribeAclsRequest contains UNKNOWN elements"
    return None


@validates(ApiKey.DELETE_ACLS)
def check_delete_acls(request: Any, version: int) -> Optional[str]:
    if any(_unknown(f.resource_type_filter, f.pattern_type_filter, f.operation,
                    f.permission_type) for f in request.filters):
        return "Filters contain UNKNOWN elements"
    return None


@error_answer(ApiKey.CREATE_ACLS)
def create_acls_error(request: Any, version: int, code: int) -> Any:
    return CreateAclsResponse(results=[CreateAclsResponse.AclCreationResult(error_code=code)
                                       for _ in request.creations])


@handles(ApiKey.CREATE_ACLS)
def create_acls(ctx: RequestContext) -> None:
    R = CreateAclsResponse
    refused = _refusal(ctx, AclOperation.ALTER)
    if refused is not None:
        ctx.respond(R(results=[R.AclCreationResult(error_code=refused[0],
                                                   error_message=refused[1])
                               for _ in ctx.request.creations]))
        return
    store = ctx.server.controller.acls
    results = []
    for c in ctx.request.creations:
        acl = Acl(_enum(AclResourceType, c.resource_type), c.resource_name,
                  _pattern_type(ctx, c.resource_pattern_type), c.principal, c.host,
                  _enum(AclOperation, c.operation), _enum(AclPermissionType, c.permission_type))
        try:
            store.create(acl)
            results.append(R.AclCreationResult(error_code=ErrorCode.NONE))
        except AclError as exc:
            results.append(R.AclCreationResult(error_code=exc.code, error_message=exc.message))
    ctx.note(acls=len(store))
    ctx.respond(R(results=results))


def _filter(ctx: RequestContext, f: Any) -> AclFilter:
    return AclFilter(_enum(AclResourceType, f.resource_type_filter), f.resource_name_filter,
                     _pattern_type(ctx, f.pattern_type_filter), f.principal_filter,
                     f.host_filter, _enum(AclOperation, f.operation),
                     _enum(AclPermissionType, f.permission_type))


@error_answer(ApiKey.DESCRIBE_ACLS)
def describe_acls_error(request: Any, version: int, code: int) -> Any:
    return DescribeAclsResponse(error_code=code, resources=[])


@handles(ApiKey.DESCRIBE_ACLS)
def describe_acls(ctx: RequestContext) -> None:
    R = DescribeAclsResponse
    refused = _refusal(ctx, AclOperation.DESCRIBE)
    if refused is not None:
        ctx.respond(R(error_code=refused[0], error_message=refused[1], resources=[]))
        return
    try:
        found = ctx.server.controller.acls.matching(_filter(ctx, ctx.request))
    except AclError as exc:
        ctx.respond(R(error_code=exc.code, error_message=exc.message, resources=[]))
        return
    by_resource: Dict[Tuple[int, str, int], List[Any]] = {}
    for acl in found:
        by_resource.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(
            R.AclDescription(principal=acl.principal, host=acl.host,
                             operation=acl.operation, permission_type=acl.permission))
    ctx.respond(R(error_code=ErrorCode.NONE, resources=[
        R.DescribeAclsResource(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
        for (t, n, p), acls in by_resource.items()]))


@error_answer(ApiKey.DELETE_ACLS)
def delete_acls_error(request: Any, version: int, code: int) -> Any:
    return DeleteAclsResponse(filter_results=[
        DeleteAclsResponse.DeleteAclsFilterResult(error_code=code) for _ in request.filters])


@handles(ApiKey.DELETE_ACLS)
def delete_acls(ctx: RequestContext) -> None:
    R = DeleteAclsResponse
    refused = _refusal(ctx, AclOperation.ALTER)
    if refused is not None:
        ctx.respond(R(filter_results=[R.DeleteAclsFilterResult(
            error_code=refused[0], error_message=refused[1]) for _ in ctx.request.filters]))
        return
    store = ctx.server.controller.acls
    results = []
    for outcome in store.delete([_filter(ctx, f) for f in ctx.request.filters]):
        if isinstance(outcome, AclError):
            results.append(R.DeleteAclsFilterResult(error_code=outcome.code,
                                                    error_message=outcome.message))
            continue
        results.append(R.DeleteAclsFilterResult(error_code=ErrorCode.NONE, matching_acls=[
            R.DeleteAclsMatchingAcl(error_code=ErrorCode.NONE, resource_type=a.resource_type,
                                    resource_name=a.name, pattern_type=a.pattern_type,
                                    principal=a.principal, host=a.host,
                                    operation=a.operation, permission_type=a.permission)
            for a in outcome]))
    ctx.note(acls=len(store))
    ctx.respond(R(filter_results=results))
