"""The accumulator alone: batching rules, backpressure, size limits, sticky partitioning,
messages waiting for metadata, produce_batch. No broker, no I/O thread."""
from __future__ import annotations

import threading
import time

import pytest

from kafka_client._cluster.metadata import MetadataCache, TopicInfo
from kafka_client.config import ClientConfig
from kafka_client.errors import KafkaError, KafkaException
from kafka_client.producer.accumulator import Accumulator
from kafka_proto.compression import compress, decompress
from kafka_proto.errors import ErrorCode
from kafka_proto.records import BATCH_HEADER_SIZE, Compression, read_batches


def make(**conf):
    base = {"bootstrap.servers": "127.0.0.1:1"}
    base.update(conf)
    cfg = ClientConfig.from_dict(base, role="producer")
    wakes, wanted = [], []
    acc = Accumulator(cfg, wakes.append, wanted.append)
    return acc, wakes, wanted


def topic_info(name, leaders, error=0):
    """What the metadata cache knows of a topic: one leader per partition."""
    n = len(leaders)
    return TopicInfo(name, error, list(leaders), [-1] * n, [0] * n, time.monotonic())


def with_topic(acc, name="t", partitions=1, leaders=None):
    t = acc._new_topic(name)
    leaders = [1] * partitions if leaders is None else leaders
    assert acc.apply_metadata({name: topic_info(name, leaders)}, time.monotonic()).unplaced == []
    return t


def records_of(batch):
    data = batch.builder.build()
    (b,) = list(read_batches(data))
    return [(r.key, r.value) for r in b]


def test_messages_are_encoded_into_the_open_batch():
    acc, wakes, wanted = make()
    t = with_topic(acc)
    acc.produce("t", b"v1", key=b"k1")
    acc.produce("t", "text", key="k2")          # str is UTF-8 encoded
    acc.produce("t", None, partition=0)          # tombstone
    p = t.parts[0]
    assert p.open is not None and p.open.count == 3 and not p.ready
    assert records_of(p.open) == [(b"k1", b"v1"), (b"k2", b"text"), (None, None)]
    assert p.open.cbs is None  # no callback: nothing kept per message
    # Key and value bytes are counted as each message is queued, open batch or not.
    assert acc.msg_count == 3 and acc.msg_bytes == 4 + 6 == p.open.counted
    acc.close_lingered(0.0, everything=True)
    assert acc.msg_bytes == 10 and p.ready[0].nbytes == p.ready[0].builder.size_in_bytes > 61
    assert wanted == ["t"]


def test_batch_num_messages_closes_a_batch():
    acc, wakes, _ = make(**{"batch.num.messages": 3})
    t = with_topic(acc)
    for i in range(7):
        acc.produce("t", b"%d" % i, partition=0)
    p = t.parts[0]
    assert [b.count for b in p.ready] == [3, 3]
    assert p.open.count == 1
    assert acc.ready(time.monotonic()).nodes == {1}
    assert 0.0 in wakes  # the I/O thread was told at once
    assert [b.seq for b in p.ready] == [0, 1] and p.open.seq == 2


def test_batch_size_bounds_a_batch():
    acc, _, _ = make(**{"batch.size": 1000})
    t = with_topic(acc)
    for _ in range(30):
        acc.produce("t", b"x" * 100, partition=0)
    p = t.parts[0]
    sizes = [b.builder.size_in_bytes for b in p.ready]
    assert sizes and all(s <= 1000 for s in sizes)
    assert sum(b.count for b in p.ready) + p.open.count == 30
    # A message larger than batch.size still goes out, alone.
    acc.produce("t", b"y" * 2000, partition=0)
    acc.produce("t", b"z", partition=0)
    assert p.ready[-1].count == 1 and records_of(p.ready[-1]) == [(None, b"y" * 2000)]


