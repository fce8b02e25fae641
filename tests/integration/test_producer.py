"""The Producer end to end on Tansu and noida-db, read back by confluent-kafka.

Every message must arrive exactly once, in order per partition, at the offset its
delivery report gave, for acks 0/1/all x every codec x idempotence on/off. Then the
bad-input cases: unknown property, invalid value, oversize message, nonexistent topic
with auto-create off, unreachable bootstrap server.
"""
from __future__ import annotations

import socket
import statistics
import sys
import time

import pytest

from kafka_client import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer,
                          TopicPartition)

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")

N = 2000
PARTITIONS = 2
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CASES = ([(0, c, False) for c in CODECS] + [(1, c, False) for c in CODECS]
         + [(-1, c, False) for c in CODECS] + [(-1, c, True) for c in CODECS])


def read_back(bootstrap, topic, expected_per_partition, timeout=30.0):
    """{partition: [(offset, key, value)]} read with manual assignment from offset 0."""
    c = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"rb-{topic}",
        "enable.auto.commit": False, "fetch.wait.max.ms": 20,
    })
    got = {p: [] for p in expected_per_partition}
    want = sum(expected_per_partition.values())
    total = 0
    try:
        c.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in expected_per_partition])
        deadline = time.monotonic() + timeout
        while total < want and time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                if m.error():
                    raise AssertionError(f"consumer error: {m.error()}")
                got[m.partition()].append((m.offset(), m.key(), m.value()))
                total += 1
        # Anything beyond what we expect would be a duplicate: look briefly for it.
        for m in c.consume(1000, 0.3):
            if not m.error():
                got[m.partition()].append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return got


@pytest.mark.parametrize("acks,codec,idempotent", CASES,
                         ids=[f"acks{a}-{c}-{'idem' if i else 'plain'}" for a, c, i in CASES])
def test_every_message_once_in_order(broker, topic_name, acks, codec, idempotent):
    broker.create_topic(topic_name, partitions=PARTITIONS)
    conf = {"bootstrap.servers": broker.bootstrap, "acks": acks, "compression.type": codec,
            "linger.ms": 5, "batch.num.messages": 300}
    if idempotent:
        conf["enable.idempotence"] = True
    reports = []
    stamps = []
    start_ms = int(time.time() * 1000)

    def dr(err, msg):
        reports.append((err, msg.partition(), msg.offset(), msg.key(), msg.value(),
                        msg.status()))
        stamps.append(msg.timestamp())

    with Producer(conf) as p:
        for i in range(N):
            p.produce(topic_name, b"value-%d" % i, key=b"k%d" % (i % 13), on_delivery=dr)
            if i % 500 == 0:
                p.poll(0)
        assert p.flush(30) == 0
        assert len(p) == 0
    assert len(reports) == N
    errors = [r for r in reports if r[0] is not None]
    assert not errors, errors[:3]
    end_ms = int(time.time() * 1000)
    assert all(kind == confluent_kafka.TIMESTAMP_CREATE_TIME and start_ms - 5 <= ts <= end_ms
               for kind, ts in stamps)
    sent = {p: [] for p in range(PARTITIONS)}
    for _err, part, offset, key, value, status in reports:
        sent[part].append((offset, key, value))
        assert status == (2 if acks else 1)
    # Keys are spread by the partitioner: both partitions get messages.
    assert all(sent[p] for p in sent)
    got = read_back(broker.bootstrap, topic_name, {p: len(v) for p, v in sent.items()})
    for part in range(PARTITIONS):
        values_sent = [v for _, _, v in sorted(sent[part], key=lambda r: int(r[2][6:]))]
        values_got = [v for _, _, v in got[part]]
        assert values_got == values_sent, f"partition {part}: order or count differs"
        assert len(set(values_got)) == len(values_got)
        if acks != 0:
            # The delivery report carried the offset the broker assigned.
            assert sorted((o, k, v) for o, k, v in sent[part]) == got[part]
        else:
            assert all(o is None for o, _, _ in sent[part])  # acks=0: no offset, as confluent-kafka


