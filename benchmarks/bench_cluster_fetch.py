"""Fetch throughput of the test cluster (kafka_client.testing): records sent from the
segment files with os.sendfile against read + send, in the same run.

    .venv/bin/python benchmarks/bench_cluster_fetch.py [--partitions 1,8,16]
        [--log-mib 64] [--fetch-kib 1024] [--seconds 1] [--rounds 7] [--connections 1]
        [--no-floor] [--consumer MESSAGES]

One broker; for each partition count P in ``--partitions`` a topic of P partitions,
filled once with ``--log-mib`` of record batches in all (64 KiB each, 256 records of 240
bytes, uncompressed) through ProduceRequests. Then, round by round, for each topic, the
broker is switched between its two ways of writing a Fetch response's records: with
``os.sendfile`` from the segment file (the default), or with ``os.pread`` into a buffer
and ``socket.sendmsg`` (read + send). Everything else (request decoding, the response
header and partition fields, the segment lookup) is the same code in both modes; the
order of the two modes alternates from round to round.

Each client connection keeps one Fetch in flight (like a consumer), asking for
``--fetch-kib`` per partition (partition_max_bytes; max_bytes is P times that), from
offsets walking the log from start to end and round again (the log stays in the page
cache: it is read once before timing). The client receives every response whole with
``recv_into`` a reusable buffer and does not decode it, so the client side costs the same
in both modes; before timing, one response per mode is decoded and compared (same
records, byte for byte).

Reported per partition count: the median over rounds of the bytes per second received in
each mode, the ratio of the medians and the median of the per-round ratios (each round's
two modes ran back to back, so that one is the steadier on a shared machine), and the
cluster process's CPU time (user + sys, from /proc) per MiB served.

The floor (skipped with ``--no-floor``): the same client against a bare server process
that does nothing per request but answer with one ``--fetch-kib`` range of the same kind
of file, by os.sendfile or by os.pread + socket.sendmsg: what the kernel allows on this
machine for the transfer alone, with no Python work per request beyond one call.

``--consumer N``: our Consumer reading N records of 100 bytes from one partition, on the
cluster and on Tansu (kafka_client._testing.brokers) alternately, ``--rounds`` times.

The acceptance of issue 14: sendfile serves at least 2x the bytes/s of read + send for
1 MiB fetches; our consumer reaches at least 0.5x on the cluster what it reaches on Tansu.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka_proto.framing import decode_response_header, encode_request  # noqa: E402
from kafka_proto.messages import (  # noqa: E402
    ApiKey,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka_proto.records import RecordBatchBuilder, read_batches  # noqa: E402

from kafka_client.testing import Cluster  # noqa: E402

FETCH_VERSION = 12
PRODUCE_VERSION = 9
RECORDS_PER_BATCH = 256
RECORD_SIZE = 240
_SIZE = struct.Struct(">i")


def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """user + sys CPU of a process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _clock_ticks()


class RawConnection:
    """A bare socket speaking size-prefixed frames (no decoding on the hot path)."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray(20 << 20)
        self.view = memoryview(self.buffer)
        self.done = False

    def request(self, frame: bytes) -> memoryview:
        self.sock.sendall(frame)
        return self.receive()

    def receive(self) -> memoryview:
        """The next answer frame (without its size prefix). The prefix and the body are
        read together with recv_into, as the client's own reader reads (a separate
        recv of the 4-byte prefix first costs sendfile's answers up to half their rate
        on the receiving side here, and nothing to read + send's)."""
        got = 0
        end = 4
        while got < end:
            n = self.sock.recv_into(self.view[got:])
            if not n:
                raise ConnectionError("closed by the server")
            got += n
            if end == 4 and got >= 4:
                (size,) = _SIZE.unpack_from(self.buffer, 0)
                end = 4 + size
                if end > len(self.buffer):
                    grown = bytearray(end)
                    grown[:got] = self.view[:got]
                    self.buffer = grown
                    self.view = memoryview(grown)
        if got != end:
            raise ConnectionError("more bytes than one answer (one request in flight)")
        return self.view[4:end]

    def close(self) -> None:
        self.sock.close()


def make_batch() -> bytes:
    value = bytes(range(256))[:RECORD_SIZE]
    builder = RecordBatchBuilder()
    for i in range(RECORDS_PER_BATCH):
        builder.append(value, key=b"%08d" % i, timestamp=1_700_000_000_000 + i)
    return builder.build()


