"""``ndd-stream eval CORPUS [--methods ...] [--thresholds ...] [--extract MODE] [-o DIR]``,
or ``ndd-stream eval STREAM --pairs PAIRS.jsonl``: routing precision and recall on labelled
pairs of a timed stream (docs/EVALUATION.md).

Wired into the main CLI by :func:`add_eval_parser`; :func:`eval_main` runs it alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ndd_stream.cli.errors import file_error, user_file
from ndd_stream.core.detector import DEFAULT_THRESHOLD, NOVELTY_MODES
from ndd_stream.core.extract import DEFAULT_EXTRACT, EXTRACT_MODES
from ndd_stream.eval.corpus import JsonlFields
from ndd_stream.eval.extraction import extraction_modes
from ndd_stream.eval.methods.registry import DEFAULT_METHODS, FACTORIES, missing_package
from ndd_stream.eval.runner import DEFAULT_THRESHOLDS, EvalConfig

DEFAULT_DDD_THRESHOLD = DEFAULT_THRESHOLD  # the stream's and dedup's defaults, one source
DESCRIPTION = (
    "Measure near-duplicate detection quality on a labelled corpus (a folder of cluster "
    "folders, or a JSONL file with a cluster field), for DDD and the methods it is compared "
    "with: pairwise and streaming-routing precision, recall and F1 over a threshold sweep. "
    "Writes report.json, report.md and f1_vs_threshold.png. Corpora: docs/EVALUATION.md."
)


def parse_thresholds(values: list[str]) -> tuple[float, ...]:
    """Numbers, or ``start:stop:step`` ranges (stop included), all in (0, 1]."""
    out: list[float] = []
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            if ":" in part:
                start, stop, step = (float(x) for x in part.split(":"))
                if step <= 0:
                    raise argparse.ArgumentTypeError(f"step must be positive in {part!r}")
                k = 0
                while start + k * step <= stop + 1e-9:
                    out.append(round(start + k * step, 6))
                    k += 1
            else:
                out.append(float(part))
    bad = [t for t in out if not 0.0 < t <= 1.0]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"thresholds must be in (0, 1]: {bad or values}")
    return tuple(sorted(set(out)))


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpus", type=Path, help="folder of cluster folders, or a .jsonl file; "
                        "with --pairs: the stream (a folder of Reuters-21578 .sgm files, or "
                        "a .jsonl file of items with id, title, text, timestamp)")
    parser.add_argument(
        "--methods",
        nargs="+",
        default=list(DEFAULT_METHODS),
        choices=list(FACTORIES),
        metavar="METHOD",
        help=f"methods to compare (default: all installed): {', '.join(FACTORIES)}",
    )
    parser.add_argument(
        "--thresholds",
        nargs="+",
        default=None,
        metavar="T",
        help="similarity thresholds of the sweep: numbers or start:stop:step "
        "(default 0.02:1.0:0.02)",
    )
    parser.add_argument(
        "--extract",
        default=DEFAULT_EXTRACT,
        choices=list(extraction_modes()),
        help=f"text extraction for HTML items (default: {DEFAULT_EXTRACT})",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("eval-report"),
        help="report directory (default: ./eval-report)",
    )
    parser.add_argument(
        "--order",
        choices=["random", "timestamp"],
        default="random",
        help="stream order: seeded random, or the items' timestamp field",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random stream order")
    parser.add_argument("--window-hours", type=int, default=24, help="detection window")
    parser.add_argument(
        "--ddd-threshold",
        type=float,
        default=DEFAULT_DDD_THRESHOLD,
        help="DDD operating threshold also run through the core Detector",
    )
    labelled = parser.add_argument_group("labelled pairs of a stream")
    labelled.add_argument("--pairs", type=Path, nargs="+", default=None,
                          help="JSONL of pairs "
                          '{"a": id, "b": id, "label": "dup"|"not"|"unsure"}: measure the '
                          "routing of CORPUS as a stream on them (band-weighted P/R); "
                          "several files are pooled into one sample")
    labelled.add_argument("--min-body", type=int, default=200,
                          help="leave out stream items with a shorter body (default 200)")
    labelled.add_argument("--novelty", choices=list(NOVELTY_MODES), default="auto",
                          help="the detector's novelty mode (default auto)")
    jsonl = parser.add_argument_group("JSONL corpora")
    jsonl.add_argument("--text-field", default="text")
    jsonl.add_argument("--cluster-field", default="cluster")
    jsonl.add_argument("--id-field", default="id")
    jsonl.add_argument("--timestamp-field", default="timestamp")
    jsonl.add_argument("--title-field", default="title")
    jsonl.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    parser.set_defaults(handler=_run)


def add_eval_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the ``eval`` sub-command to an existing CLI."""
    parser = subparsers.add_parser(
        "eval",
        help="measure detection quality on a labelled corpus, against baseline methods",
        description=DESCRIPTION,
    )
    _configure(parser)
    return parser


