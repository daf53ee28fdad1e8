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
 * Every function holds the GIL from start to end, so the caller's lists cannot change under a
 * pass, and every object read is borrowed from a container the caller holds for the call.
 *
 * setup.py builds this as an optional extension: where no compiler is found the wheel is pure.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include "_speedups.h"

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

/* The hash of *len* bytes known to be ASCII unless *check* (then checked: any byte over 0x7F,
 * like a NUL -- unless *nul_ok*, for fixed-width rows whose padding is NULs -- or an id over 512
 * bytes, gives NOT_HASHED). Every row hash is this one formula; the flags are constants at each
 * call, so the inlined copy drops the tests it does not need. The NUL test runs on the words as they
 * are hashed (a word has a zero byte exactly when (w - 0x01..01) & ~w & 0x80..80 is not zero),
 * not as a call to memchr per id, which cost as much as the hash. */
#define ONES UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)
static inline uint64_t hash_bytes(const unsigned char *data, Py_ssize_t len, const uint64_t *weights, int check,
                                  int nul_ok) {
    if ((len + 7) / 8 > MAX_WORDS)
        return NOT_HASHED;
    uint64_t h = 0, high = 0, zero = 0;
    Py_ssize_t k = 0;
    for (; (k + 1) * 8 <= len; k++) {
        uint64_t w;
        memcpy(&w, data + 8 * k, 8);
        high |= w;
        zero |= (w - ONES) & ~w & HIGHS;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        h += w * weights[k];
    }
    if (k * 8 < len) {
        uint64_t w = 0;
        int rest = (int)(len - k * 8);
        for (int b = 0; b < rest; b++)
            w |= (uint64_t)data[k * 8 + b] << (8 * b);
        high |= w;
        uint64_t tested = w | (ONES & ~((UINT64_C(1) << (8 * rest)) - 1)); /* the bytes past the id: not NULs */
        zero |= (tested - ONES) & ~tested & HIGHS;
        h += w * weights[k];
    }
    if (zero != 0 && !nul_ok)
        return NOT_HASHED; /* a NUL: fixed-width bytes could not keep "a\0" apart from "a" */
    if (check && (high & HIGHS) != 0)
        return NOT_HASHED;
    return h & UINT64_C(0x7FFFFFFFFFFFFFFF);
}

