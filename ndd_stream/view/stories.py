"""The Stories page's questions: the stories of the decisions the view holds, by size or
growth, and one story's members. Pure (no Kafka, no web): tests/test_view_pure.py.

A story is the set of held decisions naming it (``DecisionRow.story``); only the view's
ring of recent decisions is searched, so a story shows the members still held.
"""

from __future__ import annotations

from dataclasses import dataclass

from ndd_stream.view.model import DecisionRow, ViewState
from ndd_stream.view.queries import ListedDecision

STORY_SPANS = {"1h": 3600, "24h": 86400}
ORDERS = ("largest", "fastest")
GROWTH_SHARE = 4  # "growing": members decided in the last quarter of the span


@dataclass(frozen=True)
class Story:
    """A story's held members, oldest decision first."""

    story: str
    members: list[ListedDecision]
    recent: int  # members decided in the last quarter of the span (0 without a span)

    @property
    def first(self) -> ListedDecision:
        """Its first report: the member the story is named after, else the oldest held."""
        for m in self.members:
            if m.row.identity == self.story:
                return m
        return self.members[0]

    @property
    def channels(self) -> list[str]:
        return sorted({m.row.channel for m in self.members if m.row.channel})

    @property
    def versions(self) -> list[ListedDecision]:
        """The versions a reader kept in turn (NDD_KEEP=complete): the first report, then
        each more complete one; just the first report otherwise."""
        return [self.first] + [m for m in self.members if m.row.supersedes]

    @property
    def follow_ups(self) -> list[ListedDecision]:
        """New reports routed unique that joined the story (a new development)."""
        return [m for m in self.members
                if m.row.status == "unique" and m.row.identity != self.story
                and not m.row.supersedes]

    def role(self, member: ListedDecision) -> str:
        r = member.row
        if r.identity == self.story:
            return "first report"
        if r.supersedes:
            return "more complete version"
        if r.status == "unique":
            return "follow-up"
        return "copy"


@dataclass
class StoryList:
    stories: list[Story]
    held: int  # decisions searched
    span: int
    order: str


def _decided_s(row: DecisionRow) -> float | None:
    return None if row.decided_ms is None else row.decided_ms / 1000


def stories(state: ViewState, at: float, span: int, order: str = "largest",
            limit: int = 100) -> StoryList:
    """The stories with two members or more decided in the last ``span`` seconds: the
    largest first, or (``fastest``) those with most members in the span's last quarter."""
    with state.lock:
        rows = state.decisions.newest()
        since, recent_since = at - span, at - span / GROWTH_SHARE
        grouped: dict[str, list[DecisionRow]] = {}
        for row in rows:
            when = _decided_s(row)
            if when is not None and when < since:
                continue
            grouped.setdefault(row.story, []).append(row)
        found = [_story(state, name, members, recent_since)
                 for name, members in grouped.items() if len(members) > 1]
    if order == "fastest":
        found.sort(key=lambda s: (s.recent, len(s.members), s.members[-1].row.decided_ms or 0),
                   reverse=True)
    else:
        found.sort(key=lambda s: (len(s.members), s.members[-1].row.decided_ms or 0),
                   reverse=True)
    return StoryList(found[:limit], len(rows), span, order)


def story(state: ViewState, name: str) -> Story | None:
    """Every held member of the story ``name`` (None: none held)."""
    with state.lock:
        members = [row for row in state.decisions.newest() if row.story == name]
        return _story(state, name, members, None) if members else None


def _story(state: ViewState, name: str, rows: list[DecisionRow],
           recent_since: float | None) -> Story:
    """Called under the state's lock (titles)."""
    ordered = sorted(rows, key=lambda r: (r.decided_ms or 0))
    recent = 0 if recent_since is None else sum(
        1 for r in ordered if (_decided_s(r) or recent_since) >= recent_since)
    return Story(name, [ListedDecision(r, state.title_of(r.identity), "") for r in ordered],
                 recent)
