"""A long poll: a request (Fetch, ShareFetch) answered at once when what it reads is
ready, else when data comes on one of its partitions or its wait is over, and never if
its connection closes first."""
from __future__ import annotations

from typing import Any, List, Tuple

from ._api import RequestContext

__all__ = ["LongPoll"]


class LongPoll:
    """The waiting of one request. A subclass sets ``keys`` (the partitions whose data
    wakes it), reads with ``_read()`` (what it read, and whether that is enough to
    answer) and answers what it read with ``_respond()``."""

    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self.keys: List[Tuple[str, int]] = []
        self.timer: Any = None
        self.done = False

    def _read(self) -> Tuple[Any, bool]:
        raise NotImplementedError

    def _respond(self, read: Any) -> None:
        raise NotImplementedError

    def _try(self, final: bool) -> bool:
        """Answer if what is read is enough or ``final``; True: answered."""
        read, ready = self._read()
        if not (ready or final):
            return False
        self._finish()
        self._respond(read)
        return True

    def _wait(self, max_wait_ms: int) -> None:
        """Nothing to answer yet: wait for data on ``keys`` for ``max_wait_ms``."""
        broker = self.ctx.broker
        broker.watch(self.keys, self._wake)
        self.timer = broker.loop.call_later(max_wait_ms / 1000, self._expire)
        self.ctx.conn.on_close(self._finish)

    def _wake(self) -> None:
        # A wake queued (the broker's once-a-turn set) before the timer answered: a read
        # now would take records or make a session for an answer never sent.
        if self.done:
            return
        if self.ctx.conn.closed:
            self._finish()
            return
        self._try(final=False)

    def _expire(self) -> None:
        self.timer = None
        if not self.done:
            self._try(final=True)

    def _finish(self) -> None:
        if self.done:
            return
        self.done = True
        self.ctx.broker.unwatch(self.keys, self._wake)
        self.ctx.conn.forget_on_close(self._finish)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
