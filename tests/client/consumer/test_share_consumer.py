"""The share consumer (KIP-932) without a broker: the requests its membership and share
sessions build (encoded and decoded at version 0, as they go on the wire), how it handles
the answers (built with kafka_proto), and the application side's rules (acknowledgement
modes, acquired ranges, GAP acknowledgements, one thread at a time)."""
import json
import threading
import time
import uuid
from types import SimpleNamespace

import pytest

from kafka_client import (
    AcknowledgeType,
    DeserializingShareConsumer,
    KafkaError,
    ConcurrentModificationException,
    IllegalStateException,
    KafkaException,
    Message,
    Messages,
    ShareConsumer,
    TopicPartition,
)
from kafka_client._cluster.calls import Broker, Coordinator
from kafka_client.config import ClientConfig
from kafka_client.consumer.fetcher import PartitionState
from kafka_client.consumer.share_fetcher import (
    AckBatch,
    AckRange,
    CommitWaiter,
    ShareChunk,
    ShareFetcher,
    ack_batches,
    next_epoch,
)
from kafka_client.consumer.share_group import ShareAssignment, ShareMember
from kafka_proto.enums import AcknowledgeType as Wire
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    ApiKey,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from kafka_proto.records import RecordBatchBuilder, read_batches

TID = uuid.UUID("12345678-1234-5678-1234-567812345678")


class FakeMetadata:
    def __init__(self):
        self.version = 1
        self.topics = {"t": SimpleNamespace(topic_id=TID)}
        self.leaders = {("t", 0): 1, ("t", 1): 1}
        self.requested = []

    def leader(self, topic, partition):
        return self.leaders.get((topic, partition), -1)

    def request(self, topics=None):
        self.requested.append(topics)

    def topic(self, name):
        return self.topics.get(name)


class FakeRunner:
    """Records the calls instead of sending them."""

    def __init__(self):
        self.calls = []
        self.io = SimpleNamespace(wake=lambda: None, call_soon=lambda fn, *a: fn(*a))
        self.cluster = SimpleNamespace(metadata=FakeMetadata())
        self.request_timeout = 30.0

    def submit(self, call):
        self.calls.append(call)

    def take(self):
        calls, self.calls = self.calls, []
        return calls


def on_wire(call, version=1):
    """The call's request as the broker reads it (encoded and decoded at ``version``)."""
    cls = {ApiKey.SHARE_FETCH: ShareFetchRequest,
           ApiKey.SHARE_ACKNOWLEDGE: ShareAcknowledgeRequest,
           ApiKey.SHARE_GROUP_HEARTBEAT: ShareGroupHeartbeatRequest}[call.api_key]
    return cls.decode(call.build(version).encode(version), version)


def acked_ranges(req):
    """Each partition of a request with the offset ranges it acknowledges."""
    return [(p.partition_index, [(b.first_offset, b.last_offset)
                                 for b in p.acknowledgement_batches])
            for t in req.topics for p in t.partitions]


def answer(call, response, version=1):
    """Hand ``response`` (encoded and decoded at ``version``) to the call; its retry
    verdict."""
    return call.on_response(type(response).decode(response.encode(version), version), None)


def config(**extra):
    """A share consumer's configuration (ShareConsumer parses it as KIP-848's protocol)."""
    conf = {"group.id": "g", "fetch.wait.max.ms": 100, "group.protocol": "consumer"}
    conf.update(extra)
    return ClientConfig.from_dict(conf, role="consumer")


def batch_bytes(base, count, prefix=b"v"):
    b = RecordBatchBuilder()
    for i in range(count):
        b.append(prefix + str(base + i).encode())
    return b.build(base_offset=base)


@pytest.fixture
def share():
    """A joined member (epoch 3) and its fetcher, assigned t [0] and t [1] on broker 1."""
    runner = FakeRunner()
    cfg = config()
    member = ShareMember(cfg, runner, lambda a: None, lambda e: None)
    member.member_id = "m-1"
    member.epoch = 3
    fetcher = ShareFetcher(cfg, runner, member, lambda: None)
    fetcher.set_assignment(ShareAssignment({TID: (0, 1)}))
    return SimpleNamespace(runner=runner, member=member, fetcher=fetcher)


def fetch_answer(partitions):
    """ShareFetch answer: ``partitions`` = [(index, records, [(first, last, count)],
    error, ack_error)]."""
    return ShareFetchResponse(responses=[ShareFetchResponse.ShareFetchableTopicResponse(
        topic_id=TID, partitions=[
            ShareFetchResponse.PartitionData(
                partition_index=p, records=records, error_code=err,
                acknowledge_error_code=ack_err,
                current_leader=ShareFetchResponse.LeaderIdAndEpoch(leader_id=1,
                                                                    leader_epoch=0),
                acquired_records=[ShareFetchResponse.AcquiredRecords(
                    first_offset=f, last_offset=last, delivery_count=n)
                    for f, last, n in acquired])
            for p, records, acquired, err, ack_err in partitions])])


def test_wire_batches_merge_adjacent_ranges_of_one_type():
    ranges = [AckRange(5, 5, Wire.ACCEPT), AckRange(0, 2, Wire.ACCEPT),
              AckRange(3, 4, Wire.ACCEPT), AckRange(6, 6, Wire.RELEASE),
              AckRange(8, 9, Wire.RELEASE)]
    assert ack_batches(ranges) == [(0, 5, [1]), (6, 6, [2]), (8, 9, [2])]


def test_share_session_epoch_steps_and_wraps_to_one():
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1


def test_first_share_fetch_opens_a_session_naming_every_partition(share):
    share.fetcher.tick(time.monotonic())
    (call,) = share.runner.take()
    assert call.target == Broker(1)
    req = on_wire(call)
    assert (req.group_id, req.member_id, req.share_session_epoch) == ("g", "m-1", 0)
    assert (req.max_wait_ms, req.max_records, req.batch_size) == (100, 500, 500)
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in req.topics] \
        == [(TID, [0, 1])]
    assert not any(p.acknowledgement_batches for p in req.topics[0].partitions)
    assert req.forgotten_topics_data == []
    # version 0 sizes partitions instead of counting records
    v0 = on_wire(call, 0)
    assert all(p.partition_max_bytes == 1048576 for p in v0.topics[0].partitions)
    # one request per session at a time
    share.fetcher.tick(time.monotonic())
    assert share.runner.take() == []


def test_no_fetch_before_the_member_has_joined(share):
    share.member.epoch = 0
    share.fetcher.tick(time.monotonic())
    assert share.runner.take() == []


def test_an_answer_queues_the_acquired_records_and_steps_the_epoch(share):
    f = share.fetcher
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    assert answer(call, fetch_answer([(0, batch_bytes(0, 5), [(2, 3, 1)], 0, 0),
                                      (1, None, [], 0, 0)])) is None
    (chunk,) = list(f.chunks)
    assert (chunk.node, chunk.part.key, chunk.acquired) == (1, ("t", 0), [(2, 3, 1)])
    assert [b.base_offset for b in chunk.batches] == [0]
    session = f.sessions[1]
    assert session.epoch == 1 and session.partitions == {("t", 0), ("t", 1)}
    # a fetch waits until the application has taken what was fetched
    f.tick(time.monotonic())
    assert share.runner.take() == []
    assert f.take_chunk() is chunk
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    req = on_wire(call)
    assert req.share_session_epoch == 1
    assert req.topics == [] and req.forgotten_topics_data == []   # nothing new


def test_acknowledgements_ride_on_the_next_fetch_and_their_outcome_is_kept(share):
    f = share.fetcher
    f.tick(time.monotonic())
    answer(share.runner.take()[0], fetch_answer([(0, batch_bytes(0, 4), [(0, 3, 1)], 0, 0)]))
    f.take_chunk()
    waiter = CommitWaiter(1)
    f.acknowledge([AckBatch(1, ("t", 0), [AckRange(0, 1, Wire.ACCEPT),
                                          AckRange(2, 2, Wire.RELEASE),
                                          AckRange(3, 3, Wire.REJECT)], waiter)], now=False)
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    req = on_wire(call)
    assert call.api_key == ApiKey.SHARE_FETCH and req.share_session_epoch == 1
    (part,) = req.topics[0].partitions
    assert part.partition_index == 0
    assert [(b.first_offset, b.last_offset, b.acknowledge_types)
            for b in part.acknowledgement_batches] == [(0, 1, [1]), (2, 2, [2]), (3, 3, [3])]
    assert f.acks == []
    answer(call, fetch_answer([(0, None, [], 0, ErrorCode.INVALID_RECORD_STATE)]))
    assert waiter.done.is_set()
    assert waiter.results[("t", 0)].code() == ErrorCode.INVALID_RECORD_STATE
    (outcome,) = f.take_outcomes()
    assert outcome.offsets == {("t", 0): {0, 1, 2, 3}}
    assert outcome.error.code() == ErrorCode.INVALID_RECORD_STATE


