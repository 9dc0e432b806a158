/* The index count of ndd_stream.core.postings: count_blocks and the dense rows it adds
 * (dense_rows builds them). Split from _kernels.c to keep each source readable. */
#include "_kernels.h"

#define check ndd_check

/* ---- dense counting and the whole-index count ---------------------------------------
 *
 * Why: at t = 0.3 a decision at a 50k window counts ~33M postings, 95% of them under keys
 * held by >= 1/16 of a block's documents (common q-grams). Such a key also has a bitmap
 * over its block's documents (a "dense row", built with the block), and the rows a probe
 * hits are summed per document by carry-save adders into bit-sliced counters (Harley-Seal;
 * the positional popcount of Clausecker & Lemire, arXiv 2412.16370): ~6 word operations
 * per 64 documents and row instead of one counter increment per posting. Rare keys keep
 * their posting lists. count_blocks does every block of the index in one call, optionally
 * on several threads: probe keys shared out (sparse postings into private counters summed
 * at the end), then, past a gate, each block's dense rows added by every thread over its
 * share of the block's documents. */

#define CHUNK 16 /* words (1024 documents) of bit-sliced counters kept in L1 at a time */
#define MAX_SLICES 33

#define CSA(h, l, a, b, c)                                                                 \
    do {                                                                                   \
        __typeof__(a) u_ = (a) ^ (b);                                                      \
        (h) = ((a) & (b)) | (u_ & (c));                                                    \
        (l) = u_ ^ (c);                                                                    \
    } while (0)

/* Four words as one value (GCC/clang vector extension): 256-bit AVX2 operations where the
 * clone for AVX2 runs, two 128-bit SSE2 operations elsewhere. */
typedef uint64_t v4 __attribute__((vector_size(32)));

#define load4(p)                                                                           \
    __extension__({                                                                        \
        v4 v_;                                                                             \
        memcpy(&v_, (p), sizeof(v_));                                                      \
        v_;                                                                                \
    })

/* S[0..nslices) += rows, per bit, over words w0..w0+cw of each row: carry-save adders
 * over groups of 16 rows (Harley-Seal), the carry of each group rippled up, four words
 * at a time (rows are padded to a multiple of four words); other widths word by word. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("avx2", "default")))
#endif
static void
slice_add(uint64_t S[MAX_SLICES][CHUNK], int nslices, const uint64_t *bits, Py_ssize_t words,
          const int32_t *rows, Py_ssize_t nr, Py_ssize_t w0, int cw)
{
    Py_ssize_t r = 0;
    if (cw % 4 == 0) { /* rows are padded to whole groups of four words */
        int nv = cw / 4;
        v4 V[MAX_SLICES][CHUNK / 4];
        memcpy(V, S, sizeof(v4) * (CHUNK / 4) * (size_t)nslices);
        static const uint64_t zeros[CHUNK] = {0}; /* stands in for the rows past nr */
        for (; r < nr; r += 16) {
            const uint64_t *R[16];
            for (int i = 0; i < 16; i++)
                R[i] = r + i < nr ? bits + (Py_ssize_t)rows[r + i] * words + w0 : zeros;
            for (Py_ssize_t i = r + 16; i < r + 32 && i < nr; i++) {
                const uint64_t *q = bits + (Py_ssize_t)rows[i] * words + w0;
                PREFETCH(q);
                PREFETCH(q + 8);
            }
            for (int w = 0; w < nv; w++) {
                v4 ones = V[0][w], twos = V[1][w], fours = V[2][w], eights = V[3][w];
                v4 twosA, twosB, foursA, foursB, eightsA, eightsB, sixteens;
                int o = 4 * w;
                CSA(twosA, ones, ones, load4(R[0] + o), load4(R[1] + o));
                CSA(twosB, ones, ones, load4(R[2] + o), load4(R[3] + o));
                CSA(foursA, twos, twos, twosA, twosB);
                CSA(twosA, ones, ones, load4(R[4] + o), load4(R[5] + o));
                CSA(twosB, ones, ones, load4(R[6] + o), load4(R[7] + o));
                CSA(foursB, twos, twos, twosA, twosB);
                CSA(eightsA, fours, fours, foursA, foursB);
                CSA(twosA, ones, ones, load4(R[8] + o), load4(R[9] + o));
                CSA(twosB, ones, ones, load4(R[10] + o), load4(R[11] + o));
                CSA(foursA, twos, twos, twosA, twosB);
                CSA(twosA, ones, ones, load4(R[12] + o), load4(R[13] + o));
                CSA(twosB, ones, ones, load4(R[14] + o), load4(R[15] + o));
                CSA(foursB, twos, twos, twosA, twosB);
                CSA(eightsB, fours, fours, foursA, foursB);
                CSA(sixteens, eights, eights, eightsA, eightsB);
                V[0][w] = ones;
                V[1][w] = twos;
                V[2][w] = fours;
                V[3][w] = eights;
                for (int k = 4; k < nslices; k++) { /* ripple the carry up */
                    v4 t = V[k][w] & sixteens;
                    V[k][w] ^= sixteens;
                    sixteens = t;
                }
            }
        }
        memcpy(S, V, sizeof(v4) * (CHUNK / 4) * (size_t)nslices);
    }
    for (; r < nr; r++) {
        const uint64_t *R = bits + (Py_ssize_t)rows[r] * words + w0;
        for (int w = 0; w < cw; w++) {
            uint64_t c = R[w];
            for (int k = 0; k < nslices; k++) {
                uint64_t t = S[k][w] & c;
                S[k][w] ^= c;
                c = t;
            }
        }
    }
}

