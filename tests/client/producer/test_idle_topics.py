"""metadata.max.idle.ms: a producer forgets the topics it stopped producing to (their
per-topic state and metadata), never one with something queued or in flight. Against
fake connections, with the clock moved by hand."""
from __future__ import annotations

import time

from kafka_client._cluster.metadata import MetadataCache
from kafka_client.config import ClientConfig
from kafka_client.producer.accumulator import Accumulator
from kafka_client.producer.idempotence import Idempotence
from kafka_client.producer.sender import Sender
from kafka_proto.records import read_batches

from tests.client.producer.test_sender import FakeCluster, FakeConn, response

IDLE_S = 300.0   # metadata.max.idle.ms's default


def setup(**conf):
    base = {"bootstrap.servers": "fake:1", "linger.ms": 0}
    base.update(conf)
    cfg = ClientConfig.from_dict(base, role="producer")
    cluster = FakeCluster({1: FakeConn(1)})
    acc = Accumulator(cfg, lambda d: None, lambda name: cluster.metadata.want([name]))
    reports = []
    sender = Sender(cfg, acc, cluster, Idempotence(cfg), reports.append)
    return acc, sender, cluster, reports


def metadata_answer(cluster, sender, names, partitions=1):
    """The cluster's answer naming ``names`` (led by broker 1), digested as the real
    cluster does: the cache, then the listeners."""
    md: MetadataCache = cluster.metadata
    md.take_request_topics()
    changed = md.update(response({1: 1}, {n: (0, [1] * partitions) for n in names}),
                        time.monotonic(), list(names))
    sender.on_metadata(changed)


def deliver_all(acc, sender, cluster, reports):
    conn = cluster.conns[1]
    for _ in range(10):
        sender.tick(time.monotonic())
        if not conn.sent:
            break
        while conn.sent:
            conn.answer()
    for r in reports:
        acc.reported(r.batch.count, r.batch.nbytes or 0)
    reports.clear()


def test_topics_idle_for_metadata_max_idle_are_forgotten():
    acc, sender, cluster, reports = setup()
    names = [f"once-{i}" for i in range(50)]
    for name in names:
        acc.produce(name, b"v")
    metadata_answer(cluster, sender, names)
    deliver_all(acc, sender, cluster, reports)
    md = cluster.metadata
    assert set(acc.topics) == set(names) == md.wanted == set(md.topics)
    assert len(sender.partition_tx) == 50
    now = time.monotonic()
    assert sender.forget_idle(now + IDLE_S - 1) == []      # not idle long enough yet
    assert sorted(sender.forget_idle(now + IDLE_S + 1)) == sorted(names)
    assert acc.topics == {} and md.wanted == set() and md.topics == {}
    assert sender.partition_tx == {} and sender.batch_windows == {}
    # The next periodic refresh names none of them.
    md.in_flight = False
    md.due(now + IDLE_S + 1000)
    assert md.take_request_topics() == []
    # Produced to again: asked for again, and sent.
    acc.produce("once-7", b"again")
    assert md.wanted == {"once-7"}
    metadata_answer(cluster, sender, ["once-7"])
    sender.tick(time.monotonic())
    req = cluster.conns[1].sent[-1][0]
    assert [td.name for td in req.topic_data] == ["once-7"]


def test_a_topic_with_anything_queued_or_in_flight_is_kept():
    acc, sender, cluster, reports = setup(**{"linger.ms": 1000})
    acc.produce("in-flight", b"v")
    metadata_answer(cluster, sender, ["in-flight"])
    acc.close_lingered(time.monotonic(), everything=True)
    sender.tick(time.monotonic())                   # sent, not answered
    acc.produce("open", b"v")
    metadata_answer(cluster, sender, ["open"])      # placed in a batch that lingers
    acc.produce("waiting", b"v")                    # no metadata yet: waits for it
    assert acc.topics["in-flight"].parts[0].in_flight == 1
    assert acc.topics["open"].parts[0].open is not None
    assert acc.topics["waiting"].pending
    far = time.monotonic() + 10 * IDLE_S
    assert sender.forget_idle(far) == []
    assert set(acc.topics) == cluster.metadata.wanted == {"waiting", "open", "in-flight"}
    # Once delivered (and the batch's close counted as their last use), they go.
    cluster.conns[1].answer()
    acc.close_lingered(time.monotonic(), everything=True)
    sender.tick(time.monotonic())
    cluster.conns[1].answer()
    assert sorted(sender.forget_idle(far)) == ["in-flight", "open"]


def test_an_idempotent_producer_continues_a_forgotten_topics_sequences():
    """The broker keeps the producer's last sequence per partition: a forgotten topic
    used again under the same producer id and epoch continues from it (starting again
    at 0 would be refused as OUT_OF_ORDER_SEQUENCE_NUMBER)."""
    acc, sender, cluster, reports = setup(**{"enable.idempotence": True})
    conn = cluster.conns[1]
    sender.tick(time.monotonic())
    conn.answer()                                   # InitProducerId
    for i in range(3):
        acc.produce("s", b"%d" % i, partition=0)
        if i == 0:
            metadata_answer(cluster, sender, ["s"])
        deliver_all(acc, sender, cluster, reports)
    assert acc.topics["s"].parts[0].next_seq == 3
    assert sender.forget_idle(time.monotonic() + IDLE_S + 1) == ["s"]
    acc.produce("s", b"again", partition=0)
    metadata_answer(cluster, sender, ["s"])
    sender.tick(time.monotonic())
    req = conn.sent[-1][0]
    (batch,) = list(read_batches(req.topic_data[0].partition_data[0].records))
    assert batch.base_sequence == 3
