"""The transactional producer against fake brokers: the state machine, the requests in
their order and with their fields, error classification (retriable, abortable, fatal),
resumable calls, and the calls made out of order. No sockets: the application's calls
run in a thread while the test plays the I/O thread and the coordinator."""
from __future__ import annotations

import threading
import time
from collections import deque

import pytest

from kafka_client import Producer
from kafka_client._cluster.metadata import MetadataCache, TopicInfo
from kafka_client.config import ClientConfig
from kafka_client.errors import KafkaError, KafkaException, client_error
from kafka_client.producer.accumulator import Accumulator
from kafka_client.producer.idempotence import Idempotence
from kafka_client.producer.sender import Sender
from kafka_client.producer.transactions import TransactionManager, TxnState, fenced_error
from kafka_client.types import TopicPartition
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    ApiKey,
    EndTxnResponse,
    FindCoordinatorResponse,
    InitProducerIdResponse,
    ProduceResponse,
    TxnOffsetCommitResponse,
)
from kafka_proto.records import read_batches

TXN_ID = "txn-1"
VERSIONS = {ApiKey.PRODUCE: 9, ApiKey.FIND_COORDINATOR: 3, ApiKey.INIT_PRODUCER_ID: 4,
            ApiKey.ADD_PARTITIONS_TO_TXN: 5, ApiKey.ADD_OFFSETS_TO_TXN: 3,
            ApiKey.END_TXN: 4, ApiKey.TXN_OFFSET_COMMIT: 3}


class FakeTimer:
    def __init__(self, when, fn, args):
        self.when, self.fn, self.args = when, fn, args
        self.cancelled = False

    def cancel(self):
        self.cancelled = True


class FakeIO:
    """call_soon / call_at collected, run by the test (the I/O thread's part)."""

    def __init__(self):
        self.soon = deque()
        self.timers = []

    def call_soon(self, fn, *args):
        self.soon.append((fn, args))

    def call_at(self, when, fn, *args):
        t = FakeTimer(when, fn, args)
        self.timers.append(t)
        return t

    def call_later(self, delay, fn, *args):
        return self.call_at(time.monotonic() + delay, fn, *args)

    def wake(self):
        pass

    def run(self, advance=0.0):
        while self.soon:
            fn, args = self.soon.popleft()
            fn(*args)
        now = time.monotonic() + advance
        due = [t for t in self.timers if t.when <= now]
        self.timers = [t for t in self.timers if t.when > now]
        for t in sorted(due, key=lambda t: t.when):
            if not t.cancelled:
                t.fn(*t.args)


class FakeConn:
    state = "READY"
    ready = True
    next_attempt = 0.0
    last_error = None
    connect_count = 1

    def __init__(self, node_id):
        self.node_id = node_id
        self.host, self.port = "fake", 9000 + node_id
        self.sent = []      # (request, callback, version)

    def version_for(self, key):
        return VERSIONS.get(key)

    def can_send(self):
        return len(self.sent) < 100

    def send(self, req, callback, *, version=None, expect_response=True, timeout=None):
        self.sent.append((req, callback, version))

    def keys(self):
        return [r.API_KEY for r, _, _ in self.sent]

    def take(self, api_key):
        """The first request of ``api_key`` sent (and not answered yet)."""
        for i, (req, cb, version) in enumerate(self.sent):
            if req.API_KEY == api_key:
                del self.sent[i]
                return req, cb, version
        raise AssertionError(f"no {ApiKey(api_key).name} request among "
                             f"{[ApiKey(k).name for k in self.keys()]}")


class FakeCluster:
    closed = False
    waits_abandoned = False
    last_connection_error = None

    def __init__(self, conns, io, config):
        self.conns = conns
        self.io = io
        self.config = config
        self.settings = type("Settings", (), {"request_timeout": 30.0})()
        self.metadata = MetadataCache()
        self.metadata.brokers.update({n: ("fake", 9000 + n, None) for n in conns})
        self.on_metadata = []
        self.on_broker_state = []
        self.errors = []

    def ensure_connected(self, node):
        return self.conns.get(node)

    def ready_connection(self, now):
        return self.conns[1]

    def _ready_conn(self):
        return self.conns[1]

    def _kick_connect(self, now):
        pass

    def retry_when_ready(self, key, delay, fn):
        self.io.call_later(delay, fn)

    def cancel_retry(self, key):
        pass

    def report_error(self, err):
        self.errors.append(err)

    def _refused_since(self, since, ending=False):
        return None     # no connection refused (a call that expires says it timed out)


class Harness:
    """A transactional producer's parts (accumulator, sender, transaction manager) on
    fake connections; ``call(fn)`` runs an application call in a thread."""

    def __init__(self, partitions=(1, 1), **conf):
        base = {"bootstrap.servers": "fake:1", "linger.ms": 0, "retry.backoff.ms": 10,
                "retry.backoff.max.ms": 10, "transactional.id": TXN_ID}
        base.update(conf)
        self.cfg = cfg = ClientConfig.from_dict(base, role="producer")
        self.io = FakeIO()
        self.acc = acc = Accumulator(cfg, lambda d: None, lambda n: None)
        self.topic = acc._new_topic("t")
        acc.apply_metadata({"t": TopicInfo("t", 0, list(partitions), [-1] * len(partitions),
                                           [0] * len(partitions), time.monotonic())},
                           time.monotonic())
        self.conn = FakeConn(1)
        self.cluster = FakeCluster({1: self.conn}, self.io, cfg)
        self.idem = Idempotence(cfg)
        self.txn = TransactionManager(cfg, self.io, self.cluster, self.idem, acc)
        self.reports = []
        self.sender = Sender(cfg, acc, self.cluster, self.idem, self.reports.append, self.txn)
        self.flushes = 0

    # -- the application side, in a thread ----------------------------------------------
    def call(self, name, *args):
        box = {}

        def run():
            try:
                box["result"] = getattr(self.txn, name)(*args)
            except BaseException as exc:  # handed to the test
                box["error"] = exc
        t = threading.Thread(target=run, daemon=True)
        t.start()
        box["thread"] = t
        return box

    def flush(self, timeout):
        """The producer's flush: waits while messages are in the accumulator (their
        reports are 'served' as they come)."""
        self.flushes += 1
        deadline = time.monotonic() + (timeout if timeout is not None else 10)
        while time.monotonic() < deadline:
            if self.acc.msg_count - len(self.reports_served()) <= 0:
                return 0
            time.sleep(0.005)
        return self.acc.msg_count - len(self.reports_served())

    def reports_served(self):
        return [m for r in self.reports for m in range(r.batch.count if r.batch else
                                                       len(r.messages))]

    def result(self, box, timeout=5.0):
        """Drive the I/O side until the call returns; its result or exception."""
        deadline = time.monotonic() + timeout
        while box["thread"].is_alive() and time.monotonic() < deadline:
            self.pump()
            time.sleep(0.002)
        assert not box["thread"].is_alive(), "the call did not return"
        if "error" in box:
            raise box["error"]
        return box.get("result")

    def pump(self, advance=0.0):
        self.io.run(advance)
        self.sender.tick(time.monotonic() + advance)
        self.io.run(advance)

    def until_sent(self, api_key, timeout=2.0, advance=0.0):
        deadline = time.monotonic() + timeout
        while api_key not in self.conn.keys():
            assert time.monotonic() < deadline, \
                f"no {ApiKey(api_key).name}: sent {[ApiKey(k).name for k in self.conn.keys()]}"
            self.pump(advance)
            time.sleep(0.002)
        return self.conn.take(api_key)

    # -- the coordinator ---------------------------------------------------------------
    def answer_find(self, key_type=1, node=1, code=0):
        req, cb, version = self.until_sent(ApiKey.FIND_COORDINATOR)
        assert req.key_type == key_type
        cb(FindCoordinatorResponse(error_code=code, node_id=node, host="fake",
                                   port=9000 + node), None)
        return req

    def answer_init(self, pid=5, epoch=0, code=0):
        req, cb, version = self.until_sent(ApiKey.INIT_PRODUCER_ID)
        cb(InitProducerIdResponse(error_code=code, producer_id=pid, producer_epoch=epoch),
           None)
        return req

    def init(self, pid=5, epoch=0):
        box = self.call("init_transactions", 5.0)
        self.answer_find()
        self.answer_init(pid, epoch)
        self.result(box)

    def begin_with(self, *partitions):
        """A transaction with one message for each of ``partitions``, registered (so
        their batches go out at the next pump)."""
        self.result(self.call("begin_transaction"))
        for p in partitions:
            self.acc.produce("t", b"m%d" % p, partition=p)
        self.pump(0.01)
        self.answer_add_partitions()

    def answer_add_partitions(self, code=0, codes=None):
        req, cb, version = self.until_sent(ApiKey.ADD_PARTITIONS_TO_TXN)
        R = AddPartitionsToTxnResponse
        cb(R(results_by_topic_v3_and_below=[R.AddPartitionsToTxnTopicResult(
            name=t.name, results_by_partition=[R.AddPartitionsToTxnPartitionResult(
                partition_index=p, partition_error_code=(codes or {}).get(p, code))
                for p in t.partitions]) for t in req.v3_and_below_topics]), None)
        return req, version

    def answer_produce(self, errors=None, base=0):
        req, cb, version = self.until_sent(ApiKey.PRODUCE)
        topics = []
        for td in req.topic_data:
            parts = [ProduceResponse.PartitionProduceResponse(
                index=pd.index, error_code=(errors or {}).get(pd.index, 0), base_offset=base)
                for pd in td.partition_data]
            topics.append(ProduceResponse.TopicProduceResponse(name=td.name,
                                                               partition_responses=parts))
        cb(ProduceResponse(responses=topics), None)
        return req

    def answer_end_txn(self, code=0):
        req, cb, version = self.until_sent(ApiKey.END_TXN)
        cb(EndTxnResponse(error_code=code), None)
        return req

    def end_txn_found_and_answered(self, code=0):
        """The EndTxn a call sends, after the coordinator's lookup if it needs one,
        answered with ``code``; returns the request."""
        self.pump(0.5)
        if ApiKey.FIND_COORDINATOR in self.conn.keys():
            self.answer_find()
        return self.answer_end_txn(code)