/* counts[shift + d] += how many of ``rows`` have bit d, for every in-range document d of
 * words wbeg..wend-1 (multiples of four, or wend = words) of the rows. */
static long long
dense_add(const uint64_t *bits, Py_ssize_t words, const int32_t *rows, Py_ssize_t nr,
          long long shift, int32_t *cn, Py_ssize_t nc, Py_ssize_t wbeg, Py_ssize_t wend)
{
    if (nr <= 0 || words <= 0)
        return 0;
    int nslices = 4;
    while (nslices < MAX_SLICES && ((long long)1 << nslices) <= nr)
        nslices++;
    uint64_t S[MAX_SLICES][CHUNK];
    long long total = 0;
    Py_ssize_t wlo = 0, whi = words;
    if (shift < 0)
        wlo = (Py_ssize_t)((-shift) / 64);
    long long last = (long long)nc - shift; /* first document past the counters */
    if (last <= 0)
        return 0;
    if ((last + 63) / 64 < whi)
        whi = (Py_ssize_t)((last + 63) / 64);
    /* Whole groups of four words (rows are padded to them): out-of-range bits of the
     * edge words are skipped below. */
    wlo -= wlo % 4;
    whi += (4 - whi % 4) % 4;
    if (whi > words)
        whi = words;
    if (wlo < wbeg)
        wlo = wbeg;
    if (whi > wend)
        whi = wend;
    for (Py_ssize_t w0 = wlo; w0 < whi; w0 += CHUNK) {
        int cw = (int)(whi - w0 < CHUNK ? whi - w0 : CHUNK);
        memset(S, 0, sizeof(S));
        slice_add(S, nslices, bits, words, rows, nr, w0, cw);
        for (int k = 0; k < nslices; k++) {
            int32_t add = (int32_t)1 << k;
            for (int w = 0; w < cw; w++) {
                uint64_t x = S[k][w];
                long long at = shift + (long long)(w0 + w) * 64;
                while (x) {
                    long long pos = at + __builtin_ctzll(x);
                    x &= x - 1;
                    if (pos >= 0 && pos < nc) {
                        cn[pos] += add;
                        total += add;
                    }
                }
            }
        }
    }
    return total;
}


typedef struct gate gate_t;

typedef struct job {
    const block_t *blocks;
    int nb;
    const uint32_t *probe; /* this thread's share of the probe keys */
    Py_ssize_t np_;
    long long base;
    int32_t *cn; /* where this thread's sparse counts go (private but for thread 0) */
    Py_ssize_t nc;
    long long total;
    int failed;
    /* Threaded counts only: dense rows are not counted per thread but gathered per block
     * (rows[b * stride ..], nrows[b]) and, after the gate, every thread adds the rows of all
     * threads over its own share of each block's documents into ``shared`` (the caller's
     * counts). */
    int t, nt;
    struct job *all;
    gate_t *gate;
    int32_t *rows;
    Py_ssize_t *nrows, stride;
    int32_t *shared;
} job_t;

