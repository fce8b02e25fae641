"""The share consumer (KIP-932) against the test cluster (``kafka_client.testing``), which
serves share groups as Apache Kafka 4.1 does (Tansu and noida-db have none).

The consumers run in a child process with a hard timeout (a hang fails the test); the
child prints what it read as JSON, and the cluster's own share-partition state
(``Cluster.share_state``) is the independent check of what the broker was told.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kafka_client import Producer

pytestmark = pytest.mark.integration

PARTITIONS = 3
#: a lock far longer than any test: a record seen again came back because the client
#: released it (or its member left), never because its lock expired
LOCK_MS = 120_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from kafka_client.testing import Cluster
    with Cluster(brokers=2, data_dir=str(tmp_path_factory.mktemp("kip932")),
                 broker_config={"group.share.heartbeat.interval.ms": 200,
                                "group.share.record.lock.duration.ms": LOCK_MS}) as c:
        yield c


@pytest.fixture
def topic(cluster, topic_name):
    cluster.create_topic(topic_name, partitions=PARTITIONS, replication_factor=1)
    # Kafka's default is "latest": these groups read what was produced before they joined
    cluster.set_group_config(topic_name, {"share.auto.offset.reset": "earliest"})
    return topic_name


def produce_here(cluster, topic, count):
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 2}) as p:
        for i in range(count):
            p.produce(topic, b"m%d" % i, partition=i % PARTITIONS)
        assert p.flush(30) == 0


CHILD_PRELUDE = """
import json, sys, time
from kafka_client import AcknowledgeType, ShareConsumer

BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]

def consumer(**conf):
    c = ShareConsumer({"bootstrap.servers": BOOTSTRAP, "group.id": TOPIC, **conf})
    c.subscribe([TOPIC])
    return c

def records(msgs):
    out = []
    for m in msgs:
        assert m.error() is None, m.error()
        out.append([m.partition(), m.offset(), m.value().decode(), m.delivery_count()])
    return out

def assigned(c):
    return bool(c._fetcher.assigned)

def settled(c):
    # Assigned, and no share session holds a partition the member no longer has (a
    # fetch of one sent before the assignment changed would still take its records).
    mine = set(c._fetcher.assigned)
    return bool(mine) and all(s.partitions <= mine for s in c._fetcher.sessions.values())

def produce(n):
    from kafka_client import Producer
    with Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 2}) as p:
        for i in range(n):
            p.produce(TOPIC, b"m%d" % i, partition=i % 3)
        assert p.flush(30) == 0
"""


def run(run_child, cluster, topic, body, timeout=90):
    code = (f"import sys; sys.argv[1:] = {[cluster.bootstrap_servers, topic]!r}\n"
            + CHILD_PRELUDE + body)
    out = run_child(code, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def states(cluster, group):
    """{(partition, offset): (state, delivery count)} of the group's in-flight records."""
    return {(p["partition"], r[0]): (r[1], r[2])
            for p in cluster.share_state(group) for r in p["records"]}


def test_two_members_split_the_records_each_read_once(cluster, topic, run_child):
    n = 60
    seen = run(run_child, cluster, topic, f"""
a, b = consumer(**{{"max.poll.records": 5}}), consumer(**{{"max.poll.records": 5}})
deadline = time.monotonic() + 30
while not (settled(a) and settled(b)) and time.monotonic() < deadline:
    a.poll(0.1); b.poll(0.1)
assert settled(a) and settled(b), "both members assigned in 30 s"
produce({n})
seen = {{"a": [], "b": []}}
deadline = time.monotonic() + 40
while len(seen["a"]) + len(seen["b"]) < {n} and time.monotonic() < deadline:
    seen["a"] += records(a.poll(0.2))
    seen["b"] += records(b.poll(0.2))
seen["late"] = records(a.poll(0.5)) + records(b.poll(0.5))
seen["log"] = [(c._member.member_id, sorted(c._fetcher.assigned),
                {{n: (s.epoch, sorted(s.partitions), s.in_flight)
                  for n, s in c._fetcher.sessions.items()}}) for c in (a, b)]
results = [a.commit_sync(10), b.commit_sync(10)]
a.close(); b.close()
seen["errors"] = [str(v) for r in results for v in r.values() if v is not None]
print(json.dumps(seen))
""")
    every = seen["a"] + seen["b"] + seen["late"]
    keys = [(p, o) for p, o, _v, _n in every]
    assert len(keys) == len(set(keys)), "a record read twice"
    assert sorted(v for _p, _o, v, _n in every) == sorted("m%d" % i for i in range(n)), \
        ([r for part in cluster.share_state(topic) for r in part["records"]
          if r[1] != "acknowledged"], seen.get("log"))
    assert seen["a"] and seen["b"], "one member read everything"
    assert all(count == 1 for *_x, count in every)
    assert seen["errors"] == []
    # the broker has every record acknowledged: nothing left in flight
    for part in cluster.share_state(topic):
        assert part["start_offset"] == n // PARTITIONS, part
        assert all(r[1] == "acknowledged" for r in part["records"]), part


