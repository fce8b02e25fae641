"""confluent-kafka (librdkafka) and kcat against the test cluster: produce, consume,
consumer groups, metadata, transactions, SASL PLAIN and SCRAM logins; their data reads
back through our Consumer and their segment files decode with ``dump-log``."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time

import pytest

from kafka_client import Consumer, TopicPartition
from kafka_client.testing import Cluster

ck = pytest.importorskip("confluent_kafka")
ck_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(brokers=3, data_dir=str(tmp_path_factory.mktemp("interop"))) as c:
        yield c


@pytest.fixture(scope="module")
def sasl_cluster(tmp_path_factory):
    with Cluster(brokers=3, data_dir=str(tmp_path_factory.mktemp("sasl")), users=USERS,
                 broker_config={"sasl.enabled.mechanisms":
                                "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"}) as c:
        yield c


def sasl_config(cluster, mechanism, user="alice", password=None):
    return {"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": USERS[user] if password is None else password}


def confluent_produce(config, topic, messages, **extra):
    p = ck.Producer(dict(config, **extra))
    errors = []
    for m in messages:
        p.produce(topic, on_delivery=lambda e, _m: e and errors.append(e), **m)
    assert p.flush(30) == 0
    assert not errors, errors
    del p


def sample(n, tag=""):
    out = []
    base = int(time.time() * 1000) - 1000
    for i in range(n):
        out.append({"key": None if i % 5 == 0 else b"key-%d" % i,
                    "value": None if i % 7 == 3 else b"%s-value-%d" % (tag.encode(), i),
                    "headers": [("h", b"%d" % i), ("null", None)] if i % 2 else None,
                    "timestamp": base + i})
    return out


def our_read(cluster, topic, partitions, expected, config=None):
    conf = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "ours",
            "enable.auto.commit": False, "fetch.wait.max.ms": 50}
    conf.update(config or {})
    consumer = Consumer(conf)
    got = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 30
        while len(got) < expected:
            assert time.monotonic() < deadline, f"{len(got)} of {expected}"
            for m in consumer.consume(1000, 0.2):
                assert m.error() is None, m.error()
                got.append(m)
    finally:
        consumer.close()
    return got


def dump_log(path, records=True):
    args = [sys.executable, "-m", "kafka_client.tools", "dump-log", path]
    if records:
        args.append("--records")
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr + out.stdout
    return out.stdout


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_data_reads_back_through_our_consumer_and_dump_log(cluster, codec):
    topic = f"from-confluent-{codec}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    messages = sample(60, codec)
    confluent_produce({"bootstrap.servers": cluster.bootstrap_servers}, topic, messages,
                      **{"compression.type": codec, "linger.ms": 20,
                         "batch.num.messages": 16, "enable.idempotence": True})
    got = our_read(cluster, topic, 1, len(messages))
    assert [m.offset() for m in got] == list(range(len(messages)))
    for m, sent in zip(got, messages):
        assert (m.key(), m.value(), m.timestamp()[1]) == (sent["key"], sent["value"],
                                                          sent["timestamp"])
        assert (m.headers() or None) == sent["headers"]
    state = cluster.wait_in_sync(topic)
    for broker in state.partitions[0].replicas:
        text = dump_log(cluster.segment_files(topic, 0, broker)[0])
        batches = [line for line in text.splitlines() if line.startswith("baseOffset:")]
        records = [line for line in text.splitlines() if line.startswith("| offset:")]
        assert len(batches) >= 4 and len(records) == len(messages)
        assert all(f"compresscodec: {codec}" in b and "isvalid: true" in b for b in batches)
        assert all("producerId: -1" not in b for b in batches)   # idempotent batches
        assert "payload: %s-value-1" % codec in text


def test_our_data_reads_back_through_confluent(cluster):
    from kafka_client import Producer

    cluster.create_topic("to-confluent", partitions=2, replication_factor=3)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
                  "compression.type": "lz4", "linger.ms": 5})
    for i in range(1000):
        p.produce("to-confluent", b"v%d" % i, key=b"k%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    c = ck.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "cf",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition("to-confluent", p, 0) for p in (0, 1)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 1000 and time.monotonic() < deadline:
        for m in c.consume(1000, 0.2):
            assert m.error() is None, m.error()
            got.append((m.partition(), m.offset(), m.value()))
    c.close()
    assert sorted(v for _, _, v in got) == sorted(b"v%d" % i for i in range(1000))
    for part in (0, 1):
        offsets = [o for p_, o, _ in got if p_ == part]
        assert offsets == list(range(500))


def test_confluent_consumer_group_shares_and_commits(cluster):
    cluster.create_topic("cf-group", partitions=4, replication_factor=3)
    conf = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "cf-group",
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "enable.auto.commit": False}
    members = [ck.Consumer(conf), ck.Consumer(conf)]
    for m in members:
        m.subscribe(["cf-group"])
    # Both members in the group (two partitions each) before anything is produced.
    deadline = time.monotonic() + 60
    while not all(len(m.assignment()) == 2 for m in members):
        assert time.monotonic() < deadline, [m.assignment() for m in members]
        for m in members:
            m.poll(0.1)
    confluent_produce({"bootstrap.servers": cluster.bootstrap_servers}, "cf-group",
                      [{"value": b"%d" % i, "key": b"%d" % i} for i in range(2000)])
    seen = {0: [], 1: []}
    while sum(len(v) for v in seen.values()) < 2000 and time.monotonic() < deadline:
        for i, member in enumerate(members):
            for msg in member.consume(500, 0.1):
                if msg.error() is None:
                    seen[i].append(int(msg.value()))
    assignments = [sorted(tp.partition for tp in m.assignment()) for m in members]
    for m in members:
        m.commit(asynchronous=False)
    committed = members[0].committed([ck.TopicPartition("cf-group", p) for p in range(4)], 10)
    for m in members:
        m.close()
    assert sorted(seen[0] + seen[1]) == list(range(2000))
    assert sorted(assignments[0] + assignments[1]) == [0, 1, 2, 3]
    assert seen[0] and seen[1]
    assert sum(tp.offset for tp in committed) == 2000
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]
    assert len(md.topics["cf-group"].partitions) == 4
    assert all(sorted(p.replicas) == [1, 2, 3] for p in md.topics["cf-group"].partitions.values())


def test_confluent_transactions_commit_and_abort(cluster):
    cluster.create_topic("txn", partitions=1, replication_factor=3)
    conf = {"bootstrap.servers": cluster.bootstrap_servers}
    p = ck.Producer(dict(conf, **{"transactional.id": "interop-txn"}))
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce("txn", b"committed-%d" % i)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce("txn", b"aborted-%d" % i)
    p.flush(30)                      # written, then aborted
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("txn", b"last")
    p.commit_transaction(30)

    def read(isolation):
        c = ck.Consumer(dict(conf, **{"group.id": "txn-" + isolation,
                                      "isolation.level": isolation,
                                      "enable.partition.eof": True}))
        c.assign([ck.TopicPartition("txn", 0, 0)])
        values = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == ck.KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(m.error())
            values.append(m.value())
        c.close()
        return values

    committed = read("read_committed")
    assert committed == [b"committed-%d" % i for i in range(10)] + [b"last"]
    everything = read("read_uncommitted")
    assert len(everything) == 21 and b"aborted-3" in everything
    text = dump_log(cluster.segment_files("txn", 0, cluster.leader("txn", 0))[0])
    assert text.count("endTxnMarker: COMMIT") == 2 and text.count("endTxnMarker: ABORT") == 1
    assert "isTransactional: true" in text


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_sasl_login(sasl_cluster, mechanism):
    topic = "sasl-" + mechanism.lower()
    sasl_cluster.create_topic(topic, partitions=2, replication_factor=3)
    conf = sasl_config(sasl_cluster, mechanism, user="bob")
    confluent_produce(conf, topic, [{"value": b"%d" % i} for i in range(200)],
                      **{"enable.idempotence": True})
    c = ck.Consumer(dict(conf, **{"group.id": "sasl-" + mechanism,
                                  "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 200 and time.monotonic() < deadline:
        for m in c.consume(200, 0.2):
            if m.error() is None:
                got.append(int(m.value()))
    c.close()
    assert sorted(got) == list(range(200))
    logins = [e for e in sasl_cluster.request_log(api="SaslAuthenticate")
              if e.details.get("authentication") == "ok"]
    assert any(e.details.get("user") == "bob" for e in logins)
    produces = [e for e in sasl_cluster.request_log(api="Produce")
                if e.details.get("partitions", [{}])[0].get("topic") == topic]
    assert produces and all(e.details["principal"] == "User:bob" for e in produces)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_confluent_sasl_wrong_password_is_refused(sasl_cluster, mechanism):
    since = sasl_cluster.clear_request_log()
    admin_conf = sasl_config(sasl_cluster, mechanism, password="wrong")
    c = ck.Consumer(dict(admin_conf, **{"group.id": "nobody"}))
    with pytest.raises(ck.KafkaException):
        c.list_topics(timeout=3)
    c.close()
    failures = [e for e in sasl_cluster.request_log(since=since, api="SaslAuthenticate")
                if "SASL_AUTHENTICATION_FAILED" in e.errors]
    assert failures
    # Nothing but the SASL exchange was served to it.
    served = {e.api for e in sasl_cluster.request_log(since=since)}
    assert served <= {"ApiVersions", "SaslHandshake", "SaslAuthenticate"}


KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (Debian package kcat)")
@pytest.mark.parametrize("mechanism", [None, "PLAIN", "SCRAM-SHA-256"])
def test_kcat(cluster, sasl_cluster, mechanism):
    target = cluster if mechanism is None else sasl_cluster
    base = [KCAT, "-b", target.bootstrap_servers]
    if mechanism is not None:
        base += ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
                 "-X", "sasl.username=alice", "-X", f"sasl.password={USERS['alice']}"]
    topic = f"kcat-{(mechanism or 'plain').lower()}"
    target.create_topic(topic, partitions=2, replication_factor=3)

    def run(args, stdin=None):
        out = subprocess.run(base + args, input=stdin, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    listing = run(["-L", "-t", topic])
    assert "3 brokers" in listing and f'topic "{topic}" with 2 partitions' in listing
    run(["-P", "-t", topic, "-K:"], "".join(f"k{i}:v{i}\n" for i in range(100)))
    lines = run(["-C", "-t", topic, "-o", "beginning", "-e", "-f", "%k=%s\\n"]).splitlines()
    assert sorted(lines) == sorted(f"k{i}=v{i}" for i in range(100))
    grouped = run(["-G", f"g-{topic}", topic, "-o", "beginning", "-e",
                   "-X", "auto.offset.reset=earliest", "-f", "%s\\n"]).splitlines()
    assert sorted(grouped) == sorted(f"v{i}" for i in range(100))
    # kcat's data through our consumer (logged in the same way) and through dump-log,
    # on every replica.
    login = {} if mechanism is None else sasl_config(target, mechanism)
    login.pop("bootstrap.servers", None)
    got = our_read(target, topic, 2, 100, login)
    assert sorted(m.value() for m in got) == sorted(b"v%d" % i for i in range(100))
    state = target.wait_in_sync(topic)
    payloads = []
    for p in (0, 1):
        texts = {dump_log(target.segment_files(topic, p, b)[0]) .split("\n", 1)[1]
                 for b in state.partitions[p].replicas}
        assert len(texts) == 1            # the same batches on every replica
        payloads += re.findall(r"payload: (\S+)", texts.pop())
    assert sorted(payloads) == sorted(f"v{i}" for i in range(100))


@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_authorized_operations_through_both_admin_clients(cluster, group_protocol):
    """Kafka without an authorizer answers every operation of the resource type
    (KIP-430); the test cluster answered none (describe_cluster failed in our
    AdminClient with _UNSUPPORTED_FEATURE, confluent-kafka's gave None)."""
    from kafka_client import TopicCollection
    from kafka_client.admin import AclOperation, AdminClient

    topic = f"authorized-ops-{group_protocol}"
    group = f"authorized-ops-group-{group_protocol}"
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    member = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                       "group.protocol": group_protocol})
    member.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment()
        expected = {
            "cluster": {AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                        AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                        AclOperation.DESCRIBE},
            "topic": {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                      AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALTER,
                      AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS},
            "group": {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                      AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS},
        }
        for admin, topics, names in (
                (AdminClient({"bootstrap.servers": cluster.bootstrap_servers}),
                 TopicCollection([topic]), lambda ops: set(ops)),
                (ck_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers}),
                 ck.TopicCollection([topic]), lambda ops: {AclOperation[o.name] for o in ops})):
            described = admin.describe_cluster(include_authorized_operations=True,
                                               request_timeout=10).result(15)
            assert names(described.authorized_operations) == expected["cluster"]
            described = admin.describe_topics(topics, include_authorized_operations=True,
                                              request_timeout=10)[topic].result(15)
            assert names(described.authorized_operations) == expected["topic"]
            described = admin.describe_consumer_groups(
                [group], include_authorized_operations=True, request_timeout=10)[group].result(15)
            assert len(described.members) == 1
            assert names(described.authorized_operations) == expected["group"]
            # Not asked for: none given.
            assert admin.describe_cluster(request_timeout=10).result(15) \
                .authorized_operations is None
    finally:
        member.close()
