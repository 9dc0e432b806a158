"""One benchmark configuration, run in its own process so that peak RSS is its own.

``python -m bench.measure METHOD WINDOW MEASURE THRESHOLD OUT.json [--profile N]``

1. builds the workload with event-time spacing chosen so that the 25 live hours
   (H-24..H) hold ``WINDOW`` documents;
2. warms the method up with the first ``WINDOW + WINDOW/25`` items (a full window plus
   the hour being filled): the detectors *index* them without deciding (the state is the
   one deciding would leave, as no warm-up item is late and duplicates are indexed; it
   makes warm-up O(window) instead of O(window * decision));
3. times ``MEASURE`` decisions one by one (perf_counter around ``decide``; the items are
   generated beforehand, outside the timer), stopping early at a time budget;
4. optionally profiles ``N`` more decisions with cProfile to split the core's time;
5. writes figures and the measured decisions (for the equivalence check) as JSON.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import psutil

from bench.corpora import RepetitiveStream, reuters_stream, source_note
from bench.faithful import FaithfulDetector
from bench.workload import NewsStream, WorkloadConfig
from ndd_stream.core import kernels
from ndd_stream.core.detector import Detector, DetectorConfig, hour_of
from ndd_stream.core.document import Decision, Document, Status
from ndd_stream.core.normalize import normal_form
from ndd_stream.core.qgrams import fmix64, signature

WINDOW_HOURS = 24
LIVE_HOURS = WINDOW_HOURS + 1


def rss_mb() -> float:
    return float(psutil.Process().memory_info().rss) / 2**20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


WORKLOADS = ("news", "repetitive", "reuters")


def workload(window: int, kind: str = "news") -> Any:
    """The stream of ``kind`` spaced so that the 25 live hours hold ``window`` documents
    (reuters: the whole corpus squeezed into one day, whatever ``window``)."""
    spacing = 3600.0 * LIVE_HOURS / max(1, window)
    if kind == "repetitive":
        return RepetitiveStream(spacing)
    if kind == "reuters":
        return _ListStream(reuters_stream())
    return NewsStream(WorkloadConfig(spacing=spacing))


class _ListStream:
    """A fixed list of documents with the streams' iterator and ``take``."""

    def __init__(self, docs: list[Document]) -> None:
        self.docs = docs
        self._at = 0

    def __iter__(self) -> Iterator[Document]:
        return self

    def __next__(self) -> Document:
        if self._at >= len(self.docs):
            raise StopIteration
        self._at += 1
        return self.docs[self._at - 1]

    def take(self, n: int) -> list[Document]:
        out = self.docs[self._at : self._at + n]
        self._at += len(out)
        return out


# -- the methods ----------------------------------------------------------------------


class MinHashWindow:
    """datasketch MinHashLSH over the same hourly window: insert + query per item.

    Shingles are the q=4 character q-grams of the core's normal form; their 64-bit codes
    are mixed (fmix64) and the low 32 bits are given to MinHash as the hash values (the
    identity ``hashfunc``), which avoids a SHA-1 per shingle and is fairer to the
    baseline than its default. Items whose hour leaves the window are removed.
    """

    def __init__(self, threshold: float) -> None:
        from datasketch import MinHash, MinHashLSH

        self._minhash = MinHash
        self.lsh = MinHashLSH(threshold=threshold, num_perm=128)
        self.threshold = threshold
        self._by_hour: dict[int, list[str]] = {}
        self._watermark: int | None = None
        self._template = MinHash(num_perm=128, hashfunc=_identity)

    def _sketch(self, doc: Document) -> Any:
        values = (fmix64(signature(normal_form(doc.text), 4)) & np.uint64(0xFFFFFFFF)).tolist()
        mh = self._minhash(
            num_perm=128, hashfunc=_identity, permutations=self._template.permutations,
            scheme=self._template.scheme,
        )
        mh.update_batch(values)
        return mh

    def _advance(self, hour: int) -> None:
        if self._watermark is not None and hour <= self._watermark:
            return
        self._watermark = hour
        for h in [h for h in self._by_hour if h < hour - WINDOW_HOURS]:
            for key in self._by_hour.pop(h):
                self.lsh.remove(key)

    def index(self, doc: Document) -> None:
        hour = hour_of(doc.timestamp)
        self._advance(hour)
        self.lsh.insert(doc.identity, self._sketch(doc))
        self._by_hour.setdefault(hour, []).append(doc.identity)

    def decide(self, doc: Document) -> bool:
        """True when LSH proposes an earlier item with estimated Jaccard >= threshold."""
        hour = hour_of(doc.timestamp)
        self._advance(hour)
        mh = self._sketch(doc)
        found = bool(self.lsh.query(mh))
        self.lsh.insert(doc.identity, mh)
        self._by_hour.setdefault(hour, []).append(doc.identity)
        return found


def _identity(x: int) -> int:
    return x


