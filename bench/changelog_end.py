"""How long a restore takes to read a changelog partition written in transactions to its
end, the last stable offset (exactly-once: ``BrokerReads.read_to_end``).

    python -m bench.changelog_end [--records 1000] [--runs 6]

One Apache Kafka node (``ndd_stream.kafka.apache``); ``--records`` records of 500 bytes
written in five transactions, so the partition ends with a commit marker, as every
changelog partition of an exactly-once worker does. Prints the median of ``--runs`` reads
and appends it to bench/results/changelog-end.json. Run it with another tree's
``PYTHONPATH`` for a same-machine baseline.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ndd_stream import jsonio
from ndd_stream.kafka import apache
from ndd_stream.kafka.reads import BrokerReads

RESULTS = Path(__file__).parent / "results"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=6)
    args = ap.parse_args(argv)
    apache.fetch()
    with tempfile.TemporaryDirectory() as tmp, apache.ApacheKafka(log_dir=Path(tmp)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("changelog", 1, 1)])["changelog"].result()
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "w"})
        producer.init_transactions(30)
        per = max(1, args.records // 5)
        for start in range(0, args.records, per):
            producer.begin_transaction()
            for i in range(start, min(start + per, args.records)):
                producer.produce("changelog", b"v" * 500, b"k%d" % i, partition=0)
            producer.commit_transaction(30)
        reads = BrokerReads({"bootstrap.servers": broker.bootstrap}, "bench")
        seconds = []
        try:
            for _ in range(args.runs):
                began = time.perf_counter()
                records, end = reads.read_to_end("changelog", 0, 0, 60, RuntimeError)
                seconds.append(time.perf_counter() - began)
                assert len(records) == args.records, (len(records), end)
        finally:
            reads.close()
    out = {"records": args.records, "runs": args.runs,
           "median_s": round(statistics.median(seconds), 3),
           "seconds": [round(s, 3) for s in seconds], "tree": str(Path(__file__).parents[1]),
           "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "changelog-end.json"
    previous = jsonio.loads(path.read_bytes()) if path.exists() else []
    path.write_bytes(jsonio.dumps([*previous, out]))
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
