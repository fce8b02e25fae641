# cython: language_level=3
"""Compiled parts of kafka_proto.compression: the framing loops and the output buffer.

* OutputBuffer: the final ``bytes`` object, allocated uninitialised and exposed as a writable
  buffer while nothing else can see it, so a decoder (cramjam) writes the result in place:
  converting a bytearray with ``bytes()`` would cost a second pass over fresh memory, as much
  as the decompression itself for fast codecs. It is handed out only once fully written.
* xxh32, the LZ4 frame reader, the zstd frame walk, the xerial snappy reader and the gzip
  member loop: header and block-header parsing in C, with every length checked against the
  input end and the output budget before use, and the output written into one buffer (no
  list of pieces joined at the end: memory stays within the output budget). The block
  codecs themselves stay in the libraries (zlib, python-lz4, zstandard, cramjam), which
  release the GIL while they work.
"""
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.string cimport memcpy


cdef extern from "Python.h":
    int _PyBytes_Resize(PyObject** pv, Py_ssize_t newsize) except -1


cdef class OutputBuffer:
    """Writable view onto a new, not yet shared ``bytes`` object of ``size`` bytes.

    The bytes object is immutable for everybody else: it is unreachable until ``take()``,
    which refuses while any buffer view is still open.
    """

    cdef object _obj
    cdef Py_ssize_t _size
    cdef Py_ssize_t _exports

    def __cinit__(self, Py_ssize_t size):
        if size < 0:
            raise ValueError("size must be >= 0")
        self._obj = PyBytes_FromStringAndSize(NULL, size)
        self._size = size
        self._exports = 0

    def __getbuffer__(self, Py_buffer* view, int flags):
        if self._obj is None:
            raise BufferError("output already taken")
        PyBuffer_FillInfo(view, self, PyBytes_AS_STRING(self._obj), self._size, 0, flags)
        self._exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self._exports -= 1

    def __len__(self):
        return self._size

    def take(self, Py_ssize_t size=-1):
        """Return the bytes object (call once, after every writer released its view),
        shrunk in place to ``size`` bytes if given."""
        cdef PyObject* raw
        if self._exports:
            raise BufferError("output still exported")
        if self._obj is None:
            raise BufferError("output already taken")
        if size < 0 or size >= self._size:
            obj = self._obj
            self._obj = None
            return obj
        # _PyBytes_Resize needs the only reference: ours, once the attribute lets go.
        raw = <PyObject*>self._obj
        Py_INCREF(<object>raw)
        self._obj = None
        _PyBytes_Resize(&raw, size)  # frees the object and raises on failure
        obj = <object>raw
        Py_DECREF(obj)
        return obj

    cdef unsigned char* _ptr(self):
        return <unsigned char*>PyBytes_AS_STRING(self._obj)


# ---------------------------------------------------------------------------------------------
# xxHash32 and the LZ4 frame reader. The frame walk is a handful of header fields per 64 KiB
# block; in C it costs well under a microsecond per frame, which matters for the many small
# batches a consumer sees. Blocks are decoded by python-lz4 (`lz4.block.decompress`, passed
# in by the caller), which releases the GIL.

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

from kafka_proto.errors import DecompressionError, DecompressionLimitError

cdef uint32_t _P1 = 2654435761U
cdef uint32_t _P2 = 2246822519U
cdef uint32_t _P3 = 3266489917U
cdef uint32_t _P4 = 668265263U
cdef uint32_t _P5 = 374761393U

cdef enum:
    XXH_NOGIL_MIN = 65536
    # The one-call frame decoder costs ~12 us of set-up: only worth it from a few blocks up.
    LZ4_ONE_CALL_MIN = 256 * 1024
    LZ4_MAGIC = 0x184D2204
    LZ4_SKIPPABLE = 0x184D2A50


cdef inline uint32_t _rotl32(uint32_t x, int r) noexcept nogil:
    return (x << r) | (x >> (32 - r))


cdef inline uint32_t _le32(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0]) | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | \
        (<uint32_t>p[3] << 24)


