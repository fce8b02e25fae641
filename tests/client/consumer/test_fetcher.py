"""Fetcher.tick() without a broker: fake cluster, metadata and connections."""
from __future__ import annotations

import time

import pytest

from kafka_client._cluster.metadata import TopicInfo
from kafka_client._common import make_config
from kafka_client.consumer.fetcher import Fetcher, PartitionState
from kafka_client.errors import KafkaError, client_error


class FakeMetadata:
    def __init__(self, leaders):
        self.leaders = leaders   # {(topic, partition): node}
        self.epochs = {}         # {(topic, partition): leader epoch}
        self.brokers = {1: ("127.0.0.1", 1, "a"), 2: ("127.0.0.1", 2, "b")}
        self.requested = []
        self.topic_ids = {}      # {topic: uuid}
        self.version = 0         # bumped by every update

    def set_topic_id(self, topic, tid):
        self.topic_ids[topic] = tid
        self.version += 1

    def leader(self, topic, partition):
        return self.leaders.get((topic, partition), -1)

    def leader_epoch(self, topic, partition):
        return self.epochs.get((topic, partition), -1)

    def mark_stale(self, topic, now=None):
        self.requested.append([topic])

    def topic(self, name):
        tid = self.topic_ids.get(name)
        if tid is None:
            return None
        return TopicInfo(name, 0, [1], [0], [0], time.monotonic(), tid)

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
        for_version = kw.get("for_version")
        version = self.versions.get(req.API_KEY)
        if for_version is not None and version is not None:   # as the connection does
            for_version(req, version)
        self.sent.append(req)


class FakeCluster:
    def __init__(self, conns, leaders):
        self.conns = conns
        self.metadata = FakeMetadata(leaders)
        self.on_metadata = []
        self.on_broker_state = []

    def ensure_connected(self, node):
        return self.conns.get(node)

    def fetch_lane_connection(self, node, lane):
        if node not in self.conns:
            return None
        if lane == 0:
            return self.conns[node]
        lanes = self.__dict__.setdefault("lanes", {})
        if node not in lanes:
            lanes[node] = FakeConn(node)
            lanes[node].versions = self.conns[node].versions
        return lanes[node]

    def want_topics(self, topics):
        pass

    def report_missing_api(self, conn, api):
        self.__dict__.setdefault("missing", []).append((conn.node_id, api))


class FakeIO:
    def __init__(self):
        self.wakes = 0

    def add_tick(self, fn):
        pass

    def remove_tick(self, fn):
        pass

    def wake(self):
        self.wakes += 1


def setup(delivered=None, **conf):
    config = make_config({"bootstrap.servers": "127.0.0.1:1", "fetch.error.backoff.ms": 20,
                          **conf}, {}, "consumer")
    conn = FakeConn(1)
    cluster = FakeCluster({1: conn}, {("t", 0): 1})
    io = FakeIO()
    fetcher = Fetcher(config, cluster, io,
                      delivered.append if delivered is not None else lambda item: None)
    part = PartitionState("t", 0)
    part.seek(0)
    fetcher.parts[part.key] = part
    return fetcher, conn, part


def test_a_fetch_is_sent_to_the_leader():
    fetcher, conn, part = setup()
    fetcher.tick(time.monotonic())
    assert len(conn.sent) == 1 and part.fetching == part.version


def test_leader_in_reconnect_backoff_wakes_the_loop_when_the_backoff_ends():
    """A connection closed under us (fault proxy: refused reconnects) waits out its
    reconnect backoff with no request queued on it, so nothing else wakes the I/O thread
    when it ends: tick() must say when, or the loop sleeps its safety-net second (seen
    as 1 s without fetching after each refused reconnect)."""
    fetcher, conn, part = setup()
    now = time.monotonic()
    conn.state, conn.next_attempt = "DISCONNECTED", now + 0.05
    nxt = fetcher.tick(now)
    assert not conn.sent and part.fetching < 0
    assert nxt is not None and now < nxt <= now + 0.05


def test_a_fetch_that_fails_at_once_still_wakes_the_loop_after_the_error_backoff():
    """A write error inside tick() fails the Fetch before tick() returns. The first loss
    of the connection leaves the partition to the reconnect backoff and wakes the loop to
    wait for it; lost again before any answer, the partition is in fetch.error.backoff.ms,
    and the loop must wake when that ends."""
    fetcher, conn, part = setup()
    conn.fail_sends = True
    now = time.monotonic()
    fetcher.tick(now)
    assert part.fetching < 0 and part.backoff_until <= now and fetcher.io.wakes
    conn.state = "READY"       # reconnected, and lost again at once
    now = time.monotonic()
    nxt = fetcher.tick(now)
    assert part.fetching < 0 and part.backoff_until > now
    assert nxt is not None and nxt <= part.backoff_until


def test_a_fetch_cut_off_by_a_lost_connection_is_not_held_by_the_error_backoff():
    """A Fetch lost with its connection is sent again once the connection is back, not
    after fetch.error.backoff.ms too (as librdkafka and the Java client); lost again
    before any answer it waits the backoff; after an answer, a loss is again the first."""
    from kafka_proto.messages import ApiKey
    fetcher, conn, part = setup(**{"fetch.error.backoff.ms": 60000})
    conn.versions = {ApiKey.FETCH: 12}
    sent = []
    conn.send = lambda req, cb, **kw: sent.append(cb)
    lost = client_error(KafkaError._TRANSPORT, "connection lost")

    def fetch_now():
        fetcher.kick()        # an empty answer at once would hold the next Fetch back
        fetcher.tick(time.monotonic())
        return len(sent)

    assert fetch_now() == 1
    sent[-1](None, lost)
    assert part.backoff_until <= time.monotonic()
    assert fetch_now() == 2                          # at once
    sent[-1](None, lost)                             # lost again, no answer between
    assert part.backoff_until > time.monotonic() + 50
    part.backoff_until = 0.0
    assert fetch_now() == 3
    sent[-1](_fetch_answer(), None)
    assert fetch_now() == 4
    sent[-1](None, lost)                             # the first loss since an answer
    assert fetch_now() == 5


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
    # Sent before the connection knows the version: the field is set when it goes out
    # (it was set for read_committed then, and failed to encode at v1).
    fetcher, conn, _ = setup(**{"isolation.level": "read_committed"})
    conn.versions = {}
    fetcher.list_offsets({("t", 0): -1}, lambda res: None, timeout=1.0, isolation=1)
    (req,) = conn.sent
    from kafka_client.consumer.fetcher import _set_isolation
    _set_isolation(1, req, 1)
    assert req.isolation_level == 0 and req.encode(1)


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


