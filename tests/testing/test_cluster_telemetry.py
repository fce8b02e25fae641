"""Client telemetry (KIP-714) on the test cluster: GetTelemetrySubscriptions and
PushTelemetry driven with raw requests through every check a Kafka broker makes, and
confluent-kafka (librdkafka) pushing its producer metrics to the cluster."""
from __future__ import annotations

import time
import uuid

import pytest

from kafka_proto.compression import (
    CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD, compress,
)
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    GetTelemetrySubscriptionsRequest, MetadataRequest, PushTelemetryRequest,
)
from kafka_proto.telemetry import (
    GAUGE, SUM, TEMPORALITY_CUMULATIVE, TEMPORALITY_DELTA, DataPoint, Metric,
    ResourceMetrics, ScopeMetrics, encode_metrics_data,
)

from kafka_client.testing import Cluster

from rawclient import RawClient  # tests/testing/rawclient.py

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

ZERO = uuid.UUID(int=0)
TOPIC = "telemetry"
DEFAULT_CODECS = [CODEC_ZSTD, CODEC_LZ4, CODEC_GZIP, CODEC_SNAPPY]
T0, T1 = 1_700_000_000_000_000_000, 1_700_000_001_000_000_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("telemetry"))) as c:
        c.create_topic(TOPIC, partitions=2)
        yield c


@pytest.fixture
def raw(cluster):
    with RawClient(cluster.address(1), client_id="raw-telemetry", timeout=10) as client:
        yield client


def get_subscription(raw, instance=ZERO):
    resp = raw.request(GetTelemetrySubscriptionsRequest(client_instance_id=instance), 0)
    assert resp.error_code == 0
    return resp


def new_instance(raw):
    """A client instance id assigned by the cluster, and its subscription id."""
    resp = get_subscription(raw)
    assert resp.client_instance_id != ZERO
    return resp.client_instance_id, resp.subscription_id


def push(raw, instance, subscription_id, body, codec=CODEC_NONE, terminating=False):
    """The error code the cluster answers a PushTelemetry of ``body`` (compressed with
    ``codec`` here) with."""
    data = compress(codec, body) if codec != CODEC_NONE else body
    return raw.request(PushTelemetryRequest(
        client_instance_id=instance, subscription_id=subscription_id,
        terminating=terminating, compression_type=codec, metrics=data), 0).error_code


def pushes_of(cluster, since, instance):
    return [e for e in cluster.telemetry_pushes(since)
            if e.details["client_instance_id"] == str(instance)]


def payload(name="org.example.requests", value=1, description=""):
    return encode_metrics_data([ResourceMetrics((ScopeMetrics((
        Metric(name, GAUGE, (DataPoint(value, T1),), description=description),),
        "raw-test", "0"),))])


# -- raw requests ----------------------------------------------------------------------

def test_no_subscription_at_start(cluster, raw):
    """Like a Kafka broker without client-metrics resources (this runs first, before
    any test sets a subscription)."""
    first = get_subscription(raw)
    assert first.requested_metrics == []
    assert first.client_instance_id != ZERO
    assert first.accepted_compression_types == DEFAULT_CODECS
    assert first.push_interval_ms == 300_000
    assert first.telemetry_max_bytes == 1024 * 1024
    second = get_subscription(raw)
    assert second.client_instance_id not in (ZERO, first.client_instance_id)
    assert second.requested_metrics == []


def test_empty_subscription_list_means_none(cluster, raw):
    subscription_id = cluster.set_telemetry_subscription([])
    resp = get_subscription(raw)
    assert resp.requested_metrics == []
    assert resp.subscription_id == subscription_id


