"""Generate ``ndd_stream/data/sample_feed.jsonl``, the news feed bundled for ``ndd-stream demo``.

The feed's content is data, in ``tools/sample_feed.yaml``: the stories (each a few
versions of one text and where and when each version was published, with a note saying
why), and the items published once. This script turns it into JSON lines the way real
channels write them (their own field names, identity schemes, time formats, HTML or plain
text) and adds the malformed lines a real crawler produces. Every story is fictional and
written for this feed.

Why generated instead of hand-edited: the feed must show every way a news item gets
republished (agency updates and repeats, corrections, re-titles, HTML wrapping, aggregator
re-posts, syndication to other channels, a re-post after the 24 h window), and a reviewer
should read *why* each line is there. Every line carries an ``x_note`` saying so and what
the default scope (channel) decides. The variants are calibrated with margins, so the
decisions are the same for any threshold from 0.2 to 0.8 and for both the ``tags`` and
``main`` extraction: an update adds or changes a sentence of at least 15 words (the
``main`` prose filter drops shorter lines) and stays above doc_q 0.8, and a text meant to
be unique shares less than 0.2 with its story. tests/test_sample_feed.py holds every note
to that.

The output is deterministic (fixed seed, fixed base time, no wall clock): the test suite
regenerates the feed and compares it byte for byte with the committed file.

    python tools/make_sample_feed.py            # (re)write the bundled feed
    python tools/make_sample_feed.py --check    # exit 1 if the committed feed is stale
    python tools/make_sample_feed.py -o FILE    # write elsewhere
"""

from __future__ import annotations

import argparse
import html
import json
import random
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

SEED = 20240311
#: Monday 11 March 2024, 05:00 UTC: hour 0 of the feed; the feed spans about 30 hours.
BASE = datetime(2024, 3, 11, 5, 0, tzinfo=UTC)
CET = timezone(timedelta(hours=1))
ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "sample_feed.yaml"
DEFAULT_OUTPUT = ROOT / "ndd_stream" / "data" / "sample_feed.jsonl"

CHANNELS = ("reuters-wire", "ap-feed", "ansa-en", "dpa-intl", "bbc-rss", "aggregator-x")


# --- versions of a story and how they are edited ---------------------------------------
@dataclass(frozen=True)
class Version:
    """One wording of a story: what a channel puts in its title and body."""

    title: str
    paras: tuple[str, ...]
    lang: str = "en"

    def edit(
        self,
        *,
        title: str | None = None,
        add: Sequence[str] = (),
        drop: Sequence[int] = (),
        subs: Sequence[Sequence[str]] = (),
    ) -> Version:
        """A new version: paragraphs dropped (by index), added at the end, text substituted."""
        paras = [p for i, p in enumerate(self.paras) if i not in set(drop)]
        paras.extend(add)
        new_title = self.title if title is None else title
        for old, new in subs:
            if not any(old in p for p in paras) and old not in new_title:
                raise ValueError(f"substitution {old!r} matches nothing")
            paras = [p.replace(old, new) for p in paras]
            new_title = new_title.replace(old, new)
        return replace(self, title=new_title, paras=tuple(paras))


@dataclass(frozen=True)
class Pub:
    """One publication of a version on a channel at ``hour`` (hours after BASE)."""

    channel: str
    hour: float
    version: Version
    html: bool | None = None  # None: the channel's habit
    text_field: str | None = None  # None: the channel's habit
    note: str = ""  # why this line is in the feed (kept in the item as "x_note")


@dataclass
class Feed:
    """Collects publications and malformed lines, then renders them in event-time order."""

    rng: random.Random
    pubs: list[Pub] = field(default_factory=list)
    broken: list[tuple[float, bytes]] = field(default_factory=list)

    def pub(self, channel: str, hour: float, version: Version, note: str, **kw: Any) -> None:
        if channel not in CHANNELS:
            raise ValueError(f"unknown channel {channel!r}")
        self.pubs.append(Pub(channel, hour, version, note=note, **kw))


# --- the data -----------------------------------------------------------------------------
def story_versions(story: dict[str, Any]) -> dict[str, Version]:
    """A story's versions by name: written out (``title``, ``paras``, ``lang``) or made
    ``from`` an earlier one by an edit (``title``, ``add``, ``drop``, ``subs``)."""
    versions: dict[str, Version] = {}
    for name, spec in story["versions"].items():
        spec = dict(spec)
        if "from" in spec:
            versions[name] = versions[spec.pop("from")].edit(**spec)
        else:
            versions[name] = Version(spec["title"], tuple(spec["paras"]), spec.get("lang", "en"))
    return versions


