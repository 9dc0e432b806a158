"""The records between a sharded scope's gatherer and its shards (worker.shardwire): what
is written is read back the same, batches respect their size, and layout v1 is still read."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndd_stream.core.shards import Answer, Prepared
from ndd_stream.core.window import ShortDoc, WindowDoc
from ndd_stream.worker import shardwire
from ndd_stream.worker.shardwire import (
    ANSWER_CONTROL,
    BadShardRecord,
    answer_records,
    encode_prepared,
    prepared_records,
    read_answers,
    read_prepared,
)

texts = st.text(min_size=0, max_size=400)
prepared = st.builds(
    Prepared, scope=texts, number=st.integers(0, 10**9), identity=texts, channel=texts,
    timestamp=st.floats(0, 4e9), hour=st.integers(0, 10**6), watermark=st.integers(0, 10**6),
    nf=texts.filter(bool), figures=st.none() | texts, owner=st.integers(0, 3),
    judge=st.booleans())
matches = st.builds(WindowDoc, identity=texts, channel=texts, timestamp=st.floats(0, 4e9),
                    hour=st.integers(0, 10**6), size=st.integers(1, 10**5), version=st.just(-1),
                    nf=texts, figures=st.none() | texts, number=st.integers(0, 10**9))
shorts = st.builds(ShortDoc, identity=texts, channel=texts, timestamp=st.floats(0, 4e9),
                   number=st.integers(0, 10**9))
answers = st.builds(
    Answer, scope=texts, number=st.integers(0, 10**9), shard=st.integers(0, 3),
    size=st.integers(0, 10**5),
    best=st.none() | st.tuples(st.integers(1, 10**5), matches),
    short=st.none() | st.tuples(st.integers(0, 10**6), shorts))


@settings(max_examples=60, deadline=None)
@given(st.lists(prepared, max_size=12), st.integers(1, 4), st.sampled_from([1, 300, 1 << 18]),
       st.sampled_from([2, 64]))
def test_prepared_items_reach_every_shard_in_order(items: list[Prepared], shards: int,
                                                   batch: int, most: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shardwire, "BATCH_BYTES", batch)
        mp.setattr(shardwire, "BATCH_ITEMS", most)
        records = prepared_records([encode_prepared(p) for p in items], "t", 2, shards)
    for s in range(shards):
        mine = [r for r in records if r.partition == 2 * shards + s]
        got = [prep for r in mine for prep in read_prepared(r.value)[0]]
        assert got == items
        assert all(read_prepared(r.value)[1] == 2 for r in mine)
        # a record holds at most ``batch`` bytes of items, or one item
        assert all(len(r.value) <= batch + 40 or len(read_prepared(r.value)[0]) == 1
                   for r in mine)
        assert all(len(read_prepared(r.value)[0]) <= most for r in mine)
    if batch == 1:
        assert len(records) == shards * len(items)  # one item per record


@settings(max_examples=60, deadline=None)
@given(st.lists(answers, max_size=12), st.sampled_from([1, 300, 1 << 18]),
       st.sampled_from([2, 64]))
def test_answers_read_back_as_written(written: list[Answer], batch: int, most: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shardwire, "BATCH_BYTES", batch)
        mp.setattr(shardwire, "BATCH_ITEMS", most)
        records = answer_records(written, "scoped", 5)
    assert [a for r in records for a in read_answers(r.value)] == written
    assert all(len(read_answers(r.value)) <= most for r in records)
    assert all(r.partition == 5 and (shardwire.H_CONTROL, ANSWER_CONTROL) in r.headers
               for r in records)
    if batch == 1:
        assert len(records) == len(written)  # one each when none fits with another


def test_a_batch_is_one_record_per_shard() -> None:
    items = [encode_prepared(Prepared("g", n, f"id{n}", "c", 1.0, 0, 0, "text " * 100, None,
                                      n % 2, False)) for n in range(50)]
    records = prepared_records(items, "t", 0, 2)
    assert [r.partition for r in records] == [0, 1]
    many = prepared_records(items * 2, "t", 0, 1)  # 100 short items: BATCH_ITEMS per record
    assert [len(read_prepared(r.value)[0]) for r in many] == [64, 36]


def test_layout_v1_records_are_still_read() -> None:
    """Records a v1 worker left in the topics (one item or answer each) after an upgrade."""
    v1_prepared = orjson.dumps({"v": 1, "s": "g", "n": 7, "i": "a", "c": "c", "t": 1.5,
                                "h": 0, "w": 0, "nf": "some text", "f": None, "o": 1,
                                "j": False, "p": 3})
    assert read_prepared(v1_prepared) == (
        [Prepared("g", 7, "a", "c", 1.5, 0, 0, "some text", None, 1, False)], 3)
    v1_answer = orjson.dumps({"v": 1, "s": "g", "n": 7, "k": 1, "z": 12, "b": None,
                              "x": [0, {"i": "b", "c": "c", "t": 1.0, "n": 3}]})
    assert read_answers(v1_answer) == [
        Answer("g", 7, 1, 12, None, (0, ShortDoc("b", "c", 1.0, 3)))]


@pytest.mark.parametrize("value", [b"", b"[]", b'{"v": 3}', b'{"v": 2, "p": 0}',
                                   b'{"v": 2, "answers": [{"s": 1}]}', b"\xff"])
def test_unreadable_records_are_one_clear_error(value: bytes) -> None:
    with pytest.raises(BadShardRecord):
        read_prepared(value)
    with pytest.raises(BadShardRecord):
        read_answers(value)
