"""The core alone on a list of items: parse + decide, the window warmed first.

    python -m bench.core_alone ITEMS_FILE --warmup N --threshold T --scope S

prints ``{"items_per_s": ..., "cpu_ms_per_item": ...}``. ``bench.e2e`` runs it under each
tree it compares (``PYTHONPATH``), so a worker's own cost is its CPU per item less its own
core's, not another revision's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ndd_stream.core.detector import Detector
from ndd_stream.core.items import parse_item
from ndd_stream.settings import Settings


def core_rate(settings: Settings, items: list[bytes], warmup: int) -> tuple[float, float]:
    """Items/s of parse + decide alone over the items after ``warmup`` (window warmed
    first), and the CPU ms per item (``time.process_time``)."""
    det = Detector(settings.detector_config())
    fmt = settings.item_format()
    docs = [parse_item(raw, fmt, f"p{i}") for i, raw in enumerate(items)]
    for doc in docs[:warmup]:
        det.decide(doc)  # type: ignore[arg-type]
    start, cpu = time.perf_counter(), time.process_time()
    for raw in items[warmup:]:
        det.decide(parse_item(raw, fmt, "p"))  # type: ignore[arg-type]
    n = len(items) - warmup
    return n / (time.perf_counter() - start), (time.process_time() - cpu) * 1000 / n


def core_rate_of(code: Path | None, settings: Settings, items: list[bytes],
                 warmup: int) -> tuple[float, float]:
    """``core_rate`` with the core of tree ``code`` (None: this one), in a process of its
    own: every tree measured alike."""
    with tempfile.NamedTemporaryFile(suffix=".lines") as f:
        f.write(b"\n".join(items))
        f.flush()
        here = str(Path(__file__).resolve().parent.parent)
        path = here if code is None else f"{code}{os.pathsep}{here}"
        out = subprocess.run(
            [sys.executable, "-m", "bench.core_alone", f.name, "--warmup", str(warmup),
             "--threshold", str(settings.threshold), "--scope", settings.scope],
            env={**os.environ, "PYTHONPATH": path}, cwd=here, check=True,
            capture_output=True).stdout
    found = json.loads(out.decode().strip().splitlines()[-1])
    return float(found["items_per_s"]), float(found["cpu_ms_per_item"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("items", type=Path)
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--scope", default="channel")
    args = ap.parse_args(argv)
    items = args.items.read_bytes().split(b"\n")
    rate, ms = core_rate(Settings(threshold=args.threshold, scope=args.scope), items,
                         args.warmup)
    print(json.dumps({"items_per_s": rate, "cpu_ms_per_item": ms}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
