"""Shared machinery of the reliability tests and of ``bench/crash_loop.py``.

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

import contextlib
import random
import re
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from worker_harness import WorkerProcess, expected_decisions

from ndd_stream import jsonio
from ndd_stream.kafka.broker import free_port
from ndd_stream.kafka.topics import apply, load_for
from ndd_stream.settings import Settings

try:
    from bench.workload import NewsStream, WorkloadConfig
except ImportError:  # pytest run from elsewhere than the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.workload import NewsStream, WorkloadConfig

Position = tuple[str, int, int]  # raw topic, partition, offset
Decided = tuple[str, str | None]  # status, duplicate_of

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


def create_topics(settings: Settings) -> None:
    report = apply(settings, load_for(settings), timeout=20)
    assert not report.errors, report


def worker_settings(bootstrap: str, suffix: str, data_dir: Path, **overrides: Any) -> Settings:
    """Settings for a dedicated broker (the ``make_settings`` fixture uses the shared one)."""
    fields: dict[str, Any] = {
        "brokers": bootstrap, "app_id": f"app-{suffix}", "raw_topics": f"raw-{suffix}",
        "unique_topic": f"unique-{suffix}", "duplicate_topic": f"duplicate-{suffix}",
        "dlq_topic": f"dlq-{suffix}", "decisions_topic": f"decisions-{suffix}",
        "data_dir": data_dir, "session_timeout_s": 6.0, "web_port": 0,
        "web_host": "127.0.0.1",
    }
    fields.update(overrides)
    return Settings(**fields)


class Feeder:
    """Produces lines into the raw topic in a background thread, ``rate`` lines a second,
    keyed by channel; remembers where each line landed (``positions[i]``)."""

    def __init__(self, settings: Settings, lines: Sequence[bytes | None], *, rate: float,
                 partition: int | None = None, keys: Sequence[bytes | None] | None = None,
                 timestamps_ms: Sequence[int] | None = None, chunk: int = 200) -> None:
        self.settings = settings
        self.topic = settings.raw_topic_list()[0]
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
        producer = Producer({"bootstrap.servers": self.settings.brokers,
                             "partitioner": "murmur2_random", "linger.ms": 5,
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
                kwargs: dict[str, Any] = {"value": self.lines[i],
                                          "on_delivery": self._delivered(i)}
                key = self.keys[i] if self.keys is not None else channel_key(self.lines[i])
                if key is not None:
                    kwargs["key"] = key
                if self.partition is not None:
                    kwargs["partition"] = self.partition
                if self.timestamps_ms is not None:
                    kwargs["timestamp"] = self.timestamps_ms[i]
                while True:
                    try:
                        producer.produce(self.topic, **kwargs)
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


# --- output -------------------------------------------------------------------------


@dataclass(frozen=True)
class Out:
    """One output record, reduced to what the checks need."""

    topic: str
    source: Position
    identity: str | None
    status: str | None
    duplicate_of: str | None
    policy: str | None
    reason: str | None  # ndd-dlq-reason (DLQ records only)
    replayed: bool
    value: bytes | None


class OutputReader:
    """Reads unique + duplicate + DLQ from the beginning and keeps reading (one consumer
    for the whole test, by ``assign``: no group join). ``records`` grows with ``poll``."""

    def __init__(self, settings: Settings) -> None:
        self.topics = [settings.unique_topic, settings.duplicate_topic, settings.dlq_topic]
        self.consumer = Consumer({"bootstrap.servers": settings.brokers,
                                  "group.id": f"rel-reader-{random.getrandbits(32):08x}",
                                  "enable.auto.commit": False, "enable.partition.eof": False,
                                  "fetch.message.max.bytes": 16_000_000})
        meta = self.consumer.list_topics(timeout=20)
        assignment = []
        for name in self.topics:
            topic = meta.topics.get(name)
            assert topic is not None and topic.partitions, f"no such topic {name}"
            assignment += [TopicPartition(name, p, OFFSET_BEGINNING) for p in topic.partitions]
        self.consumer.assign(assignment)
        self.records: list[Out] = []
        self.sources: set[Position] = set()

    def poll(self, seconds: float) -> int:
        """Read for up to ``seconds`` (returns early after 0.5 s without records)."""
        deadline = time.monotonic() + seconds
        quiet_since = time.monotonic()
        before = len(self.records)
        while time.monotonic() < deadline and time.monotonic() - quiet_since < 0.5:
            for msg in self.consumer.consume(1000, timeout=0.2):
                err = msg.error()
                assert err is None, f"consume error: {err}"
                self._add(msg)
                quiet_since = time.monotonic()
        return len(self.records) - before

    def _add(self, msg: Any) -> None:
        h: dict[str, bytes] = {}
        for k, v in msg.headers() or []:
            h[k] = v if isinstance(v, bytes) else (v or "").encode()

        def text(name: str) -> str | None:
            value = h.get(name)
            return value.decode() if value is not None else None

        source = (text("ndd-source-topic") or "?", int(text("ndd-source-partition") or -1),
                  int(text("ndd-source-offset") or -1))
        self.records.append(Out(
            topic=str(msg.topic()), source=source, identity=text("ndd-identity"),
            status=text("ndd-status"), duplicate_of=text("ndd-duplicate-of"),
            policy=text("ndd-policy"), reason=text("ndd-dlq-reason"),
            replayed=h.get("ndd-replayed") == b"1", value=msg.value()))
        self.sources.add(source)

    def wait_for(self, positions: Iterable[Position], timeout: float,
                 alive: Callable[[], bool] = lambda: True) -> bool:
        """Poll until every position is accounted for (or timeout, or ``alive()`` false)."""
        wanted = set(positions)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if wanted <= self.sources:
                return True
            if not alive():
                self.poll(2.0)
                return wanted <= self.sources
            self.poll(min(2.0, max(0.1, deadline - time.monotonic())))
        return wanted <= self.sources

    def wait_count(self, target: int, timeout: float,
                   alive: Callable[[], bool] = lambda: True) -> bool:
        """Poll until ``target`` distinct raw positions have come out."""
        deadline = time.monotonic() + timeout
        while len(self.sources) < target and time.monotonic() < deadline and alive():
            self.poll(min(1.0, max(0.1, deadline - time.monotonic())))
        return len(self.sources) >= target

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.consumer.close()


# --- checks -------------------------------------------------------------------------


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


def check_outputs(report: Report, records: Sequence[Out], positions: Sequence[Position],
                  want: dict[str, Decided], want_dlq: int = 0) -> list[str]:
    """Fill ``report``'s counts; return human-readable problems (empty: all guarantees hold).

    ``positions[i]`` is where input line i landed; ``want`` is dedup's decision by identity.
    """
    problems: list[str] = []
    by_source: dict[Position, list[Out]] = {}
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
        decisions = {(c.status or "", c.duplicate_of) for c in copies}
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


def dedup_of(settings: Settings, lines: list[bytes]) -> tuple[dict[str, Decided], int]:
    want, invalid = expected_decisions(settings, lines)
    return want, sum(invalid.values())


# --- worker processes ---------------------------------------------------------------


def start_worker(settings: Settings, log_path: Path) -> WorkerProcess:
    return WorkerProcess(settings, log_path).start()


def wait_exit(worker: WorkerProcess, timeout: float) -> int | None:
    """The worker's exit code once it exits on its own within ``timeout`` (else None)."""
    assert worker.proc is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = worker.proc.poll()
        if code is not None:
            return code
        time.sleep(0.2)
    return None


