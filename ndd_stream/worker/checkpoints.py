"""Where each of a pool's partitions stands at the end of a piece: its new checkpoint.

A partition's checkpoint is its one position (``state.codec.Checkpoint``): the first
scoped offset whose work is not reflected, and, where they exist, what event-time order
and shards add to it, each from its one place: the sequencer's held items
(``worker/sequencing.py``; the position is then the lowest offset still held) and a
gatherer's pending items (``worker/gathering.py``; the position is then at most the oldest
undecided item's). The committer makes the checkpoints durable with the piece
(``worker/commit.py``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ndd_stream.state.codec import Checkpoint
from ndd_stream.state.pending import Pair, least_offset
from ndd_stream.worker.gathering import GatherDecider
from ndd_stream.worker.merge import EventTimeMerge


def checkpoints(deciders: Mapping[int, Any], merges: Mapping[int, EventTimeMerge[Any]],
                touched: Collection[int], moved: Mapping[int, int]) -> dict[int, Checkpoint]:
    """The checkpoint of each partition that moved in a piece. ``moved``: where offset
    order left each partition (the offset after its last record handed out); ``touched``:
    the partitions whose sequencer or gatherer the piece changed."""
    cursor: dict[int, int] = {}
    undecided: dict[int, Sequence[Pair]] = {}  # gatherers' pending lists
    for partition, decider in deciders.items():
        merge = merges.get(partition)
        gathering = isinstance(decider, GatherDecider)
        if merge is not None:
            if partition in touched:
                cursor[partition] = merge.resume_offset()
        else:
            position = moved.get(partition)
            if position is not None and (position > decider.next_offset or (
                    gathering and partition in touched)):
                cursor[partition] = position
        if gathering and partition in cursor:  # re-read from the oldest undecided item
            undecided[partition] = listed = decider.pending()
            if listed:
                cursor[partition] = min(cursor[partition], least_offset(listed))
    return {p: Checkpoint(
        position, order=merges[p].checkpoint() if p in merges else None,
        pending=undecided.get(p, ())) for p, position in cursor.items()}
