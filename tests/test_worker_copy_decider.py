"""A record the router forwarded again (at-least-once) is not answered again.

Pure (no broker): a decider with its RocksDB state in a temporary directory. Under offset
order the decider knows a copy by its raw offset (below the offset after the last record
of that raw partition decided here); under event-time order the sequencer says so. A new
raw record with an identity seen before is still answered with its original decision.
"""

from __future__ import annotations

from pathlib import Path

from ndd_stream import jsonio
from ndd_stream.core.detector import DetectorConfig
from ndd_stream.core.items import ItemFormat
from ndd_stream.state.rocks import Checkpoint, decode_checkpoint, encode_checkpoint
from ndd_stream.worker.deciding import Outcome, OutputTopics, PartitionDecider, sources_named
from ndd_stream.worker.records import COPY, Source

FMT = ItemFormat()
TOPICS = OutputTopics("u", "d", "dlq", None, "changelog")
HOUR = 3600.0
TEXT = ("The central bank raised its benchmark rate by a quarter point on Tuesday, citing "
        "persistent inflation in services and a tight labour market across the region.")
OTHER = ("Heavy rain flooded the lower town overnight and the river reached its highest "
         "level in a decade; schools stay closed while the water recedes slowly.")


def _item(identity: str, text: str, hours: float) -> bytes:
    return jsonio.dumps({"id": identity, "channel": "wire", "text": text,
                         "timestamp": 1_700_000_000 + hours * HOUR})


def _send(decider: PartitionDecider, raw_offset: int, value: bytes, scoped_offset: int,
          note: str | None = None) -> Outcome:
    headers = Source("raw", 0, raw_offset).headers()
    return decider.process(value, b"wire", headers, Source("scoped", 0, scoped_offset), note)


def _feed(decider: PartitionDecider) -> list[Outcome]:
    """a (hour 0), its copy-edit b (hour 0), c (hour 30: hour 0 leaves the window)."""
    return [_send(decider, 0, _item("a", TEXT, 0), 0),
            _send(decider, 1, _item("b", TEXT + " Markets rose.", 0.1), 1),
            _send(decider, 2, _item("c", OTHER, 30), 2)]


def test_a_copy_is_not_answered_again_in_or_after_the_window(tmp_path: Path) -> None:
    decider = PartitionDecider(0, tmp_path / "p0", DetectorConfig(), FMT, TOPICS)
    try:
        _, b, _ = _feed(decider)
        assert b.decision is not None and b.decision.duplicate_of == "a"
        # b's hour left the window: judged anew it would be "unique, late"
        late = _send(decider, 1, _item("b", TEXT + " Markets rose.", 0.1), 3)
        assert late.skipped_copy and not late.records and late.decision is None
        recent = _send(decider, 2, _item("c", OTHER, 30), 4)
        assert recent.skipped_copy and not recent.records
        # a new record (a new raw offset) with an old hour is decided, as late
        fresh = _send(decider, 3, _item("d", TEXT, 0.2), 5)
        assert fresh.decision is not None and not fresh.skipped_copy
        assert fresh.decision.policy is not None and fresh.decision.policy.value == "late"
    finally:
        decider.close()


def test_a_new_record_with_a_known_identity_gets_its_original_decision(tmp_path: Path
                                                                       ) -> None:
    """A producer that sends an item twice: two raw records, one identity."""
    decider = PartitionDecider(0, tmp_path / "p0", DetectorConfig(), FMT, TOPICS)
    try:
        _send(decider, 0, _item("a", TEXT, 0), 0)
        b = _send(decider, 1, _item("b", TEXT + " Markets rose.", 0.1), 1)
        again = _send(decider, 2, _item("b", TEXT + " Markets rose.", 0.1), 2)
        assert b.decision is not None and again.decision is not None
        assert again.decision.replayed and not again.skipped_copy
        assert (again.decision.status, again.decision.duplicate_of) == (
            b.decision.status, b.decision.duplicate_of)
    finally:
        decider.close()


def test_the_raw_offsets_decided_survive_a_restart(tmp_path: Path) -> None:
    """What a kill -9 needs: the state's checkpoint says which raw offsets it reflects."""
    decider = PartitionDecider(0, tmp_path / "p0", DetectorConfig(), FMT, TOPICS)
    _feed(decider)
    checkpoint = Checkpoint(3, 0, sources=sources_named(decider.sources))
    decider.drain_changelog(checkpoint)
    decider.commit(checkpoint)
    decider.close()
    again = PartitionDecider(0, tmp_path / "p0", DetectorConfig(), FMT, TOPICS)
    try:
        assert again.sources == {("raw", 0): 3}
        late = _send(again, 1, _item("b", TEXT + " Markets rose.", 0.1), 3)
        assert late.skipped_copy
    finally:
        again.close()


def test_under_event_time_order_the_sequencer_says_what_is_a_copy(tmp_path: Path) -> None:
    decider = PartitionDecider(0, tmp_path / "p0", DetectorConfig(), FMT, TOPICS,
                               offset_order=False)
    try:
        # event-time order decides a raw partition's records out of offset order
        c = _send(decider, 2, _item("c", OTHER, 30), 0)
        a = _send(decider, 0, _item("a", TEXT, 29.5), 1)
        assert c.decision is not None and a.decision is not None and not a.skipped_copy
        copy = _send(decider, 0, _item("a", TEXT, 29.5), 2, note=COPY)
        assert copy.skipped_copy and not copy.records
    finally:
        decider.close()


def test_the_checkpoint_keeps_the_raw_offsets() -> None:
    checkpoint = Checkpoint(7, 3, sources={"raw:0": 5, "raw.b:11": 9})
    assert decode_checkpoint(encode_checkpoint(checkpoint)).sources == checkpoint.sources
    assert decode_checkpoint(encode_checkpoint(Checkpoint(7, 3))).sources is None
