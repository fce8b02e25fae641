"""kafka_client.aio without a broker: construction, the callbacks' thread and the
executor, the serializing forms' construction and refusals, use after close."""
from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from kafka_client import KafkaError, KafkaException
from kafka_client.aio import (
    AIOConsumer,
    AIOProducer,
    AsyncDeserializingConsumer,
    AsyncSerializingProducer,
)
from kafka_client.aio._bridge import LoopBridge, in_callback
from kafka_client.errors import KeySerializationError, ValueSerializationError
from kafka_client.serialization import StringSerializer

NOWHERE = "127.0.0.1:1"

pytestmark = pytest.mark.timeout(30)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_made_outside_an_event_loop_is_a_clear_error():
    for cls, conf in ((AIOProducer, {"bootstrap.servers": NOWHERE}),
                      (AIOConsumer, {"bootstrap.servers": NOWHERE})):
        with pytest.raises(RuntimeError, match="inside a running asyncio event loop"):
            cls(conf)


def test_bad_arguments_are_refused_by_name():
    async def main():
        with pytest.raises(ValueError, match="max_workers"):
            AIOProducer({"bootstrap.servers": NOWHERE}, max_workers=0)
        with pytest.raises(ValueError, match="batch_size"):
            AIOProducer({"bootstrap.servers": NOWHERE}, batch_size=0)
        with pytest.raises(TypeError, match="producer_conf must be a dict"):
            AIOProducer([("bootstrap.servers", NOWHERE)])
        with pytest.raises(KafkaException):            # the Producer's own check
            AIOProducer({"bootstrap.servers": NOWHERE, "linger.ms": -1})
        p = AIOProducer({"bootstrap.servers": NOWHERE})
        with pytest.raises(TypeError, match="on_delivery must be callable"):
            await p.produce("t", b"v", on_delivery=5)
        with pytest.raises(TypeError):
            await p.produce("t", "v", partition="x")
        await p.purge()
        await p.close()
    run(main())


def test_a_callback_called_off_the_loop_runs_on_it_and_is_waited_for():
    """What a rebalance callback meets: called on an executor thread inside a blocking
    call, it runs on the loop, as a coroutine or a plain function, and the calling thread
    goes on only once it finished (its exception raised there)."""
    async def main():
        bridge = LoopBridge(2, None, "test")
        seen = []

        async def coro_cb(a, b):
            await asyncio.sleep(0.05)
            seen.append(("coro", threading.get_ident(), a, b))

        def plain_cb(a):
            seen.append(("plain", threading.get_ident(), a))

        async def failing(a):
            raise ValueError("from the callback")

        loop_thread = threading.get_ident()

        def blocking():
            bridge.wrap(coro_cb)(1, 2)
            seen.append(("after", threading.get_ident()))
            bridge.wrap(plain_cb, lambda args: ("edited",))(0)
            with pytest.raises(ValueError, match="from the callback"):
                bridge.wrap(failing)(3)
            return "done"

        assert await bridge.call(blocking) == "done"
        assert [s[0] for s in seen] == ["coro", "after", "plain"]
        assert seen[0][1] == loop_thread and seen[2][1] == loop_thread
        assert seen[1][1] != loop_thread and seen[2][2] == "edited"
        await bridge.close_executor()
    run(main())


def test_a_callback_called_on_the_loop_runs_at_once_or_as_a_task():
    async def main():
        bridge = LoopBridge(1, None, "test")
        seen = []

        async def coro_cb(x):
            seen.append(("coro", x))
            raise RuntimeError("later")

        bridge.wrap(lambda x: seen.append(("plain", x)))(1)
        assert seen == [("plain", 1)]
        bridge.wrap(coro_cb)(2)
        assert seen == [("plain", 1)]            # scheduled, not run in line
        await bridge.settle_tasks()
        assert seen[-1] == ("coro", 2)
        with pytest.raises(RuntimeError, match="later"):   # raised by the next call
            await bridge.call(lambda: None)
        await bridge.close_executor()
    run(main())


