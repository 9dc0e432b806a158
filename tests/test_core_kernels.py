"""The C kernels (ndd_stream/core/_kernels.c) give exactly what their numpy versions give.

The C module is optional at install time; with NDD_REQUIRE_KERNELS=1 (CI sets it) its
absence is a failure, otherwise the C-side tests skip and only numpy is checked.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import weakref

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndd_stream.core import kernels
from ndd_stream.core.detector import Detector, DetectorConfig
from ndd_stream.core.document import Document

try:
    from ndd_stream.core import _kernels  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the install
    _kernels = None

needs_c = pytest.mark.skipif(_kernels is None, reason="C kernels not built (no compiler?)")


def test_the_c_kernels_are_built_where_required() -> None:
    if os.environ.get("NDD_REQUIRE_KERNELS") == "1":
        assert _kernels is not None, "NDD_REQUIRE_KERNELS=1 but ndd_stream.core._kernels is missing"
        assert kernels.IMPLEMENTATION == "c"


def _block(postings: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR arrays (ukeys, offs, ids) of (key, id) postings, as PostingIndex builds them."""
    keys = np.array([k for k, _ in postings], dtype=np.uint32)
    ids = np.array([i for _, i in postings], dtype=np.uint16)
    order = np.argsort(keys, kind="stable")
    keys, ids = keys[order], ids[order]
    ukeys, starts = np.unique(keys, return_index=True)
    offs = np.append(starts, keys.size).astype(np.uint32)
    return ukeys, offs, ids


def _reference(postings: list[tuple[int, int]], lo: int, probe: set[int], base: int,
               n: int) -> list[int]:
    counts = [0] * n
    for key, i in postings:
        pos = lo + i - base
        if key in probe and 0 <= pos < n:
            counts[pos] += 1
    return counts


posting_lists = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 40)), max_size=300)


@settings(max_examples=300, deadline=None)
@given(posting_lists, st.sets(st.integers(0, 70), max_size=40), st.integers(0, 20),
       st.integers(0, 30), st.integers(0, 60))
def test_count_block_counts_each_matching_posting_once(
    postings: list[tuple[int, int]], probe: set[int], lo: int, base: int, n: int
) -> None:
    ukeys, offs, ids = _block(postings)
    keys = np.array(sorted(probe), dtype=np.uint32)
    expected = _reference(postings, lo, probe, base, n)
    implementations = [kernels.count_block_numpy]
    if _kernels is not None:
        implementations.append(kernels.count_block)
    for count in implementations:
        counts = np.zeros(n, dtype=np.int32)
        total = count(ukeys, offs, ids, lo, keys, base, counts)
        assert counts.tolist() == expected, count
        assert total == sum(expected)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 50)), max_size=400),
       st.integers(0, 2**16))
def test_count_block_finds_keys_spread_over_the_whole_range(
    postings: list[tuple[int, int]], seed: int
) -> None:
    """Keys anywhere in 32 bits (the directory's buckets), probes half present, half not."""
    rng = np.random.default_rng(seed)
    present = sorted({k for k, _ in postings})
    chosen = {k for k in present if rng.random() < 0.5}
    chosen |= set(rng.integers(0, 2**32, size=20, dtype=np.uint64).tolist())
    ukeys, offs, ids = _block(postings)
    keys = np.array(sorted(chosen), dtype=np.uint32)
    expected = _reference(postings, 0, chosen, 0, 51)
    for count in [kernels.count_block_numpy] + ([kernels.count_block] if _kernels else []):
        counts = np.zeros(51, dtype=np.int32)
        count(ukeys, offs, ids, 0, keys, 0, counts)
        assert counts.tolist() == expected, count


