"""Consumer API checks that need no broker: configuration and misuse give clear errors."""
from __future__ import annotations

import socket

import pytest

from kafka_client import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    OFFSET_TAIL,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

# Nothing listens on port 1 of the loopback address: the client just keeps retrying.
NOWHERE = "127.0.0.1:1"


def assigned_consumer():
    """A group consumer (no broker) with partition t [0] assigned at 0, and its state.
    No auto-commit: close() would try the final commit for 5 s with no broker there."""
    c = Consumer({"bootstrap.servers": NOWHERE, "group.id": "g", "log_level": 0,
                  "enable.auto.commit": False})
    c.assign([TopicPartition("t", 0, 0)])
    return c, c._fetcher.parts[("t", 0)]


def hand_out(c, part, offsets):
    """Decoded messages of t [0] at ``offsets``, as the next chunk handed out."""
    with c._hand:
        c._handout.start([Message("t", 0, i) for i in offsets], part)


@pytest.fixture
def consumer():
    c = Consumer({"bootstrap.servers": NOWHERE, "log_level": 0})
    yield c
    c.close()


def code_of(excinfo):
    return excinfo.value.args[0].code()


def test_unknown_property_and_invalid_value_name_the_property():
    with pytest.raises(KafkaException) as e:
        Consumer({"bootstrap.servers": NOWHERE, "fetch.wait.max.msec": 5})
    assert code_of(e) == KafkaError._INVALID_ARG and "fetch.wait.max.msec" in str(e.value)
    with pytest.raises(KafkaException) as e:
        Consumer({"bootstrap.servers": NOWHERE, "auto.offset.reset": "sometimes"})
    assert code_of(e) == KafkaError._INVALID_ARG and "auto.offset.reset" in str(e.value)
    with pytest.raises(KafkaException) as e:
        Consumer({"bootstrap.servers": NOWHERE, "partition.assignment.strategy":
                  "range,cooperative-sticky"})
    assert "cannot be combined" in str(e.value)


def test_group_calls_without_group_id(consumer):
    for call in (lambda: consumer.subscribe(["t"]),
                 lambda: consumer.commit(offsets=[TopicPartition("t", 0, 5)]),
                 lambda: consumer.committed([TopicPartition("t", 0)]),
                 lambda: consumer.unsubscribe()):
        with pytest.raises(KafkaException) as e:
            call()
        assert code_of(e) == KafkaError._INVALID_ARG
        assert "group.id" in str(e.value)
    assert consumer.memberid() is None


def test_seek_and_store_need_an_assigned_partition(consumer):
    # librdkafka's codes, as confluent-kafka 2.16 gives them: a partition of a topic the
    # consumer never had is _UNKNOWN_PARTITION; one not assigned (a negative number too)
    # of a topic it had a partition of, now or before, is _STATE.
    with pytest.raises(KafkaException) as e:
        consumer.seek(TopicPartition("t", 0, 5))
    assert code_of(e) == KafkaError._UNKNOWN_PARTITION
    assert "t [0] is not assigned" in str(e.value)
    consumer.assign([TopicPartition("t", 0, 0)])
    consumer.seek(TopicPartition("t", 0, 5))
    assert consumer.position([TopicPartition("t", 0)])[0].offset == 5
    for tp in (TopicPartition("t", 1, 3), TopicPartition("t", -1, 3)):
        for call in (consumer.seek, lambda tp: consumer.store_offsets(offsets=[tp])):
            with pytest.raises(KafkaException) as e:
                call(tp)
            assert code_of(e) == KafkaError._STATE
    for call in (consumer.seek, lambda tp: consumer.store_offsets(offsets=[tp])):
        with pytest.raises(KafkaException) as e:
            call(TopicPartition("u", 0, 3))
        assert code_of(e) == KafkaError._UNKNOWN_PARTITION
    # several: stored when one is assigned; else the last one's error
    consumer.store_offsets(offsets=[TopicPartition("u", 0, 3), TopicPartition("t", 0, 4)])
    assert consumer._fetcher.parts[("t", 0)].stored == 4
    with pytest.raises(KafkaException) as e:
        consumer.store_offsets(offsets=[TopicPartition("t", 1, 3), TopicPartition("u", 0, 3)])
    assert code_of(e) == KafkaError._UNKNOWN_PARTITION
    consumer.unassign()                       # the topic stays known
    with pytest.raises(KafkaException) as e:
        consumer.seek(TopicPartition("t", 0, 5))
    assert code_of(e) == KafkaError._STATE
    consumer.pause([TopicPartition("t", 1)])
    consumer.resume([TopicPartition("t", 1)])
    assert consumer.assignment() == []