def fill(cluster: Cluster, topic: str, partition: int, log_bytes: int) -> int:
    """Produce batches until the partition holds ``log_bytes``; returns the record count."""
    conn = RawConnection(cluster.address(1))
    batch = make_batch()
    produced = records = cid = 0
    while produced < log_bytes:
        cid += 1
        req = ProduceRequest(acks=1, timeout_ms=10_000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
        frame = conn.request(encode_request(req, PRODUCE_VERSION, cid, "bench"))
        _cid, body = decode_response_header(frame, ApiKey.PRODUCE, PRODUCE_VERSION)
        part = ProduceResponse.decode(body, PRODUCE_VERSION).responses[0].partition_responses[0]
        if part.error_code:
            raise RuntimeError(f"produce failed: error {part.error_code}")
        produced += len(batch)
        records += RECORDS_PER_BATCH
    conn.close()
    return records


def fetch_frame(topic: str, offset: int, fetch_bytes: int, cid: int, partitions: int) -> bytes:
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1,
                       max_bytes=fetch_bytes * partitions,
                       isolation_level=0, session_id=0, session_epoch=-1,
                       topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                           FetchRequest.FetchPartition(partition=p, fetch_offset=offset,
                                                       partition_max_bytes=fetch_bytes)
                           for p in range(partitions)])])
    return encode_request(req, FETCH_VERSION, cid, "bench")


def decode_records(frame: memoryview) -> bytes:
    _cid, body = decode_response_header(frame, ApiKey.FETCH, FETCH_VERSION)
    resp = FetchResponse.decode(body, FETCH_VERSION)
    part = resp.responses[0].partitions[0]
    if part.error_code:
        raise RuntimeError(f"fetch failed: error {part.error_code}")
    return bytes(part.records)


def timed_fetches(conns: List[RawConnection], frames: List[bytes], seconds: float,
                  pid: int) -> Tuple[float, float]:
    """(bytes per second received, server CPU seconds per MiB) for ``seconds``, one
    request in flight per connection, round robin."""
    cpu0 = process_cpu_seconds(pid)
    received = i = 0
    start = time.perf_counter()
    deadline = start + seconds
    for conn in conns:
        conn.done = False
        conn.sock.sendall(frames[i % len(frames)])
        i += 1
    while not all(c.done for c in conns):
        for conn in conns:
            if conn.done:
                continue
            received += len(conn.receive())
            if time.perf_counter() < deadline:
                conn.sock.sendall(frames[i % len(frames)])
                i += 1
            else:
                conn.done = True
    elapsed = time.perf_counter() - start
    mib = received / (1 << 20)
    cpu = process_cpu_seconds(pid) - cpu0
    return received / elapsed, cpu / mib if mib else float("nan")


# --------------------------------------------------------------------------- the floor


