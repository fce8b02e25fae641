"""The kafka_native Spark data source, batch queries, on a local Spark (``local[2]``) and
the Tansu fixture (noida-db where Tansu lacks what a test needs: offsets by time and
deleting records).

One 100,000-row topic is written through the data source once per module and read back
in several ways; every check compares rows, not just counts.
"""
from __future__ import annotations

import time

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402

from kafka_client import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from kafka_client.spark.offsets import OffsetRange  # noqa: E402
from kafka_client.spark.options import parse_read_options  # noqa: E402
from kafka_client.spark.reader import read_range  # noqa: E402
from kafka_client.spark.schema import arrow_schema, kafka_schema  # noqa: E402
from kafka_client.testing import Cluster  # noqa: E402

ROWS = 100_000
PARTITIONS = 4
PER_PARTITION = ROWS // PARTITIONS
FORMAT = "kafka_native"


def expected_row(i):
    """What row ``i`` of the written topic holds: (partition, offset, key, value, headers).

    Rows of partitions 0 and 1 have no headers (the writer's bulk path); a third of the
    rows of partitions 2 and 3 have two (the per-row path). Every tenth key and a few
    values are null."""
    key = None if i % 10 == 0 else b"k%d" % i
    value = None if i % 1000 == 7 else b"v%08d-" % i + b"." * 40
    headers = None
    if i >= 2 * PER_PARTITION and i % 3 == 0:
        headers = [("h", b"%d" % i), ("empty", None)]
    return i // PER_PARTITION, i % PER_PARTITION, key, value, headers


def source_frame(spark):
    """The 100,000 rows as a DataFrame of 4 Spark partitions, Spark partition i holding
    Kafka partition i's rows in offset order (so the offsets are known in advance)."""
    i = F.col("id")
    header = F.struct(F.lit("h").alias("key"), i.cast("string").cast("binary").alias("value"))
    empty = F.struct(F.lit("empty").alias("key"), F.lit(None).cast("binary").alias("value"))
    return spark.range(ROWS, numPartitions=PARTITIONS).select(
        F.when(i % 10 == 0, F.lit(None)).otherwise(
            F.concat(F.lit("k"), i.cast("string"))).cast("binary").alias("key"),
        F.when(i % 1000 == 7, F.lit(None)).otherwise(F.concat(
            F.lit("v"), F.lpad(i.cast("string"), 8, "0"), F.lit("-" + "." * 40))
        ).cast("binary").alias("value"),
        F.floor(i / PER_PARTITION).cast("int").alias("partition"),
        F.when((i >= 2 * PER_PARTITION) & (i % 3 == 0), F.array(header, empty))
        .alias("headers"))


def read(spark, bootstrap, **options):
    reader = spark.read.format(FORMAT).option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def rows_of(df):
    """(partition, offset) -> row dict, checking that no offset comes twice."""
    table = df.toArrow()
    out = {}
    for row in table.to_pylist():
        key = (row["partition"], row["offset"])
        assert key not in out, f"{key} read twice"
        out[key] = row
    return out


@pytest.fixture(scope="module")
def written(spark, tansu_broker):
    """The 100,000-row topic, written through the data source."""
    topic = f"spark-batch-{time.time_ns()}"
    tansu_broker.create_topic(topic, PARTITIONS)
    (source_frame(spark).write.format(FORMAT).mode("append")
     .option("kafka.bootstrap.servers", tansu_broker.bootstrap)
     .option("topic", topic).save())
    return topic


def test_write_then_read_back_exactly(spark, tansu_broker, written):
    # What the broker holds, read with the plain consumer: the writer's side.
    consumer = Consumer({"bootstrap.servers": tansu_broker.bootstrap})
    consumer.assign([TopicPartition(written, p, 0) for p in range(PARTITIONS)])
    stored = {}
    while len(stored) < ROWS:
        msgs = consumer.consume(10_000, timeout=10)
        assert msgs, f"only {len(stored)} of {ROWS} messages in the topic"
        for m in msgs:
            assert m.error() is None, m.error()
            stored[(m.partition(), m.offset())] = m
    assert consumer.consume(1, timeout=0.5) == []     # and nothing more
    consumer.close()
    for i in range(ROWS):
        part, offset, key, value, headers = expected_row(i)
        m = stored[(part, offset)]
        assert (m.key(), m.value(), m.headers()) == (key, value, headers), i

    # The same through Spark: the reader's side, timestamps included.
    got = rows_of(read(spark, tansu_broker.bootstrap, subscribe=written, includeHeaders="true"))
    assert len(got) == ROWS
    for (part, offset), m in stored.items():
        row = got[(part, offset)]
        kind, ms = m.timestamp()
        assert row["topic"] == written
        assert row["key"] == m.key() and row["value"] == m.value()
        assert row["headers"] == (None if m.headers() is None else
                                  [{"key": k, "value": v} for k, v in m.headers()])
        assert row["timestampType"] == kind - 1 == 0        # create time
        assert int(row["timestamp"].timestamp() * 1000) == ms


