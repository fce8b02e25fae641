"""An independent, pure-Python encoder of RecordBatch v2 written from the format notes,
used by the tests to hand-build batches (golden bytes, hostile variants) without our builder.
"""
from __future__ import annotations

import struct

import crc32c as _crc32c_pkg

MASK64 = (1 << 64) - 1


def uvarint(u: int) -> bytes:
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def varint(n: int) -> bytes:
    """Zigzag varint (64-bit mapping; identical to the 32-bit one for int32 values)."""
    return uvarint(((n << 1) ^ (n >> 63)) & MASK64)


def record_body(offset_delta: int, ts_delta: int, key, value, headers=(), attrs: int = 0) -> bytes:
    out = bytearray([attrs])
    out += varint(ts_delta)
    out += varint(offset_delta)
    for field in (key, value):
        if field is None:
            out += varint(-1)
        else:
            out += varint(len(field)) + field
    out += varint(len(headers))
    for hk, hv in headers:
        hk = hk.encode() if isinstance(hk, str) else hk
        out += varint(len(hk)) + hk
        out += varint(-1) if hv is None else varint(len(hv)) + hv
    return bytes(out)


def record(offset_delta: int, ts_delta: int, key, value, headers=(), attrs: int = 0) -> bytes:
    body = record_body(offset_delta, ts_delta, key, value, headers, attrs)
    return varint(len(body)) + body


def batch(records: bytes, count: int, *, base_offset: int = 0, ple: int = -1, magic: int = 2,
          attributes: int = 0, last_offset_delta: int | None = None, base_ts: int = 0,
          max_ts: int = 0, producer_id: int = -1, producer_epoch: int = -1,
          base_sequence: int = -1, crc: int | None = None, length: int | None = None) -> bytes:
    """Header + records; the CRC-32C (from the crc32c package) and batchLength are computed
    unless given."""
    if last_offset_delta is None:
        last_offset_delta = count - 1
    after_crc = struct.pack(">hiqqqhii", attributes, last_offset_delta, base_ts, max_ts,
                            producer_id, producer_epoch, base_sequence, count) + records
    if crc is None:
        crc = _crc32c_pkg.crc32c(after_crc)
    if length is None:
        length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, length, ple, magic, crc) + after_crc


def recrc(data: bytes) -> bytes:
    """Recompute the CRC of a single v2 batch after a test edited it."""
    crc = _crc32c_pkg.crc32c(data[21:])
    return data[:17] + struct.pack(">I", crc) + data[21:]
