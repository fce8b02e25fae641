"""confluent-kafka drop-in: small programs written the way confluent-kafka users write them
(Stack Overflow answers, tutorials, issue threads), run against confluent-kafka and ours on
the test cluster, comparing what a program would branch on."""
from __future__ import annotations

import importlib
import time

import pytest

ck = pytest.importorskip("confluent_kafka")

from kafka_client.testing import Cluster  # noqa: E402

pytestmark = pytest.mark.integration

IMPLS = ("confluent_kafka", "kafka_client")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One broker that does not create topics on first use."""
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("programs")),
                 broker_config={"auto.create.topics.enable": "false"}) as c:
        yield c


def side_by_side(program, *args):
    """``program(module, *args)`` for confluent-kafka and ours: {module name: result}."""
    return {impl: program(importlib.import_module(impl), impl, *args) for impl in IMPLS}


def produce_to_a_missing_topic(k, impl, bootstrap, topic, conf):
    """Produce one message to a topic that does not exist, flush, and try again: the
    delivery report's error code, and what the second produce() does."""
    p = k.Producer({"bootstrap.servers": bootstrap, **conf})
    reports = []
    started = time.monotonic()
    p.produce(f"{topic}-{impl}", b"x",
              on_delivery=lambda err, msg: reports.append((err.code(), time.monotonic())))
    assert p.flush(15) == 0
    try:
        p.produce(f"{topic}-{impl}", b"again")
        again = "queued"
    except k.KafkaException as e:
        again = e.args[0].name()
    p.purge()
    p.flush(0)
    return [(code, at - started) for code, at in reports], again


@pytest.mark.parametrize("conf", [
    {"message.timeout.ms": 3000},                                           # times out first
    {"message.timeout.ms": 10000, "topic.metadata.propagation.max.ms": 2000},
], ids=["message-timeout-first", "propagation-time-first"])
def test_a_missing_topic_fails_its_messages_like_librdkafka(cluster, topic_name, conf):
    got = side_by_side(produce_to_a_missing_topic, cluster.bootstrap_servers, topic_name, conf)
    if "topic.metadata.propagation.max.ms" in conf:
        # known not to exist: its message fails with the broker's error, produce() refuses
        expected, after = (ck.KafkaError.UNKNOWN_TOPIC_OR_PART, "_UNKNOWN_TOPIC"), 2.0
    else:
        # message.timeout.ms came first: a timeout, and the topic may still appear
        expected, after = (ck.KafkaError._MSG_TIMED_OUT, "queued"), 3.0
    for impl, (reports, again) in got.items():
        # the time the rule gives, give or take librdkafka's 1 s timer and a loaded machine
        assert [(code, after - 0.1 <= at < after + 1.5) for code, at in reports] == \
            [(expected[0], True)] and again == expected[1], (impl, got)


def produce_n(k, bootstrap, topic, n, partition=0):
    p = k.Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, b"v%d" % i, b"k%d" % i, partition=partition)
    assert p.flush(10) == 0


def first_offsets(consumer, n=1, timeout=20):
    got, end = [], time.monotonic() + timeout
    while len(got) < n and time.monotonic() < end:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.offset())
    return got


