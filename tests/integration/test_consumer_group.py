"""Consumer groups on Tansu and noida-db: three members share a 6-partition topic; one
leaves, one is killed without leaving; with commits after processing every message is
processed at least once and none is missed. With cooperative-sticky, partitions that stay
are never revoked. Offsets committed by us are where confluent-kafka resumes, and the
reverse.
"""
from __future__ import annotations

import time
import uuid
from collections import defaultdict

import pytest

from kafka_client import (OFFSET_INVALID, Consumer, KafkaError, KafkaException, Producer,
                          TopicPartition)

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 6


def produce(broker, topic, start, count):
    """``count`` messages spread over the partitions; returns {partition: count}."""
    per = defaultdict(int)
    with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2}) as p:
        for i in range(start, start + count):
            p.produce(topic, b"m%d" % i, partition=i % PARTITIONS)
            per[i % PARTITIONS] += 1
        assert p.flush(30) == 0
    return per


class Member:
    """One group member driven by the test, recording what it processed and its
    rebalance callbacks (in a log shared by the group)."""

    def __init__(self, name, broker, topic, group, strategy, log):
        self.name = name
        self.log = log
        self.held = set()
        self.epoch = 0  # assignments received: a redelivery must cross one
        self.alive = True
        self.incremental = strategy == "cooperative-sticky"
        self.c = Consumer({
            "bootstrap.servers": broker.bootstrap, "group.id": group,
            "partition.assignment.strategy": strategy, "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": max(4000, broker.group_session_ms),
            "heartbeat.interval.ms": 300, "fetch.wait.max.ms": 50})
        self.c.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked,
                         on_lost=self._lost)

    def _assigned(self, consumer, parts):
        keys = {tp.partition for tp in parts}
        self.epoch += 1
        self.log.append((self.name, "assign", keys))
        if self.incremental:  # cooperative: partitions added to what we hold
            self.held |= keys
        else:
            self.held = set(keys)

    def _revoked(self, consumer, parts):
        keys = {tp.partition for tp in parts}
        self.log.append((self.name, "revoke", keys))
        self.held -= keys

    def _lost(self, consumer, parts):
        keys = {tp.partition for tp in parts}
        self.log.append((self.name, "lost", keys))
        self.held -= keys

    def step(self, processed):
        """Poll once, 'process' the messages, then commit them (at-least-once)."""
        got = False
        for m in self.c.consume(500, 0.05):
            if m.error() is not None:
                assert m.error().code() in (KafkaError._PARTITION_EOF,
                                            KafkaError._TRANSPORT), m.error()
                continue
            processed[(m.partition(), m.offset())].append((self.name, self.epoch))
            got = True
        if got:
            try:
                self.c.commit(asynchronous=False)
            except Exception as exc:  # a rebalance under way: redelivery covers it
                self.log.append((self.name, "commit-failed", str(exc)))


