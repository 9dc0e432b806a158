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
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka

from ndd_stream.kafka.acls import transactions_denied
from ndd_stream.kafka.config import librdkafka_config
from ndd_stream.kafka.transactions import (
    TP,
    TransactionError,
    Transactions,
    TransactionsUnsupported,
    check_transactions,
)
from ndd_stream.settings import Settings
from ndd_stream.state.codec import Checkpoint
from ndd_stream.worker.deciding import StatefulPartition
from ndd_stream.worker.inorder import InOrder, Message
from ndd_stream.worker.logs import json_handler
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.records import OutRecord
from ndd_stream.worker.routing import producer_request_limit

log = logging.getLogger("ndd_stream.worker")


def transaction_conf(settings: Settings) -> dict[str, Any]:
    """librdkafka settings of the transactional producers (exactly-once): as Faust's
    producer (``producer_kwargs``), with a short linger so a piece's records batch."""
    request = producer_request_limit(settings.max_item_bytes)
    return librdkafka_config(settings, {
        "acks": "all", "linger.ms": 5, "message.max.bytes": request,
        "batch.size": min(settings.producer_batch_kb << 10, request)})


def can_run_guarantee(settings: Settings, changelog: str) -> bool:
    """Under exactly-once, whether the worker can run it; if not, one CRITICAL line says
    why: never a silent fall back to at-least-once."""
    if not settings.exactly_once():
        return True
    try:
        check_transactions(librdkafka_config(settings), settings.app_id, changelog)
        return True
    except TransactionsUnsupported as exc:
        reason = transactions_denied(settings, exc) or (
            f"the broker at {settings.bootstrap_servers()} has no transactions "
            f"({exc}): NDD_GUARANTEE=exactly-once needs them (Apache Kafka); set "
            "NDD_GUARANTEE=at-least-once for this broker")
    except TransactionError as exc:
        reason = (f"the broker at {settings.bootstrap_servers()} did not answer the check "
                  f"that it runs transactions ({exc}), which NDD_GUARANTEE=exactly-once "
                  "needs")
    handler = json_handler()  # Faust installs the worker's log handler only later
    log.addHandler(handler)
    try:
        log.critical("%s; exit code 3", reason, extra={"event": "fatal"})
    finally:
        handler.flush()
        log.removeHandler(handler)
    return False


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

    async def route(self, messages: Sequence[Message]) -> list[tuple[Message, OutRecord]]:
        """Forward a batch; returns what was forwarded, once committed. Raises
        TransactionError."""
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
            forwarded = []
            for m in arranged:
                tp = (m.topic, m.partition)
                record = self.routed(m)
                producers[tp].produce(record.topic, record.key, record.value,
                                      record.partition, record.headers)
                next_offsets[tp] = m.offset + 1
                forwarded.append((m, record))
            await asyncio.gather(*(loop.run_in_executor(None, producers[tp].commit, {tp: n})
                                   for tp, n in next_offsets.items()))
            return forwarded

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


async def commit_pieces(txns: Transactions,
                        pieces: Mapping[int, tuple[TP, StatefulPartition, Checkpoint]],
                        decided: int, metrics: WorkerMetrics) -> None:
    """The decider's end of a piece: per partition, its changelog records and checkpoint
    join its open transaction, which commits with the scoped offset the checkpoint reached
    (the partitions' commits run side by side); only then is RocksDB, a cache of the
    committed changelog, written. A failed commit raises (TransactionError): the worker
    exits, and restarts from what was committed."""
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    jobs = []
    for tp, decider, checkpoint in pieces.values():
        txn = txns.get(tp)
        # sharded windows: a gatherer's items now pending go to the shards in the same
        # transaction as the checkpoint that lists them
        for r in [*decider.drain_changelog(checkpoint),
                  *getattr(decider, "drain_fanout", list)()]:
            txn.produce(r.topic, r.key, r.value, r.partition, r.headers)
        jobs.append(loop.run_in_executor(None, txn.commit, {tp: checkpoint.next}))
    delivered = await asyncio.gather(*jobs)
    if jobs:
        metrics.transaction.observe(time.perf_counter() - started)
        metrics.transaction_decisions.observe(decided / len(jobs))
    for (partition, (_, decider, checkpoint)), ends in zip(pieces.items(), delivered,
                                                            strict=True):
        decider.commit(replace(checkpoint, changelog=ends.get(
            (decider.changelog_topic, partition), decider.changelog_next)))
