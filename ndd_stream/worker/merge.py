"""One scoped partition's items in event-time order, across the raw partitions that feed it.

Why: the router forwards raw partitions in the order it fetches them, so with a
cross-channel scope (``NDD_SCOPE=global``, a scope map) a backlog reaches the scoped
partition one raw partition after another, months apart. Deciding in that order let fetch
order decide which copy is "the first". The decider of a scoped partition is therefore
the one **sequencer** of every scope on it: it holds items back and releases them in
event-time order, like Kafka Streams picks the record with the lowest timestamp among a
task's partitions and Flink merges watermarks.

- **Order key** (documented total order): ``(event time ms, raw topic, raw partition,
  raw offset)``.
- **Progress** (a watermark per raw partition, the *source*): every item forwarded from a
  source says the source is past its offset and its event time; routers also send
  progress records to every scoped partition after each batch and on a timer, so a
  partition hears of sources whose items went elsewhere. Within a raw partition items
  are expected in event-time order, so no later item of the source can sort below
  ``(its latest event time, source, next offset)``: the source's *bound*.
- **Release**: the held item with the lowest key goes when every source's bound is above
  it. A source that holds it back is waited for, boundedly. An *idle* one (its router said
  it has nothing more to forward) is stepped over for that item once its router has
  confirmed "nothing more" at least ``idle_s`` after the item: the wait covers what the
  router had not fetched yet when it last looked, and routers re-confirm idle raw
  partitions on a timer (Kafka Streams' ``max.task.idle.ms`` for partitions without lag).
  "After" is measured on either of two clocks: the sequencer's (when it read the item and
  the confirmation), or the routers' (the Kafka timestamps of the two scoped records: when
  the item was forwarded and when the confirmation was sent). The first alone made a
  backlog stop and go: items read in a burst waited for a confirmation *read* a second
  later, although the scoped partition already held confirmations sent long after them.
  The second needs the workers' clocks to agree to well within ``idle_s``, as Kafka's
  timestamps do under NTP; a record without a timestamp uses the first only.
  A source with records not forwarded yet, or not heard of (its worker is down or
  rebalancing), is waited for ``stall_s``, counted from the later of its last news and the
  item's arrival; then it is *passed*: left out until its bound is above the frontier again
  (Flink's idleness). ``max_bytes`` bounds what is held; past it the blockers are passed.
- **Behind**: an item whose key is at or below the frontier (released already) arrives
  from a passed source. It is decided at once against the window as it stands, and
  counted: a reader has the later copy already.

Pure: no Kafka, no clock of its own (``now`` is passed in), no I/O; the pool feeds it.
The checkpoint (:meth:`EventTimeMerge.checkpoint`) is persisted with the partition's state
in one RocksDB batch, and its position is the lowest scoped offset still held, so a
restart re-reads the held items and skips what was decided (key at or below the frontier).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

P = TypeVar("P")

SourceId = tuple[str, int]  # raw topic, raw partition
NO_TIME = -(1 << 62)  # a source that forwarded nothing yet: below every event time

CHECKPOINT_VERSION = 1


@dataclass(frozen=True, order=True, slots=True)
class OrderKey:
    """The total order of a scope: event time, then raw topic, partition and offset."""

    event_ms: int
    topic: str
    partition: int
    offset: int

    @property
    def source(self) -> SourceId:
        return (self.topic, self.partition)

    def as_list(self) -> list[Any]:
        return [self.event_ms, self.topic, self.partition, self.offset]

    @classmethod
    def from_list(cls, data: list[Any]) -> OrderKey:
        return cls(int(data[0]), str(data[1]), int(data[2]), int(data[3]))


@dataclass(slots=True)
class SourceState:
    """What this scoped partition knows of one raw partition."""

    next: int = 0  # raw offsets below were forwarded
    event_ms: int = NO_TIME  # the latest event time forwarded
    high: int | None = None  # the raw partition's end when its router last said
    heard: float | None = None  # monotonic time of the last news (not persisted)
    passed: bool = False  # left out of the order (stalled or over memory)
    seen_next: int = 0  # raw offsets below reached this partition as items
    confirmed: float | None = None  # when its router last said "caught up" (not persisted)
    confirmed_at: float | None = None  # ... by that record's timestamp (not persisted)
    floor: OrderKey | None = None  # stepped over up to here while idle (not persisted)

    def bound(self, source: SourceId) -> OrderKey:
        return OrderKey(self.event_ms, source[0], source[1], self.next)

    def blocks(self, source: SourceId, key: OrderKey) -> bool:
        """Whether this source may still send something that sorts at or below ``key``:
        ``bound(source) <= key``, compared field by field without making the bound (this
        runs for every source each time the sequencer looks at its head)."""
        if self.passed or self.event_ms > key.event_ms:
            return False
        if self.event_ms == key.event_ms and (source[0], source[1], self.next) > (
                key.topic, key.partition, key.offset):
            return False
        return self.floor is None or self.floor < key

    @property
    def caught_up(self) -> bool:
        return self.high is not None and self.next >= self.high


class Verdict(Enum):
    HELD = "held"  # waits for its turn
    NOW = "now"  # no order key (unusable time: the DLQ's) - decided at once
    BEHIND = "behind"  # arrived after the frontier passed it: decided at once, counted
    COPY = "copy"  # a re-forwarded record already decided: not answered again
    DONE = "done"  # re-read after a restart, decided before it: skipped
    DUPLICATE = "duplicate"  # a second copy of a record already held: dropped


class PassReason(Enum):
    IDLE = "idle"  # stepped over for one item: its router confirmed it has nothing more
    STALL = "stall"
    MEMORY = "memory"


@dataclass(frozen=True, slots=True)
class Passed:
    """A source the order stopped waiting for (logged and counted by the caller)."""

    source: SourceId
    reason: PassReason
    waited_s: float
    key: OrderKey  # the held item it blocked


@dataclass(slots=True)
class _Held(Generic[P]):
    key: OrderKey
    scoped_offset: int
    size: int = field(compare=False)
    payload: P = field(compare=False)
    arrived: float = field(compare=False, default=0.0)
    forwarded: float | None = field(compare=False, default=None)  # its record's timestamp
    # the heap's order, (key, scoped offset) as one tuple: compared without a dataclass
    # comparison per field (the heap compares every item held a few times)
    rank: tuple[int, str, int, int, int] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        k = self.key
        self.rank = (k.event_ms, k.topic, k.partition, k.offset, self.scoped_offset)

    def __lt__(self, other: _Held[P]) -> bool:
        return self.rank < other.rank


class EventTimeMerge(Generic[P]):
    """The sequencer of one scoped partition (see the module docstring)."""

    def __init__(self, idle_s: float, stall_s: float, max_bytes: int) -> None:
        self.idle_s = idle_s
        self.stall_s = stall_s
        self.max_bytes = max_bytes
        self.sources: dict[SourceId, SourceState] = {}
        self.frontier: OrderKey | None = None  # the last key released
        self.consumed = 0  # first scoped offset not offered yet
        self._heap: list[_Held[P]] = []
        self._keys: set[OrderKey] = set()
        self._bytes = 0
        self._replay_to = 0  # after a restore: hold everything until re-read up to here
        self._offered_to = 0
        self.more = False  # the last release stopped at its limit, not at a blocker
        # Nothing is released until the raw partitions that exist are told (:meth:`expect`):
        # before that, a source that has not sent yet would not hold anything back.
        self.told = False

    # --- input ------------------------------------------------------------------------
    def expect(self, sources: Iterable[SourceId], now: float) -> None:
        """The raw partitions that exist (metadata): each is waited for once known."""
        self.told = True
        for source in sources:
            if source not in self.sources:
                self.sources[source] = SourceState(heard=now)

    def progress(self, source: SourceId, next_offset: int, event_ms: int, high: int | None,
                 scoped_offset: int, now: float, stamp: float | None = None) -> None:
        """A router's progress record for ``source``; ``stamp``: the record's timestamp
        (seconds), when the router sent it."""
        state = self._source(source, now)
        if next_offset > state.next or event_ms > state.event_ms:
            state.heard = now
        state.next = max(state.next, next_offset)
        state.event_ms = max(state.event_ms, event_ms)
        if high is not None:
            state.high = high if state.high is None else max(state.high, high)
        if state.caught_up:
            state.confirmed = now
            if stamp is not None:
                state.confirmed_at = (stamp if state.confirmed_at is None
                                      else max(stamp, state.confirmed_at))
        self._rejoin(source, state)
        self.consumed = max(self.consumed, scoped_offset + 1)
        self._offered_to = max(self._offered_to, scoped_offset + 1)

    def skip(self, scoped_offset: int) -> None:
        """A record of the scoped partition that is neither an item nor progress."""
        self.consumed = max(self.consumed, scoped_offset + 1)
        self._offered_to = max(self._offered_to, scoped_offset + 1)

    def offer(self, key: OrderKey | None, scoped_offset: int, size: int, payload: P,
              now: float, stamp: float | None = None) -> Verdict:
        """An item of the scoped partition; HELD ones come back from :meth:`release`.
        ``stamp``: the record's timestamp (seconds), when its router forwarded it."""
        replaying = scoped_offset < self.consumed  # re-read after a restart
        self.consumed = max(self.consumed, scoped_offset + 1)
        self._offered_to = max(self._offered_to, scoped_offset + 1)
        if key is None:
            return Verdict.DONE if replaying else Verdict.NOW
        state = self._source(key.source, now)
        seen = key.offset < state.seen_next
        state.seen_next = max(state.seen_next, key.offset + 1)
        if key.offset + 1 > state.next or key.event_ms > state.event_ms:
            state.heard = now
        state.next = max(state.next, key.offset + 1)
        state.event_ms = max(state.event_ms, key.event_ms)
        self._rejoin(key.source, state)
        if self.frontier is not None and key <= self.frontier:
            if replaying:
                return Verdict.DONE
            return Verdict.COPY if seen else Verdict.BEHIND
        if key in self._keys:
            return Verdict.DUPLICATE
        heapq.heappush(self._heap, _Held(key, scoped_offset, size, payload, now, stamp))
        self._keys.add(key)
        self._bytes += size
        return Verdict.HELD

    # --- output -----------------------------------------------------------------------
    def release(self, now: float, limit: int | None = None
                ) -> tuple[list[tuple[OrderKey, P]], list[Passed]]:
        """The held items whose turn has come, in order, and the sources passed to get
        there; at most ``limit`` items (then :attr:`more` says the rest may be due)."""
        out: list[tuple[OrderKey, P]] = []
        passed: list[Passed] = []
        self.more = False
        if not self.told or self._offered_to < self._replay_to:
            return out, passed  # the checkpoint's sources are ahead of the held items re-read
        while self._heap:
            if limit is not None and len(out) >= limit:
                self.more = True  # one record (a confirmation) can free a whole backlog
                break
            top = self._heap[0]
            head, arrived = top.key, top.arrived
            blockers = [s for s, st in self.sources.items() if st.blocks(s, head)]
            if blockers:
                over = self._bytes > self.max_bytes
                for source in blockers:
                    state = self.sources[source]
                    if not over and state.caught_up and self._idle_since(state, top):
                        state.floor = head  # idle since the item came: step over it
                        passed.append(Passed(source, PassReason.IDLE, now - arrived, head))
                        continue
                    waited = now - max(arrived, state.heard if state.heard is not None
                                       else arrived)
                    if over or waited >= self.stall_s:
                        state.passed = True
                        reason = PassReason.MEMORY if over else PassReason.STALL
                        passed.append(Passed(source, reason, waited, head))
                if any(self.sources[s].blocks(s, head) for s in blockers):
                    break
            held = heapq.heappop(self._heap)
            self._keys.discard(held.key)
            self._bytes -= held.size
            self.frontier = held.key
            out.append((held.key, held.payload))
        return out, passed

    def next_deadline(self) -> float | None:
        """When :meth:`release` may next pass a stalled source without new input (an idle
        one is stepped over on its router's next confirmation, which is input)."""
        if not self._heap:
            return None
        head, arrived = self._heap[0].key, self._heap[0].arrived
        return min((max(arrived, st.heard if st.heard is not None else arrived) + self.stall_s
                    for s, st in self.sources.items() if st.blocks(s, head)), default=None)

    @property
    def held(self) -> int:
        return len(self._heap)

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def resume_offset(self) -> int:
        """Where a restart must re-read the scoped partition from: the lowest offset held."""
        return min((h.scoped_offset for h in self._heap), default=self.consumed)

    # --- persistence ------------------------------------------------------------------
    def checkpoint(self) -> dict[str, Any]:
        """Plain data (JSON) with everything but the held items, which are re-read."""
        return {
            "v": CHECKPOINT_VERSION,
            "consumed": self.consumed,
            "frontier": None if self.frontier is None else self.frontier.as_list(),
            "sources": [[t, p, s.next, s.event_ms, s.high, s.seen_next, s.passed]
                        for (t, p), s in sorted(self.sources.items())],
        }

    def restore(self, data: dict[str, Any], now: float) -> None:
        """Start from a checkpoint (the held items are offered again by the caller)."""
        if data.get("v") != CHECKPOINT_VERSION:
            raise ValueError(f"unknown order checkpoint version {data.get('v')!r}")
        self.consumed = int(data["consumed"])
        frontier = data.get("frontier")
        self.frontier = None if frontier is None else OrderKey.from_list(frontier)
        self.sources = {
            (str(t), int(p)): SourceState(int(n), int(e), None if h is None else int(h), now,
                                          bool(passed), int(seen))
            for t, p, n, e, h, seen, passed in data["sources"]}
        self._heap, self._keys, self._bytes = [], set(), 0
        self._replay_to, self._offered_to = self.consumed, 0

    # --- internals --------------------------------------------------------------------
    def _idle_since(self, state: SourceState, held: _Held[P]) -> bool:
        """Whether the source was confirmed caught up ``idle_s`` after the item, on either
        clock (module docstring, "Release")."""
        if state.confirmed is not None and state.confirmed - held.arrived >= self.idle_s:
            return True
        return (held.forwarded is not None and state.confirmed_at is not None
                and state.confirmed_at - held.forwarded >= self.idle_s)

    def _source(self, source: SourceId, now: float) -> SourceState:
        state = self.sources.get(source)
        if state is None:
            state = self.sources[source] = SourceState(heard=now)
        return state

    def _rejoin(self, source: SourceId, state: SourceState) -> None:
        """A passed source takes part again once nothing it sends can be behind."""
        if state.passed and (self.frontier is None or state.bound(source) > self.frontier):
            state.passed = False
