"""Crashes and rebalances at random moments lose nothing and change no decision.

Items stream into the raw topic while the worker is killed with SIGKILL at random
moments (during startup and restore, mid-batch, mid-produce, mid-commit) and restarted,
or while a second worker joins and leaves. Afterwards every raw record must have come
out (unique, duplicate or DLQ), every redelivered copy must carry the same decision,
and the decisions must equal ``ndd-stream dedup`` on the same input.

The CI versions are sized to run in about two minutes together; ``-m slow`` (or
``NDD_RELIABILITY_SLOW=1``) runs the long ones, and ``bench/crash_loop.py`` runs any
size. The figures are printed (``-s``) and reported in docs/RELIABILITY.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harness.kafka import SettingsFactory
from harness.scenarios import crash_scenario, rebalance_scenario

pytestmark = [pytest.mark.broker]

SEED = int(os.environ.get("NDD_RELIABILITY_SEED", "20260301"))


@pytest.mark.timeout(420)
def test_random_kill_9_while_streaming_loses_nothing_and_keeps_decisions(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    settings = make_settings(partitions=4)
    report, problems = crash_scenario(settings, tmp_path, items=8_000, kills=10, seed=SEED,
                                      timeout=400)
    print(report.line())
    assert report.crashes == 10
    assert not problems, "\n".join(problems)
    assert report.lost == 0 and report.mismatches == 0


@pytest.mark.timeout(420)
def test_second_worker_joins_and_leaves_at_random_moments_without_loss(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    first = make_settings(partitions=4)
    second = make_settings(partitions=4, data_dir=tmp_path / "second-data")
    assert first.app_id == second.app_id  # one consumer group
    # A live stream (slower than one worker decides), released in shares per phase.
    report, problems = rebalance_scenario(first, second, tmp_path, items=6_000, cycles=2,
                                          seed=SEED + 1, rate=250.0, timeout=400)
    print(report.line(), *report.notes)
    assert report.rebalances == 4
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_long_kill_9_loop(make_settings: SettingsFactory, tmp_path: Path, long_run: None) -> None:
    settings = make_settings(partitions=8)
    report, problems = crash_scenario(settings, tmp_path, items=60_000, kills=30, seed=SEED + 2,
                                      timeout=3400)
    print(report.line())
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_long_rebalance_loop(make_settings: SettingsFactory, tmp_path: Path,
                             long_run: None) -> None:
    first = make_settings(partitions=8)
    second = make_settings(partitions=8, data_dir=tmp_path / "second-data")
    report, problems = rebalance_scenario(first, second, tmp_path, items=40_000, cycles=6,
                                          seed=SEED + 3, timeout=3400)
    print(report.line(), *report.notes)
    assert not problems, "\n".join(problems)


@pytest.mark.timeout(900)
def test_kill_storm_two_workers_loses_nothing_and_keeps_decisions(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """Two workers of one group while items stream in at 25/s; 8 times one of them, at
    random, is killed with SIGKILL at a random moment and restarted."""
    settings = make_settings(partitions=4)
    report, problems = crash_scenario(settings, tmp_path, items=1_500, kills=8, seed=SEED + 4,
                                      rate=25.0, timeout=840, workers=2)
    print(report.line())
    assert report.crashes == 8
    assert not problems, "\n".join(problems)
    assert report.lost == 0 and report.mismatches == 0
