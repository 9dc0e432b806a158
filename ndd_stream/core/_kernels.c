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
 * merge_csr: merging two posting blocks of the index in one linear pass.
 *
 * No numpy C API: arguments are plain contiguous buffers (the buffer protocol), so the
 * extension builds with nothing but a C compiler and Python's headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(addr) __builtin_prefetch(addr)
#else
#define PREFETCH(addr) ((void)(addr))
#endif

static int
check(Py_buffer *b, Py_ssize_t itemsize, const char *name)
{
    if (b->len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: buffer of %zd bytes is not an array of %zd-byte items",
                     name, b->len, itemsize);
        return -1;
    }
    return 0;
}

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

PyDoc_STRVAR(merge_csr_doc,
"merge_csr(a_keys, a_offs, a_ids, b_keys, b_offs, b_ids, shift, keys, offs, ids) -> None\n\n"
"Merge two CSR posting blocks (keys uint32 ascending distinct, offs uint32, ids uint16)\n"
"into the preallocated ``keys`` (|A ∪ B| items), ``offs`` (|A ∪ B| + 1) and ``ids`` (all\n"
"postings). Under a key present in both, A's postings come first, then B's, each in its\n"
"own order; B's ids are increased by ``shift`` (results must fit 16 bits).");

/* Why: merging blocks was ~15% of a decision at a 50k window in numpy (repeat the keys,
 * concatenate, stable argsort, gather, find the runs: ~10 passes); both inputs are sorted,
 * so one linear merge that copies whole posting runs does it. */
static PyObject *
merge_csr(PyObject *self, PyObject *args)
{
    Py_buffer ak, ao, ai, bk, bo, bi, ok, oo, oi;
    long long shift;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*Lw*w*w*", &ak, &ao, &ai, &bk, &bo, &bi, &shift,
                          &ok, &oo, &oi))
        return NULL;
    if (check(&ak, 4, "a_keys") || check(&ao, 4, "a_offs") || check(&ai, 2, "a_ids") ||
        check(&bk, 4, "b_keys") || check(&bo, 4, "b_offs") || check(&bi, 2, "b_ids") ||
        check(&ok, 4, "keys") || check(&oo, 4, "offs") || check(&oi, 2, "ids"))
        goto done;
    {
        const uint32_t *xk = ak.buf, *xo = ao.buf, *yk = bk.buf, *yo = bo.buf;
        const uint16_t *xi = ai.buf, *yi = bi.buf;
        uint32_t *zk = ok.buf, *zo = oo.buf;
        uint16_t *zi = oi.buf;
        Py_ssize_t nx = ak.len / 4, ny = bk.len / 4, nz = ok.len / 4, pz = oi.len / 2;
        if (ao.len / 4 != nx + 1 || bo.len / 4 != ny + 1 || oo.len / 4 != nz + 1) {
            PyErr_SetString(PyExc_ValueError, "offs must have len(keys) + 1 items");
            goto done;
        }
        if ((Py_ssize_t)xo[nx] > ai.len / 2 || (Py_ssize_t)yo[ny] > bi.len / 2 ||
            (Py_ssize_t)xo[nx] - (Py_ssize_t)xo[0] + (Py_ssize_t)yo[ny] - (Py_ssize_t)yo[0] != pz) {
            PyErr_SetString(PyExc_ValueError, "ids must hold every posting of both blocks");
            goto done;
        }
        if (shift < 0 || shift > 65535) {
            PyErr_SetString(PyExc_ValueError, "shift must fit 16 bits");
            goto done;
        }
        Py_ssize_t i = 0, j = 0, k = 0, p = 0;
        int bad = 0;
        Py_BEGIN_ALLOW_THREADS
        while (i < nx || j < ny) {
            int take_x = j >= ny || (i < nx && xk[i] <= yk[j]);
            int take_y = i >= nx || (j < ny && yk[j] <= xk[i]);
            if (k >= nz) {
                bad = 1;
                break;
            }
            zk[k] = take_x ? xk[i] : yk[j];
            zo[k] = (uint32_t)p;
            if (take_x) {
                Py_ssize_t s = xo[i], e = xo[i + 1];
                if (s > e || p + (e - s) > pz) {
                    bad = 1;
                    break;
                }
                memcpy(zi + p, xi + s, (size_t)(e - s) * sizeof(uint16_t));
                p += e - s;
                i++;
            }
            if (take_y) {
                Py_ssize_t s = yo[j], e = yo[j + 1];
                if (s > e || p + (e - s) > pz) {
                    bad = 1;
                    break;
                }
                for (Py_ssize_t q = s; q < e; q++) {
                    long long v = (long long)yi[q] + shift;
                    if (v > 65535)
                        bad = 1;
                    zi[p++] = (uint16_t)v;
                }
                j++;
            }
            k++;
        }
        if (!bad && (k != nz || p != pz))
            bad = 1;
        else if (!bad)
            zo[k] = (uint32_t)p;
        Py_END_ALLOW_THREADS
        if (bad) {
            PyErr_SetString(PyExc_ValueError,
                            "merge_csr: output sizes or shifted ids do not fit the inputs");
            goto done;
        }
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&ak);
    PyBuffer_Release(&ao);
    PyBuffer_Release(&ai);
    PyBuffer_Release(&bk);
    PyBuffer_Release(&bo);
    PyBuffer_Release(&bi);
    PyBuffer_Release(&ok);
    PyBuffer_Release(&oo);
    PyBuffer_Release(&oi);
    return result;
}

