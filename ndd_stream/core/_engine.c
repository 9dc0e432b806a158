/* The flat streaming index of one scope window (core/engine.py: FlatIndex), one call per
 * decision with the GIL released.
 *
 * Documents are numbered in arrival order. A hash table (open addressing, linear probing)
 * maps each indexed q-gram, as its 64-bit mixed code (fmix64 of the q-gram code, a
 * bijection, so keys are exact), to an append-only posting list of document numbers held
 * in chunks of a shared pool (4 to 128 words, each chunk of a key twice the previous one
 * up to the largest, so a rare key costs one small chunk and a frequent one few links).
 * Expiry moves ``base``: a list's expired head chunks are freed when it is next read, and a
 * sweep rebuilds the table once a quarter of the window has expired since the last one, so
 * keys never read again do not keep their postings.
 *
 * Two modes, fixed at creation:
 * - full (threshold < 0.5): every q-gram of a document is indexed, so the count of a
 *   document's postings under the query's q-grams is |A ∩ B| exactly; the decision is one
 *   pass over the counts, no verification.
 * - prefix: each document is indexed under its extended prefix (under the order current
 *   when it was added) and keeps its signature (the sorted q-gram codes). The query probes
 *   with its whole signature, so the count c = |A ∩ prefix(B)| needs no order at probe
 *   time, and a match reaching the pair's overlap o = max(need_A, need_B) has
 *   c >= o - unindexed_B (B's shared q-grams outside its prefix are at most its unindexed
 *   tail). Survivors are verified on the stored signatures in order of their upper bound
 *   min(c + unindexed_B, |A|, |B|) / max(|A|, |B|), stopping once no remaining candidate
 *   can beat the best match.
 * Either way the best match is the highest doc_q >= threshold, ties to the lowest number.
 */
#include "_kernels.h"

#include <structmember.h>

#define NCLS 6
#define CHUNK_WORDS(c) (4u << (c))
#define CHUNK_CAP(c) (CHUNK_WORDS(c) - 2u)
#define CH_N(pool, o) ((pool)[(o) + 1] & 0xffffffu)
#define CH_CLS(pool, o) ((pool)[(o) + 1] >> 24)
#define MIN_TABLE 1024

typedef struct {
    uint64_t key;
    uint32_t head, tail; /* chunk offsets in the pool; head == 0: an empty slot */
} eslot_t;

typedef struct {
    int64_t sig;           /* offset of its signature in the arena (prefix mode) */
    int32_t hour, size;    /* event hour, |signature| */
    int32_t need, unidx;   /* min_overlap(size, t), q-grams outside its indexed prefix */
} edoc_t;

typedef struct {
    int64_t pos;           /* number - base */
    int64_t ub, denom;     /* upper bound of the overlap, max(|A|, |B|) */
} ecand_t;

typedef struct {
    PyObject_HEAD
    int full;
    double t;
    eslot_t *tab;
    size_t mask, used;
    uint32_t *pool;
    size_t plen, pcap;
    uint32_t freel[NCLS];
    edoc_t *docs; /* docs[i] is document dfirst + i */
    int64_t dfirst;
    size_t dn, dcap;
    int64_t base, end;  /* live documents: base .. end - 1 */
    uint64_t *sigs;     /* sigs[i] is arena offset sfirst + i */
    int64_t sfirst;
    size_t slen, scap;
    uint32_t *counts;
    uint32_t *touched;
    size_t ccap;        /* capacity of counts and touched */
    uint32_t *heads;    /* per query key: its list's slot (scratch) */
    size_t hcap;
    ecand_t *cands;
    size_t kcap;
    int64_t postings;   /* postings held, expired ones not yet freed included */
    int64_t swept;      /* base at the last sweep */
} EngineObject;

/* -- the pool ---------------------------------------------------------------------------- */

static int
grow(void **p, size_t *cap, size_t need, size_t item)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * item);
    if (q == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *p = q;
    *cap = c;
    return 0;
}

