"""A consumer across leader moves on the test cluster: the old leader's
NOT_LEADER_OR_FOLLOWER answer names the new leader (KIP-951), and the consumer fetches
there at once instead of after fetch.error.backoff.ms and a metadata round trip; a
position check there answered an error not about the leader holds the partition until a
check succeeds, told once."""
from __future__ import annotations

import time

import pytest

from kafka_client import Consumer, KafkaError, Producer, TopicPartition

from fill_and_read import produce_numbered, read_values  # fill_and_read.py beside

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_the_new_leader_named_in_the_answer_is_fetched_from_at_once(tmp_path):
    from kafka_client.testing import Cluster
    with Cluster(brokers=3, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("moving", partitions=1, replication_factor=3)
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 1})
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "mover",
                      "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
                      "fetch.error.backoff.ms": 1000})
        got = []
        gaps = []
        try:
            c.assign([TopicPartition("moving", 0)])
            n = 0
            for _move in range(4):
                for _ in range(20):
                    p.produce("moving", b"%d" % n, partition=0)
                    n += 1
                assert p.flush(10) == 0
                deadline = time.monotonic() + 10
                while len(got) < n:
                    assert time.monotonic() < deadline
                    got.extend(m.value() for m in c.consume(50, 0.05) if m.error() is None)
                since = cluster.clear_request_log()
                moved_at = time.time()
                new = cluster.move_leader("moving", 0)
                deadline = time.monotonic() + 10
                while True:
                    assert time.monotonic() < deadline, "no fetch at the new leader"
                    c.consume(50, 0.05)
                    served = [e for e in cluster.request_log(since, api="Fetch")
                              if e.client_id == "mover" and e.broker == new and not e.errors]
                    if served:
                        break
                gaps.append(served[0].time - moved_at)
        finally:
            c.close()
            p.close()
        assert got == [b"%d" % i for i in range(80)]
        # The Fetch waiting at the old leader (up to fetch.wait.max.ms) is answered
        # NOT_LEADER_OR_FOLLOWER naming the new one; then a round trip or two (the
        # position is checked there first), not the 1 s fetch error backoff.
        assert max(gaps) < 0.5, gaps


@pytest.mark.parametrize("group", [False, True], ids=["assigned", "subscribed"])
def test_a_leader_gone_while_no_fetch_waits_there_is_found_again(tmp_path, group):
    """The leader's broker stops while the partition is paused (no Fetch in flight, so no
    failed answer to learn from): once resumed, the failed connection attempt makes the
    consumer ask for the metadata and fetch from the new leader. (It retried the dead
    broker until the metadata's periodic refresh, minutes later; librdkafka took 2.4 s.)"""
    from kafka_client.testing import Cluster
    with Cluster(brokers=3, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("moving", assignments=[[1, 2, 3]])    # leader 1
        produce_numbered(cluster.bootstrap_servers, "moving", 0, 100)
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "g",
                      "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
        tp = TopicPartition("moving", 0)
        got = []

        try:
            if group:
                c.subscribe(["moving"])
            else:
                c.assign([TopicPartition("moving", 0, 0)])
            read_values(c, got, 100, 20)
            c.pause([tp])
            time.sleep(0.5)          # the Fetch waiting at the leader comes back empty
            cluster.stop_broker(1)
            assert cluster.leader("moving", 0) != 1
            produce_numbered(cluster.bootstrap_servers, "moving", 100, 200)
            c.resume([tp])
            read_values(c, got, 200, 10)
        finally:
            c.close()
        assert got == [b"%d" % i for i in range(200)]


def test_a_new_leader_gone_before_the_position_is_confirmed_there_is_found_again(tmp_path):
    """The consumer learns of a new leader (and epoch) while its partition is paused, and
    that leader stops too before the position is confirmed with it (KIP-320): the failed
    connection attempt makes it ask for the metadata again and go to the third leader.
    (It waited for the dead one until the metadata's periodic refresh.)"""
    from kafka_client.testing import Cluster
    with Cluster(brokers=3, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("moving", assignments=[[1, 2, 3]])    # leader 1
        produce_numbered(cluster.bootstrap_servers, "moving", 0, 50)
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                      "fetch.wait.max.ms": 100})
        tp = TopicPartition("moving", 0)
        got = []

        try:
            c.assign([TopicPartition("moving", 0, 0)])
            read_values(c, got, 50, 20)
            c.pause([tp])
            time.sleep(0.5)          # the Fetch waiting at the leader comes back empty
            cluster.move_leader("moving", 0, 2)
            # The consumer's metadata learns of leader 2 (the cache is shared).
            assert c.list_topics("moving", timeout=10).topics["moving"].partitions[0] \
                .leader == 2
            cluster.stop_broker(2)
            assert cluster.leader("moving", 0) == 3
            produce_numbered(cluster.bootstrap_servers, "moving", 50, 100)
            c.resume([tp])
            read_values(c, got, 100, 10)
        finally:
            c.close()
        assert got == [b"%d" % i for i in range(100)]


