"""Kafka records as plain data, and the header layout of every output topic.

Headers (all values UTF-8):
  ndd-status          unique | near_duplicate | exact_duplicate
  ndd-identity        the item's identity (id field, or source topic[partition]@offset)
  ndd-duplicate-of    identity of the best match (absent when unique)
  ndd-similarity      doc_q with the best match, e.g. "0.912345"
  ndd-matched-channel channel of the best match
  ndd-matched-time    event time of the best match, ISO-8601 UTC
  ndd-scope           comparison scope (channel or group)
  ndd-policy          short | empty | late (absent for a plain comparison)
  ndd-resembles       routed unique although doc_q >= threshold: the item it resembled
                      (ndd-similarity is then that doc_q); absent otherwise
  ndd-novel           why it was judged a new report: new_content | subject | headline |
                      figures | development
                      (ndd_stream.core.novelty)
  ndd-novel-detail    one human line, e.g. "figures differ: 12.5 -> 13.1, 3.2 -> 4.0"
  ndd-replayed        "1" when the item was seen before and got its original decision
  ndd-supersedes      NDD_KEEP=complete: the identity of the story's version this more complete
                      near duplicate replaces (it is routed to the unique topic)
  ndd-story           the story the item belongs to: the identity of the story's first item
                      (a chain of copies, and a follow-up on a new development, are one
                      story: docs/STORIES.md)
  ndd-engine          engine version (ndd_stream.ENGINE_VERSION)
  ndd-source-topic / ndd-source-partition / ndd-source-offset   where the raw item was read
  ndd-source-timestamp  the raw record's Kafka timestamp (ms), when it had one
  ndd-dlq-reason / ndd-dlq-detail   (DLQ records only)
  ndd-dlq-truncated   original length of an item too large for the worker's producer
                      (about 1 MiB, or 2 x max_item_bytes): the dead letter keeps its head
  ndd-order           "behind" on an item decided after the scope's event-time order had
                      passed it (its raw partition was waited for, then passed)

Scoped topic only (router -> decider, under event-time order):
  ndd-event-time      the event time (ms since the epoch) the item is ordered by
  ndd-control         "progress" on a router's progress record (value: JSON, below)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ndd_stream import ENGINE_VERSION
from ndd_stream.core.document import Decision
from ndd_stream.jsonio import JSONDecodeError, dumps, loads

Headers = list[tuple[str, bytes]]

H_STATUS = "ndd-status"
H_IDENTITY = "ndd-identity"
H_DUPLICATE_OF = "ndd-duplicate-of"
H_SIMILARITY = "ndd-similarity"
H_MATCHED_CHANNEL = "ndd-matched-channel"
H_MATCHED_TIME = "ndd-matched-time"
H_SCOPE = "ndd-scope"
H_POLICY = "ndd-policy"
H_RESEMBLES = "ndd-resembles"
H_NOVEL = "ndd-novel"
H_NOVEL_DETAIL = "ndd-novel-detail"
H_REPLAYED = "ndd-replayed"
H_STORY = "ndd-story"
H_SUPERSEDES = "ndd-supersedes"
H_ENGINE = "ndd-engine"
H_SRC_TOPIC = "ndd-source-topic"
H_SRC_PARTITION = "ndd-source-partition"
H_SRC_OFFSET = "ndd-source-offset"
H_SRC_TIMESTAMP = "ndd-source-timestamp"
H_DLQ_REASON = "ndd-dlq-reason"
H_DLQ_DETAIL = "ndd-dlq-detail"
H_DLQ_TRUNCATED = "ndd-dlq-truncated"
H_ORDER = "ndd-order"
COPY = "copy"
"""What the event-time order says of a record forwarded again and decided before (an
order note that is not written as a header)."""
H_EVENT_TIME = "ndd-event-time"
H_CONTROL = "ndd-control"

_ENGINE = ENGINE_VERSION.encode()

PROGRESS_KEY = b"ndd-progress"
PROGRESS_VERSION = 1


def kafka_timestamp_ms(message: Any) -> int | None:
    """A Faust message's Kafka timestamp in milliseconds; None when the record has none
    (Kafka's -1, or 0). Faust gives seconds (the record's milliseconds / 1000), so this
    rounds back to the record's own milliseconds rather than truncating."""
    ts = message.timestamp
    return round(ts * 1000) if ts is not None and ts > 0 else None


