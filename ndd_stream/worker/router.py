"""The router: raw partitions -> the scoped topic keyed by scope (or the DLQ), in pieces.

Raw topics are keyed however producers like; deduplication needs every item of a scope on
one partition. :func:`route_raw` reads just enough of an item to find its scope and
forwards the original bytes unchanged, with the raw position in headers.

Each raw partition is forwarded in offset order from its position (``InOrder``), one
piece per batch, committed by the worker's committer (``worker/commit.py``): under
exactly-once the forwarded records and the raw offsets after them are one transaction,
so a router that restarts (or loses the partition) forwards nothing twice and one the
group has left behind (a zombie) forwards nothing more; at-least-once the records are
delivered before the agent acknowledges the batch to Faust.

A raw partition's position is the group's committed offset, looked up at assignment
(:meth:`Router.assign`). Under exactly-once records of a partition not (or no longer)
owned are skipped (they are their owner's, and must not move the position); at-least-once
a record of a partition revoked while the batch was in flight is forwarded all the same:
Faust acknowledges it, and skipping it lost records when the partition came back with its
offset committed past them (long join/leave runs, 111 of 40k). A record forwarded twice
is decided once; the decider knows the copy by its raw offset and does not answer it
again (``PartitionDecider``).

Under event-time order the router also tells every scoped partition how far it has
forwarded each raw partition (progress records after each batch, and on a timer).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaException

from ndd_stream.core.items import Invalid, ItemFormat, decode_object, order_time_ms, scope_of
from ndd_stream.kafka.limits import dead_letter_limit
from ndd_stream.worker.commit import Committer, PieceFailed, Reached, Send
from ndd_stream.worker.delivery import TP, InOrder, Message
from ndd_stream.worker.merge import NO_TIME
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.patience import patiently
from ndd_stream.worker.records import (
    H_DLQ_TRUNCATED,
    H_EVENT_TIME,
    OutRecord,
    Progress,
    Source,
    dlq_headers,
    event_time_ms,
    header_map,
)
from ndd_stream.worker.sequencing import OwnTime

log = logging.getLogger("ndd_stream.worker")

Committed = Callable[[Sequence[TP]], dict[TP, int]]
"""The group's committed offsets of some partitions (-1: none). Blocking."""


