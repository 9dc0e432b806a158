"""Each partition of an agent's input strictly in offset order, skipped records read back.

The one gap-fill mechanism, for both agents: the router forwards every raw partition in
offset order, the decider decides every scoped partition in offset order. Faust's
consumer can skip records (see ``ndd_stream/kafka/reads.py``); a record that arrives beyond the next
expected offset therefore has the missing range read from the broker first, and one
already handed out is dropped. ``until`` reads up to an offset no later record may
reveal (what a failed piece had handed out, decided again after its partition reopened).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from ndd_stream.worker.lost import LostRecords
from ndd_stream.worker.metrics import WorkerMetrics

log = logging.getLogger("ndd_stream.worker")

TP = tuple[str, int]  # topic, partition


class Message(Protocol):
    """What the agents read of a record (Faust's messages and kafka.reads.Fetched have it)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Any: ...
    @property
    def timestamp(self) -> float | None: ...


ReadRange = Callable[[str, int, int, int], Sequence[Message]]
"""``read(topic, partition, start, end)``: records start <= offset < end, from the broker
(fewer at the front if retention removed them). Blocking: run in an executor."""


class InOrder:
    """Where each partition of one agent's input goes on: ``next[tp]`` is the first offset
    not handed out yet (a partition without one takes the first record delivered)."""

    def __init__(self, read: ReadRange, metrics: WorkerMetrics, never: str) -> None:
        self.read = read
        self.metrics = metrics
        self.never = never  # what a lost record never was, for the log: "decided", ...
        self.next: dict[TP, int] = {}
        self.lost: LostRecords | None = None  # reports records gone before they were read

    def resume(self, tp: TP, offset: int | None) -> None:
        """Go on at ``offset`` (None: at the first record delivered)."""
        if offset is None:
            self.next.pop(tp, None)
        else:
            self.next[tp] = offset

    def skipped(self, m: Message, expected: int | None) -> bool:
        """Whether the offsets from ``expected`` (None: no position yet) up to ``m``'s, a
        record about to be handed out, are records the consumer skipped, to read back
        first. Here (offsets without holes: read_uncommitted) every jump is; the
        committer's offset order says otherwise where offsets jump
        (``commit.CommittedOrder``)."""
        return expected is not None and m.offset > expected

    def keep(self, tps: Iterable[TP]) -> None:
        """Forget every partition but ``tps`` (the others were revoked)."""
        owned = set(tps)
        self.next = {tp: n for tp, n in self.next.items() if tp in owned}

    async def arrange(self, messages: Sequence[Message],
                      until: Mapping[TP, int] | None = None) -> list[Message]:
        """The records to handle, in offset order per partition: ``messages`` without those
        handed out already, after the skipped ones before them; then, per ``until`` entry,
        the records up to that offset that nothing delivered."""
        out: list[Message] = []
        for m in messages:
            tp = (m.topic, m.partition)
            expected = self.next.get(tp)
            if expected is not None and m.offset < expected:
                continue  # handed out already
            if self.skipped(m, expected) and expected is not None:
                out += await self._fill(tp, expected, m.offset)
            out.append(m)
            self.next[tp] = m.offset + 1
        for tp, end in (until or {}).items():
            expected = self.next.get(tp)
            if expected is not None and end > expected:
                out += await self._fill(tp, expected, end)
                self.next[tp] = end
        return out

    async def _fill(self, tp: TP, start: int, end: int) -> Sequence[Message]:
        """The skipped records, read back; a gap warned of, and records found gone lost."""
        topic, partition = tp
        self.metrics.gaps.inc()
        log_gap(log, topic, partition, start, end)
        found = await self._read(tp, start, end)
        first = found[0].offset if found else end
        if self.lost is not None and first > start:
            await self.lost.lost(topic, partition, start, first - 1,
                                 f"a gap read back found them gone; never {self.never}")
        elif self.lost is None:
            log_lost(log, topic, partition, start, found, end, self.never)
        return found

    async def _read(self, tp: TP, start: int, end: int) -> Sequence[Message]:
        return await asyncio.get_running_loop().run_in_executor(
            None, self.read, tp[0], tp[1], start, end)


def log_gap(logger: logging.Logger, topic: str, partition: int, expected: int,
            delivered: int) -> None:
    """The warning given before skipped records are read from the broker."""
    logger.warning("%s[%d]: expected offset %d, the consumer is at %d: reading the %d "
                   "skipped records from the broker", topic, partition, expected, delivered,
                   delivered - expected, extra={"topic": topic, "partition": partition,
                                                "offset": expected, "event": "offset_gap"})


def log_lost(logger: logging.Logger, topic: str, partition: int, expected: int,
             found: Sequence[Any], delivered: int, never: str) -> None:
    """An error if the broker no longer holds the first skipped records (retention removed
    them before they were ``never``, e.g. "processed" or "decided")."""
    first = found[0].offset if found else delivered
    if first > expected:
        logger.error("%s[%d]: offsets %d-%d are no longer in the topic and were never %s",
                     topic, partition, expected, first - 1, never,
                     extra={"topic": topic, "partition": partition, "offset": expected,
                            "event": "records_lost"})
