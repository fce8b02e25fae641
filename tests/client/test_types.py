"""kafka_client value types (KafkaError, KafkaException, TopicPartition, Message), checked
against confluent-kafka's classes where the behaviour should be the same."""
from __future__ import annotations

import importlib.util
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kafka_client
from kafka_client import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from kafka_client._error_codes import ErrorCodeConstants
from kafka_client.errors import client_error
from kafka_client.types import error_event

ck = pytest.importorskip("confluent_kafka")

HAVE_TABLE = importlib.util.find_spec("kafka_proto._error_table") is not None


# --- KafkaError ---

LOCAL_CODES = {
    "_BAD_MSG": -199, "_BAD_COMPRESSION": -198, "_DESTROY": -197, "_FAIL": -196,
    "_TRANSPORT": -195, "_RESOLVE": -193, "_MSG_TIMED_OUT": -192, "_PARTITION_EOF": -191,
    "_UNKNOWN_PARTITION": -190, "_UNKNOWN_TOPIC": -188, "_ALL_BROKERS_DOWN": -187,
    "_INVALID_ARG": -186, "_TIMED_OUT": -185, "_QUEUE_FULL": -184, "_STATE": -172,
    "_NOT_IMPLEMENTED": -170, "_AUTHENTICATION": -169, "_PURGE_QUEUE": -152,
    "_PURGE_INFLIGHT": -151, "_FATAL": -150, "_VALUE_SERIALIZATION": -161,
    "_KEY_SERIALIZATION": -162, "_VALUE_DESERIALIZATION": -159, "_KEY_DESERIALIZATION": -160,
    "_AUTO_OFFSET_RESET": -140,
}


@pytest.mark.parametrize("name,code", sorted(LOCAL_CODES.items()))
def test_local_codes_have_librdkafka_values(name, code):
    assert getattr(KafkaError, name) == code


def _ck_constant_names():
    return [n for n in dir(ck.KafkaError)
            if n.lstrip("_")[:1].isupper() and isinstance(getattr(ck.KafkaError, n), int)]


def test_every_shared_constant_equals_confluents():
    """Every constant both classes define has the same value (ours may have more names)."""
    shared = [n for n in _ck_constant_names() if hasattr(KafkaError, n)]
    mismatched = {n: (getattr(KafkaError, n), getattr(ck.KafkaError, n)) for n in shared
                  if getattr(KafkaError, n) != getattr(ck.KafkaError, n)}
    assert mismatched == {}
    local = [n for n in _ck_constant_names() if n.startswith("_")]
    assert all(hasattr(KafkaError, n) for n in local)  # every local code is present
    assert len(shared) >= len(local) + 9


def test_every_code_constant_is_declared_for_type_checkers():
    """The constants are set at import; a user's type checker sees only the names
    ErrorCodeConstants declares: the two sets are the same (both ways)."""
    declared = set(ErrorCodeConstants.__annotations__)
    installed = {n for n, v in vars(KafkaError).items()
                 if n.lstrip("_")[:1].isupper() and isinstance(v, int)}
    assert installed - declared == set()
    assert declared - installed == set()
    assert len(declared) > 200


@pytest.mark.skipif(not HAVE_TABLE, reason="kafka_proto._error_table not generated yet")
def test_broker_constants_cover_confluents():
    missing = [n for n in _ck_constant_names() if not n.startswith("_")
               and getattr(ck.KafkaError, n) <= 128 and not hasattr(KafkaError, n)]
    assert missing == []
    assert KafkaError.NOT_LEADER_OR_FOLLOWER == KafkaError.NOT_LEADER_FOR_PARTITION == 6
    assert KafkaError.REQUEST_TIMED_OUT == 7
    # the client's own errors carry the table's flag; KafkaError(code) defaults to False
    assert client_error(KafkaError.REQUEST_TIMED_OUT).retriable() is True
    assert client_error(KafkaError.TOPIC_AUTHORIZATION_FAILED).retriable() is False
    assert KafkaError(KafkaError.REQUEST_TIMED_OUT).retriable() is False


@pytest.mark.parametrize("code", [-191, -192, -186, -185, -184, -1, 0, 3, 6])
def test_name_and_repr_match_confluent(code):
    ours, theirs = KafkaError(code, "why"), ck.KafkaError(code, "why")
    assert ours.name() == theirs.name()
    assert ours.code() == theirs.code() == code
    assert repr(ours) == repr(theirs)
    assert str(ours) == str(theirs)
    fatal = KafkaError(code, "x", fatal=True)
    assert repr(fatal) == repr(ck.KafkaError(code, "x", fatal=True))


