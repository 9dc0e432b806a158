"""Candidate HTML extractors, measured by ``ndd-stream eval --extract lab-...``.

Experiments live here, outside the core, until their numbers justify moving them into
:mod:`ndd_stream.core.extract`.
"""

from __future__ import annotations

from collections.abc import Callable

LAB_EXTRACTORS: dict[str, Callable[[str], str]] = {}
