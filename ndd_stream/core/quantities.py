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
from collections.abc import Sequence
from functools import lru_cache
from itertools import chain
from operator import itemgetter

from ndd_stream.core import kernels

SCALES: dict[str, int] = {"thousand": 3, "mln": 6, "million": 6, "millions": 6,
                          "bln": 9, "billion": 9, "billions": 9, "trillion": 12}
"""Scale words that follow a figure, and their powers of ten."""
SCALE_ORDER = tuple(SCALES)  # the pattern's alternation, in this order

_SCALED = re.compile(r"(\d+(?:[.,]\d+)*)(?:[ \t-]*\r?\n?[ \t]*(" + "|".join(SCALES) + r")\b)?",
                     re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:,\d+)*(?:\.\d+)?")
_FIGURE = re.compile(r"\d+(?:[.,]\d+)*")
# the reversed text, at the character before a scale word: the gap of _SCALED reversed, then
# the figure before it, reversed
_GAP_FIGURE_BACKWARDS = re.compile(r"[ \t]*\n?\r?[ \t-]*([0-9]+(?:[.,][0-9]+)*)")
_RUN_BYTES = bytes(c if c in b"0123456789.," else 0x20 for c in range(256))
_FIGURE_ASCII = re.compile(rb"[0-9]+(?:[.,][0-9]+)*")  # \d on ASCII text
_SCALE_WORD = re.compile(r"(?:" + "|".join(SCALES) + r")\b")
_NEEDLES = (("ln", 1), ("illion", 1), ("rillion", 1), ("thousand", 0))
"""Every scale word holds one of these needles at this offset (m-ln, b-illion, t-rillion,
...; a test checks it against SCALES). Long needles are the fast ones to search for."""
_BEFORE_SCALE = frozenset("0123456789 \t-\r\n")  # a figure's last digit, or a gap


def tokens(text: str) -> dict[str, str]:
    """The distinct figure tokens of ``text`` in order of first appearance, by key. A figure
    carries the scale word of its first occurrence that has one."""
    if not text.isascii():
        return tokens_reference(text)
    return ascii_tokens(text, text.lower())


def ascii_tokens(text: str, low: str) -> dict[str, str]:
    """:func:`tokens` of ASCII ``text`` whose lower-cased form is ``low`` (core.novelty
    lower-cases an item once for its subject, headline and figures): in C when the kernels
    are built, else :func:`ascii_tokens_python`."""
    fast = kernels.figure_tokens(text, SCALE_ORDER)
    return fast if fast is not None else ascii_tokens_python(text, low)


def ascii_tokens_python(text: str, low: str) -> dict[str, str]:
    """:func:`ascii_tokens` without the kernels."""
    runs = _runs(text)
    if not runs:  # no digit: no figure, so no scale word to look for
        return {}
    scaled = _scaled(low)
    if not scaled:
        return runs
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


def _scaled(low: str) -> dict[str, str]:
    """Key -> scale word, for the figures of the lower-cased ASCII text ``low`` written with
    one (lower-casing moves no character and changes no digit or separator, so figures and
    positions are the text's). Scale words are found first (:func:`_places`); the figure is
    then read backwards by one pattern over the reversed text: the gap (``_SCALED``'s,
    reversed) and the digits and single separators before it. Read from its end, a run's
    last figure stops where the forward scan starts it (at two separators in a row, or
    where the run begins), and the gap is all the gap characters before the scale word,
    since a digit must follow it."""
    out: dict[str, str] = {}
    places = _places(low)
    if not places:
        return out
    back, size = low[::-1], len(low)
    for i in sorted(places):
        m = _SCALE_WORD.match(low, i)
        if m is None:
            continue
        figure = _GAP_FIGURE_BACKWARDS.match(back, size - i)
        if figure is not None:
            out.setdefault(figure.group(1)[::-1].replace(",", ""), m.group())
    return out


