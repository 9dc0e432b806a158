"""What Faust's consumer delivers, checked: offset order, records lost, a stopped fetch.

Faust's consumer is trusted to deliver records, not to deliver all of them, in order, or
at all. Every batch an agent takes passes three checks here (``runtime.held_batches`` and
the agents' offset order), each reporting what it found:

**Offset order** (:class:`InOrder`). The one gap-fill mechanism, for both agents: the
router forwards every raw partition in offset order, the decider decides every scoped
partition in offset order. Faust's consumer can skip records (see
``ndd_stream/kafka/reads.py``); a record that arrives beyond the next expected offset
therefore has the missing range read from the broker first, and one already handed out is
dropped. ``until`` reads up to an offset no later record may reveal (what a failed piece
had handed out, decided again after its partition reopened). Where offsets jump by design
(an input read ``read_committed``), the committer's offset order says which jumps are
skips (``commit.CommittedOrder``).

**Records the broker removed before the worker read them** (:class:`LostRecords`), each
range reported once. Kafka removes records from the head of a partition: retention,
DeleteRecords, a log truncated by an unclean election. A consumer whose position falls
below the new log start gets OFFSET_OUT_OF_RANGE on its next fetch; aiokafka (under Faust)
then moves to the earliest offset and says so only in an INFO line, and nothing
downstream would know that items were never decided. Each such jump becomes a report:

- one ERROR line naming ``topic[partition]`` and the offsets never read;
- ``ndd_lost_records_total{topic, partition}`` counts them (offsets; some may have been
  transaction markers);
- a ``lost_records`` record on the DLQ naming the range (JSON value, source headers);
- ``NDD_ON_LOST_RECORDS=stop``: the same, then exit 3.

Where it hears of a jump: aiokafka has no callback for a reset, so a filter on its fetcher's
logger (``FetchResetFilter``) notes the offset that went out of range, and the first record
delivered after it (``LostRecords.delivered``, called on every batch the agents take) ends
the range. Other readers that find records gone (a gap read back, a changelog restored
from a checkpoint) call ``LostRecords.lost`` directly.

**A consumer that stopped fetching** (:class:`StallWatch`) is noticed, restarted, and
shown on /health. A partition *waits* when the consumer's fetch position is short of the
partition's end (its last stable offset under read_committed, else its high watermark,
from the last fetch). When records wait and no record at all has been delivered for
``NDD_FETCH_STALL_S`` while no batch is being handled, the fetch has stopped (a fetcher
left waiting on a broker that restarted): each waiting partition is sent to the worker's
position in it (the first offset not handed out, ``InOrder``), through ``runtime.seek``
like every position the consumer is told, which makes it fetch anew, and /health
answers 503 until records flow again. A batch handled for that long (a commit retried
while a coordinator moves) is not a stopped fetch; /health says so too.

Faust's consumer asks its fetcher only for the partitions in its own *active* set, from
which it removes a partition while the partition is paused for a rebalance or while an
agent's buffer is full, and which its rebalance and buffer callbacks fill again; and its
streams drop every record while its flow control is suspended, which only the end of a
rebalance's recovery lifts (skipped when a newer rebalance began meanwhile). When the fetch
has stopped, :func:`unblock` puts every waiting partition back into that set (Faust's own
``resume_partitions`` and ``on_buffer_drop``) and resumes a flow left stopped, saying
what it did. A rebalance that is really under way is not held up by this: its callbacks
pause and resume partitions again as they run. A fetch still stopped after
:data:`GIVE_UP_AFTER` such restarts ends the worker (exit code 3): a restart resumes from
the committed state, where an endless silence would hold the partitions from every other
worker.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from ndd_stream.jsonio import dumps
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.records import OutRecord, Source, dlq_headers

log = logging.getLogger("ndd_stream.worker")

TP = tuple[str, int]  # topic, partition


# --- offset order ----------------------------------------------------------------------



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


# --- records lost before they were read -----------------------------------------

REASON = "lost_records"
FETCHER_LOGGER = "aiokafka.consumer.fetcher"

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
        # the first offset not handed out yet in a partition open here (the agents' cursors)
        self.handed: Callable[[TP], int | None] = lambda tp: None
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
        """Close the ranges that the first record after a reset ends (cheap when none).

        A range starts where the agents' cursor is if that is past the reset's offset: a
        seek back to a position already passed (the consumer sent to the worker's position
        after a rebalance) can reset again and be followed by records fetched before it, and
        what was handed out is not lost (gaps past the cursor are read back by ``InOrder``)."""
        if self._reset_from:
            for m in messages:
                tp = (m.topic, m.partition)
                with self._lock:
                    start = self._reset_from.pop(tp, None)
                if start is None:
                    continue
                start = max(start, self.handed(tp) or 0)
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


# --- a stopped fetch ----------------------------------------------------------------


POSITION_TIMEOUT_S = 5.0
"""How long the watch waits for the consumer to say where it is in a partition."""
GIVE_UP_AFTER = 5
"""Restarts of a stopped fetch, one ``NDD_FETCH_STALL_S`` apart, before the worker exits."""


class StallWatch:
    """What the agents delivered and handled, and whether the fetch has stopped."""

    def __init__(self, stall_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_s = stall_s
        self.clock = clock
        self.last_delivery = clock()
        self.handling_since: float | None = None
        self.stalled_since: float | None = None
        self.restarts = 0

    def delivered(self, messages: Sequence[Any]) -> None:
        """A batch arrived: records flow."""
        if messages:  # one clock reading a batch, not one an item
            self.last_delivery = self.clock()
            self.stalled_since = None

    @contextmanager
    def handling(self) -> Iterator[None]:
        """While a batch is handled, silence is the handler's, not the fetch's."""
        self.handling_since = self.clock()
        try:
            yield
        finally:
            self.handling_since = None
            self.last_delivery = self.clock()

    def silent(self) -> bool:
        """Whether nothing was delivered for ``stall_s`` while no batch was handled."""
        return (self.handling_since is None
                and self.clock() - self.last_delivery >= self.stall_s)

    def stopped(self, behind: Mapping[TP, tuple[int, int]],
                positions: Mapping[TP, int]) -> dict[TP, int]:
        """The partitions to fetch anew when the fetch has stopped (else none).

        ``behind``: each owned partition whose fetch position is short of its end, as
        ``(position, end)`` (the end a read_committed reader can reach: a transaction's
        marker after the last record is no record waiting). Each is fetched anew from the
        worker's position, the first offset not handed out (``positions``: ``InOrder``'s,
        through ``runtime.read_from``), at most from its fetch position; one the worker has
        no position in yet, from its fetch position. Records delivered but not handed out
        are delivered again; one handed out twice is handed out once (``InOrder``)."""
        if not self.silent():
            return {}
        if not behind:  # at the end of every partition: quiet, not stalled
            self.stalled_since = None
            return {}
        now = self.clock()
        found = {tp: min(position, positions.get(tp, position))
                 for tp, (position, _) in behind.items()}
        if self.stalled_since is None:
            self.stalled_since = self.last_delivery
            self.restarts = 0
        self.restarts += 1
        log.warning("no record delivered for %.0fs while %d partition(s) wait: fetching "
                    "them anew from %s", now - self.last_delivery, len(found),
                    ", ".join(f"{t}[{p}]@{o} (end {behind[(t, p)][1]})"
                              for (t, p), o in sorted(found.items())),
                    extra={"event": "fetch_stalled"})
        self.last_delivery = now  # the next restart, if needed, after another wait
        return found

    def hopeless(self) -> bool:
        """Whether the fetch stayed stopped through :data:`GIVE_UP_AFTER` restarts."""
        return self.stalled_since is not None and self.restarts >= GIVE_UP_AFTER

    def problem(self) -> str | None:
        """What /health reports (None: healthy)."""
        now = self.clock()
        if self.stalled_since is not None:
            return f"fetch stalled: no record delivered for {now - self.stalled_since:.0f}s"
        if self.handling_since is not None and now - self.handling_since > self.stall_s:
            return f"busy: one batch handled for {now - self.handling_since:.0f}s"
        return None


def unblock(app: Any, tps: Iterable[TP]) -> list[str]:
    """Put ``tps`` back where Faust's consumer fetches from and delivers (its public
    ``resume_partitions`` and ``on_buffer_drop``: no longer paused, nor held for a full
    agent buffer); what was done, for the log."""
    consumer, found = app.consumer, []
    assigned = {(t.topic, t.partition): t for t in consumer.assignment()}
    waiting = [assigned[tp] for tp in tps if tp in assigned]
    if waiting:
        consumer.resume_partitions(waiting)
        for tp in waiting:
            consumer.on_buffer_drop(tp)
        found.append("fetching " + ", ".join(f"{tp.topic}[{tp.partition}]"
                                             for tp in sorted(waiting)))
    if not consumer.flow_active:
        consumer.resume_flow()
        found.append("consumer flow stopped")
    if not app.flow_control.is_active():
        app.flow_control.resume()
        found.append("flow control suspended")
    if found and getattr(app, "rebalancing", False):
        found.append("a rebalance marked as under way")
    return found


async def restart_stopped_fetch(app: Any, watch: StallWatch, fatal: Callable[[str], None],
                                positions: Callable[[], Mapping[TP, int]],
                                seek: Callable[[Mapping[TP, int]], Awaitable[None]]) -> None:
    """The worker's timer: once ``watch`` is silent, the owned partitions whose fetch
    position is short of their end are unblocked and fetched anew from the worker's
    ``positions`` (``StallWatch.stopped``), sent there by ``seek`` (``runtime.seek``: the
    one place the consumer is told where to read); through every restart, the worker
    ends (``fatal``)."""
    if not watch.silent():
        return
    consumer = app.consumer
    behind: dict[TP, tuple[int, int]] = {}
    for tp in consumer.assignment():
        end = _end(app, tp)
        position = await _position(consumer, tp) if end is not None else None
        if position is not None and end is not None and position < end:
            behind[(tp.topic, tp.partition)] = (int(position), end)
    stopped = watch.stopped(behind, positions())
    if not stopped:
        return
    if watch.hopeless():
        fatal(f"{watch.problem()}, through {watch.restarts} restarts of the fetch; exiting "
              "so that a restart resumes from the committed state")
    found = unblock(app, stopped)
    if found:
        log.warning("the consumer did not fetch: %s; resumed", ", ".join(found),
                    extra={"event": "fetch_unblocked"})
    await seek(stopped)


async def _position(consumer: Any, tp: Any) -> int | None:
    """The consumer's fetch position in ``tp`` (None: not known within a few seconds)."""
    try:
        position = await asyncio.wait_for(consumer.position(tp), POSITION_TIMEOUT_S)
    except Exception:  # unknown, or not within the timeout: no evidence either way
        return None
    return None if position is None else int(position)


def _end(app: Any, tp: Any) -> int | None:
    """Where this worker's reads of a partition end, from the last fetch (None: unknown):
    Faust's ``highwater``, the last stable offset where the consumer reads committed
    records (``runtime._Consumer``), else the high watermark."""
    try:
        high = app.consumer.highwater(tp)
    except Exception:  # not fetched yet
        return None
    return None if high is None else int(high)
