"""Long crash and rebalance loops against a real broker (Apache Kafka, or Tansu: --broker).

    python -m bench.crash_loop                               # 60k items, 30 kills
    python -m bench.crash_loop --items 200000 --kills 100 --partitions 8
    python -m bench.crash_loop --scenario rebalance --items 40000 --cycles 10
    python -m bench.crash_loop --workers 2 --kills 8 --items 1500 --rate 25   # a kill storm

The same scenarios as tests/test_reliability_crash.py, at any size: items stream into the
raw topic while a worker is killed with SIGKILL at random moments and restarted (or a
second worker joins and leaves), then every output topic is read and checked: nothing
lost, every redelivered copy with the same decision, decisions equal to
``ndd-stream dedup``. Prints the figures and appends them to
``bench/results/crash_loop.json``. Exit code 1 if a guarantee failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
TESTS = Path(__file__).parent.parent / "tests"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=("kill", "rebalance"), default="kill")
    ap.add_argument("--items", type=int, default=60_000)
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--cycles", type=int, default=6, help="join/leave cycles (rebalance)")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rate", type=float, default=1500.0, help="items/s fed to the raw topic")
    ap.add_argument("--workers", type=int, default=1,
                    help="kill: workers of one group, each kill picks one at random")
    ap.add_argument("--broker", choices=("kafka", "tansu"), default="kafka")
    ap.add_argument("--seed", type=int, default=20260301)
    ap.add_argument("--timeout", type=float, default=7200.0)
    ap.add_argument("--json", type=Path, default=RESULTS / "crash_loop.json")
    ap.add_argument("--guarantee", choices=("at-least-once", "exactly-once"),
                    default="at-least-once", help="NDD_GUARANTEE (exactly-once: --broker kafka)")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(TESTS))  # the scenarios live with the tests (tests/harness/)
    os.environ["NDD_TEST_BROKER"] = args.broker  # the harness's session timeout follows it
    from harness import brokers
    from harness.kafka import worker_settings
    from harness.scenarios import crash_scenario, rebalance_scenario

    with tempfile.TemporaryDirectory(prefix="ndd-crash-loop-") as tmp, \
            brokers.start(args.broker, Path(tmp) / "broker") as broker:
        work = Path(tmp)
        suffix = f"loop-{int(time.time())}"
        # the worker's own session on Kafka; Tansu holds a join for half of it
        session = 6.0 if args.broker == "tansu" else 30.0
        first = worker_settings(broker.bootstrap, suffix, work / "data-1",
                                partitions=args.partitions, guarantee=args.guarantee,
                                session_timeout_s=session)
        if args.scenario == "kill":
            report, problems = crash_scenario(first, work, items=args.items, kills=args.kills,
                                              seed=args.seed, rate=args.rate,
                                              timeout=args.timeout, workers=args.workers)
        else:
            second = worker_settings(broker.bootstrap, suffix, work / "data-2",
                                     partitions=args.partitions, guarantee=args.guarantee,
                                     session_timeout_s=session)
            report, problems = rebalance_scenario(first, second, work, items=args.items,
                                                  cycles=args.cycles, seed=args.seed,
                                                  rate=args.rate, timeout=args.timeout)
    print(report.line(), *report.notes)
    for problem in problems:
        print("PROBLEM:", problem[:2000])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    runs = json.loads(args.json.read_text()) if args.json.exists() else []
    runs.append({**asdict(report), "partitions": args.partitions, "seed": args.seed,
                 "broker": brokers.label(args.broker), "guarantee": args.guarantee,
                 "problems": len(problems)})
    args.json.write_text(json.dumps(runs, indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
