"""confluent-kafka drop-in: small programs written the way confluent-kafka users write them
(Stack Overflow answers, tutorials, issue threads), run against confluent-kafka and ours on
the test cluster, comparing what a program would branch on."""
from __future__ import annotations

import importlib
import time

import pytest

ck = pytest.importorskip("confluent_kafka")

from kafka_client.testing import Cluster  # noqa: E402

pytestmark = pytest.mark.integration

IMPLS = ("confluent_kafka", "kafka_client")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One broker that does not create topics on first use."""
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("programs")),
                 broker_config={"auto.create.topics.enable": "false"}) as c:
        yield c


def side_by_side(program, *args):
    """``program(module, *args)`` for confluent-kafka and ours: {module name: result}."""
    return {impl: program(importlib.import_module(impl), impl, *args) for impl in IMPLS}


def produce_to_a_missing_topic(k, impl, bootstrap, topic, conf):
    """Produce one message to a topic that does not exist, flush, and try again: the
    delivery report's error code, and what the second produce() does."""
    p = k.Producer({"bootstrap.servers": bootstrap, **conf})
    reports = []
    started = time.monotonic()
    p.produce(f"{topic}-{impl}", b"x",
              on_delivery=lambda err, msg: reports.append((err.code(), time.monotonic())))
    assert p.flush(15) == 0
    try:
        p.produce(f"{topic}-{impl}", b"again")
        again = "queued"
    except k.KafkaException as e:
        again = e.args[0].name()
    p.purge()
    p.flush(0)
    return [(code, round(at - started)) for code, at in reports], again


@pytest.mark.parametrize("conf", [
    {"message.timeout.ms": 3000},                                           # times out first
    {"message.timeout.ms": 10000, "topic.metadata.propagation.max.ms": 2000},
], ids=["message-timeout-first", "propagation-time-first"])
def test_a_missing_topic_fails_its_messages_like_librdkafka(cluster, topic_name, conf):
    got = side_by_side(produce_to_a_missing_topic, cluster.bootstrap_servers, topic_name, conf)
    assert got["kafka_client"] == got["confluent_kafka"]
    if "topic.metadata.propagation.max.ms" in conf:
        # known not to exist: its message fails with the broker's error, produce() refuses
        assert got["kafka_client"] == ([(ck.KafkaError.UNKNOWN_TOPIC_OR_PART, 2)],
                                       "_UNKNOWN_TOPIC")
    else:
        # message.timeout.ms came first: a timeout, and the topic may still appear
        assert got["kafka_client"] == ([(ck.KafkaError._MSG_TIMED_OUT, 3)], "queued")
