"""Type stub of kafka_proto._compression (compiled framing loops of kafka_proto.compression)."""
from typing import Any, Callable, Optional, Tuple, Type, Union

_Buffer = Union[bytes, bytearray, memoryview]

class OutputBuffer:
    """Writable view onto a new, not yet shared ``bytes`` object of ``size`` bytes."""

    def __new__(cls, size: int) -> OutputBuffer: ...   # __cinit__
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int) -> memoryview: ...
    def take(self, size: int = -1) -> bytes:
        """Return the bytes object once every writer released its view (only once),
        shrunk in place to ``size`` bytes if given."""

ZSTD_MAX_WINDOW: int

def xxh32(data: _Buffer, seed: int = 0) -> int: ...
def lz4_frame_decompress(
    data: _Buffer,
    max_size: int,
    block_decompress: Callable[..., bytes],
    block_decompress_into: Optional[Callable[..., int]] = None,
    frame_decompress_into: Optional[Callable[..., int]] = None,
) -> bytes: ...
def zstd_frame_info(data: _Buffer, pos: int = 0) -> Tuple[int, int, int]:
    """(end, content size or -1, output upper bound) of the zstd frame at ``pos``."""
def zstd_decompress(
    data: _Buffer, max_size: int, dctx: Any, zstd_error: Type[BaseException]
) -> bytes: ...
def gzip_decompress(data: _Buffer, max_size: int) -> bytes: ...
def snappy_decompress(
    data: _Buffer, max_size: int, decompress_raw_into: Callable[[Any, Any], int]
) -> bytes: ...
