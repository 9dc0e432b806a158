"""Bad input never stops the worker and always ends somewhere documented.

Pure (no broker): hypothesis feeds ``parse_item`` arbitrary bytes and arbitrary JSON
objects built from the item fields (it never raises; every rejection has one of REASONS),
feeds every accepted item through the worker's decider and header code (a valid item can
always be routed), and checks that oversized items are rejected before JSON parsing.

Broker: 10k records of every hostile kind (tests/fuzz_items.py) go through a real worker
once. Each must come out exactly once: dead-lettered with the reason dedup gives
(``ndd-dlq-reason``) and the original bytes, or decided as dedup decides (with the worker's
Kafka-position identity and Kafka-timestamp fallbacks), with ``ndd-policy`` where a policy
decided; /metrics must count every reason; the worker must still be running.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fuzz_items import (
    CATEGORIES,
    FuzzItem,
    fuzz_stream,
    hostile_items,
    iter_categories,
    reference_outcomes,
)
from harness.kafka import Reader, SettingsFactory, create_topics, keep_old_records
from harness.scenarios import Feeder
from harness.worker import WorkerProcess, events_named, metric_sum, scrape
from hypothesis import HealthCheck, given, settings
from hypothesis import settings as settings_
from hypothesis import strategies as st

from ndd_stream import jsonio
from ndd_stream.core import items as items_module
from ndd_stream.core.detector import DetectorConfig
from ndd_stream.core.document import Document
from ndd_stream.core.items import REASONS, Invalid, ItemFormat, decode_object, parse_item
from ndd_stream.kafka.limits import dead_letter_limit
from ndd_stream.state.rocks import Checkpoint
from ndd_stream.worker.deciding import OutputTopics, PartitionDecider
from ndd_stream.worker.records import Source
from ndd_stream.worker.router import route_raw

FMT = ItemFormat(max_item_bytes=16_384)
TOPICS = OutputTopics("u", "d", "dlq", "decisions", "changelog")
ROUTE_REASONS = {"oversized", "invalid_utf8", "not_json", "not_object"}


# --- pure ---------------------------------------------------------------------------------


def _check(result: Document | Invalid) -> None:
    assert isinstance(result, Document | Invalid)
    if isinstance(result, Invalid):
        assert result.reason in REASONS, result
        assert isinstance(result.detail, str)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_parse_item_never_raises_on_arbitrary_bytes(raw: bytes) -> None:
    _check(parse_item(raw, FMT, position="raw[0]@1"))
    _check(parse_item(raw, FMT, position="raw[0]@1", fallback_timestamp=1.7e9))
    record, invalid = route_raw(raw, None, Source("raw", 0, 1), FMT, "scoped", "dlq")
    assert (invalid is None) == (record.topic == "scoped")


JSON_SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                           max_leaves=8)
FIELD_NAMES = st.sampled_from(["id", "channel", "title", "text", "body", "content",
                               "timestamp", "published_at", "other"])
TIMESTAMPS = (st.floats(-1.2e11, 1.2e11, allow_nan=False) | st.integers(-(10**12), 10**12)
              | st.datetimes().map(lambda d: d.isoformat())
              | st.sampled_from(["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00",
                                 "-62135596801", "1e11", " 1700000000 ", "2026-03-01"]))
ITEMS = st.fixed_dictionaries(
    {"text": st.text(min_size=1, max_size=80)},
    optional={"id": st.text(max_size=8) | st.integers(), "channel": st.text(max_size=8),
              "title": st.text(max_size=20), "timestamp": TIMESTAMPS})


def _encode(obj: Any) -> bytes:
    try:
        return jsonio.dumps(obj)
    except Exception:  # e.g. an integer beyond 64 bits: not sendable as JSON by orjson
        return repr(obj).encode()


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(FIELD_NAMES, JSON_VALUES, max_size=8) | JSON_VALUES)
def test_parse_item_never_raises_on_json_of_any_shape(obj: Any) -> None:
    raw = _encode(obj)
    _check(parse_item(raw, FMT, position="raw[0]@1"))
    _check(parse_item(raw, FMT, position="raw[0]@1", fallback_timestamp=0.0, now=0.0))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ITEMS, min_size=1, max_size=6))
def test_every_accepted_item_can_be_decided_and_routed(batch: list[dict[str, Any]]) -> None:
    """The decider and its headers/audit record never raise on an item parse_item accepted
    (e.g. a timestamp that is a number but no representable date)."""
    with tempfile.TemporaryDirectory() as tmp:
        decider = PartitionDecider(0, Path(tmp) / "p0", DetectorConfig(), FMT, TOPICS)
        try:
            for i, obj in enumerate(batch):
                raw = _encode(obj)
                outcome = decider.process(raw, b"k", [], Source("raw", 0, i, 1_700_000_000_000))
                assert (outcome.decision is None) == (outcome.invalid is not None)
                assert outcome.records and all(r.value is not None for r in outcome.records)
                if outcome.invalid is not None:
                    assert outcome.invalid.reason in REASONS
                    assert outcome.records[0].topic == "dlq"
            decider.drain_changelog(Checkpoint(len(batch)))
            decider.commit(Checkpoint(len(batch), decider.changelog_next))
        finally:
            decider.close()


def test_oversized_items_are_rejected_before_json_parsing(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    def no_parsing(data: bytes | str) -> Any:
        raise AssertionError("an oversized item reached the JSON parser")

    monkeypatch.setattr(items_module, "loads", no_parsing)
    huge = b'{"id": "x", "text": "' + b"a" * 5_000_000 + b'"}'
    result = decode_object(huge, FMT)
    assert isinstance(result, Invalid) and result.reason == "oversized"
    result = parse_item(huge, FMT, position="p")
    assert isinstance(result, Invalid) and result.reason == "oversized"
    record, invalid = route_raw(huge, None, Source("raw", 0, 1), FMT, "scoped", "dlq")
    assert invalid is not None and invalid.reason == "oversized" and record.topic == "dlq"
    # The dead letter keeps the original bytes as far as the worker's producer can send
    # them, and says how long the item was; below that, the whole item.
    limit = dead_letter_limit(FMT.max_item_bytes)
    assert record.value == huge[:limit]
    assert dict(record.headers)["ndd-dlq-truncated"] == str(len(huge)).encode()
    just_over = huge[: FMT.max_item_bytes + 1]
    record, invalid = route_raw(just_over, None, Source("raw", 0, 2), FMT, "scoped", "dlq")
    assert invalid is not None and invalid.reason == "oversized"
    assert record.value == just_over and "ndd-dlq-truncated" not in dict(record.headers)


EXPECTED = {  # fuzz category -> the outcomes it may have (reason, or status/policy)
    "random_bytes": {"invalid_utf8", "not_json", "not_object"},
    "invalid_utf8": {"invalid_utf8"},
    "not_json": {"not_json", "bad_field_type", "missing_text"},
    "wrong_shape": {"not_object"},
    "wrong_types": {"bad_field_type"},
    "missing_text": {"missing_text"},
    "empty_text": {"empty_text"},
    "oversized": {"oversized"},
    "bad_timestamp": {"bad_timestamp"},
    "future": {"future_timestamp", "bad_timestamp"},
    "late": {"unique/late"},
    "tombstone": {"not_json"},
    "hostile_id": {"decided", "decided/short", "bad_field_type"},
    "hostile_text": {"decided", "decided/short", "bad_field_type"},
}


def _label(outcome: Any) -> str:
    if outcome.reason is not None:
        return str(outcome.reason)
    decision = outcome.decision
    return "decided" + (f"/{decision.policy.value}" if decision.policy.value else "")


def test_every_fuzz_category_ends_in_its_documented_place() -> None:
    """What each kind of bad input becomes, per the README's reasons and policies."""
    stream = fuzz_stream(3000, seed=3, max_item_bytes=FMT.max_item_bytes)
    outcomes = reference_outcomes([i.value for i in stream],
                                  [f"raw[0]@{n}" for n in range(len(stream))],
                                  [1_772_380_800.0] * len(stream), DetectorConfig(), FMT)
    seen: dict[str, Counter[str]] = {}
    for item, outcome in zip(stream, outcomes, strict=True):
        label = _label(outcome).replace("decided/late", "unique/late")
        seen.setdefault(item.category, Counter())[label] += 1
        if item.category == "late":
            assert outcome.decision is not None and outcome.decision.status.value == "unique"
    for category, allowed in EXPECTED.items():
        assert set(seen[category]) <= allowed, (category, seen[category])
    assert set(seen) == set(CATEGORIES)
    # deep nesting is accepted when it parses (orjson allows it), never a crash
    assert set(seen["deep"]) <= {"decided", "not_json"}
    # absurd epochs: rejected as bad or future, or accepted as (late) dates, never a crash
    assert set(seen["absurd_epoch"]) <= {"bad_timestamp", "future_timestamp", "decided",
                                         "unique/late", "decided/late"}


