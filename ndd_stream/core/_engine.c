/* The flat streaming index of one scope window (core/engine.py: FlatIndex), one call per
 * decision with the GIL released.
 *
 * Documents are numbered in arrival order. A hash table (open addressing, linear probing)
 * maps each indexed q-gram, as its 64-bit mixed code (fmix64 of the q-gram code, a
 * bijection, so keys are exact), to an append-only list of document numbers (one malloc'd
 * block, grown by half: a key's postings are one sequential read). A key held by a
 * ``dense_fraction`` share of the window is a bitmap row over the window's documents
 * instead, added into bit-sliced counters by carry-save adders (sixteen rows at a time)
 * and spread into the counts eight documents at a time. Expiry moves ``base``: a list's
 * expired head is skipped (binary search) when it is next read, and a sweep, once a
 * quarter of the window has expired since the last one, trims every list, shrinks lists
 * and rows, turns rows of keys no longer dense back into lists and drops empty keys.
 *
 * Two modes, fixed at creation, both with lists and rows:
 * - full (threshold < 0.5): every q-gram of a document is indexed, so the count of a
 *   document's postings under the query's q-grams is |A ∩ B| exactly; the decision is one
 *   pass over the counts, no verification.
 * - prefix: each document is indexed under its extended prefix (under the order current
 *   when it was added) and keeps the sorted q-gram codes of its signature outside it (all
 *   of them when added by ``add``). The query probes with its whole signature, so the
 *   count c = |A ∩ prefix(B)| needs no order at probe time, and a match reaching the
 *   pair's overlap o = max(need_A, need_B) has c >= o - unindexed_B (B's shared q-grams
 *   outside its prefix are at most its unindexed tail). Survivors are verified, c plus
 *   the overlap with the stored codes, in order of their upper bound
 *   min(c + unindexed_B, |A|, |B|) / max(|A|, |B|), stopping once no remaining candidate
 *   can beat the best match. Without rows only the documents a list touched are read;
 *   with rows (long items, large windows: most of the postings a probe meets) every
 *   window document is, sixteen at a time.
 * Either way the best match is the highest doc_q >= threshold, ties to the lowest number.
 */
#include "_kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <structmember.h>
#include <time.h>
#include <unistd.h>

/* The row kernels twice, for AVX2 and for any x86-64, chosen at load time (as _count.c). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define ROW_KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define ROW_KERNEL
#endif

/* A key's posting list: a malloc'd block of a header (HCAP: 16-bit units of room, HUSED:
 * units used, HN: postings, expired ones not yet trimmed included, HROW: dense row or
 * NO_ROW, HLAST: the last posting) and its document numbers, ascending, as 16-bit
 * differences from the one before; the first, and one 65,535 or more past the one before,
 * is ESC and the number whole in two units. Half the bytes of 32-bit numbers, and each
 * posting still one independent load (byte varints took a quarter, but a lookup read them
 * one after the other: ~20% slower at 0.8). A dense key's postings live in its row
 * instead: its block is a header only. */
#define HDR 5
#define HCAP 0
#define HUSED 1
#define HN 2
#define HROW 3
#define HLAST 4
#define LIST(b) ((uint16_t *)((b) + HDR))
#define ESC 0xffffu
#define NO_ROW 0xffffffffu
#define MIN_TABLE 1024
/* A key held by at least ``share`` of the window's documents (the dense_fraction setting;
 * PREFIX_DENSE at least in prefix mode) and DENSE_MIN is a bitmap row instead of a list, counted by carry-save adders: a posting
 * costs about a word operation, a row a few per 64 window documents. A row whose key falls
 * below half that share turns back into a list at the next sweep. */
#define DENSE_MIN 64
#define ROW_STEP 64 /* words a row grows by at least: 4,096 documents */
#define PREFIX_DENSE (1.0 / 32) /* the least share of a row in prefix mode */

typedef struct {
    uint64_t key;
    uint32_t *b; /* its block; NULL: an empty slot */
} eslot_t;

typedef struct {
    int64_t sig;           /* byte offset of its compact signature (prefix mode); the sign
                            * bit: its codes are packed a byte a character */
    int32_t hour, size;    /* event hour, |signature| */
    int32_t need, unidx;   /* min_overlap(size, t), q-grams outside its indexed prefix */
    PyObject *text;        /* prefix mode: its normal form packed (pack_text), verified
                            * from instead of stored codes; NULL: none held */
} edoc_t;

typedef struct {
    int64_t pos;           /* number - the call's aligned base */
    int64_t ub, denom;     /* upper bound of the overlap, max(|A|, |B|) */
    int64_t count;         /* postings counted: |A ∩ B's prefix| */
} ecand_t;

typedef struct {
    uint64_t *w;     /* w[i]: documents 64 * (wfirst + i) .. + 63; NULL: a free row */
    int64_t wfirst;
    size_t nw, cap;  /* words held (the window's later ones are 0), room (the stride) */
} erow_t;

typedef struct {
    PyObject_HEAD
    int full;
    double t, share; /* threshold, dense_fraction */
    eslot_t *tab;
    size_t mask, used;
    erow_t *rows;
    size_t nrows, rcap;
    uint64_t *slab;     /* the rows' words: row k's at slab + k * stride (see slab_layout) */
    size_t stride, slabrows; /* words a row, rows the slab has room for */
    int64_t rowfloor;   /* no row's first word is below it */
    uint32_t *freerows; /* indices of free rows */
    size_t nfree, fcap;
    edoc_t *docs;       /* docs[i] is document dfirst + i */
    uint16_t *gaps;     /* gaps[i]: min(need - unidx, 65535) of docs[i], read first */
    size_t gcap;
    int64_t dfirst;
    size_t dn, dcap;
    int64_t base, end;  /* live documents: base .. end - 1 */
    uint8_t *sigs;      /* compact signatures (see sig_put); sigs[i] is byte sfirst + i */
    int64_t sfirst;
    size_t slen, scap;
    uint32_t *counts;   /* per document from the aligned base, zero between calls */
    uint32_t *touched;
    size_t ccap;        /* capacity of counts and touched */
    uint32_t *heads;    /* per query key found: its slot (scratch) */
    size_t hcap;
    uint32_t **hblocks; /* and its block, as the probe read it (scratch) */
    size_t hbcap;
    const uint64_t **dense; /* the rows a query counts (scratch) */
    size_t dncap;
    uint64_t *slices;   /* bit-sliced counts of the dense rows (scratch) */
    size_t slcap;
    ecand_t *cands;
    size_t kcap;
    int64_t postings;   /* postings in lists, expired ones not yet trimmed included */
    int64_t listbytes;  /* bytes allocated to lists, headers included */
    int64_t swept;      /* base at the last sweep */
    uint64_t *pfx;      /* add_ordered's prefix and its selection's scratch */
    uint32_t *q6;       /* a query's six-packed codes, then a stored one's (scratch) */
    int64_t maxsize;    /* the largest |signature| added */
    size_t q6cap;
    size_t pcap;
    uint32_t *qset;     /* the query's six-packed codes + 1 in an open-addressing set, and */
    uint32_t *qstamp;   /* per slot the last verification that met it (scratch) */
    size_t qscap;
    struct ahead *ahead; /* its part in the engine thread (submit); NULL until a job */
} EngineObject;

static int settle(EngineObject *e);
static void ahead_drop(EngineObject *e);

static uint32_t SPREAD[256][8]; /* SPREAD[b][i]: bit i of b */
static uint64_t LANES[256][2];  /* bit i of b in 16-bit lane i % 4 of word i / 4 */

/* -- memory ------------------------------------------------------------------------------ */

static int
grow(void **p, size_t *cap, size_t need, size_t item)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * item);
    if (q == NULL)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* An empty list with room for ``cap`` units; NULL when out of memory. */
static uint32_t *
block_new(EngineObject *e, uint32_t cap)
{
    uint32_t *b = malloc(HDR * 4 + (size_t)cap * 2);
    if (b == NULL)
        return NULL;
    b[HCAP] = cap;
    b[HUSED] = b[HN] = b[HLAST] = 0;
    b[HROW] = NO_ROW;
    e->listbytes += HDR * 4 + (int64_t)cap * 2;
    return b;
}

static void
block_free(EngineObject *e, uint32_t *b)
{
    e->listbytes -= HDR * 4 + (int64_t)b[HCAP] * 2;
    e->postings -= b[HN];
    free(b);
}

/* ``s``'s block with room for ``cap`` units (at least those used), rounded up to fill
 * malloc's chunk (16-byte steps after an 8-byte header). */
static int
block_resize(EngineObject *e, eslot_t *s, uint32_t cap)
{
    uint32_t *b = s->b;
    cap = (uint32_t)(((((size_t)cap * 2 + HDR * 4 + 8 + 15) & ~(size_t)15) - HDR * 4 - 8) / 2);
    uint32_t *nb = realloc(b, HDR * 4 + (size_t)cap * 2);
    if (nb == NULL)
        return -1;
    e->listbytes += ((int64_t)cap - nb[HCAP]) * 2;
    nb[HCAP] = cap;
    s->b = nb;
    return 0;
}

/* The posting after ``v`` at p[*k], *k moved past it. */
static inline uint32_t
post_get(const uint16_t *p, size_t *k, uint32_t v)
{
    uint32_t u = p[*k];
    if (u != ESC) {
        *k += 1;
        return v + u;
    }
    v = p[*k + 1] | (uint32_t)p[*k + 2] << 16;
    *k += 3;
    return v;
}

/* Units of ``number`` after ``last`` (``first``: none before it). */
static inline size_t
post_len(uint32_t number, uint32_t last, int first)
{
    return !first && number - last < ESC ? 1 : 3;
}

/* ``number`` after ``last`` at ``out``; returns its units. */
static inline size_t
post_put(uint16_t *out, uint32_t number, uint32_t last, int first)
{
    if (!first && number - last < ESC) {
        out[0] = (uint16_t)(number - last);
        return 1;
    }
    out[0] = ESC;
    out[1] = (uint16_t)number;
    out[2] = (uint16_t)(number >> 16);
    return 3;
}

/* Drop the expired postings at the head of ``s``'s list; returns the live ones. The first
 * live posting is written whole over the units of its and the dropped ones (four at
 * least: the first posting is whole). */
static uint32_t
trim(EngineObject *e, eslot_t *s)
{
    uint32_t *b = s->b;
    uint16_t *p = LIST(b);
    size_t k = 0, used = b[HUSED];
    if (used == 0)
        return 0;
    uint32_t v = post_get(p, &k, 0), dropped = 0;
    if ((int64_t)v >= e->base)
        return b[HN];
    for (;;) {
        dropped++;
        if (k >= used) { /* all expired */
            b[HUSED] = b[HN] = 0;
            e->postings -= dropped;
            return 0;
        }
        v = post_get(p, &k, v);
        if ((int64_t)v >= e->base)
            break;
    }
    size_t start = k - 3;
    post_put(p + start, v, 0, 1);
    memmove(p, p + start, (used - start) * 2);
    b[HUSED] = (uint32_t)(used - start);
    b[HN] -= dropped;
    e->postings -= dropped;
    return b[HN];
}

/* Free ``s``'s row (its list must hold its postings again, or the key go). */
static int
row_free(EngineObject *e, eslot_t *s)
{
    uint32_t k = s->b[HROW];
    erow_t *r = &e->rows[k];
    r->w = NULL; /* its place in the slab waits for the next row made */
    r->nw = r->cap = 0;
    s->b[HROW] = NO_ROW;
    if (grow((void **)&e->freerows, &e->fcap, e->nfree + 1, 4))
        return -1;
    e->freerows[e->nfree++] = k;
    return 0;
}

/* The rows live in one block, the slab: row k's words at slab + k * stride, so that no row
 * moves alone (each row grown by realloc left about a quarter of the rows' bytes in free
 * heap chunks as the window filled). The stride spans every row from ``rowfloor`` (no
 * row's first word is below it) to the window's last word, so a lookup, which extends a
 * row to the window's end, never needs more (see rows_room). Every row spans the window, so
 * the rows are most of a dense index's bytes: the stride grows by an eighth (ROW_STEP words
 * at least), not a doubling; a sweep, after which every row starts at the window's first
 * word, narrows it. Lays the slab out for ``rows`` rows of ``stride`` words. */
static int
slab_layout(EngineObject *e, size_t rows, size_t stride)
{
    size_t old = e->stride;
    if (stride < old) /* narrower: each row down to its new place first, in order */
        for (size_t k = 0; k < e->nrows; k++)
            if (e->rows[k].w != NULL)
                memmove(e->slab + k * stride, e->slab + k * old, e->rows[k].nw * 8);
    size_t words = rows * stride;
    uint64_t *slab = realloc(e->slab, (words > 0 ? words : 1) * 8);
    if (slab == NULL) {
        if (stride > old)
            return -1;
        slab = e->slab; /* narrower in place, the block as it was */
    } else {
        e->slabrows = rows;
    }
    e->slab = slab;
    if (stride > old) /* wider: each row up to its new place, the last first */
        for (size_t k = e->nrows; k-- > 0;)
            if (e->rows[k].w != NULL)
                memmove(slab + k * stride, slab + k * old, e->rows[k].nw * 8);
    e->stride = stride;
    for (size_t k = 0; k < e->nrows; k++)
        if (e->rows[k].w != NULL) {
            e->rows[k].w = slab + k * stride;
            e->rows[k].cap = stride;
        }
    return 0;
}