# ------------------------------------------------------------------ KIP-320 validation
def _epoch_answer(end_epoch, end_offset, error=0):
    from kafka_proto.messages import OffsetForLeaderEpochResponse as R
    return R(throttle_time_ms=0, topics=[R.OffsetForLeaderTopicResult(topic="t", partitions=[
        R.EpochEndOffset(error_code=error, partition=0, leader_epoch=end_epoch,
                         end_offset=end_offset)])])


def validating(reset="earliest", fetched_epoch=3, position=100):
    """A partition read up to ``position`` under leader epoch ``fetched_epoch``, whose
    leader (epoch 3) became another (epoch 5); the fetcher's OffsetForLeaderEpoch is
    captured with its callback."""
    from kafka_proto.messages import ApiKey

    delivered = []
    fetcher, conn, part = setup(delivered, **{"auto.offset.reset": reset})
    md = fetcher.cluster.metadata
    md.epochs[("t", 0)] = 3
    conn.versions = {ApiKey.FETCH: 12, ApiKey.OFFSET_FOR_LEADER_EPOCH: 4}
    fetcher.tick(time.monotonic())                  # fetched under epoch 3
    assert len(conn.sent) == 1 and part.validated_epoch == 3
    part.fetching = -1                              # that Fetch was answered
    fetcher._busy.clear()
    part.fetch_pos = part.app_pos = position
    part.fetch_epoch = fetched_epoch
    part.committed = position
    md.epochs[("t", 0)] = 5                         # a new leader
    callbacks = []
    conn.send = lambda req, cb, **kw: (conn.sent.append(req), callbacks.append(cb))
    fetcher.tick(time.monotonic())
    req = conn.sent[-1]
    return fetcher, conn, part, delivered, req, callbacks[-1]


def test_a_new_leader_epoch_makes_the_position_checked_before_the_next_fetch():
    fetcher, conn, part, delivered, req, answer = validating()
    assert type(req).__name__ == "OffsetForLeaderEpochRequest" and part.validating
    (p,) = req.topics[0].partitions
    assert (p.partition, p.current_leader_epoch, p.leader_epoch) == (0, 5, 3)
    fetcher.tick(time.monotonic())                  # no Fetch while it is checked
    assert len(conn.sent) == 2
    answer(_epoch_answer(3, 150), None)             # the log holds the position
    assert not part.validating and part.validated_epoch == 5 and part.fetch_pos == 100
    fetcher.tick(time.monotonic())
    assert type(conn.sent[-1]).__name__ == "FetchRequest" and not delivered


def test_a_truncated_position_moves_back_to_where_the_logs_part():
    fetcher, conn, part, delivered, _req, answer = validating()
    version = part.version
    answer(_epoch_answer(3, 80), None)
    assert (part.fetch_pos, part.app_pos, part.fetch_epoch) == (80, 80, 3)
    assert part.version > version                  # what was queued from the old log goes
    assert part.committed == 80                     # committing 80..100 again is allowed
    (event,) = delivered
    err = event.message.error()
    assert err.code() == KafkaError._LOG_TRUNCATION and event.message.offset() == 80
    assert "offset 100" in err.str() and event.version == part.version
    fetcher.tick(time.monotonic())
    assert type(conn.sent[-1]).__name__ == "FetchRequest"
    assert conn.sent[-1].topics[0].partitions[0].fetch_offset == 80


def test_with_auto_offset_reset_error_a_truncated_partition_stops():
    fetcher, conn, part, delivered, _req, answer = validating(reset="error")
    answer(_epoch_answer(3, 80), None)
    (event,) = delivered
    assert event.message.error().code() == KafkaError._LOG_TRUNCATION
    assert part.fetch_pos == -1 and part.reset is None
    sent = len(conn.sent)
    fetcher.tick(time.monotonic())
    assert len(conn.sent) == sent                   # nothing until the application seeks


def test_a_leader_without_the_positions_epoch_resets_by_the_policy():
    from kafka_client.types import OFFSET_BEGINNING
    fetcher, conn, part, delivered, _req, answer = validating()
    answer(_epoch_answer(-1, -1), None)
    assert part.reset == OFFSET_BEGINNING and part.fetch_epoch == -1 and not delivered


def test_a_failed_check_is_made_again_after_the_backoff():
    fetcher, conn, part, delivered, _req, answer = validating()
    answer(_epoch_answer(-1, -1, error=74), None)   # FENCED_LEADER_EPOCH: stale metadata
    assert not part.validating and part.validated_epoch == 3
    assert part.backoff_until > time.monotonic() and ["t"] in fetcher.cluster.metadata.requested
    part.backoff_until = 0
    fetcher.tick(time.monotonic())
    assert type(conn.sent[-1]).__name__ == "OffsetForLeaderEpochRequest"


def test_an_answer_for_a_position_seeked_meanwhile_is_not_applied():
    fetcher, conn, part, delivered, _req, answer = validating()
    part.seek(10)                                   # the application seeked
    answer(_epoch_answer(3, 80), None)
    assert (part.fetch_pos, part.validated_epoch) == (10, -1) and not delivered


