# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""RecordBatch v2 (magic 2): builder, reader and the ``read_batches`` dispatcher.

The builder encodes each record straight into its private, growing bytes buffer;
``build()`` fills the 61-byte header, compresses the records section if asked, computes the
CRC-32C and hands the buffer out without copying it.

The reader walks a bytes-like buffer without copying it: every batch header is validated
when the batch is yielded (lengths, magic, CRC-32C, codec id, records count). Records are
parsed one by one as the batch is iterated (a compressed batch is decompressed once, on the
first iteration); key and value are copied into bytes objects, so a Record outlives the
buffer. Every length read from the wire is checked against the end of the batch (or of its
record) before it is used; nothing is allocated from an unchecked length.

Errors (all from :mod:`kafka_proto.errors`, all subclasses of ``KafkaProtocolError``):

* ``InvalidLengthError``: batchLength negative or smaller than the format's minimum,
  recordsCount negative or larger than the bytes can hold, a record / key / value / header
  length negative (where not allowed) or beyond the end of its record or batch.
* ``TruncatedDataError``: a varint runs past the end of its record or batch; also a
  truncated last batch when ``allow_truncated=False``.
* ``InvalidVarintError``: a varint longer than its type allows.
* ``CorruptRecordError``: a record's fields do not fill exactly its declared length, bytes
  left over after the last record, an invalid control record, a batch whose last offset
  (base offset + lastOffsetDelta) leaves no next offset below 2^63.
