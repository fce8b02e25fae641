"""produce_batch(), both forms, without a broker: what is queued (records in the batch
builders, the producer's counts), what is refused and when, and the delivery reports of
bulk-appended messages (served from synthetic reports)."""
from __future__ import annotations

import time

import pytest

from kafka_client import KafkaError, KafkaException, Producer
from kafka_client._cluster.metadata import TopicInfo
from kafka_client.producer._core import DeliveryCallback, DeliveryRange
from kafka_client.producer.idempotence import PERSISTED
from kafka_client.producer.sender import Report
from kafka_proto.records import read_batches

from tests.client.producer.test_accumulator import make, records_of, with_topic


def dead_bootstrap():
    return "127.0.0.1:1"   # nothing listens: metadata never comes unless a test sets it


@pytest.fixture
def producer():
    """A Producer whose topic "t" has 2 known partitions (no broker: nothing is sent)."""
    p = Producer({"bootstrap.servers": dead_bootstrap(), "linger.ms": 60_000})
    p._acc._new_topic("t")
    info = TopicInfo("t", 0, [1, 1], [-1, -1], [0, 0], time.monotonic())
    assert p._acc.apply_metadata({"t": info}, time.monotonic()).unplaced == []
    try:
        yield p
    finally:
        p.purge()
        p.close(0)


def queued_records(p, topic="t"):
    """{partition: [(key, value, headers, timestamp)]} in the open and ready batches."""
    out = {}
    for part in p._acc.topics[topic].parts:
        batches = list(part.ready) + ([part.open] if part.open is not None else [])
        for b in batches:
            (rb,) = list(read_batches(b.builder.build()))
            out.setdefault(part.index, []).extend(
                (r.key, r.value, list(r.headers), r.timestamp) for r in rb)
    return out


# -- the columnar form ------------------------------------------------------------------
def test_str_and_buffer_values_are_encoded_in_bulk():
    acc, _, _ = make()
    t = with_topic(acc)
    values = [b"raw", "text \u00e9", bytearray(b"ba"), memoryview(b"mv"), None]
    keys = ["k0", b"k1", None, bytearray(b"k3"), "k4"]
    assert acc.produce_batch("t", values, keys, partition=0) == 5
    assert records_of(t.parts[0].open) == [
        (b"k0", b"raw"), (b"k1", "text \u00e9".encode()), (None, b"ba"), (b"k3", b"mv"),
        (b"k4", None)]
    assert t.parts[0].open.count == 5 and acc.msg_count == 5
    assert t.parts[0].open.cbs is None   # no callback: nothing kept per message


@pytest.mark.parametrize("known", [True, False], ids=["known-topic", "unknown-topic"])
@pytest.mark.parametrize("values,keys,error", [
    ([b"a", b"b", 5], None, "values[2] must be bytes, str or None, not int"),
    ([b"a", "b", object()], None, "values[2] must be bytes, str or None, not object"),
    ([b"a", b"b"], [b"k", 1.5], "keys[1] must be bytes, str or None, not float"),
    ("abc", None, "messages must be a list, not str (a list of message dicts, or of "
     "values: bytes, str or None)"),
    (b"abc", None, "messages must be a list, not bytes (a list of message dicts, or of "
     "values: bytes, str or None)"),
    (None, None, "messages must be a list, not NoneType (a list of message dicts, or of "
     "values: bytes, str or None)"),
    ([b"a"], 7, "keys must be a list of bytes, str or None, not int"),
    (({"value": b"a"},), None,
     "messages must be a list, not tuple (message dicts are taken in a list)"),
    ([b"a", {"value": b"b"}], None, "Message at index 0 must be a dict, not bytes: the one "
     "at index 1 is, and a list holds message dicts or values (bytes, str or None), not "
     "both"),
])
def test_a_bad_item_is_refused_before_anything_is_queued(known, values, keys, error):
    acc, _, _ = make()
    t = with_topic(acc) if known else None
    with pytest.raises(TypeError) as info:
        acc.produce_batch("t", values, keys)
    assert str(info.value) == error
    assert acc.msg_count == 0 and acc.msg_bytes == 0
    if known:
        assert all(p.open is None and not p.ready for p in t.parts)
    else:
        assert "t" not in acc.topics or not acc.topics["t"].pending