def test_a_commit_sends_a_share_acknowledge_not_a_fetch(share):
    f = share.fetcher
    f.tick(time.monotonic())
    answer(share.runner.take()[0], fetch_answer([(0, batch_bytes(0, 2), [(0, 1, 1)], 0, 0)]))
    f.take_chunk()
    waiter = CommitWaiter(1)
    f.acknowledge([AckBatch(1, ("t", 0), [AckRange(0, 1, Wire.ACCEPT)], waiter)], now=True)
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    assert call.api_key == ApiKey.SHARE_ACKNOWLEDGE
    req = on_wire(call)
    assert req.share_session_epoch == 1
    assert [(p.partition_index, [(b.first_offset, b.last_offset, b.acknowledge_types)
                                 for b in p.acknowledgement_batches])
            for p in req.topics[0].partitions] == [(0, [(0, 1, [1])])]
    answer(call, ShareAcknowledgeResponse(responses=[
        ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse(topic_id=TID, partitions=[
            ShareAcknowledgeResponse.PartitionData(partition_index=0, error_code=0)])]))
    assert waiter.done.is_set() and waiter.results == {("t", 0): None}
    assert f.sessions[1].epoch == 2


def test_a_partition_no_longer_assigned_is_forgotten(share):
    f = share.fetcher
    f.tick(time.monotonic())
    answer(share.runner.take()[0], fetch_answer([]))
    f.set_assignment(ShareAssignment({TID: (0,)}))
    f.tick(time.monotonic())
    req = on_wire(share.runner.take()[0])
    assert req.share_session_epoch == 1 and req.topics == []
    assert [(t.topic_id, t.partitions) for t in req.forgotten_topics_data] == [(TID, [1])]


def test_acknowledgements_of_a_partition_no_longer_assigned_forget_it_again(share):
    """The records of t [1] are acknowledged after t [1] stopped being this member's:
    the ShareFetch carrying them names t [1] and forgets it in the same request (Kafka
    adds what a ShareFetch names to the session, then drops what it forgets). Named only,
    the broker kept fetching t [1] for this member: records of a partition assigned to
    another member acquired here, and in a fault run left acquired."""
    f = share.fetcher
    f.tick(time.monotonic())
    answer(share.runner.take()[0], fetch_answer([(1, batch_bytes(0, 1), [(0, 0, 1)], 0, 0)]))
    f.take_chunk()
    f.set_assignment(ShareAssignment({TID: (0,)}))
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    assert [(t.topic_id, t.partitions) for t in on_wire(call).forgotten_topics_data] == \
        [(TID, [1])]
    answer(call, fetch_answer([]))
    f.acknowledge([AckBatch(1, ("t", 1), [AckRange(0, 0, Wire.ACCEPT)])], now=False)
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    req = on_wire(call)
    assert req.share_session_epoch == 2
    assert acked_ranges(req) == [(1, [(0, 0)])]
    assert [(t.topic_id, t.partitions) for t in req.forgotten_topics_data] == [(TID, [1])]
    answer(call, fetch_answer([]))
    assert f.sessions[1].partitions == {("t", 0)}


def test_a_broker_left_without_assigned_partitions_forgets_them_once(share):
    """A fetch of a partition no longer this member's would still take its records: the
    session at a broker none of whose partitions is assigned any more forgets them."""
    f = share.fetcher
    f.tick(time.monotonic())
    answer(share.runner.take()[0], fetch_answer([]))
    share.runner.cluster.metadata.leaders[("t", 0)] = 2      # t [0] moves to broker 2
    f.set_assignment(ShareAssignment({TID: (0,)}))           # and t [1] is not ours
    f.tick(time.monotonic())
    calls = {c.target.node_id: c for c in share.runner.take()}
    to_one, to_two = on_wire(calls[1]), on_wire(calls[2])
    assert to_one.topics == [] and to_one.share_session_epoch == 1
    assert [(t.topic_id, t.partitions) for t in to_one.forgotten_topics_data] == \
        [(TID, [0, 1])]
    assert to_two.share_session_epoch == 0
    assert [p.partition_index for p in to_two.topics[0].partitions] == [0]
    answer(calls[1], fetch_answer([]))
    assert f.sessions[1].partitions == set()
    f.tick(time.monotonic())
    assert [c.target.node_id for c in share.runner.take()] == []   # 2's still in flight


@pytest.mark.parametrize("code", [ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                  ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                  ErrorCode.REQUEST_TIMED_OUT])
def test_a_refused_share_session_starts_again_and_resends_its_acknowledgements(share, code):
    """INVALID_SHARE_SESSION_EPOCH (or any retriable error) refuses the whole request and
    the session goes on: the records are still this member's, so their acknowledgements
    go again once a new session is open (an opening ShareFetch may carry none), refusal
    after refusal, until ``request.timeout.ms`` has passed since the first; then they
    fail with the error. (Failed at once, or at the second refusal, they left the records
    acquired until their locks expired: two refusals in a row happened in the fault
    runs.)"""
    f = share.fetcher
    f.tick(time.monotonic())
    answer(share.runner.take()[0], fetch_answer([(0, batch_bytes(0, 1), [(0, 0, 1)], 0, 0)]))
    f.take_chunk()
    waiter = CommitWaiter(1)
    batch = AckBatch(1, ("t", 0), [AckRange(0, 0, Wire.ACCEPT)], waiter)
    f.acknowledge([batch], now=False)
    refused = ShareFetchResponse(error_code=code, responses=[])
    f.tick(time.monotonic())
    answer(share.runner.take()[0], refused)
    assert not waiter.done.is_set() and f.acks == [batch]
    assert f.take_errors() == []           # retried: no error event for the application
    assert f.sessions[1].epoch == 0
    for attempt in range(4):
        f.sessions[1].backoff_until = 0.0
        f.tick(time.monotonic())
        (call,) = share.runner.take()
        req = on_wire(call)
        assert req.share_session_epoch == 0
        assert [p.partition_index for p in req.topics[0].partitions] == [0, 1]
        assert not any(p.acknowledgement_batches for p in req.topics[0].partitions)
        answer(call, fetch_answer([]))
        # the session is open: the acknowledgement goes with the next request
        f.tick(time.monotonic())
        req = on_wire(share.runner.calls[-1])
        assert req.share_session_epoch == 1
        (part,) = req.topics[0].partitions
        assert [(b.first_offset, b.last_offset)
                for b in part.acknowledgement_batches] == [(0, 0)]
        if attempt == 3:
            batch.retry_until = time.monotonic()     # request.timeout.ms has passed
            break
        answer(share.runner.take()[-1], refused)
        assert not waiter.done.is_set() and f.acks == [batch], attempt
    answer(share.runner.take()[-1], refused)
    assert waiter.done.is_set()
    assert waiter.results[("t", 0)].code() == code
    assert f.take_errors() == []


def holding_one_record(share):
    """The fetcher after a fetch acquired t [0] offset 0 for the member (session epoch 1,
    the chunk taken)."""
    f = share.fetcher
    f.tick(time.monotonic())
    answer(share.runner.take()[0], fetch_answer([(0, batch_bytes(0, 1), [(0, 0, 1)], 0, 0)]))
    f.take_chunk()
    return f


def ack_one_then_answer(share, code):
    """The fetcher holding t [0] offset 0 (holding_one_record), its ACCEPT riding on the
    next ShareFetch, that request refused whole with ``code``: (fetcher, the ACCEPT's
    waiter)."""
    f = holding_one_record(share)
    waiter = CommitWaiter(1)
    f.acknowledge([AckBatch(1, ("t", 0), [AckRange(0, 0, Wire.ACCEPT)], waiter)], now=False)
    f.tick(time.monotonic())
    answer(share.runner.take()[0], ShareFetchResponse(error_code=code, responses=[]))
    return f, waiter


def reopen(share):
    """Open the next session (its opening ShareFetch answered with nothing)."""
    f = share.fetcher
    f.sessions[1].backoff_until = 0.0
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    assert on_wire(call).share_session_epoch == 0
    answer(call, fetch_answer([]))


