"""asyncio produce and consume throughput: our ``kafka_client.aio`` (AIOProducer,
AIOConsumer) against confluent-kafka's ``confluent_kafka.aio`` (same API) and aiokafka
(AIOKafkaProducer, AIOKafkaConsumer), on the same broker, in one run, alternated round by
round.

    .venv/bin/python benchmarks/bench_aio.py [--broker tansu|noida] [--messages 200000]
        [--rounds 5] [--partitions 1] [--contenders ours,confluent,aiokafka]
        [--phases produce,consume] [--gather 10000] [--chunk-flush] [--batch 1000]
        [--timeout 300] [--quick] [--markdown FILE] [--profile]

``--quick`` is a smoke run: 20,000 messages, 1 round. ``--partitions 4`` runs the same on
4-partition topics. ``--chunk-flush`` awaits ``p.flush()`` before gathering each chunk of
futures (see confluent below); ``--gather 0`` keeps every future and gathers them all
after the flush. ``--profile`` runs each of our children once more under cProfile (the
event loop's thread only) and prints where its time goes; not part of the table.

Method
------
The broker (``kafka_client._testing.brokers.make_broker``, 127.0.0.1 only) is started
once. Message i's value is 100 bytes: ``i`` as 10 decimal digits, then 90 bytes of fixed
hex text, so that a consumer can tell that every value arrives, once and in order.

*Produce*: in every round each contender, in its own fresh child process and event loop
(``asyncio.run``), sends the N values (made before the clock starts) to a fresh topic the
parent created just before (1 partition, or ``--partitions``), each message's delivery
awaited through the future the library returns, the futures gathered in chunks of
``--gather`` (10,000), then flush (ours/confluent ``await p.flush()`` and the last chunk
gathered; aiokafka the last chunk gathered, then ``await p.flush()``, which finds nothing
left). The clock starts before the first produce call, after the producer is made and
the topic's metadata fetched (``await p.list_topics(topic)`` / ``await
p.partitions_for(topic)``, the same warm start for all), and stops when the flush
returned and every future is resolved; closing is outside it. A future that fails
raises (the contender fails loudly); afterwards the parent counts the topic's records by
Fetch (high watermarks) and requires exactly N.

* ``ours``: ``fut = await p.produce(topic, value)`` (``kafka_client.aio.AIOProducer``:
  the message is encoded on the loop's thread at once; reports are served on the loop as
  the I/O thread wakes it).
* ``confluent``: ``fut = await p.produce(topic, value)`` with the AIOProducer's defaults
  (``batch_size=1000``, ``buffer_timeout=1.0``: messages are buffered in Python and
  handed to librdkafka's ``produce_batch`` 1,000 at a time on an executor thread, which
  then calls ``poll(0)``; the futures resolve in those ``poll`` calls, and in ``flush``).
  Nothing else serves its delivery reports: a chunk's last futures resolve only when the
  next 1,000 are handed over or when its buffer-timeout task finds the buffer idle for
  ``buffer_timeout`` (checked every 0.5 s) and calls ``flush(0)``; so awaiting a chunk
  of futures waits 1-1.5 s each time. ``--chunk-flush`` measures it with an ``await
  p.flush()`` before each chunk's gather (the same call for every contender).
* ``aiokafka``: ``fut = await p.send(topic, value)``, gathered likewise.

Settings, the same for everyone: acks=all (aiokafka ``acks="all"``), linger 5 ms
(``linger.ms`` / ``linger_ms``), no compression, **idempotence off for all** (explicitly
``enable.idempotence=false`` / ``enable_idempotence=False``; it is every library's default
here), no key (each library's partitioner for ``--partitions`` > 1). Batch sizes are each
library's defaults (librdkafka and ours ``batch.size`` 1,000,000 / ``batch.num.messages``
10,000, aiokafka ``max_batch_size`` 16,384).

*Consume*: one topic, filled once before the rounds with the same N values (our
synchronous ``Producer.produce_batch``, partition chosen explicitly: value i goes to
partition i % P), its record count checked by Fetch. In every round each contender, in
its own fresh child process and event loop, reads it from the beginning with manual
assignment (no group join):

* ``ours`` / ``confluent``: ``await c.assign([TopicPartition(t, p, OFFSET_BEGINNING)])``,
  then ``await c.consume(1000, 1.0)`` in a loop (``--batch``); ``group.id`` set (required
  by the API, never joined), ``enable.auto.commit=false``; confluent also
  ``fetch.queue.backoff.ms=0`` and ``enable.partition.eof=false`` (with librdkafka's
  default backoff it pauses fetching for 1 s whenever its queue holds
  ``queued.min.messages``, see ``bench_consume.py``); both ``receive.message.max.bytes``
  1 GiB (noida-db ignores Fetch size limits).
* ``aiokafka``: ``AIOKafkaConsumer(group_id=None, auto_offset_reset="earliest",
  enable_auto_commit=False)``, ``c.assign(tps)``, then ``await c.getmany(timeout_ms=1000,
  max_records=1000)`` in a loop; fetch sizes at its defaults (bigger ones were within the
  noise in ``bench_consume.py``).

Every message is checked as it arrives, by the same few lines for everyone: its offset is
the next one expected in its partition and its value is exactly the value produced there
(a bytes comparison with a list made before the clock starts); the run ends at exactly N
messages (a contender that stalls 60 s, or gets anything else, fails). The clock starts
before the consumer is made (so connecting, metadata and the offset lookup are inside it
for every client, aiokafka's ``await c.start()`` included) and stops at the N-th
message; the table gives the time to the first
message and the rate after it as well, since the start is a large share of a 200,000
message run (the offset lookup for OFFSET_BEGINNING/earliest is part of it).

Reported per contender and phase: median msg/s over the rounds, median CPU seconds per
million messages (``time.process_time()`` of the child over the timed window: **every
thread of the process**, so librdkafka's threads, our I/O thread, the executors' threads
and aiokafka's loop all count), how much of that was the event loop's own thread
(``time.thread_time()`` there: the rest is background threads), the child's peak RSS
(VmHWM), and msg/s and CPU as ratios against the best peer (the non-``ours`` contender with
the highest median msg/s). The order of the contenders rotates every round and is
reversed every other round; each child has a ``--timeout`` (300 s). Versions printed:
Python, our commit (and whether kafka_client/ has uncommitted changes), confluent-kafka /
librdkafka, aiokafka (and whether its Cython codec is loaded), the broker.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from _environment import broker_version, machine  # noqa: E402  (benchmarks/)

CONTENDERS = ("ours", "confluent", "aiokafka")
DISPLAY = {"ours": "ours (kafka_client.aio)", "confluent": "confluent (confluent_kafka.aio)",
           "aiokafka": "aiokafka"}
BIG = 1 << 30
STALL_SECONDS = 60.0
FILLER = (b"0123456789abcdef" * 8)[:90]


class BenchError(RuntimeError):
    """A contender did not do exactly what was asked."""


def value_of(i: int) -> bytes:
    return b"%010d" % i + FILLER


# ---------------------------------------------------------------------------------------
# worker side: one contender, one phase, in its own process and event loop
# ---------------------------------------------------------------------------------------

def peak_rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Clock:
    """Wall, process CPU (all threads) and this thread's CPU over the timed window."""

    first = 0.0
    first_count = 0

    def start(self) -> None:
        self.t0, self.c0, self.l0 = time.perf_counter(), time.process_time(), time.thread_time()

    def first_batch(self, count: int) -> None:
        if not self.first:
            self.first = time.perf_counter() - self.t0
            self.first_count = count

    def stop(self) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = time.process_time() - self.c0
        self.loop_cpu = time.thread_time() - self.l0


