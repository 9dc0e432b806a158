"""bench.whole_profile: a py-spy raw profile split into kernels, start-up and the rest, and
the bound of an engine for which everything but the kernels is free."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.whole_profile import read_profile, report

K = "ndd_stream/core/kernels.py"
D = "ndd_stream/core/detector.py"
PROFILE = "\n".join([
    f"<module> (ndd-stream:6);decide ({D}:173);count_candidates ({K}:480) 40",
    f"<module> (ndd-stream:6);_probe_keys ({D}:420);probe_keys ({K}:374) 10",
    f"<module> (ndd-stream:6);add (ndd_stream/core/postings.py:241);merge_blocks ({K}:313) 6",
    f"<module> (ndd-stream:6);decide ({D}:170);fmix64 ({K}:358) 4",
    "<module> (ndd-stream:3);_find_and_load (<frozen importlib._bootstrap>:1176);x (a.py:1) 5",
    "<module> (ndd-stream:6);parse_item (ndd_stream/core/items.py:113) 30",
    " 5",
    "not a sample line",
])


def test_samples_are_grouped_by_their_innermost_frame(tmp_path: Path) -> None:
    path = tmp_path / "p.txt"
    path.write_text(PROFILE, encoding="utf-8")
    shares = read_profile(path)
    assert shares.samples == 100
    assert shares.groups == {"count": 40, "probe prefixes": 10, "indexing": 6,
                             "other kernels": 4, "start-up": 5, "rest": 35}
    assert shares.kernels == pytest.approx(0.60)
    # kernels 60% and start-up 5% of 10 s; halving the count (40%) takes 2 s more off
    assert shares.bound_seconds(10.0) == pytest.approx(6.5)
    assert shares.bound_seconds(10.0, 2) == pytest.approx(4.5)
    lines = report(shares, 10.0, 9.0)
    assert "| **C kernels, all** | **60.0%** |" in lines
    assert "ideal, count halved: 4.50 s = 2.00x the peer" in lines
