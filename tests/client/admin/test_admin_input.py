"""Bad input to the admin client: the same exception type as confluent-kafka's at call
time, and the errors that come back through the futures at once, without a broker."""
from __future__ import annotations

import time
import warnings

import pytest

import kafka_client
import kafka_client.admin as ours
from kafka_client.errors import KafkaError, KafkaException

ck = pytest.importorskip("confluent_kafka")
theirs = pytest.importorskip("confluent_kafka.admin")

NOWHERE = "127.0.0.1:1"   # nothing listens: requests never leave


@pytest.fixture(scope="module")
def clients():
    a = ours.AdminClient({"bootstrap.servers": NOWHERE})
    b = theirs.AdminClient({"bootstrap.servers": NOWHERE, "log_level": 0})
    yield a, b
    a.close()


def calls(m, top):
    """(label, call) pairs: ``m`` is the admin module, ``top`` the top-level package."""
    TP, CGTP = top.TopicPartition, top.ConsumerGroupTopicPartitions
    binding = m.AclBinding(m.ResourceType.TOPIC, "t", m.ResourcePatternType.LITERAL,
                           "User:a", "*", m.AclOperation.READ, m.AclPermissionType.ALLOW)
    flt = m.AclBindingFilter(m.ResourceType.ANY, None, m.ResourcePatternType.ANY, None, None,
                             m.AclOperation.ANY, m.AclPermissionType.ANY)
    info = m.ScramCredentialInfo(m.ScramMechanism.SCRAM_SHA_256, 4096)
    upsert = m.UserScramCredentialUpsertion("u", info, b"pw")
    return [
        ("create_topics empty", lambda a: a.create_topics([])),
        ("create_topics negative partitions", lambda a: a.create_topics([m.NewTopic("t", -5)])),
        ("create_topics too many partitions",
         lambda a: a.create_topics([m.NewTopic("t", 100001)])),
        ("create_topics negative replication",
         lambda a: a.create_topics([m.NewTopic("t", 1, -2)])),
        ("create_topics assignment and replication",
         lambda a: a.create_topics([m.NewTopic("t", -1, 1, replica_assignment=[[1]])])),
        ("create_topics assignment size",
         lambda a: a.create_topics([m.NewTopic("t", 3, replica_assignment=[[1], [2]])])),
        ("create_topics unknown keyword",
         lambda a: a.create_topics([m.NewTopic("t", 1)], foo=1)),
        ("create_topics negative request timeout",
         lambda a: a.create_topics([m.NewTopic("t", 1)], request_timeout=-5)),
        ("create_topics huge operation timeout",
         lambda a: a.create_topics([m.NewTopic("t", 1)], operation_timeout=1e9)),
        ("create_topics string timeout",
         lambda a: a.create_topics([m.NewTopic("t", 1)], request_timeout="1")),
        ("create_topics validate_only not bool",
         lambda a: a.create_topics([m.NewTopic("t", 1)], validate_only="yes")),
        ("NewTopic no name", lambda a: m.NewTopic(None, 1)),
        ("NewTopic int name", lambda a: m.NewTopic(5, 1)),
        ("NewTopic str partitions", lambda a: m.NewTopic("t", "3")),
        ("NewPartitions str count", lambda a: m.NewPartitions("t", "3")),
        ("delete_topics empty", lambda a: a.delete_topics([])),
        ("delete_topics str", lambda a: a.delete_topics("t")),
        ("delete_topics None name", lambda a: a.delete_topics([None])),
        ("create_partitions empty", lambda a: a.create_partitions([])),
        ("create_partitions negative", lambda a: a.create_partitions([m.NewPartitions("t", -1)])),
        ("create_partitions zero", lambda a: a.create_partitions([m.NewPartitions("t", 0)])),
        ("describe_configs empty", lambda a: a.describe_configs([])),
        ("describe_configs not resources", lambda a: a.describe_configs(["t"])),
        ("describe_configs empty name",
         lambda a: a.describe_configs([m.ConfigResource("topic", "")])),
        ("describe_configs bad keyword",
         lambda a: a.describe_configs([m.ConfigResource("topic", "t")], validate_only=True)),
        ("ConfigResource bad type", lambda a: m.ConfigResource("bogus", "t")),
        ("ConfigResource no name", lambda a: m.ConfigResource("topic", None)),
        ("ConfigResource bad number", lambda a: m.ConfigResource(99, "t")),
        ("alter_configs empty", lambda a: a.alter_configs([])),
        ("incremental empty", lambda a: a.incremental_alter_configs([])),
        ("incremental no entries",
         lambda a: a.incremental_alter_configs([m.ConfigResource("topic", "t")])),
        ("incremental no operation", lambda a: a.incremental_alter_configs(
            [m.ConfigResource("topic", "t", incremental_configs=[m.ConfigEntry("x", "1")])])),
        ("incremental None value", lambda a: a.incremental_alter_configs(
            [m.ConfigResource("topic", "t", incremental_configs=[m.ConfigEntry(
                "x", None, incremental_operation=m.AlterConfigOpType.SET)])])),
        ("delete_records negative partition",
         lambda a: a.delete_records([TP("t", -1, 5)])),
        ("delete_records not a list", lambda a: a.delete_records(TP("t", 0, 5))),
        ("delete_records not partitions", lambda a: a.delete_records(["t"])),
        ("describe_topics list", lambda a: a.describe_topics(["t"])),
        ("describe_topics empty name", lambda a: a.describe_topics(top.TopicCollection([""]))),
        ("describe_topics None name", lambda a: a.describe_topics(top.TopicCollection([None]))),
        ("describe_topics int name", lambda a: a.describe_topics(top.TopicCollection([5]))),
        ("describe_cluster bad keyword", lambda a: a.describe_cluster(foo=1)),
        ("list_consumer_groups states list",
         lambda a: a.list_consumer_groups(states=[top.ConsumerGroupState.STABLE])),
        ("list_consumer_groups states wrong type",
         lambda a: a.list_consumer_groups(states={"STABLE"})),
        ("list_consumer_groups types list",
         lambda a: a.list_consumer_groups(types=[top.ConsumerGroupType.CLASSIC])),
        ("describe_consumer_groups empty", lambda a: a.describe_consumer_groups([])),
        ("describe_consumer_groups str", lambda a: a.describe_consumer_groups("g")),
        ("describe_consumer_groups None id", lambda a: a.describe_consumer_groups([None])),
        ("delete_consumer_groups empty", lambda a: a.delete_consumer_groups([])),
        ("list_group_offsets none", lambda a: a.list_consumer_group_offsets(None)),
        ("list_group_offsets two groups",
         lambda a: a.list_consumer_group_offsets([CGTP("a"), CGTP("b")])),
        ("list_group_offsets empty group",
         lambda a: a.list_consumer_group_offsets([CGTP("")])),
        ("list_group_offsets empty partitions",
         lambda a: a.list_consumer_group_offsets([CGTP("g", [])])),
        ("list_group_offsets with offset",
         lambda a: a.list_consumer_group_offsets([CGTP("g", [TP("t", 0, 5)])])),
        ("list_group_offsets negative partition",
         lambda a: a.list_consumer_group_offsets([CGTP("g", [TP("t", -1)])])),
        ("alter_group_offsets no partitions",
         lambda a: a.alter_consumer_group_offsets([CGTP("g")])),
        ("alter_group_offsets negative offset",
         lambda a: a.alter_consumer_group_offsets([CGTP("g", [TP("t", 0, -1)])])),
        ("alter_group_offsets not partitions",
         lambda a: a.alter_consumer_group_offsets([CGTP("g", ["t"])])),
        ("list_offsets not a dict", lambda a: a.list_offsets([TP("t", 0)])),
        ("list_offsets spec missing", lambda a: a.list_offsets({TP("t", 0): None})),
        ("list_offsets negative partition",
         lambda a: a.list_offsets({TP("t", -1): m.OffsetSpec.latest()})),
        ("list_offsets isolation int",
         lambda a: a.list_offsets({TP("t", 0): m.OffsetSpec.latest()}, isolation_level=1)),
        ("OffsetSpec unknown special", lambda a: m.OffsetSpec(-5)),
        ("create_acls empty", lambda a: a.create_acls([])),
        ("create_acls duplicates", lambda a: a.create_acls([binding, binding])),
        ("AclBinding ANY type", lambda a: m.AclBinding(
            m.ResourceType.ANY, "t", m.ResourcePatternType.LITERAL, "User:a", "*",
            m.AclOperation.READ, m.AclPermissionType.ALLOW)),
        ("AclBinding no name", lambda a: m.AclBinding(
            m.ResourceType.TOPIC, None, m.ResourcePatternType.LITERAL, "User:a", "*",
            m.AclOperation.READ, m.AclPermissionType.ALLOW)),
        ("AclBinding bad name", lambda a: m.AclBinding(
            "topix", "t", "literal", "User:a", "*", "read", "allow")),
        ("AclBinding float type", lambda a: m.AclBinding(
            2.0, "t", "literal", "User:a", "*", "read", "allow")),
        ("AclBinding int principal", lambda a: m.AclBinding(
            "topic", "t", "literal", 5, "*", "read", "allow")),
        ("AclBindingFilter UNKNOWN op", lambda a: m.AclBindingFilter(
            "any", None, "any", None, None, "unknown", "any")),
        ("describe_acls binding", lambda a: a.describe_acls(binding)),
        ("describe_acls list", lambda a: a.describe_acls([flt])),
        ("delete_acls empty", lambda a: a.delete_acls([])),
        ("delete_acls binding", lambda a: a.delete_acls([binding])),
        ("delete_acls duplicates", lambda a: a.delete_acls([flt, flt])),
        ("list_groups int group", lambda a: a.list_groups(5)),
        ("list_groups unknown keyword", lambda a: a.list_groups(foo=1)),
        ("describe_scram str", lambda a: a.describe_user_scram_credentials("u")),
        ("describe_scram None user", lambda a: a.describe_user_scram_credentials([None])),
        ("describe_scram int user", lambda a: a.describe_user_scram_credentials([5])),
        ("describe_scram empty user", lambda a: a.describe_user_scram_credentials([""])),
        ("describe_scram unknown keyword",
         lambda a: a.describe_user_scram_credentials(None, operation_timeout=1)),
        ("alter_scram not a list", lambda a: a.alter_user_scram_credentials(upsert)),
        ("alter_scram empty", lambda a: a.alter_user_scram_credentials([])),
        ("alter_scram base class",
         lambda a: a.alter_user_scram_credentials([m.UserScramCredentialAlteration("u")])),
        ("alter_scram not an alteration", lambda a: a.alter_user_scram_credentials(["u"])),
        ("alter_scram None user", lambda a: a.alter_user_scram_credentials(
            [m.UserScramCredentialDeletion(None, m.ScramMechanism.SCRAM_SHA_256)])),
        ("alter_scram empty user", lambda a: a.alter_user_scram_credentials(
            [m.UserScramCredentialDeletion("", m.ScramMechanism.SCRAM_SHA_256)])),
        ("alter_scram str password", lambda a: a.alter_user_scram_credentials(
            [m.UserScramCredentialUpsertion("u", info, "pw")])),
        ("alter_scram None password", lambda a: a.alter_user_scram_credentials(
            [m.UserScramCredentialUpsertion("u", info, None)])),
        ("alter_scram empty password", lambda a: a.alter_user_scram_credentials(
            [m.UserScramCredentialUpsertion("u", info, b"")])),
        ("alter_scram empty salt", lambda a: a.alter_user_scram_credentials(
            [m.UserScramCredentialUpsertion("u", info, b"pw", b"")])),
        ("alter_scram str salt", lambda a: a.alter_user_scram_credentials(
            [m.UserScramCredentialUpsertion("u", info, b"pw", "salt")])),
        ("alter_scram no credential info", lambda a: a.alter_user_scram_credentials(
            [m.UserScramCredentialUpsertion("u", None, b"pw")])),
        ("alter_scram zero iterations", lambda a: a.alter_user_scram_credentials(
            [m.UserScramCredentialUpsertion(
                "u", m.ScramCredentialInfo(m.ScramMechanism.SCRAM_SHA_256, 0), b"pw")])),
        ("alter_scram int mechanism", lambda a: a.alter_user_scram_credentials(
            [m.UserScramCredentialUpsertion("u", m.ScramCredentialInfo(1, 4096), b"pw")])),
        ("alter_scram deletion int mechanism", lambda a: a.alter_user_scram_credentials(
            [m.UserScramCredentialDeletion("u", 1)])),
        ("elect_leaders int type", lambda a: a.elect_leaders(0)),
        ("elect_leaders tuple", lambda a: a.elect_leaders(
            top.ElectionType.PREFERRED, (TP("t", 0),))),
        ("elect_leaders not partitions", lambda a: a.elect_leaders(
            top.ElectionType.PREFERRED, ["t"])),
        ("elect_leaders negative partition", lambda a: a.elect_leaders(
            top.ElectionType.PREFERRED, [TP("t", -1)])),
        # Containers that are not lists: ValueError there (the names are read through
        # them first), TypeError where a call needs len() or for what is not iterable.
        ("create_topics tuple", lambda a: a.create_topics((m.NewTopic("t", 1),))),
        ("create_topics generator",
         lambda a: a.create_topics(t for t in [m.NewTopic("t", 1)])),
        ("create_topics dict", lambda a: a.create_topics({m.NewTopic("t", 1): 1})),
        ("create_topics one NewTopic", lambda a: a.create_topics(m.NewTopic("t", 1))),
        ("create_partitions set", lambda a: a.create_partitions({m.NewPartitions("t", 2)})),
        ("describe_configs tuple",
         lambda a: a.describe_configs((m.ConfigResource("topic", "t"),))),
        ("alter_configs generator", lambda a: a.alter_configs(
            r for r in [m.ConfigResource("topic", "t", set_config={"a": "b"})])),
        ("incremental tuple", lambda a: a.incremental_alter_configs((m.ConfigResource(
            "topic", "t", incremental_configs=[m.ConfigEntry(
                "x", "1", incremental_operation=m.AlterConfigOpType.SET)]),))),
        ("incremental not resources", lambda a: a.incremental_alter_configs([5])),
        ("create_acls tuple", lambda a: a.create_acls((binding,))),
        ("create_acls generator", lambda a: a.create_acls(b for b in [binding])),
        ("delete_acls set", lambda a: a.delete_acls({flt})),
        ("delete_acls generator", lambda a: a.delete_acls(f for f in [flt])),
        # A str is read as a container of characters there: ValueError where items are
        # checked with ValueError, TypeError where with TypeError (incremental), and
        # ValueError for "" (nothing read, then not a non-empty list).
        ("describe_configs str", lambda a: a.describe_configs("topic")),
        ("alter_configs str", lambda a: a.alter_configs("topic")),
        ("create_acls str", lambda a: a.create_acls("topic")),
        ("delete_acls str", lambda a: a.delete_acls("topic")),
        ("incremental str", lambda a: a.incremental_alter_configs("topic")),
        ("incremental tuple of str", lambda a: a.incremental_alter_configs(("topic",))),
        ("create_topics empty str", lambda a: a.create_topics("")),
        ("create_partitions empty str", lambda a: a.create_partitions("")),
        ("describe_configs empty str", lambda a: a.describe_configs("")),
        ("incremental empty str", lambda a: a.incremental_alter_configs("")),
        ("create_acls empty str", lambda a: a.create_acls("")),
        # what incremental_configs holds must be ConfigEntry objects
        ("incremental entry not a ConfigEntry", lambda a: a.incremental_alter_configs(
            [m.ConfigResource("broker", "1", incremental_configs=[5])])),
        ("incremental entries a str", lambda a: a.incremental_alter_configs(
            [m.ConfigResource("broker", "1", incremental_configs="something")])),
    ]