def warm(method: str, impl: Any, docs: Iterator[Document], n: int, kind: str = "news") -> None:
    if method == "faithful":
        impl.preload(next(docs) for _ in range(n))
        return
    if method == "minhash":
        for _ in range(n):
            impl.index(next(docs))
        return
    det: Detector = impl
    # As restore() does, learn the q-gram order from the texts first: a service that has
    # been running holds documents indexed under a mature order, not the cold-start ones.
    learn = workload(1, kind)
    for _ in range(min(n, 16_384)):
        det._book.count(fmix64(signature(normal_form(next(learn).text), det.config.q)))
    det._book.snapshot()
    for _ in range(n):
        doc = next(docs)
        window = det._window(doc.scope)
        hour = hour_of(doc.timestamp)
        window.advance(hour)
        nf = det._normal_form(doc.text)
        det._add_to_window(
            window, doc.identity, doc.channel, doc.timestamp, hour, nf,
            signature(nf, det.config.q),
        )
        window.next_number += 1
    # Deciding would have prepared each block at its first count (lookup directories, dense
    # rows); without this the first measured decision pays for the whole index (0.45 s at a
    # 50k window, t = 0.3). Both sides of bench.compare alike.
    for window in det.windows():
        prepare = getattr(window.index, "prepare", None)
        if prepare is not None:
            prepare()
        else:  # an older revision: its blocks, where they prepare themselves
            for block in getattr(window.index, "_blocks", []):
                getattr(block, "prepare", lambda: None)()


def decision_record(d: Decision) -> list[Any]:
    return [d.identity, d.status.value, d.duplicate_of, round(d.similarity, 12)]


