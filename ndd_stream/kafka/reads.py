"""Reading straight from the broker, past Faust's consumer: one reader per worker.

Faust's consumer is only trusted to deliver records, not to deliver all of them: around a
rebalance it can deliver records fetched before it (prefetched, newer than the committed
offset) after it has rewound to the committed offset, then drop the re-fetched older ones
as already read, and its next commit can pass them. A rewind through Faust does not help:
its read offset is raised again by the next prefetched record. So the worker reads skipped
ranges itself (``worker/delivery.py``) and reads its changelog (``worker/changelog.py``)
through :class:`BrokerReads`: one librdkafka consumer, created on its first read, that
joins no group and commits nothing. The same consumer looks up the group's committed
offsets (:meth:`BrokerReads.committed`); one producer writes the changelog sentinels
(at-least-once) and asks for the cluster's metadata (:meth:`BrokerReads.list_topics`).

The worker's code needs only the two primitives of :class:`Log` (``append``, ``records``);
the unit tests give it an in-memory log instead.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, cast

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

UNSTABLE_RETRY_S = 30.0
"""How long an offset lookup waits out a transaction still committing offsets."""


class Metadata(Protocol):
    """A client that answers with the cluster's metadata (:class:`BrokerReads`)."""

    def list_topics(self, timeout: float) -> Any: ...


class RefetchError(RuntimeError):
    """A range could not be read within the time limit."""


