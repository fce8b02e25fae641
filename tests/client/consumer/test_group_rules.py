"""Group membership rules checked without a broker: the coordinator's state machine fed
the answers a broker gives."""
from __future__ import annotations

import time
import types

from kafka_client._backoff import RETRY_JITTER
from kafka_client.config import ClientConfig
from kafka_client.consumer.group import STABLE, UNJOINED, GroupCoordinator
from kafka_client.errors import KafkaError


class FakeIO:
    def __init__(self):
        self.calls = []

    def add_tick(self, fn):
        pass

    def wake(self):
        pass

    def call_soon(self, fn, *args):
        self.calls.append((fn, args))

    def call_later(self, delay, fn, *args):
        self.calls.append((fn, args))


class FakeOffsets:
    """The fetcher as the group's OffsetStore."""
    read_committed = False

    def __init__(self):
        self.stored = []
        self.committed = {}
        self.assigned = {("t", 0), ("t", 1)}

    def assigned_keys(self):
        return set(self.assigned)

    def stored_offsets(self, leaving=False):
        return list(self.stored)

    def set_committed(self, offsets):
        self.committed.update(offsets)


class FakeMember:
    """The consumer as the group's GroupMember: records what the group asks of it."""

    def __init__(self, assigned=()):
        self.consumer = object()
        self._assigned = set(assigned)
        self.changes = 0
        self.calls = []

    def assigned(self):
        return set(self._assigned)

    def assignment_changes(self):
        return self.changes

    def stored_offsets(self, leaving=False):
        return []

    def hold(self, tps):
        self.calls.append(("hold", sorted((tp.topic, tp.partition) for tp in tps)))

    def assign(self, tps):
        self.calls.append(("assign", sorted((tp.topic, tp.partition) for tp in tps)))
        self._assigned = {(tp.topic, tp.partition) for tp in tps}

    def unassign(self):
        self.calls.append(("unassign", []))
        self._assigned = set()

    def incremental_assign(self, tps):
        self.calls.append(("incremental_assign",
                           sorted((tp.topic, tp.partition) for tp in tps)))
        self._assigned |= {(tp.topic, tp.partition) for tp in tps}

    def incremental_unassign(self, tps):
        self.calls.append(("incremental_unassign",
                           sorted((tp.topic, tp.partition) for tp in tps)))
        self._assigned -= {(tp.topic, tp.partition) for tp in tps}


def coordinator(strategy):
    cfg = ClientConfig.from_dict({"bootstrap.servers": "127.0.0.1:1", "group.id": "g",
                                  "partition.assignment.strategy": strategy},
                                 role="consumer")
    cluster = types.SimpleNamespace(settings=types.SimpleNamespace(request_timeout=30.0),
                                    on_metadata=[], on_broker_state=[])
    errors = []
    g = GroupCoordinator(cfg, cluster, FakeIO(), FakeOffsets(), lambda: None,
                         lambda err, topic=None: errors.append(err))
    g.patterns = ["t"]
    g.member_id, g.generation, g.state = "m-1", 7, STABLE
    g.owned = {("t", 0), ("t", 1)}
    return g, errors


def test_cooperative_member_unknown_to_the_group_loses_its_partitions():
    g, _ = coordinator("cooperative-sticky")
    g.state = "JOINING"
    g._join_failed(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))
    assert g.state == UNJOINED and g.owned == set()
    assert g.member_id == "" and g.generation == -1
    kind, tps, lost, _ = g.app_events[0]
    assert kind == "revoke" and lost is True
    assert sorted((tp.topic, tp.partition) for tp in tps) == [("t", 0), ("t", 1)]


def test_eager_heartbeat_rebalance_revokes_everything_first():
    g, _ = coordinator("range")
    g._on_heartbeat(types.SimpleNamespace(error_code=KafkaError.REBALANCE_IN_PROGRESS), None,
                    g._op_token)
    assert g.state == "WAIT_REVOKE" and g.owned == set()
    kind, tps, lost, _ = g.app_events[0]
    assert kind == "revoke" and lost is False and len(tps) == 2


def test_cooperative_heartbeat_rebalance_keeps_the_partitions():
    g, _ = coordinator("cooperative-sticky")
    g._on_heartbeat(types.SimpleNamespace(error_code=KafkaError.REBALANCE_IN_PROGRESS), None,
                    g._op_token)
    assert g.state == UNJOINED and g.owned == {("t", 0), ("t", 1)}
    assert not g.app_events


