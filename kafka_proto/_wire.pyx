# cython: language_level=3
"""Kafka wire primitives: :class:`Writer` builds bytes, :class:`Reader` parses them.

Every request and response passes through these two classes, so both work on raw C
pointers with one explicit bounds check per field and never create a Python object per
byte. All integers are big-endian; varints are (zigzag) LEB128 as Kafka uses them.

Limits worth knowing:

* Strings (classic and compact) are limited to 32767 UTF-8 bytes, as in Kafka itself.
  Read, a string that is not valid UTF-8 has each bad sequence replaced by U+FFFD, as
  Kafka's own readers (Java's String decoding) do: one peer's bad bytes in a group id or
  a client id must not make a whole answer (a group listing, a metadata answer) unreadable.
* Bytes are limited to 2**31 - 1 bytes (int32 length), compact bytes to 2**31 - 2.
* When reading, an array count larger than the bytes remaining is rejected with
  :class:`~kafka_proto.errors.InvalidLengthError`: every element of every Kafka array
  takes at least one byte, so such a count can only come from corrupt input, and
  rejecting it early means a caller never pre-allocates from an unchecked count.
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.bytes cimport PyBytes_CheckExact
from cpython.bytearray cimport PyByteArray_CheckExact, PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.float cimport PyFloat_Check, PyFloat_AsDouble
from cpython.long cimport PyLong_Check
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.stdint cimport INT64_MIN, INT64_MAX
from libc.string cimport memcpy, memset

from kafka_proto._varint cimport (
    VARINT_OK, VARINT_TRUNCATED, VARINT_TOO_LONG,
    read_uvarint64, write_uvarint64, zigzag64,
)

import uuid as _uuid_mod

from kafka_proto.errors import (
    InvalidLengthError,
    InvalidVarintError,
    ProtocolDecodeError,
    ProtocolEncodeError,
    TruncatedDataError,
)

cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    bint PyUnicode_Check(object o)
    long long PyLong_AsLongLongAndOverflow(object o, int* overflow) except? -1
    object PyNumber_Index(object o)
    int PyObject_GenericSetAttr(object o, object name, object value) except -1

cdef extern from "kp_endian.h" nogil:
    uint16_t kp_load_be16(const unsigned char* p)
    uint32_t kp_load_be32(const unsigned char* p)
    uint64_t kp_load_be64(const unsigned char* p)
    double kp_load_be_f64(const unsigned char* p)
    void kp_store_be16(unsigned char* p, uint16_t v)
    void kp_store_be32(unsigned char* p, uint32_t v)
    void kp_store_be64(unsigned char* p, uint64_t v)
    void kp_store_be_f64(unsigned char* p, double v)

cdef object _UUID = _uuid_mod.UUID
cdef object _object_new = object.__new__
cdef object _SAFE_UNKNOWN = _uuid_mod.SafeUUID.unknown


cdef object _make_uuid_fast(object value):
    # uuid.UUID.__init__ spends most of its time parsing keyword arguments; filling the
    # two slots directly is several times faster (checked against the slow path below).
    cdef object u = _object_new(_UUID)
    PyObject_GenericSetAttr(u, "int", value)
    PyObject_GenericSetAttr(u, "is_safe", _SAFE_UNKNOWN)
    return u


cdef bint _uuid_fast_ok():
    cdef object probe = 0x0123456789ABCDEF_FEDCBA9876543210
    try:
        u = _make_uuid_fast(probe)
        return u == _UUID(int=probe) and hash(u) == hash(_UUID(int=probe)) \
            and str(u) == str(_UUID(int=probe))
    except Exception:
        return False


cdef bint _UUID_FAST = _uuid_fast_ok()
cdef str _EMPTY_STR = ""
cdef bytes _EMPTY_BYTES = b""

# Kafka caps every string at a signed 16-bit length, compact ones included.
DEF MAX_STRING = 0x7FFF
DEF MAX_INT32 = 0x7FFFFFFF
DEF MAX_UINT32 = 0xFFFFFFFF

# Payload kinds for Writer._append_bytes_like.
DEF KIND_INT32_LEN = 0
DEF KIND_COMPACT_LEN = 1
DEF KIND_RAW = 2


# --------------------------------------------------------------------------------------
# Value conversion for the writer: every bad value becomes a ProtocolEncodeError.

cdef inline int64_t _as_int(object v, const char* what, int64_t lo, int64_t hi) except? -1:
    """Convert ``v`` (an int or anything with ``__index__``) and check lo <= v <= hi."""
    cdef int overflow = 0
    cdef long long x
    if not PyLong_Check(v):
        try:
            v = PyNumber_Index(v)
        except TypeError:
            raise ProtocolEncodeError(
                f"{what.decode()}: expected an int, got {type(v).__name__}") from None
    x = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow != 0 or x < lo or x > hi:
        raise ProtocolEncodeError(f"{what.decode()}: {v!r} is out of range [{lo}, {hi}]")
    return x


@cython.final
cdef class Writer:
    """Growable output buffer for encoding Kafka messages.

    ``Writer(initial_capacity=256)``. Every ``write_*`` method appends to the end;
    :meth:`reserve` and :meth:`patch_int32` support back-patching sizes.
    Bad values raise :class:`~kafka_proto.errors.ProtocolEncodeError`.
    """

    def __cinit__(self, Py_ssize_t initial_capacity=256):
        if initial_capacity < 16:
            initial_capacity = 16
        self._buf = <unsigned char*>PyMem_Malloc(initial_capacity)
        if self._buf == NULL:
            raise MemoryError()
        self._cap = initial_capacity
        self._len = 0

    def __dealloc__(self):
        PyMem_Free(self._buf)
        self._buf = NULL

    def __len__(self):
        return self._len

    def __repr__(self):
        return f"<Writer len={self._len} capacity={self._cap}>"

    cdef int _grow(self, Py_ssize_t need) except -1:
        """Make room for ``need`` more bytes (doubling, so appends are amortised O(1))."""
        cdef Py_ssize_t want, new_cap
        cdef unsigned char* nb
        if need > PY_SSIZE_T_MAX - self._len:
            raise MemoryError("Writer size overflow")
        want = self._len + need
        if want <= self._cap:
            return 0
        new_cap = self._cap * 2 if self._cap <= PY_SSIZE_T_MAX // 2 else want
        if new_cap < want:
            new_cap = want
        nb = <unsigned char*>PyMem_Realloc(self._buf, new_cap)
        if nb == NULL:
            raise MemoryError()
        self._buf = nb
        self._cap = new_cap
        return 0

    cdef int _append(self, const unsigned char* p, Py_ssize_t n) except -1:
        if self._cap - self._len < n:
            self._grow(n)
        if n:
            memcpy(self._buf + self._len, p, n)
        self._len += n
        return 0

    cdef int _put_uvarint(self, uint64_t v) except -1:
        if self._cap - self._len < 10:
            self._grow(10)
        self._len += write_uvarint64(self._buf + self._len, v)
        return 0

    cdef int _append_utf8(self, object s, bint compact, const char* what) except -1:
        """Length prefix (int16, or uvarint(len+1) when compact) then the UTF-8 bytes."""
        cdef Py_ssize_t n
        cdef const char* p
        if not PyUnicode_Check(s):
            raise ProtocolEncodeError(f"{what.decode()}: expected str, got {type(s).__name__}")
        try:
            p = PyUnicode_AsUTF8AndSize(s, &n)
        except UnicodeEncodeError as exc:
            raise ProtocolEncodeError(f"{what.decode()}: not encodable as UTF-8: {exc}") from None
        if n > MAX_STRING:
            raise ProtocolEncodeError(
                f"{what.decode()}: {n} UTF-8 bytes exceed the limit of {MAX_STRING}")
        if self._cap - self._len < n + 5:
            self._grow(n + 5)
        if compact:
            self._len += write_uvarint64(self._buf + self._len, <uint64_t>(n + 1))
        else:
            kp_store_be16(self._buf + self._len, <uint16_t>n)
            self._len += 2
        memcpy(self._buf + self._len, p, n)
        self._len += n
        return 0

    cdef int _append_bytes_like(self, object b, int kind, const char* what) except -1:
        """Append a bytes-like object, with the length prefix ``kind`` asks for.

        The bytes are copied once, straight from the object's buffer into ours.
        """
        cdef Py_buffer pb
        cdef const unsigned char* p
        cdef Py_ssize_t n
        if PyBytes_CheckExact(b):
            p = <const unsigned char*>PyBytes_AS_STRING(b)
            n = PyBytes_GET_SIZE(b)
            return self._append_prefixed(p, n, kind, what)
        try:
            PyObject_GetBuffer(b, &pb, PyBUF_SIMPLE)
        except TypeError:
            raise ProtocolEncodeError(
                f"{what.decode()}: expected a bytes-like object, got {type(b).__name__}"
            ) from None
        except BufferError:
            # Non-contiguous memoryview: one compacting copy, then the normal path.
            return self._append_bytes_like(memoryview(b).tobytes(), kind, what)
        try:
            self._append_prefixed(<const unsigned char*>pb.buf, pb.len, kind, what)
        finally:
            PyBuffer_Release(&pb)
        return 0

    cdef int _append_prefixed(self, const unsigned char* p, Py_ssize_t n, int kind,
                              const char* what) except -1:
        if kind == KIND_INT32_LEN:
            if n > MAX_INT32:
                raise ProtocolEncodeError(f"{what.decode()}: {n} bytes exceed the int32 length")
            if self._cap - self._len < n + 4:
                self._grow(n + 4)
            kp_store_be32(self._buf + self._len, <uint32_t>n)
            self._len += 4
        elif kind == KIND_COMPACT_LEN:
            if n > MAX_INT32 - 1:
                raise ProtocolEncodeError(f"{what.decode()}: {n} bytes exceed the compact length")
            if self._cap - self._len < n + 5:
                self._grow(n + 5)
            self._len += write_uvarint64(self._buf + self._len, <uint64_t>(n + 1))
        elif self._cap - self._len < n:
            self._grow(n)
        if n:
            memcpy(self._buf + self._len, p, n)
        self._len += n
        return 0

    # ---- fixed-width numbers -------------------------------------------------------

    cpdef void write_int8(self, object v) except *:
        """Append a signed 8-bit integer."""
        cdef int64_t x = _as_int(v, b"int8", -0x80, 0x7F)
        if self._cap - self._len < 1:
            self._grow(1)
        self._buf[self._len] = <unsigned char>(<int8_t>x)
        self._len += 1

    cpdef void write_int16(self, object v) except *:
        """Append a big-endian signed 16-bit integer."""
        cdef int64_t x = _as_int(v, b"int16", -0x8000, 0x7FFF)
        if self._cap - self._len < 2:
            self._grow(2)
        kp_store_be16(self._buf + self._len, <uint16_t>(<int16_t>x))
        self._len += 2

    cpdef void write_int32(self, object v) except *:
        """Append a big-endian signed 32-bit integer."""
        cdef int64_t x = _as_int(v, b"int32", -0x80000000, 0x7FFFFFFF)
        if self._cap - self._len < 4:
            self._grow(4)
        kp_store_be32(self._buf + self._len, <uint32_t>(<int32_t>x))
        self._len += 4

    cpdef void write_int64(self, object v) except *:
        """Append a big-endian signed 64-bit integer."""
        cdef int64_t x = _as_int(v, b"int64", INT64_MIN, INT64_MAX)
        if self._cap - self._len < 8:
            self._grow(8)
        kp_store_be64(self._buf + self._len, <uint64_t>x)
        self._len += 8

    cpdef void write_uint16(self, object v) except *:
        """Append a big-endian unsigned 16-bit integer."""
        cdef int64_t x = _as_int(v, b"uint16", 0, 0xFFFF)
        if self._cap - self._len < 2:
            self._grow(2)
        kp_store_be16(self._buf + self._len, <uint16_t>x)
        self._len += 2

    cpdef void write_uint32(self, object v) except *:
        """Append a big-endian unsigned 32-bit integer."""
        cdef int64_t x = _as_int(v, b"uint32", 0, MAX_UINT32)
        if self._cap - self._len < 4:
            self._grow(4)
        kp_store_be32(self._buf + self._len, <uint32_t>x)
        self._len += 4

    cpdef void write_float64(self, object v) except *:
        """Append an IEEE-754 double (big-endian); ints are converted."""
        cdef double d
        if not (PyFloat_Check(v) or PyLong_Check(v)):
            raise ProtocolEncodeError(f"float64: expected a float, got {type(v).__name__}")
        try:
            d = PyFloat_AsDouble(v)
        except OverflowError:
            raise ProtocolEncodeError(f"float64: {v!r} is too large for a double") from None
        if self._cap - self._len < 8:
            self._grow(8)
        kp_store_be_f64(self._buf + self._len, d)
        self._len += 8

    cpdef void write_bool(self, object v) except *:
        """Append a boolean as one byte (0 or 1); accepts bool or the ints 0 and 1."""
        cdef unsigned char b
        if v is True:
            b = 1
        elif v is False:
            b = 0
        elif PyLong_Check(v) and (v == 0 or v == 1):
            b = 1 if v else 0
        else:
            raise ProtocolEncodeError(f"bool: expected a bool, got {v!r}")
        if self._cap - self._len < 1:
            self._grow(1)
        self._buf[self._len] = b
        self._len += 1

    cpdef void write_uuid(self, object v) except *:
        """Append a UUID (16 bytes); accepts uuid.UUID or any 16-byte bytes-like object."""
        cdef Py_ssize_t start = self._len
        if isinstance(v, _UUID):
            v = v.bytes
        elif v is None or PyUnicode_Check(v):
            raise ProtocolEncodeError(f"uuid: expected uuid.UUID or 16 bytes, got {v!r}")
        self._append_bytes_like(v, KIND_RAW, b"uuid")
        if self._len - start != 16:
            self._len = start
            raise ProtocolEncodeError(f"uuid: expected 16 bytes, got {len(v)}")

    # ---- varints ---------------------------------------------------------------------

    cpdef void write_varint(self, object v) except *:
        """Append a zigzag varint of a signed 32-bit value."""
        cdef int64_t x = _as_int(v, b"varint", -0x80000000, 0x7FFFFFFF)
        self._put_uvarint(zigzag64(x))

    cpdef void write_varlong(self, object v) except *:
        """Append a zigzag varint of a signed 64-bit value."""
        cdef int64_t x = _as_int(v, b"varlong", INT64_MIN, INT64_MAX)
        self._put_uvarint(zigzag64(x))

    cpdef void write_uvarint(self, object v) except *:
        """Append an unsigned varint (0 .. 2**32 - 1)."""
        cdef int64_t x = _as_int(v, b"uvarint", 0, MAX_UINT32)
        self._put_uvarint(<uint64_t>x)

    # ---- strings ---------------------------------------------------------------------

    cpdef void write_string(self, object s) except *:
        """Append a non-null string: int16 length then UTF-8."""
        if s is None:
            raise ProtocolEncodeError("string: None is not allowed (field is not nullable)")
        self._append_utf8(s, False, b"string")

    cpdef void write_nullable_string(self, object s) except *:
        """Append a string or None (length -1)."""
        if s is None:
            if self._cap - self._len < 2:
                self._grow(2)
            kp_store_be16(self._buf + self._len, 0xFFFF)
            self._len += 2
        else:
            self._append_utf8(s, False, b"nullable string")

    cpdef void write_compact_string(self, object s) except *:
        """Append a non-null compact string: uvarint(len + 1) then UTF-8."""
        if s is None:
            raise ProtocolEncodeError(
                "compact string: None is not allowed (field is not nullable)")
        self._append_utf8(s, True, b"compact string")

    cpdef void write_compact_nullable_string(self, object s) except *:
        """Append a compact string or None (uvarint 0)."""
        if s is None:
            self._put_uvarint(0)
        else:
            self._append_utf8(s, True, b"compact nullable string")

    # ---- bytes -----------------------------------------------------------------------

    cpdef void write_bytes(self, object b) except *:
        """Append non-null bytes (any bytes-like): int32 length then the bytes."""
        if b is None:
            raise ProtocolEncodeError("bytes: None is not allowed (field is not nullable)")
        self._append_bytes_like(b, KIND_INT32_LEN, b"bytes")

    cpdef void write_nullable_bytes(self, object b) except *:
        """Append bytes or None (length -1)."""
        if b is None:
            if self._cap - self._len < 4:
                self._grow(4)
            kp_store_be32(self._buf + self._len, 0xFFFFFFFF)
            self._len += 4
        else:
            self._append_bytes_like(b, KIND_INT32_LEN, b"nullable bytes")

    cpdef void write_compact_bytes(self, object b) except *:
        """Append non-null compact bytes: uvarint(len + 1) then the bytes."""
        if b is None:
            raise ProtocolEncodeError(
                "compact bytes: None is not allowed (field is not nullable)")
        self._append_bytes_like(b, KIND_COMPACT_LEN, b"compact bytes")

    cpdef void write_compact_nullable_bytes(self, object b) except *:
        """Append compact bytes or None (uvarint 0)."""
        if b is None:
            self._put_uvarint(0)
        else:
            self._append_bytes_like(b, KIND_COMPACT_LEN, b"compact nullable bytes")

    # ---- arrays, raw, patching -------------------------------------------------------

    cpdef void write_array_length(self, object n) except *:
        """Append an int32 element count; None means a null array (-1)."""
        cdef int64_t x
        if n is None:
            x = -1
        else:
            x = _as_int(n, b"array length", 0, MAX_INT32)
        if self._cap - self._len < 4:
            self._grow(4)
        kp_store_be32(self._buf + self._len, <uint32_t>(<int32_t>x))
        self._len += 4

    cpdef void write_compact_array_length(self, object n) except *:
        """Append uvarint(count + 1); None means a null array (0)."""
        if n is None:
            self._put_uvarint(0)
        else:
            self._put_uvarint(<uint64_t>_as_int(n, b"compact array length", 0, MAX_INT32 - 1) + 1)

    cpdef void write_raw(self, object b) except *:
        """Append the bytes of any bytes-like object, without a length prefix."""
        self._append_bytes_like(b, KIND_RAW, b"raw")

    cpdef Py_ssize_t reserve(self, Py_ssize_t n) except -1:
        """Append ``n`` zero bytes and return their position (to patch them later)."""
        cdef Py_ssize_t pos = self._len
        if n < 0:
            raise ProtocolEncodeError(f"reserve: negative size {n}")
        if self._cap - self._len < n:
            self._grow(n)
        memset(self._buf + pos, 0, n)
        self._len += n
        return pos

    cpdef void patch_int32(self, Py_ssize_t pos, object v) except *:
        """Overwrite the 4 bytes at ``pos`` with the big-endian int32 ``v``."""
        cdef int64_t x = _as_int(v, b"int32", -0x80000000, 0x7FFFFFFF)
        if pos < 0 or pos > self._len - 4:
            raise ProtocolEncodeError(
                f"patch_int32: position {pos} is outside the {self._len} bytes written")
        kp_store_be32(self._buf + pos, <uint32_t>(<int32_t>x))

    cpdef bytes getvalue(self):
        """Return a copy of everything written so far."""
        return PyBytes_FromStringAndSize(<const char*>self._buf, self._len)

    cpdef void clear(self) except *:
        """Forget the contents (the capacity is kept for reuse)."""
        self._len = 0


# --------------------------------------------------------------------------------------

cdef inline int _varint_error(int rc, const char* what, Py_ssize_t pos) except -1:
    if rc == VARINT_TRUNCATED:
        raise TruncatedDataError(f"truncated input reading {what.decode()} at position {pos}")
    raise InvalidVarintError(f"{what.decode()} at position {pos} is too long")


@cython.final
cdef class Reader:
    """Cursor over a buffer-protocol object (bytes, bytearray, memoryview, mmap).

    ``Reader(buffer, start=0, end=None)`` reads ``buffer[start:end]`` without copying
    it; the Reader keeps the buffer exported (so a bytearray cannot be resized and an
    mmap cannot be closed while the Reader lives). Positions are absolute offsets into
    ``buffer``. Malformed input raises a :class:`~kafka_proto.errors.ProtocolDecodeError`
    subclass: :class:`TruncatedDataError` when a field runs past ``end``,
    :class:`InvalidLengthError` for a bad length or count, :class:`InvalidVarintError`
    for an over-long varint.
    """

    def __cinit__(self, buffer, Py_ssize_t start=0, end=None):
        cdef Py_ssize_t e
        try:
            PyObject_GetBuffer(buffer, &self._view, PyBUF_SIMPLE)
        except BufferError as exc:
            raise ValueError(f"Reader needs a contiguous buffer: {exc}") from None
        self._has_view = True
        self._obj = buffer
        self._data = <const unsigned char*>self._view.buf
        e = self._view.len if end is None else end
        if start < 0 or e < start or e > self._view.len:
            raise ValueError(
                f"Reader range [{start}, {end}) is outside the buffer of {self._view.len} bytes")
        self._start = start
        self._pos = start
        self._end = e

    def __dealloc__(self):
        if self._has_view:
            PyBuffer_Release(&self._view)
            self._has_view = False

    def __repr__(self):
        return f"<Reader position={self._pos} end={self._end}>"

    @property
    def position(self) -> int:
        """Current absolute offset into the buffer (settable, within [start, end])."""
        return self._pos

    @position.setter
    def position(self, Py_ssize_t value):
        if value < self._start or value > self._end:
            raise ValueError(f"position {value} outside [{self._start}, {self._end}]")
        self._pos = value

    @property
    def remaining(self) -> int:
        """Bytes left between the position and ``end``."""
        return self._end - self._pos

    @property
    def start(self) -> int:
        """Absolute offset where this Reader starts."""
        return self._start

    @property
    def end(self) -> int:
        """Absolute offset where this Reader stops."""
        return self._end

    # ---- error helpers (kept out of line so the fast paths stay small) ---------------

    cdef int _truncated(self, const char* what, Py_ssize_t need) except -1:
        raise TruncatedDataError(
            f"truncated input reading {what.decode()} at position {self._pos}: "
            f"need {need} bytes, {self._end - self._pos} remain")

    cdef Py_ssize_t _check_length(self, int64_t n, bint nullable, const char* what,
                                  Py_ssize_t at) except -2:
        """Validate a length ``n`` read at ``at``; returns n, or -1 for an allowed null.

        On error the position goes back to ``at``: a failed read consumes nothing.
        """
        if n < 0:
            if n == -1:
                if nullable:
                    return -1
                self._pos = at
                raise InvalidLengthError(
                    f"{what.decode()} at position {at} is null, which is not allowed here")
            self._pos = at
            raise InvalidLengthError(f"{what.decode()} at position {at} has negative length {n}")
        cdef Py_ssize_t left = self._end - self._pos
        if n > left:
            self._pos = at
            raise InvalidLengthError(
                f"{what.decode()} at position {at} declares {n} bytes "
                f"but only {left} remain after its length")
        return <Py_ssize_t>n

    cdef int64_t _uvarint32(self, const char* what) except -1:
        """Read an unsigned varint that must fit 32 bits (at most 5 bytes)."""
        cdef const unsigned char* p = self._data + self._pos
        cdef uint64_t u = 0
        cdef Py_ssize_t used = 0
        cdef int rc
        if self._pos < self._end and p[0] < 0x80:
            self._pos += 1
            return p[0]
        rc = read_uvarint64(p, self._data + self._end, 5, &u, &used)
        if rc != VARINT_OK:
            _varint_error(rc, what, self._pos)
        if used == 5 and p[4] > 0x0F:
            raise InvalidVarintError(
                f"{what.decode()} at position {self._pos} does not fit in 32 bits")
        self._pos += used
        return <int64_t>u

    cdef object _memoryview(self):
        cdef object mv = self._mv
        if mv is None:
            mv = memoryview(self._obj)
            if mv.ndim != 1 or mv.format != "B":
                mv = mv.cast("B")
            self._mv = mv
        return mv

    cdef int _check_string_limit(self, Py_ssize_t n, const char* what,
                                 Py_ssize_t at) except -1:
        # A compact length can say more than 32767, which Kafka's generated readers refuse
        # ("string field had invalid length") as its writers never write it: so do we.
        if n > MAX_STRING:
            self._pos = at
            raise InvalidLengthError(f"{what.decode()} at position {at} declares {n} bytes, "
                                     f"above the limit of {MAX_STRING}")
        return 0

    cdef object _take_str(self, Py_ssize_t n):
        cdef Py_ssize_t p = self._pos
        cdef object s
        if n == 0:
            return _EMPTY_STR
        s = PyUnicode_DecodeUTF8(<const char*>(self._data + p), n, "replace")
        self._pos = p + n
        return s

    cdef object _take_view(self, Py_ssize_t n):
        cdef Py_ssize_t p = self._pos
        cdef object v = self._memoryview()[p:p + n]
        self._pos = p + n
        return v

    # ---- fixed-width numbers -------------------------------------------------------

    cpdef int8_t read_int8(self) except? -1:
        """Read a signed 8-bit integer."""
        if self._end - self._pos < 1:
            self._truncated(b"int8", 1)
        self._pos += 1
        return <int8_t>self._data[self._pos - 1]

    cpdef int16_t read_int16(self) except? -1:
        """Read a big-endian signed 16-bit integer."""
        cdef Py_ssize_t p = self._pos
        if self._end - p < 2:
            self._truncated(b"int16", 2)
        self._pos = p + 2
        return <int16_t>kp_load_be16(self._data + p)

    cpdef int32_t read_int32(self) except? -1:
        """Read a big-endian signed 32-bit integer."""
        cdef Py_ssize_t p = self._pos
        if self._end - p < 4:
            self._truncated(b"int32", 4)
        self._pos = p + 4
        return <int32_t>kp_load_be32(self._data + p)

    cpdef int64_t read_int64(self) except? -1:
        """Read a big-endian signed 64-bit integer."""
        cdef Py_ssize_t p = self._pos
        if self._end - p < 8:
            self._truncated(b"int64", 8)
        self._pos = p + 8
        return <int64_t>kp_load_be64(self._data + p)

    cpdef int32_t read_uint16(self) except -1:
        """Read a big-endian unsigned 16-bit integer."""
        cdef Py_ssize_t p = self._pos
        if self._end - p < 2:
            self._truncated(b"uint16", 2)
        self._pos = p + 2
        return kp_load_be16(self._data + p)

    cpdef int64_t read_uint32(self) except -1:
        """Read a big-endian unsigned 32-bit integer."""
        cdef Py_ssize_t p = self._pos
        if self._end - p < 4:
            self._truncated(b"uint32", 4)
        self._pos = p + 4
        return kp_load_be32(self._data + p)

    cpdef double read_float64(self) except? -1:
        """Read a big-endian IEEE-754 double."""
        cdef Py_ssize_t p = self._pos
        if self._end - p < 8:
            self._truncated(b"float64", 8)
        self._pos = p + 8
        return kp_load_be_f64(self._data + p)

    cpdef bint read_bool(self) except -1:
        """Read one byte as a boolean (any nonzero value is True)."""
        if self._end - self._pos < 1:
            self._truncated(b"bool", 1)
        self._pos += 1
        return self._data[self._pos - 1] != 0

    cpdef object read_uuid(self):
        """Read 16 bytes as a :class:`uuid.UUID`."""
        cdef Py_ssize_t p = self._pos
        cdef object value
        if self._end - p < 16:
            self._truncated(b"uuid", 16)
        self._pos = p + 16
        value = ((<object>kp_load_be64(self._data + p) << 64)
                 | <object>kp_load_be64(self._data + p + 8))
        if _UUID_FAST:
            return _make_uuid_fast(value)
        return _UUID(int=value)

    # ---- varints ---------------------------------------------------------------------

    cpdef int32_t read_varint(self) except? -1:
        """Read a zigzag varint (signed 32-bit, at most 5 bytes)."""
        cdef uint32_t u = <uint32_t>self._uvarint32(b"varint")
        return <int32_t>((u >> 1) ^ -(u & 1))

    cpdef int64_t read_varlong(self) except? -1:
        """Read a zigzag varint (signed 64-bit, at most 10 bytes)."""
        cdef const unsigned char* p = self._data + self._pos
        cdef uint64_t u = 0
        cdef Py_ssize_t used = 0
        cdef int rc
        if self._pos < self._end and p[0] < 0x80:
            self._pos += 1
            return <int64_t>((p[0] >> 1) ^ -(<int64_t>(p[0] & 1)))
        rc = read_uvarint64(p, self._data + self._end, 10, &u, &used)
        if rc != VARINT_OK:
            _varint_error(rc, b"varlong", self._pos)
        if used == 10 and p[9] > 0x01:
            raise InvalidVarintError(f"varlong at position {self._pos} does not fit in 64 bits")
        self._pos += used
        return <int64_t>((u >> 1) ^ (0 - (u & 1)))

    cpdef int64_t read_uvarint(self) except -1:
        """Read an unsigned varint (at most 5 bytes, value below 2**32)."""
        return self._uvarint32(b"uvarint")

    # ---- strings ---------------------------------------------------------------------

    cpdef str read_string(self):
        """Read a non-null string (int16 length); null raises InvalidLengthError."""
        cdef Py_ssize_t at = self._pos
        cdef Py_ssize_t n
        if self._end - at < 2:
            self._truncated(b"string length", 2)
        self._pos = at + 2
        n = self._check_length(<int16_t>kp_load_be16(self._data + at), False, b"string", at)
        return self._take_str(n)

    cpdef object read_nullable_string(self):
        """Read a string (int16 length) or None."""
        cdef Py_ssize_t at = self._pos
        cdef Py_ssize_t n
        if self._end - at < 2:
            self._truncated(b"nullable string length", 2)
        self._pos = at + 2
        n = self._check_length(<int16_t>kp_load_be16(self._data + at), True,
                               b"nullable string", at)
        if n < 0:
            return None
        return self._take_str(n)

    cpdef str read_compact_string(self):
        """Read a non-null compact string (uvarint length + 1)."""
        cdef Py_ssize_t at = self._pos
        cdef Py_ssize_t n = self._check_length(
            self._uvarint32(b"compact string length") - 1, False, b"compact string", at)
        self._check_string_limit(n, b"compact string", at)
        return self._take_str(n)

    cpdef object read_compact_nullable_string(self):
        """Read a compact string or None (uvarint 0)."""
        cdef Py_ssize_t at = self._pos
        cdef Py_ssize_t n = self._check_length(
            self._uvarint32(b"compact string length") - 1, True, b"compact nullable string", at)
        if n < 0:
            return None
        self._check_string_limit(n, b"compact nullable string", at)
        return self._take_str(n)

    # ---- bytes -----------------------------------------------------------------------

    cdef Py_ssize_t _bytes_len(self, bint nullable, const char* what) except -2:
        cdef Py_ssize_t at = self._pos
        if self._end - at < 4:
            self._truncated(what, 4)
        self._pos = at + 4
        return self._check_length(<int32_t>kp_load_be32(self._data + at), nullable, what, at)

    cdef Py_ssize_t _compact_bytes_len(self, bint nullable, const char* what) except -2:
        cdef Py_ssize_t at = self._pos
        return self._check_length(self._uvarint32(what) - 1, nullable, what, at)

    cdef bytes _take_bytes(self, Py_ssize_t n):
        cdef Py_ssize_t p = self._pos
        if n == 0:
            return _EMPTY_BYTES
        self._pos = p + n
        return PyBytes_FromStringAndSize(<const char*>(self._data + p), n)

    cpdef bytes read_bytes(self):
        """Read non-null bytes (int32 length) as a new bytes object."""
        return self._take_bytes(self._bytes_len(False, b"bytes"))

    cpdef object read_nullable_bytes(self):
        """Read bytes (int32 length) or None."""
        cdef Py_ssize_t n = self._bytes_len(True, b"nullable bytes")
        if n < 0:
            return None
        return self._take_bytes(n)

    cpdef bytes read_compact_bytes(self):
        """Read non-null compact bytes (uvarint length + 1)."""
        return self._take_bytes(self._compact_bytes_len(False, b"compact bytes"))

    cpdef object read_compact_nullable_bytes(self):
        """Read compact bytes or None."""
        cdef Py_ssize_t n = self._compact_bytes_len(True, b"compact nullable bytes")
        if n < 0:
            return None
        return self._take_bytes(n)

    cpdef object read_bytes_view(self):
        """Like :meth:`read_bytes` but returns a zero-copy memoryview of the buffer."""
        return self._take_view(self._bytes_len(False, b"bytes"))

    cpdef object read_nullable_bytes_view(self):
        """Like :meth:`read_nullable_bytes` but zero-copy (memoryview or None)."""
        cdef Py_ssize_t n = self._bytes_len(True, b"nullable bytes")
        if n < 0:
            return None
        return self._take_view(n)

    cpdef object read_compact_bytes_view(self):
        """Like :meth:`read_compact_bytes` but zero-copy."""
        return self._take_view(self._compact_bytes_len(False, b"compact bytes"))

    cpdef object read_compact_nullable_bytes_view(self):
        """Like :meth:`read_compact_nullable_bytes` but zero-copy (memoryview or None)."""
        cdef Py_ssize_t n = self._compact_bytes_len(True, b"compact nullable bytes")
        if n < 0:
            return None
        return self._take_view(n)

    # ---- arrays and raw --------------------------------------------------------------

    cpdef int32_t read_array_length(self) except -2:
        """Read an int32 element count; -1 means a null array.

        A count larger than the bytes remaining raises InvalidLengthError (each element
        takes at least one byte).
        """
        cdef Py_ssize_t at = self._pos
        if self._end - at < 4:
            self._truncated(b"array length", 4)
        self._pos = at + 4
        return <int32_t>self._check_length(<int32_t>kp_load_be32(self._data + at), True,
                                           b"array length", at)

    cpdef int64_t read_compact_array_length(self) except -2:
        """Read uvarint(count + 1); returns the count, or -1 for a null array (0).

        A count larger than the bytes remaining raises InvalidLengthError.
        """
        cdef Py_ssize_t at = self._pos
        return self._check_length(self._uvarint32(b"compact array length") - 1, True,
                                  b"compact array length", at)

    cpdef bytes read_raw(self, Py_ssize_t n):
        """Read exactly ``n`` bytes as a new bytes object."""
        if n < 0:
            raise InvalidLengthError(f"read_raw: negative size {n}")
        if self._end - self._pos < n:
            self._truncated(b"raw bytes", n)
        return self._take_bytes(n)

    cpdef object read_raw_view(self, Py_ssize_t n):
        """Read exactly ``n`` bytes as a zero-copy memoryview of the buffer."""
        if n < 0:
            raise InvalidLengthError(f"read_raw_view: negative size {n}")
        if self._end - self._pos < n:
            self._truncated(b"raw bytes", n)
        return self._take_view(n)

    cpdef void skip(self, Py_ssize_t n) except *:
        """Advance the position by ``n`` bytes."""
        if n < 0:
            raise InvalidLengthError(f"skip: negative size {n}")
        if self._end - self._pos < n:
            self._truncated(b"skipped bytes", n)
        self._pos += n


# --------------------------------------------------------------------------------------
# Module-level helpers (tests, benchmarks, quick scripts).

def encode_varint(v) -> bytes:
    """Zigzag varint encoding of a signed 32-bit value."""
    cdef unsigned char tmp[10]
    cdef int64_t x = _as_int(v, b"varint", -0x80000000, 0x7FFFFFFF)
    return PyBytes_FromStringAndSize(<char*>tmp, write_uvarint64(tmp, zigzag64(x)))


def encode_varlong(v) -> bytes:
    """Zigzag varint encoding of a signed 64-bit value."""
    cdef unsigned char tmp[10]
    cdef int64_t x = _as_int(v, b"varlong", INT64_MIN, INT64_MAX)
    return PyBytes_FromStringAndSize(<char*>tmp, write_uvarint64(tmp, zigzag64(x)))


def encode_uvarint(v) -> bytes:
    """Unsigned varint encoding of a value in 0 .. 2**32 - 1."""
    cdef unsigned char tmp[10]
    cdef int64_t x = _as_int(v, b"uvarint", 0, MAX_UINT32)
    return PyBytes_FromStringAndSize(<char*>tmp, write_uvarint64(tmp, <uint64_t>x))


# The decoders below read straight from the argument's memory (no Reader object: one per
# call cost more than the decoding itself). Same checks and exceptions as Reader.

DEF VK_VARINT = 0
DEF VK_VARLONG = 1
DEF VK_UVARINT = 2


cdef int _decode_error(int rc, Py_ssize_t n, Py_ssize_t pos, int kind) except -1:
    # Out of line: keeps the error formatting out of the inlined fast path.
    cdef const char* what = (b"varlong" if kind == VK_VARLONG else
                             b"varint" if kind == VK_VARINT else b"uvarint")
    if pos < 0 or pos > n:
        raise ValueError(f"Reader range [{pos}, None) is outside the buffer of {n} bytes")
    if rc != VARINT_OK:
        return _varint_error(rc, what, pos)
    raise InvalidVarintError(
        f"{what.decode()} at position {pos} does not fit in {64 if kind == VK_VARLONG else 32} bits")


cdef inline object _decode_from(const unsigned char* data, Py_ssize_t n, Py_ssize_t pos,
                                int kind):
    """Decode one varint of ``kind`` at ``data[pos]`` (``n`` bytes in all)."""
    cdef const unsigned char* p
    cdef uint64_t u = 0
    cdef Py_ssize_t used = 0
    cdef int rc
    # pos outside [0, n) (negative ones wrap to huge) goes to the checks below.
    if <size_t>pos < <size_t>n and data[pos] < 0x80:
        u = data[pos]
        used = 1
    else:
        if pos < 0 or pos > n:
            _decode_error(VARINT_OK, n, pos, kind)
        p = data + pos
        rc = read_uvarint64(p, data + n, 10 if kind == VK_VARLONG else 5, &u, &used)
        if rc != VARINT_OK:
            _decode_error(rc, n, pos, kind)
        if kind == VK_VARLONG:
            if used == 10 and p[9] > 0x01:
                _decode_error(VARINT_OK, n, pos, kind)
        elif used == 5 and p[4] > 0x0F:
            _decode_error(VARINT_OK, n, pos, kind)
    if kind == VK_VARINT:
        return <int32_t>((<uint32_t>u >> 1) ^ -(<uint32_t>u & 1)), pos + used
    if kind == VK_VARLONG:
        return <int64_t>((u >> 1) ^ (0 - (u & 1))), pos + used
    return <int64_t>u, pos + used


cdef object _decode_buffer(object buf, Py_ssize_t pos, int kind):
    # Any other buffer-protocol object: exported for the duration of the read.
    cdef Py_buffer pb
    try:
        PyObject_GetBuffer(buf, &pb, PyBUF_SIMPLE)
    except BufferError as exc:
        raise ValueError(f"Reader needs a contiguous buffer: {exc}") from None
    try:
        return _decode_from(<const unsigned char*>pb.buf, pb.len, pos, kind)
    finally:
        PyBuffer_Release(&pb)


cdef inline object _decode(object buf, Py_ssize_t pos, int kind):
    # bytes and bytearray (what callers pass almost always) need no buffer export: nothing
    # runs Python code that could resize a bytearray before its bytes are read.
    if PyBytes_CheckExact(buf):
        return _decode_from(<const unsigned char*>PyBytes_AS_STRING(buf),
                            PyBytes_GET_SIZE(buf), pos, kind)
    if PyByteArray_CheckExact(buf):
        return _decode_from(<const unsigned char*>PyByteArray_AS_STRING(buf),
                            PyByteArray_GET_SIZE(buf), pos, kind)
    return _decode_buffer(buf, pos, kind)


def decode_varint(buf, Py_ssize_t pos=0):
    """Decode a zigzag varint at ``pos``; returns ``(value, next_pos)``."""
    return _decode(buf, pos, VK_VARINT)


def decode_varlong(buf, Py_ssize_t pos=0):
    """Decode a zigzag varlong at ``pos``; returns ``(value, next_pos)``."""
    return _decode(buf, pos, VK_VARLONG)


def decode_uvarint(buf, Py_ssize_t pos=0):
    """Decode an unsigned varint at ``pos``; returns ``(value, next_pos)``."""
    return _decode(buf, pos, VK_UVARINT)
