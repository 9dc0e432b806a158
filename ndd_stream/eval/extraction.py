"""Text extraction for evaluation: the core's modes, applied as the stream applies them.

Every item's text is built by :func:`ndd_stream.core.items.compose_text`, exactly as the
stream builds it: a JSONL title field (when the corpus has one) then the body, each
extracted per the mode (``raw``, ``tags``, ``main``), HTML or plain text alike. A new
extractor is measured by adding it to :mod:`ndd_stream.core.extract` as a mode.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from ndd_stream.core.extract import EXTRACT_MODES, ExtractMode
from ndd_stream.core.items import compose_text
from ndd_stream.eval.corpus import Item


def extraction_modes() -> tuple[str, ...]:
    return EXTRACT_MODES


@dataclass(frozen=True)
class Extracted:
    texts: list[str]
    html_pages: int
    ms_per_html_page: float
    failures: list[tuple[str, str]]


def extract_items(items: Sequence[Item], mode: str) -> Extracted:
    """Extract every item's text; a failing extractor falls back to the raw content."""
    if mode not in EXTRACT_MODES:
        raise ValueError(f"unknown extraction mode {mode!r}; choose from {EXTRACT_MODES}")
    core_mode = cast("ExtractMode", mode)
    texts: list[str] = []
    failures: list[tuple[str, str]] = []
    html_seconds = 0.0
    html_pages = 0
    for item in items:
        start = time.perf_counter()
        try:
            # the stream's own composition (core/items.py)
            parts = [item.title, item.content] if item.title_from_field else [item.content]
            text = compose_text(parts, core_mode)
        except Exception as exc:  # an extractor bug must not end the evaluation
            failures.append((item.source, f"{exc.__class__.__name__}: {exc}"))
            text = item.content
        if item.is_html:
            html_seconds += time.perf_counter() - start
            html_pages += 1
        texts.append(text)
    per_page = 1000.0 * html_seconds / html_pages if html_pages else 0.0
    return Extracted(texts, html_pages, per_page, failures)
