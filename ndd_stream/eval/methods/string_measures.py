"""Pairwise string measures of seed 002 (Danila et al. 2012), used as verifiers.

* ``levenshtein``: 1 - edit distance / max length (rapidfuzz, bit-parallel).
* ``smith-waterman``: best local alignment score (match +2, mismatch -1, gap -1, as in the
  paper) divided by 2 x the shorter length; the paper's near-match rule d >= min(na, nb) is
  the threshold 0.5.
* ``rank-distance``: Dinu's rank distance over indexed characters, normalised by na x nb;
  the paper's rule d <= na nb / 2 is the threshold 0.5. Score = 1 - min(1, d / (na nb)).

These cost O(n m) or close to it per pair, so they are run only on candidate pairs: pairs
whose q-gram overlap |A ∩ B| / max(|A|, |B|) (DDD's doc_q, computed in one matrix product)
reaches ``candidate_min``; other pairs score 0. ``field="title"`` compares titles instead of
texts. Smith-Waterman compares at most the first ``max_chars`` characters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
import regex
from rapidfuzz.distance import Levenshtein

from ndd_stream.eval.documents import EvalDoc
from ndd_stream.eval.methods.base import Method, PairScores, symmetric
from ndd_stream.eval.qgram_overlap import qgram_overlap_matrix

Field = Literal["text", "title"]
_SPACE = regex.compile(r"\s+")


def clean(text: str) -> str:
    """Case-folded text with runs of white space collapsed (formatting is not content)."""
    return _SPACE.sub(" ", text.casefold()).strip()


def levenshtein_similarity(a: str, b: str) -> float:
    return float(Levenshtein.normalized_similarity(a, b))


def _indexed(s: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Keys (character, occurrence number) and their 1-based ranks, for rank distance."""
    cps = np.frombuffer(s.encode("utf-32-le"), dtype="<u4").astype(np.int64)
    order = np.argsort(cps, kind="stable")
    sorted_cps = cps[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_cps)) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, sorted_cps.size]))
    occurrence = np.empty_like(cps)
    occurrence[order] = np.arange(cps.size) - run_start
    keys = cps * (1 << 32) + occurrence
    return keys, np.arange(1, cps.size + 1, dtype=np.int64)


Indexed = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


def rank_distance(a: str, b: str) -> int:
    """Dinu's rank distance: shared indexed letters by rank shift, unshared by rank."""
    return _rank_distance(_indexed(a), _indexed(b))


def _rank_distance(ia_: Indexed, ib_: Indexed) -> int:
    ka, ra = ia_
    kb, rb = ib_
    _, ia, ib = np.intersect1d(ka, kb, assume_unique=True, return_indices=True)
    shared = int(np.abs(ra[ia] - rb[ib]).sum())
    only_a = int(ra.sum() - ra[ia].sum())
    only_b = int(rb.sum() - rb[ib].sum())
    return shared + only_a + only_b


def rank_similarity(a: str, b: str) -> float:
    if not a or not b:
        return 1.0 if a == b else 0.0
    return 1.0 - min(1.0, rank_distance(a, b) / (len(a) * len(b)))


def _rank_similarity_indexed(ia_: Indexed, ib_: Indexed) -> float:
    na, nb = ia_[0].size, ib_[0].size
    if not na or not nb:
        return 1.0 if na == nb else 0.0
    return 1.0 - min(1.0, _rank_distance(ia_, ib_) / (na * nb))


