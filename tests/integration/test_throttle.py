"""``throttle_cb``: a broker that answers with ``throttle_time_ms`` > 0 (quotas, KIP-219)
reaches the application as a ThrottleEvent from poll()/flush()/consume(), as librdkafka
reports it: every answer > 0, then one 0 when the throttling has ended. The broker's
answers are rewritten by the fault proxy (``throttle_requests``); the broker itself acts
on every request, so the data must still arrive whole. Consumer statistics carry the
per-broker throttle window."""
from __future__ import annotations

import json
import time

import pytest

from kafka_client import Consumer, Producer, ThrottleEvent, TopicPartition
from kafka_client._net.connection import MAX_THROTTLE_HOLD_S, BrokerConnection
from kafka_client._net.io_thread import IOThread
from kafka_client._testing.proxy import FaultProxy
from kafka_proto.messages import ApiKey, ApiVersionsRequest, MetadataRequest


@pytest.fixture
def proxy(tansu_broker):
    with FaultProxy("127.0.0.1", tansu_broker.port, rewrite_addresses=True) as p:
        yield p


def broker_id_of(tansu_broker, topic):
    p = Producer({"bootstrap.servers": tansu_broker.bootstrap})
    try:
        return p.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    finally:
        p.close()


def test_producer_reports_each_throttled_answer_then_the_end(tansu_broker, proxy, topic_name):
    tansu_broker.create_topic(topic_name, partitions=1)
    leader = broker_id_of(tansu_broker, topic_name)
    events, delivered = [], []
    p = Producer({"bootstrap.servers": proxy.bootstrap, "throttle_cb": events.append,
                  "linger.ms": 0})
    p.produce(topic_name, b"warm-up", on_delivery=lambda e, m: delivered.append(e))
    assert p.flush(10) == 0
    assert events == []                    # answers without throttle_time_ms: no event
    proxy.throttle_requests(ApiKey.PRODUCE, 250, count=2)
    for i in range(3):                     # one request each: 250, 250, then 0
        p.produce(topic_name, b"m%d" % i, on_delivery=lambda e, m: delivered.append(e))
        assert p.flush(10) == 0
    p.poll(0)
    p.close()
    assert delivered == [None] * 4         # the broker acted on every request
    assert [e.throttle_time for e in events] == [0.25, 0.25, 0.0]
    for e in events:
        assert isinstance(e, ThrottleEvent)
        assert e.broker_id == leader
        assert e.broker_name == f"127.0.0.1:{proxy.port}/{leader}"
    assert str(events[0]) == f"127.0.0.1:{proxy.port}/{leader}/{leader} throttled for 250 ms"


