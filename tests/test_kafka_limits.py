"""The size limits a worker derives from its topics' ``max.message.bytes`` (pure)."""

from __future__ import annotations

from ndd_stream.kafka.limits import NO_LIMITS, RECORD_OVERHEAD, WriteLimits


def test_no_reported_limit_limits_nothing() -> None:
    assert NO_LIMITS.batch_bytes(512 << 10) == 512 << 10
    assert NO_LIMITS.item_limit(2_000_000, ["a"]) == (2_000_000, "max_item_bytes")
    assert NO_LIMITS.dead_letter_bytes(4_000_000, "dlq") == 4_000_000


def test_the_smallest_topic_sets_the_batch_and_the_item_limit() -> None:
    limits = WriteLimits({"scoped": 8 << 20, "unique": 1_048_588, "audit": 300_000})
    assert limits.smallest() == ("audit", 300_000)
    assert limits.batch_bytes(512 << 10) == 300_000 - 512
    assert limits.batch_bytes(64 << 10) == 64 << 10
    limit, source = limits.item_limit(2_000_000, ["scoped", "unique"])
    assert (limit, source) == (1_048_588 - RECORD_OVERHEAD, "unique max.message.bytes")
    # a limit above max_item_bytes + room leaves the setting in charge
    assert limits.item_limit(500_000, ["scoped", "unique"]) == (500_000, "max_item_bytes")
    assert limits.item_limit(2_000_000, ["other"]) == (2_000_000, "max_item_bytes")


def test_a_dead_letter_stays_under_the_dlq_topics_limit() -> None:
    limits = WriteLimits({"dlq": 1 << 20})
    assert limits.dead_letter_bytes(4_000_000, "dlq") == (1 << 20) - RECORD_OVERHEAD
    assert limits.dead_letter_bytes(4_000_000, "elsewhere") == 4_000_000