class Router:
    """The router agent's state: positions, the raw partitions owned, progress sent."""

    def __init__(self, committer: Committer, order: InOrder, routed: Callable[[Message],
                 OutRecord], committed: Committed, send: Send, *, scoped_topic: str,
                 scoped_partitions: int, ordered: bool,
                 high: Callable[[TP], int | None], reopen_timeout_s: float = 120.0,
                 own: OwnTime | None = None) -> None:
        self.committer = committer
        self.own = own  # the order's clock: the router's commits are the worker's own waits
        self.order = order
        self.routed = routed
        self.committed = committed
        self.send = send
        self.scoped_topic = scoped_topic
        self.scoped_partitions = scoped_partitions
        self.ordered = ordered
        self.high = high  # where a raw partition ends, from the last fetch (None: unknown)
        self.reopen_timeout_s = reopen_timeout_s  # opening a partition is tried so long
        self.owned: set[TP] = set()
        # a rebalance waits for the batch in flight before it closes producers
        self.lock = asyncio.Lock()
        # event-time order: per raw partition, (next offset, latest event time) forwarded
        # and committed (from where it resumed: ``_open``), and what was last reported of it
        self.forwarded: dict[TP, tuple[int, int]] = {}
        self._reported: dict[TP, tuple[Progress, float]] = {}

    async def route(self, messages: Sequence[Message]) -> None:
        """Forward a batch in one piece and commit it; then report progress (plain
        records: a repeat only confirms, and after the commit it never runs ahead of the
        records it confirms). Raises on a failed commit (TransactionError)."""
        async with self.lock:
            mine = self._mine(messages)
            arranged = await self.order.arrange(mine)
            while True:
                handed = dict(self.order.next)
                try:
                    forwarded = await self._forward(arranged)
                    break
                except PieceFailed as exc:  # those partitions: opened again, redone
                    arranged = await self.order.arrange([], await self._reopen(exc, handed))
        if self.ordered and forwarded:
            await self.report_progress(self._note_forwarded(forwarded))

    async def _forward(self, arranged: Sequence[Message]) -> list[tuple[Message, OutRecord]]:
        """One piece: the records forwarded and committed with the offsets after them."""
        piece = self.committer.begin(self.send)
        next_offsets: dict[TP, int] = {}
        forwarded = []
        for m in arranged:
            tp = (m.topic, m.partition)
            record = self.routed(m)
            await piece.produce(tp, record)
            next_offsets[tp] = m.offset + 1
            forwarded.append((m, record))
        if self.own is None:
            await piece.commit([Reached(tp, n) for tp, n in next_offsets.items()])
        else:
            with self.own.counting():
                await piece.commit([Reached(tp, n) for tp, n in next_offsets.items()])
        return forwarded

    async def _reopen(self, failed: PieceFailed, handed: dict[TP, int]) -> dict[TP, int]:
        """After a failed piece: a partition refused to a past member of the group is left
        to the rebalance; another is opened again at its committed offset. Where each must
        be read up to again."""
        fenced = failed.fenced()
        self.committer.close(list(failed.failed))
        self.owned -= fenced
        self.order.keep(self.owned)
        again = [tp for tp in failed.failed if tp in self.owned]
        await patiently(f"raw partitions {again}: opening", lambda: self._open(again),
                        self.reopen_timeout_s)
        return {tp: handed[tp] for tp in again
                if tp in handed and handed[tp] > self.order.next.get(tp, handed[tp])}

    def _mine(self, messages: Sequence[Message]) -> list[Message]:
        """The records this worker forwards now. One passed over (its partition not
        opened yet) is delivered again: the worker's consumer is sent back to each
        partition's position once it is opened (``runtime.seek``)."""
        return [m for m in messages if self._forwards((m.topic, m.partition))]

    def behind(self, records: int) -> bool:
        """Whether a raw partition owned here has more than ``records`` records not
        forwarded yet (where the consumer last saw its end)."""
        for tp in self.owned:
            high, handed = self.high(tp), self.order.next.get(tp)
            if high is not None and handed is not None and high - handed > records:
                return True
        return False

    def positions(self) -> dict[TP, int]:
        """Where each raw partition owned here goes on: the first offset not forwarded."""
        return {tp: n for tp, n in self.order.next.items() if tp in self.owned}

    def _forwards(self, tp: TP) -> bool:
        """Whether this worker forwards ``tp``'s records now (see the module docstring)."""
        return self.committer.forwards(tp in self.owned)

    def _note_forwarded(self, forwarded: Sequence[tuple[Message, OutRecord]]) -> set[TP]:
        touched: set[TP] = set()
        for m, record in forwarded:
            tp = (m.topic, m.partition)
            ms = event_time_ms(header_map(record.headers))
            _, last_ms = self.forwarded.get(tp, (0, NO_TIME))
            self.forwarded[tp] = (m.offset + 1, last_ms if ms is None else max(ms, last_ms))
            touched.add(tp)
        return touched

    async def assign(self, tps: Sequence[TP]) -> None:
        """The raw partitions this worker owns now: open them in the committer (fencing
        their previous owners) side by side, close the others, and go on from the
        committed offsets. All before a batch may run: a batch forwarded from Faust's own
        idea of the position, then rewound to an offset looked up before its commit,
        forwarded records twice. Raises when a partition cannot be opened or the offsets
        are unknown."""
        async with self.lock:
            self.committer.close([tp for tp in self.owned if tp not in set(tps)])
            self.owned = set()
            self.order.keep(tps)
            await patiently(f"raw partitions {list(tps)}: opening",
                            lambda: self._open(tps), self.reopen_timeout_s)
            self.owned = set(tps)

    async def _open(self, tps: Sequence[TP]) -> None:
        """Open ``tps`` in the committer side by side, and go on from the committed
        offsets (under exactly-once: exactly there)."""
        loop = asyncio.get_running_loop()
        opened = await asyncio.gather(*(loop.run_in_executor(None, self.committer.open, tp)
                                        for tp in tps))
        committed = {tp: offset for tp, offset in zip(tps, opened, strict=True)
                     if offset is not None}
        try:
            unknown = [tp for tp in tps if tp not in committed]
            if unknown:
                committed |= await loop.run_in_executor(None, self.committed, unknown)
        except KafkaException as exc:
            self.committer.offsets_unknown(exc)
            committed = {}
        for tp in tps:
            offset = self.committer.resume_at(committed.get(tp, -1), self.order.next.get(tp))
            if offset is None:
                continue
            self.order.resume(tp, offset)
            # Until a batch of it commits, its progress is where it resumes: all before was
            # forwarded. Not InOrder's next, which a batch moves before it commits: a
            # heartbeat would confirm records not in the scoped topic yet ("caught up" at a
            # partition's end), and the scope would step over them (decided as behind).
            done, event_ms = self.forwarded.get(tp, (0, NO_TIME))
            self.forwarded[tp] = (max(done, self.order.next[tp]), event_ms)

    async def revoke(self, tps: Sequence[TP]) -> None:
        async with self.lock:
            self.owned.difference_update(tps)
            self.order.keep(self.owned)
            for tp in tps:
                self.forwarded.pop(tp, None)
                self._reported.pop(tp, None)
            self.committer.close(list(tps))

    async def report_progress(self, tps: set[TP], *, every_s: float = 0.0) -> None:
        """Tell every scoped partition how far the router has forwarded these raw
        partitions (after their records: one producer keeps a partition's order). With
        ``every_s`` (the heartbeat): a partition with nothing more to forward is confirmed
        every time (a scope steps over it only on a confirmation newer than the item it
        holds back), another one re-sent when it changed or ``every_s`` passed."""
        now = time.monotonic()
        futures = []
        for tp in sorted(tps):
            next_offset, event_ms = self.forwarded.get(tp, (0, NO_TIME))
            progress = Progress(tp[0], tp[1], next_offset, event_ms, self.high(tp))
            last = self._reported.get(tp)
            idle = progress.high is not None and progress.next >= progress.high
            if (every_s and not idle and last is not None and last[0] == progress
                    and now - last[1] < every_s):
                continue
            self._reported[tp] = (progress, now)
            for partition in range(self.scoped_partitions):
                futures.append(await self.send(progress.record(self.scoped_topic, partition)))
        for fut in futures:
            await fut


