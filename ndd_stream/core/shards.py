"""One scope's window split over S shards, deciding exactly as one detector.

The work of a decision that grows with the window (counting postings, verifying) divides
if the window is divided; the rest is done once. Per item, in the scope's order:

1. the :class:`Gatherer` *admits* it: the scope's watermark moves, a repeated identity is a
   replay, a late or empty item is decided at once; every other item gets its arrival
   number, its normal form and figures (once), and becomes a :class:`Prepared` for all
   shards (each shard computes the signature from the normal form: 0.09 ms for a 5 KB
   item, where sending it would carry 6x the normal form's bytes: docs/BENCHMARK.md);
2. every :class:`ShardIndex` *answers* it: the best match among the documents it holds
   (and, for a text shorter than q, its earliest equal normal form), then indexes the item
   if it is the item's owner (:func:`shard_of`, a stable function of the identity);
3. the gatherer *resolves* it from the S answers: the highest doc_q, ties to the earliest
   arrival, then the novelty judgement on that match (:mod:`core.verdict`, the rule the
   unsharded detector uses too).

Why this is exact: the detector indexes every document it decides (``index_duplicates``,
Fig. 2; late and empty items excepted, which the gatherer knows before the shards do), so
what a shard holds depends on the order of the items only, never on a decision. Every
shard sees every item in the same order, so item i+1 finds item i in its owner's shard, and
the union of the shards' candidates is the one detector's candidate set. Pruning is exact
in each shard whatever its q-gram order, so the best of the local bests is the global best.
``tests/test_core_shards.py`` checks decisions against the one detector for S = 1..4.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ndd_stream.core.detector import Detector, DetectorConfig, hour_of
from ndd_stream.core.document import Decision, Document, Policy, Status
from ndd_stream.core.normalize import normal_form
from ndd_stream.core.novelty import figures as figures_of
from ndd_stream.core.qgrams import signed
from ndd_stream.core.store import NullStore, StateStore, StoredDocument
from ndd_stream.core.stories import StoryBook, alone, place
from ndd_stream.core.verdict import BestMatch, better, conclude, short_verdict, unique
from ndd_stream.core.window import ScopeWindow, ShortDoc


def shard_of(identity: str, shards: int) -> int:
    """The shard that indexes a document: the first 8 bytes of BLAKE2b(identity UTF-8),
    big-endian, modulo ``shards``. Stable across processes and versions (never ``hash()``)."""
    if shards <= 1:
        return 0
    digest = hashlib.blake2b(identity.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


@dataclass(frozen=True, slots=True)
class Prepared:
    """What every shard is told of one item: enough to probe and, for its owner, to index."""

    scope: str
    number: int  # arrival number in the scope
    identity: str
    channel: str
    timestamp: float
    hour: int
    watermark: int  # the scope's newest hour once this item is admitted
    nf: str  # normal form (non-empty)
    figures: str | None  # core.novelty.figures; None when the rule is off
    owner: int  # the shard that indexes it
    judge: bool  # the novelty rule will judge the best match: answers carry its text


@dataclass(frozen=True, slots=True)
class Answer:
    """One shard's part of a decision: its best match and its earliest short match."""

    scope: str
    number: int  # the item's arrival number
    shard: int
    size: int  # |signature| of the item (0 for a text shorter than q)
    best: BestMatch | None = None  # nf and figures only when the item's Prepared.judge
    short: tuple[int, ShortDoc] | None = None  # (hour, document) of an equal short text


def _placeholder(prep: Prepared) -> Decision:
    """A shard's state record holds no decision (the gatherer's does): see docs/STATE.md."""
    return Decision(prep.identity, Status.UNIQUE, 0.0, scope=prep.scope, hour=prep.hour)