/* ---- dense counting and the whole-index count ---------------------------------------
 *
 * Why: at t = 0.3 a decision at a 50k window counts ~33M postings, 95% of them under keys
 * held by >= 1/16 of a block's documents (common q-grams). Such a key also has a bitmap
 * over its block's documents (a "dense row", built with the block), and the rows a probe
 * hits are summed per document by carry-save adders into bit-sliced counters (Harley-Seal;
 * the positional popcount of Clausecker & Lemire, arXiv 2412.16370): ~6 word operations
 * per 64 documents and row instead of one counter increment per posting. Rare keys keep
 * their posting lists. count_blocks does every block of the index in one call, optionally
 * on several threads: probe keys shared out (sparse postings into private counters summed
 * at the end), then, past a gate, each block's dense rows added by every thread over its
 * share of the block's documents. */

#define CHUNK 16 /* words (1024 documents) of bit-sliced counters kept in L1 at a time */
#define MAX_SLICES 33

#define CSA(h, l, a, b, c)                                                                 \
    do {                                                                                   \
        __typeof__(a) u_ = (a) ^ (b);                                                      \
        (h) = ((a) & (b)) | (u_ & (c));                                                    \
        (l) = u_ ^ (c);                                                                    \
    } while (0)

/* Four words as one value (GCC/clang vector extension): 256-bit AVX2 operations where the
 * clone for AVX2 runs, two 128-bit SSE2 operations elsewhere. */
typedef uint64_t v4 __attribute__((vector_size(32)));

#define load4(p)                                                                           \
    __extension__({                                                                        \
        v4 v_;                                                                             \
        memcpy(&v_, (p), sizeof(v_));                                                      \
        v_;                                                                                \
    })

/* S[0..nslices) += rows, per bit, over words w0..w0+cw of each row: carry-save adders
 * over groups of 16 rows (Harley-Seal), the carry of each group rippled up, four words
 * at a time (rows are padded to a multiple of four words); other widths word by word. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("avx2", "default")))
#endif
static void
slice_add(uint64_t S[MAX_SLICES][CHUNK], int nslices, const uint64_t *bits, Py_ssize_t words,
          const int32_t *rows, Py_ssize_t nr, Py_ssize_t w0, int cw)
{
    Py_ssize_t r = 0;
    if (cw % 4 == 0) { /* rows are padded to whole groups of four words */
        int nv = cw / 4;
        v4 V[MAX_SLICES][CHUNK / 4];
        memcpy(V, S, sizeof(v4) * (CHUNK / 4) * (size_t)nslices);
        static const uint64_t zeros[CHUNK] = {0}; /* stands in for the rows past nr */
        for (; r < nr; r += 16) {
            const uint64_t *R[16];
            for (int i = 0; i < 16; i++)
                R[i] = r + i < nr ? bits + (Py_ssize_t)rows[r + i] * words + w0 : zeros;
            for (Py_ssize_t i = r + 16; i < r + 32 && i < nr; i++) {
                const uint64_t *q = bits + (Py_ssize_t)rows[i] * words + w0;
                PREFETCH(q);
                PREFETCH(q + 8);
            }
            for (int w = 0; w < nv; w++) {
                v4 ones = V[0][w], twos = V[1][w], fours = V[2][w], eights = V[3][w];
                v4 twosA, twosB, foursA, foursB, eightsA, eightsB, sixteens;
                int o = 4 * w;
                CSA(twosA, ones, ones, load4(R[0] + o), load4(R[1] + o));
                CSA(twosB, ones, ones, load4(R[2] + o), load4(R[3] + o));
                CSA(foursA, twos, twos, twosA, twosB);
                CSA(twosA, ones, ones, load4(R[4] + o), load4(R[5] + o));
                CSA(twosB, ones, ones, load4(R[6] + o), load4(R[7] + o));
                CSA(foursB, twos, twos, twosA, twosB);
                CSA(eightsA, fours, fours, foursA, foursB);
                CSA(twosA, ones, ones, load4(R[8] + o), load4(R[9] + o));
                CSA(twosB, ones, ones, load4(R[10] + o), load4(R[11] + o));
                CSA(foursA, twos, twos, twosA, twosB);
                CSA(twosA, ones, ones, load4(R[12] + o), load4(R[13] + o));
                CSA(twosB, ones, ones, load4(R[14] + o), load4(R[15] + o));
                CSA(foursB, twos, twos, twosA, twosB);
                CSA(eightsB, fours, fours, foursA, foursB);
                CSA(sixteens, eights, eights, eightsA, eightsB);
                V[0][w] = ones;
                V[1][w] = twos;
                V[2][w] = fours;
                V[3][w] = eights;
                for (int k = 4; k < nslices; k++) { /* ripple the carry up */
                    v4 t = V[k][w] & sixteens;
                    V[k][w] ^= sixteens;
                    sixteens = t;
                }
            }
        }
        memcpy(S, V, sizeof(v4) * (CHUNK / 4) * (size_t)nslices);
    }
    for (; r < nr; r++) {
        const uint64_t *R = bits + (Py_ssize_t)rows[r] * words + w0;
        for (int w = 0; w < cw; w++) {
            uint64_t c = R[w];
            for (int k = 0; k < nslices; k++) {
                uint64_t t = S[k][w] & c;
                S[k][w] ^= c;
                c = t;
            }
        }
    }
}

