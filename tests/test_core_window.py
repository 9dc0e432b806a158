"""What a window keeps per document, in compact form: decisions, texts spilled to scratch
files, the index's rows. Decisions must not change with any of it."""

from __future__ import annotations

import dataclasses
import random

import pytest

from ndd_stream.core import window as window_module
from ndd_stream.core.detector import Detector, DetectorConfig
from ndd_stream.core.document import Decision, Document, Status
from ndd_stream.core.engine import available as engine_available
from ndd_stream.core.window import TextSpill, WindowDoc

needs_engine = pytest.mark.skipif(not engine_available(), reason="C kernels not built")


def _doc(identity: str, text: str, hour: int = 0, channel: str = "wire") -> Document:
    return Document(identity, "s", channel, 1_700_000_000 + hour * 3600.0, text)


def _stream(n: int, seed: int = 3) -> list[Document]:
    """Reports of a few templates, with repeats, other figures and other subjects, over a
    few hours and channels: every kind of decision, replays included."""
    rnd = random.Random(seed)
    names = ["Arbor", "Sun", "Texaco", "Comdisco", "Amoco"]
    docs: list[Document] = []
    for i in range(n):
        if docs and rnd.random() < 0.1:  # a redelivery: its identity again
            again = rnd.choice(docs[-50:])
            docs.append(again)
            continue
        name = rnd.choice(names)
        text = (f"{name.upper()} REPORTS RESULTS\n{name} said net was {rnd.randint(1, 9)}."
                f"{rnd.randint(0, 9)} mln dlrs vs {rnd.randint(1, 9)} mln, sales "
                f"{rnd.randint(10, 99)} mln, and {name} expects a better year "
                + " ".join(rnd.choice(["the", "market", "shares", "rose", "fell", "quarter",
                                        "company", "board", "dividend"]) for _ in range(30)))
        if docs and rnd.random() < 0.3:
            text = rnd.choice(docs[-30:]).text + rnd.choice(["", " Reuters", " 12.5 pct"])
        docs.append(_doc(f"i{i}", text, hour=i // 40, channel=rnd.choice(["a", "b"])))
    return docs


def test_a_replayed_plain_unique_decision_equals_the_original() -> None:
    det = Detector(DetectorConfig(threshold=0.3))
    seen = {}
    for doc in _stream(400):
        decision = det.decide(doc)
        if doc.identity in seen:
            assert decision == dataclasses.replace(seen[doc.identity], replayed=True)
        else:
            seen[doc.identity] = decision
    assert any(d.status is Status.UNIQUE and d.story_size == 1 for d in seen.values())


def test_plain_unique_decisions_are_kept_as_their_window_document() -> None:
    det = Detector(DetectorConfig(threshold=0.3))
    det.decide(_doc("a", "the central bank raised interest rates on tuesday"))
    window = next(det.windows())
    assert isinstance(window.decisions["a"], WindowDoc)
    assert window.decision("a") == Decision(
        "a", Status.UNIQUE, 0.0, scope="s", hour=window.docs[0].hour, story="a", story_size=1,
        story_channels=("wire",))


@needs_engine
@pytest.mark.parametrize("threshold", [0.3, 0.8])
def test_spilled_texts_decide_as_texts_in_memory(threshold: float,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    docs = _stream(600)
    monkeypatch.setattr(window_module, "SPILL_AFTER", 0)
    monkeypatch.setattr(TextSpill, "SEGMENT_BYTES", 4096)
    monkeypatch.setattr(TextSpill, "BUFFER_BYTES", 1024)
    det = Detector(DetectorConfig(threshold=threshold, window_hours=2))
    spilled = [det.decide(d) for d in docs]
    window = next(det.windows())
    held = [window_module._NF_SLOT.__get__(d, WindowDoc) for d in window.docs]
    if threshold < 0.5:  # the flat index reads no text there: spilled
        assert all(isinstance(h, tuple) for h in held)
        spill = window._spill
        assert isinstance(spill, TextSpill) and len(spill._files) < 40  # segments released
    else:
        assert not any(isinstance(h, tuple) for h in held)
    det_ref = Detector(DetectorConfig(threshold=threshold, window_hours=2))
    monkeypatch.setattr(window_module, "SPILL_AFTER", 10**9)
    assert spilled == [det_ref.decide(d) for d in docs]


def test_text_spill_reads_back_what_it_wrote(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TextSpill, "SEGMENT_BYTES", 1000)
    monkeypatch.setattr(TextSpill, "BUFFER_BYTES", 300)
    spill = TextSpill.open()
    assert spill is not None
    rnd = random.Random(1)
    written = []
    for number in range(200):
        data = bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 120)))
        written.append((number, data, spill.write(data, number, utf8=number % 2 == 1)))
        if number % 17 == 0:  # reads from the buffer and from the files, as they go
            for _, d, ref in written[-20:]:
                assert spill.read(ref) == d
    assert all(spill.read(ref) == d for _, d, ref in written)
    assert all(ref & 1 == number % 2 for number, _, ref in written)
    files = len(spill._files)
    spill.release_before(150)
    assert len(spill._files) < files
    assert all(spill.read(ref) == d for number, d, ref in written if number >= 150)
    spill.close()


def test_a_spill_that_cannot_write_keeps_its_texts_readable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TextSpill, "BUFFER_BYTES", 100)
    spill = TextSpill.open()
    assert spill is not None
    refs = [(spill.write(bytes([i]) * 60, i), bytes([i]) * 60) for i in range(3)]

    def full(*args: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(window_module.os, "pwrite", full)
    refs += [(spill.write(bytes([i]) * 60, i), bytes([i]) * 60) for i in range(3, 8)]
    assert spill.failed
    assert all(spill.read(ref) == data for ref, data in refs)
    spill.close()