def _crowded_keys(draw_keys: list[int], tops: list[int]) -> list[int]:
    """Keys made to share their top bits: each drawn key's low 20 bits under one of a few
    tops, so buckets of the lookup directory hold many keys (or none)."""
    return [(tops[k % len(tops)] << 20) | (k & 0xFFFFF) for k in draw_keys]


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.data(), st.integers(0, 4), st.integers(0, 7), st.booleans())
def test_block_lookup_edges_equal_the_reference(data: st.DataObject, shape: int, pick: int,
                                                crowd: bool) -> None:
    """The C block's own lookup (interleaved entries, a directory of ~2 keys per bucket, a
    dense key's row in its entry) finds exactly the keys of the block, including an empty
    block, one key, keys sharing their top bits (one crowded bucket, empty ones around),
    the first and the last key (0 and 2**32 - 1), a dense key after a sparse one and the
    reverse, and probes between and beyond every key."""
    n_keys = [0, 1, 2, 9, 300][shape]
    raw = data.draw(st.lists(st.integers(0, 2**32 - 1), min_size=n_keys, max_size=n_keys))
    if crowd:
        raw = _crowded_keys(raw, data.draw(st.lists(st.integers(0, 4095), min_size=1,
                                                    max_size=3)))
    raw += data.draw(st.lists(st.sampled_from([0, 1, 2**32 - 2, 2**32 - 1]), max_size=2))
    keys = sorted(set(raw))
    postings = sorted({(k, i) for k in keys
                       for i in data.draw(st.sets(st.integers(0, 200), min_size=1, max_size=6))})
    span = 201
    ukeys, offs, ids = _block(postings)
    # every key dense, none, or a drawn subset: dense/sparse neighbours both ways
    mode = pick % 3
    heavy = np.array([i for i, k in enumerate(ukeys.tolist())
                      if mode == 1 or (mode == 2 and (k * 2654435761 + pick) & 8)], dtype=np.int64)
    words = kernels.dense_words(span)
    rowmap = np.full(ukeys.size, -1, dtype=np.int32)
    rowmap[heavy] = np.arange(heavy.size, dtype=np.int32)
    rows = kernels.dense_rows(offs, ids, heavy, span)
    block = _kernels.Block(ukeys, offs, ids, 0, rowmap if heavy.size else None,
                           rows if heavy.size else None, words)
    # entries and two sentinels, the directory, the dense keys' postings starts (1 at least)
    assert block.lookup_nbytes == ((ukeys.size + 2) * 8 + ((1 << block.bits) + 1) * 4
                                   + max(1, heavy.size) * 4)
    assert ukeys.size <= 2 << block.bits  # at most ~2 keys per bucket on average
    # probes: the block's keys (some), their neighbours +-1, and random keys
    near = {k + d for k in keys for d in (-1, 0, 1) if 0 <= k + d < 2**32}
    probe = set(data.draw(st.lists(st.sampled_from(sorted(near)), max_size=40))) if near else set()
    probe |= set(data.draw(st.lists(st.integers(0, 2**32 - 1), max_size=10)))
    pr = np.array(sorted(probe), dtype=np.uint32)
    expected = _reference(postings, 0, probe, 0, span)
    for threads in (1, 2):
        counts = np.zeros(span, dtype=np.int32)
        assert _kernels.count_blocks([block], pr, 0, counts, threads) == sum(expected)
        assert counts.tolist() == expected
    plain = np.zeros(span, dtype=np.int32)
    kernels.count_block_numpy(ukeys, offs, ids, 0, pr, 0, plain)
    assert plain.tolist() == expected


@needs_c
def test_count_blocks_rejects_arrays_of_the_wrong_width() -> None:
    ukeys, offs, ids = _block([(1, 0), (2, 1)])
    counts = np.zeros(4, dtype=np.int32)

    def call(*block: object, out: np.ndarray = counts) -> object:
        """The checks run where the block is made, once, not at every count."""
        return _kernels.count_blocks([_kernels.Block(*block)], ukeys, 0, out, 1)

    with pytest.raises(ValueError, match="offs"):
        call(ukeys, offs[:-1], ids, 0, None, None, 4)
    with pytest.raises(ValueError, match="counts"):
        call(ukeys, offs, ids, 0, None, None, 4, out=np.zeros(3, dtype=np.int8))
    with pytest.raises(ValueError, match="within ids"):  # fewer ids than offsets say
        call(ukeys, offs, ids[:1], 0, None, None, 4)
    with pytest.raises(ValueError, match="offs"):  # 8-byte offsets: the old layout
        call(ukeys, offs.astype(np.int64), ids, 0, None, None, 4)
    with pytest.raises(ValueError, match="rowmap"):  # one rowmap entry per key
        call(ukeys, offs, ids, 0, np.zeros(1, dtype=np.int32), np.zeros(4, dtype=np.uint64), 4)
    with pytest.raises(ValueError, match="rowmap points past"):  # row 1 of one row
        call(ukeys, offs, ids, 0, np.array([-1, 1], dtype=np.int32),
             np.zeros(4, dtype=np.uint64), 4)
    with pytest.raises(ValueError, match="two keys one dense row"):
        call(ukeys, offs, ids, 0, np.array([0, 0], dtype=np.int32),
             np.zeros(4, dtype=np.uint64), 4)
    with pytest.raises(TypeError, match="Block"):  # the old 9-tuple is no block
        _kernels.count_blocks([(ukeys, offs, ids, None, 1, 0, None, None, 4)], ukeys, 0,
                              counts, 1)
    held_keys, held_offs = ukeys.copy(), offs.copy()
    gone = [weakref.ref(held_keys), weakref.ref(held_offs)]
    block = _kernels.Block(held_keys, held_offs, ids, lo=7)
    assert (block.lo, block.words, block.dense, block.nkeys) == (7, 1, None, 2)
    assert block.ids is ids  # held by the block, not a copy per count
    del held_keys, held_offs  # not held: its entries say both (8 bytes a key fewer)
    assert [ref() for ref in gone] == [None, None]
    keys, offs_again, _ = kernels.block_csr(block)
    assert keys.tolist() == ukeys.tolist() and offs_again.tolist() == offs.tolist()
    with pytest.raises(ValueError, match="nkeys"):
        block.csr(np.empty(1, dtype=np.uint32), np.empty(3, dtype=np.uint32))
    # its own lookup: 2 entries and 2 sentinels (8 bytes each), a directory of 2**bits + 1
    # positions and one (unused) dense start
    assert block.lookup_nbytes == 4 * 8 + ((1 << block.bits) + 1) * 4 + 4


