"""The sequencer of a scoped partition (ndd_stream/worker/merge.py): pure, no loop or broker.

A scoped partition's log is simulated as what routers write to it: the items of every raw
partition (each in event-time order, as a crawler keys a channel) interleaved in any way,
and progress records. Whatever the interleaving and wherever a restart falls, the items
come out in the documented order, each once."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from ndd_stream.worker.merge import (
    NO_TIME,
    EventTimeMerge,
    OrderKey,
    PassReason,
    SourceState,
    Verdict,
)

FOREVER = 1e9


@dataclass(frozen=True)
class Entry:
    """One record of the scoped partition: an item (key) or a progress record."""

    key: OrderKey | None = None
    progress: tuple[str, int, int, int, int] | None = None  # topic, partition, next, ms, high


@st.composite
def scoped_logs(draw: st.DrawFn) -> tuple[list[Entry], list[OrderKey]]:
    sources = draw(st.integers(1, 4))
    streams: list[list[OrderKey]] = []
    for p in range(sources):
        times = sorted(draw(st.lists(st.integers(0, 30), max_size=8)))
        streams.append([OrderKey(t, "raw", p, o) for o, t in enumerate(times)])
    log: list[Entry] = []
    cursors = [0] * sources
    while any(c < len(s) for c, s in zip(cursors, streams, strict=True)):
        p = draw(st.sampled_from([i for i in range(sources) if cursors[i] < len(streams[i])]))
        take = draw(st.integers(1, len(streams[p]) - cursors[p]))
        batch = streams[p][cursors[p]:cursors[p] + take]
        cursors[p] += take
        log += [Entry(key=k) for k in batch]
        if draw(st.booleans()):  # the router's progress record after its batch
            last = batch[-1]
            log.append(Entry(progress=("raw", p, last.offset + 1, last.event_ms,
                                       len(streams[p]))))
    # at the end every router says it is caught up
    for p, stream in enumerate(streams):
        last_ms = stream[-1].event_ms if stream else -1
        log.append(Entry(progress=("raw", p, len(stream), last_ms, len(stream))))
    return log, sorted(k for s in streams for k in s)


def drain(merge: EventTimeMerge[int], now: float, limit: int | None) -> list[OrderKey]:
    """Release what is due, ``limit`` at a time (as the pool's pieces do) until no more."""
    out: list[OrderKey] = []
    while True:
        released, passed = merge.release(now, limit)
        # only steps over raw partitions whose router confirmed they have nothing more
        assert all(p.reason is PassReason.IDLE for p in passed)
        out += [k for k, _ in released]
        if not merge.more:
            return out


def run(merge: EventTimeMerge[int], log: list[Entry], start: int, stop: int,
        now: float, limit: int | None = None) -> list[OrderKey]:
    out: list[OrderKey] = []
    for offset in range(start, stop):
        entry = log[offset]
        if entry.progress is not None:
            t, p, n, ms, high = entry.progress
            merge.progress((t, p), n, ms, high, offset, now)
        else:
            verdict = merge.offer(entry.key, offset, 10, offset, now)
            assert verdict in (Verdict.HELD, Verdict.DONE, Verdict.DUPLICATE), verdict
        out += drain(merge, now, limit)
    return out


def finish(merge: EventTimeMerge[int], limit: int | None = None) -> list[OrderKey]:
    """Every router said it is caught up: once the idle wait is over, the rest goes."""
    return drain(merge, 2 * FOREVER, limit)


def new_merge(sources: int = 4) -> EventTimeMerge[int]:
    merge: EventTimeMerge[int] = EventTimeMerge(idle_s=0.0, stall_s=FOREVER, max_bytes=1 << 40)
    merge.expect([("raw", p) for p in range(sources)], now=0.0)
    return merge


@settings(max_examples=300, deadline=None)
@given(scoped_logs(), st.none() | st.integers(1, 3))
def test_any_interleaving_comes_out_in_event_time_order(
        case: tuple[list[Entry], list[OrderKey]], limit: int | None) -> None:
    """``limit``: released a few at a time (the pool's budget per piece), the same order."""
    log, expected = case
    sources = len({k.partition for k in expected}) if expected else 1
    merge = new_merge(max(sources, max((k.partition + 1 for k in expected), default=1)))
    assert run(merge, log, 0, len(log), 0.0, limit) + finish(merge, limit) == expected
    assert merge.held == 0


@settings(max_examples=300, deadline=None)
@given(scoped_logs(), st.data())
def test_a_restart_anywhere_decides_each_item_once_in_order(
        case: tuple[list[Entry], list[OrderKey]], data: st.DataObject) -> None:
    log, expected = case
    parts = max((k.partition + 1 for k in expected), default=1)
    merge = new_merge(parts)
    crash = data.draw(st.integers(0, len(log)))
    first = run(merge, log, 0, crash, 0.0)
    # what the partition's state keeps (one RocksDB batch), and where it re-reads from
    checkpoint, resume = merge.checkpoint(), merge.resume_offset()
    restarted = new_merge(parts)
    restarted.restore(checkpoint, now=0.0)
    second = run(restarted, log, resume, len(log), 0.0) + finish(restarted)
    assert first + second == expected


order_keys = st.builds(OrderKey, st.integers(-3, 3), st.sampled_from(["a", "b"]),
                       st.integers(0, 2), st.integers(0, 3))


@given(order_keys, st.integers(-3, 3), st.integers(0, 3), st.booleans(),
       st.none() | order_keys, st.sampled_from([("a", 0), ("a", 2), ("b", 1)]))
def test_a_sources_blocking_test_is_its_bound_compared_to_the_key(
        key: OrderKey, event_ms: int, next_offset: int, passed: bool, floor: OrderKey | None,
        source: tuple[str, int]) -> None:
    """SourceState.blocks compares field by field; it must mean ``bound <= key``."""
    state = SourceState(next=next_offset, event_ms=event_ms, passed=passed, floor=floor)
    want = (not passed and state.bound(source) <= key and (floor is None or floor < key))
    assert state.blocks(source, key) == want


def test_ties_go_by_raw_topic_partition_offset() -> None:
    merge = new_merge(2)
    assert merge.offer(OrderKey(5, "raw", 1, 0), 0, 1, 0, 0.0) is Verdict.HELD
    assert merge.offer(OrderKey(5, "raw", 0, 3), 1, 1, 1, 0.0) is Verdict.HELD
    merge.progress(("raw", 0), 4, 5, 10, 2, 0.0)  # both have more to forward
    merge.progress(("raw", 1), 1, 5, 10, 3, 0.0)
    released, _ = merge.release(0.0)
    assert [k for k, _ in released] == [OrderKey(5, "raw", 0, 3)]  # raw[0] may send (5, 4)
    merge.progress(("raw", 0), 5, 6, 10, 4, 0.0)
    released, _ = merge.release(0.0)
    assert [k for k, _ in released] == [OrderKey(5, "raw", 1, 0)]


def test_an_idle_source_is_stepped_over_after_idle_s_on_a_later_confirmation() -> None:
    merge: EventTimeMerge[str] = EventTimeMerge(idle_s=1.0, stall_s=60.0, max_bytes=1 << 30)
    merge.expect([("raw", 0), ("raw", 1)], now=0.0)
    merge.progress(("raw", 1), 3, 100, 3, 0, now=0.0)  # raw[1] forwarded all it had
    assert merge.offer(OrderKey(200, "raw", 0, 0), 1, 1, "a", now=0.5) is Verdict.HELD
    merge.progress(("raw", 0), 1, 200, 5, 2, now=0.5)
    merge.progress(("raw", 1), 3, 100, 3, 3, now=1.0)  # too soon after the item came:
    assert merge.release(now=1.2) == ([], [])  # raw[1] may not have fetched all yet
    assert merge.next_deadline() == 60.5  # a stall, counted from the item's arrival
    merge.progress(("raw", 1), 3, 100, 3, 4, now=1.5)  # the router's confirmation, 1 s on
    released, passed = merge.release(now=1.5)
    assert [p for _, p in released] == ["a"]
    assert [(p.source, p.reason) for p in passed] == [(("raw", 1), PassReason.IDLE)]
    # stepped over for that item only: a later one waits for its own confirmation
    assert merge.offer(OrderKey(250, "raw", 0, 1), 5, 1, "b", now=1.6) is Verdict.HELD
    merge.progress(("raw", 0), 2, 250, 5, 6, now=1.6)
    assert merge.release(now=1.7) == ([], [])
    # raw[1] then sends an item older than what was released: behind, decided at once
    assert merge.offer(OrderKey(150, "raw", 1, 3), 7, 1, "c", now=1.8) is Verdict.BEHIND
    # and a later one takes its place in the order
    assert merge.offer(OrderKey(300, "raw", 1, 4), 8, 1, "d", now=1.8) is Verdict.HELD
    assert [p for _, p in merge.release(now=1.8)[0]] == ["b"]


def test_an_idle_source_is_stepped_over_by_the_routers_clock_when_read_late() -> None:
    """The same rule on the records' timestamps: a confirmation sent ``idle_s`` after the
    item was forwarded steps over it though both were read at once; one sent sooner does
    not, and neither clock mixes with the other (a stamp against a read time)."""
    merge: EventTimeMerge[str] = EventTimeMerge(idle_s=1.0, stall_s=60.0, max_bytes=1 << 30)
    merge.expect([("raw", 0), ("raw", 1)], now=0.0)
    merge.progress(("raw", 1), 0, NO_TIME, 0, 0, now=5.0, stamp=100.0)  # raw[1]: empty
    assert merge.offer(OrderKey(200, "raw", 0, 0), 1, 1, "a", now=5.0, stamp=100.5) is Verdict.HELD
    assert merge.offer(OrderKey(210, "raw", 0, 1), 2, 1, "b", now=5.0, stamp=101.0) is Verdict.HELD
    merge.progress(("raw", 0), 2, 210, 2, 3, now=5.0, stamp=101.0)
    merge.progress(("raw", 1), 0, NO_TIME, 0, 4, now=5.0, stamp=101.4)  # 0.9 s after "a"
    assert merge.release(now=5.0) == ([], [])
    merge.progress(("raw", 1), 0, NO_TIME, 0, 5, now=5.0, stamp=101.6)  # 1.1 s after "a"
    released, passed = merge.release(now=5.0)
    assert [p for _, p in released] == ["a"]  # "b" was forwarded 0.6 s before: it waits
    assert [(p.source, p.reason) for p in passed] == [(("raw", 1), PassReason.IDLE)]
    # a record without a timestamp falls back to the sequencer's clock alone
    assert merge.offer(OrderKey(220, "raw", 0, 2), 6, 1, "c", now=5.0) is Verdict.HELD
    merge.progress(("raw", 0), 3, 220, 3, 7, now=5.0, stamp=110.0)
    merge.progress(("raw", 1), 0, NO_TIME, 0, 8, now=5.5, stamp=110.0)
    assert [p for _, p in merge.release(now=5.5)[0]] == ["b"]
    merge.progress(("raw", 1), 0, NO_TIME, 0, 9, now=6.0, stamp=110.5)
    assert [p for _, p in merge.release(now=6.0)[0]] == ["c"]


def test_a_release_stops_at_its_limit_and_says_there_is_more() -> None:
    merge: EventTimeMerge[str] = EventTimeMerge(idle_s=0.0, stall_s=60.0, max_bytes=1 << 30)
    merge.expect([("raw", 0)], now=0.0)
    for i in range(5):
        merge.offer(OrderKey(10 * i, "raw", 0, i), i, 1, str(i), now=0.0)
    merge.progress(("raw", 0), 5, 40, 5, 5, now=0.0)
    assert [p for _, p in merge.release(now=0.0, limit=2)[0]] == ["0", "1"] and merge.more
    assert [p for _, p in merge.release(now=0.0, limit=2)[0]] == ["2", "3"] and merge.more
    assert [p for _, p in merge.release(now=0.0, limit=2)[0]] == ["4"] and not merge.more
    assert merge.resume_offset() == 6  # all decided: after the progress record


def test_a_source_with_records_not_forwarded_is_waited_for_stall_s() -> None:
    merge: EventTimeMerge[str] = EventTimeMerge(idle_s=1.0, stall_s=60.0, max_bytes=1 << 30)
    merge.expect([("raw", 0), ("raw", 1)], now=0.0)
    merge.progress(("raw", 1), 3, 100, 50, 0, now=0.0)  # 47 records left to forward
    merge.offer(OrderKey(200, "raw", 0, 0), 1, 1, "a", now=0.0)
    merge.progress(("raw", 0), 1, 200, 1, 2, now=0.0)
    assert merge.release(now=30.0) == ([], [])
    assert merge.release(now=59.0) == ([], [])
    released, passed = merge.release(now=60.0)
    assert [p for _, p in released] == ["a"]
    assert [p.reason for p in passed] == [PassReason.STALL]


def test_a_source_never_heard_of_is_a_stalled_one() -> None:
    merge: EventTimeMerge[str] = EventTimeMerge(idle_s=1.0, stall_s=60.0, max_bytes=1 << 30)
    merge.expect([("raw", 0), ("raw", 1)], now=0.0)
    merge.offer(OrderKey(200, "raw", 0, 0), 0, 1, "a", now=0.0)
    assert merge.release(now=5.0) == ([], [])
    assert merge.release(now=59.0) == ([], [])
    assert merge.release(now=60.0)[1][0].reason is PassReason.STALL  # known since 0.0


def test_past_max_bytes_the_blockers_are_passed() -> None:
    merge: EventTimeMerge[str] = EventTimeMerge(idle_s=1.0, stall_s=FOREVER, max_bytes=25)
    merge.expect([("raw", 0), ("raw", 1)], now=0.0)
    for i in range(2):
        merge.offer(OrderKey(10 + i, "raw", 0, i), i, 10, str(i), now=0.0)
        assert merge.release(now=0.0) == ([], [])
    merge.offer(OrderKey(12, "raw", 0, 2), 2, 10, "2", now=0.0)
    released, passed = merge.release(now=0.0)
    assert [p for _, p in released] == ["0", "1", "2"]
    assert [p.reason for p in passed] == [PassReason.MEMORY]
    assert merge.held_bytes == 0


def test_a_reforwarded_item_already_decided_is_a_copy_and_nothing_is_held_twice() -> None:
    merge = new_merge(2)
    merge.offer(OrderKey(1, "raw", 0, 0), 0, 1, 0, 0.0)
    merge.offer(OrderKey(2, "raw", 0, 1), 1, 1, 1, 0.0)
    merge.progress(("raw", 1), 0, 1, 5, 2, 0.0)  # raw[1] is at event time 1
    released, _ = merge.release(0.0)
    assert [k.offset for k, _ in released] == [0]
    assert merge.offer(OrderKey(1, "raw", 0, 0), 3, 1, 3, 0.0) is Verdict.COPY
    assert merge.offer(OrderKey(2, "raw", 0, 1), 4, 1, 4, 0.0) is Verdict.DUPLICATE
    assert merge.resume_offset() == 1
    assert merge.offer(None, 5, 1, 5, 0.0) is Verdict.NOW
    assert merge.offer(None, 4, 1, 4, 0.0) is Verdict.DONE  # re-read after a restart


def test_checkpoint_is_plain_versioned_data() -> None:
    merge = new_merge(2)
    merge.offer(OrderKey(1, "raw", 0, 0), 0, 1, 0, 0.0)
    data = merge.checkpoint()
    assert data["v"] == 1 and data["consumed"] == 1
    again = new_merge(2)
    again.restore(data, now=0.0)
    assert again.checkpoint() == data
