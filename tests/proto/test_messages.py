"""Generated request/response classes: round trips, golden bytes, tagged fields, errors."""
from __future__ import annotations

import importlib.util
import json
import struct
import sys
import uuid
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_proto import messages as M
from kafka_proto.errors import (
    InvalidLengthError,
    ProtocolDecodeError,
    ProtocolEncodeError,
    UnsupportedVersionError,
)
from kafka_proto.messages._generated import API_KEYS, CLASS_MODULES

ALL_CLASSES = sorted(CLASS_MODULES)
CASES = [
    (name, v)
    for name in ALL_CLASSES
    for v in range(M.message_class(name).MIN_VERSION, M.message_class(name).MAX_VERSION + 1)
]

INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "uint32": (0, (1 << 32) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}
# A value per type that is not 0/-1 (the usual defaults), picked near the top of the range.
SAMPLE_INTS = {"int8": 7, "int16": 300, "uint16": 65000, "int32": 70000,
               "uint32": 4000000000, "int64": 1 << 40}


def has(spec, version):
    return spec.min_version is not None and spec.min_version <= version <= spec.max_version


def nullable(spec, version):
    return spec.nullable_min is not None and spec.nullable_min <= version <= spec.nullable_max


def sample_value(spec, cls, version, nulls):
    """A value for the field that differs from its default (or None when asked and allowed)."""
    default = getattr(cls(), spec.name)
    if nulls and nullable(spec, version):
        return None
    t = spec.type
    if t in SAMPLE_INTS:
        return SAMPLE_INTS[t] if SAMPLE_INTS[t] != default else SAMPLE_INTS[t] - 1
    if t == "float64":
        return 1.5
    if t == "bool":
        return not default
    if t == "string":
        return "v-" + spec.name
    if t == "bytes":
        return b"\x00\x01" + spec.name.encode()
    if t == "records":
        return b"RECORDS:" + spec.name.encode()
    if t == "uuid":
        return uuid.uuid5(uuid.NAMESPACE_DNS, spec.name)
    if t == "struct":
        return sample(spec.struct, version, nulls)
    if t == "[]struct":
        return [sample(spec.struct, version, nulls) for _ in range(2)]
    elem = t[2:]
    if elem in SAMPLE_INTS:
        return [1, -1 if not elem.startswith("u") else 2, SAMPLE_INTS[elem]]
    if elem == "string":
        return ["a", "", "\u00e9t\u00e9"]
    if elem == "uuid":
        return [uuid.UUID(int=5), uuid.UUID(int=(1 << 128) - 1)]
    raise AssertionError(f"no sample for {t}")


def sample(cls, version, nulls=False):
    """Instance with a non-default value in every field the version has."""
    return cls(**{s.name: sample_value(s, cls, version, nulls)
                  for s in cls.FIELDS if has(s, version)})


def count_fields(obj, version):
    """Number of (possibly nested) fields set in this version, to show the sample is not empty."""
    n = 0
    for s in obj.FIELDS:
        if not has(s, version):
            continue
        n += 1
        v = getattr(obj, s.name)
        if s.type == "struct" and v is not None:
            n += count_fields(v, version)
        elif s.type == "[]struct" and v:
            n += sum(count_fields(e, version) for e in v)
    return n


# ---------------------------------------------------------------------------- round trips


def test_every_api_key_has_request_and_response():
    # Kafka 4.0's 0-87, and the share group offset APIs (90-92) of Kafka 4.1
    # (gen_messages.ADDED_MESSAGES).
    assert sorted(API_KEYS) == list(range(88)) + [90, 91, 92]
    for key, info in API_KEYS.items():
        req, resp = M.request_class(key), M.response_class(key)
        assert req.API_KEY == resp.API_KEY == key
        assert req.API_NAME == resp.API_NAME == info.name
        assert (req.MIN_VERSION, req.MAX_VERSION) == (info.min_version, info.max_version)
        assert req.FLEXIBLE_MIN_VERSION == info.flexible_min_version
        assert req.LATEST_VERSION_UNSTABLE is info.latest_version_unstable
        assert not hasattr(resp, "LATEST_VERSION_UNSTABLE")


