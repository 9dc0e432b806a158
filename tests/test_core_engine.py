"""The flat index (core/engine.py, _engine.c) equals brute force, and the detector decides
the same with it (C) as with the numpy index (a machine without a compiler)."""

from __future__ import annotations

import gc
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from harness.threads import engine_threads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ndd_stream.core import kernels
from ndd_stream.core.detector import Detector, DetectorConfig
from ndd_stream.core.document import Document
from ndd_stream.core.engine import FlatIndex, available
from ndd_stream.core.order import FrequencyBook
from ndd_stream.core.qgrams import Codes, fmix64
from ndd_stream.core.similarity import extended_prefix, min_overlap, size_bounds

pytestmark = pytest.mark.skipif(not available(), reason="the C kernels are not built")


@contextmanager
def numpy_only() -> Iterator[None]:
    saved = kernels.IMPLEMENTATION, kernels._C
    kernels.IMPLEMENTATION, kernels._C = "numpy", None
    try:
        yield
    finally:
        kernels.IMPLEMENTATION, kernels._C = saved


def add(index: FlatIndex, book: FrequencyBook, mixed: Codes, sig: Codes, hour: int,
        threshold: float) -> int:
    """Index as the detector does: every mixed code in full mode, else the extended prefix
    under the current order."""
    length = extended_prefix(sig.size, threshold)
    keys = mixed if index.full else book.current.prefix(mixed, length)
    book.count(mixed)
    return index.add(keys, sig, hour, min_overlap(sig.size, threshold), int(sig.size) - length)


def brute_best(query: Codes, docs: list[tuple[int, int, Codes]], first: int, t: float,
               hours: tuple[int, int]) -> tuple[int, int]:
    """(number, shared) of the highest doc_q >= t among docs[first:] in the hours, ties to
    the lowest number; (-1, 0) when none."""
    best, best_shared, best_sim = -1, 0, -1.0
    for number in range(first, len(docs)):
        _, hour, sig = docs[number]
        if not hours[0] <= hour <= hours[1]:
            continue
        shared = int(np.intersect1d(query, sig, assume_unique=True).size)
        sim = shared / max(query.size, sig.size)
        if sim >= t and sim > best_sim:
            best, best_shared, best_sim = number, shared, sim
    return best, best_shared


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), threshold=st.sampled_from([0.2, 0.3, 0.49, 0.5, 0.7, 0.9]),
       n=st.integers(1, 400), universe=st.sampled_from([40, 300, 5000]),
       dense=st.sampled_from([0.0, 0.01, 1 / 16, 1.0]))
def test_best_equals_brute_force(seed: int, threshold: float, n: int, universe: int,
                                 dense: float) -> None:
    """Random signatures over a small universe (most keys dense: bitmap rows), edits of
    earlier ones (near duplicates), hours moving on (expiry, sweeps, trimmed lists) and a
    query window narrower than the index's: every best() is the brute-force best match."""
    rnd = random.Random(seed)
    index = FlatIndex(threshold, dense)
    book = FrequencyBook(bits=12)
    docs: list[tuple[int, int, Codes]] = []
    base, hour = 0, 0
    for _ in range(n):
        if docs and rnd.random() < 0.4:
            codes = set(rnd.choice(docs)[2].tolist())
            for _ in range(rnd.randint(0, 4)):
                codes.add(rnd.randrange(universe))
                if len(codes) > 1:
                    codes.discard(rnd.choice(sorted(codes)))
        else:
            codes = set(rnd.sample(range(universe), rnd.randint(1, min(universe, 120))))
        sig = np.array(sorted(codes), dtype=np.uint64)
        hour += rnd.choice([0, 0, 0, 1, 2])
        if rnd.random() < 0.1:
            base = min(len(docs), base + rnd.randint(1, 40))
            index.release_before(base)
        mixed = fmix64(sig)
        lo_hour = hour - rnd.choice([0, 1, 3, 100])
        found = index.best(mixed, sig, min_overlap(sig.size, threshold), 0, (lo_hour, hour),
                           size_bounds(sig.size, threshold))
        assert (found.number, found.shared) == brute_best(sig, docs, base, threshold,
                                                          (lo_hour, hour))
        number = add(index, book, mixed, sig, hour, threshold)
        assert number == len(docs)
        docs.append((number, hour, sig))


