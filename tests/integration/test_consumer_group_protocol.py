"""KIP-848's consumer group protocol (``group.protocol=consumer``).

Tansu and noida-db do not serve ConsumerGroupHeartbeat: a consumer asking for the protocol
there gets a prompt error naming what is missing. The protocol itself is exercised on the
test cluster (``kafka_client.testing``), which serves it as Apache Kafka 4 does, with
confluent-kafka's consumers in the same groups as the independent check.
"""
from __future__ import annotations

import time
from collections import defaultdict

import pytest

from kafka_client import Consumer, KafkaError, Producer, TopicPartition

pytestmark = pytest.mark.integration


def test_a_broker_without_the_protocol_gets_a_clear_error(broker, topic_name):
    errors = []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name,
                  "group.protocol": "consumer", "error_cb": errors.append})
    try:
        c.subscribe([topic_name])     # (a topic never made: reported too, as librdkafka)
        start = time.monotonic()
        msg = None
        while time.monotonic() - start < 10:
            msg = c.poll(0.2)
            if msg is not None and msg.error().code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                break
        assert msg is not None and msg.error() is not None, "no error within 10 s"
        err = msg.error()
        assert err.code() == KafkaError._UNSUPPORTED_FEATURE
        assert "ConsumerGroupHeartbeat" in err.str() and "group.protocol=classic" in err.str()
        assert time.monotonic() - start < 5
        # The member stopped: it neither retries nor reports the error again.
        later = c.poll(0.5)
        assert later is None or later.error().code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        assert c.assignment() == []
    finally:
        c.close()


# ----------------------------------------------------------------- on the test cluster
PARTITIONS = 6
HEARTBEAT_MS = 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from kafka_client.testing import Cluster
    with Cluster(brokers=3, data_dir=str(tmp_path_factory.mktemp("kip848")),
                 broker_config={"group.consumer.heartbeat.interval.ms": HEARTBEAT_MS,
                                "group.consumer.session.timeout.ms": 4000}) as c:
        yield c


@pytest.fixture
def topic(cluster, topic_name):
    cluster.create_topic(topic_name, partitions=PARTITIONS, replication_factor=1)
    return topic_name


def produce(cluster, topic, start, count):
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 2}) as p:
        for i in range(start, start + count):
            p.produce(topic, b"m%d" % i, partition=i % PARTITIONS)
        assert p.flush(30) == 0


class Holders:
    """Who holds each partition, as the members' rebalance callbacks say, checked at every
    callback: a partition is never assigned to a member while another still holds it."""

    def __init__(self):
        self.holder = {}
        self.log = []

    def assigned(self, name, parts):
        for p in parts:
            other = self.holder.get(p)
            assert other is None, f"partition {p} assigned to {name} while {other} holds it"
            self.holder[p] = name
        self.log.append((name, "assign", sorted(parts)))

    def released(self, name, parts, how):
        for p in parts:
            assert self.holder.get(p) == name, f"{name} {how} {p} held by {self.holder.get(p)}"
            del self.holder[p]
        self.log.append((name, how, sorted(parts)))

    def of(self, name):
        return {p for p, n in self.holder.items() if n == name}


class Member:
    """A consumer with group.protocol=consumer, driven by the test one poll at a time;
    what it returns is 'processed' when it is returned (auto commit of stored offsets, as
    a poll loop has it). Ours by default; ``make`` builds another library's consumer
    from the same configuration."""

    def __init__(self, name, cluster, topic, group, holders, make=Consumer, **conf):
        self.name = name
        self.holders = holders
        self.errors = []
        self.c = make({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                       "group.protocol": "consumer", "auto.offset.reset": "earliest",
                       "auto.commit.interval.ms": 100, "fetch.wait.max.ms": 50,
                       "error_cb": self.errors.append, **conf})
        self.c.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke,
                         on_lost=self._lost)
        self.alive = True

    def _assign(self, consumer, parts):
        self.holders.assigned(self.name, [tp.partition for tp in parts])

    def _revoke(self, consumer, parts):
        self.holders.released(self.name, [tp.partition for tp in parts], "revoke")

    def _lost(self, consumer, parts):
        self.holders.released(self.name, [tp.partition for tp in parts], "lost")

    def step(self, processed):
        for m in self.c.consume(200, 0.02):
            if m.error() is not None:
                self.errors.append(m.error())
                continue
            processed[(m.partition(), m.offset())].append(self.name)

    def close(self):
        self.c.close()
        self.alive = False


