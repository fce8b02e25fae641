"""The test cluster as a Kafka broker on the wire: ApiVersions, Metadata, topic admin,
Produce validation, ListOffsets, DescribeConfigs, and bad input (malformed requests,
unknown API versions and keys, oversized frames, garbage) answered as Kafka answers it,
never by a crash of the cluster process."""
from __future__ import annotations

import os
import random
import resource
import signal
import socket
import struct
import subprocess
import time

import pytest

from kafka_proto._crc import crc32c
from kafka_proto.compression import compress, decompress
from kafka_proto.errors import ErrorCode
from kafka_proto.framing import encode_request
from kafka_proto.messages import (
    API_KEYS,
    ApiKey,
    ApiVersionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
)
from kafka_proto.records import BATCH_HEADER_SIZE, Compression, RecordBatchBuilder, read_batches

from kafka_client import KafkaException, Producer
from kafka_client.admin import (
    AclOperation,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kafka_client.testing import Cluster

from cli_cluster import start_cli_cluster  # tests/testing/cli_cluster.py
from rawclient import RawClient  # tests/testing/rawclient.py

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(brokers=3, data_dir=str(tmp_path_factory.mktemp("protocol")),
                 broker_config={"auto.create.topics.enable": False}) as c:
        yield c


def batch(values, timestamp=None):
    b = RecordBatchBuilder()
    for i, v in enumerate(values):
        b.append(v, key=None, timestamp=(timestamp or int(time.time() * 1000)) + i)
    return b.build()


def produce_request(topic, records, partition=0, acks=-1):
    return ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=records)])])


def alive(cluster) -> bool:
    with RawClient(cluster.address(1)) as c:
        return c.request(MetadataRequest(topics=None), 12).brokers != []


# --------------------------------------------------------------------------- versions


def test_api_versions_lists_what_is_served(cluster):
    with RawClient(cluster.address(2)) as c:
        for version in range(5):
            resp = c.request(ApiVersionsRequest(client_software_name="t",
                                                client_software_version="1"), version)
            assert resp.error_code == ErrorCode.NONE
            keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            assert keys[ApiKey.PRODUCE] == (3, 11)
            assert keys[ApiKey.FETCH] == (4, 17)
            for key, (lo, hi) in keys.items():
                assert API_KEYS[key].min_version <= lo <= hi <= API_KEYS[key].max_version
            for needed in (ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP,
                           ApiKey.INIT_PRODUCER_ID, ApiKey.END_TXN, ApiKey.SASL_HANDSHAKE,
                           ApiKey.SASL_AUTHENTICATE, ApiKey.DELETE_RECORDS,
                           ApiKey.DESCRIBE_CONFIGS, ApiKey.OFFSET_FOR_LEADER_EPOCH):
                assert needed in keys


def test_api_versions_of_an_unknown_version_gets_a_v0_error_answer(cluster):
    # KIP-511: header v2 (flexible) request of ApiVersions v9; answer: v0 body, error 35.
    with RawClient(cluster.address(1)) as c:
        body = ApiVersionsRequest(client_software_name="x", client_software_version="1").encode(4)
        header = struct.pack(">hhih", ApiKey.API_VERSIONS, 9, 77, 1) + b"x" + b"\x00"
        c.send_bytes(struct.pack(">i", len(header) + len(body)) + header + body)
        frame = c.recv_frame()
        correlation_id, error = struct.unpack_from(">ih", frame)
        assert (correlation_id, error) == (77, ErrorCode.UNSUPPORTED_VERSION)
        from kafka_proto.messages import ApiVersionsResponse

        resp = ApiVersionsResponse.decode(frame[4:], 0)
        assert any(k.api_key == ApiKey.FETCH for k in resp.api_keys)
        # The connection stays usable.
        assert c.request(ApiVersionsRequest(client_software_name="t",
                                            client_software_version="1"), 3).error_code == 0


def test_api_versions_refuses_a_client_software_name_kafka_refuses(cluster):
    """KIP-511: Kafka answers INVALID_REQUEST, with no ranges, to a v3+ ApiVersions whose
    client software name or version is not letters, digits, '.' and '-' (starting and
    ending with a letter or digit); the cluster answered it as a valid one."""
    with RawClient(cluster.address(1)) as c:
        for name, version in (("bad name", "1"), ("", "1"), ("ok", "1.0-"), ("-ok", "1")):
            resp = c.request(ApiVersionsRequest(client_software_name=name,
                                                client_software_version=version), 3)
            assert (resp.error_code, resp.api_keys) == (ErrorCode.INVALID_REQUEST, []), name
        resp = c.request(ApiVersionsRequest(client_software_name="confluent-kafka-python",
                                            client_software_version="2.16.1-rdkafka-2.16.0"), 4)
        assert resp.error_code == ErrorCode.NONE and resp.api_keys
        # Before v3 there is no name to check.
        assert c.request(ApiVersionsRequest(), 2).error_code == ErrorCode.NONE


