"""SigNCD (Zhang et al. 2016, seed 003) and plain NCD on the whole text.

NCD(x, y) = (C(xy) - min(C(x), C(y))) / max(C(x), C(y)) with a fast real compressor C
(lz4 when installed, as the paper's Snappy/lz4 choice, else zstandard level 1). SigNCD applies
it to a punctuation-spot signature instead of the whole text: the word before each comma
(Sig-1L, the paper's default); a text with fewer than three commas is used whole. The score
is 1 - NCD, clipped to [0, 1], so the paper's distance threshold tau is similarity 1 - tau.

P1 pruning (Lemma 3): NCD(x, y) >= 1 - C(x)/C(y) for C(x) <= C(y), so after sorting by C a
pair with C(x)/C(y) below the lowest similarity threshold of the sweep is skipped without
compressing the concatenation. The paper's ``checked`` shortcut (skip documents already
matched) is a clustering shortcut and is not used: every surviving pair is scored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from ndd_stream.eval.documents import EvalDoc
from ndd_stream.eval.methods.base import Method, PairScores, symmetric

Compressor = Callable[[bytes], int]
_BEFORE_COMMA = re.compile(r"([^\W_]+)[^\w,]*,", re.UNICODE)


def compressor() -> tuple[str, Compressor]:
    """The fastest available compressor: lz4 if installed, else zstandard level 1."""
    try:
        import lz4.block

        def lz4_size(data: bytes) -> int:
            return len(lz4.block.compress(data, store_size=False))

        return "lz4", lz4_size
    except ImportError:
        import zstandard

        engine = zstandard.ZstdCompressor(
            level=1, write_checksum=False, write_content_size=False, write_dict_id=False
        )

        def zstd_size(data: bytes) -> int:
            return len(engine.compress(data))

        return "zstd-1", zstd_size


def comma_signature(text: str, min_commas: int = 3) -> str:
    """Sig-1L: the word before every comma; the whole text when commas are too few."""
    found = _BEFORE_COMMA.findall(text)
    if len(found) < min_commas:
        return text
    return " ".join(found)


def ncd(cx: int, cy: int, cxy: int) -> float:
    big = max(cx, cy)
    return (cxy - min(cx, cy)) / big if big else 0.0


class SigNCD(Method):
    name = "signcd"
    reference = "Zhang et al. 2016 (seed 003): NCD of comma-spot signatures, P1 pruning"

    def __init__(self, use_signature: bool = True, prune: bool = True) -> None:
        self.use_signature = use_signature
        self.prune = prune
        self.compressor_name, self._size = compressor()

    def describe(self) -> dict[str, object]:
        return {
            "signature": "Sig-1L (word before each comma)" if self.use_signature else "full text",
            "compressor": self.compressor_name,
            "pruning": "P1" if self.prune else "none",
        }

    def score(self, docs: Sequence[EvalDoc], min_threshold: float) -> PairScores:
        texts = [comma_signature(d.text) if self.use_signature else d.text for d in docs]
        data = [t.encode("utf-8") for t in texts]
        sizes = np.array([self._size(b) if b else 0 for b in data], dtype=np.int64)
        order = np.argsort(sizes, kind="stable")
        n = len(docs)
        matrix = np.zeros((n, n), dtype=np.float32)
        compared = 0
        bound = max(min_threshold, 0.0) if self.prune else 0.0
        for a_pos, a in enumerate(order):
            ca = int(sizes[a])
            for b in order[a_pos + 1 :]:
                cb = int(sizes[b])
                if cb and ca / cb < bound:
                    break  # P1: every later document is larger still
                compared += 1
                cab = self._size(data[a] + b" " + data[b])
                matrix[a, b] = min(1.0, max(0.0, 1.0 - ncd(ca, cb, cab)))
        return PairScores(symmetric(matrix), compared)


class NCD(SigNCD):
    name = "ncd"
    reference = "Cilibrasi & Vitanyi 2005: NCD of the whole text (baseline of seed 003)"

    def __init__(self) -> None:
        super().__init__(use_signature=False, prune=True)
