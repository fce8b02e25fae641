"""Non-blocking connection, I/O thread and address resolution (no broker needed, except
the last tests, which use the session brokers)."""
from __future__ import annotations

import logging
import random
import socket
import threading
import time

import pytest

from kafka_client._net.bootstrap import canonical_names, is_ip_literal, resolve
from kafka_client._net.connection import (
    DISCONNECTED,
    READY,
    Backoff,
    BrokerConnection,
    ConnectionSettings,
)
from kafka_client._net.io_thread import IOThread
from kafka_client.errors import KafkaError


@pytest.fixture
def io():
    t = IOThread().start()
    yield t
    t.stop()
    assert not t.errors


def on_io(io, fn, timeout=10.0):
    """Run fn on the I/O thread and return its result."""
    box, done = [], threading.Event()

    def call():
        try:
            box.append(fn())
        finally:
            done.set()

    io.call_soon(call)
    assert done.wait(timeout)
    return box[0] if box else None


def wait_until(predicate, timeout=5.0):
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass (the assertions after
    it say what was expected)."""
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)


def connected(io, port, states, host="127.0.0.1", settings=None):
    """A BrokerConnection to ``host:port``, serviced by ``io``, telling its state changes
    to ``states``: connected, and its first state change awaited."""
    conn = on_io(io, lambda: BrokerConnection(
        io, 1, host, port, settings, on_state=lambda c, st, err: states.append((st, err))))
    on_io(io, lambda: io.add_tick(conn.service))
    on_io(io, conn.connect)
    wait_until(lambda: states)
    return conn


def test_backoff_grows_with_jitter_and_caps():
    b = Backoff(100, 1000, random.Random(1))
    delays = [b.next_delay() for _ in range(8)]
    # -25%..+50% around 0.1, 0.2, 0.4, 0.8, then the 1 s cap
    for i, d in enumerate(delays[:4]):
        base = 0.1 * 2 ** i
        assert 0.75 * base - 1e-9 <= d <= min(1.5 * base, 1.0) + 1e-9
    assert all(d <= 1.0 for d in delays)
    assert delays[-1] == 1.0
    b.reset()
    assert b.next_delay() <= 0.15
    assert Backoff(0, 0).next_delay() == 0.0


def test_backoff_jitter_covers_the_range():
    rng = random.Random(7)
    seen = [Backoff(1000, 10000, rng).next_delay() for _ in range(500)]
    assert min(seen) < 0.8 and max(seen) > 1.4
    assert all(0.75 <= d <= 1.5 for d in seen)


def test_resolve_literals_and_names():
    assert is_ip_literal("127.0.0.1") and is_ip_literal("::1") and not is_ip_literal("localhost")
    v4 = resolve("127.0.0.1", 9092)
    assert v4 == [(socket.AF_INET, ("127.0.0.1", 9092))]
    assert resolve("::1", 1234)[0][1][:2] == ("::1", 1234)
    names = resolve("localhost", 9092)
    assert any(af == socket.AF_INET for af, _ in names)
    assert all(af == socket.AF_INET for af, _ in resolve("localhost", 9092, "v4"))
    with pytest.raises(OSError):
        resolve("no-such-host.invalid", 9092)


def test_canonical_names_are_the_addresses_reverse_names():
    """KIP-235 as librdkafka: an alias becomes the names of its addresses; an address
    without a name stays numeric; a name that does not resolve stays as given."""
    def alias(host, port):   # an alias of two addresses (resolve_cb-shaped answer)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.7", port))]
    try:
        loopback = socket.getnameinfo(("127.0.0.1", 9092), socket.NI_NAMEREQD)[0]
    except OSError:
        loopback = "127.0.0.1"
    assert canonical_names("kafka.example", 9092, resolver=alias) == [loopback, "192.0.2.7"]
    assert canonical_names("no-such-host.invalid", 9092) == ["no-such-host.invalid"]


def test_io_thread_calls_timers_and_ticks(io):
    order = []
    done = threading.Event()

    def later(tag):
        order.append(tag)
        if tag == "b":
            done.set()

    def schedule():
        io.call_later(0.05, later, "b")
        io.call_later(0.01, later, "a")
        t = io.call_later(0.02, later, "cancelled")
        t.cancel()

    io.call_soon(schedule)
    assert done.wait(5)
    assert order == ["a", "b"]
    ticks = []
    ev = threading.Event()

    def tick(now):
        ticks.append(now)
        if len(ticks) >= 3:
            ev.set()
        return now + 0.01

    io.call_soon(io.add_tick, tick)
    assert ev.wait(5)
    io.call_soon(io.remove_tick, tick)


def test_io_thread_survives_a_failing_callback():
    t = IOThread().start()
    ev = threading.Event()
    t.call_soon(lambda: 1 / 0)
    t.call_soon(ev.set)
    assert ev.wait(5)
    t.stop()
    assert len(t.errors) == 1 and isinstance(t.errors[0], ZeroDivisionError)
    assert not t.alive


def _closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_refused_connection_fails_requests_and_backs_off(io):
    from kafka_proto.messages import MetadataRequest

    port = _closed_port()
    results = []
    states = []
    settings = ConnectionSettings(reconnect_backoff_ms=200, reconnect_backoff_max_ms=200)

    def go():
        conn = BrokerConnection(io, -1, "127.0.0.1", port, settings,
                                on_state=lambda c, st, err: states.append((st, err)))
        conn.send(MetadataRequest(topics=None), lambda r, e: results.append(e))
        return conn

    conn = on_io(io, go)
    wait_until(lambda: states)
    st, err = states[0]
    assert st == DISCONNECTED and err.code() == KafkaError._TRANSPORT
    assert "connect failed" in err.str()
    # The queued request is kept for the next attempt, which waits for the backoff.
    assert results == [] and conn.queued == 1
    wait = conn.next_attempt - time.monotonic()
    assert wait <= 0.3
    on_io(io, lambda: conn.close(KafkaError(KafkaError._DESTROY), fail_queued=True))
    assert [e.code() for e in results] == [KafkaError._DESTROY]


def test_a_broker_named_again_and_again_but_unreachable_keeps_a_growing_backoff(io):
    """A broker the Metadata answers keep listing but the client cannot reach (a wrong
    advertised listener; a hostile answer naming the broker on a dead port): each answer
    may shorten the reconnect backoff once, not every time. Metadata is asked every 100 ms
    while a leader is unreachable, and each answer used to start an attempt at once: 10
    connection attempts and 10 _TRANSPORT errors a second for as long as it lasted
    (librdkafka: its backoff, 5 attempts in 8 s)."""
    port = _closed_port()
    settings = ConnectionSettings(reconnect_backoff_ms=400, reconnect_backoff_max_ms=10000)
    started = []

    def go():
        conn = BrokerConnection(io, 1, "127.0.0.1", port, settings,
                                on_state=lambda c, st, err: started.append(time.monotonic())
                                if st == DISCONNECTED else None)
        conn.connect()

        def answer():   # what Cluster.ensure_connected does on each Metadata answer
            if conn.state == DISCONNECTED:
                conn.named_up(time.monotonic())
                conn.connect()
            timers.append(io.call_later(0.05, answer))
        timers = [io.call_later(0.05, answer)]
        return conn, timers

    conn, timers = on_io(io, go)
    time.sleep(3.0)
    on_io(io, lambda: [t.cancel() for t in timers])
    attempts = conn.connect_count
    on_io(io, lambda: conn.close(KafkaError(KafkaError._DESTROY), fail_queued=True))
    # the backoff's own attempts (0, ~0.4, ~1.2, ~2.8 s) and at most one shortcut after each
    assert 3 <= attempts <= 8, attempts
    # the first answer after the first failure still connects at once (a broker back up)
    assert started[1] - started[0] < 0.2


def test_a_request_sent_fail_unreachable_fails_with_the_first_failed_attempt(io):
    """A request that belongs to whoever leads a partition now (ListOffsets) fails when
    the connection attempt fails, so that the caller asks the current leader; the others
    wait for the next attempt."""
    from kafka_proto.messages import MetadataRequest

    port = _closed_port()
    kept, failed, states = [], [], []

    def go():
        conn = BrokerConnection(io, -1, "127.0.0.1", port, ConnectionSettings(),
                                on_state=lambda c, st, err: states.append(st))
        conn.send(MetadataRequest(topics=None), lambda r, e: kept.append(e))
        conn.send(MetadataRequest(topics=None), lambda r, e: failed.append(e),
                  fail_unreachable=True)
        return conn

    conn = on_io(io, go)
    wait_until(lambda: states)
    assert [e.code() for e in failed] == [KafkaError._TRANSPORT]
    assert kept == [] and conn.queued == 1
    on_io(io, lambda: conn.close(KafkaError(KafkaError._DESTROY), fail_queued=True))
    assert [e.code() for e in kept] == [KafkaError._DESTROY]


def test_unresolvable_host_reports_resolve_error(io):
    states = []
    conn = on_io(io, lambda: BrokerConnection(
        io, -1, "no-such-host.invalid", 9092,
        on_state=lambda c, st, err: states.append(err)))
    on_io(io, conn.connect)
    assert states and states[0].code() == KafkaError._RESOLVE


def test_setup_timeout_closes_a_silent_peer(io):
    # A listening socket that never answers ApiVersions.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    states = []
    try:
        settings = ConnectionSettings(setup_timeout=0.2)
        conn = on_io(io, lambda: BrokerConnection(
            io, -1, "127.0.0.1", srv.getsockname()[1], settings,
            on_state=lambda c, st, err: states.append((st, err))))
        on_io(io, lambda: io.add_tick(conn.service))
        on_io(io, conn.connect)
        wait_until(lambda: states)
        assert states[0][0] == DISCONNECTED
        assert states[0][1].code() == KafkaError._TIMED_OUT
        assert "setup timed out" in states[0][1].str()
    finally:
        srv.close()


def test_handshake_and_pipelined_requests(broker, io):
    from kafka_proto.messages import MetadataRequest

    results = []
    done = threading.Event()
    n = 20

    def cb(resp, err):
        results.append((resp, err))
        if len(results) == n:
            done.set()

    def go():
        conn = BrokerConnection(io, -1, broker.host, broker.port,
                                ConnectionSettings(max_in_flight=3))
        io.add_tick(conn.service)
        for _ in range(n):
            conn.send(MetadataRequest(topics=None), cb)
        return conn

    conn = on_io(io, go)
    assert done.wait(10)
    assert all(err is None for _, err in results)
    assert all(resp.brokers for resp, _ in results)
    assert conn.state == READY and conn.versions.get(0, -1) >= 3
    assert conn.in_flight == 0 and conn.rtt_count >= n + 1  # + ApiVersions (1 or 2 rounds)


class FakeBroker:
    """A listening socket that answers ApiVersions (v0 layout, asked version echoed) and
    then stays silent, or closes, as told. ``frames`` are the API keys of the frames
    read; ``close_at_end``: the peer's end of the stream read (``ended`` set), it
    closes too."""

    def __init__(self, close_after_handshake=False, api_versions_max=None, other_body=None,
                 close_at_end=False):
        self.close_at_end = close_at_end
        self.frames = []
        self.ended = threading.Event()
        self.api_versions_max = api_versions_max  # above it: the v0 error answer (KIP-511)
        self.other_body = other_body              # answer to everything else (None: silent)
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(4)
        self.port = self.srv.getsockname()[1]
        self.close_after = close_after_handshake
        self.conns = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        import struct

        from kafka_proto.framing import FrameParser
        from kafka_proto.messages import ApiVersionsRequest, ApiVersionsResponse

        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.conns.append(c)
            parser = FrameParser()
            open_ = True
            while open_:
                try:
                    data = c.recv(65536)
                except OSError:
                    break
                if not data:
                    self.ended.set()
                    if self.close_at_end:
                        c.close()
                    break
                for frame in parser.feed(data):
                    key, version, cid = struct.unpack_from(">hhi", frame, 0)
                    self.frames.append(key)
                    if key != 18:
                        if self.other_body is not None:
                            body = self.other_body
                            c.sendall(struct.pack(">ii", len(body) + 4, cid) + body)
                        continue
                    top = self.api_versions_max or ApiVersionsRequest.MAX_VERSION
                    error = 35 if version > top else 0
                    body = ApiVersionsResponse(error_code=error, api_keys=[
                        ApiVersionsResponse.ApiVersion(
                            api_key=18, min_version=0, max_version=top),
                        ApiVersionsResponse.ApiVersion(api_key=3, min_version=0,
                                                       max_version=12)]
                    ).encode(0 if error else version)
                    c.sendall(struct.pack(">ii", len(body) + 4, cid) + body)
                    if self.close_after:
                        c.close()
                        open_ = False
                        break

    def close(self):
        self.srv.close()
        for c in self.conns:
            c.close()


def test_request_timeout_closes_and_fails_in_flight(io):
    from kafka_proto.messages import MetadataRequest

    fake = FakeBroker()
    results, states = [], []
    try:
        settings = ConnectionSettings(request_timeout=0.3)
        conn = on_io(io, lambda: BrokerConnection(
            io, 1, "127.0.0.1", fake.port, settings,
            on_state=lambda c, st, err: states.append((st, err))))
        on_io(io, lambda: io.add_tick(conn.service))
        start = time.monotonic()
        on_io(io, lambda: conn.send(MetadataRequest(topics=None),
                                    lambda r, e: results.append(e)))
        wait_until(lambda: results)
        assert results and results[0].code() == KafkaError._TIMED_OUT
        assert 0.25 <= time.monotonic() - start < 2
        assert [st for st, _ in states] == [READY, DISCONNECTED]
        assert conn.versions[3] == 12 and set(conn.versions) == {3, 18}
    finally:
        fake.close()


# -- requests that wait in the queue -------------------------------------------------------

def _frames_read(sock, timeout=0.5):
    """The API keys of the frames a peer socket received so far (read until quiet)."""
    import struct

    from kafka_proto.framing import FrameParser

    parser, keys = FrameParser(), []
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                break
            keys += [struct.unpack_from(">h", frame, 0)[0] for frame in parser.feed(data)]
    except socket.timeout:
        pass
    return keys


def test_a_request_queued_on_a_connection_never_ready_times_out_in_queue(io):
    """A broker that takes the TCP connection and never answers ApiVersions, within a
    setup timeout longer than the request's: the queued request fails at its own timeout
    (librdkafka: "timed out in output queue"), as never sent and retriable, and the
    connection setting up is left alone (nothing of the request was written). It waited
    for the setup timeout, then for every next attempt, with no end."""
    from kafka_proto.messages import MetadataRequest

    from kafka_client._net.connection import HANDSHAKE, NEVER_SENT

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    results, states = [], []
    conn = None
    try:
        settings = ConnectionSettings(setup_timeout=30.0, request_timeout=0.3)
        conn = on_io(io, lambda: BrokerConnection(
            io, 1, "127.0.0.1", srv.getsockname()[1], settings,
            on_state=lambda c, st, err: states.append((st, err))))
        on_io(io, lambda: io.add_tick(conn.service))
        start = time.monotonic()
        on_io(io, lambda: conn.send(MetadataRequest(topics=None),
                                    lambda r, e: results.append((r, e))))
        wait_until(lambda: results, timeout=10)
        assert len(results) == 1, "the queued request never timed out"
        elapsed = time.monotonic() - start
        resp, err = results[0]
        assert resp is None and err.code() == KafkaError._TIMED_OUT_QUEUE
        assert err.code() in NEVER_SENT and err.retriable()
        assert "never sent" in err.str()
        assert 0.25 <= elapsed < 10              # its timeout, not the setup's 30 s
        # The connection is still setting up: not closed for it, no second attempt.
        assert on_io(io, lambda: (conn.state, conn.connect_count, conn.queued)) == \
            (HANDSHAKE, 1, 0)
        assert states == []
        assert conn.request_timeouts == 1
        peer, _ = srv.accept()
        try:
            assert _frames_read(peer) == [18]       # ApiVersions only, never the Metadata
        finally:
            peer.close()
    finally:
        if conn is not None:
            on_io(io, lambda: conn.close(KafkaError(KafkaError._DESTROY), fail_queued=True))
        srv.close()


def test_a_request_queued_through_a_reconnect_backoff_times_out_in_queue(io):
    """A broker that refuses the connection, with a reconnect backoff longer than the
    request's timeout: the request fails at its timeout while the connection waits out
    the backoff, and with nothing left to send no new attempt starts."""
    from kafka_proto.messages import MetadataRequest

    port = _closed_port()
    results, states = [], []
    settings = ConnectionSettings(reconnect_backoff_ms=30000, reconnect_backoff_max_ms=30000)
    conn = on_io(io, lambda: BrokerConnection(
        io, 1, "127.0.0.1", port, settings,
        on_state=lambda c, st, err: states.append((st, err))))
    on_io(io, lambda: io.add_tick(conn.service))
    start = time.monotonic()
    on_io(io, lambda: conn.send(MetadataRequest(topics=None), lambda r, e: results.append(e),
                                timeout=0.3))
    wait_until(lambda: results, timeout=10)
    try:
        assert [e.code() for e in results] == [KafkaError._TIMED_OUT_QUEUE]
        assert 0.25 <= time.monotonic() - start < 10     # not the backoff's 22.5 s+
        assert [st for st, _ in states] == [DISCONNECTED]
        assert states[0][1].code() == KafkaError._TRANSPORT     # the refused attempt
        time.sleep(0.1)
        assert on_io(io, lambda: (conn.queued, conn.connect_count)) == (0, 1)
    finally:
        on_io(io, lambda: conn.close(KafkaError(KafkaError._DESTROY), fail_queued=True))


def test_a_request_queued_behind_a_full_window_times_out_without_closing(io):
    """On a ready connection whose in-flight window is full (a broker that answers
    nothing more): the queued requests expire in the order of their deadlines, not of
    their queueing, each as never sent; the connection stays up with its request in
    flight, which alone closes it when it times out."""
    from kafka_proto.messages import MetadataRequest

    fake = FakeBroker()
    results, states = [], []
    try:
        settings = ConnectionSettings(max_in_flight=1, request_timeout=30.0)
        conn = connected(io, fake.port, states, settings=settings)
        assert states == [(READY, None)]

        def send_three():
            for name, timeout in (("in flight", 4.0), ("long", 30.0), ("short", 0.3)):
                conn.send(MetadataRequest(topics=None),
                          lambda r, e, name=name: results.append((name, e)),
                          timeout=timeout)
            return conn.in_flight, conn.queued

        assert on_io(io, send_three) == (1, 2)
        wait_until(lambda: results)
        assert [(name, e.code()) for name, e in results] == \
            [("short", KafkaError._TIMED_OUT_QUEUE)]
        assert on_io(io, lambda: (conn.state, conn.in_flight, conn.queued)) == (READY, 1, 1)
        assert states == [(READY, None)]
        # The request in flight times out: that closes the connection (_TIMED_OUT); the
        # long one stays queued for the next connection.
        wait_until(lambda: len(results) >= 2, timeout=15)
        assert [(name, e.code()) for name, e in results[1:]] == \
            [("in flight", KafkaError._TIMED_OUT)]
        assert [st for st, _ in states] == [READY, DISCONNECTED]
        assert fake.frames.count(3) == 1          # the queued ones were never written
        assert conn.request_timeouts == 2
    finally:
        on_io(io, lambda: conn.close(KafkaError(KafkaError._DESTROY), fail_queued=True))
        fake.close()


def test_nothing_due_in_a_long_queue_costs_no_look_at_it(io):
    """check_timeouts runs every I/O turn: with thousands of requests queued and none
    due, it looks at none of them (the earliest queued deadline is kept apart)."""
    from collections import deque

    from kafka_proto.messages import MetadataRequest

    class Watched(deque):
        walks = 0

        def __iter__(self):
            Watched.walks += 1
            return super().__iter__()

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    try:
        conn = on_io(io, lambda: BrokerConnection(
            io, 1, "127.0.0.1", srv.getsockname()[1], ConnectionSettings(setup_timeout=30)))

        def queue_and_check():
            for i in range(5000):
                conn.send(MetadataRequest(topics=None), None, timeout=20.0 + i % 7)
            conn._queue = Watched(conn._queue)
            now = time.monotonic()
            nxt = [conn.service(now + 0.001 * i) for i in range(200)]
            return conn.queued, min(nxt)

        queued, nxt = on_io(io, queue_and_check)
        assert queued == 5000 and Watched.walks == 0
        assert time.monotonic() + 15 < nxt       # the earliest queued deadline, ~20 s on
    finally:
        on_io(io, lambda: conn.close(KafkaError(KafkaError._DESTROY), fail_queued=True))
        srv.close()


def test_idle_connection_is_closed(io):
    fake = FakeBroker()
    states = []
    try:
        settings = ConnectionSettings(idle_timeout=0.2)
        conn = on_io(io, lambda: BrokerConnection(
            io, 1, "127.0.0.1", fake.port, settings,
            on_state=lambda c, st, err: states.append((st, err))))
        on_io(io, lambda: io.add_tick(conn.service))
        on_io(io, conn.connect)
        wait_until(lambda: len(states) >= 2)
        assert states[0][0] == READY
        assert states[1] == (DISCONNECTED, None)  # closed without an error
        assert conn.next_attempt <= time.monotonic()  # no backoff after an idle close
    finally:
        fake.close()


def test_broker_closing_the_connection_fails_requests_with_transport(io):
    from kafka_proto.messages import MetadataRequest

    fake = FakeBroker(close_after_handshake=True)
    results = []
    try:
        conn = on_io(io, lambda: BrokerConnection(io, 1, "127.0.0.1", fake.port))
        on_io(io, lambda: io.add_tick(conn.service))
        on_io(io, lambda: conn.send(MetadataRequest(topics=None),
                                    lambda r, e: results.append(e)))
        wait_until(lambda: results)
        assert results[0].code() == KafkaError._TRANSPORT
        assert conn.backoff.failures == 1
    finally:
        fake.close()


def test_connection_failures_are_logged_as_librdkafka_logs_them(io, caplog):
    """A connect that fails is an ERROR at every attempt (librdkafka's "FAIL ... Connect
    to ... failed"), a connection lost once up is INFO ("Disconnected"; DEBUG with
    log.connection.close=false), and the client's own close is DEBUG."""
    from kafka_proto.messages import MetadataRequest

    caplog.set_level(logging.DEBUG, logger="kafka_client.connection")
    port = _closed_port()
    states = []
    refused = on_io(io, lambda: BrokerConnection(
        io, -1, "127.0.0.1", port, ConnectionSettings(reconnect_backoff_ms=50),
        on_state=lambda c, st, err: states.append(err)))
    on_io(io, lambda: io.add_tick(refused.service))
    # a request waiting for the broker: the connection tries again after each backoff
    on_io(io, lambda: refused.send(MetadataRequest(topics=None), lambda r, e: None))
    wait_until(lambda: len(states) >= 2)
    failed = [r for r in caplog.records if f"to 127.0.0.1:{port} failed" in r.message]
    assert len(failed) >= 2 and {r.levelno for r in failed} == {logging.ERROR}, failed
    on_io(io, lambda: refused.close(KafkaError(KafkaError._DESTROY)))

    for log_close, level in ((True, logging.INFO), (False, logging.DEBUG)):
        fake = FakeBroker(close_after_handshake=True)
        caplog.clear()
        try:
            settings = ConnectionSettings(log_close=log_close)
            conn = on_io(io, lambda: BrokerConnection(io, 1, "127.0.0.1", fake.port, settings))
            on_io(io, lambda: io.add_tick(conn.service))
            on_io(io, conn.connect)
            wait_until(lambda: conn.disconnects)
            lost = [r for r in caplog.records if "lost" in r.message]
            assert [r.levelno for r in lost] == [level]
            assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
            on_io(io, lambda: conn.close(KafkaError(KafkaError._DESTROY)))
        finally:
            fake.close()
    closed = [r for r in caplog.records if "closed" in r.message]
    assert closed == [] or {r.levelno for r in closed} == {logging.DEBUG}


