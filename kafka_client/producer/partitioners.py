"""Partitioners: which partition a message goes to when ``produce()`` gets none.

The names and their meaning are librdkafka's (the ``partitioner`` property):

===================  ==============================================  ====================
name                 keyed message                                   null key / empty key
===================  ==============================================  ====================
random               random partition                                random / random
consistent           ``crc32(key) % n``                              partition 0 / 0
consistent_random    ``crc32(key) % n``                              random / random
murmur2              ``(murmur2(key) & 0x7fffffff) % n``             ``murmur2(b"")`` / same
murmur2_random       as murmur2 (the Java client's choice)           random / ``murmur2(b"")``
fnv1a                ``fnv1a(key) % n``                              ``fnv1a(b"")`` / same
fnv1a_random         as fnv1a                                        random / ``fnv1a(b"")``
===================  ==============================================  ====================

``consistent_random`` is the default. CRC-32 is the IEEE one (zlib's), murmur2 is the
Java client's ``Utils.murmur2``, so ``murmur2``/``murmur2_random`` put a key where the
Java producer does; FNV-1a is librdkafka's (the absolute value of the signed hash, for
Sarama compatibility). The hashes are compiled (:mod:`kafka_proto.hashing`).

The functions returned by :func:`get_partitioner` are librdkafka's partitioner
functions and nothing more. librdkafka's producer adds *sticky partitioning* in front
of them, and so does :class:`TopicPartitioner` here: when
``sticky.partitioning.linger.ms`` > 0 and the partitioner is one of the ``*random``
ones, a message without key (and, for ``consistent_random``, with an empty key) goes to
one randomly chosen partition for that many milliseconds, then the next one is chosen,
so keyless messages fill a few large batches instead of one small batch per partition.

``available`` is the list (or set, or range) of partitions that have a leader now.
Where a partitioner picks at random, it picks among those; librdkafka draws once more
when its first draw hits an unavailable partition, choosing among the available ones
directly is the same intent without the second chance of a miss. Hash partitioners
ignore it, as in librdkafka: a key keeps its partition while the leader is away.
"""
from __future__ import annotations

import random as _random_module
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from kafka_client.errors import KafkaError, KafkaException
from kafka_proto.hashing import crc32_partition, fnv1a_partition, murmur2_partition

__all__ = [
    "Partitioner",
    "PARTITIONERS",
    "DEFAULT_PARTITIONER",
    "get_partitioner",
    "callback_partitioner",
    "uses_sticky",
    "TopicPartitioner",
]

Key = Union[bytes, bytearray, memoryview, str, None]
#: ``partitioner(key, partition_count, available=None) -> partition``
Partitioner = Callable[..., int]

DEFAULT_PARTITIONER = "consistent_random"

# Partitioners that never use sticky partitioning for keyless messages (librdkafka
# maps a null key to a fixed partition for these).
_NEVER_STICKY = frozenset({"consistent", "murmur2", "fnv1a"})


def _make_random(rng: Optional[_random_module.Random]) -> Partitioner:
    draw = (rng or _random_module.Random()).random

    def random(key: Key, partition_count: int,
               available: Optional[Sequence[int]] = None) -> int:
        """A random partition, among ``available`` when given and not empty."""
        if available:
            # random() * len is uniform enough for partition counts and ~3x cheaper
            # than randrange.
            return available[int(draw() * len(available))]
        if partition_count <= 0:
            raise ValueError(f"partition_count must be positive, got {partition_count}")
        return int(draw() * partition_count)

    return random


def _build(name: str, rng: Optional[_random_module.Random]) -> Partitioner:
    random = _make_random(rng)
    if name == "random":
        return random
    if name == "consistent":
        # A null key hashes as zero bytes: crc32(b"") == 0, partition 0.
        return crc32_partition
    if name == "murmur2":
        return murmur2_partition
    if name == "fnv1a":
        return fnv1a_partition
    if name == "consistent_random":
        def consistent_random(key: Key, partition_count: int,
                              available: Optional[Sequence[int]] = None) -> int:
            """CRC-32 of the key; null or empty key: random."""
            if not key:
                return random(key, partition_count, available)
            return crc32_partition(key, partition_count)
        return consistent_random
    if name == "murmur2_random":
        def murmur2_random(key: Key, partition_count: int,
                           available: Optional[Sequence[int]] = None) -> int:
            """Java client's murmur2 of the key; null key (only): random."""
            if key is None:
                return random(key, partition_count, available)
            return murmur2_partition(key, partition_count)
        return murmur2_random
    if name == "fnv1a_random":
        def fnv1a_random(key: Key, partition_count: int,
                         available: Optional[Sequence[int]] = None) -> int:
            """FNV-1a of the key; null key (only): random."""
            if key is None:
                return random(key, partition_count, available)
            return fnv1a_partition(key, partition_count)
        return fnv1a_random
    raise ValueError(
        f"unknown partitioner {name!r}; expected one of: {', '.join(PARTITIONERS)}")


