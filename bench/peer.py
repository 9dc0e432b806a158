"""Whole processes on one file: ``ndd-stream dedup`` at its defaults against the MinHash LSH
peers a Python user would pick (datasketch, and rensa in Rust).

    python -m bench.peer [--thresholds 0.8 0.3] [--rounds 3] [--base REV]

Why whole processes: a user compares what they would run, start-up, JSON parsing,
extraction and output included, not an in-process loop. The file is Reuters-21578
squeezed into one day (bench/corpora.py), one JSON item a line. Each round runs, one
process at a time and in alternating order, ``ndd-stream dedup FILE --scope global
--threshold T`` (``--scope channel``: a window per channel, dedup's default, and the peers an
LSH per channel) at every other default (main-content extraction, the novelty rule) of
the working tree (and of ``--base REV``, checked out and built as bench.compare does) and
two peers, each a process reading the same file with the same JSON parser, taking the
core's normal form and feeding its 4-grams to MinHash(128) + LSH(0.8) over the same
hourly window (query, then insert; expired hours removed):

* datasketch MinHash + MinHashLSH (bench.measure.MinHashWindow: the 4-grams' codes mixed
  by fmix64, the identity as hash function, fairer to it than its SHA-1 default);
* rensa RMinHash + RMinHashLSH (Rust), fed the 4-gram strings, as its README shows.

``--floor`` adds the working tree's ``dedup`` with its index stubbed out (every lookup finds
nothing, indexing and the order's upkeep do nothing): start-up, parsing, extraction, the
normal form, the facts of the novelty rule, the signature, the verdict, the stories and
the record out. What is left when the index costs nothing: the floor of the path around it.

Every tree's Python files are compiled to bytecode first, as an installed package has them
(with ``PYTHONDONTWRITEBYTECODE`` set, a source checkout compiles its modules again in every
process: ~0.1 s).

Reports items per second of wall time and of CPU time (user + system of the process: on a
machine shared with other jobs the wall clock varies far more), medians over the rounds
and their ratios to each peer; writes bench/results/peer.md (``--out NAME``: NAME.md).
"""

from __future__ import annotations

import argparse
import compileall
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


def write_items(path: Path, scope: str = "global") -> int:
    """The Reuters-in-one-day stream as JSONL; returns how many items. With ``scope``
    "channel" each item's channel is its first ``<TOPICS>`` label (as bench.order's)."""
    from bench.corpora import REUTERS, reuters_stream
    from ndd_stream.jsonio import dumps_line, loads

    docs = reuters_stream()
    channels: dict[str, str] = {}
    if scope == "channel":
        from bench.order import reuters_items

        for line in reuters_items(REUTERS, True, None):
            obj = loads(line)
            channels[obj["id"]] = obj["channel"]
    with path.open("wb") as out:
        for d in docs:
            out.write(dumps_line({"id": d.identity,
                                  "channel": channels.get(d.identity, d.channel),
                                  "timestamp": d.timestamp, "text": d.text}))
    return len(docs)


PEERS = {"datasketch": "MinHashLSH(0.8)", "rensa": "RMinHashLSH(0.8)"}


