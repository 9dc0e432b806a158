"""Candidate HTML extractors, measured by ``ndd-stream eval --extract lab-...``.

Experiments live here, outside the core, until their numbers justify moving them into
:mod:`ndd_stream.core.extract`.

``lab-main-prose``: resiliparse's main-content text, then only its prose blocks: lines
(block elements) of at least ``PROSE_MIN_WORDS`` white-space separated words.
Main-content extraction still lets through short blocks that differ between sites
carrying the same story: bylines, dates, captions, "related stories" and share links,
section names. doc_q divides by the larger q-gram set, so every such block lowers the
similarity of true duplicates and, shared across a site's pages, raises that of unrelated
stories. Running prose is what agencies syndicate. If the filter would leave under
``PROSE_MIN_CHARS`` characters (short items, lists), the main-content text is kept whole.
About 1.5-3 ms per page.
"""

from __future__ import annotations

from collections.abc import Callable

from ndd_stream.core.extract import extract_text

PROSE_MIN_WORDS = 15
PROSE_MIN_CHARS = 200


def prose_blocks(text: str, min_words: int = PROSE_MIN_WORDS) -> str:
    """Lines of ``text`` with at least ``min_words`` words, or ``text`` if too little is left."""
    kept = [line for line in text.splitlines() if len(line.split()) >= min_words]
    prose = "\n".join(kept)
    return prose if len(prose) >= PROSE_MIN_CHARS else text


def main_prose(html: str) -> str:
    """Main content (core ``main`` mode), reduced to its prose blocks."""
    return prose_blocks(extract_text(html, "main"))


LAB_EXTRACTORS: dict[str, Callable[[str], str]] = {"lab-main-prose": main_prose}
