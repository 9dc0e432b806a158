"""The worker's transactional producer on Apache Kafka: a commit names the group's member
(Faust's aiokafka consumer) and is refused for a generation the group left behind; the same
producer commits again after that; a worker restarted on its state aborts at once the
transaction it left open."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, Producer, TopicPartition
from harness import brokers
from harness.brokers import EmbeddedBroker
from harness.kafka import Names, TopicFactory

from ndd_stream.kafka.transactions import Member, ProducerFenced, Transactions
from ndd_stream.worker.records import OutRecord

needs_kafka = pytest.mark.skipif(not brokers.is_kafka(),
                                 reason="transactions need Apache Kafka's jars")


async def _member(bootstrap: str, topic: str, group: str) -> tuple[AIOKafkaConsumer, Member]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    deadline = time.monotonic() + 60
    while not consumer.assignment() and time.monotonic() < deadline:
        await consumer.getmany(timeout_ms=200)
    coordinator = consumer._coordinator
    return consumer, Member(coordinator.generation, coordinator.member_id)


def _committed_values(bootstrap: str, topic: str) -> list[bytes]:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                       "isolation.level": "read_committed", "enable.partition.eof": True,
                       "auto.offset.reset": "earliest"})
    reader.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = reader.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                break  # the end (partition EOF)
            values.append(msg.value())
    finally:
        reader.close()
    return values


def _group_offset(bootstrap: str, group: str, topic: str) -> int:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "isolation.level": "read_committed"})
    try:
        return int(reader.committed([TopicPartition(topic, 0)], timeout=20)[0].offset)
    finally:
        reader.close()


@needs_kafka
@pytest.mark.timeout(180)
def test_a_commit_is_refused_to_a_past_generation_and_the_producer_goes_on(
        broker: EmbeddedBroker, names: Names, make_topics: TopicFactory) -> None:
    source, out = names.topic("in"), names.topic("out")
    make_topics(source, out)
    group = names.app_id()
    conf = {"bootstrap.servers": broker.bootstrap}

    async def run() -> None:
        consumer, member = await _member(broker.bootstrap, source, group)
        now: list[Any] = [Member(member.generation - 1, member.member_id)]
        txns = Transactions(conf, group, "w1", lambda: now[0])
        try:
            txns.start()
            with pytest.raises(ProducerFenced, match="ILLEGAL_GENERATION"):
                txns.commit([OutRecord(out, b"k", b"stale", [], 0)], {(source, 0): 5})
            now[0] = Member(member.generation, "someone-else")
            with pytest.raises(ProducerFenced, match="UNKNOWN_MEMBER_ID"):
                txns.commit([OutRecord(out, b"k", b"stranger", [], 0)], {(source, 0): 6})
            now[0] = member
            ends = txns.commit([OutRecord(out, b"k", b"live", [], 0)], {(source, 0): 7},
                               reported={out})
        finally:
            txns.shutdown()
            await consumer.stop()
        assert _committed_values(broker.bootstrap, out) == [b"live"]
        assert set(ends) == {(out, 0)}  # where the changelog would end
        assert _group_offset(broker.bootstrap, group, source) == 7

    asyncio.run(run())


@needs_kafka
@pytest.mark.timeout(120)
def test_a_worker_restarted_on_its_state_aborts_what_it_left_open(
        broker: EmbeddedBroker, names: Names, make_topics: TopicFactory) -> None:
    """A transaction left open (the worker killed mid-commit) holds the partition's last
    stable offset; the worker started again with the same id releases it at once, not
    after the broker's transaction timeout."""
    out = names.topic("out")
    make_topics(out)
    group = names.app_id()
    conf = {"bootstrap.servers": broker.bootstrap}
    killed = Producer({**conf, "transactional.id": f"{group}-worker-w1"})
    killed.init_transactions(30)
    killed.begin_transaction()
    killed.produce(out, b"left open", partition=0)
    assert killed.flush(10) == 0
    txns = Transactions(conf, group, "w1", lambda: None)
    started = time.monotonic()
    try:
        txns.start()
        assert _committed_values(broker.bootstrap, out) == []  # read to the end: released
    finally:
        txns.shutdown()
    assert time.monotonic() - started < 8  # the transaction timeout is 10 s
