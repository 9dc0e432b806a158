"""Stage 2: decide the items of one scoped partition and say where each goes.

One :class:`PartitionDecider` per partition owns a detector and its RocksDB store.
Every decided document is also queued for the changelog topic, from which another
worker rebuilds the partition after a rebalance.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ndd_stream.core.detector import Detector, DetectorConfig
from ndd_stream.core.document import Decision
from ndd_stream.core.items import Invalid, ItemFormat, parse_item
from ndd_stream.core.store import StoredDocument
from ndd_stream.jsonio import dumps
from ndd_stream.state.codec import Checkpoint, document_key, encode_checkpoint, encode_document
from ndd_stream.state.rocks import RocksStore
from ndd_stream.worker.changelog import CHECKPOINT_KEY
from ndd_stream.worker.records import (
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
    """A StateStore that forwards to RocksDB and remembers what to send to the changelog."""

    def __init__(self, inner: RocksStore) -> None:
        self.inner = inner
        self.pending: list[StoredDocument] = []

    def add(self, doc: StoredDocument) -> None:
        self.inner.add(doc)
        self.pending.append(doc)

    def drop_hour(self, scope: str, hour: int) -> None:
        self.inner.drop_hour(scope, hour)

    def load(self) -> Iterator[StoredDocument]:
        return self.inner.load()

    def commit(self, checkpoint: Checkpoint | None = None) -> None:
        self.inner.commit(checkpoint)

    def close(self) -> None:
        self.inner.close()


@dataclass
class Outcome:
    """What processing one item produced: records, and the decision or the rejection."""

    records: list[OutRecord]
    decision: Decision | None = None
    invalid: Invalid | None = None
    channel: str = ""


class PartitionDecider:
    """Detector + RocksDB state for one partition of the scoped topic."""

    def __init__(
        self, partition: int, path: Path, config: DetectorConfig, fmt: ItemFormat,
        topics: OutputTopics,
    ) -> None:
        self.partition = partition
        self.store = ChangelogRecorder(RocksStore(path))
        self.detector = Detector(config, store=self.store)
        self.fmt = fmt
        self.topics = topics
        self.checkpoint = self.store.inner.checkpoint()  # the one position (state.codec)
        self.restored = self.detector.restore()

    @property
    def next_offset(self) -> int:
        """The first scoped offset the state does not reflect."""
        return self.checkpoint.next

    @property
    def changelog_next(self) -> int:
        """The first changelog offset the local store does not hold."""
        return self.checkpoint.changelog

    @property
    def order(self) -> dict[str, Any] | None:
        """The event-time sequencer's checkpoint (None: none, or offset order)."""
        return self.checkpoint.order

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
        decision = self.detector.decide(item)
        topic = self.topics.duplicate if decision.is_duplicate else self.topics.unique
        headers_out = decision_headers(decision, source)
        if order_note is not None:
            headers_out.append((H_ORDER, order_note.encode()))
        records = [OutRecord(topic, key, raw, headers_out)]
        if self.topics.decisions:
            audit = decision.as_dict()
            if order_note is not None:
                audit["order"] = order_note
            audit["channel"] = item.channel
            audit["time"] = iso_utc(item.timestamp)
            audit["source"] = source.position
            records.append(OutRecord(self.topics.decisions, key, dumps(audit), headers_out))
        return Outcome(records, decision=decision, channel=item.channel)

    def drain_changelog(self, checkpoint: Checkpoint | None = None) -> list[OutRecord]:
        """Changelog records for the documents decided since the last call, then (if given)
        the checkpoint they lead to, as one record."""
        out = [OutRecord(self.topics.changelog, document_key(d), encode_document(d), [],
                         partition=self.partition) for d in self.store.pending]
        self.store.pending.clear()
        if checkpoint is not None:
            out.append(OutRecord(self.topics.changelog, CHECKPOINT_KEY,
                                 encode_checkpoint(checkpoint), [], partition=self.partition))
        return out

    def commit(self, next_offset: int, changelog_next: int | None = None,
               order: dict[str, Any] | None = None) -> None:
        """Persist state with the checkpoint it reflects, in one RocksDB write batch."""
        self.checkpoint = Checkpoint(
            next_offset, self.changelog_next if changelog_next is None else changelog_next,
            self.order if order is None else order)
        self.store.commit(self.checkpoint)
        if self.store.inner.needs_compaction:
            self.store.inner.compact()

    def apply_changelog(self, docs: list[tuple[bytes, bytes]], checkpoint: Checkpoint) -> int:
        """Add changelog records written by another worker (or by this one before a crash),
        then rebuild the detector (if there were any), and go on from ``checkpoint``."""
        from ndd_stream.state.codec import decode_document

        for key, value in docs:
            self.store.inner.add(decode_document(key, value))
        self.checkpoint = checkpoint
        self.store.inner.commit(checkpoint)
        if docs:
            self.detector = Detector(self.detector.config, store=self.store)
            self.restored = self.detector.restore()
        return len(docs)

    def close(self) -> None:
        self.store.close()
