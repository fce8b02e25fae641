"""Refresh the fuzz seed corpus (tests/fuzz/corpus/) from real traffic.

    .venv/bin/python tools/fuzz_capture.py            # Tansu and noida-db, rewrite corpus
    .venv/bin/python tools/fuzz_capture.py --brokers tansu --dry-run
    .venv/bin/python tools/fuzz_capture.py --harness consumer   # only that folder

For each broker (started on a free loopback port by kafka_client._testing.brokers):

* confluent-kafka produces a few records with keys and headers to one topic per codec
  (none, gzip, snappy, lz4, zstd), and our RecordBatchBuilder produces the same through
  ``kafka_client._testing.simple.produce``;
* our BlockingConnection then captures the raw response bodies (ApiVersions, Metadata,
  Fetch at several versions, ListOffsets, FindCoordinator, Produce) exactly as received.

From those bodies it writes the inputs of every harness in the layouts of
tests/fuzz/fuzz_harnesses.py: ``responses`` (API key + version + body), ``records`` (the
fetched records blobs), ``compression`` (the compressed sections of the fetched batches),
``framing`` (the response frames as one stream) and ``client`` (ApiVersions, Metadata and
Fetch bodies of one connection). For ``consumer`` it fetches (read_uncommitted and
read_committed) topics written by confluent-kafka with every codec and with committed and
aborted transactions (``capture_consumer``). For ``group`` our consumers join, rebalance,
commit and leave groups (eager and cooperative) on a Tansu behind a recording relay
(``capture_group``); for ``producer`` our plain and idempotent producers send to it
(``capture_producer``); for ``transactions`` our transactional producer commits and
aborts on the test cluster behind the relay (``capture_transactions``), for ``admin``
our AdminClient runs the harness' operations there (``capture_admin``), for ``share``
our ShareConsumer reads and acknowledges there (``capture_share``), for ``listoffsets``
our consumer looks up where to start (``capture_listoffsets``). Legacy (magic
0/1) message sets, which these brokers no longer write, are built field by field from the
same records. Files are named by content hash; inputs above ``--max-size`` bytes are
skipped so the corpus stays small.
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import struct
import sys
import time
import uuid
import zlib
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
#: corpus folders filled by capture_broker and the recorder, and by capture_consumer
BROKER_CAPTURE_HARNESSES = ("records", "compression", "responses", "framing", "client")
#: corpus folders built without a broker
BUILT_HARNESSES = ("downconvert", "cluster")
HARNESS_NAMES = BROKER_CAPTURE_HARNESSES + ("consumer", "group", "producer", "transactions",
                                                "admin", "share", "listoffsets") \
    + BUILT_HARNESSES


def _lenbytes(b):
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


def legacy_message(offset, value, key=None, magic=1, attrs=0, ts=-1) -> bytes:
    """One legacy log entry (offset, size, crc, message)."""
    body = struct.pack(">bB", magic, attrs)
    if magic == 1:
        body += struct.pack(">q", ts)
    body += _lenbytes(key) + _lenbytes(value)
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def legacy_sets(records) -> List[bytes]:
    """Magic 0 and 1 message sets, plain and wrapped in every legacy codec."""
    from kafka_proto.compression import compress

    out = []
    for magic in (0, 1):
        inner = [legacy_message(i if magic == 0 else i, r.value, r.key, magic, 0, r.timestamp)
                 for i, r in enumerate(records)]
        out.append(b"".join(inner))
        for codec in (1, 2, 3):
            payload = compress(codec, b"".join(inner), legacy_lz4_header=(magic == 0))
            out.append(legacy_message(len(inner) - 1, payload, None, magic, codec,
                                      records[-1].timestamp if records else -1))
    return out


class Corpus:
    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.items: Dict[str, Dict[str, bytes]] = {}

    def add(self, harness: str, data: bytes) -> None:
        data = bytes(data)
        if len(data) > self.max_size:
            return
        self.items.setdefault(harness, {})[hashlib.sha1(data).hexdigest()[:16]] = data

    def write(self, root: Path) -> None:
        for harness, items in sorted(self.items.items()):
            folder = root / harness
            if folder.exists():
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
            for name, data in sorted(items.items()):
                (folder / name).write_bytes(data)


def produce_confluent(bootstrap: str, topic: str, codec: str, n: int = 12) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                  "linger.ms": 20, "enable.idempotence": codec == "zstd"})
    for i in range(n):
        p.produce(topic, value=(b"value-%d " % i) * (1 + i % 5),
                  key=None if i % 4 == 0 else b"key-%d" % i,
                  headers=[("h", b"v%d" % i), ("empty", None)] if i % 3 == 0 else None,
                  timestamp=1_700_000_000_000 + i)
    if p.flush(20):
        raise RuntimeError(f"confluent-kafka could not deliver to {topic}")


def produce_ours(conn, topic: str, codec: int) -> bytes:
    from kafka_client._testing import simple
    from kafka_proto.records import RecordBatchBuilder

    b = RecordBatchBuilder(compression=codec)
    for i in range(6):
        b.append(b"ours-%d" % i * 3, None if i == 2 else b"k%d" % i, 1_700_000_000_500 + i,
                 [("trace", b"%d" % i)] if i % 2 else None)
    batch = b.build()
    simple.produce(conn, topic, 0, batch)
    return batch


def capture_broker(kind: str, corpus: Corpus) -> None:
    from fuzz_harnesses import SEGMENT_SEP
    from kafka_client._testing.brokers import make_broker
    from kafka_proto.messages import (
        ApiVersionsRequest,
        FetchRequest,
        FindCoordinatorRequest,
        ListOffsetsRequest,
        MetadataRequest,
        ProduceRequest,
        response_class,
    )
    from kafka_proto.records import read_batches

    RecordingConnection = _recording_connection_class()
    broker = make_broker(kind)
    broker.start()
    frames: List[bytes] = []
    try:
        topics = {}
        for name, codec in CODECS.items():
            topic = f"fuzz-{name}-{uuid.uuid4().hex[:6]}"
            broker.create_topic(topic)
            produce_confluent(broker.bootstrap, topic, name)
            topics[topic] = codec
        conn = RecordingConnection(broker.host, broker.port)
        setup_bodies = list(conn.bodies)  # the ApiVersions exchange as the client saw it
        cid = [1000]

        def raw(req, version):
            body = bytes(conn.request_raw(req, version))
            corpus.add("responses", struct.pack(">hB", req.API_KEY, version) + body)
            try:  # kept either way: Tansu answers ApiVersions v4 in a layout of its own
                response_class(req.API_KEY).decode(body, version)
            except Exception as exc:  # noqa: BLE001
                print(f"  {kind}: API {req.API_KEY} v{version} answer does not decode: {exc}",
                      file=sys.stderr)
            cid[0] += 1
            frames.append(struct.pack(">ii", len(body) + 4, cid[0]) + body)
            return body

        def clamp(key, v):
            lo, hi = conn.broker_versions.get(key, (0, -1))
            return v if lo <= v <= hi else None

        av_version = ApiVersionsRequest.MAX_VERSION
        av_body = raw(ApiVersionsRequest(client_software_name="fuzz",
                                         client_software_version="0"), av_version)
        for v in (0, 3):
            raw(ApiVersionsRequest(client_software_name="fuzz", client_software_version="0"), v)
        md_version = conn.version_for(3)
        md_body = raw(MetadataRequest(topics=None), md_version)
        del av_body
        for v in (1, 9):
            if clamp(3, v) is not None:
                raw(MetadataRequest(topics=None), v)
        for topic, codec in topics.items():
            produce_ours(conn, topic, codec)
            for v in (4, 11, 12):
                if clamp(1, v) is None:
                    continue
                req = FetchRequest(max_wait_ms=10, min_bytes=1, max_bytes=1 << 20,
                                   topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                                       FetchRequest.FetchPartition(
                                           partition=0, fetch_offset=0,
                                           partition_max_bytes=1 << 20)])])
                body = raw(req, v)
                part = FetchResponse_part(body, v)
                records = bytes(part.records or b"")
                if records:
                    corpus.add("records", b"\x01" + records)  # CRCs checked
                    corpus.add("records", b"\x02" + records)  # unchecked: mutations go deeper
                    batches = list(read_batches(records))
                    for batch in batches:
                        if batch.magic == 2 and batch.compression:
                            corpus.add("compression", bytes([batch.compression, 2])
                                       + bytes(batch.raw[61:]))
                    recs = [r for b in batches for r in b]
                    for legacy in legacy_sets(recs[:4]):
                        corpus.add("records", b"\x01" + legacy)
                if v == 12:
                    corpus.add("client", bytes([0, 8, len(frames) & 0xFF]) + SEGMENT_SEP.join(
                        setup_bodies + [md_body, body]))
            if clamp(2, 1) is not None:
                raw(ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
                    name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(
                        partition_index=0, timestamp=-1)])]), 1)
        if clamp(10, 1) is not None:
            raw(FindCoordinatorRequest(key="fuzz-group", key_type=0), 1)
        # a Produce answer, through the same capture
        from kafka_proto.records import RecordBatchBuilder

        b = RecordBatchBuilder()
        b.append(b"x")
        pv = conn.version_for(0)
        raw(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
            ProduceRequest.TopicProduceData(name=next(iter(topics)), partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=b.build())])]), pv)
        conn.close()
    finally:
        broker.stop()
        broker.cleanup()
    # Framing: the captured frames as one stream, in a few cuts (option bytes first).
    small = [f for f in frames if len(f) < 2048]
    for i in range(0, len(small), 4):
        corpus.add("framing", bytes([2]) + struct.pack(">I", i) + b"".join(small[i:i + 4]))


def produce_transactions(bootstrap: str, topic: str, codec: str) -> None:
    """confluent-kafka, transactional: one committed transaction, one aborted, one committed
    (the broker writes a COMMIT or ABORT control batch after each), records with headers."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"fuzz-{topic}",
                  "compression.type": codec, "linger.ms": 5})
    p.init_transactions(30)
    for prefix, n, commit in ((b"c", 3, True), (b"a", 3, False), (b"d", 2, True)):
        p.begin_transaction()
        for i in range(n):
            p.produce(topic, value=b"%s%d " % (prefix, i) * 3, key=b"k%d" % i, partition=0,
                      headers=[("txn", prefix), ("i", b"%d" % i)])
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)


