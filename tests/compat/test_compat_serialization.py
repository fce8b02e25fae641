"""confluent-kafka drop-in: the serialization module and the serializing clients."""
from __future__ import annotations

import struct
import time

import pytest

import kafka_client
from kafka_client import DeserializingConsumer, SerializingProducer
from kafka_client.error import (
    ConsumeError,
    KeyDeserializationError,
    KeySerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)
from kafka_client.serialization import (
    DoubleDeserializer,
    DoubleSerializer,
    IntegerDeserializer,
    IntegerSerializer,
    MessageField,
    SerializationContext,
    SerializationError,
    Serializer,
    StringDeserializer,
    StringSerializer,
)

ck = pytest.importorskip("confluent_kafka")
import confluent_kafka.serialization as ck_ser  # noqa: E402

CTX = SerializationContext("t", MessageField.VALUE)


def test_every_name_of_confluents_serialization_module_exists():
    typing_names = {"Any", "Callable", "Dict", "List", "Optional", "Tuple", "Enum"}
    public = {n for n in dir(ck_ser) if not n.startswith("_")} - typing_names - {"KafkaException"}
    assert sorted(n for n in public if not hasattr(kafka_client.serialization, n)) == []


@pytest.mark.parametrize("name", ["Serializer", "Deserializer", "SerializerBuilder",
                                  "DeserializerBuilder"])
def test_serde_base_classes_have_confluents_methods(name):
    """confluent-kafka 2.16's serde lifecycle: serdes have ``close()`` and
    ``set_cluster_id_resolver()`` (no-ops in the base classes), builders ``build()``."""
    def methods(cls):
        return {m for m in dir(cls) if not m.startswith("_")}
    theirs = getattr(ck_ser, name)
    assert methods(getattr(kafka_client.serialization, name)) == methods(theirs)
    if name.endswith("Builder"):
        with pytest.raises(NotImplementedError):
            getattr(kafka_client.serialization, name)().build({}, True)
    else:
        serde = getattr(kafka_client.serialization, name)()
        assert serde.close() is None and serde.set_cluster_id_resolver(lambda: "c") is None


@pytest.mark.parametrize("ours, theirs, values", [
    (StringSerializer(), ck_ser.StringSerializer(), ["", "héllo", "a" * 1000, None]),
    (StringSerializer("latin-1"), ck_ser.StringSerializer("latin-1"), ["héllo"]),
    (IntegerSerializer(), ck_ser.IntegerSerializer(), [0, -1, 2**31 - 1, -2**31, None]),
    (DoubleSerializer(), ck_ser.DoubleSerializer(), [0.0, -1.5, 1e300, float("inf"), None]),
])
def test_serializers_give_confluents_bytes(ours, theirs, values):
    for v in values:
        assert ours(v, CTX) == theirs(v, CTX)
        assert ours(v) == theirs(v)


@pytest.mark.parametrize("ours, theirs, values", [
    (StringDeserializer(), ck_ser.StringDeserializer(), [b"", "héllo".encode(), None]),
    (IntegerDeserializer(), ck_ser.IntegerDeserializer(), [b"\x00\x00\x00\x05", b"\xff" * 4, None]),
    (DoubleDeserializer(), ck_ser.DoubleDeserializer(), [struct.pack(">d", 2.5), None]),
])
def test_deserializers_give_confluents_values(ours, theirs, values):
    for v in values:
        assert ours(v, CTX) == theirs(v, CTX)


@pytest.mark.parametrize("fn, bad", [
    (IntegerSerializer(), 2**31), (IntegerSerializer(), "x"), (IntegerSerializer(), 1.5),
    (DoubleSerializer(), "x"), (IntegerDeserializer(), b"\x00"), (IntegerDeserializer(), b"12345"),
    (DoubleDeserializer(), b"1"), (StringDeserializer(), b"\xff"),
    (StringSerializer(), 5), (StringSerializer(), b"bytes"),
])
def test_bad_values_raise_serialization_error(fn, bad):
    with pytest.raises(SerializationError):
        fn(bad, CTX)


@pytest.mark.parametrize("name, bad", [
    ("StringSerializer", 5), ("StringSerializer", b"bytes"), ("StringSerializer", [1]),
    ("StringDeserializer", 5), ("StringDeserializer", "text"), ("StringDeserializer", 2.5),
    ("IntegerDeserializer", 5), ("IntegerDeserializer", "text"),
    ("DoubleDeserializer", True), ("DoubleDeserializer", [1]),
])
def test_wrong_types_raise_confluents_builtin_error_as_a_serialization_error(name, bad):
    with pytest.raises((AttributeError, TypeError)) as theirs:
        getattr(ck_ser, name)()(bad, CTX)
    # StringDeserializer()(5) used to decode bytes(5): five NULs, no error
    with pytest.raises(SerializationError) as ours:
        getattr(kafka_client.serialization, name)()(bad, CTX)
    assert isinstance(ours.value, type(theirs.value))
    assert type(bad).__name__ in str(ours.value)


def test_unknown_codec_is_refused_at_construction():
    with pytest.raises(LookupError):
        StringSerializer("no-such-codec")
    with pytest.raises(LookupError):
        StringDeserializer("no-such-codec")
    # A known one is kept as given, as confluent-kafka keeps it ("latin-1" was
    # normalized to "iso8859-1")
    for codec in ("latin-1", "UTF-8", "utf_8"):
        assert StringSerializer(codec).codec == ck_ser.StringSerializer(codec).codec
        assert StringDeserializer(codec).codec == ck_ser.StringDeserializer(codec).codec


