"""Reading a child process's output line by line with a deadline (for the view's tests)."""

from __future__ import annotations

import queue
import re
import subprocess
import threading


class Lines:
    """The lines a child prints, read by a thread (a select() on the pipe misses lines that
    are already in Python's buffer), handed out with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        stream = proc.stdout

        def pump() -> None:
            for line in stream:
                self._queue.put(line)
            self._queue.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def until(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first match of ``pattern`` in a line from here on; fails after ``timeout``."""
        try:
            while True:
                line = self._queue.get(timeout=timeout)
                assert line is not None, f"the process ended:\n{self.tail()}"
                self.seen.append(line)
                found = re.search(pattern, line)
                if found:
                    return found
        except queue.Empty:
            raise AssertionError(f"no {pattern!r} within {timeout:g} s:\n{self.tail()}") from None

    def tail(self, n: int = 40) -> str:
        return "".join(self.seen[-n:])
