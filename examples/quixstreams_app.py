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
from functools import partial
from typing import Any

from quixstreams import Application
from quixstreams.dataframe import StreamingDataFrame
from quixstreams.models import Topic

from ndd_stream import Filter


def decisions(sdf: StreamingDataFrame, decider: Filter) -> StreamingDataFrame:
    """``sdf`` of raw items (bytes) -> their decision records."""

    def decide(value: bytes, key: Any, timestamp: int, headers: Any) -> dict[str, Any]:
        return decider.decide(value, default_timestamp=timestamp / 1000,
                              on_invalid="return").as_dict()

    return sdf.apply(decide, metadata=True)


def destination(record: dict[str, Any]) -> str:
    """Where a decision record goes: ``unique`` (what a reader keeps: unique items and,
    with ``keep="complete"``, more complete versions), ``duplicate`` or ``dlq``."""
    if record["status"] == "invalid":
        return "dlq"
    if record["status"] == "unique" or record.get("supersedes"):
        return "unique"
    return "duplicate"


def build(app: Application, raw: Topic, out: dict[str, Topic],
          decider: Filter) -> StreamingDataFrame:
    """The application's dataframe: decide each raw item, then send its record to
    ``out[destination(record)]``."""
    sdf = decisions(app.dataframe(raw), decider)
    for name, topic in out.items():
        sdf.filter(partial(_goes_to, name)).to_topic(topic)
    return sdf


def _goes_to(name: str, record: dict[str, Any]) -> bool:
    return destination(record) == name


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", default="127.0.0.1:9092")
    ap.add_argument("--threshold", type=float, default=0.3)
    ap.add_argument("--scope", default="channel")
    ap.add_argument("--prefix", default="", help="put before every topic and group name")
    args = ap.parse_args(argv)
    app = Application(broker_address=args.broker,
                      consumer_group=f"{args.prefix}ndd-quix-example",
                      auto_offset_reset="earliest")
    raw = app.topic(f"{args.prefix}news.raw", value_deserializer="bytes")
    out = {name: app.topic(f"{args.prefix}news.{name}", value_serializer="json")
           for name in ("unique", "duplicate", "dlq")}
    build(app, raw, out, Filter(threshold=args.threshold, scope=args.scope))
    app.run()


if __name__ == "__main__":
    main()
