"""A scoped partition's decider when windows are sharded (``NDD_SHARDS`` > 1).

It is the scope's sequencer, as without shards (the pool orders its items), and its
:class:`core.shards.Gatherer`: each item is admitted in order (normal form, figures and
arrival number, once), prepared for every shard, and decided when the S answers are back.
Answers come back into this same scoped partition (``ndd-control: answer``), so one input,
one position and one checkpoint still say where the partition stands.

Write-ahead, so a restart can never prepare another order than the shards saw: the
prepared records of a batch are produced only after the checkpoint that lists their items
as *pending* (scoped offsets and arrival numbers, in admission order) is in the changelog
and in RocksDB
(:meth:`DeciderPool._decide`). A restart re-reads the pending items, admits them again in
the listed order (same numbers: admission is deterministic from the restored decisions),
sends their prepared records again (shards skip numbers they have answered), and decides
them from the answers it reads back. Items admitted but not yet checkpointed were never sent,
and are sequenced afresh.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ndd_stream.core.detector import DetectorConfig
from ndd_stream.core.items import Invalid, ItemFormat, parse_item
from ndd_stream.core.shards import Answer, Gatherer, Pending, Slot
from ndd_stream.state.pending import Pair, PendingList
from ndd_stream.state.rocks import Checkpoint
from ndd_stream.worker.deciding import Outcome, OutputTopics, StatefulPartition, routed_records
from ndd_stream.worker.records import (
    COPY,
    H_CONTROL,
    OutRecord,
    Source,
    dlq_headers,
    header_map,
)
from ndd_stream.worker.shardwire import (
    ANSWER_CONTROL,
    BadShardRecord,
    encode_prepared,
    prepared_records,
    read_answers,
)
from ndd_stream.worker.spill import Parked, Ref, Spill

log = logging.getLogger("ndd_stream.worker")
DEFAULT_MEMORY_BYTES = 128 << 20  # the gather_memory_mb setting's default


@dataclass(slots=True)
class _Entry:
    """An admitted item waiting for its turn (and its answers). ``pending`` is None while
    the item is parked in the spill (``ref``): then the fields below ``size`` are empty."""

    offset: int
    number: int
    scope: str
    waits: bool  # prepared for the shards: decided once every shard has answered
    slot: Slot  # its decision's slot, shared with the replays of its identity
    size: int  # bytes counted against the memory budget (0 while parked)
    pending: Pending | None
    key: bytes | None
    raw: bytes
    source: Source | None
    note: str | None
    ref: Ref | None = None
    expired: tuple[int, ...] = ()  # Pending.expired, kept while the item is parked

    def unpark(self, spill: Spill) -> None:
        assert self.ref is not None
        item = spill.take(self.ref)
        assert item.nf is not None
        self.pending = Pending(item.doc, item.hour, item.number, item.nf, item.figures,
                               self.slot, expired=self.expired)
        self.key, self.raw, self.source, self.note = item.key, item.raw, item.source, item.note
        self.ref = None


def _answer_size(answer: Answer) -> int:
    """What a shard's answer costs while it waits for the others': ~200 bytes, and the
    match's normal form and figures when the novelty rule will judge it. Answers stay in
    memory (they are small unless they carry a text), but count against the budget, so
    that a shard running ahead makes the gatherer park more of its items."""
    best = answer.best[1] if answer.best is not None else None
    return 200 + (len(best.nf) + len(best.figures or "") if best is not None else 0)


def _size(read: Parked, nf: str = "", figures: str | None = None) -> int:
    """What an item costs the gatherer's memory, roughly: its strings and bytes (with its
    normal form and figures once admitted) plus ~1 KiB of objects (Document, Pending,
    Source, the queue's entry)."""
    return len(read.raw) + len(read.doc.text) + len(nf) + len(figures or "") + 1024


class GatherDecider(StatefulPartition):
    """Sequencer + gatherer of one scoped partition; the documents live in the shards."""

    #: the most items one call decides (the pool sets its checkpoint interval)
    resolve_limit: int = 1 << 30

    def __init__(self, partition: int, path: Path, config: DetectorConfig, fmt: ItemFormat,
                 topics: OutputTopics, shards: int, shards_topic: str,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        self.config = config
        self.memory_bytes = memory_bytes
        self.held = 0  # bytes of the items (_size) and answers (_answer_size) in memory
        self.spill = Spill(path.with_name(path.name + ".spill"))
        self.fmt = fmt
        self.topics = topics
        self.shards = shards
        self.shards_topic = shards_topic
        self.queue: deque[_Entry] = deque()
        # (offset, arrival number) of each entry of the queue, kept beside it: the pending
        # list is written after every piece of a batch, and a backlog's queue holds its
        # whole backlog (chunks packed once: state/pending.py)
        self._pairs = PendingList()
        # (scope, arrival number) of each prepared item in the queue that has answers ->
        # shard -> answer (none until the first answer: a backlog's queue is long)
        self.answers: dict[tuple[str, int], dict[int, Answer]] = {}
        super().__init__(partition, path, topics.changelog)
        self.fanout: list[bytes] = []  # prepared items to send after the checkpoint
        self._expect_pending()

    def _make_detector(self) -> Gatherer:
        return Gatherer(self.config, self.shards, self.store)

    def apply_changelog(self, docs: list[tuple[bytes, bytes]], checkpoint: Checkpoint) -> int:
        applied = super().apply_changelog(docs, checkpoint)
        self._expect_pending()  # the changelog's checkpoint can list more than the local one
        return applied

    def _expect_pending(self) -> None:
        """The checkpoint's pending items are re-read and admitted again before any other:
        offset -> arrival number, and what was read of each (None: not yet)."""
        self.queue.clear()
        self._pairs.clear()
        self.answers.clear()
        self.spill.close()
        self.spill = Spill(self.spill.directory)
        self.held = 0
        # per shard, the queue's prepared items without its answer (kept as they change:
        # counting a backlog's queue was O(backlog) per gauge reading)
        self._lag = [0] * self.shards
        # answers read during a restart's re-reading for items not admitted again yet
        self._early: set[tuple[str, int]] = set()
        # per scope, [first, end) of the arrival numbers of its prepared items in the queue
        # (admitted and decided in order): an answer for a number in it is awaited
        self._span: dict[str, list[int]] = {}
        self._numbers = dict(self.checkpoint.pending)
        self._readmit: dict[int, Parked | Ref | None] = dict.fromkeys(self._numbers)
        # listed after the items admitted meanwhile until all are back: packed once, here
        # (a checkpoint after every batch of the re-reading would pack them all each time)
        self._relisted = PendingList.of(self._numbers.items())

    # --- what the pool asks -----------------------------------------------------------
    def awaits(self, offset: int) -> bool:
        """True for a pending item re-read after a restart (the sequencer has passed it)."""
        return offset in self._readmit

    def awaits_any(self) -> bool:
        """Whether pending items of a restart are still being re-read."""
        return bool(self._readmit)

    def pending(self) -> Sequence[Pair]:
        """The checkpoint's ``pending``: every admitted, undecided item, in order, as
        (scoped offset, arrival number or -1)."""
        return self._pairs.snapshot(self._relisted if self._readmit else ())

    def waiting(self) -> dict[int, int]:
        """Per shard, the admitted items still waiting for its answer (the shard's lag)."""
        return dict(enumerate(self._lag))

    # --- records ----------------------------------------------------------------------
    def process(self, value: bytes | None, key: bytes | None, headers: object,
                scoped: Source, order_note: str | None = None) -> list[Outcome]:
        hdrs = header_map(headers)  # type: ignore[arg-type]
        self._readmit_lost(scoped)
        if hdrs.get(H_CONTROL) == ANSWER_CONTROL:
            self._take_answer(value, scoped)
            return self._resolve()
        source = Source.from_headers(hdrs) or scoped
        raw = value or b""
        fallback = source.timestamp_ms / 1000 if source.timestamp_ms else None
        item = parse_item(raw, self.fmt, position=source.position, fallback_timestamp=fallback)
        if isinstance(item, Invalid):
            self._readmit.pop(scoped.offset, None)
            record = OutRecord(self.topics.dlq, key, raw,
                               dlq_headers(item.reason, item.detail, source))
            return [Outcome([record], invalid=item)]
        if order_note == COPY:  # answered by identity, as every re-admitted item
            order_note = None
        read = Parked(item, raw, key, source, order_note)
        if scoped.offset in self._readmit:
            self._readmit[scoped.offset] = self._park(read)
            if any(v is None for v in self._readmit.values()):
                return []  # the rest of the pending items come next
            self._readmit_all()
        else:
            self._admit(read, scoped.offset)
        return self._resolve()

    def _park(self, read: Parked) -> Parked | Ref:
        """A re-read pending item kept until the rest are re-read: in memory, or in the
        spill past the budget (a restart during a backlog re-reads the whole backlog)."""
        size = _size(read)
        if self.held + size > self.memory_bytes:
            return self.spill.put(read)
        self.held += size
        return read

    def _readmit_all(self) -> None:
        """Admit the re-read pending items in their listed order."""
        for offset, again in list(self._readmit.items()):
            if again is None:
                continue
            if isinstance(again, Ref):
                again = self.spill.take(again)
            else:
                self.held -= _size(again)
            self._admit(again, offset)
        self._readmit.clear()
        self._numbers.clear()
        self._relisted = ()
        for key in self._early:  # answers of items that never came back (lost): dropped
            self.held -= sum(_answer_size(a) for a in self.answers.pop(key, {}).values())
        self._early.clear()

    def _readmit_lost(self, scoped: Source) -> None:
        """Past the last pending offset with some never re-read (retention removed them):
        admit the rest in their order and say what was lost, rather than wait forever."""
        if not self._readmit or scoped.offset <= max(self._readmit):
            return
        lost = [o for o, read in self._readmit.items() if read is None]
        log.error("%s[%d]: pending items at offsets %s are gone from the broker (retention?)"
                  ": they are not decided", scoped.topic, scoped.partition, lost[:10],
                  extra={"topic": scoped.topic, "partition": scoped.partition,
                         "event": "records_lost"})
        self._readmit_all()

    def _admit(self, read: Parked, offset: int) -> None:
        # again after a restart: the number the shards saw (the same, unless items before it
        # were lost; the gatherer then goes on from the shards' numbering)
        item = read.doc
        pending = self.detector.admit(item, self._numbers.get(offset))
        prep = pending.prepared
        entry = _Entry(offset, pending.number, item.scope, prep is not None, pending.slot, 0,
                       pending, read.key, read.raw, read.source, read.note,
                       expired=pending.expired)
        if prep is not None:
            key = (prep.scope, prep.number)
            span = self._span.setdefault(prep.scope, [prep.number, prep.number])
            span[1] = prep.number + 1
            got = self.answers.get(key, {})
            self._early.discard(key)
            for shard in range(self.shards):
                if shard not in got:
                    self._lag[shard] += 1
            self.fanout.append(encode_prepared(prep))
            size = _size(read, pending.nf, pending.figures)
            if self.held + size > self.memory_bytes and self.queue:
                # past the budget: park it (never the head, which is decided next)
                entry.ref = self.spill.put(Parked(
                    item, read.raw, read.key, read.source, read.note, pending.number,
                    pending.hour, pending.nf, pending.figures))
                entry.pending, entry.raw, entry.key, entry.source = None, b"", None, None
            else:
                entry.size = size
                self.held += size
        self.queue.append(entry)
        self._pairs.append((offset, pending.number))

    def _take_answer(self, value: bytes | None, scoped: Source) -> None:
        try:
            answers = read_answers(value)
        except BadShardRecord as exc:
            log.warning("%s: skipped: %s", scoped.position, exc)
            return
        for answer in answers:
            if not 0 <= answer.shard < self.shards:
                log.warning("%s: skipped: an answer of shard %d of %d", scoped.position,
                            answer.shard, self.shards)
                continue
            key = (answer.scope, answer.number)
            got = self.answers.get(key)
            if got is None:
                span = self._span.get(answer.scope)
                if span is not None and span[0] <= answer.number < span[1]:
                    got = self.answers[key] = {}  # the first answer of a queued item
                elif self._readmit:
                    got = self.answers[key] = {}
                    self._early.add(key)
                else:
                    continue  # sent again for an item decided already
            if answer.shard not in got:
                got[answer.shard] = answer
                self.held += _answer_size(answer)
                if key not in self._early:
                    self._lag[answer.shard] -= 1

    def ready(self) -> bool:
        """Whether the head of the queue can be decided now (its answers are all in): a call
        that reached :attr:`resolve_limit` left it for :meth:`resolve`."""
        if not self.queue or self._readmit:
            return False
        entry = self.queue[0]
        return not entry.waits or len(self.answers.get((entry.scope, entry.number), ())) \
            >= self.shards

    def resolve(self) -> list[Outcome]:
        """Decide more of the queue's head, as far as its answers allow (and the limit)."""
        return self._resolve()

    def _resolve(self) -> list[Outcome]:
        """Decide the items at the head of the queue whose answers are all in, at most
        :attr:`resolve_limit` of them: one answer can complete thousands (a restart's
        re-read pending items, a shard far behind the others), and the pool checkpoints
        between calls only, so a kill would send them all again."""
        out: list[Outcome] = []
        while len(out) < self.resolve_limit and self.ready():
            entry = self.queue[0]
            answers: list[Answer] = []
            if entry.waits:
                got = self.answers.pop((entry.scope, entry.number))
                answers = [got[s] for s in range(self.shards)]
                self.held -= sum(_answer_size(a) for a in answers)
                self._span[entry.scope][0] = entry.number + 1
            self.queue.popleft()
            self._pairs.popleft()
            if entry.pending is None:
                entry.unpark(self.spill)
            self.held -= entry.size
            assert entry.pending is not None and entry.source is not None
            decision = self.detector.resolve(entry.pending, answers)
            doc = entry.pending.doc
            records = routed_records(self.topics, decision, doc.channel, doc.timestamp,
                                     entry.key, entry.raw, entry.source, entry.note)
            out.append(Outcome(records, decision=decision, channel=doc.channel))
        return out

    def gather_gauges(self) -> tuple[dict[int, int], int, int]:
        return self.waiting(), self.held, self.spill.items

    def close(self) -> None:
        self.spill.close()
        super().close()

    def drain_fanout(self) -> list[OutRecord]:
        """The records carrying the items prepared since the last call to every shard."""
        items, self.fanout = self.fanout, []
        return prepared_records(items, self.shards_topic, self.partition, self.shards)
