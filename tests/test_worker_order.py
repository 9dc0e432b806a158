"""Event-time order of a cross-channel scope in the decider pool, on an in-memory log.

The router forwards raw partitions in whatever order it fetches them; here the worst
case: one raw partition after another (a backlog), with the router's progress records.
Whatever that order, and wherever a restart falls, the pool decides like ``ndd-stream
dedup`` on the items sorted by event time (ties: raw topic, partition, offset). The
broker tests (test_order_broker) run the same code through real workers and Kafka."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path

import pytest
from harness.fakes import MemoryLog
from harness.kafka import make_settings
from harness.worker import expected_decisions
from newsgen import items
from test_worker_pool import Killed, dies_after

from ndd_stream import jsonio
from ndd_stream.core.items import order_time_ms
from ndd_stream.kafka.reads import Fetched
from ndd_stream.worker.deciding import OutputTopics
from ndd_stream.worker.merge import NO_TIME
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.pool import DeciderPool, OrderConfig
from ndd_stream.worker.records import PROGRESS_KEY, Progress, Source
from ndd_stream.worker.router import route_raw

SCOPED, RAW = "scoped", "raw"
TOPICS = OutputTopics("unique", "duplicate", "dlq", None, "changelog")
SETTINGS = make_settings(scope="global")
PARTITIONS = 4


def cross_channel_lines(n: int, seed: int) -> list[bytes]:
    """Items of several channels; a fifth copy (or edit) an earlier item of another channel,
    as when one agency story reaches the receiver through several aggregators."""
    rnd = random.Random(seed)
    out = items(n, seed=seed, channels=PARTITIONS)
    for i, item in enumerate(out):
        others = [x for x in out[max(0, i - 40):i] if x["channel"] != item["channel"]]
        if others and rnd.random() < 0.2:
            item["text"] = rnd.choice(others)["text"]
    return [jsonio.dumps(item) for item in out]


def by_partition(lines: list[bytes]) -> list[list[bytes]]:
    """Raw partitions keyed by channel, as crawlers (and ``ndd-stream produce``) key them."""
    parts: list[list[bytes]] = [[] for _ in range(PARTITIONS)]
    for line in lines:
        parts[int(jsonio.loads(line)["channel"][2:]) % PARTITIONS].append(line)
    return parts


def event_order(parts: list[list[bytes]]) -> list[bytes]:
    """The documented order: event time, then raw topic, partition, offset."""
    fmt = SETTINGS.item_format()
    keyed = [((order_time_ms(jsonio.loads(line), fmt, None), RAW, p, o), line)
             for p, part in enumerate(parts) for o, line in enumerate(part)]
    return [line for _, line in sorted(keyed)]


def forward_backlog(log: MemoryLog, parts: list[list[bytes]], chunk: int, seed: int,
                    silent: frozenset[int] = frozenset()) -> None:
    """What routers write to the one scoped partition of a global scope during a backlog:
    raw partitions in random chunks, each followed by its progress record, then every raw
    partition's last word (caught up); nothing at all of the ``silent`` ones."""
    rnd = random.Random(seed)
    cursors = [0] * len(parts)
    latest = [NO_TIME] * len(parts)
    fmt = SETTINGS.item_format()
    while any(c < len(p) for c, p in zip(cursors, parts, strict=True)):
        p = rnd.choice([i for i, part in enumerate(parts) if cursors[i] < len(part)])
        for offset in range(cursors[p], min(cursors[p] + chunk, len(parts[p]))):
            record, invalid = route_raw(parts[p][offset], None, Source(RAW, p, offset), fmt,
                                        SCOPED, "dlq", ordered=True)
            assert invalid is None
            log.append(SCOPED, 0, record.key, record.value, list(record.headers))
            latest[p] = max(latest[p], order_time_ms(jsonio.loads(parts[p][offset]), fmt, None)
                            or NO_TIME)
            cursors[p] = offset + 1
        _progress(log, Progress(RAW, p, cursors[p], latest[p], len(parts[p])))
    for p, part in enumerate(parts):
        if p not in silent:
            _progress(log, Progress(RAW, p, len(part), latest[p], len(part)))


