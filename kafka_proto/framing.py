"""Size-prefixed frames, request/response headers and correlation ids (sans-I/O).

Every Kafka request and response travels as ``int32 size`` + ``size`` bytes. A request's
bytes are its header (v0: api_key, api_version, correlation_id; v1 adds client_id as a
classic nullable string; v2 adds an empty tagged-field section) and then its body. A
response's bytes are its header (v0: correlation_id; v1 adds tagged fields) and its body.

* :class:`FrameParser` cuts a byte stream into frames; feed it chunks of any size, or let
  a socket ``recv_into`` its buffer (:meth:`FrameParser.buffer_for_read` /
  :meth:`FrameParser.commit`) so that large frames are received in place, without copies.
* :func:`encode_request` / :func:`encode_request_parts` frame a request object (anything
  with ``encode(version) -> bytes`` and an API key).
* :func:`decode_response_header` splits a response frame into correlation id and body.
* The server side: :func:`peek_request` and :func:`decode_request_header` split a request
  frame into its header and body; :func:`encode_response_header` and
  :func:`encode_response` frame a response; :func:`encode_frame` sizes a bare payload
  (SASL tokens after SaslHandshake v0).
* :class:`CorrelationTracker` hands out correlation ids and matches responses to requests.
* :func:`encode_version_prefixed` / :func:`decode_version_prefixed`: the ``int16 version``
  + struct blobs that travel inside other messages (the consumer protocol's subscription
  and assignment in JoinGroup and SyncGroup).

:mod:`kafka_proto.protocol` puts these pieces together into one broker conversation.
"""
from __future__ import annotations

import struct
from collections import OrderedDict
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple, Type, TypeVar, Union

from kafka_proto._wire import Reader, Writer
from kafka_proto.errors import (
    CorrelationIdError,
    InvalidLengthError,
    InvalidVarintError,
    ProtocolDecodeError,
    ProtocolEncodeError,
    TruncatedDataError,
    UnsupportedVersionError,
)
from kafka_proto.messages import request_header_version, response_header_version

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameParser",
    "InFlight",
    "CorrelationTracker",
    "encode_request_header",
    "encode_request",
    "encode_request_parts",
    "encode_request_into",
    "decode_response_header",
    "peek_correlation_id",
    "RequestPeek",
    "RequestHead",
    "peek_request",
    "decode_request_header",
    "encode_response_header",
    "encode_response",
    "encode_frame",
    "request_header_version",
    "response_header_version",
    "encode_version_prefixed",
    "decode_version_prefixed",
]

BytesLike = Union[bytes, bytearray, memoryview]

#: Same default as librdkafka's ``receive.message.max.bytes`` (100 MB).
DEFAULT_MAX_FRAME_SIZE = 100_000_000

_INT32 = struct.Struct(">i")
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
#: Zeros a growing frame buffer is extended with (read only, shared by every parser).
_ZEROS = memoryview(bytes(1 << 20))


# --------------------------------------------------------------------------- frame parser


