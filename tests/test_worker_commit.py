"""The committer's protocol without a broker (worker/commit.py): exactly-once on an
in-memory log with transactions (harness.fakes.MemoryTransactions), killed at each step of
a commit and resumed by a fresh worker; the router's pieces. Milliseconds each; the
broker tests (test_exactly_once, test_reliability_crash) run the same code on Kafka."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from harness.fakes import Crash, MemoryGroup, MemoryLog, MemoryTransactions
from harness.kafka import make_settings
from test_worker_pool import SCOPED, TOPICS, _decisions, _lines, _scoped, _want

from ndd_stream.kafka.transactions import TransactionAborted
from ndd_stream.state.rocks import decode_checkpoint
from ndd_stream.worker.changelog import CHECKPOINT_KEY
from ndd_stream.worker.commit import (
    AcknowledgingCommitter,
    Reached,
    TransactionalCommitter,
)
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.pool import DeciderPool
from ndd_stream.worker.records import PROGRESS_KEY, OutRecord, Progress
from ndd_stream.worker.router import Router

SETTINGS = make_settings()


OVERLAP = pytest.mark.parametrize("overlap", [False, True], ids=["in-turn", "overlapped"])
"""A pool's commits one after the other, or each overlapping the next piece's decisions
(the worker's decider: ``TransactionalCommitter(overlap=True)``)."""


def _pool(log: MemoryLog, txns: MemoryTransactions, state: Path,
          piece_items: int = 4, overlap: bool = False) -> DeciderPool:
    committer = TransactionalCommitter(txns, WorkerMetrics(), piece_items, overlap=overlap)
    return DeciderPool(state, SETTINGS.detector_config(), SETTINGS.item_format(), TOPICS, log,
                       WorkerMetrics(), scoped_topic=SCOPED, committer=committer)


def _process(pool: DeciderPool, *batches: list[Any]) -> int:
    """Decide ``batches`` one after the other in one event loop, then wait for the commits
    in flight (and the redoing of those that failed), as a worker's loop does."""
    async def run() -> int:
        decided = 0
        for batch in batches:
            decided += await pool.process(batch, log_send(pool))
        await pool.drain()
        pool.committer.failed()
        return decided

    return asyncio.run(run())


def log_send(pool: DeciderPool) -> Any:
    return None  # exactly-once pieces never use Faust's producer


def _repeats(log: MemoryLog) -> int:
    return sum(len(d) - 1 for d in _decisions(log).values())


@OVERLAP
def test_pieces_commit_outputs_changelog_checkpoint_and_offset_together(
        tmp_path: Path, overlap: bool) -> None:
    log, lines = MemoryLog(), _lines(12)
    txns = MemoryTransactions(log)
    scoped = _scoped(log, lines)
    pool = _pool(log, txns, tmp_path, overlap=overlap)
    assert _process(pool, scoped) == 12
    assert pool.deciders[0].next_offset == 12  # RocksDB written after each commit
    pool.close()
    assert _decisions(log) == _want(lines)
    assert txns.committed == {(SCOPED, 0): 12}
    assert txns.commits == 3  # pieces of 4 decisions
    checkpoints = [decode_checkpoint(r.value).next for r in log.topic("changelog")
                   if r.key == CHECKPOINT_KEY]
    assert checkpoints == [4, 8, 12]


@OVERLAP
@pytest.mark.parametrize("before", [True, False], ids=["before-commit", "after-commit"])
@pytest.mark.parametrize("at", [1, 2, 3])
def test_a_kill_at_any_commit_repeats_and_loses_nothing(tmp_path: Path, at: int,
                                                        before: bool, overlap: bool) -> None:
    """Killed just before the broker commits piece ``at`` (nothing of it is visible) or
    just after (RocksDB not written yet): the next worker, on the same state directory or
    on none, goes on from the committed changelog and offset."""
    log, lines = MemoryLog(), _lines(14)
    txns = MemoryTransactions(log)
    scoped = _scoped(log, lines)
    commits = 0

    def crash(tps: list[tuple[str, int]], is_before: bool) -> None:
        nonlocal commits
        if is_before == before and tps[0][0] == SCOPED:
            commits += 1
            if commits == at:
                raise Crash

    txns.crash = crash
    first = _pool(log, txns, tmp_path / "first", overlap=overlap)
    with pytest.raises(Crash):
        _process(first, scoped)
    first.close()  # the uncommitted RocksDB batch is dropped, as by a kill
    txns.crash = lambda tps, is_before: None
    for state in ("first", "other"):  # the restarted worker, and a new owner
        again = _pool(log, MemoryTransactions(log) if state == "other" else txns,
                      tmp_path / state, overlap=overlap)
        start = (txns.committed.get((SCOPED, 0), 0))
        _process(again, scoped[start:])
        again.close()
        assert {i: d[:1] for i, d in _decisions(log).items()} == _want(lines)
        assert _repeats(log) == 0
        if state == "first":
            break


def test_a_fenced_owner_commits_nothing(tmp_path: Path) -> None:
    """A zombie (paused past its session) whose partition the group gave to a new owner:
    its next commit, with the generation the group left behind, fails and shows nothing;
    the new owner decides every item once."""
    log, lines, group = MemoryLog(), _lines(12), MemoryGroup()
    txns = MemoryTransactions(log, group)
    scoped = _scoped(log, lines)
    zombie = _pool(log, txns, tmp_path / "zombie")
    asyncio.run(zombie.process(scoped[:4], log.send))
    group.rebalance()  # without the zombie
    owner = _pool(log, MemoryTransactions(log, group), tmp_path / "owner")
    asyncio.run(owner.ensure(0))  # open: reads the committed changelog
    asyncio.run(zombie.process(scoped[4:8], log.send))  # fenced: left to the owner
    assert 0 not in zombie.deciders and zombie.owned == set()
    asyncio.run(zombie.process(scoped[8:], log.send))  # and nothing of it decided again
    zombie.close()
    asyncio.run(owner.process(scoped[4:], log.send))
    owner.close()
    assert _decisions(log) == _want(lines)


def test_a_commit_refused_while_the_group_moved_on_is_redone_once_assigned_again(
        tmp_path: Path) -> None:
    """The worker is dropped from the group (paused past its session) with a piece open;
    the rebalance that revokes its partition commits the piece, refused to the past
    member. The worker joins again and is given the same partition: the refusal, seen
    before that assignment, must not leave the partition to a rebalance that has already
    ended. It is opened from what was committed and every item is decided once."""
    log, lines, group = MemoryLog(), _lines(14), MemoryGroup()
    txns = MemoryTransactions(log, group)
    scoped = _scoped(log, lines)
    metrics = WorkerMetrics()
    committer = TransactionalCommitter(txns, metrics, 4, overlap=True)
    pool = DeciderPool(tmp_path, SETTINGS.detector_config(), SETTINGS.item_format(), TOPICS,
                       log, metrics, scoped_topic=SCOPED, committer=committer)

    def refused() -> int:
        return int(metrics.registry.get_sample_value(
            "ndd_transaction_failures_total", {"kind": "ProducerFenced"}) or 0)

    async def run() -> None:
        await pool.process(scoped[:6], log_send(pool))  # a piece of 2 left open
        group.rebalance()  # the worker is not a member now
        await pool.revoke([0])
        assert refused() == 1
        txns.generation = group.rebalance()  # it joined again
        await pool.assign([0])
        start = txns.committed.get((SCOPED, 0), 0)
        await pool.process(scoped[start:], log_send(pool))  # the consumer, sent there
        await pool.drain()
        pool.committer.failed()

    asyncio.run(run())
    assert pool.owned == {0} and 0 in pool.deciders
    pool.close()
    assert {i: d[:1] for i, d in _decisions(log).items()} == _want(lines)
    assert _repeats(log) == 0
    assert txns.committed == {(SCOPED, 0): 14}


@OVERLAP
@pytest.mark.parametrize("at", [1, 2, 3])
def test_an_aborted_commit_is_redone_after_the_partition_opens_again(
        tmp_path: Path, at: int, overlap: bool) -> None:
    """A leader or coordinator that moved: piece ``at``'s transaction aborts (nothing of
    it visible). The pool opens the partition again from what it committed, decides the
    records handed out since, and goes on: every item once, nothing lost."""
    log, lines = MemoryLog(), _lines(14)
    txns = MemoryTransactions(log)
    scoped = _scoped(log, lines)
    commits = 0

    def abort(tps: list[tuple[str, int]], before: bool) -> None:
        nonlocal commits
        if before and tps[0][0] == SCOPED:
            commits += 1
            if commits == at:
                raise TransactionAborted(f"{tps}: commit: abortable: NOT_COORDINATOR")

    txns.crash = abort
    pool = _pool(log, txns, tmp_path, overlap=overlap)
    _process(pool, scoped)
    pool.close()
    assert {i: d[:1] for i, d in _decisions(log).items()} == _want(lines)
    assert _repeats(log) == 0
    assert txns.committed == {(SCOPED, 0): 14}
    assert txns.aborts == 1


@pytest.mark.parametrize("batches", [1, 3], ids=["one-batch", "a-batch-a-piece"])
def test_work_decided_on_a_failed_commit_is_decided_again_never_published(
        tmp_path: Path, batches: int) -> None:
    """Overlapped commits: the first piece's transaction is slow, then aborts, while the
    pieces after it are decided on the state that holds its documents. None of them is
    committed (each waits for the one before); the partition opens again from what it
    committed and every item is decided once, and as in turn: nothing published twice,
    nothing lost, no decision made against documents that were never committed."""
    log, lines = MemoryLog(), _lines(12)
    txns = MemoryTransactions(log)
    scoped = _scoped(log, lines)
    committing, release = threading.Event(), threading.Event()
    failed = [True]

    def slow_then_abort(tps: list[tuple[str, int]], before: bool) -> None:
        if before and failed:
            failed.pop()
            committing.set()
            release.wait(10.0)  # the next pieces are decided meanwhile
            raise TransactionAborted(f"{tps}: commit: abortable: NOT_COORDINATOR")

    txns.crash = slow_then_abort
    pool = _pool(log, txns, tmp_path, overlap=True)
    decided_on_top: list[int] = []

    def decided() -> int:
        return int(pool.metrics.registry.get_sample_value("ndd_decision_seconds_count") or 0)

    async def run() -> None:
        parts = [scoped] if batches == 1 else [scoped[:4], scoped[4:8], scoped[8:]]

        async def process() -> None:
            for part in parts:
                await pool.process(part, log_send(pool))

        processing = asyncio.ensure_future(process())
        while decided() < 8 and not processing.done():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the third piece waits for the first commit: no more
        decided_on_top.append(decided())
        assert committing.is_set(), decided()
        assert txns.commits == 0, txns.commits
        assert log.topic("unique") == []
        release.set()
        await processing
        await pool.drain()
        pool.committer.failed()

    asyncio.run(run())
    pool.close()
    assert decided_on_top == [8]  # the second piece decided while the first committed
    assert {i: d[:1] for i, d in _decisions(log).items()} == _want(lines)
    assert _repeats(log) == 0
    assert txns.committed == {(SCOPED, 0): 12}
    assert txns.aborts == 1


def test_the_router_redoes_an_aborted_piece(tmp_path: Path) -> None:
    log, raw, txns, router = _raw_router(10)
    aborts = [True]

    def abort_once(tps: list[tuple[str, int]], before: bool) -> None:
        if before and aborts:
            aborts.pop()
            raise TransactionAborted(f"{tps}: commit: abortable: NOT_COORDINATOR")

    async def run() -> None:
        await router.assign([("raw", 0)])
        await router.route(raw[:4])
        txns.crash = abort_once
        await router.route(raw[4:7])
        await router.route(raw[7:])

    asyncio.run(run())
    assert [r.value for r in log.topic(SCOPED)] == [b"%d" % i for i in range(10)]
    assert txns.committed == {("raw", 0): 10}


def test_the_router_forwards_what_came_before_its_partition_was_owned(
        tmp_path: Path) -> None:
    """Exactly-once: records of a raw partition delivered before the rebalance callback
    opened it are passed over (not this worker's yet); the consumer is sent back to the
    partition's position (``positions``, ``runtime.seek``) and delivers them again."""
    log, raw, txns, router = _raw_router(6)

    async def run() -> None:
        await router.route(raw[2:])  # Faust resumed fetching first
        assert log.topic(SCOPED) == []
        await router.assign([("raw", 0)])
        assert router.positions() == {("raw", 0): 0}
        await router.route(raw[:4])  # from the position, and what Faust had buffered
        await router.route(raw[2:])
        assert router.positions() == {("raw", 0): 6}

    asyncio.run(run())
    assert [r.value for r in log.topic(SCOPED)] == [b"%d" % i for i in range(6)]
    assert txns.committed == {("raw", 0): 6}


def test_a_heartbeat_during_a_commit_confirms_only_what_was_committed(
        tmp_path: Path) -> None:
    """Event-time order: the heartbeat (``report_progress`` on the worker's timer, beside
    the router's batches) while the first batch of a newly owned raw partition commits.
    Claiming the batch's end before its records, as "caught up", let the scope step over
    the partition and decide its items as behind once they came: decisions that differed
    from ``dedup --event-order``, with nothing lost or repeated."""
    log, raw, txns, router = _raw_router(6, ordered=True)
    committing, committed = threading.Event(), threading.Event()

    def slow_commit(tps: list[tuple[str, int]], before: bool) -> None:
        if before:  # in the commit's thread
            committing.set()
            committed.wait(10.0)

    async def run() -> None:
        await router.assign([("raw", 0)])
        txns.crash = slow_commit
        routing = asyncio.ensure_future(router.route(raw))
        while not committing.is_set():
            await asyncio.sleep(0.01)
        await router.report_progress({("raw", 0)}, every_s=10.0)  # the heartbeat
        committed.set()
        await routing

    asyncio.run(run())
    scoped = log.topic(SCOPED)
    reports = [(i, Progress.parse(r.value)) for i, r in enumerate(scoped)
               if r.key == PROGRESS_KEY]
    assert len(reports) == 2  # the heartbeat's and the batch's own, after its commit
    for at, progress in reports:  # never ahead of the records before it
        assert progress is not None
        assert progress.next <= sum(r.key != PROGRESS_KEY for r in scoped[:at])
    assert reports[-1][1].next == 6


def _raw_router(n: int, *, ordered: bool = False
                ) -> tuple[MemoryLog, list[Any], MemoryTransactions, Router]:
    """A raw partition of ``n`` records and an exactly-once router over it (``ordered``:
    under event-time order, where the partition ends at ``n``)."""
    log = MemoryLog()
    for i in range(n):
        log.append("raw", 0, b"k", b"%d" % i)
    txns = MemoryTransactions(log)
    router = _router(log, TransactionalCommitter(txns, WorkerMetrics(), 4), txns.committed,
                     ordered=ordered)
    return log, log.logs[("raw", 0)], txns, router


def _router(log: MemoryLog, committer: TransactionalCommitter | AcknowledgingCommitter,
            committed: dict[tuple[str, int], int], *, ordered: bool = False) -> Router:
    def routed(m: object) -> OutRecord:
        return OutRecord(SCOPED, b"k", m.value, [], 0)

    def read(topic: str, partition: int, start: int, end: int) -> list[object]:
        return list(log.logs[(topic, partition)][start:end])

    return Router(committer, committer.in_order(read, WorkerMetrics(),  # type: ignore[arg-type]
                                                "processed"),
                  routed, lambda tps: {tp: committed.get(tp, -1) for tp in tps}, log.send,
                  scoped_topic=SCOPED, scoped_partitions=1, ordered=ordered,
                  high=lambda tp: len(log.logs[tp]) if ordered else None)


def _crash_before(tps: list[tuple[str, int]], before: bool) -> None:
    if before:
        raise Crash


def test_the_router_forwards_each_raw_record_once_across_a_kill(tmp_path: Path) -> None:
    log, raw, txns, router = _raw_router(10)

    async def first() -> None:
        await router.assign([("raw", 0)])
        await router.route(raw[:4])
        txns.crash = _crash_before
        await router.route(raw[4:7])

    with pytest.raises(Crash):
        asyncio.run(first())
    txns.crash = lambda tps, before: None
    again = _router(log, TransactionalCommitter(txns, WorkerMetrics(), 4), txns.committed)

    async def resumed() -> None:
        await again.assign([("raw", 0)])
        await again.route(raw[2:])  # Faust may deliver from anywhere: the position decides

    asyncio.run(resumed())
    assert [r.value for r in log.topic(SCOPED)] == [b"%d" % i for i in range(10)]
    assert txns.committed == {("raw", 0): 10}


def test_an_acknowledging_piece_delivers_outputs_before_the_changelog(
        tmp_path: Path) -> None:
    log = MemoryLog()
    order: list[str] = []

    async def send(record: OutRecord) -> object:
        order.append(record.topic)
        return await log.send(record)

    async def run() -> None:
        piece = AcknowledgingCommitter(4).begin(send)
        await piece.produce((SCOPED, 0), OutRecord("unique", b"k", b"v", [], 0))
        await piece.commit([Reached((SCOPED, 0), 1)])

    asyncio.run(run())
    assert order == ["unique"]  # no state: the router's piece, its offset is Faust's


def test_one_transaction_per_piece_and_outputs_wait_for_their_partition(
        tmp_path: Path) -> None:
    """A piece's partitions commit in one transaction; outputs of a partition that did not
    move wait for the piece that moves it (never committed without its position)."""
    log = MemoryLog()
    txns = MemoryTransactions(log)
    committer = TransactionalCommitter(txns, WorkerMetrics(), 4)
    a, b = ("raw", 0), ("raw", 1)

    async def run() -> None:
        piece = committer.begin(log.send)
        await piece.produce(a, OutRecord(SCOPED, b"k", b"a1", [], 0))
        await piece.produce(b, OutRecord(SCOPED, b"k", b"b1", [], 0))
        await piece.commit([Reached(a, 1)])
        assert [r.value for r in log.topic(SCOPED)] == [b"a1"]
        piece = committer.begin(log.send)
        await piece.produce(a, OutRecord(SCOPED, b"k", b"a2", [], 0))
        await piece.commit([Reached(a, 2), Reached(b, 1)])

    asyncio.run(run())
    assert [r.value for r in log.topic(SCOPED)] == [b"a1", b"a2", b"b1"]
    assert txns.committed == {a: 2, b: 1} and txns.commits == 2


def test_pieces_ended_while_a_commit_runs_wait_open_and_commit_as_one(
        tmp_path: Path) -> None:
    """Overlapped commits, batches smaller than a piece: a piece that ends while the one
    before it commits stays open and takes the next batches' decisions, and is committed
    as one transaction once that commit is done (not one small transaction per batch, each
    waiting for the one before)."""
    log, lines = MemoryLog(), _lines(8)
    txns = MemoryTransactions(log)
    scoped = _scoped(log, lines)
    committing, release = threading.Event(), threading.Event()

    def slow_first(tps: list[tuple[str, int]], before: bool) -> None:
        if before and not committing.is_set():
            committing.set()
            release.wait(10.0)

    txns.crash = slow_first
    pool = _pool(log, txns, tmp_path, piece_items=16, overlap=True)

    async def run() -> None:
        await pool.process(scoped[:2], log_send(pool))  # its commit waits for `release`
        for at in (2, 4, 6):
            await pool.process(scoped[at:at + 2], log_send(pool))
        assert txns.commits == 0 and log.topic("unique") == []
        release.set()
        await pool.drain()
        pool.committer.failed()

    asyncio.run(run())
    pool.close()
    assert txns.commits == 2  # the first piece, then the three batches after it as one
    assert _decisions(log) == _want(lines)
    assert txns.committed == {(SCOPED, 0): 8}
    checkpoints = [decode_checkpoint(r.value).next for r in log.topic("changelog")
                   if r.key == CHECKPOINT_KEY]
    assert checkpoints == [2, 8]


def test_a_backlog_keeps_a_piece_open_until_it_is_full_or_caught_up(tmp_path: Path) -> None:
    """Exactly-once with records waiting beyond the batch (the consumer's last stable
    offset ahead of what was handed out): a piece stays open for the next batches, up to
    its size; caught up, the piece open commits without a batch."""
    log, lines = MemoryLog(), _lines(10)
    txns = MemoryTransactions(log)
    scoped = _scoped(log, lines)
    ends = {"high": 1000}
    pool = _pool(log, txns, tmp_path, piece_items=6, overlap=True)
    pool.high = lambda tp: ends["high"]

    async def run() -> None:
        for at in range(0, 10, 2):
            await pool.process(scoped[at:at + 2], log_send(pool))
        await asyncio.sleep(0.1)
        assert txns.commits == 1  # six decisions, a full piece; four held open
        ends["high"] = 10  # caught up: the open piece commits with no batch
        for _ in range(100):
            await asyncio.sleep(0.02)
            if txns.commits == 2:
                break
        await pool.drain()
        pool.committer.failed()

    asyncio.run(run())
    pool.close()
    assert txns.commits == 2
    assert _decisions(log) == _want(lines)
    assert txns.committed == {(SCOPED, 0): 10}
