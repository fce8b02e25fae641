"""confluent-kafka drop-in: confluent-kafka's Schema Registry serdes
(``confluent_kafka.schema_registry``: Avro, JSON Schema, Protobuf; blocking and asyncio)
used with our serializing clients, side by side with confluent-kafka's own.

Each case runs confluent-kafka's SerializingProducer and ours, each with serdes of its own
over one mock registry, into one topic (so both register under the same subjects and get
the same schema ids and GUIDs), confluent-kafka's into partition 0 and ours into
partition 1, then compares the bytes and headers of the two partitions, and what each
DeserializingConsumer reads back from both. Needs
``confluent-kafka[schemaregistry,avro,json,protobuf]`` (the test extras).
"""
from __future__ import annotations

import asyncio
import importlib
import inspect
import time
import uuid
from types import SimpleNamespace

import pytest

ck = pytest.importorskip("confluent_kafka")
try:
    import confluent_kafka.schema_registry as sr_mod
    from confluent_kafka.schema_registry import header_schema_id_serializer
    from confluent_kafka.schema_registry._async import avro as async_avro
    from confluent_kafka.schema_registry._async import json_schema as async_json
    from confluent_kafka.schema_registry._async import protobuf as async_protobuf
    from confluent_kafka.schema_registry._async.schema_registry_client import (
        AsyncSchemaRegistryClient,
    )
    from confluent_kafka.schema_registry.avro import (
        AvroDeserializer,
        AvroDeserializerBuilder,
        AvroSerializer,
        AvroSerializerBuilder,
    )
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.schema_registry.protobuf import (
        ProtobufDeserializer,
        ProtobufSerializer,
    )
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError as exc:      # the extras are not installed
    pytest.skip(f"confluent-kafka's Schema Registry extras are not installed ({exc}); "
                f"pip install 'confluent-kafka[schemaregistry,avro,json,protobuf]'",
                allow_module_level=True)

import kafka_client  # noqa: E402
import kafka_client.aio  # noqa: E402
import kafka_client.error  # noqa: E402
from kafka_client.testing import Cluster  # noqa: E402

pytestmark = pytest.mark.integration

IMPLS = ("confluent_kafka", "kafka_client")

AVRO_USER = ('{"type": "record", "name": "User", "namespace": "dropin", "fields": ['
             '{"name": "name", "type": "string"}, {"name": "n", "type": "int"}]}')
JSON_USER = ('{"title": "dropin.User", "type": "object", "properties": {'
             '"name": {"type": "string"}, "n": {"type": "integer"}}}')


