"""The demo behind ``./dev demo``: produce N messages and read them all back.

    python -m kafka_client.demo [--bootstrap host:port] [--messages N] [--compression c]

Without ``--bootstrap`` it starts a Tansu broker on a free loopback port (noida-db with
``--broker noida``) and stops it at the end. It creates a topic, produces N 100-byte
messages in record batches built by ``kafka_proto.records.RecordBatchBuilder`` and sent
with the generated ``ProduceRequest`` over a blocking connection (a few requests in
flight), then reads them back with a plain Fetch loop, checks every offset and value, and
prints the throughput of both directions.

(It uses the codec directly; when the client's Producer and Consumer land, the demo
moves to them.)
"""
from __future__ import annotations

import argparse
import sys
import time
import uuid
from typing import List, Optional, TextIO

__all__ = ["main", "run"]

MESSAGE_SIZE = 100
RECORD_OVERHEAD = MESSAGE_SIZE + 32  # a record's size bound: value + varints + attributes
DEFAULT_BATCH_BYTES = 1_000_000      # librdkafka's batch.size default
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


class DemoError(RuntimeError):
    """The broker did not do what the demo expects (reported as FAILED)."""


class Progress:
    """A one-line textual progress bar; on a non-terminal, a line every 25%."""

    def __init__(self, label: str, total: int, out: TextIO, width: int = 30) -> None:
        self.label = label
        self.total = max(total, 1)
        self.out = out
        self.width = width
        self.tty = hasattr(out, "isatty") and out.isatty()
        self._last_draw = 0.0
        self._last_quarter = -1
        self._drawn = -1
        self.t0 = time.perf_counter()

    def update(self, done: int, force: bool = False) -> None:
        frac = min(done / self.total, 1.0)
        if self.tty:
            now = time.perf_counter()
            if not force and now - self._last_draw < 0.1:
                return
            self._last_draw = now
            self._drawn = done
            filled = int(frac * self.width)
            bar = "#" * filled + "." * (self.width - filled)
            elapsed = now - self.t0
            rate = done / elapsed if elapsed > 0 else 0.0
            self.out.write(f"\r{self.label:<8} [{bar}] {frac:6.1%} {done:>10,}/{self.total:,}"
                           f"  {rate:,.0f} msg/s ")
            self.out.flush()
        else:
            quarter = int(frac * 4)
            if quarter > self._last_quarter:
                self._last_quarter = quarter
                self.out.write(f"{self.label:<8} {frac:6.1%} {done:,}/{self.total:,}\n")
                self.out.flush()

    def finish(self, done: int) -> None:
        if done != self._drawn:
            self.update(done, force=True)
        if self.tty:
            self.out.write("\n")
            self.out.flush()


def _value(i: int, filler: bytes) -> bytes:
    # 10-digit sequence number + filler: every message is distinct and checkable.
    return b"%010d" % i + filler


def _filler() -> bytes:
    base = b"kafka-native demo payload / "
    return (base * 4)[: MESSAGE_SIZE - 10]


def _parse_bootstrap(text: str):
    first = text.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"--bootstrap: expected host:port, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _leader_connection(conn, topic: str, timeout: float):
    """Connect to the leader of partition 0 (the bootstrap broker on a single node)."""
    from kafka_client._net.blocking import BlockingConnection
    from kafka_proto.messages import MetadataRequest

    md = conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]))
    t = md.topics[0]
    if t.error_code:
        raise RuntimeError(f"metadata for {topic}: error {t.error_code}")
    leader = next(p.leader_id for p in t.partitions if p.partition_index == 0)
    brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
    host, port = brokers[leader]
    if (host, port) == (conn.host, conn.port) or len(brokers) == 1:
        return conn
    return BlockingConnection(host, port, client_id=conn.client_id, timeout=timeout)


