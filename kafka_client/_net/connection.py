"""A non-blocking connection to one broker, driven by the client's I/O thread.

State machine::

    DISCONNECTED --connect()--> CONNECTING --TCP up--> HANDSHAKE --ApiVersions--> READY
          ^                          |                    |                          |
          +------ close(error): backoff, then a new connect() may start -------------+

* ``connect()`` resolves the host (every address, tried in turn on failure) and starts a
  non-blocking ``connect``; ``socket.connection.setup.timeout.ms`` bounds TCP connect plus
  the ApiVersions exchange.
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
  ``_TIMED_OUT``; a broken connection fails them with ``_TRANSPORT``.
* After a close, :attr:`BrokerConnection.next_attempt` is the earliest time for the next
  connect: ``reconnect.backoff.ms`` doubling per consecutive failure up to
  ``reconnect.backoff.max.ms``, each wait jittered by -25%..+50% as librdkafka does.

All methods run on the I/O thread; callbacks run there too and must be quick.
"""
from __future__ import annotations

import errno
import logging
import os
import random
import socket
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from kafka_client._net.bootstrap import Address, resolve
from kafka_client.errors import KafkaError, client_error
from kafka_proto.errors import UnsupportedVersionError
from kafka_proto.framing import DEFAULT_MAX_FRAME_SIZE
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
    "HANDSHAKE",
    "READY",
]

_log = logging.getLogger("kafka_client.connection")

DISCONNECTED, CONNECTING, HANDSHAKE, READY = "DISCONNECTED", "CONNECTING", "HANDSHAKE", "READY"

_IOV_MAX = 512  # buffers per sendmsg call (Linux allows 1024)
_EVENT_READ, _EVENT_WRITE = 1, 2  # selectors.EVENT_READ / EVENT_WRITE

ResponseCallback = Callable[[Any, Optional[KafkaError]], None]


class Backoff:
    """Exponential backoff with -25%..+50% jitter (librdkafka's reconnect rule)."""

    __slots__ = ("base", "maximum", "failures", "rng")

    def __init__(self, base_ms: float, max_ms: float, rng: Optional[random.Random] = None):
        self.base = base_ms / 1000.0
        self.maximum = max_ms / 1000.0
        self.failures = 0
        self.rng = rng or random.Random()

    def next_delay(self) -> float:
        """The wait before the next attempt (seconds); counts one more failure."""
        if self.base <= 0:
            self.failures += 1
            return 0.0
        raw = self.base * (2 ** min(self.failures, 30))
        self.failures += 1
        jittered = raw * self.rng.uniform(0.75, 1.5)
        return min(jittered, self.maximum)

    def reset(self) -> None:
        self.failures = 0


class ConnectionSettings:
    """The configuration a connection needs, taken once from a ClientConfig."""

    __slots__ = ("client_id", "request_timeout", "setup_timeout", "api_versions_timeout",
                 "max_in_flight", "max_frame_size", "reconnect_backoff_ms",
                 "reconnect_backoff_max_ms", "idle_timeout", "address_family", "nagle_off",
                 "keepalive", "send_buffer", "receive_buffer")

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
        for k, v in overrides.items():
            setattr(self, k, v)


