"""What incremental fetch sessions (KIP-227) save: our Consumer on many partitions of
which few move, with sessions (the default) and with every Fetch a full one, in the same
run, against the test cluster (kafka_client.testing), which keeps sessions as Kafka does.

    .venv/bin/python benchmarks/bench_fetch_sessions.py [--partitions 1000] [--hot 4]
        [--seconds 5] [--rate 2000] [--rounds 5]

One broker, a topic of ``--partitions`` partitions. Each round, for each mode (the order
alternates from round to round), a fresh Consumer is assigned every partition from the
end and reads while a producer in this process sends ``--rate`` messages of 100 B a
second, spread over ``--hot`` partitions, for ``--seconds``: a stream of small Fetch
answers, the case sessions are for. Each message must be read exactly once; measured:
the Fetch requests made, the partitions each names and each answer lists (from the
cluster's request log), the CPU of the consumer's I/O thread (which builds the requests
and reads the answers) per Fetch, the whole process's CPU (consume loop and producer
included, the same in both modes) and the cluster process's CPU.

"Without sessions" replaces FetchSession.plan with one that always plans a sessionless
full Fetch (Fetch epoch -1, every partition named), which is what the consumer did before
sessions and what it does with a broker that opens none.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka_client import Consumer, Producer, TopicPartition  # noqa: E402
from kafka_client.consumer import fetch_session  # noqa: E402
from kafka_client.testing import Cluster  # noqa: E402

_plan_with_sessions = fetch_session.FetchSession.plan


def _plan_without_sessions(self, wanted, version):
    return fetch_session.FetchPlan(0, fetch_session.FINAL_EPOCH, wanted, [])


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _thread_cpu(name_prefix: str, before: Dict[int, float]) -> float:
    """CPU of this process's threads whose name starts with ``name_prefix`` (the
    consumer's I/O thread) since ``before`` (native id -> CPU s, updated)."""
    total = 0.0
    for t in threading.enumerate():
        if t.name.startswith(name_prefix) and t.native_id is not None:
            try:
                with open(f"/proc/self/task/{t.native_id}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except FileNotFoundError:
                continue
            now = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            total += now - before.get(t.native_id, 0.0)
            before[t.native_id] = now
    return total


def one_round(cluster: Cluster, topic: str, partitions: int, hot: int, seconds: float,
              rate: int, sessions: bool) -> Dict[str, float]:
    fetch_session.FetchSession.plan = _plan_with_sessions if sessions \
        else _plan_without_sessions
    client = f"bench-{'s' if sessions else 'f'}-{time.monotonic_ns()}"
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": client,
                  "fetch.wait.max.ms": 100, "enable.partition.eof": False})
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 1})
    c.assign([TopicPartition(topic, q, -1) for q in range(partitions)])  # from the end
    deadline = time.monotonic() + 10
    while not all(tp.offset >= 0 for tp in c.position(c.assignment())):
        c.consume(100, 0.05)
        assert time.monotonic() < deadline, "positions not resolved"
    since = cluster.clear_request_log()
    got = 0
    stop = threading.Event()

    def produce() -> None:
        n = 0
        start = time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - start) * rate)
            while n < due:
                p.produce(topic, b"x" * 100, partition=n % hot)
                n += 1
            p.poll(0)
            time.sleep(0.001)
        p.flush(10)
        sent[0] = n

    sent = [0]
    t = threading.Thread(target=produce)
    io_cpu: Dict[int, float] = {}
    _thread_cpu("kafka-consumer-", io_cpu)
    cpu0, bcpu0, t0 = time.process_time(), _cpu(cluster.pid), time.monotonic()
    t.start()
    while time.monotonic() - t0 < seconds:
        got += sum(1 for m in c.consume(1000, 0.05) if m.error() is None)
    stop.set()
    t.join()
    deadline = time.monotonic() + 10
    while got < sent[0] and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(1000, 0.05) if m.error() is None)
    elapsed = time.monotonic() - t0
    cpu, bcpu = time.process_time() - cpu0, _cpu(cluster.pid) - bcpu0
    consumer_io = _thread_cpu("kafka-consumer-", io_cpu)
    c.close()
    p.close()
    if got != sent[0]:
        raise SystemExit(f"read {got} of {sent[0]} messages")
    fetches = [e for e in cluster.request_log(since, api="Fetch") if e.client_id == client]
    named = sum(len(e.details.get("fetch_session", {}).get("requested", ()))
                for e in fetches)
    answered = sum(len(e.details.get("partitions", ())) for e in fetches)
    return {"messages": got, "fetches": len(fetches), "client_cpu": cpu,
            "consumer_io_cpu": consumer_io, "broker_cpu": bcpu, "elapsed": elapsed,
            "named_per_fetch": named / max(len(fetches), 1),
            "answered_per_fetch": answered / max(len(fetches), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--hot", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    results: Dict[bool, List[Dict[str, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as data, Cluster(brokers=1, data_dir=data) as cluster:
        cluster.create_topic("wide", partitions=args.partitions, replication_factor=1)
        for r in range(args.rounds):
            for sessions in ((True, False) if r % 2 == 0 else (False, True)):
                res = one_round(cluster, "wide", args.partitions, args.hot, args.seconds,
                                args.rate, sessions)
                results[sessions].append(res)
                print(f"round {r + 1} {'sessions' if sessions else 'full'}: "
                      + ", ".join(f"{k} {v:.3g}" for k, v in res.items()), flush=True)
    fetch_session.FetchSession.plan = _plan_with_sessions
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; Python {platform.python_version()}; "
          f"{args.partitions} partitions, {args.hot} hot, {args.rate} msg/s for "
          f"{args.seconds:g} s, {args.rounds} rounds, medians")
    print("\n| | Fetches | partitions named per Fetch | answered per Fetch | consumer "
          "I/O thread CPU ms per Fetch | process CPU s | cluster CPU s | cluster CPU ms "
          "per Fetch |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for sessions in (False, True):
        rs = results[sessions]

        def med(key: str) -> float:
            return statistics.median(r[key] for r in rs)
        per_fetch = statistics.median(r["broker_cpu"] / max(r["fetches"], 1) * 1000 for r in rs)
        io_per_fetch = statistics.median(r["consumer_io_cpu"] / max(r["fetches"], 1) * 1000
                                         for r in rs)
        print(f"| {'sessions' if sessions else 'full Fetches'} | {med('fetches'):.0f} | "
              f"{med('named_per_fetch'):.1f} | {med('answered_per_fetch'):.1f} | "
              f"{io_per_fetch:.2f} | {med('client_cpu'):.2f} | {med('broker_cpu'):.2f} | "
              f"{per_fetch:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