@pytest.mark.parametrize("timestamp", [-1, -7, 1 << 64])
def test_a_negative_timestamp_is_refused_before_anything_is_queued(timestamp):
    acc, _, _ = make()
    with_topic(acc)
    for topic in ("t", "unknown"):
        with pytest.raises(KafkaException) as info:
            acc.produce_batch(topic, [b"a", b"b"], timestamp=timestamp)
        assert info.value.args[0].code() == KafkaError._INVALID_ARG
        with pytest.raises(KafkaException):
            acc.produce(topic, b"a", timestamp=timestamp)
    assert acc.msg_count == 0 and "unknown" not in acc.topics


def test_the_size_limit_applies_to_each_message_key_and_value_together():
    acc, _, _ = make(**{"message.max.bytes": 1000})
    t = with_topic(acc)
    big, small = b"x" * 900, b"y" * 50
    # No message is over 1000 bytes although the largest value and key add up to 1800.
    assert acc.produce_batch("t", [big, small], [small, big], partition=0) == 2
    with pytest.raises(KafkaException) as info:
        acc.produce_batch("t", [b"ok", big], [b"k", big], partition=0)
    assert info.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert "1800 bytes" in info.value.args[0].str()
    assert t.parts[0].open.count == 2 and acc.msg_count == 2


def test_an_unknown_topic_takes_all_or_none_and_keeps_the_order():
    acc, _, wanted = make(**{"queue.buffering.max.messages": 10})
    reports = []
    with pytest.raises(BufferError):
        acc.produce_batch("new", [b"%d" % i for i in range(11)])
    assert acc.msg_count == 0
    assert acc.produce_batch("new", [b"%d" % i for i in range(6)], ["k"] * 6,
                             on_delivery=reports.append, timestamp=1234) == 6
    with pytest.raises(BufferError):
        acc.produce_batch("new", [b"x"] * 5)     # 6 + 5 > 10: none of them
    t = acc.topics["new"]
    assert [(m.value, m.key, m.timestamp, m.on_delivery) for m in t.pending] == \
        [(b"%d" % i, b"k", 1234, reports.append) for i in range(6)]
    assert acc.msg_count == 6 and wanted == ["new"]
    # The metadata arrives: they are placed in order.
    acc.apply_metadata({"new": TopicInfo("new", 0, [1], [-1], [0], time.monotonic())},
                       time.monotonic())
    assert [v for _, v in records_of(t.parts[0].open)] == [b"%d" % i for i in range(6)]


def test_on_delivery_is_kept_once_per_bulk_append_with_copies_of_the_lists():
    acc, _, _ = make(**{"batch.num.messages": 40})
    t = with_topic(acc, partitions=1)
    acc.produce("t", b"single", on_delivery=print)
    values = [b"v%03d" % i for i in range(100)]
    keys = [b"k%03d" % i for i in range(100)]
    assert acc.produce_batch("t", values, keys, on_delivery=len) == 100
    values[0] = b"changed by the caller"
    p = t.parts[0]
    batches = list(p.ready) + [p.open]
    assert [b.count for b in batches] == [40, 40, 21]
    first = batches[0].cbs
    assert type(first[0]) is DeliveryCallback and first[0].index == 0
    ranges = [(b.seq, d.index, d.count, d.values[0], d.keys[-1], d.callback)
              for b in batches for d in b.cbs if type(d) is DeliveryRange]
    assert ranges == [(0, 1, 39, b"v000", b"k038", len), (1, 0, 40, b"v039", b"k078", len),
                      (2, 0, 21, b"v079", b"k099", len)]


# -- confluent-kafka's form: a list of dicts ---------------------------------------------
@pytest.mark.parametrize("messages,error", [
    ([{"value": b"a"}, b"b"], "Message at index 1 must be a dict, not bytes"),
    ([{"value": b"a"}, {"value": 5}], "Message value at index 1 must be bytes or str, not int"),
    ([{"value": b"a"}, {"key": 5}], "Message key at index 1 must be bytes or str, not int"),
    ([{"value": b"a"}, {"partition": "1"}], "Message partition at index 1 must be int, not str"),
    ([{"value": b"a"}, {"timestamp": "now"}],
     "Message timestamp at index 1 must be an int (milliseconds), not str"),
    ([{"value": b"a"}, {"callback": 5}], "Message callback at index 1 must be callable, not int"),
    ([{"value": b"a"}, {"headers": "h"}],
     "Invalid headers at index 1: expected headers to be dict or list"),
    ([{"value": b"a"}, {"headers": [("\ud800", b"v")]}],
     "Invalid headers at index 1: header key '\\ud800' cannot be encoded as UTF-8"),
])
def test_a_malformed_message_queues_none(producer, messages, error):
    # ValueError for headers, as confluent-kafka's produce_batch() raises
    with pytest.raises(ValueError if "headers" in error else TypeError) as info:
        producer.produce_batch("t", messages)
    assert str(info.value).startswith(error)
    assert len(producer) == 0 and queued_records(producer) == {}
    assert all("_error" not in m for m in messages if type(m) is dict)


