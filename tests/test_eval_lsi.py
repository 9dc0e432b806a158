"""LSI (seed 001) as an evaluation method: the SVD through the Gram matrix is the SVD."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from ndd_stream.eval.documents import EvalDoc
from ndd_stream.eval.features import words
from ndd_stream.eval.methods.lsi import LSI, cosine_matrix, fingerprints, gram
from ndd_stream.eval.methods.registry import make
from ndd_stream.eval.stopwords import STOPWORDS

TEXTS = [
    "The central bank cut its discount rate to help exporters hurt by the strong currency.",
    "Exporters hurt by the strong currency got help as the central bank cut its discount rate.",
    "Heavy rain flooded the lower town overnight and the river rose above its banks.",
    "The river rose above its banks overnight after heavy rain flooded the lower town.",
    "Shares of the airline rose after it reported a record quarterly profit.",
    "",
]


def _dense_tfidf(texts: list[str]) -> np.ndarray:
    """The TF-IDF matrix over every term, straight from the seed's definition."""
    counts = [Counter(t for t in words(x) if t not in STOPWORDS) for x in texts]
    vocab = sorted({t for c in counts for t in c})
    n = len(texts)
    df = {t: sum(t in c for c in counts) for t in vocab}
    x = np.array([[c[t] / (sum(c.values()) or 1) * math.log(n / df[t]) for t in vocab]
                  for c in counts])
    norms = np.linalg.norm(x, axis=1)
    norms[norms == 0] = 1
    return x / norms[:, None]


def test_gram_equals_the_full_product() -> None:
    x = _dense_tfidf(TEXTS)
    assert np.allclose(gram(TEXTS), x @ x.T)


def test_fingerprints_are_the_truncated_svd() -> None:
    x = _dense_tfidf(TEXTS)
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    for rank in (2, 4):
        want = cosine_matrix(u[:, :rank] * s[:rank])
        assert np.allclose(cosine_matrix(fingerprints(TEXTS, rank)), want, atol=1e-6)


def test_rewrites_score_higher_than_other_stories() -> None:
    docs = [EvalDoc(str(i), str(i // 2), t, "", float(i)) for i, t in enumerate(TEXTS[:5])]
    method = make("lsi")
    assert isinstance(method, LSI)
    m = LSI(rank=3).score(docs, 0.0).matrix
    assert m[0, 1] > 0.9 and m[2, 3] > 0.9
    assert max(m[0, 2], m[0, 4], m[2, 4]) < 0.5
    assert np.allclose(m, m.T) and (np.diag(m) == 0).all()
