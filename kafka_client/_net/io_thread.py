"""One background I/O thread per client: a ``selectors`` loop, a wake-up socketpair,
calls handed over from other threads and timers.

Everything that touches sockets or connection state runs on this thread. Other threads
talk to it with :meth:`IOThread.call_soon` (thread-safe; wakes the loop) and read back
results through their own queues. ``tick`` hooks run on every loop turn and return the
time they next want to run, so time-driven work (linger, request timeouts, retries with
backoff) needs no timer objects per event.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import selectors
import socket
import sys
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, List, Optional, Tuple

__all__ = ["IOThread", "Timer"]

_log = logging.getLogger("kafka_client.io")

#: Longest select() wait; a safety net so a lost wake-up costs at most this much.
MAX_WAIT = 1.0

#: How long the loop may wait for the GIL that a busy application thread holds before
#: :meth:`IOThread.let_run` hands it over (CPython would make it wait for its switch
#: interval, 5 ms, and that again after every socket call of the loop's turn).
LATE_S = 0.00025
#: The longest let_run() waits for the loop's turn to end
HANDOFF_MOST_S = 0.002
#: False on a free-threaded interpreter running without the GIL (nothing to hand over)
_GIL = getattr(sys, "_is_gil_enabled", lambda: True)()


class Timer:
    """A pending :meth:`IOThread.call_at`; :meth:`cancel` stops it from running."""

    __slots__ = ("when", "fn", "args", "cancelled")

    def __init__(self, when: float, fn: Callable[..., Any], args: tuple) -> None:
        self.when = when
        self.fn: Optional[Callable[..., Any]] = fn  # None once cancelled
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        # What the timer would have called is let go now, not when its time comes: a
        # cancelled timer stays in the heap until then (a request's deadline, seconds
        # away), and its arguments may hold a whole client alive meanwhile.
        self.fn = None
        self.args = ()


class IOThread:
    """The selector loop. ``start()`` runs it on a daemon thread; ``stop()`` ends it."""

    def __init__(self, name: str = "kafka-io", log: Any = None) -> None:
        self.name = name
        #: the client's configured logger when given (a handler that raises is reported here)
        self.log = log if log is not None else _log
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._calls: Deque[Tuple[Callable[..., Any], tuple]] = deque()
        self._timers: List[Tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._ticks: List[Callable[[float], Optional[float]]] = []
        self._thread: Optional[threading.Thread] = None
        self._stopping = False
        self._woken = False  # a wake-up byte is on its way; skip writing another
        self._woken_at = 0.0
        self.sleeping_until = 0.0  # monotonic time the loop is waiting for (0 = busy)
        self._turn_started = 0.0   # when the loop's current turn began (select() ended)
        self._no_handoff_until = 0.0
        #: set by the loop at the end of every turn (let_run() waits for it)
        self._turn_ended = threading.Event()
        #: exceptions raised by callbacks (logged; tests look at them)
        self.errors: List[BaseException] = []

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> "IOThread":
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def in_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the loop to end, wait for it (up to ``timeout`` s) and free its resources."""
        self._stopping = True
        self.wake()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
        if t is None or not t.is_alive():
            self._close()

    def _close(self) -> None:
        try:
            self.selector.close()
        except Exception:  # pragma: no cover - best effort at shutdown
            pass
        for s in (self._wake_r, self._wake_w):
            try:
                s.close()
            except OSError:  # pragma: no cover
                pass

    # -- from any thread -------------------------------------------------------------
    def wake(self) -> None:
        """Interrupt select() (cheap when a wake-up is already pending)."""
        if self._woken:
            return
        self._woken = True
        self._woken_at = time.monotonic()
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # buffer full (a wake-up is pending anyway) or closed at shutdown

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the I/O thread at the next loop turn."""
        self._calls.append((fn, args))
        if not self.in_thread():
            self.wake()

    def wake_if_sleeping_past(self, when: float) -> None:
        """Wake the loop if it sleeps beyond ``when`` (monotonic): a new deadline came up."""
        if self.sleeping_until > when:
            self.wake()

    def let_run(self) -> None:
        """Application thread, between its own calls: if the loop has had something to do
        for over :data:`LATE_S` without running (its select() ended or it was woken, or
        its turn is halfway), it is waiting for the GIL this thread holds; release the GIL
        until the loop has finished that turn (at most :data:`HANDOFF_MOST_S`). Without this
        a busy application thread keeps a batch whose linger ended, or an answer that
        arrived, waiting up to the interpreter's switch interval (5 ms) per step."""
        if not _GIL:
            return
        now = time.monotonic()
        if now < self._no_handoff_until:
            return
        asleep = self.sleeping_until
        if asleep:
            due = self._woken_at if self._woken and self._woken_at < asleep else asleep
        else:
            due = self._turn_started
        if not due or now - due < LATE_S or self.in_thread() or not self.alive:
            return
        ended = self._turn_ended
        ended.clear()
        # Lets the GIL go; set when the loop selects again. Not set in time: the loop is
        # busy beyond the GIL (in a blocking call), so not again for a while.
        turn_done = ended.wait(HANDOFF_MOST_S)
        self._no_handoff_until = time.monotonic() + (LATE_S if turn_done else 80 * LATE_S)

    # -- on the I/O thread ---------------------------------------------------------------
    def call_at(self, when: float, fn: Callable[..., Any], *args: Any) -> Timer:
        """Run ``fn(*args)`` at monotonic time ``when`` (I/O thread only)."""
        t = Timer(when, fn, args)
        heapq.heappush(self._timers, (when, next(self._seq), t))
        return t

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> Timer:
        return self.call_at(time.monotonic() + delay, fn, *args)

    def add_tick(self, fn: Callable[[float], Optional[float]]) -> None:
        """``fn(now)`` runs on every loop turn and returns when it next needs to run
        (monotonic seconds) or None."""
        self._ticks.append(fn)

    def remove_tick(self, fn: Callable[[float], Optional[float]]) -> None:
        try:
            self._ticks.remove(fn)
        except ValueError:
            pass

    def register(self, sock: socket.socket, events: int, handler: Callable[[int], None]) -> None:
        self.selector.register(sock, events, handler)

    def modify(self, sock: socket.socket, events: int, handler: Callable[[int], None]) -> None:
        self.selector.modify(sock, events, handler)

    def unregister(self, sock: socket.socket) -> None:
        try:
            self.selector.unregister(sock)
        except (KeyError, ValueError, OSError):
            pass

    # -- the loop ----------------------------------------------------------------------
    def _guard(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # a bug in a handler must not kill the client's I/O
            self.log.exception("error in I/O thread callback %r", fn)
            self.errors.append(exc)
            return None

    def run_once(self, max_wait: float = MAX_WAIT) -> None:
        """One loop turn: queued calls, due timers, ticks, then select()."""
        calls = self._calls
        while calls:
            fn, args = calls.popleft()
            self._guard(fn, *args)
        now = time.monotonic()
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, _, t = heapq.heappop(timers)
            due = t.fn
            if due is not None:       # None once cancelled
                self._guard(due, *t.args)
        next_at = now + max_wait
        for tick in list(self._ticks):
            when = self._guard(tick, now)
            if when is not None and when < next_at:
                next_at = when
        while timers and timers[0][2].cancelled:
            heapq.heappop(timers)
        if timers and timers[0][0] < next_at:
            next_at = timers[0][0]
        if calls or self._stopping:
            wait = 0.0
        else:
            wait = max(0.0, next_at - time.monotonic())
        self.sleeping_until = time.monotonic() + wait
        self._turn_ended.set()
        events = self.selector.select(wait)
        self.sleeping_until = 0.0
        self._turn_started = time.monotonic()
        registered = self.selector.get_map()
        for key, mask in events:
            handler = key.data
            if handler is None:
                self._drain_wake()
                continue
            # An earlier handler of this turn may have closed this socket, and a new one
            # may hold its descriptor now: the event was the old socket's (a readiness
            # that still holds is reported again by the next select()).
            current = registered.get(key.fd)
            if current is None or current.fileobj is not key.fileobj:
                continue
            self._guard(current.data, mask)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass
        # Cleared only once the socket is empty. Cleared before draining, a wake() in
        # between wrote a byte the drain then swallowed, leaving the flag set with nothing
        # to read: every later wake() was skipped and the loop slept until its next timer
        # (up to MAX_WAIT; seen as 1 s stalls). A wake() skipped during the drain is
        # harmless: the loop runs a whole turn (calls, timers, ticks) before it selects.
        self._woken = False

    def _run(self) -> None:
        try:
            while not self._stopping:
                self.run_once()
            # Last turn for calls queued by stop() callers (close connections, ...).
            calls = self._calls
            while calls:
                fn, args = calls.popleft()
                self._guard(fn, *args)
        except BaseException:  # pragma: no cover - the loop itself failed
            self.log.exception("I/O thread %s died", self.name)
            raise
        finally:
            self._close()
