"""Faust, the agent runtime, and the one place where the worker works around it.

Faust runs the consumer group, fetches, produces the at-least-once outputs, and runs the
timers and the web endpoints. It is not trusted with positions:

- it acknowledges a batch of ``take_events`` in a ``finally``, so a worker stopped in the
  middle of a batch would let Faust commit records never forwarded or decided
  (:func:`held_batches` keeps every record until the agent is done with it, then asks the
  committer: under exactly-once nothing is acknowledged at all, so Faust commits nothing);
- it chooses ``read_committed`` only with its own exactly-once, which this worker does not
  use (``kafka/transactions.py`` says why), so the consumer is told to read committed
  records here (:func:`read_committed`: Faust's public ``in_transaction``, without Faust's
  transaction manager);
- its fetch loop hands each record to its conductor, which makes an event of it and puts
  it in the agent's channel, through ``wait_first`` (four tasks and an ``asyncio.wait``
  per record unless :class:`_Consumer` hands it on at once); its stream then hands each
  event through its iterator, its sensors and a buffer task before ``take_events`` batches
  it. Where Faust acknowledges nothing (exactly-once) none of that runs: the consumer puts
  a fetch's records into the agent's :class:`Inbox` at once (``_Consumer.getmany``, a
  public method of Faust's consumer) and the agent takes its batches there
  (:func:`taken`); elsewhere every input is decoded as its bytes (:class:`_Bytes`), not
  through Faust's codec registry. The stream took about a tenth of the main thread's busy
  time on a backlog, the conductor's hand-off about a sixth (docs/BENCHMARK.md);
- its table manager waits a second at every start for tables declared late, and the
  consumer joins the group only after it; the worker keeps its state in RocksDB and
  declares no Faust table (:class:`_TableManager` does not wait);
- its consumer reads both stages, the raw topics and the scoped one the router writes,
  but lets a fetch wait up to 1.5 s for data and hands on everything prefetched at once,
  partition after partition: on a backlog the router ran ahead and the decider, the
  slower stage, waited (:class:`_ConsumerThread` takes turns and waits less).

Everything else the worker does is plain code in the other modules.

The private attributes of Faust and aiokafka the worker reads or overrides, each checked
against the installed versions by ``tests/test_worker_reach_ins.py`` (the versions are
pinned below their next minor release in pyproject.toml):

1. Faust ``Consumer._new_consumer_thread``, overridden to make :class:`_ConsumerThread`
   (and keep it: ``_Consumer.thread``);
2. Faust ``AIOKafkaConsumerThread._create_worker_consumer``, overridden to keep aiokafka's
   consumer (``_ConsumerThread.kafka``) and to set
3. aiokafka ``AIOKafkaConsumer._fetch_max_wait_ms`` (Faust hard-codes 1,500 ms), read at
   ``start()``, before which it cannot be passed any other way;
4. Faust ``AIOKafkaConsumerThread._fetch_records``, overridden to hand on the topics and
   their partitions in turns (:func:`take_turns`);
5. Faust ``TableManager._update_channels``, what its ``on_start`` does less its wait;
6. aiokafka ``AIOKafkaConsumer._coordinator``: the generation and member id of the
   worker's member of the group, which its transactions name (:func:`group_member`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import re
import sys
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Iterable,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, cast

import faust
from confluent_kafka import KafkaException
from faust.tables import TableManager
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.services import WaitResults

from ndd_stream.kafka.config import faust_broker_kwargs
from ndd_stream.kafka.limits import WriteLimits
from ndd_stream.kafka.reads import Metadata
from ndd_stream.kafka.transactions import Member
from ndd_stream.settings import Settings
from ndd_stream.worker.cluster import ClusterChanged, check_cluster
from ndd_stream.worker.delivery import LostRecords, Message, StallWatch
from ndd_stream.worker.logs import json_handler
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.pool import BATCH_MAX
from ndd_stream.worker.records import OutRecord
from ndd_stream.worker.startup import producer_kwargs

if TYPE_CHECKING:
    from ndd_stream.worker.guarantee import Guarantee

log = logging.getLogger("ndd_stream.worker")

BATCH_WITHIN_S = 0.02
"""... or whatever arrived within this time: what a live item waits in each agent (two per
item) before its batch goes. At 50 ms a live feed of 200 items/s waited 119-133 ms from
produce to output (p50); at 20 ms 58-69 ms, and a backlog's batches fill before it ends
(bench.order, docs/BENCHMARK.md)."""
# A record of the shards topic carries up to shardwire.BATCH_BYTES (256 KiB, ~50 news
# items) and BATCH_ITEMS (64): at most this many per batch (8 MiB, at most 2,048 items, ~1,600
# news items, so a checkpoint and a rebalance
# never wait for tens of thousands), and this many buffered per shard partition before
# Faust pauses its fetch (64 MiB; Faust's default, 4,096 records, would be 1 GiB). bench.e2e,
# 3 pairs each against Faust's defaults: 8 and 32 gave ~7% fewer items/s; these 0.85-1.18x.
SHARD_BATCH_MAX = 32
SHARD_BUFFER_MAX = 256


def make_app(s: Settings, limits: WriteLimits, web_port: int,
             guarantee: Guarantee) -> faust.App:
    """The Faust app: group membership, fetching, Faust's producer, timers, the web
