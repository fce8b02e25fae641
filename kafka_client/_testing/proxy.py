"""A loopback TCP proxy that injects faults between a client and a broker, for tests.

::

    proxy = FaultProxy("127.0.0.1", broker.port)      # listens on 127.0.0.1:<free port>
    client = Producer({"bootstrap.servers": proxy.bootstrap})
    proxy.stall(); ...; proxy.resume()                 # freeze both directions, keep sockets
    proxy.cut()                                        # close every connection cleanly (FIN)
    proxy.reset()                                      # close every connection with RST
    proxy.drop_after(100, "upstream")                  # cut once 100 more bytes went up
    proxy.delay(0.05)                                  # hold every chunk 50 ms
    proxy.refuse(True)                                 # new connections: ECONNREFUSED
    with proxy.chaos(seed=1, interval=0.2, duration=10): ...   # random faults meanwhile
    proxy.close()

With ``follow_frames=True`` it also changes answers: ``fail_requests`` (error codes),
``throttle_requests`` (throttle times) and ``rewrite_responses`` (any field of the decoded
answer, by a function of the test's), e.g. a Metadata answer whose leader is no broker::

    def leader_99(response, version):
        for topic in response.topics:
            for partition in topic.partitions:
                partition.leader_id = 99
    proxy.rewrite_responses(ApiKey.METADATA, leader_99, count=None)   # every answer

One background thread runs a ``selectors`` loop over the listening socket and every
client/upstream socket pair; the control methods hand their work to that thread and
return once it is done, so after ``cut()`` returns the connections are closed. The proxy
only ever listens on and connects to loopback addresses.

Directions: ``"upstream"`` is client to broker (requests), ``"downstream"`` broker to
client (responses).

**Brokers advertise their own address.** A Kafka client bootstraps from the address it
is given, then connects to the host:port the broker advertises in Metadata, which would
bypass the proxy after the first request. Two ways keep it behind the proxy:

* ``FaultProxy(..., rewrite_addresses=True)``: the proxy follows the request frames going
  up, and in the responses to Metadata, FindCoordinator and DescribeCluster replaces
  every broker entry with the target's port by its own address (decoded and re-encoded
  with :mod:`kafka_proto.messages`; other frames pass untouched, as they come). Works
  with any single broker (noida-db, Tansu). ``proxy.rewritten`` counts the responses
  changed.
* A broker told to advertise the proxy's port. Tansu takes ``--advertised-listener-url``:
  :class:`ProxiedTansu` listens on its own port and advertises the proxy's, and
  :func:`proxied_tansu` builds the pair (broker started, proxy in front). This one does
  not depend on the codec under test.
"""
from __future__ import annotations

import collections
import contextlib
import ipaddress
import logging
import queue
import random
import selectors
import socket
import struct
import threading
import time
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
)

from kafka_client._testing.brokers import TansuBroker, free_port
from kafka_proto.framing import decode_request_header, decode_response_header
from kafka_proto.messages import ApiKey, ProduceRequest, request_class, response_class

__all__ = ["FaultProxy", "Chaos", "CHAOS_ACTIONS", "ProxiedTansu", "proxied_tansu",
           "UPSTREAM", "DOWNSTREAM"]

log = logging.getLogger("kafka_client.testing.proxy")

UPSTREAM = "upstream"
DOWNSTREAM = "downstream"
_DIRECTIONS = (UPSTREAM, DOWNSTREAM)

_LOOPBACK = "127.0.0.1"
_RECV_SIZE = 65536
# Stop reading a side while this much is queued for the other (backpressure).
_MAX_PENDING = 4 << 20


def _loopback_only(host: str) -> str:
    """The IPv4 loopback literal to use for ``host``; anything else is refused."""
    if host == "localhost":
        return _LOOPBACK
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"FaultProxy only talks to loopback addresses, not {host!r}")
    if addr.version != 4 or not addr.is_loopback:
        raise ValueError(f"FaultProxy only talks to IPv4 loopback addresses, not {host!r}")
    return str(addr)


def _close(sock: socket.socket, rst: bool) -> None:
    try:
        if rst:
            # linger on with timeout 0: close() sends RST and drops unsent data.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Pipe:
    """One direction of a connection: bytes read from ``src`` waiting to go to ``dst``."""

    __slots__ = ("direction", "src", "dst", "chunks", "pending", "eof", "shut",
                 "close_after", "offset")

    def __init__(self, direction: str, src: socket.socket, dst: socket.socket) -> None:
        self.direction = direction
        self.src = src
        self.dst = dst
        # (release time, data); data leaves in order, each chunk not before its time
        self.chunks: Deque[Tuple[float, bytes]] = collections.deque()
        self.offset = 0          # bytes of chunks[0] already sent
        self.pending = 0         # bytes queued
        self.eof = False         # src sent FIN
        self.shut = False        # FIN passed on to dst
        self.close_after: Optional[bool] = None   # drop_after hit: close (rst?) when drained


# APIs whose responses carry broker addresses: Metadata, FindCoordinator, DescribeCluster.
_ADDRESS_APIS = frozenset({ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_CLUSTER})
#: Added to the partition indexes of a diverted Produce request: out of any topic's range.
_DIVERT_OFFSET = 1_000_000
_INT32 = struct.Struct(">i")


class _Expected(NamedTuple):
    """What the proxy will do with the answer to a request it noted: the request's API
    key and version, and the error to inject (None: rewrite broker addresses)."""

    api_key: int
    api_version: int
    fault: Optional["_AnswerFault"]