@dataclass(frozen=True, slots=True)
class Source:
    """Where a raw item was read: identity fallback and DLQ provenance."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None = None

    @property
    def position(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def headers(self) -> Headers:
        out = [(H_SRC_TOPIC, self.topic.encode()), (H_SRC_PARTITION, str(self.partition).encode()),
               (H_SRC_OFFSET, str(self.offset).encode())]
        if self.timestamp_ms is not None:
            out.append((H_SRC_TIMESTAMP, str(self.timestamp_ms).encode()))
        return out

    @classmethod
    def of_message(cls, message: Any) -> Source:
        """Where a Faust message was read, with its Kafka timestamp."""
        return cls(message.topic, message.partition, message.offset,
                   kafka_timestamp_ms(message))

    @classmethod
    def from_headers(cls, headers: Mapping[str, bytes]) -> Source | None:
        try:
            ts = headers.get(H_SRC_TIMESTAMP)
            return cls(headers[H_SRC_TOPIC].decode(), int(headers[H_SRC_PARTITION]),
                       int(headers[H_SRC_OFFSET]), int(ts) if ts else None)
        except (KeyError, ValueError, UnicodeDecodeError):
            return None


@dataclass(frozen=True, slots=True)
class OutRecord:
    """One record to produce."""

    topic: str
    key: bytes | None
    value: bytes | None  # None: a tombstone (the changelog's hours that left the window)
    headers: Headers
    partition: int | None = None


def header_map(headers: Iterable[tuple[str, bytes | None]] | Mapping[str, bytes] | None
               ) -> dict[str, bytes]:
    """Headers as a dict (last value wins), whatever shape the client returned."""
    if not headers:
        return {}
    items = headers.items() if isinstance(headers, Mapping) else headers
    return {str(k): (v or b"") for k, v in items}


def iso_utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")


def decision_headers(decision: Decision, source: Source | None) -> Headers:
    out: Headers = [
        (H_STATUS, decision.status.value.encode()),
        (H_IDENTITY, decision.identity.encode()),
        (H_SIMILARITY, f"{decision.similarity:.6f}".encode()),
        (H_SCOPE, decision.scope.encode()),
        (H_ENGINE, _ENGINE),
    ]
    if decision.duplicate_of is not None:
        out.append((H_DUPLICATE_OF, decision.duplicate_of.encode()))
    if decision.matched_channel is not None:
        out.append((H_MATCHED_CHANNEL, decision.matched_channel.encode()))
    if decision.matched_timestamp is not None:
        out.append((H_MATCHED_TIME, iso_utc(decision.matched_timestamp).encode()))
    if decision.policy.value:
        out.append((H_POLICY, decision.policy.value.encode()))
    if decision.novel is not None:
        out.append((H_RESEMBLES, decision.novel.resembles.encode()))
        out.append((H_NOVEL, decision.novel.reason.encode()))
        out.append((H_NOVEL_DETAIL, decision.novel.detail.encode()))
    if decision.replayed:
        out.append((H_REPLAYED, b"1"))
    if decision.story:
        out.append((H_STORY, decision.story.encode()))
    if decision.supersedes is not None:
        out.append((H_SUPERSEDES, decision.supersedes.encode()))
    if source is not None:
        out.extend(source.headers())
    return out


def dlq_headers(reason: str, detail: str, source: Source | None) -> Headers:
    out: Headers = [(H_DLQ_REASON, reason.encode()), (H_DLQ_DETAIL, detail[:500].encode()),
                    (H_ENGINE, _ENGINE)]
    if source is not None:
        out.extend(source.headers())
    return out


@dataclass(frozen=True, slots=True)
class Progress:
    """A router's word on one raw partition, sent to every scoped partition: it forwarded
    every record below ``next``, the latest event time among them is ``event_ms``, and the
    raw partition ended at ``high`` when it last fetched (None: unknown)."""

    topic: str
    partition: int
    next: int
    event_ms: int
    high: int | None

    def record(self, scoped_topic: str, scoped_partition: int) -> OutRecord:
        value = dumps({"v": PROGRESS_VERSION, "topic": self.topic, "partition": self.partition,
                       "next": self.next, "event_ms": self.event_ms, "high": self.high})
        return OutRecord(scoped_topic, PROGRESS_KEY, value, [(H_CONTROL, b"progress")],
                         partition=scoped_partition)

    @classmethod
    def parse(cls, value: bytes | None) -> Progress | None:
        """The progress in a record's value; None if it is not one this version reads."""
        try:
            data = loads(value or b"")
            if data.get("v") != PROGRESS_VERSION:
                return None
            high = data.get("high")
            return cls(str(data["topic"]), int(data["partition"]), int(data["next"]),
                       int(data["event_ms"]), None if high is None else int(high))
        except (JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
            return None


def event_time_ms(headers: Mapping[str, bytes]) -> int | None:
    """The ``ndd-event-time`` the router gave an item, if any."""
    raw = headers.get(H_EVENT_TIME)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None