endpoints. Its consumer never commits what was not acknowledged (``held_batches``)
and reads as the guarantee says (``read_committed`` under exactly-once)."""
    app = faust.App(
        s.app_id,
        **faust_broker_kwargs(s),
        store="memory://",
        datadir=str(s.data_dir / s.app_id / "faust"),
        web_enabled=True,
        web_bind=s.web_host,
        web_port=web_port,
        web_in_thread=False,
        broker_session_timeout=s.session_timeout_s,
        broker_heartbeat_interval=max(1.0, s.session_timeout_s / 5),
        broker_commit_interval=1.0,
        **guarantee.faust_settings(),
        consumer_auto_offset_reset="earliest",
        topic_allow_declare=False,
        topic_disable_leader=True,
        **producer_kwargs(s, limits),
        consumer_max_fetch_size=max(4_194_304, 2 * s.max_item_bytes),
        stream_wait_empty=False,
        loghandlers=[json_handler()],
        TableManager=_TableManager,
    )
    app.transport.Consumer = _Consumer  # type: ignore[misc]
    read_committed(app, guarantee.read_committed)
    return app


def agent_input(app: faust.App, *names: str, pattern: str | None, maxsize: int | None,
                acks: bool) -> faust.TopicT:
    """An agent's input topic(s), records as raw bytes. ``acks=False`` (exactly-once: the
    transactions move the offsets, nothing is acknowledged) turns Faust's bookkeeping off:
    with it on, Faust's fetch loop kept a gap for each transaction marker of the
    read_committed input, never trimmed as nothing was committed, and merged them all at
    every new one: a live worker's wait grew by the minute (docs/BENCHMARK.md, "A live
    worker over minutes")."""
    topic = app.topic(*names, pattern=pattern, schema=_Bytes(), allow_empty=True,
                      maxsize=maxsize, acks=acks)
    if not acks:
        inboxes: list[tuple[faust.TopicT, Inbox]] = getattr(app, INBOXES, [])
        inboxes.append((topic, Inbox(topic, maxsize or app.conf.stream_buffer_maxsize)))
        setattr(app, INBOXES, inboxes)
    return topic


INBOXES = "ndd_inboxes"  # the app's attribute: (topic, Inbox) of each unacknowledged input


def inbox_of(stream: faust.StreamT) -> Inbox | None:
    """The inbox of the input ``stream`` reads, if any. The stream reads its agent's clone
    of the topic, not the topic: the inbox is the one subscribed as the clone is."""
    subscribed = _subscription(stream.channel)
    return next((inbox for _, inbox in getattr(stream.app, INBOXES, [])
                 if inbox.subscribed == subscribed), None)


