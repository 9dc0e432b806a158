"""Server-rendered HTML of the four views. Every value from Kafka goes through ``escape``.

Each page is a full document; the parts that change (``data-live``) are also served alone
as fragments, which the page's small script (static/view.js) fetches every two seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from html import escape
from urllib.parse import urlencode

from ndd_stream.view import charts
from ndd_stream.view.highlight import Marked
from ndd_stream.view.model import STATUSES, iso_ms
from ndd_stream.view.queries import SPANS, DecisionList, DlqRow, Filter, Now, Pair
from ndd_stream.view.rings import StoredText

NAV = (("now", "/", "Now"), ("decisions", "/decisions", "Recent decisions"),
       ("dlq", "/dlq", "DLQ"))
LABEL = {"unique": "unique", "near_duplicate": "near duplicate",
         "exact_duplicate": "exact duplicate", "dlq": "DLQ"}


def e(value: object) -> str:
    return escape("" if value is None else str(value))


def layout(title: str, active: str, body: str, footer: str = "") -> str:
    links = "".join(f'<a href="{href}" class="{"on" if key == active else ""}" '
                    f'id="nav-{key}">{label}</a>' for key, href, label in NAV)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>ndd-stream · {e(title)}</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        '<link rel="stylesheet" href="/static/view.css"></head>'
        f'<body data-page="{e(active)}"><header><b>ndd-stream</b><nav>{links}</nav>'
        '<span id="live-status" class="live">live</span>'
        '<label class="pause"><input type="checkbox" id="pause"> pause</label></header>'
        f"<main>{body}</main><footer>{footer}</footer>"
        '<script src="/static/view.js"></script></body></html>')


def live(url: str, inner: str, element_id: str) -> str:
    return f'<div data-live="{e(url)}" id="{e(element_id)}">{inner}</div>'


def badge(status: str) -> str:
    return f'<span class="st st-{e(status)}">{e(LABEL.get(status, status))}</span>'


def _time(ms: int | None) -> str:
    return iso_ms(ms).replace("T", " ").rstrip("Z") or "-"


def _pct(part: int, total: int) -> str:
    return f"{100 * part / total:.1f}%" if total else "-"


# --- Now ----------------------------------------------------------------------------------
def now_page(data: Now, span_key: str, footer: str) -> str:
    spans = " ".join(f'<a href="/?span={k}" class="{"on" if k == span_key else ""}">{k}</a>'
                     for k in SPANS)
    body = (f'<h1>Now</h1><p class="spans">last {spans}</p>'
            + live(f"/fragment/now?span={span_key}", now_fragment(data), "now"))
    return layout("now", "now", body, footer)


def now_fragment(d: Now) -> str:
    total = sum(d.totals.values())
    rate_in = "-" if d.rate_in is None else f"{d.rate_in:.1f}"
    cards = [f'<div class="card"><div class="n" id="rate-in">{rate_in}</div>items/s in</div>',
             f'<div class="card"><div class="n" id="rate-out">{d.rate_out:.1f}</div>'
             "items/s out</div>",
             f'<div class="card"><div class="n" id="count-total">{total}</div>'
             f"decided in the last {_span_name(d.span)}</div>"]
    for s in STATUSES:
        cards.append(f'<div class="card st-{s}"><div class="n" id="share-{s}">'
                     f'{_pct(d.totals[s], total)}</div>{LABEL[s]} ({d.totals[s]})</div>')
    start, step = d.start, d.step
    unit = "/s" if step == 1 else "/s (per-minute mean)"
    problem = (f'<p class="error" id="follow-error">reading the topics: {e(d.follow_error)} '
               "(retrying)</p>" if d.follow_error else "")
    parts = [problem, f'<div class="cards">{"".join(cards)}</div><div class="charts">',
             charts.line_chart(f"items/s in and out {unit}", start, step,
                               {"in": d.series["in"], "out": d.series["out"]},
                               chart_id="chart-io"),
             charts.line_chart("decisions/s by outcome", start, step,
                               {s: d.series[s] for s in STATUSES}, chart_id="chart-outcome"),
             charts.line_chart("consumer lag of the deciders (records)", start, step,
                               {"lag": d.series["lag"]}, unit="", chart_id="chart-lag"),
             "</div>", _scope_table(d), _lag_table(d), _held(d)]
    return "".join(parts)


def _span_name(span: int) -> str:
    return next((k for k, v in SPANS.items() if v == span), f"{span} s")


def _scope_table(d: Now) -> str:
    rows = []
    for scope, counts in d.scopes[:40]:
        n = sum(counts.values())
        dup = counts.get("near_duplicate", 0) + counts.get("exact_duplicate", 0)
        cells = "".join(f'<td class="num">{counts.get(s, 0)} <span class="pct">'
                        f"{_pct(counts.get(s, 0), n)}</span></td>" for s in STATUSES)
        link = "/decisions?" + urlencode({"scope": scope})
        rows.append(f'<tr><td><a href="{e(link)}">{e(scope)}</a></td>{cells}'
                    f'<td class="num">{n}</td><td class="num">{_pct(dup, n)}</td></tr>')
    more = (f'<p class="note">{len(d.scopes) - 40} more scopes not shown</p>'
            if len(d.scopes) > 40 else "")
    head = "".join(f"<th>{LABEL[s]}</th>" for s in STATUSES)
    return ('<h2>Per scope, since the view started</h2><table class="grid" id="scopes">'
            f"<tr><th>scope</th>{head}<th>items</th><th>duplicate share</th></tr>"
            f'{"".join(rows) or "<tr><td colspan=7>no decisions yet</td></tr>"}</table>{more}')


def _lag_table(d: Now) -> str:
    if d.lag_error:
        status = f'<p class="error">lag unknown: {e(d.lag_error)}</p>'
    elif d.lag_updated is None:
        status = '<p class="note">lag: first probe pending</p>'
    else:
        at = datetime.fromtimestamp(d.lag_updated, tz=UTC).strftime("%H:%M:%S")
        status = f'<p class="note">probed at {at} UTC</p>'
    rows = "".join(
        f"<tr><td>{e(r.role)}</td><td>{e(r.topic)}</td><td class='num'>{r.partition}</td>"
        f"<td class='num'>{r.committed if r.committed >= 0 else 'none'}</td>"
        f"<td class='num'>{r.high}</td><td class='num lag'>{r.lag}</td></tr>" for r in d.lag)
    return ('<h2>Consumer lag per partition</h2>' + status
            + '<table class="grid" id="lag"><tr><th>agent</th><th>topic</th><th>partition</th>'
            "<th>committed</th><th>high watermark</th><th>lag</th></tr>" + rows + "</table>")


def _held(d: Now) -> str:
    h = d.held
    return (f'<p class="note" id="held">held in memory: {h["decisions"]} decisions '
            f'({h["evicted_decisions"]} older ones dropped), {h["texts"]} texts '
            f'({h["text_bytes"] / 1e6:.1f} MB; {h["evicted_texts"]} dropped), '
            f'{h["dlq"]} dead letters</p>')


# --- Recent decisions ----------------------------------------------------------------------
def _options(name: str, values: Iterable[tuple[str, str]], chosen: str) -> str:
    opts = "".join(f'<option value="{e(v)}"{" selected" if v == chosen else ""}>{e(label)}'
                   "</option>" for v, label in values)
    return f'<select name="{name}" id="f-{name}">{opts}</select>'


def decisions_page(data: DecisionList, flt: Filter, query: str, footer: str) -> str:
    statuses = [("", "any status"), ("duplicate", "near or exact duplicate"),
                *((s, LABEL[s]) for s in STATUSES[:3])]
    form = (
        '<form method="get" action="/decisions" class="filters">'
        + _options("scope", [("", "any scope"), *((s, s or "(none)") for s in data.scopes)],
                   flt.scope)
        + _options("status", statuses, flt.status)
        + '<label>doc_q from <input type="number" step="0.01" min="0" max="1" name="smin" '
        f'id="f-smin" value="{"" if flt.smin is None else flt.smin}"></label>'
        '<label>to <input type="number" step="0.01" min="0" max="1" name="smax" id="f-smax" '
        f'value="{"" if flt.smax is None else flt.smax}"></label>'
        + _options("reason", [("", "any reason"), ("-", "no reason (doc_q alone)"),
                              *((r, r) for r in data.reasons)], flt.reason)
        + f'<input type="search" name="q" id="f-q" placeholder="title or id" value="{e(flt.q)}">'
        '<button type="submit" id="f-apply">filter</button> <a href="/decisions">reset</a>'
        "</form>")
    table = live("/fragment/decisions" + (f"?{query}" if query else ""),
                 decisions_fragment(data), "decisions")
    return layout("recent decisions", "decisions", "<h1>Recent decisions</h1>" + form + table,
                  footer)


def decisions_fragment(data: DecisionList) -> str:
    rows = []
    for item in data.rows:
        r = item.row
        link = "/pair?" + urlencode({"key": r.key})
        matched = ""
        if r.matched:
            other = f' <span class="ch">({e(r.matched_channel)})</span>' if (
                r.matched_channel and r.matched_channel != r.channel) else ""
            matched = f'{e(item.matched_title or "(id " + r.matched + ")")}{other}'
        rows.append(
            f'<tr class="row st-{e(r.status)}" data-key="{e(r.key)}">'
            f'<td title="{e(_time(r.decided_ms))}" class="t">{e(_time(r.decided_ms)[11:])}</td>'
            f"<td>{badge(r.status)}</td>"
            f'<td class="num">{r.similarity:.3f}</td><td>{e(r.scope)}</td>'
            f"<td>{e(r.channel)}</td>"
            f'<td><a href="{e(link)}" class="title">{e(item.title or "(id " + r.identity + ")")}'
            f'</a></td><td>{matched}</td><td>{e(r.reason)}</td><td class="t">{e(r.time)}</td></tr>')
    empty = '<tr><td colspan="9">no decision matches</td></tr>'
    return (f'<p class="note" id="decision-count">{len(data.rows)} shown of {data.matching} '
            f"matching ({data.held} held)</p>"
            '<table class="grid"><tr><th>decided (UTC)</th><th>status</th><th>doc_q</th>'
            "<th>scope</th><th>channel</th><th>title</th><th>matched item</th>"
            f'<th>reason</th><th>event time</th></tr>{"".join(rows) or empty}</table>')


# --- A pair --------------------------------------------------------------------------------
def _marked(m: Marked | None) -> str:
    if m is None:
        return ""
    out = []
    for seg in m.segments:
        text = e(seg.text)
        classes = " ".join(c for c, on in (("shared", seg.shared), ("diff", seg.diff)) if on)
        out.append(f'<mark class="{classes}">{text}</mark>' if classes else text)
    return "".join(out)


def _side(label: str, text: StoredText | None, marked: Marked | None, missing: str,
          side: str, compared: bool) -> str:
    if text is None:
        return f'<section class="side" id="{side}"><h2>{label}</h2><p class="missing">' \
               f"{missing}</p></section>"
    share = (f"{100 * marked.shared_fraction:.0f}% of its words in shared passages; "
             if marked is not None and compared else "")
    cut = '<p class="note">text cut: the view keeps the first 100,000 characters</p>' \
        if text.cut else ""
    return (f'<section class="side" id="{side}"><h2>{label}</h2>'
            f'<p class="meta"><b>{e(text.title)}</b><br>{e(text.channel)} · {e(text.time)} · '
            f'id {e(text.identity)}<br><span class="note">{share}read at '
            f'{e(text.position)}</span></p>{cut}<div class="text">{_marked(marked)}</div>'
            "</section>")


def pair_page(p: Pair, new: Marked | None, old: Marked | None, from_decision: bool,
              missing: str, footer: str) -> str:
    r = p.row
    novel = r.novel
    head = (f"<h1>{badge(r.status)} doc_q {r.similarity:.3f}</h1>"
            f'<p class="meta">scope {e(r.scope)} · decided {e(_time(r.decided_ms))} UTC · '
            f"source {e(r.key)}" + (f" · policy {e(r.policy)}" if r.policy else "")
            + (" · replayed" if r.replayed else "") + "</p>")
    if novel:
        detail = novel.get("detail") or r.header("ndd-novel-detail") or ""
        head += (f'<p class="novel" id="novel">judged a new report, although it resembles '
                 f'{e(novel.get("resembles") or r.matched)}: <b>{e(novel.get("reason"))}</b>'
                 + (f" · {e(detail)}" if detail else "") + "</p>")
    legend = ('<p class="legend"><mark class="shared">shared passage</mark> '
              '<mark class="diff">' + ("differs (from the decision)" if from_decision else
                                       "figure in only one of the two texts")
              + "</mark></p>")
    sides = ('<div class="pair">'
             + _side("this item", p.new, new, "the text of this item is not held by the view: "
                     "it keeps the newest texts within its memory budget, from its start on",
                     "new",
                     p.old is not None)
             + (_side("matched item" if r.duplicate_of else "resembled item", p.old, old,
                      missing, "old", p.new is not None)
                if p.matched else '<section class="side" id="old"><h2>matched item</h2>'
                '<p class="missing">none: unique, nothing in its window resembled it</p>'
                "</section>")
             + "</div>")
    headers = "".join(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>" for k, v in r.headers)
    audit = (f'<pre id="audit">{e(json.dumps(r.audit, indent=1, ensure_ascii=False))}</pre>'
             if r.audit is not None else '<p class="note">no audit record (audit topic off)</p>')
    body = (head + legend + sides + '<div class="cols"><div><h2>Headers</h2>'
            f'<table class="grid" id="headers">{headers}</table></div>'
            f"<div><h2>Audit record</h2>{audit}</div></div>")
    return layout("pair", "decisions", body, footer)


def not_found(what: str, footer: str) -> str:
    return layout("not found", "", f'<h1>Not found</h1><p class="missing">{e(what)}</p>', footer)


# --- DLQ -------------------------------------------------------------------------------------
def dlq_page(rows: list[DlqRow], reasons: dict[str, int], reason: str, footer: str) -> str:
    links = " ".join(f'<a href="/dlq?{urlencode({"reason": k})}" '
                     f'class="{"on" if k == reason else ""}">{e(k)} ({n})</a>'
                     for k, n in sorted(reasons.items()))
    body = (f'<h1>Dead letters</h1><p class="spans">reason: <a href="/dlq" '
            f'class="{"" if reason else "on"}">all</a> {links}</p>'
            + live("/fragment/dlq" + (f"?{urlencode({'reason': reason})}" if reason else ""),
                   dlq_fragment(rows), "dlq"))
    return layout("dlq", "dlq", body, footer)


def dlq_fragment(rows: list[DlqRow]) -> str:
    out = []
    for r in rows:
        out.append(
            f'<tr class="row"><td class="t">{e(_time(r.decided_ms))}</td><td class="reason">'
            f"{e(r.reason)}</td><td>{e(r.detail)}</td><td>{e(r.channel)}</td>"
            f'<td>{e(r.source)}</td><td class="num">{r.size}</td>'
            f'<td class="payload"><details data-key="{e(r.key)}"><summary>'
            f'{e(" ".join(r.preview[:70].split()) or "(empty)")}</summary>'
            f"<pre>{e(r.preview)}</pre></details></td>"
            "</tr>")
    empty = '<tr><td colspan="7">no rejected item</td></tr>'
    return ('<table class="grid"><tr><th>rejected (UTC)</th><th>reason</th><th>detail</th>'
            "<th>channel</th><th>source</th><th>bytes</th><th>payload (head)</th></tr>"
            f'{"".join(out) or empty}</table>')


def footer(topics: list[str], group: str, started: float) -> str:
    at = datetime.fromtimestamp(started, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    return (f"reads {e(', '.join(topics))} (every worker's decisions) · lag of group "
            f"{e(group)} · view started {at} UTC")