def batches_of(req):
    return [(pd.index, b) for td in req.topic_data for pd in td.partition_data
            for b in read_batches(pd.records)]


def kafka_error(excinfo):
    err = excinfo.value.args[0]
    assert isinstance(err, KafkaError)
    return err


# -- the happy path -----------------------------------------------------------------------

def test_a_transaction_registers_partitions_before_their_batches_and_commits():
    h = Harness()
    box = h.call("init_transactions", 5.0)
    find = h.answer_find()
    assert (find.key, find.key_type) == (TXN_ID, 1)           # transaction coordinator
    init = h.answer_init(pid=5, epoch=2)
    assert (init.transactional_id, init.transaction_timeout_ms) == (TXN_ID, 60000)
    assert (init.producer_id, init.producer_epoch) == (-1, -1)
    h.result(box)
    assert h.txn.state == TxnState.READY
    h.result(h.call("begin_transaction"))
    for i in range(4):
        h.acc.produce("t", b"v%d" % i, partition=i % 2)
    h.pump(0.01)
    req, version = h.answer_add_partitions()
    # Registered first: no Produce went out before the coordinator accepted them.
    assert version == 3 and ApiKey.PRODUCE not in h.conn.keys()
    assert (req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
            req.v3_and_below_producer_epoch) == (TXN_ID, 5, 2)
    assert [(t.name, sorted(t.partitions)) for t in req.v3_and_below_topics] == [("t", [0, 1])]
    produce = h.answer_produce()
    assert produce.transactional_id == TXN_ID
    sent = batches_of(produce)
    assert sorted(i for i, _ in sent) == [0, 1]
    for _, b in sent:
        assert b.is_transactional and (b.producer_id, b.producer_epoch, b.base_sequence) == (
            5, 2, 0)
    box = h.call("commit_transaction", 5.0, h.flush)
    end = h.answer_end_txn()
    assert (end.transactional_id, end.producer_id, end.producer_epoch, end.committed) == (
        TXN_ID, 5, 2, True)
    h.result(box)
    assert h.txn.state == TxnState.READY and not h.acc.txn_partitions
    # The next transaction registers its partitions again.
    h.result(h.call("begin_transaction"))
    h.acc.produce("t", b"again", partition=1)
    h.pump(0.01)
    req, _ = h.answer_add_partitions()
    assert [(t.name, t.partitions) for t in req.v3_and_below_topics] == [("t", [1])]
    (_, b), = batches_of(h.answer_produce())
    assert b.base_sequence == 2   # partition 1's sequence goes on: 0-1 were the first txn's


def test_an_empty_transaction_sends_nothing_to_the_coordinator():
    h = Harness()
    h.init()
    for end in ("commit_transaction", "abort_transaction"):
        h.result(h.call("begin_transaction"))
        h.result(h.call(end, 5.0, h.flush))
        assert h.txn.state == TxnState.READY
    assert h.conn.sent == []


def test_send_offsets_adds_them_then_commits_them_with_the_group_metadata():
    h = Harness()
    h.init()
    h.result(h.call("begin_transaction"))

    class Group:   # what the consumer's consumer_group_metadata() returns
        group_id, generation_id, member_id, group_instance_id = "g", 7, "member-1", None

    offsets = [TopicPartition("in", 0, 42), TopicPartition("in", 1, 7, metadata="m"),
               TopicPartition("in", 2)]   # OFFSET_INVALID: nothing consumed, skipped
    box = h.call("send_offsets_to_transaction", offsets, Group(), 5.0)
    req, cb, _ = h.until_sent(ApiKey.ADD_OFFSETS_TO_TXN)
    assert (req.transactional_id, req.producer_id, req.group_id) == (TXN_ID, 5, "g")
    cb(AddOffsetsToTxnResponse(error_code=0), None)
    find = h.answer_find(key_type=0)                          # the group's coordinator
    assert find.key == "g"
    req, cb, version = h.until_sent(ApiKey.TXN_OFFSET_COMMIT)
    assert version == 3
    assert (req.transactional_id, req.group_id, req.producer_id, req.producer_epoch,
            req.generation_id, req.member_id) == (TXN_ID, "g", 5, 0, 7, "member-1")
    assert [(t.name, [(p.partition_index, p.committed_offset, p.committed_metadata)
                      for p in t.partitions]) for t in req.topics] == [
        ("in", [(0, 42, None), (1, 7, "m\x00")])]  # NUL-ended, as confluent-kafka sends it
    R = TxnOffsetCommitResponse
    cb(R(topics=[R.TxnOffsetCommitResponseTopic(name="in", partitions=[
        R.TxnOffsetCommitResponsePartition(partition_index=0, error_code=0),
        R.TxnOffsetCommitResponsePartition(partition_index=1, error_code=0)])]), None)
    h.result(box)
    # The coordinator knows of the transaction now: commit sends EndTxn.
    box = h.call("commit_transaction", 5.0, h.flush)
    h.answer_end_txn()
    h.result(box)


