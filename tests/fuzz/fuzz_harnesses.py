"""Fuzz harnesses: one plain ``check(data: bytes) -> None`` per target.

The same functions run under atheris (``tools/fuzz_run.py``) and under the built-in mutator
of the smoke test (``tests/fuzz/fuzz_driver.py``, used by ``tests/fuzz/test_fuzz_smoke.py``). Each one either returns (the input
decoded, or was rejected with a documented exception) or raises:

* any exception that is not a documented one (a codec bug: wrong type, or a crash in a
  Python-level path), or
* :class:`InvariantViolation` when a decoded value does not survive re-encoding and
  decoding again, or when two ways of reading the same bytes disagree.

The documented exceptions are :class:`kafka_proto.errors.KafkaProtocolError` and its
subclasses (for the client harness also the connection errors the client documents).
Every decompression is capped (``MAX_DECOMPRESSED``) so that one input cannot make the
process allocate more than a few MiB: the RSS bound the runs enforce relies on it.

Input layouts (the first bytes select options, the rest is the payload) are described in
each harness' docstring and in docs/fuzzing.md; the committed corpus follows them.
"""
from __future__ import annotations

import random
import struct
import types
from typing import Callable, Dict, List, Optional, Tuple

from kafka_proto.errors import KafkaProtocolError

#: Decompression cap of the record and compression harnesses (bytes).
MAX_DECOMPRESSED = 4 * 1024 * 1024
#: Output caps a harness picks from, by one input byte.
_DECOMPRESS_LIMITS = (64 * 1024, 1024 * 1024, MAX_DECOMPRESSED, 1)

#: Errors the codec documents for hostile input.
CODEC_ERRORS = (KafkaProtocolError,)


class InvariantViolation(AssertionError):
    """A harness invariant does not hold (round trip or two readings disagree)."""


def _fail(what: str) -> None:
    raise InvariantViolation(what)


# --------------------------------------------------------------------------- records


def _record_tuple(rec) -> tuple:
    return (rec.timestamp, _b(rec.key), _b(rec.value),
            [(k, _b(v)) for k, v in rec.headers])


def _b(v) -> Optional[bytes]:
    return None if v is None else bytes(v)


def _walk_batch(batch) -> list:
    """Touch every property and record of a decoded batch (v2 or legacy)."""
    for name in ("base_offset", "last_offset", "records_count", "magic", "crc", "compression",
                 "timestamp_type", "base_timestamp", "max_timestamp", "size",
                 "is_transactional", "is_control", "partition_leader_epoch", "producer_id",
                 "producer_epoch", "base_sequence", "delete_horizon"):
        getattr(batch, name)
    records = []
    for rec in batch:
        records.append((rec.offset, _record_tuple(rec)))
    if batch.magic == 2:
        batch.validate_crc()
        if batch.is_control:
            batch.control_record()
    return records


def _rebuild_v2(batch, records: list) -> None:
    """Re-encode a decoded v2 batch with the builder and compare after decoding again."""
    from kafka_proto.records import RecordBatchBuilder, read_batches

    if batch.is_control or not records:
        return
    builder = RecordBatchBuilder(
        compression=int(batch.compression),
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        transactional=batch.is_transactional,
        partition_leader_epoch=batch.partition_leader_epoch,
        timestamp_type=int(batch.timestamp_type),
    )
    for _off, (ts, key, value, headers) in records:
        builder.append(value, key, ts, headers)
    raw = builder.build(batch.base_offset)
    again = list(read_batches(raw, max_decompressed_size=MAX_DECOMPRESSED * 2))
    if len(again) != 1:
        _fail(f"rebuilt batch decodes to {len(again)} batches")
    b2 = again[0]
    got = [(r.offset, _record_tuple(r)) for r in b2]
    want_tuples = [t for _o, t in records]
    if [t for _o, t in got] != want_tuples:
        _fail(f"records differ after re-encoding: {records!r} != {got!r}")
    offsets = [o for o, _t in records]
    if offsets == list(range(batch.base_offset, batch.base_offset + len(offsets))):
        if [o for o, _t in got] != offsets:
            _fail(f"offsets differ after re-encoding: {offsets} != {[o for o, _ in got]}")
    for name in ("compression", "producer_id", "producer_epoch", "base_sequence",
                 "is_transactional", "partition_leader_epoch", "timestamp_type", "base_offset"):
        if getattr(b2, name) != getattr(batch, name):
            _fail(f"{name} differs after re-encoding: {getattr(batch, name)!r} != "
                  f"{getattr(b2, name)!r}")


