"""confluent-kafka drop-in: argument types and forms. Wrong types raise what
confluent-kafka raises; commit()/store_offsets() take every form it takes, with
librdkafka's error codes; the legacy default.topic.config dict; librdkafka's words for
an unknown partitioner. Side by side with confluent-kafka where no broker is needed."""
from __future__ import annotations

import sys
import time
from collections import OrderedDict

import pytest

import kafka_client
import kafka_client.admin
from kafka_client import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

ck = pytest.importorskip("confluent_kafka")
ck_admin = pytest.importorskip("confluent_kafka.admin")

NOWHERE = "127.0.0.1:1"


@pytest.fixture
def producers():
    ours = Producer({"bootstrap.servers": NOWHERE})
    theirs = ck.Producer({"bootstrap.servers": NOWHERE, "log_level": 0})
    yield ours, theirs
    ours.close(0)
    theirs.purge()


@pytest.mark.parametrize("args, kwargs", [
    ((5,), {}), (("t",), {"value": 5}), (("t",), {"key": 5}), (("t",), {"partition": "1"}),
    (("t",), {"partition": 1.5}), (("t",), {"partition": None}), (("t",), {"timestamp": "x"}),
    (("t",), {"timestamp": 1.5}), (("t",), {"headers": 5}), (("t",), {"headers": [("k", 5)]}),
    (("t",), {"bogus": 1}),
])
def test_produce_wrong_types_raise_type_error_like_confluent(producers, args, kwargs):
    ours, theirs = producers
    with pytest.raises(TypeError):
        theirs.produce(*args, **kwargs)
    with pytest.raises(TypeError):
        ours.produce(*args, **kwargs)
    assert len(ours) == 0           # nothing queued, the producer still works
    ours.produce("t", b"fine")
    assert len(ours) == 1


@pytest.mark.parametrize("topic, error", [("bad\ud800name", UnicodeEncodeError),
                                          ("nul\x00name", ValueError)])
def test_a_topic_name_that_cannot_be_sent_is_refused_like_confluent(producers, topic, error):
    # Queued, a name that is not UTF-8 made every later Metadata request (which names
    # each wanted topic) impossible to encode: no topic's messages went out any more.
    ours, theirs = producers
    for p in (ours, theirs):
        with pytest.raises(error):
            p.produce(topic, b"v")
    assert len(ours) == 0 and ours._acc.topics.get(topic) is None
    ours.produce("t", b"fine")
    assert len(ours) == 1


@pytest.mark.parametrize("kwargs", [{"partition": "1"}, {"partition": 1.5}])
def test_partition_type_error_text_is_confluents(producers, kwargs):
    ours, theirs = producers
    with pytest.raises(TypeError) as a:
        ours.produce("t", **kwargs)
    with pytest.raises(TypeError) as b:
        theirs.produce("t", **kwargs)
    assert str(a.value) == str(b.value)


def test_produce_partition_beyond_32_bits_overflows_like_confluent(producers):
    ours, theirs = producers
    for p in (ours, theirs):
        with pytest.raises(OverflowError):
            p.produce("t", partition=2**40)


def test_non_callable_delivery_callback_is_refused_where_given(producers):
    ours, _ = producers
    for kw in ({"on_delivery": 5}, {"callback": "x"}):
        with pytest.raises(TypeError, match=next(iter(kw))):
            ours.produce("t", b"x", **kw)
    for kw in ({"on_delivery": 5}, {"callback": "x"}):
        for values in ([b"x"], [{"value": b"x"}]):
            with pytest.raises(TypeError, match=next(iter(kw))):
                ours.produce_batch("t", values, **kw)
    assert len(ours) == 0


def _delivery_cb(err, msg):
    pass


def _dicts():
    yield {"value": b"a"}


