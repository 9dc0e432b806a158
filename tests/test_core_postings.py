"""PostingIndex (LSM of CSR blocks) against a naive dict-of-lists reference.

The detector's decisions depend on how many of an item's prefix keys each earlier
document shares, which it asks with :meth:`PostingIndex.count`; the reference counts the
same from a dict of lists, under random adds, releases and counts over random ranges.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndd_stream.core import kernels, postings
from ndd_stream.core.postings import PostingIndex


class _Reference:
    """What the index must return: key -> document numbers, with expiry by number."""

    def __init__(self) -> None:
        self.by_key: defaultdict[int, list[int]] = defaultdict(list)
        self.base = 0
        self.end = 0

    def add(self, keys: list[int]) -> int:
        number = self.end
        self.end += 1
        for k in keys:
            self.by_key[k].append(number)
        return number

    def count(self, keys: list[int], first: int, n: int) -> list[int]:
        out = [0] * n
        for k in set(keys):
            for d in self.by_key.get(k, ()):
                if d >= self.base and first <= d < first + n:
                    out[d - first] += 1
        return out

    def release_before(self, number: int) -> None:
        self.base = min(max(number, self.base), self.end)


_key = st.integers(min_value=0, max_value=40) | st.integers(min_value=0, max_value=2**32 - 1)
_op = st.one_of(
    st.tuples(st.just("add"), st.lists(_key, max_size=30)),
    st.tuples(st.just("count"), st.lists(_key, max_size=30), st.integers(-2, 3),
              st.integers(0, 200)),
    st.tuples(st.just("release"), st.integers(min_value=0, max_value=8)),
)


def _counts(index: PostingIndex, keys: list[int], first: int, n: int) -> list[int]:
    """``count`` as the detector calls it: sorted distinct keys."""
    got = index.count(np.unique(np.array(keys, dtype=np.uint32)), first, n)
    assert got.dtype == np.int32 and got.size == n
    return [int(c) for c in got]


def _check(ops: list[tuple[str, Any]], distinct: bool = False) -> PostingIndex:
    """``distinct``: each document's keys once (as the detector adds them; a dense row
    counts a document once however many postings it has under the key)."""
    index, ref = PostingIndex(), _Reference()
    for op, *args in ops:
        if op == "add":
            keys = sorted(set(args[0])) if distinct else list(args[0])
            assert index.add(np.array(keys, dtype=np.uint32)) == ref.add(keys)
        elif op == "count":
            keys, shift, n = list(args[0]), int(args[1]), int(args[2])
            first = max(0, ref.base + shift)  # around the base: below it counts are 0
            assert _counts(index, keys, first, n) == ref.count(keys, first, n)
        else:
            step = int(args[0])
            index.release_before(ref.base + step)
            ref.release_before(ref.base + step)
        assert index.base == ref.base and index.end == ref.end
    everything = sorted(ref.by_key)
    assert _counts(index, everything, 0, ref.end) == ref.count(everything, 0, ref.end)
    return index


@settings(max_examples=300, deadline=None)
@given(st.lists(_op, max_size=120))
def test_count_matches_reference(ops: list[tuple[str, Any]]) -> None:
    _check(ops)


@settings(max_examples=60, deadline=None)
@given(st.lists(_op, max_size=200))
def test_count_matches_reference_with_tiny_blocks(ops: list[tuple[str, Any]]) -> None:
    """With a tiny merge cap, blocks stop merging early and straddle releases often."""
    saved = postings._MIN_CAP
    postings._MIN_CAP = 8
    try:
        _check(ops)
    finally:
        postings._MIN_CAP = saved


def test_blocks_expire_and_stay_few() -> None:
    """Many documents: O(log n) + cap-bound blocks, and releasing drops whole blocks."""
    rng = np.random.default_rng(7)
    index = PostingIndex()
    for _ in range(3000):
        index.add(np.unique(rng.integers(0, 5000, size=60, dtype=np.uint32)))
    assert index.block_count <= 2 * 12 + 10
    held = len(index)
    index.release_before(2000)
    assert len(index) < held
    counts = index.count(np.arange(5000, dtype=np.uint32), 0, 3000)
    assert not counts[:2000].any() and counts[2000:].all()
    index.release_before(3000)
    assert len(index) == 0 and index.nbytes == 0
    assert not index.count(np.arange(10, dtype=np.uint32), 0, 3000).any()


def test_prepare_readies_every_block_without_changing_counts() -> None:
    rng = np.random.default_rng(11)
    index = PostingIndex()
    docs = [np.unique(rng.integers(0, 3000, size=80, dtype=np.uint32)) for _ in range(700)]
    for keys in docs:
        index.add(keys)
    assert not index.prepared  # blocks are prepared at their first count
    index.prepare()
    assert index.prepared
    probe = np.unique(rng.integers(0, 3000, size=400, dtype=np.uint32))
    expected = [np.intersect1d(keys, probe).size for keys in docs]
    assert index.count(probe, 0, 700).tolist() == expected
    index.add(np.arange(5, dtype=np.uint32))  # a new block: prepared at its first count
    assert not index.prepared
    assert index.count(probe, 0, 700).tolist() == expected
    assert index.prepared


def test_no_block_spans_more_documents_than_its_2_byte_ids_can_number() -> None:
    """Posting ids are uint16 relative to a block's first document: merges must stop at
    MAX_SPAN documents even when the postings cap would allow more (here: documents of one
    key each, so 70k documents are only 70k postings), and counts stay exact across it."""
    saved = postings.MAX_SPAN
    postings.MAX_SPAN = 1 << 8  # the same rule at a size a test can afford
    try:
        index = PostingIndex()
        for n in range(2_000):
            index.add(np.array([n % 3], dtype=np.uint32))
        spans = [b.hi - b.lo for b in index._blocks]
        assert max(spans) <= postings.MAX_SPAN
        assert sum(b.size for b in index._blocks) == 2_000
        counts = index.count(np.array([1], dtype=np.uint32), 0, 2_000)
        assert counts.tolist() == [1 if n % 3 == 1 else 0 for n in range(2_000)]
    finally:
        postings.MAX_SPAN = saved
    index = PostingIndex()  # the real limit, with ids near it
    for _ in range(70_000):
        index.add(np.array([5], dtype=np.uint32))
    assert max(b.hi - b.lo for b in index._blocks) <= 1 << 16
    assert index.count(np.array([5], dtype=np.uint32), 0, 70_000).sum() == 70_000


def _check_held_arrays(index: PostingIndex) -> None:
    """A counted block holds its keys and offsets in its C Block only, and nbytes counts
    every array held once."""
    for b in index._blocks:
        if b.args is not None and not isinstance(b.args, kernels.BlockArgs):
            assert b.ukeys is None and b.offs is None
            want = b.ids.nbytes + kernels.lookup_nbytes(b.args)
        else:
            ukeys, offs = b.csr()
            want = b.ids.nbytes + ukeys.nbytes + offs.nbytes
            if b.args is not None:
                want += kernels.lookup_nbytes(b.args)
        assert b.nbytes == want + (0 if b.dense is None else b.dense.nbytes)


@settings(max_examples=150, deadline=None)
@given(st.lists(_op, max_size=200), st.sampled_from([(1 << 16, 8), (8, 8), (8, 1 << 16)]))
def test_counted_blocks_with_dense_rows_merge_from_their_c_blocks(
    ops: list[tuple[str, Any]], limits: tuple[int, int],
) -> None:
    """Counts between adds make the blocks' C Blocks (their keys and offsets then released:
    the Block's entries hold both), so later merges read Blocks; with dense rows from 2
    documents on (so that merged blocks hold dense keys, their starts in the Block's row
    table), a tiny merge cap and a tiny span cap (blocks that stop merging at it): the same
    counts as the reference."""
    saved = kernels.DENSE_MIN_SPAN, postings._MIN_CAP, postings.MAX_SPAN
    kernels.DENSE_MIN_SPAN = 2
    postings._MIN_CAP, postings.MAX_SPAN = limits
    try:
        index = _check(ops, distinct=True)
        _check_held_arrays(index)
        assert max((b.hi - b.lo for b in index._blocks), default=0) <= postings.MAX_SPAN
    finally:
        kernels.DENSE_MIN_SPAN, postings._MIN_CAP, postings.MAX_SPAN = saved


def _everything(facts: kernels.Facts, index: PostingIndex, keys: list[int]) -> list[int]:
    """candidates() of every document with a posting under ``keys`` (a filter that keeps
    any count above 0)."""
    probe = np.unique(np.array(keys, dtype=np.uint32))
    got = index.candidates(probe, 0, index.end, facts, 1 << 20, 0, 0, (0, 0), (0, 0))
    return [int(x) for x in got]


@pytest.mark.skipif(kernels.IMPLEMENTATION != "c", reason="C kernels not built")
@pytest.mark.parametrize("how", ["use_numpy", "no_module"])
def test_kernels_switched_off_after_blocks_were_made(
    how: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernels switched off after the index made C Blocks (their keys and offsets
    released): by ``use_numpy`` (the no_kernels setting) or with the module gone only (as
    tests do: candidates() then falls back to count()). The blocks get their arrays back
    from the Blocks; counts, candidates, merges and expiry go on as before."""
    monkeypatch.setattr(kernels, "DENSE_MIN_SPAN", 2)
    rng = np.random.default_rng(5)
    index, ref = PostingIndex(), _Reference()
    facts = kernels.Facts()
    docs = [sorted(set(rng.integers(0, 60, 25).tolist())) for _ in range(400)]
    probe = list(range(0, 60, 3))
    for keys in docs[:300]:
        index.add(np.array(keys, dtype=np.uint32))
        ref.add(keys)
        facts.append(0, 0, 0, 0)
        _counts(index, probe, 0, ref.end)  # prepares every block
    assert any(b.dense is not None for b in index._blocks)
    assert all(b.ukeys is None for b in index._blocks)
    before = _everything(facts, index, probe)
    if how == "use_numpy":
        monkeypatch.setattr(kernels, "IMPLEMENTATION", kernels.IMPLEMENTATION)
        monkeypatch.setattr(kernels, "_C", kernels._C)
        kernels.use_numpy()
    else:
        monkeypatch.setattr(kernels, "_C", None)
    assert _everything(facts, index, probe) == before
    assert all(b.ukeys is not None and (b.args is None or isinstance(b.args, kernels.BlockArgs))
               for b in index._blocks)
    for keys in docs[300:]:
        index.add(np.array(keys, dtype=np.uint32))
        ref.add(keys)
        facts.append(0, 0, 0, 0)
        assert _counts(index, probe, 0, ref.end) == ref.count(probe, 0, ref.end)
    index.release_before(150)
    ref.release_before(150)
    everything = list(range(60))
    assert _counts(index, everything, 0, ref.end) == ref.count(everything, 0, ref.end)
    _check_held_arrays(index)
