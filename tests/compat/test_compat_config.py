"""confluent-kafka drop-in: ``None`` as a configuration value. Every typed property of
the table (numbers, booleans, enums, lists, the strings librdkafka checks) set to None
is refused exactly when confluent-kafka refuses it, with librdkafka's words; strings,
callbacks and the logger set to None mean "not set". Side by side, no broker needed."""
from __future__ import annotations

import logging
import uuid

import pytest

from kafka_client import Consumer, KafkaError, KafkaException, Producer
from kafka_client.config import PROPERTIES

ck = pytest.importorskip("confluent_kafka")

#: librdkafka names these by its own canonical name ("queue.buffering.max.ms" for
#: linger.ms, ...); ours names the property as the application wrote it
_THEIR_NAME = {"linger.ms": "queue.buffering.max.ms", "acks": "request.required.acks",
               "retries": "message.send.max.retries", "compression.type": "compression.codec",
               "max.partition.fetch.bytes": "fetch.message.max.bytes",
               "sasl.mechanism": "sasl.mechanisms"}
#: where the two differ on purpose or by platform (see docs/migrating.md)
_DIFFERENT_TEXT = {
    "debug",                        # theirs: 'Invalid value "None" for ... "debug"'
    "delivery.report.only.error",   # theirs: TypeError from confluent-kafka's Python layer
}
_WINDOWS_ONLY = {"ssl.ca.certificate.stores"}  # refused by librdkafka on Linux, any value
#: confluent-kafka passes None as the text "None": a plugin of that name fails to load
_NONE_AS_TEXT = {"plugin.library.paths"}

#: the Java client's, where librdkafka has no equivalent (confluent-kafka knows no such name)
_NOT_IN_LIBRDKAFKA = {"metadata.max.idle.ms"}

TYPED = sorted(name for name, prop in PROPERTIES.items()
               if prop.type not in ("callable", "logger", "mapping", "any")
               and name not in _WINDOWS_ONLY | _NONE_AS_TEXT | _NOT_IN_LIBRDKAFKA)


def _theirs(name, value=None):
    conf = {"log_level": 0, name: value}
    try:
        if PROPERTIES[name].scope == "C":
            ck.Consumer(dict(conf, **{"group.id": "g"})).close()
        else:
            ck.Producer(conf)
    except ck.KafkaException as exc:
        return "KafkaException", exc.args[0].str()
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        return type(exc).__name__, str(exc)
    return None, None


def _ours(name, value=None):
    cls = Consumer if PROPERTIES[name].scope == "C" else Producer
    conf = {name: value}
    if cls is Consumer:
        conf["group.id"] = "g"
    try:
        client = cls(conf)
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError._INVALID_ARG
        return "KafkaException", exc.args[0].str()
    client.close()
    return None, None


@pytest.fixture(autouse=True)
def quiet():
    logging.disable(logging.WARNING)  # "No bootstrap.servers configured", ignored names
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("name", TYPED)
def test_none_is_refused_exactly_where_librdkafka_refuses_it(name):
    their_type, their_text = _theirs(name)
    our_type, our_text = _ours(name)
    assert (our_type is None) == (their_type is None), (their_text, our_text)
    if our_type is None or name in _DIFFERENT_TEXT:
        return
    assert their_type == "KafkaException"
    assert our_text == their_text.replace(f'"{_THEIR_NAME.get(name, name)}"', f'"{name}"')


#: "" refused here and taken there: an empty assignor list or group protocol type would
#: only fail later, at subscribe() or at the broker
_EMPTY_REFUSED_HERE = {"partition.assignment.strategy", "group.protocol.type"}