def test_base_classes_and_context():
    with pytest.raises(NotImplementedError):
        Serializer()("x")
    ctx = SerializationContext("topic", MessageField.KEY, [("h", b"1")])
    theirs = ck_ser.SerializationContext("topic", ck_ser.MessageField.KEY, [("h", b"1")])
    assert (ctx.topic, ctx.field.value, ctx.headers) == (theirs.topic, theirs.field.value, theirs.headers)
    assert {m.name: m.value for m in MessageField} == {m.name: m.value for m in ck_ser.MessageField}
    assert MessageField.KEY == "key"
    # As text too: a Schema Registry subject is made as f"{topic}-{ctx.field}".
    for ours, theirs in ((MessageField.KEY, ck_ser.MessageField.KEY),
                         (MessageField.VALUE, ck_ser.MessageField.VALUE)):
        assert (str(ours), f"{ours}", "%s" % ours) == (str(theirs), f"{theirs}", "%s" % theirs)


def test_serializer_config_must_be_callable():
    with pytest.raises(TypeError, match="key.serializer"):
        SerializingProducer({"bootstrap.servers": "127.0.0.1:1", "key.serializer": 5})
    with pytest.raises(TypeError, match="value.deserializer"):
        DeserializingConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g",
                               "value.deserializer": "nope"})


def test_serialization_failure_queues_nothing():
    def boom(obj, ctx):
        raise ValueError(f"cannot serialize {obj!r} for {ctx.field.value}")

    p = SerializingProducer({"bootstrap.servers": "127.0.0.1:1", "key.serializer": boom})
    try:
        with pytest.raises(KeySerializationError) as ei:
            p.produce("t", key="k", value=b"v")
        assert "for key" in str(ei.value) and isinstance(ei.value.exception, ValueError)
        assert len(p) == 0
        # A topic that is not a str is refused before any serializer runs (they may
        # register schemas), as confluent-kafka does.
        with pytest.raises(TypeError, match="topic"):
            p.produce(5, key="k", value=b"v")
        p2 = SerializingProducer({"bootstrap.servers": "127.0.0.1:1", "value.serializer": boom})
        with pytest.raises(ValueSerializationError):
            p2.produce("t", value=1)
        assert len(p2) == 0
        p2.close()
    finally:
        p.close()


def test_deserializing_consumer_refuses_consume():
    c = DeserializingConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    try:
        with pytest.raises(NotImplementedError):
            c.consume(1, 0)
    finally:
        c.close()


def test_serializing_round_trip_through_the_broker(tansu_broker, topic_name):
    tansu_broker.create_topic(topic_name, partitions=1)
    seen_ctx = []

    def key_ser(obj, ctx):
        seen_ctx.append((ctx.topic, ctx.field, ctx.headers))
        return IntegerSerializer()(obj, ctx)

    reports = []
    p = SerializingProducer({"bootstrap.servers": tansu_broker.bootstrap,
                             "key.serializer": key_ser, "value.serializer": StringSerializer()})
    for i in range(20):
        p.produce(topic_name, key=i, value=f"value-{i}", headers=[("n", str(i).encode())],
                  on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(30) == 0 and reports == [None] * 20
    p.close()
    assert seen_ctx[0] == (topic_name, MessageField.KEY, [("n", b"0")])

    c = DeserializingConsumer({
        "bootstrap.servers": tansu_broker.bootstrap, "group.id": topic_name,
        "auto.offset.reset": "earliest", "enable.partition.eof": True,
        "key.deserializer": IntegerDeserializer(), "value.deserializer": StringDeserializer()})
    c.assign([kafka_client.TopicPartition(topic_name, 0, 0)])
    got, eof = [], None
    deadline = time.monotonic() + 30
    try:
        while eof is None and time.monotonic() < deadline:
            try:
                msg = c.poll(0.5)
            except ConsumeError as e:
                eof = e
                continue
            if msg is not None:
                got.append((msg.key(), msg.value(), msg.offset()))
    finally:
        c.close()
    assert got == [(i, f"value-{i}", i) for i in range(20)]
    assert eof is not None and eof.code == kafka_client.KafkaError._PARTITION_EOF
    assert eof.kafka_message.partition() == 0


def test_deserializer_failure_names_the_message(tansu_broker, topic_name):
    tansu_broker.create_topic(topic_name, partitions=1)
    p = kafka_client.Producer({"bootstrap.servers": tansu_broker.bootstrap})
    p.produce(topic_name, value=b"\x00\x01", key=b"not-four-bytes")
    assert p.flush(30) == 0
    p.close()
    # Both failing: the key is deserialized first (confluent-kafka's order), and the
    # message the error carries keeps its raw bytes (the value was set before the key
    # failed: a dead-letter handler produced the deserialized value).
    both = {"key.deserializer": IntegerDeserializer(), "value.deserializer": lambda v, ctx: "x"}
    for conf, exc in [({"key.deserializer": IntegerDeserializer()}, KeyDeserializationError),
                      ({"value.deserializer": IntegerDeserializer()}, ValueDeserializationError),
                      (both, KeyDeserializationError)]:
        c = DeserializingConsumer({"bootstrap.servers": tansu_broker.bootstrap,
                                   "group.id": topic_name, **conf})
        c.assign([kafka_client.TopicPartition(topic_name, 0, 0)])
        try:
            deadline = time.monotonic() + 30
            with pytest.raises(exc) as ei:
                while time.monotonic() < deadline:
                    c.poll(0.5)
            assert ei.value.kafka_message.offset() == 0
            assert isinstance(ei.value.exception, SerializationError)
            assert ei.value.kafka_message.value() == b"\x00\x01"
        finally:
            c.close()
