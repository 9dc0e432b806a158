"""The paper-faithful DDD of Fig. 2 with the hourly windows of §3.6: a reference, not a product.

Montanari & Puglisi (2012) keep, per hour, one index that maps every q-gram met in that
hour to a bitmap of the hour's documents containing it (Fig. 4). An incoming document of
hour H counts, for every document of hours H-w..H, how many of its distinct q-grams that
document shares (``list_counters``, Fig. 2 line 8) by reading *every* posting of *every*
q-gram it has, computes doc_q for each document with a count > 0 (lines 9-14), and is
then indexed in the index of its own hour. An hour that leaves the window is dropped
whole (Fig. 3: its index is "overwritten").

Why keep it: it is the independent oracle for :class:`ndd_stream.core.detector.Detector`
(whose pruning must never change a decision: tests/test_faithful.py compares the two on
random streams) and the baseline of the benchmark (bench/). It implements exactly the
decision rules of the fast detector, which the paper leaves open:

* best match = highest doc_q, ties to the earliest arrival (the lowest arrival number);
* LATE: an item whose own hour has already left its scope's window is unique and not
  indexed; EMPTY: no letter or digit, unique, not indexed; SHORT: a normal form shorter
  than q is matched by equality of normal forms in hours H-w..H;
* the watermark of a scope is the latest hour seen; hours below ``watermark - w`` expire,
  with their decisions (so a replayed identity is recognised only while its hour lives);
* ``index_duplicates=False`` indexes unique documents only.

Document numbers in the bitmaps are per-scope arrival numbers (the paper numbers
documents per hour; a global number gives the tie rule for free and changes nothing else).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
from pyroaring import BitMap

from ndd_stream.core.detector import DetectorConfig, hour_of
from ndd_stream.core.document import Decision, Document, Policy, Status
from ndd_stream.core.normalize import normal_form
from ndd_stream.core.qgrams import Codes, signature
from ndd_stream.core.window import ShortDoc


@dataclass(slots=True)
class _Indexed:
    """What a match reports about an indexed document."""

    identity: str
    channel: str
    timestamp: float
    size: int  # |signature|


@dataclass
class HourIndex:
    """The local index i_h of one hour (Fig. 4): q-gram code -> bitmap of document numbers."""

    postings: dict[int, BitMap] = field(default_factory=dict)
    docs: dict[int, _Indexed] = field(default_factory=dict)
    shorts: dict[str, ShortDoc] = field(default_factory=dict)

    def add(self, number: int, codes: list[int]) -> None:
        """Fig. 2 lines 4-7: set bit ``number`` in the bitmap of each q-gram (new ones too)."""
        postings = self.postings
        for code in codes:
            bitmap = postings.get(code)
            if bitmap is None:
                postings[code] = BitMap((number,))
            else:
                bitmap.add(number)


@dataclass
class _Scope:
    hours: dict[int, HourIndex] = field(default_factory=dict)
    decisions: dict[str, Decision] = field(default_factory=dict)
    identities_by_hour: dict[int, list[str]] = field(default_factory=dict)
    watermark: int | None = None
    next_number: int = 0  # arrival number of the next indexed document
    sizes: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(1024, dtype=np.int64))

    def remember_size(self, number: int, size: int) -> None:
        if number >= self.sizes.size:
            self.sizes = np.resize(self.sizes, 2 * number + 1024)
        self.sizes[number] = size


class FaithfulDetector:
    """Fig. 2 over hourly roaring-bitmap indexes; same ``decide`` contract as Detector."""

    def __init__(
        self,
        config: DetectorConfig | None = None,
        normalizer: Callable[[str], str] | None = None,
    ) -> None:
        self.config = config or DetectorConfig()
        self._normal_form = normalizer or (
            lambda text: normal_form(text, case_sensitive=self.config.case_sensitive)
        )
        self._scopes: dict[str, _Scope] = {}
        self.decided = 0
        self.postings_read = 0  # total bitmap entries counted: the cost the paper's §3.5 bounds

    # -- public API ---------------------------------------------------------------------

    def decide(self, doc: Document) -> Decision:
        """Decide one document, then index it in its hour (Fig. 2 for one item)."""
        scope = self._scope(doc.scope)
        hour = hour_of(doc.timestamp)
        self._advance(scope, hour)
        previous = scope.decisions.get(doc.identity)
        if previous is not None:
            return replace(previous, replayed=True)
        nf = self._normal_form(doc.text)
        decision, sig = self._judge(scope, doc, hour, nf)
        if decision.policy not in (Policy.LATE, Policy.EMPTY) and (
            self.config.index_duplicates or not decision.is_duplicate
        ):
            self._index(scope, doc, hour, nf, sig)
        if decision.policy is not Policy.LATE:  # not in the window: not replay-protected
            scope.decisions[doc.identity] = decision
            scope.identities_by_hour.setdefault(hour, []).append(doc.identity)
        self.decided += 1
        return decision

    def preload(self, docs: Iterable[Document]) -> int:
        """Index documents as if each had been decided, without computing the decisions.

        For benchmark warm-up only: when duplicates are indexed (the default) and no item
        is late, the state is the one ``decide`` would leave, at the cost of indexing
        alone, and the bitmaps of a run of same-hour documents are built in bulk.
        Decisions are not remembered, so these identities are not replay-protected.
        Returns the number of documents indexed.
        """
        count = 0
        batch: list[tuple[int, Codes]] = []
        batch_key: tuple[str, int] | None = None
        for doc in docs:
            scope = self._scope(doc.scope)
            hour = hour_of(doc.timestamp)
            if batch and batch_key != (doc.scope, hour):
                self._flush(batch_key, batch)
            batch_key = (doc.scope, hour)
            self._advance(scope, hour)
            nf = self._normal_form(doc.text)
            if self._is_late(scope, hour) or not nf:
                continue
            if len(nf) < self.config.q:
                self._index(scope, doc, hour, nf, None)
            else:
                sig = signature(nf, self.config.q)
                number = self._register(scope, doc, hour, sig)
                batch.append((number, sig))
            count += 1
        if batch:
            self._flush(batch_key, batch)
        return count

    def _flush(self, key: tuple[str, int] | None, batch: list[tuple[int, Codes]]) -> None:
        """Set the bits of a run of documents of one hour, one bitmap update per q-gram."""
        assert key is not None
        index = self._scope(key[0]).hours[key[1]]
        codes = np.concatenate([sig for _, sig in batch])
        numbers = np.repeat(
            np.array([n for n, _ in batch], dtype=np.uint32), [sig.size for _, sig in batch]
        )
        order = np.argsort(codes, kind="stable")
        codes, numbers = codes[order], numbers[order]
        starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
        ends = np.r_[starts[1:], codes.size]
        postings = index.postings
        groups = zip(codes[starts].tolist(), starts.tolist(), ends.tolist(), strict=True)
        numbers_list = numbers.tolist()
        for code, lo, hi in groups:
            bitmap = postings.get(code)
            if bitmap is None:
                postings[code] = BitMap(numbers_list[lo:hi])
            else:
                bitmap.update(numbers_list[lo:hi])
        batch.clear()

    def window_documents(self) -> int:
        return sum(len(h.docs) for s in self._scopes.values() for h in s.hours.values())

    def hour_indexes(self, scope: str) -> dict[int, HourIndex]:
        """The live hourly indexes of a scope (for inspection and tests)."""
        return self._scope(scope).hours

    # -- time (same semantics as ndd_stream.core.window.ScopeWindow) --------------------

    def _advance(self, scope: _Scope, hour: int) -> None:
        if scope.watermark is not None and hour <= scope.watermark:
            return
        scope.watermark = hour
        oldest = hour - self.config.window_hours
        for h in [h for h in scope.hours if h < oldest]:
            del scope.hours[h]  # the whole hour at once, as Fig. 3 overwrites i_h
        for h in [h for h in scope.identities_by_hour if h < oldest]:
            for identity in scope.identities_by_hour.pop(h):
                scope.decisions.pop(identity, None)

    def _is_late(self, scope: _Scope, hour: int) -> bool:
        return scope.watermark is not None and hour < scope.watermark - self.config.window_hours

    def _live_hours(self, scope: _Scope, hour: int) -> list[HourIndex]:
        return [
            scope.hours[h]
            for h in range(hour - self.config.window_hours, hour + 1)
            if h in scope.hours
        ]

    # -- the decision -------------------------------------------------------------------

    def _judge(
        self, scope: _Scope, doc: Document, hour: int, nf: str
    ) -> tuple[Decision, Codes | None]:
        def unique(policy: Policy = Policy.NONE) -> Decision:
            return Decision(
                doc.identity, Status.UNIQUE, 0.0, scope=doc.scope, hour=hour, policy=policy
            )

        if self._is_late(scope, hour):
            return unique(Policy.LATE), None
        if not nf:
            return unique(Policy.EMPTY), None
        if len(nf) < self.config.q:
            for index in self._live_hours(scope, hour):
                short = index.shorts.get(nf)
                if short is not None:
                    return Decision(
                        doc.identity, Status.EXACT_DUPLICATE, 1.0, short.identity,
                        short.channel, short.timestamp, scope=doc.scope, hour=hour,
                        policy=Policy.SHORT,
                    ), None
            return unique(Policy.SHORT), None
        sig = signature(nf, self.config.q)
        best = self._best_match(scope, hour, sig)
        if best is None:
            return unique(), sig
        shared, match, size = best
        status = Status.EXACT_DUPLICATE if shared == size else Status.NEAR_DUPLICATE
        return Decision(
            doc.identity, status, shared / size, match.identity, match.channel,
            match.timestamp, scope=doc.scope, hour=hour,
        ), sig

    def _best_match(
        self, scope: _Scope, hour: int, sig: Codes
    ) -> tuple[int, _Indexed, int] | None:
        """Fig. 2 lines 3-14 over the hours H-w..H: count every posting, score every count."""
        hours = self._live_hours(scope, hour)
        codes = sig.tolist()
        found: list[npt.NDArray[np.uint32]] = []
        for index in hours:
            get = index.postings.get
            for code in codes:
                bitmap = get(code)
                if bitmap is not None:
                    found.append(np.frombuffer(bitmap.to_array(), dtype=np.uint32))
        if not found:
            return None
        numbers = np.concatenate(found)
        self.postings_read += int(numbers.size)
        low = int(numbers.min())
        list_counters = np.bincount(numbers - np.uint32(low))  # c_t for documents low..
        counted = np.flatnonzero(list_counters)  # every t with c_t > 0, in arrival order
        shared = list_counters[counted]
        denom = np.maximum(scope.sizes[counted + low], sig.size)
        sims = shared / denom
        at = int(np.argmax(sims))  # the first maximum: ties go to the earliest arrival
        if not sims[at] >= self.config.threshold:
            return None
        number = int(counted[at]) + low
        match = next(index.docs[number] for index in hours if number in index.docs)
        return int(shared[at]), match, int(denom[at])

    # -- indexing -----------------------------------------------------------------------

    def _index(
        self, scope: _Scope, doc: Document, hour: int, nf: str, sig: Codes | None
    ) -> None:
        index = scope.hours.get(hour)
        if index is None:
            index = scope.hours[hour] = HourIndex()
        if sig is None:  # short text: indexed by its normal form, the first one kept
            index.shorts.setdefault(nf, ShortDoc(doc.identity, doc.channel, doc.timestamp))
            return
        number = self._register(scope, doc, hour, sig)
        index.add(number, sig.tolist())

    def _register(self, scope: _Scope, doc: Document, hour: int, sig: Codes) -> int:
        """Give ``doc`` the next arrival number and record it in its hour; return the number."""
        index = scope.hours.get(hour)
        if index is None:
            index = scope.hours[hour] = HourIndex()
        number = scope.next_number
        scope.next_number += 1
        scope.remember_size(number, int(sig.size))
        index.docs[number] = _Indexed(doc.identity, doc.channel, doc.timestamp, int(sig.size))
        return number

    def _scope(self, name: str) -> _Scope:
        scope = self._scopes.get(name)
        if scope is None:
            scope = self._scopes[name] = _Scope()
        return scope