def test_storing_a_logical_offset_clears_the_stored_one():
    # As confluent-kafka 2.16: accepted, and nothing is committed for the partition
    # until another offset is stored (commit() without arguments says _NO_OFFSET).
    c, part = assigned_consumer()
    try:
        for logical in (OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, -5):
            c.store_offsets(offsets=[TopicPartition("t", 0, 7, "meta", leader_epoch=3)])
            assert c._fetcher.stored_offsets() == [TopicPartition("t", 0, 7, "meta")]
            c.store_offsets(offsets=[TopicPartition("t", 0, logical)])
            assert c._fetcher.stored_offsets() == []
            assert c._fetcher.stored_offsets(leaving=True) == []
            assert (part.stored, part.stored_metadata, part.stored_epoch) == (-1, None, -1)
            with pytest.raises(KafkaException) as e:
                c.commit(asynchronous=False)
            assert code_of(e) == KafkaError._NO_OFFSET
    finally:
        c.close()


def test_assignment_calls(consumer):
    consumer.assign([TopicPartition("a", 0), TopicPartition("a", 1, 7)])
    assert sorted(consumer.assignment()) == [TopicPartition("a", 0), TopicPartition("a", 1)]
    # assigned without an offset (OFFSET_INVALID): OFFSET_STORED, as confluent-kafka 2.16
    # reports it (a group's assignment too)
    assert sorted(tp.offset for tp in consumer.assignment()) == [OFFSET_STORED, 7]
    consumer.incremental_assign([TopicPartition("b", 0, OFFSET_TAIL(3))])
    with pytest.raises(KafkaException) as e:
        consumer.incremental_assign([TopicPartition("b", 0)])
    assert code_of(e) == KafkaError._CONFLICT
    consumer.incremental_unassign([TopicPartition("a", 0)])
    assert sorted(consumer.assignment()) == [TopicPartition("a", 1), TopicPartition("b", 0)]
    with pytest.raises(KafkaException) as e:
        consumer.incremental_unassign([TopicPartition("a", 0)])
    assert code_of(e) == KafkaError._INVALID_ARG          # librdkafka's codes, both
    with pytest.raises(KafkaException) as e:
        consumer.offsets_for_times([], 1)
    assert code_of(e) == KafkaError._INVALID_ARG
    consumer.unassign()
    assert consumer.assignment() == []


def test_argument_types(consumer):
    with pytest.raises(TypeError):
        consumer.assign(TopicPartition("t", 0))  # a list is needed
    with pytest.raises(TypeError):
        consumer.assign([("t", 0)])
    with pytest.raises(KafkaException):
        consumer.assign([TopicPartition("t")])  # no partition number
    assert consumer.consume(0) == []
    with pytest.raises(ValueError):
        consumer.consume(-1)
    with pytest.raises(ValueError):
        consumer.consume(1_000_001)
    with pytest.raises(ValueError):
        consumer.store_offsets()
    # A negative offset that is no logical one: refused, as librdkafka's assign() does
    # (it was taken as OFFSET_END, skipping the backlog without a word).
    for bad in (-3, -5, -999, -1002, -1999):
        for call in (lambda: consumer.assign([TopicPartition("t", 0, bad)]),
                     lambda: consumer.incremental_assign([TopicPartition("t", 0, bad)]),
                     lambda: consumer.seek(TopicPartition("t", 0, bad))):
            with pytest.raises(KafkaException) as e:
                call()
            assert code_of(e) == KafkaError._INVALID_ARG and str(bad) in str(e.value)
    assert consumer.assignment() == []
    # A partition twice in one list: refused, as librdkafka's (the last offset was taken).
    for call in (consumer.assign, consumer.incremental_assign):
        with pytest.raises(KafkaException) as e:
            call([TopicPartition("t", 0, 5), TopicPartition("t", 1), TopicPartition("t", 0, 7)])
        assert code_of(e) == KafkaError._INVALID_ARG and "duplicate" in str(e.value)
    assert consumer.assignment() == []
    consumer.assign([TopicPartition("t", 0, OFFSET_TAIL(5)), TopicPartition("t", 1, -1000)])
    # seek(OFFSET_INVALID) is taken (back to the committed offset, as in librdkafka; no
    # broker here to look it up).
    consumer.seek(TopicPartition("t", 0))
    assert consumer.position([TopicPartition("t", 0)])[0].offset == OFFSET_INVALID
    consumer.unassign()
    with pytest.raises(ValueError):
        OFFSET_TAIL(-1)


