"""Several threads consuming one Consumer, with chunks fed in as the fetcher would (no
broker): batches are filled one call at a time, so messages never wait in several partly
filled batches, and a call waiting for its turn still keeps its own timeout."""
from __future__ import annotations

import sys
import threading
import time

import pytest

from kafka_client import Consumer, TopicPartition
from kafka_client.consumer.fetcher import Chunk
from kafka_proto.records import RecordBatchBuilder, read_batches


def feed(consumer, start, count):
    """Queue one chunk of ``count`` records of partition t [0] from offset ``start``."""
    b = RecordBatchBuilder()
    for i in range(count):
        b.append(b"v%d" % (start + i))
    batch = next(iter(read_batches(b.build(start))))
    part = consumer._fetcher.parts[("t", 0)]
    with consumer._lock:
        part.fetch_pos = start + count
        consumer._deliver(Chunk(part, part.version, [batch], start, None, batch.size,
                                count))


@pytest.fixture
def consumer():
    c = Consumer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    c.assign([TopicPartition("t", 0, 0)])
    yield c
    c.close()


def offsets_of(result):
    if isinstance(result, list):
        return [m.offset() for m in result]
    return result.column("offset").to_pylist()  # a pyarrow.RecordBatch


@pytest.mark.parametrize("api", ["consume", "consume_arrow"])
def test_threads_waiting_for_more_fill_their_batches_one_after_the_other(consumer, api):
    """Three threads each want 300 messages within 30 s; 900 arrive in chunks of 100.
    Every call returns a full batch as soon as its 300 are there, not after its timeout
    (as it would if the chunks were spread over three half-filled batches), and each
    batch is a run of consecutive offsets."""
    if api == "consume_arrow":
        pytest.importorskip("pyarrow")
    call = getattr(consumer, api)
    results = {}

    def take(k):
        started = time.monotonic()
        got = call(300, 30.0)   # long: a loaded machine cannot stretch ~0.3 s to it
        results[k] = (offsets_of(got), time.monotonic() - started)

    threads = [threading.Thread(target=take, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.1)  # all three are waiting
    for start in range(0, 900, 100):
        feed(consumer, start, 100)
        time.sleep(0.02)
    for t in threads:
        t.join(40)
    assert not any(t.is_alive() for t in threads)
    batches = sorted(offsets for offsets, _ in results.values())
    assert batches == [list(range(0, 300)), list(range(300, 600)), list(range(600, 900))]
    assert max(secs for _, secs in results.values()) < 10, results   # not the 30 s


def test_a_call_waiting_for_its_turn_keeps_its_timeout_and_assign_never_waits(consumer):
    """One thread holds the turn in consume(1000, 30.0) with nothing to read: consume()
    and poll() on other threads return empty within their own timeout, and assign(),
    seek() and position() do not wait for the turn. (The holder's timeout is long, and
    the bounds below well under it, so that a loaded machine cannot stretch the calls to
    it: what the bounds tell apart is waiting for the turn or not.)"""
    holder = threading.Thread(target=consumer.consume, args=(1000, 30.0))
    holder.start()
    try:
        deadline = time.monotonic() + 10        # until the holder has the turn
        while consumer._turn.acquire(blocking=False):
            consumer._turn.release()
            assert time.monotonic() < deadline, "the holder never took the turn"
            time.sleep(0.005)
        started = time.monotonic()
        assert consumer.consume(10, 0.3) == []
        assert consumer.poll(0.2) is None
        assert consumer.consume(10, 0) == []
        assert time.monotonic() - started < 10
        started = time.monotonic()
        consumer.seek(TopicPartition("t", 0, 5))
        assert consumer.position([TopicPartition("t", 0)])[0].offset == 5
        consumer.assign([TopicPartition("t", 0, 7)])
        assert time.monotonic() - started < 10
        assert holder.is_alive()  # still within its 30 s: the calls above did not wait
    finally:
        feed(consumer, 7, 1000)   # the holder's 1000: it returns
        holder.join(10)
    assert not holder.is_alive()


def test_a_callback_run_by_consume_may_consume_on_the_same_thread():
    """A callback served inside consume() (here stats_cb) that calls consume() itself is
    not shut out by its own thread's turn: it gets the messages that arrive meanwhile."""
    nested = []
    calls = []

    def consume_once(stats_json):
        calls.append(stats_json)
        if len(calls) == 1:
            nested.append(c.consume(5, 2.0))

    c = Consumer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0,
                  "statistics.interval.ms": 100, "stats_cb": consume_once})
    c.assign([TopicPartition("t", 0, 0)])
    feeder = threading.Timer(0.5, feed, args=(c, 0, 5))
    feeder.start()
    try:
        started = time.monotonic()
        outer = c.consume(100, 1.0)
        assert time.monotonic() - started < 2.5
        assert [offsets_of(got) for got in nested] == [[0, 1, 2, 3, 4]]
        assert outer == []
    finally:
        feeder.join(5)
        c.close()


