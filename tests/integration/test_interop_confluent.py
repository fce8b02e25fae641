"""Interop with confluent-kafka (librdkafka) on both brokers, for every compression codec.

confluent -> us: librdkafka produces, we Fetch with our generated classes over
BlockingConnection and decode the batches with kafka_proto.records.
us -> confluent: we build batches with RecordBatchBuilder and send them with our
ProduceRequest (acks=-1), librdkafka consumes them with manual assignment.
"""
from __future__ import annotations

import time

import pytest

from kafka_client._testing.blocking import BlockingConnection
from kafka_client._testing import simple

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")
records = pytest.importorskip("kafka_proto.records")
Compression = records.Compression
TimestampType = records.TimestampType

CODECS = {
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
N = 40


def sample_messages(n: int = N):
    """Messages covering the awkward cases: null keys and values, empty values, headers
    with null and binary values, non-ASCII header keys, a large compressible value, and
    explicit timestamps (recent ones: noida-db expires old data by time)."""
    base_ts = int(time.time() * 1000) - 60_000
    out = []
    for i in range(n):
        key = None if i % 4 == 0 else b"key-%d" % i
        if i % 7 == 3:
            value = None
        elif i % 11 == 5:
            value = b""
        elif i == 17:
            value = b"compressible " * 500
        else:
            value = b"value-%d-" % i + bytes(range(i % 256))
        if i % 3 == 0:
            headers = []
        elif i % 3 == 1:
            headers = [("h1", b"x%d" % i), ("null-header", None)]
        else:
            headers = [("\u00fcn\u00ef-key", b"\x00\xff"), ("h1", b""), ("h1", b"dup")]
        out.append({"key": key, "value": value, "headers": headers,
                    "timestamp": base_ts + i * 7})
    return out


@pytest.fixture
def conn(broker):
    c = BlockingConnection(broker.host, broker.port, client_id="interop-test", timeout=15)
    yield c
    c.close()


def produce_with_confluent(bootstrap: str, topic: str, msgs, codec: str) -> None:
    p = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap,
        "compression.type": codec,
        "linger.ms": 50,            # let the messages share a few batches
        "batch.num.messages": 16,   # and force more than one batch
        "acks": "all",
    })
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)

    for m in msgs:
        p.produce(topic, value=m["value"], key=m["key"], partition=0,
                  headers=m["headers"] or None, timestamp=m["timestamp"],
                  on_delivery=report)
    assert p.flush(15) == 0
    assert errors == []


def consume_with_confluent(bootstrap: str, topic: str, n: int, timeout: float = 15.0):
    c = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"interop-{topic}",   # required by librdkafka; no group join with assign()
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 50,
    })
    got = []
    try:
        c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                raise AssertionError(f"consumer error: {m.error()}")
            got.append(m)
    finally:
        c.close()
    return got


def as_header_list(headers):
    return [(k, None if v is None else bytes(v)) for k, v in (headers or [])]


@pytest.mark.parametrize("codec", list(CODECS))
def test_confluent_produces_we_fetch(broker, conn, topic_name, codec):
    broker.create_topic(topic_name)
    msgs = sample_messages()
    produce_with_confluent(broker.bootstrap, topic_name, msgs, codec)

    result = simple.fetch_all(conn, topic_name)
    assert result.high_watermark == len(msgs)
    batches = result.batches
    assert len(batches) >= 2, "expected librdkafka to split the messages into batches"
    for b in batches:
        assert b.magic == 2
        # Neither broker recompresses: the batches come back with the producer's codec.
        assert b.compression == CODECS[codec], (broker.kind, codec, b.compression)
        assert not b.is_transactional and not b.is_control
    got = [r for b in batches for r in b]
    assert [r.offset for r in got] == list(range(len(msgs)))
    assert sum(b.records_count for b in batches) == len(msgs)
    for r, m in zip(got, msgs):
        assert r.key == m["key"]
        assert r.value == m["value"]
        assert as_header_list(r.headers) == m["headers"]
        assert r.timestamp == m["timestamp"]
        assert r.timestamp_type == TimestampType.CREATE_TIME
    assert batches[0].base_offset == 0 and batches[-1].last_offset == len(msgs) - 1
    assert batches[-1].max_timestamp == msgs[-1]["timestamp"]