# --- through the worker -------------------------------------------------------------------


def declared_id(value: bytes | None) -> str | None:
    """The identity a record's producer declared: its id, unless missing, blank or unusable
    (read by the standard library, which keeps integers beyond 64 bits exact)."""
    try:
        obj = jsonio.loads(value or b"")  # orjson: nesting to 1,024 levels
    except ValueError:
        obj = None
    if obj is None or (isinstance(obj, dict) and isinstance(obj.get("id"), float)):
        try:
            obj = json.loads(value or b"")
        except (ValueError, RecursionError):
            return None
    ident = obj.get("id") if isinstance(obj, dict) else None
    if isinstance(ident, bool) or not isinstance(ident, str | int):
        return None
    return str(ident) if str(ident).strip() else None


def _identity_problems(item: FuzzItem, position: tuple[str, int, int], out: Any,
                       earlier: set[str]) -> list[str]:
    """No decision taken from another item's identity: a decided record carries its own
    declared id, or else its own source position; it is a replay only of an id declared
    by an earlier record."""
    own = declared_id(item.value)
    want = own if own is not None else "{}[{}]@{}".format(*position)
    problems = []
    if out.identity != want:
        problems.append(f"{item.category} {position}: identity {out.identity!r}, want {want!r}")
    if out.replayed and (own is None or own not in earlier):
        problems.append(f"{item.category} {position}: replayed without an earlier id {own!r}")
    return problems


