"""End-to-end throughput through the broker: raw topic in, output topics out.

    python -m bench.e2e [--warmup 50000] [--measure 5000] [--workers 1 2] [--threshold 0.8]
                        [--scope global --shards 1 2 --out e2e-shards]
                        [--broker kafka --guarantee at-least-once exactly-once --repeat 3]
                        [--code BASE_DIR --repeat 3]

For each worker count: start the embedded broker, create the topics, pre-load
``warmup + measure`` ~5 KB items (bench.workload, event time spaced so that the window
holds ``warmup`` documents), start the workers, and time the last ``measure`` items
from the moment the outputs pass ``warmup`` to the moment they reach the total. The
same items are also decided by the core alone (``bench.core_alone``, each tree's own core),
so the report gives the cost of the Kafka and Faust layers. Results: bench/results/e2e.json and .md.

``--code DIR`` (a checkout of another revision, e.g. ``git archive main | tar -x -C DIR``
with the C kernels copied in) runs the workers from that tree too, alternating with this
tree within each round: a same-run baseline. Each run gives the worker's CPU per item
beyond the core's (``own_ms_per_item``: the worker's CPU ms per output from the warm-up
on, less that tree's core's CPU ms per item on the same items).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.core_alone import core_rate_of
from bench.workload import NewsStream, WorkloadConfig
from ndd_stream import jsonio
from ndd_stream.kafka.topics import apply, load_for
from ndd_stream.settings import Settings

RESULTS = Path(__file__).parent / "results"
WINDOW_HOURS = 24


def make_items(total: int, window_docs: int, scope: str = "channel") -> list[bytes]:
    spacing = (WINDOW_HOURS + 1) * 3600 / max(window_docs, 1)
    stream = NewsStream(WorkloadConfig(spacing=spacing, scope=scope))
    out = []
    for doc in itertools.islice(stream, total):
        out.append(jsonio.dumps({"id": doc.identity, "channel": doc.channel, "text": doc.text,
                                 "timestamp": doc.timestamp}))
    return out


def count_outputs(consumer: Consumer) -> int:
    n = 0
    while True:
        msgs = consumer.consume(num_messages=10_000, timeout=0.2)
        if not msgs:
            return n
        n += sum(1 for m in msgs if m.error() is None)


def owned(log: Path) -> list[str]:
    """What a worker's log says it owns now: "partition N" and "shard K" since its last
    rebalance."""
    mine: set[tuple[str, int]] = set()
    for line in log.read_text(errors="replace").splitlines():
        if '"event":"partition_ready"' in line.replace(" ", ""):
            kind, n = jsonio.loads(line)["message"].split()[:2]
            mine.add((kind, int(n)))
        elif '"event":"revoked"' in line.replace(" ", ""):
            mine.clear()
    return [f"{k} {n}" for k, n in sorted(mine)]


def transactions(log: Path) -> dict[str, float]:
    """Exactly-once: a worker's commits so far, the decisions per commit and the seconds a
    piece's commit took on average (its /metrics; empty at-least-once)."""
    import re
    import urllib.request

    found = re.search(r"metrics on http://[^:]+:(\d+)/metrics",
                      log.read_text(errors="replace"))
    if found is None:
        return {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{found[1]}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    values = {m[1]: float(m[2]) for m in re.finditer(
        r"^(ndd_transaction_\w+_(?:sum|count)) ([0-9.e+-]+)$", text, re.M)}
    commits = values.get("ndd_transaction_commit_seconds_count", 0.0)
    if not commits:
        return {}
    return {"pieces": commits,
            "decisions_per_commit": round(values["ndd_transaction_decisions_sum"] /
                                          values["ndd_transaction_decisions_count"], 1),
            "commit_ms": round(values["ndd_transaction_commit_seconds_sum"] / commits * 1000,
                               1)}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int, field: str = "VmHWM") -> float:
    """A process's resident memory in MB (Linux /proc): its peak so far (VmHWM), or now
    (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def settled(logs: list[Path], partitions: int, shards: int, quiet_s: float = 8.0,
            timeout_s: float = 300.0) -> float:
    """Wait until the workers own every scoped partition and shard, with no rebalance for
    ``quiet_s``; returns the seconds it took. Tansu's joins are slow, and a rebalance in the
    measured span would measure the broker's group protocol, not the workers."""
    want = {("partition", p) for p in range(partitions)}
    if shards > 1:
        want |= {("shard", k) for k in range(partitions * shards)}
    start = time.monotonic()
    last_change, last_seen = start, -1
    while time.monotonic() - start < timeout_s:
        owned: set[tuple[str, int]] = set()
        events = 0
        for log in logs:
            mine: set[tuple[str, int]] = set()
            for line in log.read_text(errors="replace").splitlines():
                if '"event":"partition_ready"' in line.replace(" ", ""):
                    kind, n = jsonio.loads(line)["message"].split()[:2]
                    mine.add((kind, int(n)))
                    events += 1
                elif '"event":"revoked"' in line.replace(" ", ""):
                    mine.clear()  # a rebalance: what it keeps is opened again or kept
                    events += 1
            owned |= mine
        now = time.monotonic()
        if events != last_seen:
            last_seen, last_change = events, now
        if want <= owned and now - last_change >= quiet_s:
            return now - start
        time.sleep(0.5)
    raise TimeoutError(f"workers did not settle in {timeout_s:.0f}s")


