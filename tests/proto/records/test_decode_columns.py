"""RecordBatch.decode_columns into a ColumnBuilder: Arrow-layout buffers, no object per
record. The buffers are checked directly (layout) and through pyarrow when present."""
from __future__ import annotations

import mmap
import struct
import tracemalloc

import pytest

from kafka_proto.errors import KafkaProtocolError
from kafka_proto.records import ColumnBuilder, RecordBatchBuilder, TimestampType, read_batches

RECORDS = [
    (b"v0", b"k0", 1000, None),
    (None, None, 1001, [("a", b"1"), ("a", None), ("\u00e9", b"")]),
    (b"", b"", 1002, []),
    (b"x" * 300, b"k3", 1003, [("z", b"y" * 40)]),
]


def batch_of(records, base_offset=100, **kw):
    b = RecordBatchBuilder(**kw)
    for value, key, ts, headers in records:
        b.append(value, key=key, timestamp=ts, headers=headers)
    return next(iter(read_batches(b.build(base_offset))))


def rows(cols):
    """Decode finish() buffers back into Python rows (independent of pyarrow)."""
    n = cols["rows"]

    def i64(b):
        return list(struct.unpack(f"<{n}q", b))

    def offs(b, count):
        return list(struct.unpack(f"<{count + 1}i", b))

    def valid(bitmap, i, nulls):
        return not nulls or bool(bitmap[i >> 3] >> (i & 7) & 1)

    def binary(col, count):
        bitmap, ob, data, nulls = col
        o = offs(ob, count)
        return [data[o[i]:o[i + 1]] if valid(bitmap, i, nulls) else None for i in range(count)]

    t_offs, t_data = cols["topic"]
    to = offs(t_offs, n)
    topics = [t_data[to[i]:to[i + 1]].decode() for i in range(n)]
    h_valid, h_offs, h_nulls, nh, (hk_offs, hk_data), hv = cols["headers"]
    hko = offs(hk_offs, nh)
    hkeys = [hk_data[hko[i]:hko[i + 1]].decode() for i in range(nh)]
    hvals = binary(hv, nh)
    ho = offs(h_offs, n)
    headers = [list(zip(hkeys[ho[i]:ho[i + 1]], hvals[ho[i]:ho[i + 1]]))
               if valid(h_valid, i, h_nulls) else None for i in range(n)]
    return list(zip(topics, struct.unpack(f"<{n}i", cols["partition"]), i64(cols["offset"]),
                    i64(cols["timestamp"]), list(cols["timestamp_type"]),
                    binary(cols["key"], n), binary(cols["value"], n), headers))


def test_rows_match_the_records():
    cols = ColumnBuilder(1, 2)
    cols.set_source("topic-a", 4)
    assert batch_of(RECORDS).decode_columns(cols) == 4
    assert len(cols) == 4 and cols.last_offset == 103
    got = rows(cols.finish())
    want = [("topic-a", 4, 100 + i, ts, 1, key, value, headers or None)
            for i, (value, key, ts, headers) in enumerate(RECORDS)]
    assert got == want
    assert len(cols) == 0  # finish() starts over


def test_start_limit_and_sources_across_batches():
    cols = ColumnBuilder(1, 2)
    cols.set_source("a", 0)
    assert batch_of(RECORDS).decode_columns(cols, 101, 2) == 2
    assert cols.last_offset == 102
    cols.set_source("b", 7)
    b2 = batch_of(RECORDS[:2], base_offset=0, timestamp_type=TimestampType.LOG_APPEND_TIME)
    assert b2.decode_columns(cols) == 2
    cols.append_row(5, 6, 1, None, b"legacy", [("h", None)])
    got = rows(cols.finish())
    assert [(r[0], r[1], r[2]) for r in got] == [("a", 0, 101), ("a", 0, 102), ("b", 7, 0),
                                                  ("b", 7, 1), ("b", 7, 5)]
    assert [r[4] for r in got] == [1, 1, 2, 2, 1]  # log-append time uses the second code
    assert got[-1][5:] == (None, b"legacy", [("h", None)])


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed(codec):
    cols = ColumnBuilder(1, 2)
    cols.set_source("t", 0)
    assert batch_of(RECORDS * 30, compression=codec).decode_columns(cols) == 120
    assert [r[6] for r in rows(cols.finish())] == [r[0] for r in RECORDS * 30]


def test_invalid_utf8_header_key_is_replaced():
    b = RecordBatchBuilder()
    b.append(b"v", headers=[("ab", b"1")])
    data = bytearray(b.build(0))
    i = data.index(b"ab\x021")  # key, zigzag length 1, value
    data[i] = 0xFF  # not UTF-8
    batch = next(iter(read_batches(bytes(data), check_crc=False)))
    cols = ColumnBuilder(1, 2)
    cols.set_source("t", 0)
    batch.decode_columns(cols)
    assert rows(cols.finish())[0][7] == [("\ufffdb", b"1")]
    assert next(iter(batch)).headers == [("\ufffdb", b"1")]  # as the object path does


