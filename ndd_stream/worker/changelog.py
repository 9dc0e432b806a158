"""Reading a partition of the state changelog, without trusting end offsets.

Tansu (and some Kafka setups) can under-report a partition's end offset, so instead
of reading "to the end" the reader first appends a sentinel record with a random
value to the partition and reads until it sees that very record: everything written
before it has then been read. A sentinel that lands *before* the offset the caller
starts from means the partition lost records (an in-memory broker restarted empty);
that is returned at once instead of waiting for records that will never come.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

SENTINEL_KEY = b"ndd-sentinel"
POSITION_KEY = b"ndd-position"
"""Key of the record written after each batch's documents: the value is the first scoped
offset not yet reflected (decimal), so a worker that takes the partition over resumes
exactly there instead of trusting the group's committed offset."""


class ChangelogError(RuntimeError):
    """The changelog could not be read completely within the time limit."""


@dataclass
class ChangelogRead:
    records: list[tuple[bytes, bytes]]  # (key, value) of document records, in order
    next_offset: int  # offset after the sentinel: where the next reader starts
    position: int | None = None  # the last position record read (scoped offset), if any


def read_partition(conf: dict[str, object], topic: str, partition: int, start: int,
                   timeout_s: float = 120.0) -> ChangelogRead:
    """All document records of ``topic[partition]`` from ``start`` up to a fresh sentinel."""
    token = uuid.uuid4().hex.encode()
    producer = Producer({**conf, "linger.ms": 0})
    delivered: list[int] = []

    def on_delivery(err: object, msg: Any) -> None:
        if err is None and msg.offset() is not None:
            delivered.append(int(msg.offset()))

    producer.produce(topic, key=SENTINEL_KEY, value=token, partition=partition,
                     on_delivery=on_delivery)
    if producer.flush(min(30.0, timeout_s)) != 0:
        raise ChangelogError(f"{topic}[{partition}]: could not write the sentinel")
    if delivered and delivered[0] < start:
        # The partition ends before what the caller already has: the broker lost data
        # (e.g. restarted empty). Fetching from ``start`` would wait for records that
        # will never come, so say so now; the caller compares next_offset with start.
        return ChangelogRead([], delivered[0] + 1)
    consumer = Consumer({**conf, "group.id": f"ndd-restore-{token.decode()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": False})
    records: list[tuple[bytes, bytes]] = []
    position: int | None = None
    deadline = time.monotonic() + timeout_s
    try:
        consumer.assign([TopicPartition(topic, partition, max(start, 0))])
        while True:
            if time.monotonic() > deadline:
                raise ChangelogError(
                    f"{topic}[{partition}]: sentinel not seen within {timeout_s:.0f}s "
                    f"after {len(records)} records from offset {start}")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise ChangelogError(f"{topic}[{partition}]: {msg.error()}")
            key, value = msg.key() or b"", msg.value() or b""
            if key == SENTINEL_KEY:
                if value == token:
                    return ChangelogRead(records, int(msg.offset() or 0) + 1, position)
                continue
            if key == POSITION_KEY:
                position = int(value)
                continue
            records.append((key, value))
    except KafkaException as exc:
        raise ChangelogError(f"{topic}[{partition}]: {exc}") from exc
    finally:
        consumer.close()
