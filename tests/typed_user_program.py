"""A user's program, as docs/*.md write them, for mypy (tests/test_typing.py); never run.

It is type-checked with ``--strict`` against the package as installed (py.typed): every
public name it uses must resolve to a real type, and ``assert_type`` pins the types the
documented calls return, so a hint that turns into ``Any`` or a wrong type fails the check.
"""
import asyncio
import json
from concurrent.futures import Future
from typing import Any, Dict, List, Optional, Tuple

from typing_extensions import assert_type

from kafka_client import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_TAIL,
    AcknowledgeType,
    AdminClient,
    Consumer,
    ConsumerGroupTopicPartitions,
    DeserializingConsumer,
    ElectionType,
    KafkaError,
    DeserializingShareConsumer,
    IllegalStateException,
    KafkaException,
    Message,
    Messages,
    Producer,
    SerializingProducer,
    ShareConsumer,
    TopicCollection,
    TopicPartition,
)
from kafka_client.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    ConsumerGroupDescription,
    DescribeClusterResult,
    ListConsumerGroupsResult,
    ListOffsetsResultInfo,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
    TopicDescription,
    TopicMetadata,
    UserScramCredentialsDescription,
)
from kafka_client.aio import (
    AIOConsumer,
    AIOProducer,
    AsyncDeserializingConsumer,
    AsyncSerializingProducer,
)
from kafka_client.error import ConsumeError, ProduceError
from kafka_client.producer.idempotence import NOT_PERSISTED, PERSISTED
from kafka_client.producer.partitioners import get_partitioner
from kafka_client.serialization import (
    DoubleDeserializer,
    IntegerDeserializer,
    IntegerSerializer,
    MessageField,
    SerializationContext,
    StringDeserializer,
    StringSerializer,
)
from kafka_client.testing import BrokerAddress, Cluster

from kafka_proto import framing, versions
from kafka_proto.crc import IMPLEMENTATION, crc32, crc32c
from kafka_proto.wire import Reader, Writer, decode_varint, encode_varint
from kafka_proto.compression import CompressionCodec, compress, decompress
from kafka_proto.errors import (
    CrcMismatchError,
    DecompressionLimitError,
    InvalidLengthError,
    TruncatedDataError,
    broker_error,
)
from kafka_proto.hashing import murmur2, murmur2_partition
from kafka_proto.logdir import (
    EpochEntry,
    decode_offset_index,
    encode_leader_epoch_checkpoint,
    encode_offset_index_entry,
    segment_base_offset,
    segment_file_name,
)
from kafka_proto.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerProtocolAssignment,
    MetadataRequest,
    MetadataResponse,
    SaslAuthenticateRequest,
    api_info,
    error_codes,
    fit_to_version,
    request_class,
)
from kafka_proto.protocol import BrokerConversation
from kafka_proto.records import (
    Compression,
    ControlRecordType,
    RecordBatchBuilder,
    TimestampType,
    build_control_batch,
    increment_sequence,
    iter_batch_headers,
    read_batch_header,
    read_batches,
    stamp_batch,
)

BOOTSTRAP = "localhost:9092"


# -- errors ------------------------------------------------------------------------------
def check_error(exc: KafkaException) -> Tuple[int, str, bool]:
    err = exc.args[0]
    assert isinstance(err, KafkaError)
    assert_type(exc.error, Optional[KafkaError])
    assert_type(err.code(), int)
    assert_type(err.name(), str)
    assert_type(err.str(), str)
    # The codes are class attributes (librdkafka's names, local ones with "_")
    if err.code() in (KafkaError._INVALID_ARG, KafkaError.MSG_SIZE_TOO_LARGE,
                      KafkaError._PARTITION_EOF, KafkaError.NOT_LEADER_OR_FOLLOWER):
        return err.code(), err.str(), err.retriable()
    assert_type(KafkaError(KafkaError._STATE, "why"), KafkaError)
    return err.code(), repr(err), err.fatal() or err.txn_requires_abort()


# -- producer ----------------------------------------------------------------------------
delivered: List[Tuple[Optional[int], Optional[int], Any, Any]] = []


def on_delivery(err: Optional[KafkaError], msg: Message) -> None:
    if err is not None:
        print(f"{msg.topic()}[{msg.partition()}]: delivery failed: {err.str()}")
    else:
        delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value()))