def test_calls_made_inside_a_callback_do_not_wait_for_the_clients_busy_executor():
    """With one worker busy inside a blocking call that waits for a callback, the
    callback's own calls to the client go to the loop's default executor."""
    async def main():
        bridge = LoopBridge(1, None, "test")

        names = []

        async def cb():
            names.append(await bridge.call(lambda: threading.current_thread().name))

        def blocking():
            names.append(threading.current_thread().name)
            bridge.wrap(cb)()

        await bridge.call(blocking)         # with the call in the pool: a deadlock
        assert names[0].startswith("test-worker") and not names[1].startswith("test-worker")
        await bridge.close_executor()
    run(main())


def test_use_after_close_and_closing_twice():
    async def main():
        p = AIOProducer({"bootstrap.servers": NOWHERE})
        await p.close()
        await p.close()
        assert len(p) == 0
        for call in (lambda: p.produce("t", b"v"), lambda: p.flush(0), lambda: p.poll(0),
                     lambda: p.list_topics(timeout=0.1)):
            with pytest.raises(RuntimeError, match="closed"):
                await call()
        async with AIOConsumer({"bootstrap.servers": NOWHERE}) as c:
            assert await c.assignment() == []
        with pytest.raises(RuntimeError, match="closed"):
            await c.poll(0)
    run(main())


def test_the_serializing_forms_are_made_with_await_and_check_their_serdes():
    async def main():
        p = await AsyncSerializingProducer({"bootstrap.servers": NOWHERE,
                                            "value.serializer": StringSerializer()})
        assert isinstance(p, AIOProducer)
        with pytest.raises(TypeError, match="topic must be a str"):
            await p.produce(5, value="x")

        async def bad_async(obj, ctx):
            raise ValueError("no")

        p2 = await AsyncSerializingProducer({"bootstrap.servers": NOWHERE,
                                             "key.serializer": bad_async,
                                             "value.serializer": lambda o, c: 1 / 0})
        with pytest.raises(KeySerializationError):
            await p2.produce("t", key="k", value="v")
        p2._key_serde = None
        with pytest.raises(ValueSerializationError):
            await p2.produce("t", key="k", value="v")
        assert len(p2) == 0                        # nothing was queued
        for obj in (p, p2):
            await obj.close()
        with pytest.raises(TypeError, match=r"must have a build\(conf, is_key\) method"):
            await AsyncSerializingProducer({"bootstrap.servers": NOWHERE,
                                            "value.serializer.builder": object()})
        with pytest.raises(ValueError, match="both configured"):
            await AsyncDeserializingConsumer({"bootstrap.servers": NOWHERE,
                                              "key.deserializer": str,
                                              "key.deserializer.builder": object()})
        with pytest.raises(TypeError, match="value.deserializer must be callable"):
            await AsyncDeserializingConsumer({"bootstrap.servers": NOWHERE,
                                              "value.deserializer": 5})
    run(main())


def test_a_serde_client_dropped_without_close_closes_the_serdes_it_built(run_child):
    """As the blocking clients: the serdes built from ``.builder`` properties are closed
    (``aclose()``, on an event loop) when the client is collected without close(), inside
    its event loop, or left open at exit; ready-made ones stay the application's."""
    out = run_child(f"""
        import asyncio, gc
        from kafka_client.aio import AsyncDeserializingConsumer, AsyncSerializingProducer

        class Built:
            def __init__(self, name):
                self.name = name

            async def __call__(self, data, ctx):
                return data

            async def aclose(self):
                await asyncio.sleep(0)            # needs a running event loop
                print("closed", self.name, flush=True)

        class Builder:
            def __init__(self, name):
                self.name = name

            async def build(self, conf, is_key):
                return Built(self.name), conf

        async def make(cls, kind, name, **extra):
            return await cls(dict({{"bootstrap.servers": "{NOWHERE}",
                                    f"value.{{kind}}.builder": Builder(name),
                                    f"key.{{kind}}": Built("ready-made " + name)}}, **extra))

        kept = []

        async def main():
            for cls, kind, extra in (
                    (AsyncSerializingProducer, "serializer", {{}}),
                    (AsyncDeserializingConsumer, "deserializer", {{"group.id": "g"}})):
                await make(cls, kind, cls.__name__, **extra)     # dropped at once
                gc.collect()
                print("collected", cls.__name__, flush=True)
            kept.append(await make(AsyncSerializingProducer, "serializer", "producer at exit"))
            kept.append(await make(AsyncDeserializingConsumer, "deserializer",
                                   "consumer at exit", **{{"group.id": "g"}}))

        asyncio.run(main())
        print("exiting", flush=True)
    """, timeout=120)   # a hang guard: each drop waits at most 5 s for its brokers
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:5] == ["closed AsyncSerializingProducer", "collected AsyncSerializingProducer",
                         "closed AsyncDeserializingConsumer",
                         "collected AsyncDeserializingConsumer", "exiting"], out.stdout
    assert sorted(lines[5:]) == ["closed consumer at exit", "closed producer at exit"], \
        out.stdout


