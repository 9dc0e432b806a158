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
2. ``subject``: the two are about another subject (core.subject): each item's first line
   begins with a name the item repeats, and the later item's name occurs nowhere in the
   earlier item. Two companies' crude postings or two issuers' bonds share template and
   figures, not names.
3. ``headline``: a follow-up (core.headline): the texts differ in half (doc_q < 1/2) and the
   headlines share under a fifth of their words. A follow-up repeats the story under a new
   headline; a re-sent or re-edited copy keeps most of its headline.
4. ``figures``: the figures differ in both directions (A has figures B lacks *and* B has
   figures A lacks), and the changed ones are more than a fifth of the figures compared:
   ``changed / (changed + shared) > MAX_CHANGED_SHARE`` = 1/5 with ``changed = min(|only A|,
   |only B|)`` and ``shared = |A| - |only A|``. A correction of a detail changes one figure
   among many; a report of another day or issuer changes most of them.
5. ``development``: a new development: A has figures B lacks, one of them more than a single
   digit (``quantities.significant``: not a day, a count or the "1" of "UPDATE 1"), and the
   headlines share less than a third of their word stems (core.headline, at any doc_q). A
   follow-up states its news in a new headline and brings its figures ("CANADA PRICES 1.2
   BILLION DLR BOND ISSUE" with yields after "CANADA LAUNCHES ..."; "HOUSE BUDGET COMMITTEE
   APPROVES ..." after "... NEARS BUDGET AGREEMENT"); an expanded copy keeps its headline.

An item that declares itself a correction (the word corrected, corrects or correction) may
change any number of figures, its subject or its headline: it is still the same report.

Figures are quantities (core.quantities): a run of digits with inner ``.`` or ``,`` and the
scale word after it (``mln``, ``billion``...), compared up to the rounding of the coarser
(``8.7 mln`` = ``8,700,000``). A figure is "only in A" when B has no figure of the same
quantity. Figures only in A (and not B) never make A new by themselves: an expanded copy
adds detail (under its headline; under a new one they are a development); figures only in B
alone neither: a shortened copy drops some.

The rule is a pure function of the two items' facts (subject, headline words and figure
tokens), the earlier item's normal form, the correction flag and the three q-gram set sizes,
in integer arithmetic, so the detector's decision equals a brute-force reference.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from ndd_stream.core import kernels, quantities
from ndd_stream.core.headline import (
    MAX_WORDS,
    ascii_headline_words,
    headline_words,
    new_development_headline,
    new_headline,
)
from ndd_stream.core.subject import ascii_subject, other_subject, subject

MIN_OVERLAP = (1, 2)  # a fraction: at least half of the shorter text is shared
MAX_CHANGED_SHARE = (1, 5)  # a fraction: at most one figure in five changed
MAX_LISTED = 20  # only_new / only_old lists are capped (audit records stay small)

REASONS = ("new_content", "subject", "headline", "figures", "development")
"""Reason codes (header ``ndd-novel``): see the module docstring."""

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
    """The facts of ``text`` kept per window document and persisted, space-separated: its
    subject (``^word``, core.subject; absent when it has none), its headline words
    (``#w1,w2,...``, core.headline) and its distinct figure tokens (core.quantities) in
    order of first appearance. Records written before subjects, headlines and scale words
    (no ``^``, ``#`` or ``_``) read as figures alone."""
    fast = kernels.ascii_facts(text, quantities.SCALE_ORDER, MAX_WORDS)
    if fast is not None:
        return fast
    return figures_python(text)


def figures_python(text: str) -> str:
    """:func:`figures` without the kernels."""
    if text.isascii():  # lower-case once and find the first line once for all three
        low, newline = text.lower(), text.find("\n")
        subj = ascii_subject(text, low, newline)
        words = ascii_headline_words(low, newline)
        figs = quantities.ascii_tokens(text, low)
    else:
        subj, words, figs = subject(text), headline_words(text), quantities.tokens(text)
    parts = []
    if subj:
        parts.append("^" + subj)
    if words:
        parts.append("#" + ",".join(words))
    parts.extend(figs.values())
    return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Facts:
    subject: str  # "" when none (or unknown)
    headline: list[str]  # [] when none (or unknown)
    figures: list[str]


def facts(joined: str) -> Facts:
    """The parts of a :func:`figures` string."""
    return Facts(*_parts(joined))


