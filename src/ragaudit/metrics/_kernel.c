/* The ranking kernel of a run of columns, query by query (part of the optional C speedups; the pure
 * path is _kernel.py's blocks, which give the same numbers).
 *
 * For each query -- its rows contiguous in the query-grouped run, their doc-id hashes and scores --
 * rank_columns finds, in one visit of those rows:
 *   - the rows whose hashes are equal (candidate duplicates: the caller compares their ids);
 *   - the rows whose hash is a labelled doc's (candidate hits: the caller compares the ids, so a
 *     hash is only ever a shortcut);
 *   - for each candidate hit, how many of the query's rows score higher, and which rows score the
 *     same (their doc ids decide the order; the caller compares them, as trec_eval does, by id
 *     descending).
 * The pure path lays queries out in padded blocks and sorts every block row's hash keys; here a
 * query's hashes go into a small open-addressing table (twice its rows, in L1 for a query of a
 * hundred rows), each labelled doc is one probe, and the ranks are a count over the query's
 * scores, which are in cache by then. No temporary the size of the run is made.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include "_speedups.h"

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((const void *)(p))
#else
#define PREFETCH(p) ((void)0)
#endif

/* A growing column of int64, kept as a bytearray (the caller reads it with np.frombuffer). */
typedef struct {
    int64_t *data;
    Py_ssize_t n, cap;
} Column;