def test_an_ended_share_session_gave_its_records_back(share):
    """SHARE_SESSION_NOT_FOUND: the broker's session ended (with the connection that
    opened it, or with the member) and its records went back to the group. The refused
    acknowledgements fail at once, and one handed over later for a record of that
    session is not sent (it would be refused, and refuse the partition's others with
    it): it fails as INVALID_RECORD_STATE."""
    f, first = ack_one_then_answer(share, ErrorCode.SHARE_SESSION_NOT_FOUND)
    assert first.done.is_set() and f.acks == []
    assert first.results[("t", 0)].code() == ErrorCode.SHARE_SESSION_NOT_FOUND
    # a record acquired under the ended session, acknowledged again (explicit mode)
    f = share.fetcher
    late = CommitWaiter(1)
    f._holding.setdefault(1, {}).setdefault(("t", 0), set()).add(5)
    f._give_back(1, None)
    reopen(share)
    f.acknowledge([AckBatch(1, ("t", 0), [AckRange(5, 6, Wire.ACCEPT)], late)], now=True)
    f.tick(time.monotonic())
    sent = [on_wire(c) for c in share.runner.take()]
    wire = [(b.first_offset, b.last_offset) for r in sent for t in r.topics
            for p in t.partitions for b in p.acknowledgement_batches]
    assert wire == [(6, 6)]                       # offset 5 not sent
    assert late.results[("t", 0)].code() == ErrorCode.INVALID_RECORD_STATE


def test_a_share_session_end_gives_back_only_the_records_of_its_partitions(share):
    """Kafka releases the member's records of the ended session's partitions only. t [0]
    offset 0 is acquired in session 1; a refusal has session 2 open naming t [1] only
    (t [0] no longer assigned) and acquire t [1] offset 0; session 2 ends
    (SHARE_SESSION_NOT_FOUND). t [1]'s record went back: its acknowledgement fails, not
    sent. t [0]'s is still the member's: its acknowledgement goes in session 3 (taken as
    given back and dropped, the record stayed acquired until its lock expired)."""
    f = holding_one_record(share)
    f.set_assignment(ShareAssignment({TID: (1,)}))
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    answer(call, ShareFetchResponse(error_code=ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                    responses=[]))
    f.sessions[1].backoff_until = 0.0
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    req = on_wire(call)
    assert req.share_session_epoch == 0
    assert [p.partition_index for t in req.topics for p in t.partitions] == [1]
    answer(call, fetch_answer([(1, batch_bytes(0, 1), [(0, 0, 1)], 0, 0)]))
    f.take_chunk()
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    answer(call, ShareFetchResponse(error_code=ErrorCode.SHARE_SESSION_NOT_FOUND,
                                    responses=[]))
    kept, lost = CommitWaiter(1), CommitWaiter(1)
    f.acknowledge([AckBatch(1, ("t", 0), [AckRange(0, 0, Wire.ACCEPT)], kept),
                   AckBatch(1, ("t", 1), [AckRange(0, 0, Wire.ACCEPT)], lost)], now=False)
    reopen(share)
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    req = on_wire(call)
    assert req.share_session_epoch == 1
    assert acked_ranges(req) == [(0, [(0, 0)])]
    assert [(t.topic_id, t.partitions) for t in req.forgotten_topics_data] == [(TID, [0])]
    assert lost.done.is_set()
    assert lost.results[("t", 1)].code() == ErrorCode.INVALID_RECORD_STATE
    assert not kept.done.is_set()
    answer(call, fetch_answer([]))
    assert kept.done.is_set() and kept.results[("t", 0)] is None


def test_a_connection_lost_with_an_opening_share_fetch_gives_back_the_old_sessions(share):
    """A refusal leaves the broker's session in place until an opening ShareFetch replaces
    it: the connection lost with that opening request in flight (arrived or not, unknown)
    ends the old session or the new one, so the records of the partitions of both are
    taken as given back; those of neither stay held."""
    f = holding_one_record(share)              # t [0] offset 0, session naming t [0], t [1]
    f._holding[1][("t", 2)] = {7}              # of an earlier session, in neither
    f.set_assignment(ShareAssignment({TID: (1,)}))
    f.tick(time.monotonic())
    answer(share.runner.take()[0], ShareFetchResponse(
        error_code=ErrorCode.INVALID_SHARE_SESSION_EPOCH, responses=[]))
    f.sessions[1].backoff_until = 0.0
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    assert on_wire(call).share_session_epoch == 0
    call.reroute(KafkaError(KafkaError._TRANSPORT, "connection closed"), True)
    assert f._given_back[1] == {("t", 0): {0}}
    assert f._holding[1] == {("t", 2): {7}}


def test_a_request_lost_with_its_connection_is_not_sent_again(share):
    """The connection closed with a ShareFetch carrying acknowledgements: the call ends
    (no copy with the same epoch on a new connection), the session opens again, the
    acknowledgements fail with the transport error (applied or not, unknown), and the
    records of the session are given back."""
    f = holding_one_record(share)
    waiter = CommitWaiter(1)
    f.acknowledge([AckBatch(1, ("t", 0), [AckRange(0, 0, Wire.ACCEPT)], waiter)], now=False)
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    assert call.reroute is not None
    f._holding[1] = {("t", 1): {3}}
    call.reroute(KafkaError(KafkaError._TRANSPORT, "connection closed"), True)
    assert waiter.done.is_set()
    assert waiter.results[("t", 0)].code() == KafkaError._TRANSPORT
    assert f.sessions[1].epoch == 0 and not f.sessions[1].in_flight
    assert f._given_back[1] == {("t", 1): {3}}
    assert f.take_errors() == []                 # no error event for a lost connection


def test_acknowledgements_dropped_for_want_of_a_session_are_answered_once(share):
    """No session to carry them and none to open (the member not in the group): each
    acknowledgement is answered once, not at every turn of the I/O loop (which ran the
    callback again and again and counted one waiter's partition many times)."""
    f = holding_one_record(share)
    f.sessions[1].epoch = 0
    share.member.epoch = 0                         # fenced: joining again
    waiter = CommitWaiter(2)
    f.acknowledge([AckBatch(1, ("t", 0), [AckRange(0, 0, Wire.ACCEPT)], waiter)], now=True)
    for _ in range(3):
        f.tick(time.monotonic())
    assert f.acks == [] and len(f.take_outcomes()) == 1
    assert not waiter.done.is_set()                # one of its two partitions answered


def test_one_request_never_names_an_offset_twice(share):
    """Two acknowledgements of one offset (a record delivered again while the first one
    waited): the broker refuses a partition's acknowledgements whole when two name one
    offset, so the second waits for the next request."""
    f = holding_one_record(share)
    f.acknowledge([AckBatch(1, ("t", 0), [AckRange(0, 0, Wire.ACCEPT)]),
                   AckBatch(1, ("t", 0), [AckRange(0, 1, Wire.ACCEPT)])], now=True)
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    (part,) = on_wire(call).topics[0].partitions
    assert [(b.first_offset, b.last_offset) for b in part.acknowledgement_batches] == [(0, 0)]
    assert [[(r.first, r.last) for r in b.ranges] for b in f.acks] == [[(0, 1)]]


def test_records_acquired_as_the_member_closes_are_released(share):
    f = share.fetcher
    f.tick(time.monotonic())
    call = share.runner.take()[0]
    f.close_sessions(lambda: None)
    answer(call, fetch_answer([(0, batch_bytes(0, 3), [(0, 2, 1)], 0, 0)]))
    assert not f.chunks
    assert [(b.key, b.ranges) for b in f.acks] == [
        (("t", 0), [AckRange(0, 2, Wire.RELEASE)])]
    assert f.flush_acks


def test_records_of_a_partition_no_longer_assigned_are_still_handed_out(share):
    f = share.fetcher
    f.tick(time.monotonic())
    call = share.runner.take()[0]
    f.set_assignment(ShareAssignment({TID: (1,)}))
    f._resolve()
    answer(call, fetch_answer([(0, batch_bytes(0, 3), [(0, 2, 1)], 0, 0)]))
    assert [(c.part.key, c.acquired) for c in f.chunks] == [(("t", 0), [(0, 2, 1)])]
    assert f.acks == []


def test_close_sends_the_last_acknowledgements_with_epoch_minus_one(share):
    f = share.fetcher
    f.tick(time.monotonic())
    answer(share.runner.take()[0], fetch_answer([(0, batch_bytes(0, 2), [(0, 1, 1)], 0, 0)]))
    f.take_chunk()
    f.acknowledge([AckBatch(1, ("t", 0), [AckRange(0, 1, Wire.ACCEPT)])], now=True)
    closed = []
    f.close_sessions(lambda: closed.append(True))
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    assert call.api_key == ApiKey.SHARE_ACKNOWLEDGE
    req = on_wire(call)
    assert req.share_session_epoch == -1
    assert req.topics[0].partitions[0].acknowledgement_batches[0].acknowledge_types == [1]
    assert not closed
    answer(call, ShareAcknowledgeResponse(responses=[]))
    f.tick(time.monotonic())
    assert closed == [True] and share.runner.take() == []
    # Closed for good: the member has not left yet, but a fetch now would open a new
    # session and acquire records again (their delivery counts going up for nothing).
    f.tick(time.monotonic())
    assert share.runner.take() == []


