/* TREC run files read in one pass over their bytes (part of the optional C speedups, issue 31).
 *
 * trec_columns(data, powers) reads ``qid Q0 docid rank score tag`` lines straight into the three
 * columns read_run returns -- query ids and doc ids as NUL-padded fixed-width bytes (numpy 'S'),
 * scores as doubles -- with no line, field or number ever a Python object, and no temporary the
 * size of the file: the pure reader (_runfile.py) scans the bytes with numpy, has pyarrow's CSV
 * reader split them, then copies the ids into fixed width, each step a pass over fresh memory.
 *
 * It is exact with respect to the line reader in io.py (lines split at \n, fields by str.split,
 * blank and '#' lines skipped): it reads only files on which the two cannot differ, and declines
 * (returns None) anything else -- a byte that is not ASCII, a control byte str.split keeps in a
 * field, a JSON first line, a run line of fewer than 5 fields, a score that is not a plain
 * decimal number -- so the pure reader reads the file and names any error by its line.
 *
 * Scores are parsed with the Eisel-Lemire algorithm (D. Lemire, "Number parsing at a gigabyte per
 * second", 2021; as in fast_float): the decimal significand times a 128-bit approximation of the
 * power of five, correctly rounded to the nearest double in all but cases it detects; those, and
 * significands of more than 19 digits, subnormals and overflows, go to PyOS_string_to_double,
 * Python's own correctly rounded parser (float()'s). Every plain decimal thus reads as float()
 * reads it -- as numpy's and pyarrow's parsers read it in the pure reader. The table of powers of
 * five is computed in Python (_runfile.py: exact integer arithmetic) and passed in.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include "_speedups.h"

/* The powers table: 5**q for q in [POW_MIN, POW_MAX], each as two words (high, low) of its 128-bit
 * normalised approximation. */
#define POW_MIN (-342)
#define POW_MAX 308
#define POW_WORDS (2 * (POW_MAX - POW_MIN + 1))

/* The fields of a run line that are read: qid, Q0, docid, rank, score. */
#define FIELDS 5
/* Rows looked at before the columns are first sized: their widest ids give the first widths. */
#define SAMPLE_LINES 1024

#if defined(__SIZEOF_INT128__)
static inline uint64_t mul_high(uint64_t a, uint64_t b, uint64_t *low) {
    unsigned __int128 r = (unsigned __int128)a * b;
    *low = (uint64_t)r;
    return (uint64_t)(r >> 64);
}

/* w * 10**q as the nearest double (ties to even), when the algorithm settles it: 1, and *out.
 * 0: the caller parses the text itself. 0 < w < 10**19. */
static int eisel_lemire(uint64_t w, int64_t q, const uint64_t *powers, double *out) {
    if (q < POW_MIN || q > POW_MAX)
        return 0;
    int lz = __builtin_clzll(w);
    w <<= lz;
    const uint64_t *p5 = powers + 2 * (q - POW_MIN);
    uint64_t lo, hi = mul_high(w, p5[0], &lo);
    if ((hi & 0x1FF) == 0x1FF) { /* the low bits of the high word undecided: add the second product */
        uint64_t lo2, hi2 = mul_high(w, p5[1], &lo2);
        (void)lo2;
        lo += hi2;
        if (hi2 > lo)
            hi++;
    }
    /* Outside the exponents where the product is exact, an all-ones low word may hide a carry
     * (the 2021 paper's fallback; later proven unneeded, kept as the cautious choice). */
    if (lo == UINT64_MAX && (q < -27 || q > 55))
        return 0;
    int upper = (int)(hi >> 63);
    int shift = upper + 64 - 52 - 3;
    uint64_t mantissa = hi >> shift;
    int64_t power2 = ((((int64_t)152170 + 65536) * q) >> 16) + 63 + upper - lz + 1023;
    if (power2 <= 0)
        return 0; /* subnormal */
    /* Exactly half way between two doubles (only possible where 5**q fits a word): to even. */
    if (lo <= 1 && q >= -4 && q <= 23 && (mantissa & 3) == 1 && (mantissa << shift) == hi)
        mantissa &= ~(uint64_t)1;
    mantissa += mantissa & 1;
    mantissa >>= 1;
    if (mantissa >= ((uint64_t)2 << 52)) {
        mantissa = (uint64_t)1 << 52;
        power2++;
    }
    if (power2 >= 0x7FF)
        return 0; /* overflow: infinity, as float() says */
    uint64_t bits = (mantissa & ~((uint64_t)1 << 52)) | ((uint64_t)power2 << 52);
    memcpy(out, &bits, sizeof(bits));
    return 1;
}
#endif