def check_records(data: bytes) -> None:
    """Record-batch reader (v2 and legacy v0/v1, every codec) over a fetch ``records`` blob.

    Layout: byte 0 = options (bit 0: check CRCs; bit 1: allow a truncated last batch;
    bits 2-3: decompression limit), then the blob. Decoded v2 batches are rebuilt with
    :class:`RecordBatchBuilder` and read again; the two readings must agree.
    """
    from kafka_proto.records import read_batches

    if not data:
        return
    opts = data[0]
    blob = data[1:]
    limit = _DECOMPRESS_LIMITS[(opts >> 2) & 3]
    decoded = []
    try:
        reader = read_batches(blob, check_crc=bool(opts & 1), allow_truncated=bool(opts & 2),
                              max_decompressed_size=limit)
        for batch in reader:
            decoded.append((batch, _walk_batch(batch)))
    except CODEC_ERRORS:
        pass
    # What decoded before any error must re-encode to the same records.
    for batch, records in decoded:
        if batch.magic == 2:
            _rebuild_v2(batch, records)


# --------------------------------------------------------------------------- compression


def check_compression(data: bytes) -> None:
    """``kafka_proto.compression.decompress`` for every codec id.

    Layout: byte 0 = codec id (mod 8, so unknown ids are tried too), byte 1 = output limit
    choice, then the payload. A payload that decompresses is compressed again and must
    decompress to the same bytes.
    """
    from kafka_proto.compression import compress, decompress

    if len(data) < 2:
        return
    codec = data[0] % 8
    limit = _DECOMPRESS_LIMITS[data[1] & 3]
    payload = data[2:]
    try:
        out = decompress(codec, payload, limit)
    except CODEC_ERRORS:
        return
    if len(out) > limit:
        _fail(f"codec {codec}: {len(out)} bytes out, above the limit of {limit}")
    again = decompress(codec, compress(codec, out), max(len(out), 1))
    if bytes(again) != bytes(out):
        _fail(f"codec {codec}: compress/decompress round trip changed {len(out)} bytes")


# --------------------------------------------------------------------------- responses

_API_KEYS: Optional[List[int]] = None


def _api_keys() -> List[int]:
    global _API_KEYS
    if _API_KEYS is None:
        from kafka_proto.messages import API_KEYS

        _API_KEYS = sorted(API_KEYS)
    return _API_KEYS


def select_response(data: bytes) -> Tuple[type, int, bytes]:
    """(response class, version, body) chosen by the first 3 bytes of a responses input:
    int16 API key (taken modulo the known keys when unknown) and the version (mod range)."""
    from kafka_proto.messages import API_KEYS, response_class

    key = int.from_bytes(data[0:2], "big")
    if key not in API_KEYS:
        keys = _api_keys()
        key = keys[key % len(keys)]
    info = API_KEYS[key]
    span = info.max_version - info.min_version + 1
    version = info.min_version + data[2] % span
    return response_class(key), version, data[3:]


def _has_nan(obj) -> bool:
    return "nan" in repr(obj)


def roundtrip_message(cls: type, obj, version: int) -> None:
    """encode(decode(x)) must decode to an equal value and encode to the same bytes."""
    enc = obj.encode(version)
    obj2 = cls.decode(enc, version)
    if obj2 != obj and not _has_nan(obj):
        _fail(f"{cls.__name__} v{version}: value changed by re-encoding")
    enc2 = obj2.encode(version)
    if enc2 != enc:
        _fail(f"{cls.__name__} v{version}: encoding is not stable")


def check_responses(data: bytes) -> None:
    """Every generated response decoder. Layout: int16 API key, uint8 version, body."""
    if len(data) < 3:
        return
    cls, version, body = select_response(data)
    try:
        obj = cls.decode(body, version)
    except CODEC_ERRORS:
        return
    roundtrip_message(cls, obj, version)


# --------------------------------------------------------------------------- framing


def _reference_frames(stream: bytes, max_frame: int):
    """Simple model of the frame parser: (frames, error?, bytes buffered at the end)."""
    frames = []
    pos = 0
    n = len(stream)
    while n - pos >= 4:
        (size,) = struct.unpack_from(">i", stream, pos)
        if size < 0 or size > max_frame:
            return frames, True, None
        if n - pos - 4 < size:
            break
        frames.append(stream[pos + 4:pos + 4 + size])
        pos += 4 + size
    return frames, False, n - pos


def _chunks(stream: bytes, rng: random.Random) -> List[bytes]:
    out = []
    pos = 0
    while pos < len(stream):
        step = rng.choice((1, 2, 3, 4, 5, 7, 16, 100, 4096, 40000, 1 << 20))
        out.append(stream[pos:pos + rng.randint(1, step)])
        pos += len(out[-1])
    return out


