"""KIP-714 client metrics pushed by our Producer and Consumer, read on the broker side:
the test cluster decodes every PushTelemetry it accepts (kafka_client.testing's
``telemetry_pushes()``). Ours push librdkafka's metric names (the conftest fixture;
testing/test_cluster_telemetry.py runs confluent-kafka's producer for them, the consumer
test here runs confluent-kafka's consumer)."""
from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Dict, List

import confluent_kafka
import pytest

import kafka_client
from kafka_client import Consumer, Producer
from kafka_client.admin import AdminClient
from kafka_client.testing import Cluster
from kafka_proto.compression import CODEC_GZIP

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

#: the push interval the tests subscribe with (the first push comes after 0.5-1.5 of it)
INTERVAL_MS = 400


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("telemetry"))) as c:
        c.create_topic("metrics-in", partitions=2)
        yield c


@pytest.fixture
def client_id():
    return f"tel-{uuid.uuid4().hex[:8]}"


def pushes_of(cluster: Cluster, client_id: str, since: int = 0) -> List[Any]:
    return [e for e in cluster.telemetry_pushes(since) if e.client_id == client_id]


def wait_for_pushes(cluster: Cluster, client_id: str, count: int, since: int = 0,
                    timeout: float = 10.0) -> List[Any]:
    deadline = time.monotonic() + timeout
    while True:
        pushes = pushes_of(cluster, client_id, since)
        if len(pushes) >= count or time.monotonic() > deadline:
            return pushes
        time.sleep(0.05)


def produce_steadily(client: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        client.produce("metrics-in", b"x" * 100)
        client.poll(0.01)
    assert client.flush(10) == 0


def points(push: Any, name: str) -> List[Dict[str, Any]]:
    return push.details["metrics"][name]["points"]


def value(push: Any, name: str) -> Any:
    (point,) = points(push, name)
    return point["value"]


def test_producer_pushes_librdkafkas_metrics_until_it_closes(cluster, client_id,
                                                            librdkafka_metric_names):
    cluster.set_telemetry_subscription([""], push_interval_ms=INTERVAL_MS,
                                       delta_temporality=False)
    started = time.time_ns()
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "client.id": client_id, "linger.ms": 5})
    produce_steadily(producer, 1.6)
    producer.close()
    ours = pushes_of(cluster, client_id)
    assert len(ours) >= 3, [p.details for p in ours]
    assert all(p.details["error"] is None for p in ours), [p.details["error"] for p in ours]
    assert [p.details["terminating"] for p in ours] == [False] * (len(ours) - 1) + [True]
    for push in ours:
        assert set(push.details["metrics"]) == librdkafka_metric_names["producer"]
        assert push.details["scope"] == {"name": push.details["scope"]["name"],
                                         "version": kafka_client.__version__}
        assert push.details["scope"]["name"].startswith("kafka-producer-")
        assert push.details["resource"] == {}  # not transactional
        assert push.details["compression_type"] == 4  # zstd: the broker's first choice
    # cumulative sums: one connection since the client started, counted from its start
    total = "org.apache.kafka.producer.connection.creation.total"
    for push in ours:
        (point,) = points(push, total)
        assert point["value"] == 1
        assert push.details["metrics"][total]["monotonic"] is True
        assert push.details["metrics"][total]["temporality"] == 2
        assert started <= point["start_time_unix_nano"] <= points(ours[0], total)[0][
            "time_unix_nano"]
    assert len({points(p, total)[0]["start_time_unix_nano"] for p in ours}) == 1
    # latencies in ms, per node (broker 1) and over all of them
    middle = ours[1]
    (node,) = points(middle, "org.apache.kafka.producer.node.request.latency.avg")
    assert node["attributes"] == {"node.id": 1}
    assert 0 < node["value"] < 1000
    assert isinstance(value(middle, "org.apache.kafka.producer.request.latency.max"), int)
    # batches wait about linger.ms before they are sent
    assert 0 < value(middle, "org.apache.kafka.producer.record.queue.time.avg") < 500
    assert value(middle, "org.apache.kafka.producer.produce.throttle.time.max") == 0


