/* Shared by the C kernels' sources (_kernels.c: the module and the small kernels;
 * _count.c: the index count; _block.c: the Block type and merges; _probe.c: the probe;
 * _engine.c: the flat index). */
#ifndef NDD_KERNELS_H
#define NDD_KERNELS_H

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

/* _text.c: extract.prose_blocks of an ASCII str. */
PyObject *ndd_prose_blocks(PyObject *self, PyObject *args);
extern const char ndd_prose_blocks_doc[];
/* _text.c: a normal form's signature and its mixed codes in one call. */
PyObject *ndd_ascii_sign(PyObject *self, PyObject *args);
extern const char ndd_ascii_sign_doc[];
/* _text.c: quantities.tokens and novelty.figures of an ASCII text. */
PyObject *ndd_figure_tokens(PyObject *self, PyObject *args);
extern const char ndd_figure_tokens_doc[];
PyObject *ndd_ascii_facts(PyObject *self, PyObject *args);
extern const char ndd_ascii_facts_doc[];
/* _kernels.c: the sorted distinct q-gram codes of ASCII bytes (q <= 4). */
Py_ssize_t ndd_ascii_codes(const unsigned char *c, Py_ssize_t len, int q, uint64_t *o,
                           uint32_t *scratch);

/* 0 when ``b`` is a whole number of ``itemsize``-byte items, else -1 with ValueError set. */
int ndd_check(Py_buffer *b, Py_ssize_t itemsize, const char *name);

/* One key of a block's lookup array (_block.c): the key and, for a sparse key, the start
 * of its postings in ids (its end is the next entry's start: see count_one), for a dense
 * key LOOKUP_DENSE | its dense row. */
typedef struct {
    uint32_t key, val;
} entry_t;

#define LOOKUP_DENSE 0x80000000u

/* One index block, its arrays taken and checked once (_block.c: the Block type). ``ent``,
 * ``dir`` and ``dstart`` are the block's own lookup arrays (built by block_init, freed with
 * it): nk + 2 entries (the last two sentinels holding offs[nk]), a directory of 2**bits + 1
 * positions into them and the postings' start of each dense row's key (max(nrows, 1)).
 * The keys and offsets it was made of are not held: the entries say both. ``ids.obj`` is
 * NULL until block_init succeeds. */
typedef struct {
    Py_buffer ids, dense;
    entry_t *ent;
    uint32_t *dir, *dstart;
    int bits, has_dense;
    long long lo;
    Py_ssize_t words, nk, nids, nrows;
} block_t;

typedef struct {
    PyObject_HEAD
    block_t b;
} BlockObject;

/* _probe.c */
extern const char ndd_fmix64_doc[];
extern const char ndd_probe_keys_doc[];
PyObject *ndd_fmix64(PyObject *self, PyObject *args);
PyObject *ndd_probe_keys(PyObject *self, PyObject *args);

/* _kernels.c: the k smallest of a[0..n) moved to a[0..k), any order. */
void ndd_select_smallest(uint64_t *a, Py_ssize_t n, Py_ssize_t k);
void ndd_prefix_under(const uint64_t *m, Py_ssize_t n, const uint8_t *cl, int shift,
                      Py_ssize_t length, uint64_t *o, uint64_t *tie, uint8_t *c);

/* _count.c */
extern const char ndd_count_blocks_doc[];
extern const char ndd_dense_rows_doc[];
PyObject *ndd_count_blocks(PyObject *self, PyObject *args);
PyObject *ndd_dense_rows(PyObject *self, PyObject *args);
extern const char ndd_wake_count_workers_doc[];
PyObject *ndd_wake_count_workers(PyObject *self, PyObject *args);
extern PyTypeObject ndd_BlockType;
/* _block.c: merging two blocks, each a Block or (keys, offs, ids) */
extern const char ndd_merge_csr_doc[];
PyObject *ndd_merge_csr(PyObject *self, PyObject *args);
extern const char ndd_count_candidates_doc[];
PyObject *ndd_count_candidates(PyObject *self, PyObject *args);

/* _engine.c: the Engine type (and its Match), added to the module. */
int ndd_engine_ready(PyObject *module);

/* The rows of kernels.Facts.table, in the order of Facts.ROWS. */
enum fact_row { FACT_NEEDED, FACT_UNINDEXED, FACT_HOUR, FACT_SIZE, FACT_ROWS };

/* _kernels.c: the count filter of ScopeWindow.candidates over n documents (facts: 4 x cap
 * int64) into o (ascending positions); returns how many. */
Py_ssize_t ndd_filter(const int32_t *cn, const int64_t *facts, Py_ssize_t cap, Py_ssize_t n,
                      int64_t slack, int64_t needed, int64_t unindexed, int64_t h0, int64_t h1,
                      int64_t s0, int64_t s1, int64_t *o);

#endif
