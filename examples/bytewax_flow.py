"""ndd-stream's exact near-duplicate filter in a bytewax dataflow: one map step decides.

    pip install ndd-stream bytewax
    python -m bytewax.run examples/bytewax_flow.py      # the bundled sample feed, printed

Each item (a JSON line, or a dict) goes through ``Filter.decide`` in a ``map`` step and
comes out as its decision record (the fields ``ndd-stream dedup`` writes); a ``branch``
then splits what a reader keeps from the duplicates. Swap the testing source and the
standard-output sink for your connectors (``bytewax.connectors.kafka``, files, ...).

One ``Filter`` holds one window and decides in the order it is given items: run the flow
on one worker, or key the stream by scope (``op.key_on``) and hold a Filter per key in a
``stateful_map``, as ndd-stream's worker keys its scoped topic.
"""

from __future__ import annotations

from typing import Any

import bytewax.operators as op
from bytewax.connectors.stdio import StdOutSink
from bytewax.dataflow import Dataflow
from bytewax.outputs import Sink
from bytewax.testing import TestingSource

from ndd_stream import Filter
from ndd_stream.data import sample_feed


def build_flow(source: TestingSource[bytes], kept: Sink[Any], duplicates: Sink[Any],
               **settings: Any) -> Dataflow:
    """The dataflow: decide each item, then route it (``settings``: ``Filter``'s, the
    ``NDD_*`` names, e.g. ``threshold=0.5, scope="global"``)."""
    decider = Filter(**settings)

    def decide(item: bytes) -> dict[str, Any]:
        # a bad item comes back with status "invalid" and its reason (a dead letter)
        return decider.decide(item, on_invalid="return").as_dict()

    flow = Dataflow("ndd-stream")
    items = op.input("items", flow, source)
    decisions = op.map("decide", items, decide)
    # what a reader keeps: unique items, and (keep="complete") more complete versions
    routed = op.branch("route", decisions,
                       lambda r: r["status"] == "unique" or bool(r.get("supersedes")))
    op.output("kept", routed.trues, kept)
    op.output("duplicates-and-invalid", routed.falses, duplicates)
    return flow


def sample_lines() -> list[bytes]:
    """The bundled sample feed's lines (``ndd-stream demo``'s feed)."""
    return sample_feed().read_bytes().splitlines()


flow = build_flow(TestingSource(sample_lines()), StdOutSink(), StdOutSink())