def test_schema_is_spark_kafka_schema(spark, tansu_broker, written):
    plain = read(spark, tansu_broker.bootstrap, subscribe=written)
    assert plain.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>")
    with_headers = read(spark, tansu_broker.bootstrap, subscribe=written,
                        includeHeaders="true")
    assert with_headers.schema.simpleString().endswith(
        ",headers:array<struct<key:string,value:binary>>>")


def test_min_partitions_split_covers_each_offset_once(spark, tansu_broker, written):
    df = read(spark, tansu_broker.bootstrap, subscribe=written, minPartitions="10")
    # 10 tasks over 4 equal partitions: each gets round(2.5) = 3 ranges, as Spark splits.
    assert df.rdd.getNumPartitions() == 12
    table = df.select("partition", "offset", F.spark_partition_id().alias("task")).toArrow()
    tasks = {}
    for row in table.to_pylist():
        tasks.setdefault(row["task"], []).append((row["partition"], row["offset"]))
    assert len(tasks) == 12
    covered = []
    for task, offsets in tasks.items():
        parts = {p for p, _ in offsets}
        assert len(parts) == 1, f"task {task} read several partitions"
        offs = [o for _, o in offsets]
        assert offs == list(range(offs[0], offs[0] + len(offs))), f"task {task}: a gap"
        covered.extend(offsets)
    assert sorted(covered) == [(p, o) for p in range(PARTITIONS)
                               for o in range(PER_PARTITION)]


def test_explicit_offsets_json(spark, tansu_broker, written):
    start = {written: {"0": 100, "1": -2, "2": PER_PARTITION - 1000, "3": 5}}
    end = {written: {"0": 200, "1": 10, "2": -1, "3": 5}}
    import json

    got = rows_of(read(spark, tansu_broker.bootstrap, subscribe=written,
                       startingOffsets=json.dumps(start), endingOffsets=json.dumps(end)))
    want = [(0, o) for o in range(100, 200)] + [(1, o) for o in range(10)] + \
        [(2, o) for o in range(PER_PARTITION - 1000, PER_PARTITION)]
    assert sorted(got) == want
    for (part, offset), row in got.items():
        i = part * PER_PARTITION + offset
        assert row["value"] == expected_row(i)[3]


def test_assign_and_pattern(spark, tansu_broker, written):
    got = rows_of(read(spark, tansu_broker.bootstrap, assign=f'{{"{written}": [1, 3]}}'))
    assert sorted(got) == [(p, o) for p in (1, 3) for o in range(PER_PARTITION)]

    other = written + "-other"
    tansu_broker.create_topic(other, 1)
    with Producer({"bootstrap.servers": tansu_broker.bootstrap}) as producer:
        producer.produce(other, b"only", partition=0)
    # The pattern must match the whole name: the written topic is a prefix of `other`.
    df = read(spark, tansu_broker.bootstrap, subscribePattern=written.replace(".", r"\.")
              + "-oth.*")
    assert [(r.topic, r.value) for r in df.collect()] == [(other, b"only")]
    assert read(spark, tansu_broker.bootstrap,
                subscribePattern="spark-batch-.*").count() >= ROWS + 1


def test_empty_ranges_read_nothing(spark, tansu_broker, written):
    import json

    at_end = {written: {str(p): -1 for p in range(PARTITIONS)}}
    df = read(spark, tansu_broker.bootstrap, subscribe=written,
              startingOffsets=json.dumps({written: {str(p): PER_PARTITION
                                                    for p in range(PARTITIONS)}}),
              endingOffsets=json.dumps(at_end))
    assert df.count() == 0


# -- bad input ------------------------------------------------------------------------------

def spark_error(action):
    with pytest.raises(Exception) as info:
        action()
    return str(info.value)