@pytest.mark.parametrize("api_key, version", [
    (ApiKey.PRODUCE, 2),            # removed in Kafka 4: not served
    (ApiKey.FETCH, 3),
    (ApiKey.METADATA, 13),          # above every known version
    (1000, 0),                      # unknown API key
    (ApiKey.LEADER_AND_ISR, 7),     # a controller API a broker does not serve to clients
])
def test_unsupported_request_versions_close_the_connection(cluster, api_key, version):
    since = cluster.clear_request_log()
    with RawClient(cluster.address(1), timeout=5) as c:
        header = struct.pack(">hhih", api_key, version, 5, 1) + b"c"
        c.send_bytes(struct.pack(">i", len(header) + 10) + header + bytes(10))
        assert c.closed_by_broker()
    events = cluster.request_log(since=since, kind="closed")
    assert events and events[-1].broker == 1
    assert alive(cluster)


# --------------------------------------------------------------------------- bad input


def test_malformed_requests_close_the_connection_and_the_cluster_stays_up(cluster):
    valid = encode_request(MetadataRequest(topics=None), 12, 1, "bad")
    cases = [
        valid[:4 + 6],                                                   # no whole header
        struct.pack(">i", len(valid) - 4 - 3) + valid[4:-3],             # body cut short
        struct.pack(">ihhih", 12, ApiKey.METADATA, 12, 1, 200) + b"ab",  # client_id past end
        struct.pack(">ihhih", 9, ApiKey.METADATA, 1, 1, -7) + b"\x00",  # bad client_id length
    ]
    for frame in cases:
        with RawClient(cluster.address(3), timeout=5) as c:
            c.send_bytes(frame)
            if frame is cases[0]:
                # An incomplete frame waits for its bytes, as Kafka waits: close ourselves.
                continue
            assert c.closed_by_broker(), frame
    assert alive(cluster)


def test_trailing_request_bytes_are_ignored_as_kafka_ignores_them(cluster):
    # librdkafka's admin Metadata v12 carries three such bytes.
    since = cluster.clear_request_log()
    valid = encode_request(MetadataRequest(topics=None), 12, 41, "trailing")
    with RawClient(cluster.address(3), timeout=5) as c:
        c.send_bytes(struct.pack(">i", len(valid) - 4 + 3) + valid[4:] + b"\x01\x00\x00")
        frame = c.recv_frame()
        assert frame is not None and struct.unpack_from(">i", frame)[0] == 41
    entry = cluster.request_log(since=since, api="Metadata")[-1]
    assert entry.details["trailing_bytes_ignored"] == 3


def test_a_client_id_not_utf8_is_read_with_replacement_characters_as_kafka_reads_it(cluster):
    """Kafka decodes request strings as Java does (bad bytes become U+FFFD) and answers;
    the cluster closed such a connection."""
    since = cluster.clear_request_log()
    valid = encode_request(MetadataRequest(topics=None), 12, 43, "utf-abc")
    bad = valid.replace(b"utf-abc", b"utf-a\xff\xfe")
    assert len(bad) == len(valid) and bad != valid
    with RawClient(cluster.address(3), timeout=5) as c:
        c.send_bytes(bad)
        frame = c.recv_frame()
        assert frame is not None and struct.unpack_from(">i", frame)[0] == 43
    (entry,) = [e for e in cluster.request_log(since=since, api="Metadata")
                if e.client_id.startswith("utf-a")]
    assert entry.client_id == "utf-a\ufffd\ufffd"


@pytest.mark.parametrize("size", [-1, -(1 << 31), 104857601, (1 << 31) - 1])
def test_oversized_or_negative_frames_close_the_connection(cluster, size):
    with RawClient(cluster.address(2), timeout=5) as c:
        c.send_bytes(struct.pack(">i", size) + b"\x00" * 16)
        assert c.closed_by_broker()
    assert alive(cluster)


def test_random_garbage_never_takes_the_cluster_down(cluster):
    rng = random.Random(1414)
    valid = encode_request(MetadataRequest(topics=None), 12, 1, "fuzz")
    for i in range(150):
        frame = bytearray(valid)
        for _ in range(rng.randint(1, 6)):   # flip bytes after the size prefix
            frame[rng.randrange(4, len(frame))] = rng.randrange(256)
        if i % 3 == 0:
            frame = struct.pack(">i", 40) + bytes(rng.randrange(256) for _ in range(40))
        with RawClient(cluster.address(1 + i % 3), timeout=5) as c:
            c.send_bytes(bytes(frame))
            c.sock.settimeout(0.5)
            try:
                c.recv_frame()   # an answer, a close, or silence (waiting for more bytes)
            except OSError:
                pass
    assert cluster.running
    assert alive(cluster)
    with open(cluster.log_path) as f:
        assert "Traceback" not in f.read()


# --------------------------------------------------------------------------- topics


