"""One conversation with one broker, sans-I/O: requests in, bytes out; bytes in,
(request, response) pairs out.

Shaped like h11: :class:`BrokerConversation` never touches a socket, a clock or a thread.
The caller writes the parts that :meth:`~BrokerConversation.send` returns (with
``socket.sendmsg``: a Produce request's record batches are parts of their own, never
copied), hands over what it reads (:meth:`~BrokerConversation.receive_data`, or
:meth:`~BrokerConversation.buffer_for_read` + :meth:`~BrokerConversation.commit` around
``sock.recv_into``), then calls :meth:`~BrokerConversation.next_event` until it returns
None. The conversation owns what the protocol defines and nothing else:

* correlation ids and the one table of requests in flight: answers are matched to their
  requests in send order; an unknown id, or one that overtakes an older request, raises
  :class:`~kafka_proto.errors.CorrelationIdError` (the stream is out of sync: close the
  connection, then :meth:`~BrokerConversation.reset`);
* fire-and-forget requests (Produce with acks=0): nothing is expected, and the answer
  some brokers send anyway (Tansu 0.6, noida-db 0.2.3) is dropped;
* the ApiVersions handshake (KIP-511): :meth:`~BrokerConversation.start_handshake` asks
  at our highest version; a broker that does not know it answers UNSUPPORTED_VERSION in
  the v0 layout with its own range, and the conversation asks again at the highest
  version both know (v0 when the answer gives none, or cannot be read); then a version
  per API is negotiated (:mod:`kafka_proto.versions`), used by ``send`` when no version is
  given.

Policy stays with the caller: timeouts, retries, how many requests to keep in flight,
when to reconnect. ::

    conv = BrokerConversation(client_id="me")
    sock.sendmsg(conv.start_handshake().parts)
    while not conv.handshake_done:
        conv.receive_data(sock.recv(65536))
        while (event := conv.next_event()) is not None:
            if event.retry is not None:          # a HandshakeExchange asking again
                sock.sendmsg(event.retry.parts)
    out = conv.send(MetadataRequest(topics=None))   # at the negotiated version
    sock.sendmsg(out.parts)
    ...                                          # next_event() -> Exchange(request, response)
"""
from __future__ import annotations

from collections import deque
from typing import AbstractSet, Any, Deque, Dict, List, NamedTuple, Optional, Set, Tuple, Union

from kafka_proto import __version__
from kafka_proto.errors import (
    ErrorCode,
    KafkaProtocolError,
    ProtocolDecodeError,
    UnsupportedVersionError,
    broker_error,
)
from kafka_proto.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    CorrelationTracker,
    FrameParser,
    InFlight,
    decode_response_header,
    encode_request_header,
    encode_request_parts,
    peek_correlation_id,
)
from kafka_proto.messages import (
    API_KEYS,
    ApiKey,
    ApiVersionsRequest,
    response_class,
)
from kafka_proto.versions import (
    api_versions_retry,
    broker_ranges,
    decode_api_versions_response,
    negotiate,
)

__all__ = [
    "BrokerConversation",
    "OutgoingRequest",
    "Exchange",
    "HandshakeExchange",
    "ResponseDecodeError",
    "HandshakeError",
    "CLIENT_SOFTWARE_NAME",
]

BytesLike = Union[bytes, bytearray, memoryview]

#: KIP-511 client_software_name sent in the handshake.
CLIENT_SOFTWARE_NAME = "kafka-native"


class OutgoingRequest(NamedTuple):
    """A request framed for the wire: write ``parts`` in order (``socket.sendmsg``)."""

    correlation_id: int
    api_key: int
    api_version: int
    #: size prefix + header, then the body's parts (large record batches uncopied)
    parts: List[BytesLike]
    #: bytes in ``parts`` together: the whole frame, its size prefix included
    size: int