def check_framing(data: bytes) -> None:
    """Incremental frame parser: the same stream cut at random chunk boundaries (fed with
    ``feed`` and through ``buffer_for_read``/``commit``) must give the frames of a simple
    reference model, the same error, and the same partial state.

    Layout: byte 0 = max frame size choice, bytes 1-4 = chunking seed, then the stream.
    Each frame is also passed to ``decode_response_header`` (v0 and v1).
    """
    from kafka_proto.errors import InvalidLengthError
    from kafka_proto.framing import FrameParser, decode_response_header

    if len(data) < 5:
        return
    # Up to 1 MiB: large enough for the direct-read path (32 KiB) and for buffer growth
    # (64 KiB doubled as bytes arrive).
    max_frame = (16, 1024, 100_000, 1 << 20)[data[0] & 3]
    rng = random.Random(int.from_bytes(data[1:5], "big"))
    stream = data[5:]
    want, want_error, want_buffered = _reference_frames(stream, max_frame)

    # 1. feed() with random chunks
    parser = FrameParser(max_frame_size=max_frame)
    got: List[bytes] = []
    error = False
    for chunk in _chunks(stream, rng):
        try:
            got.extend(bytes(f) for f in parser.feed(chunk))
        except InvalidLengthError as exc:
            # The frames that call completed before the bad size come with the error.
            got.extend(bytes(f) for f in exc.frames)
            error = True
            break
    _compare_frames("feed", want, want_error, want_buffered, got, error, parser)

    # 2. the recv_into path: buffer_for_read() / commit(), random read sizes
    parser = FrameParser(max_frame_size=max_frame, read_size=16 + rng.randrange(100))
    got = []
    error = False
    pos = 0
    try:
        while pos < len(stream):
            view = parser.buffer_for_read()
            n = min(len(view), len(stream) - pos, rng.randint(1, 70000))
            view[:n] = stream[pos:pos + n]
            del view
            pos += n
            got.extend(bytes(f) for f in parser.commit(n))
    except InvalidLengthError as exc:
        got.extend(bytes(f) for f in exc.frames)
        error = True
    _compare_frames("recv_into", want, want_error, want_buffered, got, error, parser)

    # 3. one feed of the whole stream: same frames when there is no error
    parser = FrameParser(max_frame_size=max_frame)
    try:
        whole = [bytes(f) for f in parser.feed(stream)]
    except InvalidLengthError as exc:
        if not want_error:
            _fail("one feed() raised where the reference model found no error")
        if [bytes(f) for f in exc.frames] != want:
            _fail("one feed(): the frames given with the error differ from the model's")
    else:
        if want_error:
            _fail("one feed() missed an invalid frame size")
        if whole != want:
            _fail("one feed() gives other frames than the reference model")

    for frame in want:
        for hv in (0, 1):
            try:
                cid, body = decode_response_header(frame, 3, 0, header_version=hv)
            except CODEC_ERRORS:
                continue
            if cid != struct.unpack_from(">i", frame, 0)[0]:
                _fail("decode_response_header: wrong correlation id")
            if hv == 0 and bytes(body) != frame[4:]:
                _fail("decode_response_header v0: body is not the rest of the frame")


def _compare_frames(how, want, want_error, want_buffered, got, error, parser) -> None:
    if error != want_error:
        _fail(f"{how}: error={error}, the reference model says {want_error}")
    if error:
        # Every frame before the bad size: returned, or given with the error.
        if got != want:
            _fail(f"{how}: frames before the error differ from the reference model")
        return
    if got != want:
        _fail(f"{how}: {len(got)} frames, the reference model has {len(want)}")
    if parser.buffered != want_buffered:
        _fail(f"{how}: {parser.buffered} bytes buffered, the reference model has "
              f"{want_buffered}")


# --------------------------------------------------------------------------- client

#: Separates the response bodies a client input carries.
SEGMENT_SEP = b"\n--fuzz--\n"


class _FakeSocket:
    """Stands in for the broker: answers each request with the next fuzz segment, framed
    with the request's correlation id (or, in raw mode, hands out the bytes as they are)."""

    def __init__(self, segments: List[bytes], raw: bool, rng: random.Random) -> None:
        self._segments = list(segments)
        self._raw = raw
        self._rng = rng
        self._out = bytearray(b"".join(segments) if raw else b"")
        self.requests = 0

    def setsockopt(self, *args) -> None:
        pass

    def settimeout(self, t) -> None:
        pass

    def close(self) -> None:
        pass

    def sendmsg(self, parts) -> int:
        raw = b"".join(bytes(p) for p in parts)
        self.requests += 1
        if not self._raw and self._segments:
            (cid,) = struct.unpack_from(">i", raw, 8)
            body = self._segments.pop(0)
            self._out += struct.pack(">ii", len(body) + 4, cid) + body
        return len(raw)

    def sendall(self, data) -> None:
        pass

    def recv_into(self, view) -> int:
        if not self._out:
            return 0  # the broker closed the connection
        n = min(len(view), len(self._out), self._rng.randint(1, 1 << 16))
        view[:n] = self._out[:n]
        del self._out[:n]
        return n


