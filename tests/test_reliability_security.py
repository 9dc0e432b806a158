"""Security basics: secrets stay out of logs, metrics and health; the web endpoint binds
where it is told; a broker that refuses the credentials makes the worker fail loudly.

tests/test_broker_kafka_config.py checks the SASL_SSL/SSL client configurations and the
redaction helpers themselves; this module checks what actually gets printed: the JSON log
formatter, the Settings' printable forms, and a running worker's log, /metrics and
/health. (Size limits: tests/test_reliability_fuzz.py checks that oversized items are
dead-lettered before any JSON parsing.)
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from harness.kafka import Reader, SettingsFactory, create_topics, make_settings
from harness.scenarios import FEED_START, feed_all, news_lines
from harness.worker import WorkerProcess, events_named

from bench.extract_depth import PATTERNS, largest
from ndd_stream import jsonio
from ndd_stream.kafka.config import REDACTED, describe, librdkafka_config, redact
from ndd_stream.worker.logs import JsonFormatter

SECRET = "s3cr3t-Pa55-reliability"


def test_log_lines_and_printable_settings_never_carry_the_password() -> None:
    settings = make_settings(brokers="127.0.0.1:1", security_protocol="SASL_PLAINTEXT",
                             sasl_username="ndd", sasl_password=SECRET)
    formatter = JsonFormatter()

    def formatted(msg: str, *args: object) -> str:
        record = logging.LogRecord("ndd_stream.worker", logging.INFO, __file__, 1, msg, args,
                                   None)
        return formatter.format(record)

    lines = [
        formatted("ndd-stream worker: %s", describe(settings)),  # the worker's start line
        formatted("config %s", redact(librdkafka_config(settings))),
        formatted("settings %s", settings),
        formatted("settings %r", settings),
        settings.model_dump_json(),
        str(settings.model_dump()),
    ]
    for line in lines:
        assert SECRET not in line, line
    assert REDACTED in lines[1] and "sasl.username" in lines[1]
    # The one deliberate exception: to_env() hands the secret to a worker subprocess.
    assert settings.to_env()["NDD_SASL_PASSWORD"] == SECRET


def _get(host: str, port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=5) as resp:
        return str(resp.read().decode())


@pytest.mark.broker
@pytest.mark.timeout(120)
def test_running_worker_keeps_secrets_out_and_binds_web_host(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """PLAINTEXT broker, but SASL credentials in the environment (a config that starts):
    they appear nowhere; /metrics and /health answer on NDD_WEB_HOST only."""
    host = "127.0.0.2"  # a loopback address other than 127.0.0.1 (Linux routes 127/8)
    settings = make_settings(partitions=1, sasl_username="ndd", sasl_password=SECRET,
                             web_host=host)
    create_topics(settings)
    lines = news_lines(50, seed=31, id_prefix="s-")
    reader = Reader.outputs(settings)
    positions = feed_all(settings, lines, timeout=30)
    log_path = tmp_path / "worker.log"
    worker = WorkerProcess(settings, log_path).start()
    try:
        assert reader.wait_for(positions, timeout=60, alive=worker.alive), worker.log_tail()
        port = worker.web_port()
        assert port is not None
        metrics = _get(host, port, "/metrics")
        health = _get(host, port, "/health")
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # nothing listens on the other loopback address
        assert worker.stop() == 0
    finally:
        worker.stop()
        reader.close()
    assert "ndd_items_total" in metrics and '"status"' in health
    start = events_named(log_path, "start")
    assert start and f"http://{host}:{port}/metrics" in start[0]["message"]
    for text in (log_path.read_text(errors="replace"), metrics, health):
        assert SECRET not in text


@pytest.mark.broker
@pytest.mark.timeout(120)
def test_refused_credentials_fail_loudly_without_printing_them(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """The embedded broker does not accept this SASL login: the worker exits with code 3
    and a CRITICAL line, and neither its log nor librdkafka's output shows the password."""
    settings = make_settings(partitions=1, security_protocol="SASL_PLAINTEXT",
                             sasl_username="ndd", sasl_password=SECRET, broker_timeout_s=10.0)
    create_topics(make_settings(partitions=1))  # same names, created over PLAINTEXT
    log_path = tmp_path / "worker.log"
    worker = WorkerProcess(settings, log_path)
    code = worker.run_to_exit(timeout=60)
    assert code == 3, worker.log_tail()
    assert [e["level"] for e in events_named(log_path, "fatal")] == ["CRITICAL"]
    assert SECRET not in log_path.read_text(errors="replace")


@pytest.mark.broker
@pytest.mark.timeout(420)
def test_health_answers_within_1_s_while_2_mb_pathological_html_is_decided(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """The items that made main-content extraction quadratic (50,000 nested divs blocked
    a worker's event loop for 71 s), each at the 2 MB size cap: every one is decided (not
    dead-lettered), and /health, asked every 50 ms meanwhile, answers each time within 1 s."""
    settings = make_settings(partitions=2)
    create_topics(settings)
    cap = settings.max_item_bytes
    lines = []
    for name, pattern in PATTERNS.items():
        item = {"id": f"hostile-{name}", "channel": "hostile", "timestamp": FEED_START + 600}
        room = cap - len(jsonio.dumps({**item, "text": ""}))
        lines.append(jsonio.dumps({**item, "text": largest(pattern, room)}))
        assert cap - 100 < len(lines[-1]) <= cap
    reader = Reader.outputs(settings)
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    answered: list[float] = []
    failed: list[str] = []
    stop = threading.Event()

    def probe(port: int) -> None:
        while not stop.is_set():
            asked = time.monotonic()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    r.read()
                answered.append(time.monotonic() - asked)
            except OSError as exc:
                failed.append(f"{time.monotonic() - asked:.2f} s: {exc}")
            stop.wait(0.05)

    try:
        warm = feed_all(settings, news_lines(20, seed=7, id_prefix="w-"), timeout=60)
        assert reader.wait_for(warm, timeout=120, alive=worker.alive), worker.log_tail()
        port = worker.web_port()
        assert port is not None
        prober = threading.Thread(target=probe, args=(port,), daemon=True)
        prober.start()
        positions = feed_all(settings, lines, timeout=120)
        done = reader.wait_for(positions, timeout=300, alive=worker.alive)
        stop.set()
        prober.join(timeout=5)
    finally:
        stop.set()
        worker.stop()
        reader.close()
    assert done, worker.log_tail()
    routed = [r for r in reader.records if r.source in set(positions)]
    assert len(routed) == len(lines)
    assert all(r.reason is None and r.status is not None for r in routed), [
        (r.identity, r.status, r.reason) for r in routed]
    assert not failed, failed
    assert len(answered) >= 5 and max(answered) < 1.0, answered
    print(f"/health during {len(lines)} 2 MB hostile items: {len(answered)} answers, "
          f"max {max(answered):.3f} s")
