# cython: language_level=3
"""CRC-32C and CRC-32. Placeholder software implementation (byte-wise tables)."""
from libc.stdint cimport uint32_t

cdef uint32_t _T32C[256]
cdef uint32_t _T32[256]


cdef void _init_tables() noexcept:
    cdef uint32_t i, j, c, d
    for i in range(256):
        c = i
        d = i
        for j in range(8):
            c = (c >> 1) ^ (0x82F63B78 if (c & 1) else 0)
            d = (d >> 1) ^ (0xEDB88320 if (d & 1) else 0)
        _T32C[i] = c
        _T32[i] = d


_init_tables()


cdef uint32_t crc32c_update(uint32_t crc, const unsigned char* data, size_t n) noexcept nogil:
    cdef size_t i
    crc = ~crc
    for i in range(n):
        crc = _T32C[(crc ^ data[i]) & 0xFF] ^ (crc >> 8)
    return ~crc


cdef uint32_t crc32_update(uint32_t crc, const unsigned char* data, size_t n) noexcept nogil:
    cdef size_t i
    crc = ~crc
    for i in range(n):
        crc = _T32[(crc ^ data[i]) & 0xFF] ^ (crc >> 8)
    return ~crc


def crc32c(data, uint32_t crc=0):
    """CRC-32C of a bytes-like object, continuing from ``crc``."""
    cdef const unsigned char[::1] view = data
    if view.shape[0] == 0:
        return crc
    with nogil:
        crc = crc32c_update(crc, &view[0], view.shape[0])
    return crc


def crc32(data, uint32_t crc=0):
    """CRC-32 (IEEE) of a bytes-like object, continuing from ``crc``."""
    cdef const unsigned char[::1] view = data
    if view.shape[0] == 0:
        return crc
    with nogil:
        crc = crc32_update(crc, &view[0], view.shape[0])
    return crc
