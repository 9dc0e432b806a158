/* Text kernels of the item path (extract.prose_blocks): one scan of an ASCII field. */
#include "_kernels.h"

/* str.splitlines' line breaks among ASCII characters (\r\n is one break). */
static int
is_break(unsigned char c)
{
    return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d
        || c == 0x1e;
}

/* str.split()'s white space inside a line (the other ASCII white space breaks lines). */
static int
is_blank(unsigned char c)
{
    return c == ' ' || c == '\t' || c == 0x1f;
}

const char ndd_prose_blocks_doc[] =
"prose_blocks(text, min_words, min_chars) -> str | None\n\n"
"extract.prose_blocks of an ASCII str: the lines (str.splitlines) of at least min_words\n"
"words (str.split), joined by newlines, or text itself when that joined text is shorter\n"
"than min_chars. None when text is not ASCII (the caller runs the Python version).";

/* Why: every plain-text item of the default extraction goes through the prose rule; in
 * Python that is a list of lines and a split of each (~15 us for a 1 KB wire item), here
 * one pass that counts words up to min_words per line and copies only kept lines. */
PyObject *
ndd_prose_blocks(PyObject *self, PyObject *args)
{
    PyObject *text;
    int min_words, min_chars;
    if (!PyArg_ParseTuple(args, "Uii", &text, &min_words, &min_chars))
        return NULL;
    if (!PyUnicode_IS_ASCII(text))
        Py_RETURN_NONE;
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t len = PyUnicode_GET_LENGTH(text);
    /* kept lines as (start, end) pairs, counted first, copied second */
    Py_ssize_t kept_chars = 0, kept_lines = 0;
    Py_ssize_t cap = 16, n = 0;
    Py_ssize_t *spans = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (size_t)cap);
    if (spans == NULL)
        return PyErr_NoMemory();
    Py_ssize_t i = 0;
    while (i < len) {
        Py_ssize_t start = i;
        int words = 0, in_word = 0;
        while (i < len && !is_break(s[i])) {
            if (is_blank(s[i]))
                in_word = 0;
            else if (!in_word) {
                in_word = 1;
                words++;
            }
            i++;
        }
        Py_ssize_t end = i;
        if (i < len) {  /* the break: \r\n counts as one */
            if (s[i] == '\r' && i + 1 < len && s[i + 1] == '\n')
                i++;
            i++;
        }
        if (words >= min_words) {
            if (n == cap) {
                cap *= 2;
                Py_ssize_t *grown = PyMem_Realloc(spans, sizeof(Py_ssize_t) * 2 * (size_t)cap);
                if (grown == NULL) {
                    PyMem_Free(spans);
                    return PyErr_NoMemory();
                }
                spans = grown;
            }
            spans[2 * n] = start;
            spans[2 * n + 1] = end;
            n++;
            kept_chars += end - start;
            kept_lines++;
        }
    }
    Py_ssize_t total = kept_chars + (kept_lines > 0 ? kept_lines - 1 : 0);
    if (total < min_chars) {
        PyMem_Free(spans);
        Py_INCREF(text);
        return text;
    }
    PyObject *out = PyUnicode_New(total, 127);
    if (out == NULL) {
        PyMem_Free(spans);
        return NULL;
    }
    unsigned char *o = PyUnicode_1BYTE_DATA(out);
    for (Py_ssize_t k = 0; k < n; k++) {
        if (k)
            *o++ = '\n';
        memcpy(o, s + spans[2 * k], (size_t)(spans[2 * k + 1] - spans[2 * k]));
        o += spans[2 * k + 1] - spans[2 * k];
    }
    PyMem_Free(spans);
    return out;
}

const char ndd_ascii_sign_doc[] =
"ascii_sign(nf, q, out) -> m | None\n\n"
"The signature of the ASCII str ``nf`` (q <= 4: distinct packed q-gram codes, ascending,\n"
"as qgrams.signature) into out[0:m] and fmix64 of each into out[h:h+m], h = len(out) // 2\n"
"(``out``: uint64, h >= len(nf) - q + 1); returns m. None when nf is not ASCII.";

#define SIGN_STACK 2048 /* q-grams whose scratch fits on the stack (16 KB) */

/* Why: a decision needs both its signature (verification, the state) and its mixed codes
 * (the index); one call reads the normal form's characters in place (no encoded copy) and
 * fills one array, where three calls made two arrays and a bytes object. */
PyObject *
ndd_ascii_sign(PyObject *self, PyObject *args)
{
    PyObject *nf;
    int q;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "Uiw*", &nf, &q, &out))
        return NULL;
    PyObject *result = NULL;
    if (ndd_check(&out, 8, "out"))
        goto done;
    if (q < 1 || q > 4) {
        PyErr_SetString(PyExc_ValueError, "q must be 1..4");
        goto done;
    }
    if (!PyUnicode_IS_ASCII(nf)) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    {
        const unsigned char *c = PyUnicode_1BYTE_DATA(nf);
        Py_ssize_t len = PyUnicode_GET_LENGTH(nf), n = len - q + 1;
        Py_ssize_t half = out.len / 16;
        if (n <= 0) {
            result = PyLong_FromLong(0);
            goto done;
        }
        if (half < n) {
            PyErr_SetString(PyExc_ValueError, "out is too short");
            goto done;
        }
        uint32_t stack[2 * SIGN_STACK];
        uint32_t *scratch = n <= SIGN_STACK ? stack
                            : PyMem_RawMalloc((size_t)n * 2 * sizeof(uint32_t));
        if (scratch == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        uint64_t *sig = out.buf, *mixed = sig + half;
        Py_ssize_t m;
        Py_BEGIN_ALLOW_THREADS
        m = ndd_ascii_codes(c, len, q, sig, scratch);
        for (Py_ssize_t i = 0; i < m; i++) {
            uint64_t z = sig[i];
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
            mixed[i] = z ^ (z >> 31);
        }
        Py_END_ALLOW_THREADS
        if (scratch != stack)
            PyMem_RawFree(scratch);
        result = PyLong_FromSsize_t(m);
    }
done:
    PyBuffer_Release(&out);
    return result;
}
