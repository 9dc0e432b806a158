"""A new headline over a half-new text: a follow-up, not a repeat.

An agency's headline states its news. A follow-up (the launch, then its pricing; "strike
launched" after "no information on rumours"; a revised forecast; an offer not extended)
repeats much of the earlier story and carries a new headline; a re-sent, re-edited, shortened
or expanded copy keeps the headline, or most of its words. So when the two texts differ in at
least half (doc_q < 1/2, although they share half of the shorter one) and their headlines
share less than a fifth of their words (word Jaccard < ``MAX_HEADLINE_OVERLAP``), the item
is a new report. Above doc_q 1/2 a new headline over the same text is a re-slugged repeat.

The headline is the first line of the item (the title, for items that have one), as its
distinct lower-cased words (letters and digits), the first ``MAX_WORDS``.
"""

from __future__ import annotations

import re

MAX_HEADLINE_OVERLAP = (1, 5)  # a fraction: headlines sharing under a fifth of their words
MAX_DOC_Q = (1, 2)  # a fraction: only when the texts differ in at least half
MAX_WORDS = 24

_WORD = re.compile(r"[^\W_]+")


def headline_words(text: str) -> list[str]:
    """The distinct words of the first line, lower-cased, in order, at most ``MAX_WORDS``."""
    first = text.partition("\n")[0].lower()
    return list(dict.fromkeys(_WORD.findall(first)))[:MAX_WORDS]


def new_headline(words_new: list[str], words_old: list[str], shared_qgrams: int,
                 size_new: int, size_old: int) -> bool:
    """Both headlines known, texts differing in half (doc_q < 1/2), headlines sharing under a
    fifth of their words. Integer arithmetic."""
    if not words_new or not words_old:
        return False
    num, den = MAX_DOC_Q
    if shared_qgrams * den >= num * max(size_new, size_old):
        return False
    a, b = set(words_new), set(words_old)
    num, den = MAX_HEADLINE_OVERLAP
    return len(a & b) * den < num * len(a | b)
