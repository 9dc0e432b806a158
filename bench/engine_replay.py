"""The flat index alone on the Reuters day: its cost per decision, without the rest.

    python -m bench.engine_replay [--thresholds 0.3 0.8] [--dense-fraction F]

Signatures of the Reuters-in-one-day stream (bench/corpora.py) are computed first; then
each item is looked up (``FlatIndex.best``) and indexed as the detector does
(``FlatIndex.add_ordered``: its prefix under the current order, the order's counts, and its
packed normal form) in arrival order, one scope, with the CPU time of each call summed.
Prints microseconds per lookup and per add, the postings (and dense-row words) read per
lookup and how many items found a match at doc_q >= t (before the novelty rule).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ndd_stream.core import kernels
from ndd_stream.core.engine import FlatIndex, available
from ndd_stream.core.kernels import DEFAULT_DENSE_FRACTION
from ndd_stream.core.order import EARLY_SNAPSHOTS_AT, FrequencyBook
from ndd_stream.core.qgrams import Codes, fmix64, signature
from ndd_stream.core.similarity import extended_prefix, min_overlap, size_bounds


def replay(items: list[tuple[bytes | None, Codes]], threshold: float,
           dense_fraction: float) -> str:
    index = FlatIndex(threshold, dense_fraction)
    book = FrequencyBook(snapshots_at=EARLY_SNAPSHOTS_AT)
    looked = added = 0.0
    postings = found = 0
    for packed, sig in items:
        n = int(sig.size)
        mixed = fmix64(sig)
        length = extended_prefix(n, threshold)
        started = time.process_time()
        match = index.best(mixed, sig, min_overlap(n, threshold), 0, (0, 0),
                           size_bounds(n, threshold))
        looked += time.process_time() - started
        postings += match.postings
        found += match.number >= 0
        started = time.process_time()
        index.add_ordered(mixed, sig, 0, min_overlap(n, threshold), length,
                          None if index.full else book.current,
                          None if index.full else book, packed)
        added += time.process_time() - started
    k = len(items)
    return (f"| {threshold} | {k} | {looked * 1e6 / k:.1f} | {added * 1e6 / k:.1f} | "
            f"{postings / k:,.0f} | {found} | {index.nbytes / 2**20:.0f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.3, 0.8])
    ap.add_argument("--dense-fraction", type=float, default=DEFAULT_DENSE_FRACTION)
    args = ap.parse_args(argv)
    if not available():
        raise SystemExit("bench.engine_replay: the C kernels are not built")
    from bench.corpora import reuters_stream
    from ndd_stream.core.normalize import normal_form

    pack = kernels._C.pack_text  # type: ignore[attr-defined]
    items = [(pack(nf), s) for nf, s in ((nf, signature(nf)) for nf in
                                         (normal_form(d.text) for d in reuters_stream()))
             if s.size]
    print(f"Reuters in one day: {len(items)} items, mean |signature| "
          f"{np.mean([s.size for _, s in items]):.0f}; dense_fraction {args.dense_fraction:g}")
    print("| t | items | µs per lookup | µs per add | postings read per lookup | matched "
          "| index MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for t in args.thresholds:
        print(replay(items, t, args.dense_fraction), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
