"""The flat streaming index of one scope window, in C (``_engine.c``): one call per decision.

A hash table from each indexed q-gram (its 64-bit mixed code, exact) to an append-only
posting list of document numbers in arrival order, trimmed at the head as hours expire.
Below ``FULL_PREFIX_BELOW`` every q-gram is indexed, so counting a query's postings gives
|A ∩ B| of every window document exactly and the decision is a pass over the counts;
from it up, documents are indexed under their extended prefix, the query probes with its
whole signature (no order versions at probe time) and the survivors of the exact count
bound are verified, best upper bound first, stopping once none left can beat the best
match: from the document's packed normal form (held by reference) where it is lower-case
letters and digits, else from the codes of its signature outside its prefix, kept. The
GIL is released during the call. Where the kernels are not built the window keeps its LSM index
(:mod:`ndd_stream.core.postings`) instead: the same decisions, slower.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ndd_stream.core import kernels
from ndd_stream.core.order import FrequencyBook, OrderVersion
from ndd_stream.core.qgrams import Codes
from ndd_stream.core.similarity import FULL_PREFIX_BELOW


class EngineMatch(NamedTuple):
    """The outcome of :meth:`FlatIndex.best`: the C ``Match`` it returns has these fields,
    by name and by position."""

    number: int  # the best match's document number, -1 when none reaches the threshold
    shared: int  # |A ∩ B| with it
    candidates: int  # documents that passed the count filter
    verified: int  # of those, verified on their texts or stored codes (prefix mode)
    postings: int  # postings read


def available() -> bool:
    """Whether the C engine can be used in this process."""
    return kernels.running() and hasattr(kernels._C, "Engine")


class FlatIndex:
    """Document numbers from 0 in :meth:`add` order; ``release_before`` expires a front."""

    def __init__(self, threshold: float,
                 dense_fraction: float = kernels.DEFAULT_DENSE_FRACTION, q: int = 4,
                 ahead: bool = False) -> None:
        """``dense_fraction``: a q-gram held by at least this share of the window's
        documents (and 1/32 at least in prefix mode, where a row is at most twice its
        list there) is also counted as a bitmap row (0: never). Speed and memory only. ``q``: the
        signatures' q (at 4 a document's packed normal form can stand for its codes).
        ``ahead``: :meth:`add_ordered` runs on the engine thread, as :meth:`submit` does
        (returning at once), for a caller that overlaps them with its own work. One engine
        thread serves every index of the process, their jobs in the order given."""
        if not available():
            raise RuntimeError("the C engine is not built (ndd_stream.core.kernels)")
        self.threshold = threshold
        self.full = threshold < FULL_PREFIX_BELOW
        self.q = q
        self._c = kernels._C.Engine(threshold, self.full, dense_fraction)  # type: ignore[attr-defined]
        self.ahead = ahead

    def add(self, keys: Codes, sig: Codes, hour: int, needed: int, unindexed: int) -> int:
        """Index the next document under ``keys`` (its distinct mixed codes: all of them in
        full mode, its extended prefix otherwise), with its sorted signature ``sig``, hour,
        the overlap its matches need and how many of its q-grams ``keys`` leaves out;
        returns its number."""
        return int(self._c.add(np.ascontiguousarray(keys, dtype=np.uint64),
                               None if self.full else np.ascontiguousarray(sig, dtype=np.uint64),
                               hour, int(sig.size), needed, unindexed))

    def add_ordered(self, mixed: Codes, sig: Codes, hour: int, needed: int, length: int,
                    order: OrderVersion | None, book: FrequencyBook | None,
                    text: bytes | None = None) -> int:
        """:meth:`add` with the indexing and the order's upkeep in one call: ``mixed`` is
        fmix64 of the sorted signature ``sig``; in full mode every code is indexed, else
        the extended prefix of ``length`` codes under ``order`` (what
        :meth:`OrderVersion.prefix` selects), keeping only the signature's codes outside
        it (a lookup's count is the overlap on the prefix), and the codes are then counted
        into ``book`` (which may freeze a new order version). ``text``: the document's normal
        form as ``kernels._C.pack_text`` packed it; in prefix mode, when it is lower-case
        letters and digits, the index holds it (a reference) and verifies from it instead of
        keeping the codes outside the prefix. Returns the number."""
        classes = None if order is None else order.classes
        shift = order.shift if order is not None else book.shift if book is not None else 42
        add = self._c.add_ahead if self.ahead else self._c.add_ordered
        number = int(add(
            np.ascontiguousarray(mixed, dtype=np.uint64),
            np.ascontiguousarray(sig, dtype=np.uint64), hour, needed, length, classes, shift,
            None if book is None else book.counts,
            text if self.q == 4 and not self.full else None))
        if book is not None:
            if self.ahead and book.snapshot_due:
                self._c.settle()  # the new version reads the counts the thread updates
            book.tally()
        return number

    def best(self, keys: Codes, sig: Codes, needed: int, unindexed: int,
             hours: tuple[int, int], sizes: tuple[int, int]) -> EngineMatch:
        """The best match of a query with signature ``sig`` (``needed``: min_overlap(|sig|,
        t)) among the live documents whose hour and size lie in the inclusive ranges: the
        highest doc_q >= threshold, ties to the lowest number. ``keys``: the query's mixed
        codes looked up, leaving ``unindexed`` of its q-grams out (0: all of them, which
        keeps prefix-mode counts independent of the order each document was indexed
        under; in prefix mode it must be 0: the count is then a document's overlap on its
        prefix, to which verification adds its stored suffix's, or from which a held text
        verifies the whole overlap)."""
        hi = sizes[1] if sizes[1] < 2**62 else 2**62
        # the C Match as it comes: an EngineMatch built from it took ~1 µs a call
        return self._c.best(np.ascontiguousarray(keys, dtype=np.uint64),
                            np.ascontiguousarray(sig, dtype=np.uint64), needed, unindexed,
                            hours[0], hours[1], sizes[0], hi)

    def submit(self, keys: Codes, sig: Codes, needed: int, unindexed: int,
               hours: tuple[int, int], sizes: tuple[int, int]) -> None:
        """Start :meth:`best` on the engine thread and return at once; :meth:`collect`
        returns its match. The lookup holds no GIL, so the caller's Python work overlaps
        it; any other call of this index first waits for it to end."""
        hi = sizes[1] if sizes[1] < 2**62 else 2**62
        self._c.submit(np.ascontiguousarray(keys, dtype=np.uint64),
                       np.ascontiguousarray(sig, dtype=np.uint64), needed, unindexed,
                       hours[0], hours[1], sizes[0], hi)

    def collect(self) -> EngineMatch:
        """The match of the lookup :meth:`submit` started (waiting for it to end)."""
        return self._c.collect()

    def release_before(self, number: int) -> None:
        """Forget the documents numbered below ``number``."""
        self._c.release_before(number)

    def settle(self) -> None:
        """Wait for the jobs this index gave the engine thread (its indexing) to end."""
        self._c.settle()

    # The LSM index's housekeeping calls, nothing to do here.
    def prepare(self) -> None:
        """Nothing to prepare: the table is ready after every add."""

    def get_ready(self) -> None:
        """No count threads to wake."""

    @property
    def prepared(self) -> bool:
        """Always ready for a lookup."""
        return True

    @property
    def nbytes(self) -> int:
        return int(self._c.nbytes)

    @property
    def postings(self) -> int:
        return int(self._c.postings)

    def __len__(self) -> int:
        return self.postings
