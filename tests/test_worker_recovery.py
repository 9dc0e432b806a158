"""Crashes and rebalances lose nothing and change no decision."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kafka_helpers import SettingsFactory, consume, wait_until
from newsgen import items
from test_worker_routing import _create_topics, _lines, _send
from worker_harness import Routed, WorkerProcess, collect, expected_decisions

pytestmark = [pytest.mark.broker, pytest.mark.timeout(400)]


def _assert_consistent(routed: Routed, want: dict[str, tuple[str, str | None]]) -> int:
    """Every input decided, every copy of a redelivered item carries the same decision,
    and it is dedup's decision. Returns the number of redelivered copies."""
    got = routed.decisions()
    assert set(got) == set(want), f"lost: {sorted(set(want) - set(got))[:10]}"
    copies = 0
    for identity, decisions in got.items():
        assert len(set(decisions)) == 1, (identity, decisions)
        assert decisions[0] == want[identity], identity
        copies += len(decisions) - 1
    return copies


def _outputs(settings: object) -> int:
    s = settings
    return len(consume(s.brokers, [s.unique_topic, s.duplicate_topic],  # type: ignore[attr-defined]
                       timeout=5, idle=1.0))


def test_kill_9_mid_stream_then_restart_gives_the_same_decisions(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    settings = make_settings(partitions=2)
    _create_topics(settings)
    lines = _lines(items(1500, seed=9))
    _send(settings, lines)
    want, _ = expected_decisions(settings, lines)
    crashes = 0
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        for target in (150, 600, 1100):
            assert wait_until(lambda t=target: _outputs(settings) >= t, timeout=90), \
                worker.log_tail()
            worker.kill9()
            crashes += 1
            worker = WorkerProcess(settings, tmp_path / "worker.log").start()
        routed = collect(settings, expected=len(lines), timeout=150, worker=worker)
    finally:
        worker.stop()
    copies = _assert_consistent(routed, want)
    print(f"items={len(lines)} crashes={crashes} redelivered={copies} mismatches=0 lost=0")


def test_second_worker_joins_then_leaves_without_loss_or_change(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    first_settings = make_settings(partitions=4)
    second_settings = make_settings(partitions=4, data_dir=tmp_path / "second-data")
    _create_topics(first_settings)
    lines = _lines(items(1600, seed=13))
    want, _ = expected_decisions(first_settings, lines)
    first = WorkerProcess(first_settings, tmp_path / "first.log").start()
    second = WorkerProcess(second_settings, tmp_path / "second.log")
    try:
        _send(first_settings, lines[:600])
        assert wait_until(lambda: _outputs(first_settings) >= 500, timeout=90), first.log_tail()
        second.start()
        assert wait_until(lambda: "partition_ready" in second.log_tail(400), timeout=90), (
            second.log_tail())
        _send(first_settings, lines[600:1100])
        assert wait_until(lambda: _outputs(first_settings) >= 1000, timeout=90)
        second.stop()  # clean leave: its partitions move back to the first worker
        _send(first_settings, lines[1100:])
        routed = collect(first_settings, expected=len(lines), timeout=150, worker=first)
    finally:
        first.stop()
        second.stop()
    _assert_consistent(routed, want)
    # The second worker really decided items: the first rebuilt them from the changelog.
    restored = [int(n) for n in re.findall(r"\((\d+) changelog records\)", first.log_tail(5000))]
    assert max(restored, default=0) > 0, first.log_tail()