def start_in_on_assign(k, impl, bootstrap, topic, call_assign):
    """The group has committed offset 3 of 5; ``on_assign`` sets every partition's offset
    to the beginning, then calls ``assign()`` or just returns: the first offset read."""
    topic = f"{topic}-{impl}"
    admin = k.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([k.admin.NewTopic(topic, 1, 1)])[topic].result(10)
    produce_n(k, bootstrap, topic, 5)
    conf = {"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False}
    c = k.Consumer(conf)
    c.commit(offsets=[k.TopicPartition(topic, 0, 3)], asynchronous=False)
    c.close()

    def on_assign(consumer, partitions):
        for tp in partitions:
            tp.offset = k.OFFSET_BEGINNING
        if call_assign:
            consumer.assign(partitions)

    c = k.Consumer(conf)
    try:
        c.subscribe([topic], on_assign=on_assign)
        return first_offsets(c)
    finally:
        c.close()


@pytest.mark.parametrize("call_assign", [True, False], ids=["assign", "return"])
def test_offsets_set_in_on_assign_count_only_through_assign(cluster, topic_name, call_assign):
    """A common recipe sets the offsets in ``on_assign``; they take effect when the
    callback passes them to ``assign()``. confluent-kafka assigns what the group gave when
    the callback returns without assigning (its changes to the list are ignored), and so
    does ours: the consumer starts at the committed offset."""
    importlib.import_module("confluent_kafka.admin")
    got = side_by_side(start_in_on_assign, cluster.bootstrap_servers, topic_name, call_assign)
    assert got["kafka_client"] == got["confluent_kafka"] == [0 if call_assign else 3]


def commit_results(k, impl, bootstrap, topic):
    """Consume 3 messages of partition 0 and 1 of partition 1 (partition 2 is empty),
    then commit the stored offsets synchronously, then explicit offsets one of which is
    OFFSET_INVALID: each result, as (partition, offset, error) sorted."""
    topic = f"{topic}-{impl}"
    admin = k.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([k.admin.NewTopic(topic, 3, 1)])[topic].result(10)
    produce_n(k, bootstrap, topic, 3, partition=0)
    produce_n(k, bootstrap, topic, 1, partition=1)
    c = k.Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                    "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        assert len(first_offsets(c, 4)) == 4

        def rows(tps):
            return sorted((tp.partition, tp.offset, tp.error) for tp in tps)
        stored = rows(c.commit(asynchronous=False))
        explicit = rows(c.commit(offsets=[k.TopicPartition(topic, 0, 2),
                                          k.TopicPartition(topic, 2, k.OFFSET_INVALID)],
                                 asynchronous=False))
        committed = rows(c.committed([k.TopicPartition(topic, p) for p in range(3)],
                                     timeout=10))
        return stored, explicit, committed
    finally:
        c.close()


def test_a_synchronous_commit_returns_every_partition_it_was_given(cluster, topic_name):
    """A program that prints or checks what ``commit(asynchronous=False)`` returns sees
    every partition it named (or, committing the stored offsets, every assigned one),
    those with nothing to commit with their OFFSET_INVALID, as in confluent-kafka; only
    the others are committed."""
    importlib.import_module("confluent_kafka.admin")
    got = side_by_side(commit_results, cluster.bootstrap_servers, topic_name)
    assert got["kafka_client"] == got["confluent_kafka"]
    invalid = ck.OFFSET_INVALID
    assert got["kafka_client"] == ([(0, 3, None), (1, 1, None), (2, invalid, None)],
                                   [(0, 2, None), (2, invalid, None)],
                                   [(0, 2, None), (1, 1, None), (2, invalid, None)])


def events_served_by_poll(k, impl, bootstrap, topic):
    """What ``poll(0)`` returns after one batch of 5 delivered messages (with delivery
    callbacks), then after one batch of 3 (without), then with nothing left."""
    topic = f"{topic}-{impl}"
    admin = k.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([k.admin.NewTopic(topic, 1, 1)])[topic].result(10)
    p = k.Producer({"bootstrap.servers": bootstrap, "linger.ms": 200})
    served = []
    for count, callback in ((5, lambda err, msg: None), (3, None)):
        for _ in range(count):
            p.produce(topic, b"x", on_delivery=callback)
        time.sleep(1.5)     # delivered by then; flush() would serve the reports itself
        served.append(p.poll(0))
    served.append(p.poll(0))
    return served


def test_poll_counts_events_not_messages(cluster, topic_name):
    """``Producer.poll()`` returns how many events it served, as librdkafka counts them:
    one per delivery report batch (confluent-kafka 2.16 returns 1 for a batch of 5)."""
    importlib.import_module("confluent_kafka.admin")
    got = side_by_side(events_served_by_poll, cluster.bootstrap_servers, topic_name)
    assert got["kafka_client"] == got["confluent_kafka"] == [1, 1, 0]


def read_to_the_end(k, impl, bootstrap, topic):
    """The common loop of ``enable.partition.eof`` programs: read until every assigned
    partition reported _PARTITION_EOF; the messages read and the EOF events' texts."""
    topic = f"{topic}-{impl}"
    admin = k.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([k.admin.NewTopic(topic, 2, 1)])[topic].result(10)
    produce_n(k, bootstrap, topic, 2, partition=0)
    produce_n(k, bootstrap, topic, 3, partition=1)
    c = k.Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                    "auto.offset.reset": "earliest", "enable.partition.eof": True})
    try:
        c.subscribe([topic])
        read, at_end, texts = 0, set(), []
        end = time.monotonic() + 20
        while time.monotonic() < end:
            msg = c.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == k.KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    texts.append(str(msg.error()))
                    if at_end == {tp.partition for tp in c.assignment()}:
                        break
                continue
            read += 1
        return read, sorted(texts)
    finally:
        c.close()