def test_offsets_an_answer_leaves_out_are_not_taken_as_committed():
    """A TxnOffsetCommit answer without one of the partitions sent (and with one not
    sent) did not commit it: the transaction must abort (UNKNOWN_SERVER_ERROR, as for a
    partition AddPartitionsToTxn leaves out), not commit input offsets that are not in
    it."""
    h = Harness()
    h.init()
    h.result(h.call("begin_transaction"))
    box = h.call("send_offsets_to_transaction",
                 [TopicPartition("in", 0, 42), TopicPartition("in", 1, 7)], _group(), 5.0)
    _, cb, _ = h.until_sent(ApiKey.ADD_OFFSETS_TO_TXN)
    cb(AddOffsetsToTxnResponse(error_code=0), None)
    h.answer_find(key_type=0)
    _, cb, _ = h.until_sent(ApiKey.TXN_OFFSET_COMMIT)
    R = TxnOffsetCommitResponse
    cb(R(topics=[R.TxnOffsetCommitResponseTopic(name="in", partitions=[
        R.TxnOffsetCommitResponsePartition(partition_index=0, error_code=0),
        R.TxnOffsetCommitResponsePartition(partition_index=5, error_code=0)])]), None)
    with pytest.raises(KafkaException) as exc:
        h.result(box)
    err = kafka_error(exc)
    assert err.code() == KafkaError.UNKNOWN_SERVER_ERROR and err.txn_requires_abort()
    assert "in[1]" in err.str()
    assert h.txn.state == TxnState.ABORTABLE_ERROR


# -- calls out of order and bad input ---------------------------------------------------

def test_calls_out_of_order_are_state_errors():
    h = Harness()
    for name, args in (("begin_transaction", ()), ("commit_transaction", (1.0, h.flush)),
                       ("abort_transaction", (1.0, h.flush))):
        with pytest.raises(KafkaException) as exc:
            h.result(h.call(name, *args))
        err = kafka_error(exc)
        assert err.code() == KafkaError._STATE and "Init" in err.str()
        assert "init_transactions" in err.str()
        assert not (err.fatal() or err.retriable() or err.txn_requires_abort())
    assert "Init" in h.txn.produce_refused().str()
    h.init()
    for name, args in (("init_transactions", (1.0,)), ("commit_transaction", (1.0, h.flush)),
                       ("abort_transaction", (1.0, h.flush))):
        with pytest.raises(KafkaException) as exc:
            h.result(h.call(name, *args))
        err = kafka_error(exc)
        assert err.code() == KafkaError._STATE and "state Ready" in err.str()
    with pytest.raises(KafkaException) as exc:
        h.result(h.call("send_offsets_to_transaction", [TopicPartition("t", 0, 1)],
                        _group(), 1.0))
    assert kafka_error(exc).code() == KafkaError._STATE
    refused = h.txn.produce_refused()
    assert refused.code() == KafkaError._STATE and "begin_transaction" in refused.str()
    h.result(h.call("begin_transaction"))
    with pytest.raises(KafkaException) as exc:
        h.result(h.call("begin_transaction"))
    assert kafka_error(exc).code() == KafkaError._STATE
    assert h.txn.may_produce
    assert h.conn.sent == []   # nothing of this reached a broker


def _group():
    class Group:
        group_id, generation_id, member_id, group_instance_id = "g", 1, "m", None
    return Group()


@pytest.mark.parametrize("offsets, metadata, error", [
    (None, "ok", TypeError),
    ("t", "ok", TypeError),
    ([("t", 0, 1)], "ok", TypeError),
    ([TopicPartition("t", 0, 1)], None, TypeError),
    ([TopicPartition("t", 0, 1)], b"CGMDv2:", TypeError),
    ([TopicPartition("t", 0, 1), TopicPartition("t", 0, 2)], "ok", KafkaException),
    ([TopicPartition("t", -1, 1)], "ok", KafkaException),
])
def test_send_offsets_bad_arguments(offsets, metadata, error):
    h = Harness()
    h.init()
    h.result(h.call("begin_transaction"))
    with pytest.raises(error) as exc:
        h.result(h.call("send_offsets_to_transaction", offsets,
                        _group() if metadata == "ok" else metadata, 1.0))
    if error is KafkaException:
        assert kafka_error(exc).code() == KafkaError._INVALID_ARG
    assert h.conn.sent == [] and h.txn.state == TxnState.IN_TRANSACTION


def test_a_timeout_that_is_not_a_number_is_a_type_error_naming_it():
    # confluent-kafka raises TypeError too; ours said "'<' not supported between
    # instances of 'str' and 'int'"
    h = Harness()
    with pytest.raises(TypeError, match="timeout must be a number of seconds, not str"):
        h.result(h.call("init_transactions", "5"))
    h.init()
    h.result(h.call("begin_transaction"))
    for name, args in (("send_offsets_to_transaction", ([TopicPartition("t", 0, 1)],
                                                         _group(), "5")),
                       ("commit_transaction", ("5", h.flush)),
                       ("abort_transaction", ([5], h.flush))):
        with pytest.raises(TypeError, match="timeout must be a number of seconds"):
            h.result(h.call(name, *args))
    assert h.conn.sent == [] and h.txn.state == TxnState.IN_TRANSACTION


def test_producer_without_transactional_id_refuses_the_transactional_api():
    p = Producer({"bootstrap.servers": "127.0.0.1:1"})
    try:
        for call in (lambda: p.init_transactions(0.1), p.begin_transaction,
                     lambda: p.commit_transaction(0.1), lambda: p.abort_transaction(0.1),
                     lambda: p.send_offsets_to_transaction([], _group(), 0.1)):
            with pytest.raises(KafkaException) as exc:
                call()
            err = kafka_error(exc)
            assert err.code() == KafkaError._NOT_CONFIGURED
            assert "transactional.id" in err.str()
    finally:
        p.close(0)


def test_transactional_producer_refuses_produce_outside_a_transaction():
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "x"})
    try:
        for produce in (lambda: p.produce("t", b"v"),
                        lambda: p.produce_batch("t", [b"a", b"b"])):
            with pytest.raises(KafkaException) as exc:
                produce()
            err = kafka_error(exc)
            assert err.code() == KafkaError._STATE and "init_transactions" in err.str()
        # confluent-kafka's form reports it per message, as there (it raised)
        messages = [{"value": b"a"}, {"value": b"b", "partition": 0}]
        assert p.produce_batch("t", messages) == 0
        assert [m["_error"].code() for m in messages] == [KafkaError._STATE] * 2
        with pytest.raises(TypeError):          # a wrong type first, as there
            p.produce_batch("t", [{"value": 5}])
        assert len(p) == 0
        # Without brokers init_transactions cannot finish: a retriable timeout, resumable.
        with pytest.raises(KafkaException) as exc:
            p.init_transactions(0.3)
        err = kafka_error(exc)
        assert err.code() == KafkaError._TIMED_OUT and err.retriable()
        with pytest.raises(KafkaException) as exc:
            p.begin_transaction()   # another API while init is unfinished
        assert kafka_error(exc).code() == KafkaError._CONFLICT
    finally:
        p.close(0)