def test_positions_without_an_epoch_or_leaders_without_the_api_are_fetched_unchecked():
    from kafka_proto.messages import ApiKey
    for versions, fetched_epoch in (({ApiKey.FETCH: 12, ApiKey.OFFSET_FOR_LEADER_EPOCH: 4},
                                     -1),
                                    ({ApiKey.FETCH: 12}, 3)):
        fetcher, conn, part = setup()
        md = fetcher.cluster.metadata
        conn.versions = versions
        md.epochs[("t", 0)] = 5
        part.fetch_epoch = fetched_epoch
        fetcher.tick(time.monotonic())
        assert part.validated_epoch == 5
        if not conn.sent:                           # found out at this look: the next
            fetcher.tick(time.monotonic())
        assert [type(r).__name__ for r in conn.sent] == ["FetchRequest"]


def test_a_committed_offset_with_an_epoch_is_checked_before_the_first_fetch():
    from kafka_client.types import OFFSET_STORED
    from kafka_proto.messages import ApiKey
    fetcher, conn, part = setup()
    conn.versions = {ApiKey.FETCH: 12, ApiKey.OFFSET_FOR_LEADER_EPOCH: 4}
    fetcher.cluster.metadata.epochs[("t", 0)] = 5
    part.seek(OFFSET_STORED)
    fetcher.committed_lookup = lambda parts, done: done({("t", 0): (42, 4)})
    fetcher.tick(time.monotonic())                  # resolves the committed offset
    assert (part.fetch_pos, part.fetch_epoch) == (42, 4)
    fetcher.tick(time.monotonic())
    req = conn.sent[-1]
    assert type(req).__name__ == "OffsetForLeaderEpochRequest"
    assert req.topics[0].partitions[0].leader_epoch == 4


# --------------------------------------------------------- KIP-392 read replicas
def _fetch_answer(error=0, replica=-1, hw=100):
    from kafka_proto.messages import FetchResponse as R
    return R(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        R.FetchableTopicResponse(topic="t", partitions=[R.PartitionData(
            partition_index=0, error_code=error, high_watermark=hw, last_stable_offset=hw,
            log_start_offset=0, aborted_transactions=None, preferred_read_replica=replica,
            records=b"")])])


def with_replica(**conf):
    """A rack-b consumer whose leader (broker 1) named broker 2 to fetch from; every
    request captured with its callback."""
    from kafka_proto.messages import ApiKey
    fetcher, leader, part = setup(**{"client.rack": "b", **conf})
    follower = FakeConn(2)
    fetcher.cluster.conns[2] = follower
    sent = []
    for conn in (leader, follower):
        conn.versions = {ApiKey.FETCH: 12}
        conn.send = lambda req, cb, _c=conn, **kw: sent.append((_c.node_id, req, cb))
    fetcher.tick(time.monotonic())
    node, req, answer = sent[-1]
    assert node == 1 and req.rack_id == "b"
    answer(_fetch_answer(replica=2), None)
    assert part.read_replica == 2
    fetcher.tick(time.monotonic())
    assert sent[-1][0] == 2                         # fetched from the replica now
    return fetcher, part, sent


def test_the_replica_the_leader_names_is_fetched_from():
    fetcher, part, sent = with_replica()
    sent[-1][2](_fetch_answer(replica=-1), None)    # the replica: "keep using me"
    fetcher.tick(time.monotonic())
    assert sent[-1][0] == 2 and part.read_replica == 2


def test_an_error_from_the_replica_goes_back_to_the_leader_without_a_reset():
    for code in (1, 6):                             # OFFSET_OUT_OF_RANGE, NOT_LEADER
        fetcher, part, sent = with_replica()
        sent[-1][2](_fetch_answer(error=code), None)
        assert part.read_replica == -1 and part.reset is None and part.fetch_pos == 0
        fetcher.tick(time.monotonic())
        assert sent[-1][0] == 1


def test_a_lost_replica_or_an_old_choice_goes_back_to_the_leader():
    fetcher, part, sent = with_replica()
    sent[-1][2](None, client_error(KafkaError._TRANSPORT, "connection lost"))
    assert part.read_replica == -1
    fetcher, part, sent = with_replica()
    sent[-1][2](_fetch_answer(), None)
    part.read_replica_until = time.monotonic() - 1  # metadata.max.age.ms passed
    fetcher.tick(time.monotonic())
    assert sent[-1][0] == 1 and part.read_replica == -1


def test_without_client_rack_the_fetch_names_no_rack():
    fetcher, conn, part = setup()
    fetcher.tick(time.monotonic())
    assert conn.sent[-1].rack_id == ""


# ------------------------------------------------------------------ the fetch lane
def test_a_partition_seeked_while_a_fetch_waits_is_fetched_on_the_second_lane():
    """Lane 0 holds a Fetch waiting at the broker for new data (up to fetch.wait.max.ms);
    the application seeks: the new position goes out at once on the broker's second
    connection, and the old answer, when it comes, is stale and leaves the new Fetch
    in flight alone (no second Fetch of the same position)."""
    from kafka_proto.messages import ApiKey
    fetcher, conn, part = setup()
    conn.versions = {ApiKey.FETCH: 12}
    callbacks = []
    conn.send = lambda req, cb, **kw: (conn.sent.append(req), callbacks.append(cb))
    fetcher.tick(time.monotonic())
    assert len(conn.sent) == 1 and (1, 0) in fetcher._busy
    part.seek(500)
    fetcher.tick(time.monotonic())
    lane = fetcher.cluster.lanes[1]
    (req,) = lane.sent
    assert req.topics[0].partitions[0].fetch_offset == 500 and (1, 1) in fetcher._busy
    assert part.fetching == part.version
    callbacks[0](_fetch_answer(), None)             # the old Fetch's answer: stale
    assert part.fetching == part.version and part.fetch_pos == 500
    fetcher.tick(time.monotonic())
    assert len(conn.sent) == 1 and len(lane.sent) == 1   # nothing fetched twice


