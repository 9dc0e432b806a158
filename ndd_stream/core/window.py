"""The sliding window of one comparison scope: hours H-w..H of event time.

Documents are numbered in arrival order. Their postings live in one
:class:`PostingIndex`; an hour leaves the window when the scope's watermark (the
latest hour seen) moves more than ``w`` hours past it, and the expired documents at
the front of the arrival order are released with their postings in one step.
Expiry follows event time only; the wall clock plays no part.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ndd_stream.core.document import Decision
from ndd_stream.core.order import OrderVersion
from ndd_stream.core.postings import PostingIndex


@dataclass(slots=True)
class WindowDoc:
    """What verification and explanation need of an indexed document."""

    identity: str
    channel: str
    timestamp: float
    hour: int
    size: int  # |signature|
    version: int  # order version of its indexed prefix
    nf: str  # normal form, to recompute the signature on verification
    first_posting: int


@dataclass(slots=True)
class ShortDoc:
    identity: str
    channel: str
    timestamp: float


class ScopeWindow:
    """Index, documents, short texts and decisions of one scope, by hour."""

    def __init__(self, scope: str, hours_back: int) -> None:
        self.scope = scope
        self.hours_back = hours_back
        self.index = PostingIndex()
        self.docs: list[WindowDoc] = []
        self.doc_base = 0  # number of docs[0]
        self._starts = np.zeros(256, dtype=np.int64)  # first posting of each retained doc
        # shared prefix keys that any true match of each retained doc must have (count filter)
        self._guaranteed = np.zeros(256, dtype=np.int64)
        self.watermark: int | None = None
        self.versions: Counter[int] = Counter()
        self.version_objects: dict[int, OrderVersion] = {}
        self.decisions: dict[str, Decision] = {}
        self._identities_by_hour: dict[int, list[str]] = {}
        self.short_by_hour: dict[int, dict[str, ShortDoc]] = {}
        self.next_number = 0  # arrival number of the next document (indexed or not)

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
        self._release_expired_front(oldest)
        return expired

    def _release_expired_front(self, oldest: int) -> None:
        drop = 0
        for doc in self.docs:
            if doc.hour >= oldest:
                break
            self.versions[doc.version] -= 1
            if self.versions[doc.version] <= 0:
                del self.versions[doc.version]
                self.version_objects.pop(doc.version, None)
            drop += 1
        if not drop:
            return
        del self.docs[:drop]
        self._starts = self._starts[drop:].copy()
        self._guaranteed = self._guaranteed[drop:].copy()
        self.doc_base += drop
        release_to = self.docs[0].first_posting if self.docs else self.index.end
        self.index.release_before(release_to)

    # -- documents ----------------------------------------------------------------------

    def remember(self, decision: Decision, hour: int) -> None:
        self.decisions[decision.identity] = decision
        self._identities_by_hour.setdefault(hour, []).append(decision.identity)

    def add(
        self,
        doc: WindowDoc,
        keys: npt.NDArray[np.uint32],
        version: OrderVersion,
        guaranteed: int = 1,
    ) -> None:
        """Index ``doc`` under its prefix ``keys``; ``guaranteed`` is how many of them any
        document matching it is sure to share (see Detector._best_match)."""
        doc.first_posting = self.index.add(keys)
        n = len(self.docs)
        if n >= self._starts.size:
            self._starts = np.resize(self._starts, 2 * n + 16)
            self._guaranteed = np.resize(self._guaranteed, self._starts.size)
        self._starts[n] = doc.first_posting
        self._guaranteed[n] = guaranteed
        self.docs.append(doc)
        self.versions[version.number] += 1
        self.version_objects[version.number] = version

    def docs_of_postings(self, postings: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Positions in ``docs`` of the documents owning these posting numbers (distinct)."""
        n = len(self.docs)
        if postings.size == 0 or n == 0:
            return np.zeros(0, dtype=np.int64)
        pos = np.searchsorted(self._starts[:n], postings, side="right") - 1
        return np.unique(pos[pos >= 0])

    def shared_counts(
        self, postings: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Positions in ``docs`` owning these postings (ascending, distinct), how many of the
        postings each owns, and each one's guaranteed share (as given to :meth:`add`)."""
        n = len(self.docs)
        if postings.size == 0 or n == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        pos = np.searchsorted(self._starts[:n], postings, side="right") - 1
        counts = np.bincount(pos[pos >= 0], minlength=n)
        owners = np.flatnonzero(counts)
        return owners, counts[owners], self._guaranteed[owners]

    def live_versions(self) -> list[OrderVersion]:
        return [self.version_objects[v] for v in sorted(self.versions)]

    @property
    def document_count(self) -> int:
        return len(self.docs)

    def hours_span(self) -> int:
        if not self.docs or self.watermark is None:
            return 0
        return self.watermark - self.docs[0].hour + 1