def test_heartbeats_join_then_send_the_subscription_only_when_it_changes():
    runner = FakeRunner()
    assigned = []
    member = ShareMember(config(), runner, assigned.append, lambda e: None)
    member._set_topics(["t"])
    member.tick(time.monotonic())
    (call,) = runner.take()
    assert call.target == Coordinator(0, "g")
    req = on_wire(call)
    assert (req.member_epoch, req.subscribed_topic_names) == (0, ["t"])
    assert req.member_id   # the member's own id, replaced by the coordinator's
    resp = ShareGroupHeartbeatResponse(
        member_id="from-coordinator", member_epoch=5, heartbeat_interval_ms=2000,
        assignment=ShareGroupHeartbeatResponse.Assignment(topic_partitions=[
            ShareGroupHeartbeatResponse.TopicPartitions(topic_id=TID, partitions=[0, 1])]))
    assert answer(call, resp) is None
    assert assigned == [ShareAssignment({TID: (0, 1)})]
    assert (member.member_id, member.epoch, member.heartbeat_interval) == \
        ("from-coordinator", 5, 2.0)
    member.tick(time.monotonic() + 2.5)
    req = on_wire(runner.take()[0])
    assert (req.member_id, req.member_epoch, req.subscribed_topic_names) == \
        ("from-coordinator", 5, None)


def test_a_fenced_member_loses_its_partitions_and_joins_again():
    runner = FakeRunner()
    assigned = []
    member = ShareMember(config(), runner, assigned.append, lambda e: None)
    member._set_topics(["t"])
    member.epoch = 5
    member.tick(time.monotonic() + 100)
    answer(runner.take()[0], ShareGroupHeartbeatResponse(
        error_code=ErrorCode.FENCED_MEMBER_EPOCH, member_epoch=0))
    assert member.epoch == 0 and assigned == [ShareAssignment({})]
    member.tick(time.monotonic())
    req = on_wire(runner.take()[0])
    assert (req.member_epoch, req.subscribed_topic_names) == (0, ["t"])


def test_coordinator_moved_is_retried_by_the_runner():
    runner = FakeRunner()
    member = ShareMember(config(), runner, lambda a: None, lambda e: None)
    member._set_topics(["t"])
    member.tick(time.monotonic())
    again = answer(runner.take()[0], ShareGroupHeartbeatResponse(
        error_code=ErrorCode.NOT_COORDINATOR))
    assert again is not None and again.code() == ErrorCode.NOT_COORDINATOR


def test_leaving_sends_epoch_minus_one_and_ends_when_answered():
    runner = FakeRunner()
    member = ShareMember(config(), runner, lambda a: None, lambda e: None)
    member._set_topics(["t"])
    member.epoch = 7
    done = []
    member._leave(lambda: done.append(True))
    (call,) = runner.take()
    assert on_wire(call).member_epoch == -1
    assert not done
    answer(call, ShareGroupHeartbeatResponse(member_epoch=-1))
    assert done == [True] and member.epoch == 0
    member.tick(time.monotonic() + 100)    # no heartbeat while leaving or after
    member._set_topics(None)
    member.tick(time.monotonic() + 100)
    assert runner.take() == []


# -- the application side (a consumer whose brokers are never reached) ----------------

@pytest.fixture
def offline():
    made = []

    def make(cls=ShareConsumer, **conf):
        c = cls({"group.id": "g", "bootstrap.servers": "127.0.0.1:1", **conf})
        made.append(c)
        # The I/O thread's fetcher would settle the acknowledgements (no session):
        # these tests look at what the application side hands over.
        stopped = threading.Event()
        c._io.call_soon(lambda: (c._io.remove_tick(c._fetcher.tick), stopped.set()))
        assert stopped.wait(10)
        c.subscribe(["t"])
        return c

    yield make
    for c in made:
        c._io.call_soon(c._io.add_tick, c._fetcher.tick)
        c.close()


def queue_chunk(consumer, base, count, acquired, partition=0):
    data = batch_bytes(base, count)
    with consumer._fetcher.lock:
        consumer._fetcher.chunks.append(ShareChunk(
            1, PartitionState("t", partition), list(read_batches(data)), acquired))
    consumer._ready.set()


def handed_acks(consumer):
    with consumer._fetcher.lock:
        acks, consumer._fetcher.acks = consumer._fetcher.acks, []
    return sorted((b.key, r.first, r.last, int(r.kind)) for b in acks for r in b.ranges)


def test_poll_hands_out_only_acquired_records_with_their_delivery_count(offline):
    c = offline()
    queue_chunk(c, 0, 6, [(1, 2, 1), (4, 4, 3)])
    msgs = c.poll(5)
    assert isinstance(msgs, Messages)
    assert [(m.offset(), m.value(), m.delivery_count()) for m in msgs] == \
        [(1, b"v1", 1), (2, b"v2", 1), (4, b"v4", 3)]
    # implicit mode: the next poll accepts them
    c.poll(0)
    assert handed_acks(c) == [(("t", 0), 1, 2, 1), (("t", 0), 4, 4, 1)]


def test_acquired_offsets_without_a_record_are_acknowledged_as_gaps(offline):
    c = offline()
    # batches hold offsets 0-1 and 5-6; 2-4 are not records (compacted, control)
    with c._fetcher.lock:
        batches = list(read_batches(batch_bytes(0, 2) + batch_bytes(5, 2)))
        c._fetcher.chunks.append(ShareChunk(1, PartitionState("t", 0), batches,
                                            [(0, 8, 1)]))
    msgs = c.poll(5)
    assert [m.offset() for m in msgs] == [0, 1, 5, 6]
    # 2-4: gaps; 7-8 past the data: released (not read, not lost)
    assert handed_acks(c) == [(("t", 0), 2, 4, 0), (("t", 0), 7, 8, 2)]


def test_max_poll_records_bounds_a_poll(offline):
    c = offline(**{"max.poll.records": 3})
    queue_chunk(c, 0, 5, [(0, 4, 1)])
    assert [m.offset() for m in c.poll(5)] == [0, 1, 2]
    assert [m.offset() for m in c.poll(5)] == [3, 4]


def test_explicit_mode_refuses_the_next_poll_until_every_record_is_acknowledged(offline):
    c = offline(**{"share.acknowledgement.mode": "explicit"})
    queue_chunk(c, 0, 3, [(0, 2, 1)])
    msgs = c.poll(5)
    assert len(msgs) == 3
    c.acknowledge(msgs[0], AcknowledgeType.ACCEPT)
    c.acknowledge_offset("t", 0, 1, AcknowledgeType.RELEASE)
    with pytest.raises(IllegalStateException):
        c.poll(0)
    c.acknowledge(msgs[2], AcknowledgeType.REJECT)
    c.poll(0)
    assert handed_acks(c) == [(("t", 0), 0, 0, 1), (("t", 0), 1, 1, 2), (("t", 0), 2, 2, 3)]
    with pytest.raises(IllegalStateException):   # no longer in flight
        c.acknowledge(msgs[0])


def test_an_acknowledgement_of_an_earlier_delivery_is_refused_and_not_sent(offline):
    """Offset 0 released, then delivered again: the message of its first delivery names
    a record the application has not seen processed in this delivery. Kafka's client
    takes acknowledgements of the last poll()'s records only; sent, this one settled
    the new delivery."""
    c = offline(**{"share.acknowledgement.mode": "explicit"})
    queue_chunk(c, 0, 2, [(0, 1, 1)])
    old, other = c.poll(5)
    c.acknowledge(old, AcknowledgeType.RELEASE)
    c.acknowledge(other)
    assert c.poll(0).is_empty()
    handed_acks(c)
    queue_chunk(c, 0, 1, [(0, 0, 2)])             # offset 0 again, delivery count 2
    (new,) = c.poll(5)
    assert (new.offset(), new.value(), new.delivery_count()) == (0, old.value(), 2)
    with pytest.raises(IllegalStateException, match="another delivery"):
        c.acknowledge(old, AcknowledgeType.ACCEPT)
    c.commit_async()
    assert handed_acks(c) == []                   # nothing sent for it
    c.acknowledge(new, AcknowledgeType.REJECT)
    with pytest.raises(IllegalStateException, match="another delivery"):
        c.acknowledge(old, AcknowledgeType.ACCEPT)   # the given REJECT stays
    c.commit_async()
    assert handed_acks(c) == [(("t", 0), 0, 0, int(Wire.REJECT))]


def test_a_message_poll_did_not_return_is_acknowledged_by_its_offset(offline):
    c = offline(**{"share.acknowledgement.mode": "explicit"})
    queue_chunk(c, 0, 1, [(0, 0, 1)])
    (msg,) = c.poll(5)
    c.acknowledge(Message("t", 0, 0), AcknowledgeType.REJECT)
    c.commit_async()
    assert handed_acks(c) == [(("t", 0), 0, 0, int(Wire.REJECT))]
    with pytest.raises(IllegalStateException, match="not in flight"):
        c.acknowledge(msg)


