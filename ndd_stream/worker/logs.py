"""Structured (JSON lines) logging for the worker.

Every record carries time, level, logger and message; error records about an item
also carry ``topic``, ``partition`` and ``offset`` (passed with ``extra=``), so a log
line always says which record it is about; a line about a range of offsets adds
``last_offset`` and ``count``.
"""

from __future__ import annotations

import logging
from typing import Any

from ndd_stream.jsonio import dumps

_FIELDS = ("topic", "partition", "offset", "last_offset", "count", "event")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            # milliseconds: a start-up or a rebalance is a few seconds of many lines
            "time": f"{self.formatTime(record, '%Y-%m-%dT%H:%M:%S')}.{int(record.msecs):03d}",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return dumps(out).decode()


def json_handler() -> logging.Handler:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    return handler
