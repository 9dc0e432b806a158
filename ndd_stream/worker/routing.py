"""Stage 1: raw item -> the scoped topic, keyed by comparison scope (or the DLQ).

Raw topics are keyed however producers like; deduplication needs every item of a
scope on one partition. This step reads just enough of the item to find its scope
and forwards the original bytes unchanged, with the raw position in headers.
"""

from __future__ import annotations

from ndd_stream.core.items import Invalid, ItemFormat, decode_object, order_time_ms, scope_of
from ndd_stream.worker.records import (
    H_DLQ_TRUNCATED,
    H_EVENT_TIME,
    OutRecord,
    Source,
    dlq_headers,
)


def producer_request_limit(max_item_bytes: int) -> int:
    """The worker producer's max request size: room for any item it forwards."""
    return max(1_048_576, 2 * max_item_bytes)


def dead_letter_limit(max_item_bytes: int) -> int:
    """The largest dead-letter payload kept whole (64 KiB left for headers and framing)."""
    return producer_request_limit(max_item_bytes) - 65_536


def route_raw(
    value: bytes | None, key: bytes | None, source: Source, fmt: ItemFormat,
    scoped_topic: str, dlq_topic: str, *, ordered: bool = False,
    dead_letter_bytes: int | None = None,
) -> tuple[OutRecord, Invalid | None]:
    """Where a raw record goes next, and the rejection if it goes to the DLQ. ``ordered``
    (event-time order) adds the item's event time as the ``ndd-event-time`` header;
    ``dead_letter_bytes`` caps a dead letter below the DLQ topic's size limit."""
    raw = value or b""
    obj = decode_object(raw, fmt)
    if isinstance(obj, Invalid):
        headers = dlq_headers(obj.reason, obj.detail, source)
        limit = dead_letter_limit(fmt.max_item_bytes)
        if dead_letter_bytes is not None:
            limit = min(limit, dead_letter_bytes)
        if len(raw) > limit:
            # The worker's producer could not send it (and a dead letter that cannot be
            # sent would stop the worker): keep the head of the item and its length; the
            # whole item stays in the raw topic (ndd-source-* headers say where).
            headers.append((H_DLQ_TRUNCATED, str(len(raw)).encode()))
            raw = raw[:limit]
        return OutRecord(dlq_topic, key, raw, headers), obj
    scope = scope_of(obj, fmt)
    headers = source.headers()
    if ordered:
        fallback = source.timestamp_ms / 1000 if source.timestamp_ms else None
        event_ms = order_time_ms(obj, fmt, fallback)
        if event_ms is not None:
            headers.append((H_EVENT_TIME, str(event_ms).encode()))
    return OutRecord(scoped_topic, scope.encode("utf-8"), raw, headers), None