@pytest.mark.parametrize("messages", [
    ({"value": b"a"},), {"value": b"a"}, "abc", None, 5, _dicts(),
    [{"value": b"a"}, b"b"], [b"b", {"value": b"a"}], [{"value": b"a"}, None],
    [{"value": b"a"}, {"value": 5}], [{"key": 1.5}], [{"value": b"a"}, {"partition": "1"}],
    [{"partition": 1.5}], [{"headers": "h"}], [{"headers": [("k", 5)]}], [{"headers": ["k"]}],
    [{"headers": {"k": 5}}], [{"headers": (("k", b"v"),)}],
], ids=["tuple", "dict", "str", "None", "int", "generator", "item-bytes", "first-item-bytes",
        "item-None", "value-int", "key-float", "partition-str", "partition-float",
        "headers-str", "header-value-int", "header-not-a-tuple", "header-dict-int",
        "headers-tuple"])
def test_produce_batch_malformed_messages_raise_as_confluent(producers, messages):
    """The exception type of confluent-kafka's produce_batch() (ValueError for headers)
    and its text, which ours starts with (adding the type it got)."""
    ours, theirs = producers
    with pytest.raises(Exception) as expected:
        theirs.produce_batch("t", messages)
    if isinstance(messages, list):
        messages = [dict(m) if isinstance(m, dict) else m for m in messages]
    elif type(messages).__name__ == "generator":
        messages = _dicts()
    with pytest.raises(type(expected.value)) as got:
        ours.produce_batch("t", messages)
    assert type(got.value) is type(expected.value)
    assert str(got.value).startswith(str(expected.value)), (got.value, expected.value)
    assert len(ours) == 0
    if isinstance(messages, list):
        assert all("_error" not in m for m in messages if isinstance(m, dict))


def test_produce_batch_takes_dict_and_list_subclasses_as_confluent(producers):
    ours, theirs = producers

    class Messages(list):
        pass

    for p in (ours, theirs):
        for messages in (Messages([{"value": b"a"}]), [OrderedDict(value=b"a")]):
            assert p.produce_batch("t", messages) == 1
            assert "_error" not in messages[0]
    assert len(ours) == 2


def test_produce_batch_reports_a_full_queue_in_each_message_as_confluent():
    got = {}
    for cls in (Producer, ck.Producer):
        p = cls({"bootstrap.servers": NOWHERE, "queue.buffering.max.messages": 2,
                 **({"log_level": 0} if cls is ck.Producer else {})})
        messages = [{"value": b"%d" % i} for i in range(4)]
        assert p.produce_batch("t", messages) == 2
        got[cls] = [m.get("_error") and (m["_error"].code(), m["_error"].str())
                    for m in messages]
        p.purge()
        if cls is Producer:
            p.close(0)
    assert got[Producer] == got[ck.Producer] == [None, None] + [
        (KafkaError._QUEUE_FULL, "Message failed: Local: Queue full")] * 2


def test_produce_batch_callback_wins_over_on_delivery_as_in_confluent():
    seen = {}
    for name, cls in (("ours", Producer), ("theirs", ck.Producer)):
        got = seen[name] = []
        p = cls({"bootstrap.servers": NOWHERE, "message.timeout.ms": 10,
                 **({"log_level": 0} if cls is ck.Producer else {})})
        p.produce_batch("t", [{"value": b"a"}], callback=lambda e, m: got.append("callback"),
                        on_delivery=lambda e, m: got.append("on_delivery"))
        # the positional fourth argument is confluent-kafka's callback
        p.produce_batch("t", [{"value": b"b"}], -1, lambda e, m: got.append("positional"),
                        on_delivery=lambda e, m: got.append("on_delivery"))
        assert p.flush(30) == 0
        if cls is Producer:
            p.close()
    assert seen["ours"] == seen["theirs"] == ["callback", "positional"]


@pytest.mark.parametrize("call", ["poll", "flush"])
def test_timeout_must_be_a_number(producers, call):
    ours, theirs = producers
    for p in (ours, theirs):
        with pytest.raises(TypeError):
            getattr(p, call)("x")
    assert ours.poll(0) >= 0


def test_list_topics_argument_types(producers):
    ours, theirs = producers
    for p in (ours, theirs):
        with pytest.raises(TypeError):
            p.list_topics(5)
        with pytest.raises(TypeError):
            p.list_topics(timeout="x")


