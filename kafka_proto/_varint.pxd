# Varint primitives over raw pointers, shared by every Cython module of the codec.
# Inline and nogil; callers pass the buffer end so every read is bounds-checked here.
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

# Return codes of the readers.
cdef enum:
    VARINT_OK = 0
    VARINT_TRUNCATED = -1   # the buffer ended inside the varint
    VARINT_TOO_LONG = -2    # more bytes than the type allows (5 for 32-bit, 10 for 64-bit)


cdef inline int read_uvarint64(const unsigned char* p, const unsigned char* end,
                               int max_bytes, uint64_t* out,
                               Py_ssize_t* consumed) noexcept nogil:
    """Unsigned LEB128, at most ``max_bytes`` bytes (5 for 32-bit values, 10 for 64-bit)."""
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef Py_ssize_t i = 0
    cdef unsigned char b
    while True:
        if p + i >= end:
            return VARINT_TRUNCATED
        if i >= max_bytes:
            return VARINT_TOO_LONG
        b = p[i]
        result |= (<uint64_t>(b & 0x7F)) << shift
        i += 1
        if not (b & 0x80):
            break
        shift += 7
    out[0] = result
    consumed[0] = i
    return VARINT_OK


cdef inline int read_varint32(const unsigned char* p, const unsigned char* end,
                              int32_t* out, Py_ssize_t* consumed) noexcept nogil:
    """Zigzag-encoded signed 32-bit varint (record fields)."""
    cdef uint64_t u
    cdef int rc
    # Fast path: one byte.
    if p < end and not (p[0] & 0x80):
        out[0] = <int32_t>((p[0] >> 1) ^ -(<int32_t>(p[0] & 1)))
        consumed[0] = 1
        return VARINT_OK
    rc = read_uvarint64(p, end, 5, &u, consumed)
    if rc != VARINT_OK:
        return rc
    out[0] = <int32_t>(<uint32_t>(u >> 1) ^ -(<uint32_t>(u & 1)))
    return VARINT_OK


cdef inline int read_varint64(const unsigned char* p, const unsigned char* end,
                              int64_t* out, Py_ssize_t* consumed) noexcept nogil:
    """Zigzag-encoded signed 64-bit varint (varlong)."""
    cdef uint64_t u
    cdef int rc = read_uvarint64(p, end, 10, &u, consumed)
    if rc != VARINT_OK:
        return rc
    out[0] = <int64_t>((u >> 1) ^ -(u & 1))
    return VARINT_OK


cdef inline Py_ssize_t uvarint_size(uint64_t v) noexcept nogil:
    cdef Py_ssize_t n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline uint64_t zigzag64(int64_t v) noexcept nogil:
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)


cdef inline Py_ssize_t varint_size(int64_t v) noexcept nogil:
    """Bytes taken by the zigzag encoding of ``v``."""
    return uvarint_size(zigzag64(v))


cdef inline Py_ssize_t write_uvarint64(unsigned char* p, uint64_t v) noexcept nogil:
    """Write unsigned LEB128; the caller guarantees 10 bytes of room. Returns bytes written."""
    cdef Py_ssize_t i = 0
    while v >= 0x80:
        p[i] = <unsigned char>(v | 0x80)
        v >>= 7
        i += 1
    p[i] = <unsigned char>v
    return i + 1


cdef inline Py_ssize_t write_varint64(unsigned char* p, int64_t v) noexcept nogil:
    """Write the zigzag encoding of ``v`` (valid for 32-bit varints too)."""
    return write_uvarint64(p, zigzag64(v))
