"""kafka_client.aio against real brokers: what ours does beyond confluent-kafka's asyncio
API (headers, on_delivery, waiting for room instead of BufferError), each future resolved
once with its own message, and purged messages failing only their own futures. The behaviour shared with confluent-kafka is checked side by side
in tests/compat/test_compat_aio.py."""
from __future__ import annotations

import asyncio
import threading

import pytest

from kafka_client import OFFSET_BEGINNING, TopicPartition
from kafka_client.aio import AIOConsumer, AIOProducer

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
