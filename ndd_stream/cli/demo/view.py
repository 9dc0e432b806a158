"""The terminal view: a live rich display, or plain lines when stdout is not a terminal."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ndd_stream.cli.demo.tally import STATUSES, Outcome, Tally
from ndd_stream.settings import Settings

if TYPE_CHECKING:  # every ``ndd-stream`` start imports this module to register ``demo``
    from rich.console import Console, RenderableType
    from rich.live import Live
    from rich.table import Table

STATUS_STYLE = {"unique": "green", "near_duplicate": "yellow", "exact_duplicate": "magenta",
                 "dlq": "red", "new": "bold green"}


def escape(text: str) -> str:
    """rich's markup escape, imported only when the demo runs."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


# --- the display ---------------------------------------------------------------------------
def shorten(text: str, limit: int = 48) -> str:
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
                         footer=str(totals[status]), style=STATUS_STYLE[status])
    table.add_column("items", justify="right", footer=str(sum(totals.values())))
    for channel, by_status in counts.items():
        table.add_row(escape(channel), *(str(by_status.get(s, 0)) for s in STATUSES),
                      str(sum(by_status.values())))
    return table


def pairs_table(tally: Tally) -> Table:
    from rich.table import Table

    table = Table(title="latest duplicates (and new reports that resembled an earlier item)",
                  title_justify="left", expand=True)
    table.add_column("status", no_wrap=True)
    table.add_column("doc_q", justify="right", no_wrap=True)
    table.add_column("channel", no_wrap=True)
    table.add_column("item", ratio=1, overflow="ellipsis", no_wrap=True)
    table.add_column("duplicate of / resembles", ratio=1, overflow="ellipsis", no_wrap=True)
    for pair in reversed(tally.pairs):
        if pair.status == "new":  # matched_channel holds the novelty reason
            table.add_row(f"[{STATUS_STYLE['new']}]new: {pair.matched_channel}[/]",
                          f"{pair.similarity:.3f}", escape(pair.channel), escape(pair.title),
                          escape(pair.matched_title))
            continue
        other = "" if pair.matched_channel == pair.channel else f" [dim]({pair.matched_channel})[/]"
        table.add_row(
            f"[{STATUS_STYLE[pair.status]}]{pair.status.replace('_duplicate', '')}[/]",
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
            f"[bold]{escape(self.phase)}[/]  ·  {escape(t.progress())}  ·  {elapsed:5.1f} s  ·  "
            f"scope={self.settings.scope} threshold={self.settings.threshold:g}")
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
            self.console.print(f"[dim]{now - self.view.started:5.1f} s  "
                               f"{escape(t.progress())}[/]", highlight=False, soft_wrap=True)

    def _event(self, index: int | None, outcome: Outcome) -> None:
        tally = self.view.tally
        where = f"line {tally.lines[index].number}" if index is not None else "extra"
        if outcome.status == "dlq":
            self.console.print(f"  [red]dlq[/]  {escape(outcome.reason or '?')}  "
                               f"{escape(outcome.channel)}  {where}", highlight=False,
                               soft_wrap=True)
        elif outcome.novel is not None:
            self.console.print(
                f"  [{STATUS_STYLE['new']}]new report ({escape(outcome.novel)})[/] "
                f"{outcome.similarity:.3f}  {escape(outcome.channel)}  {where}: "
                f"{escape(shorten(tally.title(outcome.identity)))!r} resembles "
                f"{escape(shorten(tally.title(outcome.resembles)))!r}: "
                f"{escape(outcome.novel_detail or '')}", highlight=False, soft_wrap=True)
        elif outcome.status != "unique":
            other = ("" if outcome.matched_channel == outcome.channel
                     else f" (on {escape(outcome.matched_channel or '?')})")
            self.console.print(
                f"  [{STATUS_STYLE[outcome.status]}]{outcome.status}[/] {outcome.similarity:.3f}"
                f"  {escape(outcome.channel)}  {where}: "
                f"{escape(shorten(tally.title(outcome.identity)))!r} ~ "
                f"{escape(shorten(tally.title(outcome.duplicate_of)))!r}{other}",
                highlight=False, soft_wrap=True)


