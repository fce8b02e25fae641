"""The consumer's fetch sessions (KIP-227) against the test cluster, which keeps them as
Kafka's brokers do: what goes on the wire, what comes back, and that every message is
read once and in order through evictions, lost connections and close."""
from __future__ import annotations

import time
from typing import Dict, List

import pytest

from kafka_client import OFFSET_END, Consumer, Producer, TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PARTITIONS = 40


def _produce(p: Producer, topic: str, partition: int, start: int, count: int) -> None:
    for i in range(start, start + count):
        p.produce(topic, b"%d-%d" % (partition, i), partition=partition)
    assert p.flush(10) == 0


def _read(c: Consumer, got: Dict[int, List[bytes]], total: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while sum(map(len, got.values())) < total:
        assert time.monotonic() < deadline, {k: len(v) for k, v in got.items() if v}
        for m in c.consume(500, 0.05):
            assert m.error() is None, m.error()
            got.setdefault(m.partition(), []).append(m.value())


def _expected(counts: Dict[int, int]) -> Dict[int, List[bytes]]:
    return {p: [b"%d-%d" % (p, i) for i in range(n)] for p, n in counts.items() if n}


def _sessions(cluster, since: int, client: str):
    return [e for e in cluster.request_log(since, api="Fetch") if e.client_id == client]


def _wait_until_a_session_holds(cluster, topic: str, counts: Dict[int, int]) -> None:
    """Until broker 1 has a fetch session holding every partition of ``topic`` at the
    position ``counts`` gives it: the Fetch that told it so (the one after the answer
    that brought the records) has reached the broker. The consumer sends it on its I/O
    thread while the application reads what the answer brought, so on a loaded machine
    it may come only after the application has read it all."""
    want = sorted([topic, q, n] for q, n in counts.items())
    deadline = time.monotonic() + 20
    while not any(sorted(s["partitions"]) == want for s in cluster.fetch_sessions(1)):
        assert time.monotonic() < deadline, cluster.fetch_sessions(1)
        time.sleep(0.01)


def test_only_the_partition_that_moves_goes_over_the_wire(tmp_path):
    """40 partitions, one of which keeps getting data: after the first (full) Fetch the
    requests name only that partition, when its position moved, and the answers carry
    only it; the 39 idle ones are read from the session by the broker, never listed."""
    from kafka_client.testing import Cluster
    with Cluster(brokers=1, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("wide", partitions=PARTITIONS, replication_factor=1)
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 1})
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "wide",
                      "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
        counts = {q: 0 for q in range(PARTITIONS)}
        got: Dict[int, List[bytes]] = {}
        try:
            for q in range(PARTITIONS):
                _produce(p, "wide", q, 0, 3)
                counts[q] = 3
            c.assign([TopicPartition("wide", q) for q in range(PARTITIONS)])
            _read(c, got, sum(counts.values()))
            # The Fetch after the full one names every partition (all moved to 3): the
            # log starts after it.
            _wait_until_a_session_holds(cluster, "wide", counts)
            since = cluster.clear_request_log()
            for _round in range(10):
                _produce(p, "wide", 7, counts[7], 20)
                counts[7] += 20
                _read(c, got, sum(counts.values()))
        finally:
            c.close()
            p.close()
        assert got == _expected(counts)
        fetches = [e for e in _sessions(cluster, since, "wide")
                   if "partitions" in e.details]          # answered ones
        fetches = [e for e in fetches if e.details["fetch_session"]["epoch"] != -1]
        kinds = [e.details["fetch_session"]["kind"] for e in fetches]
        assert set(kinds) == {"incremental"} and len(kinds) >= 6, kinds
        for e in fetches:
            fs = e.details["fetch_session"]
            assert {(t, q) for t, q, _off in fs["requested"]} <= {("wide", 7)}, fs
            assert fs["forgotten"] == []
            answered = {(d["topic"], d["partition"]) for d in e.details["partitions"]}
            assert answered <= {("wide", 7)}, answered
        # Every position of partition 7 the consumer reached was asked for once.
        asked = [off for e in fetches for _t, _q, off in e.details["fetch_session"]["requested"]]
        assert asked == sorted(set(asked)) and asked[-1] <= counts[7]


