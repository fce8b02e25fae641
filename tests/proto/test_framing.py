"""kafka_proto.framing: frame parser, request/response headers, correlation ids."""
from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_proto.errors import (
    CorrelationIdError,
    InvalidLengthError,
    InvalidVarintError,
    ProtocolDecodeError,
    ProtocolEncodeError,
    TruncatedDataError,
)
from kafka_proto.framing import (
    CorrelationTracker,
    FrameParser,
    decode_response_header,
    encode_request,
    encode_request_header,
    encode_request_parts,
    response_header_version,
)


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def as_bytes(frames):
    return [bytes(f) for f in frames]


PAYLOADS = [b"hello", b"", b"x" * 300, bytes(range(256)), b"\x00\x00\x00\x05"]
STREAM = b"".join(frame(p) for p in PAYLOADS)


# --------------------------------------------------------------------------- parser


def test_single_frame():
    p = FrameParser()
    out = p.feed(frame(b"abc"))
    assert as_bytes(out) == [b"abc"]
    assert all(isinstance(f, memoryview) for f in out)
    assert p.buffered == 0 and not p.in_frame


def test_many_frames_in_one_chunk():
    assert as_bytes(FrameParser().feed(STREAM)) == PAYLOADS


def test_split_at_every_position():
    for cut in range(len(STREAM) + 1):
        p = FrameParser()
        out = p.feed(STREAM[:cut]) + p.feed(STREAM[cut:])
        assert as_bytes(out) == PAYLOADS, cut
        assert not p.in_frame


def test_split_at_every_pair_of_positions():
    data = frame(b"abcdef") + frame(b"") + frame(b"12")
    for i in range(len(data) + 1):
        for j in range(i, len(data) + 1):
            p = FrameParser()
            out = p.feed(data[:i]) + p.feed(data[i:j]) + p.feed(data[j:])
            assert as_bytes(out) == [b"abcdef", b"", b"12"], (i, j)


def test_one_byte_chunks():
    p = FrameParser()
    out = []
    for i in range(len(STREAM)):
        out += p.feed(STREAM[i:i + 1])
        if i < len(STREAM) - 1:
            assert p.in_frame or out  # never loses a partial frame
    assert as_bytes(out) == PAYLOADS


def test_buffered_counts_partial_frame():
    p = FrameParser()
    assert p.feed(b"\x00\x00") == [] and p.buffered == 2
    assert p.feed(b"\x00\x05ab") == [] and p.buffered == 6
    assert as_bytes(p.feed(b"cdeXY")) == [b"abcde"]
    assert p.buffered == 2  # "XY": half a size prefix


def test_accepts_bytearray_and_memoryview_input():
    p = FrameParser()
    data = bytearray(frame(b"abc"))
    assert as_bytes(p.feed(memoryview(data)[:3])) == []
    assert as_bytes(p.feed(data[3:])) == [b"abc"]


def test_frames_do_not_alias_input_or_each_other():
    p = FrameParser()
    buf = bytearray(frame(b"first") + frame(b"second"))
    f1, f2 = p.feed(buf)
    buf[:] = b"\xff" * len(buf)  # caller reuses its receive buffer
    p.feed(frame(b"third"))
    assert bytes(f1) == b"first" and bytes(f2) == b"second"


def test_negative_size_raises_and_parser_stays_failed():
    p = FrameParser()
    with pytest.raises(InvalidLengthError):
        p.feed(struct.pack(">i", -1))
    with pytest.raises(InvalidLengthError):
        p.feed(frame(b"ok"))
    p.reset()
    assert as_bytes(p.feed(frame(b"ok"))) == [b"ok"]


def test_oversized_frame_raises_before_allocating():
    p = FrameParser(max_frame_size=10)
    assert as_bytes(p.feed(frame(b"x" * 10))) == [b"x" * 10]
    with pytest.raises(InvalidLengthError, match="above the limit"):
        p.feed(struct.pack(">i", 11))
    # 2 GiB claimed: must fail fast, not try to allocate it
    with pytest.raises(InvalidLengthError):
        FrameParser().feed(struct.pack(">i", 0x7FFFFFFF))


