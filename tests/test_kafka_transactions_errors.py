"""How a transaction's failure is told apart (no broker): refused to a past member of the
group (leave the partitions to the rebalance), aborted (open the partitions again and
redo), refused (exit); a blocking call that never returns is given up instead of stalling
the worker; the group's member is named as librdkafka names it; a worker keeps its id."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from ndd_stream.kafka.reads import BrokerReads
from ndd_stream.kafka.transactions import (
    Member,
    ProducerFenced,
    TransactionAborted,
    TransactionError,
    Transactions,
    _bounded,
    _error,
    check_group_metadata,
    group_metadata,
)
from ndd_stream.worker.startup import worker_id

NOWHERE = {"bootstrap.servers": "127.0.0.1:9", "log_level": 0}


@pytest.mark.parametrize(("code", "kind"), [
    (KafkaError.ILLEGAL_GENERATION, ProducerFenced),
    (KafkaError.UNKNOWN_MEMBER_ID, ProducerFenced),
    (KafkaError.FENCED_INSTANCE_ID, ProducerFenced),
    (KafkaError._FENCED, TransactionAborted),
    (KafkaError.PRODUCER_FENCED, TransactionAborted),
    (KafkaError.INVALID_PRODUCER_EPOCH, TransactionAborted),
    (KafkaError.NOT_COORDINATOR, TransactionAborted),
    (KafkaError.COORDINATOR_NOT_AVAILABLE, TransactionAborted),
    (KafkaError._TIMED_OUT, TransactionAborted),
    (KafkaError.NOT_LEADER_FOR_PARTITION, TransactionAborted),
    (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TransactionError),
])
def test_errors_are_told_apart(code: int, kind: type[TransactionError]) -> None:
    found = _error(KafkaException(KafkaError(code)), "app-news.raw-3: commit")
    assert type(found) is kind
    assert found.args[0].startswith("app-news.raw-3: commit: ")


def test_a_call_that_never_returns_is_given_up() -> None:
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(TransactionAborted, match="no answer in 1s"):
        _bounded(release.wait, "app-news.raw-3: send offsets", 0.5, 30.0, grace_s=0.5)
    assert time.monotonic() - started < 5.0
    release.set()


def test_a_call_that_returns_or_raises_is_passed_through() -> None:
    assert _bounded(lambda x: x + 1, "add", 1.0, 41) == 42
    with pytest.raises(KafkaException):
        _bounded(lambda: (_ for _ in ()).throw(KafkaException(KafkaError(1))), "raise", 1.0)


def test_the_group_metadata_is_written_as_librdkafka_writes_it() -> None:
    check_group_metadata(NOWHERE, "news")  # generation -1, no member: raises if different
    written = group_metadata("news", Member(7, "m-1", "pod-0"))
    assert written == b"CGMDv2:" + (7).to_bytes(4, sys.byteorder) + b"news\0m-1\0\0pod-0\0"


def test_no_commit_without_a_member_of_the_group() -> None:
    """A worker whose consumer is not a member now (its generation reset by a rebalance)
    commits nothing: the broker would take a commit without a generation from a zombie."""
    txns = Transactions(NOWHERE, "news", "w", lambda: None)
    with pytest.raises(ProducerFenced, match="not a member"):
        txns.commit([], {("news.raw", 0): 1})


def test_a_worker_keeps_its_id_on_its_state(tmp_path: Path) -> None:
    made = worker_id(tmp_path / "app")
    assert len(made) == 32 and worker_id(tmp_path / "app") == made
    assert (tmp_path / "app" / "worker-id").read_text().strip() == made
    assert worker_id(tmp_path / "other") != made


def test_a_second_worker_on_one_directory_takes_another_id(tmp_path: Path) -> None:
    """Another process holds the directory's id (its lock): this one takes the next."""
    state = tmp_path / "shared"
    state.mkdir()
    (state / "worker-id").write_text("theirs\n")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time; f = open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX); "
        "print('held', flush=True); time.sleep(60)"), str(state / "worker-id")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        mine = worker_id(state)
    finally:
        holder.kill()
        holder.wait()
    assert mine not in ("", "theirs")
    assert (state / "worker-id.1").read_text().strip() == mine


def test_the_metadata_never_waits_behind_a_transaction() -> None:
    """The broker watch asks the transactional producer (registered or not) for the
    cluster's metadata: with no broker it answers within its timeout even while a
    transaction holds the producer, and after a shutdown it says so."""
    txns = Transactions({"bootstrap.servers": "127.0.0.1:1", "log_level": 0}, "app", "w",
                        lambda: None)
    with txns._lock:  # a transaction under way
        started = time.monotonic()
        with pytest.raises(KafkaException):
            txns.list_topics(timeout=1.0)
        assert time.monotonic() - started < 5.0
    txns.shutdown()
    with pytest.raises(RuntimeError):
        txns.list_topics(timeout=1.0)


def test_the_reads_metadata_never_waits_behind_a_read_or_an_offset_lookup() -> None:
    """At-least-once the broker watch asks the direct reads' producer: not their consumer,
    whose metadata request waits behind its offset lookups and reads."""
    reads = BrokerReads({"bootstrap.servers": "127.0.0.1:1", "log_level": 0}, "app")
    with reads._lock, reads._committed_lock:  # a read and an offset lookup under way
        started = time.monotonic()
        with pytest.raises(KafkaException):
            reads.list_topics(timeout=1.0)
        assert time.monotonic() - started < 5.0
    assert reads._consumer is None and reads._producer is not None
    reads.close()
    with pytest.raises(RuntimeError):
        reads.list_topics(timeout=1.0)
