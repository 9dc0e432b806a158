"""CLI commands around Kafka I/O: ``topics apply``, ``produce`` and ``tail``.

Each command is a plain function taking the Settings and its arguments and returning a
process exit code, so ``ndd_stream.cli`` only maps argparse onto them:

    topics apply [--create-only | --check-only] [--replication-factor N] [--timeout S]
        -> topics_apply(settings, create_only=a.create_only, check_only=a.check_only,
                        replication_factor=a.replication_factor, timeout=a.timeout)
    produce PATH [--topic T] [--rate LINES_PER_S]
        -> produce(settings, a.path, a.topic, a.rate)
    tail [TOPIC] [--from-end] [-n/--max-messages N] [--timeout S]
        -> tail(settings, a.topic, not a.from_end, a.max_messages, a.timeout)

Exit codes: 0 success, 1 the cluster differs from the definitions or data was lost,
2 bad input or configuration (no such file or topic; a login or TLS certificate the
broker refuses, a client speaking the wrong protocol), 3 the cluster did not answer or
denies an ACL the command needs (kafka/acls.py, docs/DEPLOYMENT.md).
"""

from __future__ import annotations

import threading
from pathlib import Path

from confluent_kafka import KafkaException
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ndd_stream.cli.errors import file_error
from ndd_stream.kafka.acls import (
    Acl,
    Denied,
    denied_message,
    missing,
    producer_acls,
    reader_acls,
    topics_acls,
)
from ndd_stream.kafka.config import KafkaConfigError
from ndd_stream.kafka.probe import broker_error, unreachable_message
from ndd_stream.kafka.produce import ProduceCounts, produce_file
from ndd_stream.kafka.tail import print_tail
from ndd_stream.kafka.topics import (
    ApplyReport,
    TopicDefinitionError,
    apply,
    definitions_path,
    resolve,
)
from ndd_stream.kafka.topics import load_definitions as _load_definitions
from ndd_stream.settings import Settings

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_DENIED = 3

_ACTION_STYLE = {
    "created": "green",
    "exists": "green",
    "would-create": "yellow",
    "skipped": "dim",
    "mismatch": "bold red",
    "error": "bold red",
}


def topics_apply(
    settings: Settings,
    *,
    create_only: bool = False,
    check_only: bool = False,
    replication_factor: int | None = None,
    timeout: float = 30.0,
    console: Console | None = None,
) -> int:
    """Create missing topics and check existing ones against ``topics/*.yaml``.

    argparse: ``--create-only`` (mismatches of existing topics are shown but do not fail),
    ``--check-only`` (create nothing; a missing topic fails), ``--replication-factor N``
    (overrides the files, e.g. 3 in production), ``--timeout SECONDS`` (default 30).
    Exit 0 when everything matches, 1 on a mismatch/missing topic, 2 on bad definitions,
    3 when the cluster does not answer.
    """
    console = console or Console()
    try:
        path = definitions_path(settings)
        definitions = _load_definitions(path)
        if _refused(settings, console):
            return EXIT_USAGE
        names = [t.name for t in resolve(settings, definitions,
                                         replication_factor=replication_factor)[0]]
        if _denied(settings, console, topics_acls(names), "topics apply"):
            return EXIT_DENIED
        report = apply(
            settings,
            definitions,
            create=not check_only,
            replication_factor=replication_factor,
            timeout=timeout,
        )
    except (TopicDefinitionError, KafkaConfigError) as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return EXIT_USAGE
    except KafkaException as exc:
        console.print(f"[bold red]cluster {settings.bootstrap_servers()} did not answer:[/] {exc}")
        return EXIT_UNREACHABLE
    console.print(render_report(report, title=f"topics from {path}"))
    console.print(_summary(report))
    refused = [Denied("Create", "topic", s.name) for s in report.statuses
               if s.action == "error" and any("AUTHORIZATION_FAILED" in n for n in s.notes)]
    if refused:
        console.print(f"[bold red]error:[/] "
                      f"{escape(denied_message(settings, refused, 'topics apply'))}",
                      soft_wrap=True)
        return EXIT_DENIED
    if report.errors:
        return EXIT_UNREACHABLE
    if report.missing or (report.mismatches and not create_only):
        return EXIT_MISMATCH
    return EXIT_OK


def render_report(report: ApplyReport, *, title: str = "topics") -> Table:
    """The apply report as a table: one row per topic with its diff."""
    table = Table(title=title, title_justify="left")
    table.add_column("topic", overflow="fold", min_width=12)
    table.add_column("key", style="dim")
    table.add_column("partitions", justify="right")
    table.add_column("status", no_wrap=True)
    table.add_column("details", ratio=1)
    for status in report.statuses:
        topic = status.topic
        details = [f"[red]{d}[/]" for d in status.diffs] + [f"[dim]{n}[/]" for n in status.notes]
        table.add_row(
            topic.name if topic else "-",
            topic.key if topic else status.name,
            str(topic.partitions) if topic else "-",
            f"[{_ACTION_STYLE[status.action]}]{status.action}[/]",
            "\n".join(details),
        )
    return table


def _summary(report: ApplyReport) -> str:
    counts: dict[str, int] = {}
    for status in report.statuses:
        counts[status.action] = counts.get(status.action, 0) + 1
    return ", ".join(f"{n} {action}" for action, n in sorted(counts.items()))