def _places(low: str) -> list[int]:
    """Where a scale word may begin after a figure: ``str.find`` of each of
    :data:`_NEEDLES` (a C search, ~3x faster than scanning with the alternation, which has
    no literal prefix, and ~2x faster than one find per scale word: ``mln`` is slow to skip
    over). A start is kept only when the character before it is a digit or a gap
    character: a figure ends with a digit, and only gap characters stand between it and
    its scale word (``b-illion`` inside ``trillion`` fails so, on its ``t``)."""
    out = []
    for needle, offset in _NEEDLES:
        h = low.find(needle)
        while h >= 0:
            i = h - offset
            if i > 0 and low[i - 1] in _BEFORE_SCALE:
                out.append(i)
            h = low.find(needle, h + 1)
    return out


def key(token: str) -> str:
    """What figures written alike share: the digits as written, without thousands commas
    (and without the scale word: ``108 billion`` repeated as ``108`` is the same figure)."""
    return token.partition("_")[0].replace(",", "")


def written(token: str) -> str:
    """The figure as it appears in the text (without the scale word)."""
    return token.partition("_")[0]


def _parse(token: str) -> tuple[str, str, tuple[int, int, int] | None]:
    """The figure as written, its :func:`key` and its quantity: the one reading of a token,
    for :func:`quantity` and :func:`figure` (both cached, so this is not). The key is
    :func:`key`'s expression inline: calling it costs a first :func:`quantity` ~7%."""
    written, _, scale = token.partition("_")
    k = written.replace(",", "")
    if _NUMBER.fullmatch(written) is None:
        return written, k, None
    whole, _, frac = k.partition(".")
    mantissa = int(whole + frac)
    return written, k, (mantissa, SCALES.get(scale, 0) - len(frac), len(str(mantissa)))


@lru_cache(maxsize=1 << 16)  # pure; a window's figures are compared again and again
def quantity(token: str) -> tuple[int, int, int] | None:
    """(mantissa, exponent of the last written digit, significant digits), or None when the
    figure is not a plain number (``1.2.3``, a date ``3.4.87`` stays a string)."""
    return _parse(token)[2]