def test_without_a_seek_nothing_goes_on_the_second_lane():
    from kafka_proto.messages import ApiKey
    fetcher, conn, part = setup()
    conn.versions = {ApiKey.FETCH: 12}
    fetcher.tick(time.monotonic())
    fetcher.tick(time.monotonic())
    assert len(conn.sent) == 1 and not getattr(fetcher.cluster, "lanes", None)


def test_a_not_leader_answer_naming_the_new_leader_is_fetched_there_at_once():
    """KIP-951: with the leader learned from the answer there is no fetch error backoff
    (fetch.error.backoff.ms, 500 ms by default, was the whole gap after a leader move)."""
    from kafka_proto.messages import FetchResponse as R
    fetcher, conn, part = setup(**{"fetch.error.backoff.ms": 500})
    learned = []
    md = fetcher.cluster.metadata
    md.learn_leader = lambda t, p, leader, epoch: learned.append((t, p, leader, epoch)) or True
    now = time.monotonic()
    current = R.LeaderIdAndEpoch(leader_id=2, leader_epoch=9)
    fetcher._partition_error(part, 6, now, current)       # NOT_LEADER_OR_FOLLOWER
    assert learned == [("t", 0, 2, 9)] and part.backoff_until <= now
    assert ["t"] in md.requested                          # the metadata is refreshed too
    md.learn_leader = lambda *a: False                    # an answer naming nobody newer
    fetcher._partition_error(part, 6, now, current)
    assert part.backoff_until >= now + 0.5


def test_a_position_from_list_offsets_carries_its_leader_epoch_and_counts_as_checked():
    """The leader's ListOffsets answer (v4+) is a position in its log now: it takes the
    answer's epoch (for a later check, after a leader change) and is not checked again
    under the same leader."""
    from kafka_client.consumer.fetcher import OffsetLookup
    from kafka_client.types import OFFSET_BEGINNING
    from kafka_proto.messages import ApiKey
    fetcher, conn, part = setup()
    conn.versions = {ApiKey.FETCH: 12, ApiKey.OFFSET_FOR_LEADER_EPOCH: 4}
    fetcher.cluster.metadata.epochs[("t", 0)] = 7
    fetcher.list_offsets = lambda want, done, **kw: done(
        {key: OffsetLookup(30, -1, None, 6) for key in want})
    part.seek(OFFSET_BEGINNING)
    fetcher.tick(time.monotonic())                  # resolves the position
    assert (part.fetch_pos, part.fetch_epoch, part.validated_epoch) == (30, 6, 7)
    fetcher.tick(time.monotonic())
    assert [type(r).__name__ for r in conn.sent] == ["FetchRequest"]


# ---------------------------------------------------------- fetch sessions (KIP-227)
def _records(base, count):
    from kafka_proto.records import RecordBatchBuilder
    b = RecordBatchBuilder()
    for i in range(count):
        b.append(b"v%d" % (base + i))
    return b.build(base)


def _session_answer(session_id, parts=(), error=0):
    """A Fetch answer: ``parts`` is [(partition, high watermark, records bytes)]."""
    from kafka_proto.messages import FetchResponse as R
    return R(throttle_time_ms=0, error_code=error, session_id=session_id, responses=[
        R.FetchableTopicResponse(topic="t", partitions=[R.PartitionData(
            partition_index=p, error_code=0, high_watermark=hw, last_stable_offset=hw,
            log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
            records=data) for p, hw, data in parts])] if parts else [])


def in_session(delivered=None, version=12, **conf):
    """Two partitions of "t" led by broker 1; every request captured with its callback.
    Answers without records come at once here, which would hold the next Fetch back
    (Fetcher._node_hold, for brokers that do not wait): each tick() is preceded by a
    kick(), as an assignment or a seek does."""
    from kafka_proto.messages import ApiKey
    fetcher, conn, p0 = setup(delivered, **conf)
    p1 = PartitionState("t", 1)
    p1.seek(0)
    fetcher.parts[p1.key] = p1
    fetcher.cluster.metadata.leaders[("t", 1)] = 1
    conn.versions = {ApiKey.FETCH: version}
    sent = []
    conn.send = lambda req, cb, **kw: sent.append((req, cb))
    return fetcher, p0, p1, sent


def _named(req):
    return sorted((t.topic, p.partition, p.fetch_offset) for t in req.topics
                  for p in t.partitions)


def test_the_first_fetch_opens_a_session_and_the_next_names_only_what_changed():
    delivered = []
    fetcher, p0, p1, sent = in_session(delivered, **{"enable.partition.eof": True})

    fetcher.kick()
    fetcher.tick(time.monotonic())
    req, answer = sent[-1]
    assert (req.session_id, req.session_epoch) == (0, 0)
    assert _named(req) == [("t", 0, 0), ("t", 1, 0)]
    answer(_session_answer(77, [(0, 3, _records(0, 3)), (1, 0, b"")]), None)
    assert (p0.fetch_pos, p1.fetch_pos) == (3, 0)
    fetcher.kick()
    fetcher.tick(time.monotonic())
    req, answer = sent[-1]
    # Partition 1 is unchanged: the broker's session holds it, the request leaves it out.
    assert (req.session_id, req.session_epoch) == (77, 1)
    assert _named(req) == [("t", 0, 3)] and req.forgotten_topics_data == []
    before = len(delivered)
    answer(_session_answer(77, [(1, 2, _records(0, 2))]), None)
    got = [(type(i).__name__, i.part.partition) for i in delivered[before:]]
    assert got == [("Chunk", 1), ("Event", 1)]      # partition 1's records, then its EOF
    assert p0.fetching == -1 and p0.backoff_until == 0.0 and p0.fetch_pos == 3
    with fetcher.lock:
        p0.seek(3)           # where it is: re-arms _PARTITION_EOF, the session's offset
    fetcher.kick()
    fetcher.tick(time.monotonic())
    req, answer = sent[-1]
    assert (req.session_id, req.session_epoch) == (77, 2) and _named(req) == [("t", 1, 2)]
    before = len(delivered)
    answer(_session_answer(77), None)
    # Both left out: nothing new. Partition 0's position is its end (high watermark 3,
    # as last told): one _PARTITION_EOF, as a full answer would give.
    (eof,) = delivered[before:]
    assert eof.part is p0 and eof.message.error().code() == KafkaError._PARTITION_EOF
    assert eof.message.offset() == 3
    # As librdkafka's events: the error's text is the value, no timestamp.
    assert eof.message.value() == eof.message.error().str().encode()
    assert eof.message.timestamp() == (0, -1) and eof.message.topic() == "t"


