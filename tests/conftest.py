"""Shared fixtures: one broker per test session, unique names per test.

Tests never mock Kafka: they talk to a real broker over loopback, Apache Kafka 4.x or the
embedded Tansu broker (``tests/harness/brokers.py`` chooses; ``NDD_TEST_BROKER``). The
broker is shared, so every test makes its own topics and groups through ``names`` and
never depends on another test's data. The helpers are in
``tests/harness/`` (on sys.path through pytest's ``pythonpath`` setting).
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from harness import brokers
from harness.kafka import Names, SettingsFactory, TopicFactory, create_topics, worker_settings

from ndd_stream.kafka.broker import BrokerBinaryNotFound, BrokerError, EmbeddedBroker
from ndd_stream.settings import Settings

# Skips that mean "a tool is missing on this machine". Under NDD_CI=1 (.ci/run) they fail:
# CI installs every tool itself, so a skip there would hide a check that never ran.
_CI_REQUIRES = (
    "embedded Kafka broker unavailable",
    "docker-compose not installed",
    "compose_spec.json ships with docker-compose",
    "hadolint not installed",
    "openssl CLI not available",
    "C kernels not built",
    "chromium not installed",
    "promtool not installed",
    "prometheus not installed",
    "could not import 'atheris'",
    "could not import 'bytewax'",  # examples/: the test extra installs it
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("NDD_CI") != "1" or not report.skipped:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if any(marker in reason for marker in _CI_REQUIRES):
        report.outcome = "failed"
        report.longrepr = f"NDD_CI=1 and a required tool is missing: {reason}"


def slow_enabled(config: pytest.Config) -> bool:
    expr = str(config.getoption("markexpr") or "")
    return os.environ.get("NDD_RELIABILITY_SLOW") == "1" or (
        "slow" in expr and "not slow" not in expr)


@pytest.fixture
def long_run(request: pytest.FixtureRequest) -> None:
    """Skips a long variant (marked slow) unless ``-m slow`` or NDD_RELIABILITY_SLOW=1."""
    if not slow_enabled(request.config):
        pytest.skip("long variant: run with -m slow or NDD_RELIABILITY_SLOW=1")


def pytest_report_header(config: pytest.Config) -> str:
    return brokers.describe()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """The session's broker (Apache Kafka or Tansu); skips only if none can be had, which
    fails under NDD_CI=1."""
    try:
        running = brokers.new_broker(tmp_path_factory.mktemp("broker")).start()
    except BrokerBinaryNotFound as exc:
        pytest.skip(f"embedded Kafka broker unavailable: {exc}")
    except BrokerError as exc:
        pytest.skip(f"embedded Kafka broker unavailable: {brokers.kind()}: {exc}")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def names(request: pytest.FixtureRequest) -> Names:
    """Fresh unique names for this test's topics, groups and Faust app ids."""
    return Names(request.node.name)


@pytest.fixture
def make_topics(broker: EmbeddedBroker) -> TopicFactory:
    """``make_topics("a", "b", partitions=4, config={...})``: create them on the broker."""

    def _make(
        *topic_names: str, partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> list[str]:
        create_topics(broker.bootstrap, topic_names, partitions=partitions, config=config)
        return list(topic_names)

    return _make


@pytest.fixture
def make_settings(broker: EmbeddedBroker, names: Names, tmp_path: Path) -> SettingsFactory:
    """Settings pointing at the test broker with this test's own topics, app id and data dir.

    Keyword arguments override any field: ``make_settings(threshold=0.9)``.
    """

    def _make(**overrides: Any) -> Settings:
        fields = {"data_dir": tmp_path / "ndd-data", **overrides}
        return worker_settings(broker.bootstrap, names.suffix, **fields)

    return _make
