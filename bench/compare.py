"""A/B of the detector against an earlier revision, in one run on one machine.

    python -m bench.compare BASE_REV [--windows 10000 50000] [--thresholds 0.8 0.3]
        [--workloads news repetitive reuters] [--threads 1 2] [--peer minhash]

Why: figures from different days on a shared 2-CPU machine differ by up to 2x for the
same code, so a speed-up is only claimed against a baseline measured in the same run.
BASE_REV is checked out into a temporary git worktree and its C kernels are built
there; then, for every (workload, threshold, window), ``bench.measure detector`` runs for
the base and for the working tree *alternately*, one process at a time, on the same
items. Both sides run this tree's benchmark harness (``bench/``, copied aside) over their
own ``ndd_stream``, so the workloads and the timing are the same code. ``--threads``
runs the working tree once per count-thread setting (NDD_COUNT_THREADS: 1 = one core);
``--peer minhash`` adds datasketch's MinHashLSH on the same items. Prints a table (docs/s,
p50, p99, peak RSS, index MB, ratios) and writes it, with every figure, to
bench/results/compare.json and compare.md.
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

from bench.corpora import REUTERS

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

# The revision's own build (hatch_build._compile knows its C sources: two since 9632b7f);
# revisions before hatch_build had the one source.
_BUILD = """
from pathlib import Path
try:
    from hatch_build import _compile
except ImportError:
    _compile = None
if _compile is not None:
    _compile(Path("."))
else:
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext
    ext = Extension("ndd_stream.core._kernels", ["ndd_stream/core/_kernels.c"],
                    extra_compile_args=["-O3"])
    cmd = build_ext(Distribution({"name": "k", "ext_modules": [ext]}))
    cmd.inplace = True
    cmd.ensure_finalized()
    cmd.run()
"""
_IMPLEMENTATION = "from ndd_stream.core.kernels import IMPLEMENTATION; print(IMPLEMENTATION)"


def checkout(rev: str, where: Path) -> Path:
    """A worktree of ``rev`` with its own C kernels built in place. Refuses to go on when
    they did not build: its numpy fallback against our C would be no baseline."""
    tree = where / "base"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev],
                   check=True)
    build = subprocess.run([sys.executable, "-c", _BUILD], cwd=tree, capture_output=True,
                           text=True)
    used = subprocess.run([sys.executable, "-c", _IMPLEMENTATION], cwd=tree,
                          capture_output=True, text=True).stdout.strip()
    if used != "c":
        tail = (build.stderr or build.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"bench.compare: the C kernels of {rev} did not build "
                         f"(it would run {used or 'nothing'}): {tail[0]}")
    return tree


def harness(where: Path) -> Path:
    """This tree's bench/ alone in a folder, so that either side's ndd_stream is imported."""
    home = where / "harness"
    shutil.copytree(ROOT / "bench", home / "bench",
                    ignore=shutil.ignore_patterns("results", "__pycache__"))
    return home


def measure(home: Path, tree: Path, method: str, workload: str, window: int,
            threshold: float, count: int, out: Path, threads: int | None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{home}{os.pathsep}{tree}",
           "NDD_SHARED_DATA": str(REUTERS.parent)}  # the harness copy sits elsewhere
    extra: list[str] = []
    if threads is not None:  # an older base reads the variable, this tree the option
        env["NDD_COUNT_THREADS"] = str(threads)
        extra = ["--threads", str(threads)]
    subprocess.run([sys.executable, "-m", "bench.measure", method, str(window), str(count),
                    str(threshold), str(out), "--workload", workload, "--budget", "600",
                    *extra],
                   cwd=home, env=env, check=True, stdout=subprocess.DEVNULL)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def row(side: str, r: dict[str, Any]) -> dict[str, Any]:
    return {"side": side, "workload": r.get("workload", "news"), "threshold": r["threshold"],
            "window": r["window"] or r.get("window_documents_end") or r["measured"],
            "kernels": r.get("kernels"), "threads": r.get("count_threads"),
            "measured": r["measured"], "docs_per_s": round(r["docs_per_s"], 1),
            "cpu_docs_per_s": round(r.get("cpu_docs_per_s", 0.0), 1),
            "p50_ms": round(r["p50_ms"], 2), "p99_ms": round(r["p99_ms"], 2),
            "peak_rss_mb": round(r["peak_rss_mb"]),
            "index_mb": round(r.get("index_bytes", 0) / 2**20),
            "flags": sum(r.get("flags", [])), "decisions": r.get("decisions"),
            "flag_list": r.get("flags")}


def peer_note(workload: str, threshold: float, exact: dict[str, Any],
              peer: dict[str, Any]) -> str:
    """How the approximate peer's flags agree with the exact decisions on the same items."""
    a, b = peer["flag_list"] or [], exact["flag_list"] or []
    n = min(len(a), len(b))
    a, b = a[:n], b[:n]
    both = sum(x and y for x, y in zip(a, b, strict=True))
    return (f"{peer['side']} vs exact, {workload} t={threshold}: {n} items, exact flags "
            f"{sum(b)}, {peer['side']} flags {sum(a)}, both {both} (recall "
            f"{both / max(1, sum(b)):.3f}, precision {both / max(1, sum(a)):.3f})")


