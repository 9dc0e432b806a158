"""Item validation: every kind of bad input gets its machine-readable reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ndd_stream import jsonio
from ndd_stream.core.document import Document
from ndd_stream.core.items import Invalid, ItemFormat, parse_item, parse_timestamp

FMT = ItemFormat(max_item_bytes=10_000)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"x" * 20_000, "oversized"),
        (b'{"text": "\xff\xfe"}', "invalid_utf8"),
        (b"not json at all", "not_json"),
        (b"[" * 3000 + b"]" * 3000, "not_json"),  # deeper than orjson's 1024 levels
        (b"[1, 2]", "not_object"),
        (b'{"id": [1], "text": "a", "timestamp": 1}', "bad_field_type"),
        (b'{"text": 42, "timestamp": 1}', "bad_field_type"),
        (b'{"timestamp": 1}', "missing_text"),
        (b'{"text": "<p> </p>", "timestamp": 1}', "empty_text"),
        (b'{"text": "ok"}', "missing_timestamp"),
        (b'{"text": "ok", "timestamp": "yesterday"}', "bad_timestamp"),
        (b'{"text": "ok", "timestamp": 1e300}', "bad_timestamp"),
        (b'{"text": "ok", "timestamp": 4000000000}', "future_timestamp"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_bad_items_are_rejected_with_a_reason(raw: bytes, reason: str) -> None:
    result = parse_item(raw, FMT, "p", now=1_700_000_000)
    assert isinstance(result, Invalid) and result.reason == reason


def test_a_good_item_becomes_a_document() -> None:
    raw = (b'{"id": 7, "channel": "ansa", "title": "Rome &amp; Milan", '
           b'"body": "<p>Trains <b>stop</b></p><script>x()</script>", '
           b'"published_at": "2026-03-01T10:00:00+01:00"}')
    doc = parse_item(raw, ItemFormat(extract="tags"), "p", now=1_800_000_000)
    assert doc == Document("7", "ansa", "ansa", 1772355600.0, "Rome & Milan\nTrains  stop",
                           markup=True)


def test_identity_falls_back_to_position_and_scope_map_groups_channels() -> None:
    fmt = ItemFormat(scope_map={"ansa": "italy", "agi": "italy"})
    doc = parse_item(b'{"channel": "agi", "text": "x", "timestamp": 5}', fmt, "raw[0]@12")
    assert isinstance(doc, Document) and (doc.identity, doc.scope) == ("raw[0]@12", "italy")
    glob = parse_item(b'{"channel": "agi", "text": "x", "timestamp": 5}',
                      ItemFormat(scope="global"), "p")
    assert isinstance(glob, Document) and glob.scope == "global"


def test_fallback_timestamp_is_used_only_when_the_item_has_none() -> None:
    doc = parse_item(b'{"text": "x"}', FMT, "p", fallback_timestamp=123.0)
    assert isinstance(doc, Document) and doc.timestamp == 123.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1700000000, 1700000000.0), ("1700000000.5", 1700000000.5),
     ("2023-11-14T22:13:20Z", 1700000000.0), ("2023-11-14T22:13:20", 1700000000.0),
     (True, None), ("", None), (float("nan"), None), (None, None)],
)
def test_timestamp_formats(value: object, expected: float | None) -> None:
    assert parse_timestamp(value) == expected


def test_deeply_nested_objects_are_harmless() -> None:
    """Only top-level fields are read, and size is capped before parsing, so nesting is
    accepted (policy) rather than rejected."""
    nested = b'{"a": ' * 1000 + b"1" + b"}" * 1000
    raw = b'{"text": "story", "timestamp": 1, "extra": ' + nested + b"}"
    assert isinstance(parse_item(raw, FMT, "p"), Document)


def test_main_extraction_keeps_prose_and_drops_navigation() -> None:
    from ndd_stream.core.extract import extract_text

    prose = ("The city council approved the new harbour plan on Monday after a long debate "
             "that lasted well into the night, officials said.")
    page = (f"<html><body><nav><a href='/'>Home</a> <a href='/w'>World</a></nav>"
            f"<article><h1>Harbour plan</h1><p>{prose}</p><p>{prose} Again.</p>"
            f"<p>Photo: Reuters</p></article><footer>Contact us | Privacy</footer></body></html>")
    text = extract_text(page, "main")
    assert "approved the new harbour plan" in text
    assert "Privacy" not in text and "Home" not in text and "Photo" not in text
    assert extract_text("short plain item", "main") == "short plain item"


def _nested(page: str, depth: int) -> str:
    return "<div>" * depth + page + "</div>" * depth


def test_html_past_the_nesting_limit_is_extracted_as_flat_text() -> None:
    """Past ``max_html_depth`` main-content extraction (quadratic in the depth) is not run:
    the flat visible text is kept, navigation and all; below it the page is structured."""
    from ndd_stream.core.extract import extract_text

    prose = ("The city council approved the new harbour plan on Monday after a long debate "
             "that lasted well into the night, officials said.")
    menu = " ".join(f"<a href='/{n}'>Section{n}</a>" for n in range(20))  # 20 words
    page = f"<nav>Home {menu}</nav><article><p>{prose}</p><p>{prose} Again.</p></article>"
    deep = _nested(page, 40)
    structured = extract_text(deep, "main", max_depth=64)
    assert "harbour plan" in structured and "Home" not in structured
    flat = extract_text(deep, "main", max_depth=32)
    assert "harbour plan" in flat and "Home" in flat
    assert "Home" in extract_text(deep, "tags", max_depth=32)
    fmt = ItemFormat(max_html_depth=32)
    raw = jsonio.dumps({"text": deep, "timestamp": 0})
    assert isinstance(doc := parse_item(raw, fmt, "p"), Document) and "Home" in doc.text


def test_pathological_html_up_to_the_size_cap_takes_a_linear_path() -> None:
    """The shapes that made extraction quadratic (deep nesting, unclosed blocks): with so
    many tags that elements x depth would pass the work budget, the page is not parsed
    but stripped in slices; below that, nesting past the limit is told by one query. A
    real page's depth (the Gold Set's: 8-60) is neither."""
    from resiliparse.parse.html import HTMLTree

    from ndd_stream.core.extract import extract_text, too_deep, too_many_tags

    def told(markup: str, limit: int = 128) -> bool:
        return too_deep(HTMLTree.parse(markup), markup, limit)

    for huge in (_nested("hello world", 180_000), "<div>x " * 280_000,
                 "<span>x</span>" * 130_000):
        assert too_many_tags(huge)
    assert "hello world" in extract_text(_nested("hello world", 180_000), "main")
    assert told(_nested("hello world", 5_000))
    assert told("<div>x " * 5_000)
    assert not too_many_tags(_nested("<p>hello world</p>" * 50, 60))
    assert not told(_nested("<p>hello world</p>" * 50, 60))
    assert told(_nested("<p>hello world</p>", 60), limit=32)
    assert not told(_nested("x", 500), limit=100_000)  # the setting's maximum: no huge query


def test_sliced_text_keeps_the_visible_text() -> None:
    from ndd_stream.core.extract import SLICE_CHARS, sliced_text

    page = ("<html><head><style>p {}</style><script>var x = 1;</script></head><body>"
            "<p>Hello &amp; world</p><div>two <b>bold</b> words</div><!-- hidden --></body>")
    assert sliced_text(page) == "Hello & world\ntwo bold words"
    long = "<p>word &amp;</p>" * (SLICE_CHARS // 4) + "<p>end</p>"  # over four slices
    assert sliced_text(long).splitlines() == ["word &"] * (SLICE_CHARS // 4) + ["end"]


def test_markup_is_told_from_agency_angle_brackets() -> None:
    """HTML sets Document.markup (the novelty rule's auto mode reads it); agency text that
    writes company names in angle brackets does not."""
    fmt = ItemFormat(extract="raw")
    wire = b'{"id": 1, "text": "<AMERICAN EXPRESS CO> said net rose to 1.5 dlrs", "timestamp": 0}'
    page = b'{"id": 2, "text": "<div>Net rose</div><br>", "timestamp": 0}'
    assert isinstance(doc := parse_item(wire, fmt, "p"), Document) and not doc.markup
    assert isinstance(doc := parse_item(page, fmt, "p"), Document) and doc.markup



@pytest.mark.parametrize("mode", ["main", "tags"])
def test_agency_angle_brackets_are_text_not_tags(mode: str) -> None:
    """A ticker in angle brackets is no HTML element: parsed as one, ``<NAV>`` became a
    navigation block and ``<Video ...>`` a video, and the story went with them."""
    body = ("NAVISTAR <NAV> DEBT UPGRADED BY S/P\nStandard and Poor's Corp said it\n"
            "upgraded 500 mln dlrs of debt of Navistar International Corp.\n"
            "<Video Shopping Mall Inc> said it signed WJTC-TV &amp; others.")
    raw = jsonio.dumps({"id": 1, "text": body, "timestamp": 0})
    doc = parse_item(raw, ItemFormat(extract=mode), "p")  # type: ignore[arg-type]
    assert isinstance(doc, Document) and not doc.markup
    assert doc.text == body.replace("&amp;", "&")


STORY = "the harbour plan was approved by the city council on monday after a long debate"


@pytest.mark.parametrize("empty", ["", " ", "\t\n", "\u3000"])
def test_an_empty_id_is_no_identity_and_never_shared(empty: str) -> None:
    """``"id": ""`` (or blank) means no id: the source position is the identity, as for a
    missing id, so two different items with it are never taken for one redelivered item."""
    from ndd_stream.core.detector import Detector, DetectorConfig

    detector = Detector(DetectorConfig())
    decisions = []
    for n, text in enumerate((STORY, "an entirely different story about the football cup "
                              "final and the goals scored in extra time")):
        raw = jsonio.dumps({"id": empty, "text": text, "timestamp": 1_700_000_000})
        doc = parse_item(raw, FMT, f"raw[0]@{n}")
        assert isinstance(doc, Document) and doc.identity == f"raw[0]@{n}"
        decisions.append(detector.decide(doc))
    assert [d.status.value for d in decisions] == ["unique", "unique"]
    assert not any(d.replayed for d in decisions)


def test_integer_ids_beyond_64_bits_are_exact_identities() -> None:
    """orjson reads integers beyond 64 bits as floats, which would merge neighbours."""
    ids = [12345678901234567890123, 12345678901234567890124, 2**64, -(2**63) - 1,
           int("9" * 400)]
    got = []
    for n, ident in enumerate(ids):
        raw = b'{"id": %d, "text": "story", "timestamp": 1}' % ident
        doc = parse_item(raw, FMT, f"raw[0]@{n}")
        assert isinstance(doc, Document), doc
        got.append(doc.identity)
    assert got == [str(i) for i in ids]


@pytest.mark.parametrize(
    ("value", "says"),
    [(b"1.5", "not a number with a fraction or exponent (1.5)"),
     (b"1e30", "not a number with a fraction or exponent"),
     (b"true", "not a boolean"), (b'{"a": 1}', "not an object"), (b"[1]", "not an array")])
def test_an_unusable_id_is_refused_naming_its_type(value: bytes, says: str) -> None:
    result = parse_item(b'{"id": ' + value + b', "text": "story", "timestamp": 1}', FMT, "p")
    assert isinstance(result, Invalid) and result.reason == "bad_field_type", result
    assert says in result.detail


def test_giant_ids_channels_and_scopes_are_refused() -> None:
    """They travel in the headers of every routed record: unbounded, one record could pass
    the producer's request limit."""
    from ndd_stream.core.items import MAX_KEY_CHARS

    fmt = ItemFormat(max_item_bytes=100_000, scope="desk")
    ok = "x" * MAX_KEY_CHARS
    for field in ("id", "channel", "desk"):
        fine = parse_item(jsonio.dumps({field: ok, "text": "story", "timestamp": 1}), fmt, "p")
        assert isinstance(fine, Document), (field, fine)
        raw = jsonio.dumps({field: ok + "y", "text": "story", "timestamp": 1})
        result = parse_item(raw, fmt, "p")
        assert isinstance(result, Invalid) and result.reason == "bad_field_type", field
        assert f"more than {MAX_KEY_CHARS}" in result.detail


def test_offline_dedup_gives_an_empty_id_its_line(tmp_path: Path) -> None:
    from ndd_stream.core.detector import DetectorConfig
    from ndd_stream.dedup import dedup_file

    source = tmp_path / "in.jsonl"
    lines = [{"id": "", "text": STORY, "timestamp": 1_700_000_000},
             {"id": " ", "text": STORY + " and more", "timestamp": 1_700_000_001}]
    source.write_bytes(b"".join(jsonio.dumps(line) + b"\n" for line in lines))
    out = tmp_path / "out.jsonl"
    dedup_file(source, out, DetectorConfig(), FMT)
    rows = [jsonio.loads(line) for line in out.read_bytes().splitlines()]
    assert [r["identity"] for r in rows] == ["line:1", "line:2"]
    assert rows[1]["status"] == "near_duplicate" and rows[1]["duplicate_of"] == "line:1"


@pytest.mark.parametrize("threshold", [0.3, 0.8])
def test_offline_dedup_writes_the_same_with_the_lookup_thread(tmp_path: Path,
                                                              threshold: float) -> None:
    """The lookup thread changes when a record is written, not what: near copies across
    two scopes, invalid and blank lines between them, a repeated id (replayed), items
    too late for the window, texts shorter than q and a two-hour window that expires."""
    import random

    from ndd_stream.core.detector import DetectorConfig
    from ndd_stream.dedup import dedup_file

    rnd = random.Random(3)
    vocab = [f"w{i}" for i in range(120)]
    texts: list[str] = []
    lines: list[bytes] = []
    ts = 1_700_000_000
    for i in range(1500):
        if texts and rnd.random() < 0.4:
            words = rnd.choice(texts[-50:]).split()
            words[rnd.randrange(len(words))] = rnd.choice(vocab)
        else:
            words = rnd.choices(vocab, k=rnd.randint(3, 50))
        text = " ".join(words) if rnd.random() > 0.03 else "ab"
        texts.append(text)
        ts += rnd.choice([5, 20, 60, 120])
        ident = f"d{i}" if rnd.random() > 0.03 else "d7"
        roll = rnd.random()
        if roll < 0.03:
            lines.append(b"{not json")
        elif roll < 0.05:
            lines.append(b"")
        else:
            lines.append(jsonio.dumps({"id": ident, "channel": rnd.choice("ab"),
                                       "scope": rnd.choice(["x", "y"]), "text": text,
                                       "timestamp": ts - 4 * 3600 * (rnd.random() < 0.02)}))
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    config = DetectorConfig(threshold=threshold, window_hours=2, index="flat")
    fmt = ItemFormat(scope="scope")
    outs = []
    for thread in (False, True):
        out = tmp_path / f"out-{thread}.jsonl"
        summary = dedup_file(source, out, config, fmt, lookup_thread=thread)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    rows = [jsonio.loads(line) for line in outs[1].splitlines()]
    statuses = {r["status"] for r in rows}
    assert {"invalid", "unique", "near_duplicate", "exact_duplicate"} <= statuses
    assert {r.get("policy") for r in rows} >= {"late", "short"}
    assert any(r.get("replayed") for r in rows) and summary.statuses["near_duplicate"] > 100


@pytest.mark.parametrize("thread", [False, True])
def test_offline_dedup_writes_each_record_before_the_next_line_is_needed(thread: bool) -> None:
    """Read from a pipe, a record must not wait for the next line to arrive: without the
    lookup thread each is written before the next line is read; with it, at most the last
    one waits (its lookup runs while the next line is read)."""
    import io

    from ndd_stream.core.detector import DetectorConfig
    from ndd_stream.dedup import run_dedup

    sink = io.BytesIO()

    def lines() -> Iterator[bytes]:
        for i in range(40):
            written = sink.getvalue().count(b"\n")
            assert written >= i - (1 if thread else 0), (i, written)
            yield jsonio.dumps({"id": f"d{i}", "text": f"{STORY} {i % 7}",
                                "timestamp": 1_700_000_000 + i}) + b"\n"

    summary = run_dedup(lines(), sink, DetectorConfig(index="flat"), FMT, lookup_thread=thread)
    assert sink.getvalue().count(b"\n") == 40 and summary.statuses["unique"] < 40


def test_offline_dedup_begins_the_next_windows_items_before_finishing_the_last() -> None:
    """With the lookup thread, an item of another window is begun before the one in flight
    is finished (one of its window after it): the records are those of one item at a time,
    each at most one line late."""
    import io

    from ndd_stream.core.detector import DetectorConfig
    from ndd_stream.dedup import run_dedup

    channels = ["a", "b", "c", "a", "a", "b", "c", "c", "b"]
    words = ["again", "today", "quickly", "there"]
    outs, lags = [], []
    for thread in (False, True):
        sink = io.BytesIO()

        def lines(sink: io.BytesIO = sink) -> Iterator[bytes]:
            for i in range(270):
                lags.append(i - sink.getvalue().count(b"\n"))
                if i % 50 == 49:
                    yield b"{not json\n"
                    continue
                yield jsonio.dumps({"id": f"d{i}", "channel": channels[i % len(channels)],
                                    "text": f"{STORY} {words[i % 4]} {i % 3}",
                                    "timestamp": 1_700_000_000 + i}) + b"\n"

        for threshold in (0.3, 0.8):
            run_dedup(lines(), sink, DetectorConfig(threshold=threshold, index="flat"), FMT,
                      lookup_thread=thread)
        outs.append(sink.getvalue())
    assert outs[0] == outs[1] and outs[0].count(b"\n") == 540
    assert b"near_duplicate" in outs[0] and b"invalid" in outs[0]
    assert max(lags[:540]) == 0 and max(lags[540:]) == 1


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux: /proc lists threads")
def test_offline_dedup_keeps_one_engine_thread_for_every_scope() -> None:
    """Thirty scopes, each with a window and its flat index, share one engine thread: a
    thread per window, each polling for its next job, made dedup of many channels ten times
    slower than without the thread."""
    import io

    from harness.threads import engine_threads

    from ndd_stream.core.detector import DetectorConfig
    from ndd_stream.dedup import run_dedup

    seen: list[int] = []

    def lines() -> Iterator[bytes]:
        for i in range(300):
            seen.append(engine_threads())
            yield jsonio.dumps({"id": f"d{i}", "channel": f"c{i % 30}",
                                "text": f"{STORY} {words[i % 5]}",
                                "timestamp": 1_700_000_000 + i}) + b"\n"

    words = ["again", "today", "quickly", "there", "anyway"]
    summary = run_dedup(lines(), io.BytesIO(), DetectorConfig(index="flat"), FMT,
                        lookup_thread=True)
    assert max(seen) == 1
    assert summary.statuses["near_duplicate"] + summary.statuses["exact_duplicate"] > 200
