"""Writing: a DataFrame's rows produced to Kafka, in batch and streaming queries.

Spark hands each write task its rows as Arrow record batches. The task has one
:class:`kafka_client.Producer` (idempotent unless the options say otherwise) and, for rows
without headers, hands the Arrow columns themselves to
:meth:`~kafka_client.Producer.produce_batch` (the records are encoded from the arrays'
buffers: no Python object per row); rows with headers go through
:meth:`~kafka_client.Producer.produce` one by one. Every message has a delivery callback
that counts failures; the task flushes before it reports success and fails if any message
was not delivered.

A Python worker runs many tasks one after the other (Spark reuses its workers), so the
producer of a task that succeeded stays open, flushed, for the worker's next task with the
same options, as Spark's own Kafka connector caches its producers: the next task skips the
connections, the metadata and the producer id. A task that fails closes its producer.

Columns (others are ignored): ``value`` (binary or string, required), ``key`` (binary or
string), ``topic`` (string; the ``topic`` option overrides it), ``partition`` (int; null or
absent lets the partitioner choose), ``headers`` (array<struct<key string, value
binary>>).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, StringType, StructType)

from kafka_client import KafkaError, KafkaException, Producer

from .options import KafkaOptionError, WriteOptions

__all__ = ["KafkaBatchWriter", "KafkaStreamWriter", "KafkaWriteError", "WriteCommit",
           "WriteLayout", "check_write_schema", "write_batches"]

#: Rows per produce_batch() call: well under queue.buffering.max.messages (100,000).
CHUNK_ROWS = 10_000
#: Idle producers a Python worker keeps (one per distinct set of options).
POOL_SIZE = 4


class KafkaWriteError(RuntimeError):
    """Messages a write task produced were not all delivered. ``error`` is the Kafka
    error reported for one of them, when one was."""

    def __init__(self, message: str, error: Optional[KafkaError] = None) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True)
class WriteLayout:
    """Which optional columns the DataFrame has (checked on the driver)."""

    key: bool
    topic: bool
    partition: bool
    headers: bool


@dataclass
class WriteCommit(WriterCommitMessage):
    """What one task wrote: messages delivered."""

    messages: int


_BYTES_TYPES = (BinaryType, StringType)


def check_write_schema(schema: StructType, opts: WriteOptions) -> WriteLayout:
    """The layout of a DataFrame to write, or a :class:`KafkaOptionError` naming the
    column that is missing or of the wrong type."""
    fields = {f.name: f.dataType for f in schema.fields}

    def check(name: str, ok: bool, want: str) -> None:
        if not ok:
            raise KafkaOptionError(f"column {name!r} must be {want}, not "
                                   f"{fields[name].simpleString()}")

    if "value" not in fields:
        raise KafkaOptionError("the DataFrame to write needs a 'value' column (binary or "
                               f"string); it has {', '.join(fields) or 'no columns'}")
    check("value", isinstance(fields["value"], _BYTES_TYPES), "binary or string")
    if "key" in fields:
        check("key", isinstance(fields["key"], _BYTES_TYPES), "binary or string")
    if "topic" in fields:
        check("topic", isinstance(fields["topic"], StringType), "string")
    elif opts.topic is None:
        raise KafkaOptionError("say where to write: give the 'topic' option or a 'topic' "
                               "column")
    if "partition" in fields:
        check("partition", isinstance(fields["partition"], IntegerType), "int")
    if "headers" in fields:
        htype = fields["headers"]
        ok = False
        if isinstance(htype, ArrayType) and isinstance(htype.elementType, StructType):
            inner = {f.name: f.dataType for f in htype.elementType.fields}
            ok = set(inner) == {"key", "value"} and isinstance(inner["key"], StringType) \
                and isinstance(inner["value"], _BYTES_TYPES)
        check("headers", ok, "array<struct<key: string, value: binary>>")
    return WriteLayout(key="key" in fields, topic="topic" in fields,
                       partition="partition" in fields, headers="headers" in fields)


class _PooledProducer:
    """A producer and what a task needs to know of it beyond one task: the topics whose
    metadata it has (a chunk for those is a bulk append at once), and where its error
    callback reports (the list of the task using it)."""

    def __init__(self, conf: Dict[str, Any]) -> None:
        self.errors: List[KafkaError] = []
        self.known_topics: set = set()
        conf = dict(conf)
        conf.update({"error_cb": self._error, "delivery.report.only.error": True})
        self.producer = Producer(conf)

    def _error(self, err: KafkaError) -> None:
        self.errors.append(err)


class _ProducerPool:
    """Open, flushed producers of tasks that succeeded in this Python worker, by options."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._idle: "OrderedDict[Tuple[Tuple[str, str], ...], _PooledProducer]" = OrderedDict()

    @staticmethod
    def _key(conf: Dict[str, Any]) -> Tuple[Tuple[str, str], ...]:
        return tuple(sorted((k, repr(v)) for k, v in conf.items()))

    def take(self, conf: Dict[str, Any]) -> _PooledProducer:
        """An idle producer for ``conf``, or a new one."""
        with self._lock:
            pooled = self._idle.pop(self._key(conf), None)
        if pooled is None:
            return _PooledProducer(conf)
        pooled.errors.clear()
        return pooled

    def give(self, conf: Dict[str, Any], pooled: _PooledProducer) -> None:
        """Keep a flushed producer for the next task; the oldest beyond the size closes."""
        with self._lock:
            self._idle[self._key(conf)] = pooled
            evicted = []
            while len(self._idle) > self._size:
                evicted.append(self._idle.popitem(last=False)[1])
        for old in evicted:
            old.producer.close(0)


