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

const char ndd_ascii_facts_doc[] =
"ascii_facts(text, scales, max_words) -> str | None\n\n"
"novelty.figures of an ASCII str: '^subject' (core.subject; absent when none), then\n"
"'#w1,w2,...' (core.headline: the first line's distinct lower-cased words of letters and\n"
"digits, at most max_words), then the figure tokens (core.quantities, ``scales`` as for\n"
"figure_tokens), joined by spaces. None when text is not ASCII.";

static int
is_letter(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int
is_alnum(unsigned char c)
{
    return is_letter(c) || (c >= '0' && c <= '9');
}

static int
is_word(unsigned char c)
{
    return is_alnum(c) || c == '_';
}

/* core.subject.ascii_subject: the first run of two letters or more on the first line, when
 * the text after that line names it capitalised and whole; its lower case into o, returns
 * its length (0: none). (c | 0x20) equals a lower-case letter only for that letter and its
 * capital, so comparing so with a word of letters is a case-insensitive comparison. */
static Py_ssize_t
subject_of(const unsigned char *s, Py_ssize_t n, Py_ssize_t newline, char *o)
{
    if (newline < 0 || newline == n - 1)
        return 0;
    Py_ssize_t i = 0, start = -1, size = 0;
    while (i < newline) {
        if (!is_letter(s[i])) {
            i++;
            continue;
        }
        Py_ssize_t j = i;
        while (j < newline && is_letter(s[j]))
            j++;
        if (j - i >= 2) {
            start = i;
            size = j - i;
            break;
        }
        i = j;
    }
    if (start < 0)
        return 0;
    for (Py_ssize_t k = 0; k < size; k++)
        o[k] = (char)(s[start + k] | 0x20);
    unsigned char capital = (unsigned char)(o[0] - 'a' + 'A');
    for (Py_ssize_t at = newline + 1; at + size <= n; at++) {
        if (s[at] != capital || is_word(s[at - 1]))
            continue;
        Py_ssize_t k = 1;
        while (k < size && (s[at + k] | 0x20) == (unsigned char)o[k])
            k++;
        if (k == size && (at + size == n || !is_word(s[at + size])))
            return size;
    }
    return 0;
}

/* core.headline.ascii_headline_words, joined by commas into o (room: the line's length);
 * returns the length written. */
static Py_ssize_t
headline_of(const unsigned char *s, Py_ssize_t line, int max_words, char *o)
{
    Py_ssize_t starts[64], lens[64], m = 0;
    int words = 0;
    Py_ssize_t i = 0;
    while (i < line && words < max_words) {
        if (!is_alnum(s[i])) {
            i++;
            continue;
        }
        Py_ssize_t j = i;
        while (j < line && is_alnum(s[j]))
            j++;
        Py_ssize_t len = j - i;
        int seen = 0;
        for (int w = 0; w < words && !seen; w++) {
            if (lens[w] != len)
                continue;
            Py_ssize_t k = 0;
            while (k < len && (s[starts[w] + k] | 0x20) == (s[i + k] | 0x20))
                k++;
            /* (c | 0x20) folds the case of letters; for digits it is the digit itself */
            seen = k == len;
        }
        if (!seen) {
            starts[words] = i;
            lens[words] = len;
            if (words)
                o[m++] = ',';
            for (Py_ssize_t k = 0; k < len; k++)
                o[m++] = (char)(s[i + k] >= 'A' && s[i + k] <= 'Z' ? s[i + k] | 0x20 : s[i + k]);
            words++;
        }
        i = j;
    }
    return m;
}

/* One distinct figure of a text: its key (digits and '.', in keys), its first spelling
 * (s[raw, raw + raw_len)) and the scale word of its first scaled occurrence (-1: none). */
typedef struct {
    Py_ssize_t key, key_len, raw, raw_len;
    int scale;
} figure_t;

typedef struct {
    figure_t *fig;
    Py_ssize_t n, cap;
    Py_ssize_t *slot; /* open addressing: 1 + index into fig, 0 empty */
    Py_ssize_t slots;
    char *keys;
} figures_t;

static uint64_t
key_hash(const char *k, Py_ssize_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (Py_ssize_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)k[i]) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}

/* The figure of key keys[key, key + len): its index, added (with its spelling) when new;
 * -1 when out of memory. */
