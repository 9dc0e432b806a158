"""doc_q (Def. 3.32) and the exact integer bounds that candidate pruning rests on."""

from __future__ import annotations

import math
from functools import lru_cache

from ndd_stream.core.kernels import intersection
from ndd_stream.core.qgrams import Codes


def intersection_size(a: Codes, b: Codes) -> int:
    """|A ∩ B| for two sorted arrays of distinct codes (in C when the kernels are built)."""
    return intersection(a, b)


def doc_q(a: Codes, b: Codes) -> float:
    """|A ∩ B| / max(|A|, |B|); 0.0 when both signatures are empty."""
    denom = max(a.size, b.size)
    if denom == 0:
        return 0.0
    return intersection_size(a, b) / denom


@lru_cache(maxsize=1 << 16)  # pure, called per decision with few distinct sizes
def min_overlap(size: int, threshold: float) -> int:
    """Smallest o with o / size >= threshold: a match with a set of ``size`` needs that many
    shared q-grams whatever the other set's size (the max() denominator is never smaller)."""
    if size == 0:
        return 0
    o = max(0, math.ceil(threshold * size) - 1)
    while o / size < threshold:
        o += 1
    return o


def prefix_length(size: int, threshold: float) -> int:
    """How many q-grams (under the global order) to index or probe so that any pair with
    doc_q >= threshold shares one of them (prefix filtering, Bayardo et al. 2007)."""
    if size == 0:
        return 0
    return min(size, size - min_overlap(size, threshold) + 1)


@lru_cache(maxsize=1 << 16)  # pure, called per decision with few distinct sizes
def size_bounds(size: int, threshold: float) -> tuple[int, int]:
    """Length filter: a set of ``size`` can only match sets whose size lies in these bounds."""
    if threshold <= 0.0:
        return 0, 2**62
    lo = min_overlap(size, threshold)
    hi = math.floor(size / threshold) + 1
    while hi > size and size / hi < threshold:
        hi -= 1
    return lo, hi


# How far prefixes are extended past the minimum (the "l-prefix" of Wang, Li & Feng 2012):
# with prefixes of length |X| - o + l on both sides, any pair reaching the overlap o shares
# at least l of their prefix q-grams, so candidates sharing fewer are dropped without
# verification. A few % more postings buy a candidate set of near-duplicates only.
PREFIX_EXTENSION_MIN = 16
PREFIX_EXTENSION_SHARE = 0.1  # of the minimal prefix


# Below this threshold the "prefix" is the whole signature. The minimal prefix is then
# already > 50% of it, and unrelated news items share ~18% of their q-grams, so a short
# extension guarantees too few shared keys to rule them out: at t = 0.3 and a 10k window
# ~8,000 candidates per decision had to be verified (0.8 docs/s). Indexing every q-gram
# costs ~1.3x the postings but makes the count filter a near-exact overlap count
# (its bound is the overlap a match needs): 0.2 candidates per decision, 78 docs/s.
FULL_PREFIX_BELOW = 0.5


@lru_cache(maxsize=1 << 16)  # pure, called per decision with few distinct sizes
def extended_prefix(size: int, threshold: float) -> int:
    """How many q-grams of a set of ``size`` to index or probe under the global order: its
    minimal prefix extended by max(16, 10%), or the whole set below FULL_PREFIX_BELOW. Exact
    for any extension; what the extension buys is the count filter of
    ScopeWindow.candidates (a match shares at least the pair's overlap minus the larger
    unindexed tail in both prefixes)."""
    if size == 0:
        return 0
    if threshold < FULL_PREFIX_BELOW:
        return size
    base = prefix_length(size, threshold)
    extra = max(PREFIX_EXTENSION_MIN, math.ceil(PREFIX_EXTENSION_SHARE * base))
    return min(size, base + extra - 1)