def _stream(n: int, seed: int) -> list[Document]:
    """Templated reports over a few hours: many shared q-grams (dense keys), near copies."""
    rnd = random.Random(seed)
    vocab = [f"w{i}" for i in range(150)]
    docs: list[Document] = []
    t = 1_700_000_000.0
    for i in range(n):
        if docs and rnd.random() < 0.35:
            words = rnd.choice(docs[-100:]).text.split()
            for _ in range(rnd.randint(0, 3)):
                words[rnd.randrange(len(words))] = rnd.choice(vocab)
        else:
            words = rnd.choices(vocab, k=rnd.randint(5, 60))
        t += rnd.choice([5.0, 60.0, 900.0, 1200.0, -1800.0])
        docs.append(Document(f"d{i}", rnd.choice("ab"), "s", t, " ".join(words)))
    return docs


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.8])
def test_c_and_numpy_decide_the_same(threshold: float) -> None:
    """Two thousand items, a two-hour window (expiry on every hour): the flat index in C and
    the numpy index give every item the same decision."""
    docs = _stream(2000, 11)
    config = DetectorConfig(threshold=threshold, window_hours=2, index="flat")
    flat = Detector(config)
    got = [flat.decide(d) for d in docs]
    assert isinstance(next(flat.windows()).index, FlatIndex)
    with numpy_only():
        lsm = Detector(config)
        want = [lsm.decide(d) for d in docs]
    assert got == want
    assert sum(d.duplicate_of is not None for d in got) > 100


@pytest.mark.parametrize("threshold", [0.3, 0.8])
def test_best_equals_brute_force_across_sweeps(threshold: float) -> None:
    """Six thousand documents through a window of ~300: the index sweeps its expired
    postings, shrinks blocks and drops rows many times; sampled queries stay exact."""
    rnd = random.Random(5)
    index = FlatIndex(threshold)
    book = FrequencyBook(bits=12)
    docs: list[tuple[int, int, Codes]] = []
    base = 0
    for i in range(6000):
        if docs and rnd.random() < 0.3:
            codes = set(rnd.choice(docs[-200:])[2].tolist())
            codes.add(rnd.randrange(400))
        else:
            # a drifting universe: old keys go rare, new ones turn dense
            lo = i // 20
            codes = set(rnd.sample(range(lo, lo + 400), rnd.randint(1, 40)))
        sig = np.array(sorted(codes), dtype=np.uint64)
        mixed = fmix64(sig)
        base = max(base, i - rnd.randint(250, 350))
        index.release_before(base)
        if i % 7 == 0:
            found = index.best(mixed, sig, min_overlap(sig.size, threshold), 0, (0, 0),
                               size_bounds(sig.size, threshold))
            assert (found.number, found.shared) == brute_best(sig, docs, base, threshold, (0, 0))
        add(index, book, mixed, sig, 0, threshold)
        docs.append((i, 0, sig))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), threshold=st.sampled_from([0.3, 0.5, 0.8]),
       n=st.integers(1, 300), universe=st.sampled_from([40, 300, 5000]))
def test_add_ordered_is_prefix_index_and_count(seed: int, threshold: float, n: int,
                                               universe: int) -> None:
    """add_ordered (prefix, index and the order's counts in one C call) leaves the index
    and the order's sketch as OrderVersion.prefix, add and FrequencyBook.count do."""
    rng = random.Random(seed)
    one, other = FlatIndex(threshold), FlatIndex(threshold)
    book_one = FrequencyBook(bits=18, snapshots_at=(4, 16, 64))
    book_other = FrequencyBook(bits=18, snapshots_at=(4, 16, 64))
    for i in range(n):
        sig = np.unique(np.array([rng.randrange(universe) for _ in range(rng.randint(4, 60))],
                                 dtype=np.uint64))
        mixed = fmix64(sig)
        hour = i // 50
        assert add(one, book_one, mixed, sig, hour, threshold) == other.add_ordered(
            mixed, sig, hour, min_overlap(sig.size, threshold),
            extended_prefix(sig.size, threshold),
            None if other.full else book_other.current, None if other.full else book_other)
        if not other.full:
            np.testing.assert_array_equal(book_one.counts, book_other.counts)
            assert book_one.current.number == book_other.current.number
        lo, hi = size_bounds(sig.size, threshold)
        args = (mixed, sig, min_overlap(sig.size, threshold), 0, (hour - 2, hour), (lo, hi))
        assert one.best(*args)[:2] == other.best(*args)[:2]


@settings(max_examples=200, deadline=None)
@given(text=st.text(st.characters(max_codepoint=127), max_size=300)
       | st.text(max_size=40))
