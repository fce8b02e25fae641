"""The sender against fake connections: request grouping, answers, retries in order,
timeouts, idempotence sequences and error handling. No sockets, no I/O thread."""
from __future__ import annotations

import time

import pytest

from kafka_client._cluster.metadata import MetadataCache, TopicInfo
from kafka_client.config import ClientConfig
from kafka_client.errors import KafkaError, KafkaException, client_error
from kafka_client.producer.accumulator import Accumulator
from kafka_client.producer.idempotence import Idempotence, restamp
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import InitProducerIdResponse, ProduceResponse
from kafka_proto.records import read_batches
from kafka_client.producer.sender import Sender


class FakeConn:
    state = "READY"
    next_attempt = 0.0
    muted_until = 0.0

    def __init__(self, node_id, max_in_flight=100):
        self.node_id = node_id
        self.host, self.port = "fake", node_id
        self.sent = []            # (request, callback)
        self.max_in_flight = max_in_flight
        self.ready = True

    def version_for(self, key):
        return {0: 9, 22: 4}.get(key)

    def can_send(self):
        return self.ready and len(self.sent) < self.max_in_flight

    def send(self, req, callback, *, version=None, expect_response=True, timeout=None):
        self.sent.append((req, callback, expect_response))

    def answer(self, i=0, errors=None, base=0, pop=True):
        """Answer request i: every partition ok (base offset) unless errors[(t, p)]."""
        req, cb, _ = self.sent.pop(i) if pop else self.sent[i]
        if req.API_KEY == 22:
            cb(InitProducerIdResponse(error_code=0, producer_id=77, producer_epoch=3), None)
            return
        topics = []
        for td in req.topic_data:
            parts = []
            for pd in td.partition_data:
                code = (errors or {}).get((td.name, pd.index), 0)
                parts.append(ProduceResponse.PartitionProduceResponse(
                    index=pd.index, error_code=code, base_offset=base))
            topics.append(ProduceResponse.TopicProduceResponse(name=td.name,
                                                               partition_responses=parts))
        cb(ProduceResponse(responses=topics), None)

    def fail(self, i=0, code=KafkaError._TRANSPORT):
        req, cb, _ = self.sent.pop(i)
        cb(None, client_error(code, "connection lost"))  # as the real connection builds it


class FakeCluster:
    def __init__(self, conns):
        self.conns = conns
        self.metadata = MetadataCache()
        self.on_metadata = []
        self.on_broker_state = []
        self.errors = []
        self.kicked = 0

    def ensure_connected(self, node):
        return self.conns.get(node)

    def _ready_conn(self):
        return next(iter(self.conns.values()))

    def _kick_connect(self, now):
        self.kicked += 1

    def report_error(self, err):
        self.errors.append(err)


def topic_info(name, leaders, error=0):
    """What the metadata cache knows of a topic: one leader per partition."""
    n = len(leaders)
    return TopicInfo(name, error, list(leaders), [-1] * n, [0] * n, time.monotonic())


def setup(partitions=(1,), nodes=(1,), **conf):
    base = {"bootstrap.servers": "fake:1", "linger.ms": 0, "retry.backoff.ms": 10,
            "retry.backoff.max.ms": 10}
    base.update(conf)
    cfg = ClientConfig.from_dict(base, role="producer")
    acc = Accumulator(cfg, lambda d: None, lambda n: None)
    t = acc._new_topic("t")
    acc.apply_metadata({"t": topic_info("t", partitions)}, time.monotonic())
    conns = {n: FakeConn(n) for n in nodes}
    cluster = FakeCluster(conns)
    reports = []
    sender = Sender(cfg, acc, cluster, Idempotence(cfg), reports.append)
    return acc, sender, conns, reports, t


def response(brokers, topics):
    """A MetadataResponse: brokers {id: port}, topics {name: (error, [leaders])}."""
    from kafka_proto.messages import MetadataResponse as R

    return R(brokers=[R.MetadataResponseBroker(node_id=i, host="h", port=p)
                      for i, p in brokers.items()],
             topics=[R.MetadataResponseTopic(
                 name=name, error_code=err,
                 partitions=[R.MetadataResponsePartition(partition_index=i, leader_id=ld)
                             for i, ld in enumerate(leaders)])
                 for name, (err, leaders) in topics.items()])


def run(sender, dt=0.0):
    return sender.tick(time.monotonic() + dt)


def values_of(report):
    batch = report.batch
    (b,) = list(read_batches(batch.data))
    return [r.value for r in b]


def test_one_request_per_broker_with_all_its_ready_partitions():
    acc, sender, conns, reports, t = setup(partitions=(1, 1, 2), nodes=(1, 2))
    for p in range(3):
        acc.produce("t", b"m%d" % p, partition=p)
    run(sender)
    assert len(conns[1].sent) == 1 and len(conns[2].sent) == 1
    req = conns[1].sent[0][0]
    assert req.acks == -1
    assert sorted(pd.index for td in req.topic_data for pd in td.partition_data) == [0, 1]
    conns[1].answer(base=40)
    conns[2].answer(base=7)
    assert sorted((r.batch.part.index, r.error, r.base_offset, r.status) for r in reports) == [
        (0, None, 40, 2), (1, None, 40, 2), (2, None, 7, 2)]


def test_retriable_error_retries_in_the_original_position():
    acc, sender, conns, reports, t = setup(**{"batch.num.messages": 1})
    for i in range(3):
        acc.produce("t", b"%d" % i, partition=0)
    run(sender)
    c = conns[1]
    assert len(c.sent) == 3  # pipelined: one batch per request
    # The first fails retriably, the others succeed... then the retry goes out last.
    c.answer(0, errors={("t", 0): 6})   # NOT_LEADER_OR_FOLLOWER: also refreshes metadata
    assert "t" in sender.cluster.metadata._asked
    assert t.parts[0].retrying and [b.seq for b in t.parts[0].ready] == [0]
    run(sender)                       # in flight must drain before the retry
    assert len(c.sent) == 2
    c.answer(0, base=0)
    c.answer(0, base=1)
    run(sender, 0.0)                  # backoff not over
    run(sender, 0.5)
    assert len(c.sent) == 1
    c.answer(0, base=2)
    assert [values_of(r) for r in reports] == [[b"1"], [b"2"], [b"0"]]
    assert reports[-1].batch.attempts == 2


def test_non_retriable_error_fails_the_batch():
    acc, sender, conns, reports, t = setup()
    acc.produce("t", b"big", partition=0)
    run(sender)
    conns[1].answer(errors={("t", 0): 10})  # MESSAGE_TOO_LARGE
    (r,) = reports
    assert r.error.code() == 10 and r.status == 1  # POSSIBLY_PERSISTED: it was sent


def test_retries_exhausted_and_message_timeout():
    acc, sender, conns, reports, t = setup(retries=1)
    acc.produce("t", b"x", partition=0)
    run(sender)
    conns[1].fail()
    run(sender, 0.5)
    conns[1].fail()
    assert reports[0].error.code() == KafkaError._TRANSPORT
    acc2, sender2, conns2, reports2, _ = setup(**{"message.timeout.ms": 100})
    conns2[1].ready = False  # never sendable
    acc2.produce("t", b"y", partition=0)
    run(sender2)
    assert not reports2
    run(sender2, 0.2)
    (r,) = reports2
    assert r.error.code() == KafkaError._MSG_TIMED_OUT and r.status == 0  # NOT_PERSISTED


