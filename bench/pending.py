"""The gatherer's checkpoint under a backlog: what listing the pending items costs.

    python -m bench.pending [--lengths 10000 100000 1000000] [--backlogs 100000 1000000]

A gatherer admits a catch-up's whole backlog before it decides it, and writes a checkpoint
(encoded twice: the RocksDB store and the changelog record) listing every admitted,
undecided item after each piece of 256 decisions. This times one checkpoint's listing at
a given length, both ways in one run: the whole list packed each time (layout ``0x03``,
what the gatherer did before state/pending.py) and the chunked list (``0x04``: full chunks
packed once, when they fill; this revision). Each checkpoint is preceded by one piece:
256 items decided and 256 admitted, as in a catch-up. Offsets and numbers are those of 8 raw
partitions forwarded in turn. From the per-checkpoint times it sums a backlog's catch-up
(B items admitted at once, decided in pieces of 256: a checkpoint at each length B - 256 j),
interpolating between the measured lengths (log-log). Writes bench/results/pending.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from ndd_stream.state.pending import PendingList, least_offset
from ndd_stream.state.rocks import Checkpoint, encode_checkpoint

RESULTS = Path(__file__).resolve().parent / "results"
PIECE = 256  # decisions between checkpoints (worker/pool.py CHECKPOINT_ITEMS)


def _offset(n: int) -> int:
    """The scoped offset of the n-th admitted item: 8 raw partitions forwarded in turn."""
    return 1_000_000 + (n % 8) * 10_000_000 + n // 8


def _whole(length: int, repeats: int) -> float:
    """Seconds per checkpoint, the whole list packed each time (the former gatherer)."""
    pairs = [(_offset(n), n) for n in range(length)]
    start, times = length, []
    for _ in range(repeats):
        del pairs[:PIECE]
        pairs += [(_offset(n), n) for n in range(start, start + PIECE)]
        start += PIECE
        began = time.perf_counter()
        listed = tuple(pairs)
        least_offset(listed)
        for _ in range(2):  # the store, then the changelog record
            encode_checkpoint(Checkpoint(1, 2, None, listed, 2))
        times.append(time.perf_counter() - began)
    return float(np.median(times))


def _chunked(length: int, repeats: int) -> float:
    """Seconds per checkpoint with :class:`PendingList` (sealing a chunk counts: it is
    part of the pieces' admissions)."""
    live = PendingList()
    for n in range(length):
        live.append((_offset(n), n))
    start, times = length, []
    for _ in range(repeats):
        began = time.perf_counter()
        for _ in range(PIECE):
            live.popleft()
        for n in range(start, start + PIECE):
            live.append((_offset(n), n))
        start += PIECE
        listed = live.snapshot()
        least_offset(listed)
        for _ in range(2):
            encode_checkpoint(Checkpoint(1, 2, None, listed, 2))
        times.append(time.perf_counter() - began)
    return float(np.median(times))


def _catch_up(backlog: int, lengths: list[int], per: list[float]) -> float:
    """Seconds of listing over a backlog's catch-up (interpolated in log-log)."""
    at = np.arange(backlog, 0, -PIECE, dtype=np.float64)
    logs = np.interp(np.log(at), np.log(lengths), np.log(per))
    return float(np.exp(logs).sum())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+",
                    default=[1_000, 10_000, 100_000, 1_000_000])
    ap.add_argument("--backlogs", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M")
    rows = []
    for length in sorted(args.lengths):
        whole, chunked = _whole(length, args.repeats), _chunked(length, args.repeats)
        rows.append({"length": length, "whole_ms": whole * 1e3, "chunked_ms": chunked * 1e3})
        print(f"{length:>9,} pending: whole {whole * 1e3:8.2f} ms, chunked "
              f"{chunked * 1e3:6.2f} ms per checkpoint", flush=True)
    lengths = [r["length"] for r in rows]
    totals = [{"backlog": b,
               "whole_s": _catch_up(b, lengths, [r["whole_ms"] / 1e3 for r in rows]),
               "chunked_s": _catch_up(b, lengths, [r["chunked_ms"] / 1e3 for r in rows])}
              for b in args.backlogs]
    for t in totals:
        print(f"backlog {t['backlog']:,}: listing over the catch-up {t['whole_s']:.1f} s "
              f"whole, {t['chunked_s']:.1f} s chunked", flush=True)
    machine = (f"{platform.processor() or platform.machine()} ({os.cpu_count()} CPUs), "
               f"Python {platform.python_version()}, {started}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pending.json").write_text(json.dumps(
        {"machine": machine, "piece": PIECE, "checkpoints": rows, "catch_up": totals},
        indent=1))
    lines = [f"Pending list per checkpoint (median of {args.repeats}; {machine}):", "",
             "| pending items | whole list (0x03) ms | chunked (0x04) ms | ratio |",
             "|---:|---:|---:|---:|"]
    lines += [f"| {r['length']:,} | {r['whole_ms']:.2f} | {r['chunked_ms']:.2f} | "
              f"{r['whole_ms'] / r['chunked_ms']:.1f} |" for r in rows]
    lines += ["", "| backlog | listing over its catch-up, whole (s) | chunked (s) |",
              "|---:|---:|---:|"]
    lines += [f"| {t['backlog']:,} | {t['whole_s']:.1f} | {t['chunked_s']:.1f} |"
              for t in totals]
    (RESULTS / "pending.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
