"""The worker: what its agents share, wired onto Faust's app, and the partition lifecycle.

router  (raw topics)    -> scoped topic keyed by scope, or the DLQ        (router.py)
decider (scoped topic)  -> unique / duplicate / decisions, DLQ, changelog (pool.py)
shard   (shards topic)  -> answers to the gatherers (sharded windows)      (pool.py)

Each agent hands its batches to plain code; pieces of work are committed by one committer
(commit.py: transactions under exactly-once, acknowledgements at-least-once). At a
rebalance the router, the pools and the committer open and close their partitions
(:meth:`Service.assigned`; lifecycle.py opens a stateful partition). Faust itself, and
the one place where it is worked around, is runtime.py; the checks before start are
startup.py. docs/ARCHITECTURE.md follows one item through these modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Sequence
from functools import partial
from typing import Any

import faust
from confluent_kafka import KafkaException

from ndd_stream.core import kernels
from ndd_stream.kafka.config import describe, librdkafka_config
from ndd_stream.kafka.limits import NO_LIMITS, WriteLimits, producer_request_limit
from ndd_stream.kafka.reads import BrokerReads, read_range
from ndd_stream.settings import Settings
from ndd_stream.worker.changelog import ChangelogError
from ndd_stream.worker.commit import Committer
from ndd_stream.worker.deciding import LayoutChanged
from ndd_stream.worker.delivery import (
    LostRecords,
    RecordsLost,
    StallWatch,
    restart_stopped_fetch,
    watch_fetch_resets,
)
from ndd_stream.worker.gathering import GatherDecider
from ndd_stream.worker.guarantee import Guarantee, guarantee_for
from ndd_stream.worker.lifecycle import BrokerLostData
from ndd_stream.worker.merge import SourceId
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.pages import add_pages
from ndd_stream.worker.pool import DeciderPool
from ndd_stream.worker.router import Router, Routing
from ndd_stream.worker.runtime import (
    SHARD_BATCH_MAX,
    SHARD_BUFFER_MAX,
    BrokerWatch,
    agent_input,
    broker_check_interval,
    execute,
    fatal,
    group_member,
    make_app,
    read_from,
    record_lag,
    run_agent,
    seek,
    send,
)
from ndd_stream.worker.sequencing import OrderConfig
from ndd_stream.worker.sharding import ShardPartition
from ndd_stream.worker.startup import (
    Preflight,
    free_port,
    item_format_within,
    output_topics,
    topic_name,
)

log = logging.getLogger("ndd_stream.worker")


class Service:
    """The app and what its agents share."""

    def __init__(self, settings: Settings, metrics: WorkerMetrics | None = None,
                 limits: WriteLimits = NO_LIMITS, guarantee: Guarantee | None = None) -> None:
        self.settings = settings
        state_dir = self.state_dir = settings.data_dir / settings.app_id
        self.guarantee = guarantee or guarantee_for(settings)
        self.reads = BrokerReads(librdkafka_config(settings), settings.app_id)
        self.metrics = metrics or WorkerMetrics()
        # records the broker removed before they were read: reported, never silent
        self.lost = LostRecords(self.metrics, settings.dlq_topic,
                                stop=settings.on_lost_records == "stop", on_stop=fatal)
        watch_fetch_resets(self.lost)
        self.stall = StallWatch(settings.fetch_stall_s)
        self.committer = self._committer("router")
        self.topics = output_topics(settings)
        self.scoped_name = topic_name(settings, "scoped")
        self.limits, self._format = limits, item_format_within(settings, limits)
        self._dead_letter_bytes = limits.dead_letter_bytes(
            producer_request_limit(settings.max_item_bytes), settings.dlq_topic)
        self.web_port = settings.web_port or free_port(settings.web_host)
        self.app = make_app(settings, limits, self.web_port, self.guarantee)
        self.send = partial(send, self.app)  # Faust's producer, delivery awaitable
        self.lost.send = self.send
        self.lost.handed = lambda tp: self.positions().get(tp)
        self.metadata = self.guarantee.metadata(self.reads)
        self.watch = BrokerWatch(settings, self.metadata)
        self.ordered = settings.event_time_order()
        # an idle raw partition is stepped over on a confirmation 2/3 of the wait after the
        # item came; routers confirm every 1/3 (heartbeat below): at most the whole wait
        order = OrderConfig(settings.order_idle_ms * 2 / 3000, settings.order_stall_s,
                            settings.order_buffer_mb << 20) if self.ordered else None
        config = settings.detector_config()
        self.shards_name: str | None = None
        self.shard_pool: DeciderPool | None = None
        gather: Any = None
        if settings.shards > 1:  # sharded windows: docs/DEPLOYMENT.md, section 4
            shards_name = self.shards_name = topic_name(settings, "shards")
            shards_changelog = topic_name(settings, "shards_changelog")
            gather = partial(GatherDecider, config=config, fmt=self._format,
                             topics=self.topics, shards=settings.shards,
                             shards_topic=shards_name,
                             memory_bytes=settings.gather_memory_mb << 20)
            self.shard_pool = DeciderPool(
                state_dir, config, self._format, self.topics, self.reads, self.metrics,
                scoped_topic=shards_name, dir_prefix="shard", committer=self._committer("shards"),
                hold_pieces=False,
                reopen_timeout_s=settings.broker_timeout_s, lost=self.lost.restore_gap,
                factory=partial(ShardPartition, config=config, shards=settings.shards,
                                changelog_topic=shards_changelog,
                                scoped_topic=self.scoped_name))
        self.pool = DeciderPool(
            state_dir, config, self._format, self.topics, self.reads, self.metrics,
            scoped_topic=self.scoped_name, order=order, factory=gather,
            committer=self._committer("decider"), reopen_timeout_s=settings.broker_timeout_s,
            lost=self.lost.restore_gap,
            high=self._high, upstream=lambda records: self.router.behind(records),
        )
        router_order = self.committer.in_order(partial(read_range, self.reads), self.metrics,
                                               "processed")
        for reading in (router_order, self.pool.order,
                        *([self.shard_pool.order] if self.shard_pool is not None else [])):
            reading.lost = self.lost
        self.router = Router(
            self.committer, router_order,
            Routing(self._format, self.scoped_name, settings.dlq_topic, self.metrics,
                    ordered=self.ordered, dead_letter_bytes=self._dead_letter_bytes),
            self.reads.committed, self.send, scoped_topic=self.scoped_name,
            scoped_partitions=settings.partitions, ordered=self.ordered, high=self._high,
            reopen_timeout_s=settings.broker_timeout_s, own=self.pool.own)
        # a rebalance callback waits this long for partitions to open, then lets them open
        # after it (no heartbeat is sent while it runs: see DeciderPool.assign)
        self._open_within_s = settings.session_timeout_s / 3
        self._late: set[asyncio.Task[None]] = set()
        read_from(self.app, self.positions)
        self._wire()

    def _committer(self, agent: str) -> Committer:
        """Commits ``agent``'s pieces (``worker/guarantee.py``). A pool's pieces overlap
        their commits (the next piece is decided while the last one commits); the router's
        records are the decider's input, so each of its pieces is committed before it
        forwards more."""
        return self.guarantee.committer(agent, lambda: group_member(self.app), self.metrics,
                                        self.reads.committed, overlap=agent != "router")

    def _topic(self, *names: str, pattern: str | None = None,
               maxsize: int | None = None) -> faust.TopicT:
        return agent_input(self.app, *names, pattern=pattern, maxsize=maxsize,
                           acks=self.committer.acks)

    def _high(self, tp: tuple[str, int]) -> int | None:
        """Where a partition ends (its last stable offset under ``read_committed``), from
        the consumer's last fetch (None: unknown)."""
        try:
            high = self.app.consumer.highwater(faust.types.TP(tp[0], tp[1]))
        except Exception:  # not fetched yet
            return None
        return None if high is None else int(high)

    def raw_sources(self) -> set[SourceId]:
        """The raw partitions that exist (one metadata request): each feeds every scope."""
        metadata = self.metadata.list_topics(timeout=10.0)
        s = self.settings
        pattern = re.compile(s.raw_topic_pattern) if s.raw_topic_pattern else None
        return {(name, p) for name, topic in metadata.topics.items()
                if (pattern.match(name) if pattern else name in s.raw_topics)
                for p in topic.partitions}

    async def assigned(self, raw: list[tuple[str, int]], scoped: list[int],
                       shards: Sequence[int] = ()) -> None:
        """A rebalance gave this worker these partitions: the router resumes the raw ones
        from their committed offsets (``Router.assign``), the pools open the stateful
        ones (``lifecycle.open_partition``), each at its checkpoint; then Faust's consumer
        is sent to those positions (``runtime.seek``): Faust resumes fetching before this
        callback has opened the partitions, at the group's committed offset, so records it
        delivered meanwhile were passed over, and at-least-once the committed offset can be
        past a checkpoint (Faust counts offsets it never delivered as done).

        The raw and the stateful partitions are opened side by side: neither waits on the
        other, and each waits on the broker (committed offsets, restores). The stateful
        ones are waited for a third of the session timeout at most (no heartbeat is sent
        while this runs); those still restoring open after it (``_opened_late``).
        """
        await asyncio.gather(self._assigned_raw(raw), self._assigned_stateful(scoped, shards))

    async def _assigned_raw(self, raw: list[tuple[str, int]]) -> None:
        try:
            await self.router.assign(raw)
        except Exception as exc:  # a producer that cannot register, offsets unknown
            fatal(f"opening raw partitions {raw} failed: {exc!r}")
        await seek(self.app, self.router.positions())

    async def _assigned_stateful(self, scoped: list[int], shards: Sequence[int]) -> None:
        if self.ordered:
            await self._expect_sources()
        pools = [(self.pool, self.scoped_name, scoped)]
        if self.shard_pool is not None and self.shards_name is not None:
            pools.append((self.shard_pool, self.shards_name, list(shards)))
        loop = asyncio.get_running_loop()
        until = loop.time() + self._open_within_s  # for both pools together
        for pool, topic, partitions in pools:
            try:
                late = await pool.assign(partitions, within=max(0.0, until - loop.time()))
            except Exception as exc:
                self._open_failed(topic, partitions, exc)
                return
            await seek(self.app, pool.positions())
            if late:
                log.info("%s: %d partition(s) still opening after %.0f s; they go on after "
                         "the rebalance", topic, len(late), self._open_within_s,
                         extra={"event": "opening"})
                task = loop.create_task(self._opened_late(pool, topic, late))
                self._late.add(task)
                task.add_done_callback(self._late.discard)

    async def _opened_late(self, pool: DeciderPool, topic: str,
                           late: Sequence[asyncio.Task[tuple[str, int] | None]]) -> None:
        """Each partition that opened after its rebalance: the consumer is sent to its
        position (its records were passed over until then)."""
        for opening in asyncio.as_completed(late):
            try:
                tp = await opening
            except asyncio.CancelledError:
                continue  # a stop, or a revocation before its turn
            except Exception as exc:
                self._open_failed(topic, None, exc)
                return
            position = pool.positions().get(tp) if tp is not None else None
            if tp is not None and position is not None:
                await seek(self.app, {tp: position})

    @staticmethod
    def _open_failed(topic: str, partitions: Sequence[int] | None, exc: Exception) -> None:
        """``partitions``: those being opened (None: one of those that opened late)."""
        if isinstance(exc, BrokerLostData | ChangelogError | LayoutChanged | RecordsLost):
            fatal(str(exc))
        # a transactional producer that cannot register
        which = "a partition" if partitions is None else f"partitions {list(partitions)}"
        fatal(f"{topic}: opening {which} failed: {exc}")

    def positions(self) -> dict[tuple[str, int], int]:
        """Where each partition open here goes on (``runtime.read_from``)."""
        pools = [self.pool, *([self.shard_pool] if self.shard_pool is not None else [])]
        return {**self.router.positions(), **{tp: n for pool in pools
                                              for tp, n in pool.positions().items()}}

    async def _expect_sources(self) -> None:
        """Event-time order: the raw partitions that exist, each waited for."""
        try:
            self.pool.expect(await asyncio.get_running_loop().run_in_executor(
                None, self.raw_sources))
        except KafkaException as exc:
            log.warning("raw partitions unknown (%s): each is waited for once heard of",
                        exc, extra={"event": "metadata_unknown"})
            self.pool.expect(())

    def _wire(self) -> None:
        """The agents, timers, rebalance callbacks and web pages, on Faust's app."""
        s, app = self.settings, self.app
        raw = (self._topic(pattern=s.raw_topic_pattern) if s.raw_topic_pattern
               else self._topic(*s.raw_topics))
        most = self.committer.batch_items
        lag = partial(record_lag, app, self.metrics)
        app.agent(raw, name="ndd-router")(
            partial(run_agent, self.router.route, "router", most=most,
                    done=self.committer.acknowledge, lost=self.lost, stall=self.stall,
                    event="router_error"))
        app.agent(self._topic(self.scoped_name), name="ndd-decider")(
            partial(run_agent, partial(self.pool.process, send=self.send), "decider",
                    most=most, done=self.pool.committer.acknowledge, after=lag,
                    lost=self.lost, stall=self.stall))
        if self.shard_pool is not None and self.shards_name is not None:
            app.agent(self._topic(self.shards_name, maxsize=SHARD_BUFFER_MAX),
                      name="ndd-shard")(
                partial(run_agent, partial(self.shard_pool.process, send=self.send), "shard",
                        most=SHARD_BATCH_MAX, done=self.shard_pool.committer.acknowledge,
                        after=lag, lost=self.lost, stall=self.stall))
        if self.ordered:
            app.timer(interval=0.1)(self._release_held)
            app.timer(interval=max(0.01, s.order_idle_ms / 3000))(self._heartbeat)
        app.on_partitions_revoked.connect(self._on_revoked)  # type: ignore[arg-type]
        app.on_partitions_assigned.connect(self._on_assigned)  # type: ignore[arg-type]
        add_pages(app, self.metrics, self.stall, self.pool.deciders,
                  self.shard_pool.deciders if self.shard_pool is not None else {})
        app.timer(interval=2.0)(self._watch_crash)
        app.timer(interval=min(5.0, s.fetch_stall_s / 4))(self._watch_fetch)
        app.timer(interval=broker_check_interval(s.broker_timeout_s))(self.watch.check)
        app.task(self._announce)

    async def _release_held(self) -> None:
        """Event-time order: decide the held items whose wait is over."""
        try:
            await self.pool.tick(self.send)
        except Exception as exc:  # as in the decider
            log.exception("decider failed", extra={"event": "decider_error"})
            fatal(f"decider crashed: {exc!r}")

    async def _heartbeat(self) -> None:
        await self.router.report_progress(set(self.router.owned), every_s=10.0)

    def _internal(self) -> set[str | None]:
        return {self.scoped_name, self.shards_name}

    async def _on_revoked(self, app: Any, revoked: Any, **kwargs: Any) -> None:
        internal = self._internal()
        await self.router.revoke(sorted((tp.topic, tp.partition) for tp in revoked
                                        if tp.topic not in internal))
        mine = [tp.partition for tp in revoked if tp.topic == self.scoped_name]
        if mine:
            log.info("partitions revoked: %s", mine, extra={"event": "revoked"})
            await self.pool.revoke(mine)
        shards = [tp.partition for tp in revoked if tp.topic == self.shards_name]
        if shards and self.shard_pool is not None:
            log.info("shards revoked: %s", shards, extra={"event": "revoked"})
            await self.shard_pool.revoke(shards)
        for tp in revoked:  # its lag is its new owner's to report
            with contextlib.suppress(KeyError):
                self.metrics.lag.remove(tp.topic, str(tp.partition))

    async def _on_assigned(self, app: Any, assigned: Any, **kwargs: Any) -> None:
        internal = self._internal()
        await self.assigned(
            sorted((tp.topic, tp.partition) for tp in assigned if tp.topic not in internal),
            sorted(tp.partition for tp in assigned if tp.topic == self.scoped_name),
            sorted(tp.partition for tp in assigned if tp.topic == self.shards_name))

    async def _watch_fetch(self) -> None:
        await restart_stopped_fetch(self.app, self.stall, fatal, self.positions,
                                    partial(seek, self.app))

    async def _watch_crash(self) -> None:
        if self.app.crash_reason is not None:
            fatal(f"worker crashed: {self.app.crash_reason!r}")

    async def _announce(self) -> None:
        s = self.settings
        log.info("ndd-stream worker: %s; guarantee=%s; raw=%s scoped=%s; kernels=%s; "
                 "metrics on http://%s:%d/metrics", describe(s), self.guarantee.name,
                 s.raw_topic_pattern or s.raw_topics, self.scoped_name,
                 kernels.IMPLEMENTATION, s.web_host, self.web_port, extra={"event": "start"})

    def close(self) -> None:
        self.pool.close()
        if self.shard_pool is not None:
            self.shard_pool.close()
        self.reads.close()
        self.guarantee.close()


def run_worker(settings: Settings, guarantee: Guarantee, checks: Preflight) -> int:
    """Run until SIGTERM/SIGINT once ``checks`` pass; returns the process exit code."""
    limits = checks.result()
    if limits is None:
        return 3
    service = Service(settings, limits=limits, guarantee=guarantee)
    try:
        return execute(service.app, settings)
    finally:
        service.close()