def test_timed_out_reports_start_with_librdkafkas_words():
    # expired in the queue: librdkafka's text alone, as its delivery reports say it
    acc, sender, conns, reports, t = setup(**{"message.timeout.ms": 100})
    conns[1].ready = False  # never sendable
    acc.produce("t", b"y", partition=0)
    run(sender)
    run(sender, 0.2)
    (r,) = reports
    assert r.error.str() == "Local: Message timed out"
    # failed retriably once its time was up: the last error follows
    acc, sender, conns, reports, t = setup()
    acc.produce("t", b"x", partition=0)
    run(sender)
    (sent,) = sender.inflight
    sent.deadline = 0.0
    conns[1].fail()
    (r,) = reports
    assert r.error.code() == KafkaError._MSG_TIMED_OUT
    assert r.error.str() == "Local: Message timed out (last error: connection lost)"


def test_acks0_reports_when_written():
    acc, sender, conns, reports, t = setup(acks=0)
    acc.produce("t", b"x", partition=0)
    run(sender)
    req, cb, expect = conns[1].sent.pop()
    assert req.acks == 0 and expect is False
    cb(None, None)
    (r,) = reports
    assert r.error is None and r.base_offset == -1 and r.status == 1


def test_unknown_leader_asks_for_metadata():
    acc, sender, conns, reports, t = setup(partitions=(-1,))
    acc.produce("t", b"x", partition=0)
    run(sender)
    assert not conns[1].sent
    assert "t" in sender.cluster.metadata._asked


def test_idempotence_gets_a_producer_id_then_numbers_batches():
    acc, sender, conns, reports, t = setup(**{"enable.idempotence": True,
                                              "batch.num.messages": 2})
    assert acc.part_max_in_flight == 5 and sender.acks == -1
    for i in range(10):
        acc.produce("t", b"%d" % i, partition=0)
    run(sender)
    c = conns[1]
    assert [r.API_KEY for r, _, _ in c.sent] == [22]
    c.answer()
    run(sender)
    assert len(c.sent) == 5  # at most 5 in flight per partition
    seqs = []
    for req, _, _ in c.sent:
        (b,) = list(read_batches(req.topic_data[0].partition_data[0].records))
        seqs.append((b.producer_id, b.producer_epoch, b.base_sequence))
    assert seqs == [(77, 3, 0), (77, 3, 2), (77, 3, 4), (77, 3, 6), (77, 3, 8)]
    c.answer(0, errors={("t", 0): 46})  # DUPLICATE_SEQUENCE_NUMBER: delivered already
    assert reports[0].error is None and reports[0].status == 2


def test_idempotence_out_of_order_after_an_earlier_failure_is_retried():
    acc, sender, conns, reports, t = setup(**{"enable.idempotence": True,
                                              "batch.num.messages": 1})
    for i in range(3):
        acc.produce("t", b"%d" % i, partition=0)
    run(sender)
    c = conns[1]
    c.answer()
    run(sender)
    c.answer(0, errors={("t", 0): 6})    # first batch: not leader -> retried
    c.answer(0, errors={("t", 0): 45})   # second: out of order because of the first
    c.answer(0, errors={("t", 0): 45})
    assert not reports and sender.idem.fatal is None
    assert [b.seq for b in t.parts[0].ready] == [0, 1, 2]
    for _ in range(3):
        run(sender, 1.0)
        c.answer(0, base=10)
    assert [values_of(r) for r in reports] == [[b"0"], [b"1"], [b"2"]]
    # Sequence numbers unchanged by the retries.
    assert [r.batch.base_sequence for r in reports] == [0, 1, 2]


def test_idempotence_out_of_order_while_an_earlier_batch_is_in_flight_is_retried():
    """After leader changes, a partition's batches can be in flight to two brokers: the
    answer for a later batch (OUT_OF_ORDER_SEQUENCE_NUMBER from the new leader, which
    expects the earlier one) may come before the earlier batch's. That batch is not
    acknowledged yet, so nothing is lost: the later one waits and is sent again (a soak
    run under leader moves made this fatal)."""
    acc, sender, c, reports, t = _idempotent_in_flight(2)
    c.answer(1, errors={("t", 0): 45})   # the later batch's answer, first
    assert sender.idem.fatal is None and not reports
    assert [b.seq for b in t.parts[0].ready] == [1]
    c.answer(0, base=10)                 # the earlier one is acknowledged
    run(sender, 1.0)
    assert _sent(c) == [(3, 1, [b"1"])]  # the same sequence, sent again
    c.answer(0, base=11)
    assert [(values_of(r), r.error) for r in reports] == [([b"0"], None), ([b"1"], None)]


def test_idempotence_unexplained_out_of_order_is_fatal():
    acc, sender, conns, reports, t = setup(**{"enable.idempotence": True})
    acc.produce("t", b"x", partition=0)
    run(sender)
    c = conns[1]
    c.answer()
    run(sender)
    acc.produce("t", b"queued", partition=0)  # still queued when the fatal error hits
    c.answer(0, errors={("t", 0): 45})
    # The broker's code flagged fatal (confluent-kafka 2.16.1 raises
    # OUT_OF_ORDER_SEQUENCE_NUMBER, fatal, from flush() on the test cluster; was _FATAL)
    fatal = sender.idem.fatal
    assert fatal is not None and fatal.fatal()
    assert fatal.code() == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert sender.cluster.errors == [fatal]
    # in flight: the fatal error; queued: purged (_PURGE_QUEUE), as librdkafka does
    assert sorted(r.error.code() for r in reports) == [KafkaError._PURGE_QUEUE,
                                                       ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
    assert len(reports) == 2
    # From now on produce() (the compiled one, no wrapper) refuses: _FATAL naming that
    # error, not itself flagged fatal (confluent-kafka 2.16.1's produce() error).
    with pytest.raises(KafkaException) as refused:
        acc.produce("t", b"late", partition=0)
    err = refused.value.args[0]
    assert err.code() == KafkaError._FATAL and not err.fatal() and fatal.str() in err.str()
    assert acc.msg_count == 2


def test_restamp_rewrites_producer_fields_and_crc():
    from kafka_proto.records import RecordBatchBuilder

    b = RecordBatchBuilder(producer_id=1, producer_epoch=0, base_sequence=5)
    b.append(b"v")
    data = restamp(b.build(), 9, 2, 40)
    (batch,) = list(read_batches(data, check_crc=True))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 2, 40)
    assert batch.validate_crc()


def test_purge_reports_queued_and_in_flight():
    acc, sender, conns, reports, t = setup(**{"batch.num.messages": 1})
    acc.produce("t", b"a", partition=0)
    run(sender)
    acc.produce("t", b"b", partition=0)
    sender.purge(KafkaError(KafkaError._PURGE_QUEUE), KafkaError(KafkaError._PURGE_INFLIGHT),
                 True)
    codes = sorted(r.error.code() for r in reports)
    assert codes == sorted([KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT])
    conns[1].answer()  # the late answer is ignored
    assert len(reports) == 2


