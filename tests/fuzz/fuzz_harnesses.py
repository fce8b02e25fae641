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

import collections
import contextlib
import importlib
import logging
import random
import struct
import sys
import threading
import time
import types
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from kafka_proto.errors import KafkaProtocolError, ProtocolEncodeError

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


def _check_encodes(req, version: int) -> None:
    """A request the client sends must encode at the version it goes out with."""
    try:
        req.encode(version)
    except Exception as exc:  # noqa: BLE001 - any failure here is the finding
        _fail(f"{type(req).__name__} v{version} does not encode: {type(exc).__name__}: {exc}")


@contextlib.contextmanager
def _quiet(*logger_names: str):
    """The client's loggers silenced for one input (their warnings about the hostile
    answers would otherwise come once per input)."""
    loggers = [logging.getLogger(name) for name in logger_names]
    was = [lg.disabled for lg in loggers]
    for lg in loggers:
        lg.disabled = True
    try:
        yield
    finally:
        for lg, w in zip(loggers, was):
            lg.disabled = w


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
    if any(ts < -1 for _off, (ts, _k, _v, _h) in records):
        return  # read as found on the wire; the builder refuses them, as Kafka's does
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
    try:
        enc = obj.encode(version)
    except ProtocolEncodeError:
        # Bad UTF-8 read as U+FFFD (3 bytes each, as Kafka reads it) can take a string
        # past the 32,767 bytes a string may have: not writable again, rightly.
        if "\ufffd" in repr(obj):
            return
        raise
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

    from kafka_client._testing import blocking
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
            _check_metadata_cache(md)
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
            try:  # records decode lazily: a batch whose records do not is rejected here
                _walk_batch(batch)
            except CODEC_ERRORS:
                break
    finally:
        blocking.socket = saved


def _check_metadata_cache(md) -> None:
    """What the Producer and Consumer do with a Metadata answer: the cache
    (``MetadataCache.update``), its queries, and list_topics()' view. None of it may raise;
    the cache must describe the answer."""
    from kafka_client._cluster.metadata import ClusterMetadata, MetadataCache

    cache = MetadataCache()
    cache.want(["t"])
    cache.update(md, 1.0, None)
    for name, info in cache.topics.items():
        if info.partition_count != len(info.leaders) or len(info.epochs) != len(info.leaders):
            _fail(f"cache entry of {name!r} is inconsistent")
        for p in range(info.partition_count + 1):
            cache.leader(name, p)
    cache.due(2.0)
    cache.take_request_topics(2.0)
    view = ClusterMetadata.from_response(md, 0, "fuzz:9092/0")
    str(view), repr(view.topics), repr(view.brokers)


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


# --------------------------------------------------------------------------- consumer

#: Per-batch decompression caps the consumer harness picks from (one option byte); the
#: whole input may decompress to at most ``_CONSUMER_BUDGET`` (the cap shrinks with the
#: number of compressed batches), which also bounds the rows one input yields.
_CONSUMER_LIMITS = (4 * 1024, 64 * 1024, 256 * 1024, 1024 * 1024)
_CONSUMER_BUDGET = 1024 * 1024
#: Row limits of the resumed column decoding (consume_arrow with small max_records).
_RESUME_LIMITS = (1, 2, 7, 100)
#: At most this many partitions of a response get a PartitionState.
_MAX_PARTS = 32
_AUTO_RESET = ("earliest", "latest", "error", "earliest")
_END_CHECK = (None, None, 0, 3)  # _fix_end: none, END just resolved, tail of 3

_consumer_configs: Dict[tuple, object] = {}


class _FakeIO:
    """What the Fetcher asks of the I/O thread; everything is only recorded."""

    def __init__(self) -> None:
        self.ticks: list = []
        self.wakes = 0
        self.calls: list = []

    def add_tick(self, fn) -> None:
        self.ticks.append(fn)

    def remove_tick(self, fn) -> None:
        self.ticks.remove(fn)

    def wake(self) -> None:
        self.wakes += 1

    def call_soon(self, fn, *args) -> None:
        self.calls.append((fn, args))

    def call_later(self, delay, fn, *args) -> None:
        self.calls.append((fn, args))


class _FakeCluster:
    """The parts of ``kafka_client._cluster.cluster.Cluster`` the Fetcher reads."""

    def __init__(self, metadata) -> None:
        self.metadata = metadata
        self.on_metadata: list = []
        self.on_broker_state: list = []
        self.wanted: List[str] = []

    def want_topics(self, topics) -> None:
        self.wanted.extend(topics)

    def ensure_connected(self, node):
        return None  # never reached from _on_fetch


def _consumer_config(read_committed: bool, check_crcs: bool, eof: bool, reset: str):
    key = (read_committed, check_crcs, eof, reset)
    cfg = _consumer_configs.get(key)
    if cfg is None:
        from kafka_client.config import ClientConfig

        cfg = _consumer_configs[key] = ClientConfig.from_dict({
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "check.crcs": check_crcs, "enable.partition.eof": eof,
            "auto.offset.reset": reset}, role="consumer")
    return cfg


class _OverBudget(Exception):
    """A legacy wrapper of the input decompresses beyond the harness' cap."""


def _scan_records(records, limit: int, budget: List[int]):
    """(first base offset, compressed v2 batches) of a records blob, walked as far as it
    reads. Legacy (magic 0/1) wrappers are decompressed when read (each under ``limit``,
    as the capped ``read_batches`` will), so what they hold is taken from ``budget[0]``
    here: an input whose wrappers together expand beyond it raises _OverBudget and is
    skipped."""
    from kafka_proto.records._legacy import read_legacy_entry

    view = memoryview(records).cast("B") if not isinstance(records, bytes) else records
    end = len(view)
    pos = 0
    first = None
    compressed = 0
    while end - pos >= 12:
        (length,) = struct.unpack_from(">i", view, pos + 8)
        if length < 14 or end - pos - 12 < length:
            break
        magic = view[pos + 16]
        if magic == 2:
            if length < 49:
                break
            if first is None:
                first = struct.unpack_from(">q", view, pos)[0]
            if view[pos + 22] & 7:
                compressed += 1
            pos += 12 + length
            continue
        if magic not in (0, 1):
            break
        try:
            batch, nxt = read_legacy_entry(view, pos, end, False, limit)
        except CODEC_ERRORS:  # e.g. above the cap: the Fetcher's reader raises too
            break
        if batch is None or nxt <= pos:
            break
        if first is None:
            first = batch.base_offset
        if batch.compression:
            budget[0] -= sum(26 + len(r.key or b"") + len(r.value or b"") for r in batch)
            if budget[0] < 0:
                raise _OverBudget()
        pos = nxt
    return first, compressed


def _message_row(m) -> tuple:
    ts_type, ts = m._timestamp
    return (m._topic, m._partition, m._offset, _b(m._key), _b(m._value),
            [(k, _b(v)) for k, v in m._headers] if m._headers else None, ts_type, ts)


def _column_rows(cols) -> list:
    from kafka_client.consumer.arrow import to_record_batch

    rb = to_record_batch(cols.finish())
    rb.validate(full=True)
    return [(r["topic"], r["partition"], r["offset"], r["key"], r["value"],
             [(h["key"], h["value"]) for h in r["headers"]] if r["headers"] is not None
             else None, r["timestamp_type"], r["timestamp"]) for r in rb.to_pylist()]


def _expected_rows(part, batches: list, start: int, read_committed: bool,
                   aborted_txns) -> Tuple[list, bool]:
    """Reference model of what the consumer hands out from a chunk: (rows, complete).

    Control batches never; batches ending before ``start`` and records before it never;
    with read_committed, a transactional batch of producer P is dropped when an aborted
    transaction (P, first_offset) is open at it: opened by the first batch of the chunk
    whose last offset reaches first_offset (or a later one), and not yet closed by an ABORT
    control batch of P at or after that batch (Kafka's rule, KIP-98; written here apart from
    the consumer's sequential walk). ``complete`` is False when the model met a record or
    control record that does not decode: the rows are then those before it."""
    import bisect

    last_offsets = [b.last_offset for b in batches]
    opened: Dict[int, List[int]] = {}  # producer id -> indexes where one of its txns opens
    if read_committed:
        for a in aborted_txns or ():
            i = next((j for j, lo in enumerate(last_offsets) if lo >= a.first_offset), None)
            if i is not None:
                opened.setdefault(a.producer_id, []).append(i)
        for v in opened.values():
            v.sort()
    markers: Dict[int, List[int]] = {}   # producer id -> indexes of its control batches
    for i, b in enumerate(batches):
        if b.is_control:
            markers.setdefault(b.producer_id, []).append(i)
    is_abort: Dict[int, bool] = {}

    def aborts(j: int) -> bool:
        if j not in is_abort:
            ctrl = batches[j].control_record()
            is_abort[j] = ctrl is not None and ctrl.type == 0  # ControlRecordType.ABORT
        return is_abort[j]

    rows: list = []
    nxt = start  # the next offset handed out must be at least this (offsets only go up)
    try:
        for i, b in enumerate(batches):
            if b.is_control:
                continue
            if b.is_transactional and b.producer_id in opened:
                opens = opened[b.producer_id]
                k = bisect.bisect_right(opens, i)
                if k:
                    # The latest opening at or before this batch; closed if an ABORT
                    # marker of the producer lies between it and this batch.
                    since = opens[k - 1]
                    ms = markers.get(b.producer_id, [])
                    lo = bisect.bisect_left(ms, since)
                    hi = bisect.bisect_left(ms, i)
                    if not any(aborts(j) for j in ms[lo:hi]):
                        continue
            if b.last_offset < start:
                continue
            for rec in b:
                if rec.offset < nxt:
                    continue
                nxt = rec.offset + 1
                if b.magic >= 2:
                    tt = 2 if int(b.timestamp_type) == 1 else 1
                    ts = rec.timestamp
                else:
                    tt = rec.timestamp_type
                    ts = rec.timestamp
                    tt, ts = (0, -1) if tt < 0 else (2 if tt == 1 else 1, ts)
                rows.append((part.topic, part.partition, rec.offset, _b(rec.key),
                             _b(rec.value),
                             [(k2, _b(v)) for k2, v in rec.headers] if rec.headers else None,
                             tt, ts))
    except CODEC_ERRORS:
        return rows, False
    return rows, True


def _check_chunk(chunk, pd, read_committed: bool, resume_limit: int) -> None:
    from kafka_client.consumer.decode import decode_chunk, decode_columns
    from kafka_client.consumer.fetcher import Chunk
    from kafka_proto.records import ColumnBuilder

    part = chunk.part
    start = chunk.start

    # 1. objects (poll/consume)
    msgs: list = []
    obj_err = None
    try:
        decode_chunk(chunk, msgs)
    except CODEC_ERRORS as exc:
        obj_err = exc
    obj_rows = [_message_row(m) for m in msgs]
    offsets = [r[2] for r in obj_rows]
    if offsets and offsets[0] < start:
        _fail(f"offset {offsets[0]} delivered before the chunk start {start}")
    if any(b <= a for a, b in zip(offsets, offsets[1:])):
        _fail(f"offsets delivered out of order: {offsets[:20]}")
    for m in msgs:
        if m._error is not None or m._topic != part.topic or m._partition != part.partition:
            _fail("a message carries an error or another partition")

    # 2. columns (consume_arrow), all at once
    whole = Chunk(part, chunk.version, chunk.batches, start, chunk.aborted, chunk.nbytes,
                  chunk.count)
    cols = ColumnBuilder(1, 2)
    col_err = None
    try:
        done = decode_columns(whole, cols, 1000000)
        if not done:
            _fail("decode_columns stopped below its limit")
    except CODEC_ERRORS as exc:
        col_err = exc
    col_rows = _column_rows(cols)
    if col_rows != obj_rows or type(obj_err) is not type(col_err):
        _fail(f"objects and columns differ: {len(obj_rows)} rows ({obj_err!r}) vs "
              f"{len(col_rows)} ({col_err!r})")

    # 3. columns in small steps, the chunk resumed each time (consume_arrow(max_records))
    if offsets == sorted(set(offsets)):
        step = Chunk(part, chunk.version, chunk.batches, start, chunk.aborted, chunk.nbytes,
                     chunk.count)
        got: list = []
        step_err = None
        for _ in range(chunk.count + len(chunk.batches) + 2):
            cols = ColumnBuilder(1, 2)
            before = step.start
            try:
                done = decode_columns(step, cols, resume_limit)
            except CODEC_ERRORS as exc:
                step_err = exc
                done = True
            n = len(cols)
            got.extend(_column_rows(cols))
            if done:
                break
            if n == 0 or step.start <= before:
                _fail(f"a resumed chunk made no progress (start {before} -> {step.start})")
        else:
            _fail("a resumed chunk never finished")
        if got != obj_rows or type(step_err) is not type(obj_err):
            _fail(f"resumed columns (limit {resume_limit}) differ: {len(got)} rows "
                  f"({step_err!r}) vs {len(obj_rows)} ({obj_err!r})")

    # 4. the reference model: no control record, nothing aborted, nothing missing
    want, complete = _expected_rows(part, chunk.batches, start, read_committed,
                                    pd.aborted_transactions)
    if obj_rows != want[:len(obj_rows)]:
        _fail("the consumer's rows are not those of the reference model (control or "
              "aborted records, or records missing)")
    if obj_err is None and (not complete or len(want) != len(obj_rows)):
        _fail(f"the consumer decoded {len(obj_rows)} rows, the reference model "
              f"{len(want)} (complete: {complete})")


