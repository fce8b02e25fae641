"""The test cluster's authorizer (``Cluster(authorizer=True)``): Kafka's rules checked
on the decision itself, the ACL APIs' checks on the wire (what the admin clients cannot
send), and enforcement end to end: a SASL PLAIN user refused, then let through by the
ACLs an admin creates, producing and consuming; DENY over ALLOW; prefixed patterns; a
super user; what Metadata and KIP-430's authorized operations show each principal."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from kafka_client import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Producer,
    TopicCollection,
    TopicPartition,
)
from kafka_client.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka_client.errors import KafkaException
from kafka_client.testing import Cluster, ClusterError
from kafka_client.testing._acls import Acl, AclStore, Authorizer
from kafka_proto.enums import (
    AclOperation as Op,
    AclPatternType as Pat,
    AclPermissionType as Perm,
    AclResourceType as Res,
)
from kafka_proto.errors import ErrorCode
from kafka_proto.framing import encode_request
from kafka_proto.messages import (
    ApiKey,
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    ElectLeadersRequest,
    FetchRequest,
    FindCoordinatorRequest,
    ListGroupsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
)
from kafka_proto.records import RecordBatchBuilder

from cli_cluster import start_cli_cluster  # tests/testing/cli_cluster.py
from rawclient import RawClient  # tests/testing/rawclient.py

confluent_kafka = pytest.importorskip("confluent_kafka")

ROOT = str(Path(__file__).resolve().parents[2])

ALLOW, DENY = Perm.ALLOW, Perm.DENY


# --------------------------------------------------------------------------- the decision


def decide(acls, principal="User:alice", host="127.0.0.1", op=Op.READ, res=Res.TOPIC,
           name="orders", super_users=()):
    store = AclStore()
    for acl in acls:
        store.create(acl)
    return Authorizer(store, True, super_users).decide(principal, host, op, res, name)


def acl(name="orders", op=Op.READ, perm=ALLOW, principal="User:alice", host="*",
        pattern=Pat.LITERAL, res=Res.TOPIC):
    return Acl(res, name, pattern, principal, host, op, perm)


def test_no_acl_is_a_refusal_and_an_allow_lets_through():
    assert not decide([])
    assert decide([acl()])
    assert not decide([acl(principal="User:bob")])
    assert not decide([acl(op=Op.WRITE)])
    assert not decide([acl(res=Res.GROUP)])


def test_deny_beats_allow():
    assert not decide([acl(), acl(perm=DENY)])
    assert not decide([acl(op=Op.ALL), acl(perm=DENY)])
    assert not decide([acl(), acl(op=Op.ALL, perm=DENY)])
    # a DENY of another operation leaves this one alone
    assert decide([acl(), acl(op=Op.WRITE, perm=DENY)])
    # a DENY through the wildcards counts as well
    assert not decide([acl(), acl(name="*", principal="User:*", perm=DENY)])


def test_implied_operations_are_allowed_not_denied():
    for implying in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL):
        assert decide([acl(op=implying)], op=Op.DESCRIBE), implying
    assert not decide([acl(op=Op.CREATE)], op=Op.DESCRIBE)
    assert decide([acl(op=Op.ALTER_CONFIGS)], op=Op.DESCRIBE_CONFIGS)
    assert not decide([acl(op=Op.DESCRIBE_CONFIGS)], op=Op.ALTER_CONFIGS)
    assert not decide([acl(op=Op.DESCRIBE)], op=Op.READ)
    # a DENY of READ does not deny DESCRIBE, which WRITE still allows
    assert decide([acl(op=Op.WRITE), acl(op=Op.READ, perm=DENY)], op=Op.DESCRIBE)


def test_patterns_principals_and_hosts():
    assert decide([acl(name="*")], name="anything")
    assert decide([acl(name="ord", pattern=Pat.PREFIXED)], name="orders")
    assert not decide([acl(name="orders-", pattern=Pat.PREFIXED)], name="orders")
    assert not decide([acl(name="ord")], name="orders")   # literal: the whole name
    assert decide([acl(principal="User:*")])
    assert decide([acl(host="127.0.0.1")])
    assert not decide([acl(host="10.0.0.1")])


def test_allow_everyone_if_no_acl_found_lets_through_what_no_acl_covers():
    """allow.everyone.if.no.acl.found=true: a resource without ACLs is everyone's; one
    ACL on it, whoever it names, makes the ACLs decide (confluent-kafka's
    test_describe_operations counts on this)."""
    def open_decide(acls, **kw):
        store = AclStore()
        for a in acls:
            store.create(a)
        return Authorizer(store, True, allow_everyone=True).decide(
            kw.get("principal", "User:alice"), "127.0.0.1", kw.get("op", Op.DELETE),
            Res.TOPIC, kw.get("name", "orders"))
    assert open_decide([])
    assert open_decide([acl(name="other")])
    assert not open_decide([acl(op=Op.READ)])                       # READ only, now
    assert not open_decide([acl(principal="User:bob", op=Op.ALL)])  # someone else's
    assert not open_decide([acl(name="ord", pattern=Pat.PREFIXED, op=Op.READ)])
    assert open_decide([acl(op=Op.READ)], op=Op.READ)
    assert not decide([])                                           # the default: false
    store = AclStore()
    assert Authorizer(store, True, allow_everyone=True).authorize_any(
        _Conn(), Op.WRITE, Res.TOPIC)
    store.create(acl(name="*", principal="User:bob", op=Op.READ))
    assert not Authorizer(store, True, allow_everyone=True).authorize_any(
        _Conn(), Op.WRITE, Res.TOPIC)


def test_super_users_pass_everything():
    assert decide([], principal="User:admin", super_users=("User:admin",))
    assert decide([acl(principal="User:admin", perm=DENY)], principal="User:admin",
                  super_users=("User:admin",))


class _Conn:
    """What the authorizer reads of a connection."""

    def __init__(self, principal="User:alice", host="127.0.0.1"):
        self.principal, self.peer, self.internal = principal, (host, 5000), False


def may_write_some_topic(acls):
    store = AclStore()
    for a in acls:
        store.create(a)
    return Authorizer(store, True).authorize_any(_Conn(), Op.WRITE, Res.TOPIC)


def test_some_topic_writable_is_kafkas_authorize_by_resource_type():
    """InitProducerId of an idempotent producer: WRITE on some topic (KIP-679)."""
    assert not may_write_some_topic([])
    assert may_write_some_topic([acl(op=Op.WRITE)])
    assert may_write_some_topic([acl(op=Op.ALL, name="t-", pattern=Pat.PREFIXED)])
    assert not may_write_some_topic([acl(op=Op.READ)])          # no implied operations
    assert not may_write_some_topic([acl(op=Op.WRITE), acl(op=Op.WRITE, perm=DENY)])
    assert not may_write_some_topic([acl(op=Op.WRITE, name="t-a"),
                                     acl(op=Op.WRITE, name="t-", pattern=Pat.PREFIXED,
                                         perm=DENY)])
    assert may_write_some_topic([acl(op=Op.WRITE, name="t-a"),
                                 acl(op=Op.WRITE, name="t-b", perm=DENY)])
    assert not may_write_some_topic([acl(op=Op.WRITE, name="*"),
                                     acl(op=Op.ALL, name="*", perm=DENY)])
    assert may_write_some_topic([acl(op=Op.WRITE, name="*"),
                                 acl(op=Op.WRITE, name="x", pattern=Pat.PREFIXED, perm=DENY)])
    assert not may_write_some_topic([acl(op=Op.WRITE, principal="User:bob")])


# --------------------------------------------------------------------------- the ACL APIs


@pytest.fixture(scope="module")
def open_cluster(tmp_path_factory):
    """Authorizer on, no SASL: every client is User:ANONYMOUS, a super user."""
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("acl-api") / "c"),
                 authorizer=True, super_users=("User:ANONYMOUS",)) as cluster:
        yield cluster


def creation(res=Res.TOPIC, name="t", pattern=Pat.LITERAL, principal="User:a", host="*",
             op=Op.READ, perm=ALLOW):
    return CreateAclsRequest.AclCreation(
        resource_type=res, resource_name=name, resource_pattern_type=pattern,
        principal=principal, host=host, operation=op, permission_type=perm)


def acl_filter(cls, res=Res.ANY, name=None, pattern=Pat.ANY, principal=None, host=None,
               op=Op.ANY, perm=Perm.ANY, **extra):
    return cls(resource_type_filter=res, resource_name_filter=name, pattern_type_filter=pattern,
               principal_filter=principal, host_filter=host, operation=op,
               permission_type=perm, **extra)


def test_creations_kafka_refuses_get_invalid_request(open_cluster):
    user = f"User:{uuid.uuid4().hex[:8]}"
    bad = [creation(principal=user, pattern=Pat.ANY), creation(principal=user, pattern=Pat.MATCH),
           creation(principal=user, res=Res.ANY), creation(principal=user, op=Op.ANY),
           creation(principal=user, perm=Perm.ANY), creation(principal=user, name=""),
           creation(principal=user.split(":")[1]),
           creation(principal=user, res=Res.CLUSTER, name="other")]
    good = [creation(principal=user, res=Res.USER, name="User:bob", op=Op.CREATE_TOKENS),
            creation(principal=user, res=Res.DELEGATION_TOKEN, name="tok", op=Op.DESCRIBE),
            creation(principal=user, res=Res.CLUSTER, name="kafka-cluster", op=Op.ALTER)]
    with RawClient(open_cluster.bootstrap_servers) as raw:
        resp = raw.request(CreateAclsRequest(creations=bad + good), 3)
        codes = [r.error_code for r in resp.results]
        assert codes == [ErrorCode.INVALID_REQUEST] * len(bad) + [ErrorCode.NONE] * len(good)
        assert all(r.error_message for r in resp.results[:len(bad)])
        described = raw.request(acl_filter(DescribeAclsRequest, principal=user), 3)
        assert described.error_code == ErrorCode.NONE
        stored = sorted((r.resource_type, r.resource_name, r.pattern_type, a.operation)
                        for r in described.resources for a in r.acls)
        assert stored == sorted((c.resource_type, c.resource_name, c.resource_pattern_type,
                                 c.operation) for c in good)
    assert len([a for a in open_cluster.acls() if a["principal"] == user]) == len(good)


UNKNOWN_PARTS = ({"res": Res.UNKNOWN}, {"res": 99}, {"pattern": Pat.UNKNOWN},
                 {"op": Op.UNKNOWN}, {"op": 99}, {"perm": Perm.UNKNOWN})


@pytest.mark.parametrize("unknown", UNKNOWN_PARTS, ids=str)
def test_an_unknown_part_anywhere_does_not_parse(open_cluster, unknown):
    """Kafka's request classes refuse a binding or filter with an UNKNOWN part (or a code
    they do not know) while parsing: the broker closes the connection, and nothing of
    the request is done."""
    user = f"User:{uuid.uuid4().hex[:8]}"
    requests = [
        CreateAclsRequest(creations=[creation(principal=user),
                                     creation(principal=user, name="x", **unknown)]),
        acl_filter(DescribeAclsRequest, **unknown),
        # the first filter would delete every ACL
        DeleteAclsRequest(filters=[acl_filter(DeleteAclsRequest.DeleteAclsFilter),
                                   acl_filter(DeleteAclsRequest.DeleteAclsFilter, **unknown)]),
    ]
    open_cluster.create_acl("GROUP", "kept", user, "READ")
    for request in requests:
        with RawClient(open_cluster.bootstrap_servers) as raw:
            raw.send(request, 3)
            assert raw.recv_frame() is None, type(request).__name__
    assert [(a["name"], a["principal"]) for a in open_cluster.acls()
            if a["principal"] == user] == [("kept", user)]
    closed = [e for e in open_cluster.request_log(kind=None)
              if e.kind == "closed" and "UNKNOWN" in e.details.get("detail", "").upper()]
    assert len(closed) >= 3


def test_a_name_longer_than_a_string_may_be_does_not_parse(open_cluster):
    """A compact string (v2+) can declare more than 32767 bytes, which Kafka's request
    classes refuse while parsing ("string field resourceName had invalid length"): the
    broker closes the connection and creates nothing. The cluster stored the binding."""
    user = f"User:{uuid.uuid4().hex[:8]}"
    body = bytearray(CreateAclsRequest(creations=[creation(principal=user, name="@")])
                     .encode(3))
    at = body.index(b"\x02@")            # the name: compact length 1 + 1, then "@"
    long_name = b"n" * 40_000
    body[at:at + 2] = bytes([(40_001 & 0x7F) | 0x80, (40_001 >> 7 & 0x7F) | 0x80,
                             40_001 >> 14]) + long_name
    with RawClient(open_cluster.bootstrap_servers) as raw:
        raw.send_bytes(encode_request(bytes(body), 3, 1, "long", api_key=ApiKey.CREATE_ACLS))
        assert raw.recv_frame() is None
    with RawClient(open_cluster.bootstrap_servers) as raw:   # within the limit: stored
        resp = raw.request(CreateAclsRequest(creations=[
            creation(principal=user, name="n" * 32_767)]), 3)
        assert [r.error_code for r in resp.results] == [ErrorCode.NONE]
    assert [len(a["name"]) for a in open_cluster.acls() if a["principal"] == user] == [32_767]


def test_version_one_names_pattern_types_and_zero_is_not_served(open_cluster):
    """Kafka 4 serves the ACL APIs from v1 (KIP-896); v1 carries the pattern type."""
    user = f"User:{uuid.uuid4().hex[:8]}"
    with RawClient(open_cluster.bootstrap_servers) as raw:
        resp = raw.request(CreateAclsRequest(creations=[
            creation(principal=user, name="pre", pattern=Pat.PREFIXED)]), 1)
        assert [r.error_code for r in resp.results] == [ErrorCode.NONE]
        resp = raw.request(acl_filter(DescribeAclsRequest, principal=user, name="prefix",
                                      pattern=Pat.MATCH), 1)
        assert [(r.resource_name, r.pattern_type) for r in resp.resources] == \
            [("pre", Pat.PREFIXED)]
    with RawClient(open_cluster.bootstrap_servers) as raw:
        raw.send(acl_filter(DescribeAclsRequest, principal=user, pattern=Pat.LITERAL), 0)
        assert raw.recv_frame() is None


def test_control_channel_creates_acls_with_kafkas_checks(open_cluster):
    user = f"User:{uuid.uuid4().hex[:8]}"
    open_cluster.create_acl("GROUP", "g", user, "READ")
    with pytest.raises(ClusterError) as ei:
        open_cluster.create_acl("CLUSTER", "not-kafka-cluster", user, "ALTER")
    assert ei.value.code == "INVALID_REQUEST"
    assert [(a["resource_type"], a["name"], a["operation"], a["permission"])
            for a in open_cluster.acls() if a["principal"] == user] == \
        [("GROUP", "g", "READ", "ALLOW")]


# --------------------------------------------------------------------------- enforcement

ADMIN = ("admin", "admin-secret")


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """One broker requiring SASL PLAIN, the authorizer on, User:admin a super user."""
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("acl-sasl") / "c"),
                 broker_config={"sasl.enabled.mechanisms": "PLAIN",
                                "group.consumer.heartbeat.interval.ms": 250},
                 users=dict([ADMIN]), authorizer=True,
                 super_users=("User:admin",)) as cluster:
        yield cluster


def sasl_conf(cluster, user, password, **extra):
    conf = {"bootstrap.servers": cluster.bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": password}
    conf.update(extra)
    return conf


@pytest.fixture
def principal(secured):
    """A SASL user of this test's own: ``(name, conf(**extra))``."""
    name = f"u{uuid.uuid4().hex[:8]}"
    secured.set_sasl_credentials(name, name + "-pw")
    return name, lambda **extra: sasl_conf(secured, name, name + "-pw", **extra)


