"""FaultProxy: forwarding and each fault against a small echo server, then a real
producer (confluent-kafka) through the proxy to Tansu while it cuts and stalls."""
from __future__ import annotations

import os
import struct
import socket
import threading
import time

import pytest

from kafka_client._testing.proxy import FaultProxy, proxied_tansu


class EchoServer:
    """Echoes every byte back; remembers how many bytes each connection received."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.received = []       # bytes received per connection, in accept order
        self.errors = []         # exceptions seen by the handler (e.g. reset by peer)
        self._threads = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            idx = len(self.received)
            self.received.append(0)
            t = threading.Thread(target=self._serve, args=(c, idx), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, c, idx):
        with c:
            while True:
                try:
                    data = c.recv(65536)
                except OSError as exc:
                    self.errors.append(exc)
                    return
                if not data:
                    return
                self.received[idx] += len(data)
                try:
                    c.sendall(data)
                except OSError as exc:
                    self.errors.append(exc)
                    return

    def close(self):
        self._stop = True
        self.sock.close()


@pytest.fixture
def echo():
    srv = EchoServer()
    yield srv
    srv.close()


@pytest.fixture
def proxy(echo):
    p = FaultProxy("127.0.0.1", echo.port)
    yield p
    p.close()


def connect(proxy, timeout=5.0):
    s = socket.create_connection(proxy.address, timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def test_forwards_both_ways_and_counts(proxy, echo):
    assert proxy.address == ("127.0.0.1", proxy.port)
    assert proxy.bootstrap == f"127.0.0.1:{proxy.port}"
    payload = os.urandom(3 << 20)  # more than the backpressure limit's socket buffers
    with connect(proxy) as s:
        sender = threading.Thread(target=s.sendall, args=(payload,))
        sender.start()
        got = recv_exact(s, len(payload))
        sender.join()
        assert got == payload
        assert proxy.active == 1
    wait_for(lambda: proxy.active == 0)
    st = proxy.stats()
    assert st["connections"] == 1
    assert st["bytes_up"] == len(payload) and st["bytes_down"] == len(payload)
    assert echo.received == [len(payload)]


def test_many_connections(proxy):
    socks = [connect(proxy) for _ in range(10)]
    for i, s in enumerate(socks):
        s.sendall(b"hello %d" % i)
    for i, s in enumerate(socks):
        assert recv_exact(s, len(b"hello %d" % i)) == b"hello %d" % i
    assert proxy.connections == 10 and proxy.active == 10
    for s in socks:
        s.close()
    wait_for(lambda: proxy.active == 0)


def test_cut_closes_cleanly(proxy):
    s = connect(proxy)
    s.sendall(b"ping")
    assert recv_exact(s, 4) == b"ping"
    assert proxy.cut() == 1
    assert proxy.active == 0 and proxy.cuts == 1
    assert s.recv(10) == b""  # FIN, not RST
    s.close()
    # the proxy keeps accepting
    with connect(proxy) as s2:
        s2.sendall(b"again")
        assert recv_exact(s2, 5) == b"again"


def test_reset_sends_rst(proxy):
    s = connect(proxy)
    s.sendall(b"ping")
    assert recv_exact(s, 4) == b"ping"
    assert proxy.reset() == 1
    assert proxy.resets == 1
    with pytest.raises(ConnectionResetError):
        s.recv(10)
    s.close()


def test_stall_holds_data_then_resume_delivers(proxy):
    s = connect(proxy)
    s.sendall(b"a")
    assert recv_exact(s, 1) == b"a"
    proxy.stall()
    s.sendall(b"during-stall")
    s.settimeout(0.3)
    with pytest.raises(socket.timeout):
        s.recv(100)
    assert proxy.active == 1  # nothing closed
    proxy.resume()
    s.settimeout(5)
    assert recv_exact(s, 12) == b"during-stall"
    s.close()


def test_stall_one_direction(proxy, echo):
    s = connect(proxy)
    proxy.stall("downstream")
    s.sendall(b"xyz")
    wait_for(lambda: echo.received and echo.received[0] == 3)  # upstream still flows
    s.settimeout(0.3)
    with pytest.raises(socket.timeout):
        s.recv(10)
    proxy.resume("downstream")
    s.settimeout(5)
    assert recv_exact(s, 3) == b"xyz"
    s.close()


def test_delay_adds_latency_and_keeps_order(proxy):
    with connect(proxy) as s:
        s.sendall(b"warm")
        recv_exact(s, 4)
        proxy.delay(0.15)
        t0 = time.monotonic()
        s.sendall(b"slow")
        assert recv_exact(s, 4) == b"slow"
        elapsed = time.monotonic() - t0
        assert elapsed >= 0.28  # held on the way up and on the way down
        for i in range(5):
            s.sendall(b"%d" % i)
        assert recv_exact(s, 5) == b"01234"
        proxy.delay(0)
        # The fastest of five round trips: a loaded machine may stall any one of them
        # past 0.1 s; a delay still applied would hold every one 0.3 s.
        trips = []
        for _ in range(5):
            t0 = time.monotonic()
            s.sendall(b"fast")
            assert recv_exact(s, 4) == b"fast"
            trips.append(time.monotonic() - t0)
        assert min(trips) < 0.1, trips
    with pytest.raises(ValueError):
        proxy.delay(-1)


def test_drop_after_upstream_cuts_mid_request(proxy, echo):
    s = connect(proxy)
    s.sendall(b"0123456789")
    assert recv_exact(s, 10) == b"0123456789"
    proxy.drop_after(25, "upstream")
    assert proxy.drop_pending
    s.sendall(b"A" * 20)
    assert recv_exact(s, 20) == b"A" * 20  # not yet
    s.sendall(b"B" * 20)  # the 25th byte is in here
    got = b""
    while True:
        chunk = s.recv(100)
        if not chunk:
            break
        got += chunk
    assert got == b""  # closed as soon as the 25th byte went up, before any echo
    wait_for(lambda: echo.received[0] == 35)  # exactly 5 of the 20 reached the server
    time.sleep(0.05)
    assert echo.received[0] == 35
    assert proxy.drops == 1 and not proxy.drop_pending and proxy.active == 0
    s.close()


def test_drop_after_downstream_with_rst(proxy):
    s = connect(proxy)
    proxy.drop_after(3, "downstream", rst=True)
    s.sendall(b"abcdef")
    assert recv_exact(s, 3) == b"abc"
    with pytest.raises(ConnectionResetError):
        while s.recv(10):
            pass
    s.close()
    assert proxy.drops == 1


def test_refuse_then_accept_again(proxy):
    with connect(proxy) as kept:
        proxy.refuse(True)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(proxy.address, timeout=2)
        kept.sendall(b"still")  # open connections keep working
        assert recv_exact(kept, 5) == b"still"
        proxy.refuse(False)
        with connect(proxy) as s:
            s.sendall(b"back")
            assert recv_exact(s, 4) == b"back"


def test_upstream_down_closes_client(echo):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()  # nothing listens there now
    with FaultProxy("127.0.0.1", port) as p:
        # accepted, then reset at once: the error shows up in connect, send or recv
        with pytest.raises(ConnectionError):
            with connect(p) as s:
                s.sendall(b"x")
                if not s.recv(1):
                    raise ConnectionError("closed")
        wait_for(lambda: p.upstream_failures == 1)


def test_only_loopback_targets():
    for host in ("10.0.0.1", "example.com", "::1", "0.0.0.0"):
        with pytest.raises(ValueError):
            FaultProxy(host, 9092)
    with FaultProxy("localhost", 9) as p:
        assert p.target == ("127.0.0.1", 9)


def test_chaos_seeded_and_bounded(proxy):
    # The same seed gives the same actions.
    c1 = proxy.chaos(seed=7, interval=0.02, duration=0.5,
                     actions=("cut", "reset", "drop", "stall", "delay", "refuse"))
    c1.join(5)
    assert not c1.running and c1.error is None
    assert len(c1.log) >= 5
    c3 = proxy.chaos(seed=7, interval=0.02, duration=0.5,
                     actions=("cut", "reset", "drop", "stall", "delay", "refuse"))
    c3.join(5)
    n = min(len(c1.log), len(c3.log))
    assert [a for _, a in c1.log[:n]] == [a for _, a in c3.log[:n]]
    # afterwards the proxy forwards normally
    with connect(proxy) as s:
        s.sendall(b"ok")
        assert recv_exact(s, 2) == b"ok"
    with pytest.raises(ValueError):
        proxy.chaos(seed=1, interval=0.1, duration=1, actions=("explode",))


def test_echo_survives_chaos_with_retries(proxy):
    """A client that reconnects and resends gets every message echoed under chaos."""
    chaos = proxy.chaos(seed=3, interval=0.05, duration=1.0,
                        actions=("cut", "reset", "stall", "drop"))
    done = 0
    reconnects = 0
    deadline = time.monotonic() + 20
    s = None
    # keep going until the chaos is over, so the faults hit the traffic
    while (done < 200 or chaos.running) and time.monotonic() < deadline:
        msg = b"message-%05d" % done
        try:
            if s is None:
                s = connect(proxy, timeout=1.0)
            s.sendall(msg)
            assert recv_exact(s, len(msg)) == msg
            done += 1
        except OSError:  # includes ConnectionError and socket.timeout
            reconnects += 1
            if s is not None:
                s.close()
            s = None
    if s is not None:
        s.close()
    chaos.stop()
    assert chaos.error is None
    assert done >= 200
    assert len(chaos.log) >= 5
    assert reconnects >= 1
    assert proxy.cuts + proxy.resets + proxy.drops >= 1


# -- a real broker behind the proxy ------------------------------------------------------------

def _tansu_or_skip():
    from kafka_client._testing.brokers import tansu_binary

    if tansu_binary() is None:
        pytest.skip("tansu not available")


@pytest.mark.integration
def test_confluent_producer_through_proxy_recovers():
    _tansu_or_skip()
    from confluent_kafka import Consumer, Producer, TopicPartition

    n = 3000
    with proxied_tansu() as (broker, proxy):
        topic = "proxied-topic"
        broker.create_topic(topic, partitions=2)
        assert proxy.connections >= 1  # admin traffic already went through the proxy
        errors = []
        delivered = []

        def on_delivery(err, msg):
            if err is not None:
                errors.append(err)
            else:
                delivered.append(msg.value())

        producer = Producer({"bootstrap.servers": proxy.bootstrap,
                             "enable.idempotence": True, "linger.ms": 2,
                             "message.timeout.ms": 60000, "socket.timeout.ms": 3000,
                             "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200})
        before = proxy.connections
        for i in range(n):
            producer.produce(topic, value=b"%06d" % i, key=b"k%d" % (i % 10),
                             on_delivery=on_delivery)
            producer.poll(0)
            if i == 500:
                proxy.cut()
            elif i == 1000:
                proxy.stall()
                time.sleep(0.3)
                proxy.resume()
            elif i == 1500:
                proxy.reset()
            elif i == 2000:
                proxy.drop_after(50, "upstream")
            if i % 100 == 0:
                time.sleep(0.02)  # let requests go out between the faults
        assert producer.flush(60) == 0
        assert not errors, errors[:5]
        assert sorted(delivered) == [b"%06d" % i for i in range(n)]
        # The producer reconnected through the proxy (not around it).
        assert proxy.connections > before
        assert proxy.cuts + proxy.resets >= 1
        assert proxy.bytes_up > n * 6

        # Read back through the proxy: every value exactly once.
        consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": "proxy-test",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < n and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None or m.error():
                continue
            seen.append(m.value())
        consumer.close()
        assert sorted(seen) == [b"%06d" % i for i in range(n)]


@pytest.mark.integration
def test_confluent_idempotent_producer_under_chaos_exactly_once_in_order():
    """librdkafka's idempotent producer through seeded chaos: the read-back holds every
    message once, in order per partition (what our producer's fault test will demand)."""
    _tansu_or_skip()
    from confluent_kafka import Consumer, Producer, TopicPartition

    n, partitions = 20000, 3
    with proxied_tansu() as (broker, proxy):
        topic = "chaos-topic"
        broker.create_topic(topic, partitions=partitions)
        errors = []
        producer = Producer({"bootstrap.servers": proxy.bootstrap,
                             "enable.idempotence": True, "linger.ms": 5,
                             "message.timeout.ms": 120000, "socket.timeout.ms": 3000,
                             "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200})
        chaos = proxy.chaos(seed=11, interval=0.25, duration=4.0,
                            actions=("cut", "reset", "stall", "drop"))
        t_end = time.monotonic() + 4.0
        for i in range(n):
            while True:
                try:
                    producer.produce(topic, value=b"%06d" % i, partition=i % partitions,
                                     on_delivery=lambda err, msg: err and errors.append(err))
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
            # spread the messages over the chaos period
            if i % 500 == 0:
                time.sleep(max(0.0, min(0.1, (t_end - time.monotonic()) / ((n - i) / 500))))
        chaos.join(10)
        assert producer.flush(90) == 0
        assert chaos.error is None and len(chaos.log) >= 5
        assert not errors, errors[:5]
        assert proxy.cuts + proxy.resets + proxy.drops >= 1

        consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": "chaos-test",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        per_partition = {p: [] for p in range(partitions)}
        got = 0
        deadline = time.monotonic() + 60
        while got < n and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None or m.error():
                continue
            per_partition[m.partition()].append(int(m.value()))
            got += 1
        consumer.close()
        for p in range(partitions):
            assert per_partition[p] == list(range(p, n, partitions)), f"partition {p}"


# -- address rewriting -------------------------------------------------------------------------

def _metadata_response_frame(correlation_id, version, port, host="127.0.0.1"):
    from kafka_proto.framing import response_header_version
    from kafka_proto.messages import MetadataResponse

    resp = MetadataResponse(brokers=[
        MetadataResponse.MetadataResponseBroker(node_id=1, host=host, port=port),
        MetadataResponse.MetadataResponseBroker(node_id=2, host="127.0.0.1", port=1)],
        topics=[])
    body = resp.encode(version)
    header = struct.pack(">i", correlation_id)
    if response_header_version(3, version) == 1:
        header += b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _request_frame(api_key, version, correlation_id, extra=b"xyz"):
    payload = struct.pack(">hhi", api_key, version, correlation_id) + extra
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("version", [1, 9, 12])
@pytest.mark.parametrize("step", [1, 3, 1000])
def test_rewriter_split_anywhere(version, step):
    from kafka_client._testing.proxy import _RequestScanner, _ResponseRewriter
    from kafka_proto.messages import MetadataResponse

    with FaultProxy("127.0.0.1", 9092, rewrite_addresses=True) as p:
        pending = {}
        scanner = _RequestScanner(pending, True, lambda api_key, frame: None,
                                  lambda api_key: False, lambda frame: frame)
        rewriter = _ResponseRewriter(pending, p._rewrite_response)
        up = _request_frame(18, 3, 1) + _request_frame(3, version, 2) + _request_frame(0, 9, 3)
        passed = b"".join(scanner.feed(up[i:i + step]) for i in range(0, len(up), step))
        assert passed == up
        assert pending == {2: (3, version, None)}
        other1 = struct.pack(">ii", 6, 1) + b"ab"  # a response we do not touch
        meta = _metadata_response_frame(2, version, 9092)
        other3 = struct.pack(">ii", 4, 3)
        down = other1 + meta + other3
        out = b"".join(rewriter.feed(down[i:i + step]) for i in range(0, len(down), step))
        assert out.startswith(other1) and out.endswith(other3)
        new_meta = out[len(other1):len(out) - len(other3)]
        (size,) = struct.unpack_from(">i", new_meta)
        assert size == len(new_meta) - 4
        from kafka_proto.framing import decode_response_header
        cid, body = decode_response_header(new_meta[4:], 3, version)
        assert cid == 2
        decoded = MetadataResponse.decode(body, version)
        assert [(b.node_id, b.host, b.port) for b in decoded.brokers] == [
            (1, "127.0.0.1", p.port), (2, "127.0.0.1", 1)]
        assert p.rewritten == 1 and pending == {}


def test_proxy_with_rewriting_keeps_client_behind_it(broker, topic_name):
    """Any broker (Tansu, noida-db) behind a rewriting proxy: the client follows the
    rewritten metadata, so a stall of the proxy stops its deliveries."""
    from confluent_kafka import Producer

    broker.create_topic(topic_name, partitions=2)
    with FaultProxy("127.0.0.1", broker.port, rewrite_addresses=True) as p:
        errors, delivered = [], []

        def on_delivery(err, msg):
            (errors if err else delivered).append(err or msg.value())

        producer = Producer({"bootstrap.servers": p.bootstrap, "linger.ms": 1,
                             "socket.timeout.ms": 3000, "message.timeout.ms": 30000,
                             "enable.idempotence": True,
                             "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200})
        producer.produce(topic_name, b"first", on_delivery=on_delivery)
        assert producer.flush(15) == 0
        assert p.rewritten >= 1
        p.stall()
        producer.produce(topic_name, b"during-stall", on_delivery=on_delivery)
        assert producer.flush(1.0) == 1  # held by the proxy: not bypassed
        p.reset()
        p.resume()
        for i in range(200):
            producer.produce(topic_name, b"m%d" % i, on_delivery=on_delivery)
        assert producer.flush(30) == 0
        assert not errors
        assert sorted(delivered) == sorted([b"first", b"during-stall"] +
                                           [b"m%d" % i for i in range(200)])
        assert p.resets == 1


def test_close_stops_running_chaos(echo):
    p = FaultProxy("127.0.0.1", echo.port)
    chaos = p.chaos(seed=5, interval=0.01, duration=60, actions=("stall", "cut"))
    time.sleep(0.1)
    t0 = time.monotonic()
    p.close()
    assert time.monotonic() - t0 < 5
    assert not chaos.running
    assert chaos.error is None
    with pytest.raises(RuntimeError):
        p.cut()


# -- answers given an error (fail_requests) ---------------------------------------------------

def _produce_frame(correlation_id, version, topic="t", partitions=(0, 1)):
    from kafka_proto.framing import encode_request
    from kafka_proto.messages import ProduceRequest
    from kafka_proto.records import RecordBatchBuilder

    b = RecordBatchBuilder()
    b.append(b"v")
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=p, records=b.build())
            for p in partitions])])
    return encode_request(req, version, correlation_id, "cli")