@pytest.mark.parametrize("name,version", CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_round_trip_every_version(name, version):
    cls = M.message_class(name)
    for nulls in (False, True):
        obj = sample(cls, version, nulls)
        data = obj.encode(version)
        back = cls.decode(data, version)
        assert back == obj
        assert back.encode(version) == data
        if not nulls:
            # Every field present in the version changed the bytes: default and sample differ.
            assert data != cls().encode(version) or not any(has(s, version) for s in cls.FIELDS)


def test_samples_are_not_trivial():
    # The round-trip samples really fill nested structures.
    req = sample(M.FetchRequest, 17)
    assert count_fields(req, 17) > 30
    assert req.topics[0].partitions[1].replica_directory_id != uuid.UUID(int=0)


# ---------------------------------------------------------------------------- hypothesis


def value_strategy(spec, version, depth):
    t = spec.type
    if t in INT_RANGES:
        base = st.integers(*INT_RANGES[t])
    elif t == "float64":
        base = st.floats(allow_nan=False)
    elif t == "bool":
        base = st.booleans()
    elif t == "string":
        base = st.text(max_size=20)
    elif t in ("bytes", "records"):
        base = st.binary(max_size=40)
    elif t == "uuid":
        base = st.uuids()
    elif t == "struct":
        base = struct_strategy(spec.struct, version, depth + 1)
    elif t == "[]struct":
        base = st.lists(struct_strategy(spec.struct, version, depth + 1),
                        max_size=3 if depth < 2 else 1)
    else:
        inner = value_strategy(spec._replace(type=t[2:], nullable_min=None), version, depth)
        base = st.lists(inner, max_size=5)
    if nullable(spec, version):
        base = st.none() | base
    return base


def struct_strategy(cls, version, depth=0):
    fields = {s.name: value_strategy(s, version, depth) for s in cls.FIELDS if has(s, version)}
    if cls.FLEXIBLE_MIN_VERSION is not None and version >= cls.FLEXIBLE_MIN_VERSION:
        # Tags no schema uses (yet): they must come back as raw bytes, in order.
        fields["unknown_tagged_fields"] = st.none() | st.dictionaries(
            st.integers(100, 1 << 28), st.binary(max_size=6), min_size=1, max_size=3)
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))


HYPO_APIS = ["Produce", "Fetch", "Metadata", "ApiVersions", "JoinGroup"]


@pytest.mark.parametrize("api", HYPO_APIS)
@pytest.mark.parametrize("kind", ["request", "response"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hypothesis_round_trip(api, kind, data):
    cls = M.request_class(api) if kind == "request" else M.response_class(api)
    version = data.draw(st.integers(cls.MIN_VERSION, cls.MAX_VERSION), label="version")
    obj = data.draw(struct_strategy(cls, version), label="message")
    encoded = obj.encode(version)
    back = cls.decode(encoded, version)
    assert back == obj
    assert back.encode(version) == encoded


# ---------------------------------------------------------------------------- golden bytes


def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def i64(v):
    return struct.pack(">q", v)


def test_golden_api_versions_request_v3():
    req = M.ApiVersionsRequest(client_software_name="kc", client_software_version="1.0")
    # Flexible: compact strings are uvarint(len + 1) then UTF-8; the body ends with an empty
    # tagged-field section (count 0).
    expected = b"\x03kc" + b"\x041.0" + b"\x00"
    assert req.encode(3) == expected
    assert M.ApiVersionsRequest.decode(expected, 3) == req
    # v0-v2 have no fields: the body is empty (the client software fields are ignorable).
    assert req.encode(0) == b""


def test_golden_metadata_request_v1():
    req = M.MetadataRequest(topics=[M.MetadataRequest.MetadataRequestTopic(name="foo")])
    # int32 array count, then per topic an int16-length string.
    expected = i32(1) + i16(3) + b"foo"
    assert req.encode(1) == expected
    # A null topic list (all topics) is count -1 from v1 on.
    assert M.MetadataRequest(topics=None).encode(1) == i32(-1)
    assert M.MetadataRequest.decode(i32(-1), 1).topics is None


def test_golden_share_group_offset_apis_v0():
    """KIP-932's share group offset APIs (Kafka 4.1, gen_messages.ADDED_MESSAGES), byte by
    byte: flexible from version 0."""
    D = M.DescribeShareGroupOffsetsRequest
    req = D(groups=[D.DescribeShareGroupOffsetsRequestGroup(
        group_id="g", topics=[D.DescribeShareGroupOffsetsRequestTopic(
            topic_name="t", partitions=[0, 2])])])
    assert req.encode(0) == (b"\x02" + b"\x02g" + b"\x02" + b"\x02t" + b"\x03" + i32(0)
                             + i32(2) + b"\x00" + b"\x00" + b"\x00")
    # null topics: every share-partition of the group
    assert D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id="g", topics=None)]
             ).encode(0) == b"\x02" + b"\x02g" + b"\x00" + b"\x00" + b"\x00"
    A = M.AlterShareGroupOffsetsRequest
    alter = A(group_id="g", topics=[A.AlterShareGroupOffsetsRequestTopic(
        topic_name="t", partitions=[A.AlterShareGroupOffsetsRequestPartition(
            partition_index=1, start_offset=7)])])
    assert alter.encode(0) == (b"\x02g" + b"\x02" + b"\x02t" + b"\x02" + i32(1) + i64(7)
                               + b"\x00" + b"\x00" + b"\x00")
    X = M.DeleteShareGroupOffsetsRequest
    assert X(group_id="g", topics=[X.DeleteShareGroupOffsetsRequestTopic(topic_name="t")]
             ).encode(0) == b"\x02g" + b"\x02" + b"\x02t" + b"\x00" + b"\x00"
    R = M.DeleteShareGroupOffsetsResponse
    tid = uuid.UUID(int=5)
    body = (i32(0) + i16(69) + b"\x00" + b"\x02" + b"\x02t" + tid.bytes + i16(0) + b"\x00"
            + b"\x00" + b"\x00")
    resp = R.decode(body, 0)
    assert resp.error_code == 69 and resp.error_message is None
    assert [(r.topic_name, r.topic_id, r.error_code) for r in resp.responses] == \
        [("t", tid, 0)]
    assert resp.encode(0) == body