def test_metadata_and_topic_administration(cluster):
    with RawClient(cluster.address(1)) as c:
        resp = c.request(CreateTopicsRequest(timeout_ms=5000, topics=[
            CreateTopicsRequest.CreatableTopic(name="admin-a", num_partitions=4,
                                               replication_factor=3,
                                               configs=[CreateTopicsRequest.CreatableTopicConfig(
                                                   name="retention.ms", value="1000")]),
            CreateTopicsRequest.CreatableTopic(name="admin a", num_partitions=1,
                                               replication_factor=1),
            CreateTopicsRequest.CreatableTopic(name="admin-b", num_partitions=1,
                                               replication_factor=4),
            CreateTopicsRequest.CreatableTopic(name="admin-c", num_partitions=1,
                                               replication_factor=1,
                                               configs=[CreateTopicsRequest.CreatableTopicConfig(
                                                   name="no.such.config", value="1")]),
        ]), 7)
        errors = {t.name: t.error_code for t in resp.topics}
        assert errors == {"admin-a": ErrorCode.NONE,
                          "admin a": ErrorCode.INVALID_TOPIC_EXCEPTION,
                          "admin-b": ErrorCode.INVALID_REPLICATION_FACTOR,
                          "admin-c": ErrorCode.INVALID_CONFIG}
        again = c.request(CreateTopicsRequest(timeout_ms=5000, topics=[
            CreateTopicsRequest.CreatableTopic(name="admin-a", num_partitions=1,
                                               replication_factor=1)]), 7)
        assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS

        md = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name="admin-a"), MetadataRequest.MetadataRequestTopic(name="missing")],
            allow_auto_topic_creation=True), 12)
        assert sorted(b.node_id for b in md.brokers) == [1, 2, 3]
        by_name = {t.name: t for t in md.topics}
        assert by_name["missing"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        topic = by_name["admin-a"]
        assert topic.error_code == 0 and len(topic.partitions) == 4
        # Round-robin placement: leaders spread over the brokers, 3 distinct replicas each.
        assert sorted({p.leader_id for p in topic.partitions}) == [1, 2, 3]
        for p in topic.partitions:
            assert sorted(p.replica_nodes) == [1, 2, 3] and p.leader_id == p.replica_nodes[0]
            assert sorted(p.isr_nodes) == [1, 2, 3]
        # By topic id (v10+).
        md_id = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            topic_id=topic.topic_id, name=None)]), 12)
        assert md_id.topics[0].name == "admin-a"

        configs = c.request(DescribeConfigsRequest(resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=2, resource_name="admin-a", configuration_keys=None)],
            include_synonyms=True), 4)
        entries = {e.name: e for e in configs.results[0].configs}
        assert entries["retention.ms"].value == "1000"
        assert entries["retention.ms"].config_source == 1            # topic override
        assert entries["segment.bytes"].config_source == 5           # default

        deleted = c.request(DeleteTopicsRequest(topic_names=["admin-a", "missing"],
                                                timeout_ms=5000), 5)
        assert {r.name: r.error_code for r in deleted.responses} == {
            "admin-a": ErrorCode.NONE, "missing": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert not os.path.exists(cluster.log_dir("admin-a", 0, 1))


# --------------------------------------------------------------------------- KIP-430


def operation_bits(*operations):
    return sum(1 << op.value for op in operations)


# What a Kafka broker without an authorizer answers: every operation of the resource type.
CLUSTER_OPERATIONS = operation_bits(
    AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
    AclOperation.DESCRIBE)
TOPIC_OPERATIONS = operation_bits(
    AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
    AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS)
GROUP_OPERATIONS = operation_bits(
    AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
    AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS)
NOT_ASKED = -(2 ** 31)


@pytest.mark.parametrize("version", [8, 10, 12])
def test_metadata_answers_authorized_operations_as_kafka_without_an_authorizer(cluster,
                                                                               version):
    cluster.create_topic(f"authorized-{version}", partitions=1, replication_factor=1)
    with RawClient(cluster.address(1)) as c:
        resp = c.request(MetadataRequest(topics=[
            MetadataRequest.MetadataRequestTopic(name=f"authorized-{version}"),
            MetadataRequest.MetadataRequestTopic(name="authorized-missing")],
            allow_auto_topic_creation=False, include_topic_authorized_operations=True,
            include_cluster_authorized_operations=version <= 10), version)
        # v11 dropped the cluster's field (DescribeCluster carries it).
        if version <= 10:
            assert resp.cluster_authorized_operations == CLUSTER_OPERATIONS
        by_name = {t.name: t for t in resp.topics}
        assert by_name[f"authorized-{version}"].topic_authorized_operations == TOPIC_OPERATIONS
        # Kafka sets them on an unknown topic's entry too (not on an unknown topic id's).
        assert by_name["authorized-missing"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert by_name["authorized-missing"].topic_authorized_operations == TOPIC_OPERATIONS
        plain = c.request(MetadataRequest(topics=None), version)
        assert {t.topic_authorized_operations for t in plain.topics} == {NOT_ASKED}
        if version <= 10:
            assert plain.cluster_authorized_operations == NOT_ASKED


def test_describe_cluster_is_served_as_kafka_serves_it(cluster):
    with RawClient(cluster.address(2)) as c:
        for version in (0, 1):
            resp = c.request(DescribeClusterRequest(include_cluster_authorized_operations=True,
                                                    endpoint_type=1), version)
            assert resp.error_code == ErrorCode.NONE
            assert resp.cluster_id == cluster.cluster_id
            assert sorted(b.broker_id for b in resp.brokers) == [1, 2, 3]
            assert resp.controller_id in (1, 2, 3)
            assert resp.cluster_authorized_operations == CLUSTER_OPERATIONS
        assert c.request(DescribeClusterRequest(), 0).cluster_authorized_operations == NOT_ASKED
        # KIP-919: a broker listener is not a controller's, and 7 is no endpoint type.
        assert c.request(DescribeClusterRequest(endpoint_type=2), 1).error_code == \
            ErrorCode.MISMATCHED_ENDPOINT_TYPE
        assert c.request(DescribeClusterRequest(endpoint_type=7), 1).error_code == \
            ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


def test_describe_groups_answers_authorized_operations(cluster):
    coordinator = cluster.coordinator(group="authorized-group")
    with RawClient(cluster.address(coordinator)) as c:
        resp = c.request(DescribeGroupsRequest(groups=["authorized-group"],
                                               include_authorized_operations=True), 5)
        assert resp.groups[0].error_code == ErrorCode.NONE
        assert resp.groups[0].authorized_operations == GROUP_OPERATIONS
        resp = c.request(DescribeGroupsRequest(groups=["authorized-group"]), 5)
        assert resp.groups[0].authorized_operations == NOT_ASKED


# --------------------------------------------------------------------------- produce


def test_produce_validation(cluster):
    cluster.create_topic("validate", partitions=1, replication_factor=3,
                         config={"max.message.bytes": 2000})
    leader = cluster.leader("validate", 0)
    follower = [b for b in (1, 2, 3) if b != leader][0]
    with RawClient(cluster.address(leader)) as c:
        def error_of(records, acks=-1, version=9):
            resp = c.request(produce_request("validate", records, acks=acks), version)
            return resp.responses[0].partition_responses[0].error_code

        good = batch([b"ok"])
        assert error_of(good) == ErrorCode.NONE
        corrupt = bytearray(batch([b"bad crc"]))
        corrupt[-1] ^= 0xFF
        assert error_of(bytes(corrupt)) == ErrorCode.CORRUPT_MESSAGE
        assert error_of(good + good) == ErrorCode.INVALID_RECORD
        assert error_of(batch([b"x" * 3000])) == ErrorCode.MESSAGE_TOO_LARGE
        assert error_of(good, acks=2) == ErrorCode.INVALID_REQUIRED_ACKS
        assert error_of(good[:30]) == ErrorCode.CORRUPT_MESSAGE
        resp = c.request(produce_request("no-such-topic", good), 9)
        assert resp.responses[0].partition_responses[0].error_code == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with RawClient(cluster.address(follower)) as c:
        resp = c.request(produce_request("validate", good), 10)
        p = resp.responses[0].partition_responses[0]
        assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # KIP-951: the answer names the leader and how to reach it.
        assert p.current_leader.leader_id == leader
        assert [e.node_id for e in resp.node_endpoints] == [leader]
    # Only the good batch is in the log, on every replica.
    state = cluster.wait_in_sync("validate")
    assert {r.log_end_offset for r in state.partitions[0].replica_logs.values()} == {1}


def with_crc(batch_bytes):
    """The batch with its CRC-32C made right again (a lie the CRC cannot catch)."""
    fixed = bytearray(batch_bytes)
    fixed[17:21] = struct.pack(">I", crc32c(bytes(fixed[21:])))
    return bytes(fixed)


def test_produce_refuses_records_that_do_not_parse_as_kafka_does(cluster):
    """A batch whose CRC matches but whose records do not parse was appended (consumers
    then failed on it); Kafka's LogValidator reads every record and refuses it."""
    cluster.create_topic("unparsable", partitions=1, replication_factor=2)
    leader = cluster.leader("unparsable", 0)
    good = batch([b"one", b"two"])
    count_at = 57        # recordsCount, after the fixed header fields
    with RawClient(cluster.address(leader)) as c:
        def error_of(records):
            resp = c.request(produce_request("unparsable", records), 9)
            return ErrorCode(resp.responses[0].partition_responses[0].error_code).name

        for count in (1, 3, 0, -1):   # lastOffsetDelta says 2 records
            lying = bytearray(good)
            lying[count_at:count_at + 4] = struct.pack(">i", count)
            assert error_of(with_crc(lying)) == "INVALID_RECORD", count
        record_length_lies = bytearray(good)
        record_length_lies[61] = 0x7F           # the first record's length varint: -64
        assert error_of(with_crc(record_length_lies)) == "INVALID_RECORD"
        for codec in (1, 2, 3, 4):
            # Kafka: "Failed to decompress record stream", a KafkaException answered
            # UNKNOWN_SERVER_ERROR.
            garbage = bytearray(good[:61]) + b"\x00not compressed at all" * 3
            garbage[8:12] = struct.pack(">i", len(garbage) - 12)
            garbage[21:23] = struct.pack(">h", codec)
            assert error_of(with_crc(garbage)) == "UNKNOWN_SERVER_ERROR", codec
        compressed = RecordBatchBuilder(compression=4)
        compressed.append(b"fine", key=b"k", timestamp=int(time.time() * 1000))
        assert error_of(compressed.build()) == "NONE"
        assert error_of(good) == "NONE"
    # Only the two good batches reached the log.
    state = cluster.wait_in_sync("unparsable")
    assert {r.log_end_offset for r in state.partitions[0].replica_logs.values()} == {3}
    with open(cluster.log_path) as f:
        assert "Traceback" not in f.read()


def test_a_topic_compression_type_writes_batches_with_its_codec(cluster):
    """compression.type gzip (confluent-kafka's admin integration tests create topics
    so): the leader writes a produced lz4 batch again with gzip, its records, headers and
    timestamps kept, as Kafka's LogValidator; "producer" keeps the producer's codec. The
    cluster refused every value but "producer"."""
    stamp = int(time.time() * 1000)
    sent = RecordBatchBuilder(compression=3)
    for i in range(3):
        sent.append(b"v%d" % i, key=b"k%d" % i, timestamp=stamp - 10 * i,
                    headers=[("h", b"%d" % i)])
    sent = sent.build()
    stored = {}
    for topic, codec in (("codec-gzip", "gzip"), ("codec-as-sent", "producer")):
        cluster.create_topic(topic, partitions=1, replication_factor=1,
                             config={"compression.type": codec})
        with RawClient(cluster.address(cluster.leader(topic, 0))) as c:
            resp = c.request(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
                ProduceRequest.TopicProduceData(name=topic, partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=sent)])]), 9)
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE
            fetched = c.request(FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                partition_max_bytes=1 << 20)])]), 4)
        batches = list(read_batches(fetched.responses[0].partitions[0].records))
        assert len(batches) == 1
        stored[codec] = (int(batches[0].compression),
                         [(r.offset, r.key, r.value, r.headers, r.timestamp)
                          for r in batches[0]])
    records = [(i, b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)], stamp - 10 * i)
               for i in range(3)]
    assert stored == {"gzip": (1, records), "producer": (3, records)}


