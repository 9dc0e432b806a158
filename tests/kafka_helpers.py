"""Bounded helpers for tests that talk to the real (embedded Tansu) broker.

Every wait here has a deadline: a test that would hang fails with a count instead.
Consumers use ``assign`` (no group join, which costs half a session timeout on Tansu).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ndd_stream.settings import Settings


@dataclass(frozen=True)
class Record:
    """A consumed record in plain Python types."""

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


@dataclass
class Outgoing:
    """A record to produce; ``partition`` None lets the partitioner decide."""

    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    partition: int | None = None
    timestamp_ms: int | None = None


TopicFactory = Callable[..., list[str]]
"""Type of the ``make_topics`` fixture: ``make_topics(*names, partitions=1, config=None)``."""

SettingsFactory = Callable[..., Settings]
"""Type of the ``make_settings`` fixture: ``make_settings(**field_overrides)``."""


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


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds passed; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def create_topics(
    bootstrap: str,
    names: Iterable[str],
    *,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = 15.0,
) -> None:
    """Create topics (error if one exists) and wait until metadata lists them all."""
    names = list(names)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(n, partitions, 1, config=dict(config or {})) for n in names],
        request_timeout=timeout,
        operation_timeout=timeout,
    )
    for future in futures.values():
        future.result(timeout=timeout)
    ok = wait_until(
        lambda: set(names) <= set(admin.list_topics(timeout=timeout).topics), timeout=timeout
    )
    assert ok, f"topics {names} not in metadata after {timeout}s"


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
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"}
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
        kwargs: dict[str, Any] = {"value": rec.value, "on_delivery": on_delivery}
        if rec.key is not None:
            kwargs["key"] = rec.key
        if rec.headers:
            kwargs["headers"] = rec.headers
        if rec.partition is not None:
            kwargs["partition"] = rec.partition
        if rec.timestamp_ms is not None:
            kwargs["timestamp"] = rec.timestamp_ms
        producer.produce(topic, **kwargs)
        producer.poll(0)
        sent += 1
    remaining = producer.flush(timeout)
    assert not errors, f"delivery failed: {errors[:3]}"
    assert remaining == 0, f"{remaining} record(s) not delivered within {timeout}s"
    assert delivered == sent
    return delivered


class Reader:
    """A consumer that reads ``topics`` from the beginning, joins no group and commits
    nothing; records accumulate over :meth:`read` calls, so a caller waiting for output
    keeps what it already has instead of re-reading (and re-waiting for) every partition."""

    def __init__(self, bootstrap: str, topics: str | Sequence[str], *,
                 timeout: float = 20.0) -> None:
        names = [topics] if isinstance(topics, str) else list(topics)
        self.records: list[Record] = []
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"test-reader-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
            }
        )
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

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._consumer.close()

    def read(self, *, n: int | None = None, timeout: float = 20.0,
             idle: float | None = None) -> list[Record]:
        """Poll until ``n`` records in all, ``timeout`` seconds, or ``idle`` seconds without a
        new record; return every record read so far."""
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while n is None or len(self.records) < n:
            now = time.monotonic()
            if now >= deadline or (idle is not None and now - last >= idle):
                break
            msg = self._consumer.poll(min(0.25, deadline - now))
            if msg is None:
                continue
            err = msg.error()
            assert err is None, f"consume error: {err}"
            ts_type, ts = msg.timestamp()
            raw_headers = cast(list[tuple[str, Any]], msg.headers() or [])
            self.records.append(
                Record(
                    topic=str(msg.topic()),
                    partition=int(msg.partition() or 0),
                    offset=int(msg.offset() or 0),
                    key=msg.key(),
                    value=msg.value(),
                    headers=tuple((k, _as_bytes(v)) for k, v in raw_headers),
                    timestamp_ms=ts if ts_type else None,
                )
            )
            last = time.monotonic()
        return self.records


def consume(
    bootstrap: str,
    topics: str | Sequence[str],
    *,
    n: int | None = None,
    timeout: float = 20.0,
    idle: float | None = None,
) -> list[Record]:
    """Read ``topics`` from the beginning until ``n`` records, ``timeout`` or ``idle``.

    ``idle`` stops after that many seconds without a new record (to prove that nothing
    *more* arrives, use ``n=None`` with ``idle``). Commits nothing and joins no group.
    """
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
