"""The cluster process's event loop: one ``selectors`` loop with timers, serving every
broker's listener and connections and the followers' fetch connections.

A connection's output is a queue of byte buffers and :class:`FileRegion` items; a region
goes to the socket with ``os.sendfile`` straight from the segment file (no copy through
Python), everything else with ``socket.sendmsg`` (several buffers per call).
"""
from __future__ import annotations

import heapq
import itertools
import logging
import mmap
import os
import selectors
import socket
import time
from collections import deque
from typing import Any, Callable, Deque, Iterable, List, NamedTuple, Optional, Union

from kafka_proto.errors import InvalidLengthError
from kafka_proto.framing import FrameParser

__all__ = ["Loop", "Timer", "FileRegion", "PLACEHOLDER", "StreamConnection"]

_log = logging.getLogger("kafka_client.testing")

#: Timers in the heap before cancelled ones are first swept out.
_MIN_COMPACT = 4096
#: Buffers handed to one sendmsg() call at most.
_SENDMSG_MAX_PARTS = 64


class FileRegion(NamedTuple):
    """``size`` bytes of an open file from ``position``, to be sent with sendfile.

    ``file`` is the file object itself: holding it keeps the descriptor open even if the
    segment is deleted (retention) before the bytes are out."""

    file: Any
    position: int
    size: int


OutItem = Union[bytes, bytearray, memoryview, FileRegion]


class _Placeholder:
    """Zero pages standing in for a fetch response's records: the encoder writes their
    length and hands the slice back as a part of its own, which is then swapped for the
    file region with the same bytes (anonymous memory: never touched, costs nothing)."""

    SIZE = 1 << 30

    def __init__(self) -> None:
        self.backing = mmap.mmap(-1, self.SIZE)
        self.view = memoryview(self.backing)

    def slice(self, size: int) -> memoryview:
        return self.view[:size]

    def owns(self, part: Any) -> bool:
        return isinstance(part, memoryview) and part.obj is self.backing


PLACEHOLDER = _Placeholder()


def _noop() -> None:
    pass


class Timer:
    __slots__ = ("when", "seq", "fn", "args", "cancelled")

    def __init__(self, when: float, seq: int, fn: Callable, args: tuple) -> None:
        self.when = when
        self.seq = seq
        self.fn = fn
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        # A cancelled timer stays in the heap until its time (a Fetch's max_wait_ms may be
        # 24 days): let go of what it would have called, and of everything that holds.
        self.cancelled = True
        self.fn = _noop
        self.args = ()

    def __lt__(self, other: "Timer") -> bool:
        return (self.when, self.seq) < (other.when, other.seq)


