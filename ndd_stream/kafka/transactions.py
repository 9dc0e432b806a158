"""Kafka transactions under ``NDD_GUARANTEE=exactly-once``: one producer per input partition.

The one place where the worker produces through a client other than Faust's. Each input
partition the worker owns (a raw partition for the router, a scoped partition for the
decider) gets a confluent-kafka producer with ``transactional.id =
<app_id>-<topic>-<partition>`` (Kafka Streams' first exactly-once design, KIP-98/KIP-129).
One piece of that partition's work is one transaction: its outputs, its changelog records
and checkpoint, and the input offset it reached (``send_offsets_to_transaction``), all
committed or all aborted together.

Why a transactional id per input partition, not one producer per worker with the group's
generation (KIP-447): the fence. The offsets are committed for the group ``app_id`` with
the metadata of a consumer that never joins it (generation -1, no member); the broker
accepts a transactional offset commit without member or generation (checked on Apache
Kafka 4.3.1 with the group's aiokafka members active). Fencing then rests on the
transactional id: the partition's next owner calls ``init_transactions()`` with the same id
before it reads the changelog, which aborts the old owner's open transaction at once and
makes any later commit of the old owner fail (``_FENCED``). A zombie (paused past its
session) therefore commits nothing for a partition it lost. One producer per worker could
be fenced by the group's generation instead: confluent-kafka takes group metadata as the
bytes its own consumer hands out, librdkafka's ``CGMDv2`` layout (generation, member id),
and written from the aiokafka member's generation and id they commit, while a stale
generation or an unknown member is refused (``ILLEGAL_GENERATION``, ``UNKNOWN_MEMBER_ID``;
checked on 4.3.1). But nobody would then abort a killed worker's open transaction: its
partitions' records stay invisible to ``read_committed`` readers, and its offsets
unstable, until the broker's ``transaction.timeout.ms`` (below) runs out; and every
partition of the worker would share each commit. The per-partition id keeps a ``kill -9``
costing one rebalance, at two connections and four threads a partition
(docs/DEPLOYMENT.md).

Why not Faust's own ``processing_guarantee="exactly_once"``: it picks the transactional
producer by the *destination* partition (this worker's outputs are not co-partitioned with
its inputs), writes its tables before the commit, and logs and swallows transaction errors
(faust-streaming issues #517, #323 and #177 report duplicates and crashes under it). Here
every transaction error raises :class:`TransactionError`; the worker exits (code 3) and
restarts from the committed state.

Calls block (``init_transactions``, ``commit``): the worker runs them in executor threads,
never on the event loop. One producer is used by one piece at a time (the pool's lock, the
router's batch), so a producer needs no lock of its own; the registry takes one.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

TP = tuple[str, int]

INIT_TIMEOUT_S = 60.0
"""``init_transactions``: the broker may first have to abort the previous owner's open
transaction (at most ``transaction.timeout.ms`` if that owner is paused)."""
COMMIT_TIMEOUT_S = 30.0
"""Each blocking step of a commit (offsets, commit, abort) returns within this, or the
producer is given up (``TransactionAborted``): librdkafka's own timeout is not always kept
(``send_offsets_to_transaction`` can block for good once the group coordinator's broker
left the cluster's metadata, librdkafka issues 5456 and 5511)."""
TRANSACTION_TIMEOUT_MS = 60_000
"""A transaction left open (its worker killed) is aborted by the broker after this; the
partition's next owner aborts it sooner, at ``init_transactions``."""


class _Record(NamedTuple):
    topic: str
    key: bytes | None
    value: bytes | None
    partition: int | None
    headers: Any


class TransactionError(RuntimeError):
    """A transaction failed: nothing of it is committed. This class itself: what retrying
    cannot mend (refused by the broker's authorizer, no transactions)."""


class TransactionAborted(TransactionError):
    """Nothing of the piece is committed, and the partition's producer is given up: a
    leader or coordinator that moved, a broker that restarted, a call that did not return.
    The partition is opened again (a new producer fences the old one, the state restores
    to what was committed) and its work redone."""


class ProducerFenced(TransactionError):
    """A newer owner registered the partition's transactional id (a rebalance moved the
    partition): this worker closes the partition and leaves it to that owner."""


class TransactionsUnsupported(TransactionError):
    """The broker refuses transactions (the embedded demo broker)."""


_FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                           KafkaError.INVALID_PRODUCER_EPOCH})
_REFUSED_CODES = frozenset({KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                            KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                            KafkaError.GROUP_AUTHORIZATION_FAILED,
                            KafkaError.TOPIC_AUTHORIZATION_FAILED})


