/* The Block type of the C kernels: one index block as count_blocks counts it. Split from
 * _count.c to keep each source readable. */
#include "_kernels.h"

#define check ndd_check

/* ---- Block: one index block, its buffers taken and checked once ---------------------
 *
 * Why an object: count_blocks used to take every block as a 9-tuple and parse it (nine
 * fields, four to six buffer requests and their checks) on every call, ~15 blocks per
 * decision; a Block holds its buffers from construction until it is freed, so a count only
 * copies the parsed descriptors. */


static void
block_release(block_t *b, int taken)
{
    /* ``taken``: how many of ukeys, offs, ids, dir (in that order) are held */
    Py_buffer *bufs[4] = {&b->ukeys, &b->offs, &b->ids, &b->dir};
    for (int i = 0; i < taken; i++)
        PyBuffer_Release(bufs[i]);
    if (b->has_dense) {
        PyBuffer_Release(&b->rowmap);
        PyBuffer_Release(&b->dense);
        b->has_dense = 0;
    }
}

static int
block_init(BlockObject *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"ukeys", "offs", "ids", "directory", "bits", "lo", "rowmap",
                            "dense", "words", NULL};
    block_t *b = &self->b;
    PyObject *rowmap = Py_None, *dense = Py_None;
    block_t fresh = {0};
    if (b->ukeys.obj != NULL) {
        PyErr_SetString(PyExc_TypeError, "a Block is initialised once");
        return -1;
    }
    fresh.words = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*y*y*y*iL|OOn", names, &fresh.ukeys,
                                     &fresh.offs, &fresh.ids, &fresh.dir, &fresh.bits,
                                     &fresh.lo, &rowmap, &dense, &fresh.words))
        return -1;
    if (rowmap != Py_None && dense != Py_None) {
        if (PyObject_GetBuffer(rowmap, &fresh.rowmap, PyBUF_SIMPLE) < 0)
            goto fail;
        if (PyObject_GetBuffer(dense, &fresh.dense, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&fresh.rowmap);
            goto fail;
        }
        fresh.has_dense = 1;
    }
    Py_ssize_t nk = fresh.ukeys.len / 4;
    if (check(&fresh.ukeys, 4, "ukeys") || check(&fresh.offs, 4, "offs") ||
        check(&fresh.ids, 2, "ids") || check(&fresh.dir, 4, "directory"))
        goto fail;
    if (fresh.offs.len / 4 != nk + 1 ||
        (nk && (Py_ssize_t)((uint32_t *)fresh.offs.buf)[nk] > fresh.ids.len / 2)) {
        PyErr_SetString(PyExc_ValueError, "offs must have len(ukeys) + 1 items within ids");
        goto fail;
    }
    if (fresh.bits < 0 || fresh.bits > 31 ||
        fresh.dir.len / 4 != ((Py_ssize_t)1 << fresh.bits) + 1) {
        PyErr_SetString(PyExc_ValueError, "directory must have 2**bits + 1 items");
        goto fail;
    }
    if (fresh.has_dense && (fresh.rowmap.len != nk * 4 || fresh.words <= 0 ||
                            fresh.dense.len % (8 * fresh.words))) {
        PyErr_SetString(PyExc_ValueError, "rowmap must have one int32 per key and dense "
                        "whole rows of words uint64");
        goto fail;
    }
    *b = fresh;
    return 0;
fail:
    block_release(&fresh, 4);
    return -1;
}

static void
block_dealloc(BlockObject *self)
{
    if (self->b.ukeys.obj != NULL)
        block_release(&self->b, 4);
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
static PyObject *block_get_directory(BlockObject *s, void *c) { return block_buffer_owner(&s->b.dir); }
static PyObject *block_get_lo(BlockObject *s, void *c) { return PyLong_FromLongLong(s->b.lo); }
static PyObject *block_get_bits(BlockObject *s, void *c) { return PyLong_FromLong(s->b.bits); }
static PyObject *block_get_words(BlockObject *s, void *c) { return PyLong_FromSsize_t(s->b.words); }

static PyObject *
block_get_rowmap(BlockObject *s, void *c)
{
    if (!s->b.has_dense)
        Py_RETURN_NONE;
    return block_buffer_owner(&s->b.rowmap);
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
    {"directory", (getter)block_get_directory, NULL, "lookup directory (uint32)", NULL},
    {"bits", (getter)block_get_bits, NULL, "top bits the directory indexes", NULL},
    {"lo", (getter)block_get_lo, NULL, "number of the block's first document", NULL},
    {"rowmap", (getter)block_get_rowmap, NULL, "dense row of each key or -1; None", NULL},
    {"dense", (getter)block_get_dense, NULL, "dense rows (uint64, rows x words); None", NULL},
    {"words", (getter)block_get_words, NULL, "words of a dense row", NULL},
    {NULL},
};

PyTypeObject ndd_BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ndd_stream.core._kernels.Block",
    .tp_basicsize = sizeof(BlockObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Block(ukeys, offs, ids, directory, bits, lo, rowmap=None, dense=None, words=1)\n\n"
              "One index block as count_blocks counts it, its arrays held and checked once:\n"
              "``ukeys`` (uint32, ascending, distinct), ``offs`` (uint32, len(ukeys) + 1),\n"
              "``ids`` (uint16, document number - lo per posting), ``directory`` (uint32,\n"
              "2**bits + 1 items: for every value v of a key's top ``bits`` bits the first\n"
              "position of a key with top bits >= v), ``rowmap`` (int32, one per key, -1 =\n"
              "sparse) giving a dense key's row in ``dense`` (uint64, rows x words: bit d of\n"
              "a row = document lo + d holds the key). The arrays must not change after.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)block_init,
    .tp_dealloc = (destructor)block_dealloc,
    .tp_getset = block_getset,
};