class _AnswerFault:
    """An armed :meth:`FaultProxy.fail_requests`, :meth:`FaultProxy.throttle_requests`
    or :meth:`FaultProxy.rewrite_responses`: how many more requests of ``api_key`` get
    ``error_code`` (None: left alone) and ``throttle_ms`` (0: left alone) in their
    answer, or have their answer given to ``change`` (``remaining`` None: every one),
    whether the request is diverted first, and which requests it is for (``when``, given
    the decoded request; None: any)."""

    __slots__ = ("api_key", "error_code", "throttle_ms", "remaining", "divert", "change",
                 "when")

    def __init__(self, api_key: int, error_code: Optional[int], count: Optional[int],
                 divert: bool, throttle_ms: int = 0,
                 change: Optional[Callable[[Any, int], Any]] = None,
                 when: Optional[Callable[[Any], bool]] = None) -> None:
        self.api_key = api_key
        self.error_code = error_code
        self.throttle_ms = throttle_ms
        self.remaining = count
        self.divert = divert
        self.change = change
        self.when = when


class _RequestScanner:
    """Follows request frame boundaries going up; notes the correlation id, API key and
    version of the requests whose answers will be rewritten (broker addresses, injected
    errors), and holds a request whole to divert it, or to decide from its body whether
    a fault is for it, before it goes on."""

    __slots__ = ("pending", "addresses", "take_fault", "needs_body", "divert", "_head",
                 "_skip", "_hold", "_held", "_fault", "_deciding")

    def __init__(self, pending: Dict[int, _Expected], addresses: bool,
                 take_fault: Callable[[int, Optional[bytes]], Optional[_AnswerFault]],
                 needs_body: Callable[[int], bool],
                 divert: Callable[[bytes], bytes]) -> None:
        self.pending = pending
        self.addresses = addresses
        self.take_fault = take_fault
        self.needs_body = needs_body
        self.divert = divert
        self._head = bytearray()   # size, api key, api version, correlation id
        self._skip = 0             # bytes of the current frame still to pass
        self._hold = 0             # bytes of the current (held) frame still to hold
        self._held = bytearray()
        self._fault: Optional[_AnswerFault] = None   # the held frame's fault, if known
        self._deciding = False     # the held frame's fault is taken once it is whole

    def feed(self, data: bytes) -> bytes:
        """The bytes to pass on for ``data`` (the same, unless a request is diverted)."""
        if self._skip >= len(data):
            self._skip -= len(data)
            return data
        out = bytearray()
        i, n = 0, len(data)
        while i < n:
            if self._skip:
                take = min(self._skip, n - i)
                out += data[i:i + take]
                self._skip -= take
                i += take
                continue
            if self._hold:
                take = min(self._hold, n - i)
                self._held += data[i:i + take]
                self._hold -= take
                i += take
                if not self._hold:
                    out += self._release()
                continue
            take = min(12 - len(self._head), n - i)
            self._head += data[i:i + take]
            i += take
            if len(self._head) == 12:
                size, key, version, cid = struct.unpack(">ihhi", self._head)
                rest = max(0, size - 8)
                self._deciding = self.needs_body(key)
                fault = None if self._deciding else self.take_fault(key, None)
                if not self._deciding:
                    self._note(key, version, cid, fault)
                if self._deciding or (fault is not None and fault.divert):
                    self._fault = fault
                    self._held = bytearray(self._head)
                    self._hold = rest
                    if not rest:
                        out += self._release()
                else:
                    out += self._head
                    self._skip = rest
                self._head.clear()
        return bytes(out)

    def _note(self, key: int, version: int, cid: int,
              fault: Optional[_AnswerFault]) -> None:
        if fault is not None:
            self.pending[cid] = _Expected(key, version, fault)
        elif self.addresses and key in _ADDRESS_APIS:
            self.pending[cid] = _Expected(key, version, None)

    def _release(self) -> bytes:
        """The held frame, now whole, as it goes on: diverted if its fault says so."""
        frame = bytes(self._held)
        self._held = bytearray()
        fault = self._fault
        if self._deciding:
            _size, key, version, cid = struct.unpack_from(">ihhi", frame)
            fault = self.take_fault(key, frame)
            self._note(key, version, cid, fault)
        self._fault, self._deciding = None, False
        if fault is None or not fault.divert:
            return frame
        try:
            return self.divert(frame)
        except Exception as exc:  # leave what we cannot parse as it was
            log.warning("proxy: could not divert a request: %s", exc)
            return frame


