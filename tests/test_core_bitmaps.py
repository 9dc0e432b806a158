"""The bitmap filter never rules out a pair that reaches the threshold."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndd_stream.core import kernels
from ndd_stream.core.bitmaps import CHUNK, BitmapFilter, auto_bits
from ndd_stream.core.detector import DetectorConfig
from ndd_stream.core.qgrams import fmix64

code_sets = st.sets(st.integers(0, 2**64 - 1), max_size=300)


def _codes(values: set[int]) -> np.ndarray:
    return np.array(sorted(values), dtype=np.uint64)


@settings(max_examples=400, deadline=None)
@given(code_sets, code_sets, code_sets, st.sampled_from([6, 8, 10, 14]),
       st.floats(0.05, 1.0))
def test_the_bound_is_never_below_the_true_overlap(
    shared: set[int], only_a: set[int], only_b: set[int], bits: int, threshold: float
) -> None:
    a, b = _codes(shared | only_a), _codes(shared | only_b)
    if not a.size or not b.size:
        return
    filt = BitmapFilter(bits)
    filt.add(0, filt.bitmap(fmix64(b)), int(b.size))
    query = filt.bitmap(fmix64(a))
    overlap = len(set(a.tolist()) & set(b.tolist()))
    differing = int(kernels.xor_popcount(filt._chunks[0], np.array([0]), query)[0])
    assert (a.size + b.size - differing) // 2 >= overlap
    keep = filt.may_match(np.array([0]), query, int(a.size), threshold)
    if overlap / max(a.size, b.size) >= threshold:
        assert keep[0], "a pair at the threshold was ruled out"


def test_it_rules_out_unrelated_documents() -> None:
    """Not vacuous: with room in the bitmap, disjoint sets are dropped."""
    rng = np.random.default_rng(7)
    a = np.unique(rng.integers(0, 2**63, 2000, dtype=np.uint64))
    b = np.unique(rng.integers(0, 2**63, 2000, dtype=np.uint64))
    filt = BitmapFilter(16)
    filt.add(5, filt.bitmap(fmix64(b)), int(b.size))
    filt.add(6, filt.bitmap(fmix64(a)), int(a.size))
    keep = filt.may_match(np.array([5, 6]), filt.bitmap(fmix64(a)), int(a.size), 0.3)
    assert keep.tolist() == [False, True]


def test_c_and_numpy_xor_popcount_agree() -> None:
    rng = np.random.default_rng(3)
    table = rng.integers(0, 2**63, (40, 32), dtype=np.uint64)
    query = rng.integers(0, 2**63, 32, dtype=np.uint64)
    rows = np.array([0, 39, 7, 7], dtype=np.int64)
    expected = [sum(bin(int(x) ^ int(y)).count("1") for x, y in zip(table[r], query,
                                                                    strict=True))
                for r in rows]
    assert kernels.xor_popcount_numpy(table, rows, query).tolist() == expected
    assert kernels.xor_popcount(table, rows, query).tolist() == expected


def test_expiry_drops_whole_chunks_only() -> None:
    filt = BitmapFilter(8)
    bitmap = filt.bitmap(fmix64(np.arange(10, dtype=np.uint64)))
    for number in (0, CHUNK - 1, CHUNK, 2 * CHUNK + 3):
        filt.add(number, bitmap, 10)
    filt.release_before(CHUNK + 5)  # chunk 1 still holds live documents
    assert sorted(filt._chunks) == [1, 2]
    filt.release_before(2 * CHUNK)
    assert sorted(filt._chunks) == [2]


def test_sizes_follow_the_threshold_and_bad_sizes_are_refused() -> None:
    assert auto_bits(0.3) == 0 and auto_bits(0.5) == 14 and auto_bits(0.69) == 14
    assert auto_bits(0.7) == 14 and auto_bits(1.0) == 14 and auto_bits(0.49) == 0
    assert DetectorConfig(threshold=0.8).effective_bitmap_bits == 14
    assert DetectorConfig(threshold=0.3, bitmap_bits=12).effective_bitmap_bits == 12
    with pytest.raises(ValueError, match="bitmap_bits"):
        DetectorConfig(bitmap_bits=40)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sets(st.integers(0, 5000), max_size=300), min_size=1, max_size=12),
       st.sets(st.integers(0, 5000), max_size=300), st.sampled_from([6, 8, 14]),
       st.sampled_from([0.3, 0.5, 0.8, 1.0]), st.integers(0, 2))
def test_may_match_in_c_equals_numpy(
    docs: list[set[int]], query: set[int], bits: int, threshold: float, spread: int,
) -> None:
    """The one-pass C test keeps exactly the documents numpy keeps, over one chunk and over
    several (documents numbered ``spread`` chunks apart)."""
    filt = BitmapFilter(bits)
    numbers = []
    for i, d in enumerate(docs):
        number = i * (1 + spread * CHUNK)
        filt.add(number, filt.bitmap(fmix64(np.array(sorted(d), dtype=np.uint64))), len(d))
        numbers.append(number)
    q = filt.bitmap(fmix64(np.array(sorted(query), dtype=np.uint64)))
    got = filt.may_match(np.array(numbers), q, max(1, len(query)), threshold)
    saved = kernels._C
    try:
        kernels._C = None
        want = filt.may_match(np.array(numbers), q, max(1, len(query)), threshold)
    finally:
        kernels._C = saved
    assert got.dtype == want.dtype == np.bool_
    assert got.tolist() == want.tolist()
