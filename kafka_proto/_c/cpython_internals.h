/* Every use of CPython internals in kafka_proto, in one guarded place.
 *
 * kafka_proto.records._v2 is faster on CPython with these, each of which leans on something
 * the C API does not promise:
 *
 *  - Record fields as member descriptors: their offsets in the object are found by comparing
 *    probe values against a live Record's memory, and PyMemberDef descriptors for them are put
 *    into the type's tp_dict (CPython's attribute lookup specialises member descriptors,
 *    LOAD_ATTR_SLOT, which Cython's getset properties do not get).
 *  - Records made without tp_new (no zeroing, no None placeholders) from a private free list,
 *    refilled by a tp_dealloc put in place of Cython's.
 *  - RecordBatchBuilder.append as a hand-made METH_FASTCALL | METH_KEYWORDS method put into
 *    tp_dict, reading an int timestamp straight from its digits (CPython < 3.12's layout).
 *  - RecordFactory: the offset of a __slots__ member read from its descriptor's PyMemberDef,
 *    values stored at that offset in objects made by PyType_GenericAlloc, and the objects (and
 *    their timestamp tuples) untracked from the cyclic garbage collector.
 *
 * KP_INTERNALS_VERIFIED lists where they were verified: CPython 3.9 to 3.13 with the GIL, full
 * C API. Anywhere else (PyPy, a free-threaded build, the limited API, a newer CPython) each
 * function below is a stub and kp_internals_enabled() is 0: _v2 takes its plain path, which
 * uses only the documented C API. KAFKA_NATIVE_PLAIN=1 in the environment at import forces the
 * plain path on a verified interpreter too (the tests run both).
 */
#ifndef KP_CPYTHON_INTERNALS_H
#define KP_CPYTHON_INTERNALS_H

#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kp_bytes.h"

/* -DKP_INTERNALS_VERIFIED=0 builds the stubs anywhere (to check that they build). */
#ifndef KP_INTERNALS_VERIFIED
#  if !defined(PYPY_VERSION) && !defined(Py_LIMITED_API) && !defined(Py_GIL_DISABLED) \
      && PY_VERSION_HEX >= 0x03090000 && PY_VERSION_HEX < 0x030E0000
#    define KP_INTERNALS_VERIFIED 1
#  else
#    define KP_INTERNALS_VERIFIED 0
#  endif
#endif

#if defined(__GNUC__) || defined(__clang__)
#  define KP_LIKELY(x) __builtin_expect(!!(x), 1)
#  define KP_NOINLINE __attribute__((noinline))
#else
#  define KP_LIKELY(x) (x)
#  define KP_NOINLINE
#endif

/* 1 when the internals are to be used: a verified interpreter, and KAFKA_NATIVE_PLAIN unset,
   empty or "0". */
static int kp_internals_enabled(void) {
#if KP_INTERNALS_VERIFIED
    const char* plain = getenv("KAFKA_NATIVE_PLAIN");
    return plain == NULL || plain[0] == '\0' || strcmp(plain, "0") == 0;
#else
    return 0;
#endif
}

#if KP_INTERNALS_VERIFIED

#include <structmember.h>

/* ---------------------------------------------------------------------------------------
 * Record: member descriptors, free list, construction. */

#define KP_REC_FREE_MAX 1024
static PyTypeObject* kp_rec_type = NULL;
static PyObject* kp_rec_free[KP_REC_FREE_MAX];
static int kp_rec_nfree = 0;
static Py_ssize_t kp_rec_off[6];  /* offset, timestamp, key, value, timestamp_type, headers */
static PyMemberDef kp_rec_members[5];
#define KP_REC_I64(o, i) (*(int64_t*)((char*)(o) + kp_rec_off[i]))
#define KP_REC_OBJ(o, i) (*(PyObject**)((char*)(o) + kp_rec_off[i]))