def check_consumer(data: bytes) -> None:
    """The consumer's fetch path: a FetchResponse through a real ``Fetcher._on_fetch``
    (``kafka_client.consumer.fetcher``), then every Chunk it delivers decoded both ways
    the consumer does (``decode.decode_chunk`` for poll/consume, ``decode_columns`` for
    consume_arrow, all at once and resumed in small steps).

    Layout: byte 0 = Fetch version (4 + b % 14: v4-v12 name topics, v13-v17 give ids);
    byte 1 = flags (bit 0 read_committed, bit 1 check.crcs, bit 2 enable.partition.eof,
    bits 3-4 auto.offset.reset earliest/latest/error, bits 5-6 a pending END/tail check
    (none, none, END, tail 3), bit 7 one more assigned partition the answer leaves out);
    byte 2 = bits 0-1 decompression cap per batch, bits 2-3 where fetching starts (0, the
    first batch's base offset + d, the high watermark + d, |d|), bits 4-5 the row limit of
    the resumed column decoding, bit 6 the answer is to an incremental Fetch of an open
    fetch session (KIP-227: a partition it leaves out has nothing new); byte 3 = d
    (int8); then the FetchResponse body.

    A body that does not decode is rejected (codec error). Otherwise the Fetcher must not
    raise; it gets a PartitionState for each partition of the answer (topics named by the
    answer, or by id from a MetadataCache filled from it) and delivers Chunks and Events.
    Checked: chunks start at the fetch position with batches in increasing order, the
    position never moves backwards (except to a tail, and on errors), the queue counters
    match; an answer with a fetch-session error leaves every partition as it was, to be
    fetched again at once; decoding completes or raises KafkaProtocolError, offsets are at least the
    chunk's start and strictly increasing, objects and columns give the same rows and fail
    at the same record, and the rows are those of an independent reference model (no
    control record, no record of an aborted transaction with read_committed, none
    missing). Decompression is capped by replacing ``kafka_proto.records.read_batches``
    (the Fetcher passes no cap of its own) for the duration of the call; inputs whose
    legacy wrappers together expand beyond the per-input budget are skipped.
    """
    import kafka_proto.records as records_mod
    from kafka_client._cluster.metadata import MetadataCache, TopicInfo
    from kafka_client.consumer.fetch_session import (
        SESSION_ERRORS,
        FetchSession,
        SessionPartition,
    )
    from kafka_client.consumer.fetcher import Chunk, Event, Fetcher, PartitionState
    from kafka_client.errors import KafkaError
    from kafka_proto.messages import FetchResponse

    if len(data) < 4:
        return
    version = 4 + data[0] % 14
    flags = data[1]
    read_committed = bool(flags & 1)
    reset = _AUTO_RESET[(flags >> 3) & 3]
    end_check = _END_CHECK[(flags >> 5) & 3]
    cap = _CONSUMER_LIMITS[data[2] & 3]
    start_mode = (data[2] >> 2) & 3
    resume_limit = _RESUME_LIMITS[(data[2] >> 4) & 3]
    incremental = bool(data[2] & 0x40)
    delta = struct.unpack("b", data[3:4])[0]
    try:
        resp = FetchResponse.decode(data[4:], version)
    except CODEC_ERRORS:
        return

    # Metadata as the cluster would know it: names (v4-v12) or ids (v13+) of the answer.
    md = MetadataCache()
    now = 1000.0
    names_of: Dict[int, str] = {}
    for t in resp.responses:
        if version >= 13:
            tid = t.topic_id
            if tid is None or tid.int == 0:
                continue
            name = f"topic-{tid}"
        else:
            tid, name = None, t.topic
            if not name:
                continue
        if name not in md.topics:
            md.topics[name] = TopicInfo(name, 0, [1], [-1], [0], now, topic_id=tid)
        names_of[id(t)] = name

    # What the compressed batches of the whole answer may take, and where fetching starts.
    compressed = 0
    budget = [_CONSUMER_BUDGET]
    wanted: Dict[tuple, int] = {}
    for t in resp.responses:
        name = names_of.get(id(t))
        for pd in t.partitions:
            try:
                first, n = _scan_records(pd.records, cap, budget) if pd.records \
                    else (None, 0)
            except _OverBudget:
                return
            compressed += n
            if name is None or len(wanted) >= _MAX_PARTS or (name, pd.partition_index) \
                    in wanted:
                continue
            if start_mode == 0:
                pos = 0
            elif start_mode == 1:
                pos = (first or 0) + delta
            elif start_mode == 2:
                pos = pd.high_watermark + delta
            else:
                pos = abs(delta)
            wanted[(name, pd.partition_index)] = min(max(pos, 0), 1 << 62)
    if flags & 0x80:
        wanted[("not-in-the-answer", 0)] = abs(delta)
    cap = min(cap, max(4096, budget[0] // max(compressed, 1)))

    config = _consumer_config(read_committed, bool(flags & 2), bool(flags & 4), reset)
    io = _FakeIO()
    cluster = _FakeCluster(md)
    delivered: list = []
    fetcher = Fetcher(config, cluster, io, delivered.append)
    sent = []
    for (name, p), pos in wanted.items():
        part = PartitionState(name, p)
        part.seek(pos)
        part.end_check = end_check
        part.fetching = part.version
        fetcher.parts[part.key] = part
        sent.append((part, part.version, pos))

    real_read_batches = records_mod.read_batches

    def capped_read_batches(buffer, check_crc=True, **kw):
        kw["max_decompressed_size"] = min(kw.get("max_decompressed_size") or cap, cap)
        return real_read_batches(buffer, check_crc, **kw)

    records_mod.read_batches = capped_read_batches
    fetch_log = logging.getLogger("kafka_client.consumer.fetcher")
    log_was = fetch_log.disabled
    fetch_log.disabled = True  # its warnings about failed fetches, once per input
    session = plan = None
    if incremental:
        # A session already open (id 1, one answer in): what it holds is what was asked.
        session = FetchSession()
        held = [SessionPartition(name, None, p, pos, -1, 1 << 20)
                for (name, p), pos in wanted.items()]
        session.answered(session.plan(held, version), 1, 0)
        plan = session.plan(held, version)
        incremental = plan.incremental        # not before Fetch v7
    try:
        fetcher._on_fetch(1, sent, resp, None, session=session, plan=plan)  # must not raise
        session_error = incremental and resp.error_code in SESSION_ERRORS
        if session_error and (delivered or session.next_epoch != 0 or any(
                part.backoff_until for part, _v, _p in sent)):
            _fail("a fetch-session error delivered something, kept the session or backed "
                  "off")

        # -- what the Fetcher did
        answers = {}
        for t in resp.responses:
            for pd in t.partitions:
                answers[(names_of.get(id(t)), pd.partition_index)] = pd
        chunks: Dict[tuple, list] = {}
        for item in delivered:
            if type(item) is Chunk:
                chunks.setdefault(item.part.key, []).append(item)
            elif type(item) is not Event:
                _fail(f"the fetcher delivered a {type(item).__name__}")
            elif item.message.error() is None:
                _fail("an Event without an error")
            elif item.message.error().code() == KafkaError._PARTITION_EOF \
                    and not config["enable.partition.eof"]:
                _fail("_PARTITION_EOF without enable.partition.eof")
        for part, _version, pos in sent:
            if part.fetching >= 0:
                _fail(f"{part.key} still marked as fetching")
            pd = answers.get(part.key)
            mine = chunks.get(part.key, [])
            if pd is None or resp.error_code:
                # Left out of an incremental answer: the position may only move to a tail
                # being checked (nothing after it came back).
                moved = part.fetch_pos != pos and not (
                    incremental and pd is None and not resp.error_code and end_check
                    and part.fetch_pos == max(0, pos - end_check))
                if mine or moved:
                    _fail(f"{part.key}: no answer, but data or a new position")
                continue
            if pd.error_code:
                if mine:
                    _fail(f"{part.key}: error {pd.error_code} with data")
                continue
            if len(mine) > 1:
                _fail(f"{part.key}: {len(mine)} chunks from one answer")
            if part.queued_bytes != sum(c.nbytes for c in mine) or \
                    part.queued_msgs != sum(c.count for c in mine):
                _fail(f"{part.key}: queue counters do not match the chunks")
            if end_check is None or end_check == 0:
                if part.fetch_pos < pos:
                    _fail(f"{part.key}: fetch position moved back from {pos} to "
                          f"{part.fetch_pos}")
            elif part.fetch_pos < 0:
                _fail(f"{part.key}: negative position {part.fetch_pos} after a tail check")
            for chunk in mine:
                lasts = [b.last_offset for b in chunk.batches]
                if chunk.start != pos or not lasts or lasts[0] < pos or \
                        any(b <= a for a, b in zip(lasts, lasts[1:])):
                    _fail(f"{part.key}: chunk from {chunk.start} (position {pos}) with "
                          f"batch ends {lasts[:10]}")
                if part.fetch_pos != lasts[-1] + 1:
                    _fail(f"{part.key}: position {part.fetch_pos} after a chunk ending at "
                          f"{lasts[-1]}")
                if chunk.count != sum(b.records_count for b in chunk.batches) or \
                        chunk.nbytes != sum(b.size for b in chunk.batches):
                    _fail(f"{part.key}: chunk counters do not match its batches")
                want_aborted = sorted((a.first_offset, a.producer_id)
                                      for a in pd.aborted_transactions or ()) \
                    if read_committed else []
                if (chunk.aborted or []) != want_aborted:
                    _fail(f"{part.key}: aborted list {chunk.aborted} != {want_aborted}")
                _check_chunk(chunk, pd, read_committed, resume_limit)
    finally:
        records_mod.read_batches = real_read_batches
        fetch_log.disabled = log_was
    fetcher.close()


# --------------------------------------------------------------------------- listoffsets

#: Topic ``t``'s partitions the harness resolves: from the beginning, from the end, and
#: three from the end (a tail, OFFSET_TAIL(3)).
_LIST_OFFSETS_RESETS = ("beginning", "end", "tail")


class _ListOffsetsConn:
    """The leader's connection: each ListOffsets request encoded at its version (with the
    isolation level its ``for_version`` sets) and kept until the harness answers it."""

    def __init__(self, version: int) -> None:
        self.versions = {2: version}
        self.sent: list = []     # (request, callback)

    def send(self, req, callback, *, timeout=None, fail_unreachable=False,
             for_version=None) -> None:
        version = self.versions[2]
        if for_version is not None:
            for_version(req, version)
        _check_encodes(req, version)
        self.sent.append((req, callback))


class _ListOffsetsCluster(_FakeCluster):
    def __init__(self, metadata, conn) -> None:
        super().__init__(metadata)
        self.conn = conn

    def ensure_connected(self, node):
        return self.conn


def check_listoffsets(data: bytes) -> None:
    """The consumer's own ListOffsets handling: a real ``Fetcher``
    (``kafka_client.consumer.fetcher``) resolving the logical positions of topic ``t``'s
    three partitions (OFFSET_BEGINNING, OFFSET_END, OFFSET_TAIL(3)) through
    ``_resolve_logical`` and ``list_offsets``, each lookup answered by the input, again
    while partitions are left unresolved (as the fetcher's tick asks again after its
    backoff).

    Layout: byte 0 the ListOffsets version (modulo its range), byte 1 flags (bit 0
    read_committed); then ListOffsets answer bodies separated by ``SEGMENT_SEP``, one per
    lookup (an undecodable one is a lost connection).

    Checked: nothing raises; every request encodes at its version and asks each
    unresolved partition once, with EARLIEST or LATEST as its reset says; a partition is
    either resolved (no reset left, position = the answer's offset, at least 0, and the
    same for the application; a tail keeps its END check of 3 for the first fetch) or
    still waiting with its reset, not resolving; errors handed to the application are
    KafkaErrors of the partitions asked.
    """
    from kafka_client._cluster.metadata import MetadataCache, TopicInfo
    from kafka_client.consumer.fetcher import OFFSET_TAIL_BASE, Event, Fetcher, PartitionState
    from kafka_client.errors import KafkaError
    from kafka_client.types import OFFSET_BEGINNING, OFFSET_END
    from kafka_proto.enums import ListOffsetsTimestamp
    from kafka_proto.messages import API_KEYS, ListOffsetsResponse

    if len(data) < 2:
        return
    info = API_KEYS[2]
    version = info.min_version + data[0] % (info.max_version - info.min_version + 1)
    read_committed = bool(data[1] & 1)
    bodies = data[2:].split(SEGMENT_SEP)

    md = MetadataCache()
    md.topics["t"] = TopicInfo("t", 0, [1] * 3, [0] * 3, [0] * 3, 1000.0)
    md.brokers[1] = ("fuzz", 9092, None)
    conn = _ListOffsetsConn(version)
    cluster = _ListOffsetsCluster(md, conn)
    delivered: list = []
    config = _consumer_config(read_committed, False, False, "earliest")
    fetcher = Fetcher(config, cluster, _FakeIO(), delivered.append)
    parts = []
    for p, reset in enumerate(_LIST_OFFSETS_RESETS):
        part = PartitionState("t", p)
        part.seek({"beginning": OFFSET_BEGINNING, "end": OFFSET_END,
                   "tail": OFFSET_TAIL_BASE - 3}[reset])
        parts.append(part)
    with _quiet("kafka_client.consumer.fetcher"):
        for body in bodies:
            waiting = [part for part in parts if part.reset is not None]
            if not waiting:
                break
            for part in waiting:
                part.backoff_until = 0.0
            fetcher._resolve_logical(waiting)
            if len(conn.sent) != 1:
                _fail(f"{len(conn.sent)} ListOffsets requests for one leader")
            req, callback = conn.sent.pop()
            asked = sorted((t.name, p.partition_index, p.timestamp)
                           for t in req.topics for p in t.partitions)
            want = sorted(("t", part.partition, ListOffsetsTimestamp.EARLIEST
                           if part.reset == OFFSET_BEGINNING else ListOffsetsTimestamp.LATEST)
                          for part in waiting)
            if asked != want:
                _fail(f"asked {asked}, the partitions waiting need {want}")
            was = {part.key: part.reset for part in waiting}
            try:
                resp = ListOffsetsResponse.decode(body, version)
            except CODEC_ERRORS:
                callback(None, KafkaError(KafkaError._TRANSPORT, "fuzz: undecodable answer"))
            else:
                callback(resp, None)
            for part in parts:
                if part.resolving:
                    _fail(f"{part.key} still resolving after its answer")
                if part.reset is None:
                    if part.fetch_pos < 0 or part.app_pos != part.fetch_pos:
                        _fail(f"{part.key} resolved to {part.fetch_pos} (application "
                              f"{part.app_pos})")
                    if part.key in was and was[part.key] == OFFSET_TAIL_BASE - 3 and \
                            part.end_check != 3:
                        _fail(f"{part.key}: tail resolved without its END check")
        for item in delivered:
            if type(item) is not Event or not isinstance(item.message.error(), KafkaError):
                _fail(f"the fetcher delivered {item!r}")
    fetcher.close()


# --------------------------------------------------------------------------- group

#: The APIs the consumer group speaks with its coordinator, in the order of a session.
_GROUP_KEYS = (10, 11, 14, 12, 8, 9, 13)  # FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
#                                           OffsetCommit, OffsetFetch, LeaveGroup
#: The same with KIP-848's protocol: FindCoordinator, ConsumerGroupHeartbeat, OffsetCommit,
#: OffsetFetch; LeaveGroup's place makes the member leave (a heartbeat with epoch -1/-2).
_GROUP_KEYS_KIP848 = (10, 68, 8, 9, 13)
_GROUP_TOPICS = {"t0": 3, "t1": 2}
#: The topics' ids (KIP-848 assignments name topics by id); fuzzed ids mostly match none.
_GROUP_TOPIC_IDS = {"t0": uuid.UUID(int=1), "t1": uuid.UUID(int=2)}
_group_configs: Dict[tuple, object] = {}


def _group_config(cooperative: bool, static: bool, pattern: bool, kip848: bool = False):
    key = (cooperative, static, pattern, kip848)
    cfg = _group_configs.get(key)
    if cfg is None:
        from kafka_client.config import ClientConfig

        conf = {"group.id": "fuzz-group", "enable.auto.commit": False}
        if kip848:
            conf["group.protocol"] = "consumer"
        else:
            conf["partition.assignment.strategy"] = ("cooperative-sticky" if cooperative
                                                     else "range,roundrobin")
        if static:
            conf["group.instance.id"] = "fuzz-instance"
        cfg = _group_configs[key] = ClientConfig.from_dict(conf, role="consumer")
    return cfg


class _GroupConn:
    """The coordinator connection: every request is encoded at the version it would go
    out with (a request the group cannot encode is a finding), then kept with its
    callback until the harness answers it."""

    ready = True

    def __init__(self, versions: Dict[int, int]) -> None:
        self.versions = versions
        self.pending: List[tuple] = []  # (api key, version, callback)

    def send(self, req, callback=None, *, version=None, expect_response=True, timeout=None):
        key = req.API_KEY
        v = self.versions.get(key) if version is None else version
        if v is None:
            _fail(f"{type(req).__name__} sent without a negotiated version")
        _check_encodes(req, v)
        if callback is not None:
            self.pending.append((key, v, callback))


class _GroupCluster:
    """What ``GroupCoordinator`` asks of the cluster: metadata, the connections."""

    def __init__(self, metadata, conn) -> None:
        self.metadata = metadata
        self.conn = conn
        self.on_metadata: list = []
        self.on_broker_state: list = []
        self.settings = types.SimpleNamespace(request_timeout=30.0)

    def want_topics(self, topics) -> None:
        pass

    def ready_connection(self, now):
        return self.conn

    def coordinator_connection(self, node):
        return self.conn

    def ensure_connected(self, node):
        return self.conn        # the broker's own connection: one fake serves both


class _GroupMember:
    """The consumer side of the rebalance callbacks (``GroupMember``)."""

    consumer = None

    def __init__(self) -> None:
        self.parts: set = set()
        self.changes = 0

    def assigned(self):
        return set(self.parts)

    def assignment_changes(self) -> int:
        return self.changes

    def stored_offsets(self, leaving=False):
        return []

    def hold(self, partitions) -> None:
        """A revocation begins: nothing to hold back here (no messages)."""

    def assign(self, partitions) -> None:
        self.changes += 1
        self.parts = {(tp.topic, tp.partition) for tp in partitions}

    def unassign(self) -> None:
        self.changes += 1
        self.parts = set()

    def incremental_assign(self, partitions) -> None:
        self.changes += 1
        new = {(tp.topic, tp.partition) for tp in partitions}
        if new & self.parts:
            _fail(f"incremental_assign of partitions already assigned: {new & self.parts}")
        self.parts |= new

    def incremental_unassign(self, partitions) -> None:
        self.changes += 1
        gone = {(tp.topic, tp.partition) for tp in partitions}
        if gone - self.parts:
            _fail(f"incremental_unassign of partitions not assigned: {gone - self.parts}")
        self.parts -= gone


def check_group(data: bytes) -> None:
    """The consumer group's handling of its coordinator's answers: a real
    ``GroupCoordinator`` (``kafka_client.consumer.group``) on fake connection, cluster and
    I/O thread, subscribed to two topics, fed a session of answers.

    Layout: byte 0 = flags (bit 0 cooperative-sticky, else range; bit 1 a static member,
    group.instance.id; bit 2 a pattern subscription besides the names; bit 3 KIP-848's
    protocol, ``ConsumerProtocolGroup``, instead of the classic one); then answers
    separated by ``SEGMENT_SEP``, each int16 API key (mapped onto the group's APIs:
    FindCoordinator, JoinGroup, SyncGroup, Heartbeat, OffsetCommit, OffsetFetch,
    LeaveGroup; with KIP-848 FindCoordinator, ConsumerGroupHeartbeat, OffsetCommit,
    OffsetFetch, and LeaveGroup's place for a leave), uint8 version (modulo the API's range; the first one of each API is the
    version the connection negotiated), then the body.

    Each answer goes to the oldest request of its API in flight; when there is none, the
    harness first makes the group send one (coordinator lost, a rejoin, a heartbeat due, a
    commit, a committed-offsets lookup, leaving). A body that does not decode at the
    request's version reaches the callback as a lost connection. Between answers the
    harness runs the group's tick, the I/O thread's queued calls and the application's
    rebalance events (assign/revoke, on the fake member). Checked: nothing raises; every
    request encodes at its version; the state is one of the protocol's; the application
    is never owed a negative number of rebalance events; the member's incremental
    (cooperative, KIP-848) assignments never add what it has or remove what it has not;
    in a stable generation the partitions owned are of the topics joined with (KIP-848:
    partitions that exist, of the subscribed topics); errors handed to the application
    are KafkaErrors.
    """
    from kafka_client._cluster.metadata import MetadataCache, TopicInfo
    from kafka_client.consumer import consumer_protocol
    from kafka_client.consumer import group as group_mod
    from kafka_client.errors import KafkaError
    from kafka_client.types import TopicPartition
    from kafka_proto.messages import API_KEYS, response_class

    if len(data) < 1:
        return
    flags = data[0]
    kip848 = bool(flags & 8)
    keys = _GROUP_KEYS_KIP848 if kip848 else _GROUP_KEYS
    answers = []
    versions: Dict[int, int] = {}
    for seg in data[1:].split(SEGMENT_SEP):
        if len(seg) < 3:
            continue
        key = int.from_bytes(seg[0:2], "big")
        if key not in keys:
            key = keys[key % len(keys)]
        info = API_KEYS[key]
        version = info.min_version + seg[2] % (info.max_version - info.min_version + 1)
        versions.setdefault(key, version)
        answers.append((key, seg[3:]))
    for key in keys:
        versions.setdefault(key, API_KEYS[key].max_version)

    md = MetadataCache()
    now = 1000.0
    for name, count in _GROUP_TOPICS.items():
        md.topics[name] = TopicInfo(name, 0, [1] * count, [-1] * count, [0] * count, now,
                                    _GROUP_TOPIC_IDS[name])
    md.updates = 1
    conn = _GroupConn(versions)
    cluster = _GroupCluster(md, conn)
    io = _FakeIO()
    errors: list = []
    offsets = types.SimpleNamespace(read_committed=False, stored_offsets=lambda: [],
                                    set_committed=lambda committed: None,
                                    assigned_keys=set)
    config = _group_config(bool(flags & 1), bool(flags & 2), bool(flags & 4), kip848)
    member = _GroupMember()
    membership = consumer_protocol.ConsumerProtocolGroup if kip848 \
        else group_mod.GroupCoordinator
    states = (group_mod.UNJOINED, group_mod.JOINING, group_mod.STABLE) if kip848 else (
        group_mod.UNJOINED, group_mod.WAIT_REVOKE, group_mod.JOINING, group_mod.SYNCING,
        group_mod.STABLE)
    with _quiet("kafka_client.consumer.group"):
        gc = membership(config, cluster, io, offsets, lambda: None, errors.append)
        gc.subscribe(sorted(_GROUP_TOPICS) + (["^t.*"] if flags & 4 else []), None, None,
                     None)

        def settle() -> None:
            """The I/O thread's queued calls, its tick, the application's events."""
            for _round in range(50):
                busy = False
                calls, io.calls = io.calls, []
                for fn, args in calls[:200]:
                    fn(*args)
                    busy = True
                gc.tick(time.monotonic())
                if gc.app_events:
                    gc.serve(member)
                    busy = True
                if not busy and not io.calls:
                    return

        def check() -> None:
            if gc.state not in states:
                _fail(f"state {gc.state!r}")
            if gc._app_pending < 0:
                _fail(f"{gc._app_pending} rebalance events owed to the application")
            if kip848:
                if any(t not in _GROUP_TOPICS or not 0 <= p < _GROUP_TOPICS[t]
                       for t, p in gc.owned):
                    _fail(f"owns {sorted(gc.owned)}, not partitions of {_GROUP_TOPICS}")
            elif gc.state == group_mod.STABLE and \
                    any(t not in gc.joined_topics for t, _p in gc.owned):
                _fail(f"owns {sorted(gc.owned)} after joining with {gc.joined_topics}")
            for e in errors:
                if not isinstance(e, KafkaError):
                    _fail(f"the application was handed {e!r}")

        settle()
        for key, body in answers:
            if not any(k == key for k, _v, _cb in conn.pending):
                # Make the group send a request of this API, as it would in some session.
                if key == 10:
                    gc._coordinator_lost("fuzz")
                    gc._find_after = 0.0
                elif key == 11:
                    gc._rejoin_after = 0.0
                    gc._request_rejoin("fuzz")
                elif key == 12:
                    gc._next_heartbeat = 0.0
                elif key == 68:
                    gc._next_heartbeat = gc._rejoin_after = 0.0
                    if gc.patterns is None:   # stopped by an error: subscribe again
                        gc.subscribe(sorted(_GROUP_TOPICS), None, None, None)
                elif key == 8:
                    gc.commit([TopicPartition("t0", 0, 5), TopicPartition("t1", 1, 7)],
                              asynchronous=True)
                elif key == 9:
                    io.call_soon(gc._offset_fetch, [("t0", 0), ("t1", 1)],
                                 lambda result, err=None: None, time.monotonic() + 30)
                elif key == 13:
                    gc._leave("fuzz")
                settle()
            if kip848 and key == 13:
                key = 68                      # the leave is a heartbeat
            pending = next((i for i, (k, _v, _cb) in enumerate(conn.pending) if k == key),
                           None)
            if pending is None:
                continue
            _k, version, callback = conn.pending.pop(pending)
            try:
                resp = response_class(key).decode(body, version)
            except CODEC_ERRORS:
                callback(None, KafkaError(KafkaError._TRANSPORT, "fuzz: undecodable answer"))
            else:
                callback(resp, None)
            settle()
            check()


# --------------------------------------------------------------------------- producer

#: The APIs the producer's sender speaks: Produce and InitProducerId.
_PRODUCER_KEYS = (0, 22)
_PRODUCER_PARTITIONS = 3
_PRODUCER_MESSAGES = 4            # per partition, two per batch
_producer_configs: Dict[tuple, object] = {}


def _producer_config(idempotent: bool, acks_all: bool, gapless: bool):
    key = (idempotent, acks_all, gapless)
    cfg = _producer_configs.get(key)
    if cfg is None:
        from kafka_client.config import ClientConfig

        conf = {"bootstrap.servers": "fuzz:1", "linger.ms": 0, "batch.num.messages": 2,
                "retry.backoff.ms": 1, "retry.backoff.max.ms": 1, "retries": 5,
                "message.timeout.ms": 600000, "enable.idempotence": idempotent}
        if not idempotent:
            conf["acks"] = "all" if acks_all else 1
        elif gapless:
            conf["enable.gapless.guarantee"] = True
        cfg = _producer_configs[key] = ClientConfig.from_dict(conf, role="producer")
    return cfg


class _ProducerConn:
    """A broker connection of the sender: every request is encoded at its version (a
    request that cannot be encoded is a finding) and kept until the harness answers it."""

    state = "READY"
    next_attempt = 0.0
    muted_until = 0.0
    ready = True

    def __init__(self, versions: Dict[int, int]) -> None:
        self.node_id = 1
        self.host, self.port = "fuzz", 1
        self.versions = versions
        self.pending: List[tuple] = []   # (api key, version, request, callback)

    def version_for(self, key):
        return self.versions.get(key)

    def can_send(self) -> bool:
        return len(self.pending) < 5

    def send(self, req, callback, *, version=None, expect_response=True, timeout=None):
        key = req.API_KEY
        v = self.versions[key] if version is None else version
        _check_encodes(req, v)
        self.pending.append((key, v, req, callback))


class _ProducerCluster:
    def __init__(self, conn, metadata) -> None:
        self.conn = conn
        self.metadata = metadata
        self.on_metadata: list = []
        self.on_broker_state: list = []
        self.errors: list = []

    def ensure_connected(self, node):
        return self.conn if node == 1 else None

    def _ready_conn(self):
        return self.conn

    def _kick_connect(self, now) -> None:
        pass

    def report_error(self, err) -> None:
        self.errors.append(err)


def _produce_success(req, base: Dict[tuple, int]):
    """A ProduceResponse accepting every partition of ``req`` at the next offsets."""
    from kafka_proto.messages import ProduceResponse

    topics = []
    for td in req.topic_data:
        parts = []
        for pd in td.partition_data:
            key = (td.name, pd.index)
            parts.append(ProduceResponse.PartitionProduceResponse(
                index=pd.index, error_code=0, base_offset=base.get(key, 0)))
            base[key] = base.get(key, 0) + 100
        topics.append(ProduceResponse.TopicProduceResponse(name=td.name,
                                                           partition_responses=parts))
    return ProduceResponse(responses=topics)


def check_producer(data: bytes) -> None:
    """The producer's sender (``kafka_client.producer.sender``) and accumulator fed a
    broker's answers: 12 messages to 3 partitions (two per batch), sent by a real
    ``Sender`` over a fake connection, each Produce (and InitProducerId) request answered
    by the input, then every request still open answered with success until nothing is
    left.

    Layout: byte 0 = flags (bit 0 idempotence, bit 1 acks=all for the plain producer, bit
    2 enable.gapless.guarantee, bits 3-4 how far the clock jumps between answers: none,
    2 ms, 1 s, 700 s, past message.timeout.ms); then answers separated by ``SEGMENT_SEP``,
    each int16 API key (mapped onto Produce or InitProducerId), uint8 version (modulo the
    API's range; the first one of each API is the negotiated version), then the body. Each
    answer goes to the oldest request of its API in flight (none: the answer is dropped);
    a body that does not decode at the request's version reaches the callback as a lost
    connection.

    Checked: nothing raises; every request encodes at its version; no partition has a
    negative number of batches in flight; in the end nothing is in flight or queued, and
    every message has exactly one delivery report (no batch reported twice, none left
    without one); a batch reported delivered (PERSISTED) was sent; once a fatal error is
    latched nothing more is delivered.
    """
    from kafka_client._cluster.metadata import MetadataCache, TopicInfo
    from kafka_client.producer.accumulator import Accumulator
    from kafka_client.producer.idempotence import Idempotence
    from kafka_client.producer.sender import PERSISTED, Sender
    from kafka_client.errors import KafkaError
    from kafka_proto.messages import API_KEYS, InitProducerIdResponse, response_class

    if len(data) < 1:
        return
    flags = data[0]
    jump = (0.0, 0.002, 1.0, 700.0)[(flags >> 3) & 3]
    answers = []
    versions: Dict[int, int] = {}
    for seg in data[1:].split(SEGMENT_SEP):
        if len(seg) < 3:
            continue
        key = _PRODUCER_KEYS[int.from_bytes(seg[0:2], "big") % len(_PRODUCER_KEYS)]
        info = API_KEYS[key]
        low = info.min_version   # Produce v0-2 too: legacy message sets
        version = low + seg[2] % (info.max_version - low + 1)
        versions.setdefault(key, version)
        answers.append((key, seg[3:]))
    for key in _PRODUCER_KEYS:
        versions.setdefault(key, API_KEYS[key].max_version)

    config = _producer_config(bool(flags & 1), bool(flags & 2), bool(flags & 4))
    acc = Accumulator(config, lambda deadline: None, lambda name: None)
    md = MetadataCache()
    now = time.monotonic()
    info = TopicInfo("t", 0, [1] * _PRODUCER_PARTITIONS, [-1] * _PRODUCER_PARTITIONS,
                     [0] * _PRODUCER_PARTITIONS, now)
    md.topics["t"] = info
    acc._new_topic("t")
    acc.apply_metadata({"t": info}, now)
    conn = _ProducerConn(versions)
    cluster = _ProducerCluster(conn, md)
    reports: list = []
    sender = Sender(config, acc, cluster, Idempotence(config), reports.append)
    for p in range(_PRODUCER_PARTITIONS):
        for i in range(_PRODUCER_MESSAGES):
            acc.produce("t", b"m%d-%d" % (p, i), partition=p)
    produced = _PRODUCER_PARTITIONS * _PRODUCER_MESSAGES
    clock = [now]
    base: Dict[tuple, int] = {}

    def tick():
        # The sender also reads the real clock (answers, batch creation): never behind it.
        clock[0] = max(clock[0], time.monotonic())
        nxt = sender.tick(clock[0])
        for p in acc.topics["t"].parts:
            if p.in_flight < 0:
                _fail(f"partition {p.index}: {p.in_flight} batches in flight")
        return nxt

    def answer(index: int, resp, err) -> None:
        _key, _v, _req, callback = conn.pending.pop(index)
        callback(resp, err)

    def fatal_latched() -> int:
        return len(reports) if sender.idem.fatal is not None else -1

    with _quiet("kafka_client.producer.sender", "kafka_client.producer.idempotence"):
        tick()
        fatal_at = -1
        for key, body in answers:
            index = next((i for i, (k, _v, _r, _cb) in enumerate(conn.pending) if k == key),
                         None)
            if index is not None:
                version = conn.pending[index][1]
                try:
                    resp = response_class(key).decode(body, version)
                except CODEC_ERRORS:
                    answer(index, None, KafkaError(KafkaError._TRANSPORT, "fuzz: undecodable"))
                else:
                    answer(index, resp, None)
            if fatal_at < 0:
                fatal_at = fatal_latched()
            clock[0] += jump
            tick()
        # Then a well-behaved broker: every open request answered with success, the
        # clock moved to whatever the sender waits for (a retry, a producer id), until it
        # has nothing left to do.
        for _round in range(300):
            if fatal_at < 0:
                fatal_at = fatal_latched()
            if not conn.pending:
                nxt = tick()
                if conn.pending:
                    continue
                if nxt is None or nxt > clock[0] + 3600 or \
                        sum(r.batch.count if r.batch is not None else len(r.messages or ())
                            for r in reports) >= produced:
                    break
                clock[0] = max(nxt, clock[0] + 0.001)
                continue
            key, _v, req, _cb = conn.pending[0]
            if key == 22:
                answer(0, InitProducerIdResponse(error_code=0, producer_id=7000,
                                                 producer_epoch=sender.idem.epoch + 1), None)
            else:
                answer(0, _produce_success(req, base), None)
            tick()

        # -- what the producer did
        if conn.pending or sender.inflight:
            _fail(f"{len(conn.pending)} requests still open after the broker answered all")
        queued = sum(len(p.ready) + (p.open is not None and p.open.count > 0)
                     for p in acc.topics["t"].parts)
        if queued and sender.idem.fatal is None:
            _fail(f"{queued} batches still queued at the end")
        seen = set()
        count = 0
        for r in reports:
            if r.batch is None:
                count += len(r.messages or ())
                continue
            if id(r.batch) in seen:
                _fail(f"{r.batch} reported twice")
            seen.add(id(r.batch))
            count += r.batch.count
            if r.status == PERSISTED and not r.batch.sent:
                _fail(f"{r.batch} reported persisted but never sent")
        if count != produced:
            _fail(f"{count} of {produced} messages reported")
        if fatal_at >= 0 and any(r.error is None for r in reports[fatal_at:]):
            _fail("a message reported delivered after the fatal error")


# --------------------------------------------------------------------------- transactions

#: The APIs of the transactional producer: FindCoordinator (transactional id and group),
#: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, Produce.
_TXN_KEYS = (10, 22, 24, 25, 26, 28, 0)
_TXN_PARTITIONS = 2
#: Messages per transaction (flags bits 5-6), over the two partitions.
_TXN_MESSAGES = (0, 1, 3, 6)
#: The timeout of a "long" call: every wait for an answer the harness serves, so a call
#: that waits with nothing left to answer is reported at once (below), not after it.
_TXN_LONG_TIMEOUT = 30.0
#: Tries of a call that keeps returning a retriable error (the application calls again).
_TXN_TRIES = 12
#: Fake seconds the I/O side may run through while one call waits (then: stuck).
_TXN_FAKE_HORIZON = 3600.0
_TXN_GROUP = types.SimpleNamespace(group_id="fuzz-group", generation_id=3, member_id="m-1",
                                   group_instance_id=None)
_txn_configs: Dict[bool, object] = {}


def _txn_config():
    cfg = _txn_configs.get(True)
    if cfg is None:
        from kafka_client.config import ClientConfig

        cfg = _txn_configs[True] = ClientConfig.from_dict(
            {"bootstrap.servers": "fuzz:1", "linger.ms": 0, "batch.num.messages": 2,
             "retry.backoff.ms": 1, "retry.backoff.max.ms": 4,
             "transactional.id": "fuzz-txn"}, role="producer")
    return cfg


class _TxnTimer:
    __slots__ = ("when", "fn", "args", "cancelled")

    def __init__(self, when: float, fn, args) -> None:
        self.when, self.fn, self.args = when, fn, args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _TxnIO:
    """The producer's I/O thread, played by the harness: calls queued by either thread,
    timers run on the harness' clock."""

    def __init__(self) -> None:
        self.soon: "collections.deque" = collections.deque()
        self.timers: List[_TxnTimer] = []

    def call_soon(self, fn, *args) -> None:
        self.soon.append((fn, args))

    def call_at(self, when: float, fn, *args) -> _TxnTimer:
        timer = _TxnTimer(when, fn, args)
        self.timers.append(timer)
        return timer

    def call_later(self, delay: float, fn, *args) -> _TxnTimer:
        return self.call_at(time.monotonic() + delay, fn, *args)

    def wake(self) -> None:
        pass


class _TxnConn(_ProducerConn):
    """The one broker (node 1), coordinator of everything: requests encoded at their
    version and kept until the harness answers them."""

    connect_count = 1
    last_error = None

    def can_send(self) -> bool:
        return len(self.pending) < 10


class _TxnCluster(_ProducerCluster):
    """What the transaction manager's CallRunner and the sender ask of the cluster."""

    closed = False
    waits_abandoned = False
    last_connection_error = None

    def __init__(self, conn, metadata, io, config) -> None:
        super().__init__(conn, metadata)
        self.io = io
        self.config = config
        self.settings = types.SimpleNamespace(request_timeout=30.0)

    def ensure_connected(self, node):
        return self.conn          # one broker answers for every node id named

    def ready_connection(self, now):
        return self.conn

    def broker_id(self, conn) -> int:
        return conn.node_id

    def retry_when_ready(self, key, delay, fn) -> None:
        self.io.call_later(delay, fn)

    def cancel_retry(self, key) -> None:
        pass

    def _refused_since(self, since, ending=False):
        return None

    def request_metadata(self, topics, callback, deadline) -> None:
        _fail("a metadata request: the coordinator's broker is always known here")


def _txn_parked(thread: threading.Thread) -> bool:
    """``thread`` waits in a ``threading.Condition`` (an Event, the harness' flush) for
    another thread to notify it: its waiter is still queued. Once notified (or timed
    out) it is not, even before it runs again, so the harness never runs the I/O side
    while the application thread acts."""
    frame = sys._current_frames().get(thread.ident)
    if frame is None or frame.f_code is not threading.Condition.wait.__code__:
        return False
    local = frame.f_locals
    cond, waiter = local.get("self"), local.get("waiter")
    return cond is not None and waiter is not None and waiter in cond._waiters


class _ExceptionLog(logging.Handler):
    """Collects the client's log records that carry an exception, logged by the harness'
    thread (the I/O side; not another test's client left running): a handler that raised
    (the CallRunner logs it and fails the call with _FAIL) is a finding."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.raised: list = []
        self.thread = threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.thread == self.thread:
            self.raised.append(f"{record.name}: {record.getMessage()}: "
                               f"{record.exc_info[0].__name__}: {record.exc_info[1]}")


@contextlib.contextmanager
def _client_log_checked():
    log = logging.getLogger("kafka_client")
    handler = _ExceptionLog()
    was = log.propagate, log.level
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.ERROR)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.propagate, level = was
        log.setLevel(level)


def _txn_success(req, version: int, state: dict):
    """The answer of a well-behaved coordinator (and leader) to ``req``."""
    from kafka_proto.messages import (
        AddOffsetsToTxnResponse,
        AddPartitionsToTxnResponse,
        EndTxnResponse,
        FindCoordinatorResponse,
        InitProducerIdResponse,
        TxnOffsetCommitResponse,
    )

    key = req.API_KEY
    if key == 10:
        R = FindCoordinatorResponse
        if version >= 4:
            return R(coordinators=[R.Coordinator(key=k, node_id=1, host="fuzz", port=9092,
                                                 error_code=0)
                                   for k in req.coordinator_keys])
        return R(error_code=0, node_id=1, host="fuzz", port=9092)
    if key == 22:
        state["epoch"] = (state["epoch"] + 1) % 32000
        return InitProducerIdResponse(error_code=0, producer_id=7000,
                                      producer_epoch=state["epoch"])
    if key == 24:
        R = AddPartitionsToTxnResponse
        return R(results_by_topic_v3_and_below=[R.AddPartitionsToTxnTopicResult(
            name=t.name, results_by_partition=[R.AddPartitionsToTxnPartitionResult(
                partition_index=p, partition_error_code=0) for p in t.partitions])
            for t in req.v3_and_below_topics])
    if key == 25:
        return AddOffsetsToTxnResponse(error_code=0)
    if key == 26:
        return EndTxnResponse(error_code=0)
    if key == 28:
        R = TxnOffsetCommitResponse
        return R(topics=[R.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            R.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                               error_code=0) for p in t.partitions])
            for t in req.topics])
    return _produce_success(req, state["base"])


class _TxnSession:
    """One input's run: the transactional producer's parts (accumulator, sender,
    transaction manager) on the fake I/O thread, cluster and connection; the
    application's calls in a thread of their own, the I/O side in the harness'."""

    def __init__(self, answers: Dict[int, list], versions: Dict[int, int]) -> None:
        from kafka_client._cluster.metadata import MetadataCache, TopicInfo
        from kafka_client.producer.accumulator import Accumulator
        from kafka_client.producer.idempotence import Idempotence
        from kafka_client.producer.sender import Sender
        from kafka_client.producer.transactions import TransactionManager

        config = _txn_config()
        self.answers = answers
        self.io = _TxnIO()
        self.acc = Accumulator(config, lambda deadline: None, lambda name: None)
        md = MetadataCache()
        now = time.monotonic()
        info = TopicInfo("t", 0, [1] * _TXN_PARTITIONS, [-1] * _TXN_PARTITIONS,
                         [0] * _TXN_PARTITIONS, now)
        md.topics["t"] = info
        self.acc._new_topic("t")
        self.acc.apply_metadata({"t": info}, now)
        self.conn = _TxnConn(versions)
        self.cluster = _TxnCluster(self.conn, md, self.io, config)
        self.idem = Idempotence(config)
        self.txn = TransactionManager(config, self.io, self.cluster, self.idem, self.acc)
        self.reports: list = []
        self.reported = threading.Condition()
        self.sender = Sender(config, self.acc, self.cluster, self.idem, self._report,
                             self.txn)
        self.clock = now
        self.tick_due = True
        self.next_tick: Optional[float] = None
        self.coordinator = {"epoch": -1, "base": {}}
        #: per transaction number: EndTxn(commit) answered without error; offsets added
        #: and committed without error
        self.end_ok: set = set()
        self.offsets_ok: set = set()
        self.number = 0
        self.offsets_added = False
        self.produced = 0
        self.fatal_at = -1

    # -- delivery reports ------------------------------------------------------------
    def _report(self, report) -> None:
        """The sender's report, served at once (the application's poll)."""
        self.reports.append(report)
        if self.fatal_at < 0 and self.idem.fatal is not None:
            self.fatal_at = len(self.reports) - 1
        if report.batch is not None:
            self.acc.reported(report.batch.count, report.batch.counted)
        else:
            self.acc.reported(len(report.messages),
                              sum(pm.size for pm in report.messages))

    def reported_count(self) -> int:
        return sum(r.batch.count if r.batch is not None else len(r.messages or ())
                   for r in self.reports)

    def flush(self, timeout: Optional[float]) -> int:
        """The producer's flush (application thread): waits until every message has its
        report; returns how many have none."""
        deadline = time.monotonic() + (1e9 if timeout is None else timeout)
        with self.reported:
            while True:
                left = self.produced - self.reported_count()
                remaining = deadline - time.monotonic()
                if left <= 0 or remaining <= 0:
                    return max(left, 0)
                self.reported.wait(remaining)

    # -- the I/O side ----------------------------------------------------------------
    def step(self, release_held: bool = True) -> bool:
        """One step of the I/O thread; False when it has nothing to do."""
        io = self.io
        if io.soon:
            fn, args = io.soon.popleft()
            fn(*args)
            self.tick_due = True
            return True
        # The client reads the real clock too (a retry's time): never behind it.
        self.clock = max(self.clock, time.monotonic())
        if self.tick_due or (self.next_tick is not None and self.next_tick <= self.clock):
            self.tick_due = False
            self.next_tick = self.sender.tick(self.clock)
            for p in self.acc.topics["t"].parts:
                if p.in_flight < 0:
                    _fail(f"partition {p.index}: {p.in_flight} batches in flight")
            return True
        pending = self.conn.pending
        if pending:
            for i, (key, _v, _req, _cb) in enumerate(pending):
                queue = self.answers.get(key)
                if not queue or not queue[0][0] & 1 or release_held:
                    self.answer(i)
                    return True
        due = [t for t in io.timers if t.when <= self.clock]
        if due:
            timer = min(due, key=lambda t: t.when)
            io.timers.remove(timer)
            if not timer.cancelled:
                timer.fn(*timer.args)
            self.tick_due = True
            return True
        io.timers = [t for t in io.timers if not t.cancelled]
        later = [t.when for t in io.timers]
        if self.next_tick is not None:
            later.append(self.next_tick)
        if later:
            self.clock = max(min(later), self.clock + 0.001)
            self.tick_due = True
            return True
        return False

    def answer(self, index: int) -> None:
        key, version, req, callback = self.conn.pending.pop(index)
        self.tick_due = True
        queue = self.answers.get(key)
        how, body = queue.pop(0) if queue else (0, None)
        resp = _txn_success(req, version, self.coordinator) if body is None else \
            _decoded_or_failed(self.cluster, self.conn, key, version, callback, how, body)
        if resp is None:
            return
        self._note(key, req, resp)
        callback(resp, None)

    def _note(self, key: int, req, resp) -> None:
        """What the coordinator said, for the checks of the calls' outcomes."""
        from kafka_client.errors import broker_code

        if key == 26 and req.committed and broker_code(resp.error_code) == 0:
            self.end_ok.add(self.number)
        elif key == 25:
            self.offsets_added = broker_code(resp.error_code) == 0
        elif key == 28:
            codes = {(t.name, p.partition_index): broker_code(p.error_code)
                     for t in resp.topics or () for p in t.partitions or ()}
            sent = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
            if getattr(self, "offsets_added", False) and \
                    all(codes.get(k) == 0 for k in sent):
                self.offsets_ok.add(self.number)

    def settle(self, steps: int = 400) -> None:
        """The I/O side runs while it has something to do (the application sleeps)."""
        for _ in range(steps):
            if not self.step():
                return

    def notify(self) -> None:
        with self.reported:
            self.reported.notify_all()

    # -- the application side ----------------------------------------------------------
    def call(self, name: str, *args):
        """Run one API call in an application thread while the harness serves its I/O;
        returns the KafkaError it raised, or None."""
        from kafka_client.errors import KafkaError, KafkaException

        box: dict = {}

        def run() -> None:
            try:
                getattr(self.txn, name)(*args)
            except BaseException as exc:  # noqa: BLE001 - judged below
                box["raised"] = exc

        thread = threading.Thread(target=run, name=f"fuzz-{name}", daemon=True)
        started = time.monotonic()
        horizon = self.clock + _TXN_FAKE_HORIZON
        thread.start()
        while True:
            waited = time.monotonic()
            while thread.is_alive() and not _txn_parked(thread):
                if time.monotonic() - waited > 10.0:
                    _fail(f"{name}() neither returned nor waited for 10 s")
                time.sleep(0.0001)
            if not thread.is_alive():
                break
            if self.clock > horizon:
                _fail(f"{name}() still waits after {_TXN_FAKE_HORIZON:.0f} s of the "
                      f"I/O side's clock (state {self.txn.state.value})")
            if not self.step():
                _fail(f"{name}() waits (state {self.txn.state.value}) with nothing left "
                      f"for the I/O side to do: only its timeout can end it")
            self.notify()
        took = time.monotonic() - started
        timeout = args[0] if args and isinstance(args[0], float) else None
        if name == "send_offsets_to_transaction":
            timeout = args[2]
        if timeout is not None and took > timeout + 5.0:
            _fail(f"{name}({timeout}) returned after {took:.1f} s")
        exc = box.get("raised")
        if exc is None:
            return None
        if not isinstance(exc, KafkaException) or not exc.args or \
                not isinstance(exc.args[0], KafkaError):
            _fail(f"{name}() raised {type(exc).__name__}: {exc}")
        return exc.args[0]

    def resumed(self, name: str, *args):
        """The call, called again (the I/O side running between) while it times out."""
        for _ in range(_TXN_TRIES):
            err = self.call(name, *args)
            if err is None or not err.retriable() or err.fatal() or err.txn_requires_abort():
                return err
            self.settle()
        return err



def _decoded_or_failed(cluster: Any, conn: Any, key: int, version: int,
                       callback: Callable[[Any, Any], None], how: int, body: bytes
                       ) -> Any:
    """An input's answer (see :func:`_answers_by_api`) to a request whose ``callback``
    waits: the response decoded, for the caller to hand over; or None once the request
    has failed: the connection lost (``how`` bit 1, told to the cluster's hooks too) or
    the body undecodable."""
    from kafka_client.errors import KafkaError
    from kafka_proto.messages import response_class

    if how & 2:
        err = KafkaError(KafkaError._TRANSPORT, "fuzz: connection lost")
        callback(None, err)
        for hook in list(cluster.on_broker_state):
            hook(conn, "DISCONNECTED", err)
        return None
    try:
        return response_class(key).decode(body, version)
    except CODEC_ERRORS:
        callback(None, KafkaError(KafkaError._TRANSPORT, "fuzz: undecodable answer"))
        return None


def _answers_by_api(blob: bytes, keys: Sequence[int]
                    ) -> Tuple[Dict[int, List[Tuple[int, bytes]]], Dict[int, int]]:
    """The answers of the ``transactions``, ``admin`` and ``share`` inputs, by API key
    (each segment: int16 API key, mapped onto one of ``keys``; uint8 version, the first
    of each API the negotiated one; uint8 how; the body), and the negotiated versions
    (the highest for an API with no answer)."""
    from kafka_proto.messages import API_KEYS

    answers: Dict[int, List[Tuple[int, bytes]]] = {}
    versions: Dict[int, int] = {}
    for seg in blob.split(SEGMENT_SEP):
        if len(seg) < 4:
            continue
        key = int.from_bytes(seg[0:2], "big")
        if key not in keys:
            key = keys[key % len(keys)]
        info = API_KEYS[key]
        versions.setdefault(key, info.min_version + seg[2] % (
            info.max_version - info.min_version + 1))
        answers.setdefault(key, []).append((seg[3], seg[4:]))
    for key in keys:
        versions.setdefault(key, API_KEYS[key].max_version)
    return answers, versions


def check_transactions(data: bytes) -> None:
    """The transactional producer (``kafka_client.producer.transactions``) against hostile
    coordinators: a real ``TransactionManager``, ``Sender`` and ``Accumulator`` on a fake
    I/O thread, cluster and connection (one broker, coordinator of the transactional id
    and of the group, leader of topic ``t``'s two partitions); the application's calls
    (init_transactions, then per transaction begin, produce, send_offsets, commit or
    abort) in a thread of their own, the I/O side run by the harness only while that
    thread waits (the steps of a run differ only where the client reads the real clock
    or jitters a retry).

    Layout: byte 0 = flags (bits 0-1 transactions 1-4; bit 2 send_offsets_to_transaction
    in each; bit 3 init, commit and abort with timeout 0, called again while they time
    out, the I/O side running between; bit 4 abort the odd transactions instead of
    committing; bits 5-6 messages per transaction 0, 1, 3, 6; bit 7 unused); then answers
    separated by ``SEGMENT_SEP``, each int16 API key (mapped onto FindCoordinator,
    InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
    Produce), uint8 version (modulo the API's
    range; the first of each API is the negotiated one), uint8 how (bit 0 answered only
    when the I/O side has nothing else to do; bit 1 the connection is lost instead), then
    the body. Each request the producer sends gets the next answer of its API, a
    well-behaved one when they are used up (a body that does not decode is a lost
    connection).

    Checked: nothing raises on the I/O side, no handler raises (the client logs it and
    fails the call), the calls raise only KafkaException(KafkaError) and return within
    their timeout; a call never waits with nothing left to answer; every request encodes
    at its version; no partition has a negative number of batches in flight; every
    message has at most one delivery report, and exactly one once the producer is back
    to Ready (or fatal); a commit that succeeds had every message of its transaction
    delivered and, when the coordinator knew of the transaction, an EndTxn(commit)
    answered without error; an offsets call that succeeds had AddOffsetsToTxn and every
    partition of TxnOffsetCommit answered without error; once fatal, every call raises
    the fatal error and nothing more is delivered.
    """
    from kafka_client.producer.sender import PERSISTED
    from kafka_client.producer.transactions import TxnState
    from kafka_client.types import TopicPartition

    if len(data) < 1:
        return
    flags = data[0]
    answers, versions = _answers_by_api(data[1:], _TXN_KEYS)
    transactions = 1 + (flags & 3)
    timeout = 0.0 if flags & 8 else _TXN_LONG_TIMEOUT
    per_txn = _TXN_MESSAGES[(flags >> 5) & 3]

    with _client_log_checked() as log:
        s = _TxnSession(answers, versions)
        txn = s.txn

        def fatal_now(err) -> bool:
            if txn.state != TxnState.FATAL_ERROR:
                return False
            for name, args in (("begin_transaction", ()),
                               ("commit_transaction", (timeout, s.flush))):
                again = s.call(name, *args)
                if again is None or not again.fatal():
                    _fail(f"{name}() of a fatal producer: {again}")
            return True

        err = s.resumed("init_transactions", timeout)
        if err is None and txn.state != TxnState.READY:
            _fail(f"init_transactions() succeeded in state {txn.state.value}")
        for number in range(1, transactions + 1):
            if err is not None:
                break
            err = s.call("begin_transaction")
            if err is not None:
                break
            s.number = number
            before = s.reported_count()
            produced = 0
            for i in range(per_txn):
                s.acc.produce("t", b"m%d-%d" % (number, i), partition=i % _TXN_PARTITIONS)
                produced += 1
                s.produced += 1
            s.tick_due = True
            offsets = False
            if flags & 4:
                s.offsets_added = False
                # Always the long timeout: with 0 the request's own deadline has passed
                # before it can go out (it never succeeds).
                err = s.resumed("send_offsets_to_transaction",
                                [TopicPartition("in", 0, 10 * number),
                                 TopicPartition("in", 1, 7)], _TXN_GROUP, _TXN_LONG_TIMEOUT)
                offsets = err is None
                if offsets and number not in s.offsets_ok:
                    _fail("send_offsets_to_transaction() succeeded without both answers "
                          "clean")
            if fatal_now(err):
                break
            first = len(s.reports)
            abort = bool(flags & 16 and number % 2) or (
                err is not None and err.txn_requires_abort())
            if not abort:
                err = s.resumed("commit_transaction", timeout, s.flush)
                if err is None:
                    if txn.state != TxnState.READY:
                        _fail(f"commit succeeded in state {txn.state.value}")
                    mine = s.reports[first:]
                    if s.reported_count() - before != produced or \
                            any(r.error is not None for r in mine):
                        _fail(f"commit succeeded with {produced} messages and reports "
                              f"{[(r.error, r.status) for r in mine]}")
                    if (produced or offsets) and number not in s.end_ok:
                        _fail("commit succeeded without an EndTxn(commit) answered "
                              "without error")
                if fatal_now(err):
                    break
                abort = err is not None and (err.txn_requires_abort() or
                                             txn.state == TxnState.ABORTABLE_ERROR)
            if abort:
                err = s.resumed("abort_transaction", timeout, s.flush)
                if err is None and s.reported_count() - before != produced:
                    _fail(f"abort succeeded with {s.reported_count() - before} of "
                          f"{produced} messages reported")
                if fatal_now(err):
                    break
        # The end: the I/O side runs out (well-behaved answers from here on).
        s.settle(5000)
        if log.raised:
            _fail(f"the client logged an exception: {log.raised[0]}")
        seen: set = set()
        for r in s.reports:
            if r.batch is None:
                continue
            if id(r.batch) in seen:
                _fail(f"{r.batch} reported twice")
            seen.add(id(r.batch))
            if r.status == PERSISTED and not r.batch.sent:
                _fail(f"{r.batch} reported persisted but never sent")
        if txn.state in (TxnState.READY, TxnState.FATAL_ERROR) and \
                s.reported_count() != s.produced:
            _fail(f"{s.reported_count()} of {s.produced} messages reported in state "
                  f"{txn.state.value}")
        if s.fatal_at >= 0 and any(r.error is None for r in s.reports[s.fatal_at:]):
            _fail("a message reported delivered after the fatal error")


# --------------------------------------------------------------------------- admin

#: The admin client's APIs: FindCoordinator, Metadata, CreateTopics, DeleteTopics,
#: CreatePartitions, DescribeCluster, DescribeConfigs, AlterConfigs, DeleteRecords,
#: ListOffsets, ListGroups, DescribeGroups, ConsumerGroupDescribe, DeleteGroups,
#: OffsetFetch, OffsetCommit, DescribeAcls, CreateAcls, DeleteAcls.
_ADMIN_KEYS = (10, 3, 19, 20, 37, 60, 32, 33, 21, 2, 16, 15, 69, 42, 9, 8, 29, 30, 31)
#: Topic ``t``'s partitions (led by broker 1, as the metadata says).
_ADMIN_PARTITIONS = 2


def _admin_operations(flags: int) -> List[tuple]:
    """``(name, operation, args, futures)`` of the admin calls chosen by ``flags``: the
    arguments as the AdminClient's methods hand them to the I/O thread."""
    from kafka_client import ConsumerGroupTopicPartitions
    from kafka_client.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ConfigResource,
        NewPartitions,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )
    from kafka_client.admin import _operations as ops
    from kafka_client.admin._client import _future
    from kafka_client.types import TopicPartition

    def keyed(keys) -> Dict[object, object]:
        return {k: _future() for k in keys}

    chosen: List[tuple] = []

    def add(name: str, fn, keys, *args) -> None:
        futures = keyed(keys)
        one = keys == [None]
        chosen.append((name, fn, args + ((futures[None] if one else futures),), futures))

    if flags & 1:
        add("create_topics", ops.create_topics, ["a", "b"],
            [NewTopic("a", 3, 1), NewTopic("b", 1, 1)])
        add("delete_topics", ops.delete_topics, ["a", "c"], ["a", "c"])
        add("create_partitions", ops.create_partitions, ["t"], [NewPartitions("t", 4)])
    if flags & 2:
        add("describe_topics", ops.describe_topics, ["t", "u"], ["t", "u"])
        add("describe_cluster", ops.describe_cluster, [None])
    if flags & 4:
        resources = [ConfigResource(ResourceType.TOPIC, "t"),
                     ConfigResource(ResourceType.BROKER, "1")]
        add("describe_configs", ops.describe_configs, resources, resources)
        altered = [ConfigResource(ResourceType.TOPIC, "t",
                                  set_config={"retention.ms": "1000"})]
        add("alter_configs", ops.alter_configs, altered, altered)
    if flags & 8:
        keys = [("t", p) for p in range(_ADMIN_PARTITIONS)]
        add("delete_records", ops.delete_records, keys, {k: 5 for k in keys})
        add("list_offsets", ops.list_offsets, keys, {keys[0]: -1, keys[1]: -2})
    if flags & 16:
        add("list_consumer_groups", ops.list_consumer_groups, [None])
        add("describe_consumer_groups", ops.describe_consumer_groups, ["g1", "g2"],
            ["g1", "g2"])
    if flags & 32:
        add("delete_consumer_groups", ops.delete_consumer_groups, ["g1"], ["g1"])
        add("list_consumer_group_offsets", ops.list_consumer_group_offsets, [None],
            ConsumerGroupTopicPartitions("g1", [TopicPartition("t", 0)]))
        add("alter_consumer_group_offsets", ops.alter_consumer_group_offsets, [None],
            ConsumerGroupTopicPartitions("g2", [TopicPartition("t", 1, 9)]))
    if flags & 64:
        acl = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:u",
                         "*", AclOperation.READ, AclPermissionType.ALLOW)
        match = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None,
                                 None, AclOperation.ANY, AclPermissionType.ANY)
        add("create_acls", ops.create_acls, [acl], [acl])
        add("describe_acls", ops.describe_acls, [None], match)
        add("delete_acls", ops.delete_acls, [match], [match])
    return chosen


