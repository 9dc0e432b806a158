"""The postings an exact prefix-filter count must touch, whatever the q-gram order learns.

    python -m bench.bound --workload news --window 50000 --threshold 0.8

Why: the detector's count at t >= 0.5 adds up, for every key of the probe's extended
prefix, the window documents whose own extended prefix holds that key. The order decides
which keys those are; the best an order can do is to put each document's truly rarest
q-grams first. This measures, for ``--probes`` documents decided after a full window:

* the window's distinct q-grams and their mean document frequency (how rich the text is);
* the postings the probe counts under the order the detector learns (``FrequencyBook``,
  snapshotted as the detector does) and under the **ideal order**: exact document
  frequencies of the window itself, rarest first (ties by the mixed code). No global
  order that ranks by rarity can do much better than the ideal one, so the second figure
  is the floor of the detector's design at that window and threshold;
* that floor in time at a flat u16 posting scan (``--ns-per-posting``, default 0.7, the
  best case issue 12 names), against the budget per decision of a docs/s target.

``--ceiling N`` also decides N documents (after the same warm-up as bench.measure) with the
count on one thread and times the index count inside them: its share ``s`` of a decision
bounds what splitting the count over c cores can give, 1 / (1 - s + s / c) (Amdahl), since
the rest of a decision (normal form, signature, prefix, filter, verification, indexing,
Python) runs on one thread, and a scope's decisions are sequential (each one sees the
previous one indexed).

Reads the workloads of bench.measure (Reuters needs ../shared; it says so if absent).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from bench.measure import LIVE_HOURS, WORKLOADS, warm, workload
from ndd_stream.core.detector import Detector, DetectorConfig
from ndd_stream.core.document import Document
from ndd_stream.core.normalize import normal_form
from ndd_stream.core.order import FrequencyBook
from ndd_stream.core.postings import PostingIndex
from ndd_stream.core.qgrams import Codes, fmix64, signature
from ndd_stream.core.similarity import extended_prefix


@dataclass(frozen=True)
class Bound:
    """Mean figures per probe document (see the module docstring)."""

    documents: int  # in the window
    distinct: int  # distinct q-grams in the window
    mean_df: float  # their mean document frequency
    prefix: float  # extended prefix length of a probe
    learned: float  # postings counted under the learned order
    ideal: float  # ... under the window's exact frequencies


def _ideal_prefix(codes: Codes, length: int, keys: Codes, freq: np.ndarray) -> Codes:
    """The ``length`` rarest of ``codes`` by (window frequency, code): unseen ones first."""
    if length >= codes.size:
        return codes
    at = np.searchsorted(keys, codes).clip(0, max(0, keys.size - 1))
    df = np.where(keys[at] == codes, freq[at], 0) if keys.size else np.zeros(codes.size)
    return codes[np.lexsort((codes, df))[:length]]


def _postings(prefixes: list[Codes], probes: list[Codes]) -> float:
    """Mean over probes of the window prefixes holding each probe prefix key (the count
    the index does: keys are the 32 top bits of the mixed codes, as ``Detector`` indexes)."""
    held = np.concatenate([np.unique(p >> np.uint64(32)) for p in prefixes])
    keys, docs = np.unique(held, return_counts=True)
    sums = []
    for p in probes:
        k = np.unique(p >> np.uint64(32))
        at = np.searchsorted(keys, k).clip(0, max(0, keys.size - 1))
        sums.append(int(np.where(keys[at] == k, docs[at], 0).sum()))
    return float(np.mean(sums))


def prefix_bound(window: list[Codes], probes: list[Codes], threshold: float) -> Bound:
    """The figures of :class:`Bound` for mixed signatures (``fmix64(signature(nf))``) of the
    window's documents and of documents probed after them."""
    if not window or not probes:
        raise ValueError("need window documents and probes")
    keys, freq = np.unique(np.concatenate(window), return_counts=True)
    book = FrequencyBook()
    for codes in window:
        book.count(codes)
    order = book.current  # as the detector's: snapshots at its document counts only

    def learned(codes: Codes) -> Codes:
        return order.prefix(codes, extended_prefix(codes.size, threshold))

    def ideal(codes: Codes) -> Codes:
        return _ideal_prefix(codes, extended_prefix(codes.size, threshold), keys, freq)

    return Bound(
        documents=len(window),
        distinct=int(keys.size),
        mean_df=float(freq.mean()),
        prefix=float(np.mean([extended_prefix(p.size, threshold) for p in probes])),
        learned=_postings([learned(c) for c in window], [learned(c) for c in probes]),
        ideal=_postings([ideal(c) for c in window], [ideal(c) for c in probes]),
    )


