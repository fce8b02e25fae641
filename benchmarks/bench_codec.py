"""Codec microbenchmarks: ours against aiokafka's Cython codec and kafka-python.

Not part of the test suite (pytest's testpaths is tests/). Run it through
``./dev bench`` (benchmarks/run.py), which prints the comparison table, or
directly::

    .venv/bin/python -m pytest benchmarks/bench_codec.py -p no:cacheprovider --benchmark-only

Each timed body is checked once for the right result before its numbers count,
so a contender that silently does less work cannot win.
"""
from __future__ import annotations

import os
import struct

import pytest

import contenders as C

_ALL = C.load()
_REVERSE = os.environ.get("BENCH_REVERSE") == "1"


def _order(names):
    # run.py alternates the contender order between passes so slow drift on a
    # shared machine does not always favour the same side.
    return tuple(reversed(names)) if _REVERSE else tuple(names)


RECORDS = C.make_records()
VARINTS = C.make_varints()
CRC_BUF = C.make_crc_buffer()


def _reference_batches():
    """The decode input: one batch per codec, built by aiokafka's builder (the
    same bytes are handed to every contender's reader)."""
    enc = _ALL["aiokafka"].encode or _ALL["kafka-python"].encode
    out = {}
    for codec in C.CODECS:
        data = enc(RECORDS, codec)
        attrs = struct.unpack_from(">h", data, 21)[0]
        assert attrs & 7 == C.CODEC_ID[codec], "reference batch for %s is not compressed" % codec
        out[codec] = data
    return out


BATCHES = _reference_batches()


def _reference_decode(data):
    """kafka-python's pure-Python reader, used only to check outputs."""
    from kafka.record.memory_records import MemoryRecords

    mr = MemoryRecords(data)
    out = []
    attrs = []
    while mr.has_next():
        b = mr.next_batch()
        assert b.validate_crc()
        attrs.append(b.compression_type)
        out.extend((bytes(r.key), bytes(r.value)) for r in b)
    return out, attrs


def _get(name, what):
    c = _ALL[name]
    fn = getattr(c, what) if c.available else None
    if fn is None:
        pytest.skip("%s: %s unavailable (%s)" % (name, what, c.reason or "not provided"))
    return c, fn


def _info(benchmark, case, contender, per, unit, **extra):
    benchmark.group = case
    benchmark.extra_info.update(case=case, contender=contender, per=per, unit=unit, **extra)


@pytest.mark.parametrize("contender", _order(C.CONTENDERS))
@pytest.mark.parametrize("codec", C.CODECS)
def test_encode(benchmark, codec, contender):
    c, encode = _get(contender, "encode")
    _info(benchmark, "encode-" + codec, contender, C.N_RECORDS, "ns/record", label=c.label)
    out = encode(RECORDS, codec)
    recs, attrs = _reference_decode(out)
    assert recs == RECORDS
    assert attrs == [C.CODEC_ID[codec]], "%s did not compress with %s: %r" % (contender, codec, attrs)
    benchmark.extra_info["bytes"] = len(out)
    benchmark(encode, RECORDS, codec)


@pytest.mark.parametrize("contender", _order(C.CONTENDERS))
@pytest.mark.parametrize("codec", C.CODECS)
def test_decode(benchmark, codec, contender):
    c, decode = _get(contender, "decode")
    _info(benchmark, "decode-" + codec, contender, C.N_RECORDS, "ns/record", label=c.label)
    data = BATCHES[codec]
    assert decode(data) == C.N_RECORDS
    benchmark.extra_info["bytes"] = len(data)
    benchmark(decode, data)


@pytest.mark.parametrize("contender", _order(C.CONTENDERS))
def test_varint_encode(benchmark, contender):
    c, enc = _get(contender, "varint_encode")
    _info(benchmark, "varint-encode", contender, C.N_VARINTS, "ns/varint", label=c.label)
    ref = _ALL["kafka-python"].varint_encode(VARINTS)
    assert enc(VARINTS) == ref
    benchmark(enc, VARINTS)


@pytest.mark.parametrize("contender", _order(C.CONTENDERS))
def test_varint_decode(benchmark, contender):
    c, dec = _get(contender, "varint_decode")
    _info(benchmark, "varint-decode", contender, C.N_VARINTS, "ns/varint", label=c.label)
    buf = c.varint_input(_ALL["kafka-python"].varint_encode(VARINTS))
    assert dec(buf, C.N_VARINTS) == sum(VARINTS)
    benchmark(dec, buf, C.N_VARINTS)


@pytest.mark.parametrize("contender", _order(C.CRC_CONTENDERS))
def test_crc32c(benchmark, contender):
    c, crc = _get(contender, "crc32c")
    _info(benchmark, "crc32c-1MiB", contender, 1, "GB/s", label=c.label, nbytes=len(CRC_BUF))
    import crc32c as ref

    assert crc(CRC_BUF) == ref.crc32c(CRC_BUF)
    benchmark(crc, CRC_BUF)


def _crc_paths():
    try:
        from kafka_proto import _crc
    except ImportError:
        return []
    return [p for p in getattr(_crc, "IMPLEMENTATIONS", ()) if p != getattr(_crc, "IMPLEMENTATION", None)]


@pytest.mark.parametrize("path", _crc_paths())
def test_crc32c_path(benchmark, path):
    """Our CRC-32C's other code paths (what older CPUs get), ours only."""
    from kafka_proto._crc import crc32c_using

    _info(benchmark, "crc32c-1MiB-" + path, "ours", 1, "GB/s", label="ours", nbytes=len(CRC_BUF))
    import crc32c as ref

    assert crc32c_using(path, CRC_BUF) == ref.crc32c(CRC_BUF)
    benchmark(crc32c_using, path, CRC_BUF)
