"""What the web view's tests add to the harness: waiting for a line a process printed."""

from __future__ import annotations

import re

from harness.kafka import wait_until
from harness.worker import Process


def printed(process: Process, pattern: str, timeout: float) -> re.Match[str]:
    """The first match of ``pattern`` (multiline) in what ``process`` printed to its log,
    waited for at most ``timeout`` s; fails early if the process ended without it."""
    found: list[re.Match[str]] = []

    def seen() -> bool:
        match = re.search(pattern, process.log_text(), re.MULTILINE)
        if match is not None:
            found.append(match)
        return match is not None or not process.alive()

    wait_until(seen, timeout)
    assert found, f"no {pattern!r} within {timeout:g} s:\n{process.log_tail()}"
    return found[0]