@dataclass(frozen=True)
class Fetched:
    """A record read directly, shaped like the Faust message the agents handle."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: float | None  # seconds, like faust's Message.timestamp


class Log(ABC):
    """The two things the worker does to a partition past Faust: append one record, and
    read from an offset on. Kafka here (:class:`BrokerReads`), lists in the unit tests."""

    @abstractmethod
    def append(self, topic: str, partition: int, key: bytes, value: bytes) -> int | None:
        """Write one record; its offset (None if it was not delivered in time)."""

    @abstractmethod
    def records(self, topic: str, partition: int, start: int, timeout_s: float,
                error: type[Exception]) -> AbstractContextManager[Iterator[Fetched]]:
        """``topic[partition]`` from ``start`` on (later if retention removed the first
        ones), for as long as the caller iterates, at most ``timeout_s`` seconds; a read
        that fails or times out raises ``error``."""

    def read_to_end(self, topic: str, partition: int, start: int, timeout_s: float,
                    error: type[Exception]) -> tuple[list[Fetched], int]:
        """The committed records of ``topic[partition]`` from ``start`` to its last stable
        offset (``read_committed``: offsets may jump over compacted records, transaction
        markers and aborted records), and that offset. Only where the broker reports end
        offsets correctly (Apache Kafka; not the embedded demo broker)."""
        raise NotImplementedError

    def log_start(self, topic: str, partition: int, timeout_s: float) -> int:
        """The first offset ``topic[partition]`` still holds (0 where nothing was deleted
        or the log cannot tell)."""
        return 0


def read_range(log: Log, topic: str, partition: int, start: int, end: int,
               timeout_s: float = 60.0) -> list[Fetched]:
    """Records ``start <= offset < end`` of ``topic[partition]``, in order. Starts later
    than ``start`` when retention removed the first ones (the caller sees the jump)."""
    out: list[Fetched] = []
    if end <= start:
        return out
    with log.records(topic, partition, start, timeout_s, RefetchError) as records:
        for record in records:
            if record.offset >= end:
                break
            out.append(record)
            if record.offset == end - 1:
                break
    return out


class BrokerReads(Log):
    """The worker's direct reads and sentinel writes, and the group's committed offsets.

    One consumer for the worker's life, in the app's group (for OffsetFetch) but never
    joining it (``assign``) and never committing; one producer for changelog sentinels.
    Calls come from executor threads of both agents, so reads take turns on a lock. The
    committed offsets do not wait behind a read (a restore's read can take minutes): they
    use the consumer without moving its assignment, under a lock of their own that only
    :meth:`close` also takes.
    """

    def __init__(self, conf: dict[str, object], group: str) -> None:
        self.conf = conf
        self.group = group
        self._lock = threading.Lock()  # reads: assign, then poll
        self._committed_lock = threading.Lock()
        self._creating = threading.Lock()
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._closed = False

    def _get(self) -> Consumer:
        with self._creating:
            if self._consumer is None:
                self._consumer = Consumer({
                    **self.conf, "group.id": self.group, "enable.auto.commit": False,
                    "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
                    "enable.partition.eof": False, "isolation.level": "read_committed"})
            return self._consumer

    def list_topics(self, timeout: float) -> Any:
        """The cluster's metadata (its id, topics and partitions), through the producer of
        the sentinels: the worker keeps no admin client for it. Not through the consumer,
        where it waits behind an offset lookup or a read (a minute and more when no
        broker answers), nor under the reads' lock. Raises KafkaException (no answer)."""
        return self._writer().list_topics(timeout=timeout)

    def _writer(self) -> Producer:
        with self._creating:
            if self._closed:
                raise RuntimeError("the worker's reads are closed")
            if self._producer is None:
                self._producer = Producer({**self.conf, "linger.ms": 0})
            return self._producer

    def close(self) -> None:
        with self._lock, self._committed_lock, self._creating:
            self._closed = True
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
            if self._producer is not None:
                self._producer.flush(5.0)
                self._producer = None

    def committed(self, tps: Sequence[tuple[str, int]],
                  timeout_s: float = 10.0) -> dict[tuple[str, int], int]:
        """The group's committed offsets of ``tps``, negative where there is none. Stable
        offsets only (the consumer reads ``read_committed``): an offset a transaction is
        still committing, or a coordinator moving, is waited out for up to
        :data:`UNSTABLE_RETRY_S`. Raises KafkaException. Blocking.

        Through the consumer, not an admin client: an admin client's OffsetFetch answered
        "not coordinator" (the group's coordinator moving, as in a rolling restart of the
        brokers) crashes librdkafka 2.16 (a group handle it does not have; librdkafka
        issue 5040)."""
        if not tps:
            return {}
        deadline = time.monotonic() + UNSTABLE_RETRY_S
        while True:
            try:
                with self._committed_lock:
                    found = self._get().committed(
                        [TopicPartition(t, p) for t, p in tps], timeout=timeout_s)
                errors = [tp.error for tp in found if tp.error is not None]
            except KafkaException as e:
                found, errors = [], [e.args[0]]
            waiting = [e for e in errors if isinstance(e, KafkaError) and (
                e.code() == KafkaError.UNSTABLE_OFFSET_COMMIT or passing(e))]
            if waiting and len(waiting) == len(errors) and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            if errors:  # never an offset of an unknown partition as "none"
                raise KafkaException(errors[0])
            return {(tp.topic, tp.partition): tp.offset for tp in found}

    def append(self, topic: str, partition: int, key: bytes, value: bytes) -> int | None:
        delivered: list[int] = []

        def on_delivery(err: object, msg: Any) -> None:
            if err is None and msg.offset() is not None:
                delivered.append(int(msg.offset()))

        with self._lock:
            producer = self._writer()
            producer.produce(topic, key=key, value=value, partition=partition,
                             on_delivery=on_delivery)
            producer.flush(30.0)
        return delivered[0] if delivered else None

    @contextmanager
    def records(self, topic: str, partition: int, start: int, timeout_s: float,
                error: type[Exception]) -> Iterator[Iterator[Fetched]]:
        with self._lock:
            consumer = self._get()
            consumer.assign([TopicPartition(topic, partition, max(start, 0))])
            try:
                yield _poll(consumer, topic, partition, start, timeout_s, error)
            except KafkaException as exc:
                raise error(f"{topic}[{partition}]: {exc}") from exc
            finally:
                consumer.unassign()


    def log_start(self, topic: str, partition: int, timeout_s: float) -> int:
        with self._lock:
            low, _ = watermarks(self._get(), topic, partition, time.monotonic() + timeout_s)
        return low

    def read_to_end(self, topic: str, partition: int, start: int, timeout_s: float,
                    error: type[Exception]) -> tuple[list[Fetched], int]:
        # a consumer of its own: end-of-partition events on, and the shared one stays free.
        # A fetch at the end waits at most 10 ms for records (librdkafka: 500): the end of a
        # log written in transactions is a marker, not a record, and its end-of-partition
        # event comes with the first fetch that finds nothing after it
        consumer = Consumer({
            **self.conf, "group.id": self.group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "enable.partition.eof": True,
            "isolation.level": "read_committed", "fetch.wait.max.ms": 10})
        try:
            deadline = time.monotonic() + timeout_s
            _, end = watermarks(consumer, topic, partition, deadline)
            out: list[Fetched] = []
            if start >= end:
                return out, end
            consumer.assign([TopicPartition(topic, partition, max(start, 0))])
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if int(msg.offset() or 0) >= end:
                            return out, end
                        continue
                    if passing(err):  # a leader moving, a broker restarting
                        continue
                    raise error(f"{topic}[{partition}]: {err}")
                fetched = _fetched(msg, topic, partition)
                if fetched.offset >= end:
                    return out, end
                out.append(fetched)
                if fetched.offset == end - 1:
                    return out, end
            raise error(f"{topic}[{partition}]: not read to offset {end} within "
                        f"{timeout_s:.0f}s from offset {start} ({len(out)} records read)")
        except KafkaException as exc:
            raise error(f"{topic}[{partition}]: {exc}") from exc
        finally:
            consumer.close()


def passing(err: KafkaError) -> bool:
    """Whether a client error is one of a cluster's routine events (a leader or coordinator
    that moved, a broker restarting, a request that timed out): waited out, not fatal."""
    if err.fatal():
        return False
    return bool(err.retriable()) or err.code() in _PASSING


_PASSING = frozenset({
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
    KafkaError._WAIT_COORD,
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.NOT_ENOUGH_REPLICAS,
})
# not an unknown topic or partition: a topic deleted (a broker restarted empty) fails soon
_UNKNOWN = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART})
UNKNOWN_WAIT_S = 30.0
"""How long a partition missing from the client's metadata (a leader being elected) is
waited for by a watermark lookup before it counts as gone."""