async def _gather_chunks(send, values, topic, gather, flush=None):
    """send(topic, value) -> awaitable of a future; gathers every ``gather`` futures
    (after ``await flush()`` when given: --chunk-flush); returns the futures not yet
    gathered."""
    import asyncio

    pending = []
    append = pending.append
    for v in values:
        append(await send(topic, v))
        if len(pending) >= gather:
            if flush is not None:
                await flush()
            await asyncio.gather(*pending)
            pending.clear()
    return pending


async def produce_confluent_style(mod, spec):
    import asyncio

    conf = {"bootstrap.servers": spec["bootstrap"], "acks": "all", "linger.ms": 5,
            "compression.type": "none", "enable.idempotence": False}
    values = [value_of(i) for i in range(spec["messages"])]
    topic, gather = spec["topic"], spec["gather"] or len(values) + 1
    p = mod.AIOProducer(dict(conf))
    clock = Clock()
    try:
        md = await p.list_topics(topic, 10)
        if len(md.topics[topic].partitions) != spec["partitions"]:
            raise BenchError(f"metadata for {topic}: {md.topics[topic].partitions}")
        clock.start()
        pending = await _gather_chunks(p.produce, values, topic, gather,
                                       p.flush if spec.get("chunk_flush") else None)
        left = await p.flush()
        await asyncio.gather(*pending)
        clock.stop()
    finally:
        await p.close()
    if left:
        raise BenchError(f"flush left {left} messages")
    return clock


