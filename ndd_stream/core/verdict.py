"""From the best match to the decision: the one rule the detector and the shard gatherer share.

The detector finds its best match in one window; a sharded scope (:mod:`core.shards`) finds
the best local match in each shard and gathers them. Either way the decision is taken here,
so both paths decide alike by construction.
"""

from __future__ import annotations

from ndd_stream.core.document import Decision, Document, Policy, Status
from ndd_stream.core.novelty import MAX_LISTED, Novelty, declares_correction, detail_line, judge
from ndd_stream.core.window import ShortDoc, WindowDoc

BestMatch = tuple[int, WindowDoc]
"""(q-grams shared with the deciding document, the matched document)."""


def unique(doc: Document, hour: int, policy: Policy = Policy.NONE) -> Decision:
    return Decision(doc.identity, Status.UNIQUE, 0.0, scope=doc.scope, hour=hour, policy=policy)


def short_verdict(doc: Document, hour: int, short: ShortDoc | None) -> Decision:
    """A normal form shorter than q: an exact duplicate of ``short`` (its earliest equal
    normal form in the window), else unique."""
    if short is None:
        return unique(doc, hour, Policy.SHORT)
    return Decision(doc.identity, Status.EXACT_DUPLICATE, 1.0, short.identity, short.channel,
                    short.timestamp, scope=doc.scope, hour=hour, policy=Policy.SHORT)


def conclude(novelty: str, doc: Document, hour: int, figs: str | None, size: int,
             best: BestMatch | None) -> Decision:
    """The decision on ``doc`` (signature of ``size`` q-grams) given its best match: unique
    without one; a new report when the novelty rule (``novelty`` "on", or "auto" for plain
    text) judges the match another report; else a near or exact duplicate of it."""
    if best is None:
        return unique(doc, hour)
    shared, match = best
    denom = max(size, match.size)
    if figs is not None and (novelty == "on" or not doc.markup):
        novel = _novelty(doc, shared, size, match, figs)
        if novel is not None:
            return Decision(doc.identity, Status.UNIQUE, novel.similarity, scope=doc.scope,
                            hour=hour, novel=novel)
    status = Status.EXACT_DUPLICATE if shared == denom else Status.NEAR_DUPLICATE
    return Decision(doc.identity, status, shared / denom, match.identity, match.channel,
                    match.timestamp, scope=doc.scope, hour=hour)


def better(a: BestMatch, size: int, b: BestMatch | None) -> bool:
    """True when ``a`` beats ``b`` as the best match of a document of ``size`` q-grams:
    a higher doc_q, or the same doc_q and an earlier arrival (the detector's rule)."""
    if b is None:
        return True
    sim_a = a[0] / max(size, a[1].size)
    sim_b = b[0] / max(size, b[1].size)
    return sim_a > sim_b or (sim_a == sim_b and a[1].number < b[1].number)


def _novelty(doc: Document, shared: int, size: int, match: WindowDoc,
             figs: str) -> Novelty | None:
    """The core.novelty verdict on the best match, as the decision's explanation."""
    verdict = judge(shared, size, match.size, figs, match.figures,
                    lambda: declares_correction(doc.text), lambda: match.nf, MAX_LISTED)
    if verdict is None:
        return None
    reason, only_new, only_old = verdict
    return Novelty(reason, match.identity, shared / max(size, match.size),
                   only_new[:MAX_LISTED], only_old[:MAX_LISTED],
                   detail_line(reason, only_new, only_old))