PARTITIONERS = ("random", "consistent", "consistent_random", "murmur2",
                "murmur2_random", "fnv1a", "fnv1a_random")

_SHARED: Dict[str, Partitioner] = {}


def get_partitioner(name: str, rng: Optional[_random_module.Random] = None) -> Partitioner:
    """The partitioner function called ``name`` (librdkafka's names).

    The result is called as ``partitioner(key, partition_count, available=None)`` and
    returns a partition number in ``range(partition_count)`` (or one of ``available``).
    ``rng`` gives the random choices a source of their own (tests pass a seeded
    ``random.Random``); without it the functions share one private generator.
    Raises ``ValueError`` for an unknown name.
    """
    if rng is not None:
        return _build(name, rng)
    fn = _SHARED.get(name)
    if fn is None:
        fn = _SHARED[name] = _build(name, None)
    return fn


def callback_partitioner(partitioner_cb: Callable[[Key, int], int]) -> Partitioner:
    """The ``partitioner_cb`` property as a partitioner: ``partitioner_cb(key,
    partition_count)`` chooses; a partition the topic does not have is
    ``_UNKNOWN_PARTITION``, librdkafka's check of what its partitioner returns."""
    def choose(key: Key, partition_count: int,
               available: Optional[Sequence[int]] = None) -> int:
        partition = partitioner_cb(key, partition_count)
        if not isinstance(partition, int) or not 0 <= partition < partition_count:
            raise KafkaException(KafkaError(
                KafkaError._UNKNOWN_PARTITION,
                f"partitioner_cb returned {partition!r} for a topic of {partition_count} "
                f"partitions"))
        return partition
    return choose


def uses_sticky(name: str, sticky_linger_ms: float) -> bool:
    """True if librdkafka would send this partitioner's keyless messages to a sticky
    partition (``sticky.partitioning.linger.ms`` > 0 and a ``*random`` partitioner)."""
    if name not in PARTITIONERS:
        raise ValueError(f"unknown partitioner {name!r}")
    return sticky_linger_ms > 0 and name not in _NEVER_STICKY


class TopicPartitioner:
    """Partition choice for one topic, as librdkafka's producer makes it.

    Holds the topic's sticky partition, so keep one per topic. Not thread-safe: the
    producer calls it from ``produce()`` under its own lock.

    ``choose(key, partition_count, available=None)`` (also ``__call__``) returns the
    partition. Keyless messages (see the module docstring) stay on the sticky partition
    for ``sticky_linger_ms``; a new one is drawn when that time has passed, when the
    current one is no longer in ``available``, or when the partition count shrank
    below it. Everything else goes to the named partitioner. ``choose`` is a plain
    function (a closure, or the partitioner itself when stickiness does not apply):
    the per-message path avoids a method call.
    """

    __slots__ = ("name", "sticky_linger_ms", "choose", "_state")

    def __init__(self, name: str = DEFAULT_PARTITIONER, sticky_linger_ms: float = 10,
                 rng: Optional[_random_module.Random] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.sticky_linger_ms = sticky_linger_ms
        fn = get_partitioner(name, rng)
        # [current sticky partition, monotonic time it expires]
        state: List[Any] = [-1, 0.0]
        self._state = state
        if not uses_sticky(name, sticky_linger_ms):
            self.choose: Partitioner = fn
            return
        random = get_partitioner("random", rng)
        linger_s = sticky_linger_ms / 1000.0
        # consistent_random treats an empty key like a null one.
        empty_is_keyless = name == "consistent_random"

        def choose(key: Key, partition_count: int,
                   available: Optional[Sequence[int]] = None) -> int:
            if key is not None and (not empty_is_keyless or key):
                return fn(key, partition_count, available)
            now = clock()
            current = state[0]
            if (current < 0 or now >= state[1] or current >= partition_count
                    or (available and current not in available)):
                current = state[0] = random(None, partition_count, available)
                state[1] = now + linger_s
            return current

        self.choose = choose

    @property
    def sticky_partition(self) -> int:
        """The current sticky partition, -1 before the first keyless message."""
        return self._state[0]

    def __call__(self, key: Key, partition_count: int,
                 available: Optional[Sequence[int]] = None) -> int:
        return self.choose(key, partition_count, available)

    def __repr__(self) -> str:
        return (f"TopicPartitioner({self.name!r}, sticky_linger_ms={self.sticky_linger_ms},"
                f" sticky_partition={self._state[0]})")
