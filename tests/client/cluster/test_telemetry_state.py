"""The client's KIP-714 state (kafka_client._cluster.telemetry) without a broker: what it
asks and pushes, the payload it builds (checked by decoding it), and what it does with
each answer. The I/O thread's timers and the connection are fakes the tests drive."""
from __future__ import annotations

import uuid
from typing import Any, List, Tuple

import pytest

from kafka_client._cluster import telemetry as telemetry_module
from kafka_client._cluster.cluster import FETCH_KEY_BASE
from kafka_client._cluster.telemetry import TERMINATING_WAIT_S, Sample, Telemetry
from kafka_client._common import make_config
from kafka_client._interval import IntervalStat
from kafka_client.errors import KafkaError
from kafka_proto.compression import (
    CODEC_GZIP, CODEC_LZ4, CODEC_ZSTD, decompress,
)
from kafka_proto.errors import ErrorCode, UnsupportedCompressionError
from kafka_proto.messages import (
    GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest, PushTelemetryResponse,
)
from kafka_proto.telemetry import decode_metrics_data

INSTANCE = uuid.UUID("12345678-1234-5678-1234-567812345678")


class FakeTimer:
    def __init__(self, when, fn):
        self.when, self.fn, self.cancelled = when, fn, False

    def cancel(self):
        self.cancelled = True


class FakeIO:
    def __init__(self):
        self.timers: List[FakeTimer] = []

    def call_soon(self, fn, *args):
        fn(*args)

    def call_at(self, when, fn, *args):
        timer = FakeTimer(when, lambda: fn(*args))
        self.timers.append(timer)
        return timer

    def call_later(self, delay, fn, *args):
        return self.call_at(delay, fn, *args)

    def run_due(self):
        """Run the pending timers (whatever their time): the next step."""
        due, self.timers = self.timers, []
        for timer in due:
            if not timer.cancelled:
                timer.fn()


class FakeConn:
    ready = True

    def __init__(self, serves=True):
        self.serves = serves
        self.sent: List[Tuple[Any, Any]] = []

    def version_for(self, api_key):
        return 0 if self.serves else None

    def send(self, msg, callback, **kwargs):
        self.sent.append((msg, callback))

    def answer(self, response=None, error=None):
        msg, callback = self.sent[-1]
        callback(response, error)
        return msg