@pytest.mark.parametrize("kwargs, error", [
    ({"value": 5}, TypeError), ({"key": 1.5}, TypeError), ({"partition": "0"}, TypeError),
    ({"timestamp": "now"}, TypeError), ({"headers": ("k", b"v")}, TypeError),
    ({"headers": [("k", 5)]}, TypeError), ({"partition": 2**40}, OverflowError),
    ({"value": b"x" * 2000}, KafkaException), ({"partition": -5}, KafkaException),
    ({"timestamp": -5}, KafkaException),
])
def test_a_refused_produce_reports_wrong_types_first(kwargs, error):
    """confluent-kafka 2.16.1 converts produce()'s arguments before librdkafka refuses the
    message: outside a transaction a wrong type is its TypeError, a wrong value (too
    large, out of range) the _STATE refusal. Every call raised _STATE here."""
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "x",
                  "message.max.bytes": 1000})
    try:
        with pytest.raises(error) as exc:
            p.produce("t", **kwargs)
        if error is KafkaException:
            assert kafka_error(exc).code() == KafkaError._STATE
        assert len(p) == 0
    finally:
        p.close(0)


def test_aborting_an_empty_transaction_with_no_time_left_succeeds():
    """Nothing was sent in it: confluent-kafka 2.16.1's abort_transaction(0) returns at
    once; ours raised a retriable _TIMED_OUT (the I/O thread's part was not waited for)."""
    h = Harness()
    h.init()
    h.result(h.call("begin_transaction"))
    h.result(h.call("abort_transaction", 0, h.flush))
    assert h.txn.state == TxnState.READY and h.conn.sent == []
    h.result(h.call("begin_transaction"))
    h.result(h.call("commit_transaction", 0, h.flush))   # the same for a commit
    assert h.txn.state == TxnState.READY and h.conn.sent == []


# -- resumable calls --------------------------------------------------------------------

def test_init_timeout_is_retriable_and_calling_again_resumes():
    h = Harness()
    with pytest.raises(KafkaException) as exc:
        box = h.call("init_transactions", 0.2)
        h.answer_find()
        _, lost, _ = h.until_sent(ApiKey.INIT_PRODUCER_ID)   # not answered in time
        h.result(box)
    err = kafka_error(exc)
    assert err.code() == KafkaError._TIMED_OUT and err.retriable()
    assert h.txn.state == TxnState.WAIT_PID
    # The request times out meanwhile: retried in the background (coordinator looked up
    # again); the second call waits for it.
    lost(None, KafkaError(KafkaError._TIMED_OUT, "request timed out"))
    box = h.call("init_transactions", 5.0)
    h.pump(1.0)
    h.answer_find()
    h.answer_init(pid=9)
    h.result(box)
    assert h.txn.state == TxnState.READY and h.idem.producer_id == 9


@pytest.mark.parametrize("code", [ErrorCode.INVALID_TXN_STATE,
                                  ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                                  ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT])
def test_init_producer_id_errors_librdkafka_retries_are_retried(code):
    """INVALID_TXN_STATE answers InitProducerId while the coordinator still ends a
    transaction of the previous instance: librdkafka (and confluent-kafka 2.16.1, seen on
    the test cluster) ask again until init_transactions()' timeout; it used to be fatal."""
    h = Harness()
    box = h.call("init_transactions", 5.0)
    h.answer_find()
    h.answer_init(code=code)
    h.pump(0.5)
    h.answer_init(code=code)
    h.pump(0.5)
    h.answer_init(pid=9)
    h.result(box)
    assert h.txn.state == TxnState.READY and h.idem.producer_id == 9
    assert h.txn.error is None


def test_init_producer_id_answered_without_a_usable_id_is_asked_again_and_named():
    """InitProducerId answered NONE with producer id -1 (a broken coordinator): not
    taken, asked again after the backoff; init_transactions() timing out names why
    (retriable), and a later answer with a usable id completes the resumed call."""
    h = Harness()
    with pytest.raises(KafkaException) as exc:
        box = h.call("init_transactions", 0.6)
        h.answer_find()
        h.answer_init(pid=-1, epoch=-1)
        h.pump(0.5)
        h.answer_init(pid=-1, epoch=-1)        # asked again: the same answer
        h.result(box)
    err = kafka_error(exc)
    assert err.code() == ErrorCode.UNKNOWN_SERVER_ERROR and err.retriable(), err
    assert "without a usable producer id" in err.str(), err
    assert h.txn.state == TxnState.WAIT_PID and h.idem.producer_id < 0
    box = h.call("init_transactions", 5.0)
    h.pump(0.5)
    h.answer_init(pid=9)
    h.result(box)
    assert h.txn.state == TxnState.READY and h.idem.producer_id == 9


def test_commit_timeout_is_resumable_and_other_calls_conflict():
    h = Harness()
    h.init()
    h.begin_with(0)
    h.answer_produce()
    with pytest.raises(KafkaException) as exc:
        box = h.call("commit_transaction", 0.3, h.flush)
        req, cb, _ = h.until_sent(ApiKey.END_TXN)
        h.result(box)
    err = kafka_error(exc)
    assert err.code() == KafkaError._TIMED_OUT and err.retriable()
    assert h.txn.state == TxnState.COMMITTING
    with pytest.raises(KafkaException) as exc:
        h.result(h.call("abort_transaction", 1.0, h.flush))
    assert kafka_error(exc).code() == KafkaError._CONFLICT and kafka_error(exc).retriable()
    cb(EndTxnResponse(error_code=0), None)          # the commit completes meanwhile
    assert h.txn.state == TxnState.COMMIT_NOT_ACKED
    h.result(h.call("commit_transaction", 1.0, h.flush))
    assert h.txn.state == TxnState.READY
    assert ApiKey.END_TXN not in h.conn.keys()      # not sent a second time


# -- retries and coordinator moves --------------------------------------------------------

def test_coordinator_moves_and_retriable_errors_are_retried():
    h = Harness()
    h.init()
    h.result(h.call("begin_transaction"))
    h.acc.produce("t", b"x", partition=0)
    h.pump(0.01)
    h.answer_add_partitions(code=ErrorCode.CONCURRENT_TRANSACTIONS)
    assert not h.acc.txn_partitions
    h.pump(0.05)
    h.answer_add_partitions(code=ErrorCode.NOT_COORDINATOR)
    h.pump(0.05)
    h.answer_find()                                  # looked up again
    h.answer_add_partitions()
    h.answer_produce()
    box = h.call("commit_transaction", 5.0, h.flush)
    h.answer_end_txn(code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    h.pump(0.1)
    req, cb, _ = h.until_sent(ApiKey.END_TXN, advance=0.1)
    cb(None, KafkaError(KafkaError._TRANSPORT, "connection lost"))   # lost: look up again
    h.answer_find(node=1)
    h.pump(0.1)
    h.answer_end_txn()
    h.result(box)
    assert h.txn.state == TxnState.READY


# -- fatal and abortable errors -----------------------------------------------------------

@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH])
def test_fenced_producer_is_fatal(code):
    h = Harness()
    h.init()
    h.begin_with(0)
    h.until_sent(ApiKey.PRODUCE)
    h.conn.sent.clear()
    h.acc.produce("t", b"queued", partition=1)
    h.pump(0.01)
    h.answer_add_partitions(code=code)
    err = h.txn.error
    assert err is not None and err.fatal() and err.code() == KafkaError._FENCED
    assert h.txn.state == TxnState.FATAL_ERROR and not h.txn.may_produce
    assert h.idem.fatal is err and h.cluster.errors == [err]
    # The batch in flight fails with the fatal error; the message still queued (its
    # partition not registered) is purged: _PURGE_QUEUE, as librdkafka purges it
    # (confluent-kafka 2.16.1 on the test cluster; it used to get _FENCED too)
    assert [r.error.code() for r in h.reports] == [KafkaError._PURGE_QUEUE,
                                                    KafkaError._FENCED]
    for name, args in (("commit_transaction", (1.0, h.flush)),
                       ("abort_transaction", (1.0, h.flush)), ("begin_transaction", ())):
        with pytest.raises(KafkaException) as exc:
            h.result(h.call(name, *args))
        assert kafka_error(exc) is err
    # produce() raises _FATAL (not flagged fatal), as confluent-kafka 2.16.1 does
    refused = h.txn.produce_refused()
    assert refused.code() == KafkaError._FATAL and not refused.fatal()
    assert err.str() in refused.str()


