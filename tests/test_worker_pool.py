"""The decider pool's logic on an in-memory log (no broker): decisions in offset order,
skipped records read back, the position at assignment, restart and takeover from the
changelog, revoked partitions, a broker that lost data, a cancelled open. Under a second
each; the broker tests (test_worker_recovery, test_reliability_crash) run the same code
against Kafka."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from harness.fakes import MemoryLog
from harness.kafka import make_settings
from harness.worker import expected_decisions
from newsgen import items

from ndd_stream import jsonio
from ndd_stream.kafka.reads import Fetched
from ndd_stream.state.rocks import decode_checkpoint
from ndd_stream.worker.changelog import CHECKPOINT_KEY
from ndd_stream.worker.deciding import OutputTopics, PartitionDecider
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.pool import BrokerLostData, DeciderPool
from ndd_stream.worker.records import OutRecord, Source, kafka_timestamp_ms
from ndd_stream.worker.router import route_raw

SCOPED, RAW = "scoped", "raw"
TOPICS = OutputTopics("unique", "duplicate", "dlq", None, "changelog")
SETTINGS = make_settings()


def _lines(n: int, seed: int = 1) -> list[bytes]:
    """Items of one channel (one scope, so one scoped partition), a third re-sends.

    Seed 1: five of the first 12 are duplicates under the novelty rule (the generator's
    titles number each story, so a re-edited copy with another number is a new report).
    """
    return [jsonio.dumps(item) for item in items(n, seed=seed, channels=1)]


def _scoped(log: MemoryLog, lines: list[bytes], partition: int = 0) -> list[Fetched]:
    """What the router would forward: the lines as scoped records, raw offset = index."""
    out = []
    for offset, line in enumerate(lines):
        record, invalid = route_raw(line, None, Source(RAW, 0, offset), SETTINGS.item_format(),
                                    SCOPED, "dlq")
        assert invalid is None
        at = log.append(SCOPED, partition, record.key, record.value, list(record.headers))
        out.append(log.logs[(SCOPED, partition)][at])
    return out


def _pool(log: MemoryLog, state: Path) -> DeciderPool:
    return DeciderPool(state, SETTINGS.detector_config(), SETTINGS.item_format(), TOPICS, log,
                       WorkerMetrics(), scoped_topic=SCOPED)


def _decisions(log: MemoryLog) -> dict[str, list[tuple[str, str | None, str]]]:
    """Every decision produced, by identity (several for an item decided twice)."""
    out: dict[str, list[tuple[str, str | None, str]]] = {}
    for record in log.topic("unique") + log.topic("duplicate"):
        h = dict(record.headers)
        dup = h.get("ndd-duplicate-of")
        out.setdefault(h["ndd-identity"].decode(), []).append(
            (h["ndd-status"].decode(), dup.decode() if dup else None,
             h["ndd-story"].decode()))
    return out


def _want(lines: list[bytes]) -> dict[str, list[tuple[str, str | None, str]]]:
    want, _ = expected_decisions(SETTINGS, lines)
    return {identity: [decision] for identity, decision in want.items()}


def test_a_batch_is_decided_in_order_then_changelog_then_state(tmp_path: Path) -> None:
    log, lines = MemoryLog(), _lines(12)
    scoped = _scoped(log, lines)
    pool = _pool(log, tmp_path)

    async def run() -> None:
        assert await pool.process(scoped, log.send) == 12
        assert await pool.process(scoped[5:], log.send) == 0  # redelivered: skipped

    asyncio.run(run())
    assert _decisions(log) == _want(lines)
    assert sum(1 for [(status, _, _)] in _want(lines).values() if status != "unique") > 2
    changelog = log.topic("changelog")
    assert [r.key for r in changelog[-1:]] == [CHECKPOINT_KEY]
    assert decode_checkpoint(changelog[-1].value).next == 12
    assert len(changelog) == 12 + 1 + 1  # the opening sentinel, 12 documents, the checkpoint
    decider = pool.deciders[0]
    assert (decider.next_offset, decider.changelog_next) == (12, len(changelog))
    assert [r for r in log.reads if r[0] == SCOPED] == []
    pool.close()


def test_records_the_consumer_skipped_are_read_back_and_decided_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    log, lines = MemoryLog(), _lines(10)
    scoped = _scoped(log, lines)
    pool = _pool(log, tmp_path)

    async def run() -> None:
        await pool.process(scoped[:2], log.send)
        await pool.process([scoped[6], scoped[7]], log.send)  # 2-5 never delivered
        await pool.process(scoped[8:], log.send)

    with caplog.at_level(logging.WARNING, logger="ndd_stream.worker"):
        asyncio.run(run())
    assert [r for r in log.reads if r[0] == SCOPED] == [(SCOPED, 0, 2)]
    assert _decisions(log) == _want(lines)
    order = [int(dict(r.headers)["ndd-source-offset"]) for r in
             sorted(log.topic("unique") + log.topic("duplicate"), key=_produced)]
    assert order == list(range(10))
    assert [r.event for r in caplog.records] == ["offset_gap"]  # type: ignore[attr-defined]
    assert pool.metrics.gaps._value.get() == 1
    pool.close()


def _produced(record: Fetched) -> tuple[int, str]:
    return (int(dict(record.headers)["ndd-source-offset"]), record.topic)


def test_records_retention_removed_before_they_were_decided_are_reported_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    log, lines = MemoryLog(), _lines(8)
    scoped = _scoped(log, lines)
    log.delete_before(SCOPED, 0, 3)
    pool = _pool(log, tmp_path)

    async def run() -> None:
        await pool.process(scoped[:1], log.send)
        await pool.process(scoped[5:], log.send)

    with caplog.at_level(logging.WARNING, logger="ndd_stream.worker"):
        asyncio.run(run())
    lost = [r for r in caplog.records if getattr(r, "event", "") == "records_lost"]
    assert [r.getMessage() for r in lost] == [
        f"{SCOPED}[0]: offsets 1-2 are no longer in the topic and were never decided"]
    assert set(_decisions(log)) == {f"n{i}" for i in (0, 3, 4, 5, 6, 7)}
    assert pool.deciders[0].next_offset == 8
    pool.close()


def test_the_position_is_the_checkpoint_whatever_the_consumer_delivered(
        tmp_path: Path) -> None:
    """At an assignment the worker sends its consumer to each partition's position
    (``positions``, ``runtime.seek``): the checkpoint, not the group's committed offset."""
    log, lines = MemoryLog(), _lines(9)
    records = _scoped(log, lines)
    pool = _pool(log, tmp_path)

    async def run() -> list[dict[tuple[str, int], int]]:
        await pool.assign([0])
        opened = pool.positions()
        await pool.process(records[:4], log.send)
        return [opened, pool.positions()]

    assert asyncio.run(run()) == [{(SCOPED, 0): 0}, {(SCOPED, 0): 4}]
    pool.close()
    again = _pool(log, tmp_path)

    async def resumed() -> dict[tuple[str, int], int]:
        await again.assign([0, 1])
        return again.positions()

    assert asyncio.run(resumed()) == {(SCOPED, 0): 4, (SCOPED, 1): 0}
    again.close()


