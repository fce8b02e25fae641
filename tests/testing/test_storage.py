"""The test cluster's partition logs: Kafka's segment files, rolling, reading, recovery,
truncation, retention, DeleteRecords, compaction and producer state (no broker process:
``kafka_client.testing.storage.PartitionLog`` directly)."""
from __future__ import annotations

import os
import time

import pytest

from kafka_proto.errors import ErrorCode
from kafka_proto.logdir import (
    LEADER_EPOCH_CHECKPOINT,
    decode_leader_epoch_checkpoint,
    decode_offset_index,
    decode_time_index,
    segment_base_offset,
    segment_file_name,
)
from kafka_proto.records import (
    ControlRecordType,
    RecordBatchBuilder,
    build_control_batch,
    read_batch_header,
    read_batches,
    stamp_batch,
)

from kafka_client.testing._config import TopicSettings
from kafka_client.testing.storage import PartitionLog

NOW = int(time.time() * 1000)


def settings(**overrides):
    s = TopicSettings.defaults()
    for name, value in overrides.items():
        setattr(s, name, value)
    return s


def make_batch(values, keys=None, timestamp=None, producer_id=-1, producer_epoch=-1,
               base_sequence=-1, transactional=False):
    b = RecordBatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                           base_sequence=base_sequence, transactional=transactional)
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else None
        b.append(value, key=key, timestamp=(timestamp if timestamp is not None else NOW) + i)
    return b.build()


def append(log, values, keys=None, epoch=0, now_ms=None, **batch_args):
    """Append one batch as a leader would: offsets from the log end, epoch stamped."""
    data = bytearray(make_batch(values, keys, **batch_args))
    stamp_batch(data, 0, log.end_offset, epoch)
    header = read_batch_header(data)
    log.append(data, [header], now_ms=now_ms)
    return header


def read_index_file(path):
    with open(path, "rb") as f:
        return decode_offset_index(f.read(), segment_base_offset(path))


def read_time_index_file(path):
    with open(path, "rb") as f:
        return decode_time_index(f.read(), segment_base_offset(path))


def all_records(log):
    out = []
    for seg in log.segments:
        for batch in read_batches(seg.read_bytes()):
            assert batch.validate_crc()
            out.extend((r.offset, r.key, r.value) for r in batch)
    return out


@pytest.fixture
def log_dir(tmp_path):
    return str(tmp_path / "topic-0")


def test_segment_files_are_kafka_segments(log_dir):
    log = PartitionLog(log_dir, "topic", 0, settings(index_interval_bytes=100))
    headers = [append(log, [b"v%03d-%d" % (i, j) for j in range(5)]) for i in range(40)]
    assert log.end_offset == 200
    names = sorted(os.listdir(log_dir))
    assert names == sorted([LEADER_EPOCH_CHECKPOINT, segment_file_name(0, ".index"),
                            segment_file_name(0), segment_file_name(0, ".timeindex")])
    assert segment_file_name(0) == "00000000000000000000.log"
    # The .log file is the batches back to back, offsets assigned in order, CRCs valid.
    with open(os.path.join(log_dir, segment_file_name(0)), "rb") as f:
        data = f.read()
    batches = list(read_batches(data, allow_truncated=False))
    assert [b.base_offset for b in batches] == [h.base_offset for h in headers]
    assert [b.base_offset for b in batches] == list(range(0, 200, 5))
    assert all(b.validate_crc() for b in batches)
    assert sum(b.size for b in batches) == len(data)
    # Every index entry maps a batch's last offset to that batch's position.
    positions = {}
    pos = 0
    for b in batches:
        positions[b.last_offset] = pos
        pos += b.size
    index = read_index_file(os.path.join(log_dir, segment_file_name(0, ".index")))
    assert len(index) >= 10
    for offset, position in index:
        assert positions[offset] == position
    # Time index: increasing timestamps, each the largest up to its offset.
    times = read_time_index_file(os.path.join(log_dir, segment_file_name(0, ".timeindex")))
    assert times and [t for t, _ in times] == sorted({t for t, _ in times})
    # The epoch checkpoint names epoch 0 from offset 0.
    with open(os.path.join(log_dir, LEADER_EPOCH_CHECKPOINT), "rb") as f:
        assert f.read() == b"0\n1\n0 0\n"       # Kafka's text format
    with open(os.path.join(log_dir, LEADER_EPOCH_CHECKPOINT), "rb") as f:
        assert decode_leader_epoch_checkpoint(f.read()) == [(0, 0)]


