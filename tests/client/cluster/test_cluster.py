"""Cluster connection bookkeeping without a broker (the connections are never used)."""
from __future__ import annotations

import time

from kafka_client._cluster.calls import ANY_BROKER, Call, CallRunner
from kafka_client._cluster.cluster import COORDINATOR_KEY_BASE, Cluster
from kafka_client._common import make_config
from kafka_client._net.connection import CONNECTING, DISCONNECTED, READY
from kafka_client.errors import KafkaError, client_error
from kafka_proto.messages import ApiKey


class FakeIO:
    def add_tick(self, fn):
        pass

    def remove_tick(self, fn):
        pass

    def register(self, sock, events, handler):
        pass

    def modify(self, sock, events, handler):
        pass

    def unregister(self, sock):
        pass

    def wake(self):
        pass


def make_cluster():
    # Port 1 of the loopback address: nothing listens, connects just fail later.
    cluster = Cluster(make_config({"bootstrap.servers": "127.0.0.1:1"}, {}, "consumer"),
                      FakeIO())
    cluster.metadata.brokers[7] = ("127.0.0.1", 1, None)
    return cluster


def test_the_group_coordinator_gets_a_connection_of_its_own():
    """Brokers answer one request per connection at a time, in order: a heartbeat or a
    commit on the connection a Fetch is long-polling on waits up to fetch.wait.max.ms
    (on Tansu a synchronous commit at the end of the log took 360-500 ms)."""
    cluster = make_cluster()
    broker = cluster.connection(7)
    coord = cluster.coordinator_connection(7)
    assert coord is not None and coord is not broker
    assert (coord.host, coord.port) == (broker.host, broker.port)
    assert cluster.conns[COORDINATOR_KEY_BASE - 7] is coord
    assert cluster.coordinator_connection(7) is coord       # kept, not one per call
    assert cluster.connection(7) is broker
    assert cluster.coordinator_connection(8) is None          # unknown broker
    for c in list(cluster.conns.values()):
        c.close(None)


def test_the_fetch_lanes_are_connections_of_their_own_that_name_their_broker():
    cluster = make_cluster()
    broker = cluster.connection(7)
    coord = cluster.coordinator_connection(7)
    lanes = [cluster.fetch_lane_connection(7, lane) for lane in (0, 1)]
    assert len({id(c) for c in [broker, coord, *lanes]}) == 4
    assert [cluster.fetch_lane_connection(7, lane) for lane in (0, 1)] == lanes
    assert [Cluster.broker_id(c) for c in (broker, coord, *lanes)] == [7, 7, 7, 7]
    names = sorted(cluster.broker_stats())
    assert names == ["127.0.0.1:1/7", "127.0.0.1:1/7/coordinator", "127.0.0.1:1/7/fetch",
                     "127.0.0.1:1/7/fetch2"]
    for lane in lanes:
        lane.close(None)
        lane.state = "READY"       # pretend: only the lanes are up
    assert cluster._ready_conn() is None          # never lent out for other requests
    for c in list(cluster.conns.values()):
        c.close(None)


def test_metadata_never_goes_to_the_coordinator_connection():
    """A JoinGroup can hold the coordinator connection for seconds."""
    cluster = make_cluster()
    coord = cluster.coordinator_connection(7)
    coord.close(None)
    coord.state = "READY"      # pretend: only the coordinator connection is up
    assert cluster._ready_conn() is None
    broker = cluster.connection(7)
    broker.state = "READY"
    assert cluster._ready_conn() is broker


def test_a_moved_coordinator_gets_a_new_connection():
    cluster = make_cluster()
    old = cluster.coordinator_connection(7)
    cluster.metadata.brokers[7] = ("127.0.0.1", 2, None)
    new = cluster.coordinator_connection(7)
    assert new is not old and new.port == 2 and old.sock is None
    for c in list(cluster.conns.values()):
        c.close(None)


def test_a_broker_restarted_at_another_address_is_connected_there():
    """The Metadata answers give a broker a new address (restarted elsewhere): its
    connection, down after failing at the old one, goes to the new one, at once (it kept
    trying the old address, at its reconnect backoff, for ever). One still connecting
    keeps its address until that attempt ends."""
    cluster = make_cluster()
    conn = cluster.ensure_connected(7)
    assert conn.state != DISCONNECTED            # connecting to port 1
    cluster.metadata.brokers[7] = ("127.0.0.1", 2, None)
    assert cluster.connection(7) is conn and conn.port == 1
    conn.close(client_error(KafkaError._TRANSPORT, "refused"))
    assert conn.next_attempt > time.monotonic()
    assert cluster.ensure_connected(7) is conn
    assert conn.port == 2 and conn.state != DISCONNECTED     # connecting there now
    for c in list(cluster.conns.values()):
        c.close(None)


