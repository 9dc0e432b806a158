/* The Block type of the C kernels: one index block as count_blocks counts it. Split from
 * _count.c to keep each source readable. */
#include "_kernels.h"

#define check ndd_check

/* ---- Block: one index block, its buffers taken and checked once ---------------------
 *
 * Why an object: count_blocks used to take every block as a 9-tuple and parse it (nine
 * fields, four to six buffer requests and their checks) on every call, ~15 blocks per
 * decision; a Block holds its buffers from construction until it is freed, so a count only
 * copies the parsed descriptors.
 *
 * Why its own lookup arrays: count_one looks every probe key up in every block
 * (~3,100 keys x ~10 blocks per decision at t = 0.3). Found through the arrays the Python
 * side keeps (ukeys, offs, a rowmap of dense rows and a directory of ~1 slot per key), a
 * hit touched ~5 lines of separate arrays: directory, ukeys[a], rowmap[a], offs[a] and
 * offs[a + 1], then the postings. The Block instead builds one array of (key,
 * start-or-dense-row) entries in key order, so a key, what it maps to and (in the next
 * entry, mostly the same line) where its postings end are one line: a hit touches the
 * directory, the entry line and the postings or dense row; a miss two lines. Dense keys
 * are marked in their entry (LOOKUP_DENSE | row; a block with dense rows holds fewer than
 * 2**31 postings, PostingIndex builds none past that), and ``dstart`` keeps their
 * postings' start for the sparse key before them. Why the Block keeps neither ukeys nor
 * offs (memory): the entries say both, so the Python side releases them once the
 * Block is made and merge_csr reads a counted block through its entries (Block.csr
 * rebuilds the arrays where numpy needs them). Per key the index then holds 8 bytes of
 * entry and 2-4 of directory against 18-20 with them (ukeys, offs, entries, directory) and
 * the 12-20 before the entries (ukeys, offs, a Python directory, a rowmap):
 * docs/BENCHMARK.md has the figures.
 * Measured, the misses were not the main cost (the prefetches overlap them): the lookup's
 * branches were, and the entries let count_one find a key without them (see there). */

/* Mean keys per directory bucket, in (LOOKUP_BUCKET / 2, LOOKUP_BUCKET]. Measured (news,
 * 12k window, t = 0.3, count alone): 2 was 16% faster than the old lookup, 1 13%, 4 10%:
 * larger buckets mean a smaller directory but longer scans in count_one. */
#ifndef LOOKUP_BUCKET
#define LOOKUP_BUCKET 2
#endif

static void
block_release(block_t *b)
{
    if (b->ids.obj != NULL)
        PyBuffer_Release(&b->ids);
    if (b->has_dense) {
        PyBuffer_Release(&b->dense);
        b->has_dense = 0;
    }
    PyMem_Free(b->ent);
    PyMem_Free(b->dir);
    PyMem_Free(b->dstart);
    b->ent = NULL;
    b->dir = b->dstart = NULL;
}

/* Builds the lookup arrays (see block_t) from the keys ``uk`` and offsets ``of`` (nk + 1)
 * and ``rm`` (the dense row of each key, < 0 = sparse; NULL: no dense keys); 0, or -1
 * with an exception set. */
