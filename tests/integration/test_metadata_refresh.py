"""The periodic metadata refresh (topic.metadata.refresh.interval.ms) of clients that
want no topic: one request per interval at most, counted at the broker."""
from __future__ import annotations

import logging
import time

import pytest

from kafka_client import Consumer, Producer
from kafka_client.admin import AdminClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_idle_clients_refresh_metadata_once_per_interval(kafka_cluster):
    """A Producer not used yet, a Consumer before subscribe() and an AdminClient: once
    their first periodic refresh was due, each sent a Metadata request on every turn of
    its I/O loop (thousands a second) for as long as it lived."""
    base = {"bootstrap.servers": kafka_cluster.bootstrap_servers,
            "topic.metadata.refresh.interval.ms": 200}
    clients = {
        "idle-producer": Producer(dict(base, **{"client.id": "idle-producer"})),
        "idle-consumer": Consumer(dict(base, **{"client.id": "idle-consumer",
                                               "group.id": "idle"})),
        "idle-admin": AdminClient(dict(base, **{"client.id": "idle-admin"})),
    }
    try:
        start = kafka_cluster.clear_request_log()
        for client in clients.values():
            client.list_topics(timeout=10)
        time.sleep(2.0)
        sent = {name: 0 for name in clients}
        for entry in kafka_cluster.request_log(since=start, api="Metadata"):
            if entry.client_id in sent:
                sent[entry.client_id] += 1
        assert all(n >= 1 for n in sent.values()), sent    # list_topics() at least
        # 2 s at one refresh per 0.2 s: about 10 each (the bug made thousands).
        assert all(n <= 15 for n in sent.values()), sent
    finally:
        for name, client in clients.items():
            if name != "idle-admin":
                client.close()


def test_closing_with_a_metadata_request_in_flight_logs_no_warning(kafka_cluster, caplog):
    """close() fails the requests still in flight with _DESTROY; the metadata cache's
    request logged that as 'Metadata request to HOST:PORT failed: client is closing', a
    warning about nothing but the close the application asked for (librdkafka logs
    nothing for requests its destroy ends). It showed up at random under the guides'
    examples; a slow Metadata answer makes it certain."""
    caplog.set_level(logging.WARNING, logger="kafka_client")
    kafka_cluster.set_latency(2, apis=["Metadata"])
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    producer.produce("closing-with-metadata-in-flight", b"x")
    time.sleep(0.3)                 # the topic's Metadata request waits at the broker
    producer.close(0.1)             # the message is not delivered: that warning is expected
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == ["Producer terminating with 1 messages (1 bytes) still in queue or "
                        "transit: use flush() to wait for outstanding message delivery"]


def test_a_producer_forgets_topics_idle_for_metadata_max_idle(kafka_cluster):
    """A producer writing once to each of many topics: every Metadata request named every
    topic it had ever produced to, for its whole life (thousands of topics later, each
    refresh was hundreds of KB). Topics idle for metadata.max.idle.ms (the Java
    producer's) are forgotten; one still produced to is kept, and a forgotten one
    produced to again is asked for again and its messages delivered."""
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers,
                         "client.id": "idle-topics", "linger.ms": 0,
                         "metadata.max.idle.ms": 5000,
                         "topic.metadata.refresh.interval.ms": 500})
    delivered = []

    def on_delivery(err, msg):
        assert err is None, err
        delivered.append((msg.topic(), msg.offset()))
    try:
        for i in range(30):
            producer.produce(f"once-{i}", b"v", on_delivery=on_delivery)
        producer.produce("busy", b"v", on_delivery=on_delivery)
        assert producer.flush(30) == 0
        assert len(delivered) == 31
        # Every refresh names the 31 topics, until they have been idle for 5 s; "busy"
        # is produced to all along.
        def keep_busy(seconds):
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                producer.produce("busy", b"v", on_delivery=on_delivery)
                producer.poll(0)
                time.sleep(0.2)

        start = kafka_cluster.clear_request_log()
        keep_busy(2.0)
        asked_before = [e.details["requested_topics"]
                        for e in kafka_cluster.request_log(since=start, api="Metadata")
                        if e.client_id == "idle-topics"]
        assert asked_before and min(asked_before) == 31, asked_before
        keep_busy(5.0)
        start = kafka_cluster.clear_request_log()
        keep_busy(2.0)
        asked = [e.details["requested_topics"]
                 for e in kafka_cluster.request_log(since=start, api="Metadata")
                 if e.client_id == "idle-topics"]
        assert asked and max(asked) == 1, asked    # "busy" alone
        producer.produce("once-3", b"again", on_delivery=on_delivery)
        assert producer.flush(30) == 0
        assert delivered[-1] == ("once-3", 1)      # its second message, in the log
    finally:
        producer.close()