def _progress(log: MemoryLog, progress: Progress) -> None:
    record = progress.record(SCOPED, 0)
    log.append(SCOPED, 0, record.key, record.value, list(record.headers))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _pool(log: MemoryLog, state: Path, clock: Clock) -> DeciderPool:
    pool = DeciderPool(state, SETTINGS.detector_config(), SETTINGS.item_format(), TOPICS, log,
                       WorkerMetrics(), scoped_topic=SCOPED,
                       order=OrderConfig(idle_s=1.0, stall_s=60.0, max_bytes=1 << 30), clock=clock)
    pool.expect([(RAW, p) for p in range(PARTITIONS)])
    return pool


def _decisions(log: MemoryLog) -> dict[str, set[tuple[str, str | None, str]]]:
    out: dict[str, set[tuple[str, str | None, str]]] = {}
    for record in log.topic("unique") + log.topic("duplicate"):
        h = dict(record.headers)
        dup = h.get("ndd-duplicate-of")
        out.setdefault(h["ndd-identity"].decode(), set()).add(
            (h["ndd-status"].decode(), dup.decode() if dup else None,
             h["ndd-story"].decode()))
    return out


def _want(lines: list[bytes]) -> dict[str, set[tuple[str, str | None, str]]]:
    want, _ = expected_decisions(SETTINGS, lines)
    return {identity: {decision} for identity, decision in want.items()}


def heartbeat(log: MemoryLog) -> list[Fetched]:
    """The routers' timer: each raw partition's latest progress (caught up) again."""
    latest: dict[int, Fetched] = {}
    for record in log.logs[(SCOPED, 0)]:
        if record.key == PROGRESS_KEY:
            latest[Progress.parse(record.value).partition] = record  # type: ignore[union-attr]
    for record in latest.values():
        log.append(SCOPED, 0, record.key, record.value, list(record.headers))
    return log.logs[(SCOPED, 0)][-len(latest):] if latest else []


def _run(pool: DeciderPool, log: MemoryLog, start: int, stop: int, batch: int,
         clock: Clock, *, last: bool = True) -> None:
    """Decide records [start, stop) in batches; ``last``: the feed is over, and after the
    idle wait the routers confirm that they have nothing more."""
    records = log.logs[(SCOPED, 0)]

    async def go() -> None:
        for at in range(start, stop, batch):
            await pool.process(records[at:min(stop, at + batch)], log.send)
        for _ in range(2 if last else 0):  # (a restart re-reads held items: they come anew)
            clock.now += 5.0
            await pool.process(heartbeat(log), log.send)

    asyncio.run(go())


def test_a_backlog_forwarded_partition_by_partition_is_decided_in_event_time_order(
        tmp_path: Path) -> None:
    lines = cross_channel_lines(160, seed=3)
    parts = by_partition(lines)
    log = MemoryLog()
    forward_backlog(log, parts, chunk=50, seed=1)
    clock = Clock()
    _run(_pool(log, tmp_path, clock), log, 0, len(log.logs[(SCOPED, 0)]), 37, clock)
    want = _want(event_order(parts))
    assert _decisions(log) == want
    # the test means something: fetch order would decide differently
    assert _want([line for part in parts for line in part]) != want
    assert sum(1 for d in want.values() if next(iter(d))[0] != "unique") > 20
    assert not [r for r in log.topic("unique") + log.topic("duplicate")
                if dict(r.headers).get("ndd-order")]