class FrameParser:
    """Cut a byte stream into frames (payloads without their 4-byte size).

    Each frame gets a buffer of its own and is returned as a ``memoryview`` over it: frames
    never alias each other or the parser's scratch space, so callers may keep them as long
    as they like, and the parser copies each byte at most once (not at all for large frames
    read with :meth:`buffer_for_read`; growing a buffer is a realloc, which may move it,
    amortised by the doubling).

    Memory follows the bytes received, not the size a frame announces: a frame's buffer
    starts at :attr:`INITIAL_FRAME_BUFFER` bytes (or what the current chunk holds of it)
    and doubles as its bytes arrive, up to the announced size. So a frame in progress
    never holds more than ``max(INITIAL_FRAME_BUFFER, 4 * bytes received)``, whatever
    size its prefix claims; a complete frame's buffer is exactly its size.

    A size below zero or above ``max_frame_size`` raises :class:`InvalidLengthError`; the
    stream cannot be resynchronised after that, so the parser stays failed (every later
    call raises too) and the connection must be closed. The error raised by the
    :meth:`feed` or :meth:`commit` call that meets the bad size carries, as its ``frames``
    attribute, the frames that same call completed before it (a list, possibly empty):
    they are valid and are not returned any other way. Errors raised by later calls have
    ``frames == []``.
    """

    #: Above this many missing bytes, buffer_for_read() hands out the frame's own buffer.
    DIRECT_READ_THRESHOLD = 32 * 1024
    #: First buffer size of a frame whose bytes are not all there yet (then doubled).
    INITIAL_FRAME_BUFFER = 64 * 1024

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 read_size: int = 64 * 1024) -> None:
        if max_frame_size < 0 or max_frame_size > _INT32_MAX:
            raise ValueError("max_frame_size must be within 0..2**31-1")
        if read_size < 16:
            raise ValueError("read_size must be at least 16")
        self.max_frame_size = max_frame_size
        self._size_buf = bytearray(4)
        self._size_have = 0
        # The frame in progress: its buffer (len() is the capacity, <= _frame_size), the
        # size its prefix announced, and how many of its bytes arrived.
        self._frame: Optional[bytearray] = None
        self._frame_size = 0
        self._frame_have = 0
        self._scratch = bytearray(read_size)
        self._direct = False  # last buffer_for_read() was the frame buffer itself
        self._error: Optional[str] = None
        self._too_large = False  # the bad size is above max_frame_size (not negative)

    @property
    def buffered(self) -> int:
        """Bytes received of the frame in progress (size prefix included)."""
        if self._frame is not None:
            return 4 + self._frame_have
        return self._size_have

    @property
    def in_frame(self) -> bool:
        """True between the first byte of a frame and its last."""
        return self._size_have > 0 or self._frame is not None

    @property
    def capacity(self) -> int:
        """Bytes allocated for the frame in progress (0 between frames)."""
        frame = self._frame
        return 0 if frame is None else len(frame)

    def feed(self, data: BytesLike) -> List[memoryview]:
        """Add received bytes; return the frames they complete (possibly none).

        On an invalid frame size, raises :class:`InvalidLengthError` whose ``frames`` are
        the frames this call completed before the bad size, and ``too_large`` says whether
        the size was above ``max_frame_size`` (else negative).
        """
        if self._error is not None:
            raise self._failed()
        mv = memoryview(data)
        if mv.ndim != 1 or mv.itemsize != 1:
            mv = mv.cast("B")
        frames: List[memoryview] = []
        pos, end = 0, len(mv)
        while pos < end:
            frame = self._frame
            if frame is None:
                # Fast path: a whole size prefix available in this chunk.
                if self._size_have == 0 and end - pos >= 4:
                    (size,) = _INT32.unpack_from(mv, pos)
                    pos += 4
                else:
                    take = min(4 - self._size_have, end - pos)
                    self._size_buf[self._size_have:self._size_have + take] = mv[pos:pos + take]
                    self._size_have += take
                    pos += take
                    if self._size_have < 4:
                        break
                    (size,) = _INT32.unpack_from(self._size_buf, 0)
                self._size_have = 0
                if 0 <= size <= end - pos and size <= self.max_frame_size:
                    # Whole frame in this chunk: one allocation and copy, no state.
                    frames.append(memoryview(bytearray(mv[pos:pos + size])))
                    pos += size
                    continue
                if size < 0 or size > self.max_frame_size:
                    what = "negative" if size < 0 else f"above the limit of {self.max_frame_size}"
                    self._error = f"frame size {size} is {what}"
                    self._too_large = size > 0
                    raise self._failed(frames)
                # Part of the frame is here: room for that part (at least the initial
                # buffer), never for what the peer only announced.
                frame = self._start_frame(size, end - pos)
            have = self._frame_have
            take = min(self._frame_size - have, end - pos)
            if have + take > len(frame):
                frame = self._grow(have + take)
            frame[have:have + take] = mv[pos:pos + take]
            pos += take
            have += take
            if have == self._frame_size:
                # Capacity never exceeds the size, so the buffer is exactly the frame.
                frames.append(memoryview(frame))
                self._frame = None
                self._frame_have = 0
            else:
                self._frame_have = have
        return frames

    def buffer_for_read(self) -> memoryview:
        """A writable buffer for ``sock.recv_into``; pass the byte count to :meth:`commit`.

        While a large frame is missing many bytes this is the free tail of that frame's
        own buffer (received in place; the buffer grows as it fills); otherwise a scratch
        buffer whose bytes :meth:`commit` copies into frames. Do not keep the view after
        ``commit``.
        """
        if self._error is not None:
            raise self._failed()
        frame = self._frame
        if frame is not None:
            have = self._frame_have
            if self._frame_size - have >= self.DIRECT_READ_THRESHOLD:
                if len(frame) - have < self.DIRECT_READ_THRESHOLD:
                    # Little room left: double (have >= half the capacity here, so the
                    # buffer stays within four times the bytes received).
                    frame = self._grow(have + self.DIRECT_READ_THRESHOLD)
                self._direct = True
                return memoryview(frame)[have:]
        self._direct = False
        return memoryview(self._scratch)

    def commit(self, n: int) -> List[memoryview]:
        """Account for ``n`` bytes written into the last :meth:`buffer_for_read` view."""
        if n < 0:
            raise ValueError("negative byte count")
        if self._direct:
            self._direct = False
            frame = self._frame
            assert frame is not None
            if n > len(frame) - self._frame_have:
                raise ValueError("commit() of more bytes than the buffer had room for")
            self._frame_have += n
            if self._frame_have < self._frame_size:
                return []
            self._frame = None
            self._frame_have = 0
            return [memoryview(frame)]
        if n > len(self._scratch):
            raise ValueError("commit() of more bytes than the buffer had room for")
        return self.feed(memoryview(self._scratch)[:n])

    def reset(self) -> None:
        """Forget any partial frame and error (for a new connection)."""
        self._size_have = 0
        self._frame = None
        self._frame_size = 0
        self._frame_have = 0
        self._direct = False
        self._error = None
        self._too_large = False

    def _failed(self, frames: Optional[List[memoryview]] = None) -> InvalidLengthError:
        # A fresh exception per call: each carries only the frames of its own call.
        err = InvalidLengthError(self._error)
        err.frames = [] if frames is None else frames  # type: ignore[attr-defined]
        err.too_large = self._too_large  # type: ignore[attr-defined]
        return err

    def _start_frame(self, size: int, available: int) -> bytearray:
        # size was checked against max_frame_size; the buffer is bounded by the bytes at
        # hand (or the initial size), not by what the prefix claims.
        self._frame = bytearray(min(size, max(self.INITIAL_FRAME_BUFFER, available)))
        self._frame_size = size
        self._frame_have = 0
        return self._frame

    def _grow(self, need: int) -> bytearray:
        frame = self._frame
        assert frame is not None
        cap = min(self._frame_size, max(need, 2 * len(frame)))
        try:
            # In place: the received bytes stay put (realloc). Zeros come from a shared
            # block: a fresh bytes(n) each time costs page faults (about 10x slower).
            missing = cap - len(frame)
            while missing > 0:
                step = min(missing, len(_ZEROS))
                frame += _ZEROS[:step]
                missing -= step
        except BufferError:
            # A caller still holds a buffer_for_read() view: move to a new buffer.
            new = bytearray(cap)
            new[:self._frame_have] = memoryview(frame)[:self._frame_have]
            self._frame = frame = new
        return frame