def test_a_partition_left_out_of_the_next_fetch_is_forgotten_by_the_session():
    fetcher, p0, p1, sent = in_session()
    fetcher.kick()
    fetcher.tick(time.monotonic())
    sent[-1][1](_session_answer(5, [(0, 0, b""), (1, 0, b"")]), None)
    with fetcher.lock:
        p1.paused = True
    fetcher.kick()
    fetcher.tick(time.monotonic())
    req, answer = sent[-1]
    assert req.session_epoch == 1 and req.topics == []
    assert [(f.topic, f.partitions) for f in req.forgotten_topics_data] == [("t", [1])]
    answer(_session_answer(5), None)
    with fetcher.lock:
        p1.paused = False
    fetcher.kick()
    fetcher.tick(time.monotonic())
    req, _ = sent[-1]
    assert req.session_epoch == 2 and _named(req) == [("t", 1, 0)]


def test_an_evicted_session_is_fetched_again_at_once_in_full():
    from kafka_proto.errors import ErrorCode
    for code, next_id in ((ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0),
                          (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 9)):
        delivered = []
        fetcher, p0, p1, sent = in_session(delivered)
        fetcher.kick()
        fetcher.tick(time.monotonic())
        sent[-1][1](_session_answer(9, [(0, 0, b""), (1, 0, b"")]), None)
        fetcher.kick()
        fetcher.tick(time.monotonic())
        sent[-1][1](_session_answer(0, error=code), None)
        # Not the partitions' error: no event, no backoff, fetched again in full.
        assert delivered == [] and p0.backoff_until == 0.0 and p1.backoff_until == 0.0
        fetcher.kick()
        fetcher.tick(time.monotonic())
        req, _ = sent[-1]
        assert (req.session_id, req.session_epoch) == (next_id, 0)
        assert _named(req) == [("t", 0, 0), ("t", 1, 0)]


def test_a_broker_that_refuses_a_full_fetch_for_its_session_gets_no_more_sessions():
    from kafka_proto.errors import ErrorCode
    fetcher, p0, p1, sent = in_session()
    fetcher.kick()
    fetcher.tick(time.monotonic())
    sent[-1][1](_session_answer(0, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH), None)
    fetcher.kick()
    fetcher.tick(time.monotonic())
    req, _ = sent[-1]
    assert (req.session_id, req.session_epoch) == (0, -1)   # sessionless from now on


def test_a_lost_answer_or_an_error_makes_the_next_fetch_full_closing_the_old_session():
    from kafka_proto.errors import ErrorCode
    fetcher, p0, p1, sent = in_session()
    fetcher.kick()
    fetcher.tick(time.monotonic())
    sent[-1][1](_session_answer(12, [(0, 0, b""), (1, 0, b"")]), None)
    fetcher.kick()
    fetcher.tick(time.monotonic())
    sent[-1][1](None, client_error(KafkaError._TRANSPORT, "connection lost"))
    for part in (p0, p1):
        part.backoff_until = 0.0
    fetcher.kick()
    fetcher.tick(time.monotonic())
    req, answer = sent[-1]
    assert (req.session_id, req.session_epoch) == (12, 0)
    assert _named(req) == [("t", 0, 0), ("t", 1, 0)]
    answer(_session_answer(13, [(0, 0, b""), (1, 0, b"")]), None)
    fetcher.kick()
    fetcher.tick(time.monotonic())
    sent[-1][1](_session_answer(13, error=ErrorCode.NOT_COORDINATOR), None)
    for part in (p0, p1):
        part.backoff_until = 0.0
    fetcher.kick()
    fetcher.tick(time.monotonic())
    assert (sent[-1][0].session_id, sent[-1][0].session_epoch) == (13, 0)


def test_a_broker_without_sessions_gets_full_fetches_and_old_versions_none():
    for version, epoch in ((12, 0), (6, -1)):
        fetcher, p0, p1, sent = in_session(version=version)
        for _ in range(3):
            fetcher.kick()
            fetcher.tick(time.monotonic())
            req, answer = sent[-1]
            assert (req.session_id, req.session_epoch) == (0, epoch)
            assert _named(req) == [("t", 0, 0), ("t", 1, 0)]
            answer(_session_answer(0, [(0, 0, b""), (1, 0, b"")]), None)


def test_a_seek_is_sent_as_a_change_and_an_answer_for_the_old_position_is_dropped():
    delivered = []
    fetcher, p0, p1, sent = in_session(delivered)
    fetcher.kick()
    fetcher.tick(time.monotonic())
    sent[-1][1](_session_answer(3, [(0, 10, b""), (1, 10, b"")]), None)
    fetcher.kick()
    fetcher.tick(time.monotonic())
    req, answer = sent[-1]
    assert req.session_epoch == 1 and req.topics == []
    with fetcher.lock:
        p0.seek(5)
    answer(_session_answer(3, [(0, 10, _records(0, 10))]), None)   # for offset 0: stale
    assert delivered == []
    fetcher.kick()
    fetcher.tick(time.monotonic())
    req, _ = sent[-1]
    assert req.session_epoch == 2 and _named(req) == [("t", 0, 5)]


def test_close_ends_the_session_on_the_broker():
    fetcher, p0, p1, sent = in_session()
    fetcher.kick()
    fetcher.tick(time.monotonic())
    sent[-1][1](_session_answer(21, [(0, 0, b""), (1, 0, b"")]), None)
    fetcher.close()
    req, _ = sent[-1]
    assert (req.session_id, req.session_epoch, req.topics) == (21, -1, [])