def test_consumer_gets_throttle_events_from_consume_and_statistics(tansu_broker, proxy,
                                                                   topic_name):
    tansu_broker.create_topic(topic_name, partitions=1)
    p = Producer({"bootstrap.servers": tansu_broker.bootstrap})
    for i in range(100):
        p.produce(topic_name, b"%d" % i, partition=0)
    assert p.flush(10) == 0
    p.close()
    events, stats = [], []
    proxy.throttle_requests(ApiKey.FETCH, 120, count=3)
    c = Consumer({"bootstrap.servers": proxy.bootstrap, "throttle_cb": events.append,
                  "stats_cb": stats.append, "statistics.interval.ms": 100,
                  "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic_name, 0, 0)])
    got = []
    deadline = time.monotonic() + 15

    def throttling_ended():
        times = [e.throttle_time for e in events]
        return len([t for t in times if t]) == 3 and times[-1] == 0.0

    while (len(got) < 100 or not throttling_ended() or not stats) \
            and time.monotonic() < deadline:
        got += [m.value() for m in c.consume(100, 0.2) if m.error() is None]
    stats_after = list(stats)
    c.close()
    assert got == [b"%d" % i for i in range(100)]
    # every throttled Fetch answer, and a 0 after each run of them that an answer
    # without throttling ended (a Metadata answer may come between two Fetch answers:
    # the connection held both back while muted, KIP-219)
    times = [e.throttle_time for e in events]
    assert [t for t in times if t] == [0.12, 0.12, 0.12], times
    assert times[0] and times[-1] == 0.0, times
    assert all(a or b for a, b in zip(times, times[1:])), times   # never two 0s in a row
    # librdkafka's windows: each document counts the throttled answers of its interval
    windows = [(name, b["throttle"]) for d in map(json.loads, stats_after)
               for name, b in d["brokers"].items() if b["throttle"]["cnt"]]
    assert len({name for name, _w in windows}) == 1, windows
    assert sum(w["cnt"] for _n, w in windows) == 3
    assert {w["max"] for _n, w in windows} == {w["avg"] for _n, w in windows} == {120}
    assert {w["p99"] for _n, w in windows} == {w["min"] for _n, w in windows} == {120}


def test_a_raising_throttle_cb_reaches_flush_and_loses_nothing(tansu_broker, proxy,
                                                               topic_name):
    tansu_broker.create_topic(topic_name, partitions=1)
    seen, delivered = [], []

    def throttle_cb(event):
        seen.append(event.throttle_time)
        raise ValueError(f"throttled {event.throttle_time}")

    p = Producer({"bootstrap.servers": proxy.bootstrap, "throttle_cb": throttle_cb,
                  "linger.ms": 0})
    proxy.throttle_requests(ApiKey.PRODUCE, 100, count=2)
    raised = []

    def poll_until(done):
        deadline = time.monotonic() + 10
        while not done() and time.monotonic() < deadline:
            try:
                p.poll(0.05)
            except ValueError as exc:
                raised.append(str(exc))

    for i in range(3):  # one request each, answered one after the other
        p.produce(topic_name, b"m%d" % i, on_delivery=lambda e, m: delivered.append(e))
        poll_until(lambda: len(delivered) > i)
    poll_until(lambda: len(seen) == 3)
    assert p.flush(5) == 0 and len(p) == 0  # the bookkeeping went on around the raises
    assert delivered == [None] * 3
    assert seen == [0.1, 0.1, 0.0]          # each event once, none skipped
    assert raised == ["throttled 0.1", "throttled 0.1", "throttled 0.0"]  # to poll()'s caller
    start = time.monotonic()
    p.close()
    assert time.monotonic() - start < 5


def test_a_throttled_producer_holds_its_next_request_back_kip219(tansu_broker, proxy,
                                                                 topic_name):
    """Produce v6+ answers a quota violation at once: the client itself sends nothing more
    to that broker until throttle_time_ms has passed (as the Java client; librdkafka
    does not), then carries on at full speed."""
    tansu_broker.create_topic(topic_name, partitions=1)
    p = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 0})
    try:
        p.produce(topic_name, b"warm-up")
        assert p.flush(10) == 0
        # 1 s, the longest the client holds requests back (MAX_THROTTLE_HOLD_S; was
        # 600 ms): a request held again would take 1 s, further from a plain round trip,
        # which a loaded machine can stretch past 0.4 s.
        proxy.throttle_requests(ApiKey.PRODUCE, 1000, count=1)
        p.produce(topic_name, b"throttled")
        assert p.flush(10) == 0                 # answered at once, saying 1000 ms
        answered = time.monotonic()
        p.produce(topic_name, b"held back")
        assert p.flush(10) == 0
        held = time.monotonic() - answered
        assert 0.9 <= held < 5, held
        start = time.monotonic()
        p.produce(topic_name, b"after")
        assert p.flush(10) == 0
        after = time.monotonic() - start
        assert after < 0.7, after               # the throttle is over
    finally:
        p.close()