def test_linger_closes_batches_in_order():
    acc, wakes, _ = make(**{"linger.ms": 50})
    t = with_topic(acc, partitions=2)
    acc.produce("t", b"a", partition=0)
    acc.produce("t", b"b", partition=1)
    first = wakes[0]  # told when the linger ends
    assert first > time.monotonic()
    assert acc.close_lingered(first - 0.01) == first
    assert not acc.ready(first).nodes
    assert acc.close_lingered(first + 0.06) is None
    assert [len(p.ready) for p in t.parts] == [1, 1]
    # flush: everything closes regardless of linger
    acc.produce("t", b"c", partition=0)
    acc.close_lingered(0.0, everything=True)
    assert t.parts[0].open is None and len(t.parts[0].ready) == 2


def test_queue_limits_raise_buffer_error():
    acc, _, _ = make(**{"queue.buffering.max.messages": 5})
    with_topic(acc)
    for _ in range(5):
        acc.produce("t", b"x")
    with pytest.raises(BufferError):
        acc.produce("t", b"x")
    # kbytes: closed batches count with their encoded size (open ones on top)
    acc2, _, _ = make(**{"queue.buffering.max.kbytes": 1, "batch.num.messages": 1})
    with_topic(acc2)
    acc2.produce("t", b"x" * 1000)
    with pytest.raises(BufferError):
        acc2.produce("t", b"x" * 100)
    assert acc2.msg_count == 1


def test_size_and_partition_errors():
    acc, _, _ = make(**{"message.max.bytes": 1000})
    with_topic(acc, partitions=2)
    with pytest.raises(KafkaException) as ei:
        acc.produce("t", b"x" * 900, key=b"k" * 200)
    assert ei.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    with pytest.raises(KafkaException) as ei:
        acc.produce("t", b"x", partition=2)
    assert ei.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    with pytest.raises(TypeError):
        acc.produce("t", 12345)
    with pytest.raises(KafkaException):
        acc.produce("", b"x")
    assert acc.msg_count == 0
    # Headers count too, as librdkafka counts them: a record over the limit with them
    # failed its whole batch at the broker (the small messages batched with it too).
    for headers in ([("h", b"x" * 950)], [("h%d" % i, b"x" * 9) for i in range(100)]):
        with pytest.raises(KafkaException) as ei:
            acc.produce("t", b"x" * 100, headers=headers)
        assert ei.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    # A header key UTF-8 cannot encode: refused at produce() (the batch's encoder failed
    # later, reported as a partitioner error).
    with pytest.raises(ValueError, match="header key"):
        acc.produce("t", b"x", headers=[("\udc80", b"v")])
    assert acc.msg_count == 0


def test_callbacks_keep_index_key_value():
    acc, _, _ = make()
    t = with_topic(acc)
    def cb(err, msg):
        pass

    acc.produce("t", b"a", partition=0)
    acc.produce("t", b"b", key=b"k", partition=0, on_delivery=cb, headers={"h": "v"})
    acc.produce("t", b"c", partition=0, callback=cb)
    assert [(d.index, d.callback, d.key, d.value, d.headers, d.timestamp)
            for d in t.parts[0].open.cbs] == [(1, cb, b"k", b"b", [("h", b"v")], 0),
                                              (2, cb, None, b"c", None, 0)]


def test_keyless_messages_stick_to_one_partition_per_batch():
    acc, _, _ = make(**{"batch.num.messages": 10})
    t = with_topic(acc, partitions=8)
    for _ in range(10):
        acc.produce("t", b"x")
    used = [p.index for p in t.parts if p.ready or p.open]
    assert len(used) == 1  # one batch filled on one partition
    # Keyed messages follow the key.
    acc.produce("t", b"x", key=b"same")
    acc.produce("t", b"y", key=b"same")
    keyed = [p for p in t.parts if p.open and p.open.count and p.index != used[0]]
    assert len(keyed) <= 1


def test_pending_messages_are_placed_in_order_when_metadata_arrives():
    acc, _, wanted = make(**{"batch.num.messages": 1000})
    acc.produce("new", b"1", partition=0)
    acc.produce("new", b"2")
    acc.produce("new", b"3", partition=5)   # does not exist: fails on assignment
    t = acc.topics["new"]
    assert t.parts is None and len(t.pending) == 3 and acc.msg_count == 3
    assert wanted == ["new"]
    assert [(m.value, m.partition, m.size) for m in t.pending] == [
        (b"1", 0, 1), (b"2", -1, 1), (b"3", 5, 1)]
    failed = acc.apply_metadata({"new": topic_info("new", [1])}, time.monotonic()).unplaced
    assert [(u.topic, [m.value for m in u.messages], u.error.code()) for u in failed] == [
        ("new", [b"3"], KafkaError._UNKNOWN_PARTITION)]
    assert not t.pending
    acc.produce("new", b"4")
    assert records_of(t.parts[0].open) == [(None, b"1"), (None, b"2"), (None, b"4")]
    assert acc.msg_count == 4  # the failed one still counts until its report is served