/* A stride for rows from ``rowfloor`` to document ``number``: the one held when it
 * suffices, else an eighth more than needed (and ROW_STEP words at least). */
static size_t
stride_for(const EngineObject *e, int64_t number)
{
    size_t need = (size_t)((number >> 6) + 1 - e->rowfloor);
    if (need <= e->stride)
        return e->stride;
    return need + (need / 8 > ROW_STEP ? need / 8 : ROW_STEP);
}

/* Before document ``number`` is indexed: every row with room up to its word. */
static int
rows_room(EngineObject *e, int64_t number)
{
    if (e->nrows == 0)
        return 0;
    size_t stride = stride_for(e, number);
    return stride == e->stride ? 0 : slab_layout(e, e->slabrows, stride);
}

/* Room for ``need`` words in row ``r``: its place in the slab, which rows_room keeps wide
 * enough for any word of the window (-1: not, which does not happen). */
static int
row_reserve(erow_t *r, size_t need)
{
    return need <= r->cap ? 0 : -1;
}

/* Row ``r`` extended to word ``i`` (new words zero). */
static int
row_extend(erow_t *r, size_t i)
{
    if (row_reserve(r, i + 1))
        return -1;
    memset(r->w + r->nw, 0, (i + 1 - r->nw) * 8);
    r->nw = i + 1;
    return 0;
}

/* Set the bit of document ``number`` in row ``r``. */
static inline int
row_set(erow_t *r, int64_t number)
{
    size_t i = (size_t)((number >> 6) - r->wfirst);
    if (i >= r->nw && row_extend(r, i))
        return -1;
    r->w[i] |= (uint64_t)1 << (number & 63);
    return 0;
}

/* Turn ``s``'s list (trimmed) into a row; its block keeps the header only. */
static int
row_make(EngineObject *e, eslot_t *s)
{
    uint32_t k;
    if (e->nrows == 0) /* the first row: the slab starts from the window's first word */
        e->rowfloor = e->base >> 6;
    if (e->nfree) {
        k = e->freerows[--e->nfree];
    } else {
        if (grow((void **)&e->rows, &e->rcap, e->nrows + 1, sizeof(erow_t)))
            return -1;
        k = (uint32_t)e->nrows;
        e->rows[k].w = NULL;
        if (k >= e->slabrows || e->stride == 0) {
            size_t rows = k >= e->slabrows ? (e->slabrows ? e->slabrows * 2 : 64) : e->slabrows;
            if (slab_layout(e, rows, stride_for(e, e->end)))
                return -1;
        }
        e->nrows++;
    }
    erow_t *r = &e->rows[k];
    r->w = e->slab + (size_t)k * e->stride;
    r->nw = 0;
    r->cap = e->stride;
    r->wfirst = e->base >> 6;
    const uint32_t *b = s->b;
    const uint16_t *p = LIST(b);
    uint32_t v = 0;
    for (size_t j = 0; j < b[HUSED];) {
        v = post_get(p, &j, v);
        if (row_set(r, v))
            return -1;
    }
    e->postings -= b[HN];
    s->b[HUSED] = s->b[HN] = 0;
    s->b[HROW] = k;
    return block_resize(e, s, 0);
}

/* Live documents of row ``r`` (popcount from the window's first). */
static int64_t
row_count(const EngineObject *e, const erow_t *r)
{
    int64_t n = 0;
    size_t from = (size_t)((e->base >> 6) - r->wfirst);
    for (size_t i = from; i < r->nw; i++)
        n += __builtin_popcountll(r->w[i]);
    if (from < r->nw) /* the first word's expired documents */
        n -= __builtin_popcountll(r->w[from] & (((uint64_t)1 << (e->base & 63)) - 1));
    return n;
}

/* Turn ``s``'s row back into a list of its live documents. */
static int
row_to_list(EngineObject *e, eslot_t *s, uint32_t n)
{
    erow_t *r = &e->rows[s->b[HROW]];
    size_t bytes = 0;
    for (int pass = 0; pass < 2; pass++) { /* its bytes, then the list */
        uint16_t *p = pass ? LIST(s->b) : NULL;
        uint32_t m = 0, last = 0;
        size_t k = 0;
        for (size_t i = 0; i < r->nw; i++) {
            uint64_t bits = r->w[i];
            while (bits) {
                int64_t number = 64 * (r->wfirst + (int64_t)i) + __builtin_ctzll(bits);
                bits &= bits - 1;
                if (number < e->base || m >= n)
                    continue;
                k += pass ? post_put(p + k, (uint32_t)number, last, m == 0)
                          : post_len((uint32_t)number, last, m == 0);
                last = (uint32_t)number;
                m++;
            }
        }
        if (pass) {
            s->b[HUSED] = (uint32_t)k;
            s->b[HN] = m;
            s->b[HLAST] = last;
            e->postings += m;
        } else {
            bytes = k;
            if (block_resize(e, s, (uint32_t)(bytes + bytes / 4 + 3)))
                return -1;
        }
    }
    return row_free(e, s);
}

/* Drop the words of ``r`` before the window's first, and its unused capacity. */
static void
row_compact(EngineObject *e, erow_t *r)
{
    int64_t dead = (e->base >> 6) - r->wfirst;
    if (dead > 0) {
        if ((size_t)dead >= r->nw) {
            r->nw = 0;
        } else {
            memmove(r->w, r->w + dead, (r->nw - (size_t)dead) * 8);
            r->nw -= (size_t)dead;
        }
        r->wfirst += dead;
    }
    (void)e; /* its room is the slab's stride: sweep narrows it for every row at once */
}

/* -- the table --------------------------------------------------------------------------- */

static eslot_t *
find(const EngineObject *e, uint64_t key)
{
    size_t i = (size_t)key & e->mask;
    for (;;) {
        eslot_t *s = &e->tab[i];
        if (s->b == NULL || s->key == key)
            return s;
        i = (i + 1) & e->mask;
    }
}

/* A zeroed table of ``cap`` slots, every page of it written once. Fresh pages that calloc
 * leaves untouched are first read by the probes of a rehash: the kernel maps them to the
 * shared zero page, and the write that follows copies it and flushes every CPU's TLB (an
 * interprocessor interrupt a page while the caller's thread runs on the other core: on a
 * virtual machine most of a large rehash's time, during which the engine thread's queue
 * waits). A page written first is allocated zeroed, once. */
static eslot_t *
table_new(size_t cap)
{
    eslot_t *tab = calloc(cap, sizeof(eslot_t));
    if (tab != NULL) {
        volatile char *p = (volatile char *)tab, *end = p + cap * sizeof(eslot_t);
        for (; p < end; p += 4096)
            *p = 0;
    }
    return tab;
}

static int
rehash(EngineObject *e, size_t cap)
{
    eslot_t *old = e->tab;
    size_t oldcap = old ? e->mask + 1 : 0;
    eslot_t *tab = table_new(cap);
    if (tab == NULL)
        return -1;
    e->tab = tab;
    e->mask = cap - 1;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].b)
            *find(e, old[i].key) = old[i];
    free(old);
    return 0;
}

/* Drop expired postings of every key and the keys left with none; shrink lists and rows
 * to what is live; turn rows of keys no longer dense back into lists; then a table sized
 * for the keys that remain (which also closes the holes the dropped keys left in probe
 * runs). */
static int
sweep(EngineObject *e)
{
    size_t kept = 0, cap = e->mask + 1;
    int64_t live = e->end - e->base;
    for (size_t i = 0; i < cap; i++) {
        eslot_t *s = &e->tab[i];
        if (!s->b)
            continue;
        if (s->b[HROW] != NO_ROW) {
            erow_t *r = &e->rows[s->b[HROW]];
            int64_t n = row_count(e, r);
            if (n == 0) {
                if (row_free(e, s))
                    return -1;
                block_free(e, s->b);
                s->b = NULL;
                continue;
            }
            kept++;
            if ((double)n * 2 < e->share * (double)live || n < DENSE_MIN / 2) {
                if (row_to_list(e, s, (uint32_t)n))
                    return -1;
            } else {
                row_compact(e, r);
            }
            continue;
        }
        uint32_t n = trim(e, s);
        if (n == 0) {
            block_free(e, s->b);
            s->b = NULL;
            continue;
        }
        kept++;
        uint32_t used = s->b[HUSED];
        if (used * 2 < s->b[HCAP] && block_resize(e, s, used + used / 4 + 3))
            return -1;
    }
    if (e->nrows) { /* every row left now starts at the window's first word */
        e->rowfloor = e->base >> 6;
        size_t need = e->end > e->base ? (size_t)(((e->end - 1) >> 6) + 1 - e->rowfloor) : 1;
        size_t stride = need + (need / 8 > ROW_STEP ? need / 8 : ROW_STEP);
        if (e->stride > stride + stride / 4 && slab_layout(e, e->slabrows, stride))
            return -1;
    }
    e->used = kept;
    e->swept = e->base;
    size_t want = MIN_TABLE;
    while (want < 4 * kept)
        want *= 2;
    if (want > cap)
        want = cap;
    return rehash(e, want);
}

/* A stored signature: its ascending codes as LEB128 varints of their differences. Codes
 * of four characters below U+0100 (Latin-1 text at q = 4: 16 bits a character, the high
 * byte 0) are first packed a byte a character, an order-preserving map, so that the
 * differences of a ~5 KB item's codes take ~2-3 bytes instead of 8. */
#define SIG_PACKED ((int64_t)1 << 62)
#define SIG_SIX ((int64_t)1 << 61)
/* Only the codes outside its indexed prefix are stored: the count of its postings under
 * the query's codes is the overlap on the prefix already (add_ordered). */
#define SIG_SUFFIX ((int64_t)1 << 60)
#define SIG_OFFSET (SIG_SUFFIX - 1)
#define UNPACKABLE 0xff00ff00ff00ff00ull

/* Codes of four characters in 0-9a-z (a normal form of ASCII letters and digits, case
 * folded) are packed tighter still: six bits a character (0-9 then a-z, an order-
 * preserving map), their differences in groups of three bits and a continuation bit, a
 * nibble each: ~1.25 bytes a q-gram where the byte packing takes ~1.8. */
static uint8_t SIXMAP[256]; /* a character's six bits, 0xff when not in 0-9a-z */

static inline int
six(uint64_t x, uint64_t *out)
{
    if (x & UNPACKABLE)
        return 0;
    unsigned a = SIXMAP[(x >> 48) & 0xff], b = SIXMAP[(x >> 32) & 0xff],
             c = SIXMAP[(x >> 16) & 0xff], d = SIXMAP[x & 0xff];
    if ((a | b | c | d) & 0xc0)
        return 0;
    *out = (uint64_t)a << 18 | b << 12 | c << 6 | d;
    return 1;
}

/* Encode ``n`` ascending codes into ``out``; returns the bytes, SIZE_MAX when one is not
 * six-packable (then ``out`` holds a partial encoding to write over). */
static size_t
six_put(const uint64_t *a, size_t n, uint8_t *out)
{
    uint64_t prev = 0, acc = 0;
    int nbits = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t v, d;
        if (!six(a[i], &v))
            return SIZE_MAX;
        d = v - prev;
        prev = v;
        while (d >= 8) { /* three bits and a continuation bit a nibble, low nibble first */
            acc |= ((d & 7) | 8) << nbits;
            nbits += 4;
            d >>= 3;
        }
        acc |= d << nbits;
        nbits += 4;
        while (nbits >= 8) {
            out[k++] = (uint8_t)acc;
            acc >>= 8;
            nbits -= 8;
        }
    }
    if (nbits)
        out[k++] = (uint8_t)acc;
    return k;
}

/* |a ∩ b|: ``a`` the query's six-packed codes (ascending, the packable ones only), ``b`` a
 * stored six-packed signature of ``nb`` codes, decoded into ``tmp`` (room for nb) first: a
 * tight loop over the nibbles, then a branch-free merge of two arrays. */
