"""The evaluation's view of a document: extracted plain text plus its gold label."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvalDoc:
    """A corpus item after text extraction, as every method sees it.

    ``timestamp`` is the stream arrival time (epoch seconds) used for routing order and
    the detection window; ``title`` feeds the string measures' title mode.
    """

    identity: str
    cluster: str
    text: str
    title: str
    timestamp: float
    markup: bool = False  # the item was HTML (the detector's novelty rule depends on it)
