"""What the demo's modules share: exit codes, default limits, options and errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1  # timeout, worker died, lines lost
EXIT_USAGE = 2  # bad option or feed file
EXIT_BROKER = 3  # no broker binary / broker did not start
EXIT_INTERRUPTED = 130

DEFAULT_RATE = 50.0  # lines per second: the sample feed streams in about 3 s
DEFAULT_TIMEOUT = 120.0
DEMO_PARTITIONS = 4
#: Tansu answers a group join after half the session timeout: 6 s keeps the join at 3 s.
DEMO_SESSION_TIMEOUT_S = 6.0


class DemoError(RuntimeError):
    """The demo could not complete; the message says what and where to look."""


class BrokerUnavailable(DemoError):
    """The embedded broker has no binary here or did not start."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: stop everything, as KeyboardInterrupt does."""



@dataclass(frozen=True)
class DemoOptions:
    """The demo's own options (detection options travel in Settings)."""

    feed: Path | None = None
    rate: float = DEFAULT_RATE
    timeout: float = DEFAULT_TIMEOUT
    keep_running: bool = False
    plain: bool = False
    demo_dir: Path | None = None
    report: Path | None = None
    view_port: int = 0  # the web view's port; 0 = any free port
