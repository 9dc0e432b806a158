"""The view against the embedded broker without a worker: records written straight to the
output topics (the view only reads topics), the read-back of a text that has left memory,
and the ``ndd-stream view`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from harness.kafka import Outgoing, SettingsFactory, TopicFactory, produce, wait_until
from harness.worker import Process
from view_helpers import printed

from ndd_stream.kafka.broker import free_port
from ndd_stream.settings import Settings
from ndd_stream.view.model import Limits
from ndd_stream.view.server import ViewServer

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]

ORIGINAL = ("The harbour authority of Kelmouth said on Wednesday that the old lighthouse will "
            "be restored over the summer and opened to visitors in September.")


def _topics(settings: Settings, make_topics: TopicFactory) -> None:
    make_topics(settings.unique_topic, settings.duplicate_topic, settings.dlq_topic,
                str(settings.decisions_topic))


def _routed(identity: str, text: str, status: str = "unique") -> Outgoing:
    body = {"id": identity, "channel": "wire", "title": f"Title {identity}", "text": text,
            "timestamp": "2026-03-12T10:00:00Z"}
    return Outgoing(value=json.dumps(body).encode(), key=b"wire",
                    headers=[("ndd-identity", identity.encode()), ("ndd-status", status.encode())])


def _audit(identity: str, offset: int, duplicate_of: str | None) -> Outgoing:
    record = {"identity": identity, "status": "near_duplicate" if duplicate_of else "unique",
              "similarity": 0.9 if duplicate_of else 0.0, "duplicate_of": duplicate_of,
              "matched_channel": "wire" if duplicate_of else None, "scope": "wire",
              "channel": "wire", "time": "2026-03-12T10:00:00Z", "policy": "",
              "replayed": False, "source": f"news.raw[0]@{offset}"}
    return Outgoing(value=json.dumps(record).encode(), key=b"wire")


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_matched_text_that_left_memory_is_read_back(
        make_settings: SettingsFactory, make_topics: TopicFactory) -> None:
    settings = make_settings()
    _topics(settings, make_topics)
    # room for about three texts: "orig" leaves memory when the unrelated ones arrive
    view = ViewServer(settings, port=0, from_beginning=True, limits=Limits(text_bytes=1600))
    url = view.start()

    def read(kind: str, n: int) -> bool:
        return wait_until(lambda: view.state.read[kind] >= n, timeout=60)

    try:
        produce(settings.bootstrap_servers(), settings.unique_topic, [_routed("orig", ORIGINAL)])
        assert read("unique", 1)
        produce(settings.bootstrap_servers(), settings.unique_topic,
                [_routed(f"other{i}", f"unrelated text number {i}") for i in range(4)])
        assert read("unique", 5)
        produce(settings.bootstrap_servers(), settings.duplicate_topic,
                [_routed("copy", ORIGINAL + " Tickets are free.", "near_duplicate")])
        produce(settings.bootstrap_servers(), str(settings.decisions_topic),
                [_audit("copy", 1, "orig"), _audit("lost", 2, "ghost")])
        assert read("duplicate", 1) and read("decisions", 2)
        assert view.state.texts.get("orig") is None and "orig" in view.state.locators
        assert view.state.texts.get("copy") is not None
        status, page = _get(url + "pair?key=news.raw%5B0%5D%401")
        assert status == 200 and "Title orig" in page and "lighthouse will" in page, page
        assert "Title copy" in page and '<mark class="shared">' in page
        status, page = _get(url + "pair?key=news.raw%5B0%5D%402")
        assert status == 200 and ("the matched item <bdi>ghost</bdi> (<bdi>wire</bdi>) is no "
                                  "longer held") in page
        assert _get(url + "pair?key=nothing")[0] == 404
    finally:
        view.stop()


def test_high_watermarks_are_exact_when_the_producer_batches(
        make_settings: SettingsFactory, make_topics: TopicFactory, names: Any) -> None:
    """Tansu's ListOffsets reports the last batch's base offset + 1 (docs/TANSU.md); the
    probe's fetch gives the true high watermark."""
    from confluent_kafka import TopicPartition

    from ndd_stream.view.follow import _consumer, high_watermarks

    settings = make_settings()
    topic = names.topic("batched")
    make_topics(topic)
    produce(settings.bootstrap_servers(), topic, [Outgoing(value=b"x", partition=0)] * 10,
            one_per_batch=False, extra_config={"linger.ms": 500})
    consumer = _consumer(settings, "probe")
    try:
        listed = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        assert high_watermarks(consumer, [(topic, 0)]) == {(topic, 0): 10}
        assert high_watermarks(consumer, [(topic, 0)]) == {(topic, 0): 10}  # again, same
    finally:
        consumer.close()
    assert listed <= 10  # 1 on Tansu; 10 on Apache Kafka


def test_view_command_serves_until_interrupted(
        make_settings: SettingsFactory, make_topics: TopicFactory, tmp_path: Path) -> None:
    settings = make_settings()
    _topics(settings, make_topics)
    produce(settings.bootstrap_servers(), settings.unique_topic, [_routed("a", ORIGINAL)])
    produce(settings.bootstrap_servers(), str(settings.decisions_topic), [_audit("a", 0, None)])
    env: dict[str, Any] = {**os.environ, **settings.to_env(), "PYTHONUNBUFFERED": "1"}
    view = Process([sys.executable, "-m", "ndd_stream.cli", "view", "--port", "0",
                    "--host", "0.0.0.0", "--backfill", "10"], tmp_path / "view.log",
                   env=env).start()
    try:
        url = printed(view, r"^ndd-stream view: (http://127\.0\.0\.1:\d+/) ", 60).group(1)
        assert wait_until(lambda: "Title a" in _get(url + "decisions")[1], timeout=60)
    finally:
        code = view.stop(30)  # SIGTERM, as a container stop
    assert code == 0, view.log_tail()
    # all interfaces and no NDD_VIEW_PASSWORD: said once, on stderr
    assert "listening on 0.0.0.0 without a login" in view.log_tail(), view.log_tail()
    bad = subprocess.run([sys.executable, "-m", "ndd_stream.cli", "view", "--text-mb", "0"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr == "ndd-stream view: error: --keep-decisions and --text-mb: allowed >= 1\n"
    env["NDD_BROKERS"] = f"127.0.0.1:{free_port()}"
    gone = subprocess.run([sys.executable, "-m", "ndd_stream.cli", "view"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert gone.returncode == 3 and "no Kafka broker answers at" in gone.stderr, gone.stderr
    assert len(gone.stderr.strip().splitlines()) == 1