/* One block: sparse keys by posting scan, dense keys by dense_add. ``at``, ``end`` and
 * ``rows`` have np_ items each.
 *
 * Why a directory and not a binary search: the index is far larger than the caches, and
 * a binary search is a chain of ~17 dependent cache misses per key and block; the keys are
 * uniform hash values, so the directory (for every value of a key's top ``bits`` bits, the
 * first entry of a key with top bits >= it) finds a key's bucket of 1-2 entries on average
 * in one load. The entries (see _block.c) hold each key beside its postings' start or
 * dense row, and the next entry its postings' end: a hit touches 3 lines (directory, entry
 * line, postings or dense row), a miss 2. Group prefetching: each stage issues the loads
 * of every probe key before the next stage uses them, so the misses of all (key, block)
 * pairs overlap instead of forming one dependent chain per key. */
static long long
count_one(const block_t *b, const uint32_t *pr, Py_ssize_t np_, long long base, int32_t *cn,
          Py_ssize_t nc, Py_ssize_t *at, Py_ssize_t *end, int32_t *rows, Py_ssize_t *nr_out)
{
    const entry_t *en = b->ent;
    const uint32_t *dr = b->dir, *ds = b->dstart;
    const uint16_t *id = b->ids.buf;
    Py_ssize_t nk = b->nk, nids = b->nids, nr = 0, nh = 0;
    long long shift = b->lo - base, total = 0;
    int down = 32 - b->bits;
    /* dense keys exist only where has_dense: elsewhere a start may have the top bit set */
    uint32_t flag = b->has_dense ? LOOKUP_DENSE : 0;
    for (Py_ssize_t p = 0; p < np_; p++) {
        uint64_t v = down >= 32 ? 0 : (uint64_t)(pr[p] >> down);
        at[p] = (Py_ssize_t)v;
        PREFETCH(&dr[v]);
    }
    for (Py_ssize_t p = 0; p < np_; p++) {
        Py_ssize_t a = dr[at[p]];
        at[p] = a;
        PREFETCH(&en[a]); /* the key's entry or the one after, and (a + 2) its successor */
        PREFETCH(&en[a + 2]);
    }
    /* Why without branches on the data: whether a key is in a block is a coin toss, so a
     * branch per outcome mispredicted on about every other (key, block) pair, and that,
     * not the cache misses the prefetches hide, was most of the lookup's time. The sparse
     * hits are compacted into at/end (nh <= p: a slot is read before it is overwritten)
     * and the dense rows into rows. */
    for (Py_ssize_t p = 0; p < np_; p++) {
        Py_ssize_t a = at[p];
        uint32_t key = pr[p];
        /* The first entry >= key from the key's bucket on (the keys before the bucket have
         * smaller top bits, so the scan needs no bucket end: the sentinel stops it). */
        a += en[a].key < key;
        a += en[a].key < key;
        while (en[a].key < key) /* a bucket of three keys or more: rare */
            a++;
        uint32_t val = en[a].val, next = en[a + 1].val; /* en[nk + 1]: the 2nd sentinel */
        int found = (en[a].key == key) & (a < nk);
        int isdense = found & ((val & flag) != 0);
        rows[nr] = (int32_t)(val & ~LOOKUP_DENSE);
        nr += isdense;
        /* a sparse key's postings end where the next key's start, which for a dense next
         * key is in dstart (its entry holds its row) */
        uint32_t nrow = (next & flag) ? next & ~LOOKUP_DENSE : 0;
        Py_ssize_t s = val, t = (next & flag) ? ds[nrow] : next;
        int sparse = found & !isdense & (t <= nids) & (s <= t);
        at[nh] = s;
        end[nh] = t;
        nh += sparse;
        PREFETCH(&id[sparse ? s : 0]);
    }
    for (Py_ssize_t h = 0; h < nh; h++) {
        Py_ssize_t q = h + 4;
        if (q < nh && end[q] - at[q] > 32)
            PREFETCH(&id[at[q] + 32]);
        for (Py_ssize_t j = at[h]; j < end[h]; j++) {
            long long pos = shift + (long long)id[j];
            if (pos >= 0 && pos < nc) {
                cn[pos]++;
                total++;
            }
        }
    }
    if (nr_out != NULL) /* the caller adds the rows (threaded: split by documents) */
        *nr_out = nr;
    else if (nr)
        total += dense_add(b->dense.buf, b->words, rows, nr, shift, cn, nc, 0, b->words);
    return total;
}

/* Looks the job's keys up in every block: sparse keys counted into j->cn, dense rows
 * added at once (one thread) or gathered for job_dense (threads). */