def test_serve_applies_rebalances_through_the_member_interface():
    """The group reaches the consumer only through GroupMember: the callbacks get its
    ``consumer``, the assignment changes go through its methods, and a callback that
    assigned by itself is not overridden."""
    g, _ = coordinator("cooperative-sticky")
    seen = []
    g.on_revoke = lambda consumer, tps: seen.append(("revoke", consumer, len(tps)))
    g.on_assign = lambda consumer, tps: seen.append(("assign", consumer, len(tps)))
    member = FakeMember(assigned={("t", 0), ("t", 1)})
    g._queue_revoke([("t", 1), ("t", 9)], lost=False)   # ("t", 9) is not assigned
    g._queue_assign([("t", 2), ("t", 0)])
    g.serve(member)
    assert seen == [("revoke", member.consumer, 2), ("assign", member.consumer, 2)]
    # The revoked partitions are held first (no other thread gets their messages while
    # the revocation runs), as librdkafka pauses them.
    assert member.calls == [("hold", [("t", 1), ("t", 9)]),
                            ("incremental_unassign", [("t", 1)]),
                            ("incremental_assign", [("t", 2)])]
    # A callback that changes the assignment itself wins.
    g.on_assign = lambda consumer, tps: setattr(member, "changes", member.changes + 1)
    g._queue_assign([("t", 3)])
    g.serve(member)
    assert member.calls[3:] == []


def test_auto_commit_goes_through_the_offset_store():
    from kafka_client.types import TopicPartition

    g, _ = coordinator("range")
    sent = []
    g._commit = lambda offsets, done, deadline: sent.append(offsets)
    g._auto_commit()
    assert sent == []  # nothing stored beyond the last commit
    g.offsets.stored = [TopicPartition("t", 0, 42, "meta", 3), TopicPartition("t", 1, 7)]
    g._auto_commit()
    assert sent == [[("t", 0, 42, "meta", 3), ("t", 1, 7, None, -1)]]


class VersionedConn:
    """A connected coordinator that speaks the given versions; keeps what is sent."""
    ready = True

    def __init__(self, versions):
        self.versions = versions
        self.sent = []

    def send(self, req, callback=None, **kw):
        self.sent.append(req)


def test_a_static_member_refuses_a_coordinator_without_the_instance_id_versions():
    """group.instance.id needs JoinGroup v5, SyncGroup v3 and Heartbeat v3 (Kafka 2.3):
    against an older coordinator the member does not join as a dynamic one in silence,
    nor send requests that cannot carry the id: one fatal _UNSUPPORTED_FEATURE naming
    what is missing, and no more joins."""
    from kafka_proto.messages import ApiKey

    cfg = ClientConfig.from_dict({"bootstrap.servers": "127.0.0.1:1", "group.id": "g",
                                  "group.instance.id": "i-1"}, role="consumer")
    md = types.SimpleNamespace(topics={}, updates=1, request=lambda *a, **k: None)
    old = VersionedConn({ApiKey.JOIN_GROUP: 4, ApiKey.SYNC_GROUP: 3, ApiKey.HEARTBEAT: 2})
    cluster = types.SimpleNamespace(settings=types.SimpleNamespace(request_timeout=30.0),
                                    on_metadata=[], on_broker_state=[], metadata=md,
                                    coordinator_connection=lambda node: old)
    errors = []
    g = GroupCoordinator(cfg, cluster, FakeIO(), FakeOffsets(), lambda: None,
                         lambda err, topic=None: errors.append(err))
    g.patterns, g.coord_id = ["t"], 1
    g._start_join(0.0)
    assert old.sent == [] and g.state == UNJOINED and g.patterns is None
    (err,) = errors
    assert err.code() == KafkaError._UNSUPPORTED_FEATURE and err.fatal()
    assert "JoinGroup v5+ (it has v4)" in err.str() and "Heartbeat v3+ (it has v2)" in err.str()
    assert "SyncGroup" not in err.str() and "group.instance.id 'i-1'" in err.str()

    # A coordinator that has them: the JoinGroup goes out with the instance id.
    new = VersionedConn({ApiKey.JOIN_GROUP: 9, ApiKey.SYNC_GROUP: 5, ApiKey.HEARTBEAT: 4})
    cluster.coordinator_connection = lambda node: new
    errors.clear()
    g.patterns = ["t"]
    g._start_join(0.0)
    assert errors == [] and g.state == "JOINING"
    (req,) = new.sent
    assert req.group_instance_id == "i-1" and req.encode(9)


def test_a_local_error_code_in_a_heartbeat_answer_is_not_a_lost_connection():
    """-195 is the client's _TRANSPORT, never a broker's: in a heartbeat answer it is
    UNKNOWN_SERVER_ERROR (kafka_client.errors.broker_code), and the member keeps its
    coordinator and its partitions."""
    g, _ = coordinator("range")
    g.coord_id = 3
    g._on_heartbeat(types.SimpleNamespace(error_code=KafkaError._TRANSPORT), None,
                    g._op_token)
    assert g.state == STABLE and g.owned == {("t", 0), ("t", 1)} and g.coord_id == 3
    assert not g.app_events


