"""The admin calls Tansu and noida-db do not serve, on the test cluster
(kafka_client.testing): SCRAM credentials altered through the admin client are the ones
SCRAM logins are checked against (confluent-kafka's login as the independent peer),
preferred and unclean leader elections seen in the metadata, and the legacy list_groups()
side by side with confluent-kafka's."""
from __future__ import annotations

import time
import warnings

import pytest

from kafka_client import (
    Consumer,
    ConsumerGroupTopicPartitions,
    ElectionType,
    Producer,
    TopicPartition,
)
from kafka_client.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka_client.errors import KafkaError, KafkaException
from kafka_client.testing import Cluster

ck = pytest.importorskip("confluent_kafka")
ck_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.integration

ADMIN, ADMIN_PASSWORD = "alice", "alice-secret"


def sasl(bootstrap, user, password, mechanism="SCRAM-SHA-256", **extra):
    return {"bootstrap.servers": bootstrap, "security.protocol": "sasl_plaintext",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            **extra}


def peer_can_log_in(bootstrap, user, password, mechanism):
    """Whether confluent-kafka's client authenticates (its Metadata request answered) or
    is refused (_AUTHENTICATION through error_cb, served by poll(): its list_topics()
    itself would wait out its whole timeout)."""
    errors = []
    p = ck.Producer(sasl(bootstrap, user, password, mechanism,
                         error_cb=errors.append, log_level=0))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            p.list_topics(timeout=0.5)
            return True
        except ck.KafkaException:
            p.poll(0.1)
            if any(e.code() == ck.KafkaError._AUTHENTICATION for e in errors):
                return False
    raise AssertionError(f"neither logged in nor refused in 10 s: {errors}")


def we_can_log_in(bootstrap, user, password, mechanism):
    p = Producer(sasl(bootstrap, user, password, mechanism))
    try:
        p.list_topics(timeout=5)
        return True
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError._AUTHENTICATION, exc
        return False
    finally:
        p.close()


def error_of(future, timeout=10):
    with pytest.raises(KafkaException) as ei:
        future.result(timeout)
    return ei.value.args[0]


@pytest.fixture(scope="module")
def scram_cluster(tmp_path_factory):
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("scram-admin")),
                 broker_config={"sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512"},
                 users={ADMIN: ADMIN_PASSWORD}) as cluster:
        yield cluster


@pytest.fixture
def scram_admins(scram_cluster):
    conf = sasl(scram_cluster.bootstrap_servers, ADMIN, ADMIN_PASSWORD)
    a = AdminClient(conf)
    yield a, ck_admin.AdminClient(conf)
    a.close()


def sha(n):
    return ScramMechanism.SCRAM_SHA_256 if n == 256 else ScramMechanism.SCRAM_SHA_512