class IndexOnly:
    """An integer that is no int, as numpy's integers are (pandas hands them out): it has
    ``__index__``, which confluent-kafka's C argument parsing takes."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __index__(self) -> int:
        return self.n


@pytest.mark.parametrize("args", [("t", 0, 1, "xyz\x00abc"), ("t\x00x", 0),
                                  ("t", 0, 1, "\x00")], ids=["metadata", "topic", "lone"])
def test_a_nul_in_a_topic_partition_is_refused_like_confluent(args):
    """confluent-kafka's test_consumer_topicpartition_metadata: a NUL in the metadata
    (or the topic) is a ValueError, "embedded null character", from the constructor.
    Ours took it, and the committed metadata read back cut at the NUL."""
    for module in (ck, kafka_client):
        with pytest.raises(ValueError, match="embedded null character"):
            module.TopicPartition(*args)


def built_from_integer_types(m, admin, make):
    """Values and types read back from objects built with ``make(n)`` for each integer."""
    tp = m.TopicPartition("t", make(2), make(7))
    topic, parts = admin.NewTopic("t", make(3), make(1)), admin.NewPartitions("t", make(4))
    uuid = m.Uuid(make(1), make(0))
    return [(tp.partition, type(tp.partition)), (tp.offset, type(tp.offset)),
            (topic.num_partitions, type(topic.num_partitions)),
            (topic.replication_factor, type(topic.replication_factor)),
            (parts.new_total_count, type(parts.new_total_count)),
            (m.KafkaError(make(1)).code(), type(m.KafkaError(make(1)).code())), str(uuid)]


@pytest.mark.parametrize("make", [IndexOnly, bool], ids=["index-only", "bool"])
def test_integers_that_are_not_int_are_taken_like_confluent(producers, make):
    ours = built_from_integer_types(kafka_client, kafka_client.admin, make)
    assert ours == built_from_integer_types(ck, ck_admin, make)
    producer, theirs = producers
    reports = []
    for p in (producer, theirs):
        p.produce("t", b"v", partition=make(0), timestamp=make(1234),
                  on_delivery=lambda err, msg: reports.append(msg.timestamp()))
        p.purge()
        p.flush(1)
    assert len(reports) == 2 and reports[0] == (1, int(make(1234)))


# -- configuration ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["Producer", "Consumer", "AdminClient", "ShareConsumer"])
@pytest.mark.parametrize("args", [(), (None,), (5,)], ids=["nothing", "None", "int"])
def test_a_client_without_a_configuration_dict_is_refused_like_confluent(name, args):
    ours = getattr(kafka_client.admin if name == "AdminClient" else kafka_client, name)
    theirs = getattr(ck_admin if name == "AdminClient" else ck, name)
    with pytest.raises(TypeError):
        theirs(*args)
    with pytest.raises(TypeError, match="expected configuration dict"):
        ours(*args)


def test_a_configuration_given_only_as_keywords_is_taken():
    # the keyword form is a configuration of its own, with or without a dict
    p = Producer(**{"bootstrap.servers": NOWHERE, "client.id": "kw"})
    try:
        assert p._config["client.id"] == "kw"
    finally:
        p.close(0)

@pytest.mark.parametrize("conf", [{"partitioner": "bogus"}, {"partitioner": 5},
                                  {"default.topic.config": {"partitioner": "bogus"}}])
def test_unknown_partitioner_is_refused_with_librdkafkas_message(conf):
    with pytest.raises(KafkaException) as ours:
        Producer({"bootstrap.servers": NOWHERE, **conf})
    with pytest.raises(Exception) as theirs:   # confluent's cimpl.KafkaException
        ck.Producer({"bootstrap.servers": NOWHERE, **conf})
    assert ours.value.args[0].code() == KafkaError._INVALID_ARG
    assert ours.value.args[0].str() == theirs.value.args[0].str()


def test_default_topic_config_is_merged_and_wins():
    p = Producer({"bootstrap.servers": NOWHERE, "message.timeout.ms": 1000,
                  "default.topic.config": {"message.timeout.ms": 4000,
                                           "partitioner": "murmur2"}})
    try:
        # as librdkafka: the default topic configuration's values win
        assert p._config["message.timeout.ms"] == 4000
        assert p._acc.partitioner_name == "murmur2"
    finally:
        p.close(0)
    c = Consumer({"bootstrap.servers": NOWHERE, "group.id": "g",
                  "default.topic.config": {"auto.offset.reset": "earliest"}})
    try:
        assert c._fetcher.reset_policy == "earliest"
    finally:
        c.close()
    with pytest.raises(KafkaException, match="bogus"):
        Producer({"bootstrap.servers": NOWHERE, "default.topic.config": {"bogus": 1}})
    with pytest.raises(TypeError):
        Producer({"bootstrap.servers": NOWHERE, "default.topic.config": 5})


# -- commit() and store_offsets() forms ----------------------------------------------------

@pytest.fixture
def consumer():
    commits = []
    c = Consumer({"bootstrap.servers": NOWHERE, "group.id": "g",
                  "enable.auto.offset.store": False, "socket.timeout.ms": 1000,
                  # no final commit to wait for at close (nothing is there to take it)
                  "enable.auto.commit": False,
                  "on_commit": lambda err, parts: commits.append((err, parts))})
    c.commits = commits
    yield c
    c.close()


@pytest.mark.parametrize("topic, error", [("bad\ud800name", UnicodeEncodeError),
                                          ("nul\x00name", ValueError)])
@pytest.mark.parametrize("call", [
    lambda c, t: c.subscribe([t]), lambda c, t: c.subscribe(["fine", t]),
    lambda c, t: c.assign([TopicPartition(t, 0)]),
    lambda c, t: c.incremental_assign([TopicPartition(t, 0)]),
    lambda c, t: c.committed([TopicPartition(t, 0)], timeout=0.1),
    lambda c, t: c.get_watermark_offsets(TopicPartition(t, 0), timeout=0.1),
    lambda c, t: c.offsets_for_times([TopicPartition(t, 0, 0)], timeout=0.1),
], ids=["subscribe", "subscribe-among", "assign", "incremental_assign", "committed",
        "watermarks", "offsets_for_times"])
def test_a_topic_name_that_cannot_be_sent_is_refused_by_the_consumer(consumer, call, topic,
                                                                       error):
    # As the producer's produce() (confluent-kafka's consumer crashes on these, so not
    # compared): taken, the name made every later Metadata request impossible to
    # encode, and nothing was read any more.
    with pytest.raises(error):
        call(consumer, topic)
    assert consumer.assignment() == []
    consumer.assign([TopicPartition("fine", 0)])
    assert consumer.assignment() == [TopicPartition("fine", 0)]


def code_of(excinfo):
    return excinfo.value.args[0].code()


def wait_commits(c, n):
    deadline = time.monotonic() + 5
    while len(c.commits) < n and time.monotonic() < deadline:
        c.poll(0.05)
    return c.commits


def test_commit_forms_accepted_without_a_stored_offset(consumer):
    c = consumer
    # confluent-kafka accepts all of these asynchronously; with nothing to commit the
    # result (_NO_OFFSET) goes to on_commit
    assert c.commit() is None
    assert c.commit(message=None) is None
    assert c.commit(offsets=None) is None
    assert c.commit(message=None, offsets=None) is None
    assert c.commit(offsets=[]) is None
    assert c.commit(offsets=[TopicPartition("t", 0)]) is None     # OFFSET_INVALID: left out
    assert c.commit(asynchronous="yes") is None                      # truthy, as there
    assert c.commit(**{"async": True}) is None                        # the old keyword
    got = wait_commits(c, 8)
    assert [err.code() for err, _ in got] == [KafkaError._NO_OFFSET] * 8
    assert got[5][1] == [TopicPartition("t", 0)]
    # Nothing stored: the result names the assigned partitions, as librdkafka's.
    c.assign([TopicPartition("t", 3, 0)])
    c.commit()
    (err, parts), = wait_commits(c, 9)[8:]
    assert err.code() == KafkaError._NO_OFFSET and parts == [TopicPartition("t", 3)]
    assert parts[0].offset == OFFSET_INVALID
    c.unassign()
    for kwargs in ({}, {"offsets": []}, {"offsets": [TopicPartition("t", 0)]},
                   {"message": Message("t", 0)}):
        with pytest.raises(KafkaException) as e:
            c.commit(asynchronous=False, **kwargs)
        assert code_of(e) == KafkaError._NO_OFFSET


def test_commit_argument_errors(consumer):
    c = consumer
    with pytest.raises(ValueError, match="mutually exclusive"):
        c.commit(message=Message("t", 0, 5), offsets=[TopicPartition("t", 0, 5)])
    for bad in ({"offsets": TopicPartition("t", 0, 5)}, {"offsets": (TopicPartition("t", 0, 5),)},
                {"offsets": [5]}, {"message": 5}):
        with pytest.raises(TypeError):
            c.commit(**bad)
    with pytest.raises(KafkaException) as e:
        c.commit(message=Message("t", 0, 5, error=KafkaError(KafkaError._PARTITION_EOF)))
    assert code_of(e) == KafkaError._INVALID_ARG
    assert str(e.value.args[0].str()).startswith("Cannot commit offsets for message with error")
    with pytest.raises(TypeError):
        c.commit(bogus=1)


def test_store_offsets_forms_and_codes(consumer):
    c = consumer
    for kwargs in ({}, {"message": None}, {"offsets": None}, {"message": None, "offsets": None}):
        with pytest.raises(ValueError, match="expected either message or offsets"):
            c.store_offsets(**kwargs)
    with pytest.raises(ValueError, match="mutually exclusive"):
        c.store_offsets(message=Message("t", 0, 5), offsets=[TopicPartition("t", 0, 5)])
    c.store_offsets(offsets=[])                                        # nothing: fine
    for call in (lambda: c.store_offsets(offsets=[TopicPartition("t", 0, 5)]),
                 lambda: c.store_offsets(message=Message("t", 0, 5)),
                 lambda: c.store_offsets(Message("t", 0, 5))):
        with pytest.raises(KafkaException) as e:
            call()
        assert code_of(e) == KafkaError._UNKNOWN_PARTITION             # not _STATE
    for bad in (Message("t", -1, 3), Message("t", 0), ):
        with pytest.raises(KafkaException) as e:
            c.store_offsets(message=bad)
        assert code_of(e) == KafkaError._INVALID_ARG
    with pytest.raises(KafkaException) as e:
        c.store_offsets(offsets=[TopicPartition("t", 0)])               # OFFSET_INVALID
    assert code_of(e) == KafkaError._UNKNOWN_PARTITION   # not assigned, as confluent's
    with pytest.raises(KafkaException) as e:
        c.store_offsets(message=Message("t", 0, 5, error=KafkaError(-191)))
    assert code_of(e) == KafkaError._INVALID_ARG
    with pytest.raises(TypeError):
        c.store_offsets(offsets=TopicPartition("t", 0, 5))
    with pytest.raises(TypeError):
        c.store_offsets(message=5)
    # assigned: stored; one assigned and one not: the assigned one is stored, no error
    c.assign([TopicPartition("t", 0, 0)])
    c.store_offsets(offsets=[TopicPartition("t", 0, 5)])
    assert c._fetcher.stored_offsets() == [TopicPartition("t", 0, 5)]
    c.store_offsets(message=Message("t", 0, 7))
    assert c._fetcher.stored_offsets()[0].offset == 8
    c.store_offsets(offsets=[TopicPartition("t", 0, 9), TopicPartition("t", 1, 9)])
    assert c._fetcher.stored_offsets()[0].offset == 9


def test_consumer_argument_errors_match_confluent():
    ours = Consumer({"bootstrap.servers": NOWHERE, "group.id": "g"})
    theirs = ck.Consumer({"bootstrap.servers": NOWHERE, "group.id": "g", "log_level": 0})
    try:
        cases = [
            (lambda c: c.consume("x"), TypeError), (lambda c: c.consume(1, "x"), TypeError),
            (lambda c: c.consume(-1), ValueError), (lambda c: c.consume(1000001), ValueError),
            (lambda c: c.poll("x"), TypeError), (lambda c: c.subscribe("t"), TypeError),
            (lambda c: c.subscribe(["t"], on_assign=5), TypeError),
            (lambda c: c.subscribe(["t"], on_revoke=5), TypeError),
            (lambda c: c.subscribe(["t"], on_lost=5), TypeError),
            (lambda c: c.subscribe([]), KafkaException), (lambda c: c.assign(5), TypeError),
            (lambda c: c.assign([5]), TypeError), (lambda c: c.seek(5), TypeError),
            (lambda c: c.pause(5), TypeError), (lambda c: c.committed(5), TypeError),
            (lambda c: c.position(5), TypeError),
            (lambda c: c.get_watermark_offsets(5), TypeError),
            (lambda c: c.offsets_for_times(5), TypeError),
            (lambda c: c.incremental_assign(5), TypeError),
            (lambda c: c.list_topics(5), TypeError),
        ]
        for call, exc in cases:
            with pytest.raises(exc):
                call(ours)
            # confluent raises its cimpl.KafkaException, a class of its own
            with pytest.raises(exc if exc is not KafkaException else Exception):
                call(theirs)
        assert ours.consume(0) == theirs.consume(0) == []
        with pytest.raises(KafkaException) as e:
            ours.seek(TopicPartition("x", 0, 5))
        assert code_of(e) == KafkaError._UNKNOWN_PARTITION
        ours.pause([TopicPartition("x", 0)])          # not assigned: nothing to do, as there
        theirs.pause([ck.TopicPartition("x", 0)])
        assert ours.consume(1, 0) == []               # still usable
    finally:
        ours.close()
        theirs.close()



def test_assignment_reports_the_offsets_assigned_like_confluent():
    ours = Consumer({"bootstrap.servers": NOWHERE, "group.id": "g"})
    theirs = ck.Consumer({"bootstrap.servers": NOWHERE, "group.id": "g", "log_level": 0})

    def seen(c):
        return sorted((tp.topic, tp.partition, tp.offset) for tp in c.assignment())
    try:
        for c, m in ((ours, sys.modules["kafka_client"]), (theirs, ck)):
            c.assign([m.TopicPartition("t", 0, 3), m.TopicPartition("t", 1, m.OFFSET_BEGINNING),
                      m.TopicPartition("t", 2)])
            c.incremental_assign([m.TopicPartition("t", 3, m.OFFSET_END)])
            c.seek(m.TopicPartition("t", 0, 1))     # a seek is a position, not an assignment
            c.incremental_unassign([m.TopicPartition("t", 2)])
        assert seen(ours) == seen(theirs) == [("t", 0, 3), ("t", 1, -2), ("t", 3, -1)]
    finally:
        ours.close()
        theirs.close()

# -- with a broker: each form commits what it says ---------------------------------------

def test_commit_forms_commit_on_the_broker(tansu_broker, topic_name):
    tansu_broker.create_topic(topic_name, partitions=1)
    p = Producer({"bootstrap.servers": tansu_broker.bootstrap})
    for i in range(10):
        p.produce(topic_name, b"%d" % i, partition=0)
    assert p.flush(30) == 0
    p.close()
    results = []
    c = Consumer({"bootstrap.servers": tansu_broker.bootstrap, "group.id": topic_name,
                  "enable.auto.commit": False, "enable.auto.offset.store": False,
                  "on_commit": lambda err, parts: results.append((err, parts))})
    tp = TopicPartition(topic_name, 0)
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        msgs = []
        deadline = time.monotonic() + 30
        while len(msgs) < 10 and time.monotonic() < deadline:
            msgs.extend(m for m in c.consume(10, 0.5) if m.error() is None)
        assert [m.offset() for m in msgs] == list(range(10))

        def committed():
            return c.committed([tp], timeout=10)[0].offset

        assert c.commit(msgs[2], asynchronous=False)[0].offset == 3     # positional message
        assert committed() == 3
        assert results == []          # on_commit hears no synchronous commit (librdkafka)
        c.commit(offsets=[TopicPartition(topic_name, 0, 5)])              # asynchronous
        while not results:
            c.poll(0.1)
        assert results[-1][0] is None and committed() == 5
        c.store_offsets(msgs[6])
        assert c.commit(asynchronous=False)[0].offset == 7                # stored offsets
        assert committed() == 7
        c.store_offsets(offsets=[TopicPartition(topic_name, 0, 9)])
        c.commit(message=None, offsets=None, **{"async": False})
        assert committed() == 9
        for _ in range(3):
            c.poll(0.05)
        assert len(results) == 1      # the asynchronous commit's only
    finally:
        c.close()
