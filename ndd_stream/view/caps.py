"""How much of each field of a record the view keeps: every kept string has a cap, so the
view's memory bound (``Limits``: counts of entries, a byte budget for texts) holds whatever
size the fields of a record have (a 1 MB title, a 1 MB id or channel, thousands of headers).

Records are written by workers, but anyone who can produce to the topics can write any
field; the caps are applied once, where a record is ingested (model.py). An identity longer
than ``ID_CHARS`` is kept as its head and a hash of the whole, so two long identities that
share a head stay two items and a cut identity still finds its text. Pure: no Kafka, no web.
"""

from __future__ import annotations

import hashlib
from typing import Any

ID_CHARS = 256  # identity, duplicate_of / resembles, source position
NAME_CHARS = 200  # channel, scope, policy, reason, event time, header names
TITLE_CHARS = 1_000  # a title in the text store (the pair page)
LIST_TITLE_CHARS = 200  # a title in the position index (the decisions list)
DETAIL_CHARS = 1_000  # a DLQ detail, one header value
HEADERS_CHARS = 4_000  # all header names and values of one record together
AUDIT_CHARS = 4_000  # all keys and strings of one audit record together
AUDIT_ITEMS = 200  # keys and list items of one audit record together
MAX_RAW_CHARS = 100_000  # a body (the pair view says when one was cut)
PREVIEW_BYTES = 2_000  # the head of a dead letter's payload
DLQ_REASONS = 100  # distinct DLQ reasons counted by name; more count as "(other reasons)"
CUT = "…"


def cut(value: str, limit: int) -> str:
    """``value``, or its head and "…" (``limit`` characters in all) when longer."""
    return value if len(value) <= limit else value[: limit - 1] + CUT


def ident(value: str) -> str:
    """An identity of at most ``ID_CHARS``: longer ones become their head, "…" and 16 hex
    digits of a hash of the whole (the same identity always gives the same key)."""
    if len(value) <= ID_CHARS:
        return value
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return value[: ID_CHARS - 17] + CUT + digest


#: Headers that name an item: kept as ``ident`` keeps identities, so they still find it.
ID_HEADERS = frozenset({"ndd-identity", "ndd-duplicate-of", "ndd-resembles"})


def headers(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """Headers with names and values cut (identities as ``ident``), at most
    ``HEADERS_CHARS`` in all; the rest are counted in a last pseudo-header."""
    out: list[tuple[str, str]] = []
    used = 0
    for i, (name, value) in enumerate(pairs):
        kept = (cut(name, NAME_CHARS),
                ident(value) if name in ID_HEADERS else cut(value, DETAIL_CHARS))
        size = len(kept[0]) + len(kept[1])
        if used + size > HEADERS_CHARS:
            out.append(("…", f"{len(pairs) - i} more headers not kept by the view"))
            break
        out.append(kept)
        used += size
    return tuple(out)


def bounded_json(value: Any) -> Any:
    """A copy of a decoded JSON record holding at most ``AUDIT_CHARS`` characters of keys
    and strings and ``AUDIT_ITEMS`` keys and items (what is left out is marked "…")."""
    budget = [AUDIT_CHARS, AUDIT_ITEMS]

    def walk(v: Any, depth: int) -> Any:
        if isinstance(v, str):
            kept = cut(v, max(1, min(len(v), budget[0])))
            budget[0] -= len(kept)
            return kept
        if depth > 20:
            return CUT
        if isinstance(v, dict):
            out: dict[str, Any] = {}
            for k, item in v.items():
                if budget[0] <= 0 or budget[1] <= 0:
                    out[CUT] = f"{len(v) - len(out)} more keys not kept by the view"
                    break
                budget[1] -= 1
                key = cut(str(k), min(NAME_CHARS, max(1, budget[0])))
                budget[0] -= len(key)
                out[key] = walk(item, depth + 1)
            return out
        if isinstance(v, list):
            items: list[Any] = []
            for item in v:
                if budget[0] <= 0 or budget[1] <= 0:
                    items.append(CUT)
                    break
                budget[1] -= 1
                items.append(walk(item, depth + 1))
            return items
        return v  # numbers, booleans, None

    return walk(value, 0)
