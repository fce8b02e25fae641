"""Partitioners: hash vectors, librdkafka's null/empty-key rules, sticky partitioning,
and an end-to-end cross-check against librdkafka (confluent-kafka) on Tansu."""
from __future__ import annotations

import random
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_client.producer.partitioners import (
    DEFAULT_PARTITIONER,
    PARTITIONERS,
    TopicPartitioner,
    get_partitioner,
    uses_sticky,
)
from kafka_proto import hashing as _hash

try:  # kafka-python's pure-Python port of the Java client's murmur2
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2
except ImportError:  # pragma: no cover - test extra missing
    kafka_python_murmur2 = None

# Kafka's UtilsTest.testMurmur2 (Java client), signed 32-bit results.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

_SHORT = b"1234"
_UNALIGNED = b"PreAmbleWillBeRemoved,ThePrePartThatIs"
_RDKAFKA_KEYS = [b"kafka", b"giberish123456789", _SHORT, _SHORT[1:], _SHORT[2:], _SHORT[3:],
                 _UNALIGNED, _UNALIGNED[1:], _UNALIGNED[2:], _UNALIGNED[3:], b""]
# librdkafka's unit tests (rdmurmur2.c, rdfnv1a.c), as unsigned 32-bit values.
RDKAFKA_MURMUR2 = [0xd067cf64, 0x8f552b0c, 0x9fc97b14, 0xe7c009ca, 0x873930da, 0x5a4b5ca1,
                   0x78424f1c, 0x4a62b377, 0xe0e4e09e, 0x62b8b43f, 0x106e08d9]
RDKAFKA_FNV1A = [0x0d33c4e1, 0x77a58295, 0x023bdd03, 0x2dea3cd2, 0x740fa83e, 0x310ca263,
                 0x65cbd69c, 0x6e49c79a, 0x69eed356, 0x6abcc023, 0x7ee3623b]


def _murmur2_reference(data: bytes) -> int:
    """Straight transcription of the algorithm in Python, unsigned result."""
    m, mask = 0x5bd1e995, 0xFFFFFFFF
    h = (0x9747b28c ^ len(data)) & mask
    n4 = len(data) // 4
    for i in range(n4):
        (k,) = struct.unpack_from("<I", data, 4 * i)
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[4 * n4:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if len(tail) >= 1:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


def _fnv1a_reference(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    if h & 0x80000000:  # abs() of the signed value
        h = (-(h - (1 << 32))) & 0xFFFFFFFF
    return h


# -- hashes ------------------------------------------------------------------------------

@pytest.mark.parametrize("key,expected", sorted(JAVA_MURMUR2.items()))
def test_murmur2_java_vectors(key, expected):
    assert _hash.murmur2(key) == expected


def test_murmur2_librdkafka_vectors():
    assert [_hash.murmur2(k) & 0xFFFFFFFF for k in _RDKAFKA_KEYS] == RDKAFKA_MURMUR2
    assert _hash.murmur2(None) & 0xFFFFFFFF == 0x106e08d9


def test_fnv1a_librdkafka_vectors():
    assert [_hash.fnv1a(k) for k in _RDKAFKA_KEYS] == RDKAFKA_FNV1A
    assert _hash.fnv1a(None) == 0x7ee3623b


def test_key_types_hash_alike():
    data = b"some-key-\xff\x00"
    for fn in (_hash.murmur2, _hash.fnv1a):
        expected = fn(data)
        assert fn(bytearray(data)) == expected
        assert fn(memoryview(data)) == expected
        # non-contiguous view: every other byte of a doubled buffer
        doubled = bytes(b for c in data for b in (c, 0))
        assert fn(memoryview(doubled)[::2]) == expected
    assert _hash.murmur2("héllo") == _hash.murmur2("héllo".encode())


def test_large_key_released_gil_path_same_result():
    big = bytes(range(256)) * 1024  # 256 KiB: above the no-GIL threshold
    assert _hash.murmur2(big) & 0xFFFFFFFF == _murmur2_reference(big)
    assert _hash.fnv1a(big) == _fnv1a_reference(big)
    assert _hash.crc32_partition(big, 1000) == zlib.crc32(big) % 1000


def test_bad_arguments():
    with pytest.raises(TypeError):
        _hash.murmur2(12345)
    for fn in (_hash.murmur2_partition, _hash.fnv1a_partition, _hash.crc32_partition):
        with pytest.raises(ValueError):
            fn(b"k", 0)
        with pytest.raises(ValueError):
            fn(b"k", -3)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=70))