def watermarks(consumer: Consumer, topic: str, partition: int, deadline: float
               ) -> tuple[int, int]:
    """The partition's log start and end (ListOffsets), asked again while the cluster's
    routine events last, until ``deadline`` (``time.monotonic()``). Raises KafkaException."""
    unknown_until = time.monotonic() + UNKNOWN_WAIT_S
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition),
                timeout=max(1.0, min(10.0, deadline - time.monotonic())), cached=False)
            return int(low), int(high)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            unknown = (isinstance(err, KafkaError) and err.code() in _UNKNOWN
                       and time.monotonic() < unknown_until)
            if (not isinstance(err, KafkaError) or not (passing(err) or unknown)
                    or time.monotonic() >= deadline):
                raise
            time.sleep(0.5)


def _fetched(msg: Any, topic: str, partition: int) -> Fetched:
    ts_type, ts = msg.timestamp()
    raw_headers = cast(list[tuple[str, Any]], msg.headers() or [])
    headers = [(str(k), v if isinstance(v, bytes) else (v or "").encode())
               for k, v in raw_headers]
    return Fetched(topic, partition, int(msg.offset() or 0), msg.key(), msg.value(), headers,
                   ts / 1000 if ts_type and ts >= 0 else None)


def _poll(consumer: Consumer, topic: str, partition: int, start: int, timeout_s: float,
          error: type[Exception]) -> Iterator[Fetched]:
    """The one read loop of the worker's direct reads."""
    deadline = time.monotonic() + timeout_s
    read = 0
    while True:
        if time.monotonic() > deadline:
            raise error(f"{topic}[{partition}]: not read to the end within "
                        f"{timeout_s:.0f}s from offset {start} ({read} records read)")
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        problem = msg.error()
        if problem is not None:
            if passing(problem):  # a leader moving, a broker restarting
                continue
            raise error(f"{topic}[{partition}]: {problem}")
        offset = int(msg.offset() or 0)
        if msg.topic() != topic or msg.partition() != partition or offset < start:
            continue  # left over from an earlier read
        read += 1
        yield _fetched(msg, topic, partition)