/* A score field as float() reads it. 1: *out; 0: not a plain decimal number ([+-] digits [. digits]
 * [e [+-] digits], a digit in the significand), which the pure reader reads. */
static int parse_score(const char *s, Py_ssize_t len, const uint64_t *powers, double *out) {
    const char *p = s, *end = s + len;
    int negative = 0;
    if (p < end && (*p == '+' || *p == '-'))
        negative = *p++ == '-';
    uint64_t w = 0;
    int64_t q = 0;
    int digits = 0, significant = 0;
    for (; p < end && *p >= '0' && *p <= '9'; p++, digits++) {
        if (significant || *p != '0') {
            if (++significant <= 19)
                w = 10 * w + (uint64_t)(*p - '0');
            else
                q++; /* past 19 digits: counted, and parsed by Python below */
        }
    }
    if (p < end && *p == '.') {
        for (p++; p < end && *p >= '0' && *p <= '9'; p++, digits++) {
            if (significant || *p != '0') {
                if (++significant <= 19) {
                    w = 10 * w + (uint64_t)(*p - '0');
                    q--;
                }
            } else {
                q--;
            }
        }
    }
    if (digits == 0)
        return 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int exp_negative = 0;
        if (p < end && (*p == '+' || *p == '-'))
            exp_negative = *p++ == '-';
        if (p == end || *p < '0' || *p > '9')
            return 0;
        int64_t e = 0;
        for (; p < end && *p >= '0' && *p <= '9'; p++)
            if (e < 100000)
                e = 10 * e + (*p - '0');
        q += exp_negative ? -e : e;
    }
    if (p != end)
        return 0;
    if (w == 0) {
        *out = negative ? -0.0 : 0.0;
        return 1;
    }
#if defined(__SIZEOF_INT128__)
    if (significant <= 19 && eisel_lemire(w, q, powers, out)) {
        if (negative)
            *out = -*out;
        return 1;
    }
#else
    (void)powers;
#endif
    char local[128];
    char *text = len < (Py_ssize_t)sizeof(local) ? local : PyMem_Malloc((size_t)len + 1);
    if (text == NULL)
        return 0;
    memcpy(text, s, (size_t)len);
    text[len] = '\0';
    double value = PyOS_string_to_double(text, NULL, NULL); /* overflow: +-inf, as float() */
    if (text != local)
        PyMem_Free(text);
    if (value == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *out = value;
    return 1;
}

/* A column of fixed-width ids growing as rows come: a bytearray of *cap* rows of *width* bytes. */
typedef struct {
    PyObject *bytes;
    Py_ssize_t width;
} Ids;

/* Room for rows [0, cap) of at least *width* bytes; the *rows* written so far move to the new width
 * (rows go back to front, so a row never overwrites one not yet moved). -1: out of memory. */
static int ids_fit(Ids *c, Py_ssize_t rows, Py_ssize_t cap, Py_ssize_t width) {
    Py_ssize_t old = c->width;
    if (width < old)
        width = old;
    if (PyByteArray_Resize(c->bytes, cap * width) < 0)
        return -1;
    char *base = PyByteArray_AS_STRING(c->bytes);
    if (width > old) {
        for (Py_ssize_t i = rows - 1; i >= 0; i--) {
            memmove(base + i * width, base + i * old, (size_t)old);
            memset(base + i * width + old, 0, (size_t)(width - old));
        }
        c->width = width;
    }
    return 0;
}

static inline void ids_put(Ids *c, Py_ssize_t row, const char *data, Py_ssize_t len) {
    char *at = PyByteArray_AS_STRING(c->bytes) + row * c->width;
    memcpy(at, data, (size_t)len);
    memset(at + len, 0, (size_t)(c->width - len));
}

typedef struct {
    const char *data;
    Py_ssize_t len;
    const uint64_t *powers;
    Ids qids, docids;
    PyObject *scores;
    Py_ssize_t rows, cap;
    int run_lines; /* any run line read yet: the first one tells JSON lines */
    /* The line being read: its fields' starts and ends (the first FIELDS), how many it has, and
     * where the field being read started (-1: between fields). */
    Py_ssize_t start[FIELDS], end[FIELDS];
    int fields;
    Py_ssize_t open;
} Reader;

/* The widest qid and docid of the first run lines (at most SAMPLE_LINES of them; blank and
 * comment lines skipped): the columns' first widths, so that the columns of a file whose ids have
 * one width are never widened, and end as wide as their widest id. */