class _AdminCluster(_TxnCluster):
    """The admin client's cluster: one broker (node 1), controller and coordinator of
    everything, leader of topic ``t``; a metadata refresh finds it so at once."""

    def request_metadata(self, topics, callback, deadline, refused_ends=False,
                         may_create=False) -> None:
        self.metadata.controller_id = 1
        self.io.call_soon(callback, self.metadata, None, self.conn)


def check_admin(data: bytes) -> None:
    """The admin client's answer handling (``kafka_client.admin._operations`` through a
    real ``CallRunner``, as the AdminClient hands them to its I/O thread) on a fake I/O
    thread, cluster and connection, fed the brokers' answers.

    Layout: byte 0 = the operations (bit 0 create_topics, delete_topics,
    create_partitions; bit 1 describe_topics, describe_cluster; bit 2 describe_configs,
    alter_configs; bit 3 delete_records, list_offsets; bit 4 list_consumer_groups,
    describe_consumer_groups; bit 5 delete_consumer_groups, list_consumer_group_offsets,
    alter_consumer_group_offsets; bit 6 create_acls, describe_acls, delete_acls; none: all
    of them); then answers as for ``transactions`` (int16 API key mapped onto the admin
    client's APIs, uint8 version, uint8 how: bit 1 the connection is lost instead, then
    the body). Each request gets the next answer of its API; when they are used up it
    gets none, and the harness' clock runs through every timer (the calls' deadlines).

    Checked: nothing raises on the I/O side and no handler raises (logged by the
    CallRunner, which fails the call with _FAIL); every request encodes at its version;
    in the end every future is done, with a result or a KafkaException carrying a
    KafkaError (never another exception).
    """
    from kafka_client._cluster.calls import CallRunner
    from kafka_client._cluster.metadata import MetadataCache, TopicInfo
    from kafka_client.admin import _operations as ops
    from kafka_client.errors import KafkaError, KafkaException

    if len(data) < 1:
        return
    answers, versions = _answers_by_api(data[1:], _ADMIN_KEYS)

    config = _txn_config()
    io = _TxnIO()
    md = MetadataCache()
    now = time.monotonic()
    md.brokers[1] = ("fuzz", 9092, None)
    md.controller_id = 1
    md.cluster_id = "fuzz-cluster"
    md.topics["t"] = TopicInfo("t", 0, [1] * _ADMIN_PARTITIONS, [0] * _ADMIN_PARTITIONS,
                               [0] * _ADMIN_PARTITIONS, now)
    conn = _TxnConn(versions)
    cluster = _AdminCluster(conn, md, io, config)
    clock = [now]

    def step() -> bool:
        if io.soon:
            fn, args = io.soon.popleft()
            fn(*args)
            return True
        if conn.pending:
            key, version, _req, callback = conn.pending.pop(0)
            queue = answers.get(key)
            if not queue:
                return step_timers()       # no answer: it waits for its deadline
            how, body = queue.pop(0)
            resp = _decoded_or_failed(cluster, conn, key, version, callback, how, body)
            if resp is not None:
                callback(resp, None)
            return True
        return step_timers()

    def step_timers() -> bool:
        io.timers = [t for t in io.timers if not t.cancelled]
        if not io.timers:
            return False
        timer = min(io.timers, key=lambda t: t.when)
        io.timers.remove(timer)
        clock[0] = max(clock[0], timer.when)
        timer.fn(*timer.args)
        return True

    with _client_log_checked() as log:
        runner = CallRunner(cluster)
        opts = ops.Options(deadline=time.monotonic() + 30.0)
        chosen = _admin_operations(data[0] or 0x7F)
        for _name, fn, args, _futures in chosen:
            io.call_soon(fn, runner, *args, opts)
        for _ in range(5000):
            if not step():
                break
        else:
            return      # thousands of answers: too long an input to judge in its time
        if log.raised:
            _fail(f"the client logged an exception: {log.raised[0]}")
        for name, _fn, _args, futures in chosen:
            for key, future in futures.items():
                if not future.done():
                    _fail(f"{name}: the future of {key!r} never completed")
                exc = future.exception(0)
                if exc is not None and (not isinstance(exc, KafkaException) or
                                        not exc.args or
                                        not isinstance(exc.args[0], KafkaError)):
                    _fail(f"{name}: the future of {key!r} failed with "
                          f"{type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------- share

#: The share consumer's APIs: FindCoordinator, ShareGroupHeartbeat, ShareFetch,
#: ShareAcknowledge.
_SHARE_KEYS = (10, 76, 78, 79)
_SHARE_TOPIC_ID = uuid.UUID(int=7)
_SHARE_PARTITIONS = 2
_share_configs: Dict[bool, object] = {}


def _share_config():
    cfg = _share_configs.get(True)
    if cfg is None:
        from kafka_client.config import ClientConfig

        cfg = _share_configs[True] = ClientConfig.from_dict(
            {"group.id": "fuzz-share", "group.protocol": "consumer",
             "retry.backoff.ms": 1, "retry.backoff.max.ms": 4}, role="consumer")
    return cfg


class _ShareConn(_TxnConn):
    """Keeps when each request times out (as the timers, from the real clock), as the
    connection fails it then."""

    def __init__(self, versions: Dict[int, int]) -> None:
        super().__init__(versions)
        self.expires: Dict[int, float] = {}

    def send(self, req, callback, *, version=None, expect_response=True, timeout=None):
        super().send(req, callback, version=version, expect_response=expect_response,
                     timeout=timeout)
        self.expires[id(callback)] = time.monotonic() + (30.0 if timeout is None
                                                         else timeout)


def check_share(data: bytes) -> None:
    """The share consumer's answer handling (KIP-932): a real ``ShareMember``
    (``kafka_client.consumer.share_group``: ShareGroupHeartbeat) and ``ShareFetcher``
    (``kafka_client.consumer.share_fetcher``: share sessions, ShareFetch,
    ShareAcknowledge) through a real ``CallRunner`` on a fake I/O thread, cluster and
    connection (one broker, coordinator and leader of topic ``t``'s two partitions),
    subscribed to ``t``; between answers the harness plays the application: it takes
    every chunk fetched and acknowledges every offset acquired.

    Layout: byte 0 = flags (bits 0-1 how the records are acknowledged: ACCEPT, RELEASE,
    REJECT, alternately ACCEPT and RELEASE; bit 2 a commit after each chunk taken; bit 3
    the consumer closes in the end, else it only stops being answered); then answers as
    for ``transactions`` (API keys mapped onto FindCoordinator, ShareGroupHeartbeat,
    ShareFetch, ShareAcknowledge). Each request gets the next answer of its API; once they
    are used up it gets none, and the clock runs through the calls' deadlines.

    Checked: nothing raises on the I/O side and no handler raises (logged by the
    CallRunner, which fails the call with _FAIL); every request encodes at its version;
    a chunk's acquired ranges are well formed and one answer's acquire at most
    ``MAX_ACQUIRED_OFFSETS`` offsets; no acknowledged offset gets more outcomes than it
    was acknowledged; with close, in the end every acknowledgement has its outcome and
    every commit's waiter is done; errors handed to the application are KafkaErrors.
    """
    from kafka_client._cluster.calls import CallRunner
    from kafka_client._cluster.metadata import MetadataCache, TopicInfo
    from kafka_client.consumer.share_fetcher import (
        MAX_ACQUIRED_OFFSETS,
        AckBatch,
        AckRange,
        ShareFetcher,
    )
    from kafka_client.consumer.share_group import ShareMember
    from kafka_client.errors import KafkaError
    from kafka_proto.enums import AcknowledgeType

    if len(data) < 1:
        return
    flags = data[0]
    answers, versions = _answers_by_api(data[1:], _SHARE_KEYS)

    config = _share_config()
    io = _TxnIO()
    md = MetadataCache()
    now = time.monotonic()
    md.brokers[1] = ("fuzz", 9092, None)
    md.topics["t"] = TopicInfo("t", 0, [1] * _SHARE_PARTITIONS, [0] * _SHARE_PARTITIONS,
                               [0] * _SHARE_PARTITIONS, now, _SHARE_TOPIC_ID)
    md.version += 1
    clock = [now]
    conn = _ShareConn(versions)
    cluster = _AdminCluster(conn, md, io, config)
    kinds = ((AcknowledgeType.ACCEPT,), (AcknowledgeType.RELEASE,),
             (AcknowledgeType.REJECT,),
             (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE))[flags & 3]
    acked: Dict[tuple, int] = {}
    outcomes: Dict[tuple, int] = {}
    waiters: list = []

    with _client_log_checked() as log:
        runner = CallRunner(cluster)
        fetcher_box: list = []
        member = ShareMember(config, runner,
                             lambda assignment: fetcher_box[0].set_assignment(assignment),
                             lambda error: fetcher_box[0].report(error))
        fetcher = ShareFetcher(config, runner, member, lambda: None)
        fetcher_box.append(fetcher)
        member.subscribe(["t"])

        def application() -> None:
            """Take what was fetched, acknowledge it; collect outcomes and errors."""
            while True:
                chunk = fetcher.take_chunk()
                if chunk is None:
                    break
                total = 0
                for first, last, _count in chunk.acquired:
                    if first > last:
                        _fail(f"chunk of {chunk.part.key}: acquired {chunk.acquired}")
                    total += last - first + 1
                if total > MAX_ACQUIRED_OFFSETS:
                    _fail(f"a chunk acquiring {total} offsets")
                ranges = []
                for first, last, _count in chunk.acquired:
                    for i, off in enumerate(range(first, last + 1)):
                        ranges.append(AckRange(off, off, kinds[i % len(kinds)]))
                        acked[(chunk.part.key, off)] = acked.get((chunk.part.key, off), 0) + 1
                batch = AckBatch(chunk.node, chunk.part.key, ranges)
                if flags & 4:
                    waiters.append(fetcher.wait_for_all([batch]))
                else:
                    fetcher.acknowledge([batch], False)
            for outcome in fetcher.take_outcomes():
                for key, offsets in outcome.offsets.items():
                    for off in offsets:
                        n = outcomes.get((key, off), 0) + 1
                        if n > acked.get((key, off), 0):
                            _fail(f"{key} offset {off}: {n} outcomes, acknowledged "
                                  f"{acked.get((key, off), 0)} times")
                        outcomes[(key, off)] = n
            for error in fetcher.take_errors():
                if not isinstance(error, KafkaError):
                    _fail(f"the application was handed {error!r}")

        def step(answering: bool) -> bool:
            if io.soon:
                fn, args = io.soon.popleft()
                fn(*args)
                return True
            clock[0] = max(clock[0], time.monotonic())
            member.tick(clock[0])
            fetcher.tick(clock[0])
            application()
            if io.soon:
                return True
            for i, (key, version, _req, callback) in enumerate(conn.pending):
                queue = answers.get(key)
                if not answering or not queue:
                    continue
                conn.pending.pop(i)
                how, body = queue.pop(0)
                answered[0] += 1
                resp = _decoded_or_failed(cluster, conn, key, version, callback, how, body)
                if resp is not None:
                    callback(resp, None)
                return True
            # The earliest event: a timer, or a request timing out.
            io.timers = [t for t in io.timers if not t.cancelled]
            due = [conn.expires[id(p[3])] for p in conn.pending]
            if not io.timers and not due:
                return False
            when = min([t.when for t in io.timers] + due)
            clock[0] = max(clock[0], when)
            for i, (_k, _v, _r, callback) in enumerate(conn.pending):
                if conn.expires[id(callback)] == when:
                    # Not answered in time: the connection fails it (and closes).
                    conn.pending.pop(i)
                    err = KafkaError(KafkaError._TIMED_OUT, "fuzz: request timed out")
                    callback(None, err)
                    for hook in list(cluster.on_broker_state):
                        hook(conn, "DISCONNECTED", err)
                    return True
            timer = min(io.timers, key=lambda t: t.when)
            io.timers.remove(timer)
            timer.fn(*timer.args)
            return True

        # While answers remain for what the member sends (not for ever: an API it no
        # longer sends keeps its answers).
        answered = [0]
        idle = 0
        for _ in range(1500):
            before = answered[0]
            if not any(answers.values()) or not step(True) or idle > 50:
                break
            idle = 0 if answered[0] > before else idle + 1
        if flags & 8:
            fetcher.close_sessions(lambda: None)
            member.leave(lambda: None)
        # Nothing answered any more: the calls run out to their deadlines.
        # (bounded: heartbeats and fetches go on for ever, each failing at its deadline)
        for _ in range(200):
            if not step(False) or clock[0] > now + 100:
                break
        application()
        if log.raised:
            _fail(f"the client logged an exception: {log.raised[0]}")
        if flags & 8:
            missing = [k for k, n in acked.items() if outcomes.get(k, 0) != n]
            if missing:
                _fail(f"{len(missing)} acknowledged offsets without their outcome, e.g. "
                      f"{missing[:3]}")
            if any(not w.done.is_set() for w in waiters):
                _fail("a commit's waiter never done")


# --------------------------------------------------------------------------- telemetry


def check_telemetry(data: bytes) -> None:
    """A KIP-714 PushTelemetry payload as the test cluster reads one: decompressed (the
    codec the request names) and decoded by ``kafka_proto.telemetry``.

    Layout: byte 0 = codec id (mod 5: none and the four codecs), then the payload. What
    decodes encodes again and decodes to the same resources, scopes, metrics and points.
    """
    from kafka_proto.compression import decompress
    from kafka_proto.telemetry import GAUGE, SUM, decode_metrics_data, encode_metrics_data

    if not data:
        return
    codec = data[0] % 5
    payload = data[1:]
    try:
        if codec:
            payload = decompress(codec, payload, _DECOMPRESS_LIMITS[1])
        resources = decode_metrics_data(payload)
    except CODEC_ERRORS:
        return
    if any(m.kind not in (GAUGE, SUM) for r in resources for sc in r.scopes
           for m in sc.metrics):
        return  # histograms and the like are decoded without points: nothing to encode
    again = decode_metrics_data(encode_metrics_data(resources))
    if repr(again) != repr(resources):  # repr: NaN equals NaN, 1 differs from 1.0
        _fail(f"telemetry: {len(resources)} resources changed when encoded again")


# --------------------------------------------------------------------------- down-conversion


def _legacy_rows(records: bytes) -> list:
    """(offset, timestamp, key, value) of every whole message of a legacy message set, as
    a consumer of that format reads it (a cut last message ignored)."""
    from kafka_proto.records import read_batches

    return [(r.offset, r.timestamp, _b(r.key), _b(r.value))
            for b in read_batches(records, check_crc=True, allow_truncated=True,
                                  max_decompressed_size=MAX_DECOMPRESSED) for r in b]


def _expected_down(batches: list, magic: int, fetch_offset: int) -> Tuple[list, bool]:
    """What a Fetch of message format ``magic`` from ``fetch_offset`` may hand out of the
    stored v2 ``batches`` (Kafka's down-conversion, written apart from the cluster's):
    the rows in order, and whether a zstd batch comes first (UNSUPPORTED_COMPRESSION_TYPE).
    Control batches have no legacy form; an uncompressed batch loses its records below
    the fetch offset; zstd ends the conversion; v0 has no timestamps; LogAppendTime
    batches give every record the batch's time."""
    from kafka_proto.records import Compression, TimestampType

    rows: list = []
    for batch, records in batches:
        if batch.is_control:
            continue
        if batch.compression == Compression.ZSTD:
            return rows, not rows
        for r in records:
            if batch.compression == Compression.NONE and r[0] < fetch_offset:
                continue
            if magic == 0:
                stamp = -1
            elif batch.timestamp_type == TimestampType.LOG_APPEND_TIME:
                stamp = batch.max_timestamp
            else:
                stamp = r[1]
            rows.append((r[0], stamp, r[2], r[3]))
    return rows, False


def _check_down_convert(stored: bytes, magic: int, fetch_offset: int) -> None:
    from kafka_proto.errors import ErrorCode
    from kafka_proto.records import read_batches

    from kafka_client.testing._downconvert import down_convert

    try:   # only what a log holds: whole v2 batches, CRCs right, every record readable
        batches = [(b, [(r.offset, r.timestamp, _b(r.key), _b(r.value)) for r in b])
                   for b in read_batches(stored, check_crc=True, allow_truncated=False,
                                         max_decompressed_size=MAX_DECOMPRESSED)]
    except CODEC_ERRORS:
        return
    if not batches or any(b.magic != 2 for b, _ in batches):
        return
    offsets = [r[0] for _, rows in batches for r in rows]
    if offsets and offsets[0] < 0 or any(a >= b for a, b in zip(offsets, offsets[1:])):
        return    # a log's offsets start at 0 and go up, across batches too
    want, refused = _expected_down(batches, magic, fetch_offset)
    records, error = down_convert(stored, magic, fetch_offset)
    if refused:
        if error != ErrorCode.UNSUPPORTED_COMPRESSION_TYPE or records:
            _fail(f"downconvert: zstd first gave error {error}, {len(records)} bytes")
        return
    if error != ErrorCode.NONE:
        _fail(f"downconvert: error {error} for convertible batches")
    if not want:
        if records:
            _fail(f"downconvert: {len(records)} bytes where nothing converts")
        return
    if len(records) < len(stored):
        _fail(f"downconvert: {len(records)} bytes for {len(stored)} stored (Kafka sizes the "
              "answer as the stored batches at least)")
    try:
        got = _legacy_rows(records)
    except CODEC_ERRORS as exc:
        _fail(f"downconvert: the converted set does not read: {exc!r}")
    if not got or got != want[:len(got)]:
        _fail(f"downconvert: rows {got[:3]}... are not a prefix of {want[:3]}... "
              f"({len(got)} of {len(want)})")
    if any(b.magic != magic for b in read_batches(records, allow_truncated=True,
                                                  max_decompressed_size=MAX_DECOMPRESSED)):
        _fail(f"downconvert: a message of another magic than {magic}")


def _check_up_convert(records: bytes) -> None:
    from kafka_proto.errors import DecompressionLimitError, ErrorCode
    from kafka_proto.records import read_batches

    from kafka_client.testing._downconvert import up_convert

    try:   # the harness' own reading: the set must read whole, CRCs checked (a v2 batch
        # is refused for its magic, as Kafka refuses it, before its records are read)
        batches = [(b.magic, [(r.timestamp, _b(r.key), _b(r.value)) for r in b]
                    if b.magic < 2 else [])
                   for b in read_batches(records, check_crc=True, allow_truncated=False,
                                         max_decompressed_size=MAX_DECOMPRESSED)]
        readable = True
    except DecompressionLimitError:
        return    # above the harness' memory bound (up_convert's budget is 64 MiB)
    except CODEC_ERRORS:
        readable = False
    batch, error, _why = up_convert(records)
    if not readable:
        if error != ErrorCode.CORRUPT_MESSAGE:
            _fail(f"upconvert: error {error} for a set that does not read")
        return
    if not batches or any(magic >= 2 for magic, _ in batches):
        if error != ErrorCode.INVALID_RECORD:
            _fail(f"upconvert: error {error} for an empty set or a v2 batch")
        return
    if error != ErrorCode.NONE:
        _fail(f"upconvert: error {error} for a readable legacy set")
    stored = list(read_batches(batch, check_crc=True, allow_truncated=False))
    if len(stored) != 1 or stored[0].magic != 2 or stored[0].is_control:
        _fail("upconvert: not one v2 data batch")
    got = [(r.offset, r.timestamp, _b(r.key), _b(r.value)) for r in stored[0]]
    want = [(i, ts if ts >= 0 else -1, k, v)
            for i, (ts, k, v) in enumerate(row for _, rows in batches for row in rows)]
    if got != want:
        _fail(f"upconvert: stored {got[:3]}... for {want[:3]}...")


def _check_message_set_rebuild(records: bytes) -> None:
    """Every legacy batch that reads is written again with ``build_message_set`` (its
    magic, codec and LogAppendTime) and read back: the same rows; or the writer refuses
    offsets no reader takes (ValueError) and the reader had taken them."""
    from kafka_proto.records import LegacyMessage, TimestampType, build_message_set, \
        read_batches

    try:
        batches = [(b, [(r.offset, r.timestamp, _b(r.key), _b(r.value)) for r in b])
                   for b in read_batches(records, check_crc=True, allow_truncated=True,
                                         max_decompressed_size=MAX_DECOMPRESSED)]
    except CODEC_ERRORS:
        return
    for batch, rows in batches:
        if batch.magic == 2 or not rows:
            continue
        offsets = [r[0] for r in rows]
        valid = all(0 <= o < (1 << 63) - 1 for o in offsets) and \
            all(a < b for a, b in zip(offsets, offsets[1:]))
        append_time = rows[0][1] if batch.timestamp_type == TimestampType.LOG_APPEND_TIME \
            else None
        try:
            again = build_message_set([LegacyMessage(*r) for r in rows], batch.magic,
                                      int(batch.compression), append_time)
        except ValueError:
            if valid:
                _fail(f"message set: writer refused offsets {offsets[:4]}...")
            continue
        if not valid:
            _fail(f"message set: writer took offsets {offsets[:4]}...")
        back = [(r.offset, r.timestamp, _b(r.key), _b(r.value))
                for b in read_batches(again, check_crc=True, allow_truncated=False)
                for r in b]
        if back != rows:
            _fail(f"message set: {rows[:2]}... read back as {back[:2]}...")


def _fix_crcs(blob: bytes) -> bytes:
    """``blob`` with the CRC of every top-level v2 batch and legacy message that its
    lengths delimit computed again, so that mutations reach the code behind the check."""
    import zlib

    from kafka_proto._crc import crc32c

    buf = bytearray(blob)
    pos = 0
    while pos + 17 <= len(buf):
        size = struct.unpack_from(">i", buf, pos + 8)[0]
        end = pos + 12 + size
        if size < 6 or end > len(buf):
            break
        if buf[pos + 16] == 2 and size >= 49:
            struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21:end])))
        elif buf[pos + 16] < 2:
            struct.pack_into(">I", buf, pos + 12, zlib.crc32(bytes(buf[pos + 16:end])))
        pos = end
    return bytes(buf)


