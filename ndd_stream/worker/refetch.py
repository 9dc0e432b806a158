"""Reading a range of offsets straight from the broker, past Faust's consumer.

Around a rebalance Faust can deliver records fetched before it (prefetched, newer than the
committed offset) after it has rewound to the committed offset, and then drops the
re-fetched older records as already read; its next commit can even pass them. Both agents
therefore process each partition strictly in offset order and, when a record arrives
beyond the next expected offset, read the missing range themselves with this function
before going on. A rewind through Faust does not help: its read offset is raised again by
the next prefetched record, and the re-fetched ones are dropped again.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from confluent_kafka import Consumer, KafkaException, TopicPartition


class RefetchError(RuntimeError):
    """The range could not be read within the time limit."""


@dataclass(frozen=True)
class Fetched:
    """A record read directly, shaped like the Faust message the agents handle."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: float | None  # seconds, like faust's Message.timestamp


def read_range(conf: dict[str, object], topic: str, partition: int, start: int, end: int,
               timeout_s: float = 60.0) -> list[Fetched]:
    """Records ``start <= offset < end`` of ``topic[partition]``, in order. Starts later
    than ``start`` when retention removed the first ones (the caller sees the jump)."""
    if end <= start:
        return []
    consumer = Consumer({**conf, "group.id": f"ndd-refetch-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": False})
    out: list[Fetched] = []
    deadline = time.monotonic() + timeout_s
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        while True:
            if time.monotonic() > deadline:
                raise RefetchError(f"{topic}[{partition}]: offsets {start}-{end - 1} not read "
                                   f"within {timeout_s:.0f}s ({len(out)} read)")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise RefetchError(f"{topic}[{partition}]: {msg.error()}")
            offset = int(msg.offset() or 0)
            if offset >= end:
                return out
            if offset < start:
                continue
            ts_type, ts = msg.timestamp()
            raw_headers = cast(list[tuple[str, Any]], msg.headers() or [])
            headers = [(str(k), v if isinstance(v, bytes) else (v or "").encode())
                       for k, v in raw_headers]
            out.append(Fetched(topic, partition, offset, msg.key(), msg.value(), headers,
                               ts / 1000 if ts_type and ts >= 0 else None))
            if offset == end - 1:
                return out
    except KafkaException as exc:
        raise RefetchError(f"{topic}[{partition}]: {exc}") from exc
    finally:
        consumer.close()


def log_gap(logger: logging.Logger, topic: str, partition: int, expected: int,
            delivered: int) -> None:
    """The warning both agents give before reading skipped records themselves."""
    logger.warning("%s[%d]: expected offset %d, the consumer is at %d: reading the %d "
                   "skipped records from the broker", topic, partition, expected, delivered,
                   delivered - expected, extra={"topic": topic, "partition": partition,
                                                "offset": expected, "event": "offset_gap"})


def log_lost(logger: logging.Logger, topic: str, partition: int, expected: int,
             found: Sequence[Any], delivered: int, never: str) -> None:
    """An error if the broker no longer holds the first skipped records (retention removed
    them before they were ``never``, e.g. "processed" or "decided")."""
    first = found[0].offset if found else delivered
    if first > expected:
        logger.error("%s[%d]: offsets %d-%d are no longer in the topic and were never %s",
                     topic, partition, expected, first - 1, never,
                     extra={"topic": topic, "partition": partition, "offset": expected,
                            "event": "records_lost"})
