"""The detector's decisions equal the brute-force definition on any input."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import brute_force

from ndd_stream.core import kernels
from ndd_stream.core.detector import Detector, DetectorConfig
from ndd_stream.core.document import Document, Policy, Status
from ndd_stream.core.engine import FlatIndex
from ndd_stream.core.normalize import normal_form
from ndd_stream.core.qgrams import signature
from ndd_stream.core.similarity import intersection_size, min_overlap, size_bounds
from ndd_stream.core.stories import FOLLOW_UP_REASONS

WORDS = ["rome", "mayor", "metro", "line", "opened", "today", "the", "of", "new", "a",
         "strike", "bank", "rates", "3", "2026", "Città", "Zürich", "東京", "нефть", "über",
         # figures (the novelty rule compares them without thousands commas) and a correction
         "1,250", "1250", "58.8", "58.7", "12.5", "7", "net", "Corrected"]


IMPLEMENTATIONS = ["c", "numpy"] if kernels._C is not None else ["numpy"]


@contextmanager
def implementation(name: str) -> Iterator[None]:
    """The C kernels or the numpy fallback (what a machine without a compiler runs)."""
    saved = kernels.IMPLEMENTATION, kernels._C
    if name == "numpy":
        kernels.IMPLEMENTATION, kernels._C = "numpy", None
    try:
        yield
    finally:
        kernels.IMPLEMENTATION, kernels._C = saved


@st.composite
def streams(draw: st.DrawFn) -> list[Document]:
    """Random streams rich in near duplicates: new texts and edits of earlier ones."""
    n = draw(st.integers(1, 40))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    docs: list[Document] = []
    t = 1_700_000_000.0
    for i in range(n):
        if docs and rnd.random() < 0.5:
            words = rnd.choice(docs).text.split()
            for _ in range(rnd.randint(0, 3)):
                op = rnd.random()
                if op < 0.4 and words:
                    words[rnd.randrange(len(words))] = rnd.choice(WORDS)
                elif op < 0.7:
                    words.insert(rnd.randint(0, len(words)), rnd.choice(WORDS))
                elif words:
                    words.pop(rnd.randrange(len(words)))
            if rnd.random() < 0.2:  # an expanded version (keep="complete" may take it)
                words += rnd.choices(WORDS, k=rnd.randint(1, len(words) + 2))
            text = " ".join(words)
        else:
            text = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(0, 12)))
        t += rnd.choice([0, 30, 600, 3600, 3 * 3600, -2 * 3600, -30 * 3600])
        identity = str(rnd.randrange(i + 1)) if rnd.random() < 0.1 else f"d{i}"
        docs.append(Document(identity, rnd.choice(["a", "b"]), rnd.choice("cde"), t, text + ".",
                             markup=rnd.random() < 0.2))
    return docs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=streams(),
    threshold=st.sampled_from([0.2, 0.3, 0.49, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]),
    q=st.sampled_from([1, 2, 3, 4, 5]),
    window=st.sampled_from([0, 1, 2, 24]),
    index_duplicates=st.booleans(),
    bitmap_bits=st.sampled_from([None, 0, 6, 10]),  # 6: 64-bit bitmaps, collisions galore
    novelty=st.sampled_from(["auto", "on", "off"]),
    impl=st.sampled_from(IMPLEMENTATIONS),
    threads=st.sampled_from([1, 2]),
    dense_fraction=st.sampled_from([0.0, 1 / 16, 1.0]),
    keep=st.sampled_from(["first", "complete"]),
    index=st.sampled_from(["auto", "flat", "lsm"]),
)
def test_decisions_equal_brute_force(
    docs: list[Document], threshold: float, q: int, window: int, index_duplicates: bool,
    bitmap_bits: int | None, novelty: str, impl: str, threads: int, dense_fraction: float,
    keep: str, index: str,
) -> None:
    """Whatever the threshold (full or partial prefixes), bitmap filter size, novelty mode,
    kernels (C or the numpy fallback) and speed settings: the same routing, the same match
    and the same explanation of a new report."""
    config = DetectorConfig(q=q, threshold=threshold, window_hours=window,
                            index_duplicates=index_duplicates, bitmap_bits=bitmap_bits,
                            novelty=novelty, count_threads=threads,  # type: ignore[arg-type]
                            dense_fraction=dense_fraction, keep=keep,  # type: ignore[arg-type]
                            index=index)  # type: ignore[arg-type]
    with implementation(impl):
        detector = Detector(config)
        got = [detector.decide(d) for d in docs]
    want = brute_force(docs, q=q, threshold=threshold, window_hours=window,
                       index_duplicates=index_duplicates, novelty_mode=novelty,
                       follow_ups=FOLLOW_UP_REASONS, keep=keep)
    for g, w in zip(got, want, strict=True):
        assert (g.status.value, g.duplicate_of) == (w.status, w.duplicate_of)
        assert abs(g.similarity - w.similarity) < 1e-12
        novel = g.novel
        assert (novel.reason if novel else None) == w.novel
        if novel is not None:
            assert (novel.resembles, novel.only_new, novel.only_old) == (
                w.resembles, w.only_new, w.only_old)
        assert (g.story, g.story_size, g.story_channels, g.supersedes) == (
            w.story, w.story_size, w.story_channels, w.supersedes)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_decisions_equal_brute_force_with_order_snapshots(impl: str) -> None:
    """Over a thousand documents the rare-first order is re-learned several times (after
    256 and 1024 documents); decisions must not change with it (C kernels and numpy)."""
    rnd = random.Random(7)
    vocab = [f"w{i}x{i * 7 % 13}" for i in range(400)]
    docs: list[Document] = []
    for i in range(1300):
        if docs and rnd.random() < 0.3:
            words = rnd.choice(docs[-200:]).text.split()
            words[rnd.randrange(len(words))] = rnd.choice(vocab)
            text = " ".join(words)
        else:
            text = " ".join(rnd.choices(vocab, k=rnd.randint(20, 60)))
        docs.append(Document(f"d{i}", "s", "c", 1_700_000_000 + i * 60.0, text))
    with implementation(impl):
        detector = Detector(DetectorConfig(threshold=0.8, window_hours=2))
        got = [detector.decide(d) for d in docs]
    want = brute_force(docs, threshold=0.8, window_hours=2)
    assert [(g.status.value, g.duplicate_of) for g in got] == [
        (w.status, w.duplicate_of) for w in want
    ]
    assert sum(g.is_duplicate for g in got) > 100


def _doc(identity: str, text: str, hour: int = 0, scope: str = "s") -> Document:
    return Document(identity, scope, "chan-" + scope, 1_700_000_000 + hour * 3600.0, text)


def test_exact_and_near_duplicates_carry_the_match() -> None:
    det = Detector(DetectorConfig(threshold=0.8))
    text = "The central bank raised interest rates by a quarter point on Tuesday."
    assert det.decide(_doc("a", text)).status is Status.UNIQUE
    exact = det.decide(_doc("b", text.upper() + "!!"))
    assert (exact.status, exact.duplicate_of, exact.similarity) == (
        Status.EXACT_DUPLICATE, "a", 1.0)
    assert exact.matched_channel == "chan-s" and exact.matched_timestamp == 1_700_000_000.0
    near = det.decide(_doc("c", text.replace("Tuesday", "Monday")))
    assert near.status is Status.NEAR_DUPLICATE and near.duplicate_of == "a"
    assert 0.8 <= near.similarity < 1.0


def test_case_sensitive_reproduces_the_paper() -> None:
    det = Detector(DetectorConfig(case_sensitive=True))
    det.decide(_doc("a", "Breaking News From Rome Today"))
    assert det.decide(_doc("b", "BREAKING NEWS FROM ROME TODAY")).status is Status.UNIQUE


def test_scopes_are_compared_only_with_themselves() -> None:
    det = Detector()
    det.decide(_doc("a", "identical story text here", scope="x"))
    assert det.decide(_doc("b", "identical story text here", scope="y")).status is Status.UNIQUE
    assert det.decide(_doc("c", "identical story text here", scope="x")).duplicate_of == "a"


def test_window_expires_whole_hours_by_event_time() -> None:
    det = Detector(DetectorConfig(window_hours=24))
    det.decide(_doc("a", "a story about the harbour fire", hour=0))
    assert det.decide(_doc("b", "a story about the harbour fire", hour=24)).duplicate_of == "a"
    assert det.decide(_doc("c", "a story about the harbour fire", hour=49)).duplicate_of is None
    # b (hour 24) is still in c's window (25..49)? No: 49-24 = 25 > 24, so b expired too.
    late = det.decide(_doc("d", "a story about the harbour fire", hour=10))
    assert late.policy is Policy.LATE and late.status is Status.UNIQUE


def test_items_later_than_the_window_are_unique_and_not_indexed() -> None:
    det = Detector(DetectorConfig(window_hours=1))
    det.decide(_doc("a", "first story text", hour=10))
    assert det.decide(_doc("late", "a completely late story", hour=5)).policy is Policy.LATE
    assert det.decide(_doc("x", "a completely late story", hour=10)).status is Status.UNIQUE


def test_short_texts_match_exactly_on_the_normal_form() -> None:
    det = Detector(DetectorConfig(q=4))
    assert det.decide(_doc("a", "Ok!")).policy is Policy.SHORT
    again = det.decide(_doc("b", "ok ."))
    assert (again.status, again.duplicate_of, again.policy) == (
        Status.EXACT_DUPLICATE, "a", Policy.SHORT)
    assert det.decide(_doc("c", "no")).status is Status.UNIQUE


def test_text_without_letters_or_digits_is_never_matched() -> None:
    det = Detector()
    assert det.decide(_doc("a", "!!! ...")).policy is Policy.EMPTY
    assert det.decide(_doc("b", "??")).status is Status.UNIQUE


def test_replayed_identity_gets_its_original_decision_and_is_not_reindexed() -> None:
    det = Detector()
    det.decide(_doc("a", "the original story about elections"))
    first = det.decide(_doc("b", "the original story about elections!"))
    again = det.decide(_doc("b", "something else entirely, changed on redelivery"))
    assert again.replayed and (again.status, again.duplicate_of) == (
        first.status, first.duplicate_of)
    assert det.window_documents() == 2


def test_ties_go_to_the_earliest_item() -> None:
    det = Detector(DetectorConfig(threshold=0.5))
    det.decide(_doc("first", "alpha beta gamma delta"))
    det.decide(_doc("second", "alpha beta gamma delta"))
    assert det.decide(_doc("third", "alpha beta gamma delta")).duplicate_of == "first"


@st.composite
def templated_streams(draw: st.DrawFn) -> list[Document]:
    """Reports of one template with other figures, subjects and headlines, repeats,
    corrections, cuts and rewrites (half the words replaced, the headline kept or re-worded):
    the cases the novelty rule decides (figures as quantities, subject, headline,
    new_content, declared corrections)."""
    rnd = random.Random(draw(st.integers(0, 2**32)))
    template = ("Net {0} vs {1} mln , sales {2} vs {3} , shr {4} cts vs {5} cts , "
                "the board met in rome today and the bank said rates {6}")
    docs: list[Document] = []
    for i in range(draw(st.integers(1, 25))):
        figs = [rnd.choice(["1,250", "1250", "58.8", "58.7", "12.5", "7", "3", "2026", "0.5",
                            "8,700,000", "8.7", "1,459,193,000"]) for _ in range(7)]
        text = template.format(*figs)
        if rnd.random() < 0.7:
            text = (rnd.choice(["ARBOR DRUGS NET", "SUN RAISES CRUDE POSTINGS", "ARBOR NET UP",
                                "CREDITORS REJECT RESCHEDULING PLAN",
                                "ARBOR DRUGSTORES NETS"]) + "\n" + text
                    + rnd.choice(["", " Arbor said.", " Sun said.", " 1.46 billion dlrs"]))
        if docs and rnd.random() < 0.4:
            text = rnd.choice(docs).text
            if rnd.random() < 0.5:
                text = text.replace(rnd.choice(["58.8", "7", "3", "1,250"]), "99", 1)
            elif rnd.random() < 0.5:  # a rewrite: a run of words told otherwise
                words = text.split(" ")
                start = rnd.randrange(1, max(2, len(words)))
                for j in range(start, min(len(words), start + rnd.randint(4, 24))):
                    words[j] = rnd.choice(["earnings", "rose", "strongly", "the", "quarter",
                                           "company", "reported"])
                words[start - 1] = words[0].split("\n")[0].capitalize()  # subject named
                text = " ".join(words)
        if rnd.random() < 0.2:
            text = "Corrected " + text
        if rnd.random() < 0.2:
            text = text[: rnd.randint(10, len(text))]
        if rnd.random() < 0.15:
            text += " metro strike opened new line of the city" * rnd.randint(1, 4)
        docs.append(Document(f"t{i}", "s", "c", 1_700_000_000.0 + 60 * i, text))
    return docs


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=templated_streams(), threshold=st.sampled_from([0.2, 0.3, 0.5, 0.8]))
def test_novelty_on_templated_reports_equals_brute_force(
    docs: list[Document], threshold: float
) -> None:
    detector = Detector(DetectorConfig(threshold=threshold))
    got = [detector.decide(d) for d in docs]
    want = brute_force(docs, threshold=threshold, novelty_mode="auto",
                       follow_ups=FOLLOW_UP_REASONS)
    for g, w in zip(got, want, strict=True):
        assert (g.status.value, g.duplicate_of, g.novel.reason if g.novel else None) == (
            w.status, w.duplicate_of, w.novel)
        assert (g.story, g.story_size, g.story_channels) == (
            w.story, w.story_size, w.story_channels)
        assert abs(g.similarity - w.similarity) < 1e-12
        if g.novel is not None:
            assert (g.novel.resembles, g.novel.only_new, g.novel.only_old) == (
                w.resembles, w.only_new, w.only_old)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_full_prefixes_verify_only_pairs_that_reach_the_larger_documents_need(impl: str) -> None:
    """Below t = 0.5 every q-gram is indexed, so the count filter knows each pair's overlap
    and passes only the true matches (the numpy index verifies them; the flat index's count
    is the overlap itself). The case that needs the pair-aware bound: a new item sharing
    more than its own need (0.3 of its q-grams) with longer items, but less than theirs
    (doc_q divides by the larger set)."""
    rnd = random.Random(7)
    words = [f"w{i}x" for i in range(4000)]
    rnd.shuffle(words)
    shared = " ".join(words[:30])
    config = DetectorConfig(threshold=0.3, novelty="off")
    with implementation(impl):
        det = Detector(config)
        longs = [f"{shared} " + " ".join(words[100 + 180 * i: 280 + 180 * i]) for i in range(10)]
        for i, text in enumerate(longs):
            det.decide(Document(f"long{i}", "a", "global", 1_700_000_000.0 + i, text))
        new = f"{shared} " + " ".join(words[3900:3940])
        a = signature(normal_form(new))
        overlaps = [(intersection_size(a, b), b.size) for b in
                    (signature(normal_form(text)) for text in longs)]
        matches = sum(o >= min_overlap(max(a.size, size), 0.3) for o, size in overlaps)
        # the case meant: pairs above the new item's own need but below the longer one's
        shortfall = sum(min_overlap(a.size, 0.3) <= o < min_overlap(size, 0.3)
                        and size <= size_bounds(a.size, 0.3)[1] for o, size in overlaps)
        assert shortfall >= 3
        before = det.stats.verified, det.stats.candidates
        det.decide(Document("new", "a", "global", 1_700_000_100.0, new))
        if isinstance(next(det.windows()).index, FlatIndex):
            assert det.stats.verified == before[0]
            assert det.stats.candidates - before[1] == matches
        else:
            assert det.stats.verified - before[0] == matches