def profile_shares(det: Detector, docs: list[Document]) -> dict[str, float]:
    """Share of decide() time in each stage, from cProfile's cumulative times."""
    prof = cProfile.Profile()
    prof.enable()
    for doc in docs:
        det.decide(doc)
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    cum: dict[str, float] = {}
    for (path, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.items():
        key = f"{path.rsplit('/', 1)[-1]}:{name}"
        cum[key] = cum.get(key, 0.0) + ct
    total = cum.get("detector.py:decide", 0.0) or 1.0
    stages = {
        "normal form": cum.get("normalize.py:normal_form", 0.0),
        "signature (q-gram codes, unique)": cum.get("qgrams.py:signature", 0.0),
        "prefix selection (order)": cum.get("order.py:prefix", 0.0),
        "candidate lookup (postings, counts)": cum.get("postings.py:lookup", 0.0)
        + cum.get("window.py:shared_counts", 0.0)  # older revisions (bench.compare)
        + cum.get("window.py:candidates", 0.0),
        "verification (exact |A∩B|)": cum.get("similarity.py:intersection_size", 0.0)
        + cum.get("detector.py:_signature_of", 0.0),
        "indexing (postings add, order book)": cum.get("window.py:add", 0.0)
        + cum.get("order.py:count", 0.0),
    }
    # signature() calls made for verification are inside _signature_of: count them once.
    verify_sigs = sum(
        info[3]
        for (_path, _l, name), (_c, _n, _t, _ct, callers) in stats.items()
        if name == "signature"
        for caller, info in callers.items()
        if caller[2] == "_signature_of"
    )
    stages["signature (q-gram codes, unique)"] -= verify_sigs
    stages["other (window, decisions, Python glue)"] = total - sum(stages.values())
    return {k: round(v / total, 4) for k, v in stages.items()} | {"profiled_seconds": total}


def detector_config(threshold: float, threads: int | None) -> DetectorConfig:
    """The measured configuration. Where the revision has them as settings, the core's speed
    settings come from the environment as the CLI takes them (NDD_COUNT_THREADS,
    NDD_DENSE_FRACTION, NDD_NO_KERNELS), ``threads`` overriding the first; older revisions
    read those variables themselves at import."""
    extra: dict[str, Any] = {}
    fields = getattr(DetectorConfig, "__dataclass_fields__", {})
    knobs = ("NDD_COUNT_THREADS", "NDD_DENSE_FRACTION", "NDD_NO_KERNELS", "NDD_INDEX")
    if "count_threads" in fields and any(k in os.environ for k in knobs):
        # only then: pydantic's import would add ~20 MB to the peak RSS measured
        from ndd_stream.settings import Settings

        settings = Settings()
        extra["count_threads"] = settings.count_threads
        extra["dense_fraction"] = settings.dense_fraction
        if "index" in fields:
            extra["index"] = settings.index
        if settings.no_kernels:
            kernels.use_numpy()
    if "count_threads" in fields and threads is not None:
        extra["count_threads"] = threads
    return DetectorConfig(threshold=threshold, window_hours=WINDOW_HOURS, **extra)


def count_threads(impl: Any) -> int:
    """The threads one count may use in this run (older revisions: kernels.COUNT_THREADS)."""
    config = getattr(impl, "config", None)
    if config is not None and hasattr(config, "count_threads"):
        return int(config.count_threads or kernels.available_cores())
    return int(getattr(kernels, "COUNT_THREADS", 1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("method", choices=["detector", "faithful", "minhash"])
    ap.add_argument("window", type=int)
    ap.add_argument("measure", type=int)
    ap.add_argument("threshold", type=float)
    ap.add_argument("out")
    ap.add_argument("--budget", type=float, default=120.0, help="max seconds of measuring")
    ap.add_argument("--profile", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None,
                    help="count threads (the count_threads setting; default: the cores; an "
                    "older revision reads NDD_COUNT_THREADS, which bench.compare sets too)")
    ap.add_argument("--workload", choices=WORKLOADS, default="news",
                    help="reuters: every item, no warm-up, WINDOW ignored (bench/corpora.py)")
    args = ap.parse_args(argv)
    note = source_note(args.workload)
    print(note, file=sys.stderr)
    if args.workload == "reuters" and "UNAVAILABLE" in note:
        return 3

    t_start = time.perf_counter()
    stream = workload(args.window, args.workload)
    rss_start = rss_mb()
    config = detector_config(args.threshold, args.threads)
    impl: Any
    if args.method == "detector":
        impl = Detector(config)
    elif args.method == "faithful":
        impl = FaithfulDetector(config)
    else:
        impl = MinHashWindow(args.threshold)
    warm_n = 0 if args.workload == "reuters" else args.window + args.window // LIVE_HOURS
    t0 = time.perf_counter()
    if warm_n:
        warm(args.method, impl, iter(stream), warm_n, args.workload)
    warm_seconds = time.perf_counter() - t0
    rss_warm = rss_mb()
    in_window = impl.window_documents() if args.method != "minhash" else None

    docs = stream.take(args.measure)
    latencies: list[float] = []
    records: list[list[Any]] = []
    flags: list[bool] = []
    t_measure = time.perf_counter()
    cpu = 0.0
    for doc in docs:
        t1, c1 = time.perf_counter(), time.thread_time()
        result = impl.decide(doc)
        latencies.append(time.perf_counter() - t1)
        cpu += time.thread_time() - c1
        if isinstance(result, Decision):
            records.append(decision_record(result))
            flags.append(result.status is not Status.UNIQUE)
        else:
            flags.append(bool(result))
        if time.perf_counter() - t_measure > args.budget:
            break
    lat = np.array(latencies)
    out: dict[str, Any] = {
        "method": args.method,
        "workload": args.workload,
        "source": note,
        "count_threads": count_threads(impl),
        "kernels": kernels.IMPLEMENTATION,
        "window": args.window,
        "threshold": args.threshold,
        "window_documents": in_window,
        "window_documents_end": impl.window_documents() if args.method != "minhash" else None,
        "warm_items": warm_n,
        "warm_seconds": round(warm_seconds, 2),
        "measured": int(lat.size),
        "docs_per_s": float(lat.size / lat.sum()),
        # CPU time of the deciding thread: on a machine shared with other jobs it varies far
        # less than the wall clock (count threads other than the caller's are not in it)
        "cpu_docs_per_s": float(lat.size / max(cpu, 1e-9)),
        "p50_ms": float(np.percentile(lat, 50) * 1e3),
        "p99_ms": float(np.percentile(lat, 99) * 1e3),
        "mean_ms": float(lat.mean() * 1e3),
        "max_ms": float(lat.max() * 1e3),
        "rss_start_mb": round(rss_start, 1),
        "rss_after_warm_mb": round(rss_warm, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "duplicates_flagged": int(sum(flags)),
        "flags": flags,
        "decisions": records,
    }
    if args.method == "detector":
        det: Detector = impl
        window = next(det.windows())
        import ndd_stream.core.window as window_module
        # as held (packed); a base revision without packed window texts holds the str
        held = getattr(window_module, "held_text_bytes", lambda doc: sys.getsizeof(doc.nf))
        nf_bytes = sum(held(d) for d in window.docs)
        out["index_bytes"] = window.index.nbytes
        out["nf_bytes"] = nf_bytes
        out["docs_bytes_est"] = len(window.docs) * 200  # WindowDoc object, slots, list slot
        out["bitmap_bytes"] = window.bitmaps.nbytes if window.bitmaps is not None else 0
        # decision stats of the measured items only (profiling below adds to them)
        out["candidates"] = det.stats.candidates
        out["bitmap_pruned"] = det.stats.bitmap_pruned
        out["verified"] = det.stats.verified
        if args.profile:
            out["profile"] = profile_shares(det, stream.take(args.profile))
    if args.method == "faithful":
        out["postings_read"] = impl.postings_read
    out["wall_seconds"] = round(time.perf_counter() - t_start, 1)
    with open(args.out, "w") as fh:
        json.dump(out, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
