"""What the consumer does with records that do not decode: the records before the bad one
are delivered, then a _BAD_MSG event at its offset; the partition is fetched again from
there (nothing after it is skipped silently). Chunks are fed in as the fetcher would."""
from __future__ import annotations

import pytest

from kafka_client import Consumer, KafkaError, KafkaException, TopicPartition
from kafka_client.consumer.fetcher import Chunk
from kafka_proto.records import RecordBatchBuilder, read_batches


def corrupt_batch():
    """Five records at offsets 10..14; the fourth's value length runs past its record."""
    b = RecordBatchBuilder()
    for i in range(5):
        b.append(b"value-%d" % i)
    data = bytearray(b.build(10))
    i = data.index(b"value-3")
    assert data[i - 1] == 14  # zigzag length 7
    data[i - 1] = 0x40
    return next(iter(read_batches(bytes(data), check_crc=False)))


def feed(consumer, chunk_start=10, batch=None):
    part = consumer._fetcher.parts[("t", 0)]
    batch = corrupt_batch() if batch is None else batch
    with consumer._lock:
        part.fetch_pos = 15
        consumer._deliver(Chunk(part, part.version, [batch], chunk_start, None, batch.size,
                                batch.records_count))
    return part


@pytest.fixture
def consumer():
    c = Consumer({"bootstrap.servers": "127.0.0.1:1", "fetch.error.backoff.ms": 60000})
    c.assign([TopicPartition("t", 0, 10)])
    yield c
    c.close()


def test_messages_then_error_then_refetch_from_the_bad_record(consumer):
    part = feed(consumer)
    got = consumer.consume(10, 1.0)
    assert [m.value() for m in got[:3]] == [b"value-0", b"value-1", b"value-2"]
    err = got[3].error()
    assert err is not None and err.code() == KafkaError._BAD_MSG
    assert got[3].offset() == 13 and "offset 13" in err.str()
    assert len(got) == 4
    # Fetched again from the bad record (after the backoff), not skipped past it.
    assert part.fetch_pos == 13 and part.reset is None
    assert consumer.position([TopicPartition("t", 0)])[0].offset == 13


def test_same_for_arrow_output(consumer):
    pytest.importorskip("pyarrow")
    from kafka_client import KafkaException

    part = feed(consumer)
    rb = consumer.consume_arrow(10, 1.0)
    assert rb.column("value").to_pylist() == [b"value-0", b"value-1", b"value-2"]
    with pytest.raises(KafkaException) as e:
        consumer.consume_arrow(10, 1.0)
    assert e.value.args[0].code() == KafkaError._BAD_MSG
    assert part.fetch_pos == 13
    assert consumer.position([TopicPartition("t", 0)])[0].offset == 13


def test_a_chunk_that_expands_past_the_budget_is_fetched_again_in_parts(consumer,
                                                                          monkeypatch):
    """A response of small compressed batches that expand hugely (hostile, or just very
    compressible) is decoded up to a budget of decompressed bytes; the rest is fetched
    again from the first offset not handed out, so memory does not follow the expansion."""
    from kafka_client.consumer import decode
    from kafka_proto.records import Compression, RecordBatchBuilder

    monkeypatch.setattr(decode, "CHUNK_DECOMPRESSED_BUDGET", 1 << 20)
    batches = []
    for i in range(4):
        b = RecordBatchBuilder(compression=Compression.ZSTD)
        b.append(bytes(600_000))  # about 20 bytes on the wire each
        batches.append(next(iter(read_batches(b.build(10 + i)))))
    assert all(bt.size < 1000 for bt in batches)
    part = consumer._fetcher.parts[("t", 0)]
    with consumer._lock:
        part.fetch_pos = 14
        consumer._deliver(Chunk(part, part.version, batches, 10, None,
                                sum(bt.size for bt in batches), 4))
    got = consumer.consume(10, 1.0)
    # Two batches (1.2 MB) pass the 1 MiB budget: the other two are fetched again.
    assert [m.offset() for m in got] == [10, 11]
    assert all(m.error() is None and len(m.value()) == 600_000 for m in got)
    assert part.fetch_pos == 12 and part.backoff_until == 0.0
    assert consumer.position([TopicPartition("t", 0)])[0].offset == 12


class ColumnsFillUp:
    """A record batch whose Arrow columns fill up (2 GiB in real life) after ``room``
    rows, once: decode_columns adds what fits, then the builder raises OverflowError."""

    def __init__(self, batch, room):
        self._batch = batch
        self.room = room

    def __getattr__(self, name):
        return getattr(self._batch, name)

    def decode_columns(self, cols, start, left):
        if self.room is None:
            return self._batch.decode_columns(cols, start, left)
        added = self._batch.decode_columns(cols, start, min(left, self.room))
        self.room = None
        if added < left:
            raise OverflowError("ColumnBuilder: a column would exceed 2 GiB; finish() first")
        return added


def good_batch():
    b = RecordBatchBuilder()
    for i in range(5):
        b.append(b"value-%d" % i)
    return next(iter(read_batches(b.build(10))))


def test_consume_arrow_returns_what_fits_when_its_columns_are_full(consumer):
    """A call whose values would pass a binary column's 2 GiB returns the rows it has;
    the next call goes on from the next record (it raised OverflowError, every call
    again, and nothing could be read with a large max_records)."""
    pytest.importorskip("pyarrow")
    feed(consumer, batch=ColumnsFillUp(good_batch(), 2))
    first = consumer.consume_arrow(100, 1.0)
    assert first.column("offset").to_pylist() == [10, 11]
    second = consumer.consume_arrow(100, 1.0)
    assert second.column("offset").to_pylist() == [12, 13, 14]
    assert second.column("value").to_pylist() == [b"value-%d" % i for i in (2, 3, 4)]


def test_a_record_too_large_for_any_arrow_column_is_a_clear_error(consumer):
    pytest.importorskip("pyarrow")
    feed(consumer, batch=ColumnsFillUp(good_batch(), 0))
    with pytest.raises(KafkaException) as ei:
        consumer.consume_arrow(100, 1.0)
    err = ei.value.args[0]
    assert err.code() == KafkaError.MSG_SIZE_TOO_LARGE and "consume()" in err.str()
    assert [m.offset() for m in consumer.consume(100, 1.0)] == [10, 11, 12, 13, 14]


def test_close_lets_go_of_what_was_fetched_and_not_handed_out():
    """A closed consumer the application still refers to (an attribute, a worker list)
    held its prefetched messages, up to queued.max.messages.kbytes (librdkafka's destroy
    frees its queues)."""
    import sys

    c = Consumer({"bootstrap.servers": "127.0.0.1:1", "fetch.error.backoff.ms": 60000})
    c.assign([TopicPartition("t", 0, 10)])
    batch = good_batch()
    feed(c, batch=batch)
    assert len(c._queue) == 1
    refs = sys.getrefcount(batch)
    c.close()
    assert len(c._queue) == 0 and c._fetcher.queued_bytes == 0
    assert sys.getrefcount(batch) < refs          # the chunk that held it is gone
