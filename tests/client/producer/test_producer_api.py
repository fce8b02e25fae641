"""Producer API without a broker: configuration interplay, queueing, purge, poll/flush
timing, statistics, shutdown."""
from __future__ import annotations

import json
import socket
import threading
import time
from typing import List

import pytest

from kafka_client import KafkaError, KafkaException, Producer


def dead_bootstrap():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


@pytest.fixture
def producer():
    # One failed connect and its error events at the start, then none for 7.5 s or more
    # (with a short backoff the next failure's events could land in a timed poll()).
    p = Producer({"bootstrap.servers": dead_bootstrap(), "reconnect.backoff.ms": 10000,
                  "reconnect.backoff.max.ms": 10000, "message.timeout.ms": 60000})
    yield p
    p.close(0)


def test_incompatible_idempotence_settings_are_rejected():
    for bad in ({"acks": 0}, {"max.in.flight.requests.per.connection": 6}, {"retries": 0}):
        conf = {"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": True, **bad}
        with pytest.raises(KafkaException) as ei:
            Producer(conf)
        assert ei.value.args[0].code() == KafkaError._INVALID_ARG
        assert next(iter(bad)) in str(ei.value)


def test_idempotence_defaults_and_aliases():
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": "true",
                  "queue.buffering.max.ms": 7, "compression.codec": "lz4"})
    try:
        assert p._sender.acks == -1 and p._acc.part_max_in_flight == 5
        assert p._acc.linger == 0.007 and p._acc.compression == 3
    finally:
        p.close(0)


def test_messages_wait_for_metadata_and_count(producer):
    for i in range(10):
        producer.produce("topic", b"v%d" % i)
    assert len(producer) == 10
    assert producer.flush(0.2) == 10  # nothing can be delivered: returns what is left


def test_purge_reports_every_queued_message(producer):
    got = []
    for i in range(5):
        producer.produce("topic", b"v%d" % i, on_delivery=lambda e, m: got.append((e, m)))
    producer.purge(in_flight=False)
    # one report event for the five (librdkafka's count: 1 there too), plus connection
    # errors, which count as events too
    assert producer.poll(1) >= 1
    assert [e.code() for e, _ in got] == [KafkaError._PURGE_QUEUE] * 5
    assert [m.value() for _, m in got] == [b"v%d" % i for i in range(5)]
    assert all(m.status() == 0 for _, m in got)  # NOT_PERSISTED
    assert len(producer) == 0


def test_poll_and_flush_respect_their_timeouts(producer):
    while producer.poll(0.5):
        pass   # the start-up connection errors (events too), served first
    start = time.monotonic()
    assert producer.poll(0.3) == 0
    assert 0.25 <= time.monotonic() - start < 1.5
    producer.produce("topic", b"x")
    start = time.monotonic()
    assert producer.flush(0.3) == 1
    assert time.monotonic() - start < 1.5


def test_poll_and_flush_wait_without_spinning_after_a_report_race(producer):
    # The I/O thread appends a report, then sets the event: a poll() that took the report
    # in between left the event set with nothing queued, and later polls spun on it.
    while producer.poll(0.5):
        pass   # the start-up connection errors first
    producer._report_event.set()
    cpu = time.process_time()
    assert producer.poll(0.3) == 0
    producer.produce("topic", b"x")
    assert producer.flush(0.3) == 1
    assert time.process_time() - cpu < 0.2  # waited, not busy (a spin costs ~0.6 s)


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idem"])
def test_an_unclosed_producer_that_is_dropped_stops_its_thread(idempotent):
    import weakref

    p = Producer({"bootstrap.servers": dead_bootstrap(), "enable.idempotence": idempotent,
                  "reconnect.backoff.ms": 50, "error_cb": lambda err: None})
    p.produce("topic", b"queued, never delivered")
    thread = p._io._thread
    assert thread.is_alive()
    ref = weakref.ref(p)
    del p          # no close(): garbage as soon as the application lets go of it
    assert ref() is None
    thread.join(5)
    assert not thread.is_alive()


def test_config_as_keyword_arguments_and_context_manager():
    with Producer(bootstrap_servers=dead_bootstrap(), linger_ms=1, log_level=3,
                  message_timeout_ms=500) as p:
        assert p._acc.linger == 0.001
        reports = []
        p.produce("t", b"x", on_delivery=lambda e, m: reports.append(e))
    # leaving the block flushed: the message timed out within message.timeout.ms
    assert [e.code() for e in reports] == [KafkaError._MSG_TIMED_OUT]
    assert not p._io.alive


def test_close_waits_for_the_delivery_callback_another_thread_runs():
    """close() while another thread's poll() runs a delivery callback (1 s long) returns
    once that callback has returned, as confluent-kafka's close() waits for the calls
    under way (its test_close_races_close_losers_wait_for_slow_winner): a program that
    reads what its callbacks counted after close() missed that one. Three close() at
    once all wait. It returned at once, the callback still running."""
    p = Producer({"bootstrap.servers": dead_bootstrap()})
    started, finished = threading.Event(), threading.Event()

    def slow_callback(err, msg):
        started.set()
        time.sleep(1.0)
        finished.set()

    p.produce("t", b"x", on_delivery=slow_callback)
    p.purge()      # its report (_PURGE_QUEUE) waits for a poll()
    poller = threading.Thread(target=p.poll, args=(10,), daemon=True)
    poller.start()
    assert started.wait(10)
    callback_done_at_return = []

    def close():
        assert p.close(30) is True
        callback_done_at_return.append(finished.is_set())

    closers = [threading.Thread(target=close, daemon=True) for _ in range(3)]
    for t in closers:
        t.start()
    for t in closers:
        t.join(30)
    assert callback_done_at_return == [True, True, True]
    poller.join(10)
    assert not poller.is_alive()