def _protobuf_user_class():
    """A protobuf message class ``dropin.User {string name = 1; int32 n = 2;}``, made
    from its descriptor (no protoc needed)."""
    proto = descriptor_pb2.FileDescriptorProto(name="dropin_user.proto", package="dropin",
                                               syntax="proto3")
    user = proto.message_type.add(name="User")
    user.field.add(name="name", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                   label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    user.field.add(name="n", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
                   label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("dropin.User"))


PROTOBUF_USER = _protobuf_user_class()


def user(fmt, name, n):
    return PROTOBUF_USER(name=name, n=n) if fmt == "protobuf" else {"name": name, "n": n}


def serde_conf(header_ids, strategy):
    conf = {"subject.name.strategy": strategy}
    if header_ids:
        conf["schema.id.serializer"] = header_schema_id_serializer
    return conf


def blocking_serdes(fmt, registry, header_ids, strategy):
    """(serializer, deserializer) of ``fmt`` over ``registry``."""
    conf = serde_conf(header_ids, strategy)
    if fmt == "avro":
        return AvroSerializer(registry, AVRO_USER, conf=conf), AvroDeserializer(registry)
    if fmt == "json":
        return (JSONSerializer(JSON_USER, registry, conf=conf),
                JSONDeserializer(JSON_USER, schema_registry_client=registry))
    return (ProtobufSerializer(PROTOBUF_USER, registry, conf),
            ProtobufDeserializer(PROTOBUF_USER, {}, schema_registry_client=registry))


async def async_serdes(fmt, registry, header_ids, strategy):
    conf = serde_conf(header_ids, strategy)
    if fmt == "avro":
        return (await async_avro.AsyncAvroSerializer(registry, AVRO_USER, conf=conf),
                await async_avro.AsyncAvroDeserializer(registry))
    if fmt == "json":
        return (await async_json.AsyncJSONSerializer(JSON_USER, registry, conf=conf),
                await async_json.AsyncJSONDeserializer(JSON_USER,
                                                      schema_registry_client=registry))
    return (await async_protobuf.AsyncProtobufSerializer(PROTOBUF_USER, registry, conf),
            await async_protobuf.AsyncProtobufDeserializer(PROTOBUF_USER, {},
                                                           schema_registry_client=registry))


def records(fmt):
    """(key, value, headers) to produce: headers as a list, a dict and a list again, and
    a tombstone (value None). A new list each call: a serializer that writes the schema id
    in the headers adds it to the list or dict it is given."""
    return [
        (user(fmt, "key-0", 0), user(fmt, "alice-0", 10), [("app", b"a")]),
        (user(fmt, "key-1", 1), user(fmt, "bob-1", 11), {"app": b"b"}),
        (user(fmt, "key-2", 2), user(fmt, "carol-2", -12), [("app", b"c"), ("x", None)]),
        (user(fmt, "key-3", 3), None, []),
    ]


CASES = [
    # (format, schema ids in headers, subject name strategy)
    ("avro", False, sr_mod.topic_subject_name_strategy),
    ("avro", True, sr_mod.topic_record_subject_name_strategy),
    ("json", False, sr_mod.record_subject_name_strategy),
    ("json", True, sr_mod.topic_subject_name_strategy),
    ("protobuf", False, sr_mod.topic_record_subject_name_strategy),
    ("protobuf", True, sr_mod.record_subject_name_strategy),
]
CASE_IDS = [f"{fmt}-{'header' if h else 'prefix'}-"
            f"{s.__name__.replace('_subject_name_strategy', '')}" for fmt, h, s in CASES]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("sr-cluster"))) as c:
        yield c


def module_of(impl):
    return importlib.import_module(impl)


#: the partition each client produces to
PARTITION = {"confluent_kafka": 0, "kafka_client": 1}


def raw_records(bootstrap, topic, partition, n):
    """(key, value, headers) of the first ``n`` records of a partition as
    confluent-kafka's plain Consumer reads them: the bytes and headers on the wire."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{topic}",
                     "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
        got, end = [], time.monotonic() + 20
        while len(got) < n and time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append((m.key(), m.value(), m.headers()))
        return got
    finally:
        c.close()


def deserialized(impl, bootstrap, topic, partition, key_des, value_des, n):
    """(key, value, headers) of the first ``n`` records of a partition through
    ``impl``'s DeserializingConsumer."""
    k = module_of(impl)
    c = k.DeserializingConsumer({"bootstrap.servers": bootstrap, "group.id": f"{impl}-{topic}",
                                 "enable.auto.commit": False,
                                 "key.deserializer": key_des, "value.deserializer": value_des})
    try:
        c.assign([k.TopicPartition(topic, partition, k.OFFSET_BEGINNING)])
        got, end = [], time.monotonic() + 20
        while len(got) < n and time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None:
                got.append((m.key(), m.value(), m.headers()))
        return got
    finally:
        c.close()


def strip_id_headers(headers):
    return [(k, v) for k, v in (headers or []) if not k.startswith("__")]


