"""confluent-kafka drop-in: the values of the statistics JSON (``stats_cb``) that
monitoring code reads, side by side with confluent-kafka on the test cluster (the keys
themselves are compared in ``integration/test_client_callbacks.py``)."""
from __future__ import annotations

import json
import re
import time

import pytest

import kafka_client
import kafka_client.admin

ck = pytest.importorskip("confluent_kafka")
ck_admin = pytest.importorskip("confluent_kafka.admin")

from kafka_client.testing import Cluster  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MODULES = (ck, kafka_client)
ADMIN = {ck: ck_admin, kafka_client: kafka_client.admin}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("statistics"))) as c:
        yield c


def first_document(client, docs, timeout=20.0):
    """Serve the client's callbacks until ``stats_cb`` has been called: its document."""
    deadline = time.monotonic() + timeout
    while not docs and time.monotonic() < deadline:
        client.poll(0.1)
    assert docs, f"no statistics from {type(client)} in {timeout} s"
    return json.loads(docs[0])


def statistics_names(module, bootstrap):
    """The ``name`` and ``client_id`` of a Producer's, a Consumer's and an AdminClient's
    documents, each client with its own ``client.id``."""
    names = []
    for kind, make in (("producer", module.Producer), ("consumer", module.Consumer),
                       ("admin", ADMIN[module].AdminClient)):
        docs = []
        conf = {"bootstrap.servers": bootstrap, "client.id": f"billing-{kind}",
                "statistics.interval.ms": 100, "stats_cb": docs.append}
        if kind == "consumer":
            conf["group.id"] = "statistics-names"
        client = make(conf)
        doc = first_document(client, docs)
        if hasattr(client, "close"):   # confluent-kafka's AdminClient has none
            client.close()
        names.append((doc["name"], doc["client_id"], doc["type"]))
    return names


def test_the_document_name_is_client_id_hash_type_and_number_as_confluent(cluster):
    """Exporters label their series with ``name``: librdkafka's handle name,
    ``<client.id>#<type>-<n>`` (n counts the process's clients of every type; an
    AdminClient is a producer). It was the I/O thread's name (``kafka-producer-1``), the
    same for every client.id, so two applications' series collided."""
    got = {module.__name__: statistics_names(module, cluster.bootstrap_servers)
           for module in MODULES}
    for module, names in got.items():
        for name, client_id, kind in names:
            assert re.fullmatch(rf"{re.escape(client_id)}#{kind}-[0-9]+", name), (module, names)
    without_numbers = {module: [(re.sub(r"[0-9]+$", "N", name), client_id, kind)
                                for name, client_id, kind in names]
                       for module, names in got.items()}
    assert without_numbers["kafka_client"] == without_numbers["confluent_kafka"] == [
        ("billing-producer#producer-N", "billing-producer", "producer"),
        ("billing-consumer#consumer-N", "billing-consumer", "consumer"),
        ("billing-admin#producer-N", "billing-admin", "producer")]
    numbers = [int(name.rpartition("-")[2]) for name, _, _ in got["kafka_client"]]
    assert numbers == sorted(set(numbers)), numbers   # one count over every type


PARTITION_OFFSETS = ("committed_offset", "commited_offset", "eof_offset", "hi_offset",
                     "app_offset", "stored_offset", "next_offset")


def partition_offsets_at_the_end(module, bootstrap, topic):
    """A group member that read the whole partition (5 messages) and committed nothing,
    without ``enable.partition.eof``: its partition's offsets in the first document that
    shows the end reached (or the last one after 20 s)."""
    producer = module.Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        producer.produce(topic, b"%d" % i, partition=0)
    assert producer.flush(20) == 0
    docs = []
    consumer = module.Consumer({
        "bootstrap.servers": bootstrap, "group.id": topic,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "statistics.interval.ms": 100, "stats_cb": docs.append})
    consumer.subscribe([topic])
    read, offsets = 0, None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            read += 1
        parts = [json.loads(d)["topics"].get(topic, {}).get("partitions", {}).get("0")
                 for d in docs]
        docs.clear()
        for part in filter(None, parts):
            offsets = {name: part[name] for name in PARTITION_OFFSETS}
        if read == 5 and offsets is not None and offsets["eof_offset"] == 5:
            break
    consumer.close()
    return read, offsets


