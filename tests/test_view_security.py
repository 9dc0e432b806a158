"""The web view against hostile records, without a broker or a browser (issue 24): one
escaping path that nothing bypasses, every page parsed for injected markup whatever the
fields hold, the security headers and the Host rule over HTTP, and the memory bound with
1 MB fields. The same payloads run in chromium in tests/test_view_hostile.py."""

from __future__ import annotations

import ast
import asyncio
import base64
import json
import sys
import tracemalloc
from html.parser import HTMLParser
from pathlib import Path

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from view_helpers import HOSTILE, T0, hostile_state
from view_helpers import record as _rec

import ndd_stream.view as view_package
from ndd_stream.core.items import ItemFormat
from ndd_stream.settings import Settings
from ndd_stream.view import caps, pages, queries, story_pages
from ndd_stream.view.guard import CSP, host_allowed, host_name
from ndd_stream.view.highlight import mark_pair
from ndd_stream.view.html import Html, html, join, plain, url, visible
from ndd_stream.view.model import Limits, ViewState
from ndd_stream.view.server import ViewServer
from ndd_stream.view.stories import ORDERS, stories, story

VIEW = Path(view_package.__file__).parent


# --- one escaping path -----------------------------------------------------------------------
def _markup_builders(tree: ast.AST) -> list[str]:
    """What in a module builds markup around html.py: f-strings, ``%`` or ``.format`` on a
    literal with a tag, ``Html(...)``, ``html()`` with a template that is not a literal, and
    other escapers."""
    found = []
    for node in ast.walk(tree):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.JoinedStr):
            literal = "".join(v.value for v in node.values
                              if isinstance(v, ast.Constant) and isinstance(v.value, str))
            if "<" in literal or ">" in literal or '="' in literal:
                found.append(f"{where}: f-string with markup")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(
                node.left, ast.Constant) and "<" in str(node.left.value):
            found.append(f"{where}: % formatting of markup")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "format" and isinstance(node.func.value, ast.Constant) and \
                "<" in str(node.func.value.value):
            found.append(f"{where}: str.format of markup")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "Html":
                found.append(f"{where}: Html(...) outside html.py")
            elif node.func.id in ("html", "url") and not (
                    node.args and isinstance(node.args[0], ast.Constant)):
                found.append(f"{where}: {node.func.id}() template is not a literal")
        elif isinstance(node, ast.ImportFrom) and node.module in ("html", "markupsafe"):
            found.append(f"{where}: another escaper ({node.module})")
    return found


def test_nothing_in_the_view_builds_markup_around_the_escaping_path() -> None:
    modules = [p for p in sorted(VIEW.glob("*.py")) if p.name != "html.py"]
    assert {p.name for p in modules} >= {"pages.py", "charts.py", "server.py"}
    found = {p.name: _markup_builders(ast.parse(p.read_text())) for p in modules}
    assert not {k: v for k, v in found.items() if v}, found
    # the check itself finds what it must
    bad = ast.parse('x = f"<p>{v}</p>"\ny = Html(v)\nz = html(t)\nfrom html import escape\n'
                    'w = "<b>%s</b>" % v\nq = "<i>{}</i>".format(v)')
    assert len(_markup_builders(bad)) == 6


def test_values_are_escaped_isolated_and_their_controls_shown() -> None:
    out = html('<a href="{}" title="{}">{}</a>{:.2f}', url("/pair", {"key": "a&b\"<"}),
               'x" onmouseover="y', "<img src=x onerror=y>\u202eevil\x1b[31m", 0.5)
    assert out == ('<a href="/pair?key=a%26b%22%3C" title="x&quot; onmouseover=&quot;y">'
                   "<bdi>&lt;img src=x onerror=y&gt;[U+202E]evil[U+001B][31m</bdi></a>0.50")
    assert html("<p>{}</p>", html("<b>{}</b>", "<")) == "<p><b><bdi>&lt;</bdi></b></p>"
    assert plain("a\n\tb<\u2066") == "a\n\tb&lt;[U+2066]"  # running text: newlines kept
    assert visible("\u200fok\u200e") == "\u200fok\u200e"  # RLM/LRM: ordinary marks, kept
    assert html("<p>{x}</p>", x="{y}") == "<p><bdi>{y}</bdi></p>"  # not a template again
    with pytest.raises(TypeError):
        html('<a title="{}">', html("<b>x</b>"))  # markup inside a tag: a bug
    with pytest.raises(TypeError):
        join(["<b>raw</b>"])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        url("//elsewhere.example")  # type: ignore[arg-type]
    assert isinstance(html("<p></p>"), Html)