/* A chunk of class ``c`` with no postings; 0 with MemoryError set when out of memory. */
static uint32_t
chunk_new(EngineObject *e, unsigned c)
{
    uint32_t o = e->freel[c];
    if (o) {
        e->freel[c] = e->pool[o];
    } else {
        if (e->plen + CHUNK_WORDS(c) > UINT32_MAX) {
            PyErr_SetString(PyExc_MemoryError, "posting pool over 2**32 words");
            return 0;
        }
        if (grow((void **)&e->pool, &e->pcap, e->plen + CHUNK_WORDS(c), 4))
            return 0;
        o = (uint32_t)e->plen;
        e->plen += CHUNK_WORDS(c);
    }
    e->pool[o] = 0;
    e->pool[o + 1] = (uint32_t)c << 24;
    return o;
}

static void
chunk_free(EngineObject *e, uint32_t o)
{
    unsigned c = CH_CLS(e->pool, o);
    e->pool[o] = e->freel[c];
    e->freel[c] = o;
}

/* Free the head chunks of ``s`` whose documents all expired; the last chunk is emptied
 * instead. Returns whether postings remain. */
static int
trim(EngineObject *e, eslot_t *s)
{
    uint32_t *pool = e->pool;
    uint32_t o = s->head;
    for (;;) {
        uint32_t n = CH_N(pool, o);
        if (n && (int64_t)pool[o + 2 + n - 1] >= e->base)
            break;
        e->postings -= n;
        if (o == s->tail) {
            pool[o + 1] &= 0xff000000u;
            s->head = o;
            return 0;
        }
        uint32_t next = pool[o];
        chunk_free(e, o);
        o = next;
    }
    s->head = o;
    return 1;
}

/* -- the table --------------------------------------------------------------------------- */

static eslot_t *
find(const EngineObject *e, uint64_t key)
{
    size_t i = (size_t)key & e->mask;
    for (;;) {
        eslot_t *s = &e->tab[i];
        if (s->head == 0 || s->key == key)
            return s;
        i = (i + 1) & e->mask;
    }
}

static int
rehash(EngineObject *e, size_t cap)
{
    eslot_t *old = e->tab;
    size_t oldcap = old ? e->mask + 1 : 0;
    eslot_t *tab = calloc(cap, sizeof(eslot_t));
    if (tab == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    e->tab = tab;
    e->mask = cap - 1;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].head)
            *find(e, old[i].key) = old[i];
    free(old);
    return 0;
}

/* Drop expired postings of every key, and the keys left with none; then a table sized
 * for the keys that remain. */
static int
sweep(EngineObject *e)
{
    size_t kept = 0;
    size_t cap = e->mask + 1;
    for (size_t i = 0; i < cap; i++) {
        eslot_t *s = &e->tab[i];
        if (!s->head)
            continue;
        if (trim(e, s)) {
            kept++;
        } else {
            chunk_free(e, s->head);
            s->head = 0;
        }
    }
    e->used = kept;
    e->swept = e->base;
    size_t want = MIN_TABLE;
    while (want < 4 * kept)
        want *= 2;
    if (want > cap)
        want = cap;
    return rehash(e, want); /* also closes the holes the dropped keys left in probe runs */
}

/* -- documents --------------------------------------------------------------------------- */

static void
compact(EngineObject *e)
{
    int64_t dead = e->base - e->dfirst;
    if (dead < 1024 || (size_t)dead * 2 < e->dn)
        return;
    if (!e->full && (size_t)dead < e->dn) {
        int64_t from = e->docs[dead].sig - e->sfirst;
        memmove(e->sigs, e->sigs + from, (e->slen - (size_t)from) * 8);
        e->slen -= (size_t)from;
        e->sfirst += from;
    } else if (!e->full) {
        e->sfirst += (int64_t)e->slen;
        e->slen = 0;
    }
    memmove(e->docs, e->docs + dead, (e->dn - (size_t)dead) * sizeof(edoc_t));
    e->dn -= (size_t)dead;
    e->dfirst += dead;
}