static void
job_lookup(job_t *j)
{
    Py_ssize_t n = j->np_ ? j->np_ : 1;
    Py_ssize_t *at = malloc((size_t)n * 2 * sizeof(Py_ssize_t));
    int32_t *rows = j->rows != NULL ? NULL : malloc((size_t)n * sizeof(int32_t));
    if (at == NULL || (j->rows == NULL && rows == NULL)) {
        j->failed = 2;
    } else {
        for (int i = 0; i < j->nb && !j->failed; i++) {
            int gather = j->rows != NULL;
            j->total += count_one(&j->blocks[i], j->probe, j->np_, j->base, j->cn, j->nc, at,
                                  at + n, gather ? j->rows + (size_t)i * j->stride : rows,
                                  gather ? &j->nrows[i] : NULL);
        }
    }
    free(at);
    free(rows);
}

/* Threaded counts: the dense rows all threads found in each block, added over this
 * thread's share of the block's words. Why split by documents and not by rows: adding rows
 * ends with converting bit-sliced counters into counts for every document of the block,
 * which split by rows every thread did in full (two threads were 0.8x one on Reuters). */
static void
job_dense(job_t *j, int32_t *scratch)
{
    for (int i = 0; i < j->nb; i++) {
        const block_t *b = &j->blocks[i];
        Py_ssize_t nr = 0;
        for (int t = 0; t < j->nt; t++) {
            const job_t *o = &j->all[t];
            memcpy(scratch + nr, o->rows + (size_t)i * o->stride,
                   (size_t)o->nrows[i] * sizeof(int32_t));
            nr += o->nrows[i];
        }
        if (nr == 0 || !b->has_dense)
            continue;
        Py_ssize_t quads = b->words / 4; /* split on whole groups of four words */
        Py_ssize_t w0 = 4 * (quads * j->t / j->nt);
        Py_ssize_t w1 = j->t + 1 == j->nt ? b->words : 4 * (quads * (j->t + 1) / j->nt);
        j->total += dense_add(b->dense.buf, b->words, scratch, nr, b->lo - j->base, j->shared,
                              j->nc, w0, w1);
    }
}

#ifndef _WIN32
#include <pthread.h>
#include <time.h>
#define HAVE_THREADS 1
#endif

#ifdef HAVE_THREADS
static long long
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Polls *value until it differs from ``old`` or the clock passes ``until``; plain loads,
 * no PAUSE (a pause loop makes a virtual CPU exit to the hypervisor). */
static void
poll_while_equal(const unsigned long *value, unsigned long old, long long until)
{
    while (__atomic_load_n(value, __ATOMIC_ACQUIRE) == old && now_ns() < until)
        for (int i = 0; i < 256 && __atomic_load_n(value, __ATOMIC_ACQUIRE) == old; i++)
            ;
}

/* True once *value >= goal, polling (plain loads) until the clock passes ``until``. */
static int
poll_until_at_least(const int *value, int goal, long long until)
{
    while (__atomic_load_n(value, __ATOMIC_ACQUIRE) < goal) {
        if (now_ns() >= until)
            return 0;
        for (int i = 0; i < 256 && __atomic_load_n(value, __ATOMIC_ACQUIRE) < goal; i++)
            ;
    }
    return 1;
}

/* How long a thread inside a count polls for the other threads before it sleeps: they are
 * busy with their shares (or were woken ahead, see wake_count_workers). */
#define POLL_NS 300000LL
#endif

/* A one-shot gate: every thread's lookups (and so every dense row) are done before any
 * thread adds dense rows. */
struct gate {
#ifdef HAVE_THREADS
    pthread_mutex_t mutex;
    pthread_cond_t cond;
#endif
    int parties, arrived;
};

static void
gate_pass(gate_t *g, int arrivals)
{
#ifdef HAVE_THREADS
    pthread_mutex_lock(&g->mutex);
    if (__atomic_add_fetch(&g->arrived, arrivals, __ATOMIC_ACQ_REL) >= g->parties)
        pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->mutex);
    if (poll_until_at_least(&g->arrived, g->parties, now_ns() + POLL_NS))
        return;
    pthread_mutex_lock(&g->mutex);
    while (__atomic_load_n(&g->arrived, __ATOMIC_ACQUIRE) < g->parties)
        pthread_cond_wait(&g->cond, &g->mutex);
    pthread_mutex_unlock(&g->mutex);
