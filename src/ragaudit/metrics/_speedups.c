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
 * like a NUL or an id over 512 bytes, gives NOT_HASHED). */
static inline uint64_t hash_bytes(const unsigned char *data, Py_ssize_t len, const uint64_t *weights, int check) {
    if ((len + 7) / 8 > MAX_WORDS)
        return NOT_HASHED;
    if (len && memchr(data, 0, (size_t)len) != NULL)
        return NOT_HASHED; /* a NUL: fixed-width bytes could not keep "a\0" apart from "a" */
    uint64_t h = 0, high = 0;
    Py_ssize_t k = 0;
    for (; (k + 1) * 8 <= len; k++) {
        uint64_t w;
        memcpy(&w, data + 8 * k, 8);
        high |= w;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        h += w * weights[k];
    }
    if (k * 8 < len) {
        uint64_t w = 0;
        for (Py_ssize_t b = k * 8; b < len; b++)
            w |= (uint64_t)data[b] << (8 * (b - k * 8));
        high |= w;
        h += w * weights[k];
    }
    if (check && (high & UINT64_C(0x8080808080808080)) != 0)
        return NOT_HASHED;
    return h & UINT64_C(0x7FFFFFFFFFFFFFFF);
}

static inline uint64_t hash_ascii(PyObject *s, const uint64_t *weights) {
    if (!PyUnicode_CheckExact(s) || !ready(s) || !PyUnicode_IS_ASCII(s))
        return NOT_HASHED;
    return hash_bytes(PyUnicode_1BYTE_DATA(s), PyUnicode_GET_LENGTH(s), weights, 0);
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
            /* Eight units a word: narrowed by SSE2's saturating packs where there is SSE2 (a unit
             * over 0x7F declines the whole column, so saturation never reaches a used hash),
             * else straight-line shifts. */
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
                             (uint64_t)u[4] << 32 | (uint64_t)u[5] << 40 | (uint64_t)u[6] << 48 |
                             (uint64_t)u[7] << 56;
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
            const unsigned char *data = view_at(&v, i, &len);
            uint64_t h = data == NULL ? NOT_HASHED : hash_bytes(data, len, weights, 1);
            if (h == NOT_HASHED) {
                Py_CLEAR(out);
                break;
            }
            hashes[i] = h;
        }
    }
    PyBuffer_Release(&wview);
    views_free(&v);
    if (out == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return out;
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
        char *dst = NULL;
        if (pass == 1) {
            out = PyBytes_FromStringAndSize(NULL, m * width);
            if (out == NULL)
                break;
            dst = PyBytes_AS_STRING(out);
            memset(dst, 0, (size_t)(m * width));
        }
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
    if (declined) {
        Py_XDECREF(out);
        Py_RETURN_NONE;
    }
    if (out == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", out, width);
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
    {"hash_views", hash_views, METH_VARARGS,
     "hash_views(views, offset, n, buffers, weights) -> bytearray | None: the doc-id hash of a string-view column."},
    {"view_runs", view_runs, METH_VARARGS,
     "view_runs(views, offset, n, buffers) -> bytearray | None: where each run of equal ids starts."},
    {"gather_views", gather_views, METH_VARARGS,
     "gather_views(views, offset, n, buffers, index) -> (bytes, width) | None: ids at rows index."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Optional C speedups of ragaudit.metrics' input reading.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
