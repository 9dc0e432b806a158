"""Streaming the feed into the raw topic while reading the audit topic and the DLQ."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from ndd_stream.cli.demo.base import DemoError
from ndd_stream.cli.demo.feed import FeedLine
from ndd_stream.cli.demo.process import WorkerProcess
from ndd_stream.cli.demo.tally import Tally, outcome_of_decision, outcome_of_dlq, position_of_record
from ndd_stream.cli.demo.view import Reporter
from ndd_stream.settings import Settings


class Clients:
    """The demo's producer (raw topic) and its reader of the audit topic and the DLQ."""

    def __init__(self, s: Settings) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

        from ndd_stream.kafka.config import librdkafka_config

        self.producer = Producer(librdkafka_config(s, {
            # murmur2, as Java and the worker's aiokafka: one key, one partition, in order.
            "partitioner": "murmur2_random",
            "linger.ms": 0,
            # One record per batch: Tansu reports end offsets per batch (docs/TANSU.md).
            "batch.num.messages": 1,
            "message.max.bytes": 16 * 1024 * 1024,
        }))
        self.consumer = Consumer(librdkafka_config(s, {
            "group.id": f"ndd-demo-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            # committed outputs only (exactly-once); librdkafka's default, said here
            "isolation.level": "read_committed",
        }))
        assert s.decisions_topic
        self.decisions = s.decisions_topic
        self.dlq = s.dlq_topic
        self.channel_field = s.channel_field
        metadata = self.consumer.list_topics(timeout=10)
        assignment = []
        for name in (self.decisions, self.dlq):
            meta = metadata.topics.get(name)
            if meta is None or not meta.partitions:
                raise DemoError(f"topic {name} does not exist")
            assignment += [TopicPartition(name, p, OFFSET_BEGINNING) for p in meta.partitions]
        # assign, not subscribe: no group join (3 s on Tansu), and nothing is committed.
        self.consumer.assign(assignment)

    def __enter__(self) -> Clients:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.producer.flush(2.0)
        with contextlib.suppress(Exception):
            self.consumer.close()

    def read(self, tally: Tally, timeout: float) -> int:
        """Fold what arrived on the audit topic and the DLQ into ``tally``."""
        messages = self.consumer.consume(num_messages=500, timeout=max(0.0, timeout))
        for msg in messages:
            if msg.error() is not None:
                continue
            if msg.topic() == self.decisions:
                parsed = outcome_of_decision(msg.value())
                if parsed is not None:
                    tally.add(*parsed)
            elif msg.topic() == self.dlq:
                tally.add(*outcome_of_dlq(msg.headers(), msg.value(), self.channel_field))
        return len(messages)


def stream(clients: Clients, s: Settings, rate: float, tally: Tally, reporter: Reporter,
            worker: WorkerProcess, deadline: float, timeout: float) -> None:
    """Send the lines at ``rate`` while folding in decisions, until all are accounted for."""
    topic = s.raw_topics[0]
    start = time.monotonic()

    def make_callback(index: int) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                tally.failed += 1
            else:
                position = position_of_record(msg.topic(), msg.partition(), msg.offset())
                tally.delivered_at(index, position)
        return on_delivery

    while True:
        now = time.monotonic()
        if now >= deadline:
            raise DemoError(
                f"timeout ({timeout:g} s): {tally.accounted} of {len(tally.lines)} lines "
                f"accounted for ({tally.sent} sent, {tally.delivered} delivered); see the "
                "worker log, or raise --timeout")
        code = worker.exit_code()
        if code is not None:
            raise DemoError(f"the worker exited with code {code}")
        burst = 0
        while tally.sent < len(tally.lines) and burst < 200:
            if rate > 0 and start + tally.sent / rate > time.monotonic():
                break
            line = tally.lines[tally.sent]
            _produce(clients, topic, line, make_callback(tally.sent), deadline)
            tally.sent += 1
            burst += 1
        clients.producer.poll(0)
        if tally.failed:
            raise DemoError(f"{tally.failed} line(s) could not be delivered to {topic}")
        wait = 0.05
        if rate > 0 and tally.sent < len(tally.lines):
            wait = min(wait, max(0.0, start + tally.sent / rate - time.monotonic()))
        clients.read(tally, wait)
        reporter.tick()
        if tally.complete():
            clients.producer.poll(0)
            return


def _produce(clients: Clients, topic: str, line: FeedLine,
             callback: Callable[[Any, Any], None], deadline: float) -> None:
    kwargs: dict[str, Any] = {"value": line.raw, "on_delivery": callback}
    if line.key is not None:
        kwargs["key"] = line.key
    if line.timestamp_ms is not None:
        kwargs["timestamp"] = line.timestamp_ms
    while True:
        try:
            clients.producer.produce(topic, **kwargs)
            return
        except BufferError:  # local queue full: let librdkafka drain it, within the deadline
            if time.monotonic() >= deadline:
                raise DemoError("the producer queue stayed full; is the broker up?") from None
            clients.producer.poll(0.1)


def keep_running(clients: Clients, s: Settings, tally: Tally, reporter: Reporter,
                  worker: WorkerProcess, view_url: str | None = None) -> None:
    """Stay up for the user's own experiments until Ctrl-C; keep showing new decisions."""
    console = reporter.console
    page = f" The web view: [bold]{view_url}[/]" if view_url else ""
    console.print(
        f"\n[bold]still running[/] (Ctrl-C to stop).{page} In another shell:\n"
        f"  export NDD_BROKERS={s.bootstrap_servers()}\n"
        f"  ndd-stream tail {s.duplicate_topic}        # or {s.unique_topic}, {s.dlq_topic}, "
        f"{s.decisions_topic}\n"
        f"  ndd-stream produce my-items.jsonl\n"
        f"  curl http://127.0.0.1:{s.web_port}/metrics", highlight=False, soft_wrap=True)
    reporter.follow()
    while True:
        code = worker.exit_code()
        if code is not None:
            raise DemoError(f"the worker exited with code {code}")
        clients.read(tally, 0.5)
        reporter.tick()
