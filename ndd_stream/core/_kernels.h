/* Shared by the C kernels' sources (_kernels.c: the module and the small kernels;
 * _count.c: the index count). */
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

/* 0 when ``b`` is a whole number of ``itemsize``-byte items, else -1 with ValueError set. */
int ndd_check(Py_buffer *b, Py_ssize_t itemsize, const char *name);

/* _count.c */
extern const char ndd_count_blocks_doc[];
extern const char ndd_dense_rows_doc[];
PyObject *ndd_count_blocks(PyObject *self, PyObject *args);
PyObject *ndd_dense_rows(PyObject *self, PyObject *args);
extern const char ndd_wake_count_workers_doc[];
PyObject *ndd_wake_count_workers(PyObject *self, PyObject *args);
extern PyTypeObject ndd_BlockType;

#endif