def test_an_unreachable_broker_shows_on_stderr_without_a_logger(tmp_path):
    """What confluent-kafka's default stderr log shows of a wrong bootstrap.servers, ours
    shows too, with no logger, no error_cb and no logging set up (Python's last-resort
    handler prints warnings and errors to stderr)."""
    import subprocess
    import sys

    port = _closed_port()
    script = (
        "import time, kafka_client\n"
        f"p = kafka_client.Producer({{'bootstrap.servers': '127.0.0.1:{port}'}})\n"
        "p.poll(2)\n"
        "p.close(0)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert f"connection to 127.0.0.1:{port} failed" in done.stderr, done.stderr


def test_addresses_of_a_name_are_tried_in_turn(io):
    """A name resolving to several addresses (here by resolve_cb): the dead first one is
    skipped."""
    fake = FakeBroker()
    dead = _closed_port()
    tcp = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "")
    settings = ConnectionSettings(resolve_cb=lambda host, port: [
        tcp + (("127.0.0.1", dead),), tcp + (("127.0.0.1", fake.port),)])
    states = []
    try:
        conn = connected(io, 9092, states, host="broker.example", settings=settings)
        assert states == [(READY, None)]
        assert conn.connect_count == 1  # one attempt, two addresses
    finally:
        fake.close()