def drive(members, processed, until, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            if m.alive:
                m.step(processed)
        if until():
            return
    raise AssertionError(f"timed out waiting for {what}")


def spread(holders, members, sizes):
    live = [m for m in members if m.alive]
    return (sorted(len(holders.of(m.name)) for m in live) == sizes
            and sum(len(holders.of(m.name)) for m in live) == PARTITIONS)


def exactly_once(processed, count):
    return len(processed) == count and all(len(v) == 1 for v in processed.values())


def test_members_share_hand_over_and_process_every_message_once(cluster, topic):
    holders = Holders()
    processed = defaultdict(list)
    a = Member("a", cluster, topic, topic, holders)
    members = [a]
    produce(cluster, topic, 0, 600)
    drive(members, processed, lambda: spread(holders, members, [6]) and len(processed) >= 600,
          30, "a alone holding all six partitions and reading the first 600")
    b = Member("b", cluster, topic, topic, holders)
    c = Member("c", cluster, topic, topic, holders)
    members += [b, c]
    drive(members, processed, lambda: spread(holders, members, [2, 2, 2]), 30,
          "three members with two partitions each")
    produce(cluster, topic, 600, 600)
    drive(members, processed, lambda: len(processed) >= 1200, 30, "the next 600")
    b.close()    # commits on revoke, leaves with epoch -1: its partitions move at once
    produce(cluster, topic, 1200, 600)
    drive(members, processed, lambda: spread(holders, members, [3, 3])
          and len(processed) >= 1800, 30, "b's partitions taken over and 1800 read")
    # Clean hand-overs (revocation commits, the coordinator waits for it): nothing twice.
    dup = {k: v for k, v in processed.items() if len(v) > 1}
    assert exactly_once(processed, 1800), f"duplicates: {sorted(dup.items())[:5]}"
    assert not [e for m in members for e in m.errors], [m.errors for m in members]
    assert all(how != "lost" for _n, how, _p in holders.log), holders.log
    # Auto-commit (with the member epoch) brings the committed offsets to the end.
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    drive(members, processed, lambda: [tp.offset for tp in a.c.committed(parts)]
          == [300] * PARTITIONS, 10, "every partition committed at its end")
    meta = a.c.consumer_group_metadata()
    assert meta.generation_id > 0 and meta.member_id == a.c.memberid()
    for m in (a, c):
        m.close()


def their_member(name, cluster, topic, group, holders):
    """confluent-kafka's consumer (librdkafka's KIP-848 implementation) in the same group:
    the independent check that ours speaks the protocol as the group expects."""
    ck = pytest.importorskip("confluent_kafka")
    return Member(name, cluster, topic, group, holders, make=ck.Consumer)


def test_ours_and_librdkafkas_members_share_one_group(cluster, topic):
    holders = Holders()
    processed = defaultdict(list)
    ours = Member("ours", cluster, topic, topic, holders)
    theirs = their_member("theirs", cluster, topic, topic, holders)
    members = [ours, theirs]
    produce(cluster, topic, 0, 1200)
    drive(members, processed, lambda: spread(holders, members, [3, 3])
          and len(processed) >= 1200, 30, "three partitions each and 1200 read")
    ours2 = Member("ours2", cluster, topic, topic, holders)
    members.append(ours2)
    drive(members, processed, lambda: spread(holders, members, [2, 2, 2]), 30,
          "two partitions each")
    produce(cluster, topic, 1200, 600)
    drive(members, processed, lambda: len(processed) >= 1800, 30, "the next 600")
    theirs.close()
    ours.close()
    produce(cluster, topic, 1800, 600)
    drive(members, processed, lambda: spread(holders, members, [6])
          and len(processed) >= 2400, 30, "ours2 alone with everything")
    dup = {k: v for k, v in processed.items() if len(v) > 1}
    assert exactly_once(processed, 2400), f"duplicates: {sorted(dup.items())[:5]}"
    assert all(how != "lost" for _n, how, _p in holders.log), holders.log
    assert not ours.errors and not ours2.errors and not theirs.errors
    ours2.close()


def test_a_fenced_member_loses_its_partitions_and_joins_again(cluster, topic):
    holders = Holders()
    processed = defaultdict(list)
    a = Member("a", cluster, topic, topic, holders)
    produce(cluster, topic, 0, 600)
    drive([a], processed, lambda: spread(holders, [a], [6]) and len(processed) >= 600, 30,
          "a holding everything")
    first_id = a.c.memberid()
    cluster.inject_errors("ConsumerGroupHeartbeat", ["FENCED_MEMBER_EPOCH"])
    drive([a], processed, lambda: any(how == "lost" for _n, how, _p in holders.log), 10,
          "the fenced member's partitions lost")
    produce(cluster, topic, 600, 600)
    drive([a], processed, lambda: spread(holders, [a], [6]) and len(processed) >= 1200, 30,
          "a member again, reading on")
    assert a.c.memberid() == first_id     # KIP-1082: the member keeps its own id
    assert [how for _n, how, _p in holders.log] == ["assign", "lost", "assign"]
    assert not a.errors, a.errors         # a fenced member is not an application error
    a.close()


def test_a_static_member_comes_back_to_its_partitions(cluster, topic):
    holders = Holders()
    processed = defaultdict(list)
    a = Member("a", cluster, topic, topic, holders, **{"group.instance.id": "static-a"})
    b = Member("b", cluster, topic, topic, holders)
    members = [a, b]
    drive(members, processed, lambda: spread(holders, members, [3, 3]), 30, "3 + 3")
    a_parts, b_parts = holders.of("a"), holders.of("b")
    a.close()                       # leaves with epoch -2: its partitions wait for it
    mark = len(holders.log)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        b.step(processed)
    assert holders.of("b") == b_parts, "a static member's partitions went to another member"
    a2 = Member("a2", cluster, topic, topic, holders, **{"group.instance.id": "static-a"})
    members.append(a2)
    drive(members, processed, lambda: holders.of("a2") == a_parts, 10,
          "the instance's partitions back with its next member")
    assert holders.of("b") == b_parts
    assert [e for e in holders.log[mark:] if e[0] == "b"] == []
    a2.close()
    b.close()


def test_max_poll_interval_exceeded_then_back(cluster, topic):
    # a's partitions go to b while a is not polling; a learns it lost them at its next
    # poll, which returns _MAX_POLL_EXCEEDED, and its callbacks run in the poll after
    # (as librdkafka's), so each member's view is kept apart.
    held_a, held_b = Holders(), Holders()
    processed = defaultdict(list)
    a = Member("a", cluster, topic, topic, held_a, **{"max.poll.interval.ms": 1000})
    b = Member("b", cluster, topic, topic, held_b)
    members = [a, b]

    def split():
        return sorted([len(held_a.of("a")), len(held_b.of("b"))]) == [3, 3]

    drive(members, processed, split, 30, "3 + 3")
    a_had = sorted(held_a.of("a"))
    deadline = time.monotonic() + 2.5          # a stops polling
    while time.monotonic() < deadline and len(held_b.of("b")) < PARTITIONS:
        b.step(processed)
    assert len(held_b.of("b")) == PARTITIONS, "a's partitions never reached b"
    a.step(processed)      # a polls again: the error
    assert KafkaError._MAX_POLL_EXCEEDED in [e.code() for e in a.errors], a.errors
    assert ("a", "lost", a_had) not in held_a.log, held_a.log
    a.step(processed)      # and again: its partitions lost, then back
    assert ("a", "lost", a_had) in held_a.log, held_a.log
    drive(members, processed, split, 30, "3 + 3 again")
    a.close()
    b.close()


def test_a_revocation_not_run_before_the_poll_interval_ran_out_is_a_loss(cluster, topic):
    # b joins while a, holding every partition, stops polling: the coordinator asks a to
    # give half of them up (its on_revoke waits for a's next poll), then a's poll interval
    # runs out and it leaves. At its next poll a holds nothing any more: the revocation it
    # had not run is a loss too (on_lost, no commit: soak seed 132 saw on_revoke's commit
    # refused with UNKNOWN_MEMBER_ID), and each partition is released once.
    held_a, held_b = Holders(), Holders()
    processed = defaultdict(list)
    a = Member("a", cluster, topic, topic, held_a, **{"max.poll.interval.ms": 1500})
    drive([a], processed, lambda: len(held_a.of("a")) == PARTITIONS, 30, "a holds all")
    b = Member("b", cluster, topic, topic, held_b)
    deadline = time.monotonic() + 20          # a stops polling
    while time.monotonic() < deadline and len(held_b.of("b")) < PARTITIONS:
        b.step(processed)
    assert len(held_b.of("b")) == PARTITIONS, "a's partitions never reached b"
    mark = len(held_a.log)
    a.step(processed)       # a polls again: the error; then its pending revocation and
    assert KafkaError._MAX_POLL_EXCEEDED in [e.code() for e in a.errors], a.errors
    a.step(processed)       # the loss run in the poll after it
    assert held_a.log[mark:] and all(how == "lost" for _, how, _ in held_a.log[mark:]), \
        held_a.log
    assert held_a.of("a") == set(), held_a.log
    a.close()
    b.close()


def test_an_unknown_remote_assignor_is_reported_and_the_member_stops(cluster, topic):
    holders = Holders()
    a = Member("a", cluster, topic, topic, holders, **{"group.remote.assignor": "nope"})
    drive([a], defaultdict(list), lambda: bool(a.errors), 10, "the assignor's error")
    assert a.errors[0].code() == KafkaError.UNSUPPORTED_ASSIGNOR, a.errors
    assert "nope" in a.errors[0].str() or "assignor" in a.errors[0].str().lower()
    deadline = time.monotonic() + 1.0      # no retrying, no second report
    while time.monotonic() < deadline:
        a.step(defaultdict(list))
    assert len(a.errors) == 1 and holders.log == [] and a.c.assignment() == []
    a.close()


def test_a_commit_with_a_stale_member_epoch_is_retried(cluster, topic):
    holders = Holders()
    processed = defaultdict(list)
    a = Member("a", cluster, topic, topic, holders, **{"enable.auto.commit": False})
    produce(cluster, topic, 0, 60)
    drive([a], processed, lambda: len(processed) >= 60, 30, "60 read")
    cluster.inject_errors("OffsetCommit", ["STALE_MEMBER_EPOCH"])
    a.c.commit(asynchronous=False)
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    assert [tp.offset for tp in a.c.committed(parts)] == [10] * PARTITIONS
    assert cluster.pending_errors() == []
    a.close()


def test_admin_describes_and_lists_consumer_groups_as_librdkafka_does(cluster, topic):
    from confluent_kafka.admin import AdminClient as TheirAdmin

    from kafka_client import ConsumerGroupState, ConsumerGroupType
    from kafka_client.admin import AdminClient
    holders = Holders()
    members = [Member("a", cluster, topic, topic, holders),
               Member("b", cluster, topic, topic, holders, **{"group.instance.id": "i-b"})]
    classic = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                        "group.id": topic + "-classic"})
    classic.subscribe([topic])
    drive(members, defaultdict(list), lambda: spread(holders, members, [3, 3]), 30, "3 + 3")
    while not classic.assignment():
        classic.poll(0.05)
    ours, theirs = (AdminClient({"bootstrap.servers": cluster.bootstrap_servers}),
                    TheirAdmin({"bootstrap.servers": cluster.bootstrap_servers}))

    def view(admin, group):
        d = admin.describe_consumer_groups([group])[group].result(10)
        return (d.type.name, d.state.name, d.partition_assignor, d.is_simple_consumer_group,
                sorted((m.member_id, m.client_id, m.group_instance_id,
                        sorted((tp.topic, tp.partition)
                               for tp in m.assignment.topic_partitions),
                        m.target_assignment and sorted(
                            (tp.topic, tp.partition)
                            for tp in m.target_assignment.topic_partitions))
                       for m in d.members))

    mine = view(ours, topic)
    assert mine[:3] == ("CONSUMER", "STABLE", "uniform")
    assert {m[0]: len(m[3]) for m in mine[4]} == {members[0].c.memberid(): 3,
                                                  members[1].c.memberid(): 3}
    assert mine == view(theirs, topic)
    assert view(ours, topic + "-classic")[:2] == ("CLASSIC", "STABLE")
    assert view(ours, topic + "-classic") == view(theirs, topic + "-classic")
    assert view(ours, "no-such-group") == view(theirs, "no-such-group")
    listed = ours.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(10)
    kinds = {g.group_id: (g.type, g.state) for g in listed.valid}
    assert kinds.get(topic) == (ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE)
    assert topic + "-classic" not in kinds
    for m in members:
        m.close()
    classic.close()


