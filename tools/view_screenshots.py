"""Screenshots of the web view for the README, from a real ``ndd-stream demo`` run.

The browser test that checks the demo's page (tests/test_view_browser.py::
test_demo_prints_the_view_and_keeps_serving_it: embedded broker, real worker, the bundled
sample feed, headless chromium) saves one PNG per view when NDD_VIEW_SCREENSHOTS names a
folder; this script runs it that way, with the feed at a few lines per second so the
charts have a shape:

    python tools/view_screenshots.py          # docs/view-{now,decisions,pair,novel,dlq}.png
    python tools/view_screenshots.py -o DIR

Needs Debian's chromium and chromium-driver and selenium (the ``test`` extra).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/test_view_browser.py::test_demo_prints_the_view_and_keeps_serving_it"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--rate", type=float, default=8.0, help="feed lines/s (default 8)")
    args = parser.parse_args()
    env = {**os.environ, "NDD_VIEW_SCREENSHOTS": str(args.out.resolve()),
           "NDD_VIEW_SCREENSHOTS_RATE": f"{args.rate:g}"}
    code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            TEST], cwd=ROOT, env=env)
    if code == 0:
        for name in ("now", "decisions", "pair", "novel", "dlq"):
            print(args.out / f"view-{name}.png")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