def test_missing_bootstrap_servers(spark, written):
    msg = spark_error(lambda: spark.read.format(FORMAT).option("subscribe", written).load()
                      .count())
    assert "option 'kafka.bootstrap.servers' is required" in msg


def test_topic_options_conflict_or_missing(spark, tansu_broker, written):
    msg = spark_error(lambda: read(spark, tansu_broker.bootstrap, subscribe=written,
                                   assign=f'{{"{written}": [0]}}').count())
    assert "only one of 'subscribe', 'subscribePattern' and 'assign'" in msg
    msg = spark_error(lambda: read(spark, tansu_broker.bootstrap).count())
    assert "one of the options 'subscribe', 'subscribePattern' or 'assign' is required" in msg


def test_malformed_offsets_json(spark, tansu_broker, written):
    msg = spark_error(lambda: read(spark, tansu_broker.bootstrap, subscribe=written,
                                   startingOffsets='{"t": {"0": 1').count())
    assert "option 'startingoffsets': malformed JSON" in msg
    msg = spark_error(lambda: read(spark, tansu_broker.bootstrap, subscribe=written,
                                   endingOffsets=f'{{"{written}": {{"x": 1}}}}').count())
    assert "has partition 'x', which is not a partition number" in msg
    msg = spark_error(lambda: read(spark, tansu_broker.bootstrap, subscribe=written,
                                   startingOffsets=f'{{"{written}": {{"0": 1}}}}').count())
    assert "must give an offset for every partition read" in msg
    assert f"{written} [3]" in msg
    msg = spark_error(lambda: read(spark, tansu_broker.bootstrap, subscribe=written,
                                   startingOffsets="latest").count())
    assert "option 'startingoffsets' cannot be 'latest' here" in msg


def test_unknown_topic_and_partition(spark, tansu_broker):
    msg = spark_error(lambda: read(spark, tansu_broker.bootstrap,
                                   subscribe="no-such-topic-here").count())
    assert "subscribe: topic 'no-such-topic-here' does not exist" in msg
    msg = spark_error(lambda: read(spark, tansu_broker.bootstrap,
                                   assign='{"no-such-topic-here": [0]}').count())
    assert "assign: topic 'no-such-topic-here' does not exist" in msg


def test_unknown_option_and_given_schema(spark, tansu_broker, written):
    msg = spark_error(lambda: read(spark, tansu_broker.bootstrap, subscribe=written,
                                   startingOffset="earliest").count())
    assert "unknown option 'startingoffset'" in msg
    msg = spark_error(lambda: spark.read.format(FORMAT).schema("value binary")
                      .option("kafka.bootstrap.servers", tansu_broker.bootstrap)
                      .option("subscribe", written).load().count())
    assert "has a fixed schema" in msg


def test_offsets_past_the_end(spark, tansu_broker, written):
    import json

    past = {written: {"0": PER_PARTITION + 10, "1": 0, "2": 0, "3": 0}}
    msg = spark_error(lambda: read(spark, tansu_broker.bootstrap, subscribe=written,
                                   startingOffsets=json.dumps(past)).count())
    assert f"{written} [0]: the starting offset {PER_PARTITION + 10} is after the ending " \
        f"offset {PER_PARTITION}" in msg
    assert "failOnDataLoss" in msg
    # Without failOnDataLoss that partition reads nothing and the others everything.
    df = read(spark, tansu_broker.bootstrap, subscribe=written, failOnDataLoss="false",
              startingOffsets=json.dumps(past))
    assert sorted(df.groupBy("partition").count().collect()) == \
        [(1, PER_PARTITION), (2, PER_PARTITION), (3, PER_PARTITION)]
    # An ending offset past the end is an error either way.
    for fail in ("true", "false"):
        msg = spark_error(lambda: read(
            spark, tansu_broker.bootstrap, subscribe=written, failOnDataLoss=fail,
            endingOffsets=json.dumps({written: {"0": PER_PARTITION + 1, "1": -1, "2": -1,
                                                "3": -1}})).count())
        assert f"the ending offset {PER_PARTITION + 1} is past the end of the log" in msg


