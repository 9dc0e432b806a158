"""Broker failover under exactly-once: Reuters in one day on a three-node Apache Kafka.

    python -m bench.failover [--fault random leader coordinator rolling] [--faults 4]
                             [--runs 5] [--down-s 6] [--items N] [--no-baseline]

A KRaft cluster of three nodes on loopback (``ndd_stream/kafka/apache_cluster.py``:
replication 3, ``min.insync.replicas=2``), topics from ``topics apply
--replication-factor 3``; the Reuters-21578 items squeezed into one day, keyed by channel,
produced at once; two workers with ``NDD_SCOPE=global`` under exactly-once catch up while
brokers fail:

* ``random``: ``--faults`` times, kill -9 a node chosen at random, start it again
  ``--down-s`` seconds later;
* ``leader``: the same, always the node that leads most raw, scoped and output partitions;
* ``coordinator``: the same, always the node that coordinates the workers' group (and the
  transactions whose ids hash to its partitions);
* ``rolling``: once, halfway: each node in turn stopped (SIGTERM) and started again,
  the next one once every partition is back in sync;
* ``long``: once, halfway: a random node killed and kept down for twice the workers'
  ``NDD_BROKER_TIMEOUT_S`` (20 s here), then started again.

A worker that exits on its own is started again, as an orchestrator would, and counted.
Per run: lost (raw records with no output), differing from ``ndd-stream dedup
--event-order``, repeated (copies beyond the first for a read_committed reader), workers
that exited by themselves, and the time; ``--no-baseline`` skips the same run without
faults that gives the time ratio. Results are appended to bench/results/failover.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.corpora import REUTERS, reuters_available
from bench.order import RESULTS, TESTS, reuters_items, start_worker, want_event_order

FAULTS = ("random", "leader", "coordinator", "rolling", "long")
LONG_TIMEOUT_S = 20.0
"""``long``: the workers' NDD_BROKER_TIMEOUT_S, and a node stays down for twice that."""


class Workers:
    """The run's workers; one that exited by itself is started again and counted."""

    def __init__(self, settings: Any, work: Path, count: int) -> None:
        self.settings, self.work = settings, work
        work.mkdir(parents=True, exist_ok=True)
        self.generation = [0] * count
        self.exits: list[int | None] = []
        self.procs = [self._start(k) for k in range(count)]

    def _start(self, k: int) -> Any:
        s = self.settings.model_copy(update={"data_dir": self.work / f"w{k}"})
        return start_worker(s, self.work / f"w{k}-{self.generation[k]}.log", sys.executable)

    def supervise(self) -> bool:
        """Start again those that exited (always True: a wait goes on)."""
        for k, proc in enumerate(self.procs):
            if not proc.alive():
                self.exits.append(proc.proc.returncode if proc.proc else None)
                self.generation[k] += 1
                self.procs[k] = self._start(k)
        return True

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()


def _victim(cluster: Any, settings: Any, fault: str, rnd: random.Random) -> int:
    if fault == "coordinator":
        return int(cluster.group_coordinator(settings.app_id))
    if fault == "leader":
        from ndd_stream.worker.app import topic_name

        meta = cluster.admin().list_topics(timeout=10.0)
        wanted = {*settings.raw_topics, topic_name(settings, "scoped"),
                  settings.unique_topic, settings.duplicate_topic}
        counts: dict[int, int] = {}
        for name in wanted & set(meta.topics):
            for p in meta.topics[name].partitions.values():
                counts[p.leader] = counts.get(p.leader, 0) + 1
        return max((n for n in counts if n > 0), key=lambda n: counts[n])
    return rnd.randrange(1, len(cluster.nodes) + 1)


def _kill_and_return(cluster: Any, node: int, down_s: float,
                     keep: Callable[[], bool]) -> None:
    cluster.node(node).kill9()
    deadline = time.monotonic() + down_s
    while time.monotonic() < deadline:
        keep()
        time.sleep(0.2)
    cluster.node(node).start()


def _rolling(cluster: Any, keep: Callable[[], bool]) -> None:
    for node in cluster.nodes:
        node.halt()
        node.start()
        deadline = time.monotonic() + 120
        while not cluster.in_sync() and time.monotonic() < deadline:
            keep()
            time.sleep(0.5)