def test_oversized_frame_detected_across_chunks():
    p = FrameParser(max_frame_size=100)
    p.feed(b"\x00\x00")
    with pytest.raises(InvalidLengthError):
        p.feed(b"\x01\x00")  # 256


def test_announced_size_is_not_allocated_before_the_bytes_come():
    import tracemalloc

    # A peer announces a 100 MB frame (the default limit) and sends 8 bytes of it.
    p = FrameParser()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assert p.feed(struct.pack(">i", 100_000_000) + b"abcdefgh") == []
        held = tracemalloc.get_traced_memory()[0] - before
        view = p.buffer_for_read()  # the recv_into path must not allocate it either
        room = len(view)
        del view
        held_for_read = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 100_000 and held_for_read < 100_000, (held, held_for_read)
    assert room <= 65536
    assert p.buffered == 12 and p.in_frame
    assert p.capacity == FrameParser.INITIAL_FRAME_BUFFER == 65536


def test_frame_buffer_grows_with_the_bytes_received():
    size = 5_000_000
    payload = random.Random(7).randbytes(size)
    data = frame(payload)
    # feed() in 10 kB chunks
    p, out = FrameParser(), []
    for i in range(0, len(data), 10_000):
        out += p.feed(data[i:i + 10_000])
        if p.in_frame:
            received = p.buffered - 4
            assert p.capacity <= max(FrameParser.INITIAL_FRAME_BUFFER, 2 * received)
    assert as_bytes(out) == [payload] and len(out[0].obj) == size
    # recv_into: every grant of room stays within four times what has arrived
    p, out, pos = FrameParser(), [], 0
    capacities = set()
    while pos < len(data):
        view = p.buffer_for_read()
        received = max(p.buffered - 4, 0)
        assert p.capacity <= max(FrameParser.INITIAL_FRAME_BUFFER, 4 * received)
        capacities.add(p.capacity)
        n = min(len(view), 50_000, len(data) - pos)
        view[:n] = data[pos:pos + n]
        del view
        pos += n
        out += p.commit(n)
    assert as_bytes(out) == [payload] and len(out[0].obj) == size
    assert p.capacity == 0 and not p.in_frame
    # doubling: a handful of sizes, not one per read
    assert capacities - {0} == {2**k for k in range(17, 23)} | {size}


def test_big_chunk_starts_the_frame_with_what_it_holds():
    payload = bytes(range(256)) * 1000
    data = frame(payload)
    p = FrameParser()
    assert p.feed(data[:200_004]) == []
    assert p.capacity == 200_000  # the bytes at hand, not the announced 256000
    assert as_bytes(p.feed(data[200_004:])) == [payload]


def test_kept_read_view_does_not_break_growth():
    payload = random.Random(3).randbytes(300_000)
    data = frame(payload)
    p = FrameParser()
    p.feed(data[:40_000])
    kept = []
    pos = 40_000
    while pos < len(data):
        view = p.buffer_for_read()
        kept.append(view)  # against the advice: the buffer cannot be resized in place
        n = min(len(view), len(data) - pos)
        view[:n] = data[pos:pos + n]
        pos += n
        out = p.commit(n)
    assert as_bytes(out) == [payload]


def test_frames_before_an_invalid_size_come_with_the_error():
    good = frame(b"one") + frame(b"") + frame(b"three")
    p = FrameParser(max_frame_size=100)
    with pytest.raises(InvalidLengthError) as info:
        p.feed(good + struct.pack(">i", 101) + b"junk")
    assert as_bytes(info.value.frames) == [b"one", b"", b"three"]
    # failed for good: later calls raise without frames (none is handed out twice)
    with pytest.raises(InvalidLengthError) as again:
        p.feed(frame(b"x"))
    assert again.value.frames == []
    with pytest.raises(InvalidLengthError):
        p.buffer_for_read()
    # a bad size met before any frame of the call: an empty list
    p = FrameParser()
    with pytest.raises(InvalidLengthError) as info:
        p.feed(struct.pack(">i", -5))
    assert info.value.frames == []