def test_idempotence_timeout_of_a_sent_batch_bumps_the_epoch_and_restarts_sequences():
    acc, sender, conns, reports, t = setup(**{"enable.idempotence": True,
                                              "batch.num.messages": 1,
                                              "message.timeout.ms": 200})
    c = conns[1]
    acc.produce("t", b"0", partition=0)
    run(sender)
    c.answer()                       # producer id 77 epoch 3
    run(sender)
    c.fail()                         # lost in flight; retried later
    acc.produce("t", b"1", partition=0)
    run(sender, 0.3)                 # both now past message.timeout.ms
    assert [r.error.code() for r in reports] == [KafkaError._MSG_TIMED_OUT] * 2
    assert reports[0].status == 1        # the sent one: POSSIBLY_PERSISTED
    assert sender.idem.bump_wanted
    sender._next_expiry_check = float("inf")  # the clock jumps below; "2" must not expire
    acc.produce("t", b"2", partition=0)
    run(sender, 0.3)
    assert [r.API_KEY for r, _, _ in c.sent] == [22]   # InitProducerId again
    req = c.sent[0][0]
    assert (req.producer_id, req.producer_epoch) == (77, 3)
    req_cb = c.sent.pop(0)[1]
    req_cb(InitProducerIdResponse(error_code=0, producer_id=77, producer_epoch=4), None)
    run(sender, 0.3)
    (b,) = list(read_batches(c.sent[0][0].topic_data[0].partition_data[0].records))
    assert (b.producer_epoch, b.base_sequence) == (4, 0)



def test_idempotence_epoch_bump_fails_batches_sent_under_the_old_epoch():
    """A batch that was sent, lost its answer and waits to be resent may be in the log
    already. If the epoch is bumped meanwhile (another batch timed out), sending it again
    under the new epoch with a new sequence would append it a second time (seen as a
    duplicated batch under the fault proxy with message.timeout.ms=1500): it must fail,
    POSSIBLY_PERSISTED, and the partition's sequence restart with the next new batch."""
    acc, sender, conns, reports, t = setup(partitions=(1, 1), **{
        "enable.idempotence": True, "batch.num.messages": 1, "message.timeout.ms": 10000})
    c = conns[1]
    acc.produce("t", b"a", partition=0)
    acc.produce("t", b"b", partition=1)
    run(sender, 0.001)
    c.answer()                        # producer id 77 epoch 3
    run(sender, 0.001)
    assert len(c.sent) == 1           # one request: a and b
    c.fail()                          # the answer is lost: both may be in the log
    (a,) = t.parts[0].ready
    (b,) = t.parts[1].ready
    assert a.sent and b.sent and b.base_sequence == 0
    a.deadline = time.monotonic()     # a times out, b does not
    sender._next_expiry_check = 0.0
    run(sender, 0.05)
    assert [(r.batch, r.error.code(), r.status) for r in reports] == [
        (a, KafkaError._MSG_TIMED_OUT, 1)]
    assert [r.API_KEY for r, _, _ in c.sent] == [22]   # the epoch bump
    c.sent.pop(0)[1](InitProducerIdResponse(error_code=0, producer_id=77, producer_epoch=4),
                     None)
    # b is not sent again under epoch 4: it fails, as possibly persisted.
    assert [(r.batch, r.error.code(), r.status) for r in reports[1:]] == [
        (b, KafkaError._TRANSPORT, 1)]
    assert not t.parts[1].ready
    acc.produce("t", b"c", partition=1)
    run(sender, 0.1)
    (req, _, _), = c.sent
    sent = [(pd.index, rb.producer_epoch, rb.base_sequence, [r.value for r in rb])
            for td in req.topic_data for pd in td.partition_data
            for rb in read_batches(pd.records)]
    assert sent == [(1, 4, 0, [b"c"])]


def test_idempotence_bump_refused_asks_for_a_new_producer_id():
    """Tansu 0.6 answers an epoch bump (InitProducerId with the current id and epoch)
    with UNKNOWN_SERVER_ERROR every time: asking again the same way never ends, and
    every later message timed out. A refused bump asks for a new producer id instead,
    which serves a producer without transactions as well."""
    acc, sender, conns, reports, t = setup(**{"enable.idempotence": True,
                                              "batch.num.messages": 1,
                                              "message.timeout.ms": 200})
    c = conns[1]
    acc.produce("t", b"0", partition=0)
    run(sender)
    c.answer()                       # producer id 77 epoch 3
    run(sender)
    c.fail()                         # lost in flight
    run(sender, 0.3)                 # ... and timed out: bump wanted
    assert sender.idem.bump_wanted
    sender._next_expiry_check = float("inf")
    acc.produce("t", b"1", partition=0)
    run(sender, 0.3)
    req, cb, _ = c.sent.pop(0)
    assert req.API_KEY == 22 and (req.producer_id, req.producer_epoch) == (77, 3)
    cb(InitProducerIdResponse(error_code=-1, producer_id=-1, producer_epoch=-1), None)
    run(sender, 1.0)                 # past the InitProducerId retry backoff
    req, cb, _ = c.sent.pop(0)
    assert req.API_KEY == 22 and (req.producer_id, req.producer_epoch) == (-1, -1)
    cb(InitProducerIdResponse(error_code=0, producer_id=78, producer_epoch=0), None)
    run(sender, 1.0)
    (b,) = list(read_batches(c.sent[0][0].topic_data[0].partition_data[0].records))
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (78, 0, 0)
    assert [r.value for r in b] == [b"1"]

def test_leader_change_from_metadata_reroutes_queued_batches():
    acc, sender, conns, reports, t = setup(partitions=(1,), nodes=(1, 2))
    acc.produce("t", b"a", partition=0)
    run(sender)
    conns[1].answer(errors={("t", 0): 6})        # NOT_LEADER_OR_FOLLOWER
    md = sender.cluster.metadata
    assert md.take_request_topics() == ["t"]     # a refresh was asked for
    md.update(response({1: 1, 2: 2}, {"t": (0, [2])}), time.monotonic(), ["t"])
    sender.on_metadata({"t"})
    assert t.parts[0].leader == 2
    run(sender, 1.0)
    assert not conns[1].sent and len(conns[2].sent) == 1
    conns[2].answer(base=5)
    (r,) = reports
    assert r.error is None and r.base_offset == 5 and r.batch.attempts == 2


def test_new_partitions_from_metadata_are_used():
    acc, sender, conns, reports, t = setup(partitions=(1,))
    md = sender.cluster.metadata
    md.update(response({1: 1}, {"t": (0, [1, 1, 1])}), time.monotonic(), ["t"])
    sender.on_metadata({"t"})
    assert t.count == 3
    acc.produce("t", b"x", partition=2)
    run(sender)
    assert conns[1].sent[0][0].topic_data[0].partition_data[0].index == 2