def _stored_batch(cluster, topic, records):
    """``records`` produced to partition 0 of ``topic`` and fetched back: the batch the
    leader stored."""
    with RawClient(cluster.address(cluster.leader(topic, 0))) as c:
        resp = c.request(produce_request(topic, records), 9)
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        fetched = c.request(FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 22,
            topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                            partition_max_bytes=1 << 22)])]), 4)
    return bytes(fetched.responses[0].partitions[0].records)


@pytest.mark.parametrize("codec, levels", [
    # compression.<codec>.level -> the level the codec is given (None: its default)
    ("gzip", {None: None, 1: 1, 9: 9}),
    ("lz4", {None: None, 9: None, 17: 17}),     # Kafka's default 9: lz4's fast mode
    ("zstd", {None: 3, -5: -5, 1: 1, 19: 19}),
])
def test_a_topic_recompresses_at_its_compression_level(cluster, codec, levels):
    """KIP-390: a batch the leader writes again in the topic's codec (the producer's is
    another) is compressed at compression.<codec>.level; the cluster used the codec's
    default whatever the topic said. The stored payload is the codec's output at that
    level, and a higher level stores fewer bytes of compressible records."""
    codec_id = int(getattr(Compression, codec.upper()))
    sent = RecordBatchBuilder()
    for i in range(50):
        sent.append(b"record %d: " % i + b"a compressible value, said again. " * 12,
                    key=b"k%d" % i, timestamp=1_700_000_000_000 + i)
    sent = sent.build()
    sizes = {}
    for level, given in levels.items():
        topic = f"level-{codec}-{'default' if level is None else level}"
        config = {"compression.type": codec}
        if level is not None:
            config[f"compression.{codec}.level"] = str(level)
        cluster.create_topic(topic, partitions=1, replication_factor=1, config=config)
        stored = _stored_batch(cluster, topic, sent)
        (b,) = list(read_batches(stored))
        assert int(b.compression) == codec_id
        assert [r.value for r in b] == [r.value for r in next(read_batches(sent))]
        payload = stored[BATCH_HEADER_SIZE:]
        assert payload == compress(codec_id, decompress(codec_id, payload), given)
        sizes[level] = len(payload)
    assert sizes[max(k for k in levels if k is not None)] < sizes[1 if codec != "lz4" else 9]