def test_golden_metadata_request_v9_flexible():
    req = M.MetadataRequest(topics=[M.MetadataRequest.MetadataRequestTopic(name="ab")],
                            allow_auto_topic_creation=False,
                            include_topic_authorized_operations=True)
    expected = (
        b"\x02"              # compact array: 1 topic
        + b"\x03ab"          # compact string name
        + b"\x00"            # topic's tagged fields
        + b"\x00"            # allow_auto_topic_creation
        + b"\x00"            # include_cluster_authorized_operations (v8-v10)
        + b"\x01"            # include_topic_authorized_operations
        + b"\x00"            # top-level tagged fields
    )
    assert req.encode(9) == expected


def test_golden_api_versions_response_v3_with_tagged_field():
    resp = M.ApiVersionsResponse(
        error_code=0,
        api_keys=[M.ApiVersionsResponse.ApiVersion(api_key=1, min_version=4, max_version=17)],
        throttle_time_ms=9,
        finalized_features_epoch=5,
    )
    expected = (
        i16(0)
        + b"\x02" + i16(1) + i16(4) + i16(17) + b"\x00"
        + i32(9)
        # tagged section: one field, tag 1, 8 bytes, int64 5
        + b"\x01" + b"\x01" + b"\x08" + i64(5)
    )
    assert resp.encode(3) == expected
    assert M.ApiVersionsResponse.decode(expected, 3) == resp
    # v0: no throttle time, classic int32 array count, no tags.
    assert resp.encode(0) == i16(0) + i32(1) + i16(1) + i16(4) + i16(17)


def test_golden_request_header_v2_keeps_classic_client_id():
    hdr = M.RequestHeader(request_api_key=18, request_api_version=3, correlation_id=7,
                          client_id="ab")
    # client_id keeps its int16 length even in the flexible header v2.
    assert hdr.encode(2) == i16(18) + i16(3) + i32(7) + i16(2) + b"ab" + b"\x00"
    assert hdr.encode(1) == i16(18) + i16(3) + i32(7) + i16(2) + b"ab"
    assert M.RequestHeader(client_id=None).encode(1)[-2:] == b"\xff\xff"
    assert M.ResponseHeader(correlation_id=3).encode(1) == i32(3) + b"\x00"
    assert M.ResponseHeader(correlation_id=3).encode(0) == i32(3)


def test_golden_nullable_struct_marker():
    cls = M.ConsumerGroupHeartbeatResponse
    base = dict(throttle_time_ms=1, error_code=0, error_message=None, member_id="m",
                member_epoch=2, heartbeat_interval_ms=3)
    head = i32(1) + i16(0) + b"\x00" + b"\x02m" + i32(2) + i32(3)
    assert cls(**base, assignment=None).encode(0) == head + b"\xff" + b"\x00"
    tp = cls.TopicPartitions(topic_id=uuid.UUID(int=1), partitions=[4])
    with_assignment = cls(**base, assignment=cls.Assignment(topic_partitions=[tp]))
    assert with_assignment.encode(0) == (
        head + b"\x01" + b"\x02" + uuid.UUID(int=1).bytes + b"\x02" + i32(4) + b"\x00"
        + b"\x00" + b"\x00")


# ---------------------------------------------------------------------------- tagged fields


def test_unknown_tagged_fields_survive_round_trip():
    body = b"\x03kc" + b"\x041.0"
    tags = b"\x02" + b"\x05\x03xyz" + b"\x0a\x00"  # tag 5 (3 bytes), tag 10 (empty)
    req = M.ApiVersionsRequest.decode(body + tags, 3)
    assert req.unknown_tagged_fields == {5: b"xyz", 10: b""}
    assert req.encode(3) == body + tags
    # Also in a nested struct.
    resp_bytes = i16(0) + b"\x02" + i16(1) + i16(0) + i16(3) + b"\x01\x07\x01!" + i32(0) + b"\x00"
    resp = M.ApiVersionsResponse.decode(resp_bytes, 3)
    assert resp.api_keys[0].unknown_tagged_fields == {7: b"!"}
    assert resp.encode(3) == resp_bytes


def test_known_and_unknown_tags_are_written_sorted():
    resp = M.ApiVersionsResponse(finalized_features_epoch=2, zk_migration_ready=True,
                                 unknown_tagged_fields={9: b"z", 2 + 0: b"", 0 + 4: b"q"})
    # Known tags 1 and 3 are non-default; known tag 2 is at its default (not written), so the
    # raw bytes given for tag 2 go out as they are. All five in ascending tag order.
    data = resp.encode(3)
    section = data[len(i16(0) + b"\x01" + i32(0)):]
    assert section == (b"\x05" + b"\x01\x08" + i64(2) + b"\x02\x00" + b"\x03\x01\x01"
                       + b"\x04\x01q" + b"\x09\x01z")