def test_frames_before_an_invalid_size_through_commit():
    # a partial frame finished, two whole ones, then a negative size, in one read
    p = FrameParser(read_size=64)
    data = frame(b"abcdef") + frame(b"gh") + frame(b"") + struct.pack(">i", -1)
    view = p.buffer_for_read()
    view[:5] = data[:5]
    del view
    assert p.commit(5) == []
    view = p.buffer_for_read()
    rest = data[5:]
    view[:len(rest)] = rest
    del view
    with pytest.raises(InvalidLengthError) as info:
        p.commit(len(rest))
    assert as_bytes(info.value.frames) == [b"abcdef", b"gh", b""]


def test_error_is_a_decode_error():
    with pytest.raises(ProtocolDecodeError):
        FrameParser().feed(b"\x80\x00\x00\x00")


def test_invalid_constructor_arguments():
    with pytest.raises(ValueError):
        FrameParser(max_frame_size=-1)
    with pytest.raises(ValueError):
        FrameParser(read_size=1)


# --------------------------------------------------------------------------- recv_into path


class FakeSocket:
    """Gives out a byte stream in chunks of the given sizes via recv_into."""

    def __init__(self, data: bytes, chunk_sizes):
        self.data = data
        self.pos = 0
        self.sizes = iter(chunk_sizes)

    def recv_into(self, buf: memoryview) -> int:
        want = min(len(buf), next(self.sizes, len(buf)), len(self.data) - self.pos)
        buf[:want] = self.data[self.pos:self.pos + want]
        self.pos += want
        return want


def drain(parser: FrameParser, sock: FakeSocket):
    out = []
    while sock.pos < len(sock.data):
        view = parser.buffer_for_read()
        n = sock.recv_into(view)
        del view
        out += parser.commit(n)
    return out


def test_recv_into_small_frames_many_per_read():
    p = FrameParser(read_size=64)
    assert as_bytes(drain(p, FakeSocket(STREAM, []))) == PAYLOADS


def test_recv_into_large_frame_is_received_in_place():
    big = random.Random(1).randbytes(200_000)
    data = frame(b"small") + frame(big) + frame(b"tail")
    p = FrameParser(read_size=4096)
    direct_reads = 0
    out = []
    sock = FakeSocket(data, [100, 5000] + [7000] * 100)
    while sock.pos < len(data):
        view = p.buffer_for_read()
        if view.obj is not p._scratch:
            direct_reads += 1
        n = sock.recv_into(view)
        del view
        out += p.commit(n)
    assert as_bytes(out) == [b"small", big, b"tail"]
    assert direct_reads > 10  # most of the big frame skipped the scratch buffer


def test_commit_zero_and_too_much():
    p = FrameParser(read_size=64)
    p.buffer_for_read()
    assert p.commit(0) == []
    p.buffer_for_read()
    with pytest.raises(ValueError):
        p.commit(65)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.data_too_large, HealthCheck.too_slow])
@given(
    payloads=st.lists(st.binary(max_size=200), max_size=12)
    | st.lists(st.builds(lambda n, seed: random.Random(seed).randbytes(n),
                         st.integers(33_000, 300_000), st.integers(0, 2**32)),
               min_size=1, max_size=2),
    cuts=st.lists(st.integers(min_value=1, max_value=5000), max_size=60),
)
def test_property_any_chunking_gives_the_same_frames(payloads, cuts):
    data = b"".join(frame(x) for x in payloads)
    # feed() path, chunked as hypothesis chose
    p = FrameParser()
    out, pos = [], 0
    for c in cuts:
        out += p.feed(data[pos:pos + c])
        pos += c
    out += p.feed(data[pos:])
    assert as_bytes(out) == payloads
    assert p.buffered == 0
    # recv_into path with the same chunk sizes
    p2 = FrameParser(read_size=1024)
    assert as_bytes(drain(p2, FakeSocket(data, cuts))) == payloads


# --------------------------------------------------------------------------- request headers