def test_window_text_is_read_back_as_kept(text: str) -> None:
    """A window document's normal form, held packed, reads back as it was given."""
    from ndd_stream.core.window import WindowDoc

    doc = WindowDoc("i", "c", 0.0, 0, 1, -1, text, None, 0)
    assert doc.nf == text
    packed = kernels._C.pack_text(text)  # type: ignore[union-attr]
    assert packed is None or kernels._C.unpack_text(packed) == text  # type: ignore[union-attr]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), threshold=st.sampled_from([0.5, 0.7, 0.9]),
       n=st.integers(1, 200),
       alphabet=st.sampled_from(["ab", "abc1", "a0z9", "ab_", "abé", "aB1"]),
       ahead=st.booleans())
def test_best_equals_brute_force_on_text_signatures(seed: int, threshold: float, n: int,
                                                    alphabet: str, ahead: bool) -> None:
    """Signatures of texts (the stored signatures' packed formats: six bits a character
    for 0-9a-z, a byte a character for Latin-1, else the codes; or the packed text itself
    for 0-9a-z) verify exactly, also after the oldest documents expire; and as much when
    the engine's thread looks up and indexes (``ahead``: the order's snapshots then read
    counts the thread wrote)."""
    from ndd_stream.core.qgrams import signature

    rng = random.Random(seed)
    index = FlatIndex(threshold, ahead=ahead)
    book = FrequencyBook(bits=18, snapshots_at=(4, 16, 64))
    base_text = "".join(rng.choice(alphabet) for _ in range(80))
    docs: list[tuple[int, int, Codes]] = []
    first = 0
    for _ in range(n):
        if rng.random() < 0.05:
            first = min(len(docs), first + rng.randint(1, 30))
            index.release_before(first)
        cut = rng.randrange(len(base_text))
        text = base_text[:cut] + "".join(rng.choice(alphabet) for _ in range(rng.randint(4, 30)))
        sig = signature(text, 4)
        if sig.size == 0:
            continue
        hour = len(docs) // 40
        lo, hi = size_bounds(sig.size, threshold)
        query = (min_overlap(sig.size, threshold), 0, (hour - 1, hour), (lo, hi))
        if ahead:
            index.submit(fmix64(sig), sig, *query)
            found = index.collect()
        else:
            found = index.best(fmix64(sig), sig, *query)
        in_size = [(num, h, s) if lo <= s.size <= hi else (num, -10**9, s)
                   for num, h, s in docs]
        assert (found.number, found.shared) == brute_best(sig, in_size, first, threshold,
                                                          (hour - 1, hour))
        way = len(docs) % 3  # the whole signature kept, its suffix, or the packed text
        if way == 0:
            assert add(index, book, fmix64(sig), sig, hour, threshold) == len(docs)
        else:
            packed = kernels._C.pack_text(text) if way == 2 else None  # type: ignore[union-attr]
            assert index.add_ordered(fmix64(sig), sig, hour, min_overlap(sig.size, threshold),
                                     extended_prefix(sig.size, threshold), book.current,
                                     book, packed) == len(docs)
        docs.append((len(docs), hour, sig))


@pytest.mark.parametrize("ahead", [False, True])
def test_packed_texts_are_held_until_their_documents_expire(ahead: bool) -> None:
    """In prefix mode the index holds a reference to each packed normal form it verifies
    from, and drops it when the document expires (or the index goes), no sooner; also when
    its own thread indexes them (a text it does not keep is given back: the last one)."""
    import sys

    from ndd_stream.core.qgrams import signature

    index = FlatIndex(0.8, ahead=ahead)
    book = FrequencyBook(bits=18, snapshots_at=(4, 16, 64))
    words = [f"report{i}onthemarkettoday" for i in range(6)]  # lower-case letters and digits
    texts = [kernels._C.pack_text(w) for w in words]  # type: ignore[union-attr]
    before = [sys.getrefcount(t) for t in texts]
    for word, packed in zip(words, texts, strict=True):
        sig = signature(word, 4)
        index.add_ordered(fmix64(sig), sig, 0, min_overlap(sig.size, 0.8),
                          extended_prefix(sig.size, 0.8), book.current, book, packed)
    del packed
    other = kernels._C.pack_text("Capitals are not held")  # type: ignore[union-attr]
    held = sys.getrefcount(other)
    sig = signature("Capitals are not held", 4)
    index.add_ordered(fmix64(sig), sig, 0, min_overlap(sig.size, 0.8),
                      extended_prefix(sig.size, 0.8), book.current, book, other)
    assert index.postings > 0  # every job ended
    assert sys.getrefcount(other) == held
    assert [sys.getrefcount(t) for t in texts] == [n + 1 for n in before]
    index.release_before(4)
    assert [sys.getrefcount(t) for t in texts] == before[:4] + [n + 1 for n in before[4:]]
    query = signature(words[5], 4)
    found = index.best(fmix64(query), query, min_overlap(query.size, 0.8), 0, (0, 0),
                       size_bounds(query.size, 0.8))
    assert (found.number, found.shared) == (5, query.size)
    assert index._c.layout["sigs_used"] == 0  # verified from the texts: no codes kept
    del index
    assert [sys.getrefcount(t) for t in texts] == before


