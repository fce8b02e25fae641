"""What the asyncio clients share: running the clients' callbacks on the event loop, and
the blocking calls off it.

The synchronous clients call their callbacks on whichever thread serves them (the thread
in poll()/consume()/flush()). The asyncio clients make every callback run on the event
loop's thread, whether the user's callback is a coroutine function (confluent-kafka's
asyncio API requires that) or a plain function (accepted here too):

* called on the loop's thread (the producer serves its reports there): a plain callback
  runs at once; a coroutine is scheduled as a task;
* called on another thread (an executor thread inside a blocking call, such as
  ``consume()`` running a rebalance callback): the callback runs on the loop and that
  thread waits for it to finish, so that what it does (``await consumer.assign(...)``)
  happens before the blocking call goes on, as with the synchronous client. Its
  exception is raised in that thread, and so reaches the awaited call.

Calls a callback makes to its own client are marked (a context variable) and go to the
loop's default executor rather than the client's: the client's threads may all be
waiting for callbacks, and those calls must not queue behind them.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import logging
import threading
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

__all__ = ["LoopBridge", "callback_waiter", "in_callback"]

_log = logging.getLogger("kafka_client.aio")

#: set while a client's callback runs on the loop (see the module's docstring)
#: (a mark whose ``running`` turns False when the callback returns: tasks the callback
#: starts copy the context, and must not stay marked once it is over)
_IN_CALLBACK: contextvars.ContextVar[Optional["_CallbackMark"]] = contextvars.ContextVar(
    "kafka_client_aio_in_callback", default=None)

#: the configuration's callbacks the asyncio clients run on the loop
LOOP_CALLBACKS = ("error_cb", "stats_cb", "throttle_cb", "on_commit")


class LoopBridge:
    """One asyncio client's event loop, its executor, and the callbacks' failures."""

    def __init__(self, max_workers: int, executor: Optional[concurrent.futures.Executor],
                 what: str) -> None:
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(f"{what} must be created inside a running asyncio event "
                               f"loop (in a coroutine)") from None
        self.loop_thread = threading.get_ident()
        self.what = what
        if executor is None:
            if not isinstance(max_workers, int) or max_workers < 1:
                raise ValueError(f"max_workers must be an int of at least 1, not "
                                 f"{max_workers!r}")
            executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=max_workers, thread_name_prefix=f"{what}-worker")
            self.owns_executor = True
        else:
            self.owns_executor = False
        self.executor = executor
        #: the exception of a callback (at most one), raised by the next awaited call
        self.failures: List[BaseException] = []
        self.dropped_failures = 0        # raised while one was waiting: logged only
        self._tasks: Set["asyncio.Task[Any]"] = set()

    def on_loop(self) -> bool:
        return threading.get_ident() == self.loop_thread

    def follow_loop(self) -> bool:
        """At the start of a call: True when the client has just moved to the running
        event loop because the one it was made in is closed (a client made in one
        ``asyncio.run()`` and used in the next, a fixture outliving its test's loop); the
        client then makes its loop-bound parts again. A loop still open elsewhere is
        refused: a client serves one loop at a time."""
        loop = asyncio.get_running_loop()
        if loop is self.loop:
            return False
        if not self.loop.is_closed():
            raise RuntimeError(f"{self.what} belongs to another event loop, which is still "
                               f"open: make one client per event loop")
        self.loop = loop
        self.loop_thread = threading.get_ident()
        self._tasks = set()
        return True

    # -- callbacks -------------------------------------------------------------------------
    def wrap(self, callback: Callable[..., Any],
             edit_args: Optional[Callable[[Tuple[Any, ...]], Tuple[Any, ...]]] = None
             ) -> Callable[..., Any]:
        """``callback`` as a callback for the synchronous client (see the module's
        docstring); ``edit_args`` changes the arguments first."""
        bridge = self

        def call(*args: Any) -> None:
            if edit_args is not None:
                args = edit_args(args)
            if bridge.on_loop():
                result = callback(*args)
                if inspect.isawaitable(result):
                    bridge.spawn(result)
                return
            future = asyncio.run_coroutine_threadsafe(
                _run(callback, args, threading.get_ident()), bridge.loop)
            future.result()

        return call

    def wrap_config(self, conf: Dict[str, Any], names: Tuple[str, ...] = LOOP_CALLBACKS
                    ) -> Dict[str, Any]:
        """A copy of ``conf`` with its callbacks among ``names`` wrapped."""
        conf = dict(conf)
        for name in names:
            cb = conf.get(name)
            if cb is not None and callable(cb):   # not callable: refused by the client
                conf[name] = self.wrap(cb)
        return conf

    def spawn(self, awaitable: Any) -> None:
        """Loop thread: run a callback's coroutine as a task; its exception is kept for
        the next awaited call."""
        task = asyncio.ensure_future(awaitable)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: "asyncio.Task[Any]") -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.add_failure(task.exception())  # type: ignore[arg-type]

    def add_failure(self, exc: BaseException) -> None:
        """A callback's exception, for the next awaited call to raise. One waits at a
        time: those raised meanwhile are logged, not kept (a stats_cb raising every
        interval piled them up without bound, and each later call raised a stale one
        instead of doing its work)."""
        if self.failures:
            self.dropped_failures += 1
            if self.dropped_failures == 1 or self.dropped_failures % 1000 == 0:
                _log.error("%s: a callback raised again before the earlier exception was "
                           "raised by an awaited call (%d so far; logged, not raised): %r",
                           self.what, self.dropped_failures, exc)
            return
        self.failures.append(exc)

    def raise_failure(self) -> None:
        """Raise the first exception a callback task had, if any (once)."""
        if self.failures:
            raise self.failures.pop(0)

    async def settle_tasks(self) -> None:
        """Wait for the callback tasks still running (not the one calling: a callback
        closing its own client)."""
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- blocking calls --------------------------------------------------------------------
    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Raise a callback's pending exception, else run a blocking call of the
        synchronous client off the loop and await it."""
        self.raise_failure()
        return await self.run(fn, *args, **kwargs)

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking call of the synchronous client off the loop and await it."""
        return await self.start(fn, *args, **kwargs)

    def start(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "asyncio.Future[Any]":
        """Start a blocking call of the synchronous client off the loop: its future."""
        executor = None if in_callback() else self.executor
        return self.loop.run_in_executor(executor, functools.partial(fn, *args, **kwargs))

    async def run_alone(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a blocking call of the synchronous client on a thread of its own and await
        it: for close(), which must not queue in the client's executor behind the calls
        that only it ends (reads, lookups without a timeout)."""
        loop = self.loop
        future: "asyncio.Future[Any]" = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if not future.done():
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

        def run() -> None:
            try:
                outcome = (True, fn(*args))
            except BaseException as exc:  # handed to the awaiting coroutine
                outcome = (False, exc)
            try:
                loop.call_soon_threadsafe(settle, *outcome)
            except RuntimeError:          # the loop is closed: nobody awaits it
                pass

        threading.Thread(target=run, name=f"{self.what}-closing", daemon=True).start()
        return await future

    async def close_executor(self) -> None:
        """Shut the executor this client made down. From a callback (closing its own
        client) it is not waited for: one of its threads may be the call that waits for
        this very callback, and it ends when that call returns."""
        if self.owns_executor:
            if in_callback():
                self.executor.shutdown(wait=False)
            else:
                await self.loop.run_in_executor(None, functools.partial(
                    self.executor.shutdown, wait=True))


def in_callback() -> bool:
    """Whether the calling code runs inside one of a client's callbacks (not in a task
    such a callback started, once the callback has returned)."""
    mark = _IN_CALLBACK.get()
    return mark is not None and mark.running


def callback_waiter() -> Optional[int]:
    """The thread that waits for the callback the calling code runs in (see the
    module's docstring), if any: a close() the callback makes must not wait for it."""
    mark = _IN_CALLBACK.get()
    return mark.waiter if mark is not None and mark.running else None


class _CallbackMark:
    """What :data:`_IN_CALLBACK` holds while a callback runs on the loop."""

    __slots__ = ("running", "waiter")

    def __init__(self, waiter: Optional[int]) -> None:
        self.running = True    # False once it returned (see _IN_CALLBACK)
        self.waiter = waiter   # the thread waiting for it


async def _run(callback: Callable[..., Any], args: Tuple[Any, ...],
               waiter: Optional[int]) -> Any:
    mark = _CallbackMark(waiter)
    _IN_CALLBACK.set(mark)   # this task's own context: calls made in it are marked
    try:
        result = callback(*args)
        if inspect.isawaitable(result):
            result = await result
        return result
    finally:
        mark.running = False  # tasks it started (copies of the context) are not any more