@pytest.mark.parametrize("name,why", [("a b", "only ASCII letters"), (".", "'.' and '..'"),
                                      ("x" * 250, "the limit is 249")])
def test_subscribe_refuses_names_kafka_cannot_have(offline, name, why):
    c = offline()
    with pytest.raises(ValueError, match=f"Invalid topic name .*{why}"):
        c.subscribe(["u", name])
    assert c.subscription() == ["t"]              # the subscription kept
    c.subscribe(["a.b_c-D9", "x" * 249])
    assert c.subscription() == ["a.b_c-D9", "x" * 249]


def test_acknowledge_argument_rules(offline):
    implicit = offline()
    queue_chunk(implicit, 0, 1, [(0, 0, 1)])
    (msg,) = implicit.poll(5)
    with pytest.raises(IllegalStateException):
        implicit.acknowledge(msg)
    c = offline(**{"share.acknowledgement.mode": "explicit"})
    with pytest.raises(TypeError):
        c.acknowledge("not a message")
    with pytest.raises(ValueError):
        c.acknowledge_offset("t", 0, 0, 7)
    with pytest.raises(ValueError):
        c.acknowledge_offset("t", -1, 0)
    with pytest.raises(TypeError):
        c.acknowledge_offset("t", 0, 0, "ACCEPT")
    with pytest.raises(IllegalStateException):
        c.acknowledge_offset("t", 0, 0)          # not in flight


def test_close_releases_what_was_fetched_and_not_handed_out(offline):
    c = offline(**{"share.acknowledgement.mode": "explicit", "max.poll.records": 1})
    queue_chunk(c, 0, 3, [(0, 2, 1)])
    (first,) = c.poll(5)
    queue_chunk(c, 10, 2, [(10, 11, 1)], partition=1)
    acks = c._take_acks(closing=True) + c._unhanded()
    got = sorted((b.key, r.first, r.last, int(r.kind)) for b in acks for r in b.ranges)
    assert got == [(("t", 0), 0, 0, 2), (("t", 0), 1, 1, 2), (("t", 0), 2, 2, 2),
                   (("t", 1), 10, 11, 2)]


def test_commit_sync_without_acknowledgements_is_empty_and_checks_its_timeout(offline):
    c = offline()
    assert c.commit_sync(0.1) == {}
    with pytest.raises(TypeError):
        c.commit_sync(None)


def answer_acks_soon(c, partitions=1):
    """A thread that answers (accepts) the acknowledgements handed to the fetcher, once
    a commit waits for those of ``partitions`` partitions."""
    def answer_them():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with c._fetcher.lock:
                acks = c._fetcher.acks
                ready = len({b.key for b in acks}) >= partitions and \
                    all(b.waiter is not None for b in acks)
                if ready:
                    c._fetcher.acks = []
            if ready:
                c._fetcher._settle(acks, None)
                return
            time.sleep(0.01)

    t = threading.Thread(target=answer_them)
    t.start()
    return t


def test_commit_sync_reports_each_partition(offline):
    c = offline()
    queue_chunk(c, 0, 2, [(0, 1, 1)])
    c.poll(5)
    t = answer_acks_soon(c)
    assert c.commit_sync(10) == {TopicPartition("t", 0): None}
    t.join()


def test_commit_sync_covers_what_a_poll_handed_over_and_was_not_sent(offline):
    """The acknowledgements a poll() handed to the I/O thread wait for the next fetch
    (a session opening, say): commit_sync() sends and waits for them too (it returned
    {} at once, and close() then found them without a session and dropped them)."""
    c = offline()
    queue_chunk(c, 0, 2, [(0, 1, 1)])
    c.poll(5)
    queue_chunk(c, 5, 1, [(5, 5, 1)], partition=1)
    c.poll(5)                       # hands t [0]'s acceptances over
    with c._fetcher.lock:
        assert [b.key for b in c._fetcher.acks] == [("t", 0)]
    t = answer_acks_soon(c, partitions=2)
    assert c.commit_sync(10) == {TopicPartition("t", 0): None, TopicPartition("t", 1): None}
    t.join()


def test_the_callback_gets_the_outcomes_and_may_not_call_the_consumer(offline):
    c = offline()
    seen = []

    def cb(offsets, exc):
        seen.append((offsets, exc))
        with pytest.raises(IllegalStateException):
            c.commit_async()

    c.set_acknowledgement_commit_callback(cb)
    c._fetcher._settle([AckBatch(1, ("t", 0), [AckRange(3, 4, Wire.ACCEPT)])], None)
    c._fetcher._settle([AckBatch(1, ("t", 1), [AckRange(7, 7, Wire.REJECT)])],
                       KafkaError(ErrorCode.INVALID_RECORD_STATE))
    c.commit_async()
    assert seen[0] == ({TopicPartition("t", 0): {3, 4}}, None)
    assert seen[1][0] == {TopicPartition("t", 1): {7}}
    assert isinstance(seen[1][1], KafkaException)
    assert seen[1][1].args[0].code() == ErrorCode.INVALID_RECORD_STATE
    with pytest.raises(TypeError):
        c.set_acknowledgement_commit_callback(3)


def test_a_second_thread_inside_a_call_is_refused(offline):
    c = offline()
    done = threading.Event()
    t = threading.Thread(target=lambda: (c.poll(30), done.set()))   # ended below
    t.start()
    deadline = time.monotonic() + 10
    while c._owner is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert c._owner is not None
    with pytest.raises(ConcurrentModificationException):
        c.subscription()
    queue_chunk(c, 0, 1, [(0, 0, 1)])   # ends the poll
    assert done.wait(10)
    t.join()
    assert c.subscription() == ["t"]


