"""Talking to the test broker: names, settings, topics, producing, and one bounded reader.

Every wait has a deadline: a test that would hang fails with a count instead. Consumers
use ``assign`` (no group join, which costs half a session timeout on Tansu) and commit
nothing.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from ndd_stream.settings import Settings

from . import brokers

Position = tuple[str, int, int]  # raw topic, partition, offset

HANG_S = 60.0
"""Upper bound for "returns within its timeout, never hangs" checks of calls with a few
seconds' timeout: only a hang exceeds it, not a loaded machine."""


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.2) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds passed; its last value.
    The one bounded wait on a condition of the test harness."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


# --- names and settings -------------------------------------------------------------


class Names:
    """Topic and group names unique to one test: ``<label>-<test>-<random>``."""

    def __init__(self, test_name: str) -> None:
        slug = re.sub(r"[^A-Za-z0-9]+", "-", test_name).strip("-")[:40]
        self.suffix = f"{slug}-{uuid.uuid4().hex[:8]}"

    def topic(self, label: str = "t") -> str:
        return f"{label}-{self.suffix}"

    def group(self, label: str = "g") -> str:
        return f"{label}-{self.suffix}-grp"

    def app_id(self, label: str = "app") -> str:
        return f"{label}-{self.suffix}"


def make_settings(**fields: Any) -> Settings:
    """``Settings(**fields)``; typed loosely so mypy (without the pydantic plugin) accepts it."""
    return Settings(**fields)


def worker_settings(bootstrap: str, suffix: str, data_dir: Path, **overrides: Any) -> Settings:
    """The settings factory: a worker on ``bootstrap`` with its own topics, app id (one
    consumer group) and data dir, all named after ``suffix``; ``overrides`` win."""
    fields: dict[str, Any] = {
        "brokers": [bootstrap], "app_id": f"app-{suffix}", "raw_topics": f"raw-{suffix}",
        "unique_topic": f"unique-{suffix}", "duplicate_topic": f"duplicate-{suffix}",
        "dlq_topic": f"dlq-{suffix}", "decisions_topic": f"decisions-{suffix}",
        "data_dir": data_dir, "session_timeout_s": brokers.session_timeout_s(), "web_port": 0,
        # the broker tests check the at-least-once mechanics (catch-up, gap reads, replays);
        # tests/test_exactly_once.py asks for the default, exactly-once
        "guarantee": "at-least-once",
        "web_host": "127.0.0.1",
    }
    fields.update(overrides)
    return make_settings(**fields)


TopicFactory = Callable[..., list[str]]
"""Type of the ``make_topics`` fixture: ``make_topics(*names, partitions=1, config=None)``."""

SettingsFactory = Callable[..., Settings]
"""Type of the ``make_settings`` fixture: ``make_settings(**field_overrides)``."""


# --- topics and producing -----------------------------------------------------------


def create_topics(
    where: Settings | str,
    names: Iterable[str] = (),
    *,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = 20.0,
) -> None:
    """Create topics and wait until metadata lists them.

    With Settings: the service's own topics, as ``ndd-stream topics apply`` makes them.
    With a bootstrap address: the named topics (an error if one exists).
    """
    if isinstance(where, Settings):
        from ndd_stream.kafka.topics import apply, load_for

        report = apply(where, load_for(where), timeout=timeout)
        assert not report.errors, report
        return
    names = list(names)
    admin = AdminClient({"bootstrap.servers": where})
    futures = admin.create_topics(
        [NewTopic(n, partitions, 1, config=dict(config or {})) for n in names],
        request_timeout=timeout, operation_timeout=timeout)
    for future in futures.values():
        future.result(timeout=timeout)
    ok = wait_until(
        lambda: set(names) <= set(admin.list_topics(timeout=timeout).topics), timeout=timeout)
    assert ok, f"topics {names} not in metadata after {timeout}s"


