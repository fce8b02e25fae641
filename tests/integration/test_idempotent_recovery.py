"""Idempotent producer recovery (KIP-360, librdkafka's rules) against Tansu and noida-db,
with the broker's answers rewritten by the fault proxy in the middle of a run.

``FaultProxy.fail_requests`` diverts the armed Produce request (its partitions moved out
of range, so the real partitions never get its batches) and gives its answer the error:
exactly what a broker refusing those batches would do. The producer must then recover
(epoch bump, batches renumbered and resent) and deliver every message exactly once, in
order, as the log read back directly shows; the cases librdkafka treats as fatal stay
fatal.
"""
from __future__ import annotations

import logging
import time
from typing import Dict, List

import pytest

from kafka_client import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka_client._testing.proxy import DOWNSTREAM, FaultProxy
from kafka_client._testing.simple import fetch_all
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import ApiKey
from kafka_proto.records import read_batch_header

N = 200_000
PARTITIONS = 3
RATE = 50_000      # messages/s: the run lasts ~4 s, the faults land in its middle
#: Messages [ONE_PARTITION_FROM, ONE_PARTITION_UNTIL) all go to partition 0: the
#: NOT_ENOUGH_REPLICAS + OUT_OF_ORDER episode (armed at 80,000, over at 100,000) then sees
#: requests with batches of partition 0 only (the other partitions' last batches left
#: 100 ms before it). With all three in play, a request after the refused one could carry
#: a partition the refused one did not: no broker answers OUT_OF_ORDER there (nothing
#: before that batch is missing), and the producer rightly takes such an answer as fatal.
ONE_PARTITION_FROM, ONE_PARTITION_UNTIL = 75_000, 100_000


def partition_of(i: int) -> int:
    return 0 if ONE_PARTITION_FROM <= i < ONE_PARTITION_UNTIL else i % PARTITIONS


class RefusedEpisode:
    """Chooses the Produce requests of the NOT_ENOUGH_REPLICAS + OUT_OF_ORDER episode by
    their partition 0 batch's base sequence (on the proxy thread): the first request
    with one is refused; then up to three requests first sent after it (higher
    sequences, each new) get OUT_OF_ORDER, until the refused batch comes again."""

    def __init__(self) -> None:
        self.refused_sequence = -1
        self.highest_sequence = -1
        self.over = False
        self.out_of_order = 0

    @staticmethod
    def _sequence(request) -> int:
        for topic in request.topic_data:
            for part in topic.partition_data:
                if part.index == 0 and part.records:
                    return read_batch_header(part.records).base_sequence
        return -1

    def refuse(self, request) -> bool:
        sequence = self._sequence(request)
        if sequence < 0:
            return False
        self.refused_sequence = self.highest_sequence = sequence
        return True

    def follows(self, request) -> bool:
        sequence = self._sequence(request)
        if self.over or self.refused_sequence < 0 or sequence < 0:
            return False
        if sequence <= self.highest_sequence:     # the refused batch (or one after it)
            self.over = True                       # is sent again: the episode is over
            return False
        self.highest_sequence = sequence
        self.out_of_order += 1
        return True


def read_log(broker, topic: str) -> Dict[int, List[int]]:
    conn = broker.connect()
    try:
        return {q: [int(r.value) for b in fetch_all(conn, topic, q).batches for r in b]
                for q in range(PARTITIONS)}
    finally:
        conn.close()


def test_recovers_from_unknown_producer_id_and_out_of_order_answers(broker, topic_name,
                                                                    caplog):
    """200,000 messages; mid-run the broker "forgets" the producer twice (one request,
    then two in a row answered UNKNOWN_PRODUCER_ID) and once refuses a request with
    NOT_ENOUGH_REPLICAS followed by (up to) three OUT_OF_ORDER_SEQUENCE_NUMBER answers. Nothing
    fails; every message is in the log once, in order."""
    broker.create_topic(topic_name, partitions=PARTITIONS)
    caplog.set_level(logging.INFO, logger="kafka_client.producer.idempotence")
    errors, failed = [], []
    with FaultProxy("127.0.0.1", broker.port, rewrite_addresses=True) as proxy:
        # At each point of the run: the answers injected. The OUT_OF_ORDER answers go to
        # requests first sent after the refused one while it is in flight (answers held
        # back 1.5 s meanwhile, so several are: at 0.5 s a machine at a load of 13 on 2
        # cores once sent none): a retry of the refused batch itself, or anything after
        # it, answered so would be unexplained, hence fatal. The episode starts with
        # nothing in flight (a flush), so that the refused request leaves room behind it
        # in the in-flight window: on a loaded machine it once went out with the window
        # full of requests whose answers were held back with its own, and none followed.
        episode = RefusedEpisode()
        plan = {40_000: lambda: proxy.fail_requests(ApiKey.PRODUCE,
                                                    ErrorCode.UNKNOWN_PRODUCER_ID),
                80_000: lambda: (drained(),
                                 proxy.delay(1.5, DOWNSTREAM),
                                 proxy.fail_requests(ApiKey.PRODUCE,
                                                     ErrorCode.NOT_ENOUGH_REPLICAS,
                                                     when=episode.refuse),
                                 proxy.fail_requests(ApiKey.PRODUCE,
                                                     ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                                     count=3, when=episode.follows)),
                100_000: lambda: (proxy.delay(0, DOWNSTREAM), proxy.clear_faults()),
                120_000: lambda: proxy.fail_requests(ApiKey.PRODUCE,
                                                     ErrorCode.UNKNOWN_PRODUCER_ID, count=2)}
        p = Producer({"bootstrap.servers": proxy.bootstrap, "enable.idempotence": True,
                      "linger.ms": 5, "batch.num.messages": 1000,
                      "retry.backoff.ms": 10, "retry.backoff.max.ms": 100,
                      "error_cb": errors.append})

        def report(err, msg):
            if err is not None:
                failed.append((int(msg.value()), err))

        def drained():
            assert p.flush(60) == 0
        try:
            start = time.monotonic()
            for i in range(N):
                if i in plan:
                    plan[i]()
                while True:
                    try:
                        p.produce(topic_name, b"%08d" % i, partition=partition_of(i),
                                  on_delivery=report)
                        break
                    except BufferError:
                        p.poll(0.01)
                if i % 1000 == 999:
                    p.poll(0)
                    ahead = (i + 1) / RATE - (time.monotonic() - start)
                    if ahead > 0:
                        time.sleep(ahead)
            assert p.flush(60) == 0
        finally:
            p.close(10)
        stats = proxy.stats()
    assert not failed, failed[:5]
    assert not [e for e in errors if e.fatal()], errors
    # Every planned answer was injected, in the middle of the run, and the producer
    # bumped its epoch for each UNKNOWN_PRODUCER_ID episode.
    # (A loaded machine may have sent fewer than three requests behind the refused one
    # before its answer came: those that were got the OUT_OF_ORDER answers.)
    assert 1 <= episode.out_of_order <= 3, episode.out_of_order
    injected = 1 + 1 + episode.out_of_order + 2
    assert stats["injected"] == injected and stats["diverted"] == injected, stats
    assert sum("epoch bump needed" in r.getMessage() for r in caplog.records) >= 2
    log = read_log(broker, topic_name)
    for q in range(PARTITIONS):
        assert log[q] == [i for i in range(N) if partition_of(i) == q], f"partition {q}"


