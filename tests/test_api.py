"""The library API (ndd_stream.api, docs/API.md): its surface, its settings, and decisions
equal to ``ndd-stream dedup``'s field by field, also across a save and a load."""

from __future__ import annotations

import inspect
import io
import json
import os
import subprocess
import sys
import types
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import newsgen
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ndd_stream
from ndd_stream import Decision, Filter, InvalidItem, similarity, stories
from ndd_stream import api as api_module
from ndd_stream.data import sample_feed
from ndd_stream.dedup import run_dedup
from ndd_stream.settings import Settings

PUBLIC = {"Decision", "Filter", "InvalidItem", "Similarity", "Story", "similarity", "stories"}
FEED = Path(str(sample_feed()))
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _no_ndd_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings' defaults, whatever NDD_* the developer's shell exports."""
    for name in list(os.environ):
        if name.startswith("NDD_"):
            monkeypatch.delenv(name)


def dedup_records(lines: list[bytes], **overrides: Any) -> list[dict[str, Any]]:
    """What ``ndd-stream dedup`` writes for ``lines`` under these settings."""
    s = Settings(**overrides)
    sink = io.BytesIO()
    run_dedup(lines, sink, s.detector_config(), s.item_format())
    return [json.loads(line) for line in sink.getvalue().splitlines()]


def api_records(lines: list[Any], **overrides: Any) -> list[dict[str, Any]]:
    return [d.as_dict() for d in Filter(**overrides).decide_many(lines, on_invalid="return")]


def jsonl(items: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(item).encode() + b"\n" for item in items]


# -- the surface -----------------------------------------------------------------------


def test_the_public_names_are_the_listed_ones() -> None:
    assert set(ndd_stream.__all__) == PUBLIC == set(api_module.__all__)
    assert len(ndd_stream.__all__) == len(PUBLIC)
    for name in PUBLIC:
        assert getattr(ndd_stream, name) is getattr(api_module, name)
    # every other name the API module defines is private; what it imports is not exported
    for name, value in vars(api_module).items():
        if name.startswith("_") or name in PUBLIC:
            continue
        defined_here = getattr(value, "__module__", None) == api_module.__name__
        assert not defined_here, f"ndd_stream.api.{name} is public but not listed"
        assert isinstance(value, types.ModuleType) or name not in api_module.__all__
    extra = {n for n in dir(ndd_stream) if not n.startswith("_")
             and not isinstance(getattr(ndd_stream, n), types.ModuleType)}
    assert extra == PUBLIC | {"ENGINE_VERSION"}
    with pytest.raises(AttributeError):
        ndd_stream.NotAName  # type: ignore[attr-defined]  # noqa: B018


def test_import_ndd_stream_is_cheap_and_the_api_loads_on_first_use() -> None:
    code = ("import sys, ndd_stream\n"
            "heavy = ('numpy', 'pydantic', 'rich', 'orjson', 'ndd_stream.api', 'ndd_stream.core')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n"
            "ndd_stream.Filter\n"
            "print('ndd_stream.api' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.split("\n")[:2] == ["[]", "True"]


def test_the_package_is_typed() -> None:
    assert (Path(ndd_stream.__file__).parent / "py.typed").is_file()


def _settings_default(name: str) -> Any:
    value = Settings.model_fields[name].get_default(call_default_factory=True)
    return list(value) if isinstance(value, list | tuple) else value


def test_keywords_have_the_names_and_defaults_of_the_settings() -> None:
    params = inspect.signature(Filter).parameters
    assert params, "Filter takes the settings as keywords"
    for name, param in params.items():
        assert param.kind is inspect.Parameter.KEYWORD_ONLY
        assert name in Settings.model_fields, f"{name} is no NDD_* setting"
        default = param.default
        default = list(default) if isinstance(default, tuple) else default
        assert default == _settings_default(name) or (name == "scope_map" and default is None
                                                      and _settings_default(name) == {}), name
    for needed in ("threshold", "window_hours", "scope", "novelty", "extract", "keep",
                   "text_fields"):
        assert needed in params


@pytest.mark.parametrize("overrides", [
    {},
    {"threshold": 0.8, "window_hours": 6, "scope": "global", "novelty": "off",
     "keep": "complete", "extract": "tags", "case_sensitive": True, "q": 5,
     "index_duplicates": False, "id_field": "uid", "channel_field": "src",
     "title_field": "", "text_fields": "body, text", "timestamp_fields": ["ts"],
     "max_item_bytes": 5000, "max_future_seconds": 0, "max_html_depth": 30,
     "count_threads": 1, "scope_map": {"a": "g"}, "index": "lsm", "dense_fraction": 0.5,
     "bitmap_filter_bits": 12},
])
def test_settings_map_to_the_detector_as_the_cli_maps_them(overrides: dict[str, Any]) -> None:
    f = Filter(**overrides)
    s = Settings(**overrides)
    assert f._config == s.detector_config()
    assert f._format == s.item_format()


@pytest.mark.parametrize(("name", "value"), [
    ("threshold", 0.0), ("threshold", 1.5), ("window_hours", -1), ("window_hours", 721),
    ("q", 0), ("q", 17), ("novelty", "sometimes"), ("keep", "last"), ("extract", "all"),
    ("max_item_bytes", 10), ("max_future_seconds", -1), ("max_html_depth", 0),
    ("count_threads", 0), ("index", "btree"), ("dense_fraction", 1.5),
    ("bitmap_filter_bits", 3), ("bitmap_filter_bits", 25),
])
def test_bad_settings_are_refused_as_the_settings_refuse_them(name: str, value: Any) -> None:
    with pytest.raises(ValueError):
        Settings(**{name: value})
    with pytest.raises(ValueError, match=name):
        Filter(**{name: value})


# -- the same decisions as dedup -------------------------------------------------------


@pytest.mark.parametrize("overrides", [
    {}, {"scope": "global"}, {"scope": "global", "keep": "complete"},
    {"threshold": 0.8, "novelty": "off"}, {"window_hours": 0, "extract": "raw"},
])
def test_the_sample_feed_is_decided_as_dedup_decides_it(overrides: dict[str, Any]) -> None:
    lines = FEED.read_bytes().splitlines(keepends=True)
    want = dedup_records(lines, **overrides)
    assert api_records(lines, **overrides) == want
    assert {r["status"] for r in want} >= {"unique", "near_duplicate", "exact_duplicate",
                                           "invalid"}
    # one item at a time, as bytes and as str: the same records
    one = Filter(**overrides)
    got = [one.decide(line, on_invalid="return").as_dict() for line in lines if line.strip()]
    assert got == want
    # str lines (bytes that are no UTF-8 become lone surrogates: still invalid_utf8)
    as_text = api_records([line.decode("utf-8", "surrogateescape") for line in lines],
                          **overrides)
    assert [r if r["status"] != "invalid" else (r["line"], r["reason"]) for r in as_text] == [
        r if r["status"] != "invalid" else (r["line"], r["reason"]) for r in want]


def test_the_file_path_numbers_lines_as_dedup_does() -> None:
    lines = [b'{"text": "no id here at all", "timestamp": 1764633600}\n', b"\n", b"  \n",
             b'{"text": "no id here at all", "timestamp": 1764633601}\r\n']
    records = api_records(lines)
    assert records == dedup_records(lines)
    assert [(r["line"], r["identity"], r["status"]) for r in records] == [
        (1, "line:1", "unique"), (4, "line:4", "exact_duplicate")]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 120),
       threshold=st.sampled_from([0.3, 0.5, 0.8]), scope=st.sampled_from(["channel", "global"]),
       novelty=st.sampled_from(["auto", "off"]), keep=st.sampled_from(["first", "complete"]),
       step=st.sampled_from([20.0, 900.0]))
def test_generated_items_are_decided_as_dedup_decides_them(
        seed: int, n: int, threshold: float, scope: str, novelty: str, keep: str,
        step: float) -> None:
    items = newsgen.items(n, seed=seed, step_s=step)
    lines = jsonl(items)
    overrides = {"threshold": threshold, "scope": scope, "novelty": novelty, "keep": keep,
                 "window_hours": 2}
    want = dedup_records(lines, **overrides)
    assert api_records(lines, **overrides) == want
    assert api_records(items, **overrides) == want  # dicts: the same
    f = Filter(**overrides)
    assert [f.decide(item).as_dict() for item in items] == want


# -- save and load ---------------------------------------------------------------------


def _stream(n: int, seed: int) -> list[dict[str, Any]]:
    """Items over ~40 hours (so hours leave a 6-hour window) with re-sends and figures."""
    return newsgen.items(n, seed=seed, channels=2, words=40, step_s=1200.0,
                         start=datetime(2026, 3, 1, tzinfo=UTC))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1000), cut=st.floats(0.05, 0.95),
       overrides=st.sampled_from([{"window_hours": 6}, {"window_hours": 6, "scope": "global",
                                                        "keep": "complete"},
                                  {"window_hours": 3, "threshold": 0.8}]))
def test_save_then_load_continues_as_one_filter(tmp_path_factory: pytest.TempPathFactory,
                                                seed: int, cut: float,
                                                overrides: dict[str, Any]) -> None:
    items = _stream(200, seed)
    for item in items[::7]:
        del item["id"]  # identities from the line number: it must carry on
    whole = [d.as_dict() for d in Filter(**overrides).decide_many(items)]
    k = int(len(items) * cut)
    first = Filter(**overrides)
    got = [d.as_dict() for d in first.decide_many(items[:k])]
    path = tmp_path_factory.mktemp("save") / "window.ndd"
    first.save(path)
    resumed = Filter.load(path)
    assert resumed.settings == first.settings
    assert resumed.window_documents == first.window_documents
    got += [d.as_dict() for d in resumed.decide_many(items[k:])]
    assert got == whole


def test_a_saved_window_holds_only_live_hours(tmp_path: Path) -> None:
    items = _stream(150, seed=4)
    f = Filter(window_hours=6)
    decisions = list(f.decide_many(items))
    late = {"id": "late", "channel": items[0]["channel"], "text": items[0]["text"],
            "timestamp": items[0]["timestamp"]}
    d = f.decide(late)
    assert d.status == "unique" and "outside the window" in d.explain()
    path = tmp_path / "w.ndd"
    f.save(path)
    loaded = Filter.load(path)
    newest = max(dec.as_dict()["hour"] for dec in decisions)
    hours = {doc.hour for doc in loaded._log.load()}
    assert hours and min(hours) >= newest - 6, "expired hours were saved"
    assert len(loaded._log) == f.window_documents == loaded.window_documents
    assert len(loaded._log) < len(items)
    # an item of an expired hour is outside both windows alike
    again = {**late, "id": "late-again"}
    assert loaded.decide(again).as_dict() == f.decide(again).as_dict()


def test_load_refuses_a_file_that_is_no_saved_window(tmp_path: Path) -> None:
    f = Filter()
    list(f.decide_many(newsgen.items(30)))
    path = tmp_path / "w.ndd"
    f.save(path)
    data = path.read_bytes()
    for damaged, message in ((b"PK\x03\x04" + data[4:], "not a saved"),
                             (data[:-10], "damaged"),
                             (data[:60] + bytes([data[60] ^ 1]) + data[61:], "damaged")):
        path.write_bytes(damaged)
        with pytest.raises(ValueError, match=message):
            Filter.load(path)
    for change, message in ((lambda h: {**h, "engine": "ddd-9"}, "engine"),
                            (lambda h: {**h, "settings": {**h["settings"], "colour": 1}},
                             "does not know")):
        path.write_bytes(_with_header(data, change))
        with pytest.raises(ValueError, match=message):
            Filter.load(path)
    path.write_bytes(_with_header(data, lambda h: h))
    assert Filter.load(path).window_documents == f.window_documents


def _with_header(data: bytes, change: Any) -> bytes:
    """A saved filter (layout 1, docs/API.md) with its JSON header changed, still sound."""
    import struct
    import zlib

    magic = b"ndd-stream filter\n"
    at = len(magic) + 4
    (size,) = struct.unpack_from(">I", data, at)
    header = json.dumps(change(json.loads(data[at + 4 : at + 4 + size]))).encode()
    body = data[:at] + struct.pack(">I", len(header)) + header + data[at + 4 + size : -4]
    return body + struct.pack(">I", zlib.crc32(body))


# -- bad items -------------------------------------------------------------------------


def test_a_bad_item_raises_one_exception_type_with_the_reason() -> None:
    f = Filter()
    with pytest.raises(InvalidItem) as caught:
        f.decide(b'{"id": 1, "text": "fine text"')
    assert caught.value.reason == "not_json" and caught.value.line == 1
    assert isinstance(caught.value, ValueError)
    with pytest.raises(InvalidItem, match="missing_timestamp"):
        f.decide({"id": "x", "text": "no time"})
    with pytest.raises(InvalidItem, match="not_object"):
        f.decide(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidItem, match="invalid_utf8"):
        f.decide(b'{"text": "\xff"}')
    d = f.decide({"id": "x", "text": "no time"}, on_invalid="return")
    assert (d.status, d.reason, d.identity, d.line) == ("invalid", "missing_timestamp", None, 5)
    assert "missing_timestamp" in d.explain()
    ok = f.decide({"id": "x", "text": "no time"}, default_timestamp=1764633600.0)
    assert ok.status == "unique"
    with pytest.raises(ValueError, match="on_invalid"):
        f.decide({"id": "x"}, on_invalid="skip")  # type: ignore[arg-type]


def test_decide_many_raises_at_the_bad_item_after_deciding_the_ones_before() -> None:
    items = newsgen.items(5)
    bad = {"id": "bad", "title": 7, "timestamp": items[0]["timestamp"]}
    f = Filter()
    got: list[Decision] = []
    with pytest.raises(InvalidItem) as caught:
        for d in f.decide_many([*items[:3], bad, *items[3:]]):
            got.append(d)
    assert len(got) == 3 and caught.value.reason == "bad_field_type" and caught.value.line == 4
    rest = list(f.decide_many(items[3:]))
    assert [d.line for d in rest] == [5, 6]


def test_decide_many_over_a_list_uses_the_engine_thread_and_decides_the_same() -> None:
    """A list is at hand: each item's lookup runs on the engine thread while the next is
    parsed and signed (two cores or more), with the same decisions as one at a time; a loop
    left early leaves nothing half decided, so the rest decides as if never interrupted."""
    from harness.threads import engine_threads

    from ndd_stream.core.engine import available
    from ndd_stream.core.kernels import available_cores

    items = newsgen.items(300, seed=5, channels=3, step_s=120.0)
    one = Filter(threshold=0.8)
    want = [one.decide(item).as_dict() for item in items]
    f = Filter(threshold=0.8)
    threads: list[int] = []
    got = []
    for d in f.decide_many(items):
        threads.append(engine_threads())
        got.append(d.as_dict())
        if len(got) == 120:
            break
    got += [d.as_dict() for d in f.decide_many(items[120:])]
    assert got == want
    assert {r["status"] for r in want} >= {"unique", "near_duplicate"}
    if available() and available_cores() >= 2 and os.path.isdir("/proc/self/task"):
        assert max(threads) == 1
    assert not f._detector.lookup_thread  # the filter's own decide() is as before


def test_decide_many_over_a_live_iterator_holds_no_decision_back() -> None:
    """From a generator (a live feed) each decision comes before the next item is read."""
    items = newsgen.items(30, seed=2)
    yielded: list[int] = []

    def feed() -> Any:
        for i, item in enumerate(items):
            assert len(yielded) == i, (i, len(yielded))
            yield item

    for d in Filter().decide_many(feed()):
        yielded.append(d.line)
    assert yielded == list(range(1, 31))


# -- explanations, pairs and stories ---------------------------------------------------

DAY = 1764633600
BASE = ("Dockworkers at the port of Valmora stayed off the job for a second day on Tuesday, "
        "halting container traffic, the port authority said.")


def test_explain_names_the_match_and_why() -> None:
    f = Filter(keep="complete", window_hours=1)
    first = f.decide({"id": "a1", "title": "Port strike", "text": BASE, "timestamp": DAY})
    assert first.explain().startswith("'a1' is unique: no earlier item")
    copy = f.decide({"id": "a2", "title": "Port strike", "text": BASE, "timestamp": DAY + 60})
    assert (copy.status, copy.match_id, copy.score) == ("exact_duplicate", "a1", 1.0)
    assert "exact duplicate of 'a1'" in copy.explain()
    near = f.decide({"id": "a3", "title": "Port strike",
                     "text": BASE.replace("Tuesday", "Tuesday morning"), "timestamp": DAY + 90})
    assert near.status == "near_duplicate" and near.match_id == "a1"
    assert f"doc_q {near.score:.3f} >= threshold 0.3" in near.explain()
    longer = f.decide({"id": "a4", "title": "Port strike", "timestamp": DAY + 120,
                       "text": BASE + " Talks resume on Thursday; the union wants a 12 pct "
                       "raise and the employers offer 4 pct over two years, with a bonus."})
    assert longer.supersedes == "a1" and longer.routed_unique
    assert "replaces it" in longer.explain()
    new = f.decide({"id": "b1", "title": "Port strike ends",
                    "text": "Dockworkers at the port of Valmora returned to work on "
                    "Wednesday after a 12 pct pay rise, ending a two-day strike.",
                    "timestamp": DAY + 200})
    assert new.status == "unique" and new.novelty is not None and new.match_id == "a1"
    assert f"novelty rule '{new.novelty}'" in new.explain() and "'a1'" in new.explain()
    replay = f.decide({"id": "a2", "text": "anything", "timestamp": DAY + 300})
    assert replay.replayed and "replayed" in replay.explain()
    empty = f.decide({"id": "e", "text": "— … —", "timestamp": DAY + 300})
    assert "no letters or digits" in empty.explain()
    short = f.decide({"id": "s", "text": "ok", "timestamp": DAY + 300})
    assert "under 4 letters and digits" in short.explain()
    assert repr(near).startswith("Decision(line=3, identity='a3'")


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), edits=st.integers(0, 30),
       threshold=st.sampled_from([0.3, 0.6]), novelty=st.sampled_from(["auto", "off"]))
def test_similarity_gives_the_filters_verdict_on_a_pair(seed: int, edits: int,
                                                         threshold: float, novelty: str) -> None:
    import random

    rnd = random.Random(seed)
    a = newsgen.story(rnd, 60)
    b = newsgen.edit(rnd, a, edits) if rnd.random() < 0.8 else newsgen.story(rnd, 60)
    pair = similarity(a, b, threshold=threshold, novelty=novelty)  # type: ignore[arg-type]
    f = Filter(scope="global", threshold=threshold, novelty=novelty)  # type: ignore[arg-type]
    f.decide({"id": "a", "text": a, "timestamp": DAY})
    d = f.decide({"id": "b", "text": b, "timestamp": DAY})
    assert pair.status == d.status and pair.novelty == d.novelty
    if d.is_duplicate or d.novelty:
        assert pair.doc_q == d.score
    else:
        assert d.score == 0.0 and pair.doc_q < threshold
    assert 0.0 <= pair.doc_q <= 1.0 and pair.shared <= min(pair.sizes)


def test_similarity_of_short_and_empty_texts() -> None:
    assert similarity("OK!", "ok").status == "exact_duplicate"
    assert similarity("ok", "no").status == "unique"
    assert similarity("", "").doc_q == 0.0
    pair = similarity("Shares rose 5 pct to 120 dlrs", "Shares rose 5 pct to 120 dlrs")
    assert (pair.doc_q, pair.status, pair.explain()) == (1.0, "exact_duplicate",
                                                         "exact duplicate: doc_q 1.000")
    with pytest.raises(ValueError, match="threshold"):
        similarity("a", "b", threshold=0)


def test_stories_group_a_finished_batch() -> None:
    lines = FEED.read_bytes().splitlines()
    decisions = list(Filter(scope="global").decide_many(lines, on_invalid="return"))
    grouped = stories(decisions)
    valid = [d for d in decisions if d.status != "invalid" and not d.replayed]
    assert sum(s.size for s in grouped) == len(valid)
    assert len({(s.scope, s.id) for s in grouped}) == len(grouped)
    for s in grouped:
        assert all(d.story == s.id and d.scope == s.scope for d in s.members)
        assert s.members[0].identity == s.id or s.members[0].match_id is not None
        assert s.kept in s.identities or s.kept == s.id
    assert any(s.size > 2 for s in grouped)
    firsts = [s.members[0].line for s in grouped]
    assert firsts == sorted(firsts)


def test_position_names_an_item_without_an_id() -> None:
    f = Filter(scope="global", threshold=0.5)
    item = {"text": "Valmora port reopens after the strike", "timestamp": DAY}
    assert f.decide(item, position="news.raw[0]@15").identity == "news.raw[0]@15"
    again = f.decide(item)
    assert (again.identity, again.match_id, again.line) == ("line:2", "news.raw[0]@15", 2)
    assert repr(f) == "Filter(threshold=0.5, scope='global')"
    assert f.settings["threshold"] == 0.5 and f.window_documents == 2