@contextmanager
def _timed_counts() -> Iterator[list[float]]:
    """Seconds spent in every index count while inside (a bench-only wrapper):
    FlatIndex.best (the count, the filter and verification, one C call) where the revision
    has the flat index, PostingIndex.candidates (the count and its filter) or, older,
    PostingIndex.count."""
    spent: list[float] = []
    targets: list[tuple[type, str]] = [
        (PostingIndex, "candidates" if hasattr(PostingIndex, "candidates") else "count")]
    try:
        from ndd_stream.core.engine import FlatIndex
        targets.append((FlatIndex, "best"))
    except ImportError:  # a revision without the flat index
        pass
    originals = [(cls, name, getattr(cls, name)) for cls, name in targets]

    def timed(original: Callable[..., object]) -> Callable[..., object]:
        def count(self: object, *args: object, **kwargs: object) -> object:
            started = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                spent.append(time.perf_counter() - started)
        return count

    for cls, name, original in originals:
        setattr(cls, name, timed(original))
    try:
        yield spent
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)


def count_share(det: Detector, docs: list[Document]) -> tuple[float, float]:
    """(the index count's share of decide() time, decisions/s) over ``docs``, the count on
    the detector's count threads (give it ``count_threads=1`` for one core)."""
    with _timed_counts() as spent:
        started = time.perf_counter()
        for doc in docs:
            det.decide(doc)
        total = time.perf_counter() - started
    return sum(spent) / total, len(docs) / total


def ceiling(share: float, cores: int) -> float:
    """Amdahl: the speed-up of a decision whose count (``share`` of it) splits over
    ``cores`` perfectly while the rest stays on one."""
    return 1.0 / ((1.0 - share) + share / cores)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=WORKLOADS, default="news")
    ap.add_argument("--window", type=int, default=50_000,
                    help="documents in the window (reuters: the whole corpus, ignored)")
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--probes", type=int, default=40)
    ap.add_argument("--ns-per-posting", type=float, default=0.7)
    ap.add_argument("--target", type=float, default=1500.0, help="docs/s to compare with")
    ap.add_argument("--ceiling", type=int, default=0, metavar="N",
                    help="also time the count's share of N decisions (reuters: every item)")
    args = ap.parse_args(argv)
    if args.ceiling:
        return _report_ceiling(args.workload, args.window, args.threshold, args.ceiling)
    if not 0.5 <= args.threshold <= 1.0:
        ap.error("below t = 0.5 the whole signature is indexed: the count is every shared "
                 "q-gram and no order changes it")
    stream = workload(args.window, args.workload)
    if args.workload == "reuters":
        docs = stream.take(10**9)
        window_docs, probe_docs = docs[:-args.probes], docs[-args.probes:]
    else:
        window_docs = stream.take(args.window)
        probe_docs = stream.take(args.probes)
    if not window_docs:
        ap.error(f"no documents in workload {args.workload}")

    def mixed(text: str) -> Codes:
        return fmix64(signature(normal_form(text)))

    b = prefix_bound([mixed(d.text) for d in window_docs],
                     [mixed(d.text) for d in probe_docs], args.threshold)
    floor_ms = b.ideal * args.ns_per_posting / 1e6
    budget_ms = 1000.0 / args.target
    print(f"{args.workload}, window {b.documents:,} documents ({LIVE_HOURS} live hours), "
          f"t = {args.threshold}, {len(probe_docs)} probes")
    print(f"distinct q-grams {b.distinct:,}, mean document frequency {b.mean_df:,.1f}")
    print(f"extended prefix {b.prefix:,.0f} keys; postings per decision: learned order "
          f"{b.learned:,.0f}, ideal order {b.ideal:,.0f}")
    print(f"the ideal order's count at {args.ns_per_posting} ns/posting: {floor_ms:.2f} ms; "
          f"{args.target:,.0f} docs/s allows {budget_ms:.2f} ms per whole decision")
    return 0


def _report_ceiling(kind: str, window: int, threshold: float, n: int) -> int:
    det = Detector(DetectorConfig(threshold=threshold, count_threads=1))
    stream = workload(window, kind)
    if kind == "reuters":  # the window grows over the whole corpus, as bench.measure runs it
        docs = stream.take(10**9)
    else:
        warm("detector", det, iter(stream), window + window // LIVE_HOURS, kind)
        docs = stream.take(n)
    share, rate = count_share(det, docs)
    where = "the corpus in one day" if kind == "reuters" else f"window {window:,}"
    print(f"{kind}, {where}, t = {threshold}: {len(docs):,} decisions, {rate:,.0f}/s, "
          "count on one thread")
    print(f"the index count is {share:.1%} of a decision: two cores can give at most "
          f"{ceiling(share, 2):.2f}x one (Amdahl), a perfect split of the count")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
