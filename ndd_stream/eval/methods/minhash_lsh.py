"""MinHash with LSH banding (datasketch), the "LSH" baseline of seed 000's Fig. 5.

Each document's word w-shingle set is summarised by ``num_perm`` min-hashes; a
:class:`datasketch.MinHashLSH` index built for the sweep's lowest threshold proposes candidate
pairs (band collisions), and each candidate is scored with the MinHash estimate of its Jaccard
resemblance. Pairs the index never proposes score 0: that is LSH's own false-negative rate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from datasketch import MinHash, MinHashLSH

from ndd_stream.eval.documents import EvalDoc
from ndd_stream.eval.features import shingles, words
from ndd_stream.eval.methods.base import Method, PairScores, symmetric


class MinHashLSHMethod(Method):
    name = "minhash-lsh"
    reference = "Indyk & Motwani 1998 / Broder 1997: MinHash LSH (datasketch), seed 000 Fig. 5"

    def __init__(self, width: int = 4, num_perm: int = 128, seed: int = 1) -> None:
        self.width = width
        self.num_perm = num_perm
        self.seed = seed

    def describe(self) -> dict[str, object]:
        return {"shingle_words": self.width, "num_perm": self.num_perm, "seed": self.seed}

    def score(self, docs: Sequence[EvalDoc], min_threshold: float) -> PairScores:
        sets = [[s.encode() for s in shingles(words(d.text), self.width)] for d in docs]
        hashes = MinHash.bulk(sets, num_perm=self.num_perm, seed=self.seed)
        lsh = MinHashLSH(threshold=min(max(min_threshold, 0.05), 1.0), num_perm=self.num_perm)
        for i, mh in enumerate(hashes):
            if not sets[i]:
                continue
            lsh.insert(i, mh)
        values = np.stack([mh.hashvalues for mh in hashes]) if hashes else np.zeros((0, 1))
        n = len(docs)
        matrix = np.zeros((n, n), dtype=np.float32)
        compared = 0
        for i, mh in enumerate(hashes):
            if not sets[i]:
                continue
            partners = np.array(sorted(j for j in lsh.query(mh) if j > i), dtype=np.int64)
            if partners.size == 0:
                continue
            compared += int(partners.size)
            matrix[i, partners] = (values[partners] == values[i]).mean(axis=1)
        b, r = lsh.b, lsh.r
        note = f"LSH bands x rows = {b} x {r} (tuned by datasketch for t={min_threshold:.2f})"
        return PairScores(symmetric(matrix), compared, [note])
