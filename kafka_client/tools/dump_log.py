"""Print the contents of a Kafka log segment file, decoded with kafka_proto.

For a ``.log`` file: one line per record batch (offsets, count, producer id, epoch and
sequences, leader epoch, flags, position, timestamps, size, codec, CRC and whether it
matches), and with ``--records`` one line per record below it (offset, timestamp, key
and value sizes, headers, key and value). For an ``.index`` or ``.timeindex`` file: its
entries. A batch that does not decode ends the dump with the reason, the position and an
exit status of 1, as a truncated or corrupt segment should.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional, TextIO

from kafka_proto.errors import KafkaProtocolError
from kafka_proto.logdir import (
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    decode_offset_index,
    decode_time_index,
    segment_base_offset,
)
from kafka_proto.records import (
    Compression,
    ControlRecordType,
    TimestampType,
    increment_sequence,
    read_batches,
)

__all__ = ["add_arguments", "run", "dump_segment", "dump_index"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a .log, .index or .timeindex file")
    parser.add_argument("--records", action="store_true",
                        help="also print every record of every batch")
    parser.add_argument("--no-crc-check", action="store_true",
                        help="report CRC mismatches instead of stopping at them")


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    path = args.file
    if not os.path.isfile(path):
        print(f"dump-log: {path}: no such file", file=sys.stderr)
        return 2
    print(f"Dumping {path}", file=out)
    try:
        if path.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
            return dump_index(path, out)
        return dump_segment(path, out, records=args.records, check_crc=not args.no_crc_check)
    except ValueError as exc:
        print(f"dump-log: {exc}", file=sys.stderr)
        return 2


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _text(value: Optional[bytes]) -> str:
    if value is None:
        return "null"
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.hex()


def dump_index(path: str, out: TextIO) -> int:
    base_offset = segment_base_offset(path)
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(TIME_INDEX_SUFFIX):
        for timestamp, offset in decode_time_index(data, base_offset):
            print(f"timestamp: {timestamp} offset: {offset}", file=out)
    else:
        for offset, position in decode_offset_index(data, base_offset):
            print(f"offset: {offset} position: {position}", file=out)
    return 0


def dump_segment(path: str, out: TextIO, records: bool = False, check_crc: bool = True) -> int:
    with open(path, "rb") as f:
        data = f.read()
    view = memoryview(data)
    reader = read_batches(view, check_crc=False, allow_truncated=False)
    position = 0
    status = 0
    while True:
        try:
            batch = next(reader)
        except StopIteration:
            break
        except KafkaProtocolError as exc:
            print(f"Found an undecodable batch at position {position}: {exc}", file=out)
            status = 1
            break
        valid = batch.validate_crc()
        _print_batch(batch, position, valid, out)
        if not valid and check_crc:
            print(f"CRC mismatch at position {position}: stopping (--no-crc-check to go on)",
                  file=out)
            status = 1
            break
        if records:
            try:
                _print_records(batch, out)
            except KafkaProtocolError as exc:
                print(f"Found undecodable records in the batch at position {position}: {exc}",
                      file=out)
                status = 1
                break
        position += batch.size
    return status


def _print_batch(batch: Any, position: int, valid: bool, out: TextIO) -> None:
    magic = batch.magic
    ts_name = "LogAppendTime" if batch.timestamp_type == TimestampType.LOG_APPEND_TIME \
        else "CreateTime"
    fields = [
        f"baseOffset: {batch.base_offset}",
        f"lastOffset: {batch.last_offset}",
        f"count: {batch.records_count}",
    ]
    if magic >= 2:
        fields += [
            f"baseSequence: {batch.base_sequence}",
            f"lastSequence: {batch.last_sequence}",
            f"producerId: {batch.producer_id}",
            f"producerEpoch: {batch.producer_epoch}",
            f"partitionLeaderEpoch: {batch.partition_leader_epoch}",
            f"isTransactional: {_flag(batch.is_transactional)}",
            f"isControl: {_flag(batch.is_control)}",
        ]
        if batch.delete_horizon is not None:
            fields.append(f"deleteHorizonMs: {batch.delete_horizon}")
    fields += [
        f"position: {position}",
        f"{ts_name}: {batch.max_timestamp}",
        f"size: {batch.size}",
        f"magic: {magic}",
        f"compresscodec: {Compression(batch.compression).name.lower()}",
        f"crc: {batch.crc}",
        f"isvalid: {_flag(valid)}",
    ]
    print(" ".join(fields), file=out)


def _print_records(batch: Any, out: TextIO) -> None:
    if batch.magic >= 2 and batch.is_control:
        control = batch.control_record()
        for record in batch:
            kind = "unknown" if control is None else _control_name(control.type)
            print(f"| offset: {record.offset} {_ts_name(record)}: {record.timestamp} "
                  f"keySize: {_size(record.key)} valueSize: {_size(record.value)} "
                  f"endTxnMarker: {kind}"
                  + (f" coordinatorEpoch: {control.coordinator_epoch}"
                     if control is not None and control.coordinator_epoch is not None else ""),
                  file=out)
        return
    for i, record in enumerate(batch):
        fields = [f"| offset: {record.offset}", f"{_ts_name(record)}: {record.timestamp}",
                  f"keySize: {_size(record.key)}", f"valueSize: {_size(record.value)}"]
        if batch.magic >= 2:
            seq = batch.base_sequence
            sequence = -1 if seq < 0 else increment_sequence(seq, record.offset - batch.base_offset)
            fields.append(f"sequence: {sequence}")
            fields.append(f"headerKeys: [{','.join(k for k, _ in record.headers)}]")
        fields.append(f"key: {_text(record.key)}")
        fields.append(f"payload: {_text(record.value)}")
        print(" ".join(fields), file=out)


def _ts_name(record: Any) -> str:
    return "LogAppendTime" if record.timestamp_type == TimestampType.LOG_APPEND_TIME \
        else "CreateTime"


def _size(value: Optional[bytes]) -> int:
    return -1 if value is None else len(value)


def _control_name(kind: int) -> str:
    try:
        return ControlRecordType(kind).name
    except ValueError:
        return f"UNKNOWN({kind})"