@pytest.mark.parametrize("codec", [CODEC_NONE] + DEFAULT_CODECS)
def test_push_recorded_with_decoded_metrics(cluster, raw, codec):
    subscription_id = cluster.set_telemetry_subscription(
        ["org.example.", "org.other.x"], push_interval_ms=60_000, delta_temporality=False)
    resp = get_subscription(raw)
    assert resp.subscription_id == subscription_id
    assert resp.requested_metrics == ["org.example.", "org.other.x"]
    assert resp.push_interval_ms == 60_000
    assert resp.delta_temporality is False
    assert resp.accepted_compression_types == DEFAULT_CODECS
    instance = resp.client_instance_id

    resource = {"client.id": "raw-telemetry", "pid": 4242, "ratio": 0.5, "debug": True,
                "raw": b"\x01\xff", "empty": "", "name": "größe"}
    metrics = (
        Metric("org.example.latency.avg", GAUGE, (
            DataPoint(2.5, T1, T0, {"node.id": 1}),
            DataPoint(-1.25, T1, T0, {"node.id": 2, "rack": "r2"}),
        ), unit="ms"),
        Metric("org.example.requests.total", SUM, (DataPoint((1 << 63) - 1, T1, T0),),
               monotonic=True, temporality=TEMPORALITY_CUMULATIVE),
        Metric("org.example.errors", SUM, (DataPoint(-3, T1, T0),),
               temporality=TEMPORALITY_DELTA),
    )
    data = encode_metrics_data([ResourceMetrics(
        (ScopeMetrics(metrics, "raw-test", "1.2.3"),), resource)])
    since = cluster.clear_request_log()
    assert push(raw, instance, subscription_id, data, codec) == ErrorCode.NONE

    [entry] = pushes_of(cluster, since, instance)
    d = entry.details
    assert entry.broker == 1
    assert d["subscription_id"] == subscription_id
    assert d["terminating"] is False
    assert d["compression_type"] == codec
    expected_size = len(compress(codec, data)) if codec != CODEC_NONE else len(data)
    if codec in (CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_ZSTD):  # deterministic
        assert d["payload_bytes"] == expected_size
    assert d["error"] is None
    assert d["resource"] == {**resource, "raw": "01ff"}
    assert d["scope"] == {"name": "raw-test", "version": "1.2.3"}
    assert set(d["metrics"]) == {m.name for m in metrics}
    latency = d["metrics"]["org.example.latency.avg"]
    assert (latency["kind"], latency["unit"], latency["monotonic"]) == (GAUGE, "ms", False)
    assert latency["points"] == [
        {"value": 2.5, "attributes": {"node.id": 1}, "start_time_unix_nano": T0,
         "time_unix_nano": T1},
        {"value": -1.25, "attributes": {"node.id": 2, "rack": "r2"},
         "start_time_unix_nano": T0, "time_unix_nano": T1}]
    total = d["metrics"]["org.example.requests.total"]
    assert (total["kind"], total["monotonic"], total["temporality"]) == (
        SUM, True, TEMPORALITY_CUMULATIVE)
    assert [p["value"] for p in total["points"]] == [(1 << 63) - 1]
    errors = d["metrics"]["org.example.errors"]
    assert (errors["kind"], errors["monotonic"], errors["temporality"]) == (
        SUM, False, TEMPORALITY_DELTA)
    assert [p["value"] for p in errors["points"]] == [-3]
    [request] = cluster.request_log(since, api="PushTelemetry")
    assert request.errors == [] and request.client_id == "raw-telemetry"


def test_unknown_instance_or_stale_subscription(cluster, raw):
    first = cluster.set_telemetry_subscription(["org.example."], push_interval_ms=60_000)
    instance, subscription_id = new_instance(raw)
    assert subscription_id == first
    since = cluster.clear_request_log()
    assert push(raw, uuid.uuid4(), first, payload()) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    second = cluster.set_telemetry_subscription(["org.example.", "org.more."],
                                                push_interval_ms=60_000)
    assert second != first
    assert push(raw, instance, first, payload()) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    resp = get_subscription(raw, instance)
    assert resp.subscription_id == second
    assert resp.requested_metrics == ["org.example.", "org.more."]
    assert push(raw, instance, second, payload(value=7)) == ErrorCode.NONE

    log = pushes_of(cluster, since, instance)
    assert [e.details["error"] for e in log] == ["UNKNOWN_SUBSCRIPTION_ID", None]
    assert "metrics" not in log[0].details
    assert log[-1].details["metrics"]["org.example.requests"]["points"][0]["value"] == 7


