"""Apache Kafka 4.x as users run it: a KRaft cluster of three nodes on loopback.

Each node is broker and controller in one process (``ClusterNode``, an ``ApacheKafka``
with a node id and the cluster's static quorum), with replication 3 and
``min.insync.replicas=2`` everywhere, the consumer offsets and the transaction state
included: one node may be down, and every write still reaches two. ``KafkaCluster``
starts the nodes side by side (a node answers only once a quorum has formed), and kills,
stops and starts single nodes for failover tests; it names the node that leads a
partition, coordinates a consumer group or a transactional id.

``python -m ndd_stream.kafka.apache run --nodes 3`` starts one in the foreground.
"""

from __future__ import annotations

import contextlib
import signal
import time
import uuid
from pathlib import Path
from typing import Self

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from ndd_stream.kafka.apache import ApacheKafka
from ndd_stream.kafka.broker import BrokerError, free_port

TRANSACTION_STATE_PARTITIONS = 4
OFFSETS_PARTITIONS = 4


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of ``__transaction_state`` or ``__consumer_offsets`` that holds
    ``key`` (Kafka's ``Utils.abs(key.hashCode) % partitions``)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class ClusterNode(ApacheKafka):
    """One node of a ``KafkaCluster``: its ports are the cluster's to give."""

    def __init__(self, node_id: int, port: int, controller_port: int, voters: str,
                 cluster_id: str, *, heap_mb: int, log_dir: Path | None, start_timeout: float,
                 extra_properties: dict[str, str] | None) -> None:
        super().__init__(heap_mb=heap_mb, log_dir=log_dir, start_timeout=start_timeout,
                         extra_properties=extra_properties)
        self.node_id = node_id
        self._given = (port, controller_port)
        self._voters = voters
        self._cluster_id = cluster_id

    def _assign_ports(self) -> None:
        self._port, self._controller_port = self._given

    def _properties(self) -> dict[str, str]:
        props = super()._properties()
        props.pop("controller.quorum.bootstrap.servers", None)
        replicated = {
            "node.id": str(self.node_id),
            "controller.quorum.voters": self._voters,
            "default.replication.factor": "3",
            "min.insync.replicas": "2",
            "offsets.topic.replication.factor": "3",
            "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "transaction.state.log.num.partitions": str(TRANSACTION_STATE_PARTITIONS),
            "share.coordinator.state.topic.replication.factor": "3",
            "share.coordinator.state.topic.min.isr": "2",
            "unclean.leader.election.enable": "false",
        }
        props.update(replicated)
        return props

    def _format_args(self) -> list[str]:
        return ["-t", self._cluster_id]  # the static quorum of controller.quorum.voters

    def kill9(self) -> None:
        """SIGKILL: no controlled shutdown, as a crashed host."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(timeout=15)
        self._kill()

    def halt(self) -> None:
        """SIGTERM (a controlled shutdown: leadership moves first), data kept."""
        self._kill()


class KafkaCluster:
    """``nodes`` Apache Kafka nodes (default 3) on loopback; a context manager."""

    kind = "kafka"

    def __init__(self, nodes: int = 3, *, heap_mb: int = 384, log_dir: Path | None = None,
                 start_timeout: float = 120.0,
                 extra_properties: dict[str, str] | None = None) -> None:
        host = "127.0.0.1"
        ports = [(free_port(host), free_port(host)) for _ in range(nodes)]
        voters = ",".join(f"{i + 1}@{host}:{c}" for i, (_, c) in enumerate(ports))
        cluster_id = uuid.uuid4().hex[:22]
        self.nodes = [
            ClusterNode(i + 1, port, controller, voters, cluster_id, heap_mb=heap_mb,
                        log_dir=None if log_dir is None else log_dir / f"node-{i + 1}",
                        start_timeout=start_timeout, extra_properties=extra_properties)
            for i, (port, controller) in enumerate(ports)]
        self._start_timeout = start_timeout

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port, _ in (n._given for n in self.nodes))

    def node(self, node_id: int) -> ClusterNode:
        return self.nodes[node_id - 1]

    def start(self) -> Self:
        """Start every node not running, side by side; return once each answers and the
        cluster lists them all."""
        starting = [n for n in self.nodes if not n.is_running()]
        for n in starting:
            n.launch()
        try:
            for n in starting:
                n._wait_ready()
            self.wait_brokers(len(self.nodes))
        except BrokerError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """All nodes at once: a node shutting down alone waits for a quorum that the
        others, stopped before it, no longer give."""
        for n in self.nodes:
            if n._proc is not None and n._proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    if n.paused:
                        n.resume()
                    n._proc.terminate()
        deadline = time.monotonic() + 30.0
        for n in self.nodes:
            if n._proc is not None:
                with contextlib.suppress(Exception):
                    n._proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            n.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0,
                            "socket.connection.setup.timeout.ms": 2000})

    def wait_brokers(self, count: int, timeout: float | None = None) -> None:
        """Until the cluster's metadata lists ``count`` live brokers."""
        admin = self.admin()
        deadline = time.monotonic() + (timeout or self._start_timeout)
        while time.monotonic() < deadline:
            with contextlib.suppress(KafkaException):
                if len(admin.list_topics(timeout=2.0).brokers) >= count:
                    return
            time.sleep(0.2)
        raise BrokerError(f"the cluster did not list {count} brokers in time")

    def leader(self, topic: str, partition: int) -> int:
        """The node id leading ``topic[partition]`` (-1: none now)."""
        meta = self.admin().list_topics(topic, timeout=10.0)
        found = meta.topics.get(topic)
        if found is None or found.error is not None or partition not in found.partitions:
            return -1  # e.g. __transaction_state before the first transaction
        return int(found.partitions[partition].leader)

    def group_coordinator(self, group: str) -> int:
        return self.leader("__consumer_offsets",
                           coordinator_partition(group, OFFSETS_PARTITIONS))

    def transaction_coordinator(self, transactional_id: str) -> int:
        return self.leader("__transaction_state",
                           coordinator_partition(transactional_id,
                                                 TRANSACTION_STATE_PARTITIONS))

    def in_sync(self, topics: list[str] | None = None) -> bool:
        """Whether every partition (of ``topics``, else all) has all its replicas in sync."""
        meta = self.admin().list_topics(timeout=10.0)
        for name, topic in meta.topics.items():
            if topics is not None and name not in topics:
                continue
            for p in topic.partitions.values():
                if len(p.isrs) < len(p.replicas) or p.leader < 0:
                    return False
        return True

    def __repr__(self) -> str:
        up = sum(n.is_running() for n in self.nodes)
        return f"<KafkaCluster {len(self.nodes)} nodes, {up} running, {self.bootstrap}>"
