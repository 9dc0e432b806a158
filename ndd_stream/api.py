"""The detector as a Python library: what ``from ndd_stream import ...`` gives (docs/API.md).

A :class:`Filter` holds one detector and its window. It parses items with the same
functions as ``ndd-stream dedup`` and the worker (``core.items``) and decides them with the
same :class:`~ndd_stream.core.detector.Detector`, built from the same settings, so its
decisions are theirs (tests/test_api.py compares every field with ``dedup``'s).
:meth:`Filter.save` writes the window as the state records the detector persists anyway
(``state.rocks``, the RocksDB store's layout) and :meth:`Filter.load` replays them with
``Detector.restore``, the worker's recovery path.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ndd_stream import ENGINE_VERSION
from ndd_stream.core.detector import (
    BITMAP_BITS_MAX,
    BITMAP_BITS_MIN,
    DEFAULT_THRESHOLD,
    INDEX_KINDS,
    NOVELTY_MODES,
    Detector,
    DetectorConfig,
    IndexKind,
    NoveltyMode,
)
from ndd_stream.core.document import Decision as CoreDecision
from ndd_stream.core.document import Document, Policy, Status
from ndd_stream.core.extract import (
    DEFAULT_EXTRACT,
    DEFAULT_MAX_HTML_DEPTH,
    EXTRACT_MODES,
    ExtractMode,
    looks_like_markup,
)
from ndd_stream.core.items import Invalid, ItemFormat, parse_item, parse_object
from ndd_stream.core.kernels import DEFAULT_DENSE_FRACTION, available_cores
from ndd_stream.core.normalize import normal_form
from ndd_stream.core.novelty import figures
from ndd_stream.core.qgrams import signature
from ndd_stream.core.similarity import intersection_size
from ndd_stream.core.store import StoredDocument
from ndd_stream.core.stories import KEEP_POLICIES, KeepPolicy
from ndd_stream.core.verdict import conclude
from ndd_stream.core.window import WindowDoc
from ndd_stream.files import regular_file

__all__ = ["Decision", "Filter", "InvalidItem", "Similarity", "Story", "similarity", "stories"]

_StatusName = Literal["unique", "near_duplicate", "exact_duplicate", "invalid"]
_OnInvalid = Literal["raise", "return"]
_Item = Mapping[str, Any] | bytes | bytearray | memoryview | str

_ON_INVALID: tuple[_OnInvalid, ...] = ("raise", "return")


class InvalidItem(ValueError):
    """An item the filter rejects, as ``ndd-stream dedup`` and the worker's DLQ do.

    ``reason`` is one of ``core.items.REASONS`` (``not_json``, ``missing_text``,
    ``bad_timestamp``, ...), ``detail`` says what was wrong, ``line`` is the item's number
    in what the filter was given."""

    def __init__(self, reason: str, detail: str, line: int | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.line = line


class Decision:
    """The verdict on one item: ``status``, ``match_id``, ``score``, :meth:`explain`.

    ``line`` is the item's number (from 1) among everything its filter was given (a file's
    line number when it reads a file's lines); ``as_dict()`` is the record
    ``ndd-stream dedup`` writes for the item."""

    __slots__ = ("_config", "_core", "_invalid", "line")

    def __init__(self, core: CoreDecision | None, line: int, config: DetectorConfig,
                 invalid: Invalid | None = None) -> None:
        self._core = core
        self._invalid = invalid
        self._config = config
        self.line = line

    @property
    def status(self) -> _StatusName:
        """``unique``, ``near_duplicate``, ``exact_duplicate``, or ``invalid`` (only from
        ``on_invalid="return"``)."""
        core = self._core
        return "invalid" if core is None else core.status.value

    @property
    def identity(self) -> str | None:
        """The item's id (its ``line:N`` position when it has none); None when invalid."""
        return None if self._core is None else self._core.identity

    @property
    def score(self) -> float:
        """doc_q with ``match_id``: 1.0 for an exact duplicate; 0.0 without a match."""
        return 0.0 if self._core is None else self._core.similarity

    @property
    def match_id(self) -> str | None:
        """The earlier item ``score`` is measured against: the one duplicated or, for a new
        report (``novelty`` set), the one it resembles; None without a match."""
        core = self._core
        if core is None:
            return None
        if core.duplicate_of is not None:
            return core.duplicate_of
        return core.novel.resembles if core.novel is not None else None

    @property
    def is_duplicate(self) -> bool:
        """A near or an exact duplicate."""
        core = self._core
        return core is not None and core.status is not Status.UNIQUE

    @property
    def routed_unique(self) -> bool:
        """Whether the worker would send the item to the unique topic: unique, or (with
        ``keep="complete"``) a more complete version of its story."""
        core = self._core
        return core is not None and core.routed_unique

    @property
    def novelty(self) -> str | None:
        """Why an item resembling an earlier one (doc_q >= threshold) was judged a new
        report: ``new_content``, ``subject``, ``headline``, ``figures`` or ``development``."""
        core = self._core
        return None if core is None or core.novel is None else core.novel.reason

    @property
    def story(self) -> str | None:
        """The identity of its story's first item (see :func:`stories`)."""
        return None if self._core is None else self._core.story

    @property
    def scope(self) -> str | None:
        """The scope it was compared in (its channel, ``global``, ...)."""
        return None if self._core is None else self._core.scope

    @property
    def supersedes(self) -> str | None:
        """With ``keep="complete"``: the story's version this more complete one replaces."""
        return None if self._core is None else self._core.supersedes

    @property
    def replayed(self) -> bool:
        """Its identity was decided before: this is the first decision, returned again."""
        return self._core is not None and self._core.replayed

    @property
    def reason(self) -> str | None:
        """Why the item is invalid (see :class:`InvalidItem`); None otherwise."""
        return None if self._invalid is None else self._invalid.reason

    @property
    def detail(self) -> str | None:
        """What was wrong with an invalid item; None otherwise."""
        return None if self._invalid is None else self._invalid.detail

    def as_dict(self) -> dict[str, Any]:
        """The record ``ndd-stream dedup`` writes for the item (docs/ITEMS.md)."""
        if self._core is None:
            assert self._invalid is not None
            return {"line": self.line, "status": "invalid", "reason": self._invalid.reason,
                    "detail": self._invalid.detail}
        record: dict[str, Any] = {"line": self.line}
        record.update(self._core.as_dict())
        return record

    def explain(self) -> str:
        """One sentence: what was decided, against which item, and why."""
        if self._core is None:
            assert self._invalid is not None
            return f"line {self.line} is invalid ({self._invalid.reason}): {self._invalid.detail}"
        d = self._core
        text = _explained(d, self._config)
        if d.supersedes is not None:
            text += (f"; it holds what {d.supersedes!r} says and materially more, so it "
                     "replaces it as its story's kept version (routed unique)")
        if d.replayed:
            text += "; replayed: this identity was decided before, this is that decision"
        return text

    def __repr__(self) -> str:
        if self._core is None:
            return f"Decision(line={self.line}, status='invalid', reason={self.reason!r})"
        return (f"Decision(line={self.line}, identity={self.identity!r}, "
                f"status={self.status!r}, match_id={self.match_id!r}, score={self.score:.6g})")