static void sample_widths(const Reader *r, Py_ssize_t *qw, Py_ssize_t *dw) {
    Py_ssize_t lines = 0, at = 0;
    *qw = *dw = 1;
    while (at < r->len && lines < SAMPLE_LINES) {
        const char *line = r->data + at;
        const char *nl = memchr(line, '\n', (size_t)(r->len - at));
        Py_ssize_t n = nl ? nl - line : r->len - at;
        Py_ssize_t k = 0;
        at += n + 1;
        while (k < n && (unsigned char)line[k] <= ' ')
            k++;
        if (k == n || line[k] == '#')
            continue;
        lines++;
        for (int f = 0; f < 3; f++) {
            while (k < n && (unsigned char)line[k] <= ' ')
                k++;
            Py_ssize_t s = k;
            while (k < n && (unsigned char)line[k] > ' ')
                k++;
            Py_ssize_t w = k - s;
            if (f == 0 && w > *qw)
                *qw = w;
            if (f == 2 && w > *dw)
                *dw = w;
        }
    }
}

/* The line just ended: a row (1), skipped (0: blank or a comment), or declined (-1: a JSON first
 * line, a run line of fewer than 5 fields, a score that is not a plain number) or out of memory
 * (-2, the error set). */
static int end_line(Reader *r) {
    int fields = r->fields;
    r->fields = 0;
    r->open = -1;
    if (fields == 0 || r->data[r->start[0]] == '#')
        return 0;
    if (!r->run_lines && r->data[r->start[0]] == '{')
        return -1;
    r->run_lines = 1;
    if (fields < FIELDS)
        return -1;
    Py_ssize_t qlen = r->end[0] - r->start[0], dlen = r->end[2] - r->start[2];
    if (r->rows == r->cap || qlen > r->qids.width || dlen > r->docids.width) {
        Py_ssize_t cap = r->rows == r->cap ? r->cap + r->cap / 2 + 1024 : r->cap;
        if (ids_fit(&r->qids, r->rows, cap, qlen) < 0 || ids_fit(&r->docids, r->rows, cap, dlen) < 0 ||
            PyByteArray_Resize(r->scores, cap * (Py_ssize_t)sizeof(double)) < 0)
            return -2;
        r->cap = cap;
    }
    double *score = (double *)PyByteArray_AS_STRING(r->scores) + r->rows;
    if (!parse_score(r->data + r->start[4], r->end[4] - r->start[4], r->powers, score))
        return -1;
    ids_put(&r->qids, r->rows, r->data + r->start[0], qlen);
    ids_put(&r->docids, r->rows, r->data + r->start[2], dlen);
    r->rows++;
    return 1;
}

/* Bit masks of 16 bytes: blank (<= ' '), newline, and refused (a byte over 0x7F, or a control byte
 * other than \t \n \v \f \r: str.split keeps those in a field, or splits at \x1c-\x1f). */
static inline void classify(const unsigned char *p, uint32_t *blank, uint32_t *nl, uint32_t *refused) {
#if defined(__SSE2__)
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    uint32_t high = (uint32_t)_mm_movemask_epi8(v); /* sign bits: bytes over 0x7F */
    uint32_t low = (uint32_t)_mm_movemask_epi8(_mm_cmplt_epi8(v, _mm_set1_epi8(0x21))) & ~high;
    uint32_t ctrl = (uint32_t)_mm_movemask_epi8(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20))) & ~high;
    /* \t..\r are 9..13: (byte - 9) as unsigned below 5 */
    __m128i shifted = _mm_sub_epi8(v, _mm_set1_epi8(9 - 128));
    uint32_t space_ctrl = (uint32_t)_mm_movemask_epi8(_mm_cmplt_epi8(shifted, _mm_set1_epi8(5 - 128))) & ~high;
    *blank = low;
    *nl = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('\n')));
    *refused = high | (ctrl & ~space_ctrl);
#else
    uint32_t b = 0, n = 0, x = 0;
    for (int k = 0; k < 16; k++) {
        unsigned char c = p[k];
        b |= (uint32_t)(c <= ' ') << k;
        n |= (uint32_t)(c == '\n') << k;
        x |= (uint32_t)(c >= 0x80 || (c < ' ' && (c < 9 || c > 13))) << k;
    }
    *blank = b;
    *nl = n;
    *refused = x;
#endif
}

/* Reads r->data; 0: read, -1: declined, -2: an error (set). Fields start where a blank byte (or
 * the file's start) is followed by another, and end where a field byte is followed by a blank:
 * both found 16 bytes at a time from the masks, so the bytes inside fields are never branched on. */
