"""Prometheus metrics of a worker (one registry per process, served on /metrics)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


@dataclass
class WorkerMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.items = Counter("ndd_items_total", "Items decided, by status, channel and partition",
                             ["status", "channel", "partition"], registry=r)
        self.dlq = Counter("ndd_dlq_total", "Items sent to the dead-letter topic, by reason",
                           ["reason", "stage"], registry=r)
        self.replayed = Counter("ndd_replayed_total",
                                "Redelivered items answered with their original decision",
                                registry=r)
        self.latency = Histogram(
            "ndd_decision_seconds", "Time to decide one item (parse + detect)",
            buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0),
            registry=r)
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
                            "Times the consumer skipped records and was rewound", registry=r)
        self.assigned = Gauge("ndd_assigned_partitions", "Scoped partitions owned", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
