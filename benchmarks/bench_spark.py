"""The kafka_native Spark data source against our plain client, in the same run.

    .venv/bin/python benchmarks/bench_spark.py [--broker tansu|noida] [--messages 1000000]
        [--rounds 3] [--markdown FILE]

On one broker it fills a topic of 4 partitions with N messages of 100 bytes
(``Producer.produce_batch``) and starts a local Spark session (``local[2]``, 2 cores as
in CI). Every round then times the following, in this order turned by one each round
(round r starts with the r-th, so that no contender always follows the same one), each
after the broker has been idle for 0.2 s (at most 5 s of waiting: brokers keep working
after a write, and the next contender would pay for it):

* read, plain: one ``kafka_client.Consumer`` assigned the 4 partitions from offset 0,
  ``consume_arrow(50000)`` until it holds N rows (one process, the clock starting before
  the consumer is created);
* read, Spark Arrow: ``spark.read.format("kafka_native")...load().count()`` (the data
  source as shipped: record batches from consume_arrow());
* read, Spark tuples: the same count through the same data source changed only in its
  reader, which yields one Python tuple per message from ``consume()`` (what a data source
  without the Arrow path does; Spark converts the tuples to Arrow in the worker);
* read, Spark's ceiling: a data source that reads nothing and yields ready-made Arrow
  batches of the same schema and size, counted the same way: the most any Python data
  source gets through Spark into count() on this machine;
* write, plain: N messages to a new 4-partition topic with one Producer,
  ``produce_batch()`` in chunks of 10,000 per partition, then ``flush()``;
* write, Spark: a cached DataFrame of the same N rows (``value`` binary, ``partition``
  int; 4 Spark partitions, one per Kafka partition) written to a new topic with
  ``df.write.format("kafka_native")``, which returns once every task has flushed;
* write, Spark's ceiling: the same DataFrame written to a data source whose tasks only
  count the Arrow batches Spark hands them: the most any Python data source writes
  through Spark on this machine.

Each Spark query counts or writes exactly N rows (checked). The first rounds (``--warmup``,
2 by default) are run and not counted: the JVM's JIT and Spark's Python workers warm up in
them (Spark's rates still rose from the first to the third round here). Also
timed: the fixed cost of a Spark query, a count() of an empty range of the same topic.
Reported: the median rows/s of each kind over the rounds, the Spark overhead (time over
the plain client's for the same rows) and the ratios the issue asks for: Spark Arrow read
>= 3x Spark tuple read, >= 0.5x plain consume_arrow(); Spark write >= 0.5x plain
produce_batch(). The machine, its load and every version are printed with the table.

Also reported (Linux): the CPU seconds each read and write used, split between the
broker, Spark's JVM, Spark's Python workers and this process (the plain client, the Spark
driver): with as many busy processes as the machine has cores, the wall time follows the
sum.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kafka_client import Consumer, Producer, TopicPartition  # noqa: E402
from kafka_client._testing.brokers import make_broker  # noqa: E402

PARTITIONS = 4
SIZE = 100
CHUNK = 10_000
#: noida-db 0.2.3 ignores Fetch size limits and answers with the whole log from the fetch
#: offset (110 MB for 4 partitions of this topic), over the clients' 100 MB default
#: receive.message.max.bytes: every consumer of the run gets 1 GiB there (as in
#: bench_consume.py), the Spark reader through its kafka.-prefixed options.
NOIDA_CLIENT = {"receive.message.max.bytes": 1 << 30}


def value(i: int) -> bytes:
    return b"%010d" % i + b"x" * (SIZE - 10)


def fill(bootstrap: str, topic: str, messages: int) -> float:
    """``messages`` to ``topic``, a quarter per partition, with produce_batch(); seconds
    from the first produce_batch() to the end of flush()."""
    per = messages // PARTITIONS
    values = [[value(p * per + i) for i in range(per)] for p in range(PARTITIONS)]
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, value(0), partition=0)  # learn the topic (bulk path)
    producer.flush(30)
    start = time.perf_counter()
    for part in range(PARTITIONS):
        vals = values[part][1:] if part == 0 else values[part]
        for s in range(0, len(vals), CHUNK):
            while True:
                try:
                    producer.produce_batch(topic, vals[s:s + CHUNK], partition=part)
                    break
                except BufferError:
                    producer.poll(0.05)
    left = producer.flush(120)
    took = time.perf_counter() - start
    producer.close()
    if left:
        raise RuntimeError(f"{left} messages not delivered to {topic}")
    return took


def read_plain(bootstrap: str, topic: str, messages: int, client: Dict[str, Any]) -> float:
    start = time.perf_counter()
    consumer = Consumer({"bootstrap.servers": bootstrap, **client})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    rows = 0
    while rows < messages:
        batch = consumer.consume_arrow(50_000, timeout=10)
        if not batch.num_rows:
            raise RuntimeError(f"plain read stalled at {rows} of {messages}")
        rows += batch.num_rows
    took = time.perf_counter() - start
    consumer.close()
    if rows != messages:
        raise RuntimeError(f"plain read got {rows} rows, wanted {messages}")
    return took


def tuple_source() -> Any:
    """The kafka_native source with a reader that yields one tuple per message."""
    from kafka_client.spark import KafkaDataSource
    from kafka_client.spark.reader import KafkaBatchReader

    utc = datetime.timezone.utc

    class TupleReader(KafkaBatchReader):
        def read(self, partition: Any) -> Iterator[tuple]:
            if partition.end <= partition.start:
                return
            consumer = Consumer(self.opts.consumer_config())
            try:
                consumer.assign([TopicPartition(partition.topic, partition.partition,
                                                partition.start)])
                last = partition.end - 1
                left = partition.end - partition.start
                while True:
                    # No more than the range holds: consume() waits for the count asked.
                    msgs = consumer.consume(min(10_000, left), timeout=10)
                    left -= len(msgs)
                    for m in msgs:
                        if m.error() is not None:
                            raise RuntimeError(m.error().str())
                        kind, ms = m.timestamp()
                        yield (m.key(), m.value(), m.topic(), m.partition(), m.offset(),
                               datetime.datetime.fromtimestamp(ms / 1000, utc), kind - 1)
                        if m.offset() >= last:
                            return
            finally:
                consumer.close()

    class KafkaTupleDataSource(KafkaDataSource):
        @classmethod
        def name(cls) -> str:
            return "kafka_native_tuples"

        def reader(self, schema: Any) -> Any:
            base = super().reader(schema)
            return TupleReader(base.opts, schema)

    return KafkaTupleDataSource


def floor_source(messages: int) -> Any:
    """A data source that reads nothing: each of its 4 tasks yields the same 50,000-row
    Arrow batch of the Kafka schema (100-byte values, the ``subscribe`` option's topic
    name in every row, as the read has it) until it has its quarter of
    ``messages``. What it reaches is Spark's own ceiling for a Python data source feeding
    count() on this machine, whatever the source does. Written to, its tasks count the
    Arrow batches Spark hands them and drop them: the write side's ceiling."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        InputPartition,
        WriterCommitMessage,
    )

    from kafka_client.spark.schema import arrow_schema, kafka_schema

    per_task = messages // PARTITIONS

    class FloorReader(DataSourceReader):
        def __init__(self, topic: str) -> None:
            self.topic = topic

        def partitions(self) -> List[InputPartition]:
            return [InputPartition(p) for p in range(PARTITIONS)]

        def read(self, partition: Any) -> Iterator[Any]:
            import pyarrow as pa

            schema = arrow_schema(kafka_schema())
            rows = min(50_000, per_task)
            batch = pa.RecordBatch.from_arrays([
                pa.nulls(rows, pa.binary()),
                pa.array([value(i) for i in range(rows)], pa.binary()),
                pa.array([self.topic] * rows), pa.array([partition.value] * rows, pa.int32()),
                pa.array(range(rows), pa.int64()),
                pa.array([0] * rows, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                pa.array([0] * rows, pa.int32())], schema=schema)
            left = per_task
            while left:
                yield batch.slice(0, min(rows, left))
                left -= min(rows, left)

    class FloorCommit(WriterCommitMessage):
        def __init__(self, rows: int) -> None:
            self.rows = rows

    class FloorWriter(DataSourceArrowWriter):
        def write(self, iterator: Iterator[Any]) -> Any:
            return FloorCommit(sum(batch.num_rows for batch in iterator))

        def commit(self, messages: List[Any]) -> None:
            rows = sum(m.rows for m in messages if m is not None)
            if rows != messages_total:
                raise RuntimeError(f"the floor writer got {rows} rows, not {messages_total}")

    messages_total = messages

    class FloorDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kafka_native_floor"

        def schema(self) -> Any:
            return kafka_schema()

        def reader(self, schema: Any) -> Any:
            # The read's topic name in every row, as the real read has it.
            return FloorReader(self.options.get("subscribe", "t"))

        def writer(self, schema: Any, overwrite: bool) -> Any:
            return FloorWriter()

    return FloorDataSource


def spark_session(messages: int) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    from pyspark.sql import SparkSession

    from kafka_client.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("bench-spark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(tuple_source())
    spark.dataSource.register(floor_source(messages))
    return spark


def spark_count(spark: Any, fmt: str, bootstrap: str, topic: str, want: int,
                client: Dict[str, Any], **options: str) -> float:
    start = time.perf_counter()
    n = (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
         .options(**{"kafka." + k: str(v) for k, v in client.items()})
         .option("subscribe", topic).options(**options).load().count())
    took = time.perf_counter() - start
    if n != want:
        raise RuntimeError(f"{fmt} counted {n} rows, wanted {want}")
    return took


def spark_write(frame: Any, bootstrap: str, topic: str, fmt: str = "kafka_native") -> float:
    start = time.perf_counter()
    (frame.write.format(fmt).mode("append")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save())
    return time.perf_counter() - start


def topic_size(bootstrap: str, topic: str, client: Dict[str, Any]) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, **client})
    total = 0
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    while True:
        batch = consumer.consume_arrow(100_000, timeout=3)
        if not batch.num_rows:
            break
        total += batch.num_rows
    consumer.close()
    return total


