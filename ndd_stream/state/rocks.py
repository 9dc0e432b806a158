"""A partition's state: its byte layouts (versioned, documented in docs/STATE.md) and
its :class:`~ndd_stream.core.store.StateStore` in RocksDB (rocksdict), one per partition.
A document is encoded once, here, for RocksDB and for the changelog topic.

Additions are buffered in one WriteBatch and written together with the marker (the
input offset they reflect) by ``commit``, so state and offset never disagree after a
crash. An hour leaves with one range delete; RocksDB reclaims its space at
compaction, which ``compact`` forces (the worker calls it when hours expire).

Document key:        b"d" | u16 BE len(scope) | scope UTF-8 | i64 BE hour+2**63 | u64 BE number
Document value (v2): b"\\x02" | JSON {"n", "h", "c", "t", "nf", "i", "d": decision, "f": figures}
Document value (v1): b"\\x01" | JSON {"n", "h", "c", "t", "nf", "i", "d": decision}
Checkpoint key:      b"m:marker"   value (v4): b"\\x04" | JSON {.. v2's .., "pc": chunks}
                                   value (v3): b"\\x03" | JSON {.. v2's .., "pz": pending}
                                   value (v2): b"\\x02" | JSON {"next", "changelog", "order"}
                                   value (v1): b"\\x01" | JSON {"next", "changelog"} (read)
Format key:          b"m:format"   value: b"ndd-state-2" (b"ndd-state-1" is upgraded on open)

The checkpoint is a partition's one position (:class:`Checkpoint`); the same v2 value is the
changelog's checkpoint record (key ``ndd-checkpoint``, worker/changelog.py).

v2 adds the item's figures (``core.novelty.figures``: a string, null when not indexed), which
the novelty rule compares with later items. v1 records stay readable: their figures are
unknown (None), so a later item is judged against them by q-gram overlap only, until they
leave the window (at most ``window_hours`` + 1 hours after the upgrade).

A decision's ``story`` (core.stories) is in ``d`` only when it is not the derived one (its
duplicate's identity, or its own); a record without it reads as the derived story, records
written before stories included, so the layout stays v2 and older revisions ignore the key.

Big-endian fixed-width integers make RocksDB's byte order equal (scope, hour, number)
order, so one hour of one scope is a contiguous key range: dropped with a single
range delete. The hour is offset by 2**63 so negative hours sort correctly.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocksdict import AccessType, Options, Rdict, WriteBatch, WriteOptions

from ndd_stream.core.document import Decision
from ndd_stream.core.store import StoredDocument
from ndd_stream.core.stories import derived_story
from ndd_stream.jsonio import dumps, loads
from ndd_stream.state.pending import Pair, PendingSnapshot, pack_pending, unpack_pending

FORMAT = b"ndd-state-2"
READABLE_FORMATS = (b"ndd-state-1", FORMAT)  # a v1 store is upgraded in place on open
FORMAT_KEY = b"m:format"
MARKER_KEY = b"m:marker"  # the partition's checkpoint
DOC_PREFIX = b"d"
DOC_END = b"e"  # first byte after every document key
_V1 = b"\x01"
_V2 = b"\x02"
_V3 = b"\x03"  # a checkpoint with a pending list, packed ("pz")
_V4 = b"\x04"  # ... packed in chunks, each packed once ("pc"; state/pending.py)
_HOUR_BIAS = 1 << 63


class CorruptRecord(ValueError):
    """A stored record has an unknown version or does not decode."""


def scope_prefix(scope: str) -> bytes:
    raw = scope.encode("utf-8")
    return DOC_PREFIX + struct.pack(">H", len(raw)) + raw


def hour_prefix(scope: str, hour: int) -> bytes:
    return scope_prefix(scope) + struct.pack(">Q", hour + _HOUR_BIAS)


def document_key(doc: StoredDocument) -> bytes:
    return hour_prefix(doc.scope, doc.hour) + struct.pack(">Q", doc.number)


def encode_document(doc: StoredDocument) -> bytes:
    return _V2 + dumps({
        "n": doc.number, "h": doc.hour, "c": doc.channel, "t": doc.timestamp,
        "nf": doc.nf, "i": doc.indexed, "d": _stored_decision(doc.decision), "f": doc.figures,
    })


def _stored_decision(decision: Decision) -> dict[str, Any]:
    """The decision as persisted: its story only when it is not the derived one (a few
    bytes a record on average), never the story's tally (counted again on restore)."""
    out = decision.as_dict()
    del out["story_size"], out["story_channels"]
    if decision.supersedes is None:
        del out["supersedes"]
    if decision.story == derived_story(decision):
        del out["story"]
    return out