def test_shutdown_sends_every_request_then_ends_the_stream_and_drains_the_answers(io):
    """Graceful close with a fire-and-forget request just sent (acks=0 Produce): the
    broker reads the whole request, then our end of the stream (not a reset that could
    drop it); its answer, which nobody waits for, is read and dropped, and the
    connection closes when the broker closes its side."""
    from kafka_proto.messages import MetadataRequest

    fake = FakeBroker(other_body=b"\x00" * 64, close_at_end=True)
    states, results = [], []
    try:
        conn = connected(io, fake.port, states)
        assert states == [(READY, None)]

        def send_and_shut_down():
            conn.send(MetadataRequest(topics=None), lambda r, e: results.append((r, e)),
                      expect_response=False)
            return conn.shutdown()

        assert on_io(io, send_and_shut_down) is True  # something is due: it waits
        assert fake.ended.wait(5)                     # our end, after the request
        assert fake.frames == [18, 3]
        wait_until(lambda: conn.sock is None)
        assert on_io(io, lambda: (conn.sock, conn.state)) == (None, DISCONNECTED)
        assert states == [(READY, None)]              # no state news once closing
        assert results == [(None, None)]              # done when written
        assert conn.rx_bytes >= 64 + 8                # the late answer was read
    finally:
        fake.close()


