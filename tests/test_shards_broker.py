"""One scope's window over several shards on a real broker: the same decisions as dedup.

``NDD_SCOPE=global`` with ``NDD_SHARDS`` > 1: the scoped partition's gatherer prepares each
item for every shard (partitions of the shards topic, each with its own state), and decides
it from their answers. What the workers route must equal ``ndd-stream dedup`` on the items
in event-time order, with one or two workers, through kill -9 of gatherer and shards."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.kafka import SettingsFactory, create_topics
from harness.scenarios import feed_all
from test_order_broker import _settings, cross_channel, decide_backlog, kill_during_backlog


@pytest.mark.parametrize("workers", [1, 2])
def test_a_sharded_global_scope_decides_as_dedup(make_settings: SettingsFactory,
                                                 tmp_path: Path, workers: int) -> None:
    settings = _settings(make_settings, shards=2, partitions=2)
    create_topics(settings)
    lines = cross_channel(600, seed=60 + workers)
    positions = feed_all(settings, lines)
    decide_backlog(settings, lines, positions, workers, tmp_path,
                   f"sharded, {workers} worker(s)")


def test_kill_9_of_a_sharded_worker_changes_no_decision(make_settings: SettingsFactory,
                                                        tmp_path: Path) -> None:
    settings = _settings(make_settings, shards=3, partitions=1)
    create_topics(settings)
    lines = cross_channel(900, seed=71)
    positions = feed_all(settings, lines)
    kill_during_backlog(settings, lines, positions, (100, 400, 700), tmp_path,
                        "sharded, kill -9", timeout=180)
