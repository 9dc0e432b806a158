"""JSON on the data path (orjson): items, audit records, changelog and dedup output.

Only what handles items in bulk goes through here; the demo's and tools' few small
documents (reports, health answers) use the standard library's json."""

from __future__ import annotations

from typing import Any

import orjson

JSONDecodeError = orjson.JSONDecodeError


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON; dataclasses and enums are supported, keys kept in order."""
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def dumps_line(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY)
