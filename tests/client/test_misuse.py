"""Ordinary application code that used to break the client, without a broker: callbacks
that raise, calls after close(), misuse of arguments. Cases that could hang run in a
child process with a hard timeout (``run_child``)."""
from __future__ import annotations

import socket
import time

import pytest

from kafka_client import KafkaError, KafkaException, Message, Producer, TopicPartition


def dead_bootstrap():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


# -- delivery callbacks that raise --------------------------------------------------------

def test_raising_delivery_callback_loses_nothing_and_close_returns(run_child):
    # Five messages waiting for metadata fail together (purge): one report, five
    # callbacks, the third raises.
    out = run_child(f"""
        import time
        from kafka_client import Producer
        calls = []
        def report(err, msg):
            calls.append(msg.value())
            if msg.value() == b"2":
                raise ValueError("application bug")
        p = Producer({{"bootstrap.servers": "{dead_bootstrap()}"}})
        for i in range(5):
            p.produce("t", str(i).encode(), on_delivery=report)
        p.purge(in_flight=False)
        try:
            p.flush(10)
            raise SystemExit("flush() did not raise")
        except ValueError as exc:
            assert str(exc) == "application bug"
        assert calls == [b"0", b"1", b"2"], calls
        assert len(p) == 0                    # bookkeeping done before the callbacks
        t = time.monotonic()
        assert p.flush(10) == 0               # serves the two left, returns at once
        assert time.monotonic() - t < 1
        assert calls == [b"0", b"1", b"2", b"3", b"4"], calls
        t = time.monotonic()
        assert p.close(3) is True
        assert time.monotonic() - t < 5
        print("ok")
    """, timeout=120)   # a hang guard: slow imports on a loaded machine took 30 s
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_raising_delivery_callback_in_a_with_block_leaves_the_block(run_child):
    out = run_child(f"""
        import time
        from kafka_client import Producer
        calls = []
        def report(err, msg):
            calls.append(err.code())
            raise RuntimeError("every callback fails")
        t = time.monotonic()
        try:
            with Producer({{"bootstrap.servers": "{dead_bootstrap()}",
                           "message.timeout.ms": 300}}) as p:
                for i in range(3):
                    p.produce("t", b"x", on_delivery=report)
        except RuntimeError as exc:
            assert str(exc) == "every callback fails"
        else:
            raise SystemExit("leaving the block did not raise")
        assert time.monotonic() - t < 5
        assert len(calls) == 3 and len(p) == 0, (calls, len(p))
        assert not p._io.alive
        print("ok")
    """, timeout=120)   # a hang guard: slow imports on a loaded machine took 30 s
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_raising_callback_does_not_leak_queue_room(run_child):
    # With room for 10 messages, 30 rounds of 10 failing reports with a raising callback
    # must not fill the queue (room used to leak with every raise).
    out = run_child(f"""
        from kafka_client import Producer
        def report(err, msg):
            raise ValueError("boom")
        p = Producer({{"bootstrap.servers": "{dead_bootstrap()}",
                      "queue.buffering.max.messages": 10}})
        raised = 0
        for round in range(30):
            for i in range(10):
                p.produce("t", b"x", on_delivery=report)
            p.purge(in_flight=False)
            while len(p) or p._reports:
                try:
                    p.poll(1)
                except ValueError:
                    raised += 1
        assert raised == 300, raised
        p.close(1)
        print("ok")
    """, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# -- lifecycle ------------------------------------------------------------------------------

PRODUCER_CALLS = {
    "produce": lambda p: p.produce("t", b"x"),
    "produce_batch": lambda p: p.produce_batch("t", [b"x"]),
    "poll": lambda p: p.poll(0),
    "flush": lambda p: p.flush(0),
    "purge": lambda p: p.purge(),
    "list_topics": lambda p: p.list_topics(timeout=1),
}


@pytest.mark.parametrize("call", sorted(PRODUCER_CALLS))
def test_producer_calls_after_close_raise_runtime_error(call):
    p = Producer({"bootstrap.servers": dead_bootstrap()})
    p.produce("t", b"undelivered")
    assert p.close(0.2) is True
    assert p.close() is True              # again: nothing to do, still True
    # list_topics() says what confluent-kafka's shared handle says
    text = "Handle has been closed" if call == "list_topics" else "Producer has been closed"
    with pytest.raises(RuntimeError, match=f"^{text}$"):
        PRODUCER_CALLS[call](p)
    assert len(p) == 0 and bool(p) is True


def test_a_consumer_waiting_on_a_broker_that_never_answers_does_not_spin(run_child):
    """A consumer assigned a partition whose broker accepts the connection and never
    answers waits without burning a CPU: its fetcher's tick returned the fast metadata
    request's time, already past, at every loop turn (select(0) about 58,000 times a
    second: a core's worth of CPU, and every other thread of the process slowed)."""
    out = run_child("""
        import resource, socket, time
        from kafka_client import Consumer, TopicPartition
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        c = Consumer({"bootstrap.servers": "127.0.0.1:%d" % silent.getsockname()[1],
                      "group.id": "g"})
        c.assign([TopicPartition("t", 0, 0)])
        time.sleep(0.5)
        before = resource.getrusage(resource.RUSAGE_SELF)
        time.sleep(2)
        after = resource.getrusage(resource.RUSAGE_SELF)
        print(round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 2))
        c.close()
    """, timeout=60)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.split()[-1]) < 0.5, out.stdout