@pytest.mark.parametrize("codec, levels", [
    # compression.level -> the level on the wire, as librdkafka translates it
    ("gzip", {-1: None, 1: 1, 12: 9}), ("lz4", {-1: None, 3: 3, 12: 12}),
    ("zstd", {-1: None, 1: 1, 12: 12})])
def test_the_producers_compression_level_is_on_the_wire(cluster, codec, levels):
    """Our producer's compression.level in the batch the broker stored (the topic keeps
    the producer's codec): the payload is the codec's output at the level librdkafka
    would use, and a higher level sends fewer bytes of compressible records."""
    codec_id = int(getattr(Compression, codec.upper()))
    topic = f"producer-level-{codec}"
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    sizes = {}
    for n, (level, given) in enumerate(levels.items()):
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                      "compression.type": codec, "compression.level": level,
                      "linger.ms": 60_000, "batch.num.messages": 10_000})
        try:
            for i in range(50):
                p.produce(topic, b"record %d: " % i + b"compressible, said again. " * 12,
                          partition=0)
            assert p.flush(30) == 0
        finally:
            p.close(5)   # bounded: a batch that cannot be built is never delivered
        with RawClient(cluster.address(cluster.leader(topic, 0))) as c:
            fetched = c.request(FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 22,
                topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=50 * n,
                                                partition_max_bytes=1 << 22)])]), 4)
        data = bytes(fetched.responses[0].partitions[0].records)
        (b,) = list(read_batches(data))   # all 50 in one batch, as sent
        assert (int(b.compression), b.base_offset, len(list(b))) == (codec_id, 50 * n, 50)
        payload = data[BATCH_HEADER_SIZE:]
        assert payload == compress(codec_id, decompress(codec_id, payload), given)
        sizes[level] = len(payload)
    low, high = sorted(sizes)[1:]
    assert sizes[high] < sizes[low]