def test_reading_to_the_end_of_every_partition(cluster, topic_name):
    importlib.import_module("confluent_kafka.admin")
    got = side_by_side(read_to_the_end, cluster.bootstrap_servers, topic_name)
    assert got["kafka_client"] == got["confluent_kafka"]
    assert got["kafka_client"][0] == 5


def new_topic(k, bootstrap, topic, partitions=1):
    admin = k.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([k.admin.NewTopic(topic, partitions, 1)])[topic].result(10)
    return topic


def commit_in_on_revoke(k, impl, bootstrap, topic):
    """Rebalance callbacks that log and commit synchronously in ``on_revoke`` (catching
    _NO_OFFSET), with messages read from one of two partitions: the callback events."""
    topic = new_topic(k, bootstrap, f"{topic}-{impl}", 2)
    produce_n(k, bootstrap, topic, 3, partition=0)
    events = []

    def on_assign(consumer, partitions):
        events.append(("assign", sorted((tp.partition, tp.offset) for tp in partitions)))

    def on_revoke(consumer, partitions):
        events.append(("revoke", sorted(tp.partition for tp in partitions)))
        try:
            done = consumer.commit(asynchronous=False)
            events.append(("commit", sorted((tp.partition, tp.offset) for tp in done)))
        except k.KafkaException as e:
            events.append(("commit failed", e.args[0].name()))

    conf = {"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False,
            "auto.offset.reset": "earliest"}
    c = k.Consumer(conf)
    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    read = first_offsets(c, 3)
    c.close()
    c = k.Consumer(conf)
    committed = [(tp.partition, tp.offset) for tp in c.committed(
        [k.TopicPartition(topic, p) for p in (0, 1)], timeout=10)]
    c.close()
    return read, events, committed


def store_in_on_revoke(k, impl, bootstrap, topic):
    """``enable.auto.offset.store=False`` with auto-commit on: the offsets of messages
    read are stored in ``on_revoke`` (once with an ``unassign()`` there too, as
    rebalance callbacks written for librdkafka do), then close(): the callbacks' events
    and what the group has committed afterwards."""
    got = []
    for unassign in (False, True):
        name = new_topic(k, bootstrap, f"{topic}-{impl}-{unassign}", 2)
        produce_n(k, bootstrap, name, 3, partition=0)
        events, read = [], []

        def on_revoke(consumer, partitions, unassign=unassign, events=events, read=read):
            events.append(("revoke", sorted(tp.partition for tp in partitions)))
            consumer.store_offsets(message=read[-1])
            if unassign:
                consumer.unassign()

        conf = {"bootstrap.servers": bootstrap, "group.id": name,
                "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
                "on_commit": lambda err, parts, events=events: events.append(
                    ("on_commit", err, [(tp.partition, tp.offset) for tp in parts
                                        if tp.offset >= 0]))}
        c = k.Consumer(conf)
        c.subscribe([name], on_revoke=on_revoke)
        end = time.monotonic() + 20
        while len(read) < 2 and time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                read.append(m)
        c.close()
        c = k.Consumer(conf)
        committed = [(tp.partition, tp.offset) for tp in c.committed(
            [k.TopicPartition(name, p) for p in (0, 1)], timeout=10)]
        c.close()
        got.append((len(read), events, committed))
    return got


