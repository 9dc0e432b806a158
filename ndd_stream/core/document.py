"""What goes into the detector and what comes out of it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from typing_extensions import dataclass_transform

from ndd_stream.core.novelty import Novelty

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True)
def value_record(cls: type[_T]) -> type[_T]:
    """A frozen dataclass with slots to the type checker (mypy rejects any assignment to a
    field), a dataclass with slots and the same field hash at run time. Why: a frozen
    dataclass sets each field through ``object.__setattr__``, which tripled the cost of
    making a record; every item makes three (its document, its decision, the decision in
    its story)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)


class Status(StrEnum):
    UNIQUE = "unique"
    NEAR_DUPLICATE = "near_duplicate"
    EXACT_DUPLICATE = "exact_duplicate"


class Policy(StrEnum):
    """Why a decision did not come from a plain doc_q comparison (empty when it did)."""

    NONE = ""
    SHORT = "short"  # normal form shorter than q: exact match of normal forms
    EMPTY = "empty"  # no letters or digits at all: unique, never matched nor indexed
    LATE = "late"  # the item's whole window has expired: unique, not indexed


@value_record
class Document:
    """One news item, already validated: ``text`` is the extracted plain text."""

    identity: str
    scope: str
    channel: str
    timestamp: float  # event time, epoch seconds
    text: str
    markup: bool = False  # the item came as HTML (see core.extract.looks_like_markup)


@value_record
class Decision:
    """The detector's verdict on one document, with the explanation of a match."""

    identity: str
    status: Status
    similarity: float  # doc_q with the best match; 0.0 when unique
    duplicate_of: str | None = None
    matched_channel: str | None = None
    matched_timestamp: float | None = None
    scope: str = ""
    hour: int = 0
    policy: Policy = Policy.NONE
    replayed: bool = False  # True: identity seen before, original decision returned
    # Set when the best q-gram match was judged another report (status unique, similarity
    # = its doc_q): ndd_stream.core.novelty.
    novel: Novelty | None = None
    # The story the item belongs to (core.stories: its first item's identity; "" when not
    # placed yet), and the story's members and their channels in the window so far.
    story: str = ""
    story_size: int = 0
    story_channels: tuple[str, ...] = ()
    # keep="complete": the identity of the story's version this more complete one replaces
    # (the item is then routed unique although a near duplicate)
    supersedes: str | None = None

    @property
    def is_duplicate(self) -> bool:
        return self.status is not Status.UNIQUE

    def placed(self, story: str, size: int, channels: tuple[str, ...]) -> Decision:
        """This decision in its story. Written out, not ``dataclasses.replace`` (4.5 us a
        decision, as much again as the story's bookkeeping)."""
        return Decision(self.identity, self.status, self.similarity, self.duplicate_of,
                        self.matched_channel, self.matched_timestamp, self.scope, self.hour,
                        self.policy, self.replayed, self.novel, story, size, channels,
                        self.supersedes)

    @property
    def routed_unique(self) -> bool:
        """Whether the item goes to the unique topic: unique, or a more complete version."""
        return self.status is Status.UNIQUE or self.supersedes is not None

    def as_dict(self) -> dict[str, Any]:
        """Every field by name (``novel`` only when set). Written out, not
        ``dataclasses.asdict``: that deep-copies field by field and was 7% of a whole
        ``dedup`` process on short items (tests/test_novelty.py checks every field). An
        enum's ``_value_``, not its ``value`` property: a fifth of the time."""
        out: dict[str, Any] = {
            "identity": self.identity, "status": self.status._value_,
            "similarity": self.similarity, "duplicate_of": self.duplicate_of,
            "matched_channel": self.matched_channel,
            "matched_timestamp": self.matched_timestamp, "scope": self.scope,
            "hour": self.hour, "policy": self.policy._value_, "replayed": self.replayed,
            "story": self.story, "story_size": self.story_size,
            "story_channels": list(self.story_channels), "supersedes": self.supersedes,
        }
        if self.novel is not None:
            out["novel"] = self.novel.as_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decision:
        return cls(
            identity=str(data["identity"]),
            status=Status(data["status"]),
            similarity=float(data["similarity"]),
            duplicate_of=data.get("duplicate_of"),
            matched_channel=data.get("matched_channel"),
            matched_timestamp=data.get("matched_timestamp"),
            scope=str(data.get("scope", "")),
            hour=int(data.get("hour", 0)),
            policy=Policy(data.get("policy", "")),
            replayed=bool(data.get("replayed", False)),
            novel=Novelty.from_dict(data["novel"]) if data.get("novel") else None,
            story=str(data.get("story") or ""),
            story_size=int(data.get("story_size") or 0),
            story_channels=tuple(map(str, data.get("story_channels") or ())),
            supersedes=data.get("supersedes"),
        )