def test_tagged_struct_field():
    req = M.FetchRequest(replica_state=M.FetchRequest.ReplicaState(replica_id=3, replica_epoch=9),
                         cluster_id="c")
    data = req.encode(15)
    back = M.FetchRequest.decode(data, 15)
    assert back.replica_state.replica_id == 3 and back.cluster_id == "c"
    # Tag section at the end of the body: 2 fields, tag 0 (cluster id), tag 1 (struct).
    assert data.endswith(b"\x02" + b"\x00\x02\x02c" + b"\x01\x0d" + i32(3) + i64(9) + b"\x00")
    # The struct is tagged only from v15; before that a non-default value cannot be sent.
    with pytest.raises(ProtocolEncodeError, match="replica_state"):
        req.encode(14)


def test_bad_tagged_field_size_is_rejected():
    # tag 1 (finalized_features_epoch, int64) declared with 9 bytes
    bad = i16(0) + b"\x01" + i32(0) + b"\x01\x01\x09" + i64(5) + b"\x00"
    with pytest.raises(ProtocolDecodeError):
        M.ApiVersionsResponse.decode(bad, 3)
    truncated = i16(0) + b"\x01" + i32(0) + b"\x01\x01\x08" + b"\x00" * 4
    with pytest.raises(ProtocolDecodeError):
        M.ApiVersionsResponse.decode(truncated, 3)


# ---------------------------------------------------------------------------- errors


def test_truncated_input_raises_decode_error_at_every_cut():
    for cls, version in ((M.MetadataResponse, 12), (M.MetadataResponse, 1), (M.FetchResponse, 16),
                         (M.ProduceRequest, 3), (M.JoinGroupResponse, 9)):
        data = sample(cls, version).encode(version)
        assert len(data) > 20
        for cut in range(len(data)):
            with pytest.raises(ProtocolDecodeError):
                cls.decode(data[:cut], version)


def test_trailing_bytes_raise():
    data = sample(M.MetadataRequest, 4).encode(4)
    with pytest.raises(ProtocolDecodeError, match="trailing"):
        M.MetadataRequest.decode(data + b"\x00", 4)


def test_decode_from_reader_stops_at_message_end():
    from kafka_proto._wire import Reader

    data = M.HeartbeatRequest(group_id="g", generation_id=1, member_id="m").encode(2)
    r = Reader(data + b"rest")
    msg = M.HeartbeatRequest.decode_from(r, 2)
    assert msg.group_id == "g" and r.remaining == 4


def test_encode_into_writer():
    from kafka_proto._wire import Writer

    w = Writer()
    w.write_int32(-5)
    M.ResponseHeader(correlation_id=3).encode_into(w, 0)
    assert w.getvalue() == i32(-5) + i32(3)


@pytest.mark.parametrize("version", [-1, 18, 100])
def test_version_out_of_range(version):
    with pytest.raises(UnsupportedVersionError):
        M.FetchRequest().encode(version)
    with pytest.raises(UnsupportedVersionError):
        M.FetchResponse.decode(b"", version)


def test_non_default_value_in_version_without_field():
    # last_fetched_epoch exists from v12 and is not ignorable.
    req = M.FetchRequest(topics=[M.FetchRequest.FetchTopic(
        topic="t", partitions=[M.FetchRequest.FetchPartition(last_fetched_epoch=5)])])
    with pytest.raises(ProtocolEncodeError, match="last_fetched_epoch"):
        req.encode(11)
    req.topics[0].partitions[0].last_fetched_epoch = -1  # the default again: fine
    req.encode(11)
    # An ignorable field (max_bytes, v3+) is silently dropped.
    assert M.FetchRequest(max_bytes=100).encode(2) == M.FetchRequest().encode(2)
    # A non-ignorable array: forgotten_topics_data (v7+).
    with pytest.raises(ProtocolEncodeError, match="forgotten_topics_data"):
        M.FetchRequest(forgotten_topics_data=[M.FetchRequest.ForgottenTopic()]).encode(6)


def test_null_where_not_allowed():
    with pytest.raises(ProtocolEncodeError, match="topics"):
        M.MetadataRequest(topics=None).encode(0)
    with pytest.raises(ProtocolEncodeError, match="group_id"):
        M.HeartbeatRequest(group_id=None).encode(0)
    # Name is nullable only from v12 in the response.
    resp = M.MetadataResponse(topics=[M.MetadataResponse.MetadataResponseTopic(name=None)])
    resp.encode(12)
    with pytest.raises(ProtocolEncodeError, match="name"):
        resp.encode(11)


