"""The inverted index of the window: q-gram keys -> documents, hash-chained in numpy.

Why not a dict of bitmaps per q-gram: at a 50k-document window the prefix postings
number ~35M, and a Python dict entry plus a bitmap object costs ~100 bytes each
(3.5 GB). Here a posting costs 8 bytes (its key and a delta to the next posting of
its bucket) and every operation is a few vectorised numpy calls per document.

Postings are numbered in append order. A document's postings are a contiguous run,
so an hour that falls out of the window is a prefix of the numbering and is dropped
by moving ``base`` (no per-posting work); chains end at the first number below
``base``. Lookups may return documents whose key merely shares 32 bits of hash or
whose hour is outside the query's window; callers verify every candidate exactly.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Keys = npt.NDArray[np.uint32]
Ints = npt.NDArray[np.int64]

_MIN_BUCKETS = 1 << 10
_NO_NEXT = np.uint32(0)


class PostingIndex:
    """Append-only chained hash of (key, posting number); see the module docstring."""

    def __init__(self) -> None:
        self._head = np.full(_MIN_BUCKETS, -1, dtype=np.int64)
        self._keys: Keys = np.zeros(1024, dtype=np.uint32)
        self._delta = np.zeros(1024, dtype=np.uint32)  # cur - next; 0 = end of chain
        self.base = 0  # first retained posting number
        self.end = 0  # one past the last posting number
        self._origin = 0  # posting number stored at array index 0 (<= base)

    def __len__(self) -> int:
        return self.end - self.base

    @property
    def nbytes(self) -> int:
        return int(self._head.nbytes + self._keys.nbytes + self._delta.nbytes)

    def add(self, keys: Keys) -> int:
        """Append one document's distinct keys; return the number of its first posting."""
        first = self.end
        n = int(keys.size)
        if n == 0:
            return first
        self._reserve(n)
        self._link(keys, first)
        self.end += n
        if len(self) > 2 * self._head.size:
            self._rehash(self._head.size * 4)
        return first

    def lookup(self, keys: Keys) -> Ints:
        """Posting numbers (>= base) whose key is one of ``keys`` (distinct), any order."""
        if keys.size == 0 or self.end == self.base:
            return np.zeros(0, dtype=np.int64)
        mask = np.uint32(self._head.size - 1)
        cur = self._head[keys & mask]
        alive = cur >= self.base
        cur, want = cur[alive], keys[alive]
        found: list[Ints] = []
        while cur.size:
            pos = cur - self._origin
            hit = self._keys[pos] == want
            if hit.any():
                found.append(cur[hit])
            delta = self._delta[pos]
            cur = cur - delta.astype(np.int64)
            alive = (delta != _NO_NEXT) & (cur >= self.base)
            cur, want = cur[alive], want[alive]
        if not found:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(found)

    def release_before(self, number: int) -> None:
        """Forget every posting numbered below ``number`` (an expired prefix): O(1) but for
        an occasional compaction that is amortised over the postings it frees."""
        self.base = min(max(number, self.base), self.end)
        if self.base - self._origin > self._keys.size // 2:
            self._compact()
        if len(self) < self._head.size // 8 and self._head.size > _MIN_BUCKETS:
            self._rehash(max(_MIN_BUCKETS, 1 << (2 * len(self)).bit_length()))

    # -- internals ----------------------------------------------------------------------

    def _compact(self) -> None:
        keep = len(self)
        lo = self.base - self._origin
        size = max(1024, keep + keep // 2)
        keys = np.zeros(size, dtype=np.uint32)
        delta = np.zeros(size, dtype=np.uint32)
        keys[:keep] = self._keys[lo : lo + keep]
        delta[:keep] = self._delta[lo : lo + keep]
        self._keys, self._delta, self._origin = keys, delta, self.base

    def _reserve(self, n: int) -> None:
        need = self.end - self._origin + n
        if need <= self._keys.size:
            return
        if self.base > self._origin:
            self._compact()
            need = self.end - self._origin + n
            if need <= self._keys.size:
                return
        size = max(need, self._keys.size + self._keys.size // 2)
        self._keys.resize(size, refcheck=False)
        self._delta.resize(size, refcheck=False)

    def _link(self, keys: Keys, first: int) -> None:
        """Push postings ``first..first+len(keys)`` onto their bucket chains, in order."""
        n = int(keys.size)
        numbers = np.arange(first, first + n, dtype=np.int64)
        buckets = (keys & np.uint32(self._head.size - 1)).astype(np.int64)
        order = np.argsort(buckets, kind="stable")
        b = buckets[order]
        num = numbers[order]
        starts = np.empty(n, dtype=bool)
        starts[0] = True
        np.not_equal(b[1:], b[:-1], out=starts[1:])
        prev = np.empty(n, dtype=np.int64)
        prev[1:] = num[:-1]
        prev[starts] = self._head[b[starts]]
        ends = np.empty(n, dtype=bool)
        ends[-1] = True
        ends[:-1] = starts[1:]
        self._head[b[ends]] = num[ends]
        gap = num - prev
        delta = np.where((prev < self.base) | (gap > 0xFFFFFFFF), 0, gap).astype(np.uint32)
        pos = num - self._origin
        self._keys[pos] = keys[order]
        self._delta[pos] = delta

    def _rehash(self, buckets: int) -> None:
        self._head = np.full(buckets, -1, dtype=np.int64)
        if len(self):
            lo = self.base - self._origin
            self._link(self._keys[lo : lo + len(self)].copy(), self.base)
