"""Prometheus metrics of a worker (one registry per process, served on /metrics)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

if TYPE_CHECKING:
    from ndd_stream.worker.deciding import Outcome, StatefulPartition
    from ndd_stream.worker.records import Source

log = logging.getLogger("ndd_stream.worker")

#: Distinct ``channel`` label values of ``ndd_items_total``; later channels count under
#: ``OTHER_CHANNEL``. Channels come from the items, so without a bound a feed with
#: per-item channel values would grow the registry (and every scrape) without limit.
CHANNEL_LABELS_MAX = 200
OTHER_CHANNEL = "(other)"
STATE_BYTES_EVERY_S = 5.0
ITEM_CHILDREN_MAX = 4096
"""At most this many of ``ndd_items_total``'s counters are kept at hand (the rest are
looked up each time; channels beyond CHANNEL_LABELS_MAX share one counter anyway)."""


@dataclass
class WorkerMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    _channels: set[str] = field(default_factory=set, init=False, repr=False)
    # the counters of ndd_items_total by (status, channel, partition), looked up once
    _item_children: dict[tuple[str, str, str], Any] = field(default_factory=dict, init=False,
                                                            repr=False)
    # when each partition's ndd_state_bytes was last measured (time.monotonic)
    sized: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        r = self.registry
        # process_resident_memory_bytes (against the container's memory limit) and
        # process_start_time_seconds (restarts: a failed transaction exits the worker)
        ProcessCollector(registry=r)
        self.items = Counter("ndd_items_total", "Items decided, by status, channel and partition "
                             f"(the first {CHANNEL_LABELS_MAX} channels by name, then "
                             f"{OTHER_CHANNEL})", ["status", "channel", "partition"], registry=r)
        self.dlq = Counter("ndd_dlq_total", "Items sent to the dead-letter topic, by reason",
                           ["reason", "stage"], registry=r)
        self.replayed = Counter("ndd_replayed_total",
                                "Redelivered items answered with their original decision",
                                registry=r)
        self.copies_skipped = Counter(
            "ndd_copies_skipped_total", "Raw records the router forwarded again (at-least-once, "
            "after a kill or a rebalance), decided before: not answered again", registry=r)
        self.latency = Histogram(
            "ndd_decision_seconds", "Time to decide one item (parse + detect)",
            buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0),
            registry=r)
        # exactly-once: the commit at the end of each piece, and its size
        self.transaction = Histogram(
            "ndd_transaction_commit_seconds",
            "Time from a piece's last decision to its transaction committed",
            buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0), registry=r)
        self.transaction_failures = Counter(
            "ndd_transaction_failures",
            "Transactions that failed, by kind (ProducerFenced: the group moved on, the "
            "partitions are left to the rebalance; TransactionAborted: redone after the "
            "partitions were opened again)",
            ["kind"], registry=r)
        self.transaction_decisions = Histogram(
            "ndd_transaction_decisions", "Decisions per committed transaction",
            buckets=(1, 4, 16, 64, 128, 256, 512, 1024), registry=r)
        self.window_documents = Gauge("ndd_window_documents", "Documents in the window",
                                      ["partition"], registry=r)
        self.window_hours = Gauge("ndd_window_hours", "Hours spanned by the window",
                                  ["partition"], registry=r)
        self.state_bytes = Gauge("ndd_state_bytes", "RocksDB state size on disk",
                                 ["partition"], registry=r)
        self.restored = Counter("ndd_restored_documents_total",
                                "Documents rebuilt from local state or the changelog",
                                ["source"], registry=r)
        self.lag = Gauge("ndd_consumer_lag", "Records behind the partition end (if known)",
                         ["topic", "partition"], registry=r)
        self.gaps = Counter("ndd_consumer_gaps_total",
                            "Times the consumer skipped offsets; the skipped records were read "
                            "from the broker before the next one was decided", registry=r)
        self.lost = Counter("ndd_lost_records",
                            "Offsets the broker removed (retention, deleted records, a "
                            "truncated log) before the worker read them; never decided",
                            ["topic", "partition"], registry=r)
        self.assigned = Gauge("ndd_assigned_partitions", "Scoped partitions owned", registry=r)
        self.order_held = Gauge("ndd_order_held", "Items held back for their turn in event-time "
                                "order", ["partition"], registry=r)
        self.order_behind = Counter("ndd_order_behind_total",
                                    "Items that arrived after their scope's event-time order had "
                                    "passed them (decided at once, header ndd-order: behind)",
                                    ["partition"], registry=r)
        self.order_passed = Counter("ndd_order_passed_total",
                                    "Times a scope stopped waiting for a raw partition, by why: "
                                    "idle (nothing to forward), stall (not heard of), memory",
                                    ["reason"], registry=r)
        self.busy = Counter("ndd_busy_seconds_total",
                            "Seconds spent deciding or answering, per scoped partition or "
                            "shard (shard-K): the load of each", ["partition"], registry=r)
        self.shard_answers = Counter("ndd_shard_answers_total",
                                     "Items a shard answered (sharded windows), per shard "
                                     "(partition of the shards topic)", ["shard"], registry=r)
        self.shard_waiting = Gauge("ndd_shard_waiting",
                                   "Items a scoped partition's gatherer waits on a shard for: "
                                   "the shard's lag in items", ["partition", "shard"],
                                   registry=r)
        self.gather_held = Gauge("ndd_gather_memory_bytes",
                                 "Bytes of admitted items, and of answers, a gatherer keeps in "
                                 "memory while they wait for the shards (gather_memory_mb "
                                 "bounds the items)",
                                 ["partition"], registry=r)
        self.gather_spilled = Gauge("ndd_gather_spilled_items",
                                    "Admitted items a gatherer keeps in its spill file, past "
                                    "gather_memory_mb", ["partition"], registry=r)

    def count_item(self, status: str, channel: str, partition: str) -> None:
        """One decided item in ``ndd_items_total``, its channel label bounded."""
        child = self._item_children.get((status, channel, partition))
        if child is None:
            label = channel
            if channel not in self._channels:
                if len(self._channels) >= CHANNEL_LABELS_MAX:
                    label = OTHER_CHANNEL
                else:
                    self._channels.add(channel)
            child = self.items.labels(status, label, partition)
            if len(self._item_children) < ITEM_CHILDREN_MAX:
                self._item_children[(status, channel, partition)] = child
        child.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def count_outcome(metrics: WorkerMetrics, partition: int, outcome: Outcome,
                  source: Source) -> None:
    """An outcome in the metrics (and a dead letter in the log)."""
    part = str(partition)
    if outcome.invalid is not None:
        metrics.dlq.labels(outcome.invalid.reason, "decide").inc()
        log.warning("%s: %s: %s", source.position, outcome.invalid.reason,
                    outcome.invalid.detail, extra={
                        "topic": source.topic, "partition": source.partition,
                        "offset": source.offset, "event": "dlq"})
        return
    decision = outcome.decision
    if outcome.skipped_copy:
        metrics.copies_skipped.inc()
        return
    if decision is None:  # a shard's answer
        metrics.shard_answers.labels(str(partition)).inc()
        return
    if decision.replayed:
        metrics.replayed.inc()
    metrics.count_item(decision.status.value, outcome.channel, part)


def set_gauges(metrics: WorkerMetrics, part: str, decider: StatefulPartition) -> None:
    """A partition's window and state gauges, after a commit (``part``: its label). The
    state's size on disk (a listing of its directory) at most every
    :data:`STATE_BYTES_EVERY_S`."""
    metrics.window_documents.labels(part).set(decider.window_documents())
    metrics.window_hours.labels(part).set(decider.window_hours())
    now = time.monotonic()
    if now - metrics.sized.get(part, -STATE_BYTES_EVERY_S) >= STATE_BYTES_EVERY_S:
        metrics.sized[part] = now
        metrics.state_bytes.labels(part).set(decider.store.inner.size_bytes())
    gather = decider.gather_gauges()
    if gather is not None:
        waiting, held, spilled = gather
        for shard, count in waiting.items():
            metrics.shard_waiting.labels(str(decider.partition), str(shard)).set(count)
        metrics.gather_held.labels(part).set(held)
        metrics.gather_spilled.labels(part).set(spilled)