def test_partitions_gone_from_a_smaller_count_fail_their_batches_at_once():
    # The topic was deleted and re-created with fewer partitions (librdkafka: "partition
    # count changed"): queued batches of the partitions that are gone fail at once, one
    # in flight fails when its answer asks for a retry; the rest carry on.
    acc, sender, conns, reports, t = setup(partitions=(1, 1, 1), **{"batch.num.messages": 1})
    acc.produce("t", b"in-flight", partition=2)
    run(sender)
    acc.produce("t", b"queued", partition=2)
    acc.produce("t", b"kept", partition=0)
    md = sender.cluster.metadata
    md.update(response({1: 1}, {"t": (0, [1])}), time.monotonic(), ["t"])
    sender.on_metadata({"t"})
    assert t.count == 1 and len(t.parts) == 1
    (r,) = reports
    assert r.error.code() == KafkaError._UNKNOWN_PARTITION and r.batch.seq == 1  # "queued"
    assert "partition count changed from 3 to 1" in r.error.str() and r.status == 0
    with pytest.raises(KafkaException) as ei:          # as for any partition not there
        acc.produce("t", b"x", partition=2)
    assert ei.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    c = conns[1]
    c.answer(0, errors={("t", 2): 3})                   # UNKNOWN_TOPIC_OR_PARTITION
    assert reports[-1].error.code() == KafkaError._UNKNOWN_PARTITION
    assert values_of(reports[-1]) == [b"in-flight"] and reports[-1].status == 1
    run(sender, 1.0)
    (req, _, _), = c.sent                                # only partition 0 is sent
    assert [pd.index for td in req.topic_data for pd in td.partition_data] == [0]


def test_an_idempotent_batch_of_a_partition_gone_is_no_sequence_gap():
    # A numbered batch that fails because its partition no longer exists leaves no gap
    # the broker could see: no epoch bump, the other partitions go on as they were.
    acc, sender, conns, reports, t = setup(partitions=(1, 1), **{"enable.idempotence": True})
    c = conns[1]
    run(sender)
    c.answer()                                   # InitProducerId
    acc.produce("t", b"gone", partition=1)
    run(sender, 0.1)
    md = sender.cluster.metadata
    md.update(response({1: 1}, {"t": (0, [1])}), time.monotonic(), ["t"])
    sender.on_metadata({"t"})
    c.answer(0, errors={("t", 1): 3})
    (r,) = reports
    assert r.error.code() == KafkaError._UNKNOWN_PARTITION
    assert not sender.idem.bump_wanted and sender.idem.fatal is None
    acc.produce("t", b"next", partition=0)
    run(sender, 0.2)
    (req, _, _), = c.sent
    (b,) = list(read_batches(req.topic_data[0].partition_data[0].records))
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (77, 3, 0)


def test_a_deleted_topics_messages_fail_after_the_propagation_time():
    # librdkafka's rule, whatever allow.auto.create.topics says: once the metadata has
    # said the topic does not exist for topic.metadata.propagation.max.ms, its queued
    # messages fail with the broker's UNKNOWN_TOPIC_OR_PART and produce() raises
    # _UNKNOWN_TOPIC; a batch in flight fails when its answer asks for a retry.
    acc, sender, conns, reports, t = setup(
        partitions=(1, 1), **{"batch.num.messages": 1,
                               "topic.metadata.propagation.max.ms": 1000})
    c = conns[1]
    acc.produce("t", b"retried", partition=0)
    acc.produce("t", b"in-flight", partition=0)
    run(sender)
    assert len(c.sent) == 2
    md = sender.cluster.metadata
    md.update(response({1: 1}, {"t": (3, [])}), time.monotonic(), ["t"])
    sender.on_metadata({"t"})
    c.ready = False                           # what waits stays queued
    acc.produce("t", b"queued", partition=1)
    c.answer(0, errors={("t", 0): 3})         # retriable, for now: it waits to be resent
    run(sender, 0.5)
    assert not reports                        # within the propagation time
    run(sender, 1.2)
    assert sorted((r.batch.part.index, r.batch.seq) for r in reports) == [(0, 0), (1, 0)]
    assert {r.error.code() for r in reports} == {KafkaError.UNKNOWN_TOPIC_OR_PART}
    assert "no longer exists" in reports[0].error.str()
    c.answer(0, errors={("t", 0): 3})         # the one in flight: not resent
    assert reports[-1].batch.seq == 1 and reports[-1].status == 1
    assert reports[-1].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    with pytest.raises(KafkaException) as ei:
        acc.produce("t", b"later")
    assert ei.value.args[0].code() == KafkaError._UNKNOWN_TOPIC
    # Re-created: produce() works again, on new partitions.
    c.ready = True
    md.update(response({1: 1}, {"t": (0, [1])}), time.monotonic(), ["t"])
    sender.on_metadata({"t"})
    acc.produce("t", b"again", partition=0)
    run(sender, 2.0)
    (req, _, _), = c.sent
    c.answer(0)
    assert reports[-1].error is None and values_of(reports[-1]) == [b"again"]
    assert len(reports) == 4


def test_a_topic_back_as_it_was_within_the_propagation_time_loses_nothing():
    acc, sender, conns, reports, t = setup(
        partitions=(1,), **{"topic.metadata.propagation.max.ms": 1000})
    md = sender.cluster.metadata
    md.update(response({1: 1}, {"t": (3, [])}), time.monotonic(), ["t"])
    sender.on_metadata({"t"})
    md.update(response({1: 1}, {"t": (0, [1])}), time.monotonic(), ["t"])
    sender.on_metadata({"t"})              # the same leaders: nothing else changes
    acc.produce("t", b"x", partition=0)
    run(sender, 5.0)                       # long past the propagation time
    conns[1].answer(0)
    (r,) = reports
    assert r.error is None


def test_a_send_that_fails_at_once_still_wakes_the_loop_for_the_retry():
    """A write error inside tick() (EPIPE on a socket that just connected) fails the
    request synchronously: the batch is requeued for retry.backoff.ms later, and tick()
    must say so, or the I/O thread sleeps its safety-net second first (seen under the
    fault proxy as 1 s stalls)."""
    acc, sender, conns, reports, t = setup()
    c = conns[1]

    def send_fails(req, callback, **kw):
        callback(None, client_error(KafkaError._TRANSPORT, "send failed: broken pipe"))
    c.send = send_fails
    acc.produce("t", b"x", partition=0)
    now = time.monotonic() + 0.001     # linger.ms=0: the batch is ready
    nxt = sender.tick(now)
    (b,) = t.parts[0].ready
    assert b.attempts == 1 and b.retry_at > now and not reports
    assert nxt is not None and nxt <= b.retry_at


def test_leader_in_reconnect_backoff_wakes_the_loop_when_the_backoff_ends():
    acc, sender, conns, reports, t = setup()
    c = conns[1]
    acc.produce("t", b"x", partition=0)
    now = time.monotonic() + 0.001     # linger.ms=0: the batch is ready
    c.ready, c.state, c.next_attempt = False, "DISCONNECTED", now + 0.05
    nxt = sender.tick(now)
    assert not c.sent and len(t.parts[0].ready) == 1
    assert nxt is not None and now < nxt <= now + 0.05