def drive(members, processed, until, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            if m.alive:
                m.step(processed)
        if until():
            return
    raise AssertionError(f"timed out waiting for {what}; holdings: "
                         f"{[(m.name, sorted(m.held)) for m in members if m.alive]}")


def shared_without_overlap(members, sizes):
    live = [m for m in members if m.alive]
    held = [m.held for m in live]
    union = set().union(*held)
    return (union == set(range(PARTITIONS)) and sum(len(h) for h in held) == PARTITIONS
            and sorted(len(h) for h in held) == sizes)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_group_shares_rebalances_and_processes_everything(broker, topic_name, strategy):
    broker.create_topic(topic_name, partitions=PARTITIONS)
    group = f"g-{uuid.uuid4().hex[:8]}"
    expected = defaultdict(int)
    for p, n in produce(broker, topic_name, 0, 3000).items():
        expected[p] += n
    log = []
    processed = defaultdict(list)
    members = [Member(f"c{i}", broker, topic_name, group, strategy, log) for i in range(3)]
    try:
        drive(members, processed, lambda: shared_without_overlap(members, [2, 2, 2]), 60,
              "three members sharing six partitions")
        for p, n in produce(broker, topic_name, 3000, 1500).items():
            expected[p] += n
        # A member leaves cleanly: the other two take over its partitions.
        members[0].c.close()
        members[0].alive = False
        members[0].held = set()
        drive(members, processed, lambda: shared_without_overlap(members, [3, 3]), 60,
              "two members after one left")
        # A member dies without leaving: the group notices after session.timeout.ms.
        # noida-db 0.2.3 never expires a member whose heartbeats stopped (seen here: the
        # survivor's heartbeats kept succeeding for 150 s), so there it leaves instead.
        if broker.kind == "noida":
            members[1].c.close()
        else:
            members[1].c._shutdown()  # connections closed, no LeaveGroup, no commit
        members[1].alive = False
        members[1].held = set()
        for p, n in produce(broker, topic_name, 4500, 1500).items():
            expected[p] += n
        total = sum(expected.values())

        def everything():
            return shared_without_overlap(members, [6]) and len(processed) == total

        drive(members, processed, everything, 60, "the survivor to process everything")
    finally:
        for m in members:
            if m.alive:
                m.c.close()
    # None missed: every offset of every partition, exactly the produced ones.
    want = {(p, o) for p, n in expected.items() for o in range(n)}
    assert set(processed) == want
    redelivered = {k: v for k, v in processed.items() if len(v) > 1}
    # At least once: a message comes again only across a reassignment (work processed
    # but not committed before a rebalance or the kill), never twice to the same member
    # within one assignment.
    for seen in redelivered.values():
        assert len(seen) == len(set(seen)), seen
    failed_commits = [e for e in log if e[1] == "commit-failed"]
    print(f"{strategy}: {len(want)} messages, {len(redelivered)} redelivered, "
          f"{len(failed_commits)} commits failed {failed_commits[:3]}")
    if strategy == "cooperative-sticky":
        assert_only_moved_partitions_revoked(log)


def assert_only_moved_partitions_revoked(log):
    """Every partition a member revoked (while staying in the group) went to another
    member next: a partition that stays with its owner is never revoked."""
    for i, (name, kind, parts) in enumerate(log):
        if kind != "revoke":
            continue
        for p in parts:
            nxt = next((n for n, k, ps in log[i + 1:] if k == "assign" and p in ps), None)
            if nxt is None:
                continue  # revoked because its owner left or the test ended
            assert nxt != name, f"{name} revoked partition {p} and got it back: {log}"


def test_offsets_we_commit_are_where_librdkafka_resumes_and_back(broker, topic_name):
    broker.create_topic(topic_name, partitions=1)
    # One partition: produce() to the others the helper spreads over would be refused
    # (_UNKNOWN_PARTITION) once the producer knows the topic.
    with Producer({"bootstrap.servers": broker.bootstrap}) as p:
        for i in range(300):
            p.produce(topic_name, b"x%d" % i, partition=0)
        assert p.flush(30) == 0
    group = f"interop-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic_name, 0)
    # Ours commits 120.
    ours = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    try:
        ours.assign([TopicPartition(topic_name, 0, 0)])
        seen = []
        while len(seen) < 120:
            seen += [m for m in ours.consume(120 - len(seen), 5) if m.error() is None]
        assert seen[-1].offset() == 119
        ours.commit(message=seen[-1], asynchronous=False)
        assert ours.committed([tp], timeout=10)[0].offset == 120
    finally:
        ours.close()
    theirs = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                       "group.id": group, "enable.auto.commit": False})
    try:
        ctp = confluent_kafka.TopicPartition(topic_name, 0)
        assert theirs.committed([ctp], timeout=10)[0].offset == 120
        theirs.assign([ctp])  # the stored offset
        first = None
        deadline = time.monotonic() + 20
        while first is None and time.monotonic() < deadline:
            m = theirs.poll(0.5)
            if m is not None and not m.error():
                first = m
        assert first is not None and first.offset() == 120
        # librdkafka commits 250; we resume there.
        theirs.commit(offsets=[confluent_kafka.TopicPartition(topic_name, 0, 250)],
                      asynchronous=False)
    finally:
        theirs.close()
    ours = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    try:
        assert ours.committed([tp], timeout=10)[0].offset == 250
        ours.assign([tp])  # OFFSET_INVALID: the committed offset
        m = None
        deadline = time.monotonic() + 20
        while m is None and time.monotonic() < deadline:
            m = ours.poll(0.5)
        assert m is not None and m.error() is None and m.offset() == 250
    finally:
        ours.close()


def _wait_for(predicate, consumer, timeout, what):
    deadline = time.monotonic() + timeout
    events = []
    while time.monotonic() < deadline:
        events += [m for m in consumer.consume(100, 0.1) if m.error() is not None]
        if predicate():
            return events
    raise AssertionError(f"timed out waiting for {what}")


