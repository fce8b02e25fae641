"""The share consumer (KIP-932) under the test cluster's faults: connections cut, leaders
and the group coordinator moved, a broker down and back, injected error answers to
ShareFetch, ShareAcknowledge and ShareGroupHeartbeat.

Share groups are at-least-once: a record may come again (its delivery count one higher),
but none is lost, every one ends up acknowledged, the acknowledgements the application
gave reach the brokers, and nothing hangs. The members run in a child process with a
hard timeout; the test process applies the faults while they read, then checks the
other side: the cluster's share-partition state (every record acknowledged, the start
offset past the last one) and its request log (the acknowledgements sent).

The group's record lock is far longer than any test: a record seen again came back
because the client released it or the broker did (a closed share session, a member that
left), never because its lock expired; a record the client forgot would still be
acquired at the end, and the state check would say so.
"""
from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Tuple

import pytest

from kafka_client import Producer

pytestmark = pytest.mark.integration

PARTITIONS = 6
LOCK_MS = 600_000
#: records produced while the faults come
TOTAL = 120


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from kafka_client.testing import Cluster
    with Cluster(brokers=3, data_dir=str(tmp_path_factory.mktemp("share-faults")),
                 broker_config={"group.share.heartbeat.interval.ms": 200,
                                "group.share.record.lock.duration.ms": LOCK_MS}) as c:
        yield c


@pytest.fixture
def topic(cluster, topic_name):
    cluster.create_topic(topic_name, partitions=PARTITIONS, replication_factor=3)
    cluster.wait_in_sync(topic_name, timeout=30)
    cluster.set_group_config(topic_name, {"share.auto.offset.reset": "earliest"})
    return topic_name


def produce(cluster, topic, count):
    """``count`` records over about 3 s (the faults come while the members read)."""
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 2,
                   "acks": "all", "enable.idempotence": True}) as p:
        for i in range(count):
            p.produce(topic, b"m%d" % i, partition=i % PARTITIONS)
            p.poll(0.025)
        assert p.flush(60) == 0


#: The members: they read until the test process says the brokers have every record
#: acknowledged (or it gave up waiting), acknowledging as they go (explicit mode: ACCEPT
#: each record; implicit: the next poll does), with a commit_sync() now and then and at
#: the end, then close().
CHILD = """
import json, logging, os, sys, threading, time
from kafka_client import AcknowledgeType, ShareConsumer
if os.environ.get("SHARE_DEBUG"):
    logging.basicConfig(filename=os.environ["SHARE_DEBUG"] + "." + sys.argv[2],
                        level=logging.DEBUG,
                        format="%(relativeCreated)d %(threadName)s %(name)s %(message)s")

BOOTSTRAP, TOPIC, MEMBERS, MODE, TOTAL = sys.argv[1:6]
MEMBERS, TOTAL = int(MEMBERS), int(TOTAL)
over = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), over.set()), daemon=True).start()

outcomes = []       # [member, {partition: offsets}, error or None] from the callback
members = []
for i in range(MEMBERS):
    c = ShareConsumer({"bootstrap.servers": BOOTSTRAP, "group.id": TOPIC,
                       "share.acknowledgement.mode": MODE, "max.poll.records": 7})
    c.set_acknowledgement_commit_callback(
        lambda offsets, exc, i=i: outcomes.append(
            [i, {str(tp.partition): sorted(o) for tp, o in offsets.items()},
             None if exc is None else exc.args[0].name()]))
    c.subscribe([TOPIC])
    members.append(c)

deadline = time.monotonic() + 60
while not all(c._fetcher.assigned for c in members) and time.monotonic() < deadline:
    for c in members:
        c.poll(0.1)
assert all(c._fetcher.assigned for c in members), "members assigned in 60 s"
print(json.dumps(["ready"]), flush=True)

seen = []           # [member, partition, offset, value, delivery count]
events = []         # error events poll() returned: [member, name]
commits = []        # the errors of each commit_sync(): [member, partition, name]
values = set()
polls = 0
deadline = time.monotonic() + 240
while not over.is_set() and time.monotonic() < deadline:
    for i, c in enumerate(members):
        for m in c.poll(0.1):
            if m.error() is not None:
                events.append([i, m.error().name()])
                continue
            seen.append([i, m.partition(), m.offset(), m.value().decode(),
                         m.delivery_count()])
            values.add(m.value().decode())
            if MODE == "explicit":
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        polls += 1
        if polls % 5 == 0:
            for tp, exc in c.commit_sync(30).items():
                if exc is not None:
                    commits.append([i, tp.partition, exc.args[0].name()])
final = []
for i, c in enumerate(members):
    result = c.commit_sync(30)
    final.append({str(tp.partition): None if e is None else e.args[0].name()
                  for tp, e in result.items()})
closed = []
for c in members:
    started = time.monotonic()
    c.close()
    closed.append(time.monotonic() - started)
ids = [c._member.member_id for c in members]
print(json.dumps(["done", {"seen": seen, "events": events, "commits": commits,
                           "final": final, "outcomes": outcomes, "closed": closed,
                           "member_ids": ids}]), flush=True)
"""


