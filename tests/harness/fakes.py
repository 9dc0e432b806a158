"""In-memory fakes for unit tests of the worker's logic without a broker.

:class:`MemoryLog` is the decider pool's view of Kafka (a ``kafka.reads.Log``: ranges and
the changelog are read by the same code as against Kafka) plus ``send`` (the producer),
over plain lists. Retention can be simulated with ``delete_before``.

:class:`MemoryTransactions` adds what exactly-once needs (``kafka/transactions.py``): a
producer per input partition whose records become visible only when its transaction
commits, with the input offsets committed alongside, a commit marker taking an offset as
Kafka's do (read_committed readers skip it), and fencing of a previous holder by the
next ``open``. Crash-and-resume cases of the committer run on it in milliseconds. Kafka
itself is never mocked in the broker tests, which run the same code for real.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ndd_stream.kafka.reads import Fetched, Log
from ndd_stream.kafka.transactions import (
    TP,
    PartitionTransactions,
    ProducerFenced,
    TransactionError,
    Transactions,
)
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


class MemoryTransactions(Transactions):
    """Transactional producers by input partition, over a :class:`MemoryLog`."""

    def __init__(self, log: MemoryLog) -> None:  # no Kafka client: nothing of the parent
        self.log = log
        self.committed: dict[TP, int] = {}  # input partition -> committed offset
        self.epochs: dict[TP, int] = {}
        self._open = {}  # type: ignore[var-annotated]
        self.commits = 0
        # a test's kill: called before (True) and after (False) a commit is applied
        self.crash: Callable[[TP, bool], None] = lambda tp, before: None

    def open(self, tp: TP) -> PartitionTransactions:
        found = self._open.get(tp)
        if found is None:
            self.epochs[tp] = self.epochs.get(tp, 0) + 1  # fences the previous holder
            found = self._open[tp] = MemoryPartitionTransactions(self, tp, self.epochs[tp])
        return found  # type: ignore[no-any-return]

    def get(self, tp: TP) -> PartitionTransactions:
        found = self._open.get(tp)
        if found is None:
            raise TransactionError(f"{tp}: no transactional producer open")
        return found  # type: ignore[no-any-return]

    def close(self, tps: list[TP] | None = None) -> None:
        for tp in list(self._open) if tps is None else tps:
            self._open.pop(tp, None)

    def shutdown(self) -> None:
        self.close()


class MemoryPartitionTransactions(PartitionTransactions):
    """One input partition's producer: records are held until the commit."""

    def __init__(self, txns: MemoryTransactions, tp: TP, epoch: int) -> None:
        self.txns, self.tp, self.epoch = txns, tp, epoch
        self.transactional_id = f"{tp[0]}-{tp[1]}"
        self.records: list[tuple[str, int, bytes | None, bytes | None, list[Any]]] = []

    def produce(self, topic: str, key: bytes | None, value: bytes | None,
                partition: int | None, headers: Any) -> None:
        self.records.append((topic, partition or 0, key, value, list(headers)))

    def produce_all(self, records: Sequence[Any], reported: str | None = None) -> None:
        if self.txns.epochs[self.tp] != self.epoch:  # as the client, once it knows
            raise ProducerFenced(f"{self.transactional_id}: produce: fenced by a newer owner")
        for r in records:
            self.produce(r.topic, r.key, r.value, r.partition, r.headers)

    def commit(self, offsets: Mapping[TP, int]) -> dict[TP, int]:
        records, self.records = self.records, []
        if self.txns.epochs[self.tp] != self.epoch:
            raise ProducerFenced(f"{self.transactional_id}: fenced by a newer owner")
        self.txns.crash(self.tp, True)
        ends: dict[TP, int] = {}
        for topic, partition, key, value, headers in records:
            ends[(topic, partition)] = self.txns.log.append(topic, partition, key, value,
                                                            headers) + 1
        for topic, partition in ends:  # the commit marker takes an offset of its own
            self.txns.log.append(topic, partition, None, MARKER)
        self.txns.committed.update(offsets)
        self.txns.commits += 1
        self.txns.crash(self.tp, False)
        return ends

    def close(self) -> None:
        self.records = []