def _subscription(topic: Any) -> tuple[frozenset[str], re.Pattern[str] | None]:
    """What a Faust topic (or another channel: neither) reads: its names, or the topics its
    pattern matches (Faust allows one or the other). A clone of a topic reads the same."""
    return frozenset(getattr(topic, "topics", None) or ()), getattr(topic, "pattern", None)


class Inbox:
    """An agent's records where Faust acknowledges none (exactly-once): the consumer hands
    them on here a fetch at a time (:meth:`_Consumer.getmany`), not one by one through
    Faust's conductor, an event and a channel queue each (the per-record hand-off was
    about a sixth of the worker's main thread on a backlog, twice per item: raw and
    scoped). ``limit`` records held make the consumer wait before its next fetch, as a
    full channel queue pauses Faust's fetch."""

    def __init__(self, topic: faust.TopicT, limit: int) -> None:
        self.subscribed = _subscription(topic)
        self.limit = max(1, limit)
        self.messages: collections.deque[Any] = collections.deque()
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    def takes(self, topic: str) -> bool:
        """Whether the records fetched from the Kafka topic ``topic`` are this inbox's."""
        names, pattern = self.subscribed
        return topic in names or (pattern is not None and pattern.match(topic) is not None)

    def full(self) -> bool:
        return len(self.messages) >= self.limit

    def put(self, messages: Sequence[Any]) -> None:
        self.messages.extend(messages)
        self._arrived.set()
        if self.full():
            self._room.clear()

    async def wait_room(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._room.wait(), timeout)

    async def take(self, most: int, within: float) -> list[Any]:
        """Up to ``most`` records: those held, or the first to come and what arrives
        within ``within`` of it."""
        while not self.messages:
            self._arrived.clear()
            await self._arrived.wait()
        if len(self.messages) < most:
            until = asyncio.get_running_loop().time() + within
            while len(self.messages) < most:
                left = until - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                self._arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), left)
        n = min(most, len(self.messages))
        batch = [self.messages.popleft() for _ in range(n)]
        if not self.full():
            self._room.set()
        return batch


class _Bytes(faust.Schema):
    """Records as the broker gave them: key and value bytes (or None), each event made
    straight from its message. Faust's schema with the ``raw`` codec gives the same, after
    two lookups in its serializer registry per record (about a third of its per-record
    hand-off to an agent, twice per item: raw and scoped)."""

    def __init__(self) -> None:
        super().__init__(key_serializer="raw", value_serializer="raw", allow_empty=True)

    def compile(self, app: faust.types.AppT, *, on_key_decode_error: Any = None,
                on_value_decode_error: Any = None, default_propagate: bool = False) -> Any:
        create_event = app.create_event

        async def decode(message: Any, *, propagate: bool = default_propagate) -> Any:
            return create_event(message.key, message.value, message.headers, message)

        return decode


class _TableManager(TableManager):
    """Faust's table manager without its one-second wait at start: the worker declares no
    Faust table, so there is none to wait for, and the group join waits on this."""

    async def on_start(self) -> None:
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()


POSITIONS = "ndd_positions"  # the app's attribute that holds the worker's ``Positions``
Positions = Callable[[], Mapping[tuple[str, int], int]]
"""Where the worker goes on reading each partition it has opened: (topic, partition) ->
the first offset not handed out yet (a raw partition's committed offset, a stateful
partition's checkpoint)."""


