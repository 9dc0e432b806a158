"""Union-find grouping of duplicate decisions into clusters (seed 002), for every method.

Treating "is a duplicate of" as transitive turns pairwise or routing decisions into clusters,
which the adjusted Rand index compares with the gold clusters.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from ndd_stream.eval.metrics import SCORE_EPSILON


class UnionFind:
    """Disjoint sets over 0..n-1 with path halving and union by size."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        self.size = [1] * n

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if self.size[ra] < self.size[rb]:
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.size[ra] += self.size[rb]
        return True

    def labels(self) -> list[int]:
        """Cluster label (its root) of every element."""
        return [self.find(x) for x in range(len(self.parent))]


def group_edges(n: int, edges: Iterable[tuple[int, int]]) -> list[int]:
    """Connected components of the duplicate graph as a label per element."""
    uf = UnionFind(n)
    for a, b in edges:
        uf.union(a, b)
    return uf.labels()


def group_scores(matrix: npt.NDArray[np.float32], threshold: float) -> list[int]:
    """Clusters of the pairs scoring at least ``threshold``."""
    ii, jj = np.nonzero(np.triu(matrix >= threshold - SCORE_EPSILON, 1))
    return group_edges(matrix.shape[0], zip(ii.tolist(), jj.tolist(), strict=True))
