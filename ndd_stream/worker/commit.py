"""Where a piece of work is committed: the one place where the two guarantees differ.

A *piece* is what one agent did with some records of its input partitions: the outputs it
produced and, for each input partition it moved, where that partition now stands
(:class:`Reached`: the next input offset and, for a decider, its state and checkpoint).
The agents hand outputs to a piece (:meth:`Piece.produce`) and end it with
:meth:`Piece.commit`; they never ask which guarantee runs.

Exactly-once (:class:`TransactionalCommitter`, Apache Kafka): the worker has one
transactional producer (``kafka/transactions.py``); a piece's outputs, changelog records,
checkpoints and input offsets are one transaction, then RocksDB, a cache of the committed
changelog, is written. A worker killed before the commit leaves nothing of
the piece; killed after it, its RocksDB lags the changelog: either way the partition's
next owner (or the worker restarted) reads the committed changelog on from its store.

At-least-once (:class:`AcknowledgingCommitter`, any broker): outputs through Faust's
producer and waited for, then the changelog and checkpoint, then RocksDB; the agent
acknowledges the input records to Faust only after the piece (``held_batches``). A kill
between two steps sends a piece's outputs again, answered with the same decisions.

A decider's position is its checkpoint (in the changelog, then in RocksDB); under
exactly-once the committed input offset moves with it, in the same transaction
(docs/ARCHITECTURE.md, "Positions and commits"). :func:`checkpoints` computes it at the end
of a piece: the first scoped offset whose work is not reflected, and, where they exist,
what event-time order and shards add to it, each from its one place: the sequencer's held
items (``worker/sequencing.py``; the position is then the lowest offset still held) and a
gatherer's pending items (``worker/gathering.py``; the position is then at most the oldest
undecided item's).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from ndd_stream.kafka.reads import Log
from ndd_stream.kafka.transactions import (
    TP,
    ProducerFenced,
    TransactionAborted,
    TransactionError,
    Transactions,
)
from ndd_stream.state.pending import Pair, least_offset
from ndd_stream.state.rocks import Checkpoint
from ndd_stream.worker.changelog import ChangelogRead, read_committed_partition, read_partition
from ndd_stream.worker.deciding import Handed, StatefulPartition, sources_named
from ndd_stream.worker.delivery import InOrder, Message, ReadRange
from ndd_stream.worker.gathering import GatherDecider
from ndd_stream.worker.merge import EventTimeMerge
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.records import OutRecord

log = logging.getLogger("ndd_stream.worker")

PRODUCE_BATCH = 128
"""Exactly-once: a piece's records are added to their transaction this many at a time."""

Send = Callable[[OutRecord], Awaitable[Awaitable[Any]]]
"""Hand a record to Faust's producer; the returned awaitable resolves on delivery (to the
record's metadata: its ``offset``)."""


@dataclass(frozen=True)
class Reached:
    """Where one input partition stands at the end of a piece: ``next_offset`` is the first
    input offset not reflected; a decider's partition also has the ``state`` that reflects
    it and the ``checkpoint`` to write (``checkpoint.next`` is ``next_offset``)."""

    tp: TP
    next_offset: int
    state: StatefulPartition | None = None
    checkpoint: Checkpoint | None = None

    @classmethod
    def of(cls, tp: TP, state: StatefulPartition, checkpoint: Checkpoint) -> Reached:
        return cls(tp, checkpoint.next, state, checkpoint)


class PieceFailed(TransactionError):
    """A piece's transaction failed (nothing of it is committed): ``failed`` maps each of
    its input partitions to the error, a ``kafka.transactions.ProducerFenced`` (the group
    moved on: left to the rebalance) or another ``TransactionError`` (open it again and
    redo its work)."""

    def __init__(self, failed: dict[TP, TransactionError]) -> None:
        self.failed = failed
        super().__init__("; ".join(str(e) for e in failed.values()))

    def fenced(self) -> set[TP]:
        """Log each failed partition once (a WARNING: what happens to it); those fenced."""
        out = set()
        for tp, exc in self.failed.items():
            fenced = isinstance(exc, ProducerFenced)
            log.warning("%s[%d]: %s; %s", tp[0], tp[1], exc,
                        "left to the rebalance" if fenced else "opened again and redone",
                        extra={"topic": tp[0], "partition": tp[1],
                               "event": "fenced" if fenced else "transaction_aborted"})
            if fenced:
                out.add(tp)
        return out

    def given_again(self, tps: Collection[TP]) -> PieceFailed:
        """This failure, seen when an assignment gave this worker ``tps``: a commit refused
        to the past member is moot for those (they are the worker's again, and nobody else
        commits them), so they are opened again and their work redone as after an aborted
        transaction, not left to a rebalance that has already ended."""
        return PieceFailed({
            tp: TransactionAborted(f"{exc}; assigned to this worker again")
            if isinstance(exc, ProducerFenced) and tp in tps else exc
            for tp, exc in self.failed.items()})