def test_a_topic_the_metadata_cache_knows_is_placed_from_its_first_produce():
    """A topic already in the metadata cache (a list_topics() answer) has its partitions
    from its first produce(): one it lacks is refused there, not in a delivery report."""
    cache = MetadataCache()
    cache.topics["listed"] = topic_info("listed", [1, 2])
    cache.topics["refused"] = topic_info("refused", [], ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    cfg = ClientConfig.from_dict({"bootstrap.servers": "127.0.0.1:1"}, role="producer")
    wanted = []
    acc = Accumulator(cfg, lambda deadline: None, wanted.append, cache.known_leaders)
    with pytest.raises(KafkaException) as info:
        acc.produce("listed", b"beyond", partition=2)
    assert info.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    acc.produce("listed", b"within", partition=1)
    t = acc.topics["listed"]
    assert [p.leader for p in t.parts] == [1, 2] and not t.pending
    assert records_of(t.parts[1].open) == [(None, b"within")] and acc.msg_count == 1
    assert wanted == ["listed"]                      # still asked for, and kept fresh
    for name in ("refused", "unlisted"):             # nothing known: waits for metadata
        acc.produce(name, b"waits", partition=2)
        assert acc.topics[name].parts is None and len(acc.topics[name].pending) == 1


def test_produce_batch_fills_batches_in_bulk():
    acc, _, _ = make(**{"batch.num.messages": 400})
    t = with_topic(acc, partitions=3)
    values = [b"v%04d" % i for i in range(1000)]
    assert acc.produce_batch("t", values, partition=1) == 1000
    p = t.parts[1]
    batches = list(p.ready) + ([p.open] if p.open else [])
    assert [b.count for b in batches] == [400, 400, 200]
    got = [v for b in batches for _, v in records_of(b)]
    assert got == values
    assert acc.msg_count == 1000
    assert acc.msg_bytes == sum(b.counted for b in batches) > 5000  # open one too
    # keys: each through the partitioner, then appended in bulk per partition, in order
    keys = [b"k%d" % (i % 5) for i in range(50)]
    acc.close_lingered(0.0, everything=True)
    assert acc.produce_batch("t", values[:50], keys) == 50
    assert acc.msg_count == 1050
    from kafka_client.producer.partitioners import get_partitioner

    crc = get_partitioner("consistent")
    for part in t.parts:
        if part.open is None:
            continue
        got = records_of(part.open)
        want = [(k, v) for k, v in zip(keys, values[:50]) if crc(k, 3) == part.index]
        if part.index == 1:      # its last batch waited behind two others: it takes more
            want = [(None, v) for v in values[800:]] + want
        assert got == want
    with pytest.raises(ValueError):
        acc.produce_batch("t", values[:3], keys[:2])
    with pytest.raises(KafkaException):
        acc.produce_batch("t", [b"x" * 2_000_000])


def test_produce_batch_respects_the_queue_limit_all_or_nothing():
    acc, _, _ = make(**{"queue.buffering.max.messages": 100})
    with_topic(acc)
    with pytest.raises(BufferError):
        acc.produce_batch("t", [b"x"] * 101, partition=0)
    assert acc.msg_count == 0
    acc.produce_batch("t", [b"x"] * 100, partition=0)
    assert acc.msg_count == 100


def test_produce_waits_for_the_lock_and_lets_its_holder_run():
    # The I/O thread holds the lock while it closes batches; a produce() meanwhile must
    # wait for it (not append into a batch being closed) and must release the GIL while
    # it waits, or the holder could never finish.
    import threading
    import time

    acc, _, _ = make()
    t = with_topic(acc)
    order = []
    holding = threading.Event()

    def holder():
        with acc.lock:
            holding.set()
            time.sleep(0.2)          # Python code runs: needs the GIL the waiter must free
            order.append("holder done")

    th = threading.Thread(target=holder)
    th.start()
    holding.wait(5)
    acc.produce("t", b"v", partition=0)
    order.append("produced")
    th.join(5)
    assert order == ["holder done", "produced"]
    assert t.parts[0].open.count == 1 and acc.msg_count == 1


def test_an_error_inside_produce_releases_the_lock():
    acc, _, _ = make(**{"queue.buffering.max.messages": 1})
    t = with_topic(acc)
    acc.produce("t", b"v", partition=0)
    with pytest.raises(BufferError):
        acc.produce("t", b"v", partition=0)
    with pytest.raises(KafkaException) as info:
        acc.msg_count = 0
        acc.produce("t", b"v", partition=5)
    assert info.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    with pytest.raises(KafkaException) as info:
        acc.produce("t", b"v", partition=-2)
    assert info.value.args[0].code() == KafkaError._INVALID_ARG
    with pytest.raises(TypeError):
        acc.produce("t", b"v", partition="0")
    with acc.lock:   # free again: would hang here otherwise
        pass
    assert t.parts[0].open.count == 1


@pytest.mark.parametrize("timestamp", [-1, -2, -5, -(1 << 63), 1 << 63, 1 << 70])
def test_a_timestamp_out_of_range_is_refused_before_any_batch_opens(timestamp):
    acc, _, _ = make()
    t = with_topic(acc)
    with pytest.raises(TypeError, match="timestamp"):
        acc.produce("t", b"v", partition=0, timestamp="now")
    with pytest.raises(KafkaException) as info:
        acc.produce("t", b"v", partition=0, timestamp=timestamp)
    assert info.value.args[0].code() == KafkaError._INVALID_ARG
    assert f"invalid timestamp {timestamp}" in info.value.args[0].str()
    assert acc.msg_count == 0
    p = t.parts[0]
    assert p.open is None and not p.ready and acc.msg_bytes == 0
    acc.produce("t", b"ok", partition=0)
    acc.close_lingered(0.0, everything=True)
    assert [records_of(b) for b in p.ready] == [[(None, b"ok")]]


# -- the sender's interface ------------------------------------------------------------
def test_ready_and_drain_go_by_leader_one_batch_per_partition_within_max_bytes():
    acc, _, _ = make(**{"batch.num.messages": 1, "linger.ms": 0})
    t = with_topic(acc, partitions=4, leaders=[1, 1, 2, -1])
    for p in range(4):
        acc.produce("t", b"x" * 500, partition=p)
        acc.produce("t", b"y" * 500, partition=p)
    now = time.monotonic()
    ready = acc.ready(now)
    assert ready.nodes == {1, 2} and ready.no_leader == {"t"} and ready.next_retry is None
    assert acc.drain(3, now, 1 << 20) == []
    # One batch per partition per request, partition 0 and 1 for node 1...
    first = acc.drain(1, now, 1 << 20)
    assert sorted((b.part.index, b.seq) for b in first) == [(0, 0), (1, 0)]
    # ... and only what fits in max_bytes (but always one): the next request takes the
    # rest, in order.
    size = t.parts[0].ready[0].nbytes
    assert size > 500
    one = acc.drain(1, now, size + 10)
    two = acc.drain(1, now, size + 10)
    assert len(one) == len(two) == 1
    assert sorted((b.part.index, b.seq) for b in one + two) == [(0, 1), (1, 1)]
    assert acc.drain(1, now, 0) == []
    assert [b.seq for b in acc.drain(2, now, 0)] == [0]  # max_bytes 0: still one batch
    assert [p.in_flight for p in t.parts] == [2, 2, 1, 0]
    for b in first:
        acc.completed(b)
    assert [p.in_flight for p in t.parts] == [1, 1, 1, 0]
    # The leaderless partition's batches stay queued; a node that cannot take them
    # gets all of another partition's at once.
    assert [b.seq for b in acc.take_ready(2)] == [1]
    assert len(t.parts[3].ready) == 2 and not t.parts[2].ready


def test_a_requeued_batch_goes_back_to_the_head_and_holds_the_partition():
    acc, _, _ = make(**{"batch.num.messages": 1, "linger.ms": 0})
    t = with_topic(acc)
    for i in range(3):
        acc.produce("t", b"%d" % i, partition=0)
    now = time.monotonic()
    (b0,) = acc.drain(1, now, 1 << 20)
    (b1,) = acc.drain(1, now, 1 << 20)
    acc.completed(b0)
    b0.sent = True
    acc.requeue(b0, now + 1.0)              # failed: resend after its backoff
    p = t.parts[0]
    assert [b.seq for b in p.ready] == [0, 2] and p.retrying
    assert acc.earlier_retry(b1)            # b1's failure would be b0's consequence
    ready = acc.ready(now)
    assert not ready.nodes and ready.next_retry == now + 1.0
    assert acc.drain(1, now + 1.0, 1 << 20) == []   # b1 still in flight: order first
    acc.completed(b1)
    assert [b.seq for b in acc.drain(1, now + 1.0, 1 << 20)] == [0]
    assert not p.retrying


def test_idempotent_drain_numbers_batches_and_keeps_five_in_flight():
    acc, _, _ = make(**{"batch.num.messages": 2, "linger.ms": 0, "enable.idempotence": True})
    t = with_topic(acc)
    for i in range(14):
        acc.produce("t", b"%d" % i, partition=0)
    now = time.monotonic()
    sent = [acc.drain(1, now, 1 << 20) for _ in range(6)]
    assert [[b.base_sequence for b in r] for r in sent] == [[0], [2], [4], [6], [8], []]
    for r in sent[:5]:
        for b in r:
            b.sent = True
            acc.completed(b)
    acc.requeue(sent[4][0], now)            # its answer was lost
    gone = acc.restart_sequences()          # new epoch: it may be in the log already
    assert gone == sent[4] and t.parts[0].next_seq == 0
    assert [b.base_sequence for b in acc.drain(1, now, 1 << 20)] == [0]


def test_expire_and_purge_take_out_what_the_sender_reports():
    acc, _, _ = make(**{"message.timeout.ms": 1000, "linger.ms": 0})
    t = with_topic(acc, partitions=2)
    acc.produce("t", b"queued", partition=0)
    acc.close_lingered(time.monotonic(), everything=True)
    acc.produce("t", b"open", partition=1)
    acc.produce("later", b"waiting")
    now = time.monotonic()
    early = acc.expire(now)
    assert early.batches == [] and early.unplaced == []
    late = acc.expire(now + 1.5)
    assert sorted(b.part.index for b in late.batches) == [0, 1]
    assert t.parts[1].open is None and not t.parts[0].ready
    (u,) = late.unplaced
    assert (u.topic, u.error.code(), [m.value for m in u.messages]) == (
        "later", KafkaError._MSG_TIMED_OUT, [b"waiting"])
    assert not acc.topics["later"].pending
    # purge: everything queued, whatever its age
    acc.produce("t", b"a", partition=0)
    acc.close_lingered(time.monotonic(), everything=True)
    acc.produce("t", b"b", partition=0)
    acc.produce("later", b"c")
    removed = acc.purge(KafkaError(KafkaError._PURGE_QUEUE))
    assert sorted(b.count for b in removed.batches) == [1, 1]
    assert [(u.topic, u.error.code(), len(u.messages)) for u in removed.unplaced] == [
        ("later", KafkaError._PURGE_QUEUE, 1)]
    assert not acc.ready(time.monotonic()).nodes and t.parts[0].open is None


def test_open_batches_count_against_queue_buffering_max_kbytes():
    """The byte limit holds whatever the batching: with a long linger.ms over many
    partitions the open batches held up to batch.size each on top of it (956 MB with a
    16 MB limit over 1,000 partitions). Served reports give the bytes back."""
    acc, _, _ = make(**{"queue.buffering.max.kbytes": 10, "linger.ms": 60000})
    t = with_topic(acc, partitions=20)
    for i in range(9):
        acc.produce("t", b"x" * 1000, partition=i)     # one open batch each
    assert acc.msg_bytes == 9000 and not any(p.ready for p in t.parts)
    with pytest.raises(BufferError):
        acc.produce("t", b"x" * 2000, partition=10)
    acc.close_lingered(0.0, everything=True)
    batches = [b for p in t.parts for b in p.ready]
    for b in batches:
        acc.reported(b.count, b.counted)
    assert acc.msg_count == 0 and acc.msg_bytes == 0
    acc.produce("t", b"x" * 2000, partition=10)


class _ReadCountingInfo(TopicInfo):
    """A TopicInfo that counts how often its error is read (apply_metadata reads it
    first when it looks at a topic)."""

    __slots__ = ()
    reads = 0

    @property
    def error(self):
        type(self).reads += 1
        return TopicInfo.error.__get__(self)

    @error.setter
    def error(self, value):
        TopicInfo.error.__set__(self, value)


def test_a_metadata_answer_skips_the_topics_it_brings_nothing_new_for():
    """Every metadata answer went through every topic produced to, comparing each
    partition's leader (3.4 ms per answer at 3,000 topics, the I/O thread's time growing
    with them). A topic whose entry was applied already, with nothing moved since, is
    skipped; a leader taken from a Produce answer makes the next answer look again."""
    acc = Accumulator(ClientConfig.from_dict({"bootstrap.servers": "x:1"}, role="producer"),
                      lambda d: None, lambda n: None)
    now = time.monotonic()
    infos = {}
    for i in range(100):
        name = f"t{i}"
        acc._new_topic(name)
        infos[name] = _ReadCountingInfo(name, 0, [1, 2], [0, 0], [0, 0], now)
    acc.apply_metadata(infos, now)
    assert _ReadCountingInfo.reads == 100 and acc.topics["t5"].parts[1].leader == 2
    acc.apply_metadata(infos, now)
    assert _ReadCountingInfo.reads == 100                      # nothing new: skipped
    acc.move_leader(acc.topics["t5"].parts[1], 1)              # KIP-951
    acc.apply_metadata(infos, now)
    assert _ReadCountingInfo.reads == 101
    assert acc.topics["t5"].parts[1].leader == 2               # the metadata's again
    infos["t7"] = _ReadCountingInfo("t7", 0, [2, 2], [1, 0], [0, 0], now)   # a new entry
    acc.apply_metadata(infos, now)
    assert _ReadCountingInfo.reads == 102 and acc.topics["t7"].parts[0].leader == 2


def test_an_answer_looks_at_the_changed_topics_and_those_waiting_or_moved():
    """With the listeners' set of changed topics, an answer looks at those only, and at
    the topics with messages waiting for metadata and those whose leader a Produce answer
    moved (KIP-951), changed or not."""
    acc = Accumulator(ClientConfig.from_dict({"bootstrap.servers": "x:1"}, role="producer"),
                      lambda d: None, lambda n: None)
    now = time.monotonic()
    infos = {f"t{i}": _ReadCountingInfo(f"t{i}", 0, [1, 2], [0, 0], [0, 0], now)
             for i in range(100)}
    for name in infos:
        acc._new_topic(name)
    acc.apply_metadata(infos, now, set(infos))
    before = _ReadCountingInfo.reads
    acc.produce("waiting", b"v")                     # no metadata yet
    infos["waiting"] = _ReadCountingInfo("waiting", 0, [2], [0], [0], now)
    acc.move_leader(acc.topics["t5"].parts[1], 1)
    infos["t9"] = _ReadCountingInfo("t9", 0, [2, 1], [1, 1], [0, 0], now)
    acc.apply_metadata(infos, now, {"t9"})
    assert _ReadCountingInfo.reads - before == 3     # t9, waiting, t5: not the 97 others
    assert [p.leader for p in acc.topics["t9"].parts] == [2, 1]
    assert acc.topics["t5"].parts[1].leader == 2
    assert acc.topics["waiting"].parts[0].open is not None and not acc.pending_topics


@pytest.mark.parametrize("call", ["produce", "produce_batch", "produce_messages"])
def test_a_produce_waiting_for_the_lock_when_the_producer_is_refused_raises(call):
    """The I/O thread refuses produce() (a fatal error) and then purges what is queued
    under the lock. A produce() that passed the first check and waited for the lock
    meanwhile must raise, not queue a message after the purge: that one waited for
    message.timeout.ms (seen once in four runs of an idempotent producer refused its
    producer id)."""
    acc, _, _ = make()
    with_topic(acc)
    outcome = []

    def produce():
        try:
            if call == "produce":
                acc.produce("t", b"late")
            elif call == "produce_batch":
                acc.produce_batch("t", [b"late"])
            else:
                messages = [{"value": b"late"}]
                acc.produce_messages("t", messages)
                if "_error" in messages[0]:
                    raise KafkaException(messages[0]["_error"])
            outcome.append("queued")
        except KafkaException as exc:
            outcome.append(exc.args[0].code())

    with acc.lock:                      # the I/O thread, about to purge
        thread = threading.Thread(target=produce)
        thread.start()
        time.sleep(0.3)                 # it checked the refusal (none yet), now waits
        acc.refuse_produce(lambda: KafkaError(KafkaError._FATAL, "fatal"))
    thread.join(5)
    assert outcome == [KafkaError._FATAL] and acc.msg_count == 0


def test_core_stub_declares_every_public_attribute_of_its_classes():
    """kafka_client.producer._core is Cython: its .pyi is all a type checker sees, so each
    ``cdef public`` attribute (a data descriptor on the class) is declared there."""
    import ast
    import pathlib

    from kafka_client.producer import _core

    tree = ast.parse(pathlib.Path(_core.__file__).with_name("_core.pyi").read_text())
    stub = {n.name: {b.target.id for b in n.body if isinstance(b, ast.AnnAssign)}
            for n in tree.body if isinstance(n, ast.ClassDef)}
    missing = {}
    for name, declared in stub.items():
        cls = getattr(_core, name)
        attrs = {a for a, v in vars(cls).items()
                 if type(v).__name__ == "getset_descriptor" and not a.startswith("__")}
        if attrs - declared:
            missing[name] = sorted(attrs - declared)
    assert "Batch" in stub and "counted" in vars(_core.Batch)   # the check sees them
    assert missing == {}


#: compression.level -> the level the codec is given, as librdkafka translates it (-1:
#: the codec's default; gzip's highest is 9; snappy has no levels)
_CODEC_LEVELS = {
    "gzip": {-1: None, 1: 1, 9: 9, 12: 9},
    "lz4": {-1: None, 1: 1, 9: 9, 12: 12},
    "zstd": {-1: None, 1: 1, 9: 9, 12: 12},
    "snappy": {-1: None, 1: None, 9: None, 12: None},
}


@pytest.mark.parametrize("codec", sorted(_CODEC_LEVELS))
def test_compression_level_reaches_the_codec_as_librdkafka_takes_it(codec):
    """The batch a producer sends, compressed at compression.level: its payload is the
    codec's output at librdkafka's level for it, and for compressible records a higher
    level sends fewer bytes. gzip with 10-12 (a valid setting: librdkafka takes 9) failed
    every batch with zlib's refusal on the I/O thread: nothing was delivered."""
    codec_id = int(getattr(Compression, codec.upper()))
    record = b"".join(b"record %d of a compressible payload; " % i for i in range(100))
    payloads = {}
    for level, given in _CODEC_LEVELS[codec].items():
        acc, _, _ = make(**{"compression.type": codec, "compression.level": level})
        t = with_topic(acc)
        for i in range(20):
            acc.produce("t", record + b"%d" % i, key=b"k", partition=0,
                        timestamp=1_700_000_000_000 + i)
        data = t.parts[0].open.builder.build()
        (batch,) = list(read_batches(data))
        assert int(batch.compression) == codec_id and len(list(batch)) == 20
        payload = data[BATCH_HEADER_SIZE:]
        assert payload == compress(codec_id, decompress(codec_id, payload), given)
        payloads[level] = payload
    if codec == "snappy":
        assert len(set(payloads.values())) == 1
    else:
        assert len(payloads[9]) < len(payloads[1])
