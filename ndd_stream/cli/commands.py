"""Subcommands beyond ``dedup``: worker, settings, topics, produce, tail, demo, view,
eval.

Each maps argparse onto a function that takes the one Settings object; imports are
deferred so ``ndd-stream dedup`` never pays for Faust or Kafka clients.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ndd_stream.settings import Settings, env_text


def _settings_help() -> str:
    import shutil

    from ndd_stream.settings_doc import help_epilog

    return help_epilog(shutil.get_terminal_size().columns - 2)  # argparse's own width


class _PreformattedEpilog(argparse.HelpFormatter):
    """Wraps the description like argparse does; keeps text already laid out in lines (the
    settings epilog, wrapped to the same width by :func:`help_epilog`) as it is."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _cmd_settings(args: argparse.Namespace, settings: Settings) -> int:
    from ndd_stream.settings import SETTING_GROUPS
    from ndd_stream.settings_doc import env_name, markdown

    if args.markdown:
        sys.stdout.write(markdown())
        return 0
    values = settings.model_dump()
    for title, names in SETTING_GROUPS:
        sys.stdout.write(f"# {title}\n")
        for name in names:
            value = values[name]
            shown = "**********" if name.endswith("password") and value else env_text(value)
            sys.stdout.write(f"{env_name(name)}={shown}\n")
    return 0


def _cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    import faulthandler

    from ndd_stream.worker.guarantee import guarantee_for
    from ndd_stream.worker.startup import Preflight

    faulthandler.enable()  # a crash in a client library leaves every thread's stack
    guarantee = guarantee_for(settings)
    checks = Preflight(settings, guarantee)  # the broker answers while the worker imports
    from ndd_stream.worker.app import run_worker

    return run_worker(settings, guarantee, checks)


def _cmd_topics(args: argparse.Namespace, settings: Settings) -> int:
    from ndd_stream.cli.io_commands import topics_apply

    return topics_apply(settings, create_only=args.create_only, check_only=args.check_only,
                        replication_factor=args.replication_factor, timeout=args.timeout)


def _cmd_produce(args: argparse.Namespace, settings: Settings) -> int:
    from ndd_stream.cli.io_commands import produce

    return produce(settings, args.path, args.topic, args.rate)


def _cmd_tail(args: argparse.Namespace, settings: Settings) -> int:
    """Stopped by Ctrl-C or SIGTERM, the process ends at once (``os._exit``, output
    flushed): the tail holds nothing to clean up (its consumer commits nothing, its close
    is bounded), and Python's teardown of the Kafka client and modules took up to 0.9 s
    under load, most of the time between a Ctrl-C and the prompt."""
    import os

    from ndd_stream.cli.io_commands import tail
    from ndd_stream.kafka.tail import stop_on_signals

    with stop_on_signals() as stop:
        code = tail(settings, args.topic, not args.from_end, args.max_messages, args.timeout,
                    stop=stop)
    if stop.is_set():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


LIGHT_COMMANDS = frozenset({"worker", "settings", "topics", "produce", "tail"})
"""The subcommands registered here whose parsers import nothing of their own."""


def register_all(sub: Any, handlers: dict[str, Any], only: str | None = None) -> None:
    """Add the subcommands to the ``ndd-stream`` parser; with ``only`` one of
    :data:`LIGHT_COMMANDS`, those alone (the others' parsers import the demo, the web view
    and the evaluation)."""
    p = sub.add_parser("worker", help="run the streaming service (a Faust worker)",
                       description="Consume raw news from Kafka, decide, route to the unique, "
                       "duplicate and DLQ topics. Configured by NDD_* variables or a "
                       "--config file.",
                       epilog=_settings_help(), formatter_class=_PreformattedEpilog)
    p.add_argument("--guarantee", dest="guarantee", default=None,
                   choices=["exactly-once", "at-least-once"],
                   help="overrides NDD_GUARANTEE (see below)")
    handlers["worker"] = _cmd_worker

    p = sub.add_parser("settings", help="print the settings in effect, or their reference",
                       description="Print every setting as NDD_NAME=value, as the other "
                       "commands would see it (options > environment > --config file > "
                       "default; passwords hidden).")
    p.add_argument("--markdown", action="store_true",
                   help="print the reference of every setting (docs/CONFIGURATION.md)")
    from ndd_stream.cli.main import _add_detection_options

    _add_detection_options(p)  # so that it shows what the other commands' options change
    handlers["settings"] = _cmd_settings

    p = sub.add_parser("topics", help="create or check the topics of topics/*.yaml")
    p.add_argument("action", choices=["apply"], help="apply: create missing, check existing")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--create-only", action="store_true",
                      help="create missing topics; report but do not fail on differences")
    mode.add_argument("--check-only", action="store_true", help="create nothing, only check")
    p.add_argument("--replication-factor", type=int, default=None,
                   help="override the definitions' replication factor")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for Kafka")
    handlers["topics"] = _cmd_topics

    p = sub.add_parser("produce", help="load a JSONL file of news items into the raw topic")
    p.add_argument("path", type=Path, help="JSONL file, one item per line")
    p.add_argument("--topic", default=None, help="target topic (default: first raw topic)")
    p.add_argument("--rate", type=float, default=None, help="at most this many items/s")
    handlers["produce"] = _cmd_produce

    p = sub.add_parser("tail", help="follow an output topic and print each decision")
    p.add_argument("topic", nargs="?", default=None, help="topic (default: the unique topic)")
    p.add_argument("--from-end", action="store_true", help="only new records")
    p.add_argument("-n", "--max-messages", type=int, default=None, help="stop after N records")
    p.add_argument("--timeout", type=float, default=None, help="stop after S idle seconds")
    handlers["tail"] = _cmd_tail
    if only in LIGHT_COMMANDS:
        return

    try:
        from ndd_stream.cli.demo import register as register_demo
    except ImportError:
        pass
    else:
        register_demo(sub, handlers)
    from ndd_stream.cli.web_view import register as register_view

    register_view(sub, handlers)
    try:
        from ndd_stream.cli.eval import add_eval_parser
    except ImportError:
        pass
    else:
        add_eval_parser(sub)
        handlers["eval"] = lambda args, settings: int(args.handler(args))