/* counts[shift + d] += how many of ``rows`` have bit d, for every in-range document d of
 * words wbeg..wend-1 (multiples of four, or wend = words) of the rows. */
static long long
dense_add(const uint64_t *bits, Py_ssize_t words, const int32_t *rows, Py_ssize_t nr,
          long long shift, int32_t *cn, Py_ssize_t nc, Py_ssize_t wbeg, Py_ssize_t wend)
{
    if (nr <= 0 || words <= 0)
        return 0;
    int nslices = 4;
    while (nslices < MAX_SLICES && ((long long)1 << nslices) <= nr)
        nslices++;
    uint64_t S[MAX_SLICES][CHUNK];
    long long total = 0;
    Py_ssize_t wlo = 0, whi = words;
    if (shift < 0)
        wlo = (Py_ssize_t)((-shift) / 64);
    long long last = (long long)nc - shift; /* first document past the counters */
    if (last <= 0)
        return 0;
    if ((last + 63) / 64 < whi)
        whi = (Py_ssize_t)((last + 63) / 64);
    /* Whole groups of four words (rows are padded to them): out-of-range bits of the
     * edge words are skipped below. */
    wlo -= wlo % 4;
    whi += (4 - whi % 4) % 4;
    if (whi > words)
        whi = words;
    if (wlo < wbeg)
        wlo = wbeg;
    if (whi > wend)
        whi = wend;
    for (Py_ssize_t w0 = wlo; w0 < whi; w0 += CHUNK) {
        int cw = (int)(whi - w0 < CHUNK ? whi - w0 : CHUNK);
        memset(S, 0, sizeof(S));
        slice_add(S, nslices, bits, words, rows, nr, w0, cw);
        for (int k = 0; k < nslices; k++) {
            int32_t add = (int32_t)1 << k;
            for (int w = 0; w < cw; w++) {
                uint64_t x = S[k][w];
                long long at = shift + (long long)(w0 + w) * 64;
                while (x) {
                    long long pos = at + __builtin_ctzll(x);
                    x &= x - 1;
                    if (pos >= 0 && pos < nc) {
                        cn[pos] += add;
                        total += add;
                    }
                }
            }
        }
    }
    return total;
}

typedef struct {
    Py_buffer ukeys, offs, ids, dir, rowmap, dense;
    int bits, has_dense;
    long long lo;
    Py_ssize_t words;
} block_t;

typedef struct gate gate_t;

typedef struct job {
    const block_t *blocks;
    int nb;
    const uint32_t *probe; /* this thread's share of the probe keys */
    Py_ssize_t np_;
    long long base;
    int32_t *cn; /* where this thread's sparse counts go (private but for thread 0) */
    Py_ssize_t nc;
    long long total;
    int failed;
    /* Threaded counts only: dense rows are not counted per thread but gathered per block
     * (rows[b * stride ..], nrows[b]) and, after the gate, every thread adds the rows of all
     * threads over its own share of each block's documents into ``shared`` (the caller's
     * counts). */
    int t, nt;
    struct job *all;
    gate_t *gate;
    int32_t *rows;
    Py_ssize_t *nrows, stride;
    int32_t *shared;
} job_t;

/* One block: sparse keys by posting scan, dense keys by dense_add. ``at``, ``end`` and
 * ``rows`` have np_ items each.
 *
 * Why a directory and not a binary search: the index is far larger than the caches, and
 * a binary search is a chain of ~17 dependent cache misses per key and block; the keys are
 * uniform hash values, so the directory (for every value of a key's top ``bits`` bits, the
 * first position of a key with top bits >= it) finds a key's slot in ~2 independent loads.
 * Group prefetching: each stage issues the loads of every probe key before the next stage
 * uses them, so the ~4 cache misses per (key, block) overlap instead of forming one
 * dependent chain per key. */