def test_roll_by_size_starts_segments_at_the_next_offset(log_dir):
    log = PartitionLog(log_dir, "topic", 0, settings(segment_bytes=1000))
    for i in range(30):
        append(log, [b"x" * 50 for _ in range(3)])
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 3
    for seg, nxt in zip(log.segments, log.segments[1:]):
        assert nxt.base_offset == seg.next_offset
        assert seg.size <= 1000
    assert sorted(n for n in os.listdir(log_dir) if n.endswith(".log")) == \
        [segment_file_name(b) for b in bases]
    assert [o for o, _, _ in all_records(log)] == list(range(90))


def test_roll_by_age(log_dir):
    log = PartitionLog(log_dir, "topic", 0, settings(segment_ms=1000))
    append(log, [b"a"], now_ms=NOW)
    append(log, [b"b"], now_ms=NOW + 500)
    assert len(log.segments) == 1
    log.active.created_ms = NOW
    append(log, [b"c"], now_ms=NOW + 1000)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_read_returns_whole_batches_within_the_limits(log_dir):
    log = PartitionLog(log_dir, "topic", 0, settings())
    sizes = [append(log, [b"y" * 100 for _ in range(4)]).size for _ in range(10)]
    # From the middle of a batch: the whole batch that holds the offset.
    result = log.read(6, 10_000, upper=log.end_offset)
    assert result.first_offset == 4 and result.next_offset == 40
    # max_bytes cuts at a batch boundary; one batch at least when min_one.
    result = log.read(0, sizes[0] + sizes[1] + 10, upper=40)
    assert (result.first_offset, result.next_offset, result.size) == (0, 8, sizes[0] + sizes[1])
    result = log.read(0, 10, upper=40, min_one=True)
    assert (result.next_offset, result.size) == (4, sizes[0])
    assert log.read(0, 10, upper=40, min_one=False) is None
    # Nothing at or beyond the upper bound (the high watermark for consumers).
    result = log.read(0, 10_000, upper=12)
    assert result.next_offset == 12
    assert log.read(12, 10_000, upper=12) is None
    assert log.read(40, 10_000, upper=40) is None
    data = os.pread(result.file.fileno(), result.size, result.position)
    assert [b.base_offset for b in read_batches(data)] == [0, 4, 8]



def test_read_agrees_with_a_batch_by_batch_walk(log_dir):
    """Segment.read finds its range by bisection; a plain walk over the batches gives the
    same range for every offset, byte limit, upper bound and min_one."""
    import random

    rng = random.Random(7)
    log = PartitionLog(log_dir, "topic", 0, settings())
    for _ in range(30):
        append(log, [b"z" * rng.randint(1, 300) for _ in range(rng.randint(1, 5))])
    seg = log.active

    def walk(offset, max_bytes, upper, min_one):
        chosen = []
        for k in range(len(seg.batch_lasts)):
            if seg.batch_lasts[k] < offset:
                continue
            if seg.batch_lasts[k] >= upper:
                break
            end = seg.batch_end(k)
            start = seg.batch_positions[chosen[0] if chosen else k]
            if end - start > max_bytes and not (not chosen and min_one):
                break
            chosen.append(k)
        if not chosen:
            return None
        first, last = chosen[0], chosen[-1]
        return (seg.batch_positions[first], seg.batch_end(last) - seg.batch_positions[first],
                seg.batch_bases[first], seg.batch_lasts[last] + 1)

    end = log.end_offset
    for _ in range(3000):
        offset = rng.randint(0, end + 1)
        args = (offset, rng.choice([0, 50, 500, 2000, 10**6]), rng.randint(0, end + 1),
                rng.random() < 0.5)
        got = seg.read(*args)
        assert (None if got is None else got[1:]) == walk(*args), args