@pytest.fixture
def admin(secured):
    a = AdminClient(sasl_conf(secured, *ADMIN))
    yield a
    a.close()


def grant(admin, *bindings):
    futures = admin.create_acls(list(bindings))
    for b in bindings:
        assert futures[b].result(10) is None


def binding(res, name, user, op, perm=AclPermissionType.ALLOW,
            pattern=ResourcePatternType.LITERAL):
    return AclBinding(res, name, pattern, f"User:{user}", "*", op, perm)


def produce(conf, topic, count, **extra):
    """Produce ``count`` messages; the delivery errors (None for each delivered)."""
    p = Producer(conf(**{"message.timeout.ms": 10000, **extra}))
    reports = []
    for i in range(count):
        p.produce(topic, b"m%d" % i, on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(20) == 0
    return reports


def consume_assigned(conf, topic, want, seconds=8.0):
    """``(values, errors)`` read from partition 0 of ``topic`` from the start."""
    c = Consumer(conf(**{"group.id": "unused", "enable.auto.commit": False}))
    c.assign([TopicPartition(topic, 0, 0)])
    values, errors = [], []
    deadline = time.monotonic() + seconds
    try:
        while len(values) < want and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                errors.append(msg.error().code())
                if len(errors) >= 3:
                    break
            else:
                values.append(msg.value())
    finally:
        c.close()
    return values, errors


def test_a_user_is_refused_then_produces_and_consumes_once_allowed(secured, admin, principal):
    user, conf = principal
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    secured.create_topic(topic, partitions=1)
    since = secured.clear_request_log()
    assert [e.code() for e in produce(conf, topic, 3)] == \
        [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    assert secured.describe_topic(topic).partitions[0].high_watermark == 0
    denied = {d for e in secured.request_log(since) for d in e.details.get("denied", ())}
    assert f"DESCRIBE TOPIC:{topic}" in denied

    grant(admin, binding(ResourceType.TOPIC, topic, user, AclOperation.WRITE))
    assert produce(conf, topic, 3) == [None, None, None]
    assert secured.describe_topic(topic).partitions[0].high_watermark == 3

    values, errors = consume_assigned(conf, topic, 3, seconds=4)
    assert values == [] and KafkaError.TOPIC_AUTHORIZATION_FAILED in errors

    # a group member needs READ on the group as well
    group = f"g-{uuid.uuid4().hex[:6]}"
    grant(admin, binding(ResourceType.TOPIC, topic, user, AclOperation.READ))
    consumer = Consumer(conf(**{"group.id": group, "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    errors = []
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline and not errors:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error():
            errors.append(msg.error().code())
    consumer.close()
    assert errors == [KafkaError.GROUP_AUTHORIZATION_FAILED]

    grant(admin, binding(ResourceType.GROUP, group, user, AclOperation.READ))
    consumer = Consumer(conf(**{"group.id": group, "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    values = []
    deadline = time.monotonic() + 15
    while len(values) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None:
            assert not msg.error(), msg.error()
            values.append(msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert values == [b"m0", b"m1", b"m2"]
    committed = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert [(tp.topic, tp.offset) for tp in committed.topic_partitions] == [(topic, 3)]


def test_deny_beats_allow_end_to_end(secured, admin, principal):
    user, conf = principal
    tag = uuid.uuid4().hex[:6]
    readable, denied = f"d{tag}-open", f"d{tag}-closed"
    for t in (readable, denied):
        secured.create_topic(t, partitions=1)
    grant(admin, binding(ResourceType.TOPIC, f"d{tag}-", user, AclOperation.ALL,
                         pattern=ResourcePatternType.PREFIXED),
          binding(ResourceType.TOPIC, denied, user, AclOperation.READ,
                  AclPermissionType.DENY))
    assert produce(conf, readable, 2) == [None, None]
    assert produce(conf, denied, 2) == [None, None]      # WRITE is not denied
    assert consume_assigned(conf, readable, 2)[0] == [b"m0", b"m1"]
    values, errors = consume_assigned(conf, denied, 2, seconds=4)
    assert values == [] and KafkaError.TOPIC_AUTHORIZATION_FAILED in errors


def test_prefixed_patterns_cover_the_names_they_start(secured, admin, principal):
    user, conf = principal
    tag = uuid.uuid4().hex[:6]
    inside, outside = f"p{tag}-a", f"q{tag}-p{tag}-a"
    for t in (inside, outside):
        secured.create_topic(t, partitions=1)
    grant(admin, binding(ResourceType.TOPIC, f"p{tag}-", user, AclOperation.WRITE,
                         pattern=ResourcePatternType.PREFIXED))
    assert produce(conf, inside, 1) == [None]
    assert [e.code() for e in produce(conf, outside, 1)] == \
        [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # creating topics under the prefix takes CREATE on them (or on the cluster)
    admin_of_user = AdminClient(conf())
    try:
        new = f"p{tag}-new"
        with pytest.raises(KafkaException) as ei:
            admin_of_user.create_topics([NewTopic(new, 1)])[new].result(10)
        assert ei.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        grant(admin, binding(ResourceType.TOPIC, f"p{tag}-", user, AclOperation.CREATE,
                             pattern=ResourcePatternType.PREFIXED))
        assert admin_of_user.create_topics([NewTopic(new, 1)])[new].result(10) is None
        assert new in secured.topics()
    finally:
        admin_of_user.close()


def test_a_super_user_needs_no_acl(secured, admin):
    topic = f"su-{uuid.uuid4().hex[:6]}"
    assert admin.create_topics([NewTopic(topic, 1)])[topic].result(10) is None
    conf = lambda **extra: sasl_conf(secured, *ADMIN, **extra)   # noqa: E731
    assert produce(conf, topic, 2, **{"enable.idempotence": True}) == [None, None]
    assert consume_assigned(conf, topic, 2)[0] == [b"m0", b"m1"]


def test_metadata_and_authorized_operations_follow_the_acls(secured, admin, principal):
    user, conf = principal
    tag = uuid.uuid4().hex[:6]
    seen, hidden = f"m{tag}-seen", f"m{tag}-hidden"
    for t in (seen, hidden):
        secured.create_topic(t, partitions=1)
    # READ implies DESCRIBE
    grant(admin, binding(ResourceType.TOPIC, seen, user, AclOperation.READ))
    user_admin = AdminClient(conf())
    try:
        listed = set(user_admin.list_topics(timeout=10).topics)
        assert seen in listed and hidden not in listed
        assert hidden in admin.list_topics(timeout=10).topics
        described = user_admin.describe_topics(
            TopicCollection([seen]), include_authorized_operations=True)[seen].result(10)
        assert sorted(op.name for op in described.authorized_operations) == \
            ["DESCRIBE", "READ"]
        with pytest.raises(KafkaException) as ei:
            user_admin.describe_topics(TopicCollection([hidden]))[hidden].result(10)
        assert ei.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        cluster = user_admin.describe_cluster(include_authorized_operations=True).result(10)
        assert not cluster.authorized_operations
        # the ACL APIs take ALTER / DESCRIBE on the cluster
        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                               AclOperation.ANY, AclPermissionType.ANY)
        with pytest.raises(KafkaException) as ei:
            user_admin.describe_acls(flt).result(10)
        assert ei.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        grant(admin, binding(ResourceType.BROKER, "kafka-cluster", user,
                             AclOperation.DESCRIBE))
        assert len(user_admin.describe_acls(flt).result(10)) >= 2
        cluster = user_admin.describe_cluster(include_authorized_operations=True).result(10)
        assert [op.name for op in cluster.authorized_operations] == ["DESCRIBE"]
    finally:
        user_admin.close()


def test_transactional_and_idempotent_producers_need_their_acls(secured, admin, principal):
    user, conf = principal
    topic, txn = f"tx-{uuid.uuid4().hex[:6]}", f"txn-{uuid.uuid4().hex[:6]}"
    secured.create_topic(topic, partitions=1)
    # Refused (FindCoordinator needs DESCRIBE on the transactional id): fatal at once in
    # both clients (ours retried FindCoordinator until init_transactions() timed out).
    for cls in (confluent_kafka.Producer, Producer):
        refused = cls(conf(**{"transactional.id": txn}))
        started = time.monotonic()
        with pytest.raises((confluent_kafka.KafkaException, KafkaException)) as ei:
            refused.init_transactions(10)
        assert time.monotonic() - started < 5, cls
        assert ei.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert ei.value.args[0].fatal(), cls
        with pytest.raises((confluent_kafka.KafkaException, KafkaException)):
            refused.begin_transaction()
        # The fatal error event, raised once by the call that serves it, as there.
        with pytest.raises((confluent_kafka.KafkaException, KafkaException)) as ei:
            refused.poll(0)
        assert ei.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if cls is Producer:
            refused.close()
    grant(admin, binding(ResourceType.TRANSACTIONAL_ID, txn, user, AclOperation.WRITE),
          binding(ResourceType.TOPIC, topic, user, AclOperation.WRITE))
    producer = Producer(conf(**{"transactional.id": txn}))
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, b"in-txn")
    producer.commit_transaction(10)
    grant(admin, binding(ResourceType.TOPIC, topic, user, AclOperation.READ))
    assert consume_assigned(conf, topic, 1)[0] == [b"in-txn"]
    # idempotence: WRITE on some topic is enough (KIP-679)
    assert produce(conf, topic, 1, **{"enable.idempotence": True}) == [None]


# --------------------------------------------------------------------------- on the wire


@pytest.fixture
def locked(tmp_path):
    """Authorizer on, no super user, auto-creation on: a raw client is User:ANONYMOUS and
    may do what the ACLs the test creates (through the control channel) allow."""
    with Cluster(brokers=1, data_dir=str(tmp_path / "c"), authorizer=True) as cluster:
        yield cluster


@pytest.fixture
def tag():
    return f"w{uuid.uuid4().hex[:8]}"


def allow(cluster, res, name, op, pattern="LITERAL", perm="ALLOW"):
    cluster.create_acl(res, name, "User:ANONYMOUS", op, perm, pattern)


def test_metadata_shows_and_creates_only_what_the_acls_allow(locked, tag):
    seen, hidden = f"{tag}-seen", f"{tag}-hidden"
    for t in (seen, hidden):
        locked.create_topic(t)
    allow(locked, "TOPIC", seen, "DESCRIBE")
    with RawClient(locked.bootstrap_servers) as raw:
        every = raw.request(MetadataRequest(topics=None), 12)
        assert seen in {t.name for t in every.topics}
        assert hidden not in {t.name for t in every.topics}
        named = raw.request(MetadataRequest(topics=[
            MetadataRequest.MetadataRequestTopic(name=n)
            for n in (seen, hidden, f"{tag}-absent")], allow_auto_topic_creation=True,
            include_topic_authorized_operations=True), 12)
        by_name = {t.name: t for t in named.topics}
        assert by_name[seen].error_code == ErrorCode.NONE
        assert by_name[seen].topic_authorized_operations == 1 << Op.DESCRIBE
        # refused whether it exists or not: nothing leaks, nothing is created
        assert by_name[hidden].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert by_name[f"{tag}-absent"].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        # describable but not creatable: not auto-created either
        allow(locked, "TOPIC", f"{tag}-auto", "DESCRIBE", "PREFIXED")
        first = raw.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name=f"{tag}-auto1")], allow_auto_topic_creation=True), 12)
        assert first.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        allow(locked, "TOPIC", f"{tag}-auto", "CREATE", "PREFIXED")
        second = raw.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name=f"{tag}-auto1")], allow_auto_topic_creation=True), 12)
        assert second.topics[0].error_code in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)
    assert f"{tag}-auto1" in locked.topics()