def test_a_heartbeat_timed_out_in_the_queue_looks_the_coordinator_up_again():
    """A heartbeat that waited in its connection's queue for its whole timeout (the
    coordinator's connection never came up again) is an unanswered one, as lost or timed
    out in flight: the coordinator is looked up again; the membership stays."""
    from kafka_client.errors import client_error

    g, errors = coordinator("range")
    g.coord_id = 3
    g._on_heartbeat(None, client_error(KafkaError._TIMED_OUT_QUEUE, "never sent"),
                    g._op_token)
    assert g.coord_id is None
    assert g.state == STABLE and g.owned == {("t", 0), ("t", 1)} and not errors


def test_a_commit_timed_out_in_the_queue_is_retried():
    """An OffsetCommit that timed out in its connection's queue was never sent: sent
    again (to the coordinator looked up again), not failed."""
    from kafka_client.errors import client_error
    from kafka_proto.messages import OffsetCommitResponse as R

    g, _ = coordinator("range")
    g.coord_id = 3
    sent = []
    g._send = lambda api_key, make, answered, deadline=None, max_version=0, conn=None: \
        sent.append((make(8), answered))
    got = []
    g._commit([("t", 0, 10, None, -1)], lambda err, result: got.append((err, result)),
              time.monotonic() + 5)
    sent[0][1](None, client_error(KafkaError._TIMED_OUT_QUEUE, "never sent"))
    assert got == [] and g.coord_id is None
    fn, args = g.io.calls[-1]
    fn(*args)                                                  # the retry
    sent[1][1](R(topics=[R.OffsetCommitResponseTopic(name="t", partitions=[
        R.OffsetCommitResponsePartition(partition_index=0, error_code=0)])]), None)
    (err, result), = got
    assert err is None and g.offsets.committed == {("t", 0): 10}


def test_an_offset_fetch_answer_for_partitions_not_asked_is_ignored():
    """Only the partitions asked are read from an OffsetFetch answer: another's error
    code failed the whole lookup (committed() raised it), another's offset came back as
    a result."""
    import time

    from kafka_proto.messages import OffsetFetchResponse as R

    g, _ = coordinator("range")
    sent = []
    g._send = lambda api_key, make, answered, deadline=None, max_version=0: \
        sent.append(answered)
    got = []
    g._offset_fetch([("t", 0)], lambda result, err=None: got.append((result, err)),
                    time.monotonic() + 5)
    sent[0](R(error_code=0, topics=[
        R.OffsetFetchResponseTopic(name="t", partitions=[
            R.OffsetFetchResponsePartition(partition_index=0, committed_offset=42,
                                           committed_leader_epoch=3, metadata="m",
                                           error_code=0),
            R.OffsetFetchResponsePartition(partition_index=9, committed_offset=-1,
                                           committed_leader_epoch=-1, metadata=None,
                                           error_code=KafkaError.UNKNOWN_TOPIC_OR_PART)]),
        R.OffsetFetchResponseTopic(name="other", partitions=[
            R.OffsetFetchResponsePartition(partition_index=0, committed_offset=7,
                                           committed_leader_epoch=-1, metadata=None,
                                           error_code=0)])]), None)
    assert got == [({("t", 0): (42, "m", 3)}, None)]


def test_a_commit_answer_leaving_a_partition_out_did_not_commit_it():
    """OffsetCommit: a partition sent and not in the answer is reported failed
    (UNKNOWN_SERVER_ERROR), not committed; one answered and not sent is ignored."""
    import time

    from kafka_proto.messages import OffsetCommitResponse as R

    g, _ = coordinator("range")
    sent = []
    g._send = lambda api_key, make, answered, deadline=None, max_version=0, conn=None: \
        sent.append(answered)
    got = []
    g._commit([("t", 0, 10, None, -1), ("t", 1, 20, None, -1)],
              lambda err, result: got.append((err, result)), time.monotonic() + 5)
    sent[0](R(topics=[R.OffsetCommitResponseTopic(name="t", partitions=[
        R.OffsetCommitResponsePartition(partition_index=0, error_code=0),
        R.OffsetCommitResponsePartition(partition_index=7, error_code=0)])]), None)
    (err, result), = got
    assert err is not None and err.code() == KafkaError.UNKNOWN_SERVER_ERROR
    assert [(tp.partition, tp.offset, tp.error and tp.error.code()) for tp in result] == [
        (0, 10, None), (1, 20, KafkaError.UNKNOWN_SERVER_ERROR)]


