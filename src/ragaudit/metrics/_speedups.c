/* Optional C speedups for reading runs given as Python objects (issue 31).
 *
 * A column of Python strings (a list, a numpy object array, a pandas object column) or a list of
 * (qid, docid, score) rows is read here in one pass over its objects: query ids into runs of
 * equal ids, doc ids straight into their 63-bit hashes, scores into doubles. The ids are never
 * copied: the pure path builds a fixed-width byte array of them first (a join, or pyarrow's
 * conversion), and on this machine class fresh memory costs more than reading the objects does.
 * The kernel then gathers the few ids it compares from the caller's own objects.
 *
 * Every function has a pure-Python path that gives the same numbers (tests compare both). Each
 * returns None for anything it does not take -- a value that is not an exact str, a doc id that
 * is not ASCII or holds a NUL, a row that is not a 3-tuple, a score that is not an exact float or
 * int -- and the caller then takes the pure path, which reads the input again and names any bad
 * value. Nothing here raises on the caller's data: it only declines.
 *
 * setup.py builds this as an optional extension: where no compiler is found the wheel is pure.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Objects are fetched this many items ahead of their use: a column of Python strings is spread
 * through the heap (a shuffled column points into it at random), so several cache misses can be
 * waited for at once instead of one after the other. */
#define AHEAD 16
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((const void *)(p))
#else
#define PREFETCH(p) ((void)0)
#endif

/* The hash's weights (_docids._weights(MAX_WORDS)): word k of an id is multiplied by weights[k].
 * Longer ids (over 512 bytes) are declined. */
#define MAX_WORDS 64

typedef struct {
    PyObject **items; /* borrowed */
    Py_ssize_t n;
    Py_ssize_t stride; /* in pointers */
} Objects;

/* A list, a tuple, or a 1-d numpy object array (read through __array_interface__, so the module
 * needs no numpy headers to build). Returns 0 when *obj* is none of these. The caller holds *obj*
 * for as long as the items are read. */
static int objects_of(PyObject *obj, Objects *out) {
    if (PyList_CheckExact(obj) || PyTuple_CheckExact(obj)) {
        out->items = PySequence_Fast_ITEMS(obj);
        out->n = PySequence_Fast_GET_SIZE(obj);
        out->stride = 1;
        return 1;
    }
    PyObject *iface = PyObject_GetAttrString(obj, "__array_interface__");
    if (iface == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = 0;
    if (PyDict_Check(iface)) {
        PyObject *typestr = PyDict_GetItemString(iface, "typestr");
        PyObject *shape = PyDict_GetItemString(iface, "shape");
        PyObject *data = PyDict_GetItemString(iface, "data");
        PyObject *strides = PyDict_GetItemString(iface, "strides");
        if (typestr && PyUnicode_Check(typestr) && PyUnicode_CompareWithASCIIString(typestr, "|O") == 0 && shape &&
            PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) == 1 && data && PyTuple_Check(data) &&
            PyTuple_GET_SIZE(data) == 2) {
            Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, 0));
            void *ptr = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data, 0));
            Py_ssize_t stride = (Py_ssize_t)sizeof(PyObject *);
            if (strides != NULL && strides != Py_None) {
                stride = (PyTuple_Check(strides) && PyTuple_GET_SIZE(strides) == 1)
                             ? PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, 0))
                             : 0;
            }
            if (!PyErr_Occurred() && n >= 0 && (ptr != NULL || n == 0) && stride > 0 &&
                stride % (Py_ssize_t)sizeof(PyObject *) == 0) {
                out->items = (PyObject **)ptr;
                out->n = n;
                out->stride = stride / (Py_ssize_t)sizeof(PyObject *);
                ok = 1;
            }
            PyErr_Clear();
        }
    }
    Py_DECREF(iface);
    return ok;
}

static inline int ready(PyObject *s) {
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0) {
        PyErr_Clear();
        return 0;
    }
#endif
    (void)s;
    return 1;
}

