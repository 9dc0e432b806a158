"""``ndd-stream view``: serve the web view of the decisions until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType
from typing import Any

from ndd_stream.settings import Settings

DEFAULT_PORT = 6067
LOOPBACK = ("127.0.0.1", "localhost", "::1")
BROKER_WAIT_S = 5.0


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser(
        "view", help="serve a live web page of the decisions (all workers)",
        description="Read the audit, unique, duplicate and DLQ topics and serve a web page: "
        "rates and shares now, recent decisions, each duplicate beside what it duplicates, "
        "rejected items, and the worker group's lag per partition. Joins no consumer group "
        "and commits nothing. Connection and topic names come from the NDD_* settings.")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port (default {DEFAULT_PORT}; 0 = any free port)")
    p.add_argument("--from-beginning", action="store_true",
                   help="read the topics from their start instead of the last --backfill "
                   "records of each partition")
    p.add_argument("--backfill", type=int, default=500, metavar="N",
                   help="records per partition read at start (default 500)")
    p.add_argument("--keep-decisions", type=int, default=5000, metavar="N",
                   help="recent decisions held in memory (default 5000)")
    p.add_argument("--text-mb", type=int, default=64, metavar="MB",
                   help="memory for item texts, oldest dropped first (default 64)")
    p.add_argument("--allowed-hosts", dest="view_allowed_hosts", default=None, metavar="NAMES",
                   help="without a login, also answer for these Host names (comma separated; "
                   ".example.org for a domain; NDD_VIEW_ALLOWED_HOSTS); localhost, loopback "
                   "addresses and the bind address always work, other names get 421 (a guard "
                   "against DNS rebinding)")
    handlers["view"] = cmd_view


def cmd_view(args: argparse.Namespace, settings: Settings) -> int:
    """Serve until Ctrl-C/SIGTERM. Bad options: UsageError (exit 2); no broker at start:
    one line, exit 3. A broker lost later is shown on the page while the view retries."""
    from ndd_stream.cli.errors import UsageError
    from ndd_stream.kafka.acls import view_denied
    from ndd_stream.kafka.probe import broker_error, unreachable_message
    from ndd_stream.view.model import Limits
    from ndd_stream.view.server import ViewServer

    if args.backfill < 0:
        raise UsageError(f"--backfill {args.backfill}: allowed >= 0")
    if args.keep_decisions < 1 or args.text_mb < 1:
        raise UsageError("--keep-decisions and --text-mb: allowed >= 1")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: allowed [0, 65535]")
    reason = broker_error(settings, BROKER_WAIT_S)
    if reason is not None:
        message = unreachable_message(settings, BROKER_WAIT_S, reason)
        sys.stderr.write(f"ndd-stream view: error: {message}\n")
        return 2 if reason.refused else 3
    denied = view_denied(settings)
    if denied is not None:
        sys.stderr.write(f"ndd-stream view: error: {denied}\n")
        return 3
    limits = Limits(decisions=args.keep_decisions, text_bytes=args.text_mb * 1024 * 1024)
    server = ViewServer(settings, host=args.host, port=args.port, limits=limits,
                        from_beginning=args.from_beginning, backfill=args.backfill)
    try:
        url = server.start()
    except OSError as exc:
        raise UsageError(str(exc)) from None
    brokers = settings.bootstrap_servers()
    login = "login required" if settings.view_password is not None else "no login"
    print(f"ndd-stream view: {url}  (brokers {brokers}; {login}; Ctrl-C to stop)", flush=True)
    if settings.view_password is None and args.host not in LOOPBACK:
        sys.stderr.write(f"ndd-stream view: warning: listening on {args.host} without a login; "
                         "set NDD_VIEW_PASSWORD or keep it behind an authenticating proxy "
                         "(it answers only for localhost and NDD_VIEW_ALLOWED_HOSTS)\n")

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)  # a container stop ends it like Ctrl-C
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    sys.stdout.flush()
    return 0
