"""The library API's ``Filter.decide_many`` against ``ndd-stream dedup``'s loop, one process.

    python -m bench.api_speed /tmp/w/reuters.jsonl --rounds 5 --loop-rounds 15 --out api-speed

Both decide the same lines (read into memory once), at the defaults a user runs but
``scope=global``: ``dedup`` as ``run_dedup`` with a sink that keeps nothing (no output
file: what is left is its core loop, parse + decide + the record it writes), the API as
``for d in Filter(scope="global").decide_many(lines)``, each with the engine thread where two
cores are usable (as the CLI runs a regular file, and as decide_many runs a list). Before
timing, both decide every
line and their records are compared field by field.

Two measurements, runs alternating (dedup, api, api, dedup, ...) so a drift of the shared
machine falls on both, each run's wall clock and CPU time (``time.process_time``) kept:

* **whole**: a fresh window per run, the whole day decided. The detector is most of
  the time, and on a machine shared with other work its run-to-run spread is larger
  than the difference sought.
* **loop**: the same two loops with the detector replaced by a replay of its decisions
  (the recorded decision and state record per item, handed out in order; the store
  receives the record as it does from the detector). What is timed is each path's own
  cost: parsing, and the API's decision objects and window log, or dedup's summary and
  record. ``implied`` is the whole-run ratio this gives: (detector + API loop) /
  (detector + dedup loop), the detector's time per item taken from the whole runs'
  minimum less dedup's loop minimum.

Medians and minima are given (the fastest run is the one least disturbed by the machine's
other work).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ndd_stream import Filter, api
from ndd_stream import dedup as dedup_module
from ndd_stream.core.detector import Begun, Detector, DetectorConfig, Signed
from ndd_stream.core.document import Decision, Document
from ndd_stream.core.kernels import available_cores
from ndd_stream.core.store import NullStore, StateStore, StoredDocument
from ndd_stream.dedup import run_dedup
from ndd_stream.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results"
Timing = tuple[float, float]  # wall s, CPU s


class _NullSink:
    def write(self, data: bytes, /) -> int:
        return len(data)


class _KeepSink:
    def __init__(self) -> None:
        self.records: list[bytes] = []

    def write(self, data: bytes, /) -> int:
        self.records.append(data)
        return len(data)


class _Recorder(NullStore):
    """Keeps what the detector stores (a NullStore's subclass: the detector builds the
    records for it)."""

    def __init__(self) -> None:
        self.added: list[StoredDocument] = []

    def add(self, doc: StoredDocument) -> None:
        self.added.append(doc)


def _record_decisions(lines: list[bytes], scope: str) -> list[tuple[Decision, StoredDocument]]:
    """What the detector returns and stores for each valid line, in order."""
    settings = Settings(scope=scope)
    store = _Recorder()
    detector = Detector(settings.detector_config(), store)
    fmt = settings.item_format()
    decided = []
    for number, raw in enumerate(lines, start=1):
        doc = dedup_module.parse_item(raw.rstrip(b"\r\n"), fmt, f"line:{number}")
        if isinstance(doc, Document):
            decided.append(detector.decide(doc))
    assert len(store.added) == len(decided), "a replayed identity: records do not line up"
    return list(zip(decided, store.added, strict=True))


def _replaying(recorded: list[tuple[Decision, StoredDocument]]) -> type[Any]:
    class Replay:
        """A detector that hands out the recorded decisions in order."""

        def __init__(self, config: DetectorConfig | None = None,
                     store: StateStore | None = None, lookup_thread: bool = False) -> None:
            self.store = store if store is not None else NullStore()
            self.lookup_thread = lookup_thread
            self._next: Iterator[tuple[Decision, StoredDocument]] = iter(recorded)

        def decide(self, doc: Document) -> Decision:
            decision, stored = next(self._next)
            self.store.add(stored)
            return decision

        # the three steps the loops call with the engine thread: nothing to overlap here
        def sign(self, doc: Document) -> Signed:
            return Signed(doc, "", None, None)

        def begin(self, item: Signed) -> Begun:
            return Begun(item, None, 0)  # type: ignore[arg-type]

        def finish(self, begun: Begun) -> Decision:
            return self.decide(begun.item.doc)

    return Replay


def run_dedup_once(lines: list[bytes], scope: str, sink: Any = None) -> Timing:
    settings = Settings(scope=scope)
    config, fmt = settings.detector_config(), settings.item_format()
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    # as the CLI runs a regular file: with the engine thread where two cores are usable
    # (decide_many does the same for a list)
    run_dedup(lines, sink if sink is not None else _NullSink(), config, fmt,
              lookup_thread=available_cores() >= 2)
    return time.perf_counter() - wall, time.process_time() - cpu


def run_api_once(lines: list[bytes], scope: str,
                 keep: list[dict[str, Any]] | None = None) -> Timing:
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    decisions = Filter(scope=scope).decide_many(lines, on_invalid="return")
    if keep is None:
        for _ in decisions:
            pass
    else:
        keep.extend(d.as_dict() for d in decisions)
    return time.perf_counter() - wall, time.process_time() - cpu


def check_equal(lines: list[bytes], scope: str) -> int:
    """Both paths decide every line alike (every field); returns the records compared."""
    from ndd_stream.jsonio import loads

    sink = _KeepSink()
    run_dedup_once(lines, scope, sink)
    mine: list[dict[str, Any]] = []
    run_api_once(lines, scope, mine)
    theirs = [loads(r) for r in sink.records]
    if theirs != mine:
        raise SystemExit("the API and dedup decided differently")
    return len(mine)


def _alternate(rounds: int, runs: dict[str, Callable[[], Timing]], label: str,
               n: int) -> tuple[dict[str, list[Timing]], list[float]]:
    timings: dict[str, list[Timing]] = {name: [] for name in runs}
    load_avg: list[float] = []
    names = list(runs)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            wall, cpu = runs[name]()
            timings[name].append((wall, cpu))
            load_avg.append(round(os.getloadavg()[0], 2))
            print(f"{label} round {r + 1} {name:5s} wall {wall:6.3f} s  cpu {cpu:6.3f} s  "
                  f"{n / wall:8.0f} items/s  load {load_avg[-1]}", flush=True)
    return timings, load_avg


def _summary(timings: dict[str, list[Timing]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": timings}
    for stat, fn in (("median", statistics.median), ("min", min)):
        for i, clock in enumerate(("wall", "cpu")):
            values = {k: fn(t[i] for t in v) for k, v in timings.items()}
            out[f"{stat}_{clock}_s"] = values
            out[f"api_over_dedup_{stat}_{clock}"] = values["api"] / values["dedup"]
    return out


def machine() -> dict[str, Any]:
    """bench.shards' description of the machine, with the load average at the start."""
    from bench.shards import machine as described

    return {**described(), "load_before": [round(x, 2) for x in os.getloadavg()]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("items", type=Path, help="JSONL items (bench.peer.write_items)")
    ap.add_argument("--rounds", type=int, default=3, help="whole runs of each, alternating")
    ap.add_argument("--loop-rounds", type=int, default=15,
                    help="runs of each loop with the detector replayed")
    ap.add_argument("--scope", default="global")
    ap.add_argument("--out", default=None, help="bench/results/OUT.json and OUT.md")
    args = ap.parse_args(argv)
    with args.items.open("rb") as f:
        lines = list(f)
    n = len(lines)
    result: dict[str, Any] = {"machine": machine(), "items": n, "scope": args.scope,
                              "rounds": args.rounds, "loop_rounds": args.loop_rounds,
                              "decisions_compared": check_equal(lines, args.scope)}
    whole, whole_load = _alternate(args.rounds, {
        "dedup": lambda: run_dedup_once(lines, args.scope),
        "api": lambda: run_api_once(lines, args.scope)}, "whole", n)
    result["whole"] = {**_summary(whole), "load_avg": whole_load}

    replay = _replaying(_record_decisions(lines, args.scope))
    saved = dedup_module.Detector, api.Detector
    dedup_module.Detector = replay  # type: ignore[misc]
    api.Detector = replay  # type: ignore[misc]
    try:
        loop, loop_load = _alternate(args.loop_rounds, {
            "dedup": lambda: run_dedup_once(lines, args.scope),
            "api": lambda: run_api_once(lines, args.scope)}, "loop", n)
    finally:
        dedup_module.Detector, api.Detector = saved  # type: ignore[misc]
    result["loop"] = {**_summary(loop), "load_avg": loop_load}
    detector_s = result["whole"]["min_cpu_s"]["dedup"] - result["loop"]["min_cpu_s"]["dedup"]
    result["detector_cpu_s"] = detector_s
    result["loop_us_per_item"] = {k: v * 1e6 / n for k, v in
                                  result["loop"]["min_cpu_s"].items()}
    result["implied_api_over_dedup_cpu"] = (
        (detector_s + result["loop"]["min_cpu_s"]["api"])
        / (detector_s + result["loop"]["min_cpu_s"]["dedup"]))
    print(json.dumps({"whole_cpu_median": result["whole"]["api_over_dedup_median_cpu"],
                      "whole_cpu_min": result["whole"]["api_over_dedup_min_cpu"],
                      "loop_us_per_item": result["loop_us_per_item"],
                      "implied": result["implied_api_over_dedup_cpu"]}))
    if args.out:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=1) + "\n")
        (RESULTS / f"{args.out}.md").write_text(_markdown(result, args.items.name))
    return 0


