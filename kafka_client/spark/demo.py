"""The Spark pipeline as a job (``./dev demo spark``): write, transform, read back, verify.

    python -m kafka_client.spark.demo [--messages N] [--partitions P] [--broker tansu|noida]

It starts a local broker (Tansu by default) and a local Spark session (``local[2]``),
registers the ``kafka_native`` data source, warms Spark up (a small write and read, not
timed: the first queries of a session start its Python workers and compile code), and
then:

1. writes N messages of 100 bytes across P partitions of an input topic from a Spark
   DataFrame (message ``i``: its number in 10 digits, then filler; Spark partition ``p``
   writes Kafka partition ``p``, in order);
2. runs the pipeline: reads the input topic, upper-cases every value and writes the result,
   partition for partition, to an output topic;
3. reads the output topic back and verifies every row in Spark: N rows, each number once,
   each value the transformed input of the same number, in the same partition.

Each step prints its rows/s; the write and pipeline steps show a progress bar fed by the
end offsets of the topic they write.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from typing import Any, Callable, List, Optional, TextIO

__all__ = ["main", "run"]

MESSAGE_SIZE = 100
DEFAULT_MESSAGES = 1_000_000
DEFAULT_PARTITIONS = 4
#: Messages of the warm-up write and read, before the timed steps.
WARMUP_MESSAGES = 10_000
_FILLER = ("kafka-native spark demo payload / " * 3)[: MESSAGE_SIZE - 10]


class _Watch:
    """A background thread that redraws a progress bar from ``count()`` every 0.25 s."""

    def __init__(self, label: str, total: int, count: Callable[[], int], out: TextIO) -> None:
        from kafka_client.demo import Progress

        self.progress = Progress(label, total, out)
        self.count = count
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"progress-{label}",
                                        daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            try:
                self.done = self.count()
            except Exception:  # a progress display must never break the job
                continue
            self.progress.update(self.done)

    def __enter__(self) -> "_Watch":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        if exc[0] is None:
            self.done = self.count()
            self.progress.finish(self.done)


class _TopicSize:
    """Calling it gives the number of messages in a topic (the sum of its partitions'
    ends, from Fetch answers: see :meth:`Planner.watermarks`)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        from .offsets import Planner
        from .options import parse_read_options

        self._planner = Planner(parse_read_options({"kafka.bootstrap.servers": bootstrap,
                                                    "subscribe": topic}, streaming=False))
        self._keys = [(topic, p) for p in range(partitions)]
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return sum(high for _low, high in self._planner.watermarks(self._keys).values())

    def close(self) -> None:
        with self._lock:
            self._planner.close()