async def produce_aiokafka(spec):
    import asyncio

    from aiokafka import AIOKafkaProducer

    values = [value_of(i) for i in range(spec["messages"])]
    topic, gather = spec["topic"], spec["gather"] or len(values) + 1
    p = AIOKafkaProducer(bootstrap_servers=spec["bootstrap"], acks="all", linger_ms=5,
                         compression_type=None, enable_idempotence=False)
    await p.start()
    clock = Clock()
    try:
        parts = await p.partitions_for(topic)
        if len(parts) != spec["partitions"]:
            raise BenchError(f"metadata for {topic}: {parts}")
        clock.start()
        pending = await _gather_chunks(p.send, values, topic, gather,
                                       p.flush if spec.get("chunk_flush") else None)
        await asyncio.gather(*pending)
        await p.flush()    # nothing left by now; the same call as the others make
        clock.stop()
    finally:
        await p.stop()
    return clock


class Checker:
    """Per partition: the next offset expected and the values produced there."""

    def __init__(self, n: int, partitions: int) -> None:
        self.n = n
        self.expected = [[value_of(i) for i in range(p, n, partitions)]
                         for p in range(partitions)]
        self.next = [0] * partitions
        self.count = 0
        self.t_progress = time.monotonic()

    def fail(self, p, o, v):
        exp = self.expected[p][o] if 0 <= o < len(self.expected[p]) else None
        raise BenchError(f"partition {p}: got offset {o} value {v[:10]!r}, expected offset "
                         f"{self.next[p]} value {exp[:10] if exp else None!r}")

    def idle(self) -> None:
        if time.monotonic() - self.t_progress > STALL_SECONDS:
            raise BenchError(f"no message for {STALL_SECONDS:.0f} s after {self.count} of "
                             f"{self.n}")

    def final(self) -> None:
        if self.count != self.n or self.next != [len(e) for e in self.expected]:
            raise BenchError(f"got {self.count} messages (next offsets {self.next}), "
                             f"expected {self.n}")


