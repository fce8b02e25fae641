"""confluent-kafka drop-in: the `error` module, its exceptions and librdkafka's error wording,
checked side by side with confluent-kafka itself (installed by the test extras)."""
from __future__ import annotations

import pickle

import pytest

import kafka_client
from kafka_client import KafkaError, KafkaException
from kafka_client.error import (
    ConsumeError,
    KeyDeserializationError,
    KeySerializationError,
    ProduceError,
    SerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)

ck = pytest.importorskip("confluent_kafka")
import confluent_kafka.error as ck_error  # noqa: E402


def test_error_and_errors_are_one_module():
    import kafka_client.error as a
    import kafka_client.errors as b

    assert a is b is kafka_client.error
    assert a.KafkaError is KafkaError and a.KafkaException is KafkaException


def test_every_name_of_confluents_error_module_exists():
    public = {n for n in dir(ck_error) if not n.startswith("_")} - {"Optional", "Message"}
    missing = sorted(n for n in public if not hasattr(kafka_client.error, n))
    assert missing == []


@pytest.mark.parametrize("code", range(-199, -136))
def test_local_error_names_and_texts_match_librdkafka(code):
    ours, theirs = KafkaError(code), ck.KafkaError(code)
    assert (ours.name(), ours.str()) == (theirs.name(), theirs.str())
    assert repr(ours) == repr(theirs) and str(KafkaException(ours)) == str(ck.KafkaException(theirs))


def test_every_error_constant_of_confluent_exists_with_its_code():
    names = [n for n in dir(ck.KafkaError) if n.isupper() or n.startswith("_") and n[1:2].isupper()]
    assert len(names) > 180
    assert {n: getattr(KafkaError, n, None) for n in names} == \
        {n: getattr(ck.KafkaError, n) for n in names}
    assert KafkaError(133).name() == ck.KafkaError(133).name() == "SHARE_SESSION_LIMIT_REACHED"


def test_success_and_unknown_texts_match():
    for code in (0, -1):
        assert KafkaError(code).str() == ck.KafkaError(code).str()


@pytest.mark.parametrize("code", [12345, -12345, 1000, -200, -100, -99])
def test_a_code_neither_knows_reads_as_librdkafka_writes_it(code):
    # "Err-12345?": what an application logs, or matches, for a code it has no name for
    ours, theirs = KafkaError(code), ck.KafkaError(code)
    assert (ours.name(), ours.str()) == (theirs.name(), theirs.str()) == \
        (f"ERR_{code}?", f"Err-{code}?")
    assert str(KafkaException(ours)) == str(ck.KafkaException(theirs))


def test_exception_hierarchy_matches():
    pairs = [
        (ConsumeError, ck_error.ConsumeError), (ProduceError, ck_error.ProduceError),
        (KeySerializationError, ck_error.KeySerializationError),
        (ValueSerializationError, ck_error.ValueSerializationError),
        (KeyDeserializationError, ck_error.KeyDeserializationError),
        (ValueDeserializationError, ck_error.ValueDeserializationError),
    ]
    for ours, theirs in pairs:
        for base_ours, base_theirs in [(KafkaException, ck.KafkaException),
                                       (SerializationError, ck_error.SerializationError),
                                       (ConsumeError, ck_error.ConsumeError),
                                       (ProduceError, ck_error.ProduceError)]:
            assert issubclass(ours, base_ours) == issubclass(theirs, base_theirs), (ours, base_ours)


def test_serialization_errors_carry_code_text_and_cause():
    cause = ValueError("bad input")
    cases = [
        (KeySerializationError(cause), ck_error.KeySerializationError(cause)),
        (ValueSerializationError(exception=cause), ck_error.ValueSerializationError(exception=cause)),
        (KeyDeserializationError(cause, "m"), ck_error.KeyDeserializationError(cause, "m")),
        (ValueDeserializationError(exception=cause, kafka_message="m"),
         ck_error.ValueDeserializationError(exception=cause, kafka_message="m")),
        (ValueSerializationError(), ck_error.ValueSerializationError()),
    ]
    for ours, theirs in cases:
        assert (ours.code, ours.name, str(ours), repr(ours)) == \
            (theirs.code, theirs.name, str(theirs), repr(theirs))
        assert ours.exception is theirs.exception
        assert getattr(ours, "kafka_message", None) == getattr(theirs, "kafka_message", None)
        assert isinstance(ours.args[0], KafkaError)


def test_consume_and_produce_error_constructors():
    err = KafkaError(KafkaError._PARTITION_EOF)
    ce = ConsumeError(err, kafka_message="msg")
    ck_ce = ck_error.ConsumeError(ck.KafkaError(-191), kafka_message="msg")
    assert (ce.code, ce.name, ce.kafka_message, ce.exception) == \
        (ck_ce.code, ck_ce.name, ck_ce.kafka_message, ck_ce.exception)
    assert repr(ce) == repr(ck_ce)
    pe = ProduceError(KafkaError(KafkaError._QUEUE_FULL))
    ck_pe = ck_error.ProduceError(ck.KafkaError(-184))
    assert (pe.code, pe.name, str(pe)) == (ck_pe.code, ck_pe.name, str(ck_pe))
    with pytest.raises(TypeError):
        ProduceError(err, None, "no message argument here")


def test_serialization_error_is_a_plain_kafka_exception():
    e = SerializationError("oops")
    theirs = ck_error.SerializationError("oops")
    assert e.args == theirs.args and str(e) == str(theirs)
    assert isinstance(e, KafkaException) and e.error is None
    assert SerializationError().args == ()


def test_errors_pickle():
    back = pickle.loads(pickle.dumps(KafkaException(KafkaError(-185, "slow"))))
    assert back.args[0].code() == -185 and back.args[0].str() == "slow"
    for e in (KeyDeserializationError(ValueError("x"), "msg"), ConsumeError(KafkaError(5)),
              ValueSerializationError(ValueError("y"))):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and (back.code, back.name) == (e.code, e.name)
        assert str(back.exception) == str(e.exception) and back.kafka_message == e.kafka_message


def test_a_message_timed_out_reports_librdkafkas_words_first():
    # No broker answers: the message times out waiting for its topic's metadata. The
    # report's text starts as confluent-kafka's ("Local: Message timed out"), which
    # applications and log searches match; what it waited for follows.
    reports = {}

    def record(who):
        return lambda err, msg: reports.setdefault(who, err)

    conf = {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 10}
    ours = kafka_client.Producer(conf)
    theirs = ck.Producer({**conf, "log_level": 0})
    try:
        ours.produce("t", b"v", on_delivery=record("ours"))
        theirs.produce("t", b"v", on_delivery=record("theirs"))
        assert ours.flush(30) == 0 and theirs.flush(30) == 0
    finally:
        ours.close(0)
    assert reports["theirs"].code() == reports["ours"].code() == KafkaError._MSG_TIMED_OUT
    assert reports["theirs"].str() == "Local: Message timed out"
    assert reports["ours"].str() == "Local: Message timed out (waiting for metadata of topic t)"
