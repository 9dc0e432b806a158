"""Apache Kafka 4.x from its Maven Central jars: a single KRaft node on loopback
(``apache_cluster.py``: three).

The broker users run, for the tests, the benchmarks and a local try-out, without Docker.
``fetch()`` resolves ``org.apache.kafka:kafka_2.13`` with its runtime dependencies and a
log4j2 SLF4J binding at Kafka's own log4j version into a cache folder (Maven's
``dependency:copy-dependencies``); ``ApacheKafka`` formats one node (broker and
controller in one process, ``StorageTool format --standalone``) in a folder of its own and
starts ``kafka.Kafka``. It is ready once an admin request is answered, not when a port
opens, and it stops with SIGTERM (a controlled shutdown), then SIGKILL.

``python -m ndd_stream.kafka.apache fetch`` fills the cache; ``... run`` starts a broker
in the foreground and prints its address (Ctrl-C stops it); ``... run --sasl-ssl DIR``
one that enforces SASL_SSL and ACLs (``secured.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Self

from ndd_stream.kafka.broker import BrokerError, EmbeddedBroker, free_port

KAFKA_VERSION = "4.3.1"
"""The Kafka release the tests, the benchmarks and the compose file's image run."""

LOG4J_VERSION = "2.25.4"
"""Kafka 4.3.1's own log4j2 (its ``log4j-core`` dependency); the SLF4J 1.x binding matches."""

_POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>ndd-stream</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>{KAFKA_VERSION}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{KAFKA_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{LOG4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
"""

# Warnings and up to a file: a test broker's INFO log costs disk and CPU for nothing.
_LOG4J2 = """Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka.server.KafkaServer
        level: INFO
      - name: kafka.server.BrokerServer
        level: INFO
"""


class KafkaRuntimeMissing(BrokerError):
    """No Java, no Maven, or no cached Kafka runtime (``fetch()`` makes one)."""


def cache_dir() -> Path:
    """``$NDD_KAFKA_HOME``, else ``~/.cache/ndd-stream/kafka-<version>``."""
    configured = os.environ.get("NDD_KAFKA_HOME")
    if configured:
        return Path(configured).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "ndd-stream" / f"kafka-{KAFKA_VERSION}"


def libs_dir() -> Path:
    return cache_dir() / "libs"


def java_bin() -> str | None:
    """The ``java`` to run: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def runtime_present() -> bool:
    """Java is there and the cache holds Kafka's jars: a broker can start without a fetch."""
    libs = libs_dir()
    return java_bin() is not None and any(libs.glob(f"kafka_2.13-{KAFKA_VERSION}.jar"))


def fetch(*, quiet: bool = True) -> Path:
    """Resolve Kafka's runtime into the cache with Maven; the folder of jars.

    Idempotent: a complete cache is kept. Raises ``KafkaRuntimeMissing`` naming what failed.
    """
    libs = libs_dir()
    if any(libs.glob(f"kafka_2.13-{KAFKA_VERSION}.jar")) and (libs / ".complete").exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaRuntimeMissing("Maven ('mvn') is not installed: it fetches Kafka's jars")
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    (root / "pom.xml").write_text(_POM)
    staging = root / f"libs.tmp-{uuid.uuid4().hex[:6]}"
    cmd = [mvn, "-B", "-f", str(root / "pom.xml"), "dependency:copy-dependencies",
           "-DincludeScope=runtime", f"-DoutputDirectory={staging}"]
    if quiet:
        cmd.insert(1, "-q")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise KafkaRuntimeMissing(
            f"mvn could not fetch kafka_2.13:{KAFKA_VERSION} (exit {done.returncode}):\n"
            f"{(done.stdout + done.stderr)[-3000:]}")
    (staging / ".complete").write_text(KAFKA_VERSION + "\n")
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    return libs


class ApacheKafka(EmbeddedBroker):
    """One Apache Kafka KRaft node (broker + controller) on ``127.0.0.1:<free port>``.

    The same life cycle as the embedded Tansu broker (``start``, ``stop``, ``pause``,
    ``resume``, a context manager), and data on disk in its own folder: a restart of the
    same object (``restart()``) keeps the topics, as a real broker does.
    """

    kind = "kafka"

    def __init__(self, *, heap_mb: int = 512, log_dir: Path | None = None,
                 start_timeout: float = 90.0, stop_timeout: float = 30.0,
                 extra_properties: dict[str, str] | None = None) -> None:
        super().__init__(log_dir=log_dir, start_timeout=start_timeout,
                         stop_timeout=stop_timeout)
        self._heap_mb = heap_mb
        self._extra = dict(extra_properties or {})
        self._controller_port: int | None = None
        self._data: Path | None = None
        self._data_tmp: tempfile.TemporaryDirectory[str] | None = None

    def start(self) -> Self:
        """Format (first start only) and start the node; return once it answers."""
        if self.is_running():
            return self
        self.launch()
        try:
            self._wait_ready()
        except BrokerError:
            self._kill()
            raise
        return self

    def launch(self) -> None:
        """Format the node's folder on its first start, then start its process without
        waiting for it to answer (the nodes of a cluster answer only once a quorum is up)."""
        java = java_bin()
        if java is None:
            raise KafkaRuntimeMissing("no Java found (JAVA_HOME or 'java' on PATH)")
        if not runtime_present():
            raise KafkaRuntimeMissing(
                f"no Kafka {KAFKA_VERSION} runtime in {libs_dir()}: "
                "run 'python -m ndd_stream.kafka.apache fetch'")
        if self._log_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ndd-kafka-log-")
            self._log_dir = Path(self._tmp.name)
        self._log_dir.mkdir(parents=True, exist_ok=True)
        if self._data is None:
            self._data_tmp = tempfile.TemporaryDirectory(prefix="ndd-kafka-")
            self._data = Path(self._data_tmp.name)
            self._assign_ports()
            self._write_config()
            self._format(java)
        self._spawn_java(java)

    def _assign_ports(self) -> None:
        self._port = free_port(self._host)
        self._controller_port = free_port(self._host)

    def restart(self, *, empty: bool = False) -> Self:
        """Stop (controlled shutdown) and start again on the same ports; with ``empty``
        the node comes back formatted anew, as a broker whose disks were lost."""
        self._kill()
        if empty and self._data is not None:
            shutil.rmtree(self._data / "log", ignore_errors=True)
            java = java_bin()
            assert java is not None
            self._format(java)
        return self.start()

    def stop(self) -> int | None:
        code = super().stop()
        if self._data_tmp is not None:
            self._data_tmp.cleanup()
            self._data_tmp = None
            self._data = None
        return code

    # --- internals ----------------------------------------------------------------------
    def _write_config(self) -> None:
        assert self._data is not None
        props = self._properties()
        props.update(self._extra)
        text = "".join(f"{k}={v}\n" for k, v in props.items())
        (self._data / "server.properties").write_text(text)
        (self._data / "log4j2.yaml").write_text(_LOG4J2)

    def _properties(self) -> dict[str, str]:
        """The node's ``server.properties``, before ``extra_properties``."""
        assert self._data is not None and self._controller_port is not None
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"{self._host}:{self._controller_port}",
            "listeners": (f"PLAINTEXT://{self._host}:{self._port},"
                          f"CONTROLLER://{self._host}:{self._controller_port}"),
            "advertised.listeners": f"PLAINTEXT://{self._host}:{self._port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self._data / "log"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            # One node: every internal topic at replication 1, few partitions (fast start).
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.segment.bytes": str(64 * 1024 * 1024),
            "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
            "num.network.threads": "2",
            "num.io.threads": "4",
        }

    def _java_cmd(self, java: str, main: str, *args: str) -> list[str]:
        assert self._data is not None
        return [java, f"-Xmx{self._heap_mb}m", f"-Xms{min(self._heap_mb, 128)}m",
                "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self._data / 'log4j2.yaml'}",
                "-cp", str(libs_dir() / "*"), main, *args]

    def _format(self, java: str) -> None:
        assert self._data is not None
        cmd = self._java_cmd(java, "kafka.tools.StorageTool", "format", *self._format_args(),
                             "-c", str(self._data / "server.properties"))
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
        if done.returncode != 0:
            raise BrokerError(f"Kafka storage format failed (exit {done.returncode}):\n"
                              f"{(done.stdout + done.stderr)[-3000:]}")

    def _format_args(self) -> list[str]:
        """A single node is its own quorum."""
        return ["--standalone", "-t", uuid.uuid4().hex[:22]]

    def _spawn_java(self, java: str) -> None:
        assert self._log_dir is not None and self._data is not None
        self.log_path = self._log_dir / f"kafka-{self._port}.log"
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in _kill
        self._proc = subprocess.Popen(
            self._java_cmd(java, "kafka.Kafka", str(self._data / "server.properties")),
            stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
            preexec_fn=self._preexec())
        self._paused = False

    def _preexec(self):  # type: ignore[no-untyped-def]
        from ndd_stream.kafka.broker import _die_with_parent

        return _die_with_parent if self._die_with_parent else None

    def __repr__(self) -> str:
        where = f"{self._host}:{self._port}" if self._port else "not started"
        state = "paused" if self._paused else ("running" if self.is_running() else "stopped")
        return f"<ApacheKafka {KAFKA_VERSION} {where} {state}>"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ndd_stream.kafka.apache",
        description=f"Apache Kafka {KAFKA_VERSION} from Maven Central, one KRaft node on "
                    "loopback (tests, benchmarks, local try-outs).")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help=f"fetch the runtime into {cache_dir()}")
    run = sub.add_parser("run", help="start a broker and keep it up until Ctrl-C")
    run.add_argument("--heap-mb", type=int, default=512)
    run.add_argument("--nodes", type=int, default=1,
                     help="3: a KRaft cluster of three nodes, replication 3, min.insync 2")
    run.add_argument("--sasl-ssl", metavar="DIR", type=Path, default=None,
                     help="one node that enforces security (kafka/secured.py): SASL_SSL with "
                     "SCRAM-SHA-512, a CA made into DIR, StandardAuthorizer, no ACL no access; "
                     "prints the administrator's NDD_* settings")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        try:
            print(fetch(quiet=False))
        except KafkaRuntimeMissing as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    try:
        fetch()
        if args.sasl_ssl is not None:
            return _run_secured(args.sasl_ssl, args.heap_mb)
        if args.nodes > 1:
            from ndd_stream.kafka.apache_cluster import KafkaCluster

            with KafkaCluster(args.nodes, heap_mb=args.heap_mb) as cluster:
                print(f"Apache Kafka {KAFKA_VERSION}, {args.nodes} nodes, ready at "
                      f"{cluster.bootstrap}", flush=True)
                with contextlib.suppress(KeyboardInterrupt):
                    while True:
                        time.sleep(3600)
            return 0
        with ApacheKafka(heap_mb=args.heap_mb) as broker:
            print(f"Apache Kafka {KAFKA_VERSION} ready at {broker.bootstrap}", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                assert broker._proc is not None
                broker._proc.wait()
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _run_secured(folder: Path, heap_mb: int) -> int:
    from ndd_stream.kafka.secured import ADMIN, MECHANISM, SecuredKafka

    with SecuredKafka(folder, heap_mb=heap_mb) as broker:
        print(f"Apache Kafka {KAFKA_VERSION} (SASL_SSL) ready; its administrator:\n"
              f"NDD_BROKERS={broker.bootstrap}\nNDD_SECURITY_PROTOCOL=SASL_SSL\n"
              f"NDD_SASL_MECHANISM={MECHANISM}\nNDD_SASL_USERNAME={ADMIN}\n"
              f"NDD_SASL_PASSWORD={broker.admin_password}\nNDD_SSL_CAFILE={broker.tls.ca}",
              flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            assert broker._proc is not None
            broker._proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