def test_compression_levels_are_validated_and_described_as_kafka(cluster):
    """compression.gzip.level (-1, or 1..9), compression.lz4.level (1..17, default 9),
    compression.zstd.level (-131072..22, default 3): refused out of range with
    INVALID_CONFIG by CreateTopics and IncrementalAlterConfigs, described with their
    defaults; the cluster refused the names as unknown."""
    Topic, Config = CreateTopicsRequest.CreatableTopic, \
        CreateTopicsRequest.CreatableTopicConfig
    cases = {"lvl-gzip-0": ("compression.gzip.level", "0"),
             "lvl-gzip-10": ("compression.gzip.level", "10"),
             "lvl-lz4-0": ("compression.lz4.level", "0"),
             "lvl-lz4-18": ("compression.lz4.level", "18"),
             "lvl-zstd-23": ("compression.zstd.level", "23"),
             "lvl-zstd-low": ("compression.zstd.level", "-131073"),
             "lvl-ok": ("compression.zstd.level", "-131072")}
    with RawClient(cluster.address(1)) as c:
        resp = c.request(CreateTopicsRequest(timeout_ms=5000, topics=[
            Topic(name=name, num_partitions=1, replication_factor=1,
                  configs=[Config(name=k, value=v)]) for name, (k, v) in cases.items()]), 7)
    errors = {t.name: t.error_code for t in resp.topics}
    assert errors == {name: ErrorCode.NONE if name == "lvl-ok" else ErrorCode.INVALID_CONFIG
                      for name in cases}
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource(ResourceType.TOPIC, "lvl-ok")
    described = admin.describe_configs([resource])[resource].result(30)
    assert {k: (described[k].value, described[k].is_default) for k in (
        "compression.gzip.level", "compression.lz4.level", "compression.zstd.level")} == {
        "compression.gzip.level": ("-1", True), "compression.lz4.level": ("9", True),
        "compression.zstd.level": ("-131072", False)}
    broker = ConfigResource(ResourceType.BROKER, "1")   # the topics' defaults
    shown = admin.describe_configs([broker])[broker].result(30)
    assert [shown[f"compression.{codec}.level"].value for codec in ("gzip", "lz4", "zstd")] \
        == ["-1", "9", "3"]
    for value, accepted in (("17", True), ("18", False), ("1", True)):
        resource = ConfigResource(ResourceType.TOPIC, "lvl-ok", incremental_configs=[
            ConfigEntry("compression.lz4.level", value,
                        incremental_operation=AlterConfigOpType.SET)])
        future = admin.incremental_alter_configs([resource])[resource]
        if accepted:
            assert future.result(30) is None
        else:
            with pytest.raises(KafkaException) as info:
                future.result(30)
            assert info.value.args[0].code() == ErrorCode.INVALID_CONFIG
    described = admin.describe_configs([resource])[resource].result(30)
    assert described["compression.lz4.level"].value == "1"


def test_subtracting_the_last_cleanup_policy_leaves_it_empty(cluster):
    """confluent-kafka's test_incremental_alter_configs: SUBTRACT of "delete" from
    cleanup.policy leaves "" (Kafka: neither deleted nor compacted); the cluster refused
    the empty list, failing the whole alteration."""
    cluster.create_topic("policy-emptied", partitions=1, replication_factor=1)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource(ResourceType.TOPIC, "policy-emptied", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete",
                    incremental_operation=AlterConfigOpType.SUBTRACT)])
    assert admin.incremental_alter_configs([resource])[resource].result(30) is None
    described = admin.describe_configs([resource])[resource].result(30)
    assert described["cleanup.policy"].value == ""
    assert not described["cleanup.policy"].is_default


def test_file_delete_delay_is_a_topic_property(cluster):
    """confluent-kafka's test_basic_operations alters file.delete.delay.ms and reads it
    back: Kafka's topic property (default log.segment.delete.delay.ms, 60000); the
    cluster refused it as unknown."""
    cluster.create_topic("delete-delay", partitions=1, replication_factor=1)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource(ResourceType.TOPIC, "delete-delay")
    before = admin.describe_configs([resource])[resource].result(30)
    assert before["file.delete.delay.ms"].value == "60000"
    assert before["file.delete.delay.ms"].is_default
    resource.add_incremental_config(ConfigEntry(
        "file.delete.delay.ms", "12345", incremental_operation=AlterConfigOpType.SET))
    assert admin.incremental_alter_configs([resource])[resource].result(30) is None
    after = admin.describe_configs([resource])[resource].result(30)
    assert after["file.delete.delay.ms"].value == "12345"


