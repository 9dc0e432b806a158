"""Hostile raw items for the reliability tests: every kind of bad input a feed can send.

``fuzz_stream(n, seed)`` mixes well-formed news items (with near and exact duplicates,
so the detector has real work) with items of every category in :data:`CATEGORIES`:
random bytes, invalid UTF-8, non-JSON, JSON of the wrong shape or types, missing or
blank text, oversized documents, deep nesting, bad, far-future and far-past timestamps,
absurd epoch values, missing ids and timestamps, re-sent ids, tombstones. Deterministic
for a seed. Each item says which category made it (``FuzzItem.category``), so a failing
test can name what broke; the *expected* outcome is always computed by the reference
(``reference_outcomes``), never guessed here.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from newsgen import edit, story

from ndd_stream import jsonio
from ndd_stream.core.detector import Detector, DetectorConfig
from ndd_stream.core.document import Decision
from ndd_stream.core.items import Invalid, ItemFormat, parse_item
from ndd_stream.state.rocks import Checkpoint

START = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
CHANNELS = ("ch0", "ch1", "ch2", "ch3")


@dataclass(frozen=True)
class FuzzItem:
    category: str
    value: bytes | None  # None: a tombstone (Kafka record without value)
    key: bytes | None = None


@dataclass(frozen=True)
class Outcome:
    """What the worker must do with one raw record: a decision or a DLQ reason."""

    decision: Decision | None = None
    reason: str | None = None


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


class _Gen:
    def __init__(self, seed: int, max_item_bytes: int) -> None:
        self.rnd = random.Random(seed)
        self.max = max_item_bytes
        self.t = START
        self.n = 0
        self.texts: dict[str, list[str]] = {c: [] for c in CHANNELS}

    # -- building blocks ----------------------------------------------------------------
    def tick(self) -> datetime:
        self.t += timedelta(seconds=self.rnd.uniform(0, 40))
        return self.t

    def ident(self) -> str:
        self.n += 1
        return f"f{self.n}"

    def text(self, channel: str) -> str:
        recent = self.texts[channel][-40:]
        roll = self.rnd.random()
        if recent and roll < 0.1:
            out = self.rnd.choice(recent)
        elif recent and roll < 0.3:
            out = edit(self.rnd, self.rnd.choice(recent), self.rnd.randint(1, 4))
        else:
            out = story(self.rnd, self.rnd.randint(10, 30))
        self.texts[channel].append(out)
        return out

    def good_obj(self) -> dict[str, Any]:
        channel = self.rnd.choice(CHANNELS)
        return {"id": self.ident(), "channel": channel, "title": f"T{self.n}",
                "text": self.text(channel), "timestamp": _iso(self.tick())}

    def enc(self, obj: Any) -> bytes:
        return jsonio.dumps(obj)

    # -- categories ---------------------------------------------------------------------
    def good(self) -> bytes:
        return self.enc(self.good_obj())

    def random_bytes(self) -> bytes:
        return self.rnd.randbytes(self.rnd.randint(0, 300))

    def invalid_utf8(self) -> bytes:
        raw = self.good()
        cut = self.rnd.randrange(len(raw) - 20, len(raw) - 2)
        bad = self.rnd.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80",
                               b"\xe2\x82"])
        return raw[:cut] + bad + raw[cut:]

    def not_json(self) -> bytes:
        raw = self.good()
        return self.rnd.choice([
            raw[: self.rnd.randrange(1, len(raw) - 1)],  # truncated
            raw.replace(b'"', b"'"),
            b"plain prose, " + raw[10:60],
            b"{", b"}", b"", b"   ", b"\n", b"NaN", b"Infinity", b'{"a":1,}', b"{'id': 1}",
            b'{"id": "x", "text": "t", "timestamp": NaN}',
            b'{"id": "x", "text": "\\ud800 lone surrogate", "timestamp": 1}',
            b"\x00\x00\x00",
        ])

    def wrong_shape(self) -> bytes:
        return self.rnd.choice([b"[]", b"[1, 2]", b"42", b"-1.5e3", b'"a string"', b"null",
                                b"true", b"false", self.enc([self.good_obj()])])

    def wrong_types(self) -> bytes:
        obj = self.good_obj()
        field, value = self.rnd.choice([
            ("id", ["x"]), ("id", {"a": 1}), ("id", 1.5), ("id", True),
            ("channel", ["c"]), ("channel", 2.5), ("channel", False), ("channel", {"c": 1}),
            ("text", 12), ("text", ["a", "b"]), ("text", {"p": "x"}), ("text", True),
            ("title", 3), ("title", ["t"]),
        ])
        obj[field] = value
        return self.enc(obj)

    def missing_text(self) -> bytes:
        obj = self.good_obj()
        del obj["text"]
        if self.rnd.random() < 0.7:
            del obj["title"]
        else:
            obj["title"] = None
        return self.enc(obj)

    def empty_text(self) -> bytes:
        obj = self.good_obj()
        obj["title"] = self.rnd.choice([None, "", " "])
        if obj["title"] is None:
            del obj["title"]
        obj["text"] = self.rnd.choice(["", " ", "\n\t ", "<p> </p>", "<div><br/></div>",
                                       "\u00a0\u2003", "<script>var a = 1;</script>"])
        return self.enc(obj)

    def oversized(self) -> bytes:
        obj = self.good_obj()
        # a few above the worker's producer request limit (1 MiB by default)
        size = (1_500_000 if self.rnd.random() < 0.05 else
                self.rnd.choice([self.max + 1, self.max * 2, self.max * 8]))
        obj["text"] = ("lorem ipsum dolor " * (size // 18 + 2))[:size]
        return self.enc(obj)

    def deep(self) -> bytes:
        # orjson refuses more than 1024 levels: deeper is not_json; shallower is accepted
        # (only top-level fields are read).
        depth = self.rnd.choice([50, 500, 1000, 1100, 1500])
        obj = self.good_obj()
        body = self.enc(obj)[:-1]
        return body + b',"meta":' + b"[" * depth + b"1" + b"]" * depth + b"}"

    def bad_timestamp(self) -> bytes:
        obj = self.good_obj()
        obj["timestamp"] = self.rnd.choice([
            "soon", "2026-13-45T00:00:00Z", "yesterday", "", "  ", "1e", "12:00",
            [], {}, ["2026-03-01"], True, False, 1e300, -1e300, "1e300", "inf", "-inf", "nan",
            "2026-03-01T25:00:00Z", "0000-00-00",
        ])
        return self.enc(obj)

    def absurd_epoch(self) -> bytes:
        # Numbers a date cannot represent (or barely can): before year 1, far beyond 9999.
        obj = self.good_obj()
        obj["timestamp"] = self.rnd.choice([
            -9e10, -99_999_999_999, -62_135_596_801, -62_135_596_800, "-90000000000",
            "0001-01-01T00:00:00+01:00", "0001-01-01T00:00:00Z", -1, 0, 1e11, 99_999_999_999,
        ])
        return self.enc(obj)

    def future(self) -> bytes:
        obj = self.good_obj()
        obj["timestamp"] = self.rnd.choice(["2999-01-01T00:00:00Z", 9.9e10, "4102444800",
                                            "9999-12-31T23:59:59Z"])
        return self.enc(obj)

    def late(self) -> bytes:
        # Far older than the window of an active channel: the "late" policy.
        obj = self.good_obj()
        past = self.t - timedelta(days=self.rnd.choice([2, 30, 365 * 20]))
        obj["timestamp"] = self.rnd.choice([_iso(past), past.timestamp()])
        return self.enc(obj)

    def no_id(self) -> bytes:
        obj = self.good_obj()
        del obj["id"]
        return self.enc(obj)

    def no_timestamp(self) -> bytes:
        # The worker falls back to the record's Kafka timestamp (dedup has none).
        obj = self.good_obj()
        del obj["timestamp"]
        obj["channel"] = "no-ts"
        return self.enc(obj)

    def resent_id(self) -> bytes:
        # An id seen before with another text: answered with the original decision.
        obj = self.good_obj()
        obj["id"] = f"f{self.rnd.randint(1, max(1, self.n - 1))}"
        return self.enc(obj)

    def odd_text(self) -> bytes:
        obj = self.good_obj()
        obj["text"] = self.rnd.choice([
            "ab", "!!! ??? ...", "\u0000\u0001 control", "🙂" * 50, "مرحبا بالعالم " * 5,
            "e\u0301" * 40, "<b>bold</b> <i>html</i> " * 10, "x" * 2000,
            "".join(self.rnd.choice(string.printable) for _ in range(200)),
        ])
        if self.rnd.random() < 0.5:
            obj["channel"] = self.rnd.choice(["", "ünïcødé", "a" * 300, 7])
        return self.enc(obj)

    def extra_fields(self) -> bytes:
        obj = self.good_obj()
        obj.update({"body": None, "published_at": "not used", "nested": {"a": [1, {"b": None}]},
                    "n": 1e308, "flag": None})
        return self.enc(obj)

    def tombstone(self) -> None:
        return None

    def hostile_id(self) -> bytes:
        # Empty and blank ids (no identity: the source position), integers beyond 64 bits
        # (exact), ids at and past the length limit, markup and terminal controls.
        obj = self.good_obj()
        obj["id"] = self.rnd.choice([
            "", " ", "\t\n", "\u3000", "\u202e", "\x1b[2J", "<img src=x onerror=alert(1)>",
            2**64 + self.rnd.randint(0, 3), -(2**63) - 1, "x" * 1024, "y" * 1025, "z" * 8000])
        if not isinstance(obj["id"], int) and self.rnd.random() < 0.5:
            obj["text"] = self.text(obj["channel"])  # often a fresh story: never a replay
        ident = obj["id"]
        if isinstance(ident, int):  # orjson writes no integer beyond 64 bits
            obj["id"] = "__ID__"
            return self.enc(obj).replace(b'"__ID__"', str(ident).encode())
        return self.enc(obj)

    def hostile_text(self) -> bytes:
        # Markup, bidi and terminal controls in every text field; huge fields near the cap;
        # HTML nested past the extraction's depth limit.
        obj = self.good_obj()
        evil = self.rnd.choice([
            "<script>alert(1)</script>", "x<img src=x onerror=alert(1)>", "\u202e\u2066evil",
            "\x1b]0;title\x07\x1b[31mred", "\x9b31m", "\x7f\x00", "</textarea><svg onload=1>"])
        field = self.rnd.choice(["title", "text", "channel"])
        obj[field] = evil + " " + str(obj.get(field, ""))
        roll = self.rnd.random()
        if roll < 0.25:
            depth = self.rnd.randint(200, max(200, (self.max - 2_000) // 11))  # under the cap
            obj["text"] = "<div>" * depth + obj["text"] + "</div>" * depth
        elif roll < 0.4:  # a field just under the size cap
            room = self.max - len(self.enc(obj)) - 2
            obj["text"] += (" " + "lorem ipsum dolor " * (self.max // 18 + 1))[:max(0, room)]
        return self.enc(obj)


CATEGORIES: dict[str, float] = {  # category -> weight
    "good": 30, "random_bytes": 6, "invalid_utf8": 5, "not_json": 6, "wrong_shape": 4,
    "wrong_types": 6, "missing_text": 4, "empty_text": 4, "oversized": 3, "deep": 3,
    "bad_timestamp": 6, "absurd_epoch": 3, "future": 3, "late": 4, "no_id": 3,
    "no_timestamp": 2, "resent_id": 3, "odd_text": 4, "extra_fields": 2, "tombstone": 1,
    "hostile_id": 4, "hostile_text": 4,
}


def fuzz_stream(n: int, seed: int = 1, max_item_bytes: int = 16_384) -> list[FuzzItem]:
    """``n`` raw records; every category appears (n >= len(CATEGORIES))."""
    gen = _Gen(seed, max_item_bytes)
    names = list(CATEGORIES)
    weights = [CATEGORIES[c] for c in names]
    order = names + gen.rnd.choices(names, weights, k=max(0, n - len(names)))
    head, tail = order[: len(names)], order[len(names):]
    order = ["good"] * min(20, len(tail)) + head + tail[20:]  # channels active before the rest
    out: list[FuzzItem] = []
    for category in order[:n]:
        make: Callable[[], bytes | None] = getattr(gen, category)
        value = make()
        key = gen.rnd.choice([None, b"", gen.rnd.randbytes(8), b"ch0"])
        out.append(FuzzItem(category, value, key))
    return out


# --- hypothesis: hostile items ----------------------------------------------------------

HOSTILE_SNIPPETS = (
    "<script>alert(1)</script>", "x<img src=x onerror=alert(1)>", "</title><svg onload=1>",
    "\u202e\u2066reversed\u2069", "\u200f\u061c", "\x1b]0;pwned\x07\x1b[2J", "\x9b31m\x7f",
    "\x00\x01\x08", "&lt;b&gt;&#0;", "raw[0]@1", "🙂", "e\u0301", "\ufeff",
)


def hostile_items(max_item_bytes: int) -> Any:
    """A hypothesis strategy of raw items (bytes) a careless or hostile producer sends:
    markup, bidi and control characters in every field; huge fields near the size cap; HTML
    nested past the extraction's depth limit; empty, blank, giant and 64+-bit ids; fields
    of the wrong type. Encoded by the standard library (it writes integers of any size)."""
    import json

    from hypothesis import strategies as st

    words = st.lists(st.sampled_from(["harbour", "council", "plan", "vote", "rate", "bank",
                                      "said", "on", "monday", "the", "new"]),
                     min_size=1, max_size=30).map(" ".join)
    hostile = st.lists(st.sampled_from(HOSTILE_SNIPPETS) | words | st.text(max_size=20),
                       min_size=1, max_size=6).map(" ".join)

    def nested(text: str, depth: int) -> str:
        return "<div>" * depth + text + "</div>" * depth

    text = (hostile | words
            | st.builds(nested, words, st.integers(100, max(100, (max_item_bytes - 800) // 11))))
    ident = (st.sampled_from(["", " ", "\t\n", "\u3000", "\u202e", "x" * 1024, "y" * 1025])
             | st.integers(-(2**80), 2**80) | hostile | st.booleans() | st.floats()
             | st.lists(st.integers(), max_size=2) | st.none())
    obj = st.fixed_dictionaries(
        {"text": text},
        optional={"id": ident, "channel": hostile | st.sampled_from(["", "a", "b"]) | st.integers(),
                  "title": hostile | st.integers(),
                  "timestamp": st.sampled_from([1_772_352_000, "2026-03-01T09:00:00Z", "soon"])})

    def encode(item: dict[str, Any], fill: bool) -> bytes:
        raw = json.dumps(item, ensure_ascii=False).encode("utf-8", "surrogatepass")
        if fill and len(raw) < max_item_bytes:  # the text padded to just under the cap
            item = {**item, "text": item["text"] + " " * (max_item_bytes - len(raw) - 1)}
            raw = json.dumps(item, ensure_ascii=False).encode("utf-8", "surrogatepass")
        return raw

    return st.builds(encode, obj, st.booleans())


def reference_outcomes(
    values: Sequence[bytes | None], positions: Sequence[str], kafka_ts: Sequence[float],
    config: DetectorConfig, fmt: ItemFormat, now: float | None = None,
) -> list[Outcome]:
    """What ``ndd-stream dedup`` decides for these records in this order, with the worker's
    two differences: identity fallback = Kafka position, timestamp fallback = Kafka time."""
    detector = Detector(config)
    out: list[Outcome] = []
    for value, position, ts in zip(values, positions, kafka_ts, strict=True):
        item = parse_item(value or b"", fmt, position=position, fallback_timestamp=ts, now=now)
        if isinstance(item, Invalid):
            out.append(Outcome(reason=item.reason))
        else:
            out.append(Outcome(decision=detector.decide(item)))
    return out


def iter_categories(items: Sequence[FuzzItem]) -> Iterator[tuple[str, int]]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item.category] = counts.get(item.category, 0) + 1
    yield from sorted(counts.items())


# --- coverage-guided fuzzing with atheris (optional) ---------------------------------------
#
#     python tests/fuzz_items.py -atheris_runs=200000     # pip install atheris
#
# Each input becomes either raw bytes or a JSON item whose fields the fuzzer chooses, and
# goes through what a worker does with a raw record: route_raw, parse_item, and a real
# PartitionDecider (detector, RocksDB state, decision headers, audit record). Any
# exception is a finding; atheris then exits non-zero with the input that raised.


def _fuzz_value(fdp: Any) -> Any:
    kind = fdp.ConsumeIntInRange(0, 6)
    if kind == 0:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 60))
    if kind == 1:
        return fdp.ConsumeInt(8)
    if kind == 2:
        return fdp.ConsumeFloat()
    if kind == 3:
        return None
    if kind == 4:
        return fdp.ConsumeBool()
    if kind == 5:
        return [fdp.ConsumeUnicodeNoSurrogates(8)]
    return {"k": fdp.ConsumeUnicodeNoSurrogates(8)}


def atheris_main(argv: list[str]) -> None:
    import tempfile
    from pathlib import Path

    import atheris

    from ndd_stream.worker.deciding import OutputTopics, PartitionDecider
    from ndd_stream.worker.records import Source
    from ndd_stream.worker.router import route_raw

    fmt = ItemFormat(max_item_bytes=4096)
    tmp = tempfile.mkdtemp(prefix="ndd-atheris-")
    decider = PartitionDecider(0, Path(tmp) / "p0", DetectorConfig(), fmt,
                               OutputTopics("u", "d", "dlq", "decisions", "changelog"))
    fields = ["id", "channel", "title", "text", "body", "content", "timestamp", "published_at"]
    counter = [0]

    def target(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        if fdp.ConsumeBool():
            raw = fdp.ConsumeBytes(fdp.remaining_bytes())
        else:
            obj = {name: _fuzz_value(fdp) for name in fields if fdp.ConsumeBool()}
            try:
                raw = jsonio.dumps(obj)
            except TypeError:  # e.g. an int beyond 64 bits: orjson will not write it
                return
        counter[0] += 1
        source = Source("raw", 0, counter[0], 1_772_380_800_000)
        route_raw(raw, None, source, fmt, "scoped", "dlq")
        parse_item(raw, fmt, position=source.position)
        decider.process(raw, None, source.headers(), source)
        if counter[0] % 500 == 0:
            decider.drain_changelog(Checkpoint(counter[0]))
            decider.commit(Checkpoint(counter[0], decider.changelog_next))

    atheris.instrument_all()
    atheris.Setup(argv, target)
    atheris.Fuzz()


if __name__ == "__main__":
    import sys

    atheris_main(sys.argv)