def significant(token: str) -> bool:
    """Does the token name a quantity by itself? Two significant digits, a separator or a
    scale word do; a single digit does not (a day of the month, a count written as a digit,
    the "1" of an "UPDATE 1" slug), as :func:`same` does not take one for a rounding."""
    raw, _, scale = token.partition("_")
    return bool(scale) or "." in raw or "," in raw or len(raw.lstrip("0")) >= 2


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
    unit = 10 ** (to - exponent)
    return (mantissa + unit // 2) // unit  # unit // 2 is exact: 0 for 1, else unit even


def differing(new: list[str], old: list[str]) -> tuple[list[str], list[str]]:
    """Tokens of ``new`` with no same quantity in ``old``, and of ``old`` with none in
    ``new``. Exact keys first; then each remaining token is looked up in a few sets of the
    other side (:class:`FigureSet`), so the cost is linear in the figures (an earnings
    table compared pair by pair cost ~0.5 ms), with the verdict of :func:`same`."""
    return differing_sets(FigureSet(new), FigureSet(old))


_TOP = max(SCALES.values())  # no figure's last written digit is coarser than this
_SPAN = 2 * _TOP + 1  # the exponents of plain figures: -_TOP to _TOP
_PLAIN_DIGITS = 30  # figures with more digits (or finer than 10**-_TOP) are odd
_UNITS = tuple((10**j, 10**j // 2) for j in range(1, _SPAN))  # _rounded's, per coarser step


Figure = tuple[str, str, str, int, bool, bool, tuple[int, ...], bool]
"""A token as :func:`differing_sets` compares it (see :func:`figure`), a plain tuple (read
in loops): the token, its key, the figure as written (without the scale word), its point
(-1: no quantity, zero, or odd), strong (two digits or a scale word: it may be a
rounding), scaled, its points (its own and its roundings at each coarser exponent), odd
(compared by :func:`same`)."""


@lru_cache(maxsize=1 << 12)  # pure; most of an item's tokens were seen in earlier items
def figure(token: str) -> Figure:
    """``token`` as :func:`differing_sets` compares it. A quantity ``m * 10**e`` written
    to that digit is the point ``m * _SPAN + e + _TOP``: one int for each pair (cheaper to
    hash and keep than a tuple). The coarser of two plain figures is the same quantity as
    the finer when its point is among the finer's points (its roundings up to ``_TOP``,
    while not zero), under :func:`same`'s conditions: set lookups. Odd figures (very long
    or very fine) would have many or large points: :func:`same` decides theirs. A zero is
    never a rounding nor rounds to one: it matches by key only. The token is read as
    :func:`quantity` reads it (:func:`_parse`); the roundings are :func:`_rounded`'s,
    inlined with its units from a table (a new item brings new tokens)."""
    written, k, q = _parse(token)
    if q is None or q[0] == 0:
        return token, k, written, -1, False, False, (), False
    mantissa, exponent, digits = q
    if digits > _PLAIN_DIGITS or exponent < -_TOP:
        return token, k, written, -1, False, False, (), True
    at = exponent + _TOP  # from 0 up to _SPAN - 1
    points = [mantissa * _SPAN + at]
    for unit, half in _UNITS[:_SPAN - 1 - at]:  # to each coarser exponent
        rounded = (mantissa + half) // unit
        if not rounded:
            break
        at += 1
        points.append(rounded * _SPAN + at)
    scaled = "_" in token  # as same() reads it
    return token, k, written, points[0], digits >= 2 or scaled, scaled, tuple(points), False


_Index = tuple[frozenset[int], frozenset[int], tuple[int, ...], tuple[str, ...]]
"""A figure set's points as the other side's figures are looked up in them: the point of
each strong plain figure, of each scaled one, all points of the plain figures (theirs and
their roundings, in a tuple: only iterated), and the odd tokens."""


class FigureSet:
    """A list of figure tokens as :func:`differing_sets` compares them: each one's
    :func:`figure`, the set of their keys and, built once when asked, their points
    (:data:`_Index`). Kept per window document (its facts meet many items), so an item's
    comparison does not redo them."""

    __slots__ = ("_index", "figures", "keyset", "tokens")

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.figures = list(map(figure, tokens))
        self.keyset = frozenset(map(_KEY, self.figures))
        self._index: _Index | None = None

    @property
    def index(self) -> _Index:
        if self._index is None:
            figs = self.figures
            self._index = (frozenset([f[3] for f in figs if f[4]]),  # strong ones are plain
                           frozenset([f[3] for f in figs if f[5]]),  # so are scaled ones
                           tuple(chain.from_iterable([f[6] for f in figs])),
                           tuple([f[0] for f in figs if f[7]]))
        return self._index


_KEY = itemgetter(1)


def differing_sets(new: FigureSet, old: FigureSet,
                   limit: int | None = None) -> tuple[list[str], list[str]]:
    """:func:`differing` of two figure sets; ``limit``: only the first so many of each list
    (in order: the same tokens the whole lists begin with)."""
    return ([f[0] for f in unmatched(new, old, limit)],
            [f[0] for f in unmatched(old, new, limit)])


def unmatched(these: FigureSet, other: FigureSet, limit: int | None = None) -> list[Figure]:
    """The figures of ``these`` with no same quantity in ``other`` (the first so many). A
    plain strong figure matches one at its exponent or finer that rounds to it (its point
    is among their points: the strong points of ``these`` found among the points of
    ``other``, one C pass), a weak one only a scaled one with its point; either matches a
    strong coarser one it rounds to (one of its points is that one's point). Odd figures
    are compared by :func:`same`."""
    keyset = other.keyset
    rest = [f for f in these.figures if f[1] not in keyset]
    if not rest or limit == 0:
        return []
    strong, scaled, all_points, odd = other.index
    found = these.index[0].intersection(all_points)
    out: list[Figure] = []
    for f in rest:
        token, _, _, point, is_strong, _, points, is_odd = f
        if point >= 0:
            if (point in (found if is_strong else scaled) or not strong.isdisjoint(points)
                    or (odd and _same_as_any(token, odd))):
                continue
        elif is_odd and _same_as_any(token, other.tokens):
            continue
        out.append(f)
        if len(out) == limit:
            break
    return out


def _same_as_any(token: str, others: Sequence[str]) -> bool:
    return any(same(token, o) for o in others)
