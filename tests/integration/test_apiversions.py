"""ApiVersions exchange and version negotiation with real brokers, then real requests at
several negotiated versions of Metadata and Fetch."""
from __future__ import annotations

import socket
import struct
import time

import pytest

from kafka_client._testing.blocking import BlockingConnection
from kafka_client._testing import simple
from kafka_proto.framing import (
    FrameParser,
    decode_response_header,
    encode_request,
    request_header_version,
)
from kafka_proto.messages import (
    API_KEYS,
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    request_class,
)

pytestmark = pytest.mark.integration

API_VERSIONS, METADATA, FETCH = 18, 3, 1


@pytest.fixture
def conn(broker):
    c = BlockingConnection(broker.host, broker.port, client_id="apiversions-test", timeout=15)
    yield c
    c.close()


def our_range(key):
    info = API_KEYS[key]
    hi = info.max_version - (1 if info.latest_version_unstable else 0)
    return info.min_version, hi


def test_exchange_uses_highest_common_api_versions_version(broker, conn):
    resp = conn.api_versions_response
    assert resp.error_code == 0
    lo, hi = conn.broker_versions[API_VERSIONS]
    assert lo == 0
    # Tansu 0.6 knows v4 (our max), noida-db only v3: the first answer is then
    # UNSUPPORTED_VERSION and the connection retries at v3.
    assert conn.api_versions_version == min(hi, ApiVersionsRequest.MAX_VERSION)
    for key in (0, 1, 3, 18, 19):  # Produce, Fetch, Metadata, ApiVersions, CreateTopics
        assert key in conn.broker_versions, key


def test_negotiate_picks_highest_common_version_for_every_api(broker, conn):
    assert conn.versions, "no API in common"
    for key, (b_lo, b_hi) in conn.broker_versions.items():
        if key not in API_KEYS:
            assert key not in conn.versions
            continue
        o_lo, o_hi = our_range(key)
        common = [v for v in range(b_lo, b_hi + 1) if o_lo <= v <= o_hi]
        if not common:
            assert key not in conn.versions
            continue
        assert conn.versions[key] == max(common), (key, (b_lo, b_hi), (o_lo, o_hi))
        # every version both sides support can be framed (header version per flexibility)
        for v in common:
            frame = encode_request(request_class(key)(), v, 1, "c")
            (size,) = struct.unpack_from(">i", frame)
            assert size == len(frame) - 4
            assert struct.unpack_from(">hh", frame, 4) == (key, v)
            flexible = API_KEYS[key].flexible_min_version
            want_hv = 2 if flexible is not None and v >= flexible else 1
            if key == 7 and v == 0:
                want_hv = 0
            assert request_header_version(key, v) == want_hv


def _raw_round_trip(host, port, frame: bytes, api_key: int, api_version: int):
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(frame)
        parser = FrameParser()
        while True:
            chunk = s.recv(65536)
            assert chunk, "broker closed the connection"
            frames = parser.feed(chunk)
            if frames:
                return decode_response_header(frames[0], api_key, api_version)


def test_unknown_api_versions_version_answer(broker, conn):
    """KIP-511: a version the broker does not know is answered in v0 with error 35 and
    (at least) the broker's ApiVersions range, so a client can retry. noida-db does
    exactly that; Tansu 0.6 instead answers with error 0 in its own latest (flexible)
    layout. BlockingConnection copes with both (it never asks above our own maximum)."""
    _, b_hi = conn.broker_versions[API_VERSIONS]
    for version in (b_hi + 1, 300):
        # Body as a hypothetical flexible version would have it: two empty compact
        # strings and no tagged fields; the header is v2 (flexible).
        frame = encode_request(b"\x01\x01\x00", version, 77, "c", api_key=API_VERSIONS,
                               header_version=2)
        cid, body = _raw_round_trip(broker.host, broker.port, frame, API_VERSIONS, version)
        assert cid == 77
        if broker.kind == "tansu":
            resp = ApiVersionsResponse.decode(body, b_hi)
            assert resp.error_code == 0
        else:
            resp = ApiVersionsResponse.decode(body, 0)
            assert resp.error_code == 35  # UNSUPPORTED_VERSION
        ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert ranges[API_VERSIONS] == (0, b_hi)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_each_version_agrees(broker, conn, version):
    _, b_hi = conn.broker_versions[API_VERSIONS]
    if version > min(b_hi, ApiVersionsRequest.MAX_VERSION):
        pytest.skip(f"{broker.kind} does not support ApiVersions v{version}")
    resp = conn.request(ApiVersionsRequest(client_software_name="t",
                                           client_software_version="1"), version)
    assert resp.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == \
        conn.broker_versions


METADATA_VERSIONS = [0, 1, 4, 7, 9, 10, 12]