def _error(exc: KafkaException, what: str) -> TransactionError:
    err = exc.args[0] if exc.args else None
    if not isinstance(err, KafkaError):
        return TransactionAborted(f"{what}: {exc}")
    text = f"{what}: {{}}: {err.name()}: {err.str()}"
    if err.code() in _FENCED_CODES:
        return ProducerFenced(text.format("fenced by a newer owner"))
    if err.code() in _REFUSED_CODES:
        return TransactionError(text.format("refused"))
    return TransactionAborted(text.format(
        "fatal" if err.fatal() else "abortable" if err.txn_requires_abort() else "error"))


def _bounded(call: Any, what: str, timeout_s: float, *args: Any, grace_s: float = 5.0) -> Any:
    """``call(*args)`` in a thread of its own, given up (``TransactionAborted``) when it
    has not returned ``timeout_s`` + ``grace_s`` later; the stuck thread ends when its
    producer is fenced by the partition's next producer."""
    done: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(call(*args))
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name=f"ndd-txn {what}", daemon=True)
    thread.start()
    thread.join(timeout_s + grace_s)
    if thread.is_alive():
        raise TransactionAborted(f"{what}: no answer in {timeout_s + grace_s:.0f}s; the "
                                 "producer is given up")
    if failed:
        raise failed[0]
    return done[0] if done else None