def two_members_reading(cluster, topic, **conf):
    """Members a and b with three partitions each, having read the first 600 messages."""
    holders = Holders()
    processed = defaultdict(list)
    members = [Member("a", cluster, topic, topic, holders, **conf),
               Member("b", cluster, topic, topic, holders, **conf)]
    produce(cluster, topic, 0, 600)
    drive(members, processed, lambda: spread(holders, members, [3, 3])
          and len(processed) >= 600, 30, "3 + 3 and 600 read")
    return holders, processed, members


def test_members_keep_their_partitions_across_a_coordinator_move(cluster, topic):
    holders, processed, members = two_members_reading(cluster, topic)
    old = cluster.coordinator(group=topic)
    new = next(b.id for b in cluster.brokers if b.id != old)
    since = cluster.clear_request_log()
    cluster.move_coordinator(new, group=topic)
    produce(cluster, topic, 600, 600)
    mark = len(holders.log)
    drive(members, processed, lambda: len(processed) >= 1200 and any(
        e.api == "ConsumerGroupHeartbeat" and e.broker == new and not e.errors
        for e in cluster.request_log(since=since)), 30, "heartbeats at the new coordinator")
    assert holders.log[mark:] == [], "a coordinator move is not a rebalance"
    assert exactly_once(processed, 1200)
    log = cluster.request_log(since=since)
    assert any("NOT_COORDINATOR" in e.errors and e.broker == old for e in log)
    for m in members:
        m.close()


