"""Cost of rebuilding a partition's window, per 10k documents in it.

    python -m bench.restore [--docs 10000] [--threshold 0.3]

Two ways back (docs/STATE.md): replaying the local RocksDB store after a restart, and
reading the changelog from the embedded broker when a partition moves to a worker
without local state. ~5 KB items from bench.workload, one scope, event time spread so
that all of them are inside the 24 h window.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from bench.workload import NewsStream, WorkloadConfig
from ndd_stream import jsonio
from ndd_stream.core.detector import Detector, DetectorConfig
from ndd_stream.kafka.broker import EmbeddedBroker
from ndd_stream.kafka.reads import BrokerReads
from ndd_stream.state.rocks import (
    Checkpoint,
    RocksStore,
    decode_document,
    document_key,
    encode_document,
)
from ndd_stream.worker.changelog import read_partition

RESULTS = Path(__file__).parent / "results"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--threshold", type=float, default=0.3)
    args = ap.parse_args(argv)
    n = args.docs
    spacing = 23 * 3600 / n
    docs = list(itertools.islice(NewsStream(WorkloadConfig(spacing=spacing)), n))
    config = DetectorConfig(threshold=args.threshold)
    with tempfile.TemporaryDirectory() as tmp:
        store = RocksStore(Path(tmp) / "a")
        detector = Detector(config, store=store)
        for i, doc in enumerate(docs):
            detector.decide(doc)
            if i % 500 == 0:
                store.commit(Checkpoint(i))
        store.commit(Checkpoint(n))
        disk = store.size_bytes()
        records = [(document_key(d), encode_document(d)) for d in store.load()]
        store.close()

        start = time.perf_counter()
        local = Detector(config, store=RocksStore(Path(tmp) / "a"))
        restored = local.restore()
        local_s = time.perf_counter() - start
        assert restored == n and local.window_documents() == n

        with EmbeddedBroker(log_dir=Path(tmp)) as broker:
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
            for key, value in records:
                while True:
                    try:
                        producer.produce("bench-changelog", value, key, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.1)
            assert producer.flush(60) == 0
            start = time.perf_counter()
            reads = BrokerReads({"bootstrap.servers": broker.bootstrap}, "bench-restore")
            read = read_partition(reads, "bench-changelog", 0, 0, timeout_s=600)
            reads.close()
            fetch_s = time.perf_counter() - start
            target = RocksStore(Path(tmp) / "b")
            for key, value in read.records:
                target.add(decode_document(key, value))
            target.commit(Checkpoint(changelog=read.next_offset))
            rebuilt = Detector(config, store=target)
            assert rebuilt.restore() == n
            changelog_s = time.perf_counter() - start
    per10k = 10_000 / n
    out = {"docs": n, "threshold": args.threshold, "state_disk_bytes": disk,
           "changelog_bytes": sum(len(k) + len(v) for k, v in records),
           "local_restore_s": round(local_s, 2), "changelog_fetch_s": round(fetch_s, 2),
           "changelog_restore_s": round(changelog_s, 2),
           "local_restore_s_per_10k": round(local_s * per10k, 2),
           "changelog_restore_s_per_10k": round(changelog_s * per10k, 2)}
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "restore.json"  # one entry per (docs, threshold), newest run wins
    previous = jsonio.loads(path.read_bytes()) if path.exists() else []
    runs = [r for r in (previous if isinstance(previous, list) else [previous])
            if (r["docs"], r["threshold"]) != (n, args.threshold)]
    path.write_bytes(jsonio.dumps(sorted([*runs, out], key=lambda r: (r["threshold"], r["docs"]))))
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
