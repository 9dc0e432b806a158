"""Repeat or new report? The rule applied to the best q-gram match (docs/EVALUATION.md).

doc_q finds the earlier item an item resembles most; on agency text that is often the same
*template* with other facts (another company's earnings table, another day's money-market
report, another bond issue). So once the detector has found the best match B of an item A
(doc_q >= threshold), A is judged a **new report** (routed unique, with an explanation)
when one of these holds, checked in this order:

1. ``new_content``: the two share less than half of the shorter text's q-grams
   (overlap |A ∩ B| / min(|A|, |B|) < ``MIN_OVERLAP`` = 1/2). A shortened, truncated or expanded
   copy contains, or is contained in, the other; two reports that merely share a template
   or a topic do not. Only bites when doc_q < 0.5 (doc_q <= overlap).
2. ``figures``: the figures differ in both directions (A has figures B lacks *and* B has
   figures A lacks), and the changed ones are more than a fifth of the figures compared:
   ``changed / (changed + shared) > MAX_CHANGED_SHARE`` = 1/5 with ``changed = min(|only A|,
   |only B|)`` and ``shared = |A ∩ B|`` over the figure sets. A correction of a detail
   changes one figure among many; a report of another day or issuer changes most of them.
   An item that declares itself a correction (the word corrected, corrects or correction)
   may change any number of figures: it is still the same report.

Figures are the maximal runs of (decimal) digits with inner ``.`` or ``,`` separators as they appear
in the item's text (``1,660,300``, ``58.8``, ``1987``); they are compared without the
thousands commas. Figures only in A (and not B) alone never make A new: an expanded copy
adds detail; figures only in B alone neither: a shortened copy drops some.

The rule is a pure function of the two texts' figure lists, the correction flag and the
three q-gram set sizes, in integer arithmetic, so the detector's decision equals a
brute-force reference.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

MIN_OVERLAP = (1, 2)  # a fraction: at least half of the shorter text is shared
MAX_CHANGED_SHARE = (1, 5)  # a fraction: at most one figure in five changed
MAX_LISTED = 20  # only_new / only_old lists are capped (audit records stay small)

REASONS = ("new_content", "figures")
"""Reason codes (header ``ndd-novel``): see the module docstring."""

_FIGURE = re.compile(r"\d+(?:[.,]\d+)*")
_FIGURE_ASCII = re.compile(rb"[0-9]+(?:[.,][0-9]+)*")  # \d on ASCII text
_RUNS = bytes(c if c in b"0123456789.," else 0x20 for c in range(256))
_CORRECTION = re.compile(r"\bcorrect(?:ed|s|ion)\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Novelty:
    """Why an item that resembles an earlier one was judged a new report."""

    reason: str  # one of REASONS
    resembles: str  # identity of the best q-gram match
    similarity: float  # its doc_q
    only_new: tuple[str, ...] = ()  # differing figures as written in the new item
    only_old: tuple[str, ...] = ()  # ... and in the matched item
    detail: str = ""  # one human line

    def as_dict(self) -> dict[str, object]:
        return {"reason": self.reason, "resembles": self.resembles,
                "similarity": self.similarity, "only_new": list(self.only_new),
                "only_old": list(self.only_old), "detail": self.detail}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Novelty:
        only_new, only_old = data.get("only_new") or [], data.get("only_old") or []
        assert isinstance(only_new, list) and isinstance(only_old, list)
        return cls(str(data["reason"]), str(data["resembles"]),
                   float(data["similarity"]),  # type: ignore[arg-type]
                   tuple(map(str, only_new)), tuple(map(str, only_old)),
                   str(data.get("detail", "")))


def figures(text: str) -> str:
    """The distinct figures of ``text`` in order of first appearance, as written, joined by
    single spaces (the compact form kept per window document and persisted)."""
    if text.isascii():
        return _ascii_figures(text.encode("ascii"))
    seen: dict[str, str] = {}
    for raw in _FIGURE.findall(text):
        seen.setdefault(figure_key(raw), raw)
    return " ".join(seen.values())


def _ascii_figures(data: bytes) -> str:
    """:func:`figures` of ASCII text, ~4x faster (it runs on every item): every character
    but digits and separators becomes a space in one C pass, so the pattern only runs on the
    few runs that are not plain digits. A figure never spans a space, so the result is the
    same as scanning the whole text."""
    seen: dict[bytes, bytes] = {}
    for run in data.translate(_RUNS).split():
        run = run.strip(b".,")
        if run.isdigit():
            seen.setdefault(run, run)
        elif run:
            for raw in _FIGURE_ASCII.findall(run):
                seen.setdefault(raw.replace(b",", b""), raw)
    return b" ".join(seen.values()).decode("ascii")


def figure_key(raw: str) -> str:
    """What two figures are compared on: the figure without thousands commas."""
    return raw.replace(",", "")


def declares_correction(text: str) -> bool:
    """The item calls itself a correction. (``"correct" in text.lower()`` is necessary for a
    match and runs in C: the pattern only scans the texts that pass it.)"""
    return "correct" in text.lower() and _CORRECTION.search(text) is not None


def judge(
    shared_qgrams: int,
    size_new: int,
    size_old: int,
    figures_new: str,
    figures_old: str | None,
    correction: bool | Callable[[], bool],
) -> tuple[str, tuple[str, ...], tuple[str, ...]] | None:
    """The reason A is a new report and the differing figures (as written in A, in B), or
    None when A repeats B. ``figures_old`` None: B's figures are unknown (a record of state
    layout v1), so only the overlap is judged. ``correction`` may be a callable, asked only
    when figures changed (it scans A's text)."""
    num, den = MIN_OVERLAP
    if size_new and size_old and shared_qgrams * den < num * min(size_new, size_old):
        only_new, only_old = _differing(figures_new, figures_old or "")
        return "new_content", only_new, only_old
    if figures_old is None:
        return None
    only_new, only_old = _differing(figures_new, figures_old)
    changed = min(len(only_new), len(only_old))
    if not changed or (correction() if callable(correction) else correction):
        return None
    shared = len(_keys(figures_new)) - len(only_new)
    num, den = MAX_CHANGED_SHARE
    if changed * den > num * (changed + shared):
        return "figures", only_new, only_old
    return None


def detail_line(reason: str, only_new: tuple[str, ...], only_old: tuple[str, ...]) -> str:
    """One short human line for the ``ndd-novel-detail`` header."""
    if reason == "figures":
        pairs = ", ".join(f"{o} -> {n}" for o, n in zip(only_old[:4], only_new[:4],
                                                       strict=False))
        more = max(len(only_new), len(only_old)) - 4
        return f"figures differ: {pairs}" + (f" (+{more} more)" if more > 0 else "")
    return "shares less than half of the shorter text: a different report on the same topic"


def _keys(joined: str) -> dict[str, str]:
    return {figure_key(raw): raw for raw in joined.split()} if joined else {}


def _differing(new: str, old: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    a, b = _keys(new), _keys(old)
    return (tuple(raw for key, raw in a.items() if key not in b),
            tuple(raw for key, raw in b.items() if key not in a))