class FakeCluster:
    def __init__(self, conn):
        self.conns = {1: conn}
        self.closed = False
        self.on_broker_state: List[Any] = []

    def shared_connections(self):
        return [c for key, c in self.conns.items() if key < FETCH_KEY_BASE // 2]


def make_telemetry(sources=(), resource=dict, **config):
    conn = FakeConn()
    io = FakeIO()
    cfg = make_config({"bootstrap.servers": "127.0.0.1:1", **config}, {}, "producer")
    tel = Telemetry(cfg, FakeCluster(conn), io, "producer", "kafka-producer-9",
                    list(sources), resource)
    return tel, conn, io


def subscription(metrics=("",), codecs=(CODEC_ZSTD,), delta=True, max_bytes=1 << 20,
                 subscription_id=7, instance=INSTANCE):
    return GetTelemetrySubscriptionsResponse(
        client_instance_id=instance, subscription_id=subscription_id,
        accepted_compression_types=list(codecs), push_interval_ms=1000,
        telemetry_max_bytes=max_bytes, delta_temporality=delta,
        requested_metrics=list(metrics))


def subscribed(**kwargs):
    """A telemetry subscribed (answer given), its first push due."""
    sources = kwargs.pop("sources", ())
    resource = kwargs.pop("resource", dict)
    tel, conn, io = make_telemetry(sources, resource)
    io.run_due()
    request = conn.answer(subscription(**kwargs))
    assert isinstance(request, GetTelemetrySubscriptionsRequest)
    assert request.client_instance_id.int == 0   # the broker assigns it
    return tel, conn, io


def decoded(push: PushTelemetryRequest):
    payload = push.metrics
    if push.compression_type:
        payload = decompress(push.compression_type, payload)
    (resource,) = decode_metrics_data(payload)
    (scope,) = resource.scopes
    return resource, scope, {m.name: m for m in scope.metrics}


def test_interval_stat_averages_and_resets():
    stat = IntervalStat()
    assert stat.take() == (0.0, 0.0)
    for v in (0.002, 0.004, 0.003):
        stat.add(v)
    other = IntervalStat()
    other.add(0.011)
    stat.merge(other)
    assert stat.take() == pytest.approx((0.005, 0.011))
    assert stat.take() == (0.0, 0.0)


def test_pushes_the_subscribed_metrics_with_deltas_of_counters():
    totals = iter([5, 9])
    latency = IntervalStat()

    def source(elapsed):
        latency.add(0.004)
        return [Sample("connection.creation.total", next(totals), counter=True),
                Sample("queue.depth", 3, {"node.id": 2}),
                *telemetry_module.interval_samples("request.latency", latency)]

    tel, conn, io = subscribed(sources=[source],
                               metrics=["org.apache.kafka.producer.connection",
                                        "org.apache.kafka.producer.request"],
                               resource=lambda: {"transactional_id": "t", "none": None})
    io.run_due()
    first = conn.answer(PushTelemetryResponse())
    io.run_due()
    second = conn.answer(PushTelemetryResponse())
    assert first.client_instance_id == INSTANCE and first.subscription_id == 7
    assert not first.terminating and first.compression_type == CODEC_ZSTD
    resource, scope, metrics = decoded(first)
    assert resource.attributes == {"transactional_id": "t"}   # None values left out
    assert (scope.scope_name, scope.scope_version) == ("kafka-producer-9",
                                                       telemetry_module._VERSION)
    assert set(metrics) == {"org.apache.kafka.producer.connection.creation.total",
                            "org.apache.kafka.producer.request.latency.avg",
                            "org.apache.kafka.producer.request.latency.max"}
    total = metrics["org.apache.kafka.producer.connection.creation.total"]
    assert (total.kind, total.monotonic, total.temporality) == ("sum", True, 1)
    assert total.points[0].value == 5
    assert metrics["org.apache.kafka.producer.request.latency.avg"].points[0].value == \
        pytest.approx(4.0)
    assert metrics["org.apache.kafka.producer.request.latency.max"].points[0].value == 4
    _, _, later = decoded(second)
    later_total = later["org.apache.kafka.producer.connection.creation.total"].points[0]
    assert later_total.value == 4   # 9 - 5: a delta
    # a delta's interval starts where the last push ended
    assert later_total.start_time_unix_nano == total.points[0].time_unix_nano


def test_cumulative_counters_count_from_the_client_start():
    totals = iter([5, 9])
    tel, conn, io = subscribed(
        sources=[lambda e: [Sample("connection.creation.total", next(totals),
                                   counter=True)]], delta=False, codecs=())
    io.run_due()
    first = conn.answer(PushTelemetryResponse())
    io.run_due()
    second = conn.answer(PushTelemetryResponse())
    assert first.compression_type == 0   # the broker accepts no codec: none
    points = [decoded(p)[2]["org.apache.kafka.producer.connection.creation.total"]
              for p in (first, second)]
    assert [m.points[0].value for m in points] == [5, 9]
    assert points[0].temporality == 2
    assert {m.points[0].start_time_unix_nano for m in points} == {tel.started_ns}


def test_a_codec_this_installation_lacks_is_passed_over(monkeypatch):
    real = telemetry_module.compress

    def compress(codec, data):
        if codec == CODEC_ZSTD:
            raise UnsupportedCompressionError("zstd: the zstandard package is missing")
        return real(codec, data)

    monkeypatch.setattr(telemetry_module, "compress", compress)
    tel, conn, io = subscribed(codecs=(CODEC_ZSTD, CODEC_LZ4, CODEC_GZIP))
    io.run_due()
    assert conn.sent[-1][0].compression_type == CODEC_LZ4


@pytest.mark.parametrize("code", [ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
                                  ErrorCode.UNSUPPORTED_COMPRESSION_TYPE])
def test_a_stale_subscription_or_codec_is_asked_for_again_with_the_instance_id(code):
    tel, conn, io = subscribed()
    io.run_due()
    conn.answer(PushTelemetryResponse(error_code=code))
    io.run_due()
    request = conn.sent[-1][0]
    assert isinstance(request, GetTelemetrySubscriptionsRequest)
    assert request.client_instance_id == INSTANCE   # kept: only the broker's first is new


@pytest.mark.parametrize("code", [ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_RECORD])
def test_a_payload_the_broker_calls_invalid_stops_telemetry(code, caplog):
    tel, conn, io = subscribed()
    io.run_due()
    conn.answer(PushTelemetryResponse(error_code=code))
    io.run_due()
    assert len(conn.sent) == 2 and not io.timers
    assert "Telemetry disabled" in caplog.text
    closed = []
    tel.terminate(lambda: closed.append(True))
    assert closed == [True] and len(conn.sent) == 2   # no terminating push either


def test_too_large_and_throttled_pushes_wait_for_the_next_interval():
    tel, conn, io = subscribed()
    for code in (ErrorCode.TELEMETRY_TOO_LARGE, ErrorCode.THROTTLING_QUOTA_EXCEEDED):
        io.run_due()
        assert isinstance(conn.answer(PushTelemetryResponse(error_code=code)),
                          PushTelemetryRequest)
    io.run_due()
    assert isinstance(conn.sent[-1][0], PushTelemetryRequest)


def test_a_lost_connection_asks_for_the_subscription_again():
    tel, conn, io = subscribed()
    io.run_due()
    conn.answer(None, KafkaError(KafkaError._TRANSPORT, "connection reset"))
    io.run_due()
    assert isinstance(conn.sent[-1][0], GetTelemetrySubscriptionsRequest)


def test_a_payload_over_the_limit_is_not_sent(caplog):
    tel, conn, io = subscribed(max_bytes=10, codecs=())
    io.run_due()
    assert len(conn.sent) == 1 and io.timers   # nothing pushed; tried again next time
    assert "exceed the broker's limit of 10" in caplog.text


def test_no_metric_subscribed_asks_again_and_never_pushes():
    tel, conn, io = subscribed(metrics=())
    for _ in range(3):
        io.run_due()
        assert isinstance(conn.answer(subscription(metrics=())),
                          GetTelemetrySubscriptionsRequest)
    closed = []
    tel.terminate(lambda: closed.append(True))
    assert closed == [True] and len(conn.sent) == 4


def test_the_broker_not_serving_telemetry_means_no_request():
    tel, conn, io = make_telemetry()
    conn.serves = False
    io.run_due()
    assert conn.sent == [] and io.timers   # looked again later
    tel, conn, io = make_telemetry(**{"enable.metrics.push": False})
    io.run_due()
    assert conn.sent == [] and io.timers == []


def test_unsupported_version_disables_without_retrying():
    tel, conn, io = make_telemetry()
    io.run_due()
    conn.answer(GetTelemetrySubscriptionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION))
    io.run_due()
    assert len(conn.sent) == 1 and not io.timers


