"""The admin client's ACL calls end to end on the test cluster's authorizer
(``Cluster(authorizer=True)``), each checked through confluent-kafka's AdminClient on the
same cluster: what one client creates the other describes and deletes, with filters of
every kind (resource type, LITERAL/PREFIXED/ANY/MATCH patterns, the ``*`` wildcard,
principal, host, operation, permission). Tansu and noida-db have no authorizer: their side
is test_admin.py's "acl calls fail with the broker's error"."""
from __future__ import annotations

import uuid

import pytest

from kafka_client.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka_client.errors import KafkaError, KafkaException

ck = pytest.importorskip("confluent_kafka")
ck_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.integration

#: A refused call must fail within this (the request timeout is 60 s).
PROMPT = 5.0

Pat, Op, Perm = ResourcePatternType, AclOperation, AclPermissionType


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory):
    """One broker with the authorizer on; clients without SASL are User:ANONYMOUS, a
    super user here, so both admin clients may manage ACLs."""
    from kafka_client.testing import Cluster

    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("acls") / "cluster"),
                 authorizer=True, super_users=("User:ANONYMOUS",)) as cluster:
        yield cluster


@pytest.fixture
def admin(acl_cluster):
    a = AdminClient({"bootstrap.servers": acl_cluster.bootstrap_servers})
    yield a
    a.close()


@pytest.fixture
def peer(acl_cluster):
    return ck_admin.AdminClient({"bootstrap.servers": acl_cluster.bootstrap_servers})


@pytest.fixture
def user():
    """A principal of this test's own: every binding a test makes names it, so filters
    on it see only that test's ACLs."""
    return f"User:u{uuid.uuid4().hex[:10]}"


def as_tuple(binding):
    """A binding of either client as comparable plain values."""
    return (binding.restype.name if binding.restype.name != "BROKER" else "CLUSTER",
            binding.name, binding.resource_pattern_type.name, binding.principal,
            binding.host, binding.operation.name, binding.permission_type.name)


def to_peer(b):
    """The same binding (or filter) as confluent-kafka's type."""
    cls = ck_admin.AclBindingFilter if isinstance(b, AclBindingFilter) else ck_admin.AclBinding
    return cls(ck_admin.ResourceType[b.restype.name], b.name,
               ck_admin.ResourcePatternType[b.resource_pattern_type.name], b.principal, b.host,
               ck_admin.AclOperation[b.operation.name],
               ck_admin.AclPermissionType[b.permission_type.name])


def bindings_of(user, tag):
    """A set of bindings for ``user`` over resources named after ``tag``, one of each
    kind the filters below tell apart."""
    return [
        AclBinding(ResourceType.TOPIC, f"{tag}-orders", Pat.LITERAL, user, "*", Op.READ,
                   Perm.ALLOW),
        AclBinding(ResourceType.TOPIC, f"{tag}-ord", Pat.PREFIXED, user, "*", Op.WRITE,
                   Perm.ALLOW),
        AclBinding(ResourceType.TOPIC, "*", Pat.LITERAL, user, "10.0.0.1", Op.DESCRIBE,
                   Perm.ALLOW),
        AclBinding(ResourceType.TOPIC, f"{tag}-other", Pat.LITERAL, user, "*", Op.ALL,
                   Perm.DENY),
        AclBinding(ResourceType.GROUP, f"{tag}-orders", Pat.LITERAL, user, "*", Op.READ,
                   Perm.ALLOW),
        AclBinding(ResourceType.BROKER, "kafka-cluster", Pat.LITERAL, user, "*",
                   Op.IDEMPOTENT_WRITE, Perm.ALLOW),
        AclBinding(ResourceType.TRANSACTIONAL_ID, f"{tag}-tx", Pat.PREFIXED, user, "*",
                   Op.WRITE, Perm.ALLOW),
    ]


