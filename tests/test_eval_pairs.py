"""``ndd-stream eval STREAM --pairs PAIRS`` on small generated streams (never ../shared)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ndd_stream.cli.eval import eval_main
from ndd_stream.eval.pairs import Pair, band_of, band_weights, weighted_confusion
from ndd_stream.eval.stream_items import load_stream, reuters_date

BODY = ("The Bank of Norland said it provided the money market with {0} mln crowns of help "
        "in the morning session. It bought {1} mln crowns of treasury bills at {2} pct and "
        "said the shortage in the system had been forecast at about {3} mln crowns today, "
        "before taking account of its operations in the market. Reuter")
OTHER = ("Heavy rain flooded the lower town of Millbrook overnight and the river rose above "
         "its banks for the first time in twenty years, the county said on Tuesday morning, "
         "while schools stayed closed and volunteers filled sandbags near the old bridge.")


def _sgml(items: list[tuple[int, str, str, str]]) -> str:
    out = ['<!DOCTYPE lewis SYSTEM "lewis.dtd">']
    for newid, date, title, body in items:
        out.append(f'<REUTERS TOPICS="NO" NEWID="{newid}">\n<DATE>{date}</DATE>\n'
                   f"<TEXT>&#2;\n<TITLE>{title}</TITLE>\n<BODY>{body}</BODY></TEXT>\n</REUTERS>")
    return "\n".join(out)


@pytest.fixture
def stream(tmp_path: Path) -> tuple[Path, Path]:
    day1 = BODY.format(420, 310, "8.25", 600)
    folder = tmp_path / "reuters"
    folder.mkdir()
    (folder / "reut2-000.sgm").write_text(_sgml([
        (1, "02-MAR-1987 09:00:00.00", "NORLAND MONEY MARKET HELP", day1),
        (2, "02-MAR-1987 09:05:00.00&#5;&#5;RM", "NORLAND MONEY MARKET HELP", day1),
        (3, "03-MAR-1987 09:00:00.00", "NORLAND MONEY MARKET HELP",
         BODY.format(275, 190, "8.1875", 450)),
        (4, "03-MAR-1987 10:00:00.00", "FLOODS", OTHER),
        (5, "03-MAR-1987 11:00:00.00", "SHORT", "too short a body"),
    ]), encoding="latin-1")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps(p) for p in [
        {"a": "reuters-2", "b": "reuters-1", "label": "dup", "why": "re-sent"},
        {"a": "reuters-3", "b": "reuters-1", "label": "not", "why": "next day, other figures"},
        {"a": "reuters-4", "b": "reuters-3", "label": "unsure"},
    ]) + "\n")
    return folder, pairs


def test_reuters_reader(stream: tuple[Path, Path]) -> None:
    items = load_stream(stream[0])
    assert [i.identity for i in items] == ["reuters-1", "reuters-2", "reuters-3", "reuters-4"]
    assert items[1].timestamp == reuters_date("02-MAR-1987 09:05:00") == 541674300.0  # 09:05Z
    assert items[0].title == "NORLAND MONEY MARKET HELP"


def test_pairs_report(stream: tuple[Path, Path], tmp_path: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    folder, pairs = stream
    out = tmp_path / "out"
    assert eval_main([str(folder), "--pairs", str(pairs), "-o", str(out),
                      "--thresholds", "0.3", "0.9"]) == 0
    report = json.loads((out / "pairs-report.json").read_text())
    assert report["items"] == 4 and report["pairs"] == 3 and report["unsure"] == 1
    assert report["pairs_matched"] == 2  # the flood item resembles nothing
    # the repeat is routed duplicate, the next day's report is judged new: P = R = 1
    assert report["at_threshold"]["precision"] == 1.0 == report["at_threshold"]["recall"]
    assert report["novel_reasons"] == {"figures": 1}
    assert report["agreement"] == 1.0
    doc_q_alone = {row["threshold"]: row["doc_q"] for row in report["sweep"]}
    assert doc_q_alone[0.3]["counts"] == {"tp": 1, "fp": 1}
    assert "Band-weighted precision" in capsys.readouterr().out
    # the routing is right on every labelled pair: so is every resample
    assert report["bootstrap"]["precision"] == {"low": 1.0, "median": 1.0, "high": 1.0}
    assert report["bootstrap"]["meets_target"] == 1.0
    assert "Stratified bootstrap" in (out / "pairs-report.md").read_text()


def test_band_weighting_is_items_per_labelled_pair() -> None:
    best = {"x1": 0.35, "x2": 0.36, "x3": 0.37, "x4": 0.95, "a1": 0.33, "a2": 0.97, "a3": 0.31}
    pairs = [Pair("a1", "b", "dup"), Pair("a3", "b", "not"), Pair("a2", "b", "dup")]
    items, labelled, weights = band_weights(best, pairs, best)
    k_low, k_high = band_of(0.33), band_of(0.97)
    assert (items[k_low], labelled[k_low], weights[k_low]) == (5, 2, 2.5)
    assert (items[k_high], labelled[k_high], weights[k_high]) == (2, 1, 2.0)
    c = weighted_confusion(pairs, {"a1", "a3", "a2"}, best, weights)
    assert (c.tp, c.fp, c.fn) == (4.5, 2.5, 0.0)
    assert c.precision == pytest.approx(4.5 / 7)
    assert band_of(1.0) == len(weights) - 1 and band_of(0.1) is None


def test_bad_pairs_file_is_one_line_exit_2(stream: tuple[Path, Path], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": "reuters-2", "b": "reuters-1", "label": "maybe"}\n')
    assert eval_main([str(stream[0]), "--pairs", str(bad), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:1" in err and "Traceback" not in err


def test_pair_files_are_pooled(stream: tuple[Path, Path], tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    """Two files measure as the one file holding both; an item labelled in both is a one-line
    error (a pooled sample must not count it twice)."""
    folder, pairs = stream
    lines = pairs.read_text().splitlines()
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text(lines[0] + "\n")
    second.write_text("\n".join(lines[1:]) + "\n")
    reports = []
    for files in ([pairs], [first, second]):
        out = tmp_path / f"out{len(files)}"
        assert eval_main([str(folder), "--pairs", *map(str, files), "-o", str(out)]) == 0
        reports.append(json.loads((out / "pairs-report.json").read_text()))
    one, two = reports
    assert two["pairs_files"] == [str(first), str(second)]
    for key in ("pairs", "band_pairs", "band_weights", "at_threshold", "sweep"):
        assert one[key] == two[key], key
    assert "first.jsonl + second.jsonl" in (tmp_path / "out2" / "pairs-report.md").read_text()
    capsys.readouterr()
    assert eval_main([str(folder), "--pairs", str(pairs), str(first), "-o",
                      str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "reuters-2 is labelled in both pairs.jsonl and first.jsonl" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_jsonl_stream(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps(i) for i in [
        {"id": "a", "title": "Help", "text": BODY.format(1, 2, "3.5", 4), "timestamp": 100},
        {"id": "b", "title": "Help", "text": BODY.format(1, 2, "3.5", 4),
         "timestamp": "1970-01-01T00:02:00Z"},
    ]) + "\n")
    pairs = tmp_path / "p.jsonl"
    pairs.write_text('{"a": "b", "b": "a", "label": "dup"}\n')
    out = tmp_path / "o"
    assert eval_main([str(items), "--pairs", str(pairs), "-o", str(out)]) == 0
    report = json.loads((out / "pairs-report.json").read_text())
    assert report["at_threshold"]["counts"] == {"tp": 1}
