"""What the view knows: recent decisions, rejected items, texts, counts over time, lag.

Records come in as plain data (``TailRecord``) from the Kafka follower thread
(``follow.py``); pages read under the same lock. Everything is bounded (``Limits``):

* decisions: the last ``decisions`` audit records (or routed records' headers when the
  audit topic is off); a record redelivered at the same source position is kept once;
* rejected items: the last ``dlq`` dead letters, with the head of their payload;
* texts: raw title and body of routed items within ``text_bytes``, oldest dropped first;
* where each of the last ``locators`` routed items is (title, channel, output position):
  a matched text that has left the text store is read back from Kafka by that position
  on demand (``follow.fetch_text``); beyond that the pair shows identity and channel only;
* counts per status and second (15 min) and minute (24 h), per scope (``scopes`` keys).

Every string kept from a record is cut to a cap (caps.py) as it is ingested, so these
bounds hold whatever the size of a record's fields.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from ndd_stream.core.items import ItemFormat, parse_timestamp
from ndd_stream.kafka.tail import TailRecord
from ndd_stream.view import caps
from ndd_stream.view.caps import (
    DETAIL_CHARS,
    DLQ_REASONS,
    ID_CHARS,
    LIST_TITLE_CHARS,
    MAX_RAW_CHARS,
    NAME_CHARS,
    PREVIEW_BYTES,
    TITLE_CHARS,
    cut,
    ident,
)
from ndd_stream.view.rings import CappedCounter, Ring, StoredText, TextStore, Timeline

STATUSES = ("unique", "near_duplicate", "exact_duplicate", "dlq")


@dataclass(frozen=True)
class Limits:
    """How much the view keeps (see the module docstring)."""

    decisions: int = 5000
    dlq: int = 1000
    text_bytes: int = 64 * 1024 * 1024
    locators: int = 50_000
    scopes: int = 200


@dataclass(frozen=True)
class DecisionRow:
    """One decision as the pages show it."""

    key: str  # raw position topic[partition]@offset, or the identity
    status: str
    identity: str
    similarity: float
    duplicate_of: str | None
    matched_channel: str | None
    matched_time: str | None
    scope: str
    channel: str
    time: str
    policy: str
    replayed: bool
    decided_ms: int | None
    headers: tuple[tuple[str, str], ...]
    audit: dict[str, Any] | None = None

    @property
    def novel(self) -> dict[str, Any] | None:
        """The new decision rule's explanation (CONTRACT: ``novel`` in the audit record)."""
        value = (self.audit or {}).get("novel")
        return value if isinstance(value, dict) else None

    @property
    def reason(self) -> str:
        """Why: the documented policy, the new rule's reason code, or "behind" (decided after
        its scope's event-time order had passed it); "" for doc_q alone."""
        novel = self.novel
        if novel and novel.get("reason"):
            return str(novel["reason"])
        order = (self.audit or {}).get("order") or self.header("ndd-order")
        return self.policy or self.header("ndd-novel") or (str(order) if order else "")

    @property
    def matched(self) -> str | None:
        """The item shown beside this one: the duplicate's original, or what a unique item
        resembled (``novel.resembles`` / ``ndd-resembles``)."""
        if self.duplicate_of:
            return self.duplicate_of
        novel = self.novel
        if novel and novel.get("resembles"):
            return str(novel["resembles"])
        return self.header("ndd-resembles")

    @property
    def story(self) -> str:
        """The story the item belongs to (``story`` in the audit record, ``ndd-story``);
        records of a worker without stories are each a story of their own."""
        value = (self.audit or {}).get("story")
        return ident(str(value)) if value else (self.header("ndd-story") or self.identity)

    @property
    def supersedes(self) -> str | None:
        """NDD_KEEP=complete: the version of its story this more complete one replaces."""
        value = (self.audit or {}).get("supersedes")
        return ident(str(value)) if value else self.header("ndd-supersedes")

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass(frozen=True)
class DlqRow:
    key: str
    reason: str
    detail: str
    channel: str
    source: str
    decided_ms: int | None
    preview: str
    size: int
    headers: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Locator:
    identity: str
    title: str  # cut to LIST_TITLE_CHARS
    topic: str
    partition: int
    offset: int


@dataclass
class LagRow:
    topic: str
    partition: int
    role: str  # router (raw topics), decider (scoped topic) or shard (shards topic)
    committed: int  # -1: the group has committed nothing here
    high: int
    rate: float | None = None  # records/s done since the previous probe (shards: the load)

    @property
    def lag(self) -> int:
        return max(0, self.high - max(self.committed, 0))


def iso_ms(ms: int | None) -> str:
    if not ms:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _headers(record: TailRecord) -> tuple[tuple[str, str], ...]:
    """The record's headers as the view keeps them (caps.headers)."""
    return caps.headers(_raw_headers(record))