static Py_ssize_t
figure_at(figures_t *f, Py_ssize_t key, Py_ssize_t len, Py_ssize_t raw, Py_ssize_t raw_len)
{
    if (2 * (f->n + 1) > f->slots) {
        Py_ssize_t slots = f->slots ? 2 * f->slots : 64;
        Py_ssize_t *slot = PyMem_Calloc((size_t)slots, sizeof(Py_ssize_t));
        if (slot == NULL)
            return -1;
        for (Py_ssize_t i = 0; i < f->n; i++) {
            uint64_t h = key_hash(f->keys + f->fig[i].key, f->fig[i].key_len);
            Py_ssize_t at = (Py_ssize_t)(h & (uint64_t)(slots - 1));
            while (slot[at])
                at = (at + 1) & (slots - 1);
            slot[at] = i + 1;
        }
        PyMem_Free(f->slot);
        f->slot = slot;
        f->slots = slots;
    }
    uint64_t h = key_hash(f->keys + key, len);
    Py_ssize_t at = (Py_ssize_t)(h & (uint64_t)(f->slots - 1));
    while (f->slot[at]) {
        figure_t *g = &f->fig[f->slot[at] - 1];
        if (g->key_len == len && memcmp(f->keys + g->key, f->keys + key, (size_t)len) == 0)
            return f->slot[at] - 1;
        at = (at + 1) & (f->slots - 1);
    }
    if (f->n == f->cap) {
        Py_ssize_t cap = f->cap ? 2 * f->cap : 32;
        figure_t *fig = PyMem_Realloc(f->fig, (size_t)cap * sizeof(figure_t));
        if (fig == NULL)
            return -1;
        f->fig = fig;
        f->cap = cap;
    }
    f->fig[f->n] = (figure_t){key, len, raw, raw_len, -1};
    f->slot[at] = f->n + 1;
    return f->n++;
}

/* quantities.tokens' scan: every figure of s[0..n) into f, in order of first appearance,
 * without a Python object; -1 when out of memory. A figure is greedy, and a gap's greedy
 * reading consumes every gap character exactly when the gap matches (the scale word begins
 * with a letter), so one forward scan does the pattern's work, no backtracking. */
static int
scan_figures(const unsigned char *s, Py_ssize_t n, const char **scale, const Py_ssize_t *scale_len,
             Py_ssize_t nscales, figures_t *f)
{
    Py_ssize_t i = 0, k = 0;
    while (i < n) {
        if (s[i] < '0' || s[i] > '9') {
            i++;
            continue;
        }
        Py_ssize_t start = i, key = k;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            f->keys[k++] = (char)s[i++];
        while (i + 1 < n && (s[i] == '.' || s[i] == ',') && s[i + 1] >= '0' && s[i + 1] <= '9') {
            if (s[i] == '.')
                f->keys[k++] = '.';
            i++;
            while (i < n && s[i] >= '0' && s[i] <= '9')
                f->keys[k++] = (char)s[i++];
        }
        Py_ssize_t at = figure_at(f, key, k - key, start, i - start);
        if (at < 0)
            return -1;
        if (at != f->n - 1)
            k = key; /* a key seen before: its bytes are not kept twice */
        /* the gap, then a scale word and a word boundary */
        Py_ssize_t j = i;
        while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '-'))
            j++;
        if (j < n && s[j] == '\r')
            j++;
        if (j < n && s[j] == '\n')
            j++;
        while (j < n && (s[j] == ' ' || s[j] == '\t'))
            j++;
        for (Py_ssize_t w = 0; w < nscales && j < n && s[j] > '9'; w++) {
            Py_ssize_t len = scale_len[w];
            if (j + len > n || (j + len < n && is_word(s[j + len])))
                continue;
            Py_ssize_t c = 0;
            while (c < len && (s[j + c] | 0x20) == (unsigned char)scale[w][c])
                c++;
            if (c < len)
                continue;
            if (f->fig[at].scale < 0)
                f->fig[at].scale = (int)w;
            break;
        }
    }
    return 0;
}

#define MAX_SCALES 32

/* The scale words of a tuple of str as C strings (borrowed from the str); -1 with an
 * exception set when there are too many or one is not a str. */
static int
scale_words(PyObject *scales, const char **scale, Py_ssize_t *scale_len, Py_ssize_t *longest)
{
    Py_ssize_t nscales = PyTuple_GET_SIZE(scales);
    if (nscales > MAX_SCALES) {
        PyErr_SetString(PyExc_ValueError, "at most 32 scale words");
        return -1;
    }
    *longest = 0;
    for (Py_ssize_t w = 0; w < nscales; w++) {
        scale[w] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(scales, w), &scale_len[w]);
        if (scale[w] == NULL)
            return -1;
        if (scale_len[w] > *longest)
            *longest = scale_len[w];
    }
    return 0;
}

const char ndd_figure_tokens_doc[] =
"figure_tokens(text, scales) -> dict\n\n"
"ndd_stream.core.quantities.tokens of the ASCII bytes ``text``: key -> token of every\n"
"figure (digits joined by single ``.`` or ``,``), in order of first appearance, the token\n"
"carrying ``_`` and the scale word (one of the lower-case str ``scales``, in that order,\n"
"any case, then a word boundary) of the first occurrence followed by one, after a gap\n"
"``[ \\t-]*\\r?\\n?[ \\t]*``.";

/* Why: the facts of every decided item include its figures; in Python (a translate pass,
 * the runs, a find per scale word, a look back from each) that cost 15-50 us an item. One
 * forward scan (scan_figures) does the pattern's work. */