def _table(part: dict[str, Any]) -> str:
    rows = "\n".join(
        f"| {k} | {part['median_wall_s'][k]:.3f} | {part['median_cpu_s'][k]:.3f} | "
        f"{part['min_wall_s'][k]:.3f} | {part['min_cpu_s'][k]:.3f} |" for k in ("dedup", "api"))
    return ("| path | median wall s | median CPU s | min wall s | min CPU s |\n"
            "| --- | ---: | ---: | ---: | ---: |\n" + rows + "\n| API / dedup | "
            + " | ".join(f"{part[f'api_over_dedup_{s}_{c}']:.3f}" for s in ("median", "min")
                         for c in ("wall", "cpu")) + " |\n")


def _markdown(r: dict[str, Any], name: str) -> str:
    m = r["machine"]
    us = r["loop_us_per_item"]
    return (
        "# Filter.decide_many against dedup's loop\n\n"
        f"{m['cpu']}, {m['usable_cores']} usable cores shared with other work, Python "
        f"{m['python']}, kernels {m['kernels']}; load average before {m['load_before']}.\n"
        f"`python -m bench.api_speed {name} --rounds {r['rounds']} --loop-rounds "
        f"{r['loop_rounds']} --scope {r['scope']}`: {r['items']:,} lines in memory, runs "
        f"alternating; {r['decisions_compared']:,} records compared equal field by field "
        "first. Method: the module's docstring.\n\n"
        f"## Whole runs (a fresh window each, {r['rounds']} of each)\n\n"
        f"{_table(r['whole'])}\nLoad average (1 min) after each run: "
        f"{r['whole']['load_avg']}.\n\n"
        f"## The loops alone (detector replayed, {r['loop_rounds']} of each)\n\n"
        f"{_table(r['loop'])}\nPer item (min CPU): dedup {us['dedup']:.2f} µs, API "
        f"{us['api']:.2f} µs. The detector: {r['detector_cpu_s']:.2f} s CPU (whole-run minimum "
        f"less the loop's). Implied whole-run ratio, API / dedup: "
        f"{r['implied_api_over_dedup_cpu']:.3f}.\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