def test_a_coordinator_without_add_partitions_to_txn_is_fatal_and_nothing_is_produced(
        monkeypatch):
    """The transaction coordinator's ApiVersions lists no AddPartitionsToTxn: no
    partition can join a transaction, so the error is fatal at once (not retried until
    the timeout), the queued message fails with it and no Produce goes out."""
    h = Harness()
    h.init()
    monkeypatch.delitem(VERSIONS, ApiKey.ADD_PARTITIONS_TO_TXN)
    h.result(h.call("begin_transaction"))
    h.acc.produce("t", b"m0", partition=0)
    deadline = time.monotonic() + 5
    while h.txn.error is None and time.monotonic() < deadline:
        h.pump(0.05)
    err = h.txn.error
    assert err is not None and err.fatal(), err
    assert err.code() == KafkaError._UNSUPPORTED_FEATURE and "AddPartitionsToTxn" in err.str()
    assert h.txn.state == TxnState.FATAL_ERROR and h.cluster.errors == [err]
    h.pump(0.05)
    assert ApiKey.PRODUCE not in h.conn.keys() and ApiKey.ADD_PARTITIONS_TO_TXN not in \
        h.conn.keys()
    assert [r.error.code() for r in h.reports] == [KafkaError._PURGE_QUEUE]
    with pytest.raises(KafkaException) as exc:
        h.result(h.call("commit_transaction", 1.0, h.flush))
    assert kafka_error(exc) is err


def test_a_fatal_error_the_commits_flush_raises_ends_the_call():
    """A fence found while the commit flushes: that flush serves the fatal error event and
    raises it (as poll()/flush() raise it, once). The commit raises it as its own outcome
    (confluent-kafka: _FENCED from commit_transaction()); it used to stay the current call,
    every later call refused with _CONFLICT instead of _FENCED."""
    h = Harness()
    h.init()
    h.begin_with(0)
    fenced = fenced_error(ErrorCode.INVALID_PRODUCER_EPOCH, "Produce")

    def flush_serving_the_fence(timeout):
        h.txn.fatal_error(fenced)
        raise KafkaException(fenced)

    with pytest.raises(KafkaException) as exc:
        h.result(h.call("commit_transaction", 5.0, flush_serving_the_fence))
    assert kafka_error(exc).code() == KafkaError._FENCED
    for name, args in (("begin_transaction", ()), ("abort_transaction", (1.0, h.flush))):
        with pytest.raises(KafkaException) as exc:
            h.result(h.call(name, *args))
        assert kafka_error(exc).code() == KafkaError._FENCED and kafka_error(exc).fatal()


def test_fenced_in_a_produce_answer_is_fatal():
    h = Harness()
    h.init()
    h.begin_with(0)
    h.answer_produce(errors={0: ErrorCode.INVALID_PRODUCER_EPOCH})
    (r,) = h.reports
    assert r.error.fatal() and r.error.code() == KafkaError._FENCED
    assert h.txn.state == TxnState.FATAL_ERROR


def test_failed_message_makes_the_transaction_abortable_and_abort_bumps_the_epoch():
    h = Harness(partitions=(1, 1))
    h.init(pid=5, epoch=0)
    h.begin_with(0)
    h.answer_produce(errors={0: ErrorCode.MESSAGE_TOO_LARGE})
    assert h.txn.state == TxnState.ABORTABLE_ERROR and h.txn.needs_bump
    with pytest.raises(KafkaException) as exc:
        h.result(h.call("commit_transaction", 1.0, h.flush))
    err = kafka_error(exc)
    assert err.txn_requires_abort() and err.code() == ErrorCode.MESSAGE_TOO_LARGE
    assert not err.fatal() and not err.retriable()
    # produce() raises _STATE (no flags) as confluent-kafka 2.16.1 does in this state; it
    # raised the abortable error itself
    refused = h.txn.produce_refused()
    assert refused.code() == KafkaError._STATE and not refused.txn_requires_abort()
    assert "must be aborted" in refused.str() and "MSG_SIZE_TOO_LARGE" in refused.str()
    box = h.call("abort_transaction", 5.0, h.flush)
    end = h.answer_end_txn()
    assert end.committed is False
    bump = h.answer_init(pid=5, epoch=1)
    assert (bump.producer_id, bump.producer_epoch) == (5, 0)   # KIP-360 bump
    h.result(box)
    assert h.txn.state == TxnState.READY and h.idem.epoch == 1
    # The next transaction numbers from 0 under the new epoch: no gap for the broker.
    h.begin_with(0)
    (_, b), = batches_of(h.answer_produce())
    assert (b.producer_epoch, b.base_sequence) == (1, 0)
    box = h.call("commit_transaction", 5.0, h.flush)
    h.answer_end_txn()
    h.result(box)


def test_a_message_timed_out_in_flight_makes_the_transaction_abortable_with_timed_out():
    """confluent-kafka 2.16.1 (test cluster, Produce answers delayed past
    message.timeout.ms): the report is _MSG_TIMED_OUT and commit_transaction() raises
    _TIMED_OUT, abortable ("N message(s) timed out on t [0]"); ours raised
    _MSG_TIMED_OUT."""
    h = Harness(**{"message.timeout.ms": 100, "transaction.timeout.ms": 60000})
    h.init()
    h.begin_with(0)
    req, cb, _ = h.until_sent(ApiKey.PRODUCE)
    time.sleep(0.15)                                  # past message.timeout.ms
    cb(None, client_error(KafkaError._TIMED_OUT, "request timed out"))
    h.pump(0.01)
    assert [r.error.code() for r in h.reports] == [KafkaError._MSG_TIMED_OUT]
    with pytest.raises(KafkaException) as exc:
        h.result(h.call("commit_transaction", 1.0, h.flush))
    err = kafka_error(exc)
    assert err.code() == KafkaError._TIMED_OUT and err.txn_requires_abort()
    assert not err.retriable() and "1 message(s) timed out on t [0]" in err.str()


def test_delivery_failure_before_commit_requires_abort():
    """A message that failed (here: its topic does not exist) makes commit refuse with
    _INCONSISTENT, as librdkafka does: some of the transaction's output is missing."""
    h = Harness()
    h.init()
    h.begin_with(0)
    h.answer_produce()
    h.txn.delivery_failed(1)
    with pytest.raises(KafkaException) as exc:
        h.result(h.call("commit_transaction", 1.0, h.flush))
    err = kafka_error(exc)
    assert err.code() == KafkaError._INCONSISTENT and err.txn_requires_abort()
    assert ApiKey.END_TXN not in h.conn.keys()
    box = h.call("abort_transaction", 5.0, h.flush)
    assert not h.answer_end_txn().committed
    h.result(box)