def test_unexplained_out_of_order_stays_fatal(broker, topic_name):
    """OUT_OF_ORDER_SEQUENCE_NUMBER for a batch that nothing before it explains (the
    broker's sequence is not the producer's: it lost acknowledged data) is fatal, as in
    librdkafka: the flush() that serves it raises it (once; error_cb does not get it, as in
    confluent-kafka), later produce() calls raise _FATAL."""
    broker.create_topic(topic_name, partitions=1)
    errors, reports = [], []
    with FaultProxy("127.0.0.1", broker.port, rewrite_addresses=True) as proxy:
        p = Producer({"bootstrap.servers": proxy.bootstrap, "enable.idempotence": True,
                      "error_cb": errors.append})
        try:
            p.produce(topic_name, b"first", partition=0,
                      on_delivery=lambda e, m: reports.append(e))
            assert p.flush(30) == 0 and reports == [None]
            proxy.fail_requests(ApiKey.PRODUCE, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
            p.produce(topic_name, b"second", partition=0,
                      on_delivery=lambda e, m: reports.append(e))
            with pytest.raises(KafkaException) as raised:
                p.flush(30)
            assert p.flush(30) == 0 and p.poll(0.5) == 0
            # The broker's code, flagged fatal (confluent-kafka raises it so; was _FATAL)
            fatal = reports[1]
            assert fatal is not None and fatal.fatal()
            assert fatal.code() == KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER
            assert raised.value.args[0] == fatal and raised.value.args[0].fatal()
            assert not [e for e in errors if e.fatal()]
            with pytest.raises(KafkaException) as exc:
                p.produce(topic_name, b"third", partition=0)
            assert exc.value.args[0].code() == KafkaError._FATAL
        finally:
            p.close(5)
    assert read_log_one(broker, topic_name) == [b"first"]


def read_log_one(broker, topic: str) -> List[bytes]:
    conn = broker.connect()
    try:
        return [r.value for b in fetch_all(conn, topic, 0).batches for r in b]
    finally:
        conn.close()


def test_batches_the_broker_refuses_whole_leave_no_gap_to_bump_the_epoch_for(tmp_path):
    """Kafka's validation refuses a batch whole before appending anything (here a null key
    on a compacted topic: INVALID_RECORD). Every message of such a batch fails, the next
    batch takes its sequence, and the producer goes on with the same producer id and
    epoch: one InitProducerId in all, as librdkafka (ours asked for a new epoch after each
    refused batch: 10 here). The batches between are written once, in order."""
    from kafka_client.testing import Cluster

    with Cluster(brokers=1, data_dir=str(tmp_path)) as cluster:
        cluster.create_topic("compacted", partitions=1, config={"cleanup.policy": "compact"})
        since = cluster.clear_request_log()
        reports: Dict[str, List[bytes]] = {}
        with Producer({"bootstrap.servers": cluster.bootstrap_servers,
                       "enable.idempotence": True, "linger.ms": 20}) as p:
            for round_ in range(20):
                refused = round_ % 2 == 1
                for i in range(5):
                    key = None if refused and i == 2 else b"k%d" % i
                    p.produce("compacted", b"%d-%d" % (round_, i), key=key, partition=0,
                              on_delivery=lambda err, msg: reports.setdefault(
                                  "ok" if err is None else err.name(), []).append(
                                      msg.value()))
                assert p.flush(10) == 0
        assert len(reports["INVALID_RECORD"]) == 50 and len(reports["ok"]) == 50, reports
        assert len(cluster.request_log(since, api="InitProducerId")) == 1
        written: List[bytes] = []
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers})
        try:
            c.assign([TopicPartition("compacted", 0, 0)])
            deadline = time.monotonic() + 10
            while len(written) < 50 and time.monotonic() < deadline:
                written += [m.value() for m in c.consume(100, 0.2) if m.error() is None]
        finally:
            c.close()
        assert written == [b"%d-%d" % (r, i) for r in range(0, 20, 2) for i in range(5)]
