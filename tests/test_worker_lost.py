"""Records the broker removed before the worker read them: reported, never silent.

DeleteRecords moves a raw partition's log start past records the worker has not read
(what retention does to a lagging or stopped worker, without waiting for it). The worker
must name the range in one ERROR line, count it in ``ndd_lost_records_total``, put a
``lost_records`` record on the DLQ, decide everything after it, and with
``NDD_ON_LOST_RECORDS=stop`` exit 3 instead. An archive stamped years ago and produced
with ``ndd-stream produce`` onto ``topics apply`` topics outlives retention.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from harness import brokers
from harness.kafka import Reader, SettingsFactory, create_topics, wait_until
from harness.scenarios import Feeder, news_lines
from harness.worker import WorkerProcess, metric_sum, scrape

from ndd_stream import jsonio
from ndd_stream.core.items import parse_timestamp
from ndd_stream.settings import Settings

pytestmark = [pytest.mark.broker]

SEED = int(os.environ.get("NDD_RELIABILITY_SEED", "20260301"))
needs_kafka = pytest.mark.skipif(not brokers.is_kafka(),
                                 reason="DeleteRecords and retention by time: Apache Kafka")


def _delete_before(settings: Settings, topic: str, partition: int, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers()})
    for future in admin.delete_records([TopicPartition(topic, partition, offset)]).values():
        future.result(timeout=20)


def _lost_then_restart(settings: Settings, tmp_path: Path
                       ) -> tuple[WorkerProcess, Reader, list[int], int]:
    """20 items decided, the worker stopped, 30 more produced and the first 15 of those
    deleted; a second worker started. Its process, the output reader, the new records'
    offsets, and the cut (the new log start)."""
    create_topics(settings)
    lines = news_lines(50, SEED)
    reader = Reader.outputs(settings)
    first = Feeder(settings, lines[:20], rate=5000, partition=0).start().join(timeout=60)
    worker = WorkerProcess(settings, tmp_path / "first.log").start()
    try:
        assert reader.wait_for(first, timeout=120, alive=worker.alive), worker.log_tail()
    finally:
        assert worker.stop() == 0, worker.log_tail()
    rest = Feeder(settings, lines[20:], rate=5000, partition=0).start().join(timeout=60)
    offsets = sorted(p[2] for p in rest)
    cut = offsets[15]
    _delete_before(settings, settings.raw_topics[0], 0, cut)
    return WorkerProcess(settings, tmp_path / "second.log").start(), reader, offsets, cut


@needs_kafka
@pytest.mark.timeout(300)
@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_records_deleted_before_they_were_read_are_reported(
    make_settings: SettingsFactory, tmp_path: Path, guarantee: str
) -> None:
    settings = make_settings(guarantee=guarantee)
    raw = settings.raw_topics[0]
    worker, reader, offsets, cut = _lost_then_restart(settings, tmp_path)
    try:
        kept = {(raw, 0, o) for o in offsets if o >= cut}
        assert reader.wait_for(kept, timeout=120, alive=worker.alive), worker.log_tail()
        assert worker.wait_event("records_lost", 30), worker.log_tail()
        assert reader.wait(lambda: any(r.reason == "lost_records" for r in reader.records),
                           timeout=30)
        port = worker.web_port()
        assert port is not None
        lost_metric = metric_sum(scrape(port), "ndd_lost_records_total", topic=raw,
                                 partition="0")
    finally:
        assert worker.stop() == 0, worker.log_tail()
    (event,) = worker.events("records_lost")
    assert event["level"] == "ERROR"
    assert (event["topic"], event["partition"]) == (raw, 0)
    assert (event["offset"], event["last_offset"], event["count"]) == (offsets[0], cut - 1, 15)
    assert f"{raw}[0]: offsets {offsets[0]}-{cut - 1} (15)" in event["message"]
    assert lost_metric == 15
    (dead,) = [r for r in reader.records if r.reason == "lost_records"]
    assert jsonio.loads(dead.value or b"")["lost"] == {
        "topic": raw, "partition": 0, "first": offsets[0], "last": cut - 1, "count": 15,
        "why": "the consumer's position went out of range"}
    assert dead.source == (raw, 0, offsets[0])
    # no decision on the deleted range (the dead letter names its first offset)
    decided = {r.source for r in reader.records if r.reason != "lost_records"}
    assert not {(raw, 0, o) for o in offsets if o < cut} & decided
    assert not worker.events("fatal")


@needs_kafka
@pytest.mark.timeout(300)
def test_on_lost_records_stop_exits_3_after_the_report(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    settings = make_settings(guarantee="exactly-once", on_lost_records="stop")
    raw = settings.raw_topics[0]
    worker, reader, offsets, cut = _lost_then_restart(settings, tmp_path)
    try:
        assert worker.wait_exit(120) == 3, worker.log_tail()
    finally:
        worker.stop()
    (event,) = worker.events("records_lost")
    assert (event["offset"], event["last_offset"]) == (offsets[0], cut - 1)
    (fatal,) = worker.events("fatal")
    assert "NDD_ON_LOST_RECORDS=stop" in fatal["message"]
    assert reader.wait(lambda: any(r.reason == "lost_records" for r in reader.records),
                       timeout=30)
    assert not {(raw, 0, o) for o in offsets if o >= cut} & reader.sources


@needs_kafka
def test_raw_topics_count_retention_from_arrival(make_settings: SettingsFactory) -> None:
    """``topics apply`` makes raw topics stamp records on arrival: retention cannot delete
    an archive stamped years ago before a worker reads it."""
    settings = make_settings()
    create_topics(settings)
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers()})
    resource = ConfigResource(ResourceType.TOPIC, settings.raw_topics[0])
    configs = admin.describe_configs([resource])[resource].result(timeout=20)
    assert configs["message.timestamp.type"].value == "LogAppendTime"
    sent = int(time.time() * 1000) - 1000
    Feeder(settings, news_lines(3, SEED, start=1_200_000_000.0), rate=5000,
           partition=0).start().join(timeout=60)
    with Reader(settings.bootstrap_servers(), settings.raw_topics[0]) as reader:
        records = reader.read(n=3, timeout=30)
    assert len(records) == 3
    assert all(r.timestamp_ms is not None and r.timestamp_ms >= sent for r in records)



ARCHIVE_START = 1_672_531_200.0  # 2023-01-01 00:00 UTC


@needs_kafka
@pytest.mark.timeout(300)
def test_an_archive_stamped_years_ago_outlives_retention(tmp_path: Path) -> None:
    """A crawler that stamps records with their 2023 event times, onto a raw topic from
    ``topics apply`` on a broker checking retention every second: the records stay, and
    one worker started afterwards decides them all as ``dedup`` does. The same records on
    a topic that keeps the producer's stamps (``CreateTime``) are deleted meanwhile."""
    from harness.kafka import create_topics as create_named
    from harness.kafka import worker_settings
    from harness.scenarios import Report, check_outputs, dedup_of

    from ndd_stream.kafka.apache import ApacheKafka

    quick = {"log.retention.check.interval.ms": "1000", "log.initial.task.delay.ms": "0"}
    with ApacheKafka(log_dir=tmp_path / "broker", extra_properties=quick) as broker:
        settings = worker_settings(broker.bootstrap, "archive", tmp_path / "data",
                                   guarantee="exactly-once", partitions=2)
        create_topics(settings)
        control = "archive-createtime"
        create_named(broker.bootstrap, [control], config={"segment.ms": "1000"})
        lines = news_lines(300, SEED, start=ARCHIVE_START)
        stamps = [int((parse_timestamp(jsonio.loads(line)["timestamp"]) or 0) * 1000)
                  for line in lines]
        assert min(stamps) >= ARCHIVE_START * 1000
        positions = Feeder(settings, lines, rate=5000, timestamps_ms=stamps).start().join(60)
        Feeder(settings.model_copy(update={"raw_topics": [control]}), lines, rate=5000,
               partition=0, timestamps_ms=stamps).start().join(60)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "archive-low"})
        try:
            def low(topic: str, partition: int) -> int:
                return int(consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                          timeout=10)[0])

            assert wait_until(lambda: low(control, 0) >= len(lines), 60), \
                "retention did not run on the CreateTime control topic"
            raw = settings.raw_topics[0]
            assert all(low(raw, p) == 0 for p in range(8))
        finally:
            consumer.close()
        want, want_dlq = dedup_of(settings, lines)
        reader = Reader.outputs(settings)
        worker = WorkerProcess(settings, tmp_path / "worker.log").start()
        try:
            assert reader.wait_for(positions, timeout=180, alive=worker.alive), \
                worker.log_tail()
        finally:
            assert worker.stop() == 0, worker.log_tail()
        reader.read(timeout=3.0, idle=2.0)
        problems = check_outputs(Report("archive", len(lines)), reader.records, positions,
                                 want, want_dlq)
        reader.close()
        assert not problems, problems
        assert not worker.events("records_lost")


