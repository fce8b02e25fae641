"""Messages a consume() call holds while it waits for more (consume(100, 10) that has 3
and waits for 97): their positions have moved, but they are not the application's yet.
No commit made meanwhile (another thread's commit(), the auto-commit) goes past them, and
a call ended by Ctrl-C puts them back: the next call reads them again, and a consumer
closed then does not commit them (confluent-kafka commits them: they are lost).

Client-side behaviour: run on one broker (noida-db, whose group joins are quick)."""
from __future__ import annotations

import threading
import time

import pytest

from kafka_client import Consumer, Producer, TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

READS = ["consume", "consume_arrow"]


def _conf(broker, group, **extra):
    # session.timeout.ms: Tansu holds a group's first join for half of it
    return {"bootstrap.servers": broker.bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "fetch.wait.max.ms": 50, **extra}


def _produce(bootstrap, topic, values):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(10) == 0


def _committed(broker, group, topic):
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        return c.committed([TopicPartition(topic, 0)], 10)[0].offset
    finally:
        c.close()


def _values(consumer, read, n, timeout):
    if read == "consume":
        return [m.value() for m in consumer.consume(n, timeout) if m.error() is None]
    return consumer.consume_arrow(n, timeout).column("value").to_pylist()


@pytest.mark.parametrize("read", READS)
def test_a_commit_made_while_a_call_holds_messages_stops_before_them(noida_broker,
                                                                     topic_name, read):
    """Thread A's call holds m1..m3 and waits for more; the main thread's commit() of the
    stored offsets meanwhile commits only m0, returned before. Once A's call returns
    them, the next commit() covers them."""
    if read == "consume_arrow":
        pytest.importorskip("pyarrow")
    broker = noida_broker
    group = f"g-{topic_name}"
    _produce(broker.bootstrap, topic_name, [b"m0"])
    c = Consumer(_conf(broker, group, **{"enable.auto.commit": False}))
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 30
        first = []
        while not first and time.monotonic() < deadline:
            first = _values(c, read, 1, 1)
        assert first == [b"m0"]
        got = []
        reader = threading.Thread(target=lambda: got.extend(_values(c, read, 100, 4)))
        reader.start()
        time.sleep(0.3)
        _produce(broker.bootstrap, topic_name, [b"m1", b"m2", b"m3"])
        time.sleep(1.0)            # the reader holds them now, waiting for 97 more
        assert reader.is_alive()
        assert [tp.offset for tp in c.commit(asynchronous=False)] == [1]
        assert _committed(broker, group, topic_name) == 1
        reader.join(10)
        assert got == [b"m1", b"m2", b"m3"]
        assert [tp.offset for tp in c.commit(asynchronous=False)] == [4]
    finally:
        c.close()
    assert _committed(broker, group, topic_name) == 4


_CTRL_C_CHILD = r"""
import _thread, sys, threading, time
from kafka_client import Consumer, Producer

bootstrap, topic, group, read = sys.argv[1:]

def values(n, timeout):
    if read == "consume":
        return [m.value() for m in c.consume(n, timeout) if m.error() is None]
    return c.consume_arrow(n, timeout).column("value").to_pylist()

def produce_then_ctrl_c(vals):
    time.sleep(0.3)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in vals:
        p.produce(topic, v, partition=0)
    p.flush(10)
    time.sleep(1.0)            # the call in the main thread holds them now
    _thread.interrupt_main()   # Ctrl-C

def interrupted_read(vals):
    threading.Thread(target=produce_then_ctrl_c, args=(vals,)).start()
    try:
        got = values(100, 20)
    except KeyboardInterrupt:
        return "interrupted"
    return got

c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
              "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
              "fetch.wait.max.ms": 50})
c.subscribe([topic])
got = []
deadline = time.monotonic() + 30
while not got and time.monotonic() < deadline:
    got = values(1, 1)
print("first", got, flush=True)
print("read 1:", interrupted_read([b"m1", b"m2", b"m3"]), flush=True)
again = []
while len(again) < 3 and time.monotonic() < deadline + 10:
    again += values(3 - len(again), 1)
print("again", again, flush=True)
print("read 2:", interrupted_read([b"m4", b"m5"]), flush=True)
c.close()   # m4, m5 were never returned: not committed
"""


@pytest.mark.parametrize("read", READS)
def test_ctrl_c_while_a_call_holds_messages_puts_them_back(noida_broker, topic_name, read,
                                                          run_child):
    """Ctrl-C during a call holding m1..m3: the next call returns them again; Ctrl-C
    during one holding m4, m5, then close(): the group's offset stays at 4, so the next
    member reads m4 and m5."""
    if read == "consume_arrow":
        pytest.importorskip("pyarrow")
    broker = noida_broker
    group = f"g-{topic_name}"
    _produce(broker.bootstrap, topic_name, [b"m0"])
    args = [broker.bootstrap, topic_name, group, read]
    child = run_child(f"import sys; sys.argv[1:] = {args!r}\n" + _CTRL_C_CHILD, timeout=90)
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == [
        "first [b'm0']", "read 1: interrupted", "again [b'm1', b'm2', b'm3']",
        "read 2: interrupted"], child.stderr
    assert _committed(broker, group, topic_name) == 4
    c = Consumer(_conf(broker, group))
    try:
        c.subscribe([topic_name])
        rest = []
        deadline = time.monotonic() + 30
        while len(rest) < 2 and time.monotonic() < deadline:
            rest += _values(c, "consume", 2 - len(rest), 1)
        assert rest == [b"m4", b"m5"]
    finally:
        c.close()


def test_a_commit_while_the_only_messages_are_held_stays_at_the_first(noida_broker,
                                                                       topic_name):
    """Nothing returned yet, three messages held: commit() of the stored offsets commits
    the first held one's offset (the next to read), not past them."""
    broker = noida_broker
    group = f"g-{topic_name}"
    c = Consumer(_conf(broker, group, **{"enable.auto.commit": False}))
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        got = []
        reader = threading.Thread(target=lambda: got.extend(c.consume(100, 3)))
        reader.start()
        time.sleep(0.3)
        _produce(broker.bootstrap, topic_name, [b"a", b"b", b"c"])
        time.sleep(1.0)
        assert reader.is_alive()
        assert [tp.offset for tp in c.commit(asynchronous=False)] == [0]
        reader.join(10)
        assert [m.offset() for m in got] == [0, 1, 2]
        assert [tp.offset for tp in c.commit(asynchronous=False)] == [3]
    finally:
        c.close()
