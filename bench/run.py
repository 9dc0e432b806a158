"""Run the benchmark matrix, each configuration in its own process, and write the report.

``python -m bench.run [--quick] [--threshold T ...] [--out bench/results]``

Writes ``bench/results/results.json`` (every figure), ``bench/results/results.md``
(the tables) and, unless ``--no-docs``, the same tables into ``docs/BENCHMARK.md``
between the ``<!-- results -->`` markers. See bench/README.md for the method.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Plan:
    method: str
    window: int
    measure: int
    budget: float  # seconds of measuring at most
    profile: int = 0
    workload: str = "news"  # bench/measure.py WORKLOADS; reuters ignores the window


def default_plan(quick: bool) -> tuple[list[Plan], list[str]]:
    """What runs, and what is skipped with why."""
    if quick:
        return [
            Plan("detector", 2_000, 200, 15, profile=30),
            Plan("detector", 10_000, 100, 15),
            Plan("faithful", 2_000, 8, 15),
            Plan("minhash", 2_000, 100, 10),
        ], ["quick mode: windows of 2k and 10k documents only"]
    return [
        Plan("detector", 10_000, 300, 30),
        Plan("detector", 50_000, 300, 45, profile=40),
        Plan("detector", 200_000, 150, 60, profile=40),
        Plan("faithful", 10_000, 20, 30),
        Plan("faithful", 50_000, 8, 45),
        Plan("minhash", 10_000, 200, 20),
        Plan("minhash", 50_000, 100, 20),
        Plan("detector", 0, 20_000, 300, workload="reuters"),
        Plan("minhash", 0, 20_000, 300, workload="reuters"),
        Plan("detector", 50_000, 200, 60, workload="repetitive"),
    ], [
        "faithful at 200k: skipped. Its hourly bitmaps of full signatures need ~4x the 50k "
        "memory (several GB) and its warm-up alone several minutes, beyond the run budget; "
        "its cost per decision is measured at 10k and 50k.",
        "minhash at 200k: skipped. Warming 200k MinHash sketches (128 permutations of ~3,300 "
        "shingles each) takes ~10 minutes, beyond the run budget.",
    ]


def run_one(plan: Plan, threshold: float, tmp: Path, resume: bool = False) -> dict[str, Any]:
    tag = "" if plan.workload == "news" else f"-{plan.workload}"
    out = tmp / f"{plan.method}{tag}-{plan.window}-{threshold}.json"
    if resume and out.exists():
        print(f"  {plan.method:9s} window={plan.window:>7,} t={threshold} ... reused {out.name}")
        return dict(json.loads(out.read_text()))
    cmd = [
        sys.executable, "-m", "bench.measure", plan.method, str(plan.window),
        str(plan.measure), str(threshold), str(out), "--budget", str(plan.budget),
        "--workload", plan.workload,
    ]
    if plan.profile:
        cmd += ["--profile", str(plan.profile)]
    t0 = time.perf_counter()
    print(f"  {plan.method:9s} {plan.workload:10s} window={plan.window:>7,} t={threshold} ...",
          end="", flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(" FAILED")
        return {"method": plan.method, "window": plan.window, "threshold": threshold,
                "workload": plan.workload, "error": proc.stderr[-2000:]}
    result: dict[str, Any] = json.loads(out.read_text())
    print(f" {result['docs_per_s']:.1f} docs/s, p99 {result['p99_ms']:.1f} ms, "
          f"peak {result['peak_rss_mb']:.0f} MB ({time.perf_counter() - t0:.0f} s)")
    return result


def machine() -> dict[str, Any]:
    def sh(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
        except OSError:
            return ""

    model = next((line.split(":", 1)[1].strip() for line in sh(["lscpu"]).splitlines()
                  if line.startswith("Model name")), platform.processor())
    import numpy

    return {
        "cpu": model,
        "nproc": sh(["nproc"]).strip(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "mem_total_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
    }


def compare(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Faithful vs detector decisions on the items both measured; MinHash flags vs exact."""
    out: dict[str, Any] = {}
    by = {(r.get("workload", "news"), r["method"], r["window"], r["threshold"]): r
          for r in results if "error" not in r}
    for (workload, method, window, t), r in by.items():
        det = by.get((workload, "detector", window, t))
        if det is None or method == "detector":
            continue
        if workload != "news":
            window = f"{workload}"  # a label from here on
        if method == "faithful":
            n = len(r["decisions"])
            same = sum(a == b for a, b in zip(r["decisions"], det["decisions"], strict=False))
            out[f"faithful_vs_detector@{window}/t={t}"] = {
                "compared": n, "identical": same,
                "speedup_mean": r["mean_ms"] / det["mean_ms"],
                "speedup_p50": r["p50_ms"] / det["p50_ms"],
            }
        if method == "minhash":
            n = min(len(r["flags"]), len(det["flags"]))
            a, b = r["flags"][:n], det["flags"][:n]
            tp = sum(x and y for x, y in zip(a, b, strict=True))
            out[f"minhash_vs_exact@{window}/t={t}"] = {
                "compared": n, "exact_duplicates": sum(b), "minhash_flagged": sum(a),
                "agreeing_flags": sum(x == y for x, y in zip(a, b, strict=True)),
                "recall_vs_exact": tp / sum(b) if sum(b) else None,
                "precision_vs_exact": tp / sum(a) if sum(a) else None,
            }
    return out


def label(r: dict[str, Any]) -> str:
    workload = r.get("workload", "news")
    return r["method"] if workload == "news" else f"{r['method']} ({workload})"