def test_messages_that_cannot_be_queued_get_an_error_and_the_others_go(producer):
    messages = [{"value": b"ok0", "key": "k", "partition": 1, "timestamp": 1_700_000_000_000},
                {"value": b"no such partition", "partition": 7},
                {"value": b"bad partition", "partition": -5},
                {"value": b"bad timestamp", "timestamp": -3},
                {"value": b"x" * 2_000_000},
                {"value": "ok1", "headers": {"h": "v"}, "_error": "from an earlier attempt"},
                {}]
    assert producer.produce_batch("t", messages, partition=0) == 3
    codes = [m["_error"].code() if "_error" in m else None for m in messages]
    assert codes == [None, KafkaError._UNKNOWN_PARTITION, KafkaError._INVALID_ARG,
                     KafkaError._INVALID_ARG, KafkaError.MSG_SIZE_TOO_LARGE, None, None]
    assert isinstance(messages[1]["_error"], KafkaError)
    assert len(producer) == 3
    records = queued_records(producer)
    assert records[1] == [(b"k", b"ok0", [], 1_700_000_000_000)]
    assert [r[:3] for r in records[0]] == [(None, b"ok1", [("h", b"v")]), (None, None, [])]
    assert all(abs(r[3] - time.time() * 1000) < 60_000 for r in records[0])   # now


def test_a_partition_out_of_range_is_reported_in_its_dict(producer):
    # Beyond 32 bits: an OverflowError out of the call, naming no message, had queued
    # none of the others.
    messages = [{"value": b"a", "partition": 1}, {"value": b"b", "partition": 2**40},
                {"value": b"c", "partition": -2**31}, {"value": b"d", "partition": 0}]
    assert producer.produce_batch("t", messages) == 2
    errors = [m.get("_error") for m in messages]
    assert [e and e.code() for e in errors] == \
        [None, KafkaError._INVALID_ARG, KafkaError._INVALID_ARG, None]
    assert "invalid partition 1099511627776" in errors[1].str()
    records = queued_records(producer)
    assert [r[1] for r in records[1]] == [b"a"] and [r[1] for r in records[0]] == [b"d"]


def test_a_raising_partitioner_fails_its_message_and_the_others_are_counted():
    """The messages queued before one whose partitioner_cb raised: counted in the return
    value, the failed one reported in its dict. The exception raised out of the call had
    left them queued with no trace (a retry of the list sent them twice)."""
    def partitioner_cb(key, partition_count):
        if key == b"bad":
            raise ValueError("no partition for it")
        return 1

    p = Producer({"bootstrap.servers": dead_bootstrap(), "linger.ms": 60_000,
                  "partitioner_cb": partitioner_cb})
    try:
        p._acc._new_topic("t")
        info = TopicInfo("t", 0, [1, 1], [-1, -1], [0, 0], time.monotonic())
        p._acc.apply_metadata({"t": info}, time.monotonic())
        messages = [{"value": b"a", "key": b"k"}, {"value": b"b", "key": b"bad"},
                    {"value": b"c", "key": b"k"}]
        assert p.produce_batch("t", messages) == 2
        assert "_error" not in messages[0] and "_error" not in messages[2]
        err = messages[1]["_error"]
        assert err.code() == KafkaError._APPLICATION
        assert err.str() == "choosing its partition raised ValueError('no partition for it')"
        assert [r[1] for r in queued_records(p)[1]] == [b"a", b"c"] and len(p) == 2
        # The columnar form takes all or none: the partitioner's exception, none queued.
        with pytest.raises(ValueError, match="no partition for it"):
            p.produce_batch("t", [b"d", b"e"], [b"k", b"bad"])
        assert len(p) == 2
    finally:
        p.purge()
        p.close(0)


