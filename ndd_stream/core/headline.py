"""A new headline over a half-new text: a follow-up, not a repeat.

An agency's headline states its news. A follow-up (the launch, then its pricing; "strike
launched" after "no information on rumours"; a revised forecast; an offer not extended)
repeats much of the earlier story and carries a new headline; a re-sent, re-edited, shortened
or expanded copy keeps the headline, or most of its words. So when the two texts differ in at
least half (doc_q < 1/2, although they share half of the shorter one) and their headlines
share less than a fifth of their words (word Jaccard < ``MAX_HEADLINE_OVERLAP``), the item
is a new report. Above doc_q 1/2 a new headline over the same text is a re-slugged repeat.

The headline is the first line of the item (the title, for items that have one), as its
distinct lower-cased words (letters and digits), the first ``MAX_WORDS``. Two headlines'
words are compared by a light stem (:func:`stem`: an ``-s``, ``-ed`` or ``-ing`` ending and
a final ``e`` cut, then the first ``STEM`` letters), so one word written in another form
counts as shared (``BUYS`` / ``BUY``, ``RAISED`` / ``RAISES``, ``EXPAND`` / ``EXPANSION``),
as a figure is compared as a quantity, not a string (core.quantities).

The same measure, with a looser bound, marks a **new development** (core.novelty): a
follow-up that brings figures the earlier item lacks under a headline sharing less than a
third of its stems (``MAX_DEVELOPMENT_OVERLAP``), at any doc_q. Its headline states the new
figure's news ("CANADA PRICES ... BOND" after "CANADA LAUNCHES ..."); a re-sent or expanded
copy that adds a figure keeps most of its headline.
"""

from __future__ import annotations

import re

MAX_HEADLINE_OVERLAP = (1, 5)  # a fraction: headlines sharing under a fifth of their words
MAX_DEVELOPMENT_OVERLAP = (1, 3)  # ... under a third, for a headline over new figures
MAX_DOC_Q = (1, 2)  # a fraction: only when the texts differ in at least half
MAX_WORDS = 24
STEM = 5  # headline words are compared by (at most) the first five letters of their stem
_ENDINGS = ("ing", "ed", "s")

_WORD = re.compile(r"[^\W_]+")
_PREFIX = 512  # characters of a long first line looked at before the whole of it
_NOT_WORD_BYTES = bytes(c if chr(c).isascii() and chr(c).isalnum() else 0x20 for c in range(256))


def headline_words(text: str) -> list[str]:
    """The distinct words of the first line, lower-cased, in order, at most ``MAX_WORDS``."""
    if text.isascii():
        return ascii_headline_words(text.lower(), text.find("\n"))
    first = text.partition("\n")[0].lower()
    return list(dict.fromkeys(_WORD.findall(first)))[:MAX_WORDS]


def ascii_headline_words(low: str, newline: int) -> list[str]:
    """:func:`headline_words` of an ASCII text, given its lower-cased form and the index of
    its first line break (-1: none): on ASCII a word of ``_WORD`` is a run of letters and
    digits, so turning every other character into a space (one C pass) and splitting gives
    the same words."""
    first = low[:newline] if newline >= 0 else low
    # A page's text can be one line of thousands of words: look at a prefix first. Its
    # words, less one the cut may have split, are the line's first words, so once they
    # hold MAX_WORDS distinct ones those are the line's.
    cut = _PREFIX
    while cut < len(first):
        words = _ascii_words(first[:cut])
        if words and first[cut - 1].isalnum() and first[cut].isalnum():
            words.pop()
        distinct = list(dict.fromkeys(words))
        if len(distinct) >= MAX_WORDS:
            return distinct[:MAX_WORDS]
        cut *= 4
    return list(dict.fromkeys(_ascii_words(first)))[:MAX_WORDS]


def _ascii_words(text: str) -> list[str]:
    return text.encode("ascii").translate(_NOT_WORD_BYTES).decode("ascii").split()


def new_headline(words_new: list[str], words_old: list[str], shared_qgrams: int,
                 size_new: int, size_old: int) -> bool:
    """Both headlines known, texts differing in half (doc_q < 1/2), headlines sharing under a
    fifth of their word stems. Integer arithmetic."""
    if not words_new or not words_old:
        return False
    num, den = MAX_DOC_Q
    if shared_qgrams * den >= num * max(size_new, size_old):
        return False
    return _shared_under(words_new, words_old, MAX_HEADLINE_OVERLAP)


def new_development_headline(words_new: list[str], words_old: list[str]) -> bool:
    """Both headlines known and sharing under a third of their word stems (core.novelty
    asks it of an item with figures its match lacks). Integer arithmetic."""
    return bool(words_new and words_old) and _shared_under(words_new, words_old,
                                                          MAX_DEVELOPMENT_OVERLAP)


def _shared_under(words_new: list[str], words_old: list[str], bound: tuple[int, int]) -> bool:
    """The two headlines share under ``bound`` (a fraction) of their word stems."""
    a, b = set(map(stem, words_new)), set(map(stem, words_old))
    num, den = bound
    return len(a & b) * den < num * len(a | b)


def stem(word: str) -> str:
    """``word`` without one ending of ``_ENDINGS`` and then a final ``e`` (each only when
    three letters remain), cut to ``STEM`` letters: raise, raises, raised, raising -> rais."""
    for ending in _ENDINGS:
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            word = word[: -len(ending)]
            break
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word[:STEM]