class _Markup(HTMLParser):
    """Every tag, attribute and text of a page, to compare with what the view writes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str, str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


#: Every tag and attribute the view's own templates write; a page with anything else was
#: injected.
TAGS = {"html", "head", "meta", "title", "link", "body", "header", "b", "nav", "a", "span",
        "label", "input", "main", "footer", "script", "div", "h1", "h2", "p", "svg", "text",
        "line", "polyline", "table", "tr", "th", "td", "form", "select", "option", "button",
        "section", "br", "mark", "pre", "details", "summary", "bdi"}
ATTRS = {"lang", "charset", "name", "content", "rel", "href", "data-page", "class", "id",
         "type", "src", "data-live", "viewbox", "width", "height", "role", "aria-label", "x",
         "y", "text-anchor", "x1", "x2", "y1", "y2", "fill", "stroke", "stroke-width",
         "points", "data-series", "colspan", "method", "action", "step", "min", "max",
         "value", "placeholder", "selected", "data-key", "title", "dir"}


def assert_inert(page: str, *, hostile: bool = True) -> None:
    """No tag, attribute, event handler, script or link that the view did not write; no
    bidi control left in the text; the payload is there, as text."""
    parser = _Markup()
    parser.feed(page)
    parser.close()
    assert parser.tags <= TAGS, parser.tags - TAGS
    assert {a for _, a, _ in parser.attrs} <= ATTRS, {a for _, a, _ in parser.attrs} - ATTRS
    for tag, name, value in parser.attrs:
        if name in ("href", "src", "action", "data-live"):
            assert (value.startswith("/") and not value.startswith("//")) or value == "data:,", \
                (tag, name, value)
        if tag == "script":
            assert (name, value) == ("src", "/static/view.js")
    text = "".join(parser.text)
    assert not caps_controls(text), repr(text[:200])
    if hostile:
        assert "onerror=" in text  # the payload is shown as text, not dropped


def caps_controls(text: str) -> list[str]:
    from ndd_stream.view.html import CONTROL

    return CONTROL.findall(text.replace("\n", "").replace("\t", "").replace("\r", ""))


def every_page(state: ViewState, bad: str) -> list[str]:
    """Every page and fragment of the view, rendered from ``state`` with ``bad`` also in
    every query parameter and in both 'matched text missing' messages."""
    footer = pages.footer([bad], bad, T0)
    out: list[str] = [pages.now_page(queries.now(state, T0 + 1, 300), bad, footer),
                      pages.now_fragment(queries.now(state, T0 + 1, 300))]
    for flt in (queries.Filter(), queries.Filter(scope=bad, status=bad, reason=bad, q=bad)):
        listed = queries.decisions(state, flt)
        out += [pages.decisions_page(listed, flt, {"q": bad, bad: bad}, footer),
                pages.decisions_fragment(listed)]
    for order in ORDERS:
        held = stories(state, T0 + 1, 86400, order)
        assert held.stories  # the hostile decisions are one story
        out += [story_pages.stories_page(held, bad, order, footer),
                story_pages.stories_fragment(held)]
    for row in state.decisions.newest():
        found_story = story(state, row.story)
        assert found_story is not None
        out.append(story_pages.story_page(found_story, footer))
    rows, reasons = queries.dead_letters(state)
    out += [pages.dlq_page(rows, dict(reasons), bad, footer), pages.dlq_fragment(rows),
            pages.not_found(html("no decision {} is held", bad), footer)]
    missing = [html("the matched item {} ({}) is no longer held", bad, bad),
               html("the matched item {} was at {}[{}]@{} but could not be read back", bad,
                    bad, 0, 1)]
    for row in state.decisions.newest():
        found = queries.pair(state, row.key)
        assert found is not None
        new = old = None
        if found.new is not None and found.old is not None:
            new, old, _ = mark_pair(found.new.text, found.old.text, [bad], [bad])
        for why in missing:
            out.append(pages.pair_page(found, new, old, True, why, footer))
    return out


@pytest.mark.parametrize("bad", HOSTILE)
def test_every_page_shows_each_payload_as_text(bad: str) -> None:
    state = hostile_state(bad)
    for page in every_page(state, bad):
        assert_inert(page, hostile="onerror=" in bad)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
               max_size=40).map(lambda s: s + '"><img src=x onerror=alert(1)>'))
def test_no_field_value_adds_markup(bad: str) -> None:
    for page in every_page(hostile_state(bad), bad):
        assert_inert(page)


# --- headers and the Host rule, over HTTP -----------------------------------------------------
def _server(**overrides: object) -> ViewServer:
    settings_ = Settings(brokers="127.0.0.1:1", decisions_topic="news.decisions",
                         **overrides)  # type: ignore[arg-type]
    server = ViewServer(settings_, port=0)
    server.state = hostile_state(HOSTILE[0])
    return server


PATHS = ("/", "/fragment/now", "/decisions?q=x", "/fragment/decisions", "/dlq",
         "/fragment/dlq", "/pair?key=nope", "/api/status", "/static/view.js",
         "/static/nothing", "/stories", "/fragment/stories?order=fastest", "/story?id=nope")


def test_security_headers_on_every_response() -> None:
    async def run() -> None:
        async with TestClient(TestServer(_server().make_app())) as client:
            for path in (*PATHS, "/no/such/route"):
                response = await client.get(path)
                assert response.status in (200, 404), path
                h = response.headers
                assert h["Content-Security-Policy"] == CSP, path
                assert "script-src 'self';" in CSP and "unsafe-inline" not in CSP
                assert "frame-ancestors 'none'" in CSP
                assert h["X-Content-Type-Options"] == "nosniff"
                assert h["X-Frame-Options"] == "DENY" and h["Referrer-Policy"] == "no-referrer"
                want = "no-cache" if path == "/static/view.js" else "no-store"
                assert h["Cache-Control"] == want, path

    asyncio.run(run())


def test_without_a_password_only_loopback_and_allowed_hosts_are_served() -> None:
    async def run(server: ViewServer, hosts: dict[str, int]) -> None:
        async with TestClient(TestServer(server.make_app())) as client:
            for host, status in hosts.items():
                response = await client.get("/decisions", headers={"Host": host})
                assert response.status == status, host
                if status == 421:
                    body = await response.text()
                    assert "NDD_VIEW_ALLOWED_HOSTS" in body and "DNS rebinding" in body
                    assert response.headers["Content-Security-Policy"] == CSP
                    # probes (Kubernetes sends the pod's address) still get the status
                    probe = await client.get("/api/status", headers={"Host": host})
                    assert probe.status == 200

    asyncio.run(run(_server(), {
        "localhost:6067": 200, "127.0.0.1:6067": 200, "[::1]:6067": 200, "127.8.9.1": 200,
        "LOCALHOST.": 200, "view.localhost:6067": 200, "attacker.example:6067": 421,
        "localhost.attacker.example": 421, "127.0.0.1.nip.io": 421, "10.0.0.5:6067": 421,
        "": 421}))
    asyncio.run(run(_server(view_allowed_hosts="view.example.org,.corp.example"), {
        "view.example.org:6067": 200, "VIEW.example.org": 200, "a.b.corp.example": 200,
        "corp.example": 200, "other.example.org": 421, "xcorp.example": 421}))
    bound = _server()
    bound.host = "10.0.0.5"  # a specific bind address is reachable by that address
    asyncio.run(run(bound, {"10.0.0.5:6067": 200, "10.0.0.6:6067": 421}))
    assert host_name("[::1]:80") == "::1" and host_name("Example.ORG.:8080") == "example.org"
    assert host_allowed(None, [])  # no Host at all (HTTP/1.0 tools): not a browser


def test_with_a_password_any_host_is_served_after_the_login() -> None:
    token = base64.b64encode(b"viewer:pw").decode()

    async def run() -> None:
        server = _server(view_password="pw")
        async with TestClient(TestServer(server.make_app())) as client:
            for host in ("view.example.org", "attacker.example"):
                refused = await client.get("/", headers={"Host": host})
                assert refused.status == 401 and refused.headers["Cache-Control"] == "no-store"
                ok = await client.get("/", headers={"Host": host,
                                                    "Authorization": f"Basic {token}"})
                assert ok.status == 200 and ok.headers["Cache-Control"] == "no-store"

    asyncio.run(run())


def test_allowed_hosts_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NDD_VIEW_ALLOWED_HOSTS from the environment, a --config file or --allowed-hosts."""
    from ndd_stream.cli.main import build_settings, make_parser

    monkeypatch.delenv("NDD_VIEW_ALLOWED_HOSTS", raising=False)
    assert Settings(view_allowed_hosts=" a.example, ,.b.example").view_allowed_hosts == [
        "a.example", ".b.example"]  # type: ignore[arg-type]
    assert Settings().view_allowed_hosts == []
    config = tmp_path / "view.env"
    config.write_text("NDD_VIEW_ALLOWED_HOSTS=view.example.org,.corp.example\n")
    parser, _ = make_parser()
    from_file = build_settings(parser.parse_args(["view", "--config", str(config)]))
    assert from_file.view_allowed_hosts == ["view.example.org", ".corp.example"]
    given = build_settings(parser.parse_args(["view", "--config", str(config),
                                              "--allowed-hosts", "other.example"]))
    assert given.view_allowed_hosts == ["other.example"]
    assert "--allowed-hosts" in parser._subparsers._group_actions[0].choices[  # type: ignore[union-attr]
        "view"].format_help()