static int
block_build_lookup(block_t *b, const uint32_t *uk, const uint32_t *of, const int32_t *rm)
{
    Py_ssize_t nk = b->nk, nrows = b->has_dense ? b->dense.len / 8 / b->words : 0;
    int bits = 0;
    while (bits < 31 && ((Py_ssize_t)LOOKUP_BUCKET << bits) < nk)
        bits++;
    Py_ssize_t top = (Py_ssize_t)1 << bits;
    b->ent = PyMem_Malloc((size_t)(nk + 2) * sizeof(entry_t));
    b->dir = PyMem_Malloc((size_t)(top + 1) * sizeof(uint32_t));
    /* never empty: count_one may load dstart[0] whether or not it uses it */
    b->dstart = PyMem_Calloc((size_t)(nrows ? nrows : 1), sizeof(uint32_t));
    if (b->ent == NULL || b->dir == NULL || b->dstart == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->bits = bits;
    b->nrows = nrows;
    uint8_t *seen = nrows ? PyMem_Calloc((size_t)nrows, 1) : NULL;
    if (nrows && seen == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < nk; i++) {
        uint32_t val = of[i];
        if (rm != NULL && rm[i] >= 0) {
            /* a row per key: the row also names the key's postings' start (dstart) */
            if (rm[i] >= nrows || seen[rm[i]]) {
                PyErr_SetString(PyExc_ValueError, rm[i] >= nrows ?
                                "rowmap points past the dense rows" :
                                "rowmap gives two keys one dense row");
                PyMem_Free(seen);
                return -1;
            }
            seen[rm[i]] = 1;
            b->dstart[rm[i]] = of[i];
            val = LOOKUP_DENSE | (uint32_t)rm[i];
        }
        b->ent[i] = (entry_t){uk[i], val};
    }
    PyMem_Free(seen);
    /* Two sentinels: the last key's postings end at offs[nk]; a scan stops at the first
     * (no probe key is above UINT32_MAX; one equal to it is found only below nk), whose
     * successor count_one also reads. */
    b->ent[nk] = b->ent[nk + 1] = (entry_t){UINT32_MAX, nk ? of[nk] : 0};
    /* dir[v]: the first entry whose key's top ``bits`` bits are >= v */
    Py_ssize_t v = 0;
    for (Py_ssize_t i = 0; i < nk; i++) {
        Py_ssize_t h = bits ? (Py_ssize_t)(uk[i] >> (32 - bits)) : 0;
        while (v <= h)
            b->dir[v++] = (uint32_t)i;
    }
    while (v <= top)
        b->dir[v++] = (uint32_t)nk;
    return 0;
}

static int
block_init(BlockObject *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"ukeys", "offs", "ids", "lo", "rowmap", "dense", "words", NULL};
    block_t *b = &self->b;
    PyObject *rowmap = Py_None, *dense = Py_None;
    Py_buffer uk = {0}, of = {0}, rmap = {0};
    block_t fresh = {0};
    if (b->ids.obj != NULL) {
        PyErr_SetString(PyExc_TypeError, "a Block is initialised once");
        return -1;
    }
    fresh.words = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*y*y*L|OOn", names, &uk, &of, &fresh.ids,
                                     &fresh.lo, &rowmap, &dense, &fresh.words))
        return -1;
    if (rowmap != Py_None && dense != Py_None) {
        /* the rowmap is read here only: folded into the entries, not held */
        if (PyObject_GetBuffer(rowmap, &rmap, PyBUF_SIMPLE) < 0)
            goto fail;
        if (PyObject_GetBuffer(dense, &fresh.dense, PyBUF_SIMPLE) < 0)
            goto fail;
        fresh.has_dense = 1;
    }
    Py_ssize_t nk = uk.len / 4;
    if (check(&uk, 4, "ukeys") || check(&of, 4, "offs") || check(&fresh.ids, 2, "ids"))
        goto fail;
    fresh.nk = nk;
    fresh.nids = fresh.ids.len / 2;
    if (of.len / 4 != nk + 1 || (nk && (Py_ssize_t)((uint32_t *)of.buf)[nk] > fresh.nids)) {
        PyErr_SetString(PyExc_ValueError, "offs must have len(ukeys) + 1 items within ids");
        goto fail;
    }
    if (fresh.has_dense && (rmap.len != nk * 4 || fresh.words <= 0 ||
                            fresh.dense.len % (8 * fresh.words))) {
        PyErr_SetString(PyExc_ValueError, "rowmap must have one int32 per key and dense "
                        "whole rows of words uint64");
        goto fail;
    }
    if (fresh.has_dense && fresh.nids >= (Py_ssize_t)LOOKUP_DENSE) {
        PyErr_SetString(PyExc_ValueError, "a block with dense rows must hold fewer than "
                        "2**31 postings");
        goto fail;
    }
    if (block_build_lookup(&fresh, uk.buf, of.buf, fresh.has_dense ? rmap.buf : NULL) < 0)
        goto fail;
    /* ukeys and offs are not held: the entries hold both (see the top of this file) */
    PyBuffer_Release(&uk);
    PyBuffer_Release(&of);
    if (rmap.obj != NULL)
        PyBuffer_Release(&rmap);
    *b = fresh;
    return 0;
fail:
    PyBuffer_Release(&uk);
    PyBuffer_Release(&of);
    if (rmap.obj != NULL)
        PyBuffer_Release(&rmap);
    block_release(&fresh);
    return -1;
}

