/* Hot loops of the detector in C (optional: ndd_stream.core.kernels falls back to numpy).
 *
 * count_block: counting the postings a probe shares with each window document is ~80% of
 * a decision in numpy (a dozen array passes over ~1M postings at a 50k-document window);
 * here it is one pass, one increment per posting.
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

PyDoc_STRVAR(count_block_doc,
"count_block(ukeys, offs, ids, directory, bits, lo, probe, base, counts) -> postings\n\n"
"For every key of ``probe`` (uint32) found in the block's ``ukeys`` (uint32, ascending,\n"
"distinct), add 1 to ``counts[lo + ids[j] - base]`` (int32; ids are uint16) for each of\n"
"its postings j in ``offs[i]:offs[i+1]`` (uint32); postings outside ``counts`` are\n"
"skipped. ``directory`` (uint32, 2**bits + 1 items) holds, for every value v of a key's\n"
"top ``bits`` bits, the first position in ``ukeys`` of a key with top bits >= v. Returns\n"
"the postings counted.");

/* Why a directory and not a binary search: the index is far larger than the caches, and
 * a binary search is a chain of ~17 dependent cache misses per key and block; the keys are
 * uniform hash values, so the directory finds a key's slot in ~2 independent loads, and
 * the loads of consecutive keys overlap in the memory system. */
static PyObject *
count_block(PyObject *self, PyObject *args)
{
    Py_buffer ukeys, offs, ids, dir, probe, counts;
    int bits;
    long long lo, base;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*y*iLy*Lw*", &ukeys, &offs, &ids, &dir, &bits, &lo,
                          &probe, &base, &counts))
        return NULL;
    if (check(&ukeys, 4, "ukeys") || check(&offs, 4, "offs") || check(&ids, 2, "ids") ||
        check(&dir, 4, "directory") || check(&probe, 4, "probe") || check(&counts, 4, "counts"))
        goto done;
    {
        const uint32_t *uk = ukeys.buf, *pr = probe.buf, *dr = dir.buf, *of = offs.buf;
        const uint16_t *id = ids.buf;
        int32_t *cn = counts.buf;
        Py_ssize_t nk = ukeys.len / 4, np_ = probe.len / 4, nids = ids.len / 2;
        Py_ssize_t nc = counts.len / 4;
        if (offs.len / 4 != nk + 1) {
            PyErr_SetString(PyExc_ValueError, "offs must have len(ukeys) + 1 items");
            goto done;
        }
        if (bits < 0 || bits > 31 || dir.len / 4 != ((Py_ssize_t)1 << bits) + 1) {
            PyErr_SetString(PyExc_ValueError, "directory must have 2**bits + 1 items");
            goto done;
        }
        if (nk && (Py_ssize_t)of[nk] > nids) {
            PyErr_SetString(PyExc_ValueError, "offs out of range of ids");
            goto done;
        }
        long long shift = lo - base, total = 0;
        int down = 32 - bits;
        Py_ssize_t *at = PyMem_RawMalloc((size_t)(np_ ? np_ : 1) * 2 * sizeof(Py_ssize_t));
        if (at == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        Py_ssize_t *end = at + np_;
        Py_BEGIN_ALLOW_THREADS
        /* Group prefetching: each stage issues the loads of every probe key before the next
         * stage uses them, so the ~4 cache misses per (key, block) overlap instead of
         * forming one dependent chain per key. */
        for (Py_ssize_t p = 0; p < np_; p++) {
            uint64_t v = down >= 32 ? 0 : (uint64_t)(pr[p] >> down);
            at[p] = (Py_ssize_t)v;
            PREFETCH(&dr[v]);
        }
        for (Py_ssize_t p = 0; p < np_; p++) {
            uint64_t v = (uint64_t)at[p];
            Py_ssize_t a = dr[v], e = dr[v + 1];
            at[p] = a;
            end[p] = e > nk ? nk : e; /* a malformed directory must not read past ukeys */
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
            PREFETCH(&of[a]);
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
            at[p] = (Py_ssize_t)s;
            end[p] = (Py_ssize_t)e;
            PREFETCH(&id[s]);
        }
        for (Py_ssize_t p = 0; p < np_; p++) {
            if (at[p] < 0)
                continue;
            Py_ssize_t q = p + 4; /* a later run's second cache line, ahead of time */
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
        Py_END_ALLOW_THREADS
        PyMem_RawFree(at);
        result = PyLong_FromLongLong(total);
    }
done:
    PyBuffer_Release(&ukeys);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&dir);
    PyBuffer_Release(&probe);
    PyBuffer_Release(&counts);
    return result;
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

static PyMethodDef methods[] = {
    {"count_block", count_block, METH_VARARGS, count_block_doc},
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
