"""The demo behind ``./dev demo``: produce N messages with the Producer, read them back.

    python -m kafka_client.demo [--bootstrap host:port] [--messages N] [--compression c]
                                [--api batch|produce] [--acks all|1|0] [--idempotence]

Without ``--bootstrap`` it starts a Tansu broker on a free loopback port (noida-db with
``--broker noida``) and stops it at the end. It creates a one-partition topic and produces
N distinct 100-byte messages with :class:`kafka_client.Producer`: by default through
``produce_batch()`` in chunks of 10,000 (``--api produce``: one ``produce()`` call per
message, each with a delivery callback that checks its offset), with a progress bar that
counts delivery reports. Then it reads the partition back with :class:`kafka_client.Consumer`
(manual assignment from where the run started, until the partition's end), checks that
every offset and value is the one produced, and prints the throughput of both directions.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from typing import Any, Dict, List, Optional, TextIO

from kafka_client import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka_client._testing import simple
from kafka_client._testing.blocking import BlockingConnection
from kafka_client._testing.brokers import make_broker
from kafka_client.config import ClientConfig
from kafka_proto.enums import IsolationLevel, ListOffsetsTimestamp, ReplicaId
from kafka_proto.messages import ApiKey, ListOffsetsRequest, MetadataRequest

__all__ = ["main", "run"]

MESSAGE_SIZE = 100
DEFAULT_MESSAGES = 1_000_000
CHUNK = 10_000                       # values per produce_batch() call
DEFAULT_LINGER_MS = 5                # librdkafka's default: batches fill for 5 ms
DEFAULT_BATCH_MESSAGES = 10_000      # batch.num.messages
DEFAULT_BATCH_BYTES = 1_000_000      # batch.size (brokers refuse batches over ~1 MiB)
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = {"all": -1, "-1": -1, "1": 1, "0": 0}


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


_FILLER = (b"kafka-native demo payload / " * 4)[: MESSAGE_SIZE - 10]
# One %-format per message: a 10-digit sequence number, then the filler.
_FORMAT = b"%010d" + _FILLER.replace(b"%", b"%%")


def _value(i: int, filler: bytes = _FILLER) -> bytes:
    """Message ``i``'s value: its sequence number and filler, distinct and checkable."""
    return b"%010d" % i + filler


def _filler() -> bytes:
    return _FILLER


def _parse_bootstrap(text: str):
    first = text.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"--bootstrap: expected host:port, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _leader_connection(conn, topic: str, timeout: float):
    """Connect to the leader of partition 0 (the bootstrap broker on a single node)."""
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


def _fetch_target(conn, topic: str):
    """The Fetch version to use and the topic id it needs (None: fetch by name)."""
    version = conn.version_for(ApiKey.FETCH)
    tid = None
    if version >= 13:
        tid = simple.topic_ids(conn, [topic])[topic]
        if tid.int == 0:  # noida-db has no topic ids: fetch by name
            version, tid = 12, None
    return version, tid


def _end_offset(conn, topic: str) -> int:
    """The partition's high watermark: where the demo's messages will start.

    Read from a Fetch at the log start offset rather than from ListOffsets(latest), which
    Tansu answers with the last batch's base offset + 1.
    """
    version = conn.version_for(ApiKey.LIST_OFFSETS)
    earliest = ListOffsetsRequest.ListOffsetsPartition(
        partition_index=0, timestamp=ListOffsetsTimestamp.EARLIEST, max_num_offsets=1)
    req = ListOffsetsRequest(
        replica_id=ReplicaId.CONSUMER, isolation_level=IsolationLevel.READ_UNCOMMITTED,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[earliest])])
    part = conn.request(req, version).topics[0].partitions[0]
    if part.error_code:
        raise RuntimeError(f"ListOffsets {topic}[0]: error {part.error_code}")
    start = part.old_style_offsets[0] if version == 0 else part.offset
    fversion, tid = _fetch_target(conn, topic)
    return simple.fetch_once(conn, topic, 0, start, version=fversion, topic_id=tid,
                             partition_max_bytes=65536).high_watermark


