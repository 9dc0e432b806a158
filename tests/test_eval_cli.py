"""``ndd-stream eval`` end to end on a generated corpus (with a corrupt file)."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest
from test_eval_support import article, write_cluster_corpus

from ndd_stream.cli.eval import add_eval_parser, eval_main, parse_thresholds


def test_eval_writes_reports_and_skips_corrupt_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_cluster_corpus(tmp_path / "corpus", clusters=4, size=3)
    (root / "c0" / "broken.html").write_bytes(b"\x00\x01\x02binary\x00" * 50)
    (root / "distractor.txt").write_text(article(999), encoding="utf-8")
    out = tmp_path / "report"
    code = eval_main(
        [
            str(root),
            "-o",
            str(out),
            "--thresholds",
            "0.1:0.9:0.1",
            "--methods",
            "ddd",
            "shingling",
            "imatch",
            "signcd",
            "--ddd-threshold",
            "0.5",
        ]
    )
    assert code == 0
    report = orjson.loads((out / "report.json").read_bytes())
    assert report["corpus"]["items"] == 13
    assert report["corpus"]["skipped"] == [{"source": "c0/broken.html", "reason": "binary"}]
    assert report["corpus"]["duplicate_pairs"] == 4 * 3
    methods = {m["name"]: m for m in report["methods"]}
    ddd = methods["ddd"]
    assert ddd["pairwise"]["best"]["f1"] == 1.0
    assert ddd["routing"]["best"]["f1"] == 1.0
    assert {c["threshold"] for c in ddd["routing"]["detector"]} >= {0.5}
    assert all(c["agreement_with_replay"] == 1.0 for c in ddd["routing"]["detector"])
    stories = ddd["stories"]  # each cluster one story: the gold clusters exactly
    assert (stories["groups"], stories["adjusted_rand_index"]) == (stories["clusters"], 1.0)
    assert stories["pairwise"]["f1"] == 1.0 and "stories" not in methods["imatch"]
    assert methods["imatch"]["pairwise"]["best_threshold"] is None
    assert len(ddd["pairwise"]["sweep"]) == 9
    assert (out / "f1_vs_threshold.png").read_bytes()[:4] == b"\x89PNG"
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert "| ddd |" in markdown and "c0/broken.html" in markdown
    captured = capsys.readouterr()
    assert "Max F1" in captured.out and "skipped c0/broken.html" in captured.err


def test_jsonl_corpus_in_timestamp_order(tmp_path: Path) -> None:
    rows = []
    for c in range(3):
        for k in range(2):
            rows.append(
                {
                    "id": f"{c}-{k}",
                    "text": article(c) + (" extra" * k),
                    "cluster": f"s{c}",
                    "timestamp": 1000.0 * (2 * c + k),
                }
            )
    path = tmp_path / "items.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    out = tmp_path / "r"
    assert (
        eval_main(
            [str(path), "-o", str(out), "--order", "timestamp", "--methods", "ddd", "simhash"]
        )
        == 0
    )
    report = orjson.loads((out / "report.json").read_bytes())
    assert report["methods"][0]["routing"]["best"]["f1"] == 1.0


def test_bad_arguments_are_reported(tmp_path: Path) -> None:
    assert eval_main([str(tmp_path / "missing"), "-o", str(tmp_path / "r")]) == 2
    with pytest.raises(argparse.ArgumentTypeError):
        parse_thresholds(["1.5"])
    assert parse_thresholds(["0.2:0.4:0.1", "0.9"]) == (0.2, 0.3, 0.4, 0.9)


def test_subcommand_registration() -> None:
    parser = argparse.ArgumentParser(prog="ndd-stream")
    add_eval_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["eval", "corpus", "--extract", "tags"])
    assert args.extract == "tags" and callable(args.handler)


_WITHOUT_EXTRA = (
    "import sys; sys.modules['datasketch'] = None; sys.modules['matplotlib'] = None; "
    "from ndd_stream.cli.main import main; sys.exit(main(sys.argv[1:]))"
)


def test_eval_works_without_the_eval_extra(tmp_path: Path) -> None:
    """After ``pip install -e .`` alone: minhash-lsh and the plot are left out, with a note."""
    import subprocess
    import sys

    root = write_cluster_corpus(tmp_path / "corpus", clusters=3, size=2)
    out = tmp_path / "report"
    run = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRA, "eval", str(root), "-o", str(out),
         "--thresholds", "0.5", "--no-progress"],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "minhash-lsh left out (datasketch not installed" in run.stderr
    assert "no plot (matplotlib not installed" in run.stderr
    methods = [m["name"] for m in orjson.loads((out / "report.json").read_bytes())["methods"]]
    assert "minhash-lsh" not in methods and "ddd" in methods
    assert not (out / "f1_vs_threshold.png").exists()

    asked = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRA, "eval", str(root), "--methods", "minhash-lsh"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert asked.returncode == 2
    assert asked.stderr.strip().splitlines() == [
        "ndd-stream eval: error: method minhash-lsh needs datasketch: "
        "pip install 'ndd-stream[eval]'"
    ]


def test_eval_help_is_for_users(capsys: pytest.CaptureFixture[str]) -> None:
    from ndd_stream.cli.main import main

    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "labelled corpus" in text and ":func:" not in text and "``" not in text
