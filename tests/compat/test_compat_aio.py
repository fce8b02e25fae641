"""confluent-kafka drop-in: the asyncio API (``confluent_kafka.aio`` -> ``kafka_client.aio``).

Every test body runs against both implementations (the ``impl`` fixture), on the session's
Tansu broker: AIOProducer's futures and their delivery failures, flush()/len()/purge() and
the lifecycle, AIOConsumer's consume()/poll(), a group subscription with coroutine
rebalance callbacks that await the consumer's own methods, coroutine error_cb on the event
loop's thread, the serializing/deserializing wrappers, concurrent consume() calls and an
event loop that keeps running while the client waits. Where confluent-kafka's behaviour is
an accident of its implementation or ours adds to it (use after close, a second close(),
headers=, timestamp=, a purged message still in confluent's own buffer), each side's is
asserted separately and the difference is named.

No pytest-asyncio: each test is a plain function running ``asyncio.run()`` of its body.
Until ``kafka_client.aio`` exists, its parameter skips.
"""
from __future__ import annotations

import asyncio
import importlib
import socket
import threading
import time
from types import SimpleNamespace

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

pytest.importorskip("confluent_kafka.aio")

CONFLUENT = "confluent_kafka"
OURS = "kafka_client"
SESSION_MS = 6000       # Tansu holds a group's first join for half the session timeout


@pytest.fixture(params=[CONFLUENT, OURS])
def impl(request):
    """The implementation under test: ``.aio`` (AIOProducer, ...), ``.kafka`` (the top
    module: TopicPartition, KafkaError, ...), ``.error``, ``.ser`` (serialization)."""
    name = request.param
    aio = pytest.importorskip(f"{name}.aio")
    return SimpleNamespace(name=name, confluent=name == CONFLUENT, aio=aio,
                           kafka=importlib.import_module(name),
                           error=importlib.import_module(f"{name}.error"),
                           ser=importlib.import_module(f"{name}.serialization"))