def run(bootstrap: Optional[str] = None, messages: int = DEFAULT_MESSAGES,
        compression: str = "none", api: str = "batch", acks: str = "all",
        idempotence: bool = False, linger_ms: float = DEFAULT_LINGER_MS,
        batch_messages: int = DEFAULT_BATCH_MESSAGES, batch_bytes: int = DEFAULT_BATCH_BYTES,
        broker_kind: str = "tansu", topic: Optional[str] = None, timeout: float = 60.0,
        out: TextIO = sys.stdout) -> bool:
    """Run the demo; True if every message was delivered and came back intact.

    Raises :class:`kafka_client.KafkaException` for a configuration the Producer refuses
    (for instance ``idempotence`` with ``acks`` other than ``all``).
    """
    say = lambda text: (out.write(text + "\n"), out.flush())  # noqa: E731
    config = {
        "client.id": "kafka-native-demo",
        "acks": ACKS[str(acks)], "enable.idempotence": idempotence,
        "compression.type": compression, "linger.ms": linger_ms,
        "batch.num.messages": batch_messages, "batch.size": batch_bytes,
        "message.timeout.ms": int(timeout * 1000),
    }
    ClientConfig.from_dict(config, role="producer")  # refuse bad settings before starting
    broker = None
    conns: List = []
    try:
        if bootstrap is None:
            broker = make_broker(broker_kind)
            t0 = time.perf_counter()
            broker.start()
            say(f"started {broker_kind} on {broker.bootstrap} "
                f"({time.perf_counter() - t0:.2f}s)")
            bootstrap = broker.bootstrap
        host, port = _parse_bootstrap(bootstrap)
        # The plain connection creates the topic and fetches; the Producer has its own.
        conn = BlockingConnection(host, port, client_id="kafka-native-demo", timeout=timeout)
        conns.append(conn)
        say(f"connected to {host}:{port}: ApiVersions v{conn.api_versions_version}, "
            f"Produce v{conn.version_for(ApiKey.PRODUCE)}, "
            f"Fetch v{conn.version_for(ApiKey.FETCH)}")
        given = topic is not None
        topic = topic or f"demo-{uuid.uuid4().hex[:8]}"
        simple.create_topics(conn, [topic], partitions=1, exist_ok=given)
        # Topic creation may take a moment to reach the metadata.
        deadline = time.monotonic() + timeout
        while True:
            try:
                leader = _leader_connection(conn, topic, timeout)
                base = _end_offset(leader, topic)
                break
            except (RuntimeError, StopIteration, KeyError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        if leader is not conn:
            conns.append(leader)
        say(f"topic {topic}: 1 partition" + (f" holding {base:,} earlier message"
                                                f"{'s' if base != 1 else ''}" if base else "")
            + f"; {messages:,} messages of {MESSAGE_SIZE} bytes, compression {compression}")

        config["bootstrap.servers"] = bootstrap
        if not _produce(config, topic, messages, base, api, timeout, out, say):
            return False
        return _consume(bootstrap, topic, messages, out, say, base=base, timeout=timeout)
    finally:
        for c in conns:
            c.close()
        if broker is not None:
            broker.stop()
            broker.cleanup()
            say(f"stopped {broker_kind}")


def _produce(config: Dict[str, Any], topic: str, messages: int, base: int, api: str,
             timeout: float, out: TextIO, say) -> bool:
    """Produce ``messages`` values to partition 0; True if every one was delivered."""
    stats: List[str] = []
    config = dict(config, **{"statistics.interval.ms": 100, "stats_cb": stats.append})
    progress = Progress("produce", messages, out)
    errors: List[Any] = []     # [count, first error]
    misplaced = [0]            # delivered at another offset than expected
    acked = [0]

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)
            return
        acked[0] += 1
        # The value starts with its sequence number: it must sit at base + that number
        # (with acks=0 the broker says nothing, and the offset is None).
        offset = msg.offset()
        if offset is not None and offset != base + int(msg.value()[:10]):
            misplaced[0] += 1

    fmt = _FORMAT
    p = Producer(config)
    produce = p.produce
    poll = p.poll
    t0 = time.perf_counter()
    try:
        if api == "batch":
            # Each chunk's values are built just before they are handed over: generating
            # them is part of the measured time, as in an application. A chunk is queued
            # whole or not at all (BufferError: serve reports and try it again).
            i = 0
            while i < messages:
                k = min(CHUNK, messages - i)
                values = [fmt % j for j in range(i, i + k)]
                while True:
                    try:
                        p.produce_batch(topic, values, partition=0)
                        break
                    except BufferError:  # the queue is full: serve reports, try again
                        poll(0.05)
                        progress.update(i - len(p))
                i += k
                poll(0)
                progress.update(i - len(p))
        else:
            for j in range(messages):
                value = fmt % j
                while True:
                    try:
                        produce(topic, value, partition=0, on_delivery=on_delivery)
                        break
                    except BufferError:
                        poll(0.05)
                if not j % 2000:
                    poll(0)
                    progress.update(j + 1 - len(p))
        deadline = time.monotonic() + timeout
        while p.flush(0.1) and time.monotonic() < deadline:
            progress.update(messages - len(p))
        left = len(p)
        elapsed = time.perf_counter() - t0
        progress.finish(messages - left)
        # A statistics document from after the last delivery report: its txmsgs counts
        # the messages the broker accepted (the fast path has no per-message callback).
        seen = len(stats)
        wait_until = time.monotonic() + 2.0
        while len(stats) == seen and time.monotonic() < wait_until:
            poll(0.05)
    finally:
        p.close(0)
    doc = json.loads(stats[-1]) if len(stats) > seen else None
    reports = messages - left
    if api != "batch":
        delivered = acked[0]
    elif doc is not None:
        delivered = doc["txmsgs"]
    else:  # no statistics document came: the read-back will tell
        delivered = reports
    failed = reports - delivered
    # Each document's batch windows cover its own interval: add them all up.
    count = messages_in = bytes_in = 0
    for text in list(stats):
        t = json.loads(text)["topics"].get(topic, {})
        cnt, size = t.get("batchcnt", {}), t.get("batchsize", {})
        count += cnt.get("cnt", 0)
        messages_in += cnt.get("cnt", 0) * cnt.get("avg", 0)
        bytes_in += size.get("cnt", 0) * size.get("avg", 0)
    batches = ""
    if count:
        batches = (f"; batches of {messages_in // count:,} messages, "
                   f"{bytes_in / count / 1e3:,.0f} kB on average")
    say(f"produced {messages:,} messages in {elapsed:.2f}s: {messages / elapsed:,.0f} msg/s, "
        f"{messages * MESSAGE_SIZE / 1e6 / elapsed:,.1f} MB/s of values "
        f"({'produce_batch' if api == 'batch' else 'produce'}{batches})")
    say(f"delivery reports: {reports:,} of {messages:,}, {delivered:,} delivered, "
        f"{failed:,} failed")
    if left:
        say(f"FAILED: {left:,} messages still undelivered after {timeout:.0f}s")
        return False
    if failed:
        first = f" (first: {errors[0].str()})" if errors else ""
        say(f"FAILED: {failed:,} messages were not delivered{first}")
        return False
    if misplaced[0]:
        say(f"FAILED: {misplaced[0]:,} delivery reports gave another offset than expected "
            f"(is somebody else writing to the topic?)")
        return False
    return True


