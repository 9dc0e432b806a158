"""The novelty rule on the cases it was made for, and how its verdict is explained."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndd_stream.core.detector import Detector, DetectorConfig
from ndd_stream.core.document import Decision, Document, Status
from ndd_stream.core.novelty import figures, judge
from ndd_stream.settings import Settings
from ndd_stream.worker.records import decision_headers, header_map

TEMPLATE = ("The Bank of Norland said it provided the money market with {0} mln crowns of "
            "assistance in the morning session. It bought {1} mln crowns of treasury bills at "
            "{2} pct and {3} mln crowns of eligible bank bills at {4} pct, and said the "
            "shortage in the system was forecast at around {5} mln crowns before its help.")
EARNINGS = ("Arbor Drugs Inc second quarter net. Shr 30 cts vs 36 cts. Net 1,914,388 vs "
            "1,906,095. Sales {0} mln vs 40.7 mln. First half shr 47 cts vs 53 cts. Net "
            "2,961,718 vs 2,817,439. Sales 107.7 mln vs 74.9 mln. Avg shrs 6,342,353 vs "
            "5,342,353.")


def _decide(*texts: str, markup: bool = False, **config: object) -> list[Decision]:
    det = Detector(DetectorConfig(threshold=0.3, **config))  # type: ignore[arg-type]
    return [det.decide(Document(f"d{i}", "s", "c", 1_700_000_000.0 + i, t, markup=markup))
            for i, t in enumerate(texts)]


def test_figures_are_kept_as_written_once_each() -> None:
    assert figures("Net 1,914,388 vs 1914388; 58.8 mln, 4TH QTR 1987.") == "1,914,388 58.8 4 1987"


def test_templated_report_with_other_figures_is_new() -> None:
    day1 = TEMPLATE.format(420, 310, "8.25", 110, "8.3125", 600)
    day2 = TEMPLATE.format(275, 190, "8.1875", 85, "8.25", 450)
    second = _decide(day1, day2)[1]
    novel = second.novel
    assert second.status is Status.UNIQUE and novel is not None
    assert (novel.reason, novel.resembles) == ("figures", "d0")
    assert novel.similarity == second.similarity >= 0.3
    assert set(novel.only_new) == {"275", "190", "8.1875", "85", "450"}
    assert set(novel.only_old) == {"420", "310", "8.3125", "110", "600"}
    assert novel.detail.startswith("figures differ: 420 -> 275")


@pytest.mark.parametrize("mode,markup,new", [("auto", False, True), ("auto", True, False),
                                             ("on", True, True), ("off", False, False)])
def test_modes(mode: str, markup: bool, new: bool) -> None:
    """auto: plain text is judged, HTML is not; on and off do what they say."""
    day1 = TEMPLATE.format(420, 310, "8.25", 110, "8.3125", 600)
    day2 = TEMPLATE.format(275, 190, "8.1875", 85, "8.25", 450)
    second = _decide(day1, day2, markup=markup, novelty=mode)[1]
    assert (second.novel is not None) is new
    assert second.is_duplicate is not new


def test_repeats_stay_duplicates() -> None:
    """Shortened, expanded, a correction of one figure among many, or a declared correction."""
    base = EARNINGS.format("58.8")
    shortened = base.rsplit(" Avg", 1)[0]
    expanded = base + " The company said 12 new stores opened in the quarter."
    corrected_one = EARNINGS.format("58.7")  # 1 of 11 figures changed: a correction
    declared = "CORRECTED - " + base.replace("107.7", "107.9").replace("30 cts", "31 cts")
    for text in (shortened, expanded, corrected_one, declared):
        assert _decide(base, text)[1].is_duplicate, text


def test_rule_is_exact_integer_arithmetic() -> None:
    # 1 changed of 5 compared: tolerated (not more than a fifth); 2 of 6: new.
    assert judge(10, 10, 10, "1 2 3 4 5", "1 2 3 4 9", False) is None
    assert judge(10, 10, 10, "1 2 3 4 5 6", "1 2 3 4 8 9", False) == (
        "figures", ("5", "6"), ("8", "9"))
    assert judge(10, 10, 10, "1 2 3 4 5 6", "1 2 3 4 8 9", True) is None  # a correction
    assert judge(3, 10, 8, "", "", False) == ("new_content", (), ())  # 3 < 8 / 2
    assert judge(4, 10, 8, "", "", False) is None  # exactly half: shared enough
    assert judge(3, 10, 8, "", None, False) == ("new_content", (), ())
    assert judge(5, 10, 10, "1", None, False) is None  # figures of the match unknown (v1)
    assert judge(10, 10, 10, "1,250 7", "1250 8", False) == ("figures", ("7",), ("8",))


def test_headers_and_audit_follow_the_contract() -> None:
    day1 = TEMPLATE.format(420, 310, "8.25", 110, "8.3125", 600)
    day2 = TEMPLATE.format(275, 190, "8.1875", 85, "8.25", 450)
    second = _decide(day1, day2)[1]
    headers = header_map(decision_headers(second, None))
    assert headers["ndd-status"] == b"unique"
    assert headers["ndd-resembles"] == b"d0"
    assert headers["ndd-novel"] == b"figures"
    assert headers["ndd-novel-detail"].startswith(b"figures differ: ")
    assert headers["ndd-similarity"] == f"{second.similarity:.6f}".encode()
    assert "ndd-duplicate-of" not in headers
    audit = second.as_dict()
    assert set(audit["novel"]) >= {"reason", "resembles", "similarity", "only_new", "only_old"}
    assert "novel" not in _decide(day1, day1)[1].as_dict()


def test_setting_reaches_the_detector(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().detector_config().novelty == "auto"
    monkeypatch.setenv("NDD_NOVELTY", "off")
    assert Settings().detector_config().novelty == "off"
    monkeypatch.setenv("NDD_NOVELTY", "sometimes")
    with pytest.raises(ValueError):
        Settings()


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="0123456789.,  ab\n$%٣é", max_size=60))
def test_figures_fast_path_equals_the_pattern(text: str) -> None:
    """The ASCII fast path gives what scanning the whole text with the pattern gives."""
    seen: dict[str, str] = {}
    for raw in re.findall(r"\d+(?:[.,]\d+)*", text):
        seen.setdefault(raw.replace(",", ""), raw)
    assert figures(text) == " ".join(seen.values())
