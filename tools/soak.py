"""Soak runs: our producer and consumers against the multi-broker test cluster while a
seeded chaos thread moves leaders and coordinators, stops and starts brokers, cuts
connections, injects retriable errors and latency, and replaces group members; then the
delivery guarantees are checked on what the brokers hold.

    .venv/bin/python tools/soak.py group --seed 7 [--protocol consumer] [--static]
        [--arrow] [--compression zstd] [--timeout-ms 3000] [--acks 1 --no-idempotence]
        [--batches] [--threads 3] [--restarts] [--aio] [--meddle] [--sasl]
        [--grow 12] [--stall] [--auto-commit] [--slow]
    .venv/bin/python tools/soak.py eos --seed 7 [--protocol consumer] [--restarts] [--sasl]
        [--abort-rate 0.2] [--compression lz4] [--stall] [--downstream 2] [--arrow] [--slow]
    .venv/bin/python tools/soak.py spark --seed 7 [--restarts] [--aio] [--sasl]
    .venv/bin/python tools/soak.py share --seed 7 [--explicit [--threads 3]] [--restarts]
        [--stall] [--slow] [--sasl] [--members 3]

``group``: an idempotent producer writes ``--messages`` numbered messages (keyed) at a
steady rate over most of ``--seconds`` while a group of ``--members`` consumers reads
them, committing after each batch and in ``on_revoke``. With ``--aio`` the producer and
the members are the asyncio clients (kafka_client.aio), and a third of the members' reads
are cancelled after a random 10-300 ms (``asyncio.wait_for``), as applications do. The
members stop once the group has read and committed every message (what a cancelled read
took is committed only after a next read returned it). Checked afterwards: every
message got exactly one delivery report; every acknowledged message is in the log
(acks=all); with idempotence nothing is in the log twice and each key's messages are in
produced order; the group read every message in the log; its committed
offsets are the partitions' high watermarks; within each returned batch a partition's
offsets are consecutive; no member gets an offset twice while the partition stays
assigned to it.

``group --auto-commit``: the members commit nothing themselves, as confluent-kafka's
at-least-once recipe: ``enable.auto.commit`` every 200 ms with
``enable.auto.offset.store=false``, each batch's offsets stored with ``store_offsets()``
once it is processed (after a ``--stall``), the client committing them in the background
and as the partitions are revoked (with ``--meddle``, the meddlers' ``commit()`` calls
too); a shutdown still commits what is stored (and reads once more after a refusal)
before ``close()``. A batch's offsets are stored only
for the partitions that stayed assigned since it was read (another thread's poll may
have run a rebalance meanwhile). Checked as without it, and also: once the group has
read everything, the auto-commits alone bring its committed offsets to the high
watermarks within 15 s, before any member commits itself.

``group --grow N``: the chaos also adds a partition to the topic now and then, up to
``N`` (CreatePartitions); the clients refresh their metadata every 3 s to see them, and
each key's order is checked within each partition (a key moves when the topic grows).
``group --stall``: each member's processing of a batch, before its commit, now and then
(3-10 s after its first batch, then every 10-30 s) takes 0.5-3 s longer than its
max.poll.interval.ms (6 s): it leaves the group, loses its partitions and joins again.

``group --meddle``: the other methods called meanwhile from other threads. Each member
has a meddler thread calling, every 5-50 ms, one of ``position()``, ``assignment()``,
``committed()``, ``get_watermark_offsets()`` (asked or cached), ``list_topics()``,
``memberid()``, ``consumer_group_metadata()``, ``commit()`` (asynchronous or not) and
``pause()`` of one of its partitions (resumed 20-300 ms later, and before the member
stops); the producer is shared by three producing threads (each key's messages from one
of them) and a meddler calling ``poll(0)``, ``flush(0.05)``, ``len()`` and
``list_topics()``. Each meddler call is timed: one running 5 s past its timeout is a hang
(the threads' stacks are printed); an exception other than a KafkaException the chaos
explains (a retriable error, a rebalance, a timeout, nothing to commit, a
``list_topics()`` that found no usable connection) is a failure, as is such an error in
an asynchronous commit's result.

``eos``: consume-transform-produce with transactions (docs/transactions.md's loop) by
``--members`` processors sharing a group, each restarted now and then with its
``transactional.id``; the transaction and group coordinators move too. Checked: a
read_committed reader of the output sees each input exactly once; the committed input
offsets are the high watermarks. ``--abort-rate F``: the processors also abort a
fraction ``F`` of their transactions on purpose, after sending the offsets (then read
the batch again from the committed offsets, as on an error). ``--stall``: a processor's
batch, between its output and its offsets, now and then takes longer than
max.poll.interval.ms (as in ``group``): the offsets then go with a membership gone.
``--downstream N``: a ``read_committed`` group of ``N`` members (a group of its own,
committing after each batch and in ``on_revoke``, now and then one replaced by the chaos,
its coordinator moved too) reads the output while it is written, aborted transactions
and their markers among the records; every other member fetches a batch or two at a
time (``max.partition.fetch.bytes`` 512: transactions come in many answers); with
``--arrow`` they read with ``consume_arrow()``. Checked: it read every committed record
of the output and no other (an aborted one), and its committed offsets are the output's
high watermarks (past the last markers).

``spark`` (needs PySpark and Java): the producer as in ``group`` while two streaming
queries of the ``kafka_native`` data source on a local Spark read its topic, one into
Spark's file sink, one into another topic through the data source's writer, each now
and then stopped and started again on its checkpoint. Checked: the producer's checks;
the file sink holds every record exactly once; the other topic every one at least once.

``share``: the producer as in ``group`` while ``--members`` ShareConsumers of one share
group (KIP-932, docs/share-consumer.md; group configs: from the start of the log, the
delivery count limit 10, locks of 15 s) read its topic, implicit acknowledgement (each
poll() accepts the previous one's records) or with ``--explicit`` a mix of ACCEPT (85%),
RELEASE (10%) and REJECT (5%), by the polling thread or, with ``--threads N``, by N-1
worker threads while it commits; now and then commit_sync() or commit_async(), else the
acknowledgements ride on the next fetch. The chaos moves the leaders and the group's
coordinator (the test cluster's share coordinator too), and replaces members: stopped
and closed, or closed from the chaos thread in the middle of their calls. ``--stall``:
while the chaos lasts, processing now and then outlasts max.poll.interval.ms and the
locks (5 s then). Checked: the producer's checks; each record handed out is the log's;
every record in the log was handed to a member; the share-partition start offsets reach
the high watermarks (every record acknowledged or archived); delivery counts within 1-10,
and going up for each member's deliveries of a record; no record is delivered again (a
higher delivery count than the member's last one) once an ACCEPT or REJECT of it was
answered applied (the answers name offsets, not deliveries: an answer while the member
had acknowledged two deliveries of the record counts only if both were ACCEPT or REJECT);
every failed acknowledgement has an error the chaos explains; every acknowledge() of the
last poll()'s records was taken. There is no asyncio share consumer (no ``--aio``).

``--slow`` (group, eos, share): the chaos's latency on a broker's answers is 0.5-2.5 s instead
of 0.02-0.3 s, and every client's request timeout (``socket.timeout.ms``) 1.5 s: the
clients give up on requests a broker has applied or will apply (a produce, a commit, a
transaction's step), close the connection and send them again, and a slow broker is
unusable for as long as its latency lasts, 1-6 s (it ends on its own: a churn's wait
for a member stuck on the slow coordinator must not hold the chaos, and the latency
with it). Checked as without it.

``--sasl`` (any mode): the brokers require SASL (SCRAM-SHA-512) with one-second
sessions, so every client connection authenticates again about once a second (KIP-368)
in the middle of the chaos; the run also checks that they did.

Exit status 0 when every check holds. Each run prints what the chaos did and a summary;
``--seed`` makes the chaos's choices repeatable (not the timing). See docs/reliability.md.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import os
import random
import shutil
import struct
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from queue import Queue
from typing import (Any, Callable, Deque, Dict, Iterable, List, Optional, Sequence, Set,
                    Tuple)

from kafka_client import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    AcknowledgeType,
    Consumer,
    IllegalStateException,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from kafka_client.aio import AIOConsumer, AIOProducer
from kafka_client.testing import Cluster

BROKERS = (1, 2, 3)
#: A commit refused because the group rebalanced meanwhile (the member rejoins), or the
#: member's assignment was lost (past max.poll.interval.ms) and its poll not run on_lost.
REBALANCED = {KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
              KafkaError.REBALANCE_IN_PROGRESS, KafkaError.STALE_MEMBER_EPOCH,
              KafkaError.FENCED_MEMBER_EPOCH, KafkaError._ASSIGNMENT_LOST}
#: What a call may fail with in the chaos besides a retriable error.
EXPECTED = REBALANCED | {KafkaError._TIMED_OUT, KafkaError._NO_OFFSET}
#: The calls whose _TRANSPORT the chaos explains: list_topics() raises it (as librdkafka's
#: rd_kafka_metadata(), not retriable) when no connection was usable when its timeout ran
#: out, the last one closed by a broker (a cut; with --sasl, connections re-authenticate
#: once a second, not usable meanwhile, and a request the latency held past the session's
#: end is closed on); _TIMED_OUT is the same timeout with a connection up at its end.
TRANSPORT_EXPLAINED = {"Consumer.list_topics", "Producer.list_topics"}
#: ``--grow``: the clients' topic.metadata.refresh.interval.ms (new partitions seen soon)
GROWN_SEEN_MS = 3000
#: ``--stall``: the members' max.poll.interval.ms (classic: >= session.timeout.ms)
STALLED_POLL_INTERVAL_MS = 6000
#: How long past its own timeout a call may take before it counts as a hang.
GRACE = 5.0
#: The threads sharing the producer with --meddle (each key's messages from one of them).
PRODUCING_THREADS = 3
PAD = b"x" * 92
#: ``--sasl``: the user every client logs in as, and the brokers' session lifetime (each
#: connection re-authenticates about once a second, KIP-368)
SASL_USER, SASL_PASSWORD, SASL_MECHANISM = "soak", "soak-secret", "SCRAM-SHA-512"
SASL_SESSION_MS = 1000
#: what every client of the run adds to bootstrap.servers (set by main())
SECURITY: Dict[str, str] = {}
#: the seconds of latency the chaos puts on a broker's answers (a range); ``--slow``: past
#: the clients' request timeout (socket.timeout.ms ``SLOW_REQUEST_TIMEOUT_MS``)
LATENCY, SLOW_LATENCY = (0.02, 0.3), (0.5, 2.5)
#: ``--slow``: how long each such latency lasts at most (seconds, a range)
SLOW_LATENCY_LASTS = (1.0, 6.0)
SLOW_REQUEST_TIMEOUT_MS = 1500
#: ``--slow``: what every client of the run adds to its configuration (set by main())
TIMEOUTS: Dict[str, int] = {}
_T0 = time.monotonic()


def note(*parts: object) -> None:
    print(f"{time.monotonic() - _T0:7.2f} " + " ".join(str(p) for p in parts), flush=True)


def number(value: bytes) -> int:
    return struct.unpack(">Q", value[:8])[0]


def queue(producer: Producer, send: Callable[[], object]) -> None:
    """``send()`` (a produce call), again after a poll while the producer is full."""
    while True:
        try:
            send()
            return
        except BufferError:
            producer.poll(0.05)


def pace(producer: Producer, sent: int, rate: float, start: float) -> None:
    """Serve delivery reports, then wait until ``sent`` messages are due at ``rate`` a
    second since ``start``."""
    producer.poll(0)
    ahead = sent / rate - (time.monotonic() - start)
    if ahead > 0:
        time.sleep(ahead)


class Chaos(threading.Thread):
    """Applies one fault every 0.2-0.8 s (seeded choices) until stopped; at most one
    broker down at a time. ``errors`` are the (API, error) pairs it may inject;
    ``coordinators`` the coordinator keys it may move (``move_coordinator`` keywords);
    ``churn()`` replaces a member and returns what it did."""

    def __init__(self, cluster: Cluster, seed: int, topics: Sequence[Tuple[str, int]],
                 errors: Sequence[Tuple[str, str]], coordinators: Sequence[Dict[str, str]],
                 churn: Callable[[random.Random], str], restarts: bool = False,
                 grow_to: int = 0, latency: Tuple[float, float] = LATENCY) -> None:
        super().__init__(name="chaos", daemon=True)
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.topics = list(topics)
        self.grow_to = grow_to
        self.errors = errors
        self.coordinators = coordinators
        self.churn = churn
        self.restarts = restarts
        self.latency = latency
        self.stop = threading.Event()
        self.down: Optional[int] = None
        self.slow: Optional[int] = None
        self.slow_lock = threading.Lock()   # --slow: the latency ends on a timer too
        self.slow_since = 0.0
        self.counts: Dict[str, int] = collections.Counter()
        self.stopped_at = 0.0

    def run(self) -> None:
        kinds = ["leader", "leader", "broker", "coordinator", "cut", "inject", "latency",
                 "evict", "churn"]
        if self.restarts:   # an option, so that the seeds without it choose as before
            kinds += ["restart", "restart"]
        if self.grow_to:
            kinds += ["grow"]
        while not self.stop.wait(self.rng.uniform(0.2, 0.8)):
            kind = self.rng.choice(kinds)
            try:
                note("chaos:", kind, getattr(self, "_" + kind)())
                self.counts[kind] += 1
            except Exception as exc:  # a fault the cluster refuses now (no other ISR...)
                note("chaos:", kind, "not applied:", repr(exc)[:120])
        if self.down is not None:
            self.cluster.start_broker(self.down)
        self.cluster.clear_faults()
        self.stopped_at = time.monotonic()
        note("chaos: stopped", dict(self.counts))

    def _leader(self) -> str:
        topic, partitions = self.rng.choice(self.topics)
        p = self.rng.randrange(partitions)
        return f"{topic}[{p}] -> {self.cluster.move_leader(topic, p)}"

    def _broker(self) -> str:
        if self.down is None:
            self.down = self.rng.choice(BROKERS)
            self.cluster.stop_broker(self.down)
            return f"stopped {self.down}"
        self.cluster.start_broker(self.down)
        started, self.down = self.down, None
        return f"started {started}"

    def _restart(self) -> str:
        """A broker stopped and started at once: its logs reloaded from disk."""
        if self.down is not None:
            return "skipped (a broker is down)"
        b = self.rng.choice(BROKERS)
        self.cluster.restart_broker(b)
        return f"restarted {b}"

    def _grow(self) -> str:
        """One more partition for the first topic, up to ``grow_to`` (CreatePartitions)."""
        topic, partitions = self.topics[0]
        if partitions >= self.grow_to:
            return f"{topic}: already {partitions} partitions"
        self.cluster.create_partitions(topic, partitions + 1)
        self.topics[0] = (topic, partitions + 1)
        return f"{topic}: {partitions + 1} partitions"

    def _coordinator(self) -> str:
        key = self.rng.choice(self.coordinators)
        to = self.rng.choice([b for b in BROKERS if b != self.down])
        self.cluster.move_coordinator(to, **key)
        return f"{key} -> {to}"

    def _cut(self) -> str:
        b = self.rng.choice(BROKERS)
        return f"broker {b}: {self.cluster.cut_connections(b)} connections"

    def _inject(self) -> str:
        api, error = self.rng.choice(self.errors)
        self.cluster.inject_errors(api, [error] * self.rng.randint(1, 3))
        return f"{api} {error}"

    def _latency(self) -> str:
        with self.slow_lock:
            if self.slow is None:
                self.slow = self.rng.choice(BROKERS)
                seconds = self.rng.uniform(*self.latency)
                self.cluster.set_latency(seconds, broker=self.slow)
                if self.latency != SLOW_LATENCY:
                    return f"broker {self.slow}: {seconds:.2f} s"
                # --slow: it ends on its own, also while the chaos waits (a churn waits
                # for a member that waits for the slow broker)
                lasts = self.rng.uniform(*SLOW_LATENCY_LASTS)
                self.slow_since = time.monotonic()   # this latency's, not a later one's
                ends = threading.Timer(lasts, self._latency_ends, (self.slow_since,))
                ends.daemon = True
                ends.start()
                return f"broker {self.slow}: {seconds:.2f} s for {lasts:.1f} s"
            self.cluster.set_latency(0, broker=self.slow)
            slow, self.slow = self.slow, None
            return f"broker {slow}: off"

    def _latency_ends(self, since: float) -> None:
        with self.slow_lock:
            if self.slow is not None and self.slow_since == since and not self.stop.is_set():
                self.cluster.set_latency(0, broker=self.slow)
                note("chaos: latency broker", self.slow, "ended")
                self.slow = None

    def _evict(self) -> str:
        return f"{self.cluster.evict_fetch_sessions()} fetch sessions"

    def _churn(self) -> str:
        return self.churn(self.rng)


def stall_due(client: Any, stall: bool) -> float:
    """``--stall``: how long ``client``'s (a group member's, a processor's) next processing
    takes past max.poll.interval.ms (0: not now; the first 3-10 s after its first batch,
    then one every 10-30 s); ``client`` has ``next_stall``, ``rng`` and ``stop``."""
    if not stall:
        return 0.0
    now = time.monotonic()
    if client.next_stall is None:
        client.next_stall = now + client.rng.uniform(3, 10)
    if now < client.next_stall or client.stop.is_set():
        return 0.0
    client.next_stall = now + client.rng.uniform(10, 30)
    return STALLED_POLL_INTERVAL_MS / 1000 + client.rng.uniform(0.5, 3.0)


def latency(args: argparse.Namespace) -> Tuple[float, float]:
    """The range of the chaos's latency faults (``--slow``: past the request timeout)."""
    return SLOW_LATENCY if args.slow else LATENCY


