"""The sliding window of one comparison scope: hours H-w..H of event time.

Indexed documents are numbered in arrival order (``docs[i]`` is number ``doc_base + i``)
and their keys live in one index under that number (the C :class:`FlatIndex` where the
kernels are built, else the numpy :class:`PostingIndex`); an hour leaves
the window when the scope's watermark (the latest hour seen) moves more than ``w`` hours
past it, and the expired documents at the front of the arrival order are released with
their postings in one step.
Expiry follows event time only; the wall clock plays no part.
"""

from __future__ import annotations

import bisect
import os
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ndd_stream.core import kernels
from ndd_stream.core.bitmaps import Bitmap, BitmapFilter
from ndd_stream.core.document import Decision, Policy, Status
from ndd_stream.core.engine import FlatIndex
from ndd_stream.core.kernels import Facts
from ndd_stream.core.order import FrequencyBook, OrderVersion
from ndd_stream.core.postings import PostingIndex
from ndd_stream.core.qgrams import Codes
from ndd_stream.core.stories import StoryBook


@dataclass(slots=True)
class WindowDoc:
    """What verification and explanation need of an indexed document."""

    identity: str
    channel: str
    timestamp: float
    hour: int
    size: int  # |signature|
    version: int  # order version of its indexed prefix (-1: none, the flat index)
    # normal form, for the novelty rule on a match and to recompute the signature on
    # verification; held packed (see _pack_text), read as a str
    nf: str
    # its figures (core.novelty.figures), None when unknown (a state record of layout v1)
    figures: str | None = None
    number: int = -1  # arrival number in its scope (ties across shards go to the lowest)


# The normal form is most of a window document's Python bytes and is read only for a
# match: held packed (an ASCII text five bits a letter, in C), unpacked when read. Text
# that is not ASCII, or a process without the kernels, keeps the str.
_PACK = getattr(kernels._C, "pack_text", None)
_UNPACK = getattr(kernels._C, "unpack_text", None)  # bound now: tests may switch _C off
_NF_SLOT: Any = WindowDoc.__dict__["nf"]  # the slot behind the property


def _get_nf(doc: WindowDoc) -> str:
    held = _NF_SLOT.__get__(doc, WindowDoc)
    if isinstance(held, str):
        return held
    if isinstance(held, tuple):  # spilled: (TextSpill, its reference)
        spill, ref = held
        data = spill.read(ref)
        return data.decode("utf-8", "surrogatepass") if ref & 1 else str(_UNPACK(data))  # type: ignore[misc]
    return str(_UNPACK(held))  # type: ignore[misc]


def _set_nf(doc: WindowDoc, nf: str) -> None:
    packed = _PACK(nf) if _PACK is not None and kernels.running() and len(nf) > 16 else None
    _NF_SLOT.__set__(doc, nf if packed is None else packed)


setattr(WindowDoc, "nf", property(_get_nf, _set_nf))  # noqa: B010 (not a mypy-visible field)


def held_text_bytes(doc: WindowDoc) -> int:
    """The bytes ``doc`` holds in memory for its normal form (packed, spilled or not), for
    memory figures."""
    held = _NF_SLOT.__get__(doc, WindowDoc)
    return sys.getsizeof(held) + (sys.getsizeof(held[1]) if isinstance(held, tuple) else 0)


SPILL_AFTER = 1024
"""A window spills its texts (:class:`TextSpill`) once it holds this many documents: a
small window (a scope of a few items) keeps them in memory and opens no file."""