def cpu_seconds(broker_pid: int) -> Dict[str, float]:
    """CPU seconds (user + system) used so far by the processes of this run, from Linux's
    /proc: the broker (and its children), Spark's JVM, Spark's Python workers (every other
    process below this one) and this process (the plain clients and the Spark driver).
    Processes that ended are not counted. Empty where /proc is missing."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    stats: Dict[int, List[str]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    text = f.read()
            except OSError:
                continue
            end = text.rindex(")")  # the command name may hold spaces and parentheses
            stats[int(name)] = [text[text.index("(") + 1:end]] + text[end + 2:].split()
    children: Dict[int, List[int]] = {}
    for pid, st in stats.items():
        children.setdefault(int(st[2]), []).append(pid)
    out = {"broker": 0.0, "jvm": 0.0, "python_workers": 0.0, "this_process": 0.0}

    def walk(pid: int, group: Optional[str]) -> None:
        st = stats.get(pid)
        if st is None:
            return
        if pid == broker_pid:
            group = "broker"
        elif group is None:
            group = "this_process"
        elif group != "broker":
            group = "jvm" if st[0] == "java" else "python_workers"
        out[group] += (int(st[12]) + int(st[13])) / tick
        for child in children.get(pid, ()):
            walk(child, group)

    walk(os.getpid(), None)
    return out


def settle(broker_pid: int, quiet_s: float = 0.2, most_s: float = 5.0) -> None:
    """Wait until the broker has used (almost) no CPU for ``quiet_s`` seconds, at most
    ``most_s``. Brokers keep working after a write (Tansu and noida-db both burn CPU for
    a while): whichever contender came next would pay for it."""
    start = time.perf_counter()
    last = cpu_seconds(broker_pid).get("broker", 0.0)
    while time.perf_counter() - start < most_s:
        time.sleep(quiet_s)
        now = cpu_seconds(broker_pid).get("broker", 0.0)
        if now - last < 0.02 * quiet_s:
            break
        last = now


def cpu_row(label: str, samples: List[Dict[str, float]]) -> str:
    """A markdown row of the median CPU seconds per process group of ``samples``."""
    groups = ("broker", "jvm", "python_workers", "this_process")
    if not samples or not samples[0]:
        return f"| {label} | " + " | ".join("?" for _ in range(5)) + " |"
    med = [statistics.median(s[g] for s in samples) for g in groups]
    med.append(statistics.median(sum(s[g] for g in groups) for s in samples))
    return f"| {label} | " + " | ".join(f"{v:.2f}" for v in med) + " |"


def versions() -> Dict[str, str]:
    import pyarrow
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    return {"python": platform.python_version(), "pyspark": pyspark.__version__,
            "pyarrow": pyarrow.__version__,
            "java": java.splitlines()[0] if java else "?",
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                       f"load average {os.getloadavg()[0]:.1f} at the end"}


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", choices=("tansu", "noida"), default="tansu")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2,
                        help="rounds run first and not counted (default 2)")
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args(argv)
    n = args.messages - args.messages % PARTITIONS

    broker = make_broker(args.broker).start()
    times: Dict[str, List[float]] = {k: [] for k in (
        "read_plain", "read_arrow", "read_tuples", "read_floor", "write_plain",
        "write_spark", "write_floor", "empty")}
    cpu: Dict[str, List[Dict[str, float]]] = {k: [] for k in times}
    broker_pid = broker.process.pid if broker.process is not None else -1
    try:
        bootstrap = broker.bootstrap
        client = NOIDA_CLIENT if args.broker == "noida" else {}
        topic = f"bench-spark-{uuid.uuid4().hex[:8]}"
        broker.create_topic(topic, PARTITIONS)
        fill(bootstrap, topic, n)
        spark = spark_session(n)
        from pyspark.sql import functions as F

        frame = spark.range(n, numPartitions=PARTITIONS).select(
            F.concat(F.lpad(F.col("id").cast("string"), 10, "0"),
                     F.lit("x" * (SIZE - 10))).cast("binary").alias("value"),
            F.floor(F.col("id") / (n // PARTITIONS)).cast("int").alias("partition")).cache()
        assert frame.count() == n
        latest = json.dumps({topic: {str(p): -1 for p in range(PARTITIONS)}})
        for r in range(args.warmup + args.rounds):
            counted = r >= args.warmup
            label = f"round {r - args.warmup + 1}" if counted else f"warm-up {r + 1}"
            empty_range = dict(startingOffsets=json.dumps(
                {topic: {str(p): n // PARTITIONS for p in range(PARTITIONS)}}),
                endingOffsets=latest)
            plain_topic = f"bench-spark-plain-{uuid.uuid4().hex[:8]}"
            spark_topic = f"bench-spark-out-{uuid.uuid4().hex[:8]}"
            broker.create_topic(plain_topic, PARTITIONS)
            broker.create_topic(spark_topic, PARTITIONS)
            contenders = {
                "read_plain": lambda: read_plain(bootstrap, topic, n, client),
                "read_arrow": lambda: spark_count(spark, "kafka_native", bootstrap, topic,
                                                  n, client),
                "read_tuples": lambda: spark_count(spark, "kafka_native_tuples", bootstrap,
                                                   topic, n, client),
                "read_floor": lambda: spark_count(spark, "kafka_native_floor", bootstrap,
                                                  topic, n, client),
                "empty": lambda: spark_count(spark, "kafka_native", bootstrap, topic, 0,
                                             client, **empty_range),
                "write_plain": lambda: fill(bootstrap, plain_topic, n),
                "write_spark": lambda: spark_write(frame, bootstrap, spark_topic),
                "write_floor": lambda: spark_write(frame, bootstrap, spark_topic,
                                                   "kafka_native_floor"),
            }
            got = {}
            # The order turns by one each round, so that no contender always follows the
            # same one (the JVM's garbage and the broker's background work of a query
            # land on the next).
            keys = list(contenders)
            turn = r % len(keys)
            for key in keys[turn:] + keys[:turn]:
                run = contenders[key]
                settle(broker_pid)
                before = cpu_seconds(broker_pid)
                got[key] = run()
                after = cpu_seconds(broker_pid)
                if counted:
                    cpu[key].append({k: after[k] - before.get(k, 0.0) for k in after})
            if r == 0 and topic_size(bootstrap, spark_topic, client) != n:
                raise RuntimeError("the Spark write did not land every row")
            print(f"{label}: " + ", ".join(f"{k} {n / v if k != 'empty' else v:,.0f}"
                                           + ("" if k != "empty" else " s")
                                           for k, v in got.items()), flush=True)
            if counted:
                for k, v in got.items():
                    times[k].append(v)
        spark.stop()
    finally:
        broker.stop()
        broker.cleanup()

    med = {k: statistics.median(v) for k, v in times.items()}
    rate = {k: n / v for k, v in med.items() if k != "empty"}
    lines = [
        f"{n:,} messages x {SIZE} B, {PARTITIONS} partitions, {args.broker}, "
        f"Spark local[2]; medians of {args.rounds} rounds after {args.warmup} warm-up "
        f"rounds",
        "",
        "| | rows/s | seconds | vs plain client |",
        "|---|---:|---:|---:|",
        f"| read, plain `consume_arrow()` (1 process) | {rate['read_plain']:,.0f} | "
        f"{med['read_plain']:.2f} | 1.00x |",
        f"| read, Spark `kafka_native` (Arrow) + count() | {rate['read_arrow']:,.0f} | "
        f"{med['read_arrow']:.2f} | {rate['read_arrow'] / rate['read_plain']:.2f}x |",
        f"| read, same source yielding tuples + count() | {rate['read_tuples']:,.0f} | "
        f"{med['read_tuples']:.2f} | {rate['read_tuples'] / rate['read_plain']:.2f}x |",
        f"| read, Spark's ceiling: a source yielding ready Arrow batches + count() | "
        f"{rate['read_floor']:,.0f} | {med['read_floor']:.2f} | "
        f"{rate['read_floor'] / rate['read_plain']:.2f}x |",
        f"| write, plain `produce_batch()` + flush (1 process) | "
        f"{rate['write_plain']:,.0f} | {med['write_plain']:.2f} | 1.00x |",
        f"| write, Spark `kafka_native` from a cached DataFrame | "
        f"{rate['write_spark']:,.0f} | {med['write_spark']:.2f} | "
        f"{rate['write_spark'] / rate['write_plain']:.2f}x |",
        f"| write, Spark's ceiling: a sink counting the Arrow batches | "
        f"{rate['write_floor']:,.0f} | {med['write_floor']:.2f} | "
        f"{rate['write_floor'] / rate['write_plain']:.2f}x |",
        "",
        "CPU seconds of each read and write (medians; Linux /proc; the machine has "
        f"{os.cpu_count()} CPUs):",
        "",
        "| | broker | Spark JVM | Spark Python workers | this process | total |",
        "|---|---:|---:|---:|---:|---:|",
        *(cpu_row(label, cpu[key]) for key, label in (
            ("read_plain", "plain `consume_arrow()`"), ("read_arrow", "Spark Arrow"),
            ("read_tuples", "Spark tuples"), ("read_floor", "Spark's ceiling"),
            ("empty", "Spark, empty range"), ("write_plain", "write, plain `produce_batch()`"),
            ("write_spark", "write, Spark `kafka_native`"),
            ("write_floor", "write, Spark's ceiling"))),
        "",
        f"Spark overhead: reading {med['read_arrow'] - med['read_plain']:+.2f} s, writing "
        f"{med['write_spark'] - med['write_plain']:+.2f} s over the plain client for "
        f"{n:,} rows; a query over an empty range takes {med['empty']:.2f} s.",
        "",
        f"The Arrow read reaches {rate['read_arrow'] / rate['read_floor']:.2f}x of Spark's "
        f"ceiling for a Python data source, the write "
        f"{rate['write_spark'] / rate['write_floor']:.2f}x of its.",
        "",
        "Targets: Arrow read vs tuple read "
        f"{rate['read_arrow'] / rate['read_tuples']:.2f}x (>= 3), vs plain consume_arrow() "
        f"{rate['read_arrow'] / rate['read_plain']:.2f}x (>= 0.5); Spark write vs plain "
        f"produce_batch() {rate['write_spark'] / rate['write_plain']:.2f}x (>= 0.5).",
        "",
        "; ".join(f"{k} {v}" for k, v in versions().items()),
    ]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    ok = (rate["read_arrow"] >= 3 * rate["read_tuples"]
          and rate["read_arrow"] >= 0.5 * rate["read_plain"]
          and rate["write_spark"] >= 0.5 * rate["write_plain"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
