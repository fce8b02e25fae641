"""A small synchronous connection to one broker.

:class:`BlockingConnection` connects, exchanges ApiVersions, keeps the negotiated
version of every API both sides know, and sends one request at a time (or several
pipelined with :meth:`BlockingConnection.send` / :meth:`BlockingConnection.receive`)::

    with BlockingConnection("127.0.0.1", 9092) as conn:
        md = conn.request(MetadataRequest(topics=None))

It is for the demo, tests and tools; the client's I/O thread drives non-blocking
sockets with the same framing pieces.
"""
from __future__ import annotations

import socket
import time
from collections import deque
from typing import Any, Deque, Dict, Optional, Tuple

from kafka_proto.errors import ProtocolDecodeError, UnsupportedVersionError
from kafka_proto.framing import (
    API_VERSIONS_KEY,
    DEFAULT_MAX_FRAME_SIZE,
    CorrelationTracker,
    FrameParser,
    decode_response_header,
    encode_request_parts,
    peek_correlation_id,
)

__all__ = [
    "BlockingConnection",
    "BrokerConnectionError",
    "ConnectionClosedError",
    "RequestTimeoutError",
    "response_class_for",
]

UNSUPPORTED_VERSION = 35  # broker error code
CLIENT_SOFTWARE_NAME = "kafka-native"


class BrokerConnectionError(ConnectionError):
    """The connection to a broker failed or is no longer usable."""


class ConnectionClosedError(BrokerConnectionError):
    """The broker closed the connection (or it was closed locally)."""


class RequestTimeoutError(BrokerConnectionError, TimeoutError):
    """No (complete) response within the timeout; the connection is closed, since the
    stream position is unknown after a partial exchange."""


def _messages():
    import kafka_proto.messages as messages

    return messages


def response_class_for(request: Any) -> type:
    """The generated response class that answers ``request``."""
    key = getattr(request, "API_KEY", None)
    if not isinstance(key, int) or not type(request).__name__.endswith("Request"):
        raise TypeError(f"{type(request).__name__} is not a generated request class")
    return _messages().response_class(key)


def _client_version() -> str:
    try:
        from kafka_proto import __version__
    except ImportError:  # pragma: no cover
        return "0"
    return __version__