class _Request:
    """A request's policy state: its callback, when it was queued and sent, its deadline.
    The conversation keeps it as the context of the request in flight."""

    __slots__ = ("msg", "api_key", "version", "expect_response", "callback", "timeout",
                 "deadline", "sent_at", "queued_at")

    def __init__(self, msg: Any, version: Optional[int], expect_response: bool,
                 callback: Optional[ResponseCallback], timeout: Optional[float]) -> None:
        self.msg = msg
        self.api_key = msg.API_KEY if msg is not None else None
        self.version = version
        self.expect_response = expect_response
        self.callback = callback
        self.timeout = timeout
        self.deadline = 0.0
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
        self.on_state = on_state
        self.state = DISCONNECTED
        self.sock: Optional[socket.socket] = None
        self.backoff = Backoff(self.settings.reconnect_backoff_ms,
                               self.settings.reconnect_backoff_max_ms, rng)
        #: earliest monotonic time a new connect() may start
        self.next_attempt = 0.0
        self.last_error: Optional[KafkaError] = None
        self.connect_count = 0
        self.last_activity = 0.0
        # stats (librdkafka-shaped: rtt of answered requests, in seconds)
        self.rtt_sum = 0.0
        self.rtt_count = 0
        self.rtt_max = 0.0
        self.tx_requests = 0
        #: [sum, count, max] seconds requests waited in this connection's queue
        self.outbuf_latency: List[float] = [0.0, 0, 0.0]
        self.tx_bytes = 0
        self.rx_bytes = 0
        self._addresses: List[Address] = []
        self._addr_index = 0
        self._setup_deadline = 0.0
        self._queue: Deque[_Request] = deque()        # waiting for READY / in-flight room
        self._conv = BrokerConversation(self.settings.client_id,
                                        max_frame_size=self.settings.max_frame_size)
        self._out: Deque[memoryview] = deque()
        self._out_bytes = 0
        self._written = 0            # bytes written since connect
        self._queued_bytes = 0       # bytes queued since connect
        self._write_marks: Deque[Tuple[int, _Request]] = deque()  # acks=0: fire when written
        self._events = 0
        self._shutting = False

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
                and self._conv.in_flight < self.settings.max_in_flight)

    def version_for(self, api_key: int) -> Optional[int]:
        return self._conv.versions.get(api_key)

    # -- connect ---------------------------------------------------------------------
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
            try:
                self._addresses = resolve(self.host, self.port, self.settings.address_family)
            except OSError as exc:
                self._addresses = []
                self._fail(client_error(KafkaError._RESOLVE,
                                        f"{self.host}:{self.port}: failed to resolve: {exc}"))
                return True
            self._addr_index = 0
        self.state = CONNECTING
        self._try_next_address()
        return True

    def _try_next_address(self) -> None:
        while self._addr_index < len(self._addresses):
            family, sockaddr = self._addresses[self._addr_index]
            self._addr_index += 1
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError as exc:
                self.last_error = client_error(KafkaError._TRANSPORT, str(exc))
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
            rc = sock.connect_ex(sockaddr)
            if rc not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                sock.close()
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

    def _connected(self) -> None:
        self.state = HANDSHAKE
        self._written = self._queued_bytes = 0
        self.last_activity = time.monotonic()
        self._set_events(_EVENT_READ)
        handshake = _Request(None, None, True, None, self.settings.api_versions_timeout)
        self._queue_out(handshake, self._conv.start_handshake(handshake))

    def _handshake_answered(self, event: HandshakeExchange) -> None:
        if event.retry is not None:  # the broker asked for a lower ApiVersions version
            req = event.request.data
            req.queued_at = time.monotonic()
            self._queue_out(req, event.retry)
            return
        self.state = READY
        self.backoff.reset()
        self._addresses = []
        self.last_error = None
        _log.debug("connected to %s:%s (node %s)", self.host, self.port, self.node_id)
        self._flush_queue()
        if self.on_state is not None:
            self.on_state(self, READY, None)

    # -- sending ---------------------------------------------------------------------
    def send(self, msg: Any, callback: Optional[ResponseCallback] = None, *,
             version: Optional[int] = None, expect_response: bool = True,
             timeout: Optional[float] = None) -> None:
        """Queue a request (a generated message object). ``callback(response, error)``
        runs on the I/O thread with the decoded response, or with ``(None, KafkaError)``
        when it failed; for ``expect_response=False`` (acks=0 Produce) it runs with
        ``(None, None)`` once the request is handed to the kernel. ``version`` None uses
        the negotiated version. ``timeout`` (s) defaults to ``socket.timeout.ms``."""
        req = _Request(msg, version, expect_response, callback, timeout)
        if self.state == READY and not self._queue \
                and self._conv.in_flight < self.settings.max_in_flight:
            self._write_request(req)
        else:
            self._queue.append(req)
            if self.state == DISCONNECTED:
                self.connect()

    def _flush_queue(self) -> None:
        q = self._queue
        limit = self.settings.max_in_flight
        while q and self.state == READY and self._conv.in_flight < limit:
            self._write_request(q.popleft())

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
        waited = now - req.queued_at
        self.outbuf_latency[0] += waited
        self.outbuf_latency[1] += 1
        if waited > self.outbuf_latency[2]:
            self.outbuf_latency[2] = waited
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
        sock = self.sock
        out = self._out
        while out and sock is not None:
            bufs = list(out) if len(out) <= _IOV_MAX else [out[i] for i in range(_IOV_MAX)]
            try:
                n = sock.sendmsg(bufs)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self.close(client_error(KafkaError._TRANSPORT,
                                        f"{self.host}:{self.port}: send failed: {exc}"))
                return
            self._written += n
            self._out_bytes -= n
            self.tx_bytes += n
            self.last_activity = time.monotonic()
            while n:
                head = out[0]
                if n >= len(head):
                    n -= len(head)
                    out.popleft()
                else:
                    out[0] = head[n:]
                    n = 0
        marks = self._write_marks
        while marks and marks[0][0] <= self._written:
            _, req = marks.popleft()
            self._finish(req, None, None)
        if self.sock is not None:
            want = _EVENT_READ | (_EVENT_WRITE if out else 0)
            if want != self._events:
                self._set_events(want)

    def _set_events(self, events: int) -> None:
        self._events = events
        if self.sock is not None:
            self.io.modify(self.sock, events, self._on_event)

    # -- events ------------------------------------------------------------------------
    def _on_event(self, mask: int) -> None:
        if self.state == CONNECTING:
            if mask & _EVENT_WRITE:
                err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    self.last_error = client_error(
                        KafkaError._TRANSPORT,
                        f"{self.host}:{self.port}: connect failed: "
                        f"{errno.errorcode.get(err, err)} ({os.strerror(err)})")
                    self._drop_socket()
                    self.state = CONNECTING
                    self._try_next_address()
                    return
                self._connected()
            return
        if mask & _EVENT_READ:
            self._read()
        if self.sock is not None and mask & _EVENT_WRITE:
            self._write_out()
        if self._shutting and self._quiet():
            self.close(None)

    def _read(self) -> None:
        sock = self.sock
        conv = self._conv
        for _ in range(16):  # bounded, so one busy socket cannot starve the others
            if sock is None or self.sock is not sock:
                return
            view = conv.buffer_for_read()
            try:
                n = sock.recv_into(view)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.close(client_error(KafkaError._TRANSPORT,
                                        f"{self.host}:{self.port}: receive failed: {exc}"))
                return
            finally:
                del view
            if n == 0:
                self.close(client_error(KafkaError._TRANSPORT,
                                        f"{self.host}:{self.port}: connection closed by broker"))
                return
            self.rx_bytes += n
            self.last_activity = time.monotonic()
            try:
                conv.commit(n)
            except Exception as exc:
                self.close(client_error(KafkaError._BAD_MSG,
                                        f"{self.host}:{self.port}: bad frame: {exc}"))
                return
            self._handle_answers(sock)

    def _handle_answers(self, sock: socket.socket) -> None:
        """Take every answer the conversation has complete, one at a time (a callback may
        close the connection: the rest is then dropped with the stream)."""
        conv = self._conv
        while self.sock is sock:
            try:
                event = conv.next_event()
            except ResponseDecodeError as exc:
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
                self.close(client_error(KafkaError._TRANSPORT,
                                        f"{self.host}:{self.port}: bad response: {exc}"))
                return
            if event is None:
                return
            req = event.request.data
            rtt = time.monotonic() - req.sent_at
            self.rtt_sum += rtt
            self.rtt_count += 1
            if rtt > self.rtt_max:
                self.rtt_max = rtt
            if event.__class__ is HandshakeExchange:
                self._handshake_answered(event)
                continue
            self._finish(req, event.response, None)
            if self._queue and self.state == READY:
                self._flush_queue()

    def _finish(self, req: _Request, resp: Any, error: Optional[KafkaError]) -> None:
        cb = req.callback
        if cb is not None:
            try:
                cb(resp, error)
            except Exception:
                _log.exception("response callback failed")

    # -- time --------------------------------------------------------------------------
    def service(self, now: float) -> Optional[float]:
        """Periodic work: reconnect when requests wait and the backoff is over, expire
        requests and setups, close when idle. Returns when it next wants to run."""
        if self.state == DISCONNECTED and self._queue:
            if now >= self.next_attempt:
                self.connect(now)
            else:
                return self.next_attempt
        return self.check_timeouts(now)

    def check_timeouts(self, now: float) -> Optional[float]:
        """Close on an expired request or setup; idle-close. Returns the next deadline."""
        st = self.state
        if st == DISCONNECTED:
            return self.next_attempt if (self._queue and self.next_attempt > now) else None
        if st in (CONNECTING, HANDSHAKE):
            if now >= self._setup_deadline:
                self.close(client_error(KafkaError._TRANSPORT if st == CONNECTING
                                        else KafkaError._TIMED_OUT,
                                        f"{self.host}:{self.port}: connection setup timed out "
                                        f"after {self.settings.setup_timeout:g}s ({st})"))
                return None
            nxt = self._setup_deadline
        else:
            nxt = None
        oldest = self._conv.oldest()
        if oldest is not None:
            # Send order; timeouts mostly equal, so the oldest is (nearly) the earliest.
            earliest = oldest.data.deadline
            if now >= earliest:
                self.close(client_error(KafkaError._TIMED_OUT,
                                        f"{self.host}:{self.port}: request timed out"))
                return None
            nxt = earliest if nxt is None else min(nxt, earliest)
        idle = self.settings.idle_timeout
        if idle and st == READY and not self._conv.in_flight and not self._queue \
                and not self._out:
            at = self.last_activity + idle
            if now >= at:
                _log.debug("closing idle connection to %s:%s", self.host, self.port)
                self.close(None)
                return None
            nxt = at if nxt is None else min(nxt, at)
        return nxt

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
        return True

    def _quiet(self) -> bool:
        conv = self._conv
        return not self._out and not conv.in_flight and conv.unanswered_fire_and_forget == 0

    def _drop_socket(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            self.io.unregister(sock)
            try:
                sock.close()
            except OSError:  # pragma: no cover
                pass

    def _fail(self, error: KafkaError) -> None:
        """A connect attempt failed: back off, fail queued requests only if asked."""
        self.close(error)

    def close(self, error: Optional[KafkaError] = None, *, fail_queued: bool = False) -> None:
        """Close the socket. In-flight requests fail with ``error`` (``_TRANSPORT`` when
        None); queued ones stay for the next connection unless ``fail_queued``. ``error``
        None (idle close, shutdown) does not count as a failure for the backoff."""
        was = self.state
        self._shutting = False
        self._drop_socket()
        self.state = DISCONNECTED
        self._out.clear()
        self._out_bytes = 0
        marks = list(self._write_marks)
        self._write_marks.clear()
        inflight = [entry.data for entry in self._conv.reset()]
        now = time.monotonic()
        if error is not None:
            self.last_error = error
            self.next_attempt = now + self.backoff.next_delay()
            if was == READY and error.code() != KafkaError._DESTROY:
                _log.info("connection to %s:%s lost: %s", self.host, self.port, error.str())
            else:
                _log.debug("connection to %s:%s failed: %s", self.host, self.port, error.str())
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
            for req in queued:
                self._finish(req, None, fail_with)
        if self.on_state is not None:
            self.on_state(self, DISCONNECTED, error)