@pytest.mark.parametrize("kind", ["coroutine", "function"])
def test_an_exception_of_a_callback_reaches_the_next_awaited_call(kind):
    """error_cb runs on the loop, served by the producer as events come; what it raises
    (a RuntimeError too) is raised by the application's next awaited call, once."""
    async def main():
        calls = []

        def fail_first(err):
            calls.append(err.code())
            if len(calls) == 1:                # the first of the connection errors
                raise RuntimeError("from error_cb")

        async def coroutine_cb(err):
            fail_first(err)

        failing_error_cb = coroutine_cb if kind == "coroutine" else fail_first

        p = AIOProducer({"bootstrap.servers": NOWHERE, "error_cb": failing_error_cb})
        deadline = asyncio.get_running_loop().time() + 5
        while not calls:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.05)              # the callback's task finished
        with pytest.raises(RuntimeError, match="from error_cb"):
            await p.poll(0)
        assert await p.poll(0) >= 0            # raised once
        await p.purge()
        await p.close()
    run(main())


def test_a_message_that_cannot_fit_even_in_an_empty_producer_fails_at_once():
    """Over queue.buffering.max.kbytes alone: the synchronous producer raises BufferError
    every time, so waiting for room would wait forever; the future fails with
    _QUEUE_FULL, as confluent-kafka's AIOProducer fails it. One that fits is queued."""
    async def main():
        p = AIOProducer({"bootstrap.servers": NOWHERE, "queue.buffering.max.kbytes": 4})
        future = await asyncio.wait_for(p.produce("t", b"x" * 10_000), 5)
        with pytest.raises(KafkaException) as got:
            await future
        assert got.value.args[0].code() == KafkaError._QUEUE_FULL
        assert "queue.buffering.max.kbytes" in got.value.args[0].str()
        await p.produce("t", b"x" * 1_000)
        assert len(p) == 1
        await p.purge()
        await p.close()
    run(main())


def test_a_client_made_in_one_event_loop_moves_to_the_next_once_the_first_is_closed():
    """A client made in one asyncio.run() and used in a later one (a fixture outliving
    its test's loop): its calls work in the new loop and close() frees its threads; every
    call failed with asyncio's "bound to a different event loop", and close() left the
    synchronous client and its I/O thread running. A loop still open is refused."""
    async def make():
        return (AIOProducer({"bootstrap.servers": NOWHERE}),
                AIOConsumer({"bootstrap.servers": NOWHERE}))

    before = set(threading.enumerate())
    p, c = asyncio.run(make())
    theirs = set(threading.enumerate()) - before       # I/O threads, executors' workers

    async def use():
        future = await p.produce("t", b"v")
        assert len(p) == 1 and not future.done()
        assert await p.flush(0.1) == 1
        await p.purge()
        with pytest.raises(KafkaException) as got:        # purged: failed on this loop
            await asyncio.wait_for(future, 5)
        assert got.value.args[0].code() == KafkaError._PURGE_QUEUE
        assert await c.assignment() == [] and await c.poll(0.05) is None
        await p.close()
        await c.close()

    run(use())
    for th in theirs:
        th.join(5)
    assert theirs and not [th.name for th in theirs if th.is_alive()]

    # A client whose loop still runs (in another thread) is not taken over.
    made = threading.Event()
    stop = threading.Event()
    box = []

    def other_loop():
        async def main():
            box.append(AIOProducer({"bootstrap.servers": NOWHERE}))
            made.set()
            while not stop.is_set():
                await asyncio.sleep(0.01)
            await box[0].close()
        asyncio.run(main())

    th = threading.Thread(target=other_loop)
    th.start()
    try:
        assert made.wait(10)

        async def elsewhere():
            with pytest.raises(RuntimeError, match="another event loop"):
                await box[0].produce("t", b"v")
        run(elsewhere())
    finally:
        stop.set()
        th.join(10)


