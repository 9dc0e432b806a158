"""The summary after the feed: counts, DLQ reasons, the scope hint, the JSON report."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from ndd_stream.cli.demo.tally import Tally
from ndd_stream.cli.demo.view import counts_table
from ndd_stream.settings import Settings

if TYPE_CHECKING:
    from rich.console import Console


def _offline_counts(feed_path: Path, s: Settings, scope: str) -> dict[str, int]:
    """Statuses ``ndd-stream dedup`` gives the feed under ``scope`` (for the scope hint)."""
    import io

    from ndd_stream.dedup import run_dedup

    other = s.model_copy(update={"scope": scope})
    with open(feed_path, "rb") as source:
        summary = run_dedup(source, io.BytesIO(), other.detector_config(), other.item_format())
    return dict(summary.statuses)


def summary(console: Console, s: Settings, tally: Tally, feed_path: Path,
             seconds: float) -> None:
    console.print()
    console.print(counts_table(tally, title=f"ndd-stream demo: {len(tally.lines)} lines in "
                               f"{seconds:.1f} s (scope={s.scope}, threshold={s.threshold:g})"))
    totals = tally.totals()
    console.print("counts: " + " ".join(f"{k}={v}" for k, v in totals.items()), highlight=False,
                  soft_wrap=True)
    reasons = Counter(o.reason for o in tally.outcomes.values() if o.status == "dlq")
    if reasons:
        console.print("dlq reasons: " + ", ".join(f"{r} {n}" for r, n in sorted(reasons.items())),
                      highlight=False, soft_wrap=True)
    novel = tally.novel()
    if novel:
        console.print(
            f"new reports: {sum(novel.values())} item(s) resembled an earlier one (doc_q >= "
            f"threshold) but were judged new and routed unique ("
            + ", ".join(f"{reason} {n}" for reason, n in novel.items())
            + "; see the ndd-resembles / ndd-novel headers, docs/ITEMS.md)", highlight=False,
            soft_wrap=True)
    duplicates = totals["near_duplicate"] + totals["exact_duplicate"]
    if s.scope == "channel":
        offline = _offline_counts(feed_path, s, "global")
        more = offline.get("near_duplicate", 0) + offline.get("exact_duplicate", 0) - duplicates
        console.print(
            "\nscope=channel: an item is only compared with earlier items of its own channel "
            "(agency updates and repeats, aggregator re-posts).", highlight=False)
        if more > 0:
            console.print(
                f"{more} more item(s) of this feed are copies of stories from another channel "
                "(syndication); to catch those too run:  [bold]ndd-stream demo --scope "
                "global[/]", highlight=False)
    elif s.scope == "global":
        matches = tally.cross_channel_matches()
        console.print(f"\nscope=global: every item is compared with every channel's items, "
                      "in event-time order across the raw partitions the channels are keyed "
                      f"to; {len(matches)} duplicate(s) matched an item of another "
                      "channel (syndication).", highlight=False)
        if matches:
            m = matches[0]
            console.print(f"e.g. {m.identity} on {m.channel}: {m.status} of {m.duplicate_of} "
                          f"on {m.matched_channel} (doc_q {m.similarity:.2f}; headers "
                          "ndd-duplicate-of, ndd-matched-channel, ndd-similarity)",
                          highlight=False, markup=False, soft_wrap=True)


def write_report(path: Path, s: Settings, tally: Tally) -> None:
    items = []
    for index, line in enumerate(tally.lines):
        outcome = tally.outcomes.get(index)
        items.append({
            "line": line.number, "identity": line.identity, "channel": line.channel,
            "status": outcome.status if outcome else None,
            "similarity": outcome.similarity if outcome else None,
            "duplicate_of": outcome.duplicate_of if outcome else None,
            "matched_channel": outcome.matched_channel if outcome else None,
            "reason": outcome.reason if outcome else None,
            "novel": outcome.novel if outcome else None,
            "resembles": outcome.resembles if outcome else None,
        })
    report = {"scope": s.scope, "threshold": s.threshold, "totals": tally.totals(),
              "by_channel": tally.counts(), "lines": items}
    path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
