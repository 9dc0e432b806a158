"""From raw item bytes to a validated :class:`Document`, or a machine-readable reason.

Shared by the offline ``dedup`` command and the worker, so both accept and reject
exactly the same items. Results follow bytewax's split into ok and err: a
:class:`Document` or an :class:`Invalid` carrying one of :data:`REASONS`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ndd_stream.core.document import Document
from ndd_stream.core.extract import (
    DEFAULT_EXTRACT,
    DEFAULT_MAX_HTML_DEPTH,
    ExtractMode,
    extract_text,
    looks_like_markup,
)
from ndd_stream.jsonio import JSONDecodeError, loads

REASONS = (
    "oversized",  # more bytes than max_item_bytes
    "invalid_utf8",  # bytes are not UTF-8
    "not_json",  # not parseable as JSON (includes nesting deeper than the parser allows)
    "not_object",  # JSON, but not an object
    "bad_field_type",  # id, channel, title or text of an unusable type, or id/channel too long
    "missing_text",  # none of the text fields is present
    "empty_text",  # text present but blank after extraction
    "missing_timestamp",  # no timestamp field and no fallback (e.g. the Kafka timestamp)
    "bad_timestamp",  # timestamp present but not ISO-8601 / epoch seconds, or not finite
    "future_timestamp",  # more than max_future_seconds past the wall clock
)


MAX_KEY_CHARS = 1024
"""Longest id, channel and scope value accepted. They travel in the headers of every
routed record (``ndd-identity``, ``ndd-duplicate-of``, ``ndd-scope``, ...), next to the
item itself: unbounded, one item's record could pass the producer's request limit."""


@dataclass(frozen=True)
class ItemFormat:
    """How to read an item: field names, extraction, scope and limits."""

    id_field: str = "id"
    channel_field: str = "channel"
    title_field: str | None = "title"
    text_fields: tuple[str, ...] = ("text", "body", "content")
    timestamp_fields: tuple[str, ...] = ("timestamp", "published_at")
    extract: ExtractMode = DEFAULT_EXTRACT
    max_html_depth: int = DEFAULT_MAX_HTML_DEPTH  # deeper HTML is extracted as flat text
    scope: str = "channel"  # "channel", "global", or another field's name
    scope_map: dict[str, str] = field(default_factory=dict)
    max_item_bytes: int = 2_000_000
    max_future_seconds: int = 86_400  # 0 disables the check
    max_item_source: str = "max_item_bytes"  # what sets max_item_bytes (a topic's limit)


@dataclass(frozen=True)
class Invalid:
    """A rejected item: the reason (one of REASONS) and a human-readable detail."""

    reason: str
    detail: str


def decode_object(raw: bytes, fmt: ItemFormat) -> dict[str, Any] | Invalid:
    """Size, UTF-8 and JSON-object checks: the part of validation that needs no field."""
    if len(raw) > fmt.max_item_bytes:
        return Invalid("oversized",
                       f"{len(raw)} bytes > {fmt.max_item_source}={fmt.max_item_bytes}")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Invalid("invalid_utf8", str(exc))
    try:
        obj = loads(raw)
    except (JSONDecodeError, RecursionError) as exc:
        # orjson refuses numbers beyond a double's range (an integer id of 310 digits);
        # they are JSON, so the standard library reads them (integers exactly)
        if not str(exc).startswith("number is infinity"):
            return Invalid("not_json", str(exc)[:200])
        try:
            obj = json.loads(raw, parse_constant=_no_constant)
        except (ValueError, RecursionError) as again:
            return Invalid("not_json", str(again)[:200])
    if not isinstance(obj, dict):
        return Invalid("not_object", f"JSON {type(obj).__name__}, expected an object")
    return obj


def parse_item(
    raw: bytes,
    fmt: ItemFormat,
    position: str,
    fallback_timestamp: float | None = None,
    now: float | None = None,
) -> Document | Invalid:
    """Validate one raw item. ``position`` becomes the identity when the item has no id."""
    obj = decode_object(raw, fmt)
    if isinstance(obj, Invalid):
        return obj
    if isinstance(obj.get(fmt.id_field), float):
        exact = _exact_id(raw, fmt.id_field)
        if isinstance(exact, Invalid):
            return exact
        obj[fmt.id_field] = exact
    return parse_object(obj, fmt, position, fallback_timestamp, now)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _exact_id(raw: bytes, id_field: str) -> object:
    """The id as written, when orjson read it as a float: orjson turns integers beyond
    64 bits into floats, so two distinct ids 12345678901234567890123 and ...124 would
    be one identity. The standard library keeps integers exact (up to 4,300 digits)."""
    try:
        value = json.loads(raw).get(id_field)
    except (ValueError, RecursionError):
        return Invalid("bad_field_type",
                       f"{id_field!r} must be a string or an integer of at most 4300 digits")
    if isinstance(value, float):
        return Invalid("bad_field_type", f"{id_field!r} must be a string or integer, "
                       f"not a number with a fraction or exponent ({value!r})")
    return value


def parse_object(
    obj: dict[str, Any],
    fmt: ItemFormat,
    position: str,
    fallback_timestamp: float | None = None,
    now: float | None = None,
) -> Document | Invalid:
    identity = obj.get(fmt.id_field)
    if identity is None or (type(identity) is str and (not identity or identity.isspace())):
        identity = position  # no id, or an empty one: the source position, never shared
    elif type(identity) is not str:
        if isinstance(identity, bool) or not isinstance(identity, str | int):
            return Invalid("bad_field_type", f"{fmt.id_field!r} must be a string or integer, "
                           f"not {_json_type(identity)}")
        identity = str(identity)
    channel = obj.get(fmt.channel_field, "")
    if type(channel) is not str:
        if channel is None:
            channel = ""
        elif not isinstance(channel, str | int) or isinstance(channel, bool):
            return Invalid("bad_field_type", f"{fmt.channel_field!r} must be a string")
        channel = str(channel)
    scope = _scope(obj, fmt, channel)
    if max(len(identity), len(channel), len(scope)) > MAX_KEY_CHARS:
        for key, key_value in ((fmt.id_field, identity), (fmt.channel_field, channel),
                               ("scope", scope)):
            if len(key_value) > MAX_KEY_CHARS:
                return Invalid("bad_field_type", f"{key!r} is {len(key_value)} characters "
                               f"long, more than {MAX_KEY_CHARS}")
    body_field = None
    for candidate in fmt.text_fields:
        if obj.get(candidate) is not None:
            body_field = candidate
            break
    title = obj.get(fmt.title_field) if fmt.title_field else None
    if body_field is None and title is None:
        return Invalid("missing_text", f"none of {', '.join(fmt.text_fields)} present")
    texts: list[str] = []
    markup = False
    for name, value in ((fmt.title_field, title), (body_field, obj.get(body_field or ""))):
        if value is None:
            continue
        if type(value) is not str:
            return Invalid("bad_field_type", f"{name!r} must be a string")
        is_markup = looks_like_markup(value)
        markup = markup or is_markup
        texts.append(extract_text(value, fmt.extract, fmt.max_html_depth, is_html=is_markup))
    text = texts[0] if len(texts) == 1 else "\n".join(texts)
    if not text or text.isspace():
        return Invalid("empty_text", "no text after extraction")
    ts = _timestamp(obj, fmt, fallback_timestamp)
    if isinstance(ts, Invalid):
        return ts
    if fmt.max_future_seconds:
        limit = (time.time() if now is None else now) + fmt.max_future_seconds
        if ts > limit:
            return Invalid("future_timestamp", f"{ts:.0f} is more than "
                           f"{fmt.max_future_seconds}s past the wall clock")
    return Document(identity, scope, channel, ts, text, markup)


def _json_type(value: object) -> str:
    """A value's type as JSON names it (what the producer wrote)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return "a number with a fraction or exponent"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def compose_text(parts: Sequence[str], mode: ExtractMode,
                 max_depth: int = DEFAULT_MAX_HTML_DEPTH) -> str:
    """The text an item is judged on: each of its fields (title first, then body)
    extracted per ``mode`` and joined by newlines. ``ndd-stream eval`` calls this too,
    so the evaluation decides on exactly the stream's text."""
    return "\n".join(extract_text(part, mode, max_depth) for part in parts)


