"""Workloads and contender adapters for the codec benchmarks.

Every contender is wrapped in a plain function with the same shape so the timed
bodies in ``bench_codec.py`` compare like with like:

* ``encode(records, codec) -> bytes``: append every record one by one, then build.
* ``decode(data) -> int``: walk every batch, check its CRC the way that library's
  consumer does by default, and materialise each record's key and value as bytes.
* ``varint_encode(values) -> bytes`` / ``varint_decode(buf, n) -> int``.
* ``crc32c(buf) -> int``.

A contender that cannot be imported is reported as unavailable (with the reason)
instead of failing the run, so the peer side works before our modules land.
"""
from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

N_RECORDS = 1000
VALUE_SIZE = 100
KEY_SIZE = 8
TIMESTAMP_MS = 1_763_700_000_000  # fixed, so no contender pays for a clock read
N_VARINTS = 1000
CRC_SIZE = 1 << 20

# The peers' builders have no level knob and hard-code: aiokafka gzip 9, lz4 9 (HC), zstd 3;
# kafka-python gzip 9, lz4 fast, zstd 3; both snappy in xerial framing. Ours runs at
# aiokafka's levels by default (BENCH_OUR_LEVELS=peer) so the encode ratios against the main
# peer compare codecs and framing rather than level choices; run.py --our-levels default
# measures our library defaults instead.
OUR_LEVELS = {"gzip": 9, "lz4": 9, "zstd": 3}
PEER_LEVELS_NOTE = ("peer compression levels (hard-coded): aiokafka gzip 9, lz4 9, zstd 3; "
                    "kafka-python gzip 9, lz4 fast, zstd 3; snappy xerial-framed in both")

CODECS: Tuple[str, ...] = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_ID = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CONTENDERS: Tuple[str, ...] = ("ours", "aiokafka", "kafka-python")
CRC_CONTENDERS: Tuple[str, ...] = ("ours", "crc32c", "aiokafka")

_WORDS = (
    b"kafka", b"record", b"batch", b"topic", b"partition", b"offset", b"leader",
    b"broker", b"consumer", b"producer", b"commit", b"fetch", b"produce",
    b"sensor", b"temperature", b"22.5", b"18.1", b"ok", b"warn", b"user",
    b"order", b"id", b"status", b"shipped", b"paid", b"eu-west", b"us-east",
)


def make_records(n: int = N_RECORDS, seed: int = 7) -> List[Tuple[bytes, bytes]]:
    """``n`` (key, value) pairs: 8-byte keys, 100-byte text-like values.

    The values are drawn from a small vocabulary so that every codec actually
    compresses them (about 3x); random bytes would make the peers' builders fall
    back to an uncompressed batch and the compressed cases would measure nothing.
    """
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        key = b"k%07d" % i
        parts: List[bytes] = []
        size = 0
        while size <= VALUE_SIZE:
            w = rnd.choice(_WORDS)
            if rnd.random() < 0.3:
                w = b"%d" % rnd.randrange(1_000_000)
            parts.append(w)
            size += len(w) + 1
        value = b" ".join(parts)[:VALUE_SIZE]
        assert len(key) == KEY_SIZE and len(value) == VALUE_SIZE
        out.append((key, value))
    return out