def test_produce_from_another_thread_while_close_flushes_raises_closed():
    """A thread producing in a loop while close() flushes (messages that cannot be
    delivered: close() waits for their 1 s timeout): its next produce() raises
    RuntimeError("Producer has been closed"), as confluent-kafka's close() refuses calls
    from its start (its test_close_races_produce). It was accepted: the loop kept the
    flush going and filled the queue (100,000 messages: BufferError) until the flush
    gave up."""
    p = Producer({"bootstrap.servers": dead_bootstrap(), "message.timeout.ms": 1000})
    raised: List[BaseException] = []
    produced_before_close = threading.Event()

    def produce_until_refused() -> None:
        while True:
            try:
                p.produce("t", b"x")
                produced_before_close.set()
            except BufferError as exc:
                raised.append(exc)
                time.sleep(0.01)
            except RuntimeError as exc:
                raised.append(exc)
                return

    worker = threading.Thread(target=produce_until_refused, daemon=True)
    worker.start()
    assert produced_before_close.wait(10)
    start = time.monotonic()
    assert p.close(20) is True
    worker.join(10)
    assert not worker.is_alive()
    assert [type(e) for e in raised[-1:]] == [RuntimeError]
    assert str(raised[-1]) == "Producer has been closed"
    assert not any(isinstance(e, BufferError) for e in raised), raised[:3]
    assert time.monotonic() - start < 10


def test_an_unknown_keyword_argument_is_named_as_written():
    """linger_ms is read as linger.ms (an addition); a keyword that is no property either
    way was reported as "bogus.thing", a name the application never wrote."""
    with pytest.raises(KafkaException) as info:
        Producer({"bootstrap.servers": dead_bootstrap()}, bogus_thing=1)
    assert info.value.args[0].str() == 'No such configuration property: "bogus_thing"'


def test_stats_callback_gets_librdkafka_shaped_json():
    docs = []
    p = Producer({"bootstrap.servers": dead_bootstrap(), "statistics.interval.ms": 100,
                  "stats_cb": docs.append})
    try:
        p.produce("t", b"x")
        deadline = time.monotonic() + 5
        while not docs and time.monotonic() < deadline:
            p.poll(0.1)
        doc = json.loads(docs[0])
        assert doc["type"] == "producer" and doc["msg_cnt"] == 1
        assert set(doc) >= {"name", "client_id", "ts", "brokers", "topics", "txmsgs"}
        for b in doc["brokers"].values():
            assert set(b) >= {"rtt", "int_latency", "outbuf_latency", "state"}
    finally:
        p.close(0)


def test_a_subclass_overriding_produce_has_its_override_called():
    """A Producer subclass whose produce() adds a header and calls super().produce():
    every message goes through the override (the per-instance fast path bound in
    __init__ hid it: the header was silently missing), as the delivery reports'
    headers show. After close() produce() refuses as before (RuntimeError)."""
    class Tracing(Producer):
        calls = 0

        def produce(self, topic, value=None, key=None, *args, **kwargs):
            type(self).calls += 1
            kwargs["headers"] = [("trace", b"t-%d" % type(self).calls)]
            return super().produce(topic, value, key, *args, **kwargs)

    reports = []
    p = Tracing({"bootstrap.servers": dead_bootstrap(), "message.timeout.ms": 200})
    try:
        for i in range(3):
            p.produce("t", b"v%d" % i, partition=0,
                      on_delivery=lambda err, msg: reports.append((err.code(), msg.headers())))
        assert p.flush(10) == 0
    finally:
        p.close(0)
    assert Tracing.calls == 3
    assert reports == [(KafkaError._MSG_TIMED_OUT, [("trace", b"t-%d" % i)])
                       for i in (1, 2, 3)], reports
    with pytest.raises(RuntimeError):
        p.produce("t", b"late")


def test_a_blocking_purge_with_the_io_thread_gone_returns(run_child):
    """purge(blocking=True) waits for the I/O thread to purge: with that thread gone (it
    died), it returns within a wait slice instead of waiting 30 s or for ever. In a
    child process, killed if it hangs."""
    done = run_child(f"""
        import time
        from kafka_client import Producer
        p = Producer({{"bootstrap.servers": "{dead_bootstrap()}",
                      "error_cb": lambda err: None}})
        p.produce("topic", b"queued")
        p._io.stop()
        assert not p._io.alive
        start = time.monotonic()
        p.purge(blocking=True)
        print("purge took", time.monotonic() - start)
    """, timeout=120)   # a guard against a hang: the purge's own time is the bound below
    assert done.returncode == 0, done.stderr
    took = float(done.stdout.split()[-1])
    assert took < 2.0, done.stdout


def test_close_called_by_a_delivery_callback_close_runs_returns(run_child):
    """A delivery callback that calls close() (cleanup code), run by close()'s own flush:
    the inner close() returns True at once and the outer one goes on serving the other
    reports before it closes. In a child: a close() waiting for itself (the closing
    thread taken for another closer) would hang."""
    out = run_child("""
        from kafka_client import Producer

        reports = []

        def on_delivery(err, msg):
            reports.append(err.code() if err else None)
            if len(reports) == 1:
                reports.append(p.close(5))

        p = Producer({"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 300,
                      "log_level": 0})
        for i in range(3):
            p.produce("t", b"x", partition=i, on_delivery=on_delivery)
        print(p.close(20), len(p), reports)
    """, timeout=60)
    assert out.stdout.splitlines()[-1:] == ["True 0 [-192, True, -192, -192]"], out.stderr
