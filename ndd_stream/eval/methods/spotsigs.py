"""SpotSigs (Theobald, Siddharth & Paepcke, SIGIR 2008), as in seeds 000 and 003.

A spot signature is an antecedent stop word followed by a chain of the next ``chain``
non-stop-words, each taken ``distance`` non-stop-words apart ("the:south:carolina"). Such
chains occur in running prose and rarely in navigation or ads, which is why SpotSigs needs no
separate boilerplate removal. Signatures whose normalised IDF lies outside
``[min_idf, max_idf]`` are dropped; documents with fewer than ``min_spotsigs`` signatures are
not compared. Similarity is the multiset Jaccard sum(min)/sum(max) of signature counts.

Partitioning and pruning: because multiset Jaccard is at most the ratio of the two
signature-vector lengths, documents are sorted by length and each is compared only with the
following ones whose length is within the ratio ``tau`` (SpotSigs' length partitions, with the
exact bound rather than fixed buckets), and only with those sharing at least one signature
(inverted index). Seed 003 Table 1 lists the defaults used here (d=1, chain=1, idf 0.2-0.85,
min 4 signatures).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence

import numpy as np

from ndd_stream.eval.documents import EvalDoc
from ndd_stream.eval.features import words
from ndd_stream.eval.methods.base import Method, PairScores, symmetric
from ndd_stream.eval.stopwords import STOPWORDS

ANTECEDENTS: frozenset[str] = frozenset({"a", "an", "the", "is", "was", "there", "said", "be"})


def spot_signatures(
    tokens: Sequence[str], antecedents: frozenset[str], chain: int, distance: int
) -> list[str]:
    """Every antecedent occurrence with its chain of following non-stop-words."""
    content = [i for i, t in enumerate(tokens) if t not in STOPWORDS]
    out: list[str] = []
    for i, token in enumerate(tokens):
        if token not in antecedents:
            continue
        start = bisect_right(content, i)
        picks = [start + distance * k + (distance - 1) for k in range(chain)]
        if picks[-1] >= len(content):
            continue
        out.append(":".join([token, *(tokens[content[p]] for p in picks)]))
    return out


def multiset_jaccard(a: Counter[str], b: Counter[str], size_a: int, size_b: int) -> float:
    if len(a) > len(b):
        a, b = b, a
    common = sum(min(c, b[s]) for s, c in a.items() if s in b)
    union = size_a + size_b - common
    return common / union if union else 0.0


class SpotSigs(Method):
    name = "spotsigs"
    reference = "Theobald et al. 2008: SpotSigs, stop-word antecedent chains, Jaccard"

    def __init__(
        self,
        chain: int = 1,
        distance: int = 1,
        min_idf: float = 0.2,
        max_idf: float = 0.85,
        min_spotsigs: int = 4,
        antecedents: frozenset[str] = ANTECEDENTS,
    ) -> None:
        self.chain = chain
        self.distance = distance
        self.min_idf = min_idf
        self.max_idf = max_idf
        self.min_spotsigs = min_spotsigs
        self.antecedents = antecedents

    def describe(self) -> dict[str, object]:
        return {
            "chain": self.chain,
            "distance": self.distance,
            "idf_range": [self.min_idf, self.max_idf],
            "min_spotsigs": self.min_spotsigs,
            "antecedents": sorted(self.antecedents),
        }

    def signatures(self, docs: Sequence[EvalDoc]) -> list[Counter[str]]:
        raw = [
            Counter(spot_signatures(words(d.text), self.antecedents, self.chain, self.distance))
            for d in docs
        ]
        df: Counter[str] = Counter()
        for sig in raw:
            df.update(sig.keys())
        n = len(docs)
        top = math.log(n) if n > 1 else 1.0

        def keep(s: str) -> bool:
            nidf = math.log(n / df[s]) / top if n > 1 else 0.5
            return self.min_idf <= nidf <= self.max_idf

        return [Counter({s: c for s, c in sig.items() if keep(s)}) for sig in raw]

    def score(self, docs: Sequence[EvalDoc], min_threshold: float) -> PairScores:
        sigs = self.signatures(docs)
        sizes = [sum(s.values()) for s in sigs]
        n = len(docs)
        matrix = np.zeros((n, n), dtype=np.float32)
        usable = [i for i in range(n) if sizes[i] >= self.min_spotsigs]
        usable.sort(key=lambda i: sizes[i])
        postings: dict[str, list[int]] = {}
        rank = {doc: r for r, doc in enumerate(usable)}
        for doc in usable:
            for s in sigs[doc]:
                postings.setdefault(s, []).append(doc)
        tau = max(min_threshold, 0.0)
        compared = 0
        for doc in usable:
            small = sizes[doc]
            candidates: set[int] = set()
            for s in sigs[doc]:
                candidates.update(postings[s])
            for other in candidates:
                if rank[other] <= rank[doc] or small < tau * sizes[other]:
                    continue  # each pair once; partition bound |A|/|B| < tau prunes it
                compared += 1
                matrix[doc, other] = multiset_jaccard(sigs[doc], sigs[other], small, sizes[other])
        notes = [f"{n - len(usable)} documents with < {self.min_spotsigs} spot signatures"]
        return PairScores(symmetric(matrix), compared, notes)