def test_a_partition_named_twice_in_a_produce_gets_only_its_last_batch(cluster):
    """Kafka reads a Produce's partitions into a map: of a partition named twice (in one
    topic entry or in two) only the last batch is appended, and answered once. The
    cluster appended every one and answered each with the last one's offset, so a client
    was told three batches sit at one offset."""
    cluster.create_topic("named-twice", partitions=1, replication_factor=1)
    leader = cluster.leader("named-twice", 0)
    first, second, last = batch([b"a1", b"a2"]), batch([b"b1"]), batch([b"c1", b"c2", b"c3"])
    P = ProduceRequest.PartitionProduceData
    with RawClient(cluster.address(leader)) as c:
        resp = c.request(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
            ProduceRequest.TopicProduceData(name="named-twice", partition_data=[
                P(index=0, records=first), P(index=0, records=second)]),
            ProduceRequest.TopicProduceData(name="named-twice", partition_data=[
                P(index=0, records=last)])]), 9)
        answered = [(t.name, p.index, p.error_code, p.base_offset)
                    for t in resp.responses for p in t.partition_responses]
        assert answered == [("named-twice", 0, ErrorCode.NONE, 0)]
        fetched = c.request(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0,
                                         max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
                                             topic="named-twice", partitions=[
                                                 FetchRequest.FetchPartition(
                                                     partition=0, fetch_offset=0,
                                                     partition_max_bytes=1 << 20)])]), 4)
    part = fetched.responses[0].partitions[0]
    assert part.high_watermark == 3
    assert [bytes(r.value) for b in read_batches(part.records) for r in b] == \
        [b"c1", b"c2", b"c3"]


def test_list_offsets_refuses_a_partition_named_twice(cluster):
    """Kafka answers each occurrence of a partition named twice in one ListOffsets with
    INVALID_REQUEST (it was answered twice); the others are answered."""
    cluster.create_topic("listed-twice", partitions=2, replication_factor=1)
    leader = cluster.leader("listed-twice", 0)
    P = ListOffsetsRequest.ListOffsetsPartition
    with RawClient(cluster.address(leader)) as c:
        resp = c.request(ListOffsetsRequest(replica_id=-1, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name="listed-twice", partitions=[
                P(partition_index=0, timestamp=-1), P(partition_index=0, timestamp=-2)])]), 7)
        assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == [
            (0, ErrorCode.INVALID_REQUEST), (0, ErrorCode.INVALID_REQUEST)]
        resp = c.request(ListOffsetsRequest(replica_id=-1, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name="listed-twice", partitions=[
                P(partition_index=0, timestamp=-1)])]), 7)
        assert resp.topics[0].partitions[0].error_code == ErrorCode.NONE


def test_list_offsets_and_fetch_limits(cluster):
    cluster.create_topic("offsets", partitions=1, replication_factor=1)
    leader = cluster.leader("offsets", 0)
    base_ts = 1_700_000_000_000
    with RawClient(cluster.address(leader)) as c:
        for i in range(5):
            c.request(produce_request("offsets", batch([b"a", b"b"], timestamp=base_ts + 10 * i)), 9)

        def list_offset(ts):
            resp = c.request(ListOffsetsRequest(replica_id=-1, topics=[
                ListOffsetsRequest.ListOffsetsTopic(name="offsets", partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=ts)])]),
                7)
            p = resp.topics[0].partitions[0]
            return p.error_code, p.offset, p.timestamp

        assert list_offset(-2) == (0, 0, -1)
        assert list_offset(-1) == (0, 10, -1)
        assert list_offset(base_ts + 20) == (0, 4, base_ts + 20)
        assert list_offset(base_ts + 21) == (0, 5, base_ts + 21)
        assert list_offset(-3) == (0, 9, base_ts + 41)
        assert list_offset(base_ts + 1000) == (0, -1, -1)

        def fetch(offset, max_bytes=1 << 20, epoch=-1):
            resp = c.request(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1,
                                          max_bytes=max_bytes, topics=[FetchRequest.FetchTopic(
                                              topic="offsets", partitions=[
                                                  FetchRequest.FetchPartition(
                                                      partition=0, fetch_offset=offset,
                                                      current_leader_epoch=epoch,
                                                      partition_max_bytes=max_bytes)])]), 12)
            return resp.responses[0].partitions[0]

        p = fetch(3)
        from kafka_proto.records import read_batches

        assert [b.base_offset for b in read_batches(p.records)] == [2, 4, 6, 8]
        assert p.high_watermark == 10 and p.log_start_offset == 0
        one = fetch(0, max_bytes=10)   # smaller than a batch: still one whole batch
        assert [b.base_offset for b in read_batches(one.records)] == [0]
        assert fetch(11).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert fetch(10).records == b""
        assert fetch(0, epoch=5).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


# --------------------------------------------------------------------------- resources