class RensaWindow:
    """rensa RMinHash(128) + RMinHashLSH(0.8) over the hourly window: query, then insert;
    the keys of hours that leave the window are removed."""

    def __init__(self, threshold: float) -> None:
        from rensa import RMinHash, RMinHashLSH

        self._minhash = RMinHash
        self.lsh = RMinHashLSH(threshold=threshold, num_perm=128, num_bands=16)
        self._by_hour: dict[int, list[int]] = {}
        self._watermark: int | None = None
        self._next = 0

    def decide(self, nf: str, timestamp: float) -> bool:
        hour = int(timestamp // 3600)
        if self._watermark is None or hour > self._watermark:
            self._watermark = hour
            for h in [h for h in self._by_hour if h < hour - 24]:
                for key in self._by_hour.pop(h):
                    self.lsh.remove(key)
        mh = self._minhash(num_perm=128, seed=42)
        mh.update([nf[i:i + 4] for i in range(len(nf) - 3)])
        found = bool(self.lsh.query(mh))
        self.lsh.insert(self._next, mh)
        self._by_hour.setdefault(hour, []).append(self._next)
        self._next += 1
        return found


def run_peer(path: Path, which: str = "datasketch", scope: str = "global") -> int:
    """A peer's process: parse every line, decide it with the peer's LSH (one per channel
    with ``scope`` "channel", as dedup keeps a window per channel); items decided."""
    from ndd_stream.core.normalize import normal_form
    from ndd_stream.jsonio import loads

    flagged = n = 0
    if which == "rensa":
        windows: dict[str, RensaWindow] = {}
        with path.open("rb") as fh:
            for line in fh:
                obj = loads(line)
                key = obj["channel"] if scope == "channel" else ""
                rensa = windows.get(key)
                if rensa is None:
                    rensa = windows[key] = RensaWindow(PEER_THRESHOLD)
                flagged += rensa.decide(normal_form(obj["text"]), float(obj["timestamp"]))
                n += 1
    else:
        from bench.measure import MinHashWindow
        from ndd_stream.core.document import Document

        peers: dict[str, MinHashWindow] = {}
        with path.open("rb") as fh:
            for line in fh:
                obj = loads(line)
                key = obj["channel"] if scope == "channel" else ""
                peer = peers.get(key)
                if peer is None:
                    peer = peers[key] = MinHashWindow(PEER_THRESHOLD)
                doc = Document(str(obj["id"]), "global", obj["channel"],
                               float(obj["timestamp"]), obj["text"])
                flagged += peer.decide(doc)
                n += 1
    print(f"peer {which}: {n} items, {flagged} flagged", file=sys.stderr)
    return n


def run_floor(path: Path, threshold: float, scope: str = "global") -> int:
    """``ndd-stream dedup`` at the defaults with the flat index stubbed out (see --floor)."""
    from ndd_stream.cli.main import main as cli
    from ndd_stream.core.engine import EngineMatch, FlatIndex

    added: dict[int, int] = {}

    def add_ordered(self: FlatIndex, *args: object, **kwargs: object) -> int:
        added[id(self)] = added.get(id(self), -1) + 1
        return added[id(self)]

    def best(self: FlatIndex, *args: object, **kwargs: object) -> EngineMatch:
        return EngineMatch(-1, 0, 0, 0, 0)

    FlatIndex.add_ordered = add_ordered  # type: ignore[method-assign]
    FlatIndex.best = best  # type: ignore[method-assign]
    FlatIndex.submit = lambda self, *args: None  # type: ignore[method-assign]
    FlatIndex.collect = best  # type: ignore[method-assign]
    FlatIndex.release_before = lambda self, number: None  # type: ignore[method-assign]
    return cli(["dedup", str(path), "-o", os.devnull, "--scope", scope,
                "--threshold", str(threshold)])


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
    ap.add_argument("--peers", nargs="+", choices=sorted(PEERS), default=sorted(PEERS))
    ap.add_argument("--scope", choices=["global", "channel"], default="global",
                    help="dedup's scope (the peers then keep one LSH per channel)")
    ap.add_argument("--floor", action="store_true",
                    help="also run dedup with its index stubbed out (the path around it)")
    ap.add_argument("--run-peer", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--run-floor", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--floor-threshold", type=float, default=0.8, help=argparse.SUPPRESS)
    ap.add_argument("--peer", choices=sorted(PEERS), default="datasketch", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_peer is not None:
        run_peer(args.run_peer, args.peer, args.scope)
        return 0
    if args.run_floor is not None:
        return run_floor(args.run_floor, args.floor_threshold, args.scope)
    from bench.compare import checkout

    work = Path(tempfile.mkdtemp(prefix="ndd-peer-"))
    started, load = time.time(), os.getloadavg()
    rows: dict[tuple[float, str], list[tuple[float, float]]] = {}
    try:
        items = work / "reuters-one-day.jsonl"
        n = write_items(items, args.scope)
        trees = [("new", ROOT)]
        if args.base:
            trees.insert(0, (f"base {args.base}", checkout(args.base, work)))
        for _, tree in trees:
            for package in ("ndd_stream", "bench"):
                compileall.compile_dir(tree / package, quiet=1)
        env = {k: v for k, v in os.environ.items() if not k.startswith("NDD_")}
        for r in range(args.rounds):
            for t in args.thresholds:
                sides = [(name, [sys.executable, "-m", "ndd_stream.cli", "dedup", str(items),
                                 "-o", os.devnull, "--scope", args.scope,
                                 "--threshold", str(t)], tree) for name, tree in trees]
                if args.floor:
                    sides.append(("new, index stubbed", [
                        sys.executable, "-m", "bench.peer", "--run-floor", str(items),
                        "--floor-threshold", str(t), "--scope", args.scope], ROOT))
                sides += [(f"{peer} {PEERS[peer]}",
                           [sys.executable, "-m", "bench.peer", "--run-peer", str(items),
                            "--peer", peer, "--scope", args.scope], ROOT)
                           for peer in args.peers]
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
    lines = [f"Whole processes, Reuters-21578 in one day ({n} items, one JSON file), "
             f"{'one window per channel' if args.scope == 'channel' else 'one global scope'}, run "
             f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(started))} on "
             f"{platform.processor() or platform.machine()} ({os.cpu_count()} CPUs), Python "
             f"{platform.python_version()}; {args.rounds} rounds, sides alternating; load "
             f"average at the start {load[0]:.2f}, at the end {os.getloadavg()[0]:.2f}.", "",
             "| threshold | side | items/s wall (median) | items/s CPU (median) | runs, wall "
             + "".join(f"| ÷ {p}, wall | ÷ {p}, CPU " for p in args.peers) + "|",
             "|---" * (5 + 2 * len(args.peers)) + "|"]
    for t in args.thresholds:
        peers = []
        for p in args.peers:
            runs = rows[(t, f"{p} {PEERS[p]}")]
            peers.append((n / statistics.median(w for w, _ in runs),
                          n / statistics.median(c for _, c in runs)))
        for (tt, name), runs in rows.items():
            if tt != t:
                continue
            wall = n / statistics.median(w for w, _ in runs)
            cpu = n / statistics.median(c for _, c in runs)
            ratios = "".join(f"| {wall / pw:.2f} | {cpu / pc:.2f} " for pw, pc in peers)
            lines.append(f"| {t} | {name} | {wall:.0f} | {cpu:.0f} | "
                         f"{', '.join(f'{n / w:.0f}' for w, _ in runs)} {ratios}|")
    md = "\n".join(lines) + "\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