codes = st.lists(st.integers(0, 2**64 - 1), max_size=200).map(
    lambda xs: np.unique(np.array(xs, dtype=np.uint64)))


@settings(max_examples=300, deadline=None)
@given(codes, codes, st.lists(st.integers(0, 2**64 - 1), max_size=50))
def test_intersection_is_the_size_of_the_set_intersection(
    a: np.ndarray, b: np.ndarray, shared: list[int]
) -> None:
    a = np.union1d(a, np.array(shared, dtype=np.uint64))
    b = np.union1d(b, np.array(shared, dtype=np.uint64))
    expected = len(set(a.tolist()) & set(b.tolist()))
    assert kernels.intersection_numpy(a, b) == expected
    if _kernels is not None:
        assert _kernels.intersection(a, b) == expected
        # 4-byte keys (merge_csr sizes a merged block with them)
        a32 = np.unique((a & np.uint64(0xFFFFFFFF)).astype(np.uint32))
        b32 = np.unique((b & np.uint64(0xFFFFFFFF)).astype(np.uint32))
        assert _kernels.intersection(a32, b32, 4) == len(set(a32.tolist()) & set(b32.tolist()))
        with pytest.raises(ValueError, match="width"):
            _kernels.intersection(a32, b32, 2)


def test_the_detector_decides_the_same_with_and_without_the_c_kernels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from newsgen import items as news_items

    from ndd_stream.core.items import parse_timestamp

    items = news_items(600, seed=5, step_s=240.0)  # ~80 h: hours expire too

    def run() -> list[tuple[str, str | None, float]]:
        det = Detector(DetectorConfig(threshold=0.5))
        out = []
        for it in items:
            ts = parse_timestamp(it["timestamp"])
            assert ts is not None
            d = det.decide(Document(it["id"], it["channel"], it["channel"], ts, it["text"]))
            out.append((d.status.value, d.duplicate_of, d.similarity))
        return out

    with_c = run()
    monkeypatch.setattr(kernels, "_C", None)
    assert run() == with_c
    assert any(status != "unique" for status, _, _ in with_c)


blocks = st.lists(st.tuples(st.integers(0, 40) | st.integers(0, 2**32 - 1),
                            st.integers(0, 300)), max_size=200)


@settings(max_examples=300, deadline=None)
@given(blocks, blocks, st.integers(0, 65_535 - 300))
def test_merge_csr_equals_a_stable_sort_of_both_blocks(
    a: list[tuple[int, int]], b: list[tuple[int, int]], shift: int
) -> None:
    """Merging two blocks keeps every posting once, keys ascending and distinct, and under a
    shared key the older block's postings first (the order a stable sort gives)."""
    ak, ao, ai = _block(a)
    bk, bo, bi = _block(b)
    by_key = sorted([(k, 0, n, i) for n, (k, i) in enumerate(a)]
                    + [(k, 1, n, i + shift) for n, (k, i) in enumerate(b)])
    expected = _block([(k, i) for k, _, _, i in by_key])
    implementations = [kernels.merge_csr_numpy] + ([kernels.merge_csr] if _kernels else [])
    for merge in implementations:
        keys, offs, ids = merge(ak, ao, ai, bk, bo, bi, shift)
        assert (keys.dtype, offs.dtype, ids.dtype) == (np.uint32, np.uint32, np.uint16)
        assert keys.tolist() == expected[0].tolist(), merge
        assert offs.tolist() == expected[1].tolist(), merge
        assert ids.tolist() == expected[2].tolist(), merge


@needs_c
def test_merge_csr_refuses_ids_that_would_not_fit_16_bits() -> None:
    ak, ao, ai = _block([(1, 10)])
    bk, bo, bi = _block([(1, 65_000)])
    keys = np.empty(1, dtype=np.uint32)
    offs = np.empty(2, dtype=np.uint32)
    ids = np.empty(2, dtype=np.uint16)
    with pytest.raises(ValueError, match="fit"):
        _kernels.merge_csr((ak, ao, ai), (bk, bo, bi), 1_000, keys, offs, ids)
    with pytest.raises(ValueError, match="every posting"):
        _kernels.merge_csr((ak, ao, ai), (bk, bo, bi), 0, keys, offs, ids[:1])
    with pytest.raises(ValueError, match="fit"):  # the same read from Blocks
        _kernels.merge_csr(_kernels.Block(ak, ao, ai, 0), _kernels.Block(bk, bo, bi, 0),
                           1_000, keys, offs, ids)
    with pytest.raises(TypeError, match="Block or"):
        _kernels.merge_csr((ak, ao), (bk, bo, bi), 0, keys, offs, ids)
    with pytest.raises(TypeError, match="not initialised"):
        _kernels.merge_csr(_kernels.Block.__new__(_kernels.Block), (bk, bo, bi), 0, keys,
                           offs, ids)