def test_construction_rules_and_closed_state():
    with pytest.raises(ValueError, match="group.id"):
        ShareConsumer({"bootstrap.servers": "127.0.0.1:1"})
    for name, value in (("group.protocol", "consumer"), ("enable.auto.commit", True),
                        ("auto.offset.reset", "earliest"), ("session.timeout.ms", 10000),
                        ("isolation.level", "read_committed")):
        with pytest.raises(ValueError, match=name):
            ShareConsumer({"group.id": "g", name: value})
    # The classic protocol's max.poll.interval.ms >= session.timeout.ms is not a share
    # group's rule (confluent-kafka takes 10 s); keyword arguments are checked too.
    with ShareConsumer({"group.id": "g", "max.poll.interval.ms": 10000}) as short:
        assert short._config["max.poll.interval.ms"] == 10000
    with pytest.raises(ValueError, match="session.timeout.ms"):
        ShareConsumer(group_id="g", session_timeout_ms=10000)
    c = ShareConsumer({"group.id": "g", "bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(IllegalStateException, match="not subscribed"):
        c.poll(0)
    with pytest.raises(ValueError):
        c.subscribe(["a", "a"])
    c.subscribe([])
    assert c.subscription() == []
    with c:
        pass
    for call in (lambda: c.poll(0), c.subscription, lambda: c.commit_sync(0.1),
                 c.commit_async, c.unsubscribe):
        with pytest.raises(IllegalStateException, match="closed"):
            call()
    c.close()   # a second close does nothing


def test_messages_is_a_read_only_sequence():
    m = Messages([1, 2, 3])
    assert (len(m), m.count(), m.is_empty(), m[1], list(m)) == (3, 3, False, 2, [1, 2, 3])
    assert isinstance(m[1:], Messages) and m[1:].records() == [2, 3]
    assert Messages().is_empty() and not Messages()
    assert [int(a) for a in AcknowledgeType] == [1, 2, 3]


def test_the_deserializing_share_consumer_marks_what_it_cannot_read(offline):
    def value(data, ctx):
        if data == b"v1":
            raise ValueError("bad value")
        return data.decode().upper()

    c = offline(DeserializingShareConsumer, **{"value.deserializer": value})
    queue_chunk(c, 0, 3, [(0, 2, 1)])
    msgs = c.poll(5)
    assert isinstance(msgs, Messages)
    assert [(m.offset(), m.value()) for m in msgs] == [(0, "V0"), (1, b"v1"), (2, "V2")]
    assert [m.error() and m.error().code() for m in msgs] == \
        [None, KafkaError._VALUE_DESERIALIZATION, None]


def test_a_member_that_stops_polling_leaves_and_joins_at_the_next_poll():
    runner = FakeRunner()
    member = ShareMember(config(**{"max.poll.interval.ms": 1000}), runner,
                         lambda a: None, lambda e: None)
    member._set_topics(["t"])
    member.epoch = 4
    member.last_poll = time.monotonic() - 5
    member.tick(time.monotonic())
    (call,) = runner.take()
    assert on_wire(call).member_epoch == -1 and member.poll_exceeded
    answer(call, ShareGroupHeartbeatResponse(member_epoch=-1))
    member.tick(time.monotonic() + 100)
    assert runner.take() == []                   # out until the application polls
    member.polled(inside=True)                   # (its call_soon runs at once here)
    member.tick(time.monotonic())
    req = on_wire(runner.take()[0])
    assert (req.member_epoch, req.subscribed_topic_names) == (0, ["t"])


def test_waiting_inside_poll_is_not_exceeding_max_poll_interval():
    runner = FakeRunner()
    member = ShareMember(config(**{"max.poll.interval.ms": 1000}), runner,
                         lambda a: None, lambda e: None)
    member._set_topics(["t"])
    member.epoch = 4
    member.polled(inside=True)
    member.tick(time.monotonic() + 60)           # a poll(60) with nothing to read
    assert not member.poll_exceeded
    assert [on_wire(c).member_epoch for c in runner.take()] == [4]   # a heartbeat


def test_statistics_say_consumer_and_count_the_share_requests(offline):
    docs = []
    c = offline(**{"statistics.interval.ms": 50, "stats_cb": docs.append})
    deadline = time.monotonic() + 10
    while not docs and time.monotonic() < deadline:
        c.poll(0.1)
    doc = json.loads(docs[0])
    assert doc["type"] == "consumer" and doc["brokers"]   # (the bootstrap broker)
    for broker in doc["brokers"].values():
        assert {"ShareFetch", "ShareAcknowledge", "ShareGroupHeartbeat"} <= set(broker["req"])


def test_acknowledging_again_before_the_commit_replaces_the_type(offline):
    c = offline(**{"share.acknowledgement.mode": "explicit"})
    queue_chunk(c, 0, 2, [(0, 1, 1)])
    first, second = c.poll(5)
    c.acknowledge(first, AcknowledgeType.REJECT)
    c.acknowledge(first, AcknowledgeType.RELEASE)
    c.acknowledge(second)
    c.commit_async()
    assert handed_acks(c) == [(("t", 0), 0, 0, 2), (("t", 0), 1, 1, 1)]
    with pytest.raises(IllegalStateException):   # sent: no longer in flight
        c.acknowledge(first)


def test_a_commit_with_fetched_records_queued_opens_the_session_it_needs(share):
    """The session was refused (INVALID_SHARE_SESSION_EPOCH: the records are still the
    member's) while fetched records wait for poll(): a commit opens a new session for
    its acknowledgements instead of failing them (they would then wait for their locks
    to expire)."""
    f = share.fetcher
    f.tick(time.monotonic())
    answer(share.runner.take()[0], fetch_answer([(0, batch_bytes(0, 2), [(0, 1, 1)], 0, 0)]))
    f.take_chunk()                                # offsets 0-1 handed out
    f.sessions[1].epoch = 0                       # the session refused meanwhile
    f.chunks.append(ShareChunk(1, PartitionState("t", 1), [], [(7, 7, 1)]))
    assert f.chunks                               # fetched, not taken by poll() yet
    waiter = f.wait_for_all([AckBatch(1, ("t", 0), [AckRange(0, 0, Wire.ACCEPT)])])
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    assert on_wire(call).share_session_epoch == 0 and not waiter.done.is_set()
    answer(call, fetch_answer([]))
    f.tick(time.monotonic())
    (call,) = share.runner.take()
    req = on_wire(call)
    assert req.share_session_epoch == 1
    assert [(b.first_offset, b.last_offset) for t in req.topics for p in t.partitions
            for b in p.acknowledgement_batches] == [(0, 0)]


def test_acknowledgements_waiting_to_go_again_are_given_back_with_their_session(share):
    """A request refused whole (NOT_LEADER_OR_FOLLOWER): its acknowledgements wait to go
    again; the next answer says the session ended (SHARE_SESSION_NOT_FOUND): the records
    went back to the group, so those acknowledgements fail instead of going (sent, one
    named a record delivered again to this member and accepted it, and the application's
    own acknowledgement of that delivery then refused the partition's others whole)."""
    f, waiter = ack_one_then_answer(share, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert not waiter.done.is_set() and len(f.acks) == 1
    reopen(share)
    f.sessions[1].backoff_until = 0.0
    f.sessions[1].in_flight = False
    # the session ends before the acknowledgement went: the next answer says so
    f._session_lost(1, f.sessions[1], KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND), [],
                    refused=True)
    f.sessions[1].backoff_until = 0.0
    f.tick(time.monotonic())
    sent = [on_wire(c) for c in share.runner.take()]
    assert [b for r in sent for t in r.topics for p in t.partitions
            for b in p.acknowledgement_batches] == []
    assert waiter.done.is_set()
    assert waiter.results[("t", 0)].code() == ErrorCode.INVALID_RECORD_STATE


@pytest.mark.parametrize("code,told", [(ErrorCode.REQUEST_TIMED_OUT, False),
                                       (ErrorCode.GROUP_AUTHORIZATION_FAILED, True)])
def test_a_heartbeat_error_is_an_event_only_when_retrying_cannot_help(code, told):
    """REQUEST_TIMED_OUT is retried after a backoff, with no error event for the
    application (it got one for every such answer); an authorization failure is told."""
    runner = FakeRunner()
    reported = []
    member = ShareMember(config(), runner, lambda a: None, reported.append)
    member._set_topics(["t"])
    member.epoch = 5
    member.tick(time.monotonic())
    (call,) = runner.take()
    assert answer(call, ShareGroupHeartbeatResponse(error_code=code, member_epoch=-1)) is None
    assert [e.code() for e in reported] == ([code] if told else [])
    assert member.epoch == 5                   # still in the group


def test_an_acknowledgement_of_an_earlier_delivery_is_not_sent(share):
    """A record came back (its session ended) and was acquired again, its chunk not yet
    taken by poll(): an acknowledgement of it handed over now is of the earlier delivery.
    Sent, it would accept the new delivery before the application saw it, and the
    application's own acknowledgement of that one would then be refused with the
    partition's others; it fails as INVALID_RECORD_STATE instead."""
    f = share.fetcher
    f.tick(time.monotonic())
    answer(share.runner.take()[0], fetch_answer([(0, batch_bytes(0, 2), [(0, 1, 2)], 0, 0)]))
    assert f.chunks                               # offsets 0-1 again, not handed out
    waiter = f.wait_for_all([AckBatch(1, ("t", 0), [AckRange(0, 0, Wire.ACCEPT)])])
    f.tick(time.monotonic())
    sent = [on_wire(c) for c in share.runner.take()]
    assert [b for r in sent for t in r.topics for p in t.partitions
            for b in p.acknowledgement_batches] == []
    assert waiter.results[("t", 0)].code() == ErrorCode.INVALID_RECORD_STATE
    f.take_chunk()                                # handed out: now acknowledgeable
    f.acknowledge([AckBatch(1, ("t", 0), [AckRange(0, 1, Wire.ACCEPT)])], now=True)
    f.tick(time.monotonic())
    sent = [on_wire(c) for c in share.runner.take()]
    assert [(b.first_offset, b.last_offset) for r in sent for t in r.topics
            for p in t.partitions for b in p.acknowledgement_batches] == [(0, 1)]


# -- issue 16's rules: raising callbacks, threads, close() from another thread, fork ------

def test_a_raising_commit_callback_during_a_wait_loses_no_record(offline):
    # The answer to an acknowledgement comes while poll() waits, with records: the
    # callback raises before the call takes any of them, and the next poll() returns
    # them (taken and dropped with the exception, the poll after would have accepted
    # them unseen).
    c = offline()
    c.set_acknowledgement_commit_callback(lambda offsets, exc: 1 / 0)
    failures = []

    def poll():
        try:
            c.poll(30)
        except ZeroDivisionError as exc:
            failures.append(exc)

    t = threading.Thread(target=poll)
    t.start()
    deadline = time.monotonic() + 10
    while c._owner is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert c._owner is not None
    with c._fetcher.lock:      # the answer and the records, seen by one wake-up
        c._fetcher.outcomes.append(SimpleNamespace(offsets={("t", 1): [9]}, error=None))
    queue_chunk(c, 0, 3, [(0, 2, 1)])
    t.join(10)
    assert not t.is_alive() and len(failures) == 1
    assert handed_acks(c) == []
    c.set_acknowledgement_commit_callback(None)
    assert [m.offset() for m in c.poll(5)] == [0, 1, 2]


def test_threads_take_turns_and_each_record_is_handed_out_once(offline):
    # Four threads polling one consumer: one call at a time (the others are refused
    # with ConcurrentModificationException, as in confluent-kafka), every record to
    # exactly one of them, in order within each batch; acknowledgements from a thread
    # that did not poll.
    c = offline(**{"max.poll.records": 7})
    got: dict = {}
    refused = []
    stop = threading.Event()

    def worker(n):
        while not stop.is_set():
            try:
                batch = c.poll(0.05)
            except ConcurrentModificationException:
                refused.append(n)
                continue
            offsets = [m.offset() for m in batch]
            assert offsets == sorted(offsets)
            got.setdefault(n, []).extend(offsets)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for base in range(0, 500, 10):
        queue_chunk(c, base, 10, [(base, base + 9, 1)])
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < 500 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join(10)
    every = sorted(o for offsets in got.values() for o in offsets)
    assert every == list(range(500))
    # each batch's records accepted by the next poll, whichever thread made it; the
    # last batch by a commit from this thread
    c.commit_async()
    acked = sorted(o for key, first, last, kind in handed_acks(c)
                   for o in range(first, last + 1) if (key, kind) == (("t", 0), Wire.ACCEPT))
    assert acked == list(range(500))


def test_explicit_acknowledgements_from_other_threads_are_sent(offline):
    c = offline(**{"share.acknowledgement.mode": "explicit"})
    queue_chunk(c, 0, 4, [(0, 3, 1)])
    batches = []
    t = threading.Thread(target=lambda: batches.append(c.poll(5)))
    t.start()
    t.join(10)
    (batch,) = batches
    kinds = [AcknowledgeType.ACCEPT, AcknowledgeType.REJECT, AcknowledgeType.RELEASE,
             AcknowledgeType.ACCEPT]
    ackers = [threading.Thread(target=c.acknowledge, args=(m, k))
              for m, k in zip(batch, kinds)]
    for t in ackers:
        t.start()
    for t in ackers:
        t.join(10)
    t = threading.Thread(target=c.commit_async)
    t.start()
    t.join(10)
    assert handed_acks(c) == [(("t", 0), 0, 0, 1), (("t", 0), 1, 1, 3),
                              (("t", 0), 2, 2, 2), (("t", 0), 3, 3, 1)]


def test_the_arguments_of_every_method_are_checked(offline):
    c = offline(**{"share.acknowledgement.mode": "explicit"})
    for call, error in (
            (lambda: c.poll("1"), TypeError), (lambda: c.commit_sync("1"), TypeError),
            (lambda: c.commit_sync(True), TypeError), (lambda: c.acknowledge(None), TypeError),
            (lambda: c.acknowledge(Message()), ValueError),
            (lambda: c.acknowledge_offset(b"t", 0, 0), TypeError),
            (lambda: c.acknowledge_offset("t", 0.0, 0), TypeError),
            (lambda: c.acknowledge_offset("t", 0, -1), ValueError),
            (lambda: c.set_acknowledgement_commit_callback(5), TypeError),
            (lambda: c.subscribe("t"), TypeError), (lambda: c.subscribe([1]), TypeError),
            (lambda: c.subscribe([""]), ValueError),
            (lambda: c.subscribe(["^t.*"]), ValueError),
            (lambda: c.set_sasl_credentials("u", None), TypeError)):
        with pytest.raises(error):
            call()
    assert c.subscription() == ["t"]       # still usable, subscription kept
    queue_chunk(c, 0, 1, [(0, 0, 1)])
    (msg,) = c.poll(5)
    c.acknowledge(msg)
    assert c.poll(0.01).is_empty()
    for cb in ("error_cb", "stats_cb", "throttle_cb", "oauth_cb"):
        with pytest.raises(TypeError, match=cb):
            ShareConsumer({"group.id": "g", cb: 5})


CHILD_OFFLINE = """
import threading, time
from kafka_client import ShareConsumer
from kafka_client.consumer.fetcher import PartitionState
from kafka_client.consumer.share_fetcher import ShareChunk
from kafka_proto.records import RecordBatchBuilder, read_batches

def queue_chunk(c, base, count):
    b = RecordBatchBuilder()
    for i in range(count):
        b.append(b"v%d" % (base + i))
    with c._fetcher.lock:
        c._fetcher.chunks.append(ShareChunk(1, PartitionState("t", 0), list(read_batches(
            b.build(base_offset=base))), [(base, base + count - 1, 1)]))
    c._ready.set()

def inside(c):
    deadline = time.monotonic() + 10
    while c._owner is None:
        assert time.monotonic() < deadline, "the call never started"
        time.sleep(0.005)
"""


def test_close_from_another_thread_ends_a_waiting_poll(run_child):
    out = run_child(CHILD_OFFLINE + """
from kafka_client import IllegalStateException
c = ShareConsumer({"group.id": "g", "bootstrap.servers": "127.0.0.1:1"})
c.subscribe(["t"])
got = []
t = threading.Thread(target=lambda: got.append(c.poll(-1)))
t.start()
inside(c)
started = time.monotonic()
c.close()
t.join(10)
assert not t.is_alive() and len(got) == 1 and got[0].is_empty(), got
took = time.monotonic() - started
assert took < 5, took
try:
    c.poll(0)
    raise SystemExit("poll() after close() did not raise")
except IllegalStateException:
    pass
c.close()                                   # a second close does nothing
print("ok")
""", timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "ok"


@pytest.mark.parametrize("callback", ["error_cb", "stats_cb", "oauth_cb"])
def test_a_raising_client_callback_reaches_a_waiting_poll_and_close_returns(
        run_child, callback):
    # poll(-1) with no broker: the callback is served while it waits (it used to be
    # served only as poll() began), its exception ends the call, close() returns at once.
    # (oauth_cb: the first token, needed to construct the consumer, lives one second;
    # the refresh on the token thread raises)
    extra = {"error_cb": "", "stats_cb": '"statistics.interval.ms": 100,',
             "oauth_cb": '"security.protocol": "SASL_PLAINTEXT", '
                         '"sasl.mechanisms": "OAUTHBEARER",'}[callback]
    out = run_child(CHILD_OFFLINE + f"""
tokens = []
def raising(*args):
    if "{callback}" == "oauth_cb" and not tokens:
        tokens.append(1)
        return "token", time.time() + 1
    raise ValueError("application bug")
with ShareConsumer({{"group.id": "g", "bootstrap.servers": "127.0.0.1:1", {extra}
                    "{callback}": raising}}) as c:
    c.subscribe(["t"])
    try:
        c.poll(-1)
        raise SystemExit("poll() returned")
    except ValueError as exc:
        assert str(exc) == "application bug"
    queue_chunk(c, 0, 2)                    # the consumer is still usable
    polled = []
    while not polled:
        try:
            polled = [m.offset() for m in c.poll(5)]
        except ValueError:
            pass                            # the callback again: the records wait
    assert polled == [0, 1], polled
    started = time.monotonic()
took = time.monotonic() - started           # the with block's close()
assert took < 5, took
deadline = time.monotonic() + 10            # nothing left running: I/O, token threads
while threading.active_count() > 1 and time.monotonic() < deadline:
    time.sleep(0.01)
assert threading.active_count() == 1, threading.enumerate()
print("ok")
""", timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "ok"


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_gets_a_clear_error_from_every_share_consumer_method(run_child):
    out = run_child(CHILD_OFFLINE + """
import os, sys
from kafka_client import (AcknowledgeType, DeserializingShareConsumer, KafkaError,
                          KafkaException)

def refused(call):
    try:
        call()
    except KafkaException as exc:
        err = exc.args[0]
        assert err.code() == KafkaError._STATE and err.fatal(), err
        assert "fork" in err.str() and "create a new" in err.str(), err.str()
        return True
    return False

c = ShareConsumer({"group.id": "g", "bootstrap.servers": "127.0.0.1:1",
                   "share.acknowledgement.mode": "explicit"})
c.subscribe(["t"])
queue_chunk(c, 0, 2)
(msg, second) = c.poll(5)
d = DeserializingShareConsumer({"group.id": "g", "bootstrap.servers": "127.0.0.1:1",
                                "value.deserializer": lambda v, ctx: v.decode()})
d.subscribe(["t"])
waiting = []
poller = threading.Thread(target=lambda: waiting.append(d.poll(-1)))
poller.start()             # inside poll() at the fork: its guard is held in the child
inside(d)
pid = os.fork()
if pid == 0:
    calls = [lambda: c.poll(0), lambda: c.subscribe(["t"]), c.unsubscribe, c.subscription,
             lambda: c.acknowledge(msg), lambda: c.acknowledge_offset("t", 0, 1),
             lambda: c.commit_sync(1), c.commit_async,
             lambda: c.set_acknowledgement_commit_callback(None),
             lambda: c.set_sasl_credentials("u", "p"), lambda: c.list_topics(timeout=1),
             c.close, c.close, lambda: d.poll(0), d.close]
    results = [refused(call) for call in calls]
    sys.exit(0 if all(results) else 10 + results.index(False))  # atexit runs
t = time.monotonic()
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    if time.monotonic() - t > 5:
        os.kill(pid, 9)
        raise SystemExit("the child did not exit within 5 s")
    time.sleep(0.01)
assert os.waitstatus_to_exitcode(status) == 0, os.waitstatus_to_exitcode(status)
# the parent's consumers go on
c.acknowledge(msg, AcknowledgeType.REJECT)
c.acknowledge(second)
assert c.subscription() == ["t"]
queue_chunk(c, 2, 1)
assert [m.offset() for m in c.poll(5)] == [2]
c.acknowledge_offset("t", 0, 2)
d.close()                  # ends the parent's poll
poller.join(10)
assert waiting and waiting[0].is_empty(), waiting
c.close()
print("ok")
""", timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.split()[-1] == "ok"


def test_ctrl_c_in_a_deserializer_puts_the_batch_back(offline):
    # KeyboardInterrupt is no Exception: it ends poll(). The batch goes back whole,
    # nothing deserialized yet; kept as handed out, the next poll() accepted it unseen.
    interrupted = []

    def value(data, ctx):
        if data == b"v1" and not interrupted:
            interrupted.append(1)
            raise KeyboardInterrupt
        return data.decode().upper()

    c = offline(DeserializingShareConsumer, **{"value.deserializer": value})
    queue_chunk(c, 0, 3, [(0, 2, 1)])
    with pytest.raises(KeyboardInterrupt):
        c.poll(5)
    msgs = c.poll(5)
    assert [(m.offset(), m.value(), m.error()) for m in msgs] == \
        [(0, "V0", None), (1, "V1", None), (2, "V2", None)]
    assert handed_acks(c) == []                  # none accepted before it was returned
    c.commit_async()
    assert handed_acks(c) == [(("t", 0), 0, 2, int(Wire.ACCEPT))]


def test_close_from_another_thread_ends_a_waiting_commit_sync(offline, monkeypatch):
    # No answer will come (the fetcher is stopped here): the commit waits until close()
    # from this thread ends it, its partition given _DESTROY.
    from kafka_client.consumer import share_consumer
    monkeypatch.setattr(share_consumer, "CLOSE_ACK_WAIT_S", 1.0)   # no session will close
    monkeypatch.setattr(share_consumer, "CLOSE_LEAVE_WAIT_S", 1.0)
    c = offline()
    queue_chunk(c, 0, 3, [(0, 2, 1)])
    assert len(c.poll(5)) == 3
    results = []
    t = threading.Thread(target=lambda: results.append(c.commit_sync(60)))
    t.start()
    deadline = time.monotonic() + 10
    while c._owner is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert c._owner is not None
    c.close()
    t.join(10)
    assert not t.is_alive()
    ((tp, exc),) = results[0].items()
    assert tp == TopicPartition("t", 0)
    assert exc.args[0].code() == KafkaError._DESTROY
    with pytest.raises(IllegalStateException):
        c.commit_sync(1)


def test_close_from_a_callback_is_refused(offline):
    c = offline()
    refused = []

    def error_cb(err):
        try:
            c.close()
        except IllegalStateException as exc:
            refused.append(str(exc))

    c._error_cb = error_cb      # what the error_cb property sets
    c._io.call_soon(c._cluster.report_error, KafkaError(KafkaError._TRANSPORT, "down"))
    deadline = time.monotonic() + 10
    while not refused and time.monotonic() < deadline:
        c.poll(0.1)
    assert refused and "callback" in refused[0]
    assert c.subscription() == ["t"]            # still open


def test_close_returns_while_another_thread_is_stuck_in_a_callback(run_child):
    # The acknowledgement callback of another thread's poll() does not return: close()
    # waits CLOSE_WAIT_S for that call (shortened here), then stops without it.
    out = run_child(CHILD_OFFLINE + """
from types import SimpleNamespace
from kafka_client import IllegalStateException
from kafka_client.consumer import share_consumer
share_consumer.CLOSE_WAIT_S = 0.5
c = ShareConsumer({"group.id": "g", "bootstrap.servers": "127.0.0.1:1"})
c.subscribe(["t"])
stuck, release = threading.Event(), threading.Event()
c.set_acknowledgement_commit_callback(lambda offsets, exc: (stuck.set(), release.wait(30)))
with c._fetcher.lock:
    c._fetcher.outcomes.append(SimpleNamespace(offsets={("t", 0): [1]}, error=None))
got = []
t = threading.Thread(target=lambda: got.append(c.poll(-1)))
t.start()
assert stuck.wait(10)
started = time.monotonic()
c.close()
took = time.monotonic() - started
assert took < 5, took
queue_chunk(c, 0, 2)       # fetched meanwhile: not handed out by a closed consumer
release.set()
t.join(10)
assert not t.is_alive() and got and got[0].is_empty(), got
try:
    c.poll(0)
    raise SystemExit("poll() after close() did not raise")
except IllegalStateException:
    pass
print("ok")
""", timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "ok"


def test_a_raising_callback_at_close_still_closes_the_built_deserializers():
    from kafka_client.serialization import Deserializer, DeserializerBuilder

    class Closing(Deserializer):
        closed = 0

        def __call__(self, value, ctx):
            return value

        def close(self):
            Closing.closed += 1

    class Builder(DeserializerBuilder):
        def build(self, conf, is_key):
            return Closing(), conf

    c = DeserializingShareConsumer({"group.id": "g", "bootstrap.servers": "127.0.0.1:1",
                                    "value.deserializer.builder": Builder()})
    c.set_acknowledgement_commit_callback(lambda offsets, exc: 1 / 0)
    with c._fetcher.lock:       # an answer close() serves
        c._fetcher.outcomes.append(SimpleNamespace(offsets={("t", 0): [1]}, error=None))
    with pytest.raises(ZeroDivisionError):
        c.close()
    assert Closing.closed == 1
    with pytest.raises(IllegalStateException):
        c.poll(0)


def test_workers_acknowledge_while_another_thread_is_inside_a_call(offline):
    # Explicit mode, the pattern of a pool: one thread polls and commits, workers
    # acknowledge, each record once, none refused (they got ConcurrentModificationException
    # whenever the polling thread was inside a call).
    c = offline(**{"share.acknowledgement.mode": "explicit"})
    queue_chunk(c, 0, 400, [(0, 399, 1)])
    batch = c.poll(5)
    assert len(batch) == 400
    kinds = (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT)
    stop = threading.Event()
    committing = []

    def commit_loop():
        while not stop.is_set():
            committing.append(c.commit_sync(0.01))   # inside a call most of the time

    committer = threading.Thread(target=commit_loop)
    committer.start()
    deadline = time.monotonic() + 10
    while c._owner is None and time.monotonic() < deadline:
        time.sleep(0.001)
    failures = []

    def worker(msgs):
        for m in msgs:
            try:
                c.acknowledge(m, kinds[m.offset() % 3])
            except Exception as exc:   # noqa: BLE001 - the test counts every refusal
                failures.append(exc)

    workers = [threading.Thread(target=worker, args=(list(batch)[i::4],)) for i in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(30)
    stop.set()
    committer.join(30)
    assert failures == [] and len(committing) > 0
    c.commit_async()
    handed = {}
    for key, first, last, kind in handed_acks(c):
        for offset in range(first, last + 1):
            assert offset not in handed, offset       # each acknowledged once
            handed[offset] = kind
    assert handed == {o: int(kinds[o % 3]) for o in range(400)}
    assert c.poll(0.01).is_empty()                    # nothing left in flight


def test_an_answer_acquiring_more_offsets_than_can_be_held_is_refused(run_child):
    """A ShareFetch answer acquiring 2^40 offsets of a partition (a broken or hostile
    broker; Kafka's hold a few thousand per partition): the fetcher expanded the ranges
    into sets of offsets, and its I/O thread spent its memory and time on it for ever.
    The partition's answer is now refused as a malformed one (_BAD_MSG, nothing handed
    out: the broker's locks expire), the others taken (found while working out the share
    fuzz harness' memory bound). A child process, its memory capped: without the fix
    the answer never finishes (MemoryError under the cap)."""
    out = run_child("""
        import resource
        import sys
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))   # no fix: MemoryError
        sys.path.insert(0, "tests/client/consumer")
        import test_share_consumer as t

        share = t.share.__wrapped__()
        f = share.fetcher
        f.tick(0.0)
        (call,) = share.runner.take()
        t.answer(call, t.fetch_answer([
            (0, t.batch_bytes(0, 5), [(0, 2**40, 1)], 0, 0),
            (1, t.batch_bytes(0, 3), [(0, 2, 1)], 0, 0)]))
        print([(c.part.key, c.acquired) for c in f.chunks])
        print([(e.name(), "t [0]" in e.str()) for e in f.take_errors()])
    """, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[(('t', 1), [(0, 2, 1)])]",
                                       "[('_BAD_MSG', True)]"]
