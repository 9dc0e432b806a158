"""The embedded Tansu broker: starts, answers, pauses, resumes and stops within bounds."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from harness.kafka import HANG_S, Names, Outgoing, TopicFactory, consume, produce

from ndd_stream.kafka.broker import BrokerBinaryNotFound, BrokerError, EmbeddedBroker, free_port

pytestmark = pytest.mark.broker


def test_session_broker_round_trip(
    broker: EmbeddedBroker, names: Names, make_topics: TopicFactory
) -> None:
    topic = names.topic()
    make_topics(topic, partitions=2)
    produce(
        broker.bootstrap,
        topic,
        [Outgoing(b"v%d" % i, key=b"k%d" % i, headers=[("h", b"x")]) for i in range(5)],
    )
    records = consume(broker.bootstrap, topic, n=5, timeout=15)
    assert sorted(r.value for r in records if r.value) == [b"v%d" % i for i in range(5)]
    assert all(r.header("h") == b"x" for r in records)
    assert broker.bootstrap == f"127.0.0.1:{broker.port}"


def test_start_stop_pause_resume(tmp_path: Path) -> None:
    with EmbeddedBroker(log_dir=tmp_path, stop_timeout=5) as own:
        assert own.is_running()
        os.kill(own.pid, 0)  # exists
        assert own.log_path is not None and own.log_path.exists()

        own.pause()
        assert own.paused
        producer = Producer(
            {"bootstrap.servers": own.bootstrap, "message.timeout.ms": 1500, "linger.ms": 0}
        )
        producer.produce("paused-topic", value=b"x")
        started = time.monotonic()
        assert producer.flush(2.5) == 0  # the delivery times out (a failure), it never hangs
        assert time.monotonic() - started < HANG_S

        own.resume()
        assert not own.paused
        AdminClient({"bootstrap.servers": own.bootstrap}).list_topics(timeout=10)
        pid = own.pid
        own.pause()  # stop() must also work on a paused broker
    assert not own.is_running()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_missing_binary_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BrokerBinaryNotFound, match="not an executable"):
        EmbeddedBroker(binary=str(tmp_path / "no-such-tansu")).start()


def test_broker_that_cannot_listen_fails_fast(tmp_path: Path) -> None:
    fake = tmp_path / "fake-tansu"
    fake.write_text("#!/bin/sh\necho 'cannot bind' >&2\nexit 3\n")
    fake.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(BrokerError, match="exited during startup"):
        EmbeddedBroker(binary=str(fake), port=free_port(), start_timeout=10).start()
    assert time.monotonic() - started < HANG_S