@settings(max_examples=300, deadline=None)
@given(blocks, blocks, st.integers(0, 65_535 - 300), st.integers(0, 7), st.integers(0, 3),
       st.integers(0, 3))
def test_merging_c_blocks_equals_merging_their_arrays(
    a: list[tuple[int, int]], b: list[tuple[int, int]], shift: int, pick: int,
    a_form: int, b_form: int,
) -> None:
    """merge_blocks reads a side from its C Block's lookup entries (the index releases a
    block's keys and offsets once its Block is made): each side as arrays, a Block, a Block
    with some keys dense (their starts in the per-row table, dense and sparse keys
    neighbouring both ways), or every key dense; empty blocks too. The same merge as the
    numpy one of the arrays, and block_csr rebuilds the arrays exactly."""
    arrays = [_block(a), _block(b)]
    expected = kernels.merge_csr_numpy(*arrays[0], *arrays[1], shift)
    sides: list[kernels.Csr | kernels.BlockArgs] = []
    for (ukeys, offs, ids), form in zip(arrays, (a_form, b_form), strict=True):
        if form == 0 or _kernels is None:
            sides.append((ukeys, offs, ids))
            continue
        heavy = (np.arange(ukeys.size, dtype=np.int64) if form == 3 else
                 _heavy(ukeys, pick) if form == 2 else np.zeros(0, dtype=np.int64))
        rowmap = np.full(ukeys.size, -1, dtype=np.int32)
        rowmap[heavy] = np.arange(heavy.size, dtype=np.int32)
        rows = kernels.dense_rows(offs, ids, heavy, 301)
        block = kernels.make_block(ukeys.copy(), offs.copy(), ids, 0,
                                   rowmap if heavy.size else None, rows, rows.shape[1])
        again = kernels.block_csr(block)
        assert again[0].tolist() == ukeys.tolist() and again[1].tolist() == offs.tolist()
        sides.append(block)
    got = kernels.merge_blocks(sides[0], sides[1], shift)
    for have, want in zip(got, expected, strict=True):
        assert have.dtype == want.dtype and have.tolist() == want.tolist()


def _heavy(ukeys: np.ndarray, pick: int) -> npt.NDArray[np.int64]:
    """The positions of the keys _dense_block holds as bitmap rows."""
    return np.array([i for i, k in enumerate(ukeys.tolist()) if (k * 2654435761 + pick) & 4],
                    dtype=np.int64)


def _dense_block(pairs: set[tuple[int, int]], span: int, lo: int, pick: int
                 ) -> tuple[kernels.BlockArgs, list[tuple[int, int]]]:
    """A block of distinct (key, id) postings whose keys with an odd ``pick``-hash are
    held as bitmap rows (any subset of keys may be dense: the counts must not change)."""
    postings = sorted(pairs)
    ukeys, offs, ids = _block(postings)
    heavy = _heavy(ukeys, pick)
    words = kernels.dense_words(span)
    rowmap = np.full(ukeys.size, -1, dtype=np.int32)
    rowmap[heavy] = np.arange(heavy.size, dtype=np.int32)
    rows = kernels.dense_rows(offs, ids, heavy, span)
    assert rows.shape == (heavy.size, words)
    return kernels.make_block(ukeys, offs, ids, lo, rowmap, rows, words), postings


block_pairs = st.sets(st.tuples(st.integers(0, 80), st.integers(0, 1100)), max_size=500)


@settings(max_examples=150, deadline=None)
@given(st.lists(block_pairs, min_size=1, max_size=4), st.sets(st.integers(0, 90), max_size=60),
       st.integers(0, 2000), st.integers(1, 3000), st.integers(0, 7), st.integers(1, 3))
