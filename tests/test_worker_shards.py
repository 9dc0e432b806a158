"""The sharded worker's logic on an in-memory log (no broker): a gatherer pool and a shard
pool pass prepared items and answers through the log; decisions equal dedup's, and a
gatherer or shard that stops at any point (write-ahead pending list, answers sent again,
prepared items sent again) changes none. tests/test_shards_broker.py runs the same code
against Kafka."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path

import pytest
from harness.fakes import MemoryLog
from test_worker_order import (
    PARTITIONS,
    Clock,
    by_partition,
    cross_channel_lines,
    event_order,
    forward_backlog,
    heartbeat,
)
from test_worker_order import _want as _want_ordered
from test_worker_pool import (
    RAW,
    SCOPED,
    SETTINGS,
    TOPICS,
    Killed,
    _decisions,
    _lines,
    _pool,
    _scoped,
    _want,
    dies_after,
)

from ndd_stream.kafka.reads import Fetched
from ndd_stream.state.pending import PendingSnapshot
from ndd_stream.state.rocks import decode_checkpoint
from ndd_stream.worker.changelog import CHECKPOINT_KEY
from ndd_stream.worker.deciding import LayoutChanged
from ndd_stream.worker.gathering import DEFAULT_MEMORY_BYTES, GatherDecider
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.pool import DeciderPool, OrderConfig
from ndd_stream.worker.records import Source
from ndd_stream.worker.router import route_raw
from ndd_stream.worker.sharding import ShardPartition
from ndd_stream.worker.shardwire import read_answers, read_prepared

SHARDS_TOPIC, SHARDS = "shards", 3
CONFIG = SETTINGS.detector_config()
ORDERED = SETTINGS.model_copy(update={"scope": "global"})


#: The gatherer's memory budget: the default, or 1 byte, so that every waiting item but the
#: head of the queue (and every re-read pending item) goes through the spill files.
BUDGETS = [DEFAULT_MEMORY_BYTES, 1]


def _gatherer(log: MemoryLog, state: Path, memory: int = DEFAULT_MEMORY_BYTES) -> DeciderPool:
    def make(partition: int, path: Path) -> GatherDecider:
        return GatherDecider(partition, path, CONFIG, SETTINGS.item_format(), TOPICS, SHARDS,
                             SHARDS_TOPIC, memory)
    return DeciderPool(state, CONFIG, SETTINGS.item_format(), TOPICS, log, WorkerMetrics(),
                       scoped_topic=SCOPED, factory=make)


def _shards(log: MemoryLog, state: Path) -> DeciderPool:
    make = partial(ShardPartition, config=CONFIG, shards=SHARDS,
                   changelog_topic="shards-changelog", scoped_topic=SCOPED)
    return DeciderPool(state, CONFIG, SETTINGS.item_format(), TOPICS, log, WorkerMetrics(),
                       scoped_topic=SHARDS_TOPIC, dir_prefix="shard",
                       factory=lambda p, path: make(p, path))


class Cursor:
    """What a consumer has delivered of each partition so far."""

    def __init__(self, log: MemoryLog) -> None:
        self.log = log
        self.at: dict[tuple[str, int], int] = {}

    def new(self, topic: str) -> list[Fetched]:
        out = []
        for (t, p), records in sorted(self.log.logs.items()):
            if t == topic:
                # a consumer below the log's start goes on at its start (retention)
                out += records[max(self.at.get((t, p), 0), self.log.first.get((t, p), 0)):]
                self.at[(t, p)] = len(records)
        return out


def _check_lag(gather: DeciderPool) -> None:
    """The per-shard lag a gatherer keeps as it goes equals a recount of its queue, and it
    holds no answers but those of items in its queue (or of re-read ones, while it re-reads
    them)."""
    for decider in gather.deciders.values():
        assert isinstance(decider, GatherDecider)
        want = dict.fromkeys(range(SHARDS), 0)
        queued = set()
        for entry in decider.queue:
            if entry.waits:
                queued.add((entry.scope, entry.number))
                got = decider.answers.get((entry.scope, entry.number), {})
                for shard in want:
                    want[shard] += shard not in got
        assert decider.waiting() == want
        if not decider.awaits_any():  # an item without answers has no entry
            assert set(decider.answers) <= queued


async def _resume(pool: DeciderPool, cursor: Cursor) -> None:
    """An assignment: the pool opens partition 0, and the consumer is sent to its position
    (the worker's ``runtime.seek``)."""
    await pool.assign([0])
    cursor.at.update(pool.positions())


async def _drive(log: MemoryLog, gather: DeciderPool, shards: DeciderPool,
                 gc: Cursor, sc: Cursor, rounds: int = 100) -> None:
    """Deliver new records to both pools until nothing moves."""
    for _ in range(rounds):
        scoped, prepared = gc.new(SCOPED), sc.new(SHARDS_TOPIC)
        if not scoped and not prepared:
            return
        if scoped:
            await gather.process(scoped, log.send)
            _check_lag(gather)
        if prepared:
            await shards.process(prepared, log.send)


def _items(records: list[Fetched]) -> int:
    """Prepared items in records of the shards topic (a record carries a batch of them)."""
    return sum(len(read_prepared(r.value)[0]) for r in records)


@pytest.mark.parametrize("memory", BUDGETS)
@pytest.mark.parametrize("batch_bytes", [1, 262_144])
def test_a_sharded_scope_decides_as_dedup_and_spreads_its_documents(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_bytes: int, memory: int) -> None:
    """``batch_bytes``: 1 sends every prepared item and answer as a record of its own, the
    default the 40 items of the batch as one record per shard."""
    monkeypatch.setattr("ndd_stream.worker.shardwire.BATCH_BYTES", batch_bytes)
    log, lines = MemoryLog(), _lines(40)
    _scoped(log, lines)
    gather, shards = _gatherer(log, tmp_path / "g", memory), _shards(log, tmp_path / "s")
    parked: list[int] = []

    async def run() -> None:
        gc, sc = Cursor(log), Cursor(log)
        await gather.process(gc.new(SCOPED), log.send)  # all 40 admitted, none answered
        parked.append(gather.deciders[0].spill.items)
        await _drive(log, gather, shards, gc, sc)

    asyncio.run(run())
    # within the budget nothing is parked; with 1 byte every item but the queue's head
    assert parked == [0 if memory == DEFAULT_MEMORY_BYTES else 39]
    assert gather.deciders[0].spill.items == 0 and gather.deciders[0].held == 0
    assert not list(gather.deciders[0].spill.directory.glob("*.seg"))  # emptied, deleted
    assert _decisions(log) == _want(lines)
    held = [d.window_documents() for d in shards.deciders.values()]
    assert len(held) == SHARDS and sum(held) == 40 and min(held) > 0
    assert gather.deciders[0].window_documents() == 0  # the documents live in the shards
    assert _items(log.topic(SHARDS_TOPIC)) == 40 * SHARDS
    assert len(log.topic(SHARDS_TOPIC)) == (40 if batch_bytes == 1 else 1) * SHARDS
    assert decode_checkpoint(log.topic("changelog")[-1].value).pending == ()
    gather.close()
    shards.close()


@pytest.mark.parametrize(("answers_seen", "moved", "batch_bytes", "memory"), [
    (0, False, 262_144, BUDGETS[0]), (1, False, 262_144, BUDGETS[0]),
    (2, False, 262_144, BUDGETS[0]), (0, True, 262_144, BUDGETS[0]),
    (2, True, 262_144, BUDGETS[0]), (7, False, 1, BUDGETS[0]), (31, False, 1, BUDGETS[0]),
    (31, True, 1, BUDGETS[0]), (1, False, 262_144, 1), (2, True, 262_144, 1),
    (7, False, 1, 1)])
@pytest.mark.parametrize("chunk", [4096, 3])
def test_a_gatherer_stopped_with_items_pending_decides_them_as_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers_seen: int, moved: bool,
        batch_bytes: int, memory: int, chunk: int) -> None:
    """The gatherer admits and prepares items, the shards answer some, the gatherer stops
    (its in-memory queue and answers are lost); a new one re-reads from its checkpoint,
    admits the pending items again (same numbers), sends them again (the shards skip them)
    and decides everything as dedup. ``moved``: the new one is on another worker, without
    local state: the pending list comes from the changelog's checkpoint. ``answers_seen``:
    answer records read before the stop (one per shard by default, one per item and shard
    with ``batch_bytes`` 1). ``chunk``: the pending list's chunk (3: listed in chunks)."""
    monkeypatch.setattr("ndd_stream.worker.shardwire.BATCH_BYTES", batch_bytes)
    monkeypatch.setattr("ndd_stream.state.pending.CHUNK", chunk)
    log, lines = MemoryLog(), _lines(30, seed=3)
    _scoped(log, lines[:20])
    gather, shards = _gatherer(log, tmp_path / "g", memory), _shards(log, tmp_path / "s")
    gc, sc = Cursor(log), Cursor(log)

    async def first() -> None:
        await gather.process(gc.new(SCOPED), log.send)  # 20 items prepared
        await shards.process(sc.new(SHARDS_TOPIC), log.send)  # 60 answers
        answers = gc.new(SCOPED)
        await gather.process(answers[:answers_seen], log.send)  # then the gatherer stops

    asyncio.run(first())
    checkpoint = gather.deciders[0].checkpoint
    assert checkpoint.pending  # the write-ahead list
    assert isinstance(checkpoint.pending, PendingSnapshot) == (chunk < len(checkpoint.pending))
    gather.close()
    again = _gatherer(log, tmp_path / ("elsewhere" if moved else "g"), memory)
    prepared_before = len(log.topic(SHARDS_TOPIC))

    async def second() -> None:
        # a restarted consumer resumes at the checkpoint: the pool re-reads from there
        await _resume(again, gc)
        await _drive(log, again, shards, gc, sc)
        for offset, line in enumerate(lines[20:], start=20):  # the router forwards more
            record, _ = route_raw(line, None, Source(RAW, 0, offset),
                                  SETTINGS.item_format(), SCOPED, "dlq")
            await log.send(record)
        await _drive(log, again, shards, gc, sc)

    asyncio.run(second())
    assert _decisions(log) == _want(lines)  # each item decided once, as dedup
    resent = log.topic(SHARDS_TOPIC)[prepared_before:]
    assert _items(resent) >= len(checkpoint.pending) * SHARDS > 0
    assert sum(d.window_documents() for d in shards.deciders.values()) == 30
    again.close()
    shards.close()


