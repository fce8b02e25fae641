"""topic.blacklist on real brokers: the hidden topics are missing from list_topics() and
from what a regex subscription is assigned, as if they did not exist (librdkafka's
semantics); the other topics are untouched."""
from __future__ import annotations

import time
import uuid

from kafka_client import AdminClient, Consumer, Producer


def test_hidden_topics_leave_list_topics_and_regex_subscriptions(noida_broker):
    prefix = f"bl-{uuid.uuid4().hex[:6]}"
    shown, hidden = f"{prefix}-shown", f"{prefix}-hidden"
    noida_broker.create_topic(shown, partitions=2)
    noida_broker.create_topic(hidden, partitions=1)
    conf = {"bootstrap.servers": noida_broker.bootstrap, "topic.blacklist": "-hidden$"}

    p = Producer(conf)
    try:
        everything = p.list_topics(timeout=10).topics
        assert shown in everything and hidden not in everything
        assert hidden not in p.list_topics(hidden, timeout=10).topics  # asked by name too
    finally:
        p.close()
    admin = AdminClient(conf)
    try:
        assert hidden not in admin.list_topics(timeout=10).topics
    finally:
        admin.close()
    # Without the property the same client sees both (the broker has them).
    plain = Producer({"bootstrap.servers": noida_broker.bootstrap})
    try:
        assert {shown, hidden} <= set(plain.list_topics(timeout=10).topics)
    finally:
        plain.close()

    c = Consumer({**conf, "group.id": f"{prefix}-g", "heartbeat.interval.ms": 300,
                  "session.timeout.ms": 6000, "topic.metadata.refresh.interval.ms": 300})
    try:
        c.subscribe([f"^{prefix}-.*"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(c.assignment()) < 2:
            c.consume(10, 0.2)
        time.sleep(1.0)   # a few metadata refreshes more: the hidden one must not join
        c.consume(10, 0.2)
        assert sorted((tp.topic, tp.partition) for tp in c.assignment()) == [
            (shown, 0), (shown, 1)]
    finally:
        c.close()