def test_an_empty_topic_name_is_each_queueable_messages_error():
    p = Producer({"bootstrap.servers": dead_bootstrap()})
    try:
        messages = [{"value": b"a"}, {"value": b"x" * 2_000_000}]
        assert p.produce_batch("", messages) == 0
        assert [m["_error"].code() for m in messages] == \
            [KafkaError._INVALID_ARG, KafkaError.MSG_SIZE_TOO_LARGE]
        assert len(p) == 0
    finally:
        p.close(0)


def test_a_full_producer_fails_the_rest_in_order():
    p = Producer({"bootstrap.servers": dead_bootstrap(), "queue.buffering.max.messages": 3})
    try:
        messages = [{"value": b"%d" % i} for i in range(5)]
        assert p.produce_batch("t", messages) == 3
        assert [m.get("_error") and m["_error"].code() for m in messages] == \
            [None, None, None, KafkaError._QUEUE_FULL, KafkaError._QUEUE_FULL]
        assert [m.value for m in p._acc.topics["t"].pending] == [b"0", b"1", b"2"]
    finally:
        p.purge()
        p.close(0)


def test_confluent_kafkas_positional_order_and_callbacks(producer):
    def batch_cb(err, msg):
        pass

    def own_cb(err, msg):
        pass

    n = producer.produce_batch("t", [{"value": b"a"}, {"value": b"b", "callback": own_cb}],
                               1, batch_cb)      # (topic, messages, partition, on_delivery)
    assert n == 2 and [r[1] for r in queued_records(producer)[1]] == [b"a", b"b"]
    cbs = producer._acc.topics["t"].parts[1].open.cbs
    assert [d.callback for d in cbs] == [batch_cb, own_cb]
    assert producer.produce_batch("t", [{"value": b"c"}], callback=batch_cb) == 1
    with pytest.raises(TypeError, match="callback given twice"):
        producer.produce_batch("t", [{"value": b"d"}], 1, batch_cb, callback=batch_cb)
    with pytest.raises(TypeError, match="each dict has its own 'key'"):
        producer.produce_batch("t", [{"value": b"d"}], [b"k"])
    with pytest.raises(TypeError):
        producer.produce_batch("t", [{"value": b"d"}], on_delivery=5)
    with pytest.raises(KafkaException):
        producer.produce_batch("t", [{"value": b"d"}], partition=-3)
    assert producer.produce_batch("t", []) == 0
    assert len(producer) == 3


# -- delivery reports of bulk-appended messages ------------------------------------------
def _report(batch, error=None, base=-1):
    return Report(batch, error, base, -1, PERSISTED, None, batch.part.topic.name)


def test_every_bulk_message_gets_its_report_and_a_raising_callback_loses_none(producer):
    seen = []
    raises = [1, 1]     # the first two calls for v2 raise

    def report(err, msg):
        seen.append((err and err.code(), msg.partition(), msg.offset(), msg.key(), msg.value()))
        if msg.value() == b"v2" and raises:
            raises.pop()
            raise ValueError("callback failed")

    producer.produce("t", b"single", partition=0, on_delivery=report)
    producer.produce_batch("t", [b"v%d" % i for i in range(5)], ["k"] * 5, partition=0,
                           on_delivery=report)
    producer.produce("t", b"last", partition=0, on_delivery=report)
    batch = producer._acc.topics["t"].parts[0].open
    assert batch.count == 7
    err = KafkaError(KafkaError._MSG_TIMED_OUT, "timed out")
    producer._reports.append(_report(batch, err))
    with pytest.raises(ValueError):
        producer.poll(0)
    assert [v for *_, v in seen] == [b"single", b"v0", b"v1", b"v2"]
    producer.poll(0)      # the rest, from the message after the one that raised
    assert seen == [(KafkaError._MSG_TIMED_OUT, 0, None, None, b"single")] + \
        [(KafkaError._MSG_TIMED_OUT, 0, None, b"k", b"v%d" % i) for i in range(5)] + \
        [(KafkaError._MSG_TIMED_OUT, 0, None, None, b"last")]
    # Offsets: the batch's base offset + the message's place in the batch.
    seen.clear()
    producer._reports.append(_report(batch, None, base=100))
    with pytest.raises(ValueError):
        producer.poll(0)
    producer.poll(0)
    assert [(o, v) for _, _, o, _, v in seen] == \
        [(100, b"single")] + [(101 + i, b"v%d" % i) for i in range(5)] + [(106, b"last")]