def test_a_partition_read_to_its_end_without_commits_reads_as_on_confluent(cluster,
                                                                          topic_name):
    """``committed_offset`` is librdkafka's OFFSET_INVALID (-1001) while the group has no
    offset (it was -1), and ``eof_offset`` is where the fetcher reached the end even
    without ``enable.partition.eof`` (it stayed -1: set only when an EOF event was
    asked for): a lag exporter tells "nothing committed" and "caught up" as it does
    with confluent-kafka."""
    got = {}
    for module in MODULES:
        topic = f"{topic_name}-{module.__name__}"
        cluster.create_topic(topic, partitions=1)
        got[module.__name__] = partition_offsets_at_the_end(
            module, cluster.bootstrap_servers, topic)
    assert got["kafka_client"] == got["confluent_kafka"] == (5, {
        "committed_offset": -1001, "commited_offset": -1001, "eof_offset": 5,
        "hi_offset": 5, "app_offset": 5, "stored_offset": 5, "next_offset": 5}), got


def broker_entries(module, cluster, topic):
    """A producer that wrote to partition 0 of ``topic``: its last document's brokers,
    as (name, nodeid, nodename, source, toppars) each, and the leader's state."""
    docs = []
    producer = module.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                "statistics.interval.ms": 100, "stats_cb": docs.append})
    producer.produce(topic, b"x", partition=0)
    assert producer.flush(20) == 0
    had = len(docs)
    deadline = time.monotonic() + 10
    while len(docs) < had + 2 and time.monotonic() < deadline:   # one after delivery
        producer.poll(0.1)
    brokers = json.loads(docs[-1])["brokers"]
    leader = cluster.leader(topic, 0)
    entries = sorted((name, b["nodeid"], b["nodename"], b["source"], sorted(b["toppars"]))
                     for name, b in brokers.items())
    return entries, [b["state"] for b in brokers.values() if b["nodeid"] == leader]


def test_every_broker_is_listed_once_by_its_id_as_on_confluent(kafka_cluster, topic_name):
    """librdkafka 2.16 lists each broker of the metadata as ``host:port/id`` (``INIT``
    while not connected to) and no bootstrap entry once the metadata named the brokers;
    here a broker never connected to was missing, and each bootstrap server stayed an
    entry of its own (``/bootstrap``, node id -1, -2, ...: two entries for one broker,
    and per-broker gauges of an exporter under names the next run does not have)."""
    kafka_cluster.create_topic(topic_name, partitions=1, replication_factor=1)
    expected = sorted(
        (f"{address}/{node}", node, address, "learned",
         [f"{topic_name}-0"] if node == kafka_cluster.leader(topic_name, 0) else [])
        for node, address in zip(kafka_cluster.broker_ids,
                                 kafka_cluster.bootstrap_servers.split(",")))
    got = {module.__name__: broker_entries(module, kafka_cluster, topic_name)
           for module in MODULES}
    assert got["kafka_client"] == got["confluent_kafka"] == (expected, ["UP"]), got