def test_deleted_offsets_and_times_on_noida(spark, noida_broker):
    """Records deleted from the log start (DeleteRecords) and offsets by time: noida-db
    does both (Tansu 0.6 answers every time with 0 and drops the connection on
    DeleteRecords)."""
    from confluent_kafka import TopicPartition as CTP
    from confluent_kafka.admin import AdminClient

    topic = f"spark-noida-{time.time_ns()}"
    noida_broker.create_topic(topic, 1)
    t0 = int(time.time() * 1000) - 100_000
    with Producer({"bootstrap.servers": noida_broker.bootstrap, "linger.ms": 0}) as producer:
        for i in range(20):
            producer.produce(topic, b"%d" % i, partition=0, timestamp=t0 + i * 1000)
    bootstrap = noida_broker.bootstrap

    def values(df):
        return [int(r.value) for r in df.orderBy("offset").collect()]

    # by time: the first offset at or after the time
    assert values(read(spark, bootstrap, subscribe=topic, startingTimestamp=str(t0 + 4500),
                       endingTimestamp=str(t0 + 9000))) == list(range(5, 9))
    assert values(read(spark, bootstrap, subscribe=topic, startingOffsetsByTimestamp=(
        f'{{"{topic}": {{"0": {t0 + 17000}}}}}'))) == [17, 18, 19]
    msg = spark_error(lambda: read(spark, bootstrap, subscribe=topic,
                                   startingTimestamp=str(t0 + 10**9)).count())
    assert "has no message at or after time" in msg
    assert values(read(spark, bootstrap, subscribe=topic, startingTimestamp=str(t0 + 10**9),
                       startingOffsetsByTimestampStrategy="latest")) == []

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_records([CTP(topic, 0, 8)], request_timeout=10).values():
        fut.result(10)
    msg = spark_error(lambda: read(spark, bootstrap, subscribe=topic,
                                   startingOffsets=f'{{"{topic}": {{"0": 3}}}}').count())
    assert f"{topic} [0]: offsets 3..7 are no longer in the log (it starts at 8)" in msg
    assert values(read(spark, bootstrap, subscribe=topic, failOnDataLoss="false",
                       startingOffsets=f'{{"{topic}": {{"0": 3}}}}')) == list(range(8, 20))
    assert values(read(spark, bootstrap, subscribe=topic)) == list(range(8, 20))


# -- writing: bad input and failed deliveries --------------------------------------------------

def test_write_needs_value_and_topic(spark, tansu_broker):
    df = spark.range(3).select(F.col("id").cast("string").alias("v"))
    msg = spark_error(lambda: df.write.format(FORMAT).mode("append")
                      .option("kafka.bootstrap.servers", tansu_broker.bootstrap)
                      .option("topic", "x").save())
    assert "needs a 'value' column" in msg
    df = spark.range(3).select(F.col("id").cast("string").alias("value"))
    msg = spark_error(lambda: df.write.format(FORMAT).mode("append")
                      .option("kafka.bootstrap.servers", tansu_broker.bootstrap).save())
    assert "give the 'topic' option or a 'topic' column" in msg
    df = spark.range(3).select(F.col("id").cast("string").alias("value"),
                               F.col("id").alias("partition"))
    msg = spark_error(lambda: df.write.format(FORMAT).mode("append")
                      .option("kafka.bootstrap.servers", tansu_broker.bootstrap)
                      .option("topic", "x").save())
    assert "column 'partition' must be int, not bigint" in msg


def test_write_topic_column_and_strings(spark, tansu_broker):
    a, b = (f"spark-topics-{time.time_ns()}-{n}" for n in "ab")
    tansu_broker.create_topic(a, 1)
    tansu_broker.create_topic(b, 2)
    df = spark.createDataFrame(
        [(a if i % 2 else b, f"value {i}", f"key {i}", 1 if i % 2 == 0 else None)
         for i in range(10)], "topic string, value string, key string, partition int")
    df.coalesce(1).write.format(FORMAT).mode("append").option(
        "kafka.bootstrap.servers", tansu_broker.bootstrap).save()
    got = read(spark, tansu_broker.bootstrap, subscribe=f"{a},{b}").orderBy("topic", "offset")
    assert [(r.topic, r.partition, r.key, r.value) for r in got.collect()] == \
        [(a, 0, b"key %d" % i, b"value %d" % i) for i in (1, 3, 5, 7, 9)] + \
        [(b, 1, b"key %d" % i, b"value %d" % i) for i in (0, 2, 4, 6, 8)]


def test_write_to_missing_partition_fails_with_kafka_error(spark, tansu_broker):
    topic = f"spark-badpart-{time.time_ns()}"
    tansu_broker.create_topic(topic, 2)
    df = spark.createDataFrame([("v", 5)], "value string, partition int")
    msg = spark_error(lambda: df.write.format(FORMAT).mode("append")
                      .option("kafka.bootstrap.servers", tansu_broker.bootstrap)
                      .option("topic", topic).save())
    assert "delivery failed: _UNKNOWN_PARTITION" in msg