def produce(
    settings: Settings,
    path: Path,
    topic: str | None = None,
    rate: float | None = None,
    *,
    flush_timeout: float = 30.0,
    console: Console | None = None,
) -> int:
    """Load a JSONL file of news items into the raw topic (first of ``raw_topics``).

    Each line is sent byte-for-byte, keyed by the item's channel field and stamped with
    the send time (an archive of any age outlives retention); lines that are not a
    JSON object are sent too (unkeyed) to exercise the DLQ. argparse: ``path``,
    ``--topic NAME``, ``--rate LINES_PER_SECOND``. Exit 0 when every line was delivered.
    """
    console = console or Console(stderr=True)
    target = topic or next(iter(settings.raw_topics), None)
    if not target:
        console.print("[bold red]error:[/] no topic: give --topic or set NDD_RAW_TOPICS")
        return EXIT_USAGE
    try:  # before the broker is asked: an unreadable file is the user's to fix first
        with path.open("rb") as fh:
            fh.read(1)
    except OSError as exc:
        console.print(f"[bold red]error:[/] {escape(str(file_error(exc, path)))}",
                      soft_wrap=True)
        return EXIT_USAGE
    if rate is not None and rate <= 0:
        console.print("[bold red]error:[/] --rate must be positive")
        return EXIT_USAGE
    failed = _unreachable(settings, console, max(2.0, min(5.0, flush_timeout)))
    if failed is not None:
        return failed
    if _denied(settings, console, producer_acls(target), "produce"):
        return EXIT_DENIED
    try:
        counts = produce_file(settings, path, target, rate=rate, flush_timeout=flush_timeout)
    except KafkaConfigError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return EXIT_USAGE
    except OSError as exc:  # a read error mid-file (named by iter_lines)
        console.print(f"[bold red]error:[/] {escape(str(file_error(exc, path)))}",
                      soft_wrap=True)
        return EXIT_USAGE
    except KafkaException as exc:
        console.print(f"[bold red]produce failed:[/] {exc}")
        return EXIT_UNREACHABLE
    console.print(_produce_summary(counts, target))
    return EXIT_OK if counts.failed == 0 and counts.pending == 0 else EXIT_MISMATCH


def _produce_summary(counts: ProduceCounts, topic: str) -> str:
    lost = counts.failed + counts.pending
    style = "green" if lost == 0 else "bold red"
    return (
        f"[{style}]{counts.delivered}/{counts.sent} delivered to {topic}[/]"
        f" ({counts.lines} lines, {counts.blank} blank skipped, {counts.malformed} malformed,"
        f" {counts.unkeyed} without channel, {counts.untimed} without timestamp,"
        f" {counts.failed} failed, {counts.pending} unconfirmed)"
        + (f"; first failure: {escape(counts.first_error)}" if counts.first_error else "")
    )


def tail(
    settings: Settings,
    topic: str | None = None,
    from_beginning: bool = True,
    max_messages: int | None = None,
    timeout: float | None = None,
    *,
    console: Console | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Follow an output topic (default: the unique topic) and print records readably.

    Stops on Ctrl-C, after ``max_messages`` records or after ``timeout`` seconds.
    argparse: ``topic`` (optional), ``--from-end`` (only new records),
    ``-n/--max-messages N``, ``--timeout SECONDS``.
    """
    console = console or Console()
    target = topic or settings.unique_topic
    try:
        failed = _unreachable(settings, console, max(2.0, min(5.0, timeout or 5.0)))
        if failed is not None:
            return failed
        if _denied(settings, console, reader_acls(settings, [target]), "tail"):
            return EXIT_DENIED
        seen = print_tail(
            settings,
            [target],
            from_beginning=from_beginning,
            max_messages=max_messages,
            timeout=timeout,
            console=console,
            stop=stop,
        )
    except KeyboardInterrupt:
        return EXIT_OK
    except (LookupError, KafkaConfigError) as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return EXIT_USAGE
    except (KafkaException, RuntimeError) as exc:
        console.print(f"[bold red]tail failed:[/] {exc}")
        return EXIT_UNREACHABLE
    console.print(f"[dim]{seen} record(s) from {target}[/]")
    return EXIT_OK


def _unreachable(settings: Settings, console: Console, seconds: float = 5.0) -> int | None:
    """Say so in one line when no broker answers (instead of client retries for minutes)
    or one refuses the login or the TLS handshake; the exit code then, else None."""
    try:
        problem = broker_error(settings, seconds)
    except KafkaConfigError:
        return None  # the command itself reports it, as a usage error
    if problem is None:
        return None
    console.print(f"[bold red]error:[/] {escape(unreachable_message(settings, seconds, problem))}",
                  soft_wrap=True)
    return EXIT_USAGE if problem.refused else EXIT_UNREACHABLE


def _denied(settings: Settings, console: Console, acls: list[Acl], what: str) -> bool:
    """Say so in one line when the broker denies the principal a right of ``acls``."""
    try:
        denied = missing(settings, acls)
    except (KafkaException, KafkaConfigError, TimeoutError):
        return False  # the command's own requests report it
    if not denied:
        return False
    console.print(f"[bold red]error:[/] {escape(denied_message(settings, denied, what))}",
                  soft_wrap=True)
    return True


def _refused(settings: Settings, console: Console) -> bool:
    """Say so in one line when a broker refuses the login or the TLS handshake (known
    within a second); an absent broker is left to the command's own timeout."""
    try:
        problem = broker_error(settings, 1.5)
    except KafkaConfigError:
        return False
    if problem is None or not problem.refused:
        return False
    console.print(f"[bold red]error:[/] {escape(problem.reason)}", soft_wrap=True)
    return True