cdef uint32_t _xxh32(const unsigned char* p, size_t n, uint32_t seed) noexcept nogil:
    cdef const unsigned char* end = p + n
    cdef uint32_t v1, v2, v3, v4, h
    if n >= 16:
        v1 = seed + _P1 + _P2
        v2 = seed + _P2
        v3 = seed
        v4 = seed - _P1
        while p + 16 <= end:
            v1 = _rotl32(v1 + _le32(p) * _P2, 13) * _P1
            v2 = _rotl32(v2 + _le32(p + 4) * _P2, 13) * _P1
            v3 = _rotl32(v3 + _le32(p + 8) * _P2, 13) * _P1
            v4 = _rotl32(v4 + _le32(p + 12) * _P2, 13) * _P1
            p += 16
        h = _rotl32(v1, 1) + _rotl32(v2, 7) + _rotl32(v3, 12) + _rotl32(v4, 18)
    else:
        h = seed + _P5
    h += <uint32_t>n
    while p + 4 <= end:
        h = _rotl32(h + _le32(p) * _P3, 17) * _P4
        p += 4
    while p < end:
        h = _rotl32(h + p[0] * _P5, 11) * _P1
        p += 1
    h ^= h >> 15
    h *= _P2
    h ^= h >> 13
    h *= _P3
    h ^= h >> 16
    return h


cdef uint32_t _xxh32_view(const unsigned char[::1] v, uint32_t seed):
    cdef size_t n = v.shape[0]
    cdef uint32_t h
    if n == 0:
        return _xxh32(NULL, 0, seed)
    if n >= XXH_NOGIL_MIN:
        with nogil:
            h = _xxh32(&v[0], n, seed)
        return h
    return _xxh32(&v[0], n, seed)


def xxh32(data, uint32_t seed=0):
    """xxHash32 of a bytes-like object."""
    return _xxh32_view(data, seed)


cdef class _Lz4Walk:
    """Every data block of the input's LZ4 frames, validated, with an output upper bound."""
    cdef list blocks          # of (start, size, block_max, stored, frame, linked) tuples
    cdef list checksums       # per frame: content checksum to verify, or None
    cdef bint legacy_hc       # some frame has the KAFKA-3160 header checksum
    cdef Py_ssize_t bound     # upper bound of the total output


cdef _Lz4Walk _lz4_walk(const unsigned char* b, Py_ssize_t n):
    cdef _Lz4Walk w = _Lz4Walk.__new__(_Lz4Walk)
    cdef Py_ssize_t pos = 0, desc_end, bsize, block_max
    cdef uint32_t magic, raw, hc
    cdef int flg, bd, nframes = 0
    cdef bint block_checksum, has_size, content_checksum, stored, linked
    w.blocks = []
    w.checksums = []
    w.legacy_hc = False
    w.bound = 0
    while pos < n or nframes == 0:
        if n - pos < 7:
            raise DecompressionError("truncated lz4 frame header")
        magic = _le32(b + pos)
        if (magic & 0xFFFFFFF0U) == LZ4_SKIPPABLE:
            if n - pos < 8 or _le32(b + pos + 4) > <uint64_t>(n - pos - 8):
                raise DecompressionError("truncated lz4 skippable frame")
            pos += 8 + _le32(b + pos + 4)
            nframes += 1
            w.checksums.append(None)
            continue
        if magic != LZ4_MAGIC:
            raise DecompressionError(f"bad lz4 frame magic 0x{magic:08x}")
        flg = b[pos + 4]
        bd = b[pos + 5]
        if flg >> 6 != 1:
            raise DecompressionError(f"unsupported lz4 frame version {flg >> 6}")
        if flg & 0x02:
            raise DecompressionError("lz4 frame FLG reserved bit set")
        if flg & 0x01:
            raise DecompressionError("lz4 frame with a dictionary id is not supported")
        linked = not (flg & 0x20)
        block_checksum = (flg & 0x10) != 0
        has_size = (flg & 0x08) != 0
        content_checksum = (flg & 0x04) != 0
        if bd & 0x8F:
            raise DecompressionError("lz4 frame BD reserved bits set")
        if (bd >> 4) < 4:
            raise DecompressionError(f"bad lz4 block max size id {bd >> 4}")
        block_max = 1 << (8 + 2 * (bd >> 4))  # 4 -> 64 KiB ... 7 -> 4 MiB
        desc_end = pos + 6 + (8 if has_size else 0)
        if desc_end + 1 > n:
            raise DecompressionError("truncated lz4 frame header")
        # The content size is only a hint: never trusted for allocation, so just skipped.
        hc = b[desc_end]
        if hc != ((_xxh32(b + pos + 4, desc_end - pos - 4, 0) >> 8) & 0xFF):
            if hc != ((_xxh32(b + pos, desc_end - pos, 0) >> 8) & 0xFF):  # KAFKA-3160
                raise DecompressionError("lz4 frame header checksum mismatch")
            w.legacy_hc = True
        pos = desc_end + 1
        while True:
            if n - pos < 4:
                raise DecompressionError("truncated lz4 block size")
            raw = _le32(b + pos)
            pos += 4
            if raw == 0:
                break  # end mark
            stored = (raw & 0x80000000U) != 0
            bsize = raw & 0x7FFFFFFF
            if bsize > block_max:
                raise DecompressionError(f"lz4 block of {bsize} bytes above max {block_max}")
            if bsize > n - pos:
                raise DecompressionError("truncated lz4 block")
            if block_checksum:
                if n - pos - bsize < 4:
                    raise DecompressionError("truncated lz4 block checksum")
                if _xxh32(b + pos, bsize, 0) != _le32(b + pos + bsize):
                    raise DecompressionError("lz4 block checksum mismatch")
            w.blocks.append((pos, bsize, block_max, stored, nframes, linked))
            # An LZ4 block expands at most 255:1 (one 255 length byte per input byte).
            w.bound += bsize if stored else min(block_max, 255 * bsize + 64)
            pos += bsize + (4 if block_checksum else 0)
        if content_checksum:
            if n - pos < 4:
                raise DecompressionError("truncated lz4 content checksum")
            w.checksums.append(_le32(b + pos))
            pos += 4
        else:
            w.checksums.append(None)
        nframes += 1
    return w