def scope_of(obj: dict[str, Any], fmt: ItemFormat) -> str:
    """The comparison scope of a parsed item (used to repartition before validation)."""
    channel = obj.get(fmt.channel_field, "")
    return _scope(obj, fmt, "" if channel is None else str(channel))


def _scope(obj: dict[str, Any], fmt: ItemFormat, channel: str) -> str:
    if fmt.scope == "global":
        value = "global"
    elif fmt.scope == "channel":
        value = channel
    else:
        value = str(obj.get(fmt.scope, ""))
    return fmt.scope_map.get(value, value)


def _timestamp(obj: dict[str, Any], fmt: ItemFormat, fallback: float | None) -> float | Invalid:
    name = None
    for field_name in fmt.timestamp_fields:  # a loop, not next() of a generator: per item
        if obj.get(field_name) is not None:
            name = field_name
            break
    if name is None:
        if fallback is None:
            return Invalid("missing_timestamp", f"none of {', '.join(fmt.timestamp_fields)}")
        return fallback
    ts = parse_timestamp(obj[name])
    if ts is None:
        return Invalid("bad_timestamp", f"{name}={str(obj[name])[:60]!r}")
    return ts


def parse_timestamp(value: object) -> float | None:
    """Epoch seconds from epoch seconds (int, float or numeric string) or ISO-8601.

    Naive ISO times are taken as UTC. Returns None when unusable, including numbers that
    are no date: before 0001-01-01 UTC (a worker could not write them as ISO-8601) or
    after about the year 5000.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        ts = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            ts = float(text)
        except ValueError:
            try:
                parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                return None
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            ts = parsed.timestamp()
    else:
        return None
    if not math.isfinite(ts) or not _MIN_TIMESTAMP <= ts <= _MAX_TIMESTAMP:
        return None
    return ts


_MIN_TIMESTAMP = -62_135_596_800.0  # 0001-01-01T00:00:00Z: earlier is no date (ISO, headers)
_MAX_TIMESTAMP = 1e11  # about the year 5138: later is not a timestamp


def order_time_ms(obj: dict[str, Any], fmt: ItemFormat, fallback: float | None,
                  now: float | None = None) -> int | None:
    """The event time (ms) an item is ordered by before it is decided, or None when the
    decider will reject the time (missing, unusable, or past ``max_future_seconds``): such
    an item is decided, and dead-lettered, when it arrives. Same rules as ``parse_item``."""
    ts = _timestamp(obj, fmt, fallback)
    if isinstance(ts, Invalid):
        return None
    limit = (time.time() if now is None else now) + fmt.max_future_seconds
    if fmt.max_future_seconds and ts > limit:
        return None
    return round(ts * 1000)
