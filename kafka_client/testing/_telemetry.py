"""Client telemetry (KIP-714): GetTelemetrySubscriptions and PushTelemetry.

The cluster holds one subscription for every client (set through the control channel,
:meth:`kafka_client.testing.Cluster.set_telemetry_subscription`; none at start, as a
Kafka broker with no client-metrics resource). Each push is checked as Kafka's broker
checks it (known instance, current subscription id, an accepted compression type, the
size limit, not before the push interval, nothing after a terminating push), decoded
with :mod:`kafka_proto.telemetry`, and recorded as a ``telemetry`` event in the request
log with every metric's points, for tests to assert on.
"""
from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from kafka_proto.compression import CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD
from kafka_proto.compression import decompress
from kafka_proto.errors import ErrorCode, KafkaProtocolError
from kafka_proto.messages import (
    ApiKey, GetTelemetrySubscriptionsResponse, PushTelemetryResponse,
)
from kafka_proto.telemetry import decode_metrics_data

from ._api import RequestContext, error_answer, handles

if TYPE_CHECKING:  # pragma: no cover
    from ._server import ClusterServer

__all__ = ["TelemetrySubscription"]

#: Kafka's broker lists the codecs it accepts in this order of preference.
DEFAULT_COMPRESSION_TYPES = [CODEC_ZSTD, CODEC_LZ4, CODEC_GZIP, CODEC_SNAPPY]
#: A push may come this much before its interval is up (Kafka allows some slack too).
EARLY_PUSH_SLACK = 0.5


class TelemetrySubscription:
    """The cluster's client-metrics subscription and what it knows of each client
    instance (its subscription id and when it may push next)."""

    def __init__(self, server: "ClusterServer") -> None:
        self.server = server
        self.metrics: List[str] = []
        self.push_interval_ms = 300_000
        self.compression_types = list(DEFAULT_COMPRESSION_TYPES)
        self.max_bytes = 1024 * 1024
        self.delta_temporality = True
        self.subscription_id = 1
        # client instance id -> {"subscription_id", "next_push", "terminated"}
        self.clients: Dict[uuid.UUID, Dict[str, Any]] = {}

    def configure(self, metrics: List[str], push_interval_ms: int,
                  compression_types: Optional[List[int]], max_bytes: int,
                  delta_temporality: bool) -> int:
        if push_interval_ms <= 0:
            raise ValueError("push_interval_ms must be positive")
        self.metrics = list(metrics)
        self.push_interval_ms = push_interval_ms
        self.compression_types = list(DEFAULT_COMPRESSION_TYPES if compression_types is None
                                      else compression_types)
        self.max_bytes = max_bytes
        self.delta_temporality = delta_temporality
        self.subscription_id += 1
        return self.subscription_id

    def subscribe(self, ctx: RequestContext) -> None:
        instance = ctx.request.client_instance_id
        assigned = uuid.UUID(int=0)
        if instance.int == 0:
            instance = assigned = uuid.uuid4()
        client = self.clients.setdefault(instance, {"terminated": False})
        client["subscription_id"] = self.subscription_id
        # The first push may follow the subscription at once (the client adds jitter).
        client["next_push"] = time.monotonic()
        ctx.note(client_instance_id=str(instance), subscription_id=self.subscription_id,
                 requested_metrics=list(self.metrics))
        ctx.respond(GetTelemetrySubscriptionsResponse(
            client_instance_id=assigned, subscription_id=self.subscription_id,
            accepted_compression_types=list(self.compression_types),
            push_interval_ms=self.push_interval_ms, telemetry_max_bytes=self.max_bytes,
            delta_temporality=self.delta_temporality, requested_metrics=list(self.metrics)))

    def push(self, ctx: RequestContext) -> None:
        req = ctx.request
        code = self._check(req)
        detail: Dict[str, Any] = {
            "client_instance_id": str(req.client_instance_id),
            "subscription_id": req.subscription_id, "terminating": req.terminating,
            "compression_type": req.compression_type, "payload_bytes": len(req.metrics),
            "error": ErrorCode(code).name if code else None}
        if code == ErrorCode.NONE:
            try:
                resources = decode_metrics_data(
                    decompress(req.compression_type, req.metrics, self.max_bytes * 64)
                    if req.compression_type else req.metrics)
            except KafkaProtocolError as exc:
                code = ErrorCode.INVALID_RECORD
                detail["error"] = "INVALID_RECORD"
                detail["reason"] = str(exc)
            else:
                detail.update(_describe(resources))
        ctx.note(**{k: v for k, v in detail.items() if k in ("error", "terminating")})
        self.server.request_log.add_event(
            ctx.broker.broker_id, "telemetry",
            f"{len(detail.get('metrics', {}))} metrics from {req.client_instance_id}",
            client_id=ctx.head.client_id, **detail)
        ctx.respond(PushTelemetryResponse(error_code=code))

    def _check(self, req: Any) -> int:
        """Kafka's checks of a push, in its order. A push that passes the throttle
        check counts as one (the next may come an interval later) even if a later
        check refuses it; a terminating push marks the instance terminated likewise."""
        if req.client_instance_id.int == 0:
            return ErrorCode.INVALID_REQUEST
        client = self.clients.get(req.client_instance_id)
        if client is None:
            return ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        if client["terminated"]:
            return ErrorCode.INVALID_REQUEST
        now = time.monotonic()
        if not req.terminating and now < client["next_push"] - EARLY_PUSH_SLACK:
            return ErrorCode.THROTTLING_QUOTA_EXCEEDED
        client["next_push"] = now + self.push_interval_ms / 1000
        client["terminated"] = req.terminating
        if req.subscription_id != client["subscription_id"] \
                or req.subscription_id != self.subscription_id:
            return ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        if req.compression_type and req.compression_type not in self.compression_types:
            return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        if len(req.metrics) > self.max_bytes:
            return ErrorCode.TELEMETRY_TOO_LARGE
        return ErrorCode.NONE


