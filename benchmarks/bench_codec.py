"""Codec microbenchmarks: ours against aiokafka's Cython codec and kafka-python.

Not part of the test suite (pytest's testpaths is tests/). Run it through
``./dev bench`` (benchmarks/run.py), which prints the comparison table, or
directly::

    .venv/bin/python -m pytest benchmarks/bench_codec.py -p no:cacheprovider --benchmark-only

One test per case. The contenders of a case are interleaved round by round
(each round times every contender once, the starting contender rotating), so
load from other processes on a shared machine hits all of them alike; the
per-contender samples go to the test's ``extra_info["samples"]`` and run.py
takes their medians. pytest-benchmark drives the rounds (``pedantic``) and its
options set the budget: ``--benchmark-max-time`` per contender,
``--benchmark-min-rounds``, ``--benchmark-warmup-iterations`` and
``--benchmark-timer``.

Each contender's output is checked once before timing, so one that silently
does less work cannot win.
"""
from __future__ import annotations

import importlib
import math
import os
import struct

import pytest

import contenders as C

_ALL = C.load()
_REVERSE = os.environ.get("BENCH_REVERSE") == "1"
_MAX_ROUNDS = 2000
_MIN_SAMPLE = 1e-3  # seconds: short bodies are repeated inside one sample up to this, so
# the cache and heap disturbance left by the previous contender is amortised

RECORDS = C.make_records()
VARINTS = C.make_varints()
CRC_BUF = C.make_crc_buffer()


def _reference_batches():
    """The decode input: one batch per codec, built by aiokafka's builder (the
    same bytes are handed to every contender's reader)."""
    enc = _ALL["aiokafka"].encode or _ALL["kafka-python"].encode
    out = {}
    for codec in C.CODECS:
        data = bytes(enc(RECORDS, codec))
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


def _load_timer(name):
    mod, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(mod), attr)


def _interleaved(benchmark, request, case, unit, per, bodies, labels, **extra):
    """Time ``bodies`` ({contender: zero-arg callable}) round-robin.

    Stores per-contender samples (seconds per call) in extra_info; pytest-benchmark's own
    stats for the test are those of whole rounds and are not used by run.py."""
    cfg = request.config
    timer = _load_timer(str(cfg.getoption("benchmark_timer")))
    max_time = float(cfg.getoption("benchmark_max_time"))
    min_rounds = int(cfg.getoption("benchmark_min_rounds"))
    warm = int(cfg.getoption("benchmark_warmup_iterations") or 0)
    names = list(bodies)
    if _REVERSE:
        names.reverse()
    fns = [bodies[n] for n in names]

    # Warm-up, then one timing per contender to size the rounds.
    inner = []
    single = []
    for fn in fns:
        for _ in range(min(warm, 50)):
            fn()
        t0 = timer()
        fn()
        t = max(timer() - t0, 1e-7)
        single.append(t)
        inner.append(max(1, int(math.ceil(_MIN_SAMPLE / t))))
    per_round = sum(s * k for s, k in zip(single, inner))
    rounds = int(max(min_rounds, min(_MAX_ROUNDS, max_time * len(fns) / per_round)))

    samples = {n: [] for n in names}
    state = {"r": 0}
    k = len(fns)

    def one_round():
        r = state["r"]
        state["r"] = r + 1
        for j in range(k):
            i = (r + j) % k  # rotate who goes first
            fn, n = fns[i], inner[i]
            t0 = timer()
            for _ in range(n):
                fn()
            samples[names[i]].append((timer() - t0) / n)

    benchmark.group = case
    benchmark.extra_info.update(case=case, unit=unit, per=per, labels=labels,
                                inner_iterations=dict(zip(names, inner)), **extra)
    benchmark.pedantic(one_round, rounds=rounds, iterations=1, warmup_rounds=0)
    benchmark.extra_info["samples"] = samples


def _available(what, names):
    out = {}
    for n in names:
        c = _ALL[n]
        fn = getattr(c, what) if c.available else None
        if fn is not None:
            out[n] = c
    if not out:
        pytest.skip("no contender provides %s" % what)
    return out


@pytest.mark.parametrize("codec", C.CODECS)
def test_encode(benchmark, request, codec):
    cs = _available("encode", C.CONTENDERS)
    sizes = {}
    for n, c in cs.items():
        out = c.encode(RECORDS, codec)
        recs, attrs = _reference_decode(out)
        assert recs == RECORDS, n
        assert attrs == [C.CODEC_ID[codec]], "%s did not compress with %s: %r" % (n, codec, attrs)
        sizes[n] = len(out)
    bodies = {n: (lambda e=c.encode: e(RECORDS, codec)) for n, c in cs.items()}
    _interleaved(benchmark, request, "encode-" + codec, "ns/record", C.N_RECORDS, bodies,
                 {n: c.label for n, c in cs.items()}, bytes=sizes)


def test_encode_bulk(benchmark, request):
    """Informational row: ours through append_many() (given a list of values and a list of
    keys, split from the records outside the timed body) against the peers' one-by-one
    appends."""
    ours = _ALL["ours"]
    if not (ours.available and ours.encode_bulk):
        pytest.skip("ours: append_many unavailable")
    aio = _ALL["aiokafka"]
    values = [v for _, v in RECORDS]
    keys = [k for k, _ in RECORDS]
    recs, _ = _reference_decode(ours.encode_bulk(values, keys, "none"))
    assert recs == RECORDS
    bodies = {"ours": lambda: ours.encode_bulk(values, keys, "none")}
    labels = {"ours": "ours"}
    if aio.available:
        bodies["aiokafka"] = lambda: aio.encode(RECORDS, "none")
        labels["aiokafka"] = aio.label
    _interleaved(benchmark, request, "encode-none-append_many", "ns/record", C.N_RECORDS,
                 bodies, labels)


