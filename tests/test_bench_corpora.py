"""The benchmark's extra workloads (bench/corpora.py) without the shared corpus: the
Reuters reader on a small SGML file written here, the repetitive stream on its synthetic
fallback."""

from __future__ import annotations

from pathlib import Path

from bench.corpora import RepetitiveStream, reuters_stream, reuters_texts, source_note

_SGM = """<!DOCTYPE lewis SYSTEM "lewis.dtd">
<REUTERS TOPICS="YES" NEWID="2">
<DATE>26-FEB-1987 15:02:20.00</DATE>
<TEXT><TITLE>LATER &amp; LONG</TITLE><BODY>{long}</BODY></TEXT>
</REUTERS>
<REUTERS TOPICS="NO" NEWID="1">
<DATE>26-FEB-1987 15:01:01.79</DATE>
<TEXT><TITLE>EARLIER</TITLE><BODY>{long}</BODY></TEXT>
</REUTERS>
<REUTERS TOPICS="NO" NEWID="3">
<DATE>27-FEB-1987 09:00:00.00</DATE>
<TEXT><TITLE>SHORT</TITLE><BODY>Too short a body.</BODY></TEXT>
</REUTERS>
"""


def test_reuters_items_are_dated_titled_and_squeezed_into_one_day(tmp_path: Path) -> None:
    (tmp_path / "reut2-000.sgm").write_text(_SGM.format(long="word " * 60), encoding="latin-1")
    texts = reuters_texts(tmp_path)
    assert [identity for identity, _ in texts] == ["reuters-1", "reuters-2"]  # by date
    assert texts[0][1].startswith("EARLIER\n") and texts[1][1].startswith("LATER & LONG\n")
    docs = reuters_stream(tmp_path)
    assert len(docs) == 2  # the 17-character body is left out
    assert docs[1].timestamp - docs[0].timestamp == 86_400 / 2
    assert {d.scope for d in docs} == {"global"}
    assert "Reuters-21578" in source_note("reuters", tmp_path)
    assert "UNAVAILABLE" in source_note("reuters", tmp_path / "absent")


def test_the_repetitive_stream_repeats_passages_and_is_deterministic(tmp_path: Path) -> None:
    absent = tmp_path / "absent"
    first = RepetitiveStream(10.0, path=absent).take(40)
    again = RepetitiveStream(10.0, path=absent).take(40)
    assert [d.text for d in first] == [d.text for d in again]
    assert all(3_000 < len(d.text) < 9_000 for d in first)
    passages = [p for d in first for p in d.text.split("\n")]
    assert len(set(passages)) < len(passages)  # popular passages recur across items
    assert first[1].timestamp - first[0].timestamp == 10.0
