"""What came back: outcomes by raw position, counted per channel and status."""

from __future__ import annotations

import json
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any

from ndd_stream.cli.demo.feed import FeedLine, json_object

LATEST_PAIRS = 8
STATUSES = ("unique", "near_duplicate", "exact_duplicate", "dlq")
NO_CHANNEL = "(no channel)"  # rejected lines that are not a JSON object with a channel


# --- what came back ----------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """What the worker did with one line: a decision or a DLQ reason."""

    status: str  # unique | near_duplicate | exact_duplicate | dlq
    channel: str
    identity: str | None = None
    similarity: float = 0.0
    duplicate_of: str | None = None
    matched_channel: str | None = None
    reason: str | None = None
    # routed unique although doc_q >= threshold: judged a new report (core.novelty)
    novel: str | None = None  # its reason
    resembles: str | None = None
    novel_detail: str | None = None


@dataclass(frozen=True)
class Pair:
    """A duplicate and what it duplicates, or a new report and what it resembles, for the
    'latest matches' table (status ``new`` for the latter)."""

    status: str
    similarity: float
    channel: str
    title: str
    matched_channel: str
    matched_title: str


@dataclass
class Tally:
    """Outcomes by raw position; counts per channel and status; the latest duplicate pairs."""

    lines: list[FeedLine]
    outcomes: dict[int, Outcome] = field(default_factory=dict)  # index in lines -> outcome
    extra: list[Outcome] = field(default_factory=list)  # records not from our feed
    pairs: deque[Pair] = field(default_factory=lambda: deque(maxlen=LATEST_PAIRS))
    sent: int = 0
    delivered: int = 0
    failed: int = 0
    position_of: dict[str, int] = field(default_factory=dict)  # raw position -> line index
    _early: dict[str, Outcome] = field(default_factory=dict)  # came back before its report
    _seen_extra: set[str] = field(default_factory=set)
    titles: dict[str, str] = field(default_factory=dict)
    events: list[tuple[int | None, Outcome]] = field(default_factory=list)  # for plain output

    def __post_init__(self) -> None:
        for line in self.lines:
            if line.identity is not None and line.title:
                self.titles.setdefault(line.identity, line.title)

    def delivered_at(self, index: int, position: str) -> None:
        """The producer says line ``index`` is at ``position``."""
        self.delivered += 1
        self.position_of[position] = index
        line = self.lines[index]
        if line.identity is None and line.title:
            self.titles.setdefault(position, line.title)  # identity falls back to position
        early = self._early.pop(position, None)
        if early is not None:
            self._record(index, early)

    def add(self, position: str | None, outcome: Outcome) -> None:
        """An audit or DLQ record for the raw record at ``position``."""
        if position is None:
            return
        index = self.position_of.get(position)
        if index is not None:
            self._record(index, outcome)
        elif self.delivered + self.failed < self.sent:
            self._early[position] = outcome  # our delivery report is still on its way
        elif position not in self._seen_extra:  # produced by someone else (--keep-running)
            self._seen_extra.add(position)
            if not outcome.channel:
                outcome = replace(outcome, channel=NO_CHANNEL)
            self.extra.append(outcome)
            self._pair(outcome)
            self.events.append((None, outcome))

    def _record(self, index: int, outcome: Outcome) -> None:
        if index in self.outcomes:
            return  # re-delivered by the worker: already counted
        if not outcome.channel:
            outcome = replace(outcome, channel=self.lines[index].channel or NO_CHANNEL)
        self.outcomes[index] = outcome
        self._pair(outcome)
        self.events.append((index, outcome))

    def _pair(self, outcome: Outcome) -> None:
        if outcome.novel is not None:
            self.pairs.append(Pair("new", outcome.similarity, outcome.channel,
                                   self.title(outcome.identity), outcome.novel,
                                   self.title(outcome.resembles)))
            return
        if outcome.status not in ("near_duplicate", "exact_duplicate"):
            return
        self.pairs.append(Pair(
            outcome.status, outcome.similarity, outcome.channel,
            self.title(outcome.identity), outcome.matched_channel or "?",
            self.title(outcome.duplicate_of)))

    def title(self, identity: str | None) -> str:
        if identity is None:
            return "?"
        return self.titles.get(identity) or f"(id {identity})"

    @property
    def accounted(self) -> int:
        return len(self.outcomes)

    def progress(self) -> str:
        """``sent 154/154  ·  decided 154 = unique 98 + ... + dlq 7``: the parts add up to the
        number shown, which counts the feed's lines and (after a '+') records from others."""
        totals = self.totals()
        parts = " + ".join(f"{status} {n}" for status, n in totals.items())
        others = f" (feed {self.accounted} + others {len(self.extra)})" if self.extra else ""
        return (f"sent {self.sent}/{len(self.lines)}  ·  decided {sum(totals.values())}"
                f"{others} = {parts}")

    def complete(self) -> bool:
        return (self.sent == len(self.lines) and self.delivered + self.failed == self.sent
                and self.accounted >= self.delivered)

    def counts(self) -> dict[str, dict[str, int]]:
        """channel -> status -> count, over our lines and any extra records."""
        table: dict[str, Counter[str]] = {}
        for outcome in [*self.outcomes.values(), *self.extra]:
            table.setdefault(outcome.channel, Counter())[outcome.status] += 1
        return {ch: dict(c) for ch, c in sorted(table.items())}

    def totals(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for outcome in [*self.outcomes.values(), *self.extra]:
            total[outcome.status] += 1
        return {status: total.get(status, 0) for status in STATUSES}

    def novel(self) -> dict[str, int]:
        """Reason -> items judged new reports although they resembled an earlier one."""
        found = Counter(o.novel for o in [*self.outcomes.values(), *self.extra] if o.novel)
        return dict(sorted(found.items()))

    def cross_channel(self) -> int:
        return len(self.cross_channel_matches())

    def cross_channel_matches(self) -> list[Outcome]:
        """Duplicates whose match came through another channel, in line order."""
        return [o for _, o in sorted(self.outcomes.items())
                if o.matched_channel is not None and o.matched_channel != o.channel] + [
            o for o in self.extra
            if o.matched_channel is not None and o.matched_channel != o.channel]


def position_of_record(topic: str, partition: int, offset: int) -> str:
    from ndd_stream.worker.records import Source

    return Source(topic, partition, offset).position


def outcome_of_decision(value: bytes | None) -> tuple[str | None, Outcome] | None:
    """(raw position, outcome) of an audit record of ``news.decisions``."""
    try:
        record = json.loads(value or b"")
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict) or "status" not in record:
        return None
    similarity = record.get("similarity")
    found = record.get("novel")
    novel: dict[str, Any] = found if isinstance(found, dict) else {}
    return record.get("source"), Outcome(
        status=str(record["status"]),
        channel=str(record.get("channel") or NO_CHANNEL),
        identity=None if record.get("identity") is None else str(record["identity"]),
        similarity=float(similarity) if isinstance(similarity, int | float) else 0.0,
        duplicate_of=record.get("duplicate_of"),
        matched_channel=record.get("matched_channel"),
        novel=str(novel["reason"]) if novel.get("reason") else None,
        resembles=str(novel["resembles"]) if novel.get("resembles") else None,
        novel_detail=str(novel["detail"]) if novel.get("detail") else None,
    )


def outcome_of_dlq(headers: Any, value: bytes | None = None,
                   channel_field: str = "channel") -> tuple[str | None, Outcome]:
    """(raw position, outcome) of a DLQ record (reason and position are in its headers).

    ``headers`` as confluent-kafka returns them: a list of (name, bytes) pairs or None.
    The channel is read from the dead letter's value (the raw item) when that is a JSON
    object with one; otherwise it is left empty and the Tally takes it from the feed line
    at that position, or shows "(no channel)" for an item someone else produced.
    """
    from ndd_stream.worker.records import H_DLQ_REASON, Source, header_map

    hdrs = header_map(headers)
    source = Source.from_headers(hdrs)
    position = source.position if source is not None else None
    reason = hdrs.get(H_DLQ_REASON, b"?").decode("utf-8", errors="replace")
    item = json_object(value or b"", lenient=True)
    channel = item.get(channel_field) if item is not None else None
    return position, Outcome(status="dlq", channel=str(channel) if channel else "",
                             reason=reason)

