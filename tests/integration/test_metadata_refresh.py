"""The periodic metadata refresh (topic.metadata.refresh.interval.ms) of clients that
want no topic: one request per interval at most, counted at the broker."""
from __future__ import annotations

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