def produce() -> None:
    with Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 10}) as producer:
        assert_type(producer, Producer)
        for i in range(100):
            producer.produce("docs-quickstart", value=b"message %d" % i,
                             key=b"user-%d" % (i % 7), headers={"source": "docs"},
                             on_delivery=on_delivery)
            assert_type(producer.poll(0), int)
        producer.produce("docs", "text", partition=0, headers=[("n", b"1"), ("m", None)],
                         on_delivery=lambda err, msg: print(err, msg.offset()))
        assert_type(producer.flush(30), int)
        assert_type(len(producer), int)
        assert_type(producer.produce_batch("docs-batch", [b"a", b"b"], on_delivery=on_delivery),
                    int)
        md = producer.list_topics("docs-quickstart", timeout=10)
        assert_type(md, ClusterMetadata)
        topic = md.topics["docs-quickstart"]
        assert_type(topic, TopicMetadata)
        print(len(md.brokers), len(topic.partitions), producer.cluster_id(5))
        producer.purge(in_flight=False)
    producer = Producer(bootstrap_servers=BOOTSTRAP, linger_ms=10)
    assert_type(producer.close(), bool)
    murmur2 = get_partitioner("murmur2")
    print(murmur2(b"alice", 6))


def statuses() -> None:
    seen: List[Tuple[Optional[KafkaError], int]] = []

    def report(err: Optional[KafkaError], msg: Message) -> None:
        assert hasattr(msg, "status")

    with Producer({"bootstrap.servers": BOOTSTRAP, "enable.idempotence": True,
                   "stats_cb": lambda doc: print(json.loads(doc))}) as producer:
        producer.produce("docs-idempotent", b"x", on_delivery=report)
        # a lambda's arguments get their types: msg is a DeliveredMessage
        producer.produce("docs-idempotent", b"y",
                         on_delivery=lambda err, msg: seen.append((err, msg.status())))
    assert seen == [] or seen[0][1] in (PERSISTED, NOT_PERSISTED)


def transaction(consumer: Consumer) -> None:
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "transactional.id": "loader"})
    producer.init_transactions()
    producer.begin_transaction()
    producer.produce("orders", b"order", key=b"1", partition=0)
    group = consumer.consumer_group_metadata()
    assert_type(group.group_id, str)
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()), group)
    try:
        producer.commit_transaction(30)
    except KafkaException as exc:
        if exc.args[0].fatal():
            raise
        producer.abort_transaction()
    producer.close()


# -- consumer ----------------------------------------------------------------------------
def consume() -> List[bytes]:
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "docs-group",
                         "enable.partition.eof": True})
    tp = TopicPartition("docs-consume", 0, OFFSET_BEGINNING)
    assert_type(tp.topic, str)
    assert_type(tp.partition, int)
    assert_type(tp.offset, int)
    assert_type(tp.error, Optional[KafkaError])
    assert_type(tp.metadata, Optional[str])
    assert_type(tp.leader_epoch, Optional[int])
    consumer.assign([tp])
    consumer.seek(TopicPartition("docs-consume", 0, OFFSET_TAIL(3)))
    values: List[bytes] = []
    msg = consumer.poll(1.0)
    assert_type(msg, Optional[Message])
    if msg is not None and msg.error() is None:
        assert_type(msg.topic(), Optional[str])
        assert_type(msg.partition(), Optional[int])
        assert_type(msg.offset(), Optional[int])
        assert_type(msg.timestamp(), Tuple[int, int])
        assert_type(msg.headers(), Optional[List[Tuple[str, Optional[bytes]]]])
        assert_type(msg.leader_epoch(), Optional[int])
        assert_type(len(msg), int)
    for m in consumer.consume(100, timeout=1.0):
        assert_type(m, Message)
        err = m.error()
        if err is not None:
            print("event:", err.str(), err.code() == KafkaError._PARTITION_EOF)
            continue
        value = m.value()
        if isinstance(value, bytes):
            values.append(value)
        consumer.store_offsets(m)
    assert_type(consumer.assignment(), List[TopicPartition])
    assert_type(consumer.position([tp]), List[TopicPartition])
    assert_type(consumer.committed([tp], timeout=10), List[TopicPartition])
    assert_type(consumer.get_watermark_offsets(tp, cached=True), Tuple[int, int])
    assert_type(consumer.offsets_for_times([tp], timeout=10), List[TopicPartition])
    assert_type(consumer.memberid(), Optional[str])
    consumer.pause([tp])
    consumer.resume([tp])
    done = consumer.commit(asynchronous=False)
    assert_type(done, Optional[List[TopicPartition]])
    consumer.unassign()
    consumer.close()
    return values