def lz4_frame_decompress(data, Py_ssize_t max_size, block_decompress,
                         block_decompress_into=None, frame_decompress_into=None):
    """Decode LZ4 frames (concatenated and skippable frames included) into bytes.

    Accepts the correct header checksum and the KAFKA-3160 one (computed from the magic on).
    Block and content checksums are verified when the frame declares them. The output never
    exceeds ``max_size`` (DecompressionLimitError) and is sized from the walk's bound, never
    from the frame's content-size field.

    Decoders, fastest first: ``frame_decompress_into`` (cramjam.lz4.decompress_into) decodes
    the whole input in one call, so in one GIL release (per-block releases cost a thread
    switch interval each when another thread is busy); it does not take the KAFKA-3160
    checksum. ``block_decompress_into`` (cramjam.lz4.decompress_block_into) decodes block by
    block in place; ``block_decompress`` (lz4.block.decompress) also handles linked blocks
    and tells a limit overrun from corruption.
    """
    cdef const unsigned char[::1] v = data
    cdef Py_ssize_t n = v.shape[0]
    cdef _Lz4Walk w
    if n < 7:
        raise DecompressionError("truncated lz4 frame header")
    w = _lz4_walk(&v[0], n)
    mv = memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    # One frame only: cramjam 2.11 stops after the first of concatenated frames (2.14 does not).
    if frame_decompress_into is not None and not w.legacy_hc and len(w.checksums) == 1 and \
            LZ4_ONE_CALL_MIN <= w.bound <= max_size:
        out = _lz4_one_call(w, mv, frame_decompress_into)
        if out is not None:
            return out
        # Otherwise the block-wise decoders below re-decode and name the error precisely.
    return _lz4_blocks(w, &v[0], mv, max_size, block_decompress, block_decompress_into)


cdef object _lz4_one_call(_Lz4Walk w, mv, frame_decompress_into):
    """Whole input in one library call into a buffer of the walk's bound; None on failure."""
    cdef OutputBuffer out = OutputBuffer(w.bound)
    ov = memoryview(out)
    try:
        got = frame_decompress_into(mv, ov)
    except Exception:
        got = -1
    finally:
        ov.release()
    if got < 0 or got > w.bound:
        return None
    return out.take(got)


cdef _limit(Py_ssize_t max_size):
    return DecompressionLimitError(f"lz4 payload expands beyond {max_size} bytes")


