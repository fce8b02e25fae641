"""Incremental fetch sessions (KIP-227) in the test cluster, checked on the wire with a
bare client: full fetches that make a session, incremental ones that read every
partition of the session and answer only those with news, the session errors, the
cache's slots and eviction, long polls over the session's partitions, topic ids, the
fault injection and the request log."""
from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

import pytest

from kafka_proto.errors import ErrorCode
from kafka_proto.messages import DeleteRecordsRequest, FetchRequest, ProduceRequest
from kafka_proto.records import RecordBatchBuilder, read_batches

from kafka_client.testing import Cluster
from kafka_client.testing._api_data import _fetch_partition, _FetchOperation, _Read
from kafka_client.testing._fetch_sessions import FetchSessionCache

from rawclient import RawClient  # tests/testing/rawclient.py

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

NO_UUID = uuid.UUID(int=0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One broker: every session of these tests is on broker 1."""
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("sessions"))) as c:
        yield c


@pytest.fixture
def topic(cluster, topic_name):
    cluster.create_topic(topic_name, partitions=3)
    return topic_name


def produce(client, topic, partition, values):
    """Append one batch; returns its base offset."""
    b = RecordBatchBuilder()
    now = int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(v, key=None, timestamp=now + i)
    resp = client.request(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=b.build())])]), 9)
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.NONE, ErrorCode(p.error_code).name
    return p.base_offset


def fetch_request(parts=(), *, session_id=0, epoch=-1, forgotten=(), ids=None,
                  max_wait_ms=0, min_bytes=1, max_bytes=1 << 20):
    """``parts``: (topic, partition, fetch offset); ``forgotten``: (topic, partition);
    ``ids`` maps topic names to ids for Fetch v13+."""
    topics, gone = {}, {}
    for t, p, offset in parts:
        topics.setdefault(t, []).append(FetchRequest.FetchPartition(
            partition=p, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20))
    for t, p in forgotten:
        gone.setdefault(t, []).append(p)
    topic_id = (lambda t: ids.get(t, NO_UUID)) if ids else (lambda t: NO_UUID)
    return FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        isolation_level=0, session_id=session_id, session_epoch=epoch,
        topics=[FetchRequest.FetchTopic(topic=t, topic_id=topic_id(t), partitions=ps)
                for t, ps in topics.items()],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, topic_id=topic_id(t),
                                                           partitions=ps)
                               for t, ps in gone.items()])


def fetch(client, version=12, ids=None, **kw):
    return client.request(fetch_request(ids=ids, **kw), version)


def answered(resp, ids=None):
    """{(topic, partition): partition data} of a Fetch answer (topics named back from
    their ids)."""
    names = {v: k for k, v in (ids or {}).items()}
    return {(names.get(t.topic_id, t.topic), p.partition_index): p
            for t in resp.responses for p in t.partitions}


def offsets(data):
    return [o for b in read_batches(data.records or b"")
            for o in range(b.base_offset, b.last_offset + 1)]


def values(data):
    return [r.value for b in read_batches(data.records or b"") for r in b]


def topic_id(cluster, topic):
    return uuid.UUID(cluster.describe_topic(topic).topic_id)


def session(cluster, session_id, broker=1):
    found = [s for s in cluster.fetch_sessions(broker) if s["id"] == session_id]
    return found[0] if found else None


def open_session(client, topic, ends, version=12, ids=None):
    """A full fetch (epoch 0) of partitions 0..n-1 at ``ends``; returns the session id."""
    resp = fetch(client, version, ids, epoch=0,
                 parts=[(topic, p, offset) for p, offset in enumerate(ends)])
    assert resp.error_code == ErrorCode.NONE
    assert resp.session_id > 0
    return resp.session_id


def test_a_full_fetch_makes_a_session_and_answers_every_partition(cluster, topic):
    with RawClient(cluster.address(1)) as c:
        produce(c, topic, 0, [b"a", b"b"])
        since = cluster.clear_request_log()
        resp = fetch(c, epoch=0, parts=[(topic, 0, 0), (topic, 1, 0), (topic, 2, 0)])
        assert resp.error_code == ErrorCode.NONE and 0 < resp.session_id < 2 ** 31
        got = answered(resp)
        assert sorted(got) == [(topic, 0), (topic, 1), (topic, 2)]
        assert values(got[(topic, 0)]) == [b"a", b"b"]
        assert [got[(topic, p)].high_watermark for p in range(3)] == [2, 0, 0]
        assert session(cluster, resp.session_id) == {
            "id": resp.session_id, "epoch": 1, "topic_ids": False,
            "partitions": [[topic, 0, 0], [topic, 1, 0], [topic, 2, 0]]}
        # Another full fetch makes another session, with another id.
        other = fetch(c, epoch=0, parts=[(topic, 0, 2)]).session_id
        assert other > 0 and other != resp.session_id
    entry = cluster.request_log(since, api="Fetch")[0]
    assert entry.details["fetch_session"] == {
        "kind": "full", "id": 0, "epoch": 0, "response_id": resp.session_id,
        "requested": [[topic, 0, 0], [topic, 1, 0], [topic, 2, 0]], "forgotten": []}
    assert [(p["partition"], p["bytes"] > 0) for p in entry.details["partitions"]] == \
        [(0, True), (1, False), (2, False)]


def test_an_incremental_fetch_reads_the_whole_session_and_answers_only_news(cluster, topic):
    with RawClient(cluster.address(1)) as c:
        for p in range(3):
            produce(c, topic, p, [b"old"])
        sid = open_session(c, topic, [1, 1, 1])
        since = cluster.clear_request_log()
        # Nothing new: an answer without partitions, in the session.
        resp = fetch(c, session_id=sid, epoch=1)
        assert (resp.error_code, resp.session_id, resp.responses) == (ErrorCode.NONE, sid, [])
        produce(c, topic, 1, [b"x", b"y"])
        resp = fetch(c, session_id=sid, epoch=2)
        got = answered(resp)
        assert list(got) == [(topic, 1)]
        assert offsets(got[(topic, 1)]) == [1, 2] and values(got[(topic, 1)]) == [b"x", b"y"]
        assert got[(topic, 1)].high_watermark == 3
        # The broker never moves a session's fetch offset: the client sends the next one.
        # Until then it reads from the cached offset again.
        assert offsets(answered(fetch(c, session_id=sid, epoch=3))[(topic, 1)]) == [1, 2]
        # At its end, with the high watermark already given, it has nothing to say.
        resp = fetch(c, session_id=sid, epoch=4, parts=[(topic, 1, 3)])
        assert resp.session_id == sid and resp.responses == []
        assert session(cluster, sid)["partitions"] == [[topic, 0, 1], [topic, 2, 1],
                                                       [topic, 1, 3]]
        assert session(cluster, sid)["epoch"] == 5
    log = cluster.request_log(since, api="Fetch")
    assert [e.details["fetch_session"]["kind"] for e in log] == ["incremental"] * 4
    assert [e.details["fetch_session"]["epoch"] for e in log] == [1, 2, 3, 4]
    assert {e.details["fetch_session"]["response_id"] for e in log} == {sid}
    assert [e.details["fetch_session"]["requested"] for e in log] == [[], [], [], [[topic, 1, 3]]]
    # The partitions summary lists the answer's partitions only.
    assert [[(p["partition"], p["fetch_offset"]) for p in e.details["partitions"]]
            for e in log] == [[], [(1, 1)], [(1, 1)], []]


def test_a_changed_fetch_offset_is_read_from(cluster, topic):
    with RawClient(cluster.address(1)) as c:
        for i in range(5):   # one batch each: a read starts at the batch holding its offset
            produce(c, topic, 0, [b"%d" % i])
        sid = open_session(c, topic, [0, 0])
        resp = fetch(c, session_id=sid, epoch=1, parts=[(topic, 0, 3)])
        assert offsets(answered(resp)[(topic, 0)]) == [3, 4]
        assert session(cluster, sid)["partitions"][-1] == [topic, 0, 3]
        # A partition the session did not have joins it; its first answer always counts.
        resp = fetch(c, session_id=sid, epoch=2, parts=[(topic, 2, 0)])
        got = answered(resp)
        assert sorted(got) == [(topic, 0), (topic, 2)]
        assert (got[(topic, 2)].high_watermark, offsets(got[(topic, 2)])) == (0, [])
        assert offsets(got[(topic, 0)]) == [3, 4]


def test_forgotten_partitions_are_no_longer_read(cluster, topic):
    with RawClient(cluster.address(1)) as c:
        sid = open_session(c, topic, [0, 0, 0])
        since = cluster.clear_request_log()
        resp = fetch(c, session_id=sid, epoch=1, forgotten=[(topic, 0), (topic, 2)])
        assert resp.responses == [] and resp.session_id == sid
        assert session(cluster, sid)["partitions"] == [[topic, 1, 0]]
        produce(c, topic, 0, [b"gone"])
        produce(c, topic, 1, [b"kept"])
        got = answered(fetch(c, session_id=sid, epoch=2))
        assert list(got) == [(topic, 1)] and values(got[(topic, 1)]) == [b"kept"]
        # Forgetting the last partitions closes the session: a sessionless answer.
        resp = fetch(c, session_id=sid, epoch=3, forgotten=[(topic, 1)])
        assert (resp.error_code, resp.session_id, resp.responses) == (ErrorCode.NONE, 0, [])
        assert session(cluster, sid) is None
    entry = cluster.request_log(since, api="Fetch")[0]
    assert entry.details["fetch_session"]["forgotten"] == [[topic, 0], [topic, 2]]


def test_session_errors_answer_nothing_else(cluster, topic):
    with RawClient(cluster.address(1)) as c:
        produce(c, topic, 0, [b"a"])
        sid = open_session(c, topic, [0])
        for epoch in (2, 7, -2):
            resp = fetch(c, session_id=sid, epoch=epoch, parts=[(topic, 0, 0)])
            assert (resp.error_code, resp.session_id, resp.responses) == \
                (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
        assert session(cluster, sid)["epoch"] == 1     # untouched by the refused ones
        unknown = sid % (2 ** 31 - 1) + 1
        since = cluster.clear_request_log()
        resp = fetch(c, session_id=unknown, epoch=1, parts=[(topic, 0, 0)])
        assert (resp.error_code, resp.session_id, resp.responses) == \
            (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
        # Epoch 1 is still the right one for the real session.
        assert offsets(answered(fetch(c, session_id=sid, epoch=1))[(topic, 0)]) == [0]
    entry = cluster.request_log(since, api="Fetch")[0]
    assert entry.errors == ["FETCH_SESSION_ID_NOT_FOUND"]
    assert entry.details["partitions"] == []
    assert entry.details["fetch_session"]["response_id"] == 0


def test_epoch_minus_one_closes_the_session_and_epoch_zero_replaces_it(cluster, topic):
    with RawClient(cluster.address(1)) as c:
        produce(c, topic, 0, [b"a"])
        sid = open_session(c, topic, [0])
        resp = fetch(c, session_id=sid, epoch=-1, parts=[(topic, 0, 0)])
        assert resp.session_id == 0 and offsets(answered(resp)[(topic, 0)]) == [0]
        assert session(cluster, sid) is None
        assert fetch(c, session_id=sid, epoch=1).error_code == \
            ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        first = open_session(c, topic, [0])
        resp = fetch(c, session_id=first, epoch=0, parts=[(topic, 1, 0)])
        second = resp.session_id
        assert second > 0 and second != first and session(cluster, first) is None
        assert session(cluster, second)["partitions"] == [[topic, 1, 0]]


def test_a_session_belongs_to_the_broker_not_the_connection(cluster, topic):
    with RawClient(cluster.address(1)) as c:
        sid = open_session(c, topic, [0])
    cluster.cut_connections()
    with RawClient(cluster.address(1)) as c:
        produce(c, topic, 0, [b"after"])
        got = answered(fetch(c, session_id=sid, epoch=1))
        assert values(got[(topic, 0)]) == [b"after"]


def test_a_long_poll_wakes_for_a_session_partition_the_request_does_not_name(cluster, topic):
    with RawClient(cluster.address(1)) as c, RawClient(cluster.address(1)) as producer:
        sid = open_session(c, topic, [0, 0, 0])
        c.send(fetch_request(session_id=sid, epoch=1, parts=[(topic, 0, 0)],
                             max_wait_ms=10_000), 12)
        time.sleep(0.3)
        start = time.monotonic()
        produce(producer, topic, 2, [b"late"])
        resp = c.receive(FetchRequest.API_KEY, 12)
        assert time.monotonic() - start < 3
        got = answered(resp)
        assert list(got) == [(topic, 2)] and values(got[(topic, 2)]) == [b"late"]
        # Without news the wait runs out: an empty answer, still in the session.
        start = time.monotonic()
        resp = fetch(c, session_id=sid, epoch=2, parts=[(topic, 2, 1)], max_wait_ms=300)
        assert resp.responses == [] and resp.session_id == sid
        assert time.monotonic() - start >= 0.25


def test_a_waiting_fetch_overtaken_by_the_next_epoch_gets_an_epoch_error(cluster, topic):
    with RawClient(cluster.address(1)) as first, RawClient(cluster.address(1)) as second:
        sid = open_session(first, topic, [0])
        first.send(fetch_request(session_id=sid, epoch=1, max_wait_ms=500), 12)
        time.sleep(0.1)
        assert fetch(second, session_id=sid, epoch=2).error_code == ErrorCode.NONE
        resp = first.receive(FetchRequest.API_KEY, 12)
        assert (resp.error_code, resp.session_id, resp.responses) == \
            (ErrorCode.INVALID_FETCH_SESSION_EPOCH, sid, [])


def test_a_high_watermark_alone_is_news(cluster, topic):
    with RawClient(cluster.address(1)) as c:
        sid = open_session(c, topic, [0, 0])
        produce(c, topic, 0, [b"a" * 200])
        produce(c, topic, 1, [b"b"])
        # The first partition's batch fills max_bytes: the second gets no records, but
        # its high watermark moved, so it is in the answer.
        got = answered(fetch(c, session_id=sid, epoch=1, max_bytes=1))
        assert sorted(got) == [(topic, 0), (topic, 1)]
        assert offsets(got[(topic, 0)]) == [0]
        assert (offsets(got[(topic, 1)]), got[(topic, 1)].high_watermark) == ([], 1)
        # Both moved to the end of the session in answer order, the second is still at
        # offset 0: its records come now.
        got = answered(fetch(c, session_id=sid, epoch=2))
        assert values(got[(topic, 1)]) == [b"b"]


def test_a_log_start_offset_alone_is_news(cluster, topic):
    with RawClient(cluster.address(1)) as c:
        produce(c, topic, 0, [b"%d" % i for i in range(4)])
        sid = open_session(c, topic, [4, 0])
        resp = c.request(DeleteRecordsRequest(timeout_ms=5000, topics=[
            DeleteRecordsRequest.DeleteRecordsTopic(name=topic, partitions=[
                DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=2)])]), 2)
        assert resp.topics[0].partitions[0].low_watermark == 2
        got = answered(fetch(c, session_id=sid, epoch=1))
        assert list(got) == [(topic, 0)]
        assert (got[(topic, 0)].log_start_offset, got[(topic, 0)].high_watermark,
                offsets(got[(topic, 0)])) == (2, 4, [])
        assert fetch(c, session_id=sid, epoch=2).responses == []


def test_topic_ids_sessions_and_name_sessions_do_not_mix(cluster, topic):
    ids = {topic: topic_id(cluster, topic)}
    with RawClient(cluster.address(1)) as c:
        produce(c, topic, 0, [b"a"])
        by_id = open_session(c, topic, [0], version=13, ids=ids)
        assert session(cluster, by_id)["topic_ids"] is True
        resp = fetch(c, 12, session_id=by_id, epoch=1)
        assert (resp.error_code, resp.responses) == (ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, [])
        got = answered(fetch(c, 17, ids, session_id=by_id, epoch=1), ids)
        assert values(got[(topic, 0)]) == [b"a"]
        by_name = open_session(c, topic, [0], version=12)
        resp = fetch(c, 13, ids, session_id=by_name, epoch=1)
        assert resp.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        # An unknown topic id in a session is that partition's error, in every answer.
        ghost = uuid.uuid4()
        resp = fetch(c, 13, {"ghost": ghost, **ids}, session_id=by_id, epoch=2,
                     parts=[("ghost", 0, 0), (topic, 0, 1)])
        assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in resp.responses] \
            == [(ghost, [ErrorCode.UNKNOWN_TOPIC_ID])]
        resp = fetch(c, 13, session_id=by_id, epoch=3)
        assert [t.topic_id for t in resp.responses] == [ghost]
        assert [None, 0, 0] in session(cluster, by_id)["partitions"]


def test_the_oldest_session_version_is_seven(cluster, topic):
    with RawClient(cluster.address(1)) as c:
        sid = open_session(c, topic, [0], version=7)
        produce(c, topic, 0, [b"v7"])
        got = answered(fetch(c, 7, session_id=sid, epoch=1))
        assert values(got[(topic, 0)]) == [b"v7"]


def test_injected_errors_still_answer_session_fetches(cluster, topic):
    with RawClient(cluster.address(1)) as c:
        sid = open_session(c, topic, [0, 0])
        cluster.inject_errors("Fetch", ["NOT_LEADER_OR_FOLLOWER"], broker=1)
        resp = fetch(c, session_id=sid, epoch=1, parts=[(topic, 0, 0)])
        assert [p.error_code for p in answered(resp).values()] == \
            [ErrorCode.NOT_LEADER_OR_FOLLOWER]
        # Refused, not executed: the session still expects epoch 1.
        assert session(cluster, sid)["epoch"] == 1
        assert fetch(c, session_id=sid, epoch=1).error_code == ErrorCode.NONE


def test_incremental_answers_are_sent_with_sendfile(cluster, topic):
    with RawClient(cluster.address(1)) as c:
        sid = open_session(c, topic, [0, 0, 0])
        produce(c, topic, 1, [b"s" * 1000])
        before = cluster.stats()["sendfile_bytes"]
        got = answered(fetch(c, session_id=sid, epoch=1))
        assert values(got[(topic, 1)]) == [b"s" * 1000]
        assert cluster.stats()["sendfile_bytes"] - before == len(got[(topic, 1)].records)


def test_no_slots_means_no_sessions(tmp_path):
    with Cluster(brokers=1, data_dir=str(tmp_path),
                 broker_config={"max.incremental.fetch.session.cache.slots": 0}) as cluster:
        cluster.create_topic("t", partitions=2)
        with RawClient(cluster.address(1)) as c:
            produce(c, "t", 1, [b"a"])
            resp = fetch(c, epoch=0, parts=[("t", 0, 0), ("t", 1, 0)])
            assert resp.error_code == ErrorCode.NONE and resp.session_id == 0
            got = answered(resp)
            assert sorted(got) == [("t", 0), ("t", 1)] and values(got[("t", 1)]) == [b"a"]
        assert cluster.fetch_sessions(1) == []


def test_a_full_cache_evicts_an_idle_session_or_a_smaller_old_one(tmp_path):
    with Cluster(brokers=1, data_dir=str(tmp_path), broker_config={
            "max.incremental.fetch.session.cache.slots": 2,
            "min.incremental.fetch.session.eviction.ms": 1000}) as cluster:
        cluster.create_topic("t", partitions=2)
        with RawClient(cluster.address(1)) as c:
            a = open_session(c, "t", [0])
            b = open_session(c, "t", [0])
            # Full, and nobody idle or old: no session, answered in full anyway.
            resp = fetch(c, epoch=0, parts=[("t", 0, 0)])
            assert resp.session_id == 0 and list(answered(resp)) == [("t", 0)]
            time.sleep(1.2)
            assert fetch(c, session_id=b, epoch=1).error_code == ErrorCode.NONE
            # a was idle for longer than the eviction time: it makes room.
            cs = open_session(c, "t", [0])
            assert {s["id"] for s in cluster.fetch_sessions(1)} == {b, cs}
            assert fetch(c, session_id=a, epoch=1).error_code == \
                ErrorCode.FETCH_SESSION_ID_NOT_FOUND
            # Nobody idle; b is old and smaller than a session of two partitions.
            d = open_session(c, "t", [0, 0])
            assert {s["id"] for s in cluster.fetch_sessions(1)} == {cs, d}
            # cs is young: a one-partition session finds no room.
            assert fetch(c, epoch=0, parts=[("t", 1, 0)]).session_id == 0
            assert fetch(c, session_id=cs, epoch=1).error_code == ErrorCode.NONE


def test_evict_fetch_sessions_drops_one_brokers_or_every_brokers_sessions(kafka_cluster):
    kafka_cluster.create_topic("one", assignments=[[1]])
    kafka_cluster.create_topic("two", assignments=[[2]])
    with RawClient(kafka_cluster.address(1)) as c1, RawClient(kafka_cluster.address(2)) as c2:
        s1 = open_session(c1, "one", [0])
        s2 = open_session(c2, "two", [0])
        open_session(c2, "two", [0])
        assert kafka_cluster.evict_fetch_sessions(broker=1) == 1
        assert kafka_cluster.fetch_sessions(1) == []
        assert fetch(c1, session_id=s1, epoch=1).error_code == \
            ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        assert fetch(c2, session_id=s2, epoch=1).error_code == ErrorCode.NONE
        assert kafka_cluster.evict_fetch_sessions() == 2
        assert fetch(c2, session_id=s2, epoch=2).error_code == \
            ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        open_session(c1, "one", [0])
    # Sessions live in the broker's memory: a restart loses them.
    kafka_cluster.restart_broker(1)
    assert kafka_cluster.fetch_sessions(1) == []


def test_a_fetch_woken_after_its_answer_reads_nothing():
    """The broker wakes waiting fetches once per loop turn from a set filled by data
    notifications; a full Fetch its timer answered in between must not read and answer
    again: the second answer (dropped, the request was answered) made a second fetch
    session, a slot of the cache taken by a session no client knows of."""
    answers = []
    cache = FetchSessionCache(slots=10, eviction_ms=120_000)
    broker = SimpleNamespace(settings=SimpleNamespace(rack_aware_selector=None),
                             fetch_sessions=cache, unwatch=lambda keys, callback: None)
    ctx = SimpleNamespace(
        request=FetchRequest(replica_id=-1, max_wait_ms=10_000, min_bytes=1,
                             max_bytes=1 << 20, isolation_level=0, session_id=0,
                             session_epoch=0, topics=[FetchRequest.FetchTopic(
                                 topic="t", partitions=[FetchRequest.FetchPartition(
                                     partition=0, fetch_offset=0, log_start_offset=-1,
                                     partition_max_bytes=1 << 20)])],
                             forgotten_topics_data=[], rack_id=""),
        version=12, log_entry=None, broker=broker,
        server=SimpleNamespace(authorizer=SimpleNamespace(enabled=False)),
        conn=SimpleNamespace(closed=False, forget_on_close=lambda callback: None),
        note=lambda **fields: None, respond=lambda response, regions=None:
        answers.append(response))
    fetch = _FetchOperation(ctx)
    assert fetch._open_session() == ErrorCode.NONE and fetch.kind == "full"
    # Records came: the timer's read and any later one find them.
    fetch._read = lambda: ([_Read(w, _fetch_partition(0, ErrorCode.NONE, high_watermark=1),
                                  None, None) for w in fetch.wanted], True)
    fetch._expire()
    assert len(answers) == 1 and len(cache.sessions) == 1
    fetch._wake()
    assert len(cache.sessions) == 1