class BlockingConnection:
    """One synchronous broker connection.

    ``timeout`` (seconds) bounds connecting and each request. ``api_versions=False``
    skips the ApiVersions exchange (then every request needs an explicit version).
    """

    def __init__(self, host: str, port: int, client_id: Optional[str] = "kafka-native",
                 timeout: float = 30.0, *, api_versions: bool = True,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self._parser = FrameParser(max_frame_size=max_frame_size)
        self._tracker = CorrelationTracker()
        self._frames: Deque[memoryview] = deque()
        self._sock: Optional[socket.socket] = None
        #: broker's advertised ``{api_key: (min_version, max_version)}``
        self.broker_versions: Dict[int, Tuple[int, int]] = {}
        #: negotiated ``{api_key: version}`` for every API both sides support
        self.versions: Dict[int, int] = {}
        #: the ApiVersions version the exchange finally used
        self.api_versions_version: Optional[int] = None
        #: the decoded ApiVersions response
        self.api_versions_response: Any = None
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except socket.timeout as exc:
            raise RequestTimeoutError(
                f"connect to {host}:{port} timed out after {timeout}s") from exc
        except OSError as exc:
            raise BrokerConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if api_versions:
            try:
                self.exchange_api_versions()
            except BaseException:
                self.close()
                raise

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._sock is None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
        self._tracker.clear()
        self._frames.clear()

    def __enter__(self) -> "BlockingConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<BlockingConnection {self.host}:{self.port}{' closed' if self.closed else ''}>"

    # -- versions ----------------------------------------------------------------------
    def exchange_api_versions(self) -> Any:
        """Send ApiVersions at our highest version; on UNSUPPORTED_VERSION retry lower.

        The broker answers an ApiVersions version it does not know in v0 format with
        error 35, listing its own range for ApiVersions when it can: we retry with the
        highest version both know, or v0 when no range is given (KIP-511).
        """
        from kafka_proto.versions import api_versions_retry

        messages = _messages()
        ours = messages.ApiVersionsRequest
        version = ours.MAX_VERSION
        tried = set()
        while True:
            tried.add(version)
            req = ours(client_software_name=CLIENT_SOFTWARE_NAME,
                       client_software_version=_client_version())
            try:
                resp = self._api_versions_round_trip(req, version)
            except ProtocolDecodeError:
                # Not in the layout of the version asked for (the stream is still in
                # sync: the frame was whole): try the layout every broker knows.
                if version == 0 or self.closed:
                    raise
                resp = None
            try:
                retry = api_versions_retry(resp, version, tried, ours.MAX_VERSION)
            except UnsupportedVersionError:
                raise UnsupportedVersionError(
                    f"broker {self.host}:{self.port} refuses every ApiVersions version we tried"
                ) from None
            if retry is None:
                break
            version = retry
        if resp.error_code != 0:
            raise BrokerConnectionError(
                f"ApiVersions v{version} failed on {self.host}:{self.port}: "
                f"error {resp.error_code}")
        self.api_versions_version = version
        self.api_versions_response = resp
        from kafka_proto.versions import broker_ranges

        self.broker_versions = broker_ranges(resp)
        self.versions = negotiate_versions(self.broker_versions)
        return resp

    def _api_versions_round_trip(self, req: Any, version: int) -> Any:
        messages = _messages()
        cid = self._send(req, version, API_VERSIONS_KEY, expect_response=True, data=None)
        body = self._receive_body(cid, self._deadline(None))
        # An error answer is always v0-encoded, whatever version was asked for; the
        # error code is the body's first field in every version, so peek at it.
        if len(body) >= 2 and int.from_bytes(body[:2], "big", signed=True) == UNSUPPORTED_VERSION:
            return messages.ApiVersionsResponse.decode(body, 0)
        return messages.ApiVersionsResponse.decode(body, version)

    def version_for(self, api_key: int) -> int:
        """The negotiated version of an API; UnsupportedVersionError if there is none."""
        try:
            return self.versions[api_key]
        except KeyError:
            if self.broker_versions and api_key not in self.broker_versions:
                raise UnsupportedVersionError(
                    f"broker {self.host}:{self.port} does not support API key {api_key}") from None
            raise UnsupportedVersionError(
                f"no version of API key {api_key} common to us and broker "
                f"{self.host}:{self.port}") from None

    # -- requests ----------------------------------------------------------------------
    def request(self, msg: Any, version: Optional[int] = None,
                timeout: Optional[float] = None) -> Any:
        """Send ``msg`` and return the decoded response (``version`` None = negotiated)."""
        version = self._resolve_version(msg, version)
        cls = response_class_for(msg)
        cid = self._send(msg, version, msg.API_KEY, expect_response=True, data=cls)
        body = self._receive_body(cid, self._deadline(timeout))
        return cls.decode(body, version)

    def request_raw(self, msg: Any, version: Optional[int] = None,
                    timeout: Optional[float] = None) -> memoryview:
        """Like :meth:`request` but return the undecoded response body."""
        version = self._resolve_version(msg, version)
        cid = self._send(msg, version, msg.API_KEY, expect_response=True,
                         data=response_class_for(msg))
        return self._receive_body(cid, self._deadline(timeout))

    def send(self, msg: Any, version: Optional[int] = None, expect_response: bool = True) -> int:
        """Send without waiting; returns the correlation id (for :meth:`receive`).
        ``expect_response=False`` is for Produce with acks=0, which gets no answer."""
        version = self._resolve_version(msg, version)
        return self._send(msg, version, msg.API_KEY, expect_response=expect_response,
                          data=response_class_for(msg))

    def receive(self, timeout: Optional[float] = None) -> Tuple[int, Any]:
        """Wait for the oldest outstanding response: ``(correlation_id, response)``."""
        entry = self._tracker.peek()
        if entry is None:
            raise RuntimeError("no request waiting for a response")
        body = self._receive_body(entry.correlation_id, self._deadline(timeout))
        return entry.correlation_id, entry.data.decode(body, entry.api_version)

    @property
    def in_flight(self) -> int:
        return len(self._tracker)

    # -- internals ---------------------------------------------------------------------
    def _resolve_version(self, msg: Any, version: Optional[int]) -> int:
        if version is None:
            return self.version_for(msg.API_KEY)
        return version

    def _deadline(self, timeout: Optional[float]) -> float:
        return time.monotonic() + (self.timeout if timeout is None else timeout)

    def _check_open(self) -> socket.socket:
        if self._sock is None:
            raise ConnectionClosedError(f"connection to {self.host}:{self.port} is closed")
        return self._sock

    def _send(self, msg: Any, version: int, api_key: int, *, expect_response: bool,
              data: Any) -> int:
        sock = self._check_open()
        # Encode before taking a correlation id, so a failed encode leaves no entry behind.
        body = msg.encode(version)
        cid = self._tracker.next_id(api_key, version, data, expect_response=expect_response)
        parts = encode_request_parts(body, version, cid, self.client_id, api_key=api_key)
        sock.settimeout(self.timeout)
        try:
            sent = sock.sendmsg(parts)
            total = sum(len(p) for p in parts)
            if sent < total:
                # Rare (big request, full socket buffer): send the rest in one go.
                rest = memoryview(b"".join(bytes(p) for p in parts))[sent:]
                sock.sendall(rest)
        except socket.timeout as exc:
            self.close()
            raise RequestTimeoutError(f"send to {self.host}:{self.port} timed out") from exc
        except OSError as exc:
            self.close()
            raise ConnectionClosedError(f"send to {self.host}:{self.port} failed: {exc}") from exc
        return cid

    def _next_frame(self, deadline: float) -> memoryview:
        sock = self._check_open()
        while not self._frames:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise RequestTimeoutError(
                    f"no response from {self.host}:{self.port} within the timeout")
            sock.settimeout(remaining)
            view = self._parser.buffer_for_read()
            try:
                n = sock.recv_into(view)
            except socket.timeout as exc:
                self.close()
                raise RequestTimeoutError(
                    f"no response from {self.host}:{self.port} within the timeout") from exc
            except OSError as exc:
                self.close()
                raise ConnectionClosedError(
                    f"receive from {self.host}:{self.port} failed: {exc}") from exc
            finally:
                del view
            if n == 0:
                self.close()
                raise ConnectionClosedError(f"broker {self.host}:{self.port} closed the connection")
            try:
                self._frames.extend(self._parser.commit(n))
            except Exception:
                self.close()
                raise
        return self._frames.popleft()

    def _receive_body(self, correlation_id: int, deadline: float) -> memoryview:
        """Read responses until the one for ``correlation_id``; return its body."""
        while True:
            frame = self._next_frame(deadline)
            try:
                cid = peek_correlation_id(frame)
                entry = self._tracker.get(cid)
                if entry is None:
                    self._tracker.pop(cid)  # raises CorrelationIdError, naming the id
                _, body = decode_response_header(frame, entry.api_key, entry.api_version)
                answered = self._tracker.pop(cid)
            except Exception:
                self.close()
                raise
            if answered is None:
                continue  # an answer to acks=0 Produce (Tansu, noida-db send one): dropped
            if cid == correlation_id:
                return body
            # An earlier pipelined response nobody waited for: dropped.


def negotiate_versions(broker_ranges: Dict[int, Tuple[int, int]]) -> Dict[int, int]:
    """``{api_key: highest version both sides support}`` (APIs without overlap left out)."""
    from kafka_proto.versions import negotiate

    return negotiate(broker_ranges)