static inline uint64_t hash_ascii(PyObject *s, const uint64_t *weights) {
    if (!PyUnicode_CheckExact(s) || !ready(s) || !PyUnicode_IS_ASCII(s))
        return NOT_HASHED;
    return hash_bytes(PyUnicode_1BYTE_DATA(s), PyUnicode_GET_LENGTH(s), weights, 0, 0);
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

/* The answer of a function that declines with None: *out*; None where it was dropped (a declined
 * input) with no error set; NULL where an error is set. */
static inline PyObject *or_none(PyObject *out) {
    if (out == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return out;
}

/* Hash *h* stored at *slot*; 0 when it is NOT_HASHED: *out* dropped (the whole answer declines, see
 * or_none) and the caller's loop ends. */
static inline int put_hash(PyObject **out, uint64_t *slot, uint64_t h) {
    if (h == NOT_HASHED) {
        Py_CLEAR(*out);
        return 0;
    }
    *slot = h;
    return 1;
}

/* The second pass of a gather_*: *out* made, *m* rows of *width* bytes, zeroed; NULL with an error
 * set when there is no memory. */
static char *gather_rows(PyObject **out, Py_ssize_t m, Py_ssize_t width) {
    *out = PyBytes_FromStringAndSize(NULL, m * width);
    if (*out == NULL)
        return NULL;
    char *dst = PyBytes_AS_STRING(*out);
    memset(dst, 0, (size_t)(m * width));
    return dst;
}

/* The answer of a gather_*: (bytes, width); None when *declined*; NULL where an error is set. */
static PyObject *gathered(PyObject *out, Py_ssize_t width, int declined) {
    if (declined) {
        Py_XDECREF(out);
        Py_RETURN_NONE;
    }
    if (out == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", out, width);
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

/* Row *i* starts a new run: recorded. 1 when the ids are spread -- past a first stretch of 4,096
 * rows, runs averaging fewer than 4 rows (the caller stops: grouping them is the pure path's);
 * 0 otherwise; -1 on an error. The one place this rule is written here. */
static inline int starts_add(Runs *r, Py_ssize_t i) {
    if (runs_push(r, i) < 0)
        return -1;
    return i >= 4096 && r->n_runs > i / 4;
}

/* The run starts as an int64 bytearray, or None when *spread*. Frees *r*. */
static PyObject *starts_result(Runs *r, int spread) {
    PyObject *out = NULL;
    if (spread) {
        Py_INCREF(Py_None);
        out = Py_None;
    } else {
        out = PyByteArray_FromStringAndSize((const char *)r->ends, r->n_runs * (Py_ssize_t)sizeof(int64_t));
    }
    runs_free(r);
    return out;
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
        int spread = starts_add(r, i);
        if (spread < 0)
            return -1;
        r->spread = spread;
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
        if (!put_hash(&out, &hashes[i], h))
            break;
    }
    PyBuffer_Release(&wview);
    return or_none(out);
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

/* A score as a double: an exact float, or an exact int a double holds (rounded as float() rounds).
 * 0 for anything else -- bool and numpy scalars included: the pure path reads those. */
static inline int score_of(PyObject *s, double *out) {
    if (PyFloat_CheckExact(s)) {
        *out = PyFloat_AS_DOUBLE(s);
        return 1;
    }
    if (!PyLong_CheckExact(s))
        return 0;
    double v = PyLong_AsDouble(s);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
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
        if (!score_of(fields[2], &out_scores[i]))
            goto decline;
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
        char *dst = pass == 1 ? gather_rows(&out, m, width) : NULL;
        if (pass == 1 && dst == NULL)
            break;
        for (Py_ssize_t k = 0; k < m; k++) {
            Py_ssize_t i = index[k];
            if (i < 0 || i >= objs.n) {
                Py_CLEAR(out);
                PyBuffer_Release(&view);
                PyErr_SetString(PyExc_IndexError, "row number out of range");
                return NULL;
            }
            /* Rows anywhere in the column (the kernel's hits), fetched in stages, each in cache
             * by the next: the pointer, the object it points to, and a row's id. */
            if (k + 3 * AHEAD < m && index[k + 3 * AHEAD] >= 0 && index[k + 3 * AHEAD] < objs.n)
                PREFETCH(&objs.items[index[k + 3 * AHEAD] * objs.stride]);
            if (k + 2 * AHEAD < m && index[k + 2 * AHEAD] >= 0 && index[k + 2 * AHEAD] < objs.n)
                PREFETCH(objs.items[index[k + 2 * AHEAD] * objs.stride]);
            if (field >= 0 && k + AHEAD < m && index[k + AHEAD] >= 0 && index[k + AHEAD] < objs.n) {
                PyObject *ahead = objs.items[index[k + AHEAD] * objs.stride];
                if ((PyTuple_CheckExact(ahead) || PyList_CheckExact(ahead)) && PySequence_Fast_GET_SIZE(ahead) > field)
                    PREFETCH(PySequence_Fast_ITEMS(ahead)[field]);
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
    return gathered(out, width, 0);
decline:
    PyBuffer_Release(&view);
    return gathered(out, width, 1);
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

/* The arguments of hash_ucs4 and hash_rows, (array, row width in units of *unit* bytes, weights),
 * read -- the rows' buffer and their number, the weights' buffer -- and the output made: a
 * bytearray of one uint64 a row. 1: read (the caller releases both buffers); 0: declined (rows
 * over 512 units: the caller answers None); -1: an error (set, nothing held). */
static int hash_args(PyObject *args, Py_ssize_t unit, Py_ssize_t *width, Py_buffer *view, Py_buffer *wview,
                     Py_ssize_t *n, PyObject **out) {
    PyObject *array, *weights_obj;
    if (!PyArg_ParseTuple(args, "OnO", &array, width, &weights_obj))
        return -1;
    if (*width > 8 * MAX_WORDS)
        return 0;
    if (rows_buffer(array, *width * unit, view, n) < 0)
        return -1;
    if (weights_of(weights_obj, wview) < 0) {
        PyBuffer_Release(view);
        return -1;
    }
    *out = PyByteArray_FromStringAndSize(NULL, *n * (Py_ssize_t)sizeof(uint64_t));
    if (*out == NULL) {
        PyBuffer_Release(wview);
        PyBuffer_Release(view);
        return -1;
    }
    return 1;
}

/* One row of a numpy 'U' array, *units* native-order code units: its hash, NOT_HASHED when a unit
 * is not ASCII. Eight units a word: narrowed by SSE2's saturating packs where there is SSE2 (a unit
 * over 0x7F declines the whole column, so saturation never reaches a used hash), else straight-line
 * shifts. */
static inline uint64_t ucs4_row_hash(const unsigned char *row, Py_ssize_t units, const uint64_t *weights) {
    const uint32_t *unit = (const uint32_t *)row;
    Py_ssize_t full = units / 8;
    uint64_t h = 0;
    uint32_t seen = 0;
#if defined(__SSE2__)
    __m128i any = _mm_setzero_si128();
    for (Py_ssize_t k = 0; k < full; k++) {
        __m128i lo = _mm_loadu_si128((const __m128i *)(unit + 8 * k));
        __m128i hi = _mm_loadu_si128((const __m128i *)(unit + 8 * k + 4));
        any = _mm_or_si128(any, _mm_or_si128(lo, hi));
        __m128i narrow = _mm_packus_epi16(_mm_packs_epi32(lo, hi), _mm_setzero_si128());
        uint64_t w;
        _mm_storel_epi64((__m128i *)&w, narrow); /* the low 8 bytes: the 8 units narrowed */
        h += w * weights[k];
    }
    {
        uint32_t lanes[4];
        _mm_storeu_si128((__m128i *)lanes, any);
        seen |= lanes[0] | lanes[1] | lanes[2] | lanes[3];
    }
#else
    for (Py_ssize_t k = 0; k < full; k++) {
        const uint32_t *u = unit + 8 * k;
        seen |= u[0] | u[1] | u[2] | u[3] | u[4] | u[5] | u[6] | u[7];
        uint64_t w = (uint64_t)u[0] | (uint64_t)u[1] << 8 | (uint64_t)u[2] << 16 | (uint64_t)u[3] << 24 |
                     (uint64_t)u[4] << 32 | (uint64_t)u[5] << 40 | (uint64_t)u[6] << 48 | (uint64_t)u[7] << 56;
        h += w * weights[k];
    }
#endif
    if (full * 8 < units) {
        uint64_t w = 0;
        for (Py_ssize_t b = full * 8; b < units; b++) {
            seen |= unit[b];
            w |= (uint64_t)unit[b] << (8 * (b - full * 8));
        }
        h += w * weights[full];
    }
    return seen >= 0x80 ? NOT_HASHED : h & UINT64_C(0x7FFFFFFFFFFFFFFF);
}

/* One row of a numpy 'S' array, *itemsize* bytes (at most 512: hash_args declines wider rows): its
 * little-endian 64-bit words, NUL padding included (a zero word adds nothing), times the weights --
 * any bytes. */
static inline uint64_t bytes_row_hash(const unsigned char *row, Py_ssize_t itemsize, const uint64_t *weights) {
    return hash_bytes(row, itemsize, weights, 0, 1);
}

/* hash_ucs4 (*unit* 4) and hash_rows (*unit* 1): every row's hash by its row hash above; None when
 * one declines or the rows are too wide (hash_args). */
static PyObject *hash_fixed(PyObject *args, Py_ssize_t unit) {
    Py_ssize_t width, n;
    Py_buffer view, wview;
    PyObject *out;
    int got = hash_args(args, unit, &width, &view, &wview, &n, &out);
    if (got <= 0)
        return got < 0 ? NULL : Py_NewRef(Py_None);
    const uint64_t *weights = (const uint64_t *)wview.buf;
    uint64_t *hashes = (uint64_t *)PyByteArray_AS_STRING(out);
    const unsigned char *row = (const unsigned char *)view.buf;
    for (Py_ssize_t i = 0; i < n; i++, row += width * unit) {
        uint64_t h = unit == 4 ? ucs4_row_hash(row, width, weights) : bytes_row_hash(row, width, weights);
        if (!put_hash(&out, &hashes[i], h))
            break;
    }
    PyBuffer_Release(&wview);
    PyBuffer_Release(&view);
    return or_none(out);
}

/* hash_ucs4(array, units, weights) -> bytearray | None
 *
 * A C-contiguous numpy 'U' array of *units* native-order code units a row: the hash of every row's
 * id as hash_strings gives it for the same (ASCII) text -- the units narrowed to bytes on the fly,
 * never into a copy of the column. None when a unit is not ASCII or a row is over 512 units. */
static PyObject *hash_ucs4(PyObject *self, PyObject *args) {
    (void)self;
    return hash_fixed(args, 4);
}

/* hash_rows(array, itemsize, weights) -> bytearray | None
 *
 * A C-contiguous numpy 'S' array of *itemsize* bytes a row: _docids.hash_fixed's hash of every
 * row (bytes_row_hash). None for rows over 512 bytes. */
static PyObject *hash_rows(PyObject *self, PyObject *args) {
    (void)self;
    return hash_fixed(args, 1);
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
    for (Py_ssize_t i = 1; i < n && !spread; i++) {
        if (memcmp(row + i * itemsize, row + (i - 1) * itemsize, (size_t)itemsize) != 0) {
            spread = starts_add(&runs, i);
            if (spread < 0)
                goto fail;
        }
    }
    PyBuffer_Release(&view);
    return starts_result(&runs, spread);
fail:
    runs_free(&runs);
    PyBuffer_Release(&view);
    return NULL;
}

/* An Arrow string-view column (Polars' own layout): 16-byte views -- the length (int32), then
 * up to 12 bytes inline, or a 4-byte prefix, the data buffer's index and the offset in it -- and
 * the data buffers they point into. Every view is checked against the buffers it points to. */
typedef struct {
    const unsigned char *views;
    Py_ssize_t n;
    Py_buffer views_buf;
    Py_buffer *data;
    Py_ssize_t n_data;
} Views;

static void views_free(Views *v) {
    if (v->data != NULL) {
        for (Py_ssize_t k = 0; k < v->n_data; k++)
            if (v->data[k].obj != NULL)
                PyBuffer_Release(&v->data[k]);
        PyMem_Free(v->data);
        v->data = NULL;
    }
    if (v->views_buf.obj != NULL)
        PyBuffer_Release(&v->views_buf);
}

/* *views* (a buffer), the array's *offset* and length *n*, and a list of data buffers. */
static int views_of(PyObject *views, Py_ssize_t offset, Py_ssize_t n, PyObject *buffers, Views *v) {
    memset(v, 0, sizeof(*v));
    if (!PyList_Check(buffers)) {
        PyErr_SetString(PyExc_TypeError, "buffers must be a list");
        return -1;
    }
    if (PyObject_GetBuffer(views, &v->views_buf, PyBUF_SIMPLE) < 0)
        return -1;
    if (offset < 0 || n < 0 || (offset + n) * 16 > v->views_buf.len) {
        views_free(v);
        PyErr_SetString(PyExc_ValueError, "the views buffer is shorter than offset + n views");
        return -1;
    }
    v->views = (const unsigned char *)v->views_buf.buf + offset * 16;
    v->n = n;
    v->n_data = PyList_GET_SIZE(buffers);
    v->data = PyMem_Calloc((size_t)(v->n_data ? v->n_data : 1), sizeof(Py_buffer));
    if (v->data == NULL) {
        views_free(v);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < v->n_data; k++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(buffers, k), &v->data[k], PyBUF_SIMPLE) < 0) {
            views_free(v);
            return -1;
        }
    }
    return 0;
}

/* Row *i*'s bytes and length; NULL for a view that points outside its buffers. */
static inline const unsigned char *view_at(const Views *v, Py_ssize_t i, Py_ssize_t *len) {
    const unsigned char *view = v->views + i * 16;
    int32_t length, index, offset;
    memcpy(&length, view, 4);
    if (length < 0)
        return NULL;
    *len = length;
    if (length <= 12)
        return view + 4;
    memcpy(&index, view + 8, 4);
    memcpy(&offset, view + 12, 4);
    if (index < 0 || index >= v->n_data || offset < 0 || (Py_ssize_t)offset + length > v->data[index].len)
        return NULL;
    return (const unsigned char *)v->data[index].buf + offset;
}

/* hash_views(views, offset, n, buffers, weights) -> bytearray | None
 *
 * The hash of every id of a string-view column, as hash_strings gives it for the same text; None
 * when an id is not ASCII, holds a NUL, is over 512 bytes, or a view points outside its buffers. */
static PyObject *hash_views(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *views_obj, *buffers, *weights_obj;
    Py_ssize_t offset, n;
    if (!PyArg_ParseTuple(args, "OnnOO", &views_obj, &offset, &n, &buffers, &weights_obj))
        return NULL;
    Views v;
    if (views_of(views_obj, offset, n, buffers, &v) < 0)
        return NULL;
    Py_buffer wview;
    if (weights_of(weights_obj, &wview) < 0) {
        views_free(&v);
        return NULL;
    }
    const uint64_t *weights = (const uint64_t *)wview.buf;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint64_t));
    if (out != NULL) {
        uint64_t *hashes = (uint64_t *)PyByteArray_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t len;
            if (i + 4 * AHEAD < n) { /* as hash_offsets: the bytes of ids ahead fetched */
                const unsigned char *ahead = view_at(&v, i + 4 * AHEAD, &len);
                if (ahead != NULL)
                    PREFETCH(ahead);
            }
            const unsigned char *data = view_at(&v, i, &len);
            uint64_t h = data == NULL ? NOT_HASHED : hash_bytes(data, len, weights, 1, 0);
            if (!put_hash(&out, &hashes[i], h))
                break;
        }
    }
    PyBuffer_Release(&wview);
    views_free(&v);
    return or_none(out);
}

/* view_runs(views, offset, n, buffers) -> bytearray | None
 *
 * Where each run of equal ids of a string-view column starts (int64, the first 0); None when,
 * past the first 4,096 rows, the runs average fewer than 4 rows, or a view points outside its
 * buffers. */
static PyObject *view_runs(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *views_obj, *buffers;
    Py_ssize_t offset, n;
    if (!PyArg_ParseTuple(args, "OnnO", &views_obj, &offset, &n, &buffers))
        return NULL;
    Views v;
    if (views_of(views_obj, offset, n, buffers, &v) < 0)
        return NULL;
    Runs runs;
    if (runs_init(&runs) < 0) {
        runs_free(&runs);
        views_free(&v);
        return NULL;
    }
    int declined = 0;
    if (n > 0 && runs_push(&runs, 0) < 0)
        goto fail;
    Py_ssize_t prev_len = 0;
    const unsigned char *prev = n > 0 ? view_at(&v, 0, &prev_len) : NULL;
    if (n > 0 && prev == NULL)
        declined = 1;
    for (Py_ssize_t i = 1; i < n && !declined; i++) {
        Py_ssize_t len;
        const unsigned char *cur = view_at(&v, i, &len);
        if (cur == NULL) {
            declined = 1;
            break;
        }
        if (len != prev_len || memcmp(cur, prev, (size_t)len) != 0) {
            declined = starts_add(&runs, i);
            if (declined < 0)
                goto fail;
        }
        prev = cur;
        prev_len = len;
    }
    views_free(&v);
    return starts_result(&runs, declined);
fail:
    runs_free(&runs);
    views_free(&v);
    return NULL;
}

/* gather_views(views, offset, n, buffers, index) -> (bytes, width) | None
 *
 * gather_ascii for a string-view column: the ids at rows *index* (intp) as NUL-padded rows of the
 * widest one's width. None for a view that points outside its buffers; IndexError for a row
 * number out of range. */
static PyObject *gather_views(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *views_obj, *buffers, *index_obj;
    Py_ssize_t offset, n;
    if (!PyArg_ParseTuple(args, "OnnOO", &views_obj, &offset, &n, &buffers, &index_obj))
        return NULL;
    Views v;
    if (views_of(views_obj, offset, n, buffers, &v) < 0)
        return NULL;
    Py_buffer ix;
    if (PyObject_GetBuffer(index_obj, &ix, PyBUF_SIMPLE) < 0) {
        views_free(&v);
        return NULL;
    }
    const Py_ssize_t *index = (const Py_ssize_t *)ix.buf;
    Py_ssize_t m = ix.len / (Py_ssize_t)sizeof(Py_ssize_t), width = 1;
    PyObject *out = NULL;
    int declined = 0;
    for (int pass = 0; pass < 2 && !declined; pass++) {
        char *dst = pass == 1 ? gather_rows(&out, m, width) : NULL;
        if (pass == 1 && dst == NULL)
            break;
        for (Py_ssize_t k = 0; k < m; k++) {
            if (index[k] < 0 || index[k] >= n) {
                Py_CLEAR(out);
                PyBuffer_Release(&ix);
                views_free(&v);
                PyErr_SetString(PyExc_IndexError, "row number out of range");
                return NULL;
            }
            Py_ssize_t len;
            const unsigned char *data = view_at(&v, index[k], &len);
            if (data == NULL) {
                declined = 1;
                break;
            }
            if (pass == 0) {
                if (len > width)
                    width = len;
            } else {
                memcpy(dst + k * width, data, (size_t)len);
            }
        }
    }
    PyBuffer_Release(&ix);
    views_free(&v);
    return gathered(out, width, declined);
}

/* ---- Grouping spread query ids --------------------------------------------------------------
 *
 * When a query's rows are spread through the run, its rows must be gathered: every row gets the
 * code of its id (codes 0, 1, ... in order of first appearance), then a counting sort by code
 * gives the row order. pyarrow's hash table (and a packed sort of (code, row)) cost three to four
 * times the contiguous path; most of that is cache misses, several after one another per row. So:
 *   - the ids are read in order, one pass, whatever holds them (a Source, below);
 *   - each row's hash is computed AHEAD rows before its lookup and its slot prefetched, so the
 *     misses of many rows are waited for at once;
 *   - a slot holds the hash and where its key is, and the key (a copy of its bytes) sits in one
 *     compact arena beside its code: a lookup reads one slot and one arena entry, both in cache
 *     for the ~50 k distinct ids of a large run;
 *   - ids are compared as bytes (and their kind), never by hash alone: the codes are exact. */

/* Where the ids come from, read in order by source_next. */
enum { SOURCE_OBJECTS, SOURCE_FIXED, SOURCE_VIEWS, SOURCE_OFFSETS };

typedef struct {
    Py_buffer offsets, data;
    Py_ssize_t offset, n;
    int wide; /* 64-bit offsets (large_string) */
} Chunk;

typedef struct {
    int kind;
    Py_ssize_t n, next;
    Objects objs;
    Py_ssize_t field; /* objects: -1, the objects are the ids; else rows (tuples or lists) holding them there */
    const char *rows; /* fixed */
    Py_ssize_t itemsize;
    Py_buffer rows_buf;
    Views views;
    Chunk *chunks;
    Py_ssize_t n_chunks, chunk, in_chunk;
} Source;

static void source_free(Source *s) {
    if (s->kind == SOURCE_FIXED && s->rows_buf.obj != NULL)
        PyBuffer_Release(&s->rows_buf);
    if (s->kind == SOURCE_VIEWS)
        views_free(&s->views);
    if (s->chunks != NULL) {
        for (Py_ssize_t k = 0; k < s->n_chunks; k++) {
            if (s->chunks[k].offsets.obj != NULL)
                PyBuffer_Release(&s->chunks[k].offsets);
            if (s->chunks[k].data.obj != NULL)
                PyBuffer_Release(&s->chunks[k].data);
        }
        PyMem_Free(s->chunks);
        s->chunks = NULL;
    }
}

/* The next row's bytes, length and kind (a str's kind; 0 for bytes). 1: read; 0: declined (a
 * value that is not an exact str, an offset or view outside its buffers). */
static inline int source_next(Source *s, const char **data, Py_ssize_t *len, int *tag) {
    Py_ssize_t i = s->next++;
    switch (s->kind) {
    case SOURCE_OBJECTS: {
        PyObject *const *items = s->objs.items;
        Py_ssize_t stride = s->objs.stride, field = s->field;
        if (field < 0 && i + AHEAD < s->n)
            PREFETCH(items[(i + AHEAD) * stride]);
        if (field >= 0) { /* as rows_columns: the row two stages ahead, its id (in cache by then) one */
            if (i + 2 * AHEAD < s->n)
                PREFETCH(items[(i + 2 * AHEAD) * stride]);
            PyObject *ahead = i + AHEAD < s->n ? items[(i + AHEAD) * stride] : NULL;
            if (ahead != NULL && (PyTuple_CheckExact(ahead) || PyList_CheckExact(ahead)) &&
                PySequence_Fast_GET_SIZE(ahead) > field)
                PREFETCH(PySequence_Fast_ITEMS(ahead)[field]);
        }
        PyObject *q = items[i * stride];
        if (field >= 0) {
            if (!(PyTuple_CheckExact(q) || PyList_CheckExact(q)) || PySequence_Fast_GET_SIZE(q) <= field)
                return 0;
            q = PySequence_Fast_ITEMS(q)[field];
        }
        if (!PyUnicode_CheckExact(q) || !ready(q))
            return 0;
        *tag = (int)PyUnicode_KIND(q);
        *len = PyUnicode_GET_LENGTH(q) * *tag;
        *data = (const char *)PyUnicode_DATA(q);
        return 1;
    }
    case SOURCE_FIXED:
        *data = s->rows + i * s->itemsize;
        *len = s->itemsize;
        *tag = 0;
        return 1;
    case SOURCE_VIEWS:
        *data = (const char *)view_at(&s->views, i, len);
        *tag = 0;
        return *data != NULL;
    default: {
        while (s->in_chunk >= s->chunks[s->chunk].n) {
            s->chunk++;
            s->in_chunk = 0;
        }
        const Chunk *c = &s->chunks[s->chunk];
        Py_ssize_t j = c->offset + s->in_chunk++;
        int64_t start, end;
        if (c->wide) {
            start = ((const int64_t *)c->offsets.buf)[j];
            end = ((const int64_t *)c->offsets.buf)[j + 1];
        } else {
            start = ((const int32_t *)c->offsets.buf)[j];
            end = ((const int32_t *)c->offsets.buf)[j + 1];
        }
        if (start < 0 || end < start || end > c->data.len)
            return 0;
        *data = (const char *)c->data.buf + start;
        *len = (Py_ssize_t)(end - start);
        *tag = 0;
        return 1;
    }
    }
}

/* The last *len* (1-7) bytes of a key as a word: read whole 8-byte words when the key is at least
 * 8 bytes long (the word ending at its end, shifted), else byte by byte. No read past the key. */
static inline uint64_t tail_word(const char *data, Py_ssize_t len, Py_ssize_t k) {
    uint64_t w = 0;
    Py_ssize_t rest = len - k;
    if (len >= 8) {
        memcpy(&w, data + len - 8, 8);
        return w >> (8 * (8 - rest)); /* on a big-endian machine other bits: any fixed choice hashes alike */
    }
    for (Py_ssize_t b = 0; b < rest; b++)
        w |= (uint64_t)(unsigned char)data[k + b] << (8 * b);
    return w;
}

/* A 64-bit hash of *len* bytes and their kind (splitmix64's finaliser over 8-byte words). */
static inline uint64_t key_hash(const char *data, Py_ssize_t len, int tag) {
    uint64_t h = UINT64_C(0x9E3779B97F4A7C15) * (uint64_t)(len * 8 + tag + 1);
    Py_ssize_t k = 0;
    for (; k + 16 <= len; k += 16) { /* two words a step: two multiplications in flight */
        uint64_t a, b;
        memcpy(&a, data + k, 8);
        memcpy(&b, data + k + 8, 8);
        h = (h ^ (a * UINT64_C(0xBF58476D1CE4E5B9)) ^ (b * UINT64_C(0x94D049BB133111EB)));
        h = (h ^ (h >> 31)) * UINT64_C(0xD6E8FEB86659FD93);
    }
    if (k + 8 <= len) {
        uint64_t a;
        memcpy(&a, data + k, 8);
        h = (h ^ a) * UINT64_C(0xBF58476D1CE4E5B9);
        k += 8;
    }
    if (k < len)
        h = (h ^ tail_word(data, len, k)) * UINT64_C(0x94D049BB133111EB);
    h ^= h >> 32;
    h *= UINT64_C(0xD6E8FEB86659FD93);
    return h ^ (h >> 32);
}

/* Whether *len* bytes at *a* and *b* are equal: word by word, the last word overlapping. */
static inline int same_bytes(const char *a, const char *b, Py_ssize_t len) {
    if (len < 8)
        return memcmp(a, b, (size_t)len) == 0;
    Py_ssize_t k = 0;
    for (; k + 8 < len; k += 8) {
        uint64_t x, y;
        memcpy(&x, a + k, 8);
        memcpy(&y, b + k, 8);
        if (x != y)
            return 0;
    }
    uint64_t x, y;
    memcpy(&x, a + len - 8, 8);
    memcpy(&y, b + len - 8, 8);
    return x == y;
}

/* An arena entry: its header, then the key's bytes (padded to 8). */
typedef struct {
    uint64_t hash;
    int64_t code, len, tag;
} Entry;

typedef struct {
    uint64_t hash;
    int64_t entry; /* offset of its Entry in the arena; -1: empty */
} Slot;

typedef struct {
    Slot *slots;
    Py_ssize_t mask;
    char *arena;
    Py_ssize_t arena_len, arena_cap;
    int64_t *firsts; /* the first row of each code */
    Py_ssize_t n_codes, cap_codes;
} Groups;

static void groups_free(Groups *g) {
    PyMem_Free(g->slots);
    PyMem_Free(g->arena);
    PyMem_Free(g->firsts);
    memset(g, 0, sizeof(*g));
}

static int groups_init(Groups *g) {
    memset(g, 0, sizeof(*g));
    g->mask = 4095;
    g->slots = PyMem_Malloc(sizeof(Slot) * 4096);
    g->arena_cap = 1 << 16;
    g->arena = PyMem_Malloc((size_t)g->arena_cap);
    g->cap_codes = 1024;
    g->firsts = PyMem_Malloc(sizeof(int64_t) * 1024);
    if (g->slots == NULL || g->arena == NULL || g->firsts == NULL) {
        groups_free(g);
        PyErr_NoMemory();
        return -1;
    }
    memset(g->slots, 0xFF, sizeof(Slot) * 4096);
    return 0;
}

/* Room for one more code whose key is *len* bytes: the arena, the firsts, and the slots (kept at
 * most half full, so a probe nearly always ends at the first or second slot). */
static int groups_grow(Groups *g, Py_ssize_t len) {
    Py_ssize_t need = g->arena_len + (Py_ssize_t)sizeof(Entry) + ((len + 7) & ~(Py_ssize_t)7);
    if (need > g->arena_cap) {
        Py_ssize_t cap = 2 * g->arena_cap > need ? 2 * g->arena_cap : 2 * need;
        char *arena = PyMem_Realloc(g->arena, (size_t)cap);
        if (arena == NULL)
            return -1;
        g->arena = arena;
        g->arena_cap = cap;
    }
    if (g->n_codes == g->cap_codes) {
        int64_t *firsts = PyMem_Realloc(g->firsts, sizeof(int64_t) * (size_t)(2 * g->cap_codes));
        if (firsts == NULL)
            return -1;
        g->firsts = firsts;
        g->cap_codes *= 2;
    }
    if (2 * (g->n_codes + 1) > g->mask + 1) {
        Py_ssize_t mask = 2 * (g->mask + 1) - 1;
        Slot *slots = PyMem_Malloc(sizeof(Slot) * (size_t)(mask + 1));
        if (slots == NULL)
            return -1;
        memset(slots, 0xFF, sizeof(Slot) * (size_t)(mask + 1));
        for (Py_ssize_t k = 0; k <= g->mask; k++) {
            if (g->slots[k].entry < 0)
                continue;
            Py_ssize_t at = (Py_ssize_t)(g->slots[k].hash & (uint64_t)mask);
            while (slots[at].entry >= 0)
                at = (at + 1) & mask;
            slots[at] = g->slots[k];
        }
        PyMem_Free(g->slots);
        g->slots = slots;
        g->mask = mask;
    }
    return 0;
}

/* The code of row *row*'s key; a new code when the key is new. -1: out of memory. */
static inline int64_t groups_code(Groups *g, uint64_t h, const char *data, Py_ssize_t len, int tag, Py_ssize_t row) {
    Py_ssize_t at = (Py_ssize_t)(h & (uint64_t)g->mask);
    for (;;) {
        const Slot *slot = &g->slots[at];
        if (slot->entry < 0)
            break;
        if (slot->hash == h) {
            const Entry *e = (const Entry *)(g->arena + slot->entry);
            if (e->len == len && e->tag == tag && same_bytes((const char *)(e + 1), data, len))
                return e->code;
        }
        at = (at + 1) & g->mask;
    }
    if (groups_grow(g, len) < 0)
        return -1;
    at = (Py_ssize_t)(h & (uint64_t)g->mask); /* the slots may have been rebuilt */
    while (g->slots[at].entry >= 0)
        at = (at + 1) & g->mask;
    Entry *e = (Entry *)(g->arena + g->arena_len);
    e->hash = h;
    e->code = g->n_codes;
    e->len = len;
    e->tag = tag;
    memcpy(e + 1, data, (size_t)len);
    g->slots[at].hash = h;
    g->slots[at].entry = g->arena_len;
    g->arena_len += (Py_ssize_t)sizeof(Entry) + ((len + 7) & ~(Py_ssize_t)7);
    g->firsts[g->n_codes] = row;
    return g->n_codes++;
}

/* (codes, sizes, firsts) as bytearrays -- each row's code (uint32, codes in order of first
 * appearance), the rows of each code and its first row (int64) -- or None when the source
 * declines a row. Frees *s*. */
static PyObject *grouped(Source *s) {
    Py_ssize_t n = s->n;
    PyObject *result = NULL, *codes = NULL, *sizes = NULL, *firsts = NULL;
    Groups g;
    if (n > (Py_ssize_t)UINT32_MAX) { /* codes are 32-bit */
        source_free(s);
        Py_RETURN_NONE;
    }
    if (groups_init(&g) < 0) {
        source_free(s);
        return NULL;
    }
    codes = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint32_t));
    if (codes == NULL)
        goto done;
    uint32_t *code_of = (uint32_t *)PyByteArray_AS_STRING(codes);
    /* A ring of the next AHEAD rows: read and hashed, their slots prefetched; half way to their
     * lookup, the slot has arrived and the key's arena entry is prefetched in turn. */
    struct {
        const char *data;
        Py_ssize_t len;
        uint64_t hash;
        int tag;
    } ring[AHEAD];
    Py_ssize_t filled = n < AHEAD ? n : AHEAD;
    for (Py_ssize_t j = 0; j < filled; j++) {
        if (!source_next(s, &ring[j].data, &ring[j].len, &ring[j].tag))
            goto declined;
        ring[j].hash = key_hash(ring[j].data, ring[j].len, ring[j].tag);
        PREFETCH(&g.slots[ring[j].hash & (uint64_t)g.mask]);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t r = i % AHEAD;
        int64_t c = groups_code(&g, ring[r].hash, ring[r].data, ring[r].len, ring[r].tag, i);
        if (c < 0) {
            PyErr_NoMemory();
            goto done;
        }
        code_of[i] = (uint32_t)c;
        if (i + AHEAD / 2 < n) {
            Py_ssize_t j = (i + AHEAD / 2) % AHEAD;
            int64_t entry = g.slots[ring[j].hash & (uint64_t)g.mask].entry;
            if (entry >= 0) {
                PREFETCH(g.arena + entry);
                if (ring[j].len > 32) /* the entry's header and key span a second cache line */
                    PREFETCH(g.arena + entry + 64);
            }
        }
        if (i + AHEAD < n) {
            if (!source_next(s, &ring[r].data, &ring[r].len, &ring[r].tag))
                goto declined;
            ring[r].hash = key_hash(ring[r].data, ring[r].len, ring[r].tag);
            PREFETCH(&g.slots[ring[r].hash & (uint64_t)g.mask]);
        }
    }
    Py_ssize_t k = g.n_codes;
    sizes = PyByteArray_FromStringAndSize(NULL, k * (Py_ssize_t)sizeof(int64_t));
    firsts = PyByteArray_FromStringAndSize((const char *)g.firsts, k * (Py_ssize_t)sizeof(int64_t));
    if (sizes == NULL || firsts == NULL)
        goto done;
    int64_t *size_of = (int64_t *)PyByteArray_AS_STRING(sizes);
    memset(size_of, 0, (size_t)k * sizeof(int64_t));
    for (Py_ssize_t i = 0; i < n; i++)
        size_of[code_of[i]]++;
    result = Py_BuildValue("(OOO)", codes, sizes, firsts);
    goto done;
declined:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(codes);
    Py_XDECREF(sizes);
    Py_XDECREF(firsts);
    groups_free(&g);
    source_free(s);
    return result;
}