def test_released_records_come_again_rejected_ones_never(cluster, topic, run_child):
    produce_here(cluster, topic, 9)
    out = run(run_child, cluster, topic, """
c = consumer(**{"share.acknowledgement.mode": "explicit"})
first = []
deadline = time.monotonic() + 30
while len(first) < 9 and time.monotonic() < deadline:
    msgs = c.poll(0.2)
    for m in msgs:
        # m0, m3, m6 (partition 0) released; the rest rejected
        kind = AcknowledgeType.RELEASE if m.partition() == 0 else AcknowledgeType.REJECT
        c.acknowledge(m, kind)
    first += records(msgs)
result = c.commit_sync(10)
again = []
deadline = time.monotonic() + 20
while len(again) < 3 and time.monotonic() < deadline:
    msgs = c.poll(0.2)
    for m in msgs:
        c.acknowledge(m, AcknowledgeType.ACCEPT)
    again += records(msgs)
extra = []
for _ in range(5):            # a second, a rejected record would have come by now
    msgs = c.poll(0.2)
    for m in msgs:
        c.acknowledge(m)
    extra += records(msgs)
c.commit_sync(10)
c.close()
print(json.dumps({"first": first, "again": again, "extra": extra,
                  "errors": [str(v) for v in result.values() if v is not None]}))
""")
    assert sorted(v for *_x, v, _n in out["first"]) == sorted("m%d" % i for i in range(9))
    assert out["errors"] == []
    assert sorted(map(tuple, out["again"])) == [(0, 0, "m0", 2), (0, 1, "m3", 2),
                                                 (0, 2, "m6", 2)]
    assert out["extra"] == []
    # every record done with (rejected ones archived, released ones accepted after)
    for part in cluster.share_state(topic):
        assert (part["start_offset"], part["records"]) == (3, []), part


def test_close_gives_unacknowledged_records_to_the_other_member(cluster, topic, run_child):
    produce_here(cluster, topic, 6)
    out = run(run_child, cluster, topic, """
a = consumer(**{"share.acknowledgement.mode": "explicit"})
held = []
deadline = time.monotonic() + 30
while not held and time.monotonic() < deadline:
    held = records(a.poll(0.2))        # explicit mode: no next poll before acknowledging
b = consumer()
before = []
deadline = time.monotonic() + 30
while not assigned(b) and time.monotonic() < deadline:
    before += records(b.poll(0.1))
before += records(b.poll(1.0))
closed_at = time.monotonic()
a.close()                               # nothing acknowledged: all released
got = []
deadline = time.monotonic() + 30
while len(before) + len(got) < 6 and time.monotonic() < deadline:
    got += records(b.poll(0.2))
took = time.monotonic() - closed_at
b.commit_sync(10)
b.close()
print(json.dumps({"held": held, "before": before, "got": got, "took": took}))
""")
    held = {(p, o) for p, o, _v, _n in out["held"]}
    assert held
    assert not held & {(p, o) for p, o, _v, _n in out["before"]}, "A's records went to B"
    every = out["before"] + out["got"]
    assert sorted(v for *_x, v, _n in every) == sorted("m%d" % i for i in range(6))
    assert {(p, o): n for p, o, _v, n in out["got"] if (p, o) in held} == \
        {k: 2 for k in held}
    # well before the locks (120 s) could have expired
    assert out["took"] < LOCK_MS / 1000 / 4
    for part in cluster.share_state(topic):
        assert (part["start_offset"], part["records"]) == (2, []), part