static int read_lines(Reader *r) {
    const unsigned char *data = (const unsigned char *)r->data;
    uint32_t prev_blank = 1; /* the byte before the current block */
    r->open = -1;
    for (Py_ssize_t base = 0; base < r->len; base += 16) {
        unsigned char tail[16];
        const unsigned char *p = data + base;
        if (base + 16 > r->len) { /* the last bytes, padded with blanks (not a newline: no line added) */
            memset(tail, ' ', sizeof(tail));
            memcpy(tail, p, (size_t)(r->len - base));
            p = tail;
        }
        uint32_t blank, nl, refused;
        classify(p, &blank, &nl, &refused);
        if (refused)
            return -1;
        uint32_t field = ~blank & 0xFFFF;
        uint32_t after_blank = (blank << 1 | prev_blank) & 0xFFFF;
        uint32_t starts = field & after_blank, ends = blank & ~after_blank;
        prev_blank = blank >> 15;
        uint32_t events = starts | ends | nl;
        while (events) {
            int k = __builtin_ctz(events);
            uint32_t bit = (uint32_t)1 << k;
            events &= events - 1;
            Py_ssize_t at = base + k;
            if (ends & bit) {
                if (r->fields <= FIELDS && r->open >= 0)
                    r->end[r->fields - 1] = at;
                r->open = -1;
            }
            if (nl & bit) {
                int got = end_line(r);
                if (got < 0)
                    return got;
            } else if (starts & bit) {
                r->fields++;
                if (r->fields <= FIELDS) {
                    r->start[r->fields - 1] = at;
                    r->open = at;
                }
            }
        }
    }
    if (r->open >= 0) /* the last field ran to the end of the file */
        r->end[r->fields - 1] = r->len;
    int got = end_line(r); /* a last line without \n */
    return got < 0 ? got : 0;
}

/* trec_columns(data, powers) -> (qids, qwidth, docids, dwidth, scores, rows) | None
 *
 * *data*: a run file's bytes (a bytes object or a mapping; a byte-order mark removed). The query
 * ids and doc ids as rows of qwidth / dwidth bytes (NUL-padded), the scores as doubles, all
 * bytearrays, rows in file order. None where the pure reader must read the file (see the top of
 * this file), and for a file without a run line (it says what the file is). *powers*: the table
 * of powers of five (_runfile.py). */
PyObject *trec_columns(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *data_obj, *powers_obj;
    if (!PyArg_ParseTuple(args, "OO", &data_obj, &powers_obj))
        return NULL;
    Py_buffer data, powers;
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(powers_obj, &powers, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    PyObject *result = NULL;
    Reader r;
    memset(&r, 0, sizeof(r));
    if (powers.len != (Py_ssize_t)(POW_WORDS * sizeof(uint64_t))) {
        PyErr_SetString(PyExc_ValueError, "powers must hold 1302 uint64 values");
        goto done;
    }
    r.data = (const char *)data.buf;
    r.len = data.len;
    r.powers = (const uint64_t *)powers.buf;
    Py_ssize_t qw, dw;
    sample_widths(&r, &qw, &dw);
    /* Rows first guessed from the first line's length; grown by half as needed. */
    const char *nl = memchr(r.data, '\n', (size_t)(r.len < 4096 ? r.len : 4096));
    Py_ssize_t line = nl ? nl - r.data + 1 : r.len;
    r.cap = line > 0 ? r.len / line + r.len / line / 16 + 16 : 16;
    r.qids.width = qw;
    r.docids.width = dw;
    r.qids.bytes = PyByteArray_FromStringAndSize(NULL, r.cap * qw);
    r.docids.bytes = PyByteArray_FromStringAndSize(NULL, r.cap * dw);
    r.scores = PyByteArray_FromStringAndSize(NULL, r.cap * (Py_ssize_t)sizeof(double));
    if (r.qids.bytes == NULL || r.docids.bytes == NULL || r.scores == NULL)
        goto done;
    int read = read_lines(&r);
    if (read == -2)
        goto done;
    if (read == -1 || r.rows == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (PyByteArray_Resize(r.qids.bytes, r.rows * r.qids.width) < 0 ||
        PyByteArray_Resize(r.docids.bytes, r.rows * r.docids.width) < 0 ||
        PyByteArray_Resize(r.scores, r.rows * (Py_ssize_t)sizeof(double)) < 0)
        goto done;
    result = Py_BuildValue("(OnOnOn)", r.qids.bytes, r.qids.width, r.docids.bytes, r.docids.width, r.scores,
                           r.rows);
done:
    Py_XDECREF(r.qids.bytes);
    Py_XDECREF(r.docids.bytes);
    Py_XDECREF(r.scores);
    PyBuffer_Release(&powers);
    PyBuffer_Release(&data);
    return result;
}
