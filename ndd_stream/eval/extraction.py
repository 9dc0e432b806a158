"""Text extraction for evaluation: the core's modes, plus experimental ones from the lab.

With the core's modes (``raw``, ``tags``, ``main``) every item's text is built by
:func:`ndd_stream.core.items.compose_text`, exactly as the stream builds it: a JSONL
title field (when the corpus has one) then the body, each extracted per the mode, HTML
or plain text alike. Modes starting with ``lab-`` come from
:mod:`ndd_stream.eval.extraction_lab`, where candidate extractors are measured on HTML
pages before they move into the core; they leave plain text as it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from ndd_stream.core.extract import EXTRACT_MODES, ExtractMode, extract_text
from ndd_stream.core.items import compose_text
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
    core_mode = cast("ExtractMode", mode) if mode in EXTRACT_MODES else None
    texts: list[str] = []
    failures: list[tuple[str, str]] = []
    html_seconds = 0.0
    html_pages = 0
    for item in items:
        start = time.perf_counter()
        try:
            if core_mode is not None:  # the stream's own composition (core/items.py)
                parts = [item.title, item.content] if item.title_from_field else [item.content]
                text = compose_text(parts, core_mode)
            elif item.is_html:
                text = fn(item.content)
            else:
                text = item.content
        except Exception as exc:  # an extractor bug must not end the evaluation
            failures.append((item.source, f"{exc.__class__.__name__}: {exc}"))
            text = item.content
        if item.is_html:
            html_seconds += time.perf_counter() - start
            html_pages += 1
        texts.append(text)
    per_page = 1000.0 * html_seconds / html_pages if html_pages else 0.0
    return Extracted(texts, html_pages, per_page, failures)
