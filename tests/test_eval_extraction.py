"""Extraction for evaluation: the core's modes, as the stream applies them."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from test_eval_support import article, html_page, write_cluster_corpus

from ndd_stream.core.detector import DEFAULT_THRESHOLD
from ndd_stream.core.extract import EXTRACT_MODES, extract_text, prose_blocks
from ndd_stream.core.items import ItemFormat, parse_object
from ndd_stream.eval.corpus import load_corpus
from ndd_stream.eval.extraction import extract_items, extraction_modes
from ndd_stream.eval.runner import EvalConfig
from ndd_stream.settings import Settings


def test_prose_filter_keeps_long_blocks_only() -> None:
    body = " ".join(["word"] * 40)
    text = f"Home | News\nBy Staff, May 1\n{body}\nShare this story\n{body}"
    assert prose_blocks(text) == f"{body}\n{body}"
    assert prose_blocks("short\nlines only") == "short\nlines only"  # too little: keep all


_SPACE = st.sampled_from([" ", "  ", "\t", "\xa0", "\u3000", " \t "])
_LINE = st.lists(st.text("abc,.1", min_size=1, max_size=4), min_size=0, max_size=6).flatmap(
    lambda words: st.tuples(*(_SPACE for _ in range(len(words) + 1))).map(
        lambda gaps: gaps[0] + "".join(w + g for w, g in zip(words, gaps[1:], strict=True))))


@given(st.lists(_LINE, max_size=12), st.integers(1, 5))
def test_prose_filter_counts_words_as_a_whole_split_does(lines: list[str], min_words: int) -> None:
    """The filter splits a line at most ``min_words - 1`` times: the same lines as counting
    every word (around the threshold, with any whitespace)."""
    text = "\n".join(lines)
    kept = [line for line in text.splitlines() if len(line.split()) >= min_words]
    prose = "\n".join(kept)
    assert prose_blocks(text, min_words) == (prose if len(prose) >= 200 else text)
    long = "\n".join(line * 20 for line in lines)  # past the 200 characters kept whole
    kept = [line for line in long.splitlines() if len(line.split()) >= min_words]
    prose = "\n".join(kept)
    assert prose_blocks(long, min_words) == (prose if len(prose) >= 200 else long)


def test_main_prose_drops_navigation_and_scripts() -> None:
    page = html_page("T", article(3), site=1)
    text = extract_text(page, "main")
    assert "var x1" not in text and "Section10" not in text
    assert article(3)[:60] in text


def test_extract_items_by_mode(tmp_path: Path) -> None:
    root = write_cluster_corpus(tmp_path / "c", clusters=1, size=2)
    (root / "plain.txt").write_text("<b>kept</b> as is", encoding="utf-8")
    corpus = load_corpus(root)
    assert extraction_modes() == EXTRACT_MODES == ("raw", "tags", "main")
    for mode in extraction_modes():
        out = extract_items(corpus.items, mode)
        assert out.html_pages == 2 and not out.failures
        plain = out.texts[[i.source for i in corpus.items].index("plain.txt")]
        assert plain == extract_text("<b>kept</b> as is", mode)  # as the stream treats it
    assert "<script>" not in extract_items(corpus.items, "tags").texts[0]


def test_eval_judges_the_text_the_stream_judges(tmp_path: Path) -> None:
    """JSONL with a title field, a plain .txt and an HTML page: eval's text for DDD equals
    the text core.items builds for the same fields, in every core mode."""
    body = article(5)
    page = html_page("Page title", article(6), site=2)
    root = tmp_path / "c"
    (root / "a").mkdir(parents=True)
    (root / "a" / "story.txt").write_text("Short line\nBy Reporter\n" + body, encoding="utf-8")
    (root / "a" / "page.html").write_text(page, encoding="utf-8")
    jsonl = tmp_path / "items.jsonl"
    jsonl.write_text(
        '{"id": "x1", "cluster": "k", "title": "Breaking headline here", "text": '
        + json.dumps(body) + "}\n",
        encoding="utf-8",
    )
    for mode in EXTRACT_MODES:
        fmt = ItemFormat(extract=mode)
        folder = load_corpus(root)
        texts = dict(zip([i.source for i in folder.items],
                         extract_items(folder.items, mode).texts, strict=True))
        for name, content in (("story.txt", "Short line\nBy Reporter\n" + body),
                              ("page.html", page)):
            stream = parse_object({"text": content}, fmt, "p", fallback_timestamp=0.0)
            assert not hasattr(stream, "reason"), stream
            key = next(k for k in texts if k.endswith(name))
            assert texts[key] == stream.text, (mode, name)
        items = load_corpus(jsonl).items
        got = extract_items(items, mode).texts[0]
        stream = parse_object({"title": "Breaking headline here", "text": body}, fmt, "p",
                              fallback_timestamp=0.0)
        assert got == stream.text and got.startswith("Breaking headline here"), mode


def test_eval_dedup_and_worker_share_their_defaults() -> None:
    config = EvalConfig(corpus=Path("."))
    assert config.ddd_threshold == DEFAULT_THRESHOLD == Settings.model_fields["threshold"].default
    assert config.extract == Settings.model_fields["extract"].default == ItemFormat().extract