def test_a_request_carries_at_most_message_max_bytes_of_batches():
    """librdkafka's message.max.bytes is the largest request: batches of several
    partitions that do not fit together go out in more requests (one batch always
    goes, however big)."""
    acc, sender, conns, reports, t = setup(partitions=(1, 1, 1, 1), **{
        "message.max.bytes": 1000, "batch.size": 5000})
    for p in range(4):
        acc.produce("t", b"x" * 300, partition=p)
    acc.produce("t", b"y" * 900, partition=0)    # partition 0's batch: over 1,200 bytes
    run(sender, 0.001)
    c = conns[1]
    per_request = [sorted((pd.index, len(pd.records)) for td in req.topic_data
                          for pd in td.partition_data) for req, _, _ in c.sent]
    assert sorted(i for r in per_request for i, _ in r) == [0, 1, 2, 3]
    big = [r for r in per_request if r[0][0] == 0]
    assert big == [[(0, big[0][0][1])]] and big[0][0][1] > 1000     # alone
    small = [r for r in per_request if r[0][0] != 0]
    assert sorted(len(r) for r in small) == [1, 2]  # ~370 bytes each: two fit in 1,000
    assert all(sum(n for _, n in r) <= 1000 for r in small)
    c.answer(0)
    c.answer(0)
    c.answer(0)
    assert sorted(r.batch.part.index for r in reports if r.error is None) == [0, 1, 2, 3]


# -- idempotent recovery (KIP-360, librdkafka's rules) ----------------------------------------

def _idempotent_in_flight(n, **conf):
    """An idempotent sender (producer id 77 epoch 3) with ``n`` one-message batches of
    partition 0 in flight, in one request each."""
    acc, sender, conns, reports, t = setup(**dict({"enable.idempotence": True,
                                                   "batch.num.messages": 1}, **conf))
    for i in range(n):
        acc.produce("t", b"%d" % i, partition=0)
    run(sender)
    c = conns[1]
    c.answer()                       # InitProducerId: 77 / 3
    run(sender)
    assert len(c.sent) == n
    return acc, sender, c, reports, t


def _sent(c):
    """(epoch, base sequence, values) of every batch in the requests sent, in order."""
    return [(rb.producer_epoch, rb.base_sequence, [r.value for r in rb])
            for req, _, _ in c.sent if req.API_KEY == 0
            for td in req.topic_data for pd in td.partition_data
            for rb in read_batches(pd.records)]


def _bump(sender, c, pid=77, epoch=4):
    """Run the sender until it asks for the bump; answer it. Returns the request."""
    run(sender, 0.5)
    i = next(i for i, (r, _, _) in enumerate(c.sent) if r.API_KEY == 22)
    req, cb, _ = c.sent.pop(i)
    cb(InitProducerIdResponse(error_code=0, producer_id=pid, producer_epoch=epoch), None)
    return req


def test_unknown_producer_id_bumps_the_epoch_and_resends_renumbered():
    """The broker forgot the producer (its records were deleted): the batch it refused
    and those refused after it (out of order, since the first is missing) are not in the
    log. librdkafka bumps the epoch and sends them again, renumbered: none fails."""
    acc, sender, c, reports, t = _idempotent_in_flight(3)
    c.answer(0, errors={("t", 0): 59})   # UNKNOWN_PRODUCER_ID
    c.answer(0, errors={("t", 0): 45})   # OUT_OF_ORDER_SEQUENCE_NUMBER: caused by it
    c.answer(0, errors={("t", 0): 45})
    assert not reports and sender.idem.fatal is None and sender.idem.bump_wanted
    req = _bump(sender, c)
    assert (req.producer_id, req.producer_epoch) == (77, 3)
    for _ in range(3):
        run(sender, 1.0)
        c.answer(0)
    assert [values_of(r) for r in reports] == [[b"0"], [b"1"], [b"2"]]
    assert all(r.error is None for r in reports)
    assert [(r.batch.epoch, r.batch.base_sequence) for r in reports] == [(4, 0), (4, 1), (4, 2)]


def test_unknown_producer_id_for_a_resent_batch_is_fatal():
    """A batch sent before (its answer lost) may be in the log: renumbered under a new
    epoch it could be appended twice, so librdkafka gives up."""
    acc, sender, c, reports, t = _idempotent_in_flight(1)
    c.fail()                             # the answer is lost: possibly appended
    run(sender, 1.0)
    c.answer(0, errors={("t", 0): 59})
    fatal = sender.idem.fatal
    assert fatal is not None and fatal.code() == ErrorCode.UNKNOWN_PRODUCER_ID
    assert fatal.fatal()
    (r,) = reports
    assert r.error is fatal and r.status == 1    # POSSIBLY_PERSISTED


@pytest.mark.parametrize("first", ["NOT_ENOUGH_REPLICAS", "NOT_LEADER_OR_FOLLOWER",
                                   "_TIMED_OUT_QUEUE"])
def test_unknown_producer_id_after_attempts_none_appended_bumps_the_epoch(first):
    """The first attempt refused (NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER) or never
    written (timed out in its connection's queue: not an attempt, the batch goes back
    with the same epoch and sequence, no bump), then answered UNKNOWN_PRODUCER_ID: no
    attempt appended it, so the epoch is bumped and it goes again renumbered, as on a
    first attempt. (Each send forgot that the attempts before it were refused, and a
    request timed out in the queue counted as one maybe appended: fatal, "the batch was
    sent before and may be in the log".)"""
    acc, sender, c, reports, t = _idempotent_in_flight(1)
    if first == "_TIMED_OUT_QUEUE":
        c.fail(code=KafkaError._TIMED_OUT_QUEUE)
    else:
        c.answer(0, errors={("t", 0): getattr(ErrorCode, first)})
    assert not reports and not sender.idem.bump_wanted and sender.idem.fatal is None
    run(sender, 1.0)                     # sent again after the backoff
    assert _sent(c) == [(3, 0, [b"0"])]
    c.answer(0, errors={("t", 0): ErrorCode.UNKNOWN_PRODUCER_ID})
    assert sender.idem.fatal is None and sender.idem.bump_wanted and not reports
    _bump(sender, c)
    run(sender, 1.0)
    assert _sent(c) == [(4, 0, [b"0"])]
    c.answer(0)
    assert [(r.error, values_of(r)) for r in reports] == [(None, [b"0"])]


def test_a_batch_refused_then_maybe_appended_is_not_renumbered():
    """Refused once, then its second attempt's answer lost (it may be in the log now):
    UNKNOWN_PRODUCER_ID on the third stays fatal, as for any batch maybe appended."""
    acc, sender, c, reports, t = _idempotent_in_flight(1)
    c.answer(0, errors={("t", 0): ErrorCode.NOT_ENOUGH_REPLICAS})
    run(sender, 1.0)
    c.fail()                             # the second attempt's answer is lost
    run(sender, 1.0)
    c.answer(0, errors={("t", 0): ErrorCode.UNKNOWN_PRODUCER_ID})
    fatal = sender.idem.fatal
    assert fatal is not None and fatal.code() == ErrorCode.UNKNOWN_PRODUCER_ID
    (r,) = reports
    assert r.error is fatal and r.status == 1    # POSSIBLY_PERSISTED