def test_auto_commit_commits_greater_stored_offsets_only(broker, topic_name):
    broker.create_topic(topic_name, partitions=1)
    with Producer({"bootstrap.servers": broker.bootstrap}) as p:
        for i in range(100):
            p.produce(topic_name, b"%d" % i, partition=0)
        assert p.flush(30) == 0
    tp = TopicPartition(topic_name, 0)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"ac-{topic_name}",
                  "auto.commit.interval.ms": 200, "fetch.wait.max.ms": 50})
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        got = []
        while len(got) < 50:
            got += [m for m in c.consume(50 - len(got), 1) if m.error() is None]
        # The I/O thread commits on its own; no poll needed (a poll would move on).
        deadline = time.monotonic() + 10
        while c.committed([tp], 5)[0].offset != 50 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert c.committed([tp], 5)[0].offset == 50
        # Back to 10 and five more: the stored offset (15) is below the committed one.
        c.seek(TopicPartition(topic_name, 0, 10))
        again = []
        while len(again) < 5:
            again += [m for m in c.consume(5 - len(again), 1) if m.error() is None]
        assert [m.offset() for m in again] == [10, 11, 12, 13, 14]
        time.sleep(0.6)      # auto-commits ran (no poll: it would take message 15)
        assert c.committed([tp], 5)[0].offset == 50
    finally:
        c.close()  # the partition leaves the assignment: its stored 15 is committed
    # Manual store: only what the application stored is committed (at close, too).
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"ac-{topic_name}",
                  "enable.auto.offset.store": False, "auto.commit.interval.ms": 200,
                  "fetch.wait.max.ms": 50})
    try:
        c.assign([tp])  # resumes at the committed 15
        got = []
        while len(got) < 30:
            got += [m for m in c.consume(30 - len(got), 1) if m.error() is None]
        assert got[0].offset() == 15
        c.store_offsets(message=got[19])  # processed up to offset 34
    finally:
        c.close()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"ac-{topic_name}"})
    try:
        assert c.committed([tp], 5)[0].offset == 35
    finally:
        c.close()


@pytest.mark.parametrize("commit", ["periodic", "revoke", "unassign", "incremental_unassign",
                                    "close"])
