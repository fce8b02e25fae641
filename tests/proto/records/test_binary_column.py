"""BinaryColumn: Arrow's variable-size binary layout read in place (rows, nulls, slices,
wide and unaligned offsets, every check of the constructor), and
RecordBatchBuilder.append_many encoding records from it: the same bytes as from lists."""
from __future__ import annotations

import array
import ctypes
import gc
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_proto.records import BinaryColumn, Compression, RecordBatchBuilder, read_batches

try:
    import kafka_proto.compression  # noqa: F401

    CODECS = list(Compression)
except ImportError:  # pragma: no cover - compression.py not there yet
    CODECS = [Compression.NONE]

TS = 1_700_000_000_000


def offsets32(*positions):
    return struct.pack(f"={len(positions)}i", *positions)


def offsets64(*positions):
    return struct.pack(f"={len(positions)}q", *positions)


def bitmap(valid):
    """Arrow validity bits, least significant bit first: 1 for a row that is not null."""
    out = bytearray((len(valid) + 7) // 8)
    for i, ok in enumerate(valid):
        if ok:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def unaligned(buf, shift=1):
    """``buf`` as a memoryview starting ``shift`` bytes into a bytearray (an odd address
    for shift 1: int32/int64 reads there are unaligned)."""
    ba = bytearray(shift) + bytearray(buf)
    view = memoryview(ba)[shift:]
    if len(buf):
        assert ctypes.addressof(ctypes.c_char.from_buffer(view)) % 2 == shift % 2
    return view


def column(items, wide=False, pad_rows=0, shift=0, nulls_have_bytes=False):
    """``items`` (bytes or None) as a BinaryColumn built by hand: ``pad_rows`` junk rows
    before them (reached through ``offset``), offsets ``shift`` bytes into their buffer,
    null rows spanning bytes of data when ``nulls_have_bytes`` (Arrow allows it)."""
    rows = [b"pad%d" % i for i in range(pad_rows)] + list(items)
    data = bytearray(b"<")      # the first row need not start at 0
    positions = [len(data)]
    for r in rows:
        if r is not None:
            data += r
        elif nulls_have_bytes:
            data += b"NULL"
        positions.append(len(data))
    offsets = (offsets64 if wide else offsets32)(*positions)
    validity = bitmap([r is not None for r in rows]) if None in rows else None
    if shift:
        offsets = unaligned(offsets, shift)
        data = unaligned(data, shift)
        validity = None if validity is None else unaligned(validity, shift)
    return BinaryColumn(len(items), offsets, bytes(data) if not shift else data,
                        validity, pad_rows, wide)


def records(data):
    return [(r.key, r.value, r.timestamp) for b in read_batches(data) for r in b]


# -- rows -----------------------------------------------------------------------------
def test_rows_from_hand_built_buffers():
    data = b"helloworld!"
    col = BinaryColumn(4, offsets32(0, 5, 5, 10, 11), data, bitmap([1, 0, 1, 1]))
    assert len(col) == 4
    assert [col[0], col[1], col[2], col[3]] == [b"hello", None, b"world", b"!"]
    assert [col[-1], col[-2], col[-3], col[-4]] == [b"!", b"world", None, b"hello"]
    assert col.to_list() == [b"hello", None, b"world", b"!"]
    assert type(col[0]) is bytes
    assert col.null_count == 1
    assert col.byte_size == 11
    assert col.max_row_size() == 5
    assert repr(col) == "<BinaryColumn of 4 rows>"


def test_an_empty_row_is_not_a_null():
    col = BinaryColumn(3, offsets32(0, 0, 0, 2), b"ab")
    assert col.to_list() == [b"", b"", b"ab"]
    assert col.null_count == 0 and col.byte_size == 2


def test_a_null_row_that_spans_bytes_counts_as_nothing():
    # Arrow lets a null slot cover bytes of data: they are not the row's.
    col = BinaryColumn(3, offsets32(0, 3, 6, 7), b"abcdefg", bitmap([0, 1, 0]))
    assert col.to_list() == [None, b"def", None]
    assert col.null_count == 2
    assert col.byte_size == 3
    assert col.max_row_size() == 3
    keys = BinaryColumn(3, offsets32(0, 1, 9, 10), b"k" * 10, bitmap([1, 0, 1]))
    assert col.max_row_size(keys) == 3           # 0 + 1, 3 + 0 (null key), 0 + 1


def test_max_row_size_adds_each_rows_key_and_value():
    values = column([b"x" * 10, b"x" * 3, None, b"x" * 7])
    keys = column([b"k", b"k" * 9, b"k" * 30, None])
    assert values.max_row_size() == 10
    assert values.max_row_size(keys) == 30       # the null value with its 30-byte key
    assert keys.max_row_size(values) == 30
    assert values.max_row_size(None) == 10


def test_max_row_size_refuses_keys_of_another_length():
    values = column([b"a", b"b", b"c"])
    with pytest.raises(ValueError) as info:
        values.max_row_size(column([b"k", b"k"]))
    assert str(info.value) == "keys and values differ in length (2 keys, 3 values)"
    with pytest.raises(TypeError):
        values.max_row_size([b"k", b"k", b"k"])


@pytest.mark.parametrize("index", [3, 4, 100, -4, -100])
def test_an_index_out_of_range_raises_index_error(index):
    col = column([b"a", None, b"c"])
    with pytest.raises(IndexError) as info:
        col[index]
    assert str(info.value) == f"row {index} of a column of 3"


def test_the_offset_argument_skips_rows_of_the_buffers():
    # Rows 0..5 in the buffers; the column is rows 2..4, validity bits read from bit 2.
    data = b"r0r1r2r3r4r5"
    offs = offsets32(*range(0, 13, 2))
    col = BinaryColumn(3, offs, data, bitmap([1, 1, 1, 0, 1, 1]), offset=2)
    assert col.to_list() == [b"r2", None, b"r4"]
    assert col.null_count == 1 and col.byte_size == 4
    # The offset crosses a validity byte: rows 7..10 of 12.
    valid = [1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1]
    items = [None if not v else b"%d" % i for i, v in enumerate(valid)]
    col = column(items)
    assert col[7:11].to_list() == [None, b"8", None, b"10"]
    assert column(items[7:], pad_rows=7).to_list() == items[7:]


# -- slices ---------------------------------------------------------------------------
def test_slices_are_views_and_slices_of_slices_too():
    items = [b"a", None, b"ccc", b"", b"eeeee", None, b"g" * 9, b"h"]
    col = column(items)
    s = col[1:7]
    assert type(s) is BinaryColumn and len(s) == 6
    assert s.to_list() == items[1:7]
    assert s[0] is None and s[-1] == b"g" * 9
    ss = s[2:-1]
    assert ss.to_list() == items[3:6]
    sss = ss[1:]
    assert sss.to_list() == items[4:6]
    assert (sss[0], sss[-1]) == (b"eeeee", None)
    assert sss.null_count == 1 and sss.byte_size == 5 and sss.max_row_size() == 5
    assert col[-3:].to_list() == items[-3:]
    assert col[:-5].to_list() == items[:-5]
    assert col[:].to_list() == items
    with pytest.raises(IndexError):
        sss[2]


@pytest.mark.parametrize("index", [slice(5, 2), slice(3, 3), slice(10, 20), slice(-1, -3),
                                   slice(100, None)])
def test_an_empty_or_out_of_range_slice_is_an_empty_column(index):
    items = [b"a", b"b", None, b"d"]
    col = column(items)
    assert col[index].to_list() == items[index] == []
    assert len(col[index]) == 0 and col[index].byte_size == 0


@pytest.mark.parametrize("step", [2, -1, 0])
def test_a_slice_with_a_step_is_refused(step):
    col = column([b"a", b"b", b"c"])
    with pytest.raises(ValueError) as info:
        col[::step]
    assert str(info.value) == ("slice step cannot be zero" if step == 0
                               else "a BinaryColumn slice must have step 1")


def test_a_view_keeps_the_buffers_alive():
    offs, data = bytearray(offsets32(0, 3, 6)), bytearray(b"abcdef")
    col = BinaryColumn(2, offs, data, bytes([0b10]))
    view = col[1:]
    del col, offs, data
    gc.collect()
    assert view.to_list() == [b"def"]


def test_the_buffers_are_read_in_place_not_copied():
    data = bytearray(b"abcdef")
    col = BinaryColumn(2, offsets32(0, 3, 6), data)
    data[0:3] = b"XYZ"                    # the caller must not, but it shows no copy
    assert col[0] == b"XYZ"


# -- wide, unaligned, other buffer kinds ------------------------------------------------
def test_wide_offsets_are_int64():
    data = b"onetwothree"
    col = BinaryColumn(3, offsets64(0, 3, 6, 11), data, wide=True)
    assert col.to_list() == [b"one", b"two", b"three"]
    assert col[1:].to_list() == [b"two", b"three"]
    # The same bytes read as int32 positions: 0, 0, 3, 0 -> decreasing.
    with pytest.raises(ValueError):
        BinaryColumn(3, offsets64(0, 3, 6, 11), data)


@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
@pytest.mark.parametrize("shift", [1, 3])
def test_unaligned_buffers(wide, shift):
    items = [b"first", None, b"", b"fourth row", None, b"x" * 40]
    col = column(items, wide=wide, pad_rows=3, shift=shift)
    assert col.to_list() == items
    assert col[1:5].to_list() == items[1:5]
    assert col.null_count == 2 and col.byte_size == 55
    b1, b2 = RecordBatchBuilder(), RecordBatchBuilder()
    b1.append_many(col, None, TS)
    b2.append_many(items, None, TS)
    assert b1.build() == b2.build()


def test_buffers_of_any_item_format():
    offs = array.array("i", [0, 2, 4])
    col = BinaryColumn(2, offs, memoryview(b"abcd"), bytearray([0b11]))
    assert col.to_list() == [b"ab", b"cd"]
    col = BinaryColumn(2, memoryview(array.array("q", [0, 2, 4])), b"abcd", wide=True)
    assert col.to_list() == [b"ab", b"cd"]


def test_an_empty_column():
    for col in (BinaryColumn(0, offsets32(0), b""), BinaryColumn(0, offsets32(0), b"", b""),
                BinaryColumn(0, offsets64(7), b"x" * 7, None, 0, True),
                BinaryColumn(0, offsets32(0, 1), b"a", None, 1),
                column([])):
        assert len(col) == 0 and col.to_list() == []
        assert col.null_count == 0 and col.byte_size == 0 and col.max_row_size() == 0
        assert col[:].to_list() == []
        with pytest.raises(IndexError):
            col[0]
        b1, b2 = RecordBatchBuilder(), RecordBatchBuilder()
        b1.append_many(col, None, TS)
        b1.append_many(col, col, TS)
        b2.append_many([], None, TS)
        assert b1.build() == b2.build()
        assert records(b1.build()) == []


# -- every check of the constructor ------------------------------------------------------
@pytest.mark.parametrize("args,message", [
    ((-1, offsets32(0), b""),
     "length and offset must not be negative (length=-1, offset=0)"),
    ((1, offsets32(0, 1), b"a", None, -2),
     "length and offset must not be negative (length=1, offset=-2)"),
    ((0, b"", b""), "offsets holds 0 bytes, 4 needed for rows 0..0"),
    ((2, offsets32(0, 1), b"ab"), "offsets holds 8 bytes, 12 needed for rows 0..2"),
    ((2, offsets32(0, 1, 2), b"ab", None, 1),
     "offsets holds 12 bytes, 16 needed for rows 1..3"),
    ((2, offsets32(0, 1, 2), b"ab", None, 0, True),
     "offsets holds 12 bytes, 24 needed for rows 0..2"),
    ((9, offsets32(*range(10)), b"x" * 9, b"\xff"), "validity holds 1 bytes, 2 needed"),
    ((2, offsets32(0, 1, 2), b"xx", b""), "validity holds 0 bytes, 1 needed"),
    ((8, offsets32(*range(10)), b"x" * 9, b"\xff", 1), "validity holds 1 bytes, 2 needed"),
    ((2, offsets32(0, 2, 1), b"ab"),
     "offsets[2] = 1 is outside 2..2: offsets must not decrease nor pass the end of data"),
    ((2, offsets32(0, 1, 5), b"ab"),
     "offsets[2] = 5 is outside 1..2: offsets must not decrease nor pass the end of data"),
    ((1, offsets32(-1, 0), b"ab"), "offsets[0] = -1 is outside data (2 bytes)"),
    ((1, offsets32(3, 3), b"ab"), "offsets[0] = 3 is outside data (2 bytes)"),
    ((1, offsets32(0, 1, 0), b"ab", None, 1),
     "offsets[2] = 0 is outside 1..2: offsets must not decrease nor pass the end of data"),
    ((1, offsets32(0, 9, 1), b"ab", None, 1), "offsets[1] = 9 is outside data (2 bytes)"),
    ((1, offsets64(0, 1 << 32), b"ab", None, 0, True), f"offsets[1] = {1 << 32} is outside "
     "0..2: offsets must not decrease nor pass the end of data"),
    ((1, offsets64(-(1 << 40), 0), b"ab", None, 0, True),
     f"offsets[0] = {-(1 << 40)} is outside data (2 bytes)"),
    ((0, offsets32(1), b""), "offsets[0] = 1 is outside data (0 bytes)"),
])
def test_the_constructor_checks_everything_it_will_read(args, message):
    with pytest.raises(ValueError) as info:
        BinaryColumn(*args)
    assert str(info.value) == message


def test_only_the_rows_of_the_column_are_checked():
    # Rows outside offset..offset+length may hold anything.
    col = BinaryColumn(1, offsets32(99, 0, 2, -5), b"ab", None, 1)
    assert col.to_list() == [b"ab"]


# -- from pyarrow arrays' buffers ---------------------------------------------------------
def _from_arrow(a):
    pa = pytest.importorskip("pyarrow")
    wide = pa.types.is_large_binary(a.type) or pa.types.is_large_string(a.type)
    validity, offsets, data = a.buffers()
    return BinaryColumn(len(a), offsets, b"" if data is None else data,
                        validity if a.null_count else None, a.offset, wide)


ARROW_TYPES = ["binary", "string", "large_binary", "large_string"]


@pytest.mark.parametrize("type_name", ARROW_TYPES)
def test_pyarrow_arrays_buffers(type_name):
    pa = pytest.importorskip("pyarrow")
    py = ["a", None, "", "\u00e9t\u00e9", "x" * 300, None, "last"] * 3
    binary = type_name.endswith("binary")
    items = [None if s is None else s.encode() for s in py]
    a = pa.array(items if binary else py, getattr(pa, type_name)())
    col = _from_arrow(a)
    assert col.to_list() == items
    assert col.null_count == a.null_count == 6
    assert col.byte_size == sum(len(x) for x in items if x is not None)
    # Sliced arrays: the same buffers with array.offset, across validity bytes.
    for start, stop in [(1, 5), (3, 20), (9, 9), (13, 21), (0, 1)]:
        s = a[start:stop]
        assert s.offset == start
        assert _from_arrow(s).to_list() == items[start:stop]
    # Chunks of a ChunkedArray, each its own column.
    chunked = pa.chunked_array([a[:4], a[4:]])
    assert [x for ch in chunked.chunks for x in _from_arrow(ch).to_list()] == items


def test_pyarrow_arrays_without_nulls_or_data():
    pa = pytest.importorskip("pyarrow")
    for items in ([None, None, None], [b"", b""], []):
        a = pa.array(items, pa.binary())
        assert _from_arrow(a).to_list() == items
    # An array over buffers of our own: offsets not starting at 0.
    data = pa.py_buffer(b"__abcdef")
    offs = pa.py_buffer(offsets32(2, 5, 8))
    a = pa.Array.from_buffers(pa.binary(), 2, [None, offs, data])
    assert a.to_pylist() == _from_arrow(a).to_list() == [b"abc", b"def"]


# -- append_many from a column ----------------------------------------------------------
ITEMS = [b"v0", None, b"", b"value three", b"x" * 500, None, b"\x00\xff" * 70]
KEYS = [b"k0", b"k1", None, b"", None, b"key five", b"k" * 200]


@pytest.mark.parametrize("with_keys", [False, True], ids=["no-keys", "keys"])
@pytest.mark.parametrize("codec", CODECS, ids=[c.name for c in CODECS])
def test_append_many_from_a_column_encodes_as_from_lists(codec, with_keys):
    kcol = column(KEYS, wide=True, pad_rows=2) if with_keys else None
    klist = KEYS if with_keys else None
    b1 = RecordBatchBuilder(compression=codec)
    b2 = RecordBatchBuilder(compression=codec)
    b1.append_many(column(ITEMS, pad_rows=5, nulls_have_bytes=True), kcol, TS)
    b2.append_many(ITEMS, klist, TS)
    assert b1.size_in_bytes == b2.size_in_bytes
    got, want = b1.build(), b2.build()
    if codec == Compression.NONE:
        assert got == want
    assert records(got) == records(want) == [
        (k, v, TS) for k, v in zip(klist or [None] * len(ITEMS), ITEMS)]


def test_append_many_from_columns_between_single_appends():
    b1, b2 = RecordBatchBuilder(), RecordBatchBuilder()
    col, kcol = column(ITEMS), column(KEYS)
    for b, values, keys in ((b1, col, kcol), (b2, ITEMS, KEYS)):
        b.append(b"first", b"fk", TS - 5)
        b.append_many(values[2:5], keys[2:5], TS)
        b.append(b"middle", None, TS + 1)
        b.append_many(values, None, TS + 2)
        b.append_many(values[5:], keys[5:], TS + 3)
    assert b1.build(1000) == b2.build(1000)
    batch, = read_batches(b1.build(1000))
    assert batch.base_offset == 1000 and batch.records_count == 2 + 3 + len(ITEMS) + 2
    assert [r.offset for r in batch] == list(range(1000, 1000 + batch.records_count))
    assert [(r.key, r.value) for r in batch][1:4] == list(zip(KEYS[2:5], ITEMS[2:5]))


def test_append_many_refuses_keys_that_do_not_match_a_column():
    b = RecordBatchBuilder()
    col = column([b"a", b"b"])
    with pytest.raises(TypeError) as info:
        b.append_many(col, [b"k", b"l"], TS)
    assert str(info.value) == ("with a BinaryColumn of values, keys must be a BinaryColumn "
                               "or None, not list")
    with pytest.raises(ValueError) as info:
        b.append_many(col, column([b"k"]), TS)
    assert str(info.value) == "keys and values differ in length"
    with pytest.raises(ValueError):
        b.append_many(col, column([b"k", b"l", b"m"]), TS)
    assert b.size_in_bytes == RecordBatchBuilder().size_in_bytes
    assert records(b.build()) == []


def test_append_many_of_a_pyarrow_arrays_buffers():
    pa = pytest.importorskip("pyarrow")
    values = pa.array(["v%d" % i if i % 5 else None for i in range(1000)], pa.string())
    keys = pa.array([b"k%d" % (i % 13) for i in range(1000)], pa.large_binary())[100:900]
    b1, b2 = RecordBatchBuilder(), RecordBatchBuilder()
    b1.append_many(_from_arrow(values[200:1000]), _from_arrow(keys), TS)
    vlist = [None if v is None else v.encode() for v in values[200:1000].to_pylist()]
    b2.append_many(vlist, keys.to_pylist(), TS)
    assert b1.build() == b2.build()
    got = records(b1.build())
    assert len(got) == 800 and got[0] == (b"k9", None, TS) and got[1] == (b"k10", b"v201", TS)


# -- property: any rows, any layout -----------------------------------------------------
rows_st = st.lists(st.one_of(st.none(), st.binary(max_size=40),
                             st.binary(min_size=100, max_size=300)), max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), values=rows_st, wide=st.booleans(), kwide=st.booleans(),
       pad=st.integers(0, 17), shift=st.integers(0, 7), with_keys=st.booleans(),
       nulls_have_bytes=st.booleans())
