"""Soak: event time runs for days at a steady rate; do memory and disk stay bounded?

    python -m bench.soak                         # 96 h of event time, 1000 items an hour
    python -m bench.soak --hours 168 --per-hour 2000 --target-bytes 5000

Drives the worker's own partition code in process, without a broker: a
``PartitionDecider`` (Detector + RocksDB store, exactly as a worker's partition) gets raw
JSON items from ``bench.workload`` (8 channels, so 8 comparison scopes, spread evenly over
event time), and every ``--commit-every`` items it does what the worker does after a batch:
drain the changelog records, commit the state with its offset (which compacts RocksDB
after a dozen dropped hours). At every event-time hour it records the process RSS, the
RocksDB directory size and file count, the live window (documents, hours, remembered
decisions, index bytes). At the end the partition is closed and reopened, as after a
restart, to count what the state on disk really holds.

Writes ``bench/results/soak.json``, ``docs/soak-rss-state.png`` and prints a Markdown
table (every ``--table-every`` hours) for docs/RELIABILITY.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.workload import NewsStream, WorkloadConfig
from ndd_stream import jsonio
from ndd_stream.core.detector import DetectorConfig
from ndd_stream.core.items import ItemFormat
from ndd_stream.state.rocks import Checkpoint
from ndd_stream.worker.deciding import OutputTopics, PartitionDecider
from ndd_stream.worker.records import Source

RESULTS = Path(__file__).parent / "results"
DOCS = Path(__file__).parent.parent / "docs"
START = 1_772_323_200.0  # 2026-03-01 00:00 UTC
TOPICS = OutputTopics("unique", "duplicate", "dlq", "decisions", "changelog")


@dataclass
class Sample:
    hour: int  # event-time hours since the start
    items: int
    window_documents: int
    window_hours: int
    remembered: int  # identities whose decisions are kept for redelivery
    index_bytes: int
    state_bytes: int  # RocksDB directory, all files
    data_bytes: int  # the same without RocksDB's informational LOG files
    state_files: int
    rss_bytes: int
    seconds: float


@dataclass
class SoakResult:
    samples: list[Sample]
    restored_documents: int  # documents the state on disk held at the end
    final_window_documents: int
    config: dict[str, Any]


def _dir_stats(path: Path) -> tuple[int, int, int]:
    """(all bytes, bytes without the informational LOG files, files) of a RocksDB dir."""
    files = [p for p in path.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    data = sum(p.stat().st_size for p in files if not p.name.startswith("LOG"))
    return total, data, len(files)


def run_soak(workdir: Path, *, hours: int = 96, per_hour: int = 1000, target_bytes: int = 1500,
             commit_every: int = 500, threshold: float = 0.3, window_hours: int = 24,
             seed: int = 7, progress: bool = False) -> SoakResult:
    """Decide ``hours * per_hour`` items of steadily advancing event time; sample hourly."""
    spacing = 3600.0 / per_hour
    stream = NewsStream(WorkloadConfig(seed=seed, target_bytes=target_bytes, spacing=spacing,
                                       start=START, scope="-"))
    config = DetectorConfig(threshold=threshold, window_hours=window_hours)
    fmt = ItemFormat(max_future_seconds=0)  # event time runs ahead of the wall clock here
    path = workdir / "partition-0"
    decider = PartitionDecider(0, path, config, fmt, TOPICS)
    process = psutil.Process()
    samples: list[Sample] = []
    started = time.perf_counter()
    total = hours * per_hour
    for n in range(total):
        doc = next(stream)
        raw = jsonio.dumps({"id": doc.identity, "channel": doc.channel, "text": doc.text,
                            "timestamp": doc.timestamp})
        decider.process(raw, doc.channel.encode(), [], Source("raw", 0, n))
        if (n + 1) % commit_every == 0 or n + 1 == total:
            decider.drain_changelog(Checkpoint(n + 1))
            decider.commit(Checkpoint(n + 1, decider.changelog_next))
        if (n + 1) % per_hour == 0:
            samples.append(_sample(decider, path, process, (n + 1) // per_hour, n + 1,
                                   time.perf_counter() - started))
            if progress:
                s = samples[-1]
                print(f"hour {s.hour:4d}: window {s.window_documents:7d} docs "
                      f"state {s.data_bytes / 1e6:7.1f} MB (+LOG "
                      f"{(s.state_bytes - s.data_bytes) / 1e6:.2f}) "
                      f"rss {s.rss_bytes / 1e6:7.1f} MB", flush=True)
    final_window = decider.detector.window_documents()
    decider.close()
    reopened = PartitionDecider(0, path, config, fmt, TOPICS)  # as after a restart
    restored = reopened.restored
    reopened.close()
    return SoakResult(samples, restored, final_window,
                      {"hours": hours, "per_hour": per_hour, "target_bytes": target_bytes,
                       "commit_every": commit_every, "threshold": threshold,
                       "window_hours": window_hours, "seed": seed, "scopes": 8})


def _sample(decider: PartitionDecider, path: Path, process: psutil.Process, hour: int,
            items: int, seconds: float) -> Sample:
    windows = list(decider.detector.windows())
    state_bytes, data_bytes, state_files = _dir_stats(path)
    gc.collect()
    return Sample(
        hour=hour, items=items,
        window_documents=sum(w.document_count for w in windows),
        window_hours=max((w.hours_span() for w in windows), default=0),
        remembered=sum(len(w.decisions) for w in windows),
        index_bytes=sum(int(getattr(w.index, "nbytes", 0)) for w in windows),
        state_bytes=state_bytes, data_bytes=data_bytes, state_files=state_files,
        rss_bytes=int(process.memory_info().rss), seconds=round(seconds, 2))


def table(result: SoakResult, every: int = 12) -> str:
    rows = ["| event hour | items | window docs | window hours | remembered ids | index MB "
            "| state data MB | RocksDB LOG MB | state files | RSS MB |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in result.samples:
        if s.hour % every and s.hour != result.samples[-1].hour and s.hour != 1:
            continue
        rows.append(f"| {s.hour} | {s.items:,} | {s.window_documents:,} | {s.window_hours} | "
                    f"{s.remembered:,} | {s.index_bytes / 1e6:.1f} | {s.data_bytes / 1e6:.1f} "
                    f"| {(s.state_bytes - s.data_bytes) / 1e6:.2f} | {s.state_files} "
                    f"| {s.rss_bytes / 1e6:.0f} |")
    return "\n".join(rows)


def plot(result: SoakResult, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = [s.hour for s in result.samples]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot(hours, [s.rss_bytes / 1e6 for s in result.samples], label="process RSS")
    top.plot(hours, [s.data_bytes / 1e6 for s in result.samples], label="RocksDB state data")
    top.plot(hours, [(s.state_bytes - s.data_bytes) / 1e6 for s in result.samples],
             label="RocksDB info LOG", linestyle="--")
    top.plot(hours, [s.index_bytes / 1e6 for s in result.samples], label="window index")
    top.set_ylabel("MB")
    top.legend(loc="upper left")
    top.grid(alpha=0.3)
    bottom.plot(hours, [s.window_documents for s in result.samples], color="tab:green",
                label="documents in the window")
    bottom.set_ylabel("documents")
    bottom.set_xlabel("event time (hours)")
    window = result.config["window_hours"] + 1
    for ax in (top, bottom):
        ax.axvline(window, color="grey", linestyle=":", linewidth=1)
    bottom.legend(loc="lower right")
    bottom.grid(alpha=0.3)
    c = result.config
    fig.suptitle(f"Soak: {c['per_hour']:,} items/h (~{c['target_bytes']:,} B), "
                 f"{c['scopes']} scopes, window {c['window_hours']}+1 h, "
                 f"commit every {c['commit_every']}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=int, default=96)
    ap.add_argument("--per-hour", type=int, default=1000)
    ap.add_argument("--target-bytes", type=int, default=1500)
    ap.add_argument("--commit-every", type=int, default=500)
    ap.add_argument("--threshold", type=float, default=0.3)
    ap.add_argument("--table-every", type=int, default=12)
    ap.add_argument("--json", type=Path, default=RESULTS / "soak.json")
    ap.add_argument("--png", type=Path, default=DOCS / "soak-rss-state.png")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="where the RocksDB state lives (default: a temporary directory)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ndd-soak-", dir=args.workdir) as tmp:
        result = run_soak(Path(tmp), hours=args.hours, per_hour=args.per_hour,
                          target_bytes=args.target_bytes, commit_every=args.commit_every,
                          threshold=args.threshold, progress=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"config": result.config,
                                     "restored_documents": result.restored_documents,
                                     "final_window_documents": result.final_window_documents,
                                     "samples": [asdict(s) for s in result.samples]}, indent=1))
    plot(result, args.png)
    print(table(result, args.table_every))
    print(f"\nrestored from disk after the run: {result.restored_documents:,} documents "
          f"(live window: {result.final_window_documents:,})")
    print(f"wrote {args.json} and {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