def test_a_commit_retries_only_what_failed_and_keeps_what_was_committed():
    """One partition committed, one refused with COORDINATOR_LOAD_IN_PROGRESS: the first
    is recorded as committed at once, the retry sends the second alone, and the result
    names both; a later commit of the second meanwhile leaves it out of the retry."""
    import time

    from kafka_proto.messages import OffsetCommitResponse as R

    g, _ = coordinator("range")
    sent = []
    g._send = lambda api_key, make, answered, deadline=None, max_version=0, conn=None: \
        sent.append((make(8), answered))
    got = []

    def answer(answered, codes):
        answered(R(topics=[R.OffsetCommitResponseTopic(name="t", partitions=[
            R.OffsetCommitResponsePartition(partition_index=p, error_code=code)
            for p, code in codes])]), None)

    g._commit([("t", 0, 10, None, -1), ("t", 1, 20, None, -1)],
              lambda err, result: got.append((err, result)), time.monotonic() + 5)
    answer(sent[0][1], [(0, 0), (1, KafkaError.COORDINATOR_LOAD_IN_PROGRESS)])
    assert g.offsets.committed == {("t", 0): 10} and got == []
    fn, args = g.io.calls[-1]
    fn(*args)                                                  # the retry
    assert [p.partition_index for p in sent[1][0].topics[0].partitions] == [1]
    answer(sent[1][1], [(1, 0)])
    (err, result), = got
    assert err is None and g.offsets.committed == {("t", 0): 10, ("t", 1): 20}
    assert g._latest_commit == {}
    assert [(tp.partition, tp.offset, tp.error) for tp in result] == [(0, 10, None),
                                                                    (1, 20, None)]
    # Again, with a commit of partition 1 made before the retry: nothing is sent again.
    g._commit([("t", 1, 30, None, -1)], lambda err, result: got.append((err, result)),
              time.monotonic() + 5)
    answer(sent[2][1], [(1, KafkaError.COORDINATOR_LOAD_IN_PROGRESS)])
    retry_30 = g.io.calls[-1]
    g._commit([("t", 1, 40, None, -1)], lambda err, result: got.append((err, result)),
              time.monotonic() + 5)
    answer(sent[3][1], [(1, 0)])
    retry_30[0](*retry_30[1])
    assert len(sent) == 4 and g.offsets.committed[("t", 1)] == 40
    assert [(err and err.code(), [tp.offset for tp in result]) for err, result in got[1:]] \
        == [(None, [40]), (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, [30])]
    # Every commit has finished: none keeps its marks (they would pile up forever).
    assert g._latest_commit == {}


def test_a_commit_during_the_join_goes_on_the_other_connection_and_asks_no_rejoin():
    """While the JoinGroup waits at the coordinator, a commit goes on the broker's ordinary
    connection (once it is up), with the generation the member has; refused, it asks for
    no further rejoin (the join under way brings the next generation). A commit refused
    on the generation the member still has, with no join under way, asks for one."""
    import time

    from kafka_client.consumer.group import JOINING
    from kafka_proto.messages import OffsetCommitResponse as R

    g, _ = coordinator("cooperative-sticky")
    g.coord_id = 1
    g.state = JOINING
    broker_conn = types.SimpleNamespace(ready=False)
    g.cluster.ensure_connected = lambda node_id: broker_conn
    sent = []
    g._send = lambda api_key, make, answered, deadline=None, max_version=0, conn=None: \
        sent.append((make(8), answered, conn))
    got = []

    def commit():
        g._commit([("t", 0, 10, None, -1)], lambda err, result: got.append(err),
                  time.monotonic() + 5)

    def refused(answered):
        answered(R(topics=[R.OffsetCommitResponseTopic(name="t", partitions=[
            R.OffsetCommitResponsePartition(partition_index=0,
                                            error_code=KafkaError.ILLEGAL_GENERATION)])]), None)

    commit()
    assert sent == [] and g.io.calls[-1][0] == g._commit   # looks again once it is up
    broker_conn.ready = True
    fn, args = g.io.calls.pop()
    fn(*args)
    (req, answered, conn), = sent
    assert conn is broker_conn and req.generation_id_or_member_epoch == 7
    refused(answered)
    assert got[-1].code() == KafkaError.ILLEGAL_GENERATION
    assert g.state == JOINING and not g._rejoin_pending
    # Stable again on generation 7: a refusal means the group went on without it.
    g.state = STABLE
    sent.clear()
    commit()
    (req, answered, conn), = sent
    assert conn is None                       # the coordinator's own connection
    refused(answered)
    assert g.state == UNJOINED and g._rejoin_reason == "commit was rejected by the group"