static int
engine_init(EngineObject *e, PyObject *args, PyObject *kw)
{
    static char *names[] = {"threshold", "full", NULL};
    double t;
    int full;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "dp", names, &t, &full))
        return -1;
    if (!(t > 0.0 && t <= 1.0)) {
        PyErr_SetString(PyExc_ValueError, "threshold must be in (0, 1]");
        return -1;
    }
    if (e->tab != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Engine already initialised");
        return -1;
    }
    e->t = t;
    e->full = full;
    e->plen = 4; /* offsets 0..3 unused: a chunk offset of 0 means none */
    if (grow((void **)&e->pool, &e->pcap, 1 << 16, 4) || rehash(e, MIN_TABLE))
        return -1;
    return 0;
}

static void
engine_dealloc(EngineObject *e)
{
    free(e->tab);
    free(e->pool);
    free(e->docs);
    free(e->sigs);
    free(e->counts);
    free(e->touched);
    free(e->heads);
    free(e->cands);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

PyDoc_STRVAR(add_doc,
"add(keys, sig, hour, size, need, unindexed) -> int\n\nIndex the next document under "
"``keys`` (distinct mixed codes, uint64): its hour, |signature|, min_overlap(size, t) and "
"how many of its q-grams are not in ``keys``; ``sig`` (its sorted codes, uint64) is kept "
"for verification in prefix mode, ignored (may be None) in full mode. Returns its number.");

static PyObject *
engine_add(EngineObject *e, PyObject *args)
{
    Py_buffer kb = {0}, sb = {0};
    PyObject *sigobj;
    int hour, size, need, unidx;
    if (!PyArg_ParseTuple(args, "y*Oiiii", &kb, &sigobj, &hour, &size, &need, &unidx))
        return NULL;
    PyObject *result = NULL;
    if (ndd_check(&kb, 8, "keys"))
        goto done;
    if (!e->full) {
        if (PyObject_GetBuffer(sigobj, &sb, PyBUF_SIMPLE) < 0 || ndd_check(&sb, 8, "sig"))
            goto done;
        if (sb.len / 8 != size) {
            PyErr_SetString(PyExc_ValueError, "sig must hold size codes");
            goto done;
        }
    }
    if (e->end >= (int64_t)UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "2**32 documents in one window's numbering");
        goto done;
    }
    {
        const uint64_t *k = kb.buf;
        size_t m = (size_t)kb.len / 8;
        if ((e->used + m) * 2 > e->mask + 1) {
            size_t cap = e->mask + 1;
            while ((e->used + m) * 2 > cap)
                cap *= 2;
            if (rehash(e, cap))
                goto done;
        }
        if (grow((void **)&e->docs, &e->dcap, e->dn + 1, sizeof(edoc_t)))
            goto done;
        int64_t off = 0;
        if (!e->full) {
            if (grow((void **)&e->sigs, &e->scap, e->slen + (size_t)size, 8))
                goto done;
            memcpy(e->sigs + e->slen, sb.buf, (size_t)size * 8);
            off = e->sfirst + (int64_t)e->slen;
            e->slen += (size_t)size;
        }
        uint32_t number = (uint32_t)e->end;
        for (size_t i = 0; i < m; i++) {
            eslot_t *s = find(e, k[i]);
            if (!s->head) {
                uint32_t o = chunk_new(e, 0);
                if (!o)
                    goto done; /* the document is not counted: numbering stays */
                s->key = k[i];
                s->head = s->tail = o;
                e->used++;
            }
            uint32_t tl = s->tail;
            uint32_t n = CH_N(e->pool, tl);
            unsigned c = CH_CLS(e->pool, tl);
            if (n == CHUNK_CAP(c)) {
                uint32_t o = chunk_new(e, c + 1 < NCLS ? c + 1 : NCLS - 1);
                if (!o)
                    goto done;
                e->pool[tl] = o;
                s->tail = tl = o;
                n = 0;
            }
            e->pool[tl + 2 + n] = number;
            e->pool[tl + 1]++;
        }
        e->postings += (int64_t)m;
        edoc_t *d = &e->docs[e->dn++];
        d->sig = off;
        d->hour = hour;
        d->size = size;
        d->need = need;
        d->unidx = unidx;
        e->end++;
        result = PyLong_FromLongLong((long long)number);
    }
done:
    PyBuffer_Release(&kb);
    if (sb.obj)
        PyBuffer_Release(&sb);
    return result;
}