def _parts(joined: str) -> tuple[str, list[str], list[str]]:
    parts = joined.split()
    subj, words = "", []
    if parts and parts[0].startswith("^"):
        subj, parts = parts[0][1:], parts[1:]
    if parts and parts[0].startswith("#"):
        words, parts = parts[0][1:].split(","), parts[1:]
    return subj, words, parts


def figure_key(raw: str) -> str:
    """What two figures written alike are compared on: without thousands commas."""
    return quantities.key(raw)


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
    nf_old: str | Callable[[], str] = "",
    limit: int | None = None,
) -> tuple[str, tuple[str, ...], tuple[str, ...]] | None:
    """The reason A is a new report and what differs (figures as written in A, in B; or
    the two subjects; or the headline words), or None when A repeats B. ``figures_old``
    None: B's facts are unknown (a record of state layout v1), so only the overlap is
    judged. ``correction`` may be a callable, asked only when facts changed (it scans A's
    text). ``nf_old`` is B's normal form, searched for A's subject (a callable: read only
    when both items have a subject). ``limit``: when the overlap alone decides, the figures
    listed are only the first so many of each side (their order is the texts')."""
    num, den = MIN_OVERLAP
    if size_new and size_old and shared_qgrams * den < num * min(size_new, size_old):
        only_new, only_old = _differing(figures_new, figures_old or "", limit)
        return "new_content", only_new, only_old
    if figures_old is None:
        return None
    new_subject, new_words, new_set = _parsed(figures_new)
    old_subject, old_words, old_set = _parsed(figures_old)
    corrected = correction if not callable(correction) else None

    def is_correction() -> bool:
        nonlocal corrected
        if corrected is None:
            corrected = bool(correction()) if callable(correction) else bool(correction)
        return corrected

    if (new_subject and old_subject
            and other_subject(new_subject, old_subject, nf_old() if callable(nf_old) else nf_old)
            and not is_correction()):
        return "subject", (new_subject,), (old_subject,)
    if (new_headline(new_words, old_words, shared_qgrams, size_new, size_old)
            and not is_correction()):
        return ("headline", tuple(w for w in new_words if w not in old_words),
                tuple(w for w in old_words if w not in new_words))
    lone_new = quantities.unmatched(new_set, old_set)
    if not lone_new:  # no figure of A's is new: neither figure test bites
        return None
    lone_old = quantities.unmatched(old_set, new_set)
    changed = min(len(lone_new), len(lone_old))
    shared = len(new_set.tokens) - len(lone_new)
    num, den = MAX_CHANGED_SHARE
    if changed and changed * den > num * (changed + shared):
        reason = "figures"
    elif (new_development_headline(new_words, old_words)
            and any(quantities.significant(f[0]) for f in lone_new)):
        reason = "development"
    else:
        return None
    return None if is_correction() else (reason, *_written(lone_new, lone_old))


def detail_line(reason: str, only_new: tuple[str, ...], only_old: tuple[str, ...]) -> str:
    """One short human line for the ``ndd-novel-detail`` header."""
    if reason == "subject":
        return (f"another subject: {only_new[0] if only_new else '?'} "
                f"(the earlier item's is {only_old[0] if only_old else '?'})")
    if reason == "headline":
        return (f"a follow-up: new headline words {' '.join(only_new[:6]) or '-'} over a text "
                "that differs in half")
    if reason == "development":
        return (f"a new development: new figures {' '.join(only_new[:6])} under a new "
                "headline")
    if reason == "figures":
        pairs = ", ".join(f"{o} -> {n}" for o, n in zip(only_old[:4], only_new[:4],
                                                       strict=False))
        more = max(len(only_new), len(only_old)) - 4
        return f"figures differ: {pairs}" + (f" (+{more} more)" if more > 0 else "")
    return "shares less than half of the shorter text: a different report on the same topic"


def _differing(new: str, old: str,
               limit: int | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    new_set, old_set = _parsed(new)[2], _parsed(old)[2]
    return _written(quantities.unmatched(new_set, old_set, limit),
                    quantities.unmatched(old_set, new_set, limit))


@lru_cache(maxsize=1024)  # by the facts string: a window document's meet many items
def _parsed(joined: str) -> tuple[str, list[str], quantities.FigureSet]:
    """The subject, headline words and figures of a :func:`figures` string (shared: read
    only)."""
    subj, words, figs = _parts(joined)
    return subj, words, quantities.FigureSet(figs)


def _written(only_new: list[quantities.Figure],
             only_old: list[quantities.Figure]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple([f[2] for f in only_new]), tuple([f[2] for f in only_old])
