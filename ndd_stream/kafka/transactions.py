"""Kafka transactions under ``NDD_GUARANTEE=exactly-once``: one producer per worker.

The one place where the worker produces through a client other than Faust's. A worker has
one confluent-kafka producer, ``transactional.id = <app_id>-worker-<id>``, whatever
partitions and agents it has; the id is kept in the worker's state directory
(``worker-id``), so that a worker restarted on its state registers the same id and aborts
at once whatever transaction it left open. One piece of an agent's work is one
transaction: the piece's outputs, its changelog records and checkpoints, and the input
offsets it reached (``send_offsets_to_transaction``), all committed or all aborted
together. Transactions run one at a time, the agents' (router, decider and, with sharded
windows, shard) taking turns, and a piece's records are held until its commit, which adds
them all: a transaction is open only during a commit. The same producer answers the
worker's metadata requests (:meth:`Transactions.list_topics`), which never wait behind a
transaction.

Fencing is by the consumer group's generation (KIP-447, Kafka Streams' ``exactly_once_v2``):
each commit carries the generation and member id of the worker's group member (Faust's
aiokafka consumer) as librdkafka's serialized group metadata (``CGMDv2``, checked at start
against the client's own, :func:`check_group_metadata`). A worker paused past its session
(a zombie) commits with a generation the group has left behind: the broker refuses it
(``ILLEGAL_GENERATION``, ``UNKNOWN_MEMBER_ID``) and nothing of the piece is committed
(:class:`ProducerFenced`: its partitions are left to the rebalance). A commit whose
offsets the broker took before the group moved on is waited out by the next owner: it
reads the partition's committed offset ``read_committed`` before anything else
(``BrokerReads.committed``: an unstable offset is retried until that transaction ends).

A worker killed with a transaction open: the transaction is open only during a commit (the
records are added at the commit), and the broker aborts it after
:data:`TRANSACTION_TIMEOUT_MS`, below the group's session timeout, so it is gone by the
time the group hands the worker's partitions to others; restarted on its state, the worker
aborts it at once. Until then ``read_committed`` readers of the partitions it wrote to wait.

Why not Faust's own ``processing_guarantee="exactly_once"``: it picks the transactional
producer by the *destination* partition (this worker's outputs are not co-partitioned with
its inputs), writes its tables before the commit, and logs and swallows transaction errors
(faust-streaming issues #517, #323 and #177 report duplicates and crashes under it). Here
every transaction error raises :class:`TransactionError`; the worker exits (code 3) and
restarts from the committed state.

Calls block (``init_transactions``, ``commit``): the worker runs them in executor threads,
never on the event loop.
"""

from __future__ import annotations

import concurrent.futures
import struct
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
    libversion,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

TP = tuple[str, int]

INIT_TIMEOUT_S = 60.0
"""``init_transactions``: the broker may first have to abort the transaction this id left
open (a worker killed mid-commit)."""
COMMIT_TIMEOUT_S = 30.0
"""Each blocking step of a commit (offsets, commit, abort) returns within this, or the
producer is given up (``TransactionAborted``): librdkafka's own timeout is not always kept
(``send_offsets_to_transaction`` can block for good once the group coordinator's broker
left the cluster's metadata, librdkafka issues 5456 and 5511)."""
TRANSACTION_TIMEOUT_MS = 10_000
"""A transaction left open (its worker killed mid-commit) is aborted by the broker after
this (plus up to the broker's ``transaction.abort.timed.out.transaction.cleanup.interval.ms``,
10 s by default): below the default session timeout (30 s), so it is gone by the time the
group hands the worker's partitions to others. A commit that takes longer is aborted by
the broker and redone (Kafka Streams' ``exactly_once_v2`` uses the same 10 s)."""


class TransactionError(RuntimeError):
    """A transaction failed: nothing of it is committed. This class itself: what retrying
    cannot mend (refused by the broker's authorizer, no transactions)."""


class TransactionAborted(TransactionError):
    """Nothing of the piece is committed, and the partition's producer is given up: a
    leader or coordinator that moved, a broker that restarted, a call that did not return.
    The partition is opened again (a new producer fences the old one, the state restores
    to what was committed) and its work redone."""


class ProducerFenced(TransactionError):
    """The consumer group moved on (this worker's generation or membership is refused: it
    was paused past its session, or a rebalance is under way): nothing of the piece is
    committed, and its partitions are left to the rebalance, which hands them out again."""


class TransactionsUnsupported(TransactionError):
    """The broker refuses transactions (the embedded demo broker)."""


_GROUP_CODES = frozenset({KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
                          KafkaError.FENCED_INSTANCE_ID, KafkaError.REBALANCE_IN_PROGRESS})
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
    if err.code() in _GROUP_CODES:
        return ProducerFenced(text.format("refused to a past member of the group"))
    if err.code() in _FENCED_CODES:  # this id registered again, or timed out by the broker
        return TransactionAborted(text.format("fenced"))
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


