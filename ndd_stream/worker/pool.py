"""The deciders of the scoped partitions this worker owns, and their batch processing.

Per batch of scoped records (in pieces of about :data:`CHECKPOINT_ITEMS` decisions, each
as if it were a batch of its own), in this order (what makes at-least-once safe):
1. decide every record (state changes are buffered in each partition's RocksDB batch);
2. produce the routed records and wait until the broker has them all;
3. produce the changelog records and wait for them;
4. commit each partition's RocksDB batch with the offsets it now reflects;
5. only then Faust acks the events, so Kafka's committed offset never passes state.
A crash between any two steps replays records whose decisions are either recomputed
from the same state (same result) or answered from the stored decision by identity.
Under exactly-once (``txns``) steps 2, 3 and 5 are one transaction per partition, and
step 4 follows its commit (``exactly.commit_pieces``).

A batch runs under the pool's lock, and a rebalance takes that lock before it closes a
revoked partition: the batch in flight finishes its piece with the state it started
with (and stops there when the rest is the revoked partitions'), and records of a
partition this worker no longer owns (fetched before the rebalance and still in the
agent's hands) are not decided; their new owner decides them.

Under event-time order (``NDD_SCOPE_ORDER``) each partition's records pass through its
sequencer (``merge.EventTimeMerge``) between step 0 (offset order, ``InOrder``) and step 1:
items are decided when their turn comes, possibly in a later batch or on the timer
(:meth:`DeciderPool.tick`). The partition's one checkpoint (``state.codec.Checkpoint``)
then holds ``next`` = the lowest scoped offset still held (where a restart re-reads from)
and the sequencer's state, in the same RocksDB batch and in one changelog record.

Decisions never hold the event loop for long (/health, timers and the consumer's
heartbeats run on it): an item larger than :data:`OFFLOAD_BYTES` is decided in the pool's
one decision thread while the loop awaits it (extraction is bounded and linear, so the
GIL is never held for long either: docs/RELIABILITY.md, Security), and after every
:data:`YIELD_SECONDS` of decisions made inline the loop gets a turn. The batch lock still
serializes decisions: one thread, one item at a time, in offset order.

The pool touches the broker only through ``send`` and a ``kafka.reads.Log`` (ranges of
the scoped topic, the changelog), so its logic runs on an in-memory log in unit tests.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from ndd_stream.core.detector import DetectorConfig
from ndd_stream.core.items import ItemFormat
from ndd_stream.kafka.reads import Log, read_range
from ndd_stream.kafka.transactions import Transactions
from ndd_stream.state.codec import Checkpoint
from ndd_stream.state.pending import Pair, least_offset
from ndd_stream.worker.changelog import read_changelog
from ndd_stream.worker.deciding import (
    LayoutChanged,
    Outcome,
    OutputTopics,
    PartitionDecider,
    StatefulPartition,
)
from ndd_stream.worker.exactly import commit_pieces
from ndd_stream.worker.gathering import GatherDecider
from ndd_stream.worker.inorder import TP, InOrder, Message
from ndd_stream.worker.merge import (
    EventTimeMerge,
    OrderKey,
    Passed,
    PassReason,
    SourceId,
    Verdict,
)
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.records import (
    H_CONTROL,
    OutRecord,
    Progress,
    Source,
    event_time_ms,
    header_map,
    kafka_timestamp_ms,
)

log = logging.getLogger("ndd_stream.worker")

Send = Callable[[OutRecord], Awaitable[Awaitable[Any]]]
"""Hand a record to the producer; the returned awaitable resolves on delivery (to the
record's metadata: its ``offset``)."""


@dataclass(frozen=True)
class OrderConfig:
    """Event-time order across raw partitions (settings ``order_*``)."""

    idle_s: float
    stall_s: float
    max_bytes: int


OFFLOAD_BYTES = 32_768
"""Items larger than this are decided off the event loop (a 2 MB item takes up to ~0.2 s;
one of 32 KB a few ms, less than the thread hand-off is worth below it). Offloading every
item measured slower end to end: the producer, free to run during each decision, sent each
item's records as a request of its own (docs/history/BENCHMARK-history.md)."""
YIELD_SECONDS = 0.05
"""Inline decisions run at most this long before the event loop gets a turn."""
CHECKPOINT_ITEMS = 256
"""A batch is checkpointed at the first record boundary after this many decisions (and at
its end). Outputs go out before their checkpoint, so a worker killed mid-batch sends the
decisions since the last one again: this bounds those. Needed because one record can
resolve hundreds of items (a shard's answers) and a gatherer's batch of 500 records
thousands: killed once in a backlog, it re-sent up to 10,755 of 17,050 outputs."""
TRANSACTION_ITEMS = 1024
"""Exactly-once: a piece is one transaction per partition, and a kill re-sends nothing, so
pieces may be larger (a whole batch, usually): fewer commits, each a few round trips the
decider waits for. What this bounds is the work a kill throws away."""


class BrokerLostData(RuntimeError):
    """The broker holds less than the local state reflects (e.g. an in-memory broker was
    restarted empty). Continuing would skip or re-decide records inconsistently."""


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
        dir_prefix: str = "partition", txns: Transactions | None = None,
    ) -> None:
        self.scoped_topic = scoped_topic
        self.state_dir = state_dir
        self.config = config
        self.fmt = fmt
        self.topics = topics
        self.log = log
        self.restore_timeout_s = restore_timeout_s
        self.metrics = metrics
        # what each partition is: a decider (default), a gatherer or a shard
        self.factory = factory or (lambda partition, path: PartitionDecider(
            partition, path, config, fmt, topics))
        self.dir_prefix = dir_prefix
        self.deciders: dict[int, Any] = {}
        self._opening: dict[int, asyncio.Task[Any]] = {}
        # Scoped partitions assigned to this worker (None: not told yet, so all of them).
        self.owned: set[int] | None = None
        self.lock = asyncio.Lock()
        # exactly-once: each piece of a partition is one transaction of its own producer
        # (kafka/transactions.py), and the state is read back read_committed
        self.txns = txns
        self.piece_items = CHECKPOINT_ITEMS if txns is None else TRANSACTION_ITEMS
        self.order = InOrder(partial(read_range, log), metrics, "decided",
                             transactional=txns is not None)
        self.event_order = order
        self.clock = clock
        self.merges: dict[int, EventTimeMerge[Message]] = {}  # event-time order only
        self.sources: set[SourceId] = set()  # raw partitions that exist (metadata)
        self._touched: set[int] = set()
        self._revoking: set[int] = set()  # partitions a rebalance waits for (see _decide)
        self._busy = 0.0  # clock seconds spent deciding (see _now)
        self._decision_thread = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="ndd-decide")
        self._in_flight: concurrent.futures.Future[Any] | None = None

    def _now(self) -> float:
        """The sequencers' clock: the time the pool was free to hear from routers. Deciding
        holds the event loop (and the router's agent shares it), so a raw partition is not
        counted silent while the pool itself kept its news from arriving."""
        return self.clock() - self._busy

    def expect(self, sources: Iterable[SourceId]) -> None:
        """The raw partitions that exist: under event-time order each is waited for."""
        self.sources = set(sources)
        now = self._now()
        for merge in self.merges.values():
            merge.expect(self.sources, now)

    async def assign(self, partitions: Sequence[int]) -> None:
        """A rebalance gave this worker ``partitions``: close the others, open these."""
        async with self.lock:
            self.owned = set(partitions)
            self.close([p for p in self.deciders if p not in self.owned])
        for partition in sorted(partitions):
            await self.ensure(partition)

    async def revoke(self, partitions: Sequence[int]) -> None:
        """A rebalance takes ``partitions`` away: wait for the batch in flight (which stops
        at its next checkpoint), close them."""
        self._revoking.update(partitions)
        try:
            async with self.lock:
                if self.owned is not None:
                    self.owned.difference_update(partitions)
                self.close(partitions)
        finally:
            self._revoking.difference_update(partitions)

    async def ensure(self, partition: int) -> Any:
        decider = self.deciders.get(partition)
        if decider is not None:
            return decider
        task = self._opening.get(partition)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._open(partition))
            self._opening[partition] = task
        # Shielded: a waiter cancelled mid-open (a rebalance callback, a stop) must not
        # orphan the RocksDB store the executor thread goes on opening; a second open of
        # the same directory would fail on RocksDB's lock ("lock hold by current process").
        return await asyncio.shield(task)

    async def _open(self, partition: int) -> Any:
        """Open in a thread and register the decider, whoever still waits for it."""
        try:
            decider = await asyncio.get_running_loop().run_in_executor(
                None, self._open_sync, partition)
        finally:
            self._opening.pop(partition, None)
        self.deciders[partition] = decider
        if self.event_order is not None:
            self.merges[partition] = self._merge(decider)
        # Decided strictly in order from the state's own position (not Faust's).
        self.order.resume(self._tp(partition), decider.next_offset)
        self.metrics.assigned.set(len(self.deciders))
        return decider

    def _merge(self, decider: StatefulPartition) -> EventTimeMerge[Message]:
        """The partition's sequencer, from its checkpoint: held items are re-read."""
        assert self.event_order is not None
        cfg, now = self.event_order, self._now()
        merge: EventTimeMerge[Message] = EventTimeMerge(cfg.idle_s, cfg.stall_s, cfg.max_bytes)
        if decider.order is not None:
            merge.restore(decider.order, now)
        else:
            merge.consumed = decider.next_offset  # before: decided in offset order
        merge.expect(self.sources, now)
        return merge

    def _tp(self, partition: int) -> TP:
        return (self.scoped_topic, partition)

    def _open_sync(self, partition: int) -> StatefulPartition:
        started = time.monotonic()
        if self.txns is not None:
            # first fence the previous owner (its open transaction aborted, its later
            # commits refused), so that what is read next is all it will ever commit
            self.txns.open(self._tp(partition))
        decider = self.factory(partition, self.state_dir / f"{self.dir_prefix}-{partition}")
        self.metrics.restored.labels("local").inc(decider.restored)
        changelog = decider.changelog_topic
        read, lost = read_changelog(self.log, changelog, partition, decider.changelog_next,
                                    self.restore_timeout_s, committed=self.txns is not None)
        if lost:
            decider.close()
            raise BrokerLostData(
                f"{changelog}[{partition}] ends at offset {read.next_offset - 1} "
                f"but the local state under {self.state_dir} already reflects offset "
                f"{decider.changelog_next - 1}: the broker lost data (restarted empty?). "
                "Refusing to continue; restore the broker's data, or delete the state "
                "directory to start from an empty window.")
        # The partition's checkpoint: the last one in the changelog after the local store's
        # (another worker owned the partition meanwhile, or this one wrote a batch's
        # changelog and crashed before committing it locally), else the local one. A kill
        # while a batch's changelog was produced can leave its documents without their
        # checkpoint: going on from the older one decides those items again, and they are
        # answered by identity. Never the consumer group's offset: Faust commits past the
        # items an event-time scope holds for their turn.
        checkpoint = replace(read.checkpoint or decider.checkpoint, changelog=read.next_offset)
        decider.apply_changelog(read.records, checkpoint)
        try:
            decider.check_layout(f"{self.scoped_topic}[{partition}]")
        except LayoutChanged:
            decider.close()
            raise
        self.metrics.restored.labels("changelog").inc(len(read.records))
        log.info("%s %s ready: %d documents in window (%d changelog records) in %.2fs",
                 self.dir_prefix, partition, decider.window_documents(), len(read.records),
                 time.monotonic() - started,
                 extra={"partition": partition, "event": "partition_ready"})
        return decider

    def close(self, partitions: Sequence[int] | None = None) -> None:
        """Close ``partitions`` (None: all). A decision whose batch was cancelled (a
        stop, a rebalance) may still run in the decision thread: it is waited for (at
        most one item's bounded time), so no store closes under it."""
        if self._in_flight is not None and not self._in_flight.done():
            concurrent.futures.wait([self._in_flight])
        for partition in list(self.deciders if partitions is None else partitions):
            decider = self.deciders.pop(partition, None)
            self.merges.pop(partition, None)  # its held items are re-read by the next owner
            if decider is not None:
                decider.close()
                self.order.resume(self._tp(partition), None)
        if self.txns is not None:
            self.txns.close(None if partitions is None else [self._tp(p) for p in partitions])
        self.metrics.assigned.set(len(self.deciders))

    async def process(self, messages: Sequence[Message], send: Send) -> int:
        """Run steps 1-4 of the module docstring for one batch; returns records decided.

        Records are decided strictly in offset order from each partition's state position
        (``InOrder``): one already reflected is skipped, and records the consumer skipped
        are read from the broker and decided first, so nothing is lost.
        """
        async with self.lock:
            return await self._process(messages, send)

    async def tick(self, send: Send) -> int:
        """Decide the held items whose wait is over (the worker's timer, event-time order:
        a source that stays silent sends nothing that would wake the decider)."""
        if not self.merges:
            return 0
        async with self.lock:
            return await self._process([], send)

    async def catch_up(self, partition: int, resume: int, send: Send) -> int:
        """Decide the records between the state's position and ``resume`` now.

        After an assignment Faust resumes a partition at the group's committed offset,
        which can be past what the state reflects (Faust counts offsets it never delivered
        as done, and a worker stopped mid-batch can commit its batch). A gap in the middle
        is noticed when the next record arrives; one at the end of a partition that gets no
        more records would wait forever, so it is closed here. Returns records decided.
        """
        async with self.lock:
            if partition not in self.deciders or (
                    self.owned is not None and partition not in self.owned):
                return 0
            return await self._process([], send, {self._tp(partition): resume})

    async def _process(self, messages: Sequence[Message], send: Send,
                       until: Mapping[TP, int] | None = None) -> int:
        mine = [m for m in messages if self.owned is None or m.partition in self.owned]
        for partition in sorted({m.partition for m in mine}):
            await self.ensure(partition)  # revoked ones are left to their new owner
        run = await self.order.arrange(mine, until)
        started = self.clock()
        try:
            return await self._decide(run, send)
        finally:
            self._busy += self.clock() - started

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
        self._touched = set()
        pending: list[Awaitable[Any]] = []
        turn = time.perf_counter()  # when the event loop last had a turn
        end, handled, decided = at, 0, 0
        ends: dict[int, int] = {}  # partition -> the offset after its last record here
        while True:
            ready = self._ready()
            if ready:  # decisions a gatherer left for after a checkpoint: before new records
                for decider in ready:
                    self._touched.add(decider.partition)
                    started = time.perf_counter()
                    outcomes = decider.resolve()
                    self.metrics.busy.labels(self._label(decider.partition)).inc(
                        time.perf_counter() - started)
                    source = Source(self.scoped_topic, decider.partition, decider.next_offset)
                    decided += await self._emit(decider, outcomes, source, send, pending)
                if time.perf_counter() - turn > YIELD_SECONDS:
                    await asyncio.sleep(0)
                    turn = time.perf_counter()
                if decided >= self.piece_items:
                    break
                continue
            # one record at a time (none in a timer's empty run), so that the piece can end
            # at any record boundary: the sequencers are offered only what is decided here;
            # items a sequencer freed beyond the piece's budget go first, record-less
            piece = [] if self._held_over() else run[end:end + 1]
            end += len(piece)
            for m in piece:
                ends[m.partition] = m.offset + 1
            work = (self._sequence(piece, self.piece_items - decided) if self.merges
                    else [(m, None) for m in piece])
            handled += len(work)
            for item, note in work:
                decider = self.deciders[item.partition]
                source = Source.of_message(item)
                started = time.perf_counter()
                if item.value is not None and len(item.value) > OFFLOAD_BYTES:
                    self._in_flight = self._decision_thread.submit(
                        decider.process, item.value, item.key, item.headers, source, note)
                    outcome = await asyncio.wrap_future(self._in_flight)
                    turn = time.perf_counter()
                else:
                    outcome = decider.process(item.value, item.key, item.headers, source,
                                              note)
                self.metrics.latency.observe(time.perf_counter() - started)
                self.metrics.busy.labels(self._label(item.partition)).inc(
                    time.perf_counter() - started)
                if time.perf_counter() - turn > YIELD_SECONDS:
                    await asyncio.sleep(0)
                    turn = time.perf_counter()
                outcomes = outcome if isinstance(outcome, list) else [outcome]
                decided += await self._emit(decider, outcomes, source, send, pending)
            if decided >= self.piece_items or (end >= len(run) and not self._left_over()):
                break
        await _all(pending)
        # Where each partition now stands, if it moved: after the run, as the records in
        # order handed out (a catch-up whose records retention removed moves too: they are
        # logged as lost, and never come back); before it, after this piece's records.
        last = end >= len(run)
        cursor: dict[int, int] = {}
        undecided: dict[int, Sequence[Pair]] = {}  # gatherers' pending lists
        for partition, decider in self.deciders.items():
            merge = self.merges.get(partition)
            gathering = isinstance(decider, GatherDecider)
            if merge is not None:
                if partition in self._touched:
                    cursor[partition] = merge.resume_offset()
            else:
                position = (self.order.next.get(self._tp(partition)) if last
                            else ends.get(partition))
                if position is not None and (position > decider.next_offset or (
                        gathering and partition in self._touched)):
                    cursor[partition] = position
            if gathering and partition in cursor:  # re-read from the oldest undecided item
                undecided[partition] = listed = decider.pending()
                if listed:
                    cursor[partition] = min(cursor[partition], least_offset(listed))
        checkpoints = {p: Checkpoint(
            position, order=self.merges[p].checkpoint() if p in self.merges else None,
            pending=undecided.get(p, ())) for p, position in cursor.items()}
        if self.txns is not None:
            await self._commit_transactions(checkpoints, decided)
            return end, handled
        changelog_futures: dict[int, list[Awaitable[Any]]] = {}
        for partition, checkpoint in checkpoints.items():
            records = self.deciders[partition].drain_changelog(checkpoint)
            changelog_futures[partition] = [await send(r) for r in records]
        changelog_next: dict[int, int] = {}
        for partition, futures in changelog_futures.items():
            metadata = await _all(futures)
            offsets = [m.offset for m in metadata if getattr(m, "offset", None) is not None]
            if offsets:
                changelog_next[partition] = max(offsets) + 1
        for partition, checkpoint in checkpoints.items():
            decider = self.deciders[partition]
            decider.commit(replace(checkpoint, changelog=changelog_next.get(
                partition, decider.changelog_next)))
            self._gauges(decider)
        # Sharded windows: the items now listed as pending go to the shards (write-ahead)
        fanout = [r for p in checkpoints for r in getattr(self.deciders[p], "drain_fanout",
                                                          list)()]
        await _all([await send(r) for r in fanout])
        return end, handled

    async def _emit(self, decider: StatefulPartition, outcomes: Sequence[Outcome],
                    source: Source, send: Send, pending: list[Awaitable[Any]]) -> int:
        """Count each outcome and hand its records to the producer (``pending`` collects
        the sends, awaited before the checkpoint; exactly-once: to the partition's open
        transaction); returns how many outcomes."""
        txn = self.txns.get(self._tp(decider.partition)) if self.txns is not None else None
        for out in outcomes:
            self._count(decider, out, source)
            for record in out.records:
                if txn is not None:
                    txn.produce(record.topic, record.key, record.value, record.partition,
                                record.headers)
                else:
                    pending.append(await send(record))
        return len(outcomes)

    async def _commit_transactions(self, checkpoints: Mapping[int, Checkpoint],
                                   decided: int) -> None:
        """Exactly-once end of a piece (``exactly.commit_pieces``), then the gauges."""
        assert self.txns is not None
        await commit_pieces(self.txns, {p: (self._tp(p), self.deciders[p], checkpoint)
                                        for p, checkpoint in checkpoints.items()},
                            decided, self.metrics)
        for partition in checkpoints:
            self._gauges(self.deciders[partition])

    def _ready(self) -> list[GatherDecider]:
        """The gatherers with decisions left for after a checkpoint (GatherDecider.ready)."""
        return [d for d in self.deciders.values() if isinstance(d, GatherDecider) and d.ready()]

    def _held_over(self) -> set[int]:
        """The partitions whose sequencer stopped releasing at a piece's budget."""
        return {p for p, merge in self.merges.items() if merge.more}

    def _left_over(self) -> set[int]:
        """The partitions with decisions left for after a checkpoint: a gatherer's
        (:meth:`_ready`) or a sequencer's (:meth:`_held_over`)."""
        return {d.partition for d in self._ready()} | self._held_over()

    def _sequence(self, run: Sequence[Message], budget: int
                  ) -> list[tuple[Message, str | None]]:
        """Pass a run (offset order per partition) through the partitions' sequencers: the
        items to decide now, in event-time order, each with its order note; at most about
        ``budget`` released (the rest stay held, :meth:`_held_over`), so that one record
        never makes a piece of thousands of decisions between two checkpoints."""
        now = self._now()
        work: list[tuple[Message, str | None]] = []
        for item in run:
            merge = self.merges.get(item.partition)
            if merge is None:
                work.append((item, None))
                continue
            self._touched.add(item.partition)
            headers = header_map(item.headers)
            control = headers.get(H_CONTROL)
            if control is not None and control != b"progress":
                merge.skip(item.offset)  # an answer of a shard: for the gatherer, unordered
                work.append((item, None))
                continue
            if control is not None:
                progress = Progress.parse(item.value)
                if progress is None:
                    merge.skip(item.offset)  # a control record of another version
                else:
                    merge.progress((progress.topic, progress.partition), progress.next,
                                   progress.event_ms, progress.high, item.offset, now,
                                   _stamp(item))
                work += self._released(item.partition, merge, now, budget - len(work))
                continue
            ms, src = event_time_ms(headers), Source.from_headers(headers)
            key = (OrderKey(ms, src.topic, src.partition, src.offset)
                   if ms is not None and src is not None else None)
            verdict = merge.offer(key, item.offset, len(item.value or b""), item, now,
                                  _stamp(item))
            awaits = getattr(self.deciders[item.partition], "awaits", None)
            if awaits is not None and awaits(item.offset):
                work.append((item, None))  # released before a restart, not decided yet
            elif verdict in (Verdict.NOW, Verdict.COPY):
                work.append((item, None))
            elif verdict is Verdict.BEHIND:
                work.append((item, "behind"))
                self.metrics.order_behind.labels(str(item.partition)).inc()
                log.info("%s[%d]@%d: arrived after the event-time order passed it (%s): "
                         "decided at once", item.topic, item.partition, item.offset,
                         key, extra={"topic": item.topic, "partition": item.partition,
                                     "offset": item.offset, "event": "order_behind"})
            work += self._released(item.partition, merge, now, budget - len(work))
        for partition, merge in self.merges.items():
            released = self._released(partition, merge, now, budget - len(work))
            if released:
                self._touched.add(partition)
                work += released
        return work

    def _released(self, partition: int, merge: EventTimeMerge[Message],
                  now: float, limit: int) -> list[tuple[Message, str | None]]:
        released, passed = merge.release(now, max(0, limit))
        for p in passed:
            self._log_passed(partition, p)
        self.metrics.order_held.labels(str(partition)).set(merge.held)
        return [(item, None) for _, item in released]

    def _log_passed(self, partition: int, p: Passed) -> None:
        self.metrics.order_passed.labels(p.reason.value).inc()
        if p.reason is PassReason.IDLE:
            return  # live traffic steps over idle raw partitions for most items
        topic, raw = p.source
        log.warning("%s[%d]: deciding past %s[%d] after %.1fs (%s): its items older than %d "
                    "ms will be decided when they arrive, as behind", self.scoped_topic,
                    partition, topic, raw, p.waited_s, p.reason.value, p.key.event_ms,
                    extra={"topic": self.scoped_topic, "partition": partition,
                           "event": "order_source_passed"})

    def _count(self, decider: StatefulPartition, outcome: Outcome, source: Source) -> None:
        part = str(decider.partition)
        if outcome.invalid is not None:
            self.metrics.dlq.labels(outcome.invalid.reason, "decide").inc()
            log.warning("%s: %s: %s", source.position, outcome.invalid.reason,
                        outcome.invalid.detail, extra={
                            "topic": source.topic, "partition": source.partition,
                            "offset": source.offset, "event": "dlq"})
            return
        decision = outcome.decision
        if decision is None:  # a shard's answer
            self.metrics.shard_answers.labels(str(decider.partition)).inc()
            return
        if decision.replayed:
            self.metrics.replayed.inc()
        self.metrics.count_item(decision.status.value, outcome.channel, part)

    def _label(self, partition: int) -> str:
        """A partition in metric labels: "3" for scoped partition 3, "shard-5" for shard 5."""
        return str(partition) if self.dir_prefix == "partition" else (
            f"{self.dir_prefix}-{partition}")

    def _gauges(self, decider: StatefulPartition) -> None:
        part = self._label(decider.partition)
        self.metrics.window_documents.labels(part).set(decider.window_documents())
        self.metrics.window_hours.labels(part).set(decider.window_hours())
        self.metrics.state_bytes.labels(part).set(decider.store.inner.size_bytes())
        gather = decider.gather_gauges()
        if gather is not None:
            waiting, held, spilled = gather
            for shard, count in waiting.items():
                self.metrics.shard_waiting.labels(str(decider.partition), str(shard)).set(count)
            self.metrics.gather_held.labels(part).set(held)
            self.metrics.gather_spilled.labels(part).set(spilled)


def _stamp(m: Message) -> float | None:
    """A scoped record's Kafka timestamp in seconds (when its router sent it), if any."""
    ms = kafka_timestamp_ms(m)
    return ms / 1000 if ms is not None else None


async def _all(futures: Sequence[Awaitable[Any]]) -> list[Any]:
    return list(await asyncio.gather(*futures)) if futures else []