def test_on_commit_of_a_commit_the_client_makes_names_every_partition_it_covers(
        tansu_broker, topic_name, commit):
    """enable.auto.commit: the commits the client makes itself (periodic, after a
    revocation, of partitions leaving a manual assignment, at close) name every partition
    they cover in on_commit, those with nothing stored as OFFSET_INVALID, as
    confluent-kafka's do: a program counting partitions there counts them all. Only the
    partitions with an offset stored were named."""
    tansu_broker.create_topic(topic_name, partitions=3)
    with Producer({"bootstrap.servers": tansu_broker.bootstrap}) as p:
        for i in range(5):
            p.produce(topic_name, b"%d" % i, partition=0)    # partitions 1 and 2 stay empty
        assert p.flush(30) == 0
    heard = []
    c = Consumer({"bootstrap.servers": tansu_broker.bootstrap, "group.id": topic_name,
                  "auto.commit.interval.ms": 300 if commit == "periodic" else 60_000,
                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50,
                  # Tansu assigns a new group after half the session timeout (23 s)
                  "session.timeout.ms": tansu_broker.group_session_ms,
                  "heartbeat.interval.ms": 500,
                  "on_commit": lambda err, tps: heard.append(
                      (err, sorted((t.partition, t.offset) for t in tps)))})
    try:
        if commit == "revoke":
            c.subscribe([topic_name])
        else:
            c.assign([TopicPartition(topic_name, p) for p in range(3)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            got += [m for m in c.consume(10, 0.2) if m.error() is None]
        assert len(got) == 5
        assert not heard or commit == "periodic"
        if commit == "unassign":
            c.unassign()
        elif commit == "incremental_unassign":
            c.incremental_unassign([TopicPartition(topic_name, p) for p in (0, 1)])
        elif commit == "revoke":
            c.unsubscribe()
        deadline = time.monotonic() + 10
        while commit != "close" and (not heard or heard[-1][1][0] != (0, 5)) \
                and time.monotonic() < deadline:
            c.poll(0.1)
    finally:
        c.close()
    covered = [0, 1] if commit == "incremental_unassign" else [0, 1, 2]
    assert heard and heard[-1] == (None, [(0, 5)] + [(p, OFFSET_INVALID) for p in covered[1:]])
    for err, tps in heard:   # the periodic commits before it too
        assert err is None and [p for p, _ in tps] == covered, heard
        assert all(offset == OFFSET_INVALID for p, offset in tps if p), heard


@pytest.mark.parametrize("leaving", ["close", "unassign", "incremental_unassign", "revoke"])
def test_what_leaves_the_assignment_commits_its_stored_offset_even_a_lower_one(
        tansu_broker, topic_name, leaving):
    """enable.auto.commit: the offset stored for a partition that leaves the assignment
    (close(), unassign(), incremental_unassign(), a subscription's revocation) is
    committed even when it is below the committed one, as confluent-kafka 2.16 does
    (the periodic auto-commit and commit() still commit greater offsets only). It was
    left out: the group kept the higher offset, past messages the application had
    stored as not processed."""
    tansu_broker.create_topic(topic_name, partitions=1)
    with Producer({"bootstrap.servers": tansu_broker.bootstrap}) as p:
        for i in range(10):
            p.produce(topic_name, b"%d" % i, partition=0)
        assert p.flush(30) == 0
    tp = TopicPartition(topic_name, 0)
    heard = []
    c = Consumer({"bootstrap.servers": tansu_broker.bootstrap, "group.id": topic_name,
                  "enable.auto.offset.store": False, "auto.commit.interval.ms": 60_000,
                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50,
                  "session.timeout.ms": tansu_broker.group_session_ms,   # (see above)
                  "heartbeat.interval.ms": 500,
                  "on_commit": lambda err, tps: heard.append(
                      (err, [(t.partition, t.offset) for t in tps]))})
    try:
        if leaving == "revoke":
            c.subscribe([topic_name])
        else:
            c.assign([TopicPartition(topic_name, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            got += [m for m in c.consume(10, 0.2) if m.error() is None]
        assert len(got) == 10
        c.commit(offsets=[TopicPartition(topic_name, 0, 7)], asynchronous=False)
        c.store_offsets(offsets=[TopicPartition(topic_name, 0, 3)])
        with pytest.raises(KafkaException) as e:
            c.commit(asynchronous=False)              # not greater: nothing to commit
        assert e.value.args[0].code() == KafkaError._NO_OFFSET
        if leaving == "unassign":
            c.unassign()
        elif leaving == "incremental_unassign":
            c.incremental_unassign([tp])
        elif leaving == "revoke":
            c.unsubscribe()
        deadline = time.monotonic() + 10
        while leaving != "close" and not heard and time.monotonic() < deadline:
            c.poll(0.1)
    finally:
        c.close()
    assert heard == [(None, [(0, 3)])]
    other = Consumer({"bootstrap.servers": tansu_broker.bootstrap, "group.id": topic_name})
    try:
        assert other.committed([tp], 10)[0].offset == 3
    finally:
        other.close()


def test_committed_with_no_time_to_wait_times_out(tansu_broker, topic_name):
    """committed(partitions, 0), or any timeout under a millisecond, is _TIMED_OUT at
    once, as in confluent-kafka 2.16 (which waits whole milliseconds); it was
    answered."""
    tansu_broker.create_topic(topic_name, partitions=1)
    tp = TopicPartition(topic_name, 0)
    c = Consumer({"bootstrap.servers": tansu_broker.bootstrap, "group.id": topic_name})
    try:
        c.commit(offsets=[TopicPartition(topic_name, 0, 4)], asynchronous=False)
        assert c.committed([tp], 5)[0].offset == 4
        for timeout in (0, 0.0005):
            with pytest.raises(KafkaException) as e:
                c.committed([tp], timeout)
            assert e.value.args[0].code() == KafkaError._TIMED_OUT
        assert c.committed([tp], -1)[0].offset == 4           # no limit
    finally:
        c.close()


def test_regex_subscription_follows_new_topics(broker, topic_name):
    prefix = f"rx-{uuid.uuid4().hex[:6]}"
    broker.create_topic(f"{prefix}-a", partitions=2)
    broker.create_topic(f"{prefix}-b", partitions=1)
    broker.create_topic(f"other-{prefix}", partitions=1)
    assigned = []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"rx-{prefix}",
                  "topic.metadata.refresh.interval.ms": 300, "heartbeat.interval.ms": 300,
                  "session.timeout.ms": 6000})
    try:
        c.subscribe([f"^{prefix}-.*"], on_assign=lambda cons, parts: assigned.append(
            sorted((tp.topic, tp.partition) for tp in parts)))

        def holds(want):
            return sorted((tp.topic, tp.partition) for tp in c.assignment()) == want

        first = [(f"{prefix}-a", 0), (f"{prefix}-a", 1), (f"{prefix}-b", 0)]
        _wait_for(lambda: holds(first), c, 30, "the pattern's topics")
        broker.create_topic(f"{prefix}-c", partitions=1)
        _wait_for(lambda: holds(sorted(first + [(f"{prefix}-c", 0)])), c, 30,
                  "the new topic to join the assignment")
        assert all(not t.startswith("other-") for parts in assigned for t, _ in parts)
    finally:
        c.close()


def test_max_poll_interval_exceeded_then_rejoin(broker, topic_name):
    broker.create_topic(topic_name, partitions=2)
    interval_ms = broker.group_session_ms
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"mp-{topic_name}",
                  "session.timeout.ms": interval_ms, "max.poll.interval.ms": interval_ms,
                  "heartbeat.interval.ms": 300})
    try:
        c.subscribe([topic_name])
        _wait_for(lambda: len(c.assignment()) == 2, c, 30, "the assignment")
        # the application stalls longer than max.poll.interval.ms
        time.sleep(interval_ms / 1000 + 1)
        events = _wait_for(lambda: True, c, 1, "")
        deadline = time.monotonic() + 5
        while not events and time.monotonic() < deadline:
            events = [m for m in c.consume(10, 0.2) if m.error() is not None]
        assert events and events[0].error().code() == KafkaError._MAX_POLL_EXCEEDED
        # Polling again rejoins the group and gets the partitions back.
        _wait_for(lambda: len(c.assignment()) == 2, c, 30, "the rejoin")
    finally:
        c.close()


def _ten_messages_in_partition_0(broker, topic_name):
    with Producer({"bootstrap.servers": broker.bootstrap}) as p:
        for i in range(10):
            p.produce(topic_name, b"m%d" % i, partition=0)
        assert p.flush(30) == 0


def _read_the_first_five(c):
    """The group member ``c`` (subscribed) reads offsets 0-4 of partition 0."""
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        got += [m.offset() for m in c.consume(5 - len(got), 0.5) if m.error() is None]
    assert got == [0, 1, 2, 3, 4]


def test_a_member_past_max_poll_interval_commits_nothing_of_its_lost_assignment(
        noida_broker, topic_name):
    """A member's processing outlasts max.poll.interval.ms: the client leaves the group,
    the assignment is lost, the partition's next owner commits 8. The late member's
    commit() of its stored offsets is refused with _ASSIGNMENT_LOST, as librdkafka
    refuses it, until it polls (on_lost): sent without a membership, the broker took it
    from the group with no members left and the group's offset went back to 5 (tools/soak.py
    group --stall --aio, seed 319: a stalled member's commit at the end of the run), and
    so did its close()."""
    broker = noida_broker
    broker.create_topic(topic_name, partitions=1)
    group = f"lost-{topic_name}"
    _ten_messages_in_partition_0(broker, topic_name)
    interval_ms = broker.group_session_ms
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "session.timeout.ms": interval_ms, "max.poll.interval.ms": interval_ms,
                  "heartbeat.interval.ms": 300, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic_name])
        _read_the_first_five(c)
        time.sleep(interval_ms / 1000 + 2)   # processing past max.poll.interval.ms
        other = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        try:   # the partition's next owner, gone again: the group has no members now
            other.commit(offsets=[TopicPartition(topic_name, 0, 8)], asynchronous=False)
        finally:
            other.close()
        assert _committed_offset(broker, group, topic_name) == 8
        with pytest.raises(KafkaException) as refused:
            c.commit(asynchronous=False)
        assert refused.value.args[0].code() == KafkaError._ASSIGNMENT_LOST
        assert _committed_offset(broker, group, topic_name) == 8
    finally:
        c.close()
    assert _committed_offset(broker, group, topic_name) == 8


