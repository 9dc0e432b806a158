"""Crashes and rebalances lose nothing and change no decision."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from harness.kafka import (
    Outgoing,
    Reader,
    SettingsFactory,
    committed_offsets,
    create_topics,
    produce,
    wait_until,
)
from harness.worker import Decided, Routed, WorkerProcess, collect, expected_decisions
from newsgen import items
from test_worker_routing import _lines, _send

from ndd_stream.settings import Settings
from ndd_stream.worker.app import topic_name
from ndd_stream.worker.records import Source
from ndd_stream.worker.router import route_raw

pytestmark = [pytest.mark.broker, pytest.mark.timeout(400)]


def _assert_consistent(routed: Routed, want: dict[str, Decided]) -> int:
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


def test_kill_9_mid_stream_then_restart_gives_the_same_decisions(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    settings = make_settings(partitions=2)
    create_topics(settings)
    lines = _lines(items(1500, seed=9))
    _send(settings, lines)
    want, _ = expected_decisions(settings, lines)
    crashes = 0
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        with Reader.outputs(settings) as reader:
            for target in (150, 600, 1100):
                assert reader.wait_count(target, timeout=90), worker.log_tail()
                worker.kill9()
                crashes += 1
                worker = WorkerProcess(settings, tmp_path / "worker.log").start()
            reader.wait_count(len(lines), timeout=150, alive=worker.alive)
            routed = Routed(reader.records)
    finally:
        worker.stop()
    copies = _assert_consistent(routed, want)
    print(f"items={len(lines)} crashes={crashes} redelivered={copies} mismatches=0 lost=0")


def test_second_worker_joins_then_leaves_without_loss_or_change(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    first_settings = make_settings(partitions=4)
    second_settings = make_settings(partitions=4, data_dir=tmp_path / "second-data")
    create_topics(first_settings)
    lines = _lines(items(1600, seed=13))
    want, _ = expected_decisions(first_settings, lines)
    first = WorkerProcess(first_settings, tmp_path / "first.log").start()
    second = WorkerProcess(second_settings, tmp_path / "second.log")
    try:
        with Reader.outputs(first_settings) as reader:
            _send(first_settings, lines[:600])
            assert reader.wait_count(500, timeout=90), first.log_tail()
            second.start()
            assert second.wait_event("partition_ready", 90), second.log_tail()
            _send(first_settings, lines[600:1100])
            assert reader.wait_count(1000, timeout=90), first.log_tail()
            second.stop()  # clean leave: its partitions move back to the first worker
            _send(first_settings, lines[1100:])
            reader.wait_count(len(lines), timeout=150, alive=first.alive)
            routed = Routed(reader.records)
    finally:
        first.stop()
        second.stop()
    _assert_consistent(routed, want)
    # The second worker really decided items: the first rebuilt them from the changelog.
    restored = [int(n) for n in re.findall(r"\((\d+) changelog records\)", first.log_text())]
    assert max(restored, default=0) > 0, first.log_tail()


def test_records_a_committed_offset_already_passed_are_decided_at_assignment(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """Faust can commit a scoped partition past records it never delivered (offsets it
    counts as a gap; a worker stopped mid-batch). Were the next owner to resume at that
    offset, with no later record to reveal the gap, the records at the end of the partition
    would never be decided: it reads on at its checkpoint instead. Here the group's offset
    is set past all of them before any worker ran."""
    settings = make_settings(partitions=1)
    create_topics(settings)
    lines = _lines(items(120, seed=21))
    want, _ = expected_decisions(settings, lines)
    scoped = topic_name(settings, "scoped")
    _forwarded(settings, lines)
    assert committed_offsets(settings.bootstrap_servers(), settings.app_id, scoped) == {
        0: len(lines)}
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        routed = collect(settings, expected=len(lines), timeout=120, worker=worker)
    finally:
        worker.stop()
    assert _assert_consistent(routed, want) == 0
    log = (tmp_path / "worker.log").read_text()
    assert f"reading on at {scoped}[0]@0" in log  # the checkpoint, not the group's 120
    assert "skipped records" not in log


# A worker whose every partition takes ``argv[1]`` seconds longer to open (a long restore).
SLOW_OPEN = """
import sys, time
from ndd_stream.worker import lifecycle
from ndd_stream.cli.main import main
opening = lifecycle.open_partition
def slow(where, partition):
    time.sleep(float(sys.argv[1]))
    return opening(where, partition)
lifecycle.open_partition = slow
raise SystemExit(main(["worker"]))
"""


def _slow_worker(settings: Settings, log_path: Path, seconds: float) -> WorkerProcess:
    worker = WorkerProcess(settings, log_path)
    worker.argv = [sys.executable, "-c", SLOW_OPEN, str(seconds)]
    return worker


def _forwarded(settings: Settings, lines: list[bytes]) -> None:
    """The scoped records the router would forward for ``lines`` (one partition), and the
    group's offset set past them, as Faust can commit it (see the test above)."""
    scoped, raw = topic_name(settings, "scoped"), settings.raw_topics[0]
    routed_in = []
    for offset, line in enumerate(lines):
        record, invalid = route_raw(line, None, Source(raw, 0, offset), settings.item_format(),
                                    scoped, settings.dlq_topic)
        assert invalid is None
        routed_in.append(Outgoing(value=record.value, key=record.key,
                                  headers=list(record.headers), partition=0))
    bootstrap = settings.bootstrap_servers()
    produce(bootstrap, scoped, routed_in)
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": settings.app_id})
    try:
        group.commit(offsets=[TopicPartition(scoped, 0, len(lines))], asynchronous=False)
    finally:
        group.close()


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_a_restore_longer_than_the_session_goes_on_after_the_rebalance(
    make_settings: SettingsFactory, tmp_path: Path, guarantee: str
) -> None:
    """No heartbeat is sent while the rebalance callback runs: a worker that waited there
    for a restore longer than its session was dropped from the group, and rebuilt again
    when it rejoined. The callback waits a third of the session; the partitions open after
    it, and the consumer is then sent to their positions. At-least-once the group's offset
    is set past every record, so nothing is decided unless it is; exactly-once the items
    come through the raw topic while the partitions open."""
    settings = make_settings(partitions=2, guarantee=guarantee, session_timeout_s=6.0)
    create_topics(settings)
    lines = _lines(items(200, seed=23))
    want, _ = expected_decisions(settings, lines)
    if guarantee == "at-least-once":
        _forwarded(settings, lines)
    else:
        _send(settings, lines)
    worker = _slow_worker(settings, tmp_path / "worker.log", 9.0).start()
    try:
        routed = collect(settings, expected=len(lines), timeout=150, worker=worker)
        # a worker dropped from the group notices at its next heartbeat, rejoins, and
        # opens every partition again: none of that within two sessions
        rebuilt = wait_until(lambda: len(worker.events("partition_ready")) > 2,
                             2 * settings.session_timeout_s)
    finally:
        worker.stop()
    assert _assert_consistent(routed, want) == 0
    assert worker.events("opening"), worker.story()  # the rebalance did not wait for them
    assert not rebuilt, worker.story()
    assert len(worker.events("partition_ready")) == 2, worker.story()  # opened once each