def _produce_response_frame(correlation_id, version, partitions, topic="t"):
    from kafka_proto.framing import response_header_version
    from kafka_proto.messages import ProduceResponse as R

    body = R(responses=[R.TopicProduceResponse(name=topic, partition_responses=[
        R.PartitionProduceResponse(index=p, error_code=0, base_offset=100)
        for p in partitions])]).encode(version)
    header = struct.pack(">i", correlation_id)
    if response_header_version(0, version) == 1:
        header += b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


@pytest.mark.parametrize("version", [3, 9])
@pytest.mark.parametrize("step", [1, 7, 100000])
def test_fail_requests_diverts_the_request_and_rewrites_its_answer(version, step):
    """The Produce request armed for is held whole and rewritten (partitions out of
    range, the rest byte for byte); other frames pass as they are. Its answer names the
    original partitions again, with the injected error and no offset."""
    from kafka_client._testing.proxy import _RequestScanner, _ResponseRewriter
    from kafka_proto.framing import decode_request_header, decode_response_header
    from kafka_proto.messages import ApiKey, ProduceRequest, ProduceResponse

    with FaultProxy("127.0.0.1", 9092, follow_frames=True) as p:
        p.fail_requests(ApiKey.PRODUCE, 59)             # UNKNOWN_PRODUCER_ID
        assert p.faults_pending
        pending = {}
        scanner = _RequestScanner(pending, False, p._take_fault, p._needs_body,
                                  p._divert_request)
        rewriter = _ResponseRewriter(pending, p._rewrite_response)
        first, second = _produce_frame(1, version), _produce_frame(2, version)
        meta = _request_frame(3, 9, 3)
        up = first + second + meta
        out = b"".join(scanner.feed(up[i:i + step]) for i in range(0, len(up), step))
        assert not p.faults_pending and p.diverted == 1
        assert out.endswith(second + meta)               # not armed for: untouched
        diverted = out[:len(out) - len(second + meta)]
        (size,) = struct.unpack_from(">i", diverted)
        assert size == len(diverted) - 4
        header, body = decode_request_header(diverted[4:])
        assert (header.correlation_id, header.client_id) == (1, "cli")
        req = ProduceRequest.decode(body, version)
        original = ProduceRequest.decode(decode_request_header(first[4:])[1], version)
        assert [pd.index for pd in req.topic_data[0].partition_data] == [1_000_000, 1_000_001]
        assert [bytes(pd.records) for pd in req.topic_data[0].partition_data] == [
            bytes(pd.records) for pd in original.topic_data[0].partition_data]
        assert list(pending) == [1]
        # The broker's answers: the diverted partitions, then the second request's.
        down = (_produce_response_frame(1, version, (1_000_000, 1_000_001))
                + _produce_response_frame(2, version, (0, 1)))
        out = b"".join(rewriter.feed(down[i:i + step]) for i in range(0, len(down), step))
        second_answer = _produce_response_frame(2, version, (0, 1))
        assert out.endswith(second_answer)
        answer = out[:len(out) - len(second_answer)]
        cid, body = decode_response_header(answer[4:], 0, version)
        resp = ProduceResponse.decode(body, version)
        assert cid == 1 and p.injected == 1
        assert [(pr.index, pr.error_code, pr.base_offset)
                for pr in resp.responses[0].partition_responses] == [(0, 59, -1), (1, 59, -1)]


