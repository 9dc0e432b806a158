"""Where a piece of work is committed: the one place where the two guarantees differ.

A *piece* is what one agent did with some records of its input partitions: the outputs it
produced and, for each input partition it moved, where that partition now stands
(:class:`Reached`: the next input offset and, for a decider, its state and checkpoint).
The agents hand outputs to a piece (:meth:`Piece.produce`) and end it with
:meth:`Piece.commit`; they never ask which guarantee runs.

Exactly-once (:class:`TransactionalCommitter`, Apache Kafka): each agent has one
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
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ndd_stream.kafka.transactions import TP, ProducerFenced, TransactionError, Transactions
from ndd_stream.state.codec import Checkpoint
from ndd_stream.state.pending import Pair, least_offset
from ndd_stream.worker.deciding import StatefulPartition, sources_named
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
            if position is not None and (position > decider.next_offset or (
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
    """Opens pieces and the input partitions' means to commit them."""

    transactional: bool
    """Whether inputs are read ``read_committed`` (offsets jump over transaction markers)."""
    piece_items: int
    """About how many decisions a piece holds (``pool.CHECKPOINT_ITEMS`` and kin)."""

    def open(self, tp: TP) -> int | None:
        """Before input partition ``tp`` is read: wait out its previous owner's commit in
        flight; the group's committed offset then (-1: none), None if it was not read
        (at-least-once has nothing to wait for). Blocking."""
        return None

    def close(self, tps: Sequence[TP] | None = None) -> None:  # noqa: B027
        """Input partitions given up (None: all)."""

    @abstractmethod
    def begin(self, send: Send) -> Piece:
        """A new piece; ``send`` is Faust's producer (at-least-once)."""


class AcknowledgingCommitter(Committer):
    """At-least-once: deliveries waited for in order, then RocksDB."""

    transactional = False

    def __init__(self, piece_items: int) -> None:
        self.piece_items = piece_items

    def begin(self, send: Send) -> Piece:
        return _AcknowledgedPiece(send)


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
    """Exactly-once: one transaction per piece on the agent's producer, then RocksDB."""

    transactional = True

    def __init__(self, txns: Transactions, metrics: WorkerMetrics, piece_items: int,
                 stable: Callable[[Sequence[TP]], Any] | None = None) -> None:
        self.txns = txns
        self.metrics = metrics
        self.piece_items = piece_items
        self.stable = stable
        # one transaction at a time on the producer: an agent's pieces run one at a time
        # under its lock (the router's, the pool's), and Transactions holds its own
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
        for r in reached:
            # 1. the outputs
            records += c.carried.pop(r.tp, [])
            records += self.held.get(r.tp, [])
            # 2. the changelog records and checkpoint, and a gatherer's items now pending
            # go to the shards in the transaction of the checkpoint that lists them
            if r.state is not None and r.checkpoint is not None:
                records += r.state.drain_changelog(r.checkpoint)
                records += getattr(r.state, "drain_fanout", list)()
                reported.add(r.state.changelog_topic)
        if not reached:
            return
        # 3. one transaction: the records with the input offsets reached
        started = time.perf_counter()
        try:
            ends = await asyncio.get_running_loop().run_in_executor(
                None, c.txns.commit, records, {r.tp: r.next_offset for r in reached},
                reported)
        except TransactionError as exc:
            c.metrics.transaction_failures.labels(type(exc).__name__).inc()
            raise PieceFailed({tp: exc for tp in moved | set(self.held)}) from exc
        if any(r.state is not None for r in reached):  # a decider's piece
            c.metrics.transaction.observe(time.perf_counter() - started)
            c.metrics.transaction_decisions.observe(decided)
        # 4. RocksDB, a cache of the committed changelog: only now
        for r in reached:
            if r.state is not None and r.checkpoint is not None:
                changelog = (r.state.changelog_topic, r.tp[1])
                r.state.commit(replace(r.checkpoint, changelog=ends.get(
                    changelog, r.state.changelog_next)))


def committer_for(txns: Transactions | None, metrics: WorkerMetrics, *, acknowledged_items: int,
                  transaction_items: int,
                  stable: Callable[[Sequence[TP]], Any] | None = None) -> Committer:
    """The committer of the guarantee in effect (``txns``: exactly-once; ``stable``: reads
    the group's committed offsets ``read_committed``, see :meth:`TransactionalCommitter.open`)."""
    if txns is None:
        return AcknowledgingCommitter(acknowledged_items)
    return TransactionalCommitter(txns, metrics, transaction_items, stable)


async def _all(futures: Sequence[Awaitable[Any]]) -> list[Any]:
    return list(await asyncio.gather(*futures)) if futures else []
