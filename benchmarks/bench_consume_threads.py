"""Consume throughput of one Consumer shared by several threads, against one thread.

    .venv/bin/python benchmarks/bench_consume_threads.py [--broker tansu|noida|HOST:PORT]
        [--messages 200000] [--partitions 4] [--threads 1,4] [--rounds 3] [--batch 5000]

One topic with P partitions is filled once (N x 100 B, our produce_batch). Then, in every
round and for each thread count T (alternating), a fresh Consumer with manual assignment
of every partition from offset 0 is read by T threads calling ``consume(batch, 0.2)``
until N messages came out in total; every message is checked to come out exactly once
and each batch to keep each partition's order. The clock runs from the start of the
threads to the N-th message (connecting and the first fetches included, as for every
T). Reported: median msg/s per thread count, and each as a ratio against one thread.
Issue 16 asks for 4 threads at least as fast as one.

Also reported, as a second clock: until every thread has returned from its last
``consume()``. With several threads, the ones still waiting when the N-th message comes
out wait out their timeout (0.2 s) for messages that will never come; one thread never
does here, as N is a multiple of the batch size.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from typing import Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fill(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    from kafka_client import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [b"x" * 100] * 10_000
    per = n // partitions
    for part in range(partitions):
        for start in range(0, per, 10_000):
            chunk = values[:min(10_000, per - start)]
            while True:
                try:
                    p.produce_batch(topic, chunk, partition=part)
                    break
                except BufferError:
                    p.poll(0.1)
    assert p.flush(120) == 0
    p.close()


def run(bootstrap: str, topic: str, n: int, partitions: int, threads: int,
        batch: int) -> Tuple[float, float]:
    """Seconds for ``threads`` threads to take ``n`` messages from one Consumer: until
    the N-th message is in hand, and until every thread has returned."""
    from kafka_client import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = set()
    count = [0]
    lock = threading.Lock()
    done = threading.Event()
    nth_at = [0.0]
    failures = []

    def work() -> None:
        while not done.is_set():
            msgs = c.consume(batch, 0.2)
            last = {}
            for m in msgs:
                if m.error() is not None:
                    failures.append(m.error())
                    continue
                prev = last.get(m.partition())
                if prev is not None and m.offset() != prev + 1:
                    failures.append(f"order {m.partition()}: {prev} then {m.offset()}")
                last[m.partition()] = m.offset()
            keys = [(m.partition(), m.offset()) for m in msgs]
            with lock:
                seen.update(keys)
                count[0] += len(keys)
                if count[0] >= n and not done.is_set():
                    nth_at[0] = time.perf_counter()
                    done.set()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    c.close()
    if failures or count[0] != n or len(seen) != n:
        raise SystemExit(f"{threads} threads: {count[0]} messages, {len(seen)} distinct, "
                         f"failures {failures[:3]}")
    return nth_at[0] - t0, elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker", default="tansu")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--threads", default="1,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=5000)
    args = ap.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    broker = None
    if ":" in args.broker:
        bootstrap = args.broker
    else:
        from kafka_client._testing.brokers import make_broker

        broker = make_broker(args.broker).start()
        bootstrap = broker.bootstrap
    try:
        topic = f"bench-threads-{uuid.uuid4().hex[:8]}"
        if broker is not None:
            broker.create_topic(topic, partitions=args.partitions)
        fill(bootstrap, topic, args.messages, args.partitions)
        rates = {t: [] for t in counts}        # to the N-th message
        all_rates = {t: [] for t in counts}    # to every thread returned
        for r in range(args.rounds):
            order = counts if r % 2 == 0 else list(reversed(counts))
            for t in order:
                secs, all_secs = run(bootstrap, topic, args.messages, args.partitions, t,
                                     args.batch)
                rates[t].append(args.messages / secs)
                all_rates[t].append(args.messages / all_secs)
                print(f"round {r + 1}: {t} thread(s): {args.messages / secs:,.0f} msg/s "
                      f"({args.messages / all_secs:,.0f} to all threads returned)",
                      flush=True)
        base = statistics.median(rates[counts[0]])
        all_base = statistics.median(all_rates[counts[0]])
        print(f"\n{args.messages:,} x 100 B in {args.partitions} partitions, "
              f"consume({args.batch}, 0.2), {args.rounds} rounds, broker {args.broker}")
        print("| threads | median msg/s | x one thread | to all returned: msg/s | x one |\n"
              "|---:|---:|---:|---:|---:|")
        for t in counts:
            med = statistics.median(rates[t])
            all_med = statistics.median(all_rates[t])
            print(f"| {t} | {med:,.0f} | {med / base:.2f} | {all_med:,.0f} | "
                  f"{all_med / all_base:.2f} |")
    finally:
        if broker is not None:
            broker.stop()
            broker.cleanup()


if __name__ == "__main__":
    main()