def subscribe() -> None:
    log: List[Tuple[str, List[TopicPartition]]] = []
    member = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "docs-group",
                       "on_commit": lambda err, parts: print(err, parts)})
    member.subscribe(["docs-consume"],
                     on_assign=lambda c, parts: log.append(("assign", parts)),
                     on_revoke=lambda c, parts: log.append(("revoke", parts)),
                     on_lost=lambda c, parts: c.unassign())
    member.close()


def share() -> int:
    """share-consumer.md's calls."""
    with ShareConsumer({"bootstrap.servers": BOOTSTRAP, "group.id": "docs-share",
                        "share.acknowledgement.mode": "explicit"}) as consumer:
        consumer.subscribe(["docs-share"])
        batch = consumer.poll(1.0)
        assert_type(batch, Messages)
        for msg in batch:
            assert_type(msg, Message)
            consumer.acknowledge(msg, AcknowledgeType.REJECT)
        consumer.acknowledge_offset("docs-share", 0, 5, AcknowledgeType.RELEASE)
        results = consumer.commit_sync(10)
        assert_type(results, Dict[TopicPartition, Optional[KafkaException]])
        consumer.set_acknowledgement_commit_callback(
            lambda offsets, exc: print(len(offsets), exc))
        consumer.commit_async()
        try:
            consumer.poll(0)
        except IllegalStateException:
            pass
        count: int = batch.count()
    with DeserializingShareConsumer({"bootstrap.servers": BOOTSTRAP, "group.id": "g"}) as d:
        assert_type(d.poll(0), Messages)
    return count


def consume_arrow() -> int:
    with Consumer({"bootstrap.servers": BOOTSTRAP}) as consumer:
        consumer.assign([TopicPartition("docs-consume", 0, 0)])
        table = consumer.consume_arrow(100, timeout=10)
        rows: int = table.num_rows
        return rows


# -- serializing clients -----------------------------------------------------------------
def serializing() -> None:
    producer = SerializingProducer({"bootstrap.servers": BOOTSTRAP,
                                    "key.serializer": StringSerializer("utf_8"),
                                    "value.serializer": IntegerSerializer()})
    producer.produce("numbers", key="one", value=1, on_delivery=on_delivery)
    producer.flush(10)
    ctx = SerializationContext("numbers", MessageField.VALUE, {"source": b"docs"})
    assert_type(IntegerSerializer()(1, ctx), Optional[bytes])
    assert_type(IntegerDeserializer()(b"\0\0\0\1", ctx), Optional[int])
    assert_type(DoubleDeserializer()(b"\0" * 8, ctx), Optional[float])
    assert_type(StringDeserializer()(b"x", ctx), Optional[str])
    consumer = DeserializingConsumer({"bootstrap.servers": BOOTSTRAP,
                                      "group.id": "numbers",
                                      "key.deserializer": StringDeserializer("utf_8"),
                                      "value.deserializer": IntegerDeserializer()})
    consumer.subscribe(["numbers"])
    try:
        msg = consumer.poll(1.0)
    except ConsumeError as exc:
        print(exc.code, exc.kafka_message)
    else:
        if msg is not None:
            print(msg.key(), msg.value())
            # as a deserializer is called by hand: the message's own headers fit
            value_ctx = SerializationContext(msg.topic() or "numbers", MessageField.VALUE,
                                             msg.headers())
            print(IntegerDeserializer()(b"\0\0\0\2", value_ctx))
    consumer.close()
    try:
        producer.produce("numbers", key="two", value=2)
    except ProduceError as exc:
        print(exc.name, exc.exception)