static long long
count_one(const block_t *b, const uint32_t *pr, Py_ssize_t np_, long long base, int32_t *cn,
          Py_ssize_t nc, Py_ssize_t *at, Py_ssize_t *end, int32_t *rows, Py_ssize_t *nr_out,
          int *failed)
{
    const uint32_t *uk = b->ukeys.buf, *dr = b->dir.buf, *of = b->offs.buf;
    const uint16_t *id = b->ids.buf;
    const int32_t *rm = b->has_dense ? b->rowmap.buf : NULL;
    Py_ssize_t nk = b->ukeys.len / 4, nids = b->ids.len / 2, nr = 0;
    Py_ssize_t nrows = b->has_dense && b->words ? b->dense.len / 8 / b->words : 0;
    long long shift = b->lo - base, total = 0;
    int down = 32 - b->bits;
    for (Py_ssize_t p = 0; p < np_; p++) {
        uint64_t v = down >= 32 ? 0 : (uint64_t)(pr[p] >> down);
        at[p] = (Py_ssize_t)v;
        PREFETCH(&dr[v]);
    }
    for (Py_ssize_t p = 0; p < np_; p++) {
        uint64_t v = (uint64_t)at[p];
        Py_ssize_t a = dr[v], e = dr[v + 1];
        at[p] = a;
        end[p] = e > nk ? nk : e;
        if (a < nk)
            PREFETCH(&uk[a]);
    }
    for (Py_ssize_t p = 0; p < np_; p++) {
        uint32_t key = pr[p];
        Py_ssize_t a = at[p], e = end[p];
        while (a < e && uk[a] < key)
            a++;
        if (a >= e || uk[a] != key) {
            at[p] = -1;
            continue;
        }
        at[p] = a;
        if (rm != NULL)
            PREFETCH(&rm[a]);
        else
            PREFETCH(&of[a]);
    }
    if (rm != NULL) {
        for (Py_ssize_t p = 0; p < np_; p++) {
            Py_ssize_t a = at[p];
            if (a < 0)
                continue;
            if (rm[a] >= 0) {
                if (rm[a] >= nrows) {
                    *failed = 1;
                    return 0;
                }
                rows[nr++] = rm[a];
                at[p] = -1;
                continue;
            }
            PREFETCH(&of[a]);
        }
    }
    for (Py_ssize_t p = 0; p < np_; p++) {
        Py_ssize_t a = at[p];
        if (a < 0)
            continue;
        Py_ssize_t s = of[a], e = of[a + 1];
        if (e > nids || s > e) {
            at[p] = -1;
            continue;
        }
        at[p] = s;
        end[p] = e;
        PREFETCH(&id[s]);
    }
    for (Py_ssize_t p = 0; p < np_; p++) {
        if (at[p] < 0)
            continue;
        Py_ssize_t q = p + 4;
        if (q < np_ && at[q] >= 0 && end[q] - at[q] > 32)
            PREFETCH(&id[at[q] + 32]);
        for (Py_ssize_t j = at[p]; j < end[p]; j++) {
            long long pos = shift + (long long)id[j];
            if (pos >= 0 && pos < nc) {
                cn[pos]++;
                total++;
            }
        }
    }
    if (nr_out != NULL) /* the caller adds the rows (threaded: split by documents) */
        *nr_out = nr;
    else if (nr)
        total += dense_add(b->dense.buf, b->words, rows, nr, shift, cn, nc, 0, b->words);
    return total;
}

/* Looks the job's keys up in every block: sparse keys counted into j->cn, dense rows
 * added at once (one thread) or gathered for job_dense (threads). */
static void
job_lookup(job_t *j)
{
    Py_ssize_t n = j->np_ ? j->np_ : 1;
    Py_ssize_t *at = malloc((size_t)n * 2 * sizeof(Py_ssize_t));
    int32_t *rows = j->rows != NULL ? NULL : malloc((size_t)n * sizeof(int32_t));
    if (at == NULL || (j->rows == NULL && rows == NULL)) {
        j->failed = 2;
    } else {
        for (int i = 0; i < j->nb && !j->failed; i++) {
            int gather = j->rows != NULL;
            j->total += count_one(&j->blocks[i], j->probe, j->np_, j->base, j->cn, j->nc, at,
                                  at + n, gather ? j->rows + (size_t)i * j->stride : rows,
                                  gather ? &j->nrows[i] : NULL, &j->failed);
        }
    }
    free(at);
    free(rows);
}

/* Threaded counts: the dense rows all threads found in each block, added over this
 * thread's share of the block's words. Why split by documents and not by rows: adding rows
 * ends with converting bit-sliced counters into counts for every document of the block,
 * which split by rows every thread did in full (two threads were 0.8x one on Reuters). */
static void
job_dense(job_t *j, int32_t *scratch)
{
    for (int i = 0; i < j->nb; i++) {
        const block_t *b = &j->blocks[i];
        Py_ssize_t nr = 0;
        for (int t = 0; t < j->nt; t++) {
            const job_t *o = &j->all[t];
            memcpy(scratch + nr, o->rows + (size_t)i * o->stride,
                   (size_t)o->nrows[i] * sizeof(int32_t));
            nr += o->nrows[i];
        }
        if (nr == 0 || !b->has_dense)
            continue;
        Py_ssize_t quads = b->words / 4; /* split on whole groups of four words */
        Py_ssize_t w0 = 4 * (quads * j->t / j->nt);
        Py_ssize_t w1 = j->t + 1 == j->nt ? b->words : 4 * (quads * (j->t + 1) / j->nt);
        j->total += dense_add(b->dense.buf, b->words, scratch, nr, b->lo - j->base, j->shared,
                              j->nc, w0, w1);
    }
}

#ifndef _WIN32
#include <pthread.h>
#define HAVE_THREADS 1
#endif