def test_request_header_v0_v1_v2_bytes():
    assert encode_request_header(7, 0, 5, "ignored", 0) == bytes.fromhex("0007 0000 00000005")
    assert encode_request_header(3, 8, 1, "ab", 1) == (
        bytes.fromhex("0003 0008 00000001 0002") + b"ab")
    # v2: client_id still uses the int16 length, then an empty tagged-field section
    assert encode_request_header(1, 12, -1, "ab", 2) == (
        bytes.fromhex("0001 000c ffffffff 0002") + b"ab" + b"\x00")
    assert encode_request_header(18, 3, 9, None, 2) == bytes.fromhex("0012 0003 00000009 ffff 00")


def test_request_header_utf8_client_id():
    h = encode_request_header(3, 1, 1, "é", 1)
    assert h[8:] == b"\x00\x02" + "é".encode()


def test_request_header_client_id_not_utf8_reads_with_replacement_characters():
    """As a Kafka broker reads it (a client's bad bytes do not cost its connection)."""
    from kafka_proto.framing import decode_request_header

    head, body = decode_request_header(bytes.fromhex("0003 0001 00000001 0003 61ffff") + b"B")
    assert head.client_id == "a\ufffd\ufffd" and bytes(body) == b"B"


def test_request_header_range_checks():
    with pytest.raises(ProtocolEncodeError):
        encode_request_header(3, 1, 1 << 31, None, 1)
    with pytest.raises(ProtocolEncodeError):
        encode_request_header(1 << 15, 1, 1, None, 1)
    with pytest.raises(ProtocolEncodeError):
        encode_request_header(3, 1, 1, "x" * 40000, 1)
    with pytest.raises(ProtocolEncodeError):
        encode_request_header(3, 1, 1, None, 3)


class FakeRequest:
    API_KEY = 3

    def __init__(self, body: bytes):
        self.body = body
        self.versions = []

    def encode(self, version: int) -> bytes:
        self.versions.append(version)
        return self.body

    def encode_into(self, w, version: int) -> None:
        w.write_raw(self.encode(version))


def test_encode_request_frames_header_and_body():
    req = FakeRequest(b"BODY")
    data = encode_request(req, 5, 42, "cid", header_version=1)
    assert req.versions == [5]
    header = encode_request_header(3, 5, 42, "cid", 1)
    assert data == struct.pack(">i", len(header) + 4) + header + b"BODY"
    # and the parser gets back exactly header + body
    (payload,) = FrameParser().feed(data)
    assert bytes(payload) == header + b"BODY"


def test_encode_request_parts_concatenate_to_encode_request():
    parts = encode_request_parts(FakeRequest(b"xyz"), 2, 7, None, header_version=2)
    assert len(parts) == 2 and parts[1] == b"xyz"
    assert b"".join(parts) == encode_request(FakeRequest(b"xyz"), 2, 7, None, header_version=2)


def test_encode_request_parts_keeps_body_parts_and_drops_empty_ones():
    big = memoryview(bytearray(b"R" * 5000))
    parts = encode_request_parts([b"ab", b"", big, b"cd"], 3, 9, "c", api_key=0,
                                 header_version=1)
    header = encode_request_header(0, 3, 9, "c", 1)
    assert parts[0] == struct.pack(">i", len(header) + 5004) + header
    assert parts[1:] == [b"ab", big, b"cd"] and parts[2] is big  # not copied
    assert encode_request_parts(b"", 0, 1, None, api_key=18, header_version=1) == [
        struct.pack(">i", 10) + encode_request_header(18, 0, 1, None, 1)]


def test_encode_request_into_shared_writer():
    from kafka_proto._wire import Writer
    from kafka_proto.framing import encode_request_into

    w = Writer()
    w.write_raw(b"junk")  # frames are appended after whatever is there
    n1 = encode_request_into(w, FakeRequest(b"one"), 1, 10, "c", header_version=1)
    n2 = encode_request_into(w, b"two!", 2, 11, None, api_key=0, header_version=2)
    data = w.getvalue()
    assert len(data) == 4 + n1 + n2
    assert data[4:4 + n1] == encode_request(FakeRequest(b"one"), 1, 10, "c", header_version=1)
    frames = as_bytes(FrameParser().feed(data[4:]))
    assert frames == [encode_request_header(3, 1, 10, "c", 1) + b"one",
                      encode_request_header(0, 2, 11, None, 2) + b"two!"]


