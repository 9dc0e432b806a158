"""Memory of the web view's state under sustained traffic (docs/VIEW.md, "Bounded memory").

Feeds ``ViewState`` the records a worker writes for N items of ~5 KB (routed record with
headers, audit record, and a dead letter for every tenth item), at the default limits, and
reports the Python objects held (tracemalloc) at checkpoints. Bounded means: once the
rings are full, the figure stays flat however many more items come (the ratio of the last
checkpoint to the first full one is printed).

    python -m bench.view_memory                 # 120,000 items, checkpoints every 20,000
    python -m bench.view_memory --items 40000 --every 10000
"""

from __future__ import annotations

import argparse
import tracemalloc

import orjson

from bench.workload import NewsStream
from ndd_stream.core.items import ItemFormat
from ndd_stream.kafka.tail import TailRecord
from ndd_stream.view.model import Limits, ViewState


def _record(topic: str, offset: int, value: bytes, headers: dict[str, str]) -> TailRecord:
    return TailRecord(topic, 0, offset, 1_700_000_000_000 + offset, b"wire", value,
                      tuple((k, v.encode()) for k, v in headers.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--items", type=int, default=120_000)
    parser.add_argument("--every", type=int, default=20_000)
    args = parser.parse_args()
    limits = Limits()
    state = ViewState(ItemFormat(), limits)
    stream = NewsStream()
    tracemalloc.start()
    rows: list[tuple[int, float, float]] = []
    for i in range(args.items):
        doc = next(stream)
        identity = doc.identity
        headers = {"ndd-identity": identity, "ndd-status": "unique", "ndd-similarity": "0.000000",
                   "ndd-scope": "wire", "ndd-engine": "ddd-1", "ndd-source-topic": "news.raw",
                   "ndd-source-partition": "0", "ndd-source-offset": str(i)}
        item = {"id": identity, "channel": "wire", "title": doc.text[:80], "text": doc.text,
                "timestamp": doc.timestamp}
        state.ingest("unique", _record("news.unique", i, orjson.dumps(item), headers))
        audit = {"identity": identity, "status": "unique", "similarity": 0.0, "scope": "wire",
                 "channel": "wire", "time": "2024-03-12T05:00:00Z", "policy": "",
                 "replayed": False, "source": f"news.raw[0]@{i}"}
        state.ingest("decisions", _record("news.decisions", i, orjson.dumps(audit), headers))
        if i % 10 == 0:
            state.ingest("dlq", _record("news.dlq", i, b"{not json" + b"x" * 3000,
                                        {"ndd-dlq-reason": "not_json", **headers}))
        if (i + 1) % args.every == 0:
            current, peak = tracemalloc.get_traced_memory()
            rows.append((i + 1, current / 1e6, peak / 1e6))
    print(f"limits: {limits}")
    print("| items fed | held (MB) | peak (MB) |\n| ---: | ---: | ---: |")
    for n, held, top in rows:
        print(f"| {n:,} | {held:.0f} | {top:.0f} |")
    full = next((r for r in rows if r[0] >= limits.locators), rows[-1])
    print(f"last / first checkpoint with full rings ({full[0]:,} items): "
          f"{rows[-1][1] / full[1]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
