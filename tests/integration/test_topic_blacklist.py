"""topic.blacklist on real brokers: the hidden topics are missing from what a regex
subscription is assigned, as if they did not exist, and list_topics() still lists them,
as confluent-kafka's does (librdkafka's rd_kafka_metadata() answers what the broker says;
the blacklist keeps topics out of the client's cache only); the other topics are
untouched."""
from __future__ import annotations

import time
import uuid

from kafka_client import AdminClient, Consumer, Producer

try:
    import confluent_kafka as ck
except ImportError:     # the comparison is skipped without it
    ck = None


def test_hidden_topics_leave_list_topics_and_regex_subscriptions(noida_broker):
    prefix = f"bl-{uuid.uuid4().hex[:6]}"
    shown, hidden = f"{prefix}-shown", f"{prefix}-hidden"
    noida_broker.create_topic(shown, partitions=2)
    noida_broker.create_topic(hidden, partitions=1)
    conf = {"bootstrap.servers": noida_broker.bootstrap, "topic.blacklist": "-hidden$"}

    p = Producer(conf)
    theirs = ck.Producer(dict(conf, log_level=0)) if ck is not None else None
    try:
        for client in (p, theirs) if theirs is not None else (p,):
            assert {shown, hidden} <= set(client.list_topics(timeout=10).topics)
            assert hidden in client.list_topics(hidden, timeout=10).topics  # by name too
    finally:
        p.close()
    admin = AdminClient(conf)
    try:
        assert hidden in admin.list_topics(timeout=10).topics
    finally:
        admin.close()

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