def test_null_on_wire_for_non_nullable_array():
    # MetadataResponse brokers (non-nullable) declared as count -1
    with pytest.raises(ProtocolDecodeError):
        M.MetadataResponse.decode(i32(-1) + i32(0), 0)


def test_out_of_range_int_raises_encode_error():
    with pytest.raises(ProtocolEncodeError):
        M.HeartbeatRequest(generation_id=1 << 31).encode(0)
    part = M.MetadataResponse.MetadataResponsePartition
    for bad in ([1 << 31], [1, "2"], [None]):
        msg = M.MetadataResponse(topics=[M.MetadataResponse.MetadataResponseTopic(
            name="t", partitions=[part(replica_nodes=bad)])])
        with pytest.raises(ProtocolEncodeError):
            msg.encode(12)


def test_primitive_arrays_golden():
    part = M.MetadataResponse.MetadataResponsePartition(
        partition_index=1, leader_id=2, replica_nodes=[1, -2, 3], isr_nodes=[],
        offline_replicas=[7])
    data = part.encode(5)
    assert data == (i16(0) + i32(1) + i32(2) + i32(3) + i32(1) + i32(-2) + i32(3) + i32(0)
                    + i32(1) + i32(7))
    assert M.MetadataResponse.MetadataResponsePartition.decode(data, 5) == part
    with pytest.raises(ProtocolDecodeError):  # count says 3, only 2 elements follow
        M.MetadataResponse.MetadataResponsePartition.decode(data[:14] + data[18:22], 5)


# ---------------------------------------------------------------------------- records


def test_records_decode_as_zero_copy_view():
    batch = bytes(range(200))
    req = M.ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[
        M.ProduceRequest.TopicProduceData(name="t", partition_data=[
            M.ProduceRequest.PartitionProduceData(index=0, records=memoryview(batch))])])
    for version in (3, 9, 11):
        data = bytearray(req.encode(version))
        back = M.ProduceRequest.decode(data, version)
        view = back.topic_data[0].partition_data[0].records
        assert isinstance(view, memoryview)
        assert view == batch
        data[data.find(batch)] ^= 0xFF  # the view shares the input buffer
        assert view[0] == 0xFF
    assert M.ProduceRequest.PartitionProduceData(records=None).encode(3) == i32(0) + i32(-1)


def _struct_classes():
    """Every generated class, nested structs included, once each."""
    seen, todo = {}, [M.message_class(name) for name in ALL_CLASSES]
    while todo:
        cls = todo.pop()
        if cls.__qualname__ not in seen:
            seen[cls.__qualname__] = cls
            todo.extend(s.struct for s in cls.FIELDS if s.struct is not None)
    return [seen[name] for name in sorted(seen)]


def test_bytes_fields_hold_bytes_whatever_buffer_was_given():
    """A bytes field takes any buffer and holds bytes, as decoding gives (its type says
    bytes): a bytearray is copied at construction, so changing it later changes nothing."""
    fields = [(cls, s) for cls in _struct_classes() for s in cls.FIELDS if s.type == "bytes"]
    assert len(fields) >= 20          # JoinGroup metadata, SyncGroup assignment, SASL, ...
    for cls, spec in fields:
        given = bytearray(b"\x00\x01" + spec.name.encode())
        for value in (given, memoryview(given)):
            obj = cls(**{spec.name: value})
            held = getattr(obj, spec.name)
            assert type(held) is bytes and held == given, (cls.__qualname__, spec.name)
        as_bytes = bytes(given)
        assert getattr(cls(**{spec.name: as_bytes}), spec.name) is as_bytes  # not copied
    user_data = bytearray(b"u")
    sub = M.ConsumerProtocolSubscription(topics=["t"], user_data=user_data)
    user_data[0] = ord("x")                     # the message holds its own copy
    expected = M.ConsumerProtocolSubscription(topics=["t"], user_data=b"u").encode(1)
    assert sub.encode(1) == expected
    back = M.ConsumerProtocolSubscription.decode(bytearray(expected), 1)
    assert type(back.user_data) is bytes and back.user_data == b"u"
    assert M.ConsumerProtocolSubscription(user_data=None).user_data is None


# ---------------------------------------------------------------------------- lookups/headers


def test_lookups():
    assert M.request_class(1) is M.FetchRequest is M.request_class("Fetch")
    assert M.response_class(3) is M.MetadataResponse
    assert M.API_KEYS_BY_NAME["ApiVersions"] == 18
    assert M.FetchRequest.FetchTopic.__qualname__ == "FetchRequest.FetchTopic"
    assert M.message_class("ConsumerProtocolAssignment").API_KEY is None
    with pytest.raises(UnsupportedVersionError):
        M.request_class(1000)
    with pytest.raises(AttributeError):
        M.NoSuchRequest  # noqa: B018