def test_hashes_match_reference(data):
    ours = _hash.murmur2(data) & 0xFFFFFFFF
    assert ours == _murmur2_reference(data)
    if kafka_python_murmur2 is not None:
        assert ours == kafka_python_murmur2(data) & 0xFFFFFFFF
    assert _hash.fnv1a(data) == _fnv1a_reference(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=40), st.integers(min_value=1, max_value=5000))
def test_hash_partitioners_formulas(key, n):
    assert get_partitioner("murmur2")(key, n) == (_murmur2_reference(key) & 0x7FFFFFFF) % n
    assert get_partitioner("murmur2_random")(key, n) == (_murmur2_reference(key) & 0x7FFFFFFF) % n
    assert get_partitioner("fnv1a")(key, n) == _fnv1a_reference(key) % n
    assert get_partitioner("fnv1a_random")(key, n) == _fnv1a_reference(key) % n
    assert get_partitioner("consistent")(key, n) == zlib.crc32(key) % n
    assert get_partitioner("consistent_random")(key, n) == zlib.crc32(key) % n


def test_java_partitions_for_known_keys():
    # The Java producer's DefaultPartitioner: toPositive(murmur2(key)) % n.
    p = get_partitioner("murmur2_random")
    for key, h in JAVA_MURMUR2.items():
        for n in (1, 3, 12, 100):
            assert p(key, n) == (h & 0x7FFFFFFF) % n


# -- null and empty keys (librdkafka's rules) ---------------------------------------------

def test_null_and_empty_keys_fixed_partitions():
    n = 7
    assert get_partitioner("consistent")(None, n) == 0
    assert get_partitioner("consistent")(b"", n) == 0
    assert get_partitioner("murmur2")(None, n) == (0x106e08d9 & 0x7FFFFFFF) % n
    assert get_partitioner("murmur2")(b"", n) == (0x106e08d9 & 0x7FFFFFFF) % n
    assert get_partitioner("fnv1a")(None, n) == 0x7ee3623b % n
    assert get_partitioner("fnv1a")(b"", n) == 0x7ee3623b % n
    # *_random map only a NULL key to random; an empty key is hashed.
    assert get_partitioner("murmur2_random")(b"", n) == (0x106e08d9 & 0x7FFFFFFF) % n
    assert get_partitioner("fnv1a_random")(b"", n) == 0x7ee3623b % n


@pytest.mark.parametrize("name,key", [
    ("random", b"k"), ("random", None), ("consistent_random", None),
    ("consistent_random", b""), ("murmur2_random", None), ("fnv1a_random", None)])
def test_random_choices_spread_over_all_partitions(name, key):
    p = get_partitioner(name, random.Random(42))
    seen = [p(key, 6) for _ in range(600)]
    counts = [seen.count(i) for i in range(6)]
    assert all(60 <= c <= 140 for c in counts), counts


def test_random_honours_available():
    p = get_partitioner("consistent_random", random.Random(3))
    got = {p(None, 10, [2, 5, 7]) for _ in range(300)}
    assert got == {2, 5, 7}
    # empty list of available partitions: fall back to all of them
    assert {p(None, 3, []) for _ in range(200)} == {0, 1, 2}
    # hash partitioners keep the key's partition whatever the availability
    h = get_partitioner("murmur2_random")
    assert h(b"21", 10, [0]) == (-973932308 & 0x7FFFFFFF) % 10


def test_seeded_rng_reproducible_and_shared_instances():
    a = get_partitioner("random", random.Random(9))
    b = get_partitioner("random", random.Random(9))
    assert [a(None, 1000) for _ in range(20)] == [b(None, 1000) for _ in range(20)]
    assert get_partitioner("murmur2") is get_partitioner("murmur2")


def test_unknown_partitioner_name():
    with pytest.raises(ValueError, match="unknown partitioner 'round_robin'"):
        get_partitioner("round_robin")
    with pytest.raises(ValueError):
        uses_sticky("nope", 10)
    with pytest.raises(ValueError):
        get_partitioner("random")(None, 0)


# -- sticky partitioning -------------------------------------------------------------------

class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_uses_sticky_matches_librdkafka():
    assert DEFAULT_PARTITIONER == "consistent_random"
    assert {n for n in PARTITIONERS if uses_sticky(n, 10)} == {
        "random", "consistent_random", "murmur2_random", "fnv1a_random"}
    assert not any(uses_sticky(n, 0) for n in PARTITIONERS)


