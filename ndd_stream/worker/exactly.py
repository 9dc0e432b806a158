"""The worker's side of ``NDD_GUARANTEE=exactly-once`` that touches Faust, and the router's
transactions (docs/RELIABILITY.md, "Exactly once").

Under exactly-once the committed offset of each input partition is its one position: it
moves only inside the partition's transactions (``kafka/transactions.py``). So Faust's
consumer reads ``read_committed`` (Faust chooses that only with its own exactly_once,
which this worker does not use: see the transactions module), and it never commits these
partitions: the agents take their batches without acknowledging them (``held_batches``),
and Faust commits only offsets it was acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka

from ndd_stream.kafka.transactions import TP, Transactions
from ndd_stream.worker.inorder import InOrder, Message
from ndd_stream.worker.records import OutRecord

log = logging.getLogger("ndd_stream.worker")


class _ReadCommittedThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # read before start(), where aiokafka hands it to its fetcher
        consumer._isolation_level = "read_committed"
        return consumer


class _ReadCommittedConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ReadCommittedThread(self, loop=self.loop, beacon=self.beacon)


def read_committed(app: faust.App) -> None:
    """Make ``app``'s consumer read only committed records (before the app starts)."""
    app.transport.Consumer = _ReadCommittedConsumer  # type: ignore[misc]


class TransactionalRouter:
    """Forwards each raw partition's records in transactions of its own: the routed
    records and the raw offset after them commit together, so a router that restarts (or
    loses the partition) forwards nothing twice, and a fenced one forwards nothing more."""

    def __init__(self, txns: Transactions, order: InOrder,
                 routed: Callable[[Message], OutRecord],
                 committed: Callable[[Sequence[TP]], dict[TP, int]]) -> None:
        self.txns = txns
        self.order = order
        self.routed = routed
        self.committed = committed  # the group's committed offsets (stable ones only)
        self.owned: set[TP] = set()
        # a rebalance waits for the batch in flight before it closes producers
        self.lock = asyncio.Lock()

    async def route(self, messages: Sequence[Message]) -> int:
        """Forward a batch; returns records forwarded. Raises TransactionError."""
        async with self.lock:
            loop = asyncio.get_running_loop()
            # records of a partition not (or no longer) owned are their owner's; they must
            # not move the partition's position either (it is the committed offset)
            arranged = await self.order.arrange(
                [m for m in messages if (m.topic, m.partition) in self.owned])
            tps = sorted({(m.topic, m.partition) for m in arranged})
            opened = await asyncio.gather(*(loop.run_in_executor(None, self.txns.open, tp)
                                            for tp in tps))
            producers = dict(zip(tps, opened, strict=True))
            next_offsets: dict[TP, int] = {}
            for m in arranged:
                tp = (m.topic, m.partition)
                record = self.routed(m)
                producers[tp].produce(record.topic, record.key, record.value,
                                      record.partition, record.headers)
                next_offsets[tp] = m.offset + 1
            await asyncio.gather(*(loop.run_in_executor(None, producers[tp].commit, {tp: n})
                                   for tp, n in next_offsets.items()))
            return len(arranged)

    async def assign(self, tps: Sequence[TP]) -> None:
        """The raw partitions this worker owns now: open their producers (fencing their
        previous owners, whose open transactions are then aborted) side by side, close
        the others', and go on from the committed offsets. All before a batch may run:
        a batch forwarded from Faust's own idea of the position, then rewound to an
        offset looked up before its commit, forwarded records twice."""
        loop = asyncio.get_running_loop()
        async with self.lock:
            gone = [tp for tp in self.owned if tp not in set(tps)]
            self.txns.close(gone)
            self.owned = set()
            await asyncio.gather(*(loop.run_in_executor(None, self.txns.open, tp)
                                   for tp in tps))
            committed = await loop.run_in_executor(None, self.committed, list(tps))
            for tp in tps:
                self.order.resume(tp, max(committed.get(tp, -1), 0))
            self.owned = set(tps)

    async def revoke(self, tps: Sequence[TP]) -> None:
        async with self.lock:
            self.owned.difference_update(tps)
            self.txns.close(list(tps))