def test_unknown_producer_id_aborts_the_transaction_with_a_bump():
    h = Harness()
    h.init(pid=5, epoch=3)
    h.begin_with(0)
    h.answer_produce(errors={0: ErrorCode.UNKNOWN_PRODUCER_ID})
    (r,) = h.reports
    assert r.error.code() == ErrorCode.UNKNOWN_PRODUCER_ID and r.status == 0  # NOT_PERSISTED
    assert h.txn.state == TxnState.ABORTABLE_ERROR and h.txn.needs_bump
    box = h.call("abort_transaction", 5.0, h.flush)
    h.answer_end_txn()
    # Tansu refuses bumps: the coordinator is then asked without the current epoch.
    bump = h.answer_init(code=ErrorCode.UNKNOWN_SERVER_ERROR)
    assert (bump.producer_id, bump.producer_epoch) == (5, 3)
    h.pump(0.1)
    again = h.answer_init(pid=5, epoch=4)
    assert (again.producer_id, again.producer_epoch) == (-1, -1)
    h.result(box)
    assert (h.idem.producer_id, h.idem.epoch) == (5, 4) and not h.idem.bump_wanted


def test_a_bump_refused_otherwise_is_asked_again_with_the_current_epoch():
    """Only Tansu's UNKNOWN_SERVER_ERROR makes the client ask without its current epoch:
    asked so, a coordinator bumps for whoever asks and would fence an instance that took
    the transactional id over. Any other refusal is asked again as it was."""
    h = Harness()
    h.init(pid=5, epoch=3)
    h.begin_with(0)
    h.answer_produce(errors={0: ErrorCode.UNKNOWN_PRODUCER_ID})
    box = h.call("abort_transaction", 5.0, h.flush)
    h.answer_end_txn()
    bump = h.answer_init(code=ErrorCode.INVALID_REQUEST)
    assert (bump.producer_id, bump.producer_epoch) == (5, 3)
    h.pump(0.3)
    again = h.answer_init(pid=5, epoch=4)
    assert (again.producer_id, again.producer_epoch) == (5, 3)
    h.result(box)
    assert (h.idem.producer_id, h.idem.epoch) == (5, 4) and not h.idem.bump_wanted


def test_abort_purges_queued_messages_and_waits_for_those_in_flight():
    h = Harness(**{"batch.num.messages": 1})
    h.init()
    h.begin_with(0)
    req, cb, _ = h.until_sent(ApiKey.PRODUCE)
    h.acc.produce("t", b"queued", partition=1)     # its partition is not registered yet
    box = h.call("abort_transaction", 5.0, h.flush)
    deadline = time.monotonic() + 2
    while not h.reports and time.monotonic() < deadline:
        h.pump()
    assert [r.error.code() for r in h.reports] == [KafkaError._PURGE_QUEUE]
    assert box["thread"].is_alive()             # waiting for the batch in flight
    cb(ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(
        name="t", partition_responses=[ProduceResponse.PartitionProduceResponse(
            index=0, error_code=0, base_offset=0)])]), None)
    h.answer_end_txn()
    h.result(box)
    assert h.txn.state == TxnState.READY and not h.txn.needs_bump


def test_unexplained_out_of_order_is_fatal_for_the_transaction_too():
    h = Harness()
    h.init()
    h.begin_with(0)
    h.answer_produce(errors={0: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER})
    assert h.txn.state == TxnState.FATAL_ERROR and not h.txn.may_produce
    err = h.txn.error
    assert err.fatal() and err.code() == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert h.txn.produce_refused().code() == KafkaError._FATAL
    with pytest.raises(KafkaException) as exc:
        h.result(h.call("commit_transaction", 1.0, h.flush))
    assert kafka_error(exc).fatal()


def test_nothing_is_resent_once_the_transaction_must_be_aborted():
    """A batch that fails retriably after the transaction became abortable is failed at
    once, not queued again: the commit (which would wait for it) and the abort finish."""
    h = Harness(partitions=(1, 1))
    h.init()
    h.result(h.call("begin_transaction"))
    h.acc.produce("t", b"a", partition=0)
    h.acc.produce("t", b"b", partition=1)
    h.pump(0.01)
    h.answer_add_partitions()
    req, cb, _ = h.until_sent(ApiKey.PRODUCE)
    R = ProduceResponse
    cb(R(responses=[R.TopicProduceResponse(name="t", partition_responses=[
        R.PartitionProduceResponse(index=0, error_code=ErrorCode.MESSAGE_TOO_LARGE,
                                   base_offset=-1),
        R.PartitionProduceResponse(index=1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                   base_offset=-1)])]), None)
    assert h.txn.state == TxnState.ABORTABLE_ERROR
    assert sorted(r.error.code() for r in h.reports) == sorted(
        [ErrorCode.MESSAGE_TOO_LARGE, KafkaError._PURGE_QUEUE])
    assert not h.topic.parts[1].ready and h.acc.msg_count == 2
    box = h.call("abort_transaction", 5.0, h.flush)
    h.answer_end_txn()
    h.answer_init(pid=5, epoch=1)      # the gap's bump
    h.result(box)
    assert h.txn.state == TxnState.READY


def test_commit_whose_end_txn_keeps_failing_is_retriable_and_resumes():
    """EndTxn lost with its connection again and again: the call fails retriably, and
    calling commit again sends EndTxn anew (the earlier failure does not stick)."""
    h = Harness()
    h.init()
    h.begin_with(0)
    h.answer_produce()
    box = h.call("commit_transaction", 5.0, h.flush)
    lost = 0
    with pytest.raises(KafkaException) as exc:
        while box["thread"].is_alive() and lost < 10:
            if ApiKey.FIND_COORDINATOR in h.conn.keys():
                h.answer_find()
            if ApiKey.END_TXN in h.conn.keys():
                _, cb, _ = h.conn.take(ApiKey.END_TXN)
                cb(None, KafkaError(KafkaError._TRANSPORT, "connection lost"))
                lost += 1
            h.pump(0.5)
            time.sleep(0.005)
        h.result(box)
    err = kafka_error(exc)
    assert err.retriable() and err.code() == KafkaError._TRANSPORT and lost == 3
    assert h.txn.state == TxnState.BEGIN_COMMIT
    box = h.call("commit_transaction", 5.0, h.flush)
    end = h.end_txn_found_and_answered()
    assert end.committed
    h.result(box)
    assert h.txn.state == TxnState.READY


def test_commit_that_succeeds_after_failing_here_is_fatal():
    """librdkafka's rule: an error making the transaction abortable while EndTxn(commit)
    is in flight, then the broker commits it: the producer's view and the broker's
    disagree, which is fatal."""
    h = Harness()
    h.init()
    h.begin_with(0)
    h.answer_produce()
    box = h.call("commit_transaction", 5.0, h.flush)
    req, cb, _ = h.until_sent(ApiKey.END_TXN)
    h.txn.abortable_error(KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "late failure"))
    assert h.txn.state == TxnState.ABORTABLE_ERROR
    cb(EndTxnResponse(error_code=0), None)
    assert h.txn.state == TxnState.FATAL_ERROR
    with pytest.raises(KafkaException) as exc:
        h.result(box)
    err = kafka_error(exc)
    assert err.txn_requires_abort() or err.fatal()
    assert h.txn.error.fatal() and h.txn.produce_refused().code() == KafkaError._FATAL