def run_members(cluster, topic, members: int, mode: str,
                faults: Callable[[], None], answer_all: bool = True) -> Dict:
    """Start the members, produce TOTAL records while ``faults()`` runs (in this process),
    then let the members finish; what they report. The child is killed if
    it hangs (and the test fails)."""
    total = TOTAL
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, cluster.bootstrap_servers, topic, str(members), mode,
         str(total)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout],
                     daemon=True).start()
    producing = threading.Thread(target=produce, args=(cluster, topic, total), daemon=True)
    try:
        assert json.loads(lines.get(timeout=90)) == ["ready"]
        producing.start()
        faults()
        producing.join(120)
        assert not producing.is_alive(), "produced in 120 s"
        if answer_all:   # the errors injected last are answered while the members read on
            cluster.wait_for(lambda: not cluster.pending_errors(), 60, "errors answered")
        cluster.clear_faults()
        try:
            cluster.wait_for(lambda: all_acknowledged(cluster, topic), 150,
                             "every record acknowledged")
        except TimeoutError:
            pass                       # check() says what is left
        proc.stdin.write("over\n")
        proc.stdin.flush()
        tag, out = json.loads(lines.get(timeout=300))
        assert tag == "done"
    except queue.Empty:
        proc.kill()
        pytest.fail(f"the members hung; stderr:\n{proc.stderr.read()[-20000:]}")
    finally:
        if proc.poll() is None:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, proc.stderr.read()[-20000:]
    return out


def all_acknowledged(cluster, topic) -> bool:
    per = TOTAL // PARTITIONS
    state = cluster.share_state(topic)
    return len(state) == PARTITIONS and all(
        (p["start_offset"], p["end_offset"], p["records"]) == (per, per, []) for p in state)


def acknowledged_in_log(cluster, since: int, topic: str) -> Dict[Tuple[int, int], List[int]]:
    """(partition, offset) -> the acknowledgement types the brokers were sent for it, in
    order, by ShareFetch and ShareAcknowledge (the request log's ``acknowledged``)."""
    out: Dict[Tuple[int, int], List[int]] = {}
    for api in ("ShareFetch", "ShareAcknowledge"):
        for entry in cluster.request_log(since, api=api):
            for name, p, first, last, types in entry.details.get("acknowledged", ()):
                if name != topic:
                    continue
                for o in range(first, last + 1):
                    out.setdefault((p, o), []).append(
                        types[0] if len(types) == 1 else types[o - first])
    return out