def test_shutdown_with_nothing_due_closes_at_once(io):
    fake = FakeBroker()
    states = []
    try:
        conn = connected(io, fake.port, states)
        assert on_io(io, conn.shutdown) is False
        assert conn.sock is None and conn.state == DISCONNECTED
    finally:
        fake.close()


def test_handshake_asks_again_lower_on_unsupported_version(io):
    """The broker knows ApiVersions up to v2 only: it answers our v4 in v0 with
    UNSUPPORTED_VERSION and its range, and the connection asks again at v2 (KIP-511)."""
    fake = FakeBroker(api_versions_max=2)
    states = []
    try:
        conn = connected(io, fake.port, states)
        assert states == [(READY, None)]
        assert conn.versions == {18: 2, 3: 12}
        assert conn.tx_requests == 2 and conn.rtt_count == 2 and conn.in_flight == 0
    finally:
        fake.close()


def test_undecodable_response_fails_its_own_request_and_the_others(io):
    """A Metadata answer that does not decode closes the connection; the request it
    answered gets the error too (it is no longer in flight when the error is found)."""
    from kafka_proto.messages import MetadataRequest

    fake = FakeBroker(other_body=b"\x00\x00")
    results = []
    try:
        conn = on_io(io, lambda: BrokerConnection(io, 1, "127.0.0.1", fake.port))
        on_io(io, lambda: io.add_tick(conn.service))
        on_io(io, lambda: [conn.send(MetadataRequest(topics=None),
                                     lambda r, e, i=i: results.append((i, r, e)))
                           for i in range(2)])
        wait_until(lambda: len(results) >= 2)
        assert sorted(i for i, _, _ in results) == [0, 1]
        assert all(r is None and e.code() == KafkaError._TRANSPORT for _, r, e in results)
        assert any("cannot decode the Metadata" in e.str() for _, _, e in results)
        assert conn.state == DISCONNECTED and conn.in_flight == 0
    finally:
        fake.close()


def test_settings_take_security_and_log_close_from_the_config():
    from kafka_client.config import ClientConfig

    cfg = ClientConfig.from_dict({"security.protocol": "ssl", "log.connection.close": False},
                                 "producer")
    s = ConnectionSettings(cfg)
    assert s.security is cfg.security and s.security.ssl_context is not None
    assert s.log_close is False
    plain = ConnectionSettings()
    assert plain.security.ssl_context is None and plain.security.mechanism is None