class Exchange:
    """A response matched to its request.

    ``request`` is the :class:`~kafka_proto.framing.InFlight` entry of what was sent
    (correlation id, API key and version, and the ``context`` given to ``send`` as
    ``data``); ``response`` the decoded response (None for a request sent with
    ``decode=False``); ``body`` the response's bytes after its header (a view of the
    frame).
    """

    __slots__ = ("request", "response", "body")

    def __init__(self, request: InFlight, response: Any, body: memoryview) -> None:
        self.request = request
        self.response = response
        self.body = body

    #: Set on :class:`HandshakeExchange` only; None here so callers can test any event.
    retry: Optional[OutgoingRequest] = None

    def __repr__(self) -> str:
        r = self.request
        return (f"<{type(self).__name__} {API_KEYS[r.api_key].name} v{r.api_version} "
                f"correlation id {r.correlation_id}>")


class HandshakeExchange(Exchange):
    """The answer to an ApiVersions request of the handshake.

    ``retry`` is the next ApiVersions request to write (the broker did not take the
    version asked, KIP-511), or None: the handshake is complete and
    :attr:`BrokerConversation.versions` holds the negotiated versions.
    """

    __slots__ = ("retry",)

    def __init__(self, request: InFlight, response: Any, body: memoryview,
                 retry: Optional[OutgoingRequest]) -> None:
        super().__init__(request, response, body)
        self.retry = retry


class ResponseDecodeError(ProtocolDecodeError):
    """A response matched its request but its body does not decode in the layout of the
    version asked. The frame was whole, so the stream is still in sync; ``request`` is
    the in-flight entry it answered (now removed) and ``body`` the bytes."""

    def __init__(self, message: str, request: InFlight, body: memoryview) -> None:
        super().__init__(message)
        self.request = request
        self.body = body


class HandshakeError(KafkaProtocolError):
    """The broker answered the ApiVersions handshake with an error code other than
    UNSUPPORTED_VERSION (which is retried): ``error_code`` names it."""

    def __init__(self, error_code: int, api_version: int) -> None:
        self.error_code = error_code
        self.api_version = api_version
        super().__init__(f"ApiVersions v{api_version} answered with error "
                         f"{broker_error(error_code).name} ({error_code})")