static void
block_dealloc(BlockObject *self)
{
    block_release(&self->b);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The postings' start of entry i (i <= nk: the sentinel holds the last key's end). */
static inline uint32_t
entry_start(const block_t *b, Py_ssize_t i)
{
    uint32_t v = b->ent[i].val;
    return (b->has_dense && (v & LOOKUP_DENSE)) ? b->dstart[v & ~LOOKUP_DENSE] : v;
}

static PyObject *
block_csr(BlockObject *self, PyObject *args)
{
    Py_buffer keys, offs;
    const block_t *b = &self->b;
    if (!PyArg_ParseTuple(args, "w*w*", &keys, &offs))
        return NULL;
    PyObject *result = NULL;
    if (b->ids.obj == NULL)
        PyErr_SetString(PyExc_TypeError, "the Block is not initialised");
    else if (check(&keys, 4, "keys") || check(&offs, 4, "offs"))
        ;
    else if (keys.len / 4 != b->nk || offs.len / 4 != b->nk + 1)
        PyErr_SetString(PyExc_ValueError, "keys must have nkeys items, offs nkeys + 1");
    else {
        uint32_t *k = keys.buf, *o = offs.buf;
        for (Py_ssize_t i = 0; i < b->nk; i++) {
            k[i] = b->ent[i].key;
            o[i] = entry_start(b, i);
        }
        o[b->nk] = b->ent[b->nk].val;
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&keys);
    PyBuffer_Release(&offs);
    return result;
}

static PyObject *
block_buffer_owner(Py_buffer *view)
{
    if (view->obj == NULL)
        Py_RETURN_NONE;
    Py_INCREF(view->obj);
    return view->obj;
}

static PyObject *block_get_ids(BlockObject *s, void *c) { return block_buffer_owner(&s->b.ids); }
static PyObject *block_get_lo(BlockObject *s, void *c) { return PyLong_FromLongLong(s->b.lo); }
static PyObject *block_get_bits(BlockObject *s, void *c) { return PyLong_FromLong(s->b.bits); }
static PyObject *block_get_words(BlockObject *s, void *c) { return PyLong_FromSsize_t(s->b.words); }
static PyObject *block_get_nkeys(BlockObject *s, void *c) { return PyLong_FromSsize_t(s->b.nk); }

static PyObject *
block_get_lookup_nbytes(BlockObject *s, void *c)
{
    if (s->b.ent == NULL)
        return PyLong_FromLong(0);
    Py_ssize_t dirs = ((Py_ssize_t)1 << s->b.bits) + 1, starts = s->b.nrows ? s->b.nrows : 1;
    return PyLong_FromSsize_t((s->b.nk + 2) * (Py_ssize_t)sizeof(entry_t) +
                              (dirs + starts) * (Py_ssize_t)sizeof(uint32_t));
}

static PyObject *
block_get_dense(BlockObject *s, void *c)
{
    if (!s->b.has_dense)
        Py_RETURN_NONE;
    return block_buffer_owner(&s->b.dense);
}

static PyGetSetDef block_getset[] = {
    {"ids", (getter)block_get_ids, NULL, "document number - lo of each posting (uint16)", NULL},
    {"lo", (getter)block_get_lo, NULL, "number of the block's first document", NULL},
    {"nkeys", (getter)block_get_nkeys, NULL, "distinct keys of the block", NULL},
    {"dense", (getter)block_get_dense, NULL, "dense rows (uint64, rows x words); None", NULL},
    {"words", (getter)block_get_words, NULL, "words of a dense row", NULL},
    {"bits", (getter)block_get_bits, NULL, "top bits of a key its lookup directory indexes",
     NULL},
    {"lookup_nbytes", (getter)block_get_lookup_nbytes, NULL,
     "bytes of the lookup arrays the block owns (entries, directory, dense rows' starts)",
     NULL},
    {NULL},
};

static PyMethodDef block_methods[] = {
    {"csr", (PyCFunction)block_csr, METH_VARARGS,
     "csr(keys, offs) -> None\n\nWrite the block's keys (uint32, nkeys) and offsets (uint32,\n"
     "nkeys + 1) into the given buffers, rebuilt from its lookup entries."},
    {NULL},
};

