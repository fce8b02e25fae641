"""A non-blocking connection to one broker, driven by the client's I/O thread.

State machine::

    DISCONNECTED --connect()--> CONNECTING --TCP up--> [TLS_HANDSHAKE] --> HANDSHAKE
          ^                                                                    |
          |                              ApiVersions answered: [AUTHENTICATING] --> READY
          +------ close(error): backoff, then a new connect() may start ----------------+

  (the bracketed states only with TLS / SASL; READY goes back to AUTHENTICATING for a
  KIP-368 re-authentication when the broker gave the session a lifetime)

* ``connect()`` resolves the host (every address, tried in turn on failure) and starts a
  non-blocking ``connect``; ``socket.connection.setup.timeout.ms`` bounds TCP connect, the
  TLS handshake, the ApiVersions exchange and SASL authentication together.
* TLS (``security.protocol`` ssl / sasl_ssl): the socket is wrapped once TCP is up and the
  handshake runs non-blocking on the I/O thread; then the same pipeline runs over it
  (writes coalesce the queued buffers into chunks, since ``SSLSocket`` has no
  ``sendmsg``; decrypted bytes OpenSSL holds back are read without waiting for the
  selector). A failed handshake closes with ``_SSL``.
* SASL (sasl_plaintext / sasl_ssl): after ApiVersions, SaslHandshake then SaslAuthenticate
  rounds (KIP-152) driven by a :class:`~kafka_client._net.security.sasl.SaslMechanism`;
  failures close with ``_AUTHENTICATION`` (reported to ``error_cb``, then reconnect with
  backoff, as librdkafka). When the broker answers with a session lifetime, the
  connection authenticates again at 85-95% of it (KIP-368), after the requests in
  flight are answered; new requests wait meanwhile.
* The protocol (request framing, correlation ids and the one table of requests in
  flight, the ApiVersions handshake with its KIP-511 retries, the version negotiated per
  API: :attr:`BrokerConnection.versions`, decoding) is a
  :class:`kafka_proto.protocol.BrokerConversation`; this class moves its bytes and
  applies the client's policy (queueing, in-flight limit, deadlines, backoff).
* :meth:`BrokerConnection.send` queues a request; requests made before READY wait in
  order and go out once the handshake is done. At most ``max_in_flight`` requests wait
  for answers (:meth:`can_send` tells callers whether one more would go out now).
* Writes use ``socket.sendmsg`` over the queued buffers (scatter/gather: the batch
  buffers of a Produce request are never concatenated); reads ``recv_into`` the frame
  parser's buffer.
* Each request has a deadline; an expired one closes the connection (the stream position
  of a half-answered request is unknown), failing every request in flight with
  ``_TIMED_OUT``; a broken connection fails them with ``_TRANSPORT``. A request still
  queued (never written: the connection is setting up, in its reconnect backoff, or its
  in-flight window is full) fails alone at its timeout, counted from when it was
  queued, with ``_TIMED_OUT_QUEUE`` (in :data:`NEVER_SENT`), as librdkafka's "timed out
  in output queue"; the connection is left as it is. The queued deadlines sit in a heap
  beside the queue, so a turn with none due looks at one entry.
* After a close, :attr:`BrokerConnection.next_attempt` is the earliest time for the next
  connect: ``reconnect.backoff.ms`` doubling per consecutive failure up to
  ``reconnect.backoff.max.ms``, each wait jittered by -25%..+50% as librdkafka does.

All methods run on the I/O thread; callbacks run there too and must be quick.
"""
from __future__ import annotations

import errno
import heapq
import logging
import os
import random
import socket
import ssl
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from kafka_client._backoff import Backoff
from kafka_client._interval import IntervalStat
from kafka_client._stats import StatsWindow
from kafka_client._net.bootstrap import Address, resolve
from kafka_client._net.security import SaslError, SaslMechanism, SecuritySettings
from kafka_client.errors import KafkaError, client_error
from kafka_proto.errors import (
    CorrelationIdError, ErrorCode, UnsupportedVersionError, broker_error,
)
from kafka_proto.framing import DEFAULT_MAX_FRAME_SIZE
from kafka_proto.messages import API_KEYS, ApiKey, SaslAuthenticateRequest, SaslHandshakeRequest
from kafka_proto.protocol import (
    BrokerConversation,
    HandshakeError,
    HandshakeExchange,
    OutgoingRequest,
    ResponseDecodeError,
)

__all__ = [
    "BrokerConnection",
    "ConnectionSettings",
    "Backoff",
    "DISCONNECTED",
    "CONNECTING",
    "TLS_HANDSHAKE",
    "HANDSHAKE",
    "AUTHENTICATING",
    "READY",
    "NEVER_SENT",
    "NO_ANSWER",
]

#: APIs whose latest version the protocol schemas mark unstable but Apache Kafka has
#: released since: ConsumerGroupHeartbeat v1 (SubscribedTopicRegex) is part of KIP-848 as
#: released in Kafka 4.0, and librdkafka sends it. A broker advertises a version only
#: when it serves it, so the version is used only where it is offered.
RELEASED_UNSTABLE_APIS = frozenset({ApiKey.CONSUMER_GROUP_HEARTBEAT})

_log = logging.getLogger("kafka_client.connection")

DISCONNECTED, CONNECTING, HANDSHAKE, READY = "DISCONNECTED", "CONNECTING", "HANDSHAKE", "READY"
TLS_HANDSHAKE, AUTHENTICATING = "TLS_HANDSHAKE", "AUTHENTICATING"
_SETTING_UP = (CONNECTING, TLS_HANDSHAKE, HANDSHAKE, AUTHENTICATING)

#: The codes :meth:`BrokerConnection.send` fails a request with when it was never written,
#: so nothing of it reached the broker: it cannot be encoded at the version to use, or the
#: broker serves no version of its API (also the handshake's failure to agree on one):
#: sending it again cannot help (not retriable); or it waited in the queue for its whole
#: timeout (``_TIMED_OUT_QUEUE``, retriable). Unlike a request lost with its connection
#: or timed out in flight, it cannot have been carried out.
NEVER_SENT = frozenset({KafkaError._INVALID_ARG, KafkaError._UNSUPPORTED_FEATURE,
                        KafkaError._TIMED_OUT_QUEUE})
#: The codes of a request that got no answer from a broker that may still be there: its
#: connection was lost (``_TRANSPORT``), it timed out in flight (``_TIMED_OUT``) or
#: waiting in the queue (``_TIMED_OUT_QUEUE``). All retriable: callers try again, or
#: look up again the broker they sent it to.
NO_ANSWER = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
                       KafkaError._TIMED_OUT_QUEUE})

_IOV_MAX = 512  # buffers per sendmsg call (Linux allows 1024)
#: The longest a throttle time holds a connection's requests back (s; KIP-219). Kafka
#: bounds the throttle of every request but Produce and Fetch at one quota window (1 s
#: by default); a longer throttle the broker enforces itself, not reading the connection
#: until it is over, so a request written earlier waits there (librdkafka never holds
#: one back). A broker's absurd value muted the connection for socket.timeout.ms.
MAX_THROTTLE_HOLD_S = 1.0
#: Bytes coalesced into one SSLSocket.send: large enough that per-call and per-record
#: costs vanish, small enough to keep the copy in cache.
_TLS_CHUNK = 256 * 1024
_TLS_WOULD_BLOCK = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError,
                    InterruptedError)
