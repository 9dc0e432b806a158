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
index's memory against 4-byte numbers). Looking a block up is a
fixed handful of numpy calls whatever the data: one ``searchsorted`` of the probe keys
into the block's keys and one vectorised gather of the matching ranges. Adjacent blocks
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

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ndd_stream.core.kernels import count_block, csr, directory, merge_csr

Keys = npt.NDArray[np.uint32]
Ints = npt.NDArray[np.int64]
Ids = npt.NDArray[np.uint16]
Offsets = npt.NDArray[np.uint32]

# Merges stop at max(_MIN_CAP, live postings // _CAP_FRACTION) postings per block: large
# enough that a 50k-document window is ~10-20 blocks, small enough that a partly expired
# block keeps at most ~1/_CAP_FRACTION of the index alive.
_MIN_CAP = 1 << 16
_CAP_FRACTION = 8
# Posting ids are 2 bytes relative to the block's first document, so a merge never makes a
# block span more documents than this; and offsets are 4 bytes, so never more postings.
MAX_SPAN = 1 << 16
_MAX_POSTINGS = (1 << 32) - 1


@dataclass(slots=True)
class _Block:
    """Postings of documents ``lo..hi-1``: ``ids[offs[i]:offs[i+1]] + lo`` have ``ukeys[i]``."""

    lo: int
    hi: int
    ukeys: Keys  # sorted, distinct
    offs: Offsets  # len(ukeys) + 1
    ids: Ids  # document number - lo, per posting
    directory: tuple[Keys, int] | None = None  # for the C lookup; built on first use

    @property
    def size(self) -> int:
        return int(self.ids.size)

    @property
    def nbytes(self) -> int:
        extra = 0 if self.directory is None else self.directory[0].nbytes
        return int(self.ukeys.nbytes + self.offs.nbytes + self.ids.nbytes) + extra


class PostingIndex:
    """Key -> document-number index of one window; see the module docstring.

    Documents are numbered by ``add`` from 0 in call order; ``release_before(n)``
    forgets documents numbered below ``n`` (the window releases them in order).
    """

    def __init__(self) -> None:
        self._blocks: list[_Block] = []  # oldest first; document ranges ascending
        self.base = 0  # first retained document number
        self.end = 0  # number the next added document gets
        self._size = 0  # postings held in blocks

    def __len__(self) -> int:
        """Postings held, including expired ones still sharing a block with live ones."""
        return self._size

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._blocks)

    @property
    def block_count(self) -> int:
        return len(self._blocks)

    def add(self, keys: Keys) -> int:
        """Index one document under ``keys``; return its document number."""
        number = self.end
        self.end += 1
        if keys.size == 0:
            return number
        keys = np.asarray(keys, dtype=np.uint32)
        ids = np.zeros(keys.size, dtype=np.uint16)
        self._blocks.append(_Block(number, number + 1, *csr(keys, ids)))
        self._size += int(keys.size)
        self._merge_tail()
        return number

    def count(self, keys: Keys, first: int, n: int) -> npt.NDArray[np.int32]:
        """For documents ``first .. first+n-1`` (``counts[i]`` is document ``first + i``):
        how many postings each has under ``keys`` (sorted, distinct); 0 for released ones.
        One pass per block (in C when the kernels are built, see
        :mod:`ndd_stream.core.kernels`)."""
        counts = np.zeros(n, dtype=np.int32)
        if keys.size == 0 or n <= 0:
            return counts
        probe = np.ascontiguousarray(keys, dtype=np.uint32)
        live = max(first, self.base)
        for block in self._blocks:
            if block.hi <= live:
                continue
            if block.directory is None:
                block.directory = directory(block.ukeys)
            count_block(block.ukeys, block.offs, block.ids, block.lo, probe, first, counts,
                        block.directory)
        if live > first:  # a block straddling the base still holds released documents
            counts[: live - first] = 0
        return counts

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

    def _merge_tail(self) -> None:
        """Merge adjacent blocks, newest pairs first, where the older is at most twice the
        newer and the result stays under the cap. Blocks below the cap then shrink
        geometrically from old to new (O(log n) of them) and each posting is merged O(log n)
        times. Factor 2, not 1: documents differ in size, and a run of ever smaller ones
        must still merge. All pairs, not only the newest: the cap grows with the index, so
        blocks frozen under an earlier, smaller cap (a window filling up) merge later."""
        cap = max(_MIN_CAP, self._size // _CAP_FRACTION)
        blocks = self._blocks
        i = len(blocks) - 2
        while i >= 0:
            old, new = blocks[i], blocks[i + 1]
            if (old.size <= 2 * new.size and old.size + new.size <= cap
                    and new.hi - old.lo <= MAX_SPAN
                    and old.size + new.size <= _MAX_POSTINGS):
                blocks[i : i + 2] = [self._merge(old, new)]
            i -= 1

    @staticmethod
    def _merge(old: _Block, new: _Block) -> _Block:
        """One block of both; the newer block's ids are shifted to the older one's first
        document (new.hi - old.lo <= MAX_SPAN keeps them 2-byte)."""
        keys, offs, ids = merge_csr(old.ukeys, old.offs, old.ids, new.ukeys, new.offs,
                                    new.ids, new.lo - old.lo)
        return _Block(old.lo, new.hi, keys, offs, ids)
