"""Server-rendered HTML of the Stories page and of one story (as pages.py: every value from
Kafka or the request is placed with ``html("...{}...", value)``)."""

from __future__ import annotations

from ndd_stream.view.html import Html, html, join, url
from ndd_stream.view.pages import _time, badge, layout, live
from ndd_stream.view.queries import ListedDecision
from ndd_stream.view.stories import ORDERS, STORY_SPANS, Story, StoryList

ORDER_LABEL = {"largest": "largest first", "fastest": "fastest-growing first"}


def story_link(name: str) -> str:
    return url("/story", {"id": name})


def stories_page(data: StoryList, span_key: str, order: str, footer: Html) -> Html:
    spans = join((html('<a href="{}" class="{}" id="span-{}">last {}</a>',
                       url("/stories", {"span": k, "order": order}),
                       "on" if k == span_key else "", k, k) for k in STORY_SPANS), html(" "))
    orders = join((html('<a href="{}" class="{}" id="order-{}">{}</a>',
                        url("/stories", {"span": span_key, "order": o}),
                        "on" if o == order else "", o, ORDER_LABEL[o]) for o in ORDERS),
                  html(" "))
    fragment = url("/fragment/stories", {"span": span_key, "order": order})
    body = html('<h1>Stories</h1><p class="spans">{} · {}</p>'
                '<p class="note">items that are one story: a first report, its copies on every '
                "channel, its more complete versions and its follow-ups; stories of two items "
                "or more among the recent decisions the view holds</p>{}",
                spans, orders, live(fragment, stories_fragment(data), "stories"))
    return layout("stories", "stories", body, footer)


def stories_fragment(data: StoryList) -> Html:
    rows = []
    for s in data.stories:
        first = s.first
        rows.append(html(
            '<tr class="row story" data-key="{name}"><td><a href="{link}" class="title">'
            '{title}</a></td><td class="num size">{size}</td><td class="num">{recent}</td>'
            '<td>{channels}</td><td class="t">{began}</td><td class="t">{last}</td>'
            '<td class="num">{versions}</td><td class="num">{follow}</td></tr>',
            name=s.story, link=story_link(s.story),
            title=first.title or "(id " + first.row.identity + ")", size=len(s.members),
            recent=s.recent, channels=", ".join(s.channels),
            began=_time(s.members[0].row.decided_ms), last=_time(s.members[-1].row.decided_ms),
            versions=len(s.versions) - 1, follow=len(s.follow_ups)))
    return html('<p class="note" id="story-count">{} stories among {} decisions held</p>'
                '<table class="grid"><tr><th>first report</th><th>items</th>'
                "<th>in the last quarter</th><th>channels</th><th>first decided (UTC)</th>"
                "<th>last decided</th><th>newer versions</th><th>follow-ups</th></tr>{}</table>",
                len(data.stories), data.held,
                join(rows) or html('<tr><td colspan="8">no story of two items or more</td>'
                                   "</tr>"))


def _member(s: Story, m: ListedDecision) -> Html:
    r = m.row
    return html(
        '<tr class="row st-{status}" data-key="{key}"><td class="t">{decided}</td>'
        '<td class="t">{event}</td><td>{channel}</td><td>{badge}</td><td class="role">{role}'
        '</td><td><a href="{link}" class="title">{title}</a></td></tr>',
        status=r.status, key=r.key, decided=_time(r.decided_ms), event=r.time,
        channel=r.channel, badge=badge(r.status), role=s.role(m),
        link=url("/pair", {"key": r.key}), title=m.title or "(id " + r.identity + ")")


def _line(m: ListedDecision) -> Html:
    return html('<tr><td class="t">{}</td><td><a href="{}">{}</a></td></tr>',
                _time(m.row.decided_ms), url("/pair", {"key": m.row.key}),
                m.title or "(id " + m.row.identity + ")")


def story_page(s: Story, footer: Html) -> Html:
    first = s.first
    members = join(_member(s, m) for m in s.members)
    versions = join(_line(m) for m in s.versions)
    follow = join(_line(m) for m in s.follow_ups)
    body = html(
        '<h1>Story: {title}</h1><p class="meta" id="story-meta">story {name} · {size} items '
        "held · channels {channels}</p>"
        '<table class="grid" id="members"><tr><th>decided (UTC)</th><th>event time</th>'
        "<th>channel</th><th>status</th><th>role</th><th>title</th></tr>{members}</table>"
        '<div class="cols"><div><h2>Versions kept in turn</h2><table class="grid" '
        'id="versions">{versions}</table></div><div><h2>Follow-ups</h2><table class="grid" '
        'id="follow-ups">{follow}</table></div></div>',
        title=first.title or "(id " + first.row.identity + ")", name=s.story,
        size=len(s.members), channels=", ".join(s.channels) or "-", members=members,
        versions=versions, follow=follow or html("<tr><td>none</td></tr>"))
    return layout("story", "stories", body, footer)
