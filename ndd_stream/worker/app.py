"""The Faust wiring: two agents, two web pages, the partition lifecycle. Thin on purpose.

router  (raw topics)    -> scoped topic keyed by scope, or the DLQ     (routing.py)
decider (scoped topic)  -> unique / duplicate / decisions, DLQ, changelog (pool.py)

Under event-time order (``NDD_SCOPE_ORDER``; docs/RELIABILITY.md, "Order") the router also
tells every scoped partition how far it has forwarded each raw partition (progress
records, after each batch and on a timer), and each scoped partition's decider is the
sequencer of its scopes (merge.py).

Faust delivers records, produces, and runs the consumer group; it is not trusted with
what it acknowledges or skips. Both agents take their batches from ``held_batches``
(nothing is acknowledged before it is done) and hand them to one ``InOrder`` each
(nothing skipped is left out); at assignment both look up the group's committed offsets
once (``Service.assigned``). Everything else is plain code in the other modules.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import faust
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from ndd_stream.core import kernels
from ndd_stream.core.detector import DetectorConfig
from ndd_stream.core.items import ItemFormat
from ndd_stream.kafka import topics as topic_defs
from ndd_stream.kafka.acls import worker_denied
from ndd_stream.kafka.config import describe, faust_broker_kwargs, librdkafka_config
from ndd_stream.kafka.limits import NO_LIMITS, WriteLimits, read_write_limits
from ndd_stream.kafka.probe import unreachable_message, wait_for_broker
from ndd_stream.kafka.reads import BrokerReads, read_range
from ndd_stream.kafka.transactions import Transactions
from ndd_stream.settings import Settings
from ndd_stream.worker.changelog import ChangelogError
from ndd_stream.worker.cluster import ClusterChanged, check_cluster
from ndd_stream.worker.deciding import LayoutChanged, OutputTopics
from ndd_stream.worker.exactly import (
    TransactionalRouter,
    can_run_guarantee,
    read_committed,
    transaction_conf,
)
from ndd_stream.worker.gathering import GatherDecider
from ndd_stream.worker.inorder import InOrder, Message
from ndd_stream.worker.logs import json_handler
from ndd_stream.worker.lost import LostRecords, watch_fetch_resets
from ndd_stream.worker.merge import NO_TIME, SourceId
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.pool import BrokerLostData, DeciderPool, OrderConfig
from ndd_stream.worker.records import OutRecord, Progress, Source, event_time_ms, header_map
from ndd_stream.worker.routing import producer_request_limit, route_raw
from ndd_stream.worker.sharding import ShardPartition

log = logging.getLogger("ndd_stream.worker")

BATCH_MAX = 500  # records per take_events batch
BATCH_WITHIN_S = 0.05  # ... or whatever arrived within this time
# A record of the shards topic carries up to shardwire.BATCH_BYTES (256 KiB, ~50 news
# items) and BATCH_ITEMS (64): at most this many per batch (8 MiB, at most 2,048 items, ~1,600
# news items, so a checkpoint and a rebalance
# never wait for tens of thousands), and this many buffered per shard partition before
# Faust pauses its fetch (64 MiB; Faust's default, 4,096 records, would be 1 GiB). bench.e2e,
# 3 pairs each against Faust's defaults: 8 and 32 gave ~7% fewer items/s; these 0.85-1.18x.
SHARD_BATCH_MAX = 32
SHARD_BUFFER_MAX = 256


def topic_name(settings: Settings, key: str) -> str:
    definitions = topic_defs.load_for(settings)
    resolved, _ = topic_defs.resolve(settings, definitions)
    for topic in resolved:
        if topic.key == key:
            return topic.name
    raise KeyError(f"topic {key!r} is not defined or disabled")


def output_topics(settings: Settings) -> OutputTopics:
    return OutputTopics(
        unique=settings.unique_topic, duplicate=settings.duplicate_topic,
        dlq=settings.dlq_topic, decisions=settings.decisions_topic or None,
        changelog=topic_name(settings, "changelog"),
    )


def producer_kwargs(settings: Settings, limits: WriteLimits = NO_LIMITS) -> dict[str, Any]:
    """``faust.App(**...)`` producer arguments: every write acknowledged by all in-sync
    replicas, a request large enough for any item forwarded whole, and record batches of
    ``producer_batch_kb`` (never above the request size, nor above the smallest
    ``max.message.bytes`` of the topics written: ``kafka/limits.py``). Why larger batches
    than Faust's 16 KiB: a ~5 KB output record left three to a batch, so the worker built
    and the broker took a produce request per few items (docs/BENCHMARK.md, "Through a broker")."""
    request = producer_request_limit(settings.max_item_bytes)
    batch = limits.batch_bytes(min(settings.producer_batch_kb << 10, request))
    return {"producer_acks": -1, "producer_max_request_size": request,
            "producer_max_batch_size": batch}


class Service:
    """The app and what its agents share."""

    def __init__(self, settings: Settings, metrics: WorkerMetrics | None = None,
                 limits: WriteLimits = NO_LIMITS) -> None:
        self.settings = settings
        # exactly-once: the transactional producers, one per input partition
        self.txns = (Transactions(transaction_conf(settings), settings.app_id,
                                  librdkafka_config(settings))
                     if settings.exactly_once() else None)
        self.metrics = metrics or WorkerMetrics()
        # records the broker removed before they were read: reported, never silent
        self.lost = LostRecords(self.metrics, settings.dlq_topic,
                                stop=settings.on_lost_records == "stop", on_stop=fatal)
        self.lost.send = self.send
        watch_fetch_resets(self.lost)
        self.topics = output_topics(settings)
        self.scoped_name = topic_name(settings, "scoped")
        self.limits = limits
        self._format = item_format_within(settings, limits)
        self._dead_letter_bytes = limits.dead_letter_bytes(
            producer_request_limit(settings.max_item_bytes), settings.dlq_topic)
        self.app = self._make_app()
        self._admin = AdminClient(librdkafka_config(settings))
        self._unreachable_since: float | None = None  # start of the first failed check
        self.reads = BrokerReads(librdkafka_config(settings), settings.app_id)
        self.ordered = settings.event_time_order()
        # an idle raw partition is stepped over on a confirmation 2/3 of the wait after the
        # item came; routers confirm every 1/3 (heartbeat below): at most the whole wait
        order = OrderConfig(settings.order_idle_ms * 2 / 3000, settings.order_stall_s,
                            settings.order_buffer_mb << 20) if self.ordered else None
        state_dir, config = settings.data_dir / settings.app_id, settings.detector_config()
        self.state_dir = state_dir
        self.shards_name: str | None = None
        self.shard_pool: DeciderPool | None = None
        gather: Any = None
        if settings.shards > 1:  # sharded windows: docs/DEPLOYMENT.md, section 4
            shards_name = self.shards_name = topic_name(settings, "shards")
            shards_changelog = topic_name(settings, "shards_changelog")
            gather = partial(_gather_decider, config=config, fmt=self._format,
                             topics=self.topics, shards=settings.shards,
                             shards_topic=shards_name,
                             memory_bytes=settings.gather_memory_mb << 20)
            self.shard_pool = DeciderPool(
                state_dir, config, self._format, self.topics, self.reads, self.metrics,
                scoped_topic=shards_name, dir_prefix="shard", txns=self.txns,
                factory=partial(_shard_partition, config=config, shards=settings.shards,
                                changelog=shards_changelog, scoped_topic=self.scoped_name))
        self.pool = DeciderPool(
            state_dir, config, self._format, self.topics, self.reads, self.metrics,
            scoped_topic=self.scoped_name, order=order, factory=gather, txns=self.txns,
        )
        self.router_order = InOrder(partial(read_range, self.reads), self.metrics, "processed",
                                    transactional=self.txns is not None)
        self.router_order.lost = self.pool.order.lost = self.lost
        if self.shard_pool is not None:
            self.shard_pool.order.lost = self.lost
        self.txn_router = (TransactionalRouter(self.txns, self.router_order, self._routed,
                                               self.reads.committed)
                           if self.txns is not None else None)
        # event-time order: what the router has handed to the producer, per raw partition
        # (next offset, latest event time), and what it last reported of each
        self.raw_owned: set[tuple[str, int]] = set()
        self.forwarded: dict[tuple[str, int], tuple[int, int]] = {}
        self._reported: dict[tuple[str, int], tuple[Progress, float]] = {}
        self._catching_up: set[asyncio.Task[None]] = set()  # see assigned()
        self._wire()

    def _make_app(self) -> faust.App:
        s = self.settings
        self.web_port = s.web_port or _free_port(s.web_host)
        app = faust.App(
            s.app_id,
            **faust_broker_kwargs(s),
            store="memory://",
            datadir=str(s.data_dir / s.app_id / "faust"),
            web_enabled=True,
            web_bind=s.web_host,
            web_port=self.web_port,
            web_in_thread=False,
            broker_session_timeout=s.session_timeout_s,
            broker_heartbeat_interval=max(1.0, s.session_timeout_s / 5),
            broker_commit_interval=1.0,
            # exactly-once: Faust commits nothing (the transactions do): no warnings that
            # it "has not committed" a partition after Faust's 5 minutes
            broker_commit_livelock_soft_timeout=10 * 365 * 86400.0 if s.exactly_once()
            else 300.0,
            consumer_auto_offset_reset="earliest",
            topic_allow_declare=False,
            topic_disable_leader=True,
            **producer_kwargs(s, self.limits),
            consumer_max_fetch_size=max(4_194_304, 2 * s.max_item_bytes),
            stream_wait_empty=False,
            loghandlers=[json_handler()],
        )
        if s.exactly_once():
            read_committed(app)
        return app

    def record_lag(self, messages: list[Any]) -> None:
        """Consumer lag per partition: the fetcher's high watermark minus what we have done
        (best effort: the high watermark is only known after a fetch)."""
        last: dict[Any, int] = {}
        for m in messages:
            last[m.tp] = max(last.get(m.tp, -1), m.offset)
        for tp, offset in last.items():
            try:
                high = self.app.consumer.highwater(tp)
            except Exception:  # a missing watermark only hides a gauge
                continue
            if high is not None:
                self.metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, high - offset - 1))

    def _broker_answers(self) -> bool:
        """Whether a broker answers; raises ``ClusterChanged`` when it is another cluster."""
        try:
            metadata = self._admin.list_topics(timeout=5.0)
        except KafkaException:
            return False
        check_cluster(self.state_dir, metadata.cluster_id, self.settings.bootstrap_servers())
        return True

    def _topic(self, *names: str, pattern: str | None = None,
               maxsize: int | None = None) -> faust.TopicT:
        return self.app.topic(*names, pattern=pattern, key_serializer="raw",
                              value_serializer="raw", allow_empty=True, maxsize=maxsize)

    async def send(self, record: OutRecord) -> Awaitable[Any]:
        """Hand a record to the producer; the returned future resolves on delivery."""
        fut: Awaitable[Any] = await self.app.producer.send(
            record.topic, record.key, record.value, record.partition, None, record.headers)
        return fut

    async def route(self, messages: list[Any]) -> None:
        """Forward raw records to the scoped topic (or the DLQ); wait for every delivery.

        Each raw partition is forwarded in offset order from the group's committed offset
        (InOrder). A record of a partition revoked while this batch was in flight is
        forwarded all the same: skipping it lost records when the partition came back to
        this worker with its offset committed past them (long join/leave runs, 111 of
        40k). A copy forwarded twice is decided once and replayed (same decision).
        """
        pending = []
        touched: set[tuple[str, int]] = set()
        if self.txn_router is not None:
            # exactly-once: progress (plain records: a repeat only confirms) after the
            # commit, so that it never runs ahead of the records it confirms
            forwarded = await self.txn_router.route(messages)
        else:
            forwarded = []
            for m in await self.router_order.arrange(messages):
                record = self._routed(m)
                pending.append(await self.send(record))
                forwarded.append((m, record))
        for m, record in forwarded if self.ordered else ():
            tp = (m.topic, m.partition)
            ms = event_time_ms(header_map(record.headers))
            _, last_ms = self.forwarded.get(tp, (0, NO_TIME))
            self.forwarded[tp] = (m.offset + 1, last_ms if ms is None else max(ms, last_ms))
            touched.add(tp)
        for fut in pending:
            await fut
        if touched:
            await self.report_progress(touched)

    async def report_progress(self, tps: set[tuple[str, int]], *, every_s: float = 0.0) -> None:
        """Tell every scoped partition how far the router has forwarded these raw
        partitions (after their records: one producer keeps a partition's order). With
        ``every_s`` (the heartbeat): a partition with nothing more to forward is confirmed
        every time (a scope steps over it only on a confirmation newer than the item it
        holds back), another one re-sent when it changed or ``every_s`` passed."""
        now = time.monotonic()
        futures = []
        for tp in sorted(tps):
            next_offset, event_ms = self.forwarded.get(tp, (-1, NO_TIME))
            if next_offset < 0:
                next_offset = self.router_order.next.get(tp, 0)
            progress = Progress(tp[0], tp[1], next_offset, event_ms, self._high(tp))
            last = self._reported.get(tp)
            idle = progress.high is not None and progress.next >= progress.high
            if (every_s and not idle and last is not None and last[0] == progress
                    and now - last[1] < every_s):
                continue
            self._reported[tp] = (progress, now)
            for partition in range(self.settings.partitions):
                futures.append(await self.send(progress.record(self.scoped_name, partition)))
        for fut in futures:
            await fut

    def _high(self, tp: tuple[str, int]) -> int | None:
        """Where the raw partition ends, from the router's last fetch (None: unknown)."""
        try:
            high = self.app.consumer.highwater(faust.types.TP(tp[0], tp[1]))
        except Exception:  # not fetched yet
            return None
        return None if high is None else int(high)

    def raw_sources(self) -> set[SourceId]:
        """The raw partitions that exist (one metadata request): each feeds every scope."""
        metadata = self._admin.list_topics(timeout=10.0)
        s = self.settings
        pattern = re.compile(s.raw_topic_pattern) if s.raw_topic_pattern else None
        return {(name, p) for name, topic in metadata.topics.items()
                if (pattern.match(name) if pattern else name in s.raw_topics)
                for p in topic.partitions}

    def _routed(self, m: Any) -> OutRecord:
        src = Source.of_message(m)
        record, invalid = route_raw(m.value, m.key, src, self._format, self.scoped_name,
                                    self.settings.dlq_topic, ordered=self.ordered,
                                    dead_letter_bytes=self._dead_letter_bytes)
        if invalid is not None:
            self.metrics.dlq.labels(invalid.reason, "route").inc()
            log.warning("%s: %s: %s", src.position, invalid.reason, invalid.detail,
                        extra={"topic": m.topic, "partition": m.partition,
                               "offset": m.offset, "event": "dlq"})
        return record

    async def assigned(self, raw: list[tuple[str, int]], scoped: list[int],
                       shards: Sequence[int] = ()) -> None:
        """A rebalance gave this worker these partitions: open the scoped ones, and start
        both agents where the group's committed offsets say (one OffsetFetch for both).

        The router forwards each raw partition from its committed offset (or from the
        earliest record it already took, if lower): Faust may deliver a prefetched later
        record first. The decider starts at its state's position, and decides the records
        between it and a committed offset that is ahead (``DeciderPool.catch_up``: with no
        later record, nothing else would reveal that gap).

        The catch-up runs as a task, not in this callback: after a restart during a
        backlog the gap is the whole backlog, and while a rebalance callback runs the
        worker cannot hear of the next rebalance. The group gave the partition to another
        worker while this one still decided it (two owners: thousands of outputs sent
        twice, bench.order). As a task it takes the pool's lock like any batch, and a
        revoke stops it at its next checkpoint.
        """
        self.router_order.keep(raw)
        self.raw_owned = set(raw)
        if self.txn_router is not None:  # exactly-once: positions are the committed offsets
            try:
                await self.txn_router.assign(raw)
            except Exception as exc:  # a producer that cannot register, offsets unknown
                fatal(f"opening raw partitions {raw} failed: {exc!r}")
            raw = []
        if self.ordered:
            try:
                self.pool.expect(await asyncio.get_running_loop().run_in_executor(
                    None, self.raw_sources))
            except KafkaException as exc:
                log.warning("raw partitions unknown (%s): each is waited for once heard of",
                            exc, extra={"event": "metadata_unknown"})
        tps = raw + [(self.scoped_name, p) for p in scoped]
        if self.shards_name is not None:
            tps += [(self.shards_name, p) for p in shards]
        try:
            committed = await asyncio.get_running_loop().run_in_executor(
                None, self.reads.committed, tps)
        except KafkaException as exc:
            log.warning("committed offsets unknown (%s): gaps are closed when records "
                        "arrive", exc, extra={"event": "committed_unknown"})
            committed = {}
        for tp in raw:
            offset = committed.get(tp, -1)
            if offset >= 0:
                self.router_order.resume(tp, min(offset, self.router_order.next.get(tp, offset)))
        pools = [(self.pool, self.scoped_name, scoped)]
        if self.shard_pool is not None and self.shards_name is not None:
            pools.append((self.shard_pool, self.shards_name, list(shards)))
        for pool, topic, partitions in pools:
            try:
                await pool.assign(partitions)
            except (BrokerLostData, ChangelogError, LayoutChanged) as exc:
                fatal(str(exc))
            except Exception as exc:  # a transactional producer that cannot register
                fatal(f"{topic}: opening partitions {partitions} failed: {exc}")
            for partition in partitions if self.txns is None else ():
                offset = committed.get((topic, partition), -1)
                if offset >= 0:
                    task = asyncio.ensure_future(self._catch_up(pool, topic, partition, offset))
                    self._catching_up.add(task)
                    task.add_done_callback(self._catching_up.discard)

    async def _catch_up(self, pool: DeciderPool, topic: str, partition: int,
                        offset: int) -> None:
        try:
            await pool.catch_up(partition, offset, self.send)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # as in the decider: state is safe, exit loudly
            log.exception("%s[%d]: catching up to offset %d failed", topic, partition, offset,
                          extra={"topic": topic, "partition": partition, "offset": offset,
                                 "event": "decider_error"})
            fatal(f"catch-up of {topic}[{partition}] failed: {exc!r}")

    def _wire(self) -> None:
        s = self.settings
        raw = (self._topic(pattern=s.raw_topic_pattern) if s.raw_topic_pattern
               else self._topic(*s.raw_topics))
        scoped = self._topic(self.scoped_name)
        service = self

        if self.ordered:
            @self.app.timer(interval=0.1)
            async def release_held() -> None:
                try:
                    await service.pool.tick(service.send)
                except Exception as exc:  # as in the decider
                    log.exception("decider failed", extra={"event": "decider_error"})
                    fatal(f"decider crashed: {exc!r}")

            @self.app.timer(interval=max(0.01, s.order_idle_ms / 3000))
            async def heartbeat() -> None:
                await service.report_progress(set(service.raw_owned), every_s=10.0)

        @self.app.agent(raw, name="ndd-router")
        async def router(stream: faust.StreamT) -> None:
            async for messages in held_batches(stream, ack=service.txns is None,
                                                lost=service.lost):
                try:
                    await service.route(messages)
                except Exception as exc:  # see the decider
                    log.exception("router failed", extra={"event": "router_error"})
                    fatal(f"router crashed: {exc!r}")

        @self.app.agent(scoped, name="ndd-decider")
        async def decider(stream: faust.StreamT) -> None:
            async for messages in held_batches(stream, ack=service.txns is None,
                                                lost=service.lost):
                try:
                    await service.pool.process(messages, service.send)
                except Exception as exc:
                    # Faust would restart the agent and leave the taken events unacked, so
                    # the worker would stall silently. State is committed per batch: exit.
                    log.exception("decider failed", extra={"event": "decider_error"})
                    fatal(f"decider crashed: {exc!r}")
                service.record_lag(messages)

        if self.shard_pool is not None and self.shards_name is not None:
            shard_pool = self.shard_pool

            @self.app.agent(self._topic(self.shards_name, maxsize=SHARD_BUFFER_MAX),
                            name="ndd-shard")
            async def shard(stream: faust.StreamT) -> None:
                async for messages in held_batches(stream, SHARD_BATCH_MAX,
                                                   ack=service.txns is None,
                                                   lost=service.lost):
                    try:
                        await shard_pool.process(messages, service.send)
                    except Exception as exc:  # as in the decider
                        log.exception("shard failed", extra={"event": "decider_error"})
                        fatal(f"shard crashed: {exc!r}")
                    service.record_lag(messages)

        internal = {self.scoped_name, self.shards_name}

        @self.app.on_partitions_revoked.connect  # type: ignore[arg-type]
        async def on_revoked(app: Any, revoked: Any, **kwargs: Any) -> None:
            raw = {(tp.topic, tp.partition) for tp in revoked if tp.topic not in internal}
            service.router_order.keep(set(service.router_order.next) - raw)
            service.raw_owned -= raw
            for tp in raw:
                service.forwarded.pop(tp, None)
                service._reported.pop(tp, None)
            if service.txn_router is not None:
                await service.txn_router.revoke(sorted(raw))
            mine = [tp.partition for tp in revoked if tp.topic == service.scoped_name]
            if mine:
                log.info("partitions revoked: %s", mine, extra={"event": "revoked"})
                await service.pool.revoke(mine)
            shards = [tp.partition for tp in revoked if tp.topic == service.shards_name]
            if shards and service.shard_pool is not None:
                log.info("shards revoked: %s", shards, extra={"event": "revoked"})
                await service.shard_pool.revoke(shards)

        @self.app.on_partitions_assigned.connect  # type: ignore[arg-type]
        async def on_assigned(app: Any, assigned: Any, **kwargs: Any) -> None:
            await service.assigned(
                sorted((tp.topic, tp.partition) for tp in assigned if tp.topic not in internal),
                sorted(tp.partition for tp in assigned if tp.topic == service.scoped_name),
                sorted(tp.partition for tp in assigned if tp.topic == service.shards_name))

        @self.app.page("/metrics")
        async def metrics_page(web: Any, request: Any) -> Any:
            return web.bytes(service.metrics.render(),
                             content_type="text/plain; version=0.0.4")

        @self.app.page("/health")
        async def health_page(web: Any, request: Any) -> Any:
            shards = service.shard_pool.deciders if service.shard_pool is not None else {}
            body = {"status": "ok", "partitions": sorted(service.pool.deciders),
                    "shards": sorted(shards),
                    "window_documents": sum(d.window_documents() for d in [
                        *service.pool.deciders.values(), *shards.values()])}
            return web.json(body)

        @self.app.timer(interval=2.0)
        async def watch_crash() -> None:
            if self.app.crash_reason is not None:
                fatal(f"worker crashed: {self.app.crash_reason!r}")

        @self.app.timer(interval=broker_check_interval(s.broker_timeout_s))
        async def watch_broker() -> None:
            # The outage is counted from the start of the first check that failed, so the
            # worker never exits before no broker has answered for broker_timeout_s.
            started = time.monotonic()
            try:
                ok = await asyncio.get_running_loop().run_in_executor(None, self._broker_answers)
            except ClusterChanged as exc:
                fatal(str(exc))
            if ok:
                if self._unreachable_since is not None:
                    log.warning("broker %s answers again after %.0fs", s.bootstrap_servers(),
                                started - self._unreachable_since,
                                extra={"event": "broker_reachable"})
                self._unreachable_since = None
                return
            if self._unreachable_since is None:
                self._unreachable_since = started
            down = time.monotonic() - self._unreachable_since
            if down >= s.broker_timeout_s:
                fatal(f"no broker at {s.bootstrap_servers()} answered for {down:.0f}s "
                      f"(NDD_BROKER_TIMEOUT_S={s.broker_timeout_s:g})")
            log.error("broker %s does not answer (for %.0fs; exiting after %.0fs)",
                      s.bootstrap_servers(), down, s.broker_timeout_s,
                      extra={"event": "broker_unreachable"})

        @self.app.task
        async def announce() -> None:
            log.info("ndd-stream worker: %s; guarantee=%s; raw=%s scoped=%s; kernels=%s; "
                     "metrics on http://%s:%d/metrics", describe(s), s.guarantee,
                     s.raw_topic_pattern or s.raw_topics, service.scoped_name,
                     kernels.IMPLEMENTATION, s.web_host, service.web_port,
                     extra={"event": "start"})


def _gather_decider(partition: int, path: Path, *, config: DetectorConfig, fmt: ItemFormat,
                    topics: OutputTopics, shards: int, shards_topic: str,
                    memory_bytes: int) -> GatherDecider:
    return GatherDecider(partition, path, config, fmt, topics, shards, shards_topic,
                         memory_bytes)


def _shard_partition(partition: int, path: Path, *, config: DetectorConfig, shards: int,
                     changelog: str, scoped_topic: str) -> ShardPartition:
    return ShardPartition(partition, path, config, shards, changelog, scoped_topic)


async def held_batches(stream: faust.StreamT, most: int = BATCH_MAX, ack: bool = True,
                       lost: LostRecords | None = None) -> AsyncIterator[list[Message]]:
    """Batches of the stream's messages, acknowledged only once the agent is done with them.

    The one place that works around Faust's acknowledgement: ``take_events`` acks a batch
    in a ``finally``, so a worker stopped (cancelled) in the middle of a batch would let
    Faust commit records it never forwarded or decided, and the next owner would start
    past them. An extra reference on each message keeps them uncommitted until the loop
    asks for the next batch (the body finished); a stopped worker's batch is delivered
    again (at-least-once) and answered with the same decision (idempotent).

    ``ack=False`` (exactly-once): never acknowledged, so Faust never commits these
    partitions; their offsets move only in the transactions (worker/exactly.py).

    ``lost`` hears of every batch first: a record after a position that went out of range
    ends a range of records the broker removed unread (worker/lost.py).
    """
    batches = stream.take_events(most, within=BATCH_WITHIN_S)  # type: ignore[attr-defined]
    async for events in batches:
        for event in events:
            event.message.incref()
        batch = [event.message for event in events]
        if lost is not None:
            await lost.delivered(batch)
        yield batch
        if ack:
            for event in events:
                event.ack()


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


def _free_port(host: str) -> int:
    """NDD_WEB_PORT=0 means any free port (tests, several workers on one host)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host if host != "0.0.0.0" else "127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_worker(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT; returns the process exit code."""
    if not _broker_up(settings):
        return 3
    if not can_run_guarantee(settings, topic_name(settings, "changelog")):
        return 3
    (settings.data_dir / settings.app_id / "faust").mkdir(parents=True, exist_ok=True)
    admin = AdminClient(librdkafka_config(settings))
    try:
        check_cluster(settings.data_dir / settings.app_id,
                      admin.list_topics(timeout=settings.broker_timeout_s).cluster_id,
                      settings.bootstrap_servers())
    except ClusterChanged as exc:
        log.addHandler(json_handler())
        log.critical("%s; exit code 3", exc, extra={"event": "fatal"})
        return 3
    except KafkaException:
        pass  # the broker went away again: the worker's own checks deal with it
    service = Service(settings, limits=written_limits(settings))
    # Faust's own handler goes to /dev/null: the JSON handler given to the app is the log.
    worker = faust.Worker(service.app, loglevel=settings.log_level, quiet=True,
                          logfile=os.devnull)
    code = 0
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        service.pool.close()
        service.reads.close()
        if service.txns is not None:
            service.txns.shutdown()
    crash = service.app.crash_reason
    if code != 0 or crash is not None:
        # Faust ends a crashed app itself (code 1), often before watch_crash sees it: give
        # the same CRITICAL line and exit code as every other fatal condition.
        if crash is not None:
            log.critical("worker crashed: %r", crash, extra={"event": "fatal"})
        else:
            log.critical("worker stopped (Faust exit code %d; the errors above say why); "
                         "exit code 3", code, extra={"event": "fatal"})
        for handler in logging.getLogger().handlers + log.handlers:
            handler.flush()
        return 3
    return 0


def item_carriers(settings: Settings) -> list[str]:
    """The topics an item travels through whole: it must fit each of them."""
    carriers = [topic_name(settings, "scoped"), settings.unique_topic,
                settings.duplicate_topic, settings.dlq_topic]
    if settings.shards > 1:
        carriers.append(topic_name(settings, "shards"))
    return carriers


def item_format_within(settings: Settings, limits: WriteLimits) -> ItemFormat:
    """The item format, its size limit lowered to what every carrier topic takes."""
    fmt = settings.item_format()
    limit, source = limits.item_limit(fmt.max_item_bytes, item_carriers(settings))
    if limit < fmt.max_item_bytes:
        log.warning("items over %d bytes go to the DLQ (oversized): %s is smaller than "
                    "NDD_MAX_ITEM_BYTES=%d", limit, source, fmt.max_item_bytes,
                    extra={"event": "size_limit"})
    return replace(fmt, max_item_bytes=limit, max_item_source=source)


def written_limits(settings: Settings) -> WriteLimits:
    """``max.message.bytes`` of every topic the worker writes (kafka/limits.py)."""
    written = [*item_carriers(settings), topic_name(settings, "changelog")]
    if settings.decisions_topic:
        written.append(settings.decisions_topic)
    if settings.shards > 1:
        written.append(topic_name(settings, "shards_changelog"))
    return read_write_limits(AdminClient(librdkafka_config(settings)), written)


def _broker_up(settings: Settings) -> bool:
    """Before any state exists: wait (up to NDD_BROKER_TIMEOUT_S) for a broker to answer,
    so a wrong address is one clear log line, not a page of client retries."""
    handler = json_handler()  # Faust installs the worker's log handler only later
    log.addHandler(handler)
    try:
        timeout = settings.broker_timeout_s
        reason = wait_for_broker(settings, timeout, on_wait=lambda: log.warning(
            "no Kafka broker answers at %s (NDD_BROKERS) yet; waiting up to %.0f s "
            "(NDD_BROKER_TIMEOUT_S)", settings.bootstrap_servers(), timeout,
            extra={"event": "broker_unreachable"}))
        # a broker that answers may still deny an ACL the worker needs: one line naming it
        message = (unreachable_message(settings, timeout, reason) if reason is not None
                   else worker_denied(settings))
        if message is None:
            return True
        log.critical("%s; exit code 3", message, extra={"event": "fatal"})
        return False
    finally:
        log.removeHandler(handler)