/* _docids.hash_fixed's hash of an exact ASCII str without NUL (the sum of its little-endian
 * 64-bit words, the last one zero-padded, times the weights, mod 2**64, top bit cleared); 0 when
 * *s* is anything else (a hash is masked to 63 bits, so 1 << 63 cannot be one: it flags). */
#define NOT_HASHED UINT64_C(0x8000000000000000)

static inline uint64_t hash_ascii(PyObject *s, const uint64_t *weights) {
    if (!PyUnicode_CheckExact(s) || !ready(s) || !PyUnicode_IS_ASCII(s))
        return NOT_HASHED;
    Py_ssize_t len = PyUnicode_GET_LENGTH(s);
    if ((len + 7) / 8 > MAX_WORDS)
        return NOT_HASHED;
    const unsigned char *data = PyUnicode_1BYTE_DATA(s);
    if (len && memchr(data, 0, (size_t)len) != NULL)
        return NOT_HASHED; /* a NUL: fixed-width bytes could not keep "a\0" apart from "a" */
    uint64_t h = 0;
    Py_ssize_t k = 0;
    for (; (k + 1) * 8 <= len; k++) {
        uint64_t w;
        memcpy(&w, data + 8 * k, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        h += w * weights[k];
    }
    if (k * 8 < len) {
        uint64_t w = 0;
        for (Py_ssize_t b = k * 8; b < len; b++)
            w |= (uint64_t)data[b] << (8 * (b - k * 8));
        h += w * weights[k];
    }
    return h & UINT64_C(0x7FFFFFFFFFFFFFFF);
}

static int weights_of(PyObject *obj, Py_buffer *view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len != (Py_ssize_t)(MAX_WORDS * sizeof(uint64_t))) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "weights must be 64 uint64 values");
        return -1;
    }
    return 0;
}

/* Runs of equal query ids: the first id of each run and where each run ends. */
typedef struct {
    PyObject *heads; /* list */
    int64_t *ends;
    Py_ssize_t n_runs, cap;
    PyObject *prev;
    int spread; /* runs average fewer than 4 rows: given up */
} Runs;

static int runs_init(Runs *r) {
    r->heads = PyList_New(0);
    r->cap = 1024;
    r->n_runs = 0;
    r->prev = NULL;
    r->spread = 0;
    r->ends = PyMem_Malloc(sizeof(int64_t) * (size_t)r->cap);
    if (r->heads == NULL || r->ends == NULL) {
        if (r->ends == NULL)
            PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void runs_free(Runs *r) {
    Py_XDECREF(r->heads);
    r->heads = NULL;
    PyMem_Free(r->ends);
    r->ends = NULL;
}

/* Equal ids: the same object, or the same text (both exact, ready str). */
static inline int same_str(PyObject *a, PyObject *b) {
    if (a == b)
        return 1;
    Py_ssize_t len = PyUnicode_GET_LENGTH(a);
    if (len != PyUnicode_GET_LENGTH(b) || PyUnicode_KIND(a) != PyUnicode_KIND(b))
        return 0;
    return memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)len * PyUnicode_KIND(a)) == 0;
}

static int runs_push(Runs *r, int64_t end) {
    if (r->n_runs == r->cap) {
        int64_t *grown = PyMem_Realloc(r->ends, sizeof(int64_t) * (size_t)(2 * r->cap));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        r->ends = grown;
        r->cap *= 2;
    }
    r->ends[r->n_runs++] = end;
    return 0;
}

/* Row *i*'s query id *q* (an exact str: checked here). 0: taken; 1: declined; -1: an error. */
static inline int runs_add(Runs *r, Py_ssize_t i, PyObject *q) {
    if (!PyUnicode_CheckExact(q) || !ready(q))
        return 1;
    if (r->spread || (r->prev != NULL && same_str(r->prev, q))) {
        r->prev = q;
        return 0;
    }
    if (r->prev != NULL) {
        if (runs_push(r, i) < 0)
            return -1;
        /* Past a first stretch, runs averaging fewer than 4 rows: the ids are spread out. */
        if (i >= 4096 && r->n_runs > i / 4)
            r->spread = 1;
    }
    r->prev = q;
    return PyList_Append(r->heads, q) < 0 ? -1 : 0;
}

