"""One suite for every StateStore: in-memory and RocksDB behave the same.

Also checks the property the worker rests on: a detector restored from a store
continues with exactly the decisions of an uninterrupted run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndd_stream.core import detector as detector_module
from ndd_stream.core.detector import Detector, DetectorConfig
from ndd_stream.core.document import Decision, Document, Status
from ndd_stream.core.novelty import Novelty
from ndd_stream.core.store import StateStore, StoredDocument
from ndd_stream.jsonio import dumps
from ndd_stream.state.rocks import (
    FORMAT,
    FORMAT_KEY,
    MARKER_KEY,
    Checkpoint,
    CorruptRecord,
    RocksStore,
    decode_checkpoint,
    decode_document,
    document_key,
    encode_checkpoint,
    encode_document,
)

Factory = Callable[[], StateStore]


class MemoryStore:
    """The reference store of this suite: a dict per (scope, hour), nothing survives."""

    def __init__(self) -> None:
        self._hours: dict[tuple[str, int], list[StoredDocument]] = {}
        self._pending: list[StoredDocument] = []
        self._dropped: list[tuple[str, int]] = []

    def add(self, doc: StoredDocument) -> None:
        self._pending.append(doc)

    def drop_hour(self, scope: str, hour: int) -> None:
        self._dropped.append((scope, hour))
        self._pending = [d for d in self._pending if (d.scope, d.hour) != (scope, hour)]

    def load(self) -> Iterator[StoredDocument]:
        docs = [d for hour in self._hours.values() for d in hour]
        docs.sort(key=lambda d: (d.scope, d.number))
        return iter(docs)

    def commit(self) -> None:
        for key in self._dropped:
            self._hours.pop(key, None)
        self._dropped.clear()
        for doc in self._pending:
            self._hours.setdefault((doc.scope, doc.hour), []).append(doc)
        self._pending.clear()

    def close(self) -> None:
        self._pending.clear()


@pytest.fixture(params=["memory", "rocksdb"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    """Returns a factory that (re)opens the same store, as a restarted process would."""
    opened: list[StateStore] = []
    memory = MemoryStore()

    def factory() -> StateStore:
        if request.param == "memory":
            return memory
        for old in opened:
            old.close()
        store = RocksStore(tmp_path / "state")
        opened.append(store)
        return store

    yield factory
    if request.param == "rocksdb":
        for store in opened:
            store.close()


def _stored(scope: str, number: int, hour: int, identity: str = "") -> StoredDocument:
    identity = identity or f"{scope}-{number}"  # a placed decision: its story is its own
    decision = Decision(identity, Status.UNIQUE, 0.0, scope=scope, hour=hour, story=identity)
    return StoredDocument(scope, number, hour, "chan", hour * 3600.0, f"text{number}", True,
                          decision)


def test_committed_documents_load_in_scope_and_arrival_order(make_store: Factory) -> None:
    store = make_store()
    for doc in [_stored("b", 0, 5), _stored("a", 1, 3), _stored("a", 0, 4), _stored("a", 2, -1)]:
        store.add(doc)
    store.commit()
    assert [(d.scope, d.number) for d in make_store().load()] == [
        ("a", 0), ("a", 1), ("a", 2), ("b", 0)]


def test_uncommitted_additions_are_not_loaded(make_store: Factory) -> None:
    store = make_store()
    store.add(_stored("a", 0, 1))
    store.commit()
    store.add(_stored("a", 1, 1))
    reopened = make_store()
    if reopened is store:  # the memory store: same object, pending batch still buffered
        assert [d.number for d in store.load()] == [0]
    else:
        assert [d.number for d in reopened.load()] == [0]


def test_drop_hour_removes_only_that_scope_and_hour(make_store: Factory) -> None:
    store = make_store()
    for doc in [_stored("a", 0, 1), _stored("a", 1, 2), _stored("b", 0, 1)]:
        store.add(doc)
    store.commit()
    store.drop_hour("a", 1)
    store.commit()
    assert [(d.scope, d.hour) for d in make_store().load()] == [("a", 2), ("b", 1)]


def test_records_round_trip_exactly(make_store: Factory) -> None:
    doc = StoredDocument("ch/ü", 7, -3, "ch", -10799.5, "nfü", False, Decision(
        "id", Status.NEAR_DUPLICATE, 0.8125, "other", "ch2", 12.0, "ch/ü", -3, story="other"))
    store = make_store()
    store.add(doc)
    store.commit()
    assert list(make_store().load()) == [doc]


@pytest.mark.parametrize("story", ["first", "other", "id"])
def test_a_story_is_stored_only_when_it_is_not_the_derived_one(story: str) -> None:
    """The story costs no bytes when it is the duplicate's identity, a few when a chain
    names another; the tally is never stored (a restore counts it again)."""
    bare = Decision("id", Status.NEAR_DUPLICATE, 0.5, "other", "ch2", 12.0, "s", 1)
    placed = replace(bare, story=story, story_size=4, story_channels=("a", "b"))
    doc = StoredDocument("s", 1, 1, "ch", 3600.0, "", False, placed)
    value = encode_document(doc)
    back = decode_document(document_key(doc), value).decision
    assert back == replace(placed, story_size=0, story_channels=())
    base = len(encode_document(replace(doc, decision=replace(bare, story="other"))))
    assert len(value) == (base if story == "other" else base + len(f',"story":"{story}"'))


def test_the_checkpoint_is_written_with_the_documents_it_reflects(tmp_path: Path) -> None:
    order = {"v": 1, "consumed": 9, "frontier": [5, "raw", 0, 3], "sources": []}
    store = RocksStore(tmp_path)
    assert store.checkpoint() == Checkpoint()  # none yet: from offset 0
    store.add(_stored("a", 0, 1))
    store.commit(Checkpoint(7, 3, order))
    store.add(_stored("a", 1, 1))
    store.close()  # the second document, never committed, is gone with its position
    store = RocksStore(tmp_path)
    assert store.checkpoint() == Checkpoint(7, 3, order)
    assert [d.number for d in store.load()] == [0]
    store.close()


def test_a_checkpoint_of_the_first_layout_is_read(tmp_path: Path) -> None:
    store = RocksStore(tmp_path)
    store._db.put(MARKER_KEY, b"\x01" + b'{"next": 12, "changelog": 40}')
    assert store.checkpoint() == Checkpoint(12, 40, None)
    store.close()
    assert decode_checkpoint(encode_checkpoint(Checkpoint(1, 2, {"v": 1}))) == Checkpoint(
        1, 2, {"v": 1})
    sharded = Checkpoint(3, 4, None, ((5, 6),), shards=2)  # the layout it was built for
    assert decode_checkpoint(encode_checkpoint(sharded)) == sharded
    with pytest.raises(CorruptRecord):
        decode_checkpoint(b"\x07{}")
    # v2 with a pending list as JSON pairs (written before the list was packed) is read
    old = b"\x02" + dumps({"next": 3, "changelog": 4, "order": None, "shards": 2,
                           "pending": [[5, 6], [9, -1]]})
    assert decode_checkpoint(old) == Checkpoint(3, 4, None, ((5, 6), (9, -1)), shards=2)
    assert encode_checkpoint(Checkpoint(1, 2))[:1] == b"\x02"  # v3 only with a pending list


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**62), st.integers(-1, 2**62)), max_size=300))
def test_a_pending_list_round_trips_packed(pending: list[tuple[int, int]]) -> None:
    """Any order (event-time admission jumps between offsets), numbers -1 (decided at once)."""
    checkpoint = Checkpoint(7, 8, {"v": 1}, tuple(pending), shards=3)
    value = encode_checkpoint(checkpoint)
    assert value[:1] == (b"\x03" if pending else b"\x02")
    assert decode_checkpoint(value) == checkpoint


def test_a_backlog_pending_list_is_packed_small() -> None:
    # 200k items of 8 raw partitions forwarded one after another, admitted in turn
    interleaved = [1_000_000 + p * 25_000 + i for i in range(25_000) for p in range(8)]
    pending = tuple((o, 3_000_000 + n) for n, o in enumerate(interleaved))
    value = encode_checkpoint(Checkpoint(1, 2, None, pending, shards=2))
    assert len(value) < 200_000 * 4  # ~18 bytes per pair as JSON
    assert decode_checkpoint(value).pending == pending


def test_a_corrupt_pending_list_is_refused() -> None:
    good = encode_checkpoint(Checkpoint(1, 2, None, ((5, 6), (7, 8))))
    for bad in (good.replace(b'"n":2', b'"n":3'), good.replace(b'"z":"', b'"z":"!'),
                b"\x03" + dumps({"next": 1, "changelog": 2, "order": None})):
        with pytest.raises(CorruptRecord):
            decode_checkpoint(bad)


def test_figures_and_a_novel_decision_round_trip(make_store: Factory) -> None:
    novel = Novelty("figures", "older", 0.75, ("58.8", "1,250"), ("58.7",), "figures differ")
    doc = StoredDocument("s", 1, 2, "ch", 7200.0, "nf", True, Decision(
        "id", Status.UNIQUE, 0.75, scope="s", hour=2, novel=novel, story="id"),
        figures="58.8 1,250 3")
    store = make_store()
    store.add(doc)
    store.commit()
    assert list(make_store().load()) == [doc]


def test_layout_v1_records_stay_readable_without_figures(tmp_path: Path) -> None:
    """A v1 record (before figures were kept) decodes with figures unknown; a v1 store is
    upgraded in place on open and keeps its records."""
    doc = _stored("a", 3, 4)
    v1 = b"\x01" + dumps({"n": 3, "h": 4, "c": "chan", "t": 14400.0, "nf": "text3", "i": True,
                          "d": doc.decision.as_dict()})
    assert decode_document(document_key(doc), v1) == doc  # figures None
    assert decode_document(document_key(doc), encode_document(doc)) == doc
    from rocksdict import Rdict

    from ndd_stream.state.rocks import RocksDBOptions

    db = Rdict(str(tmp_path / "v1"), options=RocksDBOptions().to_options())
    db.put(FORMAT_KEY, b"ndd-state-1")
    db.put(document_key(doc), v1)
    db.close()
    store = RocksStore(tmp_path / "v1")
    try:
        assert list(store.load()) == [doc]
    finally:
        store.close()
    db = Rdict(str(tmp_path / "v1"), options=RocksDBOptions().to_options())
    assert db.get(FORMAT_KEY) == FORMAT
    db.close()


def test_unknown_record_versions_are_refused() -> None:
    doc = _stored("a", 0, 1)
    with pytest.raises(CorruptRecord):
        decode_document(document_key(doc), b"\x09{}")


def _stream(n: int, seed: int) -> list[Document]:
    rnd = random.Random(seed)
    words = [f"w{i}" for i in range(60)]
    docs: list[Document] = []
    for i in range(n):
        if docs and rnd.random() < 0.4:
            base = rnd.choice(docs).text.split()
            base[rnd.randrange(len(base))] = rnd.choice(words)
            text = " ".join(base)
        else:
            text = " ".join(rnd.choices(words, k=rnd.randint(1, 30)))
        docs.append(Document(f"id{rnd.randrange(n)}", rnd.choice("xy"), "c",
                             1_700_000_000 + i * 900 + rnd.randint(-7200, 0), text))
    return docs


@pytest.mark.parametrize("reuse", [None, 0, 3000])
@pytest.mark.parametrize("figures", [False, True])
def test_restored_detector_continues_with_identical_decisions(
    make_store: Factory, figures: bool, reuse: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With figure-rich texts the novelty rule fires, and needs the restored figures.
    ``reuse``: the restore keeps none, some or (None) all first-pass signatures."""
    if reuse is not None:
        monkeypatch.setattr(detector_module, "RESTORE_REUSE_BYTES", reuse)
    docs = _stream(400, seed=11)
    if figures:
        rnd = random.Random(5)
        docs = [Document(d.identity, d.scope, d.channel, d.timestamp,
                         " ".join(w if rnd.random() < 0.8 else str(rnd.randrange(40))
                                  for w in d.text.split())) for d in docs]
    config = DetectorConfig(threshold=0.7 if not figures else 0.3, window_hours=6)
    reference = Detector(config)
    uninterrupted = [reference.decide(d) for d in docs]

    decided: list[Decision] = []
    detector = Detector(config, store=make_store())
    for i, doc in enumerate(docs):
        if i and i % 97 == 0:  # "crash": reopen the store, rebuild a fresh detector
            detector.store.commit()
            detector = Detector(config, store=make_store())
            assert detector.restore() > 0
            assert all(w.index.prepared for w in detector.windows())
        decided.append(detector.decide(doc))
    assert [(d.status, d.duplicate_of, d.similarity, d.novel) for d in decided] == [
        (d.status, d.duplicate_of, d.similarity, d.novel) for d in uninterrupted]
    assert not figures or any(d.novel and d.novel.reason == "figures" for d in decided)
    # the story too, and its tally but for replays (a replay restored shows the tally the
    # restore counted: members that left the window before the stop are not in it)
    assert [d.story for d in decided] == [d.story for d in uninterrupted]
    assert [(d.story_size, d.story_channels) for d in decided if not d.replayed] == [
        (d.story_size, d.story_channels) for d in uninterrupted if not d.replayed]
    assert any(d.story not in (d.identity, d.duplicate_of) for d in decided)  # chains


