"""librdkafka's callback properties, as Python callables, against real brokers: the socket
callbacks (resolve_cb, socket_cb, connect_cb, closesocket_cb) on every broker connection,
consume_cb, rebalance_cb, offset_commit_cb (on_commit's librdkafka name) and
partitioner_cb. Messages are counted on the other side; a callback that raises reaches the
caller of poll()/consume() and nothing hangs (the TLS callback is in test_tls.py)."""
from __future__ import annotations

import errno
import socket
import time

import pytest

from kafka_client import Consumer, KafkaError, KafkaException, Producer, TopicPartition

pytestmark = pytest.mark.integration

N = 50
#: Tansu holds a group's first join for half the session timeout (22.5 s at the default)
SESSION_MS = 6000


def produce(conf, topic, n=N, **produce_kwargs):
    """Produce ``n`` messages on ``conf``; returns their delivery reports' partitions."""
    partitions = []

    def delivered(err, msg):
        assert err is None, err
        partitions.append(msg.partition())

    with Producer(conf, on_delivery=delivered) as p:
        for i in range(n):
            p.produce(topic, b"v%d" % i, key=b"k%d" % i, **produce_kwargs)
        assert p.flush(30) == 0
    return partitions


def consume(conf, topic, n=N, partitions=(0,), **consumer_conf):
    """The first ``n`` messages of the partitions, read by manual assignment."""
    out = []
    c = Consumer(dict(conf, **{"group.id": f"read-{topic}", "enable.auto.commit": False},
                      **consumer_conf))
    try:
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            out.extend(m for m in c.consume(n, 0.5) if m.error() is None)
    finally:
        c.close()
    return out


def test_resolve_cb_resolves_a_made_up_host_name(broker, topic_name):
    asked = []

    def resolve_cb(host, port):
        asked.append((host, port))
        return socket.getaddrinfo("127.0.0.1", port, socket.AF_INET, socket.SOCK_STREAM)

    broker.create_topic(topic_name)
    conf = {"bootstrap.servers": f"kafka.invalid:{broker.port}", "resolve_cb": resolve_cb}
    produce(conf, topic_name)
    assert [m.value() for m in consume(conf, topic_name)] == [b"v%d" % i for i in range(N)]
    assert ("kafka.invalid", broker.port) in asked


def test_socket_cb_makes_the_socket_used_and_closesocket_cb_sees_it_closed(broker,
                                                                           topic_name):
    made, closed = [], []

    def socket_cb(family, type_, proto):
        sock = socket.socket(family, type_, proto)
        made.append(sock)
        return sock

    broker.create_topic(topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap, "socket_cb": socket_cb,
                  "closesocket_cb": closed.append})
    p.produce(topic_name, b"through socket_cb")
    assert p.flush(30) == 0
    assert made and all(not s.getblocking() for s in made)  # made non-blocking by the client
    # the broker connection is on one of them
    assert any(s.fileno() != -1 and s.getpeername()[1] == broker.port for s in made)
    p.close()
    assert closed and set(map(id, closed)) <= set(map(id, made))
    assert all(s.fileno() == -1 for s in closed)  # the client closed them after the callback
    assert [m.value() for m in consume({"bootstrap.servers": broker.bootstrap}, topic_name,
                                       n=1)] == [b"through socket_cb"]


def test_connect_cb_returning_an_errno_fails_the_attempt_clearly(broker):
    errors = []
    called = []

    def connect_cb(sock, sockaddr, broker_name):
        called.append((sockaddr, broker_name))
        return errno.ECONNREFUSED

    p = Producer({"bootstrap.servers": broker.bootstrap, "connect_cb": connect_cb},
                 error_cb=errors.append)
    try:
        with pytest.raises(KafkaException):
            p.list_topics(timeout=0.5)
        p.poll(0.2)
    finally:
        p.close()
    assert called[0] == (("127.0.0.1", broker.port), f"{broker.bootstrap}/bootstrap")
    transport = [e for e in errors if e.code() == KafkaError._TRANSPORT]
    assert transport and "connect_cb returned ECONNREFUSED" in transport[0].str(), errors


def test_connect_cb_returning_0_connects(broker, topic_name):
    broker.create_topic(topic_name)
    produce({"bootstrap.servers": broker.bootstrap, "connect_cb": lambda *args: 0},
            topic_name, n=5)
    assert len(consume({"bootstrap.servers": broker.bootstrap}, topic_name, n=5)) == 5


@pytest.mark.parametrize("name", ["resolve_cb", "socket_cb", "connect_cb"])
def test_a_raising_socket_callback_fails_the_attempt_and_reaches_poll(
        broker, name, raising_callback_failure):
    def raising(*args):
        raise OSError(f"{name} says no")

    errors = raising_callback_failure({"bootstrap.servers": broker.bootstrap, name: raising},
                                      OSError, f"{name} says no")
    assert any(f"{name} raised" in e.str() for e in errors), errors