CASES = [label for label, _ in calls(ours, kafka_client)]


@pytest.mark.parametrize("label", CASES)
def test_bad_input_raises_what_confluent_kafka_raises(clients, label):
    mine = dict(calls(ours, kafka_client))[label]
    peer = dict(calls(theirs, ck))[label]
    a, b = clients
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(Exception) as expected:
            peer(b)
        with pytest.raises(Exception) as got:
            mine(a)
    assert type(got.value) is type(expected.value), (
        f"{label}: ours raised {type(got.value).__name__}: {got.value}; confluent-kafka "
        f"raised {type(expected.value).__name__}: {expected.value}")


def test_calls_confluent_kafka_answers_with_attribute_error_raise_type_error(clients):
    """confluent-kafka raises AttributeError here by accident ('str' object has no
    attribute 'topic'); a TypeError naming what was expected is the clear error."""
    a, _ = clients
    for bad in ("t", ["t"], [None]):
        with pytest.raises((TypeError, ValueError), match="NewTopic"):
            a.create_topics(bad)
    with pytest.raises(ValueError, match="NewPartitions"):
        a.create_partitions(["t"])


def failed_at_once(future):
    start = time.monotonic()
    with pytest.raises(KafkaException) as ei:
        future.result(2)
    assert time.monotonic() - start < 1
    return ei.value.args[0]