cdef _lz4_blocks(_Lz4Walk w, const unsigned char* b, mv, Py_ssize_t max_size,
                 block_decompress, block_decompress_into):
    """Block by block into one buffer of the walk's bound (or the budget, if smaller), so
    memory stays within the output plus one block. Blocks of a linked frame go through
    ``block_decompress`` with the frame's last 64 KiB of output as dictionary."""
    cdef Py_ssize_t cap = w.bound if w.bound < max_size else max_size
    cdef Py_ssize_t out_pos = 0, space, start, size, block_max, got
    cdef Py_ssize_t frame_start = 0
    cdef int frame, cur_frame = 0
    cdef bint stored, linked
    cdef bytes part
    cdef OutputBuffer out = OutputBuffer(cap)
    cdef unsigned char* o = out._ptr()
    ov = memoryview(out)
    try:
        for start, size, block_max, stored, frame, linked in w.blocks:
            if frame != cur_frame:
                _lz4_check_content(w, cur_frame, o + frame_start, out_pos - frame_start)
                for cur_frame in range(cur_frame + 1, frame):  # frames without data
                    _lz4_check_content(w, cur_frame, o, 0)
                cur_frame = frame
                frame_start = out_pos
            if stored:
                if size > cap - out_pos:
                    raise _limit(max_size)  # cap < bound only when cap == max_size
                memcpy(o + out_pos, b + start, size)
                out_pos += size
                continue
            space = cap - out_pos
            if space > block_max:
                space = block_max
            block = mv[start:start + size]
            window = None
            if linked and out_pos > frame_start:
                window = ov[max(frame_start, out_pos - 65536):out_pos]
            if window is None and block_decompress_into is not None:
                try:
                    got = block_decompress_into(block, ov[out_pos:out_pos + space])
                except Exception as e:
                    if space < block_max and _fits(block_decompress, block, block_max):
                        raise _limit(max_size) from None
                    raise DecompressionError(f"corrupt lz4 block: {e}") from e
            else:
                # Decoded at full block size, so an output beyond the space left is a limit
                # overrun, not an error to tell from corruption by decoding again.
                try:
                    if window is None:
                        part = block_decompress(block, block_max)
                    else:
                        part = block_decompress(block, block_max, False, window)
                except Exception as e:
                    raise DecompressionError(f"corrupt lz4 block: {e}") from e
                got = len(part)
                if got > space:
                    raise _limit(max_size)
                memcpy(o + out_pos, <const char*>part, got)
                part = None
            out_pos += got
        _lz4_check_content(w, cur_frame, o + frame_start, out_pos - frame_start)
        # Frames after the last data block (empty or skippable) still declare checksums.
        for frame in range(cur_frame + 1, len(w.checksums)):
            _lz4_check_content(w, frame, o, 0)
    finally:
        window = None  # a view into ov: gone before ov is released
        ov.release()
    return out.take(out_pos)


cdef _lz4_check_content(_Lz4Walk w, int frame, const unsigned char* p, Py_ssize_t n):
    expected = w.checksums[frame]
    if expected is not None and _xxh32(p, n, 0) != <uint32_t>expected:
        raise DecompressionError("lz4 content checksum mismatch")


cdef bint _fits(block_decompress, block, Py_ssize_t block_max):
    """Does the block decode with a full-size buffer? (Tells "over the limit" from corrupt.)"""
    try:
        block_decompress(block, block_max)
    except Exception:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# zstd: a frame walk over the header and block headers (3 bytes per <= 128 KiB block) gives
# each frame's exact extent, so truncation is caught (the streaming decoder would return a
# prefix silently), and an upper bound of its output, so the one-shot decoder can be used with
# an output buffer that is known to suffice and known to fit the budget.

cdef enum:
    ZSTD_MAGIC = 0xFD2FB528
    ZSTD_BLOCK_MAX = 128 * 1024
    ZSTD_FIRST_CAP = 64 * 1024
    ZSTD_PIECE = 256 * 1024

#: Largest decoding window allowed (``max_window_size`` of the decompressor to pass in).
#: Every zstd decoder streams a frame that does not declare its content size (and the
#: frames of a payload of several) through a window it allocates beside the output: up to
#: 128 MiB, as much memory again as the budget. 8 MiB takes the windows of zstd levels up
#: to 19 (Kafka's default level 3 uses 2 MiB).
ZSTD_MAX_WINDOW = 8 * 1024 * 1024