def test_a_restored_detector_keeps_the_version_a_reader_holds(make_store: Factory) -> None:
    """keep="complete": the kept version of each story is rebuilt from the stored decisions,
    so a stop between versions changes no supersession."""
    rnd = random.Random(3)
    words = [f"w{i}" for i in range(300)]
    docs: list[Document] = []
    stories = [rnd.choices(words, k=20) for _ in range(6)]
    for i in range(120):
        story = stories[rnd.randrange(len(stories))]
        if rnd.random() < 0.7:  # the story grows; else a copy that lost its end
            story += rnd.choices(words, k=rnd.randint(0, 8))
            text = story
        else:
            text = story[: len(story) - rnd.randint(1, 5)]
        docs.append(Document(f"id{i}", "s", "c", 1_700_000_000 + i * 600, " ".join(text)))
    config = DetectorConfig(threshold=0.3, window_hours=6, keep="complete")
    reference = Detector(config)
    want = [reference.decide(d) for d in docs]
    detector = Detector(config, store=make_store())
    got = []
    for i, doc in enumerate(docs):
        if i and i % 13 == 0:
            detector.store.commit()
            detector = Detector(config, store=make_store())
            detector.restore()
        got.append(detector.decide(doc))
    assert [(d.story, d.supersedes) for d in got] == [(d.story, d.supersedes) for d in want]
    assert sum(d.supersedes is not None for d in want) >= 5
