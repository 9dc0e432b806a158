"""``ndd-stream eval STREAM --pairs PAIRS``: routing quality on labelled pairs of a stream.

The stream (Reuters-21578 SGML folder or JSONL items, :mod:`ndd_stream.eval.stream_items`)
is decided in event-time order by the core :class:`Detector`, exactly as ``dedup`` and the
worker decide it: items built by ``core.items.parse_object`` (title + body, the default
extraction), one scope, the detection window and the novelty mode given.

One Detector run at the lowest band edge yields, for every item, its best earlier doc_q and
the novelty rule's verdict on that match. Every document is indexed whatever its decision
(``index_duplicates``), so both are the same at any threshold, and the routing at threshold
``t`` is "best doc_q >= t and not judged new" (or "best doc_q >= t" for doc_q alone). The
operating threshold is also run through a fresh Detector and its routing is compared with
this derivation (the report prints the agreement). Precision and recall are band-weighted
(:mod:`ndd_stream.eval.pairs`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ndd_stream.core.detector import DEFAULT_THRESHOLD, Detector, DetectorConfig, NoveltyMode
from ndd_stream.core.document import Decision, Document
from ndd_stream.core.extract import DEFAULT_EXTRACT, ExtractMode
from ndd_stream.core.items import ItemFormat, parse_object
from ndd_stream.eval.bootstrap import BootstrapResult, Outcome, stratified_bootstrap
from ndd_stream.eval.pairs import (
    BAND_EDGES,
    Pair,
    Weighted,
    band_of,
    band_weights,
    load_pair_sets,
    weighted_confusion,
)
from ndd_stream.eval.stream_items import load_stream

DEFAULT_SWEEP: tuple[float, ...] = (0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True)
class PairsConfig:
    stream: Path
    pairs: tuple[Path, ...]  # several: pooled (ndd_stream.eval.pairs)
    threshold: float = DEFAULT_THRESHOLD
    thresholds: tuple[float, ...] = DEFAULT_SWEEP
    novelty: NoveltyMode = "auto"
    window_hours: int = 24
    extract: ExtractMode = DEFAULT_EXTRACT
    min_body: int = 200


@dataclass
class PairsResult:
    config: PairsConfig
    items: int
    pairs: int
    unsure: int
    pairs_matched: int  # pairs whose b is a's best earlier match in this run
    band_items: list[int]
    band_pairs: list[int]
    band_weights: list[float]
    at_default: Weighted
    agreement: float  # operating-threshold Detector vs the derived routing
    routed_duplicate: int
    novel_reasons: dict[str, int]
    sweep: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    bootstrap: BootstrapResult | None = None  # at the operating threshold


def documents(config: PairsConfig) -> list[Document]:
    fmt = ItemFormat(scope="global", extract=config.extract, max_future_seconds=0)
    out: list[Document] = []
    for item in load_stream(config.stream, config.min_body):
        doc = parse_object({"id": item.identity, "title": item.title, "text": item.body,
                            "timestamp": item.timestamp}, fmt, item.identity)
        if isinstance(doc, Document):
            out.append(doc)
    return out


def _decide(docs: Sequence[Document], threshold: float, config: PairsConfig) -> list[Decision]:
    detector = Detector(DetectorConfig(threshold=threshold, window_hours=config.window_hours,
                                       novelty=config.novelty))
    return [detector.decide(d) for d in docs]


def routed_at(decisions: Sequence[Decision], t: float, rule: bool) -> set[str]:
    """Items routed duplicate at threshold ``t`` (derived from a run at a lower one)."""
    return {d.identity for d in decisions
            if d.similarity >= t and (d.is_duplicate or (not rule and d.novel is not None))}


def run_pairs(config: PairsConfig) -> PairsResult:
    start = time.perf_counter()
    pairs = load_pair_sets(config.pairs)
    docs = documents(config)
    if not docs:
        raise ValueError(f"no items with a body of {config.min_body}+ characters in "
                         f"{config.stream}")
    floor = min(BAND_EDGES[0], config.threshold, *config.thresholds)
    low = _decide(docs, floor, config)
    best = {d.identity: d.similarity for d in low}
    match = {d.identity: d.duplicate_of or (d.novel.resembles if d.novel else None) for d in low}
    items, labelled, weights = band_weights(best, pairs, best)
    operating = _decide(docs, config.threshold, config)
    derived = routed_at(low, config.threshold, rule=True)
    routed = {d.identity for d in operating if d.is_duplicate}
    agree = sum((d.identity in routed) == (d.identity in derived) for d in operating)
    sweep = []
    for t in sorted(set(config.thresholds) | {config.threshold}):
        row: dict[str, Any] = {"threshold": t}
        for name, rule in (("rule", True), ("doc_q", False)):
            c = weighted_confusion(pairs, routed_at(low, t, rule), best, weights)
            row[name] = c.as_dict()
        sweep.append(row)
    return PairsResult(
        config=config, items=len(docs), pairs=len(pairs),
        unsure=sum(p.label == "unsure" for p in pairs),
        pairs_matched=sum(match.get(p.a) == p.b for p in pairs),
        band_items=items, band_pairs=labelled, band_weights=weights,
        at_default=weighted_confusion(pairs, routed, best, weights),
        agreement=agree / len(operating), routed_duplicate=len(routed),
        novel_reasons=dict(Counter(d.novel.reason for d in operating if d.novel)),
        sweep=sweep, failures=failures(pairs, operating),
        seconds=time.perf_counter() - start,
        bootstrap=stratified_bootstrap(outcomes(pairs, routed, best), weights,
                                       target=TARGET),
    )


TARGET = (0.95, 0.90)
"""Precision and recall targets for held-out pairs: the bootstrap reports the share of
resamples that meet both."""


def outcomes(pairs: Sequence[Pair], routed: set[str], best: dict[str, float]) -> list[Outcome]:
    """The labelled (dup or not) pairs inside the bands, with their routing."""
    out = []
    for p in pairs:
        k = band_of(best.get(p.a, 0.0))
        if p.label != "unsure" and k is not None:
            out.append(Outcome(k, p.label == "dup", p.a in routed))
    return out


def failures(pairs: Sequence[Pair], decisions: Sequence[Decision]) -> list[str]:
    """One line per mislabelled routing at the operating threshold (for error analysis)."""
    by_id = {d.identity: d for d in decisions}
    out = []
    for p in pairs:
        d = by_id.get(p.a)
        if d is None or p.label == "unsure" or band_of(d.similarity) is None:
            continue
        if d.is_duplicate != (p.label == "dup"):
            why = d.novel.detail if d.novel else d.status.value
            out.append(f"{'FN' if p.label == 'dup' else 'FP'} {p.a} ~ {p.b} "
                       f"doc_q {d.similarity:.3f}: {why}")
    return out


def markdown(result: PairsResult) -> str:
    c = result.config
    edges = BAND_EDGES
    lines = [
        f"# Labelled pairs: {' + '.join(p.name for p in c.pairs)} on {c.stream.name}",
        "",
        f"{result.items} stream items (bodies of {c.min_body}+ characters, by event time, one "
        f"global scope, window {c.window_hours} h + the current hour), {result.pairs} pairs "
        f"({result.unsure} unsure, left out); {result.pairs_matched} pairs have b as a's best "
        f"earlier match in this run. Novelty mode `{c.novelty}`.",
        "",
        f"## At the operating threshold {c.threshold}",
        "",
        f"Band-weighted precision **{result.at_default.precision:.3f}**, recall "
        f"**{result.at_default.recall:.3f}** ({result.routed_duplicate} items routed "
        f"duplicate; judged new: {result.novel_reasons or 'none'}). Detector vs derived "
        f"routing agreement: {result.agreement:.4f}.",
        "",
        *_bootstrap_lines(result.bootstrap),
        "| doc_q band | stream items | labelled pairs | weight per pair |",
        "|---|---:|---:|---:|",
    ]
    for k, (n, m, w) in enumerate(zip(result.band_items, result.band_pairs,
                                      result.band_weights, strict=True)):
        lines.append(f"| {edges[k]:.2f}-{edges[k + 1]:.2f} | {n} | {m} | {w:.2f} |")
    lines += ["", "## Threshold sweep", "",
              "| t | P (rule) | R (rule) | P (doc_q alone) | R (doc_q alone) |",
              "|---:|---:|---:|---:|---:|"]
    for row in result.sweep:
        r, q = row["rule"], row["doc_q"]
        lines.append(f"| {row['threshold']:.2f} | {r['precision']:.3f} | {r['recall']:.3f} | "
                     f"{q['precision']:.3f} | {q['recall']:.3f} |")
    lines += ["", f"Run time {result.seconds:.0f} s.", ""]
    return "\n".join(lines)


def _bootstrap_lines(b: BootstrapResult | None) -> list[str]:
    if b is None:
        return []
    share = (f"; resamples meeting P >= {TARGET[0]} and R >= {TARGET[1]}: {b.meets:.2f}"
             if b.meets is not None else "")
    return [f"Stratified bootstrap ({b.resamples} resamples within bands, central "
            f"{b.level:.0%}): precision {b.precision}, recall {b.recall}{share}.", ""]


def as_json(result: PairsResult) -> dict[str, Any]:
    c = result.config
    return {
        "stream": str(c.stream), "pairs_files": [str(p) for p in c.pairs],
        "threshold": c.threshold,
        "novelty": c.novelty, "window_hours": c.window_hours, "extract": c.extract,
        "min_body": c.min_body, "items": result.items, "pairs": result.pairs,
        "unsure": result.unsure, "pairs_matched": result.pairs_matched,
        "band_edges": list(BAND_EDGES), "band_items": result.band_items,
        "band_pairs": result.band_pairs, "band_weights": result.band_weights,
        "at_threshold": result.at_default.as_dict(), "agreement": result.agreement,
        "routed_duplicate": result.routed_duplicate, "novel_reasons": result.novel_reasons,
        "sweep": result.sweep, "failures": result.failures,
        "bootstrap": result.bootstrap.as_dict() if result.bootstrap else None,
        "seconds": round(result.seconds, 1),
    }
