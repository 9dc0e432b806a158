"""Charikar's 64-bit SimHash, plain and TF-IDF weighted on word 3-shingles (seed 001).

A fingerprint bit is the sign of the weighted sum of that bit over the feature hashes
(+w for a 1 bit, -w for a 0 bit). Similar documents differ in few bits; the score is
1 - Hamming distance / 64, so Manku et al.'s "k <= 3 bits" rule is threshold 61/64 = 0.953.

* ``simhash``: features are word tokens weighted by their term frequency (Charikar 2002,
  as used by Manku et al. 2007 and the "Google's simhash" baseline of seed 003).
* ``simhash-tfidf``: seed 001 (Roul et al.): stop words removed, word 3-shingles hashed,
  weights tf / document length x idf over the evaluated collection.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ndd_stream.eval.documents import EvalDoc
from ndd_stream.eval.features import hash64, words
from ndd_stream.eval.methods.base import Method, PairScores, all_pairs_count
from ndd_stream.eval.stopwords import STOPWORDS

_BITS = 64


def fingerprint(weights: dict[str, float]) -> int:
    """Charikar fingerprint of weighted features (0 for a document without features)."""
    if not weights:
        return 0
    hashes = np.array([hash64(f) for f in weights], dtype=np.uint64)
    w = np.array(list(weights.values()), dtype=np.float64)
    bits = np.unpackbits(hashes.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    totals = (w[:, None] * (2.0 * bits - 1.0)).sum(axis=0)
    packed = np.packbits(totals > 0, bitorder="little")
    return int(packed.view(np.uint64)[0])


def hamming_similarity(prints: npt.NDArray[np.uint64]) -> npt.NDArray[np.float32]:
    """1 - popcount(a XOR b) / 64 for all pairs of fingerprints."""
    xor = prints[:, None] ^ prints[None, :]
    distance = np.bitwise_count(xor).astype(np.float32)
    return (1.0 - distance / _BITS).astype(np.float32)


class SimHash(Method):
    name = "simhash"
    reference = "Charikar 2002 / Manku et al. 2007: 64-bit SimHash, Hamming distance"

    def describe(self) -> dict[str, object]:
        return {"bits": _BITS, "features": "word tokens, tf weights"}

    def score(self, docs: Sequence[EvalDoc], min_threshold: float) -> PairScores:
        prints = np.array(
            [fingerprint(dict(Counter(words(d.text)))) for d in docs], dtype=np.uint64
        )
        return PairScores(hamming_similarity(prints), all_pairs_count(len(docs)))


class TfIdfSimHash(Method):
    name = "simhash-tfidf"
    reference = "Roul et al. (seed 001): TF-IDF weighted SimHash of word 3-shingles"

    def __init__(self, width: int = 3) -> None:
        self.width = width

    def describe(self) -> dict[str, object]:
        return {"bits": _BITS, "shingle_words": self.width, "weights": "tf/len x idf"}

    def score(self, docs: Sequence[EvalDoc], min_threshold: float) -> PairScores:
        grams: list[Counter[str]] = []
        for d in docs:
            tokens = [t for t in words(d.text) if t not in STOPWORDS]
            w = self.width
            grams.append(Counter(" ".join(tokens[i : i + w]) for i in range(len(tokens) - w + 1)))
        df: Counter[str] = Counter()
        for g in grams:
            df.update(g.keys())
        n = max(len(docs), 1)
        prints = []
        for g in grams:
            length = sum(g.values()) or 1
            # +1 smoothing keeps shingles found in every document from weighing exactly 0.
            weights = {f: c / length * math.log((n + 1) / df[f]) for f, c in g.items()}
            prints.append(fingerprint(weights))
        matrix = hamming_similarity(np.array(prints, dtype=np.uint64))
        return PairScores(matrix, all_pairs_count(len(docs)))