* ``CrcMismatchError``: CRC-32C mismatch (only when ``check_crc`` is true).
* ``UnsupportedMagicError``: a magic other than 0, 1 or 2.
* ``UnsupportedCompressionError``: codec id 5-7 (or a codec whose library is missing).
* ``DecompressionError`` / ``DecompressionLimitError``: corrupt or oversized compressed data.
"""
cimport cython
from cpython.bytes cimport (
    PyBytes_AS_STRING,
    PyBytes_CheckExact,
    PyBytes_FromStringAndSize,
    PyBytes_GET_SIZE,
)
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.unicode cimport PyUnicode_CheckExact, PyUnicode_DecodeUTF8
from libc.stdint cimport INT64_MAX, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from kafka_proto._cpython_internals cimport (
    KP_LIKELY,
    KP_SLOT_SET,
    kp_append_parse,
    kp_install_append,
    kp_internals_enabled,
    kp_rec_make,
    kp_record_install,
    kp_slot_offset,
    kp_small_int64,
)
from kafka_proto._crc cimport crc32c_update
from kafka_proto._varint cimport (
    VARINT_OK,
    VARINT_TRUNCATED,
    read_varint32,
    read_varint64,
    uvarint_size,
    varint_size,
    write_uvarint64,
    write_varint64,
    zigzag64,
)

import sys
from enum import IntEnum
from types import MemberDescriptorType as _MemberDescriptor

from kafka_proto.errors import (
    CorruptRecordError,
    CrcMismatchError,
    InvalidLengthError,
    InvalidVarintError,
    ProtocolEncodeError,
    TruncatedDataError,
    UnsupportedCompressionError,
    UnsupportedMagicError,
)

from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF

cdef extern from "Python.h":
    int _PyBytes_Resize(PyObject** obj, Py_ssize_t newsize)
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    object PyMemoryView_FromMemory(char* mem, Py_ssize_t size, int flags)
    int PyBUF_READ

cdef extern from "kp_bytes.h":
    object kp_bytes_new(const unsigned char* p, Py_ssize_t n)


# The CPython internals of _cpython_internals (see _c/cpython_internals.h) are used only
# where they were verified, unless KAFKA_NATIVE_PLAIN=1; otherwise every place that would
# use them takes a plain path through the documented C API. Chosen once, at import.
cdef bint _FAST = kp_internals_enabled()

#: True when this module uses its CPython-specific fast paths (see kafka_proto/_c/
#: cpython_internals.h), False on the plain path (other interpreters, KAFKA_NATIVE_PLAIN=1).
FAST_PATH = bool(_FAST)

cdef object _object_new = object.__new__


class Compression(IntEnum):
    """Compression codec ids (attribute bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    """Timestamp type (attribute bit 3)."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


# Header layout (offsets into the batch) and limits.
cdef enum:
    OFF_BASE_OFFSET = 0
    OFF_LENGTH = 8
    OFF_PLE = 12
    OFF_MAGIC = 16
    OFF_CRC = 17
    OFF_ATTRIBUTES = 21
    OFF_LAST_OFFSET_DELTA = 23
    OFF_BASE_TIMESTAMP = 27
    OFF_MAX_TIMESTAMP = 35
    OFF_PRODUCER_ID = 43
    OFF_PRODUCER_EPOCH = 51
    OFF_BASE_SEQUENCE = 53
    OFF_RECORDS_COUNT = 57
    HEADER_SIZE = 61
    LOG_OVERHEAD = 12            # baseOffset + batchLength
    LEGACY_MIN_MESSAGE = 14      # smallest legacy v0 message (after offset+size)
    MIN_RECORD_BODY = 6          # attributes + 5 one-byte varints
    MIN_RECORD_WIRE = 7          # the length varint + MIN_RECORD_BODY
    MAX_BATCH_SIZE = 0x7FFFFFFF  # batchLength is an int32
    GROW_FAST_LIMIT = 131072 - 128  # see _grow
    SIMPLE_MAX_DATA = 8000         # see _put_simple
    # A headerless record's fields besides key and value (attributes, timestamp delta,
    # offset delta, key and value lengths up to SIMPLE_MAX_DATA, header count): at most
    # and at least this many bytes.
    SIMPLE_MAX_FIELDS = 1 + 10 + 5 + 2 + 2 + 1
    SIMPLE_MIN_FIELDS = 6
    CRC_NOGIL_THRESHOLD = 65536  # release the GIL only where the CRC takes longer than that dance
    ATTR_CODEC_MASK = 0x07
    ATTR_TIMESTAMP_TYPE = 0x08
    ATTR_TRANSACTIONAL = 0x10
    ATTR_CONTROL = 0x20
    ATTR_DELETE_HORIZON = 0x40
    DEFAULT_MAX_DECOMPRESSED = 64 * 1024 * 1024
    DECOMPRESSED_RATIO_LIMIT = 64

DEFAULT_MAX_DECOMPRESSED_SIZE = DEFAULT_MAX_DECOMPRESSED

cdef tuple _COMPRESSIONS = tuple(Compression)
cdef tuple _TIMESTAMP_TYPES = tuple(TimestampType)


# ---------------------------------------------------------------------------------------
# Big-endian fixed-width helpers.

cdef inline void _put_i16(unsigned char* p, int16_t v) noexcept nogil:
    cdef uint16_t u = <uint16_t>v
    p[0] = <unsigned char>(u >> 8)
    p[1] = <unsigned char>u


cdef inline void _put_i32(unsigned char* p, int32_t v) noexcept nogil:
    cdef uint32_t u = <uint32_t>v
    p[0] = <unsigned char>(u >> 24)
    p[1] = <unsigned char>(u >> 16)
    p[2] = <unsigned char>(u >> 8)
    p[3] = <unsigned char>u


cdef inline void _put_i64(unsigned char* p, int64_t v) noexcept nogil:
    _put_i32(p, <int32_t>(<uint64_t>v >> 32))
    _put_i32(p + 4, <int32_t>(<uint64_t>v & 0xFFFFFFFFu))


cdef inline int16_t _get_i16(const unsigned char* p) noexcept nogil:
    return <int16_t>((<uint16_t>p[0] << 8) | p[1])


cdef inline uint32_t _get_u32(const unsigned char* p) noexcept nogil:
    return ((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16)
            | (<uint32_t>p[2] << 8) | <uint32_t>p[3])


cdef inline int32_t _get_i32(const unsigned char* p) noexcept nogil:
    return <int32_t>_get_u32(p)


cdef inline int64_t _get_i64(const unsigned char* p) noexcept nogil:
    return <int64_t>((<uint64_t>_get_u32(p) << 32) | _get_u32(p + 4))


cdef inline int64_t _now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef uint32_t _crc32c(const unsigned char* p, Py_ssize_t n) noexcept:
    cdef uint32_t crc
    if n >= CRC_NOGIL_THRESHOLD:
        with nogil:
            crc = crc32c_update(0, p, <size_t>n)
        return crc
    return crc32c_update(0, p, <size_t>n)


cdef inline Py_ssize_t _vsize(int64_t v) noexcept nogil:
    # Zigzag varint size with the common 1- and 2-byte cases unrolled.
    cdef uint64_t u = zigzag64(v)
    if u < 0x80:
        return 1
    if u < 0x4000:
        return 2
    return uvarint_size(u)


cdef inline unsigned char* _vput(unsigned char* p, int64_t v) noexcept nogil:
    # Write a zigzag varint (room guaranteed by the caller); returns the new end.
    cdef uint64_t u = zigzag64(v)
    if u < 0x80:
        p[0] = <unsigned char>u
        return p + 1
    if u < 0x4000:
        p[0] = <unsigned char>(u | 0x80)
        p[1] = <unsigned char>(u >> 7)
        return p + 2
    return p + write_uvarint64(p, u)


cdef inline int _rv32(const unsigned char* p, const unsigned char* end, int32_t* out,
                     Py_ssize_t* used) noexcept nogil:
    # Zigzag varint with the 1- and 2-byte cases unrolled; the shared reader does the rest.
    cdef uint32_t u
    if end - p >= 2:
        if not (p[0] & 0x80):
            u = p[0]
            used[0] = 1
            out[0] = <int32_t>((u >> 1) ^ (0u - (u & 1)))
            return VARINT_OK
        if not (p[1] & 0x80):
            u = (p[0] & 0x7Fu) | (<uint32_t>p[1] << 7)
            used[0] = 2
            out[0] = <int32_t>((u >> 1) ^ (0u - (u & 1)))
            return VARINT_OK
    return read_varint32(p, end, out, used)


cdef inline int _rv64(const unsigned char* p, const unsigned char* end, int64_t* out,
                     Py_ssize_t* used) noexcept nogil:
    cdef uint64_t u
    if end - p >= 2:
        if not (p[0] & 0x80):
            u = p[0]
            used[0] = 1
            out[0] = <int64_t>((u >> 1) ^ (0u - (u & 1)))
            return VARINT_OK
        if not (p[1] & 0x80):
            u = (p[0] & 0x7Fu) | (<uint64_t>p[1] << 7)
            used[0] = 2
            out[0] = <int64_t>((u >> 1) ^ (0u - (u & 1)))
            return VARINT_OK
    return read_varint64(p, end, out, used)


cdef inline void _copy(unsigned char* dst, const unsigned char* src, Py_ssize_t n) noexcept nogil:
    # Keys are often short: two overlapping fixed-size moves beat a call into libc there.
    if n <= 16:
        if n >= 8:
            memcpy(dst, src, 8)
            memcpy(dst + n - 8, src + n - 8, 8)
        elif n >= 4:
            memcpy(dst, src, 4)
            memcpy(dst + n - 4, src + n - 4, 4)
        else:
            while n > 0:
                n -= 1
                dst[n] = src[n]
    else:
        memcpy(dst, src, n)


cdef inline unsigned char* _put_fields(unsigned char* p, int64_t delta, int32_t offset_delta,
                                       const unsigned char* kp, Py_ssize_t kl,
                                       const unsigned char* vp, Py_ssize_t vl) noexcept nogil:
    # A record's fields from its attributes to its value (room guaranteed by the caller);
    # returns the end, where the header count goes.
    p[0] = 0  # record attributes: unused
    p = _vput(p + 1, delta)
    p = _vput(p, offset_delta)
    p = _vput(p, kl)
    if kl > 0:
        _copy(p, kp, kl)
        p += kl
    p = _vput(p, vl)
    if vl > 0:
        _copy(p, vp, vl)
        p += vl
    return p


cdef object _compression_module = None


cdef object _compression():
    # Imported on first use: compression.py is optional for uncompressed traffic.
    global _compression_module
    if _compression_module is None:
        import kafka_proto.compression as mod
        _compression_module = mod
    return _compression_module


# ---------------------------------------------------------------------------------------
# Builder

@cython.final
cdef class RecordBatchBuilder:
    """Builds one v2 record batch; records are encoded into the batch buffer on append.

    ``producer_id``, ``producer_epoch``, ``base_sequence`` and ``partition_leader_epoch``
    stay writable until ``build()`` (an idempotent producer assigns the sequence late).
    ``control=True`` sets the control bit (transaction markers, see records.control).
    ``initial_capacity``: first size of the buffer (default 16 KiB, Java's batch.size
    default); it grows as needed (8x up to just under 128 KiB, then 2x), so a producer that
    knows its batch.size should pass it.
    """

    # The batch is encoded straight into a private bytes object (sole reference, so it may
    # be written and resized); build() shrinks it and hands it out without a copy.
    cdef PyObject* _obj
    cdef unsigned char* _buf
    cdef bytes _built         # the last uncompressed build(), to continue after it
    cdef Py_ssize_t _len
    cdef Py_ssize_t _cap
    cdef int32_t _count
    cdef int64_t _base_ts
    cdef int64_t _max_ts
    cdef int _codec
    cdef int _ts_type
    cdef bint _transactional
    cdef bint _control
    cdef bint _building
    cdef object _level
    cdef public int64_t producer_id
    cdef public int16_t producer_epoch
    cdef public int32_t base_sequence
    cdef public int32_t partition_leader_epoch

    def __cinit__(self, compression=0, compression_level=None, int64_t producer_id=-1,
                  int16_t producer_epoch=-1, int32_t base_sequence=-1,
                  bint transactional=False, int32_t partition_leader_epoch=-1,
                  timestamp_type=0, *, bint control=False, Py_ssize_t initial_capacity=16384):
        cdef int codec = compression
        cdef int tst = timestamp_type
        if codec < 0 or codec > 4:
            raise UnsupportedCompressionError(f"unknown compression codec id {codec}")
        if tst != 0 and tst != 1:
            raise ValueError(f"timestamp_type must be 0 or 1, got {tst}")
        if initial_capacity < HEADER_SIZE + 64:
            initial_capacity = HEADER_SIZE + 64
        self._obj = NULL
        self._buf = NULL
        self._cap = 0
        self._new_buffer(initial_capacity, 0)
        self._len = HEADER_SIZE
        self._count = 0
        self._base_ts = -1
        self._max_ts = -1
        self._codec = codec
        self._ts_type = tst
        self._transactional = transactional
        self._control = control
        self._building = False
        self._level = compression_level
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch

    def __dealloc__(self):
        Py_XDECREF(self._obj)
        self._obj = NULL
        self._buf = NULL

    cdef int _new_buffer(self, Py_ssize_t cap, Py_ssize_t keep) except -1:
        # A fresh private bytes object of ``cap`` bytes holding the first ``keep`` bytes of
        # the last build (after build() gave the previous buffer away).
        cdef object fresh = PyBytes_FromStringAndSize(NULL, cap)
        if keep and self._built is not None and keep <= PyBytes_GET_SIZE(self._built):
            memcpy(PyBytes_AS_STRING(fresh), PyBytes_AS_STRING(self._built), keep)
        Py_XDECREF(self._obj)
        self._obj = <PyObject*>fresh
        Py_INCREF(fresh)
        self._buf = <unsigned char*>PyBytes_AS_STRING(fresh)
        self._cap = cap
        return 0

    def __len__(self):
        return self._count

    @property
    def size_in_bytes(self) -> int:
        """Bytes the batch takes uncompressed (header + records encoded so far)."""
        return self._len

    @property
    def compression(self):
        """The codec ``build()`` compresses with. Settable until then: a producer learns
        only when it sends a batch whether the broker takes its codec (zstd needs
        Produce v7)."""
        return _COMPRESSIONS[self._codec]

    @compression.setter
    def compression(self, value):
        cdef int codec = value
        if codec < 0 or codec > 4:
            raise UnsupportedCompressionError(f"unknown compression codec id {codec}")
        self._codec = codec

    @property
    def is_transactional(self) -> bool:
        return self._transactional

    @property
    def is_control(self) -> bool:
        return self._control

    @property
    def max_timestamp(self) -> int:
        return self._max_ts

    cdef int _grow(self, Py_ssize_t extra) except -1:
        cdef Py_ssize_t need = self._len + extra
        cdef Py_ssize_t cap
        if need > MAX_BATCH_SIZE:
            raise ProtocolEncodeError("record batch would exceed 2 GiB")
        # 8x while the buffer is small, up to just under 128 KiB (glibc's default mmap
        # threshold, so the buffer stays on the heap), then 2x: a batch that outgrew its
        # first buffer is copied once on its way to 100 KiB, not three times.
        if self._cap < GROW_FAST_LIMIT:
            cap = self._cap * 8
            if cap > GROW_FAST_LIMIT:
                cap = GROW_FAST_LIMIT
        else:
            cap = self._cap * 2
        if cap < 256:
            cap = 256
        while cap < need:
            cap *= 2
        if cap > MAX_BATCH_SIZE:
            cap = MAX_BATCH_SIZE
        if self._obj == NULL:
            return self._new_buffer(cap, self._len)
        if _PyBytes_Resize(&self._obj, cap) < 0:
            self._obj = NULL
            self._buf = NULL
            self._cap = 0
            self._len = HEADER_SIZE
            self._count = 0
            raise MemoryError()
        self._buf = <unsigned char*>PyBytes_AS_STRING(<object>self._obj)
        self._cap = cap
        return 0

    cdef list _normalize_headers(self, object headers, Py_ssize_t* size_out):
        # Returns [(key, value)] with key str/bytes and value bytes/None (immutable, so the
        # sizes computed here still hold when writing), and the encoded size of the headers.
        cdef list out = []
        cdef Py_ssize_t size = 0
        cdef Py_ssize_t kl, vl
        for h in headers:
            k, v = h
            if PyUnicode_CheckExact(k) or isinstance(k, str):
                PyUnicode_AsUTF8AndSize(k, &kl)
            elif isinstance(k, (bytes, bytearray, memoryview)):
                k = bytes(k)
                kl = PyBytes_GET_SIZE(k)
            else:
                raise TypeError(f"header key must be str, got {type(k).__name__}")
            if v is None:
                vl = -1
            else:
                if not PyBytes_CheckExact(v):
                    if isinstance(v, str):
                        raise TypeError("header value must be bytes-like or None, got str")
                    v = bytes(memoryview(v))
                vl = PyBytes_GET_SIZE(v)
            size += varint_size(kl) + kl + varint_size(vl) + (vl if vl > 0 else 0)
            out.append((k, v))
        size_out[0] = size
        return out

    cdef int _append(self, object value, object key, int64_t ts, object headers) except -1:
        if (value is None or PyBytes_CheckExact(value)) and (key is None or PyBytes_CheckExact(key)):
            if headers is None:
                return self._write_simple(
                    <const unsigned char*>NULL if value is None
                    else <const unsigned char*>PyBytes_AS_STRING(value),
                    -1 if value is None else PyBytes_GET_SIZE(value),
                    <const unsigned char*>NULL if key is None
                    else <const unsigned char*>PyBytes_AS_STRING(key),
                    -1 if key is None else PyBytes_GET_SIZE(key),
                    ts)
            return self._write_record(
                <const unsigned char*>NULL if value is None
                else <const unsigned char*>PyBytes_AS_STRING(value),
                -1 if value is None else PyBytes_GET_SIZE(value),
                <const unsigned char*>NULL if key is None
                else <const unsigned char*>PyBytes_AS_STRING(key),
                -1 if key is None else PyBytes_GET_SIZE(key),
                ts, headers)
        return self._append_buffers(value, key, ts, headers)

    cdef int _append_buffers(self, object value, object key, int64_t ts,
                             object headers) except -1:
        # Slow path for bytes-likes other than bytes (bytearray, memoryview, ...).
        cdef Py_buffer vbuf
        cdef Py_buffer kbuf
        cdef bint vrel = False
        cdef bint krel = False
        cdef const unsigned char* vp = NULL
        cdef const unsigned char* kp = NULL
        cdef Py_ssize_t vl = -1
        cdef Py_ssize_t kl = -1
        if value is not None:
            if isinstance(value, str):
                raise TypeError("record value must be bytes-like or None, got str")
            PyObject_GetBuffer(value, &vbuf, PyBUF_SIMPLE)
            vrel = True
            vp = <const unsigned char*>vbuf.buf
            vl = vbuf.len
        try:
            if key is not None:
                if isinstance(key, str):
                    raise TypeError("record key must be bytes-like or None, got str")
                PyObject_GetBuffer(key, &kbuf, PyBUF_SIMPLE)
                krel = True
                kp = <const unsigned char*>kbuf.buf
                kl = kbuf.len
            self._write_record(vp, vl, kp, kl, ts, headers)
        finally:
            if krel:
                PyBuffer_Release(&kbuf)
            if vrel:
                PyBuffer_Release(&vbuf)
        return 0

    cdef int _write_simple(self, const unsigned char* vp, Py_ssize_t vl,
                           const unsigned char* kp, Py_ssize_t kl, int64_t ts) except -1:
        # The common record (no headers) in straight-line code; anything unusual (first
        # record, buffer growth, huge sizes, errors) goes through _write_record.
        if _put_simple(self, vp, vl, kp, kl, ts):
            return 0
        return self._write_record(vp, vl, kp, kl, ts, None)

    cdef int _write_record(self, const unsigned char* vp, Py_ssize_t vl,
                           const unsigned char* kp, Py_ssize_t kl,
                           int64_t ts, object headers) except -1:
        cdef int64_t delta
        cdef int32_t offset_delta = self._count
        cdef Py_ssize_t hsize = 0
        cdef Py_ssize_t hcount = 0
        cdef list hlist
        cdef Py_ssize_t body, total, hkl, hvl
        cdef unsigned char* p
        cdef const char* hkp
        if self._building:
            raise RuntimeError("append() during build()")
        if offset_delta == 0x7FFFFFFF:
            raise ProtocolEncodeError("too many records in one batch")
        if ts < -1:
            _timestamp_error(ts)
        if headers is not None and headers:
            hlist = self._normalize_headers(headers, &hsize)
            hcount = len(hlist)
        if offset_delta == 0:
            self._base_ts = ts
            self._max_ts = ts
        elif ts > self._max_ts:
            self._max_ts = ts
        # Wrapping subtraction: the reader adds it back with the same wrap.
        delta = <int64_t>(<uint64_t>ts - <uint64_t>self._base_ts)
        body = 2 + _vsize(delta) + _vsize(offset_delta) + _vsize(kl) + _vsize(vl) + hsize
        if kl > 0:
            body += kl
        if vl > 0:
            body += vl
        if hcount:
            body += _vsize(hcount) - 1
        if body > 0x7FFFFFFF:
            raise ProtocolEncodeError("record too large")
        total = _vsize(body) + body
        if self._len + total > self._cap:
            self._grow(total)
        p = _vput(self._buf + self._len, body)
        p = _put_fields(p, delta, offset_delta, kp, kl, vp, vl)
        if not hcount:
            p[0] = 0
            p += 1
        else:
            p = _vput(p, hcount)
            for k, v in hlist:
                if PyBytes_CheckExact(k):
                    hkp = PyBytes_AS_STRING(k)
                    hkl = PyBytes_GET_SIZE(k)
                else:
                    hkp = PyUnicode_AsUTF8AndSize(k, &hkl)
                p = _vput(p, hkl)
                memcpy(p, hkp, hkl)
                p += hkl
                if v is None:
                    p = _vput(p, -1)
                else:
                    hvl = PyBytes_GET_SIZE(v)
                    p = _vput(p, hvl)
                    memcpy(p, PyBytes_AS_STRING(v), hvl)
                    p += hvl
        self._len = p - self._buf
        self._count += 1
        return 0

    def append(self, value, key=None, timestamp=None, headers=None):
        """Encode one record into the batch.

        value, key: bytes-like or None. timestamp: int milliseconds (None = now).
        headers: iterable of (str, bytes-like | None).
        """
        cdef int64_t ts
        if timestamp is None:
            ts = _now_ms()
        else:
            ts = timestamp
        self._append(value, key, ts, headers)

    def append_many(self, values, keys=None, timestamp=None):
        """Append every value of ``values`` (with the matching key of ``keys`` if given),
        all with one timestamp (None = now, read once)."""
        cdef int64_t ts
        cdef Py_ssize_t i, n
        if timestamp is None:
            ts = _now_ms()
        else:
            ts = timestamp
        if type(values) is BinaryColumn:
            self._append_column(<BinaryColumn>values, keys, ts)
            return
        if not isinstance(values, (list, tuple)):
            values = list(values)
        n = len(values)
        if keys is None:
            for i in range(n):
                self._append(values[i], None, ts, None)
        else:
            if not isinstance(keys, (list, tuple)):
                keys = list(keys)
            if len(keys) != n:
                raise ValueError("keys and values differ in length")
            for i in range(n):
                self._append(values[i], keys[i], ts, None)

    cdef int _append_column(self, BinaryColumn values, object keys, int64_t ts) except -1:
        # Records straight from the column buffers: no bytes object per row.
        cdef BinaryColumn kcol = None
        cdef Py_ssize_t i, n = values._length, vl, kl = -1
        cdef const unsigned char* vp
        cdef const unsigned char* kp = NULL
        if keys is not None:
            if type(keys) is not BinaryColumn:
                raise TypeError("with a BinaryColumn of values, keys must be a "
                                f"BinaryColumn or None, not {type(keys).__name__}")
            kcol = <BinaryColumn>keys
            if kcol._length != n:
                raise ValueError("keys and values differ in length")
        for i in range(n):
            vl = values.row(i, &vp)
            if kcol is not None:
                kl = kcol.row(i, &kp)
            self._write_simple(vp, vl, kp, kl, ts)
        return 0

    @staticmethod
    def record_size_upper_bound(value, key=None, headers=None) -> int:
        """Largest number of bytes one record with these fields can add to a batch."""
        cdef Py_ssize_t kl = -1 if key is None else len(memoryview(key))
        cdef Py_ssize_t vl = -1 if value is None else len(memoryview(value))
        cdef Py_ssize_t size = 5 + 1 + 10 + 5 + 5 + 5 + 5
        size += (kl if kl > 0 else 0) + (vl if vl > 0 else 0)
        if headers:
            for k, v in headers:
                size += 10 + len(k.encode("utf-8") if isinstance(k, str) else k)
                if v is not None:
                    size += len(memoryview(v))
        return size

    cdef void _fill_header(self, unsigned char* h, int64_t base_offset,
                           Py_ssize_t total) noexcept:
        # A batch without records has no records section to compress (see build()).
        cdef int attrs = (self._codec if self._count else 0) | (self._ts_type << 3)
        if self._transactional:
            attrs |= ATTR_TRANSACTIONAL
        if self._control:
            attrs |= ATTR_CONTROL
        _put_i64(h + OFF_BASE_OFFSET, base_offset)
        _put_i32(h + OFF_LENGTH, <int32_t>(total - LOG_OVERHEAD))
        _put_i32(h + OFF_PLE, self.partition_leader_epoch)
        h[OFF_MAGIC] = 2
        _put_i16(h + OFF_ATTRIBUTES, <int16_t>attrs)
        _put_i32(h + OFF_LAST_OFFSET_DELTA, self._count - 1)
        _put_i64(h + OFF_BASE_TIMESTAMP, self._base_ts if self._count else -1)
        _put_i64(h + OFF_MAX_TIMESTAMP, self._max_ts if self._count else -1)
        _put_i64(h + OFF_PRODUCER_ID, self.producer_id)
        _put_i16(h + OFF_PRODUCER_EPOCH, self.producer_epoch)
        _put_i32(h + OFF_BASE_SEQUENCE, self.base_sequence)
        _put_i32(h + OFF_RECORDS_COUNT, self._count)

    def build(self, int64_t base_offset=0) -> bytes:
        """Return the finished batch: header, CRC-32C, records (compressed if asked).

        The builder stays usable: more records may be appended and build() called again.
        """
        cdef bytes out
        cdef unsigned char* o
        cdef uint32_t crc
        cdef Py_ssize_t clen, total
        cdef const unsigned char[::1] cview
        # A batch without records is written as Kafka's own empty batches are (the log
        # cleaner's): the header alone, codec bits 0. Every reader takes that, whereas
        # several cannot read an empty compressed payload (librdkafka refuses an empty
        # snappy or xerial stream, kafka-python a 16-byte xerial header).
        if self._codec == 0 or self._count == 0:
            if self._obj == NULL:  # built before and nothing appended since
                self._new_buffer(self._len, self._len)
            self._fill_header(self._buf, base_offset, self._len)
            # The CRC of a big batch runs without the GIL: appends (which may move the
            # buffer) wait for it.
            self._building = True
            crc = _crc32c(self._buf + OFF_ATTRIBUTES, self._len - OFF_ATTRIBUTES)
            self._building = False
            _put_i32(self._buf + OFF_CRC, <int32_t>crc)
            if self._cap != self._len and _PyBytes_Resize(&self._obj, self._len) < 0:
                self._obj = NULL
                self._buf = NULL
                self._cap = 0
                raise MemoryError()
            out = <bytes>self._obj
            Py_XDECREF(self._obj)  # ownership moves to ``out``
            self._obj = NULL
            self._buf = NULL
            self._cap = 0
            self._built = out
            return out
        # Compressed: the GIL may be released inside compress(), so block appends (which
        # could realloc the buffer under it) until it returns.
        if self._obj == NULL:
            self._new_buffer(self._len, self._len)
        self._building = True
        try:
            mv = PyMemoryView_FromMemory(<char*>self._buf + HEADER_SIZE,
                                         self._len - HEADER_SIZE, PyBUF_READ)
            try:
                compressed = _compression().compress(self._codec, mv, self._level)
            finally:
                mv.release()
        finally:
            self._building = False
        cview = compressed
        clen = cview.shape[0]
        total = HEADER_SIZE + clen
        if total > MAX_BATCH_SIZE:
            raise ProtocolEncodeError("compressed record batch would exceed 2 GiB")
        out = PyBytes_FromStringAndSize(NULL, total)
        o = <unsigned char*>PyBytes_AS_STRING(out)
        self._fill_header(o, base_offset, total)
        if clen:
            memcpy(o + HEADER_SIZE, &cview[0], clen)
        _put_i32(o + OFF_CRC, <int32_t>_crc32c(o + OFF_ATTRIBUTES, total - OFF_ATTRIBUTES))
        return out


def restamp_batch(batch, int64_t producer_id, int16_t producer_epoch,
                  int32_t base_sequence) -> bytes:
    """A copy of the built v2 batch ``batch`` (one whole batch, bytes-like) with its producer
    id, producer epoch and base sequence replaced and its CRC-32C computed again.

    What an idempotent producer does to a batch it must send again under a new producer id
    or epoch. The batch's CRC is checked first (``CrcMismatchError``), so a batch damaged in
    memory is not given a fresh, valid checksum. Raises ``TruncatedDataError`` when the
    buffer is shorter than its batchLength says, ``InvalidLengthError`` when it is not
    exactly one batch, ``UnsupportedMagicError`` for a magic other than 2.
    """
    cdef const unsigned char[::1] view = batch
    cdef Py_ssize_t size = view.shape[0]
    cdef const unsigned char* src
    cdef unsigned char* o
    cdef int32_t length
    cdef bytes out
    if size < HEADER_SIZE:
        raise TruncatedDataError(
            f"restamp_batch: {size} bytes, a v2 batch takes at least {HEADER_SIZE}")
    src = &view[0]
    if <signed char>src[OFF_MAGIC] != 2:
        raise UnsupportedMagicError(
            f"restamp_batch: magic {<signed char>src[OFF_MAGIC]}, only v2 batches carry "
            f"producer fields")
    length = _get_i32(src + OFF_LENGTH)
    if <Py_ssize_t>length + LOG_OVERHEAD > size:
        raise TruncatedDataError(
            f"restamp_batch: batchLength {length} needs {length + LOG_OVERHEAD} bytes, "
            f"got {size}")
    if <Py_ssize_t>length + LOG_OVERHEAD != size:
        raise InvalidLengthError(
            f"restamp_batch: batchLength {length} covers {length + LOG_OVERHEAD} of the "
            f"{size} bytes given (one whole batch expected)")
    if _crc32c(src + OFF_ATTRIBUTES, size - OFF_ATTRIBUTES) != _get_u32(src + OFF_CRC):
        raise CrcMismatchError("restamp_batch: the batch's CRC-32C does not match its bytes")
    out = PyBytes_FromStringAndSize(<const char*>src, size)
    o = <unsigned char*>PyBytes_AS_STRING(out)
    _put_i64(o + OFF_PRODUCER_ID, producer_id)
    _put_i16(o + OFF_PRODUCER_EPOCH, producer_epoch)
    _put_i32(o + OFF_BASE_SEQUENCE, base_sequence)
    _put_i32(o + OFF_CRC, <int32_t>_crc32c(o + OFF_ATTRIBUTES, size - OFF_ATTRIBUTES))
    return out


# ---------------------------------------------------------------------------------------
# Batch headers without records: what a broker reads of a stored batch, and the two fields
# it stamps (base offset, partition leader epoch), both outside the CRC.

#: Bytes of a v2 batch's fixed header, baseOffset to recordsCount: a batch without records.
BATCH_HEADER_SIZE = HEADER_SIZE


def increment_sequence(int32_t sequence, int32_t increment) -> int:
    """``sequence + increment`` in Kafka's producer sequence space, which wraps from
    2**31-1 to 0 (the sequence of the record ``increment`` offsets after one with
    ``sequence``). Both must be >= 0."""
    if sequence < 0 or increment < 0:
        raise ValueError(f"increment_sequence({sequence}, {increment}): sequences and "
                         f"increments are >= 0")
    return <int32_t>((<int64_t>sequence + increment) & 0x7FFFFFFF)


@cython.final
cdef class BatchHeader:
    """The 61-byte header of a v2 record batch and the batch's ``position`` in the buffer
    or file it was read from; made by :func:`read_batch_header` and
    :func:`iter_batch_headers` (the records are not read, the CRC is not checked)."""

    cdef readonly Py_ssize_t position
    cdef readonly int64_t base_offset
    cdef readonly int32_t batch_length
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int magic
    cdef readonly uint32_t crc
    cdef readonly int attributes
    cdef readonly int32_t last_offset_delta
    cdef readonly int64_t base_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t producer_id
    cdef readonly int16_t producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t records_count

    def __init__(self):
        raise TypeError("BatchHeader objects come from read_batch_header() and "
                        "iter_batch_headers()")

    @property
    def size(self) -> int:
        """Bytes the whole batch takes (batchLength plus the 12 bytes before it)."""
        return <Py_ssize_t>self.batch_length + LOG_OVERHEAD

    @property
    def end(self) -> int:
        """Position just after the batch."""
        return self.position + <Py_ssize_t>self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self):
        """The codec (``Compression``); ``UnsupportedCompressionError`` for ids 5-7."""
        cdef int codec = self.attributes & ATTR_CODEC_MASK
        if codec >= len(_COMPRESSIONS):
            raise UnsupportedCompressionError(f"batch header: compression codec id {codec}")
        return _COMPRESSIONS[codec]

    @property
    def timestamp_type(self):
        return _TIMESTAMP_TYPES[(self.attributes & ATTR_TIMESTAMP_TYPE) >> 3]

    @property
    def is_transactional(self) -> bool:
        return (self.attributes & ATTR_TRANSACTIONAL) != 0

    @property
    def is_control(self) -> bool:
        return (self.attributes & ATTR_CONTROL) != 0

    @property
    def delete_horizon(self):
        """The delete horizon (ms) if the batch has one (attribute bit 6), else None."""
        if self.attributes & ATTR_DELETE_HORIZON:
            return self.base_timestamp
        return None

    @property
    def last_sequence(self) -> int:
        """Sequence of the last offset (wraps from 2**31-1 to 0); -1 without a sequence."""
        if self.base_sequence < 0:
            return -1
        return <int32_t>((<int64_t>self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF)

    def at(self, Py_ssize_t position) -> BatchHeader:
        """The same header for the batch copied to ``position`` (of another buffer)."""
        cdef BatchHeader h = BatchHeader.__new__(BatchHeader)
        h.position = position
        h.base_offset = self.base_offset
        h.batch_length = self.batch_length
        h.partition_leader_epoch = self.partition_leader_epoch
        h.magic = self.magic
        h.crc = self.crc
        h.attributes = self.attributes
        h.last_offset_delta = self.last_offset_delta
        h.base_timestamp = self.base_timestamp
        h.max_timestamp = self.max_timestamp
        h.producer_id = self.producer_id
        h.producer_epoch = self.producer_epoch
        h.base_sequence = self.base_sequence
        h.records_count = self.records_count
        return h

    def _fields(self) -> tuple:
        return (self.position, self.base_offset, self.batch_length,
                self.partition_leader_epoch, self.magic, self.crc, self.attributes,
                self.last_offset_delta, self.base_timestamp, self.max_timestamp,
                self.producer_id, self.producer_epoch, self.base_sequence, self.records_count)

    def __eq__(self, other):
        if not isinstance(other, BatchHeader):
            return NotImplemented
        return self._fields() == (<BatchHeader>other)._fields()

    def __ne__(self, other):
        if not isinstance(other, BatchHeader):
            return NotImplemented
        return self._fields() != (<BatchHeader>other)._fields()

    __hash__ = None

    def __repr__(self):
        return (f"BatchHeader(position={self.position}, base_offset={self.base_offset}, "
                f"last_offset={self.last_offset}, records={self.records_count}, "
                f"size={self.size}, producer_id={self.producer_id}, "
                f"producer_epoch={self.producer_epoch}, base_sequence={self.base_sequence}, "
                f"partition_leader_epoch={self.partition_leader_epoch}, "
                f"attributes={self.attributes})")


cdef BatchHeader _header_at(const unsigned char* h, Py_ssize_t position):
    cdef BatchHeader out = BatchHeader.__new__(BatchHeader)
    out.position = position
    out.base_offset = _get_i64(h + OFF_BASE_OFFSET)
    out.batch_length = _get_i32(h + OFF_LENGTH)
    out.partition_leader_epoch = _get_i32(h + OFF_PLE)
    out.magic = <signed char>h[OFF_MAGIC]
    out.crc = _get_u32(h + OFF_CRC)
    out.attributes = <uint16_t>_get_i16(h + OFF_ATTRIBUTES)
    out.last_offset_delta = _get_i32(h + OFF_LAST_OFFSET_DELTA)
    out.base_timestamp = _get_i64(h + OFF_BASE_TIMESTAMP)
    out.max_timestamp = _get_i64(h + OFF_MAX_TIMESTAMP)
    out.producer_id = _get_i64(h + OFF_PRODUCER_ID)
    out.producer_epoch = _get_i16(h + OFF_PRODUCER_EPOCH)
    out.base_sequence = _get_i32(h + OFF_BASE_SEQUENCE)
    out.records_count = _get_i32(h + OFF_RECORDS_COUNT)
    return out


def read_batch_header(buffer, Py_ssize_t position=0) -> BatchHeader:
    """The header of the v2 batch at ``position`` of a bytes-like ``buffer``.

    Only the header is read: the records are not parsed, the CRC is not checked, and the
    rest of the batch need not be in ``buffer`` (``read_batches`` does the full checks).
    Raises ``TruncatedDataError`` when fewer than 61 bytes are left at ``position``,
    ``UnsupportedMagicError`` for a magic other than 2, ``InvalidLengthError`` for a
    batchLength too small to hold the header.
    """
    cdef const unsigned char[::1] view = buffer
    cdef Py_ssize_t size = view.shape[0]
    cdef const unsigned char* h
    cdef int32_t length
    if position < 0 or position > size:
        raise ValueError(f"read_batch_header: position {position} outside a buffer of "
                         f"{size} bytes")
    if size - position < HEADER_SIZE:
        raise TruncatedDataError(
            f"batch header at {position}: {size - position} bytes left, {HEADER_SIZE} needed")
    h = &view[0] + position
    if <signed char>h[OFF_MAGIC] != 2:
        raise UnsupportedMagicError(
            f"batch header at {position}: magic {<signed char>h[OFF_MAGIC]}, not a v2 batch")
    length = _get_i32(h + OFF_LENGTH)
    if length < HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidLengthError(
            f"batch header at {position}: batchLength {length}, minimum "
            f"{HEADER_SIZE - LOG_OVERHEAD}")
    return _header_at(h, position)


def iter_batch_headers(buffer, Py_ssize_t start=0, Py_ssize_t end=-1):
    """Headers of the v2 batches back to back in ``buffer[start:end]`` (``end`` -1: the
    end of the buffer), each batch wholly inside that range.

    Stops, without raising, before a batch that is cut short or whose header is not a v2
    header with a plausible batchLength: a log read after a crash ends where its last
    whole batch ends (compare the last header's ``end`` with ``end`` to find a torn tail).
    The records and CRCs are not checked.
    """
    cdef const unsigned char[::1] view = buffer
    cdef Py_ssize_t size = view.shape[0]
    cdef Py_ssize_t pos = start
    cdef const unsigned char* h
    cdef int32_t length
    if end < 0 or end > size:
        end = size
    if pos < 0:
        raise ValueError(f"iter_batch_headers: negative start {start}")
    while end - pos >= HEADER_SIZE:
        h = &view[0] + pos
        length = _get_i32(h + OFF_LENGTH)
        if <signed char>h[OFF_MAGIC] != 2 or length < HEADER_SIZE - LOG_OVERHEAD:
            return
        if <Py_ssize_t>length + LOG_OVERHEAD > end - pos:
            return
        yield _header_at(h, pos)
        pos += <Py_ssize_t>length + LOG_OVERHEAD


def stamp_batch(buffer, Py_ssize_t position, int64_t base_offset,
                int32_t partition_leader_epoch, int64_t log_append_time=-1) -> None:
    """Write the base offset and the partition leader epoch of the v2 batch at
    ``position`` of a writable buffer (a ``bytearray``), in place.

    What a partition leader does to each batch it appends: neither field is covered by
    the CRC (it starts at the attributes), so the batch stays valid and is not
    re-checksummed. A leader of a LogAppendTime topic also passes its clock as
    ``log_append_time`` (ms, >= 0): the batch's timestamp type becomes LOG_APPEND_TIME,
    its max timestamp that time (which every record then reports), and its CRC is
    computed again over the whole batch, which must then be in the buffer. Raises
    ``TruncatedDataError`` when no whole header (or, with ``log_append_time``, no whole
    batch) is at ``position``, ``UnsupportedMagicError`` for a magic other than 2, and
    ``TypeError`` or ``BufferError`` for a read-only buffer.
    """
    cdef unsigned char[::1] view = buffer
    cdef Py_ssize_t size = view.shape[0]
    cdef unsigned char* h
    cdef Py_ssize_t total
    if position < 0 or size - position < HEADER_SIZE:
        raise TruncatedDataError(
            f"stamp_batch: no whole batch header at {position} of {size} bytes")
    h = &view[0] + position
    if <signed char>h[OFF_MAGIC] != 2:
        raise UnsupportedMagicError(
            f"stamp_batch: magic {<signed char>h[OFF_MAGIC]} at {position}, not a v2 batch")
    if log_append_time >= 0:
        total = <Py_ssize_t>_get_i32(h + OFF_LENGTH) + LOG_OVERHEAD
        if total < HEADER_SIZE or total > size - position:
            raise TruncatedDataError(
                f"stamp_batch: a batch of {total} bytes at {position} of {size} bytes: "
                f"its CRC cannot be computed again")
        _put_i16(h + OFF_ATTRIBUTES, <int16_t>(_get_i16(h + OFF_ATTRIBUTES)
                                               | ATTR_TIMESTAMP_TYPE))
        _put_i64(h + OFF_MAX_TIMESTAMP, log_append_time)
        _put_i32(h + OFF_CRC, <int32_t>_crc32c(h + OFF_ATTRIBUTES, total - OFF_ATTRIBUTES))
    _put_i64(h + OFF_BASE_OFFSET, base_offset)
    _put_i32(h + OFF_PLE, partition_leader_epoch)


cdef int _timestamp_error(int64_t ts) except -1:
    # Kafka's record builder (MemoryRecordsBuilder) refuses the same.
    raise ProtocolEncodeError(
        f"invalid record timestamp {ts}: milliseconds since the epoch (>= 0), or -1 for "
        f"none")


cdef Py_ssize_t _simple_body(int64_t delta, int32_t offset_delta, Py_ssize_t kl,
                             Py_ssize_t vl, Py_ssize_t data) noexcept:
    # A headerless record's length, for _put_simple's rare case where key and value do
    # not tell whether it takes one or two varint bytes. Out of line: keeps _put_simple
    # small enough to be inlined.
    return 2 + _vsize(delta) + _vsize(offset_delta) + _vsize(kl) + _vsize(vl) + data


cdef inline bint _put_simple(RecordBatchBuilder self, const unsigned char* vp, Py_ssize_t vl,
                             const unsigned char* kp, Py_ssize_t kl, int64_t ts) noexcept:
    # Encodes a record without headers when nothing unusual is going on (not the first
    # record, not the 2^31-1st, no build() running, key + value at most SIMPLE_MAX_DATA
    # bytes, room in the buffer) and returns True; otherwise changes nothing and returns
    # False, and the caller goes through _write_record, which handles (or reports) every
    # case.
    #
    # With at most SIMPLE_MAX_DATA bytes of key and value the record's length takes 1 or 2
    # varint bytes (length < 64 or < 8192), and for most sizes the key and value alone
    # tell which: the fields are then written right away and the length put in front of
    # them afterwards, without sizing each varint first.
    cdef int32_t offset_delta = self._count
    cdef int64_t delta
    cdef Py_ssize_t data = (kl if kl > 0 else 0) + (vl if vl > 0 else 0)
    cdef Py_ssize_t body
    cdef unsigned char* start
    cdef unsigned char* fields
    cdef unsigned char* p
    if (<uint32_t>(offset_delta - 1) >= 0x7FFFFFFEu or self._building or ts < -1
            or data > SIMPLE_MAX_DATA or self._len + 2 + data + SIMPLE_MAX_FIELDS > self._cap):
        return False
    if ts > self._max_ts:
        self._max_ts = ts
    # Wrapping subtraction: the reader adds it back with the same wrap.
    delta = <int64_t>(<uint64_t>ts - <uint64_t>self._base_ts)
    start = self._buf + self._len
    if data >= 64 - SIMPLE_MIN_FIELDS:
        fields = start + 2
    elif data < 64 - SIMPLE_MAX_FIELDS:
        fields = start + 1
    else:
        # Key and value lengths take one byte here (data < 64); the deltas one, or two
        # from 64 (zigzag 128) up to 8192.
        if <uint64_t>delta + 8192u < 16384u and offset_delta < 8192:
            body = (data + SIMPLE_MIN_FIELDS + (<uint64_t>delta + 64u >= 128u)
                    + (offset_delta >= 64))
        else:
            body = _simple_body(delta, offset_delta, kl, vl, data)
        fields = start + (1 if body < 64 else 2)
    p = _put_fields(fields, delta, offset_delta, kp, kl, vp, vl)
    p[0] = 0  # no headers
    p += 1
    body = p - fields
    if body >= 64:  # zigzag(body) >= 128: two bytes
        start[0] = <unsigned char>((body << 1) | 0x80)
        start[1] = <unsigned char>(body >> 6)
    else:
        start[0] = <unsigned char>(body << 1)
    self._len = p - self._buf
    self._count = offset_delta + 1
    return True


# ---------------------------------------------------------------------------------------
# Reader

@cython.final
@cython.no_gc  # holds only bytes, str, ints and an enum member: no reference cycles
@cython.freelist(1024)  # the plain path's allocator (the fast path has its own free list)
cdef class Record:
    """One record of a batch. key/value are bytes or None; headers a list of (str, bytes|None)."""

    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly object key
    cdef readonly object value
    cdef readonly object timestamp_type
    cdef list _headers

    @property
    def headers(self) -> list:
        if self._headers is None:
            return []
        return self._headers

    @property
    def checksum(self):
        """Records of v2 batches carry no checksum of their own."""
        return None

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, "
                f"key={self.key!r}, value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return ((self.offset, self.timestamp, self.key, self.value, self.headers,
                 self.timestamp_type)
                == ((<Record>other).offset, (<Record>other).timestamp, (<Record>other).key,
                    (<Record>other).value, (<Record>other).headers,
                    (<Record>other).timestamp_type))



cdef int _install_record_internals() except -1:
    # A Record holding distinct probe values, from which kp_record_install finds its
    # fields' offsets.
    cdef Record probe = Record.__new__(Record)
    probe.key = object()
    probe.value = object()
    probe.timestamp_type = object()
    probe._headers = []
    probe.offset = 0x0123456789ABCDEF
    probe.timestamp = 0x7EDCBA9876543210
    return kp_record_install(Record, probe, probe.key, probe.value, probe.timestamp_type,
                             probe._headers, probe.offset, probe.timestamp)


cdef object _plain_record(int64_t offset, int64_t timestamp, const unsigned char* kp,
                          Py_ssize_t kn, const unsigned char* vp, Py_ssize_t vn,
                          PyObject* ts_type, bint* failed):
    cdef Record rec = Record.__new__(Record)
    rec.offset = offset
    rec.timestamp = timestamp
    rec.key = kp_bytes_new(kp, kn)
    rec.value = kp_bytes_new(vp, vn)
    rec.timestamp_type = <object>ts_type
    failed[0] = False
    return rec


cdef inline object _make_record(int64_t offset, int64_t timestamp, const unsigned char* kp,
                                Py_ssize_t kn, const unsigned char* vp, Py_ssize_t vn,
                                PyObject* ts_type, bint* failed):
    # A Record with new bytes for its key and value (n == -1: None); ts_type is borrowed.
    # Clears *failed (the caller's "record incomplete" flag) on success.
    if _FAST:
        return kp_rec_make(offset, timestamp, kp, kn, vp, vn, ts_type, failed)
    return _plain_record(offset, timestamp, kp, kn, vp, vn, ts_type, failed)


# ---------------------------------------------------------------------------------------
# Records straight into an application's objects

cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        pass
    int PyObject_GenericSetAttr(object o, object name, object value) except -1
    PyObject* PyType_GenericAlloc(PyTypeObject* tp, Py_ssize_t n) except NULL
    PyObject* PyLong_FromLongLong(long long v) except NULL
    PyObject* PyTuple_New(Py_ssize_t n) except NULL
    void PyTuple_SET_ITEM(PyObject* t, Py_ssize_t i, PyObject* v)
    void Py_DecRef(PyObject* o)
    int PyList_Append(object lst, object item) except -1
    void PyObject_GC_UnTrack(void* o)
    bint PyType_IS_GC(PyTypeObject* tp)


@cython.final
cdef class RecordFactory:
    """Makes :meth:`RecordBatch.decode_into` fill instances of an application's class.

    ``RecordFactory(cls, offset=..., key=..., value=..., headers=..., timestamp=...,
    topic=None, partition=None, leader_epoch=None, timestamp_types=(0, 1),
    constants=None)``: each keyword names a ``__slots__`` member of ``cls`` (a class whose
    instances are made without calling ``__init__``). ``timestamp`` receives the tuple
    ``(type, milliseconds)`` with ``timestamp_types[0]`` for create time and
    ``timestamp_types[1]`` for log-append time; ``headers`` a list of ``(str, bytes|None)``
    or None when the record has none; ``constants`` maps further slots to the value every
    instance starts with. Every slot of ``cls`` must be covered, so no instance has an
    unset attribute.

    On the fast path (``FAST_PATH``) the slots are written by offset and the instances are
    not tracked by the cyclic garbage collector: what the reader stores in them (bytes, str,
    ints, tuples, header lists) cannot form a cycle, and a million tracked objects would
    make the collector run over and over while a batch is decoded. An application that
    later makes one part of a reference cycle leaks that cycle (nothing worse). On the plain
    path they are ordinary objects, their slots set as attributes.
    """

    cdef object cls
    cdef bint is_gc
    # Per field: the slot's name (None: not stored) and, on the fast path, its offset (-1).
    cdef object n_offset, n_key, n_value, n_headers, n_timestamp, n_topic, n_partition, n_epoch
    cdef Py_ssize_t off_offset, off_key, off_value, off_headers, off_timestamp
    cdef Py_ssize_t off_topic, off_partition, off_epoch
    cdef list const_names
    cdef list const_offsets
    cdef list const_values
    cdef object ts_create, ts_append

    def __init__(self, cls, *, offset, key, value, headers, timestamp, topic=None,
                 partition=None, leader_epoch=None, timestamp_types=(0, 1), constants=None):
        if not isinstance(cls, type):
            raise TypeError("RecordFactory needs a class")
        self.cls = cls
        self.is_gc = PyType_IS_GC(<PyTypeObject*>cls)
        named = set()
        self.n_offset, self.off_offset = self._slot(offset, named)
        self.n_key, self.off_key = self._slot(key, named)
        self.n_value, self.off_value = self._slot(value, named)
        self.n_headers, self.off_headers = self._slot(headers, named)
        self.n_timestamp, self.off_timestamp = self._slot(timestamp, named)
        self.n_topic, self.off_topic = self._slot(topic, named)
        self.n_partition, self.off_partition = self._slot(partition, named)
        self.n_epoch, self.off_epoch = self._slot(leader_epoch, named)
        self.const_names = []
        self.const_offsets = []
        self.const_values = []
        for name, value_ in (constants or {}).items():
            name, off = self._slot(name, named)
            self.const_names.append(name)
            self.const_offsets.append(off)
            self.const_values.append(value_)
        for klass in cls.__mro__:
            for name in _slot_names(klass):
                if name not in named and name not in ("__dict__", "__weakref__"):
                    raise ValueError(f"{cls.__name__}.{name} is not covered by the factory")
        self.ts_create, self.ts_append = timestamp_types

    cdef tuple _slot(self, name, set named):
        # (interned name, offset on the fast path else -1); (None, -1) for no slot.
        if name is None:
            return None, -1
        if name in named:
            raise ValueError(f"slot {name!r} named twice")
        for klass in self.cls.__mro__:
            if name in klass.__dict__:
                descr = klass.__dict__[name]
                if type(descr) is _MemberDescriptor and name in _slot_names(klass):
                    off = kp_slot_offset(descr) if _FAST else 0
                    if off >= 0:
                        named.add(name)
                        return sys.intern(name), (off if _FAST else -1)
                break
        raise ValueError(f"{self.cls.__name__}.{name} is not a writable __slots__ member")


cdef tuple _slot_names(klass):
    slots = klass.__dict__.get("__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(slots)


cdef inline void _set(PyObject* o, Py_ssize_t off, object v):
    if off >= 0:
        Py_INCREF(v)
        KP_SLOT_SET(o, off, <PyObject*>v)


cdef int _fill_by_offset(list out, RecordFactory f, Record rec, object ts_type, object topic,
                         object partition, object leader_epoch) except -1:
    # The fast path: slots written by offset in an object made by PyType_GenericAlloc.
    cdef PyObject* o = PyType_GenericAlloc(<PyTypeObject*>f.cls, 0)
    cdef PyObject* tup
    cdef Py_ssize_t i
    cdef list hd
    # The object owns what is stored in it; unset slots stay NULL until the end, so an error
    # below frees it cleanly (and nothing half-made reaches ``out``).
    try:
        if f.off_offset >= 0:
            KP_SLOT_SET(o, f.off_offset, PyLong_FromLongLong(rec.offset))
        _set(o, f.off_key, rec.key)
        _set(o, f.off_value, rec.value)
        hd = rec._headers
        _set(o, f.off_headers, hd if hd else None)
        if f.off_timestamp >= 0:
            tup = PyTuple_New(2)
            KP_SLOT_SET(o, f.off_timestamp, tup)
            Py_INCREF(ts_type)
            PyTuple_SET_ITEM(tup, 0, <PyObject*>ts_type)
            PyTuple_SET_ITEM(tup, 1, PyLong_FromLongLong(rec.timestamp))
            PyObject_GC_UnTrack(tup)  # two ints: no cycle possible
        _set(o, f.off_topic, topic)
        _set(o, f.off_partition, partition)
        _set(o, f.off_epoch, leader_epoch)
        for i in range(len(f.const_offsets)):
            _set(o, <Py_ssize_t>f.const_offsets[i], f.const_values[i])
    except BaseException:
        Py_DecRef(o)
        raise
    if f.is_gc:
        PyObject_GC_UnTrack(o)
    PyList_Append(out, <object>o)
    Py_DecRef(o)
    return 0


cdef int _fill_by_name(list out, RecordFactory f, Record rec, object ts_type, object topic,
                       object partition, object leader_epoch) except -1:
    # The plain path: an instance made as object.__new__ makes it, its slots set through
    # their descriptors (the class's own __setattr__ is not called, as on the fast path).
    cdef Py_ssize_t i
    cdef list hd
    obj = _object_new(f.cls)
    if f.n_offset is not None:
        PyObject_GenericSetAttr(obj, f.n_offset, rec.offset)
    if f.n_key is not None:
        PyObject_GenericSetAttr(obj, f.n_key, rec.key)
    if f.n_value is not None:
        PyObject_GenericSetAttr(obj, f.n_value, rec.value)
    if f.n_headers is not None:
        hd = rec._headers
        PyObject_GenericSetAttr(obj, f.n_headers, hd if hd else None)
    if f.n_timestamp is not None:
        PyObject_GenericSetAttr(obj, f.n_timestamp, (ts_type, rec.timestamp))
    if f.n_topic is not None:
        PyObject_GenericSetAttr(obj, f.n_topic, topic)
    if f.n_partition is not None:
        PyObject_GenericSetAttr(obj, f.n_partition, partition)
    if f.n_epoch is not None:
        PyObject_GenericSetAttr(obj, f.n_epoch, leader_epoch)
    for i in range(len(f.const_names)):
        PyObject_GenericSetAttr(obj, f.const_names[i], f.const_values[i])
    out.append(obj)
    return 0



# ---------------------------------------------------------------------------------------
# Records straight into column buffers (Arrow layout), no object per record

cdef struct _Grow:
    # The buffer is a private bytes object (refcount 1, grown in place) that finish()
    # shrinks to its length and hands over: the column's bytes are written once, with no
    # copy at the end, and the memory goes with the batch that holds it.
    PyObject* obj     # NULL until the first byte
    char* p           # its data
    Py_ssize_t n      # bytes used
    Py_ssize_t cap    # bytes allocated
    Py_ssize_t hint   # what the last buffer held (bounded): the next one starts that big


#: The next buffer of a column starts as big as the last one was, up to this much (beyond
#: it grows by doubling; a huge batch does not make every later one allocate as much).
cdef Py_ssize_t _GROW_HINT_MAX = 64 << 20


cdef int _grow_reserve(_Grow* g, Py_ssize_t extra) except -1:
    cdef Py_ssize_t need = g.n + extra
    cdef Py_ssize_t cap
    cdef object fresh
    if need <= g.cap:
        return 0
    cap = g.cap * 2 if g.cap else max(g.hint, 1024)
    while cap < need:
        cap *= 2
    if g.obj == NULL:
        fresh = PyBytes_FromStringAndSize(NULL, cap)
        Py_INCREF(fresh)
        g.obj = <PyObject*>fresh
    elif _PyBytes_Resize(&g.obj, cap) < 0:   # it freed the object and set MemoryError
        g.obj = NULL
        g.p = NULL
        g.n = g.cap = 0
        raise MemoryError()
    g.p = PyBytes_AS_STRING(<object>g.obj)
    g.cap = cap
    return 0


cdef inline int _grow_put(_Grow* g, const void* src, Py_ssize_t n) except -1:
    if g.n + n > g.cap:
        _grow_reserve(g, n)
    if n > 0:
        memcpy(g.p + g.n, src, <size_t>n)
    g.n += n
    return 0


cdef inline int _grow_i32(_Grow* g, int32_t v) except -1:
    return _grow_put(g, &v, 4)


cdef inline int _grow_i64(_Grow* g, int64_t v) except -1:
    return _grow_put(g, &v, 8)


cdef inline int _grow_bit(_Grow* g, Py_ssize_t i, bint valid) except -1:
    # Validity bitmap: bit i set when row i is not null (bytes zeroed as they are added).
    cdef char zero = 0
    while g.n <= (i >> 3):
        _grow_put(g, &zero, 1)
    if valid:
        g.p[i >> 3] = <char>((<unsigned char>g.p[i >> 3]) | (1 << (i & 7)))
    return 0


cdef bytes _grow_take(_Grow* g):
    # The buffer itself, shrunk to its length; the column starts a new one.
    cdef PyObject* obj = g.obj
    cdef Py_ssize_t n = g.n
    cdef bytes out
    g.obj = NULL
    g.p = NULL
    g.n = g.cap = 0
    # The larger of this one and the last hint less an eighth: batches that vary in size
    # seldom regrow, and a big one's size is forgotten after some twenty smaller ones.
    g.hint = min(max(n, g.hint - (g.hint >> 3)), _GROW_HINT_MAX)
    if obj == NULL or n == 0:
        Py_XDECREF(obj)
        return b""
    if _PyBytes_Resize(&obj, n) < 0:   # it freed the object and set MemoryError
        raise MemoryError()
    out = <bytes>obj                   # a new reference: drop the one the column held
    Py_XDECREF(obj)
    return out


cdef bint _utf8_valid(const unsigned char* p, Py_ssize_t n) noexcept:
    # Well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
    cdef Py_ssize_t i = 0
    cdef unsigned char c, c1
    cdef int k, j
    while i < n:
        c = p[i]
        if c < 0x80:
            i += 1
            continue
        if 0xC2 <= c <= 0xDF:
            k = 1
        elif 0xE0 <= c <= 0xEF:
            k = 2
        elif 0xF0 <= c <= 0xF4:
            k = 3
        else:
            return False
        if i + k >= n:  # the continuation bytes i+1..i+k must all be there
            return False
        c1 = p[i + 1]
        if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F) or \
                (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F):
            return False
        for j in range(1, k + 1):
            if (p[i + j] & 0xC0) != 0x80:
                return False
        i += k + 1
    return True


cdef inline Py_ssize_t _col_pos(const unsigned char* offsets, bint wide,
                                 Py_ssize_t i) noexcept nogil:
    # Arrow offsets are native-endian and need not be aligned in a foreign buffer.
    cdef int32_t o32
    cdef int64_t o64
    if wide:
        memcpy(&o64, offsets + i * 8, 8)
        return <Py_ssize_t>o64
    memcpy(&o32, offsets + i * 4, 4)
    return o32


@cython.final
cdef class BinaryColumn:
    """A column of byte strings or nulls in Arrow's variable-size binary layout, read in
    place: ``offsets`` holds ``offset + length + 1`` native-endian int32 positions into
    ``data`` (int64 with ``wide``, Arrow's ``large_binary``), row ``i`` spanning
    ``offsets[offset + i]`` to ``offsets[offset + i + 1]``; ``validity`` (None: no nulls)
    holds one bit per row, least significant bit first, 0 for a null. Those are the
    buffers of a pyarrow ``binary`` or ``string`` array (``large_*`` with ``wide``), and
    :meth:`RecordBatchBuilder.append_many` encodes records from them with no Python object
    per row.

    The constructor checks every position it will read (non-decreasing, inside ``data``)
    and the sizes of the buffers, raising ValueError; the buffers are held, not copied,
    and must not change while the column is in use. Indexing gives bytes or None, a slice
    (step 1) another column over the same buffers."""

    cdef object _offsets_obj, _data_obj, _validity_obj   # keep the buffers alive
    cdef const unsigned char[::1] _offsets_view
    cdef const unsigned char[::1] _data_view
    cdef const unsigned char[::1] _validity_view
    cdef const unsigned char* _op
    cdef const unsigned char* _dp
    cdef const unsigned char* _vp    # NULL: no nulls
    cdef bint _wide
    cdef Py_ssize_t _first            # row offset into the buffers
    cdef Py_ssize_t _length

    def __init__(self, Py_ssize_t length, offsets, data, validity=None,
                 Py_ssize_t offset=0, bint wide=False):
        cdef Py_ssize_t width = 8 if wide else 4
        cdef Py_ssize_t i, prev, pos, dlen
        if length < 0 or offset < 0:
            raise ValueError(f"length and offset must not be negative (length={length}, "
                             f"offset={offset})")
        self._offsets_view = memoryview(offsets).cast("B")
        self._data_view = memoryview(data).cast("B")
        self._offsets_obj, self._data_obj = offsets, data
        if self._offsets_view.shape[0] < (offset + length + 1) * width:
            raise ValueError(f"offsets holds {self._offsets_view.shape[0]} bytes, "
                             f"{(offset + length + 1) * width} needed for rows "
                             f"{offset}..{offset + length}")
        self._op = &self._offsets_view[0]
        dlen = self._data_view.shape[0]
        self._dp = &self._data_view[0] if dlen else NULL
        self._vp = NULL
        if validity is not None:
            self._validity_view = memoryview(validity).cast("B")
            self._validity_obj = validity
            if self._validity_view.shape[0] < (offset + length + 7) // 8:
                raise ValueError(f"validity holds {self._validity_view.shape[0]} bytes, "
                                 f"{(offset + length + 7) // 8} needed")
            if self._validity_view.shape[0]:
                self._vp = &self._validity_view[0]
        self._wide = wide
        self._first = offset
        self._length = length
        prev = _col_pos(self._op, wide, offset)
        if prev < 0 or prev > dlen:
            raise ValueError(f"offsets[{offset}] = {prev} is outside data ({dlen} bytes)")
        for i in range(offset + 1, offset + length + 1):
            pos = _col_pos(self._op, wide, i)
            if pos < prev or pos > dlen:
                raise ValueError(f"offsets[{i}] = {pos} is outside {prev}..{dlen}: offsets "
                                 "must not decrease nor pass the end of data")
            prev = pos

    cdef BinaryColumn _view(self, Py_ssize_t start, Py_ssize_t stop):
        cdef BinaryColumn c = BinaryColumn.__new__(BinaryColumn)
        c._offsets_obj, c._data_obj, c._validity_obj = \
            self._offsets_obj, self._data_obj, self._validity_obj
        c._offsets_view, c._data_view = self._offsets_view, self._data_view
        if self._vp != NULL:
            c._validity_view = self._validity_view
        c._op, c._dp, c._vp, c._wide = self._op, self._dp, self._vp, self._wide
        c._first = self._first + start
        c._length = stop - start
        return c

    cdef inline Py_ssize_t row(self, Py_ssize_t i, const unsigned char** p) noexcept:
        """Row ``i`` (checked by the caller): its bytes in ``p`` and its length, or -1
        (``p`` NULL) for a null."""
        cdef Py_ssize_t j = self._first + i
        cdef Py_ssize_t start
        if self._vp != NULL and not (self._vp[j >> 3] >> (j & 7)) & 1:
            p[0] = NULL
            return -1
        start = _col_pos(self._op, self._wide, j)
        p[0] = self._dp + start if self._dp != NULL else <const unsigned char*>""
        return _col_pos(self._op, self._wide, j + 1) - start

    def __len__(self):
        return self._length

    def __getitem__(self, index):
        cdef Py_ssize_t i, start, stop, step
        cdef const unsigned char* p
        cdef Py_ssize_t n
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            if step != 1:
                raise ValueError("a BinaryColumn slice must have step 1")
            return self._view(start, max(start, stop))
        i = index
        if i < 0:
            i += self._length
        if i < 0 or i >= self._length:
            raise IndexError(f"row {index} of a column of {self._length}")
        n = self.row(i, &p)
        if n < 0:
            return None
        return PyBytes_FromStringAndSize(<const char*>p, n)

    def to_list(self):
        """The rows as a list of bytes and None."""
        return [self[i] for i in range(self._length)]

    @property
    def null_count(self) -> int:
        """How many rows are null."""
        cdef Py_ssize_t i, nulls = 0
        cdef const unsigned char* p
        for i in range(self._length):
            if self.row(i, &p) < 0:
                nulls += 1
        return nulls

    @property
    def byte_size(self) -> int:
        """The sum of the lengths of the rows that are not null."""
        cdef Py_ssize_t i, n, total = 0
        cdef const unsigned char* p
        for i in range(self._length):
            n = self.row(i, &p)
            if n > 0:
                total += n
        return total

    def max_row_size(self, BinaryColumn keys=None) -> int:
        """The largest row length, each row counted with the same row of ``keys`` when
        given (a message's key + value); nulls count 0."""
        cdef Py_ssize_t i, n, k, best = 0
        cdef const unsigned char* p
        if keys is not None and len(keys) != self._length:
            raise ValueError(f"keys and values differ in length ({len(keys)} keys, "
                             f"{self._length} values)")
        for i in range(self._length):
            n = self.row(i, &p)
            if n < 0:
                n = 0
            if keys is not None:
                k = keys.row(i, &p)
                if k > 0:
                    n += k
            if n > best:
                best = n
        return best

    def __repr__(self):
        return f"<BinaryColumn of {self._length} rows>"


cdef enum:
    _B_OFFSETS, _B_TIMESTAMPS, _B_TS_TYPES, _B_PARTITIONS, _B_TOPIC_OFFS, _B_TOPIC_DATA,
    _B_KEY_VALID, _B_KEY_OFFS, _B_KEY_DATA, _B_VAL_VALID, _B_VAL_OFFS, _B_VAL_DATA,
    _B_HDR_VALID, _B_HDR_OFFS, _B_HK_OFFS, _B_HK_DATA, _B_HV_VALID, _B_HV_OFFS, _B_HV_DATA,
    _NBUF


@cython.final
cdef class ColumnBuilder:
    """Accumulates records as columns in Arrow's memory layout (see
    :meth:`RecordBatch.decode_columns`); :meth:`finish` hands the buffers over as bytes.

    Columns: offset (int64), timestamp (int64), timestamp_type (int8: the values given to
    the constructor for create and log-append time), partition (int32), topic (utf8),
    key and value (binary, nullable), headers (nullable list of struct{key: utf8 not null,
    value: binary nullable}; null when a record has no headers). Offsets of variable-size
    columns are int32, so one builder holds less than 2 GiB per column.
    """

    cdef _Grow b[_NBUF]
    cdef Py_ssize_t rows, key_nulls, val_nulls, hdr_nulls, hv_nulls, nheaders
    cdef bytes topic
    cdef int32_t partition
    cdef char ts_create, ts_append
    cdef readonly int64_t last_offset

    def __cinit__(self, int ts_create=0, int ts_append=1):
        self.ts_create = <char>ts_create
        self.ts_append = <char>ts_append
        self.topic = b""
        self.partition = -1
        self._start()

    def __dealloc__(self):
        cdef int i
        for i in range(_NBUF):
            Py_XDECREF(self.b[i].obj)
            self.b[i].obj = NULL
            self.b[i].p = NULL

    cdef int _start(self) except -1:
        cdef int i
        self.rows = self.key_nulls = self.val_nulls = self.hdr_nulls = 0
        self.hv_nulls = self.nheaders = 0
        self.last_offset = -1
        for i in (_B_TOPIC_OFFS, _B_KEY_OFFS, _B_VAL_OFFS, _B_HDR_OFFS, _B_HK_OFFS,
                  _B_HV_OFFS):
            _grow_i32(&self.b[i], 0)
        return 0

    def __len__(self):
        return self.rows

    def set_source(self, str topic, int32_t partition):
        """The topic and partition of the rows added next."""
        self.topic = topic.encode("utf-8")
        self.partition = partition

    cdef int _check_size(self, Py_ssize_t kn, Py_ssize_t vn, Py_ssize_t size) except -1:
        # What one row adds to each variable-size column, bounded: its key and value as
        # they are; ``size`` bounds the whole row, so the headers take at most what is
        # left of it, their keys up to 3x that (invalid UTF-8 replaced can grow 3x).
        cdef Py_ssize_t headers = size - (kn if kn > 0 else 0) - (vn if vn > 0 else 0)
        if headers < 0:
            headers = 0
        if self.b[_B_KEY_DATA].n + (kn if kn > 0 else 0) > 0x7FFFFFFF \
                or self.b[_B_VAL_DATA].n + (vn if vn > 0 else 0) > 0x7FFFFFFF \
                or self.b[_B_HV_DATA].n + headers > 0x7FFFFFFF \
                or self.b[_B_HK_DATA].n + 3 * headers > 0x7FFFFFFF \
                or self.b[_B_TOPIC_DATA].n + PyBytes_GET_SIZE(self.topic) > 0x7FFFFFFF:
            raise OverflowError("ColumnBuilder: a column would exceed 2 GiB; finish() first")
        return 0

    cdef int _row(self, int64_t offset, int64_t timestamp, char ts_type,
                  const unsigned char* kd, Py_ssize_t kn,
                  const unsigned char* vd, Py_ssize_t vn, Py_ssize_t size) except -1:
        # Everything but the headers (the caller adds those, then closes the list); ``size``
        # bounds the bytes the whole row adds (checked first: no half row on overflow).
        cdef Py_ssize_t i = self.rows
        cdef Py_ssize_t tn = PyBytes_GET_SIZE(self.topic)
        self._check_size(kn, vn, size)
        _grow_i64(&self.b[_B_OFFSETS], offset)
        _grow_i64(&self.b[_B_TIMESTAMPS], timestamp)
        _grow_put(&self.b[_B_TS_TYPES], &ts_type, 1)
        _grow_i32(&self.b[_B_PARTITIONS], self.partition)
        _grow_put(&self.b[_B_TOPIC_DATA], PyBytes_AS_STRING(self.topic), tn)
        _grow_i32(&self.b[_B_TOPIC_OFFS], <int32_t>self.b[_B_TOPIC_DATA].n)
        _grow_bit(&self.b[_B_KEY_VALID], i, kn >= 0)
        if kn >= 0:
            _grow_put(&self.b[_B_KEY_DATA], kd, kn)
        else:
            self.key_nulls += 1
        _grow_i32(&self.b[_B_KEY_OFFS], <int32_t>self.b[_B_KEY_DATA].n)
        _grow_bit(&self.b[_B_VAL_VALID], i, vn >= 0)
        if vn >= 0:
            _grow_put(&self.b[_B_VAL_DATA], vd, vn)
        else:
            self.val_nulls += 1
        _grow_i32(&self.b[_B_VAL_OFFS], <int32_t>self.b[_B_VAL_DATA].n)
        self.last_offset = offset
        return 0

    cdef int _close_row(self, bint has_headers) except -1:
        _grow_bit(&self.b[_B_HDR_VALID], self.rows, has_headers)
        if not has_headers:
            self.hdr_nulls += 1
        _grow_i32(&self.b[_B_HDR_OFFS], <int32_t>self.nheaders)
        self.rows += 1
        return 0

    cdef int _header(self, const unsigned char* k, Py_ssize_t kn,
                     const unsigned char* v, Py_ssize_t vn) except -1:
        cdef bytes fixed
        if _utf8_valid(k, kn):
            _grow_put(&self.b[_B_HK_DATA], k, kn)
        else:  # replaced as the object path does (and as the Java client does)
            fixed = PyUnicode_DecodeUTF8(<const char*>k, kn, "replace").encode("utf-8")
            _grow_put(&self.b[_B_HK_DATA], PyBytes_AS_STRING(fixed), PyBytes_GET_SIZE(fixed))
        _grow_i32(&self.b[_B_HK_OFFS], <int32_t>self.b[_B_HK_DATA].n)
        _grow_bit(&self.b[_B_HV_VALID], self.nheaders, vn >= 0)
        if vn >= 0:
            _grow_put(&self.b[_B_HV_DATA], v, vn)
        else:
            self.hv_nulls += 1
        _grow_i32(&self.b[_B_HV_OFFS], <int32_t>self.b[_B_HV_DATA].n)
        self.nheaders += 1
        return 0

    def append_row(self, int64_t offset, int64_t timestamp, int timestamp_type, key, value,
                   headers=None):
        """Add one row from Python objects (for records the batch readers do not feed in
        directly, such as legacy messages). ``timestamp_type`` is the value stored."""
        cdef const unsigned char[::1] kv
        cdef const unsigned char[::1] vv
        cdef const unsigned char[::1] hvv
        cdef bytes hk
        cdef list hks = [(hkey.encode("utf-8"), hval) for hkey, hval in headers or ()]
        kv = key if key is not None else b""
        vv = value if value is not None else b""
        self._row(offset, timestamp, <char>timestamp_type,
                  &kv[0] if kv.shape[0] else <const unsigned char*>b"",
                  kv.shape[0] if key is not None else -1,
                  &vv[0] if vv.shape[0] else <const unsigned char*>b"",
                  vv.shape[0] if value is not None else -1,
                  kv.shape[0] + vv.shape[0] + sum(len(k) + (len(v) if v is not None else 0)
                                                  for k, v in hks))
        for hk, hval in hks:
            hvv = hval if hval is not None else b""
            self._header(<const unsigned char*>PyBytes_AS_STRING(hk), PyBytes_GET_SIZE(hk),
                         &hvv[0] if hvv.shape[0] else <const unsigned char*>b"",
                         hvv.shape[0] if hval is not None else -1)
        self._close_row(bool(headers))

    def finish(self) -> dict:
        """The columns so far as a dict of bytes buffers and counts (see the class
        docstring for the layout); the builder starts over empty."""
        out = {
            "rows": self.rows,
            "offset": _grow_take(&self.b[_B_OFFSETS]),
            "timestamp": _grow_take(&self.b[_B_TIMESTAMPS]),
            "timestamp_type": _grow_take(&self.b[_B_TS_TYPES]),
            "partition": _grow_take(&self.b[_B_PARTITIONS]),
            "topic": (_grow_take(&self.b[_B_TOPIC_OFFS]), _grow_take(&self.b[_B_TOPIC_DATA])),
            "key": (_grow_take(&self.b[_B_KEY_VALID]), _grow_take(&self.b[_B_KEY_OFFS]),
                    _grow_take(&self.b[_B_KEY_DATA]), self.key_nulls),
            "value": (_grow_take(&self.b[_B_VAL_VALID]), _grow_take(&self.b[_B_VAL_OFFS]),
                      _grow_take(&self.b[_B_VAL_DATA]), self.val_nulls),
            "headers": (_grow_take(&self.b[_B_HDR_VALID]), _grow_take(&self.b[_B_HDR_OFFS]),
                        self.hdr_nulls, self.nheaders,
                        (_grow_take(&self.b[_B_HK_OFFS]), _grow_take(&self.b[_B_HK_DATA])),
                        (_grow_take(&self.b[_B_HV_VALID]), _grow_take(&self.b[_B_HV_OFFS]),
                         _grow_take(&self.b[_B_HV_DATA]), self.hv_nulls)),
        }
        self._start()
        return out


# RecordBatchBuilder.append is the per-message hot path: on the fast path it is installed as
# a plain METH_FASTCALL method (Cython's generic wrapper costs about as much as encoding a
# small record). The method is _append_fastcall itself: positional (value, key, timestamp)
# goes straight to the encoder, every other call shape through kp_append_parse. Same
# signature and keywords as the ``def append`` above, which documents it and is the plain
# path's method.
cdef object _append_fastcall(RecordBatchBuilder self, PyObject** args, Py_ssize_t nargs,
                             PyObject* kwnames):
    # The C signature of a METH_FASTCALL | METH_KEYWORDS method (self arrives typed).
    cdef PyObject* v[4]
    cdef PyObject* value
    cdef PyObject* key
    cdef PyObject* timestamp
    cdef PyObject* headers
    cdef int64_t ts
    if KP_LIKELY(kwnames == NULL and nargs == 3):
        value = args[0]
        key = args[1]
        timestamp = args[2]
        headers = <PyObject*>None
    else:
        kp_append_parse(args, nargs, kwnames, v)
        value = v[0]
        key = v[1]
        timestamp = v[2]
        headers = v[3]
    if timestamp == <PyObject*>None:
        ts = _now_ms()
    elif not kp_small_int64(timestamp, &ts):
        ts = <object>timestamp
    if KP_LIKELY(headers == <PyObject*>None
                 and (value == <PyObject*>None or PyBytes_CheckExact(<object>value))
                 and (key == <PyObject*>None or PyBytes_CheckExact(<object>key))):
        if not _put_simple(
                self,
                <const unsigned char*>NULL if value == <PyObject*>None
                else <const unsigned char*>PyBytes_AS_STRING(<object>value),
                -1 if value == <PyObject*>None else PyBytes_GET_SIZE(<object>value),
                <const unsigned char*>NULL if key == <PyObject*>None
                else <const unsigned char*>PyBytes_AS_STRING(<object>key),
                -1 if key == <PyObject*>None else PyBytes_GET_SIZE(<object>key),
                ts):
            self._append(<object>value, <object>key, ts, <object>headers)
    else:
        self._append(<object>value, <object>key, ts, <object>headers)
    return None


if _FAST:
    _install_record_internals()
    kp_install_append(RecordBatchBuilder, <void*>_append_fastcall)


cdef int _varint_error(int rc, str what) except -1:
    if rc == VARINT_TRUNCATED:
        raise TruncatedDataError(f"record batch: {what} runs past the end of its record")
    raise InvalidVarintError(f"record batch: {what} varint is too long")


cdef int _length_error(int rc, int32_t n, Py_ssize_t left, str what) except -1:
    # Kept out of line so that _bytes_at stays small enough to inline.
    if rc != VARINT_OK:
        return _varint_error(rc, what + " length")
    if n < 0:
        raise InvalidLengthError(f"record batch: negative {what} length {n}")
    raise InvalidLengthError(
        f"record batch: {what} length {n} exceeds the {left} bytes left in its record")


cdef inline object _bytes_at(const unsigned char** pp, const unsigned char* rend, str what):
    # A varint length then that many bytes; None for -1.
    cdef int32_t n = 0
    cdef Py_ssize_t used = 0
    cdef int rc = _rv32(pp[0], rend, &n, &used)
    cdef const unsigned char* p = pp[0] + used
    if rc == VARINT_OK and n >= 0 and n <= rend - p:
        pp[0] = p + n
        return PyBytes_FromStringAndSize(<const char*>p, n)
    if rc == VARINT_OK and n == -1:
        pp[0] = p
        return None
    _length_error(rc, n, rend - p, what)
    return None


cdef inline int _len_at(const unsigned char** pp, const unsigned char* rend,
                        const unsigned char** data, Py_ssize_t* n, str what) except -1:
    # Like _bytes_at but only locates the bytes (data, n; n == -1 for null): the objects are
    # made once the whole record has checked out.
    cdef int32_t m = 0
    cdef Py_ssize_t used = 0
    cdef int rc = _rv32(pp[0], rend, &m, &used)
    cdef const unsigned char* p = pp[0] + used
    if rc == VARINT_OK and m >= -1 and m <= rend - p:
        data[0] = p
        n[0] = m
        pp[0] = p + m if m > 0 else p
        return 0
    _length_error(rc, m, rend - p, what)
    return -1


@cython.final
cdef class RecordBatch:
    """A v2 record batch read from a buffer (no copy). Iterate it for its records."""

    cdef const unsigned char[::1] _view     # the whole buffer given to read_batches
    cdef Py_ssize_t _start
    cdef Py_ssize_t _size
    cdef int64_t _base_offset
    cdef int32_t _ple
    cdef uint32_t _crc
    cdef int _attrs
    cdef int32_t _last_offset_delta
    cdef int64_t _base_ts
    cdef int64_t _max_ts
    cdef int64_t _producer_id
    cdef int16_t _producer_epoch
    cdef int32_t _base_seq
    cdef int32_t _count
    cdef Py_ssize_t _max_decompressed
    cdef list _records
    cdef object _decompressed

    cdef const unsigned char* _ptr(self) noexcept:
        return &self._view[0] + self._start

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def last_offset(self) -> int:
        return self._base_offset + self._last_offset_delta

    @property
    def next_offset(self) -> int:
        return self._base_offset + self._last_offset_delta + 1

    @property
    def last_offset_delta(self) -> int:
        return self._last_offset_delta

    @property
    def records_count(self) -> int:
        return self._count

    @property
    def magic(self) -> int:
        return 2

    @property
    def crc(self) -> int:
        return self._crc

    @property
    def attributes(self) -> int:
        return self._attrs

    @property
    def compression(self):
        return _COMPRESSIONS[self._attrs & ATTR_CODEC_MASK]

    @property
    def timestamp_type(self):
        return _TIMESTAMP_TYPES[(self._attrs & ATTR_TIMESTAMP_TYPE) >> 3]

    @property
    def is_transactional(self) -> bool:
        return (self._attrs & ATTR_TRANSACTIONAL) != 0

    @property
    def is_control(self) -> bool:
        return (self._attrs & ATTR_CONTROL) != 0

    @property
    def partition_leader_epoch(self) -> int:
        return self._ple

    @property
    def base_timestamp(self) -> int:
        return self._base_ts

    @property
    def max_timestamp(self) -> int:
        return self._max_ts

    @property
    def delete_horizon(self):
        """The delete horizon (ms) if the batch has one (attribute bit 6), else None."""
        if self._attrs & ATTR_DELETE_HORIZON:
            return self._base_ts
        return None

    @property
    def producer_id(self) -> int:
        return self._producer_id

    @property
    def producer_epoch(self) -> int:
        return self._producer_epoch

    @property
    def base_sequence(self) -> int:
        return self._base_seq

    @property
    def last_sequence(self) -> int:
        """Sequence of the last offset (wraps from 2**31-1 to 0); -1 without a sequence."""
        if self._base_seq < 0:
            return -1
        return <int32_t>((<int64_t>self._base_seq + self._last_offset_delta) & 0x7FFFFFFF)

    @property
    def size(self) -> int:
        """Bytes the batch takes on the wire."""
        return self._size

    @property
    def decompressed_size(self) -> int:
        """Bytes of its records once decompressed (0 until they were read, and for an
        uncompressed batch)."""
        return 0 if self._decompressed is None else PyBytes_GET_SIZE(self._decompressed)

    @property
    def raw(self) -> memoryview:
        """The batch's bytes in the original buffer (no copy)."""
        return memoryview(self._view)[self._start:self._start + self._size]

    def __len__(self):
        return self._count

    def __repr__(self):
        return (f"RecordBatch(base_offset={self._base_offset}, records={self._count}, "
                f"compression={self.compression.name}, size={self._size})")

    def validate_crc(self) -> bool:
        """True if the stored CRC-32C matches the batch's bytes."""
        return _crc32c(self._ptr() + OFF_ATTRIBUTES, self._size - OFF_ATTRIBUTES) == self._crc

    def records_list(self) -> list:
        """All records of the batch as a list (parsed on the first call, then cached).

        Iterating the batch directly is faster when the records are used one by one."""
        cdef _RecordIterator it
        cdef list out
        if self._records is None:
            it = self._iterator()
            out = []
            for rec in it:
                out.append(rec)
            self._records = out
        return self._records

    def __iter__(self):
        """Records one by one, parsed as they are reached (a malformed record raises when
        reached; the bytes must stay unchanged until the iteration ends)."""
        if self._records is not None:
            return iter(self._records)
        return self._iterator()

    def decode_into(self, list out, RecordFactory factory, topic, partition,
                    int64_t start=0, leader_epoch=-1) -> int:
        """Append an instance of ``factory``'s class for each record with an offset of at
        least ``start`` to ``out``; returns how many were added. ``topic``,
        ``partition`` and ``leader_epoch`` are stored as given. Raises like iteration on
        a malformed record (the instances made before it stay in ``out``)."""
        cdef _RecordIterator it = self._iterator()
        cdef Record rec
        cdef object ts_type = factory.ts_append if it.st.log_append else factory.ts_create
        cdef Py_ssize_t n = 0
        while it.st.index < it.st.count:
            it.st.failed = True
            rec = <Record>_next_record(&it.st, <PyObject*>it._ts_type)
            if rec.offset < start:
                continue  # before the start, or not above the record before (hostile)
            start = rec.offset + 1
            if _FAST:
                _fill_by_offset(out, factory, rec, ts_type, topic, partition, leader_epoch)
            else:
                _fill_by_name(out, factory, rec, ts_type, topic, partition, leader_epoch)
            n += 1
        if it.st.p != it.st.end:
            raise CorruptRecordError(
                f"record batch: {it.st.end - it.st.p} bytes left after the last of "
                f"{it.st.count} records")
        return n

    def decode_columns(self, ColumnBuilder cols, int64_t start=0, Py_ssize_t limit=-1) -> int:
        """Add the records with an offset of at least ``start`` to ``cols`` (at most
        ``limit`` of them when >= 0); returns how many were added. A malformed record raises
        like iteration, after the rows before it were added (never half a row)."""
        cdef _RecordIterator it = self._iterator()
        cdef _Fields f
        cdef char ts_type = cols.ts_append if it.st.log_append else cols.ts_create
        cdef Py_ssize_t n = 0
        cdef const unsigned char* p
        cdef const unsigned char* hk
        cdef const unsigned char* hv
        cdef Py_ssize_t hkn, hvn
        cdef int32_t j
        while it.st.index < it.st.count:
            if limit >= 0 and n >= limit:
                return n
            _parse_record(&it.st, &f)
            if f.hcount != 0:
                # Check every header before anything of the row is added.
                if f.hcount < 0:
                    raise InvalidLengthError(f"record batch: negative header count {f.hcount}")
                if f.hcount > (f.rend - f.hp) // 2:
                    raise InvalidLengthError(
                        f"record batch: header count {f.hcount} exceeds what the record "
                        f"can hold")
                p = f.hp
                for j in range(f.hcount):
                    _len_at(&p, f.rend, &hk, &hkn, "header key")
                    if hkn < 0:
                        raise InvalidLengthError(
                            "record batch: header key length -1 (header keys are not "
                            "nullable)")
                    _len_at(&p, f.rend, &hv, &hvn, "header value")
                if p != f.rend:
                    _trailing_error(&it.st, f.rlen, f.rend - p)
            if f.offset < start:
                continue  # before the start, or not above the record before (hostile)
            start = f.offset + 1
            cols._row(f.offset, f.timestamp, ts_type, f.kd, f.kn, f.vd, f.vn, f.rlen)
            p = f.hp
            for j in range(f.hcount):
                _len_at(&p, f.rend, &hk, &hkn, "header key")
                _len_at(&p, f.rend, &hv, &hvn, "header value")
                cols._header(hk, hkn, hv, hvn)
            cols._close_row(f.hcount != 0)
            n += 1
        if it.st.p != it.st.end:
            raise CorruptRecordError(
                f"record batch: {it.st.end - it.st.p} bytes left after the last of "
                f"{it.st.count} records")
        return n

    def control_record(self):
        """The ControlRecord of a control batch; None for data batches or an empty batch."""
        if not (self._attrs & ATTR_CONTROL):
            return None
        recs = self.records_list()
        if not recs:
            return None
        from kafka_proto.records.control import parse_control_record
        first = <Record>recs[0]
        return parse_control_record(first.key, first.value)

    cdef _RecordIterator _iterator(self):
        cdef int codec = self._attrs & ATTR_CODEC_MASK
        cdef _RecordIterator it = _RecordIterator.__new__(_RecordIterator)
        cdef const unsigned char* p
        cdef Py_ssize_t clen, limit, floor
        cdef object data
        if codec == 0:
            it.st.p = self._ptr() + HEADER_SIZE
            it.st.end = self._ptr() + self._size
        elif self._count == 0:
            # No records: the payload is not decompressed, as Kafka's reader does (an emptied
            # batch may keep its codec bits with nothing, or an empty stream, after it).
            it.st.p = it.st.end = self._ptr() + self._size
        else:
            if self._decompressed is None:
                clen = self._size - HEADER_SIZE
                limit = self._max_decompressed
                if limit <= 0:
                    # No cap given: the ratio rule, at least the floor (kept negated:
                    # read_batches' decompressed_floor, else the default)
                    floor = -limit if limit < 0 else DEFAULT_MAX_DECOMPRESSED
                    limit = clen * DECOMPRESSED_RATIO_LIMIT
                    if limit < floor:
                        limit = floor
                mv = PyMemoryView_FromMemory(<char*>self._ptr() + HEADER_SIZE, clen,
                                             PyBUF_READ)
                try:
                    data = _compression().decompress(codec, mv, limit)
                finally:
                    mv.release()
                if not PyBytes_CheckExact(data):
                    data = bytes(data)
                if self._count > PyBytes_GET_SIZE(data) // MIN_RECORD_WIRE:
                    raise InvalidLengthError(
                        f"record batch: recordsCount {self._count} cannot fit in "
                        f"{PyBytes_GET_SIZE(data)} decompressed bytes")
                self._decompressed = data
            p = <const unsigned char*>PyBytes_AS_STRING(self._decompressed)
            it.st.p = p
            it.st.end = p + PyBytes_GET_SIZE(self._decompressed)
        it._owner = self
        it.st.index = 0
        it.st.failed = False
        it.st.count = self._count
        it.st.prev_delta = -1
        it.st.last_delta = self._last_offset_delta
        it.st.base_offset = self._base_offset
        it.st.base_ts = self._base_ts
        it.st.max_ts = self._max_ts
        it.st.log_append = (self._attrs & ATTR_TIMESTAMP_TYPE) != 0
        it._ts_type = _TIMESTAMP_TYPES[1 if it.st.log_append else 0]
        return it


cdef struct _ParseState:
    const unsigned char* p
    const unsigned char* end
    int32_t index
    int32_t count
    int32_t prev_delta   # offset delta of the record before (-1 before the first)
    int32_t last_delta   # the batch's lastOffsetDelta
    int64_t base_offset
    int64_t base_ts
    int64_t max_ts
    bint log_append
    bint failed


@cython.final
cdef class _RecordIterator:
    """Parses the records of one batch as they are asked for."""

    cdef _ParseState st
    cdef object _owner      # the batch: keeps the buffer (or the decompressed bytes) alive
    cdef object _ts_type

    def __iter__(self):
        return self

    def __next__(self):
        if self.st.failed:
            raise StopIteration
        if self.st.index < self.st.count:
            # Marked failed until the record is complete (_next_record clears it): after an
            # error, iteration stops.
            self.st.failed = True
            return _next_record(&self.st, <PyObject*>self._ts_type)
        if self.st.p != self.st.end:
            left = self.st.end - self.st.p
            self.st.failed = True
            raise CorruptRecordError(
                f"record batch: {left} bytes left after the last of {self.st.count} records")
        raise StopIteration


cdef struct _Fields:
    # One record located in the buffer (nothing made yet).
    int64_t offset
    int64_t timestamp
    const unsigned char* kd
    const unsigned char* vd
    const unsigned char* hp     # first header (after the count)
    const unsigned char* rend   # end of the record
    Py_ssize_t kn               # -1: null
    Py_ssize_t vn               # -1: null
    int32_t hcount
    int32_t rlen


cdef inline int _parse_record(_ParseState* st, _Fields* f) except -1:
    # Checks a record's length, varints, key and value bounds and locates its fields;
    # headers are left to the caller (f.hp, f.hcount; a record without headers is checked
    # to end where it should). Advances st past the record, so a caller that fails on the
    # headers must not go on. Every field is checked before any object is made, so a
    # malformed record costs no allocation and the objects need no clean-up on error.
    cdef const unsigned char* p = st.p
    cdef const unsigned char* end = st.end
    cdef int32_t rlen = 0, odelta = 0, hcount = 0
    cdef int64_t tdelta = 0
    cdef Py_ssize_t used = 0
    cdef int rc
    rc = _rv32(p, end, &rlen, &used)
    if rc != VARINT_OK:
        if rc == VARINT_TRUNCATED:
            raise TruncatedDataError(
                f"record batch: record {st.index} of {st.count} runs past the end of the batch")
        raise InvalidVarintError("record batch: record length varint is too long")
    p += used
    if rlen < MIN_RECORD_BODY:
        raise InvalidLengthError(f"record batch: record length {rlen} is too small")
    if rlen > end - p:
        raise InvalidLengthError(
            f"record batch: record length {rlen} exceeds the {end - p} bytes left")
    f.rend = p + rlen
    f.rlen = rlen
    p += 1  # record attributes: unused
    rc = _rv64(p, f.rend, &tdelta, &used)
    if rc != VARINT_OK:
        _varint_error(rc, "timestampDelta")
    p += used
    rc = _rv32(p, f.rend, &odelta, &used)
    if rc != VARINT_OK:
        _varint_error(rc, "offsetDelta")
    p += used
    # Offsets go up within a batch and end at its lastOffsetDelta (compaction may drop
    # records, never reorder them): anything else is corruption, caught here so that every
    # reader of the batch stops at the same record.
    if odelta <= st.prev_delta or odelta > st.last_delta or \
            (odelta == st.last_delta and st.index != st.count - 1):
        _offset_delta_error(st, odelta)
    st.prev_delta = odelta
    _len_at(&p, f.rend, &f.kd, &f.kn, "key")
    _len_at(&p, f.rend, &f.vd, &f.vn, "value")
    rc = _rv32(p, f.rend, &hcount, &used)
    if rc != VARINT_OK:
        _varint_error(rc, "headers count")
    p += used
    f.offset = <int64_t>(<uint64_t>st.base_offset + <uint64_t><int64_t>odelta)
    f.timestamp = st.max_ts if st.log_append else \
        <int64_t>(<uint64_t>st.base_ts + <uint64_t>tdelta)
    f.hp = p
    f.hcount = hcount
    if hcount == 0 and p != f.rend:
        _trailing_error(st, rlen, f.rend - p)
    st.p = f.rend
    st.index += 1
    return 0


cdef object _next_record(_ParseState* st, PyObject* ts_type):
    # ts_type is borrowed.
    cdef _Fields f
    _parse_record(st, &f)
    if f.hcount != 0:
        return _record_with_headers(st, f.hp, f.rend, f.rlen, f.hcount, f.offset,
                                    f.timestamp, f.kd, f.kn, f.vd, f.vn, ts_type)
    return _make_record(f.offset, f.timestamp, f.kd, f.kn, f.vd, f.vn, ts_type, &st.failed)


cdef int _offset_delta_error(_ParseState* st, int32_t odelta) except -1:
    raise CorruptRecordError(
        f"record batch: record {st.index} has offsetDelta {odelta} after "
        f"{st.prev_delta}, in a batch whose lastOffsetDelta is {st.last_delta} and which "
        f"holds {st.count} records")


cdef int _trailing_error(_ParseState* st, int32_t rlen, Py_ssize_t left) except -1:
    raise CorruptRecordError(
        f"record batch: record {st.index} declares {rlen} bytes but its fields take "
        f"{rlen - left}")


cdef object _record_with_headers(_ParseState* st, const unsigned char* p,
                                 const unsigned char* rend, int32_t rlen, int32_t hcount,
                                 int64_t offset, int64_t timestamp,
                                 const unsigned char* kd, Py_ssize_t kn,
                                 const unsigned char* vd, Py_ssize_t vn, PyObject* ts_type):
    cdef list headers
    cdef Record rec
    cdef int32_t j, hkl = 0
    cdef Py_ssize_t used = 0
    cdef bint unused = True
    cdef int rc
    cdef object hkey
    if hcount < 0:
        raise InvalidLengthError(f"record batch: negative header count {hcount}")
    # Each header takes at least 2 bytes: refuse counts the record cannot hold.
    if hcount > (rend - p) // 2:
        raise InvalidLengthError(
            f"record batch: header count {hcount} exceeds what the record can hold")
    headers = []
    for j in range(hcount):
        rc = _rv32(p, rend, &hkl, &used)
        if rc != VARINT_OK:
            _varint_error(rc, "header key length")
        p += used
        if hkl < 0:
            raise InvalidLengthError(
                f"record batch: header key length {hkl} (header keys are not nullable)")
        if hkl > rend - p:
            raise InvalidLengthError(
                f"record batch: header key length {hkl} exceeds its record")
        # Malformed UTF-8 is replaced, as the Java client does.
        hkey = PyUnicode_DecodeUTF8(<const char*>p, hkl, "replace")
        p += hkl
        headers.append((hkey, _bytes_at(&p, rend, "header value")))
    if p != rend:
        _trailing_error(st, rlen, rend - p)
    rec = <Record>_make_record(offset, timestamp, kd, kn, vd, vn, ts_type, &unused)
    rec._headers = headers
    st.failed = False
    return rec


cdef object _read_legacy_entry = None


cdef object _legacy_reader():
    global _read_legacy_entry
    if _read_legacy_entry is None:
        try:
            from kafka_proto.records._legacy import read_legacy_entry
        except ImportError as exc:
            raise UnsupportedMagicError(
                "legacy (magic 0/1) message sets need kafka_proto.records._legacy") from exc
        _read_legacy_entry = read_legacy_entry
    return _read_legacy_entry


@cython.final
cdef class BatchReader:
    """Iterator over the batches of a buffer; see :func:`read_batches`."""

    cdef const unsigned char[::1] _view
    cdef object _buffer
    cdef Py_ssize_t _pos
    cdef Py_ssize_t _end
    cdef bint _check_crc
    cdef bint _allow_truncated
    cdef Py_ssize_t _max_decompressed

    def __iter__(self):
        return self

    @property
    def position(self) -> int:
        """Offset in the buffer of the next batch to read."""
        return self._pos

    def __next__(self):
        cdef Py_ssize_t remaining = self._end - self._pos
        cdef const unsigned char* h
        cdef int32_t length
        cdef int magic
        cdef Py_ssize_t pos = self._pos
        if remaining <= 0:
            raise StopIteration
        try:
            if remaining < LOG_OVERHEAD:
                return self._truncated(remaining, LOG_OVERHEAD)
            h = &self._view[0] + pos
            length = _get_i32(h + OFF_LENGTH)
            if length < 0:
                raise InvalidLengthError(f"record batch at {pos}: negative batchLength {length}")
            if length < LEGACY_MIN_MESSAGE:
                raise InvalidLengthError(
                    f"record batch at {pos}: batchLength {length} is below any format's minimum")
            if remaining - LOG_OVERHEAD < length:
                return self._truncated(remaining, <Py_ssize_t>length + LOG_OVERHEAD)
            magic = <signed char>h[OFF_MAGIC]
            if magic == 2:
                if length < HEADER_SIZE - LOG_OVERHEAD:
                    raise InvalidLengthError(
                        f"record batch at {pos}: batchLength {length} is below the v2 "
                        f"minimum {HEADER_SIZE - LOG_OVERHEAD}")
                batch = _make_batch(self._view, pos, length + LOG_OVERHEAD,
                                    self._check_crc, self._max_decompressed)
                self._pos = pos + length + LOG_OVERHEAD
                return batch
            if magic == 0 or magic == 1:
                if self._max_decompressed != 0:   # a cap, or a floor (negated): as a cap
                    legacy, next_pos = _legacy_reader()(self._buffer, pos, self._end,
                                                        self._check_crc,
                                                        abs(self._max_decompressed))
                else:
                    legacy, next_pos = _legacy_reader()(self._buffer, pos, self._end,
                                                        self._check_crc)
                if legacy is None:
                    return self._truncated(remaining, <Py_ssize_t>length + LOG_OVERHEAD)
                if next_pos <= pos or next_pos > self._end:
                    raise CorruptRecordError("legacy reader did not advance")
                self._pos = next_pos
                return legacy
            raise UnsupportedMagicError(f"record batch at {pos}: unsupported magic {magic}")
        except BaseException:
            # Stop after an error: a caller that catches it and keeps iterating must not
            # see the same bytes again forever.
            self._pos = self._end
            raise

    cdef object _truncated(self, Py_ssize_t remaining, Py_ssize_t needed):
        self._pos = self._end
        if self._allow_truncated:
            raise StopIteration
        raise TruncatedDataError(
            f"record batch truncated: {remaining} bytes left, {needed} needed")


cdef RecordBatch _make_batch(const unsigned char[::1] view, Py_ssize_t start, Py_ssize_t size,
                             bint check_crc, Py_ssize_t max_decompressed):
    cdef const unsigned char* h = &view[0] + start
    cdef RecordBatch b = RecordBatch.__new__(RecordBatch)
    cdef int codec
    b._view = view
    b._start = start
    b._size = size
    b._base_offset = _get_i64(h + OFF_BASE_OFFSET)
    b._ple = _get_i32(h + OFF_PLE)
    b._crc = _get_u32(h + OFF_CRC)
    b._attrs = <uint16_t>_get_i16(h + OFF_ATTRIBUTES)
    b._last_offset_delta = _get_i32(h + OFF_LAST_OFFSET_DELTA)
    b._base_ts = _get_i64(h + OFF_BASE_TIMESTAMP)
    b._max_ts = _get_i64(h + OFF_MAX_TIMESTAMP)
    b._producer_id = _get_i64(h + OFF_PRODUCER_ID)
    b._producer_epoch = _get_i16(h + OFF_PRODUCER_EPOCH)
    b._base_seq = _get_i32(h + OFF_BASE_SEQUENCE)
    b._count = _get_i32(h + OFF_RECORDS_COUNT)
    b._max_decompressed = max_decompressed
    if check_crc:
        if _crc32c(h + OFF_ATTRIBUTES, size - OFF_ATTRIBUTES) != b._crc:
            raise CrcMismatchError(
                f"record batch at offset {b._base_offset}: CRC-32C mismatch")
    codec = b._attrs & ATTR_CODEC_MASK
    if codec > 4:
        raise UnsupportedCompressionError(
            f"record batch at offset {b._base_offset}: unknown compression codec id {codec}")
    if b._count < 0:
        raise InvalidLengthError(
            f"record batch at offset {b._base_offset}: negative recordsCount {b._count}")
    if b._base_offset >= INT64_MAX - (<int64_t>b._last_offset_delta
                                      if b._last_offset_delta > 0 else 0):
        # Its last offset would leave no next offset in int64 (a log's end offset is one):
        # record offsets computed from it would overflow.
        raise CorruptRecordError(
            f"record batch at offset {b._base_offset}: lastOffsetDelta "
            f"{b._last_offset_delta} leaves no next offset below 2^63")
    if codec == 0 and b._count > (size - HEADER_SIZE) // MIN_RECORD_WIRE:
        raise InvalidLengthError(
            f"record batch at offset {b._base_offset}: recordsCount {b._count} cannot fit "
            f"in {size - HEADER_SIZE} bytes")
    return b


def read_batches(buffer, bint check_crc=True, *, bint allow_truncated=True,
                 max_decompressed_size=None, decompressed_floor=None):
    """Iterate the record batches (v2 RecordBatch, legacy LegacyBatch) of ``buffer``.

    buffer: any contiguous bytes-like object; batches and records point into it until their
    records are parsed, so it must not change meanwhile. A truncated batch at the end (as a
    fetch response may end) stops the iteration, or raises TruncatedDataError when
    ``allow_truncated`` is false. ``max_decompressed_size`` caps the decompressed records of
    one batch (default: max(``decompressed_floor``, 64 x compressed size), the floor 64 MiB
    unless given: a reader that knows how large a legitimate batch may be raises it).
    """
    cdef BatchReader r = BatchReader.__new__(BatchReader)
    cdef Py_ssize_t limit = 0
    if max_decompressed_size is not None:
        limit = max_decompressed_size
        if limit <= 0:
            raise ValueError("max_decompressed_size must be positive")
    elif decompressed_floor is not None:
        limit = decompressed_floor
        if limit <= 0:
            raise ValueError("decompressed_floor must be positive")
        limit = -limit      # kept negated: a floor, not a cap
    r._buffer = buffer
    r._view = buffer
    r._pos = 0
    r._end = r._view.shape[0]
    r._check_crc = check_crc
    r._allow_truncated = allow_truncated
    r._max_decompressed = limit
    return r
