"""Follow an output topic and show each record readably (decision headers, title, text).

A debugging aid: it reads with ``assign`` rather than a consumer group, so it joins no
group, commits nothing and cannot disturb the worker's offsets.
"""

from __future__ import annotations

import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition
from rich.console import Console
from rich.text import Text

from ndd_stream.kafka.config import librdkafka_config
from ndd_stream.settings import Settings

#: Decision fields shown first, in this order; header names are matched loosely
#: (case-insensitive, ``ndd-``/``x-`` prefix and ``-``/``_``/``.`` ignored).
DECISION_FIELDS: tuple[str, ...] = (
    "status",
    "duplicate_of",
    "resembles",  # routed unique although doc_q >= threshold: judged a new report
    "novel",
    "similarity",
    "matched_channel",
    "matched_time",
    "scope",
    "policy",
    "identity",
    "replayed",
    "dlq_reason",
    "dlq_detail",
    "reason",
)
_STATUS_STYLE = {
    "unique": "bold green",
    "duplicate": "bold yellow",
    "near_duplicate": "bold yellow",
    "exact_duplicate": "bold yellow",
}
_SPACE = re.compile(r"\s+")
_TAG = re.compile(r"<[^>]{0,2000}>")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    r"""``text`` with every control character written out (``\x1b``, ``\u202e``): C0 (tabs
    and newlines too), DEL, C1 and the bidi controls. Item text is the producer's: raw, an
    ESC sequence would drive the terminal and a bidi override reorder the line."""
    return _CONTROL.sub(_escape_control, text)


def _escape_control(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


@dataclass(frozen=True)
class TailRecord:
    """A consumed record in plain Python types."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def normalize_header(name: str) -> str:
    """``NDD-Duplicate-Of`` -> ``duplicate_of``: so tail works with any header spelling."""
    lowered = name.lower()
    for prefix in ("ndd-", "ndd_", "ndd.", "x-"):
        if lowered.startswith(prefix):
            lowered = lowered[len(prefix) :]
            break
    return re.sub(r"[-.]", "_", lowered)


def _decode(value: bytes | None, limit: int = 200) -> str:
    if value is None:
        return "∅"
    text = value.decode("utf-8", errors="replace")
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return printable(text)


def _preview(text: str, limit: int) -> str:
    flat = _SPACE.sub(" ", _TAG.sub(" ", text)).strip()
    return printable(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def _format_time(ms: int | None) -> str:
    if ms is None or ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_record(settings: Settings, record: TailRecord, *, text_chars: int = 160) -> Text:
    """Two or three lines: position and decision, title, start of the text."""
    decision: dict[str, str] = {}
    others: list[tuple[str, str]] = []
    novel_detail: str | None = None
    for name, raw in record.headers:
        norm = normalize_header(name)
        if norm == "novel_detail":
            novel_detail = _decode(raw, 200)
        elif norm in DECISION_FIELDS and norm not in decision:
            decision[norm] = _decode(raw, 80)
        else:
            others.append((name, _decode(raw, 60)))
    item: Any = None
    if record.value is not None:
        try:
            item = orjson.loads(record.value)
        except orjson.JSONDecodeError:
            item = None
    if isinstance(item, dict) and isinstance(item.get("novel"), dict):
        novel = item["novel"]  # the audit record's explanation (see core.novelty)
        decision.setdefault("resembles", _preview(str(novel.get("resembles", "")), 80))
        decision.setdefault("novel", _preview(str(novel.get("reason", "")), 80))
        novel_detail = novel_detail or _preview(str(novel.get("detail", "")), 160)
    if isinstance(item, dict):  # a decisions-topic record carries its fields in the body
        for name in DECISION_FIELDS:
            if name not in decision and item.get(name) is not None:
                decision[name] = _preview(str(item[name]), 80)

    out = Text()
    out.append(f"{printable(record.topic)}[{record.partition}]@{record.offset} ", style="dim")
    out.append(_format_time(record.timestamp_ms) + " ", style="cyan")
    out.append("key=" + _decode(record.key, 60), style="magenta")
    status = decision.pop("status", None)
    if status is not None:
        out.append("  ")
        out.append(status.upper(), style=_STATUS_STYLE.get(status.lower(), "bold red"))
    for name in DECISION_FIELDS:
        if name in decision:
            out.append(f"  {name}=", style="dim")
            out.append(decision[name])
    for name, value in others:
        out.append(f"  {printable(name)}=", style="dim")
        out.append(value)
    if "novel" in decision:
        out.append("\n  new report", style="bold green")
        out.append(f" ({decision['novel']}), resembles {decision.get('resembles', '?')}")
        if novel_detail:
            out.append(": " + novel_detail)

    if isinstance(item, dict):
        title = item.get(settings.title_field) if settings.title_field else None
        if isinstance(title, str) and title.strip():
            out.append("\n  ")
            out.append(_preview(title, 120), style="bold")
        for field_name in settings.text_fields:
            text = item.get(field_name)
            if isinstance(text, str) and text.strip():
                out.append("\n  " + _preview(text, text_chars))
                break
    elif record.value is not None:
        out.append("\n  ")
        out.append("(not a JSON object) " + _preview(_decode(record.value, 400), text_chars))
    return out


def consume_records(
    settings: Settings,
    topics: Sequence[str],
    *,
    from_beginning: bool = True,
    max_messages: int | None = None,
    timeout: float | None = None,
    on_record: Callable[[TailRecord], None],
    metadata_timeout: float = 10.0,
    stop: threading.Event | None = None,
) -> int:
    """Feed records of ``topics`` to ``on_record`` until a bound is hit; the count seen.

    Runs until ``max_messages`` records or ``timeout`` seconds, whichever comes first,
    or until ``stop`` is set (checked at least every :data:`POLL_SECONDS`), or forever
    when none is given.
    """
    consumer = Consumer(
        librdkafka_config(
            settings,
            {
                "group.id": f"{settings.app_id}-tail-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
                # committed outputs only (exactly-once); librdkafka's default, said here
                "isolation.level": "read_committed",
            },
        )
    )
    seen = 0
    try:
        metadata = consumer.list_topics(timeout=metadata_timeout)
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        assignment = []
        for topic in topics:
            meta = metadata.topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise LookupError(f"topic {topic!r} does not exist")
            assignment += [TopicPartition(topic, p, start) for p in sorted(meta.partitions)]
        consumer.assign(assignment)
        deadline = None if timeout is None else time.monotonic() + timeout
        while (max_messages is None or seen < max_messages) and not (
                stop is not None and stop.is_set()):
            wait = POLL_SECONDS
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    break
            msg = consumer.poll(wait)
            if msg is None:
                continue
            if msg.error():
                raise RuntimeError(f"consume error: {msg.error()}")
            ts_type, ts = msg.timestamp()
            on_record(
                TailRecord(
                    topic=str(msg.topic()),
                    partition=int(msg.partition() or 0),
                    offset=int(msg.offset() or 0),
                    timestamp_ms=ts if ts_type else None,
                    key=msg.key(),
                    value=msg.value(),
                    headers=_headers(msg.headers()),
                )
            )
            seen += 1
    finally:
        _close_within(consumer, CLOSE_SECONDS)
    return seen


#: How long Ctrl-C waits for the consumer to close before the tail exits anyway.
CLOSE_SECONDS = 0.5
#: Longest wait in one poll: how soon a stop request is seen.
POLL_SECONDS = 0.1


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event that SIGINT and SIGTERM set, for a poll loop to check.

    Why not KeyboardInterrupt: raised inside ``consumer.poll`` (whose C code checks for
    signals itself since confluent-kafka 2.13) it was seen lost, the tail still polling
    15 s after Ctrl-C. A handler that only sets a flag cannot be lost; the loop sees it
    within one short poll. A second Ctrl-C raises KeyboardInterrupt, for a loop that is
    stuck elsewhere. Outside the main thread (no handlers there) the event is only set
    by the caller.
    """
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, frame: object) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            if old is not None:  # None: a handler installed from C, not restorable
                signal.signal(sig, old)