def test_encode_request_of_raw_body_needs_api_key():
    data = encode_request(b"\x01\x02", 0, 1, None, api_key=18, header_version=1)
    assert data[4:6] == b"\x00\x12" and data.endswith(b"\x01\x02")
    with pytest.raises(TypeError):
        encode_request(object(), 0, 1, None, header_version=1)


# --------------------------------------------------------------------------- response headers


def test_peek_correlation_id():
    from kafka_proto.framing import peek_correlation_id

    assert peek_correlation_id(b"\x00\x00\x01\x00\x00rest") == 256
    with pytest.raises(TruncatedDataError):
        peek_correlation_id(b"\x00\x01")


def test_response_header_v0():
    cid, body = decode_response_header(b"\x00\x00\x00\x07rest", 3, 1, header_version=0)
    assert cid == 7 and bytes(body) == b"rest" and isinstance(body, memoryview)


def test_response_header_v1_skips_tagged_fields():
    assert bytes(decode_response_header(b"\x00\x00\x00\x07\x00body", 3, 9, 1)[1]) == b"body"
    tagged = b"\x02" + b"\x00\x03abc" + b"\x05\x00"  # two tagged fields: 3 bytes, 0 bytes
    cid, body = decode_response_header(b"\xff\xff\xff\xfe" + tagged + b"B", 3, 9, 1)
    assert cid == -2 and bytes(body) == b"B"


def test_response_header_body_is_zero_copy():
    buf = bytearray(b"\x00\x00\x00\x01\x00payload")
    _, body = decode_response_header(buf, 1, 12, 1)
    buf[-1:] = b"!"
    assert bytes(body) == b"payloa!"


def test_response_header_truncated_and_corrupt():
    with pytest.raises(TruncatedDataError):
        decode_response_header(b"\x00\x00\x01", 3, 1, 0)
    with pytest.raises(TruncatedDataError):
        decode_response_header(b"\x00\x00\x00\x01", 3, 9, 1)  # no tagged-field count
    with pytest.raises(InvalidLengthError):
        decode_response_header(b"\x00\x00\x00\x01\x01\x00\x09ab", 3, 9, 1)
    with pytest.raises(InvalidVarintError):
        decode_response_header(b"\x00\x00\x00\x01" + b"\xff" * 6, 3, 9, 1)


def test_api_versions_response_header_is_v0_even_when_flexible():
    for version in range(5):
        assert response_header_version(18, version) == 0
    # with the default header version the byte after the correlation id is body, not tags
    cid, body = decode_response_header(b"\x00\x00\x00\x05\x00\x23", 18, 3)
    assert cid == 5 and bytes(body) == b"\x00\x23"


def test_header_versions_follow_flexible_versions():
    messages = pytest.importorskip("kafka_proto.messages")
    if not hasattr(messages, "request_header_version"):
        pytest.skip("generated messages not built yet")
    from kafka_proto.framing import request_header_version

    # Fetch: flexible from v12; Metadata from v9; ApiVersions from v3
    assert request_header_version(1, 11) == 1 and request_header_version(1, 12) == 2
    assert response_header_version(1, 11) == 0 and response_header_version(1, 12) == 1
    assert request_header_version(3, 8) == 1 and request_header_version(3, 9) == 2
    assert request_header_version(18, 3) == 2 and response_header_version(18, 3) == 0
    assert request_header_version(7, 0) == 0  # ControlledShutdown v0



# --------------------------------------------------------------------------- the server side