def test_consumer_pushes_librdkafkas_metrics_with_its_group(cluster, client_id,
                                                          librdkafka_metric_names):
    names = librdkafka_metric_names["consumer"]
    cluster.set_telemetry_subscription([""], push_interval_ms=INTERVAL_MS)
    group = f"tel-group-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "client.id": client_id, "group.id": group,
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    consumer.subscribe(["metrics-in"])
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        consumer.poll(0.1)
    member_id = consumer.memberid()
    consumer.close()
    ours = pushes_of(cluster, client_id)
    assert len(ours) >= 2, [p.details for p in ours]
    assert all(p.details["error"] is None for p in ours)
    assert ours[-1].details["terminating"] is True
    for push in ours:
        assert set(push.details["metrics"]) == names
        assert push.details["scope"]["name"].startswith("kafka-consumer-")
    running = [p for p in ours if not p.details["terminating"]]
    # a push that comes before the member has its partitions (a slow machine) may lack
    # the member id; every push from the first one with the partitions on carries both
    assigned = "org.apache.kafka.consumer.coordinator.assigned.partitions"
    held = [i for i, p in enumerate(running) if value(p, assigned) == 2]
    assert held, [value(p, assigned) for p in running]
    for push in running[:held[0]]:
        assert value(push, assigned) == 0
        assert push.details["resource"]["group_id"] == group
    for push in running[held[0]:]:
        assert push.details["resource"] == {"group_id": group, "member_id": member_id}
        assert value(push, assigned) == 2
    for push in running:
        assert 0.0 <= value(push, "org.apache.kafka.consumer.poll.idle.ratio.avg") <= 1.0
    # the member left before its last push, as librdkafka's does
    assert ours[-1].details["resource"] == {"group_id": group}
    # delta sums (the cluster's default): the rebalance time is counted once, in the push
    # that first showed the partitions held
    total = "org.apache.kafka.consumer.coordinator.rebalance.latency.total"
    rebalance = [value(p, total) for p in ours]
    assert [r > 0 for r in rebalance] == [i == held[0] for i in range(len(ours))], rebalance
    assert ours[0].details["metrics"][total]["temporality"] == 1
    # the Fetch long-polls (fetch.wait.max.ms) show in the fetch latency
    fetch_max = [value(p, "org.apache.kafka.consumer.fetch.manager.fetch.latency.max")
                 for p in running]
    assert max(fetch_max) >= 50, fetch_max

    peer_id = client_id + "-rdkafka"
    peer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                                     "client.id": peer_id, "group.id": group + "-peer",
                                     "auto.offset.reset": "earliest"})
    peer.subscribe(["metrics-in"])
    deadline = time.monotonic() + 10
    while not pushes_of(cluster, peer_id) and time.monotonic() < deadline:
        peer.poll(0.1)
    peer.close()
    theirs = wait_for_pushes(cluster, peer_id, 1)
    assert theirs and set(theirs[0].details["metrics"]) == names


def test_the_admin_client_pushes_the_producer_metrics_as_librdkafkas(
        cluster, client_id, librdkafka_metric_names):
    """librdkafka's AdminClient is a producer handle: it pushes the producer's metrics
    (checked with confluent-kafka's on the test cluster when this was written)."""
    cluster.set_telemetry_subscription([""], push_interval_ms=INTERVAL_MS)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers,
                         "client.id": client_id})
    try:
        assert "metrics-in" in admin.list_topics(timeout=10).topics
        assert wait_for_pushes(cluster, client_id, 1)
    finally:
        admin.close()
    ours = pushes_of(cluster, client_id)
    assert ours[-1].details["terminating"] is True
    for push in ours:
        assert push.details["error"] is None
        assert set(push.details["metrics"]) == librdkafka_metric_names["producer"]
        assert value(push, "org.apache.kafka.producer.record.queue.time.max") == 0
    # its one connection: to the bootstrap server, broker 1 (-1 until matched to it)
    (node,) = points(ours[0], "org.apache.kafka.producer.node.request.latency.max")
    assert node["attributes"]["node.id"] in (-1, 1) and node["value"] >= 0


def test_only_the_metrics_subscribed_are_pushed(cluster, client_id):
    cluster.set_telemetry_subscription(["org.apache.kafka.producer.node.request",
                                        "org.apache.kafka.producer.record"],
                                       push_interval_ms=INTERVAL_MS)
    with Producer({"bootstrap.servers": cluster.bootstrap_servers,
                   "client.id": client_id}) as producer:
        produce_steadily(producer, 0.8)
    ours = pushes_of(cluster, client_id)
    assert ours
    for push in ours:
        assert set(push.details["metrics"]) == {
            "org.apache.kafka.producer.node.request.latency.avg",
            "org.apache.kafka.producer.node.request.latency.max",
            "org.apache.kafka.producer.record.queue.time.avg",
            "org.apache.kafka.producer.record.queue.time.max"}


def test_transactional_producer_names_its_transactional_id(cluster, client_id):
    cluster.set_telemetry_subscription([""], push_interval_ms=INTERVAL_MS)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "client.id": client_id, "transactional.id": client_id})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("metrics-in", b"in a transaction")
    producer.commit_transaction(10)
    producer.close()
    ours = pushes_of(cluster, client_id)
    assert ours and ours[-1].details["terminating"]
    assert all(p.details["resource"] == {"transactional_id": client_id} for p in ours)


def test_nothing_is_asked_or_pushed_with_enable_metrics_push_off(cluster, client_id):
    cluster.set_telemetry_subscription([""], push_interval_ms=INTERVAL_MS)
    since = cluster.clear_request_log()
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": client_id,
                   "enable.metrics.push": False}) as producer:
        produce_steadily(producer, 1.0)
    requests = [e for e in cluster.request_log(since) if e.client_id == client_id]
    assert any(e.api == "Produce" for e in requests)
    assert not [e for e in requests if e.api in ("GetTelemetrySubscriptions",
                                                 "PushTelemetry")]