static void kp_rec_dealloc(PyObject* o) {
    Py_DECREF(KP_REC_OBJ(o, 2));  /* never NULL: set at creation */
    Py_DECREF(KP_REC_OBJ(o, 3));
    Py_DECREF(KP_REC_OBJ(o, 4));
    Py_DECREF(KP_REC_OBJ(o, 5));
    if (kp_rec_nfree < KP_REC_FREE_MAX && Py_TYPE(o) == kp_rec_type)
        kp_rec_free[kp_rec_nfree++] = o;
    else
        Py_TYPE(o)->tp_free(o);
}

/* Offset of a field inside ``obj``, found by its (unique) probe value. */
static Py_ssize_t kp_find_offset(PyObject* obj, const void* needle, size_t n) {
    const char* base = (const char*)obj;
    Py_ssize_t off;
    for (off = (Py_ssize_t)sizeof(void*); off + (Py_ssize_t)n <= Py_TYPE(obj)->tp_basicsize;
         off++)
        if (memcmp(base + off, needle, n) == 0) return off;
    PyErr_SetString(PyExc_RuntimeError, "Record field not found in the probe object");
    return -1;
}

static int kp_install_member(PyTypeObject* tp, int i, const char* name, int type,
                             Py_ssize_t offset) {
    PyMemberDef* def = &kp_rec_members[i];
    PyObject* d;
    int rc;
    def->name = name;
    def->type = type;
    def->offset = offset;
    def->flags = READONLY;
    def->doc = NULL;
    d = PyDescr_NewMember(tp, def);
    if (d == NULL) return -1;
    rc = PyDict_SetItemString(tp->tp_dict, name, d);
    Py_DECREF(d);
    PyType_Modified(tp);
    return rc;
}

/* ``probe`` is a Record whose key, value, timestamp_type, _headers, offset and timestamp
   hold the given distinct values: their offsets are found, the fields exposed as member
   descriptors, and the free list put in place. */
static int kp_record_install(PyTypeObject* tp, PyObject* probe, PyObject* key,
                             PyObject* value, PyObject* ts_type, PyObject* headers,
                             int64_t offset, int64_t timestamp) {
    Py_ssize_t off[6];
    PyObject* objs[4];
    int i;
    /* A plain free list needs a final type outside the cyclic GC (cython.final, no_gc). */
    if (tp->tp_flags & (Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE) || tp->tp_itemsize
            || Py_TYPE(probe) != tp) {
        PyErr_SetString(PyExc_RuntimeError, "unexpected Record type layout");
        return -1;
    }
    objs[0] = key; objs[1] = value; objs[2] = ts_type; objs[3] = headers;
    if ((off[0] = kp_find_offset(probe, &offset, sizeof(offset))) < 0) return -1;
    if ((off[1] = kp_find_offset(probe, &timestamp, sizeof(timestamp))) < 0) return -1;
    for (i = 0; i < 4; i++)
        if ((off[2 + i] = kp_find_offset(probe, &objs[i], sizeof(PyObject*))) < 0) return -1;
    if (kp_install_member(tp, 0, "key", T_OBJECT_EX, off[2]) < 0
            || kp_install_member(tp, 1, "value", T_OBJECT_EX, off[3]) < 0
            || kp_install_member(tp, 2, "timestamp_type", T_OBJECT_EX, off[4]) < 0
            || kp_install_member(tp, 3, "offset", T_LONGLONG, off[0]) < 0
            || kp_install_member(tp, 4, "timestamp", T_LONGLONG, off[1]) < 0)
        return -1;
    memcpy(kp_rec_off, off, sizeof(off));
    kp_rec_type = tp;
    tp->tp_dealloc = kp_rec_dealloc;
    return 0;
}

/* The record with new bytes for its key and value (n == -1: None). ts_type is borrowed. On
   success *failed is cleared (the caller's "record incomplete" flag). */