def keep_old_records(settings: Settings, timeout: float = 20.0) -> None:
    """For a test whose records carry old Kafka timestamps that the worker must read (the
    fallback event time of items without one): the raw topics keep the producer's stamp
    (``CreateTime``; ``topics apply`` makes them ``LogAppendTime``) and no topic of the
    service deletes by time (``retention.ms=-1``): Apache Kafka deletes a rolled segment
    whose newest timestamp is past retention, even while the worker has not read it yet.
    The embedded Tansu broker keeps the producer's stamp and deletes nothing by time."""
    if not brokers.is_kafka():
        return
    from ndd_stream.kafka.topics import load_for, resolve

    wanted, _ = resolve(settings, load_for(settings))

    def entries(key: str) -> list[ConfigEntry]:
        out = [ConfigEntry("retention.ms", "-1", incremental_operation=AlterConfigOpType.SET)]
        if key == "raw":
            out.append(ConfigEntry("message.timestamp.type", "CreateTime",
                                   incremental_operation=AlterConfigOpType.SET))
        return out

    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers()})
    resources = [ConfigResource(ResourceType.TOPIC, t.name, incremental_configs=entries(t.key))
                 for t in wanted]
    for future in admin.incremental_alter_configs(resources).values():
        future.result(timeout=timeout)


