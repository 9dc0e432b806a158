"""One shard of the sharded windows (``NDD_SHARDS`` > 1): a partition of the shards topic.

Partition ``k`` of ``<app>-news.shards`` is shard ``k % shards`` of scoped partition
``k // shards``. It reads every item that partition's gatherer prepared, in order, answers
each with its best local match (into the scoped partition), and indexes the items it owns.
State, changelog (``<app>-shards-changelog``, same partition number), checkpoint and
recovery are the deciders' (:class:`StatefulPartition`): restart- and kill -9-safe alike.

A prepared item whose arrival number the shard has passed (sent again by a gatherer that
restarted) is skipped: its answer was produced before the shard's checkpoint moved past it.

A record carries a batch of items (``shardwire``, up to 256 KiB), usually more than the
pool's ``OFFLOAD_BYTES``: the pool then answers it in its decision thread, so the event
loop (heartbeats, the gatherer of the same worker) keeps running while the shard counts;
the count releases the GIL.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ndd_stream.core.detector import DetectorConfig
from ndd_stream.core.shards import ShardIndex
from ndd_stream.worker.deciding import Outcome, StatefulPartition
from ndd_stream.worker.records import Source
from ndd_stream.worker.shardwire import BadShardRecord, answer_records, read_prepared

log = logging.getLogger("ndd_stream.worker")


class ShardPartition(StatefulPartition):
    """A ShardIndex and its RocksDB state, for one partition of the shards topic."""

    def __init__(self, partition: int, path: Path, config: DetectorConfig, shards: int,
                 changelog_topic: str, scoped_topic: str) -> None:
        self.config = config
        self.shards = shards
        self.shard = partition % shards
        self.scoped_partition = partition // shards
        self.scoped_topic = scoped_topic
        self.answered = 0
        super().__init__(partition, path, changelog_topic)

    def _make_detector(self) -> ShardIndex:
        return ShardIndex(self.shard, self.config, self.store)

    def process(self, value: bytes | None, key: bytes | None, headers: object,
                source: Source, order_note: str | None = None) -> Outcome:
        """Answer a record's prepared items (one record of answers per batch of them)."""
        try:
            preps, scoped_partition = read_prepared(value)
        except BadShardRecord as exc:
            log.warning("%s: skipped: %s", source.position, exc)
            return Outcome([])
        if scoped_partition != self.scoped_partition or any(
                prep.owner >= self.shards for prep in preps):
            log.warning("%s: skipped: prepared for scoped partition %d, not for shard %d of "
                        "%d", source.position, scoped_partition, self.shard, self.shards)
            return Outcome([])
        answers = []
        for prep in preps:
            window = self.detector.window_of(prep.scope)
            if prep.number < window.next_number:
                continue  # answered before (a restarted gatherer sent it again)
            answers.append(self.detector.answer(prep))
        self.answered += len(answers)
        return Outcome(answer_records(answers, self.scoped_topic, self.scoped_partition))
