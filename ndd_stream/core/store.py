"""Where the detector's state is persisted: a small interface and a store that keeps nothing.

The detector keeps its working index in memory and appends one
:class:`StoredDocument` per decision to a store. After a restart the index is rebuilt
by replaying the store (``Detector.restore``). Stores drop whole hours when the
window moves past them. The rocksdict implementation lives outside the core, in
``ndd_stream.state``; it and the in-memory reference of the tests pass the same suite
(tests/test_store_contract.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from ndd_stream.core.document import Decision, value_record


@value_record
class StoredDocument:
    """One decided item as persisted. ``nf`` (and ``figures``) are empty when the item was
    not indexed."""

    scope: str
    number: int  # arrival number within the scope
    hour: int
    channel: str
    timestamp: float
    nf: str
    indexed: bool
    decision: Decision
    # the figures of an indexed item (core.novelty.figures); None: not known (layout v1)
    figures: str | None = None


class StateStore(Protocol):
    """Append-only log of decided documents, grouped by (scope, hour)."""

    def add(self, doc: StoredDocument) -> None:
        """Record a decided document (visible to ``load`` after ``commit``)."""

    def drop_hour(self, scope: str, hour: int) -> None:
        """Forget every document of ``scope`` in ``hour`` (the hour left the window)."""

    def load(self) -> Iterator[StoredDocument]:
        """Every retained document, ordered by scope then arrival number."""

    def commit(self) -> None:
        """Make everything added so far durable (a worker's store writes the position it
        reflects in the same write: ``state.rocks.RocksStore.commit``)."""

    def close(self) -> None:
        """Release resources; uncommitted additions are lost."""


class NullStore:
    """Persists nothing: for offline runs (``ndd-stream dedup``) whose memory must stay
    bounded by the window, not by the input."""

    def add(self, doc: StoredDocument) -> None:
        return None

    def drop_hour(self, scope: str, hour: int) -> None:
        return None

    def load(self) -> Iterator[StoredDocument]:
        return iter(())

    def commit(self) -> None:
        return None

    def close(self) -> None:
        return None
