"""ndd-stream: a streaming near-duplicate filter for news (DDD over a sliding window).

The library API (docs/API.md) is exported here lazily: ``import ndd_stream`` stays cheap
(the CLI imports it first), and ``ndd_stream.Filter`` imports ``ndd_stream.api`` on first
use.
"""

import typing as _typing

__version__ = "0.1.0"
ENGINE_VERSION = "ddd-1"
"""Goes into every decision header; bump when decisions could change for the same input."""

__all__ = ["Decision", "Filter", "InvalidItem", "Similarity", "Story", "similarity", "stories"]

if _typing.TYPE_CHECKING:
    from ndd_stream.api import (
        Decision,
        Filter,
        InvalidItem,
        Similarity,
        Story,
        similarity,
        stories,
    )


def __getattr__(name: str) -> _typing.Any:
    if name in __all__:
        from ndd_stream import api

        value = getattr(api, name)
        globals()[name] = value  # once: later look-ups find it without this hook
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