def test_altered_scram_credentials_are_used_for_login(scram_cluster, scram_admins):
    admin, peer = scram_admins
    bootstrap = scram_cluster.bootstrap_servers
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(sha(256), 4096), b"bob-pw",
                                     b"a salt of bob's"),
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(sha(512), 8192), b"bob-512"),
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(sha(512), 4096), b"c-pw")])
    assert sorted(futures) == ["bob", "carol"]
    assert [f.result(10) for f in futures.values()] == [None, None]
    # The data plane: confluent-kafka's (librdkafka's) SCRAM login and ours accept exactly
    # the passwords set, for the mechanism each was set for.
    assert peer_can_log_in(bootstrap, "bob", "bob-pw", "SCRAM-SHA-256")
    assert peer_can_log_in(bootstrap, "bob", "bob-512", "SCRAM-SHA-512")
    assert peer_can_log_in(bootstrap, "carol", "c-pw", "SCRAM-SHA-512")
    assert not peer_can_log_in(bootstrap, "bob", "bob-512", "SCRAM-SHA-256")
    assert not peer_can_log_in(bootstrap, "carol", "c-pw", "SCRAM-SHA-256")
    assert we_can_log_in(bootstrap, "bob", "bob-512", "SCRAM-SHA-512")
    assert not we_can_log_in(bootstrap, "bob", "wrong", "SCRAM-SHA-512")

    # Both clients describe the same credentials.
    ours = admin.describe_user_scram_credentials().result(10)
    theirs = peer.describe_user_scram_credentials().result(10)

    def infos(descriptions):
        return {u: sorted((i.mechanism.value, i.iterations) for i in d.scram_credential_infos)
                for u, d in descriptions.items()}

    assert infos(ours) == infos(theirs) == {
        ADMIN: [(1, 4096), (2, 4096)], "bob": [(1, 4096), (2, 8192)], "carol": [(2, 4096)]}
    per_user = admin.describe_user_scram_credentials(["carol", "nobody"])
    assert infos({"carol": per_user["carol"].result(10)}) == {"carol": [(2, 4096)]}
    assert error_of(per_user["nobody"]).code() == KafkaError.RESOURCE_NOT_FOUND

    # A deletion ends that mechanism's logins only; confluent-kafka's alteration is
    # seen by our describe (and the other way round above).
    assert admin.alter_user_scram_credentials([
        UserScramCredentialDeletion("bob", sha(256))])["bob"].result(10) is None
    assert not peer_can_log_in(bootstrap, "bob", "bob-pw", "SCRAM-SHA-256")
    assert peer_can_log_in(bootstrap, "bob", "bob-512", "SCRAM-SHA-512")
    peer.alter_user_scram_credentials([ck_admin.UserScramCredentialUpsertion(
        "dave", ck_admin.ScramCredentialInfo(ck_admin.ScramMechanism.SCRAM_SHA_256, 4096),
        b"d-pw")])["dave"].result(10)
    assert infos({"dave": admin.describe_user_scram_credentials(["dave"])["dave"].result(10)}) \
        == {"dave": [(1, 4096)]}
    assert we_can_log_in(bootstrap, "dave", "d-pw", "SCRAM-SHA-256")


def test_scram_alterations_the_broker_refuses(scram_admins):
    """Kafka's checks, per user: one refused alteration leaves that user unchanged and
    the other users' alterations applied."""
    admin, _peer = scram_admins
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialDeletion("nobody", sha(256)),
        UserScramCredentialUpsertion("few", ScramCredentialInfo(sha(256), 1000), b"pw"),
        UserScramCredentialUpsertion("twice", ScramCredentialInfo(sha(256), 4096), b"pw"),
        UserScramCredentialDeletion("twice", sha(256)),
        UserScramCredentialUpsertion("fine", ScramCredentialInfo(sha(512), 4096), b"pw")])
    assert error_of(futures["nobody"]).code() == KafkaError.RESOURCE_NOT_FOUND
    assert error_of(futures["few"]).code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    assert error_of(futures["twice"]).code() == KafkaError.DUPLICATE_RESOURCE
    assert futures["fine"].result(10) is None
    described = admin.describe_user_scram_credentials(["few", "twice", "fine"])
    assert error_of(described["few"]).code() == KafkaError.RESOURCE_NOT_FOUND
    assert error_of(described["twice"]).code() == KafkaError.RESOURCE_NOT_FOUND
    assert described["fine"].result(10).user == "fine"


# --------------------------------------------------------------------------- elections


