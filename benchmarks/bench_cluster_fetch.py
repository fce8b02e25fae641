"""Fetch throughput of the test cluster (kafka_client.testing): records sent from the
segment files with os.sendfile against read + send, in the same run.

    .venv/bin/python benchmarks/bench_cluster_fetch.py [--log-mib 128] [--fetch-kib 1024]
        [--seconds 2] [--rounds 3] [--connections 1]

One broker, one partition, filled once with ``--log-mib`` of record batches (64 KiB each,
256 records of 240 bytes, uncompressed) through ProduceRequests. Then, round by round,
the broker is switched between its two ways of writing a Fetch response's records: with
``os.sendfile`` from the segment file (the default), or with ``os.pread`` into a buffer
and ``socket.sendmsg`` (read + send). Everything else (request decoding, the response
header and partition fields, the segment lookup) is the same code in both modes.

Each client connection keeps one Fetch in flight (like a consumer), asking for
``--fetch-kib`` per response (partition_max_bytes = max_bytes), from offsets walking the
log from start to end and round again (the log stays in the page cache: it is read once
before timing). The client receives every response whole with ``recv_into`` a reusable
buffer and does not decode it, so the client side costs the same in both modes; before
timing, one response per mode is decoded and compared (same records, byte for byte).

Reported per mode: the median over rounds of the records bytes per second received, and
the cluster process's CPU time (user + sys, from /proc) per MiB served; then the ratio
sendfile / read+send. The acceptance of issue 14: at least 2x the bytes/s for 1 MiB fetches.
"""
from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka_proto.framing import decode_response_header, encode_request  # noqa: E402
from kafka_proto.messages import ApiKey, FetchRequest, FetchResponse, ProduceRequest  # noqa: E402
from kafka_proto.records import RecordBatchBuilder, read_batches  # noqa: E402

from kafka_client.testing import Cluster  # noqa: E402