def make_varints(n: int = N_VARINTS, seed: int = 11) -> List[int]:
    """Signed ints with the size mix record fields have: mostly 1-2 byte varints
    (offset deltas, lengths), some 3-byte, a few 5-byte (timestamp deltas)."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        r = rnd.random()
        if r < 0.4:
            bound = 1 << 6
        elif r < 0.7:
            bound = 1 << 13
        elif r < 0.9:
            bound = 1 << 20
        else:
            bound = 1 << 31
        out.append(rnd.randrange(-bound, bound))
    return out


def make_crc_buffer(size: int = CRC_SIZE, seed: int = 3) -> bytes:
    return random.Random(seed).randbytes(size)


@dataclass
class Contender:
    name: str
    label: str
    available: bool
    reason: str = ""
    encode: Optional[Callable[[Sequence[Tuple[bytes, bytes]], str], bytes]] = None
    decode: Optional[Callable[[bytes], int]] = None
    varint_encode: Optional[Callable[[Sequence[int]], bytes]] = None
    varint_decode: Optional[Callable[[bytes, int], int]] = None
    crc32c: Optional[Callable[[bytes], int]] = None
    encode_bulk: Optional[Callable[[Sequence[bytes], Sequence[bytes], str], bytes]] = None
    varint_input: Callable[[bytes], object] = bytes  # buffer type the decoder expects
    notes: List[str] = field(default_factory=list)


# --------------------------------------------------------------------------- aiokafka

def _aiokafka() -> Contender:
    try:
        from aiokafka.record import util as autil
        from aiokafka.record.default_records import DefaultRecordBatchBuilder
        from aiokafka.record.memory_records import MemoryRecords
    except Exception as exc:  # pragma: no cover - depends on the environment
        return Contender("aiokafka", "aiokafka", False, repr(exc))

    cython = DefaultRecordBatchBuilder.__module__.startswith("aiokafka.record._crecords")
    c = Contender("aiokafka", "aiokafka (Cython)" if cython else "aiokafka (PURE PYTHON)", True)
    c.notes.append(
        "aiokafka: %s, %s, varint %s"
        % (DefaultRecordBatchBuilder.__module__, MemoryRecords.__module__,
           getattr(autil.encode_varint, "__name__", "?"))
    )

    def encode(records, codec, _B=DefaultRecordBatchBuilder, _ts=TIMESTAMP_MS):
        b = _B(2, CODEC_ID[codec], 0, -1, -1, -1, 1 << 30)
        append = b.append
        i = 0
        for key, value in records:
            append(i, _ts, key, value, [])
            i += 1
        return b.build()  # bytearray, sent as is

    def decode(data, _M=MemoryRecords):
        mr = _M(data)
        n = 0
        while mr.has_next():
            batch = mr.next_batch()
            if not batch.validate_crc():  # aiokafka's consumer does this (check_crcs=True)
                raise ValueError("crc")
            for rec in batch:
                rec.key
                rec.value
                n += 1
        return n

    enc_v = autil.encode_varint
    dec_v = autil.decode_varint

    def varint_encode(values, _enc=enc_v):
        buf = bytearray()
        w = buf.append
        for v in values:
            _enc(v, w)
        return bytes(buf)

    def varint_decode(buf, n, _dec=dec_v):
        # aiokafka's decoder is typed for bytearray (that is what its reader passes)
        pos = 0
        s = 0
        for _ in range(n):
            v, pos = _dec(buf, pos)
            s += v
        return s

    c.encode, c.decode = encode, decode
    c.varint_encode, c.varint_decode = varint_encode, varint_decode
    c.crc32c = autil.calc_crc32c
    c.varint_input = bytearray
    return c


# --------------------------------------------------------------------------- kafka-python

def _kafka_python() -> Contender:
    try:
        from kafka.record import util as kutil
        from kafka.record.default_records import DefaultRecordBatchBuilder
        from kafka.record.memory_records import MemoryRecords
    except Exception as exc:  # pragma: no cover
        return Contender("kafka-python", "kafka-python", False, repr(exc))

    c = Contender("kafka-python", "kafka-python", True)

    def encode(records, codec, _B=DefaultRecordBatchBuilder, _ts=TIMESTAMP_MS):
        b = _B(2, CODEC_ID[codec], 0, -1, -1, -1, 1 << 30)
        append = b.append
        i = 0
        for key, value in records:
            append(i, _ts, key, value, [])
            i += 1
        return b.build()  # bytearray, sent as is

    def decode(data, _M=MemoryRecords):
        mr = _M(data)
        n = 0
        while mr.has_next():
            batch = mr.next_batch()
            if not batch.validate_crc():  # kafka-python's fetcher: check_crcs=True
                raise ValueError("crc")
            for rec in batch:
                rec.key
                rec.value
                n += 1
        return n

    def varint_encode(values, _enc=kutil.encode_varint):
        buf = bytearray()
        w = buf.append
        for v in values:
            _enc(v, w)
        return bytes(buf)

    def varint_decode(buf, n, _dec=kutil.decode_varint):
        pos = 0
        s = 0
        for _ in range(n):
            v, pos = _dec(buf, pos)
            s += v
        return s

    c.encode, c.decode = encode, decode
    c.varint_encode, c.varint_decode = varint_encode, varint_decode
    c.crc32c = kutil.calc_crc32c
    c.varint_input = bytearray
    return c


# --------------------------------------------------------------------------- crc32c package

def _crc32c_pkg() -> Contender:
    try:
        import crc32c as pkg
    except Exception as exc:  # pragma: no cover
        return Contender("crc32c", "crc32c pkg", False, repr(exc))
    c = Contender("crc32c", "crc32c pkg", True)
    c.crc32c = pkg.crc32c
    c.notes.append("crc32c package: hardware_based=%s" % getattr(pkg, "hardware_based", "?"))
    return c


# --------------------------------------------------------------------------- ours

def _ours() -> Contender:
    c = Contender("ours", "ours", True)
    missing = []
    try:
        from kafka_proto.records import Compression, RecordBatchBuilder, read_batches

        comp = {
            "none": Compression.NONE, "gzip": Compression.GZIP,
            "snappy": Compression.SNAPPY, "lz4": Compression.LZ4, "zstd": Compression.ZSTD,
        }

        levels = OUR_LEVELS if os.environ.get("BENCH_OUR_LEVELS", "peer") == "peer" else {}
        c.notes.append("ours: compression levels %s" % (
            ", ".join("%s %s" % kv for kv in levels.items()) or "library defaults",))

        def encode(records, codec, _B=RecordBatchBuilder, _ts=TIMESTAMP_MS, _comp=comp,
                   _levels=levels):
            b = _B(compression=_comp[codec], compression_level=_levels.get(codec))
            append = b.append
            for key, value in records:
                append(value, key, _ts)
            return bytes(b.build(0))

        def encode_bulk(values, keys, codec, _B=RecordBatchBuilder, _ts=TIMESTAMP_MS,
                        _comp=comp, _levels=levels):
            # Informational: our append_many() over a list of values and one of keys (no
            # Python call per record); the peers have no such API.
            b = _B(compression=_comp[codec], compression_level=_levels.get(codec))
            b.append_many(values, keys, _ts)
            return b.build(0)

        def decode(data, _read=read_batches):
            # Same loop as the peers': the key and value are bytes already.
            n = 0
            for batch in _read(data, check_crc=True):
                for rec in batch:
                    rec.key
                    rec.value
                    n += 1
            return n

        def decode_views(data, _read=read_batches, _bytes=bytes):
            # Used only if the reader hands out zero-copy views instead of bytes:
            # materialise them so the comparison stays fair.
            n = 0
            for batch in _read(data, check_crc=True):
                for rec in batch:
                    k = rec.key
                    v = rec.value
                    if k is not None:
                        k = _bytes(k)
                    if v is not None:
                        v = _bytes(v)
                    n += 1
            return n

        probe = RecordBatchBuilder()
        probe.append(b"v", b"k", TIMESTAMP_MS)
        rec = next(iter(next(iter(read_batches(probe.build(0))))))
        if type(rec.key) is not bytes or type(rec.value) is not bytes:
            decode = decode_views
            c.notes.append("ours: records hand out %s, decode materialises them as bytes"
                           % type(rec.value).__name__)

        c.encode, c.decode = encode, decode
        if hasattr(RecordBatchBuilder, "append_many"):
            c.encode_bulk = encode_bulk
    except Exception as exc:
        missing.append("records: %r" % (exc,))

    try:
        from kafka_proto import wire

        c.varint_encode, c.varint_decode = _wire_adapters(wire)
    except Exception as exc:
        missing.append("wire: %r" % (exc,))

    try:
        from kafka_proto.crc import crc32c

        c.crc32c = crc32c
    except Exception as exc:
        missing.append("crc: %r" % (exc,))

    if missing:
        c.reason = "; ".join(missing)
    if not (c.encode or c.varint_encode or c.crc32c):
        c.available = False
    return c


def _wire_adapters(wire):
    """Varint adapters over kafka_proto.wire's module functions, in the peers' loop shape:
    ``encode_varint(v) -> bytes`` appended to one bytearray (the peers call ``write`` per
    byte into one), ``decode_varint(buf, pos) -> (value, next_pos)`` like theirs."""
    enc_v = wire.encode_varint
    dec_v = wire.decode_varint

    def varint_encode(values, _enc=enc_v):
        buf = bytearray()
        for v in values:
            buf += _enc(v)
        return bytes(buf)

    def varint_decode(buf, n, _dec=dec_v):
        pos = 0
        s = 0
        for _ in range(n):
            v, pos = _dec(buf, pos)
            s += v
        return s

    return varint_encode, varint_decode


def call_floor() -> Optional[Callable[[Sequence[Tuple[bytes, bytes]]], int]]:
    """The encode loop of ``ours`` against a do-nothing Cython ``append`` (benchmarks/_floor.pyx,
    compiled on first use with pyximport): the cost of the Python loop and the call alone.
    None if it cannot be compiled here."""
    try:
        import pyximport

        pyximport.install(language_level=3, inplace=False,
                          build_dir=os.path.join(ROOT, "build", "bench-pyximport"))
        import _floor  # noqa: E402  (benchmarks/ is on sys.path)
    except Exception:
        return None

    def encode(records, _B=_floor.NoopBuilder, _ts=TIMESTAMP_MS):
        b = _B()
        append = b.append
        for key, value in records:
            append(value, key, _ts)
        return b.build(0)

    return encode


def load() -> Dict[str, Contender]:
    return {c.name: c for c in (_ours(), _aiokafka(), _kafka_python(), _crc32c_pkg())}
