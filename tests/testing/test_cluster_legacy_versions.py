"""The test cluster as a broker that still serves the versions Kafka 4 removed
(``legacy.api.versions.enable``): Fetch below v4 answered with message sets
down-converted as Kafka converts them, Produce below v3 with message sets stored as v2
batches, ListOffsets v0, and the special ListOffsets timestamps refused in the versions
before theirs. Checked on the wire with a bare client:
the bytes of each answer are decoded here, record by record."""
from __future__ import annotations

import struct
import time
import uuid

import pytest

from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (ApiKey, ApiVersionsRequest, FetchRequest, ListOffsetsRequest,
                                  ProduceRequest)
from kafka_proto.records import (Compression, LegacyMessage, RecordBatchBuilder, TimestampType,
                                 build_message_set, read_batches)

from kafka_client import Producer
from kafka_client.testing import Cluster

from rawclient import RawClient  # tests/testing/rawclient.py

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

T0 = 1_700_000_000_000
CODEC_NAMES = {Compression.NONE: "none", Compression.GZIP: "gzip",
               Compression.SNAPPY: "snappy", Compression.LZ4: "lz4"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("legacy")),
                 broker_config={"legacy.api.versions.enable": True}) as c:
        yield c


def new_topic(cluster, **config) -> str:
    name = f"legacy-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=1, config=config or None)
    return name


def v2_batch(first: int, count: int, compression: int = Compression.NONE,
             headers=(("h", b"x"),)):
    b = RecordBatchBuilder(compression=compression)
    for i in range(first, first + count):
        b.append(b"v%d" % i, key=b"k%d" % i, timestamp=T0 + i, headers=list(headers))
    return b.build()


def produce(client: RawClient, topic: str, data: bytes) -> int:
    resp = client.request(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=data)])]), 8)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.NONE, part
    return part.base_offset


def fetch(client: RawClient, topic: str, version: int, offset: int = 0,
          max_bytes: int = 1 << 20):
    resp = client.request(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0,
                                       max_bytes=1 << 24, topics=[
        FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)])]), version)
    return resp.responses[0].partitions[0]


def rows(records: bytes):
    return [(b.magic, r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value,
             list(r.headers)) for b in read_batches(records) for r in b]


def test_the_removed_versions_are_advertised_only_when_asked(cluster, tmp_path):
    with RawClient(cluster.address(1)) as c:
        ranges = {k.api_key: (k.min_version, k.max_version)
                  for k in c.request(ApiVersionsRequest(), 0).api_keys}
    assert ranges[ApiKey.FETCH][0] == 0 and ranges[ApiKey.LIST_OFFSETS][0] == 0
    assert ranges[ApiKey.OFFSET_COMMIT][0] == ranges[ApiKey.OFFSET_FETCH][0] == 0
    assert ranges[ApiKey.CREATE_TOPICS][0] == ranges[ApiKey.DELETE_TOPICS][0] == 0
    assert ranges[ApiKey.DESCRIBE_CONFIGS][0] == 0
    assert ranges[ApiKey.PRODUCE][0] == 0      # legacy message sets, stored as v2 batches
    with Cluster(brokers=1, data_dir=str(tmp_path / "default")) as default:
        with RawClient(default.address(1)) as c:
            ranges = {k.api_key: (k.min_version, k.max_version)
                      for k in c.request(ApiVersionsRequest(), 0).api_keys}
    assert ranges[ApiKey.FETCH][0] == 4 and ranges[ApiKey.LIST_OFFSETS][0] == 1
    assert ranges[ApiKey.PRODUCE][0] == 3


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP,
                                         Compression.SNAPPY, Compression.LZ4])
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_below_v4_gets_the_batches_down_converted(cluster, version, compression):
    """Fetch v0-1 read format v0 (no timestamps), v2-3 format v1; offsets, keys, values
    and timestamps are kept, headers dropped, control batches left out; an uncompressed
    batch loses its records below the fetch offset, a compressed one keeps them (the
    fetcher skips them)."""
    topic = new_topic(cluster)
    magic = 0 if version <= 1 else 1
    with RawClient(cluster.address(1)) as c:
        produce(c, topic, v2_batch(0, 4, compression))
        # a committed transaction: its marker is a control batch, which has no legacy form
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                             "transactional.id": topic, "linger.ms": 5,
                             "compression.type": CODEC_NAMES[compression]})
        producer.init_transactions(20)
        producer.begin_transaction()
        for i in range(4, 7):
            producer.produce(topic, b"v%d" % i, key=b"k%d" % i, timestamp=T0 + i,
                             headers=[("h", b"x")])
        producer.commit_transaction(20)
        producer.close()
        produce(c, topic, v2_batch(8, 2, compression))
        part = fetch(c, topic, version, offset=2)
    assert part.error_code == ErrorCode.NONE and part.high_watermark == 10
    got = rows(part.records)
    first = 0 if compression else 2
    expected = [(magic, i, T0 + i if magic else -1,
                 int(TimestampType.CREATE_TIME) if magic else -1, b"k%d" % i, b"v%d" % i, [])
                for i in list(range(first, 7)) + [8, 9]]
    assert got == expected
    assert {b.magic for b in read_batches(part.records)} == {magic}


