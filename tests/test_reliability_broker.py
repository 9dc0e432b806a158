"""Broker trouble: the worker recovers without loss, or exits loudly (code 3), never hangs.

Each test runs its own broker of the run's kind (Apache Kafka or Tansu), because these
tests pause, stop and replace it. The behaviour checked here is documented in
docs/RELIABILITY.md:

* broker hung (SIGSTOP) longer than the session timeout, shorter than
  NDD_BROKER_TIMEOUT_S: the worker logs ``broker_unreachable``, then
  ``broker_reachable``, and goes on; nothing is lost, no decision changes;
* broker hung or gone longer than NDD_BROKER_TIMEOUT_S: exit code 3 with a CRITICAL JSON
  line (event ``fatal``); after a restart it goes on without loss;
* broker replaced by an empty one (in-memory broker restarted): exit code 3 with
  "the broker lost data", the local state untouched, and the same refusal on every
  restart until the operator deletes the state directory;
* the app crashes (here: a state directory of another format): exit code 3.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import brokers
from harness.kafka import (
    Position,
    Reader,
    SettingsFactory,
    committed_offsets,
    create_topics,
    wait_until,
    worker_settings,
)
from harness.scenarios import (
    Feeder,
    Report,
    check_outputs,
    dedup_of,
    feed_all,
    news_lines,
    prepare,
)
from harness.worker import Decided, WorkerProcess, events_named

from ndd_stream.kafka.broker import BrokerBinaryNotFound, BrokerError, EmbeddedBroker
from ndd_stream.settings import Settings
from ndd_stream.state.rocks import FORMAT_KEY, RocksStore
from ndd_stream.worker.app import topic_name

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A broker for this test alone, on a port it can be restarted on."""
    try:
        broker = brokers.new_broker(tmp_path / "broker", fixed_port=True).start()
    except (BrokerBinaryNotFound, BrokerError) as exc:
        pytest.skip(f"embedded Kafka broker unavailable: {exc}")
    try:
        yield broker
    finally:
        broker.stop()


def _settings(broker: EmbeddedBroker, tmp_path: Path, **overrides: object) -> Settings:
    return worker_settings(broker.bootstrap, tmp_path.name[-20:].replace("_", "-"),
                           tmp_path / "data", partitions=2, **overrides)


def _state(settings: Settings) -> tuple[int, int]:
    """(documents, sum of next offsets) over the worker's partition stores, read directly."""
    docs = nexts = 0
    for path in sorted((settings.data_dir / settings.app_id).glob("partition-*")):
        store = RocksStore(path)
        try:
            docs += sum(1 for _ in store.load())
            nexts += store.checkpoint().next
        finally:
            store.close()
    return docs, nexts


def _assert_nothing_lost(report: Report, reader: Reader, positions: list[Position],
                         want: dict[str, Decided], want_dlq: int) -> None:
    """Every fed line came out once, decided as dedup decides it; the report is printed."""
    problems = check_outputs(report, reader.records, positions, want, want_dlq)
    print(report.line())
    assert not problems, "\n".join(problems)


def _fatal(log_path: Path) -> str:
    lines = events_named(log_path, "fatal")
    assert lines, f"no fatal log line in {log_path}"
    assert lines[-1]["level"] == "CRITICAL"
    return str(lines[-1]["message"])