def _cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_a_cluster_out_of_descriptors_refuses_topics_and_keeps_serving(tmp_path):
    """The cluster process under RLIMIT_NOFILE 400. A CreateTopics whose replicas need
    more files than are left used to fail half way with UNKNOWN_SERVER_ERROR and leave
    the process out of descriptors: every later topic failed, and the listeners, unable
    to accept, spun the loop at full CPU. Now it is refused with INVALID_PARTITIONS, and
    a flood of connections past the limit waits without spinning, then is served."""
    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (400, 400))

    proc, lines = start_cli_cluster(
        ["--brokers", "1", "--control-port", "0", "--data-dir", str(tmp_path / "d"),
         "--log-level", "ERROR"], preexec_fn=low_limit)
    flood = []
    try:
        attached = Cluster.attach(lines["control"])
        try:
            address = lines["bootstrap.servers"]
            with RawClient(address) as c:
                resp = c.request(CreateTopicsRequest(timeout_ms=5000, topics=[
                    CreateTopicsRequest.CreatableTopic(name="too-many", num_partitions=300,
                                                       replication_factor=1)]), 7)
                assert resp.topics[0].error_code == ErrorCode.INVALID_PARTITIONS
                assert "RLIMIT_NOFILE" in resp.topics[0].error_message
            assert attached.topics() == []
            attached.create_topic("fits", partitions=2)
            # More connections than descriptors: the last ones wait in the backlog.
            host, port = address.rsplit(":", 1)
            for _ in range(450):
                flood.append(socket.create_connection((host, int(port)), timeout=5))
            time.sleep(0.5)
            before = _cpu_seconds(proc.pid)
            time.sleep(1.0)
            assert _cpu_seconds(proc.pid) - before < 0.5     # it spun: ~1 s per second
            for s in flood:
                s.close()
            flood.clear()
            with RawClient(address) as c:
                md = c.request(MetadataRequest(topics=None), 12)
                assert [t.name for t in md.topics] == ["fits"]
                # 100-byte segments: every batch rolls a segment (3 more files) until
                # none can be opened. Kafka answers a failed append KAFKA_STORAGE_ERROR
                # (producers retry it); it was UNKNOWN_SERVER_ERROR, with a traceback.
                attached.create_topic("tiny-segments", config={"segment.bytes": 100})
                errors = set()
                for _ in range(200):
                    resp = c.request(produce_request("tiny-segments", batch([b"x" * 60])), 9)
                    errors.add(resp.responses[0].partition_responses[0].error_code)
                assert errors == {ErrorCode.NONE, ErrorCode.KAFKA_STORAGE_ERROR}
                assert c.request(MetadataRequest(topics=None), 12).brokers
        finally:
            attached.stop()
        assert proc.poll() is None
    finally:
        for s in flood:
            s.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_idle_connections_are_closed_as_kafka_closes_them(tmp_path):
    """connections.max.idle.ms: a client that sent half a request and went silent held
    its connection (and the bytes of its frame) for ever; Kafka closes a connection
    without a byte in or out for that long. A connection in use stays."""
    with Cluster(brokers=1, data_dir=str(tmp_path / "idle"),
                 broker_config={"connections.max.idle.ms": 1000}) as c:
        since = c.clear_request_log()
        with RawClient(c.address(1), timeout=10) as silent, \
                RawClient(c.address(1), timeout=10) as busy:
            silent.send_bytes(struct.pack(">i", 500) + b"half a request")
            started = time.monotonic()
            for _ in range(8):            # every 0.3 s: never idle for a second
                assert busy.request(MetadataRequest(topics=None), 12).brokers
                time.sleep(0.3)
            assert silent.closed_by_broker()
            assert 1.0 <= time.monotonic() - started < 5
            assert busy.request(MetadataRequest(topics=None), 12).brokers
        closed = c.request_log(since=since, kind="closed")
        assert [e.details["detail"] for e in closed] == [
            "idle for more than connections.max.idle.ms (1 s)"]


def _rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads RSS from /proc")
def test_clients_that_leave_waiting_requests_leave_nothing_behind(tmp_path):
    """A client sends a Fetch that may wait 24 days (or an acks=all Produce the replicas
    do not confirm) and closes its connection. The waiting request kept the connection,
    and its 64 KiB read buffer, until woken or expired (its cancelled timer stayed in
    the heap holding it too): 69 KB per such client, 1.3 GB after 20,000 of them."""
    with Cluster(brokers=2, data_dir=str(tmp_path / "leave")) as c:
        c.create_topic("quiet", partitions=1, replication_factor=1)
        c.create_topic("stalled", partitions=1, replication_factor=2)
        leader = c.leader("stalled", 0)
        forever = (1 << 31) - 1
        fetch = encode_request(FetchRequest(
            replica_id=-1, max_wait_ms=forever, min_bytes=1, max_bytes=1 << 20,
            topics=[FetchRequest.FetchTopic(topic="quiet", partitions=[
                FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                            partition_max_bytes=1 << 20)])]), 12, 1, "leaves")
        produce = encode_request(ProduceRequest(acks=-1, timeout_ms=forever, topic_data=[
            ProduceRequest.TopicProduceData(name="stalled", partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=batch([b"x"]))])]),
            9, 1, "leaves")

        def leave(address, request, times):
            host, port = address.rsplit(":", 1)
            for _ in range(times):
                with socket.create_connection((host, int(port))) as s:
                    s.sendall(request)

        leave(c.address(c.leader("quiet", 0)), fetch, 200)    # warm up
        time.sleep(0.5)
        before = _rss_mb(c.pid)
        leave(c.address(c.leader("quiet", 0)), fetch, 1500)
        # The follower's fetches answered late: acks=all waits for ever.
        c.set_latency(3600, broker=leader, apis=["Fetch"])
        leave(c.address(leader), produce, 1000)
        time.sleep(1.0)
        grown = _rss_mb(c.pid) - before
        assert grown < 40, f"{grown:.0f} MB kept for 2500 clients gone"
        c.clear_faults()
        with RawClient(c.address(c.leader("quiet", 0))) as client:
            assert client.request(MetadataRequest(topics=None), 12).brokers