def add_stories(feed: Feed, data: dict[str, Any]) -> None:
    """Stories in file order, each story's publications in file order (the order fixes the
    random choices, so it is part of the output)."""
    for story in data["stories"]:
        versions = story_versions(story)
        for p in story["pubs"]:
            extra = {k: p[k] for k in ("html", "text_field") if k in p}
            feed.pub(p["channel"], float(p["hour"]), versions[p["version"]], p["note"], **extra)
    for b in data["briefs"]:
        text = b["text"]
        lang = "de" if b["channel"] == "dpa-intl" and any(c in text for c in "äöüß") else "en"
        feed.pub(b["channel"], float(b["hour"]), Version(b["title"], (text,), lang=lang),
                 "published once (unique)")


# --- malformed lines ----------------------------------------------------------------------------
def add_broken(feed: Feed) -> None:
    """Lines a real crawler produces now and then; each must end up in the DLQ with a reason."""
    ts = _iso_z(BASE + timedelta(hours=3.2))
    feed.broken += [
        # not_json: a line cut off by a crashed writer
        (3.20, b'{"id": "RW20240311-09001", "channel": "reuters-wire", "title": "Valmora port '
               b'talks to resume", "timestamp": "' + ts.encode() + b'", "text": "Talks between '
               b'the Valmora port authority and'),
        # invalid_utf8: a Latin-1 encoded item ("Citt\xe0" is not UTF-8)
        (6.30, b'{"id": 2024031199001, "channel": "ansa-en", "title": "Citt\xe0 di Torreluce, '
               b'furto al museo", "timestamp": "2024-03-11T12:18:00+01:00", "text": "(ANSA) - '
               b'Un dipinto rinascimentale \xe8 stato rubato dal museo civico."}'),
        # missing_text: metadata only, neither a title nor a body
        (9.70, _line({"id": "ap-feed-0000ff01", "channel": "ap-feed",
                      "timestamp": _epoch(BASE + timedelta(hours=9.7)),
                      "url": "https://ap-feed.example/photos/gallery-0311",
                      "x_note": "malformed: no title, no text (missing_text)"})),
        # empty_text: an HTML body that is only a non-breaking space, and an empty title
        (13.90, _line({"id": "bbc-rss:news-90000001", "channel": "bbc-rss", "title": "",
                       "content": "<p>&nbsp;</p>",
                       "timestamp": _iso_ms(BASE + timedelta(hours=13.9)),
                       "x_note": "malformed: nothing left after extraction (empty_text)"})),
        # bad_timestamp: local wording instead of a time
        (18.20, _line({"id": "urn:newsml:dpa.com:20240311:240311-99-900001",
                       "channel": "dpa-intl", "title": "Hafenfest in Elbstadt abgesagt",
                       "body": "Das für das Wochenende geplante Hafenfest fällt wegen der "
                               "Bauarbeiten an der Hochbrücke aus.",
                       "published_at": "heute, 14:30 Uhr",
                       "x_note": "malformed: unparseable timestamp (bad_timestamp)"})),
        # not_object: a batch written as one JSON array
        (21.60, _line([{"id": "agg-batch-1", "channel": "aggregator-x",
                        "title": "Batch export", "body": "Two items in one array.",
                        "timestamp": _epoch(BASE + timedelta(hours=21.6))}])),
        # bad_field_type: the body is an object instead of text
        (26.00, _line({"id": "agg-0000ff02", "channel": "aggregator-x",
                       "title": "Weekend weather outlook",
                       "body": {"html": "<p>Sunny spells</p>", "lang": "en"},
                       "timestamp": _epoch(BASE + timedelta(hours=26.0)),
                       "x_note": "malformed: body is an object (bad_field_type)"})),
    ]


# --- rendering ---------------------------------------------------------------------------------
_ENTITIES = {"«": "&laquo;", "»": "&raquo;", "€": "&euro;", "£": "&pound;", "–": "&ndash;",
             "„": "&bdquo;", "“": "&ldquo;", "é": "&eacute;"}


