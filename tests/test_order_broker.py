"""Cross-channel scopes on a real broker: decided in event-time order, whatever the backlog.

Items are keyed by channel, as crawlers key them, over several raw partitions; the scope
is global. Every test compares what the workers routed with ``ndd-stream dedup`` on the
same items sorted by event time (ties: raw topic, partition, offset): a backlog produced
at once with one and two workers, kill -9 during the catch-up, and live traffic."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from harness.kafka import Reader, SettingsFactory, create_topics
from harness.scenarios import (
    Feeder,
    Report,
    check_outputs,
    feed_all,
    news_lines,
)
from harness.worker import WorkerProcess, expected_decisions

from ndd_stream import jsonio
from ndd_stream.core.items import order_time_ms
from ndd_stream.settings import Settings

Position = tuple[str, int, int]


def cross_channel(n: int, seed: int) -> list[bytes]:
    """News items of 8 channels in event-time order; a fifth repeat (or edit) an item of
    another channel a little earlier, as one agency story reaching several aggregators."""
    rnd = random.Random(seed)
    lines = news_lines(n, seed, duplicate_rate=0.2)
    objs = [jsonio.loads(line) for line in lines]
    for i, obj in enumerate(objs):
        others = [o for o in objs[max(0, i - 30):i] if o["channel"] != obj["channel"]]
        if others and rnd.random() < 0.2:
            obj["text"] = rnd.choice(others)["text"]
    return [jsonio.dumps(o) for o in objs]


def event_order_want(settings: Settings, lines: list[bytes], positions: list[Position]
                     ) -> tuple[dict[str, tuple[str, str | None, str]], int]:
    """dedup's decisions on the items in the documented order."""
    fmt = settings.item_format()
    order = sorted(range(len(lines)), key=lambda i: (
        order_time_ms(jsonio.loads(lines[i]), fmt, None), *positions[i]))
    want, invalid = expected_decisions(settings, [lines[i] for i in order])
    return want, sum(invalid.values())


def _settings(make_settings: SettingsFactory, **overrides: object) -> Settings:
    return make_settings(scope="global", order_stall_s=40.0, order_idle_ms=1500, **overrides)


def _check(settings: Settings, reader: Reader, lines: list[bytes], positions: list[Position],
           label: str, crashes: int = 0) -> Report:
    want, want_dlq = event_order_want(settings, lines, positions)
    report = Report(label, len(lines), crashes=crashes)
    problems = check_outputs(report, reader.records, positions, want, want_dlq)
    behind = [r.source for r in reader.records if r.header("ndd-order") is not None]
    assert not behind, f"{len(behind)} items decided behind the order, e.g. {behind[:5]}"
    assert not problems, problems
    print(report.line())
    return report


@pytest.mark.parametrize("workers", [1, 2])
def test_a_backlog_over_several_raw_partitions_is_decided_as_dedup_in_event_time_order(
        make_settings: SettingsFactory, tmp_path: Path, workers: int) -> None:
    settings = _settings(make_settings)
    create_topics(settings)
    lines = cross_channel(1200, seed=20 + workers)
    positions = feed_all(settings, lines)
    assert len({p[1] for p in positions}) >= 4  # the channels span several raw partitions
    # without the order, fetch order decides: the scenario can tell them apart
    fetch_order = sorted(range(len(lines)), key=lambda i: positions[i])
    assert (expected_decisions(settings, [lines[i] for i in fetch_order])[0]
            != event_order_want(settings, lines, positions)[0])
    decide_backlog(settings, lines, positions, workers, tmp_path, f"backlog, {workers} worker(s)")


def decide_backlog(settings: Settings, lines: list[bytes], positions: list[Position],
                   workers: int, tmp_path: Path, label: str) -> Report:
    """Start ``workers`` workers on a backlog already produced, each with its own state
    directory, and check what they routed against dedup in event-time order."""
    started = [WorkerProcess(settings.model_copy(update={"data_dir": tmp_path / f"w{k}"}),
                             tmp_path / f"worker-{k}.log").start() for k in range(workers)]
    try:
        with Reader.outputs(settings) as reader:
            assert reader.wait_for(positions, timeout=240,
                                   alive=lambda: all(w.alive() for w in started)), (
                started[0].log_tail())
            return _check(settings, reader, lines, positions, label)
    finally:
        for w in started:
            w.stop()


