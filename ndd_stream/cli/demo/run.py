"""The run: broker, topics, worker, stream, summary, and the cleanup of all of them."""

from __future__ import annotations

import contextlib
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ndd_stream.cli.demo.base import (
    DEMO_PARTITIONS,
    DEMO_SESSION_TIMEOUT_S,
    EXIT_BROKER,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    BrokerUnavailable,
    DemoError,
    DemoOptions,
    Interrupted,
)
from ndd_stream.cli.demo.feed import FeedLine, default_feed_path, load_feed
from ndd_stream.cli.demo.process import (
    WorkerProcess,
    sigint_blocked_in_children,
    signals_ignored,
    signals_raise,
)
from ndd_stream.cli.demo.stream import Clients, keep_running, stream
from ndd_stream.cli.demo.summary import summary, write_report
from ndd_stream.cli.demo.tally import Tally
from ndd_stream.cli.demo.view import Reporter, View, escape, pairs_table
from ndd_stream.cli.errors import file_error
from ndd_stream.settings import Settings

if TYPE_CHECKING:
    from rich.console import Console


@dataclass
class Run:
    """Everything the run started, so cleanup can stop exactly that."""

    directory: Path
    temporary: bool
    broker: Any = None  # EmbeddedBroker
    worker: WorkerProcess | None = None
    web: Any = None  # ndd_stream.view.server.ViewServer
    keep_directory: bool = False

    def cleanup(self, console: Console) -> None:
        with signals_ignored():
            if self.web is not None:
                self.web.stop()
            if self.worker is not None:
                code = self.worker.stop()
                if code not in (0, None, -signal.SIGTERM):
                    console.print(f"[yellow]worker exited with code {code}[/]", highlight=False)
            if self.broker is not None:
                with contextlib.suppress(Exception):
                    self.broker.stop()
            if self.temporary and not self.keep_directory:
                import shutil

                shutil.rmtree(self.directory, ignore_errors=True)


def _make_run_dir(demo_dir: Path | None) -> tuple[Path, bool]:
    import tempfile
    from datetime import datetime

    if demo_dir is None:
        return Path(tempfile.mkdtemp(prefix="ndd-demo-")), True
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = demo_dir / f"run-{stamp}-{uuid.uuid4().hex[:4]}"
    path.mkdir(parents=True, exist_ok=False)
    return path, False


def demo_settings(settings: Settings, bootstrap: str, run_dir: Path, web_port: int) -> Settings:
    """The user's detection settings, with Kafka, state and web set up for this machine."""
    return settings.model_copy(update={
        "brokers": bootstrap,
        "security_protocol": "PLAINTEXT",
        "sasl_username": None,
        "sasl_password": None,
        "ssl_cafile": None,
        "ssl_certfile": None,
        "ssl_keyfile": None,
        "raw_topic_pattern": None,
        "decisions_topic": settings.decisions_topic or "news.decisions",
        "partitions": DEMO_PARTITIONS,
        "data_dir": run_dir / "state",
        "web_host": "127.0.0.1",
        "web_port": web_port,
        "session_timeout_s": DEMO_SESSION_TIMEOUT_S,
        # the embedded broker has no transactions (docs/RELIABILITY.md, "Exactly once")
        "guarantee": "at-least-once",
    })