def _explained(d: CoreDecision, config: DetectorConfig) -> str:
    who, t = repr(d.identity), config.threshold
    if d.status is Status.EXACT_DUPLICATE:
        why = ("the same letters and digits, too few for q-grams" if d.policy is Policy.SHORT
               else "the same text once normalised, doc_q 1.0")
        return f"{who} is an exact duplicate of {d.duplicate_of!r}: {why}"
    if d.status is Status.NEAR_DUPLICATE:
        return (f"{who} is a near duplicate of {d.duplicate_of!r}: doc_q {d.similarity:.3f} "
                f">= threshold {t:g}")
    if d.novel is not None:
        n = d.novel
        return (f"{who} is unique, a new report although it resembles {n.resembles!r} "
                f"(doc_q {n.similarity:.3f} >= threshold {t:g}); novelty rule "
                f"'{n.reason}': {n.detail}")
    if d.policy is Policy.EMPTY:
        return f"{who} is unique: its text has no letters or digits to compare"
    if d.policy is Policy.SHORT:
        return (f"{who} is unique: under {config.q} letters and digits, and no earlier item "
                "of its window has the same")
    if d.policy is Policy.LATE:
        return (f"{who} is unique and was not compared: its hour is more than "
                f"{config.window_hours} hours before the latest hour its scope has seen, "
                "outside the window")
    return (f"{who} is unique: no earlier item of scope {d.scope!r} in its window reaches "
            f"doc_q {t:g}")


