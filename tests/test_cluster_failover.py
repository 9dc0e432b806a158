"""Broker failover under exactly-once, on a three-node Apache Kafka cluster.

The routine events of a cluster users run, while two workers decide a backlog of one
global scope in event-time order: the node leading most partitions killed (-9) and back,
the node coordinating the workers' group killed and back, a rolling restart of all three,
and a node kept down for twice the workers' broker timeout. Each run must lose nothing,
differ in nothing from ``ndd-stream dedup --event-order``, repeat nothing for a
read_committed reader, and no worker may exit by itself (``bench/failover.py`` runs the
same on the Reuters day, repeatedly).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic
from harness import brokers
from harness.scenarios import news_lines

from bench.failover import run
from ndd_stream.kafka.apache_cluster import KafkaCluster
from ndd_stream.kafka.reads import BrokerReads

pytestmark = [pytest.mark.broker,
              pytest.mark.skipif(not brokers.is_kafka(), reason="Apache Kafka's jars")]

SEED = int(os.environ.get("NDD_RELIABILITY_SEED", "20260301"))
ITEMS = 1500


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with KafkaCluster(log_dir=tmp_path_factory.mktemp("cluster")) as found:
        yield found


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", ["leader", "coordinator", "rolling", "long"])
def test_a_broker_fault_loses_repeats_and_stops_nothing(
    cluster: KafkaCluster, tmp_path: Path, fault: str
) -> None:
    lines = news_lines(ITEMS, SEED, spacing=30.0)
    result = run(cluster, tmp_path, lines, fault, faults=1, down_s=6.0, seed=SEED)
    assert result["finished"], result
    assert (result["lost"], result["differ"], result["repeated"]) == (0, 0, 0), result
    assert result["worker_exits"] == 0, result


@pytest.mark.timeout(300)
def test_committed_offsets_are_read_while_the_groups_coordinator_moves(
    cluster: KafkaCluster,
) -> None:
    """The offsets a raw partition resumes from are read while the node coordinating the
    group is stopped and started: every read answers the committed offsets or waits them
    out, none fails or reads "none" (an admin client's lookup, answered "not
    coordinator" there, crashes librdkafka 2.16)."""
    topic, group = f"coord-{uuid.uuid4().hex[:8]}", f"coord-group-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin()
    admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(30)
    tps = [(topic, 0), (topic, 1)]
    committer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                          "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)],
                     asynchronous=False)
    committer.close()
    reads = BrokerReads({"bootstrap.servers": cluster.bootstrap, "log_level": 0}, group)
    answers: list[object] = []
    stop = threading.Event()

    def keep_reading() -> None:
        while not stop.is_set():
            try:
                answers.append(reads.committed(tps))
            except KafkaException as e:
                answers.append(e)

    reader = threading.Thread(target=keep_reading)
    reader.start()
    try:
        node = cluster.node(cluster.group_coordinator(group))
        node.halt()
        time.sleep(3.0)
        node.start()
        cluster.wait_brokers(len(cluster.nodes))
    finally:
        stop.set()
        reader.join(timeout=120)
        reads.close()
    assert answers and not reader.is_alive()
    assert all(a == {(topic, 0): 5, (topic, 1): 7} for a in answers), answers[:5]
