"""The worker child process and the signal handling that stops it cleanly."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import IO, Any

from ndd_stream.cli.demo.base import Interrupted
from ndd_stream.cli.demo.view import shorten
from ndd_stream.settings import Settings

WORKER_STOP_TIMEOUT_S = 10.0
_PR_SET_PDEATHSIG = 1


# --- processes ---------------------------------------------------------------------------------
def _die_with_parent() -> None:
    """Runs in the worker child before exec: Linux SIGTERMs it if the demo dies abruptly."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def worker_env(settings: Settings) -> dict[str, str]:
    """The environment that gives a worker process exactly these Settings.

    The caller's own ``NDD_*`` variables are dropped first, so nothing from a production
    shell (brokers, SASL, topic patterns) leaks into the demo's worker.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("NDD_")}
    env.update(settings.to_env())
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class WorkerProcess:
    """``python -m ndd_stream.cli worker`` as a child, its log in a file."""

    def __init__(self, settings: Settings, log_path: Path, cwd: Path) -> None:
        self.settings = settings
        self.log_path = log_path
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ndd_stream.cli", "worker"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            env=worker_env(settings), cwd=cwd,
            # Own session: a Ctrl-C in the terminal reaches the demo only, which then stops
            # the worker gracefully instead of both racing to shut down.
            start_new_session=True, preexec_fn=_die_with_parent,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def health(self, timeout: float = 1.0) -> dict[str, Any] | None:
        """The worker's /health answer, or None while it does not answer."""
        import urllib.error
        import urllib.request

        url = f"http://127.0.0.1:{self.settings.web_port}/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                body = json.loads(response.read())
        except (OSError, ValueError, urllib.error.URLError):
            return None
        return body if isinstance(body, dict) else None

    def stop(self, timeout: float = WORKER_STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait at most ``timeout`` s, then SIGKILL; the exit code."""
        try:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.proc.wait(timeout=5)
            return self.proc.returncode
        finally:
            self._log.close()

    def log_tail(self, lines: int = 12) -> str:
        """The last log lines, JSON records shortened to ``time level logger: message``."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no worker log)"
        out = []
        for line in text.splitlines()[-lines:]:
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if isinstance(record, dict) and "message" in record:
                line = (f"{record.get('time', '')} {record.get('level', '')} "
                        f"{record.get('logger', '')}: {record['message']}")
            out.append(shorten(line, 200))
        return "\n".join(out)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C while the demo runs, so the same cleanup runs."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def sigint_blocked_in_children() -> Iterator[None]:
    """Children started inside inherit a blocked SIGINT (the mask survives fork and exec).

    A Ctrl-C in a terminal goes to the whole foreground process group. Tansu would exit at
    once (it handles SIGINT itself, so ignoring is not enough: it must be blocked), and
    the worker's graceful stop would then hang on a vanished broker until SIGKILL. With
    SIGINT blocked in the broker only the demo sees Ctrl-C and stops worker, then broker.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """During cleanup a second Ctrl-C must not leave a worker or broker behind."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