def test_records_before_the_raw_partitions_are_told_are_held(tmp_path: Path) -> None:
    """Faust delivers records before the worker's rebalance callback has listed the raw
    partitions: the raw partitions forwarded first must not be decided past the others,
    whose records come later."""
    lines = cross_channel_lines(160, seed=3)
    parts = by_partition(lines)
    log = MemoryLog()
    forward_backlog(log, parts, chunk=50, seed=1)
    records = log.logs[(SCOPED, 0)]
    first_other = next(i for i, r in enumerate(records)
                       if r.key != PROGRESS_KEY and r.headers != records[0].headers
                       and dict(r.headers).get("ndd-source-partition")
                       != dict(records[0].headers).get("ndd-source-partition"))
    clock = Clock()
    pool = DeciderPool(tmp_path, SETTINGS.detector_config(), SETTINGS.item_format(), TOPICS,
                       log, WorkerMetrics(), scoped_topic=SCOPED,
                       order=OrderConfig(idle_s=1.0, stall_s=60.0, max_bytes=1 << 30),
                       clock=clock)

    async def go() -> None:
        await pool.process(records[:first_other], log.send)  # one raw partition's, untold
        assert not log.topic("unique") + log.topic("duplicate")
        pool.expect([(RAW, p) for p in range(PARTITIONS)])

    asyncio.run(go())
    _run(pool, log, first_other, len(records), 37, clock)
    assert _decisions(log) == _want(event_order(parts))


@pytest.mark.parametrize("every", [256, 3])
def test_a_restart_anywhere_in_the_backlog_changes_no_decision(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int) -> None:
    """``every``: the pool's checkpoint interval (3: batches checkpointed in pieces)."""
    monkeypatch.setattr("ndd_stream.worker.pool.CHECKPOINT_ITEMS", every)
    lines = cross_channel_lines(120, seed=5)
    parts = by_partition(lines)
    want = _want(event_order(parts))
    for crash_at in (1, 45, 97, 180):
        log = MemoryLog()
        forward_backlog(log, parts, chunk=30, seed=crash_at)
        end = len(log.logs[(SCOPED, 0)])
        state = tmp_path / str(crash_at)
        clock = Clock()
        first = _pool(log, state, clock)
        _run(first, log, 0, min(crash_at, end), 25, clock, last=False)
        first.close()
        again = _pool(log, state, clock)
        # a restarted worker gets Faust's committed offset or later: here, the crash point
        _run(again, log, min(crash_at, end), end, 25, clock)
        assert _decisions(log) == want, crash_at


def _stamped_backlog(parts: list[list[bytes]], *, stamped: bool) -> MemoryLog:
    """A backlog as routers wrote it while raw[3] stayed empty: its router confirmed "nothing
    more" every 10 records, and every record carries the Kafka timestamp its router gave it
    (0.1 s apart), or none (``stamped`` False: a broker or client that sets none)."""
    parts = [*parts[:3], []]
    forwarded = MemoryLog()
    forward_backlog(forwarded, parts, chunk=25, seed=8)
    log = MemoryLog()
    empty = Progress(RAW, 3, 0, NO_TIME, 0).record(SCOPED, 0)
    for i, r in enumerate(forwarded.logs[(SCOPED, 0)]):
        stamp = 1_000.0 + 0.1 * i
        log.append(SCOPED, 0, r.key, r.value, r.headers, stamp if stamped else None)
        if i % 10 == 9:
            log.append(SCOPED, 0, empty.key, empty.value, list(empty.headers),
                       stamp if stamped else None)
    return log


def test_a_backlog_read_in_one_burst_steps_over_an_empty_partition_by_the_routers_clock(
        tmp_path: Path) -> None:
    """The sequencer reads a backlog much later than the routers wrote it: confirmations of
    the empty raw partition sent over a second after an item (by the records' timestamps)
    let it through at once, although the sequencer read both within the same instant (its
    own clock never moves here). Without timestamps the items wait for a confirmation
    *read* a second later, as before; the decisions are the same either way."""
    lines = cross_channel_lines(160, seed=13)
    parts = by_partition(lines)
    want = _want(event_order(parts[:3]))
    decided = {}
    for stamped in (True, False):
        log = _stamped_backlog(parts, stamped=stamped)
        clock = Clock()
        pool = _pool(log, tmp_path / str(stamped), clock)
        records = list(log.logs[(SCOPED, 0)])

        async def go(pool: DeciderPool = pool, records: list[Fetched] = records,
                     log: MemoryLog = log) -> int:
            return sum([await pool.process(records[at:at + 37], log.send)
                        for at in range(0, len(records), 37)])

        decided[stamped] = asyncio.run(go())
        _run(pool, log, len(records), len(records), 37, clock)  # the routers' next words
        assert _decisions(log) == want, stamped
    items = sum(len(p) for p in parts[:3])
    assert decided[False] == 0
    # all but the items forwarded within the last second of the routers' clock (~10 records)
    assert items - 15 <= decided[True] < items