def test_python_workers_keep_their_producers(spark, tmp_path):
    """A Python worker's next write task reuses the producer of its last one (same
    options), counted on the wire: a new producer asks for a producer id, a reused one
    does not. Without the pool each of the 4 tasks of each write asks; with it the second
    write asks for none here (fewer than one per task is asserted: which worker runs a
    task is Spark's choice). Every row of both writes lands."""
    with Cluster(brokers=1, data_dir=str(tmp_path / "cluster")) as cluster:
        bootstrap = cluster.bootstrap_servers
        df = spark.range(8000, numPartitions=4).select(
            F.col("id").cast("string").alias("value"))
        inits = []
        for topic in ("pool-a", "pool-b"):
            cluster.create_topic(topic, 2)
            since = cluster.clear_request_log()
            (df.write.format(FORMAT).mode("append")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save())
            inits.append(len(cluster.request_log(since=since, api="InitProducerId")))
            got = read(spark, bootstrap, subscribe=topic).select(
                F.col("value").cast("string").cast("long").alias("n"))
            assert sorted(r.n for r in got.collect()) == list(range(8000))
        assert 1 <= inits[0] <= 4 and inits[1] < 4, inits


def test_failed_delivery_fails_the_task(spark, fresh_noida_broker):
    """Messages the broker never acknowledges (it is gone) fail the write task with the
    count and the error the producer reported, after message.timeout.ms."""
    topic = f"spark-lost-{time.time_ns()}"
    fresh_noida_broker.create_topic(topic, 1)
    bootstrap = fresh_noida_broker.bootstrap
    fresh_noida_broker.kill()
    df = spark.range(1000, numPartitions=1).select(F.col("id").cast("string").alias("value"))
    started = time.monotonic()
    msg = spark_error(lambda: df.write.format(FORMAT).mode("append")
                      .option("kafka.bootstrap.servers", bootstrap)
                      .option("kafka.message.timeout.ms", "3000")
                      .option("topic", topic).save())
    assert time.monotonic() - started < 60
    assert "KafkaWriteError: delivery failed: _MSG_TIMED_OUT" in msg, msg[-2000:]


def test_range_ending_in_a_transaction_marker(spark, tansu_broker):
    """A committed transaction ends with a marker: the log's last offset holds no record.
    The task finds that the range holds nothing more (end-of-partition event) instead of
    waiting for kafkaConsumer.pollTimeoutMs."""
    from confluent_kafka import Producer as ConfluentProducer

    topic = f"spark-txn-{time.time_ns()}"
    tansu_broker.create_topic(topic, 1)
    producer = ConfluentProducer({"bootstrap.servers": tansu_broker.bootstrap,
                                  "transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, b"%d" % i, partition=0)
    producer.commit_transaction(30)
    # The range is 0..11 (10 records and the marker): a task that waited for a record
    # at offset 10 would fail after pollTimeoutMs.
    df = read(spark, tansu_broker.bootstrap, subscribe=topic,
              **{"kafkaConsumer.pollTimeoutMs": "5000"})
    assert [(r.offset, int(r.value)) for r in df.orderBy("offset").collect()] == \
        [(i, i) for i in range(10)]
    marks = Consumer({"bootstrap.servers": tansu_broker.bootstrap})
    marks.assign([TopicPartition(topic, 0, 0)])
    marks.consume(10, timeout=10)
    assert marks.get_watermark_offsets(TopicPartition(topic, 0), cached=True) == (0, 11)
    marks.close()


def test_read_committed_reads_to_the_last_stable_offset(spark, tmp_path):
    """kafka.isolation.level=read_committed with a transaction still open: the ranges
    end at the last stable offset, as Spark's own source plans, so the committed rows
    come at once (planned to the high watermark, the task waited pollTimeoutMs and
    failed)."""
    with Cluster(brokers=1, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=1)
        with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as plain:
            for i in range(5):
                plain.produce("t", b"%d" % i, partition=0)
            assert plain.flush(10) == 0
        txn = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                        "transactional.id": "spark-open"})
        try:
            txn.init_transactions(30)
            txn.begin_transaction()
            for i in range(5):
                txn.produce("t", b"open %d" % i, partition=0)
            assert txn.flush(10) == 0                # in the log, not committed
            started = time.monotonic()
            df = read(spark, cluster.bootstrap_servers, subscribe="t",
                      **{"kafka.isolation.level": "read_committed",
                         "kafkaConsumer.pollTimeoutMs": "20000"})
            assert [int(r.value) for r in df.orderBy("offset").collect()] == list(range(5))
            assert time.monotonic() - started < 15
        finally:
            txn.abort_transaction(10)
            txn.close(10)


