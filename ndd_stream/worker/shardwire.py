"""The records between a sharded scope's gatherer and its shards (layout v2, JSON).

Why batches: each record costs a worker ~80 us of Kafka client and Faust work whatever its
size (measured with ``bench.e2e --shards 2``: the gatherer's worker handled ~10 records per
item and spent a third of its time on them). So the prepared items of one checkpointed
batch travel as one record per shard, and a shard answers a record's items in one record.

Prepared items, gatherer -> shard s of scoped partition p: topic ``<app>-news.shards``,
partition ``p * shards + s``, key ``ndd-prepared``, value::

    {"v": 2, "p": scoped partition, "items": [item, ...]}   item:
    {"s": scope, "n": arrival number, "i": identity, "c": channel, "t": event time (epoch s),
     "h": hour, "w": the scope's watermark hour, "nf": normal form, "f": figures or null,
     "o": owner shard, "j": answers carry the match's text (bool)}

Answers, shard -> gatherer: back into the scoped topic, partition p, key ``ndd-answer``,
header ``ndd-control: answer``, value::

    {"v": 2, "answers": [{"s": scope, "n": arrival number, "k": shard, "z": |signature|,
                          "b": null or [shared q-grams, match], "x": null or [hour, short]}]}

A match is ``{"i", "c", "t", "h", "z", "n", "nf", "f"}`` (identity, channel, event time,
hour, |signature|, arrival number, normal form and figures when ``j``, else "" and null); a
short match is ``{"i", "c", "t", "n"}``. Floats round-trip exactly (shortest repr).

A record holds items up to :data:`BATCH_BYTES` of JSON (an item larger than that travels
alone; the producer's request limit has room for any item, ``kafka.limits.producer_request_limit``).
Layout v1 (one item or one answer per record, the same fields with ``"v": 1`` and, in a
prepared item, ``"p"``) is still read, so records a v1 worker left in the topics are
answered after an upgrade; a v1 worker cannot read v2, so a sharded deployment is upgraded
by stopping every worker first (docs/DEPLOYMENT.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ndd_stream.core.shards import Answer, Prepared
from ndd_stream.core.window import ShortDoc, WindowDoc
from ndd_stream.jsonio import JSONDecodeError, dumps, loads
from ndd_stream.worker.records import H_CONTROL, OutRecord

VERSION = 2
PREPARED_KEY = b"ndd-prepared"
ANSWER_KEY = b"ndd-answer"
ANSWER_CONTROL = b"answer"
BATCH_BYTES = 262_144
"""Items per record up to this many bytes of JSON: large enough that per-record costs
vanish (~50 news items), small against the 1 MiB request limit."""
BATCH_ITEMS = 64
"""... and at most this many items: one answer record can resolve as many decisions at the
gatherer, and a worker killed mid-batch re-sends the decisions since its last checkpoint,
which the pool takes at records' boundaries (``pool.CHECKPOINT_ITEMS``). 256 KiB held ~200
short agency items."""


class BadShardRecord(ValueError):
    """A shard-stage record this version cannot read."""


def encode_prepared(prep: Prepared) -> bytes:
    """One prepared item's JSON (the same bytes go to every shard)."""
    return dumps({"s": prep.scope, "n": prep.number, "i": prep.identity, "c": prep.channel,
                  "t": prep.timestamp, "h": prep.hour, "w": prep.watermark, "nf": prep.nf,
                  "f": prep.figures, "o": prep.owner, "j": prep.judge})


def prepared_records(items: Sequence[bytes], topic: str, scoped_partition: int,
                     shards: int) -> list[OutRecord]:
    """The records that carry ``items`` (encoded, in admission order) to every shard."""
    head = b'{"v":%d,"p":%d,"items":[' % (VERSION, scoped_partition)
    values = [head + b",".join(chunk) + b"]}" for chunk in _chunks(items)]
    return [OutRecord(topic, PREPARED_KEY, value, [], partition=scoped_partition * shards + s)
            for s in range(shards) for value in values]


def read_prepared(value: bytes | None) -> tuple[list[Prepared], int]:
    """The prepared items of a record, in order, and the scoped partition to answer to."""
    data = _load(value)
    try:
        items = data["items"] if data["v"] == VERSION else [data]
        return [_prepared(item) for item in items], int(data["p"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BadShardRecord(f"undecodable prepared item: {exc}") from exc


def _prepared(d: dict[str, Any]) -> Prepared:
    return Prepared(str(d["s"]), int(d["n"]), str(d["i"]), str(d["c"]), float(d["t"]),
                    int(d["h"]), int(d["w"]), str(d["nf"]),
                    None if d["f"] is None else str(d["f"]), int(d["o"]), bool(d["j"]))


def answer_records(answers: Sequence[Answer], scoped_topic: str,
                   scoped_partition: int) -> list[OutRecord]:
    """The records that carry a shard's ``answers`` back to the gatherer."""
    head = b'{"v":%d,"answers":[' % VERSION
    return [OutRecord(scoped_topic, ANSWER_KEY, head + b",".join(chunk) + b"]}",
                      [(H_CONTROL, ANSWER_CONTROL)], partition=scoped_partition)
            for chunk in _chunks([_encode_answer(a) for a in answers])]


def _encode_answer(answer: Answer) -> bytes:
    best = None
    if answer.best is not None:
        shared, m = answer.best
        best = [shared, {"i": m.identity, "c": m.channel, "t": m.timestamp, "h": m.hour,
                         "z": m.size, "n": m.number, "nf": m.nf, "f": m.figures}]
    short = None
    if answer.short is not None:
        hour, d = answer.short
        short = [hour, {"i": d.identity, "c": d.channel, "t": d.timestamp, "n": d.number}]
    return dumps({"s": answer.scope, "n": answer.number, "k": answer.shard,
                  "z": answer.size, "b": best, "x": short})


def read_answers(value: bytes | None) -> list[Answer]:
    """The answers of a record, in order."""
    data = _load(value)
    try:
        items = data["answers"] if data["v"] == VERSION else [data]
        return [_answer(item) for item in items]
    except (KeyError, TypeError, ValueError) as exc:
        raise BadShardRecord(f"undecodable answer: {exc}") from exc


def _answer(data: dict[str, Any]) -> Answer:
    best = None
    if data["b"] is not None:
        shared, m = data["b"]
        best = (int(shared), WindowDoc(str(m["i"]), str(m["c"]), float(m["t"]), int(m["h"]),
                                       int(m["z"]), -1, str(m["nf"]),
                                       None if m["f"] is None else str(m["f"]), int(m["n"])))
    short = None
    if data["x"] is not None:
        hour, d = data["x"]
        short = (int(hour), ShortDoc(str(d["i"]), str(d["c"]), float(d["t"]), int(d["n"])))
    return Answer(str(data["s"]), int(data["n"]), int(data["k"]), int(data["z"]), best, short)


def _chunks(encoded: Sequence[bytes]) -> list[list[bytes]]:
    """Consecutive runs of ``encoded`` of at most BATCH_BYTES (one item if larger) and
    BATCH_ITEMS each."""
    out: list[list[bytes]] = []
    size = BATCH_BYTES
    for item in encoded:
        if size + len(item) > BATCH_BYTES or len(out[-1]) >= BATCH_ITEMS:
            out.append([])
            size = 0
        out[-1].append(item)
        size += len(item) + 1
    return out


def _load(value: bytes | None) -> dict[str, Any]:
    try:
        data = loads(value or b"")
    except JSONDecodeError as exc:
        raise BadShardRecord(f"not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("v") not in (1, VERSION):
        raise BadShardRecord("not a shard record of layout v1 or v2")
    return data
