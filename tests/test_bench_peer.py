"""bench.peer: the floor side is ``dedup`` with its index stubbed out, nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ndd_stream.core.engine import available

ROOT = Path(__file__).resolve().parent.parent
TEXT = "Shares of Acme rose 5 pct on Tuesday after the company reported higher profits."


def _summary(stderr: str) -> dict[str, object]:
    line = next(s for s in stderr.splitlines() if s.startswith("summary: "))
    return dict(json.loads(line.removeprefix("summary: ")))


@pytest.mark.skipif(not available(), reason="the flat index needs the C kernels")
@pytest.mark.parametrize("threshold", [0.8, 0.3])
def test_floor_finds_no_match_where_dedup_does(tmp_path: Path, threshold: float) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": str(i), "channel": "c", "timestamp": 100 + i,
                                         "text": TEXT}) + "\n" for i in range(3)))
    common = {"cwd": ROOT, "capture_output": True, "text": True, "timeout": 120}
    real = subprocess.run([sys.executable, "-m", "ndd_stream.cli", "dedup", str(items),
                           "-o", str(tmp_path / "out.jsonl"), "--scope", "global",
                           "--threshold", str(threshold)], check=True, **common)
    floor = subprocess.run([sys.executable, "-m", "bench.peer", "--run-floor", str(items),
                            "--floor-threshold", str(threshold)], check=True, **common)
    assert _summary(real.stderr)["statuses"] == {"unique": 1, "exact_duplicate": 2}
    assert _summary(floor.stderr)["statuses"] == {"unique": 3}
