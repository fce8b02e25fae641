"""confluent-kafka drop-in: the Message constructor, accessors, equality, pickling and the
errors on bad arguments, checked side by side with confluent-kafka's own Message."""
from __future__ import annotations

import pickle

import pytest

from kafka_client import KafkaError, Message

ck = pytest.importorskip("confluent_kafka")

FIELDS = ("topic", "partition", "offset", "key", "value", "headers", "error", "timestamp",
          "latency", "leader_epoch", "delivery_count")
FULL = ("t", 1, 2, b"k", b"v", [("h", b"1")], None, (1, 123), 0.5, 3, 4)


def read(m):
    return tuple(getattr(m, f)() for f in FIELDS)


def test_positional_and_keyword_construction_like_confluent():
    assert read(Message(*FULL)) == read(ck.Message(*FULL)) == FULL
    kw = dict(zip(FIELDS, FULL))
    assert read(Message(**kw)) == read(ck.Message(**kw)) == FULL
    assert read(Message()) == read(ck.Message())
    assert Message().timestamp() == (0, 0) and Message().delivery_count() is None
    with pytest.raises(TypeError):
        Message(*FULL, 5)
    with pytest.raises(TypeError):
        Message(foo=1)


@pytest.mark.parametrize("field, value", [
    ("partition", -1), ("partition", -2), ("partition", 2**31 - 1), ("partition", True),
    ("offset", -1), ("offset", -1001), ("offset", 0), ("offset", 2**63 - 1),
    ("latency", -1.0), ("latency", 0), ("latency", 1), ("latency", True),
    ("leader_epoch", -1), ("leader_epoch", 0), ("delivery_count", -1), ("delivery_count", 0),
    ("delivery_count", 2**15 - 1), ("timestamp", (5, -3)), ("timestamp", (True, 5)),
    ("topic", 5), ("key", "str"), ("value", bytearray(b"x")), ("headers", {"a": b"1"}),
    ("error", KafkaError(3)),
])
def test_values_read_back_as_confluents(field, value):
    ours = getattr(Message(**{field: value}), field)()
    theirs = getattr(ck.Message(**{field: value}), field)()
    if field == "error":
        theirs = value
    assert ours == theirs and type(ours) is type(theirs)


@pytest.mark.parametrize("field, value, exc", [
    ("partition", "1", TypeError), ("partition", 1.5, TypeError), ("offset", "x", TypeError),
    ("offset", 1.0, TypeError), ("leader_epoch", "x", TypeError),
    ("delivery_count", "x", TypeError), ("latency", "x", TypeError),
    ("latency", "1.5", TypeError), ("timestamp", 5, TypeError), ("timestamp", (1,), TypeError),
    ("timestamp", [1, 2], TypeError), ("timestamp", (1, 2, 3), TypeError),
    ("partition", 2**40, OverflowError), ("partition", -2**31 - 1, OverflowError),
    ("offset", 2**70, OverflowError), ("leader_epoch", 2**31, OverflowError),
    ("delivery_count", 2**15, OverflowError),
])
def test_bad_arguments_raise_what_confluent_raises(field, value, exc):
    with pytest.raises(exc) as ours:
        Message(**{field: value})
    with pytest.raises(exc) as theirs:
        ck.Message(**{field: value})
    assert str(ours.value) == str(theirs.value)


def test_equality_like_confluent():
    base = dict(zip(FIELDS, FULL))
    changes = {"topic": "u", "partition": 2, "offset": 3, "key": b"x", "value": b"y",
               "headers": [("h", b"2")], "error": 1, "timestamp": (1, 124),
               "latency": 0.6, "leader_epoch": 4, "delivery_count": 5}
    for field, other in changes.items():
        mine, theirs = dict(base), dict(base)
        mine[field] = other if field != "error" else KafkaError(other)
        theirs[field] = other if field != "error" else ck.KafkaError(other)
        assert (Message(**base) == Message(**mine)) == \
            (ck.Message(**base) == ck.Message(**theirs)), field
    assert Message(timestamp=(1, 5)) == Message(timestamp=(2, 5))   # the time counts
    assert (ck.Message(timestamp=(1, 5)) == ck.Message(timestamp=(2, 5))) is True
    assert Message(error=KafkaError(1, "a")) == Message(error=KafkaError(1, "b"))
    assert Message() != Message(topic="x") and not (Message() != Message())
    assert (Message() == 5) is False and (Message() != 5) is True
    with pytest.raises(TypeError, match="unhashable"):
        hash(Message())
    with pytest.raises(TypeError):
        Message() < Message()  # noqa: B015


def test_pickle_round_trip():
    m = Message(*FULL[:6], KafkaError(-191, "eof"), *FULL[7:])
    back = pickle.loads(pickle.dumps(m))
    assert back == m and read(back)[:6] == FULL[:6] and back.delivery_count() == 4
    assert back.error().code() == -191 and back.error().str() == "eof"
    assert back.latency() == 0.5 and back.timestamp() == (1, 123)


def test_setters_replace_without_checks_as_confluent():
    m, theirs = Message("t", 1, 2, b"k", b"v"), ck.Message("t", 1, 2, b"k", b"v")
    for setter, value in [("set_key", 5), ("set_value", "s"), ("set_headers", 5),
                          ("set_topic", None), ("set_error", KafkaError(3)),
                          ("set_key", None)]:
        getattr(m, setter)(value)
        getattr(theirs, setter)(value if setter != "set_error" else ck.KafkaError(3))
    assert (m.key(), m.value(), m.headers(), m.topic(), m.error().code()) == \
        (theirs.key(), theirs.value(), theirs.headers(), theirs.topic(), theirs.error().code())
    with pytest.raises(TypeError):
        m.set_key()


def test_len_and_deserialized_accessors():
    for v in (None, "héllo", b"abc", bytearray(b"xy")):
        assert len(Message(value=v)) == len(ck.Message(value=v))
    with pytest.raises(TypeError):
        len(Message(value=5))
    m = Message(key=b"k", value=b"v")
    assert (m.deserialized_key(), m.deserialized_value()) == (b"k", b"v")