/* (heads, lengths as an int64 bytearray), or (None, None) when the ids are spread out. Frees *r*. */
static PyObject *runs_result(Runs *r, Py_ssize_t n) {
    PyObject *out;
    if (r->spread || n == 0) {
        out = Py_BuildValue("(OO)", Py_None, Py_None);
    } else {
        if (runs_push(r, n) < 0) {
            runs_free(r);
            return NULL;
        }
        PyObject *lengths = PyByteArray_FromStringAndSize(NULL, r->n_runs * (Py_ssize_t)sizeof(int64_t));
        if (lengths == NULL) {
            runs_free(r);
            return NULL;
        }
        int64_t *len_out = (int64_t *)PyByteArray_AS_STRING(lengths);
        for (Py_ssize_t k = 0; k < r->n_runs; k++)
            len_out[k] = r->ends[k] - (k ? r->ends[k - 1] : 0);
        out = Py_BuildValue("(ON)", r->heads, lengths);
    }
    runs_free(r);
    return out;
}

/* hash_strings(values, weights) -> bytes | None
 *
 * *values*: a list, tuple or 1-d numpy object array. The hash of every id, as n uint64 (native
 * order) in a bytearray; None when a value is not an exact ASCII str without NUL of at most
 * 512 characters, or *values* is no such sequence. */
static PyObject *hash_strings(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values, *weights_obj;
    if (!PyArg_ParseTuple(args, "OO", &values, &weights_obj))
        return NULL;
    Objects objs;
    if (!objects_of(values, &objs))
        Py_RETURN_NONE;
    Py_buffer wview;
    if (weights_of(weights_obj, &wview) < 0)
        return NULL;
    const uint64_t *weights = (const uint64_t *)wview.buf;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, objs.n * (Py_ssize_t)sizeof(uint64_t));
    if (out == NULL) {
        PyBuffer_Release(&wview);
        return NULL;
    }
    uint64_t *hashes = (uint64_t *)PyByteArray_AS_STRING(out);
    for (Py_ssize_t i = 0; i < objs.n; i++) {
        if (i + AHEAD < objs.n)
            PREFETCH(objs.items[(i + AHEAD) * objs.stride]);
        uint64_t h = hash_ascii(objs.items[i * objs.stride], weights);
        if (h == NOT_HASHED) {
            Py_DECREF(out);
            PyBuffer_Release(&wview);
            Py_RETURN_NONE;
        }
        hashes[i] = h;
    }
    PyBuffer_Release(&wview);
    return out;
}

/* string_runs(values) -> (heads, lengths) | None
 *
 * Query ids (as hash_strings takes them) as runs of equal ids: the first id of each run and the
 * run lengths (int64, a bytearray); (None, None) when the runs average fewer than 4 rows. None when a
 * value is not an exact str. Whether an id heads two runs (a query's rows in two places) is the
 * caller's to check. */
