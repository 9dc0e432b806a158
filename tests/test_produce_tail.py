"""``produce`` (JSONL -> raw topic, bytes unchanged) and ``tail`` (readable output records)."""

from __future__ import annotations

import contextlib
import io
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
from harness.kafka import (
    HANG_S,
    Names,
    Outgoing,
    SettingsFactory,
    TopicFactory,
    consume,
    produce,
)
from harness.kafka import make_settings as settings_of
from rich.console import Console

from ndd_stream.cli.io_commands import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE
from ndd_stream.cli.io_commands import produce as produce_cmd
from ndd_stream.cli.io_commands import tail as tail_cmd
from ndd_stream.kafka.broker import EmbeddedBroker, free_port
from ndd_stream.kafka.produce import parse_timestamp_ms, prepare_line
from ndd_stream.kafka.tail import TailRecord, _close_within, normalize_header, render_record
from ndd_stream.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=240, color_system=None), out


# --- line preparation -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-03-01T12:00:00Z", 1709294400000),
        ("2024-03-01T13:00:00+01:00", 1709294400000),
        ("2024-03-01T12:00:00", 1709294400000),  # naive = UTC
        ("2024-03-01T12:00:00.250Z", 1709294400250),
        (1709294400, 1709294400000),
        (1709294400.5, 1709294400500),
        ("1709294400", 1709294400000),
        (1709294400123, None),  # milliseconds: not epoch seconds, as for the detector
        ("yesterday", None),
        ("", None),
        (-5, None),
        (True, None),
        (None, None),
        ([1], None),
        (float("nan"), None),
    ],
)
def test_parse_timestamp(value: object, expected: int | None) -> None:
    assert parse_timestamp_ms(value) == expected


def test_prepare_line_keys_by_channel_and_keeps_bytes() -> None:
    settings = settings_of(channel_field="source", timestamp_fields="ts,published_at")
    line = b'{"source": "ansa", "published_at": "2024-03-01T12:00:00Z", "t": "caf\xc3\xa9"}'
    prepared = prepare_line(settings, line)
    assert prepared.value is line
    assert prepared.key == b"ansa" and prepared.timestamp_ms == 1709294400000
    assert not prepared.malformed
    assert prepare_line(settings, b'{"source": 42}').key == b"42"
    assert prepare_line(settings, b'{"source": ""}').key is None
    for bad in (b"{not json", b"[1, 2]", b'"text"'):
        prepared = prepare_line(settings, bad)
        assert prepared.malformed and prepared.key is None and prepared.timestamp_ms is None


# --- produce on the broker --------------------------------------------------------------
LINES = [
    b'{"id": "1", "channel": "ansa", "timestamp": "2024-03-01T12:00:00Z", "title": "A"}',
    b'{"id": "2", "channel": "reuters", "timestamp": 1709294460, "text": "caf\xc3\xa9 \\u00e8"}',
    b'{"id":"3","channel":"ansa","published_at":"2024-03-01T12:02:00+00:00"}   ',
    b'{"id": "4", "channel": "ansa", "timestamp": "not a time"}',
    b"{this is not json",
    b'{"id": "5", "title": "no channel"}',
]


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    """Settings naming this test's own topics (on the session's broker)."""
    return make_settings()


@pytest.mark.broker
def test_produce_sends_original_bytes_keyed_and_timed(
    broker: EmbeddedBroker, settings: Settings, make_topics: TopicFactory,
    tmp_path: Path,
) -> None:  # fmt: skip
    raw = settings.raw_topics[0]
    make_topics(raw, partitions=3)
    path = tmp_path / "items.jsonl"
    # CRLF on one line, a blank line, and no newline at the very end.
    path.write_bytes(LINES[0] + b"\n" + LINES[1] + b"\r\n" + b"\n" + b"\n".join(LINES[2:]))
    console, out = _console()
    sent_from = int(time.time() * 1000) - 1000
    assert produce_cmd(settings, path, console=console) == EXIT_OK
    summary = out.getvalue()
    assert "6/6 delivered" in summary, summary
    assert "1 blank skipped" in summary and "1 malformed" in summary
    assert "2 without channel" in summary and "3 without timestamp" in summary

    records = consume(broker.bootstrap, raw, n=6, timeout=20)
    assert sorted(r.value or b"" for r in records) == sorted(LINES)
    by_value = {r.value: r for r in records}
    assert by_value[LINES[0]].key == b"ansa"
    # stamped when sent, not with the items' 2024 event times: retention counts from now
    assert all(r.timestamp_ms is not None and r.timestamp_ms >= sent_from for r in records)
    assert by_value[LINES[4]].key is None
    assert by_value[LINES[5]].key is None
    # One channel, one partition: what the worker's per-channel order relies on.
    ansa = {r.partition for r in records if r.key == b"ansa"}
    assert len(ansa) == 1


