"""Clients refused by the broker's authorizer, run in child processes by
test_authorization.py, once with this project's client and once with confluent-kafka
(librdkafka) against the same refusals:

    python authz_cases.py CASE ours|librdkafka     # one case, on a cluster of its own
    python authz_cases.py --serve ours|librdkafka  # the cases named on stdin, in turn

A runner starts one one-broker test cluster (automatic topic creation off) behind a
fault proxy. Each case gets its own topic ``t`` with two partitions, and its own group,
transactional id, other topics and client.id (all named after the case, so that no case
sees another's), makes the broker refuse one API with an authorization error
(``Cluster.inject_errors``: the next answers of that API carry the error, as a broker
whose ACLs deny the operation; ``clear_faults()`` is the ACL granted, and no fault
outlives its case), and prints one line ``RESULT ... <json>`` of what the client
observed: errors by name, how long it took to learn of them, delivery reports and
messages counted, whether the client recovered once the refusal was lifted, and how
long ``close()`` took. The results name the case's topics and group as the case does
(``t``, ``ok``, ``g``, ...).
"""
from __future__ import annotations

import collections
import contextlib
import json
import os
import sys
import time
import traceback
from importlib import import_module
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from kafka_client._testing.proxy import FaultProxy  # noqa: E402
from kafka_client.testing import Cluster  # noqa: E402
from kafka_proto.errors import ErrorCode  # noqa: E402
from kafka_proto.messages import ApiKey  # noqa: E402

#: Answers refused before the ACL is "granted" (clear_faults): more than any case asks
REFUSALS = 10_000

#: a case: ``(client module, cluster) -> observations``
Case = Callable[[Any, "Refusing"], Dict[str, Any]]
CASES: Dict[str, Case] = {}


def case(fn: Case) -> Case:
    CASES[fn.__name__] = fn
    return fn


class Refusing:
    """One case's view of the cluster, behind a fault proxy, that refuses what the case
    says until granted. The case's topic ``t``, group ``g``, transactional id ``tx``, the
    other topics it creates and its clients' ``client.id`` are named after the case
    (:meth:`name`), so that the cases a runner serves one after the other on its cluster
    see nothing of each other's: no topic, offsets, transaction or request."""

    def __init__(self, cluster: Cluster, proxy: Optional[FaultProxy], prefix: str) -> None:
        self.cluster = cluster
        self.proxy = proxy
        # every connection through the proxy, where there is one
        self.bootstrap_servers = proxy.bootstrap if proxy else cluster.bootstrap_servers
        self.prefix = prefix
        self.topic = self.name("t")
        self.group = self.name("g")
        self.refused_api: Optional[str] = None
        self.refused_since = 0
        #: how many requests of the refused API the brokers served while it was refused
        self.refused_requests = 0

    def name(self, logical: str) -> str:
        """The case's own name for topic, group or transactional id ``logical``."""
        return f"{self.prefix}.{logical}"

    def logical(self, name: str) -> str:
        """The name the results use (``t``, ``g``, ...) for the case's ``name``."""
        own = self.prefix + "."
        return name[len(own):] if name.startswith(own) else name

    def conf(self, **extra: Any) -> Dict[str, Any]:
        """A client's configuration: this cluster, the case's client.id, ``extra``."""
        return {"bootstrap.servers": self.bootstrap_servers, "client.id": self.prefix,
                **extra}

    def requests(self, since: int, api: str) -> List[Any]:
        """The requests of ``api`` this case's clients sent from log entry ``since`` on."""
        return [e for e in self.cluster.request_log(since, api=api)
                if e.client_id == self.prefix]

    def refuse(self, api: str, error: str) -> None:
        """Every answer of ``api`` carries ``error`` until :meth:`grant`. Metadata: the
        broker's own answers, with the topic's entry as Kafka's for a topic the client may
        not describe (the error, no partitions); other APIs: the cluster's error answers."""
        self.refused_api = api
        self.refused_since = self.cluster.clear_request_log()
        if api == "Metadata":
            self.proxy.rewrite_responses(ApiKey.METADATA,
                                         topic_refused(self.topic, ErrorCode[error]),
                                         count=None)
        else:
            self.cluster.inject_errors(api, [error] * REFUSALS)

    def grant(self) -> None:
        self.clear_faults()
        if self.refused_api is not None:
            self.refused_requests = len(self.requests(self.refused_since, self.refused_api))

    def clear_faults(self) -> None:
        self.cluster.clear_faults()
        if self.proxy is not None:
            self.proxy.clear_faults()


def topic_refused(topic: str, code: int) -> Callable[[Any, int], None]:
    def change(response: Any, version: int) -> None:
        for t in response.topics or ():
            if t.name == topic:
                t.error_code = code
                t.partitions = []
    return change


def name(err: Any) -> Any:
    return None if err is None else err.name()