class Piece(ABC):
    """One piece's outputs and its commit."""

    @abstractmethod
    async def produce(self, tp: TP, record: OutRecord) -> None:
        """Add an output of input partition ``tp``'s work to the piece."""

    @abstractmethod
    async def commit(self, reached: Sequence[Reached], decided: int = 0) -> None:
        """Make the piece's outputs and ``reached`` durable (see the module docstring);
        ``decided``: the decisions in it, for the metrics."""


def checkpoints(deciders: Mapping[int, Any], merges: Mapping[int, EventTimeMerge[Any]],
                touched: Collection[int], moved: Mapping[int, int]) -> dict[int, Checkpoint]:
    """The checkpoint of each partition that moved in a piece. ``moved``: where offset
    order left each partition (the offset after its last record handed out); ``touched``:
    the partitions whose sequencer or gatherer the piece changed."""
    cursor: dict[int, int] = {}
    undecided: dict[int, Sequence[Pair]] = {}  # gatherers' pending lists
    for partition, decider in deciders.items():
        merge = merges.get(partition)
        gathering = isinstance(decider, GatherDecider)
        if merge is not None:
            if partition in touched:
                cursor[partition] = merge.resume_offset()
        else:
            position = moved.get(partition)
            if position is not None and (position > decider.handed_next or (
                    gathering and partition in touched)):
                cursor[partition] = position
        if gathering and partition in cursor:  # re-read from the oldest undecided item
            undecided[partition] = listed = decider.pending()
            if listed:
                cursor[partition] = min(cursor[partition], least_offset(listed))
    return {p: Checkpoint(
        position, order=merges[p].checkpoint() if p in merges else None,
        pending=undecided.get(p, ()), sources=sources_named(deciders[p].sources))
        for p, position in cursor.items()}


class Committer(ABC):
    """Opens pieces and the input partitions' means to commit them: an agent's face of the
    guarantee (``worker/guarantee.py`` makes one per agent). The agents ask it, never which
    guarantee runs: how a piece is committed, whether and when a batch is acknowledged to
    Faust, where an input partition is opened from and how its changelog is restored, how
    its offsets run (:meth:`in_order`) and whose records are forwarded (:meth:`forwards`)."""

    acks: bool
    """Whether Faust tracks the agents' records for acknowledgement (its topic's ``acks``):
    its commits are then the raw partitions' positions."""
    piece_items: int
    """About how many decisions a piece holds (``pool.CHECKPOINT_ITEMS`` and kin)."""
    batch_items: int
    """The most records an agent's batch holds."""
    holds = False
    """Whether a piece may stay open across batches (``pool.DeciderPool._hold``): its
    records are acknowledged to nobody, and the batch after it goes on with it."""

    def open(self, tp: TP) -> int | None:
        """Before input partition ``tp`` is read: wait out its previous owner's commit in
        flight; the group's committed offset then (-1: none), None if it was not read
        (at-least-once has nothing to wait for). Blocking."""
        return None

    def close(self, tps: Sequence[TP] | None = None) -> None:  # noqa: B027
        """Input partitions given up (None: all)."""

    @abstractmethod
    def resume_at(self, committed: int, handed: int | None) -> int | None:
        """Where a raw partition opened is read from, given the group's committed offset
        (-1: none) and the next offset handed out here before (None: none); None: where
        the consumer delivers first."""

    @abstractmethod
    def offsets_unknown(self, exc: Exception) -> None:
        """The group's committed offsets could not be read at an opening: raise, or go on
        without them."""

    @abstractmethod
    def begin(self, send: Send) -> Piece:
        """A new piece; ``send`` is Faust's producer (at-least-once)."""

    @abstractmethod
    def acknowledge(self, events: Sequence[Any]) -> None:
        """An agent is done with a batch of Faust's events (``runtime.held_batches``)."""

    @abstractmethod
    def forwards(self, owned: bool) -> bool:
        """Whether the router forwards a raw record, given whether its partition is owned
        here now (see ``worker/router.py``)."""

    @abstractmethod
    def in_order(self, read: ReadRange, metrics: WorkerMetrics, never: str) -> InOrder:
        """How an agent's input partitions are kept in offset order (``worker/delivery.py``):
        ``read`` reads skipped ranges back; ``never``: what a lost record never was."""

    @abstractmethod
    def restore(self, log: Log, topic: str, partition: int, start: int,
                timeout_s: float) -> tuple[ChangelogRead, bool]:
        """A stateful partition's changelog records from ``start`` (``worker/changelog.py``),
        and whether the partition ends before ``start`` (the broker lost data)."""

    def shutdown(self) -> None:  # noqa: B027
        """The worker stops: its clients go."""

    @property
    def in_flight(self) -> asyncio.Future[None] | None:
        """The commit of the last piece handed over, while it runs (see ``overlap``)."""
        return None

    def failed(self) -> None:  # noqa: B027
        """Raise the :class:`PieceFailed` of a commit handed over that failed (at once:
        never waits). Its pieces and every piece after them are not committed."""

    async def settle(self) -> None:  # noqa: B027
        """Wait for the commits handed over; :class:`PieceFailed` if one failed."""

    def wait(self) -> None:  # noqa: B027
        """Block until the commits handed over are done (before stores close)."""


