"""Reading a partition of the state changelog, without trusting end offsets.

Tansu (and some Kafka setups) can under-report a partition's end offset, so instead
of reading "to the end" the reader first appends a sentinel record with a random
value to the partition and reads until it sees that very record: everything written
before it has then been read. A sentinel that lands *before* the offset the caller
starts from means the partition lost records (an in-memory broker restarted empty);
that is returned at once instead of waiting for records that will never come.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ndd_stream.kafka.reads import Log

SENTINEL_KEY = b"ndd-sentinel"
POSITION_KEY = b"ndd-position"
"""Key of the record written after each batch's documents: the value is the first scoped
offset not yet reflected (decimal), so a worker that takes the partition over resumes
exactly there instead of trusting the group's committed offset."""
ORDER_KEY = b"ndd-order"
"""Key of the record written after a position record under event-time order: the order's
checkpoint (``state.codec.encode_order``) that goes with that position."""


class ChangelogError(RuntimeError):
    """The changelog could not be read completely within the time limit."""


@dataclass
class ChangelogRead:
    records: list[tuple[bytes, bytes]]  # (key, value) of document records, in order
    next_offset: int  # offset after the sentinel: where the next reader starts
    position: int | None = None  # the last position record read (scoped offset), if any
    # the last position record followed by its order checkpoint (event-time order): a
    # worker killed while producing a batch's changelog can leave a position without it
    paired: tuple[int, bytes] | None = None


def read_partition(log: Log, topic: str, partition: int, start: int,
                   timeout_s: float = 300.0) -> ChangelogRead:
    """All document records of ``topic[partition]`` from ``start`` up to a fresh sentinel."""
    token = uuid.uuid4().hex.encode()
    sentinel = log.append(topic, partition, SENTINEL_KEY, token)
    if sentinel is None:
        raise ChangelogError(f"{topic}[{partition}]: could not write the sentinel")
    if sentinel < start:
        # The partition ends before what the caller already has: the broker lost data
        # (e.g. restarted empty). Fetching from ``start`` would wait for records that
        # will never come, so say so now; the caller compares next_offset with start.
        return ChangelogRead([], sentinel + 1)
    records: list[tuple[bytes, bytes]] = []
    position: int | None = None
    paired: tuple[int, bytes] | None = None
    with log.records(topic, partition, start, timeout_s, ChangelogError) as found:
        for msg in found:
            key, value = msg.key or b"", msg.value or b""
            if key == SENTINEL_KEY:
                if value == token:
                    return ChangelogRead(records, msg.offset + 1, position, paired)
                continue
            if key == POSITION_KEY:
                position = int(value)
                continue
            if key == ORDER_KEY:
                if position is not None:
                    paired = (position, value)
                continue
            records.append((key, value))
    raise ChangelogError(f"{topic}[{partition}]: ended before the sentinel")
