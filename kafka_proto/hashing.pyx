# cython: language_level=3
"""Key hashes used to choose a partition, bit-exact with the two reference clients.

* :func:`murmur2` is the 32-bit MurmurHash2 variant of the Java client
  (``Utils.murmur2``: seed ``0x9747b28c``, little-endian words), returned as the signed
  32-bit value Java computes. Java's default partitioner (and librdkafka's ``murmur2``)
  uses ``(h & 0x7fffffff) % partition_count``.
* :func:`fnv1a` is FNV-1a 32-bit as librdkafka computes it for its ``fnv1a``
  partitioner: the hash is taken as a signed 32-bit value and made non-negative with an
  absolute value (compatibility with Sarama's hash partitioner), then returned unsigned.
  ``-2**31`` has no positive counterpart and stays ``0x80000000``.
* CRC-32 (IEEE, zlib's) of the key is librdkafka's ``consistent`` hash; the CRC itself
  lives in :mod:`kafka_proto._crc`.

The ``*_partition`` functions fold hash and modulo into one call, because the producer
calls one per message: they take the key (``bytes``-like, ``str`` encoded as UTF-8, or
``None``, hashed as zero bytes) and a positive partition count, and ignore the optional
third argument (the available partitions) so that they fit the partitioner signature of
:mod:`kafka_client.producer.partitioners` as they are.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_CheckExact, PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, uint32_t

from kafka_proto._crc cimport crc32_update

__all__ = ["murmur2", "fnv1a", "murmur2_partition", "fnv1a_partition", "crc32_partition"]

# Below this size the hash is cheaper than releasing and re-taking the GIL.
DEF NOGIL_THRESHOLD = 65536


cdef inline uint32_t _murmur2(const unsigned char* p, size_t n) noexcept nogil:
    cdef uint32_t m = 0x5bd1e995U
    cdef uint32_t h = 0x9747b28cU ^ <uint32_t>n
    cdef uint32_t k
    cdef size_t i = 0
    cdef size_t words = n >> 2
    # Java reads each 4-byte group little-endian whatever the platform.
    while words:
        k = (<uint32_t>p[i]) | (<uint32_t>p[i + 1] << 8) | \
            (<uint32_t>p[i + 2] << 16) | (<uint32_t>p[i + 3] << 24)
        k *= m
        k ^= k >> 24
        k *= m
        h *= m
        h ^= k
        i += 4
        words -= 1
    cdef size_t rest = n & 3
    if rest == 3:
        h ^= <uint32_t>p[i + 2] << 16
    if rest >= 2:
        h ^= <uint32_t>p[i + 1] << 8
    if rest >= 1:
        h ^= <uint32_t>p[i]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h


cdef inline uint32_t _fnv1a(const unsigned char* p, size_t n) noexcept nogil:
    cdef uint32_t h = 0x811C9DC5U
    cdef size_t i
    for i in range(n):
        h ^= p[i]
        h *= 0x01000193U
    # librdkafka: abs() of the signed value; unsigned negation is the same bits
    # (and leaves 0x80000000 unchanged, as the C code does in practice).
    if h & 0x80000000U:
        h = (~h) + 1
    return h


# Which hash _hash_key runs.
DEF H_MURMUR2 = 0
DEF H_FNV1A = 1
DEF H_CRC32 = 2


cdef inline uint32_t _run(int which, const unsigned char* p, size_t n) noexcept nogil:
    if which == H_MURMUR2:
        return _murmur2(p, n)
    if which == H_FNV1A:
        return _fnv1a(p, n)
    return crc32_update(0, p, n)


cdef uint32_t _hash_key(int which, object key) except? 0xFFFFFFFF:
    """Hash of any key the producer accepts, read in place."""
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef size_t n
    cdef uint32_t h
    if PyBytes_CheckExact(key):
        p = <const unsigned char*>PyBytes_AS_STRING(key)
        n = <size_t>PyBytes_GET_SIZE(key)
        if n < NOGIL_THRESHOLD:
            return _run(which, p, n)
        with nogil:
            h = _run(which, p, n)
        return h
    if key is None:
        return _run(which, <const unsigned char*>"", 0)
    if isinstance(key, str):
        return _hash_key(which, (<str>key).encode("utf-8"))
    try:
        PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
    except BufferError:
        # A non-contiguous view: compact it once.
        return _hash_key(which, memoryview(key).tobytes())
    try:
        p = <const unsigned char*>view.buf
        n = <size_t>view.len
        if n < NOGIL_THRESHOLD:
            h = _run(which, p, n)
        else:
            with nogil:
                h = _run(which, p, n)
    finally:
        PyBuffer_Release(&view)
    return h


cdef inline int _check_count(object partition_count) except -1:
    # The partitioner is called with the topic's partition count from metadata; a
    # count of 0 means the caller skipped the "topic has no partitions yet" case.
    cdef long c = partition_count
    if c <= 0 or c > 0x7FFFFFFF:
        raise ValueError(f"partition_count must be between 1 and 2**31-1, got {c}")
    return <int>c


def murmur2(data) -> int:
    """Java client's murmur2 of ``data`` as a signed 32-bit int (``Utils.murmur2``)."""
    return <int32_t>_hash_key(H_MURMUR2, data)


def fnv1a(data) -> int:
    """librdkafka's FNV-1a 32-bit of ``data`` (absolute value, as an unsigned int)."""
    return _hash_key(H_FNV1A, data)


def murmur2_partition(key, partition_count, available=None) -> int:
    """``(murmur2(key) & 0x7fffffff) % partition_count``: the Java client's choice."""
    cdef int c = _check_count(partition_count)
    return (_hash_key(H_MURMUR2, key) & 0x7FFFFFFFU) % <uint32_t>c


def fnv1a_partition(key, partition_count, available=None) -> int:
    """``fnv1a(key) % partition_count``, librdkafka's ``fnv1a`` partitioner."""
    cdef int c = _check_count(partition_count)
    return _hash_key(H_FNV1A, key) % <uint32_t>c


def crc32_partition(key, partition_count, available=None) -> int:
    """``crc32(key) % partition_count``, librdkafka's ``consistent`` partitioner."""
    cdef int c = _check_count(partition_count)
    return _hash_key(H_CRC32, key) % <uint32_t>c