static KP_ALWAYS_INLINE PyObject*
kp_rec_make(int64_t offset, int64_t timestamp, const unsigned char* kp, Py_ssize_t kn,
            const unsigned char* vp, Py_ssize_t vn, PyObject* ts_type, int* failed) {
    PyObject* o;
    PyObject* key;
    PyObject* value;
    key = kp_bytes_new(kp, kn);
    if (key == NULL) return NULL;
    value = kp_bytes_new(vp, vn);
    if (value == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    if (kp_rec_nfree > 0) {
        o = kp_rec_free[--kp_rec_nfree];
    } else {
        o = (PyObject*)PyObject_Malloc((size_t)kp_rec_type->tp_basicsize);
        if (o == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            return PyErr_NoMemory();
        }
    }
    (void)PyObject_INIT(o, kp_rec_type);
    KP_REC_I64(o, 0) = offset;
    KP_REC_I64(o, 1) = timestamp;
    KP_REC_OBJ(o, 2) = key;    /* reference handed over */
    KP_REC_OBJ(o, 3) = value;  /* reference handed over */
    Py_INCREF(ts_type);
    KP_REC_OBJ(o, 4) = ts_type;
    Py_INCREF(Py_None);
    KP_REC_OBJ(o, 5) = Py_None;
    *failed = 0;
    return o;
}

/* ---------------------------------------------------------------------------------------
 * RecordBatchBuilder.append as a METH_FASTCALL | METH_KEYWORDS method. */

static PyObject* kp_append_names[4];

/* An exact int of at most two digits (below 2^60 in magnitude with 30-bit digits: every
   millisecond timestamp) read straight from its digits: 1 and *out set, or 0 for anything
   else, which the caller converts the general way. CPython < 3.12 only (3.12 changed the
   int layout); elsewhere always 0. */
static inline int kp_small_int64(PyObject* o, int64_t* out) {
#if PY_VERSION_HEX < 0x030C0000
    if (KP_LIKELY(PyLong_CheckExact(o))) {
        Py_ssize_t n = Py_SIZE(o);
        const digit* d = ((PyLongObject*)o)->ob_digit;
        uint64_t u;
        if (n == 2 || n == -2)
            u = ((uint64_t)d[1] << PyLong_SHIFT) | (uint64_t)d[0];
        else if (n == 1 || n == -1)
            u = d[0];
        else if (n == 0)
            u = 0;
        else
            return 0;
        *out = n < 0 ? -(int64_t)u : (int64_t)u;
        return 1;
    }
#endif
    (void)o; (void)out;
    return 0;
}

/* Sorts positional and keyword arguments into v[0..3] (value, key, timestamp, headers;
   v[1..3] default to None). 0, or -1 with an exception set. Out of line: the common call
   never gets here. */
static KP_NOINLINE int kp_append_parse(PyObject* const* args, Py_ssize_t nargs,
                                       PyObject* kwnames, PyObject** v) {
    Py_ssize_t i, j, nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    v[0] = NULL;
    v[1] = v[2] = v[3] = Py_None;
    if (nargs > 4) {
        PyErr_Format(PyExc_TypeError,
                     "append() takes at most 4 positional arguments (%zd given)", nargs);
        return -1;
    }
    for (i = 0; i < nargs; i++) v[i] = args[i];
    for (i = 0; i < nkw; i++) {
        PyObject* name = PyTuple_GET_ITEM(kwnames, i);
        int slot = -1;
        for (j = 0; j < 4 && slot < 0; j++)
            if (name == kp_append_names[j]) slot = (int)j;
        for (j = 0; j < 4 && slot < 0; j++) {
            int eq = PyUnicode_Compare(name, kp_append_names[j]);
            if (eq == -1 && PyErr_Occurred()) return -1;
            if (eq == 0) slot = (int)j;
        }
        if (slot < 0) {
            PyErr_Format(PyExc_TypeError,
                         "append() got an unexpected keyword argument '%S'", name);
            return -1;
        }
        if (slot < nargs) {
            PyErr_Format(PyExc_TypeError,
                         "append() got multiple values for argument '%S'", name);
            return -1;
        }
        v[slot] = args[nargs + i];
    }
    if (v[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "append() missing required argument 'value'");
        return -1;
    }
    return 0;
}

static PyMethodDef kp_append_def = {
    "append", NULL, METH_FASTCALL | METH_KEYWORDS,
    "append($self, /, value, key=None, timestamp=None, headers=None)\n--\n\n"
    "Encode one record into the batch.\n\n"
    "value, key: bytes-like or None. timestamp: int milliseconds (None = now).\n"
    "headers: iterable of (str, bytes-like | None)."
};

/* Puts ``impl`` (a METH_FASTCALL | METH_KEYWORDS C function) into the type as ``append``. */
static int kp_install_append(PyTypeObject* tp, void* impl) {
    static const char* names[4] = {"value", "key", "timestamp", "headers"};
    PyObject* d;
    int i, rc;
    for (i = 0; i < 4; i++) {
        kp_append_names[i] = PyUnicode_InternFromString(names[i]);
        if (kp_append_names[i] == NULL) return -1;
    }
    kp_append_def.ml_meth = (PyCFunction)(void(*)(void))impl;
    d = PyDescr_NewMethod(tp, &kp_append_def);
    if (d == NULL) return -1;
    rc = PyDict_SetItemString(tp->tp_dict, "append", d);
    Py_DECREF(d);
    PyType_Modified(tp);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * RecordFactory: __slots__ written by offset. */

/* Offset of a slot (a writable __slots__ member descriptor holding an object), or -1. */
static Py_ssize_t kp_slot_offset(PyObject* descr) {
    PyMemberDef* m;
    if (!Py_IS_TYPE(descr, &PyMemberDescr_Type)) return -1;
    m = ((PyMemberDescrObject*)descr)->d_member;
    if (m->type != T_OBJECT_EX || (m->flags & READONLY)) return -1;
    return m->offset;
}

/* Store a new reference in a slot of a freshly allocated object (the slot is NULL). */
#define KP_SLOT_SET(o, off, v) (*(PyObject**)((char*)(o) + (off)) = (v))

#else  /* not verified here: stubs, never called (kp_internals_enabled() is 0) */

static PyObject* kp_internals_unavailable(void) {
    PyErr_SetString(PyExc_RuntimeError, "CPython internals are not used on this interpreter");
    return NULL;
}
static int kp_record_install(PyTypeObject* tp, PyObject* probe, PyObject* key,
                             PyObject* value, PyObject* ts_type, PyObject* headers,
                             int64_t offset, int64_t timestamp) {
    (void)tp; (void)probe; (void)key; (void)value; (void)ts_type; (void)headers;
    (void)offset; (void)timestamp;
    kp_internals_unavailable();
    return -1;
}
static PyObject* kp_rec_make(int64_t offset, int64_t timestamp, const unsigned char* kp,
                             Py_ssize_t kn, const unsigned char* vp, Py_ssize_t vn,
                             PyObject* ts_type, int* failed) {
    (void)offset; (void)timestamp; (void)kp; (void)kn; (void)vp; (void)vn; (void)ts_type;
    (void)failed;
    return kp_internals_unavailable();
}
static int kp_small_int64(PyObject* o, int64_t* out) { (void)o; (void)out; return 0; }
static int kp_append_parse(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                           PyObject** v) {
    (void)args; (void)nargs; (void)kwnames; (void)v;
    kp_internals_unavailable();
    return -1;
}
static int kp_install_append(PyTypeObject* tp, void* impl) {
    (void)tp; (void)impl;
    kp_internals_unavailable();
    return -1;
}
static Py_ssize_t kp_slot_offset(PyObject* descr) { (void)descr; return -1; }
#define KP_SLOT_SET(o, off, v) ((void)(o), (void)(off), (void)(v))

#endif  /* KP_INTERNALS_VERIFIED */

#endif  /* KP_CPYTHON_INTERNALS_H */