def test_a_local_error_code_in_a_coordinator_answer_is_an_unknown_server_error():
    """Codes below -1 are the client's own (-195 is _TRANSPORT, retried): an EndTxn answer
    carrying one is UNKNOWN_SERVER_ERROR (kafka_client.errors.broker_code), which
    requires an abort, not a retry until the timeout."""
    h = Harness()
    h.init()
    h.begin_with(0)
    h.answer_produce()
    box = h.call("commit_transaction", 5.0, h.flush)
    h.answer_end_txn(code=KafkaError._TRANSPORT)
    with pytest.raises(KafkaException) as exc:
        h.result(box)
    err = kafka_error(exc)
    assert err.code() == KafkaError.UNKNOWN_SERVER_ERROR and err.txn_requires_abort()
    assert ApiKey.END_TXN not in h.conn.keys()      # not sent again


@pytest.mark.parametrize("name", ["commit_transaction", "abort_transaction"])
def test_a_call_interrupted_by_an_exception_of_its_own_flush_can_be_called_again(name):
    """A delivery callback raising in the flush of commit/abort (or Ctrl-C while it
    waits): the exception reaches the caller, and calling it again resumes it. It was
    left "in progress" for ever: every later call refused (_PREV_IN_PROGRESS,
    _CONFLICT), the transaction neither committed nor aborted."""
    h = Harness()
    h.init()
    h.begin_with(0)
    h.answer_produce()

    def raising_flush(timeout):
        raise ValueError("a delivery callback's bug")

    with pytest.raises(ValueError):
        h.result(h.call(name, 5.0, raising_flush))
    box = h.call(name, 5.0, h.flush)
    end = h.end_txn_found_and_answered()
    assert end.committed == (name == "commit_transaction")
    h.result(box)
    assert h.txn.state == TxnState.READY
    h.result(h.call("begin_transaction"))          # and the producer goes on


def test_closing_with_a_transaction_open_aborts_it():
    """close() with a transaction open: it is aborted (EndTxn abort), as librdkafka's and
    the Java client's close() do; it stayed open at the coordinator (read_committed
    readers of its partitions held back for transaction.timeout.ms)."""
    h = Harness()
    h.init()
    h.begin_with(0)
    h.answer_produce()
    box = h.call("end_for_close", time.monotonic() + 5, h.flush)
    end = h.end_txn_found_and_answered()
    assert not end.committed
    h.result(box)
    assert h.txn.state == TxnState.READY


def test_closing_while_a_commit_waits_for_its_end_txn_waits_for_the_outcome():
    """Another thread is in commit_transaction(), its EndTxn sent: close() waits for the
    answer, and the commit returns it (it raised _DESTROY, though the transaction was
    committed: an exactly-once loop would have processed its input again)."""
    h = Harness()
    h.init()
    h.begin_with(0)
    h.answer_produce()
    commit = h.call("commit_transaction", 5.0, h.flush)
    req, cb, _ = h.until_sent(ApiKey.END_TXN)
    closing = h.call("end_for_close", time.monotonic() + 5, h.flush)
    time.sleep(0.1)
    assert closing["thread"].is_alive()             # waits for the commit
    cb(EndTxnResponse(error_code=0), None)
    h.result(commit)
    h.result(closing)
    assert req.committed and h.txn.state == TxnState.READY
    assert ApiKey.END_TXN not in h.conn.keys()        # nothing aborted after it


def test_a_commit_after_a_send_offsets_that_did_not_complete_requires_an_abort():
    """send_offsets_to_transaction() failed (timed out, retriable) and the application
    commits anyway: the commit fails needing an abort (not retriable), and the abort
    works. It committed the output without the input's offsets (read again after a
    restart: duplicates)."""
    h = Harness()
    h.init()
    h.begin_with(0)
    h.answer_produce()
    h.txn._offsets_failure = KafkaError(KafkaError._TIMED_OUT, "send_offsets timed out",
                                        retriable=True)
    with pytest.raises(KafkaException) as exc:
        h.result(h.call("commit_transaction", 5.0, h.flush))
    err = kafka_error(exc)
    assert err.txn_requires_abort() and not err.retriable()
    assert "send_offsets_to_transaction() did not complete" in err.str()
    box = h.call("abort_transaction", 5.0, h.flush)
    assert not h.end_txn_found_and_answered().committed
    h.result(box)
    assert h.txn.state == TxnState.READY


def test_a_registration_lost_with_its_connection_is_not_sent_again_after_the_abort():
    """AddPartitionsToTxn executed but its answer lost with the connection, then the
    application aborts: its retry is not sent after the EndTxn (it opened a transaction
    nobody ended; the coordinator timed it out by fencing this producer)."""
    h = Harness()
    h.init()
    h.result(h.call("begin_transaction"))
    h.acc.produce("t", b"m0", partition=0)
    h.pump(0.01)
    _req, cb, _v = h.until_sent(ApiKey.ADD_PARTITIONS_TO_TXN)
    cb(None, KafkaError(KafkaError._TRANSPORT, "connection lost"))    # to be retried
    box = h.call("abort_transaction", 5.0, h.flush)
    assert not h.end_txn_found_and_answered().committed
    h.result(box)
    for _ in range(5):
        h.pump(1.0)                                      # past every retry backoff
    assert ApiKey.ADD_PARTITIONS_TO_TXN not in h.conn.keys()
    assert h.txn.state == TxnState.READY