def _consume(bootstrap: str, topic: str, messages: int, out: TextIO, say,
             base: int = 0, timeout: float = 60.0) -> bool:
    """Read partition 0 from ``base`` with kafka_client.Consumer (manual assignment);
    True if it holds exactly messages 0..N-1, each at ``base`` + its sequence number, and
    then ends (partition EOF right after the last one)."""
    filler = _filler()
    progress = Progress("consume", messages, out)
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "client.id": "kafka-native-demo",
        "enable.partition.eof": True,
        # noida-db answers a Fetch with everything from the offset to the end of the log,
        # ignoring the size limits asked for: allow large responses.
        "receive.message.max.bytes": 1 << 30,
    })
    received = bad = 0
    first_bad = None
    eof_at = None
    t0 = time.perf_counter()
    try:
        consumer.assign([TopicPartition(topic, 0, base)])
        deadline = time.monotonic() + timeout
        while eof_at is None or eof_at < base + messages:
            if time.monotonic() > deadline:
                break
            for msg in consumer.consume(10000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        say(f"consumer error: {err.str()}")
                        return False
                    eof_at = msg.offset()
                    continue
                if msg.offset() != base + received or msg.value() != _value(received, filler):
                    bad += 1
                    if first_bad is None:
                        first_bad = (received, msg.offset(), msg.value())
                received += 1
            progress.update(received)
    finally:
        consumer.close()
    elapsed = time.perf_counter() - t0
    progress.finish(received)
    say(f"consumed {received:,} messages in {elapsed:.2f}s: {received / elapsed:,.0f} msg/s, "
        f"{received * MESSAGE_SIZE / 1e6 / elapsed:,.1f} MB/s of values")
    ok = received == messages and bad == 0 and eof_at == base + messages
    if ok:
        say(f"verified {received:,}/{messages:,} messages: offsets {base}.."
            f"{base + messages - 1} and contents match, then the end of the partition")
    else:
        say(f"FAILED: {received:,} of {messages:,} messages read, end of partition at "
            f"{eof_at}, {bad} mismatched" + (f" (first: #{first_bad[0]} at offset "
                                             f"{first_bad[1]})" if first_bad else ""))
    return ok


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kafka_client.demo",
        description="Produce N messages with kafka_client.Producer and read them back.")
    parser.add_argument("--bootstrap", metavar="HOST:PORT",
                        help="an existing broker (default: start a local one)")
    parser.add_argument("--messages", "-n", type=int, default=DEFAULT_MESSAGES, metavar="N",
                        help=f"messages of 100 bytes to produce (default {DEFAULT_MESSAGES:,})")
    parser.add_argument("--compression", "-c", choices=CODECS, default="none")
    parser.add_argument("--api", choices=("batch", "produce"), default="batch",
                        help="produce_batch() in chunks of 10,000 (default), or one produce() "
                             "call per message with a delivery callback")
    parser.add_argument("--acks", choices=("all", "1", "0"), default="all")
    parser.add_argument("--idempotence", action="store_true",
                        help="enable.idempotence=true (needs --acks all)")
    parser.add_argument("--linger-ms", type=float, default=DEFAULT_LINGER_MS,
                        help=f"linger.ms (default {DEFAULT_LINGER_MS})")
    parser.add_argument("--batch-messages", type=int, default=DEFAULT_BATCH_MESSAGES,
                        help=f"batch.num.messages (default {DEFAULT_BATCH_MESSAGES:,})")
    parser.add_argument("--batch-bytes", type=int, default=DEFAULT_BATCH_BYTES,
                        help=f"batch.size (default {DEFAULT_BATCH_BYTES:,})")
    parser.add_argument("--broker", choices=("tansu", "noida"), default="tansu",
                        help="which local broker to start without --bootstrap")
    parser.add_argument("--topic", help="topic name (default: a new demo-XXXXXXXX)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for the broker and for delivery (default 60)")
    args = parser.parse_args(argv)
    if args.messages < 1:
        parser.error("--messages must be at least 1")
    if args.bootstrap is not None:
        _parse_bootstrap(args.bootstrap)
    try:
        ok = run(args.bootstrap, args.messages, args.compression, api=args.api,
                 acks=args.acks, idempotence=args.idempotence, linger_ms=args.linger_ms,
                 batch_messages=args.batch_messages, batch_bytes=args.batch_bytes,
                 broker_kind=args.broker, topic=args.topic, timeout=args.timeout)
    except KafkaException as exc:
        print(f"error: {exc.args[0].str() if exc.args else exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
