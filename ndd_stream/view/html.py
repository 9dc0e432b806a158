"""The view's one way to build HTML: every value from Kafka or a request goes through here.

:func:`html` fills a literal template; each value it is given is escaped by :func:`_text`,
unless it is :class:`Html` already (markup this module built). Where a value lands decides
how it is written:

* inside a tag (an attribute value): escaped (``& < > " '``), control characters shown as
  ``[U+XXXX]``;
* in text, a string is also isolated in ``<bdi>``, so a right-to-left or U+202E
  character in one field cannot reorder the line around it (numbers are not wrapped);
* :func:`plain` writes a running text (the pair's bodies) escaped but not isolated: the
  block it is in is the isolate.

Markup in an attribute raises (a bug, not data). ``Html`` is made only here;
tests/test_view_pure.py checks that no other module of the view builds markup with an
f-string, ``%`` or ``str.format``, calls ``Html(...)`` or imports another escaper, and that
every ``html(...)`` template is a literal. So text from a record cannot reach the page
without passing :func:`_text`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from html import escape
from string import Formatter
from typing import LiteralString
from urllib.parse import urlencode

# C0 (but tab, newline, carriage return), DEL, C1; the bidi embeddings, overrides and
# isolates (LRE RLE PDF LRO RLO, LRI RLI FSI PDI), and the ones that reorder invisibly
# (ALM; LRM/RLM are kept: ordinary marks of right-to-left text, harmless inside an isolate).
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u061c"
                     "\ufeff\u2028\u2029]")
_FORMATTER = Formatter()


class Html(str):
    """Markup that is safe to send: built by this module from literals and escaped values."""

    __slots__ = ()


EMPTY = Html("")


def visible(value: str) -> str:
    """``value`` with each control or bidi-formatting character replaced by ``[U+XXXX]``."""
    return CONTROL.sub(lambda m: f"[U+{ord(m.group()):04X}]", value)


def _text(value: object, spec: str = "") -> str:
    """The single escaping step: formatted, controls made visible, HTML-escaped."""
    formatted = format("" if value is None else value, spec)
    return escape(visible(formatted), quote=True)


@lru_cache(maxsize=512)
def _parsed(template: str) -> tuple[tuple[str, str | None, str, bool], ...]:
    """(literal, field, format spec, in a tag) per placeholder of a template."""
    out = []
    seen = ""
    for literal, field, spec, conversion in _FORMATTER.parse(template):
        if conversion:
            raise ValueError(f"no conversions in view templates: {template[:60]!r}")
        seen += literal
        in_tag = seen.rfind("<") > seen.rfind(">")
        out.append((literal, field, spec or "", in_tag))
    return tuple(out)


def html(template: LiteralString, *args: object, **kwargs: object) -> Html:
    """``template`` (a literal) with ``{}`` / ``{name}`` / ``{:.3f}`` filled in, every value
    escaped (and isolated in text) unless it is :class:`Html`."""
    out: list[str] = []
    auto = 0
    for literal, field, spec, in_tag in _parsed(template):
        out.append(literal)
        if field is None:
            continue
        if field == "":
            value, auto = args[auto], auto + 1
        elif field.isdigit():
            value = args[int(field)]
        else:
            value = kwargs[field]
        out.append(_field(value, spec, in_tag))
    return Html("".join(out))


def _field(value: object, spec: str, in_tag: bool) -> str:
    if isinstance(value, Html):
        if in_tag or spec:
            raise TypeError("markup placed inside a tag or formatted: a bug in a template")
        return value
    if in_tag:
        return _text(value, spec)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _text(value, spec)
    return "<bdi>" + _text(value, spec) + "</bdi>"


def plain(value: object) -> Html:
    """Running text (escaped, controls visible), not isolated: for a body inside its block."""
    return Html(_text(value))


def join(parts: Iterable[Html], sep: Html = EMPTY) -> Html:
    """Markup pieces joined (all of them already :class:`Html`)."""
    items = list(parts)
    for part in items:
        if not isinstance(part, Html):
            raise TypeError("join() takes markup built by html(); escape text with html()")
    return Html(sep.join(items))


def url(path: LiteralString, query: Mapping[str, object] | None = None) -> str:
    """A same-origin link: a literal path on this server and an encoded query string (so
    no ``javascript:`` or other scheme can come from data). Escaped again where placed."""
    if not path.startswith("/") or path.startswith("//"):
        raise ValueError(f"links stay on this server: {path!r}")
    pairs = {k: str(v) for k, v in (query or {}).items()}
    return path + ("?" + urlencode(pairs) if pairs else "")