def test_broker_hung_beyond_the_session_timeout_then_back_loses_nothing(
    own_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    settings = _settings(own_broker, tmp_path, broker_timeout_s=60.0)
    lines, want, want_dlq, reader = prepare(settings, 3000, seed=21, id_prefix="p-")
    feeder = Feeder(settings, lines, rate=300).start()  # still producing during the pause
    log_path = tmp_path / "worker.log"
    worker = WorkerProcess(settings, log_path).start()
    try:
        assert reader.wait_count(500, timeout=90, alive=worker.alive), worker.log_tail()
        own_broker.pause()
        paused_at = time.monotonic()
        while time.monotonic() - paused_at < settings.session_timeout_s + 9.0:
            assert worker.alive(), worker.log_tail()
            time.sleep(0.5)
        own_broker.resume()
        positions = feeder.join(timeout=120)
        assert reader.wait_for(positions, timeout=150, alive=worker.alive), worker.log_tail()
        assert worker.alive()
        assert events_named(log_path, "broker_unreachable"), worker.log_tail()
        assert worker.wait_event("broker_reachable", 30), worker.log_tail()
        assert worker.stop() == 0
    finally:
        worker.stop()
        reader.close()
    _assert_nothing_lost(Report("broker paused past the session", len(lines)), reader,
                         positions, want, want_dlq)


def test_broker_hung_beyond_broker_timeout_exits_3_and_a_restart_loses_nothing(
    own_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    settings = _settings(own_broker, tmp_path, broker_timeout_s=10.0)
    lines, want, want_dlq, reader = prepare(settings, 2000, seed=22, id_prefix="h-")
    feeder = Feeder(settings, lines[:1000], rate=2000).start()
    log_path = tmp_path / "worker.log"
    worker = WorkerProcess(settings, log_path).start()
    try:
        assert reader.wait_count(300, timeout=90, alive=worker.alive), worker.log_tail()
        own_broker.pause()
        paused_at = time.monotonic()
        code = worker.wait_exit(timeout=120)
        exited_after = time.monotonic() - paused_at
        own_broker.resume()
        assert code == 3, f"exit {code}\n{worker.log_tail()}"
        assert exited_after >= 10.0, exited_after  # never before NDD_BROKER_TIMEOUT_S
        assert "answered for" in _fatal(log_path)
        positions = feeder.join(timeout=60)
        feeder = Feeder(settings, lines[1000:], rate=2000).start()
        worker = WorkerProcess(settings, tmp_path / "worker-2.log").start()
        positions += feeder.join(timeout=60)
        assert reader.wait_for(positions, timeout=150, alive=worker.alive), worker.log_tail()
        assert worker.stop() == 0
    finally:
        worker.stop()
        reader.close()
    print(f"exit 3 after {exited_after:.1f}s")
    _assert_nothing_lost(Report("broker hung 10+ s", len(lines), crashes=1), reader, positions,
                         want, want_dlq)


def test_broker_gone_for_good_exits_3(own_broker: EmbeddedBroker, tmp_path: Path) -> None:
    settings = _settings(own_broker, tmp_path, broker_timeout_s=8.0)
    create_topics(settings)
    log_path = tmp_path / "worker.log"
    worker = WorkerProcess(settings, log_path).start()
    try:
        assert worker.wait_event("partition_ready", 60), worker.log_tail()
        own_broker.stop()
        stopped_at = time.monotonic()
        code = worker.wait_exit(timeout=120)
        exited_after = time.monotonic() - stopped_at
    finally:
        worker.stop()
    assert code == 3, worker.log_tail()
    assert exited_after >= 8.0, exited_after  # never before NDD_BROKER_TIMEOUT_S
    assert f"no broker at {settings.bootstrap_servers()} answered" in _fatal(log_path)
    print(f"broker stopped: exit 3 after {exited_after:.1f}s")


def test_broker_restarted_empty_is_refused_loudly_and_state_is_kept(
    own_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    settings = _settings(own_broker, tmp_path, broker_timeout_s=60.0)
    create_topics(settings)
    lines = news_lines(400, seed=23, id_prefix="r-")
    reader = Reader.outputs(settings)
    positions = feed_all(settings, lines)
    log_path = tmp_path / "worker.log"
    worker = WorkerProcess(settings, log_path).start()
    try:
        assert reader.wait_for(positions, timeout=90, alive=worker.alive), worker.log_tail()
        reader.close()
        # The group's offsets pass a record only after its batch's state is written.
        scoped = topic_name(settings, "scoped")
        assert wait_until(lambda: sum(committed_offsets(
            settings.bootstrap_servers(), settings.app_id, scoped).values()) >= len(lines), 60)
        own_broker.restart(empty=True)  # same port, no data: a broker whose disks were lost
        code = worker.wait_exit(timeout=90)
        detected = _fatal(log_path) if code is not None else ""
    finally:
        worker.stop()
    assert code == 3, worker.log_tail()
    assert "the broker lost data" in detected, detected
    # The local state still reflects every item decided before (nothing reset or mixed).
    docs, nexts = _state(settings)
    assert (docs, nexts) == (len(lines), len(lines)), (docs, nexts)

    # A restart against the empty broker (topics re-created) refuses the same way ...
    create_topics(settings)
    code = WorkerProcess(settings, tmp_path / "worker-2.log").run_to_exit(timeout=90)
    assert code == 3 and "the broker lost data" in _fatal(tmp_path / "worker-2.log")
    assert _state(settings) == (docs, nexts)

    # ... until the operator deletes the state: then it starts over with an empty window.
    shutil.rmtree(settings.data_dir)
    fresh = news_lines(300, seed=24, id_prefix="f-")
    want, want_dlq = dedup_of(settings, fresh)
    reader = Reader.outputs(settings)
    positions = feed_all(settings, fresh)
    worker = WorkerProcess(settings, tmp_path / "worker-3.log").start()
    try:
        assert reader.wait_for(positions, timeout=90, alive=worker.alive), worker.log_tail()
        assert worker.stop() == 0
    finally:
        worker.stop()
        reader.close()
    _assert_nothing_lost(Report("after an empty broker", len(fresh)), reader, positions, want,
                         want_dlq)
    print(f"empty broker: exit 3 twice ({detected[:80]}...), state kept: {docs} documents")


def test_an_app_crash_exits_3(make_settings: SettingsFactory, tmp_path: Path) -> None:
    """A worker whose app crashes (here: its state directory was written by another
    format) exits with code 3 and says why, instead of running on without a partition."""
    settings = make_settings(partitions=1)
    create_topics(settings)
    path = settings.data_dir / settings.app_id / "partition-0"
    RocksStore(path).close()
    from rocksdict import Options, Rdict

    db = Rdict(str(path), options=Options(raw_mode=True))
    db.put(FORMAT_KEY, b"ndd-state-0")
    db.close()
    log_path = tmp_path / "worker.log"
    worker = WorkerProcess(settings, log_path)
    code = worker.run_to_exit(timeout=90)
    assert code == 3, worker.log_tail()
    message = _fatal(log_path)
    # the partition's open fails and ends the worker, naming the partition and the format
    assert "partition" in message and "state format" in message, message

