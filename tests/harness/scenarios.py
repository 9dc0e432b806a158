"""Reliability scenarios (tests/test_reliability_*.py and ``bench/crash_loop.py``).

A *scenario* streams news-like items into the raw topic while worker processes are
killed, restarted, joined and stopped, then reads every output topic and checks the
three guarantees: every produced raw record comes out (unique, duplicate or DLQ), every
copy of a redelivered item carries the same decision, and the decisions equal what
``ndd-stream dedup`` decides on the same input. Every wait is bounded.

Accounting is by *raw position* (topic, partition, offset): every output record carries
it in ``ndd-source-*`` headers, decided or dead-lettered, so a record without an id or
one that went to the DLQ is accounted for just like the others.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer

from bench.workload import NewsStream, WorkloadConfig
from harness.kafka import Outgoing, Position, Reader, Record, create_topics, wait_until
from harness.worker import Decided, WorkerProcess, expected_decisions
from ndd_stream import jsonio
from ndd_stream.settings import Settings

FEED_START = 1_772_352_000.0  # 2026-03-01 08:00 UTC: in the past, so never "future"


# --- input --------------------------------------------------------------------------


def news_lines(n: int, seed: int, *, spacing: float = 18.0, target_bytes: int = 200,
               duplicate_rate: float = 0.3, start: float = FEED_START,
               id_prefix: str = "") -> list[bytes]:
    """``n`` short news-like items (bench/workload.py text: Zipf vocabulary, entities,
    ~30% edits of recent items, 8 channels), ``spacing`` event-time seconds apart.
    Timestamps alternate between ISO-8601 and epoch seconds."""
    stream = NewsStream(WorkloadConfig(seed=seed, target_bytes=target_bytes, spacing=spacing,
                                       duplicate_rate=duplicate_rate, start=start, scope="-"))
    out = []
    for i, doc in enumerate(stream.take(n)):
        ts: str | float = (datetime.fromtimestamp(doc.timestamp, tz=UTC).isoformat()
                           .replace("+00:00", "Z")) if i % 2 else doc.timestamp
        out.append(jsonio.dumps({"id": id_prefix + doc.identity, "channel": doc.channel,
                                 "text": doc.text, "timestamp": ts}))
    return out


def channel_key(line: bytes | None) -> bytes | None:
    try:
        return str(jsonio.loads(line or b"").get("channel", "")).encode()
    except Exception:
        return None


class Feeder:
    """Produces lines into the raw topic in a background thread, ``rate`` lines a second,
    keyed by channel; remembers where each line landed (``positions[i]``)."""

    def __init__(self, settings: Settings, lines: Sequence[bytes | None], *, rate: float,
                 partition: int | None = None, keys: Sequence[bytes | None] | None = None,
                 timestamps_ms: Sequence[int] | None = None, chunk: int = 200) -> None:
        self.settings = settings
        self.topic = settings.raw_topics[0]
        self.lines = lines
        self.rate = rate
        self.partition = partition
        self.keys = keys
        self.timestamps_ms = timestamps_ms
        self.chunk = chunk
        self.positions: list[Position | None] = [None] * len(lines)
        self.errors: list[str] = []
        self.allowed = len(lines)  # lines it may produce so far (see allow)
        self._more = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)

    def allow(self, n: int) -> Feeder:
        """Produce only the first ``n`` lines until allowed more (a scenario's phases)."""
        self.allowed = min(len(self.lines), n)
        self._more.set()
        return self

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.settings.bootstrap_servers(),
                             "partitioner": "murmur2_random", "linger.ms": 5,
                             "enable.idempotence": True,
                             "message.max.bytes": 16_000_000, "message.timeout.ms": 120_000})
        started, paced_from = time.monotonic(), 0  # pacing restarts after each hold
        held_until = time.monotonic() + 900.0  # holds end 900 s after the start at most
        lo = 0
        while lo < len(self.lines):
            if lo >= self.allowed:
                if time.monotonic() > held_until:
                    self.errors.append(f"still held at line {lo} 900 s after the start")
                    break
                self._more.wait(0.5)
                self._more.clear()
                started, paced_from = time.monotonic(), lo
                continue
            hi = min(lo + self.chunk, self.allowed)
            for i in range(lo, hi):
                record = Outgoing(
                    self.lines[i], partition=self.partition,
                    key=self.keys[i] if self.keys is not None else channel_key(self.lines[i]),
                    timestamp_ms=self.timestamps_ms[i] if self.timestamps_ms else None)
                while True:
                    try:
                        producer.produce(self.topic, on_delivery=self._delivered(i),
                                         **record.kwargs())
                        break
                    except BufferError:
                        producer.poll(0.1)
                producer.poll(0)
            lo = hi
            ahead = (hi - paced_from) / self.rate - (time.monotonic() - started)
            if ahead > 0:
                producer.flush(ahead)
                time.sleep(max(0.0, (hi - paced_from) / self.rate
                               - (time.monotonic() - started)))
        if producer.flush(120) != 0:
            self.errors.append("records not delivered within 120 s")

    def _delivered(self, i: int) -> Callable[[KafkaError | None, Any], None]:
        def done(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.positions[i] = (str(msg.topic()), int(msg.partition()), int(msg.offset()))

        return done

    def join(self, timeout: float) -> list[Position]:
        """Wait (bounded) until every line is delivered; their positions."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"feeder still producing after {timeout}s"
        assert not self.errors, self.errors[:3]
        missing = [i for i, p in enumerate(self.positions) if p is None]
        assert not missing, f"{len(missing)} lines without a delivery report"
        return [p for p in self.positions if p is not None]

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()


# --- checks ---------------------------------------------------------------------------


@dataclass
class Report:
    """The figures of one scenario (what docs/RELIABILITY.md reports)."""

    scenario: str
    items: int
    crashes: int = 0
    rebalances: int = 0
    redelivered: int = 0  # output copies beyond the first, per raw position
    replayed: int = 0  # copies answered from the stored decision (ndd-replayed: 1)
    mismatches: int = 0  # copies whose decision differs from another copy or from dedup
    lost: int = 0  # raw records with no output at all
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"{self.scenario}: items={self.items} crashes={self.crashes} "
                f"rebalances={self.rebalances} redelivered={self.redelivered} "
                f"replayed={self.replayed} mismatches={self.mismatches} lost={self.lost} "
                f"seconds={self.seconds:.0f}")


def check_outputs(report: Report, records: Sequence[Record], positions: Sequence[Position],
                  want: dict[str, Decided], want_dlq: int = 0) -> list[str]:
    """Fill ``report``'s counts; return human-readable problems (empty: all guarantees hold).

    ``positions[i]`` is where input line i landed; ``want`` is dedup's decision by identity.
    """
    problems: list[str] = []
    by_source: dict[Position, list[Record]] = {}
    for rec in records:
        by_source.setdefault(rec.source, []).append(rec)
    lost = [p for p in positions if p not in by_source]
    report.lost = len(lost)
    if lost:
        problems.append(f"{len(lost)} raw records never came out, e.g. {lost[:5]}")
    strays = set(by_source) - set(positions)
    if strays:
        problems.append(f"{len(strays)} outputs for unknown raw positions: {sorted(strays)[:5]}")
    report.redelivered = sum(len(v) - 1 for v in by_source.values())
    report.replayed = sum(1 for r in records if r.replayed)
    mismatched: list[str] = []
    decided: set[str] = set()
    dlq = 0
    for source, copies in by_source.items():
        if copies[0].reason is not None:
            dlq += 1
            if len({c.reason for c in copies}) != 1 or any(c.status for c in copies):
                mismatched.append(f"{source}: {[(c.reason, c.status) for c in copies]}")
            continue
        decisions = {(c.status or "", c.duplicate_of, c.story or "") for c in copies}
        identity = copies[0].identity or ""
        decided.add(identity)
        expected = want.get(identity)
        if len(decisions) != 1 or expected is None or decisions != {expected}:
            mismatched.append(f"{source} {identity}: got {sorted(decisions, key=str)}, "
                              f"dedup {expected}")
    report.mismatches = len(mismatched)
    if mismatched:
        problems.append(f"{len(mismatched)} decisions differ, e.g. {mismatched[:5]}")
    missing_ids = set(want) - decided
    if missing_ids and not lost:
        problems.append(f"identities never decided: {sorted(missing_ids)[:5]}")
    if dlq != want_dlq:
        problems.append(f"{dlq} raw records dead-lettered, dedup rejects {want_dlq}")
    return problems


def feed_all(settings: Settings, lines: list[bytes], timeout: float = 60.0) -> list[Position]:
    """Produce ``lines`` to the raw topics at once; where they landed, once all are acked."""
    return Feeder(settings, lines, rate=5000).start().join(timeout=timeout)


def dedup_of(settings: Settings, lines: list[bytes]) -> tuple[dict[str, Decided], int]:
    want, invalid = expected_decisions(settings, lines)
    return want, sum(invalid.values())


# --- scenarios ----------------------------------------------------------------------


def prepare(settings: Settings, items: int, seed: int, *, id_prefix: str = ""
            ) -> tuple[list[bytes], dict[str, Decided], int, Reader]:
    """A scenario's topics, input lines, dedup's decisions on them, and an output reader."""
    create_topics(settings)
    lines = news_lines(items, seed, id_prefix=id_prefix)
    want, want_dlq = dedup_of(settings, lines)
    return lines, want, want_dlq, Reader.outputs(settings)


def _drain_and_stop(feeder: Feeder, reader: Reader, worker: WorkerProcess, deadline: float,
                    problems: list[str]) -> list[Position]:
    """The end of a scenario: the whole feed delivered and come out, then a clean stop of
    the worker; what went wrong is added to ``problems``. Where the lines landed."""
    positions = feeder.join(timeout=max(10.0, deadline - time.monotonic()))
    if not reader.wait_for(positions, timeout=max(10.0, deadline - time.monotonic()),
                           alive=worker.alive):
        problems.append(f"not drained in time\n{worker.log_tail()}")
    # a clean stop of a worker that is up (SIGTERM while Python still imports is fatal)
    worker.wait_event("partition_ready", 60)
    code = worker.stop()
    if code != 0:
        problems.append(f"clean stop of {worker.log_path.name} exited {code}\n"
                        f"{worker.log_tail()}")
    reader.read(timeout=1.0, idle=0.5)  # what is still on its way
    return positions


def crash_scenario(settings: Settings, workdir: Path, *, items: int, kills: int, seed: int,
                   rate: float = 1500.0, timeout: float = 600.0,
                   workers: int = 1) -> tuple[Report, list[str]]:
    """Stream ``items`` while ``kills`` times kill -9 the worker (with ``workers`` > 1, one
    of them at random, each with its own state) at a random moment and start a new one;
    then drain and check. Returns the report and the problems found."""
    rnd, started = random.Random(seed), time.monotonic()
    lines, want, want_dlq, reader = prepare(settings, items, seed)
    report = Report("kill -9" if workers == 1 else f"kill -9, {workers} workers", items)
    feeder = Feeder(settings, lines, rate=rate).start()
    own = [settings] + [settings.model_copy(update={
        "data_dir": settings.data_dir.parent / f"{settings.data_dir.name}-{i}"})
        for i in range(1, workers)]
    running = [WorkerProcess(s, workdir / f"worker-{i}-0.log" if workers > 1
                             else workdir / "worker-0.log").start() for i, s in enumerate(own)]

    def alive() -> bool:
        return all(w.alive() for w in running)

    problems: list[str] = []
    deadline = started + timeout
    try:
        for k in range(kills):
            remaining = kills - k
            if rnd.random() < 0.2:
                # anywhere in startup: group join, partition restore, first batches
                time.sleep(rnd.uniform(0.3, 7.0))
            else:
                done = len(reader.sources)
                step = max(1, (items - done) // (remaining + 1))
                target = done + rnd.randint(max(1, step // 4), max(1, step * 3 // 2))
                ok = reader.wait_count(min(target, items), timeout=deadline - time.monotonic(),
                                       alive=alive)
                assert ok or not alive(), (
                    f"no progress to {target} outputs before kill {k + 1}\n"
                    + "\n".join(w.story() for w in running))
                time.sleep(rnd.uniform(0.0, 0.4))  # mid-batch, mid-produce, mid-commit
            victim = rnd.randrange(workers) if workers > 1 else 0
            worker = running[victim]
            assert worker.alive(), f"worker died on its own\n{worker.log_tail()}"
            worker.kill9()
            report.crashes += 1
            log = (workdir / f"worker-{victim}-{report.crashes}.log" if workers > 1
                   else workdir / f"worker-{report.crashes}.log")
            running[victim] = WorkerProcess(own[victim], log).start()
        for other in running[1:]:  # the first one drains the rest
            other.stop()
        positions = _drain_and_stop(feeder, reader, running[0], deadline, problems)
    finally:
        for worker in running:
            worker.stop()
        reader.close()
    problems += check_outputs(report, reader.records, positions, want, want_dlq)
    report.seconds = time.monotonic() - started
    return report, problems


def rebalance_scenario(first_settings: Settings, second_settings: Settings, workdir: Path, *,
                       items: int, cycles: int, seed: int, rate: float = 1500.0,
                       timeout: float = 600.0) -> tuple[Report, list[str]]:
    """Stream ``items`` with one worker; ``cycles`` times a second worker joins at a random
    moment and leaves (SIGTERM, clean) at another; then drain and check. The first worker
    must rebuild the partitions it gets back from the changelog the second one wrote."""
    rnd, started = random.Random(seed), time.monotonic()
    lines, want, want_dlq, reader = prepare(first_settings, items, seed)
    report = Report("rebalance", items)
    # The feed comes in 2*cycles+1 shares, each released at a phase: new items arrive
    # while the second worker owns partitions (a backlog could be drained before its join
    # completes, and then the leave would hand back nothing to rebuild).
    share = max(1, items // (2 * cycles + 1))
    feeder = Feeder(first_settings, lines, rate=rate).allow(share).start()
    first = WorkerProcess(first_settings, workdir / "first.log").start()
    second = WorkerProcess(second_settings, workdir / "second.log")
    problems: list[str] = []
    deadline = started + timeout
    try:
        for c in range(cycles):
            for phase in ("join", "leave"):
                done, allowed = len(reader.sources), feeder.allowed
                ahead = max(1, allowed - done)
                target = min(allowed, done + rnd.randint(max(1, ahead // 3), ahead))
                ok = reader.wait_count(target, timeout=deadline - time.monotonic(),
                                       alive=first.alive)
                assert ok, f"no progress to {target} before {phase} {c + 1}\n{first.log_tail()}"
                if phase == "join":
                    second.start()
                    # wait until it really owns partitions (else the leave moves nothing)
                    ready = len(second.events("partition_ready"))
                    assert wait_until(lambda r=ready: len(second.events("partition_ready")) > r,
                                      120), second.log_tail()
                    feeder.allow(allowed + share)
                    # ... and has decided items there, so that its leave hands partitions
                    # with changelog records back
                    assert wait_until(lambda: second.decided() > 0, 120), (
                        f"second worker decided nothing\n{second.log_tail()}")
                else:
                    feeder.allow(allowed + share)  # it leaves while items arrive
                    code = second.stop()
                    if code != 0:
                        problems.append(f"second worker exited {code}\n{second.log_tail()}")
                report.rebalances += 1
                assert first.alive(), f"first worker died\n{first.log_tail()}"
        feeder.allow(items)
        positions = _drain_and_stop(feeder, reader, first, deadline, problems)
    finally:
        first.stop()
        second.stop()
        reader.close()
    restored = [int(n) for n in re.findall(r"\((\d+) changelog records\)",
                                           (workdir / "first.log").read_text(errors="replace"))]
    report.notes.append(f"changelog records rebuilt by the first worker: {sum(restored)}")
    if sum(restored) == 0:
        problems.append("the first worker never rebuilt a partition from the changelog")
    problems += check_outputs(report, reader.records, positions, want, want_dlq)
    report.seconds = time.monotonic() - started
    return report, problems