def filters_and_expected(user, tag, made):
    """``(filter, the bindings of ``made`` it must find)`` for filters of every kind."""
    topic_lit, topic_pre, wildcard, deny, group, cluster, txn = made
    ANY_T, ANY_P = ResourceType.ANY, Pat.ANY
    return [
        (AclBindingFilter(ANY_T, None, ANY_P, user, None, Op.ANY, Perm.ANY), made),
        (AclBindingFilter(ResourceType.TOPIC, None, ANY_P, user, None, Op.ANY, Perm.ANY),
         [topic_lit, topic_pre, wildcard, deny]),
        # LITERAL: the literal binding of exactly that name (not the wildcard)
        (AclBindingFilter(ResourceType.TOPIC, f"{tag}-orders", Pat.LITERAL, user, None,
                          Op.ANY, Perm.ANY), [topic_lit]),
        (AclBindingFilter(ResourceType.TOPIC, "*", Pat.LITERAL, user, None, Op.ANY,
                          Perm.ANY), [wildcard]),
        (AclBindingFilter(ANY_T, None, Pat.PREFIXED, user, None, Op.ANY, Perm.ANY),
         [topic_pre, txn]),
        # ANY with a name: any pattern type, the name itself
        (AclBindingFilter(ANY_T, f"{tag}-orders", ANY_P, user, None, Op.ANY, Perm.ANY),
         [topic_lit, group]),
        # MATCH: every binding that applies to the name: literal, wildcard, prefix
        (AclBindingFilter(ResourceType.TOPIC, f"{tag}-orders", Pat.MATCH, user, None,
                          Op.ANY, Perm.ANY), [topic_lit, topic_pre, wildcard]),
        (AclBindingFilter(ResourceType.TOPIC, f"{tag}-other", Pat.MATCH, user, None,
                          Op.ANY, Perm.ANY), [wildcard, deny]),
        (AclBindingFilter(ANY_T, None, ANY_P, user, "10.0.0.1", Op.ANY, Perm.ANY),
         [wildcard]),
        (AclBindingFilter(ANY_T, None, ANY_P, user, None, Op.WRITE, Perm.ANY),
         [topic_pre, txn]),
        (AclBindingFilter(ANY_T, None, ANY_P, user, None, Op.ANY, Perm.DENY), [deny]),
        (AclBindingFilter(ResourceType.BROKER, "kafka-cluster", Pat.MATCH, user, None,
                          Op.ANY, Perm.ALLOW), [cluster]),
        (AclBindingFilter(ResourceType.TRANSACTIONAL_ID, f"{tag}-tx-1", Pat.MATCH, user,
                          None, Op.ANY, Perm.ANY), [txn]),
        (AclBindingFilter(ResourceType.GROUP, None, ANY_P, "User:nobody", None, Op.ANY,
                          Perm.ANY), []),
    ]


def test_bindings_created_by_us_are_what_confluent_kafka_describes(admin, peer, user):
    tag = uuid.uuid4().hex[:8]
    made = bindings_of(user, tag)
    futures = admin.create_acls(made)
    assert [futures[b].result(10) for b in made] == [None] * len(made)
    for flt, expected in filters_and_expected(user, tag, made):
        want = sorted(as_tuple(b) for b in expected)
        theirs = sorted(as_tuple(b) for b in peer.describe_acls(to_peer(flt)).result(10))
        ours = sorted(as_tuple(b) for b in admin.describe_acls(flt).result(10))
        assert theirs == want, flt
        assert ours == want, flt


def test_bindings_created_by_confluent_kafka_are_described_and_deleted_by_us(
        admin, peer, user):
    tag = uuid.uuid4().hex[:8]
    made = bindings_of(user, tag)
    futures = peer.create_acls([to_peer(b) for b in made])
    for f in futures.values():
        assert f.result(10) is None
    everything = AclBindingFilter(ResourceType.ANY, None, Pat.ANY, user, None, Op.ANY,
                                  Perm.ANY)
    assert sorted(map(as_tuple, admin.describe_acls(everything).result(10))) == \
        sorted(map(as_tuple, made))
    # MATCH deletes what applies to the name: the literal, prefixed and wildcard ones
    match = AclBindingFilter(ResourceType.TOPIC, f"{tag}-orders", Pat.MATCH, user, None,
                             Op.ANY, Perm.ANY)
    deny = AclBindingFilter(ResourceType.ANY, None, Pat.ANY, user, None, Op.ANY, Perm.DENY)
    deleted = admin.delete_acls([match, deny])
    topic_lit, topic_pre, wildcard, deny_binding = made[:4]
    assert sorted(map(as_tuple, deleted[match].result(10))) == \
        sorted(map(as_tuple, [topic_lit, topic_pre, wildcard]))
    assert list(map(as_tuple, deleted[deny].result(10))) == [as_tuple(deny_binding)]
    left = peer.describe_acls(to_peer(everything)).result(10)
    assert sorted(map(as_tuple, left)) == sorted(map(as_tuple, made[4:]))
    # and what confluent-kafka deletes is gone for us
    gone = peer.delete_acls([to_peer(everything)])
    assert sorted(map(as_tuple, list(gone.values())[0].result(10))) == \
        sorted(map(as_tuple, made[4:]))
    assert admin.describe_acls(everything).result(10) == []