class _Consumer(faust_aiokafka.Consumer):
    """Faust's consumer, its per-record hand-off without tasks when nothing waits, its
    fetches in turns (:class:`_ConsumerThread`), and its positions the worker's.

    It reads committed records only where the app says so (:func:`read_committed`):
    Faust's ``in_transaction``, which also makes Faust's ``highwater`` a partition's last
    stable offset; Faust's own transactions are never started (``kafka/transactions.py``
    says why the worker has its own)."""

    thread: _ConsumerThread | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_transaction = bool(getattr(self.app, READ_COMMITTED, False))
        self._inbox_of: dict[str, Inbox | None] = {}  # per topic name (see getmany)

    def on_init_dependencies(self) -> Iterable[Any]:
        return []  # not Faust's transaction manager, which ``in_transaction`` would start

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[Any, Any]]:
        """Faust's fetch, each record of an input with an :class:`Inbox` put there, a
        fetch at a time; the others go on to Faust's conductor one by one, as Faust's."""
        inboxes: list[tuple[faust.TopicT, Inbox]] = getattr(self.app, INBOXES, [])
        if not inboxes:
            async for pair in super().getmany(timeout):
                yield pair
            return
        handed: dict[Inbox, list[Any]] = {}
        async for tp, message in super().getmany(timeout):
            inbox = self._inbox(tp.topic, inboxes)
            if inbox is None:
                yield tp, message
            else:
                handed.setdefault(inbox, []).append(message)
        for inbox, messages in handed.items():
            inbox.put(messages)
        for inbox in handed:  # the next fetch waits for room, or for a rebalance
            while inbox.full() and self.flow_active and not self.should_stop:
                await inbox.wait_room(0.1)

    def _inbox(self, topic: str, inboxes: list[tuple[faust.TopicT, Inbox]]) -> Inbox | None:
        if topic not in self._inbox_of:
            self._inbox_of[topic] = next(
                (inbox for _, inbox in inboxes if inbox.takes(topic)), None)
        return self._inbox_of[topic]

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        self.thread = _ConsumerThread(self, loop=self.loop, beacon=self.beacon)
        return self.thread

    async def seek_to_committed(self) -> Mapping[Any, int]:
        """Faust's seek at the end of a rebalance goes to the group's committed offsets;
        where the worker has opened a partition, it goes to the worker's position instead
        (see :func:`read_from`). Faust also takes these as the offsets read so far."""
        committed = dict(await super().seek_to_committed())
        positions: Positions | None = getattr(self.app, POSITIONS, None)
        worker = _as_tps(positions() if positions is not None else {})
        try:
            own = await self.go_on({tp: n for tp, n in worker.items() if tp in committed})
        except Exception as exc:  # a broker event: :func:`seek` sends the consumer there too
            log.warning("seek to the worker's positions failed (%r); the rebalance callback "
                        "tries again", exc, extra={"event": "seek"})
            own = {}
        return {**committed, **own}

    async def go_on(self, positions: Mapping[Any, int]) -> dict[Any, int]:
        """Fetch these partitions on from these offsets; returns where each went. Offset 0
        is a partition nothing was read of: it goes on at its first record (as a group
        without a committed offset does), not out of range when retention removed the
        head (worker/delivery.py would report records this worker never had)."""
        if not positions:
            return {}
        fresh = [tp for tp, n in positions.items() if n == 0]
        earliest = await self.earliest_offsets(*fresh) if fresh else {}
        where = {tp: max(n, earliest.get(tp) or 0) for tp, n in positions.items()}
        await self.seek_wait(where)
        return where

    async def wait_first(self, *coros: Any, timeout: Any = None) -> Any:
        """The first of ``coros`` to finish, as Faust's. Faust's fetch loop asks this of
        every record: the hand-off to the agent's queue, against the flow being suspended
        (a rebalance). The hand-off is run at once: done without waiting (the queue has
        room), it is the winner Faust's own would find; else what it waits on is left to
        Faust's ``wait_first``, the suspension included."""
        first = coros[0] if coros else None
        if (timeout is not None or not asyncio.iscoroutine(first) or self.suspend_flow.is_set()
                or self.should_stop):
            return await super().wait_first(*coros, timeout=timeout)
        try:
            waits_on = first.send(None)
        except BaseException as ended:
            for other in coros[1:]:
                if asyncio.iscoroutine(other):
                    other.close()  # never started
            if isinstance(ended, StopIteration):
                return WaitResults([first], [ended.value], False)
            raise
        return await super().wait_first(_resumed(first, waits_on), *coros[1:])