def test_the_leader_assigns_when_the_metadata_of_other_members_topics_arrives():
    """Another member subscribes to a topic the leader has no metadata for: the leader
    asks for it and runs the assignor when the answer comes (the metadata listener),
    not at its next look (it looked every 50 ms); without an answer it assigns with what
    it knows after LEAD_METADATA_WAIT_S."""
    from kafka_client.consumer.assignors import Subscription, encode_subscription
    from kafka_client.consumer.group import LEAD_METADATA_WAIT_S, SYNCING
    from kafka_client._cluster.metadata import TopicInfo
    from kafka_proto.messages import JoinGroupResponse as J

    cfg = ClientConfig.from_dict({"bootstrap.servers": "127.0.0.1:1", "group.id": "g",
                                  "partition.assignment.strategy": "range"},
                                 role="consumer")
    asked = []
    md = types.SimpleNamespace(topics={"t": TopicInfo("t", 0, [1], [0], [0], 0.0)},
                               updates=1, request=lambda topics, **k: asked.append(topics))
    io = FakeIO()
    cluster = types.SimpleNamespace(settings=types.SimpleNamespace(request_timeout=30.0),
                                    on_metadata=[], on_broker_state=[], metadata=md,
                                    want_topics=lambda topics: None)
    g = GroupCoordinator(cfg, cluster, io, FakeOffsets(), lambda: None, lambda e: None)
    synced = []
    g._sync = lambda assignments, token: synced.append(assignments)
    g.state = SYNCING

    def member(mid, topics):
        return J.JoinGroupResponseMember(member_id=mid, group_instance_id=None,
                                         metadata=encode_subscription(
                                             Subscription(topics=topics, user_data=None,
                                                          owned_partitions=[]), 0))

    resp = J(error_code=0, generation_id=1, protocol_type="consumer",
             protocol_name="range", leader="a", member_id="a",
             members=[member("a", ["t"]), member("b", ["u"])])
    g._lead(resp, g._op_token)
    assert asked == [["u"]] and synced == []
    (timer,) = io.calls                             # the fallback, LEAD_METADATA_WAIT_S
    assert timer[1][2] is True and LEAD_METADATA_WAIT_S == 5.0
    md.topics["u"] = TopicInfo("u", 0, [1], [0], [0], 0.0)
    for cb in cluster.on_metadata:                  # the metadata answer comes
        cb({"u"})
    (plan,) = synced
    assert sorted(a.member_id for a in plan) == ["a", "b"]
    timer[0](*timer[1])                             # the fallback, later: nothing more
    assert len(synced) == 1


def test_a_leaders_assignment_with_negative_partitions_keeps_the_rest():
    """The assignment comes from the group's leader (another member's assignor): a
    negative partition in it is reported and left out, the rest is assigned, and the
    member goes on (before, assign() refused the whole list with an error about a call
    the application never made, and the member, waiting for that assignment to be
    applied, never joined again)."""
    from kafka_client.consumer.assignors import encode_assignment

    g, errors = coordinator("range")
    g.state, g.joined_topics = "SYNCING", ["t"]
    g.owned = set()
    resp = types.SimpleNamespace(error_code=0,
                                 assignment=encode_assignment([("t", 0), ("t", -3), ("t", 1)]))
    g._on_sync(resp, None, g._op_token)
    assert g.state == STABLE and g.owned == {("t", 0), ("t", 1)}
    (err,) = errors
    assert err.code() == KafkaError._BAD_MSG and "[('t', -3)]" in err.str()
    member = FakeMember()
    g.serve(member)
    assert member.calls == [("assign", [("t", 0), ("t", 1)])]


def test_an_assignment_that_cannot_be_read_is_reported_once_and_the_member_joins_again():
    """Garbage from the leader's assignor: taking nothing would leave the partitions it
    gave this member unread until a rebalance a stable group may never have."""
    g, errors = coordinator("range")
    for _ in range(2):
        g.state, g.joined_topics = "SYNCING", ["t"]
        g.owned = set()
        resp = types.SimpleNamespace(error_code=0, assignment=b"\x00\x01\xff")
        before = time.monotonic()
        g._on_sync(resp, None, g._op_token)
        assert g.state == UNJOINED and g.owned == set()
        assert g._rejoin_after >= before + 1.0   # after a backoff, not at once
    (err,) = errors    # told once while it lasts
    assert err.code() == KafkaError._BAD_MSG and "cannot be read" in err.str()
    member = FakeMember()
    g.serve(member)
    assert member.calls == []   # no assignment applied


def test_an_assignment_the_member_refuses_still_lets_the_group_go_on():
    g, _ = coordinator("range")
    member = FakeMember()

    def refuse(tps):
        raise RuntimeError("no")
    member.assign = refuse
    g._queue_assign([("t", 0)])
    try:
        g.serve(member)
    except RuntimeError:
        pass
    assert (g._assign_done, ()) in g.io.calls    # the group hears the assignment ran


def test_a_subscribed_topic_that_is_not_there_is_reported_once():
    """librdkafka's "Subscribed topic not available": one error event per topic and
    error while the metadata says so (a misspelt topic was never mentioned), again if it
    goes away after it came; patterns are not reported."""
    from kafka_client._cluster.metadata import TopicInfo

    g, _ = coordinator("range")
    errors, about = [], []
    g.deliver_error = lambda err, topic=None: (errors.append(err), about.append(topic))
    g.patterns = ["t", "^x.*"]
    missing = TopicInfo("t", KafkaError.UNKNOWN_TOPIC_OR_PART, [], [], [], 0.0)
    here = TopicInfo("t", 0, [1], [0], [0], 0.0)
    g.cluster.metadata = types.SimpleNamespace(topics={"t": missing})
    g._report_topic_errors()
    g._report_topic_errors()
    (err,) = errors
    assert about == ["t"]     # the event's topic(), as librdkafka's
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert err.str().startswith("Subscribed topic not available: t: ")
    g.cluster.metadata.topics["t"] = here
    g._report_topic_errors()
    g.cluster.metadata.topics["t"] = missing
    g._report_topic_errors()
    assert len(errors) == 2