PyObject *
ndd_figure_tokens(PyObject *self, PyObject *args)
{
    Py_buffer text;
    PyObject *scales, *out = NULL;
    if (!PyArg_ParseTuple(args, "y*O!", &text, &PyTuple_Type, &scales))
        return NULL;
    const char *scale[MAX_SCALES];
    Py_ssize_t scale_len[MAX_SCALES], longest;
    figures_t f = {NULL, 0, 0, NULL, 0, NULL};
    if (scale_words(scales, scale, scale_len, &longest) < 0)
        goto done;
    f.keys = PyMem_Malloc((size_t)text.len + 1);
    if (f.keys == NULL || scan_figures((const unsigned char *)text.buf, text.len, scale,
                                       scale_len, PyTuple_GET_SIZE(scales), &f) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    out = PyDict_New();
    for (Py_ssize_t i = 0; out != NULL && i < f.n; i++) {
        const figure_t *g = &f.fig[i];
        const char *raw = (const char *)text.buf + g->raw;
        PyObject *key = PyUnicode_DecodeASCII(f.keys + g->key, g->key_len, NULL);
        Py_ssize_t extra = g->scale < 0 ? 0 : 1 + scale_len[g->scale];
        PyObject *token = PyUnicode_New(g->raw_len + extra, 127);
        if (token != NULL) {
            char *at = (char *)PyUnicode_1BYTE_DATA(token);
            memcpy(at, raw, (size_t)g->raw_len);
            if (extra) {
                at[g->raw_len] = '_';
                memcpy(at + g->raw_len + 1, scale[g->scale], (size_t)extra - 1);
            }
        }
        if (key == NULL || token == NULL || PyDict_SetItem(out, key, token) < 0)
            Py_CLEAR(out);
        Py_XDECREF(key);
        Py_XDECREF(token);
    }
done:
    PyMem_Free(f.keys);
    PyMem_Free(f.fig);
    PyMem_Free(f.slot);
    PyBuffer_Release(&text);
    return out;
}

/* Why: every decided plain-text item computes its facts (novelty.figures); in Python, the
 * lower-cased copy, the subject's search, the headline's words, the figures' dicts and the
 * join cost ~20 us of a Reuters item, as much as its signature. Here one pass of each over
 * the text's bytes and no Python object but the result. */
PyObject *
ndd_ascii_facts(PyObject *self, PyObject *args)
{
    PyObject *text, *scales;
    int max_words;
    if (!PyArg_ParseTuple(args, "UO!i", &text, &PyTuple_Type, &scales, &max_words))
        return NULL;
    if (!PyUnicode_IS_ASCII(text))
        Py_RETURN_NONE;
    Py_ssize_t nscales = PyTuple_GET_SIZE(scales);
    if (max_words < 0 || max_words > 64) {
        PyErr_SetString(PyExc_ValueError, "max_words must be 0..64");
        return NULL;
    }
    const char *scale[MAX_SCALES];
    Py_ssize_t scale_len[MAX_SCALES], longest;
    if (scale_words(scales, scale, scale_len, &longest) < 0)
        return NULL;
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), newline = -1;
    const unsigned char *nl = memchr(s, '\n', (size_t)n);
    if (nl != NULL)
        newline = nl - s;
    Py_ssize_t line = newline >= 0 ? newline : n;
    PyObject *result = NULL;
    figures_t f = {NULL, 0, 0, NULL, 0, NULL};
    char *o = NULL;
    f.keys = PyMem_Malloc((size_t)n + 1);
    if (f.keys == NULL || scan_figures(s, n, scale, scale_len, nscales, &f) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    /* room: '^' + subject (< line) + ' #' + words and commas (<= line + max_words) + the
     * tokens, each with its space, '_' and scale word */
    Py_ssize_t room = 2 * line + max_words + 4, m = 0, k;
    for (Py_ssize_t i = 0; i < f.n; i++)
        room += f.fig[i].raw_len + longest + 2;
    o = PyMem_Malloc((size_t)room + 1);
    if (o == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    k = subject_of(s, n, newline, o + 1);
    if (k) {
        o[0] = '^';
        m = k + 1;
        o[m] = ' ';
    }
    k = headline_of(s, line, max_words, o + m + (m ? 2 : 1));
    if (k) {
        o[m + (m ? 1 : 0)] = '#';
        m += k + (m ? 2 : 1);
    }
    for (Py_ssize_t i = 0; i < f.n; i++) {
        if (m)
            o[m++] = ' ';
        memcpy(o + m, s + f.fig[i].raw, (size_t)f.fig[i].raw_len);
        m += f.fig[i].raw_len;
        if (f.fig[i].scale >= 0) {
            o[m++] = '_';
            memcpy(o + m, scale[f.fig[i].scale], (size_t)scale_len[f.fig[i].scale]);
            m += scale_len[f.fig[i].scale];
        }
    }
    result = PyUnicode_DecodeASCII(o, m, NULL);
done:
    PyMem_Free(o);
    PyMem_Free(f.keys);
    PyMem_Free(f.fig);
    PyMem_Free(f.slot);
    return result;
}
