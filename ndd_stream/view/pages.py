"""Server-rendered HTML of the four views, built only with :mod:`ndd_stream.view.html`.

Every value from Kafka or from the request is placed with ``html("...{}...", value)``, which
escapes it, makes control characters visible and isolates it (``<bdi>``); there is no other
way in this module to put a string into markup (see html.py and tests/test_view_pure.py).

Each page is a full document; the parts that change (``data-live``) are also served alone
as fragments, which the page's small script (static/view.js) fetches every two seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime

from ndd_stream.view import charts
from ndd_stream.view.caps import MAX_RAW_CHARS, TITLE_CHARS
from ndd_stream.view.highlight import Marked
from ndd_stream.view.html import EMPTY, Html, html, join, plain, url
from ndd_stream.view.model import STATUSES, iso_ms
from ndd_stream.view.queries import SPANS, DecisionList, DlqRow, Filter, Now, Pair
from ndd_stream.view.rings import StoredText

NAV = (("now", url("/"), "Now"), ("decisions", url("/decisions"), "Recent decisions"),
       ("stories", url("/stories"), "Stories"), ("dlq", url("/dlq"), "DLQ"))
LABEL = {"unique": "unique", "near_duplicate": "near duplicate",
         "exact_duplicate": "exact duplicate", "dlq": "DLQ"}


def layout(title: str, active: str, body: Html, footer: Html = EMPTY) -> Html:
    links = join(html('<a href="{}" class="{}" id="nav-{}">{}</a>', href,
                      "on" if key == active else "", key, plain(label))
                 for key, href, label in NAV)
    return html(
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        "<title>ndd-stream · {title}</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        '<link rel="stylesheet" href="/static/view.css"></head>'
        '<body data-page="{active}"><header><b>ndd-stream</b><nav>{links}</nav>'
        '<span id="live-status" class="live">live</span>'
        '<label class="pause"><input type="checkbox" id="pause"> pause</label></header>'
        "<main>{body}</main><footer>{footer}</footer>"
        '<script src="/static/view.js"></script></body></html>',
        title=plain(title), active=active, links=links, body=body, footer=footer)


def live(link: str, inner: Html, element_id: str) -> Html:
    return html('<div data-live="{}" id="{}">{}</div>', link, element_id, inner)


def badge(status: str) -> Html:
    return html('<span class="st st-{}">{}</span>', status, LABEL.get(status, status))


def _time(ms: int | None) -> str:
    return iso_ms(ms).replace("T", " ").rstrip("Z") or "-"


def _pct(part: int, total: int) -> str:
    return f"{100 * part / total:.1f}%" if total else "-"


# --- Now ----------------------------------------------------------------------------------
def now_page(data: Now, span_key: str, footer: Html) -> Html:
    spans = join((html('<a href="{}" class="{}">{}</a>', url("/", {"span": k}),
                       "on" if k == span_key else "", plain(k)) for k in SPANS), html(" "))
    body = html('<h1>Now</h1><p class="spans">last {}</p>{}', spans,
                live(url("/fragment/now", {"span": span_key}), now_fragment(data), "now"))
    return layout("now", "now", body, footer)


def now_fragment(d: Now) -> Html:
    total = sum(d.totals.values())
    rate_in = "-" if d.rate_in is None else f"{d.rate_in:.1f}"
    cards = [html('<div class="card"><div class="n" id="rate-in">{}</div>items/s in</div>',
                  plain(rate_in)),
             html('<div class="card"><div class="n" id="rate-out">{:.1f}</div>'
                  "items/s out</div>", d.rate_out),
             html('<div class="card"><div class="n" id="count-total">{}</div>'
                  "decided in the last {}</div>", total, plain(_span_name(d.span)))]
    for s in STATUSES:
        cards.append(html('<div class="card st-{s}"><div class="n" id="share-{s}">'
                          "{pct}</div>{label} ({n})</div>", s=s,
                          pct=plain(_pct(d.totals[s], total)), label=plain(LABEL[s]),
                          n=d.totals[s]))
    start, step = d.start, d.step
    unit = "/s" if step == 1 else "/s (per-minute mean)"
    problem = (html('<p class="error" id="follow-error">reading the topics: {} (retrying)</p>',
                    d.follow_error) if d.follow_error else EMPTY)
    return join([problem, html('<div class="cards">{}</div><div class="charts">', join(cards)),
                 charts.line_chart(f"items/s in and out {unit}", start, step,
                                   {"in": d.series["in"], "out": d.series["out"]},
                                   chart_id="chart-io"),
                 charts.line_chart("decisions/s by outcome", start, step,
                                   {s: d.series[s] for s in STATUSES}, chart_id="chart-outcome"),
                 charts.line_chart("consumer lag of the deciders (records)", start, step,
                                   {"lag": d.series["lag"]}, unit="", chart_id="chart-lag"),
                 html("</div>"), _scope_table(d), _shard_table(d), _lag_table(d), _held(d)])


def _span_name(span: int) -> str:
    return next((k for k, v in SPANS.items() if v == span), f"{span} s")


def _scope_table(d: Now) -> Html:
    rows = []
    for scope, counts in d.scopes[:40]:
        n = sum(counts.values())
        dup = counts.get("near_duplicate", 0) + counts.get("exact_duplicate", 0)
        cells = join(html('<td class="num">{} <span class="pct">{}</span></td>',
                          counts.get(s, 0), plain(_pct(counts.get(s, 0), n))) for s in STATUSES)
        rows.append(html('<tr><td><a href="{}">{}</a></td>{}<td class="num">{}</td>'
                         '<td class="num">{}</td></tr>', url("/decisions", {"scope": scope}),
                         scope, cells, n, plain(_pct(dup, n))))
    more = (html('<p class="note">{} more scopes not shown</p>', len(d.scopes) - 40)
            if len(d.scopes) > 40 else EMPTY)
    head = join(html("<th>{}</th>", plain(LABEL[s])) for s in STATUSES)
    return html('<h2>Per scope, since the view started</h2><table class="grid" id="scopes">'
                "<tr><th>scope</th>{}<th>items</th><th>duplicate share</th></tr>{}</table>{}",
                head, join(rows) or html("<tr><td colspan=7>no decisions yet</td></tr>"), more)


def _lag_table(d: Now) -> Html:
    if d.lag_error:
        status = html('<p class="error">lag unknown: {}</p>', d.lag_error)
    elif d.lag_updated is None:
        status = html('<p class="note">lag: first probe pending</p>')
    else:
        at = datetime.fromtimestamp(d.lag_updated, tz=UTC).strftime("%H:%M:%S")
        status = html('<p class="note">probed at {} UTC</p>', plain(at))
    rows = join(html("<tr><td>{}</td><td>{}</td><td class='num'>{}</td><td class='num'>{}</td>"
                     "<td class='num'>{}</td><td class='num lag'>{}</td></tr>", r.role, r.topic,
                     r.partition, r.committed if r.committed >= 0 else plain("none"), r.high,
                     r.lag) for r in d.lag)
    return html('<h2>Consumer lag per partition</h2>{}<table class="grid" id="lag"><tr>'
                "<th>agent</th><th>topic</th><th>partition</th><th>committed</th>"
                "<th>high watermark</th><th>lag</th></tr>{}</table>", status, rows)


def _shard_table(d: Now) -> Html:
    """Sharded windows: each shard's load (items answered per second since the last probe)
    and lag (prepared items it has not answered)."""
    rows = [r for r in d.lag if r.role == "shard"]
    if not rows or d.shards <= 1:
        return EMPTY
    cells = join(html("<tr><td class='num'>{}</td><td class='num'>{}</td><td class='num'>{}"
                      "</td><td class='num'>{}</td><td class='num'>{}</td>"
                      "<td class='num lag'>{}</td></tr>", r.partition // d.shards,
                      r.partition % d.shards, r.partition, max(r.committed, 0),
                      plain("-" if r.rate is None else f"{r.rate:.1f}"), r.lag) for r in rows)
    return html('<h2>Shards</h2><table class="grid" id="shards"><tr><th>scoped partition</th>'
                "<th>shard</th><th>partition of {}</th><th>answered</th><th>answers/s</th>"
                "<th>lag</th></tr>{}</table>", rows[0].topic, cells)


def _held(d: Now) -> Html:
    h = d.held
    return html('<p class="note" id="held">held in memory: {} decisions ({} older ones '
                "dropped), {} texts ({:.1f} MB; {} dropped), {} dead letters</p>",
                h["decisions"], h["evicted_decisions"], h["texts"], h["text_bytes"] / 1e6,
                h["evicted_texts"], h["dlq"])


# --- Recent decisions ----------------------------------------------------------------------
def _options(name: str, values: Iterable[tuple[str, str]], chosen: str) -> Html:
    opts = join(html('<option value="{}" selected>{}</option>', v, plain(label)) if v == chosen
                else html('<option value="{}">{}</option>', v, plain(label))
                for v, label in values)
    return html('<select name="{}" id="f-{}">{}</select>', name, name, opts)


def _number(value: float | None) -> str:
    return "" if value is None else str(value)


def decisions_page(data: DecisionList, flt: Filter, query: dict[str, str],
                   footer: Html) -> Html:
    statuses = [("", "any status"), ("duplicate", "near or exact duplicate"),
                *((s, LABEL[s]) for s in STATUSES[:3])]
    form = html(
        '<form method="get" action="/decisions" class="filters">{}{}'
        '<label>doc_q from <input type="number" step="0.01" min="0" max="1" name="smin" '
        'id="f-smin" value="{}"></label>'
        '<label>to <input type="number" step="0.01" min="0" max="1" name="smax" id="f-smax" '
        'value="{}"></label>{}'
        '<input type="search" name="q" id="f-q" placeholder="title or id" value="{}">'
        '<button type="submit" id="f-apply">filter</button> <a href="/decisions">reset</a>'
        "</form>",
        _options("scope", [("", "any scope"), *((s, s or "(none)") for s in data.scopes)],
                 flt.scope),
        _options("status", statuses, flt.status), _number(flt.smin), _number(flt.smax),
        _options("reason", [("", "any reason"), ("-", "no reason (doc_q alone)"),
                            *((r, r) for r in data.reasons)], flt.reason),
        flt.q)
    table = live(url("/fragment/decisions", query), decisions_fragment(data), "decisions")
    return layout("recent decisions", "decisions",
                  html("<h1>Recent decisions</h1>{}{}", form, table), footer)


def decisions_fragment(data: DecisionList) -> Html:
    rows = []
    for item in data.rows:
        r = item.row
        matched = EMPTY
        if r.matched:
            other = (html(' <span class="ch">({})</span>', r.matched_channel)
                     if r.matched_channel and r.matched_channel != r.channel else EMPTY)
            matched = html("{}{}", item.matched_title or "(id " + r.matched + ")", other)
        rows.append(html(
            '<tr class="row st-{status}" data-key="{key}"><td title="{at}" class="t">{clock}</td>'
            '<td>{badge}</td><td class="num">{sim:.3f}</td><td>{scope}</td><td>{channel}</td>'
            '<td><a href="{link}" class="title">{title}</a></td><td>{matched}</td>'
            '<td>{reason}</td><td class="t">{time}</td>'
            '<td><a href="{story}" class="story">story</a></td></tr>',
            story=url("/story", {"id": r.story}),
            status=r.status, key=r.key, at=_time(r.decided_ms), clock=_time(r.decided_ms)[11:],
            badge=badge(r.status), sim=r.similarity, scope=r.scope, channel=r.channel,
            link=url("/pair", {"key": r.key}), title=item.title or "(id " + r.identity + ")",
            matched=matched, reason=r.reason, time=r.time))
    return html('<p class="note" id="decision-count">{} shown of {} matching ({} held)</p>'
                '<table class="grid"><tr><th>decided (UTC)</th><th>status</th><th>doc_q</th>'
                "<th>scope</th><th>channel</th><th>title</th><th>matched item</th>"
                "<th>reason</th><th>event time</th><th>story</th></tr>{}</table>",
                len(data.rows), data.matching, data.held,
                join(rows) or html('<tr><td colspan="10">no decision matches</td></tr>'))


# --- A pair --------------------------------------------------------------------------------
def _marked(m: Marked | None) -> Html:
    if m is None:
        return EMPTY
    out = []
    for seg in m.segments:
        classes = " ".join(c for c, on in (("shared", seg.shared), ("diff", seg.diff)) if on)
        out.append(html('<mark class="{}">{}</mark>', classes, plain(seg.text)) if classes
                   else plain(seg.text))
    return join(out)


def _side(label: str, text: StoredText | None, marked: Marked | None, missing: Html,
          side: str, compared: bool) -> Html:
    if text is None:
        return html('<section class="side" id="{}"><h2>{}</h2><p class="missing">{}</p>'
                    "</section>", side, plain(label), missing)
    share = (html("{:.0f}% of its words in shared passages; ", 100 * marked.shared_fraction)
             if marked is not None and compared else EMPTY)
    cut = (html('<p class="note">text cut: the view keeps the first {:,} characters of a body '
                "and {:,} of a title</p>", MAX_RAW_CHARS, TITLE_CHARS) if text.cut else EMPTY)
    return html('<section class="side" id="{side}"><h2>{label}</h2>'
                '<p class="meta"><b>{title}</b><br>{channel} · {time} · id {identity}<br>'
                '<span class="note">{share}read at {position}</span></p>{cut}'
                '<div class="text" dir="auto">{body}</div></section>',
                side=side, label=plain(label), title=text.title, channel=text.channel,
                time=text.time, identity=text.identity, share=share, position=text.position,
                cut=cut, body=_marked(marked))


def pair_page(p: Pair, new: Marked | None, old: Marked | None, from_decision: bool,
              missing: Html, footer: Html) -> Html:
    r = p.row
    novel = r.novel
    head = html('<h1>{} doc_q {:.3f}</h1><p class="meta">scope {} · decided {} UTC · '
                'source {}{}{}{} · <a href="{}" id="story-link">its story</a></p>',
                badge(r.status), r.similarity, r.scope, _time(r.decided_ms), r.key,
                html(" · policy {}", r.policy) if r.policy else EMPTY,
                html(" · replayed") if r.replayed else EMPTY,
                html(" · supersedes {}", r.supersedes) if r.supersedes else EMPTY,
                url("/story", {"id": r.story}))
    if novel:
        detail = novel.get("detail") or r.header("ndd-novel-detail") or ""
        head = html('{}<p class="novel" id="novel">judged a new report, although it resembles '
                    "{}: <b>{}</b>{}</p>", head, novel.get("resembles") or r.matched,
                    novel.get("reason"), html(" · {}", detail) if detail else EMPTY)
    legend = html('<p class="legend"><mark class="shared">shared passage</mark> '
                  '<mark class="diff">{}</mark></p>',
                  plain("differs (from the decision)" if from_decision else
                        "figure in only one of the two texts"))
    this = _side("this item", p.new, new, html(
        "the text of this item is not held by the view: it keeps the newest texts within its "
        "memory budget, from its start on"), "new", p.old is not None)
    if p.matched:
        other = _side("matched item" if r.duplicate_of else "resembled item", p.old, old,
                      missing, "old", p.new is not None)
    else:
        other = html('<section class="side" id="old"><h2>matched item</h2><p class="missing">'
                     "none: unique, nothing in its window resembled it</p></section>")
    headers = join(html("<tr><td>{}</td><td>{}</td></tr>", k, v) for k, v in r.headers)
    audit = (html('<pre id="audit" dir="auto">{}</pre>',
                  plain(json.dumps(r.audit, indent=1, ensure_ascii=False)))
             if r.audit is not None
             else html('<p class="note">no audit record (audit topic off)</p>'))
    body = html('{}{}<div class="pair">{}{}</div><div class="cols"><div><h2>Headers</h2>'
                '<table class="grid" id="headers">{}</table></div>'
                "<div><h2>Audit record</h2>{}</div></div>", head, legend, this, other, headers,
                audit)
    return layout("pair", "decisions", body, footer)


def not_found(what: Html, footer: Html) -> Html:
    return layout("not found", "", html('<h1>Not found</h1><p class="missing">{}</p>', what),
                  footer)


# --- DLQ -------------------------------------------------------------------------------------
def dlq_page(rows: list[DlqRow], reasons: dict[str, int], reason: str, footer: Html) -> Html:
    links = join((html('<a href="{}" class="{}">{} ({})</a>', url("/dlq", {"reason": k}),
                       "on" if k == reason else "", k, n) for k, n in sorted(reasons.items())),
                 html(" "))
    fragment = url("/fragment/dlq", {"reason": reason} if reason else None)
    body = html('<h1>Dead letters</h1><p class="spans">reason: <a href="/dlq" class="{}">all</a>'
                " {}</p>{}", "" if reason else "on", links,
                live(fragment, dlq_fragment(rows), "dlq"))
    return layout("dlq", "dlq", body, footer)


def dlq_fragment(rows: list[DlqRow]) -> Html:
    out = join(html(
        '<tr class="row"><td class="t">{at}</td><td class="reason">{reason}</td>'
        '<td>{detail}</td><td>{channel}</td><td>{source}</td><td class="num">{size}</td>'
        '<td class="payload"><details data-key="{key}"><summary>{head}</summary>'
        '<pre dir="auto">{preview}</pre></details></td></tr>',
        at=_time(r.decided_ms), reason=r.reason, detail=r.detail, channel=r.channel,
        source=r.source, size=r.size, key=r.key,
        head=" ".join(r.preview[:70].split()) or "(empty)", preview=plain(r.preview))
        for r in rows)
    return html('<table class="grid"><tr><th>rejected (UTC)</th><th>reason</th><th>detail</th>'
                "<th>channel</th><th>source</th><th>bytes</th><th>payload (head)</th></tr>"
                "{}</table>", out or html('<tr><td colspan="7">no rejected item</td></tr>'))


def footer(topics: list[str], group: str, started: float) -> Html:
    at = datetime.fromtimestamp(started, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    return html("reads {} (every worker's decisions) · lag of group {} · view started {} UTC",
                ", ".join(topics), group, plain(at))