static PyObject *string_runs(PyObject *self, PyObject *values) {
    (void)self;
    Objects objs;
    if (!objects_of(values, &objs))
        Py_RETURN_NONE;
    Runs runs;
    if (runs_init(&runs) < 0) {
        runs_free(&runs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < objs.n; i++) {
        if (i + AHEAD < objs.n)
            PREFETCH(objs.items[(i + AHEAD) * objs.stride]);
        int taken = runs_add(&runs, i, objs.items[i * objs.stride]);
        if (taken != 0) {
            runs_free(&runs);
            if (taken < 0)
                return NULL;
            Py_RETURN_NONE;
        }
        if (runs.spread) {
            runs_free(&runs);
            return Py_BuildValue("(OO)", Py_None, Py_None);
        }
    }
    return runs_result(&runs, objs.n);
}

/* rows_columns(rows, weights) -> ((heads, lengths), hashes, scores) | None
 *
 * *rows*: a list of (qid, docid, score) tuples or lists. Query ids as string_runs gives them, doc
 * ids as hash_strings does, scores as n doubles (a bytearray). None when a row is not a 3-tuple or
 * 3-list, a query id not an exact str, a doc id not what hash_strings takes, or a score not an
 * exact float or int (bool and numpy scalars included: the pure path reads those). */
static PyObject *rows_columns(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *rows, *weights_obj;
    if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &rows, &weights_obj))
        return NULL;
    Py_buffer wview;
    if (weights_of(weights_obj, &wview) < 0)
        return NULL;
    const uint64_t *weights = (const uint64_t *)wview.buf;
    Py_ssize_t n = PyList_GET_SIZE(rows);
    PyObject *hashes = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint64_t));
    PyObject *scores = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(double));
    Runs runs;
    int started = runs_init(&runs);
    PyObject *qids = NULL;
    if (hashes == NULL || scores == NULL || started < 0)
        goto fail;
    uint64_t *out_hashes = (uint64_t *)PyByteArray_AS_STRING(hashes);
    double *out_scores = (double *)PyByteArray_AS_STRING(scores);
    PyObject **items = PySequence_Fast_ITEMS(rows);
    for (Py_ssize_t i = 0; i < n; i++) {
        /* Two stages ahead: the row, then (once it is in cache) the doc id it points to. */
        if (i + 2 * AHEAD < n)
            PREFETCH(items[i + 2 * AHEAD]);
        if (i + AHEAD < n && PyTuple_CheckExact(items[i + AHEAD]) && PyTuple_GET_SIZE(items[i + AHEAD]) == 3)
            PREFETCH(PyTuple_GET_ITEM(items[i + AHEAD], 1));
        PyObject *row = items[i];
        if (!(PyTuple_CheckExact(row) || PyList_CheckExact(row)) || PySequence_Fast_GET_SIZE(row) != 3)
            goto decline;
        PyObject **fields = PySequence_Fast_ITEMS(row);
        int taken = runs_add(&runs, i, fields[0]);
        if (taken < 0)
            goto fail;
        if (taken > 0)
            goto decline;
        uint64_t h = hash_ascii(fields[1], weights);
        if (h == NOT_HASHED)
            goto decline;
        out_hashes[i] = h;
        PyObject *s = fields[2];
        if (PyFloat_CheckExact(s)) {
            out_scores[i] = PyFloat_AS_DOUBLE(s);
        } else if (PyLong_CheckExact(s)) {
            double v = PyLong_AsDouble(s);
            if (v == -1.0 && PyErr_Occurred()) {
                PyErr_Clear();
                goto decline;
            }
            out_scores[i] = v;
        } else {
            goto decline;
        }
    }
    PyBuffer_Release(&wview);
    qids = runs_result(&runs, n);
    if (qids == NULL) {
        Py_DECREF(hashes);
        Py_DECREF(scores);
        return NULL;
    }
    return Py_BuildValue("(NNN)", qids, hashes, scores);
decline:
    runs_free(&runs);
    Py_XDECREF(hashes);
    Py_XDECREF(scores);
    PyBuffer_Release(&wview);
    Py_RETURN_NONE;
fail:
    runs_free(&runs);
    Py_XDECREF(hashes);
    Py_XDECREF(scores);
    PyBuffer_Release(&wview);
    return NULL;
}

/* gather_ascii(column, index, field) -> (bytes, width) | None
 *
 * The ids at rows *index* (a contiguous intp buffer) of *column* -- a list, tuple or numpy object
 * array of str, or with *field* >= 0 a list of rows (tuples or lists) holding the id at that
 * position -- as NUL-padded rows of the widest one's width (bytes of len(index) * width). None when
 * an id is not an exact ASCII str or a row is not a tuple or list that long; IndexError for a row
 * number out of range. */
