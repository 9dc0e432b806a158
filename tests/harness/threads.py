"""The process's threads as Linux lists them (``/proc/self/task``)."""

from __future__ import annotations

import contextlib
import os

TASKS = "/proc/self/task"


def engine_threads() -> int:
    """The flat index's engine threads (C threads, named ``ndd-engine``; no Python thread
    object stands for them)."""
    names = []
    for task in os.listdir(TASKS):
        with contextlib.suppress(OSError), open(f"{TASKS}/{task}/comm") as fh:
            names.append(fh.read().strip())
    return names.count("ndd-engine")
