"""Figures as quantities: "8.7 mln" is 8,700,000 written to the nearest 100,000.

Agencies write one figure many ways: ``8.7 mln dlrs`` and ``8,700,000``, ``1.46 billion``
and ``1,459,193,000``, a result table in thousands and its rewrite in millions. The novelty
rule (core.novelty) compares figures as quantities, so a copy that re-writes its figures
is not a report with other figures.

A figure token is the figure as written, with its scale word when one follows it (after
spaces, a hyphen or a line break), joined by ``_`` (``8.7_mln``; tokens are kept
space-separated per window document). Its quantity is ``mantissa * 10**exponent`` where the
exponent is that of the last written digit plus the scale's. Two tokens name **the same
quantity** when they are written alike (same digits without thousands commas, whatever the
scale word: a table repeats ``1.7 mln vs 1.4``), or when both are numbers and they agree once both
are rounded to the last written digit of the coarser one, provided the coarser has two
significant digits or a scale word: ``2.3_mln`` = ``2,303,000``, but ``8`` is not
``8.25`` (a rate is not a rounding of another).

Matching is a relation, not a pairing: a figure is shared when the other text has a figure
of the same quantity. So the verdict does not depend on the order of the figures, and the
brute-force reference (every pair compared) gives the same sets.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

SCALES: dict[str, int] = {"thousand": 3, "mln": 6, "million": 6, "millions": 6,
                          "bln": 9, "billion": 9, "billions": 9, "trillion": 12}
"""Scale words that follow a figure, and their powers of ten."""

_SCALED = re.compile(r"(\d+(?:[.,]\d+)*)(?:[ \t-]*\r?\n?[ \t]*(" + "|".join(SCALES) + r")\b)?",
                     re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:,\d+)*(?:\.\d+)?")
_FIGURE = re.compile(r"\d+(?:[.,]\d+)*")
_FIGURE_ASCII = re.compile(rb"[0-9]+(?:[.,][0-9]+)*")  # \d on ASCII text
_RUN_BYTES = bytes(c if c in b"0123456789.," else 0x20 for c in range(256))
_SCALE_WORD = re.compile(r"(?:" + "|".join(SCALES) + r")\b")
_STEMS = ("thousand", "mln", "million", "bln", "billion", "trillion")  # every scale starts so
_RUN = frozenset("0123456789.,")
_GAP_CHARS = frozenset(" \t-\r\n")  # what may stand between a figure and a scale word
_GAP = re.compile(r"[ \t-]*\r?\n?[ \t]*")  # what may stand between a figure and its scale


def tokens(text: str) -> dict[str, str]:
    """The distinct figure tokens of ``text`` in order of first appearance, by key. A figure
    carries the scale word of its first occurrence that has one."""
    if not text.isascii():
        return tokens_reference(text)
    runs = _runs(text)
    if not runs:
        return {}
    scaled = _scaled(text)
    return {k: f"{raw}_{scaled[k]}" if k in scaled else raw for k, raw in runs.items()}


def tokens_reference(text: str) -> dict[str, str]:
    """:func:`tokens` by one pattern over the whole text (slower; the definition)."""
    runs: dict[str, str] = {}
    scaled: dict[str, str] = {}
    for m in _SCALED.finditer(text):
        k = m.group(1).replace(",", "")
        runs.setdefault(k, m.group(1))
        if m.group(2):
            scaled.setdefault(k, m.group(2).lower())
    return {k: f"{raw}_{scaled[k]}" if k in scaled else raw for k, raw in runs.items()}


def _runs(text: str) -> dict[str, str]:
    """Key -> first spelling of every figure of ASCII ``text``: every character but digits
    and separators becomes a space in one C pass, so the pattern only runs on the few runs
    that are not plain digits (a figure never spans a space: the same result, ~4x faster)."""
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
    """Key -> scale word, for the figures of ASCII ``text`` written with one. Scale words
    are found first (one scan of the lower-cased text), then the figure is the last one of
    the run of digits and separators before each, when only spaces, a hyphen or a line
    break stand between them."""
    low = text.lower()  # ASCII: the same positions
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
        # the maximal run text[j:end] holds the figure; figures never cross its ends
        last = _last(_FIGURE.finditer(text, j, end))
        if last is None or not _GAP.fullmatch(text, last.end(), i):
            continue
        out.setdefault(last.group().replace(",", ""), m.group())
    return out


def _places(low: str) -> list[int]:
    """Where a scale word may begin: str.find per stem (a C search, ~3x faster than
    scanning with the alternation, which has no literal prefix)."""
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


def key(token: str) -> str:
    """What figures written alike share: the digits as written, without thousands commas
    (and without the scale word: ``108 billion`` repeated as ``108`` is the same figure)."""
    return token.partition("_")[0].replace(",", "")


def written(token: str) -> str:
    """The figure as it appears in the text (without the scale word)."""
    return token.partition("_")[0]


def quantity(token: str) -> tuple[int, int, int] | None:
    """(mantissa, exponent of the last written digit, significant digits), or None when the
    figure is not a plain number (``1.2.3``, a date ``3.4.87`` stays a string)."""
    raw, _, scale = token.partition("_")
    if not _NUMBER.fullmatch(raw):
        return None
    whole, _, frac = raw.replace(",", "").partition(".")
    mantissa = int(whole + frac)
    return mantissa, SCALES.get(scale, 0) - len(frac), len(str(mantissa))


def same(a: str, b: str) -> bool:
    """Do the two tokens name the same quantity (up to the rounding of the coarser)?"""
    if key(a) == key(b):
        return True
    qa, qb = quantity(a), quantity(b)
    if qa is None or qb is None:
        return False
    if qa[1] < qb[1]:
        a, b, qa, qb = b, a, qb, qa
    (ma, ea, digits), (mb, eb, _) = qa, qb
    # the coarser (either, on a tie) must be a rounding, not a small integer
    if digits < 2 and "_" not in a and not (ea == eb and "_" in b):
        return False
    return ma != 0 and _rounded(mb, eb, ea) == ma


def _rounded(mantissa: int, exponent: int, to: int) -> int:
    """The mantissa at exponent ``to`` >= ``exponent``, rounded half up."""
    step = 10 ** (to - exponent)
    return (2 * mantissa + step) // (2 * step)


def differing(new: list[str], old: list[str]) -> tuple[list[str], list[str]]:
    """Tokens of ``new`` with no same quantity in ``old``, and of ``old`` with none in
    ``new``. Exact keys first; then each remaining token is looked up by its rounding at
    each exponent of the other side, so the cost is linear in the figures (an earnings
    table compared pair by pair cost ~0.5 ms), with the verdict of :func:`same`."""
    keys_new, keys_old = {key(t) for t in new}, {key(t) for t in old}
    rest_new = [t for t in new if key(t) not in keys_old]
    rest_old = [t for t in old if key(t) not in keys_new]
    if not rest_new and not rest_old:
        return [], []
    parsed_new, parsed_old = _parsed(new), _parsed(old)
    return ([t for t in rest_new if not _matched(t, parsed_old)],
            [t for t in rest_old if not _matched(t, parsed_new)])


_Parsed = dict[int, list[tuple[int, int, bool]]]  # exponent -> (mantissa, digits, scaled)


def _parsed(tokens: list[str]) -> _Parsed:
    out: _Parsed = {}
    for t in tokens:
        q = quantity(t)
        if q is not None:
            out.setdefault(q[1], []).append((q[0], q[2], "_" in t))
    return out


def _matched(token: str, other: _Parsed) -> bool:
    """Has ``other`` a token of the same quantity as ``token`` (by quantity, keys apart)?"""
    q = quantity(token)
    if q is None:
        return False
    m, e, digits = q
    scaled = "_" in token
    for ex, entries in other.items():
        if ex > e:  # the other is coarser: round this one to it
            r = _rounded(m, e, ex)
            if any(mo == r and mo != 0 and (d >= 2 or sc) for mo, d, sc in entries):
                return True
        elif ex < e:  # this one is coarser
            if m != 0 and (digits >= 2 or scaled) and any(
                    _rounded(mo, ex, e) == m for mo, _, _ in entries):
                return True
        elif m != 0 and any(mo == m and (digits >= 2 or scaled or sc)
                            for mo, _, sc in entries):
            return True
    return False
