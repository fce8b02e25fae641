"""The runners of test_authorization.py: ``authz_cases.py --serve`` child processes,
each with its own one-broker test cluster, a few per client, that take the cases the
tests ask for, one at a time each, while the tests wait for the results (most of a case
is waiting on the client, so the cases overlap). A case still running after
CASE_TIMEOUT_S fails (hung?) and its runner is killed; a fresh one takes the next case.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Optional, Tuple

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "authz_cases.py")
PEERS = ("ours", "librdkafka")
#: a case still running after this long is hung: its runner is killed
CASE_TIMEOUT_S = 150.0
#: how long a runner may take to start its cluster
START_TIMEOUT_S = 60.0
#: runners per client at most: the cases of one client run this many at a time
RUNNERS_PER_PEER = 4
#: cases per runner at least (a runner takes a few seconds of CPU to start)
CASES_PER_RUNNER = 4
#: the cases in which a client waits out a whole window of 12 s or more (librdkafka does
#: not read what ours reads once granted): started first, so that none of them is the
#: last to finish
LONGEST_CASES = ("subscribe_metadata_refused", "offset_fetch_refused",
                 "heartbeat_refused_consumer_protocol",
                 "subscribe_one_topic_refused_beside_another")


@dataclass
class Outcome:
    """What one client observed in one case, or why there is nothing, once ``done``."""

    result: Optional[Dict[str, Any]] = None
    failure: Optional[str] = None
    #: how long the case took in its runner
    seconds: float = 0.0
    done: threading.Event = field(default_factory=threading.Event)

    def settle(self, result: Optional[Dict[str, Any]] = None, failure: Optional[str] = None,
               seconds: float = 0.0) -> None:
        self.result, self.failure, self.seconds = result, failure, seconds
        self.done.set()


class RunnerHung(Exception):
    """A runner said nothing it was expected to say in time."""


class Runner:
    """One ``authz_cases.py --serve`` process: one client's cases, one after the other,
    on its own cluster."""

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, CASES, "--serve", peer],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, bufsize=1)
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            ready = self._next_line(("READY",), START_TIMEOUT_S)
        except RunnerHung:
            ready = None
        if ready is None:
            self.kill()
            tail = self.stderr_tail()
            self.stop()
            raise RuntimeError(f"the {peer} runner did not start:\n{tail}")

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)                 # the process ended

    def _next_line(self, prefixes: Tuple[str, ...], timeout: float) -> Optional[str]:
        """The next line starting with one of ``prefixes``, None at the end of the
        output; RunnerHung after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise RunnerHung(f"nothing from the {self.peer} runner in {timeout} s "
                                 "(hung?)") from None
            if line is None or line.startswith(prefixes):
                return line

    def run(self, case: str) -> Outcome:
        """Case ``case``, within CASE_TIMEOUT_S (RunnerHung: it is not done by then)."""
        self.proc.stdin.write(case + "\n")
        self.proc.stdin.flush()
        line = self._next_line(("RESULT ", "FAILED "), CASE_TIMEOUT_S)
        outcome = Outcome()
        if line is None:
            outcome.settle(failure=f"the {self.peer} runner died:\n{self.stderr_tail()}")
            return outcome
        kind, name, seconds, payload = line.split(" ", 3)
        if name != case:
            raise RuntimeError(f"asked for {case}, the {self.peer} runner answered {line}")
        if kind == "RESULT":
            outcome.settle(result=json.loads(payload), seconds=float(seconds))
        else:
            outcome.settle(failure=json.loads(payload), seconds=float(seconds))
        return outcome

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()[-4000:]

    def stop(self) -> None:
        """End the process: at the end of its input, or killed if it does not end."""
        try:
            self.proc.stdin.close()
            self.proc.wait(20)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()
        self.stderr.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class Runs:
    """Cases, each run once with each client, in the background: a few runners per
    client (one for every CASES_PER_RUNNER cases of ``prefetch``, up to RUNNERS_PER_PEER,
    started one after the other as they get their first case) take them in the order
    asked, the longest of ``prefetch`` first. :meth:`result` asks for a case not asked for
    yet (one at a time: one runner per client is enough)."""

    def __init__(self, prefetch: Iterable[str] = ()) -> None:
        prefetch = sorted(prefetch, key=lambda case: case not in LONGEST_CASES)
        self.runners_per_peer = min(RUNNERS_PER_PEER,
                                    max(len(prefetch) // CASES_PER_RUNNER, 1))
        self.outcomes: Dict[Tuple[str, str], Outcome] = {}
        self.pending = {peer: queue.Queue() for peer in PEERS}
        #: held by the one runner of a client starting, so that they do not all start at
        #: once (each would start slower, and the first cases would wait for them all)
        self.starting = {peer: threading.Lock() for peer in PEERS}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._serve, args=(peer,), daemon=True)
                        for peer in PEERS for _ in range(self.runners_per_peer)]
        for thread in self.threads:
            thread.start()
        for case in prefetch:
            self._ask(case)

    def _ask(self, case: str) -> None:
        with self.lock:
            for peer in PEERS:
                if (case, peer) not in self.outcomes:
                    self.outcomes[case, peer] = Outcome()
                    self.pending[peer].put(case)

    def _next(self, peer: str, runner: Optional[Runner]) -> Tuple[Optional[str],
                                                                  Optional[Runner]]:
        """The next case for a runner of ``peer`` (None: no more), and the runner, started
        if there was none (None if it did not start: the case has failed)."""
        if runner is not None:
            return self.pending[peer].get(), runner
        with self.starting[peer]:
            case = self.pending[peer].get()
            if case is not None:
                try:
                    runner = Runner(peer)
                except Exception as exc:            # reported by the case's test
                    self.outcomes[case, peer].settle(failure=f"{case} with {peer}: {exc}")
            return case, runner

    def _serve(self, peer: str) -> None:
        runner: Optional[Runner] = None
        try:
            while True:
                case, runner = self._next(peer, runner)
                if case is None:
                    break
                if runner is None:
                    continue
                outcome = self.outcomes[case, peer]
                try:
                    done = runner.run(case)
                    outcome.settle(done.result, done.failure, done.seconds)
                except Exception as exc:            # reported by the case's test
                    outcome.settle(failure=f"{case} with {peer}: {exc}")
                if outcome.failure is not None:
                    # a fresh process and cluster for the next case
                    runner.kill()
                    runner.stop()
                    runner = None
        finally:
            if runner is not None:
                runner.stop()

    def result(self, case: str) -> Tuple[Outcome, Outcome]:
        """``(ours, librdkafka)``: case ``case`` with each client, once both are done."""
        self._ask(case)
        outcomes = [self.outcomes[case, peer] for peer in PEERS]
        for outcome in outcomes:
            outcome.done.wait()
        return outcomes[0], outcomes[1]

    def close(self) -> None:
        """Drop the cases not started; wait for those running and stop the runners."""
        for peer in PEERS:
            pending = self.pending[peer]
            while True:
                try:
                    case = pending.get_nowait()
                except queue.Empty:
                    break
                self.outcomes[case, peer].settle(failure="not run: the runs were closed")
            for _ in range(self.runners_per_peer):
                pending.put(None)
        for thread in self.threads:
            thread.join()