def look_up_offsets_of_missing_partitions(k, impl, bootstrap, topic):
    """get_watermark_offsets() and offsets_for_times() of a topic that does not exist, of
    a partition past the last and of a topic looked up, then deleted: the error code each
    call raises, or each partition's in a list that also names an existing partition."""
    name = new_topic(k, bootstrap, f"{topic}-{impl}", 2)
    gone = new_topic(k, bootstrap, f"{topic}-{impl}-gone", 1)
    c = k.Consumer({"bootstrap.servers": bootstrap, "group.id": name})
    missing, past = k.TopicPartition(f"{name}-nope", 0, 0), k.TopicPartition(name, 2, 0)
    try:
        got = [c.get_watermark_offsets(k.TopicPartition(gone, 0), timeout=10)]
        admin = k.admin.AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics([gone])[gone].result(10)
        for call in (lambda: c.get_watermark_offsets(k.TopicPartition(gone, 0), timeout=10),
                     lambda: c.get_watermark_offsets(missing, timeout=10),
                     lambda: c.get_watermark_offsets(past, timeout=10),
                     lambda: c.offsets_for_times([missing], timeout=10),
                     lambda: c.offsets_for_times([past, missing], timeout=10),
                     lambda: [None if tp.error is None else tp.error.name()
                              for tp in c.offsets_for_times(
                                  [k.TopicPartition(name, 0, 0), missing], timeout=10)]):
            try:
                got.append(call())
            except k.KafkaException as e:
                got.append(e.args[0].name())
    finally:
        c.close()
    return got


def batches_with_stored_offsets(k, impl, bootstrap, topic):
    """``consume(n)`` batches with ``enable.auto.offset.store=False``, ``store_offsets()``
    per message, then one synchronous commit."""
    topic = new_topic(k, bootstrap, f"{topic}-{impl}")
    produce_n(k, bootstrap, topic, 7)
    c = k.Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                    "enable.auto.commit": False, "enable.auto.offset.store": False,
                    "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        read, end = [], time.monotonic() + 20
        while len(read) < 7 and time.monotonic() < end:
            for m in c.consume(num_messages=3, timeout=1):
                if m.error() is None:
                    read.append(m.offset())
                    c.store_offsets(message=m)
        return read, [(tp.partition, tp.offset) for tp in c.commit(asynchronous=False)]
    finally:
        c.close()


def start_at_a_time(k, impl, bootstrap, topic):
    """``offsets_for_times()`` for a time between two messages, after the last and
    before the first, then ``assign()`` with the first answer."""
    topic = new_topic(k, bootstrap, f"{topic}-{impl}")
    base = int(time.time() * 1000) - 100_000
    p = k.Producer({"bootstrap.servers": bootstrap})
    for i in range(6):
        p.produce(topic, b"v%d" % i, partition=0, timestamp=base + i * 1000)
    assert p.flush(10) == 0
    c = k.Consumer({"bootstrap.servers": bootstrap, "group.id": topic})
    try:
        answers = [[(tp.partition, tp.offset, tp.error) for tp in c.offsets_for_times(
            [k.TopicPartition(topic, 0, base + delta)], timeout=10)]
            for delta in (2500, 99_999, -5)]
        c.assign(c.offsets_for_times([k.TopicPartition(topic, 0, base + 2500)], timeout=10))
        got, end = None, time.monotonic() + 20
        while got is None and time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got = (m.offset(), m.value(), m.timestamp()[1] - base)
        return answers, got
    finally:
        c.close()


def topic_exists(k, impl, bootstrap, topic):
    """``list_topics()`` to check a topic exists before using it, the whole listing and
    one topic asked for by name (auto-creation off)."""
    topic = new_topic(k, bootstrap, f"{topic}-{impl}", 3)
    p = k.Producer({"bootstrap.servers": bootstrap})
    listing = p.list_topics(timeout=10)
    missing = p.list_topics(topic=f"{topic}-nope", timeout=10).topics.get(f"{topic}-nope")
    return (topic in listing.topics, f"{topic}-nope" in listing.topics,
            sorted(listing.topics[topic].partitions), listing.topics[topic].error,
            missing is not None and missing.error.code(),
            missing is not None and len(missing.partitions))


