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
 * Why its own lookup arrays (issue 22): count_one looks every probe key up in every block
 * (~3,100 keys x ~10 blocks per decision at t = 0.3). Found through the arrays the Python
 * side keeps (ukeys, offs, a rowmap of dense rows and a directory of ~1 slot per key), a
 * hit touched ~5 lines of separate arrays: directory, ukeys[a], rowmap[a], offs[a] and
 * offs[a + 1], then the postings. The Block instead builds one array of (key,
 * start-or-dense-row) entries in key order, so a key, what it maps to and (in the next
 * entry, mostly the same line) where its postings end are one line: a hit touches the
 * directory, the entry line and the postings or dense row; a miss two lines. Dense keys
 * are marked in their entry (LOOKUP_DENSE | row; a block with dense rows holds fewer than
 * 2**31 postings, PostingIndex builds none past that), and ``dstart`` keeps their
 * postings' start for the sparse key before them. The Python side no longer builds a
 * directory nor keeps the rowmap, but 8 bytes of entry and 2-4 of directory per key
 * against 4-8 of directory and 4 of rowmap still grow the index, by 1-25% (the most where
 * keys outweigh postings: Reuters at t = 0.8; docs/BENCHMARK.md).
 * Measured, the misses were not the main cost (the prefetches overlap them): the lookup's
 * branches were, and the entries let count_one find a key without them (see there). */

/* Mean keys per directory bucket, in (LOOKUP_BUCKET / 2, LOOKUP_BUCKET]. Measured (news,
 * 12k window, t = 0.3, count alone): 2 was 16% faster than the old lookup, 1 13%, 4 10%:
 * larger buckets mean a smaller directory but longer scans in count_one. */
#ifndef LOOKUP_BUCKET
#define LOOKUP_BUCKET 2
#endif

static void
block_release(block_t *b, int taken)
{
    /* ``taken``: how many of ukeys, offs, ids (in that order) are held */
    Py_buffer *bufs[3] = {&b->ukeys, &b->offs, &b->ids};
    for (int i = 0; i < taken; i++)
        PyBuffer_Release(bufs[i]);
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

/* Builds the lookup arrays (see block_t) from the held ukeys and offs and ``rm`` (the
 * dense row of each key, < 0 = sparse; NULL: no dense keys); 0, or -1 with an exception
 * set. */
static int
block_build_lookup(block_t *b, const int32_t *rm)
{
    const uint32_t *uk = b->ukeys.buf, *of = b->offs.buf;
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
    Py_buffer rmap = {0};
    block_t fresh = {0};
    if (b->ukeys.obj != NULL) {
        PyErr_SetString(PyExc_TypeError, "a Block is initialised once");
        return -1;
    }
    fresh.words = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*y*y*L|OOn", names, &fresh.ukeys,
                                     &fresh.offs, &fresh.ids, &fresh.lo, &rowmap, &dense,
                                     &fresh.words))
        return -1;
    if (rowmap != Py_None && dense != Py_None) {
        /* the rowmap is read here only: folded into the entries, not held */
        if (PyObject_GetBuffer(rowmap, &rmap, PyBUF_SIMPLE) < 0)
            goto fail;
        if (PyObject_GetBuffer(dense, &fresh.dense, PyBUF_SIMPLE) < 0)
            goto fail;
        fresh.has_dense = 1;
    }
    Py_ssize_t nk = fresh.ukeys.len / 4;
    if (check(&fresh.ukeys, 4, "ukeys") || check(&fresh.offs, 4, "offs") ||
        check(&fresh.ids, 2, "ids"))
        goto fail;
    fresh.nk = nk;
    fresh.nids = fresh.ids.len / 2;
    if (fresh.offs.len / 4 != nk + 1 ||
        (nk && (Py_ssize_t)((uint32_t *)fresh.offs.buf)[nk] > fresh.nids)) {
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
    if (block_build_lookup(&fresh, fresh.has_dense ? rmap.buf : NULL) < 0)
        goto fail;
    if (rmap.obj != NULL)
        PyBuffer_Release(&rmap);
    *b = fresh;
    return 0;
fail:
    if (rmap.obj != NULL)
        PyBuffer_Release(&rmap);
    /* past the parse, ukeys, offs and ids are held */
    block_release(&fresh, 3);
    return -1;
}

static void
block_dealloc(BlockObject *self)
{
    if (self->b.ukeys.obj != NULL)
        block_release(&self->b, 3);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
block_buffer_owner(Py_buffer *view)
{
    if (view->obj == NULL)
        Py_RETURN_NONE;
    Py_INCREF(view->obj);
    return view->obj;
}

static PyObject *block_get_ukeys(BlockObject *s, void *c) { return block_buffer_owner(&s->b.ukeys); }
static PyObject *block_get_offs(BlockObject *s, void *c) { return block_buffer_owner(&s->b.offs); }
static PyObject *block_get_ids(BlockObject *s, void *c) { return block_buffer_owner(&s->b.ids); }
static PyObject *block_get_lo(BlockObject *s, void *c) { return PyLong_FromLongLong(s->b.lo); }
static PyObject *block_get_bits(BlockObject *s, void *c) { return PyLong_FromLong(s->b.bits); }
static PyObject *block_get_words(BlockObject *s, void *c) { return PyLong_FromSsize_t(s->b.words); }

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
    {"ukeys", (getter)block_get_ukeys, NULL, "distinct keys, ascending (uint32)", NULL},
    {"offs", (getter)block_get_offs, NULL, "offsets of each key's postings (uint32)", NULL},
    {"ids", (getter)block_get_ids, NULL, "document number - lo of each posting (uint16)", NULL},
    {"lo", (getter)block_get_lo, NULL, "number of the block's first document", NULL},
    {"dense", (getter)block_get_dense, NULL, "dense rows (uint64, rows x words); None", NULL},
    {"words", (getter)block_get_words, NULL, "words of a dense row", NULL},
    {"bits", (getter)block_get_bits, NULL, "top bits of a key its lookup directory indexes",
     NULL},
    {"lookup_nbytes", (getter)block_get_lookup_nbytes, NULL,
     "bytes of the lookup arrays the block owns (entries and directory)", NULL},
    {NULL},
};

PyTypeObject ndd_BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ndd_stream.core._kernels.Block",
    .tp_basicsize = sizeof(BlockObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Block(ukeys, offs, ids, lo, rowmap=None, dense=None, words=1)\n\n"
              "One index block as count_blocks counts it, its arrays held and checked once:\n"
              "``ukeys`` (uint32, ascending, distinct), ``offs`` (uint32, len(ukeys) + 1),\n"
              "``ids`` (uint16, document number - lo per posting), ``rowmap`` (int32, one per\n"
              "key, -1 = sparse) giving a dense key's row in ``dense`` (uint64, rows x words:\n"
              "bit d of a row = document lo + d holds the key). The block builds its own\n"
              "lookup arrays from them (``lookup_nbytes``); the rowmap is not kept. The\n"
              "arrays must not change after.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)block_init,
    .tp_dealloc = (destructor)block_dealloc,
    .tp_getset = block_getset,
};
