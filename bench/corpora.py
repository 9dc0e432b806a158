"""Two more benchmark workloads: real newswire (Reuters-21578) and repetitive text.

* ``reuters``: the Reuters-21578 items of ``../shared/data/reuters21578`` (next to the
  project, never part of it) with bodies of at least 200 characters, title + body, in
  date order, their timestamps *squeezed into one day* (item i of n at start + i * 86400 / n)
  and one global scope, so the 24-hour window ends up holding every item (~17k): the
  short-wire case, where a decision's fixed cost matters more than its count.
* ``repetitive``: ~5 KB items built from *shared passages*: a pool of passages (runs of
  3-8 consecutive sentences of real text when Reuters is present, else of the synthetic
  workload's sentences), each item a random sequence of passages with a Zipf popularity,
  so most items share long stretches with many others, as syndicated paragraphs,
  boilerplate and quoted statements do. Deterministic from a seed.

When the corpus is absent the Reuters workload is unavailable and the repetitive one falls
back to synthetic sentences; both say so (:func:`source_note`).
"""

from __future__ import annotations

import html
import os
import random
import re
from collections.abc import Iterator
from pathlib import Path

from bench.workload import NewsStream, WorkloadConfig
from ndd_stream.core.document import Document

ROOT = Path(__file__).resolve().parent.parent


def _shared_data() -> Path:
    """NDD_SHARED_DATA, else the first ``shared/data`` beside the project or its parent
    (a git worktree sits one level deeper than the main checkout)."""
    setting = os.environ.get("NDD_SHARED_DATA")
    if setting:
        return Path(setting)
    for up in (ROOT.parent, ROOT.parent.parent):
        if (up / "shared" / "data").is_dir():
            return up / "shared" / "data"
    return ROOT.parent / "shared" / "data"


REUTERS = _shared_data() / "reuters21578"
DAY = 86_400.0
START = 1_330_560_000.0  # as the synthetic workload: 2012-03-01 00:00 UTC

_ITEM = re.compile(r"<REUTERS\b([^>]*)>(.*?)</REUTERS>", re.S)
_NEWID = re.compile(r'NEWID="(\d+)"')
_DATE = re.compile(r"<DATE>\s*(\d{1,2})-([A-Za-z]{3})-(\d{4}) (\d{1,2}):(\d{2}):(\d{2})")
_TITLE = re.compile(r"<TITLE>(.*?)</TITLE>", re.S)
_BODY = re.compile(r"<BODY>(.*?)</BODY>", re.S)
_MONTH = {m: i for i, m in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"))}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"])")


def reuters_available(path: Path = REUTERS) -> bool:
    return path.is_dir() and any(path.glob("*.sgm"))


def source_note(workload: str, path: Path = REUTERS) -> str:
    """One line saying where a workload's text came from (printed and reported)."""
    if workload == "news":
        return "synthetic news workload (bench/workload.py)"
    if reuters_available(path):
        return f"{workload}: Reuters-21578 from {path}"
    if workload == "reuters":
        return f"reuters: UNAVAILABLE ({path} not found); the workload is skipped"
    return f"repetitive: {path} not found, passages of synthetic sentences instead"


def reuters_texts(path: Path = REUTERS, min_body: int = 200) -> list[tuple[str, str]]:
    """(identity, title + body) of every item with a body of ``min_body``+ characters,
    sorted by date (stable: file order breaks ties).

    A second reader beside ``ndd_stream.eval.stream_items`` on purpose: ``bench.compare``
    runs this harness over older revisions' ``ndd_stream``, which lack that module."""
    dated: list[tuple[tuple[int, ...], str, str]] = []
    number = 0
    for sgm in sorted(path.glob("*.sgm")):
        for match in _ITEM.finditer(sgm.read_text(encoding="latin-1")):
            number += 1
            newid = _NEWID.search(match.group(1))
            raw = match.group(2)
            body, date = _BODY.search(raw), _DATE.search(raw)
            if body is None or date is None:
                continue
            text = html.unescape(body.group(1))
            if len(text.strip()) < min_body:
                continue
            d, mon, y, hh, mm, ss = date.groups()
            key = (int(y), _MONTH.get(mon.upper(), 0), int(d), int(hh), int(mm), int(ss), number)
            title = _TITLE.search(raw)
            head = html.unescape(title.group(1)).strip() if title else ""
            identity = f"reuters-{newid.group(1) if newid else number}"
            dated.append((key, identity, f"{head}\n{text}" if head else text))
    dated.sort(key=lambda t: t[0])
    return [(identity, text) for _, identity, text in dated]


def reuters_stream(path: Path = REUTERS) -> list[Document]:
    """The Reuters items squeezed into one day, one global scope (see the module doc)."""
    texts = reuters_texts(path)
    step = DAY / max(1, len(texts))
    return [Document(identity, "global", "reuters", START + i * step, text)
            for i, (identity, text) in enumerate(texts)]


class RepetitiveStream:
    """Iterator of ~5 KB :class:`Document` made of shared passages (module doc)."""

    def __init__(self, spacing: float, seed: int = 7, passages: int = 4_000,
                 target_bytes: int = 5_000, path: Path = REUTERS) -> None:
        self._rng = random.Random(seed)
        sentences = self._sentences(path)
        rng = self._rng
        self._passages: list[str] = []
        for _ in range(passages):
            n = rng.randrange(3, 9)
            at = rng.randrange(max(1, len(sentences) - n))
            self._passages.append(" ".join(sentences[at:at + n]))
        weights = [1.0 / (rank + 1) ** 0.9 for rank in range(passages)]
        total = sum(weights)
        self._cum: list[float] = []
        acc = 0.0
        for w in weights:
            acc += w / total
            self._cum.append(acc)
        self._spacing = spacing
        self._target = target_bytes
        self._count = 0

    def _sentences(self, path: Path) -> list[str]:
        if reuters_available(path):
            out: list[str] = []
            for _, text in reuters_texts(path)[:6_000]:
                flat = " ".join(text.split())
                out.extend(s for s in _SENTENCE_END.split(flat) if len(s) > 30)
            return out
        synthetic = NewsStream(WorkloadConfig(seed=11, duplicate_rate=0.0))
        return [s for doc in synthetic.take(1_500) for s in doc.text.split("\n", 1)[1]
                .split(". ") if len(s) > 30]

    def _passage(self) -> str:
        u = self._rng.random()
        lo, hi = 0, len(self._cum) - 1
        while lo < hi:  # first cumulative weight >= u
            mid = (lo + hi) // 2
            if self._cum[mid] < u:
                lo = mid + 1
            else:
                hi = mid
        return self._passages[lo]

    def __iter__(self) -> Iterator[Document]:
        return self

    def __next__(self) -> Document:
        parts: list[str] = []
        size = int(self._target * (0.8 + 0.4 * self._rng.random()))
        total = 0
        while total < size:
            p = self._passage()
            parts.append(p)
            total += len(p) + 1
        n = self._count
        self._count += 1
        return Document(f"rep-{n:08d}", "global", "wire", START + n * self._spacing,
                        "\n".join(parts))

    def take(self, n: int) -> list[Document]:
        return [next(self) for _ in range(n)]