def test_a_member_whose_revocation_waits_when_it_passes_max_poll_interval_commits_nothing(
        noida_broker, topic_name):
    """As above with an eager assignor, the way tools/soak.py seed 366 met it: while the
    member does not poll, another joins; the member's revocation is queued (not run),
    then max.poll.interval.ms passes (nothing owned left to lose). The other member
    commits 8 and leaves; the late member's commit() of its stored offsets is still
    _ASSIGNMENT_LOST (it went out and took the group's offset back to 5)."""
    broker = noida_broker
    broker.create_topic(topic_name, partitions=1)
    group = f"lost-eager-{topic_name}"
    _ten_messages_in_partition_0(broker, topic_name)
    interval_ms = broker.group_session_ms
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group,
            "session.timeout.ms": interval_ms, "max.poll.interval.ms": interval_ms,
            "heartbeat.interval.ms": 300, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "partition.assignment.strategy": "range"}
    c = Consumer(conf)
    try:
        c.subscribe([topic_name])
        _read_the_first_five(c)
        stalled_at = time.monotonic()      # c polls no more from here
        other = Consumer(conf)
        try:
            other.subscribe([topic_name])
            _wait_for(lambda: len(other.assignment()) == 1, other, 60, "the other's turn")
            other.commit(offsets=[TopicPartition(topic_name, 0, 8)], asynchronous=False)
        finally:
            other.close()
        time.sleep(max(0.0, stalled_at + interval_ms / 1000 + 2 - time.monotonic()))
        assert _committed_offset(broker, group, topic_name) == 8
        with pytest.raises(KafkaException) as refused:
            c.commit(asynchronous=False)
        assert refused.value.args[0].code() == KafkaError._ASSIGNMENT_LOST
        assert _committed_offset(broker, group, topic_name) == 8
    finally:
        c.close()
    assert _committed_offset(broker, group, topic_name) == 8