/* grouped_rows(codes, sizes, columns, outputs) -> None
 *
 * The rows in group order (sorted by code, stable: a group's rows keep their order), from a
 * group_* function's codes and sizes, written to *outputs*: the row numbers (int64), then each of
 * *columns* (a list of buffers of one 8-byte item a row) in that order -- each output a writable
 * buffer of one 8-byte item a row.
 *
 * With few groups (at most 2**SCATTER_BITS) one scatter puts each row straight at its group's next
 * place (a counting sort): the groups' next cache lines stay in cache. With tens of thousands of
 * groups that scatter is a cache and TLB miss a write -- 20, 35 and 75 ns a row here at 10 k, 50 k
 * and 200 k groups -- so the sort takes two passes of a radix sort, most significant digit first:
 *   1. each row goes, with its code, to its part of the outputs -- the rows whose codes share the
 *      high bits (at most 2**SCATTER_BITS parts, so again a few hundred places written to);
 *   2. each part, a few hundred groups and some hundred kilobytes, is copied to a scratch buffer
 *      (one, reused: in cache, no fresh memory) and scattered back to its groups' places.
 * Both passes keep rows in order, so the sort is stable; it writes nothing but the outputs and
 * the one scratch buffer, and costs a few ns a row whatever the number of groups. */