#else
    g->arrived += arrivals;
#endif
}

typedef struct {
    job_t *job;
    int32_t *scratch;
} worker_t;

static void *
run_worker(void *arg)
{
    worker_t *w = arg;
    job_lookup(w->job); /* a failed job still passes the gate: the others wait for it */
    gate_pass(w->job->gate, 1);
    job_dense(w->job, w->scratch);
    return NULL;
}

#ifdef HAVE_THREADS
/* Count workers that stay: creating and joining a thread per count cost ~60 us on the
 * benchmark VM, more than a whole count on newswire at t = 0.8 (two threads measured
 * 0.4x one there). Workers wait on a condition variable between counts. One caller at a
 * time owns them (``owner``); a concurrent caller does every share itself. After fork()
 * the child has none of the threads: the handler forgets them, and the next count starts
 * new ones. */
static struct {
    pthread_mutex_t owner, mu;
    pthread_cond_t work, done;
    int nworkers, ntasks, finished;
    unsigned long generation;
    worker_t *tasks;
    int atfork;
    long long awake_until; /* CLOCK_MONOTONIC ns: idle workers poll instead of sleeping */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL, 0, 0};

static unsigned long pool_born[64]; /* the generation each worker was started in */

static void
pool_after_fork_in_child(void)
{
    pthread_mutex_init(&pool.owner, NULL);
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.work, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.nworkers = pool.ntasks = pool.finished = 0;
    pool.tasks = NULL;
    pool.awake_until = 0;
}

static void *
pool_worker(void *arg)
{
    int k = (int)(intptr_t)arg; /* this worker runs tasks[k] of a generation */
    pthread_mutex_lock(&pool.mu);
    unsigned long seen = pool_born[k]; /* not pool.generation: a task may be posted already */
    for (;;) {
        while (pool.generation == seen) {
            long long until = pool.awake_until;
            if (now_ns() >= until) {
                pthread_cond_wait(&pool.work, &pool.mu);
                continue;
            }
            pthread_mutex_unlock(&pool.mu); /* woken ahead of a count: poll for it */
            poll_while_equal(&pool.generation, seen, until);
            pthread_mutex_lock(&pool.mu);
        }
        seen = pool.generation;
        if (k >= pool.ntasks)
            continue;
        worker_t *w = &pool.tasks[k];
        pthread_mutex_unlock(&pool.mu);
        run_worker(w);
        pthread_mutex_lock(&pool.mu);
        if (__atomic_add_fetch(&pool.finished, 1, __ATOMIC_ACQ_REL) >= pool.ntasks)
            pthread_cond_signal(&pool.done);
    }
    return NULL;
}

/* At least ``want`` workers if they can be started; how many there are (caller owns). */
static int
pool_grow(int want)
{
    if (!pool.atfork) {
        pthread_atfork(NULL, NULL, pool_after_fork_in_child);
        pool.atfork = 1;
    }
    while (pool.nworkers < want) {
        pthread_t tid;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pool_born[pool.nworkers] = pool.generation; /* no task posted while we own it */
        int ok = pthread_create(&tid, &attr, pool_worker, (void *)(intptr_t)pool.nworkers) == 0;
        pthread_attr_destroy(&attr);
        if (!ok)
            break;
        pthread_mutex_lock(&pool.mu);
        pool.nworkers++;
        pthread_mutex_unlock(&pool.mu);
    }
    return pool.nworkers;
}
#endif

/* jobs[0] on the calling thread, the others on the pool's workers; a job no worker takes
 * is done on the calling thread too, on both sides of the gate. */