@dataclass
class Outgoing:
    """A record to produce; ``partition`` None lets the partitioner decide."""

    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    partition: int | None = None
    timestamp_ms: int | None = None

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``Producer.produce`` for this record."""
        out: dict[str, Any] = {"value": self.value}
        if self.key is not None:
            out["key"] = self.key
        if self.headers:
            out["headers"] = self.headers
        if self.partition is not None:
            out["partition"] = self.partition
        if self.timestamp_ms is not None:
            out["timestamp"] = self.timestamp_ms
        return out


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Outgoing | bytes],
    *,
    one_per_batch: bool = True,
    timeout: float = 15.0,
    extra_config: Mapping[str, Any] | None = None,
) -> int:
    """Produce and wait for every delivery; the number delivered (asserts none failed).

    ``one_per_batch`` sends each record in its own batch: Tansu's ListOffsets reports the
    base offset of the last batch, so batching makes end offsets (and Faust changelog
    recovery) under-report. See docs/TANSU.md.
    """
    # idempotence keeps a partition's order through retries (a new topic's first sends on
    # Apache Kafka are often retried while its leader is elected)
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                            "enable.idempotence": True}
    if one_per_batch:
        conf["batch.num.messages"] = 1
    conf.update(extra_config or {})
    producer = Producer(conf)
    errors: list[KafkaError] = []
    delivered = 0

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            errors.append(err)

    sent = 0
    for item in records:
        rec = item if isinstance(item, Outgoing) else Outgoing(value=item)
        producer.produce(topic, on_delivery=on_delivery, **rec.kwargs())
        producer.poll(0)
        sent += 1
    remaining = producer.flush(timeout)
    assert not errors, f"delivery failed: {errors[:3]}"
    assert remaining == 0, f"{remaining} record(s) not delivered within {timeout}s"
    assert delivered == sent
    return delivered


# --- reading ------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """A consumed record in plain Python types, with the worker's headers as properties."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int | None = None

    def header(self, name: str) -> bytes | None:
        """Last value of header ``name`` (None if absent)."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return found

    def text(self, name: str) -> str | None:
        value = self.header(name)
        return value.decode() if value is not None else None

    @property
    def source(self) -> Position:
        """Where the worker read the item (``ndd-source-*``): every output carries it."""
        return (self.text("ndd-source-topic") or "?",
                int(self.text("ndd-source-partition") or -1),
                int(self.text("ndd-source-offset") or -1))

    @property
    def identity(self) -> str | None:
        return self.text("ndd-identity")

    @property
    def status(self) -> str | None:
        return self.text("ndd-status")

    @property
    def duplicate_of(self) -> str | None:
        return self.text("ndd-duplicate-of")

    @property
    def policy(self) -> str | None:
        return self.text("ndd-policy")

    @property
    def reason(self) -> str | None:
        """``ndd-dlq-reason`` (dead letters only)."""
        return self.text("ndd-dlq-reason")

    @property
    def story(self) -> str | None:
        return self.text("ndd-story")

    @property
    def replayed(self) -> bool:
        return self.header("ndd-replayed") == b"1"


class Reader:
    """Reads ``topics`` from the beginning with one consumer for its whole life; records
    accumulate in ``records`` (and their raw positions in ``sources``), so a caller that
    waits for output keeps what it already has instead of re-reading every partition."""

    def __init__(self, bootstrap: str, topics: str | Sequence[str], *,
                 timeout: float = 20.0) -> None:
        names = [topics] if isinstance(topics, str) else list(topics)
        self.records: list[Record] = []
        self.sources: set[Position] = set()
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"test-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "enable.partition.eof": False,
            "fetch.message.max.bytes": 16_000_000,
            # what the worker's outputs promise under exactly-once: committed records only
            "isolation.level": "read_committed"})
        try:
            metadata = self._consumer.list_topics(timeout=timeout)
            assignment = []
            for name in names:
                meta = metadata.topics.get(name)
                assert meta is not None and meta.partitions, f"no such topic {name}"
                assignment += [TopicPartition(name, p, OFFSET_BEGINNING) for p in meta.partitions]
            self._consumer.assign(assignment)
        except BaseException:
            self._consumer.close()
            raise

    @classmethod
    def outputs(cls, settings: Settings) -> Reader:
        """unique + duplicate + DLQ: where every raw record of a worker comes out."""
        return cls(settings.bootstrap_servers(),
                   [settings.unique_topic, settings.duplicate_topic, settings.dlq_topic])

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._consumer.close()

    def wait(self, until: Callable[[], bool], timeout: float, *, idle: float | None = None,
             alive: Callable[[], bool] | None = None) -> bool:
        """The one poll loop: read until ``until()`` holds, ``timeout`` seconds passed,
        ``idle`` seconds passed without a new record, or ``alive()`` turned false (then
        what is already on its way is read, up to 2 s more). Returns ``until()``."""
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while not until():
            now = time.monotonic()
            if now >= deadline or (idle is not None and now - last >= idle):
                break
            if alive is not None and not alive():
                deadline, idle, alive = min(deadline, now + 2.0), 0.5, None
            for msg in self._consumer.consume(1000, timeout=min(0.2, deadline - now)):
                err = msg.error()
                assert err is None, f"consume error: {err}"
                self._add(msg)
                last = time.monotonic()
        return until()

    def read(self, *, n: int | None = None, timeout: float = 20.0,
             idle: float | None = None) -> list[Record]:
        """Read until ``n`` records in all, ``timeout`` or ``idle``; every record so far.
        To prove that nothing *more* arrives, use ``n=None`` with ``idle``."""
        self.wait(lambda: n is not None and len(self.records) >= n, timeout, idle=idle)
        return self.records

    def wait_for(self, positions: Iterable[Position], timeout: float,
                 alive: Callable[[], bool] | None = None) -> bool:
        """Read until every raw position has come out."""
        wanted = set(positions)
        return self.wait(lambda: wanted <= self.sources, timeout, alive=alive)

    def wait_count(self, target: int, timeout: float,
                   alive: Callable[[], bool] | None = None) -> bool:
        """Read until ``target`` distinct raw positions have come out."""
        return self.wait(lambda: len(self.sources) >= target, timeout, alive=alive)

    def _add(self, msg: Any) -> None:
        ts_type, ts = msg.timestamp()
        raw_headers = cast(list[tuple[str, Any]], msg.headers() or [])
        record = Record(
            topic=str(msg.topic()), partition=int(msg.partition() or 0),
            offset=int(msg.offset() or 0), key=msg.key(), value=msg.value(),
            headers=tuple((k, _as_bytes(v)) for k, v in raw_headers),
            timestamp_ms=ts if ts_type else None)
        self.records.append(record)
        if record.header("ndd-source-offset") is not None:
            self.sources.add(record.source)


def consume(bootstrap: str, topics: str | Sequence[str], *, n: int | None = None,
            timeout: float = 20.0, idle: float | None = None) -> list[Record]:
    """Read ``topics`` from the beginning until ``n`` records, ``timeout`` or ``idle``."""
    with Reader(bootstrap, topics, timeout=timeout) as reader:
        return reader.read(n=n, timeout=timeout, idle=idle)


def _as_bytes(value: str | bytes | None) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    return value or b""


def committed_offsets(
    bootstrap: str, group: str, topic: str, *, timeout: float = 10.0
) -> dict[int, int]:
    """Committed offset per partition of ``topic`` for ``group`` (-1 when none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        meta = consumer.list_topics(topic, timeout=timeout).topics[topic]
        tps = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        result = consumer.committed(tps, timeout=timeout)
        return {tp.partition: (tp.offset if tp.offset >= 0 else -1) for tp in result}
    finally:
        consumer.close()