def _iso_z(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _iso_ms(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _iso_cet(when: datetime) -> str:
    return when.astimezone(CET).isoformat(timespec="seconds")


def _epoch(when: datetime) -> int:
    return int(when.timestamp())


def _line(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def to_html(version: Version, channel: str, rng: random.Random) -> str:
    """The body as a web page fragment: paragraphs, a link, entities, sometimes a script."""
    paras = []
    for i, para in enumerate(version.paras):
        text = html.escape(para, quote=True)
        for char, entity in _ENTITIES.items():
            text = text.replace(char, entity)
        if i == 0:
            words = text.split(" ")
            k = rng.randrange(1, max(2, len(words) - 3))
            words[k] = f'<a href="https://{channel}.example/topics/{rng.randrange(10**6)}">' \
                       f"{words[k]}</a>"
            text = " ".join(words)
        paras.append(f"<p>{text}</p>")
    body = "\n".join(paras)
    if channel == "aggregator-x":
        tracker = rng.randrange(16**8)
        body = (f'<div class="article-body" data-track="{tracker:08x}">\n{body}\n'
                f"<script>window.aggx = window.aggx || []; aggx.push({{view: '{tracker:08x}'}});"
                "</script>\n</div>")
    return body


_HABITS: dict[str, tuple[str, bool]] = {
    # channel: (body field, HTML?)
    "reuters-wire": ("text", False),
    "ap-feed": ("text", False),
    "ansa-en": ("text", False),
    "dpa-intl": ("body", False),
    "bbc-rss": ("content", True),
    "aggregator-x": ("body", True),
}


class Ids:
    """Channel-specific identities, unique over the whole feed."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.seq: dict[str, int] = {}
        self.seen: set[object] = set()

    def next(self, channel: str, when: datetime) -> str | int:
        n = self.seq[channel] = self.seq.get(channel, 0) + 1
        day = when.strftime("%Y%m%d")
        ident: str | int
        if channel == "reuters-wire":
            ident = f"RW{day}-{n * 7 + 100:05d}"
        elif channel == "ap-feed":
            ident = f"ap-feed-{self.rng.randrange(16**8):08x}"
        elif channel == "ansa-en":
            ident = int(day) * 100000 + 1000 + n  # ANSA numbers its items
        elif channel == "dpa-intl":
            ident = f"urn:newsml:dpa.com:{day}:{day[2:]}-99-{self.rng.randrange(10**6):06d}"
        elif channel == "bbc-rss":
            section = self.rng.choice(("news", "world", "business", "sport"))
            ident = f"bbc-rss:{section}-{self.rng.randrange(10**7, 10**8)}"
        else:
            ident = f"agg-{self.rng.randrange(16**12):012x}"
        if ident in self.seen:
            return self.next(channel, when)
        self.seen.add(ident)
        return ident


def render_pub(pub: Pub, ids: Ids, rng: random.Random) -> bytes:
    """One publication as a JSON line, in its channel's field names and time format."""
    jitter = rng.randrange(0, 50)  # seconds: agencies do not publish on round minutes
    when = BASE + timedelta(hours=pub.hour, seconds=jitter)
    field_name, habit_html = _HABITS[pub.channel]
    field_name = pub.text_field or field_name
    as_html = habit_html if pub.html is None else pub.html
    body = to_html(pub.version, pub.channel, rng) if as_html else "\n\n".join(pub.version.paras)
    item: dict[str, Any] = {"id": ids.next(pub.channel, when), "channel": pub.channel,
                            "title": pub.version.title, field_name: body}
    if pub.channel == "reuters-wire":
        item["timestamp"] = _iso_z(when)
    elif pub.channel == "ap-feed":
        item["timestamp"] = _epoch(when)  # epoch seconds (integer)
    elif pub.channel == "ansa-en":
        item["timestamp"] = _iso_cet(when)  # local time with offset
    elif pub.channel == "dpa-intl":
        item["published_at"] = _iso_cet(when)
    elif pub.channel == "bbc-rss":
        item["timestamp"] = _iso_ms(when)
        item["url"] = f"https://bbc-rss.example/{item['id'].split(':', 1)[1]}"
    else:
        item["timestamp"] = f"{when.timestamp():.1f}"  # epoch seconds as a string
        item["source"] = rng.choice(("wire", "partner", "rss"))
    item["lang"] = pub.version.lang
    if pub.note:
        item["x_note"] = pub.note
    return _line(item)


def build_pubs(feed: Feed, data_path: Path = DATA) -> None:
    add_stories(feed, yaml.safe_load(data_path.read_text(encoding="utf-8")))
    add_broken(feed)


def build_feed(seed: int = SEED, data_path: Path = DATA) -> bytes:
    """The whole feed: publications and malformed lines in event-time order, one per line."""
    rng = random.Random(seed)
    feed = Feed(rng)
    build_pubs(feed, data_path)
    _check_hours(feed.pubs)
    ids = Ids(rng)
    lines: list[tuple[float, int, bytes]] = []
    for n, pub in enumerate(feed.pubs):
        lines.append((pub.hour, n, render_pub(pub, ids, rng)))
    for n, (hour, raw) in enumerate(feed.broken):
        lines.append((hour, len(feed.pubs) + n, raw))
    lines.sort(key=lambda t: (t[0], t[1]))
    return b"".join(raw + b"\n" for _, _, raw in lines)


def _check_hours(pubs: Iterable[Pub]) -> None:
    for pub in pubs:
        if not 0 <= pub.hour <= 30:
            raise ValueError(f"{pub.version.title!r} at hour {pub.hour}: outside the 30 h span")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if the output differs from the generator")
    args = parser.parse_args(argv)
    data = build_feed()
    if args.check:
        current = args.output.read_bytes() if args.output.exists() else b""
        if current != data:
            print(f"{args.output} is stale: run python tools/make_sample_feed.py", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date ({len(data.splitlines())} lines)")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(data)
    print(f"wrote {args.output}: {len(data.splitlines())} lines, {len(data):,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
