"""Riding out a cluster's routine events: what is retried, for how long, and what is not.

A leader election, a coordinator that moves, a broker restarting: for a few seconds
requests fail, a transaction aborts, a producer call does not return. None of that is a
reason to exit: :func:`patiently` tries again with backoff (0.5 s doubling to 10 s) for up
to the worker's broker timeout (``NDD_BROKER_TIMEOUT_S``), logging each failure once as a
WARNING. What retrying cannot mend is raised at once: a commit refused to a past member
of the group (:class:`~ndd_stream.kafka.transactions.ProducerFenced`: its partitions are
left to the rebalance), the
broker holding less than the state (``BrokerLostData``), a changed layout, a refused
permission (``TransactionError`` itself).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from ndd_stream.kafka.reads import RefetchError, passing
from ndd_stream.kafka.transactions import TransactionAborted
from ndd_stream.worker.changelog import ChangelogError

log = logging.getLogger("ndd_stream.worker")

T = TypeVar("T")

FIRST_WAIT_S = 0.5
LONGEST_WAIT_S = 10.0


def routine(exc: BaseException) -> bool:
    """Whether ``exc`` is one of a cluster's routine events, worth trying again."""
    if isinstance(exc, TransactionAborted | ChangelogError | RefetchError):
        return True
    if isinstance(exc, KafkaException):
        err = exc.args[0] if exc.args else None
        return isinstance(err, KafkaError) and passing(err)
    return False


async def patiently(what: str, attempt: Callable[[], Awaitable[T]], timeout_s: float,
                    clock: Callable[[], float] = time.monotonic) -> T:
    """``attempt()`` until it succeeds, for up to ``timeout_s``; routine failures are
    retried with backoff, the last one (or any other) is raised."""
    deadline = clock() + timeout_s
    wait = FIRST_WAIT_S
    while True:
        try:
            return await attempt()
        except Exception as exc:
            if not routine(exc) or clock() + wait > deadline:
                raise
            log.warning("%s failed (%s); again in %.1fs", what, exc, wait,
                        extra={"event": "retry"})
        await asyncio.sleep(wait)
        wait = min(LONGEST_WAIT_S, wait * 2)
