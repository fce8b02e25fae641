"""Ordinary application code against a real broker (Tansu): callbacks that raise, several
threads on one consumer, exit without flush, fork. Cases that could hang run in a child
process with a hard timeout (``run_child``)."""
from __future__ import annotations

import threading
import time

import pytest

from kafka_client import Consumer, KafkaError, KafkaException, Producer, TopicPartition


def fill(bootstrap, topic, n, partitions=1):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, b"%d" % i, partition=i % partitions)
    assert p.flush(60) == 0
    p.close()


# -- callbacks that raise ------------------------------------------------------------------

def test_raising_on_delivery_in_one_batch(run_child, tansu_broker, topic_name):
    """The acceptance case: 1 of 5 callbacks of one batch raises; all 5 run, len() is 0,
    the next flush() returns 0 at once, close() returns in under 5 s, the with block is
    left."""
    tansu_broker.create_topic(topic_name, partitions=1)
    out = run_child(f"""
        import time
        from kafka_client import Producer
        calls = []
        def report(err, msg):
            assert err is None, err
            calls.append(msg.offset())
            if len(calls) == 3:
                raise ValueError("third callback fails")
        with Producer({{"bootstrap.servers": "{tansu_broker.bootstrap}",
                       "linger.ms": 200}}) as p:
            for i in range(5):
                p.produce("{topic_name}", b"v%d" % i, partition=0, on_delivery=report)
            try:
                p.flush(30)
                raise SystemExit("flush() did not raise")
            except ValueError:
                pass
            assert len(calls) == 3 and len(p) == 0, (calls, len(p))
            t = time.monotonic()
            assert p.flush(30) == 0
            assert time.monotonic() - t < 0.5
            assert len(calls) == 5 and sorted(calls) == calls, calls
            assert len({{c - calls[0] for c in calls}}) == 5   # one batch: 5 offsets in a row
            t = time.monotonic()
        assert time.monotonic() - t < 5
        print("ok")
    """, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_raising_error_cb_and_stats_cb_reach_poll_and_lose_nothing(run_child):
    out = run_child("""
        import time
        from kafka_client import Producer
        seen = []
        def error_cb(err):
            seen.append(err.code())
            raise RuntimeError("error_cb fails")
        stats = []
        def stats_cb(doc):
            stats.append(doc)
            raise KeyError("stats_cb fails")
        p = Producer({"bootstrap.servers": "127.0.0.1:1,127.0.0.1:2", "error_cb": error_cb,
                      "stats_cb": stats_cb, "statistics.interval.ms": 100,
                      "reconnect.backoff.ms": 20})
        p.produce("t", b"x")   # needs a broker: connection errors come
        raised = {RuntimeError: 0, KeyError: 0}
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                p.poll(0.1)
            except (RuntimeError, KeyError) as exc:
                raised[type(exc)] += 1
        assert raised[RuntimeError] == len(seen) >= 3, (raised, seen)
        assert raised[KeyError] == len(stats) >= 3, (raised, len(stats))
        t = time.monotonic()
        try:
            p.close(1)           # the message is not deliverable; callbacks still raise
        except (RuntimeError, KeyError):
            pass                 # raised once closed
        assert time.monotonic() - t < 5 and not p._io.alive
        print("ok")
    """, timeout=120)   # a hang guard: slow imports on a loaded machine took 30 s
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_raising_rebalance_callbacks_keep_the_group_consistent(run_child, tansu_broker,
                                                               topic_name):
    tansu_broker.create_topic(topic_name, partitions=2)
    fill(tansu_broker.bootstrap, topic_name, 20, partitions=2)
    out = run_child(f"""
        import time
        from kafka_client import Consumer
        events = []
        def on_assign(c, parts):
            events.append(("assign", len(parts)))
            raise ValueError("on_assign fails")
        def on_revoke(c, parts):
            events.append(("revoke", len(parts)))
            raise LookupError("on_revoke fails")
        c = Consumer({{"bootstrap.servers": "{tansu_broker.bootstrap}",
                      "group.id": "{topic_name}", "auto.offset.reset": "earliest",
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}})
        c.subscribe(["{topic_name}"], on_assign=on_assign, on_revoke=on_revoke)
        got, raised = [], 0
        deadline = time.monotonic() + 40
        while len(got) < 20 and time.monotonic() < deadline:
            try:
                got.extend(m for m in c.consume(20, 0.5) if m.error() is None)
            except ValueError:
                raised += 1
        # the assignment was applied although the callback raised: every message came
        assert raised == 1 and len(got) == 20, (raised, len(got), events)
        assert len(c.assignment()) == 2
        t = time.monotonic()
        try:
            c.close()
            raise SystemExit("close() did not raise")
        except LookupError:
            pass
        assert time.monotonic() - t < 10
        assert events == [("assign", 2), ("revoke", 2)], events
        assert not c._io.alive                      # closed although on_revoke raised
        print("ok")
    """, timeout=90)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_callback_raising_while_consume_holds_messages_loses_none(tansu_broker, topic_name):
    tansu_broker.create_topic(topic_name, partitions=1)
    fill(tansu_broker.bootstrap, topic_name, 10)

    def on_commit(err, parts):
        raise ValueError("on_commit fails")

    c = Consumer({"bootstrap.servers": tansu_broker.bootstrap, "group.id": topic_name,
                  "enable.auto.commit": False, "on_commit": on_commit})
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        first = []
        while not first:
            first = c.consume(1, 5)
        # nothing stored: the commit's result (_NO_OFFSET) goes to on_commit, which raises
        # in the middle of the next consume() that already holds messages
        timer = threading.Timer(0.5, lambda: c.commit())
        timer.start()
        held = c.consume(100, 3)
        timer.join()
        assert [m.offset() for m in first + held] == list(range(10))
        with pytest.raises(ValueError, match="on_commit fails"):
            c.consume(1, 0)                          # the next call raises it
        assert c.consume(1, 0.2) == []               # and the consumer goes on
    finally:
        c.close()


# -- several threads on one consumer -------------------------------------------------------

def test_threads_consuming_one_consumer_get_each_message_once(tansu_broker, topic_name):
    """The acceptance case: 4 threads consume() one Consumer and a fifth commits every
    0.2 s; 200,000 messages in 4 partitions come out exactly once, each batch in
    per-partition order, in under 30 s; the last commit covers what was returned."""
    n, parts = 200_000, 4
    tansu_broker.create_topic(topic_name, partitions=parts)
    p = Producer({"bootstrap.servers": tansu_broker.bootstrap, "linger.ms": 5})
    values = [b"x" * 10] * 10_000
    for part in range(parts):
        for _ in range(n // parts // 10_000):
            while True:
                try:
                    p.produce_batch(topic_name, values, partition=part)
                    break
                except BufferError:
                    p.poll(0.1)
    assert p.flush(60) == 0
    p.close()
    commits = []
    c = Consumer({"bootstrap.servers": tansu_broker.bootstrap, "group.id": topic_name,
                  "enable.auto.commit": False,
                  "on_commit": lambda err, tps: commits.append(err)})
    c.assign([TopicPartition(topic_name, i, 0) for i in range(parts)])
    seen = [[] for _ in range(4)]
    order_ok = [True] * 4
    stop = threading.Event()
    done = threading.Event()
    total = [0]
    lock = threading.Lock()

    def consume(k):
        while not done.is_set():
            batch = c.consume(5000, 0.2)
            last = {}
            for m in batch:
                assert m.error() is None, m.error()
                prev = last.get(m.partition())
                if prev is not None and m.offset() != prev + 1:
                    order_ok[k] = False
                last[m.partition()] = m.offset()
                seen[k].append((m.partition(), m.offset()))
            with lock:
                total[0] += len(batch)
                if total[0] >= n:
                    done.set()

    def commit():
        while not stop.is_set():
            try:
                c.commit(asynchronous=False)
            except Exception:
                pass  # _NO_OFFSET when nothing new was returned since the last commit
            stop.wait(0.2)

    start = time.monotonic()
    workers = [threading.Thread(target=consume, args=(k,)) for k in range(4)]
    committer = threading.Thread(target=commit)
    for t in workers + [committer]:
        t.start()
    for t in workers:
        t.join(60)
    elapsed = time.monotonic() - start
    done.set()
    stop.set()
    committer.join(10)
    try:
        everything = [x for s in seen for x in s]
        assert len(everything) == n and len(set(everything)) == n, \
            (len(everything), len(set(everything)))
        assert all(order_ok)
        assert all(seen), [len(s) for s in seen]       # every thread got its share
        assert elapsed < 30, elapsed
        try:
            c.commit(asynchronous=False)                # what was returned, all of it
        except KafkaException as exc:                   # the committer was first
            assert exc.args[0].code() == KafkaError._NO_OFFSET
        got = c.committed([TopicPartition(topic_name, i) for i in range(parts)], timeout=10)
        assert [tp.offset for tp in got] == [n // parts] * parts
    finally:
        c.close()


# -- fork ------------------------------------------------------------------------------------

@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_fork_child_makes_its_own_producer_and_the_parent_goes_on(run_child, tansu_broker,
                                                                  topic_name):
    tansu_broker.create_topic(topic_name, partitions=1)
    out = run_child(f"""
        import os, sys, time
        from kafka_client import KafkaException, Producer
        conf = {{"bootstrap.servers": "{tansu_broker.bootstrap}", "linger.ms": 50}}
        p = Producer(conf)
        p.produce("{topic_name}", b"parent-1")
        assert p.flush(30) == 0
        p.produce("{topic_name}", b"parent-2")        # queued at the fork
        pid = os.fork()
        if pid == 0:
            try:
                p.produce("{topic_name}", b"child-inherited")
                os._exit(3)
            except KafkaException:
                pass
            q = Producer(conf)                           # made in the child: works
            q.produce("{topic_name}", b"child-own")
            sys.exit(0 if q.flush(30) == 0 else 4)
        t = time.monotonic()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, os.waitstatus_to_exitcode(status)
        assert p.flush(30) == 0                          # the parent's queued one goes
        p.produce("{topic_name}", b"parent-3")
        assert p.flush(30) == 0
        p.close()
        print("ok")
    """, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "ok"
    c = Consumer({"bootstrap.servers": tansu_broker.bootstrap})
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            got.extend(m.value() for m in c.consume(10, 0.5) if m.error() is None)
        got.extend(m.value() for m in c.consume(10, 1.0) if m.error() is None)
    finally:
        c.close()
    # each message once; the inherited producer sent nothing from the child
    assert sorted(got) == [b"child-own", b"parent-1", b"parent-2", b"parent-3"]


def test_threads_producing_and_polling_one_producer(tansu_broker, topic_name):
    """4 threads produce() with callbacks and 2 more poll()/flush() on one Producer:
    every message is delivered and reported exactly once, at its own offset."""
    tansu_broker.create_topic(topic_name, partitions=2)
    per_thread, producers = 25_000, 4
    reports = []
    p = Producer({"bootstrap.servers": tansu_broker.bootstrap, "linger.ms": 5})
    done = threading.Event()

    def report(err, msg):
        reports.append((err, msg.partition(), msg.offset(), msg.value()))

    def produce(k):
        for i in range(per_thread):
            while True:
                try:
                    p.produce(topic_name, b"%d-%d" % (k, i), on_delivery=report)
                    break
                except BufferError:
                    p.poll(0.05)

    def serve():
        while not done.is_set():
            p.poll(0.05)
            p.flush(0.01)

    servers = [threading.Thread(target=serve) for _ in range(2)]
    workers = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
    for t in servers + workers:
        t.start()
    for t in workers:
        t.join(120)
    try:
        assert p.flush(60) == 0
    finally:
        done.set()
        for t in servers:
            t.join(10)
        p.close()
    n = per_thread * producers
    assert len(reports) == n
    assert all(err is None for err, _, _, _ in reports)
    assert len({value for _, _, _, value in reports}) == n              # each once
    assert len({(part, off) for _, part, off, _ in reports}) == n        # own offsets
