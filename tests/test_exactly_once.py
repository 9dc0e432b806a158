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
import signal
from pathlib import Path

import pytest
from harness import brokers
from harness.kafka import (
    Names,
    Reader,
    SettingsFactory,
    TopicFactory,
    create_topics,
    worker_settings,
)
from harness.scenarios import (
    Feeder,
    Report,
    check_outputs,
    crash_scenario,
    feed_all,
    prepare,
    rebalance_scenario,
)
from harness.worker import WorkerProcess

from ndd_stream.kafka.broker import EmbeddedBroker, resolve_tansu_bin
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


@needs_kafka
@pytest.mark.timeout(600)
def test_two_workers_kill_9_storm_repeats_nothing(make_settings: SettingsFactory,
                                                  tmp_path: Path) -> None:
    """The issue's storm: 2 workers, 8 kill -9 of either while 1,500 items stream in at
    25/s. A short session, so that each kill's rebalance comes within seconds."""
    settings = make_settings(partitions=4, guarantee="exactly-once", session_timeout_s=10.0)
    report, problems = crash_scenario(settings, tmp_path, items=1_500, kills=8, seed=SEED + 3,
                                      rate=25.0, timeout=560, workers=2)
    print(report.line())
    assert report.crashes == 8
    assert not problems, "\n".join(problems)
    assert report.redelivered == 0, f"{report.line()}\n{_repeats(settings)}"
    assert _decisions_repeated(settings) == 0


@needs_kafka
@pytest.mark.timeout(300)
def test_zombie_commits_nothing_for_partitions_it_lost(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """A worker paused (SIGSTOP) past its session while its partitions move to another
    worker, then resumed: its commits name a generation the group has left behind and are
    refused, so it commits nothing more for those partitions (it leaves them to the
    rebalance), and no output comes out twice."""
    # a short session, so that the group gives up on the paused worker within the test
    first = make_settings(partitions=4, guarantee="exactly-once", session_timeout_s=8.0)
    second = make_settings(partitions=4, guarantee="exactly-once", session_timeout_s=8.0,
                           data_dir=tmp_path / "second-data")
    lines, want, want_dlq, reader = prepare(first, 900, SEED + 7)
    feeder = Feeder(first, lines, rate=60.0).start()
    zombie = WorkerProcess(first, tmp_path / "zombie.log").start()
    owner = WorkerProcess(second, tmp_path / "owner.log")
    problems: list[str] = []
    try:
        assert reader.wait_count(150, timeout=120, alive=zombie.alive), zombie.log_tail()
        assert zombie.proc is not None
        zombie.proc.send_signal(signal.SIGSTOP)  # mid-stream: a piece may be in flight
        owner.start()
        # the owner took every partition over once it decides what the zombie left
        done = len(reader.sources)
        assert reader.wait_count(done + 150, timeout=120, alive=owner.alive), owner.log_tail()
        zombie.proc.send_signal(signal.SIGCONT)
        code = zombie.wait_exit(60)
        assert code in (3, None), zombie.log_tail()
        positions = feeder.join(timeout=120)
        assert reader.wait_for(positions, timeout=120, alive=owner.alive), owner.log_tail()
        reader.read(timeout=2.0, idle=1.0)
    finally:
        if zombie.proc is not None and zombie.alive():
            zombie.proc.send_signal(signal.SIGCONT)
        zombie.stop()
        owner.stop()
        reader.close()
    report = Report("zombie", len(lines))
    problems += check_outputs(report, reader.records, positions, want, want_dlq)
    print(report.line(), "zombie exit", code)
    assert not problems, "\n".join(problems)
    assert report.redelivered == 0, f"{report.line()}\n{_repeats(first)}"
    assert _decisions_repeated(first) == 0


@pytest.mark.timeout(180)
def test_broker_without_transactions_ends_an_exactly_once_worker(
    names: Names, tmp_path: Path
) -> None:
    """The embedded demo broker (Tansu) has no transactions: exit 3, one line naming
    NDD_GUARANTEE, never a silent at-least-once."""
    with EmbeddedBroker(binary=resolve_tansu_bin(), log_dir=tmp_path) as tansu:
        settings = worker_settings(tansu.bootstrap, names.suffix, tmp_path / "data",
                                   guarantee="exactly-once", session_timeout_s=6.0)
        create_topics(settings)
        worker = WorkerProcess(settings, tmp_path / "worker.log")
        code = worker.run_to_exit(120)
    assert code == 3, worker.log_tail()
    fatal = [e for e in worker.events("fatal")]
    assert len(fatal) == 1 and "NDD_GUARANTEE" in fatal[0]["message"], worker.log_tail()


@needs_kafka
@pytest.mark.timeout(120)
def test_a_transaction_left_open_does_not_read_as_no_transactions(
    broker: EmbeddedBroker, names: Names, make_topics: TopicFactory
) -> None:
    """A worker killed mid-piece leaves its transaction open on the changelog, which holds
    the last stable offset until the partition's next owner registers. The probe that
    tells a broker without transactions runs before that: it must still see that the
    broker withholds uncommitted records, and answer within seconds."""
    import time

    from confluent_kafka import Producer

    from ndd_stream.kafka.transactions import check_transactions

    topic = names.topic("changelog")
    conf = {"bootstrap.servers": broker.bootstrap}
    make_topics(topic, partitions=2)
    zombie = Producer({**conf, "transactional.id": names.app_id("zombie")})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, key=b"k", value=b"v", partition=0)
    assert zombie.flush(10) == 0
    started = time.monotonic()
    check_transactions(conf, names.app_id(), topic, timeout_s=20)
    assert time.monotonic() - started < 10
    zombie.abort_transaction(10)


