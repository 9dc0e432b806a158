"""The detector's hot loops (counting -- dense bitmap rows of frequent keys by carry-save
adders, the rest by posting scans, optionally on several threads --, block merging,
intersection, xor-popcount, ASCII signatures, order prefixes): C when built, else numpy.

``ndd_stream/core/_kernels.c`` is compiled at install time by ``hatch_build.py`` when a C
compiler is present; without one, installation still succeeds and these numpy versions
run instead (same results, slower: the numpy-only index decided 60 docs/s at a 50k window
and t = 0.8, the kernels 248; docs/BENCHMARK.md). ``IMPLEMENTATION``
says which one is in use (the worker logs it at start and tests compare the two).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

U16 = npt.NDArray[np.uint16]
U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


def block_postings(ukeys: U32, offs: U32, ids: U16, probe: U32) -> U16:
    """The postings (``ids`` entries) of every key of ``probe`` found in ``ukeys``
    (ascending, distinct), in one vectorised gather."""
    if not ukeys.size or not probe.size:
        return ids[:0]
    at = np.searchsorted(ukeys, probe)
    np.minimum(at, ukeys.size - 1, out=at)
    at = at[ukeys[at] == probe]
    if not at.size:
        return ids[:0]
    start = offs[at].astype(np.int64)
    lens = offs[at + 1].astype(np.int64) - start
    ends = np.cumsum(lens)
    total = int(ends[-1])
    # positions start[j]..start[j]+lens[j]-1 for every hit j
    idx = np.repeat(start - (ends - lens), lens) + np.arange(total, dtype=np.int64)
    return ids[idx]


def count_block_numpy(
    ukeys: U32, offs: U32, ids: U16, lo: int, probe: U32, base: int, counts: I32
) -> int:
    """Add 1 to ``counts[lo + ids[j] - base]`` for every posting j of every key of ``probe``
    (ascending) in the block's ``ukeys`` (ascending, distinct); skip postings outside
    ``counts``. Returns the postings counted."""
    pos = block_postings(ukeys, offs, ids, probe).astype(np.int64) + (lo - base)
    pos = pos[(pos >= 0) & (pos < counts.size)]
    if pos.size:
        counts += np.bincount(pos, minlength=counts.size).astype(np.int32)
    return int(pos.size)


def csr(keys: U32, ids: U16) -> tuple[U32, U32, U16]:
    """(distinct keys, offsets, ids) of parallel (key, id) postings: a stable sort by key,
    so ids under one key keep their order, then the runs of equal keys."""
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    ids = ids[order]
    n = int(keys.size)
    if n == 0:
        return keys, np.zeros(1, dtype=np.uint32), ids
    change = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    offs = np.empty(change.size + 2, dtype=np.uint32)
    offs[0] = 0
    offs[1:-1] = change
    offs[-1] = n
    return keys[offs[:-1]], offs, ids


def merge_csr_numpy(
    a_keys: U32, a_offs: U32, a_ids: U16, b_keys: U32, b_offs: U32, b_ids: U16, shift: int
) -> tuple[U32, U32, U16]:
    """Two CSR blocks as one (see :func:`merge_csr`): every posting with its key, sorted
    stably by key (A's postings first under a shared key)."""
    keys = np.concatenate([np.repeat(a_keys, np.diff(a_offs)), np.repeat(b_keys, np.diff(b_offs))])
    shifted = (b_ids.astype(np.uint32) + np.uint32(shift)).astype(np.uint16)
    return csr(keys, np.concatenate([a_ids, shifted]))


def intersection_numpy(a: U64, b: U64) -> int:
    """|A ∩ B| of two ascending arrays of distinct codes (binary search of the smaller)."""
    if a.size > b.size:
        a, b = b, a
    if a.size == 0:
        return 0
    idx = np.searchsorted(b, a)
    idx[idx == b.size] = 0
    return int(np.count_nonzero(b[idx] == a))


def xor_popcount_numpy(table: U64, rows: I64, query: U64) -> I64:
    """popcount(table[r] ^ query) for every row index r of ``rows`` (``table``: 2-D)."""
    if not rows.size:
        return np.zeros(0, dtype=np.int64)
    return np.bitwise_count(table[rows] ^ query).sum(axis=1, dtype=np.int64)


def _load() -> tuple[str, object]:
    try:
        from ndd_stream.core import _kernels  # type: ignore[attr-defined]
    except ImportError:
        return "numpy", None
    return "c", _kernels


IMPLEMENTATION, _C = _load()
"""``"c"`` or ``"numpy"``: which implementation this process uses."""


def use_numpy() -> None:
    """Run the numpy versions in this process even where the C kernels are built (the
    ``no_kernels`` setting, applied once by the entry point: comparisons, a suspected
    kernel bug). Process-wide, as the extension module is."""
    global IMPLEMENTATION, _C
    IMPLEMENTATION, _C = "numpy", None


def running() -> bool:
    """Whether the C kernels run in this process (built, and not switched off by
    :func:`use_numpy`; tests also switch them off by setting ``_C`` to None)."""
    return _C is not None


def _cgroup_cpus(path: str = "/sys/fs/cgroup/cpu.max") -> int | None:
    """Whole CPUs of a cgroup v2 quota ("200000 100000" = 2), None when unlimited or absent:
    a container limited to 1 CPU still sees every core of its host in its affinity mask."""
    try:
        with open(path) as fh:
            quota, period = fh.read().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return max(1, int(quota) // max(1, int(period)))
    except ValueError:
        return None


def available_cores() -> int:
    """The cores this process may run on: its affinity mask, bounded by a cgroup CPU quota
    (the default of the ``count_threads`` setting)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_cpus()
    return max(1, min(cores, quota) if quota else cores)


DEFAULT_DENSE_FRACTION = 1 / 64
"""The default of the ``dense_fraction`` setting: a key held by this share of the window's
documents (of a block's, in the LSM index) is also held as a bitmap row and counted by
carry-save adders (C only; 0 = never)."""
DENSE_MIN_SPAN = 64  # blocks spanning fewer documents keep posting lists only


def dense_words(span: int) -> int:
    """Words of a dense row over ``span`` documents: padded to a multiple of four, so the
    C adder works on whole 256-bit groups."""
    return max(4, -(-span // 256) * 4)


def dense_rows(offs: U32, ids: U16, keys: I64, span: int) -> U64:
    """Bitmap rows (len(keys) x dense_words(span) uint64) of the keys at positions ``keys``:
    bit d of row i is set when ``ids`` under key ``keys[i]`` holds d."""
    words = dense_words(span)
    out = np.zeros((keys.size, words), dtype=np.uint64)
    if not keys.size:
        return out
    if _C is not None:
        _C.dense_rows(offs, ids, np.ascontiguousarray(keys, dtype=np.int64), words, out)  # type: ignore[attr-defined]
        return out
    starts = offs[keys].astype(np.int64)
    lens = offs[keys + 1].astype(np.int64) - starts
    row = np.repeat(np.arange(keys.size, dtype=np.int64), lens)
    ends = np.cumsum(lens)
    idx = np.repeat(starts - (ends - lens), lens) + np.arange(int(lens.sum()), dtype=np.int64)
    flat = np.zeros(keys.size * words * 64, dtype=bool)
    flat[row * words * 64 + ids[idx].astype(np.int64)] = True
    out[:] = np.packbits(flat, bitorder="little").view("<u8").reshape(keys.size, words)
    return out


class BlockArgs(NamedTuple):
    """One index block as :func:`count_blocks` counts it (see :func:`make_block`): the
    numpy version's form; with the C kernels a ``_kernels.Block`` with ``ids``, ``lo``,
    ``dense`` and ``words`` (``ukeys``, ``offs`` and ``rowmap`` are folded into the lookup
    arrays it builds, see ``_block.c``, and not kept), checked once when it is made, not
    at every count."""

    ukeys: U32  # distinct keys, ascending
    offs: U32  # len(ukeys) + 1 offsets into ids
    ids: U16  # document number - lo of each posting
    lo: int  # number of the block's first document
    rowmap: I32 | None  # dense row of each key, -1 = sparse (C only)
    dense: U64 | None  # dense rows, rows x words (C only)
    words: int


def make_block(ukeys: U32, offs: U32, ids: U16, lo: int, rowmap: I32 | None = None,
               dense: U64 | None = None, words: int = 1) -> BlockArgs:
    """A block for :func:`count_blocks`: a C ``Block`` when the kernels are built (typed as
    BlockArgs), else a BlockArgs. The arrays must not change afterwards; the C block builds
    its own lookup arrays (:func:`lookup_nbytes`) and keeps none of ``ukeys``, ``offs`` and
    ``rowmap`` (:func:`block_csr` rebuilds the first two; :func:`merge_blocks` reads it)."""
    if _C is None:
        return BlockArgs(ukeys, offs, ids, lo, rowmap, dense, words)
    block: BlockArgs = _C.Block(ukeys, offs, ids, lo, rowmap, dense, words)  # type: ignore[attr-defined]
    return block


def lookup_nbytes(block: BlockArgs) -> int:
    """Bytes a block from :func:`make_block` holds beyond the ids and dense rows it was
    given: the C block's lookup entries, directory and dense rows' starts; 0 for the numpy
    form (which holds the ukeys and offs it was given, the C block does not)."""
    return int(getattr(block, "lookup_nbytes", 0))


DENSE_MAX_POSTINGS = (1 << 31) - 1
"""The most postings a block with dense rows may hold (the C lookup marks a dense key in
the top bit of the 32-bit field that holds a sparse key's postings' start)."""


def count_blocks(blocks: list[BlockArgs], probe: U32, base: int, counts: I32,
                 threads: int = 1) -> int:
    """:func:`count_block` over every block, dense keys (rowmap >= 0) counted from their
    bitmap rows; in C on up to ``threads`` threads when built, else numpy (postings only).
    ``blocks`` come from :func:`make_block`."""
    if _C is None:
        return sum(count_block_numpy(b.ukeys, b.offs, b.ids, b.lo, probe, base, counts)
                   for b in blocks)
    return int(_C.count_blocks(blocks, probe, base, counts, threads))  # type: ignore[attr-defined]


def wake_count_workers(threads: int, microseconds: int) -> None:
    """Wake the threads a count on ``threads`` threads will use and keep them polling for
    ``microseconds`` (C only; nothing without the kernels): waking a sleeping thread took
    25-90 us on the benchmark VM, so a decision wakes them before its own work, not when
    its count starts."""
    if _C is not None and threads > 1:
        _C.wake_count_workers(threads, microseconds)  # type: ignore[attr-defined]


def count_block(
    ukeys: U32,
    offs: U32,
    ids: U16,
    lo: int,
    probe: U32,
    base: int,
    counts: I32,
) -> int:
    """:func:`count_block_numpy`, in C when built."""
    if _C is None:
        return count_block_numpy(ukeys, offs, ids, lo, probe, base, counts)
    block = make_block(ukeys, offs, ids, lo)
    return int(_C.count_blocks([block], probe, base, counts, 1))  # type: ignore[attr-defined]


Csr = tuple[U32, U32, U16]
"""A block's (distinct keys ascending, offsets, ids), as :func:`csr` makes them."""


def merge_csr(
    a_keys: U32, a_offs: U32, a_ids: U16, b_keys: U32, b_offs: U32, b_ids: U16, shift: int
) -> Csr:
    """(keys, offs, ids) of blocks A and B merged: keys ascending and distinct, under each
    key A's postings then B's (B's ids plus ``shift``, which must keep them < 2**16). In C
    one linear pass; the numpy version sorts."""
    return merge_blocks((a_keys, a_offs, a_ids), (b_keys, b_offs, b_ids), shift)


def block_csr(block: Csr | BlockArgs) -> Csr:
    """The (keys, offs, ids) of a block: its own arrays, or for a C ``Block`` (which keeps
    only its lookup entries and ids) the keys and offsets rebuilt from its entries (a method
    of the Block itself: works after :func:`use_numpy` too)."""
    if isinstance(block, tuple):  # a C Block is typed as BlockArgs but is no tuple
        return block[0], block[1], block[2]
    keys = np.empty(block.nkeys, dtype=np.uint32)
    offs = np.empty(keys.size + 1, dtype=np.uint32)
    block.csr(keys, offs)
    return keys, offs, block.ids


def merge_blocks(a: Csr | BlockArgs, b: Csr | BlockArgs, shift: int) -> Csr:
    """:func:`merge_csr` of two blocks, each its (keys, offs, ids) or a C ``Block`` from
    :func:`make_block` (read through its lookup entries: the index releases a block's keys
    and offsets once its Block is made). With the kernels, a tuple must be those three."""
    if _C is None:
        return merge_csr_numpy(*block_csr(a), *block_csr(b), shift)
    # Room for every key of both, trimmed in place after: no separate pass counting the
    # shared keys first. (Inline, not helpers: a merge per document on average.)
    if isinstance(a, tuple):  # a C Block is typed as BlockArgs but is no tuple
        room, postings = a[0].size, a[2].size
    else:
        room, postings = a.nkeys, a.ids.size
    if isinstance(b, tuple):
        room += b[0].size
        postings += b[2].size
    else:
        room += b.nkeys
        postings += b.ids.size
    keys = np.empty(room, dtype=np.uint32)
    offs = np.empty(room + 1, dtype=np.uint32)
    ids = np.empty(postings, dtype=np.uint16)
    n = int(_C.merge_csr(a, b, shift, keys, offs, ids))  # type: ignore[attr-defined]
    if n < room:
        keys.resize(n, refcheck=False)  # realloc: no copy, the tail's memory returned
        offs.resize(n + 1, refcheck=False)
    return keys, offs, ids


def ascii_signature(nf: str, q: int) -> U64 | None:
    """The signature of an ASCII ``nf`` (q <= 4) in C -- one radix sort instead of numpy's
    codes, sort and unique mask -- or None when the kernels are not built or the text is
    not ASCII (the caller computes it in numpy: the same codes)."""
    if _C is None or q > 4 or not nf.isascii():
        return None
    out = np.empty(max(0, len(nf) - q + 1), dtype=np.uint64)
    n = int(_C.ascii_signature(nf.encode("ascii"), q, out))  # type: ignore[attr-defined]
    return out[:n]


def ascii_sign(nf: str, q: int) -> tuple[U64, U64] | None:
    """(signature, fmix64 of it) of an ASCII ``nf`` (q <= 4) in one C call, or None when
    the kernels are not built or the text is not ASCII (the caller computes both in numpy:
    the same codes)."""
    if _C is None or q > 4:
        return None
    n = max(0, len(nf) - q + 1)
    out = np.empty(2 * n, dtype=np.uint64)
    m = _C.ascii_sign(nf, q, out)  # type: ignore[attr-defined]
    if m is None:
        return None
    return out[:m], out[n:n + m]


def figure_tokens(text: str, scales: tuple[str, ...]) -> dict[str, str] | None:
    """core.quantities.tokens of an ASCII ``text`` in one C scan (``scales``: the scale
    words, lower case, in the pattern's order), or None when the kernels are not built (the
    caller runs its Python version: the same tokens). Every decided item's facts include
    its figures: ~1 us here against 7-18 us for a Reuters item in Python."""
    if _C is None:
        return None
    return _C.figure_tokens(text.encode("ascii"), scales)  # type: ignore[attr-defined]


def ascii_facts(text: str, scales: tuple[str, ...], max_words: int) -> str | None:
    """novelty.figures of an ASCII ``text`` in one C call (``scales`` as for
    :func:`figure_tokens`, ``max_words`` the headline's), or None when the kernels are not
    built or the text is not ASCII (the caller runs its Python version: the same string)."""
    if _C is None:
        return None
    return _C.ascii_facts(text, scales, max_words)  # type: ignore[attr-defined]


def prose_blocks(text: str, min_words: int, min_chars: int) -> str | None:
    """extract.prose_blocks of an ASCII ``text`` in one C scan, or None when the kernels
    are not built or the text is not ASCII (the caller runs its Python version)."""
    if _C is None:
        return None
    return _C.prose_blocks(text, min_words, min_chars)  # type: ignore[attr-defined]


def order_prefix(mixed: U64, classes: npt.NDArray[np.uint8], shift: int,
                 length: int) -> U64 | None:
    """The ``length`` smallest of ``mixed`` by (classes[mixed >> shift], mixed), any order,
    in C; None when the kernels are not built (OrderVersion.prefix computes it in numpy)."""
    if _C is None:
        return None
    out = np.empty(length, dtype=np.uint64)
    _C.order_prefix(np.ascontiguousarray(mixed, dtype=np.uint64), classes, shift, length, out)  # type: ignore[attr-defined]
    return out


def order_classes(counts: npt.NDArray[np.uint32], small: npt.NDArray[np.uint8]
                  ) -> tuple[npt.NDArray[np.uint8], int] | None:
    """``small[counts]`` where a count is below ``small.size`` (0 elsewhere) and how many
    are not, in one C pass; None when the kernels are not running."""
    if _C is None or not hasattr(_C, "order_classes"):
        return None
    out = np.empty(counts.size, dtype=np.uint8)
    big = int(_C.order_classes(np.ascontiguousarray(counts, dtype=np.uint32), small, out))
    return out, big


def fmix64(codes: U64) -> U64 | None:
    """splitmix64's finalizer of every code in one C pass; None without the kernels (the
    caller computes it in numpy: the same values)."""
    if _C is None:
        return None
    codes = np.ascontiguousarray(codes, dtype=np.uint64)
    out = np.empty_like(codes)
    _C.fmix64(codes, out)  # type: ignore[attr-defined]
    return out


def probe_keys(mixed: U64, tables: list[npt.NDArray[np.uint8] | None], shift: int,
               length: int) -> tuple[list[U64], U32, int] | None:
    """A probe's prefixes under each order version (``tables``: their class tables, None for
    the hash order of version 0; none: the whole of ``mixed``), the distinct top-32-bit keys
    of their union, ascending, and how many distinct codes the union holds, in one C call;
    None without the kernels (the caller computes it in numpy: the same sets)."""
    if _C is None:
        return None
    nv = len(tables)
    prefixes = np.empty((nv, length if nv else 0), dtype=np.uint64)
    keys = np.empty(nv * length if nv else mixed.size, dtype=np.uint32)
    ncodes, nkeys = _C.probe_keys(np.ascontiguousarray(mixed, dtype=np.uint64), tables, shift,  # type: ignore[attr-defined]
                                  length if nv else 0, prefixes, keys)
    if nkeys < keys.size:
        keys.resize(nkeys, refcheck=False)  # realloc: no copy (the keys may be indexed)
    return list(prefixes), keys, int(ncodes)


def top_bits_bitmap(mixed: U64, bits: int) -> U64:
    """A bitmap of ``2**bits`` bits (uint64 words, little-endian bit order) with bit
    ``c >> (64 - bits)`` set for every code c of ``mixed`` (the bitmap filter's)."""
    if _C is not None:
        out = np.zeros((1 << bits) // 64, dtype=np.uint64)  # bits >= 6
        _C.top_bits(np.ascontiguousarray(mixed, dtype=np.uint64), 64 - bits, out, 0)  # type: ignore[attr-defined]
        return out
    flags = np.zeros(1 << bits, dtype=np.uint8)
    flags[mixed >> np.uint64(64 - bits)] = 1
    return np.packbits(flags, bitorder="little").view("<u8").astype(np.uint64, copy=False)


def top_bits_count(counts: U32, mixed: U64, shift: int) -> None:
    """``counts[mixed >> shift] += 1``, once per distinct slot (numpy's fancy-index add)."""
    if _C is not None:
        _C.top_bits(np.ascontiguousarray(mixed, dtype=np.uint64), shift, counts, 1)  # type: ignore[attr-defined]
        return
    counts[mixed >> np.uint64(shift)] += np.uint32(1)


class Facts:
    """What the count filter needs of each document of a window, by name: ``needed`` (the
    overlap a match of it must reach), ``unindexed`` (its q-grams left out of its prefix),
    ``hour`` and ``size`` (|signature|); column i is the window's i-th document. Stored as
    the rows of one int64 array (4 x capacity, in the order of ROWS) so that the C filter
    reads them as one buffer; the C side names the rows alike (enum fact_row)."""

    ROWS = ("needed", "unindexed", "hour", "size")

    def __init__(self, capacity: int = 256) -> None:
        self.table = np.zeros((len(self.ROWS), max(1, capacity)), dtype=np.int64)
        self.count = 0

    @property
    def needed(self) -> I64:
        return self.table[0, : self.count]

    @property
    def unindexed(self) -> I64:
        return self.table[1, : self.count]

    @property
    def hour(self) -> I64:
        return self.table[2, : self.count]

    @property
    def size(self) -> I64:
        return self.table[3, : self.count]

    def append(self, needed: int, unindexed: int, hour: int, size: int) -> None:
        """One more document (the capacity doubles when full: no copy per document)."""
        n = self.count
        if n >= self.table.shape[1]:
            grown = np.zeros((len(self.ROWS), 2 * n + 16), dtype=np.int64)
            grown[:, :n] = self.table[:, :n]
            self.table = grown
        self.table[:, n] = (needed, unindexed, hour, size)
        self.count = n + 1

    def drop_front(self, k: int) -> None:
        """Forget the first ``k`` documents (the window released them)."""
        self.table = self.table[:, k:].copy()
        self.count = max(0, self.count - k)


def count_filter(counts: I32, facts: Facts, slack: int, needed: int, unindexed: int,
                 hours: tuple[int, int], sizes: tuple[int, int]) -> I64:
    """Positions i (ascending) with counts[i] > 0 that pass the count filter
    ``counts[i] + slack >= max(needed, facts.needed[i]) - max(unindexed,
    facts.unindexed[i])`` and whose ``facts.hour[i]`` and ``facts.size[i]`` lie in the
    inclusive ranges (len(counts) <= facts.count). See ScopeWindow.candidates. One pass in C."""
    n = counts.size
    if _C is not None:
        out = np.empty(n, dtype=np.int64)
        table = facts.table
        k = int(_C.count_filter(counts, table, table.shape[1], slack, needed, unindexed,  # type: ignore[attr-defined]
                                hours, sizes, out))
        return out[:k]
    owners = np.flatnonzero(counts)
    need = (np.maximum(facts.needed[owners], needed)
            - np.maximum(facts.unindexed[owners], unindexed))
    hour = facts.hour[owners]
    size = facts.size[owners]
    keep = ((counts[owners] + slack >= need) & (hour >= hours[0]) & (hour <= hours[1])
            & (size >= sizes[0]) & (size <= sizes[1]))
    return owners[keep]


def count_candidates(blocks: list[BlockArgs], probe: U32, base: int, n: int, live: int,
                     threads: int, scratch: I32, facts: Facts, slack: int, needed: int,
                     unindexed: int, hours: tuple[int, int], sizes: tuple[int, int],
                     out: I64) -> tuple[int, int] | None:
    """:func:`count_blocks` of documents ``base .. base + n - 1`` into ``scratch`` (zeroed
    there; documents below ``live`` count 0), then :func:`count_filter` into ``out``, in one
    C call with no window-sized allocation: (positions written to ``out``, postings
    counted). None without the kernels (the caller counts and filters in numpy)."""
    if _C is None:
        return None
    table = facts.table
    k, postings = _C.count_candidates(blocks, probe, base, n, live, threads, scratch, table,  # type: ignore[attr-defined]
                                      table.shape[1], slack, needed, unindexed, hours, sizes,
                                      out)
    return int(k), int(postings)


def intersection(a: U64, b: U64) -> int:
    if _C is None:
        return intersection_numpy(a, b)
    return int(_C.intersection(a, b))  # type: ignore[attr-defined]


def bitmap_keep(table: U64, rows: I64, query: U64, sizes: I64, size: int, threshold: float,
                out: npt.NDArray[np.bool_]) -> bool:
    """BitmapFilter.may_match's test for ``rows`` of one chunk (``table``: 2-D, ``sizes``: its
    documents' |signature|) written into ``out`` in one C pass; False without the kernels
    (the caller computes it in numpy: the same doubles)."""
    if _C is None:
        return False
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    if rows.size:
        _C.bitmap_keep(table, table.shape[1], rows, query, sizes, size, threshold, out)  # type: ignore[attr-defined]
    return True


def xor_popcount(table: U64, rows: I64, query: U64) -> I64:
    """:func:`xor_popcount_numpy`, in C when built (no (rows x width) temporary)."""
    if _C is None:
        return xor_popcount_numpy(table, rows, query)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    out = np.empty(rows.size, dtype=np.int64)
    if rows.size:
        _C.xor_popcount(table, table.shape[1], rows, query, out)  # type: ignore[attr-defined]
    return out