def test_produce_batch_and_headers(broker, topic_name):
    broker.create_topic(topic_name, partitions=1)
    values = [b"b%05d" % i for i in range(5000)]
    with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2}) as p:
        assert p.produce_batch(topic_name, values, partition=0) == 5000
        p.produce(topic_name, "text value", key="text key", partition=0,
                  headers={"h": b"1", "s": "str", "n": None}, timestamp=1_700_000_000_000)
        assert p.flush(30) == 0
    c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x",
                                  "enable.auto.commit": False})
    got = []
    try:
        c.assign([confluent_kafka.TopicPartition(topic_name, 0, 0)])
        deadline = time.monotonic() + 30
        while len(got) < 5001 and time.monotonic() < deadline:
            got.extend(m for m in c.consume(1000, 0.2) if not m.error())
    finally:
        c.close()
    assert [m.value() for m in got[:5000]] == values
    last = got[5000]
    assert (last.key(), last.value()) == (b"text key", b"text value")
    assert last.headers() == [("h", b"1"), ("s", b"str"), ("n", None)]
    assert last.timestamp() == (confluent_kafka.TIMESTAMP_CREATE_TIME, 1_700_000_000_000)


def test_produce_batch_with_keys(broker, topic_name):
    from kafka_client.producer.partitioners import get_partitioner

    broker.create_topic(topic_name, partitions=3)
    values = [b"v%05d" % i for i in range(3000)]
    keys = [b"key%d" % (i % 17) for i in range(3000)]
    with Producer({"bootstrap.servers": broker.bootstrap}) as p:
        p.list_topics(topic_name, timeout=10)
        p.produce(topic_name, b"warm-up", key=b"key0")   # partitions known from here
        assert p.flush(10) == 0
        assert p.produce_batch(topic_name, values, keys) == 3000
        assert p.flush(30) == 0
    crc = get_partitioner("consistent")
    expected = {part: [v for k, v in zip(keys, values) if crc(k, 3) == part]
                for part in range(3)}
    warm = crc(b"key0", 3)
    got = read_back(broker.bootstrap, topic_name,
                    {part: len(v) + (part == warm) for part, v in expected.items()})
    for part in range(3):
        vals = [v for _, _, v in got[part] if v != b"warm-up"]
        assert vals == expected[part]


def test_topic_created_on_first_use(broker, topic_name):
    """allow.auto.create.topics defaults to true for a producer: the Metadata request
    asks the broker to create the topic, and the messages that waited get delivered."""
    reports = []
    with Producer({"bootstrap.servers": broker.bootstrap}) as p:
        for i in range(100):
            p.produce(topic_name, b"%d" % i, on_delivery=lambda e, m: reports.append((e, m)))
        assert p.flush(30) == 0
    assert [e for e, _ in reports] == [None] * 100
    by_part = {}
    for _, m in reports:
        by_part.setdefault(m.partition(), []).append(m.offset())
    for offsets in by_part.values():
        assert sorted(offsets) == list(range(len(offsets)))


def test_murmur2_partitions_match_the_java_client(broker, topic_name):
    """partitioner=murmur2 puts each key where the Java client does (kafka-python's
    murmur2 is a port of the Java one), on a real 7-partition topic."""
    kafka_default = pytest.importorskip("kafka.partitioner.default")
    broker.create_topic(topic_name, partitions=7)
    keys = [b"key-%d" % i for i in range(200)] + [b"", "\u00fcnicode".encode()]
    got = {}
    with Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2"}) as p:
        for k in keys:
            p.produce(topic_name, b"v", key=k,
                      on_delivery=lambda e, m: got.__setitem__(m.key(), (e, m.partition())))
        assert p.flush(30) == 0
    for k in keys:
        err, part = got[k]
        assert err is None
        assert part == (kafka_default.murmur2(k) & 0x7FFFFFFF) % 7, k


