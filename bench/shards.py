"""One scope over S shards (issue 23), in process: what each stage costs per item.

    python -m bench.shards [--thresholds 0.3 0.8] [--window 12000 50000] [--shards 1 2 4]
                           [--measure 300] [--broker 200] [--out shards]
    python -m bench.shards --window 1500 --measure 40   # quick check, ~15 s

Why: with ``NDD_SHARDS=S`` a scope's decision is split into a gatherer's fixed work and S
shards' answers that run on S machines at once, joined by Kafka records. Whether S
machines decide S times as fast depends on which of those grows with S, so each is timed
apart, in CPU seconds of the one thread doing it (``time.thread_time``; the count runs on
that thread, ``count_threads=1``), which other jobs on a shared machine disturb far less
than the wall clock:

* **gatherer**: ``Gatherer.admit`` (normal form, figures, arrival number) + ``resolve``;
* **shard answer**: each ``ShardIndex.answer`` (signature, best local match, indexing by
  the owner); mean over shards and the busiest shard (its mean bounds the pipeline);
* **wire** (``worker.shardwire``, the worker's own encoders): the gatherer encodes S
  Prepared records and decodes S Answers per item; each shard decodes one Prepared and
  encodes one Answer. Timed as batches over the measured items, ``--repeats`` times,
  median; bytes on the shards topic and back.

Per (threshold, window) the unsharded :class:`Detector` and a gatherer + S shards for each
S are warmed to the same state, then each measured item is decided by all of them in turn,
the first one rotating, so load on a shared machine falls on every configuration alike;
every sharded decision is asserted equal to the detector's. Warm-up is bench.measure's: a
full window (``W + W/25`` items, spaced so the 25 live hours hold ``W`` documents)
*indexed without deciding* under a learned q-gram order, each shard holding the items it
owns, the gatherer their identities and numbers.

``--broker N`` also times N produce -> consume round trips of a Prepared-sized record
through the embedded Tansu broker on loopback (wall clock: latency is the question; a
gather adds two per item, Prepared out and Answer back) and the Kafka clients' and broker's
CPU per record in bulk, which the model adds per record. ``--from-json`` redoes the model
and report of a saved run (e.g. to add ``--broker``).

Results: ``bench/results/<out>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.measure import LIVE_HOURS, workload
from ndd_stream.core import kernels
from ndd_stream.core.detector import Detector, DetectorConfig, hour_of
from ndd_stream.core.document import Document
from ndd_stream.core.normalize import normal_form
from ndd_stream.core.novelty import figures as figures_of
from ndd_stream.core.order import FrequencyBook
from ndd_stream.core.qgrams import fmix64, signature
from ndd_stream.core.shards import Answer, Gatherer, Prepared, ShardIndex, Slot, shard_of
from ndd_stream.core.window import WindowDoc
from ndd_stream.worker.records import OutRecord
from ndd_stream.worker.shardwire import (
    answer_records,
    encode_prepared,
    prepared_records,
    read_answers,
    read_prepared,
)

RESULTS = Path(__file__).parent / "results"
SHARDS_TOPIC = "news-ndd-news.shards"  # the names only size the records' topic field
SCOPED_TOPIC = "news-ndd-news.scoped"
BLOCKS = 5  # the measured items are split into blocks: spread = block means


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
            "python": platform.python_version(), "kernels": kernels.IMPLEMENTATION}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@dataclass
class Texts:
    """A window's items with their normal forms and figures, computed once for every run."""

    warm: list[Document]
    nf: list[str]
    figs: list[str | None]
    measured: list[Document]


