/* Hot loops of the detector in C (optional: ndd_stream.core.kernels falls back to numpy).
 *
 * count_blocks: counting the postings a probe shares with each window document is ~80% of
 * a decision in numpy (a dozen array passes over ~1M postings at a 50k-document window);
 * here it is one pass over every block, one increment per posting of a rare key and
 * carry-save adders over the bitmap rows of frequent keys.
 *
 * intersection: |A ∩ B| of two sorted arrays of distinct uint64 codes (exact verification)
 * or uint32 keys (the size of a merged block).
 *
 * xor_popcount: bits differing between a query bitmap and stored bitmaps (the bitmap
 * filter's upper bound on |A ∩ B|, ndd_stream.core.bitmaps).
 *
 * The index count (count_blocks, dense_rows) is in _count.c; the Block type and merge_csr
 * (merging two posting blocks of the index in one linear pass) in _block.c.
 *
 * No numpy C API: arguments are plain contiguous buffers (the buffer protocol), so the
 * extension builds with nothing but a C compiler and Python's headers.
 */
#include "_kernels.h"

int
ndd_check(Py_buffer *b, Py_ssize_t itemsize, const char *name)
{
    if (b->len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: buffer of %zd bytes is not an array of %zd-byte items",
                     name, b->len, itemsize);
        return -1;
    }
    return 0;
}

#define check ndd_check

PyDoc_STRVAR(intersection_doc,
"intersection(a, b, width=8) -> int\n\n|A ∩ B| of two ascending arrays of distinct unsigned\n"
"integers of ``width`` bytes: 8 for q-gram codes, 4 for index keys.");

/* The shared items of two ascending arrays of distinct T, branch-free. */
#define COUNT_SHARED(T, xbuf, ybuf, nx, ny, shared)                                        \
    do {                                                                                   \
        const T *x_ = (xbuf), *y_ = (ybuf);                                                \
        Py_ssize_t i_ = 0, j_ = 0;                                                         \
        while (i_ < (nx) && j_ < (ny)) {                                                   \
            T u_ = x_[i_], v_ = y_[j_];                                                    \
            (shared) += (u_ == v_);                                                        \
            i_ += (u_ <= v_);                                                              \
            j_ += (v_ <= u_);                                                              \
        }                                                                                  \
    } while (0)

static PyObject *
intersection(PyObject *self, PyObject *args)
{
    Py_buffer a, b;
    int width = 8;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*|i", &a, &b, &width))
        return NULL;
    if (width != 4 && width != 8) {
        PyErr_SetString(PyExc_ValueError, "width must be 4 or 8");
        goto done;
    }
    if (check(&a, width, "a") || check(&b, width, "b"))
        goto done;
    {
        Py_ssize_t nx = a.len / width, ny = b.len / width, shared = 0;
        Py_BEGIN_ALLOW_THREADS
        if (width == 8)
            COUNT_SHARED(uint64_t, a.buf, b.buf, nx, ny, shared);
        else
            COUNT_SHARED(uint32_t, a.buf, b.buf, nx, ny, shared);
        Py_END_ALLOW_THREADS
        result = PyLong_FromSsize_t(shared);
    }
done:
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return result;
}

PyDoc_STRVAR(xor_popcount_doc,
"xor_popcount(table, width, rows, query, out) -> None\n\n"
"``table`` holds bitmaps of ``width`` uint64 words each, one per row; for every i, write\n"
"popcount(table[rows[i]] ^ query) into ``out[i]`` (int64). ``query`` has ``width`` words.");

