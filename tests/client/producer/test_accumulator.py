"""The accumulator alone: batching rules, backpressure, size limits, sticky partitioning,
messages waiting for metadata, produce_batch. No broker, no I/O thread."""
from __future__ import annotations

import pytest

from kafka_client.config import ClientConfig
from kafka_client.errors import KafkaError, KafkaException
from kafka_client.producer.accumulator import Accumulator
from kafka_proto.records import read_batches


def make(**conf):
    base = {"bootstrap.servers": "127.0.0.1:1"}
    base.update(conf)
    cfg = ClientConfig.from_dict(base, role="producer")
    wakes, wanted = [], []
    acc = Accumulator(cfg, wakes.append, wanted.append)
    return acc, wakes, wanted


def with_topic(acc, name="t", partitions=1):
    t = acc._new_topic(name)
    acc.set_partitions(t, [1] * partitions)
    return t


def records_of(batch):
    data = batch.builder.build()
    (b,) = list(read_batches(data))
    return [(r.key, r.value) for r in b]


def test_messages_are_encoded_into_the_open_batch():
    acc, wakes, wanted = make()
    t = with_topic(acc)
    acc.produce("t", b"v1", key=b"k1")
    acc.produce("t", "text", key="k2")          # str is UTF-8 encoded
    acc.produce("t", None, partition=0)          # tombstone
    p = t.parts[0]
    assert p.open is not None and p.open.count == 3 and not p.ready
    assert records_of(p.open) == [(b"k1", b"v1"), (b"k2", b"text"), (None, None)]
    assert p.open.cbs is None  # no callback: nothing kept per message
    # Bytes are counted per batch, once it closes (its encoded size).
    assert acc.msg_count == 3 and acc.msg_bytes == 0
    acc.close_expired(0.0, everything=True)
    assert acc.msg_bytes == p.ready[0].nbytes == p.ready[0].builder.size_in_bytes > 61
    assert wanted == ["t"]


def test_batch_num_messages_closes_a_batch():
    acc, wakes, _ = make(**{"batch.num.messages": 3})
    t = with_topic(acc)
    for i in range(7):
        acc.produce("t", b"%d" % i, partition=0)
    p = t.parts[0]
    assert [b.count for b in p.ready] == [3, 3]
    assert p.open.count == 1
    assert p in acc.ready_parts
    assert 0.0 in wakes  # the I/O thread was told at once
    assert [b.seq for b in p.ready] == [0, 1] and p.open.seq == 2


def test_batch_size_bounds_a_batch():
    acc, _, _ = make(**{"batch.size": 1000})
    t = with_topic(acc)
    for _ in range(30):
        acc.produce("t", b"x" * 100, partition=0)
    p = t.parts[0]
    sizes = [b.builder.size_in_bytes for b in p.ready]
    assert sizes and all(s <= 1000 for s in sizes)
    assert sum(b.count for b in p.ready) + p.open.count == 30
    # A message larger than batch.size still goes out, alone.
    acc.produce("t", b"y" * 2000, partition=0)
    acc.produce("t", b"z", partition=0)
    assert p.ready[-1].count == 1 and records_of(p.ready[-1]) == [(None, b"y" * 2000)]


def test_linger_closes_batches_in_order():
    acc, wakes, _ = make(**{"linger.ms": 50})
    t = with_topic(acc, partitions=2)
    acc.produce("t", b"a", partition=0)
    acc.produce("t", b"b", partition=1)
    first = acc.open_order[0][0]
    assert wakes[-1] >= first  # told when the linger ends
    assert acc.close_expired(first - 0.01) == first
    assert not acc.ready_parts
    assert acc.close_expired(first + 0.06) is None
    assert {p.index for p in acc.ready_parts} == {0, 1}
    # flush: everything closes regardless of linger
    acc.produce("t", b"c", partition=0)
    acc.close_expired(0.0, everything=True)
    assert t.parts[0].open is None and len(t.parts[0].ready) == 2


def test_queue_limits_raise_buffer_error():
    acc, _, _ = make(**{"queue.buffering.max.messages": 5})
    with_topic(acc)
    for _ in range(5):
        acc.produce("t", b"x")
    with pytest.raises(BufferError):
        acc.produce("t", b"x")
    # kbytes: closed batches count with their encoded size (open ones on top)
    acc2, _, _ = make(**{"queue.buffering.max.kbytes": 1, "batch.num.messages": 1})
    with_topic(acc2)
    acc2.produce("t", b"x" * 1000)
    with pytest.raises(BufferError):
        acc2.produce("t", b"x" * 100)
    assert acc2.msg_count == 1


def test_size_and_partition_errors():
    acc, _, _ = make(**{"message.max.bytes": 1000})
    with_topic(acc, partitions=2)
    with pytest.raises(KafkaException) as ei:
        acc.produce("t", b"x" * 900, key=b"k" * 200)
    assert ei.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    with pytest.raises(KafkaException) as ei:
        acc.produce("t", b"x", partition=2)
    assert ei.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    with pytest.raises(TypeError):
        acc.produce("t", 12345)
    with pytest.raises(KafkaException):
        acc.produce("", b"x")
    assert acc.msg_count == 0


def test_callbacks_keep_index_key_value():
    acc, _, _ = make()
    t = with_topic(acc)
    cb = object()
    acc.produce("t", b"a", partition=0)
    acc.produce("t", b"b", key=b"k", partition=0, on_delivery=cb, headers={"h": "v"})
    acc.produce("t", b"c", partition=0, callback=cb)
    assert t.parts[0].open.cbs == [(1, cb, b"k", b"b", [("h", b"v")], 0), (2, cb, None, b"c", None, 0)]