@pytest.mark.parametrize("fmt, header_ids, strategy", CASES, ids=CASE_IDS)
def test_blocking_serdes_through_both_clients(cluster, topic_name, fmt, header_ids, strategy):
    bootstrap = cluster.bootstrap_servers
    registry = sr_mod.SchemaRegistryClient.new_client({"url": "mock://dropin"})
    sent = records(fmt)
    cluster.create_topic(topic_name, partitions=2)
    failures = {}
    for impl in IMPLS:
        k = module_of(impl)
        to_send = records(fmt)
        key_ser, _ = blocking_serdes(fmt, registry, header_ids, strategy)
        value_ser, _ = blocking_serdes(fmt, registry, header_ids, strategy)
        p = k.SerializingProducer({"bootstrap.servers": bootstrap,
                                   "key.serializer": key_ser, "value.serializer": value_ser})
        reports = []
        try:
            for key, value, headers in to_send:
                p.produce(topic_name, key=key, value=value, headers=headers,
                          partition=PARTITION[impl],
                          on_delivery=lambda err, msg: reports.append(err))
            if header_ids:
                # a schema id header needs headers to go in: a serializer failure, wrapped
                with pytest.raises(k.error.ProduceError) as ei:
                    p.produce(topic_name, key=sent[0][0], value=sent[0][1])
                failures[impl] = ei.value
            assert p.flush(20) == 0
        finally:
            p.close()
        assert reports == [None] * len(sent)

    # the same bytes and headers on the wire
    wire = {impl: raw_records(bootstrap, topic_name, PARTITION[impl], len(sent))
            for impl in IMPLS}
    assert len(wire["kafka_client"]) == len(sent)
    assert wire["kafka_client"] == wire["confluent_kafka"]
    id_headers = [h for rec in wire["kafka_client"] for h in (rec[2] or [])
                  if h[0].startswith("__")]
    assert bool(id_headers) == header_ids
    assert {h[0] for h in id_headers} <= {"__key_schema_id", "__value_schema_id"}

    # the serializer's failure, wrapped as confluent-kafka wraps it
    for impl, exc in failures.items():
        k = module_of(impl)
        assert isinstance(exc, k.error.KeySerializationError)
        assert exc.code == k.KafkaError._KEY_SERIALIZATION
        assert isinstance(exc.exception, ck.serialization.SerializationError)
        assert str(exc.exception) == "Missing headers"

    # each DeserializingConsumer reads what each producer wrote
    for reader in IMPLS:
        for writer in IMPLS:
            _, key_des = blocking_serdes(fmt, registry, header_ids, strategy)
            _, value_des = blocking_serdes(fmt, registry, header_ids, strategy)
            got = deserialized(reader, bootstrap, topic_name, PARTITION[writer], key_des,
                               value_des, len(sent))
            assert [(key, value) for key, value, _ in got] == \
                [(key, value) for key, value, _ in sent], (reader, writer)
            assert [strip_id_headers(h) for _, _, h in got] == \
                [strip_id_headers(list(h.items()) if isinstance(h, dict) else h)
                 for _, _, h in sent], (reader, writer)
    assert sorted(registry.get_subjects()) == sorted(
        {strategy(SimpleNamespace(topic=topic_name, field=field), "dropin.User")
         for field in (ck.serialization.MessageField.KEY, ck.serialization.MessageField.VALUE)})


def async_module_of(impl):
    return importlib.import_module(f"{impl}.aio")