static Py_ssize_t
xor_popcount_row(const uint64_t *a, const uint64_t *b, Py_ssize_t width)
{
    Py_ssize_t bits = 0;
    for (Py_ssize_t w = 0; w < width; w++)
        bits += __builtin_popcountll(a[w] ^ b[w]);
    return bits;
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
/* The same loop compiled for the POPCNT instruction, chosen at run time when the CPU has
 * it (every x86-64 CPU of the last 15 years); the portable build stays the fallback. */
__attribute__((target("popcnt"))) static Py_ssize_t
xor_popcount_row_hw(const uint64_t *a, const uint64_t *b, Py_ssize_t width)
{
    Py_ssize_t bits = 0;
    for (Py_ssize_t w = 0; w < width; w++)
        bits += __builtin_popcountll(a[w] ^ b[w]);
    return bits;
}
#define HAVE_HW_POPCOUNT 1
#endif

static PyObject *
xor_popcount(PyObject *self, PyObject *args)
{
    Py_buffer table, rows, query, out;
    Py_ssize_t width;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*ny*y*w*", &table, &width, &rows, &query, &out))
        return NULL;
    if (check(&table, 8, "table") || check(&rows, 8, "rows") || check(&query, 8, "query") ||
        check(&out, 8, "out"))
        goto done;
    {
        Py_ssize_t n = rows.len / 8, nrows;
        if (width <= 0 || query.len / 8 != width || (table.len / 8) % width) {
            PyErr_SetString(PyExc_ValueError, "query and table rows must have width words");
            goto done;
        }
        if (out.len / 8 != n) {
            PyErr_SetString(PyExc_ValueError, "out must have one item per row index");
            goto done;
        }
        nrows = table.len / 8 / width;
        const uint64_t *tb = table.buf, *qb = query.buf;
        const int64_t *rw = rows.buf;
        int64_t *ob = out.buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (rw[i] < 0 || rw[i] >= nrows) {
                PyErr_SetString(PyExc_IndexError, "row index out of range of table");
                goto done;
            }
        }
        Py_ssize_t (*row_fn)(const uint64_t *, const uint64_t *, Py_ssize_t) = xor_popcount_row;
#ifdef HAVE_HW_POPCOUNT
        if (__builtin_cpu_supports("popcnt"))
            row_fn = xor_popcount_row_hw;
#endif
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i + 1 < n)
                PREFETCH(tb + (Py_ssize_t)rw[i + 1] * width);
            ob[i] = row_fn(tb + (Py_ssize_t)rw[i] * width, qb, width);
        }
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&query);
    PyBuffer_Release(&out);
    return result;
}

/* The rank of a character among the 36 of a default normal form (digits, then lower-case
 * letters: their ASCII order), -1 for any other. */
static const int8_t RANK36[256] = {
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
     0,  1,  2,  3,  4,  5,  6,  7,  8,  9, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
    25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
};

static const char ALPHABET36[] = "0123456789abcdefghijklmnopqrstuvwxyz";

/* The packed codes (16 bits a character) of the two characters of ranks pair / 36 and
 * pair % 36. */
static inline uint64_t
pair_code(uint32_t pair)
{
    return ((uint64_t)(unsigned char)ALPHABET36[pair / 36] << 16)
           | (unsigned char)ALPHABET36[pair % 36];
}

/* The distinct keys of the sorted a[0..n) as packed codes into o; returns how many. A key
 * is two pairs (pair << 11 | pair: ascii_codes4_36) or four 7-bit characters. */
static inline Py_ssize_t
distinct_codes(const uint32_t *a, Py_ssize_t n, uint64_t *o, int pairs)
{
    Py_ssize_t m = 0;
    uint32_t last = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t x = a[i];
        if (x == last)
            continue;
        last = x;
        o[m++] = pairs ? (pair_code(x >> 11) << 32) | pair_code(x & 2047)
                       : ((uint64_t)(x >> 21) << 48) | ((uint64_t)((x >> 14) & 127) << 32)
                             | ((uint64_t)((x >> 7) & 127) << 16) | (uint64_t)(x & 127);
    }
    return m;
}

/* q = 4 over a normal form of the default settings (case folded), whose characters are
 * digits and lower-case letters: a q-gram is two of 1,296 pairs, so an LSD radix sort of
 * two passes (second pair, then first) sorts the n q-grams, against four 7-bit passes for
 * any ASCII. Returns -1 (nothing written) when a character is outside the 36. ``scratch``
 * holds 2 * n uint32. Why: the four passes were a quarter of the instructions of an
 * item's path around the index; the two take 0.65x of their time. */
