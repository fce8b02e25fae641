"""A consumer whose Fetch is cut off by a lost connection, on the test cluster: the
partitions are fetched again as soon as the connection (or the new leader's) is up, as
librdkafka does, not after fetch.error.backoff.ms on top of the reconnect backoff."""
from __future__ import annotations

import time

import pytest

from kafka_client import Consumer, TopicPartition

from fill_and_read import produce_numbered, read_values  # fill_and_read.py beside

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.mark.parametrize("fault", ["cut", "stop"])
def test_a_fetch_cut_off_by_a_lost_connection_is_sent_again_at_once(tmp_path, fault):
    """The leader's connection goes (cut, or the broker stops) while a Fetch waits there:
    the next messages come within the reconnect backoff and a metadata round trip. (They
    waited fetch.error.backoff.ms too, 3 s here; librdkafka: 0.07 s after a cut.)"""
    from kafka_client.testing import Cluster
    with Cluster(brokers=3, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("cut", assignments=[[1, 2, 3]])    # leader 1
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                      "fetch.wait.max.ms": 500, "fetch.error.backoff.ms": 3000})
        got = []

        try:
            produce_numbered(cluster.bootstrap_servers, "cut", 0, 50)
            c.assign([TopicPartition("cut", 0, 0)])
            read_values(c, got, 50, 20)
            time.sleep(0.2)           # the next Fetch waits at the leader
            if fault == "cut":
                assert cluster.cut_connections(1) > 0
            else:
                cluster.stop_broker(1)
            produce_numbered(cluster.bootstrap_servers, "cut", 50, 100)
            read_values(c, got, 100, 1.5)
        finally:
            c.close()
        assert got == [b"%d" % i for i in range(100)]
