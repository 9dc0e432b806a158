"""The view's Kafka side: follow the output topics, probe the group's lag, read one text.

All reads use ``assign``: the view joins no group, commits nothing and cannot disturb a
worker. Two threads:

* :class:`Follower` reads the audit topic, ``unique``, ``duplicate`` and the DLQ from the
  last ``backfill`` records of each partition (or from the beginning) and feeds
  :class:`~ndd_stream.view.model.ViewState`.
* :class:`LagProbe` every few seconds compares the worker group's committed offsets with
  the high watermark of every raw and scoped partition. On Tansu ListOffsets(latest)
  answers "base offset of the last batch + 1" (docs/TANSU.md), so a probe consumer fetches
  from that offset minus one and takes the high watermark from the *fetch* response,
  which is right; on Apache Kafka the same fetch returns one record and the same number.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from ndd_stream.kafka import topics as topic_defs
from ndd_stream.kafka.config import librdkafka_config
from ndd_stream.kafka.reads import BrokerReads, RefetchError, read_range
from ndd_stream.kafka.tail import TailRecord
from ndd_stream.settings import Settings
from ndd_stream.view.model import LagRow, Locator, ViewState, text_of
from ndd_stream.view.rings import StoredText

log = logging.getLogger("ndd_stream.view")


def _consumer(settings: Settings, label: str, **extra: Any) -> Consumer:
    return Consumer(librdkafka_config(settings, {
        "group.id": f"{settings.app_id}-view-{label}-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        # committed outputs only (exactly-once); librdkafka's default, said here
        "isolation.level": "read_committed", **extra}))


def output_topics(settings: Settings) -> dict[str, str]:
    """Topic name -> kind (decisions, unique, duplicate, dlq) that the view reads."""
    out = {settings.unique_topic: "unique", settings.duplicate_topic: "duplicate",
           settings.dlq_topic: "dlq"}
    if settings.decisions_topic:
        out[settings.decisions_topic] = "decisions"
    return out


def scoped_topic(settings: Settings, key: str = "scoped") -> str | None:
    """The worker's internal scope-keyed topic (or another by ``key``), as ``topics
    apply`` names it; None when the settings have no such topic (shards = 1)."""
    resolved, _ = topic_defs.resolve(settings, topic_defs.load_for(settings))
    return next((t.name for t in resolved if t.key == key), None)


def to_record(msg: Any) -> TailRecord:
    ts_type, ts = msg.timestamp()
    raw = cast(list[tuple[str, Any]], msg.headers() or [])
    return TailRecord(topic=str(msg.topic()), partition=int(msg.partition() or 0),
                      offset=int(msg.offset() or 0), timestamp_ms=ts if ts_type else None,
                      key=msg.key(), value=msg.value(),
                      headers=tuple((k, v.encode() if isinstance(v, str) else v) for k, v in raw))


class _Thread:
    """A daemon thread with a stop event and the last error it met (shown on the page)."""

    name = "view"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self.error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout)

    def _main(self) -> None:
        while not self._stop.is_set():
            try:
                self.run()
            except (KafkaException, LookupError) as exc:
                self.failed(str(exc))
                log.warning("%s: %s (retrying)", self.name, exc)
                self._stop.wait(2.0)

    def run(self) -> None:
        raise NotImplementedError

    def failed(self, error: str | None) -> None:
        self.error = error


class Follower(_Thread):
    """Feeds the state with every record of the output topics, as they arrive."""

    name = "view-follower"

    def __init__(self, settings: Settings, state: ViewState, *, from_beginning: bool = False,
                 backfill: int = 500) -> None:
        super().__init__()
        self.settings = settings
        self.state = state
        self.from_beginning = from_beginning
        self.backfill = backfill
        self.kinds = output_topics(settings)
        self.assigned = False

    def failed(self, error: str | None) -> None:
        """Also shown on the Now page (a lost broker), until records flow again."""
        self.error = self.state.follow_error = error

    def run(self) -> None:
        consumer = _consumer(self.settings, "follow", error_cb=lambda err: self.failed(str(err)))
        try:
            consumer.assign(self._assignment(consumer))
            self.assigned = True
            self.failed(None)
            while not self._stop.is_set():
                for msg in consumer.consume(num_messages=500, timeout=0.5):
                    if msg.error() is not None:
                        continue
                    if self.error is not None:
                        self.failed(None)
                    kind = self.kinds.get(str(msg.topic()))
                    if kind is not None:
                        self.state.ingest(kind, to_record(msg))
        finally:
            consumer.close()

    def _assignment(self, consumer: Consumer) -> list[TopicPartition]:
        metadata = consumer.list_topics(timeout=10)
        out = []
        for name in self.kinds:
            meta = metadata.topics.get(name)
            if meta is None or meta.error is not None or not meta.partitions:
                raise LookupError(f"topic {name!r} does not exist (yet)")
            for p in sorted(meta.partitions):
                if self.from_beginning:
                    out.append(TopicPartition(name, p, OFFSET_BEGINNING))
                    continue
                low, high = consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10)
                out.append(TopicPartition(name, p, max(low, high - self.backfill)))
        return out


def high_watermarks(consumer: Consumer, tps: list[tuple[str, int]], timeout: float = 5.0
                    ) -> dict[tuple[str, int], int]:
    """The high watermark of each partition, right also on Tansu (module docstring)."""
    listed: dict[tuple[str, int], int] = {}
    probe: list[TopicPartition] = []
    for topic, partition in tps:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                   timeout=timeout)
        listed[(topic, partition)] = high
        if high > low:
            probe.append(TopicPartition(topic, partition, high - 1))
    if not probe:
        return listed
    consumer.assign(probe)
    try:
        pending = {(tp.topic, tp.partition) for tp in probe}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            tp = (str(msg.topic()), int(msg.partition() or 0))
            if tp in pending:
                pending.discard(tp)
                _, fetched = consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
                listed[tp] = max(listed[tp], int(fetched))
    finally:
        consumer.unassign()
    return listed


class LagProbe(_Thread):
    """Committed offsets of the worker group against high watermarks, every ``interval``."""

    name = "view-lag"

    def __init__(self, settings: Settings, state: ViewState, interval: float = 3.0,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.settings = settings
        self.state = state
        self.interval = interval
        self.clock = clock
        self._last_raw: dict[tuple[str, int], int] = {}
        self._last_time: float | None = None

    def run(self) -> None:
        probe = _consumer(self.settings, "probe", **{"fetch.wait.max.ms": 100})
        # the worker's own reader: OffsetFetch in the app's group, which it never joins
        group = BrokerReads(librdkafka_config(self.settings), self.settings.app_id)
        try:
            while not self._stop.is_set():
                self.probe_once(probe, group)
                self.error = None
                self._stop.wait(self.interval)
        except KafkaException as exc:
            self.state.set_lag([], 0, self.clock(), None, error=str(exc))
            raise
        finally:
            probe.close()
            group.close()

    def partitions(self, consumer: Consumer) -> list[tuple[str, int, str]]:
        """(topic, partition, role) of every raw and scoped partition that exists."""
        s = self.settings
        metadata = consumer.list_topics(timeout=10)
        pattern = re.compile(s.raw_topic_pattern) if s.raw_topic_pattern else None
        raw = set(s.raw_topics) if pattern is None else set()
        scoped, shards = scoped_topic(s), scoped_topic(s, "shards")
        out = []
        for name, meta in sorted(metadata.topics.items()):
            if meta.error is not None:
                continue
            if name == scoped:
                role = "decider"
            elif name == shards:
                role = "shard"
            elif name in raw or (pattern is not None and pattern.fullmatch(name)):
                role = "router"
            else:
                continue
            out += [(name, p, role) for p in sorted(meta.partitions)]
        return out

    def probe_once(self, probe: Consumer, group: BrokerReads) -> None:
        parts = self.partitions(probe)
        tps = [(t, p) for t, p, _ in parts]
        committed = group.committed(tps)
        highs = high_watermarks(probe, tps)
        now = self.clock()
        rows = [LagRow(t, p, role, int(committed.get((t, p), -1)), highs.get((t, p), 0))
                for t, p, role in parts]
        raw_now = {(r.topic, r.partition): r.high for r in rows if r.role == "router"}
        growth = sum(max(0, h - self._last_raw[tp]) for tp, h in raw_now.items()
                     if tp in self._last_raw)
        self.state.set_lag(rows, growth, now, self._last_time)
        self._last_raw, self._last_time = raw_now, now


def fetch_text(settings: Settings, state: ViewState, locator: Locator,
               timeout_s: float = 5.0) -> StoredText | None:
    """Read one routed record back from its output topic (the text left the store); None
    when retention has removed it or the broker does not answer in time."""
    reads = BrokerReads(librdkafka_config(settings), f"{settings.app_id}-view-read")
    try:
        found = read_range(reads, locator.topic, locator.partition, locator.offset,
                           locator.offset + 1, timeout_s=timeout_s)
    except RefetchError:
        return None
    finally:
        reads.close()
    for rec in found:
        if rec.offset != locator.offset:
            continue
        text = text_of(TailRecord(rec.topic, rec.partition, rec.offset, None, rec.key, rec.value,
                                  tuple(rec.headers)), state.fmt)
        if text is not None:
            state.put_text(text)
            return text
    return None