static Py_ssize_t
ascii_codes4_36(const unsigned char *c, Py_ssize_t n, uint64_t *o, uint32_t *scratch)
{
    int bad = 0;
    for (Py_ssize_t i = 0; i < n + 3; i++)
        bad |= RANK36[c[i]];
    if (bad < 0)
        return -1;
    uint32_t *a = scratch, *b = scratch + n;
    uint32_t second[1297], first[1297];
    memset(second, 0, sizeof(second));
    memset(first, 0, sizeof(first));
    int r2 = RANK36[c[2]];
    uint32_t p01 = (uint32_t)(RANK36[c[0]] * 36 + RANK36[c[1]]);
    uint32_t p12 = (uint32_t)(RANK36[c[1]] * 36 + r2);
    for (Py_ssize_t i = 0; i < n; i++) {
        int r3 = RANK36[c[i + 3]];
        uint32_t p23 = (uint32_t)(r2 * 36 + r3);
        a[i] = (p01 << 11) | p23;
        second[p23 + 1]++;
        first[p01 + 1]++;
        p01 = p12;
        p12 = p23;
        r2 = r3;
    }
    for (int v = 0; v < 1296; v++) {
        second[v + 1] += second[v];
        first[v + 1] += first[v];
    }
    for (Py_ssize_t i = 0; i < n; i++)
        b[second[a[i] & 2047]++] = a[i];
    for (Py_ssize_t i = 0; i < n; i++)
        a[first[b[i] >> 11]++] = b[i];
    return distinct_codes(a, n, o, 1);
}

/* q = 4, the default, with the loops' bounds and shifts known: the key rolls one
 * character at a time and one read of the keys counts all four digits (about a quarter of
 * the general loop's instructions). */
static Py_ssize_t
ascii_codes4(const unsigned char *c, Py_ssize_t n, uint64_t *o, uint32_t *scratch)
{
    uint32_t *a = scratch, *b = scratch + n;
    uint32_t cnt[4][128];
    memset(cnt, 0, sizeof(cnt));
    uint32_t k = ((uint32_t)c[0] << 14) | ((uint32_t)c[1] << 7) | c[2];
    for (Py_ssize_t i = 0; i < n; i++) {
        k = ((k << 7) | c[i + 3]) & 0x0FFFFFFFu;
        a[i] = k;
        cnt[0][k & 127]++;
        cnt[1][(k >> 7) & 127]++;
        cnt[2][(k >> 14) & 127]++;
        cnt[3][k >> 21]++;
    }
    for (int d = 0; d < 4; d++) { /* counts to first positions */
        uint32_t sum = 0;
        for (int v = 0; v < 128; v++) {
            uint32_t x = cnt[d][v];
            cnt[d][v] = sum;
            sum += x;
        }
    }
    for (int d = 0; d < 4; d++) {
        int shift = 7 * d;
        uint32_t *pos = cnt[d];
        for (Py_ssize_t i = 0; i < n; i++)
            b[pos[(a[i] >> shift) & 127]++] = a[i];
        uint32_t *t = a;
        a = b;
        b = t;
    }
    return distinct_codes(a, n, o, 0);
}

/* The distinct q-gram codes (q <= 4, packed 16 bits a character) of the ASCII bytes
 * c[0..len), ascending, into o; returns how many. ``scratch`` holds 2 * (len - q + 1)
 * uint32. Shared by ascii_signature and _text.c's ascii_sign. */
Py_ssize_t
ndd_ascii_codes(const unsigned char *c, Py_ssize_t len, int q, uint64_t *o,
                uint32_t *scratch)
{
    Py_ssize_t n = len - q + 1, m = 0;
    if (n <= 0)
        return 0;
    if (q == 4) {
        m = ascii_codes4_36(c, n, o, scratch);
        return m >= 0 ? m : ascii_codes4(c, n, o, scratch);
    }
    uint32_t *a = scratch, *b = scratch + n;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t k = 0;
        for (int j = 0; j < q; j++)
            k = (k << 7) | c[i + j];
        a[i] = k;
    }
    /* LSD radix sort, one pass of 7 bits per character (q passes). */
    for (int pass = 0; pass < q; pass++) {
        Py_ssize_t cnt[129];
        int shift = 7 * pass;
        memset(cnt, 0, sizeof(cnt));
        for (Py_ssize_t i = 0; i < n; i++)
            cnt[((a[i] >> shift) & 127) + 1]++;
        for (int v = 0; v < 127; v++)
            cnt[v + 1] += cnt[v];
        for (Py_ssize_t i = 0; i < n; i++)
            b[cnt[(a[i] >> shift) & 127]++] = a[i];
        uint32_t *t = a;
        a = b;
        b = t;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (m && a[i] == a[i - 1])
            continue;
        uint64_t code = 0;
        for (int j = 0; j < q; j++)
            code |= (uint64_t)((a[i] >> (7 * (q - 1 - j))) & 127) << (16 * (q - 1 - j));
        o[m++] = code;
    }
    return m;
}

