"""Where a whole process's time goes, from a py-spy profile, and what an ideal engine bounds.

    NDD_COUNT_THREADS=1 py-spy record -r 500 -f raw -o PROFILE.txt -- \\
        ndd-stream dedup FILE --scope global --extract raw --threshold T -o /dev/null
    python -m bench.whole_profile PROFILE.txt [--dedup-s S --peer-s P]

Why: issue 22 asked for the whole decision in one C call, on the premise that a decision's
time lies in its Python/C crossings. This splits a whole ``dedup`` process into the C
kernels, Python start-up and everything else, and, given the process's and the peer's wall
time, says how fast ``dedup`` could be if everything outside the kernels cost nothing.
Under "one thread", everything but the kernels and start-up is free. Under "count
halved", the count also splits perfectly over two cores. That is the bound in
docs/BENCHMARK.md, "The whole-process bound".

py-spy without ``--native`` charges time in C to the Python line that called it, so a
sample whose innermost frame is in ``core/kernels.py`` (the thin wrappers of the C
kernels) counts as C time. A raw profile is one line per stack: ``frame;frame;... N``.
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

KERNELS = "ndd_stream/core/kernels.py"
GROUPS = {
    "count_candidates": "count",
    "probe_keys": "probe prefixes",
    "merge_blocks": "indexing",
    "make_block": "indexing",
    "top_bits_count": "indexing",
    "top_bits_bitmap": "indexing",
}
"""A kernel wrapper's function name -> its group; the other kernels are "other kernels"."""


@dataclass(frozen=True, slots=True)
class Shares:
    samples: int
    groups: dict[str, int]  # group -> samples; "start-up" and "rest" included

    def share(self, group: str) -> float:
        return self.groups.get(group, 0) / self.samples if self.samples else 0.0

    @property
    def kernels(self) -> float:
        return sum(self.share(g) for g in self.groups if g not in ("start-up", "rest"))

    def bound_seconds(self, seconds: float, count_split: int = 1) -> float:
        """The process's time if all but the kernels and start-up cost nothing, the count
        divided over ``count_split`` cores."""
        count = self.share("count")
        return seconds * (self.kernels - count + count / count_split + self.share("start-up"))


def read_profile(path: Path) -> Shares:
    groups: Counter[str] = Counter()
    total = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        groups[_group(stack.split(";")) if stack.strip() else "rest"] += n  # "": no frame
    return Shares(total, dict(groups))


def _group(frames: list[str]) -> str:
    inner = frames[-1]
    if KERNELS in inner:
        return GROUPS.get(inner.split(" (", 1)[0], "other kernels")
    if any("importlib._bootstrap" in f for f in frames):
        return "start-up"
    return "rest"


def report(shares: Shares, dedup_s: float | None, peer_s: float | None) -> list[str]:
    lines = [f"samples: {shares.samples}", "", "| part | share |", "| --- | ---: |"]
    for group, _ in sorted(shares.groups.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {group} | {100 * shares.share(group):.1f}% |")
    lines.append(f"| **C kernels, all** | **{100 * shares.kernels:.1f}%** |")
    if dedup_s is not None and peer_s is not None:
        one, two = shares.bound_seconds(dedup_s), shares.bound_seconds(dedup_s, 2)
        lines += ["", f"dedup {dedup_s:.2f} s, the peer {peer_s:.2f} s: today "
                  f"{peer_s / dedup_s:.2f}x the peer",
                  f"ideal, one thread: {one:.2f} s = {peer_s / one:.2f}x the peer",
                  f"ideal, count halved: {two:.2f} s = {peer_s / two:.2f}x the peer"]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile", type=Path, help="py-spy raw output (-f raw)")
    ap.add_argument("--dedup-s", type=float, help="the profiled process's wall time, unprofiled")
    ap.add_argument("--peer-s", type=float, help="the peer's wall time on the same file")
    args = ap.parse_args(argv)
    print("\n".join(report(read_profile(args.profile), args.dedup_s, args.peer_s)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