def test_consume_cb_sees_each_message_before_it_is_returned(broker, topic_name):
    broker.create_topic(topic_name)
    produce({"bootstrap.servers": broker.bootstrap}, topic_name)
    seen = []
    got = consume({"bootstrap.servers": broker.bootstrap}, topic_name,
                  consume_cb=seen.append)
    assert len(got) == N and [m.offset() for m in seen[:N]] == list(range(N))
    assert all(a is b for a, b in zip(seen, got))


def test_a_raising_consume_cb_loses_no_message(broker, topic_name):
    broker.create_topic(topic_name)
    produce({"bootstrap.servers": broker.bootstrap}, topic_name)

    def consume_cb(msg):
        if msg.offset() % 10 == 3:
            raise ValueError(f"bad {msg.offset()}")

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic_name}",
                  "consume_cb": consume_cb})
    offsets, raised = [], []
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        deadline = time.monotonic() + 30
        while len(offsets) < N and time.monotonic() < deadline:
            try:
                msg = c.poll(0.5)  # one message a call: each raise comes from the next
            except ValueError as exc:
                raised.append(str(exc))
                continue
            if msg is not None and msg.error() is None:
                offsets.append(msg.offset())
    finally:
        c.close()
    assert offsets == list(range(N))
    assert raised == [f"bad {i}" for i in range(3, N, 10)]


def test_rebalance_cb_is_called_for_assign_and_revoke(broker, topic_name):
    broker.create_topic(topic_name, partitions=2)
    produce({"bootstrap.servers": broker.bootstrap}, topic_name, partition=0)
    calls = []

    def rebalance_cb(consumer, err, partitions):
        calls.append((err.code(), sorted(tp.partition for tp in partitions)))

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic_name}",
                  "auto.offset.reset": "earliest", "rebalance_cb": rebalance_cb,
                  "session.timeout.ms": SESSION_MS})
    got = []
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while len(got) < N and time.monotonic() < deadline:
            got.extend(m for m in c.consume(N, 0.5) if m.error() is None)
        assert calls == [(KafkaError._ASSIGN_PARTITIONS, [0, 1])]
        assert sorted(tp.partition for tp in c.assignment()) == [0, 1]  # applied for it
    finally:
        c.close()
    assert len(got) == N
    assert calls[-1] == (KafkaError._REVOKE_PARTITIONS, [0, 1])


def test_rebalance_cb_that_assigns_itself_is_not_overridden(broker, topic_name):
    broker.create_topic(topic_name)
    produce({"bootstrap.servers": broker.bootstrap}, topic_name)

    def rebalance_cb(consumer, err, partitions):
        if err.code() == KafkaError._ASSIGN_PARTITIONS:
            consumer.assign([TopicPartition(tp.topic, tp.partition, 40) for tp in partitions])

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic_name}",
                  "rebalance_cb": rebalance_cb, "session.timeout.ms": SESSION_MS})
    got = []
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while len(got) < N - 40 and time.monotonic() < deadline:
            got.extend(m.offset() for m in c.consume(N, 0.5) if m.error() is None)
    finally:
        c.close()
    assert got == list(range(40, N))


def test_offset_commit_cb_gets_the_commit_results(broker, topic_name):
    broker.create_topic(topic_name)
    produce({"bootstrap.servers": broker.bootstrap}, topic_name, n=5)
    results = []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic_name}",
                  "enable.auto.commit": False,
                  "offset_commit_cb": lambda err, parts: results.append((err, parts))})
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            got.extend(m for m in c.consume(5, 0.5) if m.error() is None)
        c.commit(got[-1], asynchronous=True)
        deadline = time.monotonic() + 10
        while not results and time.monotonic() < deadline:
            c.poll(0.1)
    finally:
        c.close()
    err, parts = results[0]
    assert err is None and [(tp.partition, tp.offset) for tp in parts] == [(0, 5)]


def test_partitioner_cb_chooses_the_partition(broker, topic_name):
    broker.create_topic(topic_name, partitions=3)
    asked = []

    def partitioner_cb(key, partition_count):
        asked.append((key, partition_count))
        return 2

    conf = {"bootstrap.servers": broker.bootstrap, "partitioner_cb": partitioner_cb}
    assert produce(conf, topic_name) == [2] * N
    assert asked[0] == (b"k0", 3) and len(asked) == N
    assert len(consume({"bootstrap.servers": broker.bootstrap}, topic_name,
                       partitions=(2,))) == N
    # an explicit partition is not the callback's to choose
    assert produce(conf, topic_name, n=1, partition=0) == [0] and len(asked) == N


def test_partitioner_cb_returning_a_missing_partition_is_unknown_partition(broker,
                                                                          topic_name):
    broker.create_topic(topic_name, partitions=3)
    reports = []
    with Producer({"bootstrap.servers": broker.bootstrap,
                   "partitioner_cb": lambda key, count: 7},
                  on_delivery=lambda err, msg: reports.append(err)) as p:
        p.produce(topic_name, b"waits for metadata")  # placed when the topic is known
        assert p.flush(30) == 0
        assert reports[0].code() == KafkaError._UNKNOWN_PARTITION
        assert "partitioner_cb returned 7" in reports[0].str()
        with pytest.raises(KafkaException) as info:  # the topic is known now
            p.produce(topic_name, b"x")
        assert info.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