class _ResponseRewriter:
    """Follows response frames going down; passes most through as they come and holds
    the ones answering :class:`_RequestScanner`'s noted requests whole, to rewrite
    them."""

    __slots__ = ("pending", "rewrite", "_buf", "_mode", "_left", "_expected")

    def __init__(self, pending: Dict[int, _Expected],
                 rewrite: Callable[[_Expected, bytes], bytes]) -> None:
        self.pending = pending
        self.rewrite = rewrite
        self._buf = bytearray()
        self._mode = 0        # 0: reading size + correlation id, 1: passing, 2: holding
        self._left = 0
        self._expected: Optional[_Expected] = None

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        i, n = 0, len(data)
        while i < n:
            if self._mode == 1:
                take = min(self._left, n - i)
                out += data[i:i + take]
            elif self._mode == 2:
                take = min(self._left, n - i)
                self._buf += data[i:i + take]
            else:
                take = min(8 - len(self._buf), n - i)
                self._buf += data[i:i + take]
                i += take
                if len(self._buf) == 8:
                    size, cid = struct.unpack(">ii", self._buf)
                    self._left = max(0, size - 4)
                    expected = self.pending.pop(cid, None)
                    if expected is None:
                        out += self._buf
                        self._buf.clear()
                        self._mode = 1
                    else:
                        self._expected = expected
                        self._mode = 2
                    if not self._left:
                        self._finish(out)
                continue
            i += take
            self._left -= take
            if not self._left:
                self._finish(out)
        return bytes(out)

    def _finish(self, out: bytearray) -> None:
        if self._mode == 2:
            frame = bytes(self._buf)
            expected = self._expected
            assert expected is not None  # set with mode 2
            try:
                out += self.rewrite(expected, frame)
            except Exception as exc:  # leave what we cannot parse as it was
                log.warning("proxy: could not rewrite API %s v%s response: %s",
                            expected.api_key, expected.api_version, exc)
                out += frame
            self._buf.clear()
        self._mode = 0


class _Conn:
    __slots__ = ("id", "client", "upstream", "pipes", "closed", "registered", "scanner",
                 "rewriter")

    def __init__(self, cid: int, client: socket.socket, upstream: socket.socket,
                 scanner: Optional[_RequestScanner] = None,
                 rewriter: Optional[_ResponseRewriter] = None) -> None:
        self.id = cid
        self.client = client
        self.upstream = upstream
        self.pipes = {UPSTREAM: _Pipe(UPSTREAM, client, upstream),
                      DOWNSTREAM: _Pipe(DOWNSTREAM, upstream, client)}
        self.closed = False
        self.registered: Dict[socket.socket, int] = {}
        self.scanner = scanner
        self.rewriter = rewriter