def test_a_close_cut_short_fails_the_futures_of_what_it_drops():
    """close() under asyncio.wait_for timing out (no broker: nothing can be delivered)
    still closes, and the futures of the dropped messages fail with _PURGE_QUEUE; they
    stayed pending forever, hanging whoever awaited them."""
    async def main():
        p = AIOProducer({"bootstrap.servers": NOWHERE})
        futures = [await p.produce("t", b"x") for _ in range(10)]
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(p.close(), 0.5)
        results = await asyncio.wait_for(
            asyncio.gather(*futures, return_exceptions=True), 5)
        assert {r.args[0].code() for r in results} == {KafkaError._PURGE_QUEUE}
        assert len(p) == 0
        await p.close()                                  # closed: nothing more to do
        with pytest.raises(RuntimeError, match="closed"):
            await p.produce("t", b"y")
    run(main())


def test_a_consumer_closed_from_its_own_error_cb_closes_and_the_poll_returns(run_child):
    """An error_cb coroutine closing its AIOConsumer (the broker is unreachable) while a
    task awaits poll(): close() waited for the executor thread that waits for the
    callback (a deadlock: neither returned, the process could not exit). In a child
    process with a hard timeout."""
    out = run_child(f"""
        import asyncio, time
        from kafka_client.aio import AIOConsumer

        async def main():
            box, closed = {{}}, []

            async def on_error(err):
                if not closed:
                    closed.append(err.code())
                    await box["c"].close()
                    closed.append("closed")

            box["c"] = c = AIOConsumer({{"bootstrap.servers": "{NOWHERE}", "group.id": "g",
                                        "error_cb": on_error}})
            await c.subscribe(["t"])
            t = time.monotonic()
            try:
                while "closed" not in closed and time.monotonic() - t < 10:
                    await asyncio.wait_for(c.poll(0.5), 10)
            except RuntimeError:       # the next poll() after close
                pass
            assert closed[-1] == "closed", closed
            try:
                await c.poll(0)
                raise SystemExit("poll() after close() did not raise")
            except RuntimeError:
                pass
            print("ok")

        asyncio.run(main())
    """, timeout=120)   # a hang guard: slow imports on a loaded machine took 30 s
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_poll_waits_its_timeout_when_nothing_comes():
    """poll(timeout) with nothing to serve waits the timeout (it returned at the next
    0.1 s tick of the task serving reports: a poll(1.0) loop spun at 10 Hz)."""
    silent = socket.socket()               # takes connections, never answers: no event
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)

    async def main():
        p = AIOProducer({"bootstrap.servers": "127.0.0.1:%d" % silent.getsockname()[1]})
        t = time.monotonic()
        assert await p.poll(0.5) == 0
        assert time.monotonic() - t >= 0.45
        await p.close()
    try:
        run(main())
    finally:
        silent.close()