# --------------------------------------------------------------------------- headers
# request_header_version / response_header_version come from kafka_proto.messages (they
# follow each API's flexible versions) and are re-exported here beside the headers.


def _encode_client_id(client_id: Optional[str]) -> bytes:
    if client_id is None:
        return b"\xff\xff"
    raw = client_id.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ProtocolEncodeError(f"client_id is {len(raw)} bytes, the limit is 32767")
    return len(raw).to_bytes(2, "big") + raw


def _check_header_fields(api_key: int, api_version: int, correlation_id: int) -> None:
    if not -0x8000 <= api_key <= 0x7FFF:
        raise ProtocolEncodeError(f"api_key {api_key} out of int16 range")
    if not -0x8000 <= api_version <= 0x7FFF:
        raise ProtocolEncodeError(f"api_version {api_version} out of int16 range")
    if not _INT32_MIN <= correlation_id <= _INT32_MAX:
        raise ProtocolEncodeError(f"correlation_id {correlation_id} out of int32 range")


def encode_request_header(api_key: int, api_version: int, correlation_id: int,
                          client_id: Optional[str], header_version: int) -> bytes:
    """The request header bytes (no size prefix) of the given header version (0, 1, 2)."""
    _check_header_fields(api_key, api_version, correlation_id)
    head = struct.pack(">hhi", api_key, api_version, correlation_id)
    if header_version == 0:
        return head
    if header_version == 1:
        return head + _encode_client_id(client_id)
    if header_version == 2:
        # client_id keeps the classic int16 length even here; then no tagged fields.
        return head + _encode_client_id(client_id) + b"\x00"
    raise ProtocolEncodeError(f"unknown request header version {header_version}")


