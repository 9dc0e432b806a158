"""Records the broker removed before the worker read them: each range reported once.

Kafka removes records from the head of a partition: retention, DeleteRecords, a log
truncated by an unclean election. A consumer whose position falls below the new log start
gets OFFSET_OUT_OF_RANGE on its next fetch; aiokafka (under Faust) then moves to the
earliest offset and says so only in an INFO line, and nothing downstream would know that
items were never decided. This module turns each such jump into a report:

- one ERROR line naming ``topic[partition]`` and the offsets never read;
- ``ndd_lost_records_total{topic, partition}`` counts them (offsets; some may have been
  transaction markers);
- a ``lost_records`` record on the DLQ naming the range (JSON value, source headers);
- ``NDD_ON_LOST_RECORDS=stop``: the same, then exit 3.

Where it hears of a jump: aiokafka has no callback for a reset, so a filter on its fetcher's
logger (``FetchResetFilter``, the one place that works around the client) notes the offset
that went out of range, and the first record delivered after it (``LostRecords.delivered``,
called on every batch the agents take) ends the range. Other readers that find records gone
(a gap read back, a changelog restored from a checkpoint) call ``LostRecords.lost`` directly.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ndd_stream.jsonio import dumps
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.records import OutRecord, Source, dlq_headers

log = logging.getLogger("ndd_stream.worker")

REASON = "lost_records"
FETCHER_LOGGER = "aiokafka.consumer.fetcher"

TP = tuple[str, int]
Send = Callable[[OutRecord], Awaitable[Awaitable[Any]]]


@dataclass(frozen=True)
class LostRange:
    """Offsets ``first`` to ``last`` (inclusive) of ``topic[partition]``, never read."""

    topic: str
    partition: int
    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    def describe(self) -> str:
        return (f"{self.topic}[{self.partition}]: offsets {self.first}-{self.last} "
                f"({self.count}) were removed from the broker before this worker read them")

    def dead_letter(self, dlq_topic: str, why: str) -> OutRecord:
        value = dumps({"lost": {"topic": self.topic, "partition": self.partition,
                                "first": self.first, "last": self.last, "count": self.count,
                                "why": why}})
        source = Source(self.topic, self.partition, self.first)
        return OutRecord(dlq_topic, f"{self.topic}[{self.partition}]".encode(), value,
                         dlq_headers(REASON, f"{self.describe()}; {why}", source))


class RecordsLost(RuntimeError):
    """Records were lost and ``NDD_ON_LOST_RECORDS=stop``: the worker exits 3."""


class LostRecords:
    """Reports lost ranges: logs, counts, dead-letters, and stops when told to."""

    def __init__(self, metrics: WorkerMetrics, dlq_topic: str, *, stop: bool,
                 on_stop: Callable[[str], None]) -> None:
        self.metrics = metrics
        self.dlq_topic = dlq_topic
        self.stop = stop
        self.on_stop = on_stop
        self.send: Send | None = None  # set once the producer exists
        self._lock = threading.Lock()  # aiokafka's fetcher may log from Faust's thread
        self._reset_from: dict[TP, int] = {}  # out of range at this offset; range still open
        self._reported: dict[TP, int] = {}  # the last offset reported lost, per partition
        self._outbox: list[OutRecord] = []  # dead letters of ranges found off the agents

    def fetch_reset(self, topic: str, partition: int, offset: int) -> None:
        """The consumer's fetch at ``offset`` was out of range (it moves to the earliest)."""
        with self._lock:
            tp = (topic, partition)
            self._reset_from[tp] = min(offset, self._reset_from.get(tp, offset))

    async def delivered(self, messages: Iterable[Any]) -> None:
        """Close the ranges that the first record after a reset ends (cheap when none)."""
        if self._reset_from:
            for m in messages:
                with self._lock:
                    start = self._reset_from.pop((m.topic, m.partition), None)
                if start is None:
                    continue
                if m.offset > start:
                    await self.lost(m.topic, m.partition, start, m.offset - 1,
                                    "the consumer's position went out of range")
                elif m.offset < start:  # the log was truncated below us: we read again
                    log.warning("%s[%d]: position %d was past the log's end; reading again "
                                "from %d", m.topic, m.partition, start, m.offset,
                                extra={"topic": m.topic, "partition": m.partition,
                                       "offset": m.offset, "event": "position_reset"})
        await self.flush()

    async def lost(self, topic: str, partition: int, first: int, last: int, why: str) -> None:
        """Report ``first..last`` of ``topic[partition]`` (what was reported already is not
        reported again); with ``stop``, exit 3 once the dead letter is delivered."""
        found = self.note(topic, partition, first, last, why)
        if found is not None:
            await self.flush()
            if self.stop:
                self.on_stop(f"{found.describe()} (NDD_ON_LOST_RECORDS=stop)")

    def note(self, topic: str, partition: int, first: int, last: int,
             why: str) -> LostRange | None:
        """Log and count a range now, its dead letter sent by the next ``flush``; the range
        (None when all of it was reported before). For readers off the event loop."""
        with self._lock:
            tp = (topic, partition)
            first = max(first, self._reported.get(tp, -1) + 1)
            if last < first:
                return None
            self._reported[tp] = last
            found = LostRange(topic, partition, first, last)
            self._outbox.append(found.dead_letter(self.dlq_topic, why))
        self.metrics.lost.labels(topic, str(partition)).inc(found.count)
        log.error("%s; they were not decided (%s)", found.describe(), why,
                  extra={"topic": topic, "partition": partition, "offset": first,
                         "last_offset": last, "count": found.count, "event": "records_lost"})
        return found

    def restore_gap(self, topic: str, partition: int, first: int, last: int) -> None:
        """A changelog read at restore starts past what the local state reflects: its
        records ``first..last`` are gone. Reported (the dead letter goes with the next
        batch); raises :class:`RecordsLost` under ``stop``."""
        found = self.note(topic, partition, first, last,
                          "the changelog was read at restore; the window lacks them")
        if found is not None and self.stop:
            raise RecordsLost(f"{found.describe()} (NDD_ON_LOST_RECORDS=stop)")

    async def flush(self) -> None:
        """Send the dead letters noted so far and wait for their delivery."""
        if not self._outbox or self.send is None:
            return
        with self._lock:
            records, self._outbox = self._outbox, []
        futures = [await self.send(r) for r in records]
        for fut in futures:
            await fut


class FetchResetFilter(logging.Filter):
    """Hears aiokafka's "Fetch offset %s is out of range for partition %s" (its only trace
    of a reset) and tells ``LostRecords``; the line itself still goes out as before."""

    def __init__(self, lost: LostRecords) -> None:
        super().__init__()
        self.lost = lost

    def filter(self, record: logging.LogRecord) -> bool:
        msg, args = record.msg, record.args
        if (isinstance(msg, str) and "out of range" in msg and isinstance(args, tuple)
                and len(args) == 2):
            offset, tp = args
            topic, partition = getattr(tp, "topic", None), getattr(tp, "partition", None)
            if isinstance(offset, int) and isinstance(topic, str) and isinstance(partition, int):
                self.lost.fetch_reset(topic, partition, offset)
        return True


def watch_fetch_resets(lost: LostRecords) -> FetchResetFilter:
    """Install the filter on aiokafka's fetcher logger (at INFO at least, where it speaks)."""
    logger = logging.getLogger(FETCHER_LOGGER)
    if not logger.isEnabledFor(logging.INFO):
        logger.setLevel(logging.INFO)
    found = FetchResetFilter(lost)
    logger.addFilter(found)
    return found
