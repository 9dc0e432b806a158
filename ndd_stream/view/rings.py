"""Bounded containers for the view: memory stays flat whatever the traffic.

* :class:`Ring`: the last N entries by key (a dict in insertion order; the oldest goes).
* :class:`TextStore`: texts by identity within a byte budget (the oldest go first).
* :class:`Series`: counts per time bucket at one resolution, in a fixed number of slots.
* :class:`Timeline`: two Series (1 s for the last 15 min, 1 min for the last 24 h), so a
  chart covers minutes to hours with at most 2,340 buckets in memory.

Pure: no Kafka, no web; unit-tested in tests/test_view_pure.py.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")


class Ring(Generic[V]):
    """The ``capacity`` most recently added values by key; re-adding a key keeps its place."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._items: dict[str, V] = {}
        self.evicted = 0

    def add(self, key: str, value: V) -> bool:
        """Add ``value`` under ``key``; False (and no change) if the key is already here."""
        if key in self._items:
            return False
        self._items[key] = value
        while len(self._items) > self.capacity:
            del self._items[next(iter(self._items))]
            self.evicted += 1
        return True

    def get(self, key: str) -> V | None:
        return self._items.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def newest(self, limit: int | None = None) -> list[V]:
        """Values newest first (at most ``limit``)."""
        out: list[V] = []
        for value in reversed(self._items.values()):
            if limit is not None and len(out) >= limit:
                break
            out.append(value)
        return out

    def __iter__(self) -> Iterator[V]:
        return iter(list(self._items.values()))


@dataclass(frozen=True, slots=True)
class StoredText:
    """What the pair view needs of one routed item."""

    identity: str
    title: str
    text: str  # the extracted text the detector compared (possibly cut, see ``cut``)
    channel: str
    time: str  # event time, ISO-8601 UTC, or "" when unknown
    position: str  # where the view read it: output topic[partition]@offset
    cut: bool = False  # text was longer than TextStore.max_chars and was cut

    def size(self) -> int:
        """Bytes of its Python objects (every field: all of them count against the budget)."""
        return sum(sys.getsizeof(f) for f in (self.identity, self.title, self.text,
                                              self.channel, self.time, self.position)) + 120


class TextStore:
    """Texts by identity, at most ``budget_bytes`` in all (Python object sizes); when a new
    text does not fit, the oldest are dropped. A text longer than ``max_chars`` is cut."""

    def __init__(self, budget_bytes: int, max_chars: int = 20_000) -> None:
        self.budget_bytes = budget_bytes
        self.max_chars = max_chars
        self._texts: dict[str, StoredText] = {}
        self.used = 0
        self.evicted = 0

    def put(self, text: StoredText) -> None:
        if len(text.text) > self.max_chars:
            text = StoredText(text.identity, text.title, text.text[: self.max_chars],
                              text.channel, text.time, text.position, cut=True)
        old = self._texts.pop(text.identity, None)
        if old is not None:
            self.used -= old.size()
        self._texts[text.identity] = text
        self.used += text.size()
        while self.used > self.budget_bytes and len(self._texts) > 1:
            oldest = next(iter(self._texts))
            self.used -= self._texts.pop(oldest).size()
            self.evicted += 1

    def get(self, identity: str | None) -> StoredText | None:
        return None if identity is None else self._texts.get(identity)

    def __len__(self) -> int:
        return len(self._texts)


class Series:
    """Counts per ``resolution``-second bucket for the last ``slots`` buckets.

    Bucket ``b`` (time ``b * resolution``) lives in slot ``b % slots``; a slot holding an
    older bucket is cleared when reused, so no cleanup pass is ever needed.
    """

    def __init__(self, resolution: int, slots: int) -> None:
        self.resolution = resolution
        self.slots = slots
        self._bucket: list[int] = [-1] * slots
        self._counts: list[Counter[str]] = [Counter() for _ in range(slots)]

    def _slot(self, t: float) -> int | None:
        bucket = int(t // self.resolution)
        slot = bucket % self.slots
        if self._bucket[slot] != bucket:
            if self._bucket[slot] > bucket:
                return None  # older than anything the series still holds
            self._bucket[slot] = bucket
            self._counts[slot] = Counter()
        return slot

    def add(self, t: float, name: str, n: int = 1) -> None:
        slot = self._slot(t)
        if slot is not None:
            self._counts[slot][name] += n

    def set(self, t: float, name: str, value: int) -> None:
        """A gauge: the bucket keeps the last value set in it."""
        slot = self._slot(t)
        if slot is not None:
            self._counts[slot][name] = value

    def window(self, now: float, span: float) -> tuple[float, list[Counter[str]]]:
        """(start time, counts per bucket) of the buckets covering ``(now - span, now]``;
        empty buckets are empty Counters. ``span`` is capped at what the series holds."""
        last = int(now // self.resolution)
        n = max(1, min(self.slots, int(span // self.resolution)))
        first = last - n + 1
        out: list[Counter[str]] = []
        for bucket in range(first, last + 1):
            slot = bucket % self.slots
            out.append(self._counts[slot] if self._bucket[slot] == bucket else Counter())
        return first * self.resolution, out

    @property
    def span(self) -> int:
        return self.resolution * self.slots


class Timeline:
    """Events per second at two resolutions; :meth:`window` picks the finer one that covers
    the span asked for."""

    def __init__(self, fine: tuple[int, int] = (1, 900), coarse: tuple[int, int] = (60, 1440)
                 ) -> None:
        self.fine = Series(*fine)
        self.coarse = Series(*coarse)

    def add(self, t: float, name: str, n: int = 1) -> None:
        self.fine.add(t, name, n)
        self.coarse.add(t, name, n)

    def window(self, now: float, span: float) -> tuple[float, int, list[Counter[str]]]:
        """(start, bucket seconds, counts per bucket) over the last ``span`` seconds."""
        series = self.fine if span <= self.fine.span else self.coarse
        start, counts = series.window(now, span)
        return start, series.resolution, counts

    def rate(self, now: float, name: str, seconds: int = 10) -> float:
        """Mean events/s of ``name`` over the last ``seconds`` whole seconds (the current,
        still filling second is left out)."""
        _, counts = self.fine.window(now - self.fine.resolution, seconds)
        return sum(c.get(name, 0) for c in counts) / max(1, len(counts) * self.fine.resolution)


class CappedCounter:
    """Counts per (key, name) for at most ``max_keys`` keys; further keys count under
    ``overflow_key``, so a feed with unbounded scopes cannot grow the table."""

    def __init__(self, max_keys: int, overflow_key: str = "(other scopes)") -> None:
        self.max_keys = max_keys
        self.overflow_key = overflow_key
        self.counts: dict[str, Counter[str]] = {}

    def add(self, key: str, name: str, n: int = 1) -> None:
        if key not in self.counts and len(self.counts) >= self.max_keys:
            key = self.overflow_key
        self.counts.setdefault(key, Counter())[name] += n

    def totals(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for c in self.counts.values():
            total.update(c)
        return total
