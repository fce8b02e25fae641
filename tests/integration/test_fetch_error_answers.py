"""A Fetch answered with a broker error that is not about the leader (the partition
stays where it is): the consumer says so once per partition and error, with where and
from whom, backs off and fetches again from the same offset, so that when the broker
answers again every message arrives once, in order. On the test cluster."""
from __future__ import annotations

import time
from typing import List

import pytest

from kafka_client import Consumer, KafkaError, Producer, TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from kafka_client.testing import Cluster

    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("cluster"))) as c:
        yield c


def _produce(cluster, topic: str, numbers: range) -> None:
    with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as p:
        for n in numbers:
            p.produce(topic, b"%d" % n, partition=0)
        assert p.flush(10) == 0


def test_fetch_error_is_told_once_and_the_fetch_resumes_at_the_same_offset(cluster):
    topic = "fetch-errors"
    cluster.create_topic(topic, partitions=1)
    _produce(cluster, topic, range(5))
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "fetch-errors",
                  "fetch.wait.max.ms": 50, "fetch.error.backoff.ms": 50})
    values: List[int] = []
    errors: List[KafkaError] = []

    def consume_until(count: int, errors_seen: int = 0) -> None:
        deadline = time.monotonic() + 20
        while (len(values) < count or len(errors) < errors_seen) and \
                time.monotonic() < deadline:
            for m in c.consume(100, 0.1):
                if m.error() is not None:
                    errors.append(m.error())
                else:
                    values.append(int(m.value()))

    try:
        c.assign([TopicPartition(topic, 0, 0)])
        consume_until(5)
        since = cluster.clear_request_log()
        cluster.inject_errors("Fetch", ["UNKNOWN_SERVER_ERROR"] * 3)
        consume_until(5, errors_seen=1)
        cluster.wait_for(lambda: not cluster.pending_errors())
        _produce(cluster, topic, range(5, 10))
        consume_until(10)
        assert values == list(range(10)), values
        assert [e.code() for e in errors] == [KafkaError.UNKNOWN], errors
        assert "Fetch from broker" in errors[0].str() and "offset 5" in errors[0].str()
        fetched = cluster.request_log(since, api="Fetch")
        refused = [e for e in fetched if e.injected_error]
        assert len(refused) == 3, fetched
        # After the refusals the same offset is asked again (the refused requests'
        # details are not logged: they were not executed).
        after = next(e for e in fetched if e.seq > refused[-1].seq)
        assert after.details["fetch_session"]["requested"] == [[topic, 0, 5]], after
    finally:
        c.close()
