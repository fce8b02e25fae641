"""Client metrics pushed to the brokers (KIP-714), ``enable.metrics.push``.

Once a broker connection that serves GetTelemetrySubscriptions is up, the client asks
for its subscription (the broker assigns the client instance id on the first call).
When the subscription names metrics (prefixes of their names; ``""`` is every metric),
the client pushes them every ``push_interval_ms`` (the first push after a random 0.5 to
1.5 of it, so that clients started together do not push together) as OpenTelemetry
metrics (:mod:`kafka_proto.telemetry`), compressed with the first codec the broker
accepts that this installation has, and a last one marked ``terminating`` when the client
closes. With no metric subscribed it asks again every ``push_interval_ms``. The answers
are handled as Apache Kafka's clients do: a stale subscription or a codec refused asks
for the subscription again at once; a payload the broker calls invalid stops the pushes
for good (logged); other errors retry at the next interval.

The metrics and their names are librdkafka's (checked against librdkafka 2.16 on the test
cluster): a client reports :class:`Sample` s through the sources it registers, and
records latencies into :class:`IntervalStat` s, whose average and maximum are pushed
for each interval. Everything here runs on the I/O thread.
"""
from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from kafka_client._compat import _VERSION
from kafka_client._interval import IntervalStat
from kafka_client.errors import KafkaError
from kafka_proto.compression import compress
from kafka_proto.errors import ErrorCode, KafkaProtocolError
from kafka_proto.messages import ApiKey, GetTelemetrySubscriptionsRequest, PushTelemetryRequest
from kafka_proto.telemetry import (
    GAUGE, SUM, TEMPORALITY_CUMULATIVE, TEMPORALITY_DELTA, DataPoint, Metric,
    ResourceMetrics, ScopeMetrics, encode_metrics_data,
)

__all__ = ["Sample", "Telemetry", "interval_samples", "producer_samples"]

_log = logging.getLogger("kafka_client.telemetry")

#: How often the client looks again for a connection that serves telemetry: while no
#: connection is up, and when the ones up do not serve it (an upgraded broker may).
_LOOK_AGAIN_S = 1.0
_LOOK_AGAIN_UNSERVED_S = 30.0
#: A subscription request that failed is tried again after this long.
_RETRY_S = 5.0
#: How long a closing client waits for the answer to its terminating push.
TERMINATING_WAIT_S = 1.0
_ZERO_ID = uuid.UUID(int=0)

_IDLE, _SUBSCRIBING, _SUBSCRIBED, _PUSHING, _TERMINATED, _DISABLED = range(6)


@dataclass(frozen=True)
class Sample:
    """One value of a metric, named without the ``org.apache.kafka.<client type>.``
    prefix: a gauge, or (``counter``) a running total the push turns into a delta or a
    cumulative sum as the subscription asks."""
    name: str
    value: float
    attributes: Mapping[str, Any] = field(default_factory=dict)
    counter: bool = False


def interval_samples(name: str, stat: IntervalStat, scale: float = 1000.0,
                     attributes: Optional[Mapping[str, Any]] = None) -> List[Sample]:
    """``<name>.avg`` (float) and ``<name>.max`` (int) of ``stat`` (seconds, pushed in
    milliseconds with the default ``scale``), as librdkafka pushes them."""
    avg, top = stat.take()
    attrs = attributes or {}
    return [Sample(f"{name}.avg", avg * scale, attrs),
            Sample(f"{name}.max", int(round(top * scale)), attrs)]


def producer_samples(throttle: IntervalStat, queue_time: IntervalStat) -> List[Sample]:
    """The producer's own metrics since the last push: throttle times of Produce answers
    (ms, as given) and how long batches waited before their request was written."""
    return (interval_samples("produce.throttle.time", throttle, scale=1.0)
            + interval_samples("record.queue.time", queue_time))


Source = Callable[[float], Iterable[Sample]]


