"""The gatherer's spill files (worker/spill.py): blobs come back as they went in, in any
order, and a segment's file is deleted once everything in it was taken back."""

from __future__ import annotations

import random
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ndd_stream.core.document import Document
from ndd_stream.worker.records import Source
from ndd_stream.worker.spill import Parked, Spill, decode, encode

_text = st.text(max_size=60)
_opt_text = st.none() | _text


@st.composite
def parked(draw: st.DrawFn) -> Parked:
    doc = Document(draw(_text), draw(_text), draw(_text),
                   draw(st.floats(allow_nan=False, allow_infinity=False)), draw(_text),
                   draw(st.booleans()))
    source = Source(draw(_text), draw(st.integers(0, 2**31)), draw(st.integers(0, 2**62)),
                    draw(st.none() | st.integers(0, 2**62)))
    admitted = draw(st.booleans())
    return Parked(doc, draw(st.binary(max_size=80)), draw(st.none() | st.binary(max_size=20)),
                  source, draw(_opt_text),
                  draw(st.integers(0, 2**62)) if admitted else -1,
                  draw(st.integers(-2**40, 2**40)) if admitted else 0,
                  draw(_text) if admitted else None, draw(_opt_text) if admitted else None)


@given(parked())
def test_a_blob_decodes_to_the_item_it_encodes(item: Parked) -> None:
    assert decode(encode(item)) == item


def test_a_lone_surrogate_in_an_identity_survives(tmp_path: Path) -> None:
    item = Parked(Document("id-\ud800", "global", "c", 1.0, "text"), b"raw", None,
                  Source("raw", 0, 1), None)
    spill = Spill(tmp_path / "s")
    assert spill.take(spill.put(item)) == item
    spill.close()


def test_segments_roll_and_are_deleted_once_taken_in_any_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ndd_stream.worker.spill.SEGMENT_BYTES", 1000)
    spill = Spill(tmp_path / "s")
    items = [Parked(Document(f"id-{i}", "global", "c", float(i), "x" * 150), b"r" * 50,
                    b"k", Source("raw", 0, i), None, i, i // 10, "nf", None)
             for i in range(40)]
    refs = [spill.put(item) for item in items]
    assert len({r.segment for r in refs}) > 5
    assert spill.items == 40 and spill.bytes == sum(r.length for r in refs)
    order = list(range(40))
    random.Random(1).shuffle(order)
    for n, i in enumerate(order, start=1):
        assert spill.take(refs[i]) == items[i]
        live = {refs[j].segment for j in order[n:]}
        on_disk = {int(p.stem) for p in (tmp_path / "s").glob("*.seg")}
        assert on_disk == live  # exactly the segments still holding items
    assert spill.items == 0 and spill.bytes == 0
    later = spill.put(items[0])  # after everything was taken: a fresh segment
    assert later.segment > max(r.segment for r in refs)
    spill.close()
    assert not (tmp_path / "s").exists()


def test_a_new_spill_forgets_the_files_of_an_earlier_process(tmp_path: Path) -> None:
    first = Spill(tmp_path / "s")
    first.put(Parked(Document("a", "g", "c", 0.0, "t"), b"", None, Source("raw", 0, 0), None))
    assert list((tmp_path / "s").glob("*.seg"))
    second = Spill(tmp_path / "s")  # a restart: the pending list is re-read from Kafka
    assert not (tmp_path / "s").exists() and second.items == 0


def test_the_blob_carries_every_field_of_a_document() -> None:
    """A field added to Document must be added to spill.encode/decode (and this list)."""
    assert [f.name for f in fields(Document)] == ["identity", "scope", "channel", "timestamp",
                                                  "text", "markup"]
    assert [f.name for f in fields(Source)] == ["topic", "partition", "offset", "timestamp_ms"]
