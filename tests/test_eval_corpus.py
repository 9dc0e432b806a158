"""Corpus loading: clusters, encodings, JSONL, and bad files reported and skipped."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
from test_eval_support import article, write_cluster_corpus

from ndd_stream.eval.corpus import JsonlFields, load_corpus
from ndd_stream.eval.decoding import decode_bytes


def test_folder_corpus_reads_clusters_and_titles(tmp_path: Path) -> None:
    corpus = load_corpus(write_cluster_corpus(tmp_path / "c", clusters=3, size=3))
    assert len(corpus.items) == 9 and not corpus.skipped
    assert sorted(corpus.clusters) == ["c0", "c1", "c2"]
    assert all(item.is_html for item in corpus.items)
    assert corpus.items[0].title == "Story 0 version 0"


def test_latin1_and_declared_charsets_decode() -> None:
    text = (
        "Le président de la République a déclaré mercredi que le gouvernement allait "
        "présenter un projet de loi sur la sécurité des élèves, à la rentrée prochaine. "
    ) * 5
    assert decode_bytes(text.encode("latin-1")).text == text
    assert decode_bytes(text.encode("cp1252")).text == text
    assert decode_bytes(text.encode("utf-8")).text == text
    declared = f'<meta charset="iso-8859-15"><p>{text} €</p>'
    assert decode_bytes(declared.encode("iso-8859-15")).text == declared
    assert decode_bytes("hello world".encode("utf-8-sig")).text == "hello world"
    utf16 = "Grüße aus Köln, " * 10
    assert decode_bytes(utf16.encode("utf-16")).text == utf16


def test_corrupt_files_are_reported_and_skipped(tmp_path: Path) -> None:
    root = write_cluster_corpus(tmp_path / "c", clusters=2, size=2)
    (root / "c0" / "empty.html").write_bytes(b"")
    (root / "c0" / "blank.txt").write_bytes(b"  \r\n\t ")
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + os.urandom(500)
    (root / "c1" / "image.png").write_bytes(png)
    (root / "c1" / "noise.html").write_bytes(bytes(range(128, 256)) * 8)
    corpus = load_corpus(root)
    reasons = {s.source: s.reason for s in corpus.skipped}
    assert reasons["c0/empty.html"] == "empty"
    assert reasons["c0/blank.txt"] == "empty"
    assert reasons["c1/image.png"] == "binary"
    assert reasons["c1/noise.html"].startswith("undecodable")
    assert len(corpus.items) == 4


def test_loose_files_are_singletons(tmp_path: Path) -> None:
    root = write_cluster_corpus(tmp_path / "c", clusters=1, size=2)
    (root / "lonely.txt").write_text(article(5), encoding="utf-8")
    corpus = load_corpus(root)
    lonely = next(i for i in corpus.items if i.source == "lonely.txt")
    assert lonely.cluster == "singleton:lonely.txt" and not lonely.is_html


def test_jsonl_corpus_with_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    rows = [
        {"id": "a", "text": article(1), "cluster": "x", "timestamp": "2024-01-01T10:00:00Z"},
        {"id": "b", "text": article(1), "cluster": "x", "timestamp": 1704103300},
        {"id": "c", "text": "<html><title>T</title><p>hello there</p></html>", "cluster": None},
        {"id": "d", "text": "", "cluster": "y"},
        {"id": "a", "text": "again", "cluster": "y"},
    ]
    lines = [orjson.dumps(r).decode() for r in rows] + ["{not json", "[1, 2]"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    corpus = load_corpus(path, JsonlFields())
    assert [i.identity for i in corpus.items] == ["a", "b", "c"]
    assert corpus.items[0].timestamp == 1704103200.0
    assert corpus.items[2].cluster == "singleton:c" and corpus.items[2].is_html
    assert corpus.items[2].title == "T"
    assert len(corpus.skipped) == 4