def _committed_offset(broker, group, topic):
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        return c.committed([TopicPartition(topic, 0)], 10)[0].offset
    finally:
        c.close()


def test_a_session_timeout_the_broker_refuses_is_reported_by_name(noida_broker, topic_name):
    """noida-db, as Apache Kafka, refuses sessions under group.min.session.timeout.ms
    (6 s): the error event names the setting and its value (it said "JoinGroup <group>:
    JoinGroup")."""
    noida_broker.create_topic(topic_name, partitions=1)
    c = Consumer({"bootstrap.servers": noida_broker.bootstrap, "group.id": f"st-{topic_name}",
                  "session.timeout.ms": 3000, "max.poll.interval.ms": 3000})
    try:
        c.subscribe([topic_name])
        events = []
        deadline = time.monotonic() + 10
        while not events and time.monotonic() < deadline:
            events = [m.error() for m in c.consume(10, 0.2) if m.error() is not None]
        assert events, "no error event"
        assert events[0].code() == KafkaError.INVALID_SESSION_TIMEOUT
        assert "session.timeout.ms (3000)" in events[0].str(), events[0].str()
        assert c.assignment() == []
    finally:
        c.close()


def test_static_member_comes_back_without_a_rebalance(broker, topic_name):
    if broker.kind == "tansu":
        pytest.skip("Tansu 0.6 does not hand a returning static member its assignment "
                    "(seen here: nothing within 5 s)")
    broker.create_topic(topic_name, partitions=4)
    group = f"static-{uuid.uuid4().hex[:8]}"

    def member(instance, log):
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                      "group.instance.id": instance, "session.timeout.ms": 10000,
                      "heartbeat.interval.ms": 300})
        c.subscribe([topic_name],
                    on_assign=lambda cons, ps: log.append(("assign", sorted(
                        tp.partition for tp in ps))),
                    on_revoke=lambda cons, ps: log.append(("revoke", sorted(
                        tp.partition for tp in ps))))
        return c

    def spin(consumers, until, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for c in consumers:
                c.consume(100, 0.05)
            if until():
                return
        raise AssertionError("timed out")

    a_log, c_log = [], []
    a, c = member("inst-a", a_log), member("inst-c", c_log)
    try:
        spin([a, c], lambda: len(a.assignment()) + len(c.assignment()) == 4
             and a.assignment() and c.assignment(), 30)
        held_a = sorted(tp.partition for tp in a.assignment())
        before = list(c_log)
        a.close()  # a static member does not leave the group
        a_log2 = []
        a = member("inst-a", a_log2)
        spin([a, c], lambda: sorted(tp.partition for tp in a.assignment()) == held_a, 8)
        assert c_log == before, "the other member saw a rebalance"
    finally:
        a.close()
        c.close()


@pytest.mark.parametrize("how", ["exit", "collected"])
def test_a_consumer_never_closed_commits_and_leaves_its_group(broker, topic_name, run_child,
                                                               how):
    """As librdkafka's destroy does for a consumer never closed (what confluent-kafka's
    Consumer does when deallocated): one collected, or still open at interpreter exit,
    commits its stored offsets (enable.auto.commit) and leaves the group at once, instead
    of leaving the next member to re-read what it consumed and the group to wait
    session.timeout.ms for it."""
    from kafka_client.admin import AdminClient

    broker.create_topic(topic_name, partitions=1)
    with Producer({"bootstrap.servers": broker.bootstrap}) as p:
        for i in range(100):
            p.produce(topic_name, b"%d" % i, partition=0)
        assert p.flush(30) == 0
    group = f"unclosed-{how}-{topic_name}"
    drop = "del c; import gc; gc.collect(); print('collected')" if how == "collected" else ""
    out = run_child(f"""
        from kafka_client import Consumer
        c = Consumer({{"bootstrap.servers": "{broker.bootstrap}", "group.id": "{group}",
                      "auto.offset.reset": "earliest", "auto.commit.interval.ms": 600000,
                      "session.timeout.ms": 10000}})
        c.subscribe(["{topic_name}"])
        got = 0
        while got < 60:
            got += len([m for m in c.consume(60 - got, 1) if m.error() is None])
        print("consumed", got)
        {drop}
    """, timeout=90)
    assert out.returncode == 0, out.stderr
    assert "consumed 60" in out.stdout
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        assert c.committed([TopicPartition(topic_name, 0)], 10)[0].offset == 60
    finally:
        c.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        desc = admin.describe_consumer_groups([group])[group].result(10)
        assert desc.members == []   # left at once, not after its 10 s session
    finally:
        admin.close()


def test_the_coordinator_lookup_goes_out_when_the_first_connection_is_up(
        broker, topic_name, monkeypatch):
    """A consumer connects once it subscribes: its FindCoordinator waited for the group's
    next 50 ms look for a ready connection (every group member's start paid it); it goes
    out as soon as the connection is up. The look stretched to a minute here, only that
    can bring the assignment within the test's 30 s."""
    from kafka_client.consumer import group

    monkeypatch.setattr(group, "FIND_POLL_S", 60.0)
    broker.create_topic(topic_name, partitions=1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"find-{topic_name}",
                  "session.timeout.ms": 6000})
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.1)
        assert c.assignment() == [TopicPartition(topic_name, 0)]
    finally:
        c.close()