def test_config_topic_and_group_admin_apis_are_refused_without_their_acls(locked, tag):
    topic, group = f"{tag}-t", f"{tag}-g"
    locked.create_topic(topic)
    with RawClient(locked.bootstrap_servers) as raw:
        def describe_config():
            return raw.request(DescribeConfigsRequest(resources=[
                DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=2, resource_name=topic, configuration_keys=None)]), 4)

        assert describe_config().results[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        allow(locked, "TOPIC", topic, "ALTER_CONFIGS")     # implies DESCRIBE_CONFIGS
        assert describe_config().results[0].error_code == ErrorCode.NONE
        deleted = raw.request(DeleteTopicsRequest(topics=[
            DeleteTopicsRequest.DeleteTopicState(name=topic)], timeout_ms=5000), 6)
        assert deleted.responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert topic in locked.topics()
        assert raw.request(ListGroupsRequest(), 4).error_code == ErrorCode.NONE
        gone = raw.request(DeleteGroupsRequest(groups_names=[group]), 2)
        assert gone.results[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        found = raw.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
        assert found.coordinators[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        elected = raw.request(ElectLeadersRequest(election_type=0, topic_partitions=None,
                                                  timeout_ms=5000), 2)
        assert elected.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_kip848_heartbeat_needs_the_group_and_its_topics(locked, tag):
    topic, group = f"{tag}-t", f"{tag}-g"
    locked.create_topic(topic)

    def heartbeat(raw):
        return raw.request(ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=uuid.uuid4().hex, member_epoch=0,
            rebalance_timeout_ms=5000, subscribed_topic_names=[topic], topic_partitions=[]),
            0)

    with RawClient(locked.bootstrap_servers) as raw:
        assert heartbeat(raw).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        allow(locked, "GROUP", group, "READ")
        assert heartbeat(raw).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        allow(locked, "TOPIC", topic, "DESCRIBE")
        joined = heartbeat(raw)
        assert joined.error_code == ErrorCode.NONE and joined.member_epoch > 0


def test_offsets_and_group_listing_follow_the_acls(locked, tag):
    readable, other, group = f"{tag}-r", f"{tag}-o", f"{tag}-g"
    for t in (readable, other):
        locked.create_topic(t)
    C = OffsetCommitRequest

    def commit(raw):
        resp = raw.request(C(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                             topics=[C.OffsetCommitRequestTopic(name=t, partitions=[
                                 C.OffsetCommitRequestPartition(partition_index=0,
                                                                committed_offset=7)])
                                     for t in (readable, other)]), 9)
        return {t.name: t.partitions[0].error_code for t in resp.topics}

    def fetch_all(raw):
        resp = raw.request(OffsetFetchRequest(groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None)]), 9)
        g = resp.groups[0]
        return g.error_code, {t.name: t.partitions[0].committed_offset for t in g.topics}

    def listed(raw):
        return {g.group_id for g in raw.request(ListGroupsRequest(), 4).groups}

    with RawClient(locked.bootstrap_servers) as raw:
        assert commit(raw) == {readable: ErrorCode.GROUP_AUTHORIZATION_FAILED,
                               other: ErrorCode.GROUP_AUTHORIZATION_FAILED}
        allow(locked, "GROUP", group, "READ")
        allow(locked, "TOPIC", readable, "READ")
        assert commit(raw) == {readable: ErrorCode.NONE,
                               other: ErrorCode.TOPIC_AUTHORIZATION_FAILED}
        # READ on the group implies DESCRIBE: listed, and its offsets fetched; only the
        # describable topics' offsets are shown
        assert group in listed(raw)
        assert fetch_all(raw) == (ErrorCode.NONE, {readable: 7})
        allow(locked, "GROUP", group, "DESCRIBE", perm="DENY")
        assert group not in listed(raw)
        assert fetch_all(raw) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, {})
        # DESCRIBE on the cluster lists every group, whatever the group's ACLs
        allow(locked, "CLUSTER", "kafka-cluster", "DESCRIBE")
        assert group in listed(raw)