def test_count_blocks_with_dense_rows_and_threads_equals_the_reference(
    per_block: list[set[tuple[int, int]]], probe: set[int], base: int, n: int, pick: int,
    threads: int,
) -> None:
    """Dense keys counted by carry-save adders, sparse ones by postings, blocks shared out
    among threads: the same counts as counting every posting (and as numpy)."""
    keys = np.array(sorted(probe), dtype=np.uint32)
    expected = [0] * n
    args = []
    lo = 0
    for pairs in per_block:
        block, postings = _dense_block(pairs, 1101, lo, pick)
        args.append(block)
        for pos, c in enumerate(_reference(postings, lo, probe, base, n)):
            expected[pos] += c
        lo += 1101
    either = np.zeros(n, dtype=np.int32)  # C when built, else numpy (postings only)
    assert kernels.count_blocks(args, keys, base, either) == sum(expected)
    assert either.tolist() == expected
    if _kernels is not None:
        counts = np.zeros(n, dtype=np.int32)
        total = _kernels.count_blocks(args, keys, base, counts, threads)
        assert counts.tolist() == expected
        assert total == sum(expected)
    plain = np.zeros(n, dtype=np.int32)
    for b in args:
        kernels.count_block_numpy(*kernels.block_csr(b), b.lo, keys, base, plain)
    assert plain.tolist() == expected


def _threaded_case(seed: int) -> tuple[list[kernels.BlockArgs], npt.NDArray[np.uint32], list[int]]:
    """Three blocks, 200 probe keys (enough for several count threads), some keys dense."""
    rng = np.random.default_rng(seed)
    args, expected, lo = [], [0] * 3303, 0
    probe = set(rng.integers(0, 300, 200).tolist())
    for _ in range(3):
        pairs = {(int(k), int(i)) for k, i in zip(rng.integers(0, 300, 1500),
                                                  rng.integers(0, 1101, 1500), strict=True)}
        block, postings = _dense_block(pairs, 1101, lo, 3)
        args.append(block)
        for pos, c in enumerate(_reference(postings, lo, probe, 0, 3303)):
            expected[pos] += c
        lo += 1101
    return args, np.array(sorted(probe), dtype=np.uint32), expected


def _exit_code_of(pid: int, seconds: float = 60) -> int:
    """The forked child's exit code; the test fails (and the child is killed) if it has not
    exited within ``seconds``: a count waiting for threads that do not exist hangs."""
    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's threaded count hung")
        time.sleep(0.05)  # bounded by the deadline above


@pytest.mark.skipif(_kernels is None or not hasattr(os, "fork"), reason="C kernels and fork")
def test_count_workers_are_started_anew_after_fork() -> None:
    """The count's worker threads stay between counts; a forked child has none of them, so
    its threaded counts must start new ones instead of waiting for the parent's."""
    args, keys, expected = _threaded_case(5)
    counts = np.zeros(3303, dtype=np.int32)
    assert _kernels.count_blocks(args, keys, 0, counts, 3) == sum(expected)  # starts workers
    assert counts.tolist() == expected
    pid = os.fork()
    if pid == 0:  # the child: exit 0 when its threaded count is right
        again = np.zeros(3303, dtype=np.int32)
        _kernels.count_blocks(args, keys, 0, again, 3)
        os._exit(0 if again.tolist() == expected else 1)
    assert _exit_code_of(pid) == 0


@pytest.mark.skipif(_kernels is None or not hasattr(os, "fork"), reason="C kernels and fork")
def test_counts_after_waking_the_workers_are_right_and_survive_fork() -> None:
    """wake_count_workers starts and wakes the workers ahead of a count (they poll for it,
    then sleep): counts after a wake, after a wake no count followed, and in a child forked
    while the parent's workers poll are all exact."""
    args, keys, expected = _threaded_case(13)
    for wake in (True, True, False):
        if wake:
            _kernels.wake_count_workers(3, 2000)
        counts = np.zeros(3303, dtype=np.int32)
        assert _kernels.count_blocks(args, keys, 0, counts, 3) == sum(expected)
        assert counts.tolist() == expected
    _kernels.wake_count_workers(3, 50_000)  # polling when the fork happens
    pid = os.fork()
    if pid == 0:
        _kernels.wake_count_workers(3, 2000)
        again = np.zeros(3303, dtype=np.int32)
        _kernels.count_blocks(args, keys, 0, again, 3)
        os._exit(0 if again.tolist() == expected else 1)
    assert _exit_code_of(pid) == 0