def test_encode_call_floor(benchmark, request):
    """Informational row: our encode loop against a do-nothing Cython append() with the same
    signature, i.e. what the Python loop and the call cost before any encoding happens."""
    floor = C.call_floor()
    ours = _ALL["ours"]
    if floor is None or not (ours.available and ours.encode):
        pytest.skip("call floor cannot be compiled here, or ours is unavailable")
    assert floor(RECORDS) == C.N_RECORDS
    bodies = {"ours": lambda: ours.encode(RECORDS, "none"),
              "floor": lambda: floor(RECORDS)}
    labels = {"ours": "ours", "floor": "no-op append"}
    aio = _ALL["aiokafka"]
    if aio.available:
        bodies["aiokafka"] = lambda: aio.encode(RECORDS, "none")
        labels["aiokafka"] = aio.label
    _interleaved(benchmark, request, "encode-none-call_floor", "ns/record", C.N_RECORDS,
                 bodies, labels)


@pytest.mark.parametrize("codec", C.CODECS)
def test_decode(benchmark, request, codec):
    cs = _available("decode", C.CONTENDERS)
    data = BATCHES[codec]
    for n, c in cs.items():
        assert c.decode(data) == C.N_RECORDS, n
    bodies = {n: (lambda d=c.decode: d(data)) for n, c in cs.items()}
    _interleaved(benchmark, request, "decode-" + codec, "ns/record", C.N_RECORDS, bodies,
                 {n: c.label for n, c in cs.items()}, input_bytes=len(data))


def test_varint_encode(benchmark, request):
    cs = _available("varint_encode", C.CONTENDERS)
    ref = _ALL["kafka-python"].varint_encode(VARINTS)
    for n, c in cs.items():
        assert c.varint_encode(VARINTS) == ref, n
    bodies = {n: (lambda e=c.varint_encode: e(VARINTS)) for n, c in cs.items()}
    _interleaved(benchmark, request, "varint-encode", "ns/varint", C.N_VARINTS, bodies,
                 {n: c.label for n, c in cs.items()})


def test_varint_decode(benchmark, request):
    cs = _available("varint_decode", C.CONTENDERS)
    enc = _ALL["kafka-python"].varint_encode(VARINTS)
    bodies = {}
    for n, c in cs.items():
        buf = c.varint_input(enc)
        assert c.varint_decode(buf, C.N_VARINTS) == sum(VARINTS), n
        bodies[n] = (lambda d=c.varint_decode, b=buf: d(b, C.N_VARINTS))
    _interleaved(benchmark, request, "varint-decode", "ns/varint", C.N_VARINTS, bodies,
                 {n: c.label for n, c in cs.items()})


def test_crc32c(benchmark, request):
    import crc32c as ref

    cs = _available("crc32c", C.CRC_CONTENDERS)
    want = ref.crc32c(CRC_BUF)
    for n, c in cs.items():
        assert c.crc32c(CRC_BUF) == want, n
    bodies = {n: (lambda f=c.crc32c: f(CRC_BUF)) for n, c in cs.items()}
    _interleaved(benchmark, request, "crc32c-1MiB", "GB/s", 1, bodies,
                 {n: c.label for n, c in cs.items()}, nbytes=len(CRC_BUF))


def _crc_paths():
    try:
        from kafka_proto import crc
    except ImportError:
        return []
    return [p for p in crc.IMPLEMENTATIONS if p != crc.IMPLEMENTATION]


@pytest.mark.parametrize("path", _crc_paths())
def test_crc32c_path(benchmark, request, path):
    """Our CRC-32C's other code paths (what older CPUs get), ours only."""
    import crc32c as ref
    from kafka_proto.crc import crc32c_using

    assert crc32c_using(path, CRC_BUF) == ref.crc32c(CRC_BUF)
    _interleaved(benchmark, request, "crc32c-1MiB-" + path, "GB/s", 1,
                 {"ours": lambda: crc32c_using(path, CRC_BUF)}, {"ours": "ours"},
                 nbytes=len(CRC_BUF))


def test_partitioner(benchmark, request):
    """murmur2 of a 16-byte key to one of 12 partitions (the Java client's default, as a
    producer calls it per keyed message): ours against kafka-python's pure-Python one."""
    from kafka_client.producer.partitioners import get_partitioner

    key = b"0123456789abcdef"
    ours = get_partitioner("murmur2")
    bodies = {"ours": lambda: ours(key, 12)}
    labels = {"ours": "ours"}
    try:
        from kafka.partitioner.default import murmur2
    except ImportError:
        murmur2 = None
    if murmur2 is not None:
        assert (murmur2(key) & 0x7FFFFFFF) % 12 == ours(key, 12)
        bodies["kafka-python"] = lambda: (murmur2(key) & 0x7FFFFFFF) % 12
        labels["kafka-python"] = "kafka-python"
    _interleaved(benchmark, request, "murmur2-partition", "ns/call", 1, bodies, labels)