def run_demo(settings: Settings, options: DemoOptions, console: Console | None = None) -> int:
    """The whole demo; returns the process exit code."""
    from rich.console import Console

    console = console or Console()
    errors = Console(stderr=True, soft_wrap=True)  # errors on stderr, one line each
    plain = options.plain or not console.is_terminal
    problem = None
    if options.rate < 0:
        problem = "--rate must be >= 0"
    elif options.timeout <= 0:
        problem = "--timeout must be positive"
    elif not 0 <= options.view_port <= 65535:
        problem = "--view-port must be 0 (any free port) to 65535"
    if problem is not None:
        errors.print(f"[bold red]error:[/] {problem}")
        return EXIT_USAGE
    if settings.scope not in ("channel", "global"):
        console.print(f"[yellow]note:[/] scope is the field {settings.scope!r}", highlight=False)
    with contextlib.ExitStack() as stack:
        feed_path = options.feed or stack.enter_context(default_feed_path())
        try:  # before the run directory exists: a bad feed leaves nothing behind
            lines = load_feed(feed_path, settings)
        except OSError as exc:  # named by iter_lines
            errors.print(f"[bold red]error:[/] {escape(str(file_error(exc, feed_path, '--feed')))}",
                         highlight=False)
            return EXIT_USAGE
        if not lines:
            errors.print(f"[bold red]error:[/] --feed {escape(str(feed_path))} holds no lines",
                         highlight=False)
            return EXIT_USAGE
        return _run(settings, options, console, errors, plain, feed_path, lines)


def _run(settings: Settings, options: DemoOptions, console: Console, errors: Console,
         plain: bool, feed_path: Path, lines: list[FeedLine]) -> int:
    started = time.monotonic()
    deadline = started + options.timeout
    try:
        run_dir, temporary = _make_run_dir(options.demo_dir)
    except OSError as exc:
        errors.print(f"[bold red]error:[/] --data-dir: {escape(str(exc))}", highlight=False)
        return EXIT_USAGE
    run = Run(run_dir, temporary)
    tally = Tally(lines)
    view = View(tally, started, settings)
    reporter = Reporter(console, view, plain)
    code = EXIT_FAILED
    try:
        with signals_raise(), reporter:
            code = _pipeline(run, settings, options, reporter, tally, feed_path, deadline)
    except Interrupted as exc:
        console.print(f"[yellow]interrupted ({exc or 'SIGINT'}): stopping worker and broker[/]",
                      highlight=False)
        code = EXIT_OK if view.phase == "running" else EXIT_INTERRUPTED
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: stopping worker and broker[/]")
        code = EXIT_OK if view.phase == "running" else EXIT_INTERRUPTED
    except BrokerUnavailable as exc:
        errors.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        code = EXIT_BROKER
    except DemoError as exc:
        errors.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        code = EXIT_FAILED
    finally:
        failed = code not in (EXIT_OK, EXIT_INTERRUPTED)
        broker_log = run.broker.log_path if run.broker is not None else None
        if failed and (run.worker is not None or broker_log is not None):
            run.keep_directory = True  # so the log paths printed here stay valid
            if run.worker is not None:
                console.print(f"worker log: {run.worker.log_path}\n"
                              f"[dim]{escape(run.worker.log_tail())}[/]", highlight=False)
            if broker_log is not None:
                console.print(f"broker log: {broker_log}", highlight=False)
            console.print(f"run directory kept: {run.directory}", highlight=False)
        run.cleanup(console)
    return code


