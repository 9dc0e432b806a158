"""Run real ``ndd-stream worker`` processes against the test broker, and check routing.

A worker is a subprocess (so tests can kill -9 it) configured only through NDD_*
variables built from a Settings object. Its JSON log goes to a file that failing
tests print.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka_helpers import Reader, Record

from ndd_stream import jsonio
from ndd_stream.core.detector import DetectorConfig
from ndd_stream.core.items import ItemFormat
from ndd_stream.dedup import run_dedup
from ndd_stream.settings import Settings


class WorkerProcess:
    def __init__(self, settings: Settings, log_path: Path) -> None:
        self.settings = settings
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        env = {**os.environ, **self.settings.to_env(), "PYTHONUNBUFFERED": "1"}
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen([sys.executable, "-m", "ndd_stream.cli", "worker"],
                                     env=env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        log.close()
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=15)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, bounded wait, then SIGKILL; the exit code."""
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

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Routed:
    """Every output record, by item identity."""

    records: list[Record]

    def decisions(self) -> dict[str, list[tuple[str, str | None]]]:
        out: dict[str, list[tuple[str, str | None]]] = {}
        for r in self.records:
            status = r.header("ndd-status")
            if status is None:
                continue
            identity = (r.header("ndd-identity") or b"").decode()
            dup = r.header("ndd-duplicate-of")
            out.setdefault(identity, []).append((status.decode(),
                                                 dup.decode() if dup else None))
        return out

    def dlq(self) -> list[Record]:
        return [r for r in self.records if r.header("ndd-dlq-reason") is not None]


def collect(settings: Settings, expected: int, timeout: float,
            worker: WorkerProcess | None = None) -> Routed:
    """Read unique + duplicate + DLQ until ``expected`` distinct inputs are accounted for."""
    topics = [settings.unique_topic, settings.duplicate_topic, settings.dlq_topic]
    deadline = time.monotonic() + timeout
    # One reader for the whole wait: with a fresh one per round, the round that met the
    # deadline could be cut short and return almost nothing (a CI run saw no decision).
    with Reader(settings.brokers, topics, timeout=min(10.0, timeout)) as reader:
        while time.monotonic() < deadline:
            records = reader.read(timeout=min(2.0, max(0.0, deadline - time.monotonic())))
            routed = Routed(records)
            accounted = len(routed.decisions()) + len({_src(r) for r in routed.dlq()})
            if accounted >= expected:
                return routed
            if worker is not None and not worker.alive():
                break
        return Routed(reader.records)


def _src(record: Record) -> str:
    """Where a dead-lettered item was read: topic[partition]@offset. The partition matters:
    unkeyed bad items land on random partitions, and two at the same offset of different
    partitions were counted as one, so collect() waited out its whole timeout."""
    def header(name: str) -> str:
        return (record.header(name) or b"").decode()

    return (f"{header('ndd-source-topic')}[{header('ndd-source-partition')}]"
            f"@{header('ndd-source-offset')}")


def expected_decisions(settings: Settings, lines: list[bytes]
                       ) -> tuple[dict[str, tuple[str, str | None]], dict[str, int]]:
    """What ``ndd-stream dedup`` decides for the same items: by identity, and DLQ reasons."""
    sink = io.BytesIO()
    config: DetectorConfig = settings.detector_config()
    fmt: ItemFormat = settings.item_format()
    run_dedup(io.BytesIO(b"\n".join(lines) + b"\n"), sink, config, fmt)
    decided: dict[str, tuple[str, str | None]] = {}
    invalid: dict[str, int] = {}
    for line in sink.getvalue().splitlines():
        rec: dict[str, Any] = jsonio.loads(line)
        if rec["status"] == "invalid":
            invalid[rec["reason"]] = invalid.get(rec["reason"], 0) + 1
        else:
            decided[rec["identity"]] = (rec["status"], rec["duplicate_of"])
    return decided, invalid