@contextlib.contextmanager
def _broker(kind: str, workdir: Path) -> Iterator[Any]:
    sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))  # the test harness
    from harness import brokers

    broker = brokers.start(kind, workdir / "broker")
    try:
        yield broker
    finally:
        broker.stop()


def run(workers: int, items: list[bytes], warmup: int, threshold: float, workdir: Path,
        scope: str = "channel", shards: int = 1, partitions: int = 4,
        settle: bool = False, broker_kind: str = "kafka",
        guarantee: str = "at-least-once", code: Path | None = None) -> dict[str, Any]:
    with _broker(broker_kind, workdir) as broker:
        # Tansu holds every group join for half the session: a short one there; the
        # worker's own default on Apache Kafka
        session = 6.0 if broker_kind == "tansu" else Settings().session_timeout_s
        settings = Settings(brokers=[broker.bootstrap], partitions=partitions,
                            threshold=threshold, data_dir=workdir / "state",
                            session_timeout_s=session, web_port=0, decisions_topic="",
                            scope=scope, shards=shards, guarantee=guarantee)
        report = apply(settings, load_for(settings), timeout=30)
        assert not report.errors, report
        procs: list[subprocess.Popen[bytes]] = []
        if settle:  # workers first, items once the group is stable
            procs = start_workers(settings, workers, workdir, code)
            waited = settled([workdir / f"worker-{i}.log" for i in range(workers)],
                             partitions, shards)
            print(f"workers settled after {waited:.0f}s", flush=True)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20,
                             "batch.num.messages": 500})
        for raw in items:
            key = jsonio.loads(raw)["channel"].encode()
            while True:
                try:
                    producer.produce(settings.raw_topics[0], raw, key)
                    break
                except BufferError:
                    producer.poll(0.1)
        assert producer.flush(120) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-e2e",
                             "enable.auto.commit": False})
        outs = [settings.unique_topic, settings.duplicate_topic, settings.dlq_topic]
        meta = consumer.list_topics(timeout=10)
        consumer.assign([TopicPartition(t, p, 0) for t in outs for p in meta.topics[t].partitions])
        if not settle:
            procs = start_workers(settings, workers, workdir, code)
        total, seen = len(items), 0
        t_warm = t_end = None
        deadline = time.monotonic() + 3600
        # outputs by second, with the CPU seconds each worker and the broker have used so
        # far (stalls show, and whether a worker was busy or waiting in them) and each
        # worker's resident memory (MB) at that moment
        pids = [p.pid for p in procs] + ([broker._proc.pid] if broker._proc else [])
        started = time.monotonic()
        timeline: list[tuple[Any, ...]] = [(0.0, 0, [cpu_seconds(pid) for pid in pids])]
        try:
            while seen < total and time.monotonic() < deadline:
                seen += count_outputs(consumer)
                now = time.monotonic()
                if now - started >= timeline[-1][0] + 1.0:
                    timeline.append((round(now - started, 1), seen,
                                     [round(cpu_seconds(pid), 1) for pid in pids],
                                     [rss_mb(p.pid, "VmRSS") for p in procs]))
                if t_warm is None and seen >= warmup:
                    t_warm, warm_seen = now, seen
                if seen >= total:
                    t_end = now
            cpu = [round(cpu_seconds(p.pid), 1) for p in procs]
            rss = [rss_mb(p.pid) for p in procs]
            txn = [transactions(workdir / f"worker-{i}.log") for i in range(workers)]
            owners = [owned(workdir / f"worker-{i}.log") for i in range(workers)]
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
            consumer.close()
        assert t_warm is not None and t_end is not None, f"only {seen}/{total} outputs"
        rate = (total - warm_seen) / max(t_end - t_warm, 1e-9)
        return {"workers": workers, "shards": shards, "scope": scope, "broker": broker_kind,
                "guarantee": guarantee, "code": str(code) if code else "this tree",
                "items": total, "warmup": warmup,
                "measured": total - warm_seen, "seconds": round(t_end - t_warm, 2),
                "worker_cpu_s": cpu, "worker_peak_rss_mb": rss, "owned": owners,
                "transactions": txn,
                "timeline": timeline, "stalled_s": stalled_seconds(timeline, total),
                "measured_cpu": measured_cpu(timeline, warmup),
                "items_per_s": round(rate, 1), "per_worker": round(rate / workers, 1)}