def test_an_incremental_fetch_answered_without_the_session_starts_a_new_one():
    """Kafka closes a session whose Fetch forgot all it held and answers sessionless
    (id 0): that answer lists what it read; nothing is taken as "no news"."""
    delivered = []
    fetcher, p0, p1, sent = in_session(delivered, **{"enable.partition.eof": True})
    fetcher.kick()
    fetcher.tick(time.monotonic())
    sent[-1][1](_session_answer(8, [(0, 0, b""), (1, 5, b"")]), None)
    with fetcher.lock:
        p0.seek(0)                           # at its end: re-arms _PARTITION_EOF
    fetcher.kick()
    fetcher.tick(time.monotonic())
    assert sent[-1][0].session_epoch == 1
    before = len(delivered)
    sent[-1][1](_session_answer(0, [(1, 5, b"")]), None)
    # Partition 0 left out of a sessionless answer: not read, so no event (taken as "no
    # news" it would have given an end-of-partition event).
    assert delivered[before:] == []
    fetcher.kick()
    fetcher.tick(time.monotonic())
    req, _ = sent[-1]
    assert (req.session_id, req.session_epoch) == (0, 0)
    assert _named(req) == [("t", 0, 0), ("t", 1, 0)]


def test_a_topic_made_again_is_sent_under_its_new_id_and_the_old_id_forgotten():
    import uuid

    from kafka_client.consumer.fetch_session import FetchSession, SessionPartition
    old, new = uuid.uuid4(), uuid.uuid4()
    session = FetchSession()
    first = [SessionPartition("t", old, 0, 5, 1, 100), SessionPartition("t", old, 1, 0, 1, 100)]
    session.answered(session.plan(first, 13), 4, 0)
    again = [SessionPartition("t", new, 0, 0, 0, 100), SessionPartition("t", old, 1, 0, 1, 100)]
    plan = session.plan(again, 13)
    assert plan.incremental and plan.send == [again[0]] and plan.forget == [first[0]]
    # Equal ids that are other objects (the metadata was decoded again) change nothing.
    same = [SessionPartition("t", uuid.UUID(int=new.int), 0, 0, 0, 100), again[1]]
    session.answered(plan, 4, 0)
    plan = session.plan(same, 13)
    assert plan.send == [] and plan.forget == []


def test_a_partition_known_nothing_of_that_the_session_holds_makes_the_fetch_full():
    """A partition the fetcher has had no answer for since it was assigned again (its
    high watermark unknown) but that the broker's session still holds: an incremental
    answer would leave it out (nothing new), so the Fetch is a full one; the session
    goes on incrementally after that."""
    from kafka_client.consumer.fetch_session import FetchSession, SessionPartition
    session = FetchSession()
    parts = [SessionPartition("t", None, 0, 5, 1, 100), SessionPartition("t", None, 1, 7, 1, 100)]
    session.answered(session.plan(parts, 12), 4, 0)
    assert session.plan(parts, 12).incremental       # nothing unknown: incremental
    session.answered(session.plan(parts, 12), 4, 0)
    plan = session.plan(parts, 12, unknown=[("t", 1)])
    assert not plan.incremental and plan.session_id == 4 and plan.send == parts
    session.answered(plan, 9, 0)                     # a new session
    plan = session.plan(parts, 12, unknown=[("t", 2)])   # not held: asked as new
    assert plan.incremental and plan.session_id == 9


def test_a_logical_offset_waits_for_the_leader_instead_of_a_failed_lookup_and_backoff():
    """A partition assigned at OFFSET_BEGINNING before its topic's metadata is known: no
    ListOffsets that fails and waits retry.backoff.ms (100 ms: the whole start-up time of
    a consumer on a local broker), but a metadata request, and the lookup as soon as the
    leader is known."""
    from kafka_client.types import OFFSET_BEGINNING
    from kafka_proto.messages import ApiKey
    fetcher, conn, part = setup()
    conn.versions = {ApiKey.FETCH: 12, ApiKey.LIST_OFFSETS: 7}
    md = fetcher.cluster.metadata
    del md.leaders[("t", 0)]
    with fetcher.lock:
        part.seek(OFFSET_BEGINNING)
    fetcher.tick(time.monotonic())
    assert conn.sent == [] and ["t"] in md.requested and part.backoff_until == 0.0
    md.leaders[("t", 0)] = 1                     # the metadata answer came
    fetcher.tick(time.monotonic())
    (req,) = conn.sent
    assert type(req).__name__ == "ListOffsetsRequest"
    assert req.topics[0].partitions[0].timestamp == -2


def test_a_held_offset_caps_what_is_committed_until_released():
    """A consume() waiting with messages 5..7 in hand holds the partition at 5: the
    stored offset (8) is not committed past 5 meanwhile, its leader epoch (of the record
    before 8) not sent with 5; released, 8 is committed with it."""
    fetcher, _conn, part = setup()
    part.committed = 3
    part.stored, part.stored_epoch = 8, 7
    part.held = 5
    assert part.commit_due() and part.committable() == 5
    [tp] = fetcher.stored_offsets()
    assert (tp.offset, tp.leader_epoch) == (5, None)
    part.committed = 5                      # that commit went through
    assert not part.commit_due() and fetcher.stored_offsets() == []
    part.held = 9                           # held beyond what is stored: the stored one
    assert part.committable() == 8
    part.held = -1
    [tp] = fetcher.stored_offsets()
    assert (tp.offset, tp.leader_epoch) == (8, 7)