def check_downconvert(data: bytes) -> None:
    """The test cluster's message format conversion (``kafka_client.testing._downconvert``)
    and the legacy writer, in process.

    Layout: byte 0 options (bit 0: format v1 rather than v0; bits 1-2 fetch offset: 0,
    first batch's base offset + d, last offset + 1 + d, |d|; bit 3: the CRCs of the
    top-level batches and messages computed again first), byte 1 d (int8), then a blob.
    As stored v2 batches (what a log holds: whole, CRCs right, records readable;
    control, transactional, compacted, any codec) it is down-converted for a Fetch below
    v4 and must read as the reference model's rows (a prefix: the answer is cut to the
    stored size), sized at least as the stored bytes. As a Produce v0-2 message set it is
    up-converted: CORRUPT_MESSAGE exactly when it does not read, INVALID_RECORD for v2
    batches or nothing, else one v2 batch of the same keys, values and timestamps. Each
    legacy batch that reads is also rebuilt by ``build_message_set`` and read back.
    """
    from kafka_proto.records import read_batches

    if len(data) < 2:
        return
    magic = data[0] & 1
    d = struct.unpack_from(">b", data, 1)[0]
    blob = _fix_crcs(data[2:]) if data[0] & 8 else data[2:]
    where = (data[0] >> 1) & 3
    fetch_offset = 0
    if where in (1, 2):
        try:
            batches = list(read_batches(blob, check_crc=False,
                                        max_decompressed_size=MAX_DECOMPRESSED))
        except CODEC_ERRORS:
            batches = []
        if batches:
            fetch_offset = max(0, (batches[0].base_offset if where == 1
                                   else batches[-1].last_offset + 1) + d)
    elif where == 3:
        fetch_offset = abs(d)
    _check_down_convert(blob, magic, fetch_offset)
    _check_up_convert(blob)
    _check_message_set_rebuild(blob)