#define MAX_COLUMNS 4
#define SCATTER_BITS 9

typedef struct {
    Py_ssize_t n, m;                 /* rows, columns */
    const uint32_t *code_of;
    const uint64_t *src[MAX_COLUMNS];
    uint64_t *dest[MAX_COLUMNS + 1]; /* row numbers, then the columns */
} Sorting;

/* Each of rows [begin, end) -- row i's key (code << 32 | row number) and columns read by *read* --
 * written at place[key's code >> shift]++; the row number alone when *shift* is 0 (the last pass),
 * else the whole key, for the next pass. */
#define SCATTER(begin, end, KEY, COLUMN, shift)                                                      \
    for (Py_ssize_t i = (begin); i < (end); i++) {                                                   \
        uint64_t key = (KEY);                                                                        \
        int64_t to = place[(key >> 32) >> (shift)]++;                                                \
        t->dest[0][to] = (shift) ? key : (key & UINT32_MAX);                                         \
        for (Py_ssize_t j = 0; j < t->m; j++)                                                        \
            t->dest[j + 1][to] = (COLUMN);                                                           \
    }

/* The first place of each code's rows (its final place), and -- with *shift* -- of each part's
 * (the codes sharing their bits above *shift*) in *part*; the largest part's rows. */
static int64_t places(const int64_t *size_of, Py_ssize_t k, int shift, int64_t *place, int64_t *part) {
    int64_t at = 0, largest = 0;
    for (Py_ssize_t c = 0; c < k; c++) {
        place[c] = at;
        at += size_of[c];
    }
    if (shift) {
        Py_ssize_t parts = ((k - 1) >> shift) + 1;
        for (Py_ssize_t p = 0; p <= parts; p++) {
            Py_ssize_t first = (Py_ssize_t)p << shift;
            part[p] = first < k ? place[first] : at;
        }
        for (Py_ssize_t p = 0; p < parts; p++)
            if (part[p + 1] - part[p] > largest)
                largest = part[p + 1] - part[p];
    }
    return largest;
}

