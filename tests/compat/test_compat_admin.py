"""confluent-kafka drop-in, the admin client: the same calls made through confluent-kafka's
AdminClient and ours against one test cluster, comparing what a program would observe
(result keys and their attributes, error codes, which errors are raised at once, how long
the calls take, what reaches ``error_cb``)."""
from __future__ import annotations

import importlib
import warnings

import pytest

ck = pytest.importorskip("confluent_kafka")

from kafka_client.admin import ConfigSource  # noqa: E402
from kafka_client.testing import Cluster  # noqa: E402

pytestmark = pytest.mark.integration

IMPLS = ("confluent_kafka", "kafka_client")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three brokers that do not create topics on first use (confluent-kafka's
    list_topics(topic) would)."""
    with Cluster(brokers=3, data_dir=str(tmp_path_factory.mktemp("admin-compat")),
                 broker_config={"auto.create.topics.enable": "false"}) as c:
        yield c


def side_by_side(program, *args):
    """``program(top, admin_module, impl, *args)`` for confluent-kafka and ours:
    {module name: result}."""
    return {impl: program(importlib.import_module(impl),
                          importlib.import_module(impl + ".admin"), impl, *args)
            for impl in IMPLS}


def admin_client(admin_module, cluster, errors=None):
    conf = {"bootstrap.servers": cluster.bootstrap_servers}
    if errors is not None:
        conf["error_cb"] = errors.append
    return admin_module.AdminClient(conf)


def short_call_beside_a_long_one(top, m, impl, cluster, topic):
    """Two DescribeConfigs to the same broker answering after a second: the first call
    gives up after 0.3 s, the second waits. What each gets, how many DescribeConfigs
    the broker got and connections it saw closed, and what reaches error_cb."""
    errors = []
    admin = admin_client(m, cluster, errors)
    broker = cluster.broker_ids[0]
    res = m.ConfigResource(m.ResourceType.BROKER, str(broker))
    admin.describe_configs([res])[res].result(10)           # connected, versions known
    since = cluster.clear_request_log()
    cluster.set_latency(1.0, apis=["DescribeConfigs"])
    try:
        short = admin.describe_configs([res], request_timeout=0.3)[res]
        long = admin.describe_configs([res], request_timeout=10)[res]
        short_code = short.exception(10).args[0].code()
        long_ok = isinstance(long.result(10), dict)
    finally:
        cluster.set_latency(0)
    admin.poll(0.5)
    log = cluster.request_log(since, kind=None)
    sent = sum(1 for e in log if e.kind == "request" and e.api == "DescribeConfigs")
    closed = sum(1 for e in log if e.kind == "closed")
    return short_code, long_ok, sent, closed, [e.code() for e in errors]


def test_a_call_timing_out_leaves_the_connection_to_the_others(cluster, topic_name):
    """librdkafka fails only the call whose request_timeout passed; the connection (and
    the requests of other calls on it) stays until socket.timeout.ms."""
    got = side_by_side(short_call_beside_a_long_one, cluster, topic_name)
    assert got["kafka_client"] == got["confluent_kafka"] \
        == (ck.KafkaError._TIMED_OUT, True, 2, 0, [])


def elect_preferred_leaders(top, m, impl, cluster, topic):
    """A preferred election for a partition led by its preferred replica, one whose
    leader was moved away, and one that does not exist: each result entry as a program
    reads it, from the key and from the value."""
    name = f"{topic}-{impl}"
    cluster.create_topic(name, partitions=2, replication_factor=3)
    cluster.wait_in_sync(name)
    cluster.move_leader(name, 1)
    admin = admin_client(m, cluster)
    asked = [top.TopicPartition(name, 0), top.TopicPartition(name, 1),
             top.TopicPartition(f"missing-{name}", 0)]
    result = admin.elect_leaders(top.ElectionType.PREFERRED, asked).result(15)
    entries = sorted(
        (tp.topic.replace(f"-{impl}", "-X"), tp.partition, tp.offset,
         None if tp.error is None else tp.error.code(),
         None if err is None else err.code(),
         result.get(top.TopicPartition(tp.topic, tp.partition)) is err)
        for tp, err in result.items())
    return entries, cluster.leader(name, 1) == cluster.partition(name, 1).replicas[0]


def test_elect_leaders_keys_carry_the_partition_error(cluster, topic_name):
    got = side_by_side(elect_preferred_leaders, cluster, topic_name)
    assert got["kafka_client"] == got["confluent_kafka"]
    entries, preferred_leads = got["kafka_client"]
    assert preferred_leads
    codes = {(t.startswith("missing"), p): (key_code, value_code)
             for t, p, _, key_code, value_code, _ in entries}
    assert codes == {(False, 0): (ck.KafkaError.ELECTION_NOT_NEEDED,) * 2,
                     (False, 1): (None, None),
                     (True, 0): (ck.KafkaError.UNKNOWN_TOPIC_OR_PART,) * 2}


def metadata_as_printed(top, m, impl, cluster, topic):
    """list_topics() of a topic and of a missing one, as a program prints them."""
    name = f"{topic}-{impl}"
    cluster.create_topic(name, partitions=2)
    admin = admin_client(m, cluster)
    md = admin.list_topics(name, timeout=10)
    missing = admin.list_topics(f"missing-{name}", timeout=10)
    printed = []
    for x in (md, md.topics[name], md.topics[name].partitions[1],
              md.brokers[cluster.broker_ids[0]], missing.topics[f"missing-{name}"]):
        printed.append((type(x).__name__, str(x), repr(x)))
    return [tuple(p.replace(f"-{impl}", "-X") for p in row) for row in printed]


def test_list_topics_results_print_as_confluent_kafkas(cluster, topic_name):
    got = side_by_side(metadata_as_printed, cluster, topic_name)
    assert got["kafka_client"] == got["confluent_kafka"]


@pytest.mark.parametrize("name", ["BrokerMetadata", "TopicMetadata", "PartitionMetadata",
                                  "ClusterMetadata", "GroupMetadata", "GroupMember"])
def test_metadata_objects_build_without_arguments_as_confluent_kafkas(name):
    # Programs mock list_topics()/list_groups() answers: an object built bare, then its
    # attributes set (confluent-kafka's take no arguments).
    ours = getattr(importlib.import_module("kafka_client.admin"), name)()
    theirs = getattr(importlib.import_module("confluent_kafka.admin"), name)()
    assert vars(ours) == vars(theirs)
    if type(theirs).__str__ is not object.__str__:
        assert (str(ours), repr(ours)) == (str(theirs), repr(theirs))


def name_a_topic_twice(top, m, impl, cluster, topic):
    """CreateTopics, CreatePartitions and DeleteTopics naming one topic twice beside
    another: each future's error code, and what the cluster did."""
    name, other = f"{topic}-{impl}", f"other-{topic}-{impl}"
    for t in (name, other):
        cluster.create_topic(t, partitions=2)
    admin = admin_client(m, cluster)

    def codes(futures):
        return sorted((k.replace(f"-{impl}", "-X"), None if f.exception(15) is None
                       else f.exception(15).args[0].code()) for k, f in futures.items())

    new, new_other = f"new-{name}", f"new-{other}"
    created = codes(admin.create_topics([m.NewTopic(new, 1), m.NewTopic(new_other, 1),
                                         m.NewTopic(new, 1)]))
    grown = codes(admin.create_partitions([m.NewPartitions(name, 4),
                                           m.NewPartitions(other, 3),
                                           m.NewPartitions(name, 4)]))
    partitions = [len(cluster.describe_topic(t).partitions) for t in (name, other)]
    deleted = codes(admin.delete_topics([name, new_other, name]))
    topics = set(cluster.topics())
    return (created, grown, deleted, partitions,
            [t in topics for t in (name, other, new, new_other)])