static int column_push(Column *c, int64_t value) {
    if (c->n == c->cap) {
        Py_ssize_t cap = c->cap ? 2 * c->cap : 1024;
        int64_t *grown = PyMem_Realloc(c->data, sizeof(int64_t) * (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->data = grown;
        c->cap = cap;
    }
    c->data[c->n++] = value;
    return 0;
}

/* The table slot of a doc-id hash: the high bits of its product with an odd constant, which
 * depend on every bit of the hash (its low bits alone would not: a weighted sum's low bits ignore
 * the high bytes of each word). */
static inline Py_ssize_t slot_of(uint64_t hash, int bits) {
    return (Py_ssize_t)((hash * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - bits));
}

enum { HIT_Q, HIT_ROW, HIT_ENTRY, GREATER, TIE_HIT, TIE_ROW, DUP_A, DUP_B, OUTPUTS };

typedef struct {
    const int64_t *offsets;
    const uint64_t *hashes;
    const char *scores; /* NULL: rank-only */
    Py_ssize_t itemsize; /* 4 (float32, as pytrec_eval compares) or 8 */
    const int64_t *first, *count, *order;
    const uint64_t *entry_hash;
    Py_ssize_t queries, entries;
    int32_t *table;
    int bits;
    Column out[OUTPUTS];
} Ranking;

/* How many of *n* scores are above *own*, and how many equal it: one branch-free loop per type,
 * which the compiler vectorises (a hundred scores are a few dozen instructions). */
#define COUNT_AROUND(type)                                                                                  \
    static inline int64_t above_##type(const type *s, int64_t n, type own, int64_t *equal) {           \
        int64_t above = 0, same = 0;                                                                     \
        for (int64_t j = 0; j < n; j++) {                                                                \
            above += s[j] > own;                                                                         \
            same += s[j] == own;                                                                         \
        }                                                                                                \
        *equal = same;                                                                                   \
        return above;                                                                                    \
    }
COUNT_AROUND(float)
COUNT_AROUND(double)

/* Room in the table for a query of *depth* rows: at most a quarter full, so that nearly every
 * probe ends at its first slot (a branch the core then predicts). -1 when out of memory. */
static int table_fit(Ranking *k, int64_t depth) {
    int bits = 4;
    while (((int64_t)1 << bits) < 4 * depth)
        bits++;
    if (bits > k->bits) {
        int32_t *grown = PyMem_Realloc(k->table, sizeof(int32_t) * ((size_t)1 << bits));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        k->table = grown;
        k->bits = bits;
    }
    return 0;
}

/* A candidate hit: row *row* (of query *q*, whose rows start at *start*) for entry *e*, with its
 * count of higher scores and its tied rows. */
static int hit(Ranking *k, Py_ssize_t q, int64_t start, int64_t depth, int64_t row, int64_t e) {
    Py_ssize_t index = k->out[HIT_Q].n;
    if (column_push(&k->out[HIT_Q], q) < 0 || column_push(&k->out[HIT_ROW], row) < 0 ||
        column_push(&k->out[HIT_ENTRY], e) < 0)
        return -1;
    if (k->scores == NULL) /* rank-only: rows come best first */
        return column_push(&k->out[GREATER], row - start);
    int64_t greater, equal;
    if (k->itemsize == 4) {
        const float *s = (const float *)k->scores + start;
        greater = above_float(s, depth, s[row - start], &equal);
    } else {
        const double *s = (const double *)k->scores + start;
        greater = above_double(s, depth, s[row - start], &equal);
    }
    for (int64_t j = start; equal > 1 && j < start + depth; j++) { /* tied with another row: list them */
        int same = k->itemsize == 4 ? ((const float *)k->scores)[j] == ((const float *)k->scores)[row]
                                    : ((const double *)k->scores)[j] == ((const double *)k->scores)[row];
        if (same && j != row && (column_push(&k->out[TIE_HIT], index) < 0 || column_push(&k->out[TIE_ROW], j) < 0))
            return -1;
    }
    return column_push(&k->out[GREATER], greater);
}

static int rank_query(Ranking *k, Py_ssize_t q) {
    int64_t start = k->offsets[q], depth = k->offsets[q + 1] - start;
    if (depth <= 0)
        return 0;
    if (q + 1 < k->queries) { /* the next query's hashes and scores, on their way while this one is ranked */
        int64_t next = k->offsets[q + 1], rows = k->offsets[q + 2] - next;
        for (int64_t j = 0; j < rows; j += 8) {
            PREFETCH(k->hashes + next + j);
            if (k->scores != NULL)
                PREFETCH(k->scores + (next + j) * k->itemsize);
        }
    }
    if (table_fit(k, depth) < 0)
        return -1;
    int bits = k->bits;
    Py_ssize_t mask = ((Py_ssize_t)1 << bits) - 1;
    memset(k->table, 0xFF, sizeof(int32_t) * ((size_t)mask + 1));
    for (int64_t j = 0; j < depth; j++) {
        uint64_t h = k->hashes[start + j];
        Py_ssize_t at = slot_of(h, bits);
        while (k->table[at] >= 0) {
            int64_t other = start + k->table[at];
            if (k->hashes[other] == h &&
                (column_push(&k->out[DUP_A], other) < 0 || column_push(&k->out[DUP_B], start + j) < 0))
                return -1;
            at = (at + 1) & mask;
        }
        k->table[at] = (int32_t)j;
    }
    for (int64_t m = k->first[q]; m < k->first[q] + k->count[q]; m++) {
        int64_t e = k->order[m];
        uint64_t h = k->entry_hash[e];
        for (Py_ssize_t at = slot_of(h, bits); k->table[at] >= 0; at = (at + 1) & mask) {
            int64_t row = start + k->table[at];
            if (k->hashes[row] == h && hit(k, q, start, depth, row, e) < 0)
                return -1;
        }
    }
    return 0;
}

/* A buffer of *n* items of *itemsize* bytes (n -1: any whole number of them, set). */
static int items(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t *n, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len % itemsize != 0 || (*n >= 0 && view->len != *n * itemsize)) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s has the wrong length", what);
        return -1;
    }
    *n = view->len / itemsize;
    return 0;
}

/* rank_columns(offsets, hashes, scores, first, count, order, entry_hash) -> tuple of 8 bytearrays
 *
 * *offsets*: int64, the query-grouped run's rows of query q are offsets[q]:offsets[q + 1];
 * *hashes*: their doc-id hashes (uint64); *scores*: None (rank-only: rows best first), or their
 * scores as compared (float32 or float64); *first*, *count*, *order*: the labelled docs by query
 * (those of query q are order[first[q]:first[q] + count[q]]); *entry_hash*: each labelled doc's
 * hash. Returns int64 columns: the candidate hits (query, row, entry), each one's count of rows
 * that score higher (rank-only: its position), the rows that tie with a candidate (the candidate's
 * index, the row), and the pairs of rows of one query with equal hashes (the first row, the
 * second). */