def check(cluster, topic, out, since, errors=frozenset()) -> None:
    """At least once, all acknowledged, acknowledgements sent and answered once,
    delivery counts right; ``errors``: the acknowledgement errors the faults may cause
    (INVALID_RECORD_STATE: the record was given back meanwhile, and must come again)."""
    seen = out["seen"]
    total = TOTAL
    values = {v for _m, _p, _o, v, _n in seen}
    assert values == {"m%d" % i for i in range(total)}, \
        sorted({"m%d" % i for i in range(total)} - values)
    # the broker: every record acknowledged, none acquired or available
    per = total // PARTITIONS
    for part in cluster.share_state(topic):
        assert (part["start_offset"], part["end_offset"], part["records"]) == \
            (per, per, []), (part, [s for s in seen if s[1] == part["partition"]])
    # each delivery of a record has a delivery count of its own, higher than the ones
    # before it. A member hands out its deliveries in that order; two members, polled in
    # turns by one thread, may hand theirs out in either order: after a leader move the
    # new leader gives the record (its count one higher) to one member while the other
    # still holds its copy of the delivery the move ended, not handed out yet
    deliveries: Dict[Tuple[int, int], List[int]] = {}
    by_member: Dict[Tuple[int, int, int], List[int]] = {}
    for m, p, o, _v, n in seen:
        deliveries.setdefault((p, o), []).append(n)
        by_member.setdefault((m, p, o), []).append(n)
    for key, counts in deliveries.items():
        assert min(counts) >= 1 and len(set(counts)) == len(counts), (key, counts)
    for key, counts in by_member.items():
        assert counts == sorted(counts), (key, counts)
    # every record's last delivery was acknowledged ACCEPT to a broker (the request log)
    acked = acknowledged_in_log(cluster, since, topic)
    from kafka_proto.enums import AcknowledgeType
    missing = [k for k in deliveries if AcknowledgeType.ACCEPT not in acked.get(k, ())]
    assert missing == [], missing
    # each acknowledgement answered once (a member's outcomes of a record at most as many
    # as its deliveries to that member); refused ones for a reason, their records again
    given: Dict[Tuple[int, int, int], int] = {}
    for m, p, o, _v, _n in seen:
        given[(m, p, o)] = given.get((m, p, o), 0) + 1
    answered: Dict[Tuple[int, int, int], int] = {}
    for m, offsets, error in out["outcomes"]:
        for p, os_ in offsets.items():
            for o in os_:
                answered[(m, int(p), o)] = answered.get((m, int(p), o), 0) + 1
                if error is not None:
                    assert error in errors, (m, p, o, error)
                if error in ("INVALID_RECORD_STATE", "SHARE_SESSION_NOT_FOUND",
                             "NOT_LEADER_FOR_PARTITION"):
                    # not applied, the record not this member's any more: it came again
                    assert len(deliveries[(int(p), o)]) > 1, (m, p, o, error)
    assert {k: n for k, n in answered.items() if n > given.get(k, 0)} == {}
    # the last commit_sync() found nothing refused but for a reason the fault explains
    # (its refused acknowledgements, in the outcomes above, came again): it may answer
    # for a delivery a fault ended after the record's next delivery was acknowledged, as
    # when a leader moves (the old leader answers NOT_LEADER_OR_FOLLOWER; the new one has
    # the record available again, and Kafka's Java share consumer reports that error
    # too, not retrying since the acquisition locks were released); close() did not
    # wait for its limit
    for result in out["final"]:
        assert all(v is None or v in errors for v in result.values()), out["final"]
    assert all(t < 20 for t in out["closed"]), out["closed"]


def cut_three_times(cluster, topic):
    for _ in range(3):
        time.sleep(0.7)
        assert cluster.cut_connections() > 0


@pytest.mark.parametrize("members", [1, 2])
@pytest.mark.parametrize("mode", ["implicit", "explicit"])
def test_connections_cut_several_times(cluster, topic, members, mode):
    since = cluster.clear_request_log()
    out = run_members(cluster, topic, members, mode, lambda: cut_three_times(cluster, topic))
    # a connection's close ends the share sessions it opened, giving back their records:
    # acknowledging one then is INVALID_RECORD_STATE; one lost with its connection, unknown
    check(cluster, topic, out, since,
          {"INVALID_RECORD_STATE", "SHARE_SESSION_NOT_FOUND", "_TRANSPORT"})


