"""Bytes to text for corpus files of unknown encoding, without ever raising.

Real crawls mix UTF-8, ISO-8859-1/windows-1252 and friends, often with a wrong or missing
declaration. We try the cheap certain answers first (BOM, strict UTF-8, a declared charset
that decodes cleanly) and only then ask charset-normalizer, so that short pages are not
misread by statistics. Anything that still looks like binary or garbage is refused with a
reason instead of being scored as text.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from charset_normalizer import from_bytes

_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_DECLARED = re.compile(rb"""(?:charset|encoding)\s*=\s*["']?\s*([A-Za-z0-9_.:-]{2,40})""", re.I)
# Browsers read the Latin-1 label as windows-1252 (WHATWG); so do we.
_ALIASES = {"iso-8859-1": "cp1252", "latin-1": "cp1252", "latin1": "cp1252", "us-ascii": "cp1252"}
_WESTERN = {"cp1252", "latin_1", "iso8859_15"}
_HIGH_BYTES = bytes(range(128, 256))
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f\ufffd]")


@dataclass(frozen=True)
class Decoded:
    """Outcome of decoding: ``text`` on success, else ``problem`` says why it was refused."""

    text: str | None
    encoding: str | None
    problem: str | None = None


def looks_binary(data: bytes) -> bool:
    """NUL bytes or many C0 controls in the first 8 KiB: an image, archive or similar."""
    head = data[:8192]
    if not head:
        return False
    if b"\x00" in head:
        return True
    controls = sum(1 for b in head if b < 9 or 13 < b < 32 or b == 127)
    return controls / len(head) > 0.10


def _declared_charset(data: bytes) -> str | None:
    match = _DECLARED.search(data[:4096])
    if not match:
        return None
    name = match.group(1).decode("ascii", "ignore").strip().lower()
    try:
        codecs.lookup(name)
    except LookupError:
        return None
    return _ALIASES.get(name, name)


def _sparse_high_bytes(data: bytes) -> bool:
    """A few non-ASCII bytes in ASCII text: too little evidence for statistics.

    Such pages are almost always windows-1252 (the web's legacy default, WHATWG), and a
    wrong guess would only touch a handful of symbols like the copyright sign.
    """
    high = len(data) - len(data.translate(None, _HIGH_BYTES))
    return high <= max(8, len(data) // 200)


def _detected(data: bytes) -> str | None:
    """charset-normalizer's pick; among equally plausible ones, windows-1252 first.

    Latin-script text often fits cp1250, cp1252 and cp1257 equally well (same mess and
    coherence); the web's most common legacy encoding is then the likeliest by far.
    """
    matches = list(from_bytes(data))
    if not matches:
        return None
    best = matches[0]
    for match in matches:
        tied = match.chaos <= best.chaos and match.coherence >= best.coherence - 0.01
        if tied and _WESTERN & set(match.could_be_from_charset):
            return "cp1252"
    return best.encoding


def _garbled(text: str) -> bool:
    """Too many control or replacement characters for human-written text."""
    sample = text[:20000]
    return bool(sample) and len(_CONTROL.findall(sample)) / len(sample) > 0.02


def decode_bytes(data: bytes) -> Decoded:
    """Decode ``data`` to text, or say why it cannot be used (empty, binary, undecodable)."""
    if not data.strip():
        return Decoded(None, None, "empty")
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return _checked(data.decode(encoding), encoding)
            except UnicodeDecodeError:
                break
    if looks_binary(data):
        return Decoded(None, None, "binary")
    try:
        return _checked(data.decode("utf-8"), "utf-8")
    except UnicodeDecodeError:
        pass
    declared = _declared_charset(data)
    if declared and declared not in {"utf-8", "utf8"}:
        try:
            return _checked(data.decode(declared), declared)
        except (UnicodeDecodeError, LookupError):
            pass
    if _sparse_high_bytes(data):
        try:
            return _checked(data.decode("cp1252"), "cp1252")
        except UnicodeDecodeError:
            pass
    detected = _detected(data[:200_000])
    if detected is None:
        return Decoded(None, None, "undecodable: no plausible text encoding")
    try:
        return _checked(data.decode(detected), detected)
    except (UnicodeDecodeError, LookupError) as exc:
        return Decoded(None, None, f"undecodable: {exc.__class__.__name__}")


def _checked(text: str, encoding: str) -> Decoded:
    if not text.strip():
        return Decoded(None, encoding, "empty")
    if _garbled(text):
        return Decoded(None, encoding, "undecodable: control characters in decoded text")
    return Decoded(text, encoding)