def test_the_command_line_switches_the_authorizer_on(tmp_path):
    """``--authorizer --super-user User:ANONYMOUS``: the ACL APIs are served (a plain
    cluster answers SECURITY_DISABLED) and a principal not named is refused."""
    proc, printed = start_cli_cluster(["--brokers", "1", "--authorizer", "--super-user",
                                       "User:ANONYMOUS", "--control-port", "0",
                                       "--data-dir", str(tmp_path / "data")])
    try:
        with RawClient(printed["bootstrap.servers"]) as raw:
            resp = raw.request(CreateAclsRequest(creations=[creation(principal="User:x")]), 3)
            assert [r.error_code for r in resp.results] == [ErrorCode.NONE]
        attached = Cluster.attach(printed["control"])
        try:
            assert [a["principal"] for a in attached.acls()] == ["User:x"]
        finally:
            attached.stop()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    bad = subprocess.run([sys.executable, "-m", "kafka_client.testing", "--brokers", "1",
                          "--authorizer", "--super-user", "admin"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": ROOT})
    assert bad.returncode == 1 and "super_users: 'admin'" in bad.stderr


def test_replica_fetches_transactional_batches_and_topic_ids_are_checked(locked, tag):
    """A Fetch or OffsetForLeaderEpoch naming a replica needs CLUSTER_ACTION; a Produce
    of transactional batches WRITE on its transactional id, whatever the request says;
    a DeleteTopics by id DESCRIBE before DELETE (the name is not given away)."""
    topic = f"{tag}-t"
    info = locked.create_topic(topic)
    allow(locked, "TOPIC", topic, "WRITE")

    def produce(raw, transactional, transactional_id):
        b = RecordBatchBuilder(producer_id=1 if transactional else -1, producer_epoch=0,
                               base_sequence=0 if transactional else -1,
                               transactional=transactional)
        b.append(b"v", key=None, timestamp=int(time.time() * 1000))
        resp = raw.request(ProduceRequest(acks=1, timeout_ms=5000,
                                          transactional_id=transactional_id, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=b.build())])]), 9)
        return resp.responses[0].partition_responses[0].error_code

    def fetch(raw, replica_id):
        resp = raw.request(FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=1,
                                        max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
                                            topic=topic, partitions=[
                                                FetchRequest.FetchPartition(
                                                    partition=0, fetch_offset=0,
                                                    partition_max_bytes=1 << 20)])]), 12)
        return resp.responses[0].partitions[0].error_code

    def epochs(raw, replica_id):
        R = OffsetForLeaderEpochRequest
        resp = raw.request(R(replica_id=replica_id, topics=[R.OffsetForLeaderTopic(
            topic=topic, partitions=[R.OffsetForLeaderPartition(
                partition=0, current_leader_epoch=-1, leader_epoch=0)])]), 4)
        return resp.topics[0].partitions[0].error_code

    with RawClient(locked.bootstrap_servers) as raw:
        assert produce(raw, True, None) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert produce(raw, True, "txn") == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert produce(raw, False, "txn") == ErrorCode.NONE   # not a transactional batch
        assert locked.describe_topic(topic).partitions[0].high_watermark == 1
        # WRITE implies DESCRIBE, not READ
        assert fetch(raw, -1) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert epochs(raw, -1) == ErrorCode.NONE
        assert fetch(raw, 7) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        allow(locked, "TOPIC", topic, "DESCRIBE", perm="DENY")
        assert epochs(raw, 2) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        allow(locked, "CLUSTER", "kafka-cluster", "CLUSTER_ACTION")
        assert epochs(raw, 2) == ErrorCode.NONE
        assert fetch(raw, 7) == ErrorCode.NONE

        deleted = raw.request(DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(
            name=None, topic_id=uuid.UUID(info.topic_id))], timeout_ms=5000), 6)
        result = deleted.responses[0]
        assert (result.error_code, result.name) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
    assert topic in locked.topics()