def test_a_broker_without_share_groups_gets_a_clear_error(broker, topic_name, run_child):
    """Tansu and noida-db serve no ShareGroupHeartbeat: the application is told at once,
    once, and the member stops (it does not retry for ever in silence)."""
    out = run_child(f"""
import json, time
from kafka_client import ShareConsumer
c = ShareConsumer({{"bootstrap.servers": {broker.bootstrap!r}, "group.id": "g"}})
c.subscribe([{topic_name!r}])
errors = []
start = time.monotonic()
while not errors and time.monotonic() - start < 20:
    errors = [m.error() for m in c.poll(0.2) if m.error() is not None]
took = time.monotonic() - start
later = [m.error() for m in c.poll(1.0)]
c.close()
print(json.dumps({{"codes": [e.code() for e in errors], "texts": [e.str() for e in errors],
                  "took": took, "later": len(later)}}))
""", timeout=90)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    from kafka_client import KafkaError
    assert got["codes"] == [KafkaError._UNSUPPORTED_FEATURE], got
    assert "ShareGroupHeartbeat" in got["texts"][0] and "share groups" in got["texts"][0]
    assert got["took"] < 10
    assert got["later"] == 0


def test_a_member_of_confluent_kafka_shares_the_group(cluster, topic, run_child):
    """librdkafka's share consumer and ours in one share group: between them every record
    once, each accepted (the independent check of our members' requests)."""
    n = 60
    seen = run(run_child, cluster, topic, f"""
import confluent_kafka
theirs = confluent_kafka.ShareConsumer({{"bootstrap.servers": BOOTSTRAP, "group.id": TOPIC,
                                         "max.poll.records": 5}})
theirs.subscribe([TOPIC])
ours = consumer(**{{"max.poll.records": 5}})
deadline = time.monotonic() + 30
while not assigned(ours) and time.monotonic() < deadline:
    ours.poll(0.1); theirs.poll(0.1)
for _ in range(10):   # librdkafka's member joins meanwhile (its assignment is not shown)
    ours.poll(0.1); theirs.poll(0.1)
produce({n})
seen = {{"ours": [], "theirs": []}}
deadline = time.monotonic() + 40
while len(seen["ours"]) + len(seen["theirs"]) < {n} and time.monotonic() < deadline:
    seen["ours"] += records(ours.poll(0.2))
    seen["theirs"] += records(theirs.poll(0.2))
seen["ours"] += records(ours.poll(0.5))
seen["theirs"] += records(theirs.poll(0.5))
ours.commit_sync(10); theirs.commit_sync(10)
ours.close(); theirs.close()
print(json.dumps(seen))
""")
    every = seen["ours"] + seen["theirs"]
    keys = [(p, o) for p, o, _v, _n in every]
    assert len(keys) == len(set(keys)), "a record read twice"
    assert sorted(v for _p, _o, v, _n in every) == sorted("m%d" % i for i in range(n)), \
        (seen, cluster.share_state(topic))
    assert seen["ours"] and seen["theirs"], {k: len(v) for k, v in seen.items()}
    for part in cluster.share_state(topic):
        assert (part["start_offset"], part["records"]) == (n // PARTITIONS, []), part


def test_an_acknowledgement_after_the_lock_expired_is_refused(cluster, topic, run_child):
    """The lock is the broker's: a record held past it goes to another member, and the
    late acknowledgement comes back from commit_sync() as INVALID_RECORD_STATE for its
    partition."""
    # One partition: both members are assigned it (with three, the held records could
    # be on partitions only the first member has).
    topic = f"{topic}-one"
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    cluster.set_group_config(topic, {"share.auto.offset.reset": "earliest",
                                     "share.record.lock.duration.ms": 1500})
    with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as p:
        for i in range(3):
            p.produce(topic, b"m%d" % i)
        assert p.flush(30) == 0
    out = run(run_child, cluster, topic, """
# One record per fetch: A's next fetch acquires the next record and keeps it queued
# (poll() is not called again), so A fetches no more and cannot take its expired
# record back itself: B gets it.
a = consumer(**{"share.acknowledgement.mode": "explicit", "max.poll.records": 1})
held = []
deadline = time.monotonic() + 30
while not held and time.monotonic() < deadline:
    held = a.poll(0.2)
b = consumer()
taken = []
mine = {(m.partition(), m.offset()) for m in held}
deadline = time.monotonic() + 30
while not mine <= {(p, o) for p, o, _v, _n in taken} and time.monotonic() < deadline:
    taken += records(b.poll(0.2))      # the held one, once its lock expired
for m in held:
    a.acknowledge(m)
result = a.commit_sync(10)
a.close(); b.close()
print(json.dumps({"held": records(held), "taken": taken,
                  "result": {f"{tp.topic}:{tp.partition}": None if e is None else
                             e.args[0].code() for tp, e in result.items()}}))
""")
    held = {(p, o) for p, o, _v, _n in out["held"]}
    assert held and held <= {(p, o) for p, o, _v, _n in out["taken"]}
    from kafka_client import KafkaError
    assert set(out["result"].values()) == {KafkaError.INVALID_RECORD_STATE}, out
    assert set(out["result"]) == {f"{topic}:{p}" for p, _o in held}


TWO_ROUNDS = """
c = consumer()
seen = []
def read_until(n, seconds):
    deadline = time.monotonic() + seconds
    while len({(p, o) for p, o, _v, _n in seen}) < n and time.monotonic() < deadline:
        seen.extend(records(c.poll(0.2)))
produce(30)
read_until(30, 40)
c.commit_sync(10)
print(json.dumps(["first round", len(seen)]), flush=True)
sys.stdin.readline()
produce(60)
read_until(90, 60)
# what comes again (a record whose acknowledgement was refused as its share session
# ended went back to the group) comes at once: read until a poll brings nothing
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    late = records(c.poll(1.0))
    seen.extend(late)
    if not late:
        break
result = c.commit_sync(10)
c.close()
print(json.dumps(["done", seen, [str(e) for e in result.values() if e is not None]]))
"""


def two_rounds(cluster, topic, between):
    """A member reads 30 records, then ``between()`` runs (in this process), then it
    reads 60 more: returns what it read (``[partition, offset, value, delivery count]``)
    and the errors of its last commit_sync()."""
    first, (_tag, seen, errors) = paused_child(cluster, topic, TWO_ROUNDS, between)
    assert first == ["first round", 30]
    return seen, errors


def paused_child(cluster, topic, body, between):
    """``body`` in a child that prints a JSON line, waits for a line on its stdin, then
    prints its last JSON line; ``between()`` runs in this process in the pause, once the
    first line came. Returns both lines. The child has a hard timeout on each wait; it is
    killed if it hangs."""
    import queue
    import threading

    code = (f"import sys; sys.argv[1:] = {[cluster.bootstrap_servers, topic]!r}\n"
            + CHILD_PRELUDE + body)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        first = json.loads(lines.get(timeout=60))
        between()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        last = json.loads(lines.get(timeout=90))
    except queue.Empty:
        proc.kill()
        pytest.fail(f"child hung; stderr:\n{proc.stderr.read()}")
    finally:
        if proc.poll() is None:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, proc.stderr.read()
    return first, last


def test_leader_and_coordinator_moves_and_cut_connections(cluster, topic_name):
    """Between two rounds of records every partition's leader moves, the group's
    coordinator moves and every connection is cut: the member finds the new leaders and
    coordinator, opens new share sessions, and reads the second round too, each record
    once, all acknowledged."""
    topic = topic_name
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=2)
    cluster.wait_in_sync(topic)
    cluster.set_group_config(topic, {"share.auto.offset.reset": "earliest"})

    def move_everything():
        for p in range(PARTITIONS):
            cluster.move_leader(topic, p)
        old = cluster.coordinator(group=topic)
        cluster.move_coordinator(next(b for b in cluster.broker_ids if b != old),
                                 group=topic)
        cluster.cut_connections()

    seen, errors = two_rounds(cluster, topic, move_everything)
    keys = [(p, o) for p, o, _v, _n in seen]
    assert len(keys) == len(set(keys)) == 90, sorted(keys)
    assert errors == []
    for part in cluster.share_state(topic):
        assert (part["start_offset"], part["records"]) == (30, []), part


