"""An idle client whose brokers all restart, two of them at new addresses (a broker's
pod rescheduled elsewhere), on the test cluster: the bootstrap broker, back at its
address, gives the new ones, and the client goes there."""
from __future__ import annotations

import time

import pytest

from kafka_client import Producer
from kafka_client._testing.brokers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_an_idle_producer_follows_brokers_restarted_at_new_addresses(tmp_path):
    """(It kept trying the old addresses, at its reconnect backoff, for ever: nothing
    delivered in 40 s; librdkafka 1.3 s, here 0.1 s.)"""
    from kafka_client.testing import Cluster
    bootstrap_port = free_port()
    before = Cluster(brokers=3, data_dir=str(tmp_path / "before"),
                     ports=[bootstrap_port, free_port(), free_port()])
    delivered = []
    p = Producer({"bootstrap.servers": f"127.0.0.1:{bootstrap_port}", "linger.ms": 5})
    try:
        with before:
            before.create_topic("moved", assignments=[[2, 3, 1]])      # leader 2
            p.produce("moved", b"before", partition=0)
            assert p.flush(10) == 0
        with Cluster(brokers=3, data_dir=str(tmp_path / "after"),
                     ports=[bootstrap_port, free_port(), free_port()]) as after:
            after.create_topic("moved", assignments=[[2, 3, 1]])
            p.produce("moved", b"after", partition=0,
                      on_delivery=lambda err, msg: delivered.append(err))
            started = time.monotonic()
            assert p.flush(10) == 0, f"undelivered after {time.monotonic() - started} s"
            assert delivered == [None]
            assert after.partition("moved", 0).high_watermark == 1
    finally:
        p.purge()            # what a failed run left undelivered: close() at once
        p.close()
