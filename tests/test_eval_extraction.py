"""Extraction for evaluation: core modes, the lab's prose filter, plain text untouched."""

from __future__ import annotations

from pathlib import Path

from test_eval_support import article, html_page, write_cluster_corpus

from ndd_stream.eval.corpus import load_corpus
from ndd_stream.eval.extraction import extract_items, extraction_modes
from ndd_stream.eval.extraction_lab import main_prose, prose_blocks


def test_prose_filter_keeps_long_blocks_only() -> None:
    body = " ".join(["word"] * 40)
    text = f"Home | News\nBy Staff, May 1\n{body}\nShare this story\n{body}"
    assert prose_blocks(text) == f"{body}\n{body}"
    assert prose_blocks("short\nlines only") == "short\nlines only"  # too little: keep all


def test_main_prose_drops_navigation_and_scripts() -> None:
    page = html_page("T", article(3), site=1)
    text = main_prose(page)
    assert "var x1" not in text and "Section10" not in text
    assert article(3)[:60] in text


def test_extract_items_by_mode(tmp_path: Path) -> None:
    root = write_cluster_corpus(tmp_path / "c", clusters=1, size=2)
    (root / "plain.txt").write_text("<b>kept</b> as is", encoding="utf-8")
    corpus = load_corpus(root)
    assert set(extraction_modes()) >= {"raw", "tags", "main", "lab-main-prose"}
    for mode in extraction_modes():
        out = extract_items(corpus.items, mode)
        assert out.html_pages == 2 and not out.failures
        plain = out.texts[[i.source for i in corpus.items].index("plain.txt")]
        assert plain == "<b>kept</b> as is"
    assert "<script>" not in extract_items(corpus.items, "tags").texts[0]
