"""Minimal inputs for what the fuzz harnesses found (docs/fuzzing.md, "Findings").

A defect that is not fixed yet is marked ``xfail(strict=True)`` with the reason: the test
starts passing when the defect is fixed, and strict mode then fails it so that the marker
is removed.
"""
from __future__ import annotations

import struct
import zlib

import pytest

from kafka_proto._crc import crc32c
from kafka_proto.errors import DecompressionLimitError, KafkaProtocolError
from kafka_proto.records import ColumnBuilder, read_batches


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _record(offset_delta: int, value: bytes = b"v", headers: bytes = b"\x00") -> bytes:
    """One v2 record: no key, ``value``, ``headers`` as raw bytes (count first)."""
    body = (b"\x00" + _varint(0) + _varint(offset_delta) + _varint(-1) + _varint(len(value))
            + value + headers)
    return _varint(len(body)) + body


def _batch(base_offset: int, records, last_offset_delta: int) -> bytes:
    """An uncompressed v2 batch with a correct CRC around the given record bytes."""
    after_crc = struct.pack(">hiqqqhii", 0, last_offset_delta, 0, 0, -1, -1, -1,
                            len(records)) + b"".join(records)
    body = struct.pack(">ibI", 0, 2, crc32c(after_crc)) + after_crc
    return struct.pack(">qi", base_offset, len(body)) + body


def _legacy_message(offset: int, value: bytes, attrs: int = 0) -> bytes:
    """A magic 1 log entry without key, timestamp 0."""
    body = struct.pack(">bBq", 1, attrs, 0) + struct.pack(">i", -1) \
        + struct.pack(">i", len(value)) + value
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def _chunk(raw: bytes, start: int):
    from kafka_client.consumer.fetcher import Chunk, PartitionState

    batches = list(read_batches(raw))
    return Chunk(PartitionState("t", 0), 0, batches, start, None, len(raw),
                 sum(b.records_count for b in batches))


def _objects(chunk):
    """(offsets, error type) of the poll()/consume() path."""
    from kafka_client.consumer.decode import decode_chunk

    out: list = []
    err = None
    try:
        decode_chunk(chunk, out)
    except KafkaProtocolError as exc:
        err = type(exc)
    return [m.offset() for m in out], err


def _columns(chunk):
    """(offsets, error type) of the consume_arrow() path."""
    from kafka_client.consumer.decode import decode_columns

    cols = ColumnBuilder(1, 2)
    err = None
    try:
        decode_columns(chunk, cols, 1000)
    except KafkaProtocolError as exc:
        err = type(exc)
    rows = cols.finish()
    return list(struct.unpack(f"<{rows['rows']}q", rows["offset"])), err


# A batch at base offset 10 whose records' offset deltas go 0, 5, 3: offsets 10, 15, 13.
DECREASING_OFFSETS = _batch(10, [_record(0), _record(5), _record(3)], 5)


def test_consumer_offsets_strictly_increase_within_a_batch():
    for path in (_objects, _columns):
        offsets, _err = path(_chunk(DECREASING_OFFSETS, 10))
        assert offsets == sorted(set(offsets)), (path.__name__, offsets)


# Record 0 has a header count of -1; the chunk starts at offset 1 (a position inside the
# batch, as after a seek or when consume_arrow resumes a chunk).
BAD_HEADERS_BEFORE_START = _batch(0, [_record(0, headers=_varint(-1)), _record(1),
                                      _record(2)], 2)


def test_objects_and_columns_agree_on_a_bad_record_before_the_start():
    chunk = _chunk(BAD_HEADERS_BEFORE_START, 1)
    assert _objects(chunk) == _columns(_chunk(BAD_HEADERS_BEFORE_START, 1))


def test_bad_record_before_the_start_fails_both_paths():
    for start in (0, 1):
        assert _objects(_chunk(BAD_HEADERS_BEFORE_START, start))[1] is not None
        assert _columns(_chunk(BAD_HEADERS_BEFORE_START, start))[1] is not None


def _legacy_bomb() -> bytes:
    """A magic 1 gzip wrapper of 8 messages of 100 kB each: about 800 kB decompressed."""
    from kafka_proto.compression import compress

    inner = b"".join(_legacy_message(i, b"x" * 100_000) for i in range(8))
    return _legacy_message(7, compress(1, inner), attrs=1)


def test_read_batches_caps_legacy_wrappers():
    with pytest.raises(DecompressionLimitError):
        list(read_batches(_legacy_bomb(), max_decompressed_size=64 * 1024))


def test_legacy_reader_applies_a_cap_it_is_given():
    from kafka_proto.records._legacy import read_legacy_entry

    bomb = _legacy_bomb()
    assert len(bomb) < 4096
    with pytest.raises(DecompressionLimitError):
        read_legacy_entry(bomb, 0, len(bomb), True, 64 * 1024)
    batch, end = read_legacy_entry(bomb, 0, len(bomb), True, 1 << 20)
    assert end == len(bomb) and batch.records_count == 8


def test_client_fetch_loop_on_a_response_without_the_partition():
    """client harness, 10-minute run of 2026-11-24: a FetchResponse with no topics made
    kafka_client._testing.simple.fetch_once raise IndexError; now BrokerErrorResponse."""
    import base64

    import fuzz_harnesses

    data = base64.b64decode("AP8AAAABAAAAAAAKLS1mdXp6LS0K3QIAAAAAAAA=")
    fuzz_harnesses.check_client_all(data)  # only documented errors escape


