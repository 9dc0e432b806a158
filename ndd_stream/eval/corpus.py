"""Labelled corpora: a folder of cluster folders, or JSONL items with a cluster label.

Folder layout (as the SpotSigs Gold Set): ``CORPUS/<cluster>/<file>``; every file in one
folder is a near-duplicate of every other, files in different folders are not. Files placed
directly in ``CORPUS/`` are singletons (distractors). JSONL: one object per line with a text
field and a cluster field; items without a cluster are singletons.

Nothing here raises on bad input: unreadable, empty, binary or undecodable files and broken
JSON lines are collected in :attr:`Corpus.skipped` so that the report can list them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ndd_stream.eval.decoding import decode_bytes
from ndd_stream.files import read_bytes

_HTML_SUFFIXES = {".htm", ".html", ".xhtml", ".shtml", ".php", ".asp", ".aspx", ".jsp"}
_HTML_SNIFF = re.compile(r"<\s*(?:!doctype\s+html|html|head|body|title|div|p|table)\b", re.I)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.I | re.S)
_TAG = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Item:
    """One labelled document as read from the corpus (content not yet extracted)."""

    identity: str
    cluster: str
    content: str
    is_html: bool
    source: str
    timestamp: float | None = None
    title: str = ""
    encoding: str | None = None
    title_from_field: bool = False  # a JSONL title field (the stream judges title + body)


@dataclass(frozen=True)
class Skipped:
    """A file or line that could not be used, and why."""

    source: str
    reason: str


@dataclass
class Corpus:
    """The usable items of a corpus plus what was skipped."""

    name: str
    items: list[Item] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def clusters(self) -> dict[str, list[Item]]:
        groups: dict[str, list[Item]] = {}
        for item in self.items:
            groups.setdefault(item.cluster, []).append(item)
        return groups


@dataclass(frozen=True)
class JsonlFields:
    """Field names of a JSONL corpus; ``html`` says whether text holds HTML (None: sniff)."""

    text: str = "text"
    cluster: str = "cluster"
    identity: str = "id"
    timestamp: str | None = "timestamp"
    title: str | None = "title"
    html: bool | None = None


def is_html(text: str, suffix: str = "") -> bool:
    """HTML by file suffix, else by a tag near the start of the text."""
    return suffix.lower() in _HTML_SUFFIXES or bool(_HTML_SNIFF.search(text[:4096]))


def html_title(html: str) -> str:
    """Text of the first ``<title>``, whitespace-collapsed (cheap regex; no parse needed)."""
    match = _TITLE.search(html[:200_000])
    if not match:
        return ""
    import html as html_module

    return _SPACE.sub(" ", html_module.unescape(_TAG.sub(" ", match.group(1)))).strip()


def _text_title(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return _SPACE.sub(" ", line).strip()[:300]
    return ""


def load_corpus(path: Path, fields: JsonlFields | None = None) -> Corpus:
    """Load a cluster-folder corpus or a ``.jsonl`` file, whichever ``path`` is."""
    if path.is_dir():
        return load_folder_corpus(path)
    if path.is_file():
        return load_jsonl_corpus(path, fields or JsonlFields())
    raise FileNotFoundError(f"corpus not found: {path}")


def _files(folder: Path) -> Iterator[Path]:
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or (entry.is_symlink() and not entry.exists()):
            continue
        if entry.is_file():
            yield entry


def load_folder_corpus(root: Path) -> Corpus:
    """Every sub-folder is a cluster; loose files in ``root`` are singleton clusters."""
    corpus = Corpus(name=root.name)
    for entry in sorted(root.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            for file in _files(entry):
                _add_file(corpus, root, file, cluster=entry.name)
        elif entry.is_file():
            _add_file(corpus, root, entry, cluster=f"singleton:{entry.name}")
    return corpus


def _add_file(corpus: Corpus, root: Path, file: Path, cluster: str) -> None:
    source = str(file.relative_to(root))
    try:
        data = file.read_bytes()
    except OSError as exc:
        corpus.skipped.append(Skipped(source, f"unreadable: {exc.strerror or exc}"))
        return
    decoded = decode_bytes(data)
    if decoded.text is None:
        corpus.skipped.append(Skipped(source, decoded.problem or "undecodable"))
        return
    html = is_html(decoded.text, file.suffix)
    title = html_title(decoded.text) if html else _text_title(decoded.text)
    corpus.items.append(
        Item(
            identity=source,
            cluster=cluster,
            content=decoded.text,
            is_html=html,
            source=source,
            title=title,
            encoding=decoded.encoding,
        )
    )


def load_jsonl_corpus(path: Path, fields: JsonlFields) -> Corpus:
    """One JSON object per line; broken lines and items without text are skipped."""
    corpus = Corpus(name=path.stem)
    decoded = decode_bytes(read_bytes(path))
    if decoded.text is None:
        corpus.skipped.append(Skipped(path.name, decoded.problem or "undecodable"))
        return corpus
    seen: set[str] = set()
    for number, line in enumerate(decoded.text.splitlines(), start=1):
        if not line.strip():
            continue
        source = f"{path.name}:{number}"
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            corpus.skipped.append(Skipped(source, f"invalid JSON: {exc}"))
            continue
        if not isinstance(record, dict):
            corpus.skipped.append(Skipped(source, "not a JSON object"))
            continue
        item = _jsonl_item(record, fields, source)
        if isinstance(item, Skipped):
            corpus.skipped.append(item)
            continue
        if item.identity in seen:
            corpus.skipped.append(Skipped(source, f"duplicate id {item.identity!r}"))
            continue
        seen.add(item.identity)
        corpus.items.append(item)
    return corpus


def _jsonl_item(record: dict[str, object], fields: JsonlFields, source: str) -> Item | Skipped:
    text = record.get(fields.text)
    if not isinstance(text, str) or not text.strip():
        return Skipped(source, f"missing or empty text field {fields.text!r}")
    identity = str(record.get(fields.identity, source))
    label = record.get(fields.cluster)
    cluster = f"singleton:{identity}" if label is None or label == "" else str(label)
    timestamp: float | None = None
    if fields.timestamp and fields.timestamp in record:
        timestamp = _timestamp(record[fields.timestamp])
        if timestamp is None:
            return Skipped(source, f"unreadable timestamp {record[fields.timestamp]!r}")
    html = fields.html if fields.html is not None else is_html(text)
    raw_title = record.get(fields.title) if fields.title else None
    from_field = isinstance(raw_title, str) and bool(raw_title.strip())
    if isinstance(raw_title, str) and from_field:
        title = raw_title.strip()
    else:
        title = html_title(text) if html else _text_title(text)
    return Item(identity, cluster, text, html, source, timestamp, title, "utf-8",
                title_from_field=from_field)


def _timestamp(value: object) -> float | None:
    """Epoch seconds (number) or an ISO 8601 string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        from datetime import UTC, datetime

        try:
            stamp = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            try:
                return float(value)
            except ValueError:
                return None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        return stamp.timestamp()
    return None
