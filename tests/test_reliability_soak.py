"""Long runs: once the window is full, memory and disk stop growing.

A short version of ``bench/soak.py`` (docs/RELIABILITY.md has the long one): the worker's
partition code (PartitionDecider: detector + RocksDB, committing every 50 items like a
worker's batches) decides 72 hours of steadily advancing event time. After the window
(24 + 1 hours) has filled, the window's documents, the identities kept for redelivery,
the index, the RocksDB data and the RSS must stay flat, and the state on disk must hold
exactly the live window (expired hours are deleted, not only forgotten in memory).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import Sample, run_soak, table

PER_HOUR = 60
HOURS = 72
WINDOW = 25  # the item's hour and the 24 before it


def _max(samples: list[Sample], lo: int, hi: int, field: str) -> int:
    return max(int(getattr(s, field)) for s in samples if lo <= s.hour < hi)


@pytest.mark.timeout(180)
def test_state_and_memory_stop_growing_once_the_window_is_full(tmp_path: Path) -> None:
    result = run_soak(tmp_path, hours=HOURS, per_hour=PER_HOUR, target_bytes=300,
                      commit_every=50)
    samples = result.samples
    print(table(result, every=12))
    full = [s for s in samples if s.hour > WINDOW]
    assert {s.window_documents for s in full} == {WINDOW * PER_HOUR}
    assert {s.window_hours for s in full} == {WINDOW}
    assert {s.remembered for s in full} == {WINDOW * PER_HOUR}
    # The state on disk holds the live window and nothing else (old hours are deleted).
    assert result.restored_documents == result.final_window_documents == WINDOW * PER_HOUR

    middle, last = (WINDOW + 1, 49), (49, HOURS + 1)
    for field, slack in (("index_bytes", 1.25), ("data_bytes", 1.25)):
        assert _max(samples, *last, field) <= slack * _max(samples, *middle, field), field
    rss_growth = _max(samples, *last, "rss_bytes") - _max(samples, *middle, "rss_bytes")
    assert rss_growth < 50_000_000, rss_growth
    log_growth = (samples[-1].state_bytes - samples[-1].data_bytes) - (
        samples[WINDOW].state_bytes - samples[WINDOW].data_bytes)
    print(f"RSS growth after the window filled: {rss_growth / 1e6:.1f} MB; RocksDB info LOG "
          f"growth over {HOURS - WINDOW - 1} h: {log_growth / 1e3:.0f} KB")
