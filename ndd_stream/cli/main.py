"""The ``ndd-stream`` command line. Each subcommand builds the one Settings object
(environment ``NDD_*`` plus its options) and hands it to the code that does the work."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from ndd_stream import __version__
from ndd_stream.cli.errors import (
    FileError,
    UsageError,
    file_error,
    read_text,
    settings_error,
    settings_source_error,
)
from ndd_stream.core.detector import NOVELTY_MODES
from ndd_stream.core.extract import EXTRACT_MODES
from ndd_stream.core.stories import KEEP_POLICIES
from ndd_stream.settings import Settings

Handler = Callable[[argparse.Namespace, Settings], int]

GC_THRESHOLDS = (20_000, 20, 20)
"""The cyclic collector's thresholds while a command runs (Python's: 700, 10, 10). Each
item leaves a few containers that live until it is decided (the worker: until its batch
ends), so at Python's a backlog ran a young collection every few items and a full one every
few thousand (docs/BENCHMARK.md: 0.85 s against 0.3 s of a worker's Reuters day; `dedup`
0.11 s against 0.03 s at 0.3)."""

# CLI option -> Settings field, for the detection and item-format options.
_DETECTION_OPTIONS: dict[str, dict[str, Any]] = {
    "threshold": {"type": float, "help": "doc_q threshold of a near duplicate (default 0.3)"},
    "q": {"type": int, "help": "q-gram length (default 4)"},
    "window_hours": {"type": int, "help": "hours before the item's hour in its window (24)"},
    "scope": {"help": "comparison scope: channel (default), global, or a field name"},
    "extract": {"choices": EXTRACT_MODES, "help": "text extraction mode (default main)"},
    "novelty": {"choices": NOVELTY_MODES, "help": "judge the best match: a templated report "
                "with other figures or subject is routed unique (default auto: plain text "
                "yes, HTML no)"},
    "keep": {"choices": KEEP_POLICIES, "help": "which version of a story a reader keeps: "
             "first (default), or complete (a more complete version is routed unique, "
             "superseding the kept one)"},
    "id_field": {"help": "identity field (default id)"},
    "channel_field": {"help": "channel field (default channel)"},
    "title_field": {"help": "title field (default title; empty for none)"},
    "text_fields": {"help": "body fields, comma separated (default text,body,content)"},
    "timestamp_fields": {"help": "event-time fields (default timestamp,published_at)"},
}


def _add_detection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("detection (override NDD_* variables)")
    for name, kwargs in _DETECTION_OPTIONS.items():
        group.add_argument("--" + name.replace("_", "-"), dest=name, default=None, **kwargs)
    group.add_argument("--case-sensitive", dest="case_sensitive", action="store_true",
                       default=None, help="keep letter case (the paper's exact normal form)")


def build_settings(args: argparse.Namespace) -> Settings:
    """Settings from the environment, overridden by the options given on the command line.

    Raises UsageError, with what the user typed and the allowed values, for bad settings.
    """
    fields = Settings.model_fields
    overrides = {k: v for k, v in vars(args).items() if k in fields and v is not None}
    config = getattr(args, "config", None)
    if config is not None:
        read_text(Path(config), "--config")  # unreadable, a directory, binary: one line
    try:
        return Settings(_env_file=config, **overrides)
    except ValidationError as exc:
        raise UsageError("invalid settings: " + settings_error(exc, set(overrides), config)) \
            from None
    except SettingsError as exc:  # e.g. NDD_SCOPE_MAP that is not JSON
        raise UsageError(f"invalid settings: {settings_source_error(exc)}") from None


def _cmd_dedup(args: argparse.Namespace, settings: Settings) -> int:
    from ndd_stream.dedup import dedup_file

    try:
        summary = dedup_file(args.input, args.output, settings.detector_config(),
                             settings.item_format(), event_order=args.event_order,
                             lookup_thread=settings.lookup_thread_for(args.input))
    except OSError as exc:  # the input or the output file (dedup_file names it)
        raise file_error(exc, args.input) from None
    from ndd_stream.jsonio import dumps

    sys.stderr.write("summary: " + dumps(summary.as_dict()).decode() + "\n")
    return 0


def make_parser(only: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    """The parser and each subcommand's handler; ``only`` names the subcommand to run:
    ``"dedup"`` builds that one alone, and the service's commands (worker, topics, produce,
    tail, settings) leave out those whose parsers import their modules (the demo, the web
    view, ``eval``): about a third of a second that a ``dedup`` of a file, or a worker's
    start, would otherwise pay on every run."""
    parser = argparse.ArgumentParser(
        prog="ndd-stream",
        description="Streaming near-duplicate filter for news (DDD, q-gram doc_q, 24 h window).",
    )
    parser.add_argument("--version", action="version", version=f"ndd-stream {__version__}")
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help="settings file (NDD_NAME=value lines, .env format); the "
                        "environment and command-line options override it")
    sub = parser.add_subparsers(dest="command", required=True)
    handlers: dict[str, Handler] = {}

    p = sub.add_parser("dedup", help="decide a JSONL file of items offline, in file order")
    p.add_argument("input", type=Path, help="JSONL file of news items")
    p.add_argument("-o", "--output", type=Path, default=None,
                   help="decisions JSONL (default: stdout)")
    p.add_argument("--event-order", action="store_true",
                   help="decide the items in event-time order (ties in file order), as the "
                   "worker decides a cross-channel scope; reads the whole file first")
    _add_detection_options(p)
    handlers["dedup"] = _cmd_dedup

    for register in _extra_commands() if only != "dedup" else []:
        register(sub, handlers, only)
    for command in sub.choices.values():
        # --config after the subcommand, too (SUPPRESS: an absent one keeps the top-level one)
        command.add_argument("--config", type=Path, default=argparse.SUPPRESS, metavar="FILE",
                             help="settings file (NDD_NAME=value lines, .env format)")
        command.set_defaults(command_parser=command)  # its usage goes with its errors
    return parser, handlers


def _extra_commands() -> list[Callable[[Any, dict[str, Handler], str | None], None]]:
    """Subcommands living in their own modules (worker, topics, produce, tail, demo, eval)."""
    registrars: list[Callable[[Any, dict[str, Handler], str | None], None]] = []
    try:
        from ndd_stream.cli.commands import register_all
    except ImportError:
        return registrars
    registrars.append(register_all)
    return registrars


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (its first word that is neither an option nor the
    value of the top-level ``--config``), or None."""
    words = iter(argv)
    for word in words:
        if word == "--config":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """The ``ndd-stream`` console script. User errors: one line, exit code 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser, handlers = make_parser(only=_command_of(argv))
    args = parser.parse_args(argv)
    command: argparse.ArgumentParser = args.command_parser
    try:
        settings = build_settings(args)
    except FileError as exc:
        sys.stderr.write(f"{command.prog}: error: {exc}\n")
        return 2
    except UsageError as exc:
        command.error(str(exc))  # with the subcommand's usage; exits 2
    if settings.no_kernels:
        from ndd_stream.core import kernels

        kernels.use_numpy()
    # What is alive now (modules, classes, the settings) lives as long as the process:
    # frozen, every full collection skips its ~40k objects.
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        return handlers[args.command](args, settings)
    except UsageError as exc:
        sys.stderr.write(f"{command.prog}: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