class BrokerConversation:
    """The protocol state of one broker connection (see the module docstring).

    ``client_id`` goes into every request header (None: a null client id);
    ``max_frame_size`` bounds a response frame (librdkafka's
    ``receive.message.max.bytes``); ``allow_unstable`` lets negotiation pick API versions
    the schemas mark unstable (True: of every API; a set: of those API keys).
    """

    def __init__(self, client_id: Optional[str] = "kafka-native", *,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 software_name: str = CLIENT_SOFTWARE_NAME,
                 software_version: str = __version__,
                 allow_unstable: Union[bool, AbstractSet[int]] = False) -> None:
        # Refuse a client id the header cannot carry now, not after an id was taken.
        encode_request_header(0, 0, 0, client_id, 1)
        self.client_id = client_id
        self.software_name = software_name
        self.software_version = software_version
        self.allow_unstable = allow_unstable
        #: the broker's ``{api_key: (min_version, max_version)}`` from the last handshake
        self.broker_versions: Dict[int, Tuple[int, int]] = {}
        #: ``{api_key: version}`` negotiated by the last handshake, for every API both
        #: sides know; kept after :meth:`reset` until a new handshake completes
        self.versions: Dict[int, int] = {}
        #: the ApiVersions version and the decoded answer of the last complete handshake
        self.api_versions_version: Optional[int] = None
        self.api_versions_response: Any = None
        self._tracker = CorrelationTracker()
        self._parser = FrameParser(max_frame_size=max_frame_size)
        self._frames: Deque[memoryview] = deque()
        self._undecoded: Set[int] = set()       # ids sent with decode=False
        self._handshake_id: Optional[int] = None  # the handshake request in flight
        self._handshake_tried: Set[int] = set()
        self._handshake_done = False

    def __repr__(self) -> str:
        state = "ready" if self._handshake_done else (
            "handshake" if self._handshake_id is not None else "idle")
        return f"<BrokerConversation {state}, {len(self._tracker)} in flight>"

    # -- state ---------------------------------------------------------------------------
    @property
    def handshake_done(self) -> bool:
        """True once the ApiVersions handshake since the last :meth:`reset` completed."""
        return self._handshake_done

    @property
    def in_flight(self) -> int:
        """Requests sent that wait for a response (fire-and-forget ones not counted)."""
        return len(self._tracker)

    @property
    def unanswered_fire_and_forget(self) -> int:
        """Fire-and-forget requests whose answer, if the broker sends one, may still come
        (see :attr:`~kafka_proto.framing.CorrelationTracker.unanswered_fire_and_forget`)."""
        return self._tracker.unanswered_fire_and_forget

    def oldest(self) -> Optional[InFlight]:
        """The oldest request still waiting for its response (the next to be answered)."""
        return self._tracker.peek()

    def pending(self) -> List[InFlight]:
        """Every request waiting for its response, oldest first."""
        return self._tracker.pending()

    def version_for(self, api_key: int) -> int:
        """The negotiated version of an API; UnsupportedVersionError naming it if none."""
        version = self.versions.get(api_key)
        if version is not None:
            return version
        info = API_KEYS.get(api_key)
        name = info.name if info is not None else f"API key {api_key}"
        if not self.broker_versions:
            why = "no ApiVersions handshake completed"
        elif api_key not in self.broker_versions:
            why = "the broker does not support it"
        else:
            lo, hi = self.broker_versions[api_key]
            why = f"the broker's versions {lo}-{hi} and this client's do not overlap"
        raise UnsupportedVersionError(f"no version of {name} to use: {why}")

    # -- sending -------------------------------------------------------------------------
    def send(self, request: Any, version: Optional[int] = None, *,
             expect_response: bool = True, decode: bool = True,
             context: Any = None) -> OutgoingRequest:
        """Frame ``request`` (a generated request object) under a new correlation id.

        ``version`` None uses the negotiated one (:meth:`version_for`).
        ``expect_response=False`` for Produce with acks=0: no answer is waited for (one
        that comes anyway is dropped). ``decode=False`` leaves the answer's ``response``
        None (only its ``body`` is given). ``context`` is kept with the request and comes
        back as ``event.request.data``. Raises what encoding raises
        (``ProtocolEncodeError``, ``UnsupportedVersionError``); nothing is then in flight.
        """
        api_key = request.API_KEY
        if version is None:
            version = self.version_for(api_key)
        body = request.encode_parts(version)  # before an id is taken: may raise
        tracker = self._tracker
        cid = tracker.next_id(api_key, version, context, expect_response=expect_response)
        try:
            parts = encode_request_parts(body, version, cid, self.client_id, api_key=api_key)
        except BaseException:
            tracker.discard(cid)  # a frame too big for its size field: never sent
            raise
        if not decode and expect_response:
            self._undecoded.add(cid)
        size = 0
        for part in parts:
            size += len(part)
        return OutgoingRequest(cid, api_key, version, parts, size)

    def start_handshake(self, context: Any = None) -> OutgoingRequest:
        """The first ApiVersions request of the handshake, at our highest version (on a new
        connection: after :meth:`reset` when this conversation served another one).
        ``context`` comes back with each handshake answer, retries included."""
        self._handshake_done = False
        self._handshake_tried = set()
        return self._send_api_versions(ApiVersionsRequest.MAX_VERSION, context)

    def _send_api_versions(self, version: int, context: Any) -> OutgoingRequest:
        self._handshake_tried.add(version)
        out = self.send(ApiVersionsRequest(client_software_name=self.software_name,
                                           client_software_version=self.software_version),
                        version, context=context)
        self._handshake_id = out.correlation_id
        return out

    # -- receiving -----------------------------------------------------------------------
    def receive_data(self, data: BytesLike) -> int:
        """Hand over bytes read from the socket; returns how many frames they completed
        (take the answers with :meth:`next_event`). A frame size below zero or above
        ``max_frame_size`` raises :class:`~kafka_proto.errors.InvalidLengthError`: close
        the connection (the frames completed before it are still given by next_event)."""
        return self._queue(self._parser.feed, data)

    def buffer_for_read(self) -> memoryview:
        """A writable buffer for ``sock.recv_into``; pass the byte count to :meth:`commit`.
        Large frames are received in place (see :class:`~kafka_proto.framing.FrameParser`).
        """
        return self._parser.buffer_for_read()

    def commit(self, n: int) -> int:
        """Account for ``n`` bytes received into :meth:`buffer_for_read`; as
        :meth:`receive_data` otherwise."""
        return self._queue(self._parser.commit, n)

    def receive_frame(self, frame: BytesLike) -> None:
        """Hand over one response frame (without its size prefix) cut by the caller's own
        :class:`~kafka_proto.framing.FrameParser`."""
        self._frames.append(memoryview(frame))

    def _queue(self, parse: Any, arg: Any) -> int:
        try:
            frames = parse(arg)
        except ProtocolDecodeError as exc:
            self._frames.extend(getattr(exc, "frames", ()))
            raise
        self._frames.extend(frames)
        return len(frames)

    def next_event(self) -> Optional[Exchange]:
        """The next answer received, or None until more bytes come.

        Returns an :class:`Exchange` (a :class:`HandshakeExchange` for the handshake's
        ApiVersions). Raises :class:`~kafka_proto.errors.CorrelationIdError` or another
        :class:`~kafka_proto.errors.ProtocolDecodeError` when a frame matches no request or
        its header is malformed (close the connection); :class:`ResponseDecodeError` when
        only the body does not decode (the stream is in sync); for the handshake,
        :class:`HandshakeError` or ``UnsupportedVersionError`` (no ApiVersions version
        left to try).
        """
        frames = self._frames
        tracker = self._tracker
        while frames:
            frame = frames.popleft()
            cid = peek_correlation_id(frame)
            entry = tracker.get(cid)
            if entry is None:
                tracker.pop(cid)  # raises CorrelationIdError, naming the id
                raise AssertionError(f"tracker.pop({cid}) returned for an id it does not hold")
            _, body = decode_response_header(frame, entry.api_key, entry.api_version)
            if tracker.pop(cid) is None:
                continue  # an answer to a fire-and-forget request (Tansu, noida-db): dropped
            if cid == self._handshake_id:
                return self._handshake_answer(entry, body)
            if cid in self._undecoded:
                self._undecoded.discard(cid)
                return Exchange(entry, None, body)
            return Exchange(entry, self._decode(entry, body), body)
        return None

    def _decode(self, request: InFlight, body: memoryview) -> Any:
        try:
            if request.api_key == ApiKey.API_VERSIONS:
                # A version the broker does not know is answered in v0 (KIP-511).
                return decode_api_versions_response(body, request.api_version)
            return response_class(request.api_key).decode(body, request.api_version)
        except KafkaProtocolError as exc:
            raise ResponseDecodeError(
                f"cannot decode the {API_KEYS[request.api_key].name} v{request.api_version} "
                f"response (correlation id {request.correlation_id}): {exc}",
                request, body) from exc

    def _handshake_answer(self, request: InFlight, body: memoryview) -> HandshakeExchange:
        self._handshake_id = None
        version = request.api_version
        try:
            response = self._decode(request, body)
        except ResponseDecodeError:
            if version == 0:
                raise  # v0 is the layout every broker knows: nothing lower to try
            response = None  # not the layout asked for: ask in one every broker knows
        # Raises UnsupportedVersionError when every version worth trying was tried.
        retry = api_versions_retry(response, version, self._handshake_tried,
                                   ApiVersionsRequest.MAX_VERSION)
        if retry is not None:
            return HandshakeExchange(request, response, body,
                                     self._send_api_versions(retry, request.data))
        if response.error_code != ErrorCode.NONE:
            raise HandshakeError(response.error_code, version)
        self.api_versions_version = version
        self.api_versions_response = response
        self.broker_versions = broker_ranges(response)
        self.versions = negotiate(self.broker_versions, allow_unstable=self.allow_unstable)
        self._handshake_done = True
        return HandshakeExchange(request, response, body, None)

    # -- connection lost ---------------------------------------------------------------
    def reset(self) -> List[InFlight]:
        """Forget the stream (the connection closed): frames, partial bytes, requests in
        flight and any handshake under way. Returns the requests that waited for an
        answer, oldest first, so the caller can fail them. The negotiated versions stay
        until a new handshake completes; correlation ids keep counting."""
        self._parser.reset()
        self._frames.clear()
        self._undecoded.clear()
        self._handshake_id = None
        self._handshake_done = False
        return self._tracker.clear()