PyDoc_STRVAR(ascii_signature_doc,
"ascii_signature(nf, q, out) -> n\n\n"
"The signature (distinct q-gram codes, ascending) of the ASCII bytes ``nf`` for q <= 4,\n"
"with the packed encoding of ndd_stream.core.qgrams (16 bits per character, first\n"
"character highest): written into ``out`` (uint64, at least len(nf) - q + 1 items);\n"
"returns how many.");

/* Why: a decision computes one signature, and verification one per candidate whose
 * signature is not cached; in numpy (codes, sort, unique mask) that is ~0.2 ms for 5 KB,
 * which made verification the cost on text sharing long passages. ASCII q-grams pack
 * into 7 bits per character, so a radix sort of one 7-bit pass per character sorts
 * them; the packed 64-bit codes keep that order. */
static PyObject *
ascii_signature(PyObject *self, PyObject *args)
{
    Py_buffer nf, out;
    int q;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*iw*", &nf, &q, &out))
        return NULL;
    if (check(&out, 8, "out"))
        goto done;
    if (q < 1 || q > 4) {
        PyErr_SetString(PyExc_ValueError, "q must be 1..4");
        goto done;
    }
    {
        const unsigned char *c = nf.buf;
        Py_ssize_t len = nf.len, n = len - q + 1;
        if (n <= 0) {
            result = PyLong_FromLong(0);
            goto done;
        }
        if (out.len / 8 < n) {
            PyErr_SetString(PyExc_ValueError, "out is too short");
            goto done;
        }
        for (Py_ssize_t i = 0; i < len; i++)
            if (c[i] > 127) {
                PyErr_SetString(PyExc_ValueError, "nf must be ASCII");
                goto done;
            }
        uint32_t *scratch = PyMem_RawMalloc((size_t)n * 2 * sizeof(uint32_t));
        if (scratch == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        Py_ssize_t m;
        Py_BEGIN_ALLOW_THREADS
        m = ndd_ascii_codes(c, len, q, out.buf, scratch);
        Py_END_ALLOW_THREADS
        PyMem_RawFree(scratch);
        result = PyLong_FromSsize_t(m);
    }
done:
    PyBuffer_Release(&nf);
    PyBuffer_Release(&out);
    return result;
}

/* The k smallest of a[0..n) moved to a[0..k) (any order): quickselect, median of three. */
void
ndd_select_smallest(uint64_t *a, Py_ssize_t n, Py_ssize_t k)
{
    if (k <= 0 || k >= n)
        return;
    Py_ssize_t lo = 0, hi = n - 1, target = k - 1; /* a[0..target] must end up smallest */
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        uint64_t x = a[lo], y = a[mid], z = a[hi];
        uint64_t pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot)
                i++;
            while (a[j] > pivot)
                j--;
            if (i <= j) {
                uint64_t t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        /* a[lo..j] <= pivot <= a[i..hi], and a[j+1..i-1] == pivot */
        if (target <= j)
            hi = j;
        else if (target >= i)
            lo = i;
        else
            return;
    }
}

PyDoc_STRVAR(bitmap_keep_doc,
"bitmap_keep(table, width, rows, query, sizes, size, threshold, out) -> None\n\n"
"The bitmap filter's test of BitmapFilter.may_match for the rows ``rows`` (int64) of one\n"
"chunk: with d = popcount(table[r] ^ query) (``width`` words a row) and s = sizes[r]\n"
"(int64), out[i] (bool) = (size + s - d) // 2 / max(s, size) >= threshold, in doubles as\n"
"numpy computes it.");

/* Why: at t = 0.8 the test ran as ~10 numpy calls on a handful of candidates (5% of a
 * Reuters decision). */
