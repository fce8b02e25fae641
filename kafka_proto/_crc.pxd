# CRC-32C (Castagnoli) for record batches v2 and CRC-32 (IEEE) for legacy messages.
from libc.stdint cimport uint32_t

cdef uint32_t crc32c_update(uint32_t crc, const unsigned char* data, size_t n) noexcept nogil
cdef uint32_t crc32_update(uint32_t crc, const unsigned char* data, size_t n) noexcept nogil