def init_producer_id(conn: BlockingConnection):
    from kafka_proto.messages import InitProducerIdRequest

    resp = conn.request(InitProducerIdRequest(transactional_id=None,
                                              transaction_timeout_ms=60_000))
    return resp


def build_batches(msgs, codec, chunk: int, producer_id=-1, producer_epoch=-1):
    out = []
    seq = 0
    for start in range(0, len(msgs), chunk):
        part = msgs[start:start + chunk]
        b = records.RecordBatchBuilder(
            compression=CODECS[codec], producer_id=producer_id,
            producer_epoch=producer_epoch, base_sequence=seq if producer_id >= 0 else -1)
        for m in part:
            b.append(m["value"], key=m["key"], timestamp=m["timestamp"], headers=m["headers"])
        assert len(b) == len(part)
        out.append(b.build())
        seq += len(part)
    return out


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
@pytest.mark.parametrize("codec", list(CODECS))
def test_we_produce_confluent_consumes(broker, conn, topic_name, codec, idempotent):
    broker.create_topic(topic_name)
    msgs = sample_messages()
    pid, epoch = -1, -1
    if idempotent:
        resp = init_producer_id(conn)
        if resp.error_code:
            pytest.skip(f"{broker.kind}: InitProducerId failed with error {resp.error_code}")
        pid, epoch = resp.producer_id, resp.producer_epoch
        assert pid >= 0 and epoch >= 0
    chunk = 15
    batches = build_batches(msgs, codec, chunk, pid, epoch)
    # One ProduceRequest per batch (Kafka allows one batch per partition per request).
    for i, batch in enumerate(batches):
        part = simple.produce(conn, topic_name, 0, batch, acks=-1)
        assert part.error_code == 0 and part.base_offset == i * chunk

    got = consume_with_confluent(broker.bootstrap, topic_name, len(msgs))
    assert len(got) == len(msgs)
    for i, (m, want) in enumerate(zip(got, msgs)):
        assert m.offset() == i
        assert m.key() == want["key"]
        assert m.value() == want["value"]
        assert as_header_list(m.headers()) == want["headers"]
        assert m.timestamp() == (confluent_kafka.TIMESTAMP_CREATE_TIME, want["timestamp"])

    # and our own reader sees what we wrote, codec and producer fields included
    back = simple.fetch_all(conn, topic_name).batches
    assert [b.compression for b in back] == [CODECS[codec]] * len(batches)
    assert [b.producer_id for b in back] == [pid] * len(batches)
    if idempotent:
        assert [b.base_sequence for b in back] == list(range(0, len(msgs), chunk))


def test_idempotent_duplicate_is_not_appended_twice(broker, conn, topic_name):
    """Resending the same idempotent batch must not append it again (sequence check)."""
    broker.create_topic(topic_name)
    resp = init_producer_id(conn)
    if resp.error_code:
        pytest.skip(f"{broker.kind}: InitProducerId failed with error {resp.error_code}")
    msgs = sample_messages(5)
    (batch,) = build_batches(msgs, "none", 5, resp.producer_id, resp.producer_epoch)
    assert simple.produce(conn, topic_name, 0, batch).base_offset == 0
    again = simple.produce(conn, topic_name, 0, batch, check=False)
    # noida-db answers like Kafka (success with the original offset); Tansu 0.6 answers
    # DUPLICATE_SEQUENCE_NUMBER (46) with offset -1. Either way the log keeps 5 records.
    if broker.kind == "tansu":
        assert (again.error_code, again.base_offset) == (46, -1)
    else:
        assert (again.error_code, again.base_offset) == (0, 0)
    result = simple.fetch_all(conn, topic_name)
    assert result.high_watermark == 5
    assert sum(b.records_count for b in result.batches) == 5


