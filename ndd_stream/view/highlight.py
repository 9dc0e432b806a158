"""Which passages two texts share, and which figures or names differ: for the pair view.

A passage is shared when it contains a run of ``k`` consecutive words (case folded) that
also occurs somewhere in the other text, in any order of passages: a run of words rather
than DDD's 4-character q-grams, because almost every 4-gram of one English text occurs in
another and would paint the whole page. Words covered by a shared run are marked; marks
of consecutive words merge into one passage with the spaces and punctuation between them.

Differing tokens come from the decision rule's audit record (``novel.only_new`` /
``novel.only_old``, see docs/ITEMS.md) when it gives them; otherwise the view
marks the figures (numbers) that occur in only one of the two texts itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import regex

FIGURE = regex.compile(r"(?<![\w.,])\d+(?:[.,:/]\d+)*%?(?!\w)")
WORD = regex.compile(r"\d+(?:[.,:/]\d+)*%?|\w+")  # a figure such as 1.2% is one word
SHINGLE_WORDS = 4


@dataclass(frozen=True, slots=True)
class Segment:
    """A piece of a text and how it is marked."""

    text: str
    shared: bool = False
    diff: bool = False


@dataclass(frozen=True)
class Marked:
    """A text cut into segments, and the share of its words inside shared passages."""

    segments: list[Segment]
    words: int
    shared_words: int

    @property
    def shared_fraction(self) -> float:
        return self.shared_words / self.words if self.words else 0.0


def _words(text: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group().casefold()) for m in WORD.finditer(text)]


def _shingles(words: Sequence[tuple[int, int, str]], k: int) -> dict[tuple[str, ...], list[int]]:
    out: dict[tuple[str, ...], list[int]] = {}
    for i in range(len(words) - k + 1):
        out.setdefault(tuple(w for _, _, w in words[i:i + k]), []).append(i)
    return out


def shared_spans(a: str, b: str, k: int = SHINGLE_WORDS
                 ) -> tuple[list[tuple[int, int]], list[tuple[int, int]], tuple[int, int],
                            tuple[int, int]]:
    """Character spans of the passages ``a`` and ``b`` share, for each text, and
    (words, words in shared passages) of each."""
    wa, wb = _words(a), _words(b)
    k = max(1, min(k, len(wa), len(wb)))
    sa, sb = _shingles(wa, k), _shingles(wb, k)
    common = sa.keys() & sb.keys()

    def spans(words: list[tuple[int, int, str]], starts: Iterable[int]
              ) -> tuple[list[tuple[int, int]], int]:
        marked = [False] * len(words)
        for i in starts:
            for j in range(i, i + k):
                marked[j] = True
        out: list[tuple[int, int]] = []
        for j, flag in enumerate(marked):
            if not flag:
                continue
            if out and j > 0 and marked[j - 1]:
                out[-1] = (out[-1][0], words[j][1])
            else:
                out.append((words[j][0], words[j][1]))
        return out, sum(marked)

    spans_a, na = spans(wa, (i for s in common for i in sa[s]))
    spans_b, nb = spans(wb, (i for s in common for i in sb[s]))
    return spans_a, spans_b, (len(wa), na), (len(wb), nb)


def token_spans(text: str, tokens: Iterable[str]) -> list[tuple[int, int]]:
    """Where each token occurs in ``text`` as a whole word or figure (exact case first,
    else case folded)."""
    out: list[tuple[int, int]] = []
    for token in tokens:
        token = token.strip()
        if not token:
            continue
        pattern = regex.compile(r"(?<!\w)" + regex.escape(token) + r"(?!\w)")
        found = [(m.start(), m.end()) for m in pattern.finditer(text)]
        if not found:
            folded = regex.compile(pattern.pattern, regex.IGNORECASE)
            found = [(m.start(), m.end()) for m in folded.finditer(text)]
        out.extend(found)
    return out


def figures_only_in(text: str, other: str) -> list[str]:
    """Figures of ``text`` that ``other`` does not contain, in order of first occurrence."""
    theirs = {m.group() for m in FIGURE.finditer(other)}
    out: list[str] = []
    for m in FIGURE.finditer(text):
        if m.group() not in theirs and m.group() not in out:
            out.append(m.group())
    return out


def segments(text: str, shared: Sequence[tuple[int, int]],
             diff: Sequence[tuple[int, int]]) -> list[Segment]:
    """``text`` cut where its marks begin or end."""
    flags = [0] * (len(text) + 1)
    for start, end in shared:
        for i in range(start, end):
            flags[i] |= 1
    for start, end in diff:
        for i in range(start, end):
            flags[i] |= 2
    out: list[Segment] = []
    start = 0
    for i in range(1, len(text) + 1):
        if i == len(text) or flags[i] != flags[start]:
            out.append(Segment(text[start:i], bool(flags[start] & 1), bool(flags[start] & 2)))
            start = i
    return out


def mark_pair(new: str, old: str, only_new: Sequence[str] | None = None,
              only_old: Sequence[str] | None = None, k: int = SHINGLE_WORDS
              ) -> tuple[Marked, Marked, bool]:
    """Both texts marked: shared passages, and differing tokens. The flag says whether
    the differing tokens came from the decision (True) or from the view's own figure
    comparison (False, used when the decision gives none)."""
    spans_new, spans_old, (wn, sn), (wo, so) = shared_spans(new, old, k)
    from_decision = only_new is not None or only_old is not None
    if not from_decision:
        only_new, only_old = figures_only_in(new, old), figures_only_in(old, new)
    diff_new = token_spans(new, only_new or ())
    diff_old = token_spans(old, only_old or ())
    return (Marked(segments(new, spans_new, diff_new), wn, sn),
            Marked(segments(old, spans_old, diff_old), wo, so), from_decision)


def unmarked(text: str) -> Marked:
    """A text shown alone (no matched text to compare with)."""
    return Marked([Segment(text)] if text else [], len(WORD.findall(text)), 0)