def texts(window: int, measure: int) -> Texts:
    stream = workload(window)
    warm = stream.take(window + window // LIVE_HOURS)
    nf = [normal_form(d.text) for d in warm]
    figs: list[str | None] = [figures_of(d.text) for d in warm]
    return Texts(warm, nf, figs, stream.take(measure))


def learned_book(config: DetectorConfig) -> FrequencyBook:
    """A mature q-gram order, as bench.measure.warm and restore() learn it (16k texts)."""
    book = FrequencyBook(bits=config.order_bits)
    learn = workload(1)
    for _ in range(16_384):
        book.count(fmix64(signature(normal_form(next(learn).text), config.q)))
    book.snapshot()
    return book


def warm(det: Detector, t: Texts, book: FrequencyBook, owner: Callable[[int], bool]) -> None:
    """Index the warm items ``owner`` accepts, numbered as arrival order; every item moves
    the watermark and the numbering, as a shard sees every Prepared."""
    det._book = copy.deepcopy(book)
    q = det.config.q
    for i, doc in enumerate(t.warm):
        window = det._window(doc.scope)
        hour = hour_of(doc.timestamp)
        window.advance(hour)
        window.next_number = i + 1
        if owner(i):
            det._add_to_window(window, doc.identity, doc.channel, doc.timestamp, hour,
                               t.nf[i], signature(t.nf[i], q), t.figs[i], None, i)
    for w in det.windows():
        w.index.prepare()  # as deciding would have (bench.measure.warm)


def warm_gatherer(g: Gatherer, t: Texts) -> None:
    """The gatherer's state after admitting the warm items: watermark, identities, numbers
    (their decisions are not needed: the workload repeats no identity)."""
    for doc in t.warm:
        scope = g._scope(doc.scope)
        hour = hour_of(doc.timestamp)
        scope.advance(hour)
        scope.remember(doc.identity, hour, Slot())
        scope.next_number += 1


def summary(per_item: Sequence[float]) -> dict[str, float]:
    """Mean (what sets throughput), per-item p50/p90 and the spread of block means (ms)."""
    n = len(per_item)
    size = max(1, n // BLOCKS)
    blocks = [statistics.fmean(per_item[i:i + size]) for i in range(0, size * BLOCKS, size)
              if per_item[i:i + size]]
    q = statistics.quantiles(per_item, n=10) if n > 1 else [per_item[0]] * 9
    return {"mean_ms": 1e3 * statistics.fmean(per_item),
            "p50_ms": 1e3 * statistics.median(per_item), "p90_ms": 1e3 * q[8],
            "block_median_ms": 1e3 * statistics.median(blocks),
            "block_min_ms": 1e3 * min(blocks), "block_max_ms": 1e3 * max(blocks)}


def wire(items: list[tuple[Prepared, list[Answer]]], shards: int,
         repeats: int) -> dict[str, Any]:
    """The shardwire cost per item, each side, as the workers call it (batch-timed, median
    of ``repeats``), and the bytes per item each way."""
    answers_out = [[answer_records([a], SCOPED_TOPIC, 0)[0] for a in ans] for _, ans in items]
    preps_out = [prepared_records([encode_prepared(p)], SHARDS_TOPIC, 0, shards)[0]
                 for p, _ in items]
    for (p, ans), rec, outs in zip(items, preps_out, answers_out, strict=True):
        assert read_prepared(rec.value) == ([p], 0)
        assert [read_answers(o.value)[0] for o in outs] == [
            a if a.best is None else Answer(a.scope, a.number, a.shard, a.size,
                                            (a.best[0], _as_read(a.best[1])), a.short)
            for a in ans]

    def gatherer_side() -> None:
        for (p, _), outs in zip(items, answers_out, strict=True):
            prepared_records([encode_prepared(p)], SHARDS_TOPIC, 0, shards)
            for o in outs:
                read_answers(o.value)

    def shard_side() -> None:
        for rec, (_, ans) in zip(preps_out, items, strict=True):
            read_prepared(rec.value)
            answer_records([ans[0]], SCOPED_TOPIC, 0)

    def timed(fn: Callable[[], None]) -> list[float]:
        out = []
        for _ in range(repeats):
            c0 = time.thread_time()
            fn()
            out.append(1e3 * (time.thread_time() - c0) / len(items))
        return out

    g, s = timed(gatherer_side), timed(shard_side)

    def size(rec: OutRecord) -> int:
        return len(rec.value or b"") + len(rec.key or b"") + sum(
            len(k) + len(v) for k, v in rec.headers)

    prep_bytes = statistics.fmean(size(r) for r in preps_out)
    answer_bytes = statistics.fmean(size(o) for outs in answers_out for o in outs)
    return {"gatherer_ms": statistics.median(g), "gatherer_ms_min": min(g),
            "gatherer_ms_max": max(g), "shard_ms": statistics.median(s),
            "shard_ms_min": min(s), "shard_ms_max": max(s),
            "prepared_bytes": round(prep_bytes), "answer_bytes": round(answer_bytes),
            "bytes_out_per_item": round(shards * prep_bytes),
            "bytes_back_per_item": round(shards * answer_bytes)}


def _as_read(doc: WindowDoc) -> WindowDoc:
    """A match as read back: the record carries no order version (-1)."""
    return replace(doc, version=-1)


class Setup:
    """A gatherer and its S warmed shards, with the CPU each part spent per item."""

    def __init__(self, config: DetectorConfig, t: Texts, book: FrequencyBook,
                 shards: int) -> None:
        self.shards = shards
        self.gatherer = Gatherer(config, shards)
        warm_gatherer(self.gatherer, t)
        owners = [shard_of(d.identity, shards) for d in t.warm]
        self.index = [ShardIndex(s, config) for s in range(shards)]
        for s, shard in enumerate(self.index):
            warm(shard, t, book, lambda i, s=s: owners[i] == s)  # type: ignore[misc]
        self.gather_cpu: list[float] = []
        self.shard_cpu: list[list[float]] = [[] for _ in range(shards)]
        self.items: list[tuple[Prepared, list[Answer]]] = []

    def decide(self, doc: Document) -> dict[str, Any]:
        c0 = time.thread_time()
        pending = self.gatherer.admit(doc)
        c1 = time.thread_time()
        prep = pending.prepared
        answers = []
        if prep is not None:
            for s, shard in enumerate(self.index):
                a0 = time.thread_time()
                answers.append(shard.answer(prep))
                self.shard_cpu[s].append(time.thread_time() - a0)
            self.items.append((prep, answers))
        c2 = time.thread_time()
        decision = self.gatherer.resolve(pending, answers)
        self.gather_cpu.append(c1 - c0 + time.thread_time() - c2)
        return decision.as_dict()

    def result(self, repeats: int) -> dict[str, Any]:
        per_shard = [summary(c) for c in self.shard_cpu]
        busiest = max(range(self.shards), key=lambda s: per_shard[s]["mean_ms"])
        per_item_max = [max(c[j] for c in self.shard_cpu)
                        for j in range(len(self.shard_cpu[0]))]
        return {
            "shards": self.shards,
            "documents_per_shard": [shard.window_documents() for shard in self.index],
            "index_mb_per_shard": [round(sum(w.index.nbytes for w in shard.windows()) / 2**20, 1)
                                   for shard in self.index],
            "gatherer": summary(self.gather_cpu),
            "shard_mean_ms": statistics.fmean(p["mean_ms"] for p in per_shard),
            "shard_busiest": busiest, "shard_busiest_summary": per_shard[busiest],
            "per_shard": per_shard,
            "per_item_max_shard": summary(per_item_max),  # what a gather waits for
            "wire": wire(self.items, self.shards, repeats),
            "decisions_equal": True,
        }


def measure(config: DetectorConfig, t: Texts, book: FrequencyBook, counts: Sequence[int],
            repeats: int) -> dict[str, Any]:
    """The unsharded detector and a setup per S on the same warmed window, each measured
    item decided by all of them in turn (the first one rotating), so load on the shared
    machine falls on every configuration alike; every sharded decision must equal the
    detector's."""
    ref = Detector(config)
    warm(ref, t, book, lambda i: True)
    setups = [Setup(config, t, book, s) for s in counts]
    ref_cpu: list[float] = []

    def unsharded(doc: Document) -> dict[str, Any]:
        c0 = time.thread_time()
        d = ref.decide(doc)
        ref_cpu.append(time.thread_time() - c0)
        return d.as_dict()

    deciders: list[Callable[[Document], dict[str, Any]]] = [unsharded] + [
        setup.decide for setup in setups]
    for i, doc in enumerate(t.measured):
        turn = i % len(deciders)
        got = [(k, deciders[k](doc)) for k in [*range(turn, len(deciders)), *range(turn)]]
        want = dict(got)[0]
        assert all(d == want for _, d in got), (i, got)
    return {"unsharded": summary(ref_cpu),
            "sharded": [setup.result(repeats) for setup in setups]}


def broker_costs(n: int, payload: int) -> dict[str, Any]:
    """Through the embedded Tansu broker on loopback (confluent-kafka clients):

    * ``n`` round trips of one ``payload``-byte record, produce (linger 0) then consume
      (wall ms: the latency a gather adds is about two of them, prepared out, answer back);
    * CPU per record of producing and of consuming ``20 n`` such records in bulk: the
      client's (``process_time``, librdkafka's threads included) and the broker process's.
    """
    import tempfile

    import psutil
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from ndd_stream.kafka.broker import EmbeddedBroker

    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker(log_dir=Path(tmp)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("rtt", 1, 1), NewTopic("bulk", 1, 1)]).values():
            f.result(30)
        server = psutil.Process(broker.pid)
        value = b"x" * payload

        def consumer(topic: str) -> Consumer:
            c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic,
                          "auto.offset.reset": "earliest", "fetch.wait.max.ms": 5,
                          "enable.auto.commit": False})
            c.subscribe([topic])
            return c

        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        rtt = consumer("rtt")
        trips: list[float] = []
        for i in range(n + 20):  # the first 20 wait for the assignment: not counted
            t0 = time.perf_counter()
            producer.produce("rtt", value)
            producer.flush(10)
            while True:
                msg = rtt.poll(5.0)
                if msg is not None and msg.error() is None:
                    break
            if i >= 20:
                trips.append(1e3 * (time.perf_counter() - t0))
        rtt.close()

        bulk = 20 * n
        batched = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        s0, c0 = sum(server.cpu_times()[:2]), time.process_time()
        for _ in range(bulk):
            batched.produce("bulk", value)
            batched.poll(0)
        batched.flush(30)
        s1, c1 = sum(server.cpu_times()[:2]), time.process_time()
        reader, got = consumer("bulk"), 0
        while got < bulk:
            got += sum(1 for m in reader.consume(1000, 5.0) if m.error() is None)
        s2, c2 = sum(server.cpu_times()[:2]), time.process_time()
        reader.close()
    q = statistics.quantiles(trips, n=10)
    return {"trips": n, "payload_bytes": payload, "rtt_median_ms": statistics.median(trips),
            "rtt_p10_ms": q[0], "rtt_p90_ms": q[8], "bulk_records": bulk,
            "produce_client_ms": 1e3 * (c1 - c0) / bulk,
            "consume_client_ms": 1e3 * (c2 - c1) / bulk,
            "produce_broker_ms": 1e3 * (s1 - s0) / bulk,
            "consume_broker_ms": 1e3 * (s2 - s1) / bulk}


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares cost = a + b * documents (ms, ms per document)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return my - b * mx, b