def table(groups: list[list[dict[str, Any]]]) -> str:
    lines = ["| workload | threshold | window | side | docs/s | CPU docs/s | p50 ms | p99 ms |"
             " peak RSS MB | index MB | flagged | ÷ base docs/s | ÷ base CPU docs/s |",
             "|---" * 13 + "|"]
    for group in groups:
        base = group[0]
        for r in group:
            ratio = "" if r is base else f"{r['docs_per_s'] / base['docs_per_s']:.2f}"
            cpu = ("" if r is base or not base["cpu_docs_per_s"] else
                   f"{r['cpu_docs_per_s'] / base['cpu_docs_per_s']:.2f}")
            lines.append(f"| {r['workload']} | {r['threshold']} | {r['window']:,} | {r['side']} | "
                         f"{r['docs_per_s']} | {r['cpu_docs_per_s']} | {r['p50_ms']} | "
                         f"{r['p99_ms']} | {r['peak_rss_mb']} | {r['index_mb']} | {r['flags']} | "
                         f"{ratio} | {cpu} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", help="git revision to compare the working tree against")
    ap.add_argument("--windows", type=int, nargs="+", default=[10_000, 50_000])
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.8, 0.3])
    ap.add_argument("--workloads", nargs="+", default=["news"],
                    choices=["news", "repetitive", "reuters"],
                    help="reuters: the whole corpus in one day, --windows ignored")
    ap.add_argument("--threads", type=int, nargs="+", default=[1],
                    help="count threads of the working tree, one run each (1 = one core)")
    ap.add_argument("--peer", choices=["minhash"], action="append", default=[],
                    help="also run datasketch MinHashLSH on the same items")
    ap.add_argument("--measure", type=int, default=300, help="decisions timed per run")
    ap.add_argument("--base-threads", type=int, default=None,
                    help="NDD_COUNT_THREADS for the base (default: its own default, all "
                         "cores); 1 for a one-core A/B")
    args = ap.parse_args(argv)
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.base],
                         check=True, capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          check=True, capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="ndd-compare-"))
    started = time.time()
    load = os.getloadavg()
    groups: list[list[dict[str, Any]]] = []
    warnings: list[str] = []
    notes: list[str] = []
    try:
        base = checkout(rev, work)
        home = harness(work)
        for workload in args.workloads:
            windows = [0] if workload == "reuters" else args.windows
            for threshold in args.thresholds:
                for window in windows:
                    base_side = ("base" if args.base_threads is None else
                                 f"base, {args.base_threads} thread{'s' * (args.base_threads > 1)}")
                    runs: list[tuple[str, str, Path, int | None]] = [
                        (base_side, "detector", base, args.base_threads)]
                    runs += [(f"new, {t} thread{'s' * (t > 1)}", "detector", ROOT, t)
                             for t in args.threads]
                    runs += [(peer, peer, ROOT, 1) for peer in args.peer]
                    group: list[dict[str, Any]] = []
                    for side, method, tree, threads in runs:
                        out = work / f"{side}-{workload}-{window}-{threshold}.json".replace(" ", "")
                        r = row(side, measure(home, tree, method, workload, window, threshold,
                                              args.measure, out, threads))
                        group.append(r)
                        print(f"{side:18} {workload} t={threshold} window={r['window']}: "
                              f"{r['docs_per_s']} docs/s, p99 {r['p99_ms']} ms, peak "
                              f"{r['peak_rss_mb']} MB", flush=True)
                    for r in group[1:]:
                        if r["side"] in args.peer:
                            notes.append(peer_note(workload, threshold, group[0], r))
                            continue
                        if r["decisions"] != group[0]["decisions"]:
                            warnings.append(f"{workload} t={threshold} window={window}: "
                                            f"{r['side']} decided differently from the base")
                            print("WARNING:", warnings[-1], flush=True)
                    groups.append(group)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                        str(work / "base")], check=False)
        shutil.rmtree(work, ignore_errors=True)
    md = (f"Base {rev} against the working tree on {head}, run "
          f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(started))} on "
          f"{platform.processor() or platform.machine()} ({os.cpu_count()} CPUs), Python "
          f"{platform.python_version()}; up to {args.measure} decisions per run (reuters: "
          f"every item), base and new alternating; load average at the start "
          f"{load[0]:.2f}, at the end {os.getloadavg()[0]:.2f}; "
          f"{time.time() - started:.0f} s in all.\n\n{table(groups)}\n")
    same = not warnings
    md += f"\nIdentical decisions (status, match, doc_q) on every measured item: {same}.\n"
    md += "".join(f"\n* {w}" for w in warnings + notes) + "\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "compare.md").write_text(md)
    (RESULTS / "compare.json").write_text(json.dumps(
        {"base": rev, "head": head, "same_decisions": same,
         "rows": [{k: v for k, v in r.items() if k not in ("decisions", "flag_list")}
                  for g in groups for r in g]}, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