async def _resumed(coro: Coroutine[Any, Any, Any], waits_on: Any) -> Any:
    """Go on with ``coro``, started by hand, which now waits on ``waits_on`` (what it
    yielded: a future, or None for a bare yield), as the task running it would."""
    return await _Resumed(coro, waits_on)


class _Resumed:
    """``yield from`` a coroutine already started: what it yielded goes to the task that
    awaits this, which waits on it as for any coroutine (and cancels it when cancelled);
    what the task sends or throws goes back into the coroutine."""

    def __init__(self, coro: Coroutine[Any, Any, Any], waits_on: Any) -> None:
        self.coro, self.waits_on = coro, waits_on

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, waits_on = self.coro, self.waits_on
        while True:
            try:
                sent = yield waits_on
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation, thrown in by the task
                try:
                    waits_on = coro.throw(exc)
                except StopIteration as done:
                    return done.value
                continue
            try:
                waits_on = coro.send(sent)
            except StopIteration as done:
                return done.value


FETCH_MAX_WAIT_MS = 100
"""How long the broker may hold a fetch that finds nothing (Faust sets 1,500 ms). One fetch
at a time goes to a broker, and it covers only partitions with nothing prefetched: on a
backlog that was often the scoped partitions alone, waiting for the router, which waited
for this fetch to end before it could read on (0.4-0.8 s with nothing decided)."""
FETCH_TURN_RECORDS = 500
"""At most this many records of one topic per hand-off, so that each topic takes turns."""


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread, its fetches waiting less and the topics taking turns."""

    kafka: Any = None
    """aiokafka's consumer, once made: its group member (:func:`group_member`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.turns: dict[str, int] = {}  # per topic, the partition its next turn starts at

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # read before start(), where aiokafka hands it to its fetcher
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        self.kafka = consumer
        return consumer

    async def _fetch_records(self, consumer: Any, active_partitions: Any,
                             timeout: float | None = None,
                             max_records: int | None = None) -> Any:
        """What Faust's fetch loop hands on next, the topics taking turns
        (:func:`take_turns`). Faust's own took all that was prefetched, in the order it was
        fetched: the whole raw backlog (up to ``consumer_max_fetch_size`` a partition) went
        to the router before the decider saw a scoped record."""
        async def fetch(tps: Any, wait: float | None, most: int | None) -> Any:
            return await super(_ConsumerThread, self)._fetch_records(
                consumer, tps, timeout=wait, max_records=most)

        if not active_partitions:  # Faust's own answer (aiokafka reads "none" as "all")
            return await fetch(active_partitions, timeout, max_records)
        return await take_turns(fetch, active_partitions, timeout, self.turns)


Fetch = Callable[[Any, float | None, int], Awaitable[dict[Any, list[Any]]]]
"""aiokafka's ``fetched_records(partitions, timeout, max_records)``: the prefetched records
of ``partitions``, partition after partition in the order they were fetched, at most
``max_records``; with a timeout and nothing prefetched, it waits for the next fetch."""


async def take_turns(fetch: Fetch, active: Iterable[Any], timeout: float | None,
                     turns: dict[str, int]) -> dict[Any, list[Any]]:
    """Each topic's prefetched records, at most :data:`FETCH_TURN_RECORDS` a topic, its
    partitions asked in turn from where the last turn stopped (``turns``: per topic, the
    partition after the last one that filled a turn), so a partition with a backlog does
    not keep the others behind it. Waits (up to ``timeout``) only when no topic has
    anything prefetched."""
    topics: dict[str, list[Any]] = {}
    for tp in active:
        topics.setdefault(tp.topic, []).append(tp)
    records: dict[Any, list[Any]] = {}
    for topic, tps in topics.items():
        tps.sort(key=lambda tp: tp.partition)
        start = next((i for i, tp in enumerate(tps) if tp.partition >= turns.get(topic, 0)), 0)
        left = FETCH_TURN_RECORDS
        for tp in tps[start:] + tps[:start]:
            found = await fetch({tp}, 0, left)
            records.update(found)
            left -= sum(len(rs) for rs in found.values())
            if left <= 0:
                turns[topic] = tp.partition + 1
                break
    if not records:
        records = await fetch(set(active), timeout, FETCH_TURN_RECORDS)
    return records


