"""Items a gatherer has admitted past its memory budget, kept in files until decided.

Why: under a backlog the gatherer admits items faster than the shards answer them, and the
answers come back on the scoped partition itself, behind the backlog, so it cannot stop
reading to wait for them (``worker/gathering.py``). Without a bound it holds the whole
backlog in memory (~23 KB per 5 KB item measured); with one, the items past the budget wait
here, on the state volume, and only their place in the queue stays in memory.

The files are a cache for the life of one open partition, not state: the durable truth is
the checkpoint's pending list, from which a restarted gatherer re-reads its items from
Kafka. So the directory is emptied when a partition opens and removed when it closes, and
the byte layout below may change between versions.

Layout (``spill v1``): segment files ``00000000.seg``, ``00000001.seg``, ... of up to
``SEGMENT_BYTES`` each, appended to; an item is a :class:`Ref` (segment, offset, length) to
one blob. A blob is ``_HEAD`` (little-endian: source partition, source offset, source
timestamp ms or -1, arrival number, hour, event time, markup flag) followed by ten
length-prefixed fields (``int32`` length, -1 for None): raw value, key, source topic, order
note, identity, scope, channel, text, normal form, figures. A segment is deleted once every
blob in it has been taken back (items are taken in admission order, a restart's re-read
ones in their listed order, so segments empty roughly first in, first out).
"""

from __future__ import annotations

import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from ndd_stream.core.document import Document
from ndd_stream.worker.records import Source

SEGMENT_BYTES = 16 << 20
_HEAD = struct.Struct("<qqqqqd?")
_LEN = struct.Struct("<i")


@dataclass(frozen=True, slots=True)
class Ref:
    """Where one blob is."""

    segment: int
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class Parked:
    """An item as the gatherer keeps it: read (``number`` -1, ``nf`` None) or admitted."""

    doc: Document
    raw: bytes
    key: bytes | None
    source: Source
    note: str | None
    number: int = -1
    hour: int = 0
    nf: str | None = None
    figures: str | None = None


def encode(item: Parked) -> bytes:
    doc, src = item.doc, item.source
    parts = [_HEAD.pack(src.partition, src.offset,
                        -1 if src.timestamp_ms is None else src.timestamp_ms, item.number,
                        item.hour, doc.timestamp, doc.markup)]
    fields: list[bytes | None] = [
        item.raw, item.key, src.topic.encode(), _utf8(item.note), doc.identity.encode(
            "utf-8", "surrogatepass"), _utf8(doc.scope), _utf8(doc.channel), _utf8(doc.text),
        _utf8(item.nf), _utf8(item.figures)]
    for f in fields:
        if f is None:
            parts.append(_LEN.pack(-1))
        else:
            parts += [_LEN.pack(len(f)), f]
    return b"".join(parts)


def decode(blob: bytes) -> Parked:
    part, off, ts_ms, number, hour, timestamp, markup = _HEAD.unpack_from(blob, 0)
    at = _HEAD.size
    fields: list[bytes | None] = []
    for _ in range(10):
        (n,) = _LEN.unpack_from(blob, at)
        at += _LEN.size
        if n < 0:
            fields.append(None)
        else:
            fields.append(blob[at : at + n])
            at += n
    raw, key, topic, note, identity, scope, channel, text, nf, figures = fields
    assert raw is not None and topic is not None and identity is not None
    doc = Document(identity.decode("utf-8", "surrogatepass"), _str(scope), _str(channel),
                   timestamp, _str(text), markup)
    source = Source(topic.decode(), part, off, None if ts_ms < 0 else ts_ms)
    return Parked(doc, raw, key, source, _opt(note), number, hour, _opt(nf), _opt(figures))


def _utf8(s: str | None) -> bytes | None:
    return None if s is None else s.encode("utf-8", "surrogatepass")


def _opt(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "surrogatepass")


def _str(b: bytes | None) -> str:
    return "" if b is None else b.decode("utf-8", "surrogatepass")


class Spill:
    """Append-only segment files of one partition's parked items (created on first use)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        shutil.rmtree(directory, ignore_errors=True)  # a cache of an earlier process
        self._live: dict[int, int] = {}  # segment -> blobs not taken back yet
        self._fds: dict[int, int] = {}
        self._segment = -1
        self._size = SEGMENT_BYTES  # no segment open yet
        self.items = 0
        self.bytes = 0

    def put(self, item: Parked) -> Ref:
        blob = encode(item)
        if self._size + len(blob) > SEGMENT_BYTES and self._size > 0:
            self._segment += 1
            self._size = 0
            self.directory.mkdir(parents=True, exist_ok=True)
            self._fds[self._segment] = os.open(
                self.directory / f"{self._segment:08d}.seg",
                os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            self._live[self._segment] = 0
        ref = Ref(self._segment, self._size, len(blob))
        os.pwrite(self._fds[self._segment], blob, self._size)
        self._size += len(blob)
        self._live[self._segment] += 1
        self.items += 1
        self.bytes += len(blob)
        return ref

    def take(self, ref: Ref) -> Parked:
        """The item back; its segment is deleted once all of its items are taken."""
        blob = os.pread(self._fds[ref.segment], ref.length, ref.offset)
        if len(blob) != ref.length:
            raise OSError(f"spill segment {ref.segment} of {self.directory} is truncated")
        self._live[ref.segment] -= 1
        self.items -= 1
        self.bytes -= ref.length
        if self._live[ref.segment] == 0:
            self._drop(ref.segment)
            if ref.segment == self._segment:
                self._size = SEGMENT_BYTES  # the next put starts a new segment
        return decode(blob)

    def close(self) -> None:
        for segment in list(self._fds):
            self._drop(segment)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _drop(self, segment: int) -> None:
        os.close(self._fds.pop(segment))
        del self._live[segment]
        (self.directory / f"{segment:08d}.seg").unlink(missing_ok=True)