class Observer:
    """Delivery reports and error events of one client, with the time each came."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.reports: collections.Counter = collections.Counter()
        self.report_times: Dict[str, float] = {}
        self.errors: List[Dict[str, Any]] = []

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 2)

    def on_delivery(self, err: Any, msg: Any) -> None:
        key = name(err) or "delivered"
        self.reports[key] += 1
        self.report_times.setdefault(key, self.elapsed())

    def error_cb(self, err: Any) -> None:
        self.errors.append({"error": name(err), "fatal": err.fatal(), "at": self.elapsed()})

    def error_names(self) -> List[str]:
        return sorted({e["error"] for e in self.errors})


def closed_in(client: Any) -> float:
    started = time.monotonic()
    client.close()
    return round(time.monotonic() - started, 2)


def count_log(ck: Any, cluster: Refusing) -> Dict[str, int]:
    """Messages in topic ``t``, by value, read from the start by a fresh consumer: up to
    the end the log has now (or, where the consumer's position does not get there, as
    past transaction markers, until nothing came for 2 s)."""
    c = ck.Consumer(cluster.conf(**{"group.id": cluster.name("counter"),
                                    "enable.auto.commit": False,
                                    "auto.offset.reset": "earliest"}))
    try:
        partitions = [ck.TopicPartition(cluster.topic, p) for p in (0, 1)]
        # the partitions with records, and the offset after their last one
        ends = {}
        for tp in partitions:
            low, high = c.get_watermark_offsets(tp, timeout=10, cached=False)
            if high > low:
                ends[tp.partition] = high
        c.assign([ck.TopicPartition(cluster.topic, p, ck.OFFSET_BEGINNING) for p in (0, 1)])
        counts: collections.Counter = collections.Counter()
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < 2.0:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                counts[m.value().decode()] += 1
                quiet_since = time.monotonic()
            if all(tp.offset >= ends[tp.partition] for tp in c.position(partitions)
                   if tp.partition in ends):
                break
        return dict(counts)
    finally:
        c.close()


def produce_some(ck: Any, cluster: "Refusing", p: Any, obs: Observer, prefix: str,
                 count: int) -> Any:
    """Produce ``count`` messages; the name of the error produce() raised, if any."""
    for i in range(count):
        try:
            p.produce(cluster.topic, f"{prefix}{i}".encode(), partition=i % 2,
                      on_delivery=obs.on_delivery)
        except ck.KafkaException as exc:
            return exc.args[0].name()
    return None


def producer_conf(cluster: Refusing, obs: Observer, **extra: Any) -> Dict[str, Any]:
    return cluster.conf(**{"linger.ms": 5, "message.timeout.ms": 20000,
                           "error_cb": obs.error_cb, **extra})


def produce_refused_then_granted(ck: Any, cluster: Refusing, api: str,
                                 error: str = "TOPIC_AUTHORIZATION_FAILED",
                                 **extra: Any) -> Dict[str, Any]:
    """Produce while ``api`` is refused with TOPIC_AUTHORIZATION_FAILED, then after the
    ACL is granted."""
    obs = Observer()
    p = ck.Producer(producer_conf(cluster, obs, **extra))
    out: Dict[str, Any] = {}
    if api == "Produce":
        # The producer knows the topic (and has its producer id) before it is refused.
        out["before"] = produce_some(ck, cluster, p, obs, "before-", 4)
        p.flush(10)
    cluster.refuse(api, error)
    out["produce_raised"] = produce_some(ck, cluster, p, obs, "refused-", 10)
    started = time.monotonic()
    out["left_after_flush"] = p.flush(15)
    out["flush_seconds"] = round(time.monotonic() - started, 2)
    out["refused_reports"] = dict(obs.reports)
    # A later produce() while still refused: accepted, or refused at once?
    obs.reports.clear()
    out["later_produce_raised"] = produce_some(ck, cluster, p, obs, "later-", 1)
    p.flush(15)
    out["later_reports"] = dict(obs.reports)
    cluster.grant()                                  # the ACL is granted
    obs.reports.clear()
    granted_at = time.monotonic()
    attempts = []
    # Until a message produced after the grant is delivered (metadata refreshed).
    while time.monotonic() - granted_at < 20:
        attempts.append(produce_some(ck, cluster, p, obs, "granted-", 1))
        p.flush(2)
        if obs.reports.get("delivered"):
            break
        time.sleep(0.5)
    out["granted_attempts"] = attempts
    out["granted_reports"] = dict(obs.reports)
    out["granted_seconds"] = round(time.monotonic() - granted_at, 2)
    obs.reports.clear()
    produce_some(ck, cluster, p, obs, "after-", 10)
    out["left_after_grant"] = p.flush(15)
    out["after_reports"] = dict(obs.reports)
    out["errors"] = obs.errors
    out["close_seconds"] = closed_in(p)
    out["log"] = count_log(ck, cluster)
    # an idempotent producer's epoch bumps (KIP-360) after the failed batches' gap
    out["init_producer_ids"] = len(cluster.requests(cluster.refused_since, "InitProducerId"))
    return out


@case
def produce_metadata_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return produce_refused_then_granted(ck, cluster, "Metadata")


@case
def produce_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return produce_refused_then_granted(ck, cluster, "Produce")


@case
def produce_cluster_refused_idempotent(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    """Produce answered CLUSTER_AUTHORIZATION_FAILED: a broker before Kafka 3.0 refusing
    an idempotent producer without IDEMPOTENT_WRITE."""
    return produce_refused_then_granted(ck, cluster, "Produce", "CLUSTER_AUTHORIZATION_FAILED",
                                        **{"enable.idempotence": True})


@case
def produce_refused_idempotent(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return produce_refused_then_granted(ck, cluster, "Produce", **{"enable.idempotence": True})


@case
def produce_refused_beside_allowed_idempotent(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    """An idempotent producer writes to a topic it may write to and to one the ACLs
    refuse, for 3 seconds, then the ACL is granted. Its own two-broker cluster: the
    refused topic led by broker 1, whose Produce answers are refused (not executed), the
    other by broker 2."""
    with Cluster(brokers=2, broker_config={"auto.create.topics.enable": False}) as two:
        own = Refusing(two, None, cluster.prefix)
        two.create_topic(own.topic, partitions=2, assignments=[[1], [1]])
        two.create_topic(own.name("ok"), partitions=2, assignments=[[2], [2]])
        return beside_allowed(ck, own)


def beside_allowed(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    """Topic ``t`` (led by broker 1) refused beside ``ok`` (broker 2), then granted;
    the results by each topic's name in the results (``t``, ``ok``)."""
    obs = Observer()
    by_topic: collections.Counter = collections.Counter()
    ok = cluster.name("ok")

    def on_delivery(err: Any, msg: Any) -> None:
        by_topic[f"{cluster.logical(msg.topic())} {name(err) or 'delivered'}"] += 1

    p = ck.Producer(producer_conf(cluster, obs, **{"enable.idempotence": True}))
    for topic in (cluster.topic, ok):
        p.produce(topic, b"first", on_delivery=on_delivery)
    p.flush(10)
    since = cluster.cluster.clear_request_log()
    cluster.cluster.inject_errors("Produce", ["TOPIC_AUTHORIZATION_FAILED"] * REFUSALS,
                                  broker=1)
    sent: collections.Counter = collections.Counter()
    started = time.monotonic()
    n = 0
    while time.monotonic() - started < 3:
        for topic in (ok, cluster.topic):
            shown = cluster.logical(topic)
            try:
                p.produce(topic, f"{shown}-{n}".encode(), partition=n % 2,
                          on_delivery=on_delivery)
                sent[shown] += 1
            except ck.KafkaException as exc:
                sent[f"{shown} raised {exc.args[0].name()}"] += 1
        n += 1
        if n % 100 == 0:
            p.poll(0.005)
    out: Dict[str, Any] = {"left_after_flush": p.flush(15), "sent": dict(sent),
                           "reports": dict(by_topic)}
    out["init_producer_ids"] = len(cluster.requests(since, "InitProducerId"))
    out["produce_requests"] = len(cluster.requests(since, "Produce"))
    cluster.clear_faults()                           # the ACL is granted
    by_topic.clear()
    granted_at = time.monotonic()
    while time.monotonic() - granted_at < 10 and not by_topic.get("t delivered"):
        try:
            p.produce(cluster.topic, b"granted", partition=0, on_delivery=on_delivery)
        except ck.KafkaException:
            pass
        p.flush(1)
    for i in range(10):
        p.produce(cluster.topic, f"after-{i}".encode(), partition=i % 2,
                  on_delivery=on_delivery)
    out["left_after_grant"] = p.flush(15)
    out["granted_reports"] = dict(by_topic)
    out["errors"] = obs.errors
    out["close_seconds"] = closed_in(p)
    log = count_log(ck, cluster)
    # what the refused Produce requests left in the log: nothing
    out["refused_written"] = sum(1 for v in log if v.startswith("t-"))
    out["log"] = {v: n for v, n in log.items() if not v.startswith("t-")}
    return out


