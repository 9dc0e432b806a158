"""Text extraction: what part of an item's text the signature is taken from.

* ``raw``: the text as is (already plain text).
* ``tags``: HTML tags, scripts, styles and comments removed, entities unescaped
  (selectolax/lexbor, ~1 ms for a news page). Plain text passes through unchanged
  apart from entity unescaping.
* ``main`` (default): only the main content of a web page (resiliparse's
  main-content extractor, ~2 ms per page), then only its prose blocks (lines of at
  least 15 words), dropping navigation, ads, captions and link lists, which the
  paper (§5) names as the weak point of a plain tag-removal filter. On the Gold Set
  this lifts DDD's pairwise F1 from 0.78 (tags) to 0.95 (docs/EVALUATION.md).

Which text is HTML: a field is parsed as HTML only when it carries markup
(:func:`looks_like_markup`: a doctype, an ``<html>`` or ``<br>`` tag, the closing tag of an
HTML element, or a tag with a quoted attribute). Agency copy writes tickers and company
names in angle brackets (``STANDARD OIL <SRD>``, ``<Video Shopping Mall Inc> said``);
parsed as HTML they became
elements (``<NAV>`` a navigation block, ``<Video ...>`` a video) and main-content extraction
dropped the story with them. Plain text is only entity-unescaped and, in ``main`` mode, cut
to its prose blocks.

Bounded work per item. resiliparse's main-content extractor (and selectolax's parser)
take time growing with the square of the nesting depth: 50,000 nested ``<div>`` cost 95 s.
So a page is first parsed by resiliparse's linear-time parser, and past the nesting limit
(``max_html_depth``, or a depth at which elements x depth would pass
:data:`WORK_BUDGET`) it is extracted as flat text: all its visible text, by resiliparse's
plain-text extraction (linear time), then in ``main`` mode its prose blocks. A page of
over 125,000 tags is not parsed: its tags are stripped slice by slice.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING, Literal

from ndd_stream.core import kernels

if TYPE_CHECKING:
    from resiliparse.parse.html import HTMLTree

# The HTML parsers are imported by the functions that parse HTML: a feed of plain text
# never loads them.

ExtractMode = Literal["raw", "tags", "main"]
DEFAULT_EXTRACT: ExtractMode = "main"
PROSE_MIN_WORDS = 15  # a line this long is prose, not navigation (12-25 all work as well)
PROSE_MIN_CHARS = 200  # below this the filter left too little: keep the text whole
EXTRACT_MODES: tuple[ExtractMode, ...] = ("raw", "tags", "main")
DEFAULT_MAX_HTML_DEPTH = 128  # Gold Set pages nest 8-60 deep (median 18)
WORK_BUDGET = 2_000_000
"""Most elements x nesting depth extracted structurally (under 0.1 s of main-content
extraction): a 2 MB page of 285,000 elements at depth 100 would take over a second."""
MIN_STRUCTURED_DEPTH = 16
"""A page with so many tags that the budget leaves less depth than this (over 125,000
tags; a large real page has some 10,000) is not parsed at all: its tags are stripped in
slices (:func:`sliced_text`). Main-content extraction costs about 1.5 us per element
even on a flat page, and every call into the C parsers holds the GIL (a worker's event
loop waits meanwhile): slices keep each hold to about a millisecond."""
SLICE_CHARS = 65_536

_DROP = "script, style, noscript, template, svg, iframe, object"


def looks_like_html(text: str) -> bool:
    """Angle brackets at all (a cheap first test: no ``<`` and ``>``, no markup)."""
    return "<" in text and ">" in text


_MARKUP = re.compile(
    r"<!doctype\s+html|<html[\s>]|<br\s*/?>|</(?:p|div|a|span|td|tr|li|body|html|title|h[1-6]"
    r"|b|i|u|em|strong|ul|ol|table|tbody|thead|th|section|article|header|footer|nav|main"
    r"|script|style|font|center|small|sup|sub|blockquote|pre|code|form|label|head|dl|dt|dd"
    r"|figure|figcaption|noscript|iframe|select|option|button)\s*>"
    r"|<[a-z][a-z0-9]*\s[^<>]*?\b[a-z-]+\s*=\s*[\"']",
    re.IGNORECASE,
)


def looks_like_markup(text: str) -> bool:
    """True for an HTML page or fragment: a doctype, an html tag, a line break, a closing
    tag of an HTML element or a tag with a quoted attribute. Stricter than
    :func:`looks_like_html`, because agency text writes company names in angle brackets
    (``<AMERICAN EXPRESS CO>``) and never closes them."""
    return looks_like_html(text) and _MARKUP.search(text, 0, 200_000) is not None


def too_deep(tree: HTMLTree, markup: str, max_depth: int) -> bool:
    """True when ``tree`` nests deeper than ``max_depth``, or deeper than the depth at
    which its elements (at most the ``<`` of ``markup``) times the depth would pass
    :data:`WORK_BUDGET`. One CSS query of child
    combinators: C code whose cost is bounded by elements x that depth, at most about
    0.1 s for a 2 MB page."""
    tags = markup.count("<")
    limit = min(max_depth, WORK_BUDGET // max(1, tags))
    if tags <= limit:  # fewer elements than levels: cannot nest that deep
        return False
    document = tree.document
    if document is None:
        return False
    return document.query_selector(" > ".join(["*"] * (limit + 1))) is not None


def too_many_tags(markup: str) -> bool:
    """More tags than :data:`WORK_BUDGET` allows at :data:`MIN_STRUCTURED_DEPTH`."""
    return markup.count("<") > WORK_BUDGET // MIN_STRUCTURED_DEPTH


_BLOCK_TAG = re.compile(r"</?(?:p|div|br|li|h[1-6]|tr|td|th|table|section|article|ul|ol|"
                        r"blockquote|pre|header|footer|main)\b[^<>]*>", re.IGNORECASE)
_ANY_TAG = re.compile(r"<[^<>]*>")
_SKIPPED = re.compile(r"<(script|style|noscript|template|svg)\b.*?</\1\s*>|<!--.*?-->",
                      re.IGNORECASE | re.DOTALL)
_BLANKS = re.compile(r"[ \t\r\f\v]+")


def sliced_text(markup: str) -> str:
    """The text of a page with too many tags to parse: tags stripped (block tags end a
    line, scripts, styles and comments dropped within a slice), entities unescaped, in
    slices of about :data:`SLICE_CHARS` cut before a ``<``, so that no single call into C
    runs long (each slice is a few regex passes, about a millisecond)."""
    out: list[str] = []
    start = 0
    while start < len(markup):
        cut = markup.find("<", start + SLICE_CHARS)
        end = len(markup) if cut < 0 else cut
        piece = _SKIPPED.sub(" ", markup[start:end])
        piece = _ANY_TAG.sub(" ", _BLOCK_TAG.sub("\n", piece))
        out.append(_BLANKS.sub(" ", html.unescape(piece)))
        start = end
    return "\n".join(line.strip() for line in "".join(out).splitlines() if line.strip())


def flat_text(tree: HTMLTree) -> str:
    """All visible text of a parsed page, one line per block, in linear time."""
    from resiliparse.extract.html2text import extract_plain_text

    return str(extract_plain_text(tree, main_content=False))


def strip_tags(markup: str, max_depth: int = DEFAULT_MAX_HTML_DEPTH,
               is_html: bool | None = None) -> str:
    """Visible text of an HTML fragment or page (flat text past the nesting limit); plain
    text (no markup) with its entities unescaped. ``is_html``: :func:`looks_like_markup`
    of the text when the caller knows it."""
    if not (looks_like_markup(markup) if is_html is None else is_html):
        return plain_text(markup)
    if too_many_tags(markup):
        return sliced_text(markup)
    from resiliparse.parse.html import HTMLTree
    from selectolax.lexbor import LexborHTMLParser

    parsed = HTMLTree.parse(markup)
    if too_deep(parsed, markup, max_depth):
        return flat_text(parsed)
    tree = LexborHTMLParser(markup)
    for node in tree.css(_DROP):
        node.decompose()
    root = tree.body or tree.root
    if root is None:
        return ""
    return root.text(separator=" ") or ""


def prose_blocks(text: str, min_words: int = PROSE_MIN_WORDS) -> str:
    """The lines of ``text`` with at least ``min_words`` words, or ``text`` if too little
    would be left (short items, titles); in C for ASCII text."""
    fast = kernels.prose_blocks(text, min_words, PROSE_MIN_CHARS)
    if fast is not None:
        return fast
    # split at most min_words - 1 times: a line's first words decide (a paragraph is long)
    kept = [line for line in text.splitlines()
            if len(line.split(None, min_words - 1)) >= min_words]
    prose = "\n".join(kept)
    return prose if len(prose) >= PROSE_MIN_CHARS else text


def plain_text(text: str) -> str:
    """A field without markup: entities unescaped (``&amp;``), nothing else changed."""
    return html.unescape(text) if "&" in text else text


def main_content(markup: str, max_depth: int = DEFAULT_MAX_HTML_DEPTH,
                 is_html: bool | None = None) -> str:
    """Main-content prose of a web page (or of plain text); see the module docstring.
    ``is_html``: :func:`looks_like_markup` of the text when the caller knows it."""
    if not (looks_like_markup(markup) if is_html is None else is_html):
        return prose_blocks(plain_text(markup))
    if too_many_tags(markup):
        return prose_blocks(sliced_text(markup))
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    tree = HTMLTree.parse(markup)
    if too_deep(tree, markup, max_depth):
        return prose_blocks(flat_text(tree))
    text = extract_plain_text(tree, main_content=True)
    return prose_blocks(text if text.strip() else strip_tags(markup, max_depth, True))


def extract_text(raw: str, mode: ExtractMode = DEFAULT_EXTRACT,
                 max_depth: int = DEFAULT_MAX_HTML_DEPTH, is_html: bool | None = None) -> str:
    """The text of ``raw`` that the detector compares, per ``mode``; HTML nesting deeper
    than ``max_depth`` is extracted as flat text (``is_html``: :func:`looks_like_markup`
    of ``raw`` when the caller knows it)."""
    if mode == "main":
        return main_content(raw, max_depth, is_html)
    if mode == "raw":
        return raw
    if mode == "tags":
        return strip_tags(raw, max_depth, is_html)
    raise ValueError(f"unknown extraction mode {mode!r}; choose one of {EXTRACT_MODES}")
