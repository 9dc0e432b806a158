"""A stopped fetch is noticed (worker/delivery.py): no broker, a clock the test moves."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import faust
from faust.types import TP

from ndd_stream.worker.delivery import GIVE_UP_AFTER, StallWatch, restart_stopped_fetch, unblock


@dataclass
class _Msg:
    topic: str
    partition: int
    offset: int


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_records_waiting_and_none_delivered_is_a_stopped_fetch() -> None:
    clock = _Clock()
    watch = StallWatch(60.0, clock)
    watch.delivered([_Msg("s", 0, 41), _Msg("s", 1, 9)])
    behind = {("s", 0): (42, 1000)}  # partition 1 is at its end: not behind
    clock.now += 59
    assert not watch.silent() and watch.stopped(behind, {}) == {} and watch.problem() is None
    clock.now += 2
    assert watch.silent() and watch.stopped(behind, {}) == {("s", 0): 42}
    assert watch.problem() == "fetch stalled: no record delivered for 61s"
    assert watch.stopped(behind, {}) == {}  # the next restart after another wait
    watch.delivered([_Msg("s", 0, 42)])
    assert watch.problem() is None


def test_the_fetch_restarts_at_the_workers_position() -> None:
    """Records Faust fetched but the worker never handed out (its fetch position is past
    them) are fetched again from the worker's position; a partition the worker has no
    position in, from its fetch position; never beyond it."""
    clock = _Clock()
    watch = StallWatch(60.0, clock)
    watch.delivered([_Msg("s", 0, 9)])
    clock.now += 61
    behind = {("s", 0): (15, 20), ("s", 1): (3, 7), ("s", 2): (4, 9)}
    assert watch.stopped(behind, {("s", 0): 10, ("s", 2): 6}) == {
        ("s", 0): 10, ("s", 1): 3, ("s", 2): 4}


def test_a_transaction_marker_at_the_end_is_no_record_waiting() -> None:
    """Under read_committed the last offset of a partition is a commit marker: the position
    passes it, and a quiet partition is at its end, not stalled."""
    clock = _Clock()
    watch = StallWatch(60.0, clock)
    watch.delivered([_Msg("s", 0, 41)])  # 42 is the transaction's marker; the end is 43
    clock.now += 3600
    assert watch.stopped({}, {}) == {} and watch.problem() is None


def test_a_long_batch_is_busy_not_stalled() -> None:
    clock = _Clock()
    watch = StallWatch(60.0, clock)
    watch.delivered([_Msg("s", 0, 1)])
    with watch.handling():
        clock.now += 90
        assert watch.stopped({("s", 0): (2, 100)}, {}) == {}
        assert watch.problem() == "busy: one batch handled for 90s"
    assert watch.problem() is None
    clock.now += 30  # silence counts from the batch's end
    assert watch.stopped({("s", 0): (2, 100)}, {}) == {}


def test_a_fetch_stopped_through_every_restart_gives_up() -> None:
    clock = _Clock()
    watch = StallWatch(60.0, clock)
    watch.delivered([_Msg("s", 0, 1)])
    behind = {("s", 0): (2, 100)}
    for _ in range(GIVE_UP_AFTER - 1):
        clock.now += 61
        assert watch.stopped(behind, {}) and not watch.hopeless()
    clock.now += 61
    assert watch.stopped(behind, {}) and watch.hopeless()
    watch.delivered([_Msg("s", 0, 2)])  # records flow: a later stall starts counting anew
    clock.now += 61
    assert watch.stopped(behind, {}) and not watch.hopeless()


def _faust_app(assigned: set[Any]) -> Any:
    """Faust's own app and consumer, never started: the bookkeeping ``unblock`` repairs."""
    app = faust.App("stall-test", broker="kafka://127.0.0.1:1", web_enabled=False)
    consumer = app.consumer
    consumer.assignment = lambda: assigned  # type: ignore[method-assign]
    consumer._set_active_tps(assigned)
    app.in_recovery = False
    app.flow_control.resume()
    return app


