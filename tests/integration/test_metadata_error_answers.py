"""A producer's messages for a topic whose metadata answer carries a topic error, on the
test cluster (each answer injected): a retriable one (LEADER_NOT_AVAILABLE, Kafka's
answer for a topic being created) keeps them waiting until an answer names the leaders,
then each is delivered once, in order; one that will not change (INVALID_TOPIC_EXCEPTION)
fails them at once with that error, not at message.timeout.ms."""
from __future__ import annotations

import time
from typing import List, Tuple

import pytest

from kafka_client import Consumer, KafkaError, Producer, TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from kafka_client.testing import Cluster

    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("cluster"))) as c:
        yield c


def _producer(cluster) -> Producer:
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5,
                  "message.timeout.ms": 30_000, "retry.backoff.ms": 50,
                  "retry.backoff.max.ms": 100})
    # Connected before the injected answers, knowing nothing of the tested topic yet
    # (so that its first produce() asks for its metadata).
    if "md-warm-up" not in cluster.topics():
        cluster.create_topic("md-warm-up", partitions=1)
    p.list_topics(topic="md-warm-up", timeout=10)
    return p


def _on_delivery(reports: List[Tuple]):
    return lambda err, msg: reports.append((err, int(msg.value()), msg.offset()))


def test_a_retriable_topic_error_keeps_messages_waiting_then_delivers_them(cluster):
    topic = "md-leader-not-available"
    cluster.create_topic(topic, partitions=1)
    reports: List[Tuple] = []
    p = _producer(cluster)
    try:
        since = cluster.clear_request_log()
        cluster.inject_errors("Metadata", ["LEADER_NOT_AVAILABLE"] * 2)
        for i in range(5):
            p.produce(topic, b"%d" % i, partition=0, on_delivery=_on_delivery(reports))
        assert p.flush(20) == 0
    finally:
        p.close(5)
    assert [(e, v) for e, v, _ in reports] == [(None, i) for i in range(5)], reports
    assert [o for _, _, o in reports] == list(range(5))
    injected = [e for e in cluster.request_log(since, api="Metadata") if e.injected_error]
    assert len(injected) == 2, injected
    # nothing written twice: the log ends where the last report says
    with Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                   "group.id": "md-check"}) as c:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 5)


def test_a_topic_error_that_will_not_change_fails_the_messages_at_once(cluster):
    topic = "md-invalid-topic"
    cluster.create_topic(topic, partitions=1)
    reports: List[Tuple] = []
    p = _producer(cluster)
    try:
        cluster.inject_errors("Metadata", ["INVALID_TOPIC_EXCEPTION"])
        start = time.monotonic()
        for i in range(3):
            p.produce(topic, b"%d" % i, on_delivery=_on_delivery(reports))
        assert p.flush(20) == 0
        took = time.monotonic() - start
    finally:
        p.close(5)
    assert [(e.code() if e else None, v) for e, v, _ in reports] == \
        [(KafkaError.TOPIC_EXCEPTION, i) for i in range(3)], reports
    assert took < 5, took
