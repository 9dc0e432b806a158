"""A scope's window split over S shards decides exactly as one detector (issue 23)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_core_detector import IMPLEMENTATIONS, implementation, streams, templated_streams

from ndd_stream.core.detector import Detector, DetectorConfig
from ndd_stream.core.document import Decision, Document
from ndd_stream.core.shards import Gatherer, ShardedDetector, ShardIndex, shard_of
from ndd_stream.core.store import StoredDocument


def _same(got: list[Decision], want: list[Decision]) -> None:
    assert [d.as_dict() for d in got] == [d.as_dict() for d in want]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=streams(),
    shards=st.integers(1, 4),
    threshold=st.sampled_from([0.2, 0.3, 0.5, 0.8, 1.0]),
    q=st.sampled_from([1, 3, 4, 5]),
    window=st.sampled_from([0, 1, 24]),
    bitmap_bits=st.sampled_from([None, 0, 6]),
    novelty=st.sampled_from(["auto", "on", "off"]),
    impl=st.sampled_from(IMPLEMENTATIONS),
)
def test_sharded_decisions_equal_one_detector(
    docs: list[Document], shards: int, threshold: float, q: int, window: int,
    bitmap_bits: int | None, novelty: str, impl: str,
) -> None:
    """Same status, match, similarity, policy, replay flag and novelty explanation, for any
    S, on streams with replays, late and out-of-order hours, short and empty texts."""
    config = DetectorConfig(q=q, threshold=threshold, window_hours=window,
                            bitmap_bits=bitmap_bits, novelty=novelty)  # type: ignore[arg-type]
    with implementation(impl):
        one = Detector(config)
        want = [one.decide(d) for d in docs]
        sharded = ShardedDetector(config, shards)
        got = [sharded.decide(d) for d in docs]
    _same(got, want)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=templated_streams(), shards=st.integers(2, 4),
       threshold=st.sampled_from([0.2, 0.3, 0.8]))
def test_sharded_novelty_equals_one_detector(docs: list[Document], shards: int,
                                             threshold: float) -> None:
    config = DetectorConfig(threshold=threshold)
    one = Detector(config)
    sharded = ShardedDetector(config, shards)
    _same([sharded.decide(d) for d in docs], [one.decide(d) for d in docs])


def test_ties_go_to_the_earliest_arrival_across_shards() -> None:
    """Two equal earlier texts in different shards: the match is the first to arrive."""
    text = "the metro line opened today in rome"
    ids = [f"x{i}" for i in range(50)]
    a = next(i for i in ids if shard_of(i, 2) == 1)
    b = next(i for i in ids if shard_of(i, 2) == 0)
    sharded = ShardedDetector(DetectorConfig(), 2)
    sharded.decide(Document(a, "s", "c", 0.0, text))
    sharded.decide(Document(b, "s", "c", 1.0, text))
    decision = sharded.decide(Document("z", "s", "c", 2.0, text))
    assert decision.duplicate_of == a


def test_documents_are_spread_and_indexed_once() -> None:
    rnd = random.Random(3)
    docs = [Document(f"d{i}", "s", "c", 60.0 * i,
                     " ".join(rnd.choice(["rome", "metro", "line", "bank", "rates", "strike"])
                              for _ in range(30))) for i in range(400)]
    sharded = ShardedDetector(DetectorConfig(), 4)
    for doc in docs:
        sharded.decide(doc)
    held = [s.window_documents() for s in sharded.shards]
    assert sum(held) == 400
    assert min(held) > 60  # a stable hash spreads identities
    assert [shard_of("d7", 4)] * 3 == [shard_of("d7", 4) for _ in range(3)]


class _ListStore:
    def __init__(self) -> None:
        self.docs: list[StoredDocument] = []

    def add(self, doc: StoredDocument) -> None:
        self.docs.append(doc)

    def drop_hour(self, scope: str, hour: int) -> None:
        self.docs = [d for d in self.docs if (d.scope, d.hour) != (scope, hour)]

    def load(self):  # type: ignore[no-untyped-def]
        return iter(sorted(self.docs, key=lambda d: (d.scope, d.hour, d.number)))

    def commit(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize("cut", [0, 7, 60, 119])
def test_restored_shards_and_gatherer_go_on_with_the_same_decisions(cut: int) -> None:
    """Stop after ``cut`` items, rebuild the gatherer and every shard from their stores:
    the rest is decided as without the stop."""
    rnd = random.Random(cut)
    docs = []
    for i in range(120):
        base = rnd.choice(docs).text if docs and rnd.random() < 0.4 else " ".join(
            rnd.choice(["rome", "metro", "line", "bank", "rates", "7", "12.5"])
            for _ in range(12))
        ident = f"d{rnd.randrange(i)}" if i and rnd.random() < 0.05 else f"d{i}"
        docs.append(Document(ident, "s", "c", 1_700_000_000 + 600.0 * i, base + " ok"))
    config = DetectorConfig(window_hours=3)
    one = Detector(config)
    want = [one.decide(d) for d in docs]

    stores = [_ListStore() for _ in range(3)]
    gstore = _ListStore()

    def build() -> tuple[Gatherer, list[ShardIndex]]:
        g = Gatherer(config, 3, gstore)  # type: ignore[arg-type]
        shards = [ShardIndex(s, config, stores[s]) for s in range(3)]  # type: ignore[arg-type]
        g.restore()
        for s in shards:
            s.restore()
        return g, shards

    got: list[Decision] = []
    g, shards = build()
    for i, doc in enumerate(docs):
        if i == cut:
            g, shards = build()
        pending = g.admit(doc)
        prep = pending.prepared
        got.append(g.resolve(pending, [s.answer(prep) for s in shards] if prep else []))
    _same(got, want)


def test_a_missing_answer_is_refused() -> None:
    g = Gatherer(DetectorConfig(), 2)
    pending = g.admit(Document("a", "s", "c", 0.0, "the metro line opened"))
    assert pending.prepared is not None
    with pytest.raises(ValueError, match="one answer from each of 2 shards"):
        g.resolve(pending, [ShardIndex(0).answer(pending.prepared)])


def test_sharding_without_indexing_duplicates_is_refused() -> None:
    with pytest.raises(ValueError, match="index_duplicates"):
        Gatherer(DetectorConfig(index_duplicates=False), 2)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=streams(), shards=st.integers(1, 3), window=st.sampled_from([0, 1, 24]),
       ahead=st.integers(1, 40))
def test_stories_are_the_same_when_the_gatherer_admits_ahead(
    docs: list[Document], shards: int, window: int, ahead: int,
) -> None:
    """A worker's gatherer admits items (moving the window) before it resolves earlier
    ones: each item still gets the story and tally the one detector gives it."""
    config = DetectorConfig(threshold=0.3, window_hours=window)
    one = Detector(config)
    want = [one.decide(d) for d in docs]
    g = Gatherer(config, shards)
    indexes = [ShardIndex(s, config) for s in range(shards)]
    admitted = []
    got: list[Decision] = []
    for doc in docs:
        pending = g.admit(doc)
        prep = pending.prepared
        admitted.append((pending, [s.answer(prep) for s in indexes] if prep else []))
        if len(admitted) > ahead:
            got.append(g.resolve(*admitted.pop(0)))
    got.extend(g.resolve(*a) for a in admitted)
    _same(got, want)