static void
run_threads(job_t *jobs, int nt, int32_t *scratch, size_t per_scratch)
{
    gate_t gate;
    gate.parties = nt;
    gate.arrived = 0;
    worker_t workers[64];
    int handed = 0; /* jobs 1..handed go to workers */
#ifdef HAVE_THREADS
    pthread_mutex_init(&gate.mutex, NULL);
    pthread_cond_init(&gate.cond, NULL);
#endif
    for (int t = 0; t < nt; t++) {
        jobs[t].gate = &gate;
        workers[t] = (worker_t){&jobs[t], scratch + (size_t)t * per_scratch};
    }
#ifdef HAVE_THREADS
    int owned = pthread_mutex_trylock(&pool.owner) == 0;
    if (owned) {
        handed = pool_grow(nt - 1);
        if (handed > nt - 1)
            handed = nt - 1;
        pthread_mutex_lock(&pool.mu);
        pool.tasks = &workers[1];
        pool.ntasks = handed;
        pool.finished = 0;
        __atomic_add_fetch(&pool.generation, 1, __ATOMIC_ACQ_REL);
        pthread_cond_broadcast(&pool.work);
        pthread_mutex_unlock(&pool.mu);
    }
#endif
    int mine = 1;
    job_lookup(&jobs[0]);
    for (int t = handed + 1; t < nt; t++) {
        job_lookup(&jobs[t]);
        mine++;
    }
    gate_pass(&gate, mine);
    job_dense(&jobs[0], workers[0].scratch);
    for (int t = handed + 1; t < nt; t++)
        job_dense(&jobs[t], workers[t].scratch);
#ifdef HAVE_THREADS
    if (owned) {
        poll_until_at_least(&pool.finished, handed, now_ns() + POLL_NS);
        pthread_mutex_lock(&pool.mu);
        while (__atomic_load_n(&pool.finished, __ATOMIC_ACQUIRE) < handed)
            pthread_cond_wait(&pool.done, &pool.mu);
        pool.tasks = NULL;
        pool.ntasks = 0;
        pool.awake_until = 0; /* the count came: sleep until the next wake or count */
        pthread_mutex_unlock(&pool.mu);
        pthread_mutex_unlock(&pool.owner);
    }
    pthread_cond_destroy(&gate.cond);
    pthread_mutex_destroy(&gate.mutex);
#endif
}

const char ndd_wake_count_workers_doc[] =
"wake_count_workers(threads, microseconds) -> None\n\n"
"Wakes the workers a count on ``threads`` threads will use (starting them if needed) and\n"
"keeps them polling for it for ``microseconds``: called at the start of a decision, so\n"
"that waking a sleeping thread (25-90 us on a VM) overlaps the decision's own work.";

PyObject *
ndd_wake_count_workers(PyObject *self, PyObject *args)
{
    int threads;
    long long micros;
    if (!PyArg_ParseTuple(args, "iL", &threads, &micros))
        return NULL;
#ifdef HAVE_THREADS
    if (threads > 64)
        threads = 64;
    if (threads > 1 && micros > 0 && pthread_mutex_trylock(&pool.owner) == 0) {
        pool_grow(threads - 1);
        pthread_mutex_lock(&pool.mu);
        pool.awake_until = now_ns() + micros * 1000;
        pool.ntasks = 0; /* a generation without tasks: the workers wake, then poll */
        __atomic_add_fetch(&pool.generation, 1, __ATOMIC_ACQ_REL);
        pthread_cond_broadcast(&pool.work);
        pthread_mutex_unlock(&pool.mu);
        pthread_mutex_unlock(&pool.owner);
    }
#endif
    Py_RETURN_NONE;
}

const char ndd_count_blocks_doc[] =

"count_blocks(blocks, probe, base, counts, threads) -> postings\n\n"
"For every key of ``probe`` (uint32, ascending) found in a block's keys, add 1 to\n"
"``counts[lo + ids[j] - base]`` (int32) for each of its postings j, skipping postings\n"
"outside ``counts``. ``blocks`` is a sequence of Block. Dense keys are counted from their\n"
"rows, the others from their postings. ``threads`` > 1 shares the probe keys out among\n"
"that many threads (the GIL released; worker threads that stay between counts) and the\n"
"dense rows' documents. Returns the postings counted.";

/* Counts the probe's postings in every Block of ``seq_in`` into cn[0..nc) (see
 * count_blocks); 0 with *total set, or -1 with an exception set. */