class _WindowLog:
    """The state records of the filter's window (the detector's StateStore): the input of
    :meth:`Filter.save`. An hour's records go when the detector drops the hour; a late
    item's are never kept (its hour has left the window; a restore skips it)."""

    def __init__(self) -> None:
        self._hours: dict[tuple[str, int], list[StoredDocument]] = {}

    def add(self, doc: StoredDocument) -> None:
        if doc.decision.policy is Policy.LATE:
            return
        key = (doc.scope, doc.hour)
        held = self._hours.get(key)
        if held is None:
            self._hours[key] = [doc]
        else:
            held.append(doc)

    def drop_hour(self, scope: str, hour: int) -> None:
        self._hours.pop((scope, hour), None)

    def load(self) -> Iterator[StoredDocument]:
        docs = [doc for held in self._hours.values() for doc in held]
        docs.sort(key=lambda doc: (doc.scope, doc.number))
        return iter(docs)

    def commit(self) -> None:
        return None

    def close(self) -> None:
        self._hours.clear()

    def __len__(self) -> int:
        return sum(len(held) for held in self._hours.values())


# save()'s file: MAGIC, u32 layout version, u32 + settings JSON, u64 record count, then per
# record u32 + key and u32 + value (state.rocks's document key and value), then u32 CRC-32
# of every byte before it. Big-endian throughout.
_MAGIC = b"ndd-stream filter\n"
_LAYOUT = 1
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class Filter:
    """The near-duplicate filter: items in, :class:`Decision` objects out, in order.

    Keyword arguments have the names and defaults of the ``NDD_*`` settings
    (docs/CONFIGURATION.md). Not thread-safe: one filter per thread or partition."""

    def __init__(
        self,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        window_hours: int = 24,
        scope: str = "channel",
        scope_map: Mapping[str, str] | None = None,
        novelty: NoveltyMode = "auto",
        keep: KeepPolicy = "first",
        extract: ExtractMode = DEFAULT_EXTRACT,
        case_sensitive: bool = False,
        q: int = 4,
        index_duplicates: bool = True,
        id_field: str = "id",
        channel_field: str = "channel",
        title_field: str | None = "title",
        text_fields: str | Sequence[str] = ("text", "body", "content"),
        timestamp_fields: str | Sequence[str] = ("timestamp", "published_at"),
        max_item_bytes: int = 2_000_000,
        max_future_seconds: int = 86_400,
        max_html_depth: int = DEFAULT_MAX_HTML_DEPTH,
        count_threads: int | None = None,
        index: IndexKind = "auto",
        dense_fraction: float = DEFAULT_DENSE_FRACTION,
        bitmap_filter_bits: int | None = None,
    ) -> None:
        text_fields, timestamp_fields = _names(text_fields), _names(timestamp_fields)
        if isinstance(title_field, str) and not title_field.strip():
            title_field = None  # as NDD_TITLE_FIELD= (no title)
        _check(threshold=threshold, window_hours=window_hours, q=q, novelty=novelty,
               keep=keep, extract=extract, max_item_bytes=max_item_bytes,
               max_future_seconds=max_future_seconds, max_html_depth=max_html_depth,
               count_threads=count_threads, index=index, dense_fraction=dense_fraction,
               bitmap_filter_bits=bitmap_filter_bits)
        self._settings: dict[str, Any] = {
            "threshold": float(threshold), "window_hours": window_hours, "scope": scope,
            "scope_map": dict(scope_map or {}), "novelty": novelty, "keep": keep,
            "extract": extract, "case_sensitive": case_sensitive, "q": q,
            "index_duplicates": index_duplicates, "id_field": id_field,
            "channel_field": channel_field, "title_field": title_field,
            "text_fields": list(text_fields), "timestamp_fields": list(timestamp_fields),
            "max_item_bytes": max_item_bytes, "max_future_seconds": max_future_seconds,
            "max_html_depth": max_html_depth, "count_threads": count_threads,
            "index": index, "dense_fraction": float(dense_fraction),
            "bitmap_filter_bits": bitmap_filter_bits,
        }
        # as Settings.detector_config() and Settings.item_format() build them
        self._config = DetectorConfig(
            q=q, threshold=float(threshold), window_hours=window_hours,
            case_sensitive=case_sensitive, index_duplicates=index_duplicates, novelty=novelty,
            count_threads=count_threads, keep=keep, index=index,
            dense_fraction=float(dense_fraction), bitmap_bits=bitmap_filter_bits,
        )
        self._format = ItemFormat(
            id_field=id_field, channel_field=channel_field, title_field=title_field,
            text_fields=tuple(text_fields), timestamp_fields=tuple(timestamp_fields),
            extract=extract, max_html_depth=max_html_depth, scope=scope,
            scope_map=dict(scope_map or {}), max_item_bytes=max_item_bytes,
            max_future_seconds=max_future_seconds,
        )
        self._log = _WindowLog()
        self._detector = Detector(self._config, self._log)
        self._items = 0

    # -- deciding ------------------------------------------------------------------------

    def decide(self, item: _Item, *, position: str | None = None,
               default_timestamp: float | None = None,
               on_invalid: _OnInvalid = "raise") -> Decision:
        """Decide one item: a dict, or a JSON object as bytes or str (one JSONL line).

        ``position`` is its identity when it has no id (default ``line:N``, N its number
        in what the filter was given); ``default_timestamp`` its event time (epoch
        seconds) when it has none, e.g. the Kafka record's. An item the filter rejects
        raises :class:`InvalidItem`, or with ``on_invalid="return"`` comes back with status
        ``invalid``."""
        _check_on_invalid(on_invalid)
        self._items += 1
        line = self._items
        parsed = self._parse(item, position or f"line:{line}", default_timestamp)
        if isinstance(parsed, Invalid):
            if on_invalid == "raise":
                raise InvalidItem(parsed.reason, parsed.detail, line)
            return Decision(None, line, self._config, parsed)
        return Decision(self._detector.decide(parsed), line, self._config)

    def decide_many(self, items: Iterable[_Item], *,
                    on_invalid: _OnInvalid = "raise") -> Iterator[Decision]:
        """Decide items in order, lazily (a generator: nothing is decided until read).

        Reads a file's lines as ``ndd-stream dedup`` does: blank lines are counted and
        skipped, an item without an id is ``line:N``. Invalid items raise
        :class:`InvalidItem` (the items before it are decided), or with
        ``on_invalid="return"`` come back with status ``invalid``.

        Given a list, a tuple or a regular file, and two usable cores or more, each item's
        lookup runs on the engine thread while the next item is parsed (as ``dedup`` runs a
        file); any other iterable is decided an item at a time, so that a live feed's
        decision never waits for the next item. The decisions are the same either way."""
        _check_on_invalid(on_invalid)
        return self._decide_many(items, on_invalid == "raise")

    def _decide_many(self, items: Iterable[_Item], raise_invalid: bool) -> Iterator[Decision]:
        if _at_hand(items) and available_cores() >= 2:
            yield from self._decide_ahead(items, raise_invalid)
            return
        config, decide = self._config, self._detector.decide
        for line, parsed in self._parsed(items):
            if type(parsed) is Invalid:
                if raise_invalid:
                    raise InvalidItem(parsed.reason, parsed.detail, line)
                yield Decision(None, line, config, parsed)
            else:
                yield Decision(decide(parsed), line, config)  # type: ignore[arg-type]

    def _decide_ahead(self, items: Iterable[_Item], raise_invalid: bool) -> Iterator[Decision]:
        """``_decide_many`` with each item's lookup on the engine thread while the next item
        is parsed and signed (as ``ndd-stream dedup`` does a file): the same decisions.
        Nothing is begun while a decision is yielded, and a generator closed early forgets
        the item it read ahead (its line number too), so what it leaves is what one item at
        a time leaves; an error reading or parsing the next item comes after the decision
        before it."""
        config, detector = self._config, self._detector
        pending: tuple[int, Any] | None = None  # an item begun: its lookup runs
        shown = self._items  # the last line given back

        def finished() -> Iterator[Decision]:
            """The item begun, finished and given back (nothing begun while it is)."""
            nonlocal pending, shown
            if pending is not None:
                (shown, begun), pending = pending, None
                yield Decision(detector.finish(begun), shown, config)

        detector.lookup_thread = True
        try:
            parsed_items = self._parsed(items)
            while True:
                try:
                    line, parsed = next(parsed_items)
                    signed = None if type(parsed) is Invalid else detector.sign(parsed)  # type: ignore[arg-type]
                except StopIteration:
                    break
                except BaseException:
                    yield from finished()
                    raise
                yield from finished()
                if signed is None:
                    assert isinstance(parsed, Invalid)
                    if raise_invalid:
                        raise InvalidItem(parsed.reason, parsed.detail, line)
                    shown = line
                    yield Decision(None, line, config, parsed)
                else:
                    pending = line, detector.begin(signed)
            yield from finished()
        except GeneratorExit:
            self._items = shown  # the item read ahead was never decided
            raise
        finally:
            detector.lookup_thread = False

    def _parsed(self, items: Iterable[_Item]) -> Iterator[tuple[int, Document | Invalid]]:
        """Each item's line number and parse, blank lines counted and skipped."""
        fmt = self._format
        for item in items:
            self._items += 1
            line = self._items
            if type(item) is bytes:  # the file path: as run_dedup reads a line
                raw = item.rstrip(b"\r\n")
                if not raw.strip():
                    continue
                yield line, parse_item(raw, fmt, f"line:{line}")
            elif isinstance(item, str) and not item.strip():
                continue
            else:
                yield line, self._parse(item, f"line:{line}", None)

    def _parse(self, item: _Item, position: str, fallback: float | None) -> Document | Invalid:
        if isinstance(item, Mapping):
            obj = item if isinstance(item, dict) else dict(item)
            return parse_object(obj, self._format, position, fallback)
        if isinstance(item, str):
            raw = item.encode("utf-8", "surrogatepass")  # a lone surrogate: invalid_utf8
        elif isinstance(item, bytes | bytearray | memoryview):
            raw = bytes(item)
        else:
            return Invalid("not_object", f"expected a dict, or JSON as bytes or str; got "
                           f"{type(item).__name__}")
        return parse_item(raw.rstrip(b"\r\n"), self._format, position, fallback)

    # -- the window ----------------------------------------------------------------------

    @property
    def settings(self) -> dict[str, Any]:
        """The settings the filter was built with (the keyword arguments, resolved)."""
        return {k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
                for k, v in self._settings.items()}

    @property
    def window_documents(self) -> int:
        """Documents in the window now, over every scope."""
        return self._detector.window_documents()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the window (and the item count) to ``path``, to resume with :meth:`load`.

        A versioned byte layout (docs/API.md): the settings as JSON and the state records
        of docs/STATE.md, with a CRC-32; replaced atomically."""
        from ndd_stream.jsonio import dumps
        from ndd_stream.state.rocks import document_key, encode_document

        parts = [_MAGIC, _U32.pack(_LAYOUT)]
        header = dumps({"engine": ENGINE_VERSION, "items": self._items,
                        "settings": self._settings})
        parts += [_U32.pack(len(header)), header]
        records = list(self._log.load())
        parts.append(_U64.pack(len(records)))
        for doc in records:
            key, value = document_key(doc), encode_document(doc)
            parts += [_U32.pack(len(key)), key, _U32.pack(len(value)), value]
        body = b"".join(parts)
        tmp = f"{os.fspath(path)}.tmp"
        with open(tmp, "wb") as out:
            out.write(body)
            out.write(_U32.pack(zlib.crc32(body)))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Filter:
        """A filter as :meth:`save` left it: same settings, window and item count; its
        decisions continue as the saved filter's would have. Raises ValueError for a file
        that is not a saved filter, is damaged, or was written by another engine."""
        from ndd_stream.jsonio import loads
        from ndd_stream.state.rocks import CorruptRecord, decode_document

        with open(path, "rb") as source:
            data = source.read()
        name = os.fspath(path)
        if not data.startswith(_MAGIC):
            raise ValueError(f"{name}: not a saved ndd-stream filter")
        if len(data) < len(_MAGIC) + 20 or zlib.crc32(data[:-4]) != _U32.unpack(data[-4:])[0]:
            raise ValueError(f"{name}: damaged (checksum mismatch or truncated)")
        at = len(_MAGIC)
        (layout,) = _U32.unpack_from(data, at)
        if layout != _LAYOUT:
            raise ValueError(f"{name}: layout version {layout}; this ndd-stream reads {_LAYOUT}")
        (size,) = _U32.unpack_from(data, at + 4)
        header = loads(data[at + 8 : at + 8 + size])
        if header.get("engine") != ENGINE_VERSION:
            raise ValueError(f"{name}: saved by engine {header.get('engine')!r}, this is "
                             f"{ENGINE_VERSION!r}: its decisions could differ")
        at += 8 + size
        (count,) = _U64.unpack_from(data, at)
        at += 8
        try:
            loaded = cls(**header["settings"])
        except TypeError as exc:  # a keyword this version does not know
            raise ValueError(f"{name}: settings this ndd-stream does not know ({exc})") from exc
        try:
            for _ in range(count):
                (klen,) = _U32.unpack_from(data, at)
                key = data[at + 4 : at + 4 + klen]
                at += 4 + klen
                (vlen,) = _U32.unpack_from(data, at)
                loaded._log.add(decode_document(key, data[at + 4 : at + 4 + vlen]))
                at += 4 + vlen
        except (struct.error, CorruptRecord) as exc:
            raise ValueError(f"{name}: damaged ({exc})") from exc
        loaded._detector.restore()
        loaded._items = int(header["items"])
        return loaded

    def __repr__(self) -> str:
        import inspect

        defaults = {name: p.default for name, p in inspect.signature(Filter).parameters.items()}
        given = ", ".join(f"{k}={v!r}" for k, v in self._settings.items()
                          if v != defaults[k] and not (
                              isinstance(defaults[k], tuple) and v == list(defaults[k]))
                          and not (defaults[k] is None and v == {}))
        return f"Filter({given})"


def _at_hand(items: Iterable[Any]) -> bool:
    """Whether reading one item ahead holds no decision back: a list or tuple, or a file
    whose lines are all there (a regular file; not a pipe, a socket or a terminal)."""
    if isinstance(items, (list, tuple)):
        return True
    fileno = getattr(items, "fileno", None)
    try:
        return fileno is not None and regular_file(fileno())
    except (OSError, ValueError, TypeError, AttributeError):  # a file-like without one
        return False


def _names(value: str | Sequence[str]) -> list[str]:
    """``"a, b,,c"`` or a sequence -> ``["a", "b", "c"]`` (as the settings split them)."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    return [str(p).strip() for p in parts if str(p).strip()]