PyTypeObject ndd_BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ndd_stream.core._kernels.Block",
    .tp_basicsize = sizeof(BlockObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Block(ukeys, offs, ids, lo, rowmap=None, dense=None, words=1)\n\n"
              "One index block as count_blocks counts it, checked once: ``ukeys`` (uint32,\n"
              "ascending, distinct), ``offs`` (uint32, len(ukeys) + 1), ``ids`` (uint16,\n"
              "document number - lo per posting), ``rowmap`` (int32, one per key, -1 =\n"
              "sparse) giving a dense key's row in ``dense`` (uint64, rows x words: bit d of a\n"
              "row = document lo + d holds the key). The block builds its own lookup arrays\n"
              "from them (``lookup_nbytes``) and keeps ``ids`` and ``dense``, not ``ukeys``,\n"
              "``offs`` nor the rowmap (``csr`` rebuilds the first two; merge_csr reads a\n"
              "Block). ``ids`` and ``dense`` must not change after.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)block_init,
    .tp_dealloc = (destructor)block_dealloc,
    .tp_getset = block_getset,
    .tp_methods = block_methods,
};

/* ---- merge_csr: two blocks as one, in one linear pass ---------------------------------
 *
 * Why here: merging blocks was ~15% of a decision at a 50k window in numpy (repeat the
 * keys, concatenate, stable argsort, gather, find the runs: ~10 passes); both inputs are
 * sorted, so one linear merge that copies whole posting runs does it. Why a side may be a
 * Block: once a block is counted its keys and starts live only in the Block's entries (the
 * Python ukeys/offs are released, 8 bytes per key), so the merge reads them there. */

/* One side of a merge: key i at key[i * step], its postings' start at start[i * step]
 * (i = n: the end of the last key's), a start with ``mark`` set naming a dense row whose
 * start is in dstart. A (keys, offs, ids) tuple: step 1, no mark; a Block: its entries. */
typedef struct {
    const uint32_t *key, *start, *dstart;
    const uint16_t *ids;
    Py_ssize_t step, n, nids;
    uint32_t mark;
    Py_buffer view[3];
    int held;
} merge_side;

static inline uint32_t
side_start(const merge_side *s, Py_ssize_t i)
{
    uint32_t v = s->start[i * s->step];
    return (v & s->mark) ? s->dstart[v & ~s->mark] : v;
}

static void
side_release(merge_side *s)
{
    for (int i = 0; i < s->held; i++)
        PyBuffer_Release(&s->view[i]);
    s->held = 0;
}

/* 0, or -1 with an exception set (nothing held then). */
static int
side_take(merge_side *s, PyObject *obj, const char *name)
{
    memset(s, 0, sizeof(*s));
    if (PyObject_TypeCheck(obj, &ndd_BlockType)) {
        const block_t *b = &((BlockObject *)obj)->b;
        if (b->ids.obj == NULL) {
            PyErr_Format(PyExc_TypeError, "%s: the Block is not initialised", name);
            return -1;
        }
        s->key = &b->ent[0].key;
        s->start = &b->ent[0].val;
        s->step = 2;
        s->mark = b->has_dense ? LOOKUP_DENSE : 0;
        s->dstart = b->dstart;
        s->ids = b->ids.buf;
        s->n = b->nk;
        s->nids = b->nids;
        return 0; /* the caller's reference to the Block keeps its arrays */
    }
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 3) {
        PyErr_Format(PyExc_TypeError, "%s must be a Block or (keys, offs, ids)", name);
        return -1;
    }
    for (; s->held < 3; s->held++)
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(obj, s->held), &s->view[s->held],
                               PyBUF_SIMPLE) < 0) {
            side_release(s);
            return -1;
        }
    if (check(&s->view[0], 4, "keys") || check(&s->view[1], 4, "offs") ||
        check(&s->view[2], 2, "ids")) {
        side_release(s);
        return -1;
    }
    s->key = s->view[0].buf;
    s->start = s->view[1].buf;
    s->ids = s->view[2].buf;
    s->step = 1;
    s->n = s->view[0].len / 4;
    s->nids = s->view[2].len / 2;
    if (s->view[1].len / 4 != s->n + 1 || (Py_ssize_t)s->start[s->n] > s->nids) {
        PyErr_SetString(PyExc_ValueError, "offs must have len(keys) + 1 items within ids");
        side_release(s);
        return -1;
    }
    return 0;
}

