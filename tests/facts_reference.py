"""The per-item facts as released (3588269: ``core.novelty.figures`` with ``core.subject``,
``core.headline`` and ``core.quantities.tokens``), frozen here so that faster versions can
be checked to give byte-identical facts (tests/test_facts_identity.py). Copied, not
imported: these must not change when the core does."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ndd_stream.core.normalize import normal_form

SCALES = ("thousand", "mln", "million", "millions", "bln", "billion", "billions", "trillion")

_SCALED = re.compile(r"(\d+(?:[.,]\d+)*)(?:[ \t-]*\r?\n?[ \t]*(" + "|".join(SCALES) + r")\b)?",
                     re.IGNORECASE)
_FIGURE = re.compile(r"\d+(?:[.,]\d+)*")
_FIGURE_ASCII = re.compile(rb"[0-9]+(?:[.,][0-9]+)*")
_RUN_BYTES = bytes(c if c in b"0123456789.," else 0x20 for c in range(256))
_SCALE_WORD = re.compile(r"(?:" + "|".join(SCALES) + r")\b")
_STEMS = ("thousand", "mln", "million", "bln", "billion", "trillion")
_RUN = frozenset("0123456789.,")
_GAP_CHARS = frozenset(" \t-\r\n")
_GAP = re.compile(r"[ \t-]*\r?\n?[ \t]*")
_FIRST_WORD = re.compile(r"[^\W\d_]{2,}")
_WORD = re.compile(r"[^\W_]+")
MAX_WORDS = 24


def figures(text: str) -> str:
    parts = []
    subj = subject(text)
    if subj:
        parts.append("^" + subj)
    words = headline_words(text)
    if words:
        parts.append("#" + ",".join(words))
    parts.extend(tokens(text).values())
    return " ".join(parts)


def headline_words(text: str) -> list[str]:
    first = text.partition("\n")[0].lower()
    return list(dict.fromkeys(_WORD.findall(first)))[:MAX_WORDS]


def subject(text: str) -> str:
    first, _, rest = text.partition("\n")
    m = _FIRST_WORD.search(first)
    if m is None or not rest:
        return ""
    word = m.group()
    if not (text.isascii() and word.isascii()):
        return normal_form(word) if _named(word).search(rest) else ""
    lower, low = word.lower(), rest.lower()
    capital = word[0].upper()
    i = low.find(lower)
    while i >= 0:
        end = i + len(word)
        if (rest[i] == capital and (i == 0 or not _is_word(rest[i - 1]))
                and (end == len(rest) or not _is_word(rest[end]))):
            return lower
        i = low.find(lower, i + 1)
    return ""


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _named(word: str) -> re.Pattern[str]:
    return re.compile(r"(?<!\w)" + re.escape(word[0].upper()) + "(?i:" + re.escape(word[1:])
                      + r")(?!\w)")


def tokens(text: str) -> dict[str, str]:
    if not text.isascii():
        return tokens_reference(text)
    runs = _runs(text)
    if not runs:
        return {}
    scaled = _scaled(text)
    return {k: f"{raw}_{scaled[k]}" if k in scaled else raw for k, raw in runs.items()}


def tokens_reference(text: str) -> dict[str, str]:
    runs: dict[str, str] = {}
    scaled: dict[str, str] = {}
    for m in _SCALED.finditer(text):
        k = m.group(1).replace(",", "")
        runs.setdefault(k, m.group(1))
        if m.group(2):
            scaled.setdefault(k, m.group(2).lower())
    return {k: f"{raw}_{scaled[k]}" if k in scaled else raw for k, raw in runs.items()}


def _runs(text: str) -> dict[str, str]:
    seen: dict[str, str] = {}
    for run in text.encode("ascii").translate(_RUN_BYTES).split():
        run = run.strip(b".,")
        if run.isdigit():
            digits = run.decode("ascii")
            seen.setdefault(digits, digits)
        elif run:
            for raw in _FIGURE_ASCII.findall(run):
                seen.setdefault(raw.replace(b",", b"").decode("ascii"), raw.decode("ascii"))
    return seen


def _scaled(text: str) -> dict[str, str]:
    low = text.lower()
    out: dict[str, str] = {}
    for i in sorted(_places(low)):
        m = _SCALE_WORD.match(low, i)
        if m is None:
            continue
        j = i
        while j and low[j - 1] in _GAP_CHARS:
            j -= 1
        end = j
        while j and low[j - 1] in _RUN:
            j -= 1
        if j == end:
            continue
        last = _last(_FIGURE.finditer(text, j, end))
        if last is None or not _GAP.fullmatch(text, last.end(), i):
            continue
        out.setdefault(last.group().replace(",", ""), m.group())
    return out


def _places(low: str) -> list[int]:
    out = []
    for stem in _STEMS:
        i = low.find(stem)
        while i >= 0:
            out.append(i)
            i = low.find(stem, i + 1)
    return out


def _last(matches: Iterator[re.Match[str]]) -> re.Match[str] | None:
    out = None
    for out in matches:  # noqa: B007 (the last one is wanted)
        pass
    return out