class TextSpill:
    """The normal forms of a window's documents out of memory, for an index that never
    reads them (the flat index below t = 0.5 counts exactly): appended to anonymous scratch
    files, each document's read back (``os.pread``) only when a decision reads its text (the
    novelty rule on a match, ``keep="complete"``). A document holds a 2-tuple and an int
    (~90 bytes) instead of its packed text (~5/8 of its normal form's length).

    Files are segments of :data:`SEGMENT_BYTES`, closed (and so deleted) once every document
    in them has left the window; appends are buffered and written in :data:`BUFFER_BYTES`
    steps. A reference is ``offset << 33 | length << 1 | utf8``: the text's bytes at that
    offset of the spill, packed (``kernels._C.pack_text``) or, flagged, UTF-8."""

    SEGMENT_BYTES = 64 << 20
    BUFFER_BYTES = 1 << 20

    def __init__(self) -> None:
        self._starts: list[int] = []  # the spill offset of each open segment's first byte
        self._files: list[Any] = []  # its file
        self._last: list[int] = []  # the highest document number written to it
        self._buffer = bytearray()  # appended, not written yet: the spill's last bytes
        self._written = 0  # spill offset where the buffer starts
        self.end = 0  # the spill's size
        self.failed = False  # a write failed: what was not written stays in the buffer

    @staticmethod
    def open() -> TextSpill | None:
        """A spill, or None where no scratch file can be created (texts stay in memory)."""
        spill = TextSpill()
        try:
            spill._segment()
        except OSError:
            return None
        return spill

    def _segment(self) -> None:
        import tempfile  # here: not an import every process pays

        self._flush()
        self._files.append(tempfile.TemporaryFile(prefix="ndd-texts-"))  # noqa: SIM115 (kept open)
        self._starts.append(self.end)
        self._last.append(-1)

    def _flush(self) -> None:
        """Write the buffer out; on an error (a full disk) keep what is left of it in
        memory, readable, and mark the spill ``failed``."""
        if not self._buffer or self.failed:
            return
        fd = self._files[-1].fileno()
        offset = self._written - self._starts[-1]
        data = memoryview(bytes(self._buffer))
        done = 0
        try:
            while done < len(data):
                done += os.pwrite(fd, data[done:], offset + done)
        except OSError:
            self.failed = True
        del self._buffer[:done]
        self._written += done

    def write(self, data: bytes, number: int, utf8: bool = False) -> int:
        """Append the text ``data`` of document ``number``; its reference."""
        if not self.failed and self.end - self._starts[-1] >= self.SEGMENT_BYTES:
            try:
                self._segment()
            except OSError:
                self.failed = True
        ref = self.end << 33 | len(data) << 1 | utf8
        self._buffer += data
        self.end += len(data)
        self._last[-1] = number
        if len(self._buffer) >= self.BUFFER_BYTES:
            self._flush()
        return ref

    def read(self, ref: int) -> bytes:
        """The text of reference ``ref`` (its segment still open)."""
        offset, size = ref >> 33, (ref >> 1) & 0xFFFFFFFF
        if offset >= self._written:
            start = offset - self._written
            return bytes(self._buffer[start:start + size])
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            raise LookupError("a spilled text whose segment was released")
        data = os.pread(self._files[i].fileno(), size, offset - self._starts[i])
        if len(data) != size:
            raise OSError(f"short read of a spilled text: {len(data)} of {size} bytes")
        return data

    def release_before(self, number: int) -> None:
        """Close the segments (but the last) whose documents all number below ``number``."""
        while len(self._files) > 1 and self._last[0] < number:
            self._files.pop(0).close()
            del self._starts[0], self._last[0]

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files.clear()


@dataclass(slots=True)
class ShortDoc:
    identity: str
    channel: str
    timestamp: float
    number: int = -1  # arrival number in its scope