TOPIC = "fetch-bench"
FETCH_VERSION = 12
PRODUCE_VERSION = 9
RECORDS_PER_BATCH = 256
RECORD_SIZE = 240


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
        self.buffer = bytearray(16 << 20)
        self.view = memoryview(self.buffer)
        self.correlation_id = 0

    def request(self, frame: bytes) -> memoryview:
        self.sock.sendall(frame)
        return self.receive()

    def receive(self) -> memoryview:
        head = self._read(4)
        (size,) = struct.unpack(">i", head)
        if size > len(self.buffer):
            self.buffer = bytearray(size)
            self.view = memoryview(self.buffer)
        got = 0
        while got < size:
            n = self.sock.recv_into(self.view[got:size])
            if not n:
                raise ConnectionError("closed by the cluster")
            got += n
        return self.view[:size]

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the cluster")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def fill(cluster: Cluster, log_bytes: int, partition: int = 0) -> int:
    """Produce batches until the partition holds ``log_bytes``; returns the record count."""
    conn = RawConnection(cluster.address(1))
    value = bytes(range(256))[:RECORD_SIZE]
    builder = RecordBatchBuilder()
    for i in range(RECORDS_PER_BATCH):
        builder.append(value, key=b"%08d" % i, timestamp=1_700_000_000_000 + i)
    batch = builder.build()
    produced = 0
    records = 0
    cid = 0
    while produced < log_bytes:
        cid += 1
        req = ProduceRequest(acks=1, timeout_ms=10_000, topic_data=[
            ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
                ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
        frame = conn.request(encode_request(req, PRODUCE_VERSION, cid, "bench"))
        _cid, body = decode_response_header(frame, ApiKey.PRODUCE, PRODUCE_VERSION)
        from kafka_proto.messages import ProduceResponse

        part = ProduceResponse.decode(body, PRODUCE_VERSION).responses[0].partition_responses[0]
        if part.error_code:
            raise RuntimeError(f"produce failed: error {part.error_code}")
        produced += len(batch)
        records += RECORDS_PER_BATCH
    conn.close()
    return records


def fetch_frame(offset: int, fetch_bytes: int, cid: int, partitions: int = 1) -> bytes:
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1,
                       max_bytes=fetch_bytes * partitions,
                       isolation_level=0, session_id=0, session_epoch=-1,
                       topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[
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


def run_mode(cluster: Cluster, conns: List[RawConnection], frames: List[bytes],
             seconds: float) -> Tuple[float, float]:
    """(records bytes per second, cluster CPU seconds per MiB) for ``seconds``."""
    pid = cluster.pid
    cpu0 = process_cpu_seconds(pid)
    received = 0
    responses = 0
    i = 0
    start = time.perf_counter()
    deadline = start + seconds
    # One request in flight per connection, round robin.
    for conn in conns:
        conn.sock.sendall(frames[i % len(frames)])
        i += 1
    while True:
        for conn in conns:
            if getattr(conn, "done", False):
                continue
            frame = conn.receive()
            received += len(frame)
            responses += 1
            if time.perf_counter() < deadline:
                conn.sock.sendall(frames[i % len(frames)])
                i += 1
            else:
                conn.done = True  # type: ignore[attr-defined]
        if all(getattr(c, "done", False) for c in conns):
            break
    elapsed = time.perf_counter() - start
    for conn in conns:
        conn.done = False  # type: ignore[attr-defined]
    cpu = process_cpu_seconds(pid) - cpu0
    mib = received / (1 << 20)
    return received / elapsed, cpu / mib if mib else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-mib", type=int, default=128)
    parser.add_argument("--fetch-kib", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=1,
                        help="partitions per Fetch, each answered with up to --fetch-kib")
    args = parser.parse_args()
    fetch_bytes = args.fetch_kib * 1024

    with Cluster(brokers=1, broker_config={"log.segment.bytes": 1 << 30}) as cluster:
        cluster.create_topic(TOPIC, partitions=args.partitions, replication_factor=1)
        for p in range(args.partitions):
            records = fill(cluster, (args.log_mib << 20) // args.partitions, p)
        per_fetch = max(1, fetch_bytes // (RECORDS_PER_BATCH * RECORD_SIZE)) * RECORDS_PER_BATCH
        offsets = list(range(0, records - per_fetch, per_fetch)) or [0]
        frames = [fetch_frame(o, fetch_bytes, k + 1, args.partitions)
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
        sizes = [b.size for b in read_batches(first[True])]
        stats0 = cluster.stats()

        results: Dict[str, List[Tuple[float, float]]] = {"sendfile": [], "read+send": []}
        for r in range(args.rounds):
            order = [True, False] if r % 2 == 0 else [False, True]
            for sendfile in order:
                cluster.set_fetch_mode(sendfile)
                results["sendfile" if sendfile else "read+send"].append(
                    run_mode(cluster, conns, frames, args.seconds))
        stats1 = cluster.stats()
        for conn in conns:
            conn.close()

    print(f"Fetch throughput of kafka_client.testing, {args.rounds} rounds x "
          f"{args.seconds:g} s per mode, {args.connections} connection(s), "
          f"{args.partitions} partition(s) per Fetch")
    print(f"log {args.log_mib} MiB in {len(offsets) + 1}+ fetch ranges; each partition's "
          f"answer {len(first[True]) / 1024:.0f} KiB of records ({len(sizes)} batches of "
          f"{sizes[0] // 1024} KiB)")
    print(f"{'mode':<10} {'MiB/s (median)':>15} {'rounds':>30} {'cluster CPU ms/MiB':>20}")
    medians = {}
    for mode, rows in results.items():
        rates = [r[0] / (1 << 20) for r in rows]
        cpu = statistics.median(r[1] for r in rows) * 1000
        medians[mode] = statistics.median(rates)
        print(f"{mode:<10} {medians[mode]:>15.0f} {', '.join(f'{x:.0f}' for x in rates):>30} "
              f"{cpu:>20.2f}")
    ratio = medians["sendfile"] / medians["read+send"]
    print(f"ratio sendfile / read+send: {ratio:.2f}x (target >= 2x for 1 MiB fetches: "
          f"{'met' if ratio >= 2 else '!!! MISS !!!'})")
    print(f"sendfile calls during the run: {stats1['sendfile_calls'] - stats0['sendfile_calls']}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, "
          f"Python {platform.python_version()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