def _run(args: argparse.Namespace) -> int:
    from ndd_stream.eval.report import write_reports
    from ndd_stream.eval.runner import run

    try:
        thresholds = parse_thresholds(args.thresholds) if args.thresholds else DEFAULT_THRESHOLDS
    except (argparse.ArgumentTypeError, ValueError) as exc:
        print(f"ndd-stream eval: error: {exc}", file=sys.stderr)
        return 2
    if args.output.exists() and not args.output.is_dir():  # before the work, not after
        print(f"ndd-stream eval: error: -o {args.output}: not a directory", file=sys.stderr)
        return 2
    if args.pairs is not None:
        return _run_pairs(args, thresholds if args.thresholds else None)
    for name in args.methods:
        package = missing_package(name)
        if package is not None:
            print(f"ndd-stream eval: error: method {name} needs {package}: "
                  "pip install 'ndd-stream[eval]'", file=sys.stderr)
            return 2
    left_out = {n: p for n in FACTORIES if (p := missing_package(n)) and n not in args.methods}
    if left_out and args.methods == list(DEFAULT_METHODS):
        print(f"note: {', '.join(left_out)} left out ({', '.join(left_out.values())} not "
              "installed; pip install 'ndd-stream[eval]')", file=sys.stderr)
    config = EvalConfig(
        corpus=args.corpus,
        methods=tuple(dict.fromkeys(args.methods)),
        thresholds=thresholds,
        extract=args.extract,
        order=args.order,
        seed=args.seed,
        window_hours=args.window_hours,
        ddd_threshold=args.ddd_threshold,
        fields=JsonlFields(
            text=args.text_field,
            cluster=args.cluster_field,
            identity=args.id_field,
            timestamp=args.timestamp_field,
            title=args.title_field,
        ),
        progress=False if args.no_progress else None,
    )
    try:
        result = run(config)
    except OSError as exc:  # named by ndd_stream.files: the corpus, or a file in it
        print(f"ndd-stream eval: error: {file_error(exc, args.corpus)}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"ndd-stream eval: error: {exc}", file=sys.stderr)
        return 2
    with user_file(args.output, "-o"):
        paths = write_reports(result, args.output)
    if "plot" not in paths:
        print("note: no plot (matplotlib not installed; pip install 'ndd-stream[eval]')",
              file=sys.stderr)
    for s in result.corpus.skipped:
        print(f"skipped {s.source}: {s.reason}", file=sys.stderr)
    print(paths["markdown"].read_text(encoding="utf-8"))
    print(f"reports: {', '.join(str(p) for p in paths.values())}", file=sys.stderr)
    return 0


def _run_pairs(args: argparse.Namespace, thresholds: tuple[float, ...] | None) -> int:
    from ndd_stream.eval.pairs_run import (
        DEFAULT_SWEEP,
        PairsConfig,
        as_json,
        markdown,
        run_pairs,
    )
    from ndd_stream.jsonio import dumps

    if args.extract not in EXTRACT_MODES:
        print(f"ndd-stream eval: error: --pairs needs one of the stream's extraction modes "
              f"{', '.join(EXTRACT_MODES)}", file=sys.stderr)
        return 2
    config = PairsConfig(stream=args.corpus, pairs=tuple(args.pairs),
                         threshold=args.ddd_threshold,
                         thresholds=thresholds or DEFAULT_SWEEP, novelty=args.novelty,
                         window_hours=args.window_hours, extract=args.extract,
                         min_body=args.min_body)
    try:
        result = run_pairs(config)
    except OSError as exc:  # named by ndd_stream.files: the corpus or the pairs
        print(f"ndd-stream eval: error: {file_error(exc, args.corpus)}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"ndd-stream eval: error: {exc}", file=sys.stderr)
        return 2
    text = markdown(result)
    with user_file(args.output, "-o"):
        args.output.mkdir(parents=True, exist_ok=True)
        (args.output / "pairs-report.md").write_text(text, encoding="utf-8")
        (args.output / "pairs-report.json").write_bytes(dumps(as_json(result)))
    print(text)
    print(f"reports: {args.output / 'pairs-report.md'}, {args.output / 'pairs-report.json'}",
          file=sys.stderr)
    return 0


def eval_main(argv: list[str]) -> int:
    """Stand-alone entry point: ``eval_main(["CORPUS", "-o", "out"])``."""
    parser = argparse.ArgumentParser(prog="ndd-stream eval", description=DESCRIPTION)
    _configure(parser)
    args = parser.parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(eval_main(sys.argv[1:]))