@pytest.mark.parametrize("every", [4, 1000])
def test_a_confirmation_that_frees_a_backlog_is_decided_in_checkpointed_pieces(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int) -> None:
    """One record can free a whole backlog (the confirmation that lets held items pass an
    empty raw partition). They are released a piece's budget at a time, each piece
    checkpointed, so a kill after 13 outputs re-sends one of them, not all 13; and the
    restart decides every item once, as ``dedup --event-order``."""
    monkeypatch.setattr("ndd_stream.worker.pool.CHECKPOINT_ITEMS", every)
    parts = by_partition(cross_channel_lines(60, seed=17))
    log = _stamped_backlog(parts, stamped=False)
    clock = Clock()
    first = _pool(log, tmp_path, clock)
    assert asyncio.run(first.process(list(log.logs[(SCOPED, 0)]), log.send)) == 0  # all held
    clock.now += 5.0
    with pytest.raises(Killed):
        asyncio.run(first.process(heartbeat(log), dies_after(log, 13)))
    first.close()  # the uncommitted RocksDB batch is dropped, as by a kill
    end = len(log.logs[(SCOPED, 0)])
    _run(_pool(log, tmp_path, clock), log, end, end, 37, clock)  # the routers' next words
    assert _decisions(log) == _want(event_order(parts[:3]))
    copies = Counter(dict(r.headers)["ndd-identity"]
                     for r in log.topic("unique") + log.topic("duplicate"))
    assert sum(copies.values()) - len(copies) == (1 if every == 4 else 13)


def test_a_silent_raw_partition_is_waited_for_then_passed_and_its_late_items_are_behind(
        tmp_path: Path) -> None:
    lines = cross_channel_lines(40, seed=7)
    parts = by_partition(lines)
    silent = parts[3]
    parts[3] = []
    log = MemoryLog()
    forward_backlog(log, parts, chunk=50, seed=2, silent=frozenset({3}))
    clock = Clock()
    pool = _pool(log, tmp_path, clock)
    records = list(log.logs[(SCOPED, 0)])

    async def go() -> int:
        decided = await pool.process(records, log.send)
        assert decided == 0  # raw[3] has said nothing: its worker may be down (stall_s)
        clock.now += 59.0
        assert await pool.process(heartbeat(log), log.send) == 0  # the others are idle
        clock.now += 1.0
        return await pool.tick(log.send)

    assert asyncio.run(go()) == sum(len(p) for p in parts)
    # raw[3]'s items come now, older than what was decided: decided at once, flagged
    for offset, line in enumerate(silent):
        record, _ = route_raw(line, None, Source(RAW, 3, offset), SETTINGS.item_format(),
                              SCOPED, "dlq", ordered=True)
        log.append(SCOPED, 0, record.key, record.value, list(record.headers))
    late = log.logs[(SCOPED, 0)][len(records) + PARTITIONS - 1:]
    assert asyncio.run(pool.process(late, log.send)) == len(silent)
    flagged = [r for r in log.topic("unique") + log.topic("duplicate")
               if dict(r.headers).get("ndd-order") == b"behind"]
    assert len(flagged) == len(silent)
    assert pool.metrics.order_behind.labels("0")._value.get() == len(silent)
    assert pool.metrics.order_passed.labels("stall")._value.get() == 1