@pytest.mark.parametrize("version", METADATA_VERSIONS)
def test_metadata_round_trip(broker, conn, topic_name, version):
    lo, hi = conn.broker_versions[METADATA]
    if not lo <= version <= min(hi, our_range(METADATA)[1]):
        pytest.skip(f"{broker.kind} does not support Metadata v{version}")
    broker.create_topic(topic_name, partitions=3)
    kwargs = {}
    if version >= 4:
        kwargs["allow_auto_topic_creation"] = False
    resp = conn.request(MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic_name)], **kwargs), version)
    assert [(b.host, b.port) for b in resp.brokers] == [(broker.host, broker.port)]
    node_id = resp.brokers[0].node_id
    (topic,) = resp.topics
    assert topic.name == topic_name and topic.error_code == 0
    assert sorted(p.partition_index for p in topic.partitions) == [0, 1, 2]
    for p in topic.partitions:
        assert p.error_code == 0
        assert p.leader_id == node_id
        assert list(p.replica_nodes) == [node_id]
    if version >= 10 and broker.kind == "tansu":
        assert topic.topic_id.int != 0
    # all topics: ours is among them (v1+: null list means all; v0: empty list)
    everything = conn.request(MetadataRequest(topics=[] if version == 0 else None, **kwargs),
                              version)
    assert topic_name in {t.name for t in everything.topics}


FETCH_VERSIONS = [0, 1, 3, 4, 7, 11, 12, 13, 15, 16, 17]


@pytest.fixture
def filled_topic(broker, conn, topic_name):
    """A topic with 3 batches of 4 records each, written by us."""
    from kafka_proto.records import RecordBatchBuilder

    broker.create_topic(topic_name)
    ts = int(time.time() * 1000)
    for b in range(3):
        builder = RecordBatchBuilder()
        for i in range(4):
            n = b * 4 + i
            builder.append(b"value-%d" % n, key=b"k%d" % n, timestamp=ts + n)
        assert simple.produce(conn, topic_name, 0, builder.build()).base_offset == b * 4
    return topic_name, ts


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_round_trip(broker, conn, filled_topic, version):
    topic, ts = filled_topic
    lo, hi = conn.broker_versions[FETCH]
    if not lo <= version <= min(hi, our_range(FETCH)[1]):
        pytest.skip(f"{broker.kind} does not support Fetch v{version}")
    if broker.kind == "noida" and version < 4:
        pytest.skip("noida-db advertises Fetch v0-v3 but closes the connection on them "
                    "(see test_noida_closes_connection_on_old_fetch)")
    tid = None
    if version >= 13:
        tid = simple.topic_ids(conn, [topic])[topic]
        if tid.int == 0:
            pytest.skip(f"{broker.kind} reports no topic ids, needed by Fetch v{version}")
    result = simple.fetch_all(conn, topic, version=version)
    assert result.high_watermark == 12
    recs = [r for b in result.batches for r in b]
    assert [r.offset for r in recs] == list(range(12))
    assert [r.value for r in recs] == [b"value-%d" % n for n in range(12)]
    assert [r.key for r in recs] == [b"k%d" % n for n in range(12)]
    if all(b.magic >= 1 for b in result.batches):
        assert [r.timestamp for r in recs] == [ts + n for n in range(12)]
    # from the middle: the first batch returned contains offset 5
    part = simple.fetch_once(conn, topic, 0, 5, version=version, topic_id=tid)
    assert part.error_code == 0 and part.high_watermark == 12
    from kafka_proto.records import read_batches

    first = next(iter(read_batches(part.records)))
    assert first.base_offset <= 5 <= first.last_offset


def test_fetch_v0_returns_v2_batches_on_tansu(tansu_broker, topic_name):
    """Kafka down-converts to message format v0/v1 for Fetch v0-v3; Tansu does not: it
    returns the v2 batches as stored (read_batches reads both, so we cope)."""
    with BlockingConnection(tansu_broker.host, tansu_broker.port) as c:
        from kafka_proto.records import RecordBatchBuilder

        tansu_broker.create_topic(topic_name)
        builder = RecordBatchBuilder()
        for i in range(3):
            builder.append(b"v%d" % i)
        simple.produce(c, topic_name, 0, builder.build())
        old = simple.fetch_all(c, topic_name, version=0)
        assert [r.value for b in old.batches for r in b] == [b"v0", b"v1", b"v2"]
        assert {b.magic for b in old.batches} == {2}


def test_noida_closes_connection_on_old_fetch(noida_broker, topic_name):
    """noida-db 0.2.3 advertises Fetch v0+ but drops the connection for v0-v3 (a broker
    limitation, recorded here so a fix shows up)."""
    from kafka_client._testing.blocking import ConnectionClosedError

    noida_broker.create_topic(topic_name)
    with BlockingConnection(noida_broker.host, noida_broker.port) as c:
        assert c.broker_versions[FETCH][0] == 0
        with pytest.raises(ConnectionClosedError):
            simple.fetch_once(c, topic_name, 0, 0, version=3)
        assert c.closed
    with BlockingConnection(noida_broker.host, noida_broker.port) as c:
        assert simple.fetch_once(c, topic_name, 0, 0, version=4).error_code == 0
