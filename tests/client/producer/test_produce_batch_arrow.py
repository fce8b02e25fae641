"""produce_batch()'s columnar form with pyarrow arrays, without a broker: every accepted
type encoded as its bytes (strings as UTF-8), slices, chunks, nulls, keyed partitioning,
a column mixed with a list, an unknown topic, what is refused before anything is queued,
the producer's counts (as for lists) and the delivery reports (bytes, in order)."""
from __future__ import annotations

import gc
import time

import pytest

from kafka_client import KafkaError, KafkaException, Producer
from kafka_client._cluster.metadata import TopicInfo
from kafka_client.producer._core import DeliveryRange
from kafka_proto.records import BinaryColumn

from tests.client.producer.test_accumulator import make, records_of, with_topic
from tests.client.producer.test_produce_batch import (  # noqa: F401 (producer: a fixture)
    _report,
    producer,
    queued_records,
)

pa = pytest.importorskip("pyarrow")

WORDS = ["alpha", None, "", "\u00e9t\u00e9 \u2603", "x" * 300, None, "omega"]
BYTES = [None if w is None else w.encode() for w in WORDS]


def arrow_types():
    """(id, pyarrow type, python items for pa.array, the bytes expected)."""
    out = [("binary", pa.binary(), BYTES, BYTES),
           ("string", pa.string(), WORDS, BYTES),
           ("large_binary", pa.large_binary(), BYTES, BYTES),
           ("large_string", pa.large_string(), WORDS, BYTES)]
    if hasattr(pa, "binary_view"):
        out += [("binary_view", pa.binary_view(), BYTES, BYTES),
                ("string_view", pa.string_view(), WORDS, BYTES)]
    fixed = [b"abcd", None, b"\x00\x01\x02\x03", b"wxyz"]
    out.append(("fixed_size_binary", pa.binary(4), fixed, fixed))
    return out


TYPES = arrow_types()


def all_records(t):
    """{partition: [(key, value)]} in the ready and open batches of topic state ``t``."""
    out = {}
    for part in t.parts:
        batches = list(part.ready) + ([part.open] if part.open is not None else [])
        for b in batches:
            out.setdefault(part.index, []).extend(records_of(b))
    return out


def nothing_queued(acc, topic="t"):
    t = acc.topics.get(topic)
    assert acc.msg_count == 0 and acc.msg_bytes == 0
    if t is not None:
        assert not t.pending
        assert all(p.open is None and not p.ready for p in t.parts or ())
    return True


# -- what is accepted ---------------------------------------------------------------------
@pytest.mark.parametrize("type_id,typ,items,expected", TYPES, ids=[x[0] for x in TYPES])
def test_each_binary_and_string_type_is_queued_as_its_bytes(type_id, typ, items, expected):
    acc, _, _ = make()
    t = with_topic(acc, partitions=2)
    values = pa.array(items, typ)
    keys = pa.array(items[::-1], typ)
    reports = []
    assert acc.produce_batch("t", values, keys, partition=1,
                             on_delivery=reports.append) == len(items)
    assert all_records(t) == {1: list(zip(expected[::-1], expected))}
    assert acc.msg_count == len(items)
    (d,) = t.parts[1].open.cbs
    assert type(d) is DeliveryRange and d.count == len(items)
    # Encoded from the arrays' buffers: the callback's record holds column views.
    assert type(d.values) is BinaryColumn and type(d.keys) is BinaryColumn
    assert d.values.to_list() == expected and d.keys.to_list() == expected[::-1]


def test_values_alone_go_to_one_partition_in_order():
    acc, _, _ = make()
    t = with_topic(acc, partitions=3)
    values = pa.array([b"v%04d" % i for i in range(500)])
    assert acc.produce_batch("t", values) == 500
    got = all_records(t)
    assert len(got) == 1
    (records,) = got.values()
    assert records == [(None, b"v%04d" % i) for i in range(500)]


def test_sliced_arrays():
    acc, _, _ = make()
    t = with_topic(acc, partitions=1)
    base = pa.array(["r%d" % i if i % 3 else None for i in range(40)], pa.string())
    keys = pa.array([b"k%d" % i for i in range(40)], pa.large_binary())
    values = base[5:29][2:20]          # offset 7, 18 rows; nulls at 9, 12, ...
    assert values.offset == 7
    assert acc.produce_batch("t", values, keys[13:31], partition=0) == 18
    assert records_of(t.parts[0].open) == [
        (b"k%d" % (i + 6), None if i % 3 == 0 else b"r%d" % i) for i in range(7, 25)]
    # A slice without nulls of an array with some, and an empty slice.
    assert acc.produce_batch("t", base[1:3], partition=0) == 2
    assert acc.produce_batch("t", base[10:10], keys[0:0], partition=0) == 0
    assert records_of(t.parts[0].open)[18:] == [(None, b"r1"), (None, b"r2")]
    assert acc.msg_count == 20


