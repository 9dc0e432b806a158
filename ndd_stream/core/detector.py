"""The DDD detector (Fig. 2, §3.6) with exact candidate pruning.

For each document, in arrival order: compute its signature, find every earlier
document of its scope and window with doc_q >= threshold, report the best one
(highest doc_q, ties to the earliest arrival), then index the document. Pruning
never changes a decision (tests compare against brute force):

* prefix filtering: a pair with doc_q >= t shares a q-gram among the first
  ``prefix_length(|X|, t)`` q-grams of each side under a common total order
  (:mod:`ndd_stream.core.order`), so only prefixes are indexed and probed;
* the length filter of :func:`size_bounds`;
* verification computes |A ∩ B| exactly on the 64-bit codes.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from ndd_stream.core.bitmaps import Bitmap, auto_bits
from ndd_stream.core.document import Decision, Document, Policy, Status
from ndd_stream.core.engine import EngineMatch, FlatIndex
from ndd_stream.core.engine import available as engine_available
from ndd_stream.core.kernels import DEFAULT_DENSE_FRACTION, available_cores, probe_keys
from ndd_stream.core.normalize import normal_form
from ndd_stream.core.novelty import figures as figures_of
from ndd_stream.core.order import (
    EARLY_SNAPSHOTS_AT,
    SNAPSHOTS_AT,
    FrequencyBook,
    OrderVersion,
)
from ndd_stream.core.postings import PostingIndex
from ndd_stream.core.qgrams import Codes, fmix64, signature, signed, sorted_unique
from ndd_stream.core.similarity import (
    FULL_PREFIX_BELOW,
    extended_prefix,
    intersection_size,
    min_overlap,
    size_bounds,
)
from ndd_stream.core.store import NullStore, StateStore, StoredDocument
from ndd_stream.core.stories import KEEP_POLICIES, KeepPolicy, Kept, alone, place, supersedes
from ndd_stream.core.verdict import BestMatch, conclude, short_verdict, unique
from ndd_stream.core.window import ScopeWindow, ShortDoc, WindowDoc

SECONDS_PER_HOUR = 3600
DEFAULT_THRESHOLD = 0.3
"""Chosen by the evaluation (docs/EVALUATION.md): on the SpotSigs Gold Set, with main-content
extraction, DDD's pairwise F1 >= 0.92 and routing F1 >= 0.97 hold for thresholds 0.22-0.40;
0.3 is the middle of that plateau. On agency newswire (Reuters-21578) doc_q alone at 0.3 has
routing precision 0.32 (templated reports share most words); with the novelty rule
(``novelty``) the same 0.3 gives precision 0.94-0.99 and recall 0.90-0.95 on four labelled
sets, and P/R stay flat from 0.2 to 0.3, so one threshold serves both kinds of input."""


IndexKind = Literal["auto", "flat", "lsm"]
INDEX_KINDS: tuple[IndexKind, ...] = ("auto", "flat", "lsm")
"""The window's index (speed and memory only): the flat index (core.engine, C kernels) or
the LSM index (core.postings, the numpy fallback); "auto": the flat index wherever the C
kernels are built (measured against the LSM index in docs/BENCHMARK.md: faster at every
threshold and window size measured)."""

NoveltyMode = Literal["auto", "on", "off"]
NOVELTY_MODES: tuple[NoveltyMode, ...] = ("auto", "on", "off")
"""Measured (docs/EVALUATION.md): on Reuters newswire the rule lifts routing precision from
0.32 to 0.94-0.99; on crawled web pages (Gold Set) copies differ in the figures of their page
furniture (dates, times, counters) and in their site titles, so the rule would cost a
quarter of the recall there.
"auto" therefore applies it to plain-text items only."""
#: The bitmap filter's size range (log2 bits per document); 0 turns it off.
BITMAP_BITS_MIN = 6
BITMAP_BITS_MAX = 24


@dataclass(frozen=True)
class DetectorConfig:
    """Parameters of the detection itself (the service's Settings map onto these)."""

    q: int = 4
    threshold: float = DEFAULT_THRESHOLD
    window_hours: int = 24  # w: a document of hour H meets hours H-w .. H
    case_sensitive: bool = False
    index_duplicates: bool = True  # Fig. 2 indexes every document; False: unique ones only
    # The q-gram frequency sketch: 2**bits counters (4 MB) and, per order version, as many
    # class bytes. Speed only: 2**22 gave the same candidates on Reuters and at a 50k window
    # but, out of an 8 MB last-level cache, a cache miss per q-gram counted or ranked.
    order_bits: int = 20
    cache_signatures: int = 2048  # recently verified signatures kept in memory
    # Bitmap filter (ndd_stream.core.bitmaps): 2**bits bits per indexed document, 0 = off,
    # None = bitmaps.auto_bits(threshold) (14 from 0.5 up, else off).
    bitmap_bits: int | None = None
    # Judge the best match by ndd_stream.core.novelty (a templated report with other
    # figures is routed unique): "on", "off" (doc_q alone, as in the paper) or "auto":
    # on for plain-text items, off for HTML ones (Document.markup); see NOVELTY_MODES.
    novelty: NoveltyMode = "auto"
    # Threads one decision's index count may use (C kernels only); None = the cores this
    # process may run on (kernels.available_cores). Speed only: counts are the same.
    count_threads: int | None = None
    # A key held by at least this share of the window's documents is also a bitmap row,
    # counted by carry-save adders (C kernels only; 0 = never). Speed only.
    dense_fraction: float = DEFAULT_DENSE_FRACTION
    # Which version of a story a reader keeps (core.stories): "first" routes every near
    # duplicate to the duplicates; "complete" routes a more complete version unique, as
    # superseding the story's kept one.
    keep: KeepPolicy = "first"
    # The window's index (INDEX_KINDS); "flat" needs the C kernels (else the LSM index).
    index: IndexKind = "auto"

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if self.q < 1:
            raise ValueError(f"q must be >= 1, got {self.q}")
        if self.window_hours < 0:
            raise ValueError(f"window_hours must be >= 0, got {self.window_hours}")
        if self.novelty not in NOVELTY_MODES:
            raise ValueError(f"novelty must be one of {NOVELTY_MODES}, got {self.novelty!r}")
        if self.bitmap_bits is not None and self.bitmap_bits != 0 and not (
            BITMAP_BITS_MIN <= self.bitmap_bits <= BITMAP_BITS_MAX
        ):
            raise ValueError(f"bitmap_bits must be 0 or in {BITMAP_BITS_MIN}..{BITMAP_BITS_MAX}, "
                             f"got {self.bitmap_bits}")
        if self.count_threads is not None and self.count_threads < 1:
            raise ValueError(f"count_threads must be >= 1, got {self.count_threads}")
        if self.keep not in KEEP_POLICIES:
            raise ValueError(f"keep must be one of {KEEP_POLICIES}, got {self.keep!r}")
        if self.index not in INDEX_KINDS:
            raise ValueError(f"index must be one of {INDEX_KINDS}, got {self.index!r}")
        if not 0.0 <= self.dense_fraction <= 1.0:
            raise ValueError(f"dense_fraction must be in [0, 1], got {self.dense_fraction}")

    @property
    def flat_index(self) -> bool:
        """Whether windows use the flat index (``index``, and the C kernels built)."""
        return self.index != "lsm" and engine_available()

    @property
    def effective_bitmap_bits(self) -> int:
        """The bitmap filter's size in bits (log2) after resolving ``None``; 0 = off."""
        if self.bitmap_bits is None:
            return auto_bits(self.threshold)
        return self.bitmap_bits


def hour_of(timestamp: float) -> int:
    return math.floor(timestamp / SECONDS_PER_HOUR)


RESTORE_REUSE_BYTES = 64 << 20
"""A restore keeps the signatures of its first pass for the second, up to this size (a
signature costs about a third of a restore; a 50k window of 5 KB items would hold GBs)."""


class _Probe(NamedTuple):
    """What the probe computed of the deciding document, passed along to index it."""

    mixed: Codes  # fmix64 of sig
    prefixes: dict[int, Codes]  # its prefix under each live order version
    bitmap: Bitmap | None
    keys: npt.NDArray[np.uint32] | None  # its prefix keys when the same under every version


@dataclass(slots=True)
class Signed:
    """What deciding a document computes from the document alone (:meth:`Detector.sign`):
    its normal form, its facts for the novelty rule (None: the rule is off) and its
    signature with fmix64 of it (None: a normal form shorter than q)."""

    doc: Document
    nf: str
    figs: str | None
    codes: tuple[Codes, Codes] | None


@dataclass(slots=True)
class Begun:
    """A decision begun (:meth:`Detector.begin`): where and when, and how far it got: a
    replayed decision (final), a verdict reached without the index (late, empty, short),
    or a lookup, in flight (``pending``) or done (``best``)."""

    item: Signed
    window: ScopeWindow
    hour: int
    number: int = -1
    replayed: Decision | None = None
    verdict: Decision | None = None
    best: BestMatch | None = None
    probe: _Probe | None = None
    pending: bool = False


@dataclass
class DetectorStats:
    decided: int = 0
    candidates: int = 0  # passed the count filter
    bitmap_pruned: int = 0  # of those, ruled out by the bitmap filter
    verified: int = 0
    by_status: dict[str, int] = field(default_factory=dict)


class Detector:
    """Decides documents one at a time; state is per scope and persisted to a StateStore."""

    def __init__(
        self,
        config: DetectorConfig | None = None,
        store: StateStore | None = None,
        normalizer: Callable[[str], str] | None = None,
        lookup_thread: bool = False,
    ) -> None:
        """``lookup_thread``: the windows' flat indexes look documents up and index them on
        the engine thread (:meth:`begin`), one for every window of the process; for a
        caller that overlaps them with the next document's :meth:`sign`."""
        self.config = config or DetectorConfig()
        self._lookup_thread = lookup_thread
        self.store: StateStore = store if store is not None else NullStore()
        # a NullStore keeps nothing: no record to build (a subclass that keeps them gets them)
        self._persists = type(self.store) is not NullStore
        self._normal_form = normalizer or (
            lambda text: normal_form(text, case_sensitive=self.config.case_sensitive)
        )
        self._windows: dict[str, ScopeWindow] = {}
        self._book = FrequencyBook(bits=self.config.order_bits, snapshots_at=(
            EARLY_SNAPSHOTS_AT if self.config.flat_index else SNAPSHOTS_AT))
        self._cache: OrderedDict[tuple[str, int], Codes] = OrderedDict()
        self.stats = DetectorStats()

    # -- public API ---------------------------------------------------------------------

    @property
    def lookup_thread(self) -> bool:
        """Whether the windows' flat indexes look up and index on the engine thread."""
        return self._lookup_thread

    @lookup_thread.setter
    def lookup_thread(self, on: bool) -> None:
        """Between decisions (none begun and not finished): the windows' indexes and those
        made later use the engine thread, or look up in the caller's thread."""
        self._lookup_thread = on
        for window in self._windows.values():
            if isinstance(window.index, FlatIndex):
                window.index.ahead = on
                if not on:  # the order's counts, shared by every window, settled too
                    window.index.settle()

    def decide(self, doc: Document) -> Decision:
        """Decide one document and record it (the whole of Fig. 2 for one item)."""
        return self.finish(self.begin(self.sign(doc)))

    def sign(self, doc: Document) -> Signed:
        """What deciding ``doc`` computes from it alone; reads no window, so it may run
        while a lookup :meth:`begin` started for an earlier document is in flight."""
        nf = self._normal_form(doc.text)
        figs = figures_of(doc.text) if self.config.novelty != "off" else None
        return Signed(doc, nf, figs,
                      signed(nf, self.config.q) if len(nf) >= self.config.q else None)

    def begin(self, item: Signed) -> Begun:
        """Move the document's window to its hour and start its lookup. With the lookup
        thread the flat index looks up on the engine thread while the caller goes on
        (signing the next document, writing the last decision); :meth:`finish` must come
        before any other call that reads or changes a window."""
        doc = item.doc
        window = self._window(doc.scope)
        hour = hour_of(doc.timestamp)
        for expired in window.advance(hour):
            self.store.drop_hour(doc.scope, expired)
        hour = window.hour_object(hour)
        begun = Begun(item, window, hour)
        previous = window.decision(doc.identity)
        if previous is not None:
            begun.replayed = _replayed(previous)
            return begun
        begun.number = window.next_number
        window.next_number += 1
        if window.is_late(hour):
            begun.verdict = unique(doc, hour, Policy.LATE)
        elif not item.nf:
            begun.verdict = unique(doc, hour, Policy.EMPTY)
        elif item.codes is None:
            begun.verdict = short_verdict(doc, hour, self._short_match(window, hour, item.nf))
        else:
            sig, mixed = item.codes
            index = window.index
            if isinstance(index, FlatIndex) and index.ahead and window.docs:
                index.submit(mixed, sig, *self._flat_query(window, hour, int(sig.size)))
                begun.pending, begun.probe = True, _Probe(mixed, {}, None, None)
            else:
                begun.best, begun.probe = self._best_match(window, hour, sig, mixed)
        return begun

    def finish(self, begun: Begun) -> Decision:
        """The decision :meth:`begin` started, recorded: the document indexed, its story
        placed, the state stored."""
        if begun.replayed is not None:
            return begun.replayed
        item, window, hour, number = begun.item, begun.window, begun.hour, begun.number
        doc, nf, figs = item.doc, item.nf, item.figs
        sig = item.codes[0] if item.codes is not None else None
        if begun.pending:
            assert isinstance(window.index, FlatIndex)
            begun.pending = False
            begun.best = self._flat_found(window, window.index.collect())
        decision = begun.verdict
        # every document that gets a verdict here is indexed, whatever the verdict, when
        # duplicates are: indexed first, the engine thread's indexing overlaps the verdict
        early = decision is None and self.config.index_duplicates
        if early:
            assert sig is not None
            self._add_to_window(window, doc.identity, doc.channel, doc.timestamp, hour, nf,
                                sig, figs, begun.probe, number)
        if decision is None:
            assert sig is not None
            decision = conclude(self.config.novelty, doc, hour, figs, int(sig.size), begun.best)
        indexed = early or self._index(window, doc, hour, nf, sig, begun.probe, decision, figs,
                                       number)
        if decision.policy is not Policy.LATE:  # a late item is not in the window: not kept
            decision = place(decision, window.stories, doc.channel, hour)
            if self.config.keep == "complete" and sig is not None and indexed:
                decision = self._keep_complete(window, decision, int(sig.size), sig)
            window.remember(decision, hour)
        else:
            decision = alone(decision, doc.channel)
        if self._persists:
            self.store.add(
                StoredDocument(
                    scope=doc.scope,
                    number=number,
                    hour=hour,
                    channel=doc.channel,
                    timestamp=doc.timestamp,
                    nf=nf if indexed else "",
                    indexed=indexed,
                    decision=decision,
                    figures=figs if indexed else None,
                )
            )
        self._count(decision)
        return decision

    def restore(self) -> int:
        """Rebuild the in-memory window from the store (after a restart); returns documents.

        Replays the stored records in arrival order. Decisions are not recomputed: the
        stored ones are authoritative, so replayed items get their original decision.
        The q-gram order, where the index uses one, is relearned from the stored texts
        first (two passes), which only affects speed.
        """
        records = list(self.store.load())
        computed = self._learn_order(records)
        for i, rec in enumerate(records):
            window = self._window(rec.scope)
            for expired in window.advance(rec.hour):
                self.store.drop_hour(rec.scope, expired)
            window.next_number = max(window.next_number, rec.number + 1)
            if window.is_late(rec.hour):
                continue
            size = 0
            if rec.indexed:
                sig, probe = computed.pop(i, None) or (signature(rec.nf, self.config.q), None)
                size = int(sig.size)
                self._add_to_window(
                    window, rec.decision.identity, rec.channel, rec.timestamp, rec.hour, rec.nf,
                    sig, rec.figures, probe, number=rec.number,
                )
            # the story is the stored one; its tally is counted again, as when decided
            decision = place(rec.decision, window.stories, rec.channel, rec.hour)
            if self.config.keep == "complete" and size and (
                    decision.supersedes is not None or decision.story == decision.identity):
                window.stories.keep(decision.story, Kept(
                    decision.identity, window.doc_base + len(window.docs) - 1, size))
            window.remember(decision, rec.hour)
        for window in self._windows.values():
            window.index.prepare()  # now, not in the first decision after the restart
        return len(records)

    def _learn_order(self, records: list[StoredDocument]) -> dict[int, tuple[Codes, _Probe]]:
        """Relearn the q-gram order from the stored texts (a restore's first pass); what
        it computed of the records (by position), up to :data:`RESTORE_REUSE_BYTES`, to
        index them with instead of computing it twice."""
        kept: dict[int, tuple[Codes, _Probe]] = {}
        if self.config.flat_index and self.config.threshold < FULL_PREFIX_BELOW:
            return kept  # the flat index indexes every q-gram there: it needs no order
        budget = RESTORE_REUSE_BYTES
        for i, rec in enumerate(records):
            if rec.indexed:
                sig = signature(rec.nf, self.config.q)
                mixed = fmix64(sig)
                self._book.count(mixed)
                if budget > 0:
                    kept[i] = (sig, _Probe(mixed, {}, None, None))
                    budget -= sig.nbytes + mixed.nbytes
        if records:
            self._book.snapshot()
        return kept

    def windows(self) -> Iterator[ScopeWindow]:
        return iter(self._windows.values())

    def window_documents(self) -> int:
        # list(): one step under the GIL, as /health reads it while a decision thread adds
        return sum(w.document_count for w in list(self._windows.values()))

    # -- the decision -------------------------------------------------------------------

    def _best_match(
        self, window: ScopeWindow, hour: int, sig: Codes, mixed: Codes
    ) -> tuple[BestMatch | None, _Probe | None]:
        """(shared q-grams, document) of the best match or None, and the probe (None when
        the window is empty)."""
        if isinstance(window.index, FlatIndex):
            probe = _Probe(mixed, {}, None, None)
            if not window.docs:
                return None, probe
            found = window.index.best(mixed, sig, *self._flat_query(window, hour, int(sig.size)))
            return self._flat_found(window, found), probe
        t = self.config.threshold
        versions = window.live_versions()
        if not versions:
            return None, None
        window.index.get_ready()  # count threads wake while the probe is computed
        length = extended_prefix(sig.size, t)
        full = length >= sig.size  # the whole signature under every order version
        probes, keys, ncodes = _probe_keys(versions, mixed, length, full)
        bitmap = window.bitmaps.bitmap(mixed) if window.bitmaps is not None else None
        prefixes = ({v.number: mixed for v in versions} if full else
                    {v.number: p for v, p in zip(versions, probes, strict=True)})
        # The keys are the document's own prefix keys under any version when its prefix is
        # whole or only one version is live: indexing it reuses them instead of sorting again.
        probe = _Probe(mixed, prefixes, bitmap, keys if full or len(versions) == 1 else None)
        lo_size, hi_size = size_bounds(sig.size, t)
        # Hours below the watermark's window have expired even if, arriving out of order,
        # one of their documents still sits behind a newer one in the arrival order.
        lo_hour = hour - self.config.window_hours
        oldest = window.oldest_live_hour()
        if oldest is not None and oldest > lo_hour:
            lo_hour = oldest
        positions = window.candidates(
            keys, ncodes - int(keys.size), min_overlap(int(sig.size), t),
            int(sig.size) - length, (lo_hour, hour), (lo_size, hi_size),
        )
        self.stats.candidates += int(positions.size)
        if bitmap is not None and window.bitmaps is not None and positions.size:
            keep = window.bitmaps.may_match(positions + window.doc_base, bitmap, sig.size, t)
            self.stats.bitmap_pruned += int(positions.size - np.count_nonzero(keep))
            positions = positions[keep]
        best: BestMatch | None = None
        best_sim = -1.0
        for pos in positions.tolist():  # ascending = arrival order: ties keep the earliest
            cand = window.docs[pos]  # in the hour and size bounds: candidates applied them
            self.stats.verified += 1
            shared = intersection_size(sig, self._signature_of(window, pos))
            denom = max(sig.size, cand.size)
            sim = shared / denom
            if sim >= t and sim > best_sim:
                best, best_sim = (shared, cand), sim
        return best, probe

    def _flat_query(self, window: ScopeWindow, hour: int, size: int
                    ) -> tuple[int, int, tuple[int, int], tuple[int, int]]:
        """The flat index's lookup arguments after the query's codes: the overlap its
        matches need, 0 q-grams left out (the whole signature: prefix-mode counts need no
        order at probe time), the live hours and the sizes a match may have."""
        t = self.config.threshold
        lo_hour = hour - self.config.window_hours
        oldest = window.oldest_live_hour()
        if oldest is not None and oldest > lo_hour:
            lo_hour = oldest
        return min_overlap(size, t), 0, (lo_hour, hour), size_bounds(size, t)

    def _flat_found(self, window: ScopeWindow, found: EngineMatch) -> BestMatch | None:
        """(shared q-grams, document) of the flat index's match, or None."""
        self.stats.candidates += found.candidates
        self.stats.verified += found.verified
        if found.number < 0:
            return None
        return found.shared, window.docs[found.number - window.doc_base]

    def _short_match(self, window: ScopeWindow, hour: int, nf: str) -> ShortDoc | None:
        for h in range(hour - self.config.window_hours, hour + 1):
            found = window.short_by_hour.get(h, {}).get(nf)
            if found is not None:
                return found
        return None

    # -- indexing -----------------------------------------------------------------------

    def _index(
        self,
        window: ScopeWindow,
        doc: Document,
        hour: int,
        nf: str,
        sig: Codes | None,
        probe: _Probe | None,
        decision: Decision,
        figs: str | None,
        number: int,
    ) -> bool:
        if decision.policy in (Policy.LATE, Policy.EMPTY):
            return False
        if decision.is_duplicate and not self.config.index_duplicates:
            return False
        if sig is None:  # short text: indexed by its normal form
            window.short_by_hour.setdefault(hour, {}).setdefault(
                nf, ShortDoc(doc.identity, doc.channel, doc.timestamp, number)
            )
            return True
        self._add_to_window(window, doc.identity, doc.channel, doc.timestamp, hour, nf, sig, figs,
                            probe, number)
        return True

    def _add_to_window(
        self,
        window: ScopeWindow,
        identity: str,
        channel: str,
        timestamp: float,
        hour: int,
        nf: str,
        sig: Codes,
        figs: str | None = None,
        probe: _Probe | None = None,
        number: int = -1,
    ) -> None:
        """Index a document of signature ``sig`` and arrival ``number``; ``probe`` is what
        deciding it computed (None on restore)."""
        if sig.size == 0:  # short text on restore
            window.short_by_hour.setdefault(hour, {}).setdefault(
                nf, ShortDoc(identity, channel, timestamp, number)
            )
            return
        if isinstance(window.index, FlatIndex):
            self._add_flat(window, window.index, identity, channel, timestamp, hour, nf, sig,
                           figs, probe, number)
            return
        version: OrderVersion = self._book.current
        length = extended_prefix(sig.size, self.config.threshold)
        bitmap: Bitmap | None = None
        keys: npt.NDArray[np.uint32] | None = None
        if probe is not None:
            mixed = probe.mixed
            prefix = probe.prefixes.get(version.number)
            if prefix is None:
                prefix = version.prefix(mixed, length)
            else:
                keys = probe.keys
            bitmap = probe.bitmap
        else:
            mixed = fmix64(sig)
            prefix = version.prefix(mixed, length)
        if window.bitmaps is not None and bitmap is None:
            bitmap = window.bitmaps.bitmap(mixed)
        if keys is None:
            keys = sorted_unique(prefix >> np.uint64(32)).astype(np.uint32)
        window.add(
            WindowDoc(identity, channel, timestamp, hour, int(sig.size), version.number, nf, figs,
                      number),
            keys,
            version,
            min_overlap(int(sig.size), self.config.threshold),
            int(sig.size) - length,
            bitmap,
        )
        self._book.count(mixed)

    def _add_flat(self, window: ScopeWindow, index: FlatIndex, identity: str, channel: str,
                  timestamp: float, hour: int, nf: str, sig: Codes, figs: str | None,
                  probe: _Probe | None, number: int) -> None:
        """:meth:`_add_to_window` into the flat index: every q-gram in full mode, else the
        extended prefix under the current order (learned only then)."""
        mixed = probe.mixed if probe is not None else fmix64(sig)
        t = self.config.threshold
        size = int(sig.size)
        # the prefix, the index and the order's counts in one C call
        window.add_flat(
            WindowDoc(identity, channel, timestamp, hour, size, -1, nf, figs, number),
            mixed, sig, min_overlap(size, t), extended_prefix(size, t),
            None if index.full else self._book,
        )

    # -- the most complete version --------------------------------------------------

    def _keep_complete(self, window: ScopeWindow, decision: Decision, size: int,
                       sig: Codes) -> Decision:
        """Track the version of its story a reader holds (the item was just indexed, last
        in the window): a story's first item; a near duplicate that is a more complete
        version of the kept one (core.stories.supersedes) replaces it."""
        mine = Kept(decision.identity, window.doc_base + len(window.docs) - 1, size)
        if decision.story == decision.identity:
            window.stories.keep(decision.story, mine)
            return decision
        kept = window.stories.kept(decision.story)
        if decision.status is not Status.NEAR_DUPLICATE or kept is None:
            return decision
        pos = kept.position - window.doc_base
        oldest = window.oldest_live_hour()
        # gone from the window (or, out of order, from its hours): nothing to compare with
        if pos < 0 or (oldest is not None and window.docs[pos].hour < oldest):
            return decision
        if not supersedes(intersection_size(sig, self._signature_of(window, pos)), size, kept):
            return decision
        window.stories.keep(decision.story, mine)
        return replace(decision, supersedes=kept.identity)

    # -- helpers ------------------------------------------------------------------------

    def _signature_of(self, window: ScopeWindow, pos: int) -> Codes:
        key = (window.scope, window.doc_base + pos)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        sig = signature(window.docs[pos].nf, self.config.q)
        self._cache[key] = sig
        if len(self._cache) > self.config.cache_signatures:
            self._cache.popitem(last=False)
        return sig

    def _window(self, scope: str) -> ScopeWindow:
        window = self._windows.get(scope)
        if window is None:
            index: PostingIndex | FlatIndex
            if self.config.flat_index:
                index = FlatIndex(self.config.threshold, self.config.dense_fraction,
                                  self.config.q, ahead=self._lookup_thread)
            else:
                threads = self.config.count_threads or available_cores()
                index = PostingIndex(threads, self.config.dense_fraction)
            window = self._windows[scope] = ScopeWindow(
                scope, self.config.window_hours, self.config.effective_bitmap_bits, index)
        return window

    def _count(self, decision: Decision) -> None:
        self.stats.decided += 1
        key = decision.status._value_
        self.stats.by_status[key] = self.stats.by_status.get(key, 0) + 1


def _probe_keys(versions: list[OrderVersion], mixed: Codes, length: int,
                full: bool) -> tuple[list[Codes], npt.NDArray[np.uint32], int]:
    """The probe's prefix under each live version ([mixed] when ``full``), the distinct keys
    of their union (ascending) and its distinct codes (mixed is a bijection of the distinct
    signature): in one C call when the kernels are built, else in numpy."""
    shift = versions[0].shift
    if all(v.shift == shift for v in versions):
        tables = [] if full else [v.classes for v in versions]
        found = probe_keys(mixed, tables, shift, length)
        if found is not None:
            rows, keys, ncodes = found
            return ([mixed] if full else rows), keys, ncodes
    probes = [mixed] if full else [v.prefix(mixed, length) for v in versions]
    codes = sorted_unique(np.concatenate(probes)) if len(probes) > 1 else probes[0]
    keys = sorted_unique(codes >> np.uint64(32)).astype(np.uint32)
    return probes, keys, int(codes.size)


def _replayed(decision: Decision) -> Decision:
    return replace(decision, replayed=True)