def test_keyless_messages_stick_to_one_partition_per_batch():
    acc, _, _ = make(**{"batch.num.messages": 10})
    t = with_topic(acc, partitions=8)
    for _ in range(10):
        acc.produce("t", b"x")
    used = [p.index for p in t.parts if p.ready or p.open]
    assert len(used) == 1  # one batch filled on one partition
    # Keyed messages follow the key.
    acc.produce("t", b"x", key=b"same")
    acc.produce("t", b"y", key=b"same")
    keyed = [p for p in t.parts if p.open and p.open.count and p.index != used[0]]
    assert len(keyed) <= 1


def test_pending_messages_are_placed_in_order_when_metadata_arrives():
    acc, _, wanted = make(**{"batch.num.messages": 1000})
    acc.produce("new", b"1", partition=0)
    acc.produce("new", b"2")
    acc.produce("new", b"3", partition=5)   # does not exist: fails on assignment
    t = acc.topics["new"]
    assert t.parts is None and len(t.pending) == 3 and acc.msg_count == 3
    assert wanted == ["new"]
    failed = acc.assign_pending(t, [1])
    assert [(m[0], e.code()) for m, e in failed] == [(b"3", KafkaError._UNKNOWN_PARTITION)]
    acc.produce("new", b"4")
    assert records_of(t.parts[0].open) == [(None, b"1"), (None, b"2"), (None, b"4")]
    assert acc.msg_count == 4  # the failed one still counts until its report is served


def test_produce_batch_fills_batches_in_bulk():
    acc, _, _ = make(**{"batch.num.messages": 400})
    t = with_topic(acc, partitions=3)
    values = [b"v%04d" % i for i in range(1000)]
    assert acc.produce_batch("t", values, partition=1) == 1000
    p = t.parts[1]
    batches = list(p.ready) + ([p.open] if p.open else [])
    assert [b.count for b in batches] == [400, 400, 200]
    got = [v for b in batches for _, v in records_of(b)]
    assert got == values
    assert acc.msg_count == 1000
    assert acc.msg_bytes == sum(b.nbytes for b in batches) > 5000  # closed ones, encoded
    # keys: each through the partitioner, then appended in bulk per partition, in order
    keys = [b"k%d" % (i % 5) for i in range(50)]
    acc.close_expired(0.0, everything=True)
    assert acc.produce_batch("t", values[:50], keys) == 50
    assert acc.msg_count == 1050
    from kafka_client.producer.partitioners import get_partitioner

    crc = get_partitioner("consistent")
    for part in t.parts:
        if part.open is None:
            continue
        got = records_of(part.open)
        want = [(k, v) for k, v in zip(keys, values[:50]) if crc(k, 3) == part.index]
        assert got == want
    with pytest.raises(ValueError):
        acc.produce_batch("t", values[:3], keys[:2])
    with pytest.raises(KafkaException):
        acc.produce_batch("t", [b"x" * 2_000_000])


def test_produce_batch_respects_the_queue_limit_all_or_nothing():
    acc, _, _ = make(**{"queue.buffering.max.messages": 100})
    with_topic(acc)
    with pytest.raises(BufferError):
        acc.produce_batch("t", [b"x"] * 101, partition=0)
    assert acc.msg_count == 0
    acc.produce_batch("t", [b"x"] * 100, partition=0)
    assert acc.msg_count == 100


def test_produce_waits_for_the_lock_and_lets_its_holder_run():
    # The I/O thread holds the lock while it closes batches; a produce() meanwhile must
    # wait for it (not append into a batch being closed) and must release the GIL while
    # it waits, or the holder could never finish.
    import threading
    import time

    acc, _, _ = make()
    t = with_topic(acc)
    order = []
    holding = threading.Event()

    def holder():
        with acc.lock:
            holding.set()
            time.sleep(0.2)          # Python code runs: needs the GIL the waiter must free
            order.append("holder done")

    th = threading.Thread(target=holder)
    th.start()
    holding.wait(5)
    acc.produce("t", b"v", partition=0)
    order.append("produced")
    th.join(5)
    assert order == ["holder done", "produced"]
    assert t.parts[0].open.count == 1 and acc.msg_count == 1


def test_an_error_inside_produce_releases_the_lock():
    acc, _, _ = make(**{"queue.buffering.max.messages": 1})
    t = with_topic(acc)
    acc.produce("t", b"v", partition=0)
    with pytest.raises(BufferError):
        acc.produce("t", b"v", partition=0)
    with pytest.raises(KafkaException) as info:
        acc.msg_count = 0
        acc.produce("t", b"v", partition=5)
    assert info.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    with pytest.raises(KafkaException) as info:
        acc.produce("t", b"v", partition="0")
    assert info.value.args[0].code() == KafkaError._INVALID_ARG
    with acc.lock:   # free again: would hang here otherwise
        pass
    assert t.parts[0].open.count == 1


def test_a_message_the_builder_refuses_leaves_no_empty_batch_behind():
    acc, _, _ = make()
    t = with_topic(acc)
    with pytest.raises(TypeError, match="timestamp"):
        acc.produce("t", b"v", partition=0, timestamp="now")
    with pytest.raises(OverflowError):
        acc.produce("t", b"v", partition=0, timestamp=1 << 70)  # opened a batch, then failed
    assert acc.msg_count == 0
    acc.close_expired(0.0, everything=True)
    p = t.parts[0]
    assert p.open is None and not p.ready and acc.msg_bytes == 0
    acc.produce("t", b"ok", partition=0)
    acc.close_expired(0.0, everything=True)
    assert [records_of(b) for b in p.ready] == [[(None, b"ok")]]