def test_a_binding_created_twice_is_stored_once(admin, peer, user):
    binding = AclBinding(ResourceType.GROUP, "twice", Pat.LITERAL, user, "*", Op.READ,
                         Perm.ALLOW)
    assert admin.create_acls([binding])[binding].result(10) is None
    assert admin.create_acls([binding])[binding].result(10) is None
    assert list(peer.create_acls([to_peer(binding)]).values())[0].result(10) is None
    flt = AclBindingFilter(ResourceType.ANY, None, Pat.ANY, user, None, Op.ANY, Perm.ANY)
    assert list(map(as_tuple, peer.describe_acls(to_peer(flt)).result(10))) == \
        [as_tuple(binding)]
    assert len(admin.delete_acls([flt])[flt].result(10)) == 1


def test_each_creation_gets_its_own_error(admin, peer, user):
    """Kafka refuses a binding it cannot store with INVALID_REQUEST, the others of the
    same request are created."""
    good = AclBinding(ResourceType.TOPIC, "fine", Pat.LITERAL, user, "*", Op.READ,
                      Perm.ALLOW)
    no_type = AclBinding(ResourceType.TOPIC, "fine", Pat.LITERAL, user.split(":")[1], "*",
                         Op.READ, Perm.ALLOW)
    bad_cluster = AclBinding(ResourceType.BROKER, "my-cluster", Pat.LITERAL, user, "*",
                             Op.ALTER, Perm.ALLOW)
    futures = admin.create_acls([good, no_type, bad_cluster])
    assert futures[good].result(10) is None
    for bad, words in ((no_type, "Could not parse principal"),
                       (bad_cluster, "The only valid name for the CLUSTER resource")):
        with pytest.raises(KafkaException) as ei:
            futures[bad].result(10)
        assert ei.value.args[0].code() == KafkaError.INVALID_REQUEST
        assert words in ei.value.args[0].str()
    theirs = peer.create_acls([to_peer(bad_cluster)])
    with pytest.raises(ck.KafkaException) as ei:
        list(theirs.values())[0].result(10)
    assert ei.value.args[0].code() == KafkaError.INVALID_REQUEST
    flt = AclBindingFilter(ResourceType.ANY, None, Pat.ANY, user, None, Op.ANY, Perm.ANY)
    assert list(map(as_tuple, admin.describe_acls(flt).result(10))) == [as_tuple(good)]


def test_without_an_authorizer_the_acl_calls_fail_with_security_disabled(tmp_path):
    """As a Kafka broker without authorizer.class.name: every ACL call answers
    SECURITY_DISABLED."""
    from kafka_client.testing import Cluster

    with Cluster(brokers=1, data_dir=str(tmp_path / "cluster")) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        try:
            binding = AclBinding(ResourceType.TOPIC, "t", Pat.LITERAL, "User:a", "*",
                                 Op.READ, Perm.ALLOW)
            flt = AclBindingFilter(ResourceType.ANY, None, Pat.ANY, None, None, Op.ANY,
                                   Perm.ANY)
            for future in (admin.create_acls([binding])[binding], admin.describe_acls(flt),
                           admin.delete_acls([flt])[flt]):
                with pytest.raises(KafkaException) as ei:
                    future.result(10)
                assert ei.value.args[0].code() == KafkaError.SECURITY_DISABLED
        finally:
            admin.close()


# --------------------------------------------------------------------------- refusals