def test_a_topic_created_again_starts_again_from_the_policy_not_the_old_position():
    """Another topic id for an assigned partition's topic: the position (and the offset
    stored for a commit) belonged to the deleted log; the partition starts again from
    the committed offset, else auto.offset.reset (librdkafka keeps the old position and
    skips as many records of the new log). A lagging broker naming the old id again
    changes nothing."""
    import uuid

    old, new = uuid.uuid4(), uuid.uuid4()
    fetcher, conn, part = setup(**{"auto.offset.reset": "earliest"})
    md = fetcher.cluster.metadata
    md.set_topic_id("t", old)
    part.seek(25)
    part.stored = part.committed = 25
    fetcher.tick(time.monotonic())
    assert part.topic_id == old and part.fetch_pos == 25
    md.set_topic_id("t", new)
    fetcher.tick(time.monotonic())
    assert part.topic_id == new and part.fetch_pos == -1
    assert part.stored == part.committed == -1
    from kafka_client.types import OFFSET_BEGINNING
    assert part.reset == OFFSET_BEGINNING       # no group: auto.offset.reset at once
    part.seek(0)
    md.set_topic_id("t", old)                    # stale metadata
    fetcher.tick(time.monotonic())
    assert part.topic_id == new and part.fetch_pos == 0


def test_the_local_queue_limits_bound_the_whole_consumer_not_each_partition():
    """queued.max.messages.kbytes and queued.min.messages count every partition's chunks
    (librdkafka's one consumer queue): per partition, a slow application's consumer of
    N partitions held N times the limit."""
    fetcher, conn, part = setup(**{"queued.min.messages": 100})
    other = PartitionState("t", 1)
    other.seek(0)
    fetcher.parts[other.key] = other
    fetcher.cluster.metadata.leaders[("t", 1)] = 1
    part.queued_msgs = fetcher.queued_msgs = 100      # all of it from partition 0
    fetcher.tick(time.monotonic())
    assert not conn.sent                              # partition 1 waits too
    from kafka_client.consumer.fetcher import Chunk
    fetcher.taken(Chunk(part, part.version, [], 0, None, 0, 1))
    assert fetcher.cluster.conns[1] is conn and fetcher.io.wakes >= 1
    fetcher.tick(time.monotonic())
    assert len(conn.sent) == 1


def test_out_of_range_again_right_after_a_reset_backs_off():
    """A broker whose ListOffsets answer is out of range for its own Fetch: the reset is
    tried again after fetch.error.backoff.ms (it went round at once: ~780 ListOffsets
    and Fetch requests a second, and an INFO line each); data in between starts over."""
    from kafka_client.types import OFFSET_BEGINNING
    fetcher, conn, part = setup(**{"auto.offset.reset": "earliest"})
    now = time.monotonic()
    fetcher._partition_error(part, 1, now)                # OFFSET_OUT_OF_RANGE
    assert part.reset == OFFSET_BEGINNING and part.backoff_until <= now
    part.reset, part.fetch_pos = None, 10                   # the lookup said 10
    fetcher._partition_error(part, 1, now)                # ... out of range too
    assert part.reset == OFFSET_BEGINNING and part.backoff_until >= now + 0.02
    part.last_error = part.last_error_logged = None        # data came in between
    part.reset, part.fetch_pos = None, 10
    fetcher._partition_error(part, 1, now + 1)
    assert part.backoff_until < now + 1


def test_a_broker_without_fetch_is_reported_not_waited_for_in_silence():
    from kafka_proto.messages import ApiKey
    fetcher, conn, part = setup()
    conn.versions = {ApiKey.LIST_OFFSETS: 7}
    fetcher.tick(time.monotonic())
    assert not conn.sent and fetcher.cluster.missing == [(1, ApiKey.FETCH)]


@pytest.mark.parametrize("start", ["stored", "beginning"])
def test_a_lookup_answered_after_its_partition_was_paused_lets_it_be_looked_up_again(start):
    """pause() (a version bump, the lookup going on) while the committed offset or the
    ListOffsets lookup is in flight: its answer is not applied, and the partition is
    looked up again; it stayed "resolving" for ever (never fetched, no event)."""
    from kafka_client.consumer.fetcher import OffsetLookup
    from kafka_client.types import OFFSET_BEGINNING, OFFSET_STORED
    fetcher, conn, part = setup()
    asked = []
    fetcher.committed_lookup = lambda parts, done: asked.append(done)
    fetcher.list_offsets = lambda want, done, **kw: asked.append(done)
    part.seek(OFFSET_STORED if start == "stored" else OFFSET_BEGINNING)
    fetcher.tick(time.monotonic())
    assert len(asked) == 1 and part.resolving
    part.version += 1                               # what pause() does meanwhile
    if start == "stored":
        asked[0]({("t", 0): (42, -1)})
    else:
        asked[0]({("t", 0): OffsetLookup(30, -1, None, -1)})
    assert not part.resolving and part.fetch_pos == -1    # stale: not applied
    fetcher.tick(time.monotonic())
    assert len(asked) == 2                          # asked again for the new version


def test_an_answer_with_only_records_before_the_position_backs_off():
    """A broker answering a partition's Fetch with batches that all end before the
    position asked for (a hostile or broken broker replaying old data): nothing is
    delivered twice, and the partition is fetched again after fetch.error.backoff.ms,
    with one warning (it was fetched again at once: 13,000 Fetch requests in 10 s
    through the fault proxy; librdkafka spins as well, reporting MSG_SIZE_TOO_LARGE)."""
    import logging

    delivered = []
    fetcher, p0, p1, sent = in_session(delivered, **{"fetch.error.backoff.ms": 500})
    fetcher.kick()
    fetcher.tick(time.monotonic())
    sent[-1][1](_session_answer(0, [(0, 10, _records(0, 5)), (1, 10, _records(0, 5))]), None)
    assert (p0.fetch_pos, p1.fetch_pos) == (5, 5) and len(delivered) == 2
    records = logging.getLogger("kafka_client")
    seen = []
    handler = logging.Handler()
    handler.emit = seen.append
    records.addHandler(handler)
    try:
        for _ in range(3):   # the same old batches each time, for partition 0 only
            fetcher.kick()
            now = time.monotonic()
            fetcher.tick(now)
            req, answer = sent[-1]
            answer(_session_answer(0, [(0, 10, _records(0, 5)),
                                       (1, 10, _records(p1.fetch_pos, 1))]), None)
    finally:
        records.removeHandler(handler)
    assert p0.fetch_pos == 5 and p0.backoff_until >= now + 0.4
    # partition 0 sat out the Fetches after the first replay; partition 1 went on
    assert _named(sent[-1][0]) == [("t", 1, 7)] and p1.fetch_pos == 8
    assert [c.part.partition for c in delivered[2:]] == [1, 1, 1]
    warnings = [r for r in seen if r.levelno == logging.WARNING and "before" in r.getMessage()]
    assert len(warnings) == 1


