"""Names of the compared methods, as accepted by ``--methods``.

``minhash-lsh`` needs datasketch (and with it scipy), which only the ``eval`` extra
installs: without it the method is left out of the default list, and asking for it by
name says what to install.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from ndd_stream.eval.methods.base import Method
from ndd_stream.eval.methods.ddd import DDD
from ndd_stream.eval.methods.imatch import IMatch, KolczIMatch
from ndd_stream.eval.methods.lsi import LSI
from ndd_stream.eval.methods.shingling import Shingling
from ndd_stream.eval.methods.signcd import NCD, SigNCD
from ndd_stream.eval.methods.simhash import SimHash, TfIdfSimHash
from ndd_stream.eval.methods.spotsigs import SpotSigs
from ndd_stream.eval.methods.string_measures import (
    LevenshteinMeasure,
    RankDistanceMeasure,
    SmithWatermanMeasure,
)


def _minhash_lsh() -> Method:
    from ndd_stream.eval.methods.minhash_lsh import MinHashLSHMethod

    return MinHashLSHMethod()


FACTORIES: dict[str, Callable[[], Method]] = {
    "ddd": DDD,
    "shingling": Shingling,
    "minhash-lsh": _minhash_lsh,
    "simhash": SimHash,
    "simhash-tfidf": TfIdfSimHash,
    "lsi": LSI,
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
#: Methods that need a package outside the base install: method -> import name.
NEEDS: dict[str, str] = {"minhash-lsh": "datasketch"}


def missing_package(name: str) -> str | None:
    """The package ``name`` needs and that is not installed, else None."""
    package = NEEDS.get(name)
    if package is None or importlib.util.find_spec(package) is not None:
        return None
    return package


DEFAULT_METHODS: tuple[str, ...] = tuple(n for n in FACTORIES if missing_package(n) is None)


def make(name: str, ddd_window_hours: int = 24) -> Method:
    """A fresh method by its CLI name."""
    if name not in FACTORIES:
        raise KeyError(f"unknown method {name!r}; choose from {', '.join(FACTORIES)}")
    if name == "ddd":
        return DDD(window_hours=ddd_window_hours)
    return FACTORIES[name]()