class Loop:
    """A selectors loop with one-shot timers and call_soon callbacks."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self._timers: List[Timer] = []
        #: Heap size at which cancelled timers are swept out (twice the live ones).
        self._compact_at = _MIN_COMPACT
        self._soon: Deque[tuple] = deque()
        self._seq = itertools.count()
        self._stopping = False
        #: Counters for tests and benchmarks (bytes written by sendfile and by send).
        self.stats = {"sendfile_bytes": 0, "sendfile_calls": 0, "send_bytes": 0}

    @staticmethod
    def time() -> float:
        return time.monotonic()

    def call_later(self, delay: float, fn: Callable, *args: Any) -> Timer:
        timer = Timer(time.monotonic() + max(delay, 0.0), next(self._seq), fn, args)
        timers = self._timers
        if len(timers) >= self._compact_at:
            # Mostly cancelled far-off timers (clients that left long waits): drop them.
            timers[:] = [t for t in timers if not t.cancelled]
            heapq.heapify(timers)
            self._compact_at = max(2 * len(timers), _MIN_COMPACT)
        heapq.heappush(timers, timer)
        return timer

    def call_soon(self, fn: Callable, *args: Any) -> None:
        self._soon.append((fn, args))

    def register(self, sock: socket.socket, events: int, handler: Any) -> None:
        self.selector.register(sock, events, handler)

    def modify(self, sock: socket.socket, events: int, handler: Any) -> None:
        self.selector.modify(sock, events, handler)

    def unregister(self, sock: socket.socket) -> None:
        try:
            self.selector.unregister(sock)
        except (KeyError, ValueError):
            pass

    def stop(self) -> None:
        self._stopping = True

    def run(self) -> None:
        """Run until :meth:`stop`. A callback that raises is logged, never fatal."""
        while not self._stopping:
            self._run_soon()
            timeout = None
            if self._soon:
                timeout = 0.0
            elif self._timers:
                timeout = max(0.0, self._timers[0].when - time.monotonic())
            for key, events in self.selector.select(timeout):
                handler = key.data
                try:
                    if events & selectors.EVENT_READ:
                        handler.on_readable()
                    if events & selectors.EVENT_WRITE and not getattr(handler, "closed", False):
                        handler.on_writable()
                except Exception:
                    _log.exception("I/O handler %r failed", handler)
                    try:
                        handler.close()
                    except Exception:
                        _log.exception("closing %r failed", handler)
            now = time.monotonic()
            while self._timers and self._timers[0].when <= now:
                timer = heapq.heappop(self._timers)
                if not timer.cancelled:
                    self._call(timer.fn, timer.args)

    def _run_soon(self) -> None:
        for _ in range(len(self._soon)):
            fn, args = self._soon.popleft()
            self._call(fn, args)

    @staticmethod
    def _call(fn: Callable, args: tuple) -> None:
        try:
            fn(*args)
        except Exception:
            _log.exception("callback %r failed", fn)


class StreamConnection:
    """A non-blocking socket that reads size-prefixed frames and writes a queue.

    Subclasses implement :meth:`on_frame` and may override :meth:`on_drained` (the output
    queue became empty) and :meth:`on_closed`.
    """

    #: Send buffer asked for: a 1 MiB fetch response leaves in one sendfile call.
    SEND_BUFFER = 4 << 20

    def __init__(self, loop: Loop, sock: socket.socket, max_frame_size: int) -> None:
        self.loop = loop
        self.sock = sock
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.SEND_BUFFER)
        except OSError:
            pass
        self.parser = FrameParser(max_frame_size=max_frame_size)
        self.out: Deque[OutItem] = deque()
        self.closed = False
        #: When a byte last came in or went out (monotonic): Kafka's idle connection time.
        self.last_active = time.monotonic()
        self._events = selectors.EVENT_READ
        self._reading = True
        loop.register(sock, self._events, self)

    # -- reading ---------------------------------------------------------------------
    def pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._update_events()

    def resume_reading(self) -> None:
        if not self._reading and not self.closed:
            self._reading = True
            self._update_events()

    def on_readable(self) -> None:
        try:
            buf = self.parser.buffer_for_read()
            n = self.sock.recv_into(buf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.close(f"receive failed: {exc}")
            return
        if n == 0:
            self.close("closed by peer")
            return
        self.last_active = time.monotonic()
        try:
            frames = self.parser.commit(n)
        except InvalidLengthError as exc:
            for frame in exc.frames:  # type: ignore[attr-defined]
                self.on_frame(frame)
            self.on_bad_frame(str(exc))
            return
        for frame in frames:
            if self.closed:
                return
            self.on_frame(frame)

    def on_frame(self, frame: memoryview) -> None:
        raise NotImplementedError

    def on_bad_frame(self, reason: str) -> None:
        self.close(reason)

    # -- writing ---------------------------------------------------------------------
    def send(self, items: Iterable[OutItem]) -> None:
        if self.closed:
            return
        self.out.extend(items)
        self._flush()

    def on_writable(self) -> None:
        self._flush()

    def _flush(self) -> None:
        out = self.out
        fd = self.sock.fileno()
        try:
            while out:
                item = out[0]
                if isinstance(item, FileRegion):
                    sent = os.sendfile(fd, item.file.fileno(), item.position, item.size)
                    self.last_active = time.monotonic()
                    stats = self.loop.stats
                    stats["sendfile_calls"] += 1
                    stats["sendfile_bytes"] += sent
                    if sent == 0:
                        # The file is shorter than promised (truncated under us): the
                        # frame cannot be completed, so the stream is lost.
                        self.close("segment file ended before the fetched range")
                        return
                    if sent < item.size:
                        out[0] = FileRegion(item.file, item.position + sent, item.size - sent)
                        break
                    out.popleft()
                    continue
                parts: List[Union[bytes, bytearray, memoryview]] = []
                total = 0
                flags = 0
                for part in out:
                    if isinstance(part, FileRegion):
                        # More follows at once: no small segment for the header alone.
                        flags = socket.MSG_MORE
                        break
                    if len(parts) >= _SENDMSG_MAX_PARTS:
                        break
                    parts.append(part)
                    total += memoryview(part).nbytes
                sent = self.sock.sendmsg(parts, (), flags)
                self.last_active = time.monotonic()
                self.loop.stats["send_bytes"] += sent
                self._drop_sent(sent)
                if sent < total:
                    break   # the socket buffer is full
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            self.close(f"send failed: {exc}")
            return
        want_write = bool(out)
        if want_write != bool(self._events & selectors.EVENT_WRITE):
            self._update_events(want_write)
        if not out:
            self.on_drained()

    def _drop_sent(self, sent: int) -> None:
        out = self.out
        while sent:
            head = out[0]
            # sendmsg() was given only the buffers before the first FileRegion.
            assert not isinstance(head, FileRegion)
            size = memoryview(head).nbytes
            if sent < size:
                out[0] = memoryview(head)[sent:]
                return
            out.popleft()
            sent -= size

    def on_drained(self) -> None:
        pass

    def _update_events(self, want_write: Optional[bool] = None) -> None:
        if self.closed:
            return
        if want_write is None:
            want_write = bool(self.out)
        events = (selectors.EVENT_READ if self._reading else 0) | \
            (selectors.EVENT_WRITE if want_write else 0)
        if events == self._events:
            return
        if events:
            if self._events:
                self.loop.modify(self.sock, events, self)
            else:
                self.loop.register(self.sock, events, self)
        else:
            self.loop.unregister(self.sock)
        self._events = events

    # -- closing ---------------------------------------------------------------------
    def close(self, reason: str = "closed") -> None:
        if self.closed:
            return
        self.closed = True
        self.loop.unregister(self.sock)
        try:
            self.sock.close()
        except OSError:
            pass
        self.out.clear()
        self.on_closed(reason)

    def on_closed(self, reason: str) -> None:
        pass