def test_a_sequence_gap_bumps_the_epoch_and_the_refused_batches_are_renumbered():
    """A batch that had its sequence fails for good (MESSAGE_TOO_LARGE): the next one is
    refused as out of order. librdkafka bumps the epoch ("message sequence gap"); the
    refused batch goes again under the new epoch from sequence 0."""
    acc, sender, c, reports, t = _idempotent_in_flight(2)
    c.answer(0, errors={("t", 0): 10})   # MESSAGE_TOO_LARGE: fails, leaves a gap
    c.answer(0, errors={("t", 0): 45})   # OUT_OF_ORDER_SEQUENCE_NUMBER because of it
    assert [(r.error.code(), values_of(r)) for r in reports] == [(10, [b"0"])]
    assert sender.idem.fatal is None and sender.idem.bump_wanted
    _bump(sender, c)
    run(sender, 1.0)
    assert _sent(c) == [(4, 0, [b"1"])]
    c.answer(0)
    assert reports[-1].error is None and values_of(reports[-1]) == [b"1"]


TOPIC_AUTHORIZATION_FAILED = ErrorCode.TOPIC_AUTHORIZATION_FAILED


@pytest.mark.parametrize("in_flight", [1, 3])
def test_batches_the_acls_refuse_leave_no_gap_and_the_next_takes_their_sequence(in_flight):
    """Refused with TOPIC_AUTHORIZATION_FAILED, a batch is not in the log (the ACLs are
    checked first): no epoch bump; the next batch takes the first refused one's sequence.
    With several of the partition's batches in flight, each refused, the gap closes with
    the last one (it was bumped for: an InitProducerId per refused request)."""
    acc, sender, c, reports, t = _idempotent_in_flight(in_flight)
    for _ in range(in_flight):
        c.answer(0, errors={("t", 0): TOPIC_AUTHORIZATION_FAILED})
    assert [r.error.code() for r in reports] == [TOPIC_AUTHORIZATION_FAILED] * in_flight
    assert not sender.idem.bump_wanted and sender.idem.fatal is None
    acc.produce("t", b"granted", partition=0)
    run(sender, 1.0)
    assert _sent(c) == [(3, 0, [b"granted"])]          # no InitProducerId, sequence 0
    c.answer(0)
    assert reports[-1].error is None


def test_an_out_of_order_answer_behind_batches_the_acls_refused_bumps_the_epoch():
    """The first batch refused (TOPIC_AUTHORIZATION_FAILED), the ACL granted before the
    second one reached the broker: it is out of order (the first is missing), and an
    epoch bump renumbers it, not a fatal error."""
    acc, sender, c, reports, t = _idempotent_in_flight(2)
    c.answer(0, errors={("t", 0): TOPIC_AUTHORIZATION_FAILED})
    assert not sender.idem.bump_wanted               # the second may be refused too
    c.answer(0, errors={("t", 0): 45})               # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert sender.idem.fatal is None and sender.idem.bump_wanted
    _bump(sender, c)
    run(sender, 1.0)
    assert _sent(c) == [(4, 0, [b"1"])]
    c.answer(0)
    assert [(r.error and r.error.code(), values_of(r)) for r in reports] == [
        (TOPIC_AUTHORIZATION_FAILED, [b"0"]), (None, [b"1"])]


def test_another_failure_behind_batches_the_acls_refused_bumps_the_epoch():
    acc, sender, c, reports, t = _idempotent_in_flight(2)
    c.answer(0, errors={("t", 0): TOPIC_AUTHORIZATION_FAILED})
    c.answer(0, errors={("t", 0): -1})               # UNKNOWN_SERVER_ERROR: a gap after all
    assert sender.idem.fatal is None and sender.idem.bump_wanted
    _bump(sender, c)
    acc.produce("t", b"next", partition=0)
    run(sender, 1.0)
    assert _sent(c) == [(4, 0, [b"next"])]


@pytest.mark.parametrize("code", [10, TOPIC_AUTHORIZATION_FAILED, -1])
def test_gapless_guarantee_makes_a_gap_fatal(code):
    """Also for a batch the broker refused whole (MESSAGE_TOO_LARGE, the ACLs): no gap in
    the sequence, but one in the messages, which is what the guarantee is about."""
    acc, sender, c, reports, t = _idempotent_in_flight(2, **{"enable.gapless.guarantee": True})
    c.answer(0, errors={("t", 0): code})
    fatal = sender.idem.fatal
    assert fatal is not None and "_GAPLESS_GUARANTEE" in fatal.str()
    assert {r.error.code() for r in reports} == {code if code >= 0 else
                                                 KafkaError.UNKNOWN_SERVER_ERROR,
                                                 KafkaError._GAPLESS_GUARANTEE}


def test_batches_refused_by_a_leader_error_are_renumbered_by_a_bump():
    """A batch refused (NOT_LEADER_OR_FOLLOWER) on its only attempt is not in the log:
    when an epoch bump comes meanwhile (here: a partition's batch timed out), it is
    renumbered and sent, not failed as possibly persisted."""
    acc, sender, conns, reports, t = setup(partitions=(1, 1), **{
        "enable.idempotence": True, "batch.num.messages": 1, "message.timeout.ms": 10000})
    c = conns[1]
    acc.produce("t", b"a", partition=0)
    acc.produce("t", b"b", partition=1)
    run(sender, 0.001)
    c.answer()                            # producer id 77 epoch 3
    run(sender, 0.001)
    req, cb, _ = c.sent.pop(0)
    R = ProduceResponse
    cb(R(responses=[R.TopicProduceResponse(name="t", partition_responses=[
        R.PartitionProduceResponse(index=0, error_code=6, base_offset=-1),     # refused
        R.PartitionProduceResponse(index=1, error_code=7, base_offset=-1)])]), None)
    (a,) = t.parts[0].ready
    (b,) = t.parts[1].ready               # REQUEST_TIMED_OUT: may have been appended
    b.deadline = time.monotonic()
    sender._next_expiry_check = 0.0
    run(sender, 0.05)                     # b times out: the gap asks for a bump
    assert [(r.batch, r.error.code()) for r in reports] == [(b, KafkaError._MSG_TIMED_OUT)]
    _bump(sender, c)
    assert t.parts[0].ready[0] is a and not a.sent
    run(sender, 1.0)
    assert _sent(c) == [(4, 0, [b"a"])]


def _refused_naming(c, leader, epoch):
    """Answer c's oldest Produce: NOT_LEADER_OR_FOLLOWER naming ``leader`` at ``epoch``."""
    req, cb, _ = c.sent.pop(0)
    R = ProduceResponse
    cb(R(responses=[R.TopicProduceResponse(name="t", partition_responses=[
        R.PartitionProduceResponse(index=0, error_code=6, base_offset=-1,
                                   current_leader=R.LeaderIdAndEpoch(leader_id=leader,
                                                                     leader_epoch=epoch))])]),
       None)