def _check(**values: Any) -> None:
    """The bounds the NDD_* settings enforce (settings.py), as ValueError."""
    bounds = {"window_hours": (0, 24 * 30), "q": (1, 16), "max_item_bytes": (1024, None),
              "max_future_seconds": (0, None), "max_html_depth": (1, 100_000),
              "count_threads": (1, None)}
    threshold = values["threshold"]
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) \
            or not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be a number in (0, 1], got {threshold!r}")
    for name, (lo, hi) in bounds.items():
        value = values[name]
        if value is None and name == "count_threads":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < lo or (
                hi is not None and value > hi):
            raise ValueError(f"{name} must be an integer in {lo}..{hi if hi else ''}, "
                             f"got {value!r}")
    fraction = values["dense_fraction"]
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) \
            or not 0.0 <= fraction <= 1.0:
        raise ValueError(f"dense_fraction must be a number in [0, 1], got {fraction!r}")
    bits = values["bitmap_filter_bits"]
    if bits is not None and (isinstance(bits, bool) or not isinstance(bits, int) or (
            bits != 0 and not BITMAP_BITS_MIN <= bits <= BITMAP_BITS_MAX)):
        raise ValueError(f"bitmap_filter_bits must be 0 (off) or in {BITMAP_BITS_MIN}.."
                         f"{BITMAP_BITS_MAX}, got {bits!r}")
    for name, allowed in (("novelty", NOVELTY_MODES), ("keep", KEEP_POLICIES),
                          ("extract", EXTRACT_MODES), ("index", INDEX_KINDS)):
        if values[name] not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, "
                             f"got {values[name]!r}")


