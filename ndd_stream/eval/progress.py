"""A progress bar on stderr when, and only when, stderr is a terminal (rich)."""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn


class StepProgress(AbstractContextManager["StepProgress"]):
    """Counts named steps; silent when stderr is redirected (CI logs, pipes)."""

    def __init__(self, total: int, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self.total = total

    def __enter__(self) -> StepProgress:
        if self.enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description:<28}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task("evaluating", total=self.total)
        return self

    def step(self, description: str) -> None:
        """Announce the step about to run."""
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=description)

    def advance(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.__exit__(exc_type, exc, tb)
