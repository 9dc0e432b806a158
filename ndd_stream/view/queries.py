"""What each page asks of the state: copied out under its lock, so rendering never holds it.

Pure (no Kafka, no web): unit-tested in tests/test_view_pure.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from ndd_stream.view.model import STATUSES, DecisionRow, DlqRow, LagRow, ViewState
from ndd_stream.view.rings import StoredText

SPANS = {"5m": 300, "15m": 900, "1h": 3600, "6h": 21600, "24h": 86400}
DUPLICATES = ("near_duplicate", "exact_duplicate")


@dataclass(frozen=True)
class Filter:
    """The decisions list's filters, as given in the page's query string."""

    scope: str = ""
    status: str = ""  # "", a status, or "duplicate" (near or exact)
    smin: float | None = None
    smax: float | None = None
    reason: str = ""  # "", a reason code, or "-" for none
    q: str = ""  # substring of the title or identity

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> Filter:
        def number(name: str) -> float | None:
            try:
                return float(query.get(name, "").strip())
            except ValueError:
                return None

        return cls(scope=query.get("scope", "").strip(), status=query.get("status", "").strip(),
                   smin=number("smin"), smax=number("smax"),
                   reason=query.get("reason", "").strip(), q=query.get("q", "").strip())

    def accepts(self, row: DecisionRow, title: str) -> bool:
        if self.scope and row.scope != self.scope:
            return False
        if self.status == "duplicate":
            if row.status not in DUPLICATES:
                return False
        elif self.status and row.status != self.status:
            return False
        if self.smin is not None and row.similarity < self.smin:
            return False
        if self.smax is not None and row.similarity > self.smax:
            return False
        if self.reason == "-":
            if row.reason:
                return False
        elif self.reason and row.reason != self.reason:
            return False
        needle = self.q.casefold()
        return not needle or needle in title.casefold() or needle in row.identity.casefold()


@dataclass(frozen=True)
class ListedDecision:
    row: DecisionRow
    title: str
    matched_title: str


@dataclass
class DecisionList:
    rows: list[ListedDecision]
    matching: int  # rows in the ring that pass the filter (rows holds the newest of them)
    held: int  # rows in the ring
    scopes: list[str]
    reasons: list[str]


def decisions(state: ViewState, flt: Filter, limit: int = 200) -> DecisionList:
    with state.lock:
        everything = state.decisions.newest()
        scopes = sorted({r.scope for r in everything})
        reasons = sorted({r.reason for r in everything if r.reason})
        out: list[ListedDecision] = []
        matching = 0
        for row in everything:
            title = state.title_of(row.identity)
            if not flt.accepts(row, title):
                continue
            matching += 1
            if len(out) < limit:
                out.append(ListedDecision(row, title, state.title_of(row.matched)))
    return DecisionList(out, matching, len(everything), scopes, reasons)


@dataclass
class Now:
    """The 'Now' page: rates, shares, the chart series, per-scope counts, lag."""

    span: int
    start: float
    step: int
    series: dict[str, list[float]]  # per second (rates) or records (lag)
    rate_in: float | None
    rate_out: float
    totals: dict[str, int]  # per status over the span
    scopes: list[tuple[str, Counter[str]]]
    lag: list[LagRow]
    lag_updated: float | None
    lag_error: str | None
    held: dict[str, int] = field(default_factory=dict)
    follow_error: str | None = None
    shards: int = 1  # NDD_SHARDS: shard partition k is shard k % shards of k // shards


def now(state: ViewState, at: float, span: int, shards: int = 1) -> Now:
    with state.lock:
        start, step, buckets = state.timeline.window(at, span)
        _, _, gauges = state.gauges.window(at, span)
        totals = {s: sum(int(b.get(s, 0)) for b in buckets) for s in STATUSES}
        series: dict[str, list[float]] = {
            s: [b.get(s, 0) / step for b in buckets] for s in STATUSES}
        series["out"] = [sum(b.get(s, 0) for s in STATUSES) / step for b in buckets]
        series["in"] = [b.get("in", 0) / step for b in buckets]
        lag: list[float] = []
        last = 0.0
        for g in gauges:  # a bucket without a probe shows the last value probed
            last = float(g["lag"]) if "lag" in g else last
            lag.append(last)
        series["lag"] = lag
        rate_out = sum(state.timeline.rate(at, s) for s in STATUSES)
        # 'in' is filled up to the last probe only: measure it up to there.
        rate_in = (state.timeline.rate(state.lag_updated + 1, "in")
                   if state.lag_updated is not None else None)
        scopes = sorted(((k, Counter(v)) for k, v in state.scopes.counts.items()),
                        key=lambda kv: (-sum(kv[1].values()), kv[0]))
        lag_rows = sorted(state.lag.values(), key=lambda r: (r.role, r.topic, r.partition))
        held = {"decisions": len(state.decisions), "texts": len(state.texts),
                "text_bytes": state.texts.used, "dlq": len(state.dlq),
                "evicted_decisions": state.decisions.evicted,
                "evicted_texts": state.texts.evicted}
        return Now(span, start, step, series, rate_in, rate_out, totals, scopes, lag_rows,
                   state.lag_updated, state.lag_error, held, state.follow_error, shards)


@dataclass
class Pair:
    """A decision and the two texts; ``old`` None when the matched text is not held."""

    row: DecisionRow
    new: StoredText | None
    old: StoredText | None
    matched: str | None
    old_located: bool  # the view knows where the matched item is and can read it back


def pair(state: ViewState, key: str) -> Pair | None:
    with state.lock:
        row = state.decisions.get(key)
        if row is None:
            return None
        matched = row.matched
        return Pair(row, state.texts.get(row.identity), state.texts.get(matched), matched,
                    matched is not None and matched in state.locators)


def dead_letters(state: ViewState, reason: str = "", limit: int = 200
                 ) -> tuple[list[DlqRow], Counter[str]]:
    with state.lock:
        rows = [r for r in state.dlq.newest() if not reason or r.reason == reason][:limit]
        return rows, Counter({k: c["n"] for k, c in state.dlq_reasons.counts.items()})