/* A one-shot gate: every thread's lookups (and so every dense row) are done before any
 * thread adds dense rows. */
struct gate {
#ifdef HAVE_THREADS
    pthread_mutex_t mutex;
    pthread_cond_t cond;
#endif
    int parties, arrived;
};

static void
gate_pass(gate_t *g, int arrivals)
{
#ifdef HAVE_THREADS
    pthread_mutex_lock(&g->mutex);
    g->arrived += arrivals;
    if (g->arrived >= g->parties)
        pthread_cond_broadcast(&g->cond);
    while (g->arrived < g->parties)
        pthread_cond_wait(&g->cond, &g->mutex);
    pthread_mutex_unlock(&g->mutex);
#else
    g->arrived += arrivals;
#endif
}

typedef struct {
    job_t *job;
    int32_t *scratch;
} worker_t;

static void *
run_worker(void *arg)
{
    worker_t *w = arg;
    job_lookup(w->job); /* a failed job still passes the gate: the others wait for it */
    gate_pass(w->job->gate, 1);
    job_dense(w->job, w->scratch);
    return NULL;
}

#ifdef HAVE_THREADS
/* Count workers that stay: creating and joining a thread per count cost ~60 us on the
 * benchmark VM, more than a whole count on newswire at t = 0.8 (two threads measured
 * 0.4x one there). Workers wait on a condition variable between counts. One caller at a
 * time owns them (``owner``); a concurrent caller does every share itself. After fork()
 * the child has none of the threads: the handler forgets them, and the next count starts
 * new ones. */
static struct {
    pthread_mutex_t owner, mu;
    pthread_cond_t work, done;
    int nworkers, ntasks, finished;
    unsigned long generation;
    worker_t *tasks;
    int atfork;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL, 0};

static unsigned long pool_born[64]; /* the generation each worker was started in */

static void
pool_after_fork_in_child(void)
{
    pthread_mutex_init(&pool.owner, NULL);
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.work, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.nworkers = pool.ntasks = pool.finished = 0;
    pool.tasks = NULL;
}

static void *
pool_worker(void *arg)
{
    int k = (int)(intptr_t)arg; /* this worker runs tasks[k] of a generation */
    pthread_mutex_lock(&pool.mu);
    unsigned long seen = pool_born[k]; /* not pool.generation: a task may be posted already */
    for (;;) {
        while (pool.generation == seen)
            pthread_cond_wait(&pool.work, &pool.mu);
        seen = pool.generation;
        if (k >= pool.ntasks)
            continue;
        worker_t *w = &pool.tasks[k];
        pthread_mutex_unlock(&pool.mu);
        run_worker(w);
        pthread_mutex_lock(&pool.mu);
        if (++pool.finished >= pool.ntasks)
            pthread_cond_signal(&pool.done);
    }
    return NULL;
}

/* At least ``want`` workers if they can be started; how many there are (caller owns). */
static int
pool_grow(int want)
{
    if (!pool.atfork) {
        pthread_atfork(NULL, NULL, pool_after_fork_in_child);
        pool.atfork = 1;
    }
    while (pool.nworkers < want) {
        pthread_t tid;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pool_born[pool.nworkers] = pool.generation; /* no task posted while we own it */
        int ok = pthread_create(&tid, &attr, pool_worker, (void *)(intptr_t)pool.nworkers) == 0;
        pthread_attr_destroy(&attr);
        if (!ok)
            break;
        pthread_mutex_lock(&pool.mu);
        pool.nworkers++;
        pthread_mutex_unlock(&pool.mu);
    }
    return pool.nworkers;
}
#endif

/* jobs[0] on the calling thread, the others on the pool's workers; a job no worker takes
 * is done on the calling thread too, on both sides of the gate. */
static void
run_threads(job_t *jobs, int nt, int32_t *scratch, size_t per_scratch)
{
    gate_t gate;
    gate.parties = nt;
    gate.arrived = 0;
    worker_t workers[64];
    int handed = 0; /* jobs 1..handed go to workers */
#ifdef HAVE_THREADS
    pthread_mutex_init(&gate.mutex, NULL);
    pthread_cond_init(&gate.cond, NULL);
#endif
    for (int t = 0; t < nt; t++) {
        jobs[t].gate = &gate;
        workers[t] = (worker_t){&jobs[t], scratch + (size_t)t * per_scratch};
    }
#ifdef HAVE_THREADS
    int owned = pthread_mutex_trylock(&pool.owner) == 0;
    if (owned) {
        handed = pool_grow(nt - 1);
        if (handed > nt - 1)
            handed = nt - 1;
        pthread_mutex_lock(&pool.mu);
        pool.tasks = &workers[1];
        pool.ntasks = handed;
        pool.finished = 0;
        pool.generation++;
        pthread_cond_broadcast(&pool.work);
        pthread_mutex_unlock(&pool.mu);
    }
#endif
    int mine = 1;
    job_lookup(&jobs[0]);
    for (int t = handed + 1; t < nt; t++) {
        job_lookup(&jobs[t]);
        mine++;
    }
    gate_pass(&gate, mine);
    job_dense(&jobs[0], workers[0].scratch);
    for (int t = handed + 1; t < nt; t++)
        job_dense(&jobs[t], workers[t].scratch);
#ifdef HAVE_THREADS
    if (owned) {
        pthread_mutex_lock(&pool.mu);
        while (pool.finished < handed)
            pthread_cond_wait(&pool.done, &pool.mu);
        pool.tasks = NULL;
        pool.ntasks = 0;
        pthread_mutex_unlock(&pool.mu);
        pthread_mutex_unlock(&pool.owner);
    }
    pthread_cond_destroy(&gate.cond);
    pthread_mutex_destroy(&gate.mutex);
#endif
}