@pytest.mark.parametrize("version,muted", [(6, True), (5, False)])
def test_the_whole_connection_is_muted_only_from_the_kip219_version(proxy, version, muted):
    """Metadata v6+ throttles on the client: the next request, whatever its API, waits
    out the throttle time. Before v6 the broker itself delayed the answer, so the
    client must not wait again."""
    io = IOThread("test-kip219").start()
    answers, conns = [], []

    def second(resp, err):
        answers.append((time.monotonic(), err, None))

    def first(resp, err):
        answers.append((time.monotonic(), err, resp.throttle_time_ms if resp else None))
        conns[0].send(ApiVersionsRequest(client_software_name="t",
                                         client_software_version="1"), second)

    def start():
        conn = BrokerConnection(io, -1, "127.0.0.1", proxy.port)
        conns.append(conn)
        io.add_tick(conn.service)
        conn.send(MetadataRequest(topics=[]), first, version=version)

    try:
        # 1 s (the longest a throttle holds a connection): far from a plain round trip,
        # which a loaded machine can stretch past 0.3 s
        proxy.throttle_requests(ApiKey.METADATA, 1000, count=1)
        io.call_soon(start)
        deadline = time.monotonic() + 10
        while len(answers) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        (t1, e1, throttle), (t2, e2, _) = answers
        assert e1 is None and e2 is None and throttle == 1000
        if muted:
            assert t2 - t1 >= 0.95, t2 - t1
        else:
            assert t2 - t1 < 0.9, t2 - t1
    finally:
        io.call_soon(lambda: [c.close() for c in conns])
        io.stop(5)


#: a throttle time no quota gives (24 days): a broken or hostile broker's answer
ABSURD_THROTTLE_MS = 2_000_000_000


def test_an_absurd_produce_throttle_holds_the_producer_back_a_second_at_most(
        proxied_cluster, topic_name):
    """A Produce answer says the broker throttled the producer for 24 days: the next
    request waited out socket.timeout.ms (60 s) instead. The client holds requests back
    for a throttle (KIP-219, as the Java client; librdkafka never does) for at most
    MAX_THROTTLE_HOLD_S: longer, the broker itself enforces its throttle by not reading
    the connection."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=1)
    events = []
    p = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 0,
                  "throttle_cb": events.append})
    try:
        p.produce(topic_name, b"warm-up")
        assert p.flush(10) == 0
        proxy.rewrite_responses(
            ApiKey.PRODUCE, lambda response, version: setattr(
                response, "throttle_time_ms", ABSURD_THROTTLE_MS))
        p.produce(topic_name, b"throttled")
        assert p.flush(10) == 0
        answered = time.monotonic()
        p.produce(topic_name, b"held back")
        assert p.flush(10) == 0
        held = time.monotonic() - answered
        assert MAX_THROTTLE_HOLD_S * 0.9 <= held < MAX_THROTTLE_HOLD_S + 1.5, held
    finally:
        p.close()
    assert [e.throttle_time for e in events][:1] == [ABSURD_THROTTLE_MS / 1000]
    assert proxy.injected == 1 and not proxy.rewrite_errors


def test_an_absurd_heartbeat_throttle_does_not_cost_the_membership(proxied_cluster,
                                                                   topic_name):
    """A Heartbeat answer says the member is throttled for 24 days: the coordinator's
    connection sent nothing for socket.timeout.ms (60 s), so the session (6 s here)
    expired and the group rebalanced without the member. Held back for a second at
    most, the heartbeats go on and the member keeps its partition."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=1)
    lost = []
    c = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": topic_name,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 500})
    try:
        c.subscribe([topic_name], on_revoke=lambda cons, parts: lost.append(parts),
                    on_lost=lambda cons, parts: lost.append(parts))
        deadline = time.monotonic() + 15
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.1)
        assert c.assignment()
        since = cluster.clear_request_log()
        proxy.rewrite_responses(
            ApiKey.HEARTBEAT, lambda response, version: setattr(
                response, "throttle_time_ms", ABSURD_THROTTLE_MS))
        deadline = time.monotonic() + 8       # more than the session
        while time.monotonic() < deadline:
            c.poll(0.1)
        heartbeats = cluster.request_log(since=since, api="Heartbeat")
        assert len(heartbeats) >= 6, len(heartbeats)
        assert not cluster.request_log(since=since, api="JoinGroup")
        assert lost == [] and len(c.assignment()) == 1
    finally:
        c.close()
    assert proxy.injected == 1 and not proxy.rewrite_errors