def test_the_metadata_asked_for_an_unreachable_leader_goes_out_at_once(tmp_path):
    """The leader stopped while the partition was paused; resumed, the fetcher finds its
    connection in the reconnect backoff and asks for the metadata. That request goes out
    at once: asked from the fetcher's tick, after the cluster's tick of the same loop
    turn, it waited for the next turn, when the backoff ended (up to 3 s here, with
    reconnect.backoff.ms=2000; 0.15-0.3 s by default; librdkafka 0.14 s)."""
    from kafka_client.testing import Cluster
    with Cluster(brokers=3, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("moving", assignments=[[1, 2, 3]])    # leader 1
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                      "fetch.wait.max.ms": 100, "reconnect.backoff.ms": 2000})
        tp = TopicPartition("moving", 0)
        got = []

        try:
            produce_numbered(cluster.bootstrap_servers, "moving", 0, 50)
            c.assign([TopicPartition("moving", 0, 0)])
            read_values(c, got, 50, 20)
            c.pause([tp])
            time.sleep(0.5)          # the Fetch waiting at the leader comes back empty
            cluster.stop_broker(1)   # its connections drop: in their reconnect backoff
            produce_numbered(cluster.bootstrap_servers, "moving", 50, 100)
            c.resume([tp])
            read_values(c, got, 100, 0.7)
        finally:
            c.close()
        assert got == [b"%d" % i for i in range(100)]


@pytest.mark.parametrize("error", ["UNKNOWN_SERVER_ERROR", "TOPIC_AUTHORIZATION_FAILED"])
def test_a_position_check_failing_not_for_the_leader_is_told_once_and_holds_the_partition(
        tmp_path, error):
    """After a leader move the position is checked at the new leader (OffsetForLeaderEpoch)
    and answered ``error`` twice, an error not about the leader: the application is told
    once, the partition is not fetched until a check succeeds, then every message is read
    once, in order."""
    from kafka_client.testing import Cluster
    with Cluster(brokers=3, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("checked", partitions=1, replication_factor=3)
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 1})
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "checker",
                      "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
                      "fetch.error.backoff.ms": 200})
        got: list = []
        told: list = []

        def consume_until(n: int) -> None:
            deadline = time.monotonic() + 15
            while len(got) < n:
                assert time.monotonic() < deadline, (len(got), told)
                for m in c.consume(50, 0.05):
                    (told.append(m.error()) if m.error() is not None
                     else got.append(int(m.value())))
        try:
            c.assign([TopicPartition("checked", 0)])
            for i in range(20):
                p.produce("checked", b"%d" % i, partition=0)
            assert p.flush(10) == 0
            consume_until(20)
            since = cluster.clear_request_log()
            cluster.inject_errors("OffsetForLeaderEpoch", [error, error])
            new = cluster.move_leader("checked", 0)
            for i in range(20, 40):
                p.produce("checked", b"%d" % i, partition=0)
            assert p.flush(10) == 0
            consume_until(40)
            for m in c.consume(50, 0.5):       # nothing more comes, no second report
                (told.append(m.error()) if m.error() is not None
                 else got.append(int(m.value())))
            checks = [e for e in cluster.request_log(since, api="OffsetForLeaderEpoch")
                      if e.client_id == "checker"]
            fetches = [e for e in cluster.request_log(since, api="Fetch")
                       if e.client_id == "checker" and e.broker == new]
        finally:
            cluster.clear_faults()
            c.close()
            p.close()
        assert got == list(range(40))
        assert [e.code() for e in told] == [getattr(KafkaError, error)], told
        assert [e.errors for e in checks[:3]] == [[error], [error], []], checks
        # held: no Fetch at the new leader before its position check succeeded
        assert fetches and min(e.seq for e in fetches) > checks[2].seq
