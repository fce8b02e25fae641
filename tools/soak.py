"""Soak runs: our producer and consumers against the multi-broker test cluster while a
seeded chaos thread moves leaders and coordinators, stops and starts brokers, cuts
connections, injects retriable errors and latency, and replaces group members; then the
delivery guarantees are checked on what the brokers hold.

    .venv/bin/python tools/soak.py group --seed 7 [--protocol consumer] [--static]
        [--arrow] [--compression zstd] [--timeout-ms 3000] [--acks 1 --no-idempotence]
        [--batches] [--threads 3] [--restarts]
    .venv/bin/python tools/soak.py eos --seed 7 [--protocol consumer] [--restarts]

``group``: an idempotent producer writes ``--messages`` numbered messages (keyed) at a
steady rate over most of ``--seconds`` while a group of ``--members`` consumers reads
them, committing after each batch. Checked afterwards: every message got exactly one
delivery report; every acknowledged message is in the log (acks=all); with idempotence
nothing is in the log twice and each key's messages are in produced order; the group
read every message in the log; its committed offsets are the partitions' high
watermarks.

``eos``: consume-transform-produce with transactions (docs/transactions.md's loop) by
``--members`` processors sharing a group, each restarted now and then with its
``transactional.id``; the transaction and group coordinators move too. Checked: a
read_committed reader of the output sees each input exactly once; the committed input
offsets are the high watermarks.

Exit status 0 when every check holds. Each run prints what the chaos did and a summary;
``--seed`` makes the chaos's choices repeatable (not the timing). See docs/reliability.md.
"""
from __future__ import annotations

import argparse
import collections
import random
import struct
import sys
import threading
import time
import traceback
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from kafka_client import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from kafka_client.testing import Cluster

BROKERS = (1, 2, 3)
PAD = b"x" * 92
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
                 churn: Callable[[random.Random], str], restarts: bool = False) -> None:
        super().__init__(name="chaos", daemon=True)
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.topics = topics
        self.errors = errors
        self.coordinators = coordinators
        self.churn = churn
        self.restarts = restarts
        self.stop = threading.Event()
        self.down: Optional[int] = None
        self.slow: Optional[int] = None
        self.counts: Dict[str, int] = collections.Counter()
        self.stopped_at = 0.0

    def run(self) -> None:
        kinds = ["leader", "leader", "broker", "coordinator", "cut", "inject", "latency",
                 "evict", "churn"]
        if self.restarts:   # an option, so that the seeds without it choose as before
            kinds += ["restart", "restart"]
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
        if self.slow is None:
            self.slow = self.rng.choice(BROKERS)
            seconds = self.rng.uniform(0.02, 0.3)
            self.cluster.set_latency(seconds, broker=self.slow)
            return f"broker {self.slow}: {seconds:.2f} s"
        self.cluster.set_latency(0, broker=self.slow)
        slow, self.slow = self.slow, None
        return f"broker {slow}: off"

    def _evict(self) -> str:
        return f"{self.cluster.evict_fetch_sessions()} fetch sessions"

    def _churn(self) -> str:
        return self.churn(self.rng)


def read_all(cluster: Cluster, topic: str, partitions: int,
             isolation: str = "read_uncommitted") -> List[Message]:
    """Every record of ``topic``, read to the end of each partition."""
    reader = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
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


def committed_offsets(cluster: Cluster, group: str, topic: str,
                      partitions: int) -> Dict[int, int]:
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
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


