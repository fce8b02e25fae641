"""The broker fixtures themselves: reachable, topics can be created, noida-db restarts."""
from __future__ import annotations

import socket
import time

import pytest

from kafka_client._testing.brokers import free_port, probe_api_versions

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")


def test_broker_answers_and_creates_topics(broker, topic_name):
    assert broker.bootstrap == f"127.0.0.1:{broker.port}"
    assert probe_api_versions(broker.host, broker.port)
    broker.create_topic(topic_name, partitions=3)
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5)
    assert sorted(md.topics[topic_name].partitions) == [0, 1, 2]


def test_connect_gives_a_negotiated_connection(broker):
    with broker.connect(client_id="fixture-test", timeout=5) as conn:
        assert (conn.host, conn.port) == (broker.host, broker.port)
        assert conn.versions[18] == conn.api_versions_version


def test_probe_fails_on_closed_port():
    port = free_port()
    assert not probe_api_versions("127.0.0.1", port, timeout=0.5)


def _produce(bootstrap, topic, values):
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    now = int(time.time() * 1000)
    for v in values:
        p.produce(topic, value=v, timestamp=now)
    assert p.flush(10) == 0


def _consume_all(bootstrap, topic, n, timeout=10.0):
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "fixture-test",
                                  "enable.auto.commit": False})
    try:
        c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
        return got
    finally:
        c.close()


def test_noida_restart_keeps_data(fresh_noida_broker, topic_name):
    b = fresh_noida_broker
    b.create_topic(topic_name)
    values = [b"before-restart-%d" % i for i in range(5)]
    _produce(b.bootstrap, topic_name, values)
    port = b.port
    b.restart()
    assert b.port == port and b.running
    assert _consume_all(b.bootstrap, topic_name, 5) == values


def test_noida_stopped_refuses_connections(fresh_noida_broker):
    b = fresh_noida_broker
    b.stop()
    assert not b.running
    with pytest.raises(OSError):
        socket.create_connection((b.host, b.port), timeout=1).close()
    b.start()
    assert probe_api_versions(b.host, b.port)
