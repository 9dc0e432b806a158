"""Stage 2: decide the items of one scoped partition and say where each goes.

One :class:`PartitionDecider` per partition owns a detector and its RocksDB store.
Every decided document is also queued for the changelog topic, from which another
worker rebuilds the partition after a rebalance.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ndd_stream.core.detector import Detector, DetectorConfig
from ndd_stream.core.document import Decision
from ndd_stream.core.items import Invalid, ItemFormat, parse_item
from ndd_stream.core.store import StoredDocument
from ndd_stream.jsonio import dumps
from ndd_stream.state.rocks import (
    Checkpoint,
    RocksStore,
    decode_document,
    document_key,
    encode_checkpoint,
    encode_document,
)
from ndd_stream.worker.changelog import CHECKPOINT_KEY
from ndd_stream.worker.records import (
    COPY,
    H_ORDER,
    OutRecord,
    Source,
    decision_headers,
    dlq_headers,
    header_map,
    iso_utc,
)


@dataclass(frozen=True)
class OutputTopics:
    unique: str
    duplicate: str
    dlq: str
    decisions: str | None
    changelog: str


class ChangelogRecorder:
    """A StateStore that forwards to RocksDB and remembers what to send to the changelog
    (each document encoded once, for both)."""

    def __init__(self, inner: RocksStore) -> None:
        self.inner = inner
        # the documents stored since the last drain: (scope, hour, key, value)
        self.pending: list[tuple[str, int, bytes, bytes]] = []
        # keys of the documents of hours that left the window: tombstones for the
        # changelog, so that compaction reclaims them (after the documents: same batch)
        self.tombstones: list[bytes] = []
        # the documents of pieces handed to a commit whose RocksDB batch is not written yet
        # (one list per piece; the list is rebound, never changed in place: the decision
        # thread may read it)
        self.committing: list[list[tuple[str, int, bytes]]] = []

    def add(self, doc: StoredDocument) -> None:
        key, value = document_key(doc), encode_document(doc)
        self.inner.put(key, value)
        self.pending.append((doc.scope, doc.hour, key, value))

    def drop_hour(self, scope: str, hour: int) -> None:
        self.tombstones += self.inner.hour_keys(scope, hour)
        self.tombstones += [key for s, h, key, _ in self.pending if s == scope and h == hour]
        self.tombstones += [key for piece in self.committing for s, h, key in piece
                            if s == scope and h == hour]
        self.inner.drop_hour(scope, hour)

    def load(self) -> Iterator[StoredDocument]:
        return self.inner.load()

    def commit(self, checkpoint: Checkpoint | None = None) -> None:
        self.inner.commit(checkpoint)

    def close(self) -> None:
        self.inner.close()


@dataclass(frozen=True)
class Handed:
    """A piece's RocksDB batch and the documents in it, until the piece is committed."""

    batch: Any
    keys: list[tuple[str, int, bytes]]


@dataclass
class Outcome:
    """What processing one item produced: records, and the decision or the rejection."""

    records: list[OutRecord]
    decision: Decision | None = None
    invalid: Invalid | None = None
    channel: str = ""
    skipped_copy: bool = False  # a record forwarded again and decided before: nothing sent


