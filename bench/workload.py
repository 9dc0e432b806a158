"""A deterministic stream of ~5 KB news-like English items with ~10% near duplicates.

Why synthetic: the benchmark must run anywhere without a corpus, be reproducible from a
seed, and scale to 200k+ items. What matters for the detector's cost is realistic text
statistics, so the generator mimics them:

* words follow a Zipf law (exponent ~1.05) over a 40k-word vocabulary whose head is
  real English (function words and common news words) and whose tail is built from
  syllables, so q-gram frequencies are skewed like real news;
* items are a title plus sentences of 8-32 words, with named entities (people, places,
  organisations) drawn per *story*, numbers (counts, percentages, money, years, dates),
  and punctuation;
* several channels (agencies); event time advances steadily (``spacing`` seconds);
* ~10% of items are edits of a recent item of another or the same channel: replaced or
  inserted sentences, a new title, a cut tail, or (rarely) an exact copy.

Generation is cheap next to detection (~0.2 ms per item) and keeps only a bounded ring of
recent items, so memory does not grow with the stream.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ndd_stream.core.document import Document

_HEAD_TEXT = """
the of and to a in that is for on with as was by at he it from said his be are has have
had an its not but were which this they will their who been more after also or one two new
would year about first last up than other when over into some out people government state
president minister police court city country police officials told week day percent million
billion group company party report could there may can three between under since before
during against world national public health economic market security military support
including while where second four years months today yesterday time home news official
international according added between across around local leader leaders election vote
foreign trade war peace talks agreement deal plan law members council union bank prices
workers school hospital children women men family town region capital north south east west
central forces attack killed injured fire water energy oil gas power climate weather storm
rain flood season match team game win won lost coach players league cup final record
statement spokesman agency meeting summit crisis prime chief director general secretary
committee parliament senate opposition coalition budget tax growth inflation rates interest
investors shares stock exchange index sales profit quarter data study research university
police arrested charged trial judge prison case investigation evidence victims rescue
emergency service services system program project development million thousands hundred
"""
_HEAD = _HEAD_TEXT.split()

_SYLLABLES = (  # noqa: SIM905 - prose reads better than a list
    "ba be bi bo bu ca co cu da de di do du fa fe fi fo ga ge go gu ha he hi ho ja jo ka ke "
    "ki ko la le li lo lu ma me mi mo mu na ne ni no nu pa pe pi po pu ra re ri ro ru sa se "
    "si so su ta te ti to tu va ve vi vo za ze zo tion ment ing er ed al ly ist ous ble ness "
    "str pr tr gr br cl pl st sh ch th wh an en in on un ar or ir ur"
).split()

_CHANNELS = ("ansa", "reuters", "afp", "ap", "dpa", "efe", "bbc", "xinhua")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")


@dataclass(frozen=True)
class WorkloadConfig:
    seed: int = 20120301
    target_bytes: int = 5_000  # approximate size of an item's text
    spacing: float = 1.0  # event-time seconds between consecutive items
    start: float = 1_330_560_000.0  # 2012-03-01 00:00 UTC, as in the paper's Fig. 3
    duplicate_rate: float = 0.10  # share of items that are edits of a recent item
    exact_share: float = 0.15  # share of those duplicates that are exact copies
    recent: int = 2_000  # how far back (items) a duplicate may reach
    scope: str = "global"  # every item in one comparison scope: the window holds them all
    vocabulary: int = 40_000
    zipf_s: float = 1.1


@dataclass
class _Item:
    title: list[str]
    sentences: list[str]
    channel: str


class NewsStream:
    """Iterator of :class:`Document`; the same config always yields the same stream."""

    def __init__(self, config: WorkloadConfig | None = None) -> None:
        self.config = c = config or WorkloadConfig()
        self._np = np.random.default_rng(c.seed)  # bulk draws (word ids)
        self._rng = random.Random(c.seed)  # scalar draws: much cheaper per call
        self._pool: list[str] = []
        self._vocab = np.array(self._build_vocabulary(c.vocabulary), dtype=object)
        ranks = np.arange(1, c.vocabulary + 1, dtype=np.float64)
        weights = 1.0 / (ranks + 2.7) ** c.zipf_s  # Zipf-Mandelbrot
        self._cdf = np.cumsum(weights) / weights.sum()
        self._people = [self._name(2) for _ in range(3_000)]
        self._places = [self._name(1) for _ in range(1_500)]
        self._orgs = [self._name(1) + " " + s for s in
                      ("Group", "Bank", "Party", "Council", "Ministry", "Union", "Corp")
                      for _ in range(200)]
        self._ring: list[_Item | None] = [None] * c.recent
        self._count = 0
        self.duplicates = 0

    # -- vocabulary ---------------------------------------------------------------------

    def _build_vocabulary(self, size: int) -> list[str]:
        seen: set[str] = set()
        words: list[str] = []
        for w in _HEAD:
            if w not in seen:
                seen.add(w)
                words.append(w)
        while len(words) < size:
            k = self._rng.randint(2, 4)
            w = "".join(self._rng.choices(_SYLLABLES, k=k))
            if w not in seen:
                seen.add(w)
                words.append(w)
        return words

    def _name(self, parts: int) -> str:
        out = []
        for _ in range(parts):
            k = self._rng.randint(2, 3)
            out.append("".join(self._rng.choices(_SYLLABLES, k=k)).title())
        return " ".join(out)

    # -- text ---------------------------------------------------------------------------

    def _words(self, n: int) -> list[str]:
        """``n`` Zipf-distributed words, drawn in bulk (one numpy call per ~1000 words)."""
        pool = self._pool
        if len(pool) < n:
            ids = np.searchsorted(self._cdf, self._np.random(max(1024, n)))
            pool.extend(self._vocab[np.minimum(ids, self._vocab.size - 1)].tolist())
        out = pool[-n:]
        del pool[-n:]
        return out

    def _number(self) -> str:
        r = self._rng
        kind = r.randrange(6)
        if kind == 0:
            return str(r.randrange(2, 999))
        if kind == 1:
            return f"{r.random() * 40:.1f}%"
        if kind == 2:
            return f"${r.randrange(1, 900)}.{r.randrange(10)} million"
        if kind == 3:
            return str(r.randrange(1990, 2013))
        if kind == 4:
            return f"{r.choice(_MONTHS)} {r.randrange(1, 29)}"
        return f"{r.randrange(1, 99)},{r.randrange(1000):03d}"

    def _sentence(self, entities: list[str]) -> str:
        r = self._rng
        words = self._words(r.randrange(8, 33))
        for _ in range(r.randrange(3)):
            words.insert(r.randrange(len(words) + 1), r.choice(entities))
        if r.random() < 0.5:
            words.insert(r.randrange(len(words) + 1), self._number())
        if r.random() < 0.3:
            words[r.randrange(len(words) - 1)] += ","
        text = " ".join(words)
        end = "." if r.random() < 0.92 else ("?" if r.random() < 0.5 else "!")
        if r.random() < 0.15:
            return f'"{text[0].upper()}{text[1:]}{end}" said {entities[0]}.'
        return f"{text[0].upper()}{text[1:]}{end}"

    def _entities(self) -> list[str]:
        r = self._rng
        return r.choices(self._people, k=3) + r.choices(self._places, k=2) + r.choices(
            self._orgs, k=2
        )

    def _fresh(self) -> _Item:
        r = self._rng
        entities = self._entities()
        size = int(self.config.target_bytes * (0.7 + 0.6 * r.random()))
        sentences: list[str] = []
        total = 0
        while total < size:
            s = self._sentence(entities)
            sentences.append(s)
            total += len(s) + 1
        title = self._words(r.randrange(5, 12))
        title[0] = entities[r.randrange(3)]
        return _Item(title, sentences, r.choice(_CHANNELS))

    def _edit(self, src: _Item) -> _Item:
        """A near duplicate of ``src``: the kinds of change agencies make to a story."""
        r = self._rng
        channel = r.choice(_CHANNELS)
        if r.random() < self.config.exact_share:
            return _Item(list(src.title), list(src.sentences), channel)
        entities = src.title[:1] + self._entities()[:4]
        sentences = list(src.sentences)
        title = list(src.title)
        for _ in range(r.randrange(1, 4)):
            op = r.randrange(5)
            if op == 0 and len(sentences) > 2:  # rewrite a sentence
                sentences[r.randrange(len(sentences))] = self._sentence(entities)
            elif op == 1:  # insert a sentence (an update, a quote)
                sentences.insert(r.randrange(len(sentences) + 1), self._sentence(entities))
            elif op == 2:  # re-title
                title = self._words(r.randrange(5, 12))
                title[0] = src.title[0]
            elif op == 3 and len(sentences) > 4:  # cut the tail
                del sentences[-r.randrange(1, max(2, len(sentences) // 6)):]
            else:  # drop one sentence
                if len(sentences) > 2:
                    del sentences[r.randrange(len(sentences))]
        return _Item(title, sentences, channel)

    # -- stream -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Document]:
        return self

    def __next__(self) -> Document:
        c = self.config
        r = self._rng
        n = self._count
        item: _Item | None = None
        if n > 10 and r.random() < c.duplicate_rate:
            src = self._ring[r.randrange(min(n, c.recent))]
            if src is not None:
                item = self._edit(src)
                self.duplicates += 1
        if item is None:
            item = self._fresh()
        self._ring[n % c.recent] = item
        self._count += 1
        title = " ".join(item.title)
        text = title[0].upper() + title[1:] + "\n" + " ".join(item.sentences)
        return Document(
            identity=f"item-{n:08d}",
            scope=c.scope,
            channel=item.channel,
            timestamp=c.start + n * c.spacing,
            text=text,
        )

    def take(self, n: int) -> list[Document]:
        return [next(self) for _ in range(n)]