def test_a_kill_while_a_batch_changelog_is_produced_loses_no_held_item(tmp_path: Path) -> None:
    """kill -9 after some of a batch's changelog records reached the broker (documents
    without the checkpoint record that follows them) and before the state was committed:
    the restart must not resume past items still held (Faust's committed offset is past
    them)."""
    lines = cross_channel_lines(120, seed=11)
    parts = by_partition(lines)
    want = _want(event_order(parts))
    from ndd_stream.worker.changelog import CHECKPOINT_KEY

    reference = MemoryLog()  # a document record as a worker writes it to the changelog
    forward_backlog(reference, parts, chunk=30, seed=4)
    _run(_pool(reference, tmp_path / "reference", Clock()), reference, 0,
         len(reference.logs[(SCOPED, 0)]), 25, Clock())
    doc = next(r for r in reference.logs[("changelog", 0)]
               if r.key not in (CHECKPOINT_KEY, b"ndd-sentinel"))
    log = MemoryLog()
    forward_backlog(log, parts, chunk=30, seed=4)
    end = len(log.logs[(SCOPED, 0)])
    state, clock = tmp_path / "torn", Clock()
    first = _pool(log, state, clock)
    _run(first, log, 0, end // 2, 25, clock, last=False)
    assert first.merges[0].held > 0  # the scenario needs items held at the kill
    first.close()
    log.append("changelog", 0, doc.key, doc.value)  # the torn batch: a document
    again = _pool(log, state, clock)
    # Faust resumes where it committed: the end of what the first worker consumed
    _run(again, log, end // 2, end, 25, clock)
    assert _decisions(log) == want


@pytest.mark.parametrize("overlap", [False, True], ids=["in-turn", "overlapped"])
def test_a_slow_commit_in_a_backlog_passes_no_partition(tmp_path: Path,
                                                        overlap: bool) -> None:
    """The decider's own commit takes longer than ``stall_s`` (a coordinator that moved,
    a broker restarting) in the middle of a backlog: the raw partitions it kept from being
    heard are not counted silent (``sequencing.OwnTime``), so none is passed and every
    item is decided as in event-time order."""
    from harness.fakes import MemoryTransactions

    from ndd_stream.worker.commit import TransactionalCommitter

    lines = cross_channel_lines(160, seed=3)
    parts = by_partition(lines)
    log = MemoryLog()
    forward_backlog(log, parts, chunk=50, seed=1)
    clock = Clock()
    txns = MemoryTransactions(log)
    slow = [True]

    def slow_commit(tps: list[tuple[str, int]], before: bool) -> None:
        if before and slow:
            slow.pop()
            clock.now += 70.0  # past stall_s (60 s)

    txns.crash = slow_commit
    pool = DeciderPool(tmp_path, SETTINGS.detector_config(), SETTINGS.item_format(), TOPICS,
                       log, WorkerMetrics(), scoped_topic=SCOPED,
                       order=OrderConfig(idle_s=1.0, stall_s=60.0, max_bytes=1 << 30),
                       clock=clock, committer=TransactionalCommitter(
                           txns, WorkerMetrics(), 32, overlap=overlap))
    pool.expect([(RAW, p) for p in range(PARTITIONS)])
    records = log.logs[(SCOPED, 0)]

    async def go() -> None:
        for at in range(0, len(records), 37):
            await pool.process(records[at:at + 37], log.send)
            await pool.drain()  # the commit ends while no batch runs
        for _ in range(2):
            clock.now += 5.0
            await pool.process(heartbeat(log), log.send)
            await pool.drain()

    asyncio.run(go())
    assert not slow  # the slow commit happened
    assert _decisions(log) == _want(event_order(parts))
    for reason in ("stall", "memory"):  # (idle: the feed's end, confirmed by the routers)
        assert pool.metrics.order_passed.labels(reason)._value.get() == 0, reason
    assert not [r for r in log.topic("unique") + log.topic("duplicate")
                if dict(r.headers).get("ndd-order")]
