# Declarations of the wire primitives so other Cython modules can cimport them and call
# the cpdef methods as direct C calls (Python code calls the same methods normally).
cimport cython
from cpython.buffer cimport Py_buffer
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t


@cython.final
cdef class Writer:
    cdef unsigned char* _buf
    cdef Py_ssize_t _len
    cdef Py_ssize_t _cap

    cdef int _grow(self, Py_ssize_t need) except -1
    cdef int _append(self, const unsigned char* p, Py_ssize_t n) except -1
    cdef int _append_utf8(self, object s, bint compact, const char* what) except -1
    cdef int _append_bytes_like(self, object b, int kind, const char* what) except -1
    cdef int _put_uvarint(self, uint64_t v) except -1
    cdef int _append_prefixed(self, const unsigned char* p, Py_ssize_t n, int kind,
                              const char* what) except -1

    cpdef void write_int8(self, object v) except *
    cpdef void write_int16(self, object v) except *
    cpdef void write_int32(self, object v) except *
    cpdef void write_int64(self, object v) except *
    cpdef void write_uint16(self, object v) except *
    cpdef void write_uint32(self, object v) except *
    cpdef void write_float64(self, object v) except *
    cpdef void write_bool(self, object v) except *
    cpdef void write_uuid(self, object v) except *
    cpdef void write_varint(self, object v) except *
    cpdef void write_varlong(self, object v) except *
    cpdef void write_uvarint(self, object v) except *
    cpdef void write_string(self, object s) except *
    cpdef void write_nullable_string(self, object s) except *
    cpdef void write_compact_string(self, object s) except *
    cpdef void write_compact_nullable_string(self, object s) except *
    cpdef void write_bytes(self, object b) except *
    cpdef void write_nullable_bytes(self, object b) except *
    cpdef void write_compact_bytes(self, object b) except *
    cpdef void write_compact_nullable_bytes(self, object b) except *
    cpdef void write_array_length(self, object n) except *
    cpdef void write_compact_array_length(self, object n) except *
    cpdef void write_raw(self, object b) except *
    cpdef Py_ssize_t reserve(self, Py_ssize_t n) except -1
    cpdef void patch_int32(self, Py_ssize_t pos, object v) except *
    cpdef bytes getvalue(self)
    cpdef void clear(self) except *


@cython.final
cdef class Reader:
    cdef object _obj
    cdef Py_buffer _view
    cdef bint _has_view
    cdef const unsigned char* _data
    cdef Py_ssize_t _start
    cdef Py_ssize_t _pos
    cdef Py_ssize_t _end
    cdef object _mv

    cdef int _truncated(self, const char* what, Py_ssize_t need) except -1
    cdef Py_ssize_t _check_length(self, int64_t n, bint nullable, const char* what,
                                Py_ssize_t at) except -2
    cdef int64_t _uvarint32(self, const char* what) except -1
    cdef object _memoryview(self)
    cdef int _check_string_limit(self, Py_ssize_t n, const char* what,
                                 Py_ssize_t at) except -1
    cdef object _take_str(self, Py_ssize_t n)
    cdef object _take_view(self, Py_ssize_t n)
    cdef Py_ssize_t _bytes_len(self, bint nullable, const char* what) except -2
    cdef Py_ssize_t _compact_bytes_len(self, bint nullable, const char* what) except -2
    cdef bytes _take_bytes(self, Py_ssize_t n)

    cpdef int8_t read_int8(self) except? -1
    cpdef int16_t read_int16(self) except? -1
    cpdef int32_t read_int32(self) except? -1
    cpdef int64_t read_int64(self) except? -1
    cpdef int32_t read_uint16(self) except -1
    cpdef int64_t read_uint32(self) except -1
    cpdef double read_float64(self) except? -1
    cpdef bint read_bool(self) except -1
    cpdef object read_uuid(self)
    cpdef int32_t read_varint(self) except? -1
    cpdef int64_t read_varlong(self) except? -1
    cpdef int64_t read_uvarint(self) except -1
    cpdef str read_string(self)
    cpdef object read_nullable_string(self)
    cpdef str read_compact_string(self)
    cpdef object read_compact_nullable_string(self)
    cpdef bytes read_bytes(self)
    cpdef object read_nullable_bytes(self)
    cpdef bytes read_compact_bytes(self)
    cpdef object read_compact_nullable_bytes(self)
    cpdef object read_bytes_view(self)
    cpdef object read_nullable_bytes_view(self)
    cpdef object read_compact_bytes_view(self)
    cpdef object read_compact_nullable_bytes_view(self)
    cpdef int32_t read_array_length(self) except -2
    cpdef int64_t read_compact_array_length(self) except -2
    cpdef bytes read_raw(self, Py_ssize_t n)
    cpdef object read_raw_view(self, Py_ssize_t n)
    cpdef void skip(self, Py_ssize_t n) except *