def produce_with_buffer_error_retry(k, impl, bootstrap, topic):
    """The produce loop of the FAQ: ``poll(0)`` after each message, and on BufferError
    (queue full) ``poll()`` and try again."""
    topic = new_topic(k, bootstrap, f"{topic}-{impl}")
    p = k.Producer({"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 10,
                    "linger.ms": 50})
    delivered, full = [], 0
    for i in range(200):
        while True:
            try:
                p.produce(topic, b"%d" % i, on_delivery=lambda err, msg: delivered.append(
                    (err, int(msg.value()))))
                break
            except BufferError:
                full += 1
                p.poll(0.1)
        p.poll(0)
    left = p.flush(10)
    return (left, len(p), full > 0, sorted(v for _, v in delivered) == list(range(200)),
            {err for err, _ in delivered})


def dead_letter_copy(k, impl, bootstrap, topic):
    """A dead-letter queue: each message read is produced again elsewhere with its key,
    value, timestamp and headers, plus one header saying why."""
    source = new_topic(k, bootstrap, f"{topic}-{impl}")
    dead = new_topic(k, bootstrap, f"{topic}-{impl}-dlq")
    p = k.Producer({"bootstrap.servers": bootstrap})
    p.produce(source, b"bad", b"k", headers=[("trace", b"1"), ("trace", b"2")],
              timestamp=1_700_000_000_123)
    p.produce(source, b"no headers")
    assert p.flush(10) == 0
    c = k.Consumer({"bootstrap.servers": bootstrap, "group.id": source})
    try:
        c.assign([k.TopicPartition(source, 0, 0)])
        for m in [c.poll(10) for _ in range(2)]:
            p.produce(dead, m.value(), m.key(), timestamp=m.timestamp()[1],
                      headers=(m.headers() or []) + [("error", "cannot parse")])
        assert p.flush(10) == 0
        c.assign([k.TopicPartition(dead, 0, 0)])
        copies = [c.poll(10) for _ in range(2)]
        return [(m.key(), m.value(), m.headers(), m.timestamp()[1] == 1_700_000_000_123)
                for m in copies]
    finally:
        c.close()


def subscribe_to_a_missing_topic(k, impl, bootstrap, topic):
    """Subscribe to a topic that does not exist (a misspelt name): the error event a
    program logs or branches on, as ``(topic, partition, offset, error name, value)``
    (the topic name left out of the texts, being each client's own)."""
    missing = f"{topic}-{impl}-nope"
    c = k.Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{impl}"})
    try:
        c.subscribe([missing])
        end = time.monotonic() + 20
        while time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and m.error():
                return (m.topic() == missing, m.partition(), m.offset(), m.error().name(),
                        m.value().replace(missing.encode(), b"<topic>"))
        return None
    finally:
        c.close()


@pytest.mark.parametrize("program", [
    commit_in_on_revoke, store_in_on_revoke, look_up_offsets_of_missing_partitions,
    batches_with_stored_offsets, start_at_a_time, topic_exists,
    produce_with_buffer_error_retry, dead_letter_copy, subscribe_to_a_missing_topic,
], ids=lambda f: f.__name__)
def test_program_behaves_as_on_confluent_kafka(cluster, topic_name, program):
    importlib.import_module("confluent_kafka.admin")
    got = side_by_side(program, cluster.bootstrap_servers, topic_name)
    assert got["kafka_client"] == got["confluent_kafka"]


