"""At-least-once: raw records forwarded again are not answered again.

A kill -9 re-forwards what the router forwarded after the raw partition's last committed
offset; on a backlog the router can run far ahead of that offset, so a copy can reach its
scope after the window moved past its hour, where, decided again, it would be "unique,
late" (a near duplicate sent to the unique topic). The decider knows such a record for a
copy (it has decided past its raw offset) and sends nothing for it: its decision went out
when it was first decided.

Here the copies are made on purpose: the group's committed raw offsets are set back to the
start after the worker decided everything, so the whole feed is forwarded again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from harness.kafka import Reader, SettingsFactory, committed_offsets, create_topics, wait_until
from harness.scenarios import Report, check_outputs, dedup_of, feed_all, news_lines
from harness.worker import WorkerProcess, metric_sum, scrape

from ndd_stream.settings import Settings

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]


def _rewind(settings: Settings, topic: str, partitions: list[int],
            timeout: float = 60.0) -> None:
    """Set the (empty) group's committed offsets of ``topic`` back to 0."""
    group = settings.app_id
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers()})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, 0)
                                                   for p in partitions])

    def rewound() -> bool:
        try:
            admin.alter_consumer_group_offsets([request])[group].result(timeout=10)
            return True
        except Exception:  # the group is not empty yet (the worker's leave in flight)
            return False

    assert wait_until(rewound, timeout, interval=1.0), "could not rewind the group"


def test_copies_forwarded_after_their_hour_left_the_window_change_no_decision(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    settings = make_settings(partitions=2)
    # 360 items, 5 minutes apart: 30 hours, so the first hours leave the 24-hour window
    lines = news_lines(360, seed=11, spacing=300.0)
    want, want_dlq = dedup_of(settings, lines)
    create_topics(settings)
    raw = settings.raw_topics[0]
    with Reader.outputs(settings) as reader:
        positions = feed_all(settings, lines)
        first = WorkerProcess(settings, tmp_path / "first.log").start()
        try:
            assert reader.wait_for(positions, 120, alive=first.alive), first.log_tail()
        finally:
            assert first.stop() == 0, first.log_tail()
        partitions = sorted({p for _, p, _ in positions})
        _rewind(settings, raw, partitions)
        again = WorkerProcess(settings, tmp_path / "again.log").start()
        try:
            ends = {p: max(o for _, q, o in positions if q == p) + 1 for p in partitions}
            assert wait_until(lambda: all(
                committed_offsets(settings.bootstrap_servers(), settings.app_id, raw).get(p)
                == end for p, end in ends.items()), 120), again.log_tail()
            port = again.web_port()
            assert port is not None, again.log_tail()
            assert wait_until(lambda: metric_sum(scrape(port), "ndd_copies_skipped_total")
                              == len(lines), 60), again.log_tail()
            reader.read(timeout=3.0, idle=2.0)
        finally:
            assert again.stop() == 0, again.log_tail()
        reader.read(timeout=2.0, idle=1.0)
        report = Report("copies", len(lines))
        problems = check_outputs(report, reader.records, positions, want, want_dlq)
    assert not problems, "\n".join(problems)
    assert report.redelivered == 0, report.line()  # every copy decided before: none sent
