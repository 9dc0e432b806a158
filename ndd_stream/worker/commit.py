"""Where a piece of work is committed: the one place where the two guarantees differ.

A *piece* is what one agent did with some records of its input partitions: the outputs it
produced and, for each input partition it moved, where that partition now stands
(:class:`Reached`: the next input offset and, for a decider, its state and checkpoint).
The agents hand outputs to a piece (:meth:`Piece.produce`) and end it with
:meth:`Piece.commit`; they never ask which guarantee runs.

Exactly-once (:class:`TransactionalCommitter`, Apache Kafka): each input partition has a
transactional producer (``kafka/transactions.py``); a piece's outputs, changelog records,
checkpoint and input offset are one transaction per partition, then RocksDB, a cache of
the committed changelog, is written. A worker killed before the commit leaves nothing of
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
from ndd_stream.worker.deciding import StatefulPartition
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
    """Some input partitions' transactions of a piece failed (nothing of theirs is
    committed; the others' are): ``failed`` maps each to its error, a
    ``kafka.transactions.ProducerFenced`` (a newer owner has it) or another
    ``TransactionError`` (open it again and redo its work)."""

    def __init__(self, failed: dict[TP, TransactionError]) -> None:
        self.failed = failed
        super().__init__("; ".join(str(e) for e in failed.values()))

    def fenced(self) -> set[TP]:
        """Log each failed partition once (a WARNING: what happens to it); those fenced."""
        out = set()
        for tp, exc in self.failed.items():
            fenced = isinstance(exc, ProducerFenced)
            log.warning("%s[%d]: %s; %s", tp[0], tp[1], exc,
                        "left to its new owner" if fenced else "opened again and redone",
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
        pending=undecided.get(p, ()), sources=dict(deciders[p].sources) or None)
        for p, position in cursor.items()}


class Committer(ABC):
    """Opens pieces and the input partitions' means to commit them."""

    transactional: bool
    """Whether inputs are read ``read_committed`` (offsets jump over transaction markers)."""
    piece_items: int
    """About how many decisions a piece holds (``pool.CHECKPOINT_ITEMS`` and kin)."""

    def open(self, tp: TP) -> None:  # noqa: B027 (at-least-once has nothing to open)
        """Before input partition ``tp`` is read: fence its previous owner. Blocking."""

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
    """Exactly-once: one transaction per input partition, then RocksDB."""

    transactional = True

    def __init__(self, txns: Transactions, metrics: WorkerMetrics, piece_items: int) -> None:
        self.txns = txns
        self.metrics = metrics
        self.piece_items = piece_items

    def open(self, tp: TP) -> None:
        # the previous owner's open transaction is aborted and its later commits refused,
        # so what is read next (changelog, committed offset) is all it will ever commit
        self.txns.open(tp)

    def close(self, tps: Sequence[TP] | None = None) -> None:
        self.txns.close(None if tps is None else list(tps))

    def begin(self, send: Send) -> Piece:
        return _TransactionalPiece(self)


class _TransactionalPiece(Piece):
    """The records of each input partition are held and added to its transaction
    :data:`PRODUCE_BATCH` at a time (the rest at the commit): the same transaction, with a
    call into the client per batch of records rather than one per record, a few wake-ups of
    its sender thread, and no Python callback per record. A partition whose transaction
    refuses a record (fenced, aborted) takes no more records in this piece and fails with
    the commit's failures (``PieceFailed``), so that it is opened again or left to its new
    owner like a failed commit."""

    def __init__(self, committer: TransactionalCommitter) -> None:
        self.txns = committer.txns
        self.metrics = committer.metrics
        self.held: dict[TP, list[OutRecord]] = {}
        self.failed: dict[TP, TransactionError] = {}

    async def produce(self, tp: TP, record: OutRecord) -> None:
        if tp in self.failed:
            return
        held = self.held.get(tp)
        if held is None:
            held = self.held[tp] = []
        held.append(record)
        if len(held) >= PRODUCE_BATCH:
            self.held[tp] = []
            self._join(tp, held)

    def _join(self, tp: TP, records: list[Any], reported: str | None = None) -> bool:
        """Add records to ``tp``'s transaction; False (and noted) when it refuses them."""
        try:
            self.txns.get(tp).produce_all(records, reported)
        except TransactionError as exc:
            self.failed[tp] = exc
            return False
        return True

    async def commit(self, reached: Sequence[Reached], decided: int = 0) -> None:
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        moved = {r.tp for r in reached}
        for tp in [tp for tp in self.held if tp not in moved and tp not in self.failed]:
            # outputs of a partition that did not move: its open transaction keeps them
            self._join(tp, self.held.pop(tp))
        jobs, committing = [], []
        for r in reached:
            if r.tp in self.failed:
                continue
            txn = self.txns.get(r.tp)
            # 1. the outputs are in the partition's open transaction, or join it here
            records = self.held.pop(r.tp, [])
            # 2. the changelog records and checkpoint join it, and a gatherer's items now
            # pending go to the shards in the transaction of the checkpoint that lists them
            reported = None
            if r.state is not None and r.checkpoint is not None:
                records += r.state.drain_changelog(r.checkpoint)
                records += getattr(r.state, "drain_fanout", list)()
                reported = r.state.changelog_topic
            if not self._join(r.tp, records, reported):
                continue
            # 3. commit with the input offset reached (partitions side by side)
            jobs.append(loop.run_in_executor(None, txn.commit, {r.tp: r.next_offset}))
            committing.append(r)
        delivered = await asyncio.gather(*jobs, return_exceptions=True)
        if jobs and any(r.state is not None for r in reached):  # a decider's piece
            self.metrics.transaction.observe(time.perf_counter() - started)
            self.metrics.transaction_decisions.observe(decided / len(jobs))
        failed = dict(self.failed)
        for exc in failed.values():
            self.metrics.transaction_failures.labels(type(exc).__name__).inc()
        # 4. RocksDB, a cache of the committed changelog: only now, only what committed
        for r, ends in zip(committing, delivered, strict=True):
            if isinstance(ends, TransactionError):
                failed[r.tp] = ends
                self.metrics.transaction_failures.labels(type(ends).__name__).inc()
            elif isinstance(ends, BaseException):
                raise ends
            elif r.state is not None and r.checkpoint is not None:
                changelog = (r.state.changelog_topic, r.tp[1])
                r.state.commit(replace(r.checkpoint, changelog=ends.get(
                    changelog, r.state.changelog_next)))
        if failed:
            raise PieceFailed(failed)


def committer_for(txns: Transactions | None, metrics: WorkerMetrics, *, acknowledged_items: int,
                  transaction_items: int) -> Committer:
    """The committer of the guarantee in effect (``txns``: exactly-once)."""
    if txns is None:
        return AcknowledgingCommitter(acknowledged_items)
    return TransactionalCommitter(txns, metrics, transaction_items)


async def _all(futures: Sequence[Awaitable[Any]]) -> list[Any]:
    return list(await asyncio.gather(*futures)) if futures else []
