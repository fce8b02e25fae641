"""Compression codecs of Kafka record batches, with Kafka's framing and bomb protection.

``compress(codec, data)`` and ``decompress(codec, data, max_size)`` cover the five codec ids
a record batch may carry: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.

Framing follows what the Java client writes and reads:

* gzip: RFC 1952 stream (several concatenated members accepted).
* snappy: snappy-java's "xerial" stream framing (16-byte header, then blocks of at most
  32 KiB input, each prefixed by its compressed length, big-endian); a plain raw snappy
  block is accepted on input too.
* lz4: LZ4 frame format, independent 64 KiB blocks; the broken header checksum of
  Kafka 0.8/0.9 (KAFKA-3160) is accepted on input and can be produced for magic-0 tests.
* zstd: standard Zstandard frames (content size may be absent).

Every decoder stops at ``max_size`` output bytes (:class:`DecompressionLimitError`) and never
sizes a buffer from a header field it has not checked against that limit. Corrupt input of
any codec raises :class:`DecompressionError` with the library's exception as ``__cause__``.

The block codecs are the libraries' (zlib and cramjam for gzip, cramjam for snappy,
python-lz4, zstandard); all of them release the GIL while they work. The framing loops of
gzip, snappy, lz4 and zstd run in ``kafka_proto._compression`` (Cython) and decode straight
into the returned ``bytes``, so that memory stays within the output budget as well.
"""
from __future__ import annotations

import struct
import sys
import threading
import zlib
from enum import IntEnum
from typing import Any, Optional, Union

from kafka_proto.errors import (
    CompressionError,
    DecompressionError,
    DecompressionLimitError,
    UnsupportedCompressionError,
)

__all__ = [
    "CODEC_NONE",
    "CODEC_GZIP",
    "CODEC_SNAPPY",
    "CODEC_LZ4",
    "CODEC_ZSTD",
    "CompressionCodec",
    "DEFAULT_MAX_DECOMPRESSED",
    "MAX_COMPRESSION_LEVEL",
    "codec_name",
    "compress",
    "decompress",
    "lz4_compress",
    "xxh32",
]

from kafka_proto._compression import (
    ZSTD_MAX_WINDOW,
    OutputBuffer,
    gzip_decompress,
    lz4_frame_decompress,
    snappy_decompress,
    xxh32,
    zstd_decompress,
)

BytesLike = Union[bytes, bytearray, memoryview]

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4


