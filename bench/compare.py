"""A/B of the detector against an earlier revision, in one run on one machine.

    python -m bench.compare BASE_REV [--windows 10000 50000] [--thresholds 0.8 0.3]

Why: figures from different days on a shared 2-CPU machine differ by up to 2x for the
same code, so a speed-up is only claimed against a baseline measured in the same run.
BASE_REV is checked out into a temporary git worktree and its C kernels are built
there; then, for every (threshold, window), ``bench.measure detector`` runs for the base
and for the working tree *alternately*, one process at a time, on the same workload.
Prints a table (docs/s, p50, p99, peak RSS, index MB, ratios) and writes it, with every
figure, to bench/results/compare.json and compare.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

_BUILD = """
from setuptools import Distribution, Extension
from setuptools.command.build_ext import build_ext
ext = Extension("ndd_stream.core._kernels", ["ndd_stream/core/_kernels.c"],
                extra_compile_args=["-O3"])
cmd = build_ext(Distribution({"name": "k", "ext_modules": [ext]}))
cmd.inplace = True
cmd.ensure_finalized()
cmd.run()
"""


def checkout(rev: str, where: Path) -> Path:
    """A worktree of ``rev`` with its own C kernels built in place."""
    tree = where / "base"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev],
                   check=True)
    subprocess.run([sys.executable, "-c", _BUILD], cwd=tree, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return tree


def measure(tree: Path, window: int, threshold: float, count: int, out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-m", "bench.measure", "detector", str(window), str(count),
                    str(threshold), str(out)], cwd=tree, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    result: dict[str, Any] = json.loads(out.read_text())
    check = subprocess.run([sys.executable, "-c", "from ndd_stream.core.kernels import "
                            "IMPLEMENTATION; print(IMPLEMENTATION)"], cwd=tree, env=env,
                           check=True, capture_output=True, text=True)
    result["kernels"] = check.stdout.strip()
    return result


def row(side: str, r: dict[str, Any]) -> dict[str, Any]:
    return {"side": side, "threshold": r["threshold"], "window": r["window"],
            "kernels": r["kernels"], "docs_per_s": round(r["docs_per_s"], 1),
            "p50_ms": round(r["p50_ms"], 2), "p99_ms": round(r["p99_ms"], 2),
            "peak_rss_mb": round(r["peak_rss_mb"]), "index_mb": round(r["index_bytes"] / 2**20),
            "decisions": r.get("decisions")}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| threshold | window | side | docs/s | p50 ms | p99 ms | peak RSS MB | index MB |"
             " new ÷ base docs/s |", "|---|---|---|---|---|---|---|---|---|"]
    for base, new in zip(rows[::2], rows[1::2], strict=True):
        for r in (base, new):
            ratio = (f"{new['docs_per_s'] / base['docs_per_s']:.2f}" if r is new else "")
            lines.append(f"| {r['threshold']} | {r['window']:,} | {r['side']} | "
                         f"{r['docs_per_s']} | {r['p50_ms']} | {r['p99_ms']} | "
                         f"{r['peak_rss_mb']} | {r['index_mb']} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", help="git revision to compare the working tree against")
    ap.add_argument("--windows", type=int, nargs="+", default=[10_000, 50_000])
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.8, 0.3])
    ap.add_argument("--measure", type=int, default=300, help="decisions timed per run")
    args = ap.parse_args(argv)
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.base],
                         check=True, capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          check=True, capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="ndd-compare-"))
    started = time.time()
    rows: list[dict[str, Any]] = []
    try:
        base = checkout(rev, work)
        for threshold in args.thresholds:
            for window in args.windows:
                for side, tree in (("base", base), ("new", ROOT)):
                    out = work / f"{side}-{window}-{threshold}.json"
                    rows.append(row(side, measure(tree, window, threshold, args.measure, out)))
                    r = rows[-1]
                    print(f"{side:4} t={threshold} window={window}: {r['docs_per_s']} docs/s, "
                          f"p99 {r['p99_ms']} ms, peak {r['peak_rss_mb']} MB", flush=True)
                b, n = rows[-2], rows[-1]
                if b["decisions"] != n["decisions"]:
                    print(f"WARNING: t={threshold} window={window}: base and new decided "
                          "differently", flush=True)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                        str(work / "base")], check=False)
        shutil.rmtree(work, ignore_errors=True)
    md = (f"Base {rev} against the working tree on {head}, run "
          f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(started))} on "
          f"{platform.processor() or platform.machine()} ({os.cpu_count()} CPUs), Python "
          f"{platform.python_version()}; {args.measure} decisions per run, alternating base "
          f"and new; {time.time() - started:.0f} s in all.\n\n{table(rows)}\n")
    same = all(b["decisions"] == n["decisions"]
               for b, n in zip(rows[::2], rows[1::2], strict=True))
    md += f"\nIdentical decisions (status, match, doc_q) on every measured item: {same}.\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "compare.md").write_text(md)
    (RESULTS / "compare.json").write_text(json.dumps(
        {"base": rev, "head": head, "rows": [{k: v for k, v in r.items() if k != "decisions"}
                                             for r in rows], "same_decisions": same}, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
