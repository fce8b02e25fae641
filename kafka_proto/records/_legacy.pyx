# cython: language_level=3
"""Reader of legacy message sets (magic 0 and 1), including compressed wrapper messages.

One call of :func:`read_legacy_entry` decodes one top-level entry (offset, size, message) into
a :class:`LegacyBatch`; a compressed wrapper yields its inner messages as the batch's records.
Entries are parsed eagerly (the format is only met on old brokers and old topics), every
length is checked against the message end before use, and CRC-32 runs without the GIL for
large messages.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport INT64_MAX, int32_t, int64_t, uint32_t, uint64_t

from kafka_proto._crc cimport crc32_update

from kafka_proto.compression import DEFAULT_MAX_DECOMPRESSED
from kafka_proto.compression import decompress as _decompress
from kafka_proto.errors import (
    CorruptRecordError,
    CrcMismatchError,
    UnsupportedCompressionError,
    UnsupportedMagicError,
)

# Bytes of a message (after offset+size) without key/value: crc 4, magic 1, attributes 1,
# [timestamp 8,] key length 4, value length 4.
cdef enum:
    OVERHEAD_V0 = 14
    OVERHEAD_V1 = 22
    LOG_OVERHEAD = 12
    NOGIL_CRC_MIN = 4096  # below this, dropping the GIL costs more than it gains

cdef enum:
    PARSE_OK = 0
    PARSE_TRUNCATED = 1


cdef struct Msg:
    int64_t offset
    int32_t size          # messageSize: bytes after the offset+size header
    uint32_t crc
    int magic
    int attributes
    int64_t timestamp
    Py_ssize_t key_pos
    int32_t key_len       # -1 = null
    Py_ssize_t value_pos
    int32_t value_len     # -1 = null


cdef inline int64_t _be64(const unsigned char* p) noexcept nogil:
    return <int64_t>((<uint64_t>p[0] << 56) | (<uint64_t>p[1] << 48) | (<uint64_t>p[2] << 40) |
                     (<uint64_t>p[3] << 32) | (<uint64_t>p[4] << 24) | (<uint64_t>p[5] << 16) |
                     (<uint64_t>p[6] << 8) | <uint64_t>p[7])


cdef inline uint32_t _be32u(const unsigned char* p) noexcept nogil:
    return ((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) |
            <uint32_t>p[3])


cdef int _parse(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end, bint check_crc,
                Msg* m) except -1:
    """Parse the entry at ``pos``; PARSE_TRUNCATED if it does not fit before ``end``."""
    cdef Py_ssize_t msg_end, p
    cdef uint32_t crc
    cdef int32_t overhead
    if end - pos < LOG_OVERHEAD:
        return PARSE_TRUNCATED
    m.offset = _be64(buf + pos)
    m.size = <int32_t>_be32u(buf + pos + 8)
    if m.size < OVERHEAD_V0:
        raise CorruptRecordError(
            f"legacy message at offset {m.offset}: size {m.size} below the minimum "
            f"{OVERHEAD_V0}")
    if m.size > end - pos - LOG_OVERHEAD:
        return PARSE_TRUNCATED
    msg_end = pos + LOG_OVERHEAD + m.size
    m.crc = _be32u(buf + pos + 12)
    m.magic = buf[pos + 16]
    if m.magic > 1:
        raise UnsupportedMagicError(f"message magic {m.magic} is not a legacy format (0 or 1)")
    overhead = OVERHEAD_V1 if m.magic == 1 else OVERHEAD_V0
    if m.size < overhead:
        raise CorruptRecordError(
            f"legacy message at offset {m.offset}: size {m.size} below the minimum {overhead}")
    if check_crc:
        # CRC-32 covers magic through the end of the message.
        if m.size >= NOGIL_CRC_MIN:
            with nogil:
                crc = crc32_update(0, buf + pos + 16, <size_t>(m.size - 4))
        else:
            crc = crc32_update(0, buf + pos + 16, <size_t>(m.size - 4))
        if crc != m.crc:
            raise CrcMismatchError(
                f"legacy message at offset {m.offset}: CRC-32 0x{crc:08x} does not match "
                f"stored 0x{m.crc:08x}")
    m.attributes = buf[pos + 17]
    p = pos + 18
    if m.magic == 1:
        m.timestamp = _be64(buf + p)
        p += 8
    else:
        m.timestamp = -1
    # p is the key length; the overhead check above guarantees 8 bytes remain for both lengths.
    m.key_len = <int32_t>_be32u(buf + p)
    p += 4
    if m.key_len < -1:
        raise CorruptRecordError(f"legacy message at offset {m.offset}: key length {m.key_len}")
    if m.key_len > msg_end - p - 4:
        raise CorruptRecordError(
            f"legacy message at offset {m.offset}: key length {m.key_len} exceeds the message")
    m.key_pos = p
    if m.key_len > 0:
        p += m.key_len
    m.value_len = <int32_t>_be32u(buf + p)
    p += 4
    if m.value_len < -1:
        raise CorruptRecordError(
            f"legacy message at offset {m.offset}: value length {m.value_len}")
    if m.value_len > msg_end - p:
        raise CorruptRecordError(
            f"legacy message at offset {m.offset}: value length {m.value_len} exceeds the "
            f"message")
    m.value_pos = p
    if m.value_len > 0:
        p += m.value_len
    if p != msg_end:
        raise CorruptRecordError(
            f"legacy message at offset {m.offset}: {msg_end - p} unaccounted bytes after the "
            f"value")
    return PARSE_OK


cdef object _TS_TYPES = None
cdef object _CODECS = None


cdef _load_enums():
    # The v2 module's enums, so legacy and v2 batches report the same types. Imported on first
    # use: kafka_proto.records imports this module, a top-level import would be circular.
    global _TS_TYPES, _CODECS
    try:
        from kafka_proto.records._v2 import Compression, TimestampType
    except ImportError:
        from kafka_proto.compression import CompressionCodec as Compression
        _TS_TYPES = (0, 1)
    else:
        _TS_TYPES = (TimestampType(0), TimestampType(1))
    _CODECS = tuple(Compression(i) for i in range(5))


cdef inline object _ts_type_obj(int t):
    """-1 (magic 0: no timestamp) stays an int; 0/1 become TimestampType members."""
    if t < 0:
        return -1
    if _TS_TYPES is None:
        _load_enums()
    return _TS_TYPES[t]


cdef inline object _bytes_or_none(const unsigned char* buf, Py_ssize_t pos, int32_t n):
    if n < 0:
        return None
    return PyBytes_FromStringAndSize(<const char*>(buf + pos), n)


# Records and batches only ever reference bytes, ints and our private list: they cannot be
# part of a reference cycle, so they skip the cyclic GC; a freelist makes allocation cheap.
@cython.no_gc
@cython.freelist(64)
cdef class LegacyRecord:
    """One message of a legacy message set (an inner message, for a compressed wrapper)."""

    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef int _ts_type
    cdef uint32_t _crc
    cdef readonly object key
    cdef readonly object value

    @property
    def timestamp_type(self):
        """-1 for magic 0 (no timestamp), else TimestampType.CREATE_TIME / LOG_APPEND_TIME."""
        return _ts_type_obj(self._ts_type)

    @property
    def checksum(self):
        """The message's stored CRC-32 (legacy messages each carry one)."""
        return self._crc

    def __eq__(self, other):
        if not isinstance(other, LegacyRecord):
            return NotImplemented
        cdef LegacyRecord o = <LegacyRecord>other
        return (self.offset == o.offset and self.timestamp == o.timestamp and
                self._ts_type == o._ts_type and self.key == o.key and self.value == o.value)

    __hash__ = None

    @property
    def headers(self):
        """Always an empty list: legacy messages have no headers."""
        return []

    def __repr__(self):
        return (f"LegacyRecord(offset={self.offset}, timestamp={self.timestamp}, "
                f"timestamp_type={self._ts_type}, key={self.key!r}, "
                f"value={self.value!r})")


