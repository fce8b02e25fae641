"""restamp_batch: a built v2 batch with new producer fields and CRC-32C (what an idempotent
producer sends again under a new producer id or epoch)."""
from __future__ import annotations

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch

import v2_reference as ref
from kafka_proto.errors import (
    CrcMismatchError,
    InvalidLengthError,
    TruncatedDataError,
    UnsupportedMagicError,
)
from kafka_proto.records import Compression, RecordBatchBuilder, read_batches, restamp_batch

RECORDS = ref.record(0, 0, b"k", b"hello", [("h", b"1")]) + ref.record(1, 7, None, b"v2")


def reference_batch(producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    return ref.batch(RECORDS, 2, base_offset=5, ple=3, base_ts=1000, max_ts=1007,
                     producer_id=producer_id, producer_epoch=producer_epoch,
                     base_sequence=base_sequence)


def test_restamp_gives_the_bytes_an_encoder_writes_for_the_new_fields():
    # Golden: the independent encoder's batch with the new fields, byte for byte.
    old = reference_batch(1, 0, 5)
    new = restamp_batch(old, 9, 2, 40)
    assert new == reference_batch(9, 2, 40)
    assert old == reference_batch(1, 0, 5)  # the input is not touched
    # Only the producer fields and the CRC differ.
    assert [i for i in range(len(old)) if old[i] != new[i]] and all(
        17 <= i < 21 or 43 <= i < 57 for i in range(len(old)) if old[i] != new[i])


def test_restamped_crc_is_valid_for_independent_readers():
    b = RecordBatchBuilder(compression=Compression.GZIP, producer_id=1, producer_epoch=0,
                           base_sequence=5)
    for i in range(10):
        b.append(b"value-%d" % i, key=b"k", timestamp=1_700_000_000_000 + i)
    new = restamp_batch(b.build(), 2**40, 32767, 2**31 - 1)
    assert crc32c.crc32c(new[21:]) == int.from_bytes(new[17:21], "big")
    peer = KafkaPythonBatch(bytearray(new))
    assert peer.validate_crc()
    assert (peer.producer_id, peer.producer_epoch, peer.base_sequence) == (2**40, 32767,
                                                                          2**31 - 1)
    assert [r.value for r in peer] == [b"value-%d" % i for i in range(10)]
    (ours,) = read_batches(new, check_crc=True)
    assert (ours.producer_id, ours.producer_epoch, ours.base_sequence) == (2**40, 32767,
                                                                          2**31 - 1)
    assert [r.value for r in ours] == [b"value-%d" % i for i in range(10)]


def test_restamp_accepts_any_bytes_like_and_clears_the_fields():
    old = reference_batch(7, 1, 3)
    assert restamp_batch(memoryview(bytearray(old)), -1, -1, -1) == reference_batch(-1, -1, -1)


def test_restamp_refuses_what_is_not_one_whole_v2_batch():
    good = reference_batch(1, 0, 5)
    with pytest.raises(TruncatedDataError):
        restamp_batch(good[:60], 1, 0, 0)
    with pytest.raises(TruncatedDataError):
        restamp_batch(good[:-1], 1, 0, 0)
    with pytest.raises(InvalidLengthError):
        restamp_batch(good + good, 1, 0, 0)
    with pytest.raises(UnsupportedMagicError):
        restamp_batch(good[:16] + b"\x01" + good[17:], 1, 0, 0)
    damaged = bytearray(good)
    damaged[-1] ^= 0x01
    with pytest.raises(CrcMismatchError):
        restamp_batch(bytes(damaged), 1, 0, 0)


def test_restamp_refuses_values_out_of_their_field_range():
    good = reference_batch(1, 0, 5)
    with pytest.raises(OverflowError):
        restamp_batch(good, 1, 32768, 0)
    with pytest.raises(OverflowError):
        restamp_batch(good, 1, 0, 2**31)