@pytest.mark.broker
def test_produce_delivers_an_item_stamped_hours_ahead(
    broker: EmbeddedBroker, settings: Settings, make_topics: TopicFactory, tmp_path: Path,
) -> None:  # fmt: skip
    """Apache Kafka refuses records stamped over an hour ahead: every line is sent with
    the producer's clock, its event time stays in the item for the worker."""
    raw = settings.raw_topics[0]
    make_topics(raw)
    ahead = int(time.time()) + 3 * 3600
    line = b'{"id": "f", "channel": "ansa", "timestamp": %d, "text": "later"}' % ahead
    path = tmp_path / "items.jsonl"
    path.write_bytes(line + b"\n")
    console, out = _console()
    assert produce_cmd(settings, path, console=console) == EXIT_OK, out.getvalue()
    assert "1/1 delivered" in out.getvalue()
    (record,) = consume(broker.bootstrap, raw, n=1, timeout=20)
    assert record.value == line
    assert record.timestamp_ms is not None and record.timestamp_ms < ahead * 1000


@pytest.mark.broker
def test_produce_rate_and_explicit_topic(
    broker: EmbeddedBroker, settings: Settings, make_topics: TopicFactory,
    names: Names, tmp_path: Path,
) -> None:  # fmt: skip
    topic = names.topic("replay")
    make_topics(topic)
    path = tmp_path / "items.jsonl"
    path.write_bytes(b"\n".join(b'{"channel": "c%d"}' % i for i in range(20)) + b"\n")
    started = time.monotonic()
    assert produce_cmd(settings, path, topic=topic, rate=50.0) == EXIT_OK
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < HANG_S, elapsed  # 20 lines at 50/s: about 0.4 s
    assert len(consume(broker.bootstrap, topic, n=20, timeout=20)) == 20


def test_produce_usage_errors(tmp_path: Path) -> None:
    settings = settings_of(brokers=f"127.0.0.1:{free_port()}")
    console, out = _console()
    assert produce_cmd(settings, tmp_path / "missing.jsonl", console=console) == EXIT_USAGE
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"{}\n")
    assert produce_cmd(settings_of(raw_topics=""), path, console=console) == EXIT_USAGE
    assert produce_cmd(settings, path, rate=0, console=console) == EXIT_USAGE
    assert f"{tmp_path / 'missing.jsonl'}: No such file or directory" in out.getvalue()
    assert "no topic" in out.getvalue()


def test_produce_to_an_unreachable_cluster_says_so_in_one_line(tmp_path: Path) -> None:
    settings = settings_of(brokers=f"127.0.0.1:{free_port()}")
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"channel": "a"}\n{"channel": "b"}\n')
    console, out = _console()
    assert produce_cmd(settings, path, console=console, flush_timeout=1.0) == EXIT_UNREACHABLE
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        f"error: no Kafka broker answers at {settings.bootstrap_servers()} (NDD_BROKERS) "
        "after 2 s: ")


# --- tail -------------------------------------------------------------------------------
DECISION = [
    ("ndd-status", b"near_duplicate"),
    ("ndd-duplicate-of", b"item-17"),
    ("ndd-similarity", b"0.912345"),
    ("ndd-matched-channel", b"ansa"),
    ("ndd-matched-time", b"2024-03-01T11:00:00Z"),
    ("ndd-scope", b"ansa"),
    ("ndd-engine", b"1"),
]