PyDoc_STRVAR(release_doc,
"release_before(number)\n\nForget the documents numbered below ``number`` (expired).");

static PyObject *
engine_release(EngineObject *e, PyObject *args)
{
    long long number;
    if (!PyArg_ParseTuple(args, "L", &number))
        return NULL;
    if (number > e->end)
        number = e->end;
    if (number <= e->base)
        Py_RETURN_NONE;
    e->base = number;
    compact(e);
    if ((e->base - e->swept) * 4 > e->end - e->base + 4096 && sweep(e))
        return NULL;
    Py_RETURN_NONE;
}

/* |a ∩ b| of two ascending arrays of distinct codes. */
static int64_t
overlap(const uint64_t *a, int64_t na, const uint64_t *b, int64_t nb)
{
    int64_t i = 0, j = 0, c = 0;
    while (i < na && j < nb) {
        uint64_t x = a[i], y = b[j];
        c += x == y;
        i += x <= y;
        j += y <= x;
    }
    return c;
}

/* Whether a/b > c/d (all positive denominators; exact on integers). */
static inline int
above(int64_t a, int64_t b, int64_t c, int64_t d)
{
    return (__int128)a * d > (__int128)c * b;
}

static int
cand_order(const void *x, const void *y)
{
    const ecand_t *p = x, *q = y;
    if (above(p->ub, p->denom, q->ub, q->denom))
        return -1;
    if (above(q->ub, q->denom, p->ub, p->denom))
        return 1;
    return (p->pos > q->pos) - (p->pos < q->pos);
}

static PyTypeObject MatchType;

static PyStructSequence_Field match_fields[] = {
    {"number", "the best match's document number, -1 when none reaches the threshold"},
    {"shared", "|A ∩ B| with it"},
    {"candidates", "documents that passed the count filter"},
    {"verified", "of those, verified on their signatures (prefix mode)"},
    {"postings", "postings read"},
    {NULL, NULL},
};

static PyStructSequence_Desc match_desc = {
    "ndd_stream.core._kernels.Match", "The outcome of Engine.best.", match_fields, 5,
};

PyDoc_STRVAR(best_doc,
"best(keys, sig, need, hour_lo, hour_hi, size_lo, size_hi) -> Match\n\nThe best match of a "
"query with mixed codes ``keys`` and sorted codes ``sig`` (uint64; |sig| = its size) that "
"needs ``need`` shared q-grams, among the live documents whose hour and size lie in the "
"inclusive ranges: the highest doc_q >= threshold, ties to the lowest number.");