def test_chunked_arrays():
    acc, _, _ = make()
    t = with_topic(acc, partitions=1)
    base = pa.array([b"c%d" % i if i % 4 else None for i in range(30)])
    values = pa.chunked_array([base[0:7], base[7:8], base[8:30]])
    keys = pa.chunked_array([pa.array(["k%d" % i for i in range(30)], pa.large_string())])
    assert values.num_chunks == 3 and keys.num_chunks == 1
    assert acc.produce_batch("t", values, keys, partition=0) == 30
    assert acc.produce_batch("t", pa.chunked_array([], pa.binary()), partition=0) == 0
    assert acc.produce_batch("t", pa.chunked_array([base[2:3]]), partition=0) == 1
    assert records_of(t.parts[0].open) == [
        (b"k%d" % i, None if i % 4 == 0 else b"c%d" % i) for i in range(30)] + \
        [(None, b"c2")]


def test_nulls_in_values_and_keys():
    acc, _, _ = make()
    t = with_topic(acc, partitions=1)
    values = pa.array([None, b"v1", None, b"", None], pa.binary())
    keys = pa.array([None, None, "k2", "", "k4"], pa.string())
    assert acc.produce_batch("t", values, keys, partition=0) == 5
    assert records_of(t.parts[0].open) == [
        (None, None), (None, b"v1"), (b"k2", None), (b"", b""), (b"k4", None)]
    assert acc.produce_batch("t", pa.array([None] * 3, pa.large_binary()),
                             pa.array([None] * 3, pa.string()), partition=0) == 3
    assert records_of(t.parts[0].open)[5:] == [(None, None)] * 3


def test_keys_are_partitioned_each_partition_in_order_as_with_lists():
    n = 600
    value_list = [b"v%04d" % i for i in range(n)]
    key_list = ["key-%d" % (i % 37) for i in range(n)]
    outcome = []
    for values, keys in ((value_list, key_list),
                         (pa.array(value_list), pa.array(key_list, pa.string()))):
        acc, _, _ = make()
        t = with_topic(acc, partitions=4)
        assert acc.produce_batch("t", values, keys, partition=-1) == n
        outcome.append(all_records(t))
    listed, arrowed = outcome
    assert arrowed == listed
    assert len(arrowed) > 1                           # spread over partitions
    for part, records in arrowed.items():
        indexes = [int(v[1:]) for _, v in records]
        assert indexes == sorted(indexes)             # the order within each partition
    every = sorted((v, k) for records in arrowed.values() for k, v in records)
    assert every == sorted(zip(value_list, (k.encode() for k in key_list)))
    # A key always goes to the same partition.
    where = {}
    for part, records in arrowed.items():
        for k, _ in records:
            assert where.setdefault(k, part) == part


def test_keys_with_nulls_and_no_partition_keep_every_message_in_order():
    acc, _, _ = make()
    t = with_topic(acc, partitions=3)
    keys = pa.array([None if i % 5 == 0 else "k%d" % (i % 7) for i in range(200)])
    values = pa.array([b"%03d" % i for i in range(200)], pa.large_binary())
    assert acc.produce_batch("t", values, keys) == 200
    got = all_records(t)
    assert sum(len(r) for r in got.values()) == 200 == acc.msg_count
    for records in got.values():
        assert [v for _, v in records] == sorted(v for _, v in records)
        for k, v in records:
            i = int(v)
            assert k == (None if i % 5 == 0 else b"k%d" % (i % 7))


@pytest.mark.parametrize("arrow_side", ["values", "keys"])
def test_an_arrow_column_with_a_list_is_converted_to_a_list(arrow_side):
    acc, _, _ = make()
    t = with_topic(acc, partitions=1)
    value_list = ["v0", b"v1", None, bytearray(b"v3")]
    key_list = [b"k0", "k1", None, memoryview(b"k3")]
    want = [(b"k0", b"v0"), (b"k1", b"v1"), (None, None), (b"k3", b"v3")]
    if arrow_side == "values":
        values, keys = pa.array(["v0", "v1", None, "v3"], pa.large_string()), key_list
    else:
        values, keys = value_list, pa.array([b"k0", b"k1", None, b"k3"])
    assert acc.produce_batch("t", values, keys, partition=0, on_delivery=print) == 4
    assert records_of(t.parts[0].open) == want
    (d,) = t.parts[0].open.cbs
    assert type(d.values) is list and type(d.keys) is list
    assert list(zip(d.keys, d.values)) == want