# --- the reporter alone (no broker) ---------------------------------------------------


class _Msg:
    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset


def _reporter(stop: bool = False) -> tuple[Any, list[Any], list[str]]:
    from ndd_stream.worker.delivery import LostRecords
    from ndd_stream.worker.metrics import WorkerMetrics

    sent: list[Any] = []
    stopped: list[str] = []

    async def send(record: Any) -> Any:
        sent.append(record)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    lost = LostRecords(WorkerMetrics(), "dlq", stop=stop, on_stop=stopped.append)
    lost.send = send
    return lost, sent, stopped


def test_a_fetch_reset_heard_in_aiokafka_log_ends_at_the_next_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from aiokafka.structs import TopicPartition as AioTP

    from ndd_stream.worker.delivery import FETCHER_LOGGER, watch_fetch_resets

    lost, sent, _ = _reporter()
    found = watch_fetch_resets(lost)
    try:
        with caplog.at_level(logging.INFO):
            # the very call aiokafka's fetcher makes (aiokafka/consumer/fetcher.py)
            logging.getLogger(FETCHER_LOGGER).info(
                "Fetch offset %s is out of range for partition %s, resetting offset",
                20, AioTP("news.raw", 3))
            asyncio.run(lost.delivered([_Msg("news.raw", 1, 7), _Msg("news.raw", 3, 35),
                                        _Msg("news.raw", 3, 36)]))
    finally:
        logging.getLogger(FETCHER_LOGGER).removeFilter(found)
    (record,) = sent
    assert record.topic == "dlq" and record.key == b"news.raw[3]"
    assert jsonio.loads(record.value)["lost"]["first"] == 20
    assert jsonio.loads(record.value)["lost"]["last"] == 34
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage().split(";")[0] for r in errors] == [
        "news.raw[3]: offsets 20-34 (15) were removed from the broker before this worker "
        "read them"]
    assert lost.metrics.lost.labels("news.raw", "3")._value.get() == 15