#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* A start read through a side's entries: ``mark`` 0 for a plain array or a Block without
 * dense rows (a start may then have the top bit set). */
static ALWAYS_INLINE Py_ssize_t
run_start(const uint32_t *start, Py_ssize_t at, uint32_t mark, const uint32_t *dstart)
{
    uint32_t v = start[at];
    return (v & mark) ? dstart[v & ~mark] : v;
}

/* The merge of x and y into zk, zo (nz keys of room) and zi (pz postings), B's ids plus
 * ``shift``; *k_out: the keys written. 1 when the outputs or shifted ids do not fit, else
 * 0. ``xs``, ``ys``: the sides' steps, constants at each call. The sides' fields are read
 * into locals first: the output stores (uint32) could otherwise alias them. */
static ALWAYS_INLINE int
merge_run(const merge_side *x, const merge_side *y, const Py_ssize_t xs, const Py_ssize_t ys,
          const uint32_t xm, const uint32_t ym, long long shift, uint32_t *zk, uint32_t *zo,
          uint16_t *zi, Py_ssize_t nz, Py_ssize_t pz, Py_ssize_t *k_out)
{
    const uint32_t *xk = x->key, *xo = x->start, *xd = x->dstart;
    const uint32_t *yk = y->key, *yo = y->start, *yd = y->dstart;
    const uint16_t *xi = x->ids, *yi = y->ids;
    const Py_ssize_t nx = x->n, ny = y->n, xn = x->nids, yn = y->nids;
    Py_ssize_t i = 0, j = 0, k = 0, p = 0;
    int bad = 0;
    /* Keys past an input's end read as 2**32 (above every key), so each step takes the
     * smaller key (or both) without a branch on which input ran out; runs are copied by a
     * short loop (most runs are a few postings: a memcpy call per run cost more). A key's
     * start is carried over as the previous key's end: one start read per key taken. */
    const uint64_t END = (uint64_t)1 << 32;
    Py_ssize_t sx = run_start(xo, 0, xm, xd), sy = run_start(yo, 0, ym, yd);
    while (i < nx || j < ny) {
        uint64_t kx = i < nx ? xk[i * xs] : END, ky = j < ny ? yk[j * ys] : END;
        int take_x = kx <= ky, take_y = ky <= kx;
        if (k >= nz)
            return 1;
        zk[k] = (uint32_t)(take_x ? kx : ky);
        zo[k] = (uint32_t)p;
        Py_ssize_t ex = take_x ? run_start(xo, (i + 1) * xs, xm, xd) : sx;
        Py_ssize_t ey = take_y ? run_start(yo, (j + 1) * ys, ym, yd) : sy;
        if (sx > ex || sy > ey || ex > xn || ey > yn || p + (ex - sx) + (ey - sy) > pz)
            return 1;
        for (Py_ssize_t q = sx; q < ex; q++)
            zi[p++] = xi[q];
        for (Py_ssize_t q = sy; q < ey; q++) {
            long long v = (long long)yi[q] + shift;
            bad |= v > 65535;
            zi[p++] = (uint16_t)v;
        }
        sx = ex;
        sy = ey;
        i += take_x;
        j += take_y;
        k++;
    }
    if (bad || p != pz)
        return 1;
    zo[k] = (uint32_t)p;
    *k_out = k;
    return 0;
}

/* merge_run with each side's kind -- an array (step 1), a Block's entries (step 2) with
 * or without dense rows (whose starts must be looked up) -- a constant, each in its own
 * function: one loop for all kinds was 10-20% slower than the merge of arrays it replaces
 * (news-like blocks of 700-45k keys), and the nine copies in one function spilled i and j
 * to the stack. */
typedef int (*merge_fn)(const merge_side *, const merge_side *, long long, uint32_t *,
                        uint32_t *, uint16_t *, Py_ssize_t, Py_ssize_t, Py_ssize_t *);
#define MERGE_VARIANT(name, xs, xm, ys, ym)                                                 \
    static int name(const merge_side *x, const merge_side *y, long long shift, uint32_t *zk, \
                    uint32_t *zo, uint16_t *zi, Py_ssize_t nz, Py_ssize_t pz, Py_ssize_t *k) \
    {                                                                                        \
        return merge_run(x, y, xs, ys, xm, ym, shift, zk, zo, zi, nz, pz, k);                \
    }