def metadata_leaders(bootstrap, topic):
    """Partition -> leader as confluent-kafka's client reads the metadata."""
    md = ck_admin.AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def test_preferred_election_moves_a_moved_leader_back(kafka_cluster, topic_name):
    kafka_cluster.create_topic(topic_name, partitions=3, replication_factor=3)
    kafka_cluster.wait_in_sync(topic_name)
    bootstrap = kafka_cluster.bootstrap_servers
    preferred = {p.partition: p.replicas[0]
                 for p in kafka_cluster.describe_topic(topic_name).partitions}
    assert metadata_leaders(bootstrap, topic_name) == preferred
    moved_to = kafka_cluster.move_leader(topic_name, 0)
    assert moved_to != preferred[0]
    assert metadata_leaders(bootstrap, topic_name)[0] == moved_to
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        result = admin.elect_leaders(ElectionType.PREFERRED, [
            TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)]).result(10)
        assert result[TopicPartition(topic_name, 0)] is None
        assert result[TopicPartition(topic_name, 1)].code() == \
            KafkaError.ELECTION_NOT_NEEDED
        assert metadata_leaders(bootstrap, topic_name) == preferred
        # Every partition: only those that needed an election are listed; confluent-
        # kafka's elect_leaders gives the same answer shape.
        kafka_cluster.move_leader(topic_name, 2)
        assert admin.elect_leaders(ElectionType.PREFERRED).result(10) == {
            TopicPartition(topic_name, 2): None}
        assert metadata_leaders(bootstrap, topic_name) == preferred
        kafka_cluster.move_leader(topic_name, 1)
        peer = ck_admin.AdminClient({"bootstrap.servers": bootstrap})
        theirs = peer.elect_leaders(ck.ElectionType.PREFERRED, None).result(10)
        assert {(tp.topic, tp.partition): e for tp, e in theirs.items()} == {
            (topic_name, 1): None}
        assert metadata_leaders(bootstrap, topic_name) == preferred
        again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name, 1)])
        assert again.result(10)[TopicPartition(topic_name, 1)].code() == \
            KafkaError.ELECTION_NOT_NEEDED
        unknown = admin.elect_leaders(ElectionType.PREFERRED,
                                      [TopicPartition(topic_name, 7)]).result(10)
        assert unknown[TopicPartition(topic_name, 7)].code() == \
            KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        admin.close()


def test_a_group_call_finds_the_new_coordinator_when_the_old_ones_broker_stops(
        kafka_cluster, topic_name):
    # The admin client keeps the coordinator it found; when that broker goes down (the
    # role moving with it), the next call asks FindCoordinator again once the connection
    # is refused, rather than waiting for the old broker until the request times out.
    c = kafka_cluster
    c.create_topic(topic_name, partitions=2, replication_factor=3)
    group = "admin-down"
    committer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": group})
    offsets = [TopicPartition(topic_name, 0, 5), TopicPartition(topic_name, 1, 9)]
    committer.commit(offsets=offsets, asynchronous=False)
    committer.close()
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, 0),
                                                    TopicPartition(topic_name, 1)])]

    def listed():
        result = admin.list_consumer_group_offsets(request)[group].result(30)
        return [(tp.partition, tp.offset) for tp in result.topic_partitions]

    try:
        assert listed() == [(0, 5), (1, 9)]
        old = c.coordinator(group=group)
        c.stop_broker(old)
        assert c.coordinator(group=group) != old
        started = time.monotonic()
        assert listed() == [(0, 5), (1, 9)]
        assert time.monotonic() - started < 10
    finally:
        admin.close()


def test_a_controller_call_finds_the_new_controller_when_the_old_ones_broker_stops(
        kafka_cluster, topic_name):
    """The controller's broker stops: create_topics() asks who controls now once its
    connection is refused (it waited for the old broker until its request timeout)."""
    c = kafka_cluster
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    try:
        admin.create_topics([NewTopic(topic_name + "-a", 1, 1)])[topic_name + "-a"].result(30)
        old = admin.describe_cluster().result(30).controller.id
        c.stop_broker(old)
        started = time.monotonic()
        created = admin.create_topics([NewTopic(topic_name, 2, 2)], request_timeout=5)
        created[topic_name].result(30)
        assert time.monotonic() - started < 2.5
        assert len(c.describe_topic(topic_name).partitions) == 2
    finally:
        admin.close()


