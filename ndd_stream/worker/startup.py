"""Before the worker starts: pre-flight checks, and the names and limits it runs with.

Everything here runs once, before Faust's app exists: a broker answers (or one line says
it does not), the broker runs the guarantee asked for, the state directory belongs to this
cluster, and the topic names and size limits are resolved from ``topics/news.yaml`` and
the topics' own settings.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from ndd_stream.core.items import ItemFormat
from ndd_stream.kafka import topics as topic_defs
from ndd_stream.kafka.acls import worker_denied
from ndd_stream.kafka.config import librdkafka_config
from ndd_stream.kafka.limits import (
    NO_LIMITS,
    WriteLimits,
    producer_request_limit,
    read_write_limits,
)
from ndd_stream.kafka.probe import unreachable_message, wait_for_broker
from ndd_stream.kafka.transactions import TRANSACTIONAL
from ndd_stream.settings import Settings
from ndd_stream.worker.cluster import ClusterChanged, check_cluster
from ndd_stream.worker.deciding import OutputTopics
from ndd_stream.worker.logs import json_handler

if TYPE_CHECKING:
    from ndd_stream.worker.guarantee import Guarantee

log = logging.getLogger("ndd_stream.worker")


def preflight(settings: Settings, guarantee: Guarantee) -> WriteLimits | None:
    """The checks before any state is opened; the write limits of the topics, or None
    when the worker must exit (code 3; one CRITICAL line said why)."""
    if not broker_up(settings, guarantee):
        return None
    if not can_run_guarantee(guarantee, topic_name(settings, "changelog")):
        return None
    (settings.data_dir / settings.app_id / "faust").mkdir(parents=True, exist_ok=True)
    admin = AdminClient(librdkafka_config(settings))  # dropped on return: one client less
    try:
        check_cluster(settings.data_dir / settings.app_id,
                      admin.list_topics(timeout=settings.broker_timeout_s).cluster_id,
                      settings.bootstrap_servers())
    except ClusterChanged as exc:
        log.addHandler(json_handler())
        log.critical("%s; exit code 3", exc, extra={"event": "fatal"})
        return None
    except KafkaException:
        pass  # the broker went away again: the worker's own checks deal with it
    return read_write_limits(admin, written_topics(settings))


class Preflight:
    """:func:`preflight` on a thread of its own, started before the worker's modules import.

    Its time is the broker's answers (under exactly-once the transaction check alone is a
    transaction opened, written and aborted, then read back: ~0.5 s), while importing
    Faust, aiokafka and aiohttp is the CPU's (~0.8 s): run one after the other they were
    most of a worker's start. Neither this module nor ``worker/guarantee.py`` imports any of
    them, so that the two overlap."""

    def __init__(self, settings: Settings, guarantee: Guarantee) -> None:
        self._limits: WriteLimits | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(settings, guarantee),
                                        name="ndd-preflight", daemon=True)
        self._thread.start()

    def _run(self, settings: Settings, guarantee: Guarantee) -> None:
        try:
            self._limits = preflight(settings, guarantee)
        except BaseException as exc:  # raised again in the thread that asks
            self._error = exc

    def result(self) -> WriteLimits | None:
        """What :func:`preflight` returned, once it has; what it raised is raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._limits


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


def written_topics(settings: Settings) -> list[str]:
    """Every topic the worker writes (their ``max.message.bytes``: kafka/limits.py)."""
    written = [*item_carriers(settings), topic_name(settings, "changelog")]
    if settings.decisions_topic:
        written.append(settings.decisions_topic)
    if settings.shards > 1:
        written.append(topic_name(settings, "shards_changelog"))
    return written


def broker_up(settings: Settings, guarantee: Guarantee) -> bool:
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
                   else worker_denied(settings, guarantee.acls()))
        if message is None:
            return True
        log.critical("%s; exit code 3", message, extra={"event": "fatal"})
        return False
    finally:
        log.removeHandler(handler)


def free_port(host: str) -> int:
    """NDD_WEB_PORT=0 means any free port (tests, several workers on one host)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host if host != "0.0.0.0" else "127.0.0.1", 0))
        return int(sock.getsockname()[1])


def transaction_conf(settings: Settings) -> dict[str, Any]:
    """librdkafka settings of the transactional producers (exactly-once): as Faust's
    producer (``producer_kwargs``), with a short linger so a piece's records batch, and a
    short first retry and every broker connected at once (``kafka.transactions.TRANSACTIONAL``)."""
    request = producer_request_limit(settings.max_item_bytes)
    return librdkafka_config(settings, {
        "acks": "all", "linger.ms": 5, "message.max.bytes": request,
        "batch.size": min(settings.producer_batch_kb << 10, request), **TRANSACTIONAL})


WORKER_ID_FILE = "worker-id"
MAX_WORKERS_PER_DIR = 64
_HELD: dict[Path, str] = {}  # state directory -> the id this process holds (locked)


def worker_id(state_dir: Path) -> str:
    """The id of the worker that runs on ``state_dir``, kept there (made on its first
    start): its transactional id, so that the worker restarted on its state aborts at once
    what it left open (``kafka/transactions.py``). The file is locked for the process's
    life; a second worker on the same directory takes the next free one (``worker-id.1``
    ...): two producers with one id would fence each other at every commit."""
    key = state_dir.resolve()
    if key in _HELD:
        return _HELD[key]
    state_dir.mkdir(parents=True, exist_ok=True)
    for slot in range(MAX_WORKERS_PER_DIR):
        path = state_dir / (WORKER_ID_FILE if slot == 0 else f"{WORKER_ID_FILE}.{slot}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another worker's
            os.close(fd)
            continue
        found = os.read(fd, 256).decode("ascii", "replace").strip()
        if not found:
            found = uuid.uuid4().hex
            os.write(fd, (found + "\n").encode())
            os.fsync(fd)
        _HELD[key] = found  # the descriptor stays open: the lock is held until exit
        return found
    raise RuntimeError(f"{state_dir}: {MAX_WORKERS_PER_DIR} workers already run on it")


def can_run_guarantee(guarantee: Guarantee, changelog: str) -> bool:
    """Whether the broker runs the guarantee asked for; if not, one CRITICAL line says
    why: never a silent fall back to at-least-once."""
    reason = guarantee.refusal(changelog)
    if reason is None:
        return True
    handler = json_handler()  # Faust installs the worker's log handler only later
    log.addHandler(handler)
    try:
        log.critical("%s; exit code 3", reason, extra={"event": "fatal"})
    finally:
        handler.flush()
        log.removeHandler(handler)
    return False