# --------------------------------------------------------------------------- cluster

#: The topics of the ``cluster`` harness: legacy Produce lands in the first, the v2
#: batches fetched back at Fetch v0-3 in the second.
_LEGACY_TOPIC, _STORED_TOPIC = "fuzz-legacy", "fuzz-stored"
#: Most entries one ACL request of the harness carries (after repetition).
_MAX_ACL_ENTRIES = 4096
#: The cluster process' resident set the harness tolerates (MiB).
_CLUSTER_RSS_LIMIT_MB = 1536


class _Bytes:
    """The input, read front to back; zeros once it is used up."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def u8(self) -> int:
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def i8(self) -> int:
        value = self.u8()
        return value - 256 if value > 127 else value

    def take(self, n: int) -> bytes:
        chunk = self.data[self.pos:self.pos + n]
        self.pos += len(chunk)
        return chunk


def _hostile_text(src: _Bytes, nullable: bool) -> Optional[str]:
    """A string field as a hostile client could fill it: null (where the field may be),
    empty, the wildcards, the cluster's name, up to 32 KiB of one letter, raw bytes (NULs,
    controls, any code point below 256), or a principal made of them."""
    choice = src.u8() % 8
    if choice == 0:
        return None if nullable else ""
    if choice == 1:
        return ""
    if choice == 2:
        return "*"
    if choice == 3:
        return "User:*"
    if choice == 4:
        return "kafka-cluster"
    if choice == 5:
        return "x" * (1 << (src.u8() % 16))
    raw = src.take(src.u8() % 32).decode("latin-1")
    return raw if choice == 6 else "User:" + raw


def _cluster_data_dir(authorizer: bool) -> str:
    """A data folder for a cluster of this process. libFuzzer ends a run without Python's
    exit handlers (the cluster process then ends on its own, its folder stays): the
    folders of processes that are gone are removed here."""
    import os
    import shutil
    import tempfile

    root = os.path.join(tempfile.gettempdir(), "kafka-fuzz-clusters")
    os.makedirs(root, exist_ok=True)
    for name in os.listdir(root):
        owner = name.split("-")[0]
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    return os.path.join(root, f"{os.getpid()}-{int(authorizer)}")


class _LiveCluster:
    """The test cluster the ``cluster`` harness talks to: one broker that serves the
    legacy versions, with or without the authorizer (``User:ANONYMOUS``, every plain
    connection, a super user), in its own process; started at the first input that
    needs it and stopped when the harness process exits."""

    def __init__(self, authorizer: bool) -> None:
        import atexit

        from kafka_client.testing import Cluster

        self.authorizer = authorizer
        self.data_dir = _cluster_data_dir(authorizer)
        self.cluster = Cluster(brokers=1, data_dir=self.data_dir, authorizer=authorizer,
                               super_users=("User:ANONYMOUS",) if authorizer else (),
                               broker_config={"legacy.api.versions.enable": True,
                                              "auto.create.topics.enable": False})
        self.cluster.start()
        atexit.register(self.stop)
        for topic in (_LEGACY_TOPIC, _STORED_TOPIC):
            self.cluster.create_topic(topic, partitions=1)
        self.sock = None
        self.correlation_id = 0
        self.log_offset = 0
        self.inputs = 0

    def stop(self) -> None:
        import shutil

        self.disconnect()
        self.cluster.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def disconnect(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def send(self, api_key: int, version: int, body: bytes) -> int:
        import socket

        from kafka_proto.framing import encode_request

        if self.sock is None:
            host, _, port = self.cluster.address(1).rpartition(":")
            self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation_id = (self.correlation_id + 1) & 0x7FFFFFFF
        self.sock.sendall(encode_request(body, version, self.correlation_id, "fuzz",
                                         api_key=api_key))
        return self.correlation_id

    def receive(self, api_key: int, version: int) -> Optional[bytes]:
        """The body of the answer to the last request, or None when the broker closed the
        connection (then reopened at the next request)."""
        import socket

        from kafka_proto.framing import decode_response_header

        try:
            head = self._recv_exact(4)
            frame = None if head is None else self._recv_exact(struct.unpack(">i", head)[0])
        except socket.timeout:
            _fail(f"cluster: no answer to API {api_key} v{version} within 10 s")
        if frame is None:
            self.disconnect()
            return None
        correlation_id, body = decode_response_header(frame, api_key, version)
        if correlation_id != self.correlation_id:
            _fail(f"cluster: correlation id {correlation_id}, sent {self.correlation_id}")
        return bytes(body)

    def _recv_exact(self, n: int) -> Optional[bytes]:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def request(self, request, version: int):
        """The decoded answer to ``request``, or None when the broker closed the
        connection."""
        from kafka_proto.messages import response_class

        self.send(request.API_KEY, version, request.encode(version))
        body = self.receive(request.API_KEY, version)
        if body is None:
            return None
        return response_class(request.API_KEY).decode(body, version)

    def check_health(self) -> None:
        """The process runs, stays within its memory bound, and logged no traceback."""
        if not self.cluster.running:
            _fail("cluster: the cluster process died")
        with open(self.cluster.log_path, "rb") as f:
            f.seek(self.log_offset)
            new = f.read()
        self.log_offset += len(new)
        if b"Traceback" in new:
            _fail("cluster: a traceback in the cluster's log: "
                  + new[new.index(b"Traceback"):][:1500].decode(errors="replace"))
        self.inputs += 1
        if self.inputs % 64 == 0:
            with open(f"/proc/{self.cluster.pid}/status") as f:
                rss = next(int(x.split()[1]) for x in f if x.startswith("VmRSS:")) // 1024
            if rss > _CLUSTER_RSS_LIMIT_MB:
                _fail(f"cluster: the cluster process holds {rss} MiB")


_LIVE_CLUSTERS: Dict[bool, _LiveCluster] = {}


def _live_cluster(authorizer: bool) -> _LiveCluster:
    live = _LIVE_CLUSTERS.get(authorizer)
    if live is None or not live.cluster.running:
        live = _LIVE_CLUSTERS[authorizer] = _LiveCluster(authorizer)
    return live


def start_live_clusters() -> None:
    """Start the clusters of the ``cluster`` harness now (they take a second or two), so
    that its first inputs are timed as the others."""
    for authorizer in (False, True):
        _live_cluster(authorizer)


def stop_live_clusters() -> None:
    """Stop the clusters the ``cluster`` harness started (also done at exit)."""
    while _LIVE_CLUSTERS:
        _LIVE_CLUSTERS.popitem()[1].stop()


def _acl_known(resource_type: int, pattern_type: int, operation: int,
               permission: int) -> bool:
    """Whether Kafka's request classes know every enum of a binding or filter (UNKNOWN
    and codes they do not know make the request unparsable)."""
    return 1 <= resource_type <= 7 and 1 <= pattern_type <= 4 and 1 <= operation <= 14 \
        and 1 <= permission <= 3


def _acl_creatable(acl: tuple) -> bool:
    """Kafka's checks of a binding to create (AclControlManager and the broker's)."""
    resource_type, name, pattern_type, principal, _host, operation, permission = acl
    return (2 <= resource_type <= 7 and pattern_type in (3, 4) and operation >= 2
            and permission in (2, 3) and bool(name) and ":" in principal
            and (resource_type != 4 or name == "kafka-cluster"))


def _acl_matches(flt: tuple, acl: tuple) -> bool:
    """Kafka's AclBindingFilter.matches (ResourcePatternFilter, AccessControlEntryFilter)."""
    f_type, f_name, f_pattern, f_principal, f_host, f_op, f_perm = flt
    resource_type, name, pattern_type, principal, host, operation, permission = acl
    if f_type != 1 and f_type != resource_type:
        return False
    if f_pattern not in (1, 2) and f_pattern != pattern_type:
        return False
    if f_name is not None:
        if f_pattern in (1, pattern_type):
            if f_name != name:
                return False
        elif pattern_type == 3:       # MATCH of a literal binding
            if name not in (f_name, "*"):
                return False
        elif not f_name.startswith(name):     # MATCH of a prefixed binding
            return False
    return ((f_principal is None or f_principal == principal)
            and (f_host is None or f_host == host)
            and f_op in (1, operation) and f_perm in (1, permission))


