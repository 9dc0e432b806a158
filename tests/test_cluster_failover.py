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
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import brokers
from harness.scenarios import news_lines

from bench.failover import run
from ndd_stream.kafka.apache_cluster import KafkaCluster

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