def test_a_range_is_reported_once_and_stop_comes_after_the_dead_letter() -> None:
    lost, sent, stopped = _reporter(stop=True)

    async def run() -> None:
        await lost.lost("t", 0, 10, 19, "a")
        await lost.lost("t", 0, 15, 19, "b")  # all of it reported already
        await lost.lost("t", 0, 15, 24, "c")  # only 20-24 is new

    asyncio.run(run())
    assert [jsonio.loads(r.value)["lost"]["first"] for r in sent] == [10, 20]
    assert len(stopped) == 2 and "offsets 10-19" in stopped[0]


def test_a_position_past_the_end_of_a_truncated_log_is_not_a_loss() -> None:
    lost, sent, _ = _reporter()
    lost.fetch_reset("t", 0, 50)
    asyncio.run(lost.delivered([_Msg("t", 0, 40)]))
    assert sent == []


def test_a_reset_after_a_seek_back_reports_nothing_handed_out() -> None:
    """The consumer sent back to a position already passed resets again, and a batch fetched
    before the seek (offsets 40-44) comes first: the range closes at the agents' cursor, not
    at offset 40 (which would name 35-39, handed out and decided, as lost)."""
    lost, sent, _ = _reporter()
    handed: dict[tuple[str, int], int] = {("t", 0): 20}
    lost.handed = handed.get

    async def run() -> None:
        lost.fetch_reset("t", 0, 20)
        await lost.delivered([_Msg("t", 0, 35), _Msg("t", 0, 36)])
        handed[("t", 0)] = 40  # 35-39 handed out
        lost.fetch_reset("t", 0, 20)  # the seek back to 20, out of range again
        await lost.delivered([_Msg("t", 0, 40), _Msg("t", 0, 41)])
        lost.fetch_reset("t", 0, 20)  # and once more, the log now starting at 47
        await lost.delivered([_Msg("t", 0, 47)])

    asyncio.run(run())
    assert [(jsonio.loads(r.value)["lost"]["first"], jsonio.loads(r.value)["lost"]["last"])
            for r in sent] == [(20, 34), (40, 46)]
    assert lost.metrics.lost.labels("t", "0")._value.get() == 15 + 7