def test_log_append_time_topics_convert_with_the_append_time(cluster):
    topic = new_topic(cluster, **{"message.timestamp.type": "LogAppendTime"})
    with RawClient(cluster.address(1)) as c:
        before = int(time.time() * 1000)
        produce(c, topic, v2_batch(0, 3, Compression.GZIP))
        stamps = {(ts, kind) for _m, _o, ts, kind, _k, _v, _h in
                  rows(fetch(c, topic, 3).records)}
    assert len(stamps) == 1
    ((stamp, kind),) = stamps
    assert kind == int(TimestampType.LOG_APPEND_TIME) and stamp >= before


def test_zstd_cannot_be_down_converted(cluster):
    """Kafka has no legacy form of zstd: a first batch in zstd makes the partition's answer
    UNSUPPORTED_COMPRESSION_TYPE; after other batches, the answer ends before it."""
    zstd_first, zstd_later = new_topic(cluster), new_topic(cluster)
    with RawClient(cluster.address(1)) as c:
        produce(c, zstd_first, v2_batch(0, 2, Compression.ZSTD))
        produce(c, zstd_later, v2_batch(0, 2, Compression.GZIP))
        produce(c, zstd_later, v2_batch(2, 2, Compression.ZSTD))
        produce(c, zstd_later, v2_batch(4, 2))
        for version in (0, 3):
            part = fetch(c, zstd_first, version)
            assert part.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
            assert not part.records
            part = fetch(c, zstd_later, version)
            assert part.error_code == ErrorCode.NONE
            assert [o for _m, o, *_ in rows(part.records)] == [0, 1]
        # from v4 on the stored batches go out as they are
        assert fetch(c, zstd_first, 4).error_code == ErrorCode.NONE


def test_a_down_converted_answer_is_sized_as_the_stored_batches(cluster):
    """As Kafka sizes it: as many bytes as the batches read (the first converted batch at
    least). Longer converted data is cut, leaving an incomplete last message; shorter is
    padded with an entry longer than what remains. Either way the reader stops there."""
    topic = new_topic(cluster)
    with RawClient(cluster.address(1)) as c:
        stored = [v2_batch(10 * n, 10, headers=()) for n in range(3)]
        for data in stored:
            produce(c, topic, data)
        cut = fetch(c, topic, 0)
        with_headers = new_topic(cluster)
        for n in range(3):
            produce(c, with_headers, v2_batch(10 * n, 10, headers=(("a" * 40, b"b" * 80),)))
        padded = fetch(c, with_headers, 1, max_bytes=1 << 20)
    # uncompressed v0 messages are longer than v2 records: cut short, the next message
    # begun but incomplete
    assert len(cut.records) == sum(len(b) for b in stored)
    offsets = [o for _m, o, *_ in rows(cut.records)]
    assert offsets == list(range(len(offsets))) and 10 < len(offsets) < 30
    assert sum(b.size for b in read_batches(cut.records)) < len(cut.records)
    # headers dropped: the converted data is shorter, padded with an overflow entry
    offsets = [o for _m, o, *_ in rows(padded.records)]
    assert offsets == list(range(30))
    tail = bytes(padded.records[sum(b.size for b in read_batches(padded.records)):])
    assert tail
    if len(tail) >= 8:
        assert struct.unpack_from(">q", tail)[0] == -1     # Kafka's overflow entry