def _read_decision(data: dict[str, Any]) -> Decision:
    if not data.get("story"):
        # omitted: the derived one (records written before stories read the same way);
        # set before the Decision is built (a restore reads every document of a window)
        duplicate_of = data.get("duplicate_of")
        data["story"] = duplicate_of if duplicate_of is not None else data["identity"]
    return Decision.from_dict(data)


def decode_document(key: bytes, value: bytes) -> StoredDocument:
    version = value[:1]
    if version not in (_V1, _V2):
        raise CorruptRecord(f"unknown document record version {version!r}")
    try:
        (length,) = struct.unpack(">H", key[1:3])
        scope = key[3 : 3 + length].decode("utf-8")
        data = loads(value[1:])
        return StoredDocument(
            scope=scope, number=int(data["n"]), hour=int(data["h"]), channel=str(data["c"]),
            timestamp=float(data["t"]), nf=str(data["nf"]), indexed=bool(data["i"]),
            decision=_read_decision(data["d"]),
            figures=None if version == _V1 or data.get("f") is None else str(data["f"]),
        )
    except (KeyError, ValueError, TypeError, struct.error) as exc:
        raise CorruptRecord(f"undecodable document record: {exc}") from exc


@dataclass(frozen=True)
class Checkpoint:
    """A scoped partition's one position: written with the state it reflects in one RocksDB
    batch, and after each batch's documents as one changelog record, so recovery reads one
    record (never a position without its order, never the consumer group's offset)."""

    next: int = 0  # first scoped offset the state does not reflect (re-read from here)
    changelog: int = 0  # first changelog offset the local store does not hold (local only)
    order: dict[str, Any] | None = None  # the event-time sequencer's (worker/merge.py)
    # sharded windows: (scoped offset, arrival number or -1) of the items admitted and not
    # decided yet, in the order they were admitted (worker/gathering.py); absent when empty
    pending: Sequence[Pair] = ()  # a tuple, or the chunked PendingSnapshot
    # NDD_SHARDS the state was built with; None: not recorded (written before shards
    # existed, so 1 if the state holds anything). A change of it needs new state.
    shards: int | None = None
    # offset order: per raw partition ("topic:partition"), the offset after the last of its
    # records decided here; a record below it is a copy the router forwarded again
    sources: Mapping[str, int] | None = None


def encode_checkpoint(checkpoint: Checkpoint) -> bytes:
    """v2, or v3 when there is a pending list: a backlog lists hundreds of thousands of
    items, 18 bytes each as JSON pairs (200k: a 3.6 MB record, near the producer's request
    limit, written after every piece of a batch); packed, ~3 bytes in event-time order and
    well under one in offset order. v4 when the list is a chunked
    :class:`~ndd_stream.state.pending.PendingSnapshot` (its full chunks packed once)."""
    data: dict[str, Any] = {"next": checkpoint.next, "changelog": checkpoint.changelog,
                            "order": checkpoint.order}
    if checkpoint.shards is not None:
        data["shards"] = checkpoint.shards
    if checkpoint.sources:
        data["sources"] = dict(checkpoint.sources)
    if not checkpoint.pending:
        return _V2 + dumps(data)
    if isinstance(checkpoint.pending, PendingSnapshot):
        data["pc"] = checkpoint.pending.packed
        return _V4 + dumps(data)
    data["pz"] = pack_pending(checkpoint.pending)
    return _V3 + dumps(data)


def decode_checkpoint(value: bytes | None) -> Checkpoint:
    """A stored checkpoint; the empty one (offset 0, no order) when there is none yet."""
    if not value:
        return Checkpoint()
    if value[:1] not in (_V1, _V2, _V3, _V4):
        raise CorruptRecord(f"unknown checkpoint version {value[:1]!r}")
    try:
        data = loads(value[1:])
        order = data.get("order")
        if order is not None and not isinstance(order, dict):
            raise TypeError("order is not an object")
        pending: Sequence[Pair]
        if value[:1] == _V4:
            pending = PendingSnapshot.from_packed(data["pc"])
        elif value[:1] == _V3:
            pending = unpack_pending(data["pz"])
        else:
            pending = tuple((int(o), int(n)) for o, n in data.get("pending", ()))
        shards = data.get("shards")
        sources = {str(k): int(v) for k, v in data.get("sources", {}).items()}
        return Checkpoint(int(data.get("next", 0)), int(data.get("changelog", 0)), order,
                          pending, None if shards is None else int(shards), sources or None)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptRecord(f"undecodable checkpoint: {exc}") from exc


COMPACT_AFTER_DROPPED_HOURS = 12