def test_a_member_closed_right_after_a_coordinator_move_leaves_at_the_new_one(cluster,
                                                                              topic):
    # Its leave meets NOT_COORDINATOR at the old coordinator (whose heartbeat answers take
    # 1 s, so the member cannot have learned of the move before): it finds the new one
    # and leaves there, and the other member takes its partitions. (The leave used to be
    # dropped: the group kept the closed member, and its partitions from the other, until
    # its session timed out, 4 s here and 45 s by default.)
    # No commits: an OffsetCommit meeting NOT_COORDINATOR would tell a of the move first.
    holders, processed, (a, b) = two_members_reading(cluster, topic,
                                                     **{"enable.auto.commit": False})
    old = cluster.coordinator(group=topic)
    new = next(br.id for br in cluster.brokers if br.id != old)
    since = cluster.clear_request_log()
    cluster.set_latency(1.0, broker=old, apis=["ConsumerGroupHeartbeat"])
    try:
        cluster.move_coordinator(new, group=topic)
        started = time.monotonic()
        a.close()
        drive([b], processed, lambda: len(holders.of("b")) == PARTITIONS, 30,
              "b holding every partition")
        took = time.monotonic() - started
    finally:
        cluster.clear_faults()
    assert took < 3.0, f"{took:.1f} s: the leave waited for the session timeout"
    leaves = [(e.broker, e.errors) for e in cluster.request_log(since=since)
              if e.api == "ConsumerGroupHeartbeat" and e.details.get("member_epoch") == -1]
    assert leaves == [(old, ["NOT_COORDINATOR"]), (new, [])], leaves
    b.close()


