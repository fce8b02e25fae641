"""The consumer's ``stats_cb`` (librdkafka's JSON field names, values checked against what
was consumed and committed), the ``logger`` property (every log line of the client goes
to it, none to the module loggers), and an ``oauth_cb`` that raises on a token refresh
(the one callback policy: error_cb first, then the exception to the caller). Real
brokers: Tansu, noida-db where a group is needed, and the test cluster for SASL."""
from __future__ import annotations

import json
import logging
import time

import pytest

from kafka_client import AdminClient, Consumer, KafkaError, Producer, TopicPartition

pytestmark = pytest.mark.integration

N_PER_PARTITION = 50


def fill(bootstrap, topic, partitions=2):
    p = Producer({"bootstrap.servers": bootstrap})
    for part in range(partitions):
        for i in range(N_PER_PARTITION):
            p.produce(topic, b"%d-%d" % (part, i), partition=part)
    assert p.flush(10) == 0
    p.close()


def consume_all(c, n, timeout=15):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += [m for m in c.consume(n, 0.2) if m.error() is None]
    return got


def stats_until(c, stats, predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c.poll(0.1)
        for doc in reversed(stats):
            doc = json.loads(doc)
            if predicate(doc):
                return doc
    pytest.fail(f"no statistics document as expected; last: {stats[-1:]}")


def keys_at(doc, *path):
    for p in path:
        doc = doc[p]
    return set(doc)


def test_consumer_stats_cb_reports_offsets_lag_brokers_and_group(noida_broker, topic_name):
    # noida-db: Tansu 0.6 holds a JoinGroup for tens of seconds
    tansu_broker = noida_broker
    tansu_broker.create_topic(topic_name, partitions=2)
    fill(tansu_broker.bootstrap, topic_name)
    stats = []
    c = Consumer({"bootstrap.servers": tansu_broker.bootstrap, "group.id": topic_name,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "stats_cb": stats.append, "statistics.interval.ms": 100})
    c.subscribe([topic_name])
    assert len(consume_all(c, 2 * N_PER_PARTITION)) == 2 * N_PER_PARTITION
    c.commit(asynchronous=False)
    doc = stats_until(c, stats, lambda d: all(
        p["committed_offset"] == N_PER_PARTITION
        for k, p in d["topics"].get(topic_name, {}).get("partitions", {"x": {
            "committed_offset": -1}}).items() if k != "-1"))
    c.close()
    assert doc["type"] == "consumer" and doc["client_id"] == "kafka-native"
    parts = doc["topics"][topic_name]["partitions"]
    assert sorted(parts) == ["-1", "0", "1"]   # librdkafka's "-1": the unassigned one
    assert parts["-1"]["partition"] == -1 and parts["-1"]["rxmsgs"] == 0
    del parts["-1"]
    for p in parts.values():
        assert p["app_offset"] == p["stored_offset"] == N_PER_PARTITION
        assert p["hi_offset"] == p["next_offset"] == N_PER_PARTITION
        assert p["lo_offset"] == 0
        assert p["consumer_lag"] == p["consumer_lag_stored"] == 0
        assert p["fetch_state"] == "active" and p["leader"] >= 0
        assert p["rxmsgs"] == p["msgs"] == N_PER_PARTITION and p["rxbytes"] > 0
    assert doc["rxmsgs"] == 2 * N_PER_PARTITION and doc["txmsgs"] == 0
    cgrp = doc["cgrp"]
    assert (cgrp["state"], cgrp["join_state"], cgrp["assignment_size"]) == ("up", "steady", 2)
    assert cgrp["rebalance_cnt"] == 1 and cgrp["rebalance_reason"] == ""
    brokers = list(doc["brokers"].values())
    assert brokers and any(b["state"] == "UP" for b in brokers)
    assert sum(b["rx"] for b in brokers) == doc["rx"] > 0
    # windows cover one interval each: the round trips of all of them
    assert sum(b["rtt"]["cnt"] for d in map(json.loads, stats)
               for b in d["brokers"].values()) > 0
    assert all(b["req"]["ApiVersion"] >= 1 for b in brokers)
    assert sum(b["req"]["Fetch"] for b in brokers) > 0

    # librdkafka's field names: the same as in confluent-kafka's document
    ck = pytest.importorskip("confluent_kafka")
    theirs_docs = []
    tc = ck.Consumer({"bootstrap.servers": tansu_broker.bootstrap,
                      "group.id": topic_name + "-ck", "auto.offset.reset": "earliest",
                      "stats_cb": theirs_docs.append, "statistics.interval.ms": 100})
    tc.subscribe([topic_name])
    deadline = time.monotonic() + 15
    theirs = None
    while theirs is None and time.monotonic() < deadline:
        tc.poll(0.1)
        for d in theirs_docs:
            d = json.loads(d)
            if d.get("topics", {}).get(topic_name, {}).get("partitions", {}).get("0") \
                    and d.get("brokers") and d.get("cgrp"):
                theirs = d
    tc.close()
    assert theirs is not None
    assert set(doc) == set(theirs)
    assert keys_at(doc, "topics", topic_name) == keys_at(theirs, "topics", topic_name)
    assert keys_at(doc, "topics", topic_name, "partitions", "0") == \
        keys_at(theirs, "topics", topic_name, "partitions", "0")
    their_broker = next(iter(theirs["brokers"].values()))
    for b in brokers:
        assert set(b) == set(their_broker)
        for window in ("rtt", "int_latency", "outbuf_latency", "throttle"):
            assert set(b[window]) == set(their_broker[window])
        assert set(b["req"]) == set(their_broker["req"])
    assert set(doc["cgrp"]) == set(theirs["cgrp"])


@pytest.mark.parametrize("kind", ["producer", "idempotent", "admin"])
def test_producer_and_admin_stats_have_librdkafkas_shape(tansu_broker, topic_name, kind):
    """Every client serves stats_cb from poll(); the fields are those confluent-kafka's
    same client type gives (its AdminClient is a producer handle)."""
    ck = pytest.importorskip("confluent_kafka")
    tansu_broker.create_topic(topic_name)
    docs = {}
    for name, make in (("ours", AdminClient if kind == "admin" else Producer),
                       ("theirs", ck.admin.AdminClient if kind == "admin" else ck.Producer)):
        stats = docs[name] = []
        conf = {"bootstrap.servers": tansu_broker.bootstrap,
                "statistics.interval.ms": 100, "stats_cb": stats.append}
        if kind == "idempotent":
            conf["enable.idempotence"] = True
        client = make(conf)
        if kind != "admin":
            client.produce(topic_name, b"v")
            assert client.flush(10) == 0
        else:
            client.list_topics(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
                b["state"] == "UP" for d in stats[-1:]
                for b in json.loads(d)["brokers"].values()):
            client.poll(0.1)
        if hasattr(client, "close"):  # confluent-kafka's AdminClient has none
            client.close()
        docs[name] = [json.loads(d) for d in stats]
    every_ours = docs["ours"]
    ours, theirs = docs["ours"][-1], docs["theirs"][-1]
    assert ours["type"] == theirs["type"] == "producer"
    assert set(ours) == set(theirs), set(ours) ^ set(theirs)
    up = [b for b in ours["brokers"].values() if b["state"] == "UP"]
    assert up and sum(b["tx"] for b in ours["brokers"].values()) == ours["tx"] > 0
    their_broker = next(iter(theirs["brokers"].values()))
    for b in ours["brokers"].values():
        assert set(b) == set(their_broker), set(b) ^ set(their_broker)
    if kind == "idempotent":
        assert set(ours["eos"]) == set(theirs["eos"])
        eos = ours["eos"]
        assert eos["idemp_state"] == "Assigned"
        assert eos["producer_id"] >= 0 and eos["producer_epoch"] >= 0
        assert eos["epoch_cnt"] == 1 and eos["txn_state"] == "Init"
    if kind != "admin":
        assert ours["txmsgs"] == 1 and ours["msg_cnt"] == 0
        assert set(ours["topics"][topic_name]) == set(theirs["topics"][topic_name])
        assert set(ours["topics"][topic_name]["partitions"]["0"]) == \
            set(theirs["topics"][topic_name]["partitions"]["0"])
        assert ours["topics"][topic_name]["partitions"]["0"]["txmsgs"] == 1
        # windows cover one interval each: the batch waited in one of them
        assert sum(b["int_latency"]["cnt"] for d in every_ours
                   for b in d["brokers"].values()) == 1
        assert sum(d["topics"].get(topic_name, {}).get("batchcnt", {}).get("sum", 0)
                   for d in every_ours) == 1


def test_raising_consumer_stats_cb_reaches_consume_and_loses_nothing(tansu_broker,
                                                                     topic_name):
    tansu_broker.create_topic(topic_name, partitions=2)
    fill(tansu_broker.bootstrap, topic_name)
    calls = []

    def stats_cb(doc):
        calls.append(doc)
        raise ValueError("stats_cb failed")

    c = Consumer({"bootstrap.servers": tansu_broker.bootstrap, "stats_cb": stats_cb,
                  "statistics.interval.ms": 50})
    c.assign([TopicPartition(topic_name, p, 0) for p in range(2)])
    got, raised = [], 0
    deadline = time.monotonic() + 15
    while (len(got) < 2 * N_PER_PARTITION or raised < 3) and time.monotonic() < deadline:
        try:
            got += [m.value() for m in c.consume(10, 0.1) if m.error() is None]
        except ValueError:
            raised += 1
    start = time.monotonic()
    c.close()
    assert time.monotonic() - start < 5
    assert raised >= 3 and len(calls) == raised      # each call's exception once
    assert sorted(got) == sorted(b"%d-%d" % (p, i) for p in range(2)
                                 for i in range(N_PER_PARTITION))   # every message once


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def module_loggers():
    """Everything the kafka_client.* module loggers emit while the test runs (at DEBUG)."""
    root = logging.getLogger("kafka_client")
    handler = Collect()
    old = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    yield handler.records
    root.removeHandler(handler)
    root.setLevel(old)


def own_logger(name):
    log = logging.getLogger(name)
    log.propagate = False
    log.setLevel(logging.DEBUG)
    handler = Collect()
    log.addHandler(handler)
    return log, handler.records


def test_the_logger_property_gets_the_consumers_log_lines(noida_broker, topic_name,
                                                          module_loggers):
    tansu_broker = noida_broker  # (a group: see above)
    tansu_broker.create_topic(topic_name, partitions=2)
    fill(tansu_broker.bootstrap, topic_name)
    del module_loggers[:]
    log, records = own_logger(f"app.{topic_name}")
    c = Consumer({"bootstrap.servers": tansu_broker.bootstrap, "group.id": topic_name,
                  "auto.offset.reset": "earliest", "logger": log})
    c.subscribe([topic_name])
    assert len(consume_all(c, 2 * N_PER_PARTITION)) == 2 * N_PER_PARTITION
    c.close()
    texts = [r.getMessage() for r in records]
    assert any(t.startswith("connected to 127.0.0.1:") for t in texts), texts   # connection
    assert any(f"group {topic_name}: joining" in t for t in texts), texts       # group
    assert any(f"group {topic_name}: generation" in t for t in texts), texts
    assert module_loggers == [], [r.getMessage() for r in module_loggers]


def test_the_logger_property_gets_producer_and_admin_connection_lines(tansu_broker,
                                                                      module_loggers):
    for cls in (Producer, AdminClient):
        log, records = own_logger(f"app.{cls.__name__}")
        client = cls({"bootstrap.servers": tansu_broker.bootstrap, "logger": log})
        client.list_topics(timeout=10)
        client.close()
        texts = [r.getMessage() for r in records]
        assert any(t.startswith("connected to 127.0.0.1:") for t in texts), (cls, texts)
    assert not [r for r in module_loggers if r.name.startswith(
        ("kafka_client.connection", "kafka_client.cluster", "kafka_client.calls"))]


def test_the_logger_property_gets_the_transactional_producers_lines(tansu_broker, topic_name,
                                                                    module_loggers):
    tansu_broker.create_topic(topic_name)
    log, records = own_logger(f"app.txn.{topic_name}")
    p = Producer({"bootstrap.servers": tansu_broker.bootstrap, "logger": log,
                  "transactional.id": topic_name})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic_name, b"v")
    p.commit_transaction(30)
    p.close()
    texts = [r.getMessage() for r in records]
    assert any(t.startswith(f"transactional id {topic_name}: producer id ") for t in texts), texts
    assert any(t.startswith("transaction state ") for t in texts), texts
    assert not [r for r in module_loggers if r.name.startswith("kafka_client.producer")], \
        [r.getMessage() for r in module_loggers]