#: consumer harness option bytes: flags (bit 0 read_committed, bit 1 check.crcs, bit 2
#: enable.partition.eof) and byte 2 (bits 0-1 decompression cap, 2-3 start mode, 4-5 the
#: resumed row limit); see check_consumer in tests/fuzz/fuzz_harnesses.py.
CONSUMER_OPTIONS = ((0x00, 0x01), (0x07, 0x36), (0x22, 0x1b), (0x83, 0x2a))


def capture_consumer(kind: str, corpus: Corpus) -> None:
    """FetchResponse bodies as the consumer gets them (the ``consumer`` harness): a topic
    per codec written by confluent-kafka (keys, headers), and a topic with committed and
    aborted transactions, fetched read_uncommitted and read_committed (noida-db sends the
    aborted-transactions list; Tansu 0.6 does not, but writes the control batches), at
    Fetch v4, v11, v12 and, when the broker reports topic ids, v13+."""
    from kafka_client._testing import simple
    from kafka_client._testing.brokers import make_broker
    from kafka_proto.messages import FetchRequest, FetchResponse

    broker = make_broker(kind)
    broker.start()
    try:
        topics = {}
        for name in CODECS:
            topic = f"cfz-{name}-{uuid.uuid4().hex[:6]}"
            broker.create_topic(topic)
            produce_confluent(broker.bootstrap, topic, name, n=6)
            topics[topic] = False
        for name in ("none", "zstd"):
            topic = f"cfz-txn-{name}-{uuid.uuid4().hex[:6]}"
            broker.create_topic(topic)
            produce_transactions(broker.bootstrap, topic, name)
            topics[topic] = True
        conn = _recording_connection_class()(broker.host, broker.port)
        lo, hi = conn.broker_versions.get(1, (0, -1))
        ids = {}
        if hi >= 13 and conn.version_for(3) >= 10:
            ids = {t: i for t, i in simple.topic_ids(conn, list(topics)).items()
                   if i is not None and i.int != 0}
        for n, (topic, txn) in enumerate(topics.items()):
            versions = [v for v in (4, 11, 12) if lo <= v <= hi]
            if topic in ids:
                versions += [v for v in (13, hi) if lo <= v <= hi]
            if not txn and versions:  # one version by name and one by id per codec topic
                versions = [versions[n % len(versions[:3])]] + versions[3:][-1:]
            for v in sorted(set(versions)):
                bodies = {}
                for isolation in ((0, 1) if txn else (0,)):
                    if v >= 13:
                        ft = FetchRequest.FetchTopic(topic_id=ids[topic], partitions=[])
                    else:
                        ft = FetchRequest.FetchTopic(topic=topic, partitions=[])
                    ft.partitions.append(FetchRequest.FetchPartition(
                        partition=0, fetch_offset=0, partition_max_bytes=1 << 20))
                    req = FetchRequest(max_wait_ms=10, min_bytes=1, max_bytes=1 << 20,
                                       isolation_level=isolation, topics=[ft])
                    body = bytes(conn.request_raw(req, v))
                    flags, opt = CONSUMER_OPTIONS[(n + v) % len(CONSUMER_OPTIONS)]
                    flags = (flags & ~1) | isolation
                    corpus.add("consumer", bytes([v - 4, flags, opt, 1]) + body)
                    bodies[isolation] = body
                if txn and len(bodies) == 2:
                    # noida-db leaves the aborted batches out of a read_committed answer;
                    # the read_uncommitted records with its aborted-transactions list make
                    # the consumer filter them itself.
                    both = FetchResponse.decode(bodies[0], v)
                    committed = FetchResponse.decode(bodies[1], v)
                    aborted = committed.responses[0].partitions[0].aborted_transactions
                    if aborted:
                        both.responses[0].partitions[0].aborted_transactions = aborted
                        corpus.add("consumer", bytes([v - 4, 0x01, 0x30, 0]) + both.encode(v))
        conn.close()
    finally:
        broker.stop()
        broker.cleanup()