def test_a_find_coordinator_answer_naming_no_usable_broker_is_looked_up_again():
    """The group's own lookup reads FindCoordinator answers as the admin calls do
    (``coordinator_answer``): no entry for the group, node -1, no host or a bad port
    without an error are "not available", asked again after the backoff, with nothing
    learnt and nothing reported to the application; the next good answer is taken."""
    from kafka_proto.messages import FindCoordinatorResponse as R

    g, errors = coordinator("range")
    named = []
    g.cluster.metadata = types.SimpleNamespace(
        broker_named=lambda node, host, port, now: named.append((node, host, port)))
    g.cluster.coordinator_connection = lambda node: None
    g.coord_id = None
    for entries in ([], [R.Coordinator(key="other", node_id=2, host="h", port=9092)],
                    [R.Coordinator(key="g", node_id=-1, host="h", port=9092)],
                    [R.Coordinator(key="g", node_id=2, host="", port=9092)],
                    [R.Coordinator(key="g", node_id=2, host="h", port=0)]):
        g._find_after = 0.0
        g._on_find_coordinator(R(coordinators=entries), None)
        assert g.coord_id is None and g._find_after > 0.0
    assert named == [] and errors == []
    g._on_find_coordinator(R(coordinators=[
        R.Coordinator(key="other", node_id=3, host="x", port=1),
        R.Coordinator(key="g", node_id=2, host="h", port=9092)]), None)
    assert g.coord_id == 2 and named == [(2, "h", 9092)]


def test_a_join_answer_choosing_a_protocol_the_member_did_not_offer_is_refused():
    """A coordinator's JoinGroup answer may only choose a protocol every member offered.
    One naming another ("bogus") is refused as librdkafka refuses it (_UNKNOWN_PROTOCOL
    to the application, the join tried again after a second; the Java client throws):
    the member sends no SyncGroup and, leading, runs no assignor (it ran its first one
    under a name the group had not chosen, and took the assignment it got)."""
    from kafka_client.consumer.group import JOINING
    from kafka_proto.messages import JoinGroupResponse as R

    g, errors = coordinator("range,roundrobin")
    g.cluster.coordinator_connection = lambda node: None
    sent = []
    g._sync = lambda assignments, token: sent.append(assignments)
    g._lead = lambda resp, token, last_chance=False: sent.append("lead")
    g.state, g.generation = JOINING, -1
    before = time.monotonic()
    g._on_join(R(error_code=0, generation_id=8, protocol_name="bogus", leader="m-1",
                 member_id="m-1", members=[]), None, g._op_token)
    assert sent == [] and g.state == UNJOINED and g._rejoin_after >= before + 1.0
    assert [e.code() for e in errors] == [KafkaError._UNKNOWN_PROTOCOL]
    assert "bogus" in errors[0].str() and "range" in errors[0].str()
    g.state = JOINING
    g._on_join(R(error_code=0, generation_id=9, protocol_name="roundrobin", leader="m-2",
                 member_id="m-1", members=[]), None, g._op_token)
    assert sent == [[]] and g.protocol_name == "roundrobin" and g.generation == 9


def test_a_heartbeat_interval_past_any_session_is_capped():
    """KIP-848: the coordinator's answers set the member's heartbeat interval. A broker's
    own limit (group.consumer.max.heartbeat.interval.ms) is 15 s by default, under the
    45 s least session it allows; an answer saying 2^31-1 ms (24 days) made the member
    stop heartbeating, the broker expired it and gave its partitions to another while it
    went on reading them (a message read twice through the fault proxy; librdkafka sent
    85,000 heartbeats in 15 s). The interval is held to 15 s; a sane one is kept."""
    from kafka_client.consumer.consumer_protocol import (
        MAX_HEARTBEAT_INTERVAL_S,
        ConsumerProtocolGroup,
        _Sent,
    )

    cfg = ClientConfig.from_dict({"bootstrap.servers": "127.0.0.1:1", "group.id": "g",
                                  "group.protocol": "consumer"}, role="consumer")
    cluster = types.SimpleNamespace(settings=types.SimpleNamespace(request_timeout=30.0),
                                    on_metadata=[], on_broker_state=[])
    g = ConsumerProtocolGroup(cfg, cluster, FakeIO(), FakeOffsets(), lambda: None,
                              lambda err, topic=None: None)
    assert MAX_HEARTBEAT_INTERVAL_S == 15.0
    for asked, kept in ((2**31 - 1, 15.0), (60_000, 15.0), (5_000, 5.0), (0, 5.0)):
        g._next_heartbeat = float("inf")
        before = time.monotonic()
        g._answered(types.SimpleNamespace(member_id="m", member_epoch=3, assignment=None,
                                          heartbeat_interval_ms=asked),
                    _Sent(("t",), frozenset(), None))
        assert g.heartbeat_interval == kept
        if asked > 0:
            assert g._next_heartbeat <= time.monotonic() + kept
        assert before <= g._next_heartbeat or asked <= 0