def test_peek_request_reads_what_every_header_version_starts_with():
    from kafka_proto.framing import RequestPeek, peek_request

    frame = encode_request(FakeRequest(b"body"), 99, 7, "c", header_version=1)[4:]
    assert peek_request(frame) == RequestPeek(3, 99, 7)  # version 99: unknown, still read
    assert peek_request(memoryview(frame)).correlation_id == 7
    with pytest.raises(TruncatedDataError):
        peek_request(frame[:7])


@pytest.mark.parametrize("header_version", [0, 1, 2])
@pytest.mark.parametrize("client_id", [None, "", "client-é", "x" * 300])
def test_decode_request_header_inverts_encode_request(header_version, client_id):
    from kafka_proto.framing import RequestHead, decode_request_header

    frame = encode_request(FakeRequest(b"BODY"), 4, -5, client_id,
                           header_version=header_version)[4:]
    head, body = decode_request_header(frame, header_version)
    expected_id = client_id if header_version >= 1 else None
    assert head == RequestHead(3, 4, -5, expected_id, header_version)
    assert bytes(body) == b"BODY" and isinstance(body, memoryview)


def test_decode_request_header_agrees_with_the_generated_request_header():
    from kafka_proto.framing import decode_request_header
    from kafka_proto.messages import API_KEYS, RequestHeader, request_header_version

    for api_key, info in API_KEYS.items():
        for version in (info.min_version, info.max_version):
            frame = encode_request(b"\x01", version, 12345, "me", api_key=api_key)[4:]
            head, body = decode_request_header(frame)  # header version from key and version
            hv = request_header_version(api_key, version)
            generated, used = RequestHeader.decode_prefix(frame, hv)
            assert (head.api_key, head.api_version, head.correlation_id, head.client_id) == (
                generated.request_api_key, generated.request_api_version,
                generated.correlation_id, generated.client_id if hv >= 1 else None)
            assert head.header_version == hv and len(frame) - len(body) == used
            assert bytes(body) == b"\x01"


def test_decode_request_header_skips_tagged_fields():
    from kafka_proto.framing import decode_request_header

    tags = b"\x02" + b"\x00\x03abc" + b"\x07\x00"
    frame = bytes.fromhex("0001 000c 00000009 0002") + b"ab" + tags + b"B"
    head, body = decode_request_header(frame)  # Fetch v12: header v2
    assert head.client_id == "ab" and bytes(body) == b"B"


@pytest.mark.parametrize("frame, error", [
    (bytes.fromhex("0003 0001 00000001 00"), TruncatedDataError),            # half a length
    (bytes.fromhex("0003 0001 00000001 0005") + b"ab", TruncatedDataError),  # short id
    (bytes.fromhex("0003 0001 00000001 fffe"), InvalidLengthError),          # length -2
    (bytes.fromhex("0001 000c 00000001 ffff"), TruncatedDataError),          # no tag count
    (bytes.fromhex("0001 000c 00000001 ffff 01 00 05") + b"ab", InvalidLengthError),
    (bytes.fromhex("0001 000c 00000001 ffff") + b"\xff" * 6, InvalidVarintError),
])
def test_decode_request_header_refuses_malformed_headers(frame, error):
    from kafka_proto.framing import decode_request_header

    with pytest.raises(error):
        decode_request_header(frame)


def test_decode_request_header_of_an_unknown_version_needs_the_header_version():
    from kafka_proto.errors import UnsupportedVersionError
    from kafka_proto.framing import decode_request_header

    frame = encode_request(b"", 999, 1, "c", api_key=3, header_version=1)[4:]
    with pytest.raises(UnsupportedVersionError):
        decode_request_header(frame)
    assert decode_request_header(frame, 1)[0].client_id == "c"