def test_confluent_transactions_give_control_batches(broker, conn, topic_name):
    """librdkafka's transactional producer: one committed and one aborted transaction.
    We must see both data batches and both COMMIT/ABORT markers as control batches."""
    ControlRecordType = records.ControlRecordType
    broker.create_topic(topic_name)
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                 "transactional.id": f"tx-{topic_name}", "linger.ms": 5})
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic_name, value=b"committed-%d" % i, partition=0)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic_name, value=b"aborted-%d" % i, partition=0)
    p.flush(15)  # abort_transaction() would purge unsent messages
    p.abort_transaction(15)

    part = simple.fetch_once(conn, topic_name, 0, 0, version=12, isolation_level=0)
    assert part.high_watermark == 10 and part.last_stable_offset == 10
    batches = list(records.read_batches(part.records))
    layout = [(b.base_offset, b.last_offset, b.is_control) for b in batches]
    assert layout == [(0, 4, False), (5, 5, True), (6, 8, False), (9, 9, True)]
    pid = batches[0].producer_id
    assert pid >= 0 and all(b.is_transactional and b.producer_id == pid for b in batches)
    assert [r.value for r in batches[0]] == [b"committed-%d" % i for i in range(5)]
    assert [r.value for r in batches[2]] == [b"aborted-%d" % i for i in range(3)]
    assert batches[1].control_record().type == ControlRecordType.COMMIT
    assert batches[3].control_record().type == ControlRecordType.ABORT

    committed = simple.fetch_once(conn, topic_name, 0, 0, version=12, isolation_level=1)
    aborted = [(a.producer_id, a.first_offset) for a in committed.aborted_transactions or ()]
    got = [(b.base_offset, b.is_control) for b in records.read_batches(committed.records)]
    if broker.kind == "tansu":
        # Tansu 0.6 sends no aborted-transactions list and no filtering: read_committed
        # consumers cannot tell aborted data from committed on Tansu.
        assert aborted == []
        assert got == [(0, False), (5, True), (6, False), (9, True)]
    else:
        # noida-db lists the aborted transaction AND leaves its data batch out itself
        # (Kafka would send the batch and let the client drop it).
        assert aborted == [(pid, 6)]
        assert got == [(0, False), (5, True), (9, True)]


def test_log_append_time_topic(broker, conn, topic_name):
    """A LogAppendTime topic: the broker stamps the batch; every record then reports the
    batch's max timestamp with type LOG_APPEND_TIME (noida-db). Tansu 0.6 ignores the
    topic setting and keeps the producer's create times."""
    broker.create_topic(topic_name, config={"message.timestamp.type": "LogAppendTime"})
    create_ts = int(time.time() * 1000) - 100_000
    b = records.RecordBatchBuilder()
    for i in range(3):
        b.append(b"v%d" % i, timestamp=create_ts + i)
    before = int(time.time() * 1000)
    part = simple.produce(conn, topic_name, 0, b.build())
    after = int(time.time() * 1000)
    (batch,) = simple.fetch_all(conn, topic_name).batches
    recs = list(batch)
    if broker.kind == "tansu":
        assert part.log_append_time_ms == -1
        assert batch.timestamp_type == TimestampType.CREATE_TIME
        assert [r.timestamp for r in recs] == [create_ts, create_ts + 1, create_ts + 2]
    else:
        assert before - 5 <= part.log_append_time_ms <= after + 5
        assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
        assert batch.max_timestamp == part.log_append_time_ms
        assert all(r.timestamp == part.log_append_time_ms for r in recs)
        assert all(r.timestamp_type == TimestampType.LOG_APPEND_TIME for r in recs)
    assert [r.value for r in recs] == [b"v0", b"v1", b"v2"]