def test_a_nan_timeout_returns_at_once(run_child):
    """confluent-kafka's calls return at once for a NaN timeout; ours took it for a
    deadline that never passed: poll()/consume()/consume_arrow() spun a CPU until close()
    and list_topics(), committed() and get_watermark_offsets() waited for ever (a broker
    that never answers, here)."""
    out = run_child("""
        import socket, time
        import pyarrow  # imported by the first consume_arrow(): not what is timed
        from kafka_client import Consumer, KafkaException, Producer, TopicPartition
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        conf = {"bootstrap.servers": "127.0.0.1:%d" % silent.getsockname()[1]}
        c = Consumer(dict(conf, **{"group.id": "g"}))
        c.assign([TopicPartition("t", 0, 0)])
        p = Producer(conf)
        nan = float("nan")
        calls = [("poll", lambda: c.poll(nan)), ("consume", lambda: c.consume(1, nan)),
                 ("consume_arrow", lambda: c.consume_arrow(1, nan).num_rows),
                 ("producer poll", lambda: p.poll(nan)),
                 ("list_topics", lambda: p.list_topics(timeout=nan)),
                 ("committed", lambda: c.committed([TopicPartition("t", 0)], nan)),
                 ("get_watermark_offsets",
                  lambda: c.get_watermark_offsets(TopicPartition("t", 0), nan))]
        for name, call in calls:
            start = time.monotonic()
            try:
                call()
            except KafkaException:
                pass    # _TIMED_OUT, or the last retriable error met (no leader yet)
            print(name, round(time.monotonic() - start))
    """, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["poll", "0", "consume", "0", "consume_arrow", "0",
                                  "producer", "poll", "0", "list_topics", "0", "committed",
                                  "0", "get_watermark_offsets", "0"]


def test_purge_after_close_returns_at_once(run_child):
    out = run_child(f"""
        import time
        from kafka_client import Producer
        p = Producer({{"bootstrap.servers": "{dead_bootstrap()}"}})
        p.produce("t", b"x")
        p.close(0)
        t = time.monotonic()
        try:
            p.purge()
        except RuntimeError as exc:
            print(exc, round(time.monotonic() - t))
    """, timeout=120)   # a guard against a hang: the purge's own time is checked below
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Producer has been closed 0"


def test_close_from_another_thread_ends_every_call_waiting_there(run_child):
    """close() from one thread while others are blocked in the client (brokers down,
    10 s timeouts): each blocked call ends at once, instead of at its timeout: consume()
    and consume_arrow() with what they hold, flush() with the count never delivered, the
    calls waiting for a broker's answer with _DESTROY."""
    out = run_child(f"""
        import logging, threading, time
        from kafka_client import Consumer, KafkaException, Producer, TopicPartition
        from kafka_client.admin import AdminClient
        dead = "{dead_bootstrap()}"
        quiet = logging.getLogger("quiet")
        quiet.disabled = True

        def consumer():
            c = Consumer({{"bootstrap.servers": dead, "group.id": "g"}})
            c.assign([TopicPartition("t", 0, 0)])
            return c

        def producer(**conf):
            p = Producer({{"bootstrap.servers": dead, **conf}})
            if not conf:
                p.produce("t", b"x")
            return p

        cases = [
            ("consume", consumer, lambda c: c.consume(10, 10), lambda c: c.close()),
            ("consume_arrow", consumer, lambda c: c.consume_arrow(10, 10).num_rows,
             lambda c: c.close()),
            ("consumer list_topics", consumer, lambda c: c.list_topics(timeout=10),
             lambda c: c.close()),
            ("committed", consumer,
             lambda c: c.committed([TopicPartition("t", 0)], timeout=10), lambda c: c.close()),
            ("get_watermark_offsets", consumer,
             lambda c: c.get_watermark_offsets(TopicPartition("t", 0), timeout=10),
             lambda c: c.close()),
            ("flush", producer, lambda p: p.flush(10), lambda p: p.close(0)),
            # No brokers at all: no connection errors for poll() to serve at once.
            ("producer poll", lambda: Producer({{"logger": quiet}}), lambda p: p.poll(10),
             lambda p: p.close(0)),
            ("admin poll", lambda: AdminClient({{"logger": quiet}}), lambda a: a.poll(10),
             lambda a: a.close()),
            ("producer list_topics", producer, lambda p: p.list_topics(timeout=10),
             lambda p: p.close(0)),
            ("init_transactions", lambda: producer(**{{"transactional.id": "x"}}),
             lambda p: p.init_transactions(10), lambda p: p.close(0)),
        ]
        for name, make, call, close in cases:
            client = make()
            out = {{}}
            def run():
                try:
                    out["result"] = call(client)
                except KafkaException as exc:
                    out["result"] = exc.args[0].name()
            t = threading.Thread(target=run)
            t.start()
            time.sleep(0.3)
            started = time.monotonic()
            close(client)
            t.join(5)
            assert not t.is_alive(), name + ": still blocked"
            print(name, out["result"], time.monotonic() - started < 1)
    """, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:-1] == [
        "consume [] True", "consume_arrow 0 True", "consumer list_topics _DESTROY True",
        "committed _DESTROY True", "get_watermark_offsets _DESTROY True", "flush 1 True",
        "producer poll 0 True", "admin poll 0 True", "producer list_topics _DESTROY True",
        "init_transactions _DESTROY True"]


def test_leaving_a_with_block_closes_the_producer():
    with Producer({"bootstrap.servers": dead_bootstrap(), "message.timeout.ms": 200}) as p:
        p.produce("t", b"x")
    with pytest.raises(RuntimeError, match="closed"):
        p.poll(0)


def test_producer_is_true_with_an_empty_queue():
    p = Producer({"bootstrap.servers": dead_bootstrap()})
    try:
        assert len(p) == 0 and bool(p) is True
        if not p:
            pytest.fail("an empty producer is falsy")
    finally:
        p.close(0)


@pytest.mark.parametrize("kind", ["Producer", "Consumer"])
def test_subclass_that_skips_super_init_gets_a_clear_error(kind):
    import kafka_client

    base = getattr(kafka_client, kind)

    class Forgetful(base):
        def __init__(self, config):
            self.config = config      # no super().__init__()

    c = Forgetful({"bootstrap.servers": "127.0.0.1:1"})
    call = (lambda: c.produce("t", b"x")) if "Producer" in kind else (lambda: c.poll(0))
    with pytest.raises(RuntimeError, match=r"Forgetful is not initialized: .*super\(\)"):
        call()
    c.close()                          # nothing to close: no error either


# -- arguments --------------------------------------------------------------------------------

@pytest.mark.parametrize("known", [False, True], ids=["metadata-unknown", "metadata-known"])
@pytest.mark.parametrize("partition", [-2, -5, -2**31])
def test_partition_below_minus_one_is_refused_either_way(known, partition):
    from kafka_client._cluster.metadata import TopicInfo

    p = Producer({"bootstrap.servers": dead_bootstrap()})
    try:
        if known:
            info = TopicInfo("t", 0, [1, 1], [-1, -1], [0, 0], time.monotonic())
            p._acc._new_topic("t")
            assert p._acc.apply_metadata({"t": info}, time.monotonic()).unplaced == []
            assert p._acc.topics["t"].parts is not None
        with pytest.raises(KafkaException) as e:
            p.produce("t", b"x", partition=partition)
        assert e.value.args[0].code() == KafkaError._INVALID_ARG
        assert f"invalid partition {partition}" in e.value.args[0].str()
        with pytest.raises(KafkaException) as e:
            p.produce_batch("t", [b"x"], partition=partition)
        assert e.value.args[0].code() == KafkaError._INVALID_ARG
        assert len(p) == 0
        p.produce("t", b"x", partition=1)    # still usable
        assert len(p) == 1
    finally:
        p.close(0)


PRODUCER_MISUSE = [
    (lambda p: p.produce(None), TypeError), (lambda p: p.produce(""), KafkaException),
    (lambda p: p.produce("t", object()), TypeError),
    (lambda p: p.produce("t", key=3.5), TypeError),
    (lambda p: p.produce("t", partition="0"), TypeError),
    (lambda p: p.produce("t", timestamp="now"), TypeError),
    (lambda p: p.produce("t", headers="h"), TypeError),
    (lambda p: p.produce("t", headers=[("k",)]), TypeError),
    (lambda p: p.produce("t", on_delivery=5), TypeError),
    (lambda p: p.produce_batch("t", [b"x"], keys=[b"k", b"l"]), ValueError),
    (lambda p: p.produce_batch("t", [b"x"], partition="0"), TypeError),
    (lambda p: p.poll("1"), TypeError), (lambda p: p.flush([]), TypeError),
    (lambda p: p.list_topics(1), TypeError), (lambda p: p.list_topics(timeout="1"), TypeError),
    (lambda p: p.purge(1, 2, 3, 4), TypeError),
    (lambda p: p.produce("t", b"x" * 2_000_000), KafkaException),
]


def test_every_producer_method_refuses_bad_arguments_and_stays_usable():
    p = Producer({"bootstrap.servers": dead_bootstrap()})
    try:
        for call, exc in PRODUCER_MISUSE:
            with pytest.raises(exc):
                call(p)
            assert len(p) == 0
        p.produce("t", b"ok")
        assert len(p) == 1 and p.flush(0) == 1
    finally:
        p.close(0)


CONSUMER_MISUSE = [
    (lambda c: c.assign(TopicPartition("t", 0)), TypeError),
    (lambda c: c.assign([("t", 0)]), TypeError),
    (lambda c: c.assign([TopicPartition("t")]), KafkaException),
    (lambda c: c.incremental_assign(None), TypeError),
    (lambda c: c.incremental_unassign([TopicPartition("nope", 0)]), KafkaException),
    (lambda c: c.seek(None), TypeError),
    (lambda c: c.seek(TopicPartition("nope", 0, 1)), KafkaException),
    (lambda c: c.position("t"), TypeError), (lambda c: c.pause(None), TypeError),
    (lambda c: c.resume([1]), TypeError), (lambda c: c.consume("1"), TypeError),
    (lambda c: c.consume(1, "1"), TypeError), (lambda c: c.consume(2_000_000), ValueError),
    (lambda c: c.consume_arrow(0), ValueError), (lambda c: c.poll([]), TypeError),
    (lambda c: c.get_watermark_offsets("t"), TypeError),
    (lambda c: c.offsets_for_times(TopicPartition("t", 0)), TypeError),
    (lambda c: c.list_topics(1), TypeError),
    (lambda c: c.subscribe(["t"], on_assign="f"), TypeError),
    (lambda c: c.subscribe([None]), TypeError), (lambda c: c.subscribe([]), KafkaException),
    (lambda c: c.store_offsets(), ValueError),
    (lambda c: c.store_offsets(offsets=[TopicPartition("t", 1, 1)]), KafkaException),
    (lambda c: c.commit(offsets="t"), TypeError),
    (lambda c: c.commit(message=Message(), offsets=[]), ValueError),
    (lambda c: c.committed(None), TypeError),
]


def test_every_consumer_method_refuses_bad_arguments_and_stays_usable():
    from kafka_client import Consumer

    c = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    try:
        c.assign([TopicPartition("t", 0, 0)])
        for call, exc in CONSUMER_MISUSE:
            with pytest.raises(exc):
                call(c)
        assert c.assignment() == [TopicPartition("t", 0)]
        assert c.consume(1, 0) == []
        c.seek(TopicPartition("t", 0, 3))
        assert c.position([TopicPartition("t", 0)])[0].offset == 3
    finally:
        c.close()


# -- exit, collection and close with undelivered messages ------------------------------------

def test_exit_with_queued_messages_warns_on_stderr(run_child):
    out = run_child(f"""
        from kafka_client import Producer
        p = Producer({{"bootstrap.servers": "{dead_bootstrap()}"}})
        for i in range(1000):
            p.produce("t", b"x" * 100)
        print("exiting")
    """, timeout=120)   # a hang guard: slow imports on a loaded machine took 30 s
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if "Producer terminating" in line]
    assert warnings == ["Producer terminating with 1000 messages (100000 bytes) still in "
                        "queue or transit: use flush() to wait for outstanding message "
                        "delivery"], out.stderr