def test_a_transaction_commits_the_offsets_of_a_kip848_member(cluster, topic, topic_name):
    """send_offsets_to_transaction() with the member's metadata: TxnOffsetCommit carries
    the member epoch (the coordinator checks it), and the offsets count once committed."""
    holders = Holders()
    processed = defaultdict(list)
    a = Member("a", cluster, topic, topic, holders, **{"enable.auto.commit": False})
    produce(cluster, topic, 0, 60)
    drive([a], processed, lambda: len(processed) >= 60, 30, "60 read")
    out = topic_name + "-out"
    cluster.create_topic(out, partitions=1, replication_factor=1)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                  "transactional.id": topic_name + "-txn"})
    p.init_transactions(30)
    since = cluster.clear_request_log()
    p.begin_transaction()
    for (part, off) in sorted(processed):
        p.produce(out, b"%d:%d" % (part, off))
    positions = a.c.position([TopicPartition(topic, q) for q in range(PARTITIONS)])
    meta = a.c.consumer_group_metadata()
    assert meta.generation_id > 0
    p.send_offsets_to_transaction(positions, meta, 30)
    p.commit_transaction(30)
    parts = [TopicPartition(topic, q) for q in range(PARTITIONS)]
    assert [tp.offset for tp in a.c.committed(parts)] == [10] * PARTITIONS
    txn_commits = cluster.request_log(since=since, api="TxnOffsetCommit")
    assert txn_commits and not any(e.errors for e in txn_commits), txn_commits
    p.close()
    a.close()