LEAVE_AFTER_A_COORDINATOR_MOVE = """
c = consumer()
deadline = time.monotonic() + 30
while not assigned(c) and time.monotonic() < deadline:
    c.poll(0.2)
print(json.dumps(["joined", assigned(c)]), flush=True)
sys.stdin.readline()
c.close()
print(json.dumps(["closed"]))
"""


def test_a_leave_the_old_coordinator_refuses_goes_to_the_new_one(cluster, topic):
    """The group's coordinator moves while a member is between two heartbeats, and the
    member closes: the old coordinator answers its leave NOT_COORDINATOR, and the leave
    goes to the new one. Taken as done, it left the member in the group, holding its
    partitions (no other member fetched them) until its session expired (tools/soak.py
    share, seeds 403 and 412: a partition left unread for 36-38 s)."""
    from kafka_client.admin import AdminClient

    # heartbeats 15 s apart: the leave is the first request after the move; a session
    # of 60 s, far longer than this test
    cluster.set_group_config(topic, {"share.heartbeat.interval.ms": 15_000,
                                     "share.session.timeout.ms": 60_000})
    since = cluster.clear_request_log()
    moved = []

    def move():
        old = cluster.coordinator(group=topic)
        moved.append((old, next(b for b in cluster.broker_ids if b != old)))
        cluster.move_coordinator(moved[0][1], group=topic)

    first, last = paused_child(cluster, topic, LEAVE_AFTER_A_COORDINATOR_MOVE, move)
    assert (first, last) == (["joined", True], ["closed"])
    old, new = moved[0]
    leaves = [(e.broker, e.errors)
              for e in cluster.request_log(since, api="ShareGroupHeartbeat")
              if e.details.get("member_epoch") == -1]
    # (a heartbeat before the close, on a machine loaded for 15 s, finds the new one first)
    assert leaves[-1] == (new, []) and \
        all(leave == (old, ["NOT_COORDINATOR"]) for leave in leaves[:-1]), leaves
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    assert admin.describe_share_groups([topic])[topic].result(30).members == []