cdef LegacyRecord _record(int64_t offset, int64_t timestamp, int timestamp_type,
                          object key, object value, uint32_t crc):
    cdef LegacyRecord r = LegacyRecord.__new__(LegacyRecord)
    r._crc = crc
    r.offset = offset
    r.timestamp = timestamp
    r._ts_type = timestamp_type
    r.key = key
    r.value = value
    return r


@cython.no_gc
@cython.freelist(16)
cdef class LegacyBatch:
    """One top-level entry of a legacy message set, shaped like a v2 record batch.

    A plain message is a batch of one record; a compressed wrapper is a batch of its inner
    messages. v2-only attributes have their "absent" values (producer_id -1, ...).
    ``timestamp_type`` is -1 for magic 0 (no timestamps), else 0 CreateTime / 1 LogAppendTime.
    """

    cdef readonly int64_t base_offset
    cdef readonly int64_t last_offset
    cdef readonly int magic
    cdef readonly uint32_t crc
    cdef int _codec
    cdef int _ts_type
    cdef readonly int64_t base_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly Py_ssize_t size
    cdef list _records
    cdef int _attrs
    cdef object _buffer     # the buffer the entry was read from (for raw/validate_crc)
    cdef Py_ssize_t _start

    @property
    def next_offset(self):
        return self.last_offset + 1

    @property
    def last_offset_delta(self):
        return <int>(self.last_offset - self.base_offset)

    @property
    def attributes(self):
        """The (wrapper) message's attributes byte."""
        return self._attrs

    @property
    def last_sequence(self):
        return -1

    @property
    def raw(self):
        """The entry's bytes in the original buffer (no copy)."""
        mv = memoryview(self._buffer)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        return mv[self._start:self._start + self.size]

    def validate_crc(self):
        """True if the (wrapper) message's stored CRC-32 matches its bytes."""
        cdef const unsigned char[::1] v = self.raw
        return crc32_update(0, &v[0] + 16, <size_t>(self.size - 16)) == self.crc

    def records_list(self):
        """All records as a list."""
        return self._records

    def control_record(self):
        """Always None: legacy message sets have no control records."""
        return None

    @property
    def compression(self):
        """Codec of a wrapper (Compression member; NONE for a plain message)."""
        if _CODECS is None:
            _load_enums()
        return _CODECS[self._codec]

    @property
    def timestamp_type(self):
        """-1 for magic 0 (no timestamps), else TimestampType of the entry."""
        return _ts_type_obj(self._ts_type)

    @property
    def records_count(self):
        """Number of messages in the entry (inner messages for a wrapper)."""
        return len(self._records)

    @property
    def is_transactional(self):
        return False

    @property
    def is_control(self):
        return False

    @property
    def partition_leader_epoch(self):
        return -1

    @property
    def producer_id(self):
        return -1

    @property
    def producer_epoch(self):
        return -1

    @property
    def base_sequence(self):
        return -1

    @property
    def delete_horizon(self):
        return None

    @property
    def records(self):
        """The records as a new list."""
        return list(self._records)

    def __iter__(self):
        return iter(self._records)

    def __len__(self):
        return len(self._records)

    def __repr__(self):
        return (f"LegacyBatch(magic={self.magic}, base_offset={self.base_offset}, "
                f"last_offset={self.last_offset}, records_count={len(self._records)}, "
                f"compression={self._codec}, size={self.size})")


