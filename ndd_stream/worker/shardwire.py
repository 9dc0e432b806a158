"""The records between a sharded scope's gatherer and its shards (layout v1, JSON).

Prepared item, gatherer -> shard s of scoped partition p: topic ``<app>-news.shards``,
partition ``p * shards + s``, key = the scope (UTF-8), value::

    {"v": 1, "s": scope, "n": arrival number, "i": identity, "c": channel,
     "t": event time (epoch s), "h": hour, "w": the scope's watermark hour, "nf": normal form,
     "f": figures or null, "o": owner shard, "j": answers carry the match's text (bool),
     "p": scoped partition}

Answer, shard -> gatherer: back into the scoped topic, partition p, key ``ndd-answer``,
header ``ndd-control: answer``, value::

    {"v": 1, "s": scope, "n": arrival number, "k": shard, "z": |signature|,
     "b": null or [shared q-grams, match], "x": null or [hour, short match]}

A match is ``{"i", "c", "t", "h", "z", "n", "nf", "f"}`` (identity, channel, event time,
hour, |signature|, arrival number, normal form and figures when ``j``, else "" and null); a
short match is ``{"i", "c", "t", "n"}``. Floats round-trip exactly (shortest repr).
"""

from __future__ import annotations

from typing import Any

from ndd_stream.core.shards import Answer, Prepared
from ndd_stream.core.window import ShortDoc, WindowDoc
from ndd_stream.jsonio import JSONDecodeError, dumps, loads
from ndd_stream.worker.records import H_CONTROL, OutRecord

VERSION = 1
ANSWER_KEY = b"ndd-answer"
ANSWER_CONTROL = b"answer"


class BadShardRecord(ValueError):
    """A shard-stage record this version cannot read."""


def prepared_record(prep: Prepared, topic: str, scoped_partition: int, shards: int,
                    shard: int) -> OutRecord:
    value = dumps({"v": VERSION, "s": prep.scope, "n": prep.number, "i": prep.identity,
                   "c": prep.channel, "t": prep.timestamp, "h": prep.hour, "w": prep.watermark,
                   "nf": prep.nf, "f": prep.figures, "o": prep.owner, "j": prep.judge,
                   "p": scoped_partition})
    return OutRecord(topic, prep.scope.encode("utf-8", "surrogatepass"), value, [],
                     partition=scoped_partition * shards + shard)


def read_prepared(value: bytes | None) -> tuple[Prepared, int]:
    """The prepared item and the scoped partition to answer to."""
    data = _load(value)
    try:
        prep = Prepared(str(data["s"]), int(data["n"]), str(data["i"]), str(data["c"]),
                        float(data["t"]), int(data["h"]), int(data["w"]), str(data["nf"]),
                        None if data["f"] is None else str(data["f"]), int(data["o"]),
                        bool(data["j"]))
        return prep, int(data["p"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BadShardRecord(f"undecodable prepared item: {exc}") from exc


def answer_record(answer: Answer, scoped_topic: str, scoped_partition: int) -> OutRecord:
    best = None
    if answer.best is not None:
        shared, m = answer.best
        best = [shared, {"i": m.identity, "c": m.channel, "t": m.timestamp, "h": m.hour,
                         "z": m.size, "n": m.number, "nf": m.nf, "f": m.figures}]
    short = None
    if answer.short is not None:
        hour, d = answer.short
        short = [hour, {"i": d.identity, "c": d.channel, "t": d.timestamp, "n": d.number}]
    value = dumps({"v": VERSION, "s": answer.scope, "n": answer.number, "k": answer.shard,
                   "z": answer.size, "b": best, "x": short})
    return OutRecord(scoped_topic, ANSWER_KEY, value, [(H_CONTROL, ANSWER_CONTROL)],
                     partition=scoped_partition)


def read_answer(value: bytes | None) -> Answer:
    data = _load(value)
    try:
        best = None
        if data["b"] is not None:
            shared, m = data["b"]
            best = (int(shared), WindowDoc(str(m["i"]), str(m["c"]), float(m["t"]), int(m["h"]),
                                           int(m["z"]), -1, str(m["nf"]),
                                           None if m["f"] is None else str(m["f"]),
                                           int(m["n"])))
        short = None
        if data["x"] is not None:
            hour, d = data["x"]
            short = (int(hour), ShortDoc(str(d["i"]), str(d["c"]), float(d["t"]), int(d["n"])))
        return Answer(str(data["s"]), int(data["n"]), int(data["k"]), int(data["z"]), best,
                      short)
    except (KeyError, TypeError, ValueError) as exc:
        raise BadShardRecord(f"undecodable answer: {exc}") from exc


def _load(value: bytes | None) -> dict[str, Any]:
    try:
        data = loads(value or b"")
    except JSONDecodeError as exc:
        raise BadShardRecord(f"not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("v") != VERSION:
        raise BadShardRecord("not a shard record of layout v1")
    return data