def test_an_unknown_topic_waits_then_is_placed_in_order():
    acc, _, wanted = make()
    values = pa.array(["m%d" % i if i != 3 else None for i in range(8)], pa.string())
    keys = pa.array([b"k%d" % i for i in range(8)])[0:8]
    reports = []
    assert acc.produce_batch("new", values[1:], keys[1:], on_delivery=reports.append,
                             timestamp=1234) == 7
    assert acc.produce_batch("new", pa.chunked_array([values[:1]])) == 1
    t = acc.topics["new"]
    assert wanted == ["new"] and t.parts is None
    want = [(b"k%d" % i, None if i == 3 else b"m%d" % i) for i in range(1, 8)] + \
        [(None, b"m0")]
    assert [(m.key, m.value) for m in t.pending] == want
    assert all(type(m.value) in (bytes, type(None)) for m in t.pending)
    assert [m.timestamp for m in t.pending] == [1234] * 7 + [0]
    assert [m.on_delivery for m in t.pending] == [reports.append] * 7 + [None]
    assert acc.msg_count == 8
    assert acc.msg_bytes == sum(len(k or b"") + len(v or b"") for k, v in want)
    acc.apply_metadata({"new": TopicInfo("new", 0, [1], [-1], [0], time.monotonic())},
                       time.monotonic())
    assert not t.pending
    assert records_of(t.parts[0].open) == want
    assert acc.msg_count == 8


# -- what is refused, before anything is queued ----------------------------------------
def _bad_calls():
    ints = pa.array([1, 2, 3], pa.int64())
    ok = pa.array([b"a", b"b", b"c"])
    return [
        ("int64-values", ints, None, TypeError,
         "values must be a pyarrow binary or string array, not int64"),
        ("int32-keys", ok, pa.array([1, 2, 3], pa.int32()), TypeError,
         "keys must be a pyarrow binary or string array, not int32"),
        ("int64-chunked", pa.chunked_array([ints, ints]), None, TypeError,
         "values must be a pyarrow binary or string array, not int64"),
        ("list-of-binary", pa.array([[b"a"], [b"b"], []]), None, TypeError,
         "values must be a pyarrow binary or string array, not list<item: binary>"),
        ("dictionary", pa.array(["a", "b", "a"]).dictionary_encode(), None, TypeError,
         "values must be a pyarrow binary or string array, not "
         "dictionary<values=string, indices=int32, ordered=0>"),
        ("null-type", pa.array([None, None, None]), None, TypeError,
         "values must be a pyarrow binary or string array, not null"),
        ("table", pa.table({"v": ok}), None, TypeError,
         "values must be a list of messages or a pyarrow array, not pyarrow Table"),
        ("scalar-keys", ok, pa.scalar(b"k"), TypeError,
         "keys must be a list of messages or a pyarrow array, not pyarrow BinaryScalar"),
        ("short-keys", ok, pa.array(["k", "l"]), ValueError,
         "keys and values differ in length (2 keys, 3 values)"),
        ("long-keys", ok, pa.array(["k", "l", "m", "n"]), ValueError,
         "keys and values differ in length (4 keys, 3 values)"),
        ("short-list-keys", ok, [b"k"], ValueError,
         "keys and values differ in length (1 keys, 3 values)"),
        ("list-values-short-arrow-keys", [b"a", b"b"], pa.array([b"k"]), ValueError,
         "keys and values differ in length (1 keys, 2 values)"),
        ("bad-item-with-arrow", [b"a", 5], pa.array([b"k", b"l"]), TypeError,
         "values[1] must be bytes, str or None, not int"),
    ]


BAD = _bad_calls()


@pytest.mark.parametrize("known", [True, False], ids=["known-topic", "unknown-topic"])
@pytest.mark.parametrize("name,values,keys,exc,message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_column_is_refused_before_anything_is_queued(known, name, values, keys, exc,
                                                            message):
    acc, _, _ = make()
    if known:
        with_topic(acc, partitions=2)
    for partition in (-1, 1):
        with pytest.raises(exc) as info:
            acc.produce_batch("t", values, keys, partition=partition, on_delivery=print)
        assert str(info.value) == message
    assert nothing_queued(acc)


