/* The probe's kernels (fmix64, probe_keys: prefixes under the live order versions and their
 * keys). Split from _kernels.c to keep each source readable. */
#include "_kernels.h"

#define check ndd_check

/* The ``length`` smallest of m[0..n) (distinct) under (cl[m >> shift], m) into o; cl NULL:
 * by m alone (order version 0). ``tie`` and ``c`` have room for n items. Also the body of
 * _kernels.c's order_prefix: one copy of the prefix rule. */
void
ndd_prefix_under(const uint64_t *m, Py_ssize_t n, const uint8_t *cl, int shift,
                 Py_ssize_t length,
             uint64_t *o, uint64_t *tie, uint8_t *c)
{
    if (cl == NULL) {
        memcpy(tie, m, (size_t)n * sizeof(uint64_t));
        ndd_select_smallest(tie, n, length);
        memcpy(o, tie, (size_t)length * sizeof(uint64_t));
        return;
    }
    Py_ssize_t hist[256] = {0};
    /* the classes table (2**bits bytes) is far larger than L2: prefetch 16 codes ahead */
    for (Py_ssize_t i = 0; i < n && i < 16; i++)
        PREFETCH(&cl[m[i] >> shift]);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + 16 < n)
            PREFETCH(&cl[m[i + 16] >> shift]);
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
        ndd_select_smallest(tie, t, need);
        memcpy(o + k, tie, (size_t)need * sizeof(uint64_t));
    }
}

const char ndd_fmix64_doc[] =
"fmix64(codes, out) -> None\n\n"
"splitmix64's finalizer of every code (uint64) into ``out`` (uint64, as many): the same\n"
"values as ndd_stream.core.qgrams.fmix64 in numpy.";

/* Why: numpy spends eight ufunc calls (and temporaries) on the few hundred codes of a
 * document, once per decision. */
PyObject *
ndd_fmix64(PyObject *self, PyObject *args)
{
    Py_buffer codes, out;
    if (!PyArg_ParseTuple(args, "y*w*", &codes, &out))
        return NULL;
    PyObject *result = NULL;
    if (check(&codes, 8, "codes") || check(&out, 8, "out"))
        goto done;
    if (out.len != codes.len) {
        PyErr_SetString(PyExc_ValueError, "out must have as many items as codes");
        goto done;
    }
    {
        const uint64_t *c = codes.buf;
        uint64_t *o = out.buf;
        for (Py_ssize_t i = 0, n = codes.len / 8; i < n; i++) {
            uint64_t z = c[i];
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
            o[i] = z ^ (z >> 31);
        }
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&codes);
    PyBuffer_Release(&out);
    return result;
}

const char ndd_probe_keys_doc[] =
"probe_keys(mixed, tables, shift, length, prefixes, keys) -> (codes, nkeys)\n\n"
"A probe's prefixes and keys in one call. For each of the order versions ``tables`` (a\n"
"sequence of uint8 class tables of 2**(64 - shift) items, or None for version 0's hash\n"
"order), row i of ``prefixes`` (uint64, len(tables) x length) gets the ``length``\n"
"smallest of ``mixed`` (uint64, distinct) under it, any order (OrderVersion.prefix).\n"
"``keys`` (uint32) gets the distinct top 32 bits of the union of the rows (of ``mixed``\n"
"itself when ``tables`` is empty), ascending. Returns (distinct codes in the union, keys).";

/* Why: the probe computed its prefix under each live order version (one call each), then
 * numpy concatenated, sorted and deduplicated the codes and again their keys: ~16% of a
 * Reuters decision at t = 0.8, where 5 versions are live. */