class StatefulPartition:
    """A partition of an input topic with its own RocksDB state and changelog: the one
    checkpoint, changelog and recovery mechanism that deciders and shards share
    (docs/STATE.md). Subclasses say what a record does (``process``)."""

    shards = 1  # the NDD_SHARDS this partition's state is laid out for (subclasses set it)

    def __init__(self, partition: int, path: Path, changelog_topic: str) -> None:
        self.partition = partition
        self.changelog_topic = changelog_topic
        self.store = ChangelogRecorder(RocksStore(path))
        self._handed_next = -1
        self.checkpoint = self.store.inner.checkpoint()  # the one position (state.rocks)
        self.sources = sources_of(self.checkpoint)  # see Checkpoint.sources
        self.detector: Any = self._make_detector()
        self.restored: int = self.detector.restore()

    def _make_detector(self) -> Any:
        raise NotImplementedError

    @property
    def next_offset(self) -> int:
        """The first input offset the committed state does not reflect."""
        return self.checkpoint.next

    @property
    def handed_next(self) -> int:
        """The first input offset no piece handed to a commit reflects (committed or not
        yet: ``next_offset`` once the commits in flight are done)."""
        return max(self.checkpoint.next, self._handed_next)

    @handed_next.setter
    def handed_next(self, offset: int) -> None:
        self._handed_next = offset

    @property
    def changelog_next(self) -> int:
        """The first changelog offset the local store does not hold."""
        return self.checkpoint.changelog

    @property
    def order(self) -> dict[str, Any] | None:
        """The event-time sequencer's checkpoint (None: none, or offset order)."""
        return self.checkpoint.order

    def window_documents(self) -> int:
        """Documents in the windows this partition holds (0: it holds none)."""
        windows = getattr(self.detector, "windows", None)
        return sum(w.document_count for w in windows()) if windows is not None else 0

    def window_hours(self) -> int:
        windows = getattr(self.detector, "windows", None)
        return max((w.hours_span() for w in windows()), default=0) if windows else 0

    def drain_changelog(self, checkpoint: Checkpoint | None = None) -> list[OutRecord]:
        """Changelog records for the documents stored since the last call, then (if given)
        the checkpoint they lead to, as one record."""
        out = [OutRecord(self.changelog_topic, key, value, [], partition=self.partition)
               for _, _, key, value in self.store.pending]
        out += [OutRecord(self.changelog_topic, key, None, [], partition=self.partition)
                for key in self.store.tombstones]
        self.store.pending.clear()
        self.store.tombstones.clear()
        if checkpoint is not None:
            out.append(OutRecord(self.changelog_topic, CHECKPOINT_KEY,
                                 encode_checkpoint(replace(checkpoint, shards=self.shards)),
                                 [], partition=self.partition))
        return out

    def hand_over(self, checkpoint: Checkpoint) -> tuple[list[OutRecord], Handed]:
        """A piece's end: its changelog records and ``checkpoint`` (``drain_changelog``),
        and its RocksDB batch, which :meth:`commit` writes once the piece is committed;
        later changes go to a batch of their own. Pieces are committed in order."""
        keys = [(s, h, key) for s, h, key, _ in self.store.pending]
        records = self.drain_changelog(checkpoint)
        self.store.committing = [*self.store.committing, keys]
        self.handed_next = checkpoint.next
        return records, Handed(self.store.inner.take(), keys)

    def commit(self, checkpoint: Checkpoint, handed: Handed | None = None) -> None:
        """Persist state with the checkpoint it reflects, in one RocksDB write batch
        (``handed``: the batch of the piece :meth:`hand_over` ended; else all changes)."""
        if self.store.inner.closed:  # closed at a stop: the committed changelog has it
            return
        self.checkpoint = replace(checkpoint, shards=self.shards)
        if handed is None:
            self.store.commit(self.checkpoint)
        else:
            self.store.committing = [k for k in self.store.committing if k is not handed.keys]
            self.store.inner.write(handed.batch, self.checkpoint)
        if self.store.inner.needs_compaction:
            self.store.inner.compact()

    def apply_changelog(self, docs: list[tuple[bytes, bytes]], checkpoint: Checkpoint) -> int:
        """Add changelog records written by another worker (or by this one before a crash),
        then rebuild the detector (if there were any), and go on from ``checkpoint``."""
        for key, value in docs:
            self.store.inner.add(decode_document(key, value))
        self.checkpoint = checkpoint
        self.sources = sources_of(checkpoint)
        self.store.inner.commit(checkpoint)
        if docs:
            self.detector = self._make_detector()
            self.restored = self.detector.restore()
        return len(docs)

    def check_layout(self, name: str) -> None:
        """Refuse state built for another number of shards: documents are indexed by the
        shard that owns them, so under another S the window's documents would not be found
        and a whole window's near duplicates would pass as unique. ``name`` names the
        partition in the message."""
        built = self.checkpoint.shards
        if built is None and (self.checkpoint.next > 0 or self.window_documents() > 0):
            built = 1  # written before shards existed
        if built is not None and built != self.shards:
            raise LayoutChanged(
                f"{name}: its state was built with NDD_SHARDS={built} and this worker runs "
                f"NDD_SHARDS={self.shards}; a change of shards needs new state: deploy under "
                "a new NDD_APP_ID (or delete the state directories and the internal topics); "
                "docs/DEPLOYMENT.md, 'One scope over many workers (shards)'")

    def gather_gauges(self) -> tuple[dict[int, int], int, int] | None:
        """A gatherer's load: items waiting per shard, bytes held, items spilled."""
        return None

    def close(self) -> None:
        self.store.close()