static int radix_sort(const Sorting *t, const int64_t *size_of, Py_ssize_t k) {
    int bits = 1;
    while (bits < 32 && ((uint64_t)1 << bits) < (uint64_t)k)
        bits++;
    int64_t *place = PyMem_Malloc(sizeof(int64_t) * (size_t)(k ? k : 1));
    if (place == NULL)
        goto nomem;
    if (bits <= SCATTER_BITS) { /* few groups: one scatter */
        places(size_of, k, 0, place, NULL);
        SCATTER(0, t->n, (uint64_t)t->code_of[i] << 32 | (uint64_t)i, t->src[j][i], 0)
        PyMem_Free(place);
        return 0;
    }
    int shift = bits / 2; /* the part: the code's high bits; then its low bits within the part */
    if (bits - shift > SCATTER_BITS)
        shift = bits - SCATTER_BITS;
    Py_ssize_t parts = ((k - 1) >> shift) + 1;
    int64_t *part = PyMem_Malloc(sizeof(int64_t) * (size_t)(parts + 1));
    if (part == NULL) {
        PyMem_Free(place);
        goto nomem;
    }
    int64_t largest = places(size_of, k, shift, place, part);
    /* Pass 1: each row to its part's next place. */
    int64_t *next = PyMem_Malloc(sizeof(int64_t) * (size_t)parts);
    uint64_t *scratch = PyMem_Malloc(sizeof(uint64_t) * (size_t)(largest * (t->m + 1) + 1));
    if (next == NULL || scratch == NULL) {
        PyMem_Free(next);
        PyMem_Free(scratch);
        PyMem_Free(part);
        PyMem_Free(place);
        goto nomem;
    }
    memcpy(next, part, sizeof(int64_t) * (size_t)parts);
    {
        int64_t *place_saved = place;
        place = next;
        SCATTER(0, t->n, (uint64_t)t->code_of[i] << 32 | (uint64_t)i, t->src[j][i], shift)
        place = place_saved;
    }
    /* Pass 2: each part from the scratch buffer to its groups' places. */
    for (Py_ssize_t p = 0; p < parts; p++) {
        Py_ssize_t begin = part[p], len = part[p + 1] - part[p];
        for (Py_ssize_t j = 0; j <= t->m; j++)
            memcpy(scratch + j * len, t->dest[j] + begin, sizeof(uint64_t) * (size_t)len);
        SCATTER(0, len, scratch[i], scratch[(j + 1) * len + i], 0)
    }
    PyMem_Free(next);
    PyMem_Free(scratch);
    PyMem_Free(part);
    PyMem_Free(place);
    return 0;
nomem:
    PyErr_NoMemory();
    return -1;
}

