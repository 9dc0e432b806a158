"""The library API's ``Filter.decide_many`` against ``ndd-stream dedup``'s loop, one process.

    python -m bench.api_speed /tmp/w/reuters.jsonl --rounds 3 --out api-speed

Both decide the same lines (read into memory once) with a fresh window per run, at the
defaults a user runs but ``scope=global``: ``dedup`` as ``run_dedup`` with a sink that
keeps nothing (no output file: what is left is its core loop, parse + decide + the
record it writes), the API as ``for d in Filter(scope="global").decide_many(lines)``.
Runs alternate (dedup, api, api, dedup, ...) so a drift of the shared machine falls on
both; each run's wall clock, CPU time (``time.process_time``) and load average are
recorded. The ratio is given of the medians and of the minima (on a machine shared with
other work the fastest run is the one least disturbed). Before timing, both decide every
line and their records are compared field by field.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from ndd_stream import Filter
from ndd_stream.core import kernels
from ndd_stream.dedup import run_dedup
from ndd_stream.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results"


class _NullSink:
    def write(self, data: bytes, /) -> int:
        return len(data)


class _KeepSink:
    def __init__(self) -> None:
        self.records: list[bytes] = []

    def write(self, data: bytes, /) -> int:
        self.records.append(data)
        return len(data)


def run_dedup_once(lines: list[bytes], scope: str, sink: Any = None) -> tuple[float, float]:
    settings = Settings(scope=scope)
    config, fmt = settings.detector_config(), settings.item_format()
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    run_dedup(lines, sink if sink is not None else _NullSink(), config, fmt)
    return time.perf_counter() - wall, time.process_time() - cpu


def run_api_once(lines: list[bytes], scope: str,
                 keep: list[dict[str, Any]] | None = None) -> tuple[float, float]:
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    decisions = Filter(scope=scope).decide_many(lines, on_invalid="return")
    if keep is None:
        for _ in decisions:
            pass
    else:
        keep.extend(d.as_dict() for d in decisions)
    return time.perf_counter() - wall, time.process_time() - cpu


def check_equal(lines: list[bytes], scope: str) -> int:
    """Both paths decide every line alike (every field); returns the records compared."""
    from ndd_stream.jsonio import loads

    sink = _KeepSink()
    run_dedup_once(lines, scope, sink)
    mine: list[dict[str, Any]] = []
    run_api_once(lines, scope, mine)
    theirs = [loads(r) for r in sink.records]
    if theirs != mine:
        raise SystemExit("the API and dedup decided differently")
    return len(mine)


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
            "python": platform.python_version(), "kernels": kernels.IMPLEMENTATION,
            "load_before": [round(x, 2) for x in os.getloadavg()]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("items", type=Path, help="JSONL items (bench.peer.write_items)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each, alternating")
    ap.add_argument("--scope", default="global")
    ap.add_argument("--out", default=None, help="bench/results/OUT.json and OUT.md")
    args = ap.parse_args(argv)
    with args.items.open("rb") as f:
        lines = list(f)
    info = machine()
    compared = check_equal(lines, args.scope)
    runs: dict[str, list[tuple[float, float]]] = {"dedup": [], "api": []}
    load_avg: list[float] = []
    for r in range(args.rounds):
        order = ("dedup", "api") if r % 2 == 0 else ("api", "dedup")
        for name in order:
            run = run_dedup_once if name == "dedup" else run_api_once
            wall, cpu = run(lines, args.scope)
            runs[name].append((wall, cpu))
            load_avg.append(round(os.getloadavg()[0], 2))
            print(f"round {r + 1} {name:5s} wall {wall:6.2f} s  cpu {cpu:6.2f} s  "
                  f"{len(lines) / wall:7.0f} items/s  load {load_avg[-1]}", flush=True)
    med = {name: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
           for name, v in runs.items()}
    low = {name: (min(w for w, _ in v), min(c for _, c in v)) for name, v in runs.items()}
    result = {
        "machine": info, "items": len(lines), "scope": args.scope, "rounds": args.rounds,
        "decisions_compared": compared, "runs": runs,
        "median_wall_s": {k: v[0] for k, v in med.items()},
        "median_cpu_s": {k: v[1] for k, v in med.items()},
        "items_per_s": {k: len(lines) / v[0] for k, v in med.items()},
        "api_over_dedup_wall": med["api"][0] / med["dedup"][0],
        "api_over_dedup_cpu": med["api"][1] / med["dedup"][1],
        "min_wall_s": {k: v[0] for k, v in low.items()},
        "min_cpu_s": {k: v[1] for k, v in low.items()},
        "api_over_dedup_min_wall": low["api"][0] / low["dedup"][0],
        "api_over_dedup_min_cpu": low["api"][1] / low["dedup"][1],
        "load_avg": load_avg,
    }
    print(json.dumps({k: result[k] for k in ("items_per_s", "api_over_dedup_wall",
                                              "api_over_dedup_cpu", "api_over_dedup_min_wall",
                                              "api_over_dedup_min_cpu")}))
    if args.out:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=1) + "\n")
        (RESULTS / f"{args.out}.md").write_text(_markdown(result, args.items.name))
    return 0


def _markdown(r: dict[str, Any], name: str) -> str:
    m = r["machine"]
    rows = "\n".join(
        f"| {k} | {r['median_wall_s'][k]:.2f} | {r['median_cpu_s'][k]:.2f} | "
        f"{r['min_wall_s'][k]:.2f} | {r['min_cpu_s'][k]:.2f} | "
        f"{r['items_per_s'][k]:,.0f} |" for k in ("dedup", "api"))
    return (
        f"# Filter.decide_many against dedup's loop\n\n"
        f"{m['cpu']}, {m['usable_cores']} usable cores (shared), Python {m['python']}, "
        f"kernels {m['kernels']}; load before {m['load_before']}.\n"
        f"`python -m bench.api_speed {name} --rounds {r['rounds']} --scope {r['scope']}`: "
        f"{r['items']:,} lines in memory, a fresh window per run, runs alternating; "
        f"{r['decisions_compared']:,} records compared equal field by field first.\n\n"
        f"| path | median wall s | median CPU s | min wall s | min CPU s | items/s "
        f"(median wall) |\n| --- | ---: | ---: | ---: | ---: | ---: |\n"
        f"{rows}\n\n"
        f"API / dedup, medians: wall {r['api_over_dedup_wall']:.3f}, CPU "
        f"{r['api_over_dedup_cpu']:.3f}; minima: wall {r['api_over_dedup_min_wall']:.3f}, "
        f"CPU {r['api_over_dedup_min_cpu']:.3f}. Load average (1 min) after each run: "
        f"{r['load_avg']}.\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