static int64_t
overlap_six(const uint32_t *a, int64_t na, const uint8_t *b, int64_t nb, uint32_t *tmp)
{
    uint32_t y = 0, d = 0;
    int shift = 0;
    int64_t j = 0;
    for (size_t k = 0; j < nb; k++) {
        unsigned byte = b[k];
        for (int h = 0; h < 2 && j < nb; h++) {
            unsigned nib = (byte >> (4 * h)) & 15u;
            d |= (uint32_t)(nib & 7) << shift;
            shift += 3;
            if (!(nib & 8)) {
                y += d;
                tmp[j++] = y;
                d = 0;
                shift = 0;
            }
        }
    }
    int64_t i = 0, c = 0;
    j = 0;
    while (i < na && j < nb) {
        uint32_t x = a[i], v = tmp[j];
        c += x == v;
        i += x <= v;
        j += v <= x;
    }
    return c;
}

static inline uint64_t
pack(uint64_t x)
{
    return ((x >> 24) & 0xff000000u) | ((x >> 16) & 0xff0000u) | ((x >> 8) & 0xff00u)
           | (x & 0xffu);
}

/* Encode ``n`` ascending codes into ``out``; returns the bytes written. */
static size_t
sig_put(const uint64_t *a, size_t n, uint8_t *out, int *packed)
{
    int p = 1;
    for (size_t i = 0; i < n && p; i++)
        p = !(a[i] & UNPACKABLE);
    *packed = p;
    uint64_t prev = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t v = p ? pack(a[i]) : a[i], d = v - prev;
        prev = v;
        while (d >= 0x80) {
            out[k++] = (uint8_t)(d | 0x80);
            d >>= 7;
        }
        out[k++] = (uint8_t)d;
    }
    return k;
}

/* |a ∩ b|: ``a`` ascending codes, ``b`` a stored signature of ``nb`` codes. A code of a
 * that cannot be packed is not in a packed b. */
static int64_t
overlap(const uint64_t *a, int64_t na, const uint8_t *b, int64_t nb, int packed)
{
    int64_t i = 0, j = 0, c = 0;
    uint64_t y = 0;
    const uint8_t *q = b;
    while (i < na && j < nb) {
        uint64_t d = 0;
        int shift = 0;
        uint8_t byte;
        do {
            byte = *q++;
            d |= (uint64_t)(byte & 0x7f) << shift;
            shift += 7;
        } while (byte & 0x80);
        y += d;
        j++;
        while (i < na) {
            uint64_t x = a[i];
            if (packed) {
                if (x & UNPACKABLE) {
                    i++;
                    continue;
                }
                x = pack(x);
            }
            if (x > y)
                break;
            c += x == y;
            i++;
        }
    }
    return c;
}

/* -- verification from a packed normal form ----------------------------------------------- */

/* pack_text's codes (see "texts kept in a window" below): five bits, 0-25 a letter; 26 and
 * four bits a digit; 27 and five bits a capital; 31 and eight bits any other byte. */
#define TX_DIGIT 26
#define TX_UPPER 27
#define TX_BYTE 31

/* The character count of a packed text; its bits start at byte *k. -1: not a packed text. */
static int64_t
text_length(const uint8_t *b, size_t len, size_t *k)
{
    uint64_t n = 0;
    int shift = 0;
    for (;;) {
        if (*k >= len || shift > 56)
            return -1;
        uint8_t byte = b[(*k)++];
        n |= (uint64_t)(byte & 0x7f) << shift;
        shift += 7;
        if (!(byte & 0x80))
            break;
    }
    return n > (uint64_t)INT64_MAX / 2 ? -1 : (int64_t)n;
}

/* Whether ``text`` is a pack_text of four characters or more, each a lower-case letter or
 * a digit: its q = 4 grams are then exactly the six-packable codes (see six) of its
 * signature, and verifying from it needs no stored codes. */
static int
text_six(PyObject *text)
{
    if (!PyBytes_Check(text))
        return 0;
    const uint8_t *b = (const uint8_t *)PyBytes_AS_STRING(text);
    size_t len = (size_t)PyBytes_GET_SIZE(text), k = 0;
    int64_t n = text_length(b, len, &k);
    if (n < 4)
        return 0;
    uint64_t acc = 0;
    int nbits = 0;
    for (int64_t i = 0; i < n; i++) {
        while (nbits < 9 && k < len) {
            acc |= (uint64_t)b[k++] << nbits;
            nbits += 8;
        }
        if (nbits < 5)
            return 0;
        unsigned sym = (unsigned)(acc & 31);
        acc >>= 5;
        nbits -= 5;
        if (sym < 26)
            continue;
        if (sym != TX_DIGIT || nbits < 4 || (acc & 15) > 9)
            return 0;
        acc >>= 4;
        nbits -= 4;
    }
    return 1;
}

/* Room in the query's set for ``n`` codes (2**bits >= 2n slots, 64 at least). */
static int
qset_room(EngineObject *e, size_t n)
{
    size_t slots = 64;
    while (slots < 2 * n)
        slots *= 2;
    if (slots <= e->qscap)
        return 0;
    uint32_t *a = realloc(e->qset, slots * 4), *b;
    if (a == NULL)
        return -1;
    e->qset = a;
    if ((b = realloc(e->qstamp, slots * 4)) == NULL)
        return -1;
    e->qstamp = b;
    e->qscap = slots;
    return 0;
}

static inline uint32_t
qset_slot(uint32_t code, int bits)
{
    return (code * 0x9E3779B1u) >> (32 - bits);
}

/* |A ∩ B|: A the query's six-packed codes in the set ``set`` (2**bits slots, code + 1, 0
 * empty), B the distinct q = 4 grams of the packed text ``b`` (text_six holds). A slot
 * counts once per verification (``stamp``). Stops once the q-grams left cannot bring the
 * count to ``target``, returning a bound below it. */
static int64_t
overlap_text(const uint32_t *set, uint32_t *stamps, int bits, uint32_t stamp, const uint8_t *b,
             size_t len, int64_t target)
{
    size_t k = 0;
    int64_t n = text_length(b, len, &k), hits = 0;
    uint32_t mask = ((uint32_t)1 << bits) - 1, code = 0;
    uint64_t acc = 0;
    int nbits = 0;
    for (int64_t i = 0; i < n; i++) {
        if (nbits < 9) {
            while (nbits <= 56 && k < len) {
                acc |= (uint64_t)b[k++] << nbits;
                nbits += 8;
            }
        }
        uint32_t v = (uint32_t)(acc & 31);
        acc >>= 5;
        nbits -= 5;
        if (v < 26) {
            v += 10;
        } else {
            v = (uint32_t)(acc & 15);
            acc >>= 4;
            nbits -= 4;
        }
        code = ((code << 6) | v) & 0xffffffu;
        if (i < 3)
            continue;
        for (uint32_t h = qset_slot(code, bits);; h = (h + 1) & mask) {
            uint32_t x = set[h];
            if (x == 0)
                break;
            if (x == code + 1) {
                if (stamps[h] != stamp) {
                    stamps[h] = stamp;
                    hits++;
                }
                break;
            }
        }
        if (hits + (n - 1 - i) < target)
            return hits + (n - 1 - i);
    }
    return hits;
}

/* -- documents --------------------------------------------------------------------------- */

static void
compact(EngineObject *e)
{
    int64_t dead = e->base - e->dfirst;
    if (dead < 1024 || (size_t)dead * 2 < e->dn)
        return;
    if (!e->full && (size_t)dead < e->dn) {
        int64_t from = (e->docs[dead].sig & SIG_OFFSET) - e->sfirst;
        memmove(e->sigs, e->sigs + from, e->slen - (size_t)from);
        e->slen -= (size_t)from;
        e->sfirst += from;
    } else if (!e->full) {
        e->sfirst += (int64_t)e->slen;
        e->slen = 0;
    }
    memmove(e->docs, e->docs + dead, (e->dn - (size_t)dead) * sizeof(edoc_t));
    memmove(e->gaps, e->gaps + dead, (e->dn - (size_t)dead) * 2);
    e->dn -= (size_t)dead;
    e->dfirst += dead;
}

static int
engine_init(EngineObject *e, PyObject *args, PyObject *kw)
{
    static char *names[] = {"threshold", "full", "dense_fraction", NULL};
    double t, dense;
    int full;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "dpd", names, &t, &full, &dense))
        return -1;
    if (!(t > 0.0 && t <= 1.0) || !(dense >= 0.0 && dense <= 1.0)) {
        PyErr_SetString(PyExc_ValueError, "threshold must be in (0, 1], dense_fraction in [0, 1]");
        return -1;
    }
    /* In prefix mode a lookup reads fewer postings, so a row's speed buys less there, and
     * rows were most of the index's bytes: a row only where it is at most twice the key's
     * list (two bytes a posting). At 1/16 (no larger than the list) a 50k window of ~5 KB
     * items at 0.8 took 1.7x the time a decision; at 1/32, 1.15x for 0.6x the memory. */
    e->share = !full && dense > 0.0 && dense < PREFIX_DENSE ? PREFIX_DENSE : dense;
    if (e->tab != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Engine already initialised");
        return -1;
    }
    e->t = t;
    e->full = full;
    if (rehash(e, MIN_TABLE)) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void