def test_malformed_header_adds_no_half_row():
    b = RecordBatchBuilder()
    b.append(b"good")
    b.append(b"bad", headers=[("k", b"vv")])
    data = bytearray(b.build(0))
    i = data.index(b"k\x04vv")  # key, zigzag length 2, value
    data[i + 1] = 0x40  # header value length 32: past the record
    batch = next(iter(read_batches(bytes(data), check_crc=False)))
    cols = ColumnBuilder(1, 2)
    cols.set_source("t", 0)
    with pytest.raises(KafkaProtocolError):
        batch.decode_columns(cols)
    got = rows(cols.finish())
    assert [r[6] for r in got] == [b"good"]


def test_finish_hands_the_buffers_over_without_keeping_or_copying_them():
    """finish() gave copies of the column buffers and kept the buffers, grown to the
    largest batch ever read, for the builder's life: a batch of 12 MB of values held
    28 MB at its peak (16 MB of buffer + the copy), and 16 MB stayed after it was gone.
    Now the buffers themselves are handed over, shrunk to their length."""
    big = batch_of([(b"v" * (1 << 20), None, 0, None)] * 12)
    small = batch_of(RECORDS)
    cols = ColumnBuilder(1, 2)
    cols.set_source("t", 0)
    tracemalloc.start()
    try:
        big.decode_columns(cols)
        out = cols.finish()
        _now, peak = tracemalloc.get_traced_memory()
        assert len(out["value"][2]) == 12 << 20
        assert peak < 18 << 20, peak          # the 16 MB buffer, no copy beside it
        del out
        small.decode_columns(cols)
        assert len(rows(cols.finish())) == len(RECORDS)
        kept, _peak = tracemalloc.get_traced_memory()
        assert kept < 6 << 20, kept           # not the 16 MB of the big batch
    finally:
        tracemalloc.stop()


def test_pyarrow_view_of_the_buffers():
    pa = pytest.importorskip("pyarrow")
    from kafka_client.consumer.arrow import schema, to_record_batch

    cols = ColumnBuilder(1, 2)
    cols.set_source("topic-a", 4)
    batch_of(RECORDS).decode_columns(cols)
    rb = to_record_batch(cols.finish())
    rb.validate(full=True)
    assert rb.schema == schema()
    assert rb.to_pylist()[1] == {
        "topic": "topic-a", "partition": 4, "offset": 101, "timestamp": 1001,
        "timestamp_type": 1, "key": None, "value": None,
        "headers": [{"key": "a", "value": b"1"}, {"key": "a", "value": None},
                    {"key": "\u00e9", "value": b""}]}
    assert rb.column("headers").null_count == 2 and isinstance(rb, pa.RecordBatch)


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return 0


def _zeros(size: int) -> memoryview:
    """``size`` zero bytes that cost no memory until written: an anonymous mapping."""
    return memoryview(mmap.mmap(-1, size, prot=mmap.PROT_READ))


def test_only_headers_get_the_3x_margin_a_large_value_fits(run_child):
    """A column's 2 GiB check: header bytes may grow 3x (a header key's invalid UTF-8
    replaced; the check before the headers are read cannot tell keys from values), a
    key's and a value's cannot. A 700 MiB value used to be refused (3x applied to the
    whole record), so consume_arrow() refused records of 683 MiB-2 GiB."""
    cols = ColumnBuilder(1, 2)
    cols.set_source("t", 0)
    with pytest.raises(OverflowError, match="2 GiB"):   # 3 x 700 MiB of headers
        cols.append_row(0, 0, 0, None, None, [("k", _zeros(700 << 20))])
    assert cols.finish()["rows"] == 0     # no half row
    if _available_memory() < 4 << 30:
        pytest.skip("needs 4 GiB of memory available for a 700 MiB column")
    # In a child: the worker's peak RSS is what the fuzz smoke tests check.
    child = run_child("""
        import mmap, struct
        from kafka_proto.records import ColumnBuilder
        cols = ColumnBuilder(1, 2)
        cols.set_source("t", 0)
        big = memoryview(mmap.mmap(-1, 700 << 20, prot=mmap.PROT_READ))
        cols.append_row(5, 0, 0, b"k", big)
        cols.append_row(6, 0, 0, b"k", b"small")
        done = cols.finish()
        _bitmap, value_offsets, value_data, _nulls = done["value"]
        print(done["rows"], struct.unpack("<3i", value_offsets), len(value_data))
        """, timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["2", "(0,", f"{700 << 20},", f"{(700 << 20) + 5})",
                                    f"{(700 << 20) + 5}"]