def test_compression_type_not_accepted(cluster, raw):
    subscription_id = cluster.set_telemetry_subscription(
        [""], push_interval_ms=60_000, compression_types=[CODEC_GZIP, CODEC_LZ4])
    resp = get_subscription(raw)
    assert resp.accepted_compression_types == [CODEC_GZIP, CODEC_LZ4]
    since = cluster.clear_request_log()
    # one instance a push: a Kafka broker counts a refused push against the interval too
    instances = [resp.client_instance_id, new_instance(raw)[0], new_instance(raw)[0]]
    for instance, codec in zip(instances, (CODEC_ZSTD, CODEC_SNAPPY)):
        assert push(raw, instance, subscription_id, payload(), codec) == \
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert push(raw, instances[2], subscription_id, payload(), CODEC_LZ4) == ErrorCode.NONE
    log = [e for i in instances for e in pushes_of(cluster, since, i)]
    assert [(e.details["compression_type"], e.details["error"]) for e in log] == [
        (CODEC_ZSTD, "UNSUPPORTED_COMPRESSION_TYPE"),
        (CODEC_SNAPPY, "UNSUPPORTED_COMPRESSION_TYPE"), (CODEC_LZ4, None)]


def test_payload_over_max_bytes(cluster, raw):
    # a payload of 300 bytes or a little more, and one a byte longer
    exact, over = next((a, b) for a, b in (
        (payload(description="x" * n), payload(description="x" * (n + 1)))
        for n in range(250, 400)) if len(a) >= 300 and len(b) == len(a) + 1)
    limit = len(exact)
    subscription_id = cluster.set_telemetry_subscription(
        [""], push_interval_ms=60_000, max_bytes=limit)
    instance, _ = new_instance(raw)
    since = cluster.clear_request_log()
    assert push(raw, instance, subscription_id, over) == ErrorCode.TELEMETRY_TOO_LARGE
    # (another instance: a Kafka broker counts a refused push against the interval)
    at_limit, _ = new_instance(raw)
    assert push(raw, at_limit, subscription_id, exact) == ErrorCode.NONE
    # The limit is on the bytes pushed: 5000 bytes that compress to fewer than 300 pass.
    compressed, _ = new_instance(raw)
    big = payload(description="y" * 5000)
    assert len(big) > 5000 and len(compress(CODEC_ZSTD, big)) < limit
    assert push(raw, compressed, subscription_id, big, CODEC_ZSTD) == ErrorCode.NONE

    log = [e for i in (instance, at_limit, compressed) for e in pushes_of(cluster, since, i)]
    assert [(e.details["payload_bytes"], e.details["error"]) for e in log] == [
        (limit + 1, "TELEMETRY_TOO_LARGE"), (limit, None),
        (len(compress(CODEC_ZSTD, big)), None)]
    assert log[2].details["metrics"]["org.example.requests"]["points"][0]["value"] == 1


def test_throttled_then_terminating_then_invalid(cluster, raw):
    subscription_id = cluster.set_telemetry_subscription([""], push_interval_ms=60_000)
    instance, _ = new_instance(raw)
    since = cluster.clear_request_log()
    steps = [(False, ErrorCode.NONE), (False, ErrorCode.THROTTLING_QUOTA_EXCEEDED),
             (True, ErrorCode.NONE),  # a terminating push is never too early
             (False, ErrorCode.INVALID_REQUEST), (True, ErrorCode.INVALID_REQUEST)]
    for terminating, code in steps:
        assert push(raw, instance, subscription_id, payload(),
                    terminating=terminating) == code, (terminating, code)
    log = pushes_of(cluster, since, instance)
    assert [(e.details["terminating"], e.details["error"]) for e in log] == [
        (False, None), (False, "THROTTLING_QUOTA_EXCEEDED"), (True, None),
        (False, "INVALID_REQUEST"), (True, "INVALID_REQUEST")]
    assert [e.errors for e in cluster.request_log(since, api="PushTelemetry")] == [
        [], ["THROTTLING_QUOTA_EXCEEDED"], [], ["INVALID_REQUEST"], ["INVALID_REQUEST"]]