def test_kill_9_during_the_catch_up_changes_no_decision(make_settings: SettingsFactory,
                                                         tmp_path: Path) -> None:
    settings = _settings(make_settings)
    create_topics(settings)
    lines = cross_channel(1500, seed=31)
    positions = feed_all(settings, lines)
    kill_during_backlog(settings, lines, positions, (100, 500, 900, 1200), tmp_path,
                        "kill -9 in catch-up")


def kill_during_backlog(settings: Settings, lines: list[bytes], positions: list[Position],
                        targets: tuple[int, ...], tmp_path: Path, label: str,
                        timeout: float = 120) -> Report:
    """One worker on a backlog, killed with SIGKILL once ``target`` outputs are out (for
    each target) and restarted on the same state; then checked against dedup."""
    worker = WorkerProcess(settings, tmp_path / "worker-0.log").start()
    kills = 0
    try:
        with Reader.outputs(settings) as reader:
            for target in targets:
                assert reader.wait_count(target, timeout=timeout, alive=worker.alive), (
                    worker.log_tail())
                time.sleep(random.Random(target).uniform(0.0, 0.4))
                worker.kill9()
                kills += 1
                worker = WorkerProcess(settings, tmp_path / f"worker-{kills}.log").start()
            assert reader.wait_for(positions, timeout=240, alive=worker.alive), (
                worker.log_tail())
            return _check(settings, reader, lines, positions, label, kills)
    finally:
        worker.stop()


def test_live_traffic_is_decided_in_event_time_order(make_settings: SettingsFactory,
                                                     tmp_path: Path) -> None:
    settings = _settings(make_settings)
    create_topics(settings)
    lines = cross_channel(800, seed=41)
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        assert worker.wait_event("partition_ready", 90), worker.log_tail()
        with Reader.outputs(settings) as reader:
            feeder = Feeder(settings, lines, rate=200).start()
            positions = feeder.join(timeout=120)
            assert reader.wait_for(positions, timeout=120, alive=worker.alive), (
                worker.log_tail())
            _check(settings, reader, lines, positions, "live")
    finally:
        worker.stop()


def test_two_workers_one_killed_in_a_cross_channel_backlog_keep_every_story(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    """Two workers on a cross-channel backlog, one killed with SIGKILL twice and restarted on
    its state: every item's decision and story (``ndd-story``) are dedup's in event-time
    order, chains of copies and follow-ups included."""
    settings = _settings(make_settings)
    create_topics(settings)
    lines = cross_channel(1200, seed=57)
    positions = feed_all(settings, lines)
    want, _ = event_order_want(settings, lines, positions)
    assert sum(story != (dup or ident) for ident, (_, dup, story) in want.items()) >= 10
    configs = [settings.model_copy(update={"data_dir": tmp_path / f"w{k}"}) for k in range(2)]
    workers = [WorkerProcess(c, tmp_path / f"worker-{k}.log").start()
               for k, c in enumerate(configs)]
    kills = 0
    try:
        with Reader.outputs(settings) as reader:
            for target in (300, 800):
                assert reader.wait_count(target, timeout=180, alive=workers[0].alive), (
                    workers[0].log_tail())
                time.sleep(random.Random(target).uniform(0.0, 0.4))
                workers[0].kill9()
                kills += 1
                workers[0] = WorkerProcess(configs[0], tmp_path / f"worker-0-{kills}.log").start()
            assert reader.wait_for(positions, timeout=240,
                                   alive=lambda: all(w.alive() for w in workers)), (
                workers[0].log_tail())
            _check(settings, reader, lines, positions, "2 workers, kill -9, backlog", kills)
    finally:
        for w in workers:
            w.stop()
