"""The Faust wiring: two agents, two web pages, the partition lifecycle. Thin on purpose.

router  (raw topics)    -> scoped topic keyed by scope, or the DLQ     (routing.py)
decider (scoped topic)  -> unique / duplicate / decisions, DLQ, changelog (pool.py)
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from collections.abc import Awaitable
from typing import Any

import faust
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from ndd_stream.core import kernels
from ndd_stream.kafka import topics as topic_defs
from ndd_stream.kafka.config import describe, faust_broker_kwargs, librdkafka_config
from ndd_stream.kafka.probe import unreachable_message, wait_for_broker
from ndd_stream.settings import Settings
from ndd_stream.worker.changelog import ChangelogError
from ndd_stream.worker.deciding import OutputTopics
from ndd_stream.worker.logs import json_handler
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.pool import BrokerLostData, DeciderPool
from ndd_stream.worker.records import OutRecord, Source
from ndd_stream.worker.refetch import Fetched, log_gap, log_lost, read_range
from ndd_stream.worker.routing import producer_request_limit, route_raw

log = logging.getLogger("ndd_stream.worker")

BATCH_MAX = 500  # records per take_events batch
BATCH_WITHIN_S = 0.05  # ... or whatever arrived within this time


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


class Service:
    """The app and what its agents share."""

    def __init__(self, settings: Settings, metrics: WorkerMetrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or WorkerMetrics()
        self.topics = output_topics(settings)
        self._format = settings.item_format()
        self.scoped_name = topic_name(settings, "scoped")
        self.app = self._make_app()
        self._admin = AdminClient(librdkafka_config(settings))
        self._unreachable_since: float | None = None  # start of the first failed check
        self.pool = DeciderPool(
            settings.data_dir / settings.app_id, settings.detector_config(),
            settings.item_format(), self.topics, librdkafka_config(settings), self.metrics,
            scoped_topic=self.scoped_name,
        )
        # Router: raw partitions owned, and the next offset to forward of each (see route).
        self._raw_owned: set[tuple[str, int]] = set()
        self._route_next: dict[tuple[str, int], int] = {}
        self._wire()

    def _make_app(self) -> faust.App:
        s = self.settings
        self.web_port = s.web_port or _free_port(s.web_host)
        return faust.App(
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
            consumer_auto_offset_reset="earliest",
            topic_allow_declare=False,
            topic_disable_leader=True,
            producer_acks=-1,
            producer_max_request_size=producer_request_limit(s.max_item_bytes),
            consumer_max_fetch_size=max(4_194_304, 2 * s.max_item_bytes),
            stream_wait_empty=False,
            loghandlers=[json_handler()],
        )

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
        try:
            self._admin.list_topics(timeout=5.0)
        except KafkaException:
            return False
        return True

    def _topic(self, *names: str, pattern: str | None = None) -> faust.TopicT:
        return self.app.topic(*names, pattern=pattern, key_serializer="raw",
                              value_serializer="raw", allow_empty=True)

    async def send(self, record: OutRecord) -> Awaitable[Any]:
        """Hand a record to the producer; the returned future resolves on delivery."""
        fut: Awaitable[Any] = await self.app.producer.send(
            record.topic, record.key, record.value, record.partition, None, record.headers)
        return fut

    async def route(self, messages: list[Any]) -> None:
        """Forward raw records to the scoped topic (or the DLQ); wait for every delivery.

        Each raw partition is forwarded in offset order from the group's committed offset;
        records the consumer skipped are read from the broker first (see
        DeciderPool.process and refetch.py).
        """
        pending = []
        for m in messages:
            tp = (m.topic, m.partition)
            # A record of a partition revoked while this batch was in flight is forwarded
            # all the same: skipping it lost records when the partition came back to this
            # worker with its offset committed past them (long join/leave runs, 111 of
            # 40k). A copy forwarded twice is decided once and replayed (same decision).
            expected = self._route_next.get(tp)
            if expected is not None and m.offset < expected:
                continue  # forwarded already
            run = [m]
            if expected is not None and m.offset > expected:
                run = [*await self.fill(m.topic, m.partition, expected, m.offset), m]
            for item in run:
                self._route_next[tp] = item.offset + 1
                pending.append(await self.send(self._routed(item)))
        for fut in pending:
            await fut

    def _routed(self, m: Any) -> OutRecord:
        src = Source(m.topic, m.partition, m.offset,
                     int(m.timestamp * 1000) if m.timestamp else None)
        record, invalid = route_raw(m.value, m.key, src, self._format, self.scoped_name,
                                    self.settings.dlq_topic)
        if invalid is not None:
            self.metrics.dlq.labels(invalid.reason, "route").inc()
            log.warning("%s: %s: %s", src.position, invalid.reason, invalid.detail,
                        extra={"topic": m.topic, "partition": m.partition,
                               "offset": m.offset, "event": "dlq"})
        return record

    async def fill(self, topic: str, partition: int, start: int, end: int) -> list[Fetched]:
        """Records start <= offset < end that the consumer skipped, read from the broker."""
        self.metrics.gaps.inc()
        log_gap(log, topic, partition, start, end)
        found = await asyncio.get_running_loop().run_in_executor(
            None, read_range, librdkafka_config(self.settings), topic, partition, start, end)
        log_lost(log, topic, partition, start, found, end, "processed")
        return found

    async def fill_scoped(self, partition: int, start: int, end: int) -> list[Fetched]:
        return await asyncio.get_running_loop().run_in_executor(
            None, read_range, librdkafka_config(self.settings), self.scoped_name, partition,
            start, end)

    async def catch_up(self, partitions: list[int]) -> None:
        """Decide what lies between each assigned partition's state and the offset Faust
        resumes it at (DeciderPool.catch_up), before Faust delivers anything."""
        if not partitions:
            return
        try:
            committed = await asyncio.get_running_loop().run_in_executor(
                None, self._committed, [(self.scoped_name, p) for p in partitions])
        except KafkaException as exc:
            log.warning("committed offsets unknown (%s): gaps are closed when records "
                        "arrive", exc, extra={"event": "committed_unknown"})
            return
        for (_, partition), offset in sorted(committed.items()):
            if offset < 0:
                continue
            try:
                await self.pool.catch_up(partition, offset, self.send, self.fill_scoped)
            except Exception as exc:  # as in the decider: state is safe, exit loudly
                log.exception("%s[%d]: catching up to offset %d failed", self.scoped_name,
                              partition, offset, extra={"topic": self.scoped_name,
                                                        "partition": partition,
                                                        "offset": offset,
                                                        "event": "decider_error"})
                fatal(f"catch-up of {self.scoped_name}[{partition}] failed: {exc!r}")

    def _committed(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The group's committed offsets (OffsetFetch; joins nothing); -1 when none."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({**librdkafka_config(self.settings), "group.id": self.settings.app_id,
                             "enable.auto.commit": False})
        try:
            found = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=10)
            return {(tp.topic, tp.partition): tp.offset for tp in found}
        finally:
            consumer.close()

    async def assign_raw(self, tps: list[tuple[str, int]]) -> None:
        """Where forwarding of newly assigned raw partitions starts: the committed offset
        (what Faust seeks to), or the earliest record the router already took if lower."""
        self._raw_owned = set(tps)
        self._route_next = {tp: n for tp, n in self._route_next.items() if tp in self._raw_owned}
        try:
            committed = await asyncio.get_running_loop().run_in_executor(
                None, self._committed, tps)
        except KafkaException as exc:
            log.warning("committed offsets unknown (%s): forwarding from the first record "
                        "delivered", exc, extra={"event": "committed_unknown"})
            return
        for tp, offset in committed.items():
            if offset >= 0 and tp in self._raw_owned:
                self._route_next[tp] = min(offset, self._route_next.get(tp, offset))

    def _wire(self) -> None:
        s = self.settings
        raw = (self._topic(pattern=s.raw_topic_pattern) if s.raw_topic_pattern
               else self._topic(*s.raw_topic_list()))
        scoped = self._topic(self.scoped_name)
        service = self

        @self.app.agent(raw, name="ndd-router")
        async def router(stream: faust.StreamT) -> None:
            batches = stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S)  # type: ignore[attr-defined]
            async for events in batches:
                hold(events)
                try:
                    await service.route([e.message for e in events])
                except Exception as exc:  # see the decider
                    log.exception("router failed", extra={"event": "router_error"})
                    fatal(f"router crashed: {exc!r}")
                release(events)

        @self.app.agent(scoped, name="ndd-decider")
        async def decider(stream: faust.StreamT) -> None:
            batches = stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S)  # type: ignore[attr-defined]
            async for events in batches:
                hold(events)
                messages = [e.message for e in events]
                try:
                    await service.pool.process(messages, service.send, service.fill_scoped)
                except Exception as exc:
                    # Faust would restart the agent and leave the taken events unacked, so
                    # the worker would stall silently. State is committed per batch: exit.
                    log.exception("decider failed", extra={"event": "decider_error"})
                    fatal(f"decider crashed: {exc!r}")
                release(events)
                service.record_lag(messages)

        @self.app.on_partitions_revoked.connect  # type: ignore[arg-type]
        async def on_revoked(app: Any, revoked: Any, **kwargs: Any) -> None:
            raw_revoked = {(tp.topic, tp.partition) for tp in revoked
                           if tp.topic != service.scoped_name}
            service._raw_owned -= raw_revoked
            for tp in raw_revoked:
                service._route_next.pop(tp, None)
            mine = [tp.partition for tp in revoked if tp.topic == service.scoped_name]
            if mine:
                log.info("partitions revoked: %s", mine, extra={"event": "revoked"})
                await service.pool.revoke(mine)

        @self.app.on_partitions_assigned.connect  # type: ignore[arg-type]
        async def on_assigned(app: Any, assigned: Any, **kwargs: Any) -> None:
            mine = sorted(tp.partition for tp in assigned if tp.topic == service.scoped_name)
            await service.assign_raw(sorted((tp.topic, tp.partition) for tp in assigned
                                            if tp.topic != service.scoped_name))
            try:
                await service.pool.assign(mine)
            except (BrokerLostData, ChangelogError) as exc:
                fatal(str(exc))
            await service.catch_up(mine)

        @self.app.page("/metrics")
        async def metrics_page(web: Any, request: Any) -> Any:
            return web.bytes(service.metrics.render(),
                             content_type="text/plain; version=0.0.4")

        @self.app.page("/health")
        async def health_page(web: Any, request: Any) -> Any:
            body = {"status": "ok", "partitions": sorted(service.pool.deciders),
                    "window_documents": sum(d.detector.window_documents()
                                            for d in service.pool.deciders.values())}
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
            ok = await asyncio.get_running_loop().run_in_executor(None, self._broker_answers)
            if ok:
                if self._unreachable_since is not None:
                    log.warning("broker %s answers again after %.0fs", s.brokers,
                                started - self._unreachable_since,
                                extra={"event": "broker_reachable"})
                self._unreachable_since = None
                return
            if self._unreachable_since is None:
                self._unreachable_since = started
            down = time.monotonic() - self._unreachable_since
            if down >= s.broker_timeout_s:
                fatal(f"no broker at {s.brokers} answered for {down:.0f}s "
                      f"(NDD_BROKER_TIMEOUT_S={s.broker_timeout_s:g})")
            log.error("broker %s does not answer (for %.0fs; exiting after %.0fs)",
                      s.brokers, down, s.broker_timeout_s,
                      extra={"event": "broker_unreachable"})

        @self.app.task
        async def announce() -> None:
            log.info("ndd-stream worker: %s; raw=%s scoped=%s; kernels=%s; "
                     "metrics on http://%s:%d/metrics",
                     describe(s), s.raw_topic_pattern or s.raw_topics, service.scoped_name,
                     kernels.IMPLEMENTATION, s.web_host, service.web_port,
                     extra={"event": "start"})


def hold(events: Any) -> None:
    """Keep the events' offsets from being committed until ``release``.

    take_events acks a batch in a ``finally``, so a worker stopped (cancelled) in the middle
    of a batch would let Faust commit records it never forwarded or decided; the next owner
    would start past them. The extra reference keeps them uncommitted instead: they are
    delivered again (at-least-once) and answered with the same decision.
    """
    for event in events:
        event.message.incref()


def release(events: Any) -> None:
    """The batch is done (delivered, state committed): drop the reference of ``hold``."""
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
    (settings.data_dir / settings.app_id / "faust").mkdir(parents=True, exist_ok=True)
    service = Service(settings)
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


def _broker_up(settings: Settings) -> bool:
    """Before any state exists: wait (up to NDD_BROKER_TIMEOUT_S) for a broker to answer,
    so a wrong address is one clear log line, not a page of client retries."""
    handler = json_handler()  # Faust installs the worker's log handler only later
    log.addHandler(handler)
    try:
        timeout = settings.broker_timeout_s
        reason = wait_for_broker(settings, timeout, on_wait=lambda: log.warning(
            "no Kafka broker answers at %s (NDD_BROKERS) yet; waiting up to %.0f s "
            "(NDD_BROKER_TIMEOUT_S)", settings.brokers, timeout,
            extra={"event": "broker_unreachable"}))
        if reason is None:
            return True
        log.critical("%s; exit code 3", unreachable_message(settings, timeout, reason),
                     extra={"event": "fatal"})
        return False
    finally:
        log.removeHandler(handler)