def test_records_delivered_before_the_partition_is_owned_come_again(tmp_path: Path) -> None:
    """Faust resumes fetching at an assignment before the rebalance callback has opened the
    partitions: a partition's last records can come while it is not owned yet. They are
    passed over; the consumer is sent back to the position and delivers them again, and a
    record delivered twice is decided once."""
    log, lines = MemoryLog(), _lines(9)
    records = _scoped(log, lines)
    pool = _pool(log, tmp_path)

    async def run() -> tuple[int, dict[tuple[str, int], int], int, int]:
        await pool.assign([1])
        passed = await pool.process(records[3:], log.send)  # partition 0: not owned yet
        await pool.assign([0, 1])
        at = pool.positions()
        again = await pool.process(records[at[(SCOPED, 0)]:], log.send)
        return passed, at, again, await pool.process(records[5:], log.send)

    assert asyncio.run(run()) == (0, {(SCOPED, 0): 0, (SCOPED, 1): 0}, 9, 0)
    assert _decisions(log) == _want(lines)
    pool.close()


def test_a_restart_resumes_at_the_state_and_a_takeover_at_the_changelog(
    tmp_path: Path,
) -> None:
    log, lines = MemoryLog(), _lines(12)
    scoped = _scoped(log, lines)
    first = _pool(log, tmp_path / "first")

    async def run(pool: DeciderPool, batch: list[Fetched]) -> int:
        await pool.assign([0])
        return await pool.process(batch, log.send)

    assert asyncio.run(run(first, scoped[:6])) == 6
    first.close()
    again = _pool(log, tmp_path / "first")  # same state directory: nothing read back
    assert asyncio.run(run(again, scoped[:8])) == 2
    again.close()
    other = _pool(log, tmp_path / "other")  # no state: rebuilt from the changelog
    assert asyncio.run(run(other, scoped)) == 4
    assert other.deciders[0].detector.window_documents() == 12
    other.close()
    assert _decisions(log) == _want(lines)  # every item once, as dedup decides