def move_leaders(cluster, topic):
    """Every partition's leader moves, twice (the records acquired under the old leader
    are available again at the new one: their acknowledgements fail and they come
    again)."""
    for _ in range(2):
        time.sleep(0.7)
        for p in range(PARTITIONS):
            cluster.move_leader(topic, p)


def broker_down_and_up(cluster, topic):
    time.sleep(0.7)
    victim = cluster.leader(topic, 0)
    cluster.stop_broker(victim)
    time.sleep(1.5)
    cluster.start_broker(victim)
    cluster.wait_in_sync(topic, timeout=60)


def move_coordinator(cluster, topic):
    for _ in range(2):
        time.sleep(0.7)
        old = cluster.coordinator(group=topic)
        cluster.move_coordinator(next(b for b in cluster.broker_ids if b != old),
                                 group=topic)


#: (mode, members) of the runs under each fault past the cut connections (the fourth,
#: explicit with one member, adds little and costs CI time)
RUNS = [("implicit", 1), ("implicit", 2), ("explicit", 2)]


@pytest.mark.parametrize("mode,members", RUNS)
@pytest.mark.parametrize("fault", [move_leaders, broker_down_and_up, move_coordinator],
                         ids=lambda f: f.__name__)
def test_moves_and_a_broker_down(cluster, topic, members, mode, fault):
    since = cluster.clear_request_log()
    out = run_members(cluster, topic, members, mode, lambda: fault(cluster, topic))
    # acknowledgements to the old leader: NOT_LEADER_OR_FOLLOWER (not applied; the new
    # leader has the records available again), or given back / lost with the broker
    check(cluster, topic, out, since,
          {"INVALID_RECORD_STATE", "SHARE_SESSION_NOT_FOUND", "_TRANSPORT",
           "NOT_LEADER_FOR_PARTITION"})


#: Error answers injected, by API: each list goes to the next answers of that API, one
#: error per answer, spread over the run.
INJECTED = {
    "ShareFetch": ["NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION",
                   "SHARE_SESSION_NOT_FOUND", "INVALID_SHARE_SESSION_EPOCH",
                   "REQUEST_TIMED_OUT"],
    "ShareAcknowledge": ["NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION",
                         "SHARE_SESSION_NOT_FOUND", "INVALID_SHARE_SESSION_EPOCH",
                         "REQUEST_TIMED_OUT"],
    "ShareGroupHeartbeat": ["COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR",
                            "REQUEST_TIMED_OUT", "FENCED_MEMBER_EPOCH",
                            "UNKNOWN_MEMBER_ID"],
}


@pytest.mark.parametrize("mode,members", RUNS)
@pytest.mark.parametrize("api", sorted(INJECTED))
def test_injected_error_answers(cluster, topic, members, mode, api):
    since = cluster.clear_request_log()

    def inject():
        for code in INJECTED[api]:
            time.sleep(0.5)
            cluster.inject_errors(api, [code])

    # (a member may have no ShareAcknowledge left to send once everything is read)
    out = run_members(cluster, topic, members, mode, inject,
                      answer_all=api != "ShareAcknowledge")
    answered = [e.injected_error for e in cluster.request_log(since, api=api)
                if e.injected_error]
    if api != "ShareAcknowledge":
        assert sorted(answered) == sorted(INJECTED[api]), answered
    else:
        assert answered, "no ShareAcknowledge answered an injected error"
    # a refused request's acknowledgements go again until request.timeout.ms has passed
    # (far longer than the injections last): none fails with its retriable error; the
    # records of an ended session come again; no error event for what is retried
    assert out["events"] == [], out["events"]
    errors = {"INVALID_RECORD_STATE", "SHARE_SESSION_NOT_FOUND", "_TRANSPORT"}
    if api == "ShareGroupHeartbeat":    # (not looked into here: the set as it was)
        errors |= {"INVALID_SHARE_SESSION_EPOCH", "NOT_LEADER_FOR_PARTITION",
                   "UNKNOWN_TOPIC_OR_PART", "REQUEST_TIMED_OUT"}
    check(cluster, topic, out, since, errors)