cdef Py_ssize_t _zstd_walk(const unsigned char* b, Py_ssize_t n, Py_ssize_t pos,
                           int64_t* content, Py_ssize_t* bound, uint64_t* window) except -1:
    """Walk the frame at pos (magic already checked); return its end."""
    cdef int fhd, fcs_size, did_size, i, wd
    cdef bint single
    cdef Py_ssize_t p
    cdef uint64_t fcs = 0
    cdef uint32_t bh, bsize, btype
    if n - pos < 6:
        raise DecompressionError("truncated zstd frame header")
    fhd = b[pos + 4]
    single = (fhd & 0x20) != 0
    if fhd & 0x08:
        raise DecompressionError("zstd frame header reserved bit set")
    did_size = (0, 1, 2, 4)[fhd & 0x03]
    fcs_size = ((1 if single else 0), 2, 4, 8)[fhd >> 6]
    p = pos + 5 + (0 if single else 1) + did_size
    if fcs_size > n - p:
        raise DecompressionError("truncated zstd frame header")
    for i in range(fcs_size):
        fcs |= (<uint64_t>b[p + i]) << (8 * i)
    if single:  # no window descriptor: the window is the content
        window[0] = fcs + 256 if fcs_size == 2 else fcs
    else:
        wd = b[pos + 5]
        window[0] = <uint64_t>1 << (10 + (wd >> 3))
        window[0] += (window[0] >> 3) * (wd & 7)
    if fcs_size == 0:
        content[0] = -1
    elif fcs_size == 2:
        content[0] = <int64_t>fcs + 256
    elif fcs > <uint64_t>0x7FFFFFFFFFFFFFFF:
        raise DecompressionError("zstd frame content size out of range")
    else:
        content[0] = <int64_t>fcs
    p += fcs_size
    bound[0] = 0
    while True:
        if n - p < 3:
            raise DecompressionError("truncated zstd block header")
        bh = (<uint32_t>b[p]) | (<uint32_t>b[p + 1] << 8) | (<uint32_t>b[p + 2] << 16)
        p += 3
        btype = (bh >> 1) & 3
        bsize = bh >> 3
        if btype == 3:
            raise DecompressionError("reserved zstd block type")
        if bsize > ZSTD_BLOCK_MAX:
            raise DecompressionError("zstd block above 128 KiB")
        if btype == 1:  # RLE: one stored byte, repeated bsize times
            bound[0] += bsize
            bsize = 1
        else:
            bound[0] += bsize if btype == 0 else ZSTD_BLOCK_MAX
        if bsize > n - p:
            raise DecompressionError("truncated zstd block")
        p += bsize
        if bh & 1:  # last block
            break
    if fhd & 0x04:  # content checksum
        if n - p < 4:
            raise DecompressionError("truncated zstd frame checksum")
        p += 4
    return p


def zstd_frame_info(data, Py_ssize_t pos=0):
    """(end, content size or -1, output upper bound) of the zstd frame at ``pos``."""
    cdef const unsigned char[::1] v = data
    cdef int64_t content
    cdef uint64_t window
    cdef Py_ssize_t bound, end
    if pos < 0 or pos > v.shape[0]:
        raise ValueError("pos out of range")
    if v.shape[0] - pos < 4 or _le32(&v[0] + pos) != ZSTD_MAGIC:
        raise DecompressionError("no zstd frame magic")
    end = _zstd_walk(&v[0], v.shape[0], pos, &content, &bound, &window)
    return end, content, bound