def test_header_versions():
    assert M.request_header_version(3, 8) == 1
    assert M.request_header_version(3, 9) == 2
    assert M.response_header_version(3, 8) == 0
    assert M.response_header_version(3, 9) == 1
    # ApiVersions responses always use header v0 (even flexible versions and unknown ones).
    assert M.request_header_version(18, 3) == 2
    assert [M.response_header_version(18, v) for v in range(6)] == [0] * 6
    # ControlledShutdown v0 uses request header v0.
    assert M.request_header_version(7, 0) == 0
    assert M.request_header_version(7, 1) == 1
    assert M.request_header_version(7, 3) == 2
    # APIs flexible from v0.
    assert M.request_header_version(68, 0) == 2
    assert M.response_header_version(68, 0) == 1
    with pytest.raises(UnsupportedVersionError):
        M.request_header_version(3, 13)


def test_defaults_follow_schema():
    req = M.FetchRequest()
    assert req.replica_id == -1 and req.max_bytes == 0x7FFFFFFF and req.session_epoch == -1
    assert req.cluster_id is None and req.rack_id == ""
    assert req.topics == [] and req.topics is not M.FetchRequest().topics
    assert req.replica_state == M.FetchRequest.ReplicaState(replica_id=-1, replica_epoch=-1)
    assert M.FetchRequest.FetchTopic().topic_id == uuid.UUID(int=0)
    assert M.FetchResponse.PartitionData().records is None
    assert M.ConsumerGroupHeartbeatResponse().assignment is None
    assert M.ListPartitionReassignmentsRequest().topics is None
    assert "FetchRequest(" in repr(req) and "max_bytes=2147483647" in repr(req)
    assert M.FetchRequest(max_wait_ms=1) != req


def test_group_protocol_payloads():
    cls = M.message_class("ConsumerProtocolSubscription")
    sub = cls(topics=["a", "b"], user_data=b"u", owned_partitions=[
        cls.TopicPartition(topic="a", partitions=[0, 1])], generation_id=4, rack_id="r")
    for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
        data = sub.encode(version)
        back = cls.decode(data, version)
        assert back.topics == ["a", "b"]
    # v0: topics and user_data only.
    assert sub.encode(0) == i32(2) + i16(1) + b"a" + i16(1) + b"b" + i32(1) + b"u"


# ---------------------------------------------------------------------------- generator corner


def _generator():
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "tools"))
    try:
        import gen_messages
    finally:
        sys.path.pop(0)
    return gen_messages


def test_generator_helpers_and_schema_errors(tmp_path):
    gen = _generator()
    assert gen.snake("ReplicaId") == "replica_id"
    assert gen.snake("isKRaftController") == "is_k_raft_controller"
    assert gen.snake("V3AndBelowTopics") == "v3_and_below_topics"
    assert gen.parse_range("3+", "x") == (3, gen.OPEN_END)
    assert gen.parse_range("2-7", "x") == (2, 7) and gen.parse_range("none", "x") is None
    assert gen.parse_int("0x7fffffff", "x") == 0x7FFFFFFF and gen.parse_int("-2147483648", "x") < 0
    assert gen.strip_comments('{"a": "x//y"} // note\n') == '{"a": "x//y"} \n'
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "BadRequest.json").write_text(json.dumps({
        "apiKey": 501, "type": "request", "name": "BadRequest", "validVersions": "0",
        "flexibleVersions": "none",
        "fields": [{"name": "Thing", "type": "[]NoSuchStruct", "versions": "0+"}]}))
    with pytest.raises(gen.SchemaError, match="NoSuchStruct"):
        gen.generate(schemas, tmp_path / "out")