static int output_buffer(PyObject *obj, Py_ssize_t n, Py_buffer *view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE) < 0)
        return -1;
    if (view->len != n * 8) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "an output must hold one 8-byte item per row");
        return -1;
    }
    return 0;
}

static PyObject *grouped_rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *codes_obj, *sizes_obj, *columns, *outputs;
    if (!PyArg_ParseTuple(args, "OOO!O!", &codes_obj, &sizes_obj, &PyList_Type, &columns, &PyList_Type, &outputs))
        return NULL;
    Py_ssize_t m = PyList_GET_SIZE(columns);
    if (m > MAX_COLUMNS || PyList_GET_SIZE(outputs) != m + 1) {
        PyErr_SetString(PyExc_ValueError, "at most 4 columns, and one output more than columns");
        return NULL;
    }
    Py_buffer codes, sizes, values[MAX_COLUMNS], outs[MAX_COLUMNS + 1];
    Py_ssize_t got = 0, made = 0;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(codes_obj, &codes, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(sizes_obj, &sizes, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&codes);
        return NULL;
    }
    Py_ssize_t n = codes.len / (Py_ssize_t)sizeof(uint32_t), k = sizes.len / (Py_ssize_t)sizeof(int64_t);
    const uint32_t *code_of = (const uint32_t *)codes.buf;
    const int64_t *size_of = (const int64_t *)sizes.buf;
    for (; got < m; got++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(columns, got), &values[got], PyBUF_SIMPLE) < 0)
            goto done;
        if (values[got].len != n * 8) {
            got++;
            PyErr_SetString(PyExc_ValueError, "a column must hold one 8-byte item per row");
            goto done;
        }
    }
    for (; made <= m; made++)
        if (output_buffer(PyList_GET_ITEM(outputs, made), n, &outs[made]) < 0)
            goto done;
    int64_t at = 0;
    for (Py_ssize_t c = 0; c < k; c++) {
        if (size_of[c] < 0)
            break;
        at += size_of[c];
    }
    if (at != n) {
        PyErr_SetString(PyExc_ValueError, "sizes do not add up to the rows of codes");
        goto done;
    }
    if (n > (Py_ssize_t)UINT32_MAX) { /* row numbers travel as 32 bits */
        PyErr_SetString(PyExc_ValueError, "more than 2**32 - 1 rows");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (code_of[i] >= (uint64_t)k) {
            PyErr_SetString(PyExc_ValueError, "a code is not below the number of sizes");
            goto done;
        }
    }
    Sorting t = {.n = n, .m = m, .code_of = code_of};
    for (Py_ssize_t j = 0; j < m; j++)
        t.src[j] = (const uint64_t *)values[j].buf;
    for (Py_ssize_t j = 0; j <= m; j++)
        t.dest[j] = (uint64_t *)outs[j].buf;
    if (radix_sort(&t, size_of, k) == 0)
        result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t j = 0; j < got; j++)
        PyBuffer_Release(&values[j]);
    for (Py_ssize_t j = 0; j < made; j++)
        PyBuffer_Release(&outs[j]);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&codes);
    return result;
}

/* group_strings(values, field=-1) -> (codes, sizes, firsts) | None
 *
 * Python strings (a list, a tuple, a 1-d numpy object array) coded by id -- or, with *field* >= 0,
 * the strings at that position of rows (tuples or lists: a run's (qid, docid, score) rows, read in
 * place); None when a value is not an exact str, or a row not a tuple or list that long. */
