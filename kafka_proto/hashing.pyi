"""Type stub for the compiled kafka_proto.hashing module."""
from typing import Optional, Sequence, Union

from typing_extensions import Buffer

__all__ = ["murmur2", "fnv1a", "murmur2_partition", "fnv1a_partition", "crc32_partition"]

_Key = Union[bytes, bytearray, memoryview, str, Buffer, None]

def murmur2(data: _Key) -> int: ...
def fnv1a(data: _Key) -> int: ...
def murmur2_partition(key: _Key, partition_count: int,
                      available: Optional[Sequence[int]] = None) -> int: ...
def fnv1a_partition(key: _Key, partition_count: int,
                    available: Optional[Sequence[int]] = None) -> int: ...
def crc32_partition(key: _Key, partition_count: int,
                    available: Optional[Sequence[int]] = None) -> int: ...
