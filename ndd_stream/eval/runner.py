"""One evaluation run: corpus -> extraction -> every method's pair scores -> metrics.

Each method scores every pair once; the pairwise sweep and the routing sweep then only
threshold those scores. Routing replays the corpus in arrival order; for DDD the core
Detector itself decides at the operating thresholds (``detector_thresholds`` plus the
sweep's best), and its decisions are checked against the score-matrix replay used for the
rest of the curve.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ndd_stream.core.detector import DEFAULT_THRESHOLD
from ndd_stream.core.document import Decision
from ndd_stream.core.extract import DEFAULT_EXTRACT
from ndd_stream.eval.corpus import Corpus, JsonlFields, load_corpus
from ndd_stream.eval.documents import EvalDoc
from ndd_stream.eval.extraction import extract_items
from ndd_stream.eval.grouping import group_edges, group_scores
from ndd_stream.eval.methods.base import Method
from ndd_stream.eval.methods.ddd import DDD
from ndd_stream.eval.methods.registry import DEFAULT_METHODS, make
from ndd_stream.eval.metrics import (
    Confusion,
    Route,
    adjusted_rand_index,
    pairwise_sweep,
    routing_confusion,
    same_cluster_pairs,
    same_group_confusion,
    upper_triangle,
)
from ndd_stream.eval.progress import StepProgress
from ndd_stream.eval.routing import best_earlier, routes_at, stream_order, with_synthetic_times

DEFAULT_THRESHOLDS: tuple[float, ...] = tuple(round(0.02 * k, 2) for k in range(1, 51))


@dataclass(frozen=True)
class EvalConfig:
    """Everything a run depends on (echoed into the report for reproduction)."""

    corpus: Path
    methods: tuple[str, ...] = DEFAULT_METHODS
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS
    extract: str = DEFAULT_EXTRACT
    order: str = "random"
    seed: int = 0
    window_hours: int = 24
    ddd_threshold: float = DEFAULT_THRESHOLD
    fields: JsonlFields = field(default_factory=JsonlFields)
    progress: bool | None = None


@dataclass
class MethodResult:
    """Measurements of one method."""

    name: str
    reference: str
    parameters: dict[str, object]
    binary: bool
    runtime_ms: float
    compared_pairs: int
    notes: list[str]
    sweep: list[tuple[float, Confusion]]
    best_threshold: float | None
    best: Confusion
    routing_sweep: list[tuple[float, Confusion]]
    routing_threshold: float | None
    routing: Confusion
    ari_pairwise: float
    ari_routing: float
    detector: list[dict[str, Any]] = field(default_factory=list)
    # DDD only: the stream's story groups at the operating threshold against the gold
    # clusters (story_scores)
    stories: dict[str, Any] | None = None


@dataclass
class EvalResult:
    config: EvalConfig
    corpus: Corpus
    n_items: int
    n_clusters: int
    n_pairs: int
    n_positive_pairs: int
    n_expected_duplicates: int
    extraction_ms_per_page: float
    extraction_failures: list[tuple[str, str]]
    methods: list[MethodResult]
    total_seconds: float


def _best(sweep: Sequence[tuple[float, Confusion]]) -> tuple[float, Confusion]:
    """Highest F1; ties go to the higher threshold (fewer false alarms for the same F1)."""
    return max(sweep, key=lambda tc: (round(tc[1].f1, 9), tc[0]))


def run(config: EvalConfig) -> EvalResult:
    """Run the whole evaluation described by ``config``."""
    started = time.perf_counter()
    corpus = load_corpus(config.corpus, config.fields)
    if len(corpus.items) < 2:
        raise ValueError(f"corpus {config.corpus} has {len(corpus.items)} usable items; need 2+")
    extracted = extract_items(corpus.items, config.extract)
    docs = [
        EvalDoc(item.identity, item.cluster, text, item.title, item.timestamp or 0.0,
                markup=item.is_html)
        for item, text in zip(corpus.items, extracted.texts, strict=True)
    ]
    order = stream_order(docs, config.order, config.seed)
    if config.order == "timestamp":
        stream = [docs[i] for i in order]
    else:
        stream = with_synthetic_times(docs, order)
    clusters = [d.cluster for d in docs]
    cluster_of = {d.identity: d.cluster for d in docs}
    gold = same_cluster_pairs(clusters)
    thresholds = sorted(set(config.thresholds))
    results: list[MethodResult] = []
    with StepProgress(len(config.methods), config.progress) as progress:
        for name in config.methods:
            progress.step(name)
            method = make(name, config.window_hours)
            results.append(
                _evaluate(method, docs, stream, order, gold, cluster_of, thresholds, config)
            )
            progress.advance()
    expected = sum(len(members) - 1 for members in corpus.clusters.values())
    return EvalResult(
        config=config,
        corpus=corpus,
        n_items=len(docs),
        n_clusters=len(corpus.clusters),
        n_pairs=int(gold.size),
        n_positive_pairs=int(gold.sum()),
        n_expected_duplicates=expected,
        extraction_ms_per_page=extracted.ms_per_html_page,
        extraction_failures=extracted.failures,
        methods=results,
        total_seconds=time.perf_counter() - started,
    )


def _evaluate(
    method: Method,
    docs: Sequence[EvalDoc],
    stream: Sequence[EvalDoc],
    order: Sequence[int],
    gold: np.ndarray,
    cluster_of: dict[str, str],
    thresholds: Sequence[float],
    config: EvalConfig,
) -> MethodResult:
    start = time.perf_counter()
    scores = method.score(docs, min(thresholds))
    runtime_ms = 1000.0 * (time.perf_counter() - start)
    pair_scores = upper_triangle(scores.matrix)
    grid = [0.5] if method.binary else list(thresholds)
    sweep = list(zip(grid, pairwise_sweep(pair_scores, gold, grid), strict=True))
    best_t, best = _best(sweep)
    window = 3600.0 * config.window_hours
    earlier = best_earlier(scores.matrix, stream, order, window)
    routing_sweep = [
        (t, routing_confusion(routes_at(earlier, stream, t), cluster_of)) for t in grid
    ]
    route_t, route_best = _best(routing_sweep)
    detector: list[dict[str, Any]] = []
    routes: list[Route] = routes_at(earlier, stream, route_t)
    stories: dict[str, Any] | None = None
    if isinstance(method, DDD):
        detector, routes, decided = _detector_checks(
            method, stream, earlier, cluster_of, {config.ddd_threshold, route_t}, route_t,
            config.ddd_threshold,
        )
        stories = story_scores(stream, decided, config.ddd_threshold)
        # What a stream user sees is the Detector's decisions, not the replay's.
        route_best = routing_confusion(routes, cluster_of)
    index = {d.identity: i for i, d in enumerate(docs)}
    edges = [(index[r.identity], index[r.duplicate_of]) for r in routes if r.duplicate_of]
    gold_labels = [d.cluster for d in docs]
    return MethodResult(
        name=method.name,
        reference=method.reference,
        parameters=method.describe(),
        binary=method.binary,
        runtime_ms=runtime_ms,
        compared_pairs=scores.compared,
        notes=scores.notes,
        sweep=sweep,
        best_threshold=None if method.binary else best_t,
        best=best,
        routing_sweep=routing_sweep,
        routing_threshold=None if method.binary else route_t,
        routing=route_best,
        ari_pairwise=adjusted_rand_index(gold_labels, group_scores(scores.matrix, best_t)),
        ari_routing=adjusted_rand_index(gold_labels, group_edges(len(docs), edges)),
        detector=detector,
        stories=stories,
    )


def story_scores(stream: Sequence[EvalDoc], decided: Sequence[Decision],
                 threshold: float) -> dict[str, Any]:
    """The stream's story groups (each decision's story) against the gold clusters, beside
    the routing tree's groups (an item and the one it duplicates) of the same decisions."""
    gold = [d.cluster for d in stream]
    stories = [x.story for x in decided]
    index = {d.identity: k for k, d in enumerate(stream)}
    tree = group_edges(len(stream), [(k, index[x.duplicate_of]) for k, x in enumerate(decided)
                                     if x.duplicate_of is not None])
    pairs = same_group_confusion(gold, stories)
    return {
        "threshold": threshold,
        "groups": len(set(stories)),
        "clusters": len(set(gold)),
        "adjusted_rand_index": round(adjusted_rand_index(gold, stories), 6),
        "pairwise": pairs.as_dict(),
        "tree_adjusted_rand_index": round(adjusted_rand_index(gold, tree), 6),
        "tree_groups": len(set(tree)),
    }


