"""Worker processes for tests: start, kill -9, stop, read their logs and metrics, and what
``ndd-stream dedup`` decides for the same input (the reference every worker test uses).

A worker is a subprocess (so tests can kill -9 it) configured only through NDD_*
variables built from a Settings object. Its JSON log goes to a file that failing tests
print.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.kafka import Reader, Record, wait_until
from ndd_stream import jsonio
from ndd_stream.dedup import run_dedup
from ndd_stream.settings import Settings

Decided = tuple[str, str | None, str]  # status, duplicate_of, story


class Process:
    """A subprocess with its output in a log file; stopped with SIGTERM like a pod."""

    def __init__(self, argv: Sequence[str], log_path: Path, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with open(self.log_path, "ab") as log:  # the child keeps its own handle
            self.proc = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=15)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, bounded wait, then SIGKILL; the exit code (None if never started)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code once it exits on its own within ``timeout`` (else None)."""
        assert self.proc is not None
        proc = self.proc
        wait_until(lambda: proc.poll() is not None, timeout)
        return proc.poll()

    def run_to_exit(self, timeout: float) -> int | None:
        """Start a process expected to exit on its own; its exit code within ``timeout``
        (else None), and it is stopped either way."""
        self.start()
        try:
            return self.wait_exit(timeout)
        finally:
            self.stop()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def story(self, lines: int = 60) -> str:
        """The worker's own lines and every warning or worse, the last ``lines`` of them:
        what a failed wait prints, so a CI log tells what the worker was doing."""
        kept = [line for line in self.log_text().splitlines()
                if '"logger":"ndd_stream' in line or '"level":"INFO"' not in line]
        return f"--- {self.log_path.name}\n" + "\n".join(
            line[:600] for line in kept[-lines:])


class WorkerProcess(Process):
    """``ndd-stream worker`` with these settings (as NDD_* variables).

    ``python``: the interpreter that runs it (default this one), so a benchmark can drive
    another revision's workers from its own venv.
    """

    def __init__(self, settings: Settings, log_path: Path, python: str | None = None) -> None:
        super().__init__([python or sys.executable, "-m", "ndd_stream.cli", "worker"], log_path,
                         env={**os.environ, **settings.to_env(), "PYTHONUNBUFFERED": "1"})
        self.settings = settings

    def events(self, event: str) -> list[dict[str, Any]]:
        return events_named(self.log_path, event)

    def wait_event(self, event: str, timeout: float) -> bool:
        return wait_until(lambda: bool(self.events(event)), timeout)

    def web_port(self, timeout: float = 60.0) -> int | None:
        """The metrics port it announced in its start line."""
        found: list[str] = []

        def announced() -> bool:
            found[:] = re.findall(r"metrics on http://[^:]+:(\d+)/metrics", self.log_text())
            return bool(found)

        return int(found[-1]) if wait_until(announced, timeout) else None

    def decided(self) -> float:
        """Items it has decided so far, from its metrics (0 if not reachable)."""
        port = self.web_port(timeout=0.0)
        if port is None:
            return 0.0
        try:
            return metric_sum(scrape(port, timeout=2.0), "ndd_items_total")
        except OSError:
            return 0.0


def log_events(log_path: Path) -> list[dict[str, Any]]:
    """The JSON log lines of a worker log (other lines skipped)."""
    if not log_path.exists():
        return []
    out = []
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            with contextlib.suppress(Exception):
                out.append(jsonio.loads(line))
    return out


def events_named(log_path: Path, event: str) -> list[dict[str, Any]]:
    return [e for e in log_events(log_path) if e.get("event") == event]


Metrics = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int, timeout: float = 5.0, host: str = "127.0.0.1") -> Metrics:
    """Prometheus text of http://host:port/metrics as {(name, labels): value}."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as resp:
        body = resp.read().decode()
    out: Metrics = {}
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)$', line)
        if not m:
            continue
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def metric_sum(metrics: Metrics, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in metrics.items() if n == name and want <= set(ls))


# --- outputs and the reference ------------------------------------------------------


@dataclass
class Routed:
    """Every output record of a worker."""

    records: list[Record]

    def decisions(self) -> dict[str, list[Decided]]:
        """Every decision, by item identity (a redelivered item has several)."""
        out: dict[str, list[Decided]] = {}
        for r in self.records:
            if r.status is not None:
                out.setdefault(r.identity or "", []).append(
                    (r.status, r.duplicate_of, r.story or ""))
        return out

    def dlq(self) -> list[Record]:
        return [r for r in self.records if r.reason is not None]


def collect(settings: Settings, expected: int, timeout: float,
            worker: Process | None = None) -> Routed:
    """Read unique + duplicate + DLQ until ``expected`` raw records are accounted for."""
    with Reader.outputs(settings) as reader:
        reader.wait_count(expected, timeout, alive=worker.alive if worker else None)
        return Routed(reader.records)


def expected_decisions(settings: Settings, lines: list[bytes]
                       ) -> tuple[dict[str, Decided], dict[str, int]]:
    """What ``ndd-stream dedup`` decides for the same items: by identity, and DLQ reasons."""
    sink = io.BytesIO()
    run_dedup(io.BytesIO(b"\n".join(lines) + b"\n"), sink, settings.detector_config(),
              settings.item_format())
    decided: dict[str, Decided] = {}
    invalid: dict[str, int] = {}
    for line in sink.getvalue().splitlines():
        rec: dict[str, Any] = jsonio.loads(line)
        if rec["status"] == "invalid":
            invalid[rec["reason"]] = invalid.get(rec["reason"], 0) + 1
        else:
            decided[rec["identity"]] = (rec["status"], rec["duplicate_of"], rec["story"])
    return decided, invalid