def test_zero_size_elements(tmp_path):
    """An array of structs with no fields in a non-flexible version: count not bounded by bytes."""
    gen_messages = _generator()
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "EmptyThingsRequest.json").write_text(json.dumps({
        "apiKey": 500, "type": "request", "name": "EmptyThingsRequest",
        "validVersions": "0-1", "flexibleVersions": "none",
        "fields": [
            {"name": "Things", "type": "[]Thing", "versions": "0+", "fields": [
                {"name": "Value", "type": "int32", "versions": "1+"}]},
        ]}))
    out = tmp_path / "out"
    result = gen_messages.generate(schemas, out)
    assert any("Things" in note for note in result["notes"])
    spec = importlib.util.spec_from_file_location("empty_things_gen", out / "empty_things.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cls = mod.EmptyThingsRequest
    three = cls(things=[cls.Thing(), cls.Thing(), cls.Thing()])
    assert three.encode(0) == i32(3)
    assert cls.decode(i32(3), 0) == three
    assert cls.decode(i32(2) + i32(7) + i32(8), 1).things[1].value == 8
    with pytest.raises(InvalidLengthError):
        cls.decode(i32(1 << 30), 0)
    with pytest.raises(InvalidLengthError):
        cls.decode(i32(2), 1)  # v1 elements take 4 bytes: the usual check applies


# ---------------------------------------------------------------------------- interop


def _kafka_python_classes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        kp = pytest.importorskip("kafka.protocol.api_message")
    import importlib
    import pkgutil

    import kafka.protocol

    found = {}
    for info in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        if ".old" in info.name:
            continue
        try:
            with warnings.catch_warnings():  # the peer uses deprecated importlib calls
                warnings.simplefilter("ignore", DeprecationWarning)
                mod = importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 - optional modules of the peer
            continue
        for obj in vars(mod).values():
            if (isinstance(obj, type) and issubclass(obj, kp.ApiMessage)
                    and getattr(obj, "_json", None)):
                found[obj.name] = obj
    return found


# The APIs an ordinary client uses (checking all the peer knows takes ~10 s).
INTEROP_APIS = {"Produce", "Fetch", "ListOffsets", "Metadata", "OffsetCommit", "OffsetFetch",
                "FindCoordinator", "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup",
                "SaslHandshake", "SaslAuthenticate", "ApiVersions", "InitProducerId",
                "AddPartitionsToTxn", "EndTxn", "TxnOffsetCommit", "CreateTopics",
                "DescribeTopicPartitions"}  # the last one has a nullable struct field


def test_bytes_agree_with_kafka_python():
    """kafka-python 3 (an independent codec) reads our bytes and writes back the same bytes."""
    peers = _kafka_python_classes()
    checked = 0
    for name in sorted(peers):
        if name not in CLASS_MODULES or M.message_class(name).API_NAME not in INTEROP_APIS:
            continue
        ours, peer = M.message_class(name), peers[name]
        for version in range(ours.MIN_VERSION, min(ours.MAX_VERSION, peer.max_version) + 1):
            for nulls in (False, True):
                obj = sample(ours, version, nulls)
                if name == "ApiVersionsResponse":
                    obj.error_code = 0  # the peer reads error answers as v0 bodies (KIP-511)
                data = obj.encode(version)
                theirs = peer.decode(data, version=version)
                theirs._header = None
                assert bytes(theirs.encode(version=version)) == data, (name, version, nulls)
                checked += 1
    assert checked == 4 * sum(
        min(M.API_KEYS[M.API_KEYS_BY_NAME[a]].max_version, peers[a + 'Request'].max_version) + 1
        for a in INTEROP_APIS)


def test_constructor_annotations_resolve():
    import typing

    for name in ALL_CLASSES:
        cls = M.message_class(name)
        for struct_cls in [cls] + [s.struct for s in cls.FIELDS if s.struct is not None]:
            hints = typing.get_type_hints(struct_cls.__init__)
            assert set(hints) == {s.name for s in struct_cls.FIELDS} | {
                "unknown_tagged_fields", "return"}
    hints = typing.get_type_hints(M.FetchRequest.__init__)
    assert hints["topics"] == typing.List[M.FetchRequest.FetchTopic]
    assert hints["cluster_id"] == typing.Optional[str]


def test_mutated_input_only_raises_decode_errors():
    """Corrupted bodies of every class decode or raise ProtocolDecodeError, nothing else."""
    import random

    rng = random.Random(1234)
    outcomes = {"ok": 0, "error": 0}
    for name in ALL_CLASSES:
        cls = M.message_class(name)
        for version in {cls.MIN_VERSION, cls.MAX_VERSION}:
            data = sample(cls, version).encode(version)
            for _ in range(10):
                mutated = bytearray(data)
                for _ in range(rng.randint(1, 3)):
                    if mutated:
                        byte = rng.choice((0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)))
                        mutated[rng.randrange(len(mutated))] = byte
                try:
                    cls.decode(bytes(mutated), version)
                    outcomes["ok"] += 1
                except ProtocolDecodeError:
                    outcomes["error"] += 1
    # Both ways, many times (bad UTF-8 in a string reads with U+FFFD: no error there).
    assert outcomes["error"] > 500 and outcomes["ok"] > 100, outcomes


def test_pickle_and_copy():
    import copy
    import pickle

    req = sample(M.FetchRequest, 17)
    assert pickle.loads(pickle.dumps(req)) == req
    clone = copy.deepcopy(req)
    assert clone == req and clone.topics[0] is not req.topics[0]


def test_encode_parts_keeps_big_batches_uncopied():
    big, small = bytearray(range(256)) * 40, b"tiny batch"
    part = M.ProduceRequest.PartitionProduceData
    req = M.ProduceRequest(acks=-1, timeout_ms=100, topic_data=[
        M.ProduceRequest.TopicProduceData(name="t", partition_data=[
            part(index=0, records=big), part(index=1, records=small), part(index=2, records=None),
            part(index=3, records=memoryview(big)[:5000])])])
    for version in (3, 8, 9, 11):
        whole = req.encode(version)
        parts = req.encode_parts(version)
        assert b"".join(bytes(p) for p in parts) == whole
        # header+prefix | big | ...small inline... | 5000-byte slice | tail
        shared = [p for p in parts if isinstance(p, memoryview)]
        assert [p.nbytes for p in shared] == [len(big), 5000]
        assert all(p.obj is big for p in shared)  # views of the caller's buffer, not copies
    # Below min_size everything is one part; a message without records is one part.
    assert req.encode_parts(9, min_size=1 << 20) == [req.encode(9)]
    assert M.MetadataRequest().encode_parts(4) == [M.MetadataRequest().encode(4)]
    # The same records inside a normal encode() are copied as usual.
    assert M.ProduceRequest.decode(req.encode(9), 9) == req