def test_error_defaults_and_flags():
    e = KafkaError(KafkaError._PARTITION_EOF)
    assert e.code() == -191 and e.name() == "_PARTITION_EOF"
    assert e.str() == ck.KafkaError(-191).str() == "Broker: No more messages"
    assert (e.fatal(), e.retriable(), e.txn_requires_abort()) == (False, False, False)
    e = KafkaError(-186, "bad", fatal=True, retriable=True, txn_requires_abort=True)
    assert (e.str(), e.fatal(), e.retriable(), e.txn_requires_abort()) == ("bad", True, True, True)
    assert KafkaError(KafkaError._TRANSPORT).retriable() is False      # confluent's default
    assert KafkaError(KafkaError._TRANSPORT, retriable=True).retriable() is True
    assert client_error(KafkaError._TRANSPORT).retriable() is True
    assert client_error(KafkaError._INVALID_ARG).retriable() is False
    assert client_error(KafkaError._FATAL, "x", fatal=True).fatal() is True
    for code in (-195, -185, 6, 7, 16, 1, 10, 29):
        theirs = ck.KafkaError(code, "r")
        assert (KafkaError(code, "r").retriable(), KafkaError(code, "r").fatal(),
                KafkaError(code, "r").txn_requires_abort()) == \
            (theirs.retriable(), theirs.fatal(), theirs.txn_requires_abort()) == \
            (False, False, False)
    unknown = KafkaError(12345)
    assert unknown.name() == ck.KafkaError(12345).name() == "ERR_12345?"
    assert "12345" in unknown.str()
    copy = KafkaError(KafkaError(-191, "r"))
    assert copy.code() == -191
    with pytest.raises(TypeError):
        KafkaError("x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        KafkaError(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        KafkaError(1, reason=5)  # type: ignore[arg-type]


def test_error_equality_hash_ordering():
    a, b = KafkaError(7), KafkaError(7, "other reason", fatal=True)
    assert a == b and a == 7 and 7 == a and not (a != 7)
    assert hash(a) == hash(b) == hash(7)
    assert a != KafkaError(8) and a != 8
    assert KafkaError(3) < KafkaError(4) and KafkaError(3) < 4 and KafkaError(5) >= 5
    assert KafkaError(-191) <= -191
    assert (a == "7") is False
    assert len({a, b, KafkaError(8)}) == 2
    assert bool(KafkaError(0)) is True  # like confluent: an error object is always truthy
    # the same answers as confluent-kafka for the same comparisons
    assert (ck.KafkaError(7) == 7, ck.KafkaError(3) < ck.KafkaError(4)) == (True, True)


def test_error_pickles():
    e = KafkaError(-192, "timed out", fatal=True, retriable=False, txn_requires_abort=True)
    back = pickle.loads(pickle.dumps(e))
    assert (back.code(), back.str(), back.fatal(), back.retriable(),
            back.txn_requires_abort()) == (-192, "timed out", True, False, True)


def test_kafka_exception_carries_kafka_error():
    err = KafkaError(KafkaError._INVALID_ARG, "bad property")
    exc = KafkaException(err)
    assert exc.args[0] is err and exc.error is err
    assert str(exc) == str(err) == str(ck.KafkaException(ck.KafkaError(-186, "bad property")))
    # Other arguments are kept as given, as confluent-kafka keeps them.
    for args in [(KafkaError._QUEUE_FULL,), (-186, "reason"), ("text",), ()]:
        exc = KafkaException(*args)
        assert exc.args == ck.KafkaException(*args).args == args and exc.error is None
        assert str(exc) == str(ck.KafkaException(*args))
    with pytest.raises(KafkaException) as info:
        raise KafkaException(KafkaError(-185))
    assert info.value.args[0].code() == -185
    assert isinstance(exc, Exception)


# --- TopicPartition ---

def test_offset_and_timestamp_constants_match_confluent():
    pairs = {
        "OFFSET_BEGINNING": OFFSET_BEGINNING, "OFFSET_END": OFFSET_END,
        "OFFSET_STORED": OFFSET_STORED, "OFFSET_INVALID": OFFSET_INVALID,
        "TIMESTAMP_NOT_AVAILABLE": TIMESTAMP_NOT_AVAILABLE,
        "TIMESTAMP_CREATE_TIME": TIMESTAMP_CREATE_TIME,
        "TIMESTAMP_LOG_APPEND_TIME": TIMESTAMP_LOG_APPEND_TIME,
    }
    assert pairs == {n: getattr(ck, n) for n in pairs}
    assert (OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, OFFSET_INVALID) == (-2, -1, -1000, -1001)
    assert (TIMESTAMP_NOT_AVAILABLE, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME) == (0, 1, 2)


@pytest.mark.parametrize("args,kwargs", [
    (("t",), {}),
    (("t", 1), {}),
    (("t", 1, 5), {}),
    (("t", 1, 5, "md"), {}),
    (("t", 1, 5, "md", 7), {}),
    (("t",), {"leader_epoch": -1}),
    (("topic-x", 2), {"offset": OFFSET_BEGINNING}),
    (("t", 2**31 - 1, 2**63 - 1), {}),
])
def test_topic_partition_matches_confluent(args, kwargs):
    ours, theirs = TopicPartition(*args, **kwargs), ck.TopicPartition(*args, **kwargs)
    assert repr(ours) == repr(theirs)
    assert str(ours) == str(theirs)
    for attr in ("topic", "partition", "offset", "metadata", "leader_epoch", "error"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr


def test_topic_partition_defaults_and_mutability():
    tp = TopicPartition("t")
    assert (tp.topic, tp.partition, tp.offset, tp.metadata, tp.leader_epoch, tp.error) == (
        "t", -1, OFFSET_INVALID, None, None, None)
    tp.offset = 10
    tp.partition = 3
    assert (tp.partition, tp.offset) == (3, 10)
    for attr in ("topic", "metadata", "leader_epoch", "error"):
        with pytest.raises(AttributeError):
            setattr(tp, attr, None)
    with pytest.raises(AttributeError):
        tp.unknown = 1  # type: ignore[attr-defined]
    err = KafkaError(3)
    assert tp._set_error(err) is tp and tp.error is err
    assert "error=KafkaError{code=UNKNOWN_TOPIC_OR_PART" in repr(tp)


@pytest.mark.parametrize("bad,exc", [
    ((None,), TypeError), ((b"t",), TypeError), (("t", "x"), TypeError),
    (("t", 0, 0, 5), TypeError), (("t", 0, 0, None, "a"), TypeError),
    (("t", 2**40), OverflowError), (("t", 0, 2**64), OverflowError),
])
def test_topic_partition_rejects_bad_arguments_like_confluent(bad, exc):
    with pytest.raises(exc):
        TopicPartition(*bad)
    with pytest.raises((TypeError, OverflowError)):
        ck.TopicPartition(*bad)


def test_topic_partition_equality_hash_ordering():
    a = TopicPartition("a", 1, 5, "m")
    assert a == TopicPartition("a", 1, 99) and hash(a) == hash(TopicPartition("a", 1, 99))
    assert a != TopicPartition("a", 2) and a != TopicPartition("b", 1)
    assert (a == ("a", 1)) is False
    tps = [TopicPartition("b", 0), TopicPartition("a", 5), TopicPartition("a", 1)]
    ctps = [ck.TopicPartition("b", 0), ck.TopicPartition("a", 5), ck.TopicPartition("a", 1)]
    assert [repr(t) for t in sorted(tps)] == [repr(t) for t in sorted(ctps)]
    assert TopicPartition("a", 1) <= TopicPartition("a", 1) < TopicPartition("a", 2)
    assert TopicPartition("b", 0) > TopicPartition("a", 9) >= TopicPartition("a", 9)
    assert len({TopicPartition("a", 1, 1), TopicPartition("a", 1, 2)}) == 1
    with pytest.raises(TypeError):
        TopicPartition("a") < 5  # type: ignore[operator]


def test_topic_partition_pickles():
    tp = TopicPartition("t", 3, 42, "meta", 9)._set_error(KafkaError(6))
    back = pickle.loads(pickle.dumps(tp))
    assert repr(back) == repr(tp) and back.metadata == "meta" and back.error == 6


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1, max_size=20), st.integers(-1, 2**31 - 1),
       st.integers(-1001, 2**63 - 1), st.one_of(st.none(), st.text(max_size=10)),
       st.one_of(st.none(), st.integers(-1, 2**31 - 1)))