def test_nothing_to_consume_returns_within_the_timeout(consumer):
    import time

    t = time.monotonic()
    assert consumer.consume(10, 0.3) == []
    assert consumer.poll(0.1) is None
    assert time.monotonic() - t < 2


def test_commit_of_an_event_is_refused():
    c = Consumer({"bootstrap.servers": NOWHERE, "group.id": "g", "log_level": 0})
    try:
        event = Message(error=KafkaError(KafkaError._PARTITION_EOF))
        with pytest.raises(KafkaException):
            c.commit(message=event)
        with pytest.raises(KafkaException) as e:
            c.commit(asynchronous=False)  # nothing stored
        assert code_of(e) == KafkaError._NO_OFFSET
        with pytest.raises(TypeError):
            c.subscribe("topic")  # a list is needed
    finally:
        c.close()


def test_calls_after_close_raise_runtime_error():
    c = Consumer({"bootstrap.servers": NOWHERE})
    c.close()
    c.close()  # twice is fine
    for call in (lambda: c.poll(0), lambda: c.consume(1, 0), lambda: c.assignment(),
                 lambda: c.assign([TopicPartition("t", 0)])):
        with pytest.raises(RuntimeError, match="closed"):
            call()


@pytest.mark.parametrize("group", [False, True], ids=["assigned", "subscribed"])
def test_an_unclosed_consumer_that_is_dropped_stops_its_thread(group):
    import weakref

    conf = {"bootstrap.servers": NOWHERE, "log_level": 0}
    if group:
        conf["group.id"] = "dropped"
    c = Consumer(conf)
    if group:
        c.subscribe(["topic"])
    else:
        c.assign([TopicPartition("topic", 0, 0)])
    assert c.poll(0.05) is None
    thread = c._io._thread
    assert thread.is_alive()
    ref = weakref.ref(c)
    del c          # no close(): garbage as soon as the application lets go of it
    assert ref() is None
    thread.join(5)
    assert not thread.is_alive()