def ensure_topic_by_listing_it(k, impl, cluster, topic):
    """``list_topics(topic)`` on a broker that creates topics on first use, from each
    client: the answer's error and whether the topic exists afterwards."""
    admin = importlib.import_module(k.__name__ + ".admin")
    bootstrap = cluster.bootstrap_servers
    clients = {
        "producer": lambda: k.Producer({"bootstrap.servers": bootstrap}),
        "producer-no-create": lambda: k.Producer({"bootstrap.servers": bootstrap,
                                                  "allow.auto.create.topics": False}),
        "admin": lambda: admin.AdminClient({"bootstrap.servers": bootstrap}),
        "consumer": lambda: k.Consumer({"bootstrap.servers": bootstrap, "group.id": topic}),
    }
    got = {}
    for kind, make in clients.items():
        name = f"{topic}-{impl}-{kind}"
        client = make()
        md = client.list_topics(name, timeout=10)
        if kind == "consumer":
            client.close()
        error = md.topics[name].error
        got[kind] = (None if error is None else error.name(), name in cluster.topics())
    return got


def test_list_topics_of_a_new_topic_creates_it_where_librdkafka_does(tmp_path, topic_name):
    # librdkafka's producer (and the AdminClient, a producer handle) allows auto-creation
    # in list_topics(topic); programs use it to make sure a topic exists.
    with Cluster(brokers=1, data_dir=str(tmp_path)) as auto_creating:
        got = side_by_side(ensure_topic_by_listing_it, auto_creating, topic_name)
    assert got["kafka_client"] == got["confluent_kafka"]
    assert got["kafka_client"]["producer"] == (None, True)
    assert got["kafka_client"]["consumer"] == ("UNKNOWN_TOPIC_OR_PART", False)


def assignment_calls_of_the_other_protocol(k, impl, bootstrap, topic, strategy):
    """A subscribed member whose ``on_assign`` makes the assignment with the calls of the
    other rebalance protocol (``incremental_assign()`` in an eager group, ``assign()`` in
    a cooperative one), then makes the other protocol's calls outside the callbacks: what
    each call raised, the assignment and the messages read."""
    topic = f"{topic}-{impl}"
    admin = importlib.import_module(k.__name__ + ".admin").AdminClient(
        {"bootstrap.servers": bootstrap})
    admin.create_topics([k.admin.NewTopic(topic, 2, 1)])[topic].result(10)
    producer = k.Producer({"bootstrap.servers": bootstrap})
    for i in range(4):
        producer.produce(topic, b"%d" % i, partition=i % 2)
    assert producer.flush(10) == 0
    cooperative = strategy == "cooperative-sticky"

    def outcome(call):
        try:
            call()
            return "ok"
        except k.KafkaException as e:
            return e.args[0].name()

    calls = []

    def on_assign(consumer, partitions):
        if cooperative:
            calls.append(outcome(lambda: consumer.assign(partitions)))
        else:
            calls.append(outcome(lambda: consumer.incremental_assign(partitions)))

    c = k.Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                    "auto.offset.reset": "earliest", "enable.auto.commit": False,
                    "partition.assignment.strategy": strategy})
    try:
        c.subscribe([topic], on_assign=on_assign)
        read = 0
        deadline = time.monotonic() + 20
        while not calls and time.monotonic() < deadline:
            msg = c.poll(0.2)
            read += msg is not None and msg.error() is None
        end = time.monotonic() + 2      # what the member reads once the callback returned
        while time.monotonic() < end:
            msg = c.poll(0.2)
            read += msg is not None and msg.error() is None
        one = [k.TopicPartition(topic, 0, 0)]
        if cooperative:
            calls += [outcome(lambda: c.assign(one)), outcome(c.unassign)]
        else:
            calls += [outcome(lambda: c.incremental_assign(one)),
                      outcome(lambda: c.incremental_unassign(one))]
        return calls, sorted(tp.partition for tp in c.assignment()), read
    finally:
        c.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_assignment_calls_of_the_other_rebalance_protocol_are_refused(cluster, topic_name,
                                                                      strategy):
    """Once the group chose its assignor, librdkafka takes only that protocol's calls:
    the incremental ones in an eager group and assign()/unassign() in a cooperative one
    raise _STATE, in the callbacks and outside them, and the member assigns nothing in
    the callback's place. Here they were taken: an assign() of the partitions a
    cooperative rebalance adds replaced the whole assignment, and the partitions kept
    from before were read by nobody while the group counted them as this member's."""
    importlib.import_module("confluent_kafka.admin")
    got = side_by_side(assignment_calls_of_the_other_protocol, cluster.bootstrap_servers,
                       topic_name, strategy)
    assert got["kafka_client"] == got["confluent_kafka"] == (
        ["_STATE", "_STATE", "_STATE"], [], 0), got