def test_topic_partition_repr_matches_confluent_property(topic, partition, offset, md, epoch):
    if "\x00" in topic or (md is not None and "\x00" in md):
        return  # confluent's C strings cannot hold NUL
    ours = TopicPartition(topic, partition, offset, md, epoch)
    extra = {}  # confluent rejects an explicit None for metadata and leader_epoch
    if md is not None:
        extra["metadata"] = md
    if epoch is not None:
        extra["leader_epoch"] = epoch
    theirs = ck.TopicPartition(topic, partition, offset, **extra)
    assert repr(ours) == repr(theirs)
    assert ours.leader_epoch == theirs.leader_epoch


# --- Message ---

def test_message_accessors_match_confluent():
    kwargs = dict(topic="t", partition=1, offset=5, key=b"k", value=b"value",
                  headers=[("h", b"1"), ("h", None)], error=None, timestamp=(1, 123),
                  latency=0.5, leader_epoch=3)
    ours, theirs = Message(**kwargs), ck.Message(**kwargs)
    for name in ("topic", "partition", "offset", "key", "value", "headers", "error",
                 "timestamp", "latency", "leader_epoch"):
        assert getattr(ours, name)() == getattr(theirs, name)(), name
    assert len(ours) == len(theirs) == 5


def test_message_defaults_match_confluent():
    ours, theirs = Message(), ck.Message()
    for name in ("topic", "partition", "offset", "key", "value", "headers", "error",
                 "timestamp", "latency", "leader_epoch"):
        assert getattr(ours, name)() == getattr(theirs, name)(), name
    assert ours.timestamp() == (TIMESTAMP_NOT_AVAILABLE, 0)
    assert len(ours) == 0
    assert Message(leader_epoch=-1).leader_epoch() is None