@dataclass(frozen=True)
class RocksDBOptions:
    """Engine tuning, kept apart from the service settings (after quix's RocksDBOptions)."""

    write_buffer_size: int = 32 * 1024 * 1024
    max_write_buffer_number: int = 3
    target_file_size_base: int = 32 * 1024 * 1024
    max_open_files: int = 256
    compression: bool = True
    sync_writes: bool = False  # the WAL survives a process crash without fsync

    def to_options(self) -> Options:
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_write_buffer_size(self.write_buffer_size)
        opts.set_max_write_buffer_number(self.max_write_buffer_number)
        opts.set_target_file_size_base(self.target_file_size_base)
        opts.set_max_open_files(self.max_open_files)
        if self.compression:
            from rocksdict import DBCompressionType

            opts.set_compression_type(DBCompressionType.lz4())
        return opts


class RocksStore:
    """Per-partition state: decided documents by (scope, hour, number) and a marker."""

    def __init__(self, path: Path, options: RocksDBOptions | None = None) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._options = options or RocksDBOptions()
        self._db = Rdict(str(self.path), options=self._options.to_options(),
                         access_type=AccessType.read_write())
        self._write_options = WriteOptions()
        self._write_options.sync = self._options.sync_writes
        stored = self._db.get(FORMAT_KEY)
        if stored is None or (stored != FORMAT and stored in READABLE_FORMATS):
            self._db.put(FORMAT_KEY, FORMAT)  # new, or v1 upgraded: its records stay readable
        elif stored != FORMAT:
            self._db.close()
            raise CorruptRecord(f"{self.path}: state format {stored!r}, expected {FORMAT!r}")
        self._batch = WriteBatch(raw_mode=True)
        self._dropped_since_compaction = 0
        self._closed = False

    def add(self, doc: StoredDocument) -> None:
        self._batch.put(document_key(doc), encode_document(doc))

    def put(self, key: bytes, value: bytes) -> None:
        """A document already encoded (``document_key``, ``encode_document``)."""
        self._batch.put(key, value)

    def drop_hour(self, scope: str, hour: int) -> None:
        self._batch.delete_range(hour_prefix(scope, hour), hour_prefix(scope, hour + 1))
        self._dropped_since_compaction += 1

    def hour_keys(self, scope: str, hour: int) -> list[bytes]:
        """The keys of the documents of ``scope``'s ``hour`` written so far (committed)."""
        start, end = hour_prefix(scope, hour), hour_prefix(scope, hour + 1)
        keys: list[bytes] = []
        for key in self._db.keys(from_key=start):
            assert isinstance(key, bytes)  # raw_mode store
            if key >= end:
                break
            keys.append(key)
        return keys

    def load(self) -> Iterator[StoredDocument]:
        docs: list[StoredDocument] = []
        for key, value in self._db.items(from_key=DOC_PREFIX):
            assert isinstance(key, bytes) and isinstance(value, bytes)  # raw_mode store
            if key >= DOC_END:
                break
            docs.append(decode_document(key, value))
        docs.sort(key=lambda d: (d.scope, d.number))
        return iter(docs)

    def commit(self, checkpoint: Checkpoint | None = None) -> None:
        """Write the batch with the checkpoint it reflects, at once."""
        self.write(self.take(), checkpoint)

    def take(self) -> WriteBatch:
        """The batch so far, for a later :meth:`write`; later changes go to a new one."""
        batch, self._batch = self._batch, WriteBatch(raw_mode=True)
        return batch

    def write(self, batch: WriteBatch, checkpoint: Checkpoint | None = None) -> None:
        """Write a batch :meth:`take` returned with the checkpoint it reflects, at once.
        Batches are written in the order they were taken."""
        if checkpoint is not None:
            batch.put(MARKER_KEY, encode_checkpoint(checkpoint))
        if not batch.is_empty():
            self._db.write(batch, self._write_options)

    @property
    def closed(self) -> bool:
        return self._closed

    def checkpoint(self) -> Checkpoint:
        return decode_checkpoint(self._db.get(MARKER_KEY))

    def compact(self) -> None:
        """Reclaim the space of dropped hours now (normally left to RocksDB)."""
        self._db.compact_range(None, None)
        self._dropped_since_compaction = 0

    @property
    def needs_compaction(self) -> bool:
        """After a dozen dropped (scope, hour) ranges: forcing a compaction per hour would
        rewrite the live window every hour; RocksDB also compacts on its own."""
        return self._dropped_since_compaction >= COMPACT_AFTER_DROPPED_HOURS

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.glob("*") if p.is_file())

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._batch = WriteBatch(raw_mode=True)
            self._db.close()