def _encodable(kind: int, entries: list, version: int) -> bool:
    """Whether the request's strings fit in a string field (32767 bytes, compact ones
    too, as Kafka's generated classes have it)."""
    return all(len((s or "").encode()) <= 0x7FFF for e in entries for s in (e[1], e[3], e[4]))


#: Kafka's implied operations: an ALLOW of any of these allows the key too.
_IMPLIED_BY = {8: (3, 4, 6, 7), 10: (11,)}


def _reference_decision(acls: list, principal: str, host: str, operation: int,
                        resource_type: int, name: str) -> bool:
    """Kafka's StandardAuthorizer (no super user, allow.everyone.if.no.acl.found false):
    of the bindings whose pattern covers the resource and whose principal and host are the
    caller's (or the wildcards), a DENY of the operation or ALL refuses; else an ALLOW of
    it, of ALL or of an operation implying it allows; else refused."""
    allowed = False
    for r_type, r_name, pattern, who, where, op, permission in acls:
        covers = r_name in (name, "*") if pattern == 3 else name.startswith(r_name)
        if r_type != resource_type or not covers or who not in (principal, "User:*") \
                or where not in (host, "*"):
            continue
        if permission == 2 and op in (operation, 2):
            return False
        if permission == 3 and (op in (operation, 2) or op in _IMPLIED_BY.get(operation, ())):
            allowed = True
    return allowed