def test_patterns_follow_new_topics_and_a_member_can_subscribe_again(cluster, topic_name):
    first = topic_name + "-a"
    cluster.create_topic(first, partitions=2, replication_factor=1)
    conf = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": topic_name,
            "group.protocol": "consumer", "topic.metadata.refresh.interval.ms": 200}
    c = Consumer(conf)
    keys = []
    c.subscribe(["^" + topic_name + "-.*"],
                on_assign=lambda _c, ps: keys.append(("assign", sorted(
                    (tp.topic, tp.partition) for tp in ps))),
                on_revoke=lambda _c, ps: keys.append(("revoke", sorted(
                    (tp.topic, tp.partition) for tp in ps))))

    def poll_until(pred, what):
        deadline = time.monotonic() + 15
        while not pred():
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {keys}"
            c.poll(0.05)

    poll_until(lambda: len(c.assignment()) == 2, "the first topic")
    second = topic_name + "-b"
    cluster.create_topic(second, partitions=3, replication_factor=1)
    poll_until(lambda: len(c.assignment()) == 5, "the topic created later")
    assert keys[-1] == ("assign", [(second, p) for p in range(3)])
    c.unsubscribe()
    poll_until(lambda: not c.assignment(), "unsubscribe")
    c.subscribe([second])
    poll_until(lambda: sorted((tp.topic, tp.partition) for tp in c.assignment())
               == [(second, p) for p in range(3)], "the new subscription")
    c.close()