def test_offset_for_leader_epoch_checks_each_topic_of_one_request(locked, tag):
    """OffsetForLeaderEpoch decides DESCRIBE per topic, CLUSTER_ACTION once per request:
    a topic's answer does not follow from the one named before it in the same request."""
    seen, hidden = f"{tag}-seen", f"{tag}-hidden"
    for t in (seen, hidden):
        locked.create_topic(t)
    allow(locked, "TOPIC", seen, "DESCRIBE")
    R = OffsetForLeaderEpochRequest

    def epochs(raw, replica_id, named):
        resp = raw.request(R(replica_id=replica_id, topics=[R.OffsetForLeaderTopic(
            topic=topic, partitions=[R.OffsetForLeaderPartition(
                partition=partition, current_leader_epoch=-1, leader_epoch=0)])
            for topic, partition in named]), 4)
        return [(t.topic, p.partition, p.error_code, p.end_offset)
                for t in resp.topics for p in t.partitions]

    with RawClient(locked.bootstrap_servers) as raw:
        # The topic described first leaves the next one as refused as it is alone.
        assert epochs(raw, -1, [(seen, 0), (hidden, 0)]) == [
            (seen, 0, ErrorCode.NONE, 0),
            (hidden, 0, ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)]
        assert epochs(raw, -1, [(hidden, 0), (seen, 0)]) == [
            (hidden, 0, ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1),
            (seen, 0, ErrorCode.NONE, 0)]
        # A replica with CLUSTER_ACTION and no DESCRIBE: a partition that does not exist
        # first does not take the permission away from the topics after it.
        allow(locked, "TOPIC", seen, "DESCRIBE", perm="DENY")
        allow(locked, "CLUSTER", "kafka-cluster", "CLUSTER_ACTION")
        assert epochs(raw, 2, [(seen, 9), (hidden, 0), (seen, 0)]) == [
            (seen, 9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            (hidden, 0, ErrorCode.NONE, 0),
            (seen, 0, ErrorCode.NONE, 0)]


def test_described_groups_carry_the_operations_the_acls_allow(locked, tag):
    """KIP-430 in DescribeGroups and ConsumerGroupDescribe; a group the principal may not
    describe is refused in both."""
    mine, other = f"{tag}-mine", f"{tag}-other"
    allow(locked, "GROUP", mine, "READ")
    allow(locked, "GROUP", mine, "DELETE")
    with RawClient(locked.bootstrap_servers) as raw:
        described = raw.request(DescribeGroupsRequest(
            groups=[mine, other], include_authorized_operations=True), 5).groups
        assert [g.error_code for g in described] == [ErrorCode.NONE,
                                                     ErrorCode.GROUP_AUTHORIZATION_FAILED]
        assert described[0].authorized_operations == \
            (1 << Op.READ) | (1 << Op.DESCRIBE) | (1 << Op.DELETE)
        kip848 = raw.request(ConsumerGroupDescribeRequest(
            group_ids=[other], include_authorized_operations=True), 0).groups
        assert [g.error_code for g in kip848] == [ErrorCode.GROUP_AUTHORIZATION_FAILED]