def test_no_metric_subscribed_asks_again_each_interval_then_pushes(cluster, client_id):
    cluster.set_telemetry_subscription([], push_interval_ms=300)
    since = cluster.clear_request_log()
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "client.id": client_id})
    try:
        time.sleep(1.2)
        asked = [e for e in cluster.request_log(since, api="GetTelemetrySubscriptions")
                 if e.client_id == client_id]
        assert 3 <= len(asked) <= 6, len(asked)
        assert not pushes_of(cluster, client_id)
        # the broker's subscription changes: the client's next question finds it
        cluster.set_telemetry_subscription([""], push_interval_ms=300)
        assert wait_for_pushes(cluster, client_id, 1, timeout=3)
    finally:
        producer.close()


def test_a_new_subscription_is_fetched_when_a_push_is_refused_as_stale(cluster,
                                                                        client_id):
    first = cluster.set_telemetry_subscription([""], push_interval_ms=INTERVAL_MS)
    with Producer({"bootstrap.servers": cluster.bootstrap_servers,
                   "client.id": client_id}) as producer:
        assert wait_for_pushes(cluster, client_id, 1)
        second = cluster.set_telemetry_subscription([""], push_interval_ms=INTERVAL_MS)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            accepted = [p for p in pushes_of(cluster, client_id)
                        if p.details["subscription_id"] == second
                        and p.details["error"] is None]
            if accepted:
                break
            producer.poll(0.05)
    ours = pushes_of(cluster, client_id)
    errors = [(p.details["subscription_id"], p.details["error"]) for p in ours]
    assert (first, "UNKNOWN_SUBSCRIPTION_ID") in errors, errors
    assert errors[-1] == (second, None), errors


def test_the_codec_is_the_first_the_broker_accepts(cluster, client_id):
    cluster.set_telemetry_subscription([""], push_interval_ms=INTERVAL_MS,
                                       compression_types=[CODEC_GZIP])
    with Producer({"bootstrap.servers": cluster.bootstrap_servers,
                   "client.id": client_id + "-gzip"}):
        gzip = wait_for_pushes(cluster, client_id + "-gzip", 1)
    cluster.set_telemetry_subscription([""], push_interval_ms=INTERVAL_MS,
                                       compression_types=[])
    with Producer({"bootstrap.servers": cluster.bootstrap_servers,
                   "client.id": client_id + "-none"}):
        plain = wait_for_pushes(cluster, client_id + "-none", 1)
    assert gzip and {p.details["compression_type"] for p in gzip} == {CODEC_GZIP}
    assert plain and {p.details["compression_type"] for p in plain} == {0}
    assert all(p.details["error"] is None for p in gzip + plain)


def test_a_broker_refusing_the_payload_stops_the_pushes(cluster, client_id, caplog):
    cluster.set_telemetry_subscription([""], push_interval_ms=300)
    since = cluster.clear_request_log()
    cluster.inject_errors("PushTelemetry", ["INVALID_RECORD"])
    with caplog.at_level(logging.WARNING, logger="kafka_client.telemetry"):
        with Producer({"bootstrap.servers": cluster.bootstrap_servers,
                       "client.id": client_id}) as producer:
            produce_steadily(producer, 1.5)
    requests = [e for e in cluster.request_log(since, api="PushTelemetry")
                if e.client_id == client_id]
    # the refused one only: no push after it, not even the terminating one
    assert [e.injected_error for e in requests] == ["INVALID_RECORD"]
    assert "Telemetry disabled" in caplog.text and "INVALID_RECORD" in caplog.text


def test_metrics_over_the_brokers_limit_are_not_sent(cluster, client_id, caplog):
    cluster.set_telemetry_subscription([""], push_interval_ms=300, max_bytes=40)
    since = cluster.clear_request_log()
    with caplog.at_level(logging.WARNING, logger="kafka_client.telemetry"):
        with Producer({"bootstrap.servers": cluster.bootstrap_servers,
                       "client.id": client_id}) as producer:
            produce_steadily(producer, 1.0)
    assert not [e for e in cluster.request_log(since, api="PushTelemetry")
                if e.client_id == client_id]
    assert "exceed the broker's limit of 40" in caplog.text


def test_close_waits_for_the_last_push_at_most_a_second(cluster, client_id):
    cluster.set_telemetry_subscription([""], push_interval_ms=INTERVAL_MS)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "client.id": client_id})
    try:
        assert wait_for_pushes(cluster, client_id, 1)
        cluster.set_latency(5, apis=["PushTelemetry"])
        started = time.monotonic()
        producer.close()
        took = time.monotonic() - started
    finally:
        cluster.set_latency(0)
    assert 0.9 <= took < 3.0, took
