"""Fetcher.tick() without a broker: fake cluster, metadata and connections."""
from __future__ import annotations

import time

from kafka_client._common import make_config
from kafka_client.consumer.fetcher import Fetcher, PartitionState
from kafka_client.errors import KafkaError, client_error


class FakeMetadata:
    def __init__(self, leaders):
        self.leaders = leaders   # {(topic, partition): node}
        self.requested = []

    def leader(self, topic, partition):
        return self.leaders.get((topic, partition), -1)

    def topic(self, name):
        return None

    def request(self, topics, fast=False, now=None):
        self.requested.append(list(topics))


class FakeConn:
    def __init__(self, node_id):
        self.node_id = node_id
        self.state = "READY"
        self.next_attempt = 0.0
        self.versions = {1: 12}
        self.sent = []
        self.fail_sends = False

        class Settings:
            request_timeout = 1.0
        self.settings = Settings()

    @property
    def ready(self):
        return self.state == "READY"

    def send(self, req, callback, **kw):
        if self.fail_sends:
            # A write error on a socket the peer just closed: the connection closes and
            # fails the request before send() returns.
            self.state = "DISCONNECTED"
            callback(None, client_error(KafkaError._TRANSPORT, "send failed: broken pipe"))
            return
        self.sent.append(req)


class FakeCluster:
    def __init__(self, conns, leaders):
        self.conns = conns
        self.metadata = FakeMetadata(leaders)
        self.on_metadata = []
        self.on_broker_state = []

    def ensure_connected(self, node):
        return self.conns.get(node)

    def want_topics(self, topics):
        pass


class FakeIO:
    def __init__(self):
        self.wakes = 0

    def add_tick(self, fn):
        pass

    def remove_tick(self, fn):
        pass

    def wake(self):
        self.wakes += 1


def setup(**conf):
    config = make_config({"bootstrap.servers": "127.0.0.1:1", "fetch.error.backoff.ms": 20,
                          **conf}, {}, "consumer")
    conn = FakeConn(1)
    cluster = FakeCluster({1: conn}, {("t", 0): 1})
    io = FakeIO()
    fetcher = Fetcher(config, cluster, io, lambda item: None)
    part = PartitionState("t", 0)
    part.seek(0)
    fetcher.parts[part.key] = part
    return fetcher, conn, part


def test_a_fetch_is_sent_to_the_leader():
    fetcher, conn, part = setup()
    fetcher.tick(time.monotonic())
    assert len(conn.sent) == 1 and part.fetching


def test_leader_in_reconnect_backoff_wakes_the_loop_when_the_backoff_ends():
    """A connection closed under us (fault proxy: refused reconnects) waits out its
    reconnect backoff with no request queued on it, so nothing else wakes the I/O thread
    when it ends: tick() must say when, or the loop sleeps its safety-net second (seen
    as 1 s without fetching after each refused reconnect)."""
    fetcher, conn, part = setup()
    now = time.monotonic()
    conn.state, conn.next_attempt = "DISCONNECTED", now + 0.05
    nxt = fetcher.tick(now)
    assert not conn.sent and not part.fetching
    assert nxt is not None and now < nxt <= now + 0.05


def test_a_fetch_that_fails_at_once_still_wakes_the_loop_after_the_error_backoff():
    """A write error inside tick() fails the Fetch before tick() returns: the partition
    is in fetch.error.backoff.ms now, and the loop must wake when that ends."""
    fetcher, conn, part = setup()
    conn.fail_sends = True
    now = time.monotonic()
    nxt = fetcher.tick(now)
    assert not part.fetching and part.backoff_until > now
    assert nxt is not None and nxt <= part.backoff_until


def test_read_committed_offset_lookups_encode_for_a_broker_older_than_transactions():
    """ListOffsets v0-v1 have no isolation level (it came with transactions, v2): a
    read_committed consumer's lookup at such a broker is sent without it (there is no
    transactional data to hide) instead of failing to encode; from v2 on it carries it."""
    from kafka_proto.messages import ApiKey

    for version, want in ((1, 0), (2, 1), (7, 1)):
        fetcher, conn, _ = setup(**{"isolation.level": "read_committed"})
        conn.versions = {ApiKey.LIST_OFFSETS: version}
        fetcher.list_offsets({("t", 0): -1}, lambda res: None, timeout=1.0, isolation=1)
        (req,) = conn.sent
        assert req.isolation_level == want
        assert req.encode(version)


def test_an_offset_lookup_answer_for_partitions_not_asked_is_ignored():
    """A broker answering ListOffsets for a partition it was not asked about (another
    topic, or one the consumer asked another leader) must not place a result there: the
    consumer's retry bookkeeping only knows the partitions it asked (it failed with a
    KeyError on such an answer carrying a retriable error)."""
    from kafka_proto.messages import ApiKey, ListOffsetsResponse

    fetcher, conn, _ = setup()
    conn.versions = {ApiKey.LIST_OFFSETS: 7}
    got = []
    callbacks = []
    conn.send = lambda req, cb, **kw: callbacks.append(cb)
    fetcher.list_offsets({("t", 0): -1}, got.append, timeout=1.0)
    R = ListOffsetsResponse
    callbacks[0](R(topics=[
        R.ListOffsetsTopicResponse(name="t", partitions=[
            R.ListOffsetsPartitionResponse(partition_index=0, error_code=0, timestamp=-1,
                                           offset=42, leader_epoch=0),
            R.ListOffsetsPartitionResponse(partition_index=5, error_code=6, timestamp=-1,
                                           offset=-1, leader_epoch=0)]),
        R.ListOffsetsTopicResponse(name="other", partitions=[
            R.ListOffsetsPartitionResponse(partition_index=0, error_code=0, timestamp=-1,
                                           offset=7, leader_epoch=0)])]), None)
    (results,) = got
    assert list(results) == [("t", 0)] and results[("t", 0)].offset == 42