def test_static_member_against_a_coordinator_without_join_group_v5():
    """group harness, first atheris run (2026-11-28): a static member (group.instance.id)
    whose coordinator negotiated JoinGroup v0 built a JoinGroupRequest that cannot be
    encoded (the instance id exists from v5): the connection failed it as _INVALID_ARG,
    reported every second. Now the member refuses such a coordinator once, with a fatal
    _UNSUPPORTED_FEATURE, and sends nothing it cannot encode."""
    import fuzz_harnesses
    from kafka_proto.messages import FindCoordinatorResponse

    found = FindCoordinatorResponse(error_code=0, node_id=1, host="127.0.0.1", port=9092)
    data = (b"\x02" + struct.pack(">hB", 10, 0) + found.encode(0) + fuzz_harnesses.SEGMENT_SEP
            + struct.pack(">hB", 11, 0) + b"")
    fuzz_harnesses.check_group(data)


def test_a_batch_whose_last_offset_leaves_no_next_offset_is_corrupt():
    """consumer harness, atheris run of 2026-11-28: a v2 batch at base offset 2^63-1 made
    the fetcher's next position 2^63, which then reached a Message (OverflowError on the
    I/O thread, no event for the application) and would have gone into a Fetch request.
    Now such a batch (and a legacy message at offset 2^63-1) is a CorruptRecordError."""
    import base64

    import fuzz_harnesses
    from kafka_proto.errors import CorruptRecordError

    top = (1 << 63) - 1
    with pytest.raises(CorruptRecordError, match="no next offset"):
        list(read_batches(_batch(top, [_record(0)], 0)))
    with pytest.raises(CorruptRecordError, match="no next offset"):
        list(read_batches(_batch(top - 2, [_record(0), _record(1), _record(2)], 2)))
    (ok,) = read_batches(_batch(top - 3, [_record(0), _record(1), _record(2)], 2))
    assert ok.last_offset == top - 1
    with pytest.raises(CorruptRecordError, match="no next offset"):
        list(read_batches(_legacy_message(top, b"v")))
    fuzz_harnesses.check_consumer(base64.b64decode(
        "AAc2AQAAAAAAAAABABNjZnotdHhuLW5vbmUtODNlYzA3AAAAAQAAAAAAAAAAAAAAAAALAAAAAAAAAAsAAAAB"
        "AAAAAAAAA+kAAAAAAAAABAAAAfAAAAAAAAAAAAAAAIUAAAAAAjQQ/SEAEAAAAAIAAAGiDO98wgAAAaIM73zC"
        "AAAAAAAAA+kAAAAAAAAAAAADNgAAAARrMBJjMCBjMCBjMCAEBnR4bgJjAmkCMDYAAAIEazESYzEgYzEgYzEg"
        "BAZ0eG4CYwJpAjE2AAAEBGsyEmMyIGMyIGMyIAQGdHhuAmMCaQIyAAAAAAAAAAMAAABCAAAAAALPX89rADAA"
        "AAAAAAABogzvfMMAAAGiDO98wwAAAAAAAAPpAAD/////AAAAASAAAAAIAAAAAQwAAAAAAAAAf/////////8A"
        "AABCAAAAAALXwC7YADAAAAAAAAABogzvfMUAAAGiDO98xQAAAAAAAAPpAAD/////AAAAASAAAAAIAAAAAAwA"
        "AAAAAAAAAAAAAAAAAAgAAABpAAAAAAIM3aoGABAAAAABAAABogzvfMUAAAGiDO98xQAAAAAAAAPpAAAAAAAG"
        "AAAAAjUAAAAEazASZDAgZDAgZDAgBAZ0eG4CZAJpAjA2AAACBGsxEmQxIGQxIGQxIAQGdHhuAmQCaQIxAAAA"
        "AAAAAAoAAABCAAAAAALXWFgVADAAAAAAAAABogzvfMYAAAGiDO98xgAAAAAAAAPpAAD/////AAAAASAAAAAI"
        "AAAAAQwAAAAAAAAA"))


def test_a_local_error_code_from_the_broker_is_not_a_local_event():
    """consumer harness, atheris run of 2026-11-28: a Fetch answer whose partition error
    code is -191 (librdkafka's local _PARTITION_EOF, never a broker code) became a
    _PARTITION_EOF event, with enable.partition.eof off. Codes below -1 from the wire are
    now UNKNOWN_SERVER_ERROR (kafka_client.errors.broker_code), in the fetcher and in the
    producer's Produce answers."""
    import fuzz_harnesses
    from kafka_client.errors import KafkaError, broker_code
    from kafka_proto.messages import FetchResponse as R

    answer = R(responses=[R.FetchableTopicResponse(topic="t", partitions=[
        R.PartitionData(partition_index=0, error_code=KafkaError._PARTITION_EOF,
                        high_watermark=0, last_stable_offset=0, aborted_transactions=[],
                        records=b"")])])
    fuzz_harnesses.check_consumer(bytes([0, 0, 0, 0]) + answer.encode(4))  # FetchResponse v4
    assert broker_code(KafkaError._TRANSPORT) == KafkaError.UNKNOWN_SERVER_ERROR == -1
    assert [broker_code(c) for c in (-1, 0, 3, 999)] == [-1, 0, 3, 999]


def test_a_late_offsets_answer_is_not_the_next_transactions_outcome():
    """transactions harness, first minute of the built-in mutator (2026-12-01): one
    AddPartitionsToTxn answer leaving partition 1 out (index 32769) failed the first
    transaction while its TxnOffsetCommit waited for the group coordinator's lookup; after
    the abort that TxnOffsetCommit went out, and its answer completed the second
    transaction's send_offsets_to_transaction() before that call's own AddOffsetsToTxn."""
    import fuzz_harnesses

    data = bytes.fromhex("6500180300000000000202740300000000000000000080010000000000")
    fuzz_harnesses.check_transactions(data)
