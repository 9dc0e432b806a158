"""Load a JSONL file of news items into the raw topic, line by line, bytes unchanged.

Used to replay data sets and to feed tests. The line bytes are sent as they are (only
the line terminator is removed), even when a line is not valid JSON, so the worker's
dead-letter path sees exactly what a broken upstream would send.

Records keep the send time as their Kafka timestamp, never the item's event time (the
worker reads that from the item): retention deletes by record timestamp, so an archive
stamped with last year's dates would be deleted before a worker read it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import KafkaError, Message, Producer

from ndd_stream.core.items import parse_timestamp
from ndd_stream.files import named_lines
from ndd_stream.kafka.config import librdkafka_config
from ndd_stream.settings import Settings

#: Epoch values above this are taken as milliseconds, not seconds (year 2286 in seconds).


@dataclass
class ProduceCounts:
    """What ``produce_file`` did; ``failed`` > 0 or ``pending`` > 0 means data was lost."""

    lines: int = 0
    blank: int = 0
    sent: int = 0
    delivered: int = 0
    failed: int = 0
    malformed: int = 0
    unkeyed: int = 0
    untimed: int = 0
    first_error: str | None = None  # why the first failed delivery failed

    @property
    def pending(self) -> int:
        return self.sent - self.delivered - self.failed


@dataclass(frozen=True)
class PreparedLine:
    """One line ready to send: original bytes, channel key, event time in ms (counted for
    the summary; the record itself is stamped with the send time)."""

    value: bytes
    key: bytes | None
    timestamp_ms: int | None
    malformed: bool


def parse_timestamp_ms(value: Any) -> int | None:
    """Kafka timestamp (ms) of an item's event time, read exactly as the detector reads it
    (:func:`ndd_stream.core.items.parse_timestamp`); None if unusable or negative."""
    seconds = parse_timestamp(value)
    if seconds is None or seconds < 0:
        return None
    return round(seconds * 1000)


def prepare_line(settings: Settings, line: bytes) -> PreparedLine:
    """Key (channel) and timestamp for one line; the value stays byte-identical."""
    try:
        item = orjson.loads(line)
    except orjson.JSONDecodeError:
        return PreparedLine(line, None, None, malformed=True)
    if not isinstance(item, dict):
        return PreparedLine(line, None, None, malformed=True)
    channel = item.get(settings.channel_field)
    key: bytes | None = None
    if isinstance(channel, str) and channel:
        key = channel.encode("utf-8")
    elif isinstance(channel, int | float) and not isinstance(channel, bool):
        key = str(channel).encode("ascii")
    timestamp_ms = None
    for name in settings.timestamp_fields:
        timestamp_ms = parse_timestamp_ms(item.get(name))
        if timestamp_ms is not None:
            break
    return PreparedLine(line, key, timestamp_ms, malformed=False)


def iter_lines(path: Path) -> Iterator[bytes]:
    """Lines of a file without their terminator (``\\n`` or ``\\r\\n``), bytes untouched."""
    with path.open("rb") as fh:
        for raw in named_lines(fh, path):  # a read error names the file
            if raw.endswith(b"\r\n"):
                yield raw[:-2]
            elif raw.endswith(b"\n"):
                yield raw[:-1]
            else:
                yield raw


def produce_file(
    settings: Settings,
    path: Path,
    topic: str,
    *,
    rate: float | None = None,
    flush_timeout: float = 30.0,
    producer: Producer | None = None,
    on_progress: Callable[[ProduceCounts], None] | None = None,
) -> ProduceCounts:
    """Send every non-blank line of ``path`` to ``topic``; at most ``rate`` lines/s if set.

    Waits at most ``flush_timeout`` seconds for outstanding deliveries at the end.
    """
    counts = ProduceCounts()
    producer = producer or Producer(
        librdkafka_config(
            settings,
            {
                # Java-compatible key hashing: the same channel lands on the same partition
                # as with Java/aiokafka producers (librdkafka's default hash differs).
                "partitioner": "murmur2_random",
                # A channel's items are decided in partition order: a retried batch must
                # not land after a later one (a new topic's first sends are often retried).
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.max.bytes": 16 * 1024 * 1024,
            },
        )
    )

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            counts.delivered += 1
        else:
            counts.failed += 1
            counts.first_error = counts.first_error or err.str()

    started = time.monotonic()
    for line in iter_lines(path):
        counts.lines += 1
        if not line.strip():
            counts.blank += 1
            continue
        prepared = prepare_line(settings, line)
        counts.malformed += prepared.malformed
        counts.unkeyed += prepared.key is None
        counts.untimed += prepared.timestamp_ms is None
        if rate:
            # Pace against the start time so that slow sends are caught up, not added up.
            due = started + counts.sent / rate
            while (delay := due - time.monotonic()) > 0:
                producer.poll(min(delay, 0.1))
        _send(producer, topic, prepared, on_delivery)
        counts.sent += 1
        producer.poll(0)
        if on_progress is not None and counts.sent % 1000 == 0:
            on_progress(counts)
    producer.flush(flush_timeout)
    return counts


def _send(
    producer: Producer,
    topic: str,
    line: PreparedLine,
    on_delivery: Callable[[KafkaError | None, Message], None],
) -> None:
    kwargs: dict[str, Any] = {"value": line.value, "on_delivery": on_delivery}
    if line.key is not None:
        kwargs["key"] = line.key
    for _ in range(600):  # local queue full: give librdkafka up to ~60 s to drain it
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            producer.poll(0.1)
    raise BufferError("producer queue stayed full for 60 s; is the broker reachable?")
