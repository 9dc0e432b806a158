"""Measure rules that link an item routed unique to an earlier story, offline.

The routing (each item's decision) is the core Detector's, unchanged; only the story of an
item routed unique is simulated: it joins the story of an earlier item when a rule says so,
else it starts one. A duplicate joins its match's story, as in the stream. Each rule is
scored by the adjusted Rand index of the story groups against the gold clusters over
seeded stream orders (mean and lowest), and at its constant moved by -20% and +20%.

Signals of a unique item ``u`` and an earlier item ``e`` (decided at ``u``'s arrival):

* ``doc_q``: |U & E| / max(|U|, |E|), the detector's measure;
* ``contain``: |U & E| / min(|U|, |E|);
* ``specific``: the share of U's q-grams that occur in ``e``'s story and in no other story
  of the window so far (page furniture shared by two stories does not count);
* ``head``: word-stem Jaccard of the two headlines: the first line of the text (what the
  stream holds) or the page's ``<title>`` (``--title``, not carried by the stream);
* ``mutual``: ``u`` is also ``e``'s best match among the items that arrived after ``e``.

A rule takes the best earlier story by one signal and joins it when the signal (and any
second condition: a headline, a containment, a margin over the next story) holds.

    python -m bench.story_links /work/shared/data/goldset-dev --seeds 10
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ndd_stream.core.headline import headline_words, stem
from ndd_stream.core.normalize import normal_form
from ndd_stream.core.qgrams import signature
from ndd_stream.eval.corpus import load_corpus
from ndd_stream.eval.documents import EvalDoc
from ndd_stream.eval.extraction import extract_items
from ndd_stream.eval.features import intersection_matrix
from ndd_stream.eval.methods.ddd import DDD
from ndd_stream.eval.metrics import adjusted_rand_index
from ndd_stream.eval.routing import stream_order, with_synthetic_times


@dataclass(frozen=True)
class Candidate:
    """An earlier item and the signals it shares with the arriving unique item."""

    position: int  # in arrival order
    story: int  # position of the story's first item
    doc_q: float
    contain: float
    specific: float  # share of the arriving item's q-grams found only in this story
    head: float
    mutual: bool  # the arriving item is the earlier one's best match among later items


Rule = Callable[[Sequence[Candidate]], int | None]


def head_jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def simulate(stream: Sequence[EvalDoc], sigs: Sequence[frozenset[int]],
             heads: Sequence[frozenset[str]], duplicate_of: Sequence[int | None],
             rule: Rule, shared_qgrams: np.ndarray) -> tuple[list[int], list[tuple[int, int]]]:
    """Each item's story (arrival position of its first item) and the links the rule made
    (unique item, joined story)."""
    story: list[int] = []
    stories_of: dict[int, set[int]] = {}  # q-gram -> stories holding it
    links: list[tuple[int, int]] = []
    sizes = [len(sig) for sig in sigs]
    # best doc_q of each earlier item with the items that arrived after it (mutual best)
    best_later = [0.0] * len(sigs)
    for k, sig in enumerate(sigs):
        dup = duplicate_of[k]
        if dup is not None:
            s = story[dup]
        else:
            cands: list[Candidate] = []
            only: dict[int, int] = {}
            for g in sig:
                held = stories_of.get(g)
                if held is not None and len(held) == 1:
                    (one,) = held
                    only[one] = only.get(one, 0) + 1
            for e in range(k):
                shared = int(shared_qgrams[k, e])
                if not shared:
                    continue
                big, small = max(sizes[k], sizes[e]), min(sizes[k], sizes[e])
                cands.append(Candidate(e, story[e], shared / big, shared / small,
                                       only.get(story[e], 0) / max(sizes[k], 1),
                                       head_jaccard(heads[k], heads[e]),
                                       shared / big > best_later[e]))
            joined = rule(cands)
            s = k if joined is None else joined
            if joined is not None:
                links.append((k, joined))
        story.append(s)
        for e in range(k):
            q = shared_qgrams[k, e] / max(sizes[k], sizes[e], 1)
            if q > best_later[e]:
                best_later[e] = q
        for g in sig:
            stories_of.setdefault(g, set()).add(s)
    return story, links


def best_per_story(cands: Sequence[Candidate], key: Callable[[Candidate], float]
                   ) -> list[Candidate]:
    best: dict[int, Candidate] = {}
    for c in cands:
        if c.story not in best or key(c) > key(best[c.story]):
            best[c.story] = c
    return sorted(best.values(), key=key, reverse=True)


def rule_none(_: Sequence[Candidate]) -> int | None:
    return None


def rule_doc_q(t: float) -> Rule:
    def rule(cands: Sequence[Candidate]) -> int | None:
        ranked = best_per_story(cands, lambda c: c.doc_q)
        return ranked[0].story if ranked and ranked[0].doc_q >= t else None
    return rule


def rule_doc_q_head(t: float, h: float) -> Rule:
    def rule(cands: Sequence[Candidate]) -> int | None:
        ranked = best_per_story(cands, lambda c: c.doc_q)
        return ranked[0].story if ranked and ranked[0].doc_q >= t and ranked[0].head >= h \
            else None
    return rule


def rule_contain(t: float) -> Rule:
    def rule(cands: Sequence[Candidate]) -> int | None:
        ranked = best_per_story(cands, lambda c: c.contain)
        return ranked[0].story if ranked and ranked[0].contain >= t else None
    return rule


def rule_specific(t: float) -> Rule:
    def rule(cands: Sequence[Candidate]) -> int | None:
        ranked = best_per_story(cands, lambda c: c.specific)
        return ranked[0].story if ranked and ranked[0].specific >= t else None
    return rule


def rule_specific_head(t: float, h: float) -> Rule:
    def rule(cands: Sequence[Candidate]) -> int | None:
        ranked = best_per_story(cands, lambda c: c.specific)
        if not ranked or ranked[0].specific < t:
            return None
        top = ranked[0].story
        if max(c.head for c in cands if c.story == top) < h:
            return None
        return top
    return rule


def rule_margin(t: float, contain: float, margin: float) -> Rule:
    """Best story by doc_q >= t, containment >= ``contain``, and ``margin`` times the next
    story's doc_q."""
    def rule(cands: Sequence[Candidate]) -> int | None:
        ranked = best_per_story(cands, lambda c: c.doc_q)
        if not ranked or ranked[0].doc_q < t or ranked[0].contain < contain:
            return None
        if len(ranked) > 1 and ranked[0].doc_q < margin * ranked[1].doc_q:
            return None
        return ranked[0].story
    return rule