@pytest.mark.parametrize("name, why", [
    ("", "empty"), (".", "'.'"), ("..", "'.'"), ("a" * 250, "250 characters"),
    ("bad name!", "ASCII letters"), ("caf\u00e9", "ASCII letters"), ("a/b", "ASCII letters")])
def test_topic_names_kafka_forbids_fail_without_a_broker(clients, name, why):
    a, _ = clients
    futures = a.create_topics([ours.NewTopic(name, 1), ours.NewTopic("a" * 249, 1)])
    err = failed_at_once(futures[name])
    assert err.code() == KafkaError.TOPIC_EXCEPTION and why in err.str()
    assert not futures["a" * 249].done()   # a legal name waits for the (absent) broker


@pytest.mark.parametrize("topic, code", [
    (ours.NewTopic("t", 0), KafkaError.INVALID_PARTITIONS),
    (ours.NewTopic("t", 1, 0), KafkaError.INVALID_REPLICATION_FACTOR)])
def test_zero_partitions_or_replicas_fail_their_future_without_a_broker(clients, topic, code):
    """librdkafka lets 0 through to the broker (Kafka refuses it): same type of error,
    at once, whatever the broker would do."""
    a, _ = clients
    assert failed_at_once(a.create_topics([topic])["t"]).code() == code


