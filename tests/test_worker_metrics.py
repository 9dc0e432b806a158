"""Worker metrics: the channel label of ndd_items_total is bounded."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from ndd_stream.worker.metrics import CHANNEL_LABELS_MAX, OTHER_CHANNEL, WorkerMetrics


def test_items_total_keeps_at_most_the_bound_of_channel_labels() -> None:
    metrics = WorkerMetrics()
    n = CHANNEL_LABELS_MAX + 50
    for i in range(n):
        metrics.count_item("unique", f"channel-{i}", "0")
    metrics.count_item("unique", "channel-0", "0")  # a known channel keeps its label
    samples = [s for fam in text_string_to_metric_families(metrics.render().decode())
               if fam.name == "ndd_items" for s in fam.samples if s.name == "ndd_items_total"]
    by_channel = {s.labels["channel"]: s.value for s in samples}
    assert len(by_channel) == CHANNEL_LABELS_MAX + 1
    assert by_channel[OTHER_CHANNEL] == 50 and by_channel["channel-0"] == 2
    assert sum(by_channel.values()) == n + 1
