"""``ndd-stream demo`` end to end: real embedded broker, real worker process, no mocks.

The demo is the README's first command, so it must work on a fresh machine and its
numbers must be right: the worker's decisions (read back from the audit topic and the
DLQ) must equal what the offline ``ndd-stream dedup`` computes for the same feed, line
by line. Under the default channel scope every channel's items reach one worker
partition in file order, so equality is exact, not approximate.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ndd_stream.data import sample_feed
from ndd_stream.dedup import run_dedup
from ndd_stream.kafka.broker import BrokerBinaryNotFound, resolve_tansu_bin
from ndd_stream.settings import Settings

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]

FEED = Path(str(sample_feed()))


@pytest.fixture(autouse=True)
def _tansu(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        resolve_tansu_bin()
    except BrokerBinaryNotFound as exc:
        pytest.skip(f"embedded Kafka broker unavailable: {exc}")
    for name in list(os.environ):  # the offline reference uses the default settings too
        if name.startswith("NDD_"):
            monkeypatch.delenv(name)


def _clean_env() -> dict[str, str]:
    """The environment without NDD_*: the demo must need no configuration at all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NDD_")}
    env["COLUMNS"] = "160"
    return env


def _offline(feed: Path, event_order: bool = False, **overrides: Any
             ) -> dict[int, tuple[str, str | None]]:
    """line number -> (status, DLQ reason) from the offline dedup; invalid -> dlq."""
    settings = Settings(_env_file=None, **overrides)  # type: ignore[call-arg]
    sink = io.BytesIO()
    with feed.open("rb") as source:
        run_dedup(source, sink, settings.detector_config(), settings.item_format(),
                  event_order=event_order)
    out = {}
    for line in sink.getvalue().splitlines():
        record = json.loads(line)
        status = "dlq" if record["status"] == "invalid" else record["status"]
        out[record["line"]] = (status, record.get("reason"))
    return out


def _run_demo(tmp_path: Path, *args: str, timeout: float = 150.0
              ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], float]:
    report = tmp_path / "report.json"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "ndd_stream.cli", "demo", "--plain", "--timeout", "90",
         "--report", str(report), *args],
        capture_output=True, text=True, timeout=timeout, env=_clean_env(), cwd=tmp_path,
    )
    seconds = time.monotonic() - started
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr}"
    return proc, json.loads(report.read_text(encoding="utf-8")), seconds


def _counts_line(stdout: str) -> dict[str, int]:
    match = re.search(r"^counts: (.+)$", stdout, re.MULTILINE)
    assert match, stdout[-2000:]
    return {k: int(v) for k, v in (pair.split("=") for pair in match.group(1).split())}


def test_demo_matches_offline_dedup(tmp_path: Path) -> None:
    proc, report, seconds = _run_demo(tmp_path)
    offline = _offline(FEED)

    got = {item["line"]: (item["status"], item["reason"]) for item in report["lines"]}
    assert got == offline

    expected_totals = {s: 0 for s in ("unique", "near_duplicate", "exact_duplicate", "dlq")}
    for status, _ in offline.values():
        expected_totals[status] += 1
    assert report["totals"] == expected_totals
    assert _counts_line(proc.stdout) == expected_totals
    assert all(expected_totals.values()), "the feed shows every kind of outcome"

    out = proc.stdout
    assert re.search(r"metrics http://127\.0\.0\.1:\d+/metrics", out)
    assert re.search(r"view\s+http://127\.0\.0\.1:\d+/ ", out)  # the web view's URL
    assert "--scope global" in out  # the hint about cross-channel copies
    assert "dlq reasons: " in out and "bad_timestamp 1" in out
    # the templated money-market report and the wildfire follow-up: new reports, explained
    novel = {item["line"]: (item["novel"], item["resembles"]) for item in report["lines"]
             if item["novel"]}
    assert len(novel) >= 2 and {reason for reason, _ in novel.values()} == {"figures"}
    assert all(resembles for _, resembles in novel.values())
    assert "new reports: " in out
    assert seconds < 60, f"the demo took {seconds:.0f} s"


def test_demo_global_scope_and_own_feed(tmp_path: Path) -> None:
    """--feed, --scope and --threshold reach the worker; global equals dedup line by line.

    The demo keys each line by its channel, as crawlers do: under global scope the worker
    decides across the raw partitions in event-time order, as ``dedup --event-order``.
    """
    text = ("The harbour authority of Kelmouth said on Wednesday that the old lighthouse "
            "will be restored over the summer and opened to visitors in September, after "
            "a local trust raised the money needed for repairs to its lantern room.")
    base = {"title": "Kelmouth lighthouse to reopen", "text": text,
            "timestamp": "2024-03-12T10:30:00Z"}
    extra = [
        {**base, "id": "kel-a", "channel": "wire-a"},
        {**base, "id": "kel-b", "channel": "wire-b",  # a duplicate only under global scope
         "timestamp": "2024-03-12T10:31:00Z"},
    ]
    feed = tmp_path / "feed.jsonl"
    feed.write_bytes(FEED.read_bytes()
                     + "".join(json.dumps(row) + "\n" for row in extra).encode("utf-8"))

    proc, report, _ = _run_demo(tmp_path, "--feed", str(feed), "--scope", "global",
                                "--threshold", "0.8")
    assert report["scope"] == "global" and report["threshold"] == 0.8
    got = {item["line"]: (item["status"], item["reason"]) for item in report["lines"]}
    assert got == _offline(feed, event_order=True, scope="global", threshold=0.8)
    last = report["lines"][-1]
    assert (last["status"], last["duplicate_of"], last["matched_channel"]) == (
        "exact_duplicate", "kel-a", "wire-a")
    channel_scope = _offline(FEED)
    duplicates = ("near_duplicate", "exact_duplicate")
    assert (sum(s in duplicates for s, _ in got.values())
            > sum(s in duplicates for s, _ in channel_scope.values()) + 20)
    assert "matched an item of another channel" in proc.stdout
    # one of them, explained as the headers explain it
    assert re.search(r"e\.g\. \S+ on \S+: (near|exact)_duplicate of \S+ on \S+ \(doc_q",
                     proc.stdout), proc.stdout[-2000:]


def test_demo_fails_cleanly_on_a_missing_feed(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ndd_stream.cli", "demo", "--plain", "--feed",
         str(tmp_path / "nope.jsonl")],
        capture_output=True, text=True, timeout=60, env=_clean_env(),
    )
    assert proc.returncode == 2
    missing = tmp_path / "nope.jsonl"
    assert proc.stderr.strip() == f"error: --feed {missing}: No such file or directory"
    assert proc.stdout == ""