def test_render_record_shows_decision_title_and_text() -> None:
    settings = settings_of()
    value = orjson.dumps(
        {"id": "x", "title": "Rome  mayor\nopens line", "text": "<p>The <b>new</b> metro</p>"}
    )
    record = TailRecord("news.duplicate", 2, 41, 1709294400000, b"ansa", value, tuple(DECISION))
    console, out = _console()
    console.print(render_record(settings, record))
    text = out.getvalue()
    assert "news.duplicate[2]@41" in text and "2024-03-01T12:00:00Z" in text
    assert "NEAR_DUPLICATE" in text and "duplicate_of=item-17" in text
    assert "similarity=0.912345" in text and "matched_channel=ansa" in text
    assert "ndd-engine=1" in text
    assert "Rome mayor opens line" in text and "The new metro" in text
    assert text.index("similarity") < text.index("matched_channel") < text.index("scope=")

    console, out = _console()
    broken = TailRecord("news.dlq", 0, 0, None, None, b"\xff{oops", (("ndd-dlq-reason", b"json"),))
    console.print(render_record(settings, broken))
    assert "not a JSON object" in out.getvalue() and "dlq_reason=json" in out.getvalue()
    assert normalize_header("NDD-Matched-Time") == "matched_time"
    assert normalize_header("x-scope") == "scope"


def test_render_record_explains_a_new_report() -> None:
    """An item routed unique by the novelty rule: what it resembled and why it is new, from
    the headers of news.unique and from the audit record's body alike."""
    settings = settings_of()
    headers = (("ndd-status", b"unique"), ("ndd-similarity", b"0.812000"),
               ("ndd-resembles", b"item-17"), ("ndd-novel", b"figures"),
               ("ndd-novel-detail", b"figures differ: 420 -> 275, 310 -> 190"))
    value = orjson.dumps({"id": "x", "title": "Money market help", "text": "Bank provided"})
    audit = orjson.dumps({"identity": "x", "status": "unique", "similarity": 0.812,
                          "novel": {"reason": "figures", "resembles": "item-17",
                                    "similarity": 0.812, "only_new": ["275"],
                                    "only_old": ["420"],
                                    "detail": "figures differ: 420 -> 275, 310 -> 190"}})
    for record in (TailRecord("news.unique", 0, 3, None, b"k", value, headers),
                   TailRecord("news.decisions", 0, 3, None, b"k", audit, ())):
        console, out = _console()
        console.print(render_record(settings, record))
        text = out.getvalue()
        assert "UNIQUE" in text and "resembles=item-17" in text and "novel=figures" in text
        assert "new report (figures), resembles item-17: figures differ: 420 -> 275" in text
        assert "ndd-novel-detail" not in text


def test_render_record_writes_out_control_and_bidi_characters() -> None:
    """Item text is the producer's: an ESC sequence would drive the terminal, a bidi
    override reorder the line. Everything tail prints shows them as escapes."""
    settings = settings_of()
    evil = "\x1b]0;pwned\x07\x1b[2J\u202eevil\u2066\x9b31m\x7f\x00"
    value = orjson.dumps({"id": evil, "channel": evil, "title": "T" + evil, "text": evil + "x"})
    headers = (("ndd-status", b"unique"), ("ndd-identity", evil.encode()),
               ("x-" + evil, evil.encode()), ("ndd-novel-detail", evil.encode()))
    for record in (TailRecord("news.unique", 0, 1, None, evil.encode(), value, headers),
                   TailRecord("news.dlq", 0, 2, None, None, evil.encode(), ())):
        console, out = _console()
        console.print(render_record(settings, record))
        text = out.getvalue()
        controls = [c for c in text if c != "\n" and (
            ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f or c in "\u202e\u2066\u200e\u061c")]
        assert not controls, controls
        assert "\\x1b]0;pwned\\x07" in text and "\\u202eevil\\u2066" in text