def _check_decisions(model: Dict[tuple, None], src: _Bytes) -> None:
    """The cluster's authorizer over the bindings the input created, against the
    reference decision, for callers and resources drawn from the rest of the input."""
    from kafka_client.testing._acls import Acl, AclStore, Authorizer
    from kafka_proto.enums import (AclOperation, AclPatternType, AclPermissionType,
                                   AclResourceType)

    store = AclStore()
    for e in model:
        store.create(Acl(AclResourceType(e[0]), e[1], AclPatternType(e[2]), e[3], e[4],
                         AclOperation(e[5]), AclPermissionType(e[6])))
    authorizer = Authorizer(store, enabled=True)
    for _ in range(8):
        if src.left < 3:
            break
        operation, resource_type = 2 + src.u8() % 13, 2 + src.u8() % 6
        principal = _hostile_text(src, nullable=False)
        host = ("127.0.0.1", "10.0.0.1", "*", "")[src.u8() % 4]
        name = _hostile_text(src, nullable=False)
        got = authorizer.decide(principal, host, AclOperation(operation),
                                AclResourceType(resource_type), name)
        if got != _reference_decision(list(model), principal, host, operation,
                                      resource_type, name):
            _fail(f"cluster: the authorizer says {got} to {principal!r}@{host} "
                  f"{operation} on {resource_type}:{name[:40]!r}")