_EVENT_READ, _EVENT_WRITE = 1, 2  # selectors.EVENT_READ / EVENT_WRITE

ResponseCallback = Callable[[Any, Optional[KafkaError]], None]


def _io_error_code(exc: OSError) -> int:
    """_SSL for a TLS alert or protocol error (a refused client certificate arrives as
    one after a TLS 1.3 handshake), _TRANSPORT for a plain socket error or a cut."""
    if isinstance(exc, ssl.SSLError) and not isinstance(exc, ssl.SSLEOFError):
        return KafkaError._SSL
    return KafkaError._TRANSPORT


class ConnectionSettings:
    """The configuration a connection needs, taken once from a ClientConfig."""

    __slots__ = ("client_id", "request_timeout", "setup_timeout", "api_versions_timeout",
                 "max_in_flight", "max_frame_size", "reconnect_backoff_ms",
                 "reconnect_backoff_max_ms", "idle_timeout", "address_family", "nagle_off",
                 "keepalive", "send_buffer", "receive_buffer", "log_close", "security", "log",
                 "resolve_cb", "socket_cb", "connect_cb", "closesocket_cb", "verify_cb",
                 "callback_failed", "broker_identity", "statistics")

    def __init__(self, config: Any = None, **overrides: Any) -> None:
        get = (lambda k, d: config[k]) if config is not None else (lambda k, d: d)
        self.client_id = get("client.id", "kafka-native")
        self.request_timeout = get("socket.timeout.ms", 60000) / 1000.0
        self.setup_timeout = get("socket.connection.setup.timeout.ms", 30000) / 1000.0
        self.api_versions_timeout = get("api.version.request.timeout.ms", 10000) / 1000.0
        self.max_in_flight = get("max.in.flight.requests.per.connection", 1000000)
        self.max_frame_size = get("receive.message.max.bytes", DEFAULT_MAX_FRAME_SIZE)
        self.reconnect_backoff_ms = get("reconnect.backoff.ms", 100)
        self.reconnect_backoff_max_ms = get("reconnect.backoff.max.ms", 10000)
        self.idle_timeout = get("connections.max.idle.ms", 0) / 1000.0
        self.address_family = get("broker.address.family", "any")
        self.nagle_off = get("socket.nagle.disable", True)
        self.keepalive = get("socket.keepalive.enable", False)
        self.send_buffer = get("socket.send.buffer.bytes", 0)
        self.receive_buffer = get("socket.receive.buffer.bytes", 0)
        self.log_close = get("log.connection.close", True)
        #: statistics documents are built (their windows keep samples for percentiles)
        self.statistics = get("statistics.interval.ms", 0) > 0
        #: the client's logger (the ``logger`` property), else kafka_client.connection
        self.log: Any = config.logger_for(_log.name) if config is not None else _log
        #: TLS and SASL (plaintext when the configuration has none)
        self.security: SecuritySettings = getattr(config, "security", None) \
            or SecuritySettings()
        #: the application's socket callbacks (see kafka_client.config), None when unset
        self.resolve_cb = get("resolve_cb", None)
        self.socket_cb = get("socket_cb", None)
        self.connect_cb = get("connect_cb", None)
        self.closesocket_cb = get("closesocket_cb", None)
        self.verify_cb = get("ssl.certificate.verify_cb", None)
        #: ``callback_failed(exc)``: one of those callbacks raised ``exc``; the cluster
        #: keeps it for the caller of poll()/flush()/consume()
        self.callback_failed: Callable[[Exception], None] = _log_callback_failure
        #: ``broker_identity(conn) -> (broker_name, broker_id)`` as the callbacks see them
        self.broker_identity: Callable[["BrokerConnection"], Tuple[str, int]] = \
            lambda conn: (f"{conn.host}:{conn.port}/{conn.node_id}", conn.node_id)
        for k, v in overrides.items():
            setattr(self, k, v)


class CallbackError(Exception):
    """An application callback of a connection raised or refused; the message names it."""


def _log_callback_failure(exc: Exception) -> None:
    _log.error("connection callback raised: %r", exc)