# -- admin -------------------------------------------------------------------------------
def admin() -> None:
    client = AdminClient({"bootstrap.servers": BOOTSTRAP})
    futures = client.create_topics([NewTopic("orders", 6, 1,
                                             config={"retention.ms": "86400000"})])
    for topic, future in futures.items():
        assert_type(topic, str)
        assert_type(future, "Future[None]")
        future.result()
    client.create_partitions([NewPartitions("orders", 8)])["orders"].result()
    res = ConfigResource("topic", "orders")
    configs = client.describe_configs([res])[res].result()
    assert_type(configs, Dict[str, ConfigEntry])
    print(configs["retention.ms"].value, configs["retention.ms"].source)
    res = ConfigResource("topic", "orders", incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([res])[res].result()
    described = client.describe_topics(TopicCollection(["orders"]))["orders"].result()
    assert_type(described, TopicDescription)
    print(described.name, len(described.partitions))
    cluster = client.describe_cluster().result()
    assert_type(cluster, DescribeClusterResult)
    print(cluster.cluster_id, cluster.controller)
    groups = client.list_consumer_groups().result()
    assert_type(groups, ListConsumerGroupsResult)
    for listing in groups.valid or []:
        group = client.describe_consumer_groups([listing.group_id])[listing.group_id]
        assert_type(group.result(), ConsumerGroupDescription)
    all_users = client.describe_user_scram_credentials()
    assert_type(all_users.result(), Dict[str, UserScramCredentialsDescription])
    alice = client.describe_user_scram_credentials(["alice"])["alice"]
    assert_type(alice.result(), UserScramCredentialsDescription)
    tp0 = TopicPartition("orders", 0)
    offsets = client.list_offsets({tp0: OffsetSpec.latest()})[tp0].result()
    assert_type(offsets, ListOffsetsResultInfo)
    print(offsets.offset, offsets.leader_epoch)
    records = client.delete_records([TopicPartition("orders", 0, 10)])
    print(records[TopicPartition("orders", 0, 10)].result().low_watermark)
    elected = client.elect_leaders(ElectionType.PREFERRED, [tp0]).result()
    assert_type(elected, Dict[TopicPartition, Optional[KafkaError]])
    binding = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                         "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    client.create_acls([binding])[binding].result()
    # a filter's None strings match anything
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert_type(client.describe_acls(every).result(), List[AclBinding])
    assert_type(client.delete_acls([every])[every].result(), List[AclBinding])
    committed = client.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("enricher", [tp0])])["enricher"].result()
    assert_type(committed, ConsumerGroupTopicPartitions)
    for _topic, deleted in client.delete_topics(["orders"]).items():
        deleted.result()
    client.close()


# -- asyncio -----------------------------------------------------------------------------
async def aio_main(bootstrap: str) -> Tuple[List[Message], List[Message]]:
    async with AIOProducer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        futures = [await producer.produce("events", b"value %d" % i) for i in range(1000)]
        assert_type(futures[0], "asyncio.Future[Message]")
        delivered = await asyncio.gather(*futures)
        assert_type(await producer.flush(), int)
    async with AIOConsumer({"bootstrap.servers": bootstrap}) as consumer:
        await consumer.assign([TopicPartition("events", 0, OFFSET_BEGINNING)])
        batch = await consumer.consume(500, timeout=1.0)
        assert_type(batch, List[Message])
        assert_type(await consumer.poll(0.1), Optional[Message])
        assert_type((await consumer.consumer_group_metadata()).member_id, str)
    # made with await, as docs/asyncio.md says
    serializing = await AsyncSerializingProducer(
        {"bootstrap.servers": bootstrap, "value.serializer": StringSerializer()})
    assert_type(await serializing.produce("events", value="text", on_delivery=on_delivery),
                "asyncio.Future[Message]")
    await serializing.close()
    deserializing = await AsyncDeserializingConsumer(
        {"bootstrap.servers": bootstrap, "value.deserializer": StringDeserializer()})
    assert_type(deserializing, AsyncDeserializingConsumer)
    assert_type(await deserializing.consume(10, 1.0), List[Message])
    await deserializing.close()
    return list(delivered), batch