class CompressionCodec(IntEnum):
    """Codec ids as carried in the low 3 bits of a batch's (or legacy message's) attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


#: Default output limit of :func:`decompress`: well above any sane batch (the broker's
#: ``message.max.bytes`` defaults to about 1 MiB compressed), low enough to stop a bomb.
DEFAULT_MAX_DECOMPRESSED = 256 * 1024 * 1024

_CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

#: The highest level :func:`compress` takes per codec that has levels: zlib's 9, lz4 high
#: compression's 12 (higher values act as 12), zstd's 22.
MAX_COMPRESSION_LEVEL = {CODEC_GZIP: 9, CODEC_LZ4: 12, CODEC_ZSTD: 22}


def _view(data: BytesLike) -> memoryview:
    """A flat unsigned-byte view of any bytes-like object, without copying."""
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


# Larger limits mean the same (no buffer gets near that), and leave the decoders' size
# arithmetic room.
_LIMIT_CEILING = 1 << 62


def _check_limit(max_size: int) -> int:
    if max_size < 0:
        raise ValueError("max_size must be >= 0")
    return min(max_size, _LIMIT_CEILING)


def _limit_error(codec: str, max_size: int) -> DecompressionLimitError:
    return DecompressionLimitError(f"{codec} payload expands beyond {max_size} bytes")


# ---------------------------------------------------------------------------------------------
# gzip

_ZLIB_ONE_SHOT_GZIP = sys.version_info >= (3, 11)  # zlib.compress(wbits=) appeared in 3.11


def _gzip_compress(mv: memoryview, level: Optional[int]) -> bytes:
    if level is None:
        level = -1  # zlib's default (6), what GZIPOutputStream uses
    elif not -1 <= level <= 9:
        raise CompressionError(f"gzip level must be in -1..9, got {level}")
    if _ZLIB_ONE_SHOT_GZIP:
        return zlib.compress(mv, level, 31)  # one call, no concatenation of pieces
    co = zlib.compressobj(level, zlib.DEFLATED, 31)
    head = co.compress(mv)
    return head + co.flush() if head else co.flush()


# Deflate cannot expand more than about 1032:1; a trailer size above that is a lie.
_DEFLATE_MAX_RATIO = 1032

# Below this output size zlib's lower per-call cost wins (measured crossover ~32 KB).
_GZIP_FAST_MIN = 32 * 1024

_cramjam = None


def _cramjam_mod():
    global _cramjam
    if _cramjam is None:
        try:
            import cramjam
        except ImportError:  # pragma: no cover - a declared dependency (via python-snappy)
            _cramjam = False
        else:
            _cramjam = cramjam
    return _cramjam


#: cramjam inflates gzip straight into the buffer it is given from 2.14 on; before, into a
#: buffer of its own first (twice the output in memory, measured with
#: tests/proto/test_decompression_budget.py: 2.11-2.13 fail it, and 2.11 is the newest
#: cramjam for Python 3.9 and 3.10), so older versions take the streaming decoder.
_CRAMJAM_DIRECT_GZIP = (2, 14)
_cramjam_direct_gzip: Optional[bool] = None


def _gzip_into_ok(cj: Any) -> bool:
    global _cramjam_direct_gzip
    if _cramjam_direct_gzip is None:
        parts = []
        for part in str(getattr(cj, "__version__", "0")).split(".")[:2]:
            digits = "".join(ch for ch in part if ch.isdigit())
            parts.append(int(digits or 0))
        _cramjam_direct_gzip = tuple(parts) >= _CRAMJAM_DIRECT_GZIP
    return _cramjam_direct_gzip


def _gzip_fast(mv: memoryview, max_size: int) -> Optional[bytes]:
    """One-shot inflate into a buffer sized from the gzip trailer (ISIZE), when that size is
    plausible and within the budget. Returns None when anything does not fit exactly; the
    caller then runs the streaming decoder, which has the final say on errors."""
    cj = _cramjam_mod()
    n = len(mv)
    if not cj or n < 20 or not _gzip_into_ok(cj):
        return None
    (hint,) = struct.unpack_from("<I", mv, n - 4)
    if hint < _GZIP_FAST_MIN or hint > max_size or hint > n * _DEFLATE_MAX_RATIO:
        return None
    out = OutputBuffer(hint)
    view = memoryview(out)
    try:
        got = cj.gzip.decompress_into(mv, view)
    except Exception:
        got = -1
    finally:
        view.release()
    if got != hint:
        return None
    return out.take()


def _gzip_decompress(mv: memoryview, max_size: int) -> bytes:
    fast = _gzip_fast(mv, max_size)
    if fast is not None:
        return fast
    return gzip_decompress(mv, max_size)


# ---------------------------------------------------------------------------------------------
# snappy (xerial framing over raw blocks)

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_INPUT = 32 * 1024

_snappy = None


def _snappy_mod():
    global _snappy
    if _snappy is None:
        try:
            import cramjam
        except ImportError as e:  # pragma: no cover - a declared dependency
            raise UnsupportedCompressionError("snappy needs the 'cramjam' package") from e
        _snappy = cramjam.snappy
    return _snappy


def _snappy_compress(mv: memoryview) -> bytes:
    sn = _snappy_mod()
    n = len(mv)
    if n == 0:
        # Nothing to frame: one raw block, which every reader decodes (librdkafka refuses an
        # empty xerial stream, and takes a xerial header only when a block follows;
        # kafka-python and aiokafka read anything of 16 bytes or less as a raw block).
        return bytes(sn.compress_raw(b""))
    parts: list = [_XERIAL_HEADER]
    pack = struct.Struct(">i").pack
    for start in range(0, n, _XERIAL_BLOCK_INPUT):
        block = sn.compress_raw(mv[start:start + _XERIAL_BLOCK_INPUT])
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(mv: memoryview, max_size: int) -> bytes:
    return snappy_decompress(mv, max_size, _snappy_mod().decompress_raw_into)


# ---------------------------------------------------------------------------------------------
# lz4 frame

_lz4_block = None
_lz4_frame = None


def _lz4_mods():
    global _lz4_block, _lz4_frame
    if _lz4_block is None:
        try:
            import lz4.block
            import lz4.frame
        except ImportError as e:  # pragma: no cover - a declared dependency
            raise UnsupportedCompressionError("lz4 needs the 'lz4' package") from e
        _lz4_block, _lz4_frame = lz4.block, lz4.frame
    return _lz4_block, _lz4_frame


def lz4_compress(data: BytesLike, level: Optional[int] = None,
                 legacy_header: bool = False) -> bytes:
    """LZ4 frame as Kafka's Java writer makes it: FLG 0x60, BD 0x40 (independent 64 KiB
    blocks, no checksums, no content size).

    ``level``: None is lz4's fast mode; 1..2 fast, 3..12 high compression (higher values act
    as 12). ``legacy_header=True`` writes the wrong header checksum of Kafka 0.8/0.9
    (KAFKA-3160), which magic-0 messages carry.
    """
    _, frame = _lz4_mods()
    mv = _view(data)
    try:
        out = frame.compress(
            mv,
            compression_level=0 if level is None else level,
            block_size=frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            block_checksum=False,
            store_size=False,
        )
    except Exception as e:
        raise CompressionError(f"lz4 compression failed: {e}") from e
    if legacy_header:
        hc = (xxh32(out[:6]) >> 8) & 0xFF  # over magic + FLG + BD: the old bug
        out = out[:6] + bytes((hc,)) + out[7:]
    return out


def _lz4_decompress(mv: memoryview, max_size: int) -> bytes:
    block_mod, _ = _lz4_mods()
    cj = _cramjam_mod()
    return lz4_frame_decompress(mv, max_size, block_mod.decompress,
                                cj.lz4.decompress_block_into if cj else None,
                                cj.lz4.decompress_into if cj else None)


# ---------------------------------------------------------------------------------------------
# zstd

_zstd = None
_local = threading.local()


def _zstd_mod():
    global _zstd
    if _zstd is None:
        try:
            import zstandard
        except ImportError as e:  # pragma: no cover - a declared dependency
            raise UnsupportedCompressionError("zstd needs the 'zstandard' package") from e
        _zstd = zstandard
    return _zstd


def _zstd_compress(mv: memoryview, level: Optional[int]) -> bytes:
    zstd = _zstd_mod()
    if level is None:
        level = 3
    # Contexts are reusable but not thread-safe: one per thread and level.
    cache = getattr(_local, "zc", None)
    if cache is None:
        cache = _local.zc = {}
    cctx = cache.get(level)
    if cctx is None:
        try:
            cctx = cache[level] = zstd.ZstdCompressor(level=level)
        except Exception as e:
            raise CompressionError(f"bad zstd level {level}: {e}") from e
    try:
        return cctx.compress(mv)
    except Exception as e:
        raise CompressionError(f"zstd compression failed: {e}") from e


def _zstd_dctx():
    dctx = getattr(_local, "zd", None)
    if dctx is None:
        dctx = _local.zd = _zstd_mod().ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    return dctx


def _zstd_decompress(mv: memoryview, max_size: int) -> bytes:
    return zstd_decompress(mv, max_size, _zstd_dctx(), _zstd_mod().ZstdError)


# ---------------------------------------------------------------------------------------------
# Public entry points


def compress(codec: int, data: BytesLike, level: Optional[int] = None,
             legacy_lz4_header: bool = False) -> bytes:
    """Compress ``data`` with the codec id as a Kafka producer would frame it.

    ``level``: gzip -1..9 (None = zlib default), lz4 see :func:`lz4_compress`, zstd
    -131072..22 (None = 3); snappy and none ignore it. ``legacy_lz4_header`` makes the lz4
    frame carry the pre-0.10 header checksum (for magic-0 messages).
    Raises :class:`UnsupportedCompressionError` for an unknown codec id.
    """
    mv = _view(data)
    if codec == CODEC_NONE:
        return bytes(mv) if not isinstance(data, bytes) else data
    if codec == CODEC_GZIP:
        return _gzip_compress(mv, level)
    if codec == CODEC_SNAPPY:
        return _snappy_compress(mv)
    if codec == CODEC_LZ4:
        return lz4_compress(mv, level, legacy_lz4_header)
    if codec == CODEC_ZSTD:
        return _zstd_compress(mv, level)
    raise UnsupportedCompressionError(f"unknown compression codec id {codec}")


def decompress(codec: int, data: BytesLike, max_size: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """Decompress one Kafka compressed payload.

    The output never exceeds ``max_size`` bytes: :class:`DecompressionLimitError` is raised
    as soon as it would. Corrupt or truncated input raises :class:`DecompressionError`;
    an unknown codec id raises :class:`UnsupportedCompressionError`.
    """
    max_size = _check_limit(max_size)
    mv = _view(data)
    if codec == CODEC_NONE:
        if len(mv) > max_size:
            raise _limit_error("uncompressed", max_size)
        return data if isinstance(data, bytes) else bytes(mv)
    if codec == CODEC_GZIP:
        return _gzip_decompress(mv, max_size)
    if codec == CODEC_SNAPPY:
        return _snappy_decompress(mv, max_size)
    if codec == CODEC_LZ4:
        return _lz4_decompress(mv, max_size)
    if codec == CODEC_ZSTD:
        return _zstd_decompress(mv, max_size)
    raise UnsupportedCompressionError(f"unknown compression codec id {codec}")


def codec_name(codec: int) -> str:
    """Lower-case name of a codec id ('none', 'gzip', 'snappy', 'lz4', 'zstd')."""
    try:
        return _CODEC_NAMES[codec]
    except KeyError:
        raise UnsupportedCompressionError(f"unknown compression codec id {codec}") from None