static int
count_core(PyObject *seq_in, const uint32_t *probe, Py_ssize_t np_, long long base,
           int32_t *cn, Py_ssize_t nc, int threads, long long *total_out)
{
    int status = -1;
    PyObject *seq = PySequence_Fast(seq_in, "blocks must be a sequence");
    block_t *blocks = NULL;
    if (seq == NULL)
        return -1;
    Py_ssize_t nb = PySequence_Fast_GET_SIZE(seq);
    blocks = PyMem_Malloc((size_t)(nb ? nb : 1) * sizeof(block_t));
    if (blocks == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nb; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyObject_TypeCheck(item, &ndd_BlockType) ||
            ((BlockObject *)item)->b.ids.obj == NULL) {
            PyErr_SetString(PyExc_TypeError, "blocks must hold initialised Block objects");
            goto done;
        }
        blocks[i] = ((BlockObject *)item)->b; /* descriptors only: ``seq`` keeps them alive */
    }
    {
        int nt = threads < 1 ? 1 : threads;
        if (nt > np_ / 16) /* a few keys per thread at least */
            nt = np_ >= 32 ? (int)(np_ / 16) : 1;
#ifndef HAVE_THREADS
        nt = 1;
#endif
        job_t jobs[64];
        int32_t *priv = NULL, *gathered = NULL;
        Py_ssize_t *nrows = NULL;
        if (nt > 64)
            nt = 64;
        size_t nbs = (size_t)(nb ? nb : 1);
        Py_ssize_t share = (np_ + nt - 1) / nt + 1; /* rows per block and thread, at most */
        if (nt > 1) {
            priv = PyMem_RawCalloc((size_t)(nt - 1) * (size_t)(nc ? nc : 1), sizeof(int32_t));
            gathered = PyMem_RawMalloc((size_t)nt * nbs * (size_t)share * sizeof(int32_t)
                                       + (size_t)nt * (size_t)(np_ + 1) * sizeof(int32_t));
            nrows = PyMem_RawCalloc((size_t)nt * nbs, sizeof(Py_ssize_t));
            if (priv == NULL || gathered == NULL || nrows == NULL)
                nt = 1;
        }
        /* Share the probe keys out: each thread looks its share up in every block (keys
         * are spread evenly over blocks and documents, so the shares weigh the same,
         * which whole blocks of unequal size do not); dense rows, see job_dense. */
        int32_t *scratch = nt > 1 ? gathered + (size_t)nt * nbs * (size_t)share : NULL;
        for (int t = 0; t < nt; t++) {
            Py_ssize_t p0 = np_ * t / nt, p1 = np_ * (t + 1) / nt;
            jobs[t] = (job_t){
                .blocks = blocks,
                .nb = (int)nb,
                .probe = probe + p0,
                .np_ = p1 - p0,
                .base = base,
                .cn = t == 0 ? cn : priv + (size_t)(t - 1) * nc,
                .nc = nc,
                .t = t,
                .nt = nt,
                .all = jobs,
                .rows = nt > 1 ? gathered + (size_t)t * nbs * (size_t)share : NULL,
                .nrows = nt > 1 ? nrows + (size_t)t * nbs : NULL,
                .stride = share,
                .shared = cn,
            };
        }
        int failed = 0;
        long long total = 0;
        Py_BEGIN_ALLOW_THREADS
        if (nt == 1) {
            job_lookup(&jobs[0]);
        } else {
            run_threads(jobs, nt, scratch, (size_t)np_ + 1);
        }
        for (int t = 0; t < nt; t++) {
            failed |= jobs[t].failed;
            total += jobs[t].total;
        }
        if (!failed) {
            for (int t = 1; t < nt; t++) {
                const int32_t *src = priv + (size_t)(t - 1) * nc;
                for (Py_ssize_t i = 0; i < nc; i++)
                    cn[i] += src[i];
            }
        }
        Py_END_ALLOW_THREADS
        PyMem_RawFree(gathered);
        PyMem_RawFree(nrows);
        PyMem_RawFree(priv);
        if (failed)
            PyErr_NoMemory();
        else {
            *total_out = total;
            status = 0;
        }
    }
done:
    PyMem_Free(blocks);
    Py_DECREF(seq);
    return status;
}

PyObject *
ndd_count_blocks(PyObject *self, PyObject *args)
{
    PyObject *seq_in, *result = NULL;
    Py_buffer probe, counts;
    long long base, total = 0;
    int threads;
    if (!PyArg_ParseTuple(args, "Oy*Lw*i", &seq_in, &probe, &base, &counts, &threads))
        return NULL;
    if (!check(&probe, 4, "probe") && !check(&counts, 4, "counts") &&
        count_core(seq_in, probe.buf, probe.len / 4, base, counts.buf, counts.len / 4, threads,
                   &total) == 0)
        result = PyLong_FromLongLong(total);
    PyBuffer_Release(&probe);
    PyBuffer_Release(&counts);
    return result;
}

const char ndd_count_candidates_doc[] =