def test_encode_response_header_and_encode_response():
    from kafka_proto.framing import encode_response, encode_response_header
    from kafka_proto.messages import MetadataResponse

    # Metadata v12 is flexible (header v1: a tag byte); v1 is not.
    assert encode_response_header(3, 12, 7, 10) == struct.pack(">ii", 15, 7) + b"\x00"
    assert encode_response_header(3, 1, 7, 10) == struct.pack(">ii", 14, 7)
    # ApiVersions answers always use header v0 (KIP-511).
    assert encode_response_header(18, 4, 7, 0) == struct.pack(">ii", 4, 7)
    resp = MetadataResponse(brokers=[], topics=[])
    frame = encode_response(resp, 12, -3)
    (payload,) = FrameParser().feed(frame)
    cid, body = decode_response_header(payload, 3, 12)
    assert cid == -3 and MetadataResponse.decode(body, 12) == resp
    assert encode_response(resp.encode(12), 12, -3, api_key=3) == frame
    with pytest.raises(TypeError):
        encode_response(b"raw", 12, 1)
    with pytest.raises(ProtocolEncodeError):
        encode_response_header(3, 12, 2**31, 0)
    with pytest.raises(ProtocolEncodeError):
        encode_response_header(3, 12, 1, 2**31)

# --------------------------------------------------------------------------- correlation ids


def test_tracker_ids_count_up_and_pop_in_order():
    t = CorrelationTracker()
    ids = [t.next_id(3, 9, data=i) for i in range(3)]
    assert ids == [0, 1, 2] and len(t) == 3
    assert t.peek().correlation_id == 0
    e = t.pop(0)
    assert (e.api_key, e.api_version, e.data) == (3, 9, 0)
    assert [x.correlation_id for x in t.pending()] == [1, 2]


def test_tracker_unknown_and_out_of_order():
    t = CorrelationTracker()
    t.next_id(1, 12)
    t.next_id(1, 12)
    with pytest.raises(CorrelationIdError, match="matches no request"):
        t.pop(99)
    with pytest.raises(CorrelationIdError, match="out of order"):
        t.pop(1)
    assert len(t) == 2  # nothing removed by the failed pops
    t.pop(0)
    t.pop(1)
    with pytest.raises(CorrelationIdError):
        t.pop(1)  # already answered


def test_tracker_non_strict_allows_any_order():
    t = CorrelationTracker(strict_order=False)
    t.next_id(1, 1)
    t.next_id(1, 1)
    assert t.pop(1).correlation_id == 1
    assert t.pop(0).correlation_id == 0


def test_tracker_wraps_int32_and_skips_ids_in_flight():
    t = CorrelationTracker(start=(1 << 31) - 2)
    assert t.next_id(0, 9) == (1 << 31) - 2
    assert t.next_id(0, 9) == (1 << 31) - 1
    assert t.next_id(0, 9) == 0
    # wrapping onto an id still in flight skips it
    t2 = CorrelationTracker(start=(1 << 31) - 1)
    t2.next_id(0, 1)  # 2**31-1
    t2.next_id(0, 1)  # 0, still in flight
    t2._next = (1 << 31) - 1
    assert t2.next_id(0, 1) == 1  # 2**31-1 and 0 are taken


def test_tracker_without_response_and_clear():
    t = CorrelationTracker()
    assert t.next_id(0, 3, expect_response=False) == 0
    assert len(t) == 0 and 0 not in t and t.peek() is None
    t.next_id(0, 3, data="a")
    t.next_id(0, 3, data="b")
    assert [e.data for e in t.clear()] == ["a", "b"] and len(t) == 0
    assert t.get(0) is None


def test_tracker_answer_to_fire_and_forget_is_dropped():
    # Tansu and noida-db answer Produce acks=0 although Kafka does not
    t = CorrelationTracker()
    silent = t.next_id(0, 9, expect_response=False)
    normal = t.next_id(3, 12, data="md")
    assert t.get(silent).api_key == 0 and t.get(normal).data == "md"
    assert t.peek().correlation_id == normal
    assert t.pop(silent) is None
    assert t.pop(normal).data == "md"
    assert len(t) == 0 and t.get(silent) is None


def test_tracker_unanswered_fire_and_forget_is_forgotten():
    t = CorrelationTracker()
    silent = t.next_id(0, 9, expect_response=False)
    normal = t.next_id(3, 12)
    assert t.pop(normal).correlation_id == normal  # Kafka: no answer to `silent`
    with pytest.raises(CorrelationIdError):
        t.pop(silent)  # too late: it would have come first