def test_a_message_over_message_max_bytes_is_refused_with_its_size():
    acc, _, _ = make(**{"message.max.bytes": 1000})
    t = with_topic(acc, partitions=1)
    big, small = b"x" * 900, b"y" * 100
    # 900 + 100 fits; the largest value and largest key together (1800) do not matter.
    assert acc.produce_batch("t", pa.array([big, small]), pa.array([small, big]),
                             partition=0) == 2
    for values, keys, size in ((pa.array([b"ok", big]), pa.array([b"k", big]), 1800),
                               (pa.array([b"ok", None, b"z" * 1001]), None, 1001),
                               (pa.array([None, None], pa.binary()),
                                pa.array(["", "\u00e9" * 501]), 1002),
                               (pa.array([b"ok", b"z" * 1001])[1:], None, 1001)):
        with pytest.raises(KafkaException) as info:
            acc.produce_batch("t", values, keys, partition=0)
        assert info.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert f"{size} bytes" in info.value.args[0].str()
    assert t.parts[0].open.count == 2 and acc.msg_count == 2
    # A slice leaves out the rows around it: the big one is not in this one.
    assert acc.produce_batch("t", pa.array([b"z" * 5000, b"ok", b"z" * 5000])[1:2],
                             partition=0) == 1
    with pytest.raises(KafkaException) as info:   # unknown topic: refused as well
        acc.produce_batch("new", pa.array([b"z" * 1001]))
    assert info.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert "new" not in acc.topics or not acc.topics["new"].pending


@pytest.mark.parametrize("known", [True, False], ids=["known-topic", "unknown-topic"])
def test_a_full_producer_takes_all_or_none(known):
    acc, _, _ = make(**{"queue.buffering.max.messages": 10})
    if known:
        with_topic(acc, partitions=2)
    rows = pa.array([b"%d" % i for i in range(11)], pa.binary())
    with pytest.raises(BufferError):
        acc.produce_batch("t", rows, pa.array(["k"] * 11))
    assert nothing_queued(acc)
    assert acc.produce_batch("t", rows[:6], partition=1) == 6
    with pytest.raises(BufferError):
        acc.produce_batch("t", rows[6:11], partition=1)     # 6 + 5 > 10: none
    assert acc.msg_count == 6
    assert acc.produce_batch("t", rows[6:10], partition=1) == 4
    with pytest.raises(BufferError):
        acc.produce_batch("t", rows[10:], partition=1)
    assert acc.msg_count == 10


def test_queue_buffering_max_kbytes_counts_the_bytes_of_the_rows():
    acc, _, _ = make(**{"queue.buffering.max.kbytes": 1})     # 1024 bytes
    with_topic(acc, partitions=1)
    with pytest.raises(BufferError):
        acc.produce_batch("unknown", pa.array([b"x" * 600, None]),
                          pa.array([None, "y" * 600]))       # 1200 bytes
    assert nothing_queued(acc, "unknown")
    # Sliced away, the same big rows do not count.
    big = pa.array([b"x" * 5000, b"a" * 500, b"x" * 5000])
    assert acc.produce_batch("unknown", big[1:2], pa.array(["k" * 500])) == 1
    assert acc.msg_bytes == 1000
    with pytest.raises(BufferError):
        acc.produce_batch("unknown", pa.array([b"b" * 25]))
    assert acc.msg_count == 1 and acc.msg_bytes == 1000


@pytest.mark.parametrize("known", [True, False], ids=["known-topic", "unknown-topic"])
def test_the_counts_are_those_of_the_same_lists(known):
    values = [b"v" * (i % 50) if i % 9 else None for i in range(1000)]
    keys = [b"k%d" % (i % 11) if i % 4 else None for i in range(1000)]
    seen = []
    for vs, ks in ((values, keys), (pa.array(values), pa.array(keys, pa.large_binary()))):
        acc, _, _ = make(**{"batch.num.messages": 300, "batch.size": 4000})
        if known:
            t = with_topic(acc, partitions=2)
        assert acc.produce_batch("t", vs, ks, partition=1, timestamp=1_700_000_000_000) \
            == 1000
        state = [acc.msg_count, acc.msg_bytes, acc.queued_bytes()]
        if known:
            p = t.parts[1]
            state.append([(b.count, b.builder.build()) for b in p.ready] +
                         [(p.open.count, p.open.builder.build())])
        acc.close_lingered(0.0, everything=True)
        state += [acc.msg_bytes, acc.queued_bytes()]
        seen.append(state)
    assert seen[0] == seen[1]
    if known:
        assert seen[1][1] > 0 and len(seen[1][3]) > 3       # batch.size closed several
    else:
        assert seen[1][:2] == [1000, sum(len(v or b"") + len(k or b"")
                                         for v, k in zip(values, keys))]


