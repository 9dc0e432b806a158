"""What a compared method provides: one similarity score per pair, computed once.

Every method scores all unordered pairs once (pruned pairs score 0); thresholds are applied
afterwards, so a sweep costs nothing extra. ``min_threshold`` is the lowest threshold of the
sweep: methods with exact pruning (length bounds, P1) may skip pairs that cannot reach it.
Binary methods (I-Match) score 0 or 1 and yield a single operating point.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from ndd_stream.eval.documents import EvalDoc

FloatMatrix = npt.NDArray[np.float32]


@dataclass
class PairScores:
    """Symmetric n x n similarity matrix in [0, 1] (diagonal unused) and how it was made."""

    matrix: FloatMatrix
    compared: int
    notes: list[str] = field(default_factory=list)


class Method(ABC):
    """A near-duplicate method under evaluation."""

    name: str
    reference: str
    binary: ClassVar[bool] = False

    @abstractmethod
    def score(self, docs: Sequence[EvalDoc], min_threshold: float) -> PairScores:
        """Similarity of every pair of ``docs``; pairs pruned below ``min_threshold`` get 0."""

    def describe(self) -> dict[str, object]:
        """Parameters worth printing in the report."""
        return {}


def all_pairs_count(n: int) -> int:
    return n * (n - 1) // 2


def symmetric(matrix: FloatMatrix) -> FloatMatrix:
    """Make a matrix that holds each pair's score in one of its two cells symmetric."""
    out = np.maximum(matrix, matrix.T).astype(np.float32)
    np.fill_diagonal(out, 0.0)
    return out