@pytest.mark.parametrize("operation", ["list_offsets", "delete_records"])
def test_a_leader_call_follows_the_leader_when_its_broker_stops(kafka_cluster, topic_name,
                                                                operation):
    """A partition's leader stops while a ListOffsets / DeleteRecords waits there (1 s of
    latency): the call is routed again to the new leader at once (it waited for the old
    broker until its request timeout, then failed with _TRANSPORT)."""
    c = kafka_cluster
    c.create_topic(topic_name, partitions=1, replication_factor=3)
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
    for i in range(10):
        producer.produce(topic_name, b"%d" % i)
    assert producer.flush(10) == 0
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    tp = TopicPartition(topic_name, 0)
    try:
        admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(30)      # connected
        leader = c.leader(topic_name, 0)
        c.set_latency(1.0, broker=leader, apis=["ListOffsets", "DeleteRecords"])
        started = time.monotonic()
        if operation == "list_offsets":
            future = admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=8)[tp]
        else:
            future = admin.delete_records([TopicPartition(topic_name, 0, 4)],
                                          request_timeout=8)[tp]
        time.sleep(0.3)
        c.stop_broker(leader)
        result = future.result(30)
        assert time.monotonic() - started < 3
        if operation == "list_offsets":
            assert result.offset == 10
        else:
            assert result.low_watermark == 4
        assert c.leader(topic_name, 0) != leader
    finally:
        admin.close()


def test_a_retriable_partition_error_is_asked_again(kafka_cluster, topic_name):
    """REQUEST_TIMED_OUT for a partition of ListOffsets is asked again within the request
    timeout (it reached the caller at once, with the whole timeout left), as the Java
    client does; DescribeConfigs reports a resource's error, as the Java client does."""
    c = kafka_cluster
    c.create_topic(topic_name, partitions=1, replication_factor=3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    tp = TopicPartition(topic_name, 0)
    try:
        admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(30)
        c.inject_errors("ListOffsets", ["REQUEST_TIMED_OUT"])
        assert admin.list_offsets({tp: OffsetSpec.latest()},
                                  request_timeout=10)[tp].result(30).offset == 0
        assert [e.api for e in c.request_log() if e.injected_error] == ["ListOffsets"]
        c.inject_errors("DescribeConfigs", ["REQUEST_TIMED_OUT"])
        resource = ConfigResource("topic", topic_name)
        with pytest.raises(KafkaException) as raised:
            admin.describe_configs([resource], request_timeout=10)[resource].result(30)
        assert raised.value.args[0].code() == KafkaError.REQUEST_TIMED_OUT
    finally:
        admin.close()


def test_a_change_sent_again_after_its_answer_was_lost_says_it_may_have_been_done(
        kafka_cluster, topic_name):
    """The controller carries out a CreateTopics (then a DeleteTopics) whose answer is
    lost with the connection; sent again, it is answered TOPIC_ALREADY_EXISTS
    (UNKNOWN_TOPIC_OR_PART). The error stays (another client may have done it), and
    says the client's own first request may have done it."""
    c = kafka_cluster
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})

    def answer_lost(api, call):
        controller = admin.describe_cluster().result(30).controller.id
        c.set_latency(0.5, broker=controller, apis=[api])
        futures = call()
        time.sleep(0.2)                       # the broker has it, its answer is delayed
        c.cut_connections(controller)
        c.set_latency(0, broker=controller)
        with pytest.raises(KafkaException) as raised:
            futures[topic_name].result(30)
        return raised.value.args[0]

    try:
        err = answer_lost("CreateTopics",
                          lambda: admin.create_topics([NewTopic(topic_name, 1, 3)]))
        assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS
        assert "the first CreateTopics request was lost" in err.str()
        assert topic_name in c.topics()
        err = answer_lost("DeleteTopics", lambda: admin.delete_topics([topic_name]))
        assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        assert "it may have done this itself" in err.str()
        assert topic_name not in c.topics()
    finally:
        admin.close()