class PartitionTransactions:
    """The transactional producer of one input partition."""

    def __init__(self, conf: Mapping[str, Any], transactional_id: str,
                 group_metadata: Any) -> None:
        self.transactional_id = transactional_id
        self._group = group_metadata
        self._producer = Producer({**conf, "transactional.id": transactional_id,
                                   "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS})
        self._open = False
        self._delivered: dict[TP, int] = {}  # destination -> highest offset delivered
        self._failed: KafkaError | None = None
        self._given_up = False  # a call did not return: never used again

    def init(self) -> None:
        """Register the id with the broker: fences its previous holder and aborts that
        holder's open transaction. Blocking."""
        try:
            _bounded(self._producer.init_transactions, f"{self.transactional_id}: init",
                     INIT_TIMEOUT_S, INIT_TIMEOUT_S)
        except KafkaException as exc:
            raise _error(exc, f"{self.transactional_id}: init_transactions") from exc

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._failed = err
            return
        tp = (str(msg.topic()), int(msg.partition()))
        offset = msg.offset()
        if offset is not None and offset >= 0:
            self._delivered[tp] = max(self._delivered.get(tp, -1), int(offset))

    def produce(self, topic: str, key: bytes | None, value: bytes | None,
                partition: int | None, headers: Any) -> None:
        """Add a record to the open transaction (opened on the first record)."""
        self.produce_all([_Record(topic, key, value, partition, list(headers))], topic)

    def produce_all(self, records: Sequence[Any], reported: str | None = None) -> None:
        """Add ``records`` (each with ``topic``, ``key``, ``value``, ``partition`` and
        ``headers``) to the open transaction, opened on the first record, in one go: one
        call per record and nothing else, so that the client's sender thread is woken a few
        times a batch rather than once a record. Delivery is reported (for :meth:`commit`'s
        answer) for the last record of topic ``reported`` only: a transaction's records
        to a partition are delivered in order, so its offset is the partition's end."""
        if not records:
            return
        last = next((i for i in range(len(records) - 1, -1, -1)
                     if records[i].topic == reported), -1) if reported is not None else -1
        produce = self._producer.produce
        try:
            if not self._open:
                self._producer.begin_transaction()
                self._open = True
                self._delivered = {}
            for i, r in enumerate(records):
                kwargs: dict[str, Any] = {"key": r.key, "value": r.value,
                                          "headers": r.headers}
                if r.partition is not None:
                    kwargs["partition"] = r.partition
                if i == last:
                    kwargs["on_delivery"] = self._on_delivery
                while True:
                    try:
                        produce(r.topic, **kwargs)
                        break
                    except BufferError:  # the local queue is full: let deliveries drain it
                        self._producer.poll(0.05)
            self._producer.poll(0)
        except KafkaException as exc:
            raise _error(exc, f"{self.transactional_id}: produce") from exc

    def commit(self, offsets: Mapping[TP, int]) -> dict[TP, int]:
        """Commit the open transaction (one is opened if none is) with the consumed input
        ``offsets`` (next offset to read). Returns the next offset after the last record
        delivered per destination partition (of the records whose delivery is reported:
        :meth:`produce_all`). Any failure aborts what can be aborted and
        raises :class:`TransactionError`. Blocking."""
        try:
            if not self._open:
                self._producer.begin_transaction()
                self._open = True
                self._delivered = {}
            if offsets:
                self._call(self._producer.send_offsets_to_transaction, "send offsets",
                           [TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                           self._group)
            self._call(self._producer.commit_transaction, "commit")
        except KafkaException as exc:
            self._abort()
            raise _error(exc, f"{self.transactional_id}: commit") from exc
        except TransactionAborted:
            self._given_up = True
            raise
        finally:
            self._open = False
        if self._failed is not None:  # never after a successful commit; kept as a guard
            raise TransactionError(f"{self.transactional_id}: a record was not delivered: "
                                   f"{self._failed}")
        return {tp: offset + 1 for tp, offset in self._delivered.items()}

    def _call(self, call: Any, what: str, *args: Any) -> Any:
        return _bounded(call, f"{self.transactional_id}: {what}", COMMIT_TIMEOUT_S, *args,
                        COMMIT_TIMEOUT_S)

    def _abort(self) -> None:
        # fenced or fatal: the broker aborts it (the new owner's init, or the timeout)
        try:
            self._call(self._producer.abort_transaction, "abort")
        except TransactionAborted:  # a call still inside: never touch the producer again
            self._given_up = True
        except KafkaException:
            pass

    @property
    def given_up(self) -> bool:
        """Whether a call into the producer did not return (it is never used again)."""
        return self._given_up

    def close(self) -> None:
        """Drop the producer; an open transaction is aborted (normally there is none). A
        producer given up is left alone: a call may still be inside it."""
        if self._given_up:
            return
        if self._open:
            self._abort()
            self._open = False
        self._producer.flush(5.0)


class Transactions:
    """The worker's transactional producers, by input partition."""

    def __init__(self, conf: Mapping[str, Any], app_id: str, group_conf: Mapping[str, Any]
                 ) -> None:
        self.conf = dict(conf)
        self.app_id = app_id
        self._group = group_metadata(group_conf, app_id)
        self._lock = threading.Lock()
        self._open: dict[TP, PartitionTransactions] = {}
        self._opening: dict[TP, threading.Lock] = {}

    def transactional_id(self, tp: TP) -> str:
        return f"{self.app_id}-{tp[0]}-{tp[1]}"

    def open(self, tp: TP) -> PartitionTransactions:
        """The producer of input partition ``tp``, registered (fencing its previous holder)
        if new. Blocking."""
        with self._lock:
            opening = self._opening.setdefault(tp, threading.Lock())
        with opening:  # one registration per id: a second one would fence the first
            with self._lock:
                found = self._open.get(tp)
            if found is not None:
                return found
            txn = PartitionTransactions(self.conf, self.transactional_id(tp), self._group)
            txn.init()
            with self._lock:
                self._open[tp] = txn
            return txn

    def get(self, tp: TP) -> PartitionTransactions:
        with self._lock:
            found = self._open.get(tp)
        if found is None:
            raise TransactionError(f"{tp[0]}[{tp[1]}]: no transactional producer open")
        return found

    def close(self, tps: list[TP] | None = None) -> None:
        with self._lock:
            chosen = list(self._open) if tps is None else [tp for tp in tps if tp in self._open]
            closing = [self._open.pop(tp) for tp in chosen]
        for txn in closing:
            txn.close()

    def shutdown(self) -> None:
        self.close()


def group_metadata(conf: Mapping[str, Any], group: str) -> Any:
    """The group metadata of a consumer of ``group`` that never joins it (see the module
    docstring): serialized bytes, so the consumer that made them is closed at once rather
    than held (with its threads and connections) for the worker's life."""
    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


def check_transactions(conf: Mapping[str, Any], app_id: str, topic: str,
                       timeout_s: float = 30.0) -> None:
    """Raise :class:`TransactionsUnsupported` unless the broker runs transactions for real
    (:class:`TransactionError` if it cannot tell):
    a record written in a transaction that is then aborted must stay hidden from
    read_committed readers. The embedded demo broker accepts the transaction requests (and
    even writes markers) but shows aborted records, so nothing it "aborts" is undone. The
    record goes to partition 0 of ``topic`` (the changelog, whose readers skip its key)
    and, aborted, is never read. Blocking."""
    # an id of its own: workers that start together must not fence each other's probe
    producer = Producer({**conf, "transactional.id": f"{app_id}-probe-{uuid.uuid4().hex}",
                         "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS})
    offsets: list[int] = []
    try:
        producer.init_transactions(timeout_s)
        producer.begin_transaction()
        producer.produce(topic, key=PROBE_KEY, value=b"probe", partition=0,
                         on_delivery=lambda err, msg: offsets.append(
                             -1 if err is not None else int(msg.offset() or 0)))
        producer.flush(timeout_s)
        producer.abort_transaction(timeout_s)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        raise TransactionsUnsupported(str(getattr(err, "str", lambda: err)())) from exc
    if not offsets or offsets[0] < 0:
        raise TransactionsUnsupported(f"a transactional record to {topic} was not delivered")
    if _visible(conf, app_id, topic, offsets[0], timeout_s):
        raise TransactionsUnsupported(
            f"a record of an aborted transaction ({topic}[0]@{offsets[0]}) is shown to "
            "read_committed readers")


def _visible(conf: Mapping[str, Any], app_id: str, topic: str, offset: int,
             timeout_s: float) -> bool:
    """Whether a read_committed reader gets the record at ``topic[0]@offset``.

    A transaction another producer left open below the probe (a worker killed mid-piece)
    holds the partition's last stable offset until that transaction's next owner
    registers or it times out (``TRANSACTION_TIMEOUT_MS``). The reader then sees neither
    the probe nor the end; a last stable offset at or below the probe while the records
    are there is the same answer: the broker withholds what is not committed."""
    # a fetch that finds nothing new (the aborted probe, hidden) answers at once, not
    # after the broker's default wait of 500 ms: the worker's start waits on this
    reader = Consumer({**conf, "group.id": f"{app_id}-probe", "enable.auto.commit": False,
                       "isolation.level": "read_committed", "enable.partition.eof": True,
                       "fetch.wait.max.ms": 10})
    try:
        reader.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + timeout_s
        next_look = time.monotonic() + LSO_LOOK_S
        while time.monotonic() < deadline:
            msg = reader.poll(0.5)
            if msg is not None:
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    return False
                if err is None and msg.offset() == offset:
                    return True
            if time.monotonic() >= next_look:
                next_look = time.monotonic() + LSO_LOOK_S
                if _withheld(conf, topic, offset):
                    return False
        raise TransactionError(f"{topic}[0] not read to its end in {timeout_s:.0f}s")
    finally:
        reader.close()


LSO_LOOK_S = 2.0
"""How long the probe's reader waits for its record or the end before it asks for the
last stable offset."""


def _withheld(conf: Mapping[str, Any], topic: str, offset: int) -> bool:
    """Whether ``topic[0]`` holds the record at ``offset`` (high watermark past it) while
    its last stable offset is not past it: an open transaction keeps it from
    read_committed readers."""
    tp = TopicPartition(topic, 0)
    admin = AdminClient(dict(conf))
    ends = []
    for level in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        try:
            found = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level,
                                       request_timeout=LSO_LOOK_S)
            ends.append(int(found[tp].result(timeout=2 * LSO_LOOK_S).offset))
        except (KafkaException, concurrent.futures.TimeoutError):
            return False
    high, stable = ends
    return high > offset >= stable


PROBE_KEY = b"ndd-sentinel"
"""The changelog key its readers skip (worker/changelog.py)."""
