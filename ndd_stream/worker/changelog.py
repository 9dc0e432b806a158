"""Reading a partition of the state changelog: to its last stable offset, or to a sentinel.

Under exactly-once (Apache Kafka, which reports end offsets correctly) the partition is
read ``read_committed`` up to its last stable offset (ListOffsets): every committed
transaction's records, none of an open or aborted one; offsets may jump (transaction
markers, aborted records, compaction). :func:`read_committed_partition`. Which of the two
reads a restore uses is the committer's (``Committer.restore``).

At-least-once, on any broker (:func:`read_partition`), without trusting end offsets:

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
from ndd_stream.state.rocks import Checkpoint, decode_checkpoint

SENTINEL_KEY = b"ndd-sentinel"
CHECKPOINT_KEY = b"ndd-checkpoint"
"""Key of the record written after each batch's documents: the partition's checkpoint
(``state.rocks.encode_checkpoint``: the first scoped offset not yet reflected, and the
event-time order's state), so a worker that takes the partition over resumes exactly there
instead of trusting the group's committed offset. One record: never half of it."""


class ChangelogError(RuntimeError):
    """The changelog could not be read completely within the time limit."""


@dataclass
class ChangelogRead:
    records: list[tuple[bytes, bytes]]  # (key, value) of document records, in order
    next_offset: int  # offset after the sentinel: where the next reader starts
    checkpoint: Checkpoint | None = None  # the last checkpoint read, if any


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
    checkpoint: Checkpoint | None = None
    with log.records(topic, partition, start, timeout_s, ChangelogError) as found:
        for msg in found:
            key, value = msg.key or b"", msg.value or b""
            if key == SENTINEL_KEY:
                if value == token:
                    return ChangelogRead(records, msg.offset + 1, checkpoint)
                continue
            if key == CHECKPOINT_KEY:
                checkpoint = decode_checkpoint(value)
                continue
            if msg.value is None:  # a tombstone: its hour left the window
                continue
            records.append((key, value))
    raise ChangelogError(f"{topic}[{partition}]: ended before the sentinel")


def read_committed_partition(log: Log, topic: str, partition: int, start: int,
                             timeout_s: float = 300.0) -> ChangelogRead:
    """The committed document records of ``topic[partition]`` from ``start`` to its last
    stable offset (``next_offset``: below ``start`` when the broker lost records)."""
    found, end = log.read_to_end(topic, partition, start, timeout_s, ChangelogError)
    records: list[tuple[bytes, bytes]] = []
    checkpoint: Checkpoint | None = None
    for msg in found:
        key, value = msg.key or b"", msg.value
        if value is None or key == SENTINEL_KEY:  # a tombstone; an earlier worker's sentinel
            continue
        if key == CHECKPOINT_KEY:
            checkpoint = decode_checkpoint(value)
        else:
            records.append((key, value))
    return ChangelogRead(records, end, checkpoint)
