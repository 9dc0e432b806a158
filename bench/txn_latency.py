"""What one exactly-once piece waits for: a transaction's steps, back to back.

    python -m bench.txn_latency [--records 130] [--pieces 60] [--backoff 100 10]

Starts Apache Kafka (one node), then for each ``retry.backoff.ms`` in ``--backoff`` runs
one transactional producer as a decider's partition does: ``--pieces`` transactions one
after the other, each ``--records`` outputs (~300 bytes) to an 8-partition topic and one
changelog record, then ``send_offsets_to_transaction`` with an input offset, then
``commit_transaction``. The first five pieces of each are not timed. Reported per piece:
milliseconds in ``produce`` (the client's local queue), in sending the offsets and in the
commit, and their sum. The backoffs alternate in the order given (``--rounds``).
Results: bench/results/txn-latency.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ndd_stream import jsonio
from ndd_stream.kafka.apache import KAFKA_VERSION, ApacheKafka

RESULTS = Path(__file__).parent / "results"
WARMUP = 5


def pieces(bootstrap: str, backoff_ms: int, records: int, count: int) -> dict[str, float]:
    """Milliseconds per piece in each step (means over ``count`` timed pieces)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-latency",
                         "enable.auto.commit": False})
    group = consumer.consumer_group_metadata()
    consumer.close()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                         "transactional.id": f"txn-latency-{uuid.uuid4().hex[:8]}",
                         "retry.backoff.ms": backoff_ms, "log_level": 3})
    producer.init_transactions(30)
    value = b"x" * 300
    spent = {"produce": 0.0, "offsets": 0.0, "commit": 0.0}
    for i in range(WARMUP + count):
        t0 = time.perf_counter()
        producer.begin_transaction()
        for j in range(records):
            producer.produce("out", value=value, partition=j % 8)
        producer.produce("changelog", value=value, partition=0)
        producer.poll(0)
        t1 = time.perf_counter()
        producer.send_offsets_to_transaction([TopicPartition("in", 0, (i + 1) * records)],
                                             group, 30)
        t2 = time.perf_counter()
        producer.commit_transaction(30)
        t3 = time.perf_counter()
        if i >= WARMUP:
            for step, took in (("produce", t1 - t0), ("offsets", t2 - t1),
                               ("commit", t3 - t2)):
                spent[step] += took
    producer.flush(10)
    out = {step: round(total / count * 1000, 2) for step, total in spent.items()}
    out["piece"] = round(sum(out.values()), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=130, help="outputs per piece")
    ap.add_argument("--pieces", type=int, default=60, help="timed pieces per run")
    ap.add_argument("--backoff", type=int, nargs="+", default=[100, 10],
                    help="retry.backoff.ms values, alternated")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with ApacheKafka() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for topic in ("out", "changelog", "in"):
            admin.create_topics([NewTopic(topic, 8, 1)])[topic].result(30)
        for round_no in range(1, args.rounds + 1):
            for backoff in args.backoff:
                row = {"round": round_no, "retry.backoff.ms": backoff,
                       **pieces(broker.bootstrap, backoff, args.records, args.pieces)}
                print(row, flush=True)
                rows.append(row)
    report = {"machine": f"{platform.processor() or platform.machine()}, "
                         f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
              "broker": f"Apache Kafka {KAFKA_VERSION}, one node",
              "records": args.records, "pieces": args.pieces, "rows": rows}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "txn-latency.json").write_bytes(jsonio.dumps(report) + b"\n")
    lines = [f"{report['broker']}; {report['machine']}; {args.records} outputs + 1 "
             f"changelog record a piece, {args.pieces} pieces timed a run", "",
             "| round | retry.backoff.ms | produce ms | offsets ms | commit ms | piece ms |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['round']} | {r['retry.backoff.ms']} | {r['produce']} | {r['offsets']} "
              f"| {r['commit']} | {r['piece']} |" for r in rows]
    (RESULTS / "txn-latency.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