def test_a_request_waiting_for_a_connection_goes_out_when_one_is_up(broker, monkeypatch):
    """A blocking call made before any connection is up is sent as soon as one is, not at
    the next look of the fallback poll (which, every 20 ms, made every new client's first
    list_topics() or admin call take 20 ms). Stretched to a minute here, only the
    connection becoming ready can send these requests within their 10 s."""
    from kafka_client import Consumer
    from kafka_client._cluster import calls, cluster
    from kafka_client.admin import AdminClient

    monkeypatch.setattr(cluster, "CONNECT_POLL_S", 60.0)
    monkeypatch.setattr(calls, "CONNECT_POLL_S", 60.0)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap})
    try:
        started = time.monotonic()
        md = consumer.list_topics(timeout=10)
        assert md.brokers and time.monotonic() - started < 5
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    started = time.monotonic()
    described = admin.describe_cluster(request_timeout=10).result(10)
    assert described.nodes and time.monotonic() - started < 5


class VersionedConn:
    """A ready connection whose broker tops Metadata out at ``version``; keeps what is
    sent."""

    def __init__(self, version):
        self.version = version
        self.sent = []
        self.host, self.port = "127.0.0.1", 1

    ready = True

    def version_for(self, key):
        return self.version

    def send(self, req, callback, *, version=None, timeout=None):
        self.sent.append((req, callback, version))


def test_a_consumers_metadata_request_encodes_for_brokers_before_v4():
    """Metadata v0-v3 has no allow_auto_topic_creation (the broker decides): a consumer's
    "do not create" must not make the request impossible to encode (it was, and the
    consumer retried forever, never learning a leader, and said nothing)."""
    cluster = make_cluster()
    cluster.metadata.want(["t"])
    for version, expected in ((3, True), (4, False), (12, False)):
        conn = VersionedConn(version)
        assert cluster._send_metadata(time.monotonic(), conn=conn)
        (req, _, sent_version), = conn.sent
        assert sent_version == version
        req.encode(version)                      # raised for versions below 4
        assert req.allow_auto_topic_creation is expected


def test_a_broker_without_metadata_is_reported_once():
    """A broker (or gateway) with no Metadata version this client speaks: said once
    through error_cb and the log (the client retried forever without a word)."""
    from kafka_client.errors import KafkaError

    cluster = make_cluster()
    conn = VersionedConn(None)
    assert not cluster._send_metadata(time.monotonic(), conn=conn)
    assert not cluster._send_metadata(time.monotonic(), conn=conn)
    (err,) = cluster.take_errors()
    assert err.code() == KafkaError._UNSUPPORTED_FEATURE and "Metadata" in err.str()


def expire_after_a_refused_login(state: str) -> KafkaError:
    """A DescribeCluster call's failure at its deadline, after the one connection it had
    was refused at login and then went to ``state``."""
    cluster = make_cluster()
    runner = CallRunner(cluster)
    failures = []
    call = Call("DescribeCluster", ApiKey.DESCRIBE_CLUSTER, ANY_BROKER,
                deadline=time.monotonic(), build=lambda version: None,
                on_response=lambda resp, conn: None, on_failure=failures.append)
    (conn,) = cluster.bootstrap
    cluster._on_state(conn, DISCONNECTED, client_error(
        KafkaError._AUTHENTICATION,
        "SASL SCRAM-SHA-256 authentication failed: invalid credentials"))
    conn.state = state
    runner._expire(call)
    (error,) = failures
    return error


def test_a_call_ending_while_a_refused_login_is_tried_again_names_the_refusal():
    """Every connection attempt during the call was refused at login, and at its
    deadline a new attempt happened to be under way (the client keeps trying, with
    backoff): the call ends with the refusal (_AUTHENTICATION, the broker's words), not
    "timed out". Seen intermittently in the SASL test of an admin call with a wrong
    password: the answer depended on whether the deadline fell between two attempts."""
    error = expire_after_a_refused_login(CONNECTING)
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert "invalid credentials" in error.str() and "DescribeCluster" in error.str()


def test_a_call_ending_with_a_connection_up_is_not_called_refused():
    """A refusal earlier in the call says nothing once a connection is up: timed out."""
    error = expire_after_a_refused_login(READY)
    assert error.code() == KafkaError._TIMED_OUT, error