def run(coro, timeout=45):
    """Run ``coro`` on a new event loop, failing (not hanging) after ``timeout`` s."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def nowhere():
    """A loopback address nothing listens on (connections are refused)."""
    from kafka_client._testing.brokers import free_port
    return f"127.0.0.1:{free_port()}"


@pytest.fixture
def silent():
    """A loopback address that takes connections (the kernel's backlog) and never
    answers: nothing is delivered, and no error event comes within a test's time
    (librdkafka counts queued error events in len() and flush()'s result)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield "127.0.0.1:%d" % s.getsockname()[1]


def code_of(exc):
    """The KafkaError code a KafkaException carries."""
    return exc.args[0].code()


async def consume_n(consumer, n, per_call=100, timeout=0.5, deadline=20.0):
    """Messages from ``consumer.consume()`` until ``n`` of them (or the deadline)."""
    out = []
    end = time.monotonic() + deadline
    while len(out) < n and time.monotonic() < end:
        batch = await consumer.consume(per_call, timeout)
        assert isinstance(batch, list) and len(batch) <= per_call
        out.extend(batch)
    return out


# ---------------------------------------------------------------------------------------
# 1. produce and consume back
# ---------------------------------------------------------------------------------------

def test_produce_futures_then_consume_and_poll_back(impl, tansu_broker, topic_name):
    n = 1000
    tansu_broker.create_topic(topic_name)
    k = impl.kafka
    conf = {"bootstrap.servers": tansu_broker.bootstrap}

    def check(m, i):
        assert isinstance(m, k.Message)
        assert m.error() is None
        assert (m.topic(), m.partition()) == (topic_name, 0)
        assert (m.value(), m.key()) == (b"v%d" % i, b"k%d" % i)

    async def main():
        delivered = []
        p = impl.aio.AIOProducer(conf)
        try:
            # A lone future resolves without flush() or poll() from the application.
            fut = await p.produce(topic_name, b"v0", b"k0", partition=0)
            assert isinstance(fut, asyncio.Future)
            m = await asyncio.wait_for(fut, 5)
            check(m, 0)
            delivered.append(m)
            # Await each future in turn ...
            futs = [await p.produce(topic_name, b"v%d" % i, b"k%d" % i)
                    for i in range(1, n // 2)]
            for i, f in enumerate(futs, 1):
                m = await asyncio.wait_for(f, 10)
                check(m, i)
                delivered.append(m)
            # ... and gather many at once (keywords this time).
            futs = [await p.produce(topic_name, value=b"v%d" % i, key=b"k%d" % i)
                    for i in range(n // 2, n)]
            msgs = await asyncio.wait_for(asyncio.gather(*futs), 10)
            for i, m in enumerate(msgs, n // 2):
                check(m, i)
            delivered.extend(msgs)
        finally:
            await p.close()
        offsets = [m.offset() for m in delivered]
        assert offsets == sorted(offsets) and len(set(offsets)) == n
        assert offsets == list(range(n))               # a fresh topic, one producer

        # consume(num_messages, timeout)
        tp = k.TopicPartition(topic_name, 0, k.OFFSET_BEGINNING)
        c = impl.aio.AIOConsumer({**conf, "group.id": topic_name, "enable.auto.commit": False})
        try:
            await c.assign([tp])
            got = await consume_n(c, n, per_call=300)
            assert [m.value() for m in got] == [b"v%d" % i for i in range(n)]
            assert [m.offset() for m in got] == list(range(n))
            assert await c.consume(10, 0.2) == []
        finally:
            await c.close()

        # poll(timeout), one message at a time
        c = impl.aio.AIOConsumer({**conf, "group.id": topic_name, "enable.auto.commit": False})
        try:
            await c.assign([tp])
            got = []
            end = time.monotonic() + 20
            while len(got) < n and time.monotonic() < end:
                m = await c.poll(0.5)
                if m is not None:
                    assert m.error() is None
                    got.append(m)
            for i, m in enumerate(got):
                check(m, i)
            assert len(got) == n
            assert await c.poll(0.2) is None
        finally:
            await c.close()

    run(main())


# ---------------------------------------------------------------------------------------
# 2. delivery failures
# ---------------------------------------------------------------------------------------

async def failure_of(producer, *args, **kwargs):
    """Where ``producer.produce(*args, **kwargs)`` fails: ("produce", exc) when awaiting
    produce() raises, ("future", exc) when the future it returned does."""
    try:
        fut = await producer.produce(*args, **kwargs)
    except Exception as exc:
        return "produce", exc
    assert isinstance(fut, asyncio.Future)
    try:
        msg = await asyncio.wait_for(fut, 10)
    except asyncio.TimeoutError:
        raise AssertionError("the future of a refused message never completed")
    except Exception as exc:
        return "future", exc
    raise AssertionError(f"delivered: {msg!r}")


def test_delivery_failures(impl, tansu_broker, topic_name):
    """A partition that does not exist (the topic's metadata known) and a message over
    message.max.bytes: produce() returns a future (although the blocking Producer raises
    both at produce()), the future raises KafkaException with _UNKNOWN_PARTITION (-190) /
    MSG_SIZE_TOO_LARGE (10). The good messages around a failed one are delivered."""
    tansu_broker.create_topic(topic_name)
    k = impl.kafka

    async def main():
        async with impl.aio.AIOProducer({"bootstrap.servers": tansu_broker.bootstrap}) as p:
            first = await p.produce(topic_name, b"first")
            assert await p.flush(5) == 0
            assert first.result().error() is None            # the topic's metadata is known

            at, exc = await failure_of(p, topic_name, b"x", partition=5)
            assert at == "future"
            assert type(exc) is k.KafkaException
            assert isinstance(exc.args[0], k.KafkaError)
            assert code_of(exc) == k.KafkaError._UNKNOWN_PARTITION == -190

            before = await p.produce(topic_name, b"before", partition=0)
            at, exc = await failure_of(p, topic_name, b"x" * 1_100_000, partition=0)
            after = await p.produce(topic_name, b"after", partition=0)
            assert at == "future"
            assert type(exc) is k.KafkaException
            assert code_of(exc) == k.KafkaError.MSG_SIZE_TOO_LARGE == 10
            assert await p.flush(5) == 0
            a, b = before.result(), after.result()
            assert (a.value(), b.value()) == (b"before", b"after")
            assert b.offset() == a.offset() + 1

    run(main())


# ---------------------------------------------------------------------------------------
# timestamp=: confluent fails the batch, ours delivers it (an addition)
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("impl", [CONFLUENT], indirect=True)
def test_timestamp_fails_the_batch_on_confluent(impl, tansu_broker, topic_name):
    """confluent 2.16 takes timestamp= at produce() but its produce_batch() refuses it:
    the future (and those of the other messages sent in the same batch) raises
    NotImplementedError, the messages go back to its buffer, so the next flush() raises
    the same until purge()."""
    tansu_broker.create_topic(topic_name)

    async def main():
        p = impl.aio.AIOProducer({"bootstrap.servers": tansu_broker.bootstrap})
        try:
            fut = await p.produce(topic_name, b"v", timestamp=int(time.time() * 1000))
            with pytest.raises(NotImplementedError, match="timestamps are not currently"):
                await p.flush(5)
            with pytest.raises(NotImplementedError, match="timestamps are not currently"):
                await fut
            with pytest.raises(NotImplementedError):
                await p.flush(5)                             # still in the buffer
            await p.purge()
            assert await p.flush(5) == 0
        finally:
            await p.close()

    run(main())


@pytest.mark.parametrize("impl", [OURS], indirect=True)
def test_timestamp_delivered_by_ours(impl, tansu_broker, topic_name):
    tansu_broker.create_topic(topic_name)
    k = impl.kafka
    ts = int(time.time() * 1000) - 5000

    async def main():
        async with impl.aio.AIOProducer({"bootstrap.servers": tansu_broker.bootstrap}) as p:
            m = await asyncio.wait_for(
                await p.produce(topic_name, b"v", partition=0, timestamp=ts), 5)
            assert m.timestamp() == (k.TIMESTAMP_CREATE_TIME, ts)
        c = impl.aio.AIOConsumer({"bootstrap.servers": tansu_broker.bootstrap,
                                  "group.id": topic_name})
        try:
            await c.assign([k.TopicPartition(topic_name, 0, k.OFFSET_BEGINNING)])
            (got,) = await consume_n(c, 1)
        finally:
            await c.close()
        assert got.timestamp() == (k.TIMESTAMP_CREATE_TIME, ts)

    run(main())


# ---------------------------------------------------------------------------------------
# 3. flush, len, purge, async with, use after close
# ---------------------------------------------------------------------------------------

def test_flush_len_and_async_with(impl, tansu_broker, topic_name):
    tansu_broker.create_topic(topic_name)

    async def main():
        async with impl.aio.AIOProducer({"bootstrap.servers": tansu_broker.bootstrap}) as p:
            assert isinstance(p, impl.aio.AIOProducer)       # __aenter__ returns the producer
            assert len(p) == 0
            futs = [await p.produce(topic_name, b"%d" % i) for i in range(5)]
            assert len(p) == 5                               # counted before delivery
            assert await p.poll(0) >= 0
            assert await p.flush(10) == 0
            assert len(p) == 0
            assert all(f.done() and f.exception() is None for f in futs)
            assert await p.poll(0) == 0
            md = await p.list_topics(topic_name, timeout=5)
            assert sorted(md.topics[topic_name].partitions) == [0]
            assert isinstance(await p.cluster_id(5), str)
            # left undelivered on leaving the block: close() delivers them
            last = [await p.produce(topic_name, b"last%d" % i) for i in range(3)]
        assert len(p) == 0
        assert [f.result().value() for f in last] == [b"last0", b"last1", b"last2"]
        assert [f.result().offset() for f in last] == [5, 6, 7]

        async with impl.aio.AIOConsumer({"bootstrap.servers": tansu_broker.bootstrap,
                                         "group.id": topic_name}) as c:
            assert isinstance(c, impl.aio.AIOConsumer)
            await c.assign([impl.kafka.TopicPartition(topic_name, 0, impl.kafka.OFFSET_BEGINNING)])
            assert len(await consume_n(c, 8)) == 8
        with pytest.raises(RuntimeError, match="Consumer closed"):
            await c.poll(0)

    run(main())


def test_flush_and_purge_without_a_broker(impl, silent):
    """flush(timeout) returns how many messages are still undelivered; purge() returns
    None and every future then completes: the ones handed to the client with
    KafkaException(_PURGE_QUEUE, -152), the ones confluent still holds in its own batch
    buffer (produced within buffer_timeout) cancelled."""
    k = impl.kafka

    async def main():
        p = impl.aio.AIOProducer({"bootstrap.servers": silent, "log_level": 0})
        try:
            futs = [await p.produce("t", b"y") for _ in range(3)]
            assert len(p) == 3
            t = time.monotonic()
            left = await p.flush(0.5)
            assert time.monotonic() - t >= 0.4
            assert left == 3 and isinstance(left, int)
            assert len(p) == 3
            fresh = await p.produce("t", b"z")
            assert await p.purge() is None
            assert await p.flush(2) == 0
            assert len(p) == 0
            for f in futs:
                with pytest.raises(k.KafkaException) as ei:
                    await f
                assert code_of(ei.value) == k.KafkaError._PURGE_QUEUE == -152
            assert fresh.done()
            if impl.confluent:
                assert fresh.cancelled()
            elif not fresh.cancelled():                      # ours may hold no buffer
                assert code_of(fresh.exception()) == k.KafkaError._PURGE_QUEUE
        finally:
            await p.purge()                 # close() would wait for a delivery forever
            await p.close()

    run(main())


def test_use_after_close(impl):
    """AIOConsumer after close(): RuntimeError("Consumer closed") from every method on both.
    AIOProducer after close(): len() is 0; confluent's flush/poll/purge/list_topics raise
    RuntimeError (its thread pool's "cannot schedule new futures after shutdown") and its
    produce() returns a future that never completes; ours must raise RuntimeError for all
    of them, produce() included (as AsyncSerializingProducer does on both). A second
    close(): RuntimeError on confluent; ours may be a no-op instead."""
    async def main():
        p = impl.aio.AIOProducer({"bootstrap.servers": nowhere(), "log_level": 0})
        assert await p.close() is None
        assert len(p) == 0
        for name, args in [("flush", (0,)), ("poll", (0,)), ("purge", ()),
                           ("list_topics", (None, 1))]:
            with pytest.raises(RuntimeError):
                await getattr(p, name)(*args)
        if impl.confluent:
            fut = await p.produce("t", b"x")
            assert not fut.done()
            fut.cancel()
            with pytest.raises(RuntimeError):
                await p.close()
        else:
            with pytest.raises(RuntimeError):
                await p.produce("t", b"x")
            try:
                await p.close()
            except RuntimeError:
                pass

        k = impl.kafka
        c = impl.aio.AIOConsumer({"bootstrap.servers": nowhere(), "group.id": "g",
                                  "log_level": 0})
        assert await c.close() is None
        tp = k.TopicPartition("t", 0, 1)
        for name, args in [("poll", (0,)), ("consume", (1, 0)), ("assign", ([tp],)),
                           ("assignment", ()), ("subscribe", (["t"],)), ("commit", ()),
                           ("committed", ([tp],)), ("position", ([tp],)), ("seek", (tp,)),
                           ("unassign", ()), ("list_topics", ())]:
            with pytest.raises(RuntimeError, match="Consumer closed"):
                await getattr(c, name)(*args)
        if impl.confluent:
            with pytest.raises(RuntimeError, match="Consumer closed"):
                await c.close()
        else:
            try:
                await c.close()
            except RuntimeError as e:
                assert str(e) == "Consumer closed"

    run(main())


@pytest.mark.parametrize("impl", [CONFLUENT], indirect=True)
def test_confluent_needs_a_running_loop(impl):
    with pytest.raises(RuntimeError, match="no running event loop"):
        impl.aio.AIOProducer({"bootstrap.servers": nowhere()})
    with pytest.raises(RuntimeError, match="no running event loop"):
        impl.aio.AIOConsumer({"bootstrap.servers": nowhere(), "group.id": "g"})


# ---------------------------------------------------------------------------------------
# 4. subscribe with coroutine rebalance callbacks
# ---------------------------------------------------------------------------------------

def test_subscribe_rebalance_callbacks_await_the_consumer(impl, tansu_broker, topic_name):
    tansu_broker.create_topic(topic_name, partitions=3)
    k = impl.kafka

    async def main():
        loop_thread = threading.current_thread()
        async with impl.aio.AIOProducer({"bootstrap.servers": tansu_broker.bootstrap}) as p:
            for i in range(30):
                await p.produce(topic_name, b"p%d-%d" % (i % 3, i // 3), partition=i % 3)
            assert await p.flush(10) == 0

        events = []
        c = impl.aio.AIOConsumer({"bootstrap.servers": tansu_broker.bootstrap,
                                  "group.id": topic_name, "session.timeout.ms": SESSION_MS,
                                  "enable.auto.commit": False})

        async def on_assign(consumer, partitions):
            assert consumer is c                               # the AIOConsumer itself
            assert threading.current_thread() is loop_thread
            events.append(("assign", sorted(tp.partition for tp in partitions)))
            events.append(("before", await consumer.assignment()))
            # partition 1 from offset 5, 2 from 0 then seek()ed to 7 (an absolute start
            # offset: librdkafka resolves OFFSET_BEGINNING later, which may undo the seek)
            for tp in partitions:
                tp.offset = {0: k.OFFSET_BEGINNING, 1: 5, 2: 0}[tp.partition]
            await consumer.assign(partitions)
            events.append(("after", sorted(tp.partition for tp in await consumer.assignment())))
            await consumer.seek(k.TopicPartition(topic_name, 2, 7))

        async def on_revoke(consumer, partitions):
            assert consumer is c
            assert threading.current_thread() is loop_thread
            events.append(("revoke", sorted(tp.partition for tp in partitions)))

        assert await c.subscribe([topic_name], on_assign=on_assign, on_revoke=on_revoke) is None
        got = {}
        end = time.monotonic() + 20
        while sum(map(len, got.values())) < 18 and time.monotonic() < end:
            for m in await c.consume(50, 0.5):
                assert m.error() is None
                assert events and events[0][0] == "assign"     # messages only after it
                got.setdefault(m.partition(), []).append(m.offset())
        assert events[:3] == [("assign", [0, 1, 2]), ("before", []), ("after", [0, 1, 2])]
        assert got == {0: list(range(10)), 1: list(range(5, 10)), 2: list(range(7, 10))}
        assert await c.consume(10, 0.2) == []

        committed = await c.commit(asynchronous=False)
        assert sorted((tp.topic, tp.partition, tp.offset) for tp in committed) == \
            [(topic_name, i, 10) for i in range(3)]
        parts = [k.TopicPartition(topic_name, i) for i in range(3)]
        assert [tp.offset for tp in await c.committed(parts, timeout=5)] == [10, 10, 10]
        assert [tp.offset for tp in await c.position(parts)] == [10, 10, 10]
        assert await c.close() is None
        assert events[3:] == [("revoke", [0, 1, 2])]

    run(main())


# ---------------------------------------------------------------------------------------
# transactions, on_commit
# ---------------------------------------------------------------------------------------

def test_transactions_and_on_commit_coroutine(impl, tansu_broker, topic_name):
    """The transactional calls are coroutines returning None; commit_transaction() and
    abort_transaction() first deliver what was produced (every future done). on_commit, a
    coroutine, gets an asynchronous commit's result on the event loop's thread. (Tansu
    does not hide aborted messages from read_committed consumers, so that is not
    checked here.)"""
    tansu_broker.create_topic(topic_name)
    k = impl.kafka

    async def main():
        loop_thread = threading.current_thread()
        p = impl.aio.AIOProducer({"bootstrap.servers": tansu_broker.bootstrap,
                                  "transactional.id": topic_name})
        try:
            assert await p.init_transactions(10) is None
            assert await p.begin_transaction() is None
            futs = [await p.produce(topic_name, b"c%d" % i) for i in range(3)]
            assert await p.commit_transaction(10) is None
            assert [f.result().offset() for f in futs] == [0, 1, 2]
            assert await p.begin_transaction() is None
            futs = [await p.produce(topic_name, b"a%d" % i) for i in range(2)]
            assert await p.abort_transaction(10) is None
            assert all(f.done() for f in futs)
        finally:
            await p.close()

        commits = []

        async def on_commit(err, partitions):
            await asyncio.sleep(0)
            commits.append((err, [(tp.topic, tp.partition, tp.offset) for tp in partitions],
                            threading.current_thread() is loop_thread))

        c = impl.aio.AIOConsumer({"bootstrap.servers": tansu_broker.bootstrap,
                                  "group.id": topic_name, "enable.auto.commit": False,
                                  "isolation.level": "read_committed",
                                  "on_commit": on_commit})
        try:
            await c.assign([k.TopicPartition(topic_name, 0, k.OFFSET_BEGINNING)])
            got = await consume_n(c, 3, deadline=10)
            assert [m.value() for m in got[:3]] == [b"c0", b"c1", b"c2"]
            assert await c.commit(message=got[2], asynchronous=True) is None
            end = time.monotonic() + 5
            while not commits and time.monotonic() < end:
                await c.poll(0.1)
            assert commits[0] == (None, [(topic_name, 0, 3)], True)
        finally:
            await c.close()

    run(main())


# ---------------------------------------------------------------------------------------
# 5. error_cb, a coroutine on the event loop
# ---------------------------------------------------------------------------------------

def test_error_cb_coroutine_on_the_loop_thread(impl):
    """Connections refused: error_cb (an ``async def``) runs on the event loop's thread
    with a KafkaError (_TRANSPORT -195, _ALL_BROKERS_DOWN -187) -- for the producer
    without the application calling poll() or flush() (confluent's buffer-timeout task
    polls it about every second), for the consumer from its poll()."""
    k = impl.kafka

    async def main():
        loop, loop_thread = asyncio.get_running_loop(), threading.current_thread()
        calls = []

        async def error_cb(err):
            await asyncio.sleep(0)                             # awaited, not just called
            calls.append((err, threading.current_thread() is loop_thread,
                          asyncio.get_running_loop() is loop))

        async def wait_for_calls(step):
            end = time.monotonic() + 6
            while not calls and time.monotonic() < end:
                await step()
            return list(calls)

        expected = {k.KafkaError._TRANSPORT, k.KafkaError._ALL_BROKERS_DOWN}
        p = impl.aio.AIOProducer({"bootstrap.servers": nowhere(), "error_cb": error_cb,
                                  "log_level": 0})
        try:
            got = await wait_for_calls(lambda: asyncio.sleep(0.05))
        finally:
            await p.close()
        assert got, "producer: error_cb never called"
        for err, on_thread, on_loop in got:
            assert isinstance(err, k.KafkaError) and err.code() in expected
            assert on_thread and on_loop

        calls.clear()
        c = impl.aio.AIOConsumer({"bootstrap.servers": nowhere(), "group.id": "g",
                                  "error_cb": error_cb, "log_level": 0})
        try:
            await c.subscribe(["t"])         # (our blocking Consumer connects only then)
            got = await wait_for_calls(lambda: c.poll(0.2))
        finally:
            await c.close()
        assert got, "consumer: error_cb never called"
        for err, on_thread, on_loop in got:
            assert isinstance(err, k.KafkaError) and err.code() in expected
            assert on_thread and on_loop

    run(main())


# ---------------------------------------------------------------------------------------
# 6. AsyncSerializingProducer / AsyncDeserializingConsumer
# ---------------------------------------------------------------------------------------

def test_serializing_producer_and_deserializing_consumer(impl, tansu_broker, topic_name):
    tansu_broker.create_topic(topic_name)
    k, ser = impl.kafka, impl.ser
    seen_ctx = []

    async def async_value_serializer(obj, ctx):
        await asyncio.sleep(0)
        seen_ctx.append((ctx.topic, ctx.field))
        return ("A:" + obj).encode()

    async def async_value_deserializer(data, ctx):
        await asyncio.sleep(0)
        seen_ctx.append((ctx.topic, ctx.field))
        return "D:" + data.decode()

    async def main():
        conf = {"bootstrap.servers": tansu_broker.bootstrap}
        sp = await impl.aio.AsyncSerializingProducer(
            {**conf, "key.serializer": ser.StringSerializer(),
             "value.serializer": ser.StringSerializer("utf_8")})
        assert isinstance(sp, impl.aio.AIOProducer)
        try:
            f1 = await sp.produce(topic_name, "k1", "h\u00e9llo")       # (topic, key, value)
            f2 = await sp.produce(topic_name, value="v2", key="k2")
            m1, m2 = await asyncio.wait_for(asyncio.gather(f1, f2), 10)
            assert (m1.key(), m1.value()) == (b"k1", "h\u00e9llo".encode())
            assert (m2.key(), m2.value()) == (b"k2", b"v2")
            with pytest.raises(impl.error.ValueSerializationError) as ei:
                await sp.produce(topic_name, value=5)
            assert isinstance(ei.value, k.KafkaException)
            assert ei.value.code == k.KafkaError._VALUE_SERIALIZATION == -161
        finally:
            await sp.close()
        with pytest.raises(RuntimeError, match="Producer has been closed"):
            await sp.produce(topic_name, value="late")

        sp = await impl.aio.AsyncSerializingProducer(
            {**conf, "value.serializer": async_value_serializer})
        try:
            m3 = await asyncio.wait_for(await sp.produce(topic_name, value="x"), 10)
            assert (m3.key(), m3.value()) == (None, b"A:x")
        finally:
            await sp.close()
        assert seen_ctx == [(topic_name, ser.MessageField.VALUE)]
        seen_ctx.clear()

        tp = k.TopicPartition(topic_name, 0, k.OFFSET_BEGINNING)
        dc = await impl.aio.AsyncDeserializingConsumer(
            {**conf, "group.id": topic_name, "key.deserializer": ser.StringDeserializer(),
             "value.deserializer": ser.StringDeserializer("utf_8")})
        assert isinstance(dc, impl.aio.AIOConsumer)
        try:
            await dc.assign([tp])
            got = await consume_n(dc, 3)
            assert [(m.key(), m.value()) for m in got] == \
                [("k1", "h\u00e9llo"), ("k2", "v2"), (None, "A:x")]
        finally:
            await dc.close()

        dc = await impl.aio.AsyncDeserializingConsumer(
            {**conf, "group.id": topic_name, "value.deserializer": async_value_deserializer})
        try:
            await dc.assign([tp])
            got = []
            end = time.monotonic() + 10
            while len(got) < 3 and time.monotonic() < end:
                m = await dc.poll(0.5)
                if m is not None:
                    got.append(m)
            assert [(m.key(), m.value()) for m in got] == \
                [(b"k1", "D:h\u00e9llo"), (b"k2", "D:v2"), (None, "D:A:x")]
        finally:
            await dc.close()
        assert seen_ctx == [(topic_name, ser.MessageField.VALUE)] * 3

    run(main())


# ---------------------------------------------------------------------------------------
# 7. concurrent consume() calls on one consumer
# ---------------------------------------------------------------------------------------

def test_concurrent_consume_calls_get_each_message_once(impl, tansu_broker, topic_name):
    n, tasks = 600, 5
    tansu_broker.create_topic(topic_name, partitions=3)
    k = impl.kafka

    async def main():
        async with impl.aio.AIOProducer({"bootstrap.servers": tansu_broker.bootstrap}) as p:
            futs = [await p.produce(topic_name, b"%d" % i, partition=i % 3) for i in range(n)]
            assert await p.flush(10) == 0
        assert all(f.exception() is None for f in futs)

        seen = []
        c = impl.aio.AIOConsumer({"bootstrap.servers": tansu_broker.bootstrap,
                                  "group.id": topic_name, "enable.auto.commit": False})
        try:
            await c.assign([k.TopicPartition(topic_name, i, k.OFFSET_BEGINNING)
                            for i in range(3)])
            end = time.monotonic() + 20

            async def worker():
                calls = 0
                while len(seen) < n and time.monotonic() < end:
                    batch = await c.consume(23, 0.2)
                    calls += 1
                    assert len(batch) <= 23
                    seen.extend((m.partition(), m.offset(), m.value()) for m in batch)
                return calls

            calls = await asyncio.gather(*(worker() for _ in range(tasks)))
            assert all(calls)
            assert await c.consume(10, 0.3) == []
        finally:
            await c.close()
        assert len(seen) == n
        assert len({(p_, o) for p_, o, _ in seen}) == n
        assert sorted(int(v) for *_, v in seen) == list(range(n))
        for part in range(3):
            offsets = [o for p_, o, _ in seen if p_ == part]
            assert sorted(offsets) == list(range(n // 3))

    run(main())


# ---------------------------------------------------------------------------------------
# 8. the event loop keeps running while the client waits
# ---------------------------------------------------------------------------------------

async def ticks_while(awaitable):
    """``(result, loop_ticks, thread_ticks)``: ``awaitable``'s result, and the 10 ms sleeps
    counted meanwhile on the event loop and, as the control, on a plain thread. A loaded
    machine (CI's 2 cores shared with brokers and JVMs) slows both alike; a loop blocked by
    the client only the first."""
    loop_ticks, thread_ticks = 0, 0
    stop = threading.Event()

    def thread_ticker():
        nonlocal thread_ticks
        while not stop.wait(0.01):
            thread_ticks += 1

    async def loop_ticker():
        nonlocal loop_ticks
        while True:
            await asyncio.sleep(0.01)
            loop_ticks += 1

    control = threading.Thread(target=thread_ticker, daemon=True)
    control.start()
    task = asyncio.create_task(loop_ticker())
    try:
        result = await awaitable
    finally:
        task.cancel()
        stop.set()
        control.join()
    return result, loop_ticks, thread_ticks


def assert_loop_ran(loop_ticks, thread_ticks):
    """The loop ticked at least half as often as the control thread (~100 each per second
    when nothing blocks)."""
    assert thread_ticks >= 1 and 2 * loop_ticks >= thread_ticks, (loop_ticks, thread_ticks)


def test_ticks_while_sees_a_blocked_loop():
    """The measure itself: a loop blocked for 0.5 s fails it, a free one passes."""
    async def blocking():
        time.sleep(0.5)

    async def main():
        _, loop_ticks, thread_ticks = await ticks_while(blocking())
        with pytest.raises(AssertionError):
            assert_loop_ran(loop_ticks, thread_ticks)
        assert_loop_ran(*(await ticks_while(asyncio.sleep(0.5)))[1:])

    run(main())


def test_event_loop_not_blocked(impl, tansu_broker, topic_name, silent):
    tansu_broker.create_topic(topic_name)
    k = impl.kafka

    async def main():
        c = impl.aio.AIOConsumer({"bootstrap.servers": tansu_broker.bootstrap,
                                  "group.id": topic_name})
        p = impl.aio.AIOProducer({"bootstrap.servers": silent, "log_level": 0})
        try:
            await c.assign([k.TopicPartition(topic_name, 0, k.OFFSET_BEGINNING)])
            t = time.monotonic()
            got, *ticks = await ticks_while(c.consume(10, timeout=1))
            elapsed = time.monotonic() - t
            assert got == []
            assert 0.9 <= elapsed < 3, elapsed               # the timeout is honoured
            assert_loop_ran(*ticks)

            t = time.monotonic()
            got, *ticks = await ticks_while(c.poll(0.5))
            assert got is None
            assert 0.45 <= time.monotonic() - t < 2
            assert_loop_ran(*ticks)

            await p.produce("t", b"never delivered")
            t = time.monotonic()
            got, *ticks = await ticks_while(p.flush(0.5))
            assert got == 1
            assert 0.45 <= time.monotonic() - t < 2
            assert_loop_ran(*ticks)
        finally:
            await c.close()
            await p.purge()                 # close() would wait for a delivery forever
            await p.close()

    run(main())