@pytest.mark.skipif(_kernels is None, reason="C kernels not built")
def test_threaded_counts_from_concurrent_callers_are_right() -> None:
    """One caller at a time owns the count workers; another caller meanwhile does every
    share itself. Both get exact counts."""
    args, keys, expected = _threaded_case(9)
    errors: list[str] = []

    def count_many() -> None:
        for _ in range(40):
            counts = np.zeros(3303, dtype=np.int32)
            _kernels.count_blocks(args, keys, 0, counts, 3)
            if counts.tolist() != expected:
                errors.append("wrong counts")

    callers = [threading.Thread(target=count_many) for _ in range(3)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(60)
    assert not any(caller.is_alive() for caller in callers), "a threaded count hung"
    assert errors == []


@settings(max_examples=100, deadline=None)
@given(block_pairs, st.integers(0, 7))
def test_dense_rows_in_c_equal_numpy(pairs: set[tuple[int, int]], pick: int) -> None:
    block, _ = _dense_block(pairs, 1101, 0, pick)
    ukeys, offs, ids = kernels.block_csr(block)
    heavy = _heavy(ukeys, pick)
    c_rows = kernels.dense_rows(offs, ids, heavy, 1101)
    saved = kernels._C
    try:
        kernels._C = None
        np_rows = kernels.dense_rows(offs, ids, heavy, 1101)
    finally:
        kernels._C = saved
    assert np.array_equal(c_rows, np_rows)
    for row, key in zip(np_rows, heavy.tolist(), strict=True):
        bits = np.unpackbits(row.view(np.uint8), bitorder="little")
        assert np.flatnonzero(bits).tolist() == sorted(ids[offs[key]:offs[key + 1]].tolist())


def test_the_index_counts_the_same_with_dense_rows_and_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A window of 3,000 documents sharing frequent keys: PostingIndex.count with dense
    rows (C, one and two threads) equals the numpy posting count, also after expiry."""
    from ndd_stream.core import postings
    from ndd_stream.core.postings import PostingIndex

    monkeypatch.setattr(postings.ThreadChoice, "pick", lambda self, available: available)
    rng = np.random.default_rng(3)
    indexes = {threads: PostingIndex(threads) for threads in (1, 2)}
    for _ in range(3000):
        keys = np.concatenate([rng.integers(0, 300, 40), rng.integers(0, 2**32, 100)])
        for index in indexes.values():
            index.add(np.unique(keys).astype(np.uint32))
    for index in indexes.values():
        index.release_before(700)
    probe = np.unique(np.concatenate([rng.integers(0, 300, 120),
                                      rng.integers(0, 2**32, 50)])).astype(np.uint32)
    expected = np.zeros(2300, dtype=np.int32)
    for b in indexes[1]._blocks:
        kernels.count_block_numpy(*b.csr(), b.ids, b.lo, probe, 700, expected)
    for index in indexes.values():
        assert np.array_equal(index.count(probe, 700, 2300), expected)
        if kernels.IMPLEMENTATION == "c":
            assert any(b.dense is not None for b in index._blocks)
    sparse = PostingIndex(1, dense_fraction=0.0)  # the setting's 0: posting lists only
    rng = np.random.default_rng(3)
    for _ in range(3000):
        keys = np.concatenate([rng.integers(0, 300, 40), rng.integers(0, 2**32, 100)])
        sparse.add(np.unique(keys).astype(np.uint32))
    sparse.release_before(700)
    assert np.array_equal(sparse.count(probe, 700, 2300), expected)
    assert all(b.dense is None for b in sparse._blocks)


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 2**64 - 1), max_size=400), st.integers(0, 2**16),
       st.integers(0, 450), st.sampled_from([1, 3, 64]))
def test_order_prefix_in_c_selects_what_numpy_selects(
    values: set[int], seed: int, length: int, spread: int
) -> None:
    """The C prefix (class histogram + quickselect) is the numpy prefix (composite rank,
    argpartition, ties by the full mixed value) as a set, for few and many classes."""
    from ndd_stream.core.order import OrderVersion

    mixed = np.array(sorted(values), dtype=np.uint64)
    np.random.default_rng(seed).shuffle(mixed)
    length = min(length, mixed.size)
    shift = 64 - 8
    classes = np.random.default_rng(seed).integers(0, spread, 1 << 8).astype(np.uint8)
    version = OrderVersion(1, classes, shift)
    saved = kernels._C
    try:
        kernels._C = None
        expected = sorted(version.prefix(mixed, length).tolist())
    finally:
        kernels._C = saved
    key = sorted(zip(classes[mixed >> np.uint64(shift)].tolist(), mixed.tolist(), strict=True))
    assert expected == sorted(m for _, m in key[:length])
    assert sorted(version.prefix(mixed, length).tolist()) == expected


def test_available_cores_follow_a_cgroup_quota(tmp_path: os.PathLike[str]) -> None:
    from pathlib import Path

    cpu_max = Path(tmp_path) / "cpu.max"
    cpu_max.write_text("150000 100000\n")
    assert kernels._cgroup_cpus(str(cpu_max)) == 1
    cpu_max.write_text("max 100000\n")
    assert kernels._cgroup_cpus(str(cpu_max)) is None
    assert kernels._cgroup_cpus(str(Path(tmp_path) / "absent")) is None
    assert 1 <= kernels.available_cores() <= (os.cpu_count() or 1)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 40), st.integers(0, 30),
                          st.integers(0, 5), st.integers(0, 60)), max_size=80),
       st.integers(0, 3), st.integers(0, 40), st.integers(0, 30), st.integers(0, 5),
       st.integers(0, 60), st.integers(0, 8))
def test_count_filter_in_c_equals_numpy_and_the_definition(
    rows: list[tuple[int, int, int, int, int]], slack: int, needed: int, unindexed: int,
    hour: int, size: int, spare: int,
) -> None:
    """(count, needed, unindexed, hour, size) per document: both implementations keep
    exactly the documents the definition keeps, whatever spare capacity ``facts`` has."""
    n = len(rows)
    counts = np.array([r[0] for r in rows], dtype=np.int32)
    facts = kernels.Facts(n + spare)
    for _, need, unind, h, s in rows:
        facts.append(need, unind, h, s)
    hours, sizes = (hour, hour + 2), (size, size + 20)
    want = [i for i, (c, need, unind, h, s) in enumerate(rows)
            if c > 0 and c + slack >= max(needed, need) - max(unindexed, unind)
            and hours[0] <= h <= hours[1] and sizes[0] <= s <= sizes[1]]
    got = kernels.count_filter(counts, facts, slack, needed, unindexed, hours, sizes)
    assert got.tolist() == want
    saved = kernels._C
    try:
        kernels._C = None
        assert kernels.count_filter(counts, facts, slack, needed, unindexed, hours,
                                    sizes).tolist() == want
    finally:
        kernels._C = saved


@pytest.mark.parametrize("n", [1023, 1024, 1025, 3077])
def test_count_filter_across_chunk_and_word_boundaries(n: int) -> None:
    """The C filter works in chunks of 1,024 documents and collects 8 at a time: windows
    around and past those sizes keep exactly what numpy keeps, in ascending order."""
    rng = np.random.default_rng(n)
    counts = rng.integers(0, 4, n).astype(np.int32)
    facts = kernels.Facts(4)  # grown past its capacity on the way
    for need, unind, h, s in zip(rng.integers(0, 6, n).tolist(), rng.integers(0, 4, n).tolist(),
                                 rng.integers(0, 4, n).tolist(), rng.integers(0, 50, n).tolist(),
                                 strict=True):
        facts.append(need, unind, h, s)
    assert facts.table.shape[1] > n and facts.size.size == n
    args = (2, 3, 1, (1, 2), (10, 40))
    got = kernels.count_filter(counts, facts, *args)
    saved = kernels._C
    try:
        kernels._C = None
        want = kernels.count_filter(counts, facts, *args)
    finally:
        kernels._C = saved
    assert want.size > n // 20  # the case keeps some and drops some
    assert want.size < n
    assert got.tolist() == want.tolist()


def test_count_filter_rejects_facts_shorter_than_the_counts() -> None:
    if _kernels is None:
        pytest.skip("C kernels not built")
    with pytest.raises(ValueError, match="facts"):
        _kernels.count_filter(np.ones(5, dtype=np.int32), np.zeros((4, 3), dtype=np.int64), 3,
                              0, 1, 1, (0, 1), (0, 1), np.empty(5, dtype=np.int64))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=300), st.integers(6, 14))
def test_top_bits_in_c_equal_numpy(codes: list[int], bits: int) -> None:
    """The bitmap-filter bitmap and the order sketch's count (each distinct slot once, as
    numpy's fancy-index add counts it) are the same from C and numpy."""
    mixed = np.array(codes, dtype=np.uint64)
    shift = 64 - bits
    results = []
    saved = kernels._C
    try:
        for impl in (saved, None):
            kernels._C = impl
            counts = np.full(1 << bits, 5, dtype=np.uint32)
            kernels.top_bits_count(counts, mixed, shift)
            results.append((kernels.top_bits_bitmap(mixed, bits), counts))
    finally:
        kernels._C = saved
    (c_map, c_counts), (np_map, np_counts) = results
    assert np.array_equal(c_map, np_map)
    assert np.array_equal(c_counts, np_counts)
    slots = {c >> shift for c in codes}
    assert int(np.bitwise_count(np_map).sum()) == len(slots)
    assert int(np_counts.sum()) == 5 * (1 << bits) + len(slots)


def test_thread_choice_keeps_the_faster_and_tries_the_other() -> None:
    """One thread first, then the threads once; afterwards the faster per posting, the other
    every explore-th count, so a change of speed (a core gets busy) is noticed."""
    from ndd_stream.core.postings import ThreadChoice

    assert [ThreadChoice().pick(1) for _ in range(3)] == [1, 1, 1]
    choice = ThreadChoice(explore=4)
    seconds = {1: 1.0, 2: 0.6}  # per million postings: threads faster
    picks = []
    for _ in range(12):
        threads = choice.pick(2)
        picks.append(threads)
        choice.record(threads, seconds[threads], 1_000_000)
    assert picks[:2] == [1, 2]
    assert picks[2:] == [2, 1, 2, 2, 2, 1, 2, 2, 2, 1]  # every 4th pick tries one thread
    seconds = {1: 1.0, 2: 3.0}  # a busy core: threads now slower
    for _ in range(12):
        threads = choice.pick(2)
        picks.append(threads)
        choice.record(threads, seconds[threads], 1_000_000)
    # one more threaded count moves its average past one thread's; then one thread, and
    # the threads every 4th pick
    assert picks[12:] == [2, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2]


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 2**64 - 1), min_size=1, max_size=400), st.integers(0, 2**16),
       st.integers(1, 450), st.integers(0, 4), st.booleans(), st.sampled_from([1, 3, 64]))