def test_a_broker_back_up_and_named_again_is_connected_at_once(kafka_cluster, topic_name):
    """The coordinator's broker stops; a call for it is refused and its connection waits
    out a reconnect backoff (reconnect.backoff.ms 20 s here). The broker comes back and
    FindCoordinator names it again: the call connects at once instead of waiting out the
    backoff (it timed out, saying nothing of why). (20 s, was 5 s, and the call's timeout
    30 s: the bound below, well under the backoff, is then out of a loaded machine's
    reach.)"""
    c = kafka_cluster
    c.create_topic(topic_name, partitions=1, replication_factor=3)
    group = "back-" + topic_name
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers,
                         "reconnect.backoff.ms": 20000, "reconnect.backoff.max.ms": 40000})
    try:
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic_name, 0, 1)])])[group].result(30)
        home = c.coordinator(group=group)
        c.stop_broker(home)
        resource = ConfigResource("broker", str(home))
        with pytest.raises(KafkaException) as refused:
            admin.describe_configs([resource], request_timeout=1)[resource].result(30)
        assert refused.value.args[0].code() == KafkaError._TRANSPORT   # the cause, kept
        c.start_broker(home)
        assert c.coordinator(group=group) == home
        started = time.monotonic()
        described = admin.describe_consumer_groups([group], request_timeout=30)[group]
        assert described.result(60).group_id == group
        assert time.monotonic() - started < 8
    finally:
        admin.close()


def test_unclean_election_gives_a_leaderless_partition_a_live_replica(kafka_cluster,
                                                                        topic_name):
    kafka_cluster.create_topic(topic_name, partitions=1, replication_factor=2)
    kafka_cluster.wait_in_sync(topic_name)
    leader, follower = kafka_cluster.partition(topic_name, 0).replicas
    kafka_cluster.stop_broker(follower)     # leaves the ISR
    kafka_cluster.stop_broker(leader)       # the last in-sync replica: no leader
    kafka_cluster.start_broker(follower)    # alive, but not in sync
    assert kafka_cluster.leader(topic_name, 0) == -1
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    try:
        tp = TopicPartition(topic_name, 0)
        preferred = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(10)
        assert preferred[tp].code() == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE
        assert admin.elect_leaders(ElectionType.UNCLEAN, [tp]).result(10) == {tp: None}
        assert metadata_leaders(kafka_cluster.bootstrap_servers, topic_name) == {0: follower}
        again = admin.elect_leaders(ElectionType.UNCLEAN, [tp]).result(10)
        assert again[tp].code() == KafkaError.ELECTION_NOT_NEEDED
    finally:
        admin.close()


# --------------------------------------------------------------------------- list_groups


def test_list_groups_matches_confluent_kafkas(kafka_cluster, topic_name):
    kafka_cluster.create_topic(topic_name, partitions=2, replication_factor=3)
    bootstrap = kafka_cluster.bootstrap_servers
    live, simple = "live-" + topic_name, "simple-" + topic_name
    admin = AdminClient({"bootstrap.servers": bootstrap})
    peer = ck_admin.AdminClient({"bootstrap.servers": bootstrap})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": live,
                         "client.id": "list-groups-member"})
    try:
        admin.alter_consumer_group_offsets([ck_group(simple, topic_name)])[simple].result(10)
        consumer.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
            consumer.poll(0.1)
        assert len(consumer.assignment()) == 2

        def view(groups):
            return sorted((g.id, g.broker.id, g.broker.port, g.state, g.protocol_type,
                           g.protocol, g.error, [(m.id, m.client_id, m.client_host,
                                                  bytes(m.metadata), bytes(m.assignment))
                                                 for m in g.members]) for g in groups)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ours = admin.list_groups(timeout=10)
            theirs = peer.list_groups(timeout=10)
            only = admin.list_groups(live, timeout=10)
            none = admin.list_groups("no-such-group", timeout=10)
            assert view(only) == view(peer.list_groups(live, timeout=10))
            assert none == peer.list_groups("no-such-group", timeout=10) == []

        assert view(ours) == view(theirs)
        by_id = {g.id: g for g in ours}
        assert by_id[live].broker.id == kafka_cluster.coordinator(group=live)
        assert (by_id[live].state, by_id[live].protocol_type) == ("Stable", "consumer")
        (member,) = by_id[live].members
        assert (member.id, member.client_id) == (consumer.memberid(), "list-groups-member")
        assert by_id[simple].members == [] and by_id[simple].state == "Empty"
        assert [g.id for g in only] == [live]
    finally:
        consumer.close()
        admin.close()


def ck_group(group, topic):
    from kafka_client import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 1)])
