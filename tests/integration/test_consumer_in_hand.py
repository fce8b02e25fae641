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
    return {"bootstrap.servers": broker.bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "session.timeout.ms": broker.group_session_ms,
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


def _read(consumer, read, n, seconds=30):
    """Values read until ``n`` came or ``seconds`` passed."""
    got = []
    deadline = time.monotonic() + seconds
    while len(got) < n and time.monotonic() < deadline:
        got += _values(consumer, read, n - len(got), 1)
    return got


def _holding_call(call, bootstrap, topic, values):
    """Start ``call`` (a read asking for more than will come) in a thread, produce
    ``values``, and return (the thread, the list its result goes to) once it holds them
    and waits for more."""
    got = []
    reader = threading.Thread(target=lambda: got.extend(call()))
    reader.start()
    time.sleep(0.3)
    _produce(bootstrap, topic, values)
    time.sleep(1.0)
    assert reader.is_alive()
    return reader, got


def _next_member_reads(broker, group, topic, n):
    """What a new member of ``group`` reads of ``topic`` (``n`` values expected)."""
    c = Consumer(_conf(broker, group))
    try:
        c.subscribe([topic])
        return _read(c, "consume", n)
    finally:
        c.close()


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
        first = _read(c, read, 1)
        assert first == [b"m0"]
        reader, got = _holding_call(
            lambda: _values(c, read, 100, 4), broker.bootstrap, topic_name,
            [b"m1", b"m2", b"m3"])
        assert [tp.offset for tp in c.commit(asynchronous=False)] == [1]
        assert _committed(broker, group, topic_name) == 1
        reader.join(10)
        assert got == [b"m1", b"m2", b"m3"]
        assert [tp.offset for tp in c.commit(asynchronous=False)] == [4]
    finally:
        c.close()
    assert _committed(broker, group, topic_name) == 4


_CTRL_C_CHILD = r"""
import _thread, signal, sys, threading, time
from kafka_client import Consumer, Producer

# Ctrl-C as an application at a terminal has it: a process started in the background by a
# shell inherits SIGINT ignored, and then _thread.interrupt_main() does nothing.
signal.signal(signal.SIGINT, signal.default_int_handler)

bootstrap, topic, group, read = sys.argv[1:]

def values(n, timeout):
    if read == "consume":
        got = c.consume(n, timeout)
        for m in got:   # an error event ends a call early: say which, should a test fail
            if m.error() is not None:
                print("error event:", m.error(), file=sys.stderr, flush=True)
        return [m.value() for m in got if m.error() is None]
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
    started = time.monotonic()
    try:
        got = values(100, 20)
    except KeyboardInterrupt:
        return "interrupted"
    print("returned after", round(time.monotonic() - started, 2), "s", file=sys.stderr)
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
    assert _next_member_reads(broker, group, topic_name, 2) == [b"m4", b"m5"]


def test_a_commit_while_the_only_messages_are_held_stays_at_the_first(noida_broker,
                                                                       topic_name):
    """Nothing returned yet, three messages held: commit() of the stored offsets commits
    the first held one's offset (the next to read), not past them."""
    broker = noida_broker
    group = f"g-{topic_name}"
    c = Consumer(_conf(broker, group, **{"enable.auto.commit": False}))
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        reader, got = _holding_call(
            lambda: c.consume(100, 3), broker.bootstrap, topic_name,
            [b"a", b"b", b"c"])
        assert [tp.offset for tp in c.commit(asynchronous=False)] == [0]
        reader.join(10)
        assert [m.offset() for m in got] == [0, 1, 2]
        assert [tp.offset for tp in c.commit(asynchronous=False)] == [3]
    finally:
        c.close()


def test_a_partition_revoked_while_a_call_holds_its_messages_is_read_once(tansu_broker,
                                                                          topic_name):
    """A's call holds m1..m3 when B joins the group (an eager rebalance revokes A's
    partitions while the call waits): the commit made on the revocation stops before
    them, the call does not return them from the revoked partition, and whoever owns
    the partition next reads them: every message once across both members. (On Tansu:
    noida-db refuses the commit on revocation with ILLEGAL_GENERATION once another
    member joins, so its members re-read from the last commit.)"""
    broker = tansu_broker
    group = f"g-{topic_name}"
    conf = _conf(broker, group, **{"heartbeat.interval.ms": 300})
    _produce(broker.bootstrap, topic_name, [b"m0"])
    a = Consumer(dict(conf, **{"client.id": "a"}))
    b = None
    stop = threading.Event()
    try:
        a.subscribe([topic_name])
        seen_a = _read(a, "consume", 1)
        assert seen_a == [b"m0"]
        reader, held_call = _holding_call(lambda: _values(a, "consume", 100, 6),
                                          broker.bootstrap, topic_name,
                                          [b"m1", b"m2", b"m3"])
        b = Consumer(dict(conf, **{"client.id": "b"}))
        b.subscribe([topic_name])
        seen_b = []

        def read_b():
            while not stop.is_set():
                seen_b.extend(_values(b, "consume", 10, 0.2))

        b_reader = threading.Thread(target=read_b)
        b_reader.start()
        reader.join(20)
        seen_a += held_call
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(seen_a + seen_b) < 4:
            seen_a += _values(a, "consume", 10, 0.2)
        end = time.monotonic() + 1      # a little longer, for any duplicate to show
        while time.monotonic() < end:
            seen_a += _values(a, "consume", 10, 0.2)
        stop.set()
        b_reader.join(10)
        assert sorted(seen_a + seen_b) == [b"m0", b"m1", b"m2", b"m3"], (seen_a, seen_b)
    finally:
        stop.set()
        a.close()
        if b is not None:
            b.close()


@pytest.mark.parametrize("read", READS)
def test_a_call_does_not_return_messages_of_a_partition_unassigned_while_it_waits(
        noida_broker, topic_name, read):
    """The call holds m0..m2 of partition 0 when another thread unassigns it: the call
    returns none of them (their partition is no longer this consumer's); assigned again
    from offset 1, m1 and m2 are read."""
    if read == "consume_arrow":
        pytest.importorskip("pyarrow")
    broker = noida_broker
    c = Consumer(_conf(broker, f"g-{topic_name}", **{"enable.auto.commit": False}))
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        reader, got = _holding_call(
            lambda: _values(c, read, 100, 3), broker.bootstrap, topic_name,
            [b"m0", b"m1", b"m2"])
        c.incremental_unassign([TopicPartition(topic_name, 0)])
        reader.join(10)
        assert got == []
        c.incremental_assign([TopicPartition(topic_name, 0, 1)])
        again = _read(c, read, 2)
        assert again == [b"m1", b"m2"]
    finally:
        c.close()


@pytest.mark.parametrize("read", READS)
def test_a_consumer_closed_under_a_call_holding_messages_leaves_them_to_the_next_member(
        noida_broker, topic_name, read):
    """close() from another thread while a call holds m1, m2: the call returns at once
    without them (the final commit stopped before them), and the group's next member
    reads them: each message processed once."""
    if read == "consume_arrow":
        pytest.importorskip("pyarrow")
    broker = noida_broker
    group = f"g-{topic_name}"
    _produce(broker.bootstrap, topic_name, [b"m0"])
    c = Consumer(_conf(broker, group))
    c.subscribe([topic_name])
    first = _read(c, read, 1)
    assert first == [b"m0"]
    reader, got = _holding_call(lambda: _values(c, read, 100, 10), broker.bootstrap,
                                topic_name, [b"m1", b"m2"])
    started = time.monotonic()
    c.close()
    reader.join(5)
    assert not reader.is_alive() and time.monotonic() - started < 5
    assert got == []
    assert _committed(broker, group, topic_name) == 1
    assert _next_member_reads(broker, group, topic_name, 2) == [b"m1", b"m2"]


def test_a_call_ending_leaves_the_hold_of_the_call_that_takes_its_turn(noida_broker,
                                                                        topic_name):
    """Two reading threads (tools/soak.py's --threads, the asyncio consumer's tasks): A's
    call held 0-1 and ends; B's takes the turn, holds 2-4 and waits. A's release of its
    hold must not take B's away: a commit then stops at 2 (it went to 5; the partition
    revoked meanwhile, B's call dropped 2-4 and nobody read them)."""
    broker = noida_broker
    group = f"g-{topic_name}"
    c = Consumer(_conf(broker, group, **{"enable.auto.commit": False}))
    a_holding, a_releasing, b_holding = threading.Event(), threading.Event(), threading.Event()
    hold, unhold = c._hold, c._unhold

    def holding(hand):
        hold(hand)
        {"A": a_holding, "B": b_holding}[threading.current_thread().name].set()

    def releasing(hand):
        if threading.current_thread().name == "A":
            a_releasing.set()
            b_holding.wait(5)   # B's call, waiting for the turn, takes it now if it can
        unhold(hand)

    c._hold, c._unhold = holding, releasing
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        got_a, got_b = [], []
        a = threading.Thread(name="A", target=lambda: got_a.extend(
            m.offset() for m in c.consume(100, 6)))
        b = threading.Thread(name="B", target=lambda: got_b.extend(
            m.offset() for m in c.consume(100, 60)))
        a.start()
        time.sleep(0.3)
        _produce(broker.bootstrap, topic_name, [b"0", b"1"])
        assert a_holding.wait(10)
        b.start()                  # waits for the turn A has
        assert a_releasing.wait(20)
        _produce(broker.bootstrap, topic_name, [b"2", b"3", b"4"])
        assert b_holding.wait(20)
        a.join(20)
        assert got_a == [0, 1]
        assert b.is_alive()        # holding 2-4, waiting for 97 more
        assert [tp.offset for tp in c.commit(asynchronous=False)] == [2]
        _produce(broker.bootstrap, topic_name, [b"x"] * 97)
        b.join(30)
        assert got_b == list(range(2, 102))
    finally:
        c.close()
