"""End-to-end latency, producer to consumer, ours against confluent-kafka, same run.

    .venv/bin/python benchmarks/bench_latency.py [--broker tansu|noida|cluster]
        [--rates 1000,20000] [--seconds 3] [--rounds 2]

For each rate, each pair (producer library / consumer library: ours/ours,
confluent/confluent, and the two mixed pairs that tell which side a difference comes
from) sends ``rate x seconds`` messages of 100 bytes to partition 0 of a fresh topic, paced
to the rate, with both clients at their defaults (linger.ms 5, fetch.wait.max.ms 500).
The consumer runs in a child process, assigned to the partition from the first paced
message on (no group: Tansu holds a first JoinGroup for half the session timeout). Each
message carries ``time.monotonic()`` taken just before ``produce()`` (the clock is the
same in both processes); the consumer records now minus that. Every message must arrive
once and in order, or the round fails.

Pacing: before each message the producer calls ``poll(wait)`` while more than 0.5 ms
remain, then spins on the clock, holding the GIL as an application busy in Python
between messages would: at 20,000 msg/s (50 us apart) it always spins. Pairs alternate
order from round to round. Reported: the median, 99th and 99.9th percentile of the
delays in ms, per pair and rate, each the median over the rounds.

``--broker cluster`` is one broker of kafka_client.testing, which holds a Fetch until data
comes as Kafka does; Tansu 0.6 answers late on its own (about 130 ms on average for
either client here); noida-db 0.2.3 answers a Fetch at once, empty (docs/consumer.md,
"Fetches answered at once").
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import statistics
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka_client._testing.brokers import make_broker  # noqa: E402

SIZE = 100
_STAMP = struct.Struct(">dI")   # monotonic time before produce(), sequence number
PAIRS = (("ours", "ours"), ("confluent", "confluent"), ("ours", "confluent"),
         ("confluent", "ours"))


def _client(lib: str) -> Any:
    if lib == "ours":
        import kafka_client
        return kafka_client
    import confluent_kafka
    return confluent_kafka


def consume(lib: str, bootstrap: str, topic: str, count: int,
            ready: "multiprocessing.Queue", out: "multiprocessing.Queue") -> None:
    """Child process: read ``count`` messages from partition 0 (offset 1 on), put the
    list of delays (seconds) in ``out``, or an error text."""
    kc = _client(lib)
    c = kc.Consumer({"bootstrap.servers": bootstrap, "group.id": "latency-bench",
                     "enable.auto.commit": False})
    try:
        c.assign([kc.TopicPartition(topic, 0, 1)])
        c.poll(0.2)   # connected and fetching before the first message
        ready.put(True)
        delays: List[float] = []
        deadline = time.monotonic() + 60 + count / 1000
        while len(delays) < count and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            now = time.monotonic()
            stamp, seq = _STAMP.unpack_from(msg.value())
            if seq != len(delays):
                out.put(f"{lib} consumer: message {seq} arrived as number {len(delays)}")
                return
            delays.append(now - stamp)
        out.put(delays if len(delays) == count
                else f"{lib} consumer: {len(delays)} of {count} messages in time")
    finally:
        c.close()


def one_run(producer_lib: str, consumer_lib: str, bootstrap: str, rate: int,
            seconds: float) -> List[float]:
    kc = _client(producer_lib)
    topic = f"latency-{uuid.uuid4().hex[:8]}"
    count = int(rate * seconds)
    p = kc.Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, b"first", partition=0)   # creates the topic; read from offset 1
    if p.flush(30):
        raise RuntimeError(f"{producer_lib} producer: the topic's first message was not delivered")
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=consume, args=(consumer_lib, bootstrap, topic, count, ready, out))
    child.start()
    try:
        ready.get(timeout=60)
        pad = b"x" * (SIZE - _STAMP.size)
        interval = 1.0 / rate
        start = time.monotonic() + 0.05
        for i in range(count):
            due = start + i * interval
            while True:
                left = due - time.monotonic()
                if left <= 0:
                    break
                if left > 0.0005:
                    p.poll(left - 0.0005)
            p.produce(topic, _STAMP.pack(time.monotonic(), i) + pad, partition=0)
            p.poll(0)
        if p.flush(30):
            raise RuntimeError(f"{producer_lib} producer: messages left undelivered")
        result = out.get(timeout=120)
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
    if isinstance(result, str):
        raise RuntimeError(result)
    return result


def percentile(sorted_values: List[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", choices=("tansu", "noida", "cluster"), default="cluster")
    parser.add_argument("--rates", default="1000,20000",
                        help="messages per second, comma separated")
    parser.add_argument("--seconds", type=float, default=3.0, help="per pair, rate and round")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    rates = [int(r) for r in args.rates.split(",") if r.strip()]

    if args.broker == "cluster":
        from kafka_client.testing import Cluster
        cluster = Cluster(brokers=1)
        cluster.start()
        bootstrap, stop = cluster.address(1), cluster.stop
    else:
        broker = make_broker(args.broker).start()
        bootstrap, stop = broker.bootstrap, broker.stop
    results: Dict[Tuple[int, str, str], List[Tuple[float, float, float]]] = {}
    try:
        for r in range(args.rounds):
            for rate in rates:
                order = PAIRS if r % 2 == 0 else tuple(reversed(PAIRS))
                for pl, cl in order:
                    delays = sorted(one_run(pl, cl, bootstrap, rate, args.seconds))
                    results.setdefault((rate, pl, cl), []).append(
                        (statistics.median(delays), percentile(delays, 0.99),
                         percentile(delays, 0.999)))
    finally:
        stop()

    import confluent_kafka
    print(f"End-to-end latency on {args.broker}, {args.rounds} round(s) x {args.seconds:g} s "
          f"per pair and rate, {SIZE} B messages, one partition, default configurations")
    print(f"{'rate/s':>7} {'producer':>10} {'consumer':>10} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'p99.9 ms':>9}   (medians over rounds)")
    for rate in rates:
        for pl, cl in PAIRS:
            rows = results[(rate, pl, cl)]
            mid = [statistics.median(row[k] for row in rows) * 1000 for k in range(3)]
            print(f"{rate:>7} {pl:>10} {cl:>10} {mid[0]:>8.2f} {mid[1]:>8.2f} {mid[2]:>9.2f}")
    print(f"confluent-kafka {confluent_kafka.version()} (librdkafka "
          f"{confluent_kafka.libversion()[0]}), Python {platform.python_version()}, "
          f"{platform.machine()}, {multiprocessing.cpu_count()} CPUs, load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