@pytest.fixture(scope="module")
def refusing_cluster(tmp_path_factory):
    """SASL PLAIN, the authorizer on, a topic ``t`` and no ACL for ``alice``."""
    from kafka_client.testing import Cluster

    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("refusals") / "cluster"),
                 authorizer=True, broker_config={"sasl.enabled.mechanisms": "PLAIN"},
                 users={"alice": "alice-secret"}) as cluster:
        cluster.create_topic("t")
        yield cluster


def _alice(cluster):
    return {"bootstrap.servers": cluster.bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": "alice-secret"}


def _refusal_calls():
    """(name, our call, confluent-kafka's call, the error both report)."""
    from kafka_client import ConsumerGroupTopicPartitions, TopicCollection, TopicPartition
    from kafka_client.admin import ConfigResource, NewPartitions, NewTopic

    return [
        ("create_topics", lambda a: a.create_topics([NewTopic("n", 1)]),
         lambda p: p.create_topics([ck_admin.NewTopic("n", 1)]), "TOPIC_AUTHORIZATION_FAILED"),
        ("delete_topics", lambda a: a.delete_topics(["t"]),
         lambda p: p.delete_topics(["t"]), "TOPIC_AUTHORIZATION_FAILED"),
        ("create_partitions", lambda a: a.create_partitions([NewPartitions("t", 3)]),
         lambda p: p.create_partitions([ck_admin.NewPartitions("t", 3)]),
         "TOPIC_AUTHORIZATION_FAILED"),
        ("describe_configs",
         lambda a: a.describe_configs([ConfigResource(ResourceType.TOPIC, "t")]),
         lambda p: p.describe_configs([ck_admin.ConfigResource(ck_admin.ResourceType.TOPIC,
                                                               "t")]),
         "TOPIC_AUTHORIZATION_FAILED"),
        ("describe_topics", lambda a: a.describe_topics(TopicCollection(["t"])),
         lambda p: p.describe_topics(ck.TopicCollection(["t"])), "TOPIC_AUTHORIZATION_FAILED"),
        ("describe_consumer_groups", lambda a: a.describe_consumer_groups(["g"]),
         lambda p: p.describe_consumer_groups(["g"]), "GROUP_AUTHORIZATION_FAILED"),
        ("delete_consumer_groups", lambda a: a.delete_consumer_groups(["g"]),
         lambda p: p.delete_consumer_groups(["g"]), "GROUP_AUTHORIZATION_FAILED"),
        ("list_consumer_group_offsets",
         lambda a: a.list_consumer_group_offsets([ConsumerGroupTopicPartitions("g")]),
         lambda p: p.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions("g")]),
         "GROUP_AUTHORIZATION_FAILED"),
        # confluent-kafka reports _NOENT here: its metadata lookup found no leader
        ("delete_records", lambda a: a.delete_records([TopicPartition("t", 0, 0)]),
         None, "TOPIC_AUTHORIZATION_FAILED"),
    ]


@pytest.mark.parametrize("index", range(9), ids=lambda i: _refusal_calls()[i][0])
def test_admin_calls_refused_by_the_acls_fail_promptly_with_the_brokers_error(
        refusing_cluster, index):
    """What a managed cluster's ACLs do to an admin client: the call fails at once with
    the authorization error, as confluent-kafka's."""
    _name, ours, theirs, expected = _refusal_calls()[index]
    admin = AdminClient(_alice(refusing_cluster))
    try:
        futures = ours(admin)
        future = next(iter(futures.values())) if isinstance(futures, dict) else futures
        with pytest.raises(KafkaException) as ei:
            future.result(PROMPT)
        assert ei.value.args[0].name() == expected
    finally:
        admin.close()
    if theirs is not None:
        peer = ck_admin.AdminClient(_alice(refusing_cluster))   # kept: its futures die with it
        futures = theirs(peer)
        future = next(iter(futures.values())) if isinstance(futures, dict) else futures
        with pytest.raises(ck.KafkaException) as ei:
            future.result(PROMPT)
        assert ei.value.args[0].name() == expected
    assert refusing_cluster.topics() == ["t"]
    assert len(refusing_cluster.describe_topic("t").partitions) == 1