def test_exit_after_flush_or_close_says_nothing(run_child):
    out = run_child(f"""
        from kafka_client import Producer
        p = Producer({{"bootstrap.servers": "{dead_bootstrap()}"}})
        q = Producer({{"bootstrap.servers": "{dead_bootstrap()}"}})
        q.close()
    """, timeout=120)   # a hang guard: slow imports on a loaded machine took 30 s
    assert out.returncode == 0 and "terminating" not in out.stderr, out.stderr


def test_dropped_or_closed_producer_with_undelivered_messages_warns_once(caplog):
    import logging

    caplog.set_level(logging.WARNING, logger="kafka_client.producer")
    p = Producer({"bootstrap.servers": dead_bootstrap()})
    for _ in range(7):
        p.produce("t", b"12345")
    del p                                            # collected without close()
    q = Producer({"bootstrap.servers": dead_bootstrap()})
    q.produce("t", b"x")
    assert q.close(0.1) is True
    q.close()
    texts = [r.getMessage() for r in caplog.records if "terminating" in r.getMessage()]
    assert texts == [
        "Producer terminating with 7 messages (35 bytes) still in queue or transit: use "
        "flush() to wait for outstanding message delivery",
        "Producer terminating with 1 messages (1 bytes) still in queue or transit: use "
        "flush() to wait for outstanding message delivery"]