_POOL = _ProducerPool(POOL_SIZE)


class _TaskProducer:
    """One task's producer: what it queued, and the delivery errors reported.

    Every message carries the delivery callback, and the producer reports failures only
    (``delivery.report.only.error``: nothing is called for a delivered message). The
    bulk path of :meth:`~kafka_client.Producer.produce_batch` reports each of its
    messages as :meth:`~kafka_client.Producer.produce` does, so every failure is counted
    with its Kafka error."""

    def __init__(self, opts: WriteOptions) -> None:
        self.queued = 0
        self.failed = 0
        self.first_error: Optional[KafkaError] = None
        self._conf = opts.producer_config()
        self._pooled = _POOL.take(self._conf)
        self.errors = self._pooled.errors
        self.producer = self._pooled.producer

    def _reported(self, err: Optional[KafkaError], _msg: Any) -> None:
        if err is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = err

    def batch(self, topic: str, values: Any, keys: Any, partition: int) -> None:
        """Queue ``values`` (and ``keys``; lists or Arrow arrays) for one partition (-1:
        the partitioner's choice), in order."""
        producer = self.producer
        while True:
            try:
                producer.produce_batch(topic, values, keys, partition,
                                       on_delivery=self._reported)
                break
            except BufferError:   # all or none were queued: the call can be repeated
                producer.poll(0.05)
            except KafkaException as exc:
                err = exc.args[0]
                raise KafkaWriteError(f"could not produce: {err.name()}: {err.str()}",
                                      err) from None
        self.queued += len(values)
        known = self._pooled.known_topics
        if topic not in known:
            # The first chunk for a topic waits for its metadata; flushing it makes the
            # next chunks bulk appends at once, and a topic or partition that cannot be
            # written fails the task here, at its first chunk.
            producer.flush()
            self.check()
            known.add(topic)
        producer.poll(0)
        self.check()

    def one(self, topic: str, value: Any, key: Any, partition: int, headers: Any) -> None:
        """Queue one message."""
        producer = self.producer
        while True:
            try:
                producer.produce(topic, value, key, partition, on_delivery=self._reported,
                                 headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        self.queued += 1

    def check(self) -> None:
        """Raise for the delivery errors reported so far."""
        err = self.first_error
        if err is not None:
            known = "; ".join(f"{e.name()}: {e.str()}" for e in self.errors[-3:])
            raise KafkaWriteError(
                f"delivery failed: {err.name()}: {err.str()} ({self.failed} of "
                f"{self.queued} messages not delivered"
                + (f"; client errors: {known})" if known else ")"), err)

    def finish(self) -> int:
        """Flush and return the number delivered (the producer goes back to the pool);
        raise if any was not."""
        try:
            self.producer.flush()
            self.check()
        except BaseException:
            self.abandon()
            raise
        _POOL.give(self._conf, self._pooled)
        return self.queued

    def abandon(self) -> None:
        """The task failed: drop what is not sent yet (Spark runs the task again) and
        close the producer."""
        self.producer.purge()
        self.producer.close(1)


def _as_list(column: Any) -> List[Any]:
    """Python values of a key or value column: bytes (strings as their UTF-8 bytes, which
    is what Arrow holds: the cast copies nothing) or None."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()


def _write_batch(out: _TaskProducer, batch: Any, layout: WriteLayout,
                 topic_option: Optional[str]) -> None:
    n = batch.num_rows
    if not n:
        return
    names = batch.schema.names
    if topic_option is not None:
        topics: List[Any] = [topic_option]
        topic_col = None
    else:
        topic_col = batch.column(names.index("topic"))
        if topic_col.null_count:
            raise KafkaOptionError("a row to write has a null 'topic' (give the 'topic' "
                                   "option, or a topic in every row)")
        topics = pc.unique(topic_col).to_pylist()
    headers_col = batch.column(names.index("headers")) if layout.headers else None
    if headers_col is not None and headers_col.null_count == n:
        headers_col = None
    for topic in topics:
        rows = batch if topic_col is None or len(topics) == 1 else \
            batch.filter(pc.equal(topic_col, topic))
        if headers_col is not None:
            _write_rows(out, rows, topic, layout)
            continue
        # Bulk: one produce_batch() per partition (or one for the partitioner to place).
        if not layout.partition:
            groups = [(-1, rows)]
        else:
            col = rows.column(names.index("partition"))
            found = pc.unique(col).to_pylist()
            _check_partitions(found)
            groups = [(p, rows.filter(pc.equal(col, p)) if p is not None else
                       rows.filter(pc.is_null(col)))
                      for p in found]
            if len(groups) == 1:
                groups = [(groups[0][0], rows)]
        for part, sub in groups:
            values = sub.column(names.index("value"))
            keys = sub.column(names.index("key")) if layout.key else None
            if keys is not None and keys.null_count == len(keys):
                keys = None
            for start in range(0, sub.num_rows, CHUNK_ROWS):
                out.batch(topic, values.slice(start, CHUNK_ROWS),
                          None if keys is None else keys.slice(start, CHUNK_ROWS),
                          -1 if part is None else part)


def _write_rows(out: _TaskProducer, rows: Any, topic: str, layout: WriteLayout) -> None:
    names = rows.schema.names
    values = _as_list(rows.column(names.index("value")))
    keys = _as_list(rows.column(names.index("key"))) if layout.key else None
    parts = _as_list(rows.column(names.index("partition"))) if layout.partition else None
    headers = _as_list(rows.column(names.index("headers")))
    if parts is not None:
        _check_partitions(parts)
    for i, value in enumerate(values):
        hdrs = headers[i]
        if hdrs is not None and None in hdrs:
            raise KafkaOptionError("a row to write has a null element in its 'headers' "
                                   "array (each must be a struct of key and value)")
        if hdrs is not None and any(h["key"] is None for h in hdrs):
            # produce() would send it as "None" (confluent-kafka's str(key)); Kafka's
            # RecordHeader refuses a null key, and Spark's sink fails the task with it.
            raise KafkaOptionError("a row to write has a header with a null key")
        out.one(topic, value, None if keys is None else keys[i],
                -1 if parts is None or parts[i] is None else parts[i],
                None if hdrs is None else [(h["key"], h["value"]) for h in hdrs])


def _check_partitions(partitions: List[Any]) -> None:
    """A negative 'partition' is refused (the Java client's ProducerRecord refuses it);
    -1 meant "the partitioner chooses", which only a null partition does."""
    bad = next((p for p in partitions if p is not None and p < 0), None)
    if bad is not None:
        raise KafkaOptionError(f"a row to write has the negative partition {bad} (give a "
                               f"partition >= 0, or null for the partitioner to choose)")


def write_batches(batches: Iterator[Any], opts: WriteOptions, layout: WriteLayout) -> WriteCommit:
    """Produce every row of ``batches`` with one producer; returns the count delivered."""
    out = _TaskProducer(opts)
    try:
        for batch in batches:
            if isinstance(batch, pa.Table):
                for b in batch.to_batches():
                    _write_batch(out, b, layout, opts.topic)
            else:
                _write_batch(out, batch, layout, opts.topic)
    except BaseException:
        out.abandon()
        raise
    return WriteCommit(out.finish())


class KafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("kafka_native")``: every task produces its rows (at least once:
    a task that Spark retries writes its rows again)."""

    def __init__(self, opts: WriteOptions, layout: WriteLayout) -> None:
        self.opts = opts
        self.layout = layout

    def write(self, iterator: Iterator[Any]) -> WriteCommit:
        return write_batches(iterator, self.opts, self.layout)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("kafka_native")``: each micro-batch as a batch write."""

    def __init__(self, opts: WriteOptions, layout: WriteLayout) -> None:
        self.opts = opts
        self.layout = layout

    def write(self, iterator: Iterator[Any]) -> WriteCommit:
        return write_batches(iterator, self.opts, self.layout)

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        pass

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        pass

