"""Precision/recall/F1 of pairwise decisions and of stream routing, and the adjusted Rand index.

Scores are float32, so a threshold t accepts scores >= t - SCORE_EPSILON (a doc_q of exactly
0.9 is 0.89999998 in float32). Conventions: precision is 1 when nothing was predicted (no
false claims), recall is 1 when there was nothing to find, F1 is their harmonic mean (0 when
both are 0).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from math import comb

import numpy as np
import numpy.typing as npt

SCORE_EPSILON = 1e-6


def share(part: float, other: float) -> float:
    """``part / (part + other)``; 1.0 when both are 0 (nothing claimed, nothing missed).
    Precision is share(tp, fp), recall share(tp, fn), for counts and weights alike."""
    return part / (part + other) if part + other else 1.0


class Rates:
    """Precision and recall of anything with ``tp``, ``fp`` and ``fn`` (counts or weights)."""

    tp: float
    fp: float
    fn: float

    @property
    def precision(self) -> float:
        return share(self.tp, self.fp)

    @property
    def recall(self) -> float:
        return share(self.tp, self.fn)


@dataclass(frozen=True)
class Confusion(Rates):
    """Counts of a binary decision: true positives, false positives, false negatives."""

    tp: int
    fp: int
    fn: int

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
            "precision": round(self.precision, 6),
            "recall": round(self.recall, 6),
            "f1": round(self.f1, 6),
        }


def same_cluster_pairs(clusters: Sequence[Hashable]) -> npt.NDArray[np.bool_]:
    """Gold label of every unordered pair i < j (row-major upper triangle)."""
    codes = np.unique(np.asarray([str(c) for c in clusters]), return_inverse=True)[1]
    i, j = np.triu_indices(len(clusters), 1)
    return codes[i] == codes[j]


def upper_triangle(matrix: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Scores of every unordered pair i < j, in the order of :func:`same_cluster_pairs`."""
    i, j = np.triu_indices(matrix.shape[0], 1)
    return matrix[i, j]


def pairwise_sweep(
    scores: npt.NDArray[np.float32], gold: npt.NDArray[np.bool_], thresholds: Sequence[float]
) -> list[Confusion]:
    """Confusion of "score >= t" against the gold pairs, for every threshold t, in one sort."""
    order = np.argsort(-scores, kind="stable")
    sorted_scores = scores[order].astype(np.float64)
    tp_cum = np.concatenate([[0], np.cumsum(gold[order])])
    positives = int(gold.sum())
    out: list[Confusion] = []
    for t in thresholds:
        # number of pairs with score >= t (scores sorted descending)
        k = int(np.searchsorted(-sorted_scores, -(t - SCORE_EPSILON), side="right"))
        tp = int(tp_cum[k])
        out.append(Confusion(tp=tp, fp=k - tp, fn=positives - tp))
    return out


@dataclass(frozen=True)
class Route:
    """A stream decision: ``duplicate_of`` is the matched earlier item, None for unique."""

    identity: str
    duplicate_of: str | None
    similarity: float = 0.0


def routing_confusion(routes: Sequence[Route], cluster_of: dict[str, str]) -> Confusion:
    """Duplicate routing quality in arrival order.

    An item should be routed as a duplicate iff an earlier item of its cluster exists, and
    then to an item of its own cluster. TP: routed to its own cluster. FP: routed as a
    duplicate of another cluster's item (or although it was the first of its cluster).
    FN: should have been a duplicate but was routed unique or to a wrong cluster.
    """
    seen: set[str] = set()
    tp = fp = fn = 0
    for route in routes:
        cluster = cluster_of[route.identity]
        expected = cluster in seen
        seen.add(cluster)
        correct = route.duplicate_of is not None and cluster_of[route.duplicate_of] == cluster
        if route.duplicate_of is not None:
            if correct:
                tp += 1
            else:
                fp += 1
        if expected and not correct:
            fn += 1
    return Confusion(tp, fp, fn)


def adjusted_rand_index(gold: Sequence[Hashable], predicted: Sequence[Hashable]) -> float:
    """Hubert & Arabie's adjusted Rand index of two clusterings of the same items."""
    if len(gold) != len(predicted):
        raise ValueError("clusterings differ in length")
    n = len(gold)
    if n < 2:
        return 1.0
    pair_counts = Counter(zip(gold, predicted, strict=True))
    index = sum(comb(c, 2) for c in pair_counts.values())
    sum_gold = sum(comb(c, 2) for c in Counter(gold).values())
    sum_pred = sum(comb(c, 2) for c in Counter(predicted).values())
    expected = sum_gold * sum_pred / comb(n, 2)
    maximum = (sum_gold + sum_pred) / 2
    if maximum == expected:
        return 1.0
    return (index - expected) / (maximum - expected)


def same_group_confusion(gold: Sequence[Hashable], predicted: Sequence[Hashable]) -> Confusion:
    """Pairwise "in the same group" against "in the same gold cluster", over every unordered
    pair, counted from the contingency table (no n^2 pass)."""
    if len(gold) != len(predicted):
        raise ValueError("clusterings differ in length")
    both = sum(comb(c, 2) for c in Counter(zip(gold, predicted, strict=True)).values())
    said = sum(comb(c, 2) for c in Counter(predicted).values())
    true = sum(comb(c, 2) for c in Counter(gold).values())
    return Confusion(both, said - both, true - both)
