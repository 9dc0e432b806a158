"""Broder's resemblance on word w-shingles (Broder et al. 1997; seeds 000, 004).

Resemblance r(A, B) = |S(A) ∩ S(B)| / |S(A) ∪ S(B)| over the sets of contiguous word
w-shingles. Exact (no sampling), so it is the reference that MinHash/LSH approximates.
"""

from __future__ import annotations

from collections.abc import Sequence

from ndd_stream.eval.documents import EvalDoc
from ndd_stream.eval.features import feature_ids, jaccard_matrix, shingles, words
from ndd_stream.eval.methods.base import Method, PairScores, all_pairs_count


class Shingling(Method):
    name = "shingling"
    reference = "Broder et al. 1997, resemblance of word w-shingles (seeds 000, 004)"

    def __init__(self, width: int = 4) -> None:
        self.width = width

    def describe(self) -> dict[str, object]:
        return {"shingle_words": self.width}

    def score(self, docs: Sequence[EvalDoc], min_threshold: float) -> PairScores:
        ids = feature_ids([shingles(words(d.text), self.width) for d in docs])
        return PairScores(jaccard_matrix(ids), all_pairs_count(len(docs)))