def zstd_decompress(data, Py_ssize_t max_size, dctx, zstd_error):
    """Decode every zstd frame of ``data`` (skippable frames ignored), at most ``max_size``
    bytes out. ``dctx`` is a zstandard.ZstdDecompressor, ``zstd_error`` its exception type.

    Every frame is walked before anything is decoded. One frame whose output is bounded
    within the budget (a declared content size, or its blocks) is decoded in one call;
    otherwise the frames are streamed (see _zstd_stream)."""
    cdef const unsigned char[::1] v = data
    cdef const unsigned char* b = NULL
    cdef Py_ssize_t n = v.shape[0], pos = 0, end, bound, known = 0
    cdef int64_t content
    cdef uint64_t window
    cdef uint32_t magic, skip
    cdef list frames = []
    if n == 0:
        raise DecompressionError("empty zstd payload")
    b = &v[0]
    while pos < n:
        if n - pos < 4:
            raise DecompressionError("truncated zstd frame magic")
        magic = _le32(b + pos)
        if (magic & 0xFFFFFFF0U) == LZ4_SKIPPABLE:  # same skippable-frame range as LZ4
            if n - pos < 8:
                raise DecompressionError("truncated zstd skippable frame")
            skip = _le32(b + pos + 4)
            if skip > <uint64_t>(n - pos - 8):
                raise DecompressionError("truncated zstd skippable frame")
            pos += 8 + skip
            continue
        if magic != ZSTD_MAGIC:
            raise DecompressionError(f"bad zstd frame magic 0x{magic:08x}")
        end = _zstd_walk(b, n, pos, &content, &bound, &window)
        if content > bound:
            raise DecompressionError(
                f"zstd frame declares {content} bytes, its blocks hold at most {bound}")
        if content >= 0:
            known += content
            if known > max_size:
                raise _zstd_limit(max_size)
        frames.append((pos, end, content, bound, window))
        pos = end
    if not frames:
        raise DecompressionError("zstd payload holds no frame")
    # A streamed frame gets a window of min(window size, content size) beside the output;
    # only the one frame of a payload that declares its size is decoded in one pass,
    # without a window.
    for _s, _e, content, _b, window in frames:
        if (content < 0 or len(frames) > 1) and window > ZSTD_MAX_WINDOW and \
                (content < 0 or <uint64_t>content > ZSTD_MAX_WINDOW):
            raise DecompressionLimitError(
                f"zstd frame needs a decoding window of {window} bytes, above the "
                f"{ZSTD_MAX_WINDOW} allowed (written at zstd level 20 or above?)")
    mv = memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    if len(frames) == 1:
        pos, end, content, bound, window = frames[0]
        frame = data if pos == 0 and end == n else mv[pos:end]
        try:
            if content >= 0:
                return dctx.decompress(frame)
            if bound <= max_size:
                # The walk bounds the output: one call with a buffer known to suffice.
                return dctx.decompress(frame, max_output_size=bound if bound > 0 else 1)
        except zstd_error as e:
            raise DecompressionError(f"corrupt zstd frame: {e}") from e
    return _zstd_stream(frames, mv, max_size, dctx, zstd_error)


cdef _zstd_limit(Py_ssize_t max_size):
    return DecompressionLimitError(f"zstd payload expands beyond {max_size} bytes")


cdef bytes _zstd_stream(list frames, mv, Py_ssize_t max_size, dctx, zstd_error):
    """Stream the frames into a first buffer of 64 KiB; an output that does not fit is
    only counted on, then decoded again into a buffer of exactly its size. Memory is the
    output, one piece and the decoder's window; a bomb costs a piece and the window."""
    cdef OutputBuffer out = OutputBuffer(ZSTD_FIRST_CAP if ZSTD_FIRST_CAP < max_size
                                         else max_size)
    cdef Py_ssize_t total, again
    total = _zstd_frames(frames, mv, max_size, dctx, zstd_error, out)
    if total > len(out):
        out = OutputBuffer(total)
        again = _zstd_frames(frames, mv, max_size, dctx, zstd_error, out)
        if again != total:
            raise DecompressionError(f"zstd payload decoded to {total}, then {again} bytes")
    return out.take(total)


cdef Py_ssize_t _zstd_frames(list frames, mv, Py_ssize_t max_size, dctx, zstd_error,
                             OutputBuffer out) except -1:
    """Decode every frame: into ``out`` while it has room, then only counting. Returns the
    output size."""
    cdef Py_ssize_t cap = len(out), pos = 0, frame_start, got
    cdef int64_t content
    scratch = None
    ov = memoryview(out)
    try:
        for start, end, content, _bound, _window in frames:
            frame_start = pos
            try:
                reader = dctx.stream_reader(mv[start:end])
                while True:
                    if pos > max_size:
                        raise _zstd_limit(max_size)
                    if pos < cap:
                        got = reader.readinto(ov[pos:])
                    else:
                        if scratch is None:
                            scratch = bytearray(ZSTD_PIECE)
                        got = reader.readinto(scratch)
                    if got == 0:
                        break
                    pos += got
            except zstd_error as e:
                raise DecompressionError(f"corrupt zstd frame: {e}") from e
            if content >= 0 and pos - frame_start != content:
                raise DecompressionError(
                    f"zstd frame declares {content} bytes and holds {pos - frame_start}")
    finally:
        ov.release()
    return pos


