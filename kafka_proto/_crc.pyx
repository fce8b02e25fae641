# cython: language_level=3
"""CRC-32C (record batches v2) and CRC-32 (legacy messages).

The C side (``_c/crc32c.h``) picks the fastest CRC-32C path the CPU offers when this
module is imported: AVX-512 + VPCLMULQDQ folding (inputs of 256 bytes and more) or SSE4.2
crc32 on three interleaved streams on x86-64, the crc32c instructions on AArch64 builds
with the CRC extension, slicing-by-8 tables elsewhere.
``IMPLEMENTATION`` names the path in use, ``IMPLEMENTATIONS`` every path available here;
:func:`crc32c_software` always runs the portable path and :func:`crc32c_using` any
chosen one (tests compare them).
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_CheckExact, PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport uint32_t

cdef extern from "crc32c.h" nogil:
    ctypedef uint32_t (*kp_crc_fn)(uint32_t crc, const unsigned char* p, size_t n) noexcept nogil
    void kp_crc_init()
    uint32_t kp_crc32c(uint32_t crc, const unsigned char* p, size_t n)
    uint32_t kp_crc32c_sw(uint32_t crc, const unsigned char* p, size_t n)
    uint32_t kp_crc32(uint32_t crc, const unsigned char* p, size_t n)
    uint32_t kp_crc32_sw(uint32_t crc, const unsigned char* p, size_t n)
    const char* kp_crc32c_impl_name
    const char* kp_crc32_impl_name
    enum: KP_NPATHS
    kp_crc_fn kp_crc32c_paths[]
    const char* const kp_crc32c_path_names[]

kp_crc_init()

#: Name of the CRC-32C implementation chosen for this CPU
#: ("avx512", "sse4.2", "armv8-crc" or "software").
IMPLEMENTATION = kp_crc32c_impl_name.decode()

#: Name of the CRC-32 (IEEE) implementation in use ("avx512" or "software").
CRC32_IMPLEMENTATION = kp_crc32_impl_name.decode()

#: Every CRC-32C implementation usable on this CPU, slowest first.
IMPLEMENTATIONS = tuple(kp_crc32c_path_names[i].decode()
                        for i in range(KP_NPATHS) if kp_crc32c_paths[i] != NULL)

# Below this size releasing and re-taking the GIL costs more than the CRC itself.
DEF NOGIL_THRESHOLD = 16384



cdef uint32_t crc32c_update(uint32_t crc, const unsigned char* data, size_t n) noexcept nogil:
    return kp_crc32c(crc, data, n)


cdef uint32_t crc32_update(uint32_t crc, const unsigned char* data, size_t n) noexcept nogil:
    return kp_crc32(crc, data, n)


cdef uint32_t _checksum(kp_crc_fn fn, object data, uint32_t crc) except? 0xFFFFFFFF:
    """CRC of any bytes-like object (read in place), GIL released for large inputs."""
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef size_t n
    if PyBytes_CheckExact(data):
        p = <const unsigned char*>PyBytes_AS_STRING(data)
        n = <size_t>PyBytes_GET_SIZE(data)
        if n < NOGIL_THRESHOLD:
            return fn(crc, p, n)
        # bytes are immutable and `data` holds a reference: safe without the GIL.
        with nogil:
            crc = fn(crc, p, n)
        return crc
    try:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    except BufferError:
        # Non-contiguous memoryview: compact it once.
        return _checksum(fn, memoryview(data).tobytes(), crc)
    try:
        p = <const unsigned char*>view.buf
        n = <size_t>view.len
        if n < NOGIL_THRESHOLD:
            crc = fn(crc, p, n)
        else:
            # The exported buffer cannot be resized or freed while we hold it.
            with nogil:
                crc = fn(crc, p, n)
    finally:
        PyBuffer_Release(&view)
    return crc


def crc32c(data, uint32_t crc=0) -> int:
    """CRC-32C (Castagnoli) of a bytes-like object, continuing from ``crc``.

    ``crc32c(b, crc32c(a)) == crc32c(a + b)``.
    """
    return _checksum(kp_crc32c, data, crc)


def crc32c_software(data, uint32_t crc=0) -> int:
    """CRC-32C computed by the portable slicing-by-8 path (for tests and comparisons)."""
    return _checksum(kp_crc32c_sw, data, crc)


def crc32(data, uint32_t crc=0) -> int:
    """CRC-32 (IEEE 802.3, as zlib.crc32) of a bytes-like object, continuing from ``crc``."""
    return _checksum(kp_crc32, data, crc)


def crc32_software(data, uint32_t crc=0) -> int:
    """CRC-32 (IEEE) computed by the portable slicing-by-8 path (for tests)."""
    return _checksum(kp_crc32_sw, data, crc)


cdef dict _PATH_INDEX = {kp_crc32c_path_names[i].decode(): i
                         for i in range(KP_NPATHS) if kp_crc32c_paths[i] != NULL}


def crc32c_using(implementation: str, data, uint32_t crc=0) -> int:
    """CRC-32C computed by one named path of ``IMPLEMENTATIONS`` (tests, benchmarks)."""
    cdef object i = _PATH_INDEX.get(implementation)
    if i is None:
        raise ValueError(f"CRC-32C implementation {implementation!r} is not available here; "
                         f"choose from {IMPLEMENTATIONS}")
    return _checksum(kp_crc32c_paths[<int>i], data, crc)