def group_member(app: faust.App) -> Member | None:
    """The generation and member id of ``app``'s consumer in its group, as its commits
    name it (kafka/transactions.py); None while it is not a member."""
    thread = getattr(app.consumer, "thread", None)
    coordinator = getattr(getattr(thread, "kafka", None), "_coordinator", None)
    if coordinator is None:
        return None
    # read once each: the consumer's thread sets them at a rebalance
    generation, member = int(coordinator.generation), str(coordinator.member_id)
    if generation < 0 or not member:
        return None
    return Member(generation, member, app.conf.consumer_group_instance_id)


def _as_tps(positions: Mapping[tuple[str, int], int]) -> dict[Any, int]:
    return {faust.types.TP(topic, partition): offset
            for (topic, partition), offset in positions.items()}


def read_from(app: faust.App, positions: Positions) -> None:
    """Make ``app``'s consumer go on at the worker's positions, never at Faust's.

    The one position of an input partition is the worker's (a raw partition's committed
    offset, a stateful partition's checkpoint). Faust resumes fetching at an assignment
    at the group's committed offset, which at-least-once can be past a checkpoint (Faust
    counts offsets it never delivered as done), and it resumes before the worker has
    opened the partitions, so their first records can be delivered while they are not
    owned yet and are passed over. So Faust's own seek at the end of a rebalance goes to
    ``positions`` where there is one, and :func:`seek` sends the consumer there again once
    a partition is open: whatever was passed over is delivered again, and a record
    delivered twice is handed out once (``InOrder``)."""
    setattr(app, POSITIONS, positions)


SEEK_TIMEOUT_S = 60.0
"""How long sending the consumer to the positions may take before the worker gives up and
exits (restarted, it opens the partitions again)."""


async def seek(app: faust.App, positions: Mapping[tuple[str, int], int]) -> None:
    """Fetch these partitions on from these offsets (see :func:`read_from`). A partition
    taken away meanwhile is left alone (its new owner's); a worker stopping gives up. One
    that cannot be sent there exits: the records passed over would wait for a later one."""
    consumer = cast(_Consumer, app.consumer)
    failed: BaseException | None = None
    for _ in range(2):  # again if a partition was taken away between the two steps
        assigned = consumer.assignment()
        mine = {tp: n for tp, n in _as_tps(positions).items() if tp in assigned}
        if not mine or app.should_stop:
            return
        try:
            done = await app.wait_first(consumer.go_on(mine), timeout=SEEK_TIMEOUT_S)
        except Exception as exc:  # IllegalStateError: not assigned any more
            failed = exc
            continue
        if app.should_stop:
            return
        if done.results:
            log.info("reading on at %s", ", ".join(
                f"{tp.topic}[{tp.partition}]@{offset}"
                for tp, offset in sorted(done.results[0].items())), extra={"event": "seek"})
            return
        failed = TimeoutError(f"no answer in {SEEK_TIMEOUT_S:.0f} s")
    fatal(f"sending the consumer to {dict(positions)} failed: {failed!r}")


READ_COMMITTED = "ndd_read_committed"  # the app's attribute: its consumer reads committed


def read_committed(app: faust.App, committed: bool = True) -> None:
    """Whether ``app``'s consumer reads only committed records (before the app starts)."""
    setattr(app, READ_COMMITTED, committed)


def acknowledge(events: Sequence[Any]) -> None:
    """Faust's acknowledgement of each event (at-least-once: ``Committer.acknowledge``)."""
    for event in events:
        event.ack()