class AcknowledgingCommitter(Committer):
    """At-least-once: deliveries waited for in order, then RocksDB."""

    acks = True

    def __init__(self, piece_items: int, batch_items: int = 500) -> None:
        self.piece_items = piece_items
        self.batch_items = batch_items

    def begin(self, send: Send) -> Piece:
        return _AcknowledgedPiece(send)

    def resume_at(self, committed: int, handed: int | None) -> int | None:
        # Faust may have committed past what was forwarded here (offsets it never
        # delivered count as done): never past what this worker handed out
        if committed < 0:
            return None
        return committed if handed is None else min(committed, handed)

    def offsets_unknown(self, exc: Exception) -> None:
        log.warning("committed offsets unknown (%s): gaps are closed when records "
                    "arrive", exc, extra={"event": "committed_unknown"})

    def acknowledge(self, events: Sequence[Any]) -> None:
        for event in events:
            event.ack()

    def forwards(self, owned: bool) -> bool:
        # Faust acknowledges a record of a partition revoked while its batch was in flight:
        # skipped, it would be lost when the partition came back with its offset past it
        return True

    def in_order(self, read: ReadRange, metrics: WorkerMetrics, never: str) -> InOrder:
        return InOrder(read, metrics, never)

    def restore(self, log: Log, topic: str, partition: int, start: int,
                timeout_s: float) -> tuple[ChangelogRead, bool]:
        read = read_partition(log, topic, partition, start, timeout_s)
        return read, read.next_offset <= start


class _AcknowledgedPiece(Piece):
    def __init__(self, send: Send) -> None:
        self.send = send
        self.pending: list[Awaitable[Any]] = []

    async def produce(self, tp: TP, record: OutRecord) -> None:
        self.pending.append(await self.send(record))

    async def commit(self, reached: Sequence[Reached], decided: int = 0) -> None:
        # 1. every output delivered (acks=all): a changelog never runs ahead of outputs
        await _all(self.pending)
        self.pending = []
        states = [r for r in reached if r.state is not None and r.checkpoint is not None]
        # 2. the changelog records and the checkpoints, delivered (partitions side by side)
        sent = [[await self.send(x) for x in r.state.drain_changelog(r.checkpoint)]
                for r in states if r.state is not None and r.checkpoint is not None]
        for r, futures in zip(states, sent, strict=True):
            assert r.state is not None and r.checkpoint is not None
            offsets = [m.offset for m in await _all(futures)
                       if getattr(m, "offset", None) is not None]
            # 3. RocksDB: the state with its checkpoint, and where the changelog now ends
            r.state.commit(replace(r.checkpoint, changelog=max(offsets) + 1 if offsets
                                   else r.state.changelog_next))
        # 4. a gatherer's items now pending go to the shards (write-ahead: its
        # checkpoint lists them, so a kill before they arrive sends them again)
        fanout = [x for r in states if r.state is not None
                  for x in getattr(r.state, "drain_fanout", list)()]
        await _all([await self.send(x) for x in fanout])
        # 5. the input offsets: the agent acknowledges its batch to Faust after the piece
        # (the router's, whose ``reached`` has no state, move only there)


