"""In-memory fakes for unit tests of the worker's logic without a broker.

:class:`MemoryLog` is the decider pool's view of Kafka (a ``kafka.reads.Log``: ranges and
the changelog are read by the same code as against Kafka) plus ``send`` (the producer),
over plain lists. Retention can be simulated with ``delete_before``. Kafka itself is
never mocked in the broker tests; this is for the pool's process and catch-up logic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager

from ndd_stream.kafka.reads import Fetched, Log
from ndd_stream.worker.records import OutRecord


class MemoryLog(Log):
    """Topic partitions as lists of records; offsets are list positions."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], list[Fetched]] = {}
        self.first: dict[tuple[str, int], int] = {}  # offsets below were deleted
        self.reads: list[tuple[str, int, int]] = []  # (topic, partition, start) read

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               headers: list[tuple[str, bytes]] | None = None,
               timestamp: float | None = None) -> int:
        log = self.logs.setdefault((topic, partition), [])
        log.append(Fetched(topic, partition, len(log), key, value, list(headers or []),
                           timestamp))
        return len(log) - 1

    def delete_before(self, topic: str, partition: int, offset: int) -> None:
        """What retention does: the records below ``offset`` are gone."""
        self.first[(topic, partition)] = offset

    def topic(self, name: str) -> list[Fetched]:
        """Every record of a topic, partition by partition."""
        return [r for (t, _), log in sorted(self.logs.items()) if t == name for r in log]

    @contextmanager
    def records(self, topic: str, partition: int, start: int, timeout_s: float,
                error: type[Exception]) -> Iterator[Iterator[Fetched]]:
        self.reads.append((topic, partition, start))

        def read() -> Iterator[Fetched]:
            log = self.logs.get((topic, partition), [])
            yield from log[max(start, self.first.get((topic, partition), 0)):]
            raise error(f"{topic}[{partition}]: the end of the log (a broker would wait)")

        yield read()

    async def send(self, record: OutRecord) -> Awaitable[Fetched]:
        """The producer: append, and a delivery future already done."""
        offset = self.append(record.topic, record.partition or 0, record.key, record.value,
                             list(record.headers))
        done: asyncio.Future[Fetched] = asyncio.get_running_loop().create_future()
        done.set_result(self.logs[(record.topic, record.partition or 0)][offset])
        return done