def test_message_setters_and_error_event():
    m = Message("t", 0, 1, b"k", b"v")
    m.set_value(b"abc")
    m.set_key(b"z")
    m.set_headers([("a", None)])
    m.set_topic("u")
    assert (m.value(), m.key(), m.headers(), m.topic(), len(m)) == (
        b"abc", b"z", [("a", None)], "u", 3)
    m.set_value(None)
    assert len(m) == 0 and m.value() is None
    m.set_value(bytearray(b"12345"))
    assert len(m) == 5
    m.set_value(memoryview(b"1234"))
    assert len(m) == 4
    m.set_error(KafkaError(KafkaError._PARTITION_EOF))
    assert m.error() == KafkaError._PARTITION_EOF
    assert "_PARTITION_EOF" in repr(m)
    with pytest.raises(AttributeError):
        m.extra = 1  # type: ignore[attr-defined]


def test_message_is_slotted_and_pickles():
    m = Message("t", 2, 9, b"k", b"v", [("h", b"x")], None, (TIMESTAMP_LOG_APPEND_TIME, 77),
                None, 4)
    assert not hasattr(m, "__dict__")
    back = pickle.loads(pickle.dumps(m))
    assert (back.topic(), back.partition(), back.offset(), back.key(), back.value(),
            back.headers(), back.timestamp(), back.leader_epoch()) == (
        "t", 2, 9, b"k", b"v", [("h", b"x")], (2, 77), 4)
    assert repr(m) == "Message{topic=t,partition=2,offset=9,len=1}"


def test_package_exports():
    for name in ("KafkaError", "KafkaException", "TopicPartition", "Message", "ClientConfig",
                 "OFFSET_BEGINNING", "OFFSET_END", "OFFSET_STORED", "OFFSET_INVALID",
                 "TIMESTAMP_NOT_AVAILABLE", "TIMESTAMP_CREATE_TIME",
                 "TIMESTAMP_LOG_APPEND_TIME"):
        assert name in kafka_client.__all__ and getattr(kafka_client, name) is not None
    with pytest.raises(AttributeError):
        kafka_client.NoSuchThing  # type: ignore[attr-defined]


def test_a_consumer_error_event_carries_its_text_as_value_like_librdkafkas():
    """librdkafka puts an error event's text in the message payload: applications print
    or parse ``msg.value()`` of an error (e.g. "Subscribed topic not available: t: ...");
    its timestamp is (TIMESTAMP_NOT_AVAILABLE, -1). A negative offset reads back None."""
    err = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART,
                     "Subscribed topic not available: t: Broker: Unknown topic or partition")
    m = error_event(err, "t")
    assert m.error() is err and m.topic() == "t" and m.partition() is None
    assert m.value() == err.str().encode() and len(m) == len(err.str())
    assert m.timestamp() == (TIMESTAMP_NOT_AVAILABLE, -1) and m.key() is None
    m = error_event(KafkaError(KafkaError._AUTO_OFFSET_RESET), "t", 0, -1)
    assert (m.partition(), m.offset()) == (0, None)