@needs_kafka
@pytest.mark.timeout(420)
def test_event_time_order_kill_9_in_a_backlog_repeats_nothing(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """A cross-channel scope (event-time order across raw partitions): a backlog decided
    as ``dedup --event-order``, with 4 kill -9 in it, and no output repeated. The
    sequencer's state is in the checkpoint that each transaction commits; items re-read
    after a restart that its frontier passed are answered by nothing (already out)."""
    from test_order_broker import _settings, cross_channel, kill_during_backlog

    settings = _settings(make_settings, guarantee="exactly-once")
    create_topics(settings)
    lines = cross_channel(1500, seed=33)
    positions = feed_all(settings, lines)
    report = kill_during_backlog(settings, lines, positions, (100, 500, 900, 1200), tmp_path,
                                 "kill -9 in an event-time backlog")
    assert report.redelivered == 0, f"{report.line()}\n{_repeats(settings)}"
    assert _decisions_repeated(settings) == 0


@needs_kafka
@pytest.mark.timeout(480)
def test_sharded_windows_kill_9_in_a_backlog_repeats_nothing(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """Sharded windows (3 shards, every waiting item through the spill files): the records
    to the shards go in the gatherer's transaction with the checkpoint that lists them,
    the shards' answers in the shard's; 3 kill -9 in a backlog, nothing repeated."""
    from test_order_broker import _settings, cross_channel, kill_during_backlog

    settings = _settings(make_settings, shards=3, partitions=1, gather_memory_mb=0,
                         guarantee="exactly-once")
    create_topics(settings)
    lines = cross_channel(900, seed=71)
    positions = feed_all(settings, lines)
    report = kill_during_backlog(settings, lines, positions, (100, 400, 700), tmp_path,
                                 "sharded, kill -9", timeout=180)
    assert report.redelivered == 0, f"{report.line()}\n{_repeats(settings)}"
    assert _decisions_repeated(settings) == 0


@needs_kafka
@pytest.mark.timeout(480)
def test_a_second_worker_joining_and_leaving_repeats_nothing(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """Clean rebalances: a second worker joins and leaves (SIGTERM) twice while items
    stream in. Each worker commits its pieces before its partitions are revoked, and the
    new owner reads their committed offsets stable; nothing comes out twice."""
    first = make_settings(partitions=4, guarantee="exactly-once")
    second = make_settings(partitions=4, guarantee="exactly-once",
                           data_dir=tmp_path / "second-data")
    report, problems = rebalance_scenario(first, second, tmp_path, items=3_000, cycles=2,
                                          seed=SEED + 5, rate=200.0, timeout=440)
    print(report.line(), *report.notes)
    assert report.rebalances == 4
    assert not problems, "\n".join(problems)
    assert report.redelivered == 0, f"{report.line()}\n{_repeats(first)}"
    assert _decisions_repeated(first) == 0