PyDoc_STRVAR(count_blocks_doc,
"count_blocks(blocks, probe, base, counts, threads) -> postings\n\n"
"For every key of ``probe`` (uint32, ascending) found in a block's ``ukeys`` (uint32,\n"
"ascending, distinct), add 1 to ``counts[lo + ids[j] - base]`` (int32; ids uint16) for\n"
"each of its postings j in ``offs[i]:offs[i+1]`` (uint32), skipping postings outside\n"
"``counts``; ``directory`` (uint32, 2**bits + 1 items) holds for every value v of a key's\n"
"top ``bits`` bits the first position of a key with top bits >= v. ``blocks`` is a\n"
"sequence of tuples (ukeys, offs, ids,\n"
"directory, bits, lo, rowmap, dense, words): ``rowmap`` (int32, one per key; -1 = sparse)\n"
"gives a dense key's row in ``dense`` (uint64, rows x words: bit d of a row = document\n"
"lo + d holds the key); rowmap and dense may be None. Dense keys are counted from their\n"
"rows, the others from their postings. ``threads`` > 1 shares the probe keys out among\n"
"that many threads (the GIL released; worker threads that stay between counts) and the\n"
"dense rows' documents. Returns the postings counted.");

static PyObject *
count_blocks(PyObject *self, PyObject *args)
{
    PyObject *seq_in;
    Py_buffer probe, counts;
    long long base;
    int threads;
    PyObject *result = NULL, *seq = NULL;
    block_t *blocks = NULL;
    Py_ssize_t nb = 0, parsed = 0;
    if (!PyArg_ParseTuple(args, "Oy*Lw*i", &seq_in, &probe, &base, &counts, &threads))
        return NULL;
    if (check(&probe, 4, "probe") || check(&counts, 4, "counts"))
        goto done;
    seq = PySequence_Fast(seq_in, "blocks must be a sequence");
    if (seq == NULL)
        goto done;
    nb = PySequence_Fast_GET_SIZE(seq);
    blocks = PyMem_Calloc((size_t)(nb ? nb : 1), sizeof(block_t));
    if (blocks == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nb; i++) {
        block_t *b = &blocks[i];
        PyObject *rowmap, *dense;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "y*y*y*y*iLOOn", &b->ukeys,
                              &b->offs, &b->ids, &b->dir, &b->bits, &b->lo, &rowmap, &dense,
                              &b->words))
            goto done;
        parsed = i + 1;
        if (rowmap != Py_None && dense != Py_None) {
            if (PyObject_GetBuffer(rowmap, &b->rowmap, PyBUF_SIMPLE) < 0)
                goto done;
            if (PyObject_GetBuffer(dense, &b->dense, PyBUF_SIMPLE) < 0) {
                PyBuffer_Release(&b->rowmap);
                goto done;
            }
            b->has_dense = 1;
        }
        Py_ssize_t nk = b->ukeys.len / 4;
        if (check(&b->ukeys, 4, "ukeys") || check(&b->offs, 4, "offs") ||
            check(&b->ids, 2, "ids") || check(&b->dir, 4, "directory"))
            goto done;
        if (b->offs.len / 4 != nk + 1 || (nk && (Py_ssize_t)((uint32_t *)b->offs.buf)[nk] >
                                                    b->ids.len / 2)) {
            PyErr_SetString(PyExc_ValueError, "offs must have len(ukeys) + 1 items within ids");
            goto done;
        }
        if (b->bits < 0 || b->bits > 31 || b->dir.len / 4 != ((Py_ssize_t)1 << b->bits) + 1) {
            PyErr_SetString(PyExc_ValueError, "directory must have 2**bits + 1 items");
            goto done;
        }
        if (b->has_dense && (b->rowmap.len != nk * 4 || b->words <= 0 ||
                             b->dense.len % (8 * b->words))) {
            PyErr_SetString(PyExc_ValueError, "rowmap must have one int32 per key and dense "
                            "whole rows of words uint64");
            goto done;
        }
    }
    {
        Py_ssize_t np_ = probe.len / 4, nc = counts.len / 4;
        int nt = threads < 1 ? 1 : threads;
        if (nt > np_ / 16) /* a few keys per thread at least */
            nt = np_ >= 32 ? (int)(np_ / 16) : 1;
#ifndef HAVE_THREADS
        nt = 1;
#endif
        job_t jobs[64];
        int32_t *priv = NULL, *gathered = NULL;
        Py_ssize_t *nrows = NULL;
        if (nt > 64)
            nt = 64;
        Py_ssize_t share = (np_ + nt - 1) / nt + 1; /* rows per block and thread, at most */
        if (nt > 1) {
            priv = PyMem_RawCalloc((size_t)(nt - 1) * (size_t)(nc ? nc : 1), sizeof(int32_t));
            gathered = PyMem_RawMalloc((size_t)nt * (size_t)(nb ? nb : 1) * (size_t)share
                                       * sizeof(int32_t) + (size_t)nt * (size_t)(np_ + 1)
                                       * sizeof(int32_t));
            nrows = PyMem_RawCalloc((size_t)nt * (size_t)(nb ? nb : 1), sizeof(Py_ssize_t));
            if (priv == NULL || gathered == NULL || nrows == NULL)
                nt = 1;
        }
        /* Share the probe keys out: each thread looks its share up in every block (keys
         * are spread evenly over blocks and documents, so the shares weigh the same,
         * which whole blocks of unequal size do not); dense rows, see job_dense. */
        int32_t *scratch = nt > 1 ? gathered + (size_t)nt * (size_t)(nb ? nb : 1) * (size_t)share
                                  : NULL;
        for (int t = 0; t < nt; t++) {
            Py_ssize_t p0 = np_ * t / nt, p1 = np_ * (t + 1) / nt;
            jobs[t] = (job_t){blocks, (int)nb, (const uint32_t *)probe.buf + p0, p1 - p0, base,
                              t == 0 ? (int32_t *)counts.buf : priv + (size_t)(t - 1) * nc,
                              nc, 0, 0, t, nt, jobs, NULL,
                              nt > 1 ? gathered + (size_t)t * (size_t)(nb ? nb : 1) * (size_t)share
                                     : NULL,
                              nt > 1 ? nrows + (size_t)t * (size_t)(nb ? nb : 1) : NULL, share,
                              (int32_t *)counts.buf};
        }
        int failed = 0;
        long long total = 0;
        Py_BEGIN_ALLOW_THREADS
        if (nt == 1) {
            job_lookup(&jobs[0]);
        } else {
            run_threads(jobs, nt, scratch, (size_t)np_ + 1);
        }
        for (int t = 0; t < nt; t++) {
            failed |= jobs[t].failed;
            total += jobs[t].total;
        }
        if (!failed) {
            int32_t *cn = counts.buf;
            for (int t = 1; t < nt; t++) {
                const int32_t *src = priv + (size_t)(t - 1) * nc;
                for (Py_ssize_t i = 0; i < nc; i++)
                    cn[i] += src[i];
            }
        }
        Py_END_ALLOW_THREADS
        PyMem_RawFree(gathered);
        PyMem_RawFree(nrows);
        PyMem_RawFree(priv);
        if (failed == 2)
            PyErr_NoMemory();
        else if (failed)
            PyErr_SetString(PyExc_ValueError, "rowmap points past the dense rows");
        else
            result = PyLong_FromLongLong(total);
    }