@pytest.mark.parametrize("call", [
    lambda a: a.create_topics([ours.NewTopic("t", 1), ours.NewTopic("u", 1),
                               ours.NewTopic("t", 2)]),
    lambda a: a.delete_topics(["t", "u", "t"]),
    lambda a: a.create_partitions([ours.NewPartitions("t", 2), ours.NewPartitions("u", 2),
                                   ours.NewPartitions("t", 3)]),
])
def test_a_topic_named_twice_fails_as_kafka_answers_it_and_the_others_go_ahead(clients, call):
    """Kafka refuses a topic named twice in CreateTopics, DeleteTopics or CreatePartitions
    with INVALID_REQUEST and acts on the others, which is what confluent-kafka (sending
    the request) reports; the duplicated name is not sent."""
    a, _ = clients
    futures = call(a)
    assert set(futures) == {"t", "u"}
    err = failed_at_once(futures["t"])
    assert err.code() == KafkaError.INVALID_REQUEST and err.str() == "Duplicate topic name."
    assert not futures["u"].done()          # sent: it waits for the (absent) broker


@pytest.mark.parametrize("call, what", [
    (lambda a: a.describe_topics(kafka_client.TopicCollection(["t", "t"])), "topics"),
    (lambda a: a.delete_records([kafka_client.TopicPartition("t", 0, 1),
                                 kafka_client.TopicPartition("t", 0, 2)]), "partitions"),
    (lambda a: a.describe_consumer_groups(["g", "g"]), "groups"),
    (lambda a: a.delete_consumer_groups(["g", "g"]), "groups"),
    (lambda a: a.list_consumer_group_offsets([kafka_client.ConsumerGroupTopicPartitions(
        "g", [kafka_client.TopicPartition("t", 0), kafka_client.TopicPartition("t", 0)])]),
     "partitions"),
    (lambda a: a.incremental_alter_configs([ours.ConfigResource(
        "topic", "t", incremental_configs=[ours.ConfigEntry(
            "x", "1", incremental_operation=ours.AlterConfigOpType.SET)])] * 2),
     "ConfigResource"),
])
def test_duplicates_fail_every_future_at_once(clients, call, what):
    a, _ = clients
    futures = call(a)
    assert futures
    for f in futures.values():
        err = failed_at_once(f)
        assert err.code() == KafkaError._INVALID_ARG and f"Duplicate {what}" in err.str()