# -- delivery reports -----------------------------------------------------------------
def test_every_message_gets_its_report_with_bytes_in_order(producer):
    seen = []

    def report(err, msg):
        seen.append((err and err.code(), msg.partition(), msg.offset(), msg.key(),
                     msg.value()))

    values = pa.array(["v%d" % i if i != 2 else None for i in range(6)], pa.string())
    keys = pa.array([b"k%d" % i if i != 4 else None for i in range(8)],
                    pa.large_binary())[2:]
    producer.produce("t", b"single", partition=0, on_delivery=report)
    assert producer.produce_batch("t", values, keys, partition=0, on_delivery=report) == 6
    producer.produce("t", b"last", partition=0, on_delivery=report)
    assert len(producer) == 8
    batch = producer._acc.topics["t"].parts[0].open
    assert batch.count == 8
    # values[i] with the key of row i + 2 of the array sliced for the keys
    want = [(None, b"single")] + \
        [(None if i + 2 == 4 else b"k%d" % (i + 2), None if i == 2 else b"v%d" % i)
         for i in range(6)] + [(None, b"last")]
    assert [r[:2] for r in queued_records(producer)[0]] == want
    del values, keys          # the reports read the arrays' buffers, still held
    gc.collect()
    producer._reports.append(_report(batch, None, base=500))
    assert producer.poll(0) >= 1
    assert seen == [(None, 0, 500 + i, k, v) for i, (k, v) in enumerate(want)]
    assert all(type(v) is bytes for *_, v in seen if v is not None)
    assert all(type(k) is bytes for *_, k, _ in seen if k is not None)
    # A failure: each message reported once with the error, values again as bytes.
    seen.clear()
    producer._reports.append(_report(batch, KafkaError(KafkaError._MSG_TIMED_OUT, "t/o")))
    producer.poll(0)
    assert seen == [(KafkaError._MSG_TIMED_OUT, 0, None, k, v) for k, v in want]


def test_reports_of_messages_spread_over_batches_and_partitions():
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": 60_000,
                  "batch.num.messages": 7})
    try:
        p._acc._new_topic("t")
        info = TopicInfo("t", 0, [1, 1], [-1, -1], [0, 0], time.monotonic())
        assert p._acc.apply_metadata({"t": info}, time.monotonic()).unplaced == []
        seen = []
        values = pa.array([b"%02d" % i for i in range(30)], pa.large_binary())
        keys = pa.array(["key%d" % (i % 5) for i in range(30)], pa.string())
        assert p.produce_batch("t", values, keys, on_delivery=lambda e, m: seen.append(
            (e, m.partition(), m.offset(), m.key(), m.value()))) == 30
        batches = [(part.index, b) for part in p._acc.topics["t"].parts
                   for b in list(part.ready) + ([part.open] if part.open else [])]
        assert sum(b.count for _, b in batches) == 30 and len(batches) >= 5
        assert all(b.count <= 7 for _, b in batches)
        for part, b in batches:
            p._reports.append(_report(b, None, base=1000 * (part + 1) + 7 * b.seq))
        while p.poll(0):
            pass
        assert len(seen) == 30 and {e for e, *_ in seen} == {None}
        assert sorted(v for *_, v in seen) == [b"%02d" % i for i in range(30)]
        assert {part for _, part, *_ in seen} == {0, 1}
        for part in (0, 1):
            mine = [(o, k, v) for _, pt, o, k, v in seen if pt == part]
            # Offsets follow the order of the values: the order within a partition kept.
            assert [o for o, _, _ in mine] == sorted(o for o, _, _ in mine)
            assert [v for _, _, v in mine] == sorted(v for _, _, v in mine)
            assert [o - 1000 * (part + 1) for o, _, _ in mine] == list(range(len(mine)))
            for _, k, v in mine:
                assert k == b"key%d" % (int(v) % 5)
        assert len(p) == 0
    finally:
        p.purge()
        p.close(0)
