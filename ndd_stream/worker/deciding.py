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
from ndd_stream.state.codec import decode_order, document_key, encode_document, encode_order
from ndd_stream.state.rocks import RocksStore
from ndd_stream.worker.changelog import ORDER_KEY, POSITION_KEY
from ndd_stream.worker.records import (
    H_ORDER,
    OutRecord,
    Source,
    decision_headers,
    dlq_headers,
    header_map,
    iso_utc,
)

UNKNOWN_OFFSET = -1
"""``next_offset`` of a partition rebuilt from a changelog without position records
(written by an older worker): the first record the consumer delivers is taken as next."""


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

    def commit(self, marker: dict[str, int] | None = None,
               order: dict[str, Any] | None = None) -> None:
        self.inner.commit(marker, order)

    def marker(self) -> dict[str, int]:
        return self.inner.marker()

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
        marker = self.store.marker()
        # first scoped offset not yet applied (UNKNOWN_OFFSET: the next one delivered)
        self.next_offset = marker.get("next", 0)
        self.changelog_next = marker.get("changelog", 0)  # first changelog offset not applied
        # the event-time order's checkpoint committed with that marker (None: none yet)
        self.order: dict[str, Any] | None = self.store.inner.order()
        self.restored = self.detector.restore()

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

    def drain_changelog(self, position: int | None = None,
                        order: dict[str, Any] | None = None) -> list[OutRecord]:
        """Changelog records for the documents decided since the last call, then (if given)
        the position record: the first scoped offset the state does not reflect, and the
        event-time order's checkpoint that goes with it."""
        out = [OutRecord(self.topics.changelog, document_key(d), encode_document(d), [],
                         partition=self.partition) for d in self.store.pending]
        self.store.pending.clear()
        if position is not None:
            out.append(OutRecord(self.topics.changelog, POSITION_KEY, str(position).encode(),
                                 [], partition=self.partition))
        if order is not None:
            out.append(OutRecord(self.topics.changelog, ORDER_KEY, encode_order(order), [],
                                 partition=self.partition))
        return out

    def commit(self, next_offset: int, changelog_next: int | None = None,
               order: dict[str, Any] | None = None) -> None:
        """Persist state with the offsets (and the order checkpoint) it reflects, in one
        RocksDB write batch: the partition's one checkpoint."""
        self.next_offset = next_offset
        if changelog_next is not None:
            self.changelog_next = changelog_next
        if order is not None:
            self.order = order
        self.store.commit({"next": self.next_offset, "changelog": self.changelog_next}, order)
        if self.store.inner.needs_compaction:
            self.store.inner.compact()

    def apply_changelog(self, docs: list[tuple[bytes, bytes]], changelog_next: int,
                        next_offset: int, order: bytes | None = None) -> int:
        """Add changelog records written by another worker, then rebuild the detector.
        ``next_offset`` is where that worker left the scoped partition (UNKNOWN_OFFSET:
        take the first record the consumer delivers), ``order`` its order checkpoint."""
        from ndd_stream.state.codec import decode_document

        self.next_offset = next_offset
        if order is not None:
            self.order = decode_order(order)
        for key, value in docs:
            self.store.inner.add(decode_document(key, value))
        self.store.inner.commit({"next": self.next_offset, "changelog": changelog_next})
        self.changelog_next = changelog_next
        self.detector = Detector(self.detector.config, store=self.store)
        self.restored = self.detector.restore()
        self.store.commit({"next": self.next_offset, "changelog": changelog_next}, self.order)
        return len(docs)

    def close(self) -> None:
        self.store.close()