def _earliest(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None:
        return b
    return a if b is None or a <= b else b


class _Request:
    """A request's policy state: its callback, when it was queued and sent, its deadlines
    (in the queue, then in flight). The conversation keeps it as the context of the
    request in flight."""

    __slots__ = ("msg", "api_key", "version", "expect_response", "callback", "timeout",
                 "deadline", "queue_deadline", "sent_at", "queued_at", "fail_unreachable",
                 "for_version")

    def __init__(self, msg: Any, version: Optional[int], expect_response: bool,
                 callback: Optional[ResponseCallback], timeout: Optional[float],
                 fail_unreachable: bool = False,
                 for_version: Optional[Callable[[Any, int], None]] = None) -> None:
        self.msg = msg
        self.fail_unreachable = fail_unreachable
        self.for_version = for_version
        # no message: the ApiVersions handshake, framed by the conversation itself
        self.api_key: int = msg.API_KEY if msg is not None else ApiKey.API_VERSIONS
        self.version = version
        self.expect_response = expect_response
        self.callback = callback
        self.timeout = timeout
        self.deadline = 0.0
        #: while it waits in the connection's queue, when it fails there (else 0.0)
        self.queue_deadline = 0.0
        self.sent_at = 0.0
        self.queued_at = time.monotonic()


class BrokerConnection:
    """One broker socket and its request pipeline (I/O thread only).

    ``io`` is the :class:`~kafka_client._net.io_thread.IOThread` (or anything with
    ``register/modify/unregister``). ``on_state(conn, state, error)`` is called on every
    state change (READY, DISCONNECTED with the error that closed it).
    """

    def __init__(self, io: Any, node_id: int, host: str, port: int,
                 settings: Optional[ConnectionSettings] = None,
                 on_state: Optional[Callable[["BrokerConnection", str, Optional[KafkaError]],
                                             None]] = None,
                 rng: Optional[random.Random] = None) -> None:
        self.io = io
        self.node_id = node_id
        self.host = host
        self.port = port
        self.settings = settings or ConnectionSettings()
        self.log = self.settings.log
        self.on_state = on_state
        self.state = DISCONNECTED
        self.sock: Optional[socket.socket] = None
        self.backoff = Backoff(self.settings.reconnect_backoff_ms,
                               self.settings.reconnect_backoff_max_ms, rng)
        #: earliest monotonic time a new connect() may start
        self.next_attempt = 0.0
        #: monotonic time of the last failure (connection lost or refused)
        self.failed_at = 0.0
        #: the next attempt was let through early by named_up; the last one so let
        #: through failed (no more early ones until an attempt after the backoff)
        self._named_attempt = False
        self._named_attempt_failed = False
        self.last_error: Optional[KafkaError] = None
        self.connect_count = 0
        self.last_activity = 0.0
        # statistics (librdkafka's per broker; windows since the last document)
        #: answers received, ever
        self.rtt_count = 0
        #: round trips of answered requests (s)
        keep = self.settings.statistics
        self.rtt = StatsWindow(keep)
        #: the same since the last metrics push (KIP-714 node.request.latency)
        self.rtt_window = IntervalStat()
        self.tx_requests = 0
        #: requests written, by API key
        self.requests_by_api: Dict[int, int] = {}
        #: seconds requests waited in this connection's queue
        self.outbuf_latency = StatsWindow(keep)
        #: milliseconds the broker said it throttled us (answers > 0)
        self.throttle = StatsWindow(keep)
        #: send and receive failures, undecodable answers, requests timed out, and
        #: connections lost after they were up
        self.tx_errors = 0
        self.rx_errors = 0
        self.rx_corrid_errors = 0
        self.request_timeouts = 0
        self.disconnects = 0
        #: monotonic times of the last state change, the last write and the last read
        self.state_since = time.monotonic()
        self.last_tx = 0.0
        self.last_rx = 0.0
        #: the throttle time of the last answer that had one (ms)
        self.last_throttle_ms = 0
        #: ``on_throttle(conn, ms)``: an answer said the broker throttled this client for
        #: ``ms`` > 0, or said 0 after an answer that had said more
        self.on_throttle: Optional[Callable[["BrokerConnection", int], None]] = None
        #: KIP-219: monotonic time until which no request is written, because an answer
        #: of a version the broker no longer delays said it throttled us (0.0: none)
        self.muted_until = 0.0
        self.tx_bytes = 0
        self.rx_bytes = 0
        self._addresses: List[Address] = []
        self._addr_index = 0
        self._setup_deadline = 0.0
        self._queue: Deque[_Request] = deque()        # waiting for READY / in-flight room
        #: ``(queue_deadline, id, request)`` of the queued requests, earliest first; an
        #: entry whose request left the queue (its queue_deadline no longer the entry's)
        #: is dropped when it comes to the top
        self._queue_deadlines: List[Tuple[float, int, _Request]] = []
        self._conv = BrokerConversation(self.settings.client_id,
                                        max_frame_size=self.settings.max_frame_size,
                                        allow_unstable=RELEASED_UNSTABLE_APIS)
        self._out: Deque[memoryview] = deque()
        self._out_bytes = 0
        self._written = 0            # bytes written since connect
        self._queued_bytes = 0       # bytes queued since connect
        self._write_marks: Deque[Tuple[int, _Request]] = deque()  # acks=0: fire when written
        self._events = 0
        self._shutting = False
        self._write_shut = False     # closing: our end of the stream sent (shutdown)
        self._tls_pending: Optional[Any] = None  # a chunk SSLSocket.send must retry whole
        self._sasl: Optional[SaslMechanism] = None
        self._reauth_at = 0.0       # monotonic time of the next KIP-368 re-authentication
        self._reauth_waiting = False  # re-authentication due, waiting for in-flight answers
        self._reauthenticating = False
        #: completed SASL authentications on this connection (re-authentications counted)
        self.authentications = 0
        #: answers counted (rtt_count) when the connection last became READY
        self._answers_at_ready = 0

    def __repr__(self) -> str:
        return f"<BrokerConnection {self.node_id} {self.host}:{self.port} {self.state}>"

    # -- queries ---------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.state == READY

    @property
    def versions(self) -> Dict[int, int]:
        """``{api_key: version}`` negotiated by the last handshake."""
        return self._conv.versions

    @property
    def broker_versions(self) -> Dict[int, Tuple[int, int]]:
        """The broker's ``{api_key: (min, max)}`` from the last handshake."""
        return self._conv.broker_versions

    @property
    def in_flight(self) -> int:
        """Requests written (or being written) that await a response."""
        return self._conv.in_flight

    @property
    def queued(self) -> int:
        """Requests not yet written (waiting for READY or in-flight room)."""
        return len(self._queue)

    def can_send(self) -> bool:
        """True when one more request would be written at once."""
        return (self.state == READY and not self._queue
                and self._conv.in_flight < self.settings.max_in_flight
                and not (self.muted_until and self._still_muted()))

    def _still_muted(self) -> bool:
        """Whether a KIP-219 throttle still holds requests back (clears it once over)."""
        if time.monotonic() < self.muted_until:
            return True
        self.muted_until = 0.0
        return False

    def version_for(self, api_key: int) -> Optional[int]:
        return self._conv.versions.get(api_key)

    # -- connect ---------------------------------------------------------------------
    def named_up(self, answered_at: float) -> None:
        """A lookup answered at ``answered_at`` (FindCoordinator, Metadata) names this
        broker: if the connection is waiting out a reconnect backoff after a failure from
        before that answer (the broker was down, and is back), it may connect at once
        rather than when the backoff, up to reconnect.backoff.max.ms, ends. One attempt
        per backoff step: refused again, the backoff goes on growing and the next answers
        wait for it (answers come every 100 ms while a leader is unreachable: a broker
        listed but never reachable was tried ten times a second)."""
        if (self.state == DISCONNECTED and not self._named_attempt_failed
                and self.failed_at < answered_at < self.next_attempt):
            self.next_attempt = answered_at
            self._named_attempt = True

    def readdress(self, host: str, port: int) -> bool:
        """The broker is at ``host:port`` now (a Metadata answer says so: restarted
        elsewhere). A connection down takes the new address, and may connect to it at
        once (its backoff was for the old one), as librdkafka does when a broker's name
        changes; one up or connecting keeps its address until it closes. True if taken."""
        if (host, port) == (self.host, self.port) or self.state != DISCONNECTED:
            return False
        self.log.info("broker %d moved from %s:%s to %s:%s", self.node_id, self.host,
                      self.port, host, port)
        self.host, self.port = host, port
        self._addresses = []
        self._addr_index = 0
        self.backoff.reset()
        self.next_attempt = 0.0
        self._named_attempt = self._named_attempt_failed = False
        return True

    def connect(self, now: Optional[float] = None) -> bool:
        """Start connecting (from DISCONNECTED, after the backoff). False if not started."""
        if self.state != DISCONNECTED:
            return False
        now = time.monotonic() if now is None else now
        if now < self.next_attempt:
            return False
        self.connect_count += 1
        self._setup_deadline = now + self.settings.setup_timeout
        if not self._addresses or self._addr_index >= len(self._addresses):
            resolve_cb = self.settings.resolve_cb
            resolver = None if resolve_cb is None else (
                lambda host, port: self._call_back("resolve_cb", resolve_cb, host, port))
            try:
                self._addresses = resolve(self.host, self.port, self.settings.address_family,
                                          resolver)
            except (OSError, ValueError, CallbackError) as exc:
                self._addresses = []
                self._fail(client_error(KafkaError._RESOLVE,
                                        f"{self.host}:{self.port}: failed to resolve: {exc}"))
                return True
            self._addr_index = 0
        self.state = CONNECTING
        self.state_since = time.monotonic()
        self._try_next_address()
        return True

    def _try_next_address(self) -> None:
        while self._addr_index < len(self._addresses):
            family, sockaddr = self._addresses[self._addr_index]
            self._addr_index += 1
            try:
                sock = self._new_socket(family)
            except (OSError, CallbackError) as exc:
                self.last_error = client_error(KafkaError._TRANSPORT,
                                               f"{self.host}:{self.port}: {exc}")
                continue
            sock.setblocking(False)
            s = self.settings
            try:
                if s.nagle_off:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if s.keepalive:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                if s.send_buffer:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, s.send_buffer)
                if s.receive_buffer:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, s.receive_buffer)
            except OSError:  # options are best effort
                pass
            try:
                rc = self._connect_socket(sock, sockaddr)
            except CallbackError as exc:
                self._close_socket(sock)
                self.last_error = client_error(
                    KafkaError._TRANSPORT,
                    f"{self.host}:{self.port} ({sockaddr[0]}): connect failed: {exc}")
                continue
            if rc not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                self._close_socket(sock)
                self.last_error = client_error(
                    KafkaError._TRANSPORT,
                    f"{self.host}:{self.port} ({sockaddr[0]}): connect failed: "
                    f"{errno.errorcode.get(rc, rc)}")
                continue
            self.sock = sock
            self._events = _EVENT_WRITE
            self.io.register(sock, self._events, self._on_event)
            if rc == 0:
                self._connected()
            return
        # Every address failed: this attempt is over.
        self._addresses = []
        self._fail(self.last_error or client_error(
            KafkaError._TRANSPORT, f"{self.host}:{self.port}: no address to connect to"))

    def _call_back(self, name: str, callback: Callable[..., Any], *args: Any) -> Any:
        """Run an application callback here on the I/O thread: what it raises goes to
        ``settings.callback_failed`` (for the caller of poll()/flush()/consume()) and on
        as a CallbackError naming it, which fails what it was called for."""
        try:
            return callback(*args)
        except Exception as exc:
            self.settings.callback_failed(exc)
            raise CallbackError(f"{name} raised {exc!r}") from exc

    def _new_socket(self, family: int) -> socket.socket:
        """A TCP socket: ``socket_cb(family, type, proto)``'s, or one made here."""
        socket_cb = self.settings.socket_cb
        if socket_cb is None:
            return socket.socket(family, socket.SOCK_STREAM)
        sock = self._call_back("socket_cb", socket_cb, family, socket.SOCK_STREAM,
                               socket.IPPROTO_TCP)
        if not isinstance(sock, socket.socket):
            raise CallbackError(f"socket_cb returned {sock!r}, not a socket.socket")
        return sock

    def _connect_socket(self, sock: socket.socket, sockaddr: tuple) -> int:
        """``connect_cb(sock, sockaddr, broker_name)`` first (a non-zero errno from it
        fails the attempt), then the non-blocking connect; returns its errno."""
        connect_cb = self.settings.connect_cb
        if connect_cb is not None:
            name, _ = self.settings.broker_identity(self)
            rc = self._call_back("connect_cb", connect_cb, sock, sockaddr, name)
            if rc:
                code = errno.errorcode.get(rc, rc) if isinstance(rc, int) else rc
                raise CallbackError(f"connect_cb returned {code}")
        return sock.connect_ex(sockaddr)

    def _close_socket(self, sock: socket.socket) -> None:
        """Close a broker socket, ``closesocket_cb(sock)`` first (the socket is closed
        whatever it does)."""
        closesocket_cb = self.settings.closesocket_cb
        if closesocket_cb is not None:
            try:
                self._call_back("closesocket_cb", closesocket_cb, sock)
            except CallbackError:
                pass  # on its way to the application (callback_failed)
        try:
            sock.close()
        except OSError:  # pragma: no cover
            pass

    def _connected(self) -> None:
        self._written = self._queued_bytes = 0
        self.last_activity = time.monotonic()
        ctx = self.settings.security.ssl_context
        if ctx is None:
            self._start_api_versions()
            return
        # wrap_socket takes the file descriptor over (the plain socket object is left
        # closed), so the selector forgets the old object and learns the new one.
        raw = self.sock
        assert raw is not None     # connected
        self.io.unregister(raw)
        try:
            self.sock = ctx.wrap_socket(raw, server_hostname=self.host,
                                        do_handshake_on_connect=False)
        except (ssl.SSLError, OSError, ValueError) as exc:
            self.sock = None
            self._close_socket(raw)
            self.close(KafkaError(KafkaError._SSL, f"{self.host}:{self.port}: TLS set-up "
                                                   f"failed: {exc}"))
            return
        self.state = TLS_HANDSHAKE
        self._events = _EVENT_READ
        self.io.register(self.sock, self._events, self._on_event)
        self._tls_handshake_step()

    def _tls_handshake_step(self) -> None:
        sock = self.sock
        assert isinstance(sock, ssl.SSLSocket)    # wrapped by _connected
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._set_events(_EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._set_events(_EVENT_READ | _EVENT_WRITE)
            return
        except ssl.SSLCertVerificationError as exc:
            self.close(KafkaError(KafkaError._SSL, (
                f"{self.host}:{self.port}: SSL handshake failed: certificate verify failed: "
                f"{exc.verify_message or exc}: broker certificate could not be verified, "
                f"verify that ssl.ca.location is correctly configured or root CA "
                f"certificates are installed")))
            return
        except (ssl.SSLError, OSError) as exc:
            self.close(KafkaError(KafkaError._SSL, f"{self.host}:{self.port}: SSL handshake "
                                                   f"failed: {exc}"))
            return
        self.log.debug("TLS to %s:%s: %s, %s", self.host, self.port, sock.version(),
                       (sock.cipher() or ("?",))[0])
        verify_cb = self.settings.verify_cb
        if verify_cb is not None:
            try:
                self._verify_peer(sock, verify_cb)
            except CallbackError as exc:
                self.close(KafkaError(KafkaError._SSL, f"{self.host}:{self.port}: SSL "
                                                       f"handshake failed: {exc}"))
                return
        self._start_api_versions()

    def _verify_peer(self, sock: Any, verify_cb: Callable[..., Any]) -> None:
        """``ssl.certificate.verify_cb(broker_name, broker_id, x509_error, depth,
        der_cert)`` once, for the broker's leaf certificate (the one Python's ssl shows),
        after OpenSSL's own verification passed (x509_error 0): a false answer refuses
        it."""
        name, broker_id = self.settings.broker_identity(self)
        der = sock.getpeercert(binary_form=True)
        if not self._call_back("ssl.certificate.verify_cb", verify_cb, name, broker_id, 0,
                               0, der):
            raise CallbackError("ssl.certificate.verify_cb refused the broker's certificate")

    def _start_api_versions(self) -> None:
        self.state = HANDSHAKE
        self._set_events(_EVENT_READ)
        handshake = _Request(None, None, True, None, self.settings.api_versions_timeout)
        self._queue_out(handshake, self._conv.start_handshake(handshake))

    def _handshake_answered(self, event: HandshakeExchange) -> None:
        if event.retry is not None:  # the broker asked for a lower ApiVersions version
            req = event.request.data
            req.queued_at = time.monotonic()
            self._queue_out(req, event.retry)
            return
        if self.settings.security.mechanism is not None:
            self._start_sasl()
        else:
            self._ready()

    def _ready(self) -> None:
        self.state = READY
        self.state_since = time.monotonic()
        self._answers_at_ready = self.rtt_count
        self.backoff.reset()
        self._named_attempt = self._named_attempt_failed = False
        self._addresses = []
        self.last_error = None
        self.log.debug("connected to %s:%s (node %s)", self.host, self.port, self.node_id)
        self._flush_queue()
        if self.on_state is not None:
            self.on_state(self, READY, None)

    # -- SASL ------------------------------------------------------------------------------
    def _start_sasl(self) -> None:
        """SaslHandshake, then SaslAuthenticate rounds until the mechanism completes."""
        self.state = AUTHENTICATING
        self._sasl = None
        version = self._conv.versions.get(ApiKey.SASL_HANDSHAKE)
        if version is None or version < 1 or \
                self._conv.versions.get(ApiKey.SASL_AUTHENTICATE) is None:
            self._auth_failed(KafkaError._UNSUPPORTED_FEATURE,
                              "the broker does not support SaslHandshake v1 and "
                              "SaslAuthenticate (KIP-152, Kafka 1.0+)")
            return
        mechanism = self.settings.security.mechanism
        assert mechanism is not None     # SASL is started only when one is configured
        self._send_now(SaslHandshakeRequest(mechanism=mechanism), self._sasl_handshake_answered)

    def _send_now(self, msg: Any, callback: ResponseCallback) -> None:
        """Write a request of the connection's own (SASL) ahead of the queue."""
        self._write_request(_Request(msg, None, True, callback, None))

    def _sasl_handshake_answered(self, resp: Any, err: Optional[KafkaError]) -> None:
        if err is not None or self.state != AUTHENTICATING:
            return  # the connection closed meanwhile; close() reported why
        mechanism = self.settings.security.mechanism
        if resp.error_code != ErrorCode.NONE:
            offered = ", ".join(resp.mechanisms or ()) or "none"
            if resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
                why = (f"SASL mechanism {mechanism} is not enabled on the broker (it offers: "
                       f"{offered})")
            else:
                why = f"SaslHandshake failed: {broker_error(resp.error_code).name}"
            self._auth_failed(KafkaError._AUTHENTICATION, why)
            return
        try:
            mech = self._sasl = self.settings.security.new_mechanism(self.host)
            if mech.may_block:
                # GSSAPI asks the KDC for the broker's ticket: not on the I/O thread,
                # which serves every other connection meanwhile. The setup deadline
                # still bounds the wait.
                threading.Thread(target=self._sasl_first_off_thread, args=(mech,),
                                 name="kafka-sasl", daemon=True).start()
                return
            first = mech.initial()
        except SaslError as exc:
            self._auth_failed(KafkaError._AUTHENTICATION, str(exc))
            return
        self._send_now(SaslAuthenticateRequest(auth_bytes=first), self._sasl_answered)

    def _sasl_first_off_thread(self, mech: SaslMechanism) -> None:
        """Helper thread: the mechanism's first message, handed to the I/O thread."""
        try:
            first: Any = mech.initial()
        except SaslError as exc:
            first = exc
        self.io.call_soon(self._sasl_first_ready, mech, first)

    def _sasl_first_ready(self, mech: SaslMechanism, first: Any) -> None:
        if self.state != AUTHENTICATING or self._sasl is not mech:
            return   # closed (or timed out) meanwhile
        if isinstance(first, SaslError):
            self._auth_failed(KafkaError._AUTHENTICATION, str(first))
            return
        self._send_now(SaslAuthenticateRequest(auth_bytes=first), self._sasl_answered)

    def _sasl_answered(self, resp: Any, err: Optional[KafkaError]) -> None:
        if err is not None or self.state != AUTHENTICATING or self._sasl is None:
            return
        mech = self._sasl
        if resp.error_code != ErrorCode.NONE:
            detail = resp.error_message or broker_error(resp.error_code).name
            server_said = getattr(mech, "server_error", "")
            if server_said:
                detail += f" ({server_said})"
            self._auth_failed(KafkaError._AUTHENTICATION,
                              f"SASL {mech.name} authentication failed: {detail}")
            return
        try:
            reply = mech.respond(bytes(resp.auth_bytes or b""))
        except SaslError as exc:
            self._auth_failed(KafkaError._AUTHENTICATION, f"SASL {mech.name}: {exc}")
            return
        if reply is not None:
            self._send_now(SaslAuthenticateRequest(auth_bytes=reply), self._sasl_answered)
            return
        self._sasl = None
        self.authentications += 1
        lifetime = getattr(resp, "session_lifetime_ms", 0) or 0
        if lifetime > 0:
            # KIP-368: well before the broker would close the session (as the Java
            # client: at 85-95% of the lifetime, so connections do not all go at once).
            self._reauth_at = time.monotonic() + lifetime / 1000.0 * \
                self.backoff.rng.uniform(0.85, 0.95)
        else:
            self._reauth_at = 0.0
        self.log.debug("authenticated to %s:%s with %s", self.host, self.port, mech.name)
        if self._reauthenticating:
            # The connection was READY before: no new READY event, just carry on.
            self._reauthenticating = False
            self.state = READY
            self._flush_queue()
            return
        self._ready()

    def _auth_failed(self, code: int, why: str) -> None:
        self.close(KafkaError(code, f"{self.host}:{self.port}: {why}"))

    def _begin_reauth(self, now: float) -> None:
        """KIP-368: authenticate again on this connection; new requests wait meanwhile."""
        self._reauth_at = 0.0
        self.state = AUTHENTICATING
        self._setup_deadline = now + self.settings.setup_timeout
        self._reauthenticating = self._reauth_waiting = True
        self._maybe_reauth_now()

    def _maybe_reauth_now(self) -> None:
        if self._reauth_waiting and self._conv.in_flight == 0 and self.sock is not None:
            self._reauth_waiting = False
            self.log.debug("re-authenticating to %s:%s", self.host, self.port)
            self._start_sasl()

    # -- sending ---------------------------------------------------------------------
    def send(self, msg: Any, callback: Optional[ResponseCallback] = None, *,
             version: Optional[int] = None, expect_response: bool = True,
             timeout: Optional[float] = None, fail_unreachable: bool = False,
             for_version: Optional[Callable[[Any, int], None]] = None) -> None:
        """Queue a request (a generated message object). ``callback(response, error)``
        runs on the I/O thread with the decoded response, or with ``(None, KafkaError)``
        when it failed (with a code in :data:`NEVER_SENT` when it was never written); for
        ``expect_response=False`` (acks=0 Produce) it runs with ``(None, None)`` once the
        request is handed to the kernel. ``version`` None uses
        the negotiated version. ``timeout`` (s) defaults to ``socket.timeout.ms``; it
        bounds the wait in the queue (from now; then ``_TIMED_OUT_QUEUE``, never sent,
        the connection left up) and, once written, the wait for the answer (then
        ``_TIMED_OUT``, which closes the connection).
        A request waiting for the connection stays queued through failed connection
        attempts until its timeout, unless ``fail_unreachable``: then it fails with the
        first failed attempt (for a request that belongs to whichever broker leads a
        partition now, which the caller asks again). ``for_version(msg, version)`` sets
        the fields that depend on the version, once it is known (a request queued before
        the connection's ApiVersions answer is encoded later)."""
        req = _Request(msg, version, expect_response, callback, timeout, fail_unreachable,
                       for_version)
        if self.can_send():
            self._write_request(req)
        else:
            req.queue_deadline = req.queued_at + (
                timeout if timeout is not None else self.settings.request_timeout)
            heapq.heappush(self._queue_deadlines, (req.queue_deadline, id(req), req))
            self._queue.append(req)
            if self.state == DISCONNECTED:
                self.connect()

    def _flush_queue(self) -> None:
        q = self._queue
        if self.muted_until and self._still_muted():
            return  # service() writes them when the throttle is over
        limit = self.settings.max_in_flight
        while q and self.state == READY and self._conv.in_flight < limit:
            req = q.popleft()
            req.queue_deadline = 0.0
            self._write_request(req)
        if not q:
            self._queue_deadlines.clear()

    def _write_request(self, req: _Request) -> None:
        version = req.version
        if version is None:
            version = self._conv.versions.get(req.api_key)
            if version is None:
                self._finish(req, None, client_error(
                    KafkaError._UNSUPPORTED_FEATURE,
                    f"broker {self.host}:{self.port} supports no common version of API "
                    f"{req.api_key}"))
                return
            req.version = version
        try:
            if req.for_version is not None:
                req.for_version(req.msg, version)
            out = self._conv.send(req.msg, version, expect_response=req.expect_response,
                                  context=req)
        except Exception as exc:
            self._finish(req, None, client_error(KafkaError._INVALID_ARG,
                                                 f"cannot encode request: {exc}"))
            return
        self._queue_out(req, out)

    def _queue_out(self, req: _Request, out: OutgoingRequest) -> None:
        """Stamp a framed request and queue its bytes (written at once when possible)."""
        now = time.monotonic()
        req.sent_at = now
        self.outbuf_latency.add(now - req.queued_at)
        api_key = req.api_key
        by_api = self.requests_by_api
        by_api[api_key] = by_api.get(api_key, 0) + 1
        timeout = req.timeout if req.timeout is not None else self.settings.request_timeout
        req.deadline = now + timeout
        q = self._out
        for p in out.parts:
            q.append(p if isinstance(p, memoryview) else memoryview(p))
        self._out_bytes += out.size
        self._queued_bytes += out.size
        self.tx_requests += 1
        if not req.expect_response:
            self._write_marks.append((self._queued_bytes, req))
        self._write_out()

    def _write_out(self) -> None:
        if self.settings.security.ssl_context is not None:
            self._write_out_tls()
            return
        sock = self.sock
        out = self._out
        while out and sock is not None:
            bufs = list(out) if len(out) <= _IOV_MAX else [out[i] for i in range(_IOV_MAX)]
            try:
                n = sock.sendmsg(bufs)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self.tx_errors += 1
                self.close(client_error(KafkaError._TRANSPORT,
                                        f"{self.host}:{self.port}: send failed: {exc}"))
                return
            self._written += n
            self._out_bytes -= n
            self.tx_bytes += n
            self.last_activity = self.last_tx = time.monotonic()
            while n:
                head = out[0]
                if n >= len(head):
                    n -= len(head)
                    out.popleft()
                else:
                    out[0] = head[n:]
                    n = 0
        self._after_write(bool(out))

    def _after_write(self, more: bool) -> None:
        marks = self._write_marks
        while marks and marks[0][0] <= self._written:
            _, req = marks.popleft()
            self._finish(req, None, None)
        if self.sock is not None:
            want = _EVENT_READ | (_EVENT_WRITE if more else 0)
            if want != self._events:
                self._set_events(want)

    def _write_out_tls(self) -> None:
        """Writes over TLS: queued buffers are joined into chunks of up to _TLS_CHUNK (one
        SSL_write each, many TLS records). A chunk that would block is kept and sent
        again whole, as OpenSSL requires."""
        sock = self.sock
        out = self._out
        while sock is not None and self.state != TLS_HANDSHAKE:
            chunk = self._tls_pending
            if chunk is None:
                if not out:
                    break
                head = out.popleft()
                if not out or len(head) >= _TLS_CHUNK:
                    chunk = head
                else:
                    parts = [head]
                    size = len(head)
                    while out and size < _TLS_CHUNK:
                        part = out.popleft()
                        parts.append(part)
                        size += len(part)
                    chunk = b"".join(parts)
                self._tls_pending = chunk
            try:
                n = sock.send(chunk)
            except _TLS_WOULD_BLOCK:
                break
            except OSError as exc:
                self.tx_errors += 1
                self.close(client_error(_io_error_code(exc),
                                        f"{self.host}:{self.port}: send failed: {exc}"))
                return
            self._tls_pending = None if n >= len(chunk) else memoryview(chunk)[n:]
            self._written += n
            self._out_bytes -= n
            self.tx_bytes += n
            self.last_activity = self.last_tx = time.monotonic()
        self._after_write(bool(out) or self._tls_pending is not None)

    def _set_events(self, events: int) -> None:
        self._events = events
        if self.sock is not None:
            self.io.modify(self.sock, events, self._on_event)

    # -- events ------------------------------------------------------------------------
    def _on_event(self, mask: int) -> None:
        if self.state == TLS_HANDSHAKE:
            self._tls_handshake_step()
            return
        if self.state == CONNECTING:
            if mask & _EVENT_WRITE:
                sock = self.sock
                assert sock is not None    # an event comes for the registered socket only
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    self.last_error = client_error(
                        KafkaError._TRANSPORT,
                        f"{self.host}:{self.port}: connect failed: "
                        f"{errno.errorcode.get(err, err)} ({os.strerror(err)})")
                    self._drop_socket()
                    self.state = CONNECTING
                    self.state_since = time.monotonic()
                    self._try_next_address()
                    return
                self._connected()
            return
        if mask & _EVENT_READ:
            self._read()
        if self.sock is not None and mask & _EVENT_WRITE:
            self._write_out()
        if self._shutting:
            self._shut_down_further()

    def _read(self) -> None:
        sock = self.sock
        if self._write_shut:
            assert sock is not None    # _write_shut: shut down, not closed since
            self._drain(sock)
            return
        conv = self._conv
        # Bounded, so one busy socket cannot starve the others; a TLS read returns at most
        # one record (16 KiB), so TLS gets more reads for about as many bytes per turn.
        for _ in range(16 if self.settings.security.ssl_context is None else 128):
            if sock is None or self.sock is not sock:
                return
            view = conv.buffer_for_read()
            try:
                n = sock.recv_into(view)
            except _TLS_WOULD_BLOCK:
                return
            except OSError as exc:
                self.rx_errors += 1
                self.close(client_error(_io_error_code(exc),
                                        f"{self.host}:{self.port}: receive failed: "
                                        f"{exc}{self._closed_hint()}"))
                return
            finally:
                del view
            if n == 0:
                self.close(client_error(KafkaError._TRANSPORT,
                                        f"{self.host}:{self.port}: connection closed by "
                                        f"broker{self._closed_hint()}"))
                return
            self.rx_bytes += n
            self.last_activity = self.last_rx = time.monotonic()
            try:
                conv.commit(n)
            except Exception as exc:
                self._receive_failed(exc)
                hint = (" (raise receive.message.max.bytes to accept larger answers)"
                        if getattr(exc, "too_large", False) else "")
                self.close(client_error(KafkaError._BAD_MSG,
                                        f"{self.host}:{self.port}: bad frame: {exc}{hint}"))
                return
            self._handle_answers(sock)
        # OpenSSL may hold decrypted bytes the selector cannot see: read them next turn.
        if self.sock is sock and isinstance(sock, ssl.SSLSocket) and sock.pending():
            self.io.call_soon(self._read_pending, sock)

    def _receive_failed(self, exc: BaseException) -> None:
        """Count a receive failure for the statistics (rxerrs; rxcorriderrs for an answer
        to no request in flight)."""
        self.rx_errors += 1
        if isinstance(exc, CorrelationIdError):
            self.rx_corrid_errors += 1

    def _read_pending(self, sock: Any) -> None:
        if self.sock is sock:
            self._read()

    def _handle_answers(self, sock: socket.socket) -> None:
        """Take every answer the conversation has complete, one at a time (a callback may
        close the connection: the rest is then dropped with the stream)."""
        conv = self._conv
        while self.sock is sock:
            try:
                event = conv.next_event()
            except ResponseDecodeError as exc:
                self.rx_errors += 1
                error = client_error(KafkaError._TRANSPORT, f"{self.host}:{self.port}: {exc}")
                self.close(error)
                self._finish(exc.request.data, None, error)  # answered, so not failed by close
                return
            except UnsupportedVersionError:
                self.close(client_error(KafkaError._UNSUPPORTED_FEATURE,
                                        f"{self.host}:{self.port}: no ApiVersions version "
                                        f"accepted"))
                return
            except HandshakeError as exc:
                self.close(client_error(KafkaError._TRANSPORT, f"{self.host}:{self.port}: {exc}"))
                return
            except Exception as exc:
                self._receive_failed(exc)
                self.close(client_error(KafkaError._TRANSPORT,
                                        f"{self.host}:{self.port}: bad response: {exc}"))
                return
            if event is None:
                return
            req = event.request.data
            rtt = time.monotonic() - req.sent_at
            self.rtt_count += 1
            self.rtt.add(rtt)
            self.rtt_window.add(rtt)
            if event.__class__ is HandshakeExchange:
                self._handshake_answered(event)
                continue
            resp = event.response
            throttle_ms = getattr(resp, "throttle_time_ms", 0)
            if throttle_ms or self.last_throttle_ms:
                self._throttled(throttle_ms, req)
            self._finish(req, resp, None)
            if self._queue and self.state == READY:
                self._flush_queue()
            elif self._reauth_waiting:
                self._maybe_reauth_now()

    def _throttled(self, throttle_ms: int, req: _Request) -> None:
        """An answer carried a throttle time: counted for the statistics and passed to
        ``on_throttle``. From the version where the broker answers at once instead of
        delaying the answer (KIP-219), this connection writes nothing more to the
        broker for that long, as the Java client does (librdkafka does not), up to
        MAX_THROTTLE_HOLD_S."""
        self.last_throttle_ms = throttle_ms
        if throttle_ms > 0:
            since = API_KEYS[req.api_key].client_throttles_from
            assert req.version is not None    # answered, so written with its version
            if since is not None and req.version >= since:
                # Bounded: a broker's absurd value cannot park the requests queued here
                # (the heartbeats of a group member among them: they would time out in
                # the queue) beyond what the broker's own throttle makes them wait.
                until = time.monotonic() + min(throttle_ms / 1000.0, MAX_THROTTLE_HOLD_S,
                                               self.settings.request_timeout)
                if until > self.muted_until:
                    self.muted_until = until
            self.throttle.add(throttle_ms)
        if self.on_throttle is not None:
            self.on_throttle(self, throttle_ms)

    def _finish(self, req: _Request, resp: Any, error: Optional[KafkaError]) -> None:
        cb = req.callback
        if cb is not None:
            try:
                cb(resp, error)
            except Exception:
                self.log.exception("response callback failed")

    def _closed_hint(self) -> str:
        """What a broker closing (or resetting) the connection at once most often means,
        as librdkafka hints it: during the ApiVersions exchange, a TLS listener spoken to
        in plaintext; before answering anything after it, a listener that wants SASL."""
        security = self.settings.security
        if self.state == HANDSHAKE and security.ssl_context is None:
            return (" while asked for its API versions (is it a TLS listener? check "
                    "security.protocol)")
        if self.state == READY and self.rtt_count == self._answers_at_ready \
                and security.mechanism is None:
            return (" before answering any request (does it require SASL "
                    "authentication? check security.protocol and sasl.mechanism)")
        return ""

    # -- time --------------------------------------------------------------------------
    def service(self, now: float) -> Optional[float]:
        """Periodic work: reconnect when requests wait and the backoff is over, expire
        requests and setups, close when idle. Returns when it next wants to run."""
        if self._queue_deadlines:
            self._expire_queued(now)     # first: a queue emptied so needs no connection
        if self.state == DISCONNECTED and self._queue:
            if now >= self.next_attempt:
                self.connect(now)
            else:
                return _earliest(self.next_attempt, self._next_queue_deadline())
        nxt = self.check_timeouts(now)
        if self.muted_until:
            if now < self.muted_until:
                return self.muted_until if nxt is None else min(nxt, self.muted_until)
            self.muted_until = 0.0
            if self._queue and self.state == READY:
                self._flush_queue()
        return nxt

    def check_timeouts(self, now: float) -> Optional[float]:
        """Fail the queued requests whose timeout passed; close on an expired request in
        flight or setup; idle-close. Returns the next deadline."""
        queued_next = self._expire_queued(now) if self._queue_deadlines else None
        return _earliest(self._check_connection_timeouts(now), queued_next)

    def _check_connection_timeouts(self, now: float) -> Optional[float]:
        st = self.state
        if st == DISCONNECTED:
            return self.next_attempt if (self._queue and self.next_attempt > now) else None
        if st in _SETTING_UP:
            if now >= self._setup_deadline:
                self.close(client_error(KafkaError._TRANSPORT if st == CONNECTING
                                        else KafkaError._TIMED_OUT,
                                        f"{self.host}:{self.port}: connection setup timed out "
                                        f"after {self.settings.setup_timeout:g}s ({st})"))
                return None
            nxt = self._setup_deadline
        elif self._reauth_at and st == READY:
            if now >= self._reauth_at:
                self._begin_reauth(now)
                return self._setup_deadline
            nxt = self._reauth_at
        else:
            nxt = None
        oldest = self._conv.oldest()
        if oldest is not None:
            # Send order; timeouts mostly equal, so the oldest is (nearly) the earliest.
            earliest = oldest.data.deadline
            if now >= earliest:
                self.request_timeouts += 1
                self.close(client_error(KafkaError._TIMED_OUT,
                                        f"{self.host}:{self.port}: request timed out"))
                return None
            nxt = earliest if nxt is None else min(nxt, earliest)
        idle = self.settings.idle_timeout
        if idle and st == READY and not self._conv.in_flight and not self._queue \
                and not self._out and self._tls_pending is None:
            at = self.last_activity + idle
            if now >= at:
                self.log.debug("closing idle connection to %s:%s", self.host, self.port)
                self.close(None)
                return None
            nxt = at if nxt is None else min(nxt, at)
        return nxt

    def _expire_queued(self, now: float) -> Optional[float]:
        """Fail the queued requests whose timeout passed, with ``_TIMED_OUT_QUEUE``: never
        written, so the connection and its stream are left as they are. Returns the next
        queued deadline. Looks at the heap's top only, unless something expired."""
        heap = self._queue_deadlines
        expired: List[_Request] = []
        while heap:
            deadline, _, req = heap[0]
            if req.queue_deadline != deadline:
                heapq.heappop(heap)          # written or failed since: a stale entry
            elif deadline <= now:
                heapq.heappop(heap)
                req.queue_deadline = 0.0
                expired.append(req)
            else:
                break
        if expired:
            q = self._queue
            left = len(expired)
            while q and not q[0].queue_deadline:   # the usual case: the oldest expire
                q.popleft()
                left -= 1
            if left:     # behind a request queued earlier with a longer timeout
                kept = [r for r in q if r.queue_deadline]
                q.clear()
                q.extend(kept)
            self.request_timeouts += len(expired)
            for req in expired:
                timeout = req.timeout if req.timeout is not None \
                    else self.settings.request_timeout
                self._finish(req, None, client_error(
                    KafkaError._TIMED_OUT_QUEUE,
                    f"{self.host}:{self.port}: request timed out in queue after "
                    f"{timeout:g}s, never sent (connection {self.state})"))
        return self._next_queue_deadline()

    def _next_queue_deadline(self) -> Optional[float]:
        heap = self._queue_deadlines
        while heap and heap[0][2].queue_deadline != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    # -- close -------------------------------------------------------------------------
    def shutdown(self) -> bool:
        """Graceful close: finish writing and read the answers still due, then close.
        Closing with unread answers in our receive buffer would send a reset, and a
        broker may then drop requests it has not read yet: acks=0 Produce requests,
        which Tansu and noida-db answer although nobody waits for it. Returns False when
        there is nothing to wait for (the connection is closed now)."""
        if self.state != READY or self.sock is None or self._quiet():
            self.close(None)
            return False
        self.on_state = None
        self._shutting = True
        self._shut_down_further()
        return self.sock is not None

    def _shut_down_further(self) -> None:
        """Closing: close once nothing more is due. Once everything is written and only
        answers to fire-and-forget requests could still come (acks=0 Produce: Tansu and
        noida-db answer it, Kafka never does), end our side of the stream: the broker
        closes its side after reading the requests before that end, and the answers it
        sent meanwhile are read first. Waiting for those answers alone held every acks=0
        producer's close() for the whole grace on Kafka (librdkafka closes at once).
        Over TLS our end is TLS's own (_end_tls_stream): SSLSocket.shutdown() would drop
        the TLS layer with the answers."""
        if self._quiet():
            self.close(None)
            return
        if self._write_shut or self._out or self._tls_pending is not None \
                or self._conv.in_flight:
            return
        if self.settings.security.ssl_context is not None:
            self._end_tls_stream()
            return
        sock = self.sock
        assert sock is not None    # _shutting: shutdown() found one, no close() since
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.close(None)
            return
        self._write_shut = True

    def _end_tls_stream(self) -> None:
        """Closing over TLS: end our side with TLS's close_notify alert, the connection
        kept open for what the broker still sends and its own end. SSLSocket.unwrap() on a
        non-blocking socket sends the alert and stops there (SSLWantReadError: the
        broker's alert is still to come); the broker (Kafka, stunnel) reads every request
        before the alert, then ends its side. Waiting for the answers Kafka never sends
        held an acks=0 producer's close() for the whole grace over TLS."""
        sock = self.sock
        assert isinstance(sock, ssl.SSLSocket)    # _shutting: not closed since shutdown()
        try:
            sock.unwrap()
        except ssl.SSLWantReadError:
            self._write_shut = True       # sent: drain what comes until the broker's end
            return
        except ssl.SSLWantWriteError:
            self._set_events(_EVENT_READ | _EVENT_WRITE)   # sent in part: again once writable
            return
        except (ssl.SSLError, OSError, ValueError):
            pass
        self.close(None)                  # the broker's end came too (or the socket failed)

    def _drain(self, sock: socket.socket) -> None:
        """Closing, our end of the stream sent: what the broker still sends (answers to
        acks=0 requests, which nobody waits for) is read and dropped, not parsed (OpenSSL
        drops a TLS record that arrives while unwrap() looks for the broker's alert),
        until the broker's end closes the connection."""
        scratch = bytearray(65536)
        for _ in range(128):
            if self.sock is not sock:
                return
            try:
                n = sock.recv_into(scratch)
            except _TLS_WOULD_BLOCK:
                return
            except OSError:
                n = 0            # a reset, TLS's alert (SSLZeroReturnError): the end too
            if n == 0:
                self.close(None)
                return
            self.rx_bytes += n
            self.last_activity = self.last_rx = time.monotonic()
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            self.io.call_soon(self._read_pending, sock)

    def _quiet(self) -> bool:
        conv = self._conv
        return not self._out and self._tls_pending is None and not conv.in_flight \
            and conv.unanswered_fire_and_forget == 0

    def _drop_socket(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            self.io.unregister(sock)
            self._close_socket(sock)

    def _fail(self, error: KafkaError) -> None:
        """A connect attempt failed: back off, fail queued requests only if asked."""
        self.close(error)

    def close(self, error: Optional[KafkaError] = None, *, fail_queued: bool = False) -> None:
        """Close the socket. In-flight requests fail with ``error`` (``_TRANSPORT`` when
        None); queued ones stay for the next connection unless ``fail_queued``, or sent
        with ``fail_unreachable`` and ``error`` is given. ``error`` None (idle close,
        shutdown) does not count as a failure for the backoff."""
        was = self.state
        self._shutting = self._write_shut = False
        self._drop_socket()
        if was != DISCONNECTED:
            self.state_since = time.monotonic()
            if was == READY:
                self.disconnects += 1
        self.state = DISCONNECTED
        self._out.clear()
        self._out_bytes = 0
        self._tls_pending = None
        self._sasl = None
        self._reauth_at = 0.0
        self._reauth_waiting = self._reauthenticating = False
        marks = list(self._write_marks)
        self._write_marks.clear()
        inflight = [entry.data for entry in self._conv.reset()]
        now = time.monotonic()
        if error is not None:
            self.last_error = error
            self.failed_at = now
            self.next_attempt = now + self.backoff.next_delay()
            self._named_attempt_failed = self._named_attempt
            self._named_attempt = False
            if error.code() == KafkaError._DESTROY:
                self.log.debug("connection to %s:%s closed: %s", self.host, self.port,
                               error.str())
            elif was == READY:
                log = self.log.info if self.settings.log_close else self.log.debug
                log("connection to %s:%s lost: %s", self.host, self.port, error.str())
            else:
                # As librdkafka's "FAIL ... Connect to ... failed", at every attempt, with
                # or without error_cb: a broker that cannot be reached shows in the log
                # (stderr by default) at once, not only when a message times out.
                self.log.error("connection to %s:%s failed: %s", self.host, self.port,
                               error.str())
        else:
            self.next_attempt = now
        fail_with = error or client_error(KafkaError._TRANSPORT,
                                          f"{self.host}:{self.port}: connection closed")
        # acks=0 requests cut off mid-write never reached the broker whole.
        for _, req in marks:
            self._finish(req, None, fail_with)
        for req in inflight:
            self._finish(req, None, fail_with)
        if fail_queued:
            queued = list(self._queue)
            self._queue.clear()
            self._queue_deadlines.clear()
            for req in queued:
                req.queue_deadline = 0.0
                self._finish(req, None, fail_with)
        elif error is not None and any(req.fail_unreachable for req in self._queue):
            failing = [req for req in self._queue if req.fail_unreachable]
            kept = [req for req in self._queue if not req.fail_unreachable]
            self._queue.clear()
            self._queue.extend(kept)
            for req in failing:
                req.queue_deadline = 0.0     # its deadline's entry is stale now
                self._finish(req, None, fail_with)
        if self.on_state is not None:
            self.on_state(self, DISCONNECTED, error)