def test_columns_encode_and_read_as_lists(data, values, wide, kwide, pad, shift, with_keys,
                                          nulls_have_bytes):
    n = len(values)
    keys = data.draw(st.lists(st.one_of(st.none(), st.binary(max_size=30)),
                              min_size=n, max_size=n)) if with_keys else None
    col = column(values, wide, pad, shift, nulls_have_bytes)
    kcol = None if keys is None else column(keys, kwide, pad // 2, (shift + 1) % 8)
    assert len(col) == n and col.to_list() == values
    assert col.null_count == values.count(None)
    assert col.byte_size == sum(len(v) for v in values if v is not None)
    sizes = [len(v or b"") + (len(keys[i] or b"") if keys else 0) for i, v in enumerate(values)]
    assert col.max_row_size(kcol) == max(sizes, default=0)
    start, stop = data.draw(st.integers(0, n)), data.draw(st.integers(0, n))
    assert col[start:stop].to_list() == values[start:stop]
    assert col[start:][:stop].to_list() == values[start:][:stop]
    if n:
        i = data.draw(st.integers(-n, n - 1))
        assert col[i] == values[i]
    b1, b2 = RecordBatchBuilder(), RecordBatchBuilder()
    b1.append_many(col, kcol, TS)
    b2.append_many(values, keys, TS)
    assert b1.size_in_bytes == b2.size_in_bytes
    assert b1.build(7) == b2.build(7)
    assert records(b1.build()) == [(None if keys is None else keys[i], v, TS)
                                   for i, v in enumerate(values)]