def run(messages: int = DEFAULT_MESSAGES, partitions: int = DEFAULT_PARTITIONS,
        broker_kind: str = "tansu", out: TextIO = sys.stdout, spark: Any = None) -> bool:
    """Run the job; True when every row came back as expected. Without ``spark`` (a
    SparkSession) it starts a local one and stops it at the end."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from kafka_client._testing.brokers import make_broker

    from . import SOURCE_NAME, register

    say = lambda text: (out.write(text + "\n"), out.flush())  # noqa: E731
    per_partition = -(-messages // partitions)
    broker = make_broker(broker_kind)
    own_spark = spark is None
    sizes: List[_TopicSize] = []
    try:
        t0 = time.perf_counter()
        broker.start()
        bootstrap = broker.bootstrap
        say(f"started {broker_kind} on {bootstrap} ({time.perf_counter() - t0:.2f}s)")
        suffix = uuid.uuid4().hex[:8]
        source, target = f"spark-demo-in-{suffix}", f"spark-demo-out-{suffix}"
        warmup = f"spark-demo-warmup-{suffix}"
        for topic in (source, target, warmup):
            broker.create_topic(topic, partitions)
        say(f"topics {source} and {target}, {partitions} partitions each")

        if own_spark:
            t0 = time.perf_counter()
            # Spark's Python workers run this interpreter (with this package importable).
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            spark = (SparkSession.builder.master("local[2]").appName("kafka-native-demo")
                     .config("spark.ui.showConsoleProgress", "false")
                     .config("spark.sql.shuffle.partitions", str(partitions))
                     .getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)
            say(f"started Spark {spark.version} ({spark.sparkContext.master}) in "
                f"{time.perf_counter() - t0:.1f}s; format {SOURCE_NAME!r} registered")
        kafka = {"kafka.bootstrap.servers": bootstrap}

        def numbered(n: int) -> Any:
            # Message i: its number in 10 digits, then filler; partition p holds the p-th
            # share of the numbers, in order.
            share = -(-n // partitions)
            ids = spark.range(n, numPartitions=partitions)
            number = F.lpad(F.col("id").cast("string"), 10, "0")
            return ids.select(
                F.concat(number, F.lit(_FILLER)).cast("binary").alias("value"),
                F.floor(F.col("id") / share).cast("int").alias("partition"))

        # 0. warm-up, not counted: a session's first queries start its Python workers and
        # generate and compile code (seconds), which would hide the rates of the steps.
        t0 = time.perf_counter()
        warm = min(WARMUP_MESSAGES, messages)
        numbered(warm).write.format(SOURCE_NAME).options(**kafka) \
            .option("topic", warmup).mode("append").save()
        back = spark.read.format(SOURCE_NAME).options(**kafka).option("subscribe", warmup) \
            .load().count()
        if back != warm:
            say(f"FAILED: the warm-up wrote {warm:,} messages and read back {back:,}")
            return False
        say(f"warmed Spark up ({warm:,} messages written and read back) in "
            f"{time.perf_counter() - t0:.2f}s: not counted below")

        # 1. write
        frame = numbered(messages)
        size = _TopicSize(bootstrap, source, partitions)
        sizes.append(size)
        t0 = time.perf_counter()
        with _Watch("write", messages, size, out):
            frame.write.format(SOURCE_NAME).options(**kafka).option("topic", source) \
                .mode("append").save()
        took = time.perf_counter() - t0
        say(f"wrote {messages:,} messages in {took:.2f}s: {messages / took:,.0f} rows/s, "
            f"{messages * MESSAGE_SIZE / took / 1e6:,.1f} MB/s")

        # 2. read -> transform -> write
        size = _TopicSize(bootstrap, target, partitions)
        sizes.append(size)
        t0 = time.perf_counter()
        with _Watch("pipeline", messages, size, out):
            (spark.read.format(SOURCE_NAME).options(**kafka).option("subscribe", source)
             .load()
             .select(F.upper(F.col("value").cast("string")).alias("value"), "partition")
             .write.format(SOURCE_NAME).options(**kafka).option("topic", target)
             .mode("append").save())
        took = time.perf_counter() - t0
        say(f"read, transformed and wrote {messages:,} messages in {took:.2f}s: "
            f"{messages / took:,.0f} rows/s")

        # 3. read back and verify every row
        t0 = time.perf_counter()
        back = spark.read.format(SOURCE_NAME).options(**kafka).option("subscribe", target) \
            .load()
        n = F.col("value").cast("string").substr(1, 10).cast("long")
        expected = F.upper(F.concat(F.lpad(n.cast("string"), 10, "0"), F.lit(_FILLER)))
        checks = back.select(
            n.alias("n"),
            ((F.col("value").cast("string") == expected)
             & (F.col("partition") == F.floor(n / per_partition))
             & (F.col("offset") == n % per_partition)).alias("ok"))
        row = checks.agg(F.count("*").alias("rows"), F.countDistinct("n").alias("distinct"),
                         F.min("n").alias("low"), F.max("n").alias("high"),
                         F.sum(F.when(F.col("ok"), 1).otherwise(0)).alias("good")).first()
        took = time.perf_counter() - t0
        good = row["good"] or 0
        say(f"read back {row['rows']:,} messages in {took:.2f}s: "
            f"{row['rows'] / took:,.0f} rows/s")
        ok = (row["rows"] == row["distinct"] == good == messages and row["low"] == 0
              and row["high"] == messages - 1)
        if ok:
            say(f"verified {good:,}/{messages:,} rows: every number once, in its partition "
                f"at its offset, with the transformed value")
        else:
            say(f"FAILED: {row['rows']:,} rows, {row['distinct']:,} distinct numbers "
                f"({row['low']}..{row['high']}), {good:,} as expected; wanted {messages:,}")
        return ok
    finally:
        for size in sizes:
            size.close()
        if own_spark and spark is not None:
            spark.stop()
        broker.stop()
        broker.cleanup()
        say(f"stopped {broker_kind}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kafka_client.spark.demo",
        description="Kafka -> Spark -> Kafka with the kafka_native data source: write N "
                    "messages, transform them into a second topic, read back, verify.")
    parser.add_argument("--messages", "-n", type=int, default=DEFAULT_MESSAGES, metavar="N",
                        help=f"messages of 100 bytes (default {DEFAULT_MESSAGES:,})")
    parser.add_argument("--partitions", "-p", type=int, default=DEFAULT_PARTITIONS,
                        help=f"partitions per topic (default {DEFAULT_PARTITIONS})")
    parser.add_argument("--broker", choices=("tansu", "noida"), default="tansu",
                        help="which local broker to start (default tansu)")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.partitions < 1:
        parser.error("--messages and --partitions must be at least 1")
    return 0 if run(args.messages, args.partitions, args.broker) else 1


if __name__ == "__main__":
    sys.exit(main())