class Member(NamedTuple):
    """The worker's member of the consumer group, as its commits name it."""

    generation: int
    member_id: str
    instance_id: str | None = None


def group_metadata(group: str, member: Member) -> bytes:
    """librdkafka's serialized consumer group metadata (``CGMDv2``: generation, group,
    member and group instance ids), what ``send_offsets_to_transaction`` takes from a
    consumer of its own; here written for the aiokafka member that Faust runs."""
    instance = b"\x01" if member.instance_id is None else (
        b"\x00" + member.instance_id.encode() + b"\x00")
    return (b"CGMDv2:" + struct.pack("=i", member.generation) + group.encode() + b"\x00"
            + member.member_id.encode() + b"\x00" + instance)


def check_group_metadata(conf: Mapping[str, Any], group: str) -> None:
    """Raise :class:`TransactionError` unless :func:`group_metadata` writes what this
    librdkafka writes (for a consumer that has not joined: generation -1, no member)."""
    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    try:
        theirs = consumer.consumer_group_metadata()
    finally:
        consumer.close()
    ours = group_metadata(group, Member(-1, ""))
    if theirs != ours:
        raise TransactionError(
            f"librdkafka {libversion()[0]} writes consumer group metadata as {theirs!r}, "
            f"not {ours!r}: exactly-once cannot name the group's member in its commits")