# ---------------------------------------------------------------------------------------------
# gzip: zlib inflates, taking its output in pieces straight into one buffer. Python's
# zlib.decompress(data, max_length) collects its output in blocks and joins them, twice the
# output in memory at the end. Here the pieces go into a first buffer of 64 KiB (most
# outputs that come here are small: larger single members take the trailer-sized path of
# compression.py); an output that does not fit is only counted on, then decoded again into
# a buffer of exactly its size. Memory is the output and one piece; a bomb costs a piece.

import zlib

cdef enum:
    GZIP_PIECE = 256 * 1024         # output taken from zlib per call
    GZIP_FEED_FIRST = 4096          # input given per call at the start of a member, doubling
    GZIP_FEED_MAX = 256 * 1024
    GZIP_FIRST_CAP = 64 * 1024


def gzip_decompress(data, Py_ssize_t max_size):
    """Inflate the gzip members of ``data`` into bytes of at most ``max_size``.

    Concatenated members are read; anything after a member that is not another member is
    ignored (as GZIPInputStream does)."""
    cdef const unsigned char[::1] v = data
    cdef OutputBuffer out
    cdef Py_ssize_t total, again
    mv = memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    out = OutputBuffer(GZIP_FIRST_CAP if GZIP_FIRST_CAP < max_size else max_size)
    total = _gzip_inflate(v, mv, max_size, out)
    if total > len(out):
        out = OutputBuffer(total)
        again = _gzip_inflate(v, mv, max_size, out)
        if again != total:
            raise DecompressionError(f"gzip payload inflated to {total}, then {again} bytes")
    return out.take(total)


cdef Py_ssize_t _gzip_inflate(const unsigned char[::1] v, mv, Py_ssize_t max_size,
                              OutputBuffer out) except -1:
    """Inflate every member: into ``out`` while it has room, then only counting. Returns
    the output size. The input is fed a little at a time, growing, so that zlib's copy of
    the input left after a member stays small whatever the number of members."""
    cdef Py_ssize_t n = v.shape[0], cap = len(out), pos = 0, ipos = 0, feed, want, k
    cdef unsigned char* o = out._ptr()
    cdef bytes piece
    while True:
        d = zlib.decompressobj(31)
        feed = GZIP_FEED_FIRST
        while True:
            want = GZIP_PIECE if GZIP_PIECE <= max_size - pos else max_size - pos + 1
            chunk = mv[ipos:ipos + feed]
            try:
                piece = d.decompress(chunk, want)
            except zlib.error as e:
                raise DecompressionError(f"corrupt gzip payload: {e}") from e
            k = len(piece)
            if k > max_size - pos:
                raise DecompressionLimitError(f"gzip payload expands beyond {max_size} bytes")
            if pos + k <= cap:
                memcpy(o + pos, <const char*>piece, k)
            elif pos < cap:
                memcpy(o + pos, <const char*>piece, cap - pos)
            pos += k
            if d.eof:
                ipos += len(chunk) - len(d.unused_data)
                break
            ipos += len(chunk) - len(d.unconsumed_tail)
            if k < want:  # zlib wants more input
                if ipos >= n:
                    raise DecompressionError("truncated gzip payload")
                if feed < GZIP_FEED_MAX:
                    feed *= 2
        if n - ipos < 2 or v[ipos] != 0x1F or v[ipos + 1] != 0x8B:
            return pos


# ---------------------------------------------------------------------------------------------
# snappy, xerial stream framing (snappy-java's SnappyOutputStream) or one raw block. The walk
# reads each block's varint preamble (its uncompressed length) in C: the total is known and
# checked against the budget before anything is allocated or decoded, then every block is
# decoded by cramjam straight into the final bytes object.

from kafka_proto._varint cimport read_uvarint64, VARINT_OK

cdef uint32_t _XERIAL_HEAD = 0x82534E41U  # first 4 magic bytes, read as a block length
cdef bytes _XERIAL_MAGIC = b"\x82SNAPPY\x00"
cdef enum:
    XERIAL_MAX_BLOCK = 512 * 1024 * 1024