class Recorder:
    """Loopback TCP relay that keeps both directions of every connection, for capturing
    what a third-party client (confluent-kafka) and the broker exchange."""

    def __init__(self, target_port: int) -> None:
        import socket
        import threading

        self.target_port = target_port
        self.conns: List[List[bytearray]] = []  # [upstream, downstream] per connection
        self._lsock = socket.socket()
        self._lsock.bind(("127.0.0.1", 0))
        self._lsock.listen(16)
        self.port = self._lsock.getsockname()[1]
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while not self._closing:
            try:
                client, _ = self._lsock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), 5)
            except OSError:
                client.close()
                continue
            bufs = [bytearray(), bytearray()]
            self.conns.append(bufs)
            for src, dst, buf in ((client, upstream, bufs[0]), (upstream, client, bufs[1])):
                threading.Thread(target=self._pump, args=(src, dst, buf), daemon=True).start()

    @staticmethod
    def _pump(src, dst, buf: bytearray) -> None:
        import socket

        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                buf += data
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self._closing = True
        self._lsock.close()

    def exchanges(self):
        """Yield (api_key, api_version, raw downstream stream, [(key, version, body)])."""
        from kafka_proto.framing import FrameParser, decode_response_header

        for up, down in list(self.conns):
            reqs = {}
            for frame in FrameParser().feed(bytes(up)):
                key, ver, cid = struct.unpack_from(">hhi", frame, 0)
                reqs[cid] = (key, ver)
            answers = []
            for frame in FrameParser().feed(bytes(down)):
                (cid,) = struct.unpack_from(">i", frame, 0)
                if cid not in reqs:
                    continue
                key, ver = reqs[cid]
                try:
                    _, body = decode_response_header(frame, key, ver)
                except Exception:  # noqa: BLE001 - an API this codec does not know
                    continue
                answers.append((key, ver, bytes(body)))
            yield bytes(down), answers


def capture_confluent_tansu(corpus: Corpus) -> None:
    """confluent-kafka producer and group consumer against Tansu, through a Recorder:
    Tansu advertises the recorder's port, so every connection passes it."""
    from confluent_kafka import Consumer, TopicPartition

    from kafka_client._testing.brokers import free_port
    from kafka_client._testing.proxy import ProxiedTansu
    from kafka_proto.messages import FetchResponse
    from kafka_proto.records import read_batches

    broker_port = free_port()
    rec = Recorder(broker_port)
    broker = ProxiedTansu(advertised_port=rec.port, port=broker_port)
    broker.start()
    try:
        topics = []
        for name in CODECS:
            topic = f"cfz-{name}-{uuid.uuid4().hex[:6]}"
            broker.create_topic(topic)
            produce_confluent(f"127.0.0.1:{rec.port}", topic, name)
            topics.append(topic)
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{rec.port}", "group.id": "fuzz-capture",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        # assign(), not subscribe(): a group join costs Tansu's rebalance delay; offsets are
        # still committed to the group (FindCoordinator, OffsetCommit, OffsetFetch).
        c.assign([TopicPartition(t, 0, 0) for t in topics])
        got = 0
        deadline = time.monotonic() + 20
        while got < 12 * len(topics) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                got += 1
        try:
            c.commit(offsets=[TopicPartition(t, 0, 12) for t in topics], asynchronous=False)
            c.committed([TopicPartition(t, 0) for t in topics], timeout=10)
        except Exception as exc:  # noqa: BLE001 - the capture goes on without them
            print(f"  confluent/tansu: commit failed: {exc}", file=sys.stderr)
        c.close()
    finally:
        broker.stop()
        broker.cleanup()
        rec.close()
    print(f"  confluent/tansu: {got} messages consumed through the recorder", file=sys.stderr)
    for down, answers in rec.exchanges():
        if 0 < len(down) <= 2048:
            corpus.add("framing", bytes([3]) + struct.pack(">I", len(down)) + down)
        for key, ver, body in answers:
            corpus.add("responses", struct.pack(">hB", key, ver) + body)
            if key != 1:
                continue
            try:
                resp = FetchResponse.decode(body, ver)
            except Exception:  # noqa: BLE001
                continue
            for t in resp.responses or ():
                for p in t.partitions or ():
                    if p.records:
                        corpus.add("records", b"\x02" + bytes(p.records))
                        for batch in read_batches(bytes(p.records)):
                            if batch.magic == 2 and batch.compression:
                                corpus.add("compression", bytes([batch.compression, 2])
                                           + bytes(batch.raw[61:]))