class _Turns:
    """A lock taken in the order it was asked for. ``threading.Lock`` is not: the
    decider's commit thread, with its next piece handed over, took it back before the
    router's waiting thread woke, and the router (whose commit the decider's input waits
    for) waited for several of the decider's transactions instead of one."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._next = 0  # the next ticket handed out
        self._serving = 0  # the ticket whose turn it is

    def __enter__(self) -> None:
        with self._cond:
            ticket = self._next
            self._next += 1
            while ticket != self._serving:
                self._cond.wait()

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._serving += 1
            self._cond.notify_all()


class Transactions:
    """The worker's transactional producer: one transaction at a time, each a piece."""

    def __init__(self, conf: Mapping[str, Any], app_id: str, worker_id: str,
                 member: Callable[[], Member | None]) -> None:
        self.conf = dict(conf)
        self.group = app_id
        self.transactional_id = f"{app_id}-worker-{worker_id}"
        self._member = member
        self._lock = _Turns()  # one transaction at a time, in the order asked for
        self._making = threading.Lock()  # the producer made, dropped (also off transactions)
        self._producer: Producer | None = None
        self._ready = False  # whether ``_producer`` registered the id
        self._closed = False
        self._delivered: dict[TP, int] = {}  # destination -> highest offset delivered
        self._failed: KafkaError | None = None

    def start(self) -> None:
        """Register the id (once): aborts the transaction it left open, if any, and fences
        an earlier producer of it. Blocking."""
        with self._lock:
            self._registered()

    def list_topics(self, timeout: float) -> Any:
        """The cluster's metadata through this producer (registered or not): the worker's
        broker watch asks it, and never waits behind a transaction. Raises KafkaException
        (no answer) or RuntimeError (shut down)."""
        return self._made().list_topics(timeout=timeout)

    def _made(self) -> Producer:
        with self._making:
            if self._closed:
                raise RuntimeError(f"{self.transactional_id}: shut down")
            if self._producer is None:
                self._producer = Producer({
                    **self.conf, "transactional.id": self.transactional_id,
                    "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS})
                self._ready = False
            return self._producer

    def _registered(self) -> Producer:
        producer = self._made()
        if self._ready:
            return producer
        try:
            _bounded(producer.init_transactions, f"{self.transactional_id}: init",
                     INIT_TIMEOUT_S, INIT_TIMEOUT_S)
        except KafkaException as exc:
            self._drop(producer)
            raise _error(exc, f"{self.transactional_id}: init_transactions") from exc
        except TransactionAborted:  # no answer: a call may still be inside it
            self._drop(producer)
            raise
        self._ready = True
        return producer

    def _drop(self, producer: Producer) -> None:
        with self._making:
            if self._producer is producer:
                self._producer, self._ready = None, False

    def commit(self, records: Sequence[Any], offsets: Mapping[TP, int],
               reported: Collection[str] = ()) -> dict[TP, int]:
        """One transaction: ``records`` (each with ``topic``, ``key``, ``value``,
        ``partition`` and ``headers``) and the consumed input ``offsets`` (next offset to
        read), committed for the group's member of now. Returns, for each partition of the
        ``reported`` topics written to, the offset after its last record. Any failure
        aborts what can be aborted and raises :class:`TransactionError`; a producer left in
        doubt is replaced (the next registers the id again). Blocking."""
        member = self._member()
        if member is None or member.generation < 0 or not member.member_id:
            # never a commit without a generation: the broker would take it from a zombie
            raise ProducerFenced(f"{self.transactional_id}: not a member of the consumer "
                                 "group now (a rebalance is under way)")
        with self._lock:
            producer = self._registered()
            try:
                return self._commit(producer, member, records, offsets, reported)
            except TransactionAborted:
                self._give_up()  # a call may still be inside: a new producer fences it
                raise
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                fenced = isinstance(err, KafkaError) and (
                    err.code() in _FENCED_CODES or err.fatal())
                if fenced or not self._abort(producer):
                    self._give_up()
                raise _error(exc, f"{self.transactional_id}: commit") from exc

    def _commit(self, producer: Producer, member: Member, records: Sequence[Any],
                offsets: Mapping[TP, int], reported: Collection[str]) -> dict[TP, int]:
        self._delivered, self._failed = {}, None
        producer.begin_transaction()
        self._produce(producer, records, reported)
        if offsets:
            self._call(producer.send_offsets_to_transaction, "send offsets",
                       [TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                       group_metadata(self.group, member))
        self._call(producer.commit_transaction, "commit")
        if self._failed is not None:  # never after a successful commit; kept as a guard
            raise TransactionError(f"{self.transactional_id}: a record was not delivered: "
                                   f"{self._failed}")
        return {tp: offset + 1 for tp, offset in self._delivered.items()}

    def _produce(self, producer: Producer, records: Sequence[Any],
                 reported: Collection[str]) -> None:
        """Every record in one go, a delivery report asked for the last record to each
        partition of the ``reported`` topics only: a transaction's records to a partition
        are delivered in order, so its offset is where the partition ends."""
        last: dict[TP, int] = {}
        if reported:
            for i, r in enumerate(records):
                if r.topic in reported:
                    last[(r.topic, r.partition)] = i
        ask = set(last.values())
        produce = producer.produce
        for i, r in enumerate(records):
            kwargs: dict[str, Any] = {"key": r.key, "value": r.value, "headers": r.headers}
            if r.partition is not None:
                kwargs["partition"] = r.partition
            if i in ask:
                kwargs["on_delivery"] = self._on_delivery
            while True:
                try:
                    produce(r.topic, **kwargs)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.05)
        producer.poll(0)

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._failed = err
            return
        offset = msg.offset()
        if offset is not None and offset >= 0:
            tp = (str(msg.topic()), int(msg.partition()))
            self._delivered[tp] = max(self._delivered.get(tp, -1), int(offset))

    def _call(self, call: Any, what: str, *args: Any) -> Any:
        return _bounded(call, f"{self.transactional_id}: {what}", COMMIT_TIMEOUT_S, *args,
                        COMMIT_TIMEOUT_S)

    def _abort(self, producer: Producer) -> bool:
        """Abort the open transaction; False when the producer cannot be used again."""
        try:
            self._call(producer.abort_transaction, "abort")
        except TransactionAborted:  # a call still inside
            return False
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            return not (isinstance(err, KafkaError) and err.fatal())
        return True

    def _give_up(self) -> None:
        """Never use the producer again: the next commit registers the id anew (which
        fences this one, a call perhaps still inside it). Not flushed: nothing of an
        aborted transaction needs to arrive."""
        with self._making:
            self._producer, self._ready = None, False

    def shutdown(self) -> None:
        """Drop the producer (no transaction is open between commits)."""
        with self._lock, self._making:
            self._closed = True
            if self._producer is not None:
                self._producer.flush(5.0)
                self._producer, self._ready = None, False


TRANSACTION_RETRY_BACKOFF_MS = 10
"""The transactional producers' first retry backoff (librdkafka's default: 100 ms). A
partition's next transaction starts as soon as its last one commits, while the broker is
still writing that one's markers: the broker answers the new transaction's first requests
(adding partitions, adding offsets) "concurrent transactions", and each is retried after
this backoff. At 100 ms that retry was most of a commit: pieces of 130 records back to
back took 90-103 ms each on Apache Kafka 4.3.1 on one node, 14-19 ms at 10
(bench/txn_latency.py, docs/BENCHMARK.md). Later retries of a
request still back off exponentially, up to ``retry.backoff.max.ms`` (1 s)."""

TRANSACTIONAL = {"retry.backoff.ms": TRANSACTION_RETRY_BACKOFF_MS,
                 "enable.sparse.connections": False}
"""librdkafka settings of every transactional producer. Connections to every broker at
once: with librdkafka's default (sparse, a broker connected when first needed) a new
producer knows only its bootstrap connection when it looks for its transaction
coordinator, finds "no brokers available for transactions", and asks again on its
coordinator timer, 500 ms later; ``init_transactions`` then took ~0.51 s instead of
~0.01 s (Apache Kafka 4.3.1, one node), in the worker's start twice (the pre-flight
probe and the worker's producer)."""


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
    producer = Producer({**conf, **TRANSACTIONAL,
                         "transactional.id": f"{app_id}-probe-{uuid.uuid4().hex}",
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