cdef int _ts_type(const Msg* m) noexcept:
    if m.magic == 0:
        return -1
    return 1 if (m.attributes & 0x08) else 0


cdef list _read_inner(object data, const Msg* wrapper, bint check_crc):
    """Inner messages of a decompressed wrapper value, with absolute offsets."""
    cdef const unsigned char[::1] view = data
    cdef Py_ssize_t n = view.shape[0]
    cdef const unsigned char* buf = &view[0] if n > 0 else NULL
    cdef Py_ssize_t pos = 0
    cdef Msg m
    cdef list out = []
    cdef LegacyRecord r
    cdef int64_t last_rel, delta = 0
    cdef int64_t ts
    cdef int tst
    cdef bint log_append = wrapper.magic == 1 and (wrapper.attributes & 0x08)
    while pos < n:
        if _parse(buf, pos, n, check_crc, &m) == PARSE_TRUNCATED:
            raise CorruptRecordError(
                f"wrapper at offset {wrapper.offset}: truncated inner message")
        if m.magic != wrapper.magic:
            raise CorruptRecordError(
                f"wrapper at offset {wrapper.offset} (magic {wrapper.magic}) holds an inner "
                f"message of magic {m.magic}")
        if m.attributes & 0x07:
            raise CorruptRecordError(
                f"wrapper at offset {wrapper.offset} holds a compressed inner message")
        if log_append:
            ts = wrapper.timestamp
            tst = 1
        else:
            ts = m.timestamp
            tst = _ts_type(&m)
        out.append(_record(m.offset, ts, tst, _bytes_or_none(buf, m.key_pos, m.key_len),
                           _bytes_or_none(buf, m.value_pos, m.value_len), m.crc))
        pos += LOG_OVERHEAD + m.size
    if not out:
        raise CorruptRecordError(f"wrapper at offset {wrapper.offset} holds no message")
    if wrapper.magic == 1 and wrapper.offset != 0:
        # Relative inner offsets: the wrapper carries the absolute offset of the last one.
        last_rel = m.offset
        if wrapper.offset < last_rel:
            raise CorruptRecordError(
                f"wrapper offset {wrapper.offset} below its last inner offset {last_rel}")
        delta = wrapper.offset - last_rel
        if delta:
            for r in out:
                r.offset += delta
    return out