engine_dealloc(EngineObject *e)
{
    ahead_drop(e);
    for (size_t i = 0; i < e->dn; i++)
        Py_XDECREF(e->docs[i].text);
    free(e->slab);
    if (e->tab != NULL)
        for (size_t i = 0; i <= e->mask; i++)
            free(e->tab[i].b);
    free(e->rows);
    free(e->freerows);
    free(e->tab);
    free(e->docs);
    free(e->gaps);
    free(e->sigs);
    free(e->counts);
    free(e->touched);
    free(e->heads);
    free(e->hblocks);
    free(e->dense);
    free(e->slices);
    free(e->cands);
    free(e->pfx);
    free(e->q6);
    free(e->qset);
    free(e->qstamp);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

PyDoc_STRVAR(add_doc,
"add(keys, sig, hour, size, need, unindexed) -> int\n\nIndex the next document under "
"``keys`` (distinct mixed codes, uint64): its hour, |signature|, min_overlap(size, t) and "
"how many of its q-grams are not in ``keys``; ``sig`` (its sorted codes, uint64) is kept "
"for verification in prefix mode, ignored (may be None) in full mode. Returns its number.");

/* Append ``number`` to the postings of ``s`` (a list); -1 when out of memory. */
static int
append(EngineObject *e, eslot_t *s, uint32_t number)
{
    uint32_t *b = s->b;
    if (b[HCAP] - b[HUSED] < post_len(number, b[HLAST], b[HN] == 0)) {
        /* an expired head may make room; else grow by half (rarely used slack stays small) */
        trim(e, s);
        if (b[HCAP] - b[HUSED] < post_len(number, b[HLAST], b[HN] == 0)) {
            if (block_resize(e, s, b[HCAP] + b[HCAP] / 2 + 3))
                return -1;
            b = s->b;
        }
    }
    b[HUSED] += (uint32_t)post_put(LIST(b) + b[HUSED], number, b[HLAST], b[HN] == 0);
    b[HLAST] = number;
    b[HN]++;
    e->postings++;
    return 0;
}

#define ADD_AHEAD 16

/* What add_keys returns instead of a number (it sets no exception: it may run on the
 * lookup thread); add_error sets it. */
#define ADD_NOMEM (-1)
#define ADD_OVERFLOW (-2)

static void
add_error(int64_t code)
{
    if (code == ADD_OVERFLOW)
        PyErr_SetString(PyExc_OverflowError, "2**32 documents in one window's numbering");
    else
        PyErr_NoMemory();
}

/* Index the next document under the ``m`` keys ``k``, its signature of ``size`` codes;
 * in prefix mode keep its packed normal form ``text`` (text_six holds; a reference the
 * caller gives the engine) or, without one, the ``nsig`` ascending codes ``sig``: all of
 * its signature, or (``suffix``) those outside ``k``. Its number, or ADD_NOMEM or
 * ADD_OVERFLOW. */
static int64_t
add_keys(EngineObject *e, const uint64_t *k, size_t m, const uint64_t *sig, int nsig,
         int suffix, int size, int hour, int need, int unidx, PyObject *text)
{
    if (e->end >= (int64_t)UINT32_MAX)
        return ADD_OVERFLOW;
    if ((e->used + m) * 2 > e->mask + 1) {
        size_t cap = e->mask + 1;
        while ((e->used + m) * 2 > cap)
            cap *= 2;
        if (rehash(e, cap))
            goto nomem;
    }
    if (grow((void **)&e->docs, &e->dcap, e->dn + 1, sizeof(edoc_t))
            || grow((void **)&e->gaps, &e->gcap, e->dn + 1, 2))
        goto nomem;
    int64_t off = 0;
    if (!e->full && text != NULL) {
        off = e->sfirst + (int64_t)e->slen; /* no codes: compact() reads the offset */
    } else if (!e->full) {
        size_t most = (size_t)nsig * 10 + 1; /* a varint takes at most 10 bytes */
        if (e->slen + most > e->scap) { /* by half: the arena is most of it */
            size_t cap = e->scap + e->scap / 2 + most + 4096;
            uint8_t *sg = realloc(e->sigs, cap);
            if (sg == NULL)
                goto nomem;
            e->sigs = sg;
            e->scap = cap;
        }
        size_t used = six_put(sig, (size_t)nsig, e->sigs + e->slen);
        if (used != SIZE_MAX) {
            off = (e->sfirst + (int64_t)e->slen) | SIG_SIX;
        } else {
            int packed;
            used = sig_put(sig, (size_t)nsig, e->sigs + e->slen, &packed);
            off = (e->sfirst + (int64_t)e->slen) | (packed ? SIG_PACKED : 0);
        }
        e->slen += used;
        if (suffix)
            off |= SIG_SUFFIX;
    }
    uint32_t number = (uint32_t)e->end;
    /* dense_fraction 0: never */
    double at = e->share > 0.0 ? e->share * (double)(e->end + 1 - e->base) : 1e300;
    int64_t dense_at = at < (double)DENSE_MIN ? DENSE_MIN
                       : at > 4e9 ? INT64_MAX : (int64_t)ceil(at);
    if (rows_room(e, (int64_t)number))
        goto nomem;
    /* A failure part way leaves some keys with this number: the engine is then unusable
     * (as after any MemoryError in a decision, the process restarts from the store). */
    /* The keys' table lines fetched ADD_AHEAD keys ahead, their blocks half as far. */
    for (size_t i = 0; i < m && i < ADD_AHEAD; i++)
        PREFETCH(&e->tab[(size_t)k[i] & e->mask]);
    for (size_t i = 0; i < m; i++) {
        if (i + ADD_AHEAD < m)
            PREFETCH(&e->tab[(size_t)k[i + ADD_AHEAD] & e->mask]);
        if (i + ADD_AHEAD / 2 < m) {
            const eslot_t *t = find(e, k[i + ADD_AHEAD / 2]);
            if (t->b)
                PREFETCH(t->b);
        }
        eslot_t *s = find(e, k[i]);
        if (!s->b) {
            if ((s->b = block_new(e, 3)) == NULL)
                goto nomem;
            s->key = k[i];
            e->used++;
        }
        if (s->b[HROW] != NO_ROW) {
            if (row_set(&e->rows[s->b[HROW]], number))
                goto nomem;
            continue;
        }
        if (append(e, s, number))
            goto nomem;
        if ((int64_t)s->b[HN] >= dense_at
                && (int64_t)trim(e, s) >= dense_at && row_make(e, s))
            goto nomem;
    }
    int gap = need - unidx;
    e->gaps[e->dn] = (uint16_t)(gap < 0 ? 0 : gap > 65535 ? 65535 : gap);
    edoc_t *d = &e->docs[e->dn++];
    d->sig = off;
    d->hour = hour;
    d->size = size;
    d->need = need;
    d->unidx = unidx;
    d->text = e->full ? NULL : text;
    if (size > e->maxsize)
        e->maxsize = size;
    e->end++;
    return (int64_t)number;
nomem:
    return ADD_NOMEM;
}

static PyObject *
engine_add(EngineObject *e, PyObject *args)
{
    if (settle(e) < 0)
        return NULL;
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
    int64_t number = add_keys(e, kb.buf, (size_t)kb.len / 8, sb.buf, size, 0, size, hour, need,
                              unidx, NULL);
    if (number >= 0)
        result = PyLong_FromLongLong((long long)number);
    else
        add_error(number);
done:
    PyBuffer_Release(&kb);
    if (sb.obj)
        PyBuffer_Release(&sb);
    return result;
}

PyDoc_STRVAR(add_ordered_doc,
"add_ordered(mixed, sig, hour, need, length, classes, shift, counts, text=None) -> int\n\n"
"Index the "
"next document, its distinct mixed codes ``mixed`` and sorted codes ``sig`` (uint64, as "
"many): in full mode under every code; in prefix mode under the ``length`` smallest codes "
"in the order (classes[code >> shift], code) (``classes`` uint8 over 2**(64 - shift) "
"slots; None: by code alone), keeping ``sig``, then counted once per distinct slot into "
"``counts`` (uint32, as many slots; None: not counted), the order's sketch. ``need``: "
"min_overlap(|sig|, t). ``text``: its normal form as pack_text packed it (q = 4), kept and "
"verified from in prefix mode instead of the codes outside its prefix when it is of lower-case "
"letters and digits; ignored otherwise. Returns its number. What add, OrderVersion.prefix "
"and FrequencyBook.count did, in one call.");

/* add_ordered's arguments: the buffers it holds and the numbers. */
typedef struct {
    Py_buffer mb, sb, cb, nb; /* mixed, sig, classes (optional), counts (optional) */
    size_t n;
    int hour, need, shift;
    Py_ssize_t length;
    PyObject *text;
} eadd_t;

static void
add_release(eadd_t *a)
{
    if (a->mb.obj)
        PyBuffer_Release(&a->mb);
    if (a->sb.obj)
        PyBuffer_Release(&a->sb);
    if (a->cb.obj)
        PyBuffer_Release(&a->cb);
    if (a->nb.obj)
        PyBuffer_Release(&a->nb);
}

/* Parse and check add_ordered's arguments into ``a`` (zeroed); 0, or -1 with an exception
 * set (release ``a`` either way). */
static int
add_args(PyObject *args, eadd_t *a)
{
    PyObject *clobj, *cntobj;
    a->text = Py_None;
    if (!PyArg_ParseTuple(args, "y*y*iinOiO|O", &a->mb, &a->sb, &a->hour, &a->need, &a->length,
                          &clobj, &a->shift, &cntobj, &a->text))
        return -1;
    if (ndd_check(&a->mb, 8, "mixed") || ndd_check(&a->sb, 8, "sig"))
        return -1;
    a->n = (size_t)a->mb.len / 8;
    if ((size_t)a->sb.len / 8 != a->n || a->n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "mixed and sig must hold as many codes");
        return -1;
    }
    if (a->shift < 17 || a->shift > 63) {
        PyErr_SetString(PyExc_ValueError, "shift must be in 17..63");
        return -1;
    }
    size_t slots = (size_t)1 << (64 - a->shift);
    if (clobj != Py_None && (PyObject_GetBuffer(clobj, &a->cb, PyBUF_SIMPLE) < 0
                             || (size_t)a->cb.len != slots)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "classes must have 2**(64 - shift) bytes");
        return -1;
    }
    if (cntobj != Py_None && (PyObject_GetBuffer(cntobj, &a->nb, PyBUF_WRITABLE) < 0
                              || (size_t)a->nb.len != slots * 4)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "counts must have 2**(64 - shift) uint32");
        return -1;
    }
    return 0;
}

/* The text the index holds for a document of signature ``sig``: ``text`` when every code is
 * a q = 4 gram of it (prefix mode), else NULL. It reads the text's bytes and type only, no
 * reference count: the engine thread calls it too. */
static PyObject *
held_text(const EngineObject *e, PyObject *text, const uint64_t *sig, size_t n)
{
    if (e->full || text == Py_None || !text_six(text))
        return NULL;
    uint64_t v;
    for (size_t i = 0; i < n; i++)
        if (!six(sig[i], &v))
            return NULL;
    return text;
}

/* add_ordered's work, without the GIL's help (the lookup thread runs it too): ``keep`` is
 * the text to hold (a reference given to the engine) or NULL. The number, or ADD_NOMEM or
 * ADD_OVERFLOW. */
static int64_t
add_ordered_core(EngineObject *e, const uint64_t *mixed, const uint64_t *sig, size_t n, int hour,
                 int need, Py_ssize_t length, const uint8_t *cl, int shift, uint32_t *cnt,
                 PyObject *keep)
{
    const uint64_t *keys = mixed, *rest = sig;
    size_t m = n, nrest = 0;
    int unidx = (int)((Py_ssize_t)n - length);
    if (!e->full && length < (Py_ssize_t)n) {
        size_t len = length < 0 ? 0 : (size_t)length;
        if (grow((void **)&e->pfx, &e->pcap, 3 * n + 1, 8))
            return ADD_NOMEM;
        uint64_t *o = e->pfx, *tie = o + n;
        uint8_t *c = (uint8_t *)(o + 2 * n);
        nrest = n;
        if (len)
            ndd_prefix_under(mixed, (Py_ssize_t)n, cl, shift, (Py_ssize_t)len, o, tie, c);
        if (keep != NULL) { /* the held text verifies the whole overlap: no codes kept */
            nrest = 0;
        } else if (len) {
            /* The codes outside the prefix, in signature order (mixed[i] is fmix64 of
             * sig[i]): the prefix is every code of a class below ``last`` and those of
             * class ``last`` up to ``kth`` (c[i]: the class of mixed[i]). */
            int last = 256;
            size_t below = 0;
            if (cl != NULL) {
                size_t hist[256] = {0};
                for (size_t i = 0; i < n; i++)
                    hist[c[i]]++;
                last = 0;
                while (last < 255 && below + hist[last] < len)
                    below += hist[last++];
            }
            uint64_t kth = 0;
            for (size_t j = below; j < len; j++)
                kth = o[j] > kth ? o[j] : kth;
            nrest = 0;
            for (size_t i = 0; i < n; i++) {
                int cls = cl != NULL ? c[i] : 256;
                int in = cls < last || (cls == last && mixed[i] <= kth);
                if (!in)
                    tie[nrest++] = sig[i];
            }
        } else {
            memcpy(tie, sig, n * 8);
        }
        keys = o;
        m = len;
        rest = tie;
    }
    int64_t number = add_keys(e, keys, m, rest, (int)nrest, !e->full, (int)n, hour, need, unidx,
                              keep);
    if (number < 0 || cnt == NULL)
        return number;
    /* each slot once: mark its top bit, then count the marked (4 MB: fetched ahead) */
    for (size_t i = 0; i < n && i < 16; i++)
        PREFETCH(&cnt[mixed[i] >> shift]);
    for (size_t i = 0; i < n; i++) {
        if (i + 16 < n)
            PREFETCH(&cnt[mixed[i + 16] >> shift]);
        cnt[mixed[i] >> shift] |= 0x80000000u;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t *x = &cnt[mixed[i] >> shift];
        if (*x & 0x80000000u)
            *x = (*x & 0x7fffffffu) + 1;
    }
    return number;
}

static PyObject *
engine_add_ordered(EngineObject *e, PyObject *args)
{
    if (settle(e) < 0)
        return NULL;
    eadd_t a = {0};
    PyObject *result = NULL;
    if (add_args(args, &a) == 0) {
        PyObject *keep = held_text(e, a.text, a.sb.buf, a.n);
        Py_XINCREF(keep);
        int64_t number = add_ordered_core(e, a.mb.buf, a.sb.buf, a.n, a.hour, a.need, a.length,
                                          a.cb.obj ? a.cb.buf : NULL, a.shift,
                                          a.nb.obj ? a.nb.buf : NULL, keep);
        if (number >= 0) {
            result = PyLong_FromLongLong((long long)number);
        } else {
            Py_XDECREF(keep);
            add_error(number);
        }
    }
    add_release(&a);
    return result;
}

PyDoc_STRVAR(release_doc,
"release_before(number)\n\nForget the documents numbered below ``number`` (expired).");