done:
    for (Py_ssize_t i = 0; i < parsed; i++) {
        block_t *b = &blocks[i];
        PyBuffer_Release(&b->ukeys);
        PyBuffer_Release(&b->offs);
        PyBuffer_Release(&b->ids);
        PyBuffer_Release(&b->dir);
        if (b->has_dense) {
            PyBuffer_Release(&b->rowmap);
            PyBuffer_Release(&b->dense);
        }
    }
    PyMem_Free(blocks);
    Py_XDECREF(seq);
    PyBuffer_Release(&probe);
    PyBuffer_Release(&counts);
    return result;
}

PyDoc_STRVAR(dense_rows_doc,
"dense_rows(offs, ids, keys, words, out) -> None\n\n"
"For the i-th index of ``keys`` (int64 positions into the block's keys), set bit ids[j] of\n"
"row i of ``out`` (uint64, len(keys) x words, zeroed) for each posting j of that key.");

static PyObject *
dense_rows(PyObject *self, PyObject *args)
{
    Py_buffer offs, ids, keys, out;
    Py_ssize_t words;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*nw*", &offs, &ids, &keys, &words, &out))
        return NULL;
    if (check(&offs, 4, "offs") || check(&ids, 2, "ids") || check(&keys, 8, "keys") ||
        check(&out, 8, "out"))
        goto done;
    {
        const uint32_t *of = offs.buf;
        const uint16_t *id = ids.buf;
        const int64_t *ky = keys.buf;
        uint64_t *ob = out.buf;
        Py_ssize_t nk = offs.len / 4 - 1, nids = ids.len / 2, n = keys.len / 8;
        if (words <= 0 || out.len / 8 != n * words) {
            PyErr_SetString(PyExc_ValueError, "out must have len(keys) x words items");
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (ky[i] < 0 || ky[i] >= nk || of[ky[i] + 1] > nids || of[ky[i]] > of[ky[i] + 1]) {
                PyErr_SetString(PyExc_IndexError, "dense_rows: key or offsets out of range");
                goto done;
            }
            uint64_t *row = ob + i * words;
            for (Py_ssize_t j = of[ky[i]]; j < of[ky[i] + 1]; j++) {
                Py_ssize_t d = id[j];
                if (d / 64 >= words) {
                    PyErr_SetString(PyExc_IndexError, "dense_rows: id past the row");
                    goto done;
                }
                row[d / 64] |= (uint64_t)1 << (d % 64);
            }
        }
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&offs);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&keys);
    PyBuffer_Release(&out);
    return result;
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
        uint32_t *a = PyMem_RawMalloc((size_t)n * 2 * sizeof(uint32_t));
        if (a == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        uint32_t *b = a + n;
        uint64_t *o = out.buf;
        Py_ssize_t m = 0;
        Py_BEGIN_ALLOW_THREADS
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
        Py_END_ALLOW_THREADS
        PyMem_RawFree(a < b ? a : b);
        result = PyLong_FromSsize_t(m);
    }