class LayoutChanged(RuntimeError):
    """The state of a partition was built for another ``NDD_SHARDS`` than the worker's."""


class PartitionDecider(StatefulPartition):
    """Detector + RocksDB state for one partition of the scoped topic."""

    def __init__(
        self, partition: int, path: Path, config: DetectorConfig, fmt: ItemFormat,
        topics: OutputTopics, offset_order: bool = True,
    ) -> None:
        self.config = config
        self.fmt = fmt
        self.topics = topics
        # offset order: a record of a raw partition below the offset after the last one
        # decided here is a copy the router forwarded again (each router forwards a raw
        # partition in offset order from a committed offset, so every record below it came
        # here before); under event-time order the sequencer says so (``order_note`` COPY)
        self.offset_order = offset_order
        super().__init__(partition, path, topics.changelog)

    def _make_detector(self) -> Detector:
        return Detector(self.config, store=self.store)

    def process(self, value: bytes | None, key: bytes | None, headers: object,
                scoped: Source, order_note: str | None = None) -> Outcome:
        """Decide one record of the scoped topic (value = the original raw bytes).
        ``order_note`` ("behind") says the event-time order had passed the item."""
        hdrs = header_map(headers)  # type: ignore[arg-type]
        source = Source.from_headers(hdrs) or scoped
        raw = value or b""
        fallback = source.timestamp_ms / 1000 if source.timestamp_ms else None
        item = parse_item(raw, self.fmt, position=source.position, fallback_timestamp=fallback)
        if isinstance(item, Invalid):
            record = OutRecord(self.topics.dlq, key, raw,
                               dlq_headers(item.reason, item.detail, source))
            return Outcome([record], invalid=item)
        if self._copy(source, order_note):
            # Its decision went out when it was first decided: a state that knows the record
            # reflects delivered outputs. Not answered again: a copy that came after its hour
            # left the window would be judged anew, as "unique, late".
            return Outcome([], skipped_copy=True, channel=item.channel)
        decision = self.detector.decide(item)
        records = routed_records(self.topics, decision, item.channel, item.timestamp, key, raw,
                                 source, order_note)
        return Outcome(records, decision=decision, channel=item.channel)

    def _copy(self, source: Source, order_note: str | None) -> bool:
        """Whether the record at raw ``source`` is a copy of one decided here; under offset
        order a record that is not one is counted as decided from now."""
        if not self.offset_order:
            return order_note == COPY
        tp = (source.topic, source.partition)
        seen = self.sources.get(tp, 0)
        if source.offset < seen:
            return True
        self.sources[tp] = source.offset + 1
        return False


def sources_of(checkpoint: Checkpoint) -> dict[tuple[str, int], int]:
    """``Checkpoint.sources`` ("topic:partition" -> next raw offset) keyed by partition."""
    out = {}
    for name, offset in (checkpoint.sources or {}).items():
        topic, _, partition = name.rpartition(":")
        out[(topic, int(partition))] = offset
    return out


def sources_named(sources: Mapping[tuple[str, int], int]) -> dict[str, int] | None:
    """The checkpoint's form of :func:`sources_of` (None when there are none)."""
    return {f"{t}:{p}": offset for (t, p), offset in sources.items()} or None


def routed_records(topics: OutputTopics, decision: Decision, channel: str, timestamp: float,
                   key: bytes | None, raw: bytes, source: Source,
                   order_note: str | None = None) -> list[OutRecord]:
    """Where a decided item goes: its routed record, and its audit record if enabled."""
    topic = topics.unique if decision.routed_unique else topics.duplicate
    headers_out = decision_headers(decision, source)
    if order_note is not None:
        headers_out.append((H_ORDER, order_note.encode()))
    records = [OutRecord(topic, key, raw, headers_out)]
    if topics.decisions:
        audit = decision.as_dict()
        if order_note is not None:
            audit["order"] = order_note
        audit["channel"] = channel
        audit["time"] = iso_utc(timestamp)
        audit["source"] = source.position
        records.append(OutRecord(topics.decisions, key, dumps(audit), headers_out))
    return records