def _raw_headers(record: TailRecord) -> tuple[tuple[str, str], ...]:
    return tuple((k, (v or b"").decode("utf-8", "replace")) for k, v in record.headers)


def _hmap(record: TailRecord) -> dict[str, str]:
    """Header name -> value, whole: read once, each value cut where it is kept."""
    return dict(_raw_headers(record))


def _name(value: object) -> str:
    return cut("" if value is None else str(value), NAME_CHARS)


def _source(h: dict[str, str], default: str) -> str:
    if "ndd-source-topic" not in h:
        return ident(default)
    return ident("{}[{}]@{}".format(h.get("ndd-source-topic"), h.get("ndd-source-partition"),
                                    h.get("ndd-source-offset")))


def _float(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0


def _loads(value: bytes | None) -> Any:
    try:
        return orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return None


@dataclass
class ViewState:
    """Everything the pages show; ``ingest`` is called from the follower thread."""

    fmt: ItemFormat
    limits: Limits = field(default_factory=Limits)
    rows_from_outputs: bool = False  # no audit topic: decisions come from routed records

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.decisions: Ring[DecisionRow] = Ring(self.limits.decisions)
        self.dlq: Ring[DlqRow] = Ring(self.limits.dlq)
        self.texts = TextStore(self.limits.text_bytes, max_chars=MAX_RAW_CHARS)
        self.locators: Ring[Locator] = Ring(self.limits.locators)
        self.timeline = Timeline()
        self.gauges = Timeline()  # lag: one value per bucket, not a sum
        self.scopes = CappedCounter(self.limits.scopes)
        self.dlq_reasons = CappedCounter(DLQ_REASONS, "(other reasons)")
        self.lag: dict[tuple[str, int], LagRow] = {}
        self.lag_error: str | None = None
        self.follow_error: str | None = None  # the follower's last Kafka error, if unresolved
        self.lag_updated: float | None = None
        self.read: Counter[str] = Counter()  # records read per kind
        self.started = time.time()

    # --- ingestion (follower thread) ----------------------------------------------------
    def ingest(self, kind: str, record: TailRecord) -> None:
        """A record of the audit topic (``decisions``), an output (``unique`` /
        ``duplicate``) or the DLQ (``dlq``)."""
        with self.lock:
            self.read[kind] += 1
            if kind == "decisions":
                self._decision_from_audit(record)
            elif kind == "dlq":
                self._dead_letter(record)
            else:
                self._routed(record)

    def _add_row(self, row: DecisionRow) -> None:
        if self.decisions.add(row.key, row):
            when = (row.decided_ms or time.time() * 1000) / 1000
            self.timeline.add(when, row.status)
            self.scopes.add(row.scope or "(none)", row.status)

    def _decision_from_audit(self, record: TailRecord) -> None:
        whole = _loads(record.value)
        if not isinstance(whole, dict) or "status" not in whole:
            return
        headers = _headers(record)
        matched_ts = whole.get("matched_timestamp")
        matched_time = None
        if isinstance(matched_ts, int | float) and not isinstance(matched_ts, bool):
            try:
                matched_time = iso_ms(int(matched_ts * 1000))
            except (OverflowError, ValueError, OSError):
                matched_time = None
        audit = caps.bounded_json(whole)
        if isinstance(audit.get("novel"), dict) and audit["novel"].get("resembles"):
            audit["novel"]["resembles"] = ident(str(whole["novel"]["resembles"]))
        self._add_row(DecisionRow(
            key=ident(str(whole.get("source") or whole.get("identity") or record.offset)),
            status=_name(whole["status"]), identity=ident(str(whole.get("identity", ""))),
            similarity=_float(whole.get("similarity")),
            duplicate_of=None if whole.get("duplicate_of") is None
            else ident(str(whole["duplicate_of"])),
            matched_channel=None if whole.get("matched_channel") is None
            else _name(whole["matched_channel"]),
            matched_time=matched_time,
            scope=_name(whole.get("scope", "")), channel=_name(whole.get("channel", "")),
            time=_name(whole.get("time", "")), policy=_name(whole.get("policy") or ""),
            replayed=bool(whole.get("replayed")), decided_ms=record.timestamp_ms,
            headers=headers, audit=audit))

    def _routed(self, record: TailRecord) -> None:
        text = text_of(record, self.fmt)
        if text is None:
            return
        identity, channel, when = text.identity, text.channel, text.time
        self.texts.put(text)
        self.locators.add(identity, Locator(identity, cut(text.title, LIST_TITLE_CHARS),
                                            cut(record.topic, NAME_CHARS), record.partition,
                                            record.offset))
        if self.rows_from_outputs:
            h = _hmap(record)
            duplicate_of, matched_channel = h.get("ndd-duplicate-of"), h.get("ndd-matched-channel")
            matched_time = h.get("ndd-matched-time")
            self._add_row(DecisionRow(
                key=_source(h, identity), status=_name(h.get("ndd-status", "?")),
                identity=identity, similarity=_float(h.get("ndd-similarity")),
                duplicate_of=None if duplicate_of is None else ident(duplicate_of),
                matched_channel=None if matched_channel is None else _name(matched_channel),
                matched_time=None if matched_time is None else _name(matched_time),
                scope=_name(h.get("ndd-scope", "")), channel=channel, time=when,
                policy=_name(h.get("ndd-policy", "")), replayed=h.get("ndd-replayed") == "1",
                decided_ms=record.timestamp_ms, headers=_headers(record)))

    def _dead_letter(self, record: TailRecord) -> None:
        h = _hmap(record)
        src = _source(h, f"{record.topic}[{record.partition}]@{record.offset}")
        value = record.value or b""
        obj = _loads(value) if len(value) <= 2 * 1024 * 1024 else None
        channel = ""
        if isinstance(obj, dict):
            channel = _name(obj.get(self.fmt.channel_field) or "")
        try:
            size = int(h.get("ndd-dlq-truncated") or len(value))
        except ValueError:
            size = len(value)
        row = DlqRow(key=src, reason=_name(h.get("ndd-dlq-reason", "?")),
                     detail=cut(h.get("ndd-dlq-detail", ""), DETAIL_CHARS), channel=channel,
                     source=src, decided_ms=record.timestamp_ms,
                     preview=value[:PREVIEW_BYTES].decode("utf-8", "replace"),
                     size=size, headers=_headers(record))
        if self.dlq.add(row.key, row):
            self.timeline.add((record.timestamp_ms or time.time() * 1000) / 1000, "dlq")
            self.scopes.add(channel or "(not readable)", "dlq")
            self.dlq_reasons.add(row.reason, "n")

    # --- lag (probe thread) ---------------------------------------------------------------
    def set_lag(self, rows: list[LagRow], raw_growth: int, now: float, since: float | None,
                error: str | None = None) -> None:
        """Lag per partition from one probe, and the raw topics' growth since the last
        probe (spread evenly over the seconds in between: the 'in' rate)."""
        with self.lock:
            self.lag_error = error
            if error is not None:
                return
            if since is not None:  # what each partition did since the last probe: its load
                seconds = max(now - since, 1e-3)
                for r in rows:
                    before = self.lag.get((r.topic, r.partition))
                    if before is not None and r.committed >= 0:
                        r.rate = max(0, r.committed - max(before.committed, 0)) / seconds
            self.lag = {(r.topic, r.partition): r for r in rows}
            self.lag_updated = now
            total = sum(r.lag for r in rows if r.role == "decider")
            for series in (self.gauges.fine, self.gauges.coarse):
                series.set(now, "lag", total)
            if since is not None and raw_growth > 0:
                seconds = max(1, int(now) - int(since))
                share, rest = divmod(raw_growth, seconds)
                for i in range(seconds):
                    n = share + (1 if i < rest else 0)
                    if n:
                        self.timeline.add(int(since) + 1 + i, "in", n)

    def put_text(self, text: StoredText) -> None:
        """A text read back from Kafka for the pair view."""
        with self.lock:
            self.texts.put(text)

    # --- queries (web handlers) -----------------------------------------------------------
    def title_of(self, identity: str | None) -> str:
        if identity is None:
            return ""
        text = self.texts.get(identity)
        if text is not None:
            return text.title
        loc = self.locators.get(identity)
        return loc.title if loc is not None else ""


def text_of(record: TailRecord, fmt: ItemFormat) -> StoredText | None:
    """Title, raw body, channel and event time of a routed record (None without an
    ``ndd-identity`` header: not a routed record), each cut to its cap (caps.py)."""
    identity = _hmap(record).get("ndd-identity")
    if identity is None:
        return None
    obj = _loads(record.value)
    title = body = channel = when = ""
    if isinstance(obj, dict):
        t = obj.get(fmt.title_field) if fmt.title_field else None
        title = t if isinstance(t, str) else ""
        b = next((obj[n] for n in fmt.text_fields if obj.get(n) is not None), "")
        body = b if isinstance(b, str) else ""
        channel = _name(obj.get(fmt.channel_field) or "")
        try:
            ts = next((parse_timestamp(obj[n]) for n in fmt.timestamp_fields
                       if obj.get(n) is not None), None)
            when = iso_ms(int(ts * 1000)) if ts is not None else ""
        except (OverflowError, ValueError, OSError):
            when = ""
    was_cut = len(title) > TITLE_CHARS or len(body) > MAX_RAW_CHARS
    position = cut(f"{record.topic}[{record.partition}]@{record.offset}", ID_CHARS)
    return StoredText(ident(identity), title[:TITLE_CHARS], body[:MAX_RAW_CHARS], channel,
                      when, position, cut=was_cut)