def test_sticky_partition_held_for_linger_then_changes():
    clock = FakeClock()
    tp = TopicPartitioner("consistent_random", sticky_linger_ms=10, rng=random.Random(5),
                          clock=clock)
    assert tp.sticky_partition == -1
    first = tp(None, 1000)
    assert all(tp(None, 1000) == first for _ in range(50))
    assert tp(b"", 1000) == first  # empty key is keyless for consistent_random
    clock.t += 0.009
    assert tp(None, 1000) == first
    picks = set()
    for _ in range(20):
        clock.t += 0.011
        picks.add(tp(None, 1000))
    assert len(picks) > 10  # a new draw each time the linger passed
    # keyed messages are not affected by the sticky partition
    assert tp(b"abc", 1000) == zlib.crc32(b"abc") % 1000


def test_sticky_redraws_when_partition_unavailable_or_gone():
    clock = FakeClock()
    tp = TopicPartitioner("murmur2_random", sticky_linger_ms=1000, rng=random.Random(1),
                          clock=clock)
    first = tp(None, 50)
    others = [p for p in range(50) if p != first]
    second = tp(None, 50, others)
    assert second != first and second in others
    # partition count shrank below the sticky partition
    tp2 = TopicPartitioner("random", sticky_linger_ms=1000, rng=random.Random(2), clock=clock)
    p = tp2(None, 100, range(90, 100))
    assert p >= 90
    assert tp2(None, 10) < 10
    # murmur2_random hashes the empty key (not keyless)
    assert tp(b"", 50) == (0x106e08d9 & 0x7FFFFFFF) % 50


def test_no_sticky_for_fixed_partitioners_or_zero_linger():
    tp = TopicPartitioner("murmur2", sticky_linger_ms=10)
    assert tp(None, 9) == (0x106e08d9 & 0x7FFFFFFF) % 9
    assert tp.sticky_partition == -1
    tp = TopicPartitioner("consistent_random", sticky_linger_ms=0, rng=random.Random(0))
    assert len({tp(None, 100) for _ in range(100)}) > 30


# -- compiled hashing ------------------------------------------------------------------------

def test_keyed_partitioners_hash_in_compiled_code():
    """The per-message hashing is the codec's compiled functions, never a Python
    fallback (their speed is measured in benchmarks/bench_codec.py, not here)."""
    for name in ("murmur2", "fnv1a", "consistent"):
        assert type(get_partitioner(name)).__name__ == "builtin_function_or_method", name
    for fn in (_hash.murmur2, _hash.fnv1a):
        assert type(fn).__name__ == "builtin_function_or_method", fn


# -- cross-check with librdkafka on a real broker -------------------------------------------

@pytest.mark.parametrize("name", ["murmur2_random", "murmur2", "fnv1a", "fnv1a_random",
                                  "consistent", "consistent_random"])
def test_same_partition_as_librdkafka(tansu_broker, topic_name, name):
    from confluent_kafka import Producer

    partitions = 7
    tansu_broker.create_topic(topic_name, partitions=partitions)
    rng = random.Random(name)
    keys = [b"21", b"foobar", b"abc", b"kafka", b"\x00", b"\xff" * 33] + [
        rng.randbytes(rng.randrange(1, 40)) for _ in range(150)]
    keys += [f"user-{i}".encode() for i in range(50)]
    if name != "consistent_random":
        keys.append(b"")  # empty, not null: hashed by these (random for consistent_random)
    if not uses_sticky(name, 10):
        keys.append(None)  # null key: a fixed partition for consistent, murmur2, fnv1a
    reports = {}

    def on_delivery(err, msg):
        assert err is None, err
        reports[msg.key()] = msg.partition()

    producer = Producer({"bootstrap.servers": tansu_broker.bootstrap, "partitioner": name,
                         "linger.ms": 5})
    for key in keys:
        producer.produce(topic_name, value=b"v", key=key, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert len(reports) == len(set(keys))
    assert (b"" in reports) == (name != "consistent_random")
    assert (None in reports) == (name in ("consistent", "murmur2", "fnv1a"))
    ours = get_partitioner(name)
    mismatches = {k: (reports[k], ours(k, partitions)) for k in reports
                  if reports[k] != ours(k, partitions)}
    assert not mismatches
    # Several partitions were used, so the comparison means something.
    assert len(set(reports.values())) == partitions
