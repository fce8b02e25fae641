"""The kafka_native Spark data source, streaming queries, on a local Spark (``local[2]``)
and the Tansu fixture: restart from a checkpoint without loss or duplicates,
maxOffsetsPerTrigger, partitions that appear while the query runs, offsets committed to a
group, and a streaming write from a rate source; and the examples of docs/spark.md and
tools/soak.py's reading of its file sink (here to share this module's Spark session, which
takes seconds to start)."""
from __future__ import annotations

import importlib.util
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402

from kafka_client import Consumer, Producer, TopicPartition  # noqa: E402
from kafka_client.admin import AdminClient  # noqa: E402
from kafka_client.spark import register  # noqa: E402
from kafka_client.testing import Cluster  # noqa: E402

FORMAT = "kafka_native"


def produce(bootstrap, topic, start, count, partitions):
    """Values b"<i>" for i in start..start+count, message i to partition i % partitions."""
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        for i in range(start, start + count):
            producer.produce(topic, b"%d" % i, partition=i % partitions)


def stream(spark, bootstrap, **options):
    reader = spark.readStream.format(FORMAT).option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def written_batches(bootstrap, topic, partitions):
    """Every record of the topic's partitions, as consume_arrow() batches, to the end."""
    consumer = Consumer({"bootstrap.servers": bootstrap})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    batches = []
    while True:
        batch = consumer.consume_arrow(100_000, timeout=3)
        if not batch.num_rows:
            break
        batches.append(batch)
    consumer.close()
    return batches


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_restart_from_checkpoint_delivers_each_row_once(spark, tansu_broker, tmp_path):
    """A query stopped after a few micro-batches and started again on its checkpoint
    (with more data meanwhile) writes every input row to its sink exactly once."""
    topic = f"spark-stream-{time.time_ns()}"
    tansu_broker.create_topic(topic, 4)
    produce(tansu_broker.bootstrap, topic, 0, 8000, 4)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start(trigger, max_per_trigger):
        df = stream(spark, tansu_broker.bootstrap, subscribe=topic,
                    startingOffsets="earliest", maxOffsetsPerTrigger=max_per_trigger)
        return (df.select("partition", "offset", "value").writeStream.format("parquet")
                .option("path", out).option("checkpointLocation", checkpoint)
                .trigger(**trigger).start())

    query = start({"processingTime": "0 seconds"}, "1000")
    try:
        wait_for(lambda: query.lastProgress is not None
                 and query.lastProgress["batchId"] >= 2, 120, "three micro-batches")
    finally:
        query.stop()
    sizes = [p["numInputRows"] for p in query.recentProgress]
    assert all(n <= 1000 for n in sizes), sizes           # maxOffsetsPerTrigger
    assert sum(sizes) < 8000, "the query finished before it was stopped"

    produce(tansu_broker.bootstrap, topic, 8000, 4000, 4)
    query = start({"availableNow": True}, "100000")
    assert query.awaitTermination(180)
    assert query.exception() is None

    rows = spark.read.parquet(out).collect()
    seen = sorted((r.partition, r.offset) for r in rows)
    assert len(seen) == len(set(seen)) == 12_000, "lost or duplicated rows"
    for r in rows:
        # message i went to partition i % 4 as that partition's (i // 4)-th message
        i = int(r.value)
        assert (r.partition, r.offset) == (i % 4, i // 4)
    assert sorted(int(r.value) for r in rows) == list(range(12_000))


def test_new_partitions_and_group_commit(spark, tansu_broker):
    prefix = f"spark-pattern-{time.time_ns()}"
    first, second = prefix + "-a", prefix + "-b"
    group = prefix + "-group"
    tansu_broker.create_topic(first, 2)
    produce(tansu_broker.bootstrap, first, 0, 100, 2)
    df = stream(spark, tansu_broker.bootstrap, subscribePattern=prefix + "-.*",
                startingOffsets="earliest", **{"kafka.group.id": group})
    query = (df.select("topic", "partition", "offset", "value").writeStream
             .format("memory").queryName("pattern_rows").trigger(processingTime="200 milliseconds")
             .start())
    try:
        def rows():
            return spark.sql("select * from pattern_rows").collect()

        wait_for(lambda: len(rows()) >= 100, 120, "the first topic's rows")
        tansu_broker.create_topic(second, 3)   # appears while the query runs
        produce(tansu_broker.bootstrap, second, 0, 30, 3)
        produce(tansu_broker.bootstrap, first, 100, 10, 2)
        wait_for(lambda: len(rows()) >= 140, 120, "the new topic's rows")
        query.processAllAvailable()
        # Spark tells a source that a micro-batch is done when it plans the next one:
        # one more message makes the batch with everything above committed.
        produce(tansu_broker.bootstrap, first, 110, 1, 2)
        wait_for(lambda: len(rows()) >= 141, 120, "the last message")
    finally:
        query.stop()
    got = sorted((r.topic, r.partition, r.offset, int(r.value)) for r in rows())
    assert got == sorted([(first, i % 2, i // 2, i) for i in range(111)]
                         + [(second, i % 3, i // 3, i) for i in range(30)])

    # The finished micro-batches' offsets were committed to the group.
    consumer = Consumer({"bootstrap.servers": tansu_broker.bootstrap, "group.id": group})
    committed = consumer.committed([TopicPartition(first, p) for p in range(2)]
                                   + [TopicPartition(second, p) for p in range(3)],
                                   timeout=10)
    consumer.close()
    assert [tp.offset for tp in committed] == [55, 55, 10, 10, 10]


def test_stream_options_checked(spark, tansu_broker):
    query = (stream(spark, tansu_broker.bootstrap, subscribe="x", endingOffsets="latest")
             .writeStream.format("memory").queryName("bad").start())
    try:
        with pytest.raises(Exception, match="ending offsets or timestamps are for batch"):
            query.awaitTermination(120)
    finally:
        query.stop()


def test_streaming_write_from_rate_source(spark, tansu_broker, tmp_path):
    topic = f"spark-rate-{time.time_ns()}"
    tansu_broker.create_topic(topic, 4)
    rate = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 5000)
            .option("numPartitions", 2).load())
    query = (rate.select(F.col("value").cast("string").alias("value"),
                         F.col("value").cast("string").alias("key"))
             .writeStream.format(FORMAT)
             .option("kafka.bootstrap.servers", tansu_broker.bootstrap)
             .option("topic", topic)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="0 seconds").start())
    try:
        wait_for(lambda: query.lastProgress is not None
                 and query.lastProgress["batchId"] >= 3, 120, "four micro-batches")
    finally:
        query.stop()
    committed = sum(p["numInputRows"] for p in query.recentProgress)
    assert committed >= 20_000

    values = []
    for batch in written_batches(tansu_broker.bootstrap, topic, 4):
        values.extend(int(v) for v in batch.column("value").to_pylist())
        assert batch.column("key").to_pylist() == batch.column("value").to_pylist()
    # Every row of every finished micro-batch landed once; rows past them can only come
    # from the micro-batch the stop interrupted.
    assert sorted(v for v in values if v < committed) == list(range(committed))
    assert all(v < committed + 5000 for v in values)


def test_a_streaming_write_started_from_another_thread(spark, tansu_broker, tmp_path):
    """Spark 4 looks a streaming sink up in the calling JVM thread's session: a thread
    other than the registering one gets DATA_SOURCE_NOT_FOUND unless it calls
    register(spark) first, which makes the session its own."""
    topic = f"spark-thread-{time.time_ns()}"
    tansu_broker.create_topic(topic, 2)
    outcome = []

    def start_elsewhere():
        try:
            register(spark)
            rate = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 100)
                    .load())
            query = (rate.select(F.col("value").cast("string").alias("value"))
                     .writeStream.format(FORMAT)
                     .option("kafka.bootstrap.servers", tansu_broker.bootstrap)
                     .option("topic", topic)
                     .option("checkpointLocation", str(tmp_path / "checkpoint"))
                     .trigger(processingTime="0 seconds").start())
            try:
                wait_for(lambda: query.lastProgress is not None, 120, "a micro-batch")
            finally:
                query.stop()
            outcome.append(query.recentProgress[0]["numInputRows"])
        except Exception as exc:   # reported by the assertion below
            outcome.append(exc)

    worker = threading.Thread(target=start_elsewhere)
    worker.start()
    worker.join(180)
    assert outcome == [100], outcome
    values = {int(v) for batch in written_batches(tansu_broker.bootstrap, topic, 2)
              for v in batch.column("value").to_pylist()}
    assert set(range(100)) <= values    # the micro-batch reported done has landed


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_subscribed_topic_deleted_while_behind_is_data_loss(spark, tmp_path,
                                                              fail_on_data_loss):
    """A query restarted on its checkpoint after one of its topics, with unread records,
    was deleted: with failOnDataLoss it fails saying the partitions are gone, as Spark's
    own source (its old offset was kept and the records were skipped without a word);
    without, it reads on from the other topic."""
    with Cluster(brokers=1, data_dir=str(tmp_path / "cluster")) as cluster:
        bootstrap = cluster.bootstrap_servers
        cluster.create_topic("a", partitions=1, replication_factor=1)
        cluster.create_topic("b", partitions=1, replication_factor=1)
        produce(bootstrap, "a", 0, 10, 1)
        produce(bootstrap, "b", 0, 10, 1)
        got = []

        def run():
            query = (stream(spark, bootstrap, subscribe="a,b", startingOffsets="earliest",
                            failOnDataLoss=fail_on_data_loss)
                     .writeStream.foreachBatch(lambda df, _id: got.append(df.count()))
                     .option("checkpointLocation", str(tmp_path / "checkpoint"))
                     .trigger(availableNow=True).start())
            try:
                query.awaitTermination(90)
                return query.exception()
            except Exception as exc:   # the query's failure, raised by awaitTermination
                return exc

        assert run() is None and sum(got) == 20
        produce(bootstrap, "a", 10, 90, 1)
        produce(bootstrap, "b", 10, 5, 1)
        cluster.delete_topic("a")
        time.sleep(1)
        got.clear()
        error = run()
        if fail_on_data_loss == "true":
            assert error is not None and "a [0] are gone" in str(error)
        else:
            assert error is None and sum(got) == 5


def run_available_now(df, checkpoint, rows):
    """Run ``df`` with Trigger.AvailableNow on ``checkpoint``, every row into ``rows``;
    the query's failure, or None."""
    query = (df.writeStream.foreachBatch(lambda batch, _id: rows.extend(batch.collect()))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
        return query.exception()
    except Exception as exc:   # the query's failure, raised by awaitTermination
        return exc


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_starting_offset_past_the_end(spark, tansu_broker, tmp_path, fail_on_data_loss):
    """startingOffsets past the end of a partition, as Spark's source takes it: with
    failOnDataLoss the first micro-batch fails naming both offsets; without, it reads
    nothing of that partition and the query goes on from the end of the log (it read the
    partition from its earliest offset instead)."""
    topic = f"spark-past-end-{time.time_ns()}"
    tansu_broker.create_topic(topic, 2)
    produce(tansu_broker.bootstrap, topic, 0, 20, 2)
    df = stream(spark, tansu_broker.bootstrap, subscribe=topic,
                failOnDataLoss=fail_on_data_loss,
                startingOffsets=f'{{"{topic}": {{"0": 100, "1": 3}}}}')
    checkpoint, rows = str(tmp_path / "checkpoint"), []
    error = run_available_now(df, checkpoint, rows)
    if fail_on_data_loss == "true":
        assert error is not None
        assert f"{topic} [0]: the log ends at 10, before offset 100" in str(error)
        return
    assert error is None
    assert sorted((r.partition, r.offset) for r in rows) == [(1, o) for o in range(3, 10)]
    produce(tansu_broker.bootstrap, topic, 20, 6, 2)
    rows.clear()
    assert run_available_now(df, checkpoint, rows) is None
    assert sorted((r.partition, r.offset) for r in rows) == \
        [(0, 10), (0, 11), (0, 12), (1, 10), (1, 11), (1, 12)]


def test_min_offsets_per_trigger_holds_micro_batches_back(spark, tansu_broker, tmp_path):
    """minOffsetsPerTrigger as Spark's source has it (it was an unknown option): after the
    first micro-batch, none starts until that many offsets wait (maxTriggerDelay not
    reached); Trigger.Once reads everything in one micro-batch whatever the limits."""
    topic = f"spark-min-offsets-{time.time_ns()}"
    tansu_broker.create_topic(topic, 2)
    produce(tansu_broker.bootstrap, topic, 0, 5, 2)
    sizes = []
    query = (stream(spark, tansu_broker.bootstrap, subscribe=topic, startingOffsets="earliest",
                    minOffsetsPerTrigger="20", maxOffsetsPerTrigger="1000",
                    maxTriggerDelay="1h")
             .writeStream.foreachBatch(lambda batch, _id: sizes.append(batch.count()))
             .option("checkpointLocation", str(tmp_path / "held"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        wait_for(lambda: sizes, 120, "the first micro-batch")
        produce(tansu_broker.bootstrap, topic, 5, 10, 2)
        time.sleep(3)
        assert sizes == [5], "a micro-batch ran with fewer than minOffsetsPerTrigger"
        produce(tansu_broker.bootstrap, topic, 15, 10, 2)
        wait_for(lambda: len(sizes) > 1, 60, "the second micro-batch")
    finally:
        query.stop()
    assert sizes == [5, 20]

    sizes.clear()
    query = (stream(spark, tansu_broker.bootstrap, subscribe=topic, startingOffsets="earliest",
                    minOffsetsPerTrigger="1000", maxOffsetsPerTrigger="1000")
             .writeStream.foreachBatch(lambda batch, _id: sizes.append(batch.count()))
             .option("checkpointLocation", str(tmp_path / "once"))
             .trigger(once=True).start())
    assert query.awaitTermination(120) and query.exception() is None
    assert sizes == [25]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_an_added_partition_whose_start_was_deleted(spark, noida_broker, tmp_path,
                                                    fail_on_data_loss):
    """A topic that appears under subscribePattern between two runs of a query, its
    first records already deleted (DeleteRecords; noida-db does it, Tansu 0.6 does not):
    data loss as in Spark's source ("does not start from 0"): with failOnDataLoss the
    micro-batch fails, without it the partition is read from its log start (it was read
    from there without a word either way)."""
    prefix = f"spark-added-{fail_on_data_loss}-{time.time_ns()}"
    bootstrap = noida_broker.bootstrap
    noida_broker.create_topic(prefix + "-a", 1)
    produce(bootstrap, prefix + "-a", 0, 3, 1)
    df = stream(spark, bootstrap, subscribePattern=prefix + "-.*", startingOffsets="earliest",
                failOnDataLoss=fail_on_data_loss)
    checkpoint, rows = str(tmp_path / "checkpoint"), []
    assert run_available_now(df, checkpoint, rows) is None and len(rows) == 3

    noida_broker.create_topic(prefix + "-b", 1)
    produce(bootstrap, prefix + "-b", 0, 10, 1)
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        for future in admin.delete_records([TopicPartition(prefix + "-b", 0, 4)],
                                           request_timeout=10).values():
            future.result(10)
    rows.clear()
    error = run_available_now(df, checkpoint, rows)
    if fail_on_data_loss == "true":
        assert error is not None
        assert f"added partitions do not start at offset 0 ({prefix}-b [0] starts at 4)" \
            in str(error)
    else:
        assert error is None
        assert sorted(r.offset for r in rows) == list(range(4, 10))


def test_a_first_micro_batch_run_again_starts_where_it_did(spark, tansu_broker, tmp_path):
    """startingOffsets=latest (the streaming default), the first micro-batch fails and
    the query is restarted on its checkpoint after more records came: it reads exactly
    those. Spark keeps no start of a first micro-batch and asks initialOffset() again; the
    latest offsets were then new ones, past that micro-batch's end, and the query failed
    for good with "the log ends at 5, before offset 10"."""
    topic = f"spark-first-batch-{time.time_ns()}"
    tansu_broker.create_topic(topic, 1)
    produce(tansu_broker.bootstrap, topic, 0, 5, 1)
    df = stream(spark, tansu_broker.bootstrap, subscribe=topic)
    checkpoint = str(tmp_path / "checkpoint")

    def failing_sink(batch, batch_id):
        raise RuntimeError("the sink is down")

    query = (df.writeStream.foreachBatch(failing_sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    with pytest.raises(Exception, match="the sink is down"):
        query.awaitTermination(120)
    produce(tansu_broker.bootstrap, topic, 5, 5, 1)
    rows = []
    assert run_available_now(df, checkpoint, rows) is None
    assert sorted(r.offset for r in rows) == [5, 6, 7, 8, 9]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_topic_created_again_with_fewer_records(spark, tmp_path, fail_on_data_loss):
    """A query restarted on its checkpoint (offset 10) after its topic was deleted and
    created again with 3 records: as Spark's source, with failOnDataLoss it fails (the
    log ends before where the query stands), without it goes on from the new end: the 3
    records are not read, those after them are."""
    with Cluster(brokers=1, data_dir=str(tmp_path / "cluster")) as cluster:
        bootstrap = cluster.bootstrap_servers
        cluster.create_topic("t", partitions=1, replication_factor=1)
        produce(bootstrap, "t", 0, 10, 1)
        df = stream(spark, bootstrap, subscribe="t", startingOffsets="earliest",
                    failOnDataLoss=fail_on_data_loss)
        checkpoint, rows = str(tmp_path / "checkpoint"), []
        assert run_available_now(df, checkpoint, rows) is None and len(rows) == 10
        cluster.delete_topic("t")
        time.sleep(1)
        cluster.create_topic("t", partitions=1, replication_factor=1)
        produce(bootstrap, "t", 100, 3, 1)
        rows.clear()
        error = run_available_now(df, checkpoint, rows)
        if fail_on_data_loss == "true":
            assert error is not None
            assert "t [0]: the log ends at 3, before offset 10" in str(error)
            return
        assert error is None and rows == []
        produce(bootstrap, "t", 103, 2, 1)
        assert run_available_now(df, checkpoint, rows) is None
        assert sorted((r.offset, int(r.value)) for r in rows) == [(3, 103), (4, 104)]


def test_the_guide_examples(spark, doc_python_blocks, tmp_path, capsys):
    """docs/spark.md's python blocks, in order, in this process on the module's session,
    against a one-broker test cluster holding the topics they name; only the bootstrap
    address and the checkpoint directory are substituted. Each block's outcome is checked:
    the rows shown and read, the rows written, the rows the stream copied."""
    doc = "docs/spark.md"
    blocks = [code for _, code in doc_python_blocks(doc)]
    assert len(blocks) == 3
    with Cluster(brokers=1, data_dir=str(tmp_path / "cluster")) as cluster:
        bootstrap = cluster.bootstrap_servers
        cluster.create_topic("events", partitions=2)
        cluster.create_topic("audit")
        cluster.create_topic("events-a")           # read by the stream (events-.*)
        produce(bootstrap, "events", 0, 2600, 2)   # 1300 per partition
        produce(bootstrap, "audit", 0, 20, 1)
        checkpoint = str(tmp_path / "checkpoint")
        namespace = {}

        def run(code):
            code = code.replace("localhost:9092", bootstrap).replace(
                "/tmp/checkpoints/archived-events", checkpoint)
            exec(compile(code, doc, "exec"), namespace)

        run(blocks[0])              # registers the source, shows the first rows of events
        shown = capsys.readouterr().out
        assert "|value|" in shown and "only showing top 20 rows" in shown
        run(blocks[1])              # events 0 from offset 1200, the rest from the start
        batch = namespace["batch"]
        assert batch.count() == 100 + 1300 + 20
        assert "headers" in batch.columns
        run(blocks[2])              # 1000 rows to events; the stream of events-.* copied
        query = namespace["query"]
        try:
            written = sum(p.high_watermark for p in cluster.describe_topic("events").partitions)
            assert written == 2600 + 1000
            query.processAllAvailable()       # the first micro-batch fixes the start
            produce(bootstrap, "events-a", 0, 10, 1)
            query.processAllAvailable()
            copied = cluster.describe_topic("archived-events").partitions
            assert sum(p.high_watermark for p in copied) == 10
        finally:
            query.stop()


def test_a_soak_file_sink_that_never_wrote_reads_as_no_rows(spark, tmp_path):
    """tools/soak.py's reading of its spark mode's file sink, on this module's session
    (a Spark session of its own costs a JVM's start). Soak seed 119: both queries failed
    before their first batch; reading the sink's files without a schema ended the run in
    a traceback (UNABLE_TO_INFER_SCHEMA) before the checks that count the records
    missing."""
    spec = importlib.util.spec_from_file_location(
        "_tool_soak", Path(__file__).resolve().parents[3] / "tools" / "soak.py")
    soak = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = soak     # dataclasses look their module up there
    spec.loader.exec_module(soak)
    started = tmp_path / "started"    # the sink's log made, no batch written
    (started / "_spark_metadata").mkdir(parents=True)
    written = str(tmp_path / "written")
    spark.createDataFrame([(1, 7, b"x")], soak.FILE_SINK_SCHEMA).write.parquet(written)
    assert soak.read_file_sink(spark, str(tmp_path / "never")) == []
    assert soak.read_file_sink(spark, str(started)) == []
    assert [(r.partition, r.offset, bytes(r.value))
            for r in soak.read_file_sink(spark, written)] == [(1, 7, b"x")]