class TransactionalCommitter(Committer):
    """Exactly-once: one transaction per piece on the agent's producer, then RocksDB.

    The transactions run one at a time, in the order the pieces were handed over, in the
    committer's one commit thread, each followed by its RocksDB writes. With ``overlap``,
    :meth:`Piece.commit` returns once the piece is handed over and the agent decides the
    next piece while the transaction commits, on a state that already holds the piece's
    documents. A piece's transaction begins only after the one before it committed; when
    one fails, every piece after it fails too without a transaction (its work rests on
    state that was never committed), and :meth:`failed` / :meth:`settle` raise one
    :class:`PieceFailed` naming all their partitions: they are opened again from what
    they committed and their records decided again (``pool.DeciderPool``)."""

    acks = False

    def __init__(self, txns: Transactions, metrics: WorkerMetrics, piece_items: int,
                 stable: Callable[[Sequence[TP]], Any] | None = None,
                 overlap: bool = False) -> None:
        self.txns = txns
        self.metrics = metrics
        self.piece_items = self.batch_items = piece_items  # a batch is one piece
        self.stable = stable
        self.overlap = overlap
        self.holds = overlap  # nothing is acknowledged: a piece may span batches
        # one transaction at a time on the producer, in order: one thread runs them
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ndd-commit")
        self._last: concurrent.futures.Future[None] | None = None  # the last handed over
        self._flight: asyncio.Future[None] | None = None  # the same, for the event loop
        self._broken: BaseException | None = None  # a failure the pieces after it inherit
        # outputs of a partition a piece did not move: for the piece that moves it
        self.carried: dict[TP, list[OutRecord]] = {}

    def open(self, tp: TP) -> int | None:
        # a commit of the previous owner whose offsets the broker already took is waited
        # out (the committed offset read read_committed), so what is read next
        # (changelog, committed offset) is all it will ever commit; any later one of its
        # commits is refused by the group's generation (kafka/transactions.py)
        self.txns.start()
        if self.stable is None:
            return None
        return int(self.stable([tp]).get(tp, -1))

    def close(self, tps: Sequence[TP] | None = None) -> None:
        for tp in list(self.carried) if tps is None else tps:
            self.carried.pop(tp, None)

    def begin(self, send: Send) -> Piece:
        return _TransactionalPiece(self)

    def resume_at(self, committed: int, handed: int | None) -> int | None:
        return max(committed, 0)  # the committed offset is the one position

    def offsets_unknown(self, exc: Exception) -> None:
        raise exc

    def acknowledge(self, events: Sequence[Any]) -> None:
        pass  # the offsets move only in the transactions: Faust commits nothing

    def forwards(self, owned: bool) -> bool:
        # a partition not (or no longer) owned is its owner's: its records must not move
        # the position in a transaction of this worker
        return owned

    def in_order(self, read: ReadRange, metrics: WorkerMetrics, never: str) -> InOrder:
        return CommittedOrder(read, metrics, never)

    def restore(self, log: Log, topic: str, partition: int, start: int,
                timeout_s: float) -> tuple[ChangelogRead, bool]:
        read = read_committed_partition(log, topic, partition, start, timeout_s)
        return read, read.next_offset < start

    def shutdown(self) -> None:
        self.txns.shutdown()

    @property
    def in_flight(self) -> asyncio.Future[None] | None:
        return self._flight

    def failed(self) -> None:
        flight = self._flight
        if flight is not None and flight.done():
            self._flight = None
            self._broken = None  # the last piece is done: no piece inherits it any more
            flight.result()

    async def settle(self) -> None:
        flight = self._flight
        if flight is None:
            return
        # a batch cancelled (a stop, a rebalance) leaves the commit running
        await asyncio.wait([flight])
        if self._flight is flight:
            self.failed()

    def wait(self) -> None:
        last = self._last
        if last is not None:
            concurrent.futures.wait([last])

    def hand_over(self, run: Callable[[], None]) -> asyncio.Future[None]:
        """Run ``run`` in the commit thread after the pieces handed over before it."""
        self._last = self._thread.submit(run)
        self._flight = asyncio.wrap_future(self._last)
        return self._flight

    def run(self, records: list[Any], offsets: dict[TP, int], reported: set[str],
            handed: list[tuple[Reached, Handed]], tps: set[TP], decided: int) -> None:
        """A piece's steps 3 and 4, in the commit thread."""
        broken = self._broken
        if isinstance(broken, PieceFailed):  # one before it failed: its base is not committed
            aborted = TransactionAborted("not committed: a piece before it failed")
            self._broken = PieceFailed({**{tp: aborted for tp in tps}, **broken.failed})
            raise self._broken
        if broken is not None:  # not a broker's answer (a bug): it stops the agent
            raise broken
        # 3. one transaction: the records with the input offsets reached
        started = time.perf_counter()
        try:
            ends = self.txns.commit(records, offsets, reported)
        except TransactionError as exc:
            self.metrics.transaction_failures.labels(type(exc).__name__).inc()
            self._broken = PieceFailed({tp: exc for tp in tps})
            raise self._broken from exc
        except BaseException as exc:  # not a broker's answer (a bug, a test's kill)
            self._broken = exc
            raise
        if handed:  # a decider's piece
            self.metrics.transaction.observe(time.perf_counter() - started)
            self.metrics.transaction_decisions.observe(decided)
        # 4. RocksDB, a cache of the committed changelog: only now
        for r, batch in handed:
            assert r.state is not None and r.checkpoint is not None
            changelog = (r.state.changelog_topic, r.tp[1])
            r.state.commit(replace(r.checkpoint, changelog=ends.get(
                changelog, r.state.changelog_next)), batch)


