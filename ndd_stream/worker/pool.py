"""The deciders of the scoped partitions this worker owns, and their batch processing.

A batch of scoped records is decided in *pieces* of about :data:`CHECKPOINT_ITEMS`
decisions (:data:`TRANSACTION_ITEMS` under exactly-once), each as if it were a batch of
its own: every record is decided in offset order from the partition's checkpoint
(``InOrder``; state changes are buffered in the partition's RocksDB batch), its outputs
go to the piece, and the piece is committed with each partition's new checkpoint by the
committer (``worker/commit.py``: the one place where the guarantees differ). Under
exactly-once the commit overlaps the next piece's decisions, and a piece that ends while
the one before it commits, or while a backlog waits, stays open for the next batches
(:meth:`DeciderPool._hold`); a commit that fails is
noticed at the next batch, or at once by :meth:`DeciderPool._watch` when no batch comes,
and its partitions are opened again and their records decided again. Partitions
are opened by ``worker/lifecycle.py``; under event-time order records pass through the
partitions' sequencers (``worker/sequencing.py``) before they are decided.

A batch runs under the pool's lock, and a rebalance takes that lock before it closes a
revoked partition: the batch in flight finishes its piece with the state it started
with (and stops there when the rest is the revoked partitions'), and records of a
partition this worker no longer owns are not decided; their new owner decides them.

Decisions never hold the event loop for long (/health, timers and the consumer's
heartbeats run on it): an item larger than :data:`OFFLOAD_BYTES` is decided in the pool's
one decision thread while the loop awaits it (extraction is bounded and linear, so the
GIL is never held for long either: docs/RELIABILITY.md, Security), and after every
:data:`YIELD_SECONDS` of decisions made inline the loop gets a turn. One item at a time.

The pool touches the broker only through the committer and a ``kafka.reads.Log`` (ranges
of the scoped topic, the changelog), so its logic runs in memory in unit tests.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from ndd_stream.core.detector import DetectorConfig
from ndd_stream.core.items import ItemFormat
from ndd_stream.kafka.reads import Log, read_range
from ndd_stream.worker.commit import (
    AcknowledgingCommitter,
    Committer,
    Piece,
    PieceFailed,
    Reached,
    Send,
    checkpoints,
)
from ndd_stream.worker.deciding import (
    Outcome,
    OutputTopics,
    PartitionDecider,
    StatefulPartition,
)
from ndd_stream.worker.delivery import TP, Message
from ndd_stream.worker.gathering import GatherDecider
from ndd_stream.worker.lifecycle import BrokerLostData, Partitions, Where
from ndd_stream.worker.merge import SourceId
from ndd_stream.worker.metrics import WorkerMetrics, count_outcome, set_gauges
from ndd_stream.worker.records import Source
from ndd_stream.worker.sequencing import OrderConfig, OwnTime, Sequencers, Work

__all__ = ["BrokerLostData", "DeciderPool", "OrderConfig"]

log = logging.getLogger("ndd_stream.worker")

OFFLOAD_BYTES = 32_768
"""Items larger than this are decided off the event loop (a 2 MB item takes up to ~0.2 s;
one of 32 KB a few ms, less than the thread hand-off is worth below it). Offloading every
item measured slower end to end: the producer, free to run during each decision, sent each
item's records as a request of its own (docs/history/BENCHMARK-history.md)."""
YIELD_SECONDS = 0.05
"""Inline decisions run at most this long before the event loop gets a turn."""
BATCH_MAX = 500
"""Records an agent takes at a time at-least-once (exactly-once: :data:`TRANSACTION_ITEMS`)."""
CHECKPOINT_ITEMS = 256
"""A batch is checkpointed at the first record boundary after this many decisions (and at
its end). Outputs go out before their checkpoint, so a worker killed mid-batch sends the
decisions since the last one again: this bounds those. Needed because one record can
resolve hundreds of items (a shard's answers) and a gatherer's batch of 500 records
thousands: killed once in a backlog, it re-sent up to 10,755 of 17,050 outputs."""
TRANSACTION_ITEMS = 1024
"""Exactly-once: a piece is one transaction per partition, and a kill re-sends nothing, so
pieces may be larger (a whole batch, usually, and the agents' batches are this large too):
fewer commits, each a few round trips the decider waits for (on the Reuters-day backlog 21
decider commits instead of 37). What this bounds is the work a kill throws away."""
BACKLOG_RECORDS = 64
"""Exactly-once: a piece stays open for the next batch while more records than this wait
for a partition (``DeciderPool._hold``): more than the transaction markers and the
routers' progress records that come between a live feed's batches."""
HOLD_S = 1.0
"""The longest a piece stays open for a backlog's next batches."""
HOLD_LOOK_S = 0.05
"""How often an open piece's backlog is looked at when no batch comes."""
OPEN_AT_ONCE = 4
"""Partitions opened side by side at an assignment. Each restore holds the changelog
records it read until they are applied, so this also bounds a restart's peak memory."""