def test_encode_parts_restores_state_after_errors():
    req = M.ProduceRequest(transactional_id="x", topic_data=[
        M.ProduceRequest.TopicProduceData(name="t", partition_data=[
            M.ProduceRequest.PartitionProduceData(records=bytes(10000))])])
    with pytest.raises(ProtocolEncodeError):
        req.encode_parts(2)  # transactional_id exists from v3 only
    data = req.encode(3)
    assert b"".join(bytes(p) for p in req.encode_parts(3)) == data


# ---------------------------------------------------------------- what a broker needs


def test_decode_prefix_returns_the_bytes_taken_and_ignores_the_rest():
    req = sample(M.MetadataRequest, 12)
    data = req.encode(12)
    assert M.MetadataRequest.decode_prefix(data, 12) == (req, len(data))
    got, used = M.MetadataRequest.decode_prefix(memoryview(data + b"\x00\x01\x02"), 12)
    assert got == req and used == len(data)  # what librdkafka's admin Metadata v12 sends
    with pytest.raises(ProtocolDecodeError, match="trailing"):
        M.MetadataRequest.decode(data + b"\x00", 12)  # decode() stays strict
    with pytest.raises(ProtocolDecodeError):
        M.MetadataRequest.decode_prefix(data[:-1], 12)
    with pytest.raises(UnsupportedVersionError):
        M.MetadataRequest.decode_prefix(data, 99)


def test_tagged_struct_defaults_are_compared_not_rebuilt():
    """_is_default compares with one default instance per class: the answer stays right
    for default, changed and changed-back values, and no instance is made per call."""
    part = M.FetchResponse.PartitionData(partition_index=1, records=b"")
    plain = part.encode(12)
    part.diverging_epoch.epoch = 4
    tagged = part.encode(12)
    assert len(tagged) > len(plain)
    assert M.FetchResponse.PartitionData.decode(tagged, 12).diverging_epoch.epoch == 4
    part.diverging_epoch.epoch = -1
    assert part.encode(12) == plain
    made = []
    cls = M.FetchResponse.EpochEndOffset
    original = cls.__init__

    def counting(self, *args, **kwargs):
        made.append(1)
        original(self, *args, **kwargs)

    cls.__init__ = counting
    try:
        for _ in range(10):
            part.encode(12)
    finally:
        cls.__init__ = original
    assert made == []


def test_fit_to_version_resets_what_the_version_cannot_carry():
    from kafka_proto.messages import fit_to_version

    # Filled for v17: top-level and per-partition fields older versions do not have.
    resp = M.FetchResponse(throttle_time_ms=5, error_code=0, session_id=0, responses=[
        M.FetchResponse.FetchableTopicResponse(topic="t", topic_id=uuid.uuid4(), partitions=[
            M.FetchResponse.PartitionData(
                partition_index=0, high_watermark=10, last_stable_offset=10,
                log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
                records=b"",
                current_leader=M.FetchResponse.LeaderIdAndEpoch(leader_id=1, leader_epoch=2))])])
    with pytest.raises(ProtocolEncodeError):
        resp.encode(4)  # topic_id and current_leader are not in v4
    assert fit_to_version(resp, 4) is resp
    back = M.FetchResponse.decode(resp.encode(4), 4)
    part = back.responses[0].partitions[0]
    assert back.responses[0].topic == "t" and part.high_watermark == 10
    # aborted_transactions is nullable from v4: None stays None.
    assert part.aborted_transactions is None
    # None where the version does not allow null becomes the default.
    meta = M.MetadataResponse(brokers=[M.MetadataResponse.MetadataResponseBroker(
        node_id=1, host="h", port=1, rack=None)], topics=None)
    with pytest.raises(ProtocolEncodeError):
        meta.encode(0)
    fit_to_version(meta, 0)
    assert M.MetadataResponse.decode(meta.encode(0), 0).topics == []


def test_error_codes_found_at_every_level():
    from kafka_proto.messages import error_codes

    resp = M.ProduceResponse(responses=[
        M.ProduceResponse.TopicProduceResponse(name="a", partition_responses=[
            M.ProduceResponse.PartitionProduceResponse(index=0, error_code=0),
            M.ProduceResponse.PartitionProduceResponse(index=1, error_code=6)]),
        M.ProduceResponse.TopicProduceResponse(name="b", partition_responses=[
            M.ProduceResponse.PartitionProduceResponse(index=0, error_code=45)])])
    assert error_codes(resp) == {6, 45}
    assert error_codes(M.FindCoordinatorResponse(error_code=15)) == {15}
    assert error_codes(M.MetadataResponse(topics=None)) == set()
    assert error_codes(M.MetadataRequest(topics=None)) == set()