async def held_batches(stream: faust.StreamT, most: int = BATCH_MAX,
                       done: Callable[[Sequence[Any]], None] = acknowledge,
                       lost: LostRecords | None = None, stall: StallWatch | None = None
                       ) -> AsyncIterator[list[Message]]:
    """Batches of the stream's messages, acknowledged only once the agent is done with them.

    The one place that works around Faust's acknowledgement: ``take_events`` acks a batch
    in a ``finally``, so a worker stopped (cancelled) in the middle of a batch would let
    Faust commit records it never forwarded or decided, and the next owner would start
    past them. An extra reference on each message keeps them uncommitted until the loop
    asks for the next batch (the body finished); a stopped worker's batch is delivered
    again (at-least-once) and answered with the same decision (idempotent).

    ``done`` is told of each batch the agent is done with: the committer's
    ``acknowledge`` (exactly-once acknowledges nothing, so Faust never commits these
    partitions; their offsets move only in the transactions: worker/commit.py).

    ``lost`` hears of every batch first: a record after a position that went out of range
    ends a range of records the broker removed unread; so does ``stall``
    (records flow; both: worker/delivery.py).
    """
    inbox = inbox_of(stream)
    if inbox is None:
        batches = stream.take_events(most, within=BATCH_WITHIN_S)  # type: ignore[attr-defined]
    else:
        batches = taken(stream, inbox, most, BATCH_WITHIN_S)
    async for events in batches:
        if inbox is None:
            for event in events:
                event.message.incref()
            batch = [event.message for event in events]
        else:
            batch = events
        if stall is not None:
            stall.delivered(batch)
        if lost is not None:
            await lost.delivered(batch)
        yield batch
        done(events)


async def taken(stream: faust.StreamT, inbox: Inbox, most: int,
                within: float) -> AsyncIterator[list[Any]]:
    """``take_events`` for an input whose records Faust does not acknowledge (exactly-once):
    batches of the messages the consumer put in its :class:`Inbox`, what arrived within
    ``within`` of the first, up to ``most``. Faust's stream would hand each through an
    event, its iterator, its sensors and a buffer task; all it adds here is the check kept
    below: a record fetched before the last rebalance (another generation of the group, or
    while the flow is suspended) is passed over, as Faust's stream passes it over."""
    app = stream.app
    flow = app.flow_control
    while not stream.should_stop:
        messages = await inbox.take(most, within)
        if not flow.is_active():
            continue
        generation = app.consumer_generation_id
        fresh = [m for m in messages if m.generation_id == generation]
        if fresh:
            yield fresh


async def send(app: faust.App, record: OutRecord) -> Awaitable[Any]:
    """Hand a record to Faust's producer; the returned future resolves on delivery (the
    at-least-once path of every output, and the routers' progress records)."""
    fut: Awaitable[Any] = await app.producer.send(
        record.topic, record.key, record.value, record.partition, None, record.headers)
    return fut


def fatal(message: str, code: int = 3) -> None:
    """Log and end the process now with a non-zero code: the orchestrator restarts it.
    State is safe: it is committed batch by batch, before offsets are acknowledged."""
    log.critical(message, extra={"event": "fatal"})
    for handler in logging.getLogger().handlers + log.handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(code)


def broker_check_interval(timeout_s: float) -> float:
    """How often the broker is probed: every 10 s, more often for short timeouts."""
    return min(10.0, max(1.0, timeout_s / 4))


async def run_agent(handle: Callable[[list[Any]], Awaitable[Any]], what: str,
                    stream: faust.StreamT, *, most: int = BATCH_MAX,
                    done: Callable[[Sequence[Any]], None],
                    event: str = "decider_error",
                    after: Callable[[list[Any]], None] | None = None,
                    lost: LostRecords | None = None, stall: StallWatch | None = None) -> None:
    """An agent's loop: each batch handled whole (then ``after``), or the worker exits.
    Faust would restart the agent and leave the taken events unacknowledged, so the
    worker would stall silently; state is committed piece by piece, so exiting loses
    nothing."""
    async for messages in held_batches(stream, most, done=done, lost=lost, stall=stall):
        try:
            with stall.handling() if stall is not None else contextlib.nullcontext():
                await handle(messages)
        except Exception as exc:
            log.exception("%s failed", what, extra={"event": event})
            fatal(f"{what} crashed: {exc!r}")
        if after is not None:
            after(messages)


