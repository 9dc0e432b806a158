"""The three-node Apache Kafka cluster the failover tests run on (kafka/apache_cluster.py).

A KRaft quorum of three nodes on loopback: topics from ``topics apply
--replication-factor 3`` with ``min.insync.replicas=2``; kill -9 a partition's leader and
another node leads it while writes go on, the killed node comes back in sync.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from harness import brokers
from harness.kafka import consume, wait_until, worker_settings

from ndd_stream.kafka.apache_cluster import coordinator_partition, java_string_hash
from ndd_stream.kafka.topics import apply, load_for

pytestmark = [pytest.mark.broker]
needs_kafka = pytest.mark.skipif(not brokers.is_kafka(), reason="Apache Kafka's jars")


def test_coordinator_partition_is_kafkas() -> None:
    # Java: "".hashCode() == 0, "abc".hashCode() == 96354, "polygenelubricants" is MIN_VALUE
    assert java_string_hash("") == 0
    assert java_string_hash("abc") == 96354
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert coordinator_partition("polygenelubricants", 50) == 0
    assert coordinator_partition("abc", 50) == 96354 % 50
    assert java_string_hash("é") == 0xE9


@needs_kafka
@pytest.mark.timeout(300)
def test_three_nodes_survive_the_leader_killed(tmp_path: Path) -> None:
    from ndd_stream.kafka.apache_cluster import KafkaCluster

    with KafkaCluster(log_dir=tmp_path / "cluster") as cluster:
        settings = worker_settings(cluster.bootstrap, "cluster", tmp_path / "data")
        report = apply(settings, load_for(settings), replication_factor=3)
        assert not report.errors and not report.mismatches, report
        raw = settings.raw_topics[0]
        meta = cluster.admin().list_topics(raw, timeout=10).topics[raw]
        assert all(len(p.replicas) == 3 for p in meta.partitions.values())
        leader = cluster.leader(raw, 0)
        assert leader in (1, 2, 3)
        cluster.node(leader).kill9()
        assert wait_until(lambda: cluster.leader(raw, 0) not in (-1, leader), 60)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "enable.idempotence": True})
        producer.produce(raw, value=b"while one node is down", partition=0)
        assert producer.flush(30) == 0
        cluster.node(leader).start()
        assert wait_until(lambda: cluster.in_sync([raw]), 90)
        (record,) = consume(cluster.bootstrap, raw, n=1, timeout=30)
        assert record.value == b"while one node is down"
        started = time.monotonic()
        cluster.node(leader).halt()  # a controlled shutdown moves leadership at once
        assert cluster.leader(raw, 0) != leader
        assert time.monotonic() - started < 60