def test_a_serde_client_dropped_without_close_closes_the_serdes_it_built(run_child):
    """The serdes a client built from ``.builder`` properties are its own: close()
    closes them, and so does a client collected, or left open at exit, without close()
    (they were left open: a Schema Registry serde's client with them). Ready-made serdes
    stay the application's."""
    out = run_child(f"""
        import gc
        from kafka_client import (DeserializingConsumer, DeserializingShareConsumer,
                                  SerializingProducer)

        class Built:
            def __init__(self, name):
                self.name = name

            def __call__(self, data, ctx):
                return data

            def close(self):
                print("closed", self.name, flush=True)

        class Builder:
            def __init__(self, name):
                self.name = name

            def build(self, conf, is_key):
                return Built(self.name), conf

        def make(cls, kind, name, **extra):
            return cls(dict({{"bootstrap.servers": "{dead_bootstrap()}",
                              f"value.{{kind}}.builder": Builder(name),
                              f"key.{{kind}}": Built("ready-made " + name)}}, **extra))

        for cls, kind, extra in (
                (DeserializingShareConsumer, "deserializer", {{"group.id": "g"}}),
                (DeserializingConsumer, "deserializer", {{"group.id": "g"}}),
                (SerializingProducer, "serializer", {{}})):
            make(cls, kind, cls.__name__, **extra)          # dropped at once
            gc.collect()
            print("collected", cls.__name__, flush=True)
        share = make(DeserializingShareConsumer, "deserializer", "share at exit",
                     **{{"group.id": "g"}})
        plain = make(DeserializingConsumer, "deserializer", "plain at exit",
                     **{{"group.id": "g"}})
        producer = make(SerializingProducer, "serializer", "producer at exit")
        print("exiting", flush=True)
    """, timeout=120)   # a hang guard: each drop waits at most 5 s for its brokers
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:7] == ["closed DeserializingShareConsumer",
                         "collected DeserializingShareConsumer",
                         "closed DeserializingConsumer", "collected DeserializingConsumer",
                         "closed SerializingProducer", "collected SerializingProducer",
                         "exiting"], out.stdout
    assert sorted(lines[7:]) == ["closed plain at exit", "closed producer at exit",
                                 "closed share at exit"], out.stdout