@pytest.mark.parametrize("step", [1, 7, 10_000])
def test_fail_requests_when_chooses_requests_by_their_body(step):
    """A fault with ``when`` is for the requests it accepts only (here: the ones for
    topic "b"); the others pass byte for byte and leave it armed, and a fault without
    ``when`` armed before it still takes the first request, whatever its body."""
    from kafka_client._testing.proxy import _RequestScanner
    from kafka_proto.messages import ApiKey

    with FaultProxy("127.0.0.1", 9092, follow_frames=True) as p:
        p.fail_requests(ApiKey.PRODUCE, 47, divert=False)        # the first request
        seen = []

        def topic_b(request):
            seen.append(request.topic_data[0].name)
            return request.topic_data[0].name == "b"
        p.fail_requests(ApiKey.PRODUCE, 45, count=2, when=topic_b)
        pending = {}
        scanner = _RequestScanner(pending, False, p._take_fault, p._needs_body,
                                  p._divert_request)
        frames = [_produce_frame(1, 9, topic="a"), _produce_frame(2, 9, topic="a"),
                  _produce_frame(3, 9, topic="b"), _request_frame(3, 9, 4),
                  _produce_frame(5, 9, topic="a")]
        up = b"".join(frames)
        out = b"".join(scanner.feed(up[i:i + step]) for i in range(0, len(up), step))
        assert seen == ["a", "b", "a"]      # the first went to the fault armed before
        assert sorted(pending) == [1, 3]
        assert [pending[c].fault.error_code for c in (1, 3)] == [47, 45]
        assert p.diverted == 1 and p.faults_pending       # one of the two left
        assert out.startswith(frames[0] + frames[1])      # not diverted, not chosen
        assert out.endswith(frames[3] + frames[4])        # not Produce, not chosen
        assert len(out) == len(up) and frames[2] not in out   # diverted
        with pytest.raises(ValueError, match="body"):
            p.fail_requests(ApiKey.FETCH, 1, when=topic_b)


