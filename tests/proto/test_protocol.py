"""kafka_proto.protocol: the sans-I/O broker conversation (golden bytes both ways,
correlation ids, the KIP-511 handshake, fire-and-forget requests), no socket involved."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_proto import framing
from kafka_proto.errors import (
    CorrelationIdError,
    ErrorCode,
    InvalidLengthError,
    ProtocolEncodeError,
    UnsupportedVersionError,
)
from kafka_proto.framing import encode_request
from kafka_proto.messages import (
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
)
from kafka_proto.protocol import (
    BrokerConversation,
    Exchange,
    HandshakeError,
    HandshakeExchange,
    ResponseDecodeError,
)
from kafka_proto.versions import client_ranges


def joined(out) -> bytes:
    return b"".join(bytes(p) for p in out.parts)


def response_frame(cid: int, body: bytes, header_version: int = 0) -> bytes:
    """A response on the wire: size, correlation id, (v1: no tagged fields), body."""
    header = struct.pack(">i", cid) + (b"\x00" if header_version == 1 else b"")
    return struct.pack(">i", len(header) + len(body)) + header + body


def api_versions_v0_body(error_code: int, ranges) -> bytes:
    """ApiVersionsResponse v0 written out by hand: error, [key, min, max]."""
    return (struct.pack(">hi", error_code, len(ranges))
            + b"".join(struct.pack(">hhh", k, lo, hi) for k, (lo, hi) in ranges.items()))


def api_versions_v1_body(error_code: int, ranges, throttle_ms: int = 0) -> bytes:
    """v1 and v2 (not flexible): the v0 fields, then throttle_time_ms."""
    return api_versions_v0_body(error_code, ranges) + struct.pack(">i", throttle_ms)


def next_events(conv):
    out = []
    while True:
        event = conv.next_event()
        if event is None:
            return out
        out.append(event)


def ready_conversation(ranges=None, **kwargs) -> BrokerConversation:
    """A conversation whose handshake went through at ApiVersions v2."""
    conv = BrokerConversation("me", **kwargs)
    conv.start_handshake()
    conv.receive_data(response_frame(0, api_versions_v0_body(35, {18: (0, 2)})))
    (retry,) = next_events(conv)
    assert retry.retry.api_version == 2
    ranges = ranges or {18: (0, 2), 3: (0, 12), 1: (4, 11), 0: (3, 9)}
    conv.receive_data(response_frame(retry.retry.correlation_id,
                                     api_versions_v1_body(0, ranges)))
    (done,) = next_events(conv)
    assert done.retry is None and conv.handshake_done
    return conv


# --------------------------------------------------------------------------- golden bytes


def test_handshake_request_golden_bytes():
    conv = BrokerConversation("me", software_version="1.2")
    out = conv.start_handshake(context="ctx")
    # ApiVersions v4 is flexible: request header v2 (client_id keeps its int16 length,
    # then an empty tagged-field section), body two compact strings and no tagged fields.
    assert joined(out) == (b"\x00\x00\x00\x1f"
                           b"\x00\x12\x00\x04\x00\x00\x00\x00\x00\x02me\x00"
                           b"\x0dkafka-native\x041.2\x00")
    assert (out.correlation_id, out.api_key, out.api_version, out.size) == (0, 18, 4, 35)
    assert conv.in_flight == 1 and conv.oldest().data == "ctx"
    assert not conv.handshake_done


def test_request_golden_bytes_at_negotiated_and_explicit_versions():
    conv = ready_conversation()
    assert conv.versions[ApiKey.METADATA] == 12
    out = conv.send(MetadataRequest(topics=None), 1)
    # header v1: key 3, version 1, correlation id 2, client id "me"; body: null array
    assert joined(out) == (b"\x00\x00\x00\x10\x00\x03\x00\x01\x00\x00\x00\x02\x00\x02me"
                           b"\xff\xff\xff\xff")
    out = conv.send(MetadataRequest(topics=None, allow_auto_topic_creation=False))
    assert out.api_version == 12 and out.correlation_id == 3
    assert joined(out) == encode_request(
        MetadataRequest(topics=None, allow_auto_topic_creation=False), 12, 3, "me")


def test_null_client_id_and_a_client_id_the_header_cannot_carry():
    out = BrokerConversation(None).send(MetadataRequest(topics=None), 1)
    assert joined(out)[12:14] == b"\xff\xff"  # null string
    with pytest.raises(ProtocolEncodeError):
        BrokerConversation("x" * 40000)


def test_produce_batches_are_parts_of_their_own_uncopied():
    batch = bytearray(b"B" * 100_000)  # a record batch, big enough to travel as is
    req = ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    conv = ready_conversation()
    out = conv.send(req)
    assert out.api_version == 9
    assert any(isinstance(p, memoryview) and p.obj is batch for p in out.parts)
    assert joined(out) == encode_request(req, 9, out.correlation_id, "me")
    assert out.size == len(joined(out))


def test_answer_golden_bytes_decoded_and_paired_with_its_request():
    conv = ready_conversation()
    out = conv.send(MetadataRequest(topics=None), 1, context={"mine": 1})
    # MetadataResponse v1 by hand: one broker (node 5, "h", 9092, rack null),
    # controller 5, no topics.
    body = (b"\x00\x00\x00\x01" b"\x00\x00\x00\x05" b"\x00\x01h" b"\x00\x00\x23\x84"
            b"\xff\xff" b"\x00\x00\x00\x05" b"\x00\x00\x00\x00")
    assert conv.receive_data(response_frame(out.correlation_id, body)) == 1
    (event,) = next_events(conv)
    assert type(event) is Exchange and event.retry is None
    assert event.request.correlation_id == out.correlation_id
    assert event.request.data == {"mine": 1}
    assert (event.request.api_key, event.request.api_version) == (3, 1)
    assert isinstance(event.response, MetadataResponse)
    assert [(b.node_id, b.host, b.port) for b in event.response.brokers] == [(5, "h", 9092)]
    assert event.response.controller_id == 5
    assert bytes(event.body) == body
    assert conv.in_flight == 0


def test_flexible_answer_header_has_tagged_fields():
    conv = ready_conversation()
    out = conv.send(MetadataRequest(topics=None))  # v12: response header v1
    body = MetadataResponse(brokers=[], topics=[]).encode(12)
    conv.receive_data(response_frame(out.correlation_id, body, header_version=1))
    (event,) = next_events(conv)
    assert event.response.brokers == [] and bytes(event.body) == body


# --------------------------------------------------------------------------- the handshake


def test_handshake_at_our_version_negotiates_every_api():
    conv = BrokerConversation("me")
    out = conv.start_handshake(context="hs")
    ranges = {18: (0, 4), 3: (0, 99), 1: (4, 11), 12345: (0, 1)}
    resp = ApiVersionsResponse(error_code=0, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
        for k, (lo, hi) in ranges.items()])
    conv.receive_data(response_frame(out.correlation_id, resp.encode(4)))
    (event,) = next_events(conv)
    assert type(event) is HandshakeExchange and event.retry is None
    assert event.request.data == "hs" and event.response == resp
    assert conv.handshake_done and conv.api_versions_version == 4
    assert conv.broker_versions == ranges
    ours = client_ranges()
    assert conv.versions == {18: 4, 3: ours[3][1], 1: 11}  # unknown key 12345 left out
    assert conv.api_versions_response == resp


def test_unsupported_version_answer_retries_at_the_version_the_broker_reports():
    conv = BrokerConversation("me")
    first = conv.start_handshake(context="hs")
    assert first.api_version == 4
    # The v0-encoded error answer (KIP-511), announcing ApiVersions 0-2.
    conv.receive_data(response_frame(0, api_versions_v0_body(35, {18: (0, 2)})))
    (event,) = next_events(conv)
    assert type(event) is HandshakeExchange and not conv.handshake_done
    assert event.response.error_code == ErrorCode.UNSUPPORTED_VERSION
    retry = event.retry
    assert (retry.correlation_id, retry.api_version) == (1, 2)
    assert joined(retry) == b"\x00\x00\x00\x0c\x00\x12\x00\x02\x00\x00\x00\x01\x00\x02me"
    assert len(retry.parts) == 1  # the empty body adds no empty part (a writer would spin)
    assert conv.oldest().data == "hs"  # the retry carries the handshake's context
    conv.receive_data(response_frame(1, api_versions_v1_body(0, {18: (0, 2), 3: (0, 5)})))
    (done,) = next_events(conv)
    assert done.retry is None and conv.handshake_done
    assert conv.api_versions_version == 2 and conv.versions == {18: 2, 3: 5}


def test_unsupported_version_without_a_range_retries_v0():
    conv = BrokerConversation("me")
    conv.start_handshake()
    conv.receive_data(response_frame(0, api_versions_v0_body(35, {})))
    (event,) = next_events(conv)
    assert event.retry.api_version == 0
    conv.receive_data(response_frame(1, api_versions_v0_body(0, {18: (0, 0)})))
    next_events(conv)
    assert conv.handshake_done and conv.api_versions_version == 0


def test_answer_above_the_brokers_own_maximum_is_asked_again():
    """Tansu 0.6 answers a version it does not know with error 0, in its latest layout."""
    conv = BrokerConversation("me")
    conv.start_handshake()
    resp = ApiVersionsResponse(error_code=0, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=3)])
    conv.receive_data(response_frame(0, resp.encode(3)))  # v3 layout parses as v4 too
    (event,) = next_events(conv)
    assert event.retry.api_version == 3
    conv.receive_data(response_frame(1, resp.encode(3)))
    next_events(conv)
    assert conv.handshake_done and conv.api_versions_version == 3


def test_undecodable_answer_falls_back_to_v0_and_v0_undecodable_is_final():
    conv = BrokerConversation("me")
    conv.start_handshake()
    conv.receive_data(response_frame(0, b"\x00\x00\xff"))  # not a v4 body
    (event,) = next_events(conv)
    assert event.response is None and event.retry.api_version == 0
    conv.receive_data(response_frame(1, b"\x00\x00\xff"))
    with pytest.raises(ResponseDecodeError, match="ApiVersions v0") as info:
        conv.next_event()
    assert info.value.request.correlation_id == 1
    assert not conv.handshake_done


def test_handshake_error_code_is_raised():
    conv = BrokerConversation("me")
    conv.start_handshake()
    conv.receive_data(response_frame(0, api_versions_v0_body(
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED, {})))
    with pytest.raises(HandshakeError, match="CLUSTER_AUTHORIZATION_FAILED") as info:
        conv.next_event()
    assert info.value.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert not conv.handshake_done


def test_handshake_gives_up_when_no_version_is_left():
    conv = BrokerConversation("me")
    conv.start_handshake()
    conv.receive_data(response_frame(0, api_versions_v0_body(35, {})))
    assert next_events(conv)[0].retry.api_version == 0
    conv.receive_data(response_frame(1, api_versions_v0_body(35, {18: (0, 0)})))
    with pytest.raises(UnsupportedVersionError, match="no ApiVersions version left"):
        conv.next_event()


def test_version_for_says_why_there_is_none():
    conv = BrokerConversation("me")
    with pytest.raises(UnsupportedVersionError, match="no ApiVersions handshake"):
        conv.send(MetadataRequest(topics=None))
    assert conv.in_flight == 0
    conv = ready_conversation({18: (0, 2), 3: (50, 60)})
    with pytest.raises(UnsupportedVersionError, match="Fetch.*does not support"):
        conv.version_for(ApiKey.FETCH)
    with pytest.raises(UnsupportedVersionError, match="Metadata.*50-60.*do not overlap"):
        conv.version_for(ApiKey.METADATA)


def test_a_user_api_versions_request_is_an_ordinary_exchange():
    conv = ready_conversation()
    out = conv.send(ApiVersionsRequest(), 2)
    conv.receive_data(response_frame(out.correlation_id, api_versions_v1_body(0, {18: (0, 9)})))
    (event,) = next_events(conv)
    assert type(event) is Exchange
    assert conv.versions[18] == 2  # the negotiated versions did not change


# --------------------------------------------------------------------------- correlation ids


def _metadata_answer(cid: int) -> bytes:
    return response_frame(cid, MetadataResponse(brokers=[], topics=[]).encode(1))


def test_pipelined_answers_in_order_whatever_the_chunking():
    conv = ready_conversation()
    sent = [conv.send(MetadataRequest(topics=None), 1, context=i) for i in range(3)]
    stream = b"".join(_metadata_answer(o.correlation_id) for o in sent)
    for cut in range(len(stream) + 1):
        c = ready_conversation()
        ids = [c.send(MetadataRequest(topics=None), 1, context=i).correlation_id
               for i in range(3)]
        c.receive_data(stream[:cut])
        got = next_events(c)
        c.receive_data(stream[cut:])
        got += next_events(c)
        assert [e.request.correlation_id for e in got] == ids
        assert [e.request.data for e in got] == [0, 1, 2]


def test_unknown_correlation_id_raises():
    conv = ready_conversation()
    conv.send(MetadataRequest(topics=None), 1)
    conv.receive_data(_metadata_answer(999))
    with pytest.raises(CorrelationIdError, match="999 matches no request"):
        conv.next_event()


def test_out_of_order_correlation_id_raises():
    conv = ready_conversation()
    first = conv.send(MetadataRequest(topics=None), 1)
    second = conv.send(MetadataRequest(topics=None), 1)
    conv.receive_data(_metadata_answer(second.correlation_id))
    with pytest.raises(CorrelationIdError, match="out of order"):
        conv.next_event()
    assert [e.correlation_id for e in conv.pending()] == [first.correlation_id,
                                                          second.correlation_id]


def test_fire_and_forget_answer_is_dropped_and_silence_is_fine():
    conv = ready_conversation()
    silent = conv.send(MetadataRequest(topics=None), 1, expect_response=False)
    assert conv.in_flight == 0 and conv.unanswered_fire_and_forget == 1
    normal = conv.send(MetadataRequest(topics=None), 1, context="waited")
    # Tansu and noida-db answer the fire-and-forget request: dropped.
    conv.receive_data(_metadata_answer(silent.correlation_id)
                      + _metadata_answer(normal.correlation_id))
    (event,) = next_events(conv)
    assert event.request.data == "waited" and conv.unanswered_fire_and_forget == 0
    # Kafka does not answer it: the next answer makes it forgotten.
    silent = conv.send(MetadataRequest(topics=None), 1, expect_response=False)
    normal = conv.send(MetadataRequest(topics=None), 1)
    conv.receive_data(_metadata_answer(normal.correlation_id))
    assert len(next_events(conv)) == 1 and conv.unanswered_fire_and_forget == 0
    conv.receive_data(_metadata_answer(silent.correlation_id))  # too late now
    with pytest.raises(CorrelationIdError):
        conv.next_event()


def test_undecodable_body_names_its_request_and_leaves_the_stream_in_sync():
    conv = ready_conversation()
    bad = conv.send(MetadataRequest(topics=None), 1, context="bad")
    good = conv.send(MetadataRequest(topics=None), 1, context="good")
    conv.receive_data(response_frame(bad.correlation_id, b"\x00\x00")
                      + _metadata_answer(good.correlation_id))
    with pytest.raises(ResponseDecodeError, match="Metadata v1") as info:
        conv.next_event()
    assert info.value.request.data == "bad" and bytes(info.value.body) == b"\x00\x00"
    (event,) = next_events(conv)
    assert event.request.data == "good"


def test_decode_false_gives_the_body_only():
    conv = ready_conversation()
    out = conv.send(MetadataRequest(topics=None), 1, decode=False)
    conv.receive_data(response_frame(out.correlation_id, b"anything"))
    (event,) = next_events(conv)
    assert event.response is None and bytes(event.body) == b"anything"


def test_a_frame_too_big_for_its_size_field_leaves_nothing_in_flight(monkeypatch):
    conv = ready_conversation()
    monkeypatch.setattr(framing, "_INT32_MAX", 10)  # this frame has 16 bytes
    with pytest.raises(ProtocolEncodeError, match="does not fit"):
        conv.send(MetadataRequest(topics=None), 1)
    monkeypatch.undo()
    assert conv.in_flight == 0
    out = conv.send(MetadataRequest(topics=None), 1)
    conv.receive_data(_metadata_answer(out.correlation_id))
    assert len(next_events(conv)) == 1


def test_an_unencodable_request_takes_no_correlation_id():
    conv = ready_conversation()
    with pytest.raises(UnsupportedVersionError):
        conv.send(MetadataRequest(topics=None), 99)
    assert conv.in_flight == 0
    assert conv.send(MetadataRequest(topics=None), 1).correlation_id == 2


# --------------------------------------------------------------------------- receiving


def test_recv_into_path_receives_a_large_answer_in_place():
    conv = ready_conversation()
    out = conv.send(MetadataRequest(topics=None), 1, decode=False)
    payload = bytes(range(256)) * 1000
    stream = response_frame(out.correlation_id, payload)
    pos = 0
    while pos < len(stream):
        view = conv.buffer_for_read()
        n = min(len(view), len(stream) - pos, 50_000)
        view[:n] = stream[pos:pos + n]
        del view
        conv.commit(n)
        pos += n
    (event,) = next_events(conv)
    assert bytes(event.body) == payload


def test_frames_cut_by_the_callers_own_parser():
    conv = ready_conversation()
    out = conv.send(MetadataRequest(topics=None), 1, context="x")
    (frame,) = framing.FrameParser().feed(_metadata_answer(out.correlation_id))
    conv.receive_frame(frame)
    assert next_events(conv)[0].request.data == "x"


def test_invalid_frame_size_raises_and_keeps_the_frames_before_it():
    conv = ready_conversation(max_frame_size=1000)
    out = conv.send(MetadataRequest(topics=None), 1)
    with pytest.raises(InvalidLengthError):
        conv.receive_data(_metadata_answer(out.correlation_id) + struct.pack(">i", 5000))
    assert len(next_events(conv)) == 1


def test_reset_returns_what_waited_and_forgets_the_stream():
    conv = ready_conversation()
    conv.send(MetadataRequest(topics=None), 1, context="a")
    conv.send(MetadataRequest(topics=None), 1, expect_response=False)
    conv.send(MetadataRequest(topics=None), 1, context="b")
    conv.receive_data(b"\x00\x00\x00")  # part of a size prefix
    assert [e.data for e in conv.reset()] == ["a", "b"]
    assert conv.in_flight == 0 and conv.unanswered_fire_and_forget == 0
    assert not conv.handshake_done and conv.versions[3] == 12  # kept until a new handshake
    out = conv.start_handshake()
    assert out.correlation_id == 5  # ids keep counting
    conv.receive_data(response_frame(5, api_versions_v0_body(35, {18: (0, 2)})))
    assert next_events(conv)[0].retry.api_version == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=12), st.data())
def test_property_answers_pair_with_their_requests(fire_and_forget, data):
    """Any mix of waited and fire-and-forget requests, the broker answering every one
    (Tansu) or only the waited ones (Kafka), any chunking: each waited request gets its
    answer, in order, once."""
    conv = ready_conversation()
    answer_silent = data.draw(st.booleans())
    sent = [conv.send(MetadataRequest(topics=None), 1, expect_response=not silent,
                      context=i) for i, silent in enumerate(fire_and_forget)]
    stream = b"".join(_metadata_answer(o.correlation_id)
                      for o, silent in zip(sent, fire_and_forget)
                      if answer_silent or not silent)
    got = []
    pos = 0
    while pos < len(stream):
        n = data.draw(st.integers(1, max(1, len(stream) - pos)))
        conv.receive_data(stream[pos:pos + n])
        pos += n
        got += next_events(conv)
    assert [e.request.data for e in got] == [
        i for i, silent in enumerate(fire_and_forget) if not silent]
    assert conv.in_flight == 0