def _header_for(request: Any, api_version: int, correlation_id: int,
                client_id: Optional[str], api_key: Optional[int],
                header_version: Optional[int]) -> bytes:
    """The header of ``request``'s frame; the API key from the request unless given."""
    if api_key is None:
        for attr in ("API_KEY", "api_key", "_api_key"):
            api_key = getattr(request, attr, None)
            if isinstance(api_key, int):
                break
        else:
            raise TypeError(f"{type(request).__name__} has no API key (API_KEY attribute)")
    if header_version is None:
        header_version = request_header_version(api_key, api_version)
    return encode_request_header(api_key, api_version, correlation_id, client_id,
                                 header_version)


def encode_request_parts(request: Any, api_version: int, correlation_id: int,
                         client_id: Optional[str] = None, *,
                         api_key: Optional[int] = None,
                         header_version: Optional[int] = None) -> List[BytesLike]:
    """``[size prefix + header, *body parts]`` for ``socket.sendmsg`` (no concatenation
    copy: the record batches of a Produce request stay where they are). Empty parts are
    left out (an empty body gives the header part alone).

    ``request`` is a generated message object (encoded with ``encode_parts(version)``
    when it has that method, else ``encode(version)``), or its already encoded body: one
    bytes-like object or a list of them (then pass ``api_key``).
    """
    header = _header_for(request, api_version, correlation_id, client_id, api_key,
                         header_version)
    if isinstance(request, (bytes, bytearray, memoryview)):
        body: Sequence[BytesLike] = (request,)
    elif isinstance(request, (list, tuple)):
        body = request
    elif hasattr(request, "encode_parts"):
        body = request.encode_parts(api_version)
    else:
        body = (request.encode(api_version),)
    parts: List[BytesLike] = [b""]
    size = len(header)
    for part in body:
        if len(part):  # an empty part would make a writer spin on zero-byte sends
            parts.append(part)
            size += len(part)
    if size > _INT32_MAX:
        raise ProtocolEncodeError(f"request of {size} bytes does not fit an int32 size")
    parts[0] = _INT32.pack(size) + header
    return parts


def encode_request(request: Any, api_version: int, correlation_id: int,
                   client_id: Optional[str] = None, *, api_key: Optional[int] = None,
                   header_version: Optional[int] = None) -> bytes:
    """The complete request frame: size prefix, header, body."""
    w = Writer()
    encode_request_into(w, request, api_version, correlation_id, client_id,
                        api_key=api_key, header_version=header_version)
    return w.getvalue()


def encode_request_into(writer: Any, request: Any, api_version: int, correlation_id: int,
                        client_id: Optional[str] = None, *, api_key: Optional[int] = None,
                        header_version: Optional[int] = None) -> int:
    """Append the complete request frame to a :class:`kafka_proto._wire.Writer`, the body
    encoded in place after the header (several pipelined requests can share one writer).
    Returns the frame's length including its size prefix."""
    header = _header_for(request, api_version, correlation_id, client_id, api_key,
                         header_version)
    start = writer.reserve(4)
    writer.write_raw(header)
    if isinstance(request, (bytes, bytearray, memoryview)):
        writer.write_raw(request)
    else:
        request.encode_into(writer, api_version)
    size = len(writer) - start - 4
    if size > _INT32_MAX:
        raise ProtocolEncodeError(f"request of {size} bytes does not fit an int32 size")
    writer.patch_int32(start, size)
    return size + 4