def _cluster_acls(live: _LiveCluster, src: _Bytes) -> None:
    """A sequence of CreateAcls, DescribeAcls and DeleteAcls (v1-3) with hostile fields,
    checked against a model of the cluster's ACLs."""
    from kafka_proto.errors import ErrorCode
    from kafka_proto.messages import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest

    everything = DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
        principal_filter=None, host_filter=None, operation=1, permission_type=1)
    model: Dict[tuple, None] = {}
    if live.authorizer:   # start from no ACLs
        if live.request(DeleteAclsRequest(filters=[everything]), 1) is None:
            _fail("cluster: DeleteAcls of everything closed the connection")
    disabled = ErrorCode.SECURITY_DISABLED
    for _ in range(1 + (src.u8() & 7)):
        if src.left < 2:
            break
        op = src.u8()
        kind, version = op & 3, 1 + (op >> 2 & 3) % 3
        count = 1 + src.u8() % 4
        entries = []
        for _ in range(1 if kind in (1, 3) else count):
            codes = [src.i8() for _ in range(4)]
            name = _hostile_text(src, nullable=kind != 0)
            principal = _hostile_text(src, nullable=kind != 0)
            host = _hostile_text(src, nullable=kind != 0)
            entries.append((codes[0], name, codes[1], principal, host, codes[2], codes[3]))
        if kind not in (1, 3):
            # thousands of bindings, within 4 MiB of strings
            size = sum(len(s or "") for e in entries for s in (e[1], e[3], e[4])) + 1
            repeat = max(1, min(1 << (op >> 4), (4 << 20) // size))
            entries = (entries * repeat)[:max(len(entries), _MAX_ACL_ENTRIES)]
        known = all(_acl_known(e[0], e[2], e[5], e[6]) for e in entries)
        if not _encodable(kind, entries, version):
            continue    # a string longer than the version's int16 length can say
        if kind == 0:
            creations = [CreateAclsRequest.AclCreation(
                resource_type=e[0], resource_name=e[1], resource_pattern_type=e[2],
                principal=e[3], host=e[4], operation=e[5], permission_type=e[6])
                for e in entries]
            resp = live.request(CreateAclsRequest(creations=creations), version)
            codes = None if resp is None else [r.error_code for r in resp.results]
            want = [disabled] * len(entries) if not live.authorizer else [
                ErrorCode.NONE if _acl_creatable(e) else ErrorCode.INVALID_REQUEST
                for e in entries]
            if known and live.authorizer:
                for e in entries:
                    if _acl_creatable(e):
                        model.setdefault(e, None)
        elif kind == 2:
            filters = [DeleteAclsRequest.DeleteAclsFilter(
                resource_type_filter=e[0], resource_name_filter=e[1], pattern_type_filter=e[2],
                principal_filter=e[3], host_filter=e[4], operation=e[5], permission_type=e[6])
                for e in entries]
            resp = live.request(DeleteAclsRequest(filters=filters), version)
            codes, want = None, None
            if resp is not None:
                codes = [(r.error_code, sorted(
                    (a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host,
                     a.operation, a.permission_type) for a in r.matching_acls))
                    for r in resp.filter_results]
            if not live.authorizer:
                want = [(disabled, [])] * len(entries)
            elif known:
                want = [(ErrorCode.NONE, sorted(a for a in model if _acl_matches(e, a)))
                        for e in entries]
                for e in entries:
                    for a in [a for a in model if _acl_matches(e, a)]:
                        del model[a]
        else:
            e = entries[0]
            resp = live.request(DescribeAclsRequest(
                resource_type_filter=e[0], resource_name_filter=e[1], pattern_type_filter=e[2],
                principal_filter=e[3], host_filter=e[4], operation=e[5], permission_type=e[6]),
                version)
            codes = None if resp is None else (resp.error_code, sorted(
                (r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host,
                 a.operation, a.permission_type) for r in resp.resources for a in r.acls))
            want = (disabled, []) if not live.authorizer else \
                (ErrorCode.NONE, sorted(a for a in model if _acl_matches(e, a)))
        if not known:
            if resp is not None:
                _fail(f"cluster: ACL request {kind} v{version} with an UNKNOWN part answered")
            continue
        if resp is None:
            _fail(f"cluster: ACL request {kind} v{version} closed the connection")
        if codes != want:
            _fail(f"cluster: ACL request {kind} v{version}: {str(codes)[:300]} where Kafka "
                  f"gives {str(want)[:300]}")
    if live.authorizer:
        _check_decisions(model, src)


def _produce(live: _LiveCluster, topic: str, partition: int, records: bytes, version: int,
             acks: int):
    from kafka_proto.messages import MetadataRequest, ProduceRequest

    req = ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=records)])])
    if acks == 0:
        live.send(req.API_KEY, version, req.encode(version))
        if live.request(MetadataRequest(topics=None), 1) is None:
            _fail("cluster: the connection closed after an acks=0 Produce")
        return None
    resp = live.request(req, version)
    if resp is None:
        _fail(f"cluster: Produce v{version} closed the connection")
    parts = [p for t in resp.responses for p in t.partition_responses]
    if len(parts) != 1 or parts[0].index != partition:
        _fail(f"cluster: Produce answered {len(parts)} partitions")
    return parts[0]


def _fetch(live: _LiveCluster, topic: str, offset: int, version: int, max_bytes: int):
    from kafka_proto.messages import FetchRequest

    resp = live.request(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0,
                                     max_bytes=max_bytes, topics=[
        FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)])]), version)
    if resp is None:
        _fail(f"cluster: Fetch v{version} closed the connection")
    parts = [p for t in resp.responses for p in t.partitions]
    if len(parts) != 1:
        _fail(f"cluster: Fetch answered {len(parts)} partitions")
    return parts[0]


def _cluster_legacy_produce(live: _LiveCluster, src: _Bytes) -> None:
    """A legacy message set at Produce v0-2; what is stored must read back the same, as a
    v2 batch and down-converted."""
    from kafka_proto.errors import ErrorCode

    opts = src.u8()
    version, acks = opts % 3, (1, -1, 0, 2)[opts >> 2 & 3]
    partition = 5 if opts & 0x10 else 0
    records = src.take(src.left)
    if opts & 0x20:
        records = _fix_crcs(records)
    part = _produce(live, _LEGACY_TOPIC, partition, records, version, acks)
    if part is None:
        return
    if acks == 2:
        want = {ErrorCode.INVALID_REQUIRED_ACKS}
    elif partition:
        want = {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    else:
        want = {ErrorCode.NONE, ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD,
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, ErrorCode.MESSAGE_TOO_LARGE,
                ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.INVALID_TIMESTAMP}
    if part.error_code not in want:
        _fail(f"cluster: Produce v{version} answered {part.error_code}")
    if part.error_code != ErrorCode.NONE:
        return
    from kafka_proto.records import read_batches

    sent = [(_b(r.key), _b(r.value)) for b in read_batches(records) for r in b]
    stored = _fetch(live, _LEGACY_TOPIC, part.base_offset, 12, 1 << 22)
    got = [(r.offset, _b(r.key), _b(r.value)) for b in read_batches(stored.records)
           for r in b]
    if [(k, v) for _o, k, v in got[:len(sent)]] != sent or \
            [o for o, _k, _v in got[:len(sent)]] != list(range(part.base_offset,
                                                              part.base_offset + len(sent))):
        _fail(f"cluster: Produce v{version} stored {got[:3]}... for {sent[:3]}...")
    old = _fetch(live, _LEGACY_TOPIC, part.base_offset, 2 + version % 2, 1 << 22)
    if old.error_code == ErrorCode.NONE:
        rows = [(o, k, v) for o, _t, k, v in _legacy_rows(old.records)]
        if not rows or rows != got[:len(rows)]:
            _fail(f"cluster: Fetch v{2 + version % 2} gave {rows[:3]}... for {got[:3]}...")


def _cluster_fetch_converted(live: _LiveCluster, src: _Bytes) -> None:
    """v2 batches produced at Produce v3+ (the cluster keeps what a producer may store),
    then fetched at v0-3: down-converted rows that are the stored records."""
    from kafka_proto.errors import ErrorCode
    from kafka_proto.records import iter_batch_headers, read_batches

    opts = src.u8()
    version, where = opts & 3, opts >> 2 & 3
    d = src.i8()
    max_bytes = (64, 1024, 65536, 1 << 20)[src.u8() & 3]
    blob = src.take(src.left)
    if opts & 0x10:
        blob = _fix_crcs(blob)
    pieces = [blob[h.position:h.end] for h in iter_batch_headers(blob)] or [blob]
    stored: Dict[int, tuple] = {}
    first = last = None
    for piece in pieces[:8]:
        part = _produce(live, _STORED_TOPIC, 0, piece, 3 + len(stored) % 6, -1)
        if part.error_code != ErrorCode.NONE:
            continue
        records = [(_b(r.key), _b(r.value)) for b in read_batches(piece) for r in b]
        for i, row in enumerate(records):
            stored[part.base_offset + i] = row
        first = part.base_offset if first is None else first
        last = part.base_offset + len(records) - 1
    if first is None:
        return
    start = (first, max(0, first + d), last + 1, first + abs(d))[where]
    got = _fetch(live, _STORED_TOPIC, start, version, max_bytes)
    if got.error_code not in (ErrorCode.NONE, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                              ErrorCode.OFFSET_OUT_OF_RANGE):
        _fail(f"cluster: Fetch v{version} answered {got.error_code}")
    try:
        rows = _legacy_rows(got.records or b"")
    except CODEC_ERRORS as exc:
        _fail(f"cluster: Fetch v{version}'s records do not read: {exc!r}")
    offsets = [o for o, *_ in rows]
    if any(a >= b for a, b in zip(offsets, offsets[1:])):
        _fail(f"cluster: Fetch v{version} offsets {offsets[:8]} do not go up")
    for offset, _ts, key, value in rows:
        if offset >= first and stored.get(offset, (key, value)) != (key, value):
            _fail(f"cluster: Fetch v{version} gave {offset}: {key!r} {value!r}, "
                  f"stored {stored.get(offset)}")


def _cluster_raw(live: _LiveCluster, src: _Bytes) -> None:
    """A body as it comes for one of the APIs of the new surfaces, at any version: the
    connection closes exactly when Kafka would not parse it, else the answer decodes."""
    from kafka_proto.messages import API_KEYS, ApiKey, MetadataRequest, request_class, \
        response_class

    from kafka_client.testing._api import VALIDATORS, supported_versions

    importlib.import_module("kafka_client.testing._server")   # registers every handler

    keys = (ApiKey.CREATE_ACLS, ApiKey.DESCRIBE_ACLS, ApiKey.DELETE_ACLS, ApiKey.PRODUCE,
            ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH)
    api_key = keys[src.u8() % len(keys)]
    version = src.u8() % (API_KEYS[api_key].max_version + 1)
    body = src.take(src.left)
    lo, hi = supported_versions(legacy=True)[api_key]
    parsed = None
    if lo <= version <= hi:
        try:
            parsed, _used = request_class(api_key).decode_prefix(body, version)
        except (KafkaProtocolError, ValueError):
            parsed = None
    if parsed is not None and api_key in VALIDATORS and VALIDATORS[api_key](parsed, version):
        parsed = None
    if parsed is not None and api_key == ApiKey.FETCH and parsed.max_wait_ms > 1000 and \
            parsed.min_bytes > 0:
        return    # a long poll Kafka would hold as long: not this harness' subject
    live.send(api_key, version, body)
    if parsed is not None and api_key == ApiKey.PRODUCE and parsed.acks == 0:
        if live.request(MetadataRequest(topics=None), 1) is None:
            _fail("cluster: the connection closed after an acks=0 Produce")
        return
    answer = live.receive(api_key, version)
    if parsed is None:
        if answer is not None:
            _fail(f"cluster: API {api_key} v{version} answered a request Kafka refuses")
        return
    if answer is None:
        _fail(f"cluster: API {api_key} v{version} closed the connection on a request that "
              "parses")
    try:
        response_class(api_key).decode(answer, version)
    except KafkaProtocolError as exc:
        _fail(f"cluster: API {api_key} v{version}'s answer does not decode: {exc!r}")


def check_cluster(data: bytes) -> None:
    """The test cluster (``kafka_client.testing``), live in its own process, on the
    request surfaces added with the authorizer and the legacy versions.

    Layout: byte 0 (bit 0: the cluster with the authorizer; bits 1-2: the surface), then
    by surface: 0 ACLs: a count byte (1-8 requests), the requests, each an op byte (bits
    0-1 CreateAcls, DescribeAcls, DeleteAcls, DescribeAcls; bits 2-3 version 1-3; bits 4-7
    log2 of the repetition of the entries, up to 4096), a count byte (1-4 entries), per
    entry four int8 enums and three hostile strings; then (with the authorizer) up to 8
    questions to the authorizer over the bindings created (operation, resource type,
    principal, host, name), checked against a reference decision; 1 legacy Produce: an
    option byte (version 0-2, bits 2-3 acks 1/-1/0/2, bit 4 an unknown partition, bit 5
    CRCs recomputed), then the message set; 2 Fetch v0-3 of stored batches: an option byte
    (bits 0-1 version, bits 2-3 where: the first batch, + d, the end, + |d|; bit 4 CRCs
    recomputed), d (int8), a byte choosing the byte limit (64 B-1 MiB), then v2 batches
    produced one by one at Produce v3-8; 3 raw: an API (the ACL APIs, Produce, Fetch,
    ListOffsets, OffsetCommit, OffsetFetch), a version (any), the body as it comes.
    """
    if not data:
        return
    live = _live_cluster(bool(data[0] & 1))
    src = _Bytes(data)
    surface = src.u8() >> 1 & 3
    try:
        (_cluster_acls, _cluster_legacy_produce, _cluster_fetch_converted,
         _cluster_raw)[surface](live, src)
    finally:
        live.check_health()


#: Harness name -> check function (names are the corpus folders).
HARNESSES: Dict[str, Callable[[bytes], None]] = {
    "records": check_records,
    "compression": check_compression,
    "responses": check_responses,
    "framing": check_framing,
    "client": check_client_all,
    "consumer": check_consumer,
    "listoffsets": check_listoffsets,
    "group": check_group,
    "producer": check_producer,
    "transactions": check_transactions,
    "admin": check_admin,
    "share": check_share,
    "telemetry": check_telemetry,
    "downconvert": check_downconvert,
    "cluster": check_cluster,
}
