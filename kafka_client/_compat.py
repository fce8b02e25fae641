"""Module-level functions of confluent-kafka's top level: the partitioner hashes as plain
functions, and the version queries."""
from __future__ import annotations

from typing import Any, Tuple

from .producer.partitioners import crc32_partition, fnv1a_partition, murmur2_partition

__all__ = ["murmur2", "fnv1a", "consistent", "version", "libversion"]

#: This client's version (the distribution's, pyproject.toml).
_VERSION = "0.1.0"


def _check(key: Any, partition_count: Any) -> None:
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"a bytes-like object is required, not '{type(key).__name__}'")
    if isinstance(partition_count, bool) or not isinstance(partition_count, int):
        raise TypeError(f"partition_count must be an int, not {type(partition_count).__name__}")
    if partition_count <= 0:
        raise ValueError(f"partition_count must be > 0, got {partition_count}")


def murmur2(key: bytes, partition_count: int) -> int:
    """The partition the Java client's default partitioner (murmur2) gives ``key``."""
    _check(key, partition_count)
    return murmur2_partition(key, partition_count)


def fnv1a(key: bytes, partition_count: int) -> int:
    """The partition the FNV-1a partitioner (Sarama's) gives ``key``."""
    _check(key, partition_count)
    return fnv1a_partition(key, partition_count)


def consistent(key: bytes, partition_count: int) -> int:
    """The partition librdkafka's ``consistent`` partitioner (CRC-32) gives ``key``."""
    _check(key, partition_count)
    return crc32_partition(key, partition_count)


def _version_int(text: str) -> int:
    """librdkafka's version int layout, 0xMMmmrrxx (xx = 0xff for a release)."""
    parts = [int(p) for p in text.split(".")[:3]] + [0, 0, 0]
    return (parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | 0xFF


def version() -> str:
    """This client's version string (confluent-kafka 2.x also returns a plain string)."""
    return _VERSION


#: The librdkafka release whose configuration properties and behaviour this client
#: follows (compared side by side with confluent-kafka 2.16.1 in tests/compat/).
FOLLOWS_LIBRDKAFKA = "2.16.0"


def libversion() -> Tuple[str, int]:
    """``(version string, version int)`` of the librdkafka release this client follows:
    there is no librdkafka here, and programs compare this number with librdkafka's
    releases to decide whether a feature is there (the codec's own version is
    ``kafka_proto.__version__``)."""
    return FOLLOWS_LIBRDKAFKA, _version_int(FOLLOWS_LIBRDKAFKA)
