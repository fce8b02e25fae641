"""kafka_client.aio against real brokers: what ours does beyond confluent-kafka's asyncio
API (headers, on_delivery, waiting for room instead of BufferError), each future resolved
once with its own message, and purged messages failing only their own futures. The behaviour shared with confluent-kafka is checked side by side
in tests/compat/test_compat_aio.py."""
from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time

import pytest

from kafka_client import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafka_client.aio import AIOConsumer, AIOProducer, AsyncDeserializingConsumer
from kafka_client.error import ValueDeserializationError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def read_all(bootstrap, topic, n, partitions=1):
    async with AIOConsumer({"bootstrap.servers": bootstrap,
                            "fetch.wait.max.ms": 50}) as c:
        await c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got = []
        while len(got) < n:
            batch = await c.consume(min(1000, n - len(got)), 5)
            assert batch, f"only {len(got)} of {n} messages"
            got.extend(m for m in batch if m.error() is None)
        return got


def test_a_full_producer_waits_for_room_and_every_future_resolves_once(broker, topic_name):
    """queue.buffering.max.messages=50 and 3,000 messages produced without awaiting their
    futures: produce() waits for room where the synchronous producer raises BufferError;
    each future resolves to its own message at its own offset."""
    async def main():
        async with AIOProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2,
                                "queue.buffering.max.messages": 50}) as p:
            futures = [await p.produce(topic_name, b"%d" % i, partition=0)
                       for i in range(3000)]
            assert len(p) <= 50
            msgs = await asyncio.gather(*futures)
        assert [m.value() for m in msgs] == [b"%d" % i for i in range(3000)]
        assert [m.offset() for m in msgs] == list(range(3000))
        got = await read_all(broker.bootstrap, topic_name, 3000)
        assert [m.value() for m in got] == [b"%d" % i for i in range(3000)]
    run(main())


def test_a_callback_raising_during_close_loses_nothing(tansu_broker, topic_name):
    """close() while 5,000 messages wait in batches of 100 (linger.ms=200) and the first
    delivery callback raises: every message is still delivered and every future
    resolved, then close() raises the exception, as the synchronous close() does (the
    rest was dropped, and its futures never resolved)."""
    async def main():
        p = AIOProducer({"bootstrap.servers": tansu_broker.bootstrap, "linger.ms": 200,
                         "batch.num.messages": 100})
        raised = []

        def on_delivery(err, msg):
            if not raised:
                raised.append(msg.offset())
                raise ValueError("callback bug")

        futures = [await p.produce(topic_name, b"%d" % i, partition=0,
                                   on_delivery=on_delivery) for i in range(5000)]
        with pytest.raises(ValueError, match="callback bug"):
            await p.close()
        assert all(f.done() and f.exception() is None for f in futures)
        got = await read_all(tansu_broker.bootstrap, topic_name, 5000)
        assert [m.value() for m in got] == [b"%d" % i for i in range(5000)]
    run(main())


def test_headers_and_on_delivery_coroutines_run_on_the_loop(broker, topic_name):
    async def main():
        loop_thread = threading.get_ident()
        reports = []

        async def on_delivery(err, msg):
            await asyncio.sleep(0)
            reports.append((err, msg.offset(), threading.get_ident()))

        async with AIOProducer({"bootstrap.servers": broker.bootstrap}) as p:
            futures = [await p.produce(topic_name, b"v%d" % i, b"k", partition=0,
                                       headers=[("n", b"%d" % i)], on_delivery=on_delivery)
                       for i in range(10)]
            await asyncio.gather(*futures)
            assert await p.flush(10) == 0
        assert sorted(r[1] for r in reports) == list(range(10))
        assert {r[0] for r in reports} == {None} and {r[2] for r in reports} == {loop_thread}
        got = await read_all(broker.bootstrap, topic_name, 10)
        assert [m.headers() for m in got] == [[("n", b"%d" % i)] for i in range(10)]
    run(main())


