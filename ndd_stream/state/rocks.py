"""A :class:`~ndd_stream.core.store.StateStore` in RocksDB (rocksdict), one per partition.

Additions are buffered in one WriteBatch and written together with the marker (the
input offset they reflect) by ``commit``, so state and offset never disagree after a
crash. An hour leaves with one range delete; RocksDB reclaims its space at
compaction, which ``compact`` forces (the worker calls it when hours expire).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rocksdict import AccessType, Options, Rdict, WriteBatch, WriteOptions

from ndd_stream.core.store import StoredDocument
from ndd_stream.state.codec import (
    DOC_END,
    DOC_PREFIX,
    FORMAT,
    FORMAT_KEY,
    MARKER_KEY,
    READABLE_FORMATS,
    Checkpoint,
    CorruptRecord,
    decode_checkpoint,
    decode_document,
    document_key,
    encode_checkpoint,
    encode_document,
    hour_prefix,
)

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