def test_push_accepted_once_interval_passed(cluster, raw):
    # 1.5 s: a push within the first second is early even with the cluster's slack
    subscription_id = cluster.set_telemetry_subscription([""], push_interval_ms=1500)
    instance, _ = new_instance(raw)
    assert push(raw, instance, subscription_id, payload()) == ErrorCode.NONE
    pushed = time.monotonic()
    assert push(raw, instance, subscription_id, payload()) == \
        ErrorCode.THROTTLING_QUOTA_EXCEEDED
    time.sleep(max(0.0, pushed + 1.55 - time.monotonic()))
    assert push(raw, instance, subscription_id, payload()) == ErrorCode.NONE


GARBAGE = {
    "over-long varint": (CODEC_NONE, b"\xff" * 16),
    "length past the end": (CODEC_NONE, b"\x0a\x10x"),
    "wire type 3": (CODEC_NONE, b"\x0b"),
    "metric name not UTF-8": (CODEC_NONE, b"\x0a\x07\x12\x05\x12\x03\x0a\x01\xff"),
    "not a zstd frame": (CODEC_ZSTD, b"this is not zstd"),
    "not a gzip stream": (CODEC_GZIP, b"\x1f\x8b\x08\x00garbage"),
    "gzip of garbage": (CODEC_GZIP, compress(CODEC_GZIP, b"\x0a\x7f")),
    "zstd bomb": (CODEC_ZSTD, compress(CODEC_ZSTD, b"\x0a\x00" * (1 << 20))),
}