@pytest.mark.parametrize("name", TYPED)
def test_empty_string_is_refused_exactly_where_librdkafka_refuses_it(name):
    """sasl.mechanism, broker.version.fallback, debug and builtin.features set to "" were
    taken here (as no value / an empty list); librdkafka refuses them as it refuses
    None."""
    their_type, their_text = _theirs(name, "")
    our_type, our_text = _ours(name, "")
    if name in _EMPTY_REFUSED_HERE:
        assert their_type is None and our_type == "KafkaException"
        return
    assert (our_type is None) == (their_type is None), (their_text, our_text)
    if our_type is None or name in _DIFFERENT_TEXT:
        return
    assert their_type == "KafkaException"
    assert our_text == their_text.replace(f'"{_THEIR_NAME.get(name, name)}"', f'"{name}"')


def test_the_typed_properties_checked_cover_every_kind():
    kinds = {PROPERTIES[name].type for name in TYPED}
    assert {"int", "float", "bool", "enum", "csv", "str"} <= kinds
    assert len(TYPED) > 100


@pytest.mark.parametrize("conf", [{"linger_ms": None}, {"default.topic.config": {"acks": None}}])
def test_none_through_keywords_and_the_topic_dict_is_refused_too(conf):
    kwargs = {k: v for k, v in conf.items() if "_" in k}
    config = {k: v for k, v in conf.items() if "_" not in k}
    with pytest.raises(KafkaException) as exc:
        Producer(config, **kwargs)
    assert "cannot be set to empty value" in exc.value.args[0].str()


def test_none_partitioner_gets_librdkafkas_words():
    with pytest.raises(ck.KafkaException) as theirs:
        ck.Producer({"partitioner": None})
    with pytest.raises(KafkaException) as ours:
        Producer({"partitioner": None})
    assert ours.value.args[0].str() == theirs.value.args[0].str()


def test_none_for_strings_and_the_logger_means_not_set_as_there():
    for name in ("client.id", "bootstrap.servers", "sasl.username", "logger"):
        ck.Producer({name: None, "log_level": 0})
        Producer({name: None}).close()
    p = Producer({"client.id": None})
    assert p._config["client.id"] == PROPERTIES["client.id"].default
    p.close()


class _Named:
    def __str__(self):
        return "named-by-str"


@pytest.mark.parametrize("value", [uuid.UUID(int=7), _Named(), True, 2.5])
def test_a_string_property_takes_str_of_any_object_as_there(value):
    """confluent-kafka's own integration tests pass a uuid.UUID as group.id: it takes
    str() of any object for a string property; ours refused what was not str, int or
    float."""
    theirs = ck.Consumer({"group.id": value, "log_level": 0})
    theirs.close()
    ours = Consumer({"group.id": value})
    assert ours._config["group.id"] == str(value)
    ours.close()


@pytest.mark.parametrize("name,client", [
    ("error_cb", "Producer"), ("stats_cb", "Consumer"), ("throttle_cb", "Producer"),
    ("oauth_cb", "Consumer"), ("on_delivery", "Producer"), ("on_commit", "Consumer"),
])
def test_a_callback_that_is_not_callable_raises_what_confluent_kafka_raises(name, client):
    """confluent-kafka raises TypeError for error_cb/stats_cb/oauth_cb, ValueError for
    throttle_cb and KafkaException(_INVALID_ARG) for on_delivery/on_commit; ours raised
    the KafkaException for all of them, which the except clause of code written for
    confluent-kafka does not catch. Ours is all three, naming the property."""
    conf = {"log_level": 0, "group.id": "g", name: 5}
    if client == "Producer":
        del conf["group.id"]
    with pytest.raises(Exception) as theirs:
        getattr(ck, client)(conf)
    with pytest.raises(Exception) as ours:
        getattr(__import__("kafka_client"), client)(conf)
    their_class = type(theirs.value)
    ours_should_be = KafkaException if their_class is ck.KafkaException else their_class
    assert isinstance(ours.value, ours_should_be), (theirs.value, ours.value)
    assert isinstance(ours.value, KafkaException) and isinstance(ours.value, TypeError)
    assert ours.value.args[0].code() == KafkaError._INVALID_ARG
    assert f'"{name}": expected a callable' in ours.value.args[0].str()