def test_statistics_callback(broker, topic_name):
    import json

    docs = []
    broker.create_topic(topic_name, partitions=1)
    with Producer({"bootstrap.servers": broker.bootstrap, "statistics.interval.ms": 50,
                   "stats_cb": docs.append}) as p:
        for i in range(1000):
            p.produce(topic_name, b"x" * 50, partition=0)
        p.flush(10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            p.poll(0.1)
            if docs and json.loads(docs[-1])["txmsgs"] == 1000:
                break
    every = [json.loads(d) for d in docs]
    doc = every[-1]
    assert doc["txmsgs"] == 1000 and doc["msg_cnt"] == 0
    assert doc["topics"][topic_name]["partitions"]["0"]["txmsgs"] == 1000
    (b,) = [b for b in doc["brokers"].values() if b["tx"] > 0]
    assert b["state"] == "UP" and b["req"]["Produce"] >= 1
    # librdkafka's windows: each document has the observations of its own interval
    brokers = [b for d in every for b in d["brokers"].values()]
    assert sum(b["rtt"]["cnt"] for b in brokers) >= 1
    assert sum(b["int_latency"]["cnt"] for b in brokers) >= 1
    assert sum(b["outbuf_latency"]["cnt"] for b in brokers) >= 1
    windows = [d["topics"][topic_name] for d in every if topic_name in d["topics"]]
    assert sum(t["batchcnt"]["sum"] for t in windows) == 1000
    assert max(t["batchsize"]["avg"] for t in windows) > 0


def test_list_topics(broker, topic_name):
    broker.create_topic(topic_name, partitions=3)
    with Producer({"bootstrap.servers": broker.bootstrap}) as p:
        md = p.list_topics(timeout=10)
        assert topic_name in md.topics
        assert sorted(md.topics[topic_name].partitions) == [0, 1, 2]
        assert md.brokers
        one = p.list_topics(topic_name, timeout=10)
        assert list(one.topics) == [topic_name]


@pytest.mark.parametrize("listed", ["the topic", "every topic"])
def test_produce_to_a_partition_a_listed_topic_lacks_raises(broker, topic_name, listed):
    """Once list_topics() has listed the topic, its first produce() to a partition it
    does not have raises _UNKNOWN_PARTITION, as confluent-kafka's does (it was queued and
    failed in its delivery report); a partition it has is delivered."""
    broker.create_topic(topic_name, partitions=2)
    reports = []
    with Producer({"bootstrap.servers": broker.bootstrap},
                  on_delivery=lambda err, msg: reports.append((err, msg.partition()))) as p:
        md = p.list_topics(topic_name if listed == "the topic" else None, timeout=10)
        assert sorted(md.topics[topic_name].partitions) == [0, 1]
        with pytest.raises(KafkaException) as info:
            p.produce(topic_name, b"beyond", partition=2)
        assert info.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
        p.produce(topic_name, b"within", partition=1)
        assert p.flush(30) == 0
    assert reports == [(None, 1)]


# --------------------------------------------------------------------------- bad input


def test_unknown_property_and_invalid_value_fail_at_construction():
    with pytest.raises(KafkaException) as ei:
        Producer({"bootstrap.servers": "127.0.0.1:1", "no.such.property": 1})
    assert "no.such.property" in str(ei.value)
    assert ei.value.args[0].code() == KafkaError._INVALID_ARG
    with pytest.raises(KafkaException) as ei:
        Producer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": "soon"})
    assert "linger.ms" in str(ei.value)
    with pytest.raises(KafkaException) as ei:
        Producer({"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": True, "acks": 1})
    assert "acks" in str(ei.value)


def test_message_over_max_bytes_is_refused(broker, topic_name):
    with Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 1000}) as p:
        with pytest.raises(KafkaException) as ei:
            p.produce(topic_name, b"x" * 2000)
        assert ei.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert "message.max.bytes" in str(ei.value)
        assert len(p) == 0


def test_nonexistent_topic_without_auto_create_fails_in_time(broker, topic_name):
    reports = []
    conf = {"bootstrap.servers": broker.bootstrap, "allow.auto.create.topics": False,
            "message.timeout.ms": 3000, "topic.metadata.propagation.max.ms": 1000}
    with Producer(conf) as p:
        start = time.monotonic()
        p.produce(topic_name, b"lost", on_delivery=lambda e, m: reports.append((e, m)))
        assert p.flush(10) == 0
        elapsed = time.monotonic() - start
        assert len(reports) == 1
        err, msg = reports[0]
        assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, err     # librdkafka's
        assert msg.topic() == topic_name and msg.value() == b"lost"
        assert elapsed < 5
        # Known not to exist now: produce() says so at once.
        with pytest.raises(KafkaException) as ei:
            p.produce(topic_name, b"again")
        assert ei.value.args[0].code() == KafkaError._UNKNOWN_TOPIC


def _dead_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_bootstrap_server_times_out_cleanly():
    errors = []
    reports = []
    conf = {"bootstrap.servers": f"127.0.0.1:{_dead_port()}", "message.timeout.ms": 1500,
            "reconnect.backoff.ms": 50, "error_cb": errors.append}
    p = Producer(conf)
    try:
        start = time.monotonic()
        with pytest.raises(KafkaException) as ei:
            p.list_topics(timeout=1)
        assert time.monotonic() - start < 2
        assert ei.value.args[0].code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT)
        p.produce("t", b"v", on_delivery=lambda e, m: reports.append(e))
        assert p.flush(5) == 0
        assert time.monotonic() - start < 5
        assert [e.code() for e in reports] == [KafkaError._MSG_TIMED_OUT]
        assert any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in errors)
    finally:
        p.close(0)


