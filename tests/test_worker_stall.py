"""A stopped fetch is noticed (worker/stall.py): no broker, a clock the test moves."""

from __future__ import annotations

from dataclasses import dataclass

from ndd_stream.worker.stall import StallWatch


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
    high = {("s", 0): 1000, ("s", 1): 10}.get  # partition 1 is at its end
    owned = [("s", 0), ("s", 1), ("s", 2)]  # 2: nothing delivered yet, position unknown
    clock.now += 59
    assert watch.stopped(owned, high) == {} and watch.problem() is None
    clock.now += 2
    assert watch.stopped(owned, high) == {("s", 0): 42}
    assert watch.problem() == "fetch stalled: no record delivered for 61s"
    assert watch.stopped(owned, high) == {}  # the next restart after another wait
    watch.delivered([_Msg("s", 0, 42)])
    assert watch.problem() is None


def test_a_long_batch_is_busy_not_stalled() -> None:
    clock = _Clock()
    watch = StallWatch(60.0, clock)
    watch.delivered([_Msg("s", 0, 1)])
    with watch.handling():
        clock.now += 90
        assert watch.stopped([("s", 0)], lambda tp: 100) == {}
        assert watch.problem() == "busy: one batch handled for 90s"
    assert watch.problem() is None
    clock.now += 30  # silence counts from the batch's end
    assert watch.stopped([("s", 0)], lambda tp: 100) == {}


def test_nothing_waiting_is_quiet_not_stalled() -> None:
    clock = _Clock()
    watch = StallWatch(60.0, clock)
    watch.delivered([_Msg("s", 0, 99)])
    clock.now += 3600
    assert watch.stopped([("s", 0)], lambda tp: 100) == {}
    assert watch.stopped([("s", 0)], lambda tp: None) == {}
    assert watch.problem() is None
