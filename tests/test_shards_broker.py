"""One scope's window over several shards on a real broker: the same decisions as dedup.

``NDD_SCOPE=global`` with ``NDD_SHARDS`` > 1: the scoped partition's gatherer prepares each
item for every shard (partitions of the shards topic, each with its own state), and decides
it from their answers. What the workers route must equal ``ndd-stream dedup`` on the items
in event-time order, with one or two workers, through kill -9 of gatherer and shards."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.kafka import Reader, SettingsFactory, create_topics
from harness.scenarios import feed_all
from harness.worker import WorkerProcess
from test_order_broker import (
    _check,
    _settings,
    cross_channel,
    decide_backlog,
    kill_during_backlog,
)


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
    """With a gatherer memory budget of 0, so that every waiting item goes through the
    spill files, and a restart re-reads its pending items into them."""
    settings = _settings(make_settings, shards=3, partitions=1, gather_memory_mb=0)
    create_topics(settings)
    lines = cross_channel(900, seed=71)
    positions = feed_all(settings, lines)
    kill_during_backlog(settings, lines, positions, (100, 400, 700), tmp_path,
                        "sharded, kill -9", timeout=180)


def test_shards_moved_by_rebalances_are_rebuilt_and_decide_as_dedup(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    """A second worker joins during the backlog (it takes shards over and rebuilds them from
    the shards' changelog), then leaves (they move back, to state that is behind)."""
    settings = _settings(make_settings, shards=2, partitions=1)
    create_topics(settings)
    lines = cross_channel(900, seed=83)
    positions = feed_all(settings, lines)
    first = WorkerProcess(settings.model_copy(update={"data_dir": tmp_path / "a"}),
                          tmp_path / "worker-a.log").start()
    second: WorkerProcess | None = None
    try:
        with Reader.outputs(settings) as reader:
            assert reader.wait_count(150, timeout=180, alive=first.alive), first.log_tail()
            second = WorkerProcess(settings.model_copy(update={"data_dir": tmp_path / "b"}),
                                   tmp_path / "worker-b.log").start()
            assert second.wait_event("partition_ready", 120), second.log_tail()
            assert reader.wait_count(500, timeout=180, alive=first.alive), first.log_tail()
            assert second.stop() == 0
            assert reader.wait_for(positions, timeout=240, alive=first.alive), (
                first.log_tail())
            _check(settings, reader, lines, positions, "sharded, join and leave")
    finally:
        first.stop()
        if second is not None:
            second.stop()