def test_the_warning_goes_through_the_configured_logger():
    import logging

    records = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("test-robustness-app-logger")
    logger.addHandler(Collect())
    logger.propagate = False
    p = Producer({"bootstrap.servers": dead_bootstrap(), "logger": logger})
    p.produce("t", b"abc")
    p.close(0)
    assert any("terminating with 1 messages" in r for r in records), records


# -- fork ---------------------------------------------------------------------------------------

FORK_CHILD_CHECKS = """
import os, sys, time
from kafka_client import Consumer, KafkaError, KafkaException, Producer, TopicPartition

def refused(call):
    try:
        call()
    except KafkaException as exc:
        err = exc.args[0]
        assert err.code() == KafkaError._STATE and err.fatal(), err
        assert "fork" in err.str() and "create a new" in err.str(), err.str()
        return True
    return False
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_forked_child_gets_a_clear_error_from_every_method_and_exits(run_child):
    out = run_child(FORK_CHILD_CHECKS + f"""
p = Producer({{"bootstrap.servers": "{dead_bootstrap()}"}})
p.produce("t", b"parent's, queued before the fork")
c = Consumer({{"bootstrap.servers": "{dead_bootstrap()}", "group.id": "g"}})
c.assign([TopicPartition("t", 0, 0)])
pid = os.fork()
if pid == 0:
    calls = [lambda: p.produce("t", b"x"), lambda: p.produce_batch("t", [b"x"]),
             lambda: p.poll(0), lambda: p.flush(0), lambda: p.purge(), lambda: len(p),
             lambda: p.list_topics(timeout=1), lambda: p.close(),
             lambda: c.poll(0), lambda: c.consume(1, 0), lambda: c.assign([]),
             lambda: c.assignment(), lambda: c.commit(), lambda: c.close()]
    results = [refused(call) for call in calls]
    sys.exit(0 if all(results) else 10 + results.index(False))  # a normal exit: atexit runs