# --- the memory bound with 1 MB fields --------------------------------------------------------
def test_memory_bound_holds_with_one_megabyte_fields() -> None:
    """100 records with 1 MB titles (and ids, channels, headers, audit values and dead
    letters far over their caps) stay within an 8 MB text budget: measured with
    tracemalloc."""
    budget = 8 * 1024 * 1024
    mb = "\u00e9" * (1024 * 1024)  # a 1 MB title (one byte a character in Python)
    big = "x" * 100_000  # every other field: far over its cap
    state = ViewState(ItemFormat(), Limits(text_bytes=budget))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100):
            ident = f"{i}-{big}"
            item = {"id": ident, "channel": big, "title": f"{i} {mb}", "text": big + big,
                    "timestamp": T0}
            headers = {"ndd-identity": ident, "ndd-status": "near_duplicate", "x-big": big,
                       **{f"h{j}": "v" * 2000 for j in range(20)}}
            state.ingest("duplicate", _rec("news.duplicate", i, item, headers))
            state.ingest("decisions", _rec("news.decisions", i, {
                "identity": ident, "status": "near_duplicate", "similarity": 0.9,
                "duplicate_of": f"{i - 1}-{big}", "matched_channel": big, "scope": big,
                "channel": big, "time": big, "policy": big, "source": f"news.raw[0]@{i}",
                "big": big, "list": [big] * 3, "nested": {big: {"deeper": [big]}}},
                headers))
            state.ingest("dlq", _rec("news.dlq", i, orjson.dumps(item), {
                "ndd-dlq-reason": f"{i}{big}", "ndd-dlq-detail": big, "x-big": big}))
            del item, headers, ident
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert state.texts.used <= budget
    # the text budget, plus 100 decisions, positions and dead letters whose every field is
    # at its cap: ~30 KB per decided item (docs/VIEW.md), 3 MB for 100, and slack; without
    # the caps the titles alone would hold 100 MB
    assert held <= budget + 4 * 1024 * 1024, held
    row = state.decisions.newest()[0]
    assert len(row.identity) == caps.ID_CHARS and len(row.channel) == caps.NAME_CHARS
    assert row.duplicate_of is not None and row.duplicate_of in state.locators  # same key
    assert sum(len(k) + len(v) for k, v in row.headers) <= caps.HEADERS_CHARS + 100
    assert len(json.dumps(row.audit, ensure_ascii=False)) <= 2 * caps.AUDIT_CHARS
    text = state.texts.get(row.identity)
    assert text is not None and text.cut and len(text.title) == caps.TITLE_CHARS
    assert max(len(loc.title) for loc in state.locators) <= caps.LIST_TITLE_CHARS
    assert len(state.dlq_reasons.counts) <= caps.DLQ_REASONS + 1
    print(f"held {held / 1e6:.1f} MB for 300 records of 1 MB fields", file=sys.stderr)


def test_long_identities_stay_distinct_and_findable() -> None:
    a, b = "x" * 5000 + "a", "x" * 5000 + "b"
    assert caps.ident(a) != caps.ident(b) and caps.ident(a) == caps.ident(a)
    assert len(caps.ident(a)) == caps.ID_CHARS and caps.ident("short") == "short"
    assert caps.cut("abcdef", 4) == "abc…"
    kept = dict(caps.headers((("ndd-resembles", a), ("x-other", a))))
    assert kept["ndd-resembles"] == caps.ident(a) and len(kept["x-other"]) == caps.DETAIL_CHARS