class ShardIndex(Detector):
    """The documents of one shard of every scope: a detector that answers, never decides."""

    def __init__(self, shard: int, config: DetectorConfig | None = None,
                 store: StateStore | None = None) -> None:
        super().__init__(config, store)
        self.shard = shard

    def window_of(self, scope: str) -> ScopeWindow:
        return self._window(scope)

    def answer(self, prep: Prepared) -> Answer:
        window = self._window(prep.scope)
        for expired in window.advance(prep.watermark):
            self.store.drop_hour(prep.scope, expired)
        window.next_number = max(window.next_number, prep.number + 1)
        mine = prep.owner == self.shard
        if len(prep.nf) < self.config.q:
            short = self._earliest_short(prep.scope, prep.hour, prep.nf)
            if mine:
                window.short_by_hour.setdefault(prep.hour, {}).setdefault(
                    prep.nf, ShortDoc(prep.identity, prep.channel, prep.timestamp, prep.number))
            found = Answer(prep.scope, prep.number, self.shard, 0, short=short)
        else:
            sig, mixed = signed(prep.nf, self.config.q)
            best, probe = self._best_match(window, prep.hour, sig, mixed)
            if mine:
                self._add_to_window(window, prep.identity, prep.channel, prep.timestamp,
                                    prep.hour, prep.nf, sig, prep.figures, probe, prep.number)
            if best is not None and not prep.judge:
                best = (best[0], replace(best[1], nf="", figures=None))
            found = Answer(prep.scope, prep.number, self.shard, int(sig.size), best=best)
        if mine:
            self.store.add(StoredDocument(prep.scope, prep.number, prep.hour, prep.channel,
                                          prep.timestamp, prep.nf, True, _placeholder(prep),
                                          prep.figures))
        self.stats.decided += 1
        return found

    def _earliest_short(self, scope: str, hour: int, nf: str) -> tuple[int, ShortDoc] | None:
        window = self._window(scope)
        for h in range(hour - self.config.window_hours, hour + 1):
            found = window.short_by_hour.get(h, {}).get(nf)
            if found is not None:
                return h, found
        return None


@dataclass(slots=True)
class Slot:
    """An admitted item's decision, filled in when it is resolved."""

    decision: Decision | None = None


@dataclass(slots=True)
class Pending:
    """An admitted item on its way to a decision."""

    doc: Document
    hour: int
    number: int = -1  # -1: a replay (no number, as in the detector)
    nf: str = ""
    figures: str | None = None
    slot: Slot = field(default_factory=Slot)  # a replay: the first one's slot
    replay: bool = False
    prepared: Prepared | None = None  # None: decided without the shards
    decision: Decision | None = None  # set at admission for late and empty items
    # hours that left the window when it was admitted: its stories leave when it is
    # resolved, so each item sees the stories the one detector would show it
    expired: tuple[int, ...] = ()


class _Scope:
    """What the gatherer keeps of a scope: the watermark, the identities by hour (replays)
    and the arrival counter; the documents are in the shards."""

    def __init__(self, hours_back: int) -> None:
        self.hours_back = hours_back
        self.watermark: int | None = None
        self.slots: dict[str, Slot] = {}
        self.by_hour: dict[int, list[str]] = {}
        self.next_number = 0
        self.stories = StoryBook()  # in step with the decisions, not the admissions

    def advance(self, hour: int) -> list[int]:
        """As ``ScopeWindow.advance``: move the watermark, forget expired identities."""
        if self.watermark is not None and hour <= self.watermark:
            return []
        self.watermark = hour
        expired = sorted(h for h in self.by_hour if h < hour - self.hours_back)
        for h in expired:
            for identity in self.by_hour.pop(h):
                self.slots.pop(identity, None)
        return expired

    def is_late(self, hour: int) -> bool:
        return self.watermark is not None and hour < self.watermark - self.hours_back

    def remember(self, identity: str, hour: int, slot: Slot) -> None:
        self.slots[identity] = slot
        self.by_hour.setdefault(hour, []).append(identity)


