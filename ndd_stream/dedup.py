"""``ndd-stream dedup``: run a JSONL file of news items through the core, in file order.

Streams the input: memory is bounded by the window, not by the file. ``event_order``
decides in event-time order instead (ties in file order), what the worker does for a
cross-channel scope (docs/RELIABILITY.md, "Order"); it reads the whole file first. Writes one JSON
record per input line (a decision, or ``status: invalid`` with the reason) and a
summary on stderr.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from ndd_stream.core.detector import Begun, Detector, DetectorConfig
from ndd_stream.core.document import Decision
from ndd_stream.core.items import Invalid, ItemFormat, decode_object, order_time_ms, parse_item
from ndd_stream.files import NamedSink, named, named_lines
from ndd_stream.jsonio import dumps_line


@dataclass
class DedupSummary:
    lines: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    novel: Counter[str] = field(default_factory=Counter)  # routed unique by the novelty rule
    invalid: Counter[str] = field(default_factory=Counter)
    superseded: int = 0  # keep="complete": near duplicates routed unique as fuller versions
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "statuses": dict(self.statuses),
            "novel": dict(self.novel),
            "invalid": dict(self.invalid),
            **({"superseded": self.superseded} if self.superseded else {}),
            "seconds": round(self.seconds, 3),
            "items_per_second": round(self.lines / self.seconds, 1) if self.seconds else None,
        }


def decision_record(line: int, decision: Decision) -> dict[str, Any]:
    record: dict[str, Any] = {"line": line}
    record.update(decision.as_dict())
    return record


class Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...


def run_dedup(
    source: Iterable[bytes],
    sink: Sink,
    config: DetectorConfig,
    fmt: ItemFormat,
    errors: IO[str] | None = None,
    progress_total: int | None = None,
    event_order: bool = False,
    lookup_thread: bool = False,
) -> DedupSummary:
    """Decide every line of ``source``; write records to ``sink``; report bad lines.
    ``lookup_thread``: each lookup and indexing runs on the index's own thread while the next
    line is read, parsed and signed (the ``lookup_thread`` setting): a record is then
    written once the next line is read."""
    detector = Detector(config, lookup_thread=lookup_thread)
    summary = DedupSummary()
    start = time.perf_counter()
    # One decision in flight: with the lookup thread, its lookup runs on the engine thread,
    # holding no GIL, while this one writes the last decision and reads, parses and signs
    # the next item. An item of another window is begun before the one in flight is
    # finished (windows share nothing a lookup reads: its lookup then waits for no indexing
    # of the other), one of the same window after it, so every decision is the one
    # decide() makes.
    pending: tuple[int, Begun] | None = None
    with _progress_bar(progress_total) as progress:
        task = progress.add_task("dedup", total=progress_total) if progress is not None else None
        lines: Iterable[tuple[int, bytes]] = enumerate(source, start=1)
        if event_order:
            lines = in_event_order(lines, fmt)
        for number, raw in lines:
            summary.lines += 1
            raw = raw.rstrip(b"\r\n")
            if not raw.strip():
                continue
            item = parse_item(raw, fmt, position=f"line:{number}")
            if isinstance(item, Invalid):
                if pending is not None:  # records in the order of the lines
                    _write_decision(sink, summary, pending[0], detector.finish(pending[1]))
                    pending = None
                summary.invalid[item.reason] += 1
                if errors is not None:
                    errors.write(f"line {number}: {item.reason}: {item.detail}\n")
                sink.write(dumps_line({"line": number, "status": "invalid",
                                       "reason": item.reason, "detail": item.detail}))
            else:
                signed = detector.sign(item)
                done = None
                if pending is not None and pending[1].item.doc.scope == item.scope:
                    done, pending = (pending[0], detector.finish(pending[1])), None
                begun = detector.begin(signed)
                if pending is not None:  # another window's: finished once this one is begun
                    done = pending[0], detector.finish(pending[1])
                pending = number, begun
                if done is not None:
                    _write_decision(sink, summary, *done)
                if not lookup_thread:  # nothing to overlap: its record now, not after the next line
                    _write_decision(sink, summary, number, detector.finish(pending[1]))
                    pending = None
            if progress is not None and task is not None:
                progress.update(task, advance=len(raw) + 1)
        if pending is not None:
            _write_decision(sink, summary, pending[0], detector.finish(pending[1]))
    summary.seconds = time.perf_counter() - start
    return summary


def _write_decision(sink: Sink, summary: DedupSummary, number: int, decision: Decision) -> None:
    summary.statuses[decision.status._value_] += 1
    if decision.novel is not None:
        summary.novel[decision.novel.reason] += 1
    if decision.supersedes is not None:
        summary.superseded += 1
    sink.write(dumps_line(decision_record(number, decision)))


def _progress_bar(total: int | None) -> AbstractContextManager[Any]:
    """A progress bar on a terminal's stderr (rich, imported only then), else nothing."""
    if total is None or not sys.stderr.isatty():
        return nullcontext()
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        return nullcontext()
    return Progress(TextColumn("dedup"), BarColumn(), TextColumn("{task.completed:,} lines"),
                    TimeRemainingColumn(), console=console, transient=True)


def in_event_order(lines: Iterable[tuple[int, bytes]], fmt: ItemFormat
                   ) -> list[tuple[int, bytes]]:
    """Numbered lines sorted by event time (ms, as the worker orders them), ties and lines
    without a usable time in file order (the latter first: they are rejected anyway)."""
    keyed = []
    for number, raw in lines:
        obj = decode_object(raw.rstrip(b"\r\n"), fmt) if raw.strip() else None
        ms = order_time_ms(obj, fmt, None) if isinstance(obj, dict) else None
        keyed.append(((-1 << 62) if ms is None else ms, number, raw))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [(number, raw) for _, number, raw in keyed]


def dedup_file(
    path: Path, output: Path | None, config: DetectorConfig, fmt: ItemFormat,
    event_order: bool = False, lookup_thread: bool = False,
) -> DedupSummary:
    """The CLI entry: file in, decisions to ``output`` (stdout if None), summary to stderr.

    An OSError of a read or a write names its file (as one from ``open`` does): Python
    leaves the filename of ``/proc/self/mem``'s EIO or ``/dev/full``'s ENOSPC empty."""
    with open(path, "rb") as source:
        file = open(output, "wb") if output else None  # noqa: SIM115 - closed below
        sink = NamedSink(file or sys.stdout.buffer, output or "<stdout>")
        try:
            summary = run_dedup(named_lines(source, path), sink, config, fmt,
                                errors=sys.stderr, progress_total=path.stat().st_size,
                                event_order=event_order, lookup_thread=lookup_thread)
            sink.flush()  # a full disk shows here, named, not in an unnamed close()
        except BaseException:
            if file is not None:
                with suppress(OSError):  # the error in flight says what went wrong
                    file.close()
            raise
        if file is not None:
            try:
                file.close()
            except OSError as exc:
                raise named(exc, output) from exc
    return summary