t = time.monotonic()
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    if time.monotonic() - t > 5:
        os.kill(pid, 9)
        raise SystemExit("the child did not exit within 5 s")
    time.sleep(0.01)
assert os.waitstatus_to_exitcode(status) == 0, os.waitstatus_to_exitcode(status)
print("child exited in %.1f s" % (time.monotonic() - t))
# the parent's clients go on
assert len(p) == 1 and c.assignment() == [TopicPartition("t", 0)]
p.produce("t", b"after the fork")
assert len(p) == 2
c.close()
p.close(0)
print("ok")
""", timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.split()
    assert lines[-1] == "ok", out.stdout
    assert "terminating" in out.stderr          # the parent's close(0), not the child's
    assert out.stderr.count("terminating") == 1, out.stderr


# -- hostile brokers, many clients (these held before issue 16; the tests keep them) -------

def _hostile_broker(answer: bytes):
    """A listening socket whose every connection gets ``answer`` to its first request."""
    import socket as _socket
    import threading as _threading

    server = _socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = _threading.Event()
    conns = []

    def serve():
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conns.append(conn)
            try:
                conn.settimeout(2)
                conn.recv(65536)          # the ApiVersions request
                conn.sendall(answer)
            except OSError:
                pass

    t = _threading.Thread(target=serve, daemon=True)
    t.start()

    def close():
        stop.set()
        t.join(2)
        for c in conns:
            c.close()
        server.close()

    return f"127.0.0.1:{server.getsockname()[1]}", close


@pytest.mark.parametrize("answer", [
    b"\x7f\xff\xff\xff" + b"x" * 100,                       # a 2 GiB length prefix
    b"\x00\x00\x00\x10" + b"\xff" * 16,                      # garbage of the right size
    b"\xff\xff\xff\xf0",                                     # a negative size
], ids=["2GiB-prefix", "garbage", "negative-size"])
def test_hostile_broker_answers_are_errors_not_crashes(answer):
    import resource

    bootstrap, stop = _hostile_broker(answer)
    errors = []
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 1500,
                  "reconnect.backoff.ms": 50, "error_cb": errors.append})
    try:
        reports = []
        p.produce("t", b"x", on_delivery=lambda err, msg: reports.append(err))
        assert p.flush(10) == 0                      # reported (failed), not stuck
        assert [e.code() for e in reports] == [KafkaError._MSG_TIMED_OUT]
        assert errors and all(e.code() in (KafkaError._TRANSPORT, KafkaError._BAD_MSG,
                                           KafkaError._ALL_BROKERS_DOWN) for e in errors)
        if answer.startswith(b"\x7f"):     # the error names the property to raise
            assert any("receive.message.max.bytes" in e.str() for e in errors), errors
    finally:
        p.close(1)
        stop()
    # nothing like the announced 2 GiB was allocated
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 200_000


def test_hundreds_of_clients_opened_and_dropped_leave_nothing_behind():
    import gc
    import os as _os
    import threading as _threading

    from kafka_client import Consumer

    def fds():
        return len(_os.listdir("/proc/self/fd"))

    gc.collect()
    threads_before, fds_before = _threading.active_count(), fds()
    for i in range(150):
        p = Producer({"bootstrap.servers": dead_bootstrap()})
        p.produce("t", b"x")
        c = Consumer({"bootstrap.servers": dead_bootstrap()})
        c.assign([TopicPartition("t", 0)])
        del p, c                                   # no close(): collected at once
    gc.collect()
    deadline = time.monotonic() + 10
    while _threading.active_count() > threads_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _threading.active_count() <= threads_before
    assert fds() <= fds_before + 2, (fds_before, fds())