def test_a_lookup_failing_the_same_way_again_and_again_is_reported_once():
    """An offset lookup (auto.offset.reset, OFFSET_BEGINNING) that keeps failing with the
    same error that asking again will not cure (a broker with no ListOffsets version the
    client speaks; an answer that leaves the partition out) is retried after
    retry.backoff.ms, and reported to the application once, not at every retry (30
    _UNSUPPORTED_FEATURE events a second for three partitions through the fault proxy;
    librdkafka repeats them too). Another error is reported again."""
    from kafka_client.consumer.fetcher import OffsetLookup
    from kafka_client.types import OFFSET_BEGINNING

    delivered = []
    fetcher, conn, part = setup(delivered)
    errors = iter([KafkaError._UNSUPPORTED_FEATURE] * 5 + [KafkaError._BAD_MSG] * 2)

    def failing(want, done, timeout, isolation=0, **kw):
        done({key: OffsetLookup(-1, -1, client_error(next(errors), "ListOffsets"))
              for key in want})

    fetcher.list_offsets = failing
    for _ in range(7):
        with fetcher.lock:
            part.seek(OFFSET_BEGINNING) if part.reset is None else None
            part.backoff_until = 0.0
        fetcher._resolve_logical([part])
        assert part.backoff_until > 0.0 and part.reset == OFFSET_BEGINNING
    codes = [e.message.error().code() for e in delivered]
    assert codes == [KafkaError._UNSUPPORTED_FEATURE, KafkaError._BAD_MSG]


def test_a_fetch_refused_as_a_whole_is_logged_with_its_error(caplog):
    """A Fetch answer with a top-level error (not a session's): the warning names the
    error; it said "Fetch from broker 1 failed: Fetch"."""
    import logging

    fetcher, p0, p1, sent = in_session()
    fetcher.kick()
    fetcher.tick(time.monotonic())
    with caplog.at_level(logging.WARNING, logger="kafka_client"):
        sent[-1][1](_session_answer(0, [], error=9999), None)
    (line,) = [r.getMessage() for r in caplog.records if "Fetch from broker" in r.getMessage()]
    assert "9999" in line, line
    assert p0.backoff_until > 0.0 and p1.backoff_until > 0.0


def test_a_corrupt_batch_delivers_what_came_before_it_then_the_error_at_its_offset():
    """check.crcs: a Fetch answer whose second batch fails its CRC (a byte flipped in its
    records). The first batch's messages are delivered, then a _BAD_MSG error naming the
    bad batch's offset; the position stays on that batch (nothing after it is skipped
    or delivered), and it is fetched again from there after fetch.error.backoff.ms."""
    delivered = []
    fetcher, p0, p1, sent = in_session(delivered, **{"check.crcs": True,
                                                     "fetch.error.backoff.ms": 500})
    bad = bytearray(_records(3, 2))
    bad[-1] ^= 0xFF     # in the last record, under the CRC
    fetcher.kick()
    now = time.monotonic()
    fetcher.tick(now)
    sent[-1][1](_session_answer(0, [(0, 5, _records(0, 3) + bytes(bad)), (1, 0, b"")]),
                None)
    chunk, event = delivered
    assert chunk.part is p0 and chunk.count == 3 and chunk.batches[0].base_offset == 0
    err = event.message.error()
    assert err.code() == KafkaError._BAD_MSG and "at offset 3" in err.str(), err
    assert event.message.offset() == 3
    assert p0.fetch_pos == 3 and p0.backoff_until >= now + 0.4
    fetcher.kick()
    fetcher.tick(time.monotonic())
    assert _named(sent[-1][0]) == [("t", 1, 0)]           # partition 0 backs off
    sent[-1][1](_session_answer(0, [(1, 0, b"")]), None)
    fetcher.kick()
    fetcher.tick(time.monotonic() + 0.6)
    assert ("t", 0, 3) in _named(sent[-1][0])
    assert len(delivered) == 2


def test_offsets_for_times_at_a_list_offsets_v0_broker_fail_unsupported_not_wrong():
    """ListOffsets v0 (Kafka 0.10.0) answers a time with a segment's base offset, not
    the offset of that time: a lookup by time there fails with _UNSUPPORTED_FEATURE at
    once, nothing sent; the earliest/latest lookups v0 can answer are still sent. A
    partition whose leader is not a known broker fails with _TRANSPORT, not silence."""
    from kafka_proto.messages import ApiKey

    fetcher, conn, _ = setup()
    conn.versions = {ApiKey.LIST_OFFSETS: 0}
    results = []
    fetcher.list_offsets({("t", 0): 1_000}, results.append, timeout=1.0)
    assert conn.sent == []
    ((key, found),) = [(k, v) for r in results for k, v in r.items()]
    assert key == ("t", 0) and found.error.code() == KafkaError._UNSUPPORTED_FEATURE
    assert "v1" in found.error.str()
    fetcher.list_offsets({("t", 0): -2}, results.append, timeout=1.0)   # EARLIEST
    assert len(conn.sent) == 1 and len(results) == 1
    fetcher.cluster.metadata.leaders[("t", 0)] = 7            # a broker not connected
    fetcher.list_offsets({("t", 0): -1}, results.append, timeout=1.0)
    (found,) = results[-1].values()
    assert found.error.code() == KafkaError._TRANSPORT and "broker 7" in found.error.str()