class Routing:
    """What the router does with one raw record: :func:`route_raw`, a dead letter counted
    and logged."""

    def __init__(self, fmt: ItemFormat, scoped_topic: str, dlq_topic: str,
                 metrics: WorkerMetrics, *, ordered: bool = False,
                 dead_letter_bytes: int | None = None) -> None:
        self.fmt, self.scoped_topic, self.dlq_topic = fmt, scoped_topic, dlq_topic
        self.metrics = metrics
        self.ordered = ordered
        self.dead_letter_bytes = dead_letter_bytes

    def __call__(self, m: Message) -> OutRecord:
        src = Source.of_message(m)
        record, invalid = route_raw(m.value, m.key, src, self.fmt, self.scoped_topic,
                                    self.dlq_topic, ordered=self.ordered,
                                    dead_letter_bytes=self.dead_letter_bytes)
        if invalid is not None:
            self.metrics.dlq.labels(invalid.reason, "route").inc()
            log.warning("%s: %s: %s", src.position, invalid.reason, invalid.detail,
                        extra={"topic": m.topic, "partition": m.partition,
                               "offset": m.offset, "event": "dlq"})
        return record


def route_raw(
    value: bytes | None, key: bytes | None, source: Source, fmt: ItemFormat,
    scoped_topic: str, dlq_topic: str, *, ordered: bool = False,
    dead_letter_bytes: int | None = None,
) -> tuple[OutRecord, Invalid | None]:
    """Where a raw record goes next, and the rejection if it goes to the DLQ. ``ordered``
    (event-time order) adds the item's event time as the ``ndd-event-time`` header;
    ``dead_letter_bytes`` caps a dead letter below the DLQ topic's size limit."""
    raw = value or b""
    obj = decode_object(raw, fmt)
    if isinstance(obj, Invalid):
        headers = dlq_headers(obj.reason, obj.detail, source)
        limit = dead_letter_limit(fmt.max_item_bytes)
        if dead_letter_bytes is not None:
            limit = min(limit, dead_letter_bytes)
        if len(raw) > limit:
            # The worker's producer could not send it (and a dead letter that cannot be
            # sent would stop the worker): keep the head of the item and its length; the
            # whole item stays in the raw topic (ndd-source-* headers say where).
            headers.append((H_DLQ_TRUNCATED, str(len(raw)).encode()))
            raw = raw[:limit]
        return OutRecord(dlq_topic, key, raw, headers), obj
    scope = scope_of(obj, fmt)
    headers = source.headers()
    if ordered:
        fallback = source.timestamp_ms / 1000 if source.timestamp_ms else None
        event_ms = order_time_ms(obj, fmt, fallback)
        if event_ms is not None:
            headers.append((H_EVENT_TIME, str(event_ms).encode()))
    return OutRecord(scoped_topic, scope.encode("utf-8"), raw, headers), None