def test_terminate_pushes_once_more_and_closes_on_the_answer():
    tel, conn, io = subscribed()
    closed = []
    tel.terminate(lambda: closed.append(True))
    push = conn.sent[-1][0]
    assert isinstance(push, PushTelemetryRequest) and push.terminating
    assert closed == []
    conn.answer(PushTelemetryResponse())
    assert closed == [True]
    io.run_due()   # the guard timer (TERMINATING_WAIT_S) does not close twice
    assert closed == [True] and len(conn.sent) == 2


def test_terminate_closes_after_the_wait_when_no_answer_comes():
    tel, conn, io = subscribed()
    io.run_due()   # a regular push in flight
    closed = []
    tel.terminate(lambda: closed.append(True))
    assert conn.sent[-1][0].terminating
    assert [t.when for t in io.timers if not t.cancelled] == [TERMINATING_WAIT_S]
    io.run_due()
    assert closed == [True]
    # the regular push's late answer schedules nothing more
    conn.sent[1][1](PushTelemetryResponse(error_code=ErrorCode.UNKNOWN_SUBSCRIPTION_ID),
                    None)
    assert not io.timers


def test_telemetry_never_goes_on_a_dedicated_connection():
    """A consumer's fetch lanes and coordinator connection (where a Fetch or a JoinGroup
    holds the line) are never used: telemetry waits for a shared connection."""
    tel, conn, io = make_telemetry()
    cluster = tel.cluster
    conn.ready = False
    dedicated = FakeConn()
    cluster.conns[FETCH_KEY_BASE - 1] = dedicated      # up, but not shared
    assert tel._connection() is None
    assert dedicated.sent == []
    conn.ready = True
    assert tel._connection() is conn