class _TransactionalPiece(Piece):
    """The records are held until the commit, which adds them all to one transaction in
    one call into the client (a few wake-ups of its sender thread, no Python callback per
    record): a transaction is open only while a piece commits."""

    def __init__(self, committer: TransactionalCommitter) -> None:
        self.committer = committer
        self.held: dict[TP, list[OutRecord]] = {}

    async def produce(self, tp: TP, record: OutRecord) -> None:
        held = self.held.get(tp)
        if held is None:
            held = self.held[tp] = []
        held.append(record)

    async def commit(self, reached: Sequence[Reached], decided: int = 0) -> None:
        c = self.committer
        moved = {r.tp for r in reached}
        for tp, held in self.held.items():
            if tp not in moved:
                c.carried.setdefault(tp, []).extend(held)
        records: list[Any] = []
        reported: set[str] = set()
        handed: list[tuple[Reached, Handed]] = []
        for r in reached:
            # 1. the outputs
            records += c.carried.pop(r.tp, [])
            records += self.held.get(r.tp, [])
            # 2. the changelog records and checkpoint, and a gatherer's items now pending
            # go to the shards in the transaction of the checkpoint that lists them
            if r.state is not None and r.checkpoint is not None:
                changes, batch = r.state.hand_over(r.checkpoint)
                records += changes
                records += getattr(r.state, "drain_fanout", list)()
                reported.add(r.state.changelog_topic)
                handed.append((r, batch))
        if not reached:
            return
        offsets = {r.tp: r.next_offset for r in reached}
        before = c.in_flight
        if before is not None and not before.done():
            # at most one piece commits while the next is decided: the pieces waiting
            # (records, RocksDB batches) never pile up behind a slow broker
            await asyncio.wait([before])
        c.hand_over(partial(c.run, records, offsets, reported, handed, moved | set(self.held),
                            decided))
        if not c.overlap:
            await c.settle()


class CommittedOrder(InOrder):
    """Offset order of an input read ``read_committed`` (exactly-once): offsets jump over
    transaction markers and aborted records at every transaction. Only the first jump after
    a resume is read back (Faust's skip follows a rebalance: prefetched later records
    delivered first), and it is neither a gap to report nor a loss (what is missing may be
    markers and aborted records); after it, a jump is the log's, not the consumer's."""

    def __init__(self, read: ReadRange, metrics: WorkerMetrics, never: str) -> None:
        super().__init__(read, metrics, never)
        self._checked: set[TP] = set()

    def resume(self, tp: TP, offset: int | None) -> None:
        self._checked.discard(tp)
        super().resume(tp, offset)

    def skipped(self, m: Message, expected: int | None) -> bool:
        tp = (m.topic, m.partition)
        first = tp not in self._checked
        self._checked.add(tp)
        return first and expected is not None and m.offset > expected

    async def _fill(self, tp: TP, start: int, end: int) -> Sequence[Message]:
        return await self._read(tp, start, end)


async def _all(futures: Sequence[Awaitable[Any]]) -> list[Any]:
    return list(await asyncio.gather(*futures)) if futures else []
