"""A pool's stateful partitions: opening (the last owner's commit waited out, local state,
restore, checkpoint, checks), closing, and opening again after a failed piece.

:class:`Partitions` holds the open partitions of one pool (``worker/pool.py``) and which
ones this worker owns; :func:`open_partition` opens one, in this order, so that what is
read is all the previous owner will ever commit and the partition resumes from one
position, its checkpoint:
1. the committer opens the input partition (exactly-once: the worker's transactional id is
   registered, once, and the partition's committed offset is read ``read_committed``,
   which waits out a commit of the previous owner still in flight; any later commit of
   that owner is refused by the group's generation);
2. the local RocksDB state is opened (what this worker committed before, if anything);
3. the changelog is read from where the local state ends (exactly-once: committed records
   to the last stable offset; at-least-once: to a sentinel), and the broker is checked
   not to hold less than the local state reflects;
4. the checkpoint is chosen (the changelog's last one after the local state's, else the
   local one) and the state applied up to it;
5. the state's layout (shards, scopes) is checked against the running configuration.

An opening runs in a thread and outlives whoever waits for it (a rebalance callback waits
only so long: ``DeciderPool.assign``); a partition closed while it opened (a revocation
overtook it) is closed by the opening when it ends, and opened again if it is owned again.

When a piece's commit fails, the partitions whose state is behind what was handed out
are closed and opened again from what they committed (:meth:`Partitions.reopen`); a
partition whose commit was refused to a past member of the group is left to the
rebalance, unless an assignment seen since gave it back (``PieceFailed.given_again``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from ndd_stream.kafka.reads import Log
from ndd_stream.worker.commit import Committer, PieceFailed
from ndd_stream.worker.deciding import LayoutChanged, StatefulPartition
from ndd_stream.worker.delivery import TP, InOrder
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.patience import patiently
from ndd_stream.worker.sequencing import Sequencers

log = logging.getLogger("ndd_stream.worker")


class BrokerLostData(RuntimeError):
    """The broker holds less than the local state reflects (e.g. an in-memory broker was
    restarted empty). Continuing would skip or re-decide records inconsistently."""


@dataclass(frozen=True)
class Where:
    """What opening a pool's partitions needs."""

    committer: Committer
    factory: Callable[[int, Path], StatefulPartition]
    log: Log
    metrics: WorkerMetrics
    state_dir: Path
    dir_prefix: str
    scoped_topic: str
    restore_timeout_s: float
    # changelog records gone before a restore read them: (topic, partition, first, last)
    lost: Callable[[str, int, int, int], None] | None = field(default=None)