def capture_group(corpus: Corpus) -> None:
    """Our consumers' group sessions against Tansu through a Recorder, for the ``group``
    harness: for each assignment strategy two members join a group subscribed to ``t0``
    (3 partitions) and ``t1`` (2), rebalance, commit and look up offsets, and leave.
    Every connection's group answers, in order, make one input (flags byte: cooperative
    when its JoinGroup answer names cooperative-sticky), behind the FindCoordinator answer
    of the session; each answer alone is an input too."""
    from fuzz_harnesses import SEGMENT_SEP, _GROUP_KEYS

    from kafka_client import Consumer, TopicPartition
    from kafka_client._testing.brokers import free_port
    from kafka_client._testing.proxy import ProxiedTansu
    from kafka_proto.messages import JoinGroupResponse

    broker_port = free_port()
    rec = Recorder(broker_port)
    broker = ProxiedTansu(advertised_port=rec.port, port=broker_port)
    broker.start()
    bootstrap = f"127.0.0.1:{rec.port}"
    try:
        broker.create_topic("t0", partitions=3)
        broker.create_topic("t1", partitions=2)
        for strategy in ("range", "cooperative-sticky"):
            conf = {"bootstrap.servers": bootstrap, "group.id": f"fuzz-{strategy}",
                    "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                    "partition.assignment.strategy": strategy, "enable.auto.commit": False}
            members = [Consumer(conf), Consumer(conf)]
            for c in members:
                c.subscribe(["t0", "t1"])
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not c.assignment():
                    for m in members:
                        m.poll(0.1)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and \
                    sum(len(m.assignment()) for m in members) != 5:
                for m in members:
                    m.poll(0.1)
            first = members[0]
            try:
                tps = [TopicPartition(tp.topic, tp.partition, 3) for tp in first.assignment()]
                if tps:
                    first.commit(offsets=tps, asynchronous=False)
                first.committed([TopicPartition("t0", p) for p in range(3)], timeout=10)
            except Exception as exc:  # noqa: BLE001 - the capture goes on without them
                print(f"  group/{strategy}: commit failed: {exc}", file=sys.stderr)
            members[1].close()
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                first.poll(0.1)
            first.close()
    finally:
        broker.stop()
        broker.cleanup()
        rec.close()
    finds: List[bytes] = []
    sessions = []
    for _down, answers in rec.exchanges():
        mine = [(key, ver, body) for key, ver, body in answers if key in _GROUP_KEYS]
        for key, ver, body in mine:
            corpus.add("group", bytes([0]) + struct.pack(">hB", key, ver) + body)
            if key == 10:
                finds.append(struct.pack(">hB", key, ver) + body)
        if any(key != 10 for key, _v, _b in mine):
            sessions.append(mine)
    for mine in sessions:
        flags = 0
        for key, ver, body in mine:
            if key == 11:
                resp = JoinGroupResponse.decode(body, ver)
                if resp.protocol_name == "cooperative-sticky":
                    flags = 1
        segments = finds[:1] + [struct.pack(">hB", k, v) + b for k, v, b in mine if k != 10]
        corpus.add("group", bytes([flags]) + SEGMENT_SEP.join(segments))
    print(f"  group: {len(sessions)} sessions captured", file=sys.stderr)


def group_kip848_sessions(corpus: Corpus) -> None:
    """Sessions of KIP-848's protocol for the ``group`` harness (flags bit 3), built
    answer by answer with the codec: the brokers captured above do not serve
    ConsumerGroupHeartbeat. A join that brings t0 and t1 (the harness's topic ids), an
    answer taking partitions away, a fenced member, a commit with a stale epoch, and a
    leave; as a dynamic and as a static member."""
    from fuzz_harnesses import _GROUP_TOPIC_IDS, SEGMENT_SEP

    from kafka_proto.messages import (
        ConsumerGroupHeartbeatResponse as Beat,
        FindCoordinatorResponse,
        OffsetCommitResponse,
    )

    def beat(epoch: int, parts=None, error: int = 0) -> bytes:
        assignment = None if parts is None else Beat.Assignment(topic_partitions=[
            Beat.TopicPartitions(topic_id=_GROUP_TOPIC_IDS[t], partitions=ps)
            for t, ps in parts.items()])
        resp = Beat(throttle_time_ms=0, error_code=error, error_message=None,
                    member_id=None, member_epoch=epoch, heartbeat_interval_ms=100,
                    assignment=assignment)
        return struct.pack(">hB", 68, 0) + resp.encode(0)

    find = FindCoordinatorResponse(
        throttle_time_ms=0, coordinators=[FindCoordinatorResponse.Coordinator(
            key="fuzz-group", node_id=1, host="127.0.0.1", port=9092, error_code=0,
            error_message=None)])
    commit = OffsetCommitResponse(throttle_time_ms=0, topics=[
        OffsetCommitResponse.OffsetCommitResponseTopic(name="t0", partitions=[
            OffsetCommitResponse.OffsetCommitResponsePartition(
                partition_index=0, error_code=113)])])   # STALE_MEMBER_EPOCH
    session = [struct.pack(">hB", 10, 4) + find.encode(4),
               beat(1, {"t0": [0, 1, 2], "t1": [0, 1]}), beat(1),
               beat(2, {"t0": [0, 1], "t1": [1]}), beat(2),
               struct.pack(">hB", 8, 8) + commit.encode(8),
               beat(-1, error=110),                        # FENCED_MEMBER_EPOCH
               beat(3, {"t0": [2]}), struct.pack(">hB", 13, 0) + beat(-1)[3:]]
    for flags in (8, 8 | 2):
        corpus.add("group", bytes([flags]) + SEGMENT_SEP.join(session))


def capture_producer(corpus: Corpus) -> None:
    """Our producers against Tansu through a Recorder, for the ``producer`` harness: plain
    (acks=1 and acks=all) and idempotent, 12 messages to the 3 partitions of topic ``t``,
    two per batch, as the harness sends them. Each connection's Produce and
    InitProducerId answers, in order, make one input (flags: idempotence when an
    InitProducerId answer is among them, acks=all for the second plain run)."""
    from fuzz_harnesses import SEGMENT_SEP, _PRODUCER_KEYS

    from kafka_client import Producer
    from kafka_client._testing.brokers import free_port
    from kafka_client._testing.proxy import ProxiedTansu

    broker_port = free_port()
    rec = Recorder(broker_port)
    broker = ProxiedTansu(advertised_port=rec.port, port=broker_port)
    broker.start()
    runs = ({"acks": 1}, {"acks": "all"}, {"enable.idempotence": True})
    sessions = []
    try:
        broker.create_topic("t", partitions=3)
        for extra in runs:
            before = len(rec.conns)
            p = Producer({"bootstrap.servers": f"127.0.0.1:{rec.port}", "linger.ms": 0,
                          "batch.num.messages": 2, **extra})
            for part in range(3):
                for i in range(4):
                    p.produce("t", b"m%d-%d" % (part, i), partition=part)
            assert p.flush(30) == 0
            p.close()
            time.sleep(0.2)   # the relay's last bytes
            sessions.append((extra, before))
    finally:
        broker.stop()
        broker.cleanup()
        rec.close()
    conns = list(rec.exchanges())
    for n, (extra, before) in enumerate(sessions):
        end = sessions[n + 1][1] if n + 1 < len(sessions) else len(conns)
        for _down, answers in conns[before:end]:
            mine = [(k, v, b) for k, v, b in answers if k in _PRODUCER_KEYS]
            if not any(k == 0 for k, _v, _b in mine):
                continue
            flags = (1 if any(k == 22 for k, _v, _b in mine) else 0) | \
                (2 if extra.get("acks") == "all" else 0)
            corpus.add("producer", bytes([flags]) + SEGMENT_SEP.join(
                struct.pack(">hB", k, v) + b for k, v, b in mine))
            for k, v, b in mine:
                corpus.add("producer", bytes([flags]) + struct.pack(">hB", k, v) + b)
    print(f"  producer: {len(conns)} connections recorded", file=sys.stderr)


def capture_transactions(corpus: Corpus) -> None:
    """Our transactional producer against the test cluster (``kafka_client.testing``,
    one broker) through a Recorder, for the ``transactions`` harness: init, then two
    transactions of three messages to topic ``t`` (2 partitions) with offsets sent to
    the transaction, the first committed, the second aborted. The answers of the
    harness' APIs, from every connection in order, make one input per flags byte (two
    transactions with offsets and three messages; the odd ones aborted; timeouts of 0);
    each answer alone is an input too. Hand-made variants of the real answers carry the
    coordinator's errors (CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, PRODUCER_FENCED,
    UNKNOWN_PRODUCER_ID, INVALID_TXN_STATE), a lost connection and a late answer."""
    import types

    from fuzz_harnesses import SEGMENT_SEP, _TXN_KEYS

    from kafka_client import Producer, TopicPartition
    from kafka_client._testing.brokers import free_port
    from kafka_client.testing import Cluster
    from kafka_proto.messages import (
        AddPartitionsToTxnResponse,
        TxnOffsetCommitResponse,
        response_class,
    )

    broker_port = free_port()
    rec = Recorder(broker_port)
    group = types.SimpleNamespace(group_id="fuzz-group", generation_id=-1, member_id="",
                                  group_instance_id=None)
    with Cluster(brokers=1, ports=[broker_port], advertised_ports=[rec.port]) as cluster:
        cluster.create_topic("t", partitions=2)
        cluster.create_topic("in", partitions=2)
        p = Producer({"bootstrap.servers": f"127.0.0.1:{rec.port}", "linger.ms": 0,
                      "batch.num.messages": 2, "transactional.id": "fuzz-txn"})
        p.init_transactions(30)
        for number, commit in ((1, True), (2, False)):
            p.begin_transaction()
            for i in range(3):
                p.produce("t", b"m%d-%d" % (number, i), partition=i % 2)
            p.send_offsets_to_transaction([TopicPartition("in", 0, 10 * number),
                                           TopicPartition("in", 1, 7)], group, 30)
            if commit:
                p.commit_transaction(30)
            else:
                p.flush(30)
                p.abort_transaction(30)
        p.close()
        time.sleep(0.2)   # the relay's last bytes
    rec.close()
    answers = [(k, v, b) for _down, conn in rec.exchanges() for k, v, b in conn
               if k in _TXN_KEYS]

    def segment(key: int, version: int, body: bytes, how: int = 0) -> bytes:
        return struct.pack(">hBB", key, version, how) + body

    session = [segment(k, v, b) for k, v, b in answers]
    for flags in (0x65, 0x75, 0x6d, 0x21):
        corpus.add("transactions", bytes([flags]) + SEGMENT_SEP.join(session))
    for k, v, b in answers:
        corpus.add("transactions", bytes([0x65]) + segment(k, v, b))

    def variant(key: int, change) -> List[bytes]:
        """The session with the first answer of ``key`` replaced by ``change(answer)``
        (a segment), before the real one (which then answers the retry)."""
        out = []
        changed = False
        for k, v, b in answers:
            if k == key and not changed:
                out.append(change(response_class(k).decode(b, v), v))
                changed = True
            out.append(segment(k, v, b))
        return out

    def code_of(code: int):
        def change(resp, version):
            for entry in getattr(resp, "coordinators", None) or [resp]:
                entry.error_code = code     # FindCoordinator v4+: per key
            return segment(resp.API_KEY, version, resp.encode(version))
        return change

    def partitions_of(code: int):
        def change(resp, version):
            if isinstance(resp, AddPartitionsToTxnResponse):
                for t in resp.results_by_topic_v3_and_below:
                    for r in t.results_by_partition:
                        r.partition_error_code = code
            else:
                assert isinstance(resp, TxnOffsetCommitResponse)
                for t in resp.topics:
                    for pt in t.partitions:
                        pt.error_code = code
            return segment(resp.API_KEY, version, resp.encode(version))
        return change

    def how(bits: int):
        def change(resp, version):
            return segment(resp.API_KEY, version, resp.encode(version), bits)
        return change

    variants = [variant(26, code_of(code)) for code in (51, 16, 90, 59, 48)]  # EndTxn
    variants += [variant(10, code_of(16)), variant(22, code_of(51)),
                 variant(25, code_of(51)), variant(25, code_of(90)),
                 variant(24, partitions_of(51)), variant(24, partitions_of(3)),
                 variant(28, partitions_of(22)), variant(28, partitions_of(16)),
                 variant(24, how(1)), variant(24, how(2)), variant(26, how(2)),
                 variant(0, how(1))]
    for v in variants:
        for flags in (0x65, 0x75):
            corpus.add("transactions", bytes([flags]) + SEGMENT_SEP.join(v))
    print(f"  transactions: {len(answers)} answers recorded "
          f"({', '.join(str(k) for k, _v, _b in answers)})", file=sys.stderr)


def capture_admin(corpus: Corpus) -> None:
    """Our AdminClient against the test cluster (``kafka_client.testing``, one broker)
    through a Recorder, for the ``admin`` harness: the harness' operations with its
    arguments (topic ``t`` of 2 partitions holding a few records, groups ``g1`` and
    ``g2``), group by group (the flags bits). The answers of each group's APIs, in
    order, make one input with that group's bit, all of them one with every bit; each
    answer alone is an input too."""
    from fuzz_harnesses import SEGMENT_SEP, _ADMIN_KEYS, _admin_operations

    from kafka_client import Producer, TopicCollection, TopicPartition
    from kafka_client._testing.brokers import free_port
    from kafka_client.admin import AdminClient, OffsetSpec
    from kafka_client.testing import Cluster

    broker_port = free_port()
    rec = Recorder(broker_port)
    groups = []
    with Cluster(brokers=1, ports=[broker_port], advertised_ports=[rec.port]) as cluster:
        cluster.create_topic("t", partitions=2)
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        for i in range(12):
            p.produce("t", b"v%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        p.close()
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{rec.port}"})
        admin.list_topics(timeout=30)
        for bit in range(7):
            before = len(rec.conns), [len(down) for _up, down in rec.conns]
            for name, _fn, args, _futures in _admin_operations(1 << bit):
                call = getattr(admin, name)
                arg = args[0] if len(args) == 2 else None
                if name in ("delete_records", "list_offsets"):
                    arg = ([TopicPartition(t, p, 5) for t, p in arg] if name ==
                           "delete_records" else
                           {TopicPartition("t", 0): OffsetSpec.latest(),
                            TopicPartition("t", 1): OffsetSpec.earliest()})
                if name == "describe_topics":
                    arg = TopicCollection(arg)
                elif name.endswith("_consumer_group_offsets"):
                    arg = [arg]
                result = call(arg) if arg is not None else call()
                for f in (result.values() if isinstance(result, dict) else [result]):
                    try:
                        f.result(30)
                    except Exception:  # noqa: BLE001 - a refusal is an answer too
                        pass
            time.sleep(0.2)   # the relay's last bytes
            groups.append((bit, before))
        admin.close()
        time.sleep(0.2)
    rec.close()
    conns = list(rec.conns)

    def answers_between(start, end) -> List[tuple]:
        from kafka_proto.framing import FrameParser, decode_response_header

        out = []
        for n, (up, down) in enumerate(conns):
            lo_down = start[1][n] if n < len(start[1]) else 0
            hi_down = end[1][n] if end is not None and n < len(end[1]) else len(down)
            reqs = {}
            for frame in FrameParser().feed(bytes(up)):
                key, ver, cid = struct.unpack_from(">hhi", frame, 0)
                reqs[cid] = (key, ver)
            pos = 0
            for frame in FrameParser().feed(bytes(down)):
                pos += 4 + len(frame)
                (cid,) = struct.unpack_from(">i", frame, 0)
                if not lo_down < pos <= hi_down or cid not in reqs:
                    continue
                key, ver = reqs[cid]
                if key not in _ADMIN_KEYS:
                    continue
                _, body = decode_response_header(frame, key, ver)
                out.append((key, ver, bytes(body)))
        return out

    every: List[tuple] = []
    for n, (bit, before) in enumerate(groups):
        after = groups[n + 1][1] if n + 1 < len(groups) else None
        mine = answers_between(before, after)
        if bit == 5 and not any(k == 10 for k, _v, _b in mine):
            # the client kept the coordinators found for bit 4's groups: the harness
            # starts without them
            mine = [a for a in every if a[0] == 10] + mine
        every += mine
        segs = [struct.pack(">hBB", k, v, 0) + b for k, v, b in mine]
        corpus.add("admin", bytes([1 << bit]) + SEGMENT_SEP.join(segs))
        for seg in segs:
            corpus.add("admin", bytes([1 << bit]) + seg)
    corpus.add("admin", bytes([0x7F]) + SEGMENT_SEP.join(
        struct.pack(">hBB", k, v, 0) + b for k, v, b in every))
    print(f"  admin: {len(every)} answers recorded", file=sys.stderr)


def capture_share(corpus: Corpus) -> None:
    """Our ShareConsumer against the test cluster (``kafka_client.testing``, one broker)
    through a Recorder, for the ``share`` harness: 12 records on topic ``t`` (2
    partitions), read by one member (explicit acknowledgements, every second record
    released once), committed, then closed. The topic's id in the answers is replaced by
    the harness' (``_SHARE_TOPIC_ID``). The answers of the harness' APIs, in order, make
    one input per flags byte (ACCEPT, alternately ACCEPT and RELEASE; with commits; with
    close); each answer alone is an input too."""
    from fuzz_harnesses import SEGMENT_SEP, _SHARE_KEYS, _SHARE_TOPIC_ID

    from kafka_client import AcknowledgeType, Producer, ShareConsumer
    from kafka_client._testing.brokers import free_port
    from kafka_client.testing import Cluster
    from kafka_proto.messages import response_class

    broker_port = free_port()
    rec = Recorder(broker_port)
    with Cluster(brokers=1, ports=[broker_port], advertised_ports=[rec.port]) as cluster:
        cluster.create_topic("t", partitions=2)
        c = ShareConsumer({"bootstrap.servers": f"127.0.0.1:{rec.port}",
                           "group.id": "fuzz-share",
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe(["t"])
        deadline = time.monotonic() + 30
        while not c._fetcher.assigned and time.monotonic() < deadline:
            c.poll(0.2)      # a share group starts at the end: join first
        with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as p:
            for i in range(12):
                p.produce("t", b"v%d" % i, partition=i % 2)
            assert p.flush(30) == 0
        seen = 0
        released = set()
        deadline = time.monotonic() + 30
        while seen < 12 and time.monotonic() < deadline:
            for m in c.poll(0.5):
                key = (m.partition(), m.offset())
                if m.offset() % 2 and key not in released:
                    released.add(key)
                    c.acknowledge(m, AcknowledgeType.RELEASE)
                else:
                    seen += 1
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
            c.commit_sync(10)
        c.close()
        time.sleep(0.2)   # the relay's last bytes
    rec.close()
    answers = [(k, v, b) for _down, conn in rec.exchanges() for k, v, b in conn
               if k in _SHARE_KEYS]

    def harness_ids(key: int, version: int, body: bytes) -> bytes:
        """The answer with the cluster's topic id replaced by the harness'."""
        resp = response_class(key).decode(body, version)
        if key == 76 and resp.assignment is not None:
            for tp in resp.assignment.topic_partitions:
                tp.topic_id = _SHARE_TOPIC_ID
        elif key in (78, 79):
            for topic in resp.responses:
                topic.topic_id = _SHARE_TOPIC_ID
        return resp.encode(version)

    segs = [struct.pack(">hBB", k, v, 0) + harness_ids(k, v, b) for k, v, b in answers]
    for flags in (0x00, 0x03, 0x04, 0x08, 0x0f):
        corpus.add("share", bytes([flags]) + SEGMENT_SEP.join(segs))
    for seg in segs:
        corpus.add("share", bytes([0x08]) + seg)
    print(f"  share: {len(answers)} answers recorded "
          f"({', '.join(str(k) for k, _v, _b in answers)})", file=sys.stderr)


def capture_listoffsets(corpus: Corpus) -> None:
    """Our consumer's offset lookups on the test cluster (``kafka_client.testing``, one
    broker) through a Recorder, for the ``listoffsets`` harness: topic ``t`` (3
    partitions, a few records each) assigned from the beginning, the end and three from
    the end, read_uncommitted and read_committed. Each consumer's ListOffsets answers make
    one input (byte 0 the version they came at, byte 1 the isolation), each answer alone
    one too."""
    from fuzz_harnesses import SEGMENT_SEP

    from kafka_client import OFFSET_BEGINNING, OFFSET_END, OFFSET_TAIL, Consumer, Producer
    from kafka_client import TopicPartition
    from kafka_client._testing.brokers import free_port
    from kafka_client.testing import Cluster
    from kafka_proto.messages import API_KEYS, ListOffsetsResponse

    broker_port = free_port()
    rec = Recorder(broker_port)
    runs = []
    with Cluster(brokers=1, ports=[broker_port], advertised_ports=[rec.port]) as cluster:
        cluster.create_topic("t", partitions=3)
        with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as p:
            for i in range(12):
                p.produce("t", b"v%d" % i, partition=i % 3)
            assert p.flush(30) == 0
        for isolation in ("read_uncommitted", "read_committed"):
            before = len(rec.conns)
            c = Consumer({"bootstrap.servers": f"127.0.0.1:{rec.port}",
                          "group.id": "fuzz-listoffsets", "isolation.level": isolation})
            c.assign([TopicPartition("t", 0, OFFSET_BEGINNING),
                      TopicPartition("t", 1, OFFSET_END),
                      TopicPartition("t", 2, OFFSET_TAIL(3))])
            deadline = time.monotonic() + 10
            got = 0
            while got < 7 and time.monotonic() < deadline:
                got += len(c.consume(10, 0.2))
            c.close()
            time.sleep(0.2)   # the relay's last bytes
            runs.append((isolation, before))
    rec.close()
    conns = list(rec.exchanges())
    info = API_KEYS[2]
    for n, (isolation, before) in enumerate(runs):
        end = runs[n + 1][1] if n + 1 < len(runs) else len(conns)
        answers = [(v, b) for _down, conn in conns[before:end] for k, v, b in conn if k == 2]
        if not answers:
            continue
        flags = 1 if isolation == "read_committed" else 0
        head = bytes([answers[0][0] - info.min_version, flags])
        corpus.add("listoffsets", head + SEGMENT_SEP.join(b for _v, b in answers))
        for v, b in answers:
            corpus.add("listoffsets", bytes([v - info.min_version, flags]) + b)
        # Variants of the first answer, each before the real one (which answers the
        # lookup asked again): a partition's error, a partition left out, no offset.
        v, b = answers[0]
        for change in ("error 6", "error 78", "error 3", "left out", "offset -1"):
            resp = ListOffsetsResponse.decode(b, v)
            parts = resp.topics[0].partitions
            if change.startswith("error"):
                parts[1].error_code = int(change.split()[1])
            elif change == "left out":
                del parts[1]
            else:
                parts[0].offset = -1
            corpus.add("listoffsets", bytes([v - info.min_version, flags])
                       + resp.encode(v) + SEGMENT_SEP + b)
    print(f"  listoffsets: {len(runs)} consumers recorded", file=sys.stderr)


def _recording_connection_class():
    from kafka_client._testing.blocking import BlockingConnection

    class RecordingConnection(BlockingConnection):
        """Keeps every response body it reads, in order."""

        def _next_event(self, deadline):
            event = super()._next_event(deadline)
            if not hasattr(self, "bodies"):
                self.bodies = []
            self.bodies.append(bytes(event.body))
            return event

    return RecordingConnection


def FetchResponse_part(body: bytes, version: int):
    from kafka_proto.messages import FetchResponse

    resp = FetchResponse.decode(body, version)
    return resp.responses[0].partitions[0]


def hostile_legacy_sets() -> List[bytes]:
    """Legacy message sets a producer before Kafka 0.11 could send, good and hostile:
    plain and wrapped in each codec, magic 0 and 1 mixed, a wrapper inside a wrapper,
    offsets that go back, a CRC off, a cut message, a size of 2 GiB, nothing at all."""
    from kafka_proto.compression import compress
    from kafka_proto.records import LegacyMessage, build_message_set

    records = [LegacyMessage(i, 1_700_000_000_000 + i, None if i % 3 == 0 else b"k%d" % i,
                             b"value-%d" % i * (i + 1)) for i in range(5)]
    sets = [build_message_set(records, magic, codec) for magic in (0, 1) for codec in range(4)]
    sets.append(build_message_set(records, 1, 1, log_append_time=1_700_000_000_999))
    mixed = legacy_message(0, b"v0", magic=0) + legacy_message(1, b"v1", magic=1, ts=5)
    inner = build_message_set(records[:2], 1, 1)
    nested = legacy_message(7, compress(1, inner), None, 1, 1, 9)
    backwards = legacy_message(5, b"a") + legacy_message(3, b"b") + legacy_message(3, b"c")
    bad_crc = bytearray(sets[0])
    bad_crc[14] ^= 0xFF
    huge = struct.pack(">qi", 0, 0x7FFFFFFF) + sets[4][12:40]
    sets += [mixed, nested, backwards, bytes(bad_crc), sets[5][:-7], huge, b"",
             legacy_message(-1, b"x"), legacy_message((1 << 63) - 1, b"x", ts=-7)]
    return sets


def stored_logs() -> List[bytes]:
    """Stored v2 batches as a producer could have written them: each codec, headers,
    LogAppendTime, a big record, an aborted and a committed transaction with their
    markers, a zstd batch first and later."""
    from kafka_proto.records import RecordBatchBuilder
    from kafka_proto.records.control import build_control_batch

    def batch(base, n, codec=0, **kw):
        b = RecordBatchBuilder(compression=codec, **kw)
        for i in range(n):
            b.append(b"v%d" % (base + i), key=None if i % 2 else b"k%d" % i,
                     timestamp=1_700_000_000_000 + base + i, headers=[("h", b"x")])
        return b.build(base)

    logs = [batch(0, 3, codec) + batch(3, 2, codec) for codec in range(5)]
    logs.append(batch(0, 3, 1, timestamp_type=1) + batch(3, 1))
    big = RecordBatchBuilder(compression=1)
    big.append(b"z" * 200_000, key=b"big", timestamp=1_700_000_000_000)
    logs.append(big.build(0) + batch(1, 2))
    txn = (batch(0, 2, 0, producer_id=7, producer_epoch=0, base_sequence=0,
                 transactional=True) + build_control_batch(0, 7, 0, base_offset=2)
           + batch(3, 2, 1, producer_id=8, producer_epoch=0, base_sequence=0,
                   transactional=True) + build_control_batch(1, 8, 0, base_offset=5)
           + batch(6, 1))
    logs += [txn, batch(0, 2, 4) + batch(2, 2, 1), batch(0, 2, 1) + batch(2, 2, 4) + batch(4, 1),
             batch(100, 4, 0) + batch(110, 2, 2)]
    return logs


def downconvert_inputs(corpus: Corpus) -> None:
    """The ``downconvert`` harness: option bytes (format v0/v1, where the fetch starts,
    CRCs fixed), then stored logs and legacy sets."""
    for n, log in enumerate(stored_logs()):
        for opts in (0x08, 0x09 | (n % 3 + 1) << 1):
            corpus.add("downconvert", bytes([opts, 1]) + log)
    for n, records in enumerate(hostile_legacy_sets()):
        corpus.add("downconvert", bytes([0x08 | n & 1, 0]) + records)
        corpus.add("downconvert", bytes([n & 1, 0]) + records)


def _acl_text(value) -> bytes:
    """A string of the ``cluster`` harness' ACL entries: None, or text written raw."""
    if value is None:
        return b"\x00"
    for choice, known in ((1, ""), (2, "*"), (3, "User:*"), (4, "kafka-cluster")):
        if value == known:
            return bytes([choice])
    if value.startswith("User:"):
        return bytes([7, len(value) - 5]) + value[5:].encode("latin-1")
    return bytes([6, len(value)]) + value.encode("latin-1")


def _acl_op(kind: int, version: int, entries, log2_repeat: int = 0) -> bytes:
    """One ACL request of the ``cluster`` harness: kind 0 create, 1 describe, 2 delete."""
    out = bytes([kind | (version - 1) << 2 | log2_repeat << 4, len(entries) - 1])
    for rtype, name, pattern, principal, host, operation, permission in entries:
        out += struct.pack(">bbbb", rtype, pattern, operation, permission)
        out += _acl_text(name) + _acl_text(principal) + _acl_text(host)
    return out


def cluster_inputs(corpus: Corpus) -> None:
    """The ``cluster`` harness (a live test cluster, with and without the authorizer):
    ACL request sequences, legacy Produce message sets, v2 batches fetched back at Fetch
    v0-3, and raw request bodies of those APIs at the old versions."""
    from kafka_proto.messages import (CreateAclsRequest, DeleteAclsRequest,
                                      DescribeAclsRequest, FetchRequest, ListOffsetsRequest,
                                      OffsetCommitRequest, ProduceRequest)

    allow_read = (2, "orders", 3, "User:alice", "*", 3, 3)
    prefixed = (3, "app-", 4, "User:*", "127.0.0.1", 2, 2)
    cluster_acl = (4, "kafka-cluster", 3, "User:bob", "*", 7, 3)
    anything = (1, None, 1, None, None, 1, 1)
    match = (2, "orders-eu", 2, None, None, 1, 1)
    sequences = [
        [(0, 1, [allow_read, prefixed, cluster_acl]), (1, 2, [anything]), (2, 3, [anything])],
        [(0, 3, [allow_read]), (1, 3, [match]), (2, 1, [match, anything])],
        [(0, 2, [(2, "", 3, "User:a", "*", 3, 3), (2, "t", 3, "nocolon", "*", 3, 3),
                 (4, "other", 3, "User:a", "*", 7, 3), (2, "t", 1, "User:a", "*", 3, 3),
                 ])],
        [(0, 1, [(2, "a\x00b", 3, "User:\x00", "\x00", 3, 2)]), (1, 1, [anything])],
        [(0, 1, [(0, "t", 3, "User:a", "*", 3, 3)])],          # UNKNOWN: closed
        [(2, 2, [(2, "t", 3, None, None, 99, 3)])],             # an unknown operation
        [(0, 3, [allow_read], 12), (1, 3, [anything]), (2, 3, [anything])],
        [(0, 1, [(2, "p" * 200, 4, "User:" + "q" * 20, "*", 2, 3)], 4),
         (1, 2, [(2, "p" * 250, 2, None, None, 1, 1)])],
    ]
    # the authorizer's decisions afterwards: operation, resource type, principal, host, name
    queries = b"".join(bytes([op - 2, rtype - 2]) + _acl_text(principal) + bytes([host])
                       + _acl_text(name) for op, rtype, principal, host, name in (
                           (3, 2, "User:alice", 0, "orders"), (8, 2, "User:alice", 1, "orders"),
                           (4, 2, "User:eve", 0, "app-x"), (7, 4, "User:bob", 0,
                                                             "kafka-cluster"),
                           (3, 2, "User:a", 2, "t")))
    # and the same without their last request where it deletes: bindings left to decide
    sequences += [seq[:-1] for seq in sequences if len(seq) > 1 and seq[-1][0] == 2]
    for seq in sequences:
        data = bytes([len(seq) - 1]) + b"".join(_acl_op(*op) for op in seq) + queries
        for auth in (0, 1):
            corpus.add("cluster", bytes([auth]) + data)
    for n, records in enumerate(hostile_legacy_sets()):
        opts = (n % 3) | (n % 4 == 3) << 2 | (n % 7 == 6) << 4 | 0x20
        corpus.add("cluster", bytes([0x02 | n & 1, opts]) + records)
    corpus.add("cluster", bytes([0x02, 0x08]) + hostile_legacy_sets()[0])   # acks=0
    corpus.add("cluster", bytes([0x02, 0x0C]) + hostile_legacy_sets()[0])   # acks=2
    for n, log in enumerate(stored_logs()):
        opts = (n % 4) | (n % 4) << 2 | 0x10
        corpus.add("cluster", bytes([0x04 | n & 1, opts, 0xFE, n % 4]) + log)

    def raw(api_index: int, version: int, body: bytes) -> None:
        corpus.add("cluster", bytes([0x06, api_index, version]) + body)

    raw(0, 1, CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
        resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:a",
        host="*", operation=3, permission_type=3)]).encode(1))
    raw(1, 2, DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None,
                                  pattern_type_filter=1, principal_filter=None,
                                  host_filter=None, operation=1, permission_type=1).encode(2))
    raw(2, 3, DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=2, resource_name_filter="t", pattern_type_filter=2,
        principal_filter=None, host_filter=None, operation=1, permission_type=1)]).encode(3))
    for version in (0, 1, 2):
        raw(3, version, ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
            ProduceRequest.TopicProduceData(name="fuzz-legacy", partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=hostile_legacy_sets()[
                    version])])]).encode(version))
    for version in (0, 1, 2, 3):
        raw(4, version, FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0,
                                     max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
                                         topic="fuzz-stored", partitions=[
                                             FetchRequest.FetchPartition(
                                                 partition=0, fetch_offset=0,
                                                 partition_max_bytes=1 << 16)])]
                                     ).encode(version))
    raw(5, 0, ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name="fuzz-legacy", partitions=[ListOffsetsRequest.ListOffsetsPartition(
            partition_index=0, timestamp=-1, max_num_offsets=5)])]).encode(0))
    raw(6, 0, OffsetCommitRequest(group_id="g", topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name="fuzz-legacy", partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=3, committed_metadata="m")])]).encode(0))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", default="tansu,noida")
    ap.add_argument("--out", default=str(ROOT / "tests" / "fuzz" / "corpus"))
    ap.add_argument("--max-size", type=int, default=16 * 1024)
    ap.add_argument("--no-recorder", action="store_true",
                    help="skip confluent-kafka through the recording relay")
    ap.add_argument("--dry-run", action="store_true", help="capture, but only print counts")
    ap.add_argument("--harness", default=",".join(HARNESS_NAMES),
                    help="comma-separated corpus folders to capture and rewrite (default: "
                         "all); e.g. --harness consumer leaves the other folders alone")
    args = ap.parse_args(argv)
    wanted = {h.strip() for h in args.harness.split(",") if h.strip()}
    unknown = wanted - set(HARNESS_NAMES)
    if unknown:
        ap.error(f"unknown harness(es): {', '.join(sorted(unknown))}")
    corpus = Corpus(args.max_size)
    for kind in args.brokers.split(","):
        t = time.monotonic()
        if wanted & set(BROKER_CAPTURE_HARNESSES):
            capture_broker(kind.strip(), corpus)
        if "consumer" in wanted:
            capture_consumer(kind.strip(), corpus)
        print(f"{kind}: captured in {time.monotonic() - t:.1f}s", file=sys.stderr)
    if "tansu" in args.brokers and not args.no_recorder \
            and wanted & set(BROKER_CAPTURE_HARNESSES):
        capture_confluent_tansu(corpus)
    if "tansu" in args.brokers and "group" in wanted:
        capture_group(corpus)
    if "group" in wanted:
        group_kip848_sessions(corpus)
    if "tansu" in args.brokers and "producer" in wanted:
        capture_producer(corpus)
    if "transactions" in wanted:
        capture_transactions(corpus)
    if "admin" in wanted:
        capture_admin(corpus)
    if "share" in wanted:
        capture_share(corpus)
    if "listoffsets" in wanted:
        capture_listoffsets(corpus)
    if "downconvert" in wanted:
        downconvert_inputs(corpus)
    if "cluster" in wanted:
        cluster_inputs(corpus)
    corpus.items = {h: items for h, items in corpus.items.items() if h in wanted}
    for harness, items in sorted(corpus.items.items()):
        print(f"{harness}: {len(items)} inputs, {sum(map(len, items.values()))} bytes")
    if not args.dry_run:
        corpus.write(Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
