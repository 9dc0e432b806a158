"""The worker's decider without a broker: its own cost per item against its core's.

    python -m bench.decider_path [--rounds 3]

Why: the service is bound by its event loop's thread, and what that thread does per item
is the core's decision (``Detector.decide``) plus the decider's own work around it. That
own work is measured here without a broker, the fetch or the commits, so it does not move
with the broker's load as ``bench.order`` does. The Reuters day (channel scopes,
``bench.peer.write_items``) goes, one record at a time, through
``PartitionDecider.process`` (headers read, the item parsed, the copy check, the decision,
the state stored, the routed and audit records built) and the per-item metrics the pool
keeps (``ndd_decision_seconds``, ``ndd_busy_seconds_total``, ``ndd_items_total``), with a
piece handed over and its RocksDB batch written every 1,024 decisions, as under
exactly-once. Reports, per item (median over the rounds): the whole path, the core's
decision alone (timed inside the same run) and the rest (the decider's own work, parsing
included), and the parsing alone.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.corpora import reuters_available
from bench.peer import write_items
from ndd_stream.core.detector import Detector
from ndd_stream.core.items import parse_item
from ndd_stream.settings import Settings
from ndd_stream.state.rocks import Checkpoint
from ndd_stream.worker.deciding import PartitionDecider
from ndd_stream.worker.metrics import WorkerMetrics, count_outcome
from ndd_stream.worker.pool import TRANSACTION_ITEMS
from ndd_stream.worker.records import Source
from ndd_stream.worker.startup import output_topics

PIECE = TRANSACTION_ITEMS  # decisions a piece under exactly-once


class _TimedDetector(Detector):
    """A detector that adds up the time of its decisions."""

    spent = 0.0

    def decide(self, doc: Any) -> Any:
        started = time.perf_counter()
        try:
            return super().decide(doc)
        finally:
            self.spent += time.perf_counter() - started


class _Decider(PartitionDecider):
    def _make_detector(self) -> Detector:
        return _TimedDetector(self.config, store=self.store)


def one_round(lines: list[bytes], settings: Settings) -> dict[str, float]:
    """Seconds for the whole path, the core's decisions within it, and parsing alone."""
    with tempfile.TemporaryDirectory() as tmp:
        decider = _Decider(0, Path(tmp) / "p0", settings.detector_config(),
                           settings.item_format(), output_topics(settings))
        metrics = WorkerMetrics()
        busy = metrics.busy.labels("0")
        started = time.perf_counter()
        for n, raw in enumerate(lines):
            # the router's ndd-source-* headers on the scoped record, as the worker reads it
            headers = Source("raw", n % 8, n, 1_772_323_200_000 + n).headers()
            scoped = Source("scoped", 0, n)
            took = time.perf_counter()
            outcome = decider.process(raw, b"key", headers, scoped)
            took = time.perf_counter() - took
            metrics.latency.observe(took)
            busy.inc(took)
            count_outcome(metrics, 0, outcome, scoped)
            if (n + 1) % PIECE == 0 or n + 1 == len(lines):
                checkpoint = Checkpoint(next=n + 1)
                _, handed = decider.hand_over(checkpoint)
                decider.commit(checkpoint, handed)
        whole = time.perf_counter() - started
        core = decider.detector.spent
        decider.close()
    fmt = settings.item_format()
    started = time.perf_counter()
    for n, raw in enumerate(lines):
        parse_item(raw, fmt, position=f"scoped[0]@{n}")
    return {"whole": whole, "core": core, "parse": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    if not reuters_available():
        print("Reuters-21578 not found (../shared/data)")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "day.jsonl"
        write_items(path, "channel")
        lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    settings = Settings()
    rounds = [one_round(lines, settings) for _ in range(args.rounds)]

    def per_item(key: str) -> float:
        return round(1e6 * statistics.median(r[key] for r in rounds) / len(lines), 1)

    whole, core = per_item("whole"), per_item("core")
    print(json.dumps({
        "items": len(lines), "rounds": args.rounds, "whole_us": whole, "core_us": core,
        "own_us": round(whole - core, 1), "parse_us": per_item("parse"),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
