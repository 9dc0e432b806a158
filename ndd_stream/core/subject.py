"""The subject of a report: who or what a templated report is about.

Two companies raising crude postings by the same 50 cts, two issuers' eurobonds with the
same terms, two filings for a 500 mln dlr shelf: the texts share their template and often
every figure, and differ in the name the report is about. Headlines (and first lines of
agency text) begin with that name: ``UNOCAL RAISED CRUDE OIL POSTINGS``, ``SUN RAISES
CRUDE POSTINGS``, ``RJR NABISCO FILES ...``.

The **subject** of an item is the first word of its first line (two letters or more) when
the rest of the item names it too, capitalised (``Unocal said ...``): a headline word that
the story never names again (``HOUSING``, a typo, ``3RD``) is not taken for a subject.
Two items have **another subject** when both have one and the later item's subject appears
nowhere in the earlier item's normal form: a rewrite of one story names its subject in both,
whatever its headline. Only that direction is asked. A later report may name the earlier
one's subject ("Phillips Petroleum said it raised ... following Sun Co"; Grumman's SDI
contract after Lockheed's), but an earlier report cannot know a later subject.
"""

from __future__ import annotations

import re

from ndd_stream.core.normalize import normal_form

_FIRST_WORD = re.compile(r"[^\W\d_]{2,}")


def subject(text: str) -> str:
    """The subject word of ``text`` in normal form, or "" when it has none."""
    if text.isascii():
        return ascii_subject(text, text.lower(), text.find("\n"))
    first, _, rest = text.partition("\n")
    m = _FIRST_WORD.search(first)
    if m is None or not rest:
        return ""
    word = m.group()
    return normal_form(word) if _named(word).search(rest) else ""


def ascii_subject(text: str, low: str, newline: int) -> str:
    """:func:`subject` of ASCII ``text``, given its lower-cased form and the index of its
    first line break (-1: none; core.novelty computes both once per item): the word is
    found case-insensitively (in C), then each place is checked as :func:`_named` would.
    (Its normal form is its lower case, and the character before a place after the first
    line is never a word character at the line break itself, so no slice of the rest is
    needed.)"""
    if newline < 0 or newline == len(text) - 1:  # one line, or nothing after it
        return ""
    m = _FIRST_WORD.search(text, 0, newline)
    if m is None:
        return ""
    word = m.group()
    lower = word.lower()
    capital = word[0].upper()
    size = len(word)
    i = low.find(lower, newline + 1)
    while i >= 0:
        end = i + size
        if (text[i] == capital and not _is_word(text[i - 1])
                and (end == len(text) or not _is_word(text[end]))):
            return lower
        i = low.find(lower, i + 1)
    return ""


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _named(word: str) -> re.Pattern[str]:
    """The word capitalised (its first letter upper case, the rest in any case), whole."""
    return re.compile(r"(?<!\w)" + re.escape(word[0].upper()) + "(?i:" + re.escape(word[1:])
                      + r")(?!\w)")


def other_subject(subject_new: str, subject_old: str, nf_old: str) -> bool:
    """Each item has a subject, and the later item's (``subject_new``) occurs nowhere in the
    earlier item's normal form ``nf_old`` (so the two subjects differ: an item's subject is
    in its own normal form)."""
    return bool(subject_new and subject_old and subject_new not in nf_old)