def stalled_seconds(timeline: Sequence[Sequence[Any]], total: int) -> float:
    """Seconds of the timeline in which no output came, after the first and before 97%
    of ``total``: the workers waited (the CPU columns say whether they were busy)."""
    return round(sum(b[0] - a[0] for a, b in itertools.pairwise(timeline)
                     if b[1] == a[1] and 0 < a[1] < 0.97 * total), 1)


def measured_cpu(timeline: Sequence[Sequence[Any]], warmup: int) -> dict[str, list[float]]:
    """Per process (the workers, then the broker), from the first line of the timeline at
    ``warmup`` outputs or more to the last: the cores it used and its CPU ms per output.
    An item's cost by process says whether a configuration is faster by needing less CPU
    or only by using more of the cores (docs/BENCHMARK.md, issue 23, "Seventh round")."""
    first = next((line for line in timeline if line[1] >= warmup), None)
    last = timeline[-1]
    if first is None or last[0] <= first[0] or last[1] <= first[1]:
        return {"cores": [], "ms_per_item": []}
    seconds, items = last[0] - first[0], last[1] - first[1]
    spent = [b - a for a, b in zip(first[2], last[2], strict=True)]
    return {"cores": [round(c / seconds, 2) for c in spent],
            "ms_per_item": [round(c / items * 1000, 2) for c in spent]}