def _describe(resources: List[Any]) -> Dict[str, Any]:
    """A push's content as JSON-friendly details: resource attributes, scope, and per
    metric its kind, temporality and points (value, attributes, start and time)."""
    attributes: Dict[str, Any] = {}
    scope: Dict[str, str] = {}
    metrics: Dict[str, Any] = {}
    for resource in resources:
        attributes.update({k: _jsonable(v) for k, v in resource.attributes.items()})
        for block in resource.scopes:
            scope = {"name": block.scope_name, "version": block.scope_version}
            for metric in block.metrics:
                entry = metrics.setdefault(metric.name, {
                    "kind": metric.kind, "monotonic": metric.monotonic,
                    "temporality": metric.temporality, "unit": metric.unit, "points": []})
                entry["points"].extend(
                    {"value": p.value, "attributes": {k: _jsonable(v)
                                                      for k, v in p.attributes.items()},
                     "start_time_unix_nano": p.start_time_unix_nano,
                     "time_unix_nano": p.time_unix_nano}
                    for p in metric.points)
    return {"resource": attributes, "scope": scope, "metrics": metrics}


def _jsonable(value: Any) -> Any:
    return value.hex() if isinstance(value, bytes) else value


@handles(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
def get_telemetry_subscriptions(ctx: RequestContext) -> None:
    ctx.server.telemetry.subscribe(ctx)


@error_answer(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
def _subscriptions_error(request: Any, version: int, code: int) -> Any:
    return GetTelemetrySubscriptionsResponse(error_code=code)


@handles(ApiKey.PUSH_TELEMETRY)
def push_telemetry(ctx: RequestContext) -> None:
    ctx.server.telemetry.push(ctx)


@error_answer(ApiKey.PUSH_TELEMETRY)
def _push_error(request: Any, version: int, code: int) -> Any:
    return PushTelemetryResponse(error_code=code)