def rule_mutual(t: float) -> Rule:
    """Best item by doc_q >= t when the arriving item is also that item's best later match."""
    def rule(cands: Sequence[Candidate]) -> int | None:
        ranked = sorted(cands, key=lambda c: c.doc_q, reverse=True)
        if not ranked or ranked[0].doc_q < t or not ranked[0].mutual:
            return None
        return ranked[0].story
    return rule


def load(corpus: Path, title: bool) -> tuple[list[EvalDoc], list[frozenset[str]]]:
    loaded = load_corpus(corpus)
    texts = extract_items(loaded.items, "main").texts
    docs = [EvalDoc(i.identity, i.cluster, t, i.title, i.timestamp or 0.0, markup=i.is_html)
            for i, t in zip(loaded.items, texts, strict=True)]
    heads = [frozenset(map(stem, headline_words(d.title if title else d.text))) for d in docs]
    return docs, heads


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--threshold", type=float, default=0.3)
    parser.add_argument("--title", action="store_true", help="headline = the page's <title>")
    parser.add_argument("--rules", nargs="*", default=None)
    args = parser.parse_args(argv)
    docs, heads = load(args.corpus, args.title)
    arrays = [signature(normal_form(d.text)) for d in docs]
    sig_of = {d.identity: frozenset(a.tolist()) for d, a in zip(docs, arrays, strict=True)}
    _, dense = np.unique(np.concatenate(arrays), return_inverse=True)
    bounds = np.cumsum([0] + [a.size for a in arrays])
    shared_all = intersection_matrix([dense[bounds[i]:bounds[i + 1]].astype(np.int64)
                                      for i in range(len(arrays))])
    index = {d.identity: i for i, d in enumerate(docs)}
    head_of = {d.identity: h for d, h in zip(docs, heads, strict=True)}
    rules: dict[str, Rule] = {"tree": rule_none}
    for scale in (0.8, 1.0, 1.2):
        rules[f"doc_q>={0.25 * scale:.2f}"] = rule_doc_q(0.25 * scale)
        rules[f"contain>={0.7 * scale:.2f}"] = rule_contain(0.7 * scale)
        rules[f"specific>={0.2 * scale:.2f}"] = rule_specific(0.2 * scale)
        rules[f"doc_q>={0.25 * scale:.2f}&head>=0.2"] = rule_doc_q_head(0.25 * scale, 0.2)
        rules[f"doc_q>=0.25&head>={0.2 * scale:.2f}"] = rule_doc_q_head(0.25, 0.2 * scale)
        rules[f"doc_q>={0.2 * scale:.2f}&head>=0.3"] = rule_doc_q_head(0.2 * scale, 0.3)
        rules[f"doc_q>={0.2 * scale:.2f}&contain>=0.3&margin1.5"] = rule_margin(
            0.2 * scale, 0.3, 1.5)
        rules[f"doc_q>=0.2&contain>={0.3 * scale:.2f}&margin1.5"] = rule_margin(
            0.2, 0.3 * scale, 1.5)
        rules[f"doc_q>=0.2&contain>=0.3&margin{1.5 * scale:.1f}"] = rule_margin(
            0.2, 0.3, 1.5 * scale)
        rules[f"mutual&doc_q>={0.2 * scale:.2f}"] = rule_mutual(0.2 * scale)
    if args.rules:
        rules = {k: v for k, v in rules.items() if k in args.rules or k == "tree"}
    scores: dict[str, list[float]] = {name: [] for name in rules}
    linked: dict[str, list[int]] = {name: [] for name in rules}
    wrong: dict[str, int] = dict.fromkeys(rules, 0)  # links across gold clusters
    method = DDD()
    for seed in range(args.seeds):
        stream = with_synthetic_times(docs, stream_order(docs, "random", seed))
        decisions = method.decide(stream, args.threshold)
        pos = {d.identity: k for k, d in enumerate(stream)}
        dup = [None if x.duplicate_of is None else pos[x.duplicate_of] for x in decisions]
        sigs = [sig_of[d.identity] for d in stream]
        hs = [head_of[d.identity] for d in stream]
        gold = [d.cluster for d in stream]
        at = np.array([index[d.identity] for d in stream])
        shared = shared_all[np.ix_(at, at)]
        for name, rule in rules.items():
            story, links = simulate(stream, sigs, hs, dup, rule, shared)
            scores[name].append(adjusted_rand_index(gold, story))
            linked[name].append(len(links))
            wrong[name] += sum(gold[a] != gold[b] for a, b in links)
    print("| rule | mean ARI | lowest ARI | links per order | wrong links (total) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name in rules:
        print(f"| {name} | {statistics.mean(scores[name]):.3f} | {min(scores[name]):.3f} | "
              f"{statistics.mean(linked[name]):.1f} | {wrong[name]} |")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
