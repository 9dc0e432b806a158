"""The record sizes the broker takes, read from the topics the worker writes.

Apache Kafka refuses a record batch larger than its topic's ``max.message.bytes`` (the
broker's ``message.max.bytes`` when the topic sets none; 1 MiB by default). A worker that
produced one would fail the whole batch and stop, so it reads the limits once at start and
(1) caps its producer's batch at the smallest of them, (2) sends an item that its topics
could not carry to the DLQ (reason ``oversized``, naming the topic and its limit), and
(3) keeps a dead letter under the DLQ topic's limit (its head, with the length).
A broker that does not report the config (the embedded Tansu broker) limits nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

log = logging.getLogger("ndd_stream.worker")

RECORD_OVERHEAD = 65_536
"""Room left in a record batch for one record's headers, key and framing: an item of up to
``limit - RECORD_OVERHEAD`` bytes fits a topic whose limit is ``limit``."""


def producer_request_limit(max_item_bytes: int) -> int:
    """The worker producer's max request size: room for any item it forwards."""
    return max(1_048_576, 2 * max_item_bytes)


def dead_letter_limit(max_item_bytes: int) -> int:
    """The largest dead-letter payload kept whole (64 KiB left for headers and framing)."""
    return producer_request_limit(max_item_bytes) - 65_536


@dataclass(frozen=True)
class WriteLimits:
    """``max.message.bytes`` per written topic (only those the broker reported)."""

    by_topic: Mapping[str, int]

    def smallest(self, topics: Sequence[str] | None = None) -> tuple[str, int] | None:
        """The topic with the smallest limit (of ``topics``, else of all), or None."""
        known = [(limit, name) for name, limit in self.by_topic.items()
                 if topics is None or name in topics]
        if not known:
            return None
        limit, name = min(known)
        return name, limit

    def batch_bytes(self, wanted: int) -> int:
        """The producer's batch size: ``wanted``, never above the smallest topic limit."""
        smallest = self.smallest()
        return wanted if smallest is None else max(16_384, min(wanted, smallest[1] - 512))

    def item_limit(self, max_item_bytes: int, carriers: Sequence[str]) -> tuple[int, str]:
        """The largest item every topic in ``carriers`` (where an item travels whole) takes,
        and what sets it: ``("max_item_bytes")`` or ``"<topic> max.message.bytes"``."""
        smallest = self.smallest(carriers)
        if smallest is None or smallest[1] - RECORD_OVERHEAD >= max_item_bytes:
            return max_item_bytes, "max_item_bytes"
        name, limit = smallest
        return max(1024, limit - RECORD_OVERHEAD), f"{name} max.message.bytes"

    def dead_letter_bytes(self, wanted: int, dlq_topic: str) -> int:
        """The largest dead-letter payload kept whole."""
        limit = self.by_topic.get(dlq_topic)
        return wanted if limit is None else max(1024, min(wanted, limit - RECORD_OVERHEAD))


NO_LIMITS = WriteLimits({})


def read_write_limits(admin: AdminClient, topics: Sequence[str],
                      timeout: float = 15.0) -> WriteLimits:
    """``max.message.bytes`` of each of ``topics`` that exists and reports it. Best effort:
    a topic the broker does not describe is left out (no limit known), with a log line."""
    wanted = sorted(set(topics))
    if not wanted:
        return NO_LIMITS
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in wanted]
    limits: dict[str, int] = {}
    try:
        futures = admin.describe_configs(resources, request_timeout=timeout)
    except KafkaException as exc:
        log.warning("could not read the topics' size limits (%s); none applied", exc)
        return NO_LIMITS
    for resource, future in futures.items():
        try:
            entries = future.result(timeout=timeout)
        except (KafkaException, TimeoutError) as exc:
            log.info("no size limit known for %s: %s", resource.name, exc)
            continue
        entry = entries.get("max.message.bytes")
        value = getattr(entry, "value", None)
        if value is not None and str(value).isdigit():
            limits[resource.name] = int(value)
    return WriteLimits(limits)