def test_a_member_closed_while_its_join_is_answered_leaves(cluster, topic, run_child):
    """A member closed while the answer to its join is on its way (the coordinator's
    answers 2 s late) still leaves: the coordinator has it, with its share of the
    partitions, from the join on. Without a leave it stayed in the group, its partitions
    read by nobody, until its session expired (45 s by default)."""
    from kafka_client.admin import AdminClient

    cluster.set_latency(2.0, apis=["ShareGroupHeartbeat"])
    try:
        out = run(run_child, cluster, topic, """
c = consumer()
c.poll(1.0)                 # the join goes out; its answer comes after the close
joined = assigned(c)
c.close()                   # waits up to 3 s for the leave
print(json.dumps({"joined": joined}))
""")
    finally:
        cluster.set_latency(0, apis=["ShareGroupHeartbeat"])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    # (joined: whether the answer came before the close after all, on a loaded machine)
    assert admin.describe_share_groups([topic])[topic].result(30).members == [], out


def test_the_callback_reports_only_the_applications_acknowledgements(cluster, topic,
                                                                    run_child):
    """close() releases what the consumer fetched and never handed out; the
    acknowledgement commit callback reports the application's acknowledgements only.
    Reported too, a released record's offset read as the answer to the application's
    acknowledgement of an earlier delivery of it: tools/soak.py share (seed 11 on a loaded
    machine) took an ACCEPT never sent (its leader had moved) as applied, as the callback
    said so, and the record came again."""
    produce_here(cluster, topic, 30)
    out = run(run_child, cluster, topic, """
c = consumer(**{"share.acknowledgement.mode": "explicit", "max.poll.records": 5})
reported = []
c.set_acknowledgement_commit_callback(lambda offsets, exc: reported.extend(
    [tp.partition, o, exc is None] for tp, offs in offsets.items() for o in offs))
msgs = []
deadline = time.monotonic() + 30
while not msgs and time.monotonic() < deadline:
    msgs = list(c.poll(0.5))
for m in msgs:
    c.acknowledge(m)                    # ACCEPT
# the next records are fetched meanwhile, and held, never handed out
deadline = time.monotonic() + 30
while not c._fetcher.chunks and time.monotonic() < deadline:
    time.sleep(0.05)
held = sorted([ch.part.key[1], o] for ch in c._fetcher.chunks
              for first, last, _n in ch.acquired for o in range(first, last + 1))
c.close()                               # the 5 accepted, the held ones released
print(json.dumps({"handed": sorted([m.partition(), m.offset()] for m in msgs),
                  "held": held, "reported": sorted(reported)}))
""")
    assert out["handed"] and out["held"], out
    assert out["reported"] == [[p, o, True] for p, o in out["handed"]], out
    # the released ones went back to the group: available, each delivered once so far
    released = {(p, o) for p, o in map(tuple, out["held"])}
    in_flight = states(cluster, topic)
    assert all(in_flight[place] == ("available", 1) for place in released), in_flight


