"""I-Match (Chowdhury et al. 2002) and Kolcz et al.'s lexicon randomization (seed 004).

I-Match keeps only the words of a document whose normalised IDF (idf / max idf over the
collection) lies inside ``[min_nidf, max_nidf]`` -- dropping very common and one-off words --
sorts the distinct survivors and hashes them into a single SHA1 digest; equal digests are
duplicates. It is binary: one operating point, no threshold.

Kolcz et al. (2004) make it less brittle with K extra lexicons, each the I-Match lexicon with a
random fraction ``drop`` of its words removed; documents are duplicates if any of the K+1
digests agree. Here the score is the fraction of agreeing digests, so Kolcz's "any" rule is
the threshold 1/(K+1) and the sweep shows what stricter agreement buys.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence

import numpy as np

from ndd_stream.eval.documents import EvalDoc
from ndd_stream.eval.features import document_frequencies, words
from ndd_stream.eval.methods.base import Method, PairScores, all_pairs_count


def _lexicon(token_sets: Sequence[set[str]], min_nidf: float, max_nidf: float) -> set[str]:
    df = document_frequencies(token_sets)
    n = len(token_sets)
    if n < 2:
        return set(df)
    top = math.log(n)
    return {t for t, f in df.items() if min_nidf <= math.log(n / f) / top <= max_nidf}


def digest(tokens: set[str], lexicon: set[str]) -> bytes | None:
    """SHA1 of the sorted distinct lexicon words of a document; None when none survive."""
    kept = sorted(tokens & lexicon)
    if not kept:
        return None
    sha = hashlib.sha1(usedforsecurity=False)
    for t in kept:
        sha.update(t.encode())
        sha.update(b"\x00")
    return sha.digest()


def _agreement(digests: list[list[bytes | None]]) -> np.ndarray:
    """Fraction of lexicons on which each pair's digests agree (None never agrees)."""
    n = len(digests)
    k = len(digests[0]) if digests else 0
    out = np.zeros((n, n), dtype=np.float32)
    for lex in range(k):
        groups: dict[bytes, list[int]] = {}
        for i in range(n):
            d = digests[i][lex]
            if d is not None:
                groups.setdefault(d, []).append(i)
        for members in groups.values():
            if len(members) > 1:
                idx = np.array(members)
                out[np.ix_(idx, idx)] += 1.0
    if k:
        out /= k
    np.fill_diagonal(out, 0.0)
    return out


class IMatch(Method):
    name = "imatch"
    reference = "Chowdhury et al. 2002: I-Match, IDF-filtered single SHA1 digest (seed 004)"
    binary = True

    def __init__(self, min_nidf: float = 0.2, max_nidf: float = 0.99) -> None:
        self.min_nidf = min_nidf
        self.max_nidf = max_nidf

    def describe(self) -> dict[str, object]:
        return {"min_nidf": self.min_nidf, "max_nidf": self.max_nidf}

    def score(self, docs: Sequence[EvalDoc], min_threshold: float) -> PairScores:
        tokens = [set(words(d.text)) for d in docs]
        lexicon = _lexicon(tokens, self.min_nidf, self.max_nidf)
        matrix = _agreement([[digest(t, lexicon)] for t in tokens])
        return PairScores(matrix, all_pairs_count(len(docs)), [f"lexicon: {len(lexicon)} words"])


class KolczIMatch(IMatch):
    name = "imatch-kolcz"
    reference = "Kolcz et al. 2004: I-Match with K randomized lexicons (seed 004)"
    binary = False

    def __init__(
        self,
        min_nidf: float = 0.2,
        max_nidf: float = 0.99,
        lexicons: int = 10,
        drop: float = 0.33,
        seed: int = 7,
    ) -> None:
        super().__init__(min_nidf, max_nidf)
        self.lexicons = lexicons
        self.drop = drop
        self.seed = seed

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "extra_lexicons": self.lexicons, "drop": self.drop}

    def score(self, docs: Sequence[EvalDoc], min_threshold: float) -> PairScores:
        tokens = [set(words(d.text)) for d in docs]
        base = _lexicon(tokens, self.min_nidf, self.max_nidf)
        rng = random.Random(self.seed)
        ordered = sorted(base)
        lexicons = [base] + [
            {t for t in ordered if rng.random() >= self.drop} for _ in range(self.lexicons)
        ]
        digests = [[digest(t, lex) for lex in lexicons] for t in tokens]
        matrix = _agreement(digests)
        rule = 1.0 / len(lexicons)
        note = f"Kolcz's any-digest rule = threshold {rule:.3f}"
        return PairScores(matrix, all_pairs_count(len(docs)), [note])
