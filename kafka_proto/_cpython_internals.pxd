# Cython declarations of _c/cpython_internals.h: every use of CPython internals in
# kafka_proto, in one guarded place (see the header for what each one leans on, and where
# they were verified). Call nothing here unless kp_internals_enabled() returned 1.
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t


cdef extern from "cpython_internals.h":
    bint kp_internals_enabled()
    bint KP_LIKELY(bint) noexcept nogil

    # Record: member descriptors and free list (kp_record_install), construction.
    int kp_record_install(type tp, object probe, object key, object value, object ts_type,
                          object headers, int64_t offset, int64_t timestamp) except -1
    object kp_rec_make(int64_t offset, int64_t timestamp, const unsigned char* kp,
                       Py_ssize_t kn, const unsigned char* vp, Py_ssize_t vn,
                       PyObject* ts_type, bint* failed)

    # RecordBatchBuilder.append as a METH_FASTCALL | METH_KEYWORDS method.
    bint kp_small_int64(PyObject* o, int64_t* out) noexcept
    int kp_append_parse(PyObject** args, Py_ssize_t nargs, PyObject* kwnames,
                        PyObject** v) except -1
    int kp_install_append(type tp, void* impl) except -1

    # RecordFactory: __slots__ written by offset.
    Py_ssize_t kp_slot_offset(object descr)
    void KP_SLOT_SET(PyObject* o, Py_ssize_t off, PyObject* v)
