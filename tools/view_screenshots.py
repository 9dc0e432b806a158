"""Screenshots of the web view for the README, from a real ``ndd-stream demo`` run.

Starts ``ndd-stream demo --keep-running`` (embedded broker, real worker, the bundled sample
feed at a few lines per second so the charts have a shape), opens the printed URL in
headless chromium and saves one PNG per view under docs/:

    python tools/view_screenshots.py               # docs/view-{now,decisions,pair,dlq}.png
    python tools/view_screenshots.py -o /tmp/shots

Needs Debian's chromium and chromium-driver and selenium (the ``test`` extra). Every wait
is bounded; the demo is stopped with SIGINT (its own cleanup stops worker and broker).
"""

from __future__ import annotations

import argparse
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAIR_TITLE = "Lake Orvine quake revised"  # a near duplicate of the sample feed with new figures


def read_until(proc: subprocess.Popen[str], pattern: str, timeout: float) -> re.Match[str]:
    """Lines of the demo's stdout until one matches ``pattern``."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
            continue
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"the demo ended (exit {proc.wait()}) before {pattern!r}")
        sys.stdout.write("demo | " + line)
        found = re.search(pattern, line)
        if found:
            return found
    raise SystemExit(f"no {pattern!r} from the demo within {timeout:g} s")


def chrome(width: int, height: int) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--hide-scrollbars"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def until(driver: Any, condition: Any, what: str, timeout: float = 60.0) -> None:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout, 0.25, (NoSuchElementException,
                                          StaleElementReferenceException)).until(condition, what)


def refreshed_twice(driver: Any) -> bool:
    """The live parts have been re-fetched at least twice (the page shows current data)."""
    return int(driver.find_element("css selector", "body").get_attribute("data-refreshed")
               or 0) >= 2


def shoot(url: str, out: Path) -> None:
    driver = chrome(1400, 1000)
    try:
        driver.get(url + "?span=5m")
        until(driver, refreshed_twice, "the Now page did not refresh")
        driver.save_screenshot(str(out / "view-now.png"))

        driver.get(url + "decisions?status=duplicate")
        until(driver, lambda d: PAIR_TITLE in d.find_element("css selector", "#decisions").text,
              "no duplicate listed")
        driver.save_screenshot(str(out / "view-decisions.png"))

        link = driver.find_element("xpath", f'//a[contains(., "{PAIR_TITLE}")]')
        driver.get(str(link.get_attribute("href")))
        until(driver, lambda d: d.find_elements("css selector", "#old mark.shared"),
              "the pair shows no shared passage")
        driver.save_screenshot(str(out / "view-pair.png"))

        driver.get(url + "dlq")
        until(driver, lambda d: d.find_elements("css selector", "#dlq tr.row"), "empty DLQ")
        driver.save_screenshot(str(out / "view-dlq.png"))
    finally:
        driver.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--rate", type=float, default=6.0, help="feed lines/s (default 6)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NDD_")}
    env.update(PYTHONUNBUFFERED="1", COLUMNS="160")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ndd_stream.cli", "demo", "--plain", "--keep-running",
         "--rate", str(args.rate), "--timeout", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    try:
        url = read_until(proc, r"view\s+(http://\S+/)", 120).group(1)
        read_until(proc, r"still running", 300)
        shoot(url, args.out)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    for name in ("now", "decisions", "pair", "dlq"):
        print(args.out / f"view-{name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