def _client_modules():
    import socket

    from kafka_client._net import blocking
    from kafka_client._testing import simple

    return socket, blocking, simple


def check_client(data: bytes) -> None:
    """Client-side response handling: ApiVersions exchange and negotiation, Metadata and the
    fetch loop of ``kafka_client._testing.simple`` (FetchResponse, then every record batch
    of the partition), over a fake socket answering with the input's segments.

    Layout: byte 0 = mode (bit 0: raw stream, frames and correlation ids from the input;
    bit 1: header flexible-version response of Metadata checked), bytes 1-2 = Fetch version
    choice and socket read-size seed, then segments separated by ``SEGMENT_SEP``: the
    ApiVersions body, the Metadata body, then Fetch bodies.
    """
    socket, blocking, simple = _client_modules()
    from kafka_proto.messages import MetadataRequest, MetadataResponse

    if len(data) < 3:
        return
    mode = data[0]
    rng = random.Random(data[2])
    segments = data[3:].split(SEGMENT_SEP)
    fake = _FakeSocket(segments, raw=bool(mode & 1), rng=rng)
    shim = types.SimpleNamespace(
        create_connection=lambda *a, **k: fake, timeout=socket.timeout,
        IPPROTO_TCP=socket.IPPROTO_TCP, TCP_NODELAY=socket.TCP_NODELAY)
    allowed = (KafkaProtocolError, blocking.BrokerConnectionError, simple.BrokerErrorResponse)
    saved = blocking.socket
    blocking.socket = shim
    try:
        try:
            conn = blocking.BlockingConnection("fuzz", 9092, timeout=5.0,
                                               max_frame_size=1 << 22)
        except allowed:
            return
        resp = conn.api_versions_response
        roundtrip_message(type(resp), resp, conn.api_versions_version)
        try:
            md_version = conn.version_for(3)
            md = conn.request(MetadataRequest(topics=None), md_version)
        except allowed:
            md = None
        if md is not None:
            roundtrip_message(MetadataResponse, md, md_version)
            for t in md.topics or ():
                t.name, t.error_code, [p.partition_index for p in t.partitions or ()]
        fetch_hi = min(conn.versions.get(1, 4), 12)
        fetch_version = 4 + data[1] % max(fetch_hi - 3, 1) if fetch_hi >= 4 else None
        if fetch_version is None or conn.closed:
            return
        try:
            result = simple.fetch_all(conn, "t", 0, version=fetch_version, max_requests=8,
                                      check_crc=bool(mode & 2))
        except allowed:
            return
        except RuntimeError as exc:
            if "made no progress" not in str(exc):
                raise
            return
        for batch in result.batches:
            _walk_batch(batch)
    finally:
        blocking.socket = saved


def check_api_versions(data: bytes) -> None:
    """``decode_api_versions_response`` (the KIP-511 fallback to v0) and negotiation.
    Layout: uint8 version, body."""
    from kafka_proto.messages import ApiVersionsResponse
    from kafka_proto.versions import broker_ranges, decode_api_versions_response, negotiate

    if not data:
        return
    version = data[0] % (ApiVersionsResponse.MAX_VERSION + 1)
    try:
        resp = decode_api_versions_response(data[1:], version)
    except CODEC_ERRORS:
        return
    ranges = broker_ranges(resp)
    chosen = negotiate(ranges)
    for key, v in chosen.items():
        lo, hi = ranges[key]
        if not lo <= v <= hi:
            _fail(f"negotiated v{v} for API {key} outside the broker's {lo}-{hi}")


def check_client_all(data: bytes) -> None:
    """The client target: the connection flow, and the ApiVersions helpers on the first
    segment."""
    check_client(data)
    if len(data) > 3:
        first = data[3:].split(SEGMENT_SEP, 1)[0]
        check_api_versions(bytes([data[1]]) + first)


#: Harness name -> check function (names are the corpus folders).
HARNESSES: Dict[str, Callable[[bytes], None]] = {
    "records": check_records,
    "compression": check_compression,
    "responses": check_responses,
    "framing": check_framing,
    "client": check_client_all,
}
