"""The registry of request handlers, the versions the cluster serves, and the request
context handlers are given.

A handler module registers ``@handles(ApiKey.X)`` for its function ``f(ctx)``, which
answers through ``ctx.respond(response)`` at once or later (a produce waiting for its
replicas, a long-polling fetch, a group join), or ``ctx.no_response()`` (acks=0). A
module may also register ``@error_answer(ApiKey.X)``: ``g(request, version, code)``
builds the answer carrying ``code`` everywhere, for injected errors; and
``@validates(ApiKey.X)``: ``v(request, version)`` says why Kafka's request class would
refuse to parse the request (the connection is then closed), or None.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, TypeVar

from kafka_proto.enums import AclOperation, AclResourceType
from kafka_proto.framing import RequestHead
from kafka_proto.messages import API_KEYS, ApiKey, ApiVersionsResponse

if TYPE_CHECKING:  # pragma: no cover
    from ._broker import Broker, ClientConnection

__all__ = ["RequestContext", "HANDLERS", "ERROR_ANSWERS", "VALIDATORS", "SUPPORTED_VERSIONS",
           "handles", "error_answer", "validates", "served_api_versions", "LEGACY_FLOORS",
           "supported_versions"]

Handler = Callable[["RequestContext"], None]
ErrorAnswer = Callable[[Any, int, int], Any]
# An error answer keeps its own signature (some take an error message too).
_AnyErrorAnswer = TypeVar("_AnyErrorAnswer", bound=ErrorAnswer)
Validator = Callable[[Any, int], Optional[str]]

_log = logging.getLogger("kafka_client.testing")

HANDLERS: Dict[int, Handler] = {}
ERROR_ANSWERS: Dict[int, ErrorAnswer] = {}
#: The checks Kafka's request classes make while a request is parsed: a request one
#: refuses does not parse, and the broker closes the connection.
VALIDATORS: Dict[int, Validator] = {}

#: API key -> (lowest, highest) version the cluster serves (Kafka 4.0's floors: the
#: versions Kafka 4 removed are answered as Kafka 4 answers them).
SUPPORTED_VERSIONS: Dict[int, Tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 11),
    ApiKey.FETCH: (4, 17),
    ApiKey.LIST_OFFSETS: (1, 10),
    ApiKey.METADATA: (0, 12),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 0),
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: (0, 0),
    ApiKey.PUSH_TELEMETRY: (0, 0),
    # KIP-932 as Kafka 4.1 serves it: version 1 only (its early-access v0 went).
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    ApiKey.SHARE_FETCH: (1, 1),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 1),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
}

#: The lowest versions a Kafka 3.x broker serves of the APIs whose floors Kafka 4 raised
#: (KIP-896), served instead of SUPPORTED_VERSIONS' with the broker property
#: ``legacy.api.versions.enable``: a cluster that stands for a broker of Kafka 0.10-2.0.
LEGACY_FLOORS: Dict[int, int] = {
    ApiKey.PRODUCE: 0,                  # below v3 legacy message sets, stored as v2 batches
    ApiKey.FETCH: 0,                    # below v4 answered with down-converted message sets
    ApiKey.LIST_OFFSETS: 0,
    ApiKey.OFFSET_COMMIT: 0,
    ApiKey.OFFSET_FETCH: 0,
    ApiKey.CREATE_TOPICS: 0,
    ApiKey.DELETE_TOPICS: 0,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 0,
    ApiKey.DESCRIBE_CONFIGS: 0,
}


def supported_versions(legacy: bool = False) -> Dict[int, Tuple[int, int]]:
    """API key -> (lowest, highest) version served: SUPPORTED_VERSIONS, with the floors of
    LEGACY_FLOORS when ``legacy`` (the broker property ``legacy.api.versions.enable``)."""
    if not legacy:
        return SUPPORTED_VERSIONS
    return {key: (min(lo, LEGACY_FLOORS.get(key, lo)), hi)
            for key, (lo, hi) in SUPPORTED_VERSIONS.items()}


def served_api_versions(legacy: bool = False) -> List[Any]:
    """The ApiVersions response's ranges: every API with a handler (``legacy``: see
    :func:`supported_versions`)."""
    return [ApiVersionsResponse.ApiVersion(api_key=key, min_version=lo,
                                           max_version=min(hi, API_KEYS[key].max_version))
            for key, (lo, hi) in sorted(supported_versions(legacy).items())
            if key in HANDLERS]


def handles(api_key: int) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[api_key] = fn
        return fn
    return register


def validates(api_key: int) -> Callable[[Validator], Validator]:
    """Register ``v(request, version)``: why Kafka would not parse the request, or None."""
    def register(fn: Validator) -> Validator:
        VALIDATORS[api_key] = fn
        return fn
    return register


def error_answer(api_key: int) -> Callable[[_AnyErrorAnswer], _AnyErrorAnswer]:
    def register(fn: _AnyErrorAnswer) -> _AnyErrorAnswer:
        ERROR_ANSWERS[api_key] = fn
        return fn
    return register


class RequestContext:
    """One request being served: who sent it, what it is, and how to answer."""

    __slots__ = ("broker", "conn", "head", "request", "received", "log_entry", "answered",
                 "replace_error", "__weakref__")

    def __init__(self, broker: "Broker", conn: "ClientConnection", head: RequestHead,
                 request: Any, log_entry: Optional[Dict[str, Any]]) -> None:
        self.broker = broker
        self.conn = conn
        self.head = head
        self.request = request
        self.received = time.monotonic()
        self.log_entry = log_entry
        self.answered = False
        #: An injected error that replaces the answer once the request was executed.
        self.replace_error: Optional[int] = None

    @property
    def api_key(self) -> int:
        return self.head.api_key

    @property
    def version(self) -> int:
        return self.head.api_version

    @property
    def server(self):
        return self.broker.server

    def respond(self, response: Any, regions: Optional[List[Any]] = None) -> None:
        """Send the response (``regions``: file ranges standing in for the placeholder
        records buffers of a Fetch response, in order)."""
        if self.answered:
            return
        self.answered = True
        if self.replace_error is not None:
            response = ERROR_ANSWERS[self.api_key](self.request, self.version,
                                                   self.replace_error)
            regions = None
        try:
            self.broker.send_response(self, response, regions)
        except Exception as exc:
            # A response we cannot encode is our bug; the client must not hang on it.
            _log.exception("broker %d: cannot answer %s v%d", self.broker.broker_id,
                           type(self.request).__name__, self.version)
            self.note(handler_error=f"{type(exc).__name__}: {exc}")
            self.conn.close("internal error while answering")

    def no_response(self) -> None:
        if self.answered:
            return
        self.answered = True
        self.broker.finish_without_response(self)

    def allowed(self, operation: AclOperation, resource_type: AclResourceType,
                name: str) -> bool:
        """Whether the connection's principal may perform ``operation`` on the resource:
        always without an authorizer. A check that fails is noted in the request log
        (``denied``: ``"READ TOPIC:orders"``)."""
        allowed = self.broker.server.authorizer.authorize(self.conn, operation,
                                                          resource_type, name)
        if not allowed and self.log_entry is not None:
            denied = self.log_entry.setdefault("denied", [])
            what = f"{getattr(operation, 'name', operation)} " \
                   f"{getattr(resource_type, 'name', resource_type)}:{name}"
            if what not in denied:
                denied.append(what)
        return allowed

    def authorized_operations(self, resource_type: AclResourceType, name: str) -> int:
        """KIP-430: the bit field of the operations the principal may perform on the
        resource (every operation of its type without an authorizer)."""
        return self.broker.server.authorizer.authorized_operations(self.conn, resource_type,
                                                                   name)

    def note(self, **details: Any) -> None:
        """Add details to this request's entry in the request log."""
        if self.log_entry is not None:
            self.log_entry.update(details)