def test_threads_polling_during_a_revocation_get_none_of_its_partitions(tansu_broker,
                                                                        topic_name):
    """Three threads poll one member; a second member joins and the first's on_revoke
    takes 0.5 s. While it runs, the other threads get no message of the partitions being
    revoked (they got thousands: processed after the revocation's commit, so read again
    by their next owner), as librdkafka pauses them when the rebalance starts."""
    import threading

    tansu_broker.create_topic(topic_name, partitions=PARTITIONS)
    produce(tansu_broker, topic_name, 0, 60_000)
    conf = {"bootstrap.servers": tansu_broker.bootstrap, "group.id": topic_name,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500}
    state = {"revoking": None, "during": 0, "revokes": 0, "got": 0}

    def on_revoke(consumer, parts):
        state["revoking"] = {(p.topic, p.partition) for p in parts}
        time.sleep(0.5)
        state["revoking"] = None
        state["revokes"] += 1

    a = Consumer(conf)
    a.subscribe([topic_name], on_revoke=on_revoke)
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            m = a.poll(0.2)
            if m is not None and m.error() is None:
                state["got"] += 1
                revoking = state["revoking"]
                if revoking is not None and (m.topic(), m.partition()) in revoking:
                    state["during"] += 1
                time.sleep(0.0002)      # some work per message: a backlog remains

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    b = Consumer(conf)
    try:
        deadline = time.monotonic() + 20
        while state["got"] < 1000 and time.monotonic() < deadline:
            time.sleep(0.05)
        b.subscribe([topic_name])
        while state["revokes"] == 0 and time.monotonic() < deadline:
            b.poll(0.1)
        assert state["revokes"] >= 1 and state["got"] < 60_000   # revoked with a backlog
        assert state["during"] == 0
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        a.close()
        b.close()