class ScopeWindow:
    """Index, documents, short texts and decisions of one scope, by hour."""

    def __init__(self, scope: str, hours_back: int, bitmap_bits: int = 0,
                 index: PostingIndex | FlatIndex | None = None) -> None:
        self.scope = scope
        self.hours_back = hours_back
        self.index: PostingIndex | FlatIndex = index if index is not None else PostingIndex()
        # the flat index counts exactly (or verifies) in one call: no bitmap filter
        flat = isinstance(self.index, FlatIndex)
        self.bitmaps = BitmapFilter(bitmap_bits) if bitmap_bits and not flat else None
        self.docs: list[WindowDoc] = []
        self.doc_base = 0  # number of docs[0], in the index's numbering
        # Per retained doc, what the count filter reads (column i: docs[i])
        self.facts = Facts()
        self.watermark: int | None = None
        self.versions: Counter[int] = Counter()
        self.version_objects: dict[int, OrderVersion] = {}
        # identity -> its decision; a plain unique one (a story of its own, nothing else to
        # say) as its window document instead: see :meth:`decision`
        self.decisions: dict[str, Decision | WindowDoc] = {}
        self._identities_by_hour: dict[int, list[str]] = {}
        self.short_by_hour: dict[int, dict[str, ShortDoc]] = {}
        self.next_number = 0  # arrival number of the next document (indexed or not)
        self.stories = StoryBook()  # the stories of the remembered decisions
        # the texts of the flat index's documents below t = 0.5, out of memory (None: not
        # opened yet; False: none can be)
        self._spill: TextSpill | Literal[False] | None = None

    # -- time ---------------------------------------------------------------------------

    def oldest_live_hour(self) -> int | None:
        return None if self.watermark is None else self.watermark - self.hours_back

    def is_late(self, hour: int) -> bool:
        """True when even the item's own hour has left the window."""
        oldest = self.oldest_live_hour()
        return oldest is not None and hour < oldest

    def hour_object(self, hour: int) -> int:
        """``hour``, as the watermark's int object when equal: the window's documents and
        decisions then share one object an hour rather than one each."""
        watermark = self.watermark
        return watermark if watermark is not None and watermark == hour else hour

    def advance(self, hour: int) -> list[int]:
        """Move the watermark to ``hour`` if later; return the hours that expired."""
        if self.watermark is not None and hour <= self.watermark:
            return []
        self.watermark = hour
        oldest = hour - self.hours_back
        expired = sorted(
            h for h in set(self._identities_by_hour) | set(self.short_by_hour) if h < oldest
        )
        for h in expired:
            for identity in self._identities_by_hour.pop(h, ()):
                self.decisions.pop(identity, None)
            self.short_by_hour.pop(h, None)
        self.stories.expire(expired)
        self._release_expired_front(oldest)
        return expired

    def _release_expired_front(self, oldest: int) -> None:
        drop = 0
        for doc in self.docs:
            if doc.hour >= oldest:
                break
            drop += 1
            if doc.version < 0:  # the flat index: no order versions
                continue
            self.versions[doc.version] -= 1
            if self.versions[doc.version] <= 0:
                del self.versions[doc.version]
                self.version_objects.pop(doc.version, None)
        if not drop:
            return
        del self.docs[:drop]
        if not isinstance(self.index, FlatIndex):
            self.facts.drop_front(drop)
        self.doc_base += drop
        self.index.release_before(self.doc_base)
        if self._spill:
            self._spill.release_before(self.doc_base)
        if self.bitmaps is not None:
            self.bitmaps.release_before(self.doc_base)

    # -- documents ----------------------------------------------------------------------

    def remember(self, decision: Decision, hour: int) -> None:
        """Keep ``decision`` for a replay of its identity (:meth:`decision`). Most are
        plain unique ones, the window document just indexed says all of them: that is
        kept instead (a decision is ~150 bytes a window document)."""
        held: Decision | WindowDoc = decision
        if (decision.status is Status.UNIQUE and decision.story_size == 1
                and decision.policy is Policy.NONE and decision.novel is None
                and decision.supersedes is None and not decision.replayed
                and decision.similarity == 0.0 and decision.story == decision.identity
                and decision.scope == self.scope and self.docs):
            last = self.docs[-1]
            if (last.identity == decision.identity and last.hour == decision.hour
                    and decision.story_channels == (last.channel,)):
                held = last
        self.decisions[decision.identity] = held
        self._identities_by_hour.setdefault(hour, []).append(decision.identity)

    def decision(self, identity: str) -> Decision | None:
        """The decision remembered for ``identity`` (None: none in the window)."""
        held = self.decisions.get(identity)
        if held is None or isinstance(held, Decision):
            return held
        return Decision(held.identity, Status.UNIQUE, 0.0, scope=self.scope, hour=held.hour,
                        story=held.identity, story_size=1, story_channels=(held.channel,))

    def add(
        self,
        doc: WindowDoc,
        keys: npt.NDArray[np.uint32],
        version: OrderVersion,
        needed: int,
        unindexed: int,
        bitmap: Bitmap | None = None,
    ) -> None:
        """Index ``doc`` under its prefix ``keys`` (ascending, distinct); ``needed`` is the
        overlap any match of it must reach, ``unindexed`` how many of its q-grams are not
        in the prefix (see :meth:`candidates`); ``bitmap`` is its bitmap-filter bitmap
        (required when the window has a bitmap filter)."""
        n = len(self.docs)
        assert isinstance(self.index, PostingIndex)
        number = self.index.add(keys, ascending=True)
        assert number == self.doc_base + n, "index and window numbering diverged"
        if self.bitmaps is not None:
            assert bitmap is not None, "a window with a bitmap filter needs every bitmap"
            self.bitmaps.add(number, bitmap, doc.size)
        self.facts.append(needed, unindexed, doc.hour, doc.size)
        doc.channel = sys.intern(doc.channel)  # one str a channel, not one a document
        self.docs.append(doc)
        self.versions[version.number] += 1
        self.version_objects[version.number] = version

    def add_flat(self, doc: WindowDoc, mixed: Codes, sig: Codes, needed: int, length: int,
                 book: FrequencyBook | None) -> None:
        """Index ``doc`` in the flat index: its signature ``sig`` and fmix64 of it,
        ``mixed``, under every code in full mode, else under its extended prefix of
        ``length`` codes in ``book``'s current order, then counted into ``book`` (see
        :meth:`FlatIndex.add_ordered`)."""
        assert isinstance(self.index, FlatIndex)
        held = _NF_SLOT.__get__(doc, WindowDoc)  # packed: the index verifies from it
        number = self.index.add_ordered(mixed, sig, doc.hour, needed, length,
                                        None if book is None else book.current, book,
                                        held if isinstance(held, bytes) else None)
        assert number == self.doc_base + len(self.docs), "index and window numbering diverged"
        if self.index.full and len(self.docs) >= SPILL_AFTER:  # the index never reads texts
            self._spill_text(doc, held, number)
        doc.channel = sys.intern(doc.channel)  # one str a channel, not one a document
        self.docs.append(doc)

    def _spill_text(self, doc: WindowDoc, held: Any, number: int) -> None:
        if self._spill is None:
            self._spill = TextSpill.open() or False
        if self._spill is False or self._spill.failed:  # texts stay in memory
            return
        if isinstance(held, bytes):
            ref = self._spill.write(held, number)
        elif len(held) > 64:
            ref = self._spill.write(held.encode("utf-8", "surrogatepass"), number, utf8=True)
        else:
            return
        _NF_SLOT.__set__(doc, (self._spill, ref))

    def candidates(
        self,
        keys: npt.NDArray[np.uint32],
        slack: int,
        needed: int,
        unindexed: int,
        hours: tuple[int, int],
        sizes: tuple[int, int],
    ) -> npt.NDArray[np.int64]:
        """Positions in ``docs`` (ascending) of the documents that pass the count filter
        against a query whose prefix has the 32-bit ``keys`` (sorted, distinct; ``slack``
        of its q-grams folded onto a key already there), that needs an overlap of
        ``needed`` and leaves ``unindexed`` q-grams out of its prefix, and whose hour and
        |signature| lie in the inclusive ranges ``hours`` and ``sizes``.

        Why the count bound is exact: a match B of A shares o = max(needed_A, needed_B)
        q-grams (doc_q's denominator is the larger set). Under one total order the shared
        q-grams missing from A's prefix are the last of them, at most unindexed_A, and
        likewise for B; so at least o - max(unindexed_A, unindexed_B) lie in both
        prefixes, and as many keys but for ``slack``. Using the pair's o rather than each
        side's own is what lets full prefixes (t < 0.5) drop every pair whose overlap
        falls short of the larger document's need: on templated newswire that was ~23
        exact verifications per decision."""
        n = len(self.docs)
        if keys.size == 0 or n == 0:
            return np.zeros(0, dtype=np.int64)
        assert isinstance(self.index, PostingIndex)
        return self.index.candidates(keys, self.doc_base, n, self.facts, slack, needed,
                                     unindexed, hours, sizes)

    def live_versions(self) -> list[OrderVersion]:
        return [self.version_objects[v] for v in sorted(self.versions)]

    @property
    def document_count(self) -> int:
        return len(self.docs)

    def hours_span(self) -> int:
        if not self.docs or self.watermark is None:
            return 0
        return self.watermark - self.docs[0].hour + 1