@pytest.mark.parametrize("threshold", [0.3, 0.8])
def test_lists_across_a_gap_of_more_than_16_bits(threshold: float) -> None:
    """A key met again 70,000 documents later: its list holds the gap whole (16-bit
    differences escape), and reads, trims and expires exactly."""
    index = FlatIndex(threshold, 0.0)
    book = FrequencyBook(bits=18)
    story = np.array([11, 12, 13, 14], dtype=np.uint64)
    add(index, book, fmix64(story), story, 0, threshold)
    for i in range(70_000):
        other = np.array([1_000_000 + i], dtype=np.uint64)
        add(index, book, fmix64(other), other, 0, threshold)
    add(index, book, fmix64(story), story, 0, threshold)

    def best() -> tuple[int, int]:
        found = index.best(fmix64(story), story, min_overlap(story.size, threshold), 0,
                           (0, 0), size_bounds(story.size, threshold))
        return found.number, found.shared

    assert best() == (0, 4)
    index.release_before(1)
    assert best() == (70_001, 4)
    index.release_before(70_001)  # a sweep: every list trimmed
    assert best() == (70_001, 4)
    again = add(index, book, fmix64(story), story, 0, threshold)
    index.release_before(again)
    assert best() == (again, 4)


@pytest.mark.parametrize("threshold", [0.3, 0.8])
def test_a_submitted_lookup_is_best(threshold: float) -> None:
    """submit() then collect() on the engine's thread gives what best() gives, with the
    hours moving on and expiry between lookups; a call that changes the index while a
    lookup is in flight (add, release) waits for it instead of changing what it reads."""
    rnd = random.Random(7)
    index = FlatIndex(threshold)
    book = FrequencyBook(bits=12)
    docs: list[tuple[int, int, Codes]] = []
    hour = matched = 0
    for i in range(600):
        if docs and rnd.random() < 0.4:
            codes = set(rnd.choice(docs[-10:])[2].tolist())
            codes.add(rnd.randrange(3000))
        else:
            codes = set(rnd.sample(range(3000), rnd.randint(4, 150)))
        sig = np.array(sorted(codes), dtype=np.uint64)
        mixed = fmix64(sig)
        hour += rnd.choice([0, 0, 1])
        query = (min_overlap(sig.size, threshold), 0, (hour - 5, hour),
                 size_bounds(sig.size, threshold))
        want = index.best(mixed, sig, *query)
        matched += want.number >= 0
        index.submit(mixed, sig, *query)
        if i % 50 == 49:  # a change while the lookup may run waits for it to end
            index.release_before(len(docs) - 20)
        assert tuple(index.collect()) == tuple(want)
        number = add(index, book, mixed, sig, hour, threshold)
        docs.append((number, hour, sig))
    assert matched > 100


def test_a_lookup_is_collected_once() -> None:
    """collect() without a lookup submitted, or a second submit before the first is
    collected, is an error, not a wrong match; an index dropped with a lookup in flight
    ends its thread."""
    index = FlatIndex(0.8)
    sig = np.arange(1, 40, dtype=np.uint64)
    mixed = fmix64(sig)
    args = (min_overlap(39, 0.8), 0, (0, 0), size_bounds(39, 0.8))
    with pytest.raises(RuntimeError, match="no lookup"):
        index.collect()
    index.add_ordered(mixed, sig, 0, min_overlap(39, 0.8), extended_prefix(39, 0.8),
                      None, None)
    index.submit(mixed, sig, *args)
    with pytest.raises(RuntimeError, match="not collected"):
        index.submit(mixed, sig, *args)
    found = index.collect()
    assert (found.number, found.shared) == (0, 39)
    with pytest.raises(RuntimeError, match="no lookup"):
        index.collect()
    time.sleep(0.02)  # the thread sleeps after 2 ms without a job: a submit wakes it
    index.submit(mixed, sig, *args)
    assert index.collect().number == 0
    index.submit(mixed, sig, *args)
    del index  # joins the thread (a hang here fails the suite's timeout)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux: /proc lists threads")