def record_lag(app: faust.App, metrics: WorkerMetrics, messages: list[Any]) -> None:
    """Consumer lag per partition: the fetcher's high watermark minus what was done (best
    effort: the high watermark is only known after a fetch)."""
    last: dict[Any, int] = {}
    for m in messages:
        last[m.tp] = max(last.get(m.tp, -1), m.offset)
    for tp, offset in last.items():
        try:
            high = app.consumer.highwater(tp)
        except Exception:  # a missing watermark only hides a gauge
            continue
        if high is not None:
            metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, high - offset - 1))


def execute(app: faust.App, settings: Settings) -> int:
    """Run Faust's worker until SIGTERM/SIGINT; the process exit code (3: fatal)."""
    # Faust's own handler goes to /dev/null: the JSON handler given to the app is the log.
    worker = faust.Worker(app, loglevel=settings.log_level, quiet=True, logfile=os.devnull)
    code = 0
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        code = int(exc.code or 0)
    crash = app.crash_reason
    if code == 0 and crash is None:
        return 0
    # Faust ends a crashed app itself (code 1), often before the crash watch sees it: give
    # the same CRITICAL line and exit code as every other fatal condition.
    if crash is not None:
        log.critical("worker crashed: %r", crash, extra={"event": "fatal"})
    else:
        log.critical("worker stopped (Faust exit code %d; the errors above say why); "
                     "exit code 3", code, extra={"event": "fatal"})
    for handler in logging.getLogger().handlers + log.handlers:
        handler.flush()
    return 3


class BrokerWatch:
    """The worker's timer on the broker: exit (code 3) once no broker has answered for
    ``NDD_BROKER_TIMEOUT_S``, or at once when it is another cluster than the state's."""

    def __init__(self, settings: Settings, metadata: Metadata) -> None:
        self.settings = settings
        self.metadata = metadata
        self.unreachable_since: float | None = None  # start of the first failed check

    def answers(self) -> bool:
        """Whether a broker answers; raises ``ClusterChanged`` when it is another cluster."""
        s = self.settings
        try:
            metadata = self.metadata.list_topics(timeout=5.0)
        except (KafkaException, RuntimeError):  # no answer; the client closed at a stop
            return False
        check_cluster(s.data_dir / s.app_id, metadata.cluster_id, s.bootstrap_servers())
        return True

    async def check(self) -> None:
        # The outage is counted from the start of the first check that failed, so the
        # worker never exits before no broker has answered for broker_timeout_s.
        s, started = self.settings, time.monotonic()
        try:
            ok = await asyncio.get_running_loop().run_in_executor(None, self.answers)
        except ClusterChanged as exc:
            fatal(str(exc))
        if ok:
            if self.unreachable_since is not None:
                log.warning("broker %s answers again after %.0fs", s.bootstrap_servers(),
                            started - self.unreachable_since,
                            extra={"event": "broker_reachable"})
            self.unreachable_since = None
            return
        if self.unreachable_since is None:
            self.unreachable_since = started
        down = time.monotonic() - self.unreachable_since
        if down >= s.broker_timeout_s:
            fatal(f"no broker at {s.bootstrap_servers()} answered for {down:.0f}s "
                  f"(NDD_BROKER_TIMEOUT_S={s.broker_timeout_s:g})")
        log.error("broker %s does not answer (for %.0fs; exiting after %.0fs)",
                  s.bootstrap_servers(), down, s.broker_timeout_s,
                  extra={"event": "broker_unreachable"})