class Telemetry:
    """The KIP-714 state of one client (see the module's docstring).

    ``kind`` is ``"producer"`` or ``"consumer"``; ``sources`` give the samples of a push
    (each called with the seconds since the last push); ``resource`` gives the resource
    attributes (the group id and member id of a consumer, the transactional id of a
    producer)."""

    def __init__(self, config: Any, cluster: Any, io: Any, kind: str, name: str,
                 sources: List[Source],
                 resource: Callable[[], Mapping[str, Any]] = dict) -> None:
        self.cluster = cluster
        self.io = io
        self.prefix = f"org.apache.kafka.{kind}."
        self.name = name
        self.sources = sources
        self.resource = resource
        self.log = config.logger_for(_log.name)
        self.state = _IDLE if config["enable.metrics.push"] else _DISABLED
        self.instance_id = _ZERO_ID
        self.subscription: Any = None
        self.started_ns = time.time_ns()
        self.last_push_ns = self.started_ns
        self.last_push = time.monotonic()
        #: counters' values at the last push, for deltas
        self._last_totals: Dict[Tuple[str, Tuple[Any, ...]], float] = {}
        self._timer: Any = None
        self._conn: Any = None
        self._closing: Optional[Callable[[], None]] = None
        self._terminating = False  # terminate() was called: nothing more is scheduled
        #: no connection served telemetry when last looked: a connection that comes up
        #: is looked at at once
        self._waiting_for_conn = False
        if self.state != _DISABLED:
            cluster.on_broker_state.append(self._on_broker_state)
            io.call_soon(self._at, time.monotonic())

    # -- I/O thread ----------------------------------------------------------------------
    @property
    def pushing(self) -> bool:
        """Whether a subscription with at least one metric is in force."""
        return self.state in (_SUBSCRIBED, _PUSHING) and bool(
            self.subscription is not None and self.subscription.requested_metrics)

    def _at(self, when: float) -> None:
        """Run the next step (subscribe or push) at ``when`` (monotonic)."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None if self._terminating else self.io.call_at(when, self._step)

    def _step(self) -> None:
        self._timer = None
        if self.state in (_TERMINATED, _DISABLED, _SUBSCRIBING, _PUSHING) \
                or self.cluster.closed:
            return
        now = time.monotonic()
        if self.pushing:
            self._push(now, terminating=False)
        else:
            self._subscribe(now)

    def _connection(self) -> Any:
        """The connection telemetry goes on: the one used last while it is up, else any
        ready shared one (never behind a long-polling Fetch or a JoinGroup) whose broker
        serves both APIs."""
        conn = self._conn
        if conn is not None and conn.ready:
            return conn
        for conn in self.cluster.shared_connections():
            if conn.ready and conn.version_for(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS) \
                    is not None and conn.version_for(ApiKey.PUSH_TELEMETRY) is not None:
                self._conn = conn
                return conn
        self._conn = None
        return None

    def _on_broker_state(self, conn: Any, state: str, error: Any) -> None:
        if self._waiting_for_conn and conn.ready and self.state == _IDLE:
            self._waiting_for_conn = False
            self._at(time.monotonic())

    def _subscribe(self, now: float) -> None:
        conn = self._connection()
        self._waiting_for_conn = conn is None
        if conn is None:
            up = any(c.ready for c in self.cluster.shared_connections())
            self._at(now + (_LOOK_AGAIN_UNSERVED_S if up else _LOOK_AGAIN_S))
            return
        self.state = _SUBSCRIBING
        conn.send(GetTelemetrySubscriptionsRequest(client_instance_id=self.instance_id),
                  self._on_subscription)

    def _on_subscription(self, resp: Any, err: Optional[KafkaError]) -> None:
        if self.state != _SUBSCRIBING:
            return
        now = time.monotonic()
        self.state = _IDLE
        code = err.code() if err is not None else resp.error_code
        if code:
            if code == ErrorCode.UNSUPPORTED_VERSION:
                self._disable("the broker does not serve GetTelemetrySubscriptions")
            else:
                self.log.debug("GetTelemetrySubscriptions failed: %s; asking again in "
                               "%.0f s", KafkaError(code).name(), _RETRY_S)
                self._at(now + _RETRY_S)
            return
        if resp.client_instance_id.int:
            self.instance_id = resp.client_instance_id
        if self.instance_id.int == 0:
            self._disable("the broker assigned no client instance id")
            return
        interval = max(resp.push_interval_ms, 100) / 1000.0
        first = self.subscription is None or \
            self.subscription.subscription_id != resp.subscription_id
        self.subscription = resp
        self.state = _SUBSCRIBED
        if not resp.requested_metrics:
            self._at(now + interval)  # nothing subscribed: ask again then
            return
        self.log.debug("telemetry: instance %s, subscription %d, metrics %s every %d ms",
                       self.instance_id, resp.subscription_id, resp.requested_metrics,
                       resp.push_interval_ms)
        if first:
            # the counters of a new subscription start now
            self._last_totals.clear()
            self.last_push_ns = time.time_ns()
            self.last_push = now
            self._at(now + interval * random.uniform(0.5, 1.5))
        else:
            self._at(now + interval)

    def _push(self, now: float, terminating: bool) -> bool:
        """Send a push; False if there is no connection to send it on."""
        sub = self.subscription
        conn = self._connection()
        if conn is None:
            self._at(now + _LOOK_AGAIN_S)
            return False
        payload = self.payload(now)
        codec, payload = self._compressed(payload, list(sub.accepted_compression_types))
        if sub.telemetry_max_bytes > 0 and len(payload) > sub.telemetry_max_bytes:
            self.log.warning("telemetry: %d bytes of metrics exceed the broker's limit of "
                             "%d: not pushed", len(payload), sub.telemetry_max_bytes)
            self._at(now + sub.push_interval_ms / 1000.0)
            return False
        self.state = _PUSHING
        conn.send(PushTelemetryRequest(
            client_instance_id=self.instance_id, subscription_id=sub.subscription_id,
            terminating=terminating, compression_type=codec, metrics=payload),
            lambda resp, err: self._on_push(resp, err, terminating))
        return True

    def _compressed(self, payload: bytes, accepted: List[int]) -> Tuple[int, bytes]:
        for codec in accepted:
            if codec == 0:
                break
            try:
                return codec, compress(codec, payload)
            except KafkaProtocolError:
                continue  # this installation lacks the codec's library: the next one
        return 0, payload

    def _on_push(self, resp: Any, err: Optional[KafkaError], terminating: bool) -> None:
        now = time.monotonic()
        code = err.code() if err is not None else resp.error_code
        interval = self.subscription.push_interval_ms / 1000.0
        if terminating:
            self.state = _TERMINATED
            self._closed()
            return
        if self.state != _PUSHING or self._terminating:
            return
        self.state = _SUBSCRIBED
        self._at(now + interval)
        if not code:
            return
        name = KafkaError(code).name()
        if code in (ErrorCode.UNKNOWN_SUBSCRIPTION_ID, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE):
            self.log.debug("telemetry push refused (%s): asking for the subscription", name)
            self.state = _IDLE
            self._at(now)
        elif code in (ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_RECORD,
                      ErrorCode.UNSUPPORTED_VERSION):
            self._disable(f"the broker refused the metrics pushed: {name}")
        elif code == ErrorCode.TELEMETRY_TOO_LARGE:
            self.log.warning("telemetry push refused: %s (limit %d bytes)", name,
                             self.subscription.telemetry_max_bytes)
        elif err is not None:
            # connection lost or timed out: the subscription is asked for again
            self.log.debug("telemetry push failed: %s", err.str())
            self.state = _IDLE
            self._at(now + min(interval, _RETRY_S))
        else:
            self.log.debug("telemetry push refused: %s", name)

    def _disable(self, why: str) -> None:
        self.log.warning("Telemetry disabled: %s", why)
        self.state = _DISABLED

    # -- the payload -----------------------------------------------------------------------
    def payload(self, now: float) -> bytes:
        """The metrics of this interval, those the subscription asks for, encoded."""
        sub = self.subscription
        wanted = list(sub.requested_metrics)
        delta = bool(sub.delta_temporality)
        elapsed = max(now - self.last_push, 1e-9)
        now_ns = time.time_ns()
        start_ns = self.last_push_ns
        metrics: Dict[str, List[DataPoint]] = {}
        counters = set()
        for source in self.sources:
            for s in source(elapsed):
                name = self.prefix + s.name
                if not any(name.startswith(p) for p in wanted):
                    continue
                value = s.value
                start = start_ns
                if s.counter:
                    counters.add(name)
                    if delta:
                        key = (name, tuple(sorted(s.attributes.items())))
                        value, self._last_totals[key] = \
                            value - self._last_totals.get(key, 0), value
                    else:
                        start = self.started_ns
                metrics.setdefault(name, []).append(
                    DataPoint(value, now_ns, start, dict(s.attributes)))
        self.last_push_ns = now_ns
        self.last_push = now
        temporality = TEMPORALITY_DELTA if delta else TEMPORALITY_CUMULATIVE
        encoded = [Metric(name, SUM if name in counters else GAUGE, tuple(points),
                          monotonic=name in counters, temporality=temporality)
                   for name, points in sorted(metrics.items())]
        resource = {k: v for k, v in self.resource().items() if v is not None}
        return encode_metrics_data([ResourceMetrics(
            (ScopeMetrics(tuple(encoded), self.name, _VERSION),), resource)])

    # -- closing ---------------------------------------------------------------------------
    def terminate(self, then: Callable[[], None]) -> None:
        """I/O thread, as the client closes: the last push, marked terminating, when
        metrics are subscribed; ``then()`` runs once it is answered (or failed, or after
        :data:`TERMINATING_WAIT_S`), at once when there is nothing to push."""
        self._terminating = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.state == _PUSHING:
            self.state = _SUBSCRIBED  # the answer to the push under way is not awaited
        if not self.pushing:
            self.state = _TERMINATED
            then()
            return
        self._closing = then
        if not self._push(time.monotonic(), terminating=True):
            self.state = _TERMINATED
            self._closed()
            return
        self.io.call_later(TERMINATING_WAIT_S, self._closed)

    def _closed(self) -> None:
        """The client may close its connections now (once: the answer to the terminating
        push or the wait for it, whichever comes first)."""
        closing, self._closing = self._closing, None
        if closing is not None:
            closing()