def test_a_raising_oauth_cb_reaches_consume_after_error_cb(sasl_cluster, topic_name):
    from kafka_client._net.security.oauth import unsecured_jwt

    sasl_cluster.create_topic(topic_name)
    calls, errors = [], []

    def oauth_cb(_config):
        calls.append(time.monotonic())
        if len(calls) > 1:
            raise ConnectionError("identity provider unreachable")
        token = unsecured_jwt("principal=alice lifeSeconds=1")
        return token.value, token.expires_at

    c = Consumer({"bootstrap.servers": sasl_cluster.bootstrap_servers,
                  "security.protocol": "sasl_plaintext", "sasl.mechanism": "OAUTHBEARER",
                  "oauth_cb": oauth_cb, "error_cb": errors.append})
    c.assign([TopicPartition(topic_name, 0, 0)])
    raised = []
    deadline = time.monotonic() + 5
    while not raised and time.monotonic() < deadline:
        try:
            c.consume(10, 0.1)
        except ConnectionError as exc:
            raised.append(exc)
            # the bookkeeping came first: the failed refresh was reported to error_cb
            assert any(e.code() == KafkaError._AUTHENTICATION
                       and "identity provider unreachable" in e.str() for e in errors)
    assert [str(e) for e in raised] == ["identity provider unreachable"]
    assert c.consume(10, 0.2) is not None      # the consumer goes on (retrying the token)
    start = time.monotonic()
    c.close()
    assert time.monotonic() - start < 5
