"""The normal form of §3.3: NFKC, case folding, no white space and no punctuation.

Only letters, combining marks and digits of every script survive (Unicode classes
L, M and N); marks are kept because they are part of the letters of many scripts
(Devanagari vowel signs, Arabic harakat). Case folding is on by default because
agencies re-case titles freely; ``case_sensitive=True`` reproduces the paper exactly.
"""

from __future__ import annotations

import string
import unicodedata
from functools import cache
from typing import Any

_ASCII_DROP = bytes(c for c in range(128) if not chr(c).isalnum())
_ASCII_LOWER = bytes.maketrans(string.ascii_uppercase.encode(), string.ascii_lowercase.encode())


def normal_form(text: str, case_sensitive: bool = False) -> str:
    """Return the normal form T_w of ``text``."""
    if text.isascii():
        # Fast path (most news): NFKC and casefold are identities on ASCII except case.
        raw = text.encode("ascii")
        table = None if case_sensitive else _ASCII_LOWER
        return raw.translate(table, _ASCII_DROP).decode("ascii")
    text = unicodedata.normalize("NFKC", text)
    if not case_sensitive:
        # casefold can leave non-NFKC sequences (e.g. U+0130), so normalise once more.
        text = unicodedata.normalize("NFKC", text.casefold())
    drop = _not_letter_mark_digit()
    out = drop.sub("", text)
    # Removing a space can bring a letter next to a combining mark ("A´" -> "a" + U+0301):
    # recompose, so the normal form of a normal form is itself.
    recomposed = unicodedata.normalize("NFKC", out)
    return out if recomposed == out else drop.sub("", recomposed)


@cache
def _not_letter_mark_digit() -> Any:
    """Runs of characters outside Unicode's L, M and N classes (the ``regex`` module, loaded
    at the first text that is not ASCII: most feeds never need it)."""
    import regex

    return regex.compile(r"[^\p{L}\p{M}\p{N}]+")