def run(bootstrap: Optional[str] = None, messages: int = 200_000, compression: str = "none",
        batch_bytes: int = DEFAULT_BATCH_BYTES, in_flight: int = 5, broker_kind: str = "tansu",
        topic: Optional[str] = None, timeout: float = 30.0,
        out: TextIO = sys.stdout) -> bool:
    """Run the demo; True if every message came back intact."""
    from kafka_client._net.blocking import BlockingConnection
    from kafka_client._testing import simple
    from kafka_proto.records import Compression, RecordBatchBuilder

    codec = Compression[compression.upper()]
    say = lambda text: (out.write(text + "\n"), out.flush())  # noqa: E731
    broker = None
    conns: List = []
    try:
        if bootstrap is None:
            from kafka_client._testing.brokers import make_broker

            broker = make_broker(broker_kind)
            t0 = time.perf_counter()
            broker.start()
            say(f"started {broker_kind} on {broker.bootstrap} "
                f"({time.perf_counter() - t0:.2f}s)")
            host, port = broker.host, broker.port
        else:
            host, port = _parse_bootstrap(bootstrap)
        conn = BlockingConnection(host, port, client_id="kafka-native-demo", timeout=timeout)
        conns.append(conn)
        say(f"connected to {host}:{port}: ApiVersions v{conn.api_versions_version}, "
            f"Produce v{conn.version_for(simple.PRODUCE_KEY)}, "
            f"Fetch v{conn.version_for(simple.FETCH_KEY)}")
        given = topic is not None
        topic = topic or f"demo-{uuid.uuid4().hex[:8]}"
        simple.create_topics(conn, [topic], partitions=1, exist_ok=given)
        # Topic creation may take a moment to reach the metadata.
        deadline = time.monotonic() + timeout
        while True:
            try:
                leader = _leader_connection(conn, topic, timeout)
                break
            except (RuntimeError, StopIteration, KeyError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        if leader is not conn:
            conns.append(leader)
        say(f"topic {topic}: 1 partition; {messages:,} messages of {MESSAGE_SIZE} bytes, "
            f"compression {codec.name.lower()}")

        try:
            _produce(leader, topic, messages, codec, batch_bytes, in_flight, out, say,
                     RecordBatchBuilder)
        except DemoError as exc:
            say(f"FAILED: {exc}")
            return False
        return _consume(leader, topic, messages, out, say)
    finally:
        for c in conns:
            c.close()
        if broker is not None:
            broker.stop()
            broker.cleanup()
            say(f"stopped {broker_kind}")


def _produce(conn, topic, messages, codec, batch_bytes, in_flight, out, say, builder_cls):
    from kafka_proto.messages import ProduceRequest

    filler = _filler()
    progress = Progress("produce", messages, out)
    t0 = time.perf_counter()
    sent = 0               # messages put in batches and sent
    wire_bytes = 0         # encoded batch bytes sent
    expected_offsets = []  # base offset each in-flight request must get, oldest first
    acked = 0

    def collect_one():
        nonlocal acked
        _cid, resp = conn.receive()
        part = resp.responses[0].partition_responses[0]
        base, count = expected_offsets.pop(0)
        if part.error_code:
            raise DemoError(f"produce failed: broker error {part.error_code}")
        if part.base_offset != base:
            raise DemoError(f"produce: base offset {part.base_offset}, expected {base} "
                            "(is the topic new and empty?)")
        acked += count
        progress.update(acked)

    while sent < messages:
        b = builder_cls(compression=codec)
        i = sent
        # Stop before the next record would cross batch_bytes (brokers refuse batches
        # above max.message.bytes, 1,048,588 by default, with MESSAGE_TOO_LARGE).
        while i < messages and (i == sent or b.size_in_bytes + RECORD_OVERHEAD <= batch_bytes):
            b.append(_value(i, filler))
            i += 1
        batch = b.build()
        count = i - sent
        req = ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=batch)])])
        while conn.in_flight >= in_flight:
            collect_one()
        conn.send(req)
        expected_offsets.append((sent, count))
        wire_bytes += len(batch)
        sent = i
    while conn.in_flight:
        collect_one()
    elapsed = time.perf_counter() - t0
    progress.finish(acked)
    payload_mb = messages * MESSAGE_SIZE / 1e6
    say(f"produced {messages:,} messages in {elapsed:.2f}s: {messages / elapsed:,.0f} msg/s, "
        f"{payload_mb / elapsed:,.1f} MB/s of values ({wire_bytes / 1e6:,.1f} MB on the wire)")
    return wire_bytes