def _check_on_invalid(on_invalid: str) -> None:
    if on_invalid not in _ON_INVALID:
        raise ValueError(f"on_invalid must be 'raise' or 'return', got {on_invalid!r}")


# -- pairs and groups ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Similarity:
    """doc_q of two texts and what the filter decides on the later one, were the earlier
    one its best match (:func:`similarity`)."""

    doc_q: float  # |A ∩ B| / max(|A|, |B|) over distinct q-grams of the normal forms
    shared: int  # q-grams in both
    sizes: tuple[int, int]  # distinct q-grams of (earlier, later)
    status: Literal["unique", "near_duplicate", "exact_duplicate"]
    novelty: str | None  # the novelty rule's reason when it judged the later a new report
    detail: str  # the rule's explanation, "" when none

    @property
    def is_duplicate(self) -> bool:
        return self.status != "unique"

    def explain(self) -> str:
        """One sentence, as :meth:`Decision.explain` words it."""
        if self.novelty is not None:
            return (f"a new report although doc_q is {self.doc_q:.3f}; novelty rule "
                    f"'{self.novelty}': {self.detail}")
        if self.status == "unique":
            return f"unique: doc_q {self.doc_q:.3f}, below the threshold"
        return f"{self.status.replace('_', ' ')}: doc_q {self.doc_q:.3f}"


