"""The inverted index of the window: q-gram keys -> document numbers, as an LSM of CSR blocks.

Why not a dict of bitmaps per q-gram: at a 50k-document window the prefix postings
number ~35M, and a Python dict entry plus a bitmap object costs ~100 bytes each
(3.5 GB). Why not hash chains (the previous design): a lookup walked every probed chain
one vectorised step per link, so a decision cost as many numpy calls as the longest
chain (1000+ at 50k documents), and growing/rehashing the arrays tripled peak memory.

Here each ``add`` (one document, numbered in call order) becomes an immutable block in
compressed-sparse-row form: sorted distinct keys, offsets (4 bytes), and the document
number of every posting (2 bytes, relative to the block's first document, so a block spans
at most 65,536 documents: at a 50k window this halves the bytes a probe reads and the
index's memory against 4-byte numbers). Looking a block up is, in numpy, a
fixed handful of calls whatever the data: one ``searchsorted`` of the probe keys
into the block's keys and one vectorised gather of the matching ranges. The C kernels
instead give each block (once, when first counted: :meth:`_Block.prepare`) its own lookup
arrays: one array of (key, postings' start or dense row) entries in key order and a
directory of ~2 keys per bucket over the keys' top bits, so that a probe key is found in
two cache lines (directory, entries) without a data-dependent branch, all probe keys a
stage at a time with prefetches (``_block.c``, ``_count.c``: ``count_one``). As the
entries say each key and its postings' start, a block then releases its ``ukeys`` and
``offs`` (8 bytes per key) and a merge reads its keys from the C Block (``merge_csr``
takes either form); numpy, which has no Block, keeps them (and gets them back from the
Blocks when the kernels are switched off after they were made). Adjacent blocks
are merged geometrically (like a binary counter, an LSM tree), so the window is a few
large blocks plus O(log n) small recent ones. Merging stops at a size cap proportional to
the live postings, so that expiry -- documents are released in number order, as the
window releases hours -- can drop whole blocks, and a block never keeps more than a small
fraction of the index alive after its documents expired. No array is grown in place:
blocks are built by concatenation, so peak memory is the index plus one merge.

Lookups may return documents whose key merely shares 32 bits of hash or whose hour is
outside the query's window; callers verify every candidate exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ndd_stream.core import kernels
from ndd_stream.core.kernels import csr, merge_blocks

Keys = npt.NDArray[np.uint32]
Ints = npt.NDArray[np.int64]
Ids = npt.NDArray[np.uint16]
Offsets = npt.NDArray[np.uint32]

# Merges stop at max(_MIN_CAP, live postings // _CAP_FRACTION) postings per block: large
# enough that a window is a handful of blocks (a probe looks every key up in every block,
# and each lookup is a few cache misses: 3 instead of 8 measured 1.3-2.4x docs/s at 10k
# and 50k, t = 0.8, 1.0-1.2x at t = 0.3), small enough that a partly expired block keeps
# at most ~1/_CAP_FRACTION of the index alive.
_MIN_CAP = 1 << 16
_CAP_FRACTION = 3
# Posting ids are 2 bytes relative to the block's first document, so a merge never makes a
# block span more documents than this; and offsets are 4 bytes, so never more postings.
MAX_SPAN = 1 << 16
_MAX_POSTINGS = (1 << 32) - 1
# How long woken count threads poll for the count before they sleep again: longer than a
# decision's work before its count (signature, prefix: well under 1 ms for 5 KB items).
WAKE_MICROSECONDS = 2000


class ThreadChoice:
    """How many threads the next count gets: one or all ``available``, whichever has counted
    a posting faster lately on this machine (a moving average of seconds per posting), the
    other tried every ``explore``-th count. Why measured and not fixed: whether threads pay
    depends on the count's size, on whether a core is free and on how long the machine
    takes to wake a sleeping thread (25-90 us on the benchmark VM: the threads are woken
    when a decision starts, and a count is timed from then, so that the waking and the
    polling thread's cost to the rest of the decision count against the threads). Measured:
    two threads pay on Reuters in one day at t = 0.3 and on 50k news, not on Reuters at 0.8.
    Speed only: the counts are the same either way."""

    def __init__(self, explore: int = 16) -> None:
        self._explore = explore
        self._per_posting: dict[int, float] = {}
        self._picks = 0

    def pick(self, available: int) -> int:
        if available <= 1:
            return 1
        self._picks += 1
        one, many = self._per_posting.get(1), self._per_posting.get(available)
        if one is None:
            return 1
        if many is None:
            return available
        faster, slower = (1, available) if one <= many else (available, 1)
        return slower if self._picks % self._explore == 0 else faster

    def record(self, threads: int, seconds: float, postings: int) -> None:
        rate = seconds / max(1, postings)
        old = self._per_posting.get(threads)
        self._per_posting[threads] = rate if old is None else old + (rate - old) / 4


@dataclass(slots=True)
class _Block:
    """Postings of documents ``lo..hi-1``: ``ids[offs[i]:offs[i+1]] + lo`` have ``ukeys[i]``.
    Once a C Block is made of it (:meth:`prepare`), ``ukeys`` and ``offs`` are None: the
    Block's lookup entries hold both (:meth:`csr` rebuilds them, merges read the Block)."""

    lo: int
    hi: int
    ukeys: Keys | None  # sorted, distinct
    offs: Offsets | None  # len(ukeys) + 1
    ids: Ids  # document number - lo, per posting
    # Dense rows of the keys held by many of its documents (C only, built on first use).
    dense: npt.NDArray[np.uint64] | None = None
    args: kernels.BlockArgs | None = None  # what the C count takes, once prepared

    @property
    def size(self) -> int:
        return int(self.ids.size)

    @property
    def nbytes(self) -> int:
        """Every array it holds: ids, keys and offsets until a C Block holds them, dense
        rows and (once prepared) the C block's lookup arrays."""
        total = self.ids.nbytes
        if self.ukeys is not None and self.offs is not None:
            total += self.ukeys.nbytes + self.offs.nbytes
        if self.dense is not None:
            total += self.dense.nbytes
        if self.args is not None:
            total += kernels.lookup_nbytes(self.args)
        return int(total)

    def csr(self) -> tuple[Keys, Offsets]:
        """Its keys and offsets: its own, or rebuilt from its C Block's entries."""
        keys, offs, _ = kernels.block_csr(self.source())
        return keys, offs

    def source(self) -> kernels.Csr | kernels.BlockArgs:
        """What a merge reads: its arrays, or its C Block once they are released."""
        if self.ukeys is not None and self.offs is not None:
            return self.ukeys, self.offs, self.ids
        assert self.args is not None
        return self.args

    def prepare(self, dense_fraction: float) -> kernels.BlockArgs:
        """The block as count_blocks takes it, with bitmap rows of the keys held by at
        least ``dense_fraction`` of its documents (when the C kernels run); the C block
        builds its lookup arrays then (the rowmap is folded into them, not kept), and the
        block releases ``ukeys`` and ``offs`` (8 bytes per key: the entries hold both)."""
        if self.args is not None:
            return self.args
        ukeys, offs = self.csr()
        span = self.hi - self.lo
        rowmap = None
        words = kernels.dense_words(span)
        if (kernels.IMPLEMENTATION == "c" and dense_fraction > 0
                and span >= kernels.DENSE_MIN_SPAN and self.size <= kernels.DENSE_MAX_POSTINGS):
            lens = np.diff(offs)
            heavy = np.flatnonzero(lens >= max(2, dense_fraction * span))
            if heavy.size:
                self.dense = kernels.dense_rows(offs, self.ids, heavy, span)
                rowmap = np.full(ukeys.size, -1, dtype=np.int32)
                rowmap[heavy] = np.arange(heavy.size, dtype=np.int32)
        self.args = kernels.make_block(ukeys, offs, self.ids, self.lo, rowmap, self.dense,
                                       words)
        if not isinstance(self.args, kernels.BlockArgs):
            self.ukeys = self.offs = None
        return self.args

    def unprepare(self) -> None:
        """Back to its arrays, without a C Block or dense rows (the kernels were switched
        off after it was prepared: numpy counts and merges it from here on)."""
        if self.args is not None and not isinstance(self.args, kernels.BlockArgs):
            self.ukeys, self.offs = self.csr()
            self.dense = None
            self.args = None


class PostingIndex:
    """Key -> document-number index of one window; see the module docstring.

    Documents are numbered by ``add`` from 0 in call order; ``release_before(n)``
    forgets documents numbered below ``n`` (the window releases them in order).
    ``threads``: the most threads one count may use (the ``count_threads`` setting);
    ``dense_fraction``: see :meth:`_Block.prepare` (the ``dense_fraction`` setting).
    """

    def __init__(self, threads: int = 1,
                 dense_fraction: float = kernels.DEFAULT_DENSE_FRACTION) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        if not 0.0 <= dense_fraction <= 1.0:
            raise ValueError(f"dense_fraction must be in [0, 1], got {dense_fraction}")
        self.threads = threads
        self.dense_fraction = dense_fraction
        self._blocks: list[_Block] = []  # oldest first; document ranges ascending
        self.base = 0  # first retained document number
        self.end = 0  # number the next added document gets
        self._size = 0  # postings held in blocks
        self._threads = ThreadChoice()
        # threads picked by get_ready for the next count, and when
        self._ready: tuple[int, float] | None = None
        # counters and positions of candidates(), kept between decisions
        self._scratch = np.empty(0, dtype=np.int32)
        self._out = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        """Postings held, including expired ones still sharing a block with live ones."""
        return self._size

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._blocks)

    @property
    def block_count(self) -> int:
        return len(self._blocks)

    @property
    def prepared(self) -> bool:
        """Whether every block is ready for a count (see :meth:`prepare`)."""
        return all(b.args is not None for b in self._blocks)

    def add(self, keys: Keys, ascending: bool = False) -> int:
        """Index one document under ``keys``; return its document number. ``ascending``: the
        caller vouches that the keys are ascending and distinct (the check costs a numpy
        reduction, ~2.5% of a Reuters decision)."""
        number = self.end
        self.end += 1
        if keys.size == 0:
            return number
        keys = np.asarray(keys, dtype=np.uint32)
        ids = np.zeros(keys.size, dtype=np.uint16)
        if ascending or keys.size < 2 or bool(np.all(keys[1:] > keys[:-1])):
            offs = np.arange(keys.size + 1, dtype=np.uint32)
            self._blocks.append(_Block(number, number + 1, keys, offs, ids))
        else:
            self._blocks.append(_Block(number, number + 1, *csr(keys, ids)))
        self._size += int(keys.size)
        self._merge_tail()
        return number

    def count(self, keys: Keys, first: int, n: int) -> npt.NDArray[np.int32]:
        """For documents ``first .. first+n-1`` (``counts[i]`` is document ``first + i``):
        how many postings each has under ``keys`` (sorted, distinct); 0 for released ones.
        One pass per block (in C when the kernels are built, see
        :mod:`ndd_stream.core.kernels`)."""
        ready, self._ready = self._ready, None  # used by this count, even an empty one
        counts = np.zeros(n, dtype=np.int32)
        if keys.size == 0 or n <= 0:
            return counts
        probe = np.ascontiguousarray(keys, dtype=np.uint32)
        live = max(first, self.base)
        blocks = self._prepared(live)
        # timed from get_ready when there was one: waking and polling cost too
        threads, started = ready or (self._threads.pick(self.threads),
                                     time.perf_counter())
        postings = kernels.count_blocks(blocks, probe, first, counts, threads)
        self._threads.record(threads, time.perf_counter() - started, postings)
        if live > first:  # a block straddling the base still holds released documents
            counts[: live - first] = 0
        return counts

    def candidates(self, keys: Keys, first: int, n: int, facts: kernels.Facts, slack: int,
                   needed: int, unindexed: int, hours: tuple[int, int],
                   sizes: tuple[int, int]) -> Ints:
        """:meth:`count` of documents ``first .. first+n-1`` filtered by
        :func:`kernels.count_filter` (see ScopeWindow.candidates): positions, ascending.
        With the C kernels one call into counters kept between decisions (no window-sized
        allocation per decision), else numpy."""
        if keys.size == 0 or n <= 0 or kernels.IMPLEMENTATION != "c":
            counts = self.count(keys, first, n)
            return kernels.count_filter(counts, facts, slack, needed, unindexed, hours, sizes)
        ready, self._ready = self._ready, None
        probe = np.ascontiguousarray(keys, dtype=np.uint32)
        live = max(first, self.base)
        blocks = self._prepared(live)
        if self._scratch.size < n:  # grown geometrically: reallocated O(log n) times
            room = max(n, 2 * self._scratch.size)
            self._scratch = np.empty(room, dtype=np.int32)
            self._out = np.empty(room, dtype=np.int64)
        threads, started = ready or (self._threads.pick(self.threads), time.perf_counter())
        found = kernels.count_candidates(blocks, probe, first, n, live, threads, self._scratch,
                                         facts, slack, needed, unindexed, hours, sizes,
                                         self._out)
        if found is None:  # the kernels were switched off after this index was made
            counts = self.count(keys, first, n)
            return kernels.count_filter(counts, facts, slack, needed, unindexed, hours, sizes)
        k, postings = found
        self._threads.record(threads, time.perf_counter() - started, postings)
        return self._out[:k].copy()

    def prepare(self) -> None:
        """Build every block's lookup arrays and dense rows now, as the first count after
        each merge does. Called after a restore: otherwise the first decision pays for the
        whole index at once (measured 0.12 s at a 20k window, ~0.45 s at 50k, t = 0.3)."""
        for block in self._blocks:
            block.prepare(self.dense_fraction)

    def get_ready(self) -> None:
        """Pick the threads of the next :meth:`count` now and, if several, wake them, so
        that they are awake when it starts (called when a decision begins)."""
        threads = self._threads.pick(self.threads)
        self._ready = (threads, time.perf_counter())
        if threads > 1:
            kernels.wake_count_workers(threads, WAKE_MICROSECONDS)

    def release_before(self, number: int) -> None:
        """Forget documents numbered below ``number``: drops every block whose documents
        are all below it; a block straddling it is filtered by :meth:`count` until it expires."""
        self.base = min(max(number, self.base), self.end)
        drop = 0
        for block in self._blocks:
            if block.hi > self.base:
                break
            drop += 1
            self._size -= block.size
        if drop:
            del self._blocks[:drop]

    # -- internals ----------------------------------------------------------------------

    def _prepared(self, live: int) -> list[kernels.BlockArgs]:
        """What the count takes of every block holding documents from ``live`` on."""
        if not kernels.running():  # switched off after C Blocks were made: numpy's arrays
            for block in self._blocks:
                block.unprepare()
        return [b.prepare(self.dense_fraction) for b in self._blocks if b.hi > live]

    def _merge_tail(self) -> None:
        """Merge adjacent blocks, newest pairs first, where the older is at most twice the
        newer and the result stays under the cap. Blocks below the cap then shrink
        geometrically from old to new (O(log n) of them) and each posting is merged O(log n)
        times. Factor 2, not 1: documents differ in size, and a run of ever smaller ones
        must still merge. All pairs, not only the newest: the cap grows with the index, so
        blocks frozen under an earlier, smaller cap (a window filling up) merge later."""
        cap = max(_MIN_CAP, self._size // _CAP_FRACTION)
        blocks = self._blocks
        sizes = [b.size for b in blocks]  # read once: a property call per pair was most of the loop
        i = len(blocks) - 2
        while i >= 0:
            old, new = sizes[i], sizes[i + 1]
            if (old <= 2 * new and old + new <= cap and old + new <= _MAX_POSTINGS
                    and blocks[i + 1].hi - blocks[i].lo <= MAX_SPAN):
                blocks[i : i + 2] = [self._merge(blocks[i], blocks[i + 1])]
                sizes[i : i + 2] = [old + new]
            i -= 1

    @staticmethod
    def _merge(old: _Block, new: _Block) -> _Block:
        """One block of both; the newer block's ids are shifted to the older one's first
        document (new.hi - old.lo <= MAX_SPAN keeps them 2-byte)."""
        keys, offs, ids = merge_blocks(old.source(), new.source(), new.lo - old.lo)
        return _Block(old.lo, new.hi, keys, offs, ids)
