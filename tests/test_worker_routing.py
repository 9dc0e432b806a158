"""The worker against the real broker: routing equals ``dedup``, DLQ, headers."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from harness.kafka import Outgoing, SettingsFactory, create_topics, produce
from harness.worker import WorkerProcess, collect, expected_decisions
from newsgen import items

from ndd_stream import jsonio
from ndd_stream.settings import Settings

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]


def _lines(records: list[dict[str, object]]) -> list[bytes]:
    return [jsonio.dumps(r) for r in records]


def _send(settings: Settings, lines: list[bytes]) -> None:
    out = []
    for line in lines:
        try:
            key = str(jsonio.loads(line).get("channel", "")).encode()
        except Exception:
            key = None
        out.append(Outgoing(value=line, key=key))
    produce(settings.bootstrap_servers(), settings.raw_topics[0], out)


BAD_LINES = [
    b"not json at all",
    b'{"id": "u8", "channel": "ch0", "text": "caf\xe9", "timestamp": 1}',
    b"[1, 2, 3]",
    b'{"id": "big", "channel": "ch0", "text": "' + b"x" * 5000 + b'", "timestamp": 1}',
    b'{"id": "nt", "channel": "ch0", "timestamp": "2026-03-01T09:00:00Z"}',
    b'{"id": "et", "channel": "ch0", "text": " <p> </p> ", "timestamp": "2026-03-01T09:00:00Z"}',
    b'{"id": "bt", "channel": "ch0", "text": "hello world", "timestamp": "soon"}',
    b'{"id": "ft", "channel": "ch0", "text": "hello world", "timestamp": "2999-01-01T00:00:00Z"}',
    b'{"id": ["x"], "channel": "ch0", "text": "hello world", "timestamp": 1}',
]
REASONS = ["not_json", "invalid_utf8", "not_object", "oversized", "missing_text",
           "empty_text", "bad_timestamp", "future_timestamp", "bad_field_type"]


def test_worker_routes_like_dedup_and_dead_letters_bad_items(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    settings = make_settings(partitions=3, max_item_bytes=4096)
    create_topics(settings)
    good = _lines(items(300, seed=5))
    lines = good[:150] + BAD_LINES + good[150:]
    _send(settings, lines)
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        routed = collect(settings, expected=len(lines), timeout=120, worker=worker)
    finally:
        worker.stop()
    want, want_invalid = expected_decisions(settings, lines)
    got = {k: v[0] for k, v in routed.decisions().items()}
    assert got == want, worker.log_tail()
    assert sum(1 for s, _, _ in want.values() if s != "unique") > 50  # the test has teeth

    dlq = routed.dlq()
    reasons = sorted((r.header("ndd-dlq-reason") or b"").decode() for r in dlq)
    assert reasons == sorted(REASONS) and Counter(reasons) == Counter(want_invalid)
    for record in dlq:
        assert record.value in BAD_LINES  # original bytes, unchanged
        assert record.header("ndd-source-topic") == settings.raw_topics[0].encode()
        assert record.header("ndd-source-offset") is not None


def test_outputs_keep_the_payload_and_explain_the_decision_in_headers(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    settings = make_settings(partitions=1)
    create_topics(settings)
    text = "The harbour fire in Oslo was put out after six hours, police said on Tuesday."
    report = ("Oslo port traffic report: {0} ships arrived and {1} left the harbour today, "
              "handling {2} mln tonnes of cargo, with {3} vessels waiting at anchor.")
    lines = [
        b'{"id": "a", "channel": "oslo", "text": "' + text.encode() + b'", '
        b'"timestamp": "2026-03-01T10:00:00Z"}',
        b'{"id": "b", "channel": "oslo", "text": "' + text.upper().encode() + b'", '
        b'"timestamp": "2026-03-01T10:30:00Z"}',
        b'{"id": "c", "channel": "oslo", "text": "' + text.replace("six", "seven").encode() +
        b'", "timestamp": "2026-03-01T11:00:00Z"}',
        # a templated report: the same words, other figures -> unique, explained (novelty)
        b'{"id": "d", "channel": "oslo", "text": "' + report.format(12, 3, "6.5", 40).encode() +
        b'", "timestamp": "2026-03-01T11:10:00Z"}',
        b'{"id": "e", "channel": "oslo", "text": "' + report.format(4, 9, "2.5", 15).encode() +
        b'", "timestamp": "2026-03-01T11:20:00Z"}',
    ]
    _send(settings, lines)
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        routed = collect(settings, expected=5, timeout=90, worker=worker)
    finally:
        worker.stop()
    by_id = {(r.header("ndd-identity") or b"").decode(): r for r in routed.records}
    assert set(by_id) == {"a", "b", "c", "d", "e"}, worker.log_tail()
    e = by_id["e"]
    assert e.topic == settings.unique_topic and e.header("ndd-status") == b"unique"
    assert (e.header("ndd-resembles"), e.header("ndd-novel")) == (b"d", b"figures")
    assert (e.header("ndd-novel-detail") or b"").startswith(b"figures differ: 12 -> 4")
    assert 0.3 <= float(e.header("ndd-similarity") or b"0") < 1.0
    assert e.header("ndd-duplicate-of") is None
    a, b, c = by_id["a"], by_id["b"], by_id["c"]
    assert a.topic == settings.unique_topic and a.value == lines[0]
    assert a.header("ndd-status") == b"unique" and a.header("ndd-duplicate-of") is None
    assert b.topic == settings.duplicate_topic and b.value == lines[1]
    assert (b.header("ndd-status"), b.header("ndd-duplicate-of"), b.header("ndd-similarity")) == (
        b"exact_duplicate", b"a", b"1.000000")
    assert b.header("ndd-matched-channel") == b"oslo"
    assert b.header("ndd-matched-time") == b"2026-03-01T10:00:00Z"
    assert c.header("ndd-status") == b"near_duplicate" and c.header("ndd-duplicate-of") == b"a"
    assert 0.8 <= float(c.header("ndd-similarity") or b"0") < 1.0
    for record in (a, b, c, e):
        assert record.header("ndd-scope") == b"oslo"
        assert (record.header("ndd-engine") or b"").startswith(b"ddd-")
        assert record.header("ndd-source-topic") == settings.raw_topics[0].encode()


def test_an_item_too_large_for_a_topic_goes_to_the_dlq_and_the_worker_goes_on(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """A real broker refuses a batch over its topic's max.message.bytes: the worker reads
    the limits at start, dead-letters an item that an output topic could not carry (it is
    under NDD_MAX_ITEM_BYTES) and decides the rest."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )
    from harness import brokers

    if not brokers.is_kafka():
        pytest.skip("the embedded Tansu broker enforces no size limit")
    settings = make_settings(partitions=1)
    create_topics(settings)
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers()})
    resource = ConfigResource(ResourceType.TOPIC, settings.unique_topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "150000",
                    incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=20)
    big = jsonio.dumps({"id": "big", "channel": "ch0", "timestamp": 1_700_000_000,
                        "text": " ".join(f"word{i}" for i in range(40_000))})
    assert 150_000 < len(big) < settings.max_item_bytes
    good = _lines(items(60, seed=9))
    lines = [*good[:30], big, *good[30:]]
    _send(settings, lines)
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        routed = collect(settings, expected=len(lines), timeout=120, worker=worker)
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()
    dlq = routed.dlq()
    assert [r.reason for r in dlq] == ["oversized"], worker.log_tail()
    detail = dlq[0].text("ndd-dlq-detail") or ""
    assert f"{settings.unique_topic} max.message.bytes" in detail, detail
    assert dlq[0].value == big
    assert len(routed.decisions()) == len(good)