def fill(ck: Any, cluster: Refusing, count: int = 10) -> None:
    """``count`` messages "m0", "m1", ... over both partitions, before any refusal."""
    p = ck.Producer(cluster.conf(**{"linger.ms": 5}))
    for i in range(count):
        p.produce(cluster.topic, f"m{i}".encode(), partition=i % 2)
    assert p.flush(10) == 0
    p.close() if hasattr(p, "close") else None


def poll_for(consumer: Any, obs: Observer, seconds: float, want: int = 0,
             seen: Any = None) -> Dict[str, Any]:
    """Poll for ``seconds`` (or until ``want`` distinct messages): the error events with
    when each name first came, and the messages by value."""
    seen = collections.Counter() if seen is None else seen
    events: Dict[str, Any] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (want and len(seen) >= want):
        m = consumer.poll(0.1)
        if m is None:
            continue
        if m.error() is not None:
            entry = events.setdefault(m.error().name(), {"count": 0, "first": obs.elapsed(),
                                                         "fatal": m.error().fatal()})
            entry["count"] += 1
        else:
            seen[m.value().decode()] += 1
    return {"events": events, "messages": len(seen),
            "duplicates": sum(n - 1 for n in seen.values())}


def consume_refused_then_granted(ck: Any, cluster: Refusing, api: str, error: str,
                                 assign: bool = False, resubscribe: bool = False,
                                 **extra: Any) -> Dict[str, Any]:
    fill(ck, cluster)
    obs = Observer()
    conf = cluster.conf(**{"group.id": cluster.group, "auto.offset.reset": "earliest",
                           "error_cb": obs.error_cb, "enable.auto.commit": False, **extra})
    cluster.refuse(api, error)
    c = ck.Consumer(conf)
    obs.started = time.monotonic()
    if assign:
        c.assign([ck.TopicPartition(cluster.topic, p, ck.OFFSET_BEGINNING) for p in (0, 1)])
    else:
        c.subscribe([cluster.topic])
    out: Dict[str, Any] = {"refused": poll_for(c, obs, 5.0)}
    out["refused_errors"] = list(obs.errors)
    obs.errors.clear()
    cluster.grant()
    if resubscribe:       # what the application does after a stopping error
        out["resubscribe_raised"] = raised(ck, lambda: c.subscribe([cluster.topic]))
    obs.started = time.monotonic()
    seen: collections.Counter = collections.Counter()
    granted = poll_for(c, obs, 12.0, want=10, seen=seen)
    granted["seconds"] = obs.elapsed()
    granted.update(poll_for(c, obs, 1.0, seen=seen))   # and nothing more comes
    out["granted"] = granted
    out["granted_errors"] = list(obs.errors)
    out["close_seconds"] = closed_in(c)
    return out