@pytest.mark.broker
def test_tail_prints_records_until_the_bounds(
    broker: EmbeddedBroker, settings: Settings, make_topics: TopicFactory,
) -> None:  # fmt: skip
    topic = settings.duplicate_topic
    make_topics(topic, partitions=2)
    values = [orjson.dumps({"title": f"headline {i}", "text": f"body {i}"}) for i in range(3)]
    produce(broker.bootstrap, topic, [Outgoing(v, key=b"ansa", headers=DECISION) for v in values])

    console, out = _console()
    assert tail_cmd(settings, topic, max_messages=3, timeout=20, console=console) == EXIT_OK
    text = out.getvalue()
    assert text.count("NEAR_DUPLICATE") == 3 and "headline 2" in text and "body 0" in text
    assert "3 record(s)" in text

    console, out = _console()
    started = time.monotonic()
    assert tail_cmd(settings, topic, from_beginning=False, timeout=1.5, console=console) == 0
    assert time.monotonic() - started < HANG_S
    assert "0 record(s)" in out.getvalue()

    console, out = _console()
    assert tail_cmd(settings, "no-such-topic-xyz", timeout=5, console=console) == EXIT_USAGE
    assert "does not exist" in out.getvalue()


def _tail_stop_seconds(bootstrap: str, topic: str, signum: int = signal.SIGINT) -> float:
    """Start ``ndd-stream tail`` on ``topic`` (holding one record), send ``signum`` once it
    printed that record (so the handler is installed and the poll loop runs), and return
    how long it took to exit with 0 and its summary line. Bounded: fails after 15 s, with
    every thread's stack (SIGUSR1) in the message."""
    script = (  # the command line's own path (its handler ends the process on a signal)
        "import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True);"
        "from ndd_stream.cli.main import main; sys.exit(main(['tail']))"
    )
    env = {**os.environ, "NDD_BROKERS": bootstrap, "NDD_UNIQUE_TOPIC": topic,
           "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "tail printed nothing within 60 s"
        line = proc.stdout.readline()
        assert topic in line.decode(), line
        proc.send_signal(signum)
        sent = time.monotonic()
        try:
            code = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)  # time for the dump
            proc.kill()
            out, _ = proc.communicate(timeout=10)
            pytest.fail(f"tail did not stop within 15 s of signal {signum}:\n"
                        + out.decode(errors="replace"))
        took = time.monotonic() - sent
        rest = proc.stdout.read().decode(errors="replace")
        assert code == 0, rest
        assert "1 record(s) from" in rest, rest  # the loop saw the flag and ended normally
        return took
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


@pytest.mark.broker
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_tail_stops_cleanly_on_ctrl_c(
    broker: EmbeddedBroker, settings: Settings, make_topics: TopicFactory, signum: int,
) -> None:  # fmt: skip
    make_topics(settings.unique_topic)
    produce(broker.bootstrap, settings.unique_topic, [b'{"title": "first"}'])
    _tail_stop_seconds(broker.bootstrap, settings.unique_topic, signum)


@pytest.mark.slow
@pytest.mark.broker
@pytest.mark.timeout(1800)
def test_tail_stops_within_2_s_of_ctrl_c_50_times_under_load(
    broker: EmbeddedBroker, settings: Settings, make_topics: TopicFactory, long_run: None,
) -> None:  # fmt: skip
    """The issue's target: 50 of 50 within 2 s, with two CPU-bound processes running."""
    make_topics(settings.unique_topic)
    produce(broker.bootstrap, settings.unique_topic, [b'{"title": "first"}'])
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        times = [_tail_stop_seconds(broker.bootstrap, settings.unique_topic)
                 for _ in range(50)]
    finally:
        for burner in burners:
            burner.kill()
            burner.wait(timeout=10)
    times.sort()
    print(f"tail stop after SIGINT, 50 runs under load: median {times[25]:.3f} s, "
          f"max {times[-1]:.3f} s, over 2 s: {sum(t > 2 for t in times)}")
    assert times[-1] <= 2.0, times


def test_tail_close_gives_up_on_a_consumer_that_does_not_close() -> None:
    """Ctrl-C must not hang on librdkafka's close (see tail._close_within); a close that
    returns is still waited for."""
    release = threading.Event()
    closed: list[bool] = []

    class Stuck:
        def close(self) -> None:
            release.wait(30)

    class Prompt:
        def close(self) -> None:
            closed.append(True)

    started = time.monotonic()
    _close_within(Stuck(), 0.2)  # type: ignore[arg-type]
    assert time.monotonic() - started < 10
    release.set()
    _close_within(Prompt(), 10)  # type: ignore[arg-type]
    assert closed == [True]