def lost_after_the_poll_error(k, impl, bootstrap, topic):
    """A consumer stalls past max.poll.interval.ms: what its polls return and which
    callbacks run, in order, up to the first lost-partitions callback."""
    events = []
    c = k.Consumer({"bootstrap.servers": bootstrap, "group.id": f"stall-{impl}-{topic}",
                    "partition.assignment.strategy": "cooperative-sticky",
                    "session.timeout.ms": 2000, "max.poll.interval.ms": 2000,
                    "heartbeat.interval.ms": 300, "log_level": 0})
    try:
        c.subscribe([topic], on_assign=lambda cons, parts: events.append("on_assign"),
                    on_lost=lambda cons, parts: events.append("on_lost"))
        deadline = time.monotonic() + 30
        while "on_assign" not in events and time.monotonic() < deadline:
            c.poll(0.2)
        time.sleep(4)   # twice max.poll.interval.ms
        deadline = time.monotonic() + 30
        while "on_lost" not in events and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is not None:
                events.append(msg.error().name())
    finally:
        c.close()
    return events[:3]


def test_the_lost_callback_runs_in_the_poll_after_the_max_poll_error(tmp_path, topic_name):
    """confluent-kafka's test_cooperative_rebalance_1/2: the poll() that returns
    _MAX_POLL_EXCEEDED runs no callback, the lost partitions' runs in the next one (ours
    ran it in the same call, before returning the error)."""
    with Cluster(brokers=1, data_dir=str(tmp_path / "stall"),
                 broker_config={"group.min.session.timeout.ms": 1000}) as stall_cluster:
        stall_cluster.create_topic(topic_name, partitions=1)
        got = side_by_side(lost_after_the_poll_error, stall_cluster.bootstrap_servers,
                           topic_name)
    assert got["kafka_client"] == got["confluent_kafka"] == \
        ["on_assign", "_MAX_POLL_EXCEEDED", "on_lost"]


def assignments_of_a_widened_subscription(k, impl, bootstrap, topic):
    """A cooperative consumer subscribed to one topic subscribes to it and a second one:
    the partitions each on_assign call is given, until two seconds after the second
    topic's partition came."""
    calls = []
    c = k.Consumer({"bootstrap.servers": bootstrap, "group.id": f"widen-{impl}-{topic}",
                    "partition.assignment.strategy": "cooperative-sticky",
                    "auto.offset.reset": "earliest", "log_level": 0})
    callbacks = {"on_assign": lambda cons, parts: calls.append(
        sorted((tp.topic[-1], tp.partition) for tp in parts))}
    try:
        c.subscribe([f"{topic}-a"], **callbacks)
        deadline = time.monotonic() + 30
        while not calls and time.monotonic() < deadline:
            c.poll(0.2)
        c.subscribe([f"{topic}-a", f"{topic}-b"], **callbacks)
        deadline = time.monotonic() + 30
        while len(calls) < 2 and time.monotonic() < deadline:
            c.poll(0.2)
        settle = time.monotonic() + 2
        while time.monotonic() < settle:
            c.poll(0.2)
    finally:
        c.close()
    return calls


def test_a_widened_subscription_is_one_rebalance(cluster, topic_name):
    """confluent-kafka's test_cooperative_rebalance_1: subscribing to one more topic calls
    on_assign once, with its partitions (ours joined before looking the new topic up, and
    its metadata then made a second rebalance: on_assign([]) after)."""
    got = {}
    for impl in IMPLS:
        topic = f"{topic_name}-{impl[0]}"
        for suffix in ("a", "b"):
            cluster.create_topic(f"{topic}-{suffix}", partitions=1)
        got[impl] = assignments_of_a_widened_subscription(
            importlib.import_module(impl), impl, cluster.bootstrap_servers, topic)
    assert got["kafka_client"] == got["confluent_kafka"] == [[("a", 0)], [("b", 0)]]
