"""The worker's consumer hands on the raw and the scoped topic in turns (worker/runtime.py,
``take_turns``), so the decider is not left waiting behind the router's backlog, and a
topic's partitions in turns, so one partition's backlog does not keep the others behind
it. No broker: a fetch that answers as aiokafka's ``fetched_records`` does, from an
ordered buffer of prefetched records."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any, NamedTuple

import faust

from ndd_stream.worker.runtime import (
    FETCH_MAX_WAIT_MS,
    FETCH_TURN_RECORDS,
    _Consumer,
    _ConsumerThread,
    read_committed,
    take_turns,
)


class TP(NamedTuple):
    topic: str
    partition: int


RAW0, RAW1, SCOPED = TP("news.raw", 0), TP("news.raw", 1), TP("app-news.scoped", 0)


class Prefetched:
    """aiokafka's buffer and ``fetched_records``: partitions in the order they were fetched,
    drained in that order up to ``max_records``; a drained partition leaves the buffer.
    ``arriving``: what the next fetch brings, for a caller that waits."""

    def __init__(self, **records: int) -> None:
        self.buffer: OrderedDict[TP, list[int]] = OrderedDict()
        self.arriving: dict[TP, list[int]] = {}
        self.waits: list[float | None] = []
        self.turns: dict[str, int] = {}
        for name, count in records.items():
            self.buffer[globals()[name.upper()]] = list(range(count))

    async def fetch(self, tps: Any, timeout: float | None, most: int) -> dict[TP, list[int]]:
        drained: dict[TP, list[int]] = {}
        for tp in list(self.buffer):
            if tp not in tps or most == 0:
                continue
            drained[tp], self.buffer[tp] = self.buffer[tp][:most], self.buffer[tp][most:]
            most -= len(drained[tp])
            if not self.buffer[tp]:
                del self.buffer[tp]
        if not drained and timeout:
            self.waits.append(timeout)
            drained = {tp: rs for tp, rs in self.arriving.items() if tp in tps}
            self.arriving = {}
        return drained

    def turn(self, *tps: TP, timeout: float | None = 1.0) -> dict[TP, list[int]]:
        return asyncio.run(take_turns(self.fetch, tps, timeout, self.turns))


def test_the_scoped_records_are_not_left_behind_the_raw_backlog() -> None:
    fetched = Prefetched(raw0=1200, raw1=1200, scoped=30)
    records = fetched.turn(RAW0, RAW1, SCOPED)
    assert records[SCOPED] == list(range(30))
    assert sum(len(rs) for tp, rs in records.items() if tp != SCOPED) == FETCH_TURN_RECORDS


def test_a_partition_with_records_left_goes_behind_the_others() -> None:
    fetched = Prefetched(raw0=1200, raw1=1200)
    first = fetched.turn(RAW0, RAW1)
    assert list(first) == [RAW0] and fetched.turns == {"news.raw": 1}
    second = fetched.turn(RAW0, RAW1)
    assert list(second) == [RAW1] and second[RAW1] == list(range(FETCH_TURN_RECORDS))
    assert fetched.turn(RAW0, RAW1)[RAW0][0] == FETCH_TURN_RECORDS  # where it stopped


def test_every_record_is_handed_on_once_in_offset_order() -> None:
    fetched = Prefetched(raw0=1234, raw1=77, scoped=901)
    seen: dict[TP, list[int]] = {RAW0: [], RAW1: [], SCOPED: []}
    while fetched.buffer:
        for tp, rs in fetched.turn(RAW0, RAW1, SCOPED).items():
            seen[tp] += rs
    assert seen == {RAW0: list(range(1234)), RAW1: list(range(77)),
                    SCOPED: list(range(901))}
    assert fetched.waits == []  # never waited while something was prefetched


def test_it_waits_for_the_next_fetch_only_when_nothing_is_prefetched() -> None:
    fetched = Prefetched()
    fetched.arriving = {SCOPED: [7, 8]}
    assert fetched.turn(RAW0, SCOPED, timeout=1.5) == {SCOPED: [7, 8]}
    assert fetched.waits == [1.5]


def test_only_the_active_partitions_are_handed_on() -> None:
    fetched = Prefetched(raw0=10, scoped=10)
    assert list(fetched.turn(SCOPED)) == [SCOPED]  # raw0 paused: it stays prefetched
    assert fetched.buffer[RAW0] == list(range(10))


def test_either_guarantee_fetches_in_turns_and_waits_100_ms() -> None:
    """The consumer thread of both guarantees; exactly-once also reads committed only."""
    async def consumer_of(committed: bool) -> tuple[Any, Any]:
        app = faust.App(f"turns-{committed}", broker="kafka://127.0.0.1:1",
                        web_enabled=False)
        app.transport.Consumer = _Consumer  # type: ignore[misc]
        read_committed(app, committed)
        assert app.consumer.in_transaction is committed  # Faust's: its isolation level
        thread = app.consumer._new_consumer_thread()  # type: ignore[attr-defined]
        return thread, thread._create_worker_consumer(app.transport)

    for committed in (False, True):
        thread, consumer = asyncio.run(consumer_of(committed))
        assert isinstance(thread, _ConsumerThread) and thread.kafka is consumer
        assert consumer._fetch_max_wait_ms == FETCH_MAX_WAIT_MS
        assert consumer._isolation_level == (
            "read_committed" if committed else "read_uncommitted")
        thread.kafka = None  # never started: dropped in this test (aiokafka warns of it)
        del thread, consumer