def test_close_while_another_thread_revokes_runs_on_revoke_once(tansu_broker, topic_name):
    """A reader thread is inside on_revoke (a rebalance) when another thread calls
    close(): close waits for that revocation and does not revoke the same partitions
    again (on_revoke ran twice, both at once)."""
    import threading

    tansu_broker.create_topic(topic_name, partitions=2)
    produce(tansu_broker, topic_name, 0, 100)
    conf = {"bootstrap.servers": tansu_broker.bootstrap, "group.id": topic_name,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500}
    calls, lock = [], threading.Lock()
    running = threading.Event()

    def on_revoke(consumer, parts):
        with lock:
            calls.append(sorted(p.partition for p in parts))
        running.set()
        time.sleep(1.0)

    a = Consumer(conf)
    a.subscribe([topic_name], on_revoke=on_revoke)
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            try:
                a.poll(0.2)
            except RuntimeError:        # closed
                return

    r = threading.Thread(target=reader)
    r.start()
    b = Consumer(conf)
    try:
        deadline = time.monotonic() + 20
        while not a.assignment() and time.monotonic() < deadline:
            time.sleep(0.05)
        b.subscribe([topic_name])
        while not running.is_set() and time.monotonic() < deadline:
            b.poll(0.1)
        assert running.is_set()
        a.close()
        assert len(calls) == 1, calls
    finally:
        stop.set()
        r.join(10)
        b.close()


def test_a_pause_lasts_across_rebalances_until_resume(tansu_broker, topic_name):
    """As librdkafka (confluent-kafka 2.16 on the same steps): partitions paused by the
    application stay paused when a rebalance takes them away and gives them back, until
    resume(). They were fetched again as soon as they came back."""
    tansu_broker.create_topic(topic_name, partitions=2)
    conf = {"bootstrap.servers": tansu_broker.bootstrap, "group.id": topic_name,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500, "fetch.wait.max.ms": 50}
    first, second = Consumer(conf), Consumer(conf)
    got = []

    def poll_until(members, done, seconds=30):
        deadline = time.monotonic() + seconds
        while not done() and time.monotonic() < deadline:
            for m in members:
                got.extend((msg.partition(), msg.offset()) for msg in m.consume(10, 0.1)
                           if msg.error() is None)
        return done()

    try:
        first.subscribe([topic_name])
        assert poll_until([first], lambda: len(first.assignment()) == 2)
        first.pause(first.assignment())
        second.subscribe([topic_name])
        assert poll_until([first, second], lambda: len(first.assignment()) == 1
                          and len(second.assignment()) == 1)
        second.close()
        assert poll_until([first], lambda: len(first.assignment()) == 2)
        with Producer({"bootstrap.servers": tansu_broker.bootstrap}) as p:
            for i in range(6):
                p.produce(topic_name, b"%d" % i, partition=i % 2)
            assert p.flush(30) == 0
        poll_until([first], lambda: False, seconds=2)
        assert got == []
        first.resume([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
        assert poll_until([first], lambda: len(got) == 6)
        assert sorted(got) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    finally:
        first.close()
        second.close()


def test_close_called_by_the_on_revoke_close_runs_returns(tansu_broker, topic_name,
                                                          run_child):
    """An on_revoke that calls close() (cleanup code that closes what it is handed), run
    by close() itself: the inner close() returns at once and the outer one finishes the
    closing: the revocation runs once, the offsets are committed once, the group left.
    In a child: a close() waiting for itself would hang."""
    tansu_broker.create_topic(topic_name, partitions=PARTITIONS)
    produce(tansu_broker, topic_name, 0, 2 * PARTITIONS)
    out = run_child(f"""
        import time
        from kafka_client import Consumer

        revoked = []

        def on_revoke(consumer, parts):
            revoked.append(sorted(p.partition for p in parts))
            consumer.close()

        c = Consumer({{"bootstrap.servers": "{tansu_broker.bootstrap}",
                      "group.id": "{topic_name}", "auto.offset.reset": "earliest",
                      "enable.auto.commit": True,
                      "session.timeout.ms": {tansu_broker.group_session_ms},
                      "heartbeat.interval.ms": 500, "log_level": 0}})
        c.subscribe(["{topic_name}"], on_revoke=on_revoke)
        got, deadline = 0, time.monotonic() + 30
        while got < {2 * PARTITIONS} and time.monotonic() < deadline:
            got += sum(1 for m in c.consume(100, 0.5) if m.error() is None)
        start = time.monotonic()
        c.close()
        print(got, revoked, time.monotonic() - start < 10)
    """, timeout=90)
    assert out.stdout.splitlines()[-1:] == [
        f"{2 * PARTITIONS} {[list(range(PARTITIONS))]} True"], out.stderr
    check = Consumer({"bootstrap.servers": tansu_broker.bootstrap, "group.id": topic_name})
    try:
        committed = check.committed(
            [TopicPartition(topic_name, p) for p in range(PARTITIONS)], 10)
        assert [tp.offset for tp in committed] == [2] * PARTITIONS
    finally:
        check.close()
