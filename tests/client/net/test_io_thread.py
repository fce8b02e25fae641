"""The I/O thread's wake-up: a wake() from another thread must always end select()."""
from __future__ import annotations

import select
import threading
import time

from kafka_client._net.io_thread import IOThread


class _RacingSocket:
    """The wake socket's read end, with a wake() arriving from another thread while the
    loop drains it (the window that lost wake-ups: 1 s stalls of produce and flush)."""

    def __init__(self, sock, io):
        self._sock = sock
        self._io = io
        self._raced = False

    def recv(self, n):
        if not self._raced:
            self._raced = True
            self._io.wake()
        return self._sock.recv(n)

    def __getattr__(self, name):
        return getattr(self._sock, name)


def _pending_byte(io: IOThread) -> bool:
    return bool(select.select([io._wake_r], [], [], 0)[0])


def test_a_wake_during_the_drain_is_not_lost():
    io = IOThread("test-wake")
    try:
        io.wake()
        assert io._woken and _pending_byte(io)
        real = io._wake_r
        io._wake_r = _RacingSocket(real, io)
        io._drain_wake()
        io._wake_r = real
        # Either the flag is down (the next wake() writes) or a byte is there to read.
        assert not io._woken or _pending_byte(io)
        io.wake()
        assert _pending_byte(io)
    finally:
        io.stop()


def test_wake_ends_a_long_select_from_another_thread():
    io = IOThread("test-wake-loop").start()
    try:
        for _ in range(200):
            ran = threading.Event()
            io.call_soon(ran.set)   # call_soon from this thread wakes the loop
            t0 = time.monotonic()
            assert ran.wait(2.0)
            assert time.monotonic() - t0 < 0.5  # not the loop's 1 s idle timeout
    finally:
        io.stop()
