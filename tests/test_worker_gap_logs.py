"""The lines both agents log around a gap in offsets name topic[partition] and offset."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from ndd_stream.worker.delivery import log_gap, log_lost

log = logging.getLogger("test.gaps")


@dataclass
class _Record:
    offset: int


def test_a_gap_is_announced_with_its_topic_partition_and_first_offset(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="test.gaps"):
        log_gap(log, "news.scoped", 3, 10, 14)
    (rec,) = caplog.records
    assert rec.getMessage() == ("news.scoped[3]: expected offset 10, the consumer is at 14: "
                                "reading the 4 skipped records from the broker")
    assert (rec.topic, rec.partition, rec.offset, rec.event) == (  # type: ignore[attr-defined]
        "news.scoped", 3, 10, "offset_gap")


@pytest.mark.parametrize(("found", "lost"), [
    ([10, 11, 12, 13], None),  # everything skipped was read back
    ([12, 13], "10-11"),  # retention removed the first two
    ([], "10-13"),  # nothing left of the range
])
def test_records_missing_from_the_front_of_a_refetched_range_are_reported_lost(
    caplog: pytest.LogCaptureFixture, found: list[int], lost: str | None
) -> None:
    with caplog.at_level(logging.WARNING, logger="test.gaps"):
        log_lost(log, "news.raw", 1, 10, [_Record(o) for o in found], 14, "processed")
    if lost is None:
        assert not caplog.records
        return
    (rec,) = caplog.records
    assert rec.levelno == logging.ERROR
    assert rec.getMessage() == (f"news.raw[1]: offsets {lost} are no longer in the topic and "
                                "were never processed")
    assert (rec.topic, rec.partition, rec.offset, rec.event) == (  # type: ignore[attr-defined]
        "news.raw", 1, 10, "records_lost")