static PyObject *
engine_release(EngineObject *e, PyObject *args)
{
    if (settle(e) < 0)
        return NULL;
    long long number;
    if (!PyArg_ParseTuple(args, "L", &number))
        return NULL;
    if (number > e->end)
        number = e->end;
    if (number <= e->base)
        Py_RETURN_NONE;
    for (int64_t x = e->base; x < number; x++) /* expired with their window documents */
        Py_CLEAR(e->docs[x - e->dfirst].text);
    e->base = number;
    compact(e);
    if ((e->base - e->swept) * 4 > e->end - e->base + 4096 && sweep(e))
        return PyErr_NoMemory();
    Py_RETURN_NONE;
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

static inline void
csa(uint64_t *h, uint64_t *l, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t u = a ^ b;
    *h = (a & b) | (u & c);
    *l = u ^ c;
}

/* Sixteen rows into the low four slices (ones .. eights) by a carry-save adder tree
 * (Harley-Seal); the carries of sixteen into ``c16``. Separate restrict pointers, so the
 * compiler vectorises over words. */
ROW_KERNEL static void
csa16(const uint64_t *const *x, size_t w0, size_t w1, uint64_t *restrict s1,
      uint64_t *restrict s2, uint64_t *restrict s4, uint64_t *restrict s8,
      uint64_t *restrict c16)
{
    const uint64_t *restrict y0 = x[0], *restrict y1 = x[1], *restrict y2 = x[2],
                   *restrict y3 = x[3], *restrict y4 = x[4], *restrict y5 = x[5],
                   *restrict y6 = x[6], *restrict y7 = x[7], *restrict y8 = x[8],
                   *restrict y9 = x[9], *restrict y10 = x[10], *restrict y11 = x[11],
                   *restrict y12 = x[12], *restrict y13 = x[13], *restrict y14 = x[14],
                   *restrict y15 = x[15];
    for (size_t w = w0; w < w1; w++) {
        uint64_t ones = s1[w], twos = s2[w], fours = s4[w], eights = s8[w];
        uint64_t twosA, twosB, foursA, foursB, eightsA, eightsB, sixteens;
        csa(&twosA, &ones, ones, y0[w], y1[w]);
        csa(&twosB, &ones, ones, y2[w], y3[w]);
        csa(&foursA, &twos, twos, twosA, twosB);
        csa(&twosA, &ones, ones, y4[w], y5[w]);
        csa(&twosB, &ones, ones, y6[w], y7[w]);
        csa(&foursB, &twos, twos, twosA, twosB);
        csa(&eightsA, &fours, fours, foursA, foursB);
        csa(&twosA, &ones, ones, y8[w], y9[w]);
        csa(&twosB, &ones, ones, y10[w], y11[w]);
        csa(&foursA, &twos, twos, twosA, twosB);
        csa(&twosA, &ones, ones, y12[w], y13[w]);
        csa(&twosB, &ones, ones, y14[w], y15[w]);
        csa(&foursB, &twos, twos, twosA, twosB);
        csa(&eightsB, &fours, fours, foursA, foursB);
        csa(&sixteens, &eights, eights, eightsA, eightsB);
        s1[w] = ones;
        s2[w] = twos;
        s4[w] = fours;
        s8[w] = eights;
        c16[w] = sixteens;
    }
}

/* Add words w0 .. w1-1 of the bitmap ``c`` into slices ``from`` .. B-1 of S (slices of W
 * words), carries rippled. */
ROW_KERNEL static void
ripple(uint64_t *restrict S, size_t W, size_t w0, size_t w1, int from, int B,
       uint64_t *restrict c)
{
    for (int b = from; b < B; b++) {
        uint64_t *restrict s = S + (size_t)b * W;
        for (size_t w = w0; w < w1; w++) {
            uint64_t t = s[w] & c[w];
            s[w] ^= c[w];
            c[w] = t;
        }
    }
}

/* Add the k rows ``x`` (W words each) into the bit-sliced counter S (B >= 5 slices of W
 * words, S[b * W + w]: bit b of the counts of word w); ``carry``: W words of scratch. A
 * chunk of words at a time: each pass over the rows reads sixteen runs of ROW_CHUNK words,
 * long enough for the hardware prefetchers, and the chunk's slices stay in the second-level
 * cache. Chunks of 256 words (slices in the first-level cache, runs of 2 KiB) made a 200k
 * window's count at 0.3 1.27x slower (11.6-11.9 against 9.0-9.6 ms a decision). */
#define ROW_CHUNK 2048
static void
count_rows(const uint64_t *const *x, size_t k, size_t W, uint64_t *S, int B, uint64_t *carry)
{
    for (size_t w0 = 0; w0 < W; w0 += ROW_CHUNK) {
        size_t w1 = w0 + ROW_CHUNK < W ? w0 + ROW_CHUNK : W;
        size_t g = 0;
        for (; g + 16 <= k; g += 16) {
            csa16(x + g, w0, w1, S, S + W, S + 2 * W, S + 3 * W, carry);
            ripple(S, W, w0, w1, 4, B, carry);
        }
        for (; g < k; g++) {
            memcpy(carry + w0, x[g] + w0, (w1 - w0) * 8);
            ripple(S, W, w0, w1, 0, B, carry);
        }
    }
}

/* cnt[64 w + i] += the count in S of bit i of word w: a byte of a slice at a time (any B). */
static void
spread_bytes(const uint64_t *S, size_t W, int B, uint32_t *cnt)
{
    for (int b = 0; b < B; b++) {
        const uint64_t *s = S + (size_t)b * W;
        for (size_t w = 0; w < W; w++) {
            uint64_t bits = s[w];
            uint32_t *c = cnt + 64 * w;
            while (bits) {
                int j = __builtin_ctzll(bits) >> 3;
                unsigned by = (unsigned)(bits >> (8 * j)) & 0xffu;
                bits &= ~((uint64_t)0xff << (8 * j));
                const uint32_t *sp = SPREAD[by];
                uint32_t *cj = c + 8 * j;
                for (int i = 0; i < 8; i++)
                    cj[i] += sp[i] << b;
            }
        }
    }
}

/* As spread_bytes for B <= 16: the B bytes of eight documents summed into eight 16-bit
 * lanes (two words), then added to their counts. */
ROW_KERNEL static void
spread_add(const uint64_t *S, size_t W, int B, uint32_t *cnt)
{
    if (B > 16) {
        spread_bytes(S, W, B, cnt);
        return;
    }
    for (size_t w = 0; w < W; w++) {
        for (int j = 0; j < 8; j++) {
            uint64_t lo = 0, hi = 0;
            for (int b = 0; b < B; b++) {
                unsigned by = (unsigned)(S[(size_t)b * W + w] >> (8 * j)) & 0xffu;
                lo += LANES[by][0] << b;
                hi += LANES[by][1] << b;
            }
            if (!(lo | hi))
                continue;
            uint32_t *c = cnt + 64 * w + 8 * j;
            for (int i = 0; i < 4; i++) {
                c[i] += (uint32_t)(lo >> (16 * i)) & 0xffffu;
                c[4 + i] += (uint32_t)(hi >> (16 * i)) & 0xffffu;
            }
        }
    }
}

/* ScanCount of one list (``used`` units from ``p``, its first posting ``v`` read): each
 * posting's count, from the call's aligned base ``a32``, one more. */
static inline void
scan_count(const uint16_t *restrict p, size_t used, uint32_t v, uint32_t a32,
           uint32_t *restrict cnt)
{
    cnt[v - a32]++;
    for (size_t j = 3; j < used;) {
        v = post_get(p, &j, v);
        cnt[v - a32]++;
    }
}

/* As scan_count, listing each document counted for the first time in ``touched`` (``nt``
 * listed so far; returns how many now). No branch: first touches are random. */
static inline size_t
scan_touch(const uint16_t *restrict p, size_t used, uint32_t v, uint32_t a32,
           uint32_t *restrict cnt, uint32_t *restrict touched, size_t nt)
{
    uint32_t x = v - a32;
    touched[nt] = x;
    nt += cnt[x]++ == 0;
    for (size_t j = 3; j < used;) {
        v = post_get(p, &j, v);
        x = v - a32;
        touched[nt] = x;
        nt += cnt[x]++ == 0;
    }
    return nt;
}

/* A lookup reads its lists one after the other: the lines of the list LIST_AHEAD on (its
 * first LIST_AHEAD_BYTES) are fetched while one is counted. A list's header line comes with
 * the probe; without this its later lines were a wait each (~35% of the lists' time at 0.8). */
#define LIST_AHEAD 8
#define LIST_AHEAD_BYTES 1024

PyDoc_STRVAR(best_doc,
"best(keys, sig, need, unindexed, hour_lo, hour_hi, size_lo, size_hi) -> Match\n\nThe best "
"match of a query with sorted codes ``sig`` (uint64; |sig| = its size) that needs ``need`` "
"shared q-grams, among the live documents whose hour and size lie in the inclusive ranges: "
"the highest doc_q >= threshold, ties to the lowest number. ``keys`` (uint64) are looked "
"up: in full mode its distinct mixed codes; in prefix mode, for each order version of the "
"window, its prefix under that version as the documents of that version were indexed, "
"leaving ``unindexed`` of its q-grams out.");

/* One lookup's query: the caller's buffers (best) or the engine's copies (submit). */
typedef struct {
    const uint64_t *k, *qs;
    size_t m;
    int64_t qsize, need, uq, h0, h1, s0, s1;
} equery_t;

/* Its outcome: the best document's number (-1: none), the shared q-grams, the counters of
 * Match, and whether a row could not grow (a MemoryError for the caller). */
typedef struct {
    int64_t best, shared, ncand, nver, npost;
    int failed;
} eresult_t;

/* The scratch a lookup of ``m`` keys and ``nsig`` codes needs, grown before the lookup runs
 * without the GIL (or on the lookup thread); -1 when out of memory. */
static int
best_room(EngineObject *e, size_t m, size_t nsig)
{
    size_t live = (size_t)(e->end - e->base);
    int64_t wb = e->base >> 6;
    size_t W = live ? (size_t)(((e->end - 1) >> 6) - wb + 1) : 0;
    size_t span = W * 64;
    int B = 1;
    while (((size_t)1 << B) <= m)
        B++;
    if (B < 5)
        B = 5;
    if (grow((void **)&e->heads, &e->hcap, m + 1, 4)
            || grow((void **)&e->hblocks, &e->hbcap, m + 1, sizeof(uint32_t *))
            || grow((void **)&e->dense, &e->dncap, m + 1, sizeof(uint64_t *))
            || grow((void **)&e->slices, &e->slcap, (size_t)(B + 1) * W + 1, 8)
            || grow((void **)&e->cands, &e->kcap, live + 1, sizeof(ecand_t))
            || (!e->full && grow((void **)&e->q6, &e->q6cap, nsig + (size_t)e->maxsize + 1, 4))
            || (!e->full && qset_room(e, nsig)))
        return -1;
    if (span + 64 > e->ccap) {
        size_t old = e->ccap;
        if (grow((void **)&e->counts, &e->ccap, span + 64, 4))
            return -1;
        memset(e->counts + old, 0, (e->ccap - old) * 4);
        void *t = realloc(e->touched, e->ccap * 4);
        if (t == NULL)
            return -1;
        e->touched = t;
    }
    return 0;
}

/* The lookup itself: no Python object is touched but the held texts' bytes, which the
 * engine owns and frees only in calls that first wait for a lookup (settle). */
static void
best_core(EngineObject *e, const equery_t *q, eresult_t *r)
{
    size_t live = (size_t)(e->end - e->base);
    int64_t abase = e->base & ~(int64_t)63;
    int64_t wb = e->base >> 6;
    size_t W = live ? (size_t)(((e->end - 1) >> 6) - wb + 1) : 0;
    size_t span = W * 64, m = q->m;
    int B;
    const uint64_t *k = q->k, *qs = q->qs;
    int64_t qsize = q->qsize, need = q->need, uq = q->uq, h0 = q->h0, h1 = q->h1, s0 = q->s0,
            s1 = q->s1;
    int64_t best = -1, bshared = 0, bdenom = 1, ncand = 0, nver = 0, npost = 0, nq6 = -1;
    int qbits = 0;
    int failed = 0;
    /* 1. the slot of every query key present, its table line fetched ahead */
    size_t nh = 0;
    const size_t AHEAD = 8;
    for (size_t i = 0; i < m && i < AHEAD; i++)
        PREFETCH(&e->tab[(size_t)k[i] & e->mask]);
    for (size_t i = 0; i < m; i++) {
        if (i + AHEAD < m)
            PREFETCH(&e->tab[(size_t)k[i + AHEAD] & e->mask]);
        eslot_t *s = find(e, k[i]);
        if (s->b) {
            e->hblocks[nh] = s->b;
            e->heads[nh++] = (uint32_t)(s - e->tab);
            PREFETCH(s->b);
        }
    }
    /* 2. ScanCount over the sparse keys; the dense ones' rows set aside. With rows,
     * every document may have a count: the prefix mode then scans them all, as the full
     * mode does, instead of the documents its lists touched. */
    uint32_t *cnt = e->counts, *touched = e->touched;
    size_t nt = 0, nd = 0, nrowkeys = 0;
    if (!e->full && e->nrows > e->nfree) /* rows live: which of them the query meets */
        for (size_t h = 0; h < nh; h++)
            nrowkeys += e->hblocks[h][HROW] != NO_ROW;
    for (size_t h = 0; h < nh; h++) {
        if (h + LIST_AHEAD < nh) { /* a later list's lines fetched ahead */
            const char *nb = (const char *)e->hblocks[h + LIST_AHEAD];
            size_t bytes = HDR * 4 + (size_t)((const uint32_t *)nb)[HUSED] * 2;
            if (bytes > LIST_AHEAD_BYTES)
                bytes = LIST_AHEAD_BYTES;
            for (size_t o = 64; o < bytes; o += 64)
                PREFETCH(nb + o);
        }
        const uint32_t *b = e->hblocks[h];
        if (b[HROW] != NO_ROW) {
            erow_t *r = &e->rows[b[HROW]];
            size_t need_w = (size_t)(wb - r->wfirst) + W;
            if (r->nw < need_w) {
                if (row_reserve(r, need_w)) {
                    failed = 1;
                    break;
                }
                memset(r->w + r->nw, 0, (need_w - r->nw) * 8);
                r->nw = need_w;
            }
            e->dense[nd++] = r->w + (wb - r->wfirst);
            continue;
        }
        uint32_t n = b[HN];
        if (n == 0)
            continue;
        const uint16_t *p = LIST(b);
        uint32_t v = p[1] | (uint32_t)p[2] << 16; /* the first posting is whole */
        if ((int64_t)v < e->base) { /* an expired head: dropped first */
            eslot_t *s = &e->tab[e->heads[h]];
            n = trim(e, s);
            if (n == 0)
                continue;
            b = s->b;
            p = LIST(b);
            v = p[1] | (uint32_t)p[2] << 16;
        }
        npost += n;
        if (e->full || nrowkeys)
            scan_count(p, b[HUSED], v, (uint32_t)abase, cnt);
        else
            nt = scan_touch(p, b[HUSED], v, (uint32_t)abase, cnt, touched, nt);
    }
    /* 3. the dense rows, added bit-sliced then spread into the counts */
    if (nd && !failed) {
        B = 5; /* enough bits for nd rows (at most the query's keys: allocated above) */
        while (((size_t)1 << B) <= nd)
            B++;
        memset(e->slices, 0, (size_t)B * W * 8);
        count_rows(e->dense, nd, W, e->slices, B, e->slices + (size_t)B * W);
        spread_add(e->slices, W, B, cnt);
        npost += (int64_t)(nd * W);
    }
    /* 4. the best match */
    const edoc_t *docs = e->docs + (abase - e->dfirst); /* docs[x]: number abase + x */
    double t = e->t;
    size_t first = (size_t)(e->base - abase);
    if (failed) {
        memset(cnt, 0, span * 4);
    } else if (e->full) {
        uint32_t need32 = need > (int64_t)UINT32_MAX ? UINT32_MAX
                          : need < 0 ? 0 : (uint32_t)need;
        for (size_t x = first; x < first + live; x++) {
            if ((x & 15) == 0 && x + 16 <= first + live) { /* sixteen at a time: most
                                                           * documents fall short */
                int any = 0;
                for (int i = 0; i < 16; i++)
                    any |= cnt[x + i] >= need32;
                if (!any) {
                    x += 15;
                    continue;
                }
            }
            int64_t c = cnt[x];
            if (c < need)
                continue;
            const edoc_t *d = &docs[x];
            if (c < d->need || d->hour < h0 || d->hour > h1 || d->size < s0
                    || d->size > s1)
                continue;
            ncand++; /* reaches the pair's overlap: a match */
            int64_t denom = qsize > d->size ? qsize : d->size;
            if ((double)c / (double)denom >= t
                    && (best < 0 || above(c, denom, bshared, bdenom))) {
                best = (int64_t)x;
                bshared = c;
                bdenom = denom;
            }
        }
        memset(cnt, 0, span * 4);
    } else {
        size_t nk = 0;
        const uint16_t *gaps = e->gaps + (abase - e->dfirst);
        if (nrowkeys) { /* every live document may have a count: list the ones that
                         * pass the first test */
            int32_t u32 = uq > 65535 ? 65535 : (int32_t)uq;
            size_t x = first, stop = first + live;
            for (; x + 16 <= stop; x += 16) { /* sixteen at a time: few pass */
                int any = 0;
                for (int i = 0; i < 16; i++)
                    any |= (int32_t)cnt[x + i] + u32 >= (int32_t)gaps[x + i];
                if (!any)
                    continue;
                for (int i = 0; i < 16; i++) {
                    touched[nt] = (uint32_t)(x + i);
                    nt += (int32_t)cnt[x + i] + u32 >= (int32_t)gaps[x + i];
                }
            }
            for (; x < stop; x++) {
                touched[nt] = (uint32_t)x;
                nt += (int32_t)cnt[x] + u32 >= (int32_t)gaps[x];
            }
        }
        for (size_t i = 0; i < nt; i++) {
            uint32_t x = touched[i];
            int64_t c = cnt[x];
            cnt[x] = 0;
            /* c + max(uq, unidx) >= o >= need implies c + uq >= need - unidx: most
             * touched documents share a q-gram or two, ruled out by two bytes */
            if (c + uq < gaps[x])
                continue;
            const edoc_t *d = &docs[x];
            int64_t o = need > d->need ? need : d->need;
            int64_t u = uq > d->unidx ? uq : d->unidx;
            if (c + u < o || d->hour < h0 || d->hour > h1 || d->size < s0 || d->size > s1)
                continue;
            /* the shared q-grams the count missed are outside one of the prefixes */
            int64_t small = qsize < d->size ? qsize : d->size;
            int64_t denom = qsize > d->size ? qsize : d->size;
            int64_t ub = c + d->unidx + uq < small ? c + d->unidx + uq : small;
            if ((double)ub / (double)denom < t)
                continue;
            e->cands[nk].pos = x;
            e->cands[nk].ub = ub;
            e->cands[nk].denom = denom;
            e->cands[nk].count = c;
            nk++;
        }
        if (nrowkeys) /* rows count expired documents of their first word too */
            memset(cnt, 0, span * 4);
        ncand = (int64_t)nk;
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
            const uint8_t *stored = e->sigs + ((d->sig & SIG_OFFSET) - e->sfirst);
            int64_t sh, nst = d->size, part = 0;
            if ((d->text != NULL || d->sig & SIG_SIX) && nq6 < 0) {
                nq6 = 0; /* the query's six-packed codes, once a call */
                for (int64_t j = 0; j < qsize; j++) {
                    uint64_t v;
                    if (six(qs[j], &v))
                        e->q6[nq6++] = (uint32_t)v;
                }
            }
            if (d->text != NULL) {
                if (qbits == 0) { /* and in a set, once a call */
                    qbits = 6;
                    while (((int64_t)1 << qbits) < 2 * nq6)
                        qbits++;
                    memset(e->qset, 0, ((size_t)1 << qbits) * 4);
                    memset(e->qstamp, 0, ((size_t)1 << qbits) * 4);
                    uint32_t qmask = ((uint32_t)1 << qbits) - 1;
                    for (int64_t j = 0; j < nq6; j++) {
                        uint32_t h = qset_slot(e->q6[j], qbits);
                        while (e->qset[h] != 0)
                            h = (h + 1) & qmask;
                        e->qset[h] = e->q6[j] + 1;
                    }
                }
                /* the least overlap that reaches the threshold, as tested below */
                int64_t target = (int64_t)ceil(t * (double)c->denom);
                while (target > 0 && (double)(target - 1) / (double)c->denom >= t)
                    target--;
                while ((double)target / (double)c->denom < t)
                    target++;
                sh = overlap_text(e->qset, e->qstamp, qbits, (uint32_t)nver + 1,
                                  (const uint8_t *)PyBytes_AS_STRING(d->text),
                                  (size_t)PyBytes_GET_SIZE(d->text), target);
                nver++;
                goto verified;
            }
            if (d->sig & SIG_SUFFIX) { /* the prefix's overlap is the count */
                nst = d->unidx > 0 ? d->unidx : 0;
                part = c->count;
            }
            if (d->sig & SIG_SIX) {
                sh = part + overlap_six(e->q6, nq6, stored, nst, e->q6 + qsize);
            } else {
                sh = part + overlap(qs, qsize, stored, nst, (d->sig & SIG_PACKED) != 0);
            }
            nver++;
        verified:
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
    r->best = best < 0 ? -1 : best + abase;
    r->shared = best < 0 ? 0 : bshared;
    r->ncand = ncand;
    r->nver = nver;
    r->npost = npost;
    r->failed = failed;
}

/* A Match of ``r`` (NULL with MemoryError when the lookup could not grow a row). */
static PyObject *
match_of(const eresult_t *r)
{
    if (r->failed)
        return PyErr_NoMemory();
    PyObject *result = PyStructSequence_New(&MatchType);
    if (result == NULL)
        return NULL;
    long long vals[5] = {r->best, r->shared, r->ncand, r->nver, r->npost};
    for (int i = 0; i < 5; i++) {
        PyObject *v = PyLong_FromLongLong(vals[i]);
        if (v == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyStructSequence_SET_ITEM(result, i, v);
    }
    return result;
}

/* best's and submit's arguments, checked; 0, or -1 with an exception set. */
static int
query_args(EngineObject *e, PyObject *args, Py_buffer *kb, Py_buffer *sb, equery_t *q)
{
    long long need, uq, h0, h1, s0, s1;
    if (!PyArg_ParseTuple(args, "y*y*LLLLLL", kb, sb, &need, &uq, &h0, &h1, &s0, &s1))
        return -1;
    if (ndd_check(kb, 8, "keys") || ndd_check(sb, 8, "sig"))
        return -1;
    if (!e->full && (uq != 0 || kb->len != sb->len)) { /* a suffix's overlap adds to the count */
        PyErr_SetString(PyExc_ValueError, "in prefix mode keys are fmix64 of the whole sig");
        return -1;
    }
    *q = (equery_t){kb->buf, sb->buf, (size_t)kb->len / 8, sb->len / 8, need, uq, h0, h1, s0,
                    s1};
    return 0;
}

/* -- the engine thread ----------------------------------------------------------------- */

/* submit() hands a lookup to the process's engine thread and returns at once; collect()
 * waits for its Match. add_ahead() hands it the indexing of a document likewise. Meanwhile
 * the caller does what needs neither (reading, parsing and signing the next item, writing
 * the last decision: Python work under the GIL), which the thread, holding no GIL,
 * overlaps. One thread (the lane) serves every engine of the process, one per scope's
 * window: with a thread per engine, each polling for its next job, dedup of the Reuters
 * day in its 66 channel scopes took ten times as long as with none. The lane runs the jobs
 * in the order given, whatever their engine (at most LK_SLOTS wait: dedup keeps lookups of
 * several windows begun, each queued behind a document's indexing; with two slots its
 * caller waited for a free one), and touches no Python object but the bytes of held texts and
 * the buffers a job holds, released by a caller's thread. Every other call of an engine
 * first waits for that engine's jobs to end (settle), so nothing a job reads changes or is
 * freed under it. The lane starts with the first job and ends when the last engine that
 * gave it one is freed. The lane and each engine's part of it (struct ahead) are touched
 * only under the GIL, the jobs' counters aside. */
enum { JOB_LOOKUP, JOB_ADD };
#define LK_SLOTS 4 /* jobs that may wait */

typedef struct {
    EngineObject *e; /* whose job it is */
    int kind;
    equery_t q; /* a lookup's query (its arrays in buf) and outcome */
    eresult_t r;
    eadd_t a;   /* an indexing's arguments (the classes and counts held; mixed and sig in
                 * buf), its text (a reference), whether the index kept it, and its outcome
                 * (a number or ADD_*) */
    PyObject *text;
    int kept;
    int64_t added;
    uint64_t *buf;
    size_t cap;
} ejob_t;

struct lane {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    atomic_long given, ended;     /* jobs given to the thread, jobs it ended */
    long reaped;                  /* jobs whose outcome a caller's thread took */
    atomic_int sleeping, waiting; /* the thread waits for a job; callers wait for an end */
    atomic_int stop;
    ejob_t jobs[LK_SLOTS];        /* job k is jobs[k % LK_SLOTS] */
    long users;                   /* engines with a part in it, not yet freed */
    pid_t pid;                    /* the process the thread runs in */
};

/* An engine's part of the lane. */
struct ahead {
    struct lane *lane;  /* the lane its jobs went to */
    long last;          /* its last job, -1: none */
    long lookup;        /* its submitted lookup's job */
    eresult_t result;   /* that lookup's outcome, once reaped */
    int collected;      /* 1: no outcome waits for collect */
    int64_t error;      /* an indexing's failure not yet raised (ADD_*), or 0 */
    int64_t promised;   /* the number its next add_ahead gets */
};

static struct lane *LANE; /* the process's lane, NULL without one */

/* Each side polls before it sleeps: the thread for the next job (LK_IDLE_SPIN seconds: a
 * file's items come closer than that), a caller for the end of one (LK_SPIN). A wake-up
 * costs a system call on each side and, on a virtual machine, tens of microseconds before
 * the woken thread runs, as long as a lookup: with wake-ups instead of polling, dedup of the
 * Reuters day took longer than without the thread (2.3 s against 1.85 s at 0.8). Sleeping
 * in short naps instead costs as much: a 10 us nanosleep there takes ~36 us and ~22 us of
 * CPU. */
#define LK_SPIN 0.001
#define LK_IDLE_SPIN 0.002

static inline void
lk_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static double
lk_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The process's lane: a child forked while it ran inherits the memory, not the thread,
 * which is then forgotten (its lock may be held: nothing of it is touched). */
static struct lane *
lane_current(void)
{
    if (LANE != NULL && LANE->pid != getpid())
        LANE = NULL;
    return LANE;
}

/* The engine's part of the current lane, NULL when it gave it no job (in a forked child
 * the parent's jobs are not its to wait for). */
static struct ahead *
ahead_mine(EngineObject *e)
{
    struct ahead *a = e->ahead;
    if (a != NULL && a->lane != lane_current()) {
        free(a);
        e->ahead = NULL;
        return NULL;
    }
    return a;
}

static void
job_run(EngineObject *e, ejob_t *j)
{
    if (j->kind == JOB_LOOKUP) {
        if (best_room(e, j->q.m, (size_t)j->q.qsize)) {
            j->r = (eresult_t){-1, 0, 0, 0, 0, 1};
            return;
        }
        best_core(e, &j->q, &j->r);
        return;
    }
    const eadd_t *a = &j->a;
    PyObject *keep = j->text != NULL ? held_text(e, j->text, j->buf + a->n, a->n) : NULL;
    j->added = add_ordered_core(e, j->buf, j->buf + a->n, a->n, a->hour, a->need, a->length,
                                a->cb.obj ? a->cb.buf : NULL, a->shift,
                                a->nb.obj ? a->nb.buf : NULL, keep);
    j->kept = keep != NULL && j->added >= 0;
}

/* Until ``ready(l, k)``: polling for ``limit`` seconds, then asleep on ``cv`` counted in
 * ``sleepers`` (the other side signals ``cv`` when it sees one after its change). */
static void
lk_await(struct lane *l, int (*ready)(struct lane *, long), long k, double limit,
         atomic_int *sleepers, pthread_cond_t *cv)
{
    double until = 0;
    for (unsigned i = 0; !ready(l, k); i++) {
        if ((i & 63) == 0) {
            double now = lk_now();
            if (until == 0) {
                until = now + limit;
            } else if (now > until) {
                pthread_mutex_lock(&l->mu);
                atomic_fetch_add(sleepers, 1);
                while (!ready(l, k))
                    pthread_cond_wait(cv, &l->mu);
                atomic_fetch_sub(sleepers, 1);
                pthread_mutex_unlock(&l->mu);
                return;
            }
        }
        lk_pause();
    }
}

/* A job after the ``k`` first was given (or the thread is to stop). */
static int
lk_given(struct lane *l, long k)
{
    return atomic_load(&l->given) != k || atomic_load(&l->stop);
}

/* Job ``k`` ended. */
static int
lk_ended(struct lane *l, long k)
{
    return atomic_load(&l->ended) > k;
}

static void *
lane_main(void *arg)
{
    struct lane *l = arg;
    for (;;) {
        long k = atomic_load(&l->ended);
        lk_await(l, lk_given, k, LK_IDLE_SPIN, &l->sleeping, &l->wake);
        if (atomic_load(&l->given) == k) /* stopped, every job ended */
            break;
        ejob_t *j = &l->jobs[k % LK_SLOTS];
        job_run(j->e, j);
        atomic_store(&l->ended, k + 1);
        if (atomic_load(&l->waiting)) {
            pthread_mutex_lock(&l->mu);
            pthread_cond_broadcast(&l->done);
            pthread_mutex_unlock(&l->mu);
        }
    }
    return NULL;
}

/* Until the thread has ended job ``k``: call without the GIL (or where no other Python
 * thread may need it meanwhile). */
static void
lk_wait(struct lane *l, long k)
{
    lk_await(l, lk_ended, k, LK_SPIN, &l->waiting, &l->done);
}

/* Take the outcomes of the ended jobs (under the GIL), each for its engine: release what an
 * indexing held, keep a lookup's result for collect, note an indexing's failure. */
static void
lk_reap(struct lane *l)
{
    long ended = atomic_load(&l->ended);
    for (; l->reaped < ended; l->reaped++) {
        ejob_t *j = &l->jobs[l->reaped % LK_SLOTS];
        struct ahead *a = j->e->ahead;
        if (j->kind == JOB_LOOKUP) {
            a->result = j->r;
            continue;
        }
        if (j->added < 0 && a->error == 0)
            a->error = j->added;
        if (!j->kept)
            Py_XDECREF(j->text);
        j->text = NULL;
        add_release(&j->a);
    }
}

/* Until job ``k`` has ended, the GIL released, then the ended jobs reaped. */
static void
lk_settle_to(struct lane *l, long k)
{
    if (atomic_load(&l->ended) <= k) {
        Py_BEGIN_ALLOW_THREADS
        lk_wait(l, k);
        Py_END_ALLOW_THREADS
    }
    lk_reap(l);
}

/* Wait for every job the engine gave to end and take their outcomes; -1 with the exception
 * of an indexing that failed (the index is then unusable, as after any MemoryError). */
static int
settle(EngineObject *e)
{
    struct ahead *a = ahead_mine(e);
    if (a == NULL)
        return 0;
    lk_settle_to(a->lane, a->last);
    if (a->error != 0) {
        add_error(a->error);
        a->error = 0;
        return -1;
    }
    return 0;
}

/* The lane, its thread started; NULL when it cannot be. */
static struct lane *
lane_start(void)
{
    struct lane *l = calloc(1, sizeof(struct lane));
    if (l == NULL)
        return NULL;
    atomic_init(&l->given, 0);
    atomic_init(&l->ended, 0);
    atomic_init(&l->sleeping, 0);
    atomic_init(&l->waiting, 0);
    atomic_init(&l->stop, 0);
    if (pthread_mutex_init(&l->mu, NULL) != 0) {
        free(l);
        return NULL;
    }
    if (pthread_cond_init(&l->wake, NULL) != 0 || pthread_cond_init(&l->done, NULL) != 0) {
        pthread_mutex_destroy(&l->mu);
        free(l);
        return NULL;
    }
    l->pid = getpid();
    if (pthread_create(&l->thread, NULL, lane_main, l) != 0) {
        pthread_cond_destroy(&l->wake);
        pthread_cond_destroy(&l->done);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return NULL;
    }
#if defined(__linux__)
    pthread_setname_np(l->thread, "ndd-engine"); /* as top -H and /proc name it */
#endif
    LANE = l;
    return l;
}

/* The lane's thread ended (no engine has a job in it any more) and the lane freed. */
static void
lane_stop(struct lane *l)
{
    pthread_mutex_lock(&l->mu);
    atomic_store(&l->stop, 1);
    pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    lk_reap(l);
    pthread_cond_destroy(&l->wake);
    pthread_cond_destroy(&l->done);
    pthread_mutex_destroy(&l->mu);
    for (int i = 0; i < LK_SLOTS; i++)
        free(l->jobs[i].buf);
    free(l);
    if (LANE == l)
        LANE = NULL;
}

/* The engine given a part in the lane, which starts if there is none; NULL with an
 * exception set. */
static struct ahead *
ahead_join(EngineObject *e)
{
    struct lane *l = lane_current();
    if (l == NULL && (l = lane_start()) == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the engine thread could not start");
        return NULL;
    }
    struct ahead *a = calloc(1, sizeof(struct ahead));
    if (a == NULL) {
        if (l->users == 0)
            lane_stop(l);
        PyErr_NoMemory();
        return NULL;
    }
    a->lane = l;
    a->last = -1;
    a->lookup = -1;
    a->collected = 1;
    l->users++;
    e->ahead = a;
    return a;
}

/* A freed engine's jobs waited for (holding the GIL: the thread never takes it) and its
 * part in the lane dropped; the lane ends with its last engine. */
static void
ahead_drop(EngineObject *e)
{
    struct ahead *a = ahead_mine(e);
    if (a == NULL)
        return;
    struct lane *l = a->lane;
    if (atomic_load(&l->ended) <= a->last)
        lk_wait(l, a->last);
    lk_reap(l);
    free(a);
    e->ahead = NULL;
    if (--l->users == 0)
        lane_stop(l);
}

/* A free job slot for the engine to fill (at most LK_SLOTS jobs wait), with the lane started;
 * NULL with an exception set. The slot is filled and given without releasing the GIL, so
 * no other thread takes it meanwhile. */
static ejob_t *
lk_slot(EngineObject *e, size_t words)
{
    struct ahead *a = ahead_mine(e);
    if (a == NULL && (a = ahead_join(e)) == NULL)
        return NULL;
    struct lane *l = a->lane;
    long k;
    while (atomic_load(&l->ended) <= (k = atomic_load(&l->given)) - LK_SLOTS) {
        Py_BEGIN_ALLOW_THREADS
        lk_wait(l, k - LK_SLOTS);
        Py_END_ALLOW_THREADS
    }
    lk_reap(l);
    ejob_t *j = &l->jobs[k % LK_SLOTS];
    if (grow((void **)&j->buf, &j->cap, words + 1, 8)) {
        PyErr_NoMemory();
        return NULL;
    }
    j->e = e;
    return j;
}

/* Give the filled slot to the thread: the engine's last job. */
static long
lk_give(struct ahead *a)
{
    struct lane *l = a->lane;
    long k = atomic_fetch_add(&l->given, 1);
    a->last = k;
    if (atomic_load(&l->sleeping)) {
        pthread_mutex_lock(&l->mu);
        pthread_cond_signal(&l->wake);
        pthread_mutex_unlock(&l->mu);
    }
    return k;
}

PyDoc_STRVAR(submit_doc,
"submit(keys, sig, need, unindexed, hour_lo, hour_hi, size_lo, size_hi)\n\nStart best() "
"with these arguments on the engine thread (after the jobs given it before) and return at "
"once; collect() returns its Match. Any other call first waits for it to end.");

static PyObject *
engine_submit(EngineObject *e, PyObject *args)
{
    Py_buffer kb = {0}, sb = {0};
    equery_t q;
    PyObject *result = NULL;
    struct ahead *a = ahead_mine(e);
    if (a != NULL && !a->collected) {
        PyErr_SetString(PyExc_RuntimeError, "the lookup submitted before was not collected");
        return NULL;
    }
    if (query_args(e, args, &kb, &sb, &q) == 0) {
        ejob_t *j = lk_slot(e, q.m + (size_t)q.qsize);
        if (j != NULL) {
            a = e->ahead;
            memcpy(j->buf, q.k, q.m * 8);
            memcpy(j->buf + q.m, q.qs, (size_t)q.qsize * 8);
            q.k = j->buf;
            q.qs = j->buf + q.m;
            j->kind = JOB_LOOKUP;
            j->q = q;
            a->collected = 0;
            a->lookup = lk_give(a);
            Py_INCREF(Py_None);
            result = Py_None;
        }
    }
    PyBuffer_Release(&kb);
    PyBuffer_Release(&sb);
    return result;
}

PyDoc_STRVAR(collect_doc, "collect() -> Match\n\nThe Match of the lookup submit() started.");

static PyObject *
engine_collect(EngineObject *e, PyObject *unused)
{
    (void)unused;
    struct ahead *a = ahead_mine(e);
    if (a == NULL || a->collected) {
        PyErr_SetString(PyExc_RuntimeError, "no lookup was submitted");
        return NULL;
    }
    lk_settle_to(a->lane, a->lookup);
    a->collected = 1;
    if (a->error != 0) { /* an indexing before it failed */
        add_error(a->error);
        a->error = 0;
        return NULL;
    }
    return match_of(&a->result);
}

PyDoc_STRVAR(add_ahead_doc,
"add_ahead(mixed, sig, hour, need, length, classes, shift, counts, text=None) -> int\n\n"
"add_ordered() on the engine thread: returns the document's number at once. ``classes`` "
"and ``counts`` are held until it ends (counts is written then: read it after settle()).");

static PyObject *
engine_add_ahead(EngineObject *e, PyObject *args)
{
    eadd_t a = {0};
    if (add_args(args, &a) < 0) {
        add_release(&a);
        return NULL;
    }
    ejob_t *j = lk_slot(e, 2 * a.n);
    if (j == NULL) {
        add_release(&a);
        return NULL;
    }
    struct ahead *ah = e->ahead;
    if (atomic_load(&ah->lane->ended) > ah->last)
        ah->promised = e->end; /* none of its jobs waits: the index's own count is current */
    int64_t number = ah->promised++;
    memcpy(j->buf, a.mb.buf, a.n * 8);
    memcpy(j->buf + a.n, a.sb.buf, a.n * 8);
    /* the thread decides whether the index keeps it (held_text reads only its bytes) */
    j->text = e->full || a.text == Py_None ? NULL : a.text;
    j->kept = 0;
    Py_XINCREF(j->text);
    PyBuffer_Release(&a.mb); /* copied: only the classes and counts stay held */
    PyBuffer_Release(&a.sb);
    j->a = a;
    j->kind = JOB_ADD;
    lk_give(ah);
    return PyLong_FromLongLong((long long)number);
}

PyDoc_STRVAR(settle_doc, "settle()\n\nWait for the jobs the engine gave the engine thread to end.");

static PyObject *
engine_settle(EngineObject *e, PyObject *unused)
{
    (void)unused;
    if (settle(e) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
engine_best(EngineObject *e, PyObject *args)
{
    Py_buffer kb = {0}, sb = {0};
    equery_t q;
    eresult_t r;
    PyObject *result = NULL;
    if (settle(e) < 0)
        return NULL;
    if (query_args(e, args, &kb, &sb, &q) == 0) {
        if (best_room(e, q.m, (size_t)q.qsize)) {
            PyErr_NoMemory();
        } else {
            Py_BEGIN_ALLOW_THREADS
            best_core(e, &q, &r);
            Py_END_ALLOW_THREADS
            result = match_of(&r);
        }
    }
    PyBuffer_Release(&kb);
    PyBuffer_Release(&sb);
    return result;
}

static PyObject *
engine_nbytes(EngineObject *e, void *closure)
{
    if (settle(e) < 0)
        return NULL;
    (void)closure;
    size_t n = (e->mask + 1) * sizeof(eslot_t) + (size_t)e->listbytes
               + e->dcap * sizeof(edoc_t) + e->gcap * 2
               + e->scap + e->ccap * 8 + e->hcap * 4 + e->kcap * sizeof(ecand_t)
               + e->rcap * sizeof(erow_t) + e->dncap * sizeof(uint64_t *) + e->slcap * 8
               + e->fcap * 4 + e->pcap * 8 + e->q6cap * 4 + e->hbcap * sizeof(uint32_t *);
    n += e->nrows * e->stride * 8; /* the slab's rows (the room beyond them is untouched) */
    return PyLong_FromSize_t(n);
}

static PyObject *
engine_layout(EngineObject *e, void *closure)
{
    if (settle(e) < 0)
        return NULL;
    (void)closure;
    size_t rows = e->nrows * e->stride * 8, nrow = 0; /* free rows' places included */
    for (size_t i = 0; i < e->nrows; i++)
        nrow += e->rows[i].w != NULL;
    return Py_BuildValue("{sn,sn,sn,sn,sn,sn,sn,sn,sn}",
        "table", (Py_ssize_t)((e->mask + 1) * sizeof(eslot_t)),
        "keys", (Py_ssize_t)e->used,
        "lists", (Py_ssize_t)e->listbytes,
        "rows", (Py_ssize_t)rows, "nrows", (Py_ssize_t)nrow,
        "docs", (Py_ssize_t)(e->dcap * sizeof(edoc_t) + e->gcap * 2),
        "sigs", (Py_ssize_t)e->scap, "sigs_used", (Py_ssize_t)e->slen,
        "scratch", (Py_ssize_t)(e->ccap * 8 + e->hcap * 4 + e->hbcap * sizeof(uint32_t *)
                                + e->kcap * sizeof(ecand_t)
                                + e->dncap * sizeof(uint64_t *) + e->slcap * 8));
}

static PyMethodDef engine_methods[] = {
    {"add", (PyCFunction)engine_add, METH_VARARGS, add_doc},
    {"add_ordered", (PyCFunction)engine_add_ordered, METH_VARARGS, add_ordered_doc},
    {"best", (PyCFunction)engine_best, METH_VARARGS, best_doc},
    {"submit", (PyCFunction)engine_submit, METH_VARARGS, submit_doc},
    {"collect", (PyCFunction)engine_collect, METH_NOARGS, collect_doc},
    {"add_ahead", (PyCFunction)engine_add_ahead, METH_VARARGS, add_ahead_doc},
    {"settle", (PyCFunction)engine_settle, METH_NOARGS, settle_doc},
    {"release_before", (PyCFunction)engine_release, METH_VARARGS, release_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef engine_members[] = {
    {"full", T_INT, offsetof(EngineObject, full), READONLY, "every q-gram indexed"},
    {NULL, 0, 0, 0, NULL},
};

/* The counters the engine thread may be changing: read once its jobs have ended. */
static PyObject *
engine_counter(EngineObject *e, void *closure)
{
    if (settle(e) < 0)
        return NULL;
    return PyLong_FromLongLong(*(long long *)((char *)e + (size_t)closure));
}

static PyGetSetDef engine_getset[] = {
    {"nbytes", (getter)engine_nbytes, NULL, "bytes allocated", NULL},
    {"layout", (getter)engine_layout, NULL, "bytes allocated, by part", NULL},
    {"base", (getter)engine_counter, NULL, "first live number",
     (void *)offsetof(EngineObject, base)},
    {"end", (getter)engine_counter, NULL, "the next document's number",
     (void *)offsetof(EngineObject, end)},
    {"postings", (getter)engine_counter, NULL,
     "postings held in lists (dense keys' rows aside; expired ones not yet trimmed included)",
     (void *)offsetof(EngineObject, postings)},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ndd_EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ndd_stream.core._kernels.Engine",
    .tp_basicsize = sizeof(EngineObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Engine(threshold, full, dense_fraction): the flat index of one scope window (core.engine).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)engine_init,
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_methods = engine_methods,
    .tp_members = engine_members,
    .tp_getset = engine_getset,
};

/* -- texts kept in a window --------------------------------------------------------------- */

/* A window document's normal form, kept for the novelty rule and the explanation of its
 * match: ASCII text (letters and digits, case folded) packed five bits a character
 * (0-25 a letter; 26 + 4 bits a digit; 27 + 5 bits a capital; 31 + 8 bits any other
 * byte), after the character count as a LEB128 varint. About 5/8 of the text's bytes. */
static uint16_t TXCODE[128]; /* an ASCII character's code, low bits first */
static uint8_t TXBITS[128];   /* and its length */

typedef struct {
    uint8_t *out;
    size_t k;
    uint64_t acc;
    int nbits;
} bitw_t;

PyDoc_STRVAR(pack_text_doc,
"pack_text(text) -> bytes | None\n\nAn ASCII ``text`` packed five bits a letter (see "
"unpack_text); None when it is not ASCII.");

static PyObject *
pack_text(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "pack_text takes a str");
        return NULL;
    }
    if (PyUnicode_READY(arg) < 0)
        return NULL;
    if (!PyUnicode_IS_ASCII(arg))
        Py_RETURN_NONE;
    const uint8_t *a = PyUnicode_1BYTE_DATA(arg);
    size_t n = (size_t)PyUnicode_GET_LENGTH(arg);
    /* Packed into a scratch buffer (the GIL guards it; as large as the longest text
     * packed), then copied into bytes of the packed size: bytes allocated at the bound and
     * shrunk in place leave the bound's tail (~60% of it) as a hole behind each window
     * document, which the engine thread's indexing, allocating from a malloc arena of its
     * own, never fills (~1 KiB a document). */
    static uint8_t *scratch;
    static size_t scratch_cap;
    if (grow((void **)&scratch, &scratch_cap, 10 + (n * 13 + 7) / 8 + 1 + 8, 1) < 0)
        return PyErr_NoMemory();
    bitw_t w = {scratch, 0, 0, 0};
    size_t m = n;
    while (m >= 0x80) {
        w.out[w.k++] = (uint8_t)(m | 0x80);
        m >>= 7;
    }
    w.out[w.k++] = (uint8_t)m;
    for (size_t i = 0; i < n; i++) { /* a character's bits and their count, looked up */
        w.acc |= (uint64_t)TXCODE[a[i]] << w.nbits;
        w.nbits += TXBITS[a[i]];
        if (w.nbits >= 32) {
            memcpy(w.out + w.k, &w.acc, 4); /* little-endian: the low bytes first */
            w.k += 4;
            w.acc >>= 32;
            w.nbits -= 32;
        }
    }
    while (w.nbits > 0) {
        w.out[w.k++] = (uint8_t)w.acc;
        w.acc >>= 8;
        w.nbits -= 8;
    }
    return PyBytes_FromStringAndSize((const char *)w.out, (Py_ssize_t)w.k);
}

PyDoc_STRVAR(unpack_text_doc, "unpack_text(packed) -> str\n\nThe text pack_text packed.");

static PyObject *
unpack_text(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "unpack_text takes bytes");
        return NULL;
    }
    const uint8_t *b = (const uint8_t *)PyBytes_AS_STRING(arg);
    size_t len = (size_t)PyBytes_GET_SIZE(arg), k = 0, n = 0;
    int shift = 0;
    for (;;) {
        if (k >= len || shift > 56)
            goto bad;
        uint8_t byte = b[k++];
        n |= (size_t)(byte & 0x7f) << shift;
        shift += 7;
        if (!(byte & 0x80))
            break;
    }
    if (n > (len - k) * 8) /* at least five bits a character */
        goto bad;
    PyObject *res = PyUnicode_New((Py_ssize_t)n, 127);
    if (res == NULL)
        return NULL;
    uint8_t *out = PyUnicode_1BYTE_DATA(res);
    uint64_t acc = 0;
    int nbits = 0;
#define TAKE(v, nb)                                            \
    do {                                                       \
        while (nbits < (nb)) {                                 \
            if (k >= len)                                      \
                goto bad_res;                                  \
            acc |= (uint64_t)b[k++] << nbits;                  \
            nbits += 8;                                        \
        }                                                      \
        (v) = (uint32_t)(acc & (((uint64_t)1 << (nb)) - 1));   \
        acc >>= (nb);                                          \
        nbits -= (nb);                                         \
    } while (0)
    for (size_t i = 0; i < n; i++) {
        uint32_t s, v;
        TAKE(s, 5);
        if (s < 26) {
            out[i] = (uint8_t)('a' + s);
        } else if (s == TX_DIGIT) {
            TAKE(v, 4);
            out[i] = (uint8_t)('0' + v);
        } else if (s == TX_UPPER) {
            TAKE(v, 5);
            out[i] = (uint8_t)('A' + v);
        } else if (s == TX_BYTE) {
            TAKE(v, 8);
            if (v > 127)
                goto bad_res;
            out[i] = (uint8_t)v;
        } else {
            goto bad_res;
        }
    }
#undef TAKE
    return res;
bad_res:
    Py_DECREF(res);
bad:
    PyErr_SetString(PyExc_ValueError, "not a packed text");
    return NULL;
}

PyDoc_STRVAR(order_classes_doc,
"order_classes(counts, small, out) -> int\n\nout[i] = small[counts[i]] (uint32 counts, "
"uint8 tables) for every count below len(small); returns how many counts are not, whose "
"out is left to the caller. An order snapshot's class table in one pass.");

/* Why: numpy's minimum, fancy take and comparison over the 2**22 counters of the order's
 * sketch cost ~20 ms a snapshot, here one pass. */
static PyObject *
order_classes(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer cb, sb, ob;
    if (!PyArg_ParseTuple(args, "y*y*w*", &cb, &sb, &ob))
        return NULL;
    PyObject *result = NULL;
    if (ndd_check(&cb, 4, "counts"))
        goto done;
    if (ob.len * 4 != cb.len || sb.len < 1) {
        PyErr_SetString(PyExc_ValueError, "out needs a byte per count, small a byte or more");
        goto done;
    }
    {
        const uint32_t *c = cb.buf;
        const uint8_t *small = sb.buf;
        uint8_t *o = ob.buf;
        size_t n = (size_t)ob.len, ns = (size_t)sb.len, big = 0;
        Py_BEGIN_ALLOW_THREADS
        for (size_t i = 0; i < n; i++) {
            if (c[i] < ns) {
                o[i] = small[c[i]];
            } else {
                o[i] = 0;
                big++;
            }
        }
        Py_END_ALLOW_THREADS
        result = PyLong_FromSize_t(big);
    }
done:
    PyBuffer_Release(&cb);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&ob);
    return result;
}

static PyMethodDef text_methods[] = {
    {"pack_text", (PyCFunction)pack_text, METH_O, pack_text_doc},
    {"unpack_text", (PyCFunction)unpack_text, METH_O, unpack_text_doc},
    {"order_classes", (PyCFunction)order_classes, METH_VARARGS, order_classes_doc},
    {NULL, NULL, 0, NULL},
};

int
ndd_engine_ready(PyObject *module)
{
    for (unsigned c = 0; c < 128; c++) {
        if (c >= 'a' && c <= 'z') {
            TXCODE[c] = (uint16_t)(c - 'a');
            TXBITS[c] = 5;
        } else if (c >= '0' && c <= '9') {
            TXCODE[c] = (uint16_t)(TX_DIGIT | (c - '0') << 5);
            TXBITS[c] = 9;
        } else if (c >= 'A' && c <= 'Z') {
            TXCODE[c] = (uint16_t)(TX_UPPER | (c - 'A') << 5);
            TXBITS[c] = 10;
        } else {
            TXCODE[c] = (uint16_t)(TX_BYTE | c << 5);
            TXBITS[c] = 13;
        }
    }
    if (PyModule_AddFunctions(module, text_methods) < 0)
        return -1;
    for (int b = 0; b < 256; b++)
        SIXMAP[b] = b >= '0' && b <= '9' ? (uint8_t)(b - '0')
                    : b >= 'a' && b <= 'z' ? (uint8_t)(b - 'a' + 10) : 0xff;
    for (int b = 0; b < 256; b++)
        for (int i = 0; i < 8; i++) {
            SPREAD[b][i] = (uint32_t)(b >> i) & 1u;
            LANES[b][i / 4] |= (uint64_t)((b >> i) & 1) << (16 * (i % 4));
        }
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