def connect(bootstrap: str) -> Dict[str, Any]:
    """A client configuration's connection part: the brokers, ``--sasl``'s login and
    ``--slow``'s request timeout."""
    return {"bootstrap.servers": bootstrap, **SECURITY, **TIMEOUTS}


def read_all(cluster: Cluster, topic: str, partitions: int,
             isolation: str = "read_uncommitted") -> List[Message]:
    """Every record of ``topic``, read to the end of each partition."""
    reader = Consumer({**connect(cluster.bootstrap_servers),
                       "enable.partition.eof": True, "isolation.level": isolation})
    reader.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    at_end: Set[int] = set()
    out: List[Message] = []
    deadline = time.monotonic() + 60
    while len(at_end) < partitions and time.monotonic() < deadline:
        for m in reader.consume(10_000, 1.0):
            if m.error() is None:
                out.append(m)
                at_end.discard(m.partition())
            else:
                at_end.add(m.partition())
    reader.close()
    return out


def note_partitions(cluster: Cluster, topics: Sequence[str], who: str) -> None:
    """What the brokers hold of ``topics`` now, for the diagnosis of a failure that shows
    only later (a run's state is gone once it ends)."""
    for topic in topics:
        for ps in cluster.describe_topic(topic).partitions:
            note(f"{who}: {topic}[{ps.partition}] leader {ps.leader} epoch "
                 f"{ps.leader_epoch} isr {ps.isr} hw {ps.high_watermark} logs "
                 f"{ps.replica_logs}")


TRANSACTION_APIS = ("InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn",
                    "TxnOffsetCommit", "EndTxn", "FindCoordinator")


def note_transaction_requests(cluster: Cluster, client_id: str) -> None:
    """The transaction requests ``client_id`` sent, with their answers' errors: how a
    processor came to be fenced or to hold a transaction open (times on the run's clock)."""
    shift = time.time() - (time.monotonic() - _T0)   # wall clock at the run's start
    for e in cluster.request_log():
        if e.client_id == client_id and e.api in TRANSACTION_APIS:
            errors = ",".join(sorted(set(e.errors))) or "-"
            injected = f" injected {e.injected_error}" if e.injected_error else ""
            note(f"{client_id}: at {e.time - shift:7.2f} broker {e.broker} {e.api} "
                 f"v{e.version} -> {errors}{injected}")