class Gatherer:
    """Admits the items of its scopes in order, and resolves them from the shards' answers."""

    def __init__(self, config: DetectorConfig, shards: int, store: StateStore | None = None,
                 normalizer: Callable[[str], str] | None = None) -> None:
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        if config.keep != "first":
            raise ValueError("keep=complete needs an unsharded window: the kept version's "
                             "text is in one shard")
        if shards > 1 and not config.index_duplicates:
            raise ValueError("a sharded window needs index_duplicates: what a shard holds "
                             "may not depend on decisions")
        self.config = config
        self.shards = shards
        self.store: StateStore = store if store is not None else NullStore()
        self._normal_form = normalizer or (
            lambda text: normal_form(text, case_sensitive=config.case_sensitive))
        self._scopes: dict[str, _Scope] = {}

    def admit(self, doc: Document, number: int | None = None) -> Pending:
        """Admit the next item of its scope. ``number``: the arrival number it had when it
        was admitted before (a restarted gatherer whose earlier items were lost goes on
        from the numbering the shards saw); None or -1: the next one."""
        scope = self._scope(doc.scope)
        hour = hour_of(doc.timestamp)
        expired = tuple(scope.advance(hour))
        for h in expired:
            self.store.drop_hour(doc.scope, h)
        first = scope.slots.get(doc.identity)
        if first is not None:
            return Pending(doc, hour, slot=first, replay=True, expired=expired)
        nf = self._normal_form(doc.text)
        figs = figures_of(doc.text) if self.config.novelty != "off" else None
        if number is not None and number >= 0:
            scope.next_number = max(scope.next_number, number)
        pending = Pending(doc, hour, scope.next_number, nf, figs, expired=expired)
        scope.next_number += 1
        if scope.is_late(hour):
            pending.decision = unique(doc, hour, Policy.LATE)  # not kept, as in the detector
            return pending
        scope.remember(doc.identity, hour, pending.slot)
        if not nf:
            pending.decision = unique(doc, hour, Policy.EMPTY)
            return pending
        assert scope.watermark is not None
        judge = figs is not None and (self.config.novelty == "on" or not doc.markup)
        pending.prepared = Prepared(doc.scope, pending.number, doc.identity, doc.channel,
                                    doc.timestamp, hour, scope.watermark, nf, figs,
                                    shard_of(doc.identity, self.shards), judge)
        return pending

    def resolve(self, pending: Pending, answers: Sequence[Answer] = ()) -> Decision:
        """The decision on an admitted item; ``answers``: one per shard when it was
        prepared. Items must be resolved in the order they were admitted."""
        doc = pending.doc
        stories = self._scope(doc.scope).stories
        stories.expire(pending.expired)
        if pending.replay:
            assert pending.slot.decision is not None, "a replay resolved before its first"
            return replace(pending.slot.decision, replayed=True)
        decision = pending.decision
        if decision is None:
            decision = self._gather(pending, answers)
        if decision.policy is Policy.LATE:
            decision = alone(decision, doc.channel)
        else:
            decision = place(decision, stories, doc.channel, pending.hour)
        pending.slot.decision = decision
        self.store.add(StoredDocument(doc.scope, pending.number, pending.hour, doc.channel,
                                      doc.timestamp, "", False, decision, None))
        return decision

    def restore(self) -> int:
        """Rebuild the scopes from the store's decisions (as ``Detector.restore``)."""
        records = list(self.store.load())
        for rec in records:
            scope = self._scope(rec.scope)
            expired = scope.advance(rec.hour)
            for h in expired:
                self.store.drop_hour(rec.scope, h)
            scope.stories.expire(expired)
            scope.next_number = max(scope.next_number, rec.number + 1)
            if not scope.is_late(rec.hour):
                decision = place(rec.decision, scope.stories, rec.channel, rec.hour)
                scope.remember(rec.decision.identity, rec.hour, Slot(decision))
        return len(records)

    def _gather(self, pending: Pending, answers: Sequence[Answer]) -> Decision:
        # from the Pending, not its Prepared: a worker may drop the Prepared once sent
        if sorted(a.shard for a in answers) != list(range(self.shards)) or any(
                a.number != pending.number for a in answers):
            raise ValueError(f"item {pending.number} needs one answer from each of "
                             f"{self.shards} shards")
        doc, hour = pending.doc, pending.hour
        if len(pending.nf) < self.config.q:
            shorts = [a.short for a in answers if a.short is not None]
            earliest = min(shorts, key=lambda s: (s[0], s[1].number), default=None)
            return short_verdict(doc, hour, None if earliest is None else earliest[1])
        size = answers[0].size
        best: BestMatch | None = None
        for a in answers:
            if a.best is not None and better(a.best, size, best):
                best = a.best
        return conclude(self.config.novelty, doc, hour, pending.figures, size, best)

    def _scope(self, name: str) -> _Scope:
        scope = self._scopes.get(name)
        if scope is None:
            scope = self._scopes[name] = _Scope(self.config.window_hours)
        return scope


class ShardedDetector:
    """A gatherer and its S shards in one process: the reference of the worker's Kafka
    path (same decisions as :class:`Detector` for any S), and the per-shard benchmark."""

    def __init__(self, config: DetectorConfig | None = None, shards: int = 2) -> None:
        self.config = config or DetectorConfig()
        self.gatherer = Gatherer(self.config, shards)
        self.shards = [ShardIndex(s, self.config) for s in range(shards)]

    def decide(self, doc: Document) -> Decision:
        pending = self.gatherer.admit(doc)
        prep = pending.prepared
        answers = [shard.answer(prep) for shard in self.shards] if prep is not None else []
        return self.gatherer.resolve(pending, answers)
