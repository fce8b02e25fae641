"""A request queued on a connection that never becomes ready again times out in the
queue (``_TIMED_OUT_QUEUE``), as librdkafka's requests in a broker's output queue do.

The producer's periodic Metadata request went to the only connection up, behind a
Produce in flight (``max.in.flight.requests.per.connection=1``); the broker then hung
(TCP accepted, nothing answered), and the connection went on setting up again and again.
The queued Metadata request waited there for good, and while it waited no other one was
asked: the producer never learnt that the partition's leader had moved to the other
broker, and the message timed out."""
from __future__ import annotations

import time

import pytest

from kafka_client import Producer
from kafka_client._testing.proxy import FaultProxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_a_metadata_request_queued_behind_a_hung_leader_does_not_stop_the_refreshes(
        tmp_path):
    from kafka_client.testing import Cluster

    with FaultProxy("127.0.0.1", 9) as proxy:
        # Broker 1 is advertised behind the proxy, broker 2 as it is.
        with Cluster(brokers=2, data_dir=str(tmp_path / "cluster"),
                     advertised_ports=[proxy.port]) as cluster:
            proxy.retarget("127.0.0.1", cluster.brokers[0].port)
            cluster.create_topic("moving", assignments=[[1, 2]])      # leader 1
            reports = []
            p = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 0,
                          "max.in.flight.requests.per.connection": 1,
                          "socket.timeout.ms": 2000,
                          "socket.connection.setup.timeout.ms": 4000,
                          "topic.metadata.refresh.interval.ms": 300,
                          "message.timeout.ms": 25000,
                          "on_delivery": lambda err, msg: reports.append(
                              (err, msg.value(), time.monotonic()))})
            try:
                p.produce("moving", b"before", partition=0)
                assert p.flush(10) == 0 and reports[0][0] is None
                proxy.stall()                   # broker 1 hangs: nothing passes
                cluster.move_leader("moving", 0, to=2)
                hung_at = time.monotonic()
                p.produce("moving", b"after", partition=0)
                p.flush(30)
            finally:
                proxy.resume()
                p.close()
            assert [(err, value) for err, value, _ in reports] == \
                [(None, b"before"), (None, b"after")], reports
            # Found within a few setup timeouts of the hung broker, not at
            # message.timeout.ms (it was never found).
            assert reports[1][2] - hung_at < 20
            log = cluster.request_log(api="Produce")
            assert any(e.broker == 2 and not e.errors for e in log)