def test_list_offsets_v0_answers_old_style_offsets(cluster):
    topic = new_topic(cluster)
    with RawClient(cluster.address(1)) as c:
        produce(c, topic, v2_batch(0, 5))

        def lookup(timestamp: int, count: int = 1):
            resp = c.request(ListOffsetsRequest(replica_id=-1, topics=[
                ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(
                        partition_index=0, timestamp=timestamp, max_num_offsets=count)])]), 0)
            part = resp.topics[0].partitions[0]
            assert part.error_code == ErrorCode.NONE
            return list(part.old_style_offsets)

        assert lookup(-1) == [5]
        assert lookup(-2) == [0]
        assert lookup(-1, 10) == [5, 0]     # the high watermark, then the segment's base
        assert lookup(T0 + 100) == [0]       # the segment's records all came before
        assert lookup(T0 - 100) == []


@pytest.mark.parametrize("timestamp, since", [(-3, 7), (-4, 8), (-5, 9)])
def test_special_list_offsets_timestamps_need_their_version(cluster, timestamp, since):
    """-3 (max timestamp, KIP-734) came with ListOffsets v7, -4 (local log start, KIP-405)
    with v8, -5 (last tiered offset, KIP-1005) with v9: an older request is answered
    UNSUPPORTED_VERSION for that partition."""
    topic = new_topic(cluster)
    with RawClient(cluster.address(1)) as c:
        produce(c, topic, v2_batch(0, 3))
        for version in (since - 1, since):
            resp = c.request(ListOffsetsRequest(replica_id=-1, topics=[
                ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=0,
                                                            timestamp=timestamp)])]), version)
            part = resp.topics[0].partitions[0]
            if version < since:
                assert part.error_code == ErrorCode.UNSUPPORTED_VERSION
                continue
            assert part.error_code == ErrorCode.NONE
            # max timestamp: the last record; local log start: 0; nothing is tiered: -1
            assert part.offset == {-3: 2, -4: 0, -5: -1}[timestamp]


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP, Compression.LZ4])
@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_below_v3_stores_the_message_set_as_one_v2_batch(cluster, version,
                                                                  compression):
    """A legacy message set (magic 1 from Produce v2, 0 before) is stored as Kafka 3
    stores it: one v2 batch, offsets from the log end, the producer's timestamps (none in
    magic 0), the wrappers' codec; read back at Fetch v4+ and, down-converted, below."""
    topic = new_topic(cluster)
    magic = 1 if version == 2 else 0
    messages = [LegacyMessage(i, T0 + i, None if i == 2 else b"k%d" % i, b"v%d" % i)
                for i in range(5)]
    with RawClient(cluster.address(1)) as c:
        produce(c, topic, v2_batch(0, 3))      # offsets 0-2 taken already
        for _ in range(2):
            resp = c.request(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
                ProduceRequest.TopicProduceData(name=topic, partition_data=[
                    ProduceRequest.PartitionProduceData(
                        index=0, records=build_message_set(messages, magic, compression))])]),
                version)
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.NONE
        stored = fetch(c, topic, 12)
        old = fetch(c, topic, version, offset=3)
    assert part.base_offset == 8
    batches = list(read_batches(stored.records))
    assert [(b.magic, b.base_offset, b.records_count, int(b.compression)) for b in batches] \
        == [(2, 0, 3, 0), (2, 3, 5, compression), (2, 8, 5, compression)]
    stamp = (lambda i: T0 + i) if magic else (lambda i: -1)
    assert [(r.offset, r.timestamp, r.key, r.value) for b in batches[1:] for r in b] == \
        [(3 + n + i, stamp(i), m.key, m.value) for n in (0, 5) for i, m in enumerate(messages)]
    # read back in the old version: the stored bytes' worth (legacy messages are longer)
    back = [(o, k, v) for _m, o, _t, _tt, k, v, _h in rows(old.records)]
    assert back and back == [(3 + n + i, m.key, m.value) for n in (0, 5)
                             for i, m in enumerate(messages)][:len(back)]


def test_produce_below_v3_refuses_what_kafka_refuses(cluster):
    topic = new_topic(cluster)
    good = build_message_set([LegacyMessage(0, T0, b"k", b"v")], 1)
    damaged = good[:20] + bytes([good[20] ^ 0xFF]) + good[21:]
    with RawClient(cluster.address(1)) as c:
        for records, error in ((damaged, ErrorCode.CORRUPT_MESSAGE),
                               (good[:-3], ErrorCode.CORRUPT_MESSAGE),
                               (v2_batch(0, 2), ErrorCode.INVALID_RECORD)):
            resp = c.request(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
                ProduceRequest.TopicProduceData(name=topic, partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=records)])]), 2)
            assert resp.responses[0].partition_responses[0].error_code == error
        assert fetch(c, topic, 12).high_watermark == 0