def _read_uvarint(mv: memoryview, pos: int, end: int) -> Tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise TruncatedDataError("header: truncated tagged-field varint")
        b = mv[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise InvalidVarintError("header: tagged-field varint longer than 5 bytes")


def _skip_tagged_fields(mv: memoryview, pos: int, end: int, where: str) -> int:
    """The position after a header's tagged-field section (none is defined for headers
    yet, so their contents are skipped)."""
    count, pos = _read_uvarint(mv, pos, end)
    for _ in range(count):
        _tag, pos = _read_uvarint(mv, pos, end)
        size, pos = _read_uvarint(mv, pos, end)
        if size > end - pos:
            raise InvalidLengthError(f"{where}: tagged field of {size} bytes, {end - pos} left")
        pos += size
    return pos


def peek_correlation_id(frame: BytesLike) -> int:
    """The correlation id of a response frame (its first field in every header version),
    to find the request, and so the header version, before decoding the header."""
    if len(frame) < 4:
        raise TruncatedDataError(f"response frame of {len(frame)} bytes has no correlation id")
    return _INT32.unpack_from(frame, 0)[0]


def decode_response_header(frame: BytesLike, api_key: int, api_version: int,
                           header_version: Optional[int] = None) -> Tuple[int, memoryview]:
    """Split a response frame into ``(correlation_id, body)``; the body is a zero-copy view.

    Header tagged fields (v1) are skipped: none is defined for responses yet.
    """
    if header_version is None:
        header_version = response_header_version(api_key, api_version)
    mv = memoryview(frame)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    end = len(mv)
    if end < 4:
        raise TruncatedDataError(f"response frame of {end} bytes has no correlation id")
    (correlation_id,) = _INT32.unpack_from(mv, 0)
    pos = 4
    if header_version == 1:
        pos = _skip_tagged_fields(mv, pos, end, "response header")
    elif header_version != 0:
        raise ValueError(f"unknown response header version {header_version}")
    return correlation_id, mv[pos:]


# --------------------------------------------------------------------------- the server side


class RequestPeek(NamedTuple):
    """The first three fields of every request header version: enough to tell whether
    the request can be served before its header version is known."""

    api_key: int
    api_version: int
    correlation_id: int


class RequestHead(NamedTuple):
    """A decoded request header."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: Optional[str]
    #: 0, 1 or 2 (2: the API version is flexible; tagged fields follow the client id)
    header_version: int


_REQUEST_PEEK = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")


def peek_request(frame: BytesLike) -> RequestPeek:
    """``(api_key, api_version, correlation_id)`` of a request frame (size prefix already
    removed), read before the API and version are known to be supported: a broker
    answers an unknown ApiVersions version in v0 (KIP-511) and closes the connection for
    anything else it does not know."""
    if len(frame) < _REQUEST_PEEK.size:
        raise TruncatedDataError(f"request frame of {len(frame)} bytes has no header")
    return RequestPeek._make(_REQUEST_PEEK.unpack_from(frame, 0))


def decode_request_header(frame: BytesLike, header_version: Optional[int] = None
                          ) -> Tuple[RequestHead, memoryview]:
    """Split a request frame into its header and its body (a zero-copy view).

    ``header_version`` None takes it from the API key and version
    (:func:`request_header_version`, which raises :class:`UnsupportedVersionError` for an
    API or version this codec does not know). Tagged header fields are skipped (none is
    defined for requests). Raises :class:`TruncatedDataError` for a header cut short and
    :class:`InvalidLengthError` for a malformed client id length (a client id that is not
    UTF-8 reads with replacement characters, as Kafka reads it).
    """
    mv = memoryview(frame)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    api_key, api_version, correlation_id = peek_request(mv)
    if header_version is None:
        header_version = request_header_version(api_key, api_version)
    end = len(mv)
    pos = _REQUEST_PEEK.size
    client_id: Optional[str] = None
    if header_version >= 1:
        if end < pos + 2:
            raise TruncatedDataError("request header: truncated client_id length")
        (n,) = _INT16.unpack_from(mv, pos)
        pos += 2
        if n >= 0:
            if end < pos + n:
                raise TruncatedDataError(
                    f"request header: client_id of {n} bytes, {end - pos} left")
            # Bad bytes become U+FFFD, as a Kafka broker reads them.
            client_id = str(mv[pos:pos + n], "utf-8", "replace")
            pos += n
        elif n != -1:
            raise InvalidLengthError(f"request header: client_id length {n}")
    if header_version >= 2:
        pos = _skip_tagged_fields(mv, pos, end, "request header")
    elif header_version not in (0, 1):
        raise ValueError(f"unknown request header version {header_version}")
    head = RequestHead(api_key, api_version, correlation_id, client_id, header_version)
    return head, mv[pos:]


def encode_response_header(api_key: int, api_version: int, correlation_id: int,
                           body_size: int, header_version: Optional[int] = None) -> bytes:
    """Size prefix and response header of a frame whose body of ``body_size`` bytes is
    written after it in parts of its own (``socket.sendmsg``, ``os.sendfile``)."""
    if header_version is None:
        header_version = response_header_version(api_key, api_version)
    if not _INT32_MIN <= correlation_id <= _INT32_MAX:
        raise ProtocolEncodeError(f"correlation_id {correlation_id} out of int32 range")
    if header_version == 0:
        size = 4 + body_size
        header = _INT32.pack(correlation_id)
    elif header_version == 1:
        size = 5 + body_size  # no tagged fields
        header = _INT32.pack(correlation_id) + b"\x00"
    else:
        raise ProtocolEncodeError(f"unknown response header version {header_version}")
    if not 0 <= size <= _INT32_MAX or body_size < 0:
        raise ProtocolEncodeError(f"response of {body_size} bytes does not fit an int32 size")
    return _INT32.pack(size) + header


def encode_frame(payload: BytesLike) -> bytes:
    """``payload`` with its ``int32`` size in front: how SASL tokens travel after
    SaslHandshake v0, outside any request or response."""
    if len(payload) > _INT32_MAX:
        raise ProtocolEncodeError(f"a frame of {len(payload)} bytes does not fit an int32 size")
    return _INT32.pack(len(payload)) + bytes(payload)


def encode_response(response: Any, api_version: int, correlation_id: int, *,
                    api_key: Optional[int] = None,
                    header_version: Optional[int] = None) -> bytes:
    """The complete response frame: size prefix, header, body. ``response`` is a generated
    response object, or its already encoded body (then pass ``api_key``)."""
    if isinstance(response, (bytes, bytearray, memoryview)):
        body = bytes(response)
    else:
        body = response.encode(api_version)
        if api_key is None:
            api_key = response.API_KEY
    if api_key is None:
        raise TypeError("encode_response: api_key is needed for an encoded body")
    return encode_response_header(api_key, api_version, correlation_id, len(body),
                                  header_version) + body


# --------------------------------------------------------------------------- version prefix

M = TypeVar("M")


def encode_version_prefixed(message: Any, version: int) -> bytes:
    """``int16 version`` followed by ``message`` encoded at that version: how a struct
    travels inside another message's bytes field (JoinGroup's protocol metadata carries a
    ConsumerProtocolSubscription this way, SyncGroup's assignment a
    ConsumerProtocolAssignment).

    Raises :class:`UnsupportedVersionError` for a version the message class does not have
    and :class:`ProtocolEncodeError` for values the wire cannot carry.
    """
    cls = type(message)
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        raise UnsupportedVersionError(
            f"{cls.__qualname__} has versions {cls.MIN_VERSION}-{cls.MAX_VERSION}, "
            f"not {version}")
    w = Writer()
    w.write_int16(version)
    message.encode_into(w, version)
    return w.getvalue()


def decode_version_prefixed(cls: Type[M], data: BytesLike) -> M:
    """Decode an ``int16 version`` + struct blob written by any client.

    A version newer than ``cls`` knows is read as its newest (later versions only append
    fields) and bytes after the fields read are ignored, as the Java client does. Raises
    :class:`ProtocolDecodeError` (or a subclass) for malformed bytes or a negative version.
    """
    r = Reader(data)
    version = r.read_int16()
    if version < 0:
        raise ProtocolDecodeError(f"{cls.__qualname__}: invalid version {version}")
    return cls.decode_from(r, min(version, cls.MAX_VERSION))  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- correlation


class InFlight(NamedTuple):
    """What was sent under one correlation id."""

    correlation_id: int
    api_key: int
    api_version: int
    data: Any


class CorrelationTracker:
    """Correlation ids for one connection, and what each request was.

    Ids count up from ``start`` and wrap from 2**31-1 to 0. A broker answers the requests
    of one connection in order, so :meth:`pop` (with ``strict_order``) insists that the
    response is for the oldest request still waiting, and raises
    :class:`CorrelationIdError` for an unknown id or one that skips older requests: the
    stream is out of sync and the connection must be closed.

    Requests sent with ``expect_response=False`` (Produce with acks=0) are remembered
    too, because some brokers answer them anyway (Tansu 0.6 and noida-db 0.2.3 both
    do; Kafka does not): :meth:`pop` returns None for such an answer, to be dropped. Once
    a later request is answered, the unanswered fire-and-forget ids before it are
    forgotten, since an answer to them can no longer come.

    Every operation costs O(1) (amortised), however many fire-and-forget requests wait.
    """

    #: Fire-and-forget ids kept at most (oldest dropped first) while nothing else is answered.
    MAX_UNANSWERED = 10_000

    def __init__(self, start: int = 0, strict_order: bool = True) -> None:
        if not 0 <= start <= _INT32_MAX:
            raise ValueError("start must be within 0..2**31-1")
        self._next = start
        self.strict_order = strict_order
        # Two tables in send order, id -> (send sequence number, entry): requests waiting
        # for a response, and fire-and-forget ones whose answer may still come. The
        # sequence numbers order the two tables against each other.
        self._waiting: "OrderedDict[int, Tuple[int, InFlight]]" = OrderedDict()
        self._silent: "OrderedDict[int, Tuple[int, InFlight]]" = OrderedDict()
        self._sent = 0

    def __len__(self) -> int:
        """Requests waiting for a response (fire-and-forget ones not counted)."""
        return len(self._waiting)

    @property
    def unanswered_fire_and_forget(self) -> int:
        """Fire-and-forget requests (``expect_response=False``) whose answer, if the broker
        sends one, has not come yet. Zero means no such answer can still arrive."""
        return len(self._silent)

    def __contains__(self, correlation_id: object) -> bool:
        return correlation_id in self._waiting

    def next_id(self, api_key: int, api_version: int, data: Any = None,
                expect_response: bool = True) -> int:
        """A fresh correlation id, remembered with what was sent. ``expect_response=False``
        for a request the protocol leaves unanswered (Produce with acks=0)."""
        cid = self._next
        waiting, silent = self._waiting, self._silent
        for _ in range(len(waiting) + len(silent) + 1):
            if cid not in waiting and cid not in silent:
                break
            cid = 0 if cid == _INT32_MAX else cid + 1
        self._next = 0 if cid == _INT32_MAX else cid + 1
        self._sent += 1
        item = (self._sent, InFlight(cid, api_key, api_version, data))
        if expect_response:
            waiting[cid] = item
        else:
            silent[cid] = item
            if len(silent) > self.MAX_UNANSWERED:
                silent.popitem(last=False)
        return cid

    def get(self, correlation_id: int) -> Optional[InFlight]:
        """The request sent under ``correlation_id`` (answered or not), or None; does not
        remove it. Used to pick the response header version before :meth:`pop`."""
        item = self._waiting.get(correlation_id) or self._silent.get(correlation_id)
        return None if item is None else item[1]

    def peek(self) -> Optional[InFlight]:
        """The oldest request still waiting for its response, or None."""
        for _seq, entry in self._waiting.values():
            return entry
        return None

    def pop(self, correlation_id: int) -> Optional[InFlight]:
        """Remove and return the request a response with ``correlation_id`` answers;
        None if it was a fire-and-forget request (drop that response)."""
        waiting, silent = self._waiting, self._silent
        item = waiting.get(correlation_id)
        expected = item is not None
        if item is None:
            item = silent.get(correlation_id)
            if item is None:
                raise CorrelationIdError(
                    f"response with correlation id {correlation_id} matches no request in "
                    f"flight ({len(waiting)} waiting)")
        seq, entry = item
        if self.strict_order:
            for oldest, (oldest_seq, _entry) in waiting.items():
                if oldest_seq < seq:
                    raise CorrelationIdError(
                        f"response with correlation id {correlation_id} arrived before the "
                        f"one for {oldest}: responses out of order")
                break
            # Older fire-and-forget requests went unanswered: their answers cannot come now.
            while silent:
                oldest = next(iter(silent))
                if silent[oldest][0] >= seq:
                    break
                del silent[oldest]
        if expected:
            del waiting[correlation_id]
            return entry
        del silent[correlation_id]
        return None

    def discard(self, correlation_id: int) -> None:
        """Forget one request whatever its place, without checks: for a request whose
        bytes were never sent (building its frame failed after it got its id)."""
        self._waiting.pop(correlation_id, None)
        self._silent.pop(correlation_id, None)

    def pending(self) -> List[InFlight]:
        """Requests still waiting for a response, oldest first."""
        return [entry for _seq, entry in self._waiting.values()]

    def clear(self) -> List[InFlight]:
        """Forget every request (connection lost); return those that awaited a response."""
        out = self.pending()
        self._waiting.clear()
        self._silent.clear()
        return out