def test_a_refusal_naming_a_newer_leader_is_resent_there_at_once():
    """KIP-951: the batch goes to the named leader without the retry backoff (1 s here)
    when the leader's epoch is newer than the metadata's; an answer naming an older or
    the same epoch waits out the backoff (brokers that disagree cannot ping-pong it)."""
    for epoch, at_once in ((6, True), (5, False)):
        acc, sender, conns, reports, t = setup(nodes=(1, 2), **{
            "retry.backoff.ms": 1000, "retry.backoff.max.ms": 1000})
        md = sender.cluster.metadata
        md.brokers = {1: ("h", 1, None), 2: ("h", 2, None)}
        md.topics["t"] = TopicInfo("t", 0, [1], [5], [0], time.monotonic())
        acc.produce("t", b"m", partition=0)
        run(sender)
        _refused_naming(conns[1], 2, epoch)
        assert t.parts[0].leader == 2
        run(sender, 0.001)
        assert len(conns[2].sent) == (1 if at_once else 0), epoch
        assert md.leader("t", 0) == (2 if at_once else 1)
        run(sender, 1.1)
        assert len(conns[2].sent) == 1
        conns[2].answer(base=9)
        assert [(r.error, r.base_offset) for r in reports] == [(None, 9)]


def test_an_init_producer_id_answer_without_an_id_is_retried_after_the_backoff():
    """No error and producer id -1: nothing to produce with. It was taken as success and
    asked again at once, thousands of times a second."""
    acc, sender, conns, reports, t = setup(**{"enable.idempotence": True})
    c = conns[1]
    acc.produce("t", b"x", partition=0)
    run(sender)
    req, cb, _ = c.sent.pop()
    assert req.API_KEY == 22
    cb(InitProducerIdResponse(error_code=0, producer_id=-1, producer_epoch=-1), None)
    assert not sender.idem.ready and sender.idem.init_failures == 1
    run(sender)
    run(sender, 0.001)
    assert not c.sent                          # not at once: after the backoff
    run(sender, 1.0)
    assert [r.API_KEY for r, _, _ in c.sent] == [22]
    c.answer()                                 # a real id this time
    run(sender, 1.0)
    assert [r.API_KEY for r, _, _ in c.sent] == [0]


def test_an_idle_producer_asks_for_no_wake_up():
    """Nothing queued: the I/O loop may sleep (the expiry check woke it ten times a
    second, 16 times librdkafka's idle CPU); a queued message brings the check back."""
    acc, sender, conns, reports, t = setup()
    acc.produce("t", b"x", partition=0)
    assert run(sender) is not None
    conns[1].answer()
    for r in reports:                      # the application serves the report
        acc.reported(r.batch.count, r.batch.nbytes or 0)
    assert run(sender, 0.2) is None
    acc.produce("t", b"y", partition=0)
    nxt = run(sender, 0.4)
    assert nxt is not None and nxt <= time.monotonic() + 0.6


def test_batches_waiting_behind_a_slow_broker_take_more_records():
    """A partition at its limit of requests in flight: its last closed batch takes the
    records that come meanwhile (librdkafka builds its batches when a request can go),
    so the backlog leaves in a few large batches, not one request per linger.ms of
    records (with a broker answering in 0.2 s, messages timed out)."""
    acc, sender, conns, reports, t = setup(**{"enable.idempotence": True, "linger.ms": 0})
    c = conns[1]
    run(sender)
    c.answer()                                   # InitProducerId
    for i in range(5):                           # five requests in flight: the limit
        acc.produce("t", b"%d" % i, partition=0)
        run(sender)
    assert len(c.sent) == 5 and t.parts[0].in_flight == 5
    for i in range(5, 50):                       # each closes at once (linger.ms=0)...
        acc.produce("t", b"%d" % i, partition=0)
        run(sender)
    p = t.parts[0]
    batches = list(p.ready) + ([p.open] if p.open else [])
    assert [b.count for b in batches] == [45]    # ... and the waiting one takes them
    c.answer(0)                                  # room for one request
    run(sender, 0.01)
    req = c.sent[-1][0]
    (b,) = list(read_batches(req.topic_data[0].partition_data[0].records))
    assert [r.value for r in b] == [b"%d" % i for i in range(5, 50)]
    assert b.base_sequence == 5
    for _ in range(5):
        c.answer(0)
    assert [len(values_of(r)) for r in reports] == [1] * 5 + [45]
    assert all(r.error is None for r in reports)


def test_without_idempotence_a_partition_keeps_at_most_five_requests_in_flight():
    """max.in.flight.requests.per.connection is 1,000,000 by default (librdkafka's): a
    partition of a broker slower than the application sent a request per linger.ms of
    records (1,600 in flight per connection, batches of 8 records, the memory growing);
    it keeps 5 in flight and the waiting batch takes the rest."""
    acc, sender, conns, reports, t = setup(**{"batch.num.messages": 1, "linger.ms": 0})
    c = conns[1]
    for i in range(5):
        acc.produce("t", b"%d" % i, partition=0)
        run(sender)
    acc.produce("t", b"5", partition=0)
    run(sender)
    assert len(c.sent) == 5 and [b.count for b in t.parts[0].ready] == [1]
    c.answer(0)
    run(sender, 0.01)
    assert len(c.sent) == 5


def test_a_partition_left_out_of_the_answer_is_sent_again_under_idempotence():
    """A Produce answer that leaves a partition out says nothing of its batch: it may or
    may not be in the log, as when an answer is lost. An idempotent producer sends it
    again with the same sequence (a copy already appended is answered
    DUPLICATE_SEQUENCE_NUMBER: delivered once); it used to fail it with _BAD_MSG though it
    was in the log (through the fault proxy: 8 of 30 messages reported failed and
    written). Without idempotence it still fails (sent again, it could be written twice),
    as librdkafka fails it."""
    for idempotent in (True, False):
        acc, sender, conns, reports, t = setup(partitions=(1, 1), **{
            "enable.idempotence": idempotent})
        acc.produce("t", b"a", partition=0)
        acc.produce("t", b"b", partition=1)
        run(sender)
        c = conns[1]
        if idempotent:
            c.answer()                               # InitProducerId
            run(sender)
        req, cb, _ = c.sent.pop(0)
        assert sorted(pd.index for pd in req.topic_data[0].partition_data) == [0, 1]
        cb(ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(
            name="t", partition_responses=[ProduceResponse.PartitionProduceResponse(
                index=1, error_code=0, base_offset=5)])]), None)
        if not idempotent:
            assert sorted((r.batch.part.index, r.error is None) for r in reports) == [
                (0, False), (1, True)]
            (failed,) = [r for r in reports if r.batch.part.index == 0]
            assert failed.error.code() == KafkaError._BAD_MSG
            continue
        assert [(r.batch.part.index, r.error) for r in reports] == [(1, None)]
        run(sender, 1.0)
        req, cb, _ = c.sent[-1]
        (pd,) = req.topic_data[0].partition_data
        (b,) = list(read_batches(pd.records))
        assert (pd.index, b.base_sequence) == (0, 0)     # the same batch, same sequence
        c.answer(len(c.sent) - 1, errors={("t", 0): 46})  # DUPLICATE_SEQUENCE_NUMBER
        assert [(r.batch.part.index, r.error) for r in reports] == [(1, None), (0, None)]
        assert sender.idem.fatal is None