PyObject *
ndd_probe_keys(PyObject *self, PyObject *args)
{
    Py_buffer mixed, prefixes, keys;
    PyObject *tables_in, *tables = NULL, *result = NULL;
    int shift;
    Py_ssize_t length;
    Py_buffer *views = NULL;
    Py_ssize_t nv = 0, taken = 0;
    if (!PyArg_ParseTuple(args, "y*Oinw*w*", &mixed, &tables_in, &shift, &length, &prefixes,
                          &keys))
        return NULL;
    if (check(&mixed, 8, "mixed") || check(&prefixes, 8, "prefixes") || check(&keys, 4, "keys"))
        goto done;
    tables = PySequence_Fast(tables_in, "tables must be a sequence");
    if (tables == NULL)
        goto done;
    nv = PySequence_Fast_GET_SIZE(tables);
    Py_ssize_t n = mixed.len / 8;
    if (shift < 17 || shift > 63 || length < 0 || length > n ||
        prefixes.len / 8 != nv * length) {
        PyErr_SetString(PyExc_ValueError, "probe_keys: sizes do not fit");
        goto done;
    }
    views = PyMem_Calloc((size_t)(nv ? nv : 1), sizeof(Py_buffer));
    if (views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; taken < nv; taken++) {
        PyObject *t = PySequence_Fast_GET_ITEM(tables, taken);
        if (t == Py_None)
            continue;
        if (PyObject_GetBuffer(t, &views[taken], PyBUF_SIMPLE) < 0)
            goto done;
        if (views[taken].len != ((Py_ssize_t)1 << (64 - shift))) {
            taken++;
            PyErr_SetString(PyExc_ValueError, "probe_keys: a class table has the wrong size");
            goto done;
        }
    }
    {
        Py_ssize_t total = nv ? nv * length : n;
        if (keys.len / 4 < total) {
            PyErr_SetString(PyExc_ValueError, "probe_keys: keys is too short");
            goto done;
        }
        uint64_t *tie = PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof(uint64_t));
        uint8_t *c = PyMem_RawMalloc((size_t)(n ? n : 1));
        uint64_t *a = PyMem_RawMalloc((size_t)(total ? total : 1) * 2 * sizeof(uint64_t));
        if (tie == NULL || c == NULL || a == NULL) {
            PyMem_RawFree(tie);
            PyMem_RawFree(c);
            PyMem_RawFree(a);
            PyErr_NoMemory();
            goto done;
        }
        const uint64_t *m = mixed.buf;
        uint64_t *rows = prefixes.buf, *b = a + total;
        uint32_t *ko = keys.buf;
        Py_ssize_t ncodes = 0, nkeys = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t v = 0; v < nv; v++)
            ndd_prefix_under(m, n, views[v].obj ? views[v].buf : NULL, shift, length,
                             rows + v * length, tie, c);
        memcpy(a, nv ? rows : m, (size_t)total * sizeof(uint64_t));
        /* LSD radix sort by the top 32 bits (the key), 8 bits a pass */
        for (int pass = 0; pass < 4; pass++) {
            Py_ssize_t cnt[257];
            int sh = 32 + 8 * pass;
            memset(cnt, 0, sizeof(cnt));
            for (Py_ssize_t i = 0; i < total; i++)
                cnt[((a[i] >> sh) & 255) + 1]++;
            for (int d = 0; d < 256; d++)
                cnt[d + 1] += cnt[d];
            for (Py_ssize_t i = 0; i < total; i++)
                b[cnt[(a[i] >> sh) & 255]++] = a[i];
            uint64_t *t = a;
            a = b;
            b = t;
        }
        /* runs of one key: its distinct codes (a code is in at most nv rows; distinct codes
         * rarely share 32 bits), by insertion sort of the run */
        for (Py_ssize_t i = 0; i < total;) {
            Py_ssize_t j = i + 1;
            uint32_t key = (uint32_t)(a[i] >> 32);
            while (j < total && (uint32_t)(a[j] >> 32) == key)
                j++;
            for (Py_ssize_t x = i + 1; x < j; x++) {
                uint64_t v = a[x];
                Py_ssize_t y = x;
                while (y > i && a[y - 1] > v) {
                    a[y] = a[y - 1];
                    y--;
                }
                a[y] = v;
            }
            for (Py_ssize_t x = i; x < j; x++)
                ncodes += x == i || a[x] != a[x - 1];
            ko[nkeys++] = key;
            i = j;
        }
        Py_END_ALLOW_THREADS
        PyMem_RawFree(tie);
        PyMem_RawFree(c);
        PyMem_RawFree(a < b ? a : b);
        result = Py_BuildValue("nn", ncodes, nkeys);
    }
done:
    for (Py_ssize_t v = 0; v < taken; v++)
        if (views[v].obj != NULL)
            PyBuffer_Release(&views[v]);
    PyMem_Free(views);
    Py_XDECREF(tables);
    PyBuffer_Release(&mixed);
    PyBuffer_Release(&prefixes);
    PyBuffer_Release(&keys);
    return result;
}