class Killed(Exception):
    """The worker dies (kill -9): what it had not committed is gone."""


def dies_after(log: MemoryLog, outputs: int) -> Callable[[OutRecord], Awaitable[Fetched]]:
    """A send that sends ``outputs`` decisions, then dies (a worker killed mid-batch)."""
    sent = 0

    async def send(record: OutRecord) -> Fetched:
        nonlocal sent
        if record.topic in ("unique", "duplicate"):
            if sent == outputs:
                raise Killed
            sent += 1
        return await log.send(record)

    return send


@pytest.mark.parametrize("every", [4, 1000])
def test_a_long_batch_is_checkpointed_in_pieces_so_a_kill_resends_few_outputs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int) -> None:
    """A batch of 30 records dies after 13 outputs were sent. Checkpointed every 4
    decisions (at records' boundaries), the restart re-decides and re-sends only items
    13 (sent, not checkpointed) ... 30; without pieces all 13 sent outputs come again."""
    monkeypatch.setattr("ndd_stream.worker.pool.CHECKPOINT_ITEMS", every)
    log, lines = MemoryLog(), _lines(30)
    scoped = _scoped(log, lines)
    first = _pool(log, tmp_path)
    with pytest.raises(Killed):
        asyncio.run(first.process(scoped, dies_after(log, 13)))
    first.close()  # the uncommitted RocksDB batch is dropped, as by a kill
    positions = [decode_checkpoint(r.value).next for r in log.topic("changelog")
                 if r.key == CHECKPOINT_KEY]
    assert positions == ([4, 8, 12] if every == 4 else [])
    again = _pool(log, tmp_path)
    assert asyncio.run(again.process(scoped, log.send)) == 30 - (positions or [0])[-1]
    again.close()
    decisions = _decisions(log)
    assert {i: d[:1] for i, d in decisions.items()} == _want(lines)  # none lost or changed
    assert all(len(set(d)) == 1 for d in decisions.values())  # a copy decides the same
    resent = sum(len(d) - 1 for d in decisions.values())
    assert resent == (1 if every == 4 else 13)


