"""Fault helpers shared by the fault acceptance tests (test_producer_faults.py,
test_consumer_faults.py): a thread that keeps injecting faults into a
:class:`FaultProxy`, and a broker restart with the traffic held at the proxy.

Not a test module: the test files import it by name (pytest puts their folder on
``sys.path``, as there is no package ``__init__``).
"""
from __future__ import annotations

import collections
import random
import threading
import time
from typing import Dict, Sequence

from kafka_client._testing.proxy import DOWNSTREAM, UPSTREAM, FaultProxy

__all__ = ["Faults", "restart_behind"]


class Faults(threading.Thread):
    """Cycles through the fault kinds on ``proxy`` every ``interval`` seconds (jittered
    0.5x..1.5x by a seeded generator) until stopped; counts what it did in ``counts``.

    Kinds: ``cut`` (FIN both sides), ``reset`` (RST), ``stall`` (both directions, held
    20..200 ms, then resumed), ``drop_up`` / ``drop_down`` (the connection carrying the
    k-th next byte in that direction is closed right there, k random below
    ``drop_up_max`` going up, ``drop_down_max`` coming down; FIN or RST), ``refuse``
    (every connection reset and new ones refused for 50..300 ms, so reconnecting fails
    a few times), and the 10th fault and every ``long_every``-th after it a
    ``long_stall`` of answers only, for ``long_stall`` seconds (longer than the client's
    socket.timeout.ms, so requests time out on the client after the broker handled
    them). ``kinds`` are taken in turn.
    """

    KINDS = ("cut", "stall", "drop_up", "reset", "drop_down")

    def __init__(self, proxy: FaultProxy, seed: int, interval: float = 0.05,
                 long_every: int = 40, long_stall: float = 1.3,
                 kinds: Sequence[str] = KINDS, drop_up_max: int = 65536,
                 drop_down_max: int = 2048):
        super().__init__(name="proxy-faults", daemon=True)
        unknown = set(kinds) - {"cut", "stall", "drop_up", "reset", "drop_down", "refuse"}
        if unknown or not kinds:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}")
        self.proxy = proxy
        self.rng = random.Random(seed)
        self.interval = interval
        self.long_every = long_every
        self.long_stall = long_stall
        self.kinds = tuple(kinds)
        self.drop_up_max = drop_up_max
        self.drop_down_max = drop_down_max
        self.counts: Dict[str, int] = collections.Counter()
        self.error: BaseException = None  # type: ignore[assignment]
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(10)
        assert not self.is_alive(), "fault thread did not stop"
        if self.error is not None:
            raise self.error

    def _sleep(self, seconds: float) -> bool:
        return not self._stop_event.wait(seconds)

    def run(self) -> None:
        p = self.proxy
        n = 0
        try:
            while self._sleep(self.interval * self.rng.uniform(0.5, 1.5)):
                n += 1
                if self.long_every and n % self.long_every == 10:
                    kind = "long_stall"
                else:
                    kind = self.kinds[n % len(self.kinds)]
                if kind == "cut":
                    p.cut()
                elif kind == "reset":
                    p.reset()
                elif kind == "stall":
                    p.stall()
                    self._sleep(self.rng.uniform(0.02, 0.2))
                    p.resume()
                elif kind == "long_stall":
                    p.stall(DOWNSTREAM)
                    self._sleep(self.long_stall)
                    p.resume(DOWNSTREAM)
                elif kind == "refuse":
                    p.refuse(True)
                    try:
                        p.reset()
                        self._sleep(self.rng.uniform(0.05, 0.3))
                    finally:
                        p.refuse(False)
                else:
                    up = kind == "drop_up"
                    p.drop_after(self.rng.randrange(
                        1, self.drop_up_max if up else self.drop_down_max),
                        UPSTREAM if up else DOWNSTREAM, rst=self.rng.random() < 0.5)
                self.counts[kind] += 1
        except BaseException as exc:  # handed to the test by stop()
            self.error = exc
        finally:
            try:
                p.resume()
                p.refuse(False)
            except Exception:
                pass


def restart_behind(proxy: FaultProxy, broker) -> None:
    """Restart ``broker`` with no request arriving while it shuts down, and with the
    answers to the last requests it handled lost.

    noida-db 0.2.3 acknowledges requests that reach it during its graceful shutdown (for
    about 100 ms after SIGINT) and loses what it wrote after its last flush (Produce:
    test_producer_faults.py; OffsetCommit too: test_consumer_faults.py saw a commit
    acknowledged then and gone after the restart). No client can keep what the broker
    forgets after acknowledging it, so the traffic waits at the proxy meanwhile: the
    requests already handed over are handled, their answers are held, new ones wait
    on the client's side."""
    proxy.stall(DOWNSTREAM)   # requests still go up and are handled; answers wait
    try:
        time.sleep(0.05)
        proxy.stall(UPSTREAM)  # nothing reaches the broker from here on
        time.sleep(0.1)        # it has handled what it got
        broker.restart()
        proxy.reset()          # the held answers are lost with the connections
    finally:
        proxy.resume()
