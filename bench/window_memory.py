"""Memory per window document: peak RSS of whole ``ndd-stream dedup`` processes.

    python -m bench.window_memory [--small 2000] [--large 12000] [--threshold 0.3] [--base REV]

Writes ``--small`` and ``--large`` ~5 KB news items (bench.measure's workload, spaced so
every item stays in the window, one scope) as JSONL, runs ``ndd-stream dedup`` over each
(``--rounds`` times, alternating; of ``--base REV`` too, checked out and built as
bench.compare does) and reports the median peak RSS of each and (large - small) / (large
- small items): what a window document costs, start-up and the interpreter left out.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_items(path: Path, n: int, spacing_window: int) -> None:
    from bench.measure import workload
    from ndd_stream.jsonio import dumps_line

    with path.open("wb") as out:
        for d in workload(spacing_window).take(n):
            out.write(dumps_line({"id": d.identity, "channel": d.channel,
                                  "timestamp": d.timestamp, "text": d.text}))


def measure(tree: Path, items: Path, threshold: float) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NDD_")}
    env["PYTHONPATH"] = str(tree)
    # a fresh parent per run: RUSAGE_CHILDREN's ru_maxrss is the largest child so far
    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
            "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    cmd = [sys.executable, "-c", code, sys.executable, "-m", "ndd_stream.cli", "dedup",
           str(items), "-o", os.devnull, "--scope", "global", "--extract", "raw",
           "--threshold", str(threshold)]
    # in its tree: ``python -m`` puts the working directory first on sys.path
    out = subprocess.run(cmd, env=env, cwd=tree, check=True, capture_output=True, text=True)
    return int(out.stdout.strip()) / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--large", type=int, default=12000)
    ap.add_argument("--threshold", type=float, default=0.3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--base", default=None, help="also measure this revision")
    args = ap.parse_args(argv)
    from bench.compare import checkout

    work = Path(tempfile.mkdtemp(prefix="ndd-mem-"))
    try:
        files = {n: work / f"news-{n}.jsonl" for n in (args.small, args.large)}
        items = write_items_all(files, args.large)
        trees = [("new", ROOT)]
        if args.base:
            trees.insert(0, (f"base {args.base}", checkout(args.base, work)))
        peaks: dict[tuple[str, int], list[float]] = {}
        for r in range(args.rounds):
            order = trees if r % 2 == 0 else trees[::-1]
            for name, tree in order:
                for n, path in files.items():
                    peaks.setdefault((name, n), []).append(measure(tree, path, args.threshold))
        print(f"{items} items written; t = {args.threshold}; {args.rounds} rounds")
        print("| side | peak RSS MiB, small | peak RSS MiB, large | KiB per window document |")
        print("|---|---:|---:|---:|")
        for name, _ in trees:
            small = statistics.median(peaks[(name, args.small)])
            large = statistics.median(peaks[(name, args.large)])
            per = (large - small) * 1024 / (args.large - args.small)
            print(f"| {name} | {small:.0f} | {large:.0f} | {per:.1f} |")
    finally:
        if args.base:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(work / "base")], check=False)
        shutil.rmtree(work, ignore_errors=True)
    return 0


def write_items_all(files: dict[int, Path], large: int) -> int:
    """Each file: the first n items of one stream, spaced so ``large`` items fit the window."""
    for n, path in files.items():
        write_items(path, n, spacing_window=large * 5 // 3)
    return large


if __name__ == "__main__":
    raise SystemExit(main())