def peak_rss_mib(pid: int) -> int:
    """The process' peak resident set (VmHWM), in MiB."""
    with open(f"/proc/{pid}/status") as f:
        line = next(x for x in f if x.startswith("VmHWM:"))
    return int(line.split()[1]) // 1024


def test_a_legacy_set_that_expands_beyond_the_budget_is_refused_in_bounded_memory(tmp_path):
    """gzip wrappers of 24 MiB of zeros are 24 kB each: the cluster decompressed every
    wrapper of the set at once and rebuilt them in memory (Kafka streams them), so a
    150 kB Produce v2 grew the cluster process by hundreds of MiB (16 MiB of request, by
    gigabytes), only to refuse the v2 batch it made, as too large to decompress. Past
    UP_CONVERT_BUDGET (64 MiB) of records the set is refused at once, with that answer
    (UNKNOWN_SERVER_ERROR, as a v2 batch of that size); a set within it is stored."""
    wrapper = build_message_set([LegacyMessage(0, T0, None, bytes(24 << 20))], 1,
                                Compression.GZIP)
    assert len(wrapper) < 100_000
    with Cluster(brokers=1, data_dir=str(tmp_path),
                 broker_config={"legacy.api.versions.enable": True}) as cluster:
        topic = new_topic(cluster)
        with RawClient(cluster.address(1)) as c:
            def produce_v2(records: bytes) -> int:
                resp = c.request(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
                    ProduceRequest.TopicProduceData(name=topic, partition_data=[
                        ProduceRequest.PartitionProduceData(index=0, records=records)])]),
                    2)
                return resp.responses[0].partition_responses[0].error_code

            before = peak_rss_mib(cluster.pid)
            assert produce_v2(wrapper * 6) == ErrorCode.UNKNOWN_SERVER_ERROR
            grown = peak_rss_mib(cluster.pid) - before
            assert produce_v2(wrapper) == ErrorCode.NONE
            assert fetch(c, topic, 12).high_watermark == 1
    assert grown < 200, f"the cluster grew by {grown} MiB"


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
def test_a_compacted_log_down_converts_with_its_gaps(cluster, compression):
    """Compaction leaves batches whose offsets have gaps: their message sets keep each
    record's own offset (a v1 wrapper's relative offsets count from its first record)."""
    topic = new_topic(cluster, **{"cleanup.policy": "compact"})
    with RawClient(cluster.address(1)) as c:
        b = RecordBatchBuilder(compression=compression)
        for i, key in enumerate(b"abacaba"):
            b.append(b"v%d" % i, key=bytes([key]), timestamp=T0 + i)
        produce(c, topic, b.build())
        cluster.roll_segments(topic)
        cluster.run_cleaner()
        kept = [(r.offset, r.key, r.value) for bt in read_batches(fetch(c, topic, 12).records)
                for r in bt]
        old = [(o, k, v) for _m, o, _t, _tt, k, v, _h in rows(fetch(c, topic, 3).records)]
    assert kept == [(3, b"c", b"v3"), (5, b"b", b"v5"), (6, b"a", b"v6")]
    assert old == kept


def test_before_fetch_v3_the_byte_limit_is_hard(cluster):
    """KIP-74 (Fetch v3) lets a first batch larger than the limits go out whole; before it
    Kafka cuts it, which converts to nothing: the answer is an overflow entry of the
    limit's size (the fetcher sees an incomplete message and asks for more)."""
    topic = new_topic(cluster)
    with RawClient(cluster.address(1)) as c:
        stored = v2_batch(0, 20)
        produce(c, topic, stored)
        small = len(stored) // 2
        for version in (0, 2):
            part = fetch(c, topic, version, max_bytes=small)
            assert part.error_code == ErrorCode.NONE and len(part.records) == small
            assert struct.unpack_from(">q", part.records)[0] == -1
            assert list(read_batches(part.records)) == []
        part = fetch(c, topic, 3, max_bytes=small)
        assert [o for _m, o, *_ in rows(part.records)] == list(range(20))