async def consume_confluent_style(mod, kmod, spec, settings):
    conf = {"bootstrap.servers": spec["bootstrap"], "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "receive.message.max.bytes": BIG, **settings}
    chk = Checker(spec["messages"], spec["partitions"])
    expected, nxt, n, batch = chk.expected, chk.next, chk.n, spec["batch"]
    clock = Clock()
    clock.start()
    c = mod.AIOConsumer(conf)
    try:
        await c.assign([kmod.TopicPartition(spec["topic"], p, kmod.OFFSET_BEGINNING)
                        for p in range(spec["partitions"])])
        consume = c.consume
        count = 0
        while count < n:
            msgs = await consume(batch, 1.0)
            if not msgs:
                chk.count = count
                chk.idle()
                continue
            clock.first_batch(len(msgs))
            for m in msgs:
                if m.error() is not None:
                    raise BenchError(f"error message: {m.error()}")
                p, o, v = m.partition(), m.offset(), m.value()
                if o != nxt[p] or v != expected[p][o]:
                    chk.fail(p, o, v)
                nxt[p] = o + 1
            count += len(msgs)
            chk.t_progress = time.monotonic()
            if count > n:
                raise BenchError(f"{count} messages, more than {n}")
        clock.stop()
        chk.count = count
    finally:
        await c.close()
    chk.final()
    return clock


async def consume_aiokafka(spec):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    chk = Checker(spec["messages"], spec["partitions"])
    expected, nxt, n, batch = chk.expected, chk.next, chk.n, spec["batch"]
    clock = Clock()
    clock.start()
    c = AIOKafkaConsumer(bootstrap_servers=spec["bootstrap"], group_id=None,
                         enable_auto_commit=False, auto_offset_reset="earliest")
    await c.start()
    try:
        c.assign([TopicPartition(spec["topic"], p) for p in range(spec["partitions"])])
        getmany = c.getmany
        count = 0
        while count < n:
            got = await getmany(timeout_ms=1000, max_records=batch)
            if not got:
                chk.count = count
                chk.idle()
                continue
            clock.first_batch(sum(len(r) for r in got.values()))
            for tp, recs in got.items():
                p = tp.partition
                for r in recs:
                    o, v = r.offset, r.value
                    if o != nxt[p] or v != expected[p][o]:
                        chk.fail(p, o, v)
                    nxt[p] = o + 1
                count += len(recs)
            chk.t_progress = time.monotonic()
            if count > n:
                raise BenchError(f"{count} messages, more than {n}")
        clock.stop()
        chk.count = count
    finally:
        await c.stop()
    chk.final()
    return clock


async def run_spec(spec):
    name, phase = spec["name"], spec["phase"]
    if name == "ours":
        import kafka_client
        import kafka_client.aio as mod

        if phase == "produce":
            return await produce_confluent_style(mod, spec)
        return await consume_confluent_style(mod, kafka_client, spec, {})
    if name == "confluent":
        import confluent_kafka
        import confluent_kafka.aio as mod

        if phase == "produce":
            return await produce_confluent_style(mod, spec)
        return await consume_confluent_style(mod, confluent_kafka, spec,
                                             {"fetch.queue.backoff.ms": 0,
                                              "enable.partition.eof": False})
    if phase == "produce":
        return await produce_aiokafka(spec)
    return await consume_aiokafka(spec)


def worker(spec: Dict[str, Any]) -> Dict[str, Any]:
    import asyncio

    if spec.get("profile"):
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        clock = asyncio.run(run_spec(spec))
        prof.disable()
        out = io.StringIO()
        st = pstats.Stats(prof, stream=out).strip_dirs().sort_stats("tottime")
        st.print_stats(25)
        st.sort_stats("cumulative").print_stats(25)
        print(out.getvalue(), file=sys.stderr)
    else:
        clock = asyncio.run(run_spec(spec))
    return {"wall": clock.wall, "cpu": clock.cpu, "loop_cpu": clock.loop_cpu,
            "first": clock.first, "first_count": clock.first_count,
            "rss_mb": peak_rss_mb()}


# ---------------------------------------------------------------------------------------
# parent side
# ---------------------------------------------------------------------------------------

def steady(r: Dict[str, Any], n: int) -> float:
    """Consume rate after the first batch arrived."""
    rest = r["wall"] - r["first"]
    return (n - r["first_count"]) / rest if rest > 0 else float("nan")


def run_worker(spec: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker",
                            json.dumps(spec)], capture_output=True, text=True, cwd=ROOT,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{spec['name']} {spec['phase']}: no result within {timeout:.0f} s")
    lines = r.stdout.strip().splitlines()
    if spec.get("profile"):
        print(r.stderr, flush=True)
    if r.returncode or not lines:
        raise BenchError(f"{spec['name']} {spec['phase']} failed (exit {r.returncode}):\n"
                         f"{r.stderr[-3000:]}")
    return json.loads(lines[-1])


def _connect(bootstrap: str):
    from kafka_client._testing.blocking import BlockingConnection

    host, port = bootstrap.rsplit(":", 1)
    # noida-db answers a Fetch with the whole log whatever max_bytes says
    return BlockingConnection(host, int(port), max_frame_size=BIG)


def records_in(bootstrap: str, topic: str, partitions: int) -> int:
    """Sum of the partitions' high watermarks, by Fetch (Tansu 0.6 answers
    ListOffsets(latest) wrongly)."""
    from kafka_client._testing import simple
    from kafka_client._testing.simple import ApiKey

    conn = _connect(bootstrap)
    try:
        version = conn.version_for(ApiKey.FETCH)
        tid = simple.topic_ids(conn, [topic])[topic] if version >= 13 else None
        if tid is not None and tid.int == 0:   # noida-db: no topic ids, Fetch by name
            version, tid = 12, None
        return sum(simple.fetch_once(conn, topic, p, 0, version=version, topic_id=tid,
                                     partition_max_bytes=1024, max_bytes=1024
                                     ).high_watermark
                   for p in range(partitions))
    finally:
        conn.close()


def fill_topic(broker, topic: str, n: int, partitions: int) -> float:
    """The consume phase's topic: value i to partition i % partitions."""
    from kafka_client import Producer

    broker.create_topic(topic, partitions=partitions)
    t0 = time.perf_counter()
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    deadline = time.monotonic() + 30
    while True:   # metadata first, so that produce_batch takes its bulk path
        t = p.list_topics(topic, timeout=10).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            break
        if time.monotonic() > deadline:
            raise BenchError(f"topic {topic} not in metadata after create")
        time.sleep(0.1)
    chunk = 10000
    for start in range(0, n, chunk * partitions):
        stop = min(n, start + chunk * partitions)
        for part in range(partitions):
            values = [value_of(i) for i in range(start + part, stop, partitions)]
            while values:
                try:
                    p.produce_batch(topic, values, partition=part)
                    break
                except BufferError:
                    p.poll(0.05)
        p.poll(0)
    left = p.flush(300)
    p.close()
    if left:
        raise BenchError(f"fill: {left} messages not delivered")
    got = records_in(broker.bootstrap, topic, partitions)
    if got != n:
        raise BenchError(f"fill: broker holds {got} records, expected {n}")
    return time.perf_counter() - t0


def versions(broker) -> List[str]:
    from importlib import metadata

    out = [f"Python {platform.python_version()}"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=ROOT).stdout.strip() or f"? ({ROOT}: no git)"
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "kafka_client"],
                               capture_output=True, text=True, cwd=ROOT).stdout.strip()
        out.append(f"kafka_client at {head}" + (" (+ uncommitted changes in kafka_client/)"
                                                if dirty else ""))
    except OSError:
        out.append("kafka_client at ? (no git)")
    import confluent_kafka

    out.append(f"confluent-kafka {metadata.version('confluent-kafka')} "
               f"(librdkafka {confluent_kafka.libversion()[0]})")
    try:
        v = metadata.version("aiokafka")
        try:
            from aiokafka.record import _crecords  # noqa: F401
            v += " (Cython record codec)"
        except ImportError:
            v += " (pure-Python record codec!)"
    except metadata.PackageNotFoundError:
        v = "not installed"
    out.append(f"aiokafka {v}")
    out.append(f"broker {broker_version(broker)}")
    return out


