"""One scope's window over several shards on a real broker: the same decisions as dedup.

``NDD_SCOPE=global`` with ``NDD_SHARDS`` > 1: the scoped partition's gatherer prepares each
item for every shard (partitions of the shards topic, each with its own state), and decides
it from their answers. What the workers route must equal ``ndd-stream dedup`` on the items
in event-time order, with one or two workers, through kill -9 of gatherer and shards."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from harness.kafka import Reader, SettingsFactory, create_topics
from harness.scenarios import feed_all
from harness.worker import WorkerProcess
from test_order_broker import _check, _settings, cross_channel


@pytest.mark.parametrize("workers", [1, 2])
def test_a_sharded_global_scope_decides_as_dedup(make_settings: SettingsFactory,
                                                 tmp_path: Path, workers: int) -> None:
    settings = _settings(make_settings, shards=2, partitions=2)
    create_topics(settings)
    lines = cross_channel(600, seed=60 + workers)
    positions = feed_all(settings, lines)
    started = [WorkerProcess(settings.model_copy(update={"data_dir": tmp_path / f"w{k}"}),
                             tmp_path / f"worker-{k}.log").start() for k in range(workers)]
    try:
        with Reader.outputs(settings) as reader:
            assert reader.wait_for(positions, timeout=240,
                                   alive=lambda: all(w.alive() for w in started)), (
                started[0].log_tail())
            _check(settings, reader, lines, positions, f"sharded, {workers} worker(s)")
    finally:
        for w in started:
            w.stop()


def test_kill_9_of_a_sharded_worker_changes_no_decision(make_settings: SettingsFactory,
                                                        tmp_path: Path) -> None:
    settings = _settings(make_settings, shards=3, partitions=1)
    create_topics(settings)
    lines = cross_channel(900, seed=71)
    positions = feed_all(settings, lines)
    worker = WorkerProcess(settings, tmp_path / "worker-0.log").start()
    kills = 0
    try:
        with Reader.outputs(settings) as reader:
            for target in (100, 400, 700):
                assert reader.wait_count(target, timeout=180, alive=worker.alive), (
                    worker.log_tail())
                time.sleep(random.Random(target).uniform(0.0, 0.4))
                worker.kill9()
                kills += 1
                worker = WorkerProcess(settings, tmp_path / f"worker-{kills}.log").start()
            assert reader.wait_for(positions, timeout=240, alive=worker.alive), (
                worker.log_tail())
            _check(settings, reader, lines, positions, "sharded, kill -9", kills)
    finally:
        worker.stop()