def open_partition(where: Where, partition: int) -> StatefulPartition:
    """Steps 1-5 of the module docstring. Blocking (run in an executor). Raises
    BrokerLostData, LayoutChanged, ChangelogError, TransactionError."""
    started = time.monotonic()
    # first wait out the previous owner's commit in flight (exactly-once), so that what
    # is read next is all it will ever commit
    where.committer.open((where.scoped_topic, partition))
    decider = where.factory(partition, where.state_dir / f"{where.dir_prefix}-{partition}")
    where.metrics.restored.labels("local").inc(decider.restored)
    changelog = decider.changelog_topic
    _check_log_start(where, changelog, partition, decider.changelog_next)
    read, lost = where.committer.restore(where.log, changelog, partition,
                                         decider.changelog_next, where.restore_timeout_s)
    if lost:
        decider.close()
        raise BrokerLostData(
            f"{changelog}[{partition}] ends at offset {read.next_offset - 1} "
            f"but the local state under {where.state_dir} already reflects offset "
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
        decider.check_layout(f"{where.scoped_topic}[{partition}]")
    except LayoutChanged:
        decider.close()
        raise
    where.metrics.restored.labels("changelog").inc(len(read.records))
    log.info("%s %s ready: %d documents in window (%d changelog records) in %.2fs",
             where.dir_prefix, partition, decider.window_documents(), len(read.records),
             time.monotonic() - started,
             extra={"partition": partition, "event": "partition_ready"})
    return decider


def _check_log_start(where: Where, changelog: str, partition: int, start: int) -> None:
    """Report the changelog records the local state has not seen and the broker no longer
    holds (retention, deleted records): a restore from ``start`` would skip them."""
    if start <= 0 or where.lost is None:
        return
    try:
        first = where.log.log_start(changelog, partition, min(60.0, where.restore_timeout_s))
    except KafkaException as exc:  # only a report: the restore itself goes on
        log.warning("%s[%d]: log start unknown (%s); not checked for lost records",
                    changelog, partition, exc, extra={"event": "log_start_unknown"})
        return
    if first > start:
        where.lost(changelog, partition, start, first - 1)


class Partitions:
    """The open stateful partitions of one pool (``deciders``) and those this worker owns
    (``owned``; None: not told yet, so all of them). Opening registers a partition with
    the pool's offset order (``InOrder``, from the state's own position) and sequencers;
    closing unregisters it and closes its input partition in the committer."""

    def __init__(self, where: Where, order: InOrder, sequencers: Sequencers,
                 reopen_timeout_s: float, settle: Callable[[], None]) -> None:
        self.where = where
        self.order = order
        self.sequencers = sequencers
        self.reopen_timeout_s = reopen_timeout_s  # opening again is tried so long
        self.settle = settle  # waits for a decision still running in the pool's thread
        self.deciders: dict[int, Any] = {}
        self.owned: set[int] | None = None
        self._opening: dict[int, asyncio.Task[Any]] = {}
        self._epochs: dict[int, int] = {}  # moved on by a close: an opening overtaken by it

    def tp(self, partition: int) -> TP:
        return (self.where.scoped_topic, partition)

    def open_sync(self, partition: int) -> StatefulPartition:
        return open_partition(self.where, partition)

    async def ensure(self, partition: int) -> Any:
        """The partition's state, opened if it is not; None if it was closed while it
        opened and is not owned any more (a revocation overtook the opening)."""
        while True:
            decider = self.deciders.get(partition)
            if decider is not None:
                return decider
            task = self._opening.get(partition)
            if task is None:
                task = asyncio.get_running_loop().create_task(
                    self._open(partition, self._epochs.get(partition, 0)))
                self._opening[partition] = task
            # Shielded: a waiter cancelled mid-open (a rebalance callback, a stop) must not
            # orphan the RocksDB store the executor thread goes on opening; a second open
            # of the same directory would fail on RocksDB's lock ("lock hold by current
            # process").
            decider = await asyncio.shield(task)
            if decider is not None:
                return decider
            if self.owned is not None and partition not in self.owned:
                return None
            # closed while it opened and given back since: opened again from what is
            # committed now (another worker may have committed meanwhile)

    async def ensure_patiently(self, partition: int) -> Any:
        """``ensure``, tried again while the cluster's routine events last."""
        return await patiently(f"{self.where.dir_prefix} {partition}: opening",
                               lambda: self.ensure(partition), self.reopen_timeout_s)

    async def _open(self, partition: int, epoch: int) -> Any:
        """Open in a thread and register the decider, whoever still waits for it; None
        (what it opened closed again) if the partition was closed meanwhile."""
        try:
            decider = await asyncio.get_running_loop().run_in_executor(
                None, self.open_sync, partition)
        finally:
            self._opening.pop(partition, None)
        if self._epochs.get(partition, 0) != epoch:
            decider.close()
            self.where.committer.close([self.tp(partition)])
            log.info("%s %s closed as it opened", self.where.dir_prefix, partition,
                     extra={"partition": partition, "event": "revoked"})
            return None
        self.deciders[partition] = decider
        self.sequencers.open(partition, decider)
        # Decided strictly in order from the state's own position (not Faust's).
        self.order.resume(self.tp(partition), decider.next_offset)
        self.where.metrics.assigned.set(len(self.deciders))
        return decider

    def close(self, partitions: Sequence[int] | None = None) -> None:
        """Close ``partitions`` (None: all), once no decision runs in the pool's thread.
        One still opening is closed by its opening, when it ends (``_open``)."""
        self.settle()
        for partition in list(self._opening if partitions is None else partitions):
            self._epochs[partition] = self._epochs.get(partition, 0) + 1
        for partition in list(self.deciders if partitions is None else partitions):
            decider = self.deciders.pop(partition, None)
            self.sequencers.close(partition)
            if decider is not None:
                decider.close()
                self.order.resume(self.tp(partition), None)
        self.where.committer.close(None if partitions is None
                                   else [self.tp(p) for p in partitions])
        self.where.metrics.assigned.set(len(self.deciders))

    async def reopen(self, failed: PieceFailed, handed: Mapping[TP, int]) -> dict[TP, int]:
        """After a failed piece: close every partition whose state is behind what was
        handed out (the failed ones, and those whose records after the piece are dropped
        with it), open again those still owned; where each must be read up to again."""
        behind = {p for p, d in self.deciders.items()
                  if handed.get(self.tp(p), d.next_offset) > d.next_offset}
        behind |= {tp[1] for tp in failed.failed}
        for tp in failed.fenced():
            if self.owned is None:  # not told yet: owned were those open
                self.owned = set(self.deciders)
            self.owned.discard(tp[1])
        self.close(sorted(behind))
        until: dict[TP, int] = {}
        for partition in sorted(behind):
            if self.owned is not None and partition not in self.owned:
                continue
            decider = await self.ensure_patiently(partition)
            if decider is None:
                continue
            end = handed.get(self.tp(partition), decider.next_offset)
            if end > decider.next_offset:
                until[self.tp(partition)] = end
        return until