def test_write_refusals_and_read_option_forms(spark, tansu_broker, written):
    """Save mode overwrite (a topic cannot be replaced: rows were appended silently), a
    partition of -1 (it meant "the partitioner chooses"), a null element of the
    headers array and a header with a null key (sent as "None") are refused with errors
    naming them; a topic named twice in
    'subscribe' is read once and includeHeaders=1 reads the headers (both failed)."""
    topic = f"spark-refusals-{time.time_ns()}"
    tansu_broker.create_topic(topic, 2)

    def write(df, mode="append"):
        return lambda: df.write.format(FORMAT).mode(mode).option(
            "kafka.bootstrap.servers", tansu_broker.bootstrap).option("topic", topic).save()

    df = spark.createDataFrame([("v",)], "value string")
    assert "only appends: save mode 'overwrite'" in spark_error(write(df, "overwrite"))
    df = spark.createDataFrame([("v", -1)], "value string, partition int")
    assert "negative partition -1" in spark_error(write(df))
    df = spark.createDataFrame([("v", [("h", b"x"), None])],
                               "value string, headers array<struct<key string, value binary>>")
    assert "null element in its 'headers'" in spark_error(write(df))
    df = spark.createDataFrame([("v", [(None, b"x")])],
                               "value string, headers array<struct<key string, value binary>>")
    assert "a header with a null key" in spark_error(write(df))
    assert read(spark, tansu_broker.bootstrap, subscribe=topic).count() == 0
    twice = read(spark, tansu_broker.bootstrap, subscribe=f"{written},{written}")
    assert twice.count() == ROWS
    with_headers = read(spark, tansu_broker.bootstrap, subscribe=written, includeHeaders="1")
    assert "headers" in with_headers.columns


def test_demo_job(spark):
    """The job behind ``./dev demo spark``, small, on this module's Spark session."""
    import io
    import re

    from kafka_client.spark import demo

    out = io.StringIO()
    assert demo.run(messages=4000, partitions=4, out=out, spark=spark), out.getvalue()
    text = out.getvalue()
    assert re.search(r"warmed Spark up \(4,000 messages written and read back\) in [\d.]+s",
                     text)
    assert re.search(r"wrote 4,000 messages in [\d.]+s: [\d,]+ rows/s", text)
    assert re.search(r"read, transformed and wrote 4,000 messages in [\d.]+s: [\d,]+ rows/s",
                     text)
    assert "verified 4,000/4,000 rows" in text
    assert "write    100.0% 4,000/4,000" in text
    assert "pipeline 100.0% 4,000/4,000" in text


@pytest.mark.parametrize("error, fails", [("UNKNOWN_SERVER_ERROR", False),
                                          ("NOT_LEADER_OR_FOLLOWER", False),
                                          ("TOPIC_AUTHORIZATION_FAILED", True)])
def test_a_range_reads_through_a_brokers_errors_and_fails_on_a_refusal(tmp_path, error, fails):
    """A task's range (read_range, no Spark needed) goes on reading after the Fetch
    errors its consumer retries, and fails at once, naming the error, on one that
    leaves nothing to retry. Any error used to fail the task (a Spark streaming query
    died on one UNKNOWN_SERVER_ERROR in a soak run)."""
    with Cluster(brokers=1, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=1)
        with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as p:
            for i in range(3000):
                p.produce("t", b"%d" % i, partition=0)
            assert p.flush(10) == 0
        opts = parse_read_options({"kafka.bootstrap.servers": cluster.bootstrap_servers,
                                   "subscribe": "t", "maxRecordsPerBatch": "500"},
                                  streaming=False)
        cluster.inject_errors("Fetch", [error] * 2)
        started = time.monotonic()
        batches = read_range(OffsetRange("t", 0, 0, 3000), opts,
                             arrow_schema(kafka_schema()))
        if fails:
            with pytest.raises(KafkaException, match=error):
                list(batches)
            assert time.monotonic() - started < 10
            return
        values = [int(v) for b in batches for v in b.column("value").to_pylist()]
        assert values == list(range(3000))
