"""Event-time order across raw partitions: the scoped partitions' sequencers.

Under ``NDD_SCOPE_ORDER`` (cross-channel scopes) each scoped partition's records pass
through its sequencer (``merge.EventTimeMerge``) between offset order (``InOrder``) and the
decision: items are released when their turn comes in event time across the raw
partitions, from the routers' progress records; possibly in a later batch or on the timer.
A partition's checkpoint then holds the lowest scoped offset still held (where a restart
re-reads from) and the sequencer's state (``checkpoint()``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ndd_stream.worker.deciding import StatefulPartition
from ndd_stream.worker.delivery import Message
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
    COPY,
    H_CONTROL,
    Progress,
    Source,
    event_time_ms,
    header_map,
    kafka_timestamp_ms,
)

log = logging.getLogger("ndd_stream.worker")

Work = list[tuple[Message, str | None]]
"""Items to decide now, each with its order note (None, or "behind")."""


@dataclass(frozen=True)
class OrderConfig:
    """Event-time order across raw partitions (settings ``order_*``)."""

    idle_s: float
    stall_s: float
    max_bytes: int


class Sequencers:
    """One sequencer per open scoped partition (none without event-time order)."""

    def __init__(self, config: OrderConfig | None, now: Callable[[], float],
                 metrics: WorkerMetrics, scoped_topic: str) -> None:
        self.config = config
        self.now = now  # the pool's clock (see DeciderPool._now)
        self.metrics = metrics
        self.scoped_topic = scoped_topic
        self.merges: dict[int, EventTimeMerge[Message]] = {}
        self._held: dict[int, Any] = {}  # ndd_order_held by partition (looked up once)
        # raw partitions that exist (metadata); None until told: a partition opened before
        # its worker's rebalance callback has listed them (Faust delivers records first)
        # releases nothing until then
        self.sources: set[SourceId] | None = None

    def expect(self, sources: Iterable[SourceId]) -> None:
        """The raw partitions that exist: each is waited for (none known: each once heard
        of)."""
        self.sources = set(sources)
        now = self.now()
        for merge in self.merges.values():
            merge.expect(self.sources, now)

    def open(self, partition: int, decider: StatefulPartition) -> None:
        """The partition's sequencer, from its checkpoint: held items are re-read."""
        if self.config is None:
            return
        cfg, now = self.config, self.now()
        merge: EventTimeMerge[Message] = EventTimeMerge(cfg.idle_s, cfg.stall_s, cfg.max_bytes)
        if decider.order is not None:
            merge.restore(decider.order, now)
        else:
            merge.consumed = decider.next_offset  # before: decided in offset order
        if self.sources is not None:
            merge.expect(self.sources, now)
        self.merges[partition] = merge

    def close(self, partition: int) -> None:
        self.merges.pop(partition, None)  # its held items are re-read by the next owner

    def held_over(self) -> set[int]:
        """The partitions whose sequencer stopped releasing at a piece's budget."""
        return {p for p, merge in self.merges.items() if merge.more}

    def sequence(self, run: Sequence[Message], budget: int,
                 deciders: Mapping[int, Any]) -> tuple[Work, set[int]]:
        """Pass a run (offset order per partition) through the sequencers: the items to
        decide now, in event-time order, and the partitions touched; at most about
        ``budget`` released (the rest stay held, :meth:`held_over`), so that one record
        never makes a piece of thousands of decisions between two checkpoints."""
        now = self.now()
        work: Work = []
        touched: set[int] = set()
        for item in run:
            merge = self.merges.get(item.partition)
            if merge is None:
                work.append((item, None))
                continue
            touched.add(item.partition)
            if _is_answer(item):  # an answer of a shard: for the gatherer, unordered
                merge.skip(item.offset)
                work.append((item, None))
                continue
            work += self._offer(item, merge, now, deciders[item.partition])
            work += self._released(item.partition, merge, now, budget - len(work))
        for partition, merge in self.merges.items():
            released = self._released(partition, merge, now, budget - len(work))
            if released:
                touched.add(partition)
                work += released
        return work, touched

    def _offer(self, item: Message, merge: EventTimeMerge[Message], now: float,
               decider: Any) -> Work:
        """One record to its sequencer; what is to be decided at once."""
        headers = header_map(item.headers)
        if headers.get(H_CONTROL) is not None:
            progress = Progress.parse(item.value)
            if progress is None:
                merge.skip(item.offset)  # a control record of another version
            else:
                merge.progress((progress.topic, progress.partition), progress.next,
                               progress.event_ms, progress.high, item.offset, now,
                               _stamp(item))
            return []
        ms, src = event_time_ms(headers), Source.from_headers(headers)
        key = (OrderKey(ms, src.topic, src.partition, src.offset)
               if ms is not None and src is not None else None)
        verdict = merge.offer(key, item.offset, len(item.value or b""), item, now, _stamp(item))
        awaits = getattr(decider, "awaits", None)
        if (awaits is not None and awaits(item.offset)) or verdict is Verdict.NOW:
            return [(item, None)]  # (awaits: released before a restart, not decided yet)
        if verdict is Verdict.COPY:
            return [(item, COPY)]
        if verdict is Verdict.BEHIND:
            self.metrics.order_behind.labels(str(item.partition)).inc()
            log.info("%s[%d]@%d: arrived after the event-time order passed it (%s): "
                     "decided at once", item.topic, item.partition, item.offset,
                     key, extra={"topic": item.topic, "partition": item.partition,
                                 "offset": item.offset, "event": "order_behind"})
            return [(item, "behind")]
        return []

    def _released(self, partition: int, merge: EventTimeMerge[Message],
                  now: float, limit: int) -> Work:
        released, passed = merge.release(now, max(0, limit))
        for p in passed:
            self._log_passed(partition, p)
        held = self._held.get(partition)
        if held is None:
            held = self._held[partition] = self.metrics.order_held.labels(str(partition))
        held.set(merge.held)
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


def _is_answer(m: Message) -> bool:
    """Whether a scoped record is a control record other than progress (a shard's answer)."""
    control = header_map(m.headers).get(H_CONTROL)
    return control is not None and control != b"progress"


def _stamp(m: Message) -> float | None:
    """A scoped record's Kafka timestamp in seconds (when its router sent it), if any."""
    ms = kafka_timestamp_ms(m)
    return ms / 1000 if ms is not None else None


class OwnTime:
    """The clock seconds this worker spent on its own work and waits: deciding, reading a
    gap back, opening a partition, its commits (the decider's, and the router's, whose
    open transaction holds the scoped partition's last stable offset). The sequencers'
    clock runs without them (``DeciderPool._now``), so a raw partition is never counted
    silent while the worker itself kept its news from arriving. Overlapping spans count
    once."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._done = 0.0  # seconds of the spans that ended
        self._open = 0  # spans under way
        self._since = 0.0  # when the current run of spans began

    def begin(self) -> None:
        if self._open == 0:
            self._since = self.clock()
        self._open += 1

    def end(self, *_: object) -> None:
        self._open -= 1
        if self._open == 0:
            self._done += self.clock() - self._since

    def total(self) -> float:
        return self._done + (self.clock() - self._since if self._open else 0.0)

    @contextmanager
    def counting(self) -> Iterator[None]:
        self.begin()
        try:
            yield
        finally:
            self.end()
