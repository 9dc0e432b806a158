"""A timed item stream for the labelled-pairs evaluation: Reuters-21578 SGML or JSONL.

* a folder of ``*.sgm`` files (the Reuters-21578 distribution, latin-1): one item per
  ``<REUTERS NEWID=...>`` with identity ``reuters-NEWID``, event time from ``<DATE>``
  (e.g. ``26-FEB-1987 15:01:01.79``, taken as UTC), ``<TITLE>`` and ``<BODY>``;
* a ``.jsonl`` file of items as the stream reads them (``id``, ``title``, ``text``,
  ``timestamp``: the fields of ``ndd-stream dedup``).

Items whose body is shorter than ``min_body`` characters are left out (the Reuters pairs
were drawn from bodies of at least 200 characters). The stream is sorted by event time,
stably (file order breaks ties).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

from ndd_stream.core.items import parse_timestamp
from ndd_stream.files import read_utf8

_REUTERS = re.compile(r"<REUTERS\b([^>]*)>(.*?)</REUTERS>", re.S)
_NEWID = re.compile(r'NEWID="(\d+)"')
_DATE = re.compile(r"<DATE>\s*(.*?)\s*</DATE>", re.S)
_TITLE = re.compile(r"<TITLE>(.*?)</TITLE>", re.S)
_DATE_VALUE = re.compile(r"(\d{1,2}-[A-Za-z]{3}-\d{4} \d{1,2}:\d{2}:\d{2}(?:\.\d+)?)")
_BODY = re.compile(r"<BODY>(.*?)</BODY>", re.S)


@dataclass(frozen=True, slots=True)
class StreamItem:
    identity: str
    timestamp: float
    title: str
    body: str


def reuters_date(value: str) -> float | None:
    """``26-FEB-1987 15:01:01.79`` as epoch seconds (UTC); None when unreadable."""
    match = _DATE_VALUE.match(value.strip())  # some dates carry control codes after them
    if match is None:
        return None
    value = match.group(1)
    for fmt in ("%d-%b-%Y %H:%M:%S.%f", "%d-%b-%Y %H:%M:%S"):
        try:
            return datetime.strptime(value, fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    return None


def read_sgml(text: str) -> list[StreamItem]:
    """The items of one Reuters-21578 SGML file that have a date and a body."""
    out: list[StreamItem] = []
    for match in _REUTERS.finditer(text):
        newid, date = _NEWID.search(match.group(1)), _DATE.search(match.group(2))
        body = _BODY.search(match.group(2))
        if newid is None or date is None or body is None:
            continue
        ts = reuters_date(date.group(1))
        if ts is None:
            continue
        title = _TITLE.search(match.group(2))
        out.append(StreamItem(f"reuters-{newid.group(1)}", ts,
                              html.unescape(title.group(1)).strip() if title else "",
                              html.unescape(body.group(1))))
    return out


def read_jsonl(path: Path) -> list[StreamItem]:
    out: list[StreamItem] = []
    for number, line in enumerate(read_utf8(path).splitlines(), start=1):
        if not line.strip():
            continue
        obj = orjson.loads(line)
        ts = parse_timestamp(obj.get("timestamp"))
        if not isinstance(obj, dict) or ts is None:
            raise ValueError(f"{path.name}:{number}: an object with a timestamp is needed")
        out.append(StreamItem(str(obj.get("id", f"{path.name}:{number}")), ts,
                              str(obj.get("title") or ""), str(obj.get("text") or "")))
    return out


def load_stream(path: Path, min_body: int = 200) -> list[StreamItem]:
    """Items of ``path`` (SGML folder or JSONL file) with long enough bodies, by time."""
    if path.is_dir():
        files = sorted(path.glob("*.sgm"))
        if not files:
            raise FileNotFoundError(f"no *.sgm files in {path}")
        items = [i for f in files for i in read_sgml(f.read_text(encoding="latin-1"))]
    elif path.is_file():
        items = read_jsonl(path)
    else:
        raise FileNotFoundError(f"stream not found: {path}")
    kept = [i for i in items if len(i.body.strip()) >= min_body]
    return sorted(kept, key=lambda i: i.timestamp)