# -- group ---------------------------------------------------------------------------------
def run_group(args: argparse.Namespace, cluster: Cluster) -> Checks:
    topic, group, partitions = "soak", "soak-group", args.partitions
    cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    boot = cluster.bootstrap_servers
    reports: Dict[int, int] = collections.Counter()
    failures: Dict[str, int] = collections.Counter()
    acknowledged: Set[int] = set()
    consumed: List[Tuple[str, int, int, int]] = []   # member, partition, offset, number
    lock = threading.Lock()
    crashes: List[str] = []
    produced = threading.Event()

    def on_delivery(err, msg) -> None:
        n = number(msg.value())
        reports[n] += 1
        if err is None:
            acknowledged.add(n)
        else:
            failures[err.name()] += 1

    def produce() -> None:
        p = Producer({"bootstrap.servers": boot, "enable.idempotence": args.idempotence,
                      "acks": args.acks, "linger.ms": 5, "compression.type": args.compression,
                      "message.timeout.ms": args.timeout_ms, "on_delivery": on_delivery})
        rate = args.messages / (args.seconds * 0.6)
        start = time.monotonic()
        step = 1000 if args.batches else 1
        try:
            for first in range(0, args.messages, step):
                numbers = range(first, min(first + step, args.messages))
                values = [struct.pack(">Q", n) + PAD for n in numbers]
                keys = [b"%d" % (n % 97) for n in numbers]
                if args.batches:   # the columnar form: all queued or none
                    queue(p, lambda: p.produce_batch(topic, values, keys=keys))
                else:
                    queue(p, lambda: p.produce(topic, values[0], key=keys[0]))
                if first % 1000 == 0:
                    pace(p, first, rate, start)
            note("producer: all produced; flush left", p.flush(300))
            produced.set()
        except Exception:
            crashes.append("producer: " + traceback.format_exc())
        finally:
            p.close()

    class Member(threading.Thread):
        made = 0

        def __init__(self, slot: int) -> None:
            Member.made += 1
            super().__init__(name=f"m{Member.made}", daemon=True)
            self.slot = slot
            self.stop = threading.Event()
            self.consumer: Optional[Consumer] = None

        def run(self) -> None:
            conf = {"bootstrap.servers": boot, "group.id": group, "client.id": self.name,
                    "enable.auto.commit": False, "auto.offset.reset": "earliest",
                    "group.protocol": args.protocol}
            if args.static:
                conf["group.instance.id"] = f"static-{self.slot}"
            if args.protocol == "classic":
                conf.update({"partition.assignment.strategy": args.strategy,
                             "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
            try:
                self.consumer = c = Consumer(conf)
                c.subscribe([topic])
                # More threads read the same consumer (each message to one of them); this
                # one also commits what has been returned to any of them.
                helpers = [threading.Thread(target=self._read_only, args=(c,), daemon=True)
                           for _ in range(args.threads - 1)]
                for h in helpers:
                    h.start()
                while not self.stop.is_set():
                    got = self._read(c)
                    if not got:
                        continue
                    with lock:
                        consumed.extend(got)
                    try:
                        c.commit(asynchronous=False)
                    except KafkaException as exc:   # a rebalance, a coordinator move
                        note(self.name, "commit failed:", exc.args[0].name())
                for h in helpers:
                    h.join()
                # A clean shutdown commits what was read (the last commit may have failed
                # in the chaos); nothing was read since, so nothing new to commit is fine.
                try:
                    retrying(c.commit, None, None, False)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError._NO_OFFSET:
                        raise
                c.close()
            except Exception:
                crashes.append(f"{self.name}: " + traceback.format_exc())

        def _read_only(self, c: Consumer) -> None:
            try:
                while not self.stop.is_set():
                    got = self._read(c)
                    with lock:
                        consumed.extend(got)
            except Exception:
                crashes.append(f"{self.name} (reading thread): " + traceback.format_exc())

        def _read(self, c: Consumer) -> List[Tuple[str, int, int, int]]:
            if args.arrow:
                batch = c.consume_arrow(500, 0.2)
                return [(self.name, p, o, number(v)) for p, o, v in zip(
                    batch.column("partition").to_pylist(), batch.column("offset").to_pylist(),
                    batch.column("value").to_pylist())]
            out = []
            for m in c.consume(500, 0.2):
                if m.error() is None:
                    out.append((self.name, m.partition(), m.offset(), number(m.value())))
                elif not m.error().retriable():
                    note(self.name, "error:", m.error())
            return out

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
    producer = threading.Thread(target=produce, name="producer", daemon=True)
    producer.start()
    chaos = Chaos(cluster, args.seed, [(topic, partitions)], errors=[
        ("Produce", "NOT_LEADER_OR_FOLLOWER"), ("Produce", "REQUEST_TIMED_OUT"),
        ("Produce", "NOT_ENOUGH_REPLICAS"), ("Fetch", "NOT_LEADER_OR_FOLLOWER"),
        ("Fetch", "UNKNOWN_SERVER_ERROR"), ("OffsetCommit", "COORDINATOR_NOT_AVAILABLE"),
        ("OffsetCommit", "NOT_COORDINATOR"), ("Heartbeat", "NOT_COORDINATOR"),
        ("OffsetFetch", "COORDINATOR_LOAD_IN_PROGRESS"),
        ("Metadata", "LEADER_NOT_AVAILABLE")], coordinators=[{"group": group}], churn=churn,
        restarts=args.restarts)
    chaos.start()
    time.sleep(args.seconds)
    chaos.stop.set()
    chaos.join()
    producer.join(args.timeout_ms / 1000 + 300)

    in_log = {number(m.value()): m for m in read_all(cluster, topic, partitions)}
    deadline = time.monotonic() + 90
    report_at = time.monotonic() + 5
    while time.monotonic() < deadline:
        with lock:
            seen = {c[3] for c in consumed}
            reached = {}
            for _, p, offset, _ in consumed:
                reached[p] = max(reached.get(p, -1), offset + 1)
        if seen >= set(in_log):
            break
        if time.monotonic() >= report_at:   # what a slow catch-up waits for
            report_at += 5
            note("group: still reading; read up to", dict(sorted(reached.items())),
                 "assignments", {m.name: sorted(tp.partition for tp in m.consumer.assignment())
                                 for m in members if m.consumer is not None and m.is_alive()})
        time.sleep(0.2)
    note("group: caught up", round(time.monotonic() - chaos.stopped_at, 1),
         "s after the chaos stopped")
    for m in members:
        m.stop.set()
    for m in members:
        m.join(30)
    check = Checks()
    check.expect(not crashes, f"no client thread failed {crashes[:1]}")
    check.expect(produced.is_set(), "the producer finished")
    check.expect(len(reports) == args.messages and set(reports.values()) == {1},
                 f"one delivery report per message ({len(reports)} messages reported; "
                 f"errors {dict(failures)})")
    if args.acks in ("all", "-1"):   # acks=1 may lose what the leader alone had
        lost = acknowledged - set(in_log)
        check.expect(not lost, f"every acknowledged message is in the log ({len(lost)} not)")
    records = read_all(cluster, topic, partitions)
    numbers = [number(m.value()) for m in records]
    if args.idempotence:
        check.expect(len(numbers) == len(set(numbers)),
                     f"nothing twice in the log ({len(numbers) - len(set(numbers))} twice)")
        last: Dict[bytes, int] = {}
        disordered = 0
        for m in records:
            n = number(m.value())
            if last.get(m.key(), -1) > n:
                disordered += 1
            last[m.key()] = n
        check.expect(disordered == 0, f"each key's messages in order ({disordered} not)")
    missed = set(in_log) - seen
    check.expect(not missed, f"the group read every message in the log ({len(missed)} not)")
    twice = len(consumed) - len({c[3] for c in consumed})
    note("group: read", len(consumed), "messages,", twice, "more than once")
    marks = high_watermarks(cluster, topic)
    committed = committed_offsets(cluster, group, topic, partitions)
    check.expect(committed == marks, f"the group's committed offsets {committed} are the "
                 f"high watermarks {marks}")
    return check


# -- eos -----------------------------------------------------------------------------------
def run_eos(args: argparse.Namespace, cluster: Cluster) -> Checks:
    source, sink, group, partitions = "soak-in", "soak-out", "soak-eos", args.partitions
    for topic in (source, sink):
        cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    boot = cluster.bootstrap_servers
    crashes: List[str] = []
    aborts: Dict[str, int] = collections.Counter()

    def fill() -> None:
        # Idempotent: each input once in the log, so each output once is checkable.
        p = Producer({"bootstrap.servers": boot, "linger.ms": 5, "enable.idempotence": True})
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

        def run(self) -> None:
            try:
                self._run()
            except Exception:
                crashes.append(f"{self.name}: " + traceback.format_exc())

        def _run(self) -> None:
            conf = {"bootstrap.servers": boot, "group.id": group, "client.id": self.name,
                    "isolation.level": "read_committed", "enable.auto.commit": False,
                    "auto.offset.reset": "earliest", "group.protocol": args.protocol}
            if args.protocol == "classic":
                conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
            consumer = Consumer(conf)
            consumer.subscribe([source])
            producer = Producer({"bootstrap.servers": boot, "client.id": self.name,
                                 "transactional.id": self.transactional_id})
            producer.init_transactions(60)
            while not self.stop.is_set():
                msgs = [m for m in consumer.consume(300, 0.3) if m.error() is None]
                if not msgs:
                    continue
                producer.begin_transaction()
                try:
                    for m in msgs:
                        producer.produce(sink, m.value(), partition=m.partition())
                    producer.send_offsets_to_transaction(
                        consumer.position(consumer.assignment()),
                        consumer.consumer_group_metadata(), 30)
                    retrying(producer.commit_transaction, 30)
                except KafkaException as exc:
                    if exc.args[0].fatal():
                        raise
                    aborts[exc.args[0].name()] += 1
                    retrying(producer.abort_transaction, 30)
                    offsets = retrying(consumer.committed, consumer.assignment(), 30)
                    for tp in offsets:
                        consumer.seek(TopicPartition(
                            tp.topic, tp.partition,
                            tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
            consumer.close()
            producer.close()

    processors = [Processor(f"soak-tx-{i}") for i in range(args.members)]

    def churn(rng: random.Random) -> str:
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
                                           for p in processors], churn=churn,
        restarts=args.restarts)
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
    out = [number(m.value()) for m in read_all(cluster, sink, partitions, "read_committed")]
    check = Checks()
    check.expect(not crashes, f"no processor failed {crashes[:1]}")
    check.expect(sorted(out) == list(range(args.messages)),
                 f"read_committed output: each input once ({len(out)} records, "
                 f"{len(set(out))} distinct of {args.messages})")
    marks = high_watermarks(cluster, source)
    committed = committed_offsets(cluster, group, source, partitions)
    check.expect(committed == marks, f"the committed input offsets {committed} are the high "
                 f"watermarks {marks}")
    note("aborted transactions by error:", dict(aborts))
    return check


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
    ap.add_argument("mode", choices=("group", "eos"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=30.0, help="how long the chaos lasts")
    ap.add_argument("--messages", type=int, default=None,
                    help="default 100,000 (group), 20,000 (eos)")
    ap.add_argument("--partitions", type=int, default=None, help="default 6 (group), 4 (eos)")
    ap.add_argument("--members", type=int, default=None, help="default 3 (group), 2 (eos)")
    ap.add_argument("--restarts", action="store_true",
                    help="the chaos also restarts brokers (logs reloaded from disk)")
    ap.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    ap.add_argument("--strategy", default="cooperative-sticky")
    ap.add_argument("--static", action="store_true", help="group.instance.id per member")
    ap.add_argument("--arrow", action="store_true", help="members read with consume_arrow()")
    ap.add_argument("--compression", default="none")
    ap.add_argument("--batches", action="store_true",
                    help="the producer queues 1,000 messages a call (produce_batch)")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads calling consume() on each member")
    ap.add_argument("--acks", default="all")
    ap.add_argument("--no-idempotence", dest="idempotence", action="store_false")
    ap.add_argument("--timeout-ms", type=int, default=300_000, help="message.timeout.ms")
    args = ap.parse_args(argv)
    group = args.mode == "group"
    args.messages = args.messages or (100_000 if group else 20_000)
    args.partitions = args.partitions or (6 if group else 4)
    args.members = args.members or (3 if group else 2)
    with Cluster(brokers=len(BROKERS), broker_config={"min.insync.replicas": 2}) as cluster:
        check = (run_group if group else run_eos)(args, cluster)
    note("RESULT:", "FAILED" if check.failed else "OK", vars(args))
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
