"""The feed the demo streams: its lines, as sent, with what the display needs."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ndd_stream.settings import Settings


@dataclass(frozen=True)
class FeedLine:
    """One non-blank line of the feed, as sent, with what the display needs to know."""

    number: int  # 1-based line number in the file
    raw: bytes
    key: bytes | None
    timestamp_ms: int | None
    identity: str | None
    channel: str | None
    title: str | None


def default_feed_path() -> contextlib.AbstractContextManager[Path]:
    """The bundled sample feed as a real file (a context: the package may be zipped)."""
    from importlib import resources

    from ndd_stream.data import sample_feed

    return resources.as_file(sample_feed())


def json_object(raw: bytes, *, lenient: bool = False) -> dict[str, Any] | None:
    """The JSON object of a line, or None. ``lenient`` (for display only): a line that is
    not UTF-8 is read with replacement characters, so a rejected item still shows its
    channel."""
    from ndd_stream.jsonio import JSONDecodeError, loads

    try:
        obj = loads(raw.decode("utf-8", errors="replace") if lenient else raw)
    except (JSONDecodeError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def load_feed(path: Path, settings: Settings) -> list[FeedLine]:
    """Lines to send (blank ones skipped, as ``ndd-stream produce`` and ``dedup`` do).

    Each line is keyed by its channel, as crawlers and ``ndd-stream produce`` key them, so
    the channels spread over the raw partitions. Under ``--scope global`` the worker
    decides them in event-time order across those partitions (docs/RELIABILITY.md,
    "Order"), which is what ``ndd-stream dedup --event-order`` gives offline.
    """
    from ndd_stream.kafka.produce import iter_lines, prepare_line

    out: list[FeedLine] = []
    for number, line in enumerate(iter_lines(path), start=1):
        if not line.strip():
            continue
        prepared = prepare_line(settings, line)
        identity = channel = title = None
        key = prepared.key
        obj = json_object(line) or json_object(line, lenient=True)
        if obj is not None:
            value = obj.get(settings.id_field)
            identity = None if value is None else str(value)
            value = obj.get(settings.channel_field)
            channel = None if value is None else str(value)
            value = obj.get(settings.title_field) if settings.title_field else None
            title = value if isinstance(value, str) else None
        out.append(FeedLine(number, line, key, prepared.timestamp_ms, identity, channel, title))
    return out

