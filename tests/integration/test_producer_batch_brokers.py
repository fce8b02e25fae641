"""produce_batch() against real brokers: bulk-appended messages get a delivery report each
(offsets that match what is read back; the error when their batch fails), and
confluent-kafka's list-of-dicts form gives what confluent-kafka gives for the same list."""
from __future__ import annotations

import time

import pytest

from kafka_client import KafkaError, Producer

from tests.integration.test_producer import read_back

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")


def test_bulk_messages_report_their_offsets(broker, topic_name):
    broker.create_topic(topic_name, partitions=2)
    reports = []
    values = ["text %05d" % i for i in range(3000)]     # str: UTF-8 encoded in bulk
    keys = [b"k%d" % (i % 7) for i in range(3000)]
    with Producer({"bootstrap.servers": broker.bootstrap, "batch.num.messages": 500}) as p:
        p.produce(topic_name, b"warm-up", partition=0)
        assert p.flush(10) == 0                          # partitions known: bulk from here
        assert p.produce_batch(topic_name, values[:1000], partition=1,
                               on_delivery=lambda e, m: reports.append((e, m))) == 1000
        assert p.produce_batch(topic_name, values[1000:], keys[1000:],
                               on_delivery=lambda e, m: reports.append((e, m))) == 2000
        assert p.flush(30) == 0
    assert len(reports) == 3000 and all(e is None for e, _ in reports)
    reported = {(m.partition(), m.offset()): (m.key(), m.value()) for _, m in reports}
    assert sorted(v for _, v in reported.values()) == sorted(v.encode() for v in values)
    counts = {0: 1, 1: 0}
    for part, _ in reported:
        counts[part] += 1
    got = read_back(broker.bootstrap, topic_name, counts)
    for part, records in got.items():
        for offset, key, value in records:
            if value != b"warm-up":
                assert reported[(part, offset)] == (key, value)


def test_a_failed_bulk_batch_reports_every_message(fresh_noida_broker, topic_name):
    """The broker is gone: each message produced in bulk gets _MSG_TIMED_OUT from its
    callback (none dropped, none reported twice), and the producer ends up empty."""
    broker = fresh_noida_broker
    broker.create_topic(topic_name, partitions=1)
    reports = []
    conf = {"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 2000,
            "batch.num.messages": 300, "linger.ms": 50, "enable.idempotence": False}
    with Producer(conf) as p:
        p.produce(topic_name, b"warm-up")
        assert p.flush(10) == 0
        broker.stop()
        values = [b"v%04d" % i for i in range(1000)]
        assert p.produce_batch(topic_name, values, on_delivery=lambda e, m: reports.append(
            (e, m.value(), m.offset()))) == 1000
        assert p.flush(30) == 0
        assert len(p) == 0
    assert sorted(v for _, v, _ in reports) == values
    assert {(e.code(), o) for e, _, o in reports} == {(KafkaError._MSG_TIMED_OUT, None)}


def _dicts():
    return [{"value": b"a", "key": b"k"}, {"value": "b"}, {"value": None, "key": "c"},
            {"value": b"x" * 2_000_000}, {"value": b"d", "partition": 1}]


def test_the_dict_form_as_confluent_kafka(broker, topic_name):
    broker.create_topic(topic_name, partitions=2)
    outcome = {}
    for name, cls in (("confluent", confluent_kafka.Producer), ("ours", Producer)):
        p = cls({"bootstrap.servers": broker.bootstrap})
        p.produce(topic_name, b"warm-up", partition=0)
        p.flush(10)
        reports = []
        messages = _dicts()
        n = p.produce_batch(topic_name, messages,
                            on_delivery=lambda e, m: reports.append((e, m.value())))
        assert p.flush(30) == 0
        errors = [m["_error"].code() if "_error" in m else None for m in messages]
        outcome[name] = (n, errors, sorted(v or b"" for _, v in reports),
                         {e for e, _ in reports})
        for bad in ([{"value": b"ok"}, {"value": 5}], [{"value": b"ok"}, b"raw"]):
            with pytest.raises(TypeError):
                p.produce_batch(topic_name, bad)
        assert len(p) == 0
        if name == "ours":
            p.close()
    assert outcome["ours"] == outcome["confluent"] == (
        4, [None, None, None, KafkaError.MSG_SIZE_TOO_LARGE, None],
        [b"", b"a", b"b", b"d"], {None})
    # What both wrote (the TypeErrors queued nothing): twice the four messages.
    got = read_back(broker.bootstrap, topic_name, {0: 7, 1: 2})
    values = sorted(v or b"" for records in got.values() for _, _, v in records)
    assert values == sorted([b"warm-up"] * 2 + [b"", b"a", b"b", b"d"] * 2)


