# cython: language_level=3
"""Output buffers for the decompressors: a fresh ``bytes`` object they can write into.

The codec libraries (cramjam) can decompress into a caller's writable buffer. Handing them a
bytearray and converting it with ``bytes()`` costs a second pass over fresh memory, as much
as the decompression itself for fast codecs. Instead we allocate the final ``bytes`` object
uninitialised and expose its storage through a writable buffer while nothing else can see it.
The object is only returned to the caller once it has been completely written.
"""
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize


cdef class OutputBuffer:
    """Writable view onto a new, not yet shared ``bytes`` object of ``size`` bytes."""

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

    def take(self):
        """Return the bytes object (call once, after every writer released its view)."""
        if self._exports:
            raise BufferError("output still exported")
        obj = self._obj
        if obj is None:
            raise BufferError("output already taken")
        self._obj = None
        return obj
