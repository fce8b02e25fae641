"""Reading: the batch reader, and the per-task reading of one offset range into Arrow.

Each Spark task reads one :class:`~kafka_client.spark.offsets.OffsetRange` with its own
:class:`kafka_client.Consumer`: assigned to the range's partition at its start offset, it
hands out ``pyarrow.RecordBatch`` es from :meth:`~kafka_client.Consumer.consume_arrow`
(records decoded straight into Arrow buffers, no Python object per message), which are
rearranged into Spark's Kafka schema (:func:`to_spark_batch`) and given to Spark as they
are. The task stops at the range's end offset.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Iterator, List, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from kafka_client import Consumer, KafkaError, KafkaException, TopicPartition

from .offsets import KafkaDataLossError, OffsetRange, Planner, check_range, split_ranges
from .options import KafkaOptionError, OffsetSpec, ReadOptions
from .schema import arrow_schema

__all__ = ["KafkaBatchReader", "read_range", "to_spark_batch"]

#: How long one consume_arrow() call waits for the rest of a range before the reader
#: checks whether the range holds more records at all (see _range_exhausted).
TAIL_WAIT_S = 0.5

#: Error events after which a range cannot be read: the task fails at once with them.
#: Any other is the consumer telling of a fetch it retries (a broker's error, a leader
#: that moved): the reading goes on, and kafkaConsumer.pollTimeoutMs bounds a partition
#: that never recovers (its last error is then named).
_UNREADABLE = frozenset((KafkaError._AUTO_OFFSET_RESET, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                         KafkaError.CLUSTER_AUTHORIZATION_FAILED))

_log = logging.getLogger("kafka_client.spark")
_MICROS = pa.scalar(1000, pa.int64())
_ONE = pa.scalar(1, pa.int32())


def to_spark_batch(batch: Any, schema: Any, include_headers: bool) -> Any:
    """A ``consume_arrow()`` batch in Spark's Kafka schema ``schema`` (a pyarrow schema):
    columns reordered, the timestamp in microseconds as Spark's timestamp type, the
    timestamp type as Spark numbers it (0 create time, 1 log append time, -1 none; ours
    are 1, 2 and 0), headers only when asked for. No copy of keys, values or topics."""
    timestamp = pc.multiply(batch.column(3), _MICROS).cast(schema.field("timestamp").type)
    timestamp_type = pc.subtract(batch.column(4).cast(pa.int32()), _ONE)
    columns = [batch.column(5), batch.column(6), batch.column(0), batch.column(1),
               batch.column(2), timestamp, timestamp_type]
    if include_headers:
        headers = batch.column(7)
        want = schema.field("headers").type
        columns.append(headers if headers.type == want else headers.cast(want))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_range(rng: OffsetRange, opts: ReadOptions, schema: Any) -> Iterator[Any]:
    """The records of ``rng`` as Spark-shaped Arrow batches (``schema``), in offset order.

    Offsets with no record (compacted away, transaction markers) are skipped. With
    failOnDataLoss, a range whose start was deleted meanwhile fails the task; without it,
    the reading goes on from the log start. A range the broker cannot complete within
    ``kafkaConsumer.pollTimeoutMs`` (no record for that long) fails the task, and so
    does an error that leaves nothing to retry (see _UNREADABLE); other errors the
    consumer reports are logged and the reading goes on.
    """
    if rng.end <= rng.start:
        return
    consumer = Consumer(opts.consumer_config(**{
        "auto.offset.reset": "error" if opts.fail_on_data_loss else "earliest",
        "enable.partition.eof": True}))
    try:
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        next_offset = rng.start
        last_progress = time.monotonic()
        poll_timeout = opts.poll_timeout_ms / 1000.0
        last_error: Optional[KafkaError] = None
        while next_offset < rng.end:
            want = min(opts.max_records_per_batch, rng.end - next_offset)
            try:
                batch = consumer.consume_arrow(want, timeout=TAIL_WAIT_S)
            except KafkaException as exc:
                last_error = _reading_goes_on(rng, next_offset, exc.args[0])
                batch = None
            if batch is not None and batch.num_rows:
                offsets = batch.column(2)
                last = offsets[-1].as_py()
                if last >= rng.end:
                    # Gaps made the rows reach past the end: keep the ones inside.
                    batch = batch.slice(0, pc.sum(pc.less(offsets, rng.end)).as_py() or 0)
                if batch.num_rows:
                    yield to_spark_batch(batch, schema, opts.include_headers)
                next_offset = last + 1
                last_progress = time.monotonic()
                continue
            try:
                if batch is not None and _range_exhausted(consumer, rng, next_offset):
                    return
            except KafkaException as exc:
                last_error = _reading_goes_on(rng, next_offset, exc.args[0])
            if time.monotonic() - last_progress > poll_timeout:
                raise TimeoutError(
                    f"{rng.topic} [{rng.partition}]: no record at or after offset "
                    f"{next_offset} within kafkaConsumer.pollTimeoutMs "
                    f"({opts.poll_timeout_ms} ms), though the range ends at {rng.end}"
                    + ("" if last_error is None else f"; last error: {last_error.str()}"))
    finally:
        consumer.close()


def _reading_goes_on(rng: OffsetRange, offset: int, err: KafkaError) -> KafkaError:
    """``err``, an error event of the range's consumer, logged when the reading can go
    on; raised as the task's error when it cannot (see _UNREADABLE)."""
    if err.fatal() or err.code() in _UNREADABLE:
        raise _read_error(rng, offset, err)
    _log.warning("%s [%d] at offset %d: %s (the consumer retries)", rng.topic,
                 rng.partition, offset, err.str())
    return err