def _close_within(consumer: Consumer, seconds: float) -> None:
    """Close ``consumer``, waiting at most ``seconds``. Why bounded: librdkafka's close of a
    consumer that used assign() can block on the group coordinator (librdkafka#4883; seen
    here as a tail that did not exit within 15 s of Ctrl-C under load). The tail commits
    nothing and holds no group membership, so abandoning the close loses nothing."""
    closer = threading.Thread(target=consumer.close, name="tail-close", daemon=True)
    closer.start()
    closer.join(seconds)


def _headers(raw: Any) -> tuple[tuple[str, bytes | None], ...]:
    """confluent-kafka header values may come back as str or bytes; normalise to bytes."""
    out: list[tuple[str, bytes | None]] = []
    for name, value in raw or ():
        out.append((name, value.encode("utf-8") if isinstance(value, str) else value))
    return tuple(out)


def print_tail(
    settings: Settings,
    topics: Sequence[str],
    *,
    from_beginning: bool = True,
    max_messages: int | None = None,
    timeout: float | None = None,
    console: Console | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Print records of ``topics`` readably until a bound, Ctrl-C or SIGTERM (or ``stop``,
    when the caller handles the signals); the count printed. Every text from the record
    is shown through :func:`printable`."""
    console = console or Console()
    with nullcontext(stop) if stop is not None else stop_on_signals() as flag:
        return consume_records(
            settings,
            topics,
            from_beginning=from_beginning,
            max_messages=max_messages,
            timeout=timeout,
            on_record=lambda record: console.print(render_record(settings, record)),
            stop=flag,
        )