static PyObject *group_strings(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values;
    Source s;
    memset(&s, 0, sizeof(s));
    s.field = -1;
    if (!PyArg_ParseTuple(args, "O|n", &values, &s.field))
        return NULL;
    s.kind = SOURCE_OBJECTS;
    if (s.field < -1) {
        PyErr_SetString(PyExc_ValueError, "field must be >= -1");
        return NULL;
    }
    if (!objects_of(values, &s.objs))
        Py_RETURN_NONE;
    s.n = s.objs.n;
    return grouped(&s);
}

/* group_fixed(array, itemsize) -> (codes, sizes, firsts)
 *
 * The rows of a C-contiguous fixed-width array (numpy 'U' or 'S') coded, compared as raw bytes. */
static PyObject *group_fixed(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *array;
    Source s;
    memset(&s, 0, sizeof(s));
    if (!PyArg_ParseTuple(args, "On", &array, &s.itemsize))
        return NULL;
    if (rows_buffer(array, s.itemsize, &s.rows_buf, &s.n) < 0)
        return NULL;
    s.kind = SOURCE_FIXED;
    s.rows = (const char *)s.rows_buf.buf;
    return grouped(&s);
}

/* group_views(views, offset, n, buffers) -> (codes, sizes, firsts) | None
 *
 * A string-view column's ids coded; None when a view points outside its buffers. */
static PyObject *group_views(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *views_obj, *buffers;
    Py_ssize_t offset, n;
    if (!PyArg_ParseTuple(args, "OnnO", &views_obj, &offset, &n, &buffers))
        return NULL;
    Source s;
    memset(&s, 0, sizeof(s));
    if (views_of(views_obj, offset, n, buffers, &s.views) < 0)
        return NULL;
    s.kind = SOURCE_VIEWS;
    s.n = n;
    return grouped(&s);
}

/* The ids of Arrow string chunks -- (offsets buffer, data buffer, offset, length, wide) each, wide
 * for 64-bit offsets -- as one Source; -1 with an error set (*s* freed) for a bad argument. */
static int offsets_source(PyObject *chunks, Source *s) {
    memset(s, 0, sizeof(*s));
    if (!PyList_Check(chunks)) {
        PyErr_SetString(PyExc_TypeError, "chunks must be a list");
        return -1;
    }
    s->kind = SOURCE_OFFSETS;
    s->n_chunks = PyList_GET_SIZE(chunks);
    s->chunks = PyMem_Calloc((size_t)(s->n_chunks ? s->n_chunks : 1), sizeof(Chunk));
    if (s->chunks == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < s->n_chunks; k++) {
        Chunk *c = &s->chunks[k];
        PyObject *offsets, *data;
        int wide;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(chunks, k), "OOnnp", &offsets, &data, &c->offset, &c->n, &wide) ||
            PyObject_GetBuffer(offsets, &c->offsets, PyBUF_SIMPLE) < 0 ||
            PyObject_GetBuffer(data, &c->data, PyBUF_SIMPLE) < 0) {
            source_free(s);
            return -1;
        }
        c->wide = wide;
        Py_ssize_t width = wide ? 8 : 4;
        if (c->offset < 0 || c->n < 0 || (c->offset + c->n + 1) * width > c->offsets.len) {
            source_free(s);
            PyErr_SetString(PyExc_ValueError, "an offsets buffer is shorter than offset + length + 1 offsets");
            return -1;
        }
        s->n += c->n;
    }
    return 0;
}

/* group_offsets(chunks) -> (codes, sizes, firsts) | None
 *
 * The ids of Arrow string chunks (as offsets_source reads them) coded as one column; None when an
 * offset points outside its data. */
static PyObject *group_offsets(PyObject *self, PyObject *chunks) {
    (void)self;
    Source s;
    if (offsets_source(chunks, &s) < 0)
        return NULL;
    return grouped(&s);
}

/* hash_offsets(chunks, weights) -> bytearray | None
 *
 * The hash of every id of Arrow string chunks (as offsets_source reads them), as hash_strings
 * gives it for the same text, read where Arrow holds them: no fixed-width copy of the column.
 * None when an id is not ASCII, holds a NUL or is over 512 bytes, or an offset points outside its
 * data. */
static PyObject *hash_offsets(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *chunks, *weights_obj;
    if (!PyArg_ParseTuple(args, "OO", &chunks, &weights_obj))
        return NULL;
    Py_buffer wview;
    if (weights_of(weights_obj, &wview) < 0)
        return NULL;
    Source s;
    if (offsets_source(chunks, &s) < 0) {
        PyBuffer_Release(&wview);
        return NULL;
    }
    const uint64_t *weights = (const uint64_t *)wview.buf;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, s.n * (Py_ssize_t)sizeof(uint64_t));
    if (out != NULL) {
        /* Chunk by chunk, each with its own offsets' width (not source_next's row by row checks:
         * three times as fast here). */
        uint64_t *hash = (uint64_t *)PyByteArray_AS_STRING(out);
        for (Py_ssize_t k = 0; k < s.n_chunks && out != NULL; k++) {
            /* The chunk's fields in locals: a store through *hash* could otherwise alias them, and
             * they would be read again for every row. */
            const unsigned char *base = (const unsigned char *)s.chunks[k].data.buf;
            const void *offsets = s.chunks[k].offsets.buf;
            const int64_t size = s.chunks[k].data.len;
            const int wide = s.chunks[k].wide;
            const Py_ssize_t first = s.chunks[k].offset, last = first + s.chunks[k].n;
            for (Py_ssize_t j = first; j < last; j++) {
                /* The bytes of the ids 64 rows ahead fetched: without it the core keeps only a few
                 * ids' misses in flight, and hashing took three times as long as hash_rows' */
                if (j + 4 * AHEAD < last)
                    PREFETCH(base + (wide ? ((const int64_t *)offsets)[j + 4 * AHEAD]
                                          : ((const int32_t *)offsets)[j + 4 * AHEAD]));
                int64_t start = wide ? ((const int64_t *)offsets)[j] : ((const int32_t *)offsets)[j];
                int64_t end = wide ? ((const int64_t *)offsets)[j + 1] : ((const int32_t *)offsets)[j + 1];
                uint64_t h = start < 0 || end < start || end > size
                                 ? NOT_HASHED
                                 : hash_bytes(base + start, (Py_ssize_t)(end - start), weights, 1, 0);
                if (!put_hash(&out, hash++, h))
                    break;
            }
        }
    }
    source_free(&s);
    PyBuffer_Release(&wview);
    return or_none(out);
}

/* The bytes of row *row* of Arrow string chunks (*s*, from offsets_source; *firsts*: each chunk's
 * first row), or NULL when an offset points outside its data. */
static const char *offsets_at(const Source *s, const Py_ssize_t *firsts, Py_ssize_t row, Py_ssize_t *len) {
    Py_ssize_t lo = 0, hi = s->n_chunks - 1;
    while (lo < hi) { /* the last chunk starting at or before the row */
        Py_ssize_t mid = (lo + hi + 1) / 2;
        if (firsts[mid] <= row)
            lo = mid;
        else
            hi = mid - 1;
    }
    const Chunk *c = &s->chunks[lo];
    Py_ssize_t j = c->offset + (row - firsts[lo]);
    int64_t start = c->wide ? ((const int64_t *)c->offsets.buf)[j] : ((const int32_t *)c->offsets.buf)[j];
    int64_t end = c->wide ? ((const int64_t *)c->offsets.buf)[j + 1] : ((const int32_t *)c->offsets.buf)[j + 1];
    if (start < 0 || end < start || end > c->data.len)
        return NULL;
    *len = (Py_ssize_t)(end - start);
    return (const char *)c->data.buf + start;
}

