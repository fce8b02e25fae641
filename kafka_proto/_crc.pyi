"""Type stub for the compiled kafka_proto._crc module."""
from typing import Union

from typing_extensions import Buffer

_BytesLike = Union[bytes, bytearray, memoryview, Buffer]

#: Name of the CRC-32C implementation chosen for this CPU at import time
#: ("avx512", "sse4.2", "armv8-crc" or "software").
IMPLEMENTATION: str

def crc32c(data: _BytesLike, crc: int = 0) -> int: ...
def crc32c_software(data: _BytesLike, crc: int = 0) -> int: ...
def crc32(data: _BytesLike, crc: int = 0) -> int: ...
def crc32_software(data: _BytesLike, crc: int = 0) -> int: ...

#: Name of the CRC-32 (IEEE) implementation in use ("avx512" or "software").
CRC32_IMPLEMENTATION: str

#: Every CRC-32C implementation usable on this CPU, slowest first
#: (a subset of "software", "armv8-crc", "sse4.2", "avx512").
IMPLEMENTATIONS: tuple[str, ...]

def crc32c_using(implementation: str, data: _BytesLike, crc: int = 0) -> int: ...
