"""The gatherer's pending list (state/pending.py): a FIFO of (offset, number) pairs whose
full chunks are packed once; what a checkpoint lists equals the plain list, and survives the
checkpoint's encoding."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndd_stream.state import pending as pending_module
from ndd_stream.state.pending import PendingList, PendingSnapshot, least_offset
from ndd_stream.state.rocks import (
    Checkpoint,
    CorruptRecord,
    decode_checkpoint,
    encode_checkpoint,
)

PAIRS = st.tuples(st.integers(0, 2**40), st.integers(-1, 2**40))
# a step: append a pair, pop the oldest, or take a snapshot (with re-read pairs after it)
STEPS = st.lists(st.one_of(PAIRS, st.just("pop"), st.lists(PAIRS, max_size=9)), max_size=120)


@settings(max_examples=200, deadline=None)
@given(chunk=st.integers(1, 7), steps=STEPS)
def test_a_snapshot_lists_what_a_plain_list_would_and_round_trips(
        chunk: int, steps: list[object]) -> None:
    live, model = PendingList(chunk), deque[tuple[int, int]]()
    for step in steps:
        if step == "pop":
            if model:
                live.popleft()
                model.popleft()
            else:
                with pytest.raises(IndexError):
                    live.popleft()
        elif isinstance(step, tuple):
            live.append(step)
            model.append(step)
        else:
            assert isinstance(step, list)
            want = tuple(model) + tuple(step)
            got = live.snapshot(PendingList.of(step, chunk))  # a restart's re-read list
            assert got == want and tuple(got) == want and len(got) == len(want)
            if want:
                assert least_offset(got) == min(o for o, _ in want)
            checkpoint = Checkpoint(5, 6, None, got, shards=2)
            value = encode_checkpoint(checkpoint)
            assert value[:1] == (b"\x04" if isinstance(got, PendingSnapshot) else
                                 b"\x03" if want else b"\x02")
            back = decode_checkpoint(value)
            assert back == checkpoint and tuple(back.pending) == want
            if want:
                assert least_offset(back.pending) == min(o for o, _ in want)
        assert len(live) == len(model)


def test_each_full_chunk_is_packed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """What keeps a backlog's checkpoints from growing with its square: after each piece a
    checkpoint packs the open tail only, whatever the length of the list."""
    packed: list[int] = []
    real = pending_module.pack_pending

    def counting(pairs: object) -> dict[str, object]:
        packed.append(len(pairs))  # type: ignore[arg-type]
        return real(pairs)  # type: ignore[arg-type]

    monkeypatch.setattr(pending_module, "pack_pending", counting)
    live = PendingList(100)
    offset = 0
    for _piece in range(50):  # 50 pieces: 300 admitted, 256 decided in each
        for _ in range(300):
            live.append((offset, offset))
            offset += 1
        for _ in range(256):
            live.popleft()
        snapshot = live.snapshot()
        encode_checkpoint(Checkpoint(0, 0, None, snapshot))
        encode_checkpoint(Checkpoint(0, 0, None, snapshot))  # store and changelog
    assert len(live) == 50 * 44
    assert sum(packed) <= 50 * 300 + 50 * 100  # every pair once, and each piece's tail
    assert max(packed) <= 100


def test_a_corrupt_chunked_pending_list_is_refused() -> None:
    live = PendingList(2)
    for n in range(5):
        live.append((10 + n, n))
    live.popleft()
    good = encode_checkpoint(Checkpoint(1, 2, None, live.snapshot()))
    assert good[:1] == b"\x04"
    assert decode_checkpoint(good).pending == tuple((10 + n, n) for n in range(1, 5))
    for bad in (good.replace(b'"skip":1', b'"skip":2'),  # the first chunk all decided
                good.replace(b'"skip":1', b'"skip":-1'), good.replace(b'"n":2', b'"n":3', 1),
                good.replace(b'"chunks":[', b'"chunks":{"a":[', 1),
                good.replace(b'"chunks":[', b'"chunks":[], "x":[', 1),
                good.replace(b'"pc"', b'"px"')):
        with pytest.raises(CorruptRecord):
            decode_checkpoint(bad)
