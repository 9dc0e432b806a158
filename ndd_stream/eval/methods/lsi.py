"""Latent semantic indexing (seed 001, Roul et al. §3.5 and Fig. 1 step 4): conceptual
similarity of the documents of a window.

Each document is a TF-IDF vector of its words (stop words removed; tf divided by the
document's length, as the seed does, times idf = ln(n / df) over the window), L2-normalised.
The truncated SVD X = U S V^T keeps the ``rank`` largest singular values; a document's
conceptual fingerprint is its row of U S, and two documents score the cosine of their
fingerprints (negative cosines score 0). Rewrites of one story that share few word
sequences but the same vocabulary score high; that is what the seed adds to textual
methods.

The SVD is taken through the n x n Gram matrix X X^T (``numpy.linalg.eigh``): its
eigenvectors are U and its eigenvalues S^2, so the cost is one sparse product and one
symmetric eigen-decomposition of the window's size, whatever the vocabulary.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ndd_stream.eval.documents import EvalDoc
from ndd_stream.eval.features import words
from ndd_stream.eval.methods.base import FloatMatrix, Method, PairScores, all_pairs_count
from ndd_stream.eval.stopwords import STOPWORDS

DEFAULT_RANK = 100


def gram(texts: Sequence[str]) -> npt.NDArray[np.float64]:
    """X X^T of the L2-normalised TF-IDF rows X (documents x terms).

    Only terms of two or more documents can make two rows meet, so the dense product is
    taken over those columns; the diagonal is 1 (unit rows; 0 for an empty document)."""
    counts = [Counter(t for t in words(text) if t not in STOPWORDS) for text in texts]
    df: Counter[str] = Counter()
    for c in counts:
        df.update(c.keys())
    n = len(texts)
    shared = {term: i for i, term in enumerate(sorted(t for t, k in df.items() if 1 < k < n))}
    x = np.zeros((n, len(shared)), dtype=np.float64)
    diagonal = np.zeros(n)
    for row, c in enumerate(counts):
        length = sum(c.values()) or 1
        weights = {term: tf / length * math.log(n / df[term]) for term, tf in c.items()}
        norm = math.sqrt(sum(w * w for w in weights.values()))
        if norm == 0:
            continue
        diagonal[row] = 1.0
        for term, w in weights.items():
            col = shared.get(term)
            if col is not None:
                x[row, col] = w / norm
    out = x @ x.T
    np.fill_diagonal(out, diagonal)
    return out


def fingerprints(texts: Sequence[str], rank: int = DEFAULT_RANK) -> npt.NDArray[np.float64]:
    """Rows of U S of the rank-``rank`` truncated SVD of the TF-IDF matrix."""
    if not texts:
        return np.zeros((0, 0))
    values, vectors = np.linalg.eigh(gram(texts))  # ascending
    keep = min(rank, len(texts))
    values, vectors = values[::-1][:keep], vectors[:, ::-1][:, :keep]
    singular = np.sqrt(np.clip(values, 0.0, None))
    # eigenvectors have an arbitrary sign: make each column's largest entry positive, so
    # fingerprints are deterministic (cosines do not depend on it)
    signs = np.sign(vectors[np.abs(vectors).argmax(axis=0), np.arange(keep)])
    signs[signs == 0] = 1.0
    return vectors * signs * singular


def cosine_matrix(prints: npt.NDArray[np.float64]) -> FloatMatrix:
    """max(0, cosine) of every pair of fingerprints; 0 on the diagonal."""
    norms = np.linalg.norm(prints, axis=1)
    norms[norms == 0] = 1.0
    unit = prints / norms[:, None]
    out = np.clip(unit @ unit.T, 0.0, 1.0).astype(np.float32)
    np.fill_diagonal(out, 0.0)
    return out


class LSI(Method):
    name = "lsi"
    reference = "Roul et al. (seed 001): TF-IDF + truncated SVD, cosine of concept vectors"

    def __init__(self, rank: int = DEFAULT_RANK) -> None:
        self.rank = rank

    def describe(self) -> dict[str, object]:
        return {"rank": self.rank, "weights": "tf/len x ln(n/df), stop words removed",
                "svd": "over the evaluated documents (the window)"}

    def score(self, docs: Sequence[EvalDoc], min_threshold: float) -> PairScores:
        matrix = cosine_matrix(fingerprints([d.text for d in docs], self.rank))
        return PairScores(matrix, all_pairs_count(len(docs)),
                          [f"LSI rank {min(self.rank, len(docs))} over {len(docs)} documents"])
