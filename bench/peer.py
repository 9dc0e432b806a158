"""Whole processes on one file: ``ndd-stream dedup`` against the datasketch MinHashLSH peer.

    python -m bench.peer [--thresholds 0.8 0.3] [--rounds 3] [--base REV]

Why whole processes: a user compares what they would run, start-up, JSON parsing and
output included, not an in-process loop. The file is Reuters-21578 squeezed into one day
(bench/corpora.py), one JSON item a line. Each round runs, one process at a time and in
alternating order, ``ndd-stream dedup FILE --scope global --extract raw --threshold T``
of the working tree (and of ``--base REV``, checked out and built as bench.compare does)
and the peer: a process reading the same file with the same JSON parser and feeding the
core's normal form's 4-grams, mixed by fmix64, to datasketch MinHash(128) +
MinHashLSH(0.8) over the same hourly window (bench.measure.MinHashWindow: query, then
insert). Reports items per second of wall time and of CPU time (user + system of the
process: on a machine shared with other jobs the wall clock varies far more), medians
over the rounds and their ratios; writes bench/results/peer.md (``--out NAME``: NAME.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PEER_THRESHOLD = 0.8  # MinHashLSH's own threshold whatever the exact side's


def write_items(path: Path) -> int:
    """The Reuters-in-one-day stream as JSONL; returns how many items."""
    from bench.corpora import reuters_stream
    from ndd_stream.jsonio import dumps_line

    docs = reuters_stream()
    with path.open("wb") as out:
        for d in docs:
            out.write(dumps_line({"id": d.identity, "channel": d.channel,
                                  "timestamp": d.timestamp, "text": d.text}))
    return len(docs)


def run_peer(path: Path) -> int:
    """The peer's process: parse every line, decide it with MinHashLSH; items decided."""
    from bench.measure import MinHashWindow
    from ndd_stream.core.document import Document
    from ndd_stream.jsonio import loads

    peer = MinHashWindow(PEER_THRESHOLD)
    flagged = n = 0
    with path.open("rb") as fh:
        for line in fh:
            obj = loads(line)
            doc = Document(str(obj["id"]), "global", obj["channel"], float(obj["timestamp"]),
                           obj["text"])
            flagged += peer.decide(doc)
            n += 1
    print(f"peer: {n} items, {flagged} flagged", file=sys.stderr)
    return n


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one process, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.8, 0.3])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base", default=None, help="also run this revision's ndd-stream dedup")
    ap.add_argument("--out", default="peer", help="results file name in bench/results (.md)")
    ap.add_argument("--run-peer", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_peer is not None:
        run_peer(args.run_peer)
        return 0
    from bench.compare import checkout

    work = Path(tempfile.mkdtemp(prefix="ndd-peer-"))
    started, load = time.time(), os.getloadavg()
    rows: dict[tuple[float, str], list[tuple[float, float]]] = {}
    try:
        items = work / "reuters-one-day.jsonl"
        n = write_items(items)
        trees = [("new", ROOT)]
        if args.base:
            trees.insert(0, (f"base {args.base}", checkout(args.base, work)))
        env = {k: v for k, v in os.environ.items() if not k.startswith("NDD_")}
        for r in range(args.rounds):
            for t in args.thresholds:
                sides = [(name, [sys.executable, "-m", "ndd_stream.cli", "dedup", str(items),
                                 "-o", os.devnull, "--scope", "global", "--extract", "raw",
                                 "--threshold", str(t)], tree) for name, tree in trees]
                sides.append(("MinHashLSH(0.8)", [sys.executable, "-m", "bench.peer",
                                                  "--run-peer", str(items)], ROOT))
                if r % 2:
                    sides.reverse()
                for name, cmd, tree in sides:
                    # run in its tree: ``python -m`` puts the working directory first on
                    # sys.path, before PYTHONPATH
                    wall, cpu = timed(cmd, {**env, "PYTHONPATH": str(tree)}, tree)
                    rows.setdefault((t, name), []).append((wall, cpu))
                    print(f"round {r} t={t} {name}: {n / wall:.0f}/s wall, {n / cpu:.0f}/s "
                          f"CPU, load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        if args.base:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(work / "base")], check=False)
        shutil.rmtree(work, ignore_errors=True)
    lines = [f"Whole processes, Reuters-21578 in one day ({n} items, one JSON file), run "
             f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(started))} on "
             f"{platform.processor() or platform.machine()} ({os.cpu_count()} CPUs), Python "
             f"{platform.python_version()}; {args.rounds} rounds, sides alternating; load "
             f"average at the start {load[0]:.2f}, at the end {os.getloadavg()[0]:.2f}.", "",
             "| threshold | side | items/s wall (median) | items/s CPU (median) | runs, wall "
             "| ÷ peer, wall | ÷ peer, CPU |", "|---" * 7 + "|"]
    for t in args.thresholds:
        peer = rows[(t, "MinHashLSH(0.8)")]
        peer_wall = n / statistics.median(w for w, _ in peer)
        peer_cpu = n / statistics.median(c for _, c in peer)
        for (tt, name), runs in rows.items():
            if tt != t:
                continue
            wall = n / statistics.median(w for w, _ in runs)
            cpu = n / statistics.median(c for _, c in runs)
            lines.append(f"| {t} | {name} | {wall:.0f} | {cpu:.0f} | "
                         f"{', '.join(f'{n / w:.0f}' for w, _ in runs)} | "
                         f"{wall / peer_wall:.2f} | {cpu / peer_cpu:.2f} |")
    md = "\n".join(lines) + "\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