def test_probe_keys_in_c_are_the_numpy_prefixes_and_keys(
    values: set[int], seed: int, length: int, versions: int, hash_order: bool, spread: int,
) -> None:
    """One C call: each version's prefix (as a set), the union's distinct keys ascending and
    its distinct codes, as OrderVersion.prefix and two sorted_unique compute them; with no
    version, the whole signature's keys. Codes sharing their top 32 bits included."""
    from ndd_stream.core.order import OrderVersion
    from ndd_stream.core.qgrams import sorted_unique

    if _kernels is None:
        pytest.skip("C kernels not built")
    rng = np.random.default_rng(seed)
    mixed = np.array(sorted(values), dtype=np.uint64)
    mixed[: mixed.size // 4] &= np.uint64(0xFFFFFFFF_000000FF)  # shared top 32 bits
    mixed = np.unique(mixed)
    rng.shuffle(mixed)
    length = min(length, mixed.size)
    shift = 64 - 8
    chosen = [OrderVersion(0, None, shift)] if hash_order else []
    chosen += [OrderVersion(i + 1, rng.integers(0, spread, 1 << 8).astype(np.uint8), shift)
               for i in range(versions)]
    found = kernels.probe_keys(mixed, [v.classes for v in chosen], shift, length)
    assert found is not None
    rows, keys, ncodes = found
    saved = kernels._C
    try:
        kernels._C = None
        want = [v.prefix(mixed, length) for v in chosen] if chosen else [mixed]
    finally:
        kernels._C = saved
    for row, prefix in zip(rows, want, strict=False):
        assert sorted(row.tolist()) == sorted(prefix.tolist())
    codes = sorted_unique(np.concatenate(want))
    assert ncodes == codes.size
    assert keys.dtype == np.uint32
    assert keys.tolist() == sorted_unique(codes >> np.uint64(32)).astype(np.uint32).tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=300))