@pytest.mark.parametrize("fmt, header_ids, strategy", CASES, ids=CASE_IDS)
def test_asyncio_serdes_through_both_clients(cluster, topic_name, fmt, header_ids, strategy):
    """The asyncio serdes (``confluent_kafka.schema_registry._async``) through both
    asyncio clients. confluent-kafka's AIOProducer refuses headers (NotImplementedError),
    so schema ids in headers are written by ours only, and read by both."""
    bootstrap = cluster.bootstrap_servers
    # confluent-kafka's asyncio producer takes no headers at all, not even []
    sent = [(key, value, headers if header_ids else None)
            for key, value, headers in records(fmt)]
    writers = ("kafka_client",) if header_ids else IMPLS
    cluster.create_topic(topic_name, partitions=2)

    async def produce(impl, registry):
        key_ser, _ = await async_serdes(fmt, registry, header_ids, strategy)
        value_ser, _ = await async_serdes(fmt, registry, header_ids, strategy)
        p = await async_module_of(impl).AsyncSerializingProducer(
            {"bootstrap.servers": bootstrap, "key.serializer": key_ser,
             "value.serializer": value_ser})
        try:
            if impl not in writers:
                with pytest.raises(NotImplementedError, match="Headers are not supported"):
                    await p.produce(topic_name, key=sent[0][0], value=sent[0][1],
                                    headers=sent[0][2])
                return None, None
            futures = [await p.produce(topic_name, key=key, value=value, headers=headers,
                                       partition=PARTITION[impl])
                       for key, value, headers in sent]
            delivered = await asyncio.wait_for(asyncio.gather(*futures), 20)
            failure = None
            if header_ids:
                try:
                    await p.produce(topic_name, key=sent[0][0], value=sent[0][1])
                except Exception as e:      # noqa: BLE001 - checked below
                    failure = e
            await p.flush()
        finally:
            await p.close()
        return [m.offset() for m in delivered], failure

    async def consume(reader, writer, registry):
        _, key_des = await async_serdes(fmt, registry, header_ids, strategy)
        _, value_des = await async_serdes(fmt, registry, header_ids, strategy)
        k = module_of(reader)
        c = await async_module_of(reader).AsyncDeserializingConsumer(
            {"bootstrap.servers": bootstrap, "group.id": f"{reader}-{topic_name}",
             "enable.auto.commit": False,
             "key.deserializer": key_des, "value.deserializer": value_des})
        try:
            await c.assign([k.TopicPartition(topic_name, PARTITION[writer],
                                             k.OFFSET_BEGINNING)])
            got, end = [], time.monotonic() + 20
            while len(got) < len(sent) and time.monotonic() < end:
                m = await c.poll(0.5)
                if m is not None:
                    got.append((m.key(), m.value(), m.headers()))
            return got
        finally:
            await c.close()

    async def main():
        registry = AsyncSchemaRegistryClient.new_client({"url": "mock://dropin"})
        produced = {impl: await produce(impl, registry) for impl in IMPLS}
        read = {(r, w): await consume(r, w, registry) for r in IMPLS for w in writers}
        guids = {}
        for _, _, headers in raw_records(bootstrap, topic_name, PARTITION["kafka_client"],
                                         len(sent)):
            for name, value in headers or []:
                if name.startswith("__"):
                    # the header's GUID (after its one-byte format; Protobuf's message
                    # indexes follow it) names a schema there
                    guids[name] = await registry.get_schema_by_guid(str(uuid.UUID(
                        bytes=value[1:17])))
        return produced, read, guids

    produced, read, guids = asyncio.run(asyncio.wait_for(main(), 120))
    assert produced["kafka_client"][0] == [0, 1, 2, 3]
    if header_ids:
        failure = produced["kafka_client"][1]
        assert isinstance(failure, kafka_client.error.KeySerializationError), failure
        assert str(failure.exception) == "Missing headers"
        assert sorted(guids) == ["__key_schema_id", "__value_schema_id"]
        assert {schema.schema_type or "AVRO" for schema in guids.values()} == \
            {{"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}[fmt]}
    else:
        assert produced["confluent_kafka"][0] == [0, 1, 2, 3]
        wire = {impl: raw_records(bootstrap, topic_name, PARTITION[impl], len(sent))
                for impl in IMPLS}
        assert len(wire["kafka_client"]) == len(sent)
        assert wire["kafka_client"] == wire["confluent_kafka"]
    assert len(read) == 2 * len(writers)
    for (reader, writer), got in read.items():
        assert [(key, value) for key, value, _ in got] == \
            [(key, value) for key, value, _ in sent], (reader, writer)


def associate(registry, topic, namespace, subject):
    """Associate ``subject`` with ``topic``'s values in the cluster ``namespace``."""
    return registry.create_association(sr_mod.AssociationCreateOrUpdateRequest(
        resource_name=topic, resource_namespace=namespace, resource_type="topic",
        resource_id=f"{namespace}:{topic}", associations=[
            sr_mod.AssociationCreateOrUpdateInfo(subject=subject, association_type="value")]))


def test_default_subject_names_come_from_this_clusters_associations(cluster, topic_name):
    """confluent-kafka 2.16's serdes name subjects by the registry's associations of the
    topic in the Kafka cluster the client is connected to (their default strategy), and
    the serializing clients tell them that cluster's id; with two clusters associating
    the same topic name, only this cluster's subject is used."""
    bootstrap = cluster.bootstrap_servers
    cluster.create_topic(topic_name, partitions=2)
    registry = sr_mod.SchemaRegistryClient.new_client({"url": "mock://dropin"})
    associate(registry, topic_name, cluster.cluster_id, f"{topic_name}-here")
    associate(registry, topic_name, "another-cluster", f"{topic_name}-there")
    for impl in IMPLS:
        k = module_of(impl)
        p = k.SerializingProducer({"bootstrap.servers": bootstrap,
                                   "value.serializer": AvroSerializer(registry, AVRO_USER)})
        try:
            p.produce(topic_name, value={"name": impl, "n": 1}, partition=PARTITION[impl])
            assert p.flush(20) == 0
        finally:
            p.close()
        assert registry.get_subjects() == [f"{topic_name}-here"], impl
    for reader in IMPLS:
        for writer in IMPLS:
            got = deserialized(reader, bootstrap, topic_name, PARTITION[writer], None,
                               AvroDeserializer(registry), 1)
            assert [value for _, value, _ in got] == [{"name": writer, "n": 1}]


def test_asyncio_default_subject_names_come_from_this_clusters_associations(cluster,
                                                                           topic_name):
    bootstrap = cluster.bootstrap_servers
    cluster.create_topic(topic_name, partitions=2)

    async def main():
        registry = AsyncSchemaRegistryClient.new_client({"url": "mock://dropin"})
        for namespace, subject in ((cluster.cluster_id, "here"), ("another", "there")):
            await associate(registry, topic_name, namespace, f"{topic_name}-{subject}")
        subjects = {}
        for impl in IMPLS:
            p = await async_module_of(impl).AsyncSerializingProducer(
                {"bootstrap.servers": bootstrap, "value.serializer":
                 await async_avro.AsyncAvroSerializer(registry, AVRO_USER)})
            try:
                delivered = await (await p.produce(topic_name, value={"name": impl, "n": 2},
                                                   partition=PARTITION[impl]))
                assert delivered.error() is None
            finally:
                await p.close()
            subjects[impl] = await registry.get_subjects()
        read = {}
        for impl in IMPLS:
            k = module_of(impl)
            c = await async_module_of(impl).AsyncDeserializingConsumer(
                {"bootstrap.servers": bootstrap, "group.id": f"{impl}-{topic_name}",
                 "value.deserializer": await async_avro.AsyncAvroDeserializer(registry)})
            try:
                await c.assign([k.TopicPartition(topic_name, p, k.OFFSET_BEGINNING)
                                for p in PARTITION.values()])
                got, end = [], time.monotonic() + 20
                while len(got) < 2 and time.monotonic() < end:
                    m = await c.poll(0.5)
                    if m is not None:
                        got.append(m.value())
                read[impl] = sorted(got, key=lambda v: v["name"])
            finally:
                await c.close()
        return subjects, read

    subjects, read = asyncio.run(asyncio.wait_for(main(), 90))
    assert subjects == {impl: [f"{topic_name}-here"] for impl in IMPLS}
    assert read == {impl: [{"name": writer, "n": 2} for writer in IMPLS] for impl in IMPLS}


class TenantSerializerBuilder(ck.serialization.SerializerBuilder):
    """A builder that takes a property of its own (``app.tenant``) out of the client's
    configuration: the client, which would refuse it, never sees it."""

    def build(self, conf, is_key):
        conf = dict(conf)
        tenant = conf.pop("app.tenant")
        return (lambda obj, ctx: f"{tenant}:{obj}".encode()), conf


class Recorded:
    """A serde that records its closing, then closes the one it wraps."""

    def __init__(self, serde, closed, name):
        self.serde, self.closed, self.name = serde, closed, name

    def __call__(self, data, ctx=None):
        return self.serde(data, ctx)

    def __getattr__(self, name):    # set_cluster_id_resolver and the like
        return getattr(self.serde, name)

    def close(self):
        self.closed.append(self.name)
        return self.serde.close()

    async def aclose(self):
        self.closed.append(self.name)
        close = getattr(self.serde, "aclose", None) or self.serde.close
        result = close()
        if inspect.isawaitable(result):
            await result


class RecordingBuilder:
    """``builder``, whose serdes record their closing in ``closed`` as ``name``."""

    def __init__(self, builder, closed, name):
        self.builder, self.closed, self.name = builder, closed, name

    def build(self, conf, is_key):
        result = self.builder.build(conf, is_key)
        if inspect.isawaitable(result):
            return self._built_later(result)
        serde, left = result
        return Recorded(serde, self.closed, self.name), left

    async def _built_later(self, result):
        serde, left = await result
        return Recorded(serde, self.closed, self.name), left


def test_serde_builders_are_built_and_closed_by_the_client(cluster, topic_name):
    """confluent-kafka 2.16's ``key/value.(de)serializer.builder`` properties: the client
    builds the serde from the builder (its Schema Registry builders included), configures
    itself with what the builders leave of its configuration, and closes what it built
    in close(); a ready-made serde is left open."""
    bootstrap = cluster.bootstrap_servers
    cluster.create_topic(topic_name, partitions=2)
    registry = sr_mod.SchemaRegistryClient.new_client({"url": "mock://dropin"})
    for impl in IMPLS:
        k = module_of(impl)
        closed = []
        ready_made = Recorded(k.serialization.StringSerializer(), closed, "ready-made")
        p = k.SerializingProducer({
            "bootstrap.servers": bootstrap, "app.tenant": "acme",
            "key.serializer.builder": TenantSerializerBuilder(),
            "value.serializer.builder": RecordingBuilder(AvroSerializerBuilder(
                schema_registry_client=registry, schema=AVRO_USER), closed,
                "value serializer")})
        p.produce(topic_name, key="k1", value={"name": impl, "n": 1},
                  partition=PARTITION[impl])
        assert p.flush(20) == 0
        assert closed == []
        assert p.close() is True
        assert closed == ["value serializer"], impl
        p = k.SerializingProducer({"bootstrap.servers": bootstrap,
                                   "value.serializer": ready_made})
        p.close()
        assert closed == ["value serializer"], impl

        c = k.DeserializingConsumer({
            "bootstrap.servers": bootstrap, "group.id": f"{impl}-{topic_name}",
            "value.deserializer.builder": RecordingBuilder(AvroDeserializerBuilder(
                schema_registry_client=registry), closed, "value deserializer")})
        try:
            c.assign([k.TopicPartition(topic_name, PARTITION[impl], k.OFFSET_BEGINNING)])
            got, end = [], time.monotonic() + 20
            while not got and time.monotonic() < end:
                m = c.poll(0.5)
                if m is not None:
                    got.append((m.key(), m.value()))
        finally:
            c.close()
        assert got == [(b"acme:k1", {"name": impl, "n": 1})], impl
        assert closed == ["value serializer", "value deserializer"], impl

        with pytest.raises(ValueError, match="both"):
            k.SerializingProducer({"bootstrap.servers": bootstrap,
                                   "value.serializer": ready_made,
                                   "value.serializer.builder": TenantSerializerBuilder()})


def test_asyncio_serde_builders_are_built_and_closed_by_the_client(cluster, topic_name):
    bootstrap = cluster.bootstrap_servers
    cluster.create_topic(topic_name, partitions=2)

    async def main():
        registry = AsyncSchemaRegistryClient.new_client({"url": "mock://dropin"})
        closed, got = {impl: [] for impl in IMPLS}, {}
        for impl in IMPLS:
            aio, k = async_module_of(impl), module_of(impl)
            p = await aio.AsyncSerializingProducer({
                "bootstrap.servers": bootstrap,
                "value.serializer.builder": RecordingBuilder(
                    async_avro.AsyncAvroSerializerBuilder(schema_registry_client=registry,
                                                          schema=AVRO_USER),
                    closed[impl], "value serializer")})
            delivered = await (await p.produce(topic_name, value={"name": impl, "n": 3},
                                               partition=PARTITION[impl]))
            assert delivered.error() is None and closed[impl] == []
            await p.close()
            c = await aio.AsyncDeserializingConsumer({
                "bootstrap.servers": bootstrap, "group.id": f"{impl}-{topic_name}",
                "value.deserializer.builder": RecordingBuilder(
                    async_avro.AsyncAvroDeserializerBuilder(schema_registry_client=registry),
                    closed[impl], "value deserializer")})
            try:
                await c.assign([k.TopicPartition(topic_name, PARTITION[impl],
                                                 k.OFFSET_BEGINNING)])
                end = time.monotonic() + 20
                while impl not in got and time.monotonic() < end:
                    m = await c.poll(0.5)
                    if m is not None:
                        got[impl] = m.value()
            finally:
                await c.close()
        return closed, got

    closed, got = asyncio.run(asyncio.wait_for(main(), 90))
    assert got == {impl: {"name": impl, "n": 3} for impl in IMPLS}
    assert closed == {impl: ["value serializer", "value deserializer"] for impl in IMPLS}


def test_a_poison_message_and_a_registry_error_surface_as_on_confluent_kafka(cluster,
                                                                             topic_name):
    """A message no serializer wrote, between two that one did: the poll() loop that
    catches ValueDeserializationError gets it with the raw message, then goes on to the
    next one. A serializer that cannot find its schema (auto-registration off) raises
    the registry's error, wrapped in ValueSerializationError."""
    bootstrap = cluster.bootstrap_servers
    cluster.create_topic(topic_name, partitions=2)
    got = {}
    for impl in IMPLS:
        k = module_of(impl)
        registry = sr_mod.SchemaRegistryClient.new_client({"url": "mock://dropin"})
        partition = PARTITION[impl]
        p = k.SerializingProducer({"bootstrap.servers": bootstrap,
                                   "value.serializer": AvroSerializer(registry, AVRO_USER)})
        raw = k.Producer({"bootstrap.servers": bootstrap})
        p.produce(topic_name, value={"name": "first", "n": 1}, partition=partition)
        assert p.flush(10) == 0
        raw.produce(topic_name, b"not written by a serializer", partition=partition)
        assert raw.flush(10) == 0
        p.produce(topic_name, value={"name": "third", "n": 3}, partition=partition)
        assert p.flush(10) == 0
        p.close()
        strict = k.SerializingProducer({
            "bootstrap.servers": bootstrap, "value.serializer": AvroSerializer(
                registry, AVRO_USER, conf={"auto.register.schemas": False,
                                           "subject.name.strategy": lambda ctx, rec: "none"})})
        with pytest.raises(k.error.ValueSerializationError) as ei:
            strict.produce(topic_name, value={"name": "x", "n": 0})
        strict.close()
        failure = (ei.value.code, type(ei.value.exception).__name__, str(ei.value))

        c = k.DeserializingConsumer({"bootstrap.servers": bootstrap, "group.id": topic_name,
                                     "value.deserializer": AvroDeserializer(registry)})
        try:
            c.assign([k.TopicPartition(topic_name, partition, k.OFFSET_BEGINNING)])
            read, end = [], time.monotonic() + 20
            while len(read) < 3 and time.monotonic() < end:
                try:
                    m = c.poll(0.5)
                    if m is not None:
                        read.append((m.offset(), m.value()))
                except k.error.ValueDeserializationError as e:
                    read.append((e.kafka_message.offset(), e.kafka_message.value(),
                                 e.code, type(e.exception).__name__, str(e)))
        finally:
            c.close()
        got[impl] = failure, read
    assert got["kafka_client"] == got["confluent_kafka"]
    assert [r[0] for r in got["kafka_client"][1]] == [0, 1, 2]
