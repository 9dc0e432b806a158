"""Stage 1: raw item -> the scoped topic, keyed by comparison scope (or the DLQ).

Raw topics are keyed however producers like; deduplication needs every item of a
scope on one partition. This step reads just enough of the item to find its scope
and forwards the original bytes unchanged, with the raw position in headers.
"""

from __future__ import annotations

from ndd_stream.core.items import Invalid, ItemFormat, decode_object, scope_of
from ndd_stream.worker.records import OutRecord, Source, dlq_headers


def route_raw(
    value: bytes | None, key: bytes | None, source: Source, fmt: ItemFormat,
    scoped_topic: str, dlq_topic: str,
) -> tuple[OutRecord, Invalid | None]:
    """Where a raw record goes next, and the rejection if it goes to the DLQ."""
    raw = value or b""
    obj = decode_object(raw, fmt)
    if isinstance(obj, Invalid):
        return OutRecord(dlq_topic, key, raw, dlq_headers(obj.reason, obj.detail, source)), obj
    scope = scope_of(obj, fmt)
    return OutRecord(scoped_topic, scope.encode("utf-8"), raw, source.headers()), None