def test_a_topic_named_twice_is_refused_and_the_others_go_ahead(cluster, topic_name):
    """confluent-kafka sends the request, and the cluster answers as Kafka's controller
    does: INVALID_REQUEST for that name, which is left alone, the others done. Ours
    does the same without sending the duplicated name."""
    got = side_by_side(name_a_topic_twice, cluster, topic_name)
    assert got["kafka_client"] == got["confluent_kafka"]
    created, grown, deleted, partitions, exists = got["kafka_client"]
    E = ck.KafkaError
    assert [c for _, c in created] == [None, E.INVALID_REQUEST]      # new-other, new-...
    assert [c for _, c in grown] == [None, E.INVALID_REQUEST]        # other, name
    assert [c for _, c in deleted] == [None, E.INVALID_REQUEST]      # new-other, name
    assert partitions == [2, 3]
    assert exists == [True, True, False, False]


WATCHED = ("retention.ms", "cleanup.policy", "segment.ms")


def alter_topic_configs(top, m, impl, cluster, topic):
    """incremental_alter_configs() and alter_configs() steps on one topic: each step's
    error code (None: done) and the topic's configs afterwards, as the cluster holds
    them and as describe_configs() reports them."""
    name = f"{topic}-{impl}"
    cluster.create_topic(name, partitions=1)
    admin = admin_client(m, cluster)
    res = m.ConfigResource(m.ResourceType.TOPIC, name)
    CE, OP = m.ConfigEntry, m.AlterConfigOpType

    def incremental(*entries, **options):
        r = m.ConfigResource(m.ResourceType.TOPIC, name, incremental_configs=[
            CE(k, v, incremental_operation=op) for k, v, op in entries])
        return outcome(admin.incremental_alter_configs([r], **options)[r])

    def outcome(future):
        err = future.exception(15)
        held = cluster.describe_topic(name).config
        own = {k: held[k] for k in WATCHED}
        described = admin.describe_configs([res])[res].result(15)
        shown = {k: (described[k].value, described[k].source) for k in WATCHED}
        return (None if err is None else err.args[0].code(),
                sorted(own.items()), sorted(shown.items()))

    steps = [
        outcome(admin.describe_configs([res])[res]),             # as created
        incremental(("retention.ms", "3600000", OP.SET), ("segment.ms", "600000", OP.SET)),
        incremental(("cleanup.policy", "compact", OP.APPEND)),
        incremental(("cleanup.policy", "delete", OP.SUBTRACT)),
        incremental(("retention.ms", None, OP.DELETE)),
        incremental(("segment.ms", "1", OP.SET), validate_only=True),
        incremental(("retention.ms", "1", OP.APPEND)),
        incremental(("no.such.config", "1", OP.SET)),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        r = m.ConfigResource(m.ResourceType.TOPIC, name, set_config={"retention.ms": "7200000"})
        steps.append(outcome(admin.alter_configs([r])[r]))
        missing = m.ConfigResource(m.ResourceType.TOPIC, f"missing-{name}",
                                   set_config={"retention.ms": "1"})
        steps.append(outcome(admin.alter_configs([missing])[missing]))
    return steps


def test_topic_configs_altered_as_on_kafka(cluster, topic_name):
    """The test cluster serves AlterConfigs and IncrementalAlterConfigs for topics; both
    clients' calls land the same, and as Kafka applies them."""
    got = side_by_side(alter_topic_configs, cluster, topic_name)
    assert got["kafka_client"] == got["confluent_kafka"]
    codes = [code for code, _, _ in got["kafka_client"]]
    E = ck.KafkaError
    assert codes == [None, None, None, None, None, None, E.INVALID_CONFIG, E.INVALID_CONFIG,
                     None, E.UNKNOWN_TOPIC_OR_PART]
    own = [dict(cfg) for _, cfg, _ in got["kafka_client"]]
    created = own[0]
    assert own[1] == {**created, "retention.ms": 3600000, "segment.ms": 600000}
    assert own[2]["cleanup.policy"] == "delete,compact"
    assert own[3]["cleanup.policy"] == "compact"
    assert own[4]["retention.ms"] == created["retention.ms"]
    assert own[5] == own[4]                                       # validate_only
    assert own[8] == {**created, "retention.ms": 7200000}        # alter_configs replaces
    sources = dict(got["kafka_client"][8][2])
    assert sources["retention.ms"] == ("7200000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert sources["segment.ms"][1] == ConfigSource.DEFAULT_CONFIG.value


def read_metadata_librdkafka_committed(top, m, impl, cluster, topic):
    """A librdkafka consumer commits an offset with metadata; this client's AdminClient
    and Consumer read it back."""
    name = f"{topic}-{impl}"
    group = f"group-{name}"
    cluster.create_topic(name, partitions=1)
    writer = ck.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    writer.commit(offsets=[ck.TopicPartition(name, 0, 5, "from librdkafka")],
                  asynchronous=False)
    writer.close()
    admin = admin_client(m, cluster)
    listed = admin.list_consumer_group_offsets(
        [top.ConsumerGroupTopicPartitions(group)])[group].result(15)
    reader = top.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        committed = reader.committed([top.TopicPartition(name, 0)], timeout=15)
    finally:
        reader.close()
    return ([(tp.offset, tp.metadata) for tp in listed.topic_partitions],
            [(tp.offset, tp.metadata) for tp in committed])


def test_commit_metadata_librdkafka_wrote_reads_as_there(cluster, topic_name):
    """librdkafka stores the metadata with a NUL after it and confluent-kafka reads up to
    it; ours read it the same, not with the NUL."""
    got = side_by_side(read_metadata_librdkafka_committed, cluster, topic_name)
    assert got["kafka_client"] == got["confluent_kafka"] \
        == ([(5, "from librdkafka")], [(5, "from librdkafka")])


def group_offsets_in_result_order(top, m, impl, cluster, topic):
    """alter_consumer_group_offsets() and list_consumer_group_offsets() given partitions
    out of order (and one of a missing topic): the result's partitions, in order."""
    first, second = f"b-{topic}-{impl}", f"a-{topic}-{impl}"
    for name in (first, second):
        cluster.create_topic(name, partitions=3)
    group = f"group-{topic}-{impl}"
    admin = admin_client(m, cluster)
    TP, CGTP = top.TopicPartition, top.ConsumerGroupTopicPartitions

    def rows(result):
        return [(tp.topic.replace(f"-{impl}", "-X"), tp.partition, tp.offset,
                 None if tp.error is None else tp.error.code())
                for tp in result.topic_partitions]

    altered = admin.alter_consumer_group_offsets([CGTP(group, [
        TP(first, 2, 1), TP(second, 1, 2), TP(f"missing-{topic}-{impl}", 0, 3),
        TP(first, 0, 4)])])[group].result(15)
    listed = admin.list_consumer_group_offsets([CGTP(group, [
        TP(first, 2), TP(second, 2), TP(second, 1)])])[group].result(15)
    return rows(altered), rows(listed)


def test_group_offsets_results_are_sorted_as_there(cluster, topic_name):
    got = side_by_side(group_offsets_in_result_order, cluster, topic_name)
    assert got["kafka_client"] == got["confluent_kafka"]
    altered, listed = got["kafka_client"]
    assert altered == sorted(altered) and listed == sorted(listed)


def describe_with_a_broker_down(top, m, impl, cluster, topic):
    """describe_topics() of a topic with a replica on a broker that is down: that
    replica's Node as a program sees it."""
    name = f"{topic}-{impl}"
    cluster.create_topic(name, partitions=1, replication_factor=3)
    cluster.wait_in_sync(name)
    admin = admin_client(m, cluster)
    down = cluster.broker_ids[-1]
    cluster.stop_broker(down)
    try:
        described = admin.describe_topics(top.TopicCollection([name]))[name].result(15)
    finally:
        cluster.start_broker(down)
    replica = next(n for n in described.partitions[0].replicas if n.id == down)
    return replica.id, replica.host, replica.port, replica.rack, str(replica)


def test_a_replica_on_a_broker_that_is_down_is_described_as_there(cluster, topic_name):
    got = side_by_side(describe_with_a_broker_down, cluster, topic_name)
    assert got["kafka_client"] == got["confluent_kafka"]
    assert got["kafka_client"][1:3] == (None, 0)


def alter_configs_naming_a_topic_twice(top, m, impl, cluster, topic):
    """alter_configs() naming one topic twice beside another: the retention each topic
    has afterwards, and the error codes."""
    twice, other = f"twice-{topic}-{impl}", f"other-{topic}-{impl}"
    for name in (twice, other):
        cluster.create_topic(name, partitions=1)
    admin = admin_client(m, cluster)
    R = m.ConfigResource
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        futures = admin.alter_configs([R("topic", twice, set_config={"retention.ms": "1000"}),
                                       R("topic", other, set_config={"retention.ms": "2000"}),
                                       R("topic", twice, set_config={"retention.ms": "3000"})])
    codes = sorted(f.exception(15).args[0].code() for f in futures.values())
    return codes, [cluster.describe_topic(t).config["retention.ms"] for t in (twice, other)]


def test_a_resource_named_twice_in_alter_configs_is_left_alone(cluster, topic_name):
    """Kafka refuses a resource named twice (each time, INVALID_REQUEST) and alters the
    others; librdkafka sends such a request and cannot read that answer (_BAD_MSG on
    every future, the other topic altered). Ours refuses the call without a request
    (_INVALID_ARG, docs/admin.md)."""
    got = side_by_side(alter_configs_naming_a_topic_twice, cluster, topic_name)
    default = got["kafka_client"][1][0]
    assert got["confluent_kafka"] == ([ck.KafkaError._BAD_MSG] * 2, [default, 2000])
    assert got["kafka_client"] == ([ck.KafkaError._INVALID_ARG] * 2, [default, default])


_TEXTS = {"commit": "by commit()", "admin": "by the admin client", "txn": "in a transaction"}


def write_metadata_every_way(top, m, impl, cluster, topic, texts=_TEXTS):
    """Commit metadata (``texts``, per way) written by a consumer's commit(), by
    alter_consumer_group_offsets() and by send_offsets_to_transaction(), each in a group
    of its own; what confluent-kafka's consumer reads back of each, and what ours reads."""
    topic = f"{topic}-{impl}"
    cluster.create_topic(topic)
    conf = {"bootstrap.servers": cluster.bootstrap_servers}
    groups = {way: f"{way}-{topic}" for way in ("commit", "admin", "txn")}
    consumer = top.Consumer({**conf, "group.id": groups["commit"]})
    consumer.commit(offsets=[top.TopicPartition(topic, 0, 1, texts["commit"])],
                    asynchronous=False)
    consumer.close()
    admin = admin_client(m, cluster)
    admin.alter_consumer_group_offsets([top.ConsumerGroupTopicPartitions(
        groups["admin"], [top.TopicPartition(topic, 0, 2, texts["admin"])])]
    )[groups["admin"]].result(15)
    producer = top.Producer({**conf, "transactional.id": f"txn-{topic}"})
    producer.init_transactions(15)
    producer.begin_transaction()
    member = top.Consumer({**conf, "group.id": groups["txn"]})
    producer.send_offsets_to_transaction(
        [top.TopicPartition(topic, 0, 3, texts["txn"])],
        member.consumer_group_metadata(), 15)
    producer.commit_transaction(15)
    member.close()
    read = {}
    for reader_module in (ck, importlib.import_module("kafka_client")):
        for way, group in groups.items():
            reader = reader_module.Consumer({**conf, "group.id": group})
            try:
                (tp,) = reader.committed([reader_module.TopicPartition(topic, 0)], timeout=15)
            finally:
                reader.close()
            read[(reader_module.__name__, way)] = (tp.offset, tp.metadata)
    return read


def test_commit_metadata_reads_back_in_both_clients_whoever_wrote_it(cluster, topic_name):
    """confluent-kafka sends commit metadata with a NUL after it and its readers stop at
    that NUL; metadata ours wrote without one read in confluent-kafka as 'helloV' (past its
    end). Now ours sends it as confluent-kafka does, from every way of committing."""
    got = side_by_side(write_metadata_every_way, cluster, topic_name)
    expected = {(reader, way): value for reader in IMPLS for way, value in (
        ("commit", (1, "by commit()")), ("admin", (2, "by the admin client")),
        ("txn", (3, "in a transaction")))}
    assert got["kafka_client"] == got["confluent_kafka"] == expected


def test_empty_commit_metadata_reads_back_empty_in_both_clients(cluster, topic_name):
    """confluent-kafka's test_consumer_topicpartition_metadata: metadata "" reads back as
    "" (librdkafka sends a lone NUL), None as None. Ours sent "" as no metadata at all:
    both clients read it back as None."""
    empty = {way: "" for way in _TEXTS}
    got = side_by_side(write_metadata_every_way, cluster, f"{topic_name}-empty", empty)
    expected = {(reader, way): (offset, "") for reader in IMPLS
                for way, offset in (("commit", 1), ("admin", 2), ("txn", 3))}
    assert got["kafka_client"] == got["confluent_kafka"] == expected