def start_workers(settings: Settings, workers: int, workdir: Path, code: Path | None = None
                  ) -> list[subprocess.Popen[bytes]]:
    """``code``: run the workers from that tree's ``ndd_stream`` (a baseline)."""
    procs = []
    env = {**os.environ, **settings.to_env()}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    for i in range(workers):
        wenv = {**env, "NDD_DATA_DIR": str(workdir / f"state-{i}")}
        log = open(workdir / f"worker-{i}.log", "wb")  # noqa: SIM115
        procs.append(subprocess.Popen([sys.executable, "-m", "ndd_stream.cli", "worker"],
                                      env=wenv, stdout=log, stderr=subprocess.STDOUT,
                                      cwd=code))
    return procs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--warmup", type=int, default=50_000)
    ap.add_argument("--measure", type=int, default=5_000)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--scope", default="channel", help="NDD_SCOPE (global: one scope)")
    ap.add_argument("--shards", type=int, nargs="+", default=[1],
                    help="NDD_SHARDS values, each run with every --workers count")
    ap.add_argument("--window", type=int, default=None,
                    help="documents the window holds (default: --warmup)")
    ap.add_argument("--out", default="e2e", help="results name under bench/results")
    ap.add_argument("--partitions", type=int, default=4, help="NDD_PARTITIONS")
    ap.add_argument("--broker", nargs="+", default=["kafka"], choices=["kafka", "tansu"],
                    help="broker(s), each run with every configuration in the same run")
    ap.add_argument("--guarantee", nargs="+", default=["at-least-once"],
                    choices=["at-least-once", "exactly-once"],
                    help="NDD_GUARANTEE values, each run with every --workers count, "
                    "alternated --repeat times (exactly-once needs --broker kafka)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of the guarantees")
    ap.add_argument("--code", type=Path, nargs="*", default=[],
                    help="baseline trees whose workers run too, alternating with this tree "
                    "within each round")
    ap.add_argument("--settle", action="store_true",
                    help="start the workers first and produce once their group is stable")
    args = ap.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    items = make_items(args.warmup + args.measure, args.window or args.warmup, args.scope)
    print(f"generated {len(items)} items in {time.perf_counter() - t0:.0f}s", flush=True)
    settings = Settings(threshold=args.threshold, scope=args.scope)
    codes: list[Path | None] = [*[c.resolve() for c in args.code], None]
    cores = {code: core_rate_of(code, settings, items, args.warmup) for code in codes}
    for code, (core, core_ms) in cores.items():
        print(f"core alone ({code or 'this tree'}): {core:.0f} items/s, {core_ms:.2f} CPU ms "
              "per item", flush=True)
    runs = []
    # the brokers and guarantees alternated within each round: a paired comparison
    for shards, n, rnd, kind, guarantee, code in itertools.product(
            args.shards, args.workers, range(args.repeat), args.broker, args.guarantee, codes):
        with tempfile.TemporaryDirectory() as tmp:
            result = run(n, items, args.warmup, args.threshold, Path(tmp), args.scope,
                         shards, args.partitions, args.settle, kind, guarantee, code)
        result["broker"] = kind
        result["round"] = rnd + 1
        core, core_ms = cores[code]
        result["core_items_per_s"] = round(core, 1)
        result["core_cpu_ms_per_item"] = round(core_ms, 3)
        result["own_ms_per_item"] = [round(ms - core_ms, 3) for ms in
                                     result["measured_cpu"]["ms_per_item"][:n]]
        result["layer_overhead"] = round(core / result["per_worker"], 2)
        print(result, flush=True)
        runs.append(result)
    out = {"machine": {"cpu": platform.processor() or platform.machine(),
                       "cores": os.cpu_count(), "python": platform.python_version()},
           "threshold": args.threshold, "item_bytes": round(sum(map(len, items)) / len(items)),
           "scope": args.scope, "partitions": args.partitions, "settle": args.settle,
           "runs": runs}
    (RESULTS / f"{args.out}.json").write_bytes(jsonio.dumps(out))
    lines = ["| round | code | broker | guarantee | shards | workers | items/s total | "
             "items/s per worker | core alone items/s | core ÷ per-worker | stalled s | "
             "CPU ms per item (workers, broker) | worker's own CPU ms per item |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['round']} | {r['code']} | {r['broker']} | {r['guarantee']} | "
              f"{r['shards']} | {r['workers']} | {r['items_per_s']} | {r['per_worker']} | "
              f"{r['core_items_per_s']} | {r['layer_overhead']} | {r['stalled_s']} | "
              f"{', '.join(map(str, r['measured_cpu']['ms_per_item']))} | "
              f"{', '.join(map(str, r['own_ms_per_item']))} |" for r in runs]
    (RESULTS / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
