"""The one place that encodes and decodes JSON (orjson)."""

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
