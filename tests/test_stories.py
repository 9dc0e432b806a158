"""Story groups: every decision names its story (pure: no Kafka, no RocksDB)."""

from __future__ import annotations

import dataclasses
import io

import pytest

from ndd_stream.core.detector import Detector, DetectorConfig
from ndd_stream.core.document import Decision, Document
from ndd_stream.core.items import ItemFormat
from ndd_stream.core.shards import Gatherer
from ndd_stream.core.stories import StoryBook, derived_story
from ndd_stream.dedup import run_dedup
from ndd_stream.jsonio import dumps, loads
from ndd_stream.settings import Settings

BASE = ("the metro line to the airport opened on monday after four years of work and the "
        "city council said trains will run every ten minutes from early morning ")
T0 = 1_700_000_000.0


def _decide(*items: tuple[str, str, int, str], window: int = 24) -> list[Decision]:
    """Items (identity, channel, hour, text) in arrival order."""
    det = Detector(DetectorConfig(threshold=0.3, window_hours=window))
    return [det.decide(Document(i, "s", c, T0 + h * 3600.0, t)) for i, c, h, t in items]


def test_a_chain_of_copies_is_one_story_named_by_its_first_item() -> None:
    a = BASE * 2
    b = a + "and buses will stop at every station of the new line until june "
    c = b + "while the old tram keeps its timetable for the summer months as before "
    d = "completely different words about football results and the weather in spain " * 2
    got = _decide(("a", "x", 0, a), ("b", "y", 0, b), ("c", "x", 0, c), ("d", "y", 0, d))
    assert got[2].duplicate_of == "b", got[2]  # its best match is the second copy...
    assert [g.story for g in got] == ["a", "a", "a", "d"]  # ...its story the first's
    assert [g.story_size for g in got] == [1, 2, 3, 1]
    assert [g.story_channels for g in got] == [("x",), ("x", "y"), ("x", "y"), ("y",)]


def test_a_story_outlives_its_first_item() -> None:
    """The first copy leaves the window; a copy of a later copy still names the story,
    and the tally counts the members in the window."""
    got = _decide(("a", "x", 0, BASE), ("b", "y", 20, BASE + "more"),
                  ("c", "z", 30, BASE + "more words"), window=24)
    assert got[1].duplicate_of == "a" and got[2].duplicate_of == "b"
    assert [g.story for g in got] == ["a", "a", "a"]
    assert (got[2].story_size, got[2].story_channels) == (2, ("y", "z"))


def test_a_replay_names_the_story_it_had() -> None:
    got = _decide(("a", "x", 0, BASE), ("b", "y", 0, BASE), ("b", "y", 0, BASE))
    assert got[2].replayed and (got[2].story, got[2].story_size) == ("a", 2)


def test_a_follow_up_joins_the_story_another_report_starts_its_own() -> None:
    launch = ("CANADA LAUNCHES 1.2 BILLION DLR BOND ISSUE\nCanada launched a 1.2 billion dlr "
              "bond issue in three tranches today, the finance department said. The issue "
              "will be priced later this week by the syndicate of investment dealers.")
    priced = ("CANADA PRICES ITS NEW ISSUE AT PAR\n" + launch.split("\n", 1)[1]
              + " The tranches yield 8.25, 8.75 and 9.10 pct, the department said.")
    other = launch.replace("1.2 billion", "2.5 billion").replace("1.2 BILLION", "2.5 BILLION")
    got = _decide(("l", "x", 0, launch), ("p", "x", 0, priced), ("o", "x", 0, other))
    assert got[1].novel is not None and got[1].novel.reason == "development"
    assert got[1].story == "l" and got[1].story_size == 2
    assert got[2].novel is not None and got[2].novel.reason == "figures"
    assert got[2].story == "o"


def test_late_items_are_a_story_of_their_own_and_are_not_counted() -> None:
    got = _decide(("a", "x", 0, BASE), ("b", "y", 40, "other words entirely here"),
                  ("c", "z", 0, BASE), ("d", "z", 40, BASE), window=2)
    assert got[2].policy.value == "late" and (got[2].story, got[2].story_size) == ("c", 1)
    assert (got[3].story, got[3].story_size) == ("d", 1)