def test_a_producer_closed_from_its_own_callback_coroutine_closes(run_child):
    """An error_cb coroutine (the broker is unreachable) closing its AIOProducer: close()
    waited for every callback task, itself included, and never returned (asyncio.run()
    then died with RecursionError). In a child process with a hard timeout."""
    out = run_child(f"""
        import asyncio, time
        from kafka_client.aio import AIOProducer

        async def main():
            box, state = {{}}, []

            async def on_error(err):
                if not state:
                    state.append("closing")
                    await box["p"].close()
                    state.append("closed")

            box["p"] = AIOProducer({{"bootstrap.servers": "{NOWHERE}",
                                     "error_cb": on_error}})
            t = time.monotonic()
            while "closed" not in state and time.monotonic() - t < 10:
                await asyncio.sleep(0.05)
            assert state == ["closing", "closed"], state
            print("ok")

        asyncio.run(main())
    """, timeout=120)   # a hang guard: slow imports on a loaded machine took 30 s
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_task_a_callback_starts_is_not_marked_as_in_the_callback_once_it_returned():
    """Calls a callback makes go to the loop's default executor (the client's own may be
    busy waiting for the callback); a task the callback started copies its context and
    kept that mark for life: all its calls went to the default executor, starving
    asyncio.to_thread() elsewhere."""
    async def main():
        bridge = LoopBridge(1, None, "T")
        seen = {}

        async def callback():
            seen["in"] = in_callback()

            async def worker():
                await asyncio.sleep(0.05)
                seen["worker"] = in_callback()
            seen["task"] = asyncio.get_running_loop().create_task(worker())

        call = bridge.wrap(callback)
        await asyncio.get_running_loop().run_in_executor(None, call)   # another thread
        await seen["task"]
        assert seen["in"] is True and seen["worker"] is False
        await bridge.close_executor()
    run(main())


def test_close_does_not_queue_behind_the_calls_only_it_ends(run_child):
    """max_workers=1 and a list_topics() without timeout stuck on an unreachable broker
    (its awaiting coroutine cancelled: the call goes on): close() ran on that executor,
    behind it, for ever; it now has a thread of its own, and ends the stuck call."""
    out = run_child(f"""
        import asyncio, time
        from kafka_client.aio import AIOConsumer, AIOProducer

        async def main():
            for cls in (AIOProducer, AIOConsumer):
                client = cls({{"bootstrap.servers": "{NOWHERE}"}}, max_workers=1)
                try:
                    await asyncio.wait_for(client.list_topics(), 0.3)
                except asyncio.TimeoutError:
                    pass
                t = time.monotonic()
                await asyncio.wait_for(client.close(), 10)
                assert time.monotonic() - t < 5
            print("ok")

        asyncio.run(main())
    """, timeout=40)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_the_report_task_comes_back_after_a_cancel_all_at_shutdown():
    """Shutdown code that cancels every task but its own cancels the producer's report
    task too: the next report brings it back (a delivery future was never resolved)."""
    async def main():
        p = AIOProducer({"bootstrap.servers": NOWHERE})
        future = await p.produce("t", b"v")
        me = asyncio.current_task()
        for task in asyncio.all_tasks():
            if task is not me:
                task.cancel()
        await asyncio.sleep(0.05)
        assert p._pump_task.done()
        p._producer.purge()                 # a report, served by no call of ours
        with pytest.raises(KafkaException) as got:
            await asyncio.wait_for(future, 5)
        assert got.value.args[0].code() == KafkaError._PURGE_QUEUE
        await p.close()
    asyncio.run(main())     # not run(): its wait_for's task would be cancelled too


def test_callback_exceptions_do_not_pile_up(caplog):
    """One callback exception waits for the next awaited call; those raised meanwhile are
    logged, not kept (a stats_cb raising every interval piled them up: each later call
    raised a stale one instead of queueing its message)."""
    async def main():
        bridge = LoopBridge(1, None, "T")
        for i in range(50):
            bridge.add_failure(ValueError(i))
        with pytest.raises(ValueError) as got:
            bridge.raise_failure()
        assert got.value.args == (0,)
        bridge.raise_failure()                    # nothing more
        assert bridge.dropped_failures == 49
        await bridge.close_executor()
    with caplog.at_level("ERROR", logger="kafka_client.aio"):
        run(main())
    assert len(caplog.records) == 1 and "raised again" in caplog.records[0].getMessage()