def test_acks0_request_cut_off_while_written_is_sent_again():
    """acks=0: a request whose write fails (the connection closed while it was written:
    the broker never got it whole) is not reported as sent; its batch goes again, the
    same bytes, and is reported once, when that write completes. With the retries used
    up it fails with the write's error, NOT_PERSISTED not being knowable: POSSIBLY."""
    acc, sender, conns, reports, t = setup(acks=0, retries=1)
    acc.produce("t", b"x", partition=0)
    run(sender)
    first = conns[1].sent[0][0].topic_data[0].partition_data[0].records
    conns[1].fail()
    assert reports == [] and t.parts[0].retrying
    run(sender, 0.5)
    req, cb, expect = conns[1].sent.pop()
    assert expect is False and req.topic_data[0].partition_data[0].records == first
    cb(None, None)
    (r,) = reports
    assert r.error is None and r.base_offset == -1 and r.status == 1 and r.batch.attempts == 2
    acc.produce("t", b"y", partition=0)
    run(sender)
    conns[1].fail()
    run(sender, 0.5)
    conns[1].fail()
    assert [(r.error.code(), r.status) for r in reports[1:]] == [(KafkaError._TRANSPORT, 1)]


def test_a_zstd_batch_resent_to_a_broker_without_produce_v7_goes_uncompressed():
    """Idempotent, compression.type=zstd: a batch built and sent to a leader with
    Produce v9 fails retriably, and its retry goes to a broker with Produce v5 only (the
    leader moved to one not yet upgraded): it is sent uncompressed (that broker would
    refuse zstd), with the same records (keys, values, headers, timestamps), producer
    id, epoch and base sequence, so that the broker can still deduplicate it."""
    from kafka_proto.records import Compression

    acc, sender, conns, reports, t = setup(**{"compression.type": "zstd",
                                              "enable.idempotence": True})
    c = conns[1]
    acc.produce("t", b"v0", b"k0", partition=0, timestamp=1000, headers=[("h", b"x")])
    acc.produce("t", b"v1", None, partition=0, timestamp=1001)
    run(sender)
    c.answer()                       # InitProducerId: id 77, epoch 3
    run(sender)
    req, _cb, _ = c.sent[0]
    assert req.API_KEY == 0
    (first,) = read_batches(req.topic_data[0].partition_data[0].records)
    assert first.compression == Compression.ZSTD
    c.answer(errors={("t", 0): 6})   # NOT_LEADER_OR_FOLLOWER: retried
    c.version_for = lambda key: {0: 5, 22: 4}.get(key)
    run(sender, 0.5)
    req, _cb, _ = c.sent[0]
    (again,) = read_batches(req.topic_data[0].partition_data[0].records)
    assert again.compression == Compression.NONE
    assert (again.producer_id, again.producer_epoch, again.base_sequence) == \
        (first.producer_id, first.producer_epoch, first.base_sequence) == (77, 3, 0)
    assert [(r.key, r.value, r.timestamp, list(r.headers)) for r in again] == \
        [(r.key, r.value, r.timestamp, list(r.headers)) for r in first] == \
        [(b"k0", b"v0", 1000, [("h", b"x")]), (None, b"v1", 1001, [])]
    c.answer(base=10)
    (r,) = reports
    assert r.error is None and r.base_offset == 10 and r.batch.attempts == 2




def test_a_batch_whose_compression_fails_is_sent_uncompressed(monkeypatch, caplog):
    """The codec raising while a batch is built (a library error, memory): the batch goes
    uncompressed, as librdkafka sends it when compression fails, with one warning per
    producer; before, the batch was lost from its queue, no report ever came and its
    partition sent nothing more."""
    import kafka_proto.compression as compression
    from kafka_proto.errors import CompressionError
    from kafka_proto.records import Compression

    def failing(codec, data, level=None, legacy_lz4_header=False):
        raise CompressionError("gzip compression failed: out of memory")

    monkeypatch.setattr(compression, "compress", failing)
    acc, sender, conns, reports, t = setup(**{"compression.type": "gzip",
                                              "batch.num.messages": 1})
    c = conns[1]
    for i in range(2):
        acc.produce("t", b"v%d" % i, partition=0)
    with caplog.at_level("WARNING"):
        run(sender)
        c.answer(base=5)
        run(sender)
        c.answer(base=6)
    warned = [r for r in caplog.records if "uncompressed" in r.getMessage()]
    assert len(warned) == 1 and "out of memory" in warned[0].getMessage()
    assert [(r.error, r.base_offset, values_of(r)) for r in reports] == [
        (None, 5, [b"v0"]), (None, 6, [b"v1"])]
    assert all(next(read_batches(r.batch.data)).compression == Compression.NONE
               for r in reports)


class _UnbuildableBuilder:
    """A batch's builder whose build() fails whatever the compression."""

    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    def build(self):
        raise MemoryError("no room for the batch")


def test_a_batch_that_cannot_be_built_fails_alone_and_its_partition_goes_on():
    """A batch whose bytes cannot be made at all fails with _BAD_MSG naming why; the
    other partitions' batches of the same request go out, and its partition sends its
    next batch (before, the exception left the batch out of every queue with its
    partition counted in flight: no report, flush() waiting its whole timeout)."""
    acc, sender, conns, reports, t = setup(partitions=(1, 1))
    c = conns[1]
    acc.produce("t", b"a", partition=0)
    acc.produce("t", b"b", partition=1)
    broken = t.parts[0].open
    broken.builder = _UnbuildableBuilder(broken.builder)
    run(sender)
    (bad,) = reports
    assert bad.batch is broken and bad.error.code() == KafkaError._BAD_MSG
    assert "no room for the batch" in bad.error.str() and bad.status == 0
    (req, _, _) = c.sent[0]
    assert [pd.index for td in req.topic_data for pd in td.partition_data] == [1]
    c.answer(base=3)
    acc.produce("t", b"c", partition=0)
    run(sender)
    c.answer(base=9)
    assert [(r.batch.part.index, r.error, r.base_offset) for r in reports[1:]] == [
        (1, None, 3), (0, None, 9)]


def test_an_idempotent_batch_that_cannot_be_built_bumps_the_epoch():
    """Idempotent: the batch that failed had its sequence, so the partition's next batch
    would leave a gap the broker refuses (OUT_OF_ORDER_SEQUENCE_NUMBER): the epoch is
    bumped and the next batch starts the new epoch's sequence at 0."""
    acc, sender, conns, reports, t = setup(**{"enable.idempotence": True})
    c = conns[1]
    acc.produce("t", b"a", partition=0)
    t.parts[0].open.builder = _UnbuildableBuilder(t.parts[0].open.builder)
    run(sender)
    c.answer()                       # InitProducerId: 77 / 3
    run(sender)
    (bad,) = reports
    assert bad.error.code() == KafkaError._BAD_MSG and not c.sent
    acc.produce("t", b"b", partition=0)
    _bump(sender, c)                 # 77 / 4
    run(sender)
    assert _sent(c) == [(4, 0, [b"b"])]
