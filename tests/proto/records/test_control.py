"""Control records: transaction markers and KRaft control types."""
from __future__ import annotations

import struct

import pytest

import v2_reference as ref
from kafka_proto.errors import CorruptRecordError
from kafka_proto.records import (
    ControlRecord,
    ControlRecordType,
    build_control_batch,
    parse_control_record,
    read_batches,
)
from kafka_proto.records.control import encode_control_key, encode_end_txn_marker


def test_key_and_marker_encoding_bytes():
    assert encode_control_key(ControlRecordType.COMMIT) == b"\x00\x00\x00\x01"
    assert encode_control_key(ControlRecordType.ABORT, version=0) == b"\x00\x00\x00\x00"
    assert encode_end_txn_marker(7) == b"\x00\x00\x00\x00\x00\x07"
    assert encode_end_txn_marker(-1) == b"\x00\x00\xff\xff\xff\xff"


@pytest.mark.parametrize("ctype", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_build_and_read_transaction_marker(ctype):
    data = build_control_batch(ctype, producer_id=4242, producer_epoch=3, coordinator_epoch=17,
                               base_offset=900, timestamp=1_700_000_000_000,
                               partition_leader_epoch=5)
    (batch,) = list(read_batches(data))
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 3, -1)
    assert batch.base_offset == 900 and batch.records_count == 1
    assert batch.partition_leader_epoch == 5
    assert batch.attributes == 0x30
    cr = batch.control_record()
    assert cr == ControlRecord(int(ctype), 0, 17, encode_end_txn_marker(17))
    assert cr.is_abort == (ctype == ControlRecordType.ABORT)
    assert cr.is_commit == (ctype == ControlRecordType.COMMIT)
    assert cr.is_known


def test_hand_built_commit_marker():
    key = bytes.fromhex("0000" "0001")             # version 0, COMMIT
    value = bytes.fromhex("0000" "0000002a")       # version 0, coordinator epoch 42
    data = ref.batch(ref.record(0, 0, key, value), 1, attributes=0x30, producer_id=9,
                     producer_epoch=0, base_offset=77)
    (batch,) = list(read_batches(data))
    cr = batch.control_record()
    assert (cr.type, cr.version, cr.coordinator_epoch) == (ControlRecordType.COMMIT, 0, 42)


def test_data_batch_has_no_control_record():
    data = ref.batch(ref.record(0, 0, b"\x00\x00\x00\x01", b"\x00" * 6), 1)
    assert next(read_batches(data)).control_record() is None
    empty_control = ref.batch(b"", 0, attributes=0x20, last_offset_delta=0)
    assert next(read_batches(empty_control)).control_record() is None


def test_higher_versions_read_as_v0_with_trailing_bytes():
    cr = parse_control_record(b"\x00\x05\x00\x00" + b"extra", b"\x00\x03\x00\x00\x00\x09zz")
    assert (cr.type, cr.version, cr.coordinator_epoch) == (ControlRecordType.ABORT, 5, 9)


def test_kraft_and_unknown_types_parse_without_epoch():
    for ctype in (2, 3, 4, 5, 6, 99, 32767):
        cr = parse_control_record(struct.pack(">hh", 0, ctype), b"anything")
        assert cr.type == ctype and cr.coordinator_epoch is None and cr.value == b"anything"
        assert cr.is_known == (ctype <= 6)
        assert not cr.is_abort and not cr.is_commit


@pytest.mark.parametrize("key,value", [
    (None, b"\x00" * 6),
    (b"", b"\x00" * 6),
    (b"\x00\x00\x00", b"\x00" * 6),            # short key
    (b"\xff\xff\x00\x01", b"\x00" * 6),        # negative key version
    (b"\x00\x00\x00\x01", None),               # COMMIT without value
    (b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00"),  # ABORT with a 5-byte value
    (b"\x00\x00\x00\x01", b"\x80\x00\x00\x00\x00\x00"),  # negative marker version
])
def test_malformed_control_records(key, value):
    with pytest.raises(CorruptRecordError):
        parse_control_record(key, value)


def test_build_control_batch_only_writes_markers():
    with pytest.raises(ValueError):
        build_control_batch(ControlRecordType.LEADER_CHANGE, 1, 0)


def test_peer_reads_our_marker():
    aiokafka_records = pytest.importorskip("aiokafka.record.default_records")
    data = build_control_batch(ControlRecordType.ABORT, 11, 2, coordinator_epoch=3)
    pbatch = aiokafka_records.DefaultRecordBatch(bytearray(data))
    assert pbatch.validate_crc() and pbatch.is_control_batch and pbatch.is_transactional
    (rec,) = list(pbatch)
    assert rec.key == b"\x00\x00\x00\x00" and rec.value == b"\x00\x00\x00\x00\x00\x03"