"count_candidates(blocks, probe, base, n, live, threads, scratch, facts, cap, slack,\n"
"                 needed, unindexed, hours, sizes, out) -> (k, postings)\n\n"
"count_blocks of documents base .. base + n - 1 into ``scratch`` (int32, at least n items,\n"
"zeroed here: the caller keeps it between decisions), documents below ``live`` (released)\n"
"counted as 0, then count_filter over them (``facts``: kernels.Facts.table, 4 x cap) into\n"
"``out`` (int64, at least n items): one call, no window-sized allocation. Returns the\n"
"positions written and the postings counted.";

PyObject *
ndd_count_candidates(PyObject *self, PyObject *args)
{
    PyObject *seq_in, *result = NULL;
    Py_buffer probe, scratch, facts, out;
    long long base, live, slack, needed, unindexed, h0, h1, s0, s1, total = 0;
    Py_ssize_t n, cap;
    int threads;
    if (!PyArg_ParseTuple(args, "Oy*LnLiw*y*nLLL(LL)(LL)w*", &seq_in, &probe, &base, &n, &live,
                          &threads, &scratch, &facts, &cap, &slack, &needed, &unindexed, &h0,
                          &h1, &s0, &s1, &out))
        return NULL;
    if (check(&probe, 4, "probe") || check(&scratch, 4, "scratch") ||
        check(&facts, 8, "facts") || check(&out, 8, "out"))
        goto done;
    if (n < 0 || scratch.len / 4 < n || out.len / 8 < n || cap < n ||
        facts.len / 8 != FACT_ROWS * cap) {
        PyErr_SetString(PyExc_ValueError, "count_candidates: scratch and out need n items, "
                        "facts 4 x cap with cap >= n");
        goto done;
    }
    {
        int32_t *cn = scratch.buf;
        memset(cn, 0, (size_t)n * sizeof(int32_t));
        if (n > 0 && probe.len > 0 &&
            count_core(seq_in, probe.buf, probe.len / 4, base, cn, n, threads, &total) < 0)
            goto done;
        if (live > base) /* a block straddling the base still holds released documents */
            memset(cn, 0, (size_t)(live - base < n ? live - base : n) * sizeof(int32_t));
        Py_ssize_t k = ndd_filter(cn, facts.buf, cap, n, slack, needed, unindexed, h0, h1, s0,
                                  s1, out.buf);
        result = Py_BuildValue("nL", k, total);
    }
done:
    PyBuffer_Release(&probe);
    PyBuffer_Release(&scratch);
    PyBuffer_Release(&facts);
    PyBuffer_Release(&out);
    return result;
}

const char ndd_dense_rows_doc[] =

"dense_rows(offs, ids, keys, words, out) -> None\n\n"
"For the i-th index of ``keys`` (int64 positions into the block's keys), set bit ids[j] of\n"
"row i of ``out`` (uint64, len(keys) x words, zeroed) for each posting j of that key.";

PyObject *
ndd_dense_rows(PyObject *self, PyObject *args)
{
    Py_buffer offs, ids, keys, out;
    Py_ssize_t words;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*nw*", &offs, &ids, &keys, &words, &out))
        return NULL;
    if (check(&offs, 4, "offs") || check(&ids, 2, "ids") || check(&keys, 8, "keys") ||
        check(&out, 8, "out"))
        goto done;
    {
        const uint32_t *of = offs.buf;
        const uint16_t *id = ids.buf;
        const int64_t *ky = keys.buf;
        uint64_t *ob = out.buf;
        Py_ssize_t nk = offs.len / 4 - 1, nids = ids.len / 2, n = keys.len / 8;
        if (words <= 0 || out.len / 8 != n * words) {
            PyErr_SetString(PyExc_ValueError, "out must have len(keys) x words items");
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (ky[i] < 0 || ky[i] >= nk || of[ky[i] + 1] > nids || of[ky[i]] > of[ky[i] + 1]) {
                PyErr_SetString(PyExc_IndexError, "dense_rows: key or offsets out of range");
                goto done;
            }
            uint64_t *row = ob + i * words;
            for (Py_ssize_t j = of[ky[i]]; j < of[ky[i] + 1]; j++) {
                Py_ssize_t d = id[j];
                if (d / 64 >= words) {
                    PyErr_SetString(PyExc_IndexError, "dense_rows: id past the row");
                    goto done;
                }
                row[d / 64] |= (uint64_t)1 << (d % 64);
            }
        }
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&offs);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&keys);
    PyBuffer_Release(&out);
    return result;
}