def _range_exhausted(consumer: Consumer, rng: OffsetRange, next_offset: int) -> bool:
    """Whether no record is left in ``[next_offset, rng.end)``: the rest of the range is
    offsets without records (a transaction marker at the end, say). ``consume_arrow()``
    does not report the end of a partition, so the partition is sought back to
    ``next_offset`` (which re-arms the end-of-partition event) and ``consume()`` tells:
    the end event at or past ``rng.end`` means exhausted; a record means there is more
    (it is sought back so that consume_arrow() returns it)."""
    tp = TopicPartition(rng.topic, rng.partition, next_offset)
    consumer.seek(tp)
    for msg in consumer.consume(1, timeout=TAIL_WAIT_S):
        err = msg.error()
        offset = msg.offset()
        if err is None:
            assert offset is not None   # a record's
            if offset >= rng.end:
                return True
            consumer.seek(TopicPartition(rng.topic, rng.partition, offset))
            return False
        if err.code() == KafkaError._PARTITION_EOF:
            assert offset is not None   # the end it reached
            if offset >= rng.end:
                return True
            consumer.seek(tp)
            return False
        raise KafkaException(err)   # read_range decides
    return False


def _read_error(rng: OffsetRange, offset: int, err: KafkaError) -> Exception:
    where = f"{rng.topic} [{rng.partition}] at offset {offset}"
    if err.code() == KafkaError._AUTO_OFFSET_RESET:
        return KafkaDataLossError(
            f"{where}: the offset is no longer in the log (deleted since the query was "
            f"planned): {err.str()}. Set failOnDataLoss to false to go on from the log "
            f"start instead.")
    return KafkaException(KafkaError(err.code(), f"{where}: {err.str()}", err.fatal(),
                                      err.retriable(), err.txn_requires_abort()))


def plan_batch(opts: ReadOptions) -> List[OffsetRange]:
    """The offset ranges of a batch query, split for minPartitions."""
    planner = Planner(opts)
    try:
        keys = planner.partitions(must_exist=True)
        marks = planner.watermarks(keys)
        starts = planner.resolve(opts.starting, keys, marks, _option_name(opts, True), True)
        ends = planner.resolve(opts.ending, keys, marks, _option_name(opts, False), False)
    finally:
        planner.close()
    ranges = []
    for key in keys:
        low, high = marks[key]
        checked = check_range(key, starts[key], ends[key], low, high, opts.fail_on_data_loss)
        if checked is not None:
            ranges.append(OffsetRange(key[0], key[1], checked[0], checked[1]))
    return split_ranges(ranges, opts.min_partitions)


def _option_name(opts: ReadOptions, starting: bool) -> str:
    spec = opts.starting if starting else opts.ending
    prefix = "starting" if starting else "ending"
    if isinstance(spec, OffsetSpec):
        return prefix + "Offsets"
    return prefix + ("Timestamp" if spec.everywhere is not None else "OffsetsByTimestamp")


class KafkaBatchReader(DataSourceReader):
    """``spark.read.format("kafka_native")``: one task per offset range."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._ranges: Optional[List[OffsetRange]] = None

    def partitions(self) -> Sequence[InputPartition]:
        if self._ranges is None:
            self._ranges = plan_batch(self.opts)
        # Spark needs at least one partition; an empty one reads nothing.
        return self._ranges or [OffsetRange("", 0, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, OffsetRange):
            raise KafkaOptionError(f"unexpected input partition {partition!r}")
        return read_range(partition, self.opts, arrow_schema(self.schema))
