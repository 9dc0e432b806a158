"""A gatherer's pending list: (scoped offset, arrival number) of its admitted, undecided
items, in admission order, and its packed form (docs/STATE.md, checkpoint ``0x03``/``0x04``).

Why chunks: the list goes into the checkpoint after every piece of a batch (every 256
decisions), and a catch-up admits its whole backlog before deciding it. Packed whole each
time, a list of 1M items cost 173 ms per encoding, twice per checkpoint (store and
changelog), so a backlog's checkpoints grew with the square of its length. Here every full
chunk of :data:`CHUNK` pairs is packed once, when it fills; a checkpoint packs only the open
tail and names how many pairs of the first chunk were decided since (``skip``).
"""

from __future__ import annotations

import base64
import binascii
import itertools
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from functools import cached_property
from typing import Any, NamedTuple, overload

import numpy as np
import numpy.typing as npt

Pair = tuple[int, int]  # (scoped offset, arrival number or -1)
CHUNK = 4096  # pairs per sealed chunk: ~0.6 ms to pack, a few hundred bytes packed


def pack_pending(pending: Sequence[Pair]) -> dict[str, Any]:
    """``{"n": count, "z": base64(zlib(deltas))}``: the offsets, then the numbers, each as
    differences from the one before (the first from 0), 8-byte little-endian signed."""
    flat = itertools.chain.from_iterable(pending)  # 2.7x faster than np.array of pairs
    pairs = np.fromiter(flat, dtype=np.int64, count=2 * len(pending)).reshape(-1, 2)
    deltas = np.diff(pairs, axis=0, prepend=np.zeros((1, 2), np.int64))
    raw = np.ascontiguousarray(deltas.T).astype("<i8").tobytes()
    return {"n": len(pending), "z": base64.b64encode(zlib.compress(raw, 1)).decode("ascii")}


def unpack_pending(packed: dict[str, Any]) -> tuple[Pair, ...]:
    """The pairs :func:`pack_pending` packed; ValueError if they do not decode."""
    n = int(packed["n"])
    try:
        raw = zlib.decompress(base64.b64decode(packed["z"], validate=True))
    except (binascii.Error, zlib.error) as exc:
        raise ValueError(f"pending list: {exc}") from exc
    if len(raw) != 16 * n:
        raise ValueError(f"pending list of {len(raw)} bytes for {n} items")
    sums = np.cumsum(np.frombuffer(raw, dtype="<i8").reshape(2, n), axis=1)
    return tuple(zip(sums[0].tolist(), sums[1].tolist(), strict=True))


class PendingSnapshot(Sequence[Pair]):
    """The pending list at one checkpoint: sealed packed chunks, of which the first
    ``skip`` pairs are decided, then the open ``tail``. A sequence of pairs like the tuple
    it stands for (equal to it, too); reading it unpacks the chunks."""

    def __init__(self, skip: int, chunks: Sequence[dict[str, Any]], tail: Sequence[Pair],
                 least_offset: int) -> None:
        self.skip = skip
        self.chunks = tuple(chunks)
        self.tail = tuple(tail)
        self.least_offset = least_offset  # the smallest offset listed: re-read from there
        self._len = sum(int(c["n"]) for c in self.chunks) - skip + len(self.tail)

    @cached_property
    def packed(self) -> dict[str, Any]:
        """The ``"pc"`` field of a ``0x04`` checkpoint (the tail packed once, here)."""
        return {"skip": self.skip, "chunks": list(self.chunks),
                "tail": pack_pending(self.tail)}

    @cached_property
    def _pairs(self) -> tuple[Pair, ...]:
        chunks = itertools.chain.from_iterable(unpack_pending(c) for c in self.chunks)
        return tuple(itertools.islice(chunks, self.skip, None)) + self.tail

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Pair]:
        return iter(self._pairs)

    @overload
    def __getitem__(self, index: int) -> Pair: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Pair, ...]: ...
    def __getitem__(self, index: int | slice) -> Pair | tuple[Pair, ...]:
        return self._pairs[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PendingSnapshot | tuple):
            return self._pairs == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._pairs)

    def __repr__(self) -> str:
        return f"PendingSnapshot({len(self)} pairs, {len(self.chunks)} chunks)"

    @classmethod
    def from_packed(cls, packed: dict[str, Any]) -> PendingSnapshot:
        """The ``"pc"`` field read back; ValueError (or KeyError, TypeError) if it is not one."""
        chunks = packed["chunks"]
        if not isinstance(chunks, list) or not chunks:
            raise TypeError("pending chunks are not a non-empty list")
        skip = int(packed["skip"])
        if not 0 <= skip < int(chunks[0]["n"]):  # a chunk all decided is dropped
            raise ValueError(f"pending list skips {skip} of a chunk of {chunks[0]['n']}")
        snapshot = cls(skip, chunks, unpack_pending(packed["tail"]), 0)
        pairs = snapshot._pairs  # decodes every chunk: a corrupt one fails here
        snapshot.least_offset = min((o for o, _ in pairs), default=0)
        return snapshot