def _consume(conn, topic, messages, out, say) -> bool:
    from kafka_client._testing import simple
    from kafka_proto.records import read_batches

    filler = _filler()
    progress = Progress("consume", messages, out)
    t0 = time.perf_counter()
    offset = 0
    received = 0
    wire_bytes = 0
    bad = 0
    first_bad = None
    version = conn.version_for(simple.FETCH_KEY)
    tid = None
    if version >= 13:
        tid = simple.topic_ids(conn, [topic])[topic]
        if tid.int == 0:  # noida-db has no topic ids: fetch by name
            version, tid = 12, None
    hw = None
    while hw is None or offset < hw:
        part = simple.fetch_once(conn, topic, 0, offset, version=version, topic_id=tid,
                                 partition_max_bytes=8 << 20, max_bytes=32 << 20)
        hw = part.high_watermark
        data = part.records
        if not data:
            if hw <= offset:
                break
            continue
        wire_bytes += len(data)
        for batch in read_batches(data):
            if batch.last_offset < offset:
                continue
            for rec in batch:
                if rec.offset < offset:
                    continue
                if rec.offset != received or rec.value != _value(received, filler):
                    bad += 1
                    if first_bad is None:
                        first_bad = (received, rec.offset, rec.value)
                received += 1
            offset = batch.last_offset + 1
        progress.update(received)
    elapsed = time.perf_counter() - t0
    progress.finish(received)
    say(f"consumed {received:,} messages in {elapsed:.2f}s: {received / elapsed:,.0f} msg/s, "
        f"{received * MESSAGE_SIZE / 1e6 / elapsed:,.1f} MB/s of values "
        f"({wire_bytes / 1e6:,.1f} MB on the wire)")
    ok = received == messages and bad == 0 and hw == messages
    if ok:
        say(f"verified {received:,}/{messages:,} messages: offsets 0..{messages - 1} and "
            f"contents match")
    else:
        say(f"FAILED: {received:,} of {messages:,} messages read, high watermark {hw}, "
            f"{bad} mismatched" + (f" (first: #{first_bad[0]} at offset {first_bad[1]})"
                                   if first_bad else ""))
    return ok


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kafka_client.demo",
        description="Produce N messages with kafka-native's codec and read them back.")
    parser.add_argument("--bootstrap", metavar="HOST:PORT",
                        help="an existing broker (default: start a local one)")
    parser.add_argument("--messages", "-n", type=int, default=200_000, metavar="N",
                        help="messages of 100 bytes to produce (default 200,000)")
    parser.add_argument("--compression", "-c", choices=CODECS, default="none")
    parser.add_argument("--batch-bytes", type=int, default=DEFAULT_BATCH_BYTES,
                        help="uncompressed size at which a batch is closed (default 1,000,000)")
    parser.add_argument("--in-flight", type=int, default=5,
                        help="produce requests in flight (default 5)")
    parser.add_argument("--broker", choices=("tansu", "noida"), default="tansu",
                        help="which local broker to start without --bootstrap")
    parser.add_argument("--topic", help="topic name (default: a new demo-XXXXXXXX)")
    args = parser.parse_args(argv)
    if args.messages < 1:
        parser.error("--messages must be at least 1")
    if args.in_flight < 1:
        parser.error("--in-flight must be at least 1")
    try:
        ok = run(args.bootstrap, args.messages, args.compression, args.batch_bytes,
                 args.in_flight, args.broker, args.topic)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