# -- the test cluster --------------------------------------------------------------------
def test_cluster() -> None:
    with Cluster(brokers=3) as cluster:
        cluster.create_topic("orders", partitions=3, replication_factor=3,
                             config={"min.insync.replicas": 2})
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                      "enable.idempotence": True, "acks": "all"})
        p.produce("orders", b"one")
        assert_type(cluster.move_leader("orders", 0), int)
        cluster.inject_errors("Produce", ["NOT_LEADER_OR_FOLLOWER"])
        cluster.stop_broker(2)
        assert p.flush(30) == 0
        cluster.start_broker(2)
        retried = [e for e in cluster.request_log(api="Produce") if e.errors]
        print(len(retried), OFFSET_END)
        p.close()
        assert_type(cluster.leader("orders", 0), int)
        assert_type(cluster.partition("orders", 0).isr, List[int])
        assert_type(cluster.brokers, List[BrokerAddress])
    with Cluster(brokers=3, racks=["a", "b", "c"],
                 broker_config={"replica.selector.class": "rack",
                                "max.incremental.fetch.session.cache.slots": 2}) as cluster:
        cluster.create_topic("near", assignments=[[1, 2, 3]])
        fetches = [e for e in cluster.request_log(api="Fetch") if e.client_id == "near"]
        assert {e.broker for e in fetches if e.details.get("bytes")} <= {2}
        print(cluster.fetch_sessions(1))
        since = cluster.clear_request_log()
        assert_type(cluster.evict_fetch_sessions(), int)
        kinds = [e.details["fetch_session"]["kind"]
                 for e in cluster.request_log(since, api="Fetch")]
        print(kinds)
    with Cluster(brokers=1, authorizer=True, super_users=("User:admin",),
                 broker_config={"sasl.enabled.mechanisms": "PLAIN"},
                 users={"admin": "admin-secret", "alice": "alice-secret"}) as cluster:
        cluster.create_topic("orders")
        cluster.create_acl("TOPIC", "orders", "User:alice", "WRITE")


# -- the codec ---------------------------------------------------------------------------
def codec() -> None:
    """docs/codec.md: the codec layer, kafka_proto."""
    print(broker_error(6))
    w = Writer()
    w.write_int16(3)
    w.write_compact_string("héllo")
    w.write_varint(-2)
    w.write_compact_nullable_bytes(None)
    data = w.getvalue()
    assert_type(data, bytes)
    r = Reader(data)
    assert_type(r.read_int16(), int)
    assert_type(r.read_compact_string(), str)
    assert_type(r.read_compact_nullable_bytes(), Optional[bytes])
    assert_type(r.remaining, int)
    view = Reader(b"\x00\x00\x00\x02abcd").read_bytes_view()
    assert_type(view, memoryview)
    try:
        Reader(b"\x00\x00\x00\x05ab").read_bytes()
    except InvalidLengthError as e:
        print(e)
    assert_type(encode_varint(300), bytes)
    assert_type(decode_varint(b"\xd8\x04"), Tuple[int, int])
    assert_type(crc32c(b"123456789"), int)
    assert_type(crc32(b"123456789"), int)
    assert_type(crc32c(b"6789", crc32c(b"12345")), int)
    assert_type(IMPLEMENTATION, str)
    assert_type(murmur2(b"21"), int)
    assert_type(murmur2_partition(b"21", 10), int)

    produced = RecordBatchBuilder()
    produced.append(b"one", timestamp=1_700_000_000_000)
    log = bytearray(produced.build() * 2)
    first, second = iter_batch_headers(log)
    stamp_batch(log, first.position, base_offset=100, partition_leader_epoch=5)
    again = read_batch_header(log, second.position)
    print(again.base_offset, again.partition_leader_epoch, again.crc)
    assert [b.base_offset for b in read_batches(bytes(log), check_crc=True)] == [100, 102]
    assert_type(increment_sequence(2**31 - 1, 1), int)
    b = RecordBatchBuilder(compression=Compression.LZ4, producer_id=7, producer_epoch=0,
                           base_sequence=0)
    b.append(b"v1", key=b"k1", timestamp=1_700_000_000_000, headers=[("trace", b"x")])
    b.append(None, key=b"k2", timestamp=1_700_000_000_005)
    data = b.build(base_offset=100)
    batches = list(read_batches(data + data[:30]))
    batch = batches[0]
    print(batch.base_offset, batch.last_offset, batch.records_count, batch.producer_id)
    assert batch.compression == Compression.LZ4
    for rec in batch:
        print(rec.offset, rec.timestamp, rec.key, rec.value, rec.headers)
    assert [r.timestamp_type for r in batch] == [TimestampType.CREATE_TIME]
    try:
        list(read_batches(data, allow_truncated=False))
    except (CrcMismatchError, TruncatedDataError) as e:
        print(e)
    marker = build_control_batch(ControlRecordType.COMMIT, producer_id=7, producer_epoch=0,
                                 coordinator_epoch=3)
    cbatch = next(iter(read_batches(marker)))
    ctrl = cbatch.control_record()
    assert cbatch.is_control and cbatch.is_transactional and ctrl is not None
    print(ctrl.is_commit, ctrl.coordinator_epoch)

    name = segment_file_name(1000, ".index")
    assert_type(segment_base_offset(name), int)
    index = encode_offset_index_entry(1042, 8192, base_offset=1000)
    assert [tuple(e) for e in decode_offset_index(index, 1000)] == [(1042, 8192)]
    print(encode_leader_epoch_checkpoint([EpochEntry(0, 0), EpochEntry(3, 1500)]))
    payload = b"hello kafka " * 1000
    for codec in CompressionCodec:
        assert_type(decompress(codec, compress(codec, payload)), bytes)
    try:
        decompress(CompressionCodec.GZIP, compress(CompressionCodec.GZIP, payload), max_size=10)
    except DecompressionLimitError as e:
        print(e)