def test_lost_share_sessions_lose_no_record(cluster, topic):
    """The brokers forget the member's share sessions (the next ShareFetches answered
    SHARE_SESSION_NOT_FOUND): the member opens new ones and resends what the refused
    requests acknowledged; every record is read and in the end acknowledged.

    A ShareFetch already waiting when the error is injected may have acquired records
    before its answer is replaced (the test cluster's injection, not Kafka's refusal):
    those come back when their lock expires, so the group's lock is short here and a
    record may come twice (with a higher delivery count)."""
    cluster.set_group_config(topic, {"share.record.lock.duration.ms": 3000})

    def lose_sessions():
        cluster.inject_errors("ShareFetch", ["SHARE_SESSION_NOT_FOUND"] * 2)

    seen, _errors = two_rounds(cluster, topic, lose_sessions)
    assert cluster.pending_errors() == []           # both answers went out
    keys = {(p, o) for p, o, _v, _n in seen}
    assert keys == {(p, o) for p in range(PARTITIONS) for o in range(30)}
    again = [(p, o, n) for p, o, _v, n in seen if keys and n > 1]
    assert len(seen) - len(keys) == len(again)      # each record seen again came again
    for part in cluster.share_state(topic):
        assert (part["start_offset"], part["records"]) == (30, []), part


DROPPED_PRELUDE = """
import gc, logging
warnings = []
class Keep(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
log = logging.getLogger("dropped-share-consumer")
log.addHandler(Keep())
log.setLevel(logging.WARNING)
from kafka_client import Producer
with Producer({"bootstrap.servers": BOOTSTRAP}) as p:
    for i in range(6):
        p.produce(TOPIC, b"m%d" % i, partition=0)
    assert p.flush(30) == 0
"""


def test_a_dropped_consumer_sends_its_acknowledgements_and_releases_the_rest(
        cluster, topic, run_child):
    # Dropped without close() (an exception on its way out, say): the acknowledgements
    # the application gave are sent (they were lost: a rejected record came back), the
    # other records it held released at once (librdkafka holds them until their locks
    # expire), with one warning.
    out = run(run_child, cluster, topic, DROPPED_PRELUDE + """
a = consumer(**{"share.acknowledgement.mode": "explicit", "logger": log})
held = []
deadline = time.monotonic() + 30
while len(held) < 6 and time.monotonic() < deadline:
    batch = a.poll(0.5)
    held += records(batch)
    for m in batch:
        if m.offset() == 0:
            a.acknowledge(m, AcknowledgeType.REJECT)
        elif m.offset() < 3:
            a.acknowledge(m, AcknowledgeType.ACCEPT)
        else:
            break
    if any(m.offset() >= 3 for m in batch):
        break
dropped_at = time.monotonic()
del a, batch, m
gc.collect()
took = time.monotonic() - dropped_at
b = consumer()
got = []
deadline = time.monotonic() + 30
while len(got) < 3 and time.monotonic() < deadline:
    got += records(b.poll(0.2))
b.close()
import threading
deadline = time.monotonic() + 10       # the dropped consumer's thread is gone too
while threading.active_count() > 1 and time.monotonic() < deadline:
    time.sleep(0.01)
print(json.dumps({"held": held, "got": got, "took": took, "warnings": warnings,
                  "threads": threading.active_count()}))
""")
    assert sorted(o for p, o, _v, _n in out["held"]) == list(range(6))
    assert sorted((o, n) for p, o, _v, n in out["got"]) == [(3, 2), (4, 2), (5, 2)]
    assert out["took"] < 10 and out["threads"] == 1, out
    assert len(out["warnings"]) == 1, out["warnings"]
    assert "3 acquired records released" in out["warnings"][0], out["warnings"]
    assert "close()" in out["warnings"][0]


