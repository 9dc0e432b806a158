"""How a transaction's failure is told apart (no broker): fenced (leave the partition),
aborted (open the partition again and redo), refused (exit); and a blocking call that never
returns is given up instead of stalling the worker."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from ndd_stream.kafka.transactions import (
    ProducerFenced,
    TransactionAborted,
    TransactionError,
    _bounded,
    _error,
)


@pytest.mark.parametrize(("code", "kind"), [
    (KafkaError._FENCED, ProducerFenced),
    (KafkaError.PRODUCER_FENCED, ProducerFenced),
    (KafkaError.INVALID_PRODUCER_EPOCH, ProducerFenced),
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
