"""The web view's pure parts, without a broker: rings, rates, highlighting, ingestion,
queries, HTML, and the aiohttp routes over an in-memory state."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from ndd_stream.core.items import ItemFormat
from ndd_stream.kafka.tail import TailRecord
from ndd_stream.settings import Settings
from ndd_stream.view import pages, queries
from ndd_stream.view.auth import credentials
from ndd_stream.view.charts import line_chart, nice_max
from ndd_stream.view.highlight import figures_only_in, mark_pair, shared_spans, token_spans
from ndd_stream.view.html import EMPTY
from ndd_stream.view.model import Limits, ViewState
from ndd_stream.view.rings import CappedCounter, Ring, StoredText, TextStore, Timeline

T0 = 1_700_000_000.0


# --- rings ----------------------------------------------------------------------------------
def test_ring_keeps_the_newest_and_each_key_once() -> None:
    ring: Ring[int] = Ring(3)
    assert [ring.add(str(i), i) for i in range(5)] == [True] * 5
    assert ring.newest() == [4, 3, 2] and ring.evicted == 2
    assert not ring.add("4", 40) and ring.get("4") == 4  # a redelivery is kept once
    assert "1" not in ring and ring.newest(2) == [4, 3]


def test_text_store_stays_within_its_budget() -> None:
    store = TextStore(budget_bytes=20_000, max_chars=1000)
    for i in range(200):
        store.put(StoredText(f"id{i}", f"title {i}", "x" * 5000, "c", "", f"t[0]@{i}"))
        assert store.used <= 20_000
    assert store.get("id199") is not None and store.get("id0") is None
    assert store.get("id199").cut and len(store.get("id199").text) == 1000  # type: ignore[union-attr]
    assert len(store) + store.evicted == 200


def test_series_buckets_rates_and_gauges() -> None:
    tl = Timeline(fine=(1, 60), coarse=(10, 30))
    for i in range(30):
        tl.add(T0 + i, "unique", 2)
    tl.add(T0 + 30.5, "unique", 100)  # the current second: not in the rate yet
    assert tl.rate(T0 + 30.5, "unique", seconds=10) == 2.0
    start, step, buckets = tl.window(T0 + 30.5, 20)
    assert step == 1 and len(buckets) == 20 and buckets[-1]["unique"] == 100
    assert start == int(T0 + 30.5) - 19
    _, step, buckets = tl.window(T0 + 30.5, 300)  # longer than the fine series: coarse
    assert step == 10 and sum(b["unique"] for b in buckets) == 160
    tl.add(T0 - 1000, "unique")  # older than the series holds: dropped, nothing breaks
    tl.fine.set(T0 + 31, "lag", 5)
    tl.fine.set(T0 + 31, "lag", 7)
    assert tl.fine.window(T0 + 31, 1)[1][0]["lag"] == 7
    # a slot reused a lap later starts empty
    tl.add(T0 + 60, "unique")
    assert tl.fine.window(T0 + 60, 1)[1][0]["unique"] == 1


def test_capped_counter_folds_extra_keys() -> None:
    counter = CappedCounter(2)
    for key in ("a", "b", "c", "d", "a"):
        counter.add(key, "unique")
    assert counter.counts["a"]["unique"] == 2 and counter.counts["(other scopes)"]["unique"] == 2
    assert sum(counter.totals().values()) == 5


# --- highlighting ----------------------------------------------------------------------------
NEW = ("Copper prices rose 1.2% to a six-week high in early trading as a landslide at the "
       "Sarvak mine halted output. Traders said stocks were thin.")
OLD = ("Traders said stocks were thin. Copper prices rose 1.4% to a six-week high in early "
       "trading after a landslide at the Sarvak mine halted output for days.")


def test_shared_passages_are_found_in_any_order() -> None:
    a, b, (wa, sa), (wb, sb) = shared_spans(NEW, OLD)

    def covered(text: str, spans: list[tuple[int, int]], phrase: str) -> bool:
        at = text.index(phrase)
        return any(s <= at and at + len(phrase) <= t for s, t in spans)

    assert covered(NEW, a, "a landslide at the Sarvak mine halted output")
    assert covered(NEW, a, "Traders said stocks were thin")  # moved to the front in OLD
    assert covered(OLD, b, "to a six-week high in early trading")
    assert not covered(NEW, a, "Copper prices rose")  # its run holds the differing figure
    assert 0 < sa < wa and 0 < sb < wb


def test_identical_and_disjoint_texts() -> None:
    new, old, _ = mark_pair("One two three four five.", "One two three four five.")
    assert new.shared_fraction == 1.0 and old.shared_fraction == 1.0
    new, old, _ = mark_pair("One two three four five.", "Six seven eight nine ten.")
    assert new.shared_fraction == 0.0 and not any(s.shared for s in new.segments)


def test_differing_tokens_from_the_decision_or_the_view() -> None:
    new, old, from_decision = mark_pair(NEW, OLD, only_new=["1.2%"], only_old=["1.4%"])
    assert from_decision
    assert [s.text for s in new.segments if s.diff] == ["1.2%"]
    assert [s.text for s in old.segments if s.diff] == ["1.4%"]
    new, old, from_decision = mark_pair(NEW, OLD)  # no decision fields: figures compared
    assert not from_decision and [s.text for s in new.segments if s.diff] == ["1.2%"]
    assert figures_only_in("12 and 3.5", "3.5 and 4") == ["12"]
    assert token_spans("Mr Haslund, haslund", ["Haslund"]) == [(3, 10)]  # exact case first
    assert token_spans("112.5 12.5", ["12.5"]) == [(6, 10)]  # whole tokens only


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.text(max_size=300),
       st.lists(st.text(min_size=1, max_size=5), max_size=3))
def test_segments_rebuild_the_texts(a: str, b: str, tokens: list[str]) -> None:
    new, old, _ = mark_pair(a, b, only_new=tokens, only_old=tokens)
    assert "".join(s.text for s in new.segments) == a
    assert "".join(s.text for s in old.segments) == b
    assert 0.0 <= new.shared_fraction <= 1.0


# --- ingestion and queries -------------------------------------------------------------------
def _rec(topic: str, offset: int, value: object, headers: dict[str, str] | None = None,
         ts: float = T0) -> TailRecord:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return TailRecord(topic, 0, offset, int(ts * 1000), None, raw,
                      tuple((k, v.encode()) for k, v in (headers or {}).items()))


def _audit(identity: str, status: str, sim: float, dup: str | None, offset: int,
           **extra: object) -> dict[str, object]:
    return {"identity": identity, "status": status, "similarity": sim, "duplicate_of": dup,
            "matched_channel": "wire" if dup else None, "matched_timestamp": T0 if dup else None,
            "scope": "wire", "hour": 1, "policy": "", "replayed": False, "channel": "wire",
            "time": "2024-03-12T05:00:00Z", "source": f"news.raw[0]@{offset}", **extra}


def _filled(limits: Limits | None = None) -> ViewState:
    state = ViewState(ItemFormat(), limits or Limits())
    state.ingest("unique", _rec("news.unique", 0, {"id": "a", "channel": "wire", "title": "Quake",
                                                   "text": OLD, "timestamp": T0},
                                {"ndd-identity": "a", "ndd-status": "unique"}))
    state.ingest("duplicate", _rec("news.duplicate", 0, {"id": "b", "channel": "wire",
                                                         "title": "<script>x</script>",
                                                         "text": NEW},
                                   {"ndd-identity": "b", "ndd-status": "near_duplicate"}))
    state.ingest("decisions", _rec("news.decisions", 0, _audit("a", "unique", 0.0, None, 0)))
    novel = {"reason": "figures", "resembles": "a", "similarity": 0.8, "only_new": ["1.2%"],
             "only_old": ["1.4%"]}
    state.ingest("decisions", _rec("news.decisions", 1, _audit("b", "unique", 0.8, None, 1,
                                                                novel=novel),
                                   {"ndd-novel-detail": "figures differ: 1.4% -> 1.2%"}))
    state.ingest("decisions", _rec("news.decisions", 2, _audit("c", "near_duplicate", 0.9, "a",
                                                                2)))
    state.ingest("decisions", _rec("news.decisions", 2, _audit("c", "near_duplicate", 0.9, "a",
                                                                2)))  # redelivered
    state.ingest("dlq", _rec("news.dlq", 0, b"{not json", {
        "ndd-dlq-reason": "not_json", "ndd-dlq-detail": "unexpected character",
        "ndd-source-topic": "news.raw", "ndd-source-partition": "0",
        "ndd-source-offset": "3"}))
    return state


def test_ingest_counts_each_source_position_once() -> None:
    state = _filled()
    assert len(state.decisions) == 3 and len(state.dlq) == 1
    now = queries.now(state, T0 + 1, 300)
    assert now.totals == {"unique": 2, "near_duplicate": 1, "exact_duplicate": 0, "dlq": 1}
    row = state.decisions.get("news.raw[0]@1")
    assert row is not None and row.reason == "figures" and row.matched == "a"
    assert state.title_of("b") == "<script>x</script>"


def test_an_item_decided_behind_the_order_says_so_and_filters() -> None:
    state = _filled()
    audit = {**_audit("d", "unique", 0.0, None, 4), "order": "behind"}
    state.ingest("decisions", _rec("news.decisions", 4, audit, {"ndd-order": "behind"}))
    row = state.decisions.get("news.raw[0]@4")
    assert row is not None and row.reason == "behind"
    keys = [d.row.key for d in queries.decisions(state, queries.Filter(reason="behind")).rows]
    assert keys == ["news.raw[0]@4"]


def test_filters() -> None:
    state = _filled()
    keys = lambda flt: [d.row.key for d in queries.decisions(state, flt).rows]  # noqa: E731
    assert keys(queries.Filter(status="duplicate")) == ["news.raw[0]@2"]
    assert keys(queries.Filter(reason="figures")) == ["news.raw[0]@1"]
    assert keys(queries.Filter.parse({"smin": "0.5", "smax": "0.85"})) == ["news.raw[0]@1"]
    assert keys(queries.Filter(reason="-", status="unique")) == ["news.raw[0]@0"]
    assert keys(queries.Filter(q="QUAKE")) == ["news.raw[0]@0"]
    assert queries.Filter.parse({"smin": "x"}).smin is None


def test_memory_is_bounded_whatever_the_traffic() -> None:
    limits = Limits(decisions=50, dlq=10, text_bytes=200_000, locators=100, scopes=5)
    state = ViewState(ItemFormat(), limits)
    for i in range(5000):
        state.ingest("unique", _rec("news.unique", i, {"id": str(i), "channel": f"c{i}",
                                                       "title": "t", "text": "y" * 3000},
                                    {"ndd-identity": str(i)}))
        state.ingest("decisions", _rec("news.decisions", i, {
            **_audit(str(i), "unique", 0.0, None, i), "scope": f"s{i}"}))
        state.ingest("dlq", _rec("news.dlq", i, b"x", {"ndd-dlq-reason": "not_json"}))
    assert len(state.decisions) == 50 and len(state.dlq) == 10
    assert state.texts.used <= 200_000 and len(state.locators) == 100
    assert len(state.scopes.counts) <= 6  # 5 scopes + "(other scopes)"


def test_pages_escape_and_mark() -> None:
    state = _filled()
    listed = queries.decisions(state, queries.Filter())
    html = pages.decisions_fragment(listed)
    assert "<script>x" not in html and "&lt;script&gt;x" in html
    found = queries.pair(state, "news.raw[0]@1")
    assert found is not None and found.new is not None and found.old is not None
    new, old, from_decision = mark_pair(found.new.text, found.old.text, ["1.2%"], ["1.4%"])
    page = pages.pair_page(found, new, old, from_decision, "", "footer")
    assert '<mark class="diff">1.2%</mark>' in page and '<mark class="diff">1.4%</mark>' in page
    assert '<mark class="shared">' in page and 'id="novel"' in page
    assert "figures differ: 1.4% -&gt; 1.2%" in page


def test_chart_svg() -> None:
    assert nice_max(0) == 1.0 and nice_max(7) == 10 and nice_max(120) == 200
    svg = line_chart("t <x>", T0, 1, {"in": [0, 1, 2], "out": [2, 1, 0]}, chart_id="c")
    assert svg.startswith("<svg") and svg.count("<polyline") == 2 and "t &lt;x&gt;" in svg


# --- the web routes, over an in-memory state --------------------------------------------------
@pytest.fixture
def view_server():  # type: ignore[no-untyped-def]
    from ndd_stream.view.server import ViewServer

    server = ViewServer(Settings(brokers="127.0.0.1:1", decisions_topic="news.decisions"),
                        port=0)
    filled = _filled()
    server.state = filled
    return server


def test_routes(view_server) -> None:  # type: ignore[no-untyped-def]
    async def run() -> None:
        async with TestClient(TestServer(view_server.make_app())) as client:
            for path in ("/", "/?span=24h", "/decisions?status=duplicate", "/dlq",
                         "/fragment/now", "/fragment/decisions?reason=figures",
                         "/fragment/dlq?reason=not_json", "/pair?key=news.raw%5B0%5D%401",
                         "/stories", "/stories?span=24h&order=fastest", "/fragment/stories",
                         "/story?id=a"):
                response = await client.get(path)
                assert response.status == 200, path
            page = await (await client.get("/pair?key=news.raw%5B0%5D%402")).text()
            assert "matched item" in page and '<mark class="shared">' in page
            assert (await client.get("/pair?key=nope")).status == 404
            assert (await client.get("/story?id=nope")).status == 404
            assert (await client.get("/static/view.js")).status == 200
            assert (await client.get("/static/..%2Fserver.py")).status == 404
            dlq = await (await client.get("/dlq")).text()
            assert "not_json" in dlq and "unexpected character" in dlq

    asyncio.run(run())


def test_without_an_audit_topic_rows_come_from_routed_headers() -> None:
    state = ViewState(ItemFormat(), rows_from_outputs=True)
    state.ingest("duplicate", _rec("news.duplicate", 0, {"id": "b", "channel": "wire",
                                                         "title": "Copy", "text": NEW}, {
        "ndd-identity": "b", "ndd-status": "near_duplicate", "ndd-similarity": "0.912345",
        "ndd-duplicate-of": "a", "ndd-scope": "wire", "ndd-source-topic": "news.raw",
        "ndd-source-partition": "1", "ndd-source-offset": "7"}))
    row = state.decisions.get("news.raw[1]@7")
    assert row is not None and row.status == "near_duplicate" and row.matched == "a"
    assert row.similarity == 0.912345 and row.audit is None and state.title_of("b") == "Copy"


def test_login_when_a_password_is_set() -> None:
    """NDD_VIEW_PASSWORD: every page asks for Basic credentials (a wrong user, password or
    malformed header is refused the same way); /api/status stays open for probes."""
    def basic(user: str, password: str) -> dict[str, str]:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    settings = Settings(brokers="127.0.0.1:1", view_user="desk",
                        view_password="s3cret: with colon")  # type: ignore[arg-type]
    from ndd_stream.view.server import ViewServer  # as the fixture imports it

    server = ViewServer(settings, port=0)
    server.state = _filled()

    async def run() -> None:
        async with TestClient(TestServer(server.make_app())) as client:
            for path in ("/", "/decisions", "/pair?key=news.raw%5B0%5D%402", "/dlq",
                         "/fragment/now", "/static/view.js"):
                refused = await client.get(path)
                assert refused.status == 401, path
                assert refused.headers["WWW-Authenticate"].startswith('Basic realm="ndd-stream')
            for headers in (basic("desk", "wrong"), basic("other", "s3cret: with colon"),
                            {"Authorization": "Basic !!notbase64"},
                            {"Authorization": "Bearer s3cret"}):
                assert (await client.get("/", headers=headers)).status == 401, headers
            ok = basic("desk", "s3cret: with colon")
            page = await client.get("/pair?key=news.raw%5B0%5D%402", headers=ok)
            assert page.status == 200 and "matched item" in await page.text()
            assert (await client.get("/api/status")).status == 200  # probes, no texts

    asyncio.run(run())
    assert credentials("Basic " + base64.b64encode(b"a:b:c").decode()) == ("a", "b:c")
    assert credentials(None) is None and credentials("Basic ") is None
    with pytest.raises(ValueError, match="must not be empty"):
        Settings(view_password="")  # type: ignore[arg-type]


def test_no_login_without_a_password(view_server) -> None:  # type: ignore[no-untyped-def]
    assert view_server.settings.view_password is None

    async def run() -> None:
        async with TestClient(TestServer(view_server.make_app())) as client:
            assert (await client.get("/")).status == 200

    asyncio.run(run())


def test_the_now_page_shows_each_shards_load_and_lag() -> None:
    """Sharded windows: per shard of each scoped partition, items answered per second since
    the last probe (its load) and prepared items not answered yet (its lag)."""
    from ndd_stream.view.model import LagRow

    state = ViewState(ItemFormat(), Limits())
    state.set_lag([LagRow("app-news.shards", k, "shard", 100 * k, 100 * k + 5)
                   for k in range(4)], 0, T0, None)
    state.set_lag([LagRow("app-news.shards", k, "shard", 100 * k + 20 * (k + 1), 100 * k + 90)
                   for k in range(4)], 0, T0 + 2, T0)
    page = str(pages.now_fragment(queries.now(state, T0 + 2, 300, shards=2)))
    table = page[page.index('id="shards"'):]
    table = table[:table.index("</table>")]
    rows = table.split("<tr>")[2:]
    assert len(rows) == 4
    # partition 3 = scoped partition 1, shard 1: 80 answered in 2 s, 10 still to answer
    assert [c.split("<")[0] for c in rows[3].split(">")[1::2]][:6] == [
        "1", "1", "3", "380", "40.0", "10"]
    assert "Shards" not in str(pages.now_fragment(queries.now(state, T0 + 2, 300, shards=1)))


# --- stories ---------------------------------------------------------------------------------
def _story_state() -> ViewState:
    """Story a: a first report, a copy on another channel, a more complete version and a
    follow-up, decided over the last hour; story x: two items, both in its last minutes."""
    state = ViewState(ItemFormat(), Limits())
    items = [("a", "unique", None, "wire", {}, 3000), ("b", "near_duplicate", "a", "web", {}, 2000),
             ("c", "near_duplicate", "b", "wire", {"supersedes": "a"}, 1500),
             ("d", "unique", None, "web", {}, 1200),
             ("x1", "unique", None, "wire", {}, 300),
             ("x2", "exact_duplicate", "x1", "wire", {}, 60),
             ("lone", "unique", None, "wire", {}, 30),
             ("old", "near_duplicate", "a", "wire", {}, 9000)]
    for offset, (ident_, status, dup, channel, extra, ago) in enumerate(items):
        story = "x1" if ident_.startswith("x") else ident_ if ident_ == "lone" else "a"
        state.ingest("decisions", _rec("news.decisions", offset, {
            **_audit(ident_, status, 0.9 if dup else 0.0, dup, offset), "channel": channel,
            "story": story, **extra}, ts=T0 - ago))
    return state


def test_stories_of_the_span_largest_or_fastest_first() -> None:
    from ndd_stream.view.stories import stories, story

    state = _story_state()
    largest = stories(state, T0, 3600)
    assert [(s.story, len(s.members)) for s in largest.stories] == [("a", 4), ("x1", 2)]
    a = largest.stories[0]  # "old" was decided before the hour: not in it
    assert a.first.row.identity == "a" and a.channels == ["web", "wire"]
    assert [a.role(m) for m in a.members] == ["first report", "copy", "more complete version",
                                              "follow-up"]
    assert [m.row.identity for m in a.versions] == ["a", "c"]
    assert [m.row.identity for m in a.follow_ups] == ["d"]
    assert [s.story for s in stories(state, T0, 3600, "fastest").stories] == ["x1", "a"]
    assert len(stories(state, T0, 86400).stories[0].members) == 5
    whole = story(state, "a")
    assert whole is not None and whole.members[0].row.identity == "old"
    assert story(state, "nope") is None
    # every decision opens its story: from the list and from its pair page
    listed = queries.decisions(state, queries.Filter())
    assert 'href="/story?id=a"' in pages.decisions_fragment(listed)
    found = queries.pair(state, "news.raw[0]@2")
    assert found is not None
    page = pages.pair_page(found, None, None, True, EMPTY, EMPTY)
    assert 'href="/story?id=a"' in page and "supersedes <bdi>a</bdi>" in page


def test_a_row_without_a_story_is_a_story_of_its_own() -> None:
    state = _filled()  # records of a worker before stories
    row = state.decisions.get("news.raw[0]@2")
    assert row is not None and (row.story, row.supersedes) == ("c", None)