def fetch_queue_while_behind(module, bootstrap, topic, count):
    """A group member that read 10 of ``count`` messages while the rest was fetched, then
    reads slowly: its partition's fetch queue, position and lag in the next document."""
    producer = module.Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, b"v" * 100, partition=0)
    assert producer.flush(20) == 0
    docs = []
    consumer = module.Consumer({
        "bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "statistics.interval.ms": 200, "stats_cb": docs.append})
    consumer.subscribe([topic])
    read = 0
    deadline = time.monotonic() + 30
    while read < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        read += msg is not None and msg.error() is None
    # the rest fetched: the end reached (the fetcher's next offset) in a document
    part = {}
    while part.get("next_offset") != count and time.monotonic() < deadline:
        del docs[:]
        while not docs and time.monotonic() < deadline:
            time.sleep(0.05)      # slowly: a message now and then
            msg = consumer.poll(0.01)
            read += msg is not None and msg.error() is None
        if docs:
            part = json.loads(docs[-1])["topics"][topic]["partitions"]["0"]
    consumer.close()
    return part


def test_fetched_messages_waiting_for_the_application_count_in_the_fetch_queue(
        cluster, topic_name):
    """``fetchq_cnt``/``fetchq_size`` count the fetched messages the application has not
    taken yet, as librdkafka's do (the backlog held in the client); here the messages
    of a chunk poll() had started handing out were counted nowhere (0 while 1,900 of them
    waited)."""
    count = 2000
    got = {}
    for module in MODULES:
        topic = f"{topic_name}-{module.__name__}"
        cluster.create_topic(topic, partitions=1)
        got[module.__name__] = fetch_queue_while_behind(
            module, cluster.bootstrap_servers, topic, count)
    for module, part in got.items():
        assert part.get("next_offset") == count, (module, part)
        behind = count - part["app_offset"]
        # librdkafka counts a few more than the messages it holds (its queue's other ops)
        assert behind > count // 2 and behind <= part["fetchq_cnt"] <= behind + 50, \
            (module, part)
        # the values' bytes at least; batches not yet handed out count their wire bytes
        assert behind * 100 <= part["fetchq_size"] <= behind * 200, (module, part)


def eos_through_transactions(module, bootstrap, topic):
    """A transactional producer's ``eos`` (states, epochs assigned) before
    init_transactions(), after it, in a transaction, after a commit and an abort."""
    docs = []
    producer = module.Producer({"bootstrap.servers": bootstrap, "transactional.id": topic,
                                "statistics.interval.ms": 100, "stats_cb": docs.append})

    def eos():
        producer.poll(0)     # serves the documents made while the last call blocked
        del docs[:]
        deadline = time.monotonic() + 10
        while len(docs) < 2 and time.monotonic() < deadline:   # one made from now on
            producer.poll(0.05)
        e = json.loads(docs[-1])["eos"]
        return (e["idemp_state"], e["txn_state"], e["txn_may_enq"], e["epoch_cnt"],
                e["producer_epoch"])

    seen = [eos()]
    producer.init_transactions(20)
    seen.append(eos())
    producer.begin_transaction()
    producer.produce(topic, b"x")
    assert producer.flush(20) == 0
    seen.append(eos())
    producer.commit_transaction(20)
    seen.append(eos())
    producer.begin_transaction()
    producer.produce(topic, b"y")
    producer.abort_transaction(20)
    seen.append(eos())
    return seen


def test_a_transactional_producers_eos_reads_as_on_confluent(cluster, topic_name):
    """``epoch_cnt`` counts the producer id given by init_transactions() (it stayed 0:
    only the idempotent producer's InitProducerId was counted) and the id's state is
    ``Init`` until init_transactions() asks for one (it said ``RequestPID``)."""
    got = {}
    for module in MODULES:
        topic = f"{topic_name}-{module.__name__}"
        cluster.create_topic(topic, partitions=1)
        got[module.__name__] = eos_through_transactions(module, cluster.bootstrap_servers,
                                                        topic)
    assert got["kafka_client"] == got["confluent_kafka"] == [
        ("Init", "Init", False, 0, -1),
        ("Assigned", "Ready", False, 1, 0),
        ("Assigned", "InTransaction", True, 1, 0),
        ("Assigned", "Ready", False, 1, 0),
        ("Assigned", "Ready", False, 1, 0)], got


def manual_assignment_states(module, bootstrap, topic):
    """A consumer with a group.id that assigns two partitions itself, reads them to the
    end and pauses one: each partition's ``fetch_state`` and the group's
    ``assignment_size``, before and after the pause."""
    producer = module.Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(topic, b"%d" % i, partition=i % 2)
    assert producer.flush(20) == 0
    docs = []
    consumer = module.Consumer({
        "bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False,
        "statistics.interval.ms": 100, "stats_cb": docs.append})
    consumer.assign([module.TopicPartition(topic, 0, 0), module.TopicPartition(topic, 1, 0)])
    read = 0
    deadline = time.monotonic() + 20
    while read < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        read += msg is not None and msg.error() is None

    def states():
        del docs[:]
        end = time.monotonic() + 10
        while len(docs) < 2 and time.monotonic() < end:   # one made from now on
            consumer.poll(0.05)
        doc = json.loads(docs[-1])
        parts = doc["topics"][topic]["partitions"]
        return ({p: parts[p]["fetch_state"] for p in ("0", "1")},
                doc["cgrp"]["assignment_size"])

    seen = [read, states()]
    consumer.pause([module.TopicPartition(topic, 0)])
    seen.append(states())
    consumer.close()
    return seen


def test_a_manual_assignment_and_a_pause_read_as_on_confluent(cluster, topic_name):
    """``fetch_state`` takes librdkafka's values only: a paused partition stays
    ``active`` there (it read ``paused``, a value no exporter written for librdkafka
    knows); ``cgrp.assignment_size`` is what the group gave, 0 for partitions the
    application assigned itself (it counted them)."""
    got = {}
    for module in MODULES:
        topic = f"{topic_name}-{module.__name__}"
        cluster.create_topic(topic, partitions=2)
        got[module.__name__] = manual_assignment_states(module, cluster.bootstrap_servers,
                                                        topic)
    assert got["kafka_client"] == got["confluent_kafka"] == [
        10, ({"0": "active", "1": "active"}, 0), ({"0": "active", "1": "active"}, 0)], got


def rebalance_count_of_a_member(module, bootstrap, topic):
    """Member A of an eager group while B joins and leaves again: A's rebalance
    callbacks and its last document's ``cgrp.rebalance_cnt``."""
    conf = {"bootstrap.servers": bootstrap, "group.id": topic,
            "partition.assignment.strategy": "range", "heartbeat.interval.ms": 500}
    docs, calls = [], []
    a = module.Consumer(dict(conf, **{"statistics.interval.ms": 100,
                                      "stats_cb": docs.append}))
    a.subscribe([topic], on_assign=lambda c, ps: calls.append("assign"),
                on_revoke=lambda c, ps: calls.append("revoke"))

    def poll_until(done, others=()):
        deadline = time.monotonic() + 30
        while not done() and time.monotonic() < deadline:
            for consumer in (a, *others):
                consumer.poll(0.05)
        assert done(), (module.__name__, calls)

    poll_until(lambda: len(a.assignment()) == 4)
    b = module.Consumer(conf)
    b.subscribe([topic])
    poll_until(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, [b])
    b.close()
    poll_until(lambda: len(a.assignment()) == 4)
    del docs[:]
    poll_until(lambda: len(docs) >= 2)            # a document made from now on
    seen = (list(calls), json.loads(docs[-1])["cgrp"]["rebalance_cnt"])
    a.close()
    return seen


def test_rebalance_cnt_counts_assignments_and_revocations_as_on_confluent(cluster,
                                                                          topic_name):
    """``cgrp.rebalance_cnt`` counts the assignments and revocations handed to the
    application, as librdkafka's ("assign or revoke"): a member that saw another join
    and leave says 5 (assign, revoke, assign, revoke, assign); it counted completed
    rebalances (3), so a rebalance-rate panel read half of confluent-kafka's."""
    got = {}
    for module in MODULES:
        topic = f"{topic_name}-{module.__name__}"
        cluster.create_topic(topic, partitions=4)
        got[module.__name__] = rebalance_count_of_a_member(
            module, cluster.bootstrap_servers, topic)
    assert got["kafka_client"] == got["confluent_kafka"] == (
        ["assign", "revoke", "assign", "revoke", "assign"], 5), got


def partition_counts_after_delivery(module, bootstrap, topic, idempotent):
    """A producer's partition after 11 messages were delivered: the message counts and
    idempotence sequences of its last document."""
    docs = []
    producer = module.Producer({"bootstrap.servers": bootstrap,
                                "enable.idempotence": idempotent,
                                "statistics.interval.ms": 100, "stats_cb": docs.append})
    for i in range(11):
        producer.produce(topic, b"v", partition=0)
    assert producer.flush(20) == 0
    producer.poll(0)
    del docs[:]
    deadline = time.monotonic() + 10
    while len(docs) < 2 and time.monotonic() < deadline:     # one made from now on
        producer.poll(0.05)
    part = json.loads(docs[-1])["topics"][topic]["partitions"]["0"]
    return {name: part[name] for name in ("txmsgs", "msgs", "msgq_cnt", "xmit_msgq_cnt",
                                          "msgs_inflight", "next_ack_seq", "next_err_seq",
                                          "acked_msgid")}


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_a_partitions_counts_after_delivery_read_as_on_confluent(cluster, topic_name,
                                                                  idempotent):
    """``acked_msgid`` is kept for idempotence only, as librdkafka's (a plain producer
    said how many messages were acknowledged there; librdkafka says 0)."""
    got = {}
    for module in MODULES:
        topic = f"{topic_name}-{module.__name__}"
        cluster.create_topic(topic, partitions=1)
        got[module.__name__] = partition_counts_after_delivery(
            module, cluster.bootstrap_servers, topic, idempotent)
    seq = 11 if idempotent else 0
    assert got["kafka_client"] == got["confluent_kafka"] == {
        "txmsgs": 11, "msgs": 11, "msgq_cnt": 0, "xmit_msgq_cnt": 0, "msgs_inflight": 0,
        "next_ack_seq": seq, "next_err_seq": seq, "acked_msgid": seq}, got