def test_a_purged_message_fails_its_future_and_not_the_others(broker, topic_name):
    """linger.ms=10 s keeps the message queued until purge() fails it: its future raises
    KafkaException(_PURGE_QUEUE); the messages before and after it are delivered."""
    from kafka_client import KafkaError, KafkaException

    async def main():
        async with AIOProducer({"bootstrap.servers": broker.bootstrap,
                                "linger.ms": 10000}) as p:
            first = await p.produce(topic_name, b"first", partition=0)
            assert await p.flush(10) == 0 and (await first).offset() == 0
            purged = await p.produce(topic_name, b"purged", partition=0)
            await p.purge()
            with pytest.raises(KafkaException) as info:
                await purged
            assert info.value.args[0].code() == KafkaError._PURGE_QUEUE
            last = await p.produce(topic_name, b"last", partition=0)
            assert await p.flush(10) == 0 and (await last).offset() == 1
        got = await read_all(broker.bootstrap, topic_name, 2)
        assert [m.value() for m in got] == [b"first", b"last"]
    run(main())


def test_a_message_refused_before_queueing_fails_its_future(broker, topic_name):
    """As with confluent-kafka's AIOProducer: produce() returns, the future raises."""
    from kafka_client import KafkaError, KafkaException

    async def main():
        async with AIOProducer({"bootstrap.servers": broker.bootstrap,
                                "message.max.bytes": 1000}) as p:
            assert (await (await p.produce(topic_name, b"ok", partition=0))).offset() == 0
            for kw, code in (({"value": b"x" * 5000}, KafkaError.MSG_SIZE_TOO_LARGE),
                             ({"value": b"x", "partition": 99}, KafkaError._UNKNOWN_PARTITION)):
                fut = await p.produce(topic_name, **kw)
                with pytest.raises(KafkaException) as info:
                    await fut
                assert info.value.args[0].code() == code
            with pytest.raises(TypeError):
                await p.produce(topic_name, 123)
            assert (await (await p.produce(topic_name, b"after", partition=0))).offset() == 1
    run(main())


@pytest.mark.parametrize("api", ["poll", "consume"])
def test_waiting_messages_are_taken_on_the_loop_without_the_executor(broker, topic_name,
                                                                      api):
    """poll() per message went through the executor each time (about 10,000 msg/s, as
    confluent-kafka's); a message already decoded is now taken on the loop's thread, and
    only a poll() that may wait goes to the executor. consume(n) likewise when n are
    waiting."""
    import concurrent.futures

    from kafka_client import Producer

    class Counting(concurrent.futures.ThreadPoolExecutor):
        calls = 0

        def submit(self, fn, *args, **kwargs):
            Counting.calls += 1
            return super().submit(fn, *args, **kwargs)

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(1000):
        p.produce(topic_name, b"%d" % i, partition=0)
    assert p.flush(10) == 0
    p.close()

    async def main():
        with Counting(max_workers=2) as pool:
            async with AIOConsumer({"bootstrap.servers": broker.bootstrap},
                                   executor=pool) as c:
                await c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
                got = []
                while len(got) < 1000:
                    if api == "poll":
                        msgs = [await c.poll(5)]
                        assert msgs[0] is not None
                    else:
                        msgs = await c.consume(10, 5)
                    got.extend(m.value() for m in msgs if m.error() is None)
                calls = Counting.calls
                (pos,) = await c.position([TopicPartition(topic_name, 0)])
                assert pos.offset == 1000
        assert got == [b"%d" % i for i in range(1000)]
        assert calls < 50, calls      # about one per chunk (a Fetch answer)
    run(main())


# -- reads cancelled while they wait ------------------------------------------------------
async def _cancel_holding(read, produce):
    """Start ``read`` (a consume() or consume_arrow() of the consumer asking for more
    than will come), let it take what ``produce`` sends, then cancel it while it waits
    for the rest: the call on the executor returns what it holds."""
    task = asyncio.ensure_future(read)
    await asyncio.sleep(0.3)
    produce()
    await asyncio.sleep(1.0)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _offsets(consumer, n):
    """The offsets of the next ``n`` messages read."""
    got = []
    while len(got) < n:
        batch = await consumer.consume(n - len(got), 5)
        assert batch, f"only {len(got)} of {n} messages"
        got.extend(m.offset() for m in batch if m.error() is None)
    return got


def _produce(bootstrap, topic, values, partition=0):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, v, partition=partition)
    assert p.flush(10) == 0


def _group_conf(broker, group):
    # session.timeout.ms: Tansu holds a group's first join for half of it
    return {"bootstrap.servers": broker.bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "fetch.wait.max.ms": 50}


