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
snappy, lz4 and zstd run in ``kafka_proto._compression`` (Cython) and decode straight into
the returned ``bytes``; the Python twins below take over when that module is not built.
"""
from __future__ import annotations

import struct
import sys
import threading
import zlib
from enum import IntEnum
from typing import List, Optional, Union

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
    "codec_name",
    "compress",
    "decompress",
    "lz4_compress",
    "xxh32",
]

try:
    from kafka_proto._compression import OutputBuffer as _OutputBuffer
    from kafka_proto._compression import lz4_frame_decompress as _lz4_frame_c
    from kafka_proto._compression import snappy_decompress as _snappy_c
    from kafka_proto._compression import xxh32 as _xxh32_c
    from kafka_proto._compression import zstd_decompress as _zstd_c
except ImportError:  # extension not built: same results from the Python code below, slower
    _OutputBuffer = None
    _lz4_frame_c = None
    _snappy_c = None
    _xxh32_c = None
    _zstd_c = None

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


def _view(data: BytesLike) -> memoryview:
    """A flat unsigned-byte view of any bytes-like object, without copying."""
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


class _Output:
    """Destination of a decompression of known size: the final bytes object itself when the
    compiled helper is there, else a bytearray copied once at the end."""

    __slots__ = ("_buf", "view")

    def __init__(self, size: int) -> None:
        self._buf = _OutputBuffer(size) if _OutputBuffer is not None else bytearray(size)
        self.view = memoryview(self._buf)

    def take(self) -> bytes:
        self.view.release()
        if isinstance(self._buf, bytearray):
            return bytes(self._buf)
        return self._buf.take()

    def drop(self) -> None:
        self.view.release()


def _check_limit(max_size: int) -> None:
    if max_size < 0:
        raise ValueError("max_size must be >= 0")


def _limit_error(codec: str, max_size: int) -> DecompressionLimitError:
    return DecompressionLimitError(f"{codec} payload expands beyond {max_size} bytes")


# ---------------------------------------------------------------------------------------------
# xxHash32 (LZ4 frame header checksum). Only ever run over a few header bytes here, so plain
# Python is fast enough; the package `xxhash` is not a dependency.

_P1 = 2654435761
_P2 = 2246822519
_P3 = 3266489917
_P4 = 668265263
_P5 = 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: BytesLike, seed: int = 0) -> int:
    """xxHash32 of ``data`` (seed 0 by default), as used by the LZ4 frame format."""
    if _xxh32_c is not None:
        return _xxh32_c(data, seed)
    return _xxh32_py(data, seed)


def _xxh32_py(data: BytesLike, seed: int = 0) -> int:
    """Pure-Python xxHash32: the fallback, and a cross-check of the compiled one in tests."""
    b = bytes(data)
    n = len(b)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while i <= n - 16:
            a, c, d, e = struct.unpack_from("<4I", b, i)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + c * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + d * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + e * _P2) & _M32, 13) * _P1) & _M32
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        (w,) = struct.unpack_from("<I", b, i)
        h = (_rotl((h + w * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + b[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


# ---------------------------------------------------------------------------------------------
# gzip

_GZIP_MAGIC = b"\x1f\x8b"
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


def _gzip_fast(mv: memoryview, max_size: int) -> Optional[bytes]:
    """One-shot inflate into a buffer sized from the gzip trailer (ISIZE), when that size is
    plausible and within the budget. Returns None when anything does not fit exactly; the
    caller then runs the streaming decoder, which has the final say on errors."""
    cj = _cramjam_mod()
    n = len(mv)
    if not cj or n < 20:
        return None
    (hint,) = struct.unpack_from("<I", mv, n - 4)
    if hint < _GZIP_FAST_MIN or hint > max_size or hint > n * _DEFLATE_MAX_RATIO:
        return None
    out = _Output(hint)
    try:
        got = cj.gzip.decompress_into(mv, out.view)
    except Exception:
        got = -1
    if got != hint:
        out.drop()
        return None
    return out.take()


def _gzip_decompress(mv: memoryview, max_size: int) -> bytes:
    fast = _gzip_fast(mv, max_size)
    if fast is not None:
        return fast
    parts: List[bytes] = []
    total = 0
    data: BytesLike = mv
    while True:
        d = zlib.decompressobj(31)
        try:
            # max_length stops inflating one byte past the budget: a bomb never gets further.
            out = d.decompress(data, max_size - total + 1)
        except zlib.error as e:
            raise DecompressionError(f"corrupt gzip payload: {e}") from e
        total += len(out)
        if total > max_size:
            raise _limit_error("gzip", max_size)
        if not d.eof:
            raise DecompressionError("truncated gzip payload")
        parts.append(out)
        rest = d.unused_data
        # Like GZIPInputStream: another member may follow; anything else after a member is
        # ignored.
        if len(rest) < 2 or rest[:2] != _GZIP_MAGIC:
            break
        data = rest
    return parts[0] if len(parts) == 1 else b"".join(parts)


# ---------------------------------------------------------------------------------------------
# snappy (xerial framing over raw blocks)

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_MAGIC_HEAD = 0x82534E41  # first 4 magic bytes read as a block length: a new stream
_XERIAL_BLOCK_INPUT = 32 * 1024
_XERIAL_MAX_BLOCK = 512 * 1024 * 1024

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


def _snappy_raw_len(sn, block: memoryview) -> int:
    """Uncompressed length a raw block declares in its varint preamble (nothing decoded)."""
    try:
        return sn.decompress_raw_len(block)
    except Exception as e:  # cramjam raises its own DecompressionError type
        raise DecompressionError(f"corrupt snappy block: {e}") from e


def _snappy_decompress(mv: memoryview, max_size: int) -> bytes:
    sn = _snappy_mod()
    if _snappy_c is not None:
        return _snappy_c(mv, max_size, sn.decompress_raw_into)
    return _snappy_decompress_py(mv, max_size, sn)


def _snappy_decompress_py(mv: memoryview, max_size: int, sn) -> bytes:
    """Python twin of the compiled snappy reader (fallback and test oracle)."""
    n = len(mv)
    if n == 0:
        raise DecompressionError("empty snappy payload")
    if n < 16 or mv[:8] != _XERIAL_MAGIC:
        blocks = [mv]
    else:
        # Walk the block lengths first: nothing is decompressed or allocated before the
        # declared total is known to fit in the budget.
        blocks = []
        pos = 16
        while pos < n:
            if n - pos < 4:
                raise DecompressionError("truncated snappy block length")
            (blen,) = struct.unpack_from(">I", mv, pos)
            if blen == _XERIAL_MAGIC_HEAD:
                # A concatenated stream: skip its header if it is a valid one, else stop.
                if n - pos >= 16 and mv[pos:pos + 8] == _XERIAL_MAGIC and \
                        struct.unpack_from(">i", mv, pos + 8)[0] >= 1:
                    pos += 16
                    continue
                break
            if blen >= 0x80000000:
                raise DecompressionError("negative snappy block length")
            if blen > _XERIAL_MAX_BLOCK:
                raise DecompressionError(f"snappy block length {blen} above 512 MiB")
            if blen == 0:
                raise DecompressionError("empty snappy block")
            pos += 4
            if blen > n - pos:
                raise DecompressionError("truncated snappy block")
            blocks.append(mv[pos:pos + blen])
            pos += blen
    sizes = []
    total = 0
    for block in blocks:
        size = _snappy_raw_len(sn, block)
        total += size
        if total > max_size:
            raise _limit_error("snappy", max_size)
        sizes.append(size)
    out = _Output(total)
    ov = out.view
    pos = 0
    for block, size in zip(blocks, sizes):
        try:
            got = sn.decompress_raw_into(block, ov[pos:pos + size])
        except Exception as e:
            out.drop()
            raise DecompressionError(f"corrupt snappy block: {e}") from e
        if got != size:
            out.drop()
            raise DecompressionError("snappy block shorter than its declared length")
        pos += size
    return out.take()


# ---------------------------------------------------------------------------------------------
# lz4 frame

_LZ4_MAGIC = 0x184D2204
_LZ4_MAGIC_BYTES = b"\x04\x22\x4d\x18"
_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}

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


def _window(prev):
    """The last 64 KiB of output: what a linked block may refer back to."""
    return prev[len(prev) - 65536:] if len(prev) > 65536 else prev


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
    if _lz4_frame_c is not None:
        cj = _cramjam_mod()
        return _lz4_frame_c(mv, max_size, block_mod.decompress,
                            cj.lz4.decompress_block_into if cj else None,
                            cj.lz4.decompress_into if cj else None)
    return _lz4_decompress_py(mv, max_size, block_mod)


def _lz4_decompress_py(mv: memoryview, max_size: int, block_mod) -> bytes:
    """The frame walk of the compiled reader, in Python (fallback and test oracle); unlike
    it, this one does not verify block and content checksums."""
    n = len(mv)
    parts: list = []
    total = 0
    pos = 0
    u32 = struct.Struct("<I").unpack_from
    nframes = 0
    while pos < n or nframes == 0:
        if n - pos < 7:
            raise DecompressionError("truncated lz4 frame header")
        (magic,) = u32(mv, pos)
        if magic & 0xFFFFFFF0 == 0x184D2A50:
            # Skippable frame: 4-byte size, then data to ignore.
            if n - pos < 8:
                raise DecompressionError("truncated lz4 skippable frame")
            (skip,) = u32(mv, pos + 4)
            if skip > n - pos - 8:
                raise DecompressionError("truncated lz4 skippable frame")
            pos += 8 + skip
            nframes += 1
            continue
        if magic != _LZ4_MAGIC:
            raise DecompressionError(f"bad lz4 frame magic 0x{magic:08x}")
        flg = mv[pos + 4]
        bd = mv[pos + 5]
        if flg >> 6 != 1:
            raise DecompressionError(f"unsupported lz4 frame version {flg >> 6}")
        if flg & 0x02:
            raise DecompressionError("lz4 frame FLG reserved bit set")
        if flg & 0x01:
            raise DecompressionError("lz4 frame with a dictionary id is not supported")
        linked = not (flg & 0x20)
        block_checksum = bool(flg & 0x10)
        has_size = bool(flg & 0x08)
        content_checksum = bool(flg & 0x04)
        if bd & 0x8F:
            raise DecompressionError("lz4 frame BD reserved bits set")
        block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x07)
        if block_max is None:
            raise DecompressionError(f"bad lz4 block max size id {(bd >> 4) & 7}")
        desc_end = pos + 6 + (8 if has_size else 0)
        if desc_end + 1 > n:
            raise DecompressionError("truncated lz4 frame header")
        # The content size is only a hint: never trusted for allocation, so just skipped.
        hc = mv[desc_end]
        if hc != (xxh32(mv[pos + 4:desc_end]) >> 8) & 0xFF and \
                hc != (xxh32(mv[pos:desc_end]) >> 8) & 0xFF:  # KAFKA-3160 variant
            raise DecompressionError("lz4 frame header checksum mismatch")
        pos = desc_end + 1
        prev = None
        while True:
            if n - pos < 4:
                raise DecompressionError("truncated lz4 block size")
            (bsize,) = u32(mv, pos)
            pos += 4
            if bsize == 0:
                break  # end mark
            stored = bool(bsize & 0x80000000)
            bsize &= 0x7FFFFFFF
            if bsize > block_max:
                raise DecompressionError(f"lz4 block of {bsize} bytes above max {block_max}")
            if bsize > n - pos:
                raise DecompressionError("truncated lz4 block")
            block = mv[pos:pos + bsize]
            pos += bsize
            if block_checksum:
                # xxh32 of each block is not verified (Kafka's reader does not either).
                if n - pos < 4:
                    raise DecompressionError("truncated lz4 block checksum")
                pos += 4
            if stored:
                if total + bsize > max_size:
                    raise _limit_error("lz4", max_size)
                out = block
            else:
                budget = max_size - total
                try:
                    if linked and prev is not None:
                        out = block_mod.decompress(block, uncompressed_size=min(block_max, budget),
                                                   dict=_window(prev))
                    else:
                        out = block_mod.decompress(block, uncompressed_size=min(block_max, budget))
                except Exception as e:
                    if budget < block_max:
                        # Too small a buffer, or corrupt? Decide with the full block size.
                        try:
                            if linked and prev is not None:
                                block_mod.decompress(block, uncompressed_size=block_max,
                                                     dict=_window(prev))
                            else:
                                block_mod.decompress(block, uncompressed_size=block_max)
                        except Exception:
                            pass
                        else:
                            raise _limit_error("lz4", max_size) from None
                    raise DecompressionError(f"corrupt lz4 block: {e}") from e
            total += len(out)
            parts.append(out)
            if linked:
                prev = out
        if content_checksum:
            if n - pos < 4:
                raise DecompressionError("truncated lz4 content checksum")
            pos += 4
        nframes += 1
    if len(parts) == 1:
        p = parts[0]
        return p if isinstance(p, bytes) else bytes(p)
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------
# zstd

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024
_ZSTD_READ_CHUNK = 1024 * 1024

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
        dctx = _local.zd = _zstd_mod().ZstdDecompressor()
    return dctx


def _zstd_frame(mv: memoryview, pos: int):
    """Walk one frame's header and block headers: (end, content_size or -1, upper bound of
    its output). Detects truncation, which the streaming decoder would not report."""
    n = len(mv)
    if n - pos < 6:
        raise DecompressionError("truncated zstd frame header")
    fhd = mv[pos + 4]
    fcs_flag = fhd >> 6
    single = bool(fhd & 0x20)
    if fhd & 0x08:
        raise DecompressionError("zstd frame header reserved bit set")
    checksum = bool(fhd & 0x04)
    did_size = (0, 1, 2, 4)[fhd & 0x03]
    fcs_size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    p = pos + 5 + (0 if single else 1) + did_size
    if p + fcs_size > n:
        raise DecompressionError("truncated zstd frame header")
    if fcs_size == 0:
        content = -1
    else:
        content = int.from_bytes(mv[p:p + fcs_size], "little")
        if fcs_size == 2:
            content += 256
    p += fcs_size
    bound = 0
    while True:
        if n - p < 3:
            raise DecompressionError("truncated zstd block header")
        bh = mv[p] | (mv[p + 1] << 8) | (mv[p + 2] << 16)
        p += 3
        last = bh & 1
        btype = (bh >> 1) & 3
        bsize = bh >> 3
        if btype == 3:
            raise DecompressionError("reserved zstd block type")
        if bsize > _ZSTD_BLOCK_MAX:
            raise DecompressionError("zstd block above 128 KiB")
        if btype == 1:  # RLE: one byte repeated bsize times
            need = 1
            bound += bsize
        else:
            need = bsize
            bound += bsize if btype == 0 else _ZSTD_BLOCK_MAX
        if need > n - p:
            raise DecompressionError("truncated zstd block")
        p += need
        if last:
            break
    if checksum:
        if n - p < 4:
            raise DecompressionError("truncated zstd frame checksum")
        p += 4
    return p, content, bound


def _zstd_decompress(mv: memoryview, max_size: int) -> bytes:
    zstd = _zstd_mod()
    dctx = _zstd_dctx()
    if _zstd_c is not None:
        return _zstd_c(mv, max_size, dctx, zstd.ZstdError)
    return _zstd_decompress_py(mv, max_size, zstd, dctx)


def _zstd_decompress_py(mv: memoryview, max_size: int, zstd, dctx) -> bytes:
    """Python twin of the compiled zstd reader (fallback and test oracle)."""
    n = len(mv)
    if n == 0:
        raise DecompressionError("empty zstd payload")
    parts: list = []
    total = 0
    pos = 0
    u32 = struct.Struct("<I").unpack_from
    while pos < n:
        if n - pos < 4:
            raise DecompressionError("truncated zstd frame magic")
        (magic,) = u32(mv, pos)
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if n - pos < 8 or u32(mv, pos + 4)[0] > n - pos - 8:
                raise DecompressionError("truncated zstd skippable frame")
            pos += 8 + u32(mv, pos + 4)[0]
            continue
        if magic != _ZSTD_MAGIC:
            raise DecompressionError(f"bad zstd frame magic 0x{magic:08x}")
        end, content, bound = _zstd_frame(mv, pos)
        frame = mv[pos:end]
        pos = end
        budget = max_size - total
        if content > bound:
            raise DecompressionError(
                f"zstd frame declares {content} bytes, its blocks hold at most {bound}")
        if content > budget:
            raise _limit_error("zstd", max_size)
        try:
            if content >= 0:
                out = dctx.decompress(frame)
            elif bound <= budget:
                # The walk bounds the output: one exact-size call, no over-read possible.
                out = dctx.decompress(frame, max_output_size=max(bound, 1))
            else:
                out = None
        except zstd.ZstdError as e:
            raise DecompressionError(f"corrupt zstd frame: {e}") from e
        if out is None:
            # Output bound above the budget: stream in chunks and stop past the limit.
            chunks = []
            got = 0
            try:
                reader = dctx.stream_reader(frame)
                while True:
                    chunk = reader.read(min(_ZSTD_READ_CHUNK, budget - got + 1))
                    if not chunk:
                        break
                    got += len(chunk)
                    if got > budget:
                        raise _limit_error("zstd", max_size)
                    chunks.append(chunk)
            except zstd.ZstdError as e:
                raise DecompressionError(f"corrupt zstd frame: {e}") from e
            out = b"".join(chunks)
        total += len(out)
        if total > max_size:
            raise _limit_error("zstd", max_size)
        parts.append(out)
    if not parts:
        raise DecompressionError("zstd payload holds no frame")
    return parts[0] if len(parts) == 1 else b"".join(parts)


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
    _check_limit(max_size)
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
