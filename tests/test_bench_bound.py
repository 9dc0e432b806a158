"""bench.bound: the floor of the prefix count against sets computed by hand, and the
count's share of a decision."""

from __future__ import annotations

import numpy as np
import pytest

from bench.bound import ceiling, count_share, prefix_bound
from bench.workload import NewsStream, WorkloadConfig
from ndd_stream.core.detector import Detector, DetectorConfig
from ndd_stream.core.similarity import extended_prefix


def _codes(values: list[int]) -> np.ndarray:
    """Mixed codes whose top 32 bits (the index keys) are ``values``."""
    return np.sort(np.array(values, dtype=np.uint64) << np.uint64(32))


def _ideal_postings(window: list[list[int]], probe: list[int], t: float) -> int:
    df: dict[int, int] = {}
    for doc in window:
        for v in set(doc):
            df[v] = df.get(v, 0) + 1

    def prefix(doc: list[int]) -> set[int]:
        ranked = sorted(set(doc), key=lambda v: (df.get(v, 0), v))
        return set(ranked[: extended_prefix(len(ranked), t)])

    held = [prefix(doc) for doc in window]
    return sum(sum(1 for h in held if k in h) for k in prefix(probe))


def test_ideal_order_postings_match_sets_computed_by_hand() -> None:
    rng = np.random.default_rng(3)
    window = [sorted(set(rng.integers(1, 60, size=40).tolist())) for _ in range(30)]
    probe = sorted(set(rng.integers(1, 60, size=40).tolist()))
    b = prefix_bound([_codes(d) for d in window], [_codes(probe)], 0.8)
    assert b.documents == 30
    assert b.distinct == len({v for d in window for v in d})
    assert b.ideal == _ideal_postings(window, probe, 0.8)
    assert b.learned > 0  # hash order before any snapshot: some keys are shared anyway
    assert b.prefix == extended_prefix(len(probe), 0.8)


def test_rare_keys_first_leave_unrelated_documents_uncounted() -> None:
    common = list(range(1, 151))  # in every document
    window = [common + [1000 + 100 * i + j for j in range(50)] for i in range(8)]
    probe = common + [9000 + j for j in range(50)]
    b = prefix_bound([_codes(d) for d in window], [_codes(probe)], 0.8)
    assert b.prefix == 56  # 200 keys: 41 + max(16, 10%) - 1
    # ideal: every prefix is the document's 50 rare keys and the 6 smallest common ones
    assert b.ideal == 6 * 8
    # learned (fewer documents than the first snapshot: code order): 56 common keys
    assert b.learned == 56 * 8
    with pytest.raises(ValueError):
        prefix_bound([], [_codes(probe)], 0.8)


def test_count_share_times_the_index_count_inside_decisions() -> None:
    det = Detector(DetectorConfig(threshold=0.3, count_threads=1))
    share, rate = count_share(det, NewsStream(WorkloadConfig(spacing=1.0)).take(40))
    assert 0.0 < share < 1.0 and rate > 0
    assert det.stats.decided == 40
    assert ceiling(0.5, 2) == pytest.approx(4 / 3)
    assert ceiling(0.0, 2) == 1.0 and ceiling(1.0, 2) == 2.0