/* gather_offsets(chunks, index) -> (bytes, width) | None
 *
 * gather_ascii for Arrow string chunks (as offsets_source reads them): the ids at rows *index*
 * (intp, rows of the chunks taken as one column) as NUL-padded rows of the widest one's width.
 * Arrow's own take would first join a ChunkedArray's chunks: a copy of the column per call. None
 * for an offset outside its data; IndexError for a row number out of range. */
static PyObject *gather_offsets(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *chunks, *index_obj;
    if (!PyArg_ParseTuple(args, "OO", &chunks, &index_obj))
        return NULL;
    Source s;
    if (offsets_source(chunks, &s) < 0)
        return NULL;
    Py_buffer ix;
    Py_ssize_t *firsts = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(s.n_chunks ? s.n_chunks : 1));
    if (firsts == NULL || PyObject_GetBuffer(index_obj, &ix, PyBUF_SIMPLE) < 0) {
        if (firsts == NULL)
            PyErr_NoMemory();
        PyMem_Free(firsts);
        source_free(&s);
        return NULL;
    }
    for (Py_ssize_t k = 0, at = 0; k < s.n_chunks; at += s.chunks[k].n, k++)
        firsts[k] = at;
    const Py_ssize_t *index = (const Py_ssize_t *)ix.buf;
    Py_ssize_t m = ix.len / (Py_ssize_t)sizeof(Py_ssize_t), width = 1;
    PyObject *out = NULL;
    int declined = 0;
    for (int pass = 0; pass < 2; pass++) {
        char *dst = pass == 1 ? gather_rows(&out, m, width) : NULL;
        if (pass == 1 && dst == NULL)
            goto done;
        for (Py_ssize_t k = 0; k < m; k++) {
            if (index[k] < 0 || index[k] >= s.n) {
                Py_CLEAR(out);
                PyErr_SetString(PyExc_IndexError, "row number out of range");
                goto done;
            }
            Py_ssize_t len;
            const char *data = offsets_at(&s, firsts, index[k], &len);
            if (data == NULL) {
                declined = 1;
                goto done;
            }
            if (pass == 0 && len > width)
                width = len;
            else if (pass == 1)
                memcpy(dst + k * width, data, (size_t)len);
        }
    }
done:
    PyBuffer_Release(&ix);
    PyMem_Free(firsts);
    source_free(&s);
    return gathered(out, width, declined);
}

/* dict_scores(dicts, n) -> bytearray | None
 *
 * The values of a run of nested dicts ({docid: score} each, a list of them) as n doubles, dict
 * after dict, each in its own order: what np.fromiter over their values gives. A run built from
 * spread rows has its score objects spread through the heap in row order, so reading them dict by
 * dict is a cache miss an item: each value is fetched AHEAD items before it is read (across dicts)
 * instead. None when a mapping is not an exact dict, a value is not an exact float or int (bool and
 * numpy scalars included: the pure path reads those), or the dicts do not hold n items. */
static PyObject *dict_scores(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dicts;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &dicts, &n))
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "n must be >= 0");
        return NULL;
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(double));
    if (out == NULL)
        return NULL;
    double *scores = (double *)PyByteArray_AS_STRING(out);
    PyObject *ring[AHEAD];
    Py_ssize_t pushed = 0, done = 0, m = PyList_GET_SIZE(dicts);
    for (Py_ssize_t j = 0; j <= m; j++) {
        PyObject *d = j < m ? PyList_GET_ITEM(dicts, j) : NULL;
        if (j + 1 < m)
            PREFETCH(PyList_GET_ITEM(dicts, j + 1));
        if (d != NULL && !PyDict_CheckExact(d))
            goto decline;
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        /* The last dict done, the ring is drained by pushing nothing. */
        while (d != NULL ? PyDict_Next(d, &pos, &key, &value) : done < pushed) {
            if (d != NULL) {
                if (pushed == n)
                    goto decline; /* more items than n */
                PREFETCH(value);
                PyObject *old = pushed >= AHEAD ? ring[pushed % AHEAD] : NULL;
                ring[pushed % AHEAD] = value;
                pushed++;
                if (old == NULL)
                    continue;
                value = old;
            } else {
                value = ring[done % AHEAD];
            }
            if (!score_of(value, &scores[done]))
                goto decline;
            done++;
        }
    }
    if (done != n)
        goto decline;
    return out;
decline:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

/* empty(nbytes) -> bytearray
 *
 * *nbytes* of uninitialised memory from the C allocator: _fast.empty's arrays, which the caller
 * fills whole. (numpy asks the kernel for huge pages for every array of 4 MiB or more; this
 * memory is not advised -- see _fast.empty.) */
static PyObject *empty(PyObject *self, PyObject *arg) {
    (void)self;
    Py_ssize_t nbytes = PyLong_AsSsize_t(arg);
    if (nbytes == -1 && PyErr_Occurred())
        return NULL;
    if (nbytes < 0) {
        PyErr_SetString(PyExc_ValueError, "nbytes must be >= 0");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, nbytes);
}

static PyMethodDef methods[] = {
    {"empty", empty, METH_O, "empty(nbytes) -> bytearray: uninitialised memory (_fast.empty)."},
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
    {"hash_rows", hash_rows, METH_VARARGS,
     "hash_rows(array, itemsize, weights) -> bytearray | None: the doc-id hash of every row of a numpy S array."},
    {"fixed_runs", fixed_runs, METH_VARARGS,
     "fixed_runs(array, itemsize) -> bytearray | None: where each run of equal rows of a fixed-width array starts."},
    {"hash_views", hash_views, METH_VARARGS,
     "hash_views(views, offset, n, buffers, weights) -> bytearray | None: the doc-id hash of a string-view column."},
    {"view_runs", view_runs, METH_VARARGS,
     "view_runs(views, offset, n, buffers) -> bytearray | None: where each run of equal ids starts."},
    {"gather_views", gather_views, METH_VARARGS,
     "gather_views(views, offset, n, buffers, index) -> (bytes, width) | None: ids at rows index."},
    {"group_strings", group_strings, METH_VARARGS,
     "group_strings(values, field=-1) -> (codes, sizes, firsts) | None: str ids (or rows' ids) coded, in order "
     "of first appearance."},
    {"grouped_rows", grouped_rows, METH_VARARGS,
     "grouped_rows(codes, sizes, columns, outputs) -> None: the row numbers, then 8-byte columns, in group order."},
    {"group_fixed", group_fixed, METH_VARARGS,
     "group_fixed(array, itemsize) -> (codes, sizes, firsts): the rows of a fixed-width array coded."},
    {"group_views", group_views, METH_VARARGS,
     "group_views(views, offset, n, buffers) -> (codes, sizes, firsts) | None: a string-view column coded."},
    {"group_offsets", group_offsets, METH_O,
     "group_offsets(chunks) -> (codes, sizes, firsts) | None: Arrow string chunks coded as one column."},
    {"hash_offsets", hash_offsets, METH_VARARGS,
     "hash_offsets(chunks, weights) -> bytearray | None: the doc-id hash of every id of Arrow string chunks."},
    {"gather_offsets", gather_offsets, METH_VARARGS,
     "gather_offsets(chunks, index) -> (bytes, width) | None: the ids at rows index of Arrow string chunks."},
    {"dict_scores", dict_scores, METH_VARARGS,
     "dict_scores(dicts, n) -> bytearray | None: the values of a list of dicts as n doubles."},
    {"rank_columns", rank_columns, METH_VARARGS,
     "rank_columns(offsets, hashes, scores, first, count, order, entry_hash) -> tuple: a run of columns ranked "
     "query by query (_kernel.c)."},
    {"trec_columns", trec_columns, METH_VARARGS,
     "trec_columns(data, powers) -> (qids, qwidth, docids, dwidth, scores, rows) | None: a TREC run file's "
     "columns (_runfile.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Optional C speedups of ragaudit.metrics' input reading.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