def test_a_partition_assigned_again_is_answered_though_nothing_is_new(tmp_path):
    """Partitions unassigned and assigned again (at their end, no new data) while the
    broker's session still holds them: their offsets (get_watermark_offsets(cached=True))
    and their end (_PARTITION_EOF) come within the next Fetch. An incremental answer
    leaves out partitions with nothing new, so they used to stay unknown for good (a
    Spark streaming query on a quiet topic failed after 30 s planning its next batch)."""
    from kafka_client.testing import Cluster
    with Cluster(brokers=1, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("quiet", partitions=2, replication_factor=1)
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        _produce(p, "quiet", 0, 0, 5)
        _produce(p, "quiet", 1, 0, 5)
        p.close()
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "again",
                      "fetch.wait.max.ms": 10, "enable.partition.eof": True})
        try:
            for round_ in range(3):
                since = cluster.clear_request_log()
                c.assign([TopicPartition("quiet", q, OFFSET_END) for q in range(2)])
                deadline = time.monotonic() + 5
                ends = set()
                while ends != {0, 1} and time.monotonic() < deadline:
                    for m in c.consume(10, 0.05):
                        assert m.error() is not None and m.offset() == 5, m
                        ends.add(m.partition())
                assert ends == {0, 1}, f"round {round_}: no end of partition for " \
                                        f"{ {0, 1} - ends}"
                for q in range(2):
                    assert c.get_watermark_offsets(TopicPartition("quiet", q),
                                                   cached=True) == (0, 5)
                kinds = [e.details["fetch_session"]["kind"]
                         for e in _sessions(cluster, since, "again")]
                assert "full" in kinds, kinds      # how: a full Fetch
                if round_ % 2:
                    c.unassign()
        finally:
            c.close()


def test_an_evicted_session_or_a_cut_connection_starts_a_new_one_losing_nothing(tmp_path):
    """The broker forgets the session (eviction) or the connection drops: the next Fetch
    is a full one at once, not after fetch.error.backoff.ms, and the application sees no
    error and every message once, in order."""
    from kafka_client.testing import Cluster
    with Cluster(brokers=1, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("evicted", partitions=4, replication_factor=1)
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 1})
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "ev",
                      "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
                      "fetch.error.backoff.ms": 3000})
        counts = {q: 0 for q in range(4)}
        got: Dict[int, List[bytes]] = {}
        try:
            c.assign([TopicPartition("evicted", q) for q in range(4)])
            for fault in ("evict", "cut", "evict"):
                for q in range(4):
                    _produce(p, "evicted", q, counts[q], 25)
                    counts[q] += 25
                _read(c, got, sum(counts.values()))
                (before,) = cluster.fetch_sessions(1)
                since = cluster.clear_request_log()
                if fault == "evict":
                    assert cluster.evict_fetch_sessions() == 1
                else:
                    cluster.cut_connections()
                for q in range(4):
                    _produce(p, "evicted", q, counts[q], 25)
                    counts[q] += 25
                _read(c, got, sum(counts.values()))
                log = _sessions(cluster, since, "ev")
                fulls = [e for e in log if e.details["fetch_session"]["kind"] == "full"]
                assert fulls, [e.details["fetch_session"] for e in log]
                if fault == "evict":
                    (refused,) = [e for e in log if e.errors == ["FETCH_SESSION_ID_NOT_FOUND"]]
                    assert fulls[0].seq > refused.seq
                    assert fulls[0].time - refused.time < 1.0    # no 3 s error backoff
                    assert fulls[0].details["fetch_session"]["id"] == 0
                else:
                    # The full Fetch names the old session, which closes it.
                    assert fulls[0].details["fetch_session"]["id"] == before["id"]
                (after,) = cluster.fetch_sessions(1)
                assert after["id"] != before["id"]
        finally:
            c.close()
            p.close()
        assert got == _expected(counts)


def test_close_ends_the_session_and_a_broker_without_room_gets_full_fetches(tmp_path):
    from kafka_client.testing import Cluster
    for slots in (1000, 0):
        with Cluster(brokers=1, data_dir=str(tmp_path / str(slots)), broker_config={
                "max.incremental.fetch.session.cache.slots": slots}) as cluster:
            cluster.create_topic("closing", partitions=2, replication_factor=1)
            p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 1})
            c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "cl",
                          "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50})
            got: Dict[int, List[bytes]] = {}
            try:
                c.assign([TopicPartition("closing", 0), TopicPartition("closing", 1)])
                for n in (10, 20, 30):
                    _produce(p, "closing", 0, n - 10, 10)
                    _read(c, got, n)
                sessions = cluster.fetch_sessions(1)
                assert len(sessions) == (1 if slots else 0)
                kinds = {e.details["fetch_session"]["kind"] for e in _sessions(cluster, 0, "cl")}
                # Without room every Fetch asks for a session again and is answered in full.
                assert kinds == ({"full", "incremental"} if slots else {"full"}), kinds
                # No Fetch waiting at the broker when close() comes (see Fetcher.close):
                # the one in flight answered (a fixed 0.3 s wait was not always enough
                # on a loaded machine), and none after it, everything paused.
                c.pause(c.assignment())
                deadline = time.monotonic() + 10
                while c._fetcher._busy:
                    assert time.monotonic() < deadline, "a Fetch still in flight"
                    time.sleep(0.01)
                since = cluster.clear_request_log()
            finally:
                c.close()
                p.close()
            assert got == _expected({0: 30})
            assert cluster.fetch_sessions(1) == []
            if slots:
                (last,) = _sessions(cluster, since, "cl")
                fs = last.details["fetch_session"]
                assert (fs["id"], fs["epoch"]) == (sessions[0]["id"], -1)
