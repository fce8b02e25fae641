"""confluent-kafka drop-in: the forms of produce()'s ``headers`` argument. What
confluent-kafka refuses is refused with the same exception type, and what it takes is sent
as it sends it; side by side with confluent-kafka where no broker is needed."""
from __future__ import annotations

import time

import pytest

import kafka_client
from kafka_client import Producer, SerializingProducer

ck = pytest.importorskip("confluent_kafka")

NOWHERE = "127.0.0.1:1"


@pytest.fixture(params=[Producer, SerializingProducer], ids=["Producer", "SerializingProducer"])
def producers(request):
    ours = request.param({"bootstrap.servers": NOWHERE})
    theirs = getattr(ck, request.param.__name__)({"bootstrap.servers": NOWHERE,
                                                   "log_level": 0})
    yield ours, theirs
    ours.close(0)
    theirs.purge()


@pytest.mark.parametrize("make_headers", [
    lambda: (("k", b"1"),), lambda: (pair for pair in [("k", b"1")]), lambda: {("k", b"1")},
    lambda: "k", lambda: b"k", lambda: 5, lambda: [["k", b"1"]], lambda: ["kv"],
    lambda: [("k", b"1", b"2")], lambda: [("k",)], lambda: [None], lambda: [{"k": b"1"}],
    lambda: [("k", 5)], lambda: {"k": 1.5}, lambda: [("k", [b"1"])],
])
def test_headers_confluent_refuses_are_a_type_error(producers, make_headers):
    ours, theirs = producers
    with pytest.raises(TypeError):
        theirs.produce("t", b"v", headers=make_headers())
    # A tuple, a generator or a set of pairs used to be queued, ["kv"] as header ("k", b"v")
    with pytest.raises(TypeError):
        ours.produce("t", b"v", headers=make_headers())
    assert len(ours) == 0


@pytest.mark.parametrize("headers", [
    [("k", b"1")], {"k": "x", "n": None}, [], {}, [(b"k", b"1")], {1: b"1"}, [(None, None)],
])
def test_headers_confluent_takes_are_taken(producers, headers):
    ours, theirs = producers
    theirs.produce("t", b"v", headers=headers)
    ours.produce("t", b"v", headers=headers)
    assert len(ours) == 1


def test_non_str_header_keys_are_sent_as_confluent_sends_them(tansu_broker, topic_name):
    tansu_broker.create_topic(topic_name, partitions=1)
    forms = [[(b"k", b"1")], {b"k": b"1"}, [(7, None)], [(None, b"")], [("s", "héllo")]]
    for client in (ck, kafka_client):
        p = client.Producer({"bootstrap.servers": tansu_broker.bootstrap})
        for headers in forms:
            p.produce(topic_name, client.__name__.encode(), partition=0, headers=headers)
        assert p.flush(30) == 0
    c = kafka_client.Consumer({"bootstrap.servers": tansu_broker.bootstrap,
                               "group.id": topic_name})
    got = {"confluent_kafka": [], "kafka_client": []}
    try:
        c.assign([kafka_client.TopicPartition(topic_name, 0, 0)])
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < 2 * len(forms) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got[m.value().decode()].append(m.headers())
    finally:
        c.close()
    # confluent-kafka sends str(key): b"k" becomes "b'k'"; ours used to raise TypeError
    assert got["confluent_kafka"] == [[("b'k'", b"1")], [("b'k'", b"1")], [("7", None)],
                                      [("None", b"")], [("s", "héllo".encode())]]
    assert got["kafka_client"] == got["confluent_kafka"]