def test_members_keep_their_partitions_when_every_connection_is_cut(cluster, topic):
    """Connections dropped under the members (heartbeats and fetches in flight): they
    reconnect, say everything again in their next heartbeat, and keep their partitions
    (no on_lost, no rebalance); nothing is read twice or missed."""
    holders, processed, members = two_members_reading(cluster, topic)
    mark = len(holders.log)
    for round_ in range(3):
        cluster.cut_connections()
        produce(cluster, topic, 600 + 200 * round_, 200)
        drive(members, processed, lambda: len(processed) >= 800 + 200 * round_, 30,
              "reading on after the cut")
    assert holders.log[mark:] == [], holders.log[mark:]
    assert exactly_once(processed, 1200)
    for m in members:
        m.close()


def test_patterns_go_to_the_coordinator_as_librdkafka_sends_them(cluster, topic_name):
    """KIP-848 resolves a subscription's patterns on the coordinator (RE2/J, whole-name
    match): the first heartbeat carries the names and one SubscribedTopicRegex, the same
    fields confluent-kafka's consumer sends for the same subscription."""
    import confluent_kafka

    for suffix in ("a1", "a2", "b1", "plain", "other"):
        cluster.create_topic(f"{topic_name}-{suffix}", partitions=1, replication_factor=1)
    subscription = [f"^{topic_name}-a.*", f"^{topic_name}-b.*", f"{topic_name}-plain"]
    want = sorted(f"{topic_name}-{s}" for s in ("a1", "a2", "b1", "plain"))
    since = cluster.clear_request_log()
    ours = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "regex-ours",
                     "group.id": topic_name, "group.protocol": "consumer"})
    theirs = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap_servers, "client.id": "regex-theirs",
        "group.id": topic_name + "-peer", "group.protocol": "consumer"})
    try:
        for c in (ours, theirs):
            c.subscribe(subscription)
        deadline = time.monotonic() + 15
        while any(sorted(tp.topic for tp in c.assignment()) != want for c in (ours, theirs)):
            assert time.monotonic() < deadline, [c.assignment() for c in (ours, theirs)]
            for c in (ours, theirs):
                c.poll(0.05)
    finally:
        ours.close()
        theirs.close()
    beats = cluster.request_log(since, api="ConsumerGroupHeartbeat")
    first = {}
    for who in ("regex-ours", "regex-theirs"):
        joining = [e.details for e in beats if e.client_id == who
                   and e.details["member_epoch"] == 0]
        first[who] = (joining[0]["subscribed_topic_names"],
                      joining[0]["subscribed_topic_regex"])
    assert first["regex-ours"] == first["regex-theirs"] == (
        [f"{topic_name}-plain"], f"(^{topic_name}-a.*)|(^{topic_name}-b.*)")


def test_a_pattern_matches_whole_topic_names_on_the_coordinator(cluster, topic_name):
    """RE2/J's whole-name match, as librdkafka documents for this protocol: ``^t-a*``
    matches no ``t-a1`` (classic, resolved by the client, it would); a new topic the
    pattern does match is assigned without the client looking at every topic."""
    cluster.create_topic(f"{topic_name}-a1", partitions=1, replication_factor=1)
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": topic_name,
                  "group.protocol": "consumer", "topic.metadata.refresh.interval.ms": 60000})
    try:
        c.subscribe([f"^{topic_name}-a*", f"^{topic_name}-z.*"])
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            c.poll(0.05)
        assert c.assignment() == []
        cluster.create_topic(f"{topic_name}-z9", partitions=2, replication_factor=1)
        deadline = time.monotonic() + 10
        while len(c.assignment()) < 2:
            assert time.monotonic() < deadline, c.assignment()
            c.poll(0.05)
        assert sorted((tp.topic, tp.partition) for tp in c.assignment()) == [
            (f"{topic_name}-z9", 0), (f"{topic_name}-z9", 1)]
    finally:
        c.close()