KAFKA_TS_MS = 1_772_380_800_000  # 2026-03-01 16:00 UTC, whole seconds (exact as float)


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_ten_thousand_fuzzed_records_through_the_worker(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    n = 10_000
    settings = make_settings(partitions=2, max_item_bytes=FMT.max_item_bytes)
    create_topics(settings)
    keep_old_records(settings)  # stamped KAFKA_TS_MS, months ago
    stream: list[FuzzItem] = fuzz_stream(n, seed=11, max_item_bytes=settings.max_item_bytes)
    reader = Reader.outputs(settings)
    # One raw partition, so the reference sees the worker's order within every scope.
    feeder = Feeder(settings, [i.value for i in stream], rate=5000, partition=0,
                    keys=[i.key for i in stream], timestamps_ms=[KAFKA_TS_MS] * n).start()
    log_path = tmp_path / "worker.log"
    worker = WorkerProcess(settings, log_path).start()
    try:
        positions = feeder.join(timeout=120)
        done = reader.wait_for(positions, timeout=240, alive=worker.alive)
        alive = worker.alive()
        port = worker.web_port()
        assert port is not None, worker.log_tail()
        metrics = scrape(port) if alive else {}
    finally:
        code = worker.stop()
        reader.close()
    assert alive, f"the worker stopped:\n{worker.log_tail()}"
    assert not events_named(log_path, "fatal"), worker.log_tail()
    assert code == 0
    assert done, f"{len(set(positions) - reader.sources)} records never came out"

    want = reference_outcomes([i.value for i in stream],
                              [f"{t}[{p}]@{o}" for t, p, o in positions],
                              [KAFKA_TS_MS / 1000] * n, settings.detector_config(),
                              settings.item_format(), now=time.time())
    by_source: dict[tuple[str, int, int], list[Any]] = {}
    for rec in reader.records:
        by_source.setdefault(rec.source, []).append(rec)
    wrong: list[str] = []
    reasons: Counter[str] = Counter()
    declared: set[str] = set()  # ids declared by the records before this one
    for item, position, expected in zip(stream, positions, want, strict=True):
        copies = by_source.get(position, [])
        if len(copies) != 1:
            wrong.append(f"{item.category} {position}: {len(copies)} outputs")
            continue
        out = copies[0]
        if expected.reason is not None:
            reasons[expected.reason] += 1
            if out.reason != expected.reason or out.value != (item.value or b"")[
                    : dead_letter_limit(settings.max_item_bytes)]:
                wrong.append(f"{item.category} {position}: DLQ {out.reason}, want "
                             f"{expected.reason}")
        else:
            d = expected.decision
            assert d is not None
            wrong += _identity_problems(item, position, out, declared)
            got = (out.status, out.duplicate_of, out.policy or "")
            if got != (d.status.value, d.duplicate_of, d.policy.value) or out.value != (
                    item.value):
                wrong.append(f"{item.category} {position}: {got}, want "
                             f"{(d.status.value, d.duplicate_of, d.policy.value)}")
        if (ident := declared_id(item.value)) is not None:
            declared.add(ident)
    assert not wrong, f"{len(wrong)} wrong outcomes, e.g. {wrong[:8]}"

    decided = n - sum(reasons.values())
    assert metric_sum(metrics, "ndd_items_total") == decided
    for reason, count in reasons.items():
        stage = "route" if reason in ROUTE_REASONS else "decide"
        assert metric_sum(metrics, "ndd_dlq_total", reason=reason, stage=stage) == count, reason
    assert metric_sum(metrics, "ndd_dlq_total") == sum(reasons.values())
    policies = Counter(r.policy for r in reader.records if r.policy)
    print(f"fuzz: records={n} decided={decided} dlq={sum(reasons.values())} "
          f"reasons={dict(sorted(reasons.items()))} policies={dict(policies)} "
          f"categories={dict(iter_categories(stream))}")
    assert len(reasons) == len(REASONS) - 1  # every reason but missing_timestamp (Kafka ts)


@pytest.mark.broker
@pytest.mark.timeout(420)
def test_hypothesis_hostile_items_through_the_worker(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """Batches of hostile items (tests/fuzz_items.hostile_items) drawn by hypothesis go
    through one real worker: each record comes out exactly once, dead-lettered with the
    reason ``parse_item`` gives or decided under its own identity (its declared id, or else
    its own source position), replayed only for an id declared by an earlier record; the
    worker keeps running."""
    settings = make_settings(partitions=2, max_item_bytes=FMT.max_item_bytes)
    create_topics(settings)
    keep_old_records(settings)  # stamped KAFKA_TS_MS, months ago
    fmt = settings.item_format()
    reader = Reader.outputs(settings)
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    declared: set[str] = set()
    seen = {"records": 0, "dlq": 0, "batches": 0}

    @settings_(max_examples=20, deadline=None, database=None, derandomize=True,
               suppress_health_check=list(HealthCheck))
    @given(st.lists(hostile_items(FMT.max_item_bytes), min_size=5, max_size=30))
    def batch_comes_out_right(batch: list[bytes]) -> None:
        positions = Feeder(settings, batch, rate=5000, partition=0,
                           timestamps_ms=[KAFKA_TS_MS] * len(batch)).start().join(timeout=60)
        assert reader.wait_for(positions, timeout=120, alive=worker.alive), worker.log_tail()
        by_source: dict[tuple[str, int, int], list[Any]] = {}
        for rec in reader.records:
            by_source.setdefault(rec.source, []).append(rec)
        wrong: list[str] = []
        for value, position in zip(batch, positions, strict=True):
            copies = by_source.get(position, [])
            assert len(copies) == 1, (position, len(copies), value[:200])
            out = copies[0]
            want = parse_item(value, fmt, "{}[{}]@{}".format(*position),
                              fallback_timestamp=KAFKA_TS_MS / 1000, now=time.time())
            if isinstance(want, Invalid):
                assert out.reason == want.reason, (out.reason, want, value[:200])
                seen["dlq"] += 1
            else:
                assert out.reason is None, (out.reason, value[:200])
                wrong += _identity_problems(FuzzItem("hostile", value), position, out, declared)
            if (ident := declared_id(value)) is not None:
                declared.add(ident)
        assert not wrong, wrong
        seen["records"] += len(batch)
        seen["batches"] += 1

    try:
        batch_comes_out_right()
        alive = worker.alive()
    finally:
        worker.stop()
        reader.close()
    assert alive, worker.log_tail()
    print(f"hypothesis through the worker: {seen}")


@pytest.mark.timeout(180)
def test_atheris_short_run_finds_nothing() -> None:
    """Coverage-guided fuzzing of route/parse/decide (tests/fuzz_items.py, atheris)."""
    pytest.importorskip("atheris")
    import subprocess
    import sys

    script = Path(__file__).with_name("fuzz_items.py")
    done = subprocess.run([sys.executable, str(script), "-atheris_runs=10000", "-seed=1"],
                          capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Done 10000" in done.stderr