def test_exit_without_close_releases_what_the_consumer_held(cluster, topic, run_child):
    # Implicit mode, the interpreter exits after a poll() with no close(): the records
    # come back (redelivered, not accepted unprocessed), and stderr says so.
    code = (f"import sys; sys.argv[1:] = {[cluster.bootstrap_servers, topic]!r}\n"
            + CHILD_PRELUDE + DROPPED_PRELUDE.replace("log.addHandler(Keep())", "") + """
a = consumer()
held = []
deadline = time.monotonic() + 30
while len(held) < 6 and time.monotonic() < deadline:
    held += records(a.poll(0.5))
print(len(held), flush=True)
""")
    out = run_child(code, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "6"
    assert "ShareConsumer dropped without close(): 6 acquired records released" \
        in out.stderr, out.stderr
    for part in cluster.share_state(topic):
        assert all(state == "available" and count == 1
                   for _o, state, count, _m in part["records"]), part


def test_threads_polling_one_consumer_and_close_from_another(cluster, topic, run_child):
    # Four threads poll one consumer (one call at a time: the others get
    # ConcurrentModificationException), this thread closes it while they still poll:
    # every record handed out once, all accepted, the threads' calls refused after.
    n = 300
    produce_here(cluster, topic, n)
    out = run(run_child, cluster, topic, """
import threading
from kafka_client import ConcurrentModificationException, IllegalStateException
c = consumer(**{"max.poll.records": 20})
got, refused, ended = [], [0], []
def worker():
    while True:
        try:
            got.extend(records(c.poll(0.2)))
        except ConcurrentModificationException:
            refused[0] += 1
            time.sleep(0.001)
        except IllegalStateException as exc:        # closed
            ended.append(str(exc))
            return
threads = [threading.Thread(target=worker) for _ in range(4)]
for t in threads:
    t.start()
deadline = time.monotonic() + 60
while len(got) < 300 and time.monotonic() < deadline:
    time.sleep(0.05)
closed_at = time.monotonic()
c.close()
took = time.monotonic() - closed_at
for t in threads:
    t.join(10)
print(json.dumps({"got": got, "refused": refused[0], "ended": ended, "took": took,
                  "alive": sum(t.is_alive() for t in threads)}))
""")
    keys = [(p, o) for p, o, _v, _n in out["got"]]
    assert len(keys) == len(set(keys)) == n
    assert sorted(v for *_x, v, _n in out["got"]) == sorted("m%d" % i for i in range(n))
    assert out["alive"] == 0 and len(out["ended"]) == 4, out
    assert out["took"] < 10
    for part in cluster.share_state(topic):
        assert (part["start_offset"], part["records"]) == (n // PARTITIONS, []), part


def seconds_taken_while_answers_stall(cluster, topic, step):
    """Run ``step`` (code) in a child holding records, once the brokers hold back their
    answers to ShareAcknowledge and ShareGroupHeartbeat (60 s): how long it took."""
    code = (f"import sys; sys.argv[1:] = {[cluster.bootstrap_servers, topic]!r}\n"
            + CHILD_PRELUDE + DROPPED_PRELUDE + """
a = consumer(**{"logger": log})
held = []
deadline = time.monotonic() + 30
while not held and time.monotonic() < deadline:
    held += records(a.poll(0.5))
print("held", len(held), flush=True)
sys.stdin.readline()                       # the test has set the latency
started = time.monotonic()
""" + step + """
print("took", time.monotonic() - started, flush=True)
""")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = child.stdout.readline().split()      # the child's own timeouts bound it
        assert first[:1] == ["held"] and int(first[1]) > 0, first
        cluster.set_latency(60, apis=["ShareAcknowledge", "ShareGroupHeartbeat"])
        rest, err = child.communicate("go\n", timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("the child still ran after 90 s")
    finally:
        cluster.clear_faults()
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    return float(rest.split()[-1])


def test_a_dropped_consumer_whose_brokers_stall_is_gone_within_five_seconds(cluster, topic):
    # The brokers answer neither the closing ShareAcknowledge nor the leave heartbeat:
    # the collection waits 5 s for both together, not 5 s for each.
    took = seconds_taken_while_answers_stall(cluster, topic, "del a\ngc.collect()")
    assert took < 9, took               # 5 s and the I/O thread's stop; it was 10


def test_close_with_stalled_brokers_returns_within_eight_seconds(cluster, topic):
    # As the Consumer's close(): 5 s for the answers to the last acknowledgements and
    # the sessions' closing, 3 s for the leave (it waited 30 s for each: 60 s).
    took = seconds_taken_while_answers_stall(cluster, topic, "a.close()")
    assert took < 20, took              # 8 s and the I/O thread's stop, on a loaded machine


def test_a_with_block_left_by_an_exception_releases_the_last_poll(cluster, topic,
                                                                   run_child):
    # Implicit mode: the batch whose processing raised is not accepted by the close()
    # of the with block (confluent-kafka accepts it: lost): it comes again.
    out = run(run_child, cluster, topic, DROPPED_PRELUDE + """
held = []
try:
    with consumer() as a:
        deadline = time.monotonic() + 30
        while not held and time.monotonic() < deadline:
            held = records(a.poll(0.5))
        raise RuntimeError("processing failed")
except RuntimeError:
    pass
b = consumer()
got = []
deadline = time.monotonic() + 30
while len(got) < 6 and time.monotonic() < deadline:
    got += records(b.poll(0.2))
b.close()
print(json.dumps({"held": held, "got": got}))
""")
    held = {(p, o) for p, o, _v, _n in out["held"]}
    assert held
    assert sorted(o for p, o, _v, _n in out["got"]) == list(range(6))
    assert {(p, o): n for p, o, _v, n in out["got"] if (p, o) in held} == \
        {k: 2 for k in held}


def test_a_forked_child_sends_nothing_for_the_parents_share_consumer(cluster, topic,
                                                                      run_child):
    # The child drops the consumer it inherited, holding records, and exits: nothing goes
    # on the parent's connections (no release, no session closed, no leave), so the
    # parent's acknowledgements and its next fetches still work.
    out = run(run_child, cluster, topic, DROPPED_PRELUDE + """
import os
a = consumer(**{"share.acknowledgement.mode": "explicit"})
held = []
deadline = time.monotonic() + 30
while not held and time.monotonic() < deadline:
    batch = a.poll(0.5)
    held = records(batch)
pid = os.fork()
if pid == 0:
    del a
    gc.collect()
    sys.exit(0)                              # a normal exit: atexit runs
started = time.monotonic()
_, status = os.waitpid(pid, 0)
child_took = time.monotonic() - started
for m in batch:
    a.acknowledge(m)
results = a.commit_sync(10)
rest = []
deadline = time.monotonic() + 30
while len(held) + len(rest) < 6 and time.monotonic() < deadline:
    more = a.poll(0.5)
    rest += records(more)
    for m in more:
        a.acknowledge(m)
a.commit_sync(10)
a.close()
print(json.dumps({"held": held, "rest": rest, "status": os.waitstatus_to_exitcode(status),
                  "child_took": child_took,
                  "results": {str(tp.partition): exc is None for tp, exc in results.items()},
                  "warnings": warnings}))
""")
    assert out["status"] == 0 and out["child_took"] < 5, out
    assert out["results"] and all(out["results"].values()), out
    every = out["held"] + out["rest"]
    assert sorted(o for _p, o, _v, _n in every) == list(range(6))
    assert all(n == 1 for *_x, n in every), every            # nothing released by the child
    for part in cluster.share_state(topic):
        assert part["records"] == [] and part["start_offset"] in (None, 0, 6), part


def test_a_pool_of_workers_acknowledges_what_one_thread_polls(cluster, topic, run_child):
    # Explicit mode: one thread polls and commits, four workers acknowledge (every
    # record accepted but those of offset 0, rejected), while the poller is inside its
    # calls: each record read once, every acknowledgement reaches the broker.
    n = 300
    produce_here(cluster, topic, n)
    out = run(run_child, cluster, topic, """
import queue, threading
c = consumer(**{"share.acknowledgement.mode": "explicit", "max.poll.records": 25})
work, got, failures = queue.Queue(), [], []
def worker():
    while True:
        m = work.get()
        if m is None:
            return
        try:
            c.acknowledge(m, AcknowledgeType.REJECT if m.offset() == 0 else
                          AcknowledgeType.ACCEPT)
        except Exception as exc:
            failures.append(repr(exc))
        finally:
            work.task_done()
workers = [threading.Thread(target=worker, daemon=True) for _ in range(4)]
for t in workers:
    t.start()
deadline = time.monotonic() + 60
while len(got) < 300 and time.monotonic() < deadline:
    batch = c.poll(0.2)
    got += records(batch)
    for m in batch:
        work.put(m)
    while work.unfinished_tasks and time.monotonic() < deadline:
        c.commit_async()                 # inside a call while the workers acknowledge
    work.join()
for t in workers:
    work.put(None)
for t in workers:
    t.join(10)
results = c.commit_sync(10)
c.close()
print(json.dumps({"got": got, "failures": failures,
                  "errors": [str(e) for e in results.values() if e is not None]}))
""")
    keys = [(p, o) for p, o, _v, _n in out["got"]]
    assert len(keys) == len(set(keys)) == n
    assert out["failures"] == [] and out["errors"] == [], out
    for part in cluster.share_state(topic):
        assert (part["start_offset"], part["records"]) == (n // PARTITIONS, []), part