def similarity(earlier: str, later: str, *, threshold: float = DEFAULT_THRESHOLD,
               novelty: NoveltyMode = "auto", q: int = 4,
               case_sensitive: bool = False) -> Similarity:
    """doc_q of two texts (title first, on its own line, then the body) and the filter's
    verdict on ``later`` given ``earlier`` as its best match: the normal form, q-grams,
    threshold and novelty rule of :class:`Filter`. Texts of fewer than ``q`` letters and
    digits are compared for equality, as the filter compares them. Plain text: HTML is
    compared as written (a :class:`Filter` extracts it)."""
    _check(threshold=threshold, window_hours=0, q=q, novelty=novelty, keep="first",
           extract="raw", max_item_bytes=1024, max_future_seconds=0, max_html_depth=1,
           count_threads=None, index="auto", dense_fraction=0.0, bitmap_filter_bits=None)
    nf_old = normal_form(earlier, case_sensitive)
    nf_new = normal_form(later, case_sensitive)
    sig_old, sig_new = signature(nf_old, q), signature(nf_new, q)
    sizes = (int(sig_old.size), int(sig_new.size))
    if len(nf_new) < q or len(nf_old) < q:  # no q-grams on one side: equal normal forms
        same = bool(nf_new) and nf_new == nf_old
        return Similarity(1.0 if same else 0.0, 0, sizes,
                          "exact_duplicate" if same else "unique", None, "")
    shared = intersection_size(sig_old, sig_new)
    doc_q = shared / max(sizes)
    if doc_q < threshold:
        return Similarity(doc_q, shared, sizes, "unique", None, "")
    facts = novelty != "off"
    match = WindowDoc("earlier", "", 0.0, 0, sizes[0], -1, nf_old,
                      figures(earlier) if facts else None, 0)
    doc = Document("later", "", "", 0.0, later, markup=looks_like_markup(later))
    decided = conclude(novelty, doc, 0, figures(later) if facts else None, sizes[1],
                       (shared, match))
    novel = decided.novel
    return Similarity(doc_q, shared, sizes, decided.status.value,
                      None if novel is None else novel.reason,
                      "" if novel is None else novel.detail)


@dataclass(frozen=True, slots=True)
class Story:
    """The items of a batch that tell one story (docs/STORIES.md): the first item, its
    copies, and the developments that joined it, in the order decided."""

    id: str  # the identity of its first item
    scope: str
    members: tuple[Decision, ...]

    @property
    def identities(self) -> list[str]:
        return [d.identity for d in self.members if d.identity is not None]

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def kept(self) -> str:
        """The version a reader keeps: the last that superseded (``keep="complete"``),
        else the first item."""
        for d in reversed(self.members):
            if d.supersedes is not None and d.identity is not None:
                return d.identity
        return self.id


def stories(decisions: Iterable[Decision]) -> list[Story]:
    """Group a finished batch's decisions by story, stories in order of their first
    member. Invalid and replayed decisions are left out (a replay is its item again)."""
    groups: dict[tuple[str, str], list[Decision]] = {}
    for d in decisions:
        core = d._core
        if core is None or core.replayed:
            continue
        groups.setdefault((core.scope, core.story), []).append(d)
    return [Story(story, scope, tuple(members)) for (scope, story), members in groups.items()]