def test_a_shard_restarted_from_its_store_answers_on_without_indexing_twice(
        tmp_path: Path) -> None:
    log, lines = MemoryLog(), _lines(24, seed=5)
    scoped = _scoped(log, lines)
    gather, shards = _gatherer(log, tmp_path / "g"), _shards(log, tmp_path / "s")
    gc, sc = Cursor(log), Cursor(log)

    async def first() -> None:
        gc.new(SCOPED)
        await gather.process(scoped[:12], log.send)
        await shards.process(sc.new(SHARDS_TOPIC), log.send)

    asyncio.run(first())
    shards.close()  # a clean stop; the checkpoint is at the prepared items answered
    shards2 = _shards(log, tmp_path / "s")
    sc2 = Cursor(log)  # a new consumer from the start: everything is delivered again

    async def second() -> None:
        await _drive(log, gather, shards2, gc, sc2)
        await gather.process(scoped[12:], log.send)
        await _drive(log, gather, shards2, gc, sc2)

    asyncio.run(second())
    assert _decisions(log) == _want(lines)
    assert sum(d.window_documents() for d in shards2.deciders.values()) == 24
    gather.close()
    shards2.close()



def test_pending_items_that_retention_removed_do_not_stall_the_rest(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The gatherer stopped with items pending, and retention removed some of them before it
    came back: it says so (records_lost) and decides the others, instead of waiting for them
    forever."""
    log, lines = MemoryLog(), _lines(12, seed=7)
    _scoped(log, lines)
    gather, shards = _gatherer(log, tmp_path / "g"), _shards(log, tmp_path / "s")
    gc, sc = Cursor(log), Cursor(log)

    async def first() -> None:
        await gather.process(gc.new(SCOPED), log.send)  # 12 prepared, none decided

    asyncio.run(first())
    assert gather.deciders[0].checkpoint.pending == tuple((n, n) for n in range(12))
    gather.close()
    log.delete_before(SCOPED, 0, 3)  # items 0-2 are gone
    again = _gatherer(log, tmp_path / "g")

    async def second() -> None:
        await _resume(again, gc)
        await _drive(log, again, shards, gc, sc)

    asyncio.run(second())
    decided = _decisions(log)
    assert len(decided) == 9
    # the shards hold items 0-2 (they were prepared); the rest keep the numbers the shards
    # saw, so they are decided as dedup decides them among all 12
    want = _want(lines)
    assert decided == {identity: want[identity] for identity in decided}
    assert "records_lost" in {getattr(r, "event", None) for r in caplog.records}
    gatherer = again.deciders[0]
    assert isinstance(gatherer, GatherDecider)
    assert not gatherer.queue and not gatherer.answers, "answers of lost items are kept"
    assert gatherer.held == 0
    again.close()
    shards.close()


def test_an_answer_to_an_item_retention_removed_is_dropped_with_it(tmp_path: Path) -> None:
    """One shard answered before the gatherer stopped, and more items came after that answer;
    retention then removed the first items. The restart re-reads the answer among its pending
    items: the answers to the lost items are dropped once the re-reading is over, not kept
    (and counted against the memory budget) for good, and the lag counts only what waits."""
    log, lines = MemoryLog(), _lines(12, seed=7)
    _scoped(log, lines[:6])
    gather, shards = _gatherer(log, tmp_path / "g"), _shards(log, tmp_path / "s")
    gc = Cursor(log)

    async def first() -> None:
        await gather.process(gc.new(SCOPED), log.send)  # items 0-5 prepared
        await shards.process([r for r in log.topic(SHARDS_TOPIC) if r.partition == 0],
                             log.send)  # shard 0 answers them
        for offset, line in enumerate(lines[6:], start=6):  # the router forwards more
            record, _ = route_raw(line, None, Source(RAW, 0, offset),
                                  SETTINGS.item_format(), SCOPED, "dlq")
            await log.send(record)
        await gather.process(gc.new(SCOPED), log.send)  # shard 0's answer, items 6-11

    asyncio.run(first())
    stopped = gather.deciders[0]
    assert isinstance(stopped, GatherDecider)
    assert stopped.waiting() == {0: 6, 1: 12, 2: 12}
    gather.close()
    log.delete_before(SCOPED, 0, 3)  # items 0-2 are gone, shard 0's answer to them is not
    again = _gatherer(log, tmp_path / "g")
    sc = Cursor(log)
    sc.at[(SHARDS_TOPIC, 0)] = 1  # shard 0 read its first record

    async def second() -> None:
        await _resume(again, gc)
        await _drive(log, again, shards, gc, sc)  # checks the lag and the answers kept

    asyncio.run(second())
    decided = _decisions(log)
    assert len(decided) == 9
    want = _want(lines)
    assert decided == {identity: want[identity] for identity in decided}
    gatherer = again.deciders[0]
    assert isinstance(gatherer, GatherDecider)
    assert not gatherer.answers and gatherer.held == 0
    assert gatherer.waiting() == {0: 0, 1: 0, 2: 0}
    again.close()
    shards.close()


@pytest.mark.parametrize("every", [4, 256])
def test_an_answer_completing_many_items_is_decided_in_checkpointed_pieces(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int) -> None:
    """Two shards answered 30 items, the third answers them in one record: that record
    completes all 30. The gatherer decides at most ``every`` per call and the pool
    checkpoints between calls, so a kill after 13 outputs re-sends 1 of them, not 13."""
    monkeypatch.setattr("ndd_stream.worker.pool.CHECKPOINT_ITEMS", every)
    log, lines = MemoryLog(), _lines(30, seed=4)
    _scoped(log, lines)
    gather, shards = _gatherer(log, tmp_path / "g"), _shards(log, tmp_path / "s")
    gc = Cursor(log)

    async def first() -> None:
        await gather.process(gc.new(SCOPED), log.send)  # 30 items prepared
        await shards.process(log.topic(SHARDS_TOPIC), log.send)
        answers = gc.new(SCOPED)
        last = [r for r in answers if read_answers(r.value)[0].shard == SHARDS - 1]
        assert len(last) == 1 and len(read_answers(last[0].value)) == 30
        await gather.process([r for r in answers if r is not last[0]], log.send)
        assert not _decisions(log)  # every item waits for the last shard
        killed_at.append(last[0].offset)
        await gather.process(last, dies_after(log, 13))

    killed_at: list[int] = []
    with pytest.raises(Killed):
        asyncio.run(first())
    gather.close()  # the uncommitted RocksDB batch is dropped, as by a kill
    listed = [len(decode_checkpoint(r.value).pending) for r in log.topic("changelog")
              if r.key == CHECKPOINT_KEY]
    assert (listed[-3:] == [26, 22, 18]) if every == 4 else (listed[-1] == 30)
    again = _gatherer(log, tmp_path / "g")
    sc = Cursor(log)
    sc.at.update({(SHARDS_TOPIC, p): len(log.logs[(SHARDS_TOPIC, p)]) for p in range(SHARDS)})
    gc.at[(SCOPED, 0)] = killed_at[0]  # the consumer delivers the uncommitted record again

    async def second() -> None:
        await _drive(log, again, shards, gc, sc)

    asyncio.run(second())
    decisions = _decisions(log)
    assert {i: d[:1] for i, d in decisions.items()} == _want(lines)  # none lost or changed
    assert all(len(set(d)) == 1 for d in decisions.values())  # a copy decides the same
    resent = sum(len(d) - 1 for d in decisions.values())
    assert resent == (1 if every == 4 else 13)
    again.close()
    shards.close()


def _ordered_gatherer(log: MemoryLog, state: Path, clock: Clock,
                      memory: int = DEFAULT_MEMORY_BYTES) -> DeciderPool:
    def make(partition: int, path: Path) -> GatherDecider:
        return GatherDecider(partition, path, ORDERED.detector_config(), ORDERED.item_format(),
                             TOPICS, SHARDS, SHARDS_TOPIC, memory)
    pool = DeciderPool(state, CONFIG, ORDERED.item_format(), TOPICS, log, WorkerMetrics(),
                       scoped_topic=SCOPED, factory=make, clock=clock,
                       order=OrderConfig(idle_s=1.0, stall_s=60.0, max_bytes=1 << 30))
    pool.expect([(RAW, p) for p in range(PARTITIONS)])
    return pool


@pytest.mark.parametrize(("crash_at", "moved", "memory"), [
    (100, False, BUDGETS[0]), (100, True, BUDGETS[0]), (130, False, BUDGETS[0]),
    (130, True, BUDGETS[0]), (100, True, 1), (130, False, 1)])
@pytest.mark.parametrize("every", [256, 3])
def test_a_gatherer_in_event_time_order_stopped_anywhere_decides_as_dedup(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_at: int, moved: bool,
        memory: int, every: int) -> None:
    """``every``: the pool's checkpoint interval (3: batches checkpointed in pieces, and
    the pending list packed in chunks of 2, state/pending.py). A cross-channel backlog in
    event-time order (items released by the sequencer, then admitted): the gatherer stops
    with items pending, and comes back on the same worker or on another one (the pending
    list then comes from the changelog's checkpoint). The items the sequencer had released
    must be admitted again, not taken for decided."""
    monkeypatch.setattr("ndd_stream.worker.pool.CHECKPOINT_ITEMS", every)
    if every < 256:
        monkeypatch.setattr("ndd_stream.state.pending.CHUNK", 2)
    lines = cross_channel_lines(120, seed=9)
    parts = by_partition(lines)
    log = MemoryLog()
    forward_backlog(log, parts, chunk=30, seed=crash_at)
    clock = Clock()
    gather = _ordered_gatherer(log, tmp_path / "g", clock, memory)
    shards = _shards(log, tmp_path / "s")
    records = list(log.logs[(SCOPED, 0)])
    sc = Cursor(log)

    async def first() -> None:
        await gather.process(records[:crash_at], log.send)
        await shards.process(sc.new(SHARDS_TOPIC), log.send)
        answers = log.logs[(SCOPED, 0)][len(records):]
        await gather.process(answers[:len(answers) // 2], log.send)

    asyncio.run(first())
    listed = gather.deciders[0].checkpoint.pending
    assert listed and isinstance(listed, PendingSnapshot) == (every < 256)
    gather.close()
    again = _ordered_gatherer(log, tmp_path / ("elsewhere" if moved else "g"), clock, memory)
    gc = Cursor(log)
    gc.at[(SCOPED, 0)] = crash_at  # Faust resumes at its committed offset, here the stop,
    # and the worker sends it back to the checkpoint (``_resume``)

    async def second() -> None:
        await _resume(again, gc)
        for _ in range(60):
            await _drive(log, again, shards, gc, sc)
            clock.now += 5.0  # the feed is over: the routers confirm after the idle wait
            heartbeat(log)
        await _drive(log, again, shards, gc, sc)

    asyncio.run(second())
    got = {identity: set(d) for identity, d in _decisions(log).items()}
    assert got == _want_ordered(event_order(parts))
    again.close()
    shards.close()


@pytest.mark.parametrize("moved", [False, True])
def test_state_built_for_another_number_of_shards_is_refused(tmp_path: Path,
                                                            moved: bool) -> None:
    """A change of NDD_SHARDS on a running deployment: the documents are where the old
    layout put them, so the new one would miss a whole window's near duplicates. Opening
    the partition (from the local state, or from the changelog on another worker) refuses,
    naming both numbers; the documents of an unsharded window are not found by shards."""
    log, lines = MemoryLog(), _lines(12)
    _scoped(log, lines)
    plain = _pool(log, tmp_path / "plain")
    asyncio.run(plain.process(log.topic(SCOPED), log.send))
    plain.close()
    gather = _gatherer(log, tmp_path / ("gather" if moved else "plain"))
    refused = f"NDD_SHARDS=1 and this worker runs NDD_SHARDS={SHARDS}"
    with pytest.raises(LayoutChanged, match=refused):
        asyncio.run(gather.assign([0]))
    assert gather.deciders == {}

    # and back: a sharded scope's gatherer and shards, then the unsharded worker
    log, lines = MemoryLog(), _lines(12, seed=5)
    _scoped(log, lines)
    gather, shards = _gatherer(log, tmp_path / "g"), _shards(log, tmp_path / "s")
    asyncio.run(_drive(log, gather, shards, Cursor(log), Cursor(log)))
    gather.close()
    shards.close()
    refused = f"NDD_SHARDS={SHARDS} and this worker runs NDD_SHARDS=1"
    with pytest.raises(LayoutChanged, match=refused):
        asyncio.run(_pool(log, tmp_path / ("other" if moved else "g")).assign([0]))
    fewer = partial(ShardPartition, config=CONFIG, shards=SHARDS - 1,
                    changelog_topic="shards-changelog", scoped_topic=SCOPED)
    two = DeciderPool(tmp_path / ("s2" if moved else "s"), CONFIG, SETTINGS.item_format(),
                      TOPICS, log, WorkerMetrics(), scoped_topic=SHARDS_TOPIC,
                      dir_prefix="shard", factory=lambda p, path: fewer(p, path))
    with pytest.raises(LayoutChanged, match=f"NDD_SHARDS={SHARDS} and"):
        asyncio.run(two.assign([0]))


def test_an_empty_state_takes_any_number_of_shards(tmp_path: Path) -> None:
    """Nothing decided yet: no layout to keep (a first start, or a new app id)."""
    log = MemoryLog()
    plain = _pool(log, tmp_path / "a")
    asyncio.run(plain.assign([0]))
    plain.close()
    gather = _gatherer(log, tmp_path / "a")
    asyncio.run(gather.assign([0]))
    assert list(gather.deciders) == [0]
    gather.close()
