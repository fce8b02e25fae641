/* A new bytes object holding a copy of a short run of memory (documented C API only). */
#ifndef KP_BYTES_H
#define KP_BYTES_H

#include <Python.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#  define KP_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#  define KP_ALWAYS_INLINE inline
#endif

/* New reference to bytes(p[:n]); None for n == -1. 0 and 1 byte go through
   PyBytes_FromStringAndSize(p, n) for CPython's shared objects; longer ones are allocated
   unfilled and copied here, with fixed-size overlapping moves instead of a call into libc
   for the short keys and values records usually carry. */
static KP_ALWAYS_INLINE PyObject* kp_bytes_new(const unsigned char* p, Py_ssize_t n) {
    PyObject* b;
    char* d;
    if (n < 2) {
        if (n < 0) {
            Py_INCREF(Py_None);
            return Py_None;
        }
        return PyBytes_FromStringAndSize((const char*)p, n);
    }
    b = PyBytes_FromStringAndSize(NULL, n);
    if (b == NULL) return NULL;
    d = PyBytes_AS_STRING(b);
    if (n <= 16) {
        if (n >= 8) {
            memcpy(d, p, 8);
            memcpy(d + n - 8, p + n - 8, 8);
        } else if (n >= 4) {
            memcpy(d, p, 4);
            memcpy(d + n - 4, p + n - 4, 4);
        } else {
            memcpy(d, p, 2);
            memcpy(d + n - 2, p + n - 2, 2);
        }
    } else if (n <= 32) {
        memcpy(d, p, 16);
        memcpy(d + n - 16, p + n - 16, 16);
    } else if (n <= 64) {
        memcpy(d, p, 32);
        memcpy(d + n - 32, p + n - 32, 32);
    } else if (n <= 128) {
        memcpy(d, p, 64);
        memcpy(d + n - 64, p + n - 64, 64);
    } else {
        memcpy(d, p, (size_t)n);
    }
    return b;
}

#endif