done:
    PyBuffer_Release(&nf);
    PyBuffer_Release(&out);
    return result;
}

/* The k smallest of a[0..n) moved to a[0..k) (any order): quickselect, median of three. */
static void
select_smallest(uint64_t *a, Py_ssize_t n, Py_ssize_t k)
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
        Py_ssize_t hist[257] = {0};
        for (Py_ssize_t i = 0; i < n; i++) {
            c[i] = cl[m[i] >> shift];
            hist[c[i]]++;
        }
        int last = 0; /* the class in which the prefix ends */
        Py_ssize_t below = 0;
        while (last < 255 && below + hist[last] < length)
            below += hist[last++];
        Py_ssize_t k = 0, t = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (c[i] < last)
                o[k++] = m[i];
            else if (c[i] == last)
                tie[t++] = m[i];
        }
        Py_ssize_t need = length - k;
        if (need > 0) {
            select_smallest(tie, t, need);
            memcpy(o + k, tie, (size_t)need * sizeof(uint64_t));
        }
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
"(pairs); N, U, H, S are rows 0-3 of ``facts`` (int64, 4 x cap). Returns how many.");

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
    if (cap < n || facts.len / 8 != 4 * cap || out.len / 8 < n) {
        PyErr_SetString(PyExc_ValueError, "facts must be 4 x cap with cap >= len(counts), "
                        "out at least len(counts)");
        goto done;
    }
    {
        const int32_t *cn = counts.buf;
        const int64_t *N = facts.buf, *U = N + cap, *H = U + cap, *S = H + cap;
        int64_t *o = out.buf;
        uint8_t mask[FILTER_CHUNK];
        Py_ssize_t k = 0;
        for (Py_ssize_t lo = 0; lo < n; lo += FILTER_CHUNK) {
            Py_ssize_t m = n - lo < FILTER_CHUNK ? n - lo : FILTER_CHUNK;
            filter_mask(cn + lo, N + lo, U + lo, H + lo, S + lo, m, slack, needed, unindexed,
                        h0, h1, s0, s1, mask);
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

PyDoc_STRVAR(directory_doc,
"directory(ukeys, bits, out) -> None\n\n"
"``out`` (uint32, 2**bits + 1 items): for every value v of a key's top ``bits`` bits, the\n"
"first position in ``ukeys`` (uint32, ascending) of a key whose top bits are >= v.");

static PyObject *
directory_c(PyObject *self, PyObject *args)
{
    Py_buffer ukeys, out;
    int bits;
    if (!PyArg_ParseTuple(args, "y*iw*", &ukeys, &bits, &out))
        return NULL;
    PyObject *result = NULL;
    if (check(&ukeys, 4, "ukeys") || check(&out, 4, "out"))
        goto done;
    if (bits < 1 || bits > 31 || out.len / 4 != ((Py_ssize_t)1 << bits) + 1) {
        PyErr_SetString(PyExc_ValueError, "out must have 2**bits + 1 items, bits in 1..31");
        goto done;
    }
    {
        const uint32_t *k = ukeys.buf;
        uint32_t *d = out.buf;
        Py_ssize_t n = ukeys.len / 4, v = 0, top = (Py_ssize_t)1 << bits;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t h = (Py_ssize_t)(k[i] >> (32 - bits));
            while (v <= h)
                d[v++] = (uint32_t)i;
        }
        while (v <= top)
            d[v++] = (uint32_t)n;
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&ukeys);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"top_bits", top_bits, METH_VARARGS, top_bits_doc},
    {"directory", directory_c, METH_VARARGS, directory_doc},
    {"count_filter", count_filter, METH_VARARGS, count_filter_doc},
    {"order_prefix", order_prefix, METH_VARARGS, order_prefix_doc},
    {"ascii_signature", ascii_signature, METH_VARARGS, ascii_signature_doc},
    {"count_blocks", count_blocks, METH_VARARGS, count_blocks_doc},
    {"dense_rows", dense_rows, METH_VARARGS, dense_rows_doc},
    {"intersection", intersection, METH_VARARGS, intersection_doc},
    {"xor_popcount", xor_popcount, METH_VARARGS, xor_popcount_doc},
    {"merge_csr", merge_csr, METH_VARARGS, merge_csr_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels", "C kernels of the ndd-stream detector.", -1, methods,
};

PyMODINIT_FUNC
PyInit__kernels(void)
{
    return PyModule_Create(&module);
}