cdef LegacyBatch _read_entry(object buffer, const unsigned char* buf, Py_ssize_t pos,
                            Py_ssize_t end, bint check_crc, Py_ssize_t max_decompressed,
                            Py_ssize_t* next_pos):
    """The entry at pos, or None if it is cut off before end (next_pos set on success)."""
    cdef Msg m
    cdef int codec
    cdef LegacyBatch b
    cdef LegacyRecord first, last
    if end - pos < LOG_OVERHEAD:
        return None
    if _parse(buf, pos, end, check_crc, &m) == PARSE_TRUNCATED:
        return None
    b = LegacyBatch.__new__(LegacyBatch)
    b.magic = m.magic
    b.crc = m.crc
    b.size = LOG_OVERHEAD + m.size
    b._ts_type = _ts_type(&m)
    b._attrs = m.attributes
    b._buffer = buffer
    b._start = pos
    b.max_timestamp = m.timestamp
    codec = m.attributes & 0x07
    b._codec = codec
    if codec == 0:
        first = last = _record(m.offset, m.timestamp, b._ts_type,
                               _bytes_or_none(buf, m.key_pos, m.key_len),
                               _bytes_or_none(buf, m.value_pos, m.value_len), m.crc)
        b._records = [first]
    else:
        if codec > 3:
            raise UnsupportedCompressionError(
                f"legacy message at offset {m.offset}: compression codec {codec} is not "
                f"allowed in magic {m.magic} messages")
        if m.value_len < 0:
            raise CorruptRecordError(f"wrapper at offset {m.offset} has a null value")
        mv = memoryview(buffer)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        inner = _decompress(codec, mv[m.value_pos:m.value_pos + m.value_len],
                            max_decompressed)
        b._records = _read_inner(inner, &m, check_crc)
        first = <LegacyRecord>b._records[0]
        last = <LegacyRecord>b._records[len(b._records) - 1]
    b.base_offset = first.offset
    b.last_offset = last.offset
    if b.last_offset == INT64_MAX:
        # No next offset below 2^63 (a log's end offset is one), as for v2 batches.
        raise CorruptRecordError(f"legacy message at offset {b.last_offset} leaves no next "
                                 f"offset below 2^63")
    b.base_timestamp = first.timestamp
    next_pos[0] = pos + LOG_OVERHEAD + m.size
    return b


def read_legacy_entry(buffer, Py_ssize_t pos, Py_ssize_t end, bint check_crc=True,
                      Py_ssize_t max_decompressed_size=DEFAULT_MAX_DECOMPRESSED):
    """Decode the legacy entry at ``buffer[pos:end]``.

    Returns ``(batch, next_pos)``, or ``(None, pos)`` when the entry is cut off before
    ``end`` (the usable data ends there). Raises CorruptRecordError (or a subclass:
    CrcMismatchError, UnsupportedMagicError, DecompressionError) for a malformed entry and
    UnsupportedCompressionError for a zstd or unknown codec in a wrapper.
    """
    cdef Py_buffer pb
    cdef Py_ssize_t next_pos = pos
    # A plain buffer request: much cheaper per call than a typed memoryview.
    PyObject_GetBuffer(buffer, &pb, PyBUF_SIMPLE)
    try:
        if pos < 0 or end > pb.len or pos > end:
            raise ValueError(f"bad range [{pos}:{end}] for a buffer of {pb.len} bytes")
        batch = _read_entry(buffer, <const unsigned char*>pb.buf, pos, end, check_crc,
                            max_decompressed_size, &next_pos)
    finally:
        PyBuffer_Release(&pb)
    return batch, next_pos


def read_legacy_message_set(buffer, bint check_crc=True,
                            Py_ssize_t max_decompressed_size=DEFAULT_MAX_DECOMPRESSED):
    """Every complete top-level entry of a legacy message set, as a list of LegacyBatch
    (a truncated final entry is ignored)."""
    cdef Py_buffer pb
    cdef Py_ssize_t pos = 0
    cdef list out = []
    PyObject_GetBuffer(buffer, &pb, PyBUF_SIMPLE)
    try:
        while True:
            batch = _read_entry(buffer, <const unsigned char*>pb.buf, pos, pb.len, check_crc,
                                max_decompressed_size, &pos)
            if batch is None:
                return out
            out.append(batch)
    finally:
        PyBuffer_Release(&pb)
