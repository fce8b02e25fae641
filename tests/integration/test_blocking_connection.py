"""BlockingConnection: error paths against a scripted fake broker on 127.0.0.1, and
pipelining against a real one."""
from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from kafka_client._testing.blocking import (
    BlockingConnection,
    BrokerConnectionError,
    ConnectionClosedError,
    RequestTimeoutError,
)
from kafka_client._testing import simple
from kafka_client._testing.brokers import free_port
from kafka_proto.framing import FrameParser
from kafka_proto.messages import ApiVersionsResponse, MetadataRequest


class FakeBroker:
    """Accepts one connection and runs ``script(conn, requests)`` on it in a thread;
    ``requests`` yields ``(api_key, api_version, correlation_id, body)`` per request."""

    def __init__(self, script):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(1)
        self.port = self.server.getsockname()[1]
        self.seen = []
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(script,), daemon=True)
        self.thread.start()

    def _requests(self, conn):
        parser = FrameParser()
        while True:
            data = conn.recv(65536)
            if not data:
                return
            for frame in parser.feed(data):
                key, ver, cid = struct.unpack_from(">hhi", frame)
                self.seen.append((key, ver))
                yield key, ver, cid, bytes(frame)

    def _run(self, script):
        try:
            conn, _ = self.server.accept()
            with conn:
                script(conn, self._requests(conn))
        except Exception as exc:  # surfaced by close()
            self.error = exc

    def close(self):
        self.server.close()
        self.thread.join(5)
        if self.error:
            raise self.error


def respond(conn, cid, body: bytes):
    # response header v0 (what ApiVersions always uses)
    conn.sendall(struct.pack(">ii", len(body) + 4, cid) + body)


def api_versions_body(version, error_code, ranges):
    return ApiVersionsResponse(
        error_code=error_code,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                  for k, (lo, hi) in ranges.items()]).encode(version)


def test_connect_refused():
    with pytest.raises(BrokerConnectionError, match="cannot connect"):
        BlockingConnection("127.0.0.1", free_port(), timeout=2)


def test_unsupported_version_answer_makes_it_retry_lower():
    ranges = {18: (0, 2), 3: (0, 5)}

    def script(conn, requests):
        key, ver, cid, _ = next(requests)
        assert (key, ver) == (18, 4)
        # the v0-encoded error answer, announcing ApiVersions 0-2
        respond(conn, cid, api_versions_body(0, 35, {18: (0, 2)}))
        key, ver, cid, _ = next(requests)
        assert (key, ver) == (18, 2)
        respond(conn, cid, api_versions_body(2, 0, ranges))
        time.sleep(0.2)

    fake = FakeBroker(script)
    with BlockingConnection("127.0.0.1", fake.port, timeout=5) as c:
        assert c.api_versions_version == 2
        assert c.broker_versions == ranges
        assert c.versions[3] == 5 and c.versions[18] == 2
    fake.close()
    assert fake.seen == [(18, 4), (18, 2)]


def test_unsupported_version_without_range_retries_v0():
    def script(conn, requests):
        _, _, cid, _ = next(requests)
        respond(conn, cid, api_versions_body(0, 35, {}))
        _, ver, cid, _ = next(requests)
        assert ver == 0
        respond(conn, cid, api_versions_body(0, 0, {18: (0, 0)}))
        time.sleep(0.2)

    fake = FakeBroker(script)
    with BlockingConnection("127.0.0.1", fake.port, timeout=5) as c:
        assert c.api_versions_version == 0
    fake.close()
    assert fake.seen == [(18, 4), (18, 0)]


def test_answer_beyond_advertised_range_is_asked_again():
    """A broker that answers a version it does not know with error 0 (Tansu 0.6 does)
    is asked again at the highest version it advertises."""
    def script(conn, requests):
        _, ver, cid, _ = next(requests)
        assert ver == 4
        respond(conn, cid, api_versions_body(3, 0, {18: (0, 3)}))
        _, ver, cid, _ = next(requests)
        assert ver == 3
        respond(conn, cid, api_versions_body(3, 0, {18: (0, 3), 1: (4, 12)}))
        time.sleep(0.2)

    fake = FakeBroker(script)
    with BlockingConnection("127.0.0.1", fake.port, timeout=5) as c:
        assert c.api_versions_version == 3
        assert c.broker_versions == {18: (0, 3), 1: (4, 12)}
    fake.close()