def test_the_book_forgets_members_by_hour() -> None:
    book = StoryBook()
    assert book.join("a", "a", "x", 0) == (1, ("x",))
    assert book.join("b", "a", "y", 1) == (2, ("x", "y"))
    assert book.join("c", "a", "x", 2) == (3, ("x", "y"))
    book.expire([0])
    assert book.story_of("a") is None and book.story_of("b") == "a"
    assert book.join("d", "a", "z", 3) == (3, ("x", "y", "z"))
    book.expire([1, 2, 3])
    assert len(book) == 0


def test_the_derived_story_is_what_a_record_may_omit() -> None:
    got = _decide(("a", "x", 0, BASE), ("b", "x", 0, BASE))
    assert [derived_story(g) for g in got] == ["a", "a"]


MORE = ("the new line has twelve stations, three of them underground, and cost the region "
        "about two billion euros, paid in part by a european fund for transport ")
MORE2 = ("opponents of the project said the money would have served the old bus network "
         "better, and a petition against the fares gathered forty thousand names ")


def _keep(*texts: str, keep: str = "complete") -> list[Decision]:
    det = Detector(DetectorConfig(threshold=0.3, keep=keep))  # type: ignore[arg-type]
    return [det.decide(Document(f"d{i}", "s", "c", T0 + i, t)) for i, t in enumerate(texts)]


def test_a_more_complete_version_supersedes_the_kept_one_and_can_be_superseded() -> None:
    got = _keep(BASE, BASE + MORE, BASE + MORE + "and", BASE + MORE + MORE2)
    assert [g.status.value for g in got] == ["unique"] + ["near_duplicate"] * 3
    assert [g.supersedes for g in got] == [None, "d0", None, "d1"]
    assert [g.routed_unique for g in got] == [True, True, False, True]
    assert {g.story for g in got} == {"d0"}


def test_a_shorter_or_damaged_copy_never_supersedes() -> None:
    full = BASE + MORE + MORE2
    words = full.split()
    damaged = " ".join(w[::-1] if i % 4 == 0 else w for i, w in enumerate(words)) + " " + MORE2
    got = _keep(full, BASE + MORE, full[: len(full) // 2], damaged)
    assert all(g.is_duplicate for g in got[1:]), got
    assert [g.supersedes for g in got] == [None] * 4


def test_keep_first_routes_as_before() -> None:
    texts = (BASE, BASE + MORE, BASE + MORE + MORE2)
    first, complete = _keep(*texts, keep="first"), _keep(*texts)
    assert [g.supersedes for g in first] == [None] * 3
    assert [dataclasses.replace(g, supersedes=None) for g in complete] == first
    assert not first[2].routed_unique and complete[2].routed_unique


def test_complete_needs_an_unsharded_window() -> None:
    with pytest.raises(ValueError, match="keep=complete needs an unsharded window"):
        Gatherer(DetectorConfig(keep="complete"), 2)
    with pytest.raises(ValueError, match="NDD_KEEP=complete needs NDD_SHARDS=1"):
        Settings(_env_file=None, keep="complete", shards=2)  # type: ignore[call-arg]
    assert Settings(_env_file=None, keep="complete").detector_config().keep == "complete"  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="keep must be one of"):
        DetectorConfig(keep="last")  # type: ignore[arg-type]


def test_dedup_writes_the_story_and_counts_supersessions() -> None:
    texts = (BASE, BASE + MORE, BASE + MORE + MORE2)
    lines = b"\n".join(dumps({"id": f"d{i}", "channel": "c", "text": t, "timestamp": T0 + i})
                       for i, t in enumerate(texts))
    for keep, superseded in (("first", 0), ("complete", 2)):
        sink = io.BytesIO()
        summary = run_dedup(io.BytesIO(lines), sink, DetectorConfig(keep=keep),  # type: ignore[arg-type]
                            ItemFormat())
        out = [loads(line) for line in sink.getvalue().splitlines()]
        assert [(r["story"], r["story_size"]) for r in out] == [("d0", 1), ("d0", 2), ("d0", 3)]
        assert sum(r["supersedes"] is not None for r in out) == superseded
        assert summary.as_dict().get("superseded", 0) == superseded