class FaultProxy:
    """Forward 127.0.0.1:``port`` to ``target_host:target_port`` with injectable faults.

    Starts listening and forwarding at construction; use as a context manager or call
    :meth:`close`. Counters (read any time, e.g. ``proxy.stats()``): ``connections``
    (accepted so far), ``active`` (open now), ``bytes_up`` / ``bytes_down`` (forwarded),
    ``cuts``, ``resets``, ``drops`` (connections closed by :meth:`cut`, :meth:`reset`,
    :meth:`drop_after`), ``upstream_failures`` (the target refused the proxy),
    ``rewritten`` (responses whose broker addresses were rewritten), ``injected``
    (answers given an error by :meth:`fail_requests`, a throttle time by
    :meth:`throttle_requests` or changed by :meth:`rewrite_responses`), ``diverted``
    (requests it diverted).

    ``rewrite_addresses=True`` makes the broker's metadata point at the proxy (see the
    module docstring), so clients that follow metadata stay behind it.
    ``follow_frames=True`` (implied by ``rewrite_addresses``) follows the Kafka frames of
    every connection from its start, which :meth:`fail_requests` needs.
    """

    def __init__(self, target_host: str, target_port: int, port: int = 0,
                 name: str = "proxy", rewrite_addresses: bool = False,
                 follow_frames: bool = False) -> None:
        self.target = (_loopback_only(target_host), int(target_port))
        self.rewrite_addresses = rewrite_addresses
        self.follow_frames = follow_frames or rewrite_addresses
        self.rewritten = 0
        self.injected = 0
        self.rewrite_errors: List[BaseException] = []
        self.diverted = 0
        self._faults: List[_AnswerFault] = []
        self.name = name
        self.connections = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self.cuts = 0
        self.resets = 0
        self.drops = 0
        self.upstream_failures = 0
        self._conns: Dict[int, _Conn] = {}
        self._delay = {UPSTREAM: 0.0, DOWNSTREAM: 0.0}
        self._stalled = {UPSTREAM: False, DOWNSTREAM: False}
        # direction ("upstream", "downstream" or "any") -> [bytes left, rst]
        self._drop: Dict[str, List] = {}
        self._refusing = False
        self._closing = False
        self._chaos: List["Chaos"] = []
        self._ids = 0
        self._sel = selectors.DefaultSelector()
        self._listener: Optional[socket.socket] = None
        self.port: int = self._listen(port).getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._commands: "queue.SimpleQueue[Tuple[Callable[[], object], list, threading.Event]]" = \
            queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"FaultProxy-{self.port}",
                                        daemon=True)
        self._thread.start()

    # -- public ----------------------------------------------------------------------------
    @property
    def address(self) -> Tuple[str, int]:
        """``("127.0.0.1", port)`` the proxy listens on."""
        return (_LOOPBACK, self.port)

    def retarget(self, host: str, port: int) -> None:
        """Forward the connections accepted from now on to ``host:port``: a broker that
        advertises this proxy's port binds its own only when it starts (port 0, so no
        other process can take it between a pick and the bind)."""
        self.target = (_loopback_only(host), int(port))

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"``, for ``bootstrap.servers``."""
        return f"{_LOOPBACK}:{self.port}"

    @property
    def active(self) -> int:
        """Connections open now."""
        return len(self._conns)

    def stats(self) -> Dict[str, int]:
        """A snapshot of the counters."""
        return {"connections": self.connections, "active": self.active,
                "bytes_up": self.bytes_up, "bytes_down": self.bytes_down, "cuts": self.cuts,
                "resets": self.resets, "drops": self.drops,
                "upstream_failures": self.upstream_failures, "rewritten": self.rewritten,
                "injected": self.injected, "diverted": self.diverted}

    def fail_requests(self, api_key: int, error_code: int, count: int = 1,
                      divert: Optional[bool] = None,
                      when: Optional[Callable[[Any], bool]] = None) -> None:
        """Answer the next ``count`` requests of ``api_key`` (on any connection) with
        ``error_code``: the broker's answer is decoded and every error code in it (the
        top-level one, each partition's) is set to ``error_code``, then re-encoded.

        ``divert`` (Produce only, the default there): the request itself is changed
        first so that the broker does not append its batches: each partition index is
        moved out of the topic's range (noida-db refuses such a partition, Tansu files
        the batch apart; either way the real partition never sees it), and the answer
        names the original partitions again. So the client gets the refusal a broker
        would give, with the log as such a refusal leaves it. Without ``divert`` the
        broker acts on the request and only its answer is falsified.

        Needs ``follow_frames=True`` (or ``rewrite_addresses=True``). Arming again adds
        to the faults already armed; they fire in order. :attr:`faults_pending` says
        whether any is left.

        ``when`` (Produce only): the fault is only for the requests ``when(request)``
        accepts, given the request decoded with :mod:`kafka_proto.messages` on the
        proxy thread; the others pass as if it were not armed (what ``when`` raises
        counts as no). Each Produce request is then held until it is whole."""
        if not self.follow_frames:
            raise RuntimeError("fail_requests needs FaultProxy(..., follow_frames=True)")
        if count < 1:
            raise ValueError("count must be >= 1")
        if when is not None and api_key != ApiKey.PRODUCE:
            raise ValueError("only Produce requests can be chosen by their body")
        if divert is None:
            divert = api_key == ApiKey.PRODUCE
        if divert and api_key != ApiKey.PRODUCE:
            raise ValueError("only Produce requests can be diverted")
        fault = _AnswerFault(int(api_key), int(error_code), int(count), bool(divert),
                             when=when)
        self._call(lambda: self._faults.append(fault))

    def throttle_requests(self, api_key: int, throttle_ms: int, count: int = 1) -> None:
        """Make the broker's answers to the next ``count`` requests of ``api_key`` say it
        throttled the client for ``throttle_ms`` (their ``throttle_time_ms`` field; the
        API version used must have it). The broker acts on the requests as usual. Needs
        ``follow_frames=True``; armed faults fire in order, as with
        :meth:`fail_requests`."""
        if not self.follow_frames:
            raise RuntimeError("throttle_requests needs FaultProxy(..., follow_frames=True)")
        if count < 1 or throttle_ms < 0:
            raise ValueError("count must be >= 1 and throttle_ms >= 0")
        fault = _AnswerFault(int(api_key), None, int(count), False, int(throttle_ms))
        self._call(lambda: self._faults.append(fault))

    def rewrite_responses(self, api_key: int, change: Callable[[Any, int], Any],
                          count: Optional[int] = 1) -> None:
        """Give the broker's answers to the next ``count`` requests of ``api_key`` (None:
        every one until :meth:`clear_faults`) to ``change(response, api_version)``, on
        the proxy thread: the answer decoded with :mod:`kafka_proto.messages`, which
        ``change`` alters in place (or replaces, by returning another response, or the
        bytes of another body: an answer in another version's layout), then encoded again
        for the client. So a test can send a well-framed answer with any
        field values: a leader not among the brokers, a partition nobody asked for, a
        negative high watermark. The broker acts on the requests as usual. What
        ``change`` raises is kept in :attr:`rewrite_errors` and the answer passes as it
        came. Needs ``follow_frames=True``; armed faults fire in order."""
        if not self.follow_frames:
            raise RuntimeError("rewrite_responses needs FaultProxy(..., follow_frames=True)")
        if count is not None and count < 1:
            raise ValueError("count must be >= 1 or None")
        if not callable(change):
            raise TypeError("change must be callable")
        fault = _AnswerFault(int(api_key), None, count, False, change=change)
        self._call(lambda: self._faults.append(fault))

    def clear_faults(self) -> None:
        """Forget every armed :meth:`fail_requests`, :meth:`throttle_requests` and
        :meth:`rewrite_responses` fault (answers to requests already sent are still
        changed)."""
        self._call(self._faults.clear)

    @property
    def faults_pending(self) -> bool:
        """True while an armed fault has requests left to answer."""
        return any(f.remaining is None or f.remaining
                   for f in list(self._faults))

    def delay(self, seconds: float, direction: Optional[str] = None) -> None:
        """Hold every chunk read from now on for ``seconds`` before passing it on
        (``0`` turns it off). Order is kept. ``direction`` limits it to one way."""
        if seconds < 0:
            raise ValueError("delay must be >= 0")
        for d in self._directions(direction):
            self._delay[d] = float(seconds)
        self._call(lambda: None)

    def stall(self, direction: Optional[str] = None) -> None:
        """Stop forwarding (both ways, or one) without closing anything."""
        dirs = self._directions(direction)

        def apply() -> None:
            for d in dirs:
                self._stalled[d] = True
        self._call(apply)

    def resume(self, direction: Optional[str] = None) -> None:
        """Undo :meth:`stall`: queued bytes flow again."""
        dirs = self._directions(direction)

        def apply() -> None:
            for d in dirs:
                self._stalled[d] = False
            for conn in list(self._conns.values()):
                for pipe in conn.pipes.values():
                    self._pump(conn, pipe)
        self._call(apply)

    def cut(self) -> int:
        """Close every current connection cleanly (FIN on both sides). Returns how many."""
        return self._call(lambda: self._close_all(rst=False))  # type: ignore[return-value]

    def reset(self) -> int:
        """Close every current connection with RST on both sides. Returns how many."""
        return self._call(lambda: self._close_all(rst=True))  # type: ignore[return-value]

    def drop_after(self, n_bytes: int, direction: str = UPSTREAM, rst: bool = False) -> None:
        """Cut the connection that carries the ``n_bytes``-th byte from now on in
        ``direction`` ("upstream", "downstream" or "any"): exactly ``n_bytes`` pass,
        then that connection is closed (with RST if ``rst``). One shot; arming again
        replaces a pending trigger for the same direction."""
        if n_bytes < 0:
            raise ValueError("n_bytes must be >= 0")
        if direction not in (*_DIRECTIONS, "any"):
            raise ValueError(f"direction must be 'upstream', 'downstream' or 'any', "
                             f"not {direction!r}")

        def apply() -> None:
            self._drop[direction] = [n_bytes, rst]
        self._call(apply)

    @property
    def drop_pending(self) -> bool:
        """True while a :meth:`drop_after` trigger has not fired yet."""
        return bool(self._drop)

    def refuse(self, on: bool = True) -> None:
        """Refuse new connections (the port is closed: ECONNREFUSED) or accept again
        on the same port. Open connections are not touched."""
        def apply() -> None:
            if on and not self._refusing:
                self._refusing = True
                if self._listener is not None:
                    self._sel.unregister(self._listener)
                    self._listener.close()
                    self._listener = None
            elif not on and self._refusing:
                self._listen(self.port)
                self._refusing = False
        self._call(apply)

    def chaos(self, seed: int, interval: float, duration: float,
              actions: Sequence[str] = ("cut", "reset", "stall", "drop")) -> "Chaos":
        """Start random faults in a thread for ``duration`` seconds; see :class:`Chaos`.
        :meth:`close` stops it if it still runs."""
        chaos = Chaos(self, seed, interval, duration, actions)
        self._chaos.append(chaos)
        return chaos.start()

    def close(self) -> None:
        """Stop the thread and close every socket."""
        if self._closing:
            return
        for chaos in self._chaos:
            chaos.stop()
        self._closing = True
        self._wake()
        self._thread.join(5)
        for conn in list(self._conns.values()):
            self._close_conn(conn, rst=False)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._wake_r.close()
        self._wake_w.close()
        self._sel.close()

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<FaultProxy {self.bootstrap} -> {self.target[0]}:{self.target[1]} "
                f"active={self.active}>")

    # -- control plumbing ----------------------------------------------------------------------
    @staticmethod
    def _directions(direction: Optional[str]) -> Tuple[str, ...]:
        if direction is None or direction == "both":
            return _DIRECTIONS
        if direction not in _DIRECTIONS:
            raise ValueError(f"direction must be 'upstream' or 'downstream', not {direction!r}")
        return (direction,)

    def _call(self, fn: Callable[[], object], timeout: float = 5.0) -> object:
        """Run ``fn`` on the proxy thread and return its result."""
        if self._closing:
            raise RuntimeError("proxy is closed")
        if threading.current_thread() is self._thread:
            return fn()
        box: list = []
        done = threading.Event()
        self._commands.put((fn, box, done))
        self._wake()
        if not done.wait(timeout):
            raise TimeoutError("proxy thread did not answer")
        if box and isinstance(box[0], BaseException):
            raise box[0]
        return box[0] if box else None

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # already awake (buffer full) or closing

    def _listen(self, port: int) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((_LOOPBACK, port))
            s.listen(128)
        except OSError:
            s.close()
            raise
        s.setblocking(False)
        self._listener = s
        self._sel.register(s, selectors.EVENT_READ, "listen")
        return s

    # -- the loop --------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._closing:
                events = self._sel.select(self._timeout())
                for key, mask in events:
                    tag = key.data
                    if tag == "wake":
                        try:
                            while self._wake_r.recv(4096):
                                pass
                        except (BlockingIOError, OSError):
                            pass
                    elif tag == "listen":
                        self._accept()
                    else:
                        conn, which = tag
                        if conn.closed:
                            continue
                        self._on_event(conn, which, mask)
                self._run_commands()
                # Delayed chunks whose time came, then the registrations they imply.
                for conn in list(self._conns.values()):
                    for pipe in conn.pipes.values():
                        if pipe.chunks and not conn.closed:
                            self._pump(conn, pipe)
                    if not conn.closed:
                        self._register(conn)
        except Exception:  # pragma: no cover - a bug here must not hang the test
            log.exception("%r: proxy loop failed", self)
        finally:
            self._run_commands()

    def _run_commands(self) -> None:
        while True:
            try:
                fn, box, done = self._commands.get_nowait()
            except queue.Empty:
                return
            try:
                box.append(fn())
            except BaseException as exc:  # handed back to the caller
                box.append(exc)
            done.set()

    def _timeout(self) -> Optional[float]:
        soonest = None
        now = time.monotonic()
        for conn in self._conns.values():
            for pipe in conn.pipes.values():
                if pipe.chunks and not self._stalled[pipe.direction]:
                    t = pipe.chunks[0][0]
                    if soonest is None or t < soonest:
                        soonest = t
        if soonest is None:
            return 0.5
        return max(0.0, min(0.5, soonest - now))

    def _accept(self) -> None:
        while self._listener is not None:
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self.connections += 1
            try:
                upstream = socket.create_connection(self.target, timeout=2.0)
            except OSError as exc:
                self.upstream_failures += 1
                log.debug("%r: upstream connect failed: %s", self, exc)
                _close(client, rst=True)
                continue
            for s in (client, upstream):
                s.setblocking(False)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._ids += 1
            scanner = rewriter = None
            if self.follow_frames:
                pending: Dict[int, _Expected] = {}
                scanner = _RequestScanner(pending, self.rewrite_addresses,
                                          self._take_fault, self._needs_body,
                                          self._divert_request)
                rewriter = _ResponseRewriter(pending, self._rewrite_response)
            conn = _Conn(self._ids, client, upstream, scanner, rewriter)
            self._conns[conn.id] = conn
            self._register(conn)

    def _register(self, conn: _Conn) -> None:
        """(Re)register both sockets for what their pipes need now."""
        want: Dict[socket.socket, int] = {conn.client: 0, conn.upstream: 0}
        for pipe in conn.pipes.values():
            stalled = self._stalled[pipe.direction]
            if (not stalled and not pipe.eof and pipe.close_after is None
                    and pipe.pending < _MAX_PENDING):
                want[pipe.src] |= selectors.EVENT_READ
            if not stalled and pipe.chunks and pipe.chunks[0][0] <= time.monotonic():
                want[pipe.dst] |= selectors.EVENT_WRITE
        for sock, events in want.items():
            have = conn.registered.get(sock, 0)
            if events == have:
                continue
            which = "client" if sock is conn.client else "upstream"
            if have and events:
                self._sel.modify(sock, events, (conn, which))
            elif events:
                self._sel.register(sock, events, (conn, which))
            else:
                self._sel.unregister(sock)
            conn.registered[sock] = events

    def _on_event(self, conn: _Conn, which: str, mask: int) -> None:
        sock = conn.client if which == "client" else conn.upstream
        # client socket: reads feed upstream, writes drain downstream; and vice versa
        read_pipe = conn.pipes[UPSTREAM if which == "client" else DOWNSTREAM]
        write_pipe = conn.pipes[DOWNSTREAM if which == "client" else UPSTREAM]
        if mask & selectors.EVENT_READ:
            self._read(conn, read_pipe, sock)
        if not conn.closed and mask & selectors.EVENT_WRITE:
            self._pump(conn, write_pipe)

    def _read(self, conn: _Conn, pipe: _Pipe, sock: socket.socket) -> None:
        try:
            data = sock.recv(_RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            # The peer reset: pass the reset on to the other side.
            self._close_conn(conn, rst=True)
            return
        if not data:
            pipe.eof = True
            self._pump(conn, pipe)
            return
        if conn.scanner is not None and conn.rewriter is not None:  # (set together)
            if pipe.direction == UPSTREAM:
                data = conn.scanner.feed(data)
            else:
                data = conn.rewriter.feed(data)
            if not data:
                return  # part of a frame being held for rewriting
        trigger_key = pipe.direction if pipe.direction in self._drop else (
            "any" if "any" in self._drop else None)
        if trigger_key is not None:
            trigger = self._drop[trigger_key]
            if len(data) >= trigger[0]:
                data = data[:trigger[0]]
                pipe.close_after = trigger[1]
                del self._drop[trigger_key]
            else:
                trigger[0] -= len(data)
        if data:
            release = time.monotonic() + self._delay[pipe.direction]
            pipe.chunks.append((release, data))
            pipe.pending += len(data)
        self._pump(conn, pipe)

    def _pump(self, conn: _Conn, pipe: _Pipe) -> None:
        """Send what is due from ``pipe``; finish a FIN or a drop when it is drained."""
        if conn.closed or self._stalled[pipe.direction]:
            return
        now = time.monotonic()
        while pipe.chunks:
            release, data = pipe.chunks[0]
            if release > now:
                break
            view = memoryview(data)[pipe.offset:]
            try:
                sent = pipe.dst.send(view)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._close_conn(conn, rst=True)
                return
            if pipe.direction == UPSTREAM:
                self.bytes_up += sent
            else:
                self.bytes_down += sent
            pipe.pending -= sent
            if sent < len(view):
                pipe.offset += sent
                return
            pipe.chunks.popleft()
            pipe.offset = 0
        if pipe.chunks:
            return
        if pipe.close_after is not None:
            self.drops += 1
            self._close_conn(conn, rst=pipe.close_after)
            return
        if pipe.eof and not pipe.shut:
            pipe.shut = True
            try:
                pipe.dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            other = conn.pipes[DOWNSTREAM if pipe.direction == UPSTREAM else UPSTREAM]
            if other.shut:
                self._close_conn(conn, rst=False)

    def _needs_body(self, api_key: int) -> bool:
        """Proxy thread: whether an armed fault for ``api_key`` chooses by the body."""
        return any(f.api_key == api_key and f.when is not None for f in self._faults)

    def _take_fault(self, api_key: int, frame: Optional[bytes]) -> Optional[_AnswerFault]:
        """Proxy thread: the armed fault the next ``api_key`` request uses up, if any
        (``frame``: the whole request, for the faults that choose by it)."""
        request: Any = None
        for fault in self._faults:
            if fault.api_key != api_key:
                continue
            if fault.when is not None:
                if frame is None:
                    continue
                if request is None:
                    _header, body = decode_request_header(memoryview(frame)[4:])
                    request = request_class(api_key).decode(body, _header.api_version)
                try:
                    chosen = bool(fault.when(request))
                except Exception as exc:
                    log.warning("proxy: a fault's request test raised: %r", exc)
                    chosen = False
                if not chosen:
                    continue
            if fault.remaining is None:
                return fault
            if fault.remaining > 0:
                fault.remaining -= 1
                if not fault.remaining:
                    self._faults.remove(fault)
                return fault
        return None

    def _divert_request(self, frame: bytes) -> bytes:
        """A Produce request frame (size prefix included) whose partitions are moved
        out of their topics' range, so that no real partition gets its batches."""
        header, body = decode_request_header(memoryview(frame)[4:])
        version = header.api_version
        request = ProduceRequest.decode(body, version)
        for topic in request.topic_data:
            for part in topic.partition_data:
                part.index += _DIVERT_OFFSET
        new_body = request.encode(version)
        head = frame[4:len(frame) - len(body)]
        self.diverted += 1
        return _INT32.pack(len(head) + len(new_body)) + head + new_body

    def _rewrite_response(self, expected: _Expected, frame: bytes) -> bytes:
        """A response frame (size prefix included) rewritten as ``expected`` says: an
        injected error, or the broker addresses pointing at the proxy."""
        if expected.fault is not None:
            return self._inject_fault(expected, expected.fault, frame)
        return self._rewrite_addresses(expected.api_key, expected.api_version, frame)

    def _inject_fault(self, expected: _Expected, fault: _AnswerFault, frame: bytes) -> bytes:
        api_key, version = expected.api_key, expected.api_version
        _cid, body = decode_response_header(memoryview(frame)[4:], api_key, version)
        header_end = len(frame) - len(body)
        # Any: the response class is the API's, or the bytes the test's change returns.
        response: Any = response_class(api_key).decode(body, version)
        if fault.divert:
            for topic in response.responses:
                for part in topic.partition_responses:
                    if part.index >= _DIVERT_OFFSET:   # (not if the divert failed)
                        part.index -= _DIVERT_OFFSET
        if fault.error_code is not None:
            _set_error_codes(response, version, fault.error_code)
        if fault.throttle_ms:
            response.throttle_time_ms = fault.throttle_ms
        if fault.change is not None:
            if self.rewrite_addresses and api_key in _ADDRESS_APIS:
                self._fix_addresses(response, api_key, version)   # then the test's change
            try:
                changed = fault.change(response, version)
            except Exception as exc:  # the test reads it; the answer passes unchanged
                self.rewrite_errors.append(exc)
                return frame
            if changed is not None:
                response = changed
        self.injected += 1
        new_body = bytes(response) if isinstance(response, (bytes, bytearray)) \
            else response.encode(version)
        header = frame[4:header_end]
        return _INT32.pack(len(header) + len(new_body)) + header + new_body

    def _rewrite_addresses(self, api_key: int, api_version: int, frame: bytes) -> bytes:
        """A Metadata / FindCoordinator / DescribeCluster response frame (size prefix
        included) with the target's address replaced by the proxy's."""
        _cid, body = decode_response_header(memoryview(frame)[4:], api_key, api_version)
        header_end = len(frame) - len(body)
        response = response_class(api_key).decode(body, api_version)
        if not self._fix_addresses(response, api_key, api_version):
            return frame
        self.rewritten += 1
        new_body = response.encode(api_version)
        header = frame[4:header_end]
        return _INT32.pack(len(header) + len(new_body)) + header + new_body

    def _fix_addresses(self, response: Any, api_key: int, api_version: int) -> int:
        """Point the broker entries of a decoded Metadata / FindCoordinator /
        DescribeCluster response with the target's port at the proxy; how many."""
        target_port = self.target[1]
        changed = 0

        def fix(entry) -> None:
            nonlocal changed
            if entry.port == target_port:
                entry.host = _LOOPBACK
                entry.port = self.port
                changed += 1

        if api_key == ApiKey.FIND_COORDINATOR:
            if api_version < 4:
                fix(response)
            else:
                for entry in response.coordinators:
                    fix(entry)
        else:
            for entry in response.brokers:
                fix(entry)
        return changed

    def _close_conn(self, conn: _Conn, rst: bool) -> None:
        if conn.closed:
            return
        conn.closed = True
        for sock in (conn.client, conn.upstream):
            if conn.registered.get(sock):
                try:
                    self._sel.unregister(sock)
                except (KeyError, ValueError, OSError):
                    pass
            if not rst:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            _close(sock, rst)
        self._conns.pop(conn.id, None)

    def _close_all(self, rst: bool) -> int:
        conns = list(self._conns.values())
        for conn in conns:
            self._close_conn(conn, rst)
        if rst:
            self.resets += len(conns)
        else:
            self.cuts += len(conns)
        return len(conns)


def _set_error_codes(message: Any, version: int, code: int) -> None:
    """Set every error code field of a decoded message (nested structs included) that
    exists in ``version`` to ``code``; a Produce answer's offsets become -1."""
    for field in message.FIELDS:
        if not field.min_version <= version <= field.max_version:
            continue
        value = getattr(message, field.name)
        if field.struct is not None:
            for item in (value if isinstance(value, list) else [value]):
                if item is not None:
                    _set_error_codes(item, version, code)
        elif field.type == "int16" and field.name.endswith("error_code"):
            setattr(message, field.name, code)
        elif field.name in ("base_offset", "log_append_time_ms"):
            setattr(message, field.name, -1)


CHAOS_ACTIONS = ("cut", "reset", "stall", "drop", "delay", "refuse")


class Chaos:
    """Random faults on a :class:`FaultProxy` from a thread, for a bounded time.

    Every ``interval`` seconds (jittered 0.5x..1.5x by the seeded generator) one of
    ``actions`` is applied: ``cut``, ``reset``, ``stall`` (for up to ``interval``, then
    resume), ``drop`` (``drop_after`` a random 0..4096 bytes, either way), ``delay``
    (10..100 ms for up to ``interval``) or ``refuse`` (for up to ``interval``). The
    thread stops after ``duration`` seconds or on :meth:`stop`, and always leaves the
    proxy forwarding (resumed, no delay, accepting). ``log`` lists ``(seconds since
    start, action)``; the same seed gives the same sequence of actions.
    """

    def __init__(self, proxy: FaultProxy, seed: int, interval: float, duration: float,
                 actions: Sequence[str] = ("cut", "reset", "stall", "drop")) -> None:
        unknown = set(actions) - set(CHAOS_ACTIONS)
        if unknown or not actions:
            raise ValueError(f"chaos actions must be among {CHAOS_ACTIONS}, got {actions!r}")
        if interval <= 0 or duration < 0:
            raise ValueError("interval must be > 0 and duration >= 0")
        self.proxy = proxy
        self.rng = random.Random(seed)
        self.interval = interval
        self.duration = duration
        self.actions = tuple(actions)
        self.log: List[Tuple[float, str]] = []
        self.error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="FaultProxy-chaos", daemon=True)

    def start(self) -> "Chaos":
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop early (or wait for the end) and restore normal forwarding."""
        self._stop.set()
        self._thread.join(timeout)

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait until ``duration`` is over."""
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def __enter__(self) -> "Chaos":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _pause(self, seconds: float, end: float) -> bool:
        """Sleep ``seconds`` (not past ``end``); False if stopped meanwhile."""
        return not self._stop.wait(max(0.0, min(seconds, end - time.monotonic())))

    def _run(self) -> None:
        start = time.monotonic()
        end = start + self.duration
        p = self.proxy
        try:
            while time.monotonic() < end and not self._stop.is_set():
                if not self._pause(self.interval * self.rng.uniform(0.5, 1.5), end):
                    break
                if time.monotonic() >= end:
                    break
                action = self.rng.choice(self.actions)
                hold = self.interval * self.rng.uniform(0.1, 1.0)
                self.log.append((round(time.monotonic() - start, 3), action))
                log.debug("chaos on %r: %s", p, action)
                if action == "cut":
                    p.cut()
                elif action == "reset":
                    p.reset()
                elif action == "drop":
                    p.drop_after(self.rng.randrange(0, 4097),
                                 self.rng.choice((UPSTREAM, DOWNSTREAM)),
                                 rst=self.rng.random() < 0.5)
                elif action == "stall":
                    p.stall()
                    self._pause(hold, end + self.interval)
                    p.resume()
                elif action == "delay":
                    p.delay(self.rng.uniform(0.01, 0.1))
                    self._pause(hold, end + self.interval)
                    p.delay(0)
                elif action == "refuse":
                    p.refuse(True)
                    self._pause(hold, end + self.interval)
                    p.refuse(False)
        except BaseException as exc:  # reported to the test through .error
            self.error = exc
        finally:
            with contextlib.suppress(Exception):
                p.resume()
                p.delay(0)
                p.refuse(False)