def test_reopening_recovers_a_torn_tail_and_rebuilds_the_indexes(log_dir):
    s = settings(index_interval_bytes=50)
    log = PartitionLog(log_dir, "topic", 0, s)
    for i in range(20):
        append(log, [b"r%d" % i] * 3, keys=[b"k"] * 3)
    index_path = os.path.join(log_dir, segment_file_name(0, ".index"))
    index_before = read_index_file(index_path)
    log.close()
    # A crash in the middle of writing a batch: half of it on disk.
    torn = make_batch([b"lost"] * 3)
    with open(os.path.join(log_dir, segment_file_name(0)), "ab") as f:
        f.write(torn[:len(torn) // 2])
    reopened = PartitionLog(log_dir, "topic", 0, s)
    assert reopened.end_offset == 60
    assert [o for o, _, _ in all_records(reopened)] == list(range(60))
    assert read_index_file(index_path) == index_before
    append(reopened, [b"after"])
    assert all_records(reopened)[-1] == (60, None, b"after")


def test_truncate_removes_later_segments_batches_and_epochs(log_dir):
    log = PartitionLog(log_dir, "topic", 0, settings(segment_bytes=300))
    for i in range(10):
        append(log, [b"z" * 40] * 2, epoch=0 if i < 5 else 3)
    assert log.epochs == [(0, 0), (3, 10)]
    assert log.end_offset_for_epoch(0) == (0, 10)
    assert log.end_offset_for_epoch(2) == (0, 10)
    assert log.end_offset_for_epoch(3) == (3, 20)
    log.truncate_to(7)   # inside the batch 6-7: that batch goes too
    assert log.end_offset == 6
    assert log.epochs == [(0, 0)]
    assert [o for o, _, _ in all_records(log)] == list(range(6))
    append(log, [b"new"], epoch=4)
    assert log.epochs == [(0, 0), (4, 6)]
    assert all_records(log)[-1] == (6, None, b"new")


def test_truncation_keeps_the_first_record_of_the_largest_timestamp(log_dir):
    # As Kafka's segment: of two batches with the same largest timestamp, the first
    # names it (ListOffsets MAX_TIMESTAMP); recounted after a truncation it named the last.
    log = PartitionLog(log_dir, "topic", 0, settings())
    for stamp in (NOW, NOW + 2000, NOW + 2000, NOW - 500):
        append(log, [b"v"], timestamp=stamp)
    assert log.max_timestamp_offset() == (1, NOW + 2000)
    log.truncate_to(3)
    assert log.max_timestamp_offset() == (1, NOW + 2000)


def test_an_epoch_older_than_any_known_ends_where_the_first_known_one_starts(log_dir):
    # Kafka's LeaderEpochFileCache.endOffsetFor: a follower of an empty log that becomes
    # leader knows only its own epoch; a consumer positioned in an older epoch at that
    # log's start is told its epoch ends there, not "undefined" (which resets it).
    log = PartitionLog(log_dir, "topic", 0, settings())
    assert log.end_offset_for_epoch(0) == (-1, -1)
    log.assign_epoch(2, 0)
    assert log.end_offset_for_epoch(0) == (0, 0)
    append(log, [b"a"] * 3, epoch=2)
    log.assign_epoch(5, 3)
    assert log.end_offset_for_epoch(1) == (1, 0)
    assert log.end_offset_for_epoch(2) == (2, 3)
    assert log.end_offset_for_epoch(5) == (5, 3)


def test_a_new_epoch_replaces_the_epochs_that_start_where_it_starts(log_dir):
    # Kafka's LeaderEpochFileCache.assign: entries starting at or after the new epoch's
    # start hold no record and go. Kept, an empty log led in epochs 0 and then 3 answered
    # a follower that had led epoch 2 (fetching from 0) "epoch 0 ends at 0": a divergence
    # the follower, with nothing to truncate, met again on every fetch.
    log = PartitionLog(log_dir, "topic", 0, settings())
    log.assign_epoch(0, 0)
    log.assign_epoch(3, 0)
    assert log.epochs == [(3, 0)]
    assert log.end_offset_for_epoch(2) == (2, 0)    # older than known: ends at 0
    append(log, [b"a"] * 2, epoch=3)
    log.assign_epoch(4, 2)
    log.assign_epoch(6, 2)
    assert log.epochs == [(3, 0), (6, 2)]


def test_a_follower_cuts_at_its_own_end_of_the_diverging_epoch(log_dir):
    # A follower that led epoch 2 alone (records 5-9 the leader never had) fetches with
    # last epoch 2; the leader, in epoch 1 since offset 5 (its end 20), answers "epoch 1
    # ends at 20". Cut at 20 alone, nothing went and the same answer came on every
    # fetch; as Kafka's follower, it cuts at its own end of epoch 1 (where its epoch 0
    # ends): 5.
    log = PartitionLog(log_dir, "topic", 0, settings())
    for _ in range(5):
        append(log, [b"a"], epoch=0)
    append(log, [b"b"] * 5, epoch=2)
    log.high_watermark = 5
    assert log.truncate_for_divergence(1, 20)
    assert (log.end_offset, log.epochs) == (5, [(0, 0)])
    assert not log.truncate_for_divergence(0, 20)   # nothing of its own past 5: no change
    assert log.truncate_for_divergence(0, 3)
    assert log.end_offset == 3
    assert not log.truncate_for_divergence(-1, -1)  # the leader knows no epoch: keep to hw
    assert log.end_offset == 3


def test_retention_by_time_deletes_old_inactive_segments_below_the_high_watermark(log_dir):
    log = PartitionLog(log_dir, "topic", 0, settings(retention_ms=60_000))
    old = NOW - 3_600_000
    for i in range(3):
        append(log, [b"old"], timestamp=old + i)
        log.roll()
    append(log, [b"new"])
    log.roll()
    append(log, [b"active"], timestamp=old)   # old, but in the active segment
    assert [s.base_offset for s in log.segments] == [0, 1, 2, 3, 4]
    log.high_watermark = 2
    assert log.apply_retention(NOW) == 2           # not beyond the high watermark
    log.high_watermark = log.end_offset
    assert log.apply_retention(NOW) == 1
    assert [s.base_offset for s in log.segments] == [3, 4]
    assert log.log_start_offset == 3
    assert not os.path.exists(os.path.join(log_dir, segment_file_name(0)))
    assert [o for o, _, _ in all_records(log)] == [3, 4]


def test_retention_by_size_keeps_at_least_the_limit(log_dir):
    log = PartitionLog(log_dir, "topic", 0, settings(retention_bytes=500, segment_bytes=200))
    for i in range(20):
        append(log, [b"s" * 60])
    log.high_watermark = log.end_offset
    total = log.size_bytes
    deleted = log.apply_retention(NOW)
    assert deleted > 0
    assert log.size_bytes >= 500
    assert log.size_bytes - log.segments[0].size < 500
    assert log.size_bytes < total
    assert log.log_start_offset == log.segments[0].base_offset


def test_delete_records_moves_the_log_start(log_dir):
    log = PartitionLog(log_dir, "topic", 0, settings(segment_bytes=200))
    for i in range(12):
        append(log, [b"d" * 60])
    log.high_watermark = log.end_offset
    assert log.delete_records(7)
    assert log.log_start_offset == 7
    assert log.segments[0].base_offset <= 7 < log.segments[0].next_offset or \
        log.segments[0].base_offset == 7
    assert not log.delete_records(5)   # never backwards
    assert log.read(0, 10_000, upper=12).first_offset <= 7


def test_a_time_lookup_after_delete_records_finds_the_first_record_kept(log_dir):
    # A batch of 10 whose first 3 are deleted: a lookup by an early time answers 3 (it
    # answered nothing: the batch's first match, 0, was below the log start).
    log = PartitionLog(log_dir, "topic", 0, settings())
    append(log, [b"x"] * 10, timestamp=NOW)
    log.high_watermark = log.end_offset
    assert log.delete_records(3)
    assert log.offset_for_timestamp(0) == (3, NOW + 3)
    assert log.offset_for_timestamp(NOW + 5) == (5, NOW + 5)
    assert log.delete_records(10)
    assert log.offset_for_timestamp(0) is None


def test_the_max_timestamp_lookup_names_the_record_not_its_batch_end(log_dir):
    # One batch whose newest record is not its last (times 100, 400, 200), then a batch
    # of older records: Kafka answers MAX_TIMESTAMP with offset 1, the record itself (it
    # answered 2, the batch's last offset).
    log = PartitionLog(log_dir, "topic", 0, settings())
    builder = RecordBatchBuilder()
    for stamp in (100, 400, 200):
        builder.append(b"v", timestamp=NOW + stamp)
    data = bytearray(builder.build())
    stamp_batch(data, 0, log.end_offset, 0)
    log.append(data, [read_batch_header(data)])
    append(log, [b"older"] * 2, timestamp=NOW)
    assert log.max_timestamp_offset() == (1, NOW + 400)


def _compacted(settings_overrides=None):
    values = dict(cleanup_compact=True, cleanup_delete=False, segment_bytes=10 ** 9,
                  min_cleanable_dirty_ratio=0.0)
    values.update(settings_overrides or {})
    return settings(**values)


def test_compaction_keeps_the_latest_value_per_key_at_its_offset(log_dir):
    log = PartitionLog(log_dir, "topic", 0, _compacted())
    written = []
    for round_ in range(4):
        for key in (b"a", b"b", b"c"):
            value = b"%s-%d" % (key, round_)
            append(log, [value], keys=[key])
            written.append((log.end_offset - 1, key, value))
        log.roll()
    append(log, [b"a-active"], keys=[b"a"])    # the active segment is never cleaned
    log.high_watermark = log.end_offset
    before = all_records(log)
    removed = log.compact(NOW, force=True)
    assert removed == 9
    after = all_records(log)
    # The latest of each key in the cleaned part survives, at its original offset.
    assert after == [(9, b"a", b"a-3"), (10, b"b", b"b-3"), (11, b"c", b"c-3"),
                     (12, b"a", b"a-active")]
    assert set(after) <= set(before)
    assert log.end_offset == 13 and log.log_start_offset == 0
    # Reading from an offset that compaction removed gives the next record.
    result = log.read(2, 10_000, upper=log.end_offset)
    assert result.first_offset == 9


def test_compaction_rebatches_survivors_without_changing_offsets(log_dir):
    log = PartitionLog(log_dir, "topic", 0, _compacted())
    keys = [b"k%d" % (i % 3) for i in range(9)]
    append(log, [b"v%d" % i for i in range(9)], keys=keys,
           producer_id=7, producer_epoch=1, base_sequence=0)
    append(log, [b"last-k0"], keys=[b"k0"], producer_id=7, producer_epoch=1, base_sequence=9)
    log.roll()
    append(log, [b"tail"], keys=[b"t"])
    log.high_watermark = log.end_offset
    log.compact(NOW, force=True)
    batches = [b for seg in log.segments for b in read_batches(seg.read_bytes())]
    survivors = [(r.offset, r.key, r.value) for b in batches for r in b]
    assert survivors == [(7, b"k1", b"v7"), (8, b"k2", b"v8"), (9, b"k0", b"last-k0"),
                         (10, b"t", b"tail")]
    first = batches[0]
    # Offsets 7-8 survived together: one batch, sequence of its first record kept.
    assert (first.base_offset, first.last_offset, first.base_sequence) == (7, 8, 7)
    assert (first.producer_id, first.producer_epoch) == (7, 1)
    assert all(b.validate_crc() for b in batches)


def test_tombstones_vanish_after_delete_retention(log_dir):
    log = PartitionLog(log_dir, "topic", 0, _compacted({"delete_retention_ms": 1000}))
    append(log, [b"v1"], keys=[b"gone"])
    append(log, [b"v2"], keys=[b"kept"])
    append(log, [None], keys=[b"gone"])         # tombstone
    log.roll()
    append(log, [b"x"], keys=[b"other"])
    log.high_watermark = log.end_offset
    log.compact(NOW, force=True)
    assert all_records(log) == [(1, b"kept", b"v2"), (2, b"gone", None), (3, b"other", b"x")]
    log.compact(NOW + 999, force=True)
    assert (2, b"gone", None) in all_records(log)   # not yet
    log.compact(NOW + 1000, force=True)
    assert all_records(log) == [(1, b"kept", b"v2"), (3, b"other", b"x")]


def test_compaction_leaves_the_unstable_and_uncommitted_part_alone(log_dir):
    log = PartitionLog(log_dir, "topic", 0, _compacted())
    append(log, [b"1"], keys=[b"k"])
    log.roll()
    append(log, [b"2"], keys=[b"k"])
    log.roll()
    append(log, [b"3"], keys=[b"k"])
    log.high_watermark = 1       # only the first segment is committed
    assert log.compact(NOW, force=True) == 0
    assert [o for o, _, _ in all_records(log)] == [0, 1, 2]


def test_compaction_keeps_the_committed_value_under_an_aborted_one(log_dir):
    """Kafka's cleaner leaves records of aborted transactions out of its key map and
    discards them. Counted as the latest value of their key, they made the cleaner delete
    the committed value before them: read_committed readers saw 1 key of 11."""
    log = PartitionLog(log_dir, "topic", 0, _compacted())
    append(log, [b"committed"], keys=[b"k"])                          # offset 0
    append(log, [b"aborted"], keys=[b"k"], producer_id=9, producer_epoch=0,
           base_sequence=0, transactional=True)                       # offset 1
    marker = bytearray(build_control_batch(ControlRecordType.ABORT, 9, 0))
    stamp_batch(marker, 0, log.end_offset, 0)
    log.append(marker, [read_batch_header(marker)])                   # offset 2
    log.roll()
    append(log, [b"x"], keys=[b"other"])                              # active segment
    log.high_watermark = log.end_offset
    assert log.compact(NOW, force=True) == 1
    assert [(o, k, v) for o, k, v in all_records(log) if k == b"k"] == [
        (0, b"k", b"committed")]


def test_producer_state_detects_duplicates_gaps_and_fencing(log_dir):
    log = PartitionLog(log_dir, "topic", 0, settings())
    state = log.producer_state

    def check(values, seq, epoch=0):
        header = read_batch_header(make_batch(values, producer_id=42, producer_epoch=epoch,
                                              base_sequence=seq))
        return state.check(header)

    assert check([b"a"], 3) == (ErrorCode.NONE, None)   # unknown: any sequence (Kafka 2.5+)
    append(log, [b"a", b"b"], producer_id=42, producer_epoch=0, base_sequence=0)
    append(log, [b"c"], producer_id=42, producer_epoch=0, base_sequence=2)
    error, duplicate = check([b"a", b"b"], 0)
    assert error == ErrorCode.NONE and (duplicate.base_offset, duplicate.last_offset) == (0, 1)
    assert check([b"d"], 3) == (ErrorCode.NONE, None)
    assert check([b"d"], 4) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
    assert check([b"d"], 0, epoch=1) == (ErrorCode.NONE, None)
    assert check([b"d"], 5, epoch=1) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
    append(log, [b"e"], producer_id=42, producer_epoch=1, base_sequence=0)
    assert check([b"f"], 1, epoch=0) == (ErrorCode.INVALID_PRODUCER_EPOCH, None)
    # Rebuilt from the log after a reopen: the same answers.
    log.close()
    reopened = PartitionLog(log_dir, "topic", 0, settings())
    header = read_batch_header(make_batch([b"e"], producer_id=42, producer_epoch=1,
                                          base_sequence=0))
    error, duplicate = reopened.producer_state.check(header)
    assert error == ErrorCode.NONE and duplicate.base_offset == 3


def test_the_last_stable_offset_never_stops_at_a_marker_not_yet_replicated(log_dir):
    """A transaction's marker appended at the leader: until the high watermark passes it
    the transaction still counts as unstable, as in Kafka. The last stable offset was the
    marker's own offset for a moment (a read_committed reader got _PARTITION_EOF there,
    then again one offset later)."""
    log = PartitionLog(log_dir, "topic", 0, settings())
    append(log, [b"a", b"b"], producer_id=9, producer_epoch=0, base_sequence=0,
           transactional=True)                                   # offsets 0, 1
    log.high_watermark = 2
    assert log.last_stable_offset() == 0                        # open
    marker = bytearray(build_control_batch(ControlRecordType.COMMIT, 9, 0))
    stamp_batch(marker, 0, log.end_offset, 0)
    log.append(marker, [read_batch_header(marker)])              # offset 2
    assert log.last_stable_offset() == 0                         # marker not replicated
    log.high_watermark = 3
    assert log.last_stable_offset() == 3                         # past the marker