PyObject *rank_columns(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6]))
        return NULL;
    Py_buffer views[7];
    int held[7] = {0};
    PyObject *result = NULL;
    Ranking k;
    memset(&k, 0, sizeof(k));
    Py_ssize_t n_offsets = -1, rows = -1, queries = -1, n_order = -1, entries = -1;
    if (items(objs[0], &views[0], 8, &n_offsets, "offsets") < 0)
        goto done;
    held[0] = 1;
    if (n_offsets < 1) {
        PyErr_SetString(PyExc_ValueError, "offsets has the wrong length");
        goto done;
    }
    queries = n_offsets - 1;
    if (items(objs[1], &views[1], 8, &rows, "hashes") < 0)
        goto done;
    held[1] = 1;
    if (objs[2] != Py_None) {
        if (PyObject_GetBuffer(objs[2], &views[2], PyBUF_FORMAT) < 0)
            goto done;
        held[2] = 1;
        k.itemsize = views[2].itemsize;
        const char *format = views[2].format ? views[2].format : "B";
        if (!((k.itemsize == 4 && strcmp(format, "f") == 0) || (k.itemsize == 8 && strcmp(format, "d") == 0)) ||
            views[2].len != rows * k.itemsize) {
            PyErr_SetString(PyExc_ValueError, "scores must be float32 or float64, one a row");
            goto done;
        }
        k.scores = (const char *)views[2].buf;
    }
    Py_ssize_t n_first = queries, n_count = queries;
    /* The labelled docs' columns, 8 bytes an item: first and count one a query, order and
     * entry_hash any length (read back into n_order and entries). */
    Py_ssize_t *lengths[4] = {&n_first, &n_count, &n_order, &entries};
    static const char *const names[4] = {"first", "count", "order", "entry_hash"};
    for (int c = 0; c < 4; c++) {
        if (items(objs[3 + c], &views[3 + c], 8, lengths[c], names[c]) < 0)
            goto done;
        held[3 + c] = 1;
    }
    k.offsets = (const int64_t *)views[0].buf;
    k.hashes = (const uint64_t *)views[1].buf;
    k.first = (const int64_t *)views[3].buf;
    k.count = (const int64_t *)views[4].buf;
    k.order = (const int64_t *)views[5].buf;
    k.entry_hash = (const uint64_t *)views[6].buf;
    k.queries = queries;
    k.entries = entries;
    /* Every index is checked before it is followed. */
    if (k.offsets[0] != 0 || k.offsets[queries] != rows) {
        PyErr_SetString(PyExc_ValueError, "offsets must run from 0 to the number of rows");
        goto done;
    }
    for (Py_ssize_t q = 0; q < queries; q++) {
        if (k.offsets[q + 1] < k.offsets[q] || k.offsets[q + 1] - k.offsets[q] > INT32_MAX || k.first[q] < 0 ||
            k.count[q] < 0 || k.first[q] + k.count[q] > n_order) {
            PyErr_SetString(PyExc_ValueError, "offsets must not decrease, and first + count must be within order");
            goto done;
        }
    }
    for (Py_ssize_t m = 0; m < n_order; m++) {
        if (k.order[m] < 0 || k.order[m] >= entries) {
            PyErr_SetString(PyExc_ValueError, "order holds an entry out of range");
            goto done;
        }
    }
    for (Py_ssize_t q = 0; q < queries; q++) {
        if (rank_query(&k, q) < 0)
            goto done;
    }
    result = PyTuple_New(OUTPUTS);
    if (result == NULL)
        goto done;
    for (int c = 0; c < OUTPUTS; c++) {
        PyObject *column = PyByteArray_FromStringAndSize((const char *)k.out[c].data,
                                                         k.out[c].n * (Py_ssize_t)sizeof(int64_t));
        if (column == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, c, column);
    }
done:
    for (int c = 0; c < OUTPUTS; c++)
        PyMem_Free(k.out[c].data);
    PyMem_Free(k.table);
    for (int b = 0; b < 7; b++)
        if (held[b])
            PyBuffer_Release(&views[b]);
    return result;
}