def test_the_dict_form_sends_timestamps_and_headers(broker, topic_name):
    broker.create_topic(topic_name, partitions=1)
    with Producer({"bootstrap.servers": broker.bootstrap}) as p:
        n = p.produce_batch(topic_name, [
            {"value": b"one", "timestamp": 1_700_000_000_000, "headers": {"h": "v"}},
            {"value": b"two", "headers": [("a", b"1"), ("b", None)]}])
        assert n == 2 and p.flush(30) == 0
    c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x",
                                  "enable.auto.commit": False})
    got = []
    try:
        c.assign([confluent_kafka.TopicPartition(topic_name, 0, 0)])
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            got.extend(m for m in c.consume(10, 0.2) if not m.error())
    finally:
        c.close()
    assert [(m.value(), m.headers()) for m in got] == [
        (b"one", [("h", b"v")]), (b"two", [("a", b"1"), ("b", None)])]
    assert got[0].timestamp() == (confluent_kafka.TIMESTAMP_CREATE_TIME, 1_700_000_000_000)


def test_pyarrow_columns_read_back_exactly(broker, topic_name):
    """10,000 rows as pyarrow arrays (binary values with nulls, string keys), sliced per
    partition: what the Consumer reads back is exactly what the arrays held, in order."""
    pa = pytest.importorskip("pyarrow")
    from kafka_client import Consumer, TopicPartition

    broker.create_topic(topic_name, partitions=2)
    n, split = 10_000, 6_000
    values = pa.array([None if i % 13 == 0 else b"value-%05d-" % i + bytes([i % 256]) * (i % 50)
                       for i in range(n)], pa.binary())
    keys = pa.array(["key-\u00e9-%d" % (i % 101) for i in range(n)], pa.string())
    want = {0: [(keys[i].as_py().encode(), values[i].as_py()) for i in range(split)],
            1: [(keys[i].as_py().encode(), values[i].as_py()) for i in range(split, n)]}
    reports = []

    def report(err, msg):
        reports.append((err, msg.partition(), msg.offset(), msg.key(), msg.value()))

    conf = {"bootstrap.servers": broker.bootstrap, "batch.num.messages": 2000}
    with Producer(conf) as p:
        # The first row waits for the topic's metadata; the rest are encoded in bulk from
        # the arrays' buffers.
        assert p.produce_batch(topic_name, values[:1], keys[:1], partition=0,
                               on_delivery=report) == 1
        assert p.flush(10) == 0
        assert p._acc.topics[topic_name].parts is not None
        assert p.produce_batch(topic_name, values[1:split], keys[1:split], partition=0,
                               on_delivery=report) == split - 1
        assert p.produce_batch(topic_name, values[split:], keys[split:], partition=1,
                               on_delivery=report) == n - split
        assert p.flush(30) == 0
    assert len(reports) == n and {r[0] for r in reports} == {None}
    for part in (0, 1):
        assert [r[2:] for r in reports if r[1] == part] == \
            [(o, k, v) for o, (k, v) in enumerate(want[part])]

    got = {0: [], 1: []}
    c = Consumer({"bootstrap.servers": broker.bootstrap, "fetch.wait.max.ms": 50})
    try:
        c.assign([TopicPartition(topic_name, 0, 0), TopicPartition(topic_name, 1, 0)])
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < n and time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                assert m.error() is None, m.error()
                got[m.partition()].append((m.offset(), m.key(), m.value()))
        # Anything more would be a duplicate: look briefly for it.
        for m in c.consume(1000, 0.3):
            if m.error() is None:
                got[m.partition()].append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    for part in (0, 1):
        assert got[part] == [(o, k, v) for o, (k, v) in enumerate(want[part])]
