"""In-memory fakes for unit tests of the worker's logic without a broker.

:class:`MemoryLog` is the decider pool's view of Kafka (a ``kafka.reads.Log``: ranges and
the changelog are read by the same code as against Kafka) plus ``send`` (the producer),
over plain lists. Retention can be simulated with ``delete_before``.

:class:`MemoryTransactions` adds what exactly-once needs (``kafka/transactions.py``): a
worker's producer whose records become visible only when its transaction commits, with the
input offsets committed alongside, a commit marker taking an offset as Kafka's do
(read_committed readers skip it), and fencing by the group's generation
(:class:`MemoryGroup`: a worker whose generation the group left behind commits nothing).
Crash-and-resume cases of the committer run on it in milliseconds. Kafka
itself is never mocked in the broker tests, which run the same code for real.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ndd_stream.kafka.reads import Fetched, Log
from ndd_stream.kafka.transactions import TP, Member, ProducerFenced, Transactions
from ndd_stream.worker.records import OutRecord

MARKER = b"\x00marker"  # the value of a commit marker's place in a MemoryLog


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
        return [r for (t, _), log in sorted(self.logs.items()) if t == name for r in log
                if r.value != MARKER]

    @contextmanager
    def records(self, topic: str, partition: int, start: int, timeout_s: float,
                error: type[Exception]) -> Iterator[Iterator[Fetched]]:
        self.reads.append((topic, partition, start))

        def read() -> Iterator[Fetched]:
            log = self.logs.get((topic, partition), [])
            for record in log[max(start, self.first.get((topic, partition), 0)):]:
                if record.value != MARKER:
                    yield record
            raise error(f"{topic}[{partition}]: the end of the log (a broker would wait)")

        yield read()

    def log_start(self, topic: str, partition: int, timeout_s: float) -> int:
        return self.first.get((topic, partition), 0)

    def read_to_end(self, topic: str, partition: int, start: int, timeout_s: float,
                    error: type[Exception]) -> tuple[list[Fetched], int]:
        """Everything in a MemoryLog is committed: read_committed, the end is its length."""
        log = self.logs.get((topic, partition), [])
        first = max(start, self.first.get((topic, partition), 0))
        return [r for r in log[first:] if r.value != MARKER], len(log)

    async def send(self, record: OutRecord) -> Awaitable[Fetched]:
        """The producer: append, and a delivery future already done."""
        offset = self.append(record.topic, record.partition or 0, record.key, record.value,
                             list(record.headers))
        done: asyncio.Future[Fetched] = asyncio.get_running_loop().create_future()
        done.set_result(self.logs[(record.topic, record.partition or 0)][offset])
        return done


class Crash(Exception):
    """The worker dies (kill -9) at the moment a test chose."""


class MemoryGroup:
    """A consumer group: its generation moves on at each rebalance (:meth:`rebalance`)."""

    def __init__(self) -> None:
        self.generation = 1
        self.committed: dict[TP, int] = {}  # input partition -> committed offset

    def rebalance(self) -> int:
        self.generation += 1
        return self.generation


class MemoryTransactions(Transactions):
    """A worker's transactional producer, over a :class:`MemoryLog`; a member of ``group``
    (a group of its own if none) at the group's generation when made."""

    def __init__(self, log: MemoryLog, group: MemoryGroup | None = None) -> None:
        # no Kafka client: nothing of the parent
        self.log = log
        self.group = group or MemoryGroup()  # type: ignore[assignment]
        self.committed = self.group.committed  # type: ignore[attr-defined]
        self.generation: int = self.group.generation  # type: ignore[attr-defined]
        self.transactional_id = "memory"
        self.commits = 0
        self.aborts = 0
        # a test's kill: called with the input partitions before (True) and after (False)
        # a commit is applied
        self.crash: Callable[[list[TP], bool], None] = lambda tps, before: None

    def start(self) -> None:
        pass

    def member(self) -> Member:
        return Member(self.generation, "memory")

    def commit(self, records: Sequence[Any], offsets: Mapping[TP, int],
               reported: Any = ()) -> dict[TP, int]:
        if self.generation != self.group.generation:  # type: ignore[attr-defined]
            raise ProducerFenced(f"{self.transactional_id}: ILLEGAL_GENERATION")
        try:
            self.crash(sorted(offsets), True)
        except Exception:
            self.aborts += 1
            raise
        ends: dict[TP, int] = {}
        for r in records:
            at = self.log.append(r.topic, r.partition or 0, r.key, r.value, list(r.headers))
            ends[(r.topic, r.partition or 0)] = at + 1
        for topic, partition in ends:  # the commit marker takes an offset of its own
            self.log.append(topic, partition, None, MARKER)
        self.committed.update(offsets)
        self.commits += 1
        self.crash(sorted(offsets), False)
        return ends

    def shutdown(self) -> None:
        pass