static PyObject *gather_ascii(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *column, *index_obj;
    Py_ssize_t field;
    if (!PyArg_ParseTuple(args, "OOn", &column, &index_obj, &field))
        return NULL;
    Objects objs;
    if (!objects_of(column, &objs))
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(index_obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (view.len % (Py_ssize_t)sizeof(Py_ssize_t) != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "index must be a buffer of intp row numbers");
        return NULL;
    }
    const Py_ssize_t *index = (const Py_ssize_t *)view.buf;
    Py_ssize_t m = view.len / (Py_ssize_t)sizeof(Py_ssize_t), width = 1;
    PyObject *out = NULL;
    /* Two passes over the (few) gathered ids: their widest length, then their bytes. */
    for (int pass = 0; pass < 2; pass++) {
        char *dst = NULL;
        if (pass == 1) {
            out = PyBytes_FromStringAndSize(NULL, m * width);
            if (out == NULL)
                break;
            dst = PyBytes_AS_STRING(out);
            memset(dst, 0, (size_t)(m * width));
        }
        for (Py_ssize_t k = 0; k < m; k++) {
            Py_ssize_t i = index[k];
            if (i < 0 || i >= objs.n) {
                Py_CLEAR(out);
                PyBuffer_Release(&view);
                PyErr_SetString(PyExc_IndexError, "row number out of range");
                return NULL;
            }
            PyObject *id = objs.items[i * objs.stride];
            if (field >= 0) {
                if (!(PyTuple_CheckExact(id) || PyList_CheckExact(id)) || PySequence_Fast_GET_SIZE(id) <= field)
                    goto decline;
                id = PySequence_Fast_ITEMS(id)[field];
            }
            if (!PyUnicode_CheckExact(id) || !ready(id) || !PyUnicode_IS_ASCII(id))
                goto decline;
            Py_ssize_t len = PyUnicode_GET_LENGTH(id);
            if (pass == 0) {
                if (len > width)
                    width = len;
            } else {
                memcpy(dst + k * width, PyUnicode_1BYTE_DATA(id), (size_t)len);
            }
        }
    }
    PyBuffer_Release(&view);
    if (out == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", out, width);
decline:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* A contiguous buffer of n rows of *itemsize* bytes (a numpy array's). */
static int rows_buffer(PyObject *obj, Py_ssize_t itemsize, Py_buffer *view, Py_ssize_t *n) {
    if (itemsize <= 0) {
        PyErr_SetString(PyExc_ValueError, "itemsize must be positive");
        return -1;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len % itemsize != 0) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "the buffer is not a whole number of rows");
        return -1;
    }
    *n = view->len / itemsize;
    return 0;
}

/* hash_ucs4(array, units, weights) -> bytearray | None
 *
 * A C-contiguous numpy 'U' array of *units* native-order code units a row: the hash of every row's
 * id as hash_strings gives it for the same (ASCII) text -- the units narrowed to bytes on the fly,
 * never into a copy of the column. None when a unit is not ASCII or a row is over 512 units. */
static PyObject *hash_ucs4(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *array, *weights_obj;
    Py_ssize_t units;
    if (!PyArg_ParseTuple(args, "OnO", &array, &units, &weights_obj))
        return NULL;
    if (units > 8 * MAX_WORDS)
        Py_RETURN_NONE;
    Py_buffer view, wview;
    Py_ssize_t n;
    if (rows_buffer(array, units * 4, &view, &n) < 0)
        return NULL;
    if (weights_of(weights_obj, &wview) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const uint64_t *weights = (const uint64_t *)wview.buf;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint64_t));
    if (out != NULL) {
        uint64_t *hashes = (uint64_t *)PyByteArray_AS_STRING(out);
        const uint32_t *unit = (const uint32_t *)view.buf;
        Py_ssize_t full = units / 8;
        for (Py_ssize_t i = 0; i < n; i++, unit += units) {
            uint64_t h = 0;
            uint32_t seen = 0;
            /* Eight units a word, straight-line (a unit over 0x7F declines the whole column, so
             * its high bits never reach a hash that is used). */
            for (Py_ssize_t k = 0; k < full; k++) {
                const uint32_t *u = unit + 8 * k;
                seen |= u[0] | u[1] | u[2] | u[3] | u[4] | u[5] | u[6] | u[7];
                uint64_t w = (uint64_t)u[0] | (uint64_t)u[1] << 8 | (uint64_t)u[2] << 16 | (uint64_t)u[3] << 24 |
                             (uint64_t)u[4] << 32 | (uint64_t)u[5] << 40 | (uint64_t)u[6] << 48 |
                             (uint64_t)u[7] << 56;
                h += w * weights[k];
            }
            if (full * 8 < units) {
                uint64_t w = 0;
                for (Py_ssize_t b = full * 8; b < units; b++) {
                    seen |= unit[b];
                    w |= (uint64_t)unit[b] << (8 * (b - full * 8));
                }
                h += w * weights[full];
            }
            if (seen >= 0x80) {
                Py_CLEAR(out);
                break;
            }
            hashes[i] = h & UINT64_C(0x7FFFFFFFFFFFFFFF);
        }
    }
    PyBuffer_Release(&wview);
    PyBuffer_Release(&view);
    if (out == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return out;
}

/* fixed_runs(array, itemsize) -> bytearray | None
 *
 * A C-contiguous fixed-width array (numpy 'U' or 'S'): where each run of equal rows starts (int64,
 * the first 0), compared as raw bytes. None when, past the first 4,096 rows, the runs average
 * fewer than 4 rows (spread ids). */
static PyObject *fixed_runs(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *array;
    Py_ssize_t itemsize;
    if (!PyArg_ParseTuple(args, "On", &array, &itemsize))
        return NULL;
    Py_buffer view;
    Py_ssize_t n;
    if (rows_buffer(array, itemsize, &view, &n) < 0)
        return NULL;
    Runs runs;
    if (runs_init(&runs) < 0) {
        runs_free(&runs);
        PyBuffer_Release(&view);
        return NULL;
    }
    const char *row = (const char *)view.buf;
    int spread = 0;
    if (n > 0 && runs_push(&runs, 0) < 0)
        goto fail;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (memcmp(row + i * itemsize, row + (i - 1) * itemsize, (size_t)itemsize) != 0) {
            if (runs_push(&runs, i) < 0)
                goto fail;
            if (i >= 4096 && runs.n_runs > i / 4) {
                spread = 1;
                break;
            }
        }
    }
    PyBuffer_Release(&view);
    PyObject *out = NULL;
    if (!spread)
        out = PyByteArray_FromStringAndSize((const char *)runs.ends, runs.n_runs * (Py_ssize_t)sizeof(int64_t));
    runs_free(&runs);
    if (spread)
        Py_RETURN_NONE;
    return out;
fail:
    runs_free(&runs);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"hash_strings", hash_strings, METH_VARARGS,
     "hash_strings(values, weights) -> bytes | None: the doc-id hash of every ASCII str of values."},
    {"string_runs", string_runs, METH_O,
     "string_runs(values) -> (heads, lengths) | None: str values as runs of equal ids."},
    {"rows_columns", rows_columns, METH_VARARGS,
     "rows_columns(rows, weights) -> ((heads, lengths), hashes, scores) | None: "
     "(qid, docid, score) rows read in one pass."},
    {"gather_ascii", gather_ascii, METH_VARARGS,
     "gather_ascii(column, index, field) -> (bytes, width) | None: the ids at rows index as fixed-width bytes."},
    {"hash_ucs4", hash_ucs4, METH_VARARGS,
     "hash_ucs4(array, units, weights) -> bytearray | None: the doc-id hash of every row of a numpy U array."},
    {"fixed_runs", fixed_runs, METH_VARARGS,
     "fixed_runs(array, itemsize) -> bytearray | None: where each run of equal rows of a fixed-width array starts."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Optional C speedups of ragaudit.metrics' input reading.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