static PyObject *
bitmap_keep(PyObject *self, PyObject *args)
{
    Py_buffer table, rows, query, sizes, out;
    Py_ssize_t width;
    long long size;
    double threshold;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*ny*y*y*Ldw*", &table, &width, &rows, &query, &sizes, &size,
                          &threshold, &out))
        return NULL;
    if (check(&table, 8, "table") || check(&rows, 8, "rows") || check(&query, 8, "query") ||
        check(&sizes, 8, "sizes"))
        goto done;
    {
        Py_ssize_t n = rows.len / 8;
        if (width <= 0 || query.len / 8 != width || (table.len / 8) % width) {
            PyErr_SetString(PyExc_ValueError, "query and table rows must have width words");
            goto done;
        }
        Py_ssize_t nrows = table.len / 8 / width;
        if (out.len != n || sizes.len / 8 != nrows) {
            PyErr_SetString(PyExc_ValueError, "out needs one bool per row index, sizes one "
                            "int64 per table row");
            goto done;
        }
        const uint64_t *tb = table.buf, *qb = query.buf;
        const int64_t *rw = rows.buf, *sz = sizes.buf;
        uint8_t *ob = out.buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (rw[i] < 0 || rw[i] >= nrows) {
                PyErr_SetString(PyExc_IndexError, "row index out of range of table");
                goto done;
            }
        }
        Py_ssize_t (*row_fn)(const uint64_t *, const uint64_t *, Py_ssize_t) = xor_popcount_row;
#ifdef HAVE_HW_POPCOUNT
        if (__builtin_cpu_supports("popcnt"))
            row_fn = xor_popcount_row_hw;
#endif
        for (Py_ssize_t i = 0; i < n; i++) {
            long long d = (long long)row_fn(tb + (Py_ssize_t)rw[i] * width, qb, width);
            long long theirs = sz[rw[i]], num = size + theirs - d;
            long long bound = num >= 0 ? num / 2 : -((-num + 1) / 2); /* floor, as numpy // */
            double denom = (double)(theirs > size ? theirs : size);
            ob[i] = (double)bound / denom >= threshold;
        }
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&query);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&out);
    return result;
}

PyDoc_STRVAR(order_prefix_doc,
"order_prefix(mixed, classes, shift, length, out) -> None\n\n"
"The ``length`` smallest of ``mixed`` (uint64, distinct) under the order (class, mixed),\n"
"class = classes[mixed >> shift] (uint8): written into ``out`` (uint64, ``length`` items)\n"
"in no particular order. The same set as OrderVersion.prefix in numpy.");

/* Why: a probe computes its prefix under every live order version (2-5 when the window
 * spans several snapshots), each a gather, a composite rank, an argpartition and a tie
 * check in numpy. Here: a histogram of the classes finds the class where the prefix
 * ends; below it every code is taken, in it a quickselect by mixed value. */
static PyObject *
order_prefix(PyObject *self, PyObject *args)
{
    Py_buffer mixed, classes, out;
    int shift;
    Py_ssize_t length;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*inw*", &mixed, &classes, &shift, &length, &out))
        return NULL;
    if (check(&mixed, 8, "mixed") || check(&out, 8, "out"))
        goto done;
    {
        Py_ssize_t n = mixed.len / 8, ncls = classes.len;
        const uint64_t *m = mixed.buf;
        const uint8_t *cl = classes.buf;
        uint64_t *o = out.buf;
        if (shift < 17 || shift > 63 || length < 0 || length > n || out.len / 8 != length ||
            (ncls != ((Py_ssize_t)1 << (64 - shift)))) {
            PyErr_SetString(PyExc_ValueError, "order_prefix: sizes do not fit");
            goto done;
        }
        uint64_t *tie = PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof(uint64_t));
        uint8_t *c = PyMem_RawMalloc((size_t)(n ? n : 1));
        if (tie == NULL || c == NULL) {
            PyMem_RawFree(tie);
            PyMem_RawFree(c);
            PyErr_NoMemory();
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        ndd_prefix_under(m, n, cl, shift, length, o, tie, c);
        Py_END_ALLOW_THREADS
        PyMem_RawFree(tie);
        PyMem_RawFree(c);
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&mixed);
    PyBuffer_Release(&classes);
    PyBuffer_Release(&out);
    return result;
}

PyDoc_STRVAR(count_filter_doc,
"count_filter(counts, facts, cap, slack, needed, unindexed, hours, sizes, out) -> k\n\n"
"Writes to ``out`` (int64) the positions i (ascending) with counts[i] > 0 (int32) that\n"
"pass the count filter, counts[i] + slack >= max(needed, N[i]) - max(unindexed, U[i]),\n"
"and whose hour H[i] and size S[i] lie in the inclusive ranges ``hours`` and ``sizes``\n"
"(pairs); N, U, H, S are the rows FACT_NEEDED, FACT_UNINDEXED, FACT_HOUR, FACT_SIZE of\n"
"``facts`` (int64, 4 x cap: kernels.Facts.table). Returns how many.");



