"""Control records: the transaction markers (ABORT/COMMIT) and the KRaft record types.

A control batch (attribute bit 5) holds one control record. Its key is 4 bytes: int16
version, int16 type. ABORT and COMMIT carry an end-transaction marker value: int16 version,
int32 coordinator epoch. Other types are parsed to their type only (their values are KRaft
metadata messages that clients never need).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Optional

from kafka_proto.errors import CorruptRecordError

__all__ = [
    "ControlRecordType",
    "ControlRecord",
    "parse_control_record",
    "encode_control_key",
    "encode_end_txn_marker",
    "build_control_batch",
]

_KEY = struct.Struct(">hh")
_MARKER = struct.Struct(">hi")


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@dataclass(frozen=True)
class ControlRecord:
    """A decoded control record.

    type: the raw type number (compare with ControlRecordType; unknown types are kept as
    numbers so callers can skip them). version: the key's version. coordinator_epoch: for
    ABORT/COMMIT markers, else None. value: the raw value bytes.
    """

    type: int
    version: int
    coordinator_epoch: Optional[int] = None
    value: Optional[bytes] = None

    @property
    def is_abort(self) -> bool:
        return self.type == ControlRecordType.ABORT

    @property
    def is_commit(self) -> bool:
        return self.type == ControlRecordType.COMMIT

    @property
    def is_known(self) -> bool:
        return self.type in ControlRecordType._value2member_map_


def parse_control_record(key: Optional[bytes], value: Optional[bytes]) -> ControlRecord:
    """Decode a control record's key and value; raise CorruptRecordError if malformed.

    Versions above 0 are read as version 0 (only the known prefix is interpreted).
    """
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(
            f"control record key must be at least {_KEY.size} bytes, got "
            f"{'null' if key is None else len(key)}")
    version, ctype = _KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptRecordError(f"control record key has negative version {version}")
    epoch = None
    if ctype in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        if value is None or len(value) < _MARKER.size:
            raise CorruptRecordError(
                f"transaction marker value must be at least {_MARKER.size} bytes, got "
                f"{'null' if value is None else len(value)}")
        marker_version, epoch = _MARKER.unpack_from(value, 0)
        if marker_version < 0:
            raise CorruptRecordError(
                f"transaction marker has negative version {marker_version}")
    return ControlRecord(int(ctype), version, epoch,
                         None if value is None else bytes(value))


def encode_control_key(ctype: int, version: int = 0) -> bytes:
    """The 4-byte key of a control record."""
    return _KEY.pack(version, ctype)


def encode_end_txn_marker(coordinator_epoch: int, version: int = 0) -> bytes:
    """The value of an ABORT/COMMIT marker."""
    return _MARKER.pack(version, coordinator_epoch)


def build_control_batch(ctype: int, producer_id: int, producer_epoch: int,
                        coordinator_epoch: int = 0, *, base_offset: int = 0,
                        timestamp: Optional[int] = None,
                        partition_leader_epoch: int = -1) -> bytes:
    """A transaction marker batch as a broker writes it: transactional + control bits, no
    compression, the producer's id/epoch, base sequence -1, one control record."""
    from kafka_proto.records._v2 import RecordBatchBuilder

    if ctype not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise ValueError("build_control_batch writes ABORT or COMMIT markers only")
    b = RecordBatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                           base_sequence=-1, transactional=True,
                           partition_leader_epoch=partition_leader_epoch, control=True)
    b.append(encode_end_txn_marker(coordinator_epoch), key=encode_control_key(ctype),
             timestamp=timestamp)
    return b.build(base_offset)
