"""A consumer that stopped fetching is noticed, restarted, and shown on /health.

A partition *waits* when the consumer's fetch position is short of the partition's end (its
last stable offset under read_committed, else its high watermark, from the last fetch).
When records wait and no record at all has been delivered for ``NDD_FETCH_STALL_S`` while no
batch is being handled, the fetch has stopped (a fetcher left waiting on a broker that
restarted): each waiting partition is sought to the offset after its last delivered
record, which makes the consumer fetch it anew, and /health answers 503 until records flow
again. A batch handled for that long (a
commit retried while a coordinator moves) is not a stopped fetch; /health says so too.

Faust's consumer asks its fetcher only for the partitions in its own *active* set, from
which it removes a partition while the partition is paused for a rebalance or while an
agent's buffer is full, and which its rebalance and buffer callbacks fill again; and its
streams drop every record while its flow control is suspended, which only the end of a
rebalance's recovery lifts (skipped when a newer rebalance began meanwhile). When the fetch
has stopped, :func:`unblock` puts every waiting partition back into that set (Faust's own
``resume_partitions`` and ``on_buffer_drop``) and resumes a flow left stopped, saying
what it did. A rebalance that is really under way is not held up by this: its callbacks pause
and resume partitions again as they run. A fetch still stopped after
:data:`GIVE_UP_AFTER` such restarts ends the worker (exit code 3): a restart resumes from
the committed state, where an endless silence would hold the partitions from every
other worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from faust.types import TP as TopicPartition

log = logging.getLogger("ndd_stream.worker")

TP = tuple[str, int]

POSITION_TIMEOUT_S = 5.0
"""How long the watch waits for the consumer to say where it is in a partition."""
GIVE_UP_AFTER = 5
"""Restarts of a stopped fetch, one ``NDD_FETCH_STALL_S`` apart, before the worker exits."""


class StallWatch:
    """What the agents delivered and handled, and whether the fetch has stopped."""

    def __init__(self, stall_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_s = stall_s
        self.clock = clock
        self.last_offset: dict[TP, int] = {}
        self.last_delivery = clock()
        self.handling_since: float | None = None
        self.stalled_since: float | None = None
        self.restarts = 0

    def delivered(self, messages: Iterable[Any]) -> None:
        """A batch arrived: records flow."""
        heard = False
        for m in messages:
            tp = (m.topic, m.partition)
            self.last_offset[tp] = max(m.offset, self.last_offset.get(tp, -1))
            heard = True
        if heard:  # one clock reading a batch, not one an item
            self.last_delivery = self.clock()
            self.stalled_since = None

    @contextmanager
    def handling(self) -> Iterator[None]:
        """While a batch is handled, silence is the handler's, not the fetch's."""
        self.handling_since = self.clock()
        try:
            yield
        finally:
            self.handling_since = None
            self.last_delivery = self.clock()

    def silent(self) -> bool:
        """Whether nothing was delivered for ``stall_s`` while no batch was handled."""
        return (self.handling_since is None
                and self.clock() - self.last_delivery >= self.stall_s)

    def stopped(self, behind: Mapping[TP, tuple[int, int]]) -> dict[TP, int]:
        """The partitions to fetch anew when the fetch has stopped (else none).

        ``behind``: each owned partition whose fetch position is short of its end, as
        ``(position, end)`` (the end a read_committed reader can reach: a transaction's
        marker after the last record is no record waiting). Each is fetched anew from the
        record after the last one delivered (at most from its position)."""
        if not self.silent():
            return {}
        if not behind:  # at the end of every partition: quiet, not stalled
            self.stalled_since = None
            return {}
        now = self.clock()
        found = {tp: min(position, self.last_offset.get(tp, position - 1) + 1)
                 for tp, (position, _) in behind.items()}
        if self.stalled_since is None:
            self.stalled_since = self.last_delivery
            self.restarts = 0
        self.restarts += 1
        log.warning("no record delivered for %.0fs while %d partition(s) wait: fetching "
                    "them anew from %s", now - self.last_delivery, len(found),
                    ", ".join(f"{t}[{p}]@{o} (end {behind[(t, p)][1]})"
                              for (t, p), o in sorted(found.items())),
                    extra={"event": "fetch_stalled"})
        self.last_delivery = now  # the next restart, if needed, after another wait
        return found

    def hopeless(self) -> bool:
        """Whether the fetch stayed stopped through :data:`GIVE_UP_AFTER` restarts."""
        return self.stalled_since is not None and self.restarts >= GIVE_UP_AFTER

    def problem(self) -> str | None:
        """What /health reports (None: healthy)."""
        now = self.clock()
        if self.stalled_since is not None:
            return f"fetch stalled: no record delivered for {now - self.stalled_since:.0f}s"
        if self.handling_since is not None and now - self.handling_since > self.stall_s:
            return f"busy: one batch handled for {now - self.handling_since:.0f}s"
        return None


def unblock(app: Any, tps: Iterable[TP]) -> list[str]:
    """Put ``tps`` back where Faust's consumer fetches from and delivers (its public
    ``resume_partitions`` and ``on_buffer_drop``: no longer paused, nor held for a full
    agent buffer); what was done, for the log."""
    consumer, found = app.consumer, []
    assigned = {(t.topic, t.partition): t for t in consumer.assignment()}
    waiting = [assigned[tp] for tp in tps if tp in assigned]
    if waiting:
        consumer.resume_partitions(waiting)
        for tp in waiting:
            consumer.on_buffer_drop(tp)
        found.append("fetching " + ", ".join(f"{tp.topic}[{tp.partition}]"
                                             for tp in sorted(waiting)))
    if not consumer.flow_active:
        consumer.resume_flow()
        found.append("consumer flow stopped")
    if not app.flow_control.is_active():
        app.flow_control.resume()
        found.append("flow control suspended")
    if found and getattr(app, "rebalancing", False):
        found.append("a rebalance marked as under way")
    return found


async def restart_stopped_fetch(app: Any, watch: StallWatch,
                                fatal: Callable[[str], None]) -> None:
    """The worker's timer: once ``watch`` is silent, the owned partitions whose fetch
    position is short of their end are unblocked and fetched anew; through every restart,
    the worker ends (``fatal``)."""
    if not watch.silent():
        return
    consumer = app.consumer
    behind: dict[TP, tuple[int, int]] = {}
    for tp in consumer.assignment():
        end = _end(app, tp)
        position = await _position(consumer, tp) if end is not None else None
        if position is not None and end is not None and position < end:
            behind[(tp.topic, tp.partition)] = (int(position), end)
    stopped = watch.stopped(behind)
    if not stopped:
        return
    if watch.hopeless():
        fatal(f"{watch.problem()}, through {watch.restarts} restarts of the fetch; exiting "
              "so that a restart resumes from the committed state")
    found = unblock(app, stopped)
    if found:
        log.warning("the consumer did not fetch: %s; resumed", ", ".join(found),
                    extra={"event": "fetch_unblocked"})
    for (topic, partition), offset in stopped.items():
        await consumer.seek(TopicPartition(topic, partition), offset)


async def _position(consumer: Any, tp: Any) -> int | None:
    """The consumer's fetch position in ``tp`` (None: not known within a few seconds)."""
    try:
        position = await asyncio.wait_for(consumer.position(tp), POSITION_TIMEOUT_S)
    except Exception:  # unknown, or not within the timeout: no evidence either way
        return None
    return None if position is None else int(position)


def _end(app: Any, tp: Any) -> int | None:
    """Where this worker's reads of a partition end, from the last fetch (None: unknown):
    Faust's ``highwater``, the last stable offset where the consumer reads committed
    records (``runtime._Consumer``), else the high watermark."""
    try:
        high = app.consumer.highwater(tp)
    except Exception:  # not fetched yet
        return None
    return None if high is None else int(high)