def test_fmix64_in_c_equals_numpy(codes: list[int]) -> None:
    from ndd_stream.core.qgrams import _fmix64_numpy, fmix64

    z = np.array(codes, dtype=np.uint64)
    assert fmix64(z).tolist() == _fmix64_numpy(z).tolist()
    assert fmix64(z[::2]).tolist() == _fmix64_numpy(z[::2]).tolist()  # a strided view


def test_fused_count_and_filter_equal_count_then_filter() -> None:
    """PostingIndex.candidates (one C call into counters kept between decisions) keeps what
    count + count_filter keep, as the window grows past the counters' room and after
    documents are released from a block that still holds them."""
    from ndd_stream.core.postings import PostingIndex

    rng = np.random.default_rng(11)
    index = PostingIndex(1)
    facts = kernels.Facts(4)
    for step in range(2500):
        keys = np.unique(np.concatenate([rng.integers(0, 200, 30),
                                         rng.integers(0, 2**32, 60)])).astype(np.uint32)
        index.add(keys)
        facts.append(int(rng.integers(0, 20)), int(rng.integers(0, 10)), step // 100,
                     int(rng.integers(50, 120)))
        if step % 250 != 249:
            continue
        if step == 1999:
            index.release_before(700)  # inside a block: counted as 0 from here on
            facts.drop_front(700)
        first = index.base
        n = index.end - first
        probe = np.unique(rng.integers(0, 200, 80)).astype(np.uint32)
        args = (3, int(rng.integers(0, 20)), 5, (step // 100 - 5, step // 100), (60, 110))
        got = index.candidates(probe, first, n, facts, *args)
        want = kernels.count_filter(index.count(probe, first, n), facts, *args)
        assert got.tolist() == want.tolist()
        assert 0 < want.size < n


_PROSE_CHARS = st.sampled_from([*"ab xy\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f.,", "\r\n", "é", " "])


@needs_c
@settings(max_examples=400, deadline=None)
@given(st.lists(_PROSE_CHARS, max_size=300).map("".join), st.integers(1, 6),
       st.integers(0, 40))
def test_prose_blocks_in_c_equals_the_python_rule(text: str, words: int, chars: int) -> None:
    """The C prose rule keeps the lines (str.splitlines) of at least ``words`` words
    (str.split) as Python does, on every ASCII line break and blank; non-ASCII: None."""
    kept = [line for line in text.splitlines() if len(line.split(None, words - 1)) >= words]
    prose = "\n".join(kept)
    expected = prose if len(prose) >= chars else text
    fast = kernels.prose_blocks(text, words, chars)
    assert fast == (expected if text.isascii() else None)
