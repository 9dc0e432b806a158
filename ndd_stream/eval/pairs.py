"""Routing precision and recall on labelled pairs, weighted by the stream's doc_q bands.

Labelled pairs (JSONL, one object a line): ``{"a": ID, "b": ID, "label": "dup"|"not"|"unsure"}``
plus any other keys (e.g. ``why``). Several files sampled from the same stream are
**pooled**: their pairs are measured as one sample, so a band's weight is ``N_k`` over all
their pairs in it (``N_k / (n_k + n'_k + ...)``); an item labelled in two files is an error.
``a`` is a later item, ``b`` its best earlier match by doc_q; ``dup`` says a reader who saw
``b`` learns nothing new from ``a``. ``unsure`` pairs are left out of the measures.

The item ``a`` of a pair counts as **routed duplicate** when the detector sends it to the
duplicate topic. Pairs are a sample stratified by doc_q band, so each band is weighted by
how many stream items fall in it: with ``N_k`` stream items whose best earlier doc_q lies in
band ``k`` and ``n_k`` labelled (dup or not) pairs whose doc_q lies in it, every pair of band
``k`` stands for ``N_k / n_k`` items. Weighted TP, FP and FN are sums of these weights, and
precision = TP / (TP + FP), recall = TP / (TP + FN). Items below the lowest band edge are
never duplicates in the sample and carry no weight. A band with items but no labelled pair
is reported (its items cannot be judged).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ndd_stream.eval.metrics import Rates
from ndd_stream.files import read_utf8

LABELS = ("dup", "not", "unsure")
BAND_EDGES: tuple[float, ...] = (0.15, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""Band ``k`` is ``[edges[k], edges[k+1])``; the last band includes 1.0."""


@dataclass(frozen=True, slots=True)
class Pair:
    a: str
    b: str
    label: str


def load_pair_sets(paths: Sequence[Path]) -> list[Pair]:
    """The pairs of every file, pooled; an item ``a`` labelled in two files raises ValueError
    (pooled samples must not count an item twice)."""
    out: list[Pair] = []
    seen: dict[str, str] = {}
    for path in paths:
        for pair in load_pairs(path):
            first = seen.setdefault(pair.a, path.name)
            if first != path.name:
                raise ValueError(f"{pair.a} is labelled in both {first} and {path.name}: "
                                 "pooled pair files must label disjoint items")
            out.append(pair)
    return out


def load_pairs(path: Path) -> list[Pair]:
    """Pairs of a JSONL file; a bad line raises ValueError naming it."""
    out: list[Pair] = []
    text = read_utf8(path)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{path.name}:{number}: invalid JSON: {exc}") from exc
        if not isinstance(obj, dict) or obj.get("label") not in LABELS:
            raise ValueError(f"{path.name}:{number}: need an object with label dup|not|unsure")
        if not isinstance(obj.get("a"), str) or not isinstance(obj.get("b"), str):
            raise ValueError(f"{path.name}:{number}: 'a' and 'b' must be item ids")
        out.append(Pair(obj["a"], obj["b"], obj["label"]))
    return out


def band_of(similarity: float, edges: Sequence[float] = BAND_EDGES) -> int | None:
    """Index of the band holding ``similarity`` (None below the first edge)."""
    if similarity < edges[0]:
        return None
    return min(bisect.bisect_right(edges, similarity) - 1, len(edges) - 2)


@dataclass
class Weighted(Rates):
    """Band-weighted confusion of one run."""

    tp: float = 0.0
    fp: float = 0.0
    fn: float = 0.0
    tn: float = 0.0
    pairs: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # unweighted tp/fp/fn/tn

    def as_dict(self) -> dict[str, Any]:
        return {"precision": round(self.precision, 4), "recall": round(self.recall, 4),
                "tp": round(self.tp, 1), "fp": round(self.fp, 1), "fn": round(self.fn, 1),
                "tn": round(self.tn, 1), "pairs": self.pairs, "counts": dict(self.counts)}


def band_weights(
    best_similarity: dict[str, float], pairs: Sequence[Pair], pair_similarity: dict[str, float],
    edges: Sequence[float] = BAND_EDGES,
) -> tuple[list[int], list[int], list[float]]:
    """Stream items per band, labelled pairs per band and the weight of a pair per band."""
    bands = len(edges) - 1
    items = [0] * bands
    for sim in best_similarity.values():
        k = band_of(sim, edges)
        if k is not None:
            items[k] += 1
    labelled = [0] * bands
    for p in pairs:
        k = band_of(pair_similarity.get(p.a, 0.0), edges)
        if p.label != "unsure" and k is not None:
            labelled[k] += 1
    weights = [items[k] / labelled[k] if labelled[k] else 0.0 for k in range(bands)]
    return items, labelled, weights


def weighted_confusion(
    pairs: Sequence[Pair], routed_duplicate: set[str], pair_similarity: dict[str, float],
    weights: Sequence[float], edges: Sequence[float] = BAND_EDGES,
) -> Weighted:
    """Band-weighted TP/FP/FN/TN of "item a routed duplicate" against the labels."""
    out = Weighted()
    for p in pairs:
        k = band_of(pair_similarity.get(p.a, 0.0), edges)
        if p.label == "unsure" or k is None:
            continue
        w = weights[k]
        routed = p.a in routed_duplicate
        key = ("tp" if routed else "fn") if p.label == "dup" else ("fp" if routed else "tn")
        setattr(out, key, getattr(out, key) + w)
        out.counts[key] = out.counts.get(key, 0) + 1
        out.pairs += 1
    return out
