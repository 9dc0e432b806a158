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
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ndd_stream.core.detector import DetectorConfig
from ndd_stream.core.document import Document
from ndd_stream.core.items import Invalid, ItemFormat, parse_item
from ndd_stream.core.shards import Answer, Gatherer, Pending
from ndd_stream.state.codec import Checkpoint
from ndd_stream.worker.deciding import Outcome, OutputTopics, StatefulPartition, routed_records
from ndd_stream.worker.records import H_CONTROL, OutRecord, Source, dlq_headers, header_map
from ndd_stream.worker.shardwire import (
    ANSWER_CONTROL,
    BadShardRecord,
    encode_prepared,
    prepared_records,
    read_answers,
)

log = logging.getLogger("ndd_stream.worker")
WAITING_EVERY_S = 1.0  # how often the shards' lag gauge is recounted


@dataclass(slots=True)
class _Entry:
    """An admitted item waiting for its turn (and its answers)."""

    offset: int
    pending: Pending
    key: bytes | None
    raw: bytes
    source: Source
    note: str | None


class GatherDecider(StatefulPartition):
    """Sequencer + gatherer of one scoped partition; the documents live in the shards."""

    def __init__(self, partition: int, path: Path, config: DetectorConfig, fmt: ItemFormat,
                 topics: OutputTopics, shards: int, shards_topic: str) -> None:
        self.config = config
        self.fmt = fmt
        self.topics = topics
        self.shards = shards
        self.shards_topic = shards_topic
        self.queue: deque[_Entry] = deque()
        # (offset, arrival number) of each entry of the queue, kept beside it: the pending
        # list is written after every batch, and a backlog's queue holds thousands of items
        self._pairs: deque[tuple[int, int]] = deque()
        # (scope, arrival number) of each prepared item in the queue -> shard -> answer
        self.answers: dict[tuple[str, int], dict[int, Answer]] = {}
        super().__init__(partition, path, topics.changelog)
        self.fanout: list[bytes] = []  # prepared items to send after the checkpoint
        self._waiting: tuple[float, dict[int, int]] | None = None  # (when, waiting())
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
        self._numbers = dict(self.checkpoint.pending)
        self._readmit: dict[int, tuple[Any, ...] | None] = dict.fromkeys(self._numbers)

    # --- what the pool asks -----------------------------------------------------------
    def awaits(self, offset: int) -> bool:
        """True for a pending item re-read after a restart (the sequencer has passed it)."""
        return offset in self._readmit

    def pending(self) -> tuple[tuple[int, int], ...]:
        """The checkpoint's ``pending``: every admitted, undecided item, in order, as
        (scoped offset, arrival number or -1)."""
        pairs = tuple(self._pairs)
        if self._readmit:
            pairs += tuple((offset, self._numbers[offset]) for offset in self._readmit)
        return pairs

    def waiting(self) -> dict[int, int]:
        """Per shard, the admitted items still waiting for its answer (the shard's lag).
        A gauge, recounted at most once a second: a backlog's queue holds thousands of
        items, and counting them after every batch cost the gatherer's worker more than
        the gauge is worth."""
        now = time.monotonic()
        if self._waiting is not None and now - self._waiting[0] < WAITING_EVERY_S:
            return self._waiting[1]
        out = dict.fromkeys(range(self.shards), 0)
        for entry in self.queue:
            prep = entry.pending.prepared
            if prep is None:
                continue
            got = self.answers.get((prep.scope, prep.number), {})
            for shard in out:
                if shard not in got:
                    out[shard] += 1
        self._waiting = (now, out)
        return out

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
        args = (item, scoped.offset, key, raw, source, order_note)
        if scoped.offset in self._readmit:
            self._readmit[scoped.offset] = args
            if any(v is None for v in self._readmit.values()):
                return []  # the rest of the pending items come next
            for again in list(self._readmit.values()):
                assert again is not None
                self._admit(*again)
            self._readmit.clear()
            self._numbers.clear()
        else:
            self._admit(*args)
        return self._resolve()

    def _readmit_lost(self, scoped: Source) -> None:
        """Past the last pending offset with some never re-read (retention removed them):
        admit the rest in their order and say what was lost, rather than wait forever."""
        if not self._readmit or scoped.offset <= max(self._readmit):
            return
        lost = [o for o, args in self._readmit.items() if args is None]
        log.error("%s[%d]: pending items at offsets %s are gone from the broker (retention?)"
                  ": they are not decided", scoped.topic, scoped.partition, lost[:10],
                  extra={"topic": scoped.topic, "partition": scoped.partition,
                         "event": "records_lost"})
        for args in [a for a in self._readmit.values() if a is not None]:
            self._admit(*args)
        self._readmit.clear()
        self._numbers.clear()

    def _admit(self, item: Document, offset: int, key: bytes | None, raw: bytes,
               source: Source, note: str | None) -> None:
        # again after a restart: the number the shards saw (the same, unless items before it
        # were lost; the gatherer then goes on from the shards' numbering)
        pending = self.detector.admit(item, self._numbers.get(offset))
        self.queue.append(_Entry(offset, pending, key, raw, source, note))
        self._pairs.append((offset, pending.number))
        prep = pending.prepared
        if prep is not None:
            self.answers.setdefault((prep.scope, prep.number), {})
            self.fanout.append(encode_prepared(prep))

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
            got = self.answers.get((answer.scope, answer.number))
            if got is None:
                if not self._readmit:
                    continue  # sent again for an item decided already
                got = self.answers.setdefault((answer.scope, answer.number), {})
            got.setdefault(answer.shard, answer)

    def _resolve(self) -> list[Outcome]:
        """Decide the items at the head of the queue whose answers are all in."""
        out: list[Outcome] = []
        while self.queue and not self._readmit:
            entry = self.queue[0]
            prep = entry.pending.prepared
            answers: list[Answer] = []
            if prep is not None:
                got = self.answers.get((prep.scope, prep.number), {})
                if len(got) < self.shards:
                    break
                answers = [got[s] for s in range(self.shards)]
                del self.answers[(prep.scope, prep.number)]
            self.queue.popleft()
            self._pairs.popleft()
            decision = self.detector.resolve(entry.pending, answers)
            doc = entry.pending.doc
            records = routed_records(self.topics, decision, doc.channel, doc.timestamp,
                                     entry.key, entry.raw, entry.source, entry.note)
            out.append(Outcome(records, decision=decision, channel=doc.channel))
        return out

    def drain_fanout(self) -> list[OutRecord]:
        """The records carrying the items prepared since the last call to every shard."""
        items, self.fanout = self.fanout, []
        return prepared_records(items, self.shards_topic, self.partition, self.shards)