def smith_waterman_batch(
    pairs: Sequence[tuple[str, str]], match: int = 2, mismatch: int = -1, gap: int = 1
) -> npt.NDArray[np.float32]:
    """Best local alignment score of each pair, many pairs at once (vectorised rows).

    Row recurrence with the horizontal gap chain solved as a running maximum:
    H[i, j] = max_k<=j (T[k] - gap (j - k)) where T = max(0, diag + s, up - gap).
    Padding never matches, so it cannot raise a pair's maximum.
    """
    if not pairs:
        return np.zeros(0, dtype=np.float32)
    la = max(len(a) for a, _ in pairs)
    lb = max(len(b) for _, b in pairs)
    a_codes = np.full((len(pairs), la), -1, dtype=np.int64)
    b_codes = np.full((len(pairs), lb), -2, dtype=np.int64)
    for p, (a, b) in enumerate(pairs):
        a_codes[p, : len(a)] = np.frombuffer(a.encode("utf-32-le"), dtype="<u4")
        b_codes[p, : len(b)] = np.frombuffer(b.encode("utf-32-le"), dtype="<u4")
    h_prev = np.zeros((len(pairs), lb + 1), dtype=np.int64)
    best = np.zeros(len(pairs), dtype=np.int64)
    ramp = gap * np.arange(lb + 1, dtype=np.int64)
    for i in range(la):
        s = np.where(b_codes == a_codes[:, i : i + 1], match, mismatch)
        t = np.zeros_like(h_prev)
        t[:, 1:] = np.maximum(0, np.maximum(h_prev[:, :-1] + s, h_prev[:, 1:] - gap))
        h = np.maximum.accumulate(t + ramp, axis=1) - ramp
        best = np.maximum(best, h.max(axis=1))
        h_prev = h
    return best.astype(np.float32)


class StringMeasure(Method):
    """A seed-002 string measure, verifying candidate pairs from the q-gram overlap."""

    measure: str = "levenshtein"

    def __init__(
        self, field: Field = "text", candidate_min: float = 0.2, max_chars: int = 400
    ) -> None:
        self.field = field
        if field == "title":
            self.name = f"{self.measure}-title"
        self.candidate_min = candidate_min
        self.max_chars = max_chars

    def describe(self) -> dict[str, object]:
        return {
            "field": self.field,
            "candidates": f"q-gram doc_q >= {self.candidate_min}",
            "max_chars": self.max_chars if self.measure == "smith-waterman" else None,
        }

    def _strings(self, docs: Sequence[EvalDoc]) -> list[str]:
        strings = [clean(d.title if self.field == "title" else d.text) for d in docs]
        if self.measure == "smith-waterman":
            strings = [s[: self.max_chars] for s in strings]
        return strings

    def score(self, docs: Sequence[EvalDoc], min_threshold: float) -> PairScores:
        n = len(docs)
        overlap = qgram_overlap_matrix([d.text for d in docs])
        ii, jj = np.nonzero(np.triu(overlap >= self.candidate_min, 1))
        strings = self._strings(docs)
        matrix = np.zeros((n, n), dtype=np.float32)
        pairs = list(zip(ii.tolist(), jj.tolist(), strict=True))
        if self.measure == "smith-waterman":
            for start in range(0, len(pairs), 256):
                chunk = pairs[start : start + 256]
                scores = smith_waterman_batch([(strings[i], strings[j]) for i, j in chunk])
                for (i, j), sc in zip(chunk, scores, strict=True):
                    shorter = min(len(strings[i]), len(strings[j]))
                    matrix[i, j] = min(1.0, sc / (2 * shorter)) if shorter else 0.0
        elif self.measure == "rank-distance":
            indexed = [_indexed(s) for s in strings]
            for i, j in pairs:
                matrix[i, j] = _rank_similarity_indexed(indexed[i], indexed[j])
        else:
            for i, j in pairs:
                matrix[i, j] = levenshtein_similarity(strings[i], strings[j])
        note = (
            f"verifier: {len(pairs)} candidate pairs with q-gram doc_q >= {self.candidate_min} "
            f"on {self.field}; all other pairs score 0"
        )
        return PairScores(symmetric(matrix), len(pairs), [note])


class LevenshteinMeasure(StringMeasure):
    name = "levenshtein"
    reference = "Levenshtein 1966, normalised (seed 002), rapidfuzz"
    measure = "levenshtein"


class SmithWatermanMeasure(StringMeasure):
    name = "smith-waterman"
    reference = "Smith & Waterman 1981, local alignment (seed 002)"
    measure = "smith-waterman"


class RankDistanceMeasure(StringMeasure):
    name = "rank-distance"
    reference = "Dinu 2003, rank distance (seed 002)"
    measure = "rank-distance"
