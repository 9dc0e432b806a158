"""The bundled sample feed: generated, not hand-edited, and it shows what it claims to.

``ndd-stream demo`` streams this feed, and its output explains itself through the
feed's content (updates, repeats, syndication, malformed lines). If a change in the
detector or the extractor changes a decision, the feed's notes would lie: these tests
hold every line to the expectation written in its ``x_note`` field.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ndd_stream.cli.main import main
from ndd_stream.data import sample_feed
from ndd_stream.dedup import run_dedup
from ndd_stream.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = ROOT / "tools" / "make_sample_feed.py"
FEED = Path(str(sample_feed()))

EXPECTED_REASONS = {"not_json", "invalid_utf8", "missing_text", "empty_text", "bad_timestamp",
                    "not_object", "bad_field_type"}


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_sample_feed", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _no_ndd_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Default detection settings, whatever NDD_* the developer's shell exports."""
    import os

    for name in list(os.environ):
        if name.startswith("NDD_"):
            monkeypatch.delenv(name)


def _decisions(scope: str, **more: Any) -> list[dict[str, Any]]:
    overrides: dict[str, Any] = {"scope": scope, **more}
    settings = Settings(**overrides)
    sink = io.BytesIO()
    with FEED.open("rb") as source:
        run_dedup(source, sink, settings.detector_config(), settings.item_format())
    return [json.loads(line) for line in sink.getvalue().splitlines()]


def _items() -> list[dict[str, Any] | None]:
    """Each line as an object, None where the line is not a JSON object."""
    out: list[dict[str, Any] | None] = []
    for raw in FEED.read_bytes().splitlines():
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            obj = None
        out.append(obj if isinstance(obj, dict) else None)
    return out


def _expected(note: str) -> tuple[str, str | None]:
    """(status, reason) that an ``x_note`` announces under the default channel scope."""
    if note.startswith("malformed:"):
        match = re.search(r"\((\w+)\)$", note)
        assert match, note
        return "invalid", match.group(1)
    if re.search(r"\(near\b", note):
        return "near_duplicate", None
    if re.search(r"\(exact\b", note):
        return "exact_duplicate", None
    match = re.search(r"\(new: (\w+)\)", note)  # the novelty rule: unique, with a reason
    return "unique", match.group(1) if match else None


def test_committed_feed_is_the_generator_output() -> None:
    generated = _generator().build_feed()
    assert FEED.read_bytes() == generated, (
        "ndd_stream/data/sample_feed.jsonl differs from tools/make_sample_feed.py: "
        "run `python tools/make_sample_feed.py` and commit the result")


def test_generator_is_deterministic() -> None:
    module = _generator()
    assert module.build_feed() == module.build_feed()


def test_feed_shape() -> None:
    lines = FEED.read_bytes().splitlines()
    assert 150 <= len(lines) <= 250
    assert all(line.strip() for line in lines), "blank lines are skipped by produce: avoid them"
    items = [i for i in _items() if i is not None]
    channels = Counter(i.get("channel") for i in items)
    assert set(channels) == {"reuters-wire", "ap-feed", "ansa-en", "dpa-intl", "bbc-rss",
                             "aggregator-x"}
    identities = [str(i["id"]) for i in items if "id" in i]
    assert len(identities) == len(set(identities)), "identities must be unique"
    assert {i.get("lang") for i in items} >= {"en", "de", "it"}
    fields = Counter(f for i in items for f in ("text", "body", "content") if f in i)
    assert all(fields[f] > 5 for f in ("text", "body", "content"))
    bodies = [str(i.get("body") or i.get("content") or "") for i in items]
    html = [b for b in bodies if "<p>" in b]
    assert any("<script>" in b for b in html)
    assert any(re.search(r"&\w+;", b) for b in html), "HTML entities"
    assert any(isinstance(i.get("timestamp"), int) for i in items), "epoch seconds"
    assert any("published_at" in i for i in items)


# The defaults, and the corners of the range the feed is calibrated for: the demo's
# explanations must not depend on a threshold or extraction default that may change.
SETTINGS_RANGE = [{}, {"threshold": 0.3, "extract": "tags"}, {"threshold": 0.3, "extract": "main"},
                  {"threshold": 0.8, "extract": "tags"}, {"threshold": 0.8, "extract": "main"}]


@pytest.mark.parametrize("overrides", SETTINGS_RANGE, ids=lambda o: str(o or "defaults"))
def test_every_line_gets_the_decision_its_note_announces(overrides: dict[str, Any]) -> None:
    decisions = _decisions("channel", **overrides)
    items = _items()
    assert len(decisions) == len(items)
    wrong = []
    for decision, item in zip(decisions, items, strict=True):
        note = (item or {}).get("x_note")
        if note is None:  # not JSON / not an object: the line itself is the malformation
            assert decision["status"] == "invalid", decision
            continue
        status, reason = _expected(note)
        got = decision.get("reason") or (decision.get("novel") or {}).get("reason")
        if decision["status"] != status or (reason and got != reason):
            wrong.append((decision["line"], note, decision["status"], got))
    assert not wrong, wrong


def test_global_scope_finds_the_syndicated_copies() -> None:
    local = _decisions("channel")
    everywhere = _decisions("global")
    items = _items()
    for decision, item in zip(everywhere, items, strict=True):
        if item is not None and "(global: exact)" in str(item.get("x_note", "")):
            assert decision["status"] == "exact_duplicate", (decision, item["x_note"])

    def duplicates(records: list[dict[str, Any]]) -> int:
        return sum(r["status"] in ("near_duplicate", "exact_duplicate") for r in records)

    assert duplicates(everywhere) >= duplicates(local) + 20


def test_dedup_command_finds_every_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    out = tmp_path / "decisions.jsonl"
    assert main(["dedup", str(FEED), "-o", str(out)]) == 0
    records = [json.loads(line) for line in out.read_bytes().splitlines()]
    statuses = Counter(r["status"] for r in records)
    assert statuses["exact_duplicate"] >= 15
    assert statuses["near_duplicate"] >= 15
    assert statuses["unique"] >= 80
    reasons = Counter(r["reason"] for r in records if r["status"] == "invalid")
    assert set(reasons) == EXPECTED_REASONS
    assert all(n == 1 for n in reasons.values())
    assert all(r["detail"] for r in records if r["status"] == "invalid")
    summary = capsys.readouterr().err
    assert "summary:" in summary
    # the exact duplicates include markup-only differences: HTML, entities, title case
    items = _items()
    exact_notes = [str((items[r["line"] - 1] or {}).get("x_note")) for r in records
                   if r["status"] == "exact_duplicate"]
    assert any("HTML" in n or "plain text" in n for n in exact_notes)
    near = [r for r in records if r["status"] == "near_duplicate"]
    assert all(0.8 <= r["similarity"] < 1.0 for r in near)
