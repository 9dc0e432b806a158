"""Shared text features and all-pairs set arithmetic for the baseline methods.

Word tokens are case-folded runs of letters/digits (any script). Set intersections for all
pairs are computed as a blocked dense product of the document-feature incidence matrix,
restricted to features that occur in at least two documents (the others cannot be shared),
so shingle sets of a few thousand documents take well under a second with BLAS.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt
import regex

FloatMatrix = npt.NDArray[np.float32]
_WORD = regex.compile(r"[\p{L}\p{M}\p{N}]+")


def words(text: str) -> list[str]:
    """Case-folded word tokens of ``text`` (letters, marks and digits of every script)."""
    return _WORD.findall(text.casefold())


def shingles(tokens: Sequence[str], width: int) -> set[str]:
    """Distinct contiguous word ``width``-shingles; a shorter text is one shingle."""
    if not tokens:
        return set()
    if len(tokens) <= width:
        return {" ".join(tokens)}
    return {" ".join(tokens[i : i + width]) for i in range(len(tokens) - width + 1)}


def hash64(feature: str) -> int:
    """Stable 64-bit hash (blake2b), independent of PYTHONHASHSEED."""
    return int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")


def feature_ids(feature_sets: Sequence[Iterable[str]]) -> list[npt.NDArray[np.int64]]:
    """Map features to dense integer ids shared by all documents (sorted unique per doc)."""
    vocabulary: dict[str, int] = {}
    out: list[npt.NDArray[np.int64]] = []
    for features in feature_sets:
        ids = [vocabulary.setdefault(f, len(vocabulary)) for f in features]
        out.append(np.unique(np.asarray(ids, dtype=np.int64)))
    return out


def intersection_matrix(id_sets: Sequence[npt.NDArray[np.int64]], block: int = 4096) -> FloatMatrix:
    """|A_i ∩ A_j| for all pairs, as an n x n float32 matrix (diagonal = |A_i|)."""
    n = len(id_sets)
    sizes = np.array([ids.size for ids in id_sets], dtype=np.float32)
    result = np.zeros((n, n), dtype=np.float32)
    if n == 0:
        return result
    doc_of = np.concatenate([np.full(ids.size, i, dtype=np.int64) for i, ids in enumerate(id_sets)])
    feat = np.concatenate(list(id_sets)) if doc_of.size else np.zeros(0, dtype=np.int64)
    if feat.size:
        df = np.bincount(feat)
        keep = df[feat] >= 2
        doc_of, feat = doc_of[keep], feat[keep]
        shared = np.flatnonzero(df >= 2)
        remap = np.full(df.size, -1, dtype=np.int64)
        remap[shared] = np.arange(shared.size)
        feat = remap[feat]
        for start in range(0, shared.size, block):
            stop = min(start + block, shared.size)
            sel = (feat >= start) & (feat < stop)
            dense = np.zeros((n, stop - start), dtype=np.float32)
            dense[doc_of[sel], feat[sel] - start] = 1.0
            result += dense @ dense.T
    np.fill_diagonal(result, sizes)
    return result


def jaccard_matrix(id_sets: Sequence[npt.NDArray[np.int64]]) -> FloatMatrix:
    """Jaccard resemblance |A ∩ B| / |A ∪ B| for all pairs (0 when both are empty)."""
    inter = intersection_matrix(id_sets)
    sizes = np.diag(inter).copy()
    union = sizes[:, None] + sizes[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(union > 0, inter / union, 0.0).astype(np.float32)
    return out


def document_frequencies(feature_sets: Sequence[Iterable[str]]) -> dict[str, int]:
    """How many documents contain each feature."""
    df: dict[str, int] = {}
    for features in feature_sets:
        for f in set(features):
            df[f] = df.get(f, 0) + 1
    return df