# --------------------------------------------------------------------------- faults


@pytest.mark.parametrize("idempotent", [True, False], ids=["idem", "plain"])
def test_broker_restart_mid_run(fresh_noida_broker, topic_name, idempotent):
    """noida-db restarted (data kept) in the middle of a run: with idempotence every
    message lands exactly once and in order; without, none is lost (duplicates counted)."""
    broker = fresh_noida_broker
    broker.create_topic(topic_name, partitions=1)
    n = 20_000
    reports = []
    conf = {"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
            "batch.num.messages": 500, "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500, "message.timeout.ms": 60000,
            "enable.idempotence": idempotent}
    offsets = {}                    # value -> offset its report gave, delivered ones
    produced, left, fatal = 0, None, None
    p = Producer(conf)
    try:
        for i in range(n):
            p.produce(topic_name, b"%06d" % i, partition=0,
                      on_delivery=lambda e, m: (reports.append(e), e is None and
                                                offsets.__setitem__(m.value(), m.offset())))
            produced += 1
            if i == n // 2:
                p.flush(0.05)       # some in flight, some queued...
                broker.restart()    # ...when the broker goes away
            if i % 1000 == 0:
                p.poll(0)
        left = p.flush(60)
    except KafkaException as exc:
        # An idempotent producer stopped by a fatal error (the broker lost messages, see
        # below): produce() refuses the next message, or flush() raises it. Judged below.
        if not (idempotent and (exc.args[0].fatal() or exc.args[0].code() == KafkaError._FATAL)):
            raise
        fatal = exc.args[0]
    finally:
        try:
            p.close()
        except KafkaException as exc:     # the fatal error, when produce() saw it first
            if fatal is None or not exc.args[0].fatal():
                raise
            fatal = exc.args[0]
    errors = [e for e in reports if e is not None]
    assert len(reports) == produced
    expect = n
    if fatal is not None:    # the log ends where the producer stopped: read that much
        c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                      "group.id": f"hw-{topic_name}"})
        try:
            expect = c.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic_name, 0), timeout=30)[1]
        finally:
            c.close()
    got = read_back(broker.bootstrap, topic_name, {0: expect}, timeout=60)[0]
    values = [v for _, _, v in got]
    missing = sorted({b"%06d" % i for i in range(n)} - set(values))
    # Said on failure: where each missing message was reported written and what the log
    # holds there now.
    at = {o: v for o, _, v in got}
    where = [(v, offsets.get(v), at.get(offsets.get(v))) for v in missing[:5]]
    end = max(at, default=-1) + 1
    # A message produced before the restart, reported delivered (acks=all: the broker's
    # own answer, at an offset that now holds another message or lies past the log's
    # end) and missing from the log was acknowledged and then lost by the broker:
    # noida-db 0.2.3 goes on acknowledging for ~100 ms after it is asked to stop and loses
    # what it wrote after its last flush (docs/delivery-guarantees.md, "Broker restart";
    # test_noida_keeps_what_it_acknowledged_before_a_restart); seen in full suite runs
    # under load, never in 300 runs of this test alone. With idempotence the producer
    # then rightly stops, as librdkafka does: its next batch, the first after the last
    # acknowledged one, is OUT_OF_ORDER_SEQUENCE_NUMBER for the restarted broker, a fatal
    # error (what was in flight fails with it, what was queued is purged, produce()
    # refuses the rest). Only that pattern is the broker's: any other missing message or
    # error, or a log out of order or with a message twice, is the client's and fails.
    broker_lost = [v for v in missing if v in offsets and int(v) <= n // 2]
    failed = [v for v in missing if v not in offsets]   # or never produced
    stopped = fatal is not None and fatal.code() == KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER
    if broker_lost and (stopped or not idempotent) and \
            all(e.fatal() or e.code() == KafkaError._PURGE_QUEUE for e in errors) and \
            len(broker_lost) + (len(failed) if idempotent else 0) == len(missing):
        if idempotent:
            assert values == sorted(set(values)), "out of order or twice in the log"
        pytest.xfail(f"noida-db lost {len(broker_lost)} message(s) it had acknowledged "
                     f"before its restart: {where} (log end {end})")
    assert fatal is None, fatal
    assert left == 0 and produced == n
    assert not errors, errors[:3]
    if idempotent:
        assert values == [b"%06d" % i for i in range(n)], (where, end)
    else:
        assert not missing, (where, end)
        print(f"duplicates after restart without idempotence: {len(values) - n}")


def test_a_busy_application_thread_does_not_hold_back_lingered_batches(kafka_cluster,
                                                                      topic_name):
    """linger.ms=5 and an application thread that never sleeps between produce() calls:
    each batch reaches the broker a few ms after its linger ends. The I/O thread that
    sends it needs the GIL; CPython would hand it over only at its switch interval (5 ms
    by default, 400 ms here so that the difference is unmistakable): produce() hands it
    over once the loop is late (IOThread.let_run)."""
    kafka_cluster.create_topic(topic_name, partitions=1, replication_factor=1)
    p = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "linger.ms": 5,
                  "acks": 1})
    try:
        p.produce(topic_name, b"first", partition=0)   # metadata and connection first
        assert p.flush(10) == 0
        since = kafka_cluster.clear_request_log()
        produced_at = []
        old_interval = sys.getswitchinterval()
        interval = 0.4
        sys.setswitchinterval(interval)
        try:
            end = time.time() + 0.5
            while time.time() < end:
                produced_at.append(time.time())
                p.produce(topic_name, b"m", partition=0)
                spin_until = time.monotonic() + 0.0002
                while time.monotonic() < spin_until:
                    pass
        finally:
            sys.setswitchinterval(old_interval)
        assert p.flush(10) == 0
        delays = []
        for entry in kafka_cluster.request_log(since=since, api="Produce"):
            for d in entry.details["partitions"]:
                first = d["base_offset"] - 1   # the message before them is at offset 0
                if first < len(produced_at):
                    delays.append(entry.time - produced_at[first])
        # Batches of about linger.ms each: up to 100, 15-45 on a loaded 2-core machine
        # (load 9-11), where each batch also waits for a CPU. Held until the switch
        # interval, at most 0.5 s / interval + 1 would go (1 with let_run a no-op).
        assert len(delays) >= 10, sorted(delays)
        # A few ms after its linger as a rule; medians of 10-28 ms at load 9-11 (single
        # batches up to 90 ms, waiting for a CPU in the cluster's process or ours). Far
        # below a quarter of the interval, which every batch would wait without let_run.
        assert statistics.median(delays) < interval / 4, sorted(delays)
    finally:
        p.close()


