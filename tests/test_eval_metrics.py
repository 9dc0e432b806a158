"""Metric arithmetic against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from ndd_stream.eval.grouping import UnionFind, group_edges, group_scores
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


def test_confusion_ratios_and_conventions() -> None:
    c = Confusion(tp=6, fp=2, fn=4)
    assert c.precision == pytest.approx(0.75)
    assert c.recall == pytest.approx(0.6)
    assert c.f1 == pytest.approx(2 * 0.75 * 0.6 / 1.35)
    assert Confusion(0, 0, 5).precision == 1.0 and Confusion(0, 0, 5).f1 == 0.0
    assert Confusion(0, 0, 0).f1 == 1.0


def test_pairwise_sweep_by_hand() -> None:
    # items: a, b in cluster X; c in Y.  pairs (ab, ac, bc) gold = (T, F, F)
    gold = same_cluster_pairs(["X", "X", "Y"])
    assert gold.tolist() == [True, False, False]
    matrix = np.array([[0, 0.9, 0.5], [0.9, 0, 0.2], [0.5, 0.2, 0]], dtype=np.float32)
    scores = upper_triangle(matrix)
    assert scores.tolist() == pytest.approx([0.9, 0.5, 0.2])
    low, mid, high, top = pairwise_sweep(scores, gold, [0.1, 0.5, 0.9, 0.95])
    assert (low.tp, low.fp, low.fn) == (1, 2, 0)
    assert (mid.tp, mid.fp, mid.fn) == (1, 1, 0)  # 0.5 >= 0.5 counts
    assert (high.tp, high.fp, high.fn) == (1, 0, 0)
    assert (top.tp, top.fp, top.fn) == (0, 0, 1)


def test_routing_confusion_by_hand() -> None:
    cluster_of = {"a1": "A", "a2": "A", "a3": "A", "b1": "B", "b2": "B", "c1": "C"}
    routes = [
        Route("a1", None),  # first of A: correct unique
        Route("b1", "a1"),  # first of B routed as duplicate: FP
        Route("a2", "a1"),  # TP
        Route("a3", "b1"),  # wrong cluster: FP and FN
        Route("b2", None),  # missed: FN
        Route("c1", None),  # singleton unique: nothing
    ]
    c = routing_confusion(routes, cluster_of)
    assert (c.tp, c.fp, c.fn) == (1, 2, 2)
    assert c.precision == pytest.approx(1 / 3) and c.recall == pytest.approx(1 / 3)


def test_adjusted_rand_index_known_values() -> None:
    assert adjusted_rand_index([0, 0, 1, 1], [5, 5, 7, 7]) == pytest.approx(1.0)
    # sklearn.metrics.adjusted_rand_score([0,0,0,1,1,1],[0,0,1,1,2,2]) = 0.242424...
    assert adjusted_rand_index([0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2]) == pytest.approx(
        0.24242424242424243
    )
    # index 1 (pair ab), expected 1*1/6, max 1 -> (1 - 1/6) / (1 - 1/6) = 1? no: pred merges c
    assert adjusted_rand_index(["x", "x", "y", "z"], [1, 1, 1, 2]) == pytest.approx(
        (1 - 1 * 3 / 6) / ((1 + 3) / 2 - 1 * 3 / 6)
    )
    with pytest.raises(ValueError):
        adjusted_rand_index([1], [1, 2])


def test_union_find_groups_transitively() -> None:
    uf = UnionFind(5)
    assert uf.union(0, 1) and uf.union(1, 2) and not uf.union(0, 2)
    labels = uf.labels()
    assert labels[0] == labels[1] == labels[2] and len({labels[3], labels[4], labels[0]}) == 3
    assert group_edges(3, []) == [0, 1, 2]
    matrix = np.array([[0, 0.8, 0.1], [0.8, 0, 0.1], [0.1, 0.1, 0]], dtype=np.float32)
    g = group_scores(matrix, 0.5)
    assert g[0] == g[1] != g[2]


def test_same_group_pairs_are_counted_from_the_contingency_table() -> None:
    gold = ["a", "a", "a", "b", "b", "c"]
    said = [1, 1, 2, 2, 2, 3]
    brute = [(gold[i] == gold[j], said[i] == said[j])
             for i in range(6) for j in range(i + 1, 6)]
    got = same_group_confusion(gold, said)
    assert (got.tp, got.fp, got.fn) == (
        sum(g and s for g, s in brute), sum(s and not g for g, s in brute),
        sum(g and not s for g, s in brute))
    assert (got.tp, got.fp, got.fn) == (2, 2, 2)