def test_tracker_fire_and_forget_does_not_excuse_skipping():
    t = CorrelationTracker()
    first = t.next_id(3, 12)
    t.next_id(0, 9, expect_response=False)
    third = t.next_id(3, 12)
    with pytest.raises(CorrelationIdError, match="out of order"):
        t.pop(third)
    assert t.pop(first).correlation_id == first


def test_tracker_bounds_unanswered_ids(monkeypatch):
    monkeypatch.setattr(CorrelationTracker, "MAX_UNANSWERED", 3)
    t = CorrelationTracker()
    ids = [t.next_id(0, 9, expect_response=False) for _ in range(5)]
    assert [t.get(i) is not None for i in ids] == [False, False, True, True, True]


def test_tracker_counts_unanswered_fire_and_forget(monkeypatch):
    t = CorrelationTracker()
    assert t.unanswered_fire_and_forget == 0
    a = t.next_id(0, 9, expect_response=False)
    t.next_id(0, 9, expect_response=False)
    normal = t.next_id(3, 12)
    c = t.next_id(0, 9, expect_response=False)
    assert t.unanswered_fire_and_forget == 3 and len(t) == 1
    assert t.pop(a) is None  # answered (Tansu, noida-db)
    assert t.unanswered_fire_and_forget == 2
    t.pop(normal)  # the second one can no longer be answered: forgotten
    assert t.unanswered_fire_and_forget == 1
    assert t.pop(c) is None and t.unanswered_fire_and_forget == 0
    t.next_id(0, 9, expect_response=False)
    t.clear()
    assert t.unanswered_fire_and_forget == 0
    monkeypatch.setattr(CorrelationTracker, "MAX_UNANSWERED", 2)
    for _ in range(5):
        t.next_id(0, 9, expect_response=False)
    assert t.unanswered_fire_and_forget == 2  # the oldest dropped
    with pytest.raises(AttributeError):
        t.unanswered_fire_and_forget = 0  # read only


def test_tracker_discard_forgets_an_unsent_request():
    t = CorrelationTracker()
    first = t.next_id(3, 1, data="a")
    unsent = t.next_id(3, 1, data="b")
    t.discard(unsent)
    t.discard(12345)  # unknown: nothing happens
    assert [e.data for e in t.pending()] == ["a"]
    assert t.pop(first).data == "a" and len(t) == 0


def test_version_prefixed_blobs():
    from kafka_proto.errors import UnsupportedVersionError
    from kafka_proto.framing import decode_version_prefixed, encode_version_prefixed
    from kafka_proto.messages import ConsumerProtocolAssignment as A

    msg = A(assigned_partitions=[A.TopicPartition(topic="t", partitions=[1])], user_data=None)
    # int16 version, then [topic "t", [1]], null user data
    blob = b"\x00\x01" + b"\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01\x00\x00\x00\x01" \
        + b"\xff\xff\xff\xff"
    assert encode_version_prefixed(msg, 1) == blob
    assert decode_version_prefixed(A, blob) == msg
    assert decode_version_prefixed(A, b"\x00\x07" + blob[2:] + b"later fields") == msg
    with pytest.raises(UnsupportedVersionError):
        encode_version_prefixed(msg, A.MAX_VERSION + 1)
    with pytest.raises(ProtocolDecodeError, match="invalid version -1"):
        decode_version_prefixed(A, b"\xff\xff" + blob[2:])
    with pytest.raises(TruncatedDataError):
        decode_version_prefixed(A, blob[:5])


def test_tracker_start_range():
    with pytest.raises(ValueError):
        CorrelationTracker(start=-1)


def test_encode_frame_sizes_a_bare_payload():
    from kafka_proto.framing import encode_frame

    assert encode_frame(b"") == b"\x00\x00\x00\x00"
    assert encode_frame(memoryview(b"token")) == b"\x00\x00\x00\x05token"
    (payload,) = FrameParser().feed(encode_frame(b"\x00alice\x00pw"))
    assert bytes(payload) == b"\x00alice\x00pw"