# -- a Tansu broker reachable only through a proxy ------------------------------------------------

class ProxiedTansu(TansuBroker):
    """A Tansu broker that listens on its own port but advertises ``advertised_port``
    (a :class:`FaultProxy`'s), so clients that follow metadata stay behind the proxy."""

    def __init__(self, advertised_port: int, port: Optional[int] = None,
                 log_dir: Optional[str] = None) -> None:
        # A fixed port: the proxy in front is pointed at it before the broker starts.
        super().__init__(port if port is not None else free_port(), log_dir)
        self.advertised_port = advertised_port

    def command(self) -> Sequence[str]:
        listen = f"tcp://{self.host}:{self.port}"
        advertised = f"tcp://{self.host}:{self.advertised_port}"
        return [self.binary, "broker", "--listener-url", listen,
                "--advertised-listener-url", advertised, "--storage-engine", "memory://tansu/"]


@contextlib.contextmanager
def proxied_tansu(timeout: float = 30.0) -> Iterator[Tuple[ProxiedTansu, FaultProxy]]:
    """A started Tansu behind a :class:`FaultProxy`: ``(broker, proxy)``.

    Clients use ``proxy.bootstrap``. ``broker.bootstrap`` reaches the broker directly
    for the first request only: its metadata points at the proxy, so admin work such as
    ``broker.create_topic`` goes through the proxy too (do it while the proxy
    forwards). Raises ``BrokerNotAvailable`` when Tansu is not installed.
    """
    broker_port = free_port()
    proxy = FaultProxy(_LOOPBACK, broker_port)
    broker = None
    try:
        broker = ProxiedTansu(advertised_port=proxy.port, port=broker_port)
        broker.start(timeout)
        yield broker, proxy
    finally:
        proxy.close()
        if broker is not None:
            broker.stop()
            broker.cleanup()