def test_undecodable_answer_falls_back_to_v0():
    def script(conn, requests):
        _, ver, cid, _ = next(requests)
        assert ver == 4
        respond(conn, cid, b"\x00\x00\xff")  # not a valid v4 body
        _, ver, cid, _ = next(requests)
        assert ver == 0
        respond(conn, cid, api_versions_body(0, 0, {18: (0, 0)}))
        time.sleep(0.2)

    fake = FakeBroker(script)
    with BlockingConnection("127.0.0.1", fake.port, timeout=5) as c:
        assert c.api_versions_version == 0
    fake.close()


def test_timeout_when_broker_does_not_answer():
    def script(conn, requests):
        next(requests)
        time.sleep(0.8)

    fake = FakeBroker(script)
    t0 = time.monotonic()
    with pytest.raises(RequestTimeoutError):
        BlockingConnection("127.0.0.1", fake.port, timeout=0.3)
    assert 0.25 < time.monotonic() - t0 < 0.75
    fake.close()


def test_closed_by_broker_mid_response():
    def script(conn, requests):
        _, _, cid, _ = next(requests)
        conn.sendall(struct.pack(">ii", 100, cid) + b"\x00\x00")  # 6 of 104 bytes, then close

    fake = FakeBroker(script)
    with pytest.raises(ConnectionClosedError, match="closed the connection"):
        BlockingConnection("127.0.0.1", fake.port, timeout=5)
    fake.close()


def test_wrong_correlation_id_closes_connection():
    from kafka_proto.errors import CorrelationIdError

    def script(conn, requests):
        _, _, cid, _ = next(requests)
        respond(conn, cid + 1000, api_versions_body(0, 0, {18: (0, 0)}))
        time.sleep(0.2)

    fake = FakeBroker(script)
    with pytest.raises(CorrelationIdError):
        BlockingConnection("127.0.0.1", fake.port, timeout=5)
    fake.close()


def test_oversized_response_is_refused():
    from kafka_proto.errors import InvalidLengthError

    def script(conn, requests):
        _, _, cid, _ = next(requests)
        conn.sendall(struct.pack(">ii", 10_000_000, cid))
        time.sleep(0.2)

    fake = FakeBroker(script)
    with pytest.raises(InvalidLengthError):
        BlockingConnection("127.0.0.1", fake.port, timeout=5, max_frame_size=1_000_000)
    fake.close()


@pytest.mark.integration
def test_closed_connection_refuses_requests(broker):
    c = BlockingConnection(broker.host, broker.port)
    c.close()
    assert c.closed
    with pytest.raises(ConnectionClosedError):
        c.request(MetadataRequest(topics=None))


@pytest.mark.integration
def test_pipelined_requests_come_back_in_order(broker, topic_name):
    broker.create_topic(topic_name)
    with BlockingConnection(broker.host, broker.port) as c:
        ids = [c.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name=topic_name)])) for _ in range(5)]
        assert c.in_flight == 5
        got = [c.receive() for _ in range(5)]
        assert [cid for cid, _ in got] == ids
        assert all(r.topics[0].name == topic_name for _, r in got)
        assert c.in_flight == 0


@pytest.mark.integration
def test_produce_acks_0_then_more_requests(broker, topic_name):
    """Kafka sends no answer to acks=0; Tansu and noida-db do. Either way the next
    request must get its own response (the stray answer is dropped)."""
    from kafka_proto.records import RecordBatchBuilder

    broker.create_topic(topic_name)
    with BlockingConnection(broker.host, broker.port) as c:
        b = RecordBatchBuilder()
        b.append(b"fire-and-forget")
        assert simple.produce(c, topic_name, 0, b.build(), acks=0) is None
        assert c.in_flight == 0
        # the next request's response is not confused with anything
        deadline = time.monotonic() + 5
        while True:
            result = simple.fetch_all(c, topic_name)
            if result.high_watermark == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert [r.value for b in result.batches for r in b] == [b"fire-and-forget"]


@pytest.mark.integration
def test_broker_restart_closes_connection_and_data_survives(fresh_noida_broker, topic_name):
    from kafka_proto.records import RecordBatchBuilder

    b = fresh_noida_broker
    b.create_topic(topic_name)
    c = b.connect(timeout=5)
    builder = RecordBatchBuilder()
    for i in range(10):
        builder.append(b"persisted-%d" % i)  # timestamp now: survives noida's retention
    simple.produce(c, topic_name, 0, builder.build())
    b.stop()
    with pytest.raises(ConnectionClosedError):
        c.request(MetadataRequest(topics=None))
    assert c.closed
    b.start()
    with b.connect(timeout=5) as c2:
        result = simple.fetch_all(c2, topic_name)
        assert [r.value for bt in result.batches for r in bt] == \
            [b"persisted-%d" % i for i in range(10)]
