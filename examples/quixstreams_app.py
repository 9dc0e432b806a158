"""ndd-stream's exact near-duplicate filter in a quix-streams application: one apply step.

    pip install ndd-stream quixstreams
    python examples/quixstreams_app.py --broker 127.0.0.1:9092

reads raw items (JSON bytes) from ``news.raw``, decides each one with ``Filter.decide``
in an ``apply`` step, and writes its decision record (the fields ``ndd-stream dedup``
writes) to ``news.unique``, ``news.duplicate`` or ``news.dlq``. An item without an event
time gets its Kafka record's, as ndd-stream's worker does.

One ``Filter`` holds one window and decides in the order it is given items: run one
consumer, or key the raw topic by scope (``sdf.group_by``) so that each scope is decided
by one process, as ndd-stream's worker keys its scoped topic.
"""

from __future__ import annotations

import argparse
from typing import Any

from quixstreams import Application
from quixstreams.dataframe import StreamingDataFrame

from ndd_stream import Filter


def decisions(sdf: StreamingDataFrame, decider: Filter) -> StreamingDataFrame:
    """``sdf`` of raw items (bytes) -> their decision records."""

    def decide(value: bytes, key: Any, timestamp: int, headers: Any) -> dict[str, Any]:
        return decider.decide(value, default_timestamp=timestamp / 1000,
                              on_invalid="return").as_dict()

    return sdf.apply(decide, metadata=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", default="127.0.0.1:9092")
    ap.add_argument("--threshold", type=float, default=0.3)
    ap.add_argument("--scope", default="channel")
    args = ap.parse_args(argv)
    app = Application(broker_address=args.broker, consumer_group="ndd-quix-example",
                      auto_offset_reset="earliest")
    raw = app.topic("news.raw", value_deserializer="bytes")
    out = {name: app.topic(f"news.{name}", value_serializer="json")
           for name in ("unique", "duplicate", "dlq")}
    sdf = decisions(app.dataframe(raw), Filter(threshold=args.threshold, scope=args.scope))
    sdf.filter(lambda r: r["status"] == "invalid").to_topic(out["dlq"])
    sdf.filter(lambda r: r["status"] == "unique" or bool(r.get("supersedes"))
               ).to_topic(out["unique"])
    sdf.filter(lambda r: r["status"] in ("near_duplicate", "exact_duplicate")
               and not r.get("supersedes")).to_topic(out["duplicate"])
    app.run()


if __name__ == "__main__":
    main()