def run(cluster: Any, work: Path, lines: list[bytes], fault: str | None, faults: int,
        down_s: float, seed: int) -> dict[str, Any]:
    """One run (``fault`` None: no faults, the baseline)."""
    from harness.kafka import Reader, worker_settings
    from harness.scenarios import Feeder

    from ndd_stream.kafka.topics import apply, load_for

    suffix = f"failover-{fault or 'none'}-{time.time_ns() // 1_000_000}"
    knobs = {"broker_timeout_s": LONG_TIMEOUT_S} if fault == "long" else {}
    settings = worker_settings(cluster.bootstrap, suffix, work / suffix, scope="global",
                               guarantee="exactly-once", scope_order="event-time",
                               order_stall_s=60.0, **knobs)
    report = apply(settings, load_for(settings), replication_factor=3)
    assert not report.errors, report.errors
    positions = Feeder(settings, lines, rate=50_000).start().join(timeout=600)
    rnd = random.Random(seed)
    started = time.monotonic()
    workers = Workers(settings, work / suffix, 2)
    events: list[str] = []
    with Reader.outputs(settings) as reader:
        steps = 1 if fault in ("rolling", "long") else (faults if fault else 0)
        for k in range(steps):
            reader.wait_count((k + 1) * len(lines) // (steps + 1), timeout=900,
                              alive=workers.supervise)
            time.sleep(rnd.uniform(0.0, 0.5))
            if fault == "rolling":
                _rolling(cluster, workers.supervise)
                events.append("rolling")
            else:
                assert fault is not None
                node = _victim(cluster, settings, fault, rnd)
                down = 2 * LONG_TIMEOUT_S if fault == "long" else down_s
                _kill_and_return(cluster, node, down, workers.supervise)
                events.append(f"kill -9 node {node}, down {down:.0f}s")
        done_all = reader.wait_for(positions, timeout=1800, alive=workers.supervise)
        done = time.monotonic()
        reader.read(timeout=5.0, idle=3.0)
        records = list(reader.records)
    workers.stop()
    want = want_event_order(settings, lines)
    by_source: dict[Any, list[Any]] = {}
    for r in records:
        by_source.setdefault(r.source, []).append(r)
    differ = [c[0].identity for c in by_source.values() if c[0].reason is None
              and (c[0].status, c[0].duplicate_of) != want.get(c[0].identity or "")]
    return {"fault": fault or "none", "events": events, "items": len(lines),
            "finished": done_all, "lost": len(set(positions) - set(by_source)),
            "differ": len(differ), "differ_ids": differ[:5],
            "repeated": len(records) - len(by_source),
            "worker_exits": len(workers.exits), "exit_codes": workers.exits,
            "seconds": round(done - started, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reuters", type=Path, default=REUTERS)
    ap.add_argument("--items", type=int, default=None, help="the first N items only")
    ap.add_argument("--fault", nargs="+", default=list(FAULTS), choices=FAULTS)
    ap.add_argument("--faults", type=int, default=4, help="kills per run")
    ap.add_argument("--runs", type=int, default=1, help="runs per fault kind")
    ap.add_argument("--down-s", type=float, default=6.0)
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--seed", type=int, default=20261128)
    ap.add_argument("--json", type=Path, default=RESULTS / "failover.json")
    ap.add_argument("--work", type=Path, default=None,
                    help="keep the workers' logs and state here (default: a temporary folder)")
    args = ap.parse_args(argv)
    if not reuters_available(args.reuters):
        print(f"Reuters-21578 not found at {args.reuters}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(TESTS))  # the harness lives with the tests (tests/harness/)
    from ndd_stream.kafka.apache import fetch
    from ndd_stream.kafka.apache_cluster import KafkaCluster

    fetch()
    lines = reuters_items(args.reuters, True, args.items)
    plan: list[str | None] = [] if args.no_baseline else [None]
    plan += [f for f in args.fault for _ in range(args.runs)]
    results = []
    with tempfile.TemporaryDirectory(prefix="ndd-failover-") as tmp, \
            KafkaCluster(log_dir=Path(args.work or tmp) / "cluster") as cluster:
        tmp = str(args.work or tmp)
        for i, fault in enumerate(plan):
            res = run(cluster, Path(tmp), lines, fault, args.faults, args.down_s,
                      args.seed + i)
            res.update(machine=f"{platform.machine()} {platform.processor() or ''}".strip(),
                       date=time.strftime("%F %T"), brokers=3)
            print(json.dumps(res), flush=True)
            results.append(res)
    base = next((r["seconds"] for r in results if r["fault"] == "none"), None)
    for r in results:
        if base:
            r["ratio_to_no_faults"] = round(r["seconds"] / base, 2)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    runs = json.loads(args.json.read_text()) if args.json.exists() else []
    args.json.write_text(json.dumps(runs + results, indent=1))
    ok = all(r["finished"] and r["lost"] == r["differ"] == r["repeated"] == 0
             and r["worker_exits"] == 0 for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
