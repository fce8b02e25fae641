"""Offset lookups (get_watermark_offsets, offsets_for_times) of partitions that have no
leader because they do not exist: once a metadata answer newer than the call says so,
the call fails at once (_UNKNOWN_PARTITION, as librdkafka's do when no partition asked
for exists), instead of waiting for a leader until its timeout and saying _TIMED_OUT.
On the test cluster, topics not created on demand."""
from __future__ import annotations

import time

import pytest

from kafka_client import Consumer, KafkaError, KafkaException, TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TIMEOUT = 20.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from kafka_client.testing import Cluster

    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("cluster")),
                 broker_config={"auto.create.topics.enable": False}) as c:
        yield c


@pytest.fixture
def consumer(cluster):
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "lookups"})
    try:
        yield c
    finally:
        c.close()


def _fails_fast(call) -> KafkaError:
    start = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        call()
    took = time.monotonic() - start
    assert took < TIMEOUT / 4, (took, raised.value)
    return raised.value.args[0]


def test_watermarks_of_a_topic_that_does_not_exist(cluster, consumer):
    err = _fails_fast(lambda: consumer.get_watermark_offsets(
        TopicPartition("no-such-topic", 0), timeout=TIMEOUT))
    # the call fails as a whole, as librdkafka's: no partition asked for has a leader
    assert err.code() == KafkaError._UNKNOWN_PARTITION, err
    assert "does not exist" in err.str(), err
    assert "no-such-topic" not in cluster.topics()


def test_offsets_for_times_of_a_partition_past_the_last(cluster, consumer):
    cluster.create_topic("two-partitions", partitions=2)
    ok = consumer.offsets_for_times([TopicPartition("two-partitions", 1, 0)], timeout=TIMEOUT)
    assert ok[0].error is None and ok[0].offset == -1    # empty: no such message (END)
    err = _fails_fast(lambda: consumer.offsets_for_times(
        [TopicPartition("two-partitions", 2, 0)], timeout=TIMEOUT))
    assert err.code() == KafkaError._UNKNOWN_PARTITION, err