def _pipeline(run: Run, settings: Settings, options: DemoOptions, reporter: Reporter,
              tally: Tally, feed_path: Path, deadline: float) -> int:
    from ndd_stream.kafka.broker import BrokerBinaryNotFound, BrokerError, EmbeddedBroker, free_port

    reporter.phase("starting the embedded broker")
    broker = EmbeddedBroker(log_dir=run.directory / "broker",
                            start_timeout=max(1.0, min(20.0, deadline - time.monotonic())))
    run.broker = broker
    try:
        with sigint_blocked_in_children():
            broker.start()
    except BrokerBinaryNotFound as exc:
        raise BrokerUnavailable(str(exc)) from exc
    except BrokerError as exc:
        raise BrokerUnavailable(f"the embedded broker did not start: {exc}") from exc
    s = demo_settings(settings, broker.bootstrap, run.directory, free_port())
    reporter.info(f"broker   [bold]{broker.bootstrap}[/] (Tansu, in memory)", header=True)
    reporter.info("outputs  [bold]at-least-once[/] (no transactions in the embedded broker; "
                  "exactly-once needs Apache Kafka)", header=True)

    reporter.phase("creating topics")
    _apply_topics(s, deadline)
    view_url = _start_view(run, s, options, reporter)

    reporter.phase("starting the worker (its consumer group join takes ~3 s)")
    worker = run.worker = WorkerProcess(s, run.directory / "worker.log", run.directory)
    reporter.info(f"worker   pid {worker.pid}, metrics [bold]http://127.0.0.1:{s.web_port}"
                  f"/metrics[/], log {worker.log_path}", header=True)
    reporter.info(f"feed     {feed_path} ({len(tally.lines)} lines) -> {s.raw_topics[0]}"
                  f" at {'max' if options.rate == 0 else f'{options.rate:g}'} lines/s",
                  header=True)
    _wait_ready(worker, s, deadline, options.timeout)

    reporter.phase("streaming the feed")
    from confluent_kafka import KafkaException

    try:
        clients = Clients(s)
    except KafkaException as exc:
        raise DemoError(f"cannot reach the embedded broker: {exc}") from exc
    with clients:
        stream(clients, s, options.rate, tally, reporter, worker, deadline, options.timeout)
        reporter.phase("done")
        reporter.tick(force=True)
        live = not reporter.plain
        reporter.__exit__(None, None, None)  # the live view goes; the summary stays
        if live:
            for markup in reporter.view.header:
                reporter.console.print(markup, highlight=False)
            reporter.console.print(pairs_table(tally))
        summary(reporter.console, s, tally, feed_path, time.monotonic() - reporter.view.started)
        if run.temporary and not options.keep_running:
            reporter.console.print("[dim]state and logs are removed at exit; keep them with "
                                   "--data-dir DIR[/]", highlight=False)
        if options.report is not None:
            write_report(options.report, s, tally)
        if options.keep_running:
            keep_running(clients, s, tally, reporter, worker, view_url)
    return EXIT_OK


def _start_view(run: Run, s: Settings, options: DemoOptions, reporter: Reporter) -> str:
    """The web view of this run's topics (docs/VIEW.md), read from their beginning."""
    from ndd_stream.view.server import ViewServer

    run.web = ViewServer(s, host="127.0.0.1", port=options.view_port, from_beginning=True)
    try:
        url = run.web.start()
    except OSError as exc:
        run.web = None
        raise DemoError(f"the web view could not start: {exc}") from exc
    until = "until Ctrl-C" if options.keep_running else "while the demo runs; --keep-running"
    reporter.info(f"view     [bold]{url}[/] (live decisions in a browser; {until})",
                  header=True)
    return url


def _apply_topics(s: Settings, deadline: float) -> None:
    from confluent_kafka import KafkaException

    from ndd_stream.kafka import topics

    timeout = max(1.0, min(30.0, deadline - time.monotonic()))
    try:
        report = topics.apply(s, topics.load_for(s), timeout=timeout)
    except (KafkaException, topics.TopicDefinitionError) as exc:
        raise DemoError(f"could not create the topics: {exc}") from exc
    bad = [*report.errors, *report.mismatches]
    if bad:
        details = "; ".join(f"{st.name}: {', '.join(st.diffs + st.notes)}" for st in bad)
        raise DemoError(f"topics not as defined: {details}")


def _wait_ready(worker: WorkerProcess, s: Settings, deadline: float, timeout: float) -> None:
    """Until the worker owns every scoped partition, so the stream starts in file order."""
    while True:
        code = worker.exit_code()
        if code is not None:
            raise DemoError(f"the worker exited with code {code} during startup")
        health = worker.health()
        if health is not None and len(health.get("partitions") or []) >= s.partitions:
            return
        if time.monotonic() >= deadline:
            raise DemoError(f"timeout ({timeout:g} s): the worker did not get its partitions; "
                            "see the worker log, or raise --timeout")
        time.sleep(0.2)