@pytest.mark.parametrize("codec, data", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_payload_invalid_record(cluster, raw, codec, data):
    # max_bytes 4096: the cluster decompresses at most 64 times that (256 KiB), less than
    # the 2 MiB of the bomb
    subscription_id = cluster.set_telemetry_subscription(
        [""], push_interval_ms=60_000, max_bytes=4096)
    instance, _ = new_instance(raw)
    assert len(data) <= 4096
    since = cluster.clear_request_log()
    resp = raw.request(PushTelemetryRequest(
        client_instance_id=instance, subscription_id=subscription_id,
        compression_type=codec, metrics=data), 0)
    assert resp.error_code == ErrorCode.INVALID_RECORD
    [entry] = pushes_of(cluster, since, instance)
    assert entry.details["error"] == "INVALID_RECORD" and entry.details["reason"]
    assert "metrics" not in entry.details
    # The cluster keeps serving, on this connection and others
    other, _ = new_instance(raw)
    assert push(raw, other, subscription_id, payload(), CODEC_GZIP) == ErrorCode.NONE
    assert raw.request(MetadataRequest(topics=None), 12).brokers
    with RawClient(cluster.address(1)) as fresh:
        assert get_subscription(fresh).client_instance_id != ZERO


# -- confluent-kafka (librdkafka) as the client ----------------------------------------

CREATION_TOTAL = "org.apache.kafka.producer.connection.creation.total"


def produce_and_destroy(cluster, seconds=2.5):
    """The pushes of one confluent_kafka.Producer that produces for ``seconds`` and is
    destroyed, up to its terminating push."""
    ck = pytest.importorskip("confluent_kafka")
    since = cluster.clear_request_log()
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
    sent, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        p.produce(TOPIC, b"%d" % sent)
        sent += 1
        p.poll(0.05)
    assert p.flush(10) == 0
    del p  # rd_kafka_destroy: the last push, terminating
    cluster.wait_for(lambda: any(e.details["terminating"]
                                 for e in cluster.telemetry_pushes(since)),
                     timeout=15, what="the terminating push")
    pushes = cluster.telemetry_pushes(since)
    assert len({e.details["client_instance_id"] for e in pushes}) == 1
    [asked] = {e.details["client_instance_id"]
               for e in cluster.request_log(since, api="GetTelemetrySubscriptions")}
    assert asked == pushes[0].details["client_instance_id"]
    assert len(pushes) >= 2
    assert [e.details["terminating"] for e in pushes] == [False] * (len(pushes) - 1) + [True]
    assert [e.details["error"] for e in pushes] == [None] * len(pushes)
    return pushes


def test_confluent_producer_pushes_all_metrics(cluster, librdkafka_metric_names):
    producer_metrics = librdkafka_metric_names["producer"]
    ck = pytest.importorskip("confluent_kafka")
    subscription_id = cluster.set_telemetry_subscription([""], push_interval_ms=1000)
    pushes = produce_and_destroy(cluster)
    seen = set()
    for e in pushes:
        d = e.details
        assert d["subscription_id"] == subscription_id
        assert d["compression_type"] == CODEC_ZSTD  # the first codec the cluster lists
        assert d["scope"]["name"].startswith("rdkafka#producer-")
        assert d["scope"]["version"] == ck.libversion()[0]
        assert set(d["metrics"]) <= producer_metrics
        seen |= set(d["metrics"])
        for name, metric in d["metrics"].items():
            assert metric["kind"] == (SUM if name == CREATION_TOTAL else GAUGE), name
            for point in metric["points"]:
                assert isinstance(point["value"], (int, float)) and point["value"] >= 0
                assert 0 < point["start_time_unix_nano"] <= point["time_unix_nano"]
                if ".node." in name:
                    assert point["attributes"] == {"node.id": 1}
    assert seen == producer_metrics
    creation = [e.details["metrics"][CREATION_TOTAL] for e in pushes
                if CREATION_TOTAL in e.details["metrics"]]
    assert len(creation) >= 2
    assert all(m["monotonic"] and m["temporality"] == TEMPORALITY_DELTA for m in creation)
    # deltas: each push counts from where the one before stopped
    spans = [(p["start_time_unix_nano"], p["time_unix_nano"]) for m in creation
             for p in m["points"]]
    assert len(spans) == len(creation)
    assert all(later[0] == earlier[1] for earlier, later in zip(spans, spans[1:]))
    assert all(isinstance(p["value"], int) for m in creation for p in m["points"])


def test_confluent_producer_prefix_subscription(cluster, librdkafka_metric_names):
    producer_metrics = librdkafka_metric_names["producer"]
    pytest.importorskip("confluent_kafka")
    prefixes = ["org.apache.kafka.producer.node", "org.apache.kafka.producer.connection."]
    subscription_id = cluster.set_telemetry_subscription(
        prefixes, push_interval_ms=1000, compression_types=[CODEC_GZIP],
        delta_temporality=False)
    pushes = produce_and_destroy(cluster)
    wanted = {m for m in producer_metrics if m.startswith(tuple(prefixes))}
    assert len(wanted) == 4
    seen = set()
    for e in pushes:
        assert e.details["subscription_id"] == subscription_id
        assert e.details["compression_type"] == CODEC_GZIP  # the only codec accepted
        assert set(e.details["metrics"]) <= wanted
        seen |= set(e.details["metrics"])
    assert seen == wanted
    points = [p for e in pushes for p in e.details["metrics"].get(CREATION_TOTAL, {})
              .get("points", [])]
    assert len(points) >= 2
    assert all(e.details["metrics"][CREATION_TOTAL]["temporality"] == TEMPORALITY_CUMULATIVE
               for e in pushes if CREATION_TOTAL in e.details["metrics"])
    # cumulative: one start time, values that never go down, at least one connection
    assert len({p["start_time_unix_nano"] for p in points}) == 1
    values = [p["value"] for p in points]
    assert values == sorted(values) and values[0] >= 1