def log_events(log_path: Path) -> list[dict[str, Any]]:
    """The JSON log lines of a worker log (other lines skipped)."""
    out = []
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            with contextlib.suppress(Exception):
                out.append(jsonio.loads(line))
    return out


def events_named(log_path: Path, event: str) -> list[dict[str, Any]]:
    return [e for e in log_events(log_path) if e.get("event") == event]


def web_port(log_path: Path, timeout: float = 60.0) -> int | None:
    """The metrics port a worker announced in its start line."""
    deadline = time.monotonic() + timeout
    while True:
        if log_path.exists():
            found = re.findall(r"metrics on http://[^:]+:(\d+)/metrics", log_path.read_text(
                errors="replace"))
            if found:
                return int(found[-1])
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)


def scrape(port: int, timeout: float = 5.0) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text of http://127.0.0.1:port/metrics as {(name, labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as resp:
        body = resp.read().decode()
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)$', line)
        if not m:
            continue
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def metric_sum(metrics: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
               **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in metrics.items() if n == name and want <= set(ls))


# --- scenarios ----------------------------------------------------------------------


def crash_scenario(settings: Settings, workdir: Path, *, items: int, kills: int, seed: int,
                   rate: float = 1500.0, timeout: float = 600.0) -> tuple[Report, list[str]]:
    """Stream ``items`` while ``kills`` times kill -9 the worker at a random moment and
    start a new one; then drain and check. Returns the report and the problems found."""
    rnd = random.Random(seed)
    started = time.monotonic()
    create_topics(settings)
    lines = news_lines(items, seed)
    want, want_dlq = dedup_of(settings, lines)
    report = Report("kill -9", items)
    reader = OutputReader(settings)
    feeder = Feeder(settings, lines, rate=rate).start()
    worker = start_worker(settings, workdir / "worker-0.log")
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
                                       alive=worker.alive)
                assert ok or not worker.alive(), (
                    f"no progress to {target} outputs before kill {k + 1}\n"
                    f"{worker.log_tail()}")
                time.sleep(rnd.uniform(0.0, 0.4))  # mid-batch, mid-produce, mid-commit
            assert worker.alive(), f"worker died on its own\n{worker.log_tail()}"
            worker.kill9()
            report.crashes += 1
            worker = start_worker(settings, workdir / f"worker-{report.crashes}.log")
        positions = feeder.join(timeout=max(10.0, deadline - time.monotonic()))
        drained = reader.wait_for(positions, timeout=max(10.0, deadline - time.monotonic()),
                                  alive=worker.alive)
        if not drained:
            problems.append(f"not drained within {timeout:.0f}s\n{worker.log_tail()}")
        # a clean stop of a worker that is up (SIGTERM while Python still imports is fatal)
        _wait(lambda: bool(events_named(worker.log_path, "partition_ready")), 60)
        code = worker.stop()
        if code != 0:
            problems.append(f"clean stop exited {code}\n{worker.log_tail()}")
        reader.poll(1.0)
    finally:
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
    rnd = random.Random(seed)
    started = time.monotonic()
    create_topics(first_settings)
    lines = news_lines(items, seed)
    want, want_dlq = dedup_of(first_settings, lines)
    report = Report("rebalance", items)
    reader = OutputReader(first_settings)
    # The feed comes in 2*cycles+1 shares, each released at a phase: new items arrive
    # while the second worker owns partitions (a backlog could be drained before its join
    # completes, and then the leave would hand back nothing to rebuild).
    share = max(1, items // (2 * cycles + 1))
    feeder = Feeder(first_settings, lines, rate=rate).allow(share).start()
    first = start_worker(first_settings, workdir / "first.log")
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
                    ready = len(events_named(second.log_path, "partition_ready"))
                    assert _wait(lambda r=ready: len(events_named(
                        second.log_path, "partition_ready")) > r, 120), second.log_tail()
                    feeder.allow(allowed + share)
                    # ... and has decided items there, so that its leave hands partitions
                    # with changelog records back
                    assert _wait(lambda: decided_by(second) > 0, 120), (
                        f"second worker decided nothing\n{second.log_tail()}")
                else:
                    feeder.allow(allowed + share)  # it leaves while items arrive
                    code = second.stop()
                    if code != 0:
                        problems.append(f"second worker exited {code}\n{second.log_tail()}")
                report.rebalances += 1
                assert first.alive(), f"first worker died\n{first.log_tail()}"
        feeder.allow(items)
        positions = feeder.join(timeout=max(10.0, deadline - time.monotonic()))
        if not reader.wait_for(positions, timeout=max(10.0, deadline - time.monotonic()),
                               alive=first.alive):
            problems.append(f"not drained within {timeout:.0f}s\n{first.log_tail()}")
        code = first.stop()
        if code != 0:
            problems.append(f"first worker exited {code}\n{first.log_tail()}")
        reader.poll(1.0)
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


def decided_by(worker: WorkerProcess) -> float:
    """Items a running worker has decided so far, from its metrics (0 if not reachable)."""
    port = web_port(worker.log_path, timeout=0.0)
    if port is None:
        return 0.0
    try:
        return metric_sum(scrape(port, timeout=2.0), "ndd_items_total")
    except OSError:
        return 0.0


def _wait(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def fresh_port() -> int:
    return free_port()