def test_unblock_puts_waiting_partitions_back_into_faust_fetches() -> None:
    app = _faust_app({TP("s", 0), TP("s", 1), TP("s", 2)})
    consumer = app.consumer
    consumer.pause_partitions({TP("s", 0)})
    consumer.on_buffer_full(TP("s", 1))  # an agent's buffer was full
    consumer.stop_flow()
    found = unblock(app, [("s", 0), ("s", 1), ("t", 9)])  # t[9]: not assigned
    assert found == ["fetching s[0], s[1]", "consumer flow stopped"]
    # Faust's own bookkeeping (read here only): every partition fetched, none held
    assert consumer._get_active_partitions() == {TP("s", 0), TP("s", 1), TP("s", 2)}
    assert consumer.flow_active and not consumer._paused_partitions
    assert not consumer._buffered_partitions
    consumer.on_buffer_full(TP("s", 2))
    assert unblock(app, [("s", 2)]) == ["fetching s[2]"]
    assert TP("s", 2) in consumer._get_active_partitions()


def test_unblock_resumes_a_flow_a_superseded_recovery_left_suspended() -> None:
    """Faust suspends its flow control at a revocation and lifts it at the end of the
    recovery, which it skips when a newer rebalance began: its streams then drop every
    record, and its rebalancing mark stays set."""
    app = _faust_app({TP("s", 0)})
    app.on_rebalance_start()
    app.flow_control.suspend()
    assert unblock(app, [("s", 0)]) == ["fetching s[0]", "flow control suspended",
                                        "a rebalance marked as under way"]
    assert app.flow_control.is_active()


def _fetching(app: Any, position: int, stable: int, high: int) -> None:
    """Faust's consumer as the fetch watch reads it: where it is, where the partition ends
    (last stable offset, high watermark)."""
    consumer = app.consumer

    async def at(tp: Any) -> int:
        return position

    consumer.position = at
    # Faust's highwater where its consumer reads committed records (``in_transaction``):
    # the last stable offset, below the high watermark while a transaction is open
    consumer.in_transaction = True
    consumer._thread._consumer = SimpleNamespace(
        last_stable_offset=lambda tp: stable, highwater=lambda tp: high)


def _restart(app: Any, watch: StallWatch, positions: dict[tuple[str, int], int],
             fatal: list[str]) -> list[dict[tuple[str, int], int]]:
    """One turn of the watch's timer; the positions the consumer is sent to."""
    seeks: list[dict[tuple[str, int], int]] = []

    async def seek(where: Any) -> None:
        seeks.append(dict(where))

    asyncio.run(restart_stopped_fetch(app, watch, fatal.append, lambda: positions, seek))
    return seeks


def test_the_watch_fetches_anew_a_partition_short_of_its_last_stable_offset() -> None:
    clock, fatal = _Clock(), []
    watch = StallWatch(60.0, clock)
    watch.delivered([_Msg("s", 0, 3)])
    app = _faust_app({TP("s", 0)})
    _fetching(app, position=6, stable=9, high=12)
    clock.now += 61
    assert _restart(app, watch, {("s", 0): 4}, fatal) == [{("s", 0): 4}] and not fatal


def test_the_watch_leaves_alone_a_partition_read_to_its_last_stable_offset() -> None:
    """An open transaction after the last committed record (high watermark beyond the last
    stable offset) holds nothing a read_committed reader could have."""
    clock, fatal = _Clock(), []
    watch = StallWatch(60.0, clock)
    watch.delivered([_Msg("s", 0, 7)])
    app = _faust_app({TP("s", 0)})
    _fetching(app, position=9, stable=9, high=12)
    clock.now += 3600
    assert _restart(app, watch, {("s", 0): 8}, fatal) == []
    assert watch.problem() is None and not fatal
