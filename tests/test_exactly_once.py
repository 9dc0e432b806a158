"""Exactly-once outputs on Apache Kafka (``NDD_GUARANTEE=exactly-once``).

Every reader here reads ``read_committed`` (tests/harness/kafka.py), as the outputs'
consumers must. Under kill -9 storms and a zombie (a worker paused past its session while
its partitions move), no output record may come out twice: ``redelivered`` counts copies
beyond the first per raw position, over unique, duplicate and the DLQ; the decisions topic
is checked the same way. A broker without transactions (the embedded demo broker) ends an
exactly-once worker at once with exit code 3 and a line naming NDD_GUARANTEE.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harness import brokers
from harness.kafka import Reader, SettingsFactory
from harness.scenarios import crash_scenario

from ndd_stream.settings import Settings

pytestmark = [pytest.mark.broker]

SEED = int(os.environ.get("NDD_RELIABILITY_SEED", "20260301"))
needs_kafka = pytest.mark.skipif(not brokers.is_kafka(),
                                 reason="exactly-once needs a broker with transactions")


def _decisions_repeated(settings: Settings) -> int:
    """Records of the decisions topic beyond the first per raw position."""
    assert settings.decisions_topic
    with Reader(settings.bootstrap_servers(), settings.decisions_topic) as reader:
        reader.read(timeout=5.0, idle=2.0)
        seen: dict[object, int] = {}
        for rec in reader.records:
            seen[rec.source] = seen.get(rec.source, 0) + 1
    return sum(n - 1 for n in seen.values())


def _repeats(settings: Settings) -> str:
    """Where repeated outputs come from: the scoped topic (the router) or the decider."""
    from collections import Counter

    from ndd_stream.worker.app import topic_name

    lines = []
    with Reader(settings.bootstrap_servers(), topic_name(settings, "scoped")) as reader:
        reader.read(timeout=5.0, idle=2.0)
        scoped = Counter(rec.source for rec in reader.records)
    lines.append(f"scoped records {sum(scoped.values())}, raw positions forwarded twice: "
                 f"{sum(1 for n in scoped.values() if n > 1)}")
    with Reader.outputs(settings) as reader:
        reader.read(timeout=5.0, idle=2.0)
        by: dict[object, list[object]] = {}
        for rec in reader.records:
            by.setdefault(rec.source, []).append((rec.topic, rec.partition, rec.offset))
    lines += [f"{src}: {copies}" for src, copies in list(
        (k, v) for k, v in by.items() if len(v) > 1)[:10]]
    return "\n".join(lines)


@needs_kafka
@pytest.mark.timeout(420)
def test_kill_9_storm_repeats_nothing(make_settings: SettingsFactory, tmp_path: Path) -> None:
    settings = make_settings(partitions=4, guarantee="exactly-once")
    report, problems = crash_scenario(settings, tmp_path, items=1_500, kills=5, seed=SEED,
                                      rate=30.0, timeout=400)
    print(report.line())
    assert report.crashes == 5
    assert not problems, "\n".join(problems)
    assert report.lost == 0 and report.mismatches == 0
    assert report.redelivered == 0, f"{report.line()}\n{_repeats(settings)}"
    assert _decisions_repeated(settings) == 0