class _OpenPiece(NamedTuple):
    """A piece that waits, open, for the commit before it (``DeciderPool._hold``): the
    piece, where its partitions' records end, its decisions and the sequencers and
    gatherers it changed."""

    piece: Piece
    ends: dict[int, int]
    decided: int
    touched: set[int]
    began: float  # perf_counter


class DeciderPool:
    """Opens, restores, runs and closes one stateful partition per owned input partition:
    a PartitionDecider per scoped partition by default; with sharded windows a
    GatherDecider per scoped partition, and, in a second pool, a ShardPartition per
    partition of the shards topic."""

    def __init__(
        self, state_dir: Path, config: DetectorConfig, fmt: ItemFormat, topics: OutputTopics,
        log: Log, metrics: WorkerMetrics, scoped_topic: str = "scoped",
        restore_timeout_s: float = 300.0, order: OrderConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        factory: Callable[[int, Path], StatefulPartition] | None = None,
        dir_prefix: str = "partition", committer: Committer | None = None,
        reopen_timeout_s: float = 120.0,
        lost: Callable[[str, int, int, int], None] | None = None,
        hold_pieces: bool = True, high: Callable[[TP], int | None] | None = None,
        upstream: Callable[[int], bool] | None = None,
    ) -> None:
        self.scoped_topic = scoped_topic
        # a piece ended while the last one commits waits for it, open (see _hold)
        self.hold_pieces = hold_pieces
        self.high = high  # where a scoped partition ends, from the last fetch (see _hold)
        self.upstream = upstream  # whether the router has more than so many records to go
        self._timer: asyncio.TimerHandle | None = None  # see _flush_soon
        self._open: _OpenPiece | None = None
        self._flushing: asyncio.Task[None] | None = None
        self.metrics = metrics
        # what each partition is: a decider (default), a gatherer or a shard
        self.factory = factory or (lambda partition, path: PartitionDecider(
            partition, path, config, fmt, topics, offset_order=order is None))
        self.dir_prefix = dir_prefix
        self.lock = asyncio.Lock()
        self.committer = committer or AcknowledgingCommitter(CHECKPOINT_ITEMS)
        self.piece_items = self.committer.piece_items
        self.order = self.committer.in_order(partial(read_range, log), metrics, "decided")
        self.clock = clock
        self.sequencers = Sequencers(order, self._now, metrics, scoped_topic)
        self.merges = self.sequencers.merges  # event-time order only
        # the open partitions (lifecycle.py: opening, closing, opening again)
        self.partitions = Partitions(
            Where(self.committer, self.factory, log, metrics, state_dir, dir_prefix,
                  scoped_topic, restore_timeout_s, lost),
            self.order, self.sequencers, reopen_timeout_s, self._settle)
        self.deciders = self.partitions.deciders
        self._touched: set[int] = set()
        self._gatherers: list[GatherDecider] = []  # the open ones, as a piece starts
        self._busy_child: dict[int, Any] = {}  # ndd_busy_seconds_total by partition
        self._revoking: set[int] = set()  # partitions a rebalance waits for (see _decide)
        # assigned, not opened yet, by how many assignments (see assign)
        self._assigning: collections.Counter[int] = collections.Counter()
        self._late: set[asyncio.Task[TP | None]] = set()  # openings after their rebalance
        self.own = OwnTime(clock)  # the worker's own work and waits (see _now)
        self._decision_thread = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="ndd-decide")
        self._in_flight: concurrent.futures.Future[Any] | None = None
        self._turn = 0.0  # perf_counter when the event loop last had a turn (_yield)
        self._failed: PieceFailed | None = None  # a commit's failure seen at a rebalance
        self._redo: asyncio.Task[None] | None = None  # see _watch
        self._send: Any = None  # the agent's Send, for _redo

    def _now(self) -> float:
        """The sequencers' clock: the time the worker was free to hear from routers
        (``sequencing.OwnTime``). Deciding holds the event loop (and the router's agent
        shares it), and a commit in flight holds the scoped partition's last stable offset,
        so a raw partition is not counted silent while the worker kept its news back."""
        return self.clock() - self.own.total()

    def expect(self, sources: Iterable[SourceId]) -> None:
        """The raw partitions that exist: under event-time order each is waited for."""
        self.sequencers.expect(sources)

    @property
    def owned(self) -> set[int] | None:
        """Scoped partitions assigned to this worker (None: not told yet, so all of them)."""
        return self.partitions.owned

    async def assign(self, partitions: Sequence[int],
                     within: float | None = None) -> list[asyncio.Task[TP | None]]:
        """A rebalance gave this worker ``partitions``: close the others, open these, up
        to :data:`OPEN_AT_ONCE` side by side: each waits on the broker for its committed
        offset and restore, and those waits overlap.

        Waits ``within`` seconds at most (None: until all are open); returns the openings
        still running, each ending with its partition (None: closed meanwhile). A rebalance
        callback cannot wait for a long restore: no heartbeat is sent while it runs, and a
        worker that outlasts its session is dropped, and rebuilds again when it rejoins.
        Records of a partition not open yet are passed over (``_process``)."""
        async with self.lock:
            self.partitions.owned = owned = set(partitions)
            await self._settle_commits()
            if self._failed is not None:  # refused while the group moved on: ours again
                self._failed = self._failed.given_again({self._tp(p) for p in owned})
            self.close([p for p in self.deciders if p not in owned])
        turns = asyncio.Semaphore(OPEN_AT_ONCE)

        async def open_one(partition: int) -> TP | None:
            try:
                async with turns:
                    if partition not in (self.partitions.owned or ()):
                        return None  # revoked while it waited for its turn
                    decider = await self.partitions.ensure_patiently(partition)
                return None if decider is None else self._tp(partition)
            finally:
                self._assigning[partition] -= 1
                if not self._assigning[partition]:
                    del self._assigning[partition]

        closed = sorted(p for p in set(partitions) if p not in self.deciders)
        self._assigning.update(closed)
        tasks = [asyncio.get_running_loop().create_task(open_one(p)) for p in closed]
        if not tasks:
            return []
        done, pending = await asyncio.wait(tasks, timeout=within,
                                           return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()  # an opening that failed raises here
        self._late.update(pending)
        for task in pending:
            task.add_done_callback(self._late.discard)
        return sorted(pending, key=tasks.index)

    async def revoke(self, partitions: Sequence[int]) -> None:
        """A rebalance takes ``partitions`` away: wait for the batch in flight (which stops
        at its next checkpoint), close them."""
        self._revoking.update(partitions)
        try:
            async with self.lock:
                if self.owned is not None:
                    self.owned.difference_update(partitions)
                await self._settle_commits()
                self.close(partitions)
        finally:
            self._revoking.difference_update(partitions)

    async def ensure(self, partition: int) -> Any:
        """The partition's state, opened if it is not (``lifecycle.Partitions``)."""
        return await self.partitions.ensure(partition)

    def _tp(self, partition: int) -> TP:
        return (self.scoped_topic, partition)

    def close(self, partitions: Sequence[int] | None = None) -> None:
        """Close ``partitions`` (None: all; a piece left open is dropped, uncommitted)."""
        if partitions is None:
            self._open = None
            for task in self._late:  # a stop: what waits for its turn never opens
                task.cancel()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        self.partitions.close(partitions)

    def _settle(self) -> None:
        """A decision whose batch was cancelled (a stop, a rebalance) may still run in the
        decision thread, and a commit in the commit thread: they are waited for (at most
        one item's bounded time; a commit's bounded round trips), so no store closes
        under them."""
        if self._in_flight is not None and not self._in_flight.done():
            concurrent.futures.wait([self._in_flight])
        self.committer.wait()  # a commit writes its partitions' RocksDB last

    async def _settle_commits(self) -> None:
        """Commit the open piece, and wait for the commits in flight (before partitions
        close: a commit writes their RocksDB last); one that failed is opened again by the
        next batch (with the open piece, decided on top of it)."""
        for _ in range(2):
            try:
                await self.committer.settle()
            except PieceFailed as exc:
                self._failed = exc
                return
            if self._open is None:
                return
            await self._commit_open()

    async def drain(self) -> None:
        """Wait until no piece is open, no commit is in flight and none that failed is
        being redone."""
        while True:
            flight, redo = self.committer.in_flight, self._redo
            flushing = self._flushing
            if self._open is not None and self._failed is None and (
                    flight is None or flight.done()) and (flushing is None or flushing.done()):
                async with self.lock:
                    if self._open is not None and self._failed is None:
                        await self._commit_open()
                        self._watch(self._send)
            elif flushing is not None and not flushing.done():
                await asyncio.wait([flushing])
            elif flight is not None and not flight.done():
                await asyncio.wait([flight])
            elif redo is not None and not redo.done():
                await asyncio.wait([redo])
            elif (flight is not None and not flight.cancelled()
                  and isinstance(flight.exception(), PieceFailed)):
                self._on_flight_done(self._send, flight)  # its callback may not have run
            else:
                return

    def _watch(self, send: Send) -> None:
        """A commit still in flight after a batch that fails is redone at once, not when
        the next batch comes (none may come); a piece left open is committed once the
        commit before it is done, batch or none."""
        self._send = send
        flight = self.committer.in_flight
        if flight is not None and flight.done():
            self._on_flight_done(send, flight)
        elif flight is not None:
            flight.add_done_callback(partial(self._on_flight_done, send))
        if self._open is not None:
            if flight is not None and not flight.done():
                flight.add_done_callback(lambda _: self._flush_soon())
            else:
                self._flush_soon()

    def _flush_soon(self) -> None:
        """Commit the open piece in a task of its own (under the pool's lock), or look
        again shortly while a backlog keeps it open (one timer at a time)."""
        if self._open is None:
            return
        wait = self._hold_for(self._open.began)
        if wait > 0:
            if self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(wait, self._timer_fired)
        elif self._flushing is None or self._flushing.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush_open())

    def _timer_fired(self) -> None:
        self._timer = None
        self._flush_soon()

    async def _flush_open(self) -> None:
        try:
            async with self.lock:
                flight = self.committer.in_flight
                if self._open is None or self._failed is not None or (
                        flight is not None and not flight.done()):
                    return  # a batch took it, a redo drops it, or _watch comes again
                if self._hold_for(self._open.began) > 0:  # records came meanwhile
                    self._flush_soon()
                    return
                with self.own.counting():
                    await self._commit_open()
                self._watch(self._send)
        except Exception as exc:  # as in the decider's agent: the worker cannot go on
            log.exception("decider failed", extra={"event": "decider_error"})
            from ndd_stream.worker.runtime import fatal
            fatal(f"decider crashed: {exc!r}")

    def _on_flight_done(self, send: Send, flight: asyncio.Future[None]) -> None:
        if flight.cancelled() or not isinstance(flight.exception(), PieceFailed):
            return  # anything else than a failed commit stops the next batch (the agent)
        if self._redo is None or self._redo.done():
            self._redo = asyncio.get_running_loop().create_task(self._redo_failed(send))

    async def _redo_failed(self, send: Send) -> None:
        try:
            async with self.lock:
                with self.own.counting():
                    await self._decide_redoing([], send)
                self._watch(send)
        except Exception as exc:  # as in the decider's agent: the worker cannot go on
            log.exception("decider failed", extra={"event": "decider_error"})
            from ndd_stream.worker.runtime import fatal
            fatal(f"decider crashed: {exc!r}")

    async def process(self, messages: Sequence[Message], send: Send) -> int:
        """Run steps 1-4 of the module docstring for one batch; returns records decided.

        Records are decided strictly in offset order from each partition's state position
        (``InOrder``): one already reflected is skipped, and records the consumer skipped
        are read from the broker and decided first, so nothing is lost.
        """
        async with self.lock:
            decided = await self._process(messages, send)
            self._watch(send)
            return decided

    async def tick(self, send: Send) -> int:
        """Decide the held items whose wait is over (the worker's timer, event-time order:
        a source that stays silent sends nothing that would wake the decider)."""
        if not self.merges:
            return 0
        async with self.lock:
            decided = await self._process([], send)
            self._watch(send)
            return decided

    async def _process(self, messages: Sequence[Message], send: Send) -> int:
        with self.own.counting():
            owned = self.partitions.owned  # records of others: their new owner's
            # records of a partition still opening: the consumer is sent back to its
            # position when it has opened (``app.py``)
            mine = [m for m in messages if (owned is None or m.partition in owned)
                    and m.partition not in self._assigning]
            for partition in sorted({m.partition for m in mine}):
                if partition not in self.deciders:  # revoked ones: their new owner's
                    await self.partitions.ensure_patiently(partition)
            run = await self.order.arrange(mine)
            return await self._decide_redoing(run, send)

    def positions(self) -> dict[TP, int]:
        """Where each partition open here goes on: the first offset not decided (its
        checkpoint at opening)."""
        return {tp: n for tp, n in self.order.next.items() if tp[1] in self.deciders}

    async def _decide_redoing(self, run: Sequence[Message], send: Send) -> int:
        """``_decide``; when a piece's commit fails, the partitions with work not committed
        are opened again from what they committed (those refused to a past member of the
        group are left to the rebalance) and the records handed out since decided again."""
        while True:
            handed = dict(self.order.next)
            try:
                self._raise_failed()
                return await self._decide(run, send)
            except PieceFailed as exc:
                # the open piece was decided on top of the failed one: its partitions are
                # behind what was handed out, opened again and their records decided again
                self._open = None
                until = await self.partitions.reopen(exc, handed)
                run = await self.order.arrange([], until)

    def _raise_failed(self) -> None:
        """The failure of a commit handed over earlier, if any: its partitions (and the
        work decided on top of them since) are opened again before anything else."""
        failed, self._failed = self._failed, None
        if failed is not None:
            with contextlib.suppress(PieceFailed):
                self.committer.failed()  # its flight, done: the same failure
            raise failed
        self.committer.failed()

    async def _decide(self, run: Sequence[Message], send: Send) -> int:
        """Steps 1-4 for a run in offset order (through the sequencers, if any), in pieces
        of about :data:`CHECKPOINT_ITEMS` decisions, each with its own checkpoint: exactly
        as if the consumer had delivered the run as several smaller batches."""
        handled, at = 0, 0
        for decider in self.deciders.values():
            if isinstance(decider, GatherDecider):
                decider.resolve_limit = CHECKPOINT_ITEMS
        while True:
            at, n = await self._decide_piece(run, at, send)
            handled += n
            left = self._left_over()
            if at >= len(run) and not left:
                return handled
            rest = {m.partition for m in run[at:]} | left
            if self._revoking and rest <= self._revoking:
                # A rebalance waits for the rest's partitions: stop here, checkpointed,
                # rather than decide a long run (a restart's gap read is a whole backlog)
                # while the group, tired of waiting, gives them to a worker that decides
                # the same items again. Their new owner reads the rest from the changelog's
                # checkpoint.
                return handled

    async def _decide_piece(self, run: Sequence[Message], at: int,
                            send: Send) -> tuple[int, int]:
        """Steps 1-4 for ``run[at:end]``, ``end`` the first record boundary after
        :data:`CHECKPOINT_ITEMS` decisions (or the run's end). Returns ``(end, records
        handled)``."""
        self._gatherers = [d for d in self.deciders.values() if isinstance(d, GatherDecider)]
        open_, self._open = self._open, None
        if open_ is not None:  # the piece left open goes on
            piece, ends, decided, self._touched, began = open_
        else:
            piece, decided, self._touched = self.committer.begin(send), 0, set()
            ends = {}  # partition -> the offset after its last record here
            began = time.perf_counter()
        self._turn = time.perf_counter()
        end, handled = at, 0
        while True:
            ready = self._ready() if self._gatherers else None
            if ready:  # decisions a gatherer left for after a checkpoint: before new records
                decided += await self._resolve(ready, piece)
                if decided >= self.piece_items:
                    break
                continue
            # one record at a time (none in a timer's empty run), so that the piece can end
            # at any record boundary: the sequencers are offered only what is decided here;
            # items a sequencer freed beyond the piece's budget go first, record-less
            records = [] if self.merges and self.sequencers.held_over() else run[end:end + 1]
            end += len(records)
            for m in records:
                ends[m.partition] = m.offset + 1
            work: Work = [(m, None) for m in records]
            if self.merges:
                work, touched = self.sequencers.sequence(
                    records, self.piece_items - decided, self.deciders)
                self._touched |= touched
            handled += len(work)
            for item, note in work:
                decider = self.deciders[item.partition]
                source = Source.of_message(item)
                outcomes = await self._decide_item(decider, item, source, note)
                decided += await self._emit(decider, outcomes, source, piece)
            if decided >= self.piece_items or (end >= len(run) and not self._left_over()):
                break
        if end >= len(run):  # after the run: as the records in order handed out (a
            # read-back whose records retention removed moves too: they are logged as lost
            # and never come back); before its end, after this piece's records (``ends``)
            ends = {p: n for p in self.deciders
                    if (n := self.order.next.get(self._tp(p))) is not None}
        if self._hold(decided, began):
            self._open = _OpenPiece(piece, ends, decided, self._touched, began)
        else:
            await self._end_piece(piece, ends, decided)
        return end, handled

    def _hold(self, decided: int, began: float) -> bool:
        """Whether a piece that could end here stays open instead, to take the next
        batches' decisions too (up to :attr:`piece_items`; exactly-once, where no batch is
        acknowledged):

        * while the commit before it runs: ended now, it would only wait for it (pieces
          commit one at a time); it is committed as that commit ends (:meth:`_watch`);
        * while records wait for this pool beyond :data:`BACKLOG_RECORDS` (the consumer's
          last stable offset against the next offset handed out), for at most
          :data:`HOLD_S`: a backlog read in small batches (the router's commits and
          progress records) is then committed in a few large transactions, not one small
          one per batch, each of which costs round trips and the broker's CPU. Caught up
          (a live feed), a piece commits as its batch ends."""
        if not (self.hold_pieces and self.committer.holds and decided < self.piece_items
                and not self._gatherers):
            return False
        flight = self.committer.in_flight
        return (flight is not None and not flight.done()) or self._hold_for(began) > 0

    def _hold_for(self, began: float) -> float:
        """How long an open piece begun at ``began`` may wait before it is looked at
        again (0: commit it now)."""
        left = began + HOLD_S - time.perf_counter()
        return min(HOLD_LOOK_S, left) if left > 0 and self._backlog() else 0.0

    def _backlog(self) -> bool:
        """Whether more than :data:`BACKLOG_RECORDS` committed records of a partition
        open here are not handed out yet (where the consumer last saw its end), or of a
        raw partition not forwarded yet by the router (``upstream``): more input comes
        at once."""
        if self.high is not None:
            for tp, handed in self.order.next.items():
                if tp[1] in self.deciders:
                    high = self.high(tp)
                    if high is not None and high - handed > BACKLOG_RECORDS:
                        return True
        return self.upstream is not None and self.upstream(BACKLOG_RECORDS)

    async def _commit_open(self) -> None:
        """Commit the piece left open (under the pool's lock)."""
        open_, self._open = self._open, None
        if open_ is not None:
            piece, ends, decided, self._touched, _ = open_
            await self._end_piece(piece, ends, decided)

    async def _end_piece(self, piece: Piece, ends: dict[int, int], decided: int) -> None:
        """Step 4: the piece committed with each partition's checkpoint."""
        reached = checkpoints(self.deciders, self.merges, self._touched, ends)
        before = self.committer.in_flight
        await piece.commit([Reached.of(self._tp(p), self.deciders[p], checkpoint)
                            for p, checkpoint in reached.items()], decided)
        flight = self.committer.in_flight
        if flight is not None and flight is not before and not flight.done():
            self.own.begin()  # the commit goes on after this batch: still the worker's own
            flight.add_done_callback(self.own.end)
        for partition in reached:
            set_gauges(self.metrics, self._label(partition), self.deciders[partition])

    async def _resolve(self, ready: Sequence[GatherDecider], piece: Piece) -> int:
        """The decisions gatherers left for after a checkpoint; returns how many."""
        decided = 0
        for decider in ready:
            self._touched.add(decider.partition)
            started = time.perf_counter()
            outcomes = decider.resolve()
            self._busy_in(decider.partition).inc(time.perf_counter() - started)
            source = Source(self.scoped_topic, decider.partition, decider.handed_next)
            decided += await self._emit(decider, outcomes, source, piece)
        await self._yield()
        return decided

    async def _decide_item(self, decider: Any, item: Message, source: Source,
                           note: str | None) -> list[Outcome]:
        """One record's outcomes: decided inline, or in the decision thread when large."""
        started = time.perf_counter()
        if item.value is not None and len(item.value) > OFFLOAD_BYTES:
            self._in_flight = self._decision_thread.submit(
                decider.process, item.value, item.key, item.headers, source, note)
            outcome = await asyncio.wrap_future(self._in_flight)
            self._turn = time.perf_counter()
        else:
            outcome = decider.process(item.value, item.key, item.headers, source, note)
        now = time.perf_counter()
        took = now - started
        self.metrics.latency.observe(took)
        self._busy_in(item.partition).inc(took)
        if now - self._turn > YIELD_SECONDS:
            await self._yield()
        return outcome if isinstance(outcome, list) else [outcome]

    def _busy_in(self, partition: int) -> Any:
        """The partition's ``ndd_busy_seconds_total`` (looked up once)."""
        child = self._busy_child.get(partition)
        if child is None:
            child = self._busy_child[partition] = self.metrics.busy.labels(
                self._label(partition))
        return child

    async def _yield(self) -> None:
        """Give the event loop a turn after :data:`YIELD_SECONDS` of inline decisions."""
        if time.perf_counter() - self._turn > YIELD_SECONDS:
            await asyncio.sleep(0)
            self._turn = time.perf_counter()

    async def _emit(self, decider: StatefulPartition, outcomes: Sequence[Outcome],
                    source: Source, piece: Piece) -> int:
        """Count each outcome and hand its records to the piece; returns how many."""
        tp = self._tp(decider.partition)
        for out in outcomes:
            count_outcome(self.metrics, decider.partition, out, source)
            for record in out.records:
                await piece.produce(tp, record)
        return len(outcomes)

    def _ready(self) -> list[GatherDecider]:
        """The gatherers with decisions left for after a checkpoint (GatherDecider.ready)."""
        return [d for d in self._gatherers if d.ready()]

    def _left_over(self) -> set[int]:
        """The partitions with decisions left for after a checkpoint (gatherer, sequencer)."""
        held = self.sequencers.held_over() if self.merges else set()
        return {d.partition for d in self._ready()} | held if self._gatherers else held

    def _label(self, partition: int) -> str:
        """A partition in metric labels: "3" for scoped partition 3, "shard-5" for shard 5."""
        return str(partition) if self.dir_prefix == "partition" else (
            f"{self.dir_prefix}-{partition}")