def model(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per threshold: shard cost vs its documents (linear fit), gatherer and wire costs,
    and the busiest process of S machines: max(gatherer + its wire, shard + its wire)."""
    out: dict[str, Any] = {}
    for th in sorted({r["threshold"] for r in runs}):
        rs = [r for r in runs if r["threshold"] == th]
        pts = [(statistics.fmean(s["documents_per_shard"]), s["shard_busiest_summary"]["mean_ms"])
               for r in rs for s in r["sharded"]]
        a, b = fit(pts)
        g = statistics.fmean(s["gatherer"]["mean_ms"] for r in rs for s in r["sharded"])
        # the gatherer's wire per shard (encode one Prepared, decode one Answer), fitted
        # from the S runs as fixed + per-shard
        wg = fit([(s["shards"], s["wire"]["gatherer_ms"]) for r in rs for s in r["sharded"]])
        ws = statistics.fmean(s["wire"]["shard_ms"] for r in rs for s in r["sharded"])
        out[str(th)] = {"shard_fixed_ms": a, "shard_ms_per_1k_docs": 1e3 * b,
                        "gatherer_ms": g, "gatherer_wire_fixed_ms": wg[0],
                        "gatherer_wire_per_shard_ms": wg[1], "shard_wire_ms": ws}
    return out


def busiest_ms(m: dict[str, Any], window: float, shards: int,
               record_ms: float = 0.0) -> tuple[float, float]:
    """(gatherer ms, shard ms) per item at ``window`` documents over ``shards`` machines;
    ``record_ms``: a Kafka client's CPU to produce + consume one record (the gatherer sends
    S and reads S per item, a shard reads one and sends one)."""
    gat = (m["gatherer_ms"] + m["gatherer_wire_fixed_ms"]
           + (m["gatherer_wire_per_shard_ms"] + record_ms) * shards)
    shard = (m["shard_fixed_ms"] + m["shard_ms_per_1k_docs"] * window / shards / 1e3
             + m["shard_wire_ms"] + record_ms)
    return gat, shard


def report(out: dict[str, Any]) -> str:
    m, lines = out["model"], []
    lines += ["# One scope over S shards, in process (`python -m bench.shards`)", "",
              f"Machine: {out['machine']['cpu']}, {out['machine']['cores']} cores "
              f"({out['machine']['usable_cores']} usable), Python {out['machine']['python']}, "
              f"kernels {out['machine']['kernels']}, count_threads=1. Started "
              f"{out['started']}, {out['seconds']:.0f} s; load average (1, 5, 15 min) at "
              f"start {out['load_start']}, end {out['load_end']}.", "",
              "Method: CPU seconds of the one thread (`time.thread_time`), ~5 KB news items "
              "(`bench.workload`), one global scope, a full window warmed by indexing, "
              f"{out['measure']} measured items, each decided by the unsharded Detector and "
              "by every S in turn (same run, the first one rotating). ms = mean CPU per item "
              "(what sets throughput); [min-max] = the spread of the means of 5 consecutive "
              "blocks of items. Every sharded decision equals the unsharded Detector's "
              "(asserted). Wire: shardwire encoders/decoders, batch-timed, median of "
              f"{out['repeats']} repeats.", ""]
    lines += ["| t | window | S | docs/shard | unsharded ms | gatherer ms | shard ms (mean / "
              "busiest [spread]) | gather waits (max shard, mean) | wire gatherer ms | wire "
              "shard ms | bytes out / back per item | load 1-min |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: "
              "| ---: |"]
    for r in out["runs"]:
        ref = r["unsharded"]
        for s in r["sharded"]:
            b, w = s["shard_busiest_summary"], s["wire"]
            lines.append(
                f"| {r['threshold']} | {r['window']:,} | {s['shards']} | "
                f"{round(statistics.fmean(s['documents_per_shard'])):,} | "
                f"{ref['mean_ms']:.2f} | {s['gatherer']['mean_ms']:.3f} | "
                f"{s['shard_mean_ms']:.2f} / {b['mean_ms']:.2f} "
                f"[{b['block_min_ms']:.2f}-{b['block_max_ms']:.2f}] | "
                f"{s['per_item_max_shard']['mean_ms']:.2f} | {w['gatherer_ms']:.3f} | "
                f"{w['shard_ms']:.3f} | {w['bytes_out_per_item']:,} / "
                f"{w['bytes_back_per_item']:,} | "
                f"{r['load'][0]} |")
    lines += ["", "## Model: S shards on S machines (+ the gatherer)", "",
              "Per item, the busiest process takes max(g + wg(S), c(W/S) + ws), where g = "
              "gatherer (admit + resolve), wg(S) = its wire (S Prepared encodes + S Answer "
              "decodes), c(n) = a shard's answer with n documents (fit: a + b n over every "
              "run above), ws = a shard's wire (one decode + one encode). Throughput = 1 / "
              "busiest. Kafka's per-record cost is added below where it was measured "
              "(`--broker`).", "",
              "| t | g ms | wg(S) ms | c(n) ms | ws ms |", "| ---: | ---: | --- | --- | ---: |"]
    for th, p in m.items():
        lines.append(f"| {th} | {p['gatherer_ms']:.3f} | {p['gatherer_wire_fixed_ms']:.3f} + "
                     f"{p['gatherer_wire_per_shard_ms']:.3f} S | {p['shard_fixed_ms']:.2f} + "
                     f"{p['shard_ms_per_1k_docs']:.3f} per 1k docs | {p['shard_wire_ms']:.3f} |")
    b = out.get("broker")
    k = b["produce_client_ms"] + b["consume_client_ms"] if b else 0.0
    lines += ["", "Items/s one scope sustains (model; the busiest process, one core each). "
              "Core + wire only:", "", *rate_table(out, 0.0)]
    if b:
        lines += ["", f"With the Kafka clients' CPU per record (produce + consume, {k:.3f} ms"
                  " measured below; Faust's own per-record Python is not in it):", ""]
        lines += rate_table(out, k)
        lines += ["", f"Broker (embedded Tansu, loopback, confluent-kafka, "
                  f"{b['payload_bytes']:,}-byte records; load then {b['load']}): round trip "
                  f"produce -> consume of one record, linger 0, wall clock, {b['trips']} trips: "
                  f"median {b['rtt_median_ms']:.2f} ms (p10 {b['rtt_p10_ms']:.2f}, p90 "
                  f"{b['rtt_p90_ms']:.2f}). Bulk, {b['bulk_records']:,} records: client CPU "
                  f"{b['produce_client_ms']:.3f} ms per record produced, "
                  f"{b['consume_client_ms']:.3f} consumed; the broker's CPU "
                  f"{b['produce_broker_ms']:.3f} and {b['consume_broker_ms']:.3f}."]
    return "\n".join(lines) + "\n"


def rate_table(out: dict[str, Any], record_ms: float) -> list[str]:
    lines = ["| t | window | S=1 | S=2 | S=4 | S=8 | S=16 | S=32 | gatherer-bound from S |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for th, p in out["model"].items():
        for window in out["model_windows"]:
            rates, bound = [], "-"
            for s in (1, 2, 4, 8, 16, 32):
                rates.append(f"{1e3 / max(busiest_ms(p, window, s, record_ms)):,.0f}")
            for s in range(1, 1025):
                gat, shard = busiest_ms(p, window, s, record_ms)
                if gat >= shard:
                    bound = str(s)
                    break
            lines.append(f"| {th} | {window:,} | " + " | ".join(rates) + f" | {bound} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.3, 0.8])
    ap.add_argument("--window", type=int, nargs="+", default=[12_000, 50_000],
                    help="documents in the window (e.g. 2000 for a quick run)")
    ap.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--measure", type=int, default=300, help="measured items per config")
    ap.add_argument("--repeats", type=int, default=5, help="repeats of the wire batches")
    ap.add_argument("--broker", type=int, default=0,
                    help="round trips through the embedded broker (0: skip)")
    ap.add_argument("--model-windows", type=int, nargs="+", default=[12_000, 50_000, 200_000])
    ap.add_argument("--out", default="shards", help="bench/results/<out>.json and .md")
    ap.add_argument("--from-json", action="store_true",
                    help="reuse the runs of bench/results/<out>.json (e.g. to add --broker)")
    args = ap.parse_args(argv)
    if args.from_json:
        saved: dict[str, Any] = json.loads((RESULTS / f"{args.out}.json").read_text())
        saved["model_windows"] = args.model_windows
        return finish(saved, args.broker, args.out)

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    t_start, load_start = time.perf_counter(), load()
    runs = []
    for window in args.window:
        t = texts(window, args.measure)
        for th in args.thresholds:
            config = DetectorConfig(threshold=th, window_hours=LIVE_HOURS - 1, count_threads=1)
            book = learned_book(config)
            run: dict[str, Any] = {"threshold": th, "window": window, "load": load()}
            run |= measure(config, t, book, args.shards, args.repeats)
            run["load_end"] = load()
            print(f"t={th} W={window}: unsharded {run['unsharded']['mean_ms']:.2f} ms, "
                  "shards " + ", ".join(f"S={s['shards']}: {s['shard_mean_ms']:.2f}"
                                        for s in run["sharded"]), file=sys.stderr)
            runs.append(run)
    out: dict[str, Any] = {"machine": machine(), "started": started, "load_start": load_start,
                           "measure": args.measure, "repeats": args.repeats, "runs": runs,
                           "model_windows": args.model_windows}
    out["load_end"] = load()
    out["seconds"] = time.perf_counter() - t_start
    return finish(out, args.broker, args.out)


def finish(out: dict[str, Any], broker: int, name: str) -> int:
    """Model, broker figures (optional), and the report files."""
    out["model"] = model(out["runs"])
    if broker:
        size = round(statistics.fmean(s["wire"]["prepared_bytes"] for r in out["runs"]
                                      for s in r["sharded"]))
        out["broker"] = broker_costs(broker, size) | {"load": load()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(out, indent=1))
    (RESULTS / f"{name}.md").write_text(report(out))
    print(report(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