def messages() -> None:
    """docs/codec.md: the generated messages and the sans-I/O conversation."""
    req = ApiVersionsRequest(client_software_name="kp", client_software_version="0.1")
    body = req.encode(3)
    assert_type(body, bytes)
    assert_type(ApiVersionsRequest.decode(body, 3), ApiVersionsRequest)
    assert request_class("ApiVersions") is ApiVersionsRequest
    print(api_info("Fetch").max_version)
    assert_type(ApiVersionsRequest.decode_prefix(body + b"\x00\x00", 3),
                Tuple[ApiVersionsRequest, int])
    answer = MetadataResponse(brokers=[MetadataResponse.MetadataResponseBroker(
        node_id=1, host="h", port=9092, rack=None)])
    answer.topics = [MetadataResponse.MetadataResponseTopic(name="t", error_code=3)]
    v1 = fit_to_version(answer, 1).encode(1)
    topics = MetadataResponse.decode(v1, 1).topics
    assert topics is not None and topics[0].name == "t"
    assert_type(error_codes(answer), set[int])
    # a bytes field takes any buffer and holds bytes, as decoding gives
    assert_type(SaslAuthenticateRequest(auth_bytes=memoryview(b"a")).auth_bytes, bytes)
    blob = ConsumerProtocolAssignment(user_data=bytearray(b"u")).encode(1)
    assert_type(ConsumerProtocolAssignment.decode(blob, 1).user_data, Optional[bytes])

    conv = BrokerConversation(client_id="me")
    hello = conv.start_handshake()
    wire = b"".join(bytes(p) for p in hello.parts)
    body = ApiVersionsResponse(error_code=35, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=3)]).encode(0)
    conv.receive_data(len(body).to_bytes(4, "big") + hello.correlation_id.to_bytes(4, "big")
                      + body + wire)
    event = conv.next_event()
    assert event is not None and event.retry is not None
    assert_type(event.retry.api_version, int)
    print(event.retry.api_version, conv.handshake_done, conv.versions, conv.in_flight)
    out = conv.send(MetadataRequest(topics=None), context="my metadata")
    print(out.correlation_id)

    tracker = framing.CorrelationTracker()
    cid = tracker.next_id(ApiVersionsRequest.API_KEY, 3)
    frame = framing.encode_request(req, 3, cid, client_id="me")
    parser = framing.FrameParser()
    frames = parser.feed(frame[:7]) + parser.feed(frame[7:])
    got_cid, answer_body = framing.decode_response_header(frames[0], 18, 3)
    sent = tracker.pop(got_cid)
    assert sent is not None
    answer2 = versions.decode_api_versions_response(answer_body, sent.api_version)
    negotiated = versions.negotiate_response(answer2)
    assert_type(versions.require_version(negotiated, 1), int)


if __name__ == "__main__":
    print(asyncio.run(aio_main(BOOTSTRAP)))
