"""Text extraction: what part of an item's text the signature is taken from.

* ``raw``: the text as is (already plain text).
* ``tags``: HTML tags, scripts, styles and comments removed, entities unescaped
  (selectolax/lexbor, ~1 ms for a news page). Plain text passes through unchanged
  apart from entity unescaping.
* ``main``: only the main content of a web page (resiliparse's main-content
  extractor, a few ms per page), dropping navigation, ads and boilerplate, which
  the paper (§5) names as the weak point of a plain tag-removal filter.
"""

from __future__ import annotations

import html
from typing import Literal

from selectolax.lexbor import LexborHTMLParser

ExtractMode = Literal["raw", "tags", "main"]
EXTRACT_MODES: tuple[ExtractMode, ...] = ("raw", "tags", "main")

_DROP = "script, style, noscript, template, svg, iframe, object"


def looks_like_html(text: str) -> bool:
    return "<" in text and ">" in text


def strip_tags(markup: str) -> str:
    """Visible text of an HTML fragment or page."""
    if not looks_like_html(markup):
        return html.unescape(markup) if "&" in markup else markup
    tree = LexborHTMLParser(markup)
    for node in tree.css(_DROP):
        node.decompose()
    root = tree.body or tree.root
    if root is None:
        return ""
    return root.text(separator=" ") or ""


def main_content(markup: str) -> str:
    """Main-content text of a web page; falls back to :func:`strip_tags`."""
    if not looks_like_html(markup):
        return strip_tags(markup)
    try:
        from resiliparse.extract.html2text import extract_plain_text
    except ImportError:  # pragma: no cover - resiliparse is a dependency
        return strip_tags(markup)
    text = extract_plain_text(markup, main_content=True)
    return text if text.strip() else strip_tags(markup)


def extract_text(raw: str, mode: ExtractMode = "tags") -> str:
    """The text of ``raw`` that the detector compares, per ``mode``."""
    if mode == "raw":
        return raw
    if mode == "tags":
        return strip_tags(raw)
    if mode == "main":
        return main_content(raw)
    raise ValueError(f"unknown extraction mode {mode!r}; choose one of {EXTRACT_MODES}")