def local_duplicates(m, top):
    """Calls naming something twice that confluent-kafka fails at once, without a
    request."""
    TP, CGTP = top.TopicPartition, top.ConsumerGroupTopicPartitions
    entry = m.ConfigEntry("x", "1", incremental_operation=m.AlterConfigOpType.SET)
    return [
        ("describe_topics", lambda a: a.describe_topics(top.TopicCollection(["t", "t"]))),
        ("incremental resources", lambda a: a.incremental_alter_configs(
            [m.ConfigResource("topic", "t", incremental_configs=[entry])] * 2)),
        ("incremental entries", lambda a: a.incremental_alter_configs(
            [m.ConfigResource("topic", "t", incremental_configs=[entry] * 2)])),
        ("delete_records", lambda a: a.delete_records([TP("t", 0, 1), TP("t", 0, 2)])),
        ("describe groups", lambda a: a.describe_consumer_groups(["g", "g"])),
        ("delete groups", lambda a: a.delete_consumer_groups(["g", "g"])),
        ("list group offsets", lambda a: a.list_consumer_group_offsets(
            [CGTP("g", [TP("t", 0), TP("t", 0)])])),
        ("alter group offsets", lambda a: a.alter_consumer_group_offsets(
            [CGTP("g", [TP("t", 0, 1), TP("t", 0, 2)])])),
        ("describe scram", lambda a: a.describe_user_scram_credentials(["u", "u"])),
        ("elect_leaders", lambda a: {None: a.elect_leaders(
            top.ElectionType.PREFERRED, [TP("t", 0), TP("t", 0)])}),
    ]