cdef inline uint32_t _be32(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | \
        (<uint32_t>p[3])


cdef inline bint _is_xerial_header(const unsigned char* p) noexcept nogil:
    return (p[0] == 0x82 and p[1] == 0x53 and p[2] == 0x4E and p[3] == 0x41 and p[4] == 0x50
            and p[5] == 0x50 and p[6] == 0x59 and p[7] == 0x00)


cdef Py_ssize_t _xerial_next(const unsigned char* b, Py_ssize_t n, Py_ssize_t pos,
                             Py_ssize_t* blen) except -2:
    """From a block-length position: the start of the next block (its length in blen), or
    -1 at the end of the stream."""
    cdef uint32_t raw
    while True:
        if pos >= n:
            return -1
        if n - pos < 4:
            raise DecompressionError("truncated snappy block length")
        raw = _be32(b + pos)
        if raw == _XERIAL_HEAD:
            # A concatenated stream: skip its header if it is a valid one, else stop.
            if n - pos >= 16 and _is_xerial_header(b + pos) and \
                    <int32_t>_be32(b + pos + 8) >= 1:
                pos += 16
                continue
            return -1
        if raw >= 0x80000000U:
            raise DecompressionError("negative snappy block length")
        if raw > XERIAL_MAX_BLOCK:
            raise DecompressionError(f"snappy block length {raw} above 512 MiB")
        if raw == 0:
            raise DecompressionError("empty snappy block")
        pos += 4
        if raw > n - pos:
            raise DecompressionError("truncated snappy block")
        blen[0] = raw
        return pos


cdef Py_ssize_t _snappy_len(const unsigned char* p, Py_ssize_t n) except -1:
    """Uncompressed length from a raw block's varint preamble."""
    cdef uint64_t size
    cdef Py_ssize_t used
    if read_uvarint64(p, p + n, 5, &size, &used) != VARINT_OK or size > 0xFFFFFFFFU:
        raise DecompressionError("corrupt snappy block: bad length preamble")
    return <Py_ssize_t>size


def snappy_decompress(data, Py_ssize_t max_size, decompress_raw_into):
    """Decode a xerial snappy stream, or a single raw snappy block, into bytes of at most
    ``max_size``. ``decompress_raw_into`` is cramjam.snappy.decompress_raw_into."""
    cdef const unsigned char[::1] v = data
    cdef Py_ssize_t n = v.shape[0], pos, start, blen = 0, total = 0, size, out_pos
    cdef const unsigned char* b
    cdef bint xerial
    cdef OutputBuffer out
    if n == 0:
        raise DecompressionError("empty snappy payload")
    b = &v[0]
    xerial = n >= 16 and _is_xerial_header(b)
    # Pass 1: sum of the declared lengths, against the budget.
    if xerial:
        pos = 16
        while True:
            start = _xerial_next(b, n, pos, &blen)
            if start < 0:
                break
            total += _snappy_len(b + start, blen)
            if total > max_size:
                raise DecompressionLimitError(f"snappy payload expands beyond {max_size} bytes")
            pos = start + blen
    else:
        total = _snappy_len(b, n)
        if total > max_size:
            raise DecompressionLimitError(f"snappy payload expands beyond {max_size} bytes")
    # Pass 2: decode each block into its place in the result.
    mv = memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    out = OutputBuffer(total)
    ov = memoryview(out)
    try:
        if not xerial:
            _snappy_block(decompress_raw_into, mv, ov, total)
        else:
            pos = 16
            out_pos = 0
            while True:
                start = _xerial_next(b, n, pos, &blen)
                if start < 0:
                    break
                size = _snappy_len(b + start, blen)
                _snappy_block(decompress_raw_into, mv[start:start + blen],
                              ov[out_pos:out_pos + size], size)
                out_pos += size
                pos = start + blen
    finally:
        ov.release()
    return out.take()


cdef _snappy_block(decompress_raw_into, block, dest, Py_ssize_t size):
    try:
        got = decompress_raw_into(block, dest)
    except Exception as e:
        raise DecompressionError(f"corrupt snappy block: {e}") from e
    if got != size:
        raise DecompressionError("snappy block shorter than its declared length")
