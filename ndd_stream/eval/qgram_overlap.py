"""doc_q of all pairs at once, for candidate generation (blocking) of costly verifiers.

Uses the core's normal form and signatures, and one blocked matrix product of q-gram
incidence instead of n^2 calls; equals :func:`ndd_stream.core.similarity.doc_q` exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ndd_stream.core.normalize import normal_form
from ndd_stream.core.qgrams import signature
from ndd_stream.eval.features import intersection_matrix


def qgram_overlap_matrix(
    texts: Sequence[str], q: int = 4, case_sensitive: bool = False
) -> npt.NDArray[np.float32]:
    """|A ∩ B| / max(|A|, |B|) over q-gram signatures, for all pairs."""
    sigs = [signature(normal_form(t, case_sensitive), q) for t in texts]
    codes = np.concatenate(sigs) if sigs else np.zeros(0, dtype=np.uint64)
    _, inverse = np.unique(codes, return_inverse=True)
    bounds = np.cumsum([0] + [s.size for s in sigs])
    ids = [inverse[bounds[k] : bounds[k + 1]].astype(np.int64) for k in range(len(sigs))]
    inter = intersection_matrix(ids)
    sizes = np.diag(inter).copy()
    denom = np.maximum(sizes[:, None], sizes[None, :])
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(denom > 0, inter / denom, 0.0).astype(np.float32)
    np.fill_diagonal(out, 0.0)
    return out
