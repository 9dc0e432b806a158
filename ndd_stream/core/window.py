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

import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ndd_stream.core import kernels
from ndd_stream.core.bitmaps import Bitmap, BitmapFilter
from ndd_stream.core.document import Decision
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
    return held if isinstance(held, str) else str(_UNPACK(held))  # type: ignore[misc]


def _set_nf(doc: WindowDoc, nf: str) -> None:
    packed = _PACK(nf) if _PACK is not None and kernels.running() and len(nf) > 16 else None
    _NF_SLOT.__set__(doc, nf if packed is None else packed)


setattr(WindowDoc, "nf", property(_get_nf, _set_nf))  # noqa: B010 (not a mypy-visible field)


def held_text_bytes(doc: WindowDoc) -> int:
    """The bytes ``doc`` holds for its normal form (packed or not), for memory figures."""
    return sys.getsizeof(_NF_SLOT.__get__(doc, WindowDoc))


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
        self.decisions: dict[str, Decision] = {}
        self._identities_by_hour: dict[int, list[str]] = {}
        self.short_by_hour: dict[int, dict[str, ShortDoc]] = {}
        self.next_number = 0  # arrival number of the next document (indexed or not)
        self.stories = StoryBook()  # the stories of the remembered decisions

    # -- time ---------------------------------------------------------------------------

    def oldest_live_hour(self) -> int | None:
        return None if self.watermark is None else self.watermark - self.hours_back

    def is_late(self, hour: int) -> bool:
        """True when even the item's own hour has left the window."""
        oldest = self.oldest_live_hour()
        return oldest is not None and hour < oldest

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
        if self.bitmaps is not None:
            self.bitmaps.release_before(self.doc_base)

    # -- documents ----------------------------------------------------------------------

    def remember(self, decision: Decision, hour: int) -> None:
        self.decisions[decision.identity] = decision
        self._identities_by_hour.setdefault(hour, []).append(decision.identity)

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
        self.docs.append(doc)

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
