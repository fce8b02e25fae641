"""RecordBatch.decode_into with a RecordFactory: records straight into slotted objects."""
from __future__ import annotations

import gc

import pytest

from kafka_proto.errors import KafkaProtocolError
from kafka_proto.records import (
    FAST_PATH,
    RecordBatchBuilder,
    RecordFactory,
    TimestampType,
    read_batches,
)


class Msg:
    __slots__ = ("off", "k", "v", "h", "ts", "topic", "part", "epoch", "err", "extra")


def factory(cls=Msg, **kw):
    args = dict(offset="off", key="k", value="v", headers="h", timestamp="ts", topic="topic",
                partition="part", leader_epoch="epoch", timestamp_types=("C", "L"),
                constants={"err": None, "extra": 7})
    args.update(kw)
    return RecordFactory(cls, **args)


def batch_of(records, base_offset=100, **builder_kw):
    b = RecordBatchBuilder(**builder_kw)
    for value, key, ts, headers in records:
        b.append(value, key=key, timestamp=ts, headers=headers)
    return next(iter(read_batches(b.build(base_offset))))


RECORDS = [
    (b"v0", b"k0", 1000, None),
    (None, None, 1001, [("a", b"1"), ("a", None), ("\u00e9", b"")]),  # tombstone, headers
    (b"", b"", 1002, []),
    (b"x" * 300, b"k3", 1003, [("z", b"y" * 40)]),
]


def test_same_content_as_iteration():
    batch = batch_of(RECORDS)
    out = []
    assert batch.decode_into(out, factory(), "topic-a", 3, 0, 17) == 4
    expected = list(batch_of(RECORDS))
    assert [m.off for m in out] == [r.offset for r in expected] == [100, 101, 102, 103]
    assert [m.k for m in out] == [r.key for r in expected]
    assert [m.v for m in out] == [r.value for r in expected]
    assert [m.h for m in out] == [r.headers or None for r in expected]
    assert [m.ts for m in out] == [("C", r.timestamp) for r in expected]
    assert {(m.topic, m.part, m.epoch, m.err, m.extra) for m in out} == {("topic-a", 3, 17,
                                                                          None, 7)}


def test_start_skips_earlier_records_and_appends_after_existing_items():
    out = ["already"]
    assert batch_of(RECORDS).decode_into(out, factory(), "t", 0, 102) == 2
    assert out[0] == "already" and [m.off for m in out[1:]] == [102, 103]


def test_log_append_time_uses_the_second_type_and_the_batch_max_timestamp():
    b = RecordBatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME)
    b.append(b"a", timestamp=5)
    b.append(b"b", timestamp=9)
    batch = next(iter(read_batches(b.build(0))))
    out = []
    batch.decode_into(out, factory(), "t", 0)
    assert [m.ts[0] for m in out] == ["L", "L"]
    assert len({m.ts[1] for m in out}) == 1


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batches(codec):
    batch = batch_of(RECORDS * 50, compression=codec)
    out = []
    assert batch.decode_into(out, factory(), "t", 0) == 200
    assert [m.v for m in out] == [r[0] for r in RECORDS * 50]


def test_instances_are_tracked_by_the_cycle_collector_only_on_the_plain_path():
    out = []
    batch_of(RECORDS).decode_into(out, factory(), "t", 0)
    assert [gc.is_tracked(m) for m in out] == [not FAST_PATH] * len(out)
    if FAST_PATH:
        assert not any(gc.is_tracked(m.ts) for m in out)


def test_class_setattr_is_not_called():
    class Guarded(Msg):
        __slots__ = ()

        def __setattr__(self, name, value):
            raise AttributeError("read-only")

    out = []
    batch_of(RECORDS).decode_into(out, factory(Guarded), "t", 0)
    assert [m.v for m in out] == [r[0] for r in RECORDS]


def test_slots_given_as_one_string():
    class One:
        __slots__ = "v"

    with pytest.raises(ValueError, match="not covered"):
        RecordFactory(One, offset=None, key=None, value=None, headers=None, timestamp=None)
    f = RecordFactory(One, offset=None, key=None, value="v", headers=None, timestamp=None)
    out = []
    batch_of(RECORDS).decode_into(out, f, "t", 0)
    assert [m.v for m in out] == [r[0] for r in RECORDS]


def test_factory_rejects_bad_layouts():
    with pytest.raises(TypeError):
        RecordFactory(object(), offset="off", key="k", value="v", headers="h", timestamp="ts")
    with pytest.raises(ValueError, match="not a writable __slots__ member"):
        factory(offset="nope")
    with pytest.raises(ValueError, match="named twice"):
        factory(key="off")
    with pytest.raises(ValueError, match="not covered"):
        factory(constants={"err": None})  # "extra" left unset


def test_malformed_record_raises_and_keeps_only_whole_objects():
    b = RecordBatchBuilder()
    for i in range(3):
        b.append(b"value-%d" % i)
    data = bytearray(b.build(0))
    assert data[-9] == 14 and data[-8:-1] == b"value-2"  # zigzag length 7, value, 0 headers
    data[-9] = 0x40  # the last record's value length (32) now runs past its record
    batch = next(iter(read_batches(bytes(data), check_crc=False)))
    out = []
    with pytest.raises(KafkaProtocolError):
        batch.decode_into(out, factory(), "t", 0)
    assert all(isinstance(m, Msg) and m.v.startswith(b"value-") for m in out)
    assert len(out) < 3