def test_positions_follow_what_poll_handed_out_across_threads_seek_and_pause():
    """poll()'s fast path writes nothing per message: the positions and auto-stored
    offsets are settled from the chunk's iterator before anything reads them."""
    import threading

    c, part = assigned_consumer()
    tp = TopicPartition("t", 0)
    try:
        hand_out(c, part, range(100, 1100))
        got = []

        def take(n):
            for _ in range(n):
                got.append(c.poll(0).offset())

        threads = [threading.Thread(target=take, args=(250,)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(got) == list(range(100, 850))          # each once, none skipped
        assert c.position([tp])[0].offset == 850
        assert c._fetcher.stored_offsets()[0].offset == 850  # what a commit would take
        c.poll(0)
        c.seek(TopicPartition("t", 0, 5))                    # drops the rest of the chunk
        assert c._fetcher.stored_offsets()[0].offset == 851  # kept what was taken
        assert c.position([tp])[0].offset == 5
        hand_out(c, part, range(5, 10))
        assert [c.poll(0).offset() for _ in range(2)] == [5, 6]
        c.pause([tp])                                        # back to the position
        assert c.position([tp])[0].offset == 7
        assert c.consume(5, 0) == []
    finally:
        c.close()


def test_a_logical_seek_is_not_undone_by_pause_and_its_position_is_unknown():
    """seek(OFFSET_BEGINNING / END / tail) after messages were handed out: position()
    says OFFSET_INVALID until the lookup answers, as librdkafka's, and pause() +
    resume() meanwhile keeps the lookup (it went back to the old position: the messages
    before it were never read again, or those after it read twice)."""
    c, part = assigned_consumer()
    tp = TopicPartition("t", 0)
    try:
        for logical in (OFFSET_BEGINNING, OFFSET_END, OFFSET_TAIL(3)):
            c.seek(TopicPartition("t", 0, 0))
            hand_out(c, part, range(5))
            assert [c.poll(0).offset() for _ in range(5)] == list(range(5))
            assert c.position([tp])[0].offset == 5
            c.seek(TopicPartition("t", 0, logical))
            assert c.position([tp])[0].offset == OFFSET_INVALID
            c.pause([tp])
            c.resume([tp])
            assert (part.reset, part.fetch_pos) == (logical, -1)   # still to be looked up
            assert c.position([tp])[0].offset == OFFSET_INVALID
    finally:
        c.close()


def test_the_fast_path_steps_aside_when_statistics_or_client_events_are_due():
    """poll()'s fast path hands out decoded messages without serving anything; with a
    statistics document or a client error due it steps aside, so that poll() serves
    them: a consumer reading a backlog never ran stats_cb."""
    silent = socket.socket()                       # takes connections, never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    stats, errors = [], []
    c = Consumer({"bootstrap.servers": "127.0.0.1:%d" % silent.getsockname()[1],
                  "stats_cb": stats.append, "statistics.interval.ms": 60_000,
                  "error_cb": errors.append})
    try:
        c.assign([TopicPartition("t", 0, 0)])
        hand_out(c, c._fetcher.parts[("t", 0)], range(10))
        assert c._poll_ready() is not None         # nothing due: the fast path
        c._next_stats = 0.0                        # a statistics document is due
        assert c._poll_ready() is None
        assert c.poll(0) is not None and len(stats) == 1
        assert c._poll_ready() is not None
        c._cluster.report_error(KafkaError(KafkaError._TRANSPORT, "gone"))
        assert c._poll_ready() is None
        assert c.poll(0) is not None and [e.code() for e in errors] == [KafkaError._TRANSPORT]
    finally:
        c.close()
        silent.close()


def test_a_pause_lasts_across_unassignments_until_resume():
    """As librdkafka (confluent-kafka 2.16): a partition paused, unassigned and assigned
    again (assign(), incremental_assign()) starts paused, until resume(); so does one
    paused while not assigned, of a topic the consumer had a partition of. A topic never
    had is not remembered, nor is the pause of a revocation (the group's own)."""
    c, _part = assigned_consumer()
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)

    def paused():
        return sorted(key for key, p in c._fetcher.parts.items() if p.assigned and p.paused)

    try:
        c.pause([tp0])
        c.unassign()
        c.assign([TopicPartition("t", 0, 0)])
        assert paused() == [("t", 0)]
        c.incremental_unassign([tp0])
        c.incremental_assign([TopicPartition("t", 0, 3)])
        assert paused() == [("t", 0)]
        c.pause([tp1, TopicPartition("u", 0)])       # not assigned
        c.assign([TopicPartition("t", 0, 0), TopicPartition("t", 1, 0),
                  TopicPartition("u", 0, 0)])
        assert paused() == [("t", 0), ("t", 1)]
        c.resume([tp0])
        assert paused() == [("t", 1)]
        c.unassign()
        c.resume([tp1])                              # not assigned: forgotten too
        c.assign([TopicPartition("t", 0, 0), TopicPartition("t", 1, 0)])
        assert paused() == []
        c._pause_parts([tp0])                        # a revocation's hold
        c.assign([TopicPartition("t", 0, 0)])
        assert paused() == []
    finally:
        c.close()
