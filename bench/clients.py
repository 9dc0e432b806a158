"""What one idle worker holds: Kafka clients, broker connections, threads and memory.

    python -m bench.clients [--partitions 8 32 64] [--guarantee exactly-once] [--code DIR]

For each partition count N: start Apache Kafka, create a raw topic of N partitions and the
service's topics with ``NDD_PARTITIONS=N`` (``topics apply``), start one worker, wait until
it owns all N raw and N scoped partitions with no rebalance for a while, let it idle, and
read from /proc: its threads, librdkafka clients (one ``rdk:main`` thread each), TCP
connections to the broker and resident memory. ``--code DIR`` runs the worker from another
copy of ``ndd_stream`` (e.g. ``git archive`` of an earlier commit) for a same-run baseline.
Results: bench/results/clients.json and .md.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka.admin import AdminClient, NewTopic

from bench.e2e import _broker, settled
from ndd_stream import jsonio
from ndd_stream.kafka.topics import apply, load_for
from ndd_stream.settings import Settings

RESULTS = Path(__file__).parent / "results"
IDLE_S = 15.0


def sample(pid: int, broker_port: int) -> dict[str, Any]:
    """What process ``pid`` holds now."""
    proc = psutil.Process(pid)
    names = [Path(f"/proc/{pid}/task/{t.id}/comm").read_text().strip()
             for t in proc.threads()]
    connections = [c for c in proc.net_connections(kind="tcp")
                   if c.raddr and c.raddr.port == broker_port
                   and c.status == psutil.CONN_ESTABLISHED]
    return {"threads": len(names), "rdkafka_clients": names.count("rdk:main"),
            "rdkafka_threads": sum(1 for n in names if n.startswith("rdk:")),
            "connections": len(connections),
            "rss_mb": round(proc.memory_info().rss / 2**20, 1)}


def run(partitions: int, guarantee: str, workdir: Path, code: Path | None) -> dict[str, Any]:
    with _broker("kafka", workdir) as broker:
        raw = "bench.raw"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for fut in admin.create_topics([NewTopic(raw, partitions, 1)]).values():
            fut.result(30)
        settings = Settings(brokers=[broker.bootstrap], partitions=partitions,
                            raw_topics=[raw], data_dir=workdir / "state", web_port=0,
                            decisions_topic="", guarantee=guarantee)
        report = apply(settings, load_for(settings), timeout=30)
        assert not [e for e in report.errors if raw not in str(e)], report
        env = {**os.environ, **settings.to_env()}
        if code is not None:
            env["PYTHONPATH"] = str(code)
        log = workdir / "worker-0.log"
        with open(log, "wb") as out:
            # ``-m`` puts the working directory first on the path: the copy's own
            proc = subprocess.Popen([sys.executable, "-m", "ndd_stream.cli", "worker"],
                                    env=env, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=code)
        try:
            waited = settled([log], partitions, 1)
            time.sleep(IDLE_S)
            found = sample(proc.pid, int(broker.bootstrap.rsplit(":", 1)[1]))
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        return {"partitions": partitions, "guarantee": guarantee,
                "code": str(code) if code else "this tree", "settled_s": round(waited, 1),
                **found}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--partitions", type=int, nargs="+", default=[8, 32, 64])
    ap.add_argument("--guarantee", nargs="+", default=["exactly-once"])
    ap.add_argument("--code", type=Path, nargs="*", default=[],
                    help="other copies of ndd_stream to run the worker from, alternating")
    ap.add_argument("--out", default="clients")
    args = ap.parse_args(argv)
    codes: list[Path | None] = [*[c.resolve() for c in args.code], None]
    rows = []
    for n in args.partitions:
        for guarantee in args.guarantee:
            for code in codes:
                with tempfile.TemporaryDirectory(prefix="ndd-clients-") as tmp:
                    row = run(n, guarantee, Path(tmp), code)
                print(jsonio.dumps(row).decode(), flush=True)
                rows.append(row)
                _write(args.out, rows)  # each row as it comes: a later failure keeps it
    return 0


def _write(out: str, rows: list[dict[str, Any]]) -> None:
    RESULTS.mkdir(exist_ok=True)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    (RESULTS / f"{out}.json").write_bytes(jsonio.dumps({"machine": machine, "rows": rows}))
    lines = ["| partitions | guarantee | code | clients (librdkafka) | connections | "
             "threads | RSS MB |", "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['partitions']} | {r['guarantee']} | {r['code']} | "
              f"{r['rdkafka_clients']} | {r['connections']} | {r['threads']} | "
              f"{r['rss_mb']} |" for r in rows]
    (RESULTS / f"{out}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