def _floor_server(path: str, size: int, sendfile: bool, ready: "multiprocessing.Queue") -> None:
    """Answer every request frame with one ``size`` range of ``path``, walking the file."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    ready.put(listener.getsockname()[1])
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)   # as the cluster's
    fd = os.open(path, os.O_RDONLY)
    file_size = os.fstat(fd).st_size
    position = 0
    header = _SIZE.pack(size)
    reader = conn.makefile("rb")
    while True:
        head = reader.read(4)
        if len(head) < 4:
            return
        reader.read(_SIZE.unpack(head)[0])
        if position + size > file_size:
            position = 0
        if sendfile:
            conn.sendmsg([header], (), socket.MSG_MORE)
            sent = 0
            while sent < size:
                sent += os.sendfile(conn.fileno(), fd, position + sent, size - sent)
        else:
            conn.sendmsg([header, os.pread(fd, size, position)])
        position += size


def floor_round(path: str, size: int, frames: List[bytes], seconds: float,
                sendfile: bool) -> Tuple[float, float]:
    ready: "multiprocessing.Queue" = multiprocessing.Queue()
    server = multiprocessing.Process(target=_floor_server, args=(path, size, sendfile, ready),
                                     daemon=True)
    server.start()
    try:
        conn = RawConnection(f"127.0.0.1:{ready.get(timeout=10)}")
        for frame in frames[:20]:
            conn.request(frame)   # warm up
        result = timed_fetches([conn], frames, seconds, server.pid)
        conn.close()
        return result
    finally:
        server.join(5)
        if server.is_alive():
            server.kill()


# --------------------------------------------------------------------------- consumer


def consumer_rate(bootstrap: str, topic: str, n: int) -> float:
    """Messages per second our Consumer reads partition 0 of ``topic`` from offset 0."""
    from kafka_client import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False})
    got = 0
    start = time.perf_counter()
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = start + 120
        while got < n:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{bootstrap}: {got} of {n} messages in 120 s")
            for m in consumer.consume(10_000, 1.0):
                if m.error() is not None:
                    raise RuntimeError(f"{bootstrap}: {m.error()}")
                got += 1
        return n / (time.perf_counter() - start)
    finally:
        consumer.close()


def fill_for_consumer(bootstrap: str, topic: str, n: int) -> None:
    from kafka_client import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1})
    value = b"v" * 100
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(60) != 0:
        raise RuntimeError(f"{bootstrap}: messages left unsent")
    producer.close()


def run_consumer(cluster: Cluster, n: int, rounds: int) -> Optional[Dict[str, List[float]]]:
    from kafka_client._testing.brokers import BrokerNotAvailable, make_broker

    try:
        tansu = make_broker("tansu")
    except BrokerNotAvailable as exc:
        print(f"consumer comparison skipped: {exc}")
        return None
    tansu.start()
    try:
        topic = "bench-consumer"
        cluster.create_topic(topic, partitions=1, replication_factor=1)
        tansu.create_topic(topic, 1)
        targets = {"cluster": cluster.bootstrap_servers, "tansu": tansu.bootstrap}
        for bootstrap in targets.values():
            fill_for_consumer(bootstrap, topic, n)
        rates: Dict[str, List[float]] = {name: [] for name in targets}
        for r in range(rounds):
            for name in (list(targets) if r % 2 == 0 else list(reversed(targets))):
                rates[name].append(consumer_rate(targets[name], topic, n))
        return rates
    finally:
        tansu.stop()
        tansu.cleanup()


# --------------------------------------------------------------------------- main


def table_cells(sendfile: List[Tuple[float, float]], read_send: List[Tuple[float, float]]) -> str:
    """Median MiB/s of each mode, the ratio of the medians, the median of the per-round
    ratios, and the median server CPU ms per MiB of each mode."""
    mib = 1 << 20
    sf_rate = statistics.median(x[0] for x in sendfile) / mib
    rs_rate = statistics.median(x[0] for x in read_send) / mib
    paired = statistics.median(a[0] / b[0] for a, b in zip(sendfile, read_send))
    return (f"{sf_rate:>15.0f} {rs_rate:>16.0f} {sf_rate / rs_rate:>5.2f}x {paired:>11.2f}x "
            f"{statistics.median(x[1] for x in sendfile) * 1000:>9.2f} / "
            f"{statistics.median(x[1] for x in read_send) * 1000:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="1,8,16",
                        help="comma separated partition counts per Fetch")
    parser.add_argument("--log-mib", type=int, default=64, help="log size of each topic")
    parser.add_argument("--fetch-kib", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=1.0, help="per mode and round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--no-floor", action="store_true", help="skip the kernel floor")
    parser.add_argument("--consumer", type=int, default=0, metavar="MESSAGES",
                        help="also compare our Consumer on the cluster and on Tansu")
    args = parser.parse_args()
    fetch_bytes = args.fetch_kib * 1024
    counts = [int(p) for p in args.partitions.split(",") if p.strip()]

    per_fetch = max(1, fetch_bytes // (RECORDS_PER_BATCH * RECORD_SIZE)) * RECORDS_PER_BATCH
    results: Dict[Tuple[int, str], List[Tuple[float, float]]] = {}
    answer_kib: Dict[int, int] = {}
    consumer: Optional[Dict[str, List[float]]] = None
    with Cluster(brokers=1, broker_config={"log.segment.bytes": 1 << 30}) as cluster:
        setups = {}
        for count in counts:
            topic = f"fetch-bench-{count}"
            cluster.create_topic(topic, partitions=count, replication_factor=1)
            for p in range(count):
                records = fill(cluster, topic, p, (args.log_mib << 20) // count)
            offsets = list(range(0, records - per_fetch, per_fetch)) or [0]
            frames = [fetch_frame(topic, o, fetch_bytes, k + 1, count)
                      for k, o in enumerate(offsets)]
            conns = [RawConnection(cluster.address(1)) for _ in range(args.connections)]
            # Same bytes either way, and the whole log read once (page cache warm).
            first: Dict[bool, bytes] = {}
            for sendfile in (True, False):
                cluster.set_fetch_mode(sendfile)
                first[sendfile] = decode_records(conns[0].request(frames[0]))
                for frame in frames:
                    conns[0].request(frame)
            if first[True] != first[False]:
                raise SystemExit("sendfile and read+send returned different records")
            answer_kib[count] = len(first[True]) // 1024   # one partition's records
            assert sum(b.size for b in read_batches(first[True])) == len(first[True])
            setups[count] = (conns, frames)
        stats0 = cluster.stats()
        for r in range(args.rounds):
            for count in counts:
                conns, frames = setups[count]
                for sendfile in ([True, False] if r % 2 == 0 else [False, True]):
                    cluster.set_fetch_mode(sendfile)
                    results.setdefault((count, "sendfile" if sendfile else "read+send"),
                                       []).append(timed_fetches(conns, frames, args.seconds,
                                                                cluster.pid))
        stats1 = cluster.stats()
        for conns, _frames in setups.values():
            for conn in conns:
                conn.close()
        if args.consumer:
            consumer = run_consumer(cluster, args.consumer, args.rounds)

    floor: Dict[str, List[Tuple[float, float]]] = {}
    if not args.no_floor:
        with tempfile.NamedTemporaryFile(prefix="fetch-floor-") as f:
            batch = make_batch()
            for _ in range((args.log_mib << 20) // len(batch)):
                f.write(batch)
            f.flush()
            frames = [fetch_frame("floor", 0, fetch_bytes, k + 1, 1) for k in range(8)]
            for r in range(args.rounds):
                for sendfile in ([True, False] if r % 2 == 0 else [False, True]):
                    floor.setdefault("sendfile" if sendfile else "read+send", []).append(
                        floor_round(f.name, answer_kib[counts[0]] * 1024, frames,
                                    args.seconds, sendfile))

    mib = 1 << 20
    print(f"Fetch throughput of kafka_client.testing: {args.rounds} rounds x "
          f"{args.seconds:g} s per mode, {args.connections} connection(s), one Fetch in "
          f"flight each, {args.fetch_kib} KiB per partition, {args.log_mib} MiB per topic")
    print(f"{'partitions':>10} {'answer':>8} {'sendfile MiB/s':>15} {'read+send MiB/s':>16} "
          f"{'ratio':>6} {'ratio/round':>12} {'CPU ms/MiB sf / rs':>20}")
    for count in counts:
        print(f"{count:>10} {answer_kib[count] * count:>6} K "
              + table_cells(results[(count, "sendfile")], results[(count, "read+send")]))
    for count in counts:
        print(f"  {count:>2} partition(s), MiB/s by round: sendfile "
              + ", ".join(f"{x[0] / mib:.0f}" for x in results[(count, "sendfile")])
              + "; read+send "
              + ", ".join(f"{x[0] / mib:.0f}" for x in results[(count, "read+send")]))
    sendfile_calls = stats1["sendfile_calls"] - stats0["sendfile_calls"]
    print(f"sendfile calls during the rounds: {sendfile_calls}")
    if floor:
        print(f"{'floor':>10} {answer_kib[counts[0]]:>6} K "
              + table_cells(floor["sendfile"], floor["read+send"])
              + "   (bare server, no Python per request but the call)")
    for count in counts:
        sf = statistics.median(x[0] for x in results[(count, "sendfile")])
        rs = statistics.median(x[0] for x in results[(count, "read+send")])
        verdict = "met" if sf / rs >= 2 else "!!! MISS !!!"
        print(f"issue 14, sendfile >= 2x read+send, {count} x {args.fetch_kib} KiB per Fetch: "
              f"{sf / rs:.2f}x {verdict}")
    if consumer:
        cluster_rate = statistics.median(consumer["cluster"])
        tansu_rate = statistics.median(consumer["tansu"])
        print(f"our Consumer, {args.consumer:,} x 100 B, one partition, median of "
              f"{args.rounds}: cluster {cluster_rate:,.0f} msg/s, Tansu {tansu_rate:,.0f} "
              f"msg/s: {cluster_rate / tansu_rate:.2f}x (issue 14: >= 0.5x "
              f"{'met' if cluster_rate / tansu_rate >= 0.5 else '!!! MISS !!!'})")
        print("  by round: cluster " + ", ".join(f"{x:,.0f}" for x in consumer["cluster"])
              + "; Tansu " + ", ".join(f"{x:,.0f}" for x in consumer["tansu"]))
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}, {platform.platform()}, "
          f"Python {platform.python_version()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