static PyObject *
engine_best(EngineObject *e, PyObject *args)
{
    Py_buffer kb = {0}, sb = {0};
    long long need, h0, h1, s0, s1;
    if (!PyArg_ParseTuple(args, "y*y*LLLLL", &kb, &sb, &need, &h0, &h1, &s0, &s1))
        return NULL;
    PyObject *result = NULL;
    if (ndd_check(&kb, 8, "keys") || ndd_check(&sb, 8, "sig"))
        goto done;
    {
        size_t live = (size_t)(e->end - e->base);
        size_t m = (size_t)kb.len / 8;
        if (grow((void **)&e->heads, &e->hcap, m + 1, 4))
            goto done;
        if (live > e->ccap) {
            size_t old = e->ccap;
            if (grow((void **)&e->counts, &e->ccap, live, 4))
                goto done;
            memset(e->counts + old, 0, (e->ccap - old) * 4);
            void *t = realloc(e->touched, e->ccap * 4);
            if (t == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            e->touched = t;
        }
        const uint64_t *k = kb.buf, *qs = sb.buf;
        int64_t qsize = sb.len / 8;
        int64_t best = -1, bshared = 0, bdenom = 1, ncand = 0, nver = 0, npost = 0;
        int failed = 0;
        Py_BEGIN_ALLOW_THREADS
        /* 1. the slot of every query key present, its table line fetched ahead */
        size_t nh = 0;
        const size_t AHEAD = 8;
        for (size_t i = 0; i < m && i < AHEAD; i++)
            PREFETCH(&e->tab[(size_t)k[i] & e->mask]);
        for (size_t i = 0; i < m; i++) {
            if (i + AHEAD < m)
                PREFETCH(&e->tab[(size_t)k[i + AHEAD] & e->mask]);
            eslot_t *s = find(e, k[i]);
            if (s->head) {
                e->heads[nh++] = (uint32_t)(s - e->tab);
                PREFETCH(&e->pool[s->head]);
            }
        }
        /* 2. ScanCount: each posting adds one to its document's count */
        uint32_t *cnt = e->counts, *touched = e->touched, *pool = e->pool;
        int64_t base = e->base;
        size_t nt = 0;
        for (size_t h = 0; h < nh; h++) {
            eslot_t *s = &e->tab[e->heads[h]];
            if (h + 1 < nh)
                PREFETCH(&pool[e->tab[e->heads[h + 1]].head + 2]);
            uint32_t o = s->head;
            uint32_t n = CH_N(pool, o);
            if (!n || (int64_t)pool[o + 1 + n] < base) {
                if (!trim(e, s))
                    continue;
                o = s->head;
                n = CH_N(pool, o);
            }
            /* the head chunk may hold expired documents */
            const uint32_t *p = pool + o + 2;
            for (uint32_t j = 0; j < n; j++) {
                int64_t x = (int64_t)p[j] - base;
                if (x >= 0) {
                    if (e->full)
                        cnt[x]++;
                    else if (cnt[x]++ == 0)
                        touched[nt++] = (uint32_t)x;
                    npost++;
                }
            }
            o = pool[o];
            while (o) {
                uint32_t next = pool[o];
                if (next)
                    PREFETCH(&pool[next]);
                n = CH_N(pool, o);
                p = pool + o + 2;
                npost += n;
                if (e->full) {
                    for (uint32_t j = 0; j < n; j++)
                        cnt[p[j] - (uint32_t)base]++;
                } else {
                    for (uint32_t j = 0; j < n; j++) {
                        uint32_t x = p[j] - (uint32_t)base;
                        if (cnt[x]++ == 0)
                            touched[nt++] = x;
                    }
                }
                o = next;
            }
        }
        /* 3. the best match */
        const edoc_t *docs = e->docs + (base - e->dfirst);
        double t = e->t;
        if (e->full) {
            for (size_t x = 0; x < live; x++) {
                int64_t c = cnt[x];
                if (c < need)
                    continue;
                cnt[x] = 0;
                const edoc_t *d = &docs[x];
                if (c < d->need || d->hour < h0 || d->hour > h1 || d->size < s0
                        || d->size > s1)
                    continue;
                ncand++; /* reaches the pair's overlap: a match unless its hour is out */
                int64_t denom = qsize > d->size ? qsize : d->size;
                if ((double)c / (double)denom >= t
                        && (best < 0 || above(c, denom, bshared, bdenom))) {
                    best = (int64_t)x;
                    bshared = c;
                    bdenom = denom;
                }
            }
            memset(cnt, 0, live * 4);
        } else {
            size_t nk = 0;
            if (e->kcap < nt) {
                size_t cap = e->kcap ? e->kcap : 64;
                while (cap < nt)
                    cap *= 2;
                ecand_t *c = realloc(e->cands, cap * sizeof(ecand_t));
                if (c == NULL)
                    failed = 1;
                else {
                    e->cands = c;
                    e->kcap = cap;
                }
            }
            for (size_t i = 0; i < nt; i++) {
                uint32_t x = touched[i];
                int64_t c = cnt[x];
                cnt[x] = 0;
                if (failed)
                    continue;
                const edoc_t *d = &docs[x];
                int64_t o = need > d->need ? need : d->need;
                if (c + d->unidx < o || d->hour < h0 || d->hour > h1 || d->size < s0
                        || d->size > s1)
                    continue;
                int64_t small = qsize < d->size ? qsize : d->size;
                int64_t denom = qsize > d->size ? qsize : d->size;
                int64_t ub = c + d->unidx < small ? c + d->unidx : small;
                if ((double)ub / (double)denom < t)
                    continue;
                e->cands[nk].pos = x;
                e->cands[nk].ub = ub;
                e->cands[nk].denom = denom;
                nk++;
            }
            ncand = (int64_t)nk;
            if (!failed) {
                qsort(e->cands, nk, sizeof(ecand_t), cand_order);
                for (size_t i = 0; i < nk; i++) {
                    const ecand_t *c = &e->cands[i];
                    if (best >= 0) {
                        if (above(bshared, bdenom, c->ub, c->denom))
                            break; /* sorted: no later candidate can reach the best */
                        if (!above(c->ub, c->denom, bshared, bdenom) && c->pos > best)
                            continue; /* at best a tie, lost to the earlier document */
                    }
                    const edoc_t *d = &docs[c->pos];
                    int64_t sh = overlap(qs, qsize, e->sigs + (d->sig - e->sfirst), d->size);
                    nver++;
                    if ((double)sh / (double)c->denom < t)
                        continue;
                    if (best < 0 || above(sh, c->denom, bshared, bdenom)
                            || (!above(bshared, bdenom, sh, c->denom) && c->pos < best)) {
                        best = c->pos;
                        bshared = sh;
                        bdenom = c->denom;
                    }
                }
            }
        }
        Py_END_ALLOW_THREADS
        if (failed) {
            PyErr_NoMemory();
            goto done;
        }
        result = PyStructSequence_New(&MatchType);
        if (result == NULL)
            goto done;
        long long vals[5] = {best < 0 ? -1 : best + e->base, best < 0 ? 0 : bshared, ncand, nver,
                             npost};
        for (int i = 0; i < 5; i++) {
            PyObject *v = PyLong_FromLongLong(vals[i]);
            if (v == NULL) {
                Py_CLEAR(result);
                goto done;
            }
            PyStructSequence_SET_ITEM(result, i, v);
        }
    }
done:
    PyBuffer_Release(&kb);
    PyBuffer_Release(&sb);
    return result;
}

static PyObject *
engine_nbytes(EngineObject *e, void *closure)
{
    (void)closure;
    size_t n = (e->mask + 1) * sizeof(eslot_t) + e->pcap * 4 + e->dcap * sizeof(edoc_t)
               + e->scap * 8 + e->ccap * 8 + e->hcap * 4 + e->kcap * sizeof(ecand_t);
    return PyLong_FromSize_t(n);
}

static PyMethodDef engine_methods[] = {
    {"add", (PyCFunction)engine_add, METH_VARARGS, add_doc},
    {"best", (PyCFunction)engine_best, METH_VARARGS, best_doc},
    {"release_before", (PyCFunction)engine_release, METH_VARARGS, release_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef engine_members[] = {
    {"base", T_LONGLONG, offsetof(EngineObject, base), READONLY, "first live number"},
    {"end", T_LONGLONG, offsetof(EngineObject, end), READONLY, "the next document's number"},
    {"postings", T_LONGLONG, offsetof(EngineObject, postings), READONLY,
     "postings held (expired ones not yet freed included)"},
    {"full", T_INT, offsetof(EngineObject, full), READONLY, "every q-gram indexed"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef engine_getset[] = {
    {"nbytes", (getter)engine_nbytes, NULL, "bytes allocated", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ndd_EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ndd_stream.core._kernels.Engine",
    .tp_basicsize = sizeof(EngineObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Engine(threshold, full): the flat index of one scope window (core.engine).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)engine_init,
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_methods = engine_methods,
    .tp_members = engine_members,
    .tp_getset = engine_getset,
};

int
ndd_engine_ready(PyObject *module)
{
    if (PyType_Ready(&ndd_EngineType) < 0)
        return -1;
    if (MatchType.tp_name == NULL && PyStructSequence_InitType2(&MatchType, &match_desc) < 0)
        return -1;
    Py_INCREF(&ndd_EngineType);
    if (PyModule_AddObject(module, "Engine", (PyObject *)&ndd_EngineType) < 0) {
        Py_DECREF(&ndd_EngineType);
        return -1;
    }
    Py_INCREF(&MatchType);
    if (PyModule_AddObject(module, "Match", (PyObject *)&MatchType) < 0) {
        Py_DECREF(&MatchType);
        return -1;
    }
    return 0;
}