def test_consume_arrow_batches_stay_runs_while_another_thread_polls(consumer):
    """consume_arrow() starting from messages an earlier poll() decoded took them one
    next() per row in Python, and poll() on another thread took rows in between: batches
    with holes (rows up to 24045, then 32594). Every batch is a run of consecutive
    offsets, and every message comes out once."""
    pytest.importorskip("pyarrow")
    total, chunk = 200_000, 20_000
    polled, batches = [], []
    done = threading.Event()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)     # hand the GIL over often: the race shows every run

    def poller():
        while not done.is_set():
            m = consumer.poll(0.01)
            if m is not None:
                polled.append(m.offset())

    thread = threading.Thread(target=poller)
    thread.start()
    try:
        fed = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(polled) + sum(map(len, batches)) < total:
            if fed < total:
                feed(consumer, fed, chunk)
                fed += chunk
            batches.append(offsets_of(consumer.consume_arrow(5000, 0.01)))
    finally:
        sys.setswitchinterval(switch)
        done.set()
        thread.join(5)
    holes = [(a, b) for batch in batches for a, b in zip(batch, batch[1:]) if b != a + 1]
    assert holes == []
    every = polled + [o for batch in batches for o in batch]
    assert sorted(every) == list(range(total))


def test_consume_arrow_without_pyarrow_takes_nothing(consumer, monkeypatch):
    """Without pyarrow, consume_arrow() took its rows (positions and stored offsets
    moved) and only then raised ImportError building the batch: a consume() falling back
    skipped them, and a commit went past them."""
    import kafka_client.consumer.arrow as arrow
    feed(consumer, 0, 100)
    monkeypatch.setitem(sys.modules, "pyarrow", None)   # as if it were not installed
    monkeypatch.setattr(arrow, "_pa", None)
    monkeypatch.setattr(arrow, "_schema", None)
    with pytest.raises(ImportError):
        consumer.consume_arrow(10, 1.0)
    assert [m.offset() for m in consumer.consume(1000, 1.0)] == list(range(100))


def test_close_waits_for_the_callback_another_threads_consume_runs(run_child):
    """close() while another thread's consume() runs a callback (stats_cb, 1 s long)
    returns once that callback has returned, as the Producer's close() does and
    confluent-kafka's close() waits for the calls under way: resources the application
    frees after close() were still in use. Three close() at once all wait, and the
    consume() returns. close() returned at once, the callback still running. In a child:
    a close() waiting for itself would hang."""
    out = run_child("""
        import threading, time
        from kafka_client import Consumer

        started, finished = threading.Event(), threading.Event()

        def slow_stats(document):
            if not started.is_set():
                started.set()
                time.sleep(1.0)
                finished.set()

        c = Consumer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0,
                      "statistics.interval.ms": 50, "stats_cb": slow_stats})
        reader = threading.Thread(target=c.consume, args=(1, 20), daemon=True)
        reader.start()
        assert started.wait(10)
        callback_done_at_return = []

        def close():
            c.close()
            callback_done_at_return.append(finished.is_set())

        closers = [threading.Thread(target=close, daemon=True) for _ in range(3)]
        for t in closers:
            t.start()
        for t in closers:
            t.join(20)
        reader.join(10)
        print(callback_done_at_return, reader.is_alive())
    """, timeout=60)
    assert out.stdout.splitlines()[-1:] == ["[True, True, True] False"], out.stderr


def test_a_callback_of_another_thread_may_close_while_close_waits_for_it(run_child):
    """A stats_cb running in one thread's consume() calls close() while another thread's
    close() waits for that callback: neither waits for the other (the callback's close()
    returns once the first close() has finished, which does not wait for a thread that is
    itself closing), so both return at once, not after close()'s 30 s bound."""
    out = run_child("""
        import threading, time
        from kafka_client import Consumer

        in_callback, closing = threading.Event(), threading.Event()
        returned = []

        def stats(document):
            if in_callback.is_set():
                return
            in_callback.set()
            assert closing.wait(10)
            time.sleep(0.3)          # the other close() is waiting for this callback
            c.close()
            returned.append("callback's close()")

        c = Consumer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0,
                      "statistics.interval.ms": 50, "stats_cb": stats})
        reader = threading.Thread(target=c.consume, args=(1, 20), daemon=True)
        reader.start()
        assert in_callback.wait(10)
        start = time.monotonic()
        closing.set()
        c.close()
        returned.append("close()")
        reader.join(10)
        print(len(returned), time.monotonic() - start < 10, reader.is_alive())
    """, timeout=60)
    assert out.stdout.splitlines()[-1:] == ["2 True False"], out.stderr