def _committed(bootstrap, group, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return c.committed([TopicPartition(topic, 0)], 10)[0].offset
    finally:
        c.close()


def test_a_poll_cancelled_while_it_waits_hands_its_message_to_the_next_poll(noida_broker,
                                                                             topic_name):
    """asyncio.wait_for(poll(10), ...) timing out cancels the coroutine; the poll() on
    the executor is told to return at once, so the message that comes next goes to the
    next poll() (confluent-kafka's AIOConsumer loses it: its poll() on the executor goes
    on, takes it and its offset is committed, and nobody receives it)."""
    broker = noida_broker  # client-side behaviour: one broker
    group = f"g-{topic_name}"

    async def main():
        _produce(broker.bootstrap, topic_name, [b"first"])
        async with AIOConsumer(_group_conf(broker, group)) as c:
            await c.subscribe([topic_name])
            first = await c.poll(30)
            assert first is not None and first.value() == b"first"
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(c.poll(10), 0.3)
            _produce(broker.bootstrap, topic_name, [b"second"])
            await asyncio.sleep(1.0)
            await c.commit(asynchronous=False)
            assert _committed(broker.bootstrap, group, topic_name) == 1
            second = await c.poll(5)
            assert second is not None and second.value() == b"second"
            assert second.offset() == 1
            assert await c.poll(0.2) is None
        assert _committed(broker.bootstrap, group, topic_name) == 2
    run(main())


def test_a_consumer_closed_after_a_cancelled_read_commits_only_what_was_handed_out(
        noida_broker, topic_name, caplog):
    """The shutdown pattern: the reading task is cancelled while its consume(10) holds
    two messages and waits for more, and the consumer is closed. The two were never
    handed out: their offsets are not committed (the group's next reader gets them) and
    close() says so."""
    broker = noida_broker  # client-side behaviour: one broker
    group = f"g-{topic_name}"
    logger = logging.getLogger(f"test.aio.{topic_name}")

    async def main():
        _produce(broker.bootstrap, topic_name, [b"first"])
        async with AIOConsumer(dict(_group_conf(broker, group), logger=logger)) as c:
            await c.subscribe([topic_name])
            assert (await c.consume(1, 30))[0].value() == b"first"
            await _cancel_holding(
                c.consume(10, 10),
                lambda: _produce(broker.bootstrap, topic_name, [b"second", b"third"]))
    with caplog.at_level(logging.WARNING, logger=logger.name):
        run(main())
    assert any("with 2 message(s)" in r.getMessage() and "2 of them not committed"
               in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert _committed(broker.bootstrap, group, topic_name) == 1
    c = Consumer(_group_conf(broker, group))
    try:
        c.subscribe([topic_name])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            got.extend(m.value() for m in c.consume(10, 1) if m.error() is None)
        assert got == [b"second", b"third"]
    finally:
        c.close()


def test_reads_cancelled_by_timeouts_again_and_again_deliver_every_message_once_in_order(
        noida_broker, topic_name):
    """A reader bounding each consume() with wait_for at 5-40 ms while messages trickle
    in: most reads are cancelled while they wait, and still every message comes out once,
    in offset order."""
    broker = noida_broker  # client-side behaviour: one broker
    n = 600

    async def main():
        async with AIOConsumer({"bootstrap.servers": broker.bootstrap,
                                "fetch.wait.max.ms": 20}) as c:
            await c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
            loop = asyncio.get_running_loop()
            producing = loop.run_in_executor(None, _trickle, broker.bootstrap, topic_name, n)
            got, cancelled = [], 0
            deadline = loop.time() + 60
            while len(got) < n and loop.time() < deadline:
                try:
                    batch = await asyncio.wait_for(c.consume(7, 5), 0.005 + 0.035 * (
                        len(got) % 2))
                except asyncio.TimeoutError:
                    cancelled += 1
                    continue
                got.extend(m.offset() for m in batch if m.error() is None)
            await producing
            assert got == list(range(n)), (len(got), cancelled)
            assert cancelled > 20, cancelled       # the case under test did happen
    run(main(), timeout=90)


def _trickle(bootstrap, topic, n):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, b"%d" % i, partition=0)
        if i % 10 == 9:
            p.flush(10)
            time.sleep(0.01)
    assert p.flush(10) == 0


def test_a_cancelled_consume_arrow_hands_its_rows_to_the_next_one(noida_broker, topic_name):
    """consume_arrow(100) holding three rows when cancelled: the next consume_arrow()
    returns them."""
    broker = noida_broker  # client-side behaviour: one broker
    pytest.importorskip("pyarrow")

    async def main():
        async with AIOConsumer({"bootstrap.servers": broker.bootstrap,
                                "fetch.wait.max.ms": 50}) as c:
            await c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
            await _cancel_holding(
                c.consume_arrow(100, 10),
                lambda: _produce(broker.bootstrap, topic_name, [b"a", b"b", b"c"]))
            batch = await c.consume_arrow(100, 5)
            assert batch.column("value").to_pylist() == [b"a", b"b", b"c"]
            assert batch.column("offset").to_pylist() == [0, 1, 2]
            assert (await c.consume_arrow(100, 0.2)).num_rows == 0
    run(main())


def test_a_seek_drops_what_a_cancelled_read_kept_of_that_partition(noida_broker, topic_name):
    """seek() moves the position: what a cancelled read had taken of the partition is not
    handed out; reading goes on from the position sought."""
    broker = noida_broker  # client-side behaviour: one broker

    async def main():
        async with AIOConsumer({"bootstrap.servers": broker.bootstrap,
                                "fetch.wait.max.ms": 50}) as c:
            await c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
            await _cancel_holding(
                c.consume(10, 10),
                lambda: _produce(broker.bootstrap, topic_name, [b"0", b"1", b"2", b"3"]))
            await c.seek(TopicPartition(topic_name, 0, 2))
            got = await _offsets(c, 2)
            assert got == [2, 3]
    run(main())


def test_a_failed_deserialization_loses_nothing_of_its_batch(noida_broker, topic_name):
    """consume(5) over a, b, BAD, c, d: a and b are returned, the next read raises
    ValueDeserializationError with BAD, the next returns c and d; the group's offset
    does not pass c before it is handed out. (confluent-kafka raises at once and c, d
    are lost.)"""
    broker = noida_broker

    def value_deserializer(data, ctx):
        if data == b"BAD":
            raise ValueError("not a value")
        return data.decode().upper()

    group = f"g-{topic_name}"

    async def main():
        _produce(broker.bootstrap, topic_name, [b"a", b"b", b"BAD", b"c", b"d"])
        c = await AsyncDeserializingConsumer(
            dict(_group_conf(broker, group), **{"value.deserializer": value_deserializer,
                                                "enable.auto.commit": False}))
        try:
            await c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
            first = []
            while not first:
                first = await c.consume(5, 5)
            if len(first) < 5 and [m.value() for m in first] != ["A", "B"]:
                pytest.skip(f"the first read got {len(first)} of 5 messages: the case needs"
                            f" them in one batch")
            assert [m.value() for m in first] == ["A", "B"]
            assert [tp.offset for tp in await c.commit(asynchronous=False)] == [2]
            with pytest.raises(ValueDeserializationError) as err:
                await c.consume(5, 5)
            assert err.value.kafka_message.value() == b"BAD"
            assert err.value.kafka_message.offset() == 2
            assert [tp.offset for tp in await c.commit(asynchronous=False)] == [3]
            rest = await c.consume(5, 5)
            assert [(m.value(), m.offset()) for m in rest] == [("C", 3), ("D", 4)]
            assert [tp.offset for tp in await c.commit(asynchronous=False)] == [5]
        finally:
            await c.close()
    run(main())


def test_a_read_cancelled_while_a_deserializer_awaits_keeps_its_batch(noida_broker,
                                                                      topic_name):
    """An asyncio value deserializer that awaits; the read is cancelled meanwhile: the
    next read returns the whole batch (deserialized again: the cancelled read left the
    messages as they were)."""
    broker = noida_broker

    async def value_deserializer(data, ctx):
        await asyncio.sleep(0.2)
        return data.decode().upper()

    async def main():
        _produce(broker.bootstrap, topic_name, [b"a", b"b", b"c"])
        c = await AsyncDeserializingConsumer({"bootstrap.servers": broker.bootstrap,
                                              "value.deserializer": value_deserializer})
        try:
            await c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
            await asyncio.sleep(1.0)       # fetched by now: one read gets all three
            task = asyncio.ensure_future(c.consume(3, 5))
            await asyncio.sleep(0.3)       # inside the second value's deserializer
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            got = await c.consume(3, 5)
            assert [(m.value(), m.offset()) for m in got] == [("A", 0), ("B", 1), ("C", 2)]
        finally:
            await c.close()
    run(main())


def test_what_a_cancelled_read_kept_is_dropped_when_its_partition_is_assigned_again(
        noida_broker, topic_name):
    """A cancelled read kept offsets 0..2; the partition is unassigned and assigned again
    from offset 1: the next reads return 1 and 2 once, from the new assignment, not the
    kept messages of the old one as well."""
    broker = noida_broker  # client-side behaviour: one broker

    async def main():
        async with AIOConsumer({"bootstrap.servers": broker.bootstrap,
                                "fetch.wait.max.ms": 50}) as c:
            tp = TopicPartition(topic_name, 0)
            await c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
            await _cancel_holding(
                c.consume(10, 10),
                lambda: _produce(broker.bootstrap, topic_name, [b"0", b"1", b"2"]))
            await c.incremental_unassign([tp])
            await c.incremental_assign([TopicPartition(topic_name, 0, 1)])
            got = await _offsets(c, 2)
            assert got == [1, 2]
            assert await c.consume(10, 0.5) == []
    run(main())


async def _a_cancelled_read_keeps_0_1_while_the_next_reads_2_4(c, broker, topic_name):
    """Two reads of the AIOConsumer ``c``: the first, cancelled while its call holds
    offsets 0-1 and waits for more, has them kept; the second, behind it, reads 2-4."""
    await c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
    first = asyncio.ensure_future(c.consume(10, 10))
    await asyncio.sleep(0.3)
    _produce(broker.bootstrap, topic_name, [b"0", b"1"])
    await asyncio.sleep(1.0)
    second = asyncio.ensure_future(c.consume(3, 10))   # behind the first
    await asyncio.sleep(0.3)
    assert not first.done() and not second.done()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.sleep(0.3)    # the first's call returns 0-1, kept
    _produce(broker.bootstrap, topic_name, [b"2", b"3", b"4"])
    assert [m.offset() for m in await second] == [2, 3, 4]


def test_messages_a_concurrent_read_handed_out_stay_committed_after_the_kept_ones(
        noida_broker, topic_name):
    """Two reads of one consumer at once (tools/soak.py's coroutines): the first,
    cancelled, holds offsets 0-1 while the second takes 2-4 and returns them. Until 0-1
    are handed out no commit counts them (the second read's call stored 5 over their
    0: closed now, the group would never read them); once they are, the commit counts
    2-4 as well (their hand-out stored 2 over the 5: the group's offset stayed behind
    what was read, a quiet partition's for ever)."""
    broker = noida_broker  # client-side behaviour: one broker
    group = f"g-{topic_name}"

    async def main():
        async with AIOConsumer(_group_conf(broker, group)) as c:
            await _a_cancelled_read_keeps_0_1_while_the_next_reads_2_4(c, broker, topic_name)
            await c.commit(asynchronous=False)
            assert _committed(broker.bootstrap, group, topic_name) == 0
            assert await _offsets(c, 2) == [0, 1]
            await c.commit(asynchronous=False)
            assert _committed(broker.bootstrap, group, topic_name) == 5
    run(main())


def test_kept_messages_hold_the_commit_back_when_the_application_stores_offsets(
        noida_broker, topic_name):
    """As above with enable.auto.offset.store=false (tools/soak.py group --aio
    --auto-commit, seed 309): the application stores 5 after the second read's 2-4; until
    the kept 0-1 are handed out no commit counts them, as a waiting call's messages in hand
    (the commit went to 5; the partition then revoked, the kept 0-1 were dropped and
    nobody read them). Once they are handed out, what the application stores commits."""
    broker = noida_broker  # client-side behaviour: one broker
    group = f"g-{topic_name}"

    async def main():
        conf = dict(_group_conf(broker, group), **{"enable.auto.offset.store": False})
        async with AIOConsumer(conf) as c:
            await _a_cancelled_read_keeps_0_1_while_the_next_reads_2_4(c, broker, topic_name)
            await c.store_offsets(offsets=[TopicPartition(topic_name, 0, 5)])
            await c.commit(asynchronous=False)
            assert _committed(broker.bootstrap, group, topic_name) == 0
            assert await _offsets(c, 2) == [0, 1]
            await c.commit(asynchronous=False)
            assert _committed(broker.bootstrap, group, topic_name) == 5
    run(main())


def _a_read_told_to_stop_returns_0_and_1(c, broker, topic_name):
    """A call of another thread, told to stop while it holds offsets 0-1 and waits for
    more (as the executor's side of a cancelled read), returns them."""
    c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
    stop = threading.Event()
    returned = []
    reader = threading.Thread(
        target=lambda: returned.append(c._consume_until(10, 10, stop)), daemon=True)
    reader.start()
    time.sleep(0.3)
    _produce(broker.bootstrap, topic_name, [b"0", b"1"])
    time.sleep(1.0)
    assert reader.is_alive()      # holding 0-1, waiting for more
    stop.set()
    c._wake_readers()
    reader.join(10)
    assert [m.offset() for m in returned[0]] == [0, 1]


def test_a_stopped_reads_messages_hold_the_commit_back_with_offsets_stored_by_hand(
        noida_broker, topic_name):
    """The executor's side with enable.auto.offset.store=false: a call told to stop
    returns offsets 0-1; before the event loop keeps them, another read returns 2-4 and
    the application stores 5: a commit then does not count 0-1."""
    broker = noida_broker  # client-side behaviour: one broker
    group = f"g-{topic_name}"
    c = Consumer(dict(_group_conf(broker, group), **{"enable.auto.commit": False,
                                                     "enable.auto.offset.store": False}))
    try:
        _a_read_told_to_stop_returns_0_and_1(c, broker, topic_name)
        _produce(broker.bootstrap, topic_name, [b"2", b"3", b"4"])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            got.extend(m.offset() for m in c.consume(3 - len(got), 1) if m.error() is None)
        assert got == [2, 3, 4]
        c.store_offsets(offsets=[TopicPartition(topic_name, 0, 5)])
        c.commit(asynchronous=False)
        assert _committed(broker.bootstrap, group, topic_name) == 0
    finally:
        c.close()


def test_a_read_told_to_stop_leaves_what_it_held_uncommitted_when_it_returns(
        noida_broker, topic_name):
    """The executor's side of a cancelled read: its call (told to stop while it holds
    offsets 0-1 and waits for more) returns them, and a commit made then, before the
    event loop keeps them for the next read, does not count them (it committed 2: the
    consumer closed or the partition revoked before that read, nobody gets them)."""
    broker = noida_broker  # client-side behaviour: one broker
    group = f"g-{topic_name}"
    c = Consumer(dict(_group_conf(broker, group), **{"enable.auto.commit": False}))
    try:
        _a_read_told_to_stop_returns_0_and_1(c, broker, topic_name)
        c.commit(asynchronous=False)
        assert _committed(broker.bootstrap, group, topic_name) == 0
    finally:
        c.close()


def test_a_producer_dropped_without_close_is_collected_once_its_messages_are_reported(
        tansu_broker, topic_name):
    """A producer made per call and dropped without close(): it stays alive while one of
    its messages waits for its report (that message is delivered), then it is collected
    and its I/O thread ends. The task serving its reports held it forever: every dropped
    producer kept a thread and its connections while the loop ran."""
    async def main():
        before = set(threading.enumerate())
        for i in range(5):
            # not even a name for it: only the message's future refers to it
            msg = await (await AIOProducer({"bootstrap.servers": tansu_broker.bootstrap})
                         .produce(topic_name, b"%d" % i, partition=0))
            assert msg.offset() == i
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            gc.collect()
            left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
            if not left:
                break
            await asyncio.sleep(0.1)
        assert left == []
        got = await read_all(tansu_broker.bootstrap, topic_name, 5)
        assert [m.value() for m in got] == [b"%d" % i for i in range(5)]
    run(main())


def test_a_full_producer_gives_room_first_come_first_served(tansu_broker, topic_name):
    """A produce() waiting for room comes before one called later: B, called while A
    waits, used to take the room the first report made, landing before A (two messages
    of one key out of the order they were produced in; one call waited 12 s while other
    tasks produced 60,000 messages)."""
    tansu_broker.create_topic(topic_name, partitions=1)

    async def main():
        p = AIOProducer({"bootstrap.servers": tansu_broker.bootstrap,
                         "queue.buffering.max.messages": 1})
        await p.list_topics(topic_name, 10)
        f0 = await p.produce(topic_name, b"m0", key=b"k")
        a = asyncio.create_task(p.produce(topic_name, b"A", key=b"k"))
        await asyncio.sleep(0)          # A runs: the producer is full, it waits for room
        time.sleep(0.5)                 # the application's own work: m0's report comes
        fb = await p.produce(topic_name, b"B", key=b"k")
        fa = await a
        await asyncio.gather(f0, fa, fb)
        await p.close()
        got = await read_all(tansu_broker.bootstrap, topic_name, 3)
        assert [m.value() for m in got] == [b"m0", b"A", b"B"]
    run(main())