def test_a_rebalance_stops_a_long_run_at_its_next_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A revoke that arrives during a long run (a restart's gap read is a whole backlog)
    waits for the piece in flight only: the group would otherwise give the partition to
    another worker, which decides again what this one goes on deciding."""
    monkeypatch.setattr("ndd_stream.worker.pool.CHECKPOINT_ITEMS", 4)
    log, lines = MemoryLog(), _lines(30)
    scoped = _scoped(log, lines)
    first = _pool(log, tmp_path / "first")
    sent, revoking = 0, []

    async def send(record: OutRecord) -> Awaitable[Fetched]:
        nonlocal sent
        if record.topic in ("unique", "duplicate"):
            sent += 1
            if sent == 6:  # in the second piece
                revoking.append(asyncio.ensure_future(first.revoke([0])))
                await asyncio.sleep(0)  # the revoke runs up to the pool's lock
        return await log.send(record)

    async def run(pool: DeciderPool, send: Callable[[OutRecord], Awaitable[Any]]) -> int:
        await pool.assign([0])
        n = await pool.process(scoped, send)
        await asyncio.gather(*revoking)
        revoking.clear()
        return n

    assert asyncio.run(run(first, send)) == 8
    assert 0 not in first.deciders
    assert decode_checkpoint(log.topic("changelog")[-1].value).next == 8
    other = _pool(log, tmp_path / "other")  # the new owner, from the changelog
    assert asyncio.run(run(other, log.send)) == 22
    other.close()
    assert _decisions(log) == _want(lines)  # every item once: nothing decided twice


def test_records_of_a_revoked_partition_are_left_to_its_new_owner(tmp_path: Path) -> None:
    log, lines = MemoryLog(), _lines(4)
    scoped = _scoped(log, lines, partition=1)
    pool = _pool(log, tmp_path)

    async def run() -> int:
        await pool.assign([0, 1])
        await pool.revoke([1])
        return await pool.process(scoped, log.send)

    assert asyncio.run(run()) == 0
    assert sorted(pool.deciders) == [0] and log.topic("unique") == []
    pool.close()


def test_a_changelog_behind_the_local_state_is_refused(tmp_path: Path) -> None:
    log, lines = MemoryLog(), _lines(5)
    scoped = _scoped(log, lines)
    pool = _pool(log, tmp_path)
    asyncio.run(pool.process(scoped, log.send))
    pool.close()
    emptied = MemoryLog()  # the broker restarted empty

    with pytest.raises(BrokerLostData, match="the broker lost data"):
        asyncio.run(_pool(emptied, tmp_path).assign([0]))


def test_a_partition_open_cancelled_midway_is_not_opened_twice(tmp_path: Path) -> None:
    """A rebalance callback or a stop can cancel the coroutine waiting for a partition's
    store to open while the executor thread goes on opening it. The next waiter must get
    that store, not open the RocksDB directory a second time (its lock is held)."""
    pool = _pool(MemoryLog(), tmp_path)
    started, proceed, opened = threading.Event(), threading.Event(), threading.Event()
    open_sync = pool.partitions.open_sync

    def gated_open(partition: int) -> PartitionDecider:
        started.set()
        proceed.wait(30)
        try:
            return open_sync(partition)
        finally:
            opened.set()

    pool.partitions.open_sync = gated_open  # type: ignore[method-assign]

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        first = asyncio.create_task(pool.ensure(0))
        assert await loop.run_in_executor(None, started.wait, 30)  # opening in a thread
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        proceed.set()
        assert await loop.run_in_executor(None, opened.wait, 30)  # the store is open
        decider = await asyncio.wait_for(pool.ensure(0), timeout=60)
        assert pool.deciders == {0: decider}
        assert await pool.ensure(0) is decider

    try:
        asyncio.run(scenario())
    finally:
        pool.close()


@pytest.mark.parametrize("ms", [1, 999, 1_000, 1_001, 1_094_802_546_087, 1_795_765_065_388,
                                253_402_300_799_999])
def test_a_messages_kafka_timestamp_reads_back_as_the_records_milliseconds(ms: int) -> None:
    # Faust hands the record's milliseconds over as seconds; the router, the pool's sources
    # and the sequencer's stamp all read it back through this one function. Truncating
    # ms / 1000 * 1000 loses a millisecond for ~1% of values (1,001 and 1,094,802,546,087)
    message = SimpleNamespace(topic="news.raw", partition=3, offset=7, timestamp=ms / 1000)
    assert kafka_timestamp_ms(message) == ms
    assert Source.of_message(message) == Source("news.raw", 3, 7, ms)


@pytest.mark.parametrize("timestamp", [None, 0, 0.0, -0.001, -1])
def test_a_message_without_a_kafka_timestamp_has_none(timestamp: float | None) -> None:
    # Kafka's "no timestamp" is -1 ms; 0 is what a producer that set none may leave: neither
    # is an event time, so an item without its own timestamp is not put in 1970
    message = SimpleNamespace(topic="news.raw", partition=0, offset=0, timestamp=timestamp)
    assert kafka_timestamp_ms(message) is None
    assert Source.of_message(message).timestamp_ms is None


def test_hours_leaving_the_window_are_tombstoned_in_the_changelog(tmp_path: Path) -> None:
    """The changelog is compacted (topics/news.yaml): every document of an hour that leaves
    the window gets a tombstone (its key, no value) after it, so compaction reclaims it;
    a restore skips the tombstones."""
    log = MemoryLog()
    # one item every 30 minutes over 40 hours: the first hours leave the 24-hour window
    lines = [jsonio.dumps(item) for item in items(80, seed=3, channels=1, step_s=1800.0)]
    scoped = _scoped(log, lines)

    async def run() -> None:
        pool = _pool(log, tmp_path / "a")
        await pool.assign([0])
        await pool.process(scoped, log.send)
        pool.close()

    asyncio.run(run())
    changelog = log.topic("changelog")
    documents = {r.key for r in changelog if r.value is not None and r.key != CHECKPOINT_KEY}
    tombstones = [r for r in changelog if r.value is None]
    assert tombstones and {r.key for r in tombstones} <= documents
    first = {r.key: r.offset for r in changelog if r.value is not None}
    assert all(first[r.key] < r.offset for r in tombstones)  # the document, then its end
    assert len({r.key for r in tombstones}) == len(tombstones)

    async def restore() -> int:
        pool = _pool(log, tmp_path / "b")  # an empty state: all from the changelog
        await pool.assign([0])
        documents = pool.deciders[0].window_documents()
        pool.close()
        return int(documents)

    assert 0 < asyncio.run(restore()) < len(lines)


def _gated(pool: DeciderPool) -> tuple[threading.Event, list[int]]:
    """Opening ``pool``'s partitions waits for the event; the partitions opened, in order."""
    proceed, opened = threading.Event(), []
    open_sync = pool.partitions.open_sync

    def gated_open(partition: int) -> PartitionDecider:
        assert proceed.wait(30)
        opened.append(partition)
        return open_sync(partition)

    pool.partitions.open_sync = gated_open  # type: ignore[method-assign]
    return proceed, opened


def test_a_partition_that_opens_after_its_assignment_is_read_from_its_position(
        tmp_path: Path) -> None:
    """A restore longer than the rebalance may wait goes on after it: records delivered
    meanwhile are passed over (not waited for under the pool's lock), and once it has
    opened the partition is read from its position and decided as if it had opened at once."""
    log, lines = MemoryLog(), _lines(9)
    records = _scoped(log, lines)
    pool = _pool(log, tmp_path)
    proceed, _ = _gated(pool)

    async def run() -> tuple[int, int, Any, dict[tuple[str, int], int], int]:
        late = await pool.assign([0], within=0.05)
        passed = await asyncio.wait_for(pool.process(records[:5], log.send), 5)
        proceed.set()
        tp = await asyncio.wait_for(late[0], 30)
        at = pool.positions()
        return len(late), passed, tp, at, await pool.process(records[at[tp]:], log.send)

    try:
        assert asyncio.run(run()) == (1, 0, (SCOPED, 0), {(SCOPED, 0): 0}, 9)
        assert _decisions(log) == _want(lines)
    finally:
        pool.close()


def test_a_revocation_that_overtakes_an_opening_closes_what_it_opened(tmp_path: Path) -> None:
    log = MemoryLog()
    pool = _pool(log, tmp_path)
    proceed, _ = _gated(pool)

    async def run() -> tuple[Any, dict[int, Any]]:
        late = await pool.assign([0], within=0.05)
        await pool.revoke([0])
        proceed.set()
        return await asyncio.wait_for(late[0], 30), dict(pool.deciders)

    try:
        assert asyncio.run(run()) == (None, {})
    finally:
        pool.close()
    again = _pool(log, tmp_path)  # the store was closed: its RocksDB lock is free
    try:
        asyncio.run(again.assign([0]))
        assert list(again.deciders) == [0]
    finally:
        again.close()


def test_a_partition_given_back_while_it_opened_is_opened_again(tmp_path: Path) -> None:
    """Revoked and assigned again during one opening: what that opening read may be stale
    (another worker may have committed in between), so it is closed and opened again."""
    pool = _pool(MemoryLog(), tmp_path)
    proceed, opened = _gated(pool)

    async def run() -> tuple[list[Any], Any, list[int]]:
        late = await pool.assign([0], within=0.05)
        await pool.revoke([0])
        second = asyncio.create_task(pool.assign([0], within=30))
        await asyncio.sleep(0.05)
        proceed.set()
        return (await asyncio.wait_for(second, 30), await asyncio.wait_for(late[0], 30),
                list(pool.deciders))

    try:
        assert asyncio.run(run()) == ([], (SCOPED, 0), [0])
        assert opened == [0, 0]
    finally:
        pool.close()
