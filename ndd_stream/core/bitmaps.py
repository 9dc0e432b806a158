"""The bitmap filter: an exact upper bound on |A ∩ B| from two fixed-size bitmaps.

Why: the l-prefix count filter rules out unrelated documents only when the prefix
extension exceeds the prefix q-grams they share. Between the thresholds where the
prefix becomes the whole signature (below ``similarity.FULL_PREFIX_BELOW``) and those
where the short extension suffices (~0.6 and up on news), candidates that share many
common q-grams get through (~9 per decision at t = 0.5 and a 10k window, each an exact
verification of ~150 µs); on shorter or more formulaic texts, more. So every indexed
document may also keep a bitmap of ``2**bits`` bits with bit ``h(g)`` set for each of
its q-grams ``g`` (``h``: the top ``bits`` bits of fmix64 of the code). A bit set in
exactly one of two bitmaps has an element of the symmetric difference behind it, and
distinct bits have distinct elements, so ``|A Δ B| >= popcount(b(A) ^ b(B))`` and

    |A ∩ B| = (|A| + |B| - |A Δ B|) / 2 <= (|A| + |B| - popcount(b(A) ^ b(B))) / 2

(the bitmap filter of Sandes, Teodoro & Melo, 2020). A candidate whose bound over
``max(|A|, |B|)`` is below the threshold cannot match and is dropped unverified; a match
is never dropped, whatever the collisions. On the benchmark workload (~3,300 q-grams per
item), 2**14 bits (2 KiB per document) rule out 99.9% of unrelated pairs at t = 0.5 and
2**16 bits (8 KiB) at t = 0.3; at t = 0.5 and a 10k window they remove 8.7 of the 8.9
candidates per decision.

Bitmaps live in chunks of :data:`CHUNK` documents by document number, so expiry drops
whole chunks and nothing is shifted or copied.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ndd_stream.core.kernels import bitmap_keep, top_bits_bitmap, xor_popcount
from ndd_stream.core.qgrams import Codes
from ndd_stream.core.similarity import FULL_PREFIX_BELOW

CHUNK = 4096  # documents per storage chunk: a candidate test costs one numpy pass per chunk
# it touches (1,024 gave ~50 per decision at a 50k window on text sharing passages)

Bitmap = npt.NDArray[np.uint64]
Ints = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


def auto_bits(threshold: float) -> int:
    """The default size for a threshold: 2**14 bits (2 KiB per document) from
    ``FULL_PREFIX_BELOW`` (0.5) up, none below. Below, every q-gram is indexed and the count
    filter is a near-exact overlap count (0.2 candidates per decision at t = 0.3): a bitmap
    would cost memory for nothing. From 0.5 to 0.7 it removes ~98% of the candidates the
    count filter lets through; above 0.7 news items leave ~0.2 candidates per decision, but
    items sharing long passages (syndicated paragraphs, boilerplate) passed ~340 per
    decision at a 10k window, t = 0.8, each verified exactly (37 ms per decision); the
    bitmaps leave 0.03 (2.3 ms; docs/BENCHMARK.md)."""
    return 14 if threshold >= FULL_PREFIX_BELOW else 0


class BitmapFilter:
    """Bitmaps of the documents of one window, by document number."""

    def __init__(self, bits: int) -> None:
        if not 6 <= bits <= 24:
            raise ValueError(f"bitmap filter bits must be in 6..24, got {bits}")
        self.bits = bits
        self.words = (1 << bits) // 64
        self._chunks: dict[int, npt.NDArray[np.uint64]] = {}  # chunk -> (CHUNK, words)
        self._sizes: dict[int, npt.NDArray[np.int64]] = {}  # chunk -> |signature| per row

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._chunks.values()) + sum(
            s.nbytes for s in self._sizes.values()
        )

    def bitmap(self, mixed: Codes) -> Bitmap:
        """The bitmap of a document from its fmix64-mixed q-gram codes."""
        return top_bits_bitmap(mixed, self.bits)

    def add(self, number: int, bitmap: Bitmap, size: int) -> None:
        chunk, row = divmod(number, CHUNK)
        table = self._chunks.get(chunk)
        if table is None:
            table = self._chunks[chunk] = np.zeros((CHUNK, self.words), dtype=np.uint64)
            self._sizes[chunk] = np.zeros(CHUNK, dtype=np.int64)
        table[row] = bitmap
        self._sizes[chunk][row] = size

    def release_before(self, number: int) -> None:
        """Forget chunks whose documents are all numbered below ``number``."""
        for chunk in [c for c in self._chunks if (c + 1) * CHUNK <= number]:
            del self._chunks[chunk]
            del self._sizes[chunk]

    def may_match(
        self, numbers: Ints, query: Bitmap, size: int, threshold: float
    ) -> Mask:
        """For each document number (ascending; all added): False when its bound proves
        doc_q < ``threshold`` against the query document (its ``bitmap`` and ``size``)."""
        if not numbers.size:
            return np.ones(0, dtype=bool)
        chunks = numbers // CHUNK
        rows = numbers - chunks * CHUNK
        if chunks[0] == chunks[-1]:  # the common case: one chunk, no grouping
            groups = [(0, numbers.size)]
        else:
            edges = np.flatnonzero(chunks[1:] != chunks[:-1]) + 1
            groups = list(zip([0, *edges.tolist()], [*edges.tolist(), numbers.size],
                              strict=True))
        keep: Mask = np.empty(numbers.size, dtype=bool)
        for lo, hi in groups:  # in C when built: one pass per chunk
            chunk = int(chunks[lo])
            if not bitmap_keep(self._chunks[chunk], rows[lo:hi], query, self._sizes[chunk],
                               size, threshold, keep[lo:hi]):
                break
        else:
            return keep
        differing = np.empty(numbers.size, dtype=np.int64)
        theirs = np.empty(numbers.size, dtype=np.int64)
        for lo, hi in groups:
            chunk = int(chunks[lo])
            differing[lo:hi] = xor_popcount(self._chunks[chunk], rows[lo:hi], query)
            theirs[lo:hi] = self._sizes[chunk][rows[lo:hi]]
        bound = (size + theirs - differing) // 2
        denom = np.maximum(theirs, size).astype(np.float64)
        numpy_keep: Mask = bound.astype(np.float64) / denom >= threshold
        return numpy_keep