MERGE_VARIANT(merge_aa, 1, 0, 1, 0)
MERGE_VARIANT(merge_ab, 1, 0, 2, 0)
MERGE_VARIANT(merge_ad, 1, 0, 2, LOOKUP_DENSE)
MERGE_VARIANT(merge_ba, 2, 0, 1, 0)
MERGE_VARIANT(merge_bb, 2, 0, 2, 0)
MERGE_VARIANT(merge_bd, 2, 0, 2, LOOKUP_DENSE)
MERGE_VARIANT(merge_da, 2, LOOKUP_DENSE, 1, 0)
MERGE_VARIANT(merge_db, 2, LOOKUP_DENSE, 2, 0)
MERGE_VARIANT(merge_dd, 2, LOOKUP_DENSE, 2, LOOKUP_DENSE)
#undef MERGE_VARIANT
/* [kind of A][kind of B]: 0 an array, 1 a Block without dense rows, 2 one with */
static const merge_fn merge_variants[3][3] = {
    {merge_aa, merge_ab, merge_ad}, {merge_ba, merge_bb, merge_bd}, {merge_da, merge_db, merge_dd},
};

const char ndd_merge_csr_doc[] =
"merge_csr(a, b, shift, keys, offs, ids) -> int\n\n"
"Merge two posting blocks, each a Block or a (keys, offs, ids) tuple (keys uint32\n"
"ascending distinct, offs uint32, ids uint16), into the preallocated ``keys`` and ``offs``\n"
"(room for at least |A ∪ B| keys, len(offs) = len(keys) + 1) and ``ids`` (all postings);\n"
"returns |A ∪ B|, the keys written (offs[:|A ∪ B| + 1] are theirs). Under a key present\n"
"in both, A's postings come first, then B's, each in its own order; B's ids are\n"
"increased by ``shift`` (results must fit 16 bits).";

PyObject *
ndd_merge_csr(PyObject *self, PyObject *args)
{
    PyObject *a, *b;
    Py_buffer ok, oo, oi;
    long long shift;
    merge_side x, y;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "OOLw*w*w*", &a, &b, &shift, &ok, &oo, &oi))
        return NULL;
    if (side_take(&x, a, "a") < 0)
        goto out;
    if (side_take(&y, b, "b") < 0) {
        side_release(&x);
        goto out;
    }
    if (check(&ok, 4, "keys") || check(&oo, 4, "offs") || check(&oi, 2, "ids"))
        goto done;
    {
        uint32_t *zk = ok.buf, *zo = oo.buf;
        uint16_t *zi = oi.buf;
        Py_ssize_t nx = x.n, ny = y.n, nz = ok.len / 4, pz = oi.len / 2;
        if (oo.len / 4 != nz + 1) {
            PyErr_SetString(PyExc_ValueError, "offs must have len(keys) + 1 items");
            goto done;
        }
        if ((Py_ssize_t)side_start(&x, nx) - (Py_ssize_t)side_start(&x, 0) +
            (Py_ssize_t)side_start(&y, ny) - (Py_ssize_t)side_start(&y, 0) != pz) {
            PyErr_SetString(PyExc_ValueError, "ids must hold every posting of both blocks");
            goto done;
        }
        if (shift < 0 || shift > 65535) {
            PyErr_SetString(PyExc_ValueError, "shift must fit 16 bits");
            goto done;
        }
        Py_ssize_t k = 0;
        int bad = 0;
        Py_BEGIN_ALLOW_THREADS
        int kx = x.step == 1 ? 0 : x.mark ? 2 : 1, ky = y.step == 1 ? 0 : y.mark ? 2 : 1;
        bad = merge_variants[kx][ky](&x, &y, shift, zk, zo, zi, nz, pz, &k);
        Py_END_ALLOW_THREADS
        if (bad) {
            PyErr_SetString(PyExc_ValueError,
                            "merge_csr: output sizes or shifted ids do not fit the inputs");
            goto done;
        }
        result = PyLong_FromSsize_t(k);
    }
done:
    side_release(&x);
    side_release(&y);
out:
    PyBuffer_Release(&ok);
    PyBuffer_Release(&oo);
    PyBuffer_Release(&oi);
    return result;
}
