"""Story groups: every decision names the story its item belongs to.

A story is named by the identity of its first item. An item routed unique starts a story;
a near or exact duplicate joins the story of the item it duplicates (not that item's own
identity: a chain of copies is one story); a new report whose novelty reason is one of
:data:`FOLLOW_UP_REASONS` joins its match's story as a follow-up.

The story of a match is read from the window's :class:`StoryBook`, so nothing is added to
the indexed documents, and a story outlives its first item: it keeps its identity
while any member is in the window. Persisted, a decision carries its story only when it is
not the one derived from the decision itself (:func:`derived_story`): a few bytes a record
on average (docs/STATE.md).

A story's size and channels count its members in the window (the one that is deciding
included), so a restart that rebuilds the window from the store rebuilds them too.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from ndd_stream.core.document import Decision

FOLLOW_UP_REASONS: frozenset[str] = frozenset({"development"})
"""Novelty reasons under which a new report joins its match's story as a follow-up.
Measured on the labelled Reuters pairs whose later item the stream routes unique as a new
report of the earlier one (docs/STORIES.md): ``development`` (new figures under a new
headline) is the same story in 4 of 5 pairs; ``headline`` in 8 of 12 (the others another
issuer's filing on the same template), ``figures``, ``subject`` and ``new_content`` mostly
other reports (another company, day or market), so they start stories of their own."""


def derived_story(decision: Decision) -> str:
    """The story a decision names without further knowledge: its duplicate's identity for
    a duplicate, else its own. A persisted decision omits its story when it is this."""
    return decision.duplicate_of if decision.duplicate_of is not None else decision.identity


def linked_match(decision: Decision, follow_ups: frozenset[str] = FOLLOW_UP_REASONS
                 ) -> str | None:
    """The identity whose story the decided item joins; None: it starts a story."""
    if decision.duplicate_of is not None:
        return decision.duplicate_of
    if decision.novel is not None and decision.novel.reason in follow_ups:
        return decision.novel.resembles
    return None


def story_of(decision: Decision, story_of_match: Callable[[str], str | None],
             follow_ups: frozenset[str] = FOLLOW_UP_REASONS) -> str:
    """The decided item's story: the story of the item it joins (``story_of_match``; None
    when that item is not remembered, and then that item's identity names it), or its
    own identity."""
    match = linked_match(decision, follow_ups)
    if match is None:
        return decision.identity
    found = story_of_match(match)
    return found if found else match


KeepPolicy = Literal["first", "complete"]
KEEP_POLICIES: tuple[KeepPolicy, ...] = ("first", "complete")
COMPLETE_CONTAINMENT = (9, 10)  # a fraction, as novelty.MIN_OVERLAP: integer arithmetic
COMPLETE_GROWTH = (5, 4)
"""Under ``keep="complete"`` a near duplicate supersedes its story's kept version when it
holds at least COMPLETE_CONTAINMENT of the kept version's distinct q-grams and has at least
COMPLETE_GROWTH times as many: it says what the kept one says, and materially more (chosen
from the Gold Set and Reuters, docs/STORIES.md). Sets of q-grams, not lengths: a copy that
repeats itself is not longer, and a truncated or damaged copy holds less."""


@dataclass(frozen=True, slots=True)
class Kept:
    """The version of a story a reader holds: the first item, or the last that superseded."""

    identity: str
    position: int  # its number in the window's index (ScopeWindow.doc_base numbering)
    size: int  # |signature|


def supersedes(shared: int, size: int, kept: Kept) -> bool:
    """Whether an item of ``size`` q-grams sharing ``shared`` with ``kept`` is a more
    complete version of it (integer arithmetic: the same on every platform)."""
    (cn, cd), (gn, gd) = COMPLETE_CONTAINMENT, COMPLETE_GROWTH
    return shared * cd >= kept.size * cn and size * gd >= kept.size * gn


class StoryBook:
    """The stories of one scope's window: each member's story, each story's tally.

    Apart from the window's decisions so that a gatherer, which admits items ahead of
    deciding them, can expire it in step with its decisions (:meth:`expire` is called
    with the hours that expired when the deciding item was admitted).

    Kept in flat dicts of strings and ints: most stories have one member, and an object per
    member or story (a tally, a tuple) is one more for the garbage collector to traverse on
    each pass over a full window."""

    def __init__(self) -> None:
        self._story: dict[str, str] = {}  # member identity -> story
        self._channel: dict[str, str] = {}  # member identity -> channel
        self._by_hour: dict[int, list[str]] = {}  # member identities by hour
        self._size: dict[str, int] = {}  # story -> members
        # story -> its one channel (a str), or members by channel when several
        self._channels: dict[str, str | dict[str, int]] = {}
        self._listed: dict[str, tuple[str, ...]] = {}  # story of several channels -> sorted
        self._single: dict[str, tuple[str]] = {}  # channel -> (channel,), shared
        self._kept: dict[str, Kept] = {}  # keep="complete" only

    def story_of(self, identity: str) -> str | None:
        """The story of a member (None: not in the window)."""
        return self._story.get(identity)

    def join(self, identity: str, story: str, channel: str,
             hour: int) -> tuple[int, tuple[str, ...]]:
        """Count a member of ``story``; return the story's size and channels (sorted: the
        same whichever member left the window first) with it."""
        channel = sys.intern(channel)  # one str a channel, not one a member
        self._story[identity] = story
        self._channel[identity] = channel
        members = self._by_hour.get(hour)
        if members is None:
            members = self._by_hour[hour] = []
        members.append(identity)
        size = self._size.get(story, 0) + 1
        self._size[story] = size
        if size == 1:
            self._channels[story] = channel
            return 1, self._one(channel)
        held = self._channels[story]
        if isinstance(held, str):
            if held == channel:
                return size, self._one(channel)
            held = self._channels[story] = {held: size - 1}
        count = held.get(channel)
        if count is None:
            held[channel] = 1
            self._listed[story] = tuple(sorted(held))
        else:
            held[channel] = count + 1
        return size, self._listed[story]

    def _one(self, channel: str) -> tuple[str]:
        single = self._single.get(channel)
        if single is None:
            single = self._single[channel] = (channel,)
        return single

    def expire(self, hours: Iterable[int]) -> None:
        """Forget the members of ``hours`` (they left the window)."""
        for hour in hours:
            for identity in self._by_hour.pop(hour, ()):
                story = self._story.pop(identity)
                channel = self._channel.pop(identity)
                size = self._size[story] - 1
                if not size:
                    del self._size[story], self._channels[story]
                    self._listed.pop(story, None)
                    self._kept.pop(story, None)
                    continue
                self._size[story] = size
                held = self._channels[story]
                if isinstance(held, str):
                    continue
                left = held[channel] - 1
                if left:
                    held[channel] = left
                else:
                    del held[channel]
                    self._listed[story] = tuple(sorted(held))

    def kept(self, story: str) -> Kept | None:
        return self._kept.get(story)

    def keep(self, story: str, kept: Kept) -> None:
        """Record the version a reader holds (a story that has members only)."""
        self._kept[story] = kept

    def __len__(self) -> int:
        return len(self._size)


def place(decision: Decision, book: StoryBook, channel: str, hour: int,
          follow_ups: frozenset[str] = FOLLOW_UP_REASONS) -> Decision:
    """``decision`` with its story (kept when it has one: a stored decision), counted as a
    member of the window (``book``)."""
    story = decision.story or story_of(decision, book.story_of, follow_ups)
    size, channels = book.join(decision.identity, story, channel, hour)
    return decision.placed(story, size, channels)


def alone(decision: Decision, channel: str) -> Decision:
    """A decision outside the window (a late item): a story of its own, never counted."""
    return decision.placed(decision.identity, 1, (channel,))
