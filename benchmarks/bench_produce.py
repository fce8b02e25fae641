"""End-to-end produce throughput: our Producer (produce() loop and produce_batch) against
confluent-kafka's produce() loop, on the same broker, alternated round by round.

    .venv/bin/python benchmarks/bench_produce.py [--broker tansu|noida|HOST:PORT]
        [--messages 1000000] [--size 100] [--rounds 3] [--compression none,lz4] [--tls]
        [--mode plain|transactional] [--commit-every 10000]

``--tls`` (Tansu only) runs every case twice in the same run: on a plaintext Tansu and
on a Tansu behind stunnel (TLS, certificates made for the run, Tansu advertising the
stunnel port), and adds the ratios TLS / plaintext per contender.

Each case: N messages of SIZE bytes to a fresh 1-partition topic, acks=1, linger.ms=5,
then flush. Reported per contender: median msg/s over the rounds, CPU seconds (user+sys of
this process, which is where every contender's client work happens) per million
messages, and the peak RSS after the case (ru_maxrss, so it only grows).

``--mode transactional``: acks=all; our idempotent producer (the reference) against our
transactional producer, our idempotent producer calling flush() every ``--commit-every``
messages (the drain a commit does, without the transaction), confluent-kafka's idempotent
and transactional ones; the transactional ones commit a transaction every
``--commit-every`` messages (init_transactions() before the clock starts, the last commit
inside it).
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


#: Security settings every confluent-style contender adds to its configuration (--tls).
SECURITY: dict = {}


def ours_loop(bootstrap, topic, n, payload, codec):
    from kafka_client import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                  "compression.type": codec, **SECURITY})
    produce = p.produce
    t0, c0 = time.perf_counter(), _cpu()
    for _ in range(n):
        while True:
            try:
                produce(topic, payload)
                break
            except BufferError:
                p.poll(0.05)
    left = p.flush(120)
    t1, c1 = time.perf_counter(), _cpu()
    p.close()
    assert left == 0
    return t1 - t0, c1 - c0


def ours_batch(bootstrap, topic, n, payload, codec, chunk=10000):
    from kafka_client import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                  "compression.type": codec, **SECURITY})
    values = [payload] * chunk
    t0, c0 = time.perf_counter(), _cpu()
    done = 0
    while done < n:
        k = min(chunk, n - done)
        try:
            p.produce_batch(topic, values if k == chunk else values[:k])
        except BufferError:
            p.poll(0.05)
            continue
        done += k
    left = p.flush(120)
    t1, c1 = time.perf_counter(), _cpu()
    p.close()
    assert left == 0
    return t1 - t0, c1 - c0


def confluent_loop(bootstrap, topic, n, payload, codec):
    import confluent_kafka

    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                                  "compression.type": codec, **SECURITY})
    produce = p.produce
    t0, c0 = time.perf_counter(), _cpu()
    for _ in range(n):
        while True:
            try:
                produce(topic, payload)
                break
            except BufferError:
                p.poll(0.05)
    left = p.flush(120)
    t1, c1 = time.perf_counter(), _cpu()
    assert left == 0
    return t1 - t0, c1 - c0


def _timed_loop(p, n, payload, topic, every=0, flush_only=False):
    """produce() ``n`` times (poll on BufferError); with ``every``, commit and begin a new
    transaction every ``every`` messages (with ``flush_only``, flush() instead: the same
    drain without the transaction). Returns (wall, cpu) seconds."""
    produce = p.produce
    t0, c0 = time.perf_counter(), _cpu()
    if every and not flush_only:
        p.begin_transaction()
    for i in range(n):
        while True:
            try:
                produce(topic, payload)
                break
            except BufferError:
                p.poll(0.05)
        if every and (i + 1) % every == 0:
            if flush_only:
                p.flush(120)
                continue
            p.commit_transaction(120)
            if i + 1 < n:
                p.begin_transaction()
    if every and n % every and not flush_only:
        p.commit_transaction(120)
    left = p.flush(120)
    t1, c1 = time.perf_counter(), _cpu()
    assert left == 0
    return t1 - t0, c1 - c0


def ours_idempotent(bootstrap, topic, n, payload, codec, every=0):
    from kafka_client import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "linger.ms": 5, "compression.type": codec, **SECURITY})
    try:
        return _timed_loop(p, n, payload, topic)
    finally:
        p.close()


def ours_idempotent_flushing(bootstrap, topic, n, payload, codec, every=10000):
    from kafka_client import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "linger.ms": 5, "compression.type": codec, **SECURITY})
    try:
        return _timed_loop(p, n, payload, topic, every, flush_only=True)
    finally:
        p.close()


def ours_transactional(bootstrap, topic, n, payload, codec, every=10000):
    from kafka_client import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}",
                  "linger.ms": 5, "compression.type": codec, **SECURITY})
    try:
        p.init_transactions(60)
        return _timed_loop(p, n, payload, topic, every)
    finally:
        p.close()


def confluent_idempotent(bootstrap, topic, n, payload, codec, every=0):
    import confluent_kafka

    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "linger.ms": 5, "compression.type": codec, **SECURITY})
    return _timed_loop(p, n, payload, topic)


def confluent_transactional(bootstrap, topic, n, payload, codec, every=10000):
    import confluent_kafka

    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                  "transactional.id": f"bench-{topic}", "linger.ms": 5,
                                  "compression.type": codec, **SECURITY})
    p.init_transactions(60)
    return _timed_loop(p, n, payload, topic, every)


def kafka_python_loop(bootstrap, topic, n, payload, codec):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5,
                      compression_type=None if codec == "none" else codec)
    t0, c0 = time.perf_counter(), _cpu()
    for _ in range(n):
        p.send(topic, payload)
    p.flush(120)
    t1, c1 = time.perf_counter(), _cpu()
    p.close()
    return t1 - t0, c1 - c0


def aiokafka_loop(bootstrap, topic, n, payload, codec):
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5,
                             compression_type=None if codec == "none" else codec)
        await p.start()
        try:
            t0, c0 = time.perf_counter(), _cpu()
            pending = []
            for i in range(n):
                pending.append(await p.send(topic, payload))
                if len(pending) >= 10000:
                    await asyncio.gather(*pending)
                    pending.clear()
            await asyncio.gather(*pending)
            return time.perf_counter() - t0, _cpu() - c0
        finally:
            await p.stop()

    return asyncio.run(run())


CONTENDERS = {"confluent produce()": confluent_loop, "ours produce()": ours_loop,
              "ours produce_batch": ours_batch, "kafka-python send()": kafka_python_loop,
              "aiokafka send()": aiokafka_loop}
#: Contenders run by default (the slow peers only with --only, or --peers)
DEFAULT = ("confluent produce()", "ours produce()", "ours produce_batch")
#: --mode transactional: the reference (ours, idempotent) first
TRANSACTIONAL = {"ours idempotent": ours_idempotent,
                 "ours transactional": ours_transactional,
                 "ours idempotent+flush": ours_idempotent_flushing,
                 "confluent idempotent": confluent_idempotent,
                 "confluent transactional": confluent_transactional}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--broker", default="tansu")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compression", default="none,lz4")
    ap.add_argument("--only", default=None, help="comma list of contender names")
    ap.add_argument("--peers", action="store_true",
                    help="also kafka-python and aiokafka (slow: use fewer --messages)")
    ap.add_argument("--tls", action="store_true",
                    help="plaintext and TLS (stunnel in front of Tansu) in the same run")
    ap.add_argument("--mode", choices=("plain", "transactional"), default="plain")
    ap.add_argument("--commit-every", type=int, default=10000)
    args = ap.parse_args(argv)
    contenders = dict(CONTENDERS)
    setting = "acks=1"
    if args.mode == "transactional":
        contenders = {name: (lambda fn: lambda *a: fn(*a, every=args.commit_every))(fn)
                      for name, fn in TRANSACTIONAL.items()}
        setting = f"acks=all, a commit every {args.commit_every} messages"
    if args.only:
        names = args.only.split(",")
    elif args.mode == "transactional":
        names = list(TRANSACTIONAL)
    else:
        names = list(DEFAULT) + (["kafka-python send()", "aiokafka send()"]
                                 if args.peers else [])
    payload = os.urandom(args.size // 2).hex().encode()[:args.size]
    cleanups = []
    # mode -> (bootstrap, broker or None, security settings)
    modes = {}
    try:
        if ":" in args.broker:
            modes["plaintext"] = (args.broker, None, {})
        else:
            from kafka_client._testing.brokers import make_broker

            broker = make_broker(args.broker)
            broker.start()
            cleanups.append(broker)
            modes["plaintext"] = (broker.bootstrap, broker, {})
        if args.tls:
            modes["tls"] = _start_tls(cleanups)
            names = [n for n in names if n in DEFAULT or n in TRANSACTIONAL]  # no TLS peers
        results = {}
        for codec in args.compression.split(","):
            rates = {(m, n): [] for m in modes for n in names}
            cpus = {(m, n): [] for m in modes for n in names}
            rss = {}
            for _round in range(args.rounds):
                for mode, (bootstrap, broker, security) in modes.items():
                    SECURITY.clear()
                    SECURITY.update(security)
                    for name in names:
                        topic = f"bench-{uuid.uuid4().hex[:8]}"
                        if broker is not None:
                            broker.create_topic(topic, partitions=1)
                        wall, cpu = contenders[name](bootstrap, topic, args.messages,
                                                     payload, codec)
                        rates[mode, name].append(args.messages / wall)
                        cpus[mode, name].append(cpu / args.messages * 1e6)
                        rss[mode, name] = _rss_mb()
            for mode in modes:
                print(f"\n{args.messages} x {args.size} B, {setting}, linger.ms=5, {codec}, "
                      f"{args.rounds} rounds, broker {args.broker}, {mode}")
                base = statistics.median(rates[mode, names[0]])
                for name in names:
                    med = statistics.median(rates[mode, name])
                    results[codec, mode, name] = med
                    print(f"  {name:23s} {med:>10,.0f} msg/s  x{med / base:4.2f}   "
                          f"cpu {statistics.median(cpus[mode, name]):5.2f} s/M msgs   "
                          f"peak RSS {rss[mode, name]:6.0f} MB")
                if args.mode == "transactional" and not args.only:
                    ours = results[codec, mode, "ours transactional"]
                    print(f"  ours transactional: x{ours / base:4.2f} of ours idempotent, "
                          f"x{ours / results[codec, mode, 'confluent transactional']:4.2f} of "
                          f"confluent transactional, "
                          f"x{ours / results[codec, mode, 'ours idempotent+flush']:4.2f} of "
                          f"ours idempotent flushing as often")
            if "tls" in modes:
                print(f"  TLS / plaintext ({codec}): " + ", ".join(
                    f"{n} {results[codec, 'tls', n] / results[codec, 'plaintext', n]:.2f}x"
                    for n in names))
    finally:
        for item in reversed(cleanups):
            item.stop()
            item.cleanup()
    return 0


def _start_tls(cleanups):
    """A Tansu behind stunnel for --tls: (bootstrap, broker, security settings)."""
    from kafka_client._testing.brokers import free_port
    from kafka_client._testing.tls import Stunnel, TlsTansu, make_certificates

    certs = make_certificates()
    port = free_port()
    broker = TlsTansu(port)
    broker.start()
    cleanups.append(broker)
    tunnel = Stunnel(broker.host, broker.port, certs.server_cert, certs.server_key, port=port)
    tunnel.start()
    cleanups.append(tunnel)
    return tunnel.bootstrap, broker, {"security.protocol": "ssl",
                                      "ssl.ca.location": str(certs.ca)}


if __name__ == "__main__":
    sys.exit(main())