@case
def subscribe_metadata_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return consume_refused_then_granted(ck, cluster, "Metadata", "TOPIC_AUTHORIZATION_FAILED")


@case
def assign_metadata_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return consume_refused_then_granted(ck, cluster, "Metadata", "TOPIC_AUTHORIZATION_FAILED",
                                        assign=True)


@case
def fetch_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return consume_refused_then_granted(ck, cluster, "Fetch", "TOPIC_AUTHORIZATION_FAILED",
                                        assign=True)


@case
def find_coordinator_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return consume_refused_then_granted(ck, cluster, "FindCoordinator",
                                        "GROUP_AUTHORIZATION_FAILED")


@case
def join_group_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return consume_refused_then_granted(ck, cluster, "JoinGroup", "GROUP_AUTHORIZATION_FAILED")


@case
def offset_fetch_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return consume_refused_then_granted(ck, cluster, "OffsetFetch",
                                        "GROUP_AUTHORIZATION_FAILED")


@case
def heartbeat_refused_consumer_protocol(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return consume_refused_then_granted(ck, cluster, "ConsumerGroupHeartbeat",
                                        "GROUP_AUTHORIZATION_FAILED", resubscribe=True,
                                        **{"group.protocol": "consumer"})


@case
def heartbeat_topic_refused_consumer_protocol(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return consume_refused_then_granted(ck, cluster, "ConsumerGroupHeartbeat",
                                        "TOPIC_AUTHORIZATION_FAILED",
                                        **{"group.protocol": "consumer"})


@case
def list_offsets_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return consume_refused_then_granted(ck, cluster, "ListOffsets",
                                        "TOPIC_AUTHORIZATION_FAILED", assign=True)


@case
def auto_commit_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    """Auto-commit (every 300 ms) while OffsetCommit is refused for 4 s, then granted."""
    fill(ck, cluster)
    obs = Observer()
    commits: collections.Counter = collections.Counter()

    def on_commit(err: Any, partitions: Any) -> None:
        commits[name(err) or "committed"] += 1

    c = ck.Consumer(cluster.conf(**{
        "group.id": cluster.group, "auto.offset.reset": "earliest", "error_cb": obs.error_cb,
        "enable.auto.commit": True, "auto.commit.interval.ms": 300, "on_commit": on_commit}))
    c.subscribe([cluster.topic])
    out: Dict[str, Any] = {"read": poll_for(c, obs, 20.0, want=10)}
    cluster.refuse("OffsetCommit", "GROUP_AUTHORIZATION_FAILED")
    commits.clear()
    out["refused"] = poll_for(c, obs, 4.0)
    out["refused_commits"] = dict(commits)
    out["refused_errors"] = list(obs.errors)
    cluster.grant()
    commits.clear()
    out["granted"] = poll_for(c, obs, 2.0)
    out["granted_commits"] = dict(commits)
    out["committed"] = sorted((tp.partition, tp.offset) for tp in c.committed(
        [ck.TopicPartition(cluster.topic, q) for q in (0, 1)], 10))
    out["close_seconds"] = closed_in(c)
    return out


@case
def subscribe_one_topic_refused_beside_another(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    """A subscription to the refused topic and to one allowed: the allowed one is read."""
    ok = cluster.name("ok")
    cluster.cluster.create_topic(ok, partitions=2)
    p = ck.Producer(cluster.conf(**{"linger.ms": 5}))
    for i in range(10):
        p.produce(ok, f"ok{i}".encode(), partition=i % 2)
    assert p.flush(10) == 0
    fill(ck, cluster)
    obs = Observer()
    # auto-commit: what was read is committed when the partitions are revoked (the grant
    # changes the subscription's partitions: a rebalance), so nothing is read twice
    c = ck.Consumer(cluster.conf(**{"group.id": cluster.group, "auto.offset.reset": "earliest",
                                    "error_cb": obs.error_cb}))
    cluster.refuse("Metadata", "TOPIC_AUTHORIZATION_FAILED")
    c.subscribe([cluster.topic, ok])
    seen: collections.Counter = collections.Counter()
    out: Dict[str, Any] = {"refused": poll_for(c, obs, 10.0, want=10, seen=seen)}
    out["refused_values"] = sorted(seen)
    cluster.grant()
    out["granted"] = poll_for(c, obs, 15.0, want=20, seen=seen)
    out["granted_values"] = len(seen)
    out["close_seconds"] = closed_in(c)
    return out


@case
def heartbeat_refused_classic(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    """A member of a classic group whose Heartbeat is refused (the ACL revoked after it
    joined) while new messages come, then granted."""
    fill(ck, cluster)
    obs = Observer()
    c = ck.Consumer(cluster.conf(**{"group.id": cluster.group, "auto.offset.reset": "earliest",
                                    "error_cb": obs.error_cb, "heartbeat.interval.ms": 300}))
    c.subscribe([cluster.topic])
    seen: collections.Counter = collections.Counter()
    out: Dict[str, Any] = {"read": poll_for(c, obs, 20.0, want=10, seen=seen)}
    cluster.refuse("Heartbeat", "GROUP_AUTHORIZATION_FAILED")
    p = ck.Producer(cluster.conf(**{"linger.ms": 5}))
    for i in range(10, 20):
        p.produce(cluster.topic, f"m{i}".encode(), partition=i % 2)
    assert p.flush(10) == 0
    obs.started = time.monotonic()
    out["refused"] = poll_for(c, obs, 5.0, seen=seen)
    out["refused_errors"] = list(obs.errors)
    cluster.grant()
    obs.started = time.monotonic()
    granted = poll_for(c, obs, 12.0, want=20, seen=seen)
    granted["seconds"] = obs.elapsed()
    out["granted"] = granted
    out["read_in_all"] = len(seen)
    out["close_seconds"] = closed_in(c)
    return out


@case
def offset_commit_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    fill(ck, cluster)
    obs = Observer()
    commits: List[Any] = []

    def on_commit(err: Any, partitions: Any) -> None:
        commits.append([name(err), sorted((tp.partition, tp.offset, name(tp.error))
                                          for tp in partitions)])

    c = ck.Consumer(cluster.conf(**{
        "group.id": cluster.group, "auto.offset.reset": "earliest", "error_cb": obs.error_cb,
        "enable.auto.commit": False, "on_commit": on_commit}))
    c.subscribe([cluster.topic])
    out: Dict[str, Any] = {"read": poll_for(c, obs, 20.0, want=10)}
    cluster.refuse("OffsetCommit", "GROUP_AUTHORIZATION_FAILED")
    started = time.monotonic()
    try:
        result = c.commit(asynchronous=False)
        out["sync_commit"] = sorted((tp.partition, tp.offset, name(tp.error))
                                    for tp in result)
    except ck.KafkaException as exc:
        out["sync_commit"] = exc.args[0].name()
    out["sync_commit_seconds"] = round(time.monotonic() - started, 2)
    c.commit(asynchronous=True)
    out["after_async"] = poll_for(c, obs, 3.0)
    out["commit_callbacks"] = list(commits)
    out["refused_errors"] = list(obs.errors)
    cluster.grant()
    commits.clear()
    try:
        result = c.commit(asynchronous=False)
        out["granted_commit"] = sorted((tp.partition, tp.offset, name(tp.error))
                                       for tp in result)
    except ck.KafkaException as exc:
        out["granted_commit"] = exc.args[0].name()
    out["committed"] = sorted((tp.partition, tp.offset) for tp in c.committed(
        [ck.TopicPartition(cluster.topic, p) for p in (0, 1)], 10))
    out["close_seconds"] = closed_in(c)
    return out


def raised(ck: Any, call: Callable[[], Any]) -> Any:
    """What ``call`` raised: the error's name and its flags, or None."""
    try:
        call()
    except ck.KafkaException as exc:
        err = exc.args[0]
        return {"error": err.name(), "fatal": err.fatal(), "retriable": err.retriable(),
                "abortable": err.txn_requires_abort()}
    except SystemError as exc:
        # confluent-kafka 2.16.1 runs the delivery callbacks of the messages it purges with
        # the fatal error already raised: the callback's first call fails so
        return {"error": type(exc).__name__}
    return None


def init_producer_id_refused(ck: Any, cluster: Refusing, error: str,
                             **extra: Any) -> Dict[str, Any]:
    """InitProducerId refused: init_transactions() (a transactional producer) or the
    first produce() (an idempotent one); then what the producer does once granted."""
    obs = Observer()
    # refused first: an idempotent producer may ask for its id as soon as it starts
    cluster.refuse("InitProducerId", error)
    p = ck.Producer(producer_conf(cluster, obs, **extra))
    out: Dict[str, Any] = {}
    transactional = "transactional.id" in extra
    if transactional:
        started = time.monotonic()
        out["init"] = raised(ck, lambda: p.init_transactions(10))
        out["init_seconds"] = round(time.monotonic() - started, 2)
    out["produce_raised"] = produce_some(ck, cluster, p, obs, "refused-", 4)
    started = time.monotonic()
    out["flush_raised"] = None
    while time.monotonic() - started < 10 and len(p):
        # A fatal error is raised once, by the call that serves it
        out["flush_raised"] = out["flush_raised"] or raised(ck, lambda: p.flush(1))
    out["left_after_flush"] = len(p)
    out["flush_seconds"] = round(time.monotonic() - started, 2)
    out["refused_reports"] = dict(obs.reports)
    out["refused_errors"] = list(obs.errors)
    cluster.grant()
    obs.reports.clear()
    obs.errors.clear()
    if transactional:
        out["granted_init"] = raised(ck, lambda: p.init_transactions(10))
        out["granted_begin"] = raised(ck, p.begin_transaction)
    out["granted_produce_raised"] = produce_some(ck, cluster, p, obs, "granted-", 4)
    if transactional and out["granted_begin"] is None:
        out["granted_commit"] = raised(ck, lambda: p.commit_transaction(10))
    out["granted_flush_raised"] = raised(ck, lambda: p.flush(10))
    out["left_after_grant"] = len(p)
    out["granted_reports"] = dict(obs.reports)
    out["granted_errors"] = list(obs.errors)
    out["close_seconds"] = closed_in(p)
    out["log"] = count_log(ck, cluster)
    return out


@case
def init_transactions_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return init_producer_id_refused(ck, cluster, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                                    **{"transactional.id": cluster.name("tx")})


@case
def init_transactions_cluster_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return init_producer_id_refused(ck, cluster, "CLUSTER_AUTHORIZATION_FAILED",
                                    **{"transactional.id": cluster.name("tx")})


@case
def idempotent_init_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return init_producer_id_refused(ck, cluster, "CLUSTER_AUTHORIZATION_FAILED",
                                    **{"enable.idempotence": True})


@case
def add_partitions_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    """AddPartitionsToTxn refused inside a transaction: abortable; aborted, the next
    transaction (granted) commits."""
    return transaction_refused(ck, cluster, "AddPartitionsToTxn")


@case
def produce_refused_in_transaction(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return transaction_refused(ck, cluster, "Produce")


@case
def metadata_refused_in_transaction(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return transaction_refused(ck, cluster, "Metadata")


def transaction_refused(ck: Any, cluster: Refusing, api: str) -> Dict[str, Any]:
    obs = Observer()
    p = ck.Producer(producer_conf(cluster, obs, **{"transactional.id": cluster.name("tx")}))
    p.init_transactions(10)
    p.begin_transaction()
    cluster.refuse(api, "TOPIC_AUTHORIZATION_FAILED")
    out: Dict[str, Any] = {"produce_raised": produce_some(ck, cluster, p, obs, "refused-", 4)}
    started = time.monotonic()
    out["flush_left"] = p.flush(10)
    out["commit"] = raised(ck, lambda: p.commit_transaction(10))
    out["commit_seconds"] = round(time.monotonic() - started, 2)
    out["refused_reports"] = dict(obs.reports)
    out["abort"] = raised(ck, lambda: p.abort_transaction(10))
    out["refused_errors"] = list(obs.errors)
    granting = time.time()
    cluster.grant()
    obs.reports.clear()
    obs.errors.clear()
    out["granted_begin"] = raised(ck, p.begin_transaction)
    producing = time.time()
    out["granted_produce_raised"] = produce_some(ck, cluster, p, obs, "granted-", 4)
    # Metadata requests that reached the broker between the grant and produce(): the
    # proxy changes the answers only of requests sent before the grant, so after one of
    # these the client may know the topic again (librdkafka asks again on its own).
    out["metadata_asked_after_grant"] = len([
        e for e in cluster.requests(cluster.refused_since, "Metadata")
        if granting <= e.time <= producing])
    out["granted_commit"] = raised(ck, lambda: p.commit_transaction(10))
    out["granted_reports"] = dict(obs.reports)
    out["granted_errors"] = list(obs.errors)
    started = time.monotonic()
    out["close_raised"] = raised(ck, p.close)
    out["close_seconds"] = round(time.monotonic() - started, 2)
    out["log"] = count_log(ck, cluster)
    return out


def offsets_refused_in_transaction(ck: Any, cluster: Refusing, api: str,
                                   error: str) -> Dict[str, Any]:
    """send_offsets_to_transaction() while ``api`` (AddOffsetsToTxn, TxnOffsetCommit) is
    refused; then abort and, granted, a transaction that commits with its offsets."""
    fill(ck, cluster)
    obs = Observer()
    p = ck.Producer(producer_conf(cluster, obs, **{"transactional.id": cluster.name("tx")}))
    c = ck.Consumer(cluster.conf(**{"group.id": cluster.group, "enable.auto.commit": False,
                                    "auto.offset.reset": "earliest"}))
    c.assign([ck.TopicPartition(cluster.topic, q, ck.OFFSET_BEGINNING) for q in (0, 1)])
    out: Dict[str, Any] = {"read": poll_for(c, obs, 15.0, want=10)}
    p.init_transactions(10)
    p.begin_transaction()
    produce_some(ck, cluster, p, obs, "refused-", 2)
    cluster.refuse(api, error)
    started = time.monotonic()
    offsets = [ck.TopicPartition(cluster.topic, q, 5) for q in (0, 1)]
    out["send_offsets"] = raised(ck, lambda: p.send_offsets_to_transaction(
        offsets, c.consumer_group_metadata(), 10))
    out["commit"] = raised(ck, lambda: p.commit_transaction(10))
    out["seconds"] = round(time.monotonic() - started, 2)
    out["abort"] = raised(ck, lambda: p.abort_transaction(10))
    out["refused_errors"] = list(obs.errors)
    cluster.grant()
    out["granted_begin"] = raised(ck, p.begin_transaction)
    produce_some(ck, cluster, p, obs, "granted-", 2)
    out["granted_send_offsets"] = raised(ck, lambda: p.send_offsets_to_transaction(
        offsets, c.consumer_group_metadata(), 10))
    out["granted_commit"] = raised(ck, lambda: p.commit_transaction(10))
    out["committed"] = sorted((tp.partition, tp.offset) for tp in c.committed(
        [ck.TopicPartition(cluster.topic, q) for q in (0, 1)], 10))
    c.close()
    started = time.monotonic()
    out["close_raised"] = raised(ck, p.close)
    out["close_seconds"] = round(time.monotonic() - started, 2)
    out["log"] = {v: n for v, n in count_log(ck, cluster).items() if not v.startswith("m")}
    return out


@case
def add_offsets_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return offsets_refused_in_transaction(ck, cluster, "AddOffsetsToTxn",
                                          "GROUP_AUTHORIZATION_FAILED")


@case
def txn_offset_commit_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return offsets_refused_in_transaction(ck, cluster, "TxnOffsetCommit",
                                          "GROUP_AUTHORIZATION_FAILED")


@case
def end_txn_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    """EndTxn refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED: the ACL was revoked)."""
    obs = Observer()
    p = ck.Producer(producer_conf(cluster, obs, **{"transactional.id": cluster.name("tx")}))
    p.init_transactions(10)
    p.begin_transaction()
    produce_some(ck, cluster, p, obs, "refused-", 2)
    cluster.refuse("EndTxn", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    started = time.monotonic()
    out: Dict[str, Any] = {"commit": raised(ck, lambda: p.commit_transaction(10))}
    out["seconds"] = round(time.monotonic() - started, 2)
    out["abort"] = raised(ck, lambda: p.abort_transaction(10))
    out["reports"] = dict(obs.reports)
    cluster.grant()
    out["granted_begin"] = raised(ck, p.begin_transaction)
    out["granted_produce_raised"] = produce_some(ck, cluster, p, obs, "granted-", 1)
    started = time.monotonic()
    out["close_raised"] = raised(ck, p.close)
    out["close_seconds"] = round(time.monotonic() - started, 2)
    return out


def admin_result(ck: Any, cluster: Refusing, futures: Dict[Any, Any]) -> Dict[str, Any]:
    """Each future's error name (None: it succeeded), by its key's name in the results."""
    out = {}
    for key, future in futures.items():
        key = cluster.logical(getattr(key, "name", key))
        try:
            future.result(15)
            out[key] = None
        except ck.KafkaException as exc:
            out[key] = exc.args[0].name()
    return out


def admin_refused(ck: Any, cluster: Refusing, api: str, error: str,
                  call: Callable[[Any, Any], Dict[Any, Any]]) -> Dict[str, Any]:
    """``call(admin, admin module)`` while ``api`` is refused, then granted."""
    admin_module = import_module(ck.__name__ + ".admin")
    admin = admin_module.AdminClient(cluster.conf())
    cluster.refuse(api, error)
    started = time.monotonic()
    out: Dict[str, Any] = {"refused": admin_result(ck, cluster, call(admin, admin_module))}
    out["refused_seconds"] = round(time.monotonic() - started, 2)
    cluster.grant()
    out["granted"] = admin_result(ck, cluster, call(admin, admin_module))
    close_admin(admin)
    return out


def close_admin(admin: Any) -> None:
    """Ours closes, its threads with it (confluent-kafka 2.16's AdminClient has no
    close(): it is destroyed with its last reference)."""
    if hasattr(admin, "close"):
        admin.close()


@case
def describe_topics_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return admin_refused(ck, cluster, "Metadata", "TOPIC_AUTHORIZATION_FAILED",
                         lambda admin, m: admin.describe_topics(
                             ck.TopicCollection([cluster.topic]), request_timeout=10))


@case
def delete_topics_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    doomed = [cluster.name("d1"), cluster.name("d2")]
    for topic in doomed:
        cluster.cluster.create_topic(topic)
    return admin_refused(ck, cluster, "DeleteTopics", "TOPIC_AUTHORIZATION_FAILED",
                         lambda admin, m: admin.delete_topics(doomed, request_timeout=10))


@case
def describe_configs_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return admin_refused(ck, cluster, "DescribeConfigs", "TOPIC_AUTHORIZATION_FAILED",
                         lambda admin, m: admin.describe_configs(
                             [m.ConfigResource(m.ResourceType.TOPIC, cluster.topic)],
                             request_timeout=10))


@case
def create_partitions_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return admin_refused(ck, cluster, "CreatePartitions", "TOPIC_AUTHORIZATION_FAILED",
                         lambda admin, m: admin.create_partitions(
                             [m.NewPartitions(cluster.topic, 3)], request_timeout=10))


@case
def list_group_offsets_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return admin_refused(ck, cluster, "OffsetFetch", "GROUP_AUTHORIZATION_FAILED",
                         lambda admin, m: admin.list_consumer_group_offsets(
                             [ck.ConsumerGroupTopicPartitions(cluster.group)], request_timeout=10))



def create_topics_refused(ck: Any, cluster: Refusing, error: str) -> Dict[str, Any]:
    admin_module = import_module(ck.__name__ + ".admin")
    admin = admin_module.AdminClient(cluster.conf())
    cluster.refuse("CreateTopics", error)
    started = time.monotonic()
    created = [cluster.name("a"), cluster.name("b")]
    out: Dict[str, Any] = {"refused": admin_result(ck, cluster, admin.create_topics(
        [admin_module.NewTopic(n, 1) for n in created], request_timeout=10))}
    out["refused_seconds"] = round(time.monotonic() - started, 2)
    cluster.grant()
    out["granted"] = admin_result(ck, cluster, admin.create_topics(
        [admin_module.NewTopic(n, 1) for n in created], request_timeout=10))
    out["topics"] = sorted(cluster.logical(n) for n in admin.list_topics(timeout=10).topics
                           if n in created)
    close_admin(admin)
    return out


@case
def create_topics_cluster_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return create_topics_refused(ck, cluster, "CLUSTER_AUTHORIZATION_FAILED")


@case
def create_topics_topic_refused(ck: Any, cluster: Refusing) -> Dict[str, Any]:
    return create_topics_refused(ck, cluster, "TOPIC_AUTHORIZATION_FAILED")


def client_module(peer: str) -> Any:
    """The client module a runner drives: ours or confluent-kafka's."""
    return import_module("confluent_kafka" if peer == "librdkafka" else "kafka_client")


@contextlib.contextmanager
def refusing_cluster() -> Iterator[Tuple[Cluster, FaultProxy]]:
    """A one-broker cluster (no automatic topic creation) behind a fault proxy."""
    # Ports bound at once (0), not picked first (another process took one now and then)
    with FaultProxy("127.0.0.1", 9, follow_frames=True) as proxy, \
            Cluster(brokers=1, advertised_ports=[proxy.port],
                    broker_config={"auto.create.topics.enable": False}) as cluster:
        proxy.retarget("127.0.0.1", cluster.brokers[0].port)
        yield cluster, proxy


def run_case(case_name: str, ck: Any, cluster: Cluster, proxy: FaultProxy,
             prefix: str) -> Dict[str, Any]:
    """Case ``case_name`` on its own topic ``t`` (two partitions), names under
    ``prefix``; the cluster's and the proxy's faults are gone afterwards, whatever
    happened."""
    refusing = Refusing(cluster, proxy, prefix)
    cluster.create_topic(refusing.topic, partitions=2)
    try:
        result = CASES[case_name](ck, refusing)
    finally:
        refusing.clear_faults()
    result["refused_requests"] = refusing.refused_requests
    return result


def serve(peer: str) -> None:
    """Run the cases named on stdin, one a line, one after the other on one cluster:
    ``READY`` once it is up, then per case ``RESULT <case> <seconds> <json>`` or
    ``FAILED <case> <seconds> <json traceback>``; exit at the end of stdin."""
    ck = client_module(peer)
    with refusing_cluster() as (cluster, proxy):
        print("READY", flush=True)
        for number, line in enumerate(sys.stdin):
            case_name = line.strip()
            started = time.monotonic()
            try:
                result = run_case(case_name, ck, cluster, proxy, f"{case_name}-{number}")
                outcome = "RESULT"
            except Exception:
                result = traceback.format_exc()
                outcome = "FAILED"
            seconds = round(time.monotonic() - started, 2)
            print(f"{outcome} {case_name} {seconds} {json.dumps(result)}", flush=True)


def main(argv: List[str]) -> None:
    if argv[0] == "--serve":
        serve(argv[1])
        return
    case_name, peer = argv
    with refusing_cluster() as (cluster, proxy):
        result = run_case(case_name, client_module(peer), cluster, proxy, case_name)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