Listed = tuple[Pair, ...] | PendingSnapshot  # a short list as is, a long one in chunks


def join(first: Listed, then: Listed) -> Listed:
    """``first``'s pairs, then ``then``'s, packing at most ``first``'s open tail (a restart
    lists the items it admits while it re-reads, then the ones it re-reads: the latter
    packed once, when the restart began)."""
    if not then:
        return first
    if not first:
        return then
    if isinstance(first, tuple) and isinstance(then, tuple):
        return first + then
    if isinstance(then, PendingSnapshot) and then.skip:
        raise ValueError("only the first part of a pending list may skip pairs")
    skip, chunks, tail = ((first.skip, list(first.chunks), first.tail)
                          if isinstance(first, PendingSnapshot) else (0, [], first))
    if isinstance(then, tuple):
        return PendingSnapshot(skip, chunks, tail + then,
                               min(least_offset(first), least_offset(then)))
    if tail:
        chunks.append(pack_pending(tail))
    return PendingSnapshot(skip, chunks + list(then.chunks), then.tail,
                           min(least_offset(first), then.least_offset))


def least_offset(pending: Sequence[Pair]) -> int:
    """The smallest scoped offset of a non-empty pending list."""
    if isinstance(pending, PendingSnapshot):
        return pending.least_offset
    return min(o for o, _ in pending)


class _Chunk(NamedTuple):
    """A sealed chunk: its pairs packed (what a checkpoint lists), its offsets (for the
    least undecided one while it is the first chunk) and their least."""

    packed: dict[str, Any]
    offsets: npt.NDArray[np.int64]
    least: int


class PendingList:
    """The live list, appended as items are admitted and popped from the front as they are
    decided (the queue is FIFO). Every full chunk is packed once, when it fills, and then
    kept as its packed form and its offsets (8 bytes a pair, not a Python tuple's ~120:
    a backlog lists every item it admitted)."""

    def __init__(self, chunk: int | None = None) -> None:
        self._chunk = chunk or CHUNK  # read here, so that tests can make chunks small
        self._chunks: deque[_Chunk] = deque()
        self._skip = 0  # pairs of the first chunk decided
        self._tail: deque[Pair] = deque()  # not sealed yet (the newest)
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def append(self, pair: Pair) -> None:
        self._tail.append(pair)
        self._len += 1
        if len(self._tail) >= self._chunk:
            offsets = np.fromiter((o for o, _ in self._tail), np.int64, len(self._tail))
            self._chunks.append(_Chunk(pack_pending(self._tail), offsets,
                                       int(offsets.min())))
            self._tail.clear()

    def popleft(self) -> None:
        if not self._len:
            raise IndexError("pop from an empty pending list")
        self._len -= 1
        if not self._chunks:
            self._tail.popleft()
            return
        self._skip += 1
        if self._skip == self._chunks[0].offsets.size:
            self._chunks.popleft()
            self._skip = 0

    def clear(self) -> None:
        self._chunks.clear()
        self._tail.clear()
        self._skip = self._len = 0

    def snapshot(self, then: Listed = ()) -> Listed:
        """The list now, followed by ``then`` (see :func:`join`): a plain tuple while no
        chunk is sealed, else a :class:`PendingSnapshot` (cost: the tail and one chunk, not
        the whole list)."""
        tail = tuple(self._tail)
        if not self._chunks:
            return join(tail, then)
        # exact least offset: the first chunk's undecided pairs, the other chunks', the tail
        least = min(itertools.chain((int(self._chunks[0].offsets[self._skip:].min()),),
                                    (c.least for c in itertools.islice(self._chunks, 1, None)),
                                    (o for o, _ in tail)))
        own = PendingSnapshot(self._skip, [c.packed for c in self._chunks], tail, least)
        return join(own, then)

    @classmethod
    def of(cls, pairs: Iterable[Pair], chunk: int | None = None) -> Listed:
        """A list read back (a restart's pending items) in the form a checkpoint lists."""
        live = cls(chunk)
        for pair in pairs:
            live.append(pair)
        return live.snapshot()