def test_a_kip848_answer_with_a_negative_member_epoch_is_not_taken():
    """A ConsumerGroupHeartbeat answer without an error gives the member's epoch, 1 or
    more. One saying -5 was taken: the next heartbeat carried -5, the broker answered
    INVALID_REQUEST and the member stopped for good (librdkafka ignores the value). It is
    refused now (_BAD_MSG to the application): the member keeps its epoch and heartbeats
    again after the backoff; the next good answer is taken."""
    from kafka_client.consumer.consumer_protocol import ConsumerProtocolGroup, _Sent

    cfg = ClientConfig.from_dict({"bootstrap.servers": "127.0.0.1:1", "group.id": "g",
                                  "group.protocol": "consumer"}, role="consumer")
    cluster = types.SimpleNamespace(settings=types.SimpleNamespace(request_timeout=30.0),
                                    on_metadata=[], on_broker_state=[])
    errors = []
    g = ConsumerProtocolGroup(cfg, cluster, FakeIO(), FakeOffsets(), lambda: None,
                              lambda err, topic=None: errors.append(err))
    g.patterns = ["t"]
    g.state, g.generation = STABLE, 3
    sent = _Sent(("t",), frozenset(), None)

    def answer(epoch):
        return types.SimpleNamespace(error_code=0, error_message=None, member_id="m",
                                     member_epoch=epoch, heartbeat_interval_ms=200,
                                     assignment=None)

    before = time.monotonic()
    g._on_heartbeat_answer(answer(-5), None, g._op_token, sent)
    assert (g.state, g.generation, g.patterns) == (STABLE, 3, ["t"])
    assert [e.code() for e in errors] == [KafkaError._BAD_MSG] and "-5" in errors[0].str()
    # after the backoff (KIP-580: retry.backoff.ms with its jitter, at least 80% of it)
    assert g._next_heartbeat >= before + g.retry_backoff * RETRY_JITTER[0] - 0.01
    g._on_heartbeat_answer(answer(4), None, g._op_token, sent)
    assert (g.state, g.generation) == (STABLE, 4) and len(errors) == 1


def leader_of_range_group(partitions):
    """A range-assigning coordinator that knows topic ``t`` with ``partitions``
    partitions, as the group's leader would: (coordinator, errors told, plans synced)."""
    from kafka_client._cluster.metadata import TopicInfo

    cfg = ClientConfig.from_dict({"bootstrap.servers": "127.0.0.1:1", "group.id": "g",
                                  "partition.assignment.strategy": "range"},
                                 role="consumer")
    zeros = [0] * partitions
    md = types.SimpleNamespace(topics={"t": TopicInfo("t", 0, [1] * partitions, zeros,
                                                      zeros, 0.0)},
                               updates=1, request=lambda topics, **k: None)
    cluster = types.SimpleNamespace(settings=types.SimpleNamespace(request_timeout=30.0),
                                    on_metadata=[], on_broker_state=[], metadata=md,
                                    want_topics=lambda topics: None)
    errors = []
    g = GroupCoordinator(cfg, cluster, FakeIO(), FakeOffsets(), lambda: None, errors.append)
    synced = []
    g._sync = lambda assignments, token: synced.append(assignments)
    return g, errors, synced


def test_a_member_with_undecodable_subscription_bytes_gets_nothing_and_the_group_goes_on():
    """The leader's JoinGroup answer carries a member whose subscription bytes do not
    decode (another client's bug, or hostile bytes): the leader still assigns, that
    member with no partitions and the others all of them, instead of failing the join
    (every member would then rejoin and meet the same bytes again)."""
    from kafka_client.consumer.assignors import (Subscription, decode_assignment,
                                                 encode_subscription)
    from kafka_client.consumer.group import SYNCING
    from kafka_proto.messages import JoinGroupResponse as J

    g, errors, synced = leader_of_range_group(partitions=3)
    g.state = SYNCING
    good = encode_subscription(Subscription(topics=["t"], user_data=None,
                                            owned_partitions=[]), 0)
    resp = J(error_code=0, generation_id=1, protocol_type="consumer",
             protocol_name="range", leader="a", member_id="a",
             members=[J.JoinGroupResponseMember(member_id="a", group_instance_id=None,
                                                metadata=good),
                      J.JoinGroupResponseMember(member_id="b", group_instance_id=None,
                                                metadata=b"\x00\x07\xff\xff")])
    g._lead(resp, g._op_token)
    (plan,) = synced
    got = {a.member_id: sorted(decode_assignment(a.assignment).partitions) for a in plan}
    assert got == {"a": [("t", 0), ("t", 1), ("t", 2)], "b": []}, got
    assert errors == []


