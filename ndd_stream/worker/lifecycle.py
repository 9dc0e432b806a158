"""Opening a stateful partition: fence, local state, restore, checkpoint, checks.

In this order, so that what is read is all the previous owner will ever commit and the
partition resumes from one position, its checkpoint:
1. the committer opens the input partition (exactly-once: registers its transactional id,
   which aborts the previous owner's open transaction and refuses its later commits);
2. the local RocksDB state is opened (what this worker committed before, if anything);
3. the changelog is read from where the local state ends (exactly-once: committed records
   to the last stable offset; at-least-once: to a sentinel), and the broker is checked
   not to hold less than the local state reflects;
4. the checkpoint is chosen (the changelog's last one after the local state's, else the
   local one) and the state applied up to it;
5. the state's layout (shards, scopes) is checked against the running configuration.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from confluent_kafka import KafkaException

from ndd_stream.kafka.reads import Log
from ndd_stream.worker.changelog import read_changelog
from ndd_stream.worker.commit import Committer
from ndd_stream.worker.deciding import LayoutChanged, StatefulPartition
from ndd_stream.worker.metrics import WorkerMetrics

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
    # first fence the previous owner (exactly-once), so that what is read next is all
    # it will ever commit
    where.committer.open((where.scoped_topic, partition))
    decider = where.factory(partition, where.state_dir / f"{where.dir_prefix}-{partition}")
    where.metrics.restored.labels("local").inc(decider.restored)
    changelog = decider.changelog_topic
    _check_log_start(where, changelog, partition, decider.changelog_next)
    read, lost = read_changelog(where.log, changelog, partition, decider.changelog_next,
                                where.restore_timeout_s,
                                committed=where.committer.transactional)
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