def _close_acks0_producer(bootstrap: str, topic: str, count: int) -> float:
    """Produce ``count`` messages with acks=0, flush, and return how long close() took."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 0, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, b"%d" % i, partition=0)
    assert producer.flush(10) == 0
    started = time.monotonic()
    producer.close()
    return time.monotonic() - started


def test_an_acks0_producer_closes_at_once_on_a_broker_that_never_answers(kafka_cluster):
    """Kafka never answers an acks=0 Produce; close() waited for those answers (which
    Tansu and noida-db do send) until its 2 s grace ran out, every time. It now says it
    is done writing, and the broker closes once it has read every request (librdkafka
    closes at once too: 6 ms for confluent-kafka 2.16.1 on the test cluster)."""
    kafka_cluster.create_topic("acks0-close", replication_factor=1)
    took = _close_acks0_producer(kafka_cluster.bootstrap_servers, "acks0-close", 200)
    assert took < 1.0, f"close() took {took:.2f} s"
    assert kafka_cluster.partition("acks0-close", 0).high_watermark == 200


def test_an_acks0_producer_closes_at_once_on_a_broker_that_answers(broker, topic_name):
    """Tansu and noida-db answer acks=0 Produce: the close reads those answers (closing
    with them unread would reset the connection and lose requests not read yet), and
    still ends at once."""
    broker.create_topic(topic_name)
    took = _close_acks0_producer(broker.bootstrap, topic_name, 200)
    assert took < 1.0, f"close() took {took:.2f} s"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap})
    consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
    values, deadline = [], time.monotonic() + 20
    try:
        while len(values) < 200 and time.monotonic() < deadline:
            values += [m.value() for m in consumer.consume(200, 0.5) if m.error() is None]
    finally:
        consumer.close()
    assert values == [b"%d" % i for i in range(200)]