def test_every_index_shares_one_engine_thread() -> None:
    """Forty indexes (a window per scope, as ``dedup`` keeps per channel) give their jobs to
    one thread, interleaved as items of different scopes come, and each lookup still finds
    its own index's match; the thread ends with the last index. (A thread per index, each
    polling for its next job, made dedup of 66 channel scopes ten times slower.)"""
    gc.collect()  # indexes of earlier tests
    before = engine_threads()  # 1 while an index elsewhere has given it a job
    indexes = [FlatIndex(0.8) for _ in range(40)]
    books = [FrequencyBook(bits=12) for _ in indexes]
    sigs = [np.array(range(100 * i + 1, 100 * i + 41), dtype=np.uint64) for i in range(40)]
    numbers = []
    for index, book, sig in zip(indexes, books, sigs, strict=True):
        index.submit(fmix64(sig), sig, min_overlap(40, 0.8), 0, (0, 0), size_bounds(40, 0.8))
        assert index.collect().number == -1  # empty
        numbers.append(add(index, book, fmix64(sig), sig, 0, 0.8))
    assert engine_threads() == 1
    for round_ in range(3):
        for i in random.Random(round_).sample(range(40), 40):
            sig = sigs[i]
            indexes[i].submit(fmix64(sig), sig, min_overlap(40, 0.8), 0, (0, 0),
                              size_bounds(40, 0.8))
            if i % 3 == 0:  # another index's call while this lookup is in flight
                assert indexes[(i + 1) % 40].postings > 0
            found = indexes[i].collect()
            assert (found.number, found.shared) == (numbers[i], 40)
    assert engine_threads() == 1
    del indexes, books, index, book  # the loop's names held the last index too
    gc.collect()
    assert engine_threads() == before


def test_a_forked_child_looks_up_without_the_parent_thread() -> None:
    """A child forked after the index's thread started has the memory, not the thread:
    its lookups start a thread of its own and still find the match."""
    import os

    index = FlatIndex(0.8)
    sig = np.arange(1, 40, dtype=np.uint64)
    mixed = fmix64(sig)
    args = (min_overlap(39, 0.8), 0, (0, 0), size_bounds(39, 0.8))
    index.add_ordered(mixed, sig, 0, min_overlap(39, 0.8), extended_prefix(39, 0.8),
                      None, None)
    index.submit(mixed, sig, *args)
    assert index.collect().number == 0
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 when both calls find document 0
        ok = False
        try:
            ok = index.best(mixed, sig, *args).number == 0
            index.submit(mixed, sig, *args)
            ok = ok and index.collect().number == 0
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_dense_rows_counted_over_several_chunks_equal_brute_force() -> None:
    """A window wider than one chunk of the rows' count (2,048 words: 131,072 documents)
    and not a multiple of it, every key a bitmap row: best() is the brute-force best match
    for queries that share most with a document in the first chunk, the second, and none."""
    rnd = np.random.default_rng(7)
    n, universe, size, threshold = 140_000, 96, 10, 0.3
    codes = np.argsort(rnd.random((n, universe)), axis=1)[:, :size].astype(np.uint64)
    codes.sort(axis=1)
    index = FlatIndex(threshold, 1 / 64)
    need = min_overlap(size, threshold)
    for number in range(n):
        sig = codes[number]
        assert index.add(fmix64(sig), sig, 0, need, 0) == number
    for target in (5, 70_000, 139_999, None):
        if target is None:
            sig = np.arange(universe, universe + size, dtype=np.uint64)  # shares nothing
        else:
            kept = codes[target][:7]
            other = np.setdiff1d(np.arange(universe, dtype=np.uint64), codes[target])
            sig = np.sort(np.concatenate([kept, other[:3]]))
        shared = np.isin(codes, sig).sum(axis=1)
        hits = np.flatnonzero(shared >= need)
        want = (int(hits[np.argmax(shared[hits])]), int(shared[hits].max())) if hits.size \
            else (-1, 0)
        found = index.best(fmix64(sig), sig, need, 0, (0, 0), size_bounds(size, threshold))
        assert (found.number, found.shared) == want