def loadavg() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--broker", default="tansu", choices=("tansu", "noida"))
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--phases", default="produce,consume")
    ap.add_argument("--gather", type=int, default=10000,
                    help="futures gathered per chunk (0: all of them after the flush)")
    ap.add_argument("--chunk-flush", action="store_true",
                    help="await p.flush() before gathering each chunk of futures")
    ap.add_argument("--batch", type=int, default=1000, help="messages per consume call")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds one child (one contender, one phase) may take")
    ap.add_argument("--quick", action="store_true", help="20,000 messages, 1 round")
    ap.add_argument("--markdown", help="also write the tables to this file")
    ap.add_argument("--profile", action="store_true",
                    help="afterwards, run each of ours once more under cProfile")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if args.quick:
        args.messages, args.rounds = 20_000, 1
    names = [s.strip() for s in args.contenders.split(",") if s.strip()]
    phases = [s.strip() for s in args.phases.split(",") if s.strip()]
    for n in names:
        if n not in CONTENDERS:
            ap.error(f"unknown contender {n!r}: choose from {', '.join(CONTENDERS)}")
    for ph in phases:
        if ph not in ("produce", "consume"):
            ap.error(f"unknown phase {ph!r}")

    from kafka_client._testing.brokers import make_broker

    load_before = loadavg()
    broker = make_broker(args.broker)
    broker.start()
    results: Dict[tuple, List[Dict[str, Any]]] = {(n, ph): [] for n in names for ph in phases}
    failed: Dict[tuple, str] = {}
    base = {"bootstrap": broker.bootstrap, "messages": args.messages,
            "partitions": args.partitions, "gather": args.gather, "batch": args.batch,
            "chunk_flush": args.chunk_flush}
    try:
        consume_topic = None
        if "consume" in phases:
            consume_topic = f"bench-aio-c-{uuid.uuid4().hex[:8]}"
            secs = fill_topic(broker, consume_topic, args.messages, args.partitions)
            print(f"filled {consume_topic}: {args.messages:,} x 100 B, {args.partitions} "
                  f"partition(s), {secs:.1f} s, count checked by Fetch", flush=True)
        for rnd in range(args.rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            if rnd % 2:
                order.reverse()
            for ph in phases:
                for name in order:
                    if (name, ph) in failed:
                        continue
                    spec = dict(base, name=name, phase=ph)
                    if ph == "produce":
                        spec["topic"] = f"bench-aio-p-{uuid.uuid4().hex[:8]}"
                        broker.create_topic(spec["topic"], partitions=args.partitions)
                    else:
                        spec["topic"] = consume_topic
                    try:
                        r = run_worker(spec, args.timeout)
                        if ph == "produce":
                            got = records_in(broker.bootstrap, spec["topic"],
                                             args.partitions)
                            if got != args.messages:
                                raise BenchError(f"{name} produce: the broker holds {got} "
                                                 f"records, expected {args.messages}")
                    except BenchError as e:
                        failed[name, ph] = str(e).strip().splitlines()[-1][:200]
                        print(f"FAILED {name} {ph}: {e}", file=sys.stderr, flush=True)
                        continue
                    results[name, ph].append(r)
                    print(f"  round {rnd + 1}/{args.rounds} {ph:7s} {name:9s} "
                          f"{args.messages / r['wall']:>10,.0f} msg/s  "
                          f"cpu {r['cpu'] / args.messages * 1e6:5.2f} s/M "
                          f"(loop thread {r['loop_cpu'] / args.messages * 1e6:5.2f})  "
                          f"{r['rss_mb']:4.0f} MB"
                          + (f"  first after {r['first'] * 1000:4.0f} ms, then "
                             f"{steady(r, args.messages):>10,.0f} msg/s" if ph == "consume"
                             else "") + f"  load {loadavg()}", flush=True)
        if args.profile:
            for ph in phases:
                spec = dict(base, name="ours", phase=ph, profile=True)
                if ph == "produce":
                    spec["topic"] = f"bench-aio-p-{uuid.uuid4().hex[:8]}"
                    broker.create_topic(spec["topic"], partitions=args.partitions)
                else:
                    spec["topic"] = consume_topic
                print(f"\n=== cProfile, ours {ph} (event loop thread only) ===", flush=True)
                run_worker(spec, args.timeout)
        vers = versions(broker)
    finally:
        broker.stop()
        broker.cleanup()

    lines = [f"{args.messages:,} x 100 B, {args.partitions} partition(s), broker "
             f"{args.broker}, {args.rounds} round(s), medians; acks=all, linger 5 ms, no "
             f"compression, idempotence off; futures gathered every {args.gather:,}"
             f"{' after an awaited flush()' if args.chunk_flush else ''}; "
             f"consume {args.batch:,} per call", ""]
    lines.append("| phase | contender | msg/s | x best peer | CPU s per M msgs | "
                 "of which loop thread | x best peer | peak RSS MB | first message ms "
                 "| msg/s after it |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    ok = True
    for ph in phases:
        med = {}
        for n in names:
            rs = results[n, ph]
            if rs and (n, ph) not in failed:
                med[n] = (statistics.median(args.messages / r["wall"] for r in rs),
                          statistics.median(r["cpu"] / args.messages * 1e6 for r in rs),
                          statistics.median(r["loop_cpu"] / args.messages * 1e6 for r in rs),
                          max(r["rss_mb"] for r in rs),
                          statistics.median(r["first"] * 1000 for r in rs),
                          statistics.median(steady(r, args.messages) for r in rs))
        peers = [n for n in med if n != "ours"]
        best = max(peers, key=lambda n: med[n][0]) if peers else None
        for n in names:
            if n not in med:
                lines.append(f"| {ph} | {DISPLAY[n]} | FAILED: {failed.get((n, ph), '?')} "
                             f"| | | | | | | |")
                ok = False
                continue
            rate, cpu, lcpu, rss, first, after = med[n]
            xr = f"{rate / med[best][0]:.2f}" if best else "-"
            xc = f"{cpu / med[best][1]:.2f}" if best else "-"
            tail = (f" {first:.0f} | {after:,.0f} |" if ph == "consume" else " | |")
            lines.append(f"| {ph} | {DISPLAY[n]} | {rate:,.0f} | {xr} | {cpu:.2f} | "
                         f"{lcpu:.2f} | {xc} | {rss:.0f} |" + tail)
    lines += ["", f"Machine: {machine()}; load average {load_before} before, {loadavg()} "
              f"after", "Versions: " + "; ".join(vers)]
    text = "\n".join(lines)
    print("\n" + text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