@pytest.mark.parametrize("label", [label for label, _ in local_duplicates(ours, kafka_client)])
def test_duplicates_fail_with_confluent_kafkas_code_and_words(clients, label):
    a, b = clients
    mine = dict(local_duplicates(ours, kafka_client))[label](a)
    peer = dict(local_duplicates(theirs, ck))[label](b)

    def errors(futures):
        return sorted((e.code(), e.str()) for e in (
            f.exception(2).args[0] for f in futures.values()))
    assert errors(mine) == errors(peer)


def test_scram_and_election_errors_that_need_no_broker(clients):
    """As confluent-kafka: these come back through the future, at once."""
    def error_now(future):  # either package's KafkaException
        start = time.monotonic()
        exc = future.exception(2)
        assert exc is not None and time.monotonic() - start < 1
        return exc.args[0]

    a, b = clients
    for client, m, top in ((a, ours, kafka_client), (b, theirs, ck)):
        err = error_now(client.describe_user_scram_credentials(["u", "v", "u"])["v"])
        assert err.code() == KafkaError._INVALID_ARG and "Duplicate users" in err.str()
        futures = client.alter_user_scram_credentials([
            m.UserScramCredentialUpsertion("u", m.ScramCredentialInfo(
                m.ScramMechanism.SCRAM_SHA_256, 4096), b"pw"),
            m.UserScramCredentialDeletion("v", m.ScramMechanism.UNKNOWN)])
        for f in futures.values():
            err = error_now(f)
            assert err.code() == KafkaError._INVALID_ARG
            assert "SCRAM mechanism must be specified at index 1" in err.str()
        tp = top.TopicPartition("t", 0)
        err = error_now(client.elect_leaders(top.ElectionType.PREFERRED, [tp, tp]))
        assert err.code() == KafkaError._INVALID_ARG and "Duplicate partitions" in err.str()
    assert a.describe_user_scram_credentials([]) == {} == b.describe_user_scram_credentials([])