/* One pass instead of numpy's dozen over the window's counters (ScopeWindow.candidates),
 * in chunks of FILTER_CHUNK documents: a branch-free pass sets a byte per document that
 * passes (the compiler vectorises it: AVX2 where the clone runs), then the passing
 * positions are collected eight bytes at a time. Why: the scalar loop with a branch per
 * document cost ~4 ns a document (at t = 0.8 on newswire most documents share a key or two
 * with the probe, so skipping zero counts did not help): 9% of a decision. */
#define FILTER_CHUNK 1024

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("avx2", "default")))
#endif
static void
filter_mask(const int32_t *restrict cn, const int64_t *restrict N, const int64_t *restrict U,
            const int64_t *restrict H, const int64_t *restrict S, Py_ssize_t n,
            int64_t slack, int64_t needed, int64_t unindexed, int64_t h0, int64_t h1,
            int64_t s0, int64_t s1, uint8_t *restrict mask)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t c = cn[i], a = N[i], u = U[i];
        int64_t need = (a > needed ? a : needed) - (u > unindexed ? u : unindexed);
        mask[i] = (uint8_t)((c > 0) & (c + slack >= need) & (H[i] >= h0) & (H[i] <= h1)
                            & (S[i] >= s0) & (S[i] <= s1));
    }
}

Py_ssize_t
ndd_filter(const int32_t *cn, const int64_t *F, Py_ssize_t cap, Py_ssize_t n, int64_t slack,
           int64_t needed, int64_t unindexed, int64_t h0, int64_t h1, int64_t s0, int64_t s1,
           int64_t *o)
{
    const int64_t *N = F + FACT_NEEDED * cap, *U = F + FACT_UNINDEXED * cap;
    const int64_t *H = F + FACT_HOUR * cap, *S = F + FACT_SIZE * cap;
    uint8_t mask[FILTER_CHUNK];
    Py_ssize_t k = 0;
    for (Py_ssize_t lo = 0; lo < n; lo += FILTER_CHUNK) {
        Py_ssize_t m = n - lo < FILTER_CHUNK ? n - lo : FILTER_CHUNK;
        filter_mask(cn + lo, N + lo, U + lo, H + lo, S + lo, m, slack, needed, unindexed, h0,
                    h1, s0, s1, mask);
        for (Py_ssize_t i = 0; i < m; i += 8) {
            uint64_t word = 0;
            if (i + 8 <= m)
                memcpy(&word, mask + i, 8);
            else
                for (Py_ssize_t j = i; j < m; j++)
                    word |= (uint64_t)mask[j] << (8 * (j - i));
            while (word) { /* lowest set byte first: positions stay ascending */
                int bit = __builtin_ctzll(word);
                o[k++] = lo + i + bit / 8;
                word &= word - 1;
            }
        }
    }
    return k;
}

