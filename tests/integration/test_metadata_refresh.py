"""The periodic metadata refresh (topic.metadata.refresh.interval.ms) of clients that
want no topic: one request per interval at most, counted at the broker."""
from __future__ import annotations

import logging
import time

import pytest

from kafka_client import Consumer, Producer, TopicPartition
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
        assert asked_before and max(asked_before) == 31, asked_before
        keep_busy(6.0)
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


def _next_message(consumer, timeout):
    """The next message, past error events (a deleted topic's partitions report
    UNKNOWN_TOPIC_OR_PART, as librdkafka's do)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(max(0.0, deadline - time.monotonic()))
        if msg is not None and msg.error() is None:
            return msg
    return None


def _keep_polling(consumers, seconds):
    """Poll (rebalance callbacks run there) for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.poll(0.05)


def _named_topics(cluster, since, client_id):
    """How many topics each Metadata request of ``client_id`` named (a request for every
    topic, a pattern subscription's, is left out)."""
    return [e.details["requested_topics"]
            for e in cluster.request_log(since=since, api="Metadata")
            if e.client_id == client_id and e.details["requested_topics"] is not None]


def test_a_consumer_forgets_the_topics_it_no_longer_subscribes_to_or_is_assigned(
        kafka_cluster):
    """Subscribed to one topic after another, or assigned one after another (looking up
    others' watermarks meanwhile): every Metadata refresh named every topic the consumer
    had ever had, for its life (the Java consumer keeps the subscribed, assigned and
    looked-up ones; librdkafka keeps them all). Now only the current ones."""
    topics = [f"churn-{i}" for i in range(8)]
    for name in topics:
        kafka_cluster.create_topic(name, partitions=1)
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    for name in topics:
        producer.produce(name, name.encode())
    assert producer.flush(30) == 0
    producer.close()
    base = {"bootstrap.servers": kafka_cluster.bootstrap_servers,
            "topic.metadata.refresh.interval.ms": 300, "auto.offset.reset": "earliest"}
    subscriber = Consumer(dict(base, **{"client.id": "churn-subscriber", "group.id": "churn",
                                        "heartbeat.interval.ms": 200,
                                        "session.timeout.ms": 6000}))
    assigned = Consumer(dict(base, **{"client.id": "churn-assigned", "group.id": "churn-m",
                                      "enable.auto.commit": False}))
    try:
        for i, name in enumerate(topics):
            subscriber.subscribe([name])
            assigned.assign([TopicPartition(name, 0)])
            assigned.get_watermark_offsets(TopicPartition(topics[i - 3], 0), timeout=10)
            for consumer in (subscriber, assigned):
                msg = _next_message(consumer, 15)
                assert msg is not None and msg.value() == name.encode(), msg
        _keep_polling([subscriber, assigned], 2.0)  # the refreshes that forget the old
        start = kafka_cluster.clear_request_log()
        _keep_polling([subscriber, assigned], 1.5)
        for client_id in ("churn-subscriber", "churn-assigned"):
            named = _named_topics(kafka_cluster, start, client_id)
            assert named and max(named) == 1, (client_id, named)   # churn-7 alone
    finally:
        subscriber.close()
        assigned.close()


def test_a_pattern_subscription_forgets_deleted_topics(kafka_cluster):
    """Topics matching a pattern, created and deleted one after another: each stayed in
    the cache and in every refresh for the consumer's life. Now the refreshes name the
    live ones, and a new match is still consumed."""
    consumer = Consumer({"bootstrap.servers": kafka_cluster.bootstrap_servers,
                         "client.id": "pattern-churn", "group.id": "pattern-churn",
                         "topic.metadata.refresh.interval.ms": 300,
                         "heartbeat.interval.ms": 200, "session.timeout.ms": 6000,
                         "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    try:
        consumer.subscribe(["^rolling-.*"])
        for i in range(8):
            name = f"rolling-{i}"
            kafka_cluster.create_topic(name, partitions=1)
            producer.produce(name, name.encode())
            assert producer.flush(30) == 0
            msg = _next_message(consumer, 15)
            assert msg is not None and msg.value() == name.encode(), msg
            if i >= 2:
                kafka_cluster.delete_topic(f"rolling-{i - 2}")
        _keep_polling([consumer], 3.0)  # the rebalance that drops the deleted one
        start = kafka_cluster.clear_request_log()
        _keep_polling([consumer], 1.5)
        named = _named_topics(kafka_cluster, start, "pattern-churn")
        assert named and max(named) <= 2, named    # rolling-6 and rolling-7
        assert set(consumer._cluster.metadata.topics) <= {"rolling-6", "rolling-7"} | {
            t for t in kafka_cluster.topics() if not t.startswith("rolling-")}
    finally:
        producer.close()
        consumer.close()