def test_an_assignor_that_raises_makes_the_leader_join_again_told_once():
    """The leader's assignor raises: no SyncGroup with an empty plan (every member would
    take nothing and the partitions stay unread until a rebalance a stable group may
    never have); the leader joins again after the backoff, as librdkafka does, the error
    told once while it lasts, and the next run that works is synced."""
    from kafka_client.consumer.assignors import (Subscription, decode_assignment,
                                                 encode_subscription)
    from kafka_client.consumer.group import SYNCING
    from kafka_proto.messages import JoinGroupResponse as J

    g, errors, synced = leader_of_range_group(partitions=2)
    sub = encode_subscription(Subscription(topics=["t"], user_data=None,
                                           owned_partitions=[]), 0)
    resp = J(error_code=0, generation_id=1, protocol_type="consumer",
             protocol_name="range", leader="a", member_id="a",
             members=[J.JoinGroupResponseMember(member_id=mid, group_instance_id=None,
                                                metadata=sub) for mid in ("a", "b")])
    assignor = g.assignors[0]
    works = assignor.assign

    def broken(members, counts):
        raise RuntimeError("boom")

    assignor.assign = broken
    for _ in range(2):
        g.state = SYNCING
        before = time.monotonic()
        g._lead(resp, g._op_token)
        assert synced == []                         # no empty plan sent
        assert g.state == UNJOINED and g._rejoin_after >= before + 1.0
    (err,) = errors                                 # told once while it lasts
    assert err.code() == KafkaError._FAIL and "assignor range failed (boom)" in err.str()
    assignor.assign = works
    g.state = SYNCING
    g._lead(resp, g._op_token)
    (plan,) = synced
    got = {a.member_id: decode_assignment(a.assignment).partitions for a in plan}
    assert got == {"a": [("t", 0)], "b": [("t", 1)]}, got


def test_a_revocation_the_membership_was_lost_before_it_ran_is_a_loss():
    """A revocation queued for the application, which the membership is lost before the
    application runs it: the partitions are not the member's to commit any more; the
    application hears on_lost for them, as for the rest (confluent-kafka calls on_lost
    when librdkafka's assignment is lost by the time its callback runs)."""
    g, _ = coordinator("cooperative-sticky")
    seen = []
    g.on_revoke = lambda consumer, tps: seen.append(("revoke", [tp.partition for tp in tps]))
    g.on_lost = lambda consumer, tps: seen.append(("lost", [tp.partition for tp in tps]))
    member = FakeMember(assigned={("t", 0), ("t", 1)})
    g.owned = {("t", 0)}
    g._queue_revoke([("t", 1)], lost=False)     # the last assignment took it away
    g._lose("heartbeat: UNKNOWN_MEMBER_ID", reset_member=True)
    g.serve(member)
    assert seen == [("lost", [1]), ("lost", [0])]
    assert member.assigned() == set()


def test_a_member_whose_application_owes_a_revocation_heartbeats_on():
    """Eager: REBALANCE_IN_PROGRESS asks for every partition back, which waits for the
    application's next poll; cooperative: an assignment that took partitions away waits
    for it the same way before the member joins again. The member is still in its
    generation meanwhile: it heartbeats (silent, its session expired while the
    application, polling well within max.poll.interval.ms, still held the partitions:
    soak seed 134), and REBALANCE_IN_PROGRESS keeps its session as an OK does."""
    from kafka_proto.messages import HeartbeatRequest

    for strategy in ("range", "cooperative-sticky"):
        g, _ = coordinator(strategy)
        conn = VersionedConn({})
        g.cluster.coordinator_connection = lambda node: conn
        g.coord_id = 1
        if strategy == "range":
            g._on_heartbeat(types.SimpleNamespace(
                error_code=KafkaError.REBALANCE_IN_PROGRESS), None, g._op_token)
            assert g.state == "WAIT_REVOKE"
        else:
            g.owned = {("t", 0)}
            g._queue_revoke([("t", 1)], lost=False)
            g.state = UNJOINED
        now = time.monotonic()
        g.last_poll, g._next_heartbeat = now, now
        g._last_heartbeat_ok = now - g.session_timeout_ms / 1000.0 + 0.5
        g._membership_tick(now, lambda at: None)
        assert [type(r) for r in conn.sent] == [HeartbeatRequest], (strategy, conn.sent)
        assert conn.sent[0].generation_id == 7 and conn.sent[0].member_id == "m-1"
        g._on_heartbeat(types.SimpleNamespace(error_code=KafkaError.REBALANCE_IN_PROGRESS),
                        None, g._op_token)
        g._membership_tick(now + 1.0, lambda at: None)   # past the session, had it lapsed
        assert g.generation == 7 and g.member_id == "m-1", strategy
        assert [ev for ev in g.app_events if ev[0] == "revoke" and ev[2]] == [], strategy
