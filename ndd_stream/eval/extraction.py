"""Text extraction for evaluation: the core's modes, plus experimental ones from the lab.

HTML items go through :func:`ndd_stream.core.extract.extract_text` (``raw``, ``tags``,
``main``), exactly as the stream does. Plain-text items are used as they are whatever the
mode. Modes starting with ``lab-`` come from :mod:`ndd_stream.eval.extraction_lab`, where
candidate extractors are measured before they move into the core.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ndd_stream.core.extract import EXTRACT_MODES, extract_text
from ndd_stream.eval.corpus import Item
from ndd_stream.eval.extraction_lab import LAB_EXTRACTORS


def extraction_modes() -> tuple[str, ...]:
    return (*EXTRACT_MODES, *LAB_EXTRACTORS)


def extractor(mode: str) -> Callable[[str], str]:
    """The HTML-to-text function of ``mode``."""
    if mode in LAB_EXTRACTORS:
        return LAB_EXTRACTORS[mode]
    if mode in EXTRACT_MODES:
        return lambda raw: extract_text(raw, mode)
    raise ValueError(f"unknown extraction mode {mode!r}; choose from {extraction_modes()}")


@dataclass(frozen=True)
class Extracted:
    texts: list[str]
    html_pages: int
    ms_per_html_page: float
    failures: list[tuple[str, str]]


def extract_items(items: Sequence[Item], mode: str) -> Extracted:
    """Extract every item's text; a failing extractor falls back to the raw content."""
    fn = extractor(mode)
    texts: list[str] = []
    failures: list[tuple[str, str]] = []
    html_seconds = 0.0
    html_pages = 0
    for item in items:
        if not item.is_html:
            texts.append(item.content)
            continue
        start = time.perf_counter()
        try:
            texts.append(fn(item.content))
        except Exception as exc:  # an extractor bug must not end the evaluation
            failures.append((item.source, f"{exc.__class__.__name__}: {exc}"))
            texts.append(item.content)
        html_seconds += time.perf_counter() - start
        html_pages += 1
    per_page = 1000.0 * html_seconds / html_pages if html_pages else 0.0
    return Extracted(texts, html_pages, per_page, failures)