def test_list_groups_is_deprecated_and_blocks_at_most_its_timeout(clients):
    a, b = clients
    for client in (a, b):
        start = time.monotonic()
        with pytest.warns(DeprecationWarning, match="list_consumer_groups"):
            with pytest.raises(Exception) as ei:   # either package's KafkaException
                client.list_groups("g", timeout=0.5)
        assert ei.value.args[0].code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
        assert time.monotonic() - start < 3


def test_scram_upsertion_salts_the_password_as_rfc_5802_says():
    """The salted password sent is Hi(password, salt, i) of RFC 5802: with RFC 7677's
    test vector (SCRAM-SHA-256, password "pencil") it yields the vector's server
    signature. Without a salt, each upsertion gets a fresh random one."""
    import base64
    import hashlib
    import hmac

    from kafka_client.admin._scram import SALT_BYTES, salted_password

    info = ours.ScramCredentialInfo(ours.ScramMechanism.SCRAM_SHA_256, 4096)
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    got_salt, salted = salted_password(ours.UserScramCredentialUpsertion(
        "user", info, b"pencil", salt))
    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    auth_message = (f"n=user,r=rOprNGfwEbeRWgbNEkqO,r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,"
                    f"i=4096,c=biws,r={nonce}").encode()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    signature = hmac.new(server_key, auth_message, "sha256").digest()
    assert got_salt == salt
    assert base64.b64encode(signature) == b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    info512 = ours.ScramCredentialInfo(ours.ScramMechanism.SCRAM_SHA_512, 8192)
    s1, p1 = salted_password(ours.UserScramCredentialUpsertion("u", info512, b"pw"))
    s2, p2 = salted_password(ours.UserScramCredentialUpsertion("u", info512, b"pw"))
    assert len(s1) == len(s2) == SALT_BYTES and s1 != s2
    assert p1 == hashlib.pbkdf2_hmac("sha512", b"pw", s1, 8192) != p2


def test_local_errors_that_need_no_broker(clients):
    a, _ = clients
    res = ours.ConfigResource("broker", "not-a-number")
    assert "int32 broker_id" in failed_at_once(a.describe_configs([res])[res]).str()
    res = ours.ConfigResource("any", "x")
    assert failed_at_once(a.describe_configs([res])[res]).code() == KafkaError._INVALID_ARG
    tp = kafka_client.TopicPartition("t", 0)
    err = failed_at_once(a.list_offsets({tp: ours.OffsetSpec.for_timestamp(-7)})[tp])
    assert err.code() == KafkaError._INVALID_ARG and "invalid offset -7" in err.str()
    res = ours.ConfigResource("topic", "t", incremental_configs=[
        ours.ConfigEntry("x", "1", incremental_operation=ours.AlterConfigOpType.SET),
        ours.ConfigEntry("x", "2", incremental_operation=ours.AlterConfigOpType.SET)])
    assert "Duplicate ConfigEntry" in failed_at_once(
        a.incremental_alter_configs([res])[res]).str()


def test_empty_inputs_that_are_no_error(clients):
    """As confluent-kafka: nothing asked, nothing to wait for."""
    a, b = clients
    assert a.delete_records([]) == {} == b.delete_records([])
    assert a.list_offsets({}) == {} == b.list_offsets({})
    assert a.describe_topics(kafka_client.TopicCollection([])) == {}


def test_no_broker_means_timed_out_at_request_timeout(clients):
    a, _ = clients
    start = time.monotonic()
    with pytest.raises(KafkaException) as ei:
        a.create_topics([ours.NewTopic("t", 1)], request_timeout=0.5)["t"].result(5)
    assert ei.value.args[0].code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
    assert 0.4 < time.monotonic() - start < 3