def committed_offsets(cluster: Cluster, group: str, topic: str,
                      partitions: int) -> Dict[int, int]:
    c = Consumer({**connect(cluster.bootstrap_servers), "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], 30)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


def high_watermarks(cluster: Cluster, topic: str) -> Dict[int, int]:
    return {p.partition: p.high_watermark for p in cluster.describe_topic(topic).partitions}


class Checks:
    def __init__(self) -> None:
        self.failed: List[str] = []

    def expect(self, ok: bool, what: str) -> None:
        note(("ok: " if ok else "FAILED: ") + what)
        if not ok:
            self.failed.append(what)


def expected(err: KafkaError) -> bool:
    """Whether the chaos explains ``err``: a retriable error, a rebalance, a timeout."""
    return err.retriable() or err.code() in EXPECTED


def stacks(first: int) -> str:
    """Every thread's stack, thread ``first``'s first (a call that hangs)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = sorted(sys._current_frames().items(), key=lambda item: item[0] != first)
    return "\n".join(f"--- thread {names.get(ident, ident)}:\n"
                     + "".join(traceback.format_stack(frame)) for ident, frame in frames)


class Meddling:
    """``--meddle``: the meddlers' calls, timed, and what went wrong in them. A watchdog
    prints the stacks of a call running ``GRACE`` seconds past its timeout."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.durations: Dict[str, List[float]] = collections.defaultdict(list)
        # thread: the call it runs, its start, its limit, the thread's name
        self.running: Dict[int, Tuple[str, float, float, str]] = {}
        self.hung: Set[Tuple[int, float]] = set()   # (thread, start) of calls reported
        self.hangs: List[str] = []
        self.failures: List[str] = []
        self.errors: Dict[str, int] = collections.Counter()   # "call: error" the chaos explains
        self.overruns: Dict[str, float] = {}   # call: the most it took past its timeout
        self.stop = threading.Event()
        threading.Thread(target=self._watch, name="watchdog", daemon=True).start()

    def call(self, what: str, timeout: float, fn: Callable[..., Any], *args: Any,
             **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, timed; None when it raised (an error the chaos does
        not explain is recorded)."""
        thread, start = threading.get_ident(), time.monotonic()
        with self.lock:
            self.running[thread] = (what, start, start + timeout + GRACE,
                                    threading.current_thread().name)
        try:
            return fn(*args, **kwargs)
        except KafkaException as exc:
            err = exc.args[0]
            if not isinstance(err, KafkaError) or not (expected(err) or (
                    err.code() == KafkaError._TRANSPORT and what in TRANSPORT_EXPLAINED)):
                self.failed(what)
            else:
                with self.lock:
                    self.errors[f"{what}: {exc.args[0].name()}"] += 1
        except Exception:
            self.failed(what)
        finally:
            took = time.monotonic() - start
            with self.lock:
                del self.running[thread]
                self.durations[what].append(took)
                if took > timeout + 0.5:
                    self.overruns[what] = max(self.overruns.get(what, 0), took - timeout)
                late = took > timeout + GRACE and (thread, start) not in self.hung
            if late:   # past its limit between two looks of the watchdog
                self.hangs.append(f"{what} on {threading.current_thread().name} took "
                                  f"{took:.1f} s (timeout {timeout:g} s)")
        return None

    def failed(self, what: str) -> None:
        # noted at once too: its time, against the chaos' notes
        note("meddle: failed:", what, "on", threading.current_thread().name,
             repr(sys.exc_info()[1])[:200])
        self.failures.append(f"{what} on {threading.current_thread().name}: "
                             + traceback.format_exc())

    def on_commit(self, err: Optional[KafkaError], partitions: List[TopicPartition]) -> None:
        """The consumers' ``on_commit``: an asynchronous commit's result too."""
        for e in [err] + [tp.error for tp in partitions or []]:
            if e is not None and not expected(e):
                self.failures.append(f"commit result on {threading.current_thread().name}:"
                                     f" {e!r} {partitions}")

    def _watch(self) -> None:
        while not self.stop.wait(0.5):
            now = time.monotonic()
            with self.lock:
                late = [(thread, call) for thread, call in self.running.items()
                        if now > call[2] and (thread, call[1]) not in self.hung]
                self.hung.update((thread, call[1]) for thread, call in late)
            for thread, (what, start, limit, name) in late:
                self.hangs.append(f"{what} on {name} still running after {now - start:.1f} s"
                                  f" (limit {limit - start:g} s); the threads' stacks:\n"
                                  + stacks(thread))
                note("meddle: HANG:", what, "on", name, "running for", round(now - start, 1),
                     "s")

    def check(self, check: Checks) -> None:
        self.stop.set()
        with self.lock:
            self.hangs += [f"{what} on {name} never returned"
                           for what, _, _, name in self.running.values()]
        for what, took in sorted(self.durations.items()):
            took.sort()
            note(f"meddle: {what}: {len(took)} calls, median {took[len(took) // 2]:.3f} s,"
                 f" 99% {took[len(took) * 99 // 100]:.3f} s, max {took[-1]:.3f} s")
        note("meddle: errors the chaos explains:", dict(self.errors))
        note("meddle: the most seconds past the timeout (over 0.5 s, under the limit of",
             GRACE, "s):", {what: round(took, 1) for what, took in self.overruns.items()})
        for text in self.hangs + self.failures:
            note("meddle:", text)
        check.expect(not self.hangs, f"no meddler call hung ({len(self.hangs)} did)")
        check.expect(not self.failures, f"no meddler call failed unexpectedly "
                     f"({len(self.failures)} did)")


class Meddler(threading.Thread):
    """``--meddle``: calls one of :meth:`calls` (seeded choice) every 5-50 ms until
    ``stop``, each timed by ``meddling``."""

    def __init__(self, name: str, meddling: Meddling, rng: random.Random,
                 stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.meddling = meddling
        self.rng = rng
        self.stop = stop

    def calls(self) -> List[Callable[[], object]]:
        raise NotImplementedError

    def run(self) -> None:
        try:
            while not self.stop.wait(self.rng.uniform(0.005, 0.05)):
                self.rng.choice(self.calls())()
        except Exception:   # the probe's own fault
            self.meddling.failed("meddler")
        finally:
            self.finish()

    def finish(self) -> None:
        """Before the client is used on without the meddler."""

    def timeout(self) -> float:
        return round(self.rng.uniform(0.1, 3.0), 2)


class ConsumerMeddler(Meddler):
    """Meddles with a group member's Consumer; pauses one partition at a time, for
    20-300 ms (only calls that do not wait meanwhile), and resumes it when done."""

    def __init__(self, name: str, meddling: Meddling, rng: random.Random,
                 stop: threading.Event, consumer: Consumer, topic: str,
                 partitions: int) -> None:
        super().__init__(name, meddling, rng, stop)
        self.consumer = consumer
        self.topic = topic
        self.partitions = partitions
        self.paused: Optional[TopicPartition] = None
        self.resume_at = 0.0
        self.quick = [self._position, self._assignment, self._memberid, self._metadata,
                      self._cached_watermarks, self._commit_asynchronously]
        self.waiting = [self._committed, self._watermarks, self._list_topics, self._commit,
                        self._pause]

    def calls(self) -> List[Callable[[], object]]:
        if self.paused is None:
            return self.quick + self.waiting
        return [self._resume] if time.monotonic() >= self.resume_at else self.quick

    def _call(self, what: str, timeout: float, fn: Callable[..., Any], *args: Any,
              **kwargs: Any) -> Any:
        return self.meddling.call("Consumer." + what, timeout, fn, *args, **kwargs)

    def _assigned(self) -> List[TopicPartition]:
        return self._call("assignment", 0, self.consumer.assignment) or []

    def _position(self) -> object:
        return self._call("position", 0, self.consumer.position, self._assigned())

    def _assignment(self) -> object:
        return self._assigned()

    def _memberid(self) -> object:
        return self._call("memberid", 0, self.consumer.memberid)

    def _metadata(self) -> object:
        return self._call("consumer_group_metadata", 0, self.consumer.consumer_group_metadata)

    def _partition(self) -> TopicPartition:
        """One of the topic's partitions, assigned here or not."""
        return TopicPartition(self.topic, self.rng.randrange(self.partitions))

    def _cached_watermarks(self) -> object:
        return self._call("get_watermark_offsets(cached)", 0,
                          self.consumer.get_watermark_offsets, self._partition(), 1, True)

    def _watermarks(self) -> object:
        timeout = self.timeout()
        return self._call("get_watermark_offsets", timeout,
                          self.consumer.get_watermark_offsets, self._partition(), timeout)

    def _committed(self) -> object:
        timeout = self.timeout()
        return self._call("committed", timeout, self.consumer.committed, self._assigned(),
                          timeout)

    def _list_topics(self) -> object:
        timeout = self.timeout()
        return self._call("list_topics", timeout, self.consumer.list_topics,
                          self.rng.choice([None, self.topic]), timeout)

    def _commit_asynchronously(self) -> object:
        return self._call("commit(asynchronous)", 0, self.consumer.commit)

    def _commit(self) -> object:
        # No timeout of its own: socket.timeout.ms (60 s) bounds it.
        return self._call("commit", 60, self.consumer.commit, asynchronous=False)

    def _pause(self) -> object:
        assigned = self._assigned()
        if assigned:
            self.paused = self.rng.choice(assigned)
            self.resume_at = time.monotonic() + self.rng.uniform(0.02, 0.3)
            self._call("pause", 0, self.consumer.pause, [self.paused])
        return None

    def _resume(self) -> object:
        # It may have been revoked meanwhile: resume() leaves such a partition alone.
        paused, self.paused = self.paused, None
        return self._call("resume", 0, self.consumer.resume, [paused])

    def finish(self) -> None:
        if self.paused is not None:
            self._resume()


class ProducerMeddler(Meddler):
    """Meddles with the shared Producer."""

    def __init__(self, meddling: Meddling, rng: random.Random, producer: Producer,
                 topic: str) -> None:
        super().__init__("producer-meddler", meddling, rng, threading.Event())
        self.producer = producer
        self.topic = topic

    def calls(self) -> List[Callable[[], object]]:
        return [self._poll, self._flush, self._len, self._list_topics]

    def _poll(self) -> object:
        return self.meddling.call("Producer.poll", 0, self.producer.poll, 0)

    def _flush(self) -> object:
        return self.meddling.call("Producer.flush", 0.05, self.producer.flush, 0.05)

    def _len(self) -> object:
        return self.meddling.call("Producer.__len__", 0, len, self.producer)

    def _list_topics(self) -> object:
        timeout = self.timeout()
        return self.meddling.call("Producer.list_topics", timeout, self.producer.list_topics,
                                  self.rng.choice([None, self.topic]), timeout)


class NumberedProducer(threading.Thread):
    """Writes ``args.messages`` numbered messages (keys: the number modulo 97) to
    ``topic`` at a steady rate over 60% of ``args.seconds``, with our Producer
    (``--batches``: ``produce_batch()`` of 1,000) or our AIOProducer (``--aio``), and
    counts the delivery reports; :meth:`check` checks them and the log. With
    ``meddling`` (``--meddle``) ``PRODUCING_THREADS`` threads share the Producer, each
    writing the messages of its own keys, while a :class:`ProducerMeddler` meddles."""

    def __init__(self, args: argparse.Namespace, bootstrap: str, topic: str,
                 crashes: List[str], meddling: Optional[Meddling] = None) -> None:
        super().__init__(name="producer", daemon=True)
        self.args = args
        self.topic = topic
        self.crashes = crashes
        self.meddling = meddling
        self.conf = {**connect(bootstrap), "enable.idempotence": args.idempotence,
                     "acks": args.acks, "linger.ms": 5, "compression.type": args.compression,
                     "message.timeout.ms": args.timeout_ms}
        if args.grow:   # the partitions the chaos adds are written soon
            self.conf["topic.metadata.refresh.interval.ms"] = GROWN_SEEN_MS
        self.rate = args.messages / (args.seconds * 0.6)
        self.lock = threading.Lock()   # the reports may come to several threads
        self.reports: Dict[int, int] = collections.Counter()
        self.failures: Dict[str, int] = collections.Counter()
        self.acknowledged: Set[int] = set()
        self.produced = threading.Event()

    def run(self) -> None:
        try:
            if self.args.aio:
                asyncio.run(self._produce_aio())
            else:
                self._produce()
            self.produced.set()
        except Exception:
            self.crashes.append("producer: " + traceback.format_exc())

    def _report(self, n: int, err: Optional[KafkaError]) -> None:
        with self.lock:
            self.reports[n] += 1
            if err is None:
                self.acknowledged.add(n)
            else:
                self.failures[err.name()] += 1

    def _produce(self) -> None:
        p = Producer(dict(self.conf, on_delivery=lambda err, msg: self._report(
            number(msg.value()), err)))
        start = time.monotonic()
        shares = PRODUCING_THREADS if self.meddling is not None else 1
        helpers = [threading.Thread(target=self._produce_helper, args=(p, share, shares, start),
                                    name=f"producer-{share}", daemon=True)
                   for share in range(1, shares)]
        meddler = None
        if self.meddling is not None:
            meddler = ProducerMeddler(self.meddling, random.Random(f"{self.args.seed}-producer"),
                                      p, self.topic)
            meddler.start()
        try:
            for h in helpers:
                h.start()
            self._produce_share(p, 0, shares, start)
            for h in helpers:
                h.join()
            note("producer: all produced; flush left", p.flush(300))
        finally:
            if meddler is not None:
                meddler.stop.set()
                meddler.join()
            p.close()

    def _produce_share(self, p: Producer, share: int, shares: int, start: float) -> None:
        """The messages whose key (the number modulo 97) is ``share`` modulo ``shares``:
        each key's messages in order from one thread."""
        args, topic = self.args, self.topic
        step = 1000 if args.batches else 1
        for first in range(0, args.messages, step):
            numbers = [n for n in range(first, min(first + step, args.messages))
                       if n % 97 % shares == share]
            if numbers:
                values = [struct.pack(">Q", n) + PAD for n in numbers]
                keys = [b"%d" % (n % 97) for n in numbers]
                if args.batches:   # the columnar form: all queued or none
                    queue(p, lambda: p.produce_batch(topic, values, keys=keys))
                else:
                    queue(p, lambda: p.produce(topic, values[0], key=keys[0]))
            if first % 1000 == 0:
                pace(p, first, self.rate, start)

    def _produce_helper(self, p: Producer, share: int, shares: int, start: float) -> None:
        try:
            self._produce_share(p, share, shares, start)
        except Exception:
            self.crashes.append(f"producer-{share}: " + traceback.format_exc())

    def _on_future(self, n: int, future: "asyncio.Future[Message]") -> None:
        # The asyncio producer's report: the delivered message, or its error raised.
        exc = future.exception()
        if exc is None:
            if number(future.result().value()) != n:
                self.crashes.append(f"producer: the future of message {n} resolved to "
                                    f"message {number(future.result().value())}")
            self._report(n, None)
        elif isinstance(exc, KafkaException):
            self._report(n, exc.args[0])
        else:
            self.crashes.append(f"producer: the future of message {n} raised {exc!r}")

    async def _produce_aio(self) -> None:
        p = AIOProducer(self.conf)
        start = time.monotonic()
        try:
            for n in range(self.args.messages):
                # produce() waits for room when the producer is full, as BufferError would
                future = await p.produce(self.topic, struct.pack(">Q", n) + PAD,
                                         key=b"%d" % (n % 97))
                future.add_done_callback(lambda f, n=n: self._on_future(n, f))
                if n % 1000 == 0:
                    ahead = n / self.rate - (time.monotonic() - start)
                    if ahead > 0:
                        await asyncio.sleep(ahead)
            note("producer: all produced; flush left", await p.flush(300))
            await asyncio.sleep(0)    # the futures' done-callbacks run
        finally:
            await p.close()

    def check(self, check: Checks, records: List[Message]) -> None:
        """The producer's checks, ``records`` being the topic's whole log."""
        args = self.args
        check.expect(self.produced.is_set(), "the producer finished")
        check.expect(len(self.reports) == args.messages and set(self.reports.values()) == {1},
                     f"one delivery report per message ({len(self.reports)} messages "
                     f"reported; errors {dict(self.failures)})")
        numbers = [number(m.value()) for m in records]
        if args.acks in ("all", "-1"):   # acks=1 may lose what the leader alone had
            lost = self.acknowledged - set(numbers)
            check.expect(not lost,
                         f"every acknowledged message is in the log ({len(lost)} not)")
        if args.idempotence:
            check.expect(len(numbers) == len(set(numbers)), f"nothing twice in the log "
                         f"({len(numbers) - len(set(numbers))} twice)")
            # --grow: a key's messages go to another partition once the topic grows;
            # the order holds within each partition
            last: Dict[Tuple[int, bytes], int] = {}
            disordered = 0
            for m in records:
                n = number(m.value())
                where = (m.partition() if args.grow else 0, m.key())
                if last.get(where, -1) > n:
                    disordered += 1
                last[where] = n
            check.expect(disordered == 0, f"each key's messages in order ({disordered} not)")


# -- group ---------------------------------------------------------------------------------
Row = Tuple[str, int, int, int]   # member, partition, offset, number


@dataclass
class Read:
    """A member's read: its rows, and how often each partition had been reassigned to
    the member when it returned (``--auto-commit`` stores the offsets of the partitions
    still assigned since). When it returned, not when it began: a partition assigned by
    the read's own poll has its messages returned by the same call, which are the new
    assignment's (a call drops what it held of a partition revoked meanwhile); not stored,
    a partition assigned late has nothing more to read, and its offset never moves."""
    rows: List[Row]
    changes: Dict[int, int]


def run_group(args: argparse.Namespace, cluster: Cluster) -> Checks:
    topic, group, partitions = "soak", "soak-group", args.partitions
    cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    boot = cluster.bootstrap_servers
    consumed: List[Row] = []
    lock = threading.Lock()
    crashes: List[str] = []
    meddling = Meddling() if args.meddle else None
    # Batches in which a partition's offsets are not consecutive, offsets a member got
    # twice while the partition stayed assigned to it (a pause must not repeat any).
    read_faults: Dict[str, int] = collections.Counter()
    # --auto-commit: store_offsets() refused (none of the batch's partitions assigned any
    # more: a member past max.poll.interval.ms), by error
    store_refused: Dict[str, int] = collections.Counter()
    # --auto-commit: (member, partition): the end of the rows not stored, the partition
    # reassigned since their read returned
    not_stored: Dict[Tuple[str, int], int] = {}

    class Member(threading.Thread):
        made = 0

        def __init__(self, slot: int) -> None:
            Member.made += 1
            super().__init__(name=f"m{Member.made}", daemon=True)
            self.slot = slot
            self.stop = threading.Event()
            self.assigned: List[int] = []    # as last seen, for the catch-up notes
            self.final_deadline: Optional[float] = None
            self.next_stall: Optional[float] = None   # --stall: see stall_due()
            self.rng = random.Random(f"{args.seed}-{self.name}")
            self.changes: Dict[int, int] = collections.Counter()   # partition: reassignments
            # (partition, its reassignments): the offsets returned since
            self.returned: Dict[Tuple[int, int], Set[int]] = collections.defaultdict(set)
            # Its readers got messages since its last commit (its other threads or
            # coroutines too: their last ones are committed without waiting for a read
            # of its own, which may bring nothing more)
            self.read_since_commit = False
            # --auto-commit: (partition, its reassignments): the offset stored
            self.stored_to: Dict[Tuple[int, int], int] = {}

        def conf(self) -> Dict[str, object]:
            conf: Dict[str, object] = {
                **connect(boot), "group.id": group, "client.id": self.name,
                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "group.protocol": args.protocol}
            if args.static:
                conf["group.instance.id"] = f"static-{self.slot}"
            if args.protocol == "classic":
                conf.update({"partition.assignment.strategy": args.strategy,
                             "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
            if meddling is not None:
                conf["on_commit"] = meddling.on_commit
            if args.grow:   # the group notices the partitions the chaos adds
                conf["topic.metadata.refresh.interval.ms"] = GROWN_SEEN_MS
            if args.stall:
                conf["max.poll.interval.ms"] = STALLED_POLL_INTERVAL_MS
            if args.auto_commit:
                conf.update({"enable.auto.commit": True, "auto.commit.interval.ms": 200,
                             "enable.auto.offset.store": False})
            return conf

        def _stall_due(self) -> float:
            return stall_due(self, args.stall)

        def _changed(self, c: object, partitions: List[TopicPartition]) -> None:
            """on_assign, on_revoke, on_lost: the partitions may be read again."""
            with lock:
                for tp in partitions:
                    self.changes[tp.partition] += 1

        def _revoked(self, c: Consumer, partitions: List[TopicPartition]) -> None:
            """on_revoke: what the member's readers got is committed before the
            partitions go, as applications committing by hand do. The member commits
            at its own loop's turns only: what its other readers got since would go
            back to the group uncommitted, and at the end of a run (a member replaced
            just before) its next owner, stopping, would not read it again."""
            self._changed(c, partitions)
            if args.auto_commit:   # the client commits what is stored
                return
            try:
                c.commit(asynchronous=False)
            except KafkaException as exc:
                self._revoke_commit_failed(exc)

        async def _revoked_aio(self, c: AIOConsumer,
                               partitions: List[TopicPartition]) -> None:
            self._changed(c, partitions)
            if args.auto_commit:
                return
            try:
                await c.commit(asynchronous=False)
            except KafkaException as exc:
                self._revoke_commit_failed(exc)

        def _revoke_commit_failed(self, exc: KafkaException) -> None:
            if exc.args[0].code() != KafkaError._NO_OFFSET:   # nothing read since
                note(self.name, "commit on revoke failed:", exc.args[0].name())

        def run(self) -> None:
            if args.aio:
                try:
                    asyncio.run(self._run_aio())
                except Exception:
                    crashes.append(f"{self.name}: " + traceback.format_exc())
                return
            try:
                c = Consumer(self.conf())
                c.subscribe([topic], on_assign=self._changed, on_revoke=self._revoked,
                            on_lost=self._changed)
                # More threads read the same consumer (each message to one of them); this
                # one also commits what has been returned to any of them.
                helpers = [threading.Thread(target=self._read_only, args=(c,), daemon=True)
                           for _ in range(args.threads - 1)]
                if meddling is not None:   # it resumes what it paused before it ends
                    helpers.append(ConsumerMeddler(f"{self.name}-meddler", meddling, self.rng,
                                                   self.stop, c, topic, partitions))
                for h in helpers:
                    h.start()
                while not self.stop.is_set():
                    read = self._read(c)
                    self.assigned = sorted(tp.partition for tp in c.assignment())
                    self._keep(read.rows)
                    if not self.read_since_commit:
                        continue
                    stall = self._stall_due() if read.rows else 0.0
                    if stall:   # slow processing: the member is out of the group after it
                        note(self.name, f"stalls {stall:.1f} s")
                        self.stop.wait(stall)
                    self.read_since_commit = False
                    if args.auto_commit:
                        self._store(c, read)
                        continue
                    try:
                        c.commit(asynchronous=False)
                    except KafkaException as exc:   # a rebalance, a coordinator move
                        note(self.name, "commit failed:", exc.args[0].name())
                for h in helpers:
                    h.join()
                while True:
                    try:
                        c.commit(asynchronous=False)
                        err = None
                    except KafkaException as exc:
                        err = exc.args[0]
                    if self._final_commit(err):
                        break
                    self._processed(c, self._read(c))
                c.close()
            except Exception:
                crashes.append(f"{self.name}: " + traceback.format_exc())
                self.stop.set()   # its other threads end, and its consumer leaves the group

        def _read_only(self, c: Consumer) -> None:
            try:
                while not self.stop.is_set():
                    self._processed(c, self._read(c))
            except Exception:
                crashes.append(f"{self.name} (reading thread): " + traceback.format_exc())

        def _keep(self, got: List[Row]) -> None:
            if got:
                with lock:
                    consumed.extend(got)
                self.read_since_commit = True

        def _processed(self, c: Consumer, read: Read) -> None:
            """A read of a thread that only reads: kept (and stored)."""
            self._keep(read.rows)
            if args.auto_commit:
                self._store(c, read)

        def _to_store(self, read: Read) -> List[TopicPartition]:
            """``--auto-commit``: the offsets after ``read``'s rows of the partitions
            still assigned since it returned, those past what the member stored of the
            same assignment (its readers return a partition's messages out of order: a
            cancelled read's, handed out later, come before another read's)."""
            ends: Dict[int, int] = {}
            with lock:
                for _, p, offset, _ in read.rows:
                    if self.changes[p] == read.changes.get(p, 0):
                        ends[p] = max(ends.get(p, 0), offset + 1)
                    else:
                        key = (self.name, p)
                        not_stored[key] = max(not_stored.get(key, 0), offset + 1)
                for p, end in list(ends.items()):
                    if end <= self.stored_to.get((p, self.changes[p]), -1):
                        del ends[p]
                    else:
                        self.stored_to[p, self.changes[p]] = end
            return [TopicPartition(topic, p, o) for p, o in sorted(ends.items())]

        def _store(self, c: Consumer, read: Read) -> None:
            offsets = self._to_store(read)
            if offsets:
                try:
                    c.store_offsets(offsets=offsets)
                except KafkaException as exc:   # none of them assigned any more
                    self._store_refused(exc)

        async def _store_aio(self, c: AIOConsumer, read: Read) -> None:
            offsets = self._to_store(read)
            if offsets:
                try:
                    await c.store_offsets(offsets=offsets)
                except KafkaException as exc:
                    self._store_refused(exc)

        def _store_refused(self, exc: KafkaException) -> None:
            with lock:
                store_refused[exc.args[0].name()] += 1

        def _final_commit(self, err: Optional[KafkaError]) -> bool:
            """Whether the member's last commit, which failed with ``err`` (None: it
            worked), is done with. A clean shutdown commits what was read (the last commit
            may have failed in the chaos; nothing read since is fine). After a rebalance
            (the others closing too), the member reads once more, which completes it,
            and commits again, as an application handling the error does."""
            if err is None or err.code() == KafkaError._NO_OFFSET:
                return True
            if err.retriable() or err.code() in REBALANCED:
                if self.final_deadline is None:
                    self.final_deadline = time.monotonic() + 30
                elif time.monotonic() > self.final_deadline:
                    raise KafkaException(err)
                note(self.name, "final commit again after", err.name())
                return False
            raise KafkaException(err)

        def _read(self, c: Consumer) -> Read:
            with lock:
                before = dict(self.changes)
            if args.arrow:
                try:
                    got = self._rows(c.consume_arrow(500, 0.2))
                except KafkaException as exc:   # an event consume() returns as a message
                    got = self._event(exc.args[0])
            else:
                got = self._messages(c.consume(500, 0.2))
            self._check_batch(got, before)
            with lock:
                return Read(got, dict(self.changes))

        def _check_batch(self, got: List[Row],
                         before: Dict[int, int]) -> None:
            """Counts in ``read_faults`` what is wrong with a returned batch, ``before``
            being ``self.changes`` when the read started."""
            last: Dict[int, int] = {}
            with lock:
                for _, p, offset, _ in got:
                    if last.get(p, offset - 1) != offset - 1:
                        read_faults["batches with a partition's offsets not consecutive"] += 1
                    last[p] = offset
                for _, p, offset, _ in got:
                    if self.changes[p] != before.get(p, 0):
                        continue   # reassigned while it read: which time is not known
                    returned = self.returned[p, self.changes[p]]
                    if offset in returned:
                        read_faults["offsets returned twice to a member while assigned"] += 1
                    returned.add(offset)

        def _rows(self, batch) -> List[Row]:
            return [(self.name, p, o, number(v)) for p, o, v in zip(
                batch.column("partition").to_pylist(), batch.column("offset").to_pylist(),
                batch.column("value").to_pylist())]

        def _messages(self, messages: List[Message]) -> List[Row]:
            out = []
            for m in messages:
                if m.error() is None:
                    out.append((self.name, m.partition(), m.offset(), number(m.value())))
                else:
                    self._event(m.error())
            return out

        def _event(self, err: KafkaError) -> List[Row]:
            """An error event (consume_arrow() raises it after the rows before it): noted
            unless retriable; nothing to keep."""
            if not err.retriable():
                note(self.name, "error:", err)
            return []

        async def _run_aio(self) -> None:
            c = AIOConsumer(self.conf())
            await c.subscribe([topic], on_assign=self._changed,
                              on_revoke=self._revoked_aio, on_lost=self._changed)
            # More coroutines read the same consumer; this one also commits.
            helpers = [asyncio.ensure_future(self._read_only_aio(c))
                       for _ in range(args.threads - 1)]
            while not self.stop.is_set():
                read = await self._read_aio(c)
                self.assigned = sorted(tp.partition for tp in await c.assignment())
                self._keep(read.rows)
                if not self.read_since_commit:
                    continue
                stall = self._stall_due() if read.rows else 0.0
                if stall:   # as in run()
                    note(self.name, f"stalls {stall:.1f} s")
                    await asyncio.sleep(stall)
                self.read_since_commit = False
                if args.auto_commit:
                    await self._store_aio(c, read)
                    continue
                try:
                    await c.commit(asynchronous=False)
                except KafkaException as exc:
                    note(self.name, "commit failed:", exc.args[0].name())
            await asyncio.gather(*helpers)
            while True:    # as in run()
                try:
                    await c.commit(asynchronous=False)
                    err = None
                except KafkaException as exc:
                    err = exc.args[0]
                if self._final_commit(err):
                    break
                await self._processed_aio(c, await self._read_aio(c))
            await c.close()

        async def _read_only_aio(self, c: AIOConsumer) -> None:
            while not self.stop.is_set():
                await self._processed_aio(c, await self._read_aio(c))

        async def _processed_aio(self, c: AIOConsumer, read: Read) -> None:
            self._keep(read.rows)
            if args.auto_commit:
                await self._store_aio(c, read)

        async def _read_aio(self, c: AIOConsumer) -> Read:
            with lock:
                before = dict(self.changes)
            read = c.consume_arrow(500, 0.2) if args.arrow else c.consume(500, 0.2)
            try:
                if self.rng.random() < 0.33:
                    # What it held when cancelled is kept for the next read (KeptReads).
                    got = await asyncio.wait_for(read, self.rng.uniform(0.01, 0.3))
                else:
                    got = await read
            except asyncio.TimeoutError:
                return Read([], before)
            except KafkaException as exc:
                if not args.arrow:
                    raise
                return Read(self._event(exc.args[0]), before)   # as in _read()
            rows = self._rows(got) if args.arrow else self._messages(got)
            self._check_batch(rows, before)
            with lock:
                return Read(rows, dict(self.changes))

    members = [Member(i) for i in range(args.members)]

    def churn(rng: random.Random) -> str:
        victim = rng.choice(members)
        victim.stop.set()
        if args.static:
            # A restart: the same group.instance.id comes back once the old one closed
            # (while both live, the newer fences the older: FENCED_INSTANCE_ID).
            victim.join(30)
        members[members.index(victim)] = fresh = Member(victim.slot)
        fresh.start()
        return f"{victim.name} -> {fresh.name}"

    for m in members:
        m.start()
    producer = NumberedProducer(args, boot, topic, crashes, meddling)
    producer.start()
    chaos = Chaos(cluster, args.seed, [(topic, partitions)], errors=[
        ("Produce", "NOT_LEADER_OR_FOLLOWER"), ("Produce", "REQUEST_TIMED_OUT"),
        ("Produce", "NOT_ENOUGH_REPLICAS"), ("Fetch", "NOT_LEADER_OR_FOLLOWER"),
        ("Fetch", "UNKNOWN_SERVER_ERROR"), ("OffsetCommit", "COORDINATOR_NOT_AVAILABLE"),
        ("OffsetCommit", "NOT_COORDINATOR"), ("Heartbeat", "NOT_COORDINATOR"),
        ("OffsetFetch", "COORDINATOR_LOAD_IN_PROGRESS"),
        ("Metadata", "LEADER_NOT_AVAILABLE")], coordinators=[{"group": group}], churn=churn,
        restarts=args.restarts, grow_to=args.grow, latency=latency(args))
    chaos.start()
    time.sleep(args.seconds)
    chaos.stop.set()
    chaos.join()
    producer.join(args.timeout_ms / 1000 + 300)
    partitions = len(cluster.describe_topic(topic).partitions)   # --grow: more now
    note("group:", partitions, "partitions")

    in_log = {number(m.value()): m for m in read_all(cluster, topic, partitions)}
    deadline = time.monotonic() + 90
    report_at = time.monotonic() + 5
    while time.monotonic() < deadline:
        with lock:
            seen = {c[3] for c in consumed}
            reached = {}
            for _, p, offset, _ in consumed:
                reached[p] = max(reached.get(p, -1), offset + 1)
        if seen >= set(in_log) and committed_to_the_end(
                committed_offsets(cluster, group, topic, partitions),
                high_watermarks(cluster, topic)):
            # Every message returned to some member, and committed. Returned is not
            # enough: an owner whose commit failed in the chaos leaves its messages to
            # the next owner, whose cancelled read may hold them (kept for its next
            # read, uncommitted until then: docs/asyncio.md); stopped then, it rightly
            # leaves them uncommitted, and the run has no next reader.
            break
        if time.monotonic() >= report_at:   # what a slow catch-up waits for
            report_at += 5
            note("group: still reading; read up to", dict(sorted(reached.items())),
                 "assignments", {m.name: m.assigned for m in members if m.is_alive()})
        time.sleep(0.2)
    note("group: caught up", round(time.monotonic() - chaos.stopped_at, 1),
         "s after the chaos stopped")
    caught_up_at = time.time()   # the commits after it, should one take an offset back
    auto_committed = args.auto_commit and auto_commits_reach_the_end(cluster, group, topic,
                                                                     partitions)
    for m in members:
        m.stop.set()
    for m in members:
        m.join(30)
    check = Checks()
    check.expect(not crashes, f"no client thread failed ({len(crashes)} did)")
    for crash in crashes:
        note("crash:", crash)
    producer.check(check, read_all(cluster, topic, partitions))
    missed = set(in_log) - seen
    check.expect(not missed, f"the group read every message in the log ({len(missed)} not)")
    if missed:
        gaps = offset_ranges((in_log[n].partition(), in_log[n].offset()) for n in missed)
        note("group: not read, by partition:", gaps)
        readers = collections.defaultdict(set)
        for who, p, offset, _ in consumed:
            readers[p, offset].add(who)
        note("group: who read around them (before, after):", {
            (p, first): (sorted(readers[p, first - 1]), sorted(readers[p, last + 1]))
            for p, ranges in gaps.items() for first, last in ranges[:5]})
    twice = len(consumed) - len({c[3] for c in consumed})
    note("group: read", len(consumed), "messages,", twice, "more than once")
    check.expect(not read_faults, f"each batch in order, nothing returned twice to a member "
                 f"while assigned {dict(read_faults)}")
    if args.auto_commit:
        note("group: store_offsets() refused (none of a batch's partitions assigned any "
             "more):", dict(store_refused))
        note("group: rows not stored (reassigned since their read), their ends by member "
             "and partition:", dict(sorted(not_stored.items())))
    if meddling is not None:
        meddling.check(check)
    if args.auto_commit:
        check.expect(auto_committed, "the auto-commits reached the high watermarks before "
                     "the members' own commits at their shutdown")
    marks = high_watermarks(cluster, topic)
    committed = committed_offsets(cluster, group, topic, partitions)
    if not committed_to_the_end(committed, marks):
        note_commits(cluster, caught_up_at)
    check.expect(committed_to_the_end(committed, marks), f"the group's committed offsets "
                 f"{committed} are the high watermarks {marks}")
    return check


def note_commits(cluster: Cluster, since: float) -> None:
    """The OffsetCommit requests served since ``since`` (time.time()), by client, with
    their answers' errors (times on the run's clock): who took a group's offset back."""
    shift = time.time() - (time.monotonic() - _T0)
    for e in cluster.request_log(api="OffsetCommit"):
        if e.time < since:
            continue
        errors = ",".join(sorted(set(e.errors))) or "-"
        note(f"commit: at {e.time - shift:7.2f} {e.client_id} broker {e.broker} "
             f"v{e.version} -> {errors} {e.details or ''}")


def offset_ranges(places: Iterable[Tuple[int, int]]) -> Dict[int, List[Tuple[int, int]]]:
    """``(partition, offset)`` places as each partition's ranges of consecutive offsets
    (first, last), for the notes of what a run missed."""
    ranges: Dict[int, List[Tuple[int, int]]] = collections.defaultdict(list)
    for p, offset in sorted(places):
        if ranges[p] and ranges[p][-1][1] == offset - 1:
            ranges[p][-1] = (ranges[p][-1][0], offset)
        else:
            ranges[p].append((offset, offset))
    return dict(ranges)


def auto_commits_reach_the_end(cluster: Cluster, group: str, topic: str,
                               partitions: int, within: float = 15.0) -> bool:
    """``--auto-commit``, the group caught up: whether its committed offsets become the
    high watermarks ``within`` seconds (the members store each batch's offsets and commit
    nothing themselves until their shutdown: the client's auto-commits made them)."""
    deadline = time.monotonic() + within
    while True:
        marks = high_watermarks(cluster, topic)
        committed = committed_offsets(cluster, group, topic, partitions)
        if committed_to_the_end(committed, marks):
            note("group: auto-committed to the high watermarks", marks)
            return True
        if time.monotonic() > deadline:
            note("group: auto-committed", committed, "against the high watermarks", marks)
            return False
        time.sleep(0.5)


def committed_to_the_end(committed: Dict[int, int], marks: Dict[int, int]) -> bool:
    """Whether each partition's committed offset is its high watermark; a partition never
    written (many partitions, 97 keys) has nothing to commit: no offset is committed."""
    return all(committed.get(p) == mark or (mark == 0 and committed.get(p) == OFFSET_INVALID)
               for p, mark in marks.items()) and set(committed) == set(marks)


# -- eos -----------------------------------------------------------------------------------
class Downstream(threading.Thread):
    """``eos --downstream``: a ``read_committed`` member of a group of its own reading the
    output while it is written (aborted transactions, zombies' output, markers among the
    records), committing after each batch and in ``on_revoke``; ``places`` gets each
    record's (partition, offset, number). With ``small_fetches`` its fetches are of a
    batch or two (a transaction's records and its marker come in many answers, a fetch
    starts in the middle of an aborted transaction); with ``--arrow`` it reads with
    ``consume_arrow()``."""

    def __init__(self, name: str, args: argparse.Namespace, bootstrap: str, topic: str,
                 group: str, places: List[Tuple[int, int, int]], lock: threading.Lock,
                 crashes: List[str], small_fetches: bool = False) -> None:
        super().__init__(name=name, daemon=True)
        self.args = args
        self.conf = {**connect(bootstrap), "group.id": group, "client.id": name,
                     "isolation.level": "read_committed", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "group.protocol": args.protocol}
        if args.protocol == "classic":
            self.conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        if small_fetches:   # the first batch comes whole whatever its size (KIP-74);
            # fetch.max.bytes may not be below message.max.bytes (as librdkafka)
            self.conf.update({"max.partition.fetch.bytes": 512, "fetch.max.bytes": 2048,
                              "message.max.bytes": 2048})
        self.topic = topic
        self.places = places
        self.lock = lock
        self.crashes = crashes
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            c = Consumer(self.conf)
            c.subscribe([self.topic], on_revoke=self._revoked)
            while not self.stop.is_set():
                if self._read(c):
                    self._commit(c)
            deadline = time.monotonic() + 30
            while not self._commit(c) and time.monotonic() < deadline:
                self._read(c)   # a rebalance (the others closing too) completes
            c.close()
        except Exception:
            self.crashes.append(f"{self.name}: " + traceback.format_exc())

    def _read(self, c: Consumer) -> int:
        if self.args.arrow:
            try:
                batch = c.consume_arrow(500, 0.2)
            except KafkaException as exc:   # an event, after the rows before it
                if not expected(exc.args[0]):
                    raise
                return 0
            got = list(zip(batch.column("partition").to_pylist(),
                           batch.column("offset").to_pylist(),
                           [number(v) for v in batch.column("value").to_pylist()]))
        else:
            got = [(m.partition(), m.offset(), number(m.value()))
                   for m in c.consume(500, 0.2) if m.error() is None]
        with self.lock:
            self.places.extend(got)
        return len(got)

    def _commit(self, c: Consumer) -> bool:
        """Whether what was read is committed (or there was nothing new)."""
        try:
            c.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError._NO_OFFSET:
                return True
            if not expected(exc.args[0]):
                raise
            return False
        return True

    def _revoked(self, c: Consumer, partitions: List[TopicPartition]) -> None:
        try:
            c.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                note(self.name, "commit on revoke failed:", exc.args[0].name())


def check_downstream(check: Checks, cluster: Cluster, group: str, topic: str,
                     records: List[Message], places: List[Tuple[int, int, int]]) -> None:
    """``eos --downstream``: the group read every committed record of the output
    (``records``), nothing else (no aborted record), and committed to the ends."""
    committed_places = {(m.partition(), m.offset()): number(m.value()) for m in records}
    read = {(p, o): n for p, o, n in places}
    aborted = set(read) - set(committed_places)
    if aborted:
        note("downstream: records read that no transaction committed, the first:",
             sorted(aborted)[:12])
    check.expect(not aborted, f"the downstream group read no aborted record "
                 f"({len(aborted)} did)")
    missed = set(committed_places) - set(read)
    check.expect(not missed, f"the downstream group read every committed record "
                 f"({len(missed)} not)")
    wrong = sum(1 for place, n in read.items() if committed_places.get(place, n) != n)
    check.expect(not wrong, f"each record read downstream holds its value ({wrong} not)")
    note("downstream: read", len(places), "records,", len(places) - len(read),
         "more than once")
    marks = high_watermarks(cluster, topic)
    committed = committed_offsets(cluster, group, topic, len(marks))
    check.expect(committed_to_the_end(committed, marks), f"the downstream group's committed "
                 f"offsets {committed} are the high watermarks {marks}")


def run_eos(args: argparse.Namespace, cluster: Cluster) -> Checks:
    source, sink, group, partitions = "soak-in", "soak-out", "soak-eos", args.partitions
    for topic in (source, sink):
        cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    boot = cluster.bootstrap_servers
    crashes: List[str] = []
    aborts: Dict[str, int] = collections.Counter()

    def fill() -> None:
        # Idempotent: each input once in the log, so each output once is checkable.
        p = Producer({**connect(boot), "linger.ms": 5, "enable.idempotence": True,
                      "compression.type": args.compression})
        rate = args.messages / (args.seconds * 0.5)
        start = time.monotonic()
        for n in range(args.messages):
            queue(p, lambda: p.produce(source, struct.pack(">Q", n), partition=n % partitions))
            if n % 500 == 0:
                pace(p, n, rate, start)
        if p.flush(120):
            crashes.append("input producer: messages left after flush")
        p.close()

    class Processor(threading.Thread):
        made = 0

        def __init__(self, transactional_id: str) -> None:
            Processor.made += 1
            super().__init__(name=f"p{Processor.made}", daemon=True)
            self.transactional_id = transactional_id
            self.stop = threading.Event()
            self.rng = random.Random(f"{args.seed}-{self.name}")
            self.next_stall: Optional[float] = None   # --stall: see stall_due()

        def run(self) -> None:
            try:
                self._run()
            except Exception:
                crashes.append(f"{self.name}: " + traceback.format_exc())
                note(self.name, "failed:", repr(sys.exc_info()[1])[:300])
                note_partitions(cluster, (source, sink), self.name)
                note_transaction_requests(cluster, self.name)

        def _run(self) -> None:
            conf = {**connect(boot), "group.id": group, "client.id": self.name,
                    "isolation.level": "read_committed", "enable.auto.commit": False,
                    "auto.offset.reset": "earliest", "group.protocol": args.protocol}
            if args.protocol == "classic":
                conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
            if args.stall:
                conf["max.poll.interval.ms"] = STALLED_POLL_INTERVAL_MS
            consumer = Consumer(conf)
            consumer.subscribe([source])
            producer = Producer({**connect(boot), "client.id": self.name,
                                 "transactional.id": self.transactional_id,
                                 "compression.type": args.compression})
            producer.init_transactions(60)
            while not self.stop.is_set():
                msgs = [m for m in consumer.consume(300, 0.3) if m.error() is None]
                if not msgs:
                    continue
                producer.begin_transaction()
                try:
                    for m in msgs:
                        producer.produce(sink, m.value(), partition=m.partition())
                    stall = stall_due(self, args.stall)
                    if stall:   # slow processing: out of the group before the offsets go
                        note(self.name, f"stalls {stall:.1f} s")
                        self.stop.wait(stall)
                    producer.send_offsets_to_transaction(
                        consumer.position(consumer.assignment()),
                        consumer.consumer_group_metadata(), 30)
                    if self.rng.random() < args.abort_rate:
                        # the application gives up on the batch (a bad record, a failed
                        # side effect): its output and offsets go with the transaction
                        aborts["on purpose"] += 1
                        self._rewind(producer, consumer)
                        continue
                    retrying(producer.commit_transaction, 30)
                except KafkaException as exc:
                    if exc.args[0].fatal():
                        raise
                    aborts[exc.args[0].name()] += 1
                    self._rewind(producer, consumer)
            consumer.close()
            producer.close()

        def _rewind(self, producer: Producer, consumer: Consumer) -> None:
            """Aborts the transaction and goes back to the group's committed offsets."""
            retrying(producer.abort_transaction, 30)
            offsets = retrying(consumer.committed, consumer.assignment(), 30)
            for tp in offsets:
                consumer.seek(TopicPartition(
                    tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))

    processors = [Processor(f"soak-tx-{i}") for i in range(args.members)]
    down_group = "soak-downstream"
    down_places: List[Tuple[int, int, int]] = []
    down_lock = threading.Lock()

    down_made = itertools.count(1)

    def downstream_member() -> Downstream:
        made = next(down_made)   # every other one fetches a batch or two at a time
        return Downstream(f"d{made}", args, boot, sink, down_group, down_places, down_lock,
                          crashes, small_fetches=made % 2 == 0)

    downstream = [downstream_member() for _ in range(args.downstream)]

    def churn(rng: random.Random) -> str:
        if downstream and rng.random() < 0.3:   # a downstream member replaced
            victim_d = rng.choice(downstream)
            victim_d.stop.set()
            downstream[downstream.index(victim_d)] = fresh_d = downstream_member()
            fresh_d.start()
            return f"{victim_d.name} -> {fresh_d.name} (downstream)"
        victim = rng.choice(processors)
        victim.stop.set()
        victim.join(60)
        if victim.is_alive():
            crashes.append(f"{victim.name}: did not stop within 60 s")
        processors[processors.index(victim)] = fresh = Processor(victim.transactional_id)
        fresh.start()
        return f"{victim.name} -> {fresh.name} ({victim.transactional_id})"

    for p in processors:
        p.start()
    for d in downstream:
        d.start()
    filler = threading.Thread(target=fill, name="input", daemon=True)
    filler.start()
    chaos = Chaos(cluster, args.seed, [(source, partitions), (sink, partitions)], errors=[
        ("AddPartitionsToTxn", "CONCURRENT_TRANSACTIONS"),
        ("AddPartitionsToTxn", "COORDINATOR_NOT_AVAILABLE"),
        ("AddOffsetsToTxn", "NOT_COORDINATOR"), ("TxnOffsetCommit", "NOT_COORDINATOR"),
        ("TxnOffsetCommit", "COORDINATOR_LOAD_IN_PROGRESS"),
        ("EndTxn", "CONCURRENT_TRANSACTIONS"), ("EndTxn", "NOT_COORDINATOR"),
        ("EndTxn", "COORDINATOR_NOT_AVAILABLE"), ("Produce", "NOT_LEADER_OR_FOLLOWER"),
        ("Fetch", "NOT_LEADER_OR_FOLLOWER"), ("OffsetFetch", "COORDINATOR_LOAD_IN_PROGRESS"),
        ("FindCoordinator", "COORDINATOR_NOT_AVAILABLE")],
        coordinators=[{"group": group}] + [{"transactional_id": p.transactional_id}
                                           for p in processors]
        + [{"group": down_group}] * bool(downstream), churn=churn,
        restarts=args.restarts, latency=latency(args))
    chaos.start()
    time.sleep(args.seconds)
    chaos.stop.set()
    chaos.join()
    filler.join(120)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        out = [number(m.value()) for m in read_all(cluster, sink, partitions, "read_committed")]
        if len(set(out)) >= args.messages:
            break
        time.sleep(2)
    for p in processors:
        p.stop.set()
    for p in processors:
        p.join(60)
    records = read_all(cluster, sink, partitions, "read_committed")
    if downstream:   # it reads the last transactions' output
        wanted = {(m.partition(), m.offset()) for m in records}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with down_lock:
                if wanted <= {(p, o) for p, o, _ in down_places}:
                    break
            time.sleep(0.5)
        for d in downstream:
            d.stop.set()
        for d in downstream:
            d.join(60)
    out = [number(m.value()) for m in records]
    check = Checks()
    check.expect(not crashes, f"no processor{' or downstream member' * bool(downstream)} "
                 f"failed {crashes[:1]}")
    if downstream:
        check_downstream(check, cluster, down_group, sink, records, down_places)
    faulty = note_output_faults(records, args.messages, partitions)
    if faulty:
        keep_logs(cluster, [(sink, p) for p in sorted(faulty)], f"soak-eos-{args.seed}-")
    check.expect(sorted(out) == list(range(args.messages)),
                 f"read_committed output: each input once ({len(out)} records, "
                 f"{len(set(out))} distinct of {args.messages})")
    marks = high_watermarks(cluster, source)
    committed = committed_offsets(cluster, group, source, partitions)
    check.expect(committed == marks, f"the committed input offsets {committed} are the high "
                 f"watermarks {marks}")
    note("aborted transactions by error:", dict(aborts))
    return check


def keep_logs(cluster: Cluster, partitions: Sequence[Tuple[str, int]], prefix: str) -> None:
    """Copies of ``partitions``' logs on every broker, kept after the run (whose cluster
    goes with it) for ``python -m kafka_client.tools dump-log``."""
    keep = tempfile.mkdtemp(prefix=prefix)
    for topic, p in partitions:
        for b in BROKERS:
            source = cluster.log_dir(topic, p, b)
            if os.path.isdir(source):
                shutil.copytree(source, os.path.join(keep, f"broker-{b}", f"{topic}-{p}"))
    note("logs of", partitions, "kept in", keep)


def note_output_faults(records: List[Message], inputs: int, partitions: int) -> Set[int]:
    """For the diagnosis of an eos run whose output is not each input once: the first
    inputs missing and twice in the output, each with its place in the input (the filler
    writes input n at offset n // partitions of partition n % partitions) and, for those
    twice, the places of its copies in the output. Returns the output partitions
    concerned."""
    places: Dict[int, List[Tuple[int, int]]] = collections.defaultdict(list)
    for m in records:
        places[number(m.value())].append((m.partition(), m.offset()))
    missing = [n for n in range(inputs) if n not in places]
    twice = sorted(n for n, at in places.items() if len(at) > 1)
    for what, numbers in (("missing", missing), ("twice", twice)):
        if numbers:
            note(f"eos: {len(numbers)} inputs {what}, the first:", [
                (n, f"in {n % partitions}@{n // partitions}", places.get(n, []))
                for n in numbers[:12]])
    if twice:   # in which runs of input offsets: one stretch or many
        runs: List[List[int]] = []
        for n in twice:
            if runs and n - runs[-1][-1] <= partitions:
                runs[-1].append(n)
            else:
                runs.append([n])
        note("eos: inputs twice in", len(runs), "stretches, the first:",
             [(r[0], r[-1], len(r)) for r in runs[:12]])
    return {n % partitions for n in missing + twice}


# -- share ---------------------------------------------------------------------------------
#: ``share --explicit``: the acknowledgements the members give, by weight (RELEASE: the
#: record comes again, its delivery count one higher; REJECT: never again)
ACK_MIX = ((AcknowledgeType.ACCEPT, 0.85), (AcknowledgeType.RELEASE, 0.10),
           (AcknowledgeType.REJECT, 0.05))
#: The share group's share.delivery.count.limit: Kafka's most (group.share.max.delivery.
#: count.limit, 10), so that a record archived before any member was handed it is news
SHARE_DELIVERY_LIMIT = 10
#: The group's share.record.lock.duration.ms; with ``--stall`` shorter than a stall, so
#: that a stalled member's locks expire and its records go to the others meanwhile
SHARE_LOCK_MS, STALLED_SHARE_LOCK_MS = 15_000, 5_000
#: The errors the acknowledgements' outcomes may carry in the chaos (docs/share-consumer.md,
#: "How it works"): the lock or the session gone, the answer lost with its connection,
#: the old leader's answer (the move released the record), commit_sync() out of time, the
#: member closed meanwhile. A retriable refusal is sent again, not reported.
SHARE_ACK_EXPLAINED = {KafkaError(code).name() for code in (
    KafkaError.INVALID_RECORD_STATE, KafkaError.SHARE_SESSION_NOT_FOUND,
    KafkaError._TRANSPORT, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._TIMED_OUT,
    KafkaError._DESTROY)}


@dataclass(frozen=True)
class Delivery:
    """A record a share group member's poll() returned."""
    member: str
    partition: int
    offset: int
    number: int
    count: int      # its delivery_count()
    at: float       # when poll() returned it (time.monotonic())


@dataclass(frozen=True)
class AckOutcome:
    """The brokers' answer to an acknowledgement, as the commit callback reported it."""
    member: str
    partition: int
    offset: int
    count: int      # the delivery acknowledged
    kind: str       # ACCEPT, RELEASE or REJECT
    error: Optional[str]   # None: applied
    at: float
    #: the kinds of the member's acknowledgements of the record's offset not answered yet
    #: when this answer came: more than one when it had acknowledged its next delivery
    #: too (the answers name offsets, not deliveries, and may come in another order: which
    #: one this answers is not known; ``count`` and ``kind`` are the older one's)
    pending: Tuple[str, ...]

    @property
    def ambiguous(self) -> bool:
        return len(self.pending) > 1


def run_share(args: argparse.Namespace, cluster: Cluster) -> Checks:
    topic, group, partitions = "soak-share", "soak-share-group", args.partitions
    cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    lock_ms = STALLED_SHARE_LOCK_MS if args.stall else SHARE_LOCK_MS
    cluster.set_group_config(group, {"share.auto.offset.reset": "earliest",
                                     "share.delivery.count.limit": SHARE_DELIVERY_LIMIT,
                                     "share.record.lock.duration.ms": lock_ms})
    boot = cluster.bootstrap_servers
    lock = threading.Lock()
    crashes: List[str] = []
    deliveries: List[Delivery] = []
    outcomes: List[AckOutcome] = []
    # what went wrong without failing a guarantee: poll() error events, commit_sync()
    # results, acknowledge() refusals, by error
    events: Dict[str, int] = collections.Counter()
    sync_results: Dict[str, int] = collections.Counter()
    refusals: List[str] = []
    everyone: List["ShareMember"] = []   # the replaced members too
    # --stall: set once the chaos stopped; no stall after it. A stalled member's I/O thread
    # still acquires a batch, held past its lock (5 s): stalls every 10-30 s by each member
    # kept taking the same records at the start of a partition (seed 414: 100 s to catch up)
    calm = threading.Event()

    class ShareMember(threading.Thread):
        made = 0

        def __init__(self) -> None:
            everyone.append(self)
            ShareMember.made += 1
            super().__init__(name=f"s{ShareMember.made}", daemon=True)
            self.stop = threading.Event()
            self.closed_by_chaos = False   # close() from the chaos thread: calls then fail
            self.consumer: Optional[ShareConsumer] = None
            self.next_stall: Optional[float] = None   # --stall: see stall_due()
            self.rng = random.Random(f"{args.seed}-{self.name}")
            # (partition, offset): the acknowledgements given and not answered yet,
            # oldest first (delivery count, kind)
            self.pending: Dict[Tuple[int, int], Deque[Tuple[int, str]]] = \
                collections.defaultdict(collections.deque)

        def conf(self) -> Dict[str, object]:
            conf: Dict[str, object] = {
                **connect(boot), "group.id": group, "client.id": self.name,
                "share.acknowledgement.mode": "explicit" if args.explicit else "implicit",
                "max.poll.records": self.rng.choice((50, 200, 500))}
            if args.stall:
                conf["max.poll.interval.ms"] = STALLED_POLL_INTERVAL_MS
            return conf

        def run(self) -> None:
            workers: List[ShareWorker] = []
            try:
                c = self.consumer = ShareConsumer(self.conf())
                c.set_acknowledgement_commit_callback(self._answered)
                c.subscribe([topic])
                workers = [ShareWorker(self, i) for i in range(args.threads - 1)]
                for w in workers:
                    w.start()
                while not self.stop.is_set():
                    batch = c.poll(0.2)
                    got = self._delivered(batch)
                    if args.explicit:
                        self._acknowledge(c, got, workers)
                    elif got:   # implicit: the next poll(), commit or close() accepts them
                        with lock:
                            for m in got:
                                self.pending[m.partition(), m.offset()].append(
                                    (m.delivery_count() or 0, "ACCEPT"))
                    stall = stall_due(self, args.stall and not calm.is_set()) if got else 0.0
                    if stall:   # slow processing: past the poll interval and the locks
                        note(self.name, f"stalls {stall:.1f} s")
                        self.stop.wait(stall)
                    self._commit(c)
                for w in workers:
                    w.work.put(None)
                c.close()
            except Exception as exc:
                if not (self.closed_by_chaos and isinstance(exc, (IllegalStateException,
                                                                  KafkaException))):
                    crashes.append(f"{self.name}: " + traceback.format_exc())
                self.stop.set()
                for w in workers:
                    w.work.put(None)
                if self.consumer is not None and not self.closed_by_chaos:
                    self.consumer.close()

        def _delivered(self, batch: Sequence[Message]) -> List[Message]:
            got = []
            now = time.monotonic()
            with lock:
                for m in batch:
                    if m.error() is not None:
                        events[m.error().name()] += 1
                        if not expected(m.error()):
                            note(self.name, "error:", m.error())
                        continue
                    got.append(m)
                    deliveries.append(Delivery(self.name, m.partition(), m.offset(),
                                               number(m.value()), m.delivery_count() or 0,
                                               now))
            return got

        def _acknowledge(self, c: ShareConsumer, got: List[Message],
                         workers: List["ShareWorker"]) -> None:
            """Explicit mode: each record its acknowledgement (ACK_MIX), by this thread
            or, with ``--threads``, by the workers while this one commits meanwhile."""
            if not workers:
                for m in got:
                    self.give(c, m)
                return
            shares: List[List[Message]] = [[] for _ in workers]
            for i, m in enumerate(got):
                shares[i % len(workers)].append(m)
            for w, share in zip(workers, shares):
                w.work.put(share)
            if self.rng.random() < 0.3:   # acknowledgements arriving while it commits
                c.commit_async()
            for w in workers:
                w.done.acquire()

        def give(self, c: ShareConsumer, m: Message) -> None:
            kinds, weights = zip(*ACK_MIX)
            kind = self.rng.choices(kinds, weights)[0]
            key = (m.partition(), m.offset())
            with lock:   # before the call: its answer may come to another thread at once
                self.pending[key].append((m.delivery_count() or 0, kind.name))
            try:
                c.acknowledge(m, kind)
            except Exception as exc:
                with lock:
                    self.pending[key].pop()
                if self.closed_by_chaos:
                    raise
                refusals.append(f"{self.name} {key} {kind.name}: {exc!r}")
                note(self.name, "acknowledge refused:", repr(exc)[:200])

        def _commit(self, c: ShareConsumer) -> None:
            """Now and then the acknowledgements sent at once (else with the next fetch)."""
            draw = self.rng.random()
            if draw < 0.2:
                for tp, exc in c.commit_sync(30).items():
                    with lock:
                        sync_results["ok" if exc is None else exc.args[0].name()] += 1
            elif draw < 0.35:
                c.commit_async()

        def _answered(self, offsets: Dict[TopicPartition, Set[int]],
                      exc: Optional[KafkaException]) -> None:
            """The acknowledgement commit callback (any thread that served it)."""
            error = None if exc is None else exc.args[0].name()
            now = time.monotonic()
            with lock:
                for tp, offs in offsets.items():
                    for offset in offs:
                        given = self.pending.get((tp.partition, offset))
                        if not given:   # a gap (no record there), acknowledged by the client
                            continue
                        pending = tuple(kind for _, kind in given)
                        count, kind = given.popleft()
                        outcomes.append(AckOutcome(self.name, tp.partition, offset, count,
                                                   kind, error, now, pending))

    class ShareWorker(threading.Thread):
        """``--threads``: acknowledges its share of each batch while the member's own
        thread is inside commit_async() (or waits)."""

        def __init__(self, member: ShareMember, index: int) -> None:
            super().__init__(name=f"{member.name}-w{index}", daemon=True)
            self.member = member
            self.work: "Queue[Optional[List[Message]]]" = Queue()
            self.done = threading.Semaphore(0)

        def run(self) -> None:
            while True:
                share = self.work.get()
                if share is None:
                    return
                try:
                    for m in share:
                        assert self.member.consumer is not None
                        self.member.give(self.member.consumer, m)
                except Exception:
                    if not self.member.closed_by_chaos:
                        crashes.append(f"{self.name}: " + traceback.format_exc())
                finally:
                    self.done.release()

    members = [ShareMember() for _ in range(args.members)]

    def churn(rng: random.Random) -> str:
        victim = rng.choice(members)
        how = "stopped"
        if rng.random() < 0.3 and victim.consumer is not None:
            # closed from another thread: the call the member is inside ends at once
            victim.closed_by_chaos = True
            victim.stop.set()
            victim.consumer.close()
            how = "closed"
        victim.stop.set()
        members[members.index(victim)] = fresh = ShareMember()
        fresh.start()
        return f"{victim.name} {how} -> {fresh.name}"

    for m in members:
        m.start()
    producer = NumberedProducer(args, boot, topic, crashes)
    producer.start()
    chaos = Chaos(cluster, args.seed, [(topic, partitions)], errors=[
        ("Produce", "NOT_LEADER_OR_FOLLOWER"), ("Produce", "NOT_ENOUGH_REPLICAS"),
        ("ShareFetch", "NOT_LEADER_OR_FOLLOWER"), ("ShareFetch", "SHARE_SESSION_NOT_FOUND"),
        ("ShareFetch", "INVALID_SHARE_SESSION_EPOCH"), ("ShareFetch", "REQUEST_TIMED_OUT"),
        ("ShareAcknowledge", "NOT_LEADER_OR_FOLLOWER"),
        ("ShareAcknowledge", "SHARE_SESSION_NOT_FOUND"),
        ("ShareAcknowledge", "INVALID_SHARE_SESSION_EPOCH"),
        ("ShareGroupHeartbeat", "NOT_COORDINATOR"),
        ("ShareGroupHeartbeat", "COORDINATOR_NOT_AVAILABLE"),
        ("ShareGroupHeartbeat", "FENCED_MEMBER_EPOCH"),
        ("ShareGroupHeartbeat", "UNKNOWN_MEMBER_ID"),
        ("Metadata", "LEADER_NOT_AVAILABLE")], coordinators=[{"group": group}], churn=churn,
        restarts=args.restarts, latency=latency(args))
    chaos.start()
    time.sleep(args.seconds)
    chaos.stop.set()
    chaos.join()
    calm.set()
    producer.join(args.timeout_ms / 1000 + 300)

    deadline = time.monotonic() + 120
    report_at = time.monotonic() + 5
    behind: Set[int] = set()   # the partitions still behind 5 s after the chaos
    while True:
        marks = high_watermarks(cluster, topic)
        starts = share_start_offsets(cluster, group, topic)
        if all(starts.get(p) == mark for p, mark in marks.items()):
            break
        if time.monotonic() > deadline:
            break
        if time.monotonic() >= report_at:
            report_at += 5
            behind |= {p for p, mark in marks.items() if starts.get(p) != mark}
            note("share: still reading; start offsets", starts, "high watermarks", marks,
                 "; the records at the start offsets:", {
                     sp["partition"]: sp["records"][:1] for sp in cluster.share_state(group)
                     if sp["start_offset"] != marks.get(sp["partition"])})
        time.sleep(0.2)
    note("share: caught up", round(time.monotonic() - chaos.stopped_at, 1),
         "s after the chaos stopped")
    if behind:
        note_share_fetches(cluster, topic, behind, chaos.stopped_at)
    state = cluster.share_state(group)
    for m in members:
        m.stop.set()
    for m in members:
        m.join(30)

    check = Checks()
    check.expect(not crashes, f"no client thread failed ({len(crashes)} did)")
    for crash in crashes:
        note("crash:", crash)
    records = read_all(cluster, topic, partitions)
    producer.check(check, records)
    with lock:
        got, answers = list(deliveries), list(outcomes)
        unanswered = collections.Counter(kind for m in everyone for given in m.pending.values()
                                         for _, kind in given)
    note("share: acknowledgements never answered (members stopped or closed):",
         dict(unanswered), "; members alive", [m.name for m in everyone if m.is_alive()])
    suspects = check_share(check, records, got, answers, state, marks)
    if suspects:
        note_share_requests(cluster, topic, suspects)
    note("share: poll() error events", dict(events), "; commit_sync() results",
         dict(sync_results))
    check.expect(not refusals, f"every acknowledge() of a record the last poll() returned "
                 f"was taken ({len(refusals)} refused: {refusals[:3]})")
    return check


def note_share_fetches(cluster: Cluster, topic: str, partitions: Set[int],
                       since: float) -> None:
    """A slow catch-up's witness: the ShareFetch requests since ``since`` (monotonic), by
    client, broker and whether their share session held each of ``partitions`` (with
    their errors and how many records they acquired of it), and the leaders now."""
    shift = time.time() - (time.monotonic() - _T0)
    after = since - _T0 + shift
    for p in sorted(partitions):
        seen: Dict[Tuple[Any, ...], List[int]] = collections.defaultdict(lambda: [0, 0])
        for e in cluster.request_log(api="ShareFetch"):
            if e.time < after:
                continue
            held = [topic, p] in e.details.get("session_partitions", [])
            got = sum(a[3] - a[2] + 1 for a in e.details.get("acquired", ())
                      if a[0] == topic and a[1] == p)
            row = seen[e.client_id, e.broker, held, ",".join(sorted(set(e.errors))) or "-"]
            row[0] += 1
            row[1] += got
        note(f"share: [{p}] leader {cluster.leader(topic, p)}; ShareFetch since the chaos "
             f"(client, broker, session holds it, errors): [requests, records acquired]",
             dict(sorted(seen.items(), key=str)))
        holding = [e for e in cluster.request_log(kind=None)
                   if e.time >= after - 5 and (e.kind == "closed" or (
                       e.api in ("ShareFetch", "ShareAcknowledge", "ShareGroupHeartbeat")
                       and ([topic, p] in e.details.get("session_partitions", [])
                            or e.api == "ShareGroupHeartbeat")))]
        clients = {e.client_id for e in holding if e.api == "ShareFetch"}
        beats = cluster.request_log(api="ShareGroupHeartbeat")
        note("share: the leaves (ShareGroupHeartbeat epoch -1) of the run:", [
            (round(e.time - shift, 2), e.client_id, e.broker, e.errors)
            for e in beats if e.details.get("member_epoch") == -1])
        left = {e.client_id for e in beats if e.details.get("member_epoch") == -1}
        for e in beats[-400:]:   # the last heartbeats of the members that never left
            if e.client_id not in left and e.client_id not in clients:
                note(f"  at {e.time - shift:7.2f} broker {e.broker} {e.client_id} heartbeat "
                     f"epoch {e.details.get('member_epoch')} errors {e.errors} "
                     f"{e.details.get('assigned', '')}")
        for e in holding:
            if e.client_id not in clients:
                continue
            answered = e.details.get("answered")
            note(f"  at {e.time - shift:7.2f} broker {e.broker} {e.client_id} "
                 f"{e.api or e.kind} epoch "
                 f"{e.details.get('share_session_epoch', e.details.get('member_epoch'))} "
                 f"answered {'-' if answered is None else f'{answered - shift:7.2f}'} "
                 f"errors {e.errors} acquired "
                 f"{[a[2:] for a in e.details.get('acquired', ()) if a[1] == p]} "
                 f"{e.details.get('assigned', '')}{e.details.get('detail', '')}")


def share_start_offsets(cluster: Cluster, group: str, topic: str) -> Dict[int, Optional[int]]:
    """The share-partition start offsets of ``group`` on ``topic``: every record below is
    acknowledged or archived (None: never read)."""
    return {sp["partition"]: sp["start_offset"] for sp in cluster.share_state(group)
            if sp["topic"] == topic}


def note_share_requests(cluster: Cluster, topic: str, places: Iterable[Tuple[int, int]]
                        ) -> None:
    """The ShareFetch and ShareAcknowledge requests that acquired or acknowledged the
    records at ``places`` (partition, offset), the first three, with the closes of their
    clients' connections (times on the run's clock): the witness of a failed check."""
    shift = time.time() - (time.monotonic() - _T0)
    for p, offset in sorted(places)[:3]:
        note(f"share: [{p}]@{offset}:")
        clients = set()
        for e in cluster.request_log(kind=None):
            if e.kind == "closed" and e.client_id in clients:
                note(f"  at {e.time - shift:7.2f} broker {e.broker} {e.client_id} "
                     f"connection closed: {e.details.get('detail')}")
            if e.api not in ("ShareFetch", "ShareAcknowledge"):
                continue
            acquired = [a for a in e.details.get("acquired", ())
                        if a[0] == topic and a[1] == p and a[2] <= offset <= a[3]]
            acked = [a for a in e.details.get("acknowledged", ())
                     if a[0] == topic and a[1] == p and a[2] <= offset <= a[3]]
            if acquired or acked:
                clients.add(e.client_id)
                note(f"  at {e.time - shift:7.2f} broker {e.broker} {e.client_id} {e.api} "
                     f"epoch {e.details.get('share_session_epoch')} errors {e.errors} "
                     f"acquired {acquired} acknowledged {acked} ack errors "
                     f"{e.details.get('acknowledge_errors')}")


def check_share(check: Checks, records: List[Message], got: List[Delivery],
                answers: List[AckOutcome], state: List[Dict[str, Any]],
                marks: Dict[int, int]) -> Set[Tuple[int, int]]:
    """The share group's guarantees (KIP-932, docs/share-consumer.md) on what the members
    were handed (``got``), the answers to their acknowledgements, and the share state when
    the run caught up; returns the places (partition, offset) of records that failed one,
    for :func:`note_share_requests`."""
    in_log = {(m.partition(), m.offset()): number(m.value()) for m in records}
    by_record: Dict[Tuple[int, int], List[Delivery]] = collections.defaultdict(list)
    for d in got:
        by_record[d.partition, d.offset].append(d)
    wrong = [d for d in got if in_log.get((d.partition, d.offset)) != d.number]
    check.expect(not wrong, f"each record handed out is the log's at its offset "
                 f"({len(wrong)} not: {wrong[:3]})")
    missed = set(in_log) - set(by_record)
    check.expect(not missed, f"every record in the log was handed to a member ({len(missed)}"
                 f" not)")
    if missed:
        note("share: not handed out, by partition:", offset_ranges(missed))
    starts = {sp["partition"]: sp["start_offset"] for sp in state}
    check.expect(all(starts.get(p) == mark for p, mark in marks.items()),
                 f"the share-partition start offsets {starts} reached the high watermarks "
                 f"{marks}: every record acknowledged or archived")
    for sp in state:
        if sp["records"]:
            note(f"share: [{sp['partition']}] in flight at the end:",
                 collections.Counter(r[1] for r in sp["records"]))
    counts = [d.count for d in got]
    check.expect(all(1 <= n <= SHARE_DELIVERY_LIMIT for n in counts),
                 f"every delivery count within 1-{SHARE_DELIVERY_LIMIT} "
                 f"(seen {min(counts, default=0)}-{max(counts, default=0)})")
    # A member is handed a record again only once it lost or gave up the earlier delivery,
    # and each acquisition counts: its counts of one record go up.
    down = []
    for place, ds in by_record.items():
        last: Dict[str, int] = {}
        for d in ds:   # in the order the member's polls returned them
            if last.get(d.member, 0) >= d.count:
                down.append((place, d.member, last[d.member], d.count))
            last[d.member] = d.count
    check.expect(not down, f"no member handed a record again with a delivery count not "
                 f"above its last one ({len(down)}: {down[:5]})")
    # An ACCEPT or REJECT the broker applied is final: no later acquisition of the record.
    # The answer names an offset, not a delivery: it settled one the member had been
    # handed when it came (an acknowledgement is given only for those), or else a newer
    # acquisition the member had not been handed yet, which must then never be handed out:
    # so no delivery of the record has a higher count than the member's last one then.
    final: Dict[Tuple[int, int], Tuple[int, AckOutcome]] = {}
    for a in answers:
        # (which of several pending ones it answers is not known: final if all are)
        if a.error is None and all(kind in ("ACCEPT", "REJECT") for kind in a.pending):
            place = (a.partition, a.offset)
            seen = max((d.count for d in by_record[place]
                        if d.member == a.member and d.at <= a.at), default=0)
            if place not in final or seen < final[place][0]:
                final[place] = (seen, a)
    again = [(place, a.member, a.kind, seen, [(d.member, d.count) for d in by_record[place]
                                              if d.count > seen])
             for place, (seen, a) in final.items()
             if any(d.count > seen for d in by_record[place])]
    check.expect(not again, f"no record delivered again after its ACCEPT or REJECT was "
                 f"reported applied ({len(again)}: {again[:5]})")
    for place, *_ in again[:3]:
        seen, a = final[place]
        note(f"share: [{place[0]}]@{place[1]}: {a.member}'s {a.kind} of delivery {a.count} "
             f"answered applied at {a.at - _T0:.2f} (pending {a.pending}); the member's last "
             f"delivery then {seen};"
             f" handed out", [(d.member, d.count, round(d.at - _T0, 2))
                              for d in by_record[place]])
    # Handed out after the answer of another member's final acknowledgement with an older
    # delivery: a fetch answered before the acknowledgement, taken back by the broker when
    # its session ended (not a guarantee of Kafka's: noted)
    stale = [(place, d.member, d.count, round(d.at - _T0, 2), a.member, a.count,
              round(a.at - _T0, 2))
             for place, (_, a) in final.items() for d in by_record[place]
             if d.member != a.member and d.at > a.at]
    kinds = collections.Counter((a.kind, a.error or "applied") for a in answers)
    note("share:", sum(a.ambiguous for a in answers), "answers to acknowledgements of a "
         "record given again before the first was answered (which one answered unknown)")
    redelivered = sum(1 for ds in by_record.values() if len(ds) > 1)
    note("share:", len(got), "deliveries of", len(by_record), "records,", redelivered,
         "handed out more than once; at the limit", sum(1 for n in counts
                                                        if n == SHARE_DELIVERY_LIMIT),
         "; older deliveries handed out after another member's final acknowledgement",
         len(stale), "(record, member, count, at; the acknowledgement's member, count, at):",
         stale[:3])
    note("share: acknowledgements answered, by kind and outcome:", dict(sorted(kinds.items())))
    unexplained = {k: n for k, n in kinds.items()
                   if k[1] != "applied" and k[1] not in SHARE_ACK_EXPLAINED}
    check.expect(not unexplained, f"every acknowledgement that failed has an error the "
                 f"chaos explains ({unexplained})")
    stuck = {(sp["partition"], r[0]) for sp in state for r in sp["records"]
             if r[1] in ("acquired", "available")}
    return ({place for place, *_ in again} | {(place[0], place[1]) for place, *_ in down}
            | missed | set(sorted(stuck)[:3]))


# -- spark ---------------------------------------------------------------------------------
def run_spark(args: argparse.Namespace, cluster: Cluster) -> Checks:
    # PySpark is an optional dependency: only this mode needs it.
    from pyspark.sql import SparkSession

    from kafka_client.spark import SOURCE_NAME, register

    source, sink, group, partitions = "soak-in", "soak-out", "soak-spark", args.partitions
    for topic in (source, sink):
        cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    boot = cluster.bootstrap_servers
    crashes: List[str] = []
    work = tempfile.mkdtemp(prefix="soak-spark-")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)   # the workers import us too
    spark = (SparkSession.builder.master("local[2]").appName("soak")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    login = {"kafka." + k: v for k, v in connect(boot).items()}

    def start(name: str) -> Any:
        reader = (spark.readStream.format(SOURCE_NAME).options(**login)
                  .option("subscribe", source).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "5000"))
        if name == "files":   # Spark's file sink with a checkpoint: exactly once
            writer = (reader.option("kafka.group.id", group).load()
                      .select("partition", "offset", "value").writeStream.format("parquet")
                      .option("path", os.path.join(work, "files")))
        else:                 # our Kafka sink: at least once
            writer = (reader.load().select("key", "value").writeStream.format(SOURCE_NAME)
                      .options(**login).option("topic", sink))
        return (writer.option("checkpointLocation", os.path.join(work, "checkpoint-" + name))
                .trigger(processingTime="200 milliseconds").start())

    queries = {name: start(name) for name in ("files", "topic")}

    def churn(rng: random.Random) -> str:
        # A query stopped and started again on its checkpoint, as a redeployment does:
        # one that has committed its first batch. Spark 4 refuses to start again on a
        # checkpoint whose first offset-log write was interrupted by the stop (its
        # temporary file is left: STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY, whatever the
        # source; docs/spark.md, Limits), which a first batch slowed by the machine's load
        # made this tool hit.
        ready = [name for name in sorted(queries) if os.path.exists(
            os.path.join(work, "checkpoint-" + name, "commits", "0"))]
        if not ready:
            return "no query restarted: none has committed its first batch yet"
        name = rng.choice(ready)
        old = queries[name]
        old.stop()
        if old.exception() is not None:
            crashes.append(f"query {name}: {old.exception()}")
        register(spark)   # this thread's session in the JVM: see docs/spark.md, Limits
        queries[name] = start(name)
        return f"query {name} restarted"

    producer = NumberedProducer(args, boot, source, crashes)
    producer.start()
    chaos = Chaos(cluster, args.seed, [(source, partitions), (sink, partitions)], errors=[
        ("Fetch", "NOT_LEADER_OR_FOLLOWER"), ("Fetch", "UNKNOWN_SERVER_ERROR"),
        ("ListOffsets", "NOT_LEADER_OR_FOLLOWER"), ("Metadata", "LEADER_NOT_AVAILABLE"),
        ("Produce", "NOT_LEADER_OR_FOLLOWER"), ("Produce", "NOT_ENOUGH_REPLICAS"),
        ("Produce", "REQUEST_TIMED_OUT"), ("OffsetCommit", "NOT_COORDINATOR")],
        coordinators=[{"group": group}], churn=churn, restarts=args.restarts,
        latency=latency(args))
    chaos.start()
    time.sleep(args.seconds)
    chaos.stop.set()
    chaos.join()
    producer.join(args.timeout_ms / 1000 + 300)

    for name, query in queries.items():
        # Everything in the source is processed; a query that failed raises here.
        done: List[Optional[BaseException]] = []

        def drain() -> None:
            try:
                query.processAllAvailable()
                done.append(None)
            except Exception as exc:   # StreamingQueryException: the query failed
                done.append(exc)

        waiter = threading.Thread(target=drain, daemon=True)
        waiter.start()
        waiter.join(180)
        if not done:
            crashes.append(f"query {name}: not caught up 180 s after the chaos stopped")
            note_partitions(cluster, (source, sink), "spark")
        elif done[0] is not None:
            crashes.append(f"query {name} failed: {str(done[0])[:2000]}")
            note("spark:", name, "failed", round(time.monotonic() - chaos.stopped_at, 1),
                 "s after the chaos stopped")
        else:
            note("spark:", name, "caught up", round(time.monotonic() - chaos.stopped_at, 1),
                 "s after the chaos stopped")
        query.stop()

    check = Checks()
    check.expect(not crashes, f"no query or client failed {crashes[:1]}")
    records = read_all(cluster, source, partitions)
    producer.check(check, records)
    in_log = {(m.partition(), m.offset()): number(m.value()) for m in records}
    rows = read_file_sink(spark, os.path.join(work, "files"))
    files = collections.Counter((r.partition, r.offset) for r in rows)
    twice = sum(n - 1 for n in files.values())
    missed = set(in_log) - set(files)
    check.expect(not twice and not missed and set(files) == set(in_log),
                 f"the file sink holds every source record exactly once ({len(missed)} "
                 f"missing, {twice} more than once, {len(set(files) - set(in_log))} unknown)")
    wrong = sum(1 for r in rows if in_log.get((r.partition, r.offset)) != number(r.value))
    check.expect(not wrong, f"each file row holds its record's value ({wrong} not)")
    written = collections.Counter(number(m.value()) for m in read_all(cluster, sink, partitions))
    lost = set(in_log.values()) - set(written)
    check.expect(not lost, f"the Kafka sink received every source record ({len(lost)} not)")
    note("spark: the Kafka sink holds", sum(written.values()), "records,",
         sum(n - 1 for n in written.values()), "more than once (at-least-once sink)")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return check


#: The columns the spark run's file sink writes: the source record's place and value.
FILE_SINK_SCHEMA = "partition INT, offset BIGINT, value BINARY"


def read_file_sink(spark: Any, path: str) -> List[Any]:
    """The rows of the file sink at ``path``: none when its query never wrote a batch
    (its schema given, as Spark cannot infer one from no files: the checks then count
    every record missing instead of the run ending in a traceback before them)."""
    if not os.path.isdir(path):
        return []
    return spark.read.schema(FILE_SINK_SCHEMA).parquet(path).collect()


def retrying(call: Callable, *args: object) -> object:
    """``call(*args)`` again while it fails with a retriable error (a timeout)."""
    while True:
        try:
            return call(*args)
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise
            note(getattr(call, "__name__", call), "retried after", exc.args[0].name())


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("group", "eos", "spark", "share"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=30.0, help="how long the chaos lasts")
    ap.add_argument("--messages", type=int, default=None,
                    help="default 100,000 (group), 20,000 (eos, share), 50,000 (spark)")
    ap.add_argument("--partitions", type=int, default=None,
                    help="default 6 (group), 4 (eos, spark, share)")
    ap.add_argument("--members", type=int, default=None, help="default 3 (group, share), 2 (eos)")
    ap.add_argument("--restarts", action="store_true",
                    help="the chaos also restarts brokers (logs reloaded from disk)")
    ap.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    ap.add_argument("--strategy", default="cooperative-sticky")
    ap.add_argument("--static", action="store_true", help="group.instance.id per member")
    ap.add_argument("--arrow", action="store_true",
                    help="members (group; eos --downstream) read with consume_arrow()")
    ap.add_argument("--compression", default="none")
    ap.add_argument("--batches", action="store_true",
                    help="the producer queues 1,000 messages a call (produce_batch)")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads calling consume() on each member (share --explicit: "
                         "threads acknowledging each member's records)")
    ap.add_argument("--explicit", action="store_true",
                    help="share: explicit acknowledgement, a mix of ACCEPT, RELEASE and "
                         "REJECT")
    ap.add_argument("--acks", default="all")
    ap.add_argument("--no-idempotence", dest="idempotence", action="store_false")
    ap.add_argument("--timeout-ms", type=int, default=300_000, help="message.timeout.ms")
    ap.add_argument("--aio", action="store_true",
                    help="group: the asyncio clients, a third of the reads cancelled")
    ap.add_argument("--meddle", action="store_true",
                    help="group: other threads call the clients' other methods meanwhile")
    ap.add_argument("--abort-rate", type=float, default=0.0, metavar="FRACTION",
                    help="eos: the processors abort this fraction of their transactions on "
                         "purpose (then read the batch again)")
    ap.add_argument("--grow", type=int, default=0, metavar="PARTITIONS",
                    help="group: the chaos also adds partitions to the topic, up to this many")
    ap.add_argument("--stall", action="store_true",
                    help="group, eos, share: each member's processing now and then takes "
                         "longer than max.poll.interval.ms (6 s), once every 10-30 s")
    ap.add_argument("--downstream", type=int, default=0, metavar="MEMBERS",
                    help="eos: a read_committed group of this many members reads the "
                         "output while it is written")
    ap.add_argument("--auto-commit", action="store_true",
                    help="group: enable.auto.commit, the offsets stored with store_offsets() "
                         "after each batch (the members commit only at shutdown)")
    ap.add_argument("--slow", action="store_true",
                    help=f"the chaos's latency on a broker is {SLOW_LATENCY[0]}-"
                         f"{SLOW_LATENCY[1]} s, past the clients' request timeout "
                         f"(socket.timeout.ms {SLOW_REQUEST_TIMEOUT_MS})")
    ap.add_argument("--sasl", action="store_true",
                    help=f"every client logs in with {SASL_MECHANISM}; sessions of "
                         f"{SASL_SESSION_MS} ms, so connections re-authenticate all along")
    args = ap.parse_args(argv)
    if args.aio and (args.batches or args.mode in ("eos", "share")):
        ap.error("--aio is for group and spark runs without --batches (AIOProducer has no "
                 "produce_batch(); there is no asyncio share consumer)")
    if args.grow and args.mode != "group":
        ap.error("--grow is for group runs")
    if args.stall and args.mode == "spark":
        ap.error("--stall is for group, eos and share runs")
    if args.slow and args.mode == "spark":
        ap.error("--slow is for group, eos and share runs")
    if args.downstream and args.mode != "eos":
        ap.error("--downstream is for eos runs")
    if args.auto_commit and args.mode != "group":
        ap.error("--auto-commit is for group runs")
    if args.abort_rate and args.mode != "eos":
        ap.error("--abort-rate is for eos runs")
    if args.meddle and (args.aio or args.mode != "group"):
        ap.error("--meddle is for group runs without --aio (the meddlers are threads)")
    if args.explicit and args.mode != "share":
        ap.error("--explicit is for share runs")
    if args.mode == "share" and args.threads > 1 and not args.explicit:
        ap.error("share --threads needs --explicit (an implicit poll() accepts what another "
                 "thread's poll() returned)")
    args.messages = args.messages or {"group": 100_000, "eos": 20_000, "spark": 50_000,
                                      "share": 20_000}[args.mode]
    args.partitions = args.partitions or (6 if args.mode == "group" else 4)
    args.members = args.members or (3 if args.mode in ("group", "share") else 2)
    run = {"group": run_group, "eos": run_eos, "spark": run_spark, "share": run_share}[
        args.mode]
    broker_config: Dict[str, Any] = {"min.insync.replicas": 2}
    users = {}
    if args.sasl:
        broker_config.update({"sasl.enabled.mechanisms": SASL_MECHANISM,
                              "connections.max.reauth.ms": SASL_SESSION_MS})
        users = {SASL_USER: SASL_PASSWORD}
        SECURITY.update({"security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": SASL_MECHANISM, "sasl.username": SASL_USER,
                         "sasl.password": SASL_PASSWORD})
    if args.slow:
        TIMEOUTS["socket.timeout.ms"] = SLOW_REQUEST_TIMEOUT_MS
    with Cluster(brokers=len(BROKERS), broker_config=broker_config, users=users) as cluster:
        check = run(args, cluster)
        if args.sasl:
            auths = cluster.sasl_authentications()
            again = sum(bool(e.details.get("reauthentication")) for e in auths)
            expired = collections.Counter(
                e.api_key for e in cluster.request_log(kind="closed")
                if "session expired" in e.details.get("detail", ""))
            note("sasl:", len(auths), "authentications,", again, "of them again;",
                 sum(expired.values()), "connections closed on an expired session (by the "
                 "API key of the request that came too late:", dict(expired), ")")
            check.expect(again > 0, "connections re-authenticated")
    note("RESULT:", "FAILED" if check.failed else "OK", vars(args))
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