static PyObject *
count_filter(PyObject *self, PyObject *args)
{
    Py_buffer counts, facts, out;
    Py_ssize_t cap;
    long long slack, needed, unindexed, h0, h1, s0, s1;
    if (!PyArg_ParseTuple(args, "y*y*nLLL(LL)(LL)w*", &counts, &facts, &cap, &slack, &needed,
                          &unindexed, &h0, &h1, &s0, &s1, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = counts.len / 4;
    if (check(&counts, 4, "counts") || check(&facts, 8, "facts") || check(&out, 8, "out"))
        goto done;
    if (cap < n || facts.len / 8 != FACT_ROWS * cap || out.len / 8 < n) {
        PyErr_SetString(PyExc_ValueError, "facts must be 4 x cap with cap >= len(counts), "
                        "out at least len(counts)");
        goto done;
    }
    {
        Py_ssize_t k = ndd_filter(counts.buf, facts.buf, cap, n, slack, needed, unindexed, h0,
                                  h1, s0, s1, out.buf);
        result = PyLong_FromSsize_t(k);
    }
done:
    PyBuffer_Release(&counts);
    PyBuffer_Release(&facts);
    PyBuffer_Release(&out);
    return result;
}

PyDoc_STRVAR(top_bits_doc,
"top_bits(mixed, shift, out, mode) -> None\n\n"
"For every code c of ``mixed`` (uint64), slot = c >> shift: mode 0 sets bit ``slot`` of\n"
"``out`` (uint64 words: a bitmap-filter bitmap), mode 1 adds 1 to ``out[slot]`` (uint32\n"
"counters: the order sketch) once per distinct slot, as numpy's ``out[slots] += 1`` does.");

/* Why: numpy's zeros + scatter + packbits (a bitmap) and buffered fancy add (the sketch)
 * cost ~20 us each per decision; these are one pass over the codes. */
static PyObject *
top_bits(PyObject *self, PyObject *args)
{
    Py_buffer mixed, out;
    int shift, mode;
    if (!PyArg_ParseTuple(args, "y*iw*i", &mixed, &shift, &out, &mode))
        return NULL;
    PyObject *result = NULL;
    if (check(&mixed, 8, "mixed") || check(&out, mode ? 4 : 8, "out"))
        goto done;
    if (shift < 1 || shift > 63 || mode < 0 || mode > 1) {
        PyErr_SetString(PyExc_ValueError, "shift must be in 1..63 and mode 0 or 1");
        goto done;
    }
    {
        const uint64_t *m = mixed.buf;
        Py_ssize_t n = mixed.len / 8;
        uint64_t slots = (uint64_t)1 << (64 - shift);
        if ((mode == 0 && (uint64_t)out.len * 8 < slots) || (mode == 1 && (uint64_t)out.len / 4 < slots)) {
            PyErr_SetString(PyExc_ValueError, "out is smaller than 2**(64 - shift) slots");
            goto done;
        }
        if (mode == 0) {
            uint64_t *w = out.buf;
            for (Py_ssize_t i = 0; i < n; i++) {
                uint64_t s_ = m[i] >> shift;
                w[s_ >> 6] |= (uint64_t)1 << (s_ & 63);
            }
        } else { /* mark each slot's top bit, then count each marked slot once */
            uint32_t *c = out.buf;
            for (Py_ssize_t i = 0; i < n; i++)
                c[m[i] >> shift] |= 0x80000000u;
            for (Py_ssize_t i = 0; i < n; i++) {
                uint32_t *x = &c[m[i] >> shift];
                if (*x & 0x80000000u)
                    *x = (*x & 0x7fffffffu) + 1;
            }
        }
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&mixed);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"top_bits", top_bits, METH_VARARGS, top_bits_doc},
    {"count_filter", count_filter, METH_VARARGS, count_filter_doc},
    {"order_prefix", order_prefix, METH_VARARGS, order_prefix_doc},
    {"probe_keys", ndd_probe_keys, METH_VARARGS, ndd_probe_keys_doc},
    {"fmix64", ndd_fmix64, METH_VARARGS, ndd_fmix64_doc},
    {"bitmap_keep", bitmap_keep, METH_VARARGS, bitmap_keep_doc},
    {"ascii_signature", ascii_signature, METH_VARARGS, ascii_signature_doc},
    {"figure_tokens", ndd_figure_tokens, METH_VARARGS, ndd_figure_tokens_doc},
    {"ascii_facts", ndd_ascii_facts, METH_VARARGS, ndd_ascii_facts_doc},
    {"prose_blocks", ndd_prose_blocks, METH_VARARGS, ndd_prose_blocks_doc},
    {"ascii_sign", ndd_ascii_sign, METH_VARARGS, ndd_ascii_sign_doc},
    {"count_blocks", ndd_count_blocks, METH_VARARGS, ndd_count_blocks_doc},
    {"count_candidates", ndd_count_candidates, METH_VARARGS, ndd_count_candidates_doc},
    {"dense_rows", ndd_dense_rows, METH_VARARGS, ndd_dense_rows_doc},
    {"wake_count_workers", ndd_wake_count_workers, METH_VARARGS, ndd_wake_count_workers_doc},
    {"intersection", intersection, METH_VARARGS, intersection_doc},
    {"xor_popcount", xor_popcount, METH_VARARGS, xor_popcount_doc},
    {"merge_csr", ndd_merge_csr, METH_VARARGS, ndd_merge_csr_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels", "C kernels of the ndd-stream detector.", -1, methods,
};

PyMODINIT_FUNC
PyInit__kernels(void)
{
    if (PyType_Ready(&ndd_BlockType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ndd_BlockType);
    if (PyModule_AddObject(m, "Block", (PyObject *)&ndd_BlockType) < 0) {
        Py_DECREF(&ndd_BlockType);
        Py_DECREF(m);
        return NULL;
    }
    if (ndd_engine_ready(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
