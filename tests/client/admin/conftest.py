"""Fixtures of the admin client tests against fake brokers (fake_cluster.py)."""
from __future__ import annotations

import pytest

from kafka_client.admin import AdminClient


@pytest.fixture
def admins():
    """``make(cluster, **conf)``: an AdminClient on a FakeCluster with short retry
    backoffs; every one made is closed after the test."""
    made = []

    def make(cluster, **conf):
        a = AdminClient({"bootstrap.servers": cluster.bootstrap, "retry.backoff.ms": 10,
                         "retry.backoff.max.ms": 50, **conf})
        made.append(a)
        return a

    yield make
    for a in made:
        a.close()