def test_aborting_a_transaction_whose_only_registration_was_refused_sends_no_end_txn():
    """The transaction's one AddPartitionsToTxn refused (TOPIC_AUTHORIZATION_FAILED,
    abortable): the coordinator never started it, so the abort sends no EndTxn (it was
    answered INVALID_TXN_STATE, fatal: the producer died), as the Java client does, and
    the next transaction works."""
    h = Harness()
    h.init()
    h.result(h.call("begin_transaction"))
    h.acc.produce("t", b"m0", partition=0)
    h.pump(0.01)
    h.answer_add_partitions(code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    assert h.txn.state == TxnState.ABORTABLE_ERROR
    box = h.call("abort_transaction", 5.0, h.flush)
    for _ in range(20):
        h.pump(0.1)
        time.sleep(0.005)
    h.result(box)
    assert ApiKey.END_TXN not in h.conn.keys() and h.txn.state == TxnState.READY
    h.begin_with(0)                                  # the producer goes on


def test_aborting_before_the_registration_went_out_sends_no_end_txn():
    """abort_transaction() right after produce(): the AddPartitionsToTxn was not sent yet
    (here: its coordinator being looked up), and the abort drops it. The coordinator was
    counted as knowing the transaction from the moment the registration was queued, so
    the abort sent EndTxn, answered INVALID_TXN_STATE: fatal, the producer died (1 to 4
    runs in 100 of 10 transactions each, 1 in 3 aborted right after its produce, against
    the test cluster). Only a registration that went out counts, as in librdkafka and
    the Java client."""
    h = Harness()
    h.init()
    h.result(h.call("begin_transaction"))
    h.txn.runner.coordinators.clear()            # looked up again before the registration
    h.acc.produce("t", b"m0", partition=0)
    h.pump(0.01)
    assert ApiKey.FIND_COORDINATOR in h.conn.keys()
    assert ApiKey.ADD_PARTITIONS_TO_TXN not in h.conn.keys()
    box = h.call("abort_transaction", 5.0, h.flush)
    for _ in range(10):
        h.pump(0.1)
        time.sleep(0.005)
    h.answer_find()                              # the lookup's answer comes after all
    for _ in range(10):
        h.pump(0.1)
        time.sleep(0.005)
    h.result(box)
    assert ApiKey.END_TXN not in h.conn.keys()
    assert ApiKey.ADD_PARTITIONS_TO_TXN not in h.conn.keys()
    assert h.txn.state == TxnState.READY
    h.begin_with(0)                              # the producer goes on


def test_aborting_after_a_send_offsets_that_never_went_out_sends_no_end_txn():
    """send_offsets_to_transaction() timed out while its coordinator was looked up: its
    AddOffsetsToTxn never went out, yet the coordinator was counted as knowing of the
    transaction, and the abort that followed sent EndTxn (INVALID_TXN_STATE, fatal)."""
    h = Harness()
    h.init()
    h.result(h.call("begin_transaction"))
    h.txn.runner.coordinators.clear()

    class Group:
        group_id, generation_id, member_id, group_instance_id = "g", 7, "member-1", None

    box = h.call("send_offsets_to_transaction", [TopicPartition("in", 0, 42)], Group(), 0.3)
    with pytest.raises(KafkaException) as excinfo:
        h.result(box)                             # FindCoordinator never answered
    assert kafka_error(excinfo).retriable()
    assert ApiKey.ADD_OFFSETS_TO_TXN not in h.conn.keys()
    box = h.call("abort_transaction", 5.0, h.flush)
    for _ in range(10):
        h.pump(0.1)
        time.sleep(0.005)
    while ApiKey.FIND_COORDINATOR in h.conn.keys():
        h.answer_find()
    for _ in range(10):
        h.pump(0.1)
        time.sleep(0.005)
    h.result(box)
    assert ApiKey.END_TXN not in h.conn.keys() and h.txn.state == TxnState.READY


def _offsets_added_to_a_transaction(h):
    """A transaction with a message, its send_offsets_to_transaction() under way with
    the AddOffsetsToTxn answered; returns the call's box."""
    h.init()
    h.result(h.call("begin_transaction"))
    h.acc.produce("t", b"m0", partition=0)
    box = h.call("send_offsets_to_transaction", [TopicPartition("in", 0, 42)], _group(), 5.0)
    _req, cb, _v = h.until_sent(ApiKey.ADD_OFFSETS_TO_TXN)
    cb(AddOffsetsToTxnResponse(error_code=0), None)
    return box


def _registration_refused_then_aborted(h, box):
    """The message's partition refused: the offsets call (``box``) fails needing an
    abort; returns the box of the abort_transaction() then called."""
    h.answer_add_partitions(code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException) as excinfo:
        h.result(box)
    assert kafka_error(excinfo).txn_requires_abort()
    return h.call("abort_transaction", 5.0, h.flush)


def _abort_while_the_offsets_commit_waits_for_its_coordinator(h):
    """A transaction whose send_offsets_to_transaction() failed needing an abort while
    its TxnOffsetCommit waited for the group coordinator's lookup (AddOffsetsToTxn
    answered, then a registration refused), aborted; the lookup still unanswered."""
    box = _offsets_added_to_a_transaction(h)
    h.pump(0.01)
    group_lookup = h.conn.take(ApiKey.FIND_COORDINATOR)        # answered later
    box = _registration_refused_then_aborted(h, box)
    assert not h.end_txn_found_and_answered().committed
    h.result(box)
    assert h.txn.state == TxnState.READY
    return group_lookup


def test_the_offsets_commit_of_an_aborted_transaction_is_not_sent_after_it():
    """The lookup's answer comes after the abort: the aborted transaction's
    TxnOffsetCommit is not sent (it would reach the coordinator after the EndTxn, into
    the next transaction of the same producer id and epoch), as a registration of an
    ended transaction is not (found by the transactions fuzz harness)."""
    h = Harness()
    _req, cb, _v = _abort_while_the_offsets_commit_waits_for_its_coordinator(h)
    cb(FindCoordinatorResponse(error_code=0, node_id=1, host="fake", port=9001), None)
    for _ in range(5):
        h.pump(1.0)                                      # past every retry backoff
    assert ApiKey.TXN_OFFSET_COMMIT not in h.conn.keys()


def test_an_abort_waits_for_the_offsets_commit_on_the_wire():
    """The transaction aborted while its TxnOffsetCommit is on the wire (the offsets call
    failed needing an abort: a registration refused): the EndTxn(abort) waits for its
    answer, as the Java client sends one transactional request at a time. Sent at once,
    the EndTxn's markers could precede the TxnOffsetCommit at the group coordinator,
    which then keeps those offsets pending for the producer id's next transaction
    (committed with it, or the group's offsets unstable until then)."""
    h = Harness()
    box = _offsets_added_to_a_transaction(h)
    h.answer_find(key_type=0)                                  # the group's coordinator
    _req, offsets_cb, _v = h.until_sent(ApiKey.TXN_OFFSET_COMMIT)   # on the wire
    box = _registration_refused_then_aborted(h, box)
    for _ in range(10):
        h.pump(0.05)
        time.sleep(0.005)
    assert ApiKey.END_TXN not in h.conn.keys()
    R = TxnOffsetCommitResponse
    offsets_cb(R(topics=[R.TxnOffsetCommitResponseTopic(name="in", partitions=[
        R.TxnOffsetCommitResponsePartition(partition_index=0, error_code=0)])]), None)
    assert not h.end_txn_found_and_answered().committed
    h.result(box)
    assert h.txn.state == TxnState.READY


def test_a_late_offsets_answer_does_not_complete_the_next_transactions_call():
    """The aborted transaction's TxnOffsetCommit, answered during the next
    transaction's send_offsets_to_transaction(), is not that call's outcome: the call
    returned success at once, its own AddOffsetsToTxn and TxnOffsetCommit unsent or
    unanswered, and the commit that followed took input offsets that were never in the
    transaction (found by the transactions fuzz harness)."""
    h = Harness()
    _req, cb, _v = _abort_while_the_offsets_commit_waits_for_its_coordinator(h)
    h.result(h.call("begin_transaction"))
    box = h.call("send_offsets_to_transaction", [TopicPartition("in", 0, 43)], _group(), 5.0)
    cb(FindCoordinatorResponse(error_code=0, node_id=1, host="fake", port=9001), None)
    for _ in range(5):
        h.pump(0.01)
        if ApiKey.TXN_OFFSET_COMMIT in h.conn.keys():    # the old one, if it goes out
            req, old_cb, _v = h.conn.take(ApiKey.TXN_OFFSET_COMMIT)
            R = TxnOffsetCommitResponse
            old_cb(R(topics=[R.TxnOffsetCommitResponseTopic(name="in", partitions=[
                R.TxnOffsetCommitResponsePartition(partition_index=0, error_code=0)])]),
                None)
        time.sleep(0.005)
    assert box["thread"].is_alive(), "send_offsets_to_transaction() returned early"
    req, cb, _v = h.until_sent(ApiKey.ADD_OFFSETS_TO_TXN)   # its own request
    cb(AddOffsetsToTxnResponse(error_code=0), None)
    req, cb, _v = h.until_sent(ApiKey.TXN_OFFSET_COMMIT)
    assert req.topics[0].partitions[0].committed_offset == 43
    R = TxnOffsetCommitResponse
    cb(R(topics=[R.TxnOffsetCommitResponseTopic(name="in", partitions=[
        R.TxnOffsetCommitResponsePartition(partition_index=0, error_code=4)])]), None)
    with pytest.raises(KafkaException) as excinfo:                 # its own outcome
        h.result(box)
    assert kafka_error(excinfo).txn_requires_abort()
