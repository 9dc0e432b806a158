"""Names of the compared methods, as accepted by ``--methods``."""

from __future__ import annotations

from collections.abc import Callable

from ndd_stream.eval.methods.base import Method
from ndd_stream.eval.methods.ddd import DDD
from ndd_stream.eval.methods.imatch import IMatch, KolczIMatch
from ndd_stream.eval.methods.minhash_lsh import MinHashLSHMethod
from ndd_stream.eval.methods.shingling import Shingling
from ndd_stream.eval.methods.signcd import NCD, SigNCD
from ndd_stream.eval.methods.simhash import SimHash, TfIdfSimHash
from ndd_stream.eval.methods.spotsigs import SpotSigs
from ndd_stream.eval.methods.string_measures import (
    LevenshteinMeasure,
    RankDistanceMeasure,
    SmithWatermanMeasure,
)

FACTORIES: dict[str, Callable[[], Method]] = {
    "ddd": DDD,
    "shingling": Shingling,
    "minhash-lsh": MinHashLSHMethod,
    "simhash": SimHash,
    "simhash-tfidf": TfIdfSimHash,
    "imatch": IMatch,
    "imatch-kolcz": KolczIMatch,
    "spotsigs": SpotSigs,
    "signcd": SigNCD,
    "ncd": NCD,
    "levenshtein": LevenshteinMeasure,
    "smith-waterman": SmithWatermanMeasure,
    "rank-distance": RankDistanceMeasure,
    "levenshtein-title": lambda: LevenshteinMeasure(field="title", candidate_min=0.0),
}
DEFAULT_METHODS: tuple[str, ...] = tuple(FACTORIES)


def make(name: str, ddd_window_hours: int = 24) -> Method:
    """A fresh method by its CLI name."""
    if name not in FACTORIES:
        raise KeyError(f"unknown method {name!r}; choose from {', '.join(FACTORIES)}")
    if name == "ddd":
        return DDD(window_hours=ddd_window_hours)
    return FACTORIES[name]()
