"""Stream replay: arrival order, and routing each item to its best earlier match.

The order is either the items' own timestamps or a seeded random permutation (items then get
synthetic timestamps one second apart, all inside the detection window). For methods other
than DDD an item is routed as a duplicate of its best-scoring earlier item inside the window
if that score reaches the threshold (ties go to the earliest), the rule the core Detector
applies to doc_q.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from ndd_stream.eval.documents import EvalDoc
from ndd_stream.eval.metrics import SCORE_EPSILON, Route

SYNTHETIC_START = 1_700_000_000.0  # 2023-11-14T22:13:20Z; any fixed epoch works


def stream_order(docs: Sequence[EvalDoc], order: str, seed: int) -> list[int]:
    """Indices of ``docs`` in arrival order: ``timestamp`` (stable) or seeded ``random``."""
    indices = list(range(len(docs)))
    if order == "timestamp":
        return sorted(indices, key=lambda i: docs[i].timestamp)
    random.Random(seed).shuffle(indices)
    return indices


def with_synthetic_times(docs: Sequence[EvalDoc], order: Sequence[int]) -> list[EvalDoc]:
    """Docs in ``order`` stamped one second apart (for corpora without timestamps)."""
    return [replace(docs[i], timestamp=SYNTHETIC_START + k) for k, i in enumerate(order)]


@dataclass(frozen=True)
class BestEarlier:
    """For each arrival position: best earlier position (-1 if none) and its score."""

    index: npt.NDArray[np.int64]
    score: npt.NDArray[np.float32]


def best_earlier(
    matrix: npt.NDArray[np.float32],
    stream: Sequence[EvalDoc],
    order: Sequence[int],
    window_seconds: float,
) -> BestEarlier:
    """Best-scoring earlier item per arrival, limited to the detection window."""
    idx = np.asarray(order, dtype=np.int64)
    scores = matrix[np.ix_(idx, idx)]
    times = np.array([d.timestamp for d in stream], dtype=np.float64)
    n = len(idx)
    best_index = np.full(n, -1, dtype=np.int64)
    best_score = np.zeros(n, dtype=np.float32)
    for k in range(1, n):
        row = scores[k, :k]
        if window_seconds > 0:
            row = np.where(times[:k] >= times[k] - window_seconds, row, -1.0)
        j = int(np.argmax(row))  # first maximum = earliest arrival
        best_index[k] = j
        best_score[k] = row[j]
    return BestEarlier(best_index, best_score)


def routes_at(best: BestEarlier, stream: Sequence[EvalDoc], threshold: float) -> list[Route]:
    """Routing decisions at ``threshold`` from precomputed best earlier matches."""
    out = []
    for k, d in enumerate(stream):
        j = int(best.index[k])
        if j >= 0 and best.score[k] >= threshold - SCORE_EPSILON:
            out.append(Route(d.identity, stream[j].identity, float(best.score[k])))
        else:
            out.append(Route(d.identity, None, 0.0))
    return out
