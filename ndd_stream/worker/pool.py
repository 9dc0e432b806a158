"""The deciders of the scoped partitions this worker owns, and their batch processing.

Per batch of scoped records, in this order (what makes at-least-once safe):
1. decide every record (state changes are buffered in each partition's RocksDB batch);
2. produce the routed records and wait until the broker has them all;
3. produce the changelog records and wait for them;
4. commit each partition's RocksDB batch with the offsets it now reflects;
5. only then Faust acks the events, so Kafka's committed offset never passes state.
A crash between any two steps replays records whose decisions are either recomputed
from the same state (same result) or answered from the stored decision by identity.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from ndd_stream.core.detector import DetectorConfig
from ndd_stream.core.items import ItemFormat
from ndd_stream.worker.changelog import read_partition
from ndd_stream.worker.deciding import OutputTopics, PartitionDecider
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.records import OutRecord, Source

log = logging.getLogger("ndd_stream.worker")

Send = Callable[[OutRecord], Awaitable[Awaitable[Any]]]


class BrokerLostData(RuntimeError):
    """The broker holds less than the local state reflects (e.g. an in-memory broker was
    restarted empty). Continuing would skip or re-decide records inconsistently."""


class Message(Protocol):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Any
    timestamp: float | None


class DeciderPool:
    """Opens, restores, runs and closes one PartitionDecider per owned scoped partition."""

    def __init__(
        self, state_dir: Path, config: DetectorConfig, fmt: ItemFormat, topics: OutputTopics,
        kafka_conf: dict[str, object], metrics: WorkerMetrics, restore_timeout_s: float = 300.0,
    ) -> None:
        self.state_dir = state_dir
        self.config = config
        self.fmt = fmt
        self.topics = topics
        self.kafka_conf = kafka_conf
        self.metrics = metrics
        self.restore_timeout_s = restore_timeout_s
        self.deciders: dict[int, PartitionDecider] = {}
        self._opening: dict[int, asyncio.Task[PartitionDecider]] = {}

    async def ensure(self, partition: int) -> PartitionDecider:
        decider = self.deciders.get(partition)
        if decider is not None:
            return decider
        task = self._opening.get(partition)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._open(partition))
            self._opening[partition] = task
        try:
            decider = await task
        finally:
            self._opening.pop(partition, None)
        self.deciders[partition] = decider
        self.metrics.assigned.set(len(self.deciders))
        return decider

    async def _open(self, partition: int) -> PartitionDecider:
        return await asyncio.get_running_loop().run_in_executor(None, self._open_sync, partition)

    def _open_sync(self, partition: int) -> PartitionDecider:
        started = time.monotonic()
        decider = PartitionDecider(partition, self.state_dir / f"partition-{partition}",
                                   self.config, self.fmt, self.topics)
        self.metrics.restored.labels("local").inc(decider.restored)
        read = read_partition(self.kafka_conf, self.topics.changelog, partition,
                              decider.changelog_next, timeout_s=self.restore_timeout_s)
        if read.next_offset <= decider.changelog_next:
            decider.close()
            raise BrokerLostData(
                f"{self.topics.changelog}[{partition}] ends at offset {read.next_offset - 1} "
                f"but the local state under {self.state_dir} already reflects offset "
                f"{decider.changelog_next - 1}: the broker lost data (restarted empty?). "
                "Refusing to continue; restore the broker's data, or delete the state "
                "directory to start from an empty window.")
        if read.records:
            # Another worker owned the partition meanwhile: its records supersede our
            # offsets, so replay from Kafka's committed offset and let identities answer.
            decider.next_offset = 0
            decider.apply_changelog(read.records, read.next_offset)
            self.metrics.restored.labels("changelog").inc(len(read.records))
        else:
            decider.commit(decider.next_offset, read.next_offset)
        log.info("partition %s ready: %d documents in window (%d changelog records) in %.2fs",
                 partition, decider.detector.window_documents(), len(read.records),
                 time.monotonic() - started,
                 extra={"partition": partition, "event": "partition_ready"})
        return decider

    def close(self, partitions: Sequence[int] | None = None) -> None:
        for partition in list(self.deciders if partitions is None else partitions):
            decider = self.deciders.pop(partition, None)
            if decider is not None:
                decider.close()
        self.metrics.assigned.set(len(self.deciders))

    async def process(self, messages: Sequence[Message], send: Send) -> int:
        """Run steps 1-4 of the module docstring for one batch; returns records decided."""
        pending: list[Awaitable[Any]] = []
        last: dict[int, int] = {}
        decided = 0
        for msg in messages:
            decider = await self.ensure(msg.partition)
            last[msg.partition] = max(last.get(msg.partition, -1), msg.offset)
            if msg.offset < decider.next_offset:
                continue  # applied and produced before a restart
            ts = msg.timestamp
            source = Source(msg.topic, msg.partition, msg.offset,
                            int(ts * 1000) if ts is not None else None)
            started = time.perf_counter()
            outcome = decider.process(msg.value, msg.key, msg.headers, source)
            self.metrics.latency.observe(time.perf_counter() - started)
            decided += 1
            self._count(decider, outcome, source)
            for record in outcome.records:
                pending.append(await send(record))
        await _all(pending)
        changelog_futures: dict[int, list[Awaitable[Any]]] = {}
        for partition in last:
            changelog_futures[partition] = [await send(r)
                                            for r in self.deciders[partition].drain_changelog()]
        changelog_next: dict[int, int] = {}
        for partition, futures in changelog_futures.items():
            metadata = await _all(futures)
            offsets = [m.offset for m in metadata if getattr(m, "offset", None) is not None]
            if offsets:
                changelog_next[partition] = max(offsets) + 1
        for partition, offset in last.items():
            decider = self.deciders[partition]
            decider.commit(max(decider.next_offset, offset + 1), changelog_next.get(partition))
            self._gauges(decider)
        return decided

    def _count(self, decider: PartitionDecider, outcome: Any, source: Source) -> None:
        part = str(decider.partition)
        if outcome.invalid is not None:
            self.metrics.dlq.labels(outcome.invalid.reason, "decide").inc()
            log.warning("%s: %s: %s", source.position, outcome.invalid.reason,
                        outcome.invalid.detail, extra={
                            "topic": source.topic, "partition": source.partition,
                            "offset": source.offset, "event": "dlq"})
            return
        decision = outcome.decision
        if decision.replayed:
            self.metrics.replayed.inc()
        self.metrics.items.labels(decision.status.value, outcome.channel, part).inc()

    def _gauges(self, decider: PartitionDecider) -> None:
        part = str(decider.partition)
        windows = list(decider.detector.windows())
        self.metrics.window_documents.labels(part).set(sum(w.document_count for w in windows))
        self.metrics.window_hours.labels(part).set(max((w.hours_span() for w in windows),
                                                       default=0))
        self.metrics.state_bytes.labels(part).set(decider.store.inner.size_bytes())


async def _all(futures: Sequence[Awaitable[Any]]) -> list[Any]:
    return list(await asyncio.gather(*futures)) if futures else []