def test_fail_requests_arguments():
    from kafka_proto.messages import ApiKey

    with FaultProxy("127.0.0.1", 9092) as p:
        with pytest.raises(RuntimeError, match="follow_frames"):
            p.fail_requests(ApiKey.PRODUCE, 59)
    with FaultProxy("127.0.0.1", 9092, follow_frames=True) as p:
        with pytest.raises(ValueError, match="diverted"):
            p.fail_requests(ApiKey.END_TXN, 51, divert=True)
        with pytest.raises(ValueError):
            p.fail_requests(ApiKey.PRODUCE, 59, count=0)
        assert not p.faults_pending


def test_fail_requests_against_a_broker(broker, topic_name):
    """Through the proxy to Tansu / noida-db: the armed Produce is refused with the
    injected error and its record never reaches the partition; the next one is
    appended; a Metadata answer (not diverted) carries the injected code."""
    from kafka_client._testing.blocking import BlockingConnection
    from kafka_client._testing.simple import fetch_all
    from kafka_proto.errors import ErrorCode
    from kafka_proto.messages import ApiKey, MetadataRequest, ProduceRequest
    from kafka_proto.records import RecordBatchBuilder

    broker.create_topic(topic_name, partitions=1)

    def produce(conn, value):
        b = RecordBatchBuilder()
        b.append(value)
        resp = conn.request(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000,
                                           topic_data=[ProduceRequest.TopicProduceData(
                                               name=topic_name, partition_data=[
                                                   ProduceRequest.PartitionProduceData(
                                                       index=0, records=b.build())])]))
        (pr,) = resp.responses[0].partition_responses
        return pr.index, pr.error_code

    with FaultProxy("127.0.0.1", broker.port, follow_frames=True) as p:
        with BlockingConnection("127.0.0.1", p.port, timeout=10) as conn:
            p.fail_requests(ApiKey.PRODUCE, ErrorCode.UNKNOWN_PRODUCER_ID)
            assert produce(conn, b"refused") == (0, ErrorCode.UNKNOWN_PRODUCER_ID)
            assert produce(conn, b"appended") == (0, ErrorCode.NONE)
            p.fail_requests(ApiKey.METADATA, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            md = conn.request(MetadataRequest(topics=[
                MetadataRequest.MetadataRequestTopic(name=topic_name)]))
            assert [t.error_code for t in md.topics] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
            assert (p.injected, p.diverted) == (2, 1)
    direct = broker.connect()
    try:
        res = fetch_all(direct, topic_name, 0)
    finally:
        direct.close()
    assert [r.value for b in res.batches for r in b] == [b"appended"]


# -- answers changed field by field (rewrite_responses) ----------------------------------------

@pytest.mark.parametrize("version", [1, 12])
@pytest.mark.parametrize("step", [1, 1000])
def test_rewrite_responses_changes_decoded_fields_after_the_addresses(version, step):
    """The armed Metadata answer reaches ``change`` decoded, its broker addresses already
    pointing at the proxy; what ``change`` sets is what the client reads. Only ``count``
    answers are changed; one whose ``change`` raises passes as it came, the error kept."""
    from kafka_client._testing.proxy import _RequestScanner, _ResponseRewriter
    from kafka_proto.framing import decode_response_header
    from kafka_proto.messages import ApiKey, MetadataResponse

    seen = []

    def change(response, api_version):
        seen.append((api_version, [b.port for b in response.brokers]))
        response.brokers[0].node_id = -7
        if len(seen) == 2:
            raise ValueError("the test's own bug")

    with FaultProxy("127.0.0.1", 9092, rewrite_addresses=True) as p:
        p.rewrite_responses(ApiKey.METADATA, change, count=2)
        pending = {}
        scanner = _RequestScanner(pending, True, p._take_fault, p._needs_body,
                                  lambda frame: frame)
        rewriter = _ResponseRewriter(pending, p._rewrite_response)
        up = b"".join(_request_frame(3, version, cid) for cid in (1, 2, 3))
        assert b"".join(scanner.feed(up[i:i + step]) for i in range(0, len(up), step)) == up
        assert not p.faults_pending
        down = b"".join(_metadata_response_frame(cid, version, 9092) for cid in (1, 2, 3))
        out = b"".join(rewriter.feed(down[i:i + step]) for i in range(0, len(down), step))
        answers = []
        while out:
            (size,) = struct.unpack_from(">i", out)
            _cid, body = decode_response_header(out[4:4 + size], 3, version)
            answers.append([(b.node_id, b.port) for b in
                            MetadataResponse.decode(body, version).brokers])
            out = out[4 + size:]
        assert seen == [(version, [p.port, 1])] * 2
        assert answers == [[(-7, p.port), (2, 1)],          # changed
                           [(1, 9092), (2, 1)],             # change raised: as it came
                           [(1, p.port), (2, 1)]]           # not armed: addresses only
        assert [str(e) for e in p.rewrite_errors] == ["the test's own bug"]
        assert p.injected == 1


def test_rewrite_responses_every_answer_until_cleared_and_arguments():
    from kafka_proto.messages import ApiKey

    with FaultProxy("127.0.0.1", 9092) as p:
        with pytest.raises(RuntimeError, match="follow_frames"):
            p.rewrite_responses(ApiKey.FETCH, lambda r, v: None)
    with FaultProxy("127.0.0.1", 9092, follow_frames=True) as p:
        with pytest.raises(ValueError):
            p.rewrite_responses(ApiKey.FETCH, lambda r, v: None, count=0)
        with pytest.raises(TypeError):
            p.rewrite_responses(ApiKey.FETCH, None)
        p.rewrite_responses(ApiKey.FETCH, lambda r, v: None, count=None)
        for _ in range(3):
            assert p._take_fault(ApiKey.FETCH, None) is not None
        assert p.faults_pending
        p.clear_faults()
        assert not p.faults_pending and p._take_fault(ApiKey.FETCH, None) is None


def test_rewrite_responses_against_a_broker(broker, topic_name):
    """Through the proxy to Tansu / noida-db: the ListOffsets answer the client reads
    carries the value ``change`` set, the next one the broker's own."""
    from kafka_client._testing.blocking import BlockingConnection
    from kafka_proto.messages import ApiKey, ListOffsetsRequest

    broker.create_topic(topic_name, partitions=1)

    def set_offset(response, version):
        response.topics[0].partitions[0].offset = -5

    request = ListOffsetsRequest(replica_id=-1, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic_name, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    with FaultProxy("127.0.0.1", broker.port, follow_frames=True) as p:
        with BlockingConnection("127.0.0.1", p.port, timeout=10) as conn:
            p.rewrite_responses(ApiKey.LIST_OFFSETS, set_offset)
            assert conn.request(request).topics[0].partitions[0].offset == -5
            assert conn.request(request).topics[0].partitions[0].offset == 0
    assert p.injected == 1 and not p.rewrite_errors