def _detector_checks(
    method: DDD,
    stream: Sequence[EvalDoc],
    earlier: Any,
    cluster_of: dict[str, str],
    thresholds: set[float],
    keep: float,
    operating: float,
) -> tuple[list[dict[str, Any]], list[Route], list[Decision]]:
    """Run the core Detector at ``thresholds``; compare with the score-matrix replay.
    Returns the checks, the routes at ``keep`` and the decisions at ``operating``."""
    checks: list[dict[str, Any]] = []
    kept: list[Route] = []
    decided: list[Decision] = []
    for t in sorted(thresholds):
        start = time.perf_counter()
        decisions = method.decide(stream, t)
        elapsed = time.perf_counter() - start
        routes = [Route(d.identity, x.duplicate_of, x.similarity)
                  for d, x in zip(stream, decisions, strict=True)]
        if t == operating:
            decided = decisions
        replay = routes_at(earlier, stream, t)
        agree = sum(
            (a.duplicate_of is None) == (b.duplicate_of is None)
            and (
                a.duplicate_of is None
                or b.duplicate_of is None
                or cluster_of[a.duplicate_of] == cluster_of[b.duplicate_of]
            )
            for a, b in zip(routes, replay, strict=True)
        )
        checks.append(
            {
                "threshold": t,
                "routing": routing_confusion(routes, cluster_of).as_dict(),
                "ms_per_decision": round(1000.0 * elapsed / max(len(stream), 1), 3),
                "agreement_with_replay": round(agree / max(len(stream), 1), 6),
            }
        )
        if t == keep:
            kept = routes
    return checks, kept, decided
