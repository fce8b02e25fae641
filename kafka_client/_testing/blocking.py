"""A small synchronous connection to one broker, for the demo, tests and tools.

:class:`BlockingConnection` connects, runs the ApiVersions handshake, keeps the
negotiated version of every API both sides know, and sends one request at a time (or
several pipelined with :meth:`BlockingConnection.send` / :meth:`BlockingConnection.receive`)::

    with BlockingConnection("127.0.0.1", 9092) as conn:
        md = conn.request(MetadataRequest(topics=None))

The protocol (framing, correlation ids, the handshake, decoding) is
:class:`kafka_proto.protocol.BrokerConversation`, the same one the client's non-blocking
connections use; this class only moves its bytes over a blocking socket.
"""
from __future__ import annotations

import socket
import time
from typing import Any, Dict, Optional, Tuple

from kafka_proto.errors import UnsupportedVersionError
from kafka_proto.framing import DEFAULT_MAX_FRAME_SIZE
from kafka_proto.protocol import (
    BrokerConversation,
    Exchange,
    HandshakeError,
    HandshakeExchange,
    OutgoingRequest,
    ResponseDecodeError,
)

__all__ = [
    "BlockingConnection",
    "BrokerConnectionError",
    "ConnectionClosedError",
    "RequestTimeoutError",
]


class BrokerConnectionError(ConnectionError):
    """The connection to a broker failed or is no longer usable."""


class ConnectionClosedError(BrokerConnectionError):
    """The broker closed the connection (or it was closed locally)."""


class RequestTimeoutError(BrokerConnectionError, TimeoutError):
    """No (complete) response within the timeout; the connection is closed, since the
    stream position is unknown after a partial exchange."""


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
        self._conv = BrokerConversation(client_id, max_frame_size=max_frame_size)
        self._sock: Optional[socket.socket] = None
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
        self._conv.reset()

    def __enter__(self) -> "BlockingConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<BlockingConnection {self.host}:{self.port}{' closed' if self.closed else ''}>"

    # -- versions ----------------------------------------------------------------------
    @property
    def broker_versions(self) -> Dict[int, Tuple[int, int]]:
        """The broker's advertised ``{api_key: (min_version, max_version)}``."""
        return self._conv.broker_versions

    @property
    def versions(self) -> Dict[int, int]:
        """Negotiated ``{api_key: version}`` for every API both sides support."""
        return self._conv.versions

    @property
    def api_versions_version(self) -> Optional[int]:
        """The ApiVersions version the exchange finally used."""
        return self._conv.api_versions_version

    @property
    def api_versions_response(self) -> Any:
        """The decoded ApiVersions response."""
        return self._conv.api_versions_response

    def exchange_api_versions(self) -> Any:
        """Run the ApiVersions handshake (asking lower on UNSUPPORTED_VERSION, KIP-511)
        and return the broker's answer."""
        self._write(self._conv.start_handshake())
        deadline = self._deadline(None)  # for each ApiVersions round trip
        try:
            while True:
                event = self._next_event(deadline)
                if not isinstance(event, HandshakeExchange):
                    continue
                if event.retry is None:
                    return event.response
                self._write(event.retry)
                deadline = self._deadline(None)
        except UnsupportedVersionError as exc:
            raise UnsupportedVersionError(
                f"broker {self.host}:{self.port} refuses every ApiVersions version we "
                f"tried: {exc}") from None
        except HandshakeError as exc:
            raise BrokerConnectionError(f"{self.host}:{self.port}: {exc}") from exc

    def version_for(self, api_key: int) -> int:
        """The negotiated version of an API; UnsupportedVersionError if there is none."""
        try:
            return self._conv.version_for(api_key)
        except UnsupportedVersionError as exc:
            raise UnsupportedVersionError(f"broker {self.host}:{self.port}: {exc}") from None

    # -- requests ----------------------------------------------------------------------
    def request(self, msg: Any, version: Optional[int] = None,
                timeout: Optional[float] = None) -> Any:
        """Send ``msg`` and return the decoded response (``version`` None = negotiated)."""
        return self._round_trip(msg, version, timeout, decode=True).response

    def request_raw(self, msg: Any, version: Optional[int] = None,
                    timeout: Optional[float] = None) -> memoryview:
        """Like :meth:`request` but return the undecoded response body."""
        return self._round_trip(msg, version, timeout, decode=False).body

    def send(self, msg: Any, version: Optional[int] = None, expect_response: bool = True) -> int:
        """Send without waiting; returns the correlation id (for :meth:`receive`).
        ``expect_response=False`` is for Produce with acks=0, which gets no answer."""
        return self._send(msg, version, expect_response=expect_response).correlation_id

    def receive(self, timeout: Optional[float] = None) -> Tuple[int, Any]:
        """Wait for the oldest outstanding response: ``(correlation_id, response)``."""
        if self._conv.in_flight == 0:
            raise RuntimeError("no request waiting for a response")
        event = self._next_event(self._deadline(timeout))
        return event.request.correlation_id, event.response

    @property
    def in_flight(self) -> int:
        return self._conv.in_flight

    # -- internals ---------------------------------------------------------------------
    def _deadline(self, timeout: Optional[float]) -> float:
        return time.monotonic() + (self.timeout if timeout is None else timeout)

    def _check_open(self) -> socket.socket:
        if self._sock is None:
            raise ConnectionClosedError(f"connection to {self.host}:{self.port} is closed")
        return self._sock

    def _round_trip(self, msg: Any, version: Optional[int], timeout: Optional[float], *,
                    decode: bool) -> Exchange:
        cid = self._send(msg, version, decode=decode).correlation_id
        deadline = self._deadline(timeout)
        while True:
            event = self._next_event(deadline)
            if event.request.correlation_id == cid:
                return event
            # An earlier pipelined response nobody waited for: dropped.

    def _send(self, msg: Any, version: Optional[int], *, expect_response: bool = True,
              decode: bool = True) -> OutgoingRequest:
        self._check_open()
        if version is None:
            version = self.version_for(msg.API_KEY)
        out = self._conv.send(msg, version, expect_response=expect_response, decode=decode)
        self._write(out)
        return out

    def _write(self, out: OutgoingRequest) -> None:
        sock = self._check_open()
        sock.settimeout(self.timeout)
        try:
            sent = sock.sendmsg(out.parts)
            if sent < out.size:
                # Rare (big request, full socket buffer): send the rest in one go.
                rest = memoryview(b"".join(bytes(p) for p in out.parts))[sent:]
                sock.sendall(rest)
        except socket.timeout as exc:
            self.close()
            raise RequestTimeoutError(f"send to {self.host}:{self.port} timed out") from exc
        except OSError as exc:
            self.close()
            raise ConnectionClosedError(f"send to {self.host}:{self.port} failed: {exc}") from exc

    def _next_event(self, deadline: float) -> Exchange:
        """The next answer, reading the socket until one is complete. A broken stream
        (bad frame, unknown correlation id) closes the connection and raises; a body that
        does not decode raises with the connection still usable."""
        conv = self._conv
        while True:
            sock = self._check_open()
            try:
                event = conv.next_event()
            except ResponseDecodeError:
                raise  # only the body was bad: the stream is still in sync
            except Exception:
                self.close()
                raise
            if event is not None:
                return event
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise RequestTimeoutError(
                    f"no response from {self.host}:{self.port} within the timeout")
            sock.settimeout(remaining)
            view = conv.buffer_for_read()
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
                conv.commit(n)
            except Exception:
                self.close()
                raise