def tables(report: dict[str, Any]) -> str:
    rows = [
        "| method | threshold | window docs | measured | docs/s | p50 ms | p99 ms | "
        "peak RSS MB | RSS after warm-up MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        if "error" in r:
            rows.append(f"| {label(r)} | {r['threshold']} | {r['window']:,} | FAILED |"
                        " | | | | |")
            continue
        rows.append(
            f"| {label(r)} | {r['threshold']} | {r['window'] or r['measured']:,} | "
            f"{r['measured']} | "
            f"{r['docs_per_s']:.1f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
            f"{r['peak_rss_mb']:.0f} | {r['rss_after_warm_mb']:.0f} |"
        )
    parts = ["\n".join(rows)]
    cmp_rows = ["| comparison | figures |", "|---|---|"]
    for k, v in report["comparisons"].items():
        figs = ", ".join(f"{a}={b:.3g}" if isinstance(b, float) else f"{a}={b}"
                         for a, b in v.items())
        cmp_rows.append(f"| {k} | {figs} |")
    parts.append("\n".join(cmp_rows))
    mem = ["| threshold | window docs | index MB | bitmaps MB | normal forms MB | "
           "RSS growth per 10k docs MB | candidates per decision (bitmap-pruned) |",
           "|---|---|---|---|---|---|---|"]
    prof: list[str] = []
    for r in report["results"]:
        if r.get("method") != "detector" or "error" in r:
            continue
        docs = r["window"] or r.get("window_documents_end") or r["measured"]
        grown = r["peak_rss_mb"] if not r["window"] else r["rss_after_warm_mb"]
        per10k = (grown - r["rss_start_mb"]) / (max(1, docs) / 10_000)
        cand = r["candidates"] / max(1, r["measured"])
        pruned = r.get("bitmap_pruned", 0) / max(1, r["measured"])
        mem.append(f"| {r['threshold']} | {docs:,} {label(r)} | {r['index_bytes'] / 2**20:.0f} | "
                   f"{r.get('bitmap_bytes', 0) / 2**20:.0f} | "
                   f"{r['nf_bytes'] / 2**20:.0f} | {per10k:.0f} | {cand:.2f} ({pruned:.2f}) |")
        if "profile" in r:
            p = r["profile"]
            prof.append(f"Detector, window {r['window']:,}, t={r['threshold']} "
                        f"({p['profiled_seconds']:.1f} s profiled):\n")
            prof.append("| stage | share of decide() |\n|---|---|")
            prof.extend(f"| {k} | {v:.1%} |" for k, v in p.items() if k != "profiled_seconds")
            prof.append("")
    parts.append("\n".join(mem))
    if prof:
        parts.append("\n".join(prof))
    if report["skipped"]:
        parts.append("\n".join(f"* {s}" for s in report["skipped"]))
    return "\n\n".join(parts) + "\n"


def write_docs(md: str, report: dict[str, Any]) -> None:
    path = ROOT / "docs" / "BENCHMARK.md"
    begin, end = "<!-- results -->", "<!-- /results -->"
    m = report["machine"]
    block = (f"{begin}\n\nRun {report['date']} on {m['cpu']} ({m['nproc']} CPUs), "
             f"Python {m['python']}, numpy {m['numpy']}, {m['mem_total_gb']} GB RAM; "
             f"mode: {report['mode']}; {report['wall_seconds']:.0f} s in all.\n\n{md}\n{end}")
    text = path.read_text() if path.exists() else f"# Benchmark\n\n{begin}\n{end}\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text += "\n" + block + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small windows, < 2 minutes")
    ap.add_argument("--threshold", type=float, action="append",
                    help="detection threshold(s); default: the paper's 0.8")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--no-docs", action="store_true", help="do not update docs/BENCHMARK.md")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the per-configuration JSON files already in OUT/raw")
    ap.add_argument("--skip-200k", action="store_true",
                    help="leave out the detector at 200k (its warm-up takes ~6 minutes)")
    args = ap.parse_args(argv)
    thresholds = args.threshold or [0.8, 0.3]
    plans, skipped = default_plan(args.quick)
    if args.skip_200k:
        plans = [p for p in plans if p.window < 200_000]
        skipped = ["detector at 200k: left out (--skip-200k)", *skipped]
    t0 = time.perf_counter()
    results = []
    raw = args.out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for t in thresholds:
        for plan in plans:
            if plan.window >= 200_000 and t < 0.5:
                skipped.append(
                    f"detector at 200k, t={t}: skipped. Below t = 0.5 every q-gram is indexed "
                    "(similarity.FULL_PREFIX_BELOW): ~3 GB of postings and a ~10 minute "
                    "warm-up at 200k; its cost is measured at 10k and 50k.")
                continue
            results.append(run_one(plan, t, raw, resume=args.resume))
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "mode": "quick" if args.quick else "default",
        "machine": machine(),
        "results": results,
        "comparisons": compare(results),
        "skipped": skipped,
        "wall_seconds": time.perf_counter() - t0,
    }
    md = tables(report)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "results-quick" if args.quick else "results"
    slim = {**report, "results": [{k: v for k, v in r.items() if k not in ("flags", "decisions")}
                                  for r in results]}
    (args.out / f"{name}.json").write_text(json.dumps(slim, indent=1))
    (args.out / f"{name}.md").write_text(md)
    if not args.no_docs and not args.quick:
        write_docs(md, report)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
