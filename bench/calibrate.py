"""How many prefix keys unrelated documents share: the workload against real news pages.

    python -m bench.calibrate [--data ../shared/data/goldset-dev] [--threshold 0.8]

Why: the detector's cost at t >= 0.5 is the postings its probe prefix touches, i.e. how
many of a document's rarest q-grams unrelated documents also hold. This compares that
statistic on the real pages of the SpotSigs Gold Set (development part, not in the
repository; README of ../shared/data) with the same number of items of the benchmark
workload: for every pair of documents from *different* clusters (workload: different
items, no duplicates), the number of shared keys of their extended prefixes under an
order learned from the same documents, and that number per pair of prefix keys (the
density, which does not depend on document length).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np

from bench.workload import NewsStream, WorkloadConfig
from ndd_stream.core.extract import extract_text
from ndd_stream.core.normalize import normal_form
from ndd_stream.core.order import FrequencyBook
from ndd_stream.core.qgrams import fmix64, signature
from ndd_stream.core.similarity import extended_prefix

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "goldset-dev"


def shared_prefix_keys(docs: list[tuple[str, str]], threshold: float) -> dict[str, float]:
    """Statistics of shared extended-prefix keys over pairs with different labels."""
    mixed = [(label, fmix64(signature(nf))) for label, nf in docs if nf]
    book = FrequencyBook()
    for _, codes in mixed:
        book.count(codes)
    order = book.snapshot()
    prefixes = []
    for label, codes in mixed:
        length = extended_prefix(codes.size, threshold)
        prefixes.append((label, set(order.prefix(codes, length).tolist()), codes.size))
    shared, density = [], []
    for (la, pa, _), (lb, pb, _) in itertools.combinations(prefixes, 2):
        if la != lb:
            common = len(pa & pb)
            shared.append(common)
            density.append(common / (len(pa) * len(pb)))
    return {"documents": len(prefixes),
            "signature_median": float(np.median([s for _, _, s in prefixes])),
            "prefix_median": float(np.median([len(p) for _, p, _ in prefixes])),
            "shared_mean": float(np.mean(shared)), "shared_p99": float(np.percentile(shared, 99)),
            "density_per_million_key_pairs": float(np.mean(density)) * 1e6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--threshold", type=float, default=0.8)
    args = ap.parse_args(argv)
    pages = sorted(args.data.glob("*/*.htm"))
    if not pages:
        ap.error(f"no Gold Set pages under {args.data}")
    raw = [(p.parent.name, p.read_bytes().decode("latin-1")) for p in pages]
    rows = {}
    for mode in ("main", "tags"):
        rows[f"Gold Set pages ({mode} extraction)"] = shared_prefix_keys(
            [(label, normal_form(extract_text(html, mode))) for label, html in raw],
            args.threshold)
    stream = NewsStream(WorkloadConfig(duplicate_rate=0.0))
    rows["benchmark workload"] = shared_prefix_keys(
        [(doc.identity, normal_form(doc.text)) for doc in itertools.islice(stream, len(raw))],
        args.threshold)
    print(f"t = {args.threshold}; pairs of unrelated documents\n")
    print("| documents | n | distinct 4-grams (median) | extended prefix (median) | "
          "shared prefix keys per pair (mean / p99) | per million prefix-key pairs |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['documents']} | {r['signature_median']:.0f} | "
              f"{r['prefix_median']:.0f} | {r['shared_mean']:.2f} / {r['shared_p99']:.0f} | "
              f"{r['density_per_million_key_pairs']:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
